#include "graph/infer.h"

#include <string.h>

/* One table entry per operator; a missing sg_infer_<ID> fails the link. */
typedef sg_status (*infer_fn)(sg_graph *g, sg_node *n);

static const infer_fn infer_table[] = {
#define SG_OP(id, name, in_min, in_max, out_min, out_max) [SG_OP_##id] = sg_infer_##id,
#include "graph/ops.def"
#undef SG_OP
};
_Static_assert(sizeof infer_table / sizeof infer_table[0] == SG_OP_COUNT,
               "every operator needs a shape-inference function");

sg_dim sg_dim_of(int64_t size)
{
    sg_dim d = {size, SG_NO_SYM};
    return d;
}

sg_dim sg_dim_unknown(void)
{
    sg_dim d = {SG_DIM_UNKNOWN, SG_NO_SYM};
    return d;
}

sg_status sg_infer_check_dim(const sg_node *n, int64_t size, const char *what)
{
    if (size < 0)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "%s is negative (%lld)", what,
                             (long long)size);
    if (size > SG_MAX_DIM)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "%s is too large (%lld)", what,
                             (long long)size);
    return SEGRT_OK;
}

const sg_value *sg_infer_input(const sg_graph *g, const sg_node *n, int32_t i)
{
    if (i < 0 || i >= n->n_inputs || n->inputs[i] < 0)
        return NULL;
    return &g->values[n->inputs[i]];
}

sg_status sg_infer_axis(const sg_node *n, int64_t axis, int32_t rank, int32_t *out)
{
    int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "axis %lld is out of range for rank %d",
                             (long long)axis, rank);
    *out = (int32_t)a;
    return SEGRT_OK;
}

sg_status sg_infer_set_output(sg_graph *g, sg_node *n, int32_t j, sg_dtype dtype,
                              const sg_shape *shape)
{
    if (j >= n->n_outputs || n->outputs[j] < 0)
        return SEGRT_OK;
    sg_value *v = &g->values[n->outputs[j]];
    sg_shape s = *shape;
    if (s.rank > SEGRT_MAX_RANK)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "output `%s` has rank %d; segrt supports up to %d",
                             v->name, s.rank, SEGRT_MAX_RANK);
    for (int32_t i = 0; i < s.rank; i++) {
        if (s.d[i].size >= 0) {
            SG_TRY(sg_infer_check_dim(n, s.d[i].size, "an output dim"));
            s.d[i].sym = SG_NO_SYM;
        }
    }
    int64_t numel;
    if (sg_shape_is_static(&s) && !sg_shape_numel(&s, &numel))
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "output `%s` has more elements than fit in 64 bits",
                             v->name);
    /* Merge with what the model declared for this value (graph outputs):
     * a fixed declared dim must agree; a symbolic one names an unknown dim. */
    const sg_shape *dec = &v->declared;
    if (dec->rank >= 0 && s.rank >= 0) {
        char a[256], b[256];
        if (dec->rank != s.rank)
            return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                 "output `%s` is declared with rank %d (%s) but computes rank %d (%s)",
                                 v->name, dec->rank, sg_shape_format(g, dec, a, sizeof a), s.rank,
                                 sg_shape_format(g, &s, b, sizeof b));
        for (int32_t i = 0; i < s.rank; i++) {
            const sg_dim *dd = &dec->d[i];
            if (dd->size >= 0 && s.d[i].size >= 0 && dd->size != s.d[i].size)
                return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                     "output `%s` is declared %s but computes %s", v->name,
                                     sg_shape_format(g, dec, a, sizeof a),
                                     sg_shape_format(g, &s, b, sizeof b));
            if (dd->size >= 0 && s.d[i].size < 0)
                s.d[i] = *dd;
            /* A symbolic name is a name: where the computation gives the
             * dim another size than the symbol's, the exporter named it
             * wrongly (torch's TorchScript exporter declared an
             * EfficientNet UNet's output height `n`, the batch's name,
             * beside a dynamic batch), and the computed size stands, as in
             * onnxruntime. */
            if (dd->size < 0 && dd->sym >= 0 && s.d[i].size < 0 && s.d[i].sym < 0)
                s.d[i].sym = dd->sym;
        }
    }
    if (v->dtype != SEGRT_DTYPE_UNDEFINED && dtype != SEGRT_DTYPE_UNDEFINED && v->dtype != dtype &&
        (v->is_output || v->data))
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "output `%s` is declared %s but computes %s",
                             v->name, segrt_dtype_name(v->dtype), segrt_dtype_name(dtype));
    if (dtype != SEGRT_DTYPE_UNDEFINED)
        v->dtype = dtype;
    v->shape = s;
    return SEGRT_OK;
}

sg_status sg_infer_broadcast(const sg_graph *g, const sg_node *n, const sg_shape *a,
                             const sg_shape *b, sg_shape *out)
{
    if (a->rank < 0 || b->rank < 0) {
        *out = sg_shape_unknown();
        return SEGRT_OK;
    }
    int32_t rank = a->rank > b->rank ? a->rank : b->rank;
    sg_shape r;
    memset(&r, 0, sizeof r);
    r.rank = rank;
    for (int32_t i = 0; i < rank; i++) {
        int32_t ia = i - (rank - a->rank), ib = i - (rank - b->rank);
        sg_dim da = ia >= 0 ? a->d[ia] : sg_dim_of(1);
        sg_dim db = ib >= 0 ? b->d[ib] : sg_dim_of(1);
        if (da.size == 1)
            r.d[i] = db;
        else if (db.size == 1)
            r.d[i] = da;
        else if (da.size >= 0 && db.size >= 0) {
            if (da.size != db.size) {
                char sa[256], sb[256];
                return sg_node_error(n, SEGRT_ERROR_SHAPE, "cannot broadcast %s with %s",
                                     sg_shape_format(g, a, sa, sizeof sa),
                                     sg_shape_format(g, b, sb, sizeof sb));
            }
            r.d[i] = da;
        } else if (da.size >= 0)
            r.d[i] = da; /* the unknown one must be 1 or equal */
        else if (db.size >= 0)
            r.d[i] = db;
        else if (da.sym >= 0 && da.sym == db.sym)
            r.d[i] = da;
        else
            r.d[i] = sg_dim_unknown();
    }
    *out = r;
    return SEGRT_OK;
}

static sg_status const_input(const sg_graph *g, const sg_node *n, int32_t i, int32_t cap,
                             const sg_value **out, int64_t *numel)
{
    *out = NULL;
    const sg_value *v = sg_infer_input(g, n, i);
    if (!v || !v->data || !sg_shape_is_static(&v->shape))
        return SEGRT_OK;
    if (!sg_shape_numel(&v->shape, numel))
        return SEGRT_OK;
    if (*numel > cap)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                             "input `%s` has %lld elements; at most %d make sense here", v->name,
                             (long long)*numel, cap);
    *out = v;
    return SEGRT_OK;
}

sg_status sg_infer_const_ints(const sg_graph *g, const sg_node *n, int32_t i, int64_t *vals,
                              int32_t cap, int32_t *count)
{
    const sg_value *v;
    int64_t numel = 0;
    *count = -1;
    SG_TRY(const_input(g, n, i, cap, &v, &numel));
    if (!v)
        return SEGRT_OK;
    if (!sg_dtype_is_integer(v->dtype))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input `%s` must be integer, not %s",
                             v->name, segrt_dtype_name(v->dtype));
    const void *data = sg_blob_data(v->data);
    for (int64_t k = 0; k < numel; k++)
        vals[k] = sg_dtype_load_i64(v->dtype, data, k);
    *count = (int32_t)numel;
    return SEGRT_OK;
}

sg_status sg_infer_const_floats(const sg_graph *g, const sg_node *n, int32_t i, float *vals,
                                int32_t cap, int32_t *count)
{
    const sg_value *v;
    int64_t numel = 0;
    *count = -1;
    SG_TRY(const_input(g, n, i, cap, &v, &numel));
    if (!v)
        return SEGRT_OK;
    if (v->dtype == SEGRT_DTYPE_BOOL)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input `%s` must be numeric", v->name);
    const void *data = sg_blob_data(v->data);
    for (int64_t k = 0; k < numel; k++)
        vals[k] = (float)sg_dtype_load_f64(v->dtype, data, k);
    *count = (int32_t)numel;
    return SEGRT_OK;
}

sg_status sg_infer_node(sg_graph *g, sg_node *n)
{
    const sg_op_info *info = sg_op_get(n->op);
    int32_t present = n->n_inputs;
    if (present < info->min_inputs || present > info->max_inputs)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "has %d inputs; %s takes %d to %d",
                             present, info->name, info->min_inputs, info->max_inputs);
    if (n->n_outputs < info->min_outputs || n->n_outputs > info->max_outputs)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "has %d outputs; %s gives %d to %d",
                             n->n_outputs, info->name, info->min_outputs, info->max_outputs);
    for (int32_t i = 0; i < info->min_inputs; i++)
        if (n->inputs[i] < 0)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "required input %d is missing", i);
    for (int32_t i = 0; i < n->n_inputs; i++) {
        const sg_value *v = sg_infer_input(g, n, i);
        if (v && v->dtype == SEGRT_DTYPE_UNDEFINED && v->shape.rank < 0 && !v->is_input &&
            v->producer < 0)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                 "input `%s` is neither a graph input, an initializer nor the output of a node",
                                 v->name);
    }
    return infer_table[n->op](g, n);
}

sg_status sg_graph_bind_input(sg_graph *g, const char *name, int32_t rank, const int64_t *dims)
{
    int32_t at = -1;
    for (int32_t i = 0; i < g->n_inputs && at < 0; i++)
        if (strcmp(g->values[g->inputs[i]].name, name) == 0)
            at = i;
    if (at < 0) {
        char names[512] = "";
        size_t used = 0;
        for (int32_t i = 0; i < g->n_inputs && used < sizeof names; i++) {
            int k = snprintf(names + used, sizeof names - used, "%s`%s`", i ? ", " : "",
                             g->values[g->inputs[i]].name);
            if (k > 0)
                used += (size_t)k;
        }
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "the model has no input `%s` (its inputs: %s)",
                        name, names);
    }
    return sg_graph_bind_input_at(g, at, rank, dims);
}

sg_status sg_graph_bind_input_at(sg_graph *g, int32_t input, int32_t rank, const int64_t *dims)
{
    SG_ASSERT(input >= 0 && input < g->n_inputs);
    sg_value *v = &g->values[g->inputs[input]];
    const char *name = v->name;
    char want[256], got[256];
    sg_shape given = sg_shape_of_dims(dims, rank);
    const sg_shape *dec = &v->declared;
    if (rank < 0 || rank > SEGRT_MAX_RANK)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "input `%s`: rank %d is not supported",
                        name, rank);
    for (int32_t i = 0; i < rank; i++)
        if (dims[i] < 0 || dims[i] > SG_MAX_DIM)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "input `%s`: dim %d is %lld", name, i,
                            (long long)dims[i]);
    int64_t numel;
    if (!sg_dims_product(dims, rank, &numel))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "input `%s`: %s has more elements than fit in 64 bits", name,
                        sg_dims_format(dims, rank, got, sizeof got));
    if (dec->rank >= 0 && dec->rank != rank)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "input `%s` expects rank %d (%s), given rank %d (%s)", name, dec->rank,
                        sg_shape_format(g, dec, want, sizeof want), rank,
                        sg_dims_format(dims, rank, got, sizeof got));
    /* Check every fixed dim and every symbol before binding any, so that a
     * failed bind leaves the graph as it was. */
    for (int32_t i = 0; dec->rank >= 0 && i < rank; i++) {
        const sg_dim *d = &dec->d[i];
        bool bad = (d->size >= 0 && d->size != dims[i]) ||
                   (d->size < 0 && d->sym >= 0 && g->sym_size[d->sym] >= 0 &&
                    g->sym_size[d->sym] != dims[i]);
        for (int32_t k = 0; k < i && !bad; k++)
            bad = d->size < 0 && d->sym >= 0 && dec->d[k].sym == d->sym && dims[k] != dims[i];
        if (bad && d->size < 0 && d->sym >= 0 && g->sym_size[d->sym] >= 0)
            /* The symbol was fixed earlier (an engine built for one shape,
             * or another input): say to what. */
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "input `%s` expects %s, given %s: %s is %lld here", name,
                            sg_shape_format(g, dec, want, sizeof want), sg_dims_format(dims, rank, got, sizeof got),
                            g->syms[d->sym], (long long)g->sym_size[d->sym]);
        if (bad)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "input `%s` expects %s, given %s%s%s",
                            name, sg_shape_format(g, dec, want, sizeof want),
                            sg_dims_format(dims, rank, got, sizeof got),
                            d->sym >= 0 ? ": symbol " : "", d->sym >= 0 ? g->syms[d->sym] : "");
    }
    for (int32_t i = 0; dec->rank >= 0 && i < rank; i++)
        if (dec->d[i].size < 0 && dec->d[i].sym >= 0)
            g->sym_size[dec->d[i].sym] = dims[i];
    v->shape = given;
    return SEGRT_OK;
}

sg_status sg_graph_infer(sg_graph *g)
{
    for (int32_t i = 0; i < g->n_values; i++) {
        sg_value *v = &g->values[i];
        if (v->is_input || v->data)
            continue;
        v->shape = v->declared;
        /* Symbols already bound from inputs resolve here too. */
        for (int32_t d = 0; d < v->shape.rank; d++)
            if (v->shape.d[d].size < 0 && v->shape.d[d].sym >= 0 && g->sym_size[v->shape.d[d].sym] >= 0)
                v->shape.d[d].size = g->sym_size[v->shape.d[d].sym];
        if (!v->is_output)
            v->dtype = SEGRT_DTYPE_UNDEFINED;
    }
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead)
            SG_TRY(sg_infer_node(g, &g->nodes[i]));
    return SEGRT_OK;
}

sg_status sg_graph_specialize(const sg_graph *g, size_t n_inputs, const segrt_tensor *inputs, sg_graph **out)
{
    sg_graph *c = NULL;
    SG_TRY(sg_graph_clone(g, &c));
    sg_status s = SEGRT_OK;
    for (size_t i = 0; i < n_inputs && s == SEGRT_OK; i++)
        s = sg_graph_bind_input_at(c, (int32_t)i, inputs[i].rank, inputs[i].dims);
    if (s == SEGRT_OK)
        s = sg_graph_infer(c);
    if (s != SEGRT_OK) {
        sg_graph_free(c);
        return sg_error_prefix(s, "%s: ", g->path);
    }
    *out = c;
    return SEGRT_OK;
}
