/* Cast, Shape, Size, ConstantOfShape, Range and Constant: the ops that
 * constant folding meets most in shape arithmetic. */
#include "backend/ref/ref_internal.h"
#include "graph/passes.h"

#include <math.h>
#include <string.h>

/* Converts count elements from one dtype to another as ONNX Cast does.
 * Integer to integer stays in int64 so large values keep every bit. */
static void convert(sg_dtype dt, void *dst, sg_dtype st, const void *src, int64_t count)
{
    if (dt == st) {
        memcpy(dst, src, (size_t)count * segrt_dtype_size(dt));
        return;
    }
    bool src_int = !sg_dtype_is_float(st), dst_int = !sg_dtype_is_float(dt);
    for (int64_t i = 0; i < count; i++) {
        if (src_int && dst_int) {
            sg_dtype_store_i64(dt, dst, i, sg_dtype_load_i64(st, src, i));
        } else if (src_int && dt == SEGRT_DTYPE_FLOAT32) {
            /* One rounding, int64 straight to float. */
            ((float *)dst)[i] = (float)sg_dtype_load_i64(st, src, i);
        } else if (st == SEGRT_DTYPE_FLOAT64 &&
                   (dt == SEGRT_DTYPE_FLOAT16 || dt == SEGRT_DTYPE_BFLOAT16)) {
            /* double to half through float would round twice. Narrowing
             * to float with round-to-odd (truncate, then set the lowest
             * bit when inexact) makes the second rounding exact. */
            double v = ((const double *)src)[i];
            float f = (float)v;
            if (v == v && (double)f != v) {
                uint32_t u;
                memcpy(&u, &f, 4);
                if (fabs((double)f) > fabs(v))
                    u -= 1;
                u |= 1;
                memcpy(&f, &u, 4);
            }
            ((uint16_t *)dst)[i] =
                dt == SEGRT_DTYPE_FLOAT16 ? sg_float_to_half(f) : sg_float_to_bf16(f);
        } else {
            sg_dtype_store_f64(dt, dst, i, sg_dtype_load_f64(st, src, i));
        }
    }
}

REF_KERNEL(sg_ref_cast)
{
    const sg_tensor *x;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_same_numel(n, x, y));
    const sg_attr *to = sg_attr_find(n, "to");
    if (to && to->kind == SG_ATTR_INT && to->i != (int64_t)y->dtype)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "output is %s but `to` is %lld",
                             segrt_dtype_name(y->dtype), (long long)to->i);
    if (y->data == x->data && y->dtype == x->dtype)
        return SEGRT_OK;
    convert(y->dtype, y->data, x->dtype, x->data, sg_ref_numel(x));
    return SEGRT_OK;
}

/* Shape and Size read only the input's dims, so its data may be absent
 * (a value whose shape is known before its contents). */
static sg_status dims_only_input(const sg_node *n, const sg_tensor *const *in, int32_t n_in,
                                 const sg_tensor **t)
{
    *t = sg_ref_in(in, n_in, 0);
    if (!*t)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "required input 0 is missing");
    int64_t numel;
    if ((*t)->rank < 0 || (*t)->rank > SEGRT_MAX_RANK ||
        !sg_dims_product((*t)->dims, (*t)->rank, &numel))
        return sg_node_error(n, SEGRT_ERROR_INTERNAL, "input 0 has invalid dims");
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_shape)
{
    const sg_tensor *x;
    sg_tensor *y;
    SG_TRY(dims_only_input(n, in, n_in, &x));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_dtype(n, y, SEGRT_DTYPE_INT64, "output"));
    int64_t r = x->rank;
    int64_t start = sg_attr_int(n, "start", 0), end = sg_attr_int(n, "end", r);
    start = start < 0 ? start + r : start;
    end = end < 0 ? end + r : end;
    start = start < 0 ? 0 : start > r ? r : start;
    end = end < 0 ? 0 : end > r ? r : end;
    int64_t len = end > start ? end - start : 0;
    SG_TRY(sg_ref_check_out_dims(n, y, &len, 1));
    for (int64_t i = 0; i < len; i++)
        ((int64_t *)y->data)[i] = x->dims[start + i];
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_size)
{
    const sg_tensor *x;
    sg_tensor *y;
    SG_TRY(dims_only_input(n, in, n_in, &x));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_dtype(n, y, SEGRT_DTYPE_INT64, "output"));
    if (sg_ref_numel(y) != 1)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "output must be a scalar");
    *(int64_t *)y->data = sg_ref_numel(x);
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_constant_of_shape)
{
    const sg_tensor *ts;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &ts));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    int64_t shape[SEGRT_MAX_RANK];
    int32_t count = 0;
    SG_TRY(sg_ref_read_ints(n, ts, shape, SEGRT_MAX_RANK, &count, "shape"));
    SG_TRY(sg_ref_check_out_dims(n, y, shape, count));
    uint64_t v = 0; /* default: float32 zero */
    sg_dtype vt = SEGRT_DTYPE_FLOAT32;
    const sg_attr *a = sg_attr_find(n, "value");
    if (a) {
        if (a->kind != SG_ATTR_TENSOR || !a->t_data || !sg_dtype_is_supported(a->t_dtype) ||
            sg_blob_size(a->t_data) < segrt_dtype_size(a->t_dtype))
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                 "value must be a one-element tensor");
        vt = a->t_dtype;
        memcpy(&v, sg_blob_data(a->t_data), segrt_dtype_size(vt));
    }
    if (vt != y->dtype)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "output is %s but value is %s",
                             segrt_dtype_name(y->dtype), segrt_dtype_name(vt));
    size_t es = segrt_dtype_size(vt);
    int64_t numel = sg_ref_numel(y);
    for (int64_t i = 0; i < numel; i++)
        memcpy((char *)y->data + (size_t)i * es, &v, es);
    return SEGRT_OK;
}

/* output[i] = start + i * delta; the output's length is what shape
 * inference computed from ceil((limit - start) / delta). */
REF_KERNEL(sg_ref_range)
{
    const sg_tensor *t[3];
    sg_tensor *y;
    for (int32_t i = 0; i < 3; i++) {
        SG_TRY(sg_ref_need_in(n, in, n_in, i, &t[i]));
        if (sg_ref_numel(t[i]) != 1)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                 "start, limit and delta must be scalars");
    }
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    if (y->rank != 1)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "output must have rank 1");
    for (int32_t i = 0; i < 3; i++)
        SG_TRY(sg_ref_check_dtype(n, t[i], y->dtype, "input"));
    int64_t count = y->dims[0];
    sg_dtype dt = y->dtype;
    if (sg_dtype_is_float(dt)) {
        double start = sg_dtype_load_f64(dt, t[0]->data, 0);
        double limit = sg_dtype_load_f64(dt, t[1]->data, 0);
        double delta = sg_dtype_load_f64(dt, t[2]->data, 0);
        if (delta == 0)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "delta must not be 0");
        double want = ceil((limit - start) / delta);
        if (!(fabs((double)count - (want > 0 ? want : 0)) <= 1))
            return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                 "output has %lld elements; the inputs give %g", (long long)count,
                                 want);
        for (int64_t i = 0; i < count; i++)
            sg_dtype_store_f64(dt, y->data, i, start + (double)i * delta);
        return SEGRT_OK;
    }
    if (!sg_dtype_is_integer(dt))
        return sg_ref_unsupported_dtype(n, dt);
    int64_t start = sg_dtype_load_i64(dt, t[0]->data, 0);
    int64_t limit = sg_dtype_load_i64(dt, t[1]->data, 0);
    int64_t delta = sg_dtype_load_i64(dt, t[2]->data, 0);
    if (delta == 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "delta must not be 0");
    /* ceil((limit - start) / delta) on the exact difference, which may not
     * fit in int64: work with magnitudes in uint64. */
    uint64_t span, step = delta > 0 ? (uint64_t)delta : 0 - (uint64_t)delta;
    int64_t want = 0;
    if ((delta > 0 && limit > start) || (delta < 0 && limit < start)) {
        span =
            limit > start ? (uint64_t)limit - (uint64_t)start : (uint64_t)start - (uint64_t)limit;
        uint64_t c = span / step + (span % step != 0);
        want = c > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)c;
    }
    if (count != want)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "output has %lld elements; the inputs give %lld",
                             (long long)count, (long long)want);
    for (int64_t i = 0; i < count; i++)
        sg_dtype_store_i64(dt, y->data, i, ref_add_wrap(start, ref_mul_wrap(i, delta)));
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_constant)
{
    (void)in;
    (void)n_in;
    sg_tensor *y;
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    int64_t numel = sg_ref_numel(y);
    const sg_attr *a;
    if ((a = sg_attr_find(n, "value")) && a->kind == SG_ATTR_TENSOR) {
        if (a->t_dtype != y->dtype)
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "output is %s but value is %s",
                                 segrt_dtype_name(y->dtype), segrt_dtype_name(a->t_dtype));
        SG_TRY(sg_ref_check_out_dims(n, y, a->t_dims, a->t_rank));
        size_t bytes = sg_tensor_bytes(y);
        if (bytes && (!a->t_data || sg_blob_size(a->t_data) < bytes))
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "value holds too little data");
        if (bytes)
            memcpy(y->data, sg_blob_data(a->t_data), bytes);
        return SEGRT_OK;
    }
    bool is_float;
    int64_t want;
    if ((a = sg_attr_find(n, "value_float")) && a->kind == SG_ATTR_FLOAT)
        is_float = true, want = 1;
    else if ((a = sg_attr_find(n, "value_floats")) && a->kind == SG_ATTR_FLOATS)
        is_float = true, want = a->n;
    else if ((a = sg_attr_find(n, "value_int")) && a->kind == SG_ATTR_INT)
        is_float = false, want = 1;
    else if ((a = sg_attr_find(n, "value_ints")) && a->kind == SG_ATTR_INTS)
        is_float = false, want = a->n;
    else
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED,
                             "needs a value, value_float(s) or value_int(s) attribute");
    SG_TRY(sg_ref_check_dtype(n, y, is_float ? SEGRT_DTYPE_FLOAT32 : SEGRT_DTYPE_INT64, "output"));
    if (numel != want ||
        (a->kind == SG_ATTR_FLOATS || a->kind == SG_ATTR_INTS ? y->rank != 1 : y->rank != 0))
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "output dims do not match the value");
    for (int64_t i = 0; i < numel; i++) {
        if (a->kind == SG_ATTR_FLOAT)
            ((float *)y->data)[i] = a->f;
        else if (a->kind == SG_ATTR_FLOATS)
            ((float *)y->data)[i] = a->floats[i];
        else if (a->kind == SG_ATTR_INT)
            ((int64_t *)y->data)[i] = a->i;
        else
            ((int64_t *)y->data)[i] = a->ints[i];
    }
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_if)
{
    (void)in;
    (void)n_in;
    (void)out;
    (void)n_out;
    return sg_if_not_folded(n);
}
