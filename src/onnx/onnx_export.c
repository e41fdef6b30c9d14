#include "onnx/onnx_export.h"

#include "core/strmap.h"
#include "onnx.pb-c.h"

#include <string.h>

/* raw_data is little-endian; blobs hold host order. The importer copies
 * raw_data as it is too, so segrt targets little-endian hosts only. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "onnx_export.c writes tensor data in host order, which must be little-endian"
#endif

/* The most a serialized protobuf message may hold (protobuf's 2 GiB limit,
 * which its parsers, and sg_onnx_import_file, enforce). */
#define SG_PB_MAX_BYTES ((uint64_t)INT32_MAX)

/* Every protobuf-c struct of one export lives in a chain of blocks freed
 * together; strings, int/float lists and tensor data are borrowed from the
 * graph, never copied. */
typedef struct ex_block {
    struct ex_block *next;
    max_align_t data[];
} ex_block;

typedef struct exporter {
    const sg_graph *g;
    ex_block *blocks;
    uint8_t *in_inputs;  /* per value: listed in g->inputs */
    uint8_t *in_outputs; /* per value: listed in g->outputs */
    uint8_t *produced;   /* per value: an output of a live node */
    uint8_t *read;       /* per value: an input of a live node */
    uint8_t *is_init;    /* per value: exported as an initializer */
} exporter;

static char empty_name[] = "";

static void *ex_alloc(exporter *ex, size_t n, size_t size)
{
    if (n == 0)
        n = 1;
    if (size && n > (SIZE_MAX - sizeof(ex_block)) / size) {
        sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "ONNX export: an allocation of %zu x %zu bytes overflows",
                 n, size);
        return NULL;
    }
    ex_block *b = sg_calloc(1, sizeof *b + n * size);
    if (!b)
        return NULL;
    b->next = ex->blocks;
    ex->blocks = b;
    return b->data;
}

static void *ex_new(exporter *ex, size_t size, const void *init)
{
    void *p = ex_alloc(ex, 1, size);
    if (p)
        memcpy(p, init, size);
    return p;
}

/* A new protobuf-c message of type, set to its INIT value. */
#define EX_NEW(ex, type, init) ((type *)ex_new((ex), sizeof(type), &(type)init))

static void ex_free(exporter *ex)
{
    while (ex->blocks) {
        ex_block *next = ex->blocks->next;
        free(ex->blocks);
        ex->blocks = next;
    }
    free(ex->in_inputs);
    free(ex->in_outputs);
    free(ex->produced);
    free(ex->read);
    free(ex->is_init);
}

/* protobuf-c's structs take char * where it only reads. */
static char *mut(const char *s) { return (char *)s; }

/* ------------------------------------------------------------------------ */
/* Tensors and types                                                         */

/* A TensorProto over data (borrowed) with dtype and dims; what names the
 * tensor in messages. */
static sg_status tensor_proto(exporter *ex, const char *name, const char *what, sg_dtype dt,
                              int32_t rank, const int64_t *dims, const sg_blob *data,
                              Onnx__TensorProto **out)
{
    if (!sg_dtype_is_supported(dt))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s has dtype %d, which ONNX export does not support",
                        what, (int)dt);
    if (rank < 0 || rank > SEGRT_MAX_RANK)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s has rank %d", what, rank);
    int64_t numel, bytes;
    if (!sg_dims_product(dims, rank, &numel) || !sg_mul_i64(numel, (int64_t)segrt_dtype_size(dt), &bytes))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: the product of its dims overflows", what);
    size_t have = data ? sg_blob_size(data) : 0;
    if ((uint64_t)bytes != have)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s holds %zu bytes of data, its dims and dtype (%s) need %lld", what, have,
                        segrt_dtype_name(dt), (long long)bytes);
    Onnx__TensorProto *t = EX_NEW(ex, Onnx__TensorProto, ONNX__TENSOR_PROTO__INIT);
    int64_t *d = ex_alloc(ex, (size_t)rank, sizeof *d);
    if (!t || !d)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    if (rank)
        memcpy(d, dims, sizeof *d * (size_t)rank);
    t->name = mut(name);
    t->n_dims = (size_t)rank;
    t->dims = rank ? d : NULL;
    t->has_data_type = 1;
    t->data_type = (int32_t)dt;
    t->has_raw_data = 1;
    t->raw_data.len = have;
    t->raw_data.data = have ? sg_blob_data(data) : NULL;
    *out = t;
    return SEGRT_OK;
}

static sg_status type_proto(exporter *ex, sg_dtype dt, const sg_shape *s, Onnx__TypeProto **out)
{
    Onnx__TypeProto *tp = EX_NEW(ex, Onnx__TypeProto, ONNX__TYPE_PROTO__INIT);
    Onnx__TypeProto__Tensor *tt = EX_NEW(ex, Onnx__TypeProto__Tensor, ONNX__TYPE_PROTO__TENSOR__INIT);
    if (!tp || !tt)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    if (dt != SEGRT_DTYPE_UNDEFINED) {
        tt->has_elem_type = 1;
        tt->elem_type = (int32_t)dt;
    }
    if (s->rank >= 0) {
        int32_t rank = s->rank < SEGRT_MAX_RANK ? s->rank : SEGRT_MAX_RANK;
        Onnx__TensorShapeProto *sp = EX_NEW(ex, Onnx__TensorShapeProto, ONNX__TENSOR_SHAPE_PROTO__INIT);
        Onnx__TensorShapeProto__Dimension **dims = ex_alloc(ex, (size_t)rank, sizeof *dims);
        if (!sp || !dims)
            return SEGRT_ERROR_OUT_OF_MEMORY;
        for (int32_t i = 0; i < rank; i++) {
            Onnx__TensorShapeProto__Dimension *d =
                EX_NEW(ex, Onnx__TensorShapeProto__Dimension, ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT);
            if (!d)
                return SEGRT_ERROR_OUT_OF_MEMORY;
            if (s->d[i].size >= 0) {
                d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
                d->dim_value = s->d[i].size;
            } else if (s->d[i].sym >= 0 && s->d[i].sym < ex->g->n_syms) {
                d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
                d->dim_param = ex->g->syms[s->d[i].sym];
            } /* else: an empty dimension, unknown */
            dims[i] = d;
        }
        sp->n_dim = (size_t)rank;
        sp->dim = dims;
        tt->shape = sp;
    }
    *out = tp;
    return SEGRT_OK;
}

static sg_status value_info(exporter *ex, const sg_value *v, const sg_shape *shape,
                            Onnx__ValueInfoProto **out)
{
    Onnx__ValueInfoProto *vi = EX_NEW(ex, Onnx__ValueInfoProto, ONNX__VALUE_INFO_PROTO__INIT);
    if (!vi)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    vi->name = v->name;
    SG_TRY(type_proto(ex, v->dtype, shape, &vi->type));
    *out = vi;
    return SEGRT_OK;
}

/* ------------------------------------------------------------------------ */
/* Nodes                                                                     */

static sg_status attr_proto(exporter *ex, const sg_node *n, const sg_attr *a,
                            Onnx__AttributeProto **out)
{
    Onnx__AttributeProto *p = EX_NEW(ex, Onnx__AttributeProto, ONNX__ATTRIBUTE_PROTO__INIT);
    if (!p)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    if (!a->name || !a->name[0])
        return sg_node_error(n, SEGRT_ERROR_INVALID_ARGUMENT, "an attribute has no name");
    bool no_data = (a->kind == SG_ATTR_INTS && !a->ints) || (a->kind == SG_ATTR_FLOATS && !a->floats) ||
                   (a->kind == SG_ATTR_STRINGS && !a->strings);
    if (a->n < 0 || (no_data && a->n > 0))
        return sg_node_error(n, SEGRT_ERROR_INVALID_ARGUMENT, "attribute `%s` has %d elements and no data",
                             a->name, a->n);
    p->name = a->name;
    p->has_type = 1;
    switch (a->kind) {
    case SG_ATTR_INT:
        p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
        p->has_i = 1;
        p->i = a->i;
        break;
    case SG_ATTR_FLOAT:
        p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
        p->has_f = 1;
        p->f = a->f;
        break;
    case SG_ATTR_STRING:
        p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
        p->has_s = 1;
        p->s.len = a->s ? strlen(a->s) : 0;
        p->s.data = p->s.len ? (uint8_t *)a->s : NULL;
        break;
    case SG_ATTR_INTS:
        p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
        p->n_ints = (size_t)a->n;
        p->ints = a->n ? a->ints : NULL;
        break;
    case SG_ATTR_FLOATS:
        p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
        p->n_floats = (size_t)a->n;
        p->floats = a->n ? a->floats : NULL;
        break;
    case SG_ATTR_STRINGS: {
        p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS;
        ProtobufCBinaryData *s = ex_alloc(ex, (size_t)a->n, sizeof *s);
        if (!s)
            return SEGRT_ERROR_OUT_OF_MEMORY;
        for (int32_t i = 0; i < a->n; i++) {
            s[i].len = a->strings[i] ? strlen(a->strings[i]) : 0;
            s[i].data = s[i].len ? (uint8_t *)a->strings[i] : NULL;
        }
        p->n_strings = (size_t)a->n;
        p->strings = a->n ? s : NULL;
        break;
    }
    case SG_ATTR_TENSOR: {
        p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
        char what[256];
        snprintf(what, sizeof what, "node `%s`: tensor attribute `%s`", n->name, a->name);
        SG_TRY(tensor_proto(ex, NULL, what, a->t_dtype, a->t_rank, a->t_dims, a->t_data, &p->t));
        break;
    }
    case SG_ATTR_GRAPH: /* an If is folded before a plan is written (sg_pass_fold_if) */
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "graph attribute `%s`: a plan holds no branches", a->name);
    default:
        return sg_node_error(n, SEGRT_ERROR_INVALID_ARGUMENT, "attribute `%s` has unknown kind %d",
                             a->name, (int)a->kind);
    }
    *out = p;
    return SEGRT_OK;
}

static char **value_names(exporter *ex, const int32_t *idx, int32_t count)
{
    char **names = ex_alloc(ex, (size_t)count, sizeof *names);
    if (!names)
        return NULL;
    for (int32_t i = 0; i < count; i++)
        names[i] = idx[i] >= 0 ? ex->g->values[idx[i]].name : empty_name;
    return names;
}

static sg_status node_proto(exporter *ex, const sg_node *n, Onnx__NodeProto **out)
{
    if ((int)n->op < 0 || (int)n->op >= (int)SG_OP_COUNT)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "node `%s` has unknown operator %d", n->name,
                        (int)n->op);
    Onnx__NodeProto *p = EX_NEW(ex, Onnx__NodeProto, ONNX__NODE_PROTO__INIT);
    if (!p)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    p->name = n->name;
    p->op_type = mut(sg_op_name(n->op));
    if (sg_op_is_segrt(n->op))
        p->domain = mut(SG_SEGRT_DOMAIN);
    /* Trailing omitted inputs are left out, as the loader drops them. */
    int32_t n_in = n->n_inputs;
    while (n_in > 0 && n->inputs[n_in - 1] < 0)
        n_in--;
    p->n_input = (size_t)n_in;
    p->n_output = (size_t)n->n_outputs;
    if (!(p->input = value_names(ex, n->inputs, n_in)) ||
        !(p->output = value_names(ex, n->outputs, n->n_outputs)))
        return SEGRT_ERROR_OUT_OF_MEMORY;
    if (n->n_attrs > 0) {
        p->attribute = ex_alloc(ex, (size_t)n->n_attrs, sizeof *p->attribute);
        if (!p->attribute)
            return SEGRT_ERROR_OUT_OF_MEMORY;
        for (int32_t i = 0; i < n->n_attrs; i++)
            SG_TRY(attr_proto(ex, n, &n->attrs[i], &p->attribute[i]));
        p->n_attribute = (size_t)n->n_attrs;
    }
    *out = p;
    return SEGRT_OK;
}

/* ------------------------------------------------------------------------ */
/* Checks: what the loader would refuse is refused here, with the reason.    */

static sg_status mark_value(exporter *ex, sg_strmap *names, uint8_t *seen, int32_t v)
{
    const sg_graph *g = ex->g;
    if (v < 0 || v >= g->n_values)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "value index %d is out of range", v);
    if (seen[v])
        return SEGRT_OK;
    seen[v] = 1;
    const char *name = g->values[v].name;
    if (!name || !name[0])
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "value %d has no name", v);
    if (sg_strmap_get(names, name) >= 0)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "two values are named `%s`", name);
    return sg_strmap_put(names, name, v);
}

static sg_status check_graph(exporter *ex, sg_strmap *names, uint8_t *seen)
{
    const sg_graph *g = ex->g;
    if (g->opset <= 0)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "the graph has no opset of the default domain");
    for (int32_t i = 0; i < g->n_inputs; i++) {
        int32_t v = g->inputs[i];
        SG_TRY(mark_value(ex, names, seen, v));
        if (ex->in_inputs[v])
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "graph input `%s` is listed twice",
                            g->values[v].name);
        ex->in_inputs[v] = 1;
        if (g->values[v].dtype == SEGRT_DTYPE_UNDEFINED)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "graph input `%s` has no element type",
                            g->values[v].name);
    }
    if (g->n_outputs == 0)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "the graph has no outputs");
    for (int32_t i = 0; i < g->n_outputs; i++) {
        int32_t v = g->outputs[i];
        SG_TRY(mark_value(ex, names, seen, v));
        if (ex->in_outputs[v])
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "graph output `%s` is listed twice",
                            g->values[v].name);
        ex->in_outputs[v] = 1;
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const sg_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (int32_t k = 0; k < n->n_outputs; k++) {
            int32_t v = n->outputs[k];
            if (v < 0)
                continue;
            SG_TRY(mark_value(ex, names, seen, v));
            if (ex->produced[v] || ex->in_inputs[v])
                return sg_node_error(n, SEGRT_ERROR_INVALID_ARGUMENT,
                                     "output `%s` is already defined elsewhere in the graph",
                                     g->values[v].name);
            ex->produced[v] = 1;
        }
        for (int32_t k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) {
                SG_TRY(mark_value(ex, names, seen, n->inputs[k]));
                ex->read[n->inputs[k]] = 1;
            }
    }
    for (int32_t v = 0; v < g->n_values; v++) {
        if (!seen[v])
            continue;
        const sg_value *val = &g->values[v];
        if (!ex->produced[v] && !ex->in_inputs[v] && !val->data)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "`%s` is %s, but it is neither a graph input, a constant nor the output "
                            "of a live node",
                            val->name, ex->read[v] ? "read" : "a graph output");
        ex->is_init[v] = val->data && !ex->produced[v] && !ex->in_inputs[v] &&
                         (ex->read[v] || ex->in_outputs[v]);
    }
    return SEGRT_OK;
}

/* ------------------------------------------------------------------------ */
/* Model                                                                     */

static sg_status build_model(exporter *ex, Onnx__ModelProto *m)
{
    const sg_graph *g = ex->g;
    /* Constants first: the size limit is known before anything is built. */
    uint64_t weight_bytes = 0;
    int32_t n_init = 0;
    for (int32_t v = 0; v < g->n_values; v++)
        if (ex->is_init[v]) {
            weight_bytes += sg_blob_size(g->values[v].data);
            n_init++;
        }
    if (weight_bytes > SG_PB_MAX_BYTES)
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "the graph's constants take %llu bytes; an ONNX protobuf holds at most 2 GiB, "
                        "so this graph cannot be stored as one model",
                        (unsigned long long)weight_bytes);

    Onnx__GraphProto *gp = EX_NEW(ex, Onnx__GraphProto, ONNX__GRAPH_PROTO__INIT);
    Onnx__OperatorSetIdProto *opset = EX_NEW(ex, Onnx__OperatorSetIdProto, ONNX__OPERATOR_SET_ID_PROTO__INIT);
    /* segrt's own operators' domain is imported where a node uses it. */
    bool segrt_ops = false;
    for (int32_t i = 0; i < g->n_nodes; i++)
        segrt_ops |= !g->nodes[i].dead && sg_op_is_segrt(g->nodes[i].op);
    Onnx__OperatorSetIdProto *own = EX_NEW(ex, Onnx__OperatorSetIdProto, ONNX__OPERATOR_SET_ID_PROTO__INIT);
    Onnx__OperatorSetIdProto **opsets = ex_alloc(ex, 2, sizeof *opsets);
    if (!gp || !opset || !own || !opsets)
        return SEGRT_ERROR_OUT_OF_MEMORY;

    /* IR version 4 dropped the rule that initializers be graph inputs; a
     * graph without a usable one gets the version of the schema we build
     * against. */
    m->has_ir_version = 1;
    m->ir_version = g->ir_version >= 4 ? g->ir_version : ONNX__VERSION__IR_VERSION;
    opset->domain = empty_name;
    opset->has_version = 1;
    opset->version = g->opset;
    opsets[0] = opset;
    m->n_opset_import = 1;
    if (segrt_ops) {
        own->domain = mut(SG_SEGRT_DOMAIN);
        own->has_version = 1;
        own->version = 1;
        opsets[m->n_opset_import++] = own;
    }
    m->opset_import = opsets;
    if (g->producer_name && g->producer_name[0]) {
        m->producer_name = g->producer_name;
        m->producer_version = g->producer_version;
    } else {
        m->producer_name = mut("segrt");
        m->producer_version = mut(segrt_version());
    }
    m->graph = gp;
    gp->name = mut("segrt");

    if (g->n_meta > 0) {
        m->metadata_props = ex_alloc(ex, (size_t)g->n_meta, sizeof *m->metadata_props);
        if (!m->metadata_props)
            return SEGRT_ERROR_OUT_OF_MEMORY;
        for (int32_t i = 0; i < g->n_meta; i++) {
            Onnx__StringStringEntryProto *e =
                EX_NEW(ex, Onnx__StringStringEntryProto, ONNX__STRING_STRING_ENTRY_PROTO__INIT);
            if (!e)
                return SEGRT_ERROR_OUT_OF_MEMORY;
            e->key = g->meta[i].key;
            e->value = g->meta[i].value;
            m->metadata_props[i] = e;
        }
        m->n_metadata_props = (size_t)g->n_meta;
    }

    gp->initializer = ex_alloc(ex, (size_t)n_init, sizeof *gp->initializer);
    gp->input = ex_alloc(ex, (size_t)g->n_inputs, sizeof *gp->input);
    gp->output = ex_alloc(ex, (size_t)g->n_outputs, sizeof *gp->output);
    gp->node = ex_alloc(ex, (size_t)g->n_nodes, sizeof *gp->node);
    if (!gp->initializer || !gp->input || !gp->output || !gp->node)
        return SEGRT_ERROR_OUT_OF_MEMORY;

    for (int32_t v = 0; v < g->n_values; v++) {
        if (!ex->is_init[v])
            continue;
        const sg_value *val = &g->values[v];
        int64_t dims[SEGRT_MAX_RANK];
        char what[256];
        snprintf(what, sizeof what, "constant `%s`", val->name);
        if (!sg_shape_dims(&val->shape, dims))
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s has data but no static shape", what);
        SG_TRY(tensor_proto(ex, val->name, what, val->dtype, val->shape.rank, dims, val->data,
                            &gp->initializer[gp->n_initializer]));
        gp->n_initializer++;
    }
    for (int32_t i = 0; i < g->n_inputs; i++) {
        const sg_value *v = &g->values[g->inputs[i]];
        SG_TRY(value_info(ex, v, &v->declared, &gp->input[i]));
        gp->n_input++;
    }
    for (int32_t i = 0; i < g->n_outputs; i++) {
        const sg_value *v = &g->values[g->outputs[i]];
        SG_TRY(value_info(ex, v, v->declared.rank >= 0 ? &v->declared : &v->shape, &gp->output[i]));
        gp->n_output++;
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].dead)
            continue;
        SG_TRY(node_proto(ex, &g->nodes[i], &gp->node[gp->n_node]));
        gp->n_node++;
    }
    return SEGRT_OK;
}

sg_status sg_onnx_export(const sg_graph *g, uint8_t **out, size_t *size)
{
    if (!g || !out || !size)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sg_onnx_export: g, out and size must not be NULL");
    exporter ex = {0};
    ex.g = g;
    size_t nv = (size_t)g->n_values + 1;
    sg_strmap names;
    sg_strmap_init(&names);
    uint8_t *seen = sg_calloc(nv, 1);
    ex.in_inputs = sg_calloc(nv, 1);
    ex.in_outputs = sg_calloc(nv, 1);
    ex.produced = sg_calloc(nv, 1);
    ex.read = sg_calloc(nv, 1);
    ex.is_init = sg_calloc(nv, 1);
    sg_status s = SEGRT_OK;
    if (!seen || !ex.in_inputs || !ex.in_outputs || !ex.produced || !ex.read || !ex.is_init)
        s = SEGRT_ERROR_OUT_OF_MEMORY;
    if (s == SEGRT_OK)
        s = check_graph(&ex, &names, seen);
    sg_strmap_free(&names);
    free(seen);
    Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
    if (s == SEGRT_OK)
        s = build_model(&ex, &m);
    uint8_t *buf = NULL;
    size_t n = 0;
    if (s == SEGRT_OK) {
        n = protobuf_c_message_get_packed_size(&m.base);
        if ((uint64_t)n > SG_PB_MAX_BYTES)
            s = sg_error(SEGRT_ERROR_UNSUPPORTED,
                         "the model takes %zu bytes as an ONNX protobuf, more than the 2 GiB a "
                         "protobuf can hold",
                         n);
    }
    if (s == SEGRT_OK && !(buf = sg_malloc(n ? n : 1)))
        s = SEGRT_ERROR_OUT_OF_MEMORY;
    if (s == SEGRT_OK && protobuf_c_message_pack(&m.base, buf) != n)
        s = sg_error(SEGRT_ERROR_INTERNAL, "protobuf-c packed a different size than it measured");
    ex_free(&ex);
    if (s != SEGRT_OK) {
        free(buf);
        return sg_error_prefix(s, "ONNX export: ");
    }
    *out = buf;
    *size = n;
    return SEGRT_OK;
}
