/* MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool over 1, 2 or 3
 * spatial dims.
 *
 * Windows are walked tap by tap with each tap's position checked, which is
 * simple and, next to the convolutions around them, cheap. Values are read
 * as double (exact for every dtype pooling takes) and averages are summed
 * in double. Lower ranks run as 3-D with leading spatial dims of size 1. */
#include "backend/ref/ref_internal.h"

#include <math.h>
#include <string.h>

typedef struct pool_geom {
    int32_t nsp;
    int64_t planes; /* N * C */
    int64_t in[3], out[3], k[3], stride[3], dil[3], pad_b[3], pad_e[3];
} pool_geom;

static sg_status pool_attr(const sg_node *n, const char *name, int32_t nsp, int64_t def,
                           int64_t min, bool required, int64_t *vals)
{
    int32_t count = 0;
    const int64_t *a = sg_attr_ints(n, name, &count);
    if (!a && required)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "attribute %s is required", name);
    if (a && count != nsp)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "%s has %d values; expected %d", name,
                             count, nsp);
    for (int32_t i = 0; i < nsp; i++) {
        vals[i] = a ? a[i] : def;
        /* The bound keeps index products far from int64 overflow. */
        if (vals[i] < min || vals[i] > ((int64_t)1 << 20))
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "%s[%d] = %lld is out of range",
                                 name, i, (long long)vals[i]);
    }
    return SEGRT_OK;
}

/* Output size along one dim for explicit pads: floor, or ceil where the
 * last window still starts inside the input or its leading pad. */
static int64_t pool_out_size(int64_t in, int64_t pb, int64_t pe, int64_t ext, int64_t s,
                             bool ceil_mode)
{
    int64_t span = in + pb + pe - ext;
    if (span < 0)
        return 0;
    int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    if (ceil_mode && (o - 1) * s >= in + pb)
        o--;
    return o;
}

static sg_status read_pool_geom(const sg_node *n, const sg_tensor *x, const sg_tensor *y,
                                pool_geom *g)
{
    memset(g, 0, sizeof *g);
    int32_t nsp = x->rank - 2;
    if (nsp < 1 || nsp > 3)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED,
                             "input of rank %d: only 1, 2 or 3 spatial dims are supported",
                             x->rank);
    if (y->rank != x->rank || y->dims[0] != x->dims[0] || y->dims[1] != x->dims[1])
        return sg_ref_out_dims_error(n, y, x->dims, 2);
    g->nsp = nsp;
    g->planes = x->dims[0] * x->dims[1];
    int64_t k[3], st[3], dl[3], pads[6];
    SG_TRY(pool_attr(n, "kernel_shape", nsp, 1, 1, true, k));
    SG_TRY(pool_attr(n, "strides", nsp, 1, 1, false, st));
    SG_TRY(pool_attr(n, "dilations", nsp, 1, 1, false, dl));
    SG_TRY(pool_attr(n, "pads", 2 * nsp, 0, 0, false, pads));
    bool ceil_mode = sg_attr_int(n, "ceil_mode", 0) != 0;
    const char *ap = sg_attr_string(n, "auto_pad", "NOTSET");
    bool same = strcmp(ap, "SAME_UPPER") == 0 || strcmp(ap, "SAME_LOWER") == 0;
    bool valid = strcmp(ap, "VALID") == 0;
    if (!same && !valid && strcmp(ap, "NOTSET") != 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "auto_pad \"%s\" is not valid", ap);
    for (int32_t i = 0; i < 3; i++) {
        int32_t s = i - (3 - nsp);
        g->in[i] = s >= 0 ? x->dims[2 + s] : 1;
        g->out[i] = s >= 0 ? y->dims[2 + s] : 1;
        g->k[i] = s >= 0 ? k[s] : 1;
        g->stride[i] = s >= 0 ? st[s] : 1;
        g->dil[i] = s >= 0 ? dl[s] : 1;
        if (s < 0)
            continue;
        int64_t ext = (g->k[i] - 1) * g->dil[i] + 1, want, want2;
        if (same) {
            want = want2 = (g->in[i] + g->stride[i] - 1) / g->stride[i];
            int64_t total = (want - 1) * g->stride[i] + ext - g->in[i];
            total = total < 0 ? 0 : total;
            g->pad_b[i] = ap[5] == 'U' ? total / 2 : total - total / 2;
            g->pad_e[i] = total - g->pad_b[i];
        } else {
            g->pad_b[i] = valid ? 0 : pads[s];
            g->pad_e[i] = valid ? 0 : pads[nsp + s];
            want = pool_out_size(g->in[i], g->pad_b[i], g->pad_e[i], ext, g->stride[i], ceil_mode);
            /* Older exporters computed ceil mode without dropping a last
             * window that starts in the trailing pad; accept both. */
            want2 = want;
            if (ceil_mode) {
                int64_t span = g->in[i] + g->pad_b[i] + g->pad_e[i] - ext;
                want2 = span < 0 ? 0 : (span + g->stride[i] - 1) / g->stride[i] + 1;
            }
        }
        if (g->out[i] != want && g->out[i] != want2)
            return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                 "output spatial dim %d is %lld; the attributes give %lld", s,
                                 (long long)g->out[i], (long long)want);
    }
    return SEGRT_OK;
}

/* Pools one window; returns the value and, for max, the flat spatial
 * offset of the chosen input (row-major or, for storage_order 1,
 * column-major). */
typedef struct pool_args {
    const pool_geom *g;
    sg_dtype t;
    const void *x;
    int64_t plane_off;
    bool is_max, include_pad, col_major;
} pool_args;

static double pool_window(const pool_args *a, const int64_t *o, int64_t *arg)
{
    const pool_geom *g = a->g;
    double best = -INFINITY, sum = 0;
    int64_t count = 0, best_at = -1;
    for (int64_t kd = 0; kd < g->k[0]; kd++) {
        int64_t pd = o[0] * g->stride[0] + kd * g->dil[0] - g->pad_b[0];
        bool vd = pd >= 0 && pd < g->in[0];
        bool cd = pd >= -g->pad_b[0] && pd < g->in[0] + g->pad_e[0];
        for (int64_t kh = 0; kh < g->k[1]; kh++) {
            int64_t ph = o[1] * g->stride[1] + kh * g->dil[1] - g->pad_b[1];
            bool vh = ph >= 0 && ph < g->in[1];
            bool ch = ph >= -g->pad_b[1] && ph < g->in[1] + g->pad_e[1];
            for (int64_t kw = 0; kw < g->k[2]; kw++) {
                int64_t pw = o[2] * g->stride[2] + kw * g->dil[2] - g->pad_b[2];
                bool vw = pw >= 0 && pw < g->in[2];
                bool cw = pw >= -g->pad_b[2] && pw < g->in[2] + g->pad_e[2];
                if (!(vd && vh && vw)) {
                    /* Padding: counts toward the average's divisor when
                     * asked to and inside the declared pads. */
                    if (a->include_pad && cd && ch && cw)
                        count++;
                    continue;
                }
                int64_t sp = (pd * g->in[1] + ph) * g->in[2] + pw;
                double v = sg_dtype_load_f64(a->t, a->x, a->plane_off + sp);
                count++;
                if (a->is_max) {
                    /* The first NaN wins and stays, as numpy's max. */
                    if (best_at < 0 || v > best || (v != v && best == best)) {
                        best = v;
                        best_at = a->col_major ? (pw * g->in[1] + ph) * g->in[0] + pd : sp;
                    }
                } else {
                    sum += v;
                }
            }
        }
    }
    *arg = best_at < 0 ? 0 : best_at;
    if (a->is_max)
        return best;
    return sum / (double)count; /* an empty window gives NaN */
}

static sg_status pool(const sg_node *n, const sg_tensor *const *in, int32_t n_in,
                      sg_tensor *const *out, int32_t n_out, bool is_max)
{
    const sg_tensor *x;
    sg_tensor *y, *idx = NULL;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    if (is_max)
        SG_TRY(sg_ref_opt_out(n, out, n_out, 1, &idx));
    if (!sg_dtype_is_float(x->dtype) &&
        !(is_max && (x->dtype == SEGRT_DTYPE_INT8 || x->dtype == SEGRT_DTYPE_UINT8)))
        return sg_ref_unsupported_dtype(n, x->dtype);
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));
    pool_geom g;
    SG_TRY(read_pool_geom(n, x, y, &g));
    if (idx) {
        SG_TRY(sg_ref_check_dtype(n, idx, SEGRT_DTYPE_INT64, "indices"));
        SG_TRY(sg_ref_check_out_dims(n, idx, y->dims, y->rank));
    }
    int64_t so = sg_attr_int(n, "storage_order", 0);
    if (so != 0 && so != 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "storage_order must be 0 or 1");
    pool_args a = {
        &g, x->dtype, x->data, 0, is_max, sg_attr_int(n, "count_include_pad", 0) != 0, so == 1};
    int64_t in_plane = g.in[0] * g.in[1] * g.in[2];
    int64_t yi = 0;
    for (int64_t p = 0; p < g.planes; p++) {
        a.plane_off = p * in_plane;
        int64_t o[3];
        for (o[0] = 0; o[0] < g.out[0]; o[0]++)
            for (o[1] = 0; o[1] < g.out[1]; o[1]++)
                for (o[2] = 0; o[2] < g.out[2]; o[2]++, yi++) {
                    int64_t arg;
                    double v = pool_window(&a, o, &arg);
                    sg_dtype_store_f64(y->dtype, y->data, yi, v);
                    if (idx)
                        ((int64_t *)idx->data)[yi] = p * in_plane + arg;
                }
    }
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_max_pool) { return pool(n, in, n_in, out, n_out, true); }

REF_KERNEL(sg_ref_average_pool) { return pool(n, in, n_in, out, n_out, false); }

static sg_status global_pool(const sg_node *n, const sg_tensor *const *in, int32_t n_in,
                             sg_tensor *const *out, int32_t n_out, bool is_max)
{
    const sg_tensor *x;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    if (!sg_dtype_is_float(x->dtype))
        return sg_ref_unsupported_dtype(n, x->dtype);
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));
    if (x->rank < 2)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input must have rank >= 2");
    int64_t want[SEGRT_MAX_RANK];
    for (int32_t i = 0; i < x->rank; i++)
        want[i] = i < 2 ? x->dims[i] : 1;
    SG_TRY(sg_ref_check_out_dims(n, y, want, x->rank));
    int64_t planes = x->dims[0] * x->dims[1];
    int64_t plane = planes ? sg_ref_numel(x) / planes : 0;
    for (int64_t p = 0; p < planes; p++) {
        double acc = is_max ? -INFINITY : 0;
        for (int64_t i = 0; i < plane; i++) {
            double v = sg_dtype_load_f64(x->dtype, x->data, p * plane + i);
            acc = is_max ? ref_max_nan(acc, v) : acc + v;
        }
        if (!is_max)
            acc /= (double)plane;
        sg_dtype_store_f64(y->dtype, y->data, p, acc);
    }
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_global_average_pool) { return global_pool(n, in, n_in, out, n_out, false); }

REF_KERNEL(sg_ref_global_max_pool) { return global_pool(n, in, n_in, out, n_out, true); }
