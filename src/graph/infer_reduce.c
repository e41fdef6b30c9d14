/* Shape inference for reductions: ReduceMean, ReduceSum, ReduceMax,
 * ReduceMin and ArgMax. */
#include "graph/infer_util.h"

/* Shape of x reduced over the axes marked in reduce[]. */
static sg_shape reduced(const sg_shape *x, const bool *reduce, bool keepdims)
{
    sg_shape out = sg_shape_unknown();
    out.rank = 0;
    for (int32_t i = 0; i < x->rank; i++) {
        if (!reduce[i])
            out.d[out.rank++] = x->d[i];
        else if (keepdims)
            out.d[out.rank++] = sg_dim_of(1);
    }
    return out;
}

static sg_status read_flag(const sg_node *n, const char *name, int64_t def, bool *out)
{
    int64_t v = sg_attr_int(n, name, def);
    if (v != 0 && v != 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "%s is %lld; must be 0 or 1", name,
                             (long long)v);
    *out = v == 1;
    return SEGRT_OK;
}

static sg_status infer_reduce(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    sg_dtype t = sg_iu_dtype(g, n, 0);
    bool keepdims = true, noop = false;
    SG_TRY(read_flag(n, "keepdims", 1, &keepdims));
    SG_TRY(read_flag(n, "noop_with_empty_axes", 0, &noop));

    /* axes moved from an attribute to an optional input: in opset 13 for
     * ReduceSum, 18 for the others. Either form is read where present, so
     * that a model that mixes them up still loads. */
    int64_t axes[SG_IU_CONST_CAP];
    int32_t count = 0; /* -1: given but not constant */
    if (sg_iu_has_input(n, 1)) {
        SG_TRY(sg_infer_const_ints(g, n, 1, axes, SG_IU_CONST_CAP, &count));
        if (count < 0 && sg_iu_static_len(g, n, 1) == 0)
            count = 0;
    } else {
        const int64_t *a = sg_attr_ints(n, "axes", &count);
        if (count > SG_IU_CONST_CAP)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "`axes` has %d values", count);
        for (int32_t i = 0; a && i < count; i++)
            axes[i] = a[i];
    }

    sg_shape out = sg_shape_unknown();
    if (count == 0 && noop)
        return sg_infer_set_output(g, n, 0, t, &x);
    if (x.rank < 0) {
        /* Reducing everything without keepdims gives a scalar whatever the rank. */
        if (count == 0 && !keepdims)
            out.rank = 0;
        return sg_infer_set_output(g, n, 0, t, &out);
    }
    bool reduce[SEGRT_MAX_RANK] = {false};
    if (count < 0) {
        /* Which axes go is not known, only how many where the input's
         * length is static. */
        int64_t k = keepdims ? 0 : sg_iu_static_len(g, n, 1);
        if (k >= 0 && k <= x.rank) {
            out.rank = x.rank - (int32_t)k;
            for (int32_t i = 0; i < out.rank; i++)
                out.d[i] = sg_dim_unknown();
        }
        return sg_infer_set_output(g, n, 0, t, &out);
    }
    if (count == 0) {
        for (int32_t i = 0; i < x.rank; i++)
            reduce[i] = true;
    } else {
        int32_t ax[SEGRT_MAX_RANK];
        SG_TRY(sg_iu_axes(n, axes, count, x.rank, ax, "`axes`"));
        for (int32_t i = 0; i < count; i++)
            reduce[ax[i]] = true;
    }
    out = reduced(&x, reduce, keepdims);
    return sg_infer_set_output(g, n, 0, t, &out);
}

sg_status sg_infer_REDUCE_MEAN(sg_graph *g, sg_node *n) { return infer_reduce(g, n); }
sg_status sg_infer_REDUCE_SUM(sg_graph *g, sg_node *n) { return infer_reduce(g, n); }
sg_status sg_infer_REDUCE_MAX(sg_graph *g, sg_node *n) { return infer_reduce(g, n); }
sg_status sg_infer_REDUCE_MIN(sg_graph *g, sg_node *n) { return infer_reduce(g, n); }
sg_status sg_infer_REDUCE_PROD(sg_graph *g, sg_node *n) { return infer_reduce(g, n); }
sg_status sg_infer_REDUCE_L1(sg_graph *g, sg_node *n) { return infer_reduce(g, n); }
sg_status sg_infer_REDUCE_L2(sg_graph *g, sg_node *n) { return infer_reduce(g, n); }
sg_status sg_infer_REDUCE_SUM_SQUARE(sg_graph *g, sg_node *n) { return infer_reduce(g, n); }
sg_status sg_infer_REDUCE_LOG_SUM(sg_graph *g, sg_node *n) { return infer_reduce(g, n); }
sg_status sg_infer_REDUCE_LOG_SUM_EXP(sg_graph *g, sg_node *n) { return infer_reduce(g, n); }

static sg_status infer_arg(sg_graph *g, sg_node *n);

sg_status sg_infer_ARG_MAX(sg_graph *g, sg_node *n) { return infer_arg(g, n); }
sg_status sg_infer_ARG_MIN(sg_graph *g, sg_node *n) { return infer_arg(g, n); }

static sg_status infer_arg(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    SG_TRY(sg_iu_want_numeric(g, n, 0));
    bool keepdims = true, last = false;
    SG_TRY(read_flag(n, "keepdims", 1, &keepdims));
    SG_TRY(read_flag(n, "select_last_index", 0, &last));
    sg_shape out = sg_shape_unknown();
    if (x.rank >= 0) {
        int32_t axis;
        SG_TRY(sg_infer_axis(n, sg_attr_int(n, "axis", 0), x.rank, &axis));
        bool reduce[SEGRT_MAX_RANK] = {false};
        reduce[axis] = true;
        out = reduced(&x, reduce, keepdims);
    }
    return sg_infer_set_output(g, n, 0, SEGRT_DTYPE_INT64, &out);
}
