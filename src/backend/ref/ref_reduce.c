/* ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd, ReduceL1,
 * ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp, ArgMax and
 * ArgMin.
 *
 * Floats accumulate in double, integers in int64 with wrap-around (L2,
 * LogSum and LogSumExp of integers in double, truncated on the store, as
 * the spec's numpy reference casts them). The
 * input is walked once in order; each input row adds into the output
 * elements it maps to, found through broadcasting the keepdims-shaped
 * output against the input. */
#include "backend/ref/ref_internal.h"

#include <math.h>
#include <string.h>

/* The axes to reduce, as flags; *noop when there are none and
 * noop_with_empty_axes asks for the input unchanged. */
static sg_status reduce_axes(const sg_node *n, const sg_tensor *x, const sg_tensor *taxes,
                             bool *flags, bool *noop)
{
    int64_t axes[SEGRT_MAX_RANK];
    int32_t count = 0;
    *noop = false;
    if (taxes) {
        SG_TRY(sg_ref_read_ints(n, taxes, axes, SEGRT_MAX_RANK, &count, "axes"));
    } else {
        const int64_t *a = sg_attr_ints(n, "axes", &count);
        if (count > SEGRT_MAX_RANK)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "too many axes");
        if (a)
            memcpy(axes, a, sizeof(int64_t) * (size_t)count);
    }
    *noop = false;
    for (int32_t d = 0; d < x->rank; d++)
        flags[d] = count == 0;
    if (count == 0 && sg_attr_int(n, "noop_with_empty_axes", 0) != 0)
        *noop = true;
    for (int32_t i = 0; i < count; i++) {
        int32_t a = 0;
        SG_TRY(sg_ref_axis(n, axes[i], x->rank, &a));
        flags[a] = true;
    }
    return SEGRT_OK;
}

/* The identities of max and min over an empty set: the dtype's extremes
 * (for bool, false and true). */
static int64_t int_lowest(sg_dtype t)
{
    switch (t) {
    case SEGRT_DTYPE_INT8: return INT8_MIN;
    case SEGRT_DTYPE_INT16: return INT16_MIN;
    case SEGRT_DTYPE_INT32: return INT32_MIN;
    case SEGRT_DTYPE_INT64: return INT64_MIN;
    default: return 0; /* unsigned and bool */
    }
}

static int64_t int_highest(sg_dtype t)
{
    switch (t) {
    case SEGRT_DTYPE_INT8: return INT8_MAX;
    case SEGRT_DTYPE_UINT8: return UINT8_MAX;
    case SEGRT_DTYPE_INT16: return INT16_MAX;
    case SEGRT_DTYPE_UINT16: return UINT16_MAX;
    case SEGRT_DTYPE_INT32: return INT32_MAX;
    case SEGRT_DTYPE_BOOL: return 1;
    default: return INT64_MAX;
    }
}

/* Whether op accumulates something of each element other than itself. */
static bool reduce_maps(sg_op op)
{
    return op == SG_OP_REDUCE_L1 || op == SG_OP_REDUCE_L2 || op == SG_OP_REDUCE_SUM_SQUARE ||
           op == SG_OP_REDUCE_LOG_SUM || op == SG_OP_REDUCE_LOG_SUM_EXP;
}

/* The accumulator's start: the identity of op's combination. */
static double start_f64(sg_op op)
{
    return op == SG_OP_REDUCE_MAX ? -INFINITY : op == SG_OP_REDUCE_MIN ? INFINITY : op == SG_OP_REDUCE_PROD ? 1 : 0;
}

/* acc combined with element v. */
static double step_f64(sg_op op, double acc, double v)
{
    switch (op) {
    case SG_OP_REDUCE_MAX: return ref_max_nan(acc, v);
    case SG_OP_REDUCE_MIN: return ref_min_nan(acc, v);
    case SG_OP_REDUCE_PROD: return acc * v;
    case SG_OP_REDUCE_L1: return acc + fabs(v);
    case SG_OP_REDUCE_L2:
    case SG_OP_REDUCE_SUM_SQUARE: return acc + v * v;
    case SG_OP_REDUCE_LOG_SUM_EXP: return acc + exp(v);
    default: return acc + v; /* Sum, Mean, LogSum */
    }
}

/* The result from the accumulator of `count` elements. */
static double end_f64(sg_op op, double acc, int64_t count)
{
    switch (op) {
    case SG_OP_REDUCE_MEAN: return acc / (double)count; /* an empty reduction gives NaN */
    case SG_OP_REDUCE_L2: return sqrt(acc);
    case SG_OP_REDUCE_LOG_SUM:
    case SG_OP_REDUCE_LOG_SUM_EXP: return log(acc); /* empty: log(0) = -inf */
    default: return acc;
    }
}

REF_KERNEL(sg_ref_reduce)
{
    const sg_tensor *x, *taxes;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 1, &taxes));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));
    sg_op op = n->op;
    bool fl = sg_dtype_is_float(x->dtype) || op == SG_OP_REDUCE_L2 || op == SG_OP_REDUCE_LOG_SUM ||
              op == SG_OP_REDUCE_LOG_SUM_EXP;
    /* ReduceMax/Min take bool from opset 20: any and all. */
    bool is_bool = x->dtype == SEGRT_DTYPE_BOOL && (n->op == SG_OP_REDUCE_MAX || n->op == SG_OP_REDUCE_MIN);
    if (!sg_dtype_is_float(x->dtype) && !sg_dtype_is_integer(x->dtype) && !is_bool)
        return sg_ref_unsupported_dtype(n, x->dtype);
    bool flags[SEGRT_MAX_RANK], noop = false;
    SG_TRY(reduce_axes(n, x, taxes, flags, &noop));
    /* No axes and noop_with_empty_axes: each element alone (the input as
     * it is, or its image: |x|, x^2, log x...). */
    if (noop && !reduce_maps(op))
        return sg_ref_copy(n, in, 1, out, n_out);
    for (int32_t d = 0; noop && d < x->rank; d++)
        flags[d] = false;
    bool keep = sg_attr_int(n, "keepdims", 1) != 0;
    /* kept: the output with reduced dims as 1; want: what the output must be. */
    sg_tensor kept = *y;
    kept.rank = x->rank;
    int64_t want[SEGRT_MAX_RANK], count = 1;
    int32_t wr = 0;
    for (int32_t d = 0; d < x->rank; d++) {
        kept.dims[d] = flags[d] ? 1 : x->dims[d];
        if (flags[d])
            count *= x->dims[d];
        if (!flags[d] || keep)
            want[wr++] = kept.dims[d];
    }
    SG_TRY(sg_ref_check_out_dims(n, y, want, wr));
    int64_t numel = sg_ref_numel(y);
    size_t es = fl ? sizeof(double) : sizeof(int64_t);
    void *acc = sg_malloc(es * (size_t)(numel ? numel : 1));
    if (!acc)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    double *af = acc;
    int64_t *ai = acc;
    for (int64_t i = 0; i < numel; i++) {
        if (fl)
            af[i] = start_f64(op);
        else
            ai[i] = op == SG_OP_REDUCE_MAX   ? int_lowest(x->dtype)
                    : op == SG_OP_REDUCE_MIN ? int_highest(x->dtype)
                    : op == SG_OP_REDUCE_PROD ? 1
                                              : 0;
    }
    const sg_tensor *kp = &kept;
    ref_bcast bc;
    sg_status s = sg_ref_bcast_init(n, &bc, x->dims, x->rank, &kp, 1);
    if (s != SEGRT_OK) {
        free(acc);
        return s;
    }
    int64_t idx[SEGRT_MAX_RANK] = {0}, off[REF_BCAST_MAX] = {0};
    int64_t st = bc.strides[0][bc.rank - 1];
    for (int64_t r = 0; r < bc.rows; r++) {
        int64_t xo = r * bc.inner;
        for (int64_t j = 0; j < bc.inner; j++) {
            int64_t o = off[0] + j * st;
            if (fl) {
                double v = sg_dtype_load_f64(x->dtype, x->data, xo + j);
                af[o] = step_f64(op, af[o], v);
            } else {
                int64_t v = sg_dtype_load_i64(x->dtype, x->data, xo + j);
                switch (op) {
                case SG_OP_REDUCE_MAX: ai[o] = v > ai[o] ? v : ai[o]; break;
                case SG_OP_REDUCE_MIN: ai[o] = v < ai[o] ? v : ai[o]; break;
                case SG_OP_REDUCE_PROD: ai[o] = ref_mul_wrap(ai[o], v); break;
                case SG_OP_REDUCE_L1: ai[o] = ref_add_wrap(ai[o], v < 0 ? ref_sub_wrap(0, v) : v); break;
                case SG_OP_REDUCE_SUM_SQUARE: ai[o] = ref_add_wrap(ai[o], ref_mul_wrap(v, v)); break;
                default: ai[o] = ref_add_wrap(ai[o], v); break;
                }
            }
        }
        sg_ref_bcast_next(&bc, idx, off);
    }
    for (int64_t i = 0; i < numel; i++) {
        if (fl) {
            double v = end_f64(op, af[i], count);
            if (sg_dtype_is_integer(y->dtype)) /* L2, LogSum, LogSumExp of integers: truncated */
                sg_dtype_store_i64(y->dtype, y->data, i, isfinite(v) ? (int64_t)v : 0);
            else
                sg_dtype_store_f64(y->dtype, y->data, i, v);
        } else {
            int64_t v = ai[i];
            if (op == SG_OP_REDUCE_MEAN)
                v = count ? v / count : 0;
            sg_dtype_store_i64(y->dtype, y->data, i, v);
        }
    }
    free(acc);
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_arg_max)
{
    const sg_tensor *x;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_dtype(n, y, SEGRT_DTYPE_INT64, "output"));
    if (x->rank < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input must have rank >= 1");
    int32_t axis = 0;
    SG_TRY(sg_ref_axis(n, sg_attr_int(n, "axis", 0), x->rank, &axis));
    bool keep = sg_attr_int(n, "keepdims", 1) != 0;
    bool last = sg_attr_int(n, "select_last_index", 0) != 0;
    int64_t want[SEGRT_MAX_RANK];
    int32_t wr = 0;
    for (int32_t d = 0; d < x->rank; d++)
        if (d != axis || keep)
            want[wr++] = d == axis ? 1 : x->dims[d];
    SG_TRY(sg_ref_check_out_dims(n, y, want, wr));
    int64_t outer = 1, len = x->dims[axis], inner = 1;
    for (int32_t d = 0; d < axis; d++)
        outer *= x->dims[d];
    for (int32_t d = axis + 1; d < x->rank; d++)
        inner *= x->dims[d];
    if (len == 0 && outer * inner > 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "cannot take %s over an empty axis",
                             n->op == SG_OP_ARG_MIN ? "ArgMin" : "ArgMax");
    /* ArgMin is ArgMax of the order reversed: the smallest, NaN first (as
     * numpy's argmin). */
    double sgn = n->op == SG_OP_ARG_MIN ? -1.0 : 1.0;
    bool fl = sg_dtype_is_float(x->dtype);
    int64_t *yd = y->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t base = o * len * inner + i, best = 0;
            if (fl) {
                /* NaN counts as the largest value, as numpy's argmax. */
                double bv = sgn * sg_dtype_load_f64(x->dtype, x->data, base);
                for (int64_t k = 1; k < len; k++) {
                    double v = sgn * sg_dtype_load_f64(x->dtype, x->data, base + k * inner);
                    bool bnan = bv != bv, vnan = v != v;
                    bool better = bnan ? (last && vnan) : (vnan || v > bv || (last && v == bv));
                    if (better) {
                        bv = v;
                        best = k;
                    }
                }
            } else {
                int64_t bv = sg_dtype_load_i64(x->dtype, x->data, base);
                bool min = n->op == SG_OP_ARG_MIN;
                for (int64_t k = 1; k < len; k++) {
                    int64_t v = sg_dtype_load_i64(x->dtype, x->data, base + k * inner);
                    if ((min ? v < bv : v > bv) || (last && v == bv)) {
                        bv = v;
                        best = k;
                    }
                }
            }
            yd[o * inner + i] = best;
        }
    return SEGRT_OK;
}
