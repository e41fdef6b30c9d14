#include "onnx/onnx_import.h"

#include "core/file.h"

#include "core/strmap.h"
#include "graph/infer.h"
#include "onnx/external_data.h"
#include "onnx/pb_check.h"
#include "onnx.pb-c.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Real models nest graph -> node -> attribute -> graph a few levels deep
 * (If/Loop bodies); 64 leaves ample room and bounds protobuf-c's recursion. */
#define SG_PB_MAX_DEPTH 64

/* Model-local functions are inlined: each call's body becomes nodes of
 * the graph, its formal inputs and outputs the call's, its other values
 * and its nodes' names under a prefix of the call's own, its attribute
 * references the call's attributes. A call inside a body nests a context. */
#define SG_FN_MAX_DEPTH 32
/* The most nodes inlining may make: a body calling itself's bodies can
 * grow a small file exponentially. */
#define SG_FN_MAX_NODES (1 << 22)

typedef struct fn_ctx {
    const Onnx__FunctionProto *fn; /* NULL: the main graph */
    const struct fn_ctx *parent;
    const Onnx__NodeProto *call; /* the node calling fn, in parent's names */
    char *prefix;
} fn_ctx;

/* A node of the graph once functions are inlined: a node proto and the
 * context its names and attribute references are read in. */
typedef struct flat_node {
    const Onnx__NodeProto *np;
    const fn_ctx *ctx;
} flat_node;

typedef struct importer {
    sg_graph *g;
    const char *base_dir;
    sg_strmap names; /* tensor name -> value index */
    sg_strmap syms;  /* symbolic dim name -> symbol index */
    const Onnx__ModelProto *m;
    flat_node *nodes;
    size_t n_nodes, cap_nodes;
    fn_ctx **ctxs;
    size_t n_ctxs;
    char **strs; /* names made for inlined bodies, freed with the importer */
    size_t n_strs, cap_strs;
    /* An If's branch: a name nothing in it defines is the enclosing
     * graph's value of that name (ir.h's SG_ATTR_GRAPH). */
    bool branch;
} importer;

static sg_status branch_convert(const importer *outer, const Onnx__GraphProto *gp, const char *node,
                                sg_graph **out);

static bool is_default_domain(const char *d) { return !d || !d[0] || strcmp(d, "ai.onnx") == 0; }

static const char *str_or_empty(const char *s) { return s ? s : ""; }

/* ------------------------------------------------------------------------ */
/* Tensors                                                                   */

static sg_status tensor_dims(const Onnx__TensorProto *t, const char *name, int32_t *rank,
                             int64_t *dims, int64_t *numel)
{
    if (t->n_dims > SEGRT_MAX_RANK)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "tensor `%s` has %zu dims; segrt supports up to %d",
                        name, t->n_dims, SEGRT_MAX_RANK);
    *rank = (int32_t)t->n_dims;
    for (size_t i = 0; i < t->n_dims; i++) {
        if (t->dims[i] < 0)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "tensor `%s` has a negative dim", name);
        dims[i] = t->dims[i];
    }
    if (!sg_dims_product(dims, *rank, numel))
        return sg_error(SEGRT_ERROR_INVALID_MODEL,
                        "tensor `%s`: the product of its dims overflows 64 bits", name);
    return SEGRT_OK;
}

static sg_status typed_count_error(const char *name, const char *field, size_t have, int64_t want)
{
    return sg_error(SEGRT_ERROR_INVALID_MODEL, "tensor `%s`: %s holds %zu values, its dims need %lld",
                    name, field, have, (long long)want);
}

/* Copies the typed-field payload (float_data, int32_data, ...) into dst. */
static sg_status tensor_typed_data(const Onnx__TensorProto *t, const char *name, sg_dtype dt,
                                   int64_t numel, void *dst)
{
    switch (dt) {
    case SEGRT_DTYPE_FLOAT32:
        if ((int64_t)t->n_float_data != numel)
            return typed_count_error(name, "float_data", t->n_float_data, numel);
        memcpy(dst, t->float_data, (size_t)numel * 4);
        return SEGRT_OK;
    case SEGRT_DTYPE_FLOAT64:
        if ((int64_t)t->n_double_data != numel)
            return typed_count_error(name, "double_data", t->n_double_data, numel);
        memcpy(dst, t->double_data, (size_t)numel * 8);
        return SEGRT_OK;
    case SEGRT_DTYPE_INT64:
        if ((int64_t)t->n_int64_data != numel)
            return typed_count_error(name, "int64_data", t->n_int64_data, numel);
        memcpy(dst, t->int64_data, (size_t)numel * 8);
        return SEGRT_OK;
    case SEGRT_DTYPE_INT32:
    case SEGRT_DTYPE_INT16:
    case SEGRT_DTYPE_UINT16:
    case SEGRT_DTYPE_INT8:
    case SEGRT_DTYPE_UINT8:
    case SEGRT_DTYPE_BOOL:
    case SEGRT_DTYPE_FLOAT16:
    case SEGRT_DTYPE_BFLOAT16:
        /* ONNX stores these one per int32 (16-bit floats as their bits). */
        if ((int64_t)t->n_int32_data != numel)
            return typed_count_error(name, "int32_data", t->n_int32_data, numel);
        for (int64_t i = 0; i < numel; i++) {
            int32_t v = t->int32_data[i];
            if (dt == SEGRT_DTYPE_FLOAT16 || dt == SEGRT_DTYPE_BFLOAT16)
                ((uint16_t *)dst)[i] = (uint16_t)v;
            else
                sg_dtype_store_i64(dt, dst, i, v);
        }
        return SEGRT_OK;
    case SEGRT_DTYPE_UNDEFINED:
        break;
    }
    return sg_error(SEGRT_ERROR_INTERNAL, "tensor `%s`: unhandled dtype", name);
}

static sg_status tensor_external(const importer *im, const Onnx__TensorProto *t, const char *name,
                                 size_t bytes, void *dst)
{
    const char *location = NULL;
    int64_t offset = 0, length = -1;
    for (size_t i = 0; i < t->n_external_data; i++) {
        const Onnx__StringStringEntryProto *e = t->external_data[i];
        const char *k = str_or_empty(e->key), *v = str_or_empty(e->value);
        char *endp;
        if (strcmp(k, "location") == 0)
            location = v;
        else if (strcmp(k, "offset") == 0 || strcmp(k, "length") == 0) {
            errno = 0;
            long long x = strtoll(v, &endp, 10);
            if (errno || *endp || endp == v || x < 0)
                return sg_error(SEGRT_ERROR_INVALID_MODEL, "tensor `%s`: external data %s `%s` is not a number",
                                name, k, v);
            if (k[0] == 'o')
                offset = x;
            else
                length = x;
        }
    }
    if (!location)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "tensor `%s`: external data without a location", name);
    if (length >= 0 && (uint64_t)length != bytes)
        return sg_error(SEGRT_ERROR_INVALID_MODEL,
                        "tensor `%s`: external data length %lld does not match its dims (%zu bytes)",
                        name, (long long)length, bytes);
    return sg_external_data_read(im->base_dir, location, offset, bytes, name, dst);
}

/* Converts a TensorProto into dtype, dims and a new blob. With take set
 * (t itself, for a tensor converted only once: the main graph's
 * initializers), raw data the unpacker placed 64-byte aligned becomes the
 * blob as it is, instead of a copy (a network's weights are most of the
 * file: one pass over them fewer, and a third fewer pages touched). */
static sg_status tensor_convert(const importer *im, const Onnx__TensorProto *t, Onnx__TensorProto *take,
                                const char *name, sg_dtype *dtype, int32_t *rank, int64_t *dims, sg_blob **out)
{
    sg_dtype dt = (sg_dtype)t->data_type;
    if (!sg_dtype_is_supported(dt))
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "tensor `%s` has ONNX data type %d, which segrt does not support",
                        name, t->data_type);
    if (t->segment)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "tensor `%s` is split into segments", name);
    int64_t numel;
    SG_TRY(tensor_dims(t, name, rank, dims, &numel));
    int64_t bytes64;
    if (!sg_mul_i64(numel, (int64_t)segrt_dtype_size(dt), &bytes64) || (uint64_t)bytes64 > SIZE_MAX / 2)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "tensor `%s` is too large", name);
    size_t bytes = (size_t)bytes64;
    bool external = t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    /* Check sizes before allocating: a tiny hostile file must not make us
     * allocate terabytes. External data is checked against the file size. */
    if (!external && t->has_raw_data && t->raw_data.len != bytes)
        return sg_error(SEGRT_ERROR_INVALID_MODEL,
                        "tensor `%s`: raw_data has %zu bytes, its dims and dtype need %zu", name,
                        t->raw_data.len, bytes);
    if (!external && !t->has_raw_data && numel > 0) {
        size_t have = t->n_float_data + t->n_int32_data + t->n_int64_data + t->n_double_data +
                      t->n_uint64_data + t->n_string_data;
        if ((int64_t)have != numel)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "tensor `%s` holds %zu values, its dims need %lld",
                            name, have, (long long)numel);
    }
    sg_blob *b;
    if (take && !external && t->has_raw_data && bytes && ((uintptr_t)t->raw_data.data & 63) == 0) {
        SG_TRY(sg_blob_adopt(t->raw_data.data, bytes, &b));
        take->raw_data.data = NULL; /* the blob frees it now, not free_unpacked */
        take->raw_data.len = 0;
        take->has_raw_data = 0;
        *dtype = dt;
        *out = b;
        return SEGRT_OK;
    }
    SG_TRY(sg_blob_new(bytes, false, &b));
    sg_status s = SEGRT_OK;
    if (external)
        s = tensor_external(im, t, name, bytes, sg_blob_data(b));
    else if (t->has_raw_data && bytes) /* empty raw_data has a NULL pointer */
        memcpy(sg_blob_data(b), t->raw_data.data, bytes);
    else if (numel > 0)
        s = tensor_typed_data(t, name, dt, numel, sg_blob_data(b));
    if (s != SEGRT_OK) {
        sg_blob_unref(b);
        return s;
    }
    *dtype = dt;
    *out = b;
    return SEGRT_OK;
}

/* ------------------------------------------------------------------------ */
/* Values                                                                    */

static sg_status value_lookup_or_add(importer *im, const char *name, int32_t *out)
{
    int32_t v = sg_strmap_get(&im->names, name);
    if (v >= 0) {
        *out = v;
        return SEGRT_OK;
    }
    SG_TRY(sg_graph_add_value(im->g, name, &v));
    /* The map borrows the key: point it at the graph's own copy. */
    SG_TRY(sg_strmap_put(&im->names, im->g->values[v].name, v));
    *out = v;
    return SEGRT_OK;
}

static sg_status intern_sym(importer *im, const char *name, int32_t *out)
{
    int32_t k = sg_strmap_get(&im->syms, name);
    if (k < 0) {
        SG_TRY(sg_graph_add_sym(im->g, name, &k));
        /* The map borrows the key: point it at the graph's own copy. */
        SG_TRY(sg_strmap_put(&im->syms, im->g->syms[k], k));
    }
    *out = k;
    return SEGRT_OK;
}

static sg_status value_info_type(importer *im, const Onnx__ValueInfoProto *vi, sg_value *v)
{
    const char *name = str_or_empty(vi->name);
    const Onnx__TypeProto *tp = vi->type;
    if (!tp)
        return SEGRT_OK; /* type unknown: inference fills it in */
    if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "`%s` is not a tensor (sequences, maps and optionals are not supported)", name);
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    if (tt->has_elem_type && tt->elem_type != 0) {
        if (!sg_dtype_is_supported((sg_dtype)tt->elem_type))
            return sg_error(SEGRT_ERROR_UNSUPPORTED, "`%s` has ONNX data type %d, which segrt does not support",
                            name, tt->elem_type);
        v->dtype = (sg_dtype)tt->elem_type;
    }
    if (!tt->shape)
        return SEGRT_OK;
    if (tt->shape->n_dim > SEGRT_MAX_RANK)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "`%s` has %zu dims; segrt supports up to %d", name,
                        tt->shape->n_dim, SEGRT_MAX_RANK);
    sg_shape s = sg_shape_unknown();
    s.rank = (int32_t)tt->shape->n_dim;
    for (int32_t i = 0; i < s.rank; i++) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        s.d[i].size = SG_DIM_UNKNOWN;
        s.d[i].sym = SG_NO_SYM;
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
            if (d->dim_value < 0)
                return sg_error(SEGRT_ERROR_INVALID_MODEL, "`%s` declares a negative dim", name);
            s.d[i].size = d->dim_value;
        } else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
                   d->dim_param && d->dim_param[0]) {
            SG_TRY(intern_sym(im, d->dim_param, &s.d[i].sym));
        }
    }
    v->declared = s;
    v->shape = s;
    return SEGRT_OK;
}

/* ------------------------------------------------------------------------ */
/* Nodes                                                                     */

/* A string the importer keeps until it is freed; NULL when out of memory. */
static char *keep_str(importer *im, char *s)
{
    if (!s)
        return NULL;
    if (im->n_strs == im->cap_strs) {
        size_t nc = im->cap_strs ? 2 * im->cap_strs : 64;
        char **p = realloc(im->strs, nc * sizeof *p);
        if (!p) {
            free(s);
            return NULL;
        }
        im->strs = p;
        im->cap_strs = nc;
    }
    im->strs[im->n_strs++] = s;
    return s;
}

/* Value `name` of a node in ctx as the graph names it: a formal input or
 * output of the function is the call's (named in the parent context), any
 * other value gets the call's prefix; "" stays "" (omitted). NULL when out
 * of memory. */
static const char *map_name(importer *im, const fn_ctx *ctx, const char *name)
{
    if (!ctx->fn || !name[0])
        return name;
    const Onnx__FunctionProto *fn = ctx->fn;
    for (size_t i = 0; i < fn->n_input; i++)
        if (strcmp(str_or_empty(fn->input[i]), name) == 0)
            return i < ctx->call->n_input ? map_name(im, ctx->parent, str_or_empty(ctx->call->input[i])) : "";
    for (size_t i = 0; i < fn->n_output; i++)
        if (strcmp(str_or_empty(fn->output[i]), name) == 0)
            return i < ctx->call->n_output ? map_name(im, ctx->parent, str_or_empty(ctx->call->output[i])) : "";
    size_t a = strlen(ctx->prefix), b = strlen(name);
    char *s = malloc(a + b + 1);
    if (s) {
        memcpy(s, ctx->prefix, a);
        memcpy(s + a, name, b + 1);
    }
    return keep_str(im, s);
}

/* The attribute a reference `ref` of a body in ctx stands for: the
 * calling node's attribute of that name (itself resolved where the call
 * is in a body), or NULL where the call has none (the attribute is then
 * absent: this protobuf's functions carry no defaults). */
static const Onnx__AttributeProto *resolve_ref(const fn_ctx *ctx, const char *ref)
{
    if (!ctx->fn)
        return NULL;
    for (size_t i = 0; i < ctx->call->n_attribute; i++) {
        const Onnx__AttributeProto *a = ctx->call->attribute[i];
        if (strcmp(str_or_empty(a->name), ref) == 0)
            return a->ref_attr_name && a->ref_attr_name[0] ? resolve_ref(ctx->parent, a->ref_attr_name) : a;
    }
    return NULL;
}

/* segrt's operator for op_type of domain, or SG_OP_COUNT: ONNX's only
 * under the default domain, segrt's own only under theirs. */
static sg_op known_op(const char *domain, const char *op_type)
{
    bool segrt = strcmp(domain, SG_SEGRT_DOMAIN) == 0;
    sg_op op = is_default_domain(domain) || segrt ? sg_op_lookup(op_type) : SG_OP_COUNT;
    return op != SG_OP_COUNT && sg_op_is_segrt(op) == segrt ? op : SG_OP_COUNT;
}

/* The model-local function a node calls, or NULL. An operator segrt has
 * is never a function call. */
static const Onnx__FunctionProto *function_of(const Onnx__ModelProto *m, const Onnx__NodeProto *np)
{
    const char *domain = str_or_empty(np->domain), *op = str_or_empty(np->op_type);
    if (known_op(domain, op) != SG_OP_COUNT)
        return NULL;
    for (size_t i = 0; i < m->n_functions; i++) {
        const Onnx__FunctionProto *f = m->functions[i];
        if (strcmp(str_or_empty(f->name), op) == 0 &&
            (strcmp(str_or_empty(f->domain), domain) == 0 ||
             (is_default_domain(f->domain) && is_default_domain(domain))))
            return f;
    }
    return NULL;
}

/* The nodes of a body (or the main graph) in ctx, calls inlined, onto the
 * importer's flat list. */
static sg_status flatten(importer *im, Onnx__NodeProto *const *nodes, size_t n, const fn_ctx *ctx, int depth)
{
    for (size_t i = 0; i < n; i++) {
        const Onnx__NodeProto *np = nodes[i];
        const Onnx__FunctionProto *fn = function_of(im->m, np);
        if (fn) {
            if (depth >= SG_FN_MAX_DEPTH)
                return sg_error(SEGRT_ERROR_INVALID_MODEL, "function `%s` calls functions more than %d deep",
                                str_or_empty(fn->name), SG_FN_MAX_DEPTH);
            fn_ctx **cs = realloc(im->ctxs, (im->n_ctxs + 1) * sizeof *cs);
            if (!cs)
                return SEGRT_ERROR_OUT_OF_MEMORY;
            im->ctxs = cs;
            fn_ctx *c = calloc(1, sizeof *c);
            if (!c)
                return SEGRT_ERROR_OUT_OF_MEMORY;
            im->ctxs[im->n_ctxs++] = c;
            c->fn = fn;
            c->parent = ctx;
            c->call = np;
            const char *call = np->name && np->name[0] ? np->name : str_or_empty(np->op_type);
            size_t len = strlen(ctx->prefix ? ctx->prefix : "") + strlen(call) + 32;
            if (!(c->prefix = malloc(len)))
                return SEGRT_ERROR_OUT_OF_MEMORY;
            /* The call's number keeps two calls of one name apart. */
            snprintf(c->prefix, len, "%s%s#%zu/", ctx->prefix ? ctx->prefix : "", call, im->n_ctxs);
            SG_TRY(flatten(im, fn->node, fn->n_node, c, depth + 1));
            continue;
        }
        if (im->n_nodes == im->cap_nodes) {
            if (im->n_nodes >= SG_FN_MAX_NODES)
                return sg_error(SEGRT_ERROR_INVALID_MODEL, "the graph has more than %d nodes once its functions "
                                "are inlined", SG_FN_MAX_NODES);
            size_t nc = im->cap_nodes ? 2 * im->cap_nodes : 256;
            flat_node *p = realloc(im->nodes, nc * sizeof *p);
            if (!p)
                return SEGRT_ERROR_OUT_OF_MEMORY;
            im->nodes = p;
            im->cap_nodes = nc;
        }
        im->nodes[im->n_nodes++] = (flat_node){np, ctx};
    }
    return SEGRT_OK;
}

static void importer_free_flat(importer *im)
{
    for (size_t i = 0; i < im->n_ctxs; i++) {
        free(im->ctxs[i]->prefix);
        free(im->ctxs[i]);
    }
    for (size_t i = 0; i < im->n_strs; i++)
        free(im->strs[i]);
    free(im->ctxs);
    free(im->strs);
    free(im->nodes);
}

/* Attribute a of a node in ctx into d: a reference to the calling
 * function's attribute is resolved first (its value under a's name);
 * *absent when the call has none. */
static sg_status attr_convert(const importer *im, const Onnx__AttributeProto *a, sg_attr *d,
                              const char *node);

static sg_status attr_convert_in(const importer *im, const fn_ctx *ctx, const Onnx__AttributeProto *a, sg_attr *d,
                                 const char *node, bool *absent)
{
    *absent = false;
    if (!(a->ref_attr_name && a->ref_attr_name[0]))
        return attr_convert(im, a, d, node);
    const Onnx__AttributeProto *v = resolve_ref(ctx, a->ref_attr_name);
    if (!v) {
        if (!ctx->fn)
            return sg_error(SEGRT_ERROR_INVALID_MODEL,
                            "node `%s`: attribute `%s` refers to a function attribute outside a function", node,
                            str_or_empty(a->name));
        *absent = true;
        return SEGRT_OK;
    }
    SG_TRY(attr_convert(im, v, d, node));
    /* The value of the call's attribute under this node's name. */
    char *name = sg_strdup(str_or_empty(a->name));
    if (!name)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    free(d->name);
    d->name = name;
    return SEGRT_OK;
}

static sg_status attr_convert(const importer *im, const Onnx__AttributeProto *a, sg_attr *d,
                              const char *node)
{
    const char *name = str_or_empty(a->name);
    d->name = sg_strdup(name);
    if (!d->name)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    if (a->ref_attr_name && a->ref_attr_name[0])
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "node `%s`: attribute `%s` refers to a function attribute",
                        node, name);
    switch (a->type) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
        d->kind = SG_ATTR_INT;
        d->i = a->i;
        return SEGRT_OK;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
        d->kind = SG_ATTR_FLOAT;
        d->f = a->f;
        return SEGRT_OK;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING:
        d->kind = SG_ATTR_STRING;
        /* Strings are bytes; segrt's string attributes are names and modes,
         * so an embedded NUL simply ends them. */
        d->s = sg_strndup((const char *)a->s.data, a->has_s ? a->s.len : 0);
        return d->s ? SEGRT_OK : SEGRT_ERROR_OUT_OF_MEMORY;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
        d->kind = SG_ATTR_INTS;
        if (a->n_ints > INT32_MAX / 8)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "node `%s`: attribute `%s` is too long", node, name);
        d->n = (int32_t)a->n_ints;
        if (!(d->ints = sg_malloc(sizeof(int64_t) * (a->n_ints ? a->n_ints : 1))))
            return SEGRT_ERROR_OUT_OF_MEMORY;
        if (a->n_ints)
            memcpy(d->ints, a->ints, sizeof(int64_t) * a->n_ints);
        return SEGRT_OK;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
        d->kind = SG_ATTR_FLOATS;
        if (a->n_floats > INT32_MAX / 8)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "node `%s`: attribute `%s` is too long", node, name);
        d->n = (int32_t)a->n_floats;
        if (!(d->floats = sg_malloc(sizeof(float) * (a->n_floats ? a->n_floats : 1))))
            return SEGRT_ERROR_OUT_OF_MEMORY;
        if (a->n_floats)
            memcpy(d->floats, a->floats, sizeof(float) * a->n_floats);
        return SEGRT_OK;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS:
        d->kind = SG_ATTR_STRINGS;
        if (a->n_strings > INT32_MAX / 8)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "node `%s`: attribute `%s` is too long", node, name);
        if (!(d->strings = sg_calloc(a->n_strings ? a->n_strings : 1, sizeof(char *))))
            return SEGRT_ERROR_OUT_OF_MEMORY;
        for (size_t i = 0; i < a->n_strings; i++) {
            d->n = (int32_t)i + 1;
            if (!(d->strings[i] = sg_strndup((const char *)a->strings[i].data, a->strings[i].len)))
                return SEGRT_ERROR_OUT_OF_MEMORY;
        }
        return SEGRT_OK;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR:
        d->kind = SG_ATTR_TENSOR;
        if (!a->t)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "node `%s`: tensor attribute `%s` is empty", node, name);
    {
        sg_status s = tensor_convert(im, a->t, NULL, name, &d->t_dtype, &d->t_rank, d->t_dims, &d->t_data);
        return s == SEGRT_OK ? s : sg_error_prefix(s, "node `%s`: attribute: ", node);
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH:
        d->kind = SG_ATTR_GRAPH;
        if (!a->g)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "node `%s`: graph attribute `%s` is empty", node, name);
        return branch_convert(im, a->g, node, &d->graph);
    default:
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "node `%s`: attribute `%s` is a list of graphs, a sparse tensor or a type, which segrt does "
                        "not support",
                        node, name);
    }
}

static sg_status node_convert(importer *im, const flat_node *fnode, int32_t index)
{
    const Onnx__NodeProto *np = fnode->np;
    const fn_ctx *ctx = fnode->ctx;
    const char *op_type = str_or_empty(np->op_type);
    const char *domain = str_or_empty(np->domain);
    char generated[96];
    const char *name = np->name && np->name[0] ? np->name : NULL;
    if (!name) {
        snprintf(generated, sizeof generated, "%.48s_%d", op_type[0] ? op_type : "node", index);
        name = generated;
    }
    if (ctx->fn && !(name = map_name(im, ctx, name)))
        return SEGRT_ERROR_OUT_OF_MEMORY;
    sg_op op = known_op(domain, op_type);
    if (op == SG_OP_COUNT)
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "node `%s` uses operator %s of domain '%s', which segrt does not support", name,
                        op_type[0] ? op_type : "(empty)", domain[0] ? domain : "ai.onnx");
    if (np->n_input > 4096 || np->n_output > 4096)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "node `%s` has too many inputs or outputs", name);
    sg_node *n;
    SG_TRY(sg_graph_add_node(im->g, op, name, (int32_t)np->n_input, (int32_t)np->n_output, &n));
    for (size_t i = 0; i < np->n_output; i++) {
        const char *out = map_name(im, ctx, str_or_empty(np->output[i]));
        if (!out)
            return SEGRT_ERROR_OUT_OF_MEMORY;
        if (!out[0])
            continue; /* an omitted optional output */
        int32_t v;
        SG_TRY(value_lookup_or_add(im, out, &v));
        n->outputs[i] = v; /* adding values does not move nodes */
    }
    if (np->n_attribute) {
        if (np->n_attribute > 4096)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "node `%s` has too many attributes", name);
        sg_node *nn = n;
        nn->attrs = sg_calloc(np->n_attribute, sizeof *nn->attrs);
        if (!nn->attrs)
            return SEGRT_ERROR_OUT_OF_MEMORY;
        /* Names seen so far, in a map once there are many: comparing each
         * with every earlier one is quadratic, and a hostile node may have
         * thousands. */
        sg_strmap seen;
        sg_strmap_init(&seen);
        sg_status s = SEGRT_OK;
        for (size_t i = 0, at = 0; i < np->n_attribute && s == SEGRT_OK; i++) {
            nn->n_attrs = (int32_t)at + 1; /* so cleanup frees the partly converted one */
            bool absent;
            s = attr_convert_in(im, ctx, np->attribute[i], &nn->attrs[at], name, &absent);
            if (s == SEGRT_OK && absent) { /* a reference the call leaves unset: no attribute */
                free(nn->attrs[at].name);
                memset(&nn->attrs[at], 0, sizeof nn->attrs[at]);
                nn->n_attrs = (int32_t)at;
                continue;
            }
            bool twice = false;
            if (s == SEGRT_OK && np->n_attribute > 16) {
                twice = sg_strmap_get(&seen, nn->attrs[at].name) >= 0;
                if (!twice)
                    s = sg_strmap_put(&seen, nn->attrs[at].name, (int32_t)at);
            }
            for (size_t k = 0; s == SEGRT_OK && np->n_attribute <= 16 && k < at && !twice; k++)
                twice = strcmp(nn->attrs[k].name, nn->attrs[at].name) == 0;
            if (twice)
                s = sg_error(SEGRT_ERROR_INVALID_MODEL, "node `%s` has attribute `%s` twice", name,
                             nn->attrs[at].name);
            at++;
        }
        sg_strmap_free(&seen);
        return s;
    }
    return SEGRT_OK;
}

/* Value `name`, which a branch of node k reads from around it, as an
 * input of node k (once). */
static sg_status add_capture(importer *im, int32_t k, const char *name)
{
    int32_t v = sg_strmap_get(&im->names, name);
    if (v < 0 && im->branch) /* from around this branch in turn */
        SG_TRY(value_lookup_or_add(im, name, &v));
    sg_node *n = &im->g->nodes[k];
    if (v < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "a branch reads `%s`, which the graph does not have",
                             name);
    for (int32_t i = 1; i < n->n_inputs; i++)
        if (n->inputs[i] == v)
            return SEGRT_OK;
    if (n->n_inputs >= 4096)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "its branches read more than 4096 values");
    int32_t *in = realloc(n->inputs, sizeof(int32_t) * (size_t)(n->n_inputs + 1));
    if (!in)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    in[n->n_inputs++] = v;
    n->inputs = in;
    return SEGRT_OK;
}

/* An If's branches read values from around them by name; ONNX leaves that
 * implicit. They become the If's inputs after its condition, so that
 * ordering, liveness and the passes see them (ops.def). */
static sg_status link_captures(importer *im, int32_t k)
{
    if (im->g->nodes[k].n_inputs < 1)
        return SEGRT_OK; /* no condition: inference names the problem */
    for (int32_t a = 0; a < im->g->nodes[k].n_attrs; a++) {
        const sg_graph *b = im->g->nodes[k].attrs[a].graph;
        for (int32_t v = 0; b && v < b->n_values; v++) {
            const sg_value *bv = &b->values[v];
            if (bv->producer < 0 && !bv->data && !bv->is_input)
                SG_TRY(add_capture(im, k, bv->name));
        }
    }
    return SEGRT_OK;
}

/* Node inputs are resolved after every node's outputs exist, because some
 * exporters write nodes out of order (sg_graph_toposort fixes the order). */
static sg_status node_link_inputs(importer *im, const flat_node *fnode, int32_t node_index)
{
    const Onnx__NodeProto *np = fnode->np;
    sg_node *n = &im->g->nodes[node_index];
    for (size_t i = 0; i < np->n_input; i++) {
        const char *in = map_name(im, fnode->ctx, str_or_empty(np->input[i]));
        if (!in)
            return SEGRT_ERROR_OUT_OF_MEMORY;
        if (!in[0])
            continue; /* an omitted optional input */
        int32_t v = sg_strmap_get(&im->names, in);
        if (v < 0 && im->branch) { /* the enclosing graph's */
            SG_TRY(value_lookup_or_add(im, in, &v));
            n = &im->g->nodes[node_index];
        }
        if (v < 0)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                 "input `%s` is neither a graph input, an initializer nor the output of a node",
                                 in);
        n->inputs[i] = v;
    }
    /* Trailing omitted inputs do not count towards the input count. */
    while (n->n_inputs > 0 && n->inputs[n->n_inputs - 1] < 0)
        n->n_inputs--;
    return n->op == SG_OP_IF ? link_captures(im, node_index) : SEGRT_OK;
}

/* ------------------------------------------------------------------------ */
/* Model                                                                     */

static sg_status model_opset(const Onnx__ModelProto *m, int64_t *opset)
{
    *opset = -1;
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        if (is_default_domain(o->domain))
            *opset = o->version;
    }
    if (*opset < 0)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "the model imports no opset of the default ONNX domain");
    if (*opset > SG_ONNX_OPSET_MAX)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "opset %lld is newer than supported (%d to %d)",
                        (long long)*opset, SG_ONNX_OPSET_MIN, SG_ONNX_OPSET_MAX);
    if (*opset < SG_ONNX_OPSET_MIN)
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "opset %lld is older than supported (%d to %d); convert it with "
                        "onnx.version_converter",
                        (long long)*opset, SG_ONNX_OPSET_MIN, SG_ONNX_OPSET_MAX);
    return SEGRT_OK;
}

static sg_status initializers(importer *im, const Onnx__GraphProto *gp, bool take);
static sg_status nodes_and_outputs(importer *im, const Onnx__GraphProto *gp);

static sg_status graph_convert(importer *im, const Onnx__ModelProto *m)
{
    const Onnx__GraphProto *gp = m->graph;
    sg_graph *g = im->g;
    int64_t opset;
    SG_TRY(model_opset(m, &opset));
    g->opset = opset;
    g->ir_version = m->has_ir_version ? m->ir_version : 0;
    free(g->producer_name);
    free(g->producer_version);
    g->producer_name = sg_strdup(str_or_empty(m->producer_name));
    g->producer_version = sg_strdup(str_or_empty(m->producer_version));
    if (!g->producer_name || !g->producer_version)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < m->n_metadata_props; i++)
        SG_TRY(sg_graph_add_meta(g, str_or_empty(m->metadata_props[i]->key),
                                 str_or_empty(m->metadata_props[i]->value)));
    SG_TRY(initializers(im, gp, true));
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = gp->input[i];
        const char *name = str_or_empty(vi->name);
        int32_t v = sg_strmap_get(&im->names, name);
        if (v >= 0 && g->values[v].data)
            continue; /* an initializer listed as an input: a constant here */
        if (v >= 0)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "graph input `%s` is listed twice", name);
        if (!name[0])
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "graph input %zu has no name", i);
        SG_TRY(value_lookup_or_add(im, name, &v));
        SG_TRY(value_info_type(im, vi, &g->values[v]));
        SG_TRY(sg_graph_add_input(g, v));
    }
    SG_TRY(nodes_and_outputs(im, gp));
    for (int32_t i = 0; i < g->n_inputs; i++)
        if (g->values[g->inputs[i]].dtype == SEGRT_DTYPE_UNDEFINED)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "graph input `%s` has no element type",
                            g->values[g->inputs[i]].name);
    SG_TRY(sg_graph_toposort(g));
    return sg_graph_infer(g);
}

/* gp's initializers as constant values (take: converted once, their raw
 * data adopted where it can be: the main graph's). */
static sg_status initializers(importer *im, const Onnx__GraphProto *gp, bool take)
{
    sg_graph *g = im->g;
    if (gp->n_sparse_initializer)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "sparse initializers are not supported");
    if (gp->n_node > (size_t)INT32_MAX / 4 || gp->n_initializer > (size_t)INT32_MAX / 4)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "the graph is too large");
    for (size_t i = 0; i < gp->n_initializer; i++) {
        Onnx__TensorProto *t = gp->initializer[i];
        const char *name = str_or_empty(t->name);
        if (!name[0])
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "initializer %zu has no name", i);
        if (sg_strmap_get(&im->names, name) >= 0)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "initializer `%s` is defined twice", name);
        int32_t v;
        SG_TRY(value_lookup_or_add(im, name, &v));
        sg_value *val = &g->values[v];
        int32_t rank;
        int64_t dims[SEGRT_MAX_RANK];
        SG_TRY(tensor_convert(im, t, take ? t : NULL, name, &val->dtype, &rank, dims, &val->data));
        val = &g->values[v];
        val->shape = sg_shape_of_dims(dims, rank);
        val->declared = val->shape;
        val->is_initializer = true;
    }
    return SEGRT_OK;
}

/* gp's nodes (functions inlined) and its outputs. */
static sg_status nodes_and_outputs(importer *im, const Onnx__GraphProto *gp)
{
    sg_graph *g = im->g;
    static const fn_ctx top = {0};
    SG_TRY(flatten(im, gp->node, gp->n_node, &top, 0));
    if (im->n_nodes > (size_t)INT32_MAX / 4)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "the graph is too large");
    for (size_t i = 0; i < im->n_nodes; i++)
        SG_TRY(node_convert(im, &im->nodes[i], (int32_t)i));
    for (size_t i = 0; i < im->n_nodes; i++)
        SG_TRY(node_link_inputs(im, &im->nodes[i], (int32_t)i));
    if (gp->n_output == 0)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "the graph has no outputs");
    for (size_t i = 0; i < gp->n_output; i++) {
        const Onnx__ValueInfoProto *vi = gp->output[i];
        const char *name = str_or_empty(vi->name);
        int32_t v = sg_strmap_get(&im->names, name);
        if (v < 0 && im->branch && name[0]) /* the enclosing graph's value, given as it is */
            SG_TRY(value_lookup_or_add(im, name, &v));
        if (v < 0)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "graph output `%s` is not computed by any node", name);
        if (g->values[v].is_output)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "graph output `%s` is listed twice", name);
        sg_value *val = &g->values[v];
        if (!val->data && !val->is_input) {
            SG_TRY(value_info_type(im, vi, val));
            val = &g->values[v];
            val->shape = sg_shape_unknown();
        }
        SG_TRY(sg_graph_add_output(g, v));
    }
    return SEGRT_OK;
}

static sg_status branch_convert(const importer *outer, const Onnx__GraphProto *gp, const char *node,
                                sg_graph **out)
{
    *out = NULL;
    if (gp->n_input)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "node `%s`: a graph attribute with %zu inputs (a loop's body); "
                        "segrt takes an If's branches", node, gp->n_input);
    importer sub = {0};
    sub.base_dir = outer->base_dir;
    sub.m = outer->m;
    sub.branch = true;
    sg_strmap_init(&sub.names);
    sg_strmap_init(&sub.syms);
    sg_status s = sg_graph_new(&sub.g);
    if (s == SEGRT_OK) {
        sub.g->opset = outer->g->opset;
        free(sub.g->path);
        sub.g->path = sg_strdup(outer->g->path);
        s = sub.g->path ? initializers(&sub, gp, false) : SEGRT_ERROR_OUT_OF_MEMORY;
    }
    if (s == SEGRT_OK)
        s = nodes_and_outputs(&sub, gp);
    if (s == SEGRT_OK)
        s = sg_graph_toposort(sub.g);
    sg_strmap_free(&sub.names);
    sg_strmap_free(&sub.syms);
    importer_free_flat(&sub);
    if (s != SEGRT_OK) {
        sg_graph_free(sub.g);
        return s;
    }
    *out = sub.g;
    return SEGRT_OK;
}

/* protobuf-c's allocations: those of a page or more 64-byte aligned, so
 * that tensor_convert can adopt a tensor's raw data as its blob (free()
 * releases either kind). */
static void *pb_alloc(void *user, size_t size)
{
    (void)user;
    if (size < 4096)
        return malloc(size);
    size_t padded = (size + 63) & ~(size_t)63;
    return padded < size ? NULL : aligned_alloc(64, padded);
}

static void pb_free(void *user, void *p)
{
    (void)user;
    free(p);
}

static ProtobufCAllocator pb_allocator = {pb_alloc, pb_free, NULL};

sg_status sg_onnx_import(const void *data, size_t size, const char *base_dir, const char *name,
                         sg_graph **out)
{
    if (size == 0)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "the file is empty");
    sg_status s = sg_pb_check(&onnx__model_proto__descriptor, data, size, SG_PB_MAX_DEPTH);
    if (s != SEGRT_OK)
        return sg_error_prefix(s, "not a valid ONNX model: ");
    Onnx__ModelProto *m = onnx__model_proto__unpack(&pb_allocator, size, data);
    if (!m)
        return sg_error(SEGRT_ERROR_INVALID_MODEL,
                        "not a valid ONNX model: the protobuf does not parse as a ModelProto");
    if (!m->graph || (!m->has_ir_version && m->n_opset_import == 0)) {
        onnx__model_proto__free_unpacked(m, &pb_allocator);
        return sg_error(SEGRT_ERROR_INVALID_MODEL,
                        "not a valid ONNX model: a protobuf without a graph, IR version or opset");
    }
    importer im = {0};
    im.base_dir = base_dir;
    im.m = m;
    sg_strmap_init(&im.names);
    sg_strmap_init(&im.syms);
    s = sg_graph_new(&im.g);
    if (s == SEGRT_OK) {
        free(im.g->path);
        im.g->path = sg_strdup(name ? name : "<memory>");
        s = im.g->path ? graph_convert(&im, m) : SEGRT_ERROR_OUT_OF_MEMORY;
    }
    sg_strmap_free(&im.names);
    sg_strmap_free(&im.syms);
    importer_free_flat(&im);
    onnx__model_proto__free_unpacked(m, &pb_allocator);
    if (s != SEGRT_OK) {
        sg_graph_free(im.g);
        return s;
    }
    *out = im.g;
    return SEGRT_OK;
}

sg_status sg_onnx_import_file(const char *path, sg_graph **out)
{
    /* Mapped, not read: the unpacker copies what it keeps, so a buffer of
     * the whole file would be one more pass over the weights and fresh
     * pages for all of them. protobuf caps a message at 2 GiB; larger
     * models keep weights outside. */
    sg_mapped_file map;
    SG_TRY(sg_map_file(path, (uint64_t)1 << 31, "a protobuf can hold (2 GiB); store the weights as external data",
                       &map));
    sg_map_will_read(&map);
    char dir_buf[PATH_MAX];
    snprintf(dir_buf, sizeof dir_buf, "%s", path);
    const char *dir = dirname(dir_buf);
    sg_status s = sg_onnx_import(map.data, map.size, dir, path, out);
    sg_unmap_file(&map);
    return s == SEGRT_OK ? s : sg_error_prefix(s, "%s: ", path);
}
