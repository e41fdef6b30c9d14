/* Conv and ConvTranspose over 1, 2 or 3 spatial dims, NC[D][H]W layout.
 *
 * Both are written as direct loops that keep one output row in cache and
 * add into it, tap by tap, a weight times a row of the input. The range of
 * output x that a tap can reach without leaving the input is worked out
 * once per kernel column, so the innermost loop has no branches and, for
 * unit stride, reads the input contiguously: the compiler vectorises it.
 * Lower ranks are run as 3-D with leading spatial dims of size 1.
 *
 * float32 and float64 compute in their own precision; float16 and bfloat16
 * are widened to float32 and rounded back. */
#include "backend/ref/ref_internal.h"

#include <string.h>

typedef struct conv_geom {
    int64_t batch, c_in, c_out, group;
    /* Spatial dims, padded at the front to three. */
    int64_t in[3], out[3], k[3], stride[3], dil[3], pad[3];
    /* Per kernel column kw: the output x (Conv) or input x (ConvTranspose)
     * range [lo, hi) for which the tap stays inside the tensors. */
    int64_t *lo, *hi;
} conv_geom;

/* Floor division for a positive divisor. */
static int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Conv: output row of OW, tap kw reads input x = ox*s + kw*d - pad.
 * Valid ox: 0 <= ox*s + off <= IW-1. */
static void conv_ranges(conv_geom *g)
{
    for (int64_t kw = 0; kw < g->k[2]; kw++) {
        int64_t off = kw * g->dil[2] - g->pad[2];
        int64_t lo = off >= 0 ? 0 : (-off + g->stride[2] - 1) / g->stride[2];
        int64_t hi = floor_div(g->in[2] - 1 - off, g->stride[2]) + 1;
        g->lo[kw] = clamp64(lo, 0, g->out[2]);
        g->hi[kw] = clamp64(hi, g->lo[kw], g->out[2]);
    }
}

/* ConvTranspose: input x ix adds to output x = ix*s + kw*d - pad.
 * Valid ix: 0 <= ix*s + off <= OW-1 and 0 <= ix < IW. */
static void deconv_ranges(conv_geom *g)
{
    for (int64_t kw = 0; kw < g->k[2]; kw++) {
        int64_t off = kw * g->dil[2] - g->pad[2];
        int64_t lo = off >= 0 ? 0 : (-off + g->stride[2] - 1) / g->stride[2];
        int64_t hi = floor_div(g->out[2] - 1 - off, g->stride[2]) + 1;
        g->lo[kw] = clamp64(lo, 0, g->in[2]);
        g->hi[kw] = clamp64(hi, g->lo[kw], g->in[2]);
    }
}

/* The kernels, once per element type. */
#define DEFINE_CONV(NAME, T)                                                                       \
    static void NAME(const conv_geom *g, const T *restrict x, const T *restrict w,                 \
                     const T *restrict b, T *restrict y)                                           \
    {                                                                                              \
        const int64_t ID = g->in[0], IH = g->in[1], IW = g->in[2];                                 \
        const int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2];                              \
        const int64_t KD = g->k[0], KH = g->k[1], KW = g->k[2];                                    \
        const int64_t cg = g->c_in / g->group, mg = g->c_out / g->group;                           \
        const int64_t in_plane = ID * IH * IW, out_plane = OD * OH * OW, wk = KD * KH * KW;        \
        const int64_t sw = g->stride[2];                                                           \
        for (int64_t nn = 0; nn < g->batch; nn++)                                                  \
            for (int64_t oc = 0; oc < g->c_out; oc++) {                                            \
                const int64_t grp = oc / mg;                                                       \
                const T *wo = w + oc * cg * wk;                                                    \
                T *yc = y + (nn * g->c_out + oc) * out_plane;                                      \
                const T bias = b ? b[oc] : (T)0;                                                   \
                for (int64_t od = 0; od < OD; od++)                                                \
                    for (int64_t oh = 0; oh < OH; oh++) {                                          \
                        T *restrict yr = yc + (od * OH + oh) * OW;                                 \
                        for (int64_t ox = 0; ox < OW; ox++)                                        \
                            yr[ox] = bias;                                                         \
                        for (int64_t ic = 0; ic < cg; ic++) {                                      \
                            const T *xc = x + (nn * g->c_in + grp * cg + ic) * in_plane;           \
                            const T *wi = wo + ic * wk;                                            \
                            for (int64_t kd = 0; kd < KD; kd++) {                                  \
                                int64_t id = od * g->stride[0] + kd * g->dil[0] - g->pad[0];       \
                                if (id < 0 || id >= ID)                                            \
                                    continue;                                                      \
                                for (int64_t kh = 0; kh < KH; kh++) {                              \
                                    int64_t ih = oh * g->stride[1] + kh * g->dil[1] - g->pad[1];   \
                                    if (ih < 0 || ih >= IH)                                        \
                                        continue;                                                  \
                                    const T *restrict xr = xc + (id * IH + ih) * IW;               \
                                    const T *wr = wi + (kd * KH + kh) * KW;                        \
                                    for (int64_t kw = 0; kw < KW; kw++) {                          \
                                        const T wv = wr[kw];                                       \
                                        const int64_t off = kw * g->dil[2] - g->pad[2];            \
                                        const int64_t lo = g->lo[kw], hi = g->hi[kw];              \
                                        if (sw == 1)                                               \
                                            for (int64_t ox = lo; ox < hi; ox++)                   \
                                                yr[ox] += wv * xr[ox + off];                       \
                                        else                                                       \
                                            for (int64_t ox = lo; ox < hi; ox++)                   \
                                                yr[ox] += wv * xr[ox * sw + off];                  \
                                    }                                                              \
                                }                                                                  \
                            }                                                                      \
                        }                                                                          \
                    }                                                                              \
            }                                                                                      \
    }

/* ConvTranspose gathers into each output row from the input rows whose
 * taps land on it: output o = i*s + k*d - pad, so a row tap contributes
 * only where (o + pad - k*d) is a multiple of s. Weights are
 * [C_in, C_out/group, k...]. */
#define DEFINE_DECONV(NAME, T)                                                                     \
    static void NAME(const conv_geom *g, const T *restrict x, const T *restrict w,                 \
                     const T *restrict b, T *restrict y)                                           \
    {                                                                                              \
        const int64_t ID = g->in[0], IH = g->in[1], IW = g->in[2];                                 \
        const int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2];                              \
        const int64_t KD = g->k[0], KH = g->k[1], KW = g->k[2];                                    \
        const int64_t cg = g->c_in / g->group, mg = g->c_out / g->group;                           \
        const int64_t in_plane = ID * IH * IW, out_plane = OD * OH * OW, wk = KD * KH * KW;        \
        const int64_t sw = g->stride[2];                                                           \
        for (int64_t nn = 0; nn < g->batch; nn++)                                                  \
            for (int64_t oc = 0; oc < g->c_out; oc++) {                                            \
                const int64_t grp = oc / mg, m = oc % mg;                                          \
                T *yc = y + (nn * g->c_out + oc) * out_plane;                                      \
                const T bias = b ? b[oc] : (T)0;                                                   \
                for (int64_t od = 0; od < OD; od++)                                                \
                    for (int64_t oh = 0; oh < OH; oh++) {                                          \
                        T *restrict yr = yc + (od * OH + oh) * OW;                                 \
                        for (int64_t ox = 0; ox < OW; ox++)                                        \
                            yr[ox] = bias;                                                         \
                        for (int64_t ic = 0; ic < cg; ic++) {                                      \
                            const int64_t c = grp * cg + ic;                                       \
                            const T *xc = x + (nn * g->c_in + c) * in_plane;                       \
                            const T *wi = w + (c * mg + m) * wk;                                   \
                            for (int64_t kd = 0; kd < KD; kd++) {                                  \
                                int64_t td = od + g->pad[0] - kd * g->dil[0];                      \
                                if (td < 0 || td % g->stride[0] != 0 || td / g->stride[0] >= ID)   \
                                    continue;                                                      \
                                const int64_t id = td / g->stride[0];                              \
                                for (int64_t kh = 0; kh < KH; kh++) {                              \
                                    int64_t th = oh + g->pad[1] - kh * g->dil[1];                  \
                                    if (th < 0 || th % g->stride[1] != 0 ||                        \
                                        th / g->stride[1] >= IH)                                   \
                                        continue;                                                  \
                                    const int64_t ih = th / g->stride[1];                          \
                                    const T *restrict xr = xc + (id * IH + ih) * IW;               \
                                    const T *wr = wi + (kd * KH + kh) * KW;                        \
                                    for (int64_t kw = 0; kw < KW; kw++) {                          \
                                        const T wv = wr[kw];                                       \
                                        const int64_t off = kw * g->dil[2] - g->pad[2];            \
                                        const int64_t lo = g->lo[kw], hi = g->hi[kw];              \
                                        if (sw == 1)                                               \
                                            for (int64_t ix = lo; ix < hi; ix++)                   \
                                                yr[ix + off] += wv * xr[ix];                       \
                                        else                                                       \
                                            for (int64_t ix = lo; ix < hi; ix++)                   \
                                                yr[ix * sw + off] += wv * xr[ix];                  \
                                    }                                                              \
                                }                                                                  \
                            }                                                                      \
                        }                                                                          \
                    }                                                                              \
            }                                                                                      \
    }

DEFINE_CONV(conv_f32, float)
DEFINE_CONV(conv_f64, double)
DEFINE_DECONV(deconv_f32, float)
DEFINE_DECONV(deconv_f64, double)

/* Reads an INTS attribute of nsp entries (default def each), each >= min. */
static sg_status spatial_attr(const sg_node *n, const char *name, int32_t nsp, int64_t def,
                              int64_t min, int64_t *vals)
{
    int32_t count = 0;
    const int64_t *a = sg_attr_ints(n, name, &count);
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

typedef enum { PAD_NOTSET, PAD_SAME_UPPER, PAD_SAME_LOWER, PAD_VALID } auto_pad_kind;

static sg_status read_auto_pad(const sg_node *n, auto_pad_kind *out)
{
    *out = PAD_NOTSET;
    const char *s = sg_attr_string(n, "auto_pad", "NOTSET");
    if (strcmp(s, "NOTSET") == 0)
        *out = PAD_NOTSET;
    else if (strcmp(s, "SAME_UPPER") == 0)
        *out = PAD_SAME_UPPER;
    else if (strcmp(s, "SAME_LOWER") == 0)
        *out = PAD_SAME_LOWER;
    else if (strcmp(s, "VALID") == 0)
        *out = PAD_VALID;
    else
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "auto_pad \"%s\" is not valid", s);
    return SEGRT_OK;
}

/* The geometry shared by both ops: checks ranks, channels and groups and
 * reads kernel, strides and dilations. Pads and the expected output size
 * are left to the caller. */
static sg_status read_geom(const sg_node *n, const sg_tensor *x, const sg_tensor *w,
                           const sg_tensor *b, const sg_tensor *y, bool transpose, conv_geom *g,
                           int32_t *nsp_out)
{
    memset(g, 0, sizeof *g);
    *nsp_out = 0;
    int32_t nsp = x->rank - 2;
    if (nsp < 1 || nsp > 3)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED,
                             "input of rank %d: only 1, 2 or 3 spatial dims are supported",
                             x->rank);
    if (w->rank != x->rank || y->rank != x->rank)
        return sg_node_error(n, SEGRT_ERROR_SHAPE,
                             "input, weight and output ranks differ (%d, %d, %d)", x->rank, w->rank,
                             y->rank);
    g->group = sg_attr_int(n, "group", 1);
    if (g->group < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "group must be >= 1");
    g->batch = x->dims[0];
    g->c_in = x->dims[1];
    g->c_out = y->dims[1];
    int64_t w_out = transpose ? w->dims[1] * g->group : w->dims[0];
    int64_t w_in = transpose ? w->dims[0] : w->dims[1] * g->group;
    if (y->dims[0] != g->batch || w_in != g->c_in || w_out != g->c_out || g->c_in % g->group != 0 ||
        g->c_out % g->group != 0)
        return sg_node_error(n, SEGRT_ERROR_SHAPE,
                             "channels do not agree: input %lld, output %lld, weight %lldx%lld, "
                             "group %lld",
                             (long long)g->c_in, (long long)g->c_out, (long long)w->dims[0],
                             (long long)w->dims[1], (long long)g->group);
    if (b && sg_ref_numel(b) != g->c_out)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "bias has %lld values for %lld channels",
                             (long long)sg_ref_numel(b), (long long)g->c_out);
    int64_t k[3], st[3], dl[3];
    int32_t kcount = 0;
    const int64_t *ks = sg_attr_ints(n, "kernel_shape", &kcount);
    for (int32_t i = 0; i < nsp; i++)
        if (ks && (kcount != nsp || ks[i] != w->dims[2 + i]))
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "kernel_shape does not match the weight");
    SG_TRY(spatial_attr(n, "strides", nsp, 1, 1, st));
    SG_TRY(spatial_attr(n, "dilations", nsp, 1, 1, dl));
    for (int32_t i = 0; i < 3; i++) {
        int32_t s = i - (3 - nsp);
        g->in[i] = s >= 0 ? x->dims[2 + s] : 1;
        g->out[i] = s >= 0 ? y->dims[2 + s] : 1;
        k[i] = s >= 0 ? w->dims[2 + s] : 1;
        g->k[i] = k[i];
        g->stride[i] = s >= 0 ? st[s] : 1;
        g->dil[i] = s >= 0 ? dl[s] : 1;
    }
    *nsp_out = nsp;
    return SEGRT_OK;
}

/* Explicit pads (begin and end for nsp dims), each >= 0. */
static sg_status read_pads(const sg_node *n, int32_t nsp, int64_t *begin, int64_t *end)
{
    int32_t count = 0;
    const int64_t *p = sg_attr_ints(n, "pads", &count);
    if (p && count != 2 * nsp)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "pads has %d values; expected %d", count,
                             2 * nsp);
    for (int32_t i = 0; i < nsp; i++) {
        begin[i] = p ? p[i] : 0;
        end[i] = p ? p[nsp + i] : 0;
        if (begin[i] < 0 || end[i] < 0 || begin[i] > ((int64_t)1 << 32) ||
            end[i] > ((int64_t)1 << 32))
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "pads must be in [0, 2^32]");
    }
    return SEGRT_OK;
}

typedef void (*conv_f32_fn)(const conv_geom *, const float *, const float *, const float *,
                            float *);
typedef void (*conv_f64_fn)(const conv_geom *, const double *, const double *, const double *,
                            double *);

/* Runs the typed kernel; float16 and bfloat16 through float32 copies. */
static sg_status run_conv(conv_geom *g, const sg_tensor *x, const sg_tensor *w, const sg_tensor *b,
                          sg_tensor *y, conv_f32_fn f32, conv_f64_fn f64)
{
    if (sg_ref_numel(y) == 0)
        return SEGRT_OK;
    if (x->dtype == SEGRT_DTYPE_FLOAT32) {
        f32(g, x->data, w->data, b ? b->data : NULL, y->data);
        return SEGRT_OK;
    }
    if (x->dtype == SEGRT_DTYPE_FLOAT64) {
        f64(g, x->data, w->data, b ? b->data : NULL, y->data);
        return SEGRT_OK;
    }
    float *xf = sg_ref_to_f32(x), *wf = sg_ref_to_f32(w), *bf = b ? sg_ref_to_f32(b) : NULL;
    float *yf = sg_malloc(sizeof(float) * (size_t)sg_ref_numel(y));
    sg_status s = SEGRT_ERROR_OUT_OF_MEMORY;
    if (xf && wf && yf && (bf || !b)) {
        f32(g, xf, wf, bf, yf);
        sg_ref_from_f32(y, yf, sg_ref_numel(y));
        s = SEGRT_OK;
    }
    free(xf);
    free(wf);
    free(bf);
    free(yf);
    return s;
}

static sg_status check_dtypes(const sg_node *n, const sg_tensor *x, const sg_tensor *w,
                              const sg_tensor *b, const sg_tensor *y)
{
    if (!sg_dtype_is_float(x->dtype))
        return sg_ref_unsupported_dtype(n, x->dtype);
    SG_TRY(sg_ref_check_dtype(n, w, x->dtype, "weight"));
    if (b)
        SG_TRY(sg_ref_check_dtype(n, b, x->dtype, "bias"));
    return sg_ref_check_dtype(n, y, x->dtype, "output");
}

REF_KERNEL(sg_ref_conv)
{
    const sg_tensor *x, *w, *b;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &w));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 2, &b));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(check_dtypes(n, x, w, b, y));
    conv_geom g;
    int32_t nsp = 0;
    SG_TRY(read_geom(n, x, w, b, y, false, &g, &nsp));
    auto_pad_kind ap;
    SG_TRY(read_auto_pad(n, &ap));
    int64_t pb[3], pe[3];
    SG_TRY(read_pads(n, nsp, pb, pe));
    for (int32_t i = 0; i < nsp; i++) {
        int32_t d = i + 3 - nsp;
        int64_t ext = (g.k[d] - 1) * g.dil[d] + 1, want;
        if (ap == PAD_SAME_UPPER || ap == PAD_SAME_LOWER) {
            want = (g.in[d] + g.stride[d] - 1) / g.stride[d];
            int64_t total = (want - 1) * g.stride[d] + ext - g.in[d];
            total = total < 0 ? 0 : total;
            pb[i] = ap == PAD_SAME_UPPER ? total / 2 : total - total / 2;
        } else {
            if (ap == PAD_VALID)
                pb[i] = pe[i] = 0;
            int64_t span = g.in[d] + pb[i] + pe[i] - ext;
            want = span < 0 ? 0 : span / g.stride[d] + 1;
        }
        g.pad[d] = pb[i];
        if (g.out[d] != want)
            return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                 "output spatial dim %d is %lld; the attributes give %lld", i,
                                 (long long)g.out[d], (long long)want);
    }
    int64_t lo[64], hi[64];
    int64_t *lop = lo, *hip = hi;
    if (g.k[2] > 64) {
        lop = sg_malloc(sizeof(int64_t) * (size_t)g.k[2] * 2);
        if (!lop)
            return SEGRT_ERROR_OUT_OF_MEMORY;
        hip = lop + g.k[2];
    }
    g.lo = lop;
    g.hi = hip;
    conv_ranges(&g);
    sg_status s = run_conv(&g, x, w, b, y, conv_f32, conv_f64);
    if (lop != lo)
        free(lop);
    return s;
}

REF_KERNEL(sg_ref_conv_transpose)
{
    const sg_tensor *x, *w, *b;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &w));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 2, &b));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(check_dtypes(n, x, w, b, y));
    conv_geom g;
    int32_t nsp = 0;
    SG_TRY(read_geom(n, x, w, b, y, true, &g, &nsp));
    auto_pad_kind ap;
    SG_TRY(read_auto_pad(n, &ap));
    int64_t pb[3], pe[3], opad[3];
    SG_TRY(read_pads(n, nsp, pb, pe));
    SG_TRY(spatial_attr(n, "output_padding", nsp, 0, 0, opad));
    int32_t os_count = 0;
    const int64_t *os = sg_attr_ints(n, "output_shape", &os_count);
    if (os && os_count < nsp)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                             "output_shape has %d values for %d spatial dims", os_count, nsp);
    for (int32_t i = 0; i < nsp; i++) {
        int32_t d = i + 3 - nsp;
        int64_t full = g.stride[d] * (g.in[d] - 1) + opad[i] + (g.k[d] - 1) * g.dil[d] + 1;
        int64_t want;
        if (os || ap == PAD_SAME_UPPER || ap == PAD_SAME_LOWER) {
            /* The spec: pads come from the requested output size, the odd
             * one going to the end for SAME_UPPER and to the start
             * otherwise. output_shape may list all dims or only spatial. */
            want = os ? os[os_count - nsp + i] : g.in[d] * g.stride[d];
            if (want < 0 || want > SG_MAX_DIM)
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "output_shape is out of range");
            /* A requested size beyond the full one pads at the end only. */
            int64_t total = full > want ? full - want : 0;
            pb[i] = ap == PAD_SAME_UPPER ? total / 2 : total - total / 2;
        } else {
            if (ap == PAD_VALID)
                pb[i] = pe[i] = 0;
            want = full - pb[i] - pe[i];
        }
        g.pad[d] = pb[i];
        if (g.out[d] != want)
            return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                 "output spatial dim %d is %lld; the attributes give %lld", i,
                                 (long long)g.out[d], (long long)want);
    }
    int64_t lo[64], hi[64];
    int64_t *lop = lo, *hip = hi;
    if (g.k[2] > 64) {
        lop = sg_malloc(sizeof(int64_t) * (size_t)g.k[2] * 2);
        if (!lop)
            return SEGRT_ERROR_OUT_OF_MEMORY;
        hip = lop + g.k[2];
    }
    g.lo = lop;
    g.hi = hip;
    deconv_ranges(&g);
    sg_status s = run_conv(&g, x, w, b, y, deconv_f32, deconv_f64);
    if (lop != lo)
        free(lop);
    return s;
}
