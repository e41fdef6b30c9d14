/* QuantizeLinear and DequantizeLinear, computed as their arithmetic:
 * y = saturate(round(x / scale) + zero_point) and y = (x - zero_point) *
 * scale, with a scalar scale or one per index of `axis`. Rounding is half
 * to even, as the spec says; arithmetic in double, rounded once on the
 * store. (Running a network in INT8 is another matter: this is what a
 * graph with these nodes computes.) */
#include "backend/ref/ref_internal.h"

#include <math.h>
#include <string.h>

/* Where element i of x finds its scale and zero point. */
typedef struct quant_map {
    int64_t inner, len; /* per axis: the axis's stride and length (len 1: one scale) */
    int64_t block;      /* blocked: the block's length along the axis (0: not blocked) */
    int32_t axis, rank;
    int64_t xdims[SEGRT_MAX_RANK], sstrides[SEGRT_MAX_RANK];
} quant_map;

static int64_t param_index(const quant_map *m, int64_t i)
{
    if (!m->block)
        return m->len == 1 ? 0 : (i / m->inner) % m->len;
    int64_t k = 0;
    for (int32_t d = m->rank - 1; d >= 0; d--) {
        int64_t c = i % m->xdims[d];
        i /= m->xdims[d];
        k += (d == m->axis ? c / m->block : c) * m->sstrides[d];
    }
    return k;
}

static sg_status quant_layout(const sg_node *n, const sg_tensor *x, const sg_tensor *scale, const sg_tensor *zp,
                              quant_map *m)
{
    memset(m, 0, sizeof *m);
    int64_t bs = sg_attr_int(n, "block_size", 0);
    if (bs > 0) {
        SG_TRY(sg_ref_axis(n, sg_attr_int(n, "axis", 1), x->rank, &m->axis));
        bool ok = scale->rank == x->rank;
        for (int32_t d = 0; ok && d < x->rank; d++)
            ok = scale->dims[d] == (d == m->axis ? (x->dims[d] + bs - 1) / bs : x->dims[d]);
        if (!ok || (zp && (zp->rank != scale->rank || sg_ref_numel(zp) != sg_ref_numel(scale))))
            return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                 "blocks of %lld: the scale and zero point must have the "
                                 "input's dims, axis %d divided into blocks",
                                 (long long)bs, m->axis);
        m->block = bs;
        m->rank = x->rank;
        memcpy(m->xdims, x->dims, sizeof(int64_t) * (size_t)x->rank);
        sg_ref_strides(scale->dims, scale->rank, m->sstrides);
        return SEGRT_OK;
    }
    int64_t *inner = &m->inner, *len = &m->len;
    *inner = 1;
    *len = 1;
    int64_t ns = sg_ref_numel(scale);
    if (ns != 1 || scale->rank == 1) {
        int32_t axis;
        SG_TRY(sg_ref_axis(n, sg_attr_int(n, "axis", 1), x->rank, &axis));
        *len = x->dims[axis];
        for (int32_t d = axis + 1; d < x->rank; d++)
            *inner *= x->dims[d];
        if (ns != 1 && ns != *len)
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "%lld scales for an axis of %lld", (long long)ns,
                                 (long long)*len);
    }
    if (zp && sg_ref_numel(zp) != ns)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "the zero point has %lld values, the scale %lld",
                             (long long)sg_ref_numel(zp), (long long)ns);
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_quantize_linear)
{
    const sg_tensor *x, *scale, *zp;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &scale));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 2, &zp));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_out_dims(n, y, x->dims, x->rank));
    if (zp)
        SG_TRY(sg_ref_check_dtype(n, y, zp->dtype, "output"));
    double lo, hi;
    if (!sg_dtype_quant_range(y->dtype, &lo, &hi))
        return sg_ref_unsupported_dtype(n, y->dtype);
    quant_map m;
    SG_TRY(quant_layout(n, x, scale, zp, &m));
    int64_t count = sg_ref_numel(x);
    for (int64_t i = 0; i < count; i++) {
        int64_t k = param_index(&m, i);
        double s = sg_dtype_load_f64(scale->dtype, scale->data, k);
        double z = zp ? (double)sg_dtype_load_i64(zp->dtype, zp->data, k) : 0.0;
        /* x / scale in the input's precision (float32 for float32), as the
         * spec's reference divides, then rounded half to even. */
        double q = sg_dtype_load_f64(x->dtype, x->data, i) / s;
        if (x->dtype == SEGRT_DTYPE_FLOAT32)
            q = (double)(float)q;
        q = nearbyint(q) + z;
        q = q != q ? 0 : q < lo ? lo : q > hi ? hi : q;
        sg_dtype_store_i64(y->dtype, y->data, i, (int64_t)q);
    }
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_dequantize_linear)
{
    const sg_tensor *x, *scale, *zp;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &scale));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 2, &zp));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_out_dims(n, y, x->dims, x->rank));
    SG_TRY(sg_ref_check_dtype(n, y, scale->dtype, "output"));
    if (!sg_dtype_is_integer(x->dtype))
        return sg_ref_unsupported_dtype(n, x->dtype);
    quant_map m;
    SG_TRY(quant_layout(n, x, scale, zp, &m));
    int64_t count = sg_ref_numel(x);
    for (int64_t i = 0; i < count; i++) {
        int64_t k = param_index(&m, i);
        int64_t z = zp ? sg_dtype_load_i64(zp->dtype, zp->data, k) : 0;
        double v = (double)(sg_dtype_load_i64(x->dtype, x->data, i) - z);
        double s = sg_dtype_load_f64(scale->dtype, scale->data, k);
        /* (x - zp) * scale in float32 for a float32 scale, as the spec's
         * reference multiplies. */
        double r = y->dtype == SEGRT_DTYPE_FLOAT32 ? (double)((float)v * (float)s) : v * s;
        sg_dtype_store_f64(y->dtype, y->data, i, r);
    }
    return SEGRT_OK;
}
