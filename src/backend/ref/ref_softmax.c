/* Softmax and LogSoftmax along one axis (the opset 13 definition), computed
 * in double with the maximum subtracted first so exp cannot overflow. */
#include "backend/ref/ref_internal.h"

#include <math.h>

REF_KERNEL(sg_ref_softmax)
{
    const sg_tensor *x;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_out_dims(n, y, x->dims, x->rank));
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));
    if (!sg_dtype_is_float(x->dtype))
        return sg_ref_unsupported_dtype(n, x->dtype);
    if (x->rank == 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input must have rank >= 1");
    int32_t axis = 0;
    SG_TRY(sg_ref_axis(n, sg_attr_int(n, "axis", -1), x->rank, &axis));
    int64_t outer = 1, len = x->dims[axis], inner = 1;
    for (int32_t i = 0; i < axis; i++)
        outer *= x->dims[i];
    for (int32_t i = axis + 1; i < x->rank; i++)
        inner *= x->dims[i];
    bool log_form = n->op == SG_OP_LOG_SOFTMAX;
    sg_dtype t = x->dtype;
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            int64_t base = o * len * inner + i;
            double mx = -INFINITY;
            for (int64_t k = 0; k < len; k++)
                mx = ref_max_nan(mx, sg_dtype_load_f64(t, x->data, base + k * inner));
            double sum = 0;
            for (int64_t k = 0; k < len; k++)
                sum += exp(sg_dtype_load_f64(t, x->data, base + k * inner) - mx);
            double lsum = log(sum);
            for (int64_t k = 0; k < len; k++) {
                double d = sg_dtype_load_f64(t, x->data, base + k * inner) - mx;
                double v = log_form ? d - lsum : exp(d) / sum;
                sg_dtype_store_f64(y->dtype, y->data, base + k * inner, v);
            }
        }
    }
    return SEGRT_OK;
}
