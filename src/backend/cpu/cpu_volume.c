/* The CPU backend's volume operations (backend_volume.h): plain C on host
 * memory over OpenMP, the reference the CUDA backend's are tested against.
 *
 * Resampling follows scipy.ndimage (zoom, map_coordinates) with mode
 * "nearest": NEAREST reads floor(x + 0.5) and LINEAR the two samples
 * around x, x clamped to [0, n - 1]; CUBIC the four B-spline coefficients
 * around x unclamped. scipy pads a line with 12 copies of its edge samples
 * before the spline filter; here the filter is that of the line extended
 * by its edge samples forever (the two differ by about z^12, 1e-7 of the
 * signal), and the coefficients past each end follow from the two nearest
 * ones (spline_taps). Sums run in double, each output element written by
 * one thread, so results repeat bit for bit whatever the thread count. */
#include "backend/backend_volume.h"

#include "core/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Elements below which a loop stays on the calling thread. */
#define VOL_PARALLEL_MIN 65536
/* Lines the spline filter runs at once, so that lines along the depth or
 * height axis are read a cache line at a time. */
#define VOL_FILTER_LINES 32
/* A resampled position reads at most this many inputs (CUBIC, with the
 * coefficients past the ends folded into the nearest two). */
#define VOL_MAX_TAPS 6

/* The pole of the cubic B-spline's inverse filter. */
static const double spline_z = -0.267949192431122706472553658494127633; /* sqrt(3) - 2 */

typedef struct vol_taps {
    int32_t n;
    int64_t idx[VOL_MAX_TAPS];
    double w[VOL_MAX_TAPS];
} vol_taps;

static void taps_add(vol_taps *t, int64_t idx, double w)
{
    if (w == 0.0)
        return;
    for (int32_t i = 0; i < t->n; i++)
        if (t->idx[i] == idx) {
            t->w[i] += w;
            return;
        }
    t->idx[t->n] = idx;
    t->w[t->n++] = w;
}

/* Coefficient idx of a line of n (any idx): the line extended by its edge
 * samples has, before index 1, coefficients c[k] = s0 + A z^-k (the
 * filter's equations with a constant right-hand side, bounded to the
 * left), where s0 = ((5 + z) c[0] + (1 - z) c[1]) / 6 is the edge sample
 * (the interpolation condition at 0 with c[-1] = c[0] - z (c[1] - c[0])),
 * so c[k] = s0 (1 - z^-k) + c[0] z^-k; past n - 1 likewise. */
static void spline_taps(vol_taps *t, int64_t idx, int64_t n, double w)
{
    const double z = spline_z;
    if (n == 1) {
        taps_add(t, 0, w);
        return;
    }
    if (idx >= 0 && idx < n) {
        taps_add(t, idx, w);
        return;
    }
    int64_t e0 = idx < 0 ? 0 : n - 1, e1 = idx < 0 ? 1 : n - 2, m = idx < 0 ? -idx : idx - (n - 1);
    double q = m < 64 ? pow(z, (double)m) : 0.0;
    taps_add(t, e0, w * ((1.0 - q) * (5.0 + z) / 6.0 + q));
    taps_add(t, e1, w * (1.0 - q) * (1.0 - z) / 6.0);
}

/* What output position o of an axis of n inputs reads. */
static void axis_taps(const sg_vol_axis *ax, int64_t n, int64_t o, vol_taps *t)
{
    double x = ax->scale * ((double)o + ax->shift) + ax->offset;
    t->n = 0;
    if (ax->interp == SG_VOL_CUBIC) {
        double f = floor(x), u = x - f, u2 = u * u, u3 = u2 * u, v = 1.0 - u;
        int64_t i0 = (int64_t)f;
        double w[4] = {v * v * v / 6.0, (3.0 * u3 - 6.0 * u2 + 4.0) / 6.0, (-3.0 * u3 + 3.0 * u2 + 3.0 * u + 1.0) / 6.0,
                       u3 / 6.0};
        for (int32_t k = 0; k < 4; k++)
            if (w[k] != 0.0)
                spline_taps(t, i0 - 1 + k, n, w[k]);
        return;
    }
    if (!(x > 0.0))
        x = 0.0;
    if (x > (double)(n - 1))
        x = (double)(n - 1);
    if (ax->interp == SG_VOL_NEAREST) {
        int64_t i = (int64_t)floor(x + 0.5);
        taps_add(t, i < n ? i : n - 1, 1.0);
        return;
    }
    double f = floor(x);
    int64_t i0 = (int64_t)f;
    double u = x - f;
    taps_add(t, i0, 1.0 - u);
    taps_add(t, i0 + 1 < n ? i0 + 1 : n - 1, u);
}

static sg_status check_dims(const char *call, const int64_t *dims, int32_t n)
{
    for (int32_t d = 0; d < n; d++)
        if (dims[d] < 0)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume %s: dims[%d] is %lld", call, (int)d,
                            (long long)dims[d]);
    return SEGRT_OK;
}

static int64_t prod(const int64_t *dims, int32_t from, int32_t to)
{
    int64_t p = 1;
    for (int32_t d = from; d < to; d++)
        p *= dims[d];
    return p;
}

static sg_status check_axis(const char *call, const sg_vol_axis *ax, int64_t n_in, bool cubic_ok)
{
    if (!ax)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume %s: no axis parameters", call);
    if (ax->n_out < 0 || !isfinite(ax->scale) || !isfinite(ax->offset) || !isfinite(ax->shift))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "cpu volume %s: axis of %lld outputs, scale %g, shift %g, offset %g", call,
                        (long long)ax->n_out, ax->scale, ax->shift, ax->offset);
    if (ax->interp != SG_VOL_NEAREST && ax->interp != SG_VOL_LINEAR && (!cubic_ok || ax->interp != SG_VOL_CUBIC))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume %s: interpolation %d", call, (int)ax->interp);
    if (ax->n_out > 0 && n_in < 1)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume %s: %lld outputs from an empty axis", call,
                        (long long)ax->n_out);
    return SEGRT_OK;
}

static sg_status vol_strided_copy(sg_backend_stream *stream, size_t elem_size, const void *src, int64_t src_offset,
                                  const int64_t src_stride[4], void *dst, const int64_t dst_stride[4],
                                  const int64_t dims[4])
{
    (void)stream;
    if (!src_stride || !dst_stride || !dims)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume strided_copy: NULL strides or dims");
    SG_TRY(check_dims("strided_copy", dims, 4));
    if (elem_size != 1 && elem_size != 2 && elem_size != 4)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume strided_copy: elements of %zu bytes", elem_size);
    int64_t planes = dims[0] * dims[1];
    if (planes * dims[2] * dims[3] == 0)
        return SEGRT_OK;
    if (!src || !dst)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume strided_copy: NULL buffer");
    const char *s = src;
    char *d = dst;
#pragma omp parallel for schedule(static) if (planes * dims[2] * dims[3] >= VOL_PARALLEL_MIN)
    for (int64_t p = 0; p < planes; p++) {
        int64_t c = p / dims[1], k = p % dims[1];
        for (int64_t j = 0; j < dims[2]; j++) {
            int64_t si = src_offset + c * src_stride[0] + k * src_stride[1] + j * src_stride[2];
            int64_t di = c * dst_stride[0] + k * dst_stride[1] + j * dst_stride[2];
            for (int64_t i = 0; i < dims[3]; i++, si += src_stride[3], di += dst_stride[3]) {
                if (elem_size == 4)
                    memcpy(d + di * 4, s + si * 4, 4);
                else if (elem_size == 2)
                    memcpy(d + di * 2, s + si * 2, 2);
                else
                    d[di] = s[si];
            }
        }
    }
    return SEGRT_OK;
}

static sg_status vol_fill(sg_backend_stream *stream, void *dst, int value, size_t bytes)
{
    (void)stream;
    if (bytes && !dst)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume fill: NULL buffer");
    if (bytes)
        memset(dst, value, bytes);
    return SEGRT_OK;
}

static sg_status vol_resample_axis(sg_backend_stream *stream, const float *src, const int64_t dims[4], int32_t axis,
                                   const sg_vol_axis *ax, float *dst)
{
    (void)stream;
    if (!dims)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume resample_axis: NULL dims");
    SG_TRY(check_dims("resample_axis", dims, 4));
    if (axis < 1 || axis > 3)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume resample_axis: axis %d (1 to 3)", (int)axis);
    int64_t n = dims[axis];
    SG_TRY(check_axis("resample_axis", ax, n, true));
    int64_t outer = prod(dims, 0, axis), inner = prod(dims, axis + 1, 4), n_out = ax->n_out;
    if (outer * inner * n_out == 0)
        return SEGRT_OK;
    if (!src || !dst)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume resample_axis: NULL buffer");
    vol_taps *taps = malloc(sizeof *taps * (size_t)n_out);
    if (!taps)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "cpu volume resample_axis: no memory for %lld positions",
                        (long long)n_out);
    for (int64_t o = 0; o < n_out; o++)
        axis_taps(ax, n, o, &taps[o]);
    int64_t rows = outer * n_out;
#pragma omp parallel for schedule(static) if (rows * inner >= VOL_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t b = r / n_out, o = r % n_out;
        const vol_taps *t = &taps[o];
        const float *row[VOL_MAX_TAPS];
        for (int32_t q = 0; q < t->n; q++)
            row[q] = src + (b * n + t->idx[q]) * inner;
        float *out = dst + r * inner;
        for (int64_t i = 0; i < inner; i++) {
            double a = 0.0;
            for (int32_t q = 0; q < t->n; q++)
                a += t->w[q] * (double)row[q][i];
            out[i] = (float)a;
        }
    }
    free(taps);
    return SEGRT_OK;
}

static sg_status vol_spline_prefilter(sg_backend_stream *stream, float *data, const int64_t dims[4], int32_t axis)
{
    (void)stream;
    if (!dims)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume spline_prefilter: NULL dims");
    SG_TRY(check_dims("spline_prefilter", dims, 4));
    if (axis < 1 || axis > 3)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume spline_prefilter: axis %d (1 to 3)", (int)axis);
    int64_t n = dims[axis], outer = prod(dims, 0, axis), inner = prod(dims, axis + 1, 4);
    if (n < 2 || outer * inner == 0)
        return SEGRT_OK; /* a line of one sample is its own coefficient */
    if (!data)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume spline_prefilter: NULL buffer");
    int64_t blocks = (inner + VOL_FILTER_LINES - 1) / VOL_FILTER_LINES, jobs = outer * blocks;
    int failed = 0;
    const double z = spline_z;
#pragma omp parallel if (outer * inner * n >= VOL_PARALLEL_MIN) reduction(| : failed)
    {
        double *buf = malloc(sizeof(double) * (size_t)n * VOL_FILTER_LINES);
        if (!buf)
            failed = 1;
#pragma omp for schedule(static)
        for (int64_t jb = 0; jb < jobs; jb++) {
            if (!buf)
                continue;
            int64_t b = jb / blocks, i0 = (jb % blocks) * VOL_FILTER_LINES;
            int32_t L = (int32_t)(inner - i0 < VOL_FILTER_LINES ? inner - i0 : VOL_FILTER_LINES);
            float *base = data + b * n * inner + i0;
            for (int64_t k = 0; k < n; k++)
                for (int32_t l = 0; l < L; l++)
                    buf[k * L + l] = (double)base[k * inner + l];
            /* the lines' coefficients, buf[k * L + l]: the causal and
             * anticausal passes of the inverse filter, started as for the
             * line extended by its edge samples forever */
            double *last = buf + (n - 1) * L;
            double p_end[VOL_FILTER_LINES];
            for (int32_t l = 0; l < L; l++)
                p_end[l] = last[l] / (1.0 - z);
            /* causal: c+[0] sums the constant s0 over z^m */
            for (int32_t l = 0; l < L; l++)
                buf[l] = buf[l] / (1.0 - z);
            for (int64_t k = 1; k < n; k++)
                for (int32_t l = 0; l < L; l++)
                    buf[k * L + l] += z * buf[(k - 1) * L + l];
            /* anticausal: c-[k] = z (c-[k+1] - c+[k]), started at the sum
             * -z^(m+1) c+[n-1+m] of the causal output past the end, which
             * tends to P = s[n-1] / (1 - z) as P + z^m (c+[n-1] - P) */
            for (int32_t l = 0; l < L; l++)
                last[l] = -z * (p_end[l] / (1.0 - z) + (last[l] - p_end[l]) / (1.0 - z * z));
            for (int64_t k = n - 2; k >= 0; k--)
                for (int32_t l = 0; l < L; l++)
                    buf[k * L + l] = z * (buf[(k + 1) * L + l] - buf[k * L + l]);
            for (int64_t k = 0; k < n; k++)
                for (int32_t l = 0; l < L; l++)
                    base[k * inner + l] = (float)(6.0 * buf[k * L + l]);
        }
        free(buf);
    }
    if (failed)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "cpu volume spline_prefilter: no memory for lines of %lld",
                        (long long)n);
    return SEGRT_OK;
}

static inline float clampf_keep_nan(float x, float lo, float hi)
{
    return x < lo ? lo : (x > hi ? hi : x);
}

static sg_status vol_intensity(sg_backend_stream *stream, float *data, const int64_t dims[4],
                               const sg_vol_affine *params, const uint8_t *mask)
{
    (void)stream;
    if (!dims || !params)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume intensity: NULL dims or parameters");
    SG_TRY(check_dims("intensity", dims, 4));
    int64_t plane = prod(dims, 1, 4), total = dims[0] * plane;
    if (total == 0)
        return SEGRT_OK;
    if (!data)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume intensity: NULL buffer");
#pragma omp parallel for schedule(static) if (total >= VOL_PARALLEL_MIN)
    for (int64_t e = 0; e < total; e++) {
        const sg_vol_affine *a = &params[e / plane];
        if (mask && !mask[e % plane])
            data[e] = 0.0f;
        else
            data[e] = (clampf_keep_nan(data[e], a->lo, a->hi) - a->sub) * a->mul;
    }
    return SEGRT_OK;
}

static sg_status vol_foreground_mask(sg_backend_stream *stream, const float *data, const int64_t dims[4], bool nonzero,
                                     float threshold, uint8_t *mask)
{
    (void)stream;
    if (!dims)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume foreground_mask: NULL dims");
    SG_TRY(check_dims("foreground_mask", dims, 4));
    int64_t plane = prod(dims, 1, 4);
    if (plane == 0)
        return SEGRT_OK;
    if (!data || !mask)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume foreground_mask: NULL buffer");
#pragma omp parallel for schedule(static) if (plane * dims[0] >= VOL_PARALLEL_MIN)
    for (int64_t v = 0; v < plane; v++) {
        uint8_t m = 0;
        for (int64_t c = 0; c < dims[0] && !m; c++) {
            float x = data[c * plane + v];
            m = nonzero ? x != 0.0f : x > threshold;
        }
        mask[v] = m;
    }
    return SEGRT_OK;
}

static sg_status vol_mask_box(sg_backend_stream *stream, const uint8_t *mask, const int64_t dims[3], int64_t lo[3],
                              int64_t hi[3])
{
    (void)stream;
    if (!dims || !lo || !hi)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume mask_box: NULL dims or box");
    SG_TRY(check_dims("mask_box", dims, 3));
    for (int32_t a = 0; a < 3; a++) {
        lo[a] = 0;
        hi[a] = 0;
    }
    int64_t D = dims[0], H = dims[1], W = dims[2];
    if (D * H * W == 0)
        return SEGRT_OK;
    if (!mask)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume mask_box: NULL buffer");
    /* Each depth's box of rows and columns, then their union in order. */
    int64_t *part = malloc(sizeof(int64_t) * 4 * (size_t)D);
    if (!part)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "cpu volume mask_box: no memory for %lld slices", (long long)D);
#pragma omp parallel for schedule(static) if (D * H * W >= VOL_PARALLEL_MIN)
    for (int64_t k = 0; k < D; k++) {
        int64_t jlo = H, jhi = 0, ilo = W, ihi = 0;
        for (int64_t j = 0; j < H; j++) {
            const uint8_t *row = mask + (k * H + j) * W;
            int64_t first = -1, lastv = -1;
            for (int64_t i = 0; i < W; i++)
                if (row[i]) {
                    if (first < 0)
                        first = i;
                    lastv = i;
                }
            if (first >= 0) {
                if (j < jlo)
                    jlo = j;
                jhi = j + 1;
                if (first < ilo)
                    ilo = first;
                if (lastv + 1 > ihi)
                    ihi = lastv + 1;
            }
        }
        part[4 * k] = jlo;
        part[4 * k + 1] = jhi;
        part[4 * k + 2] = ilo;
        part[4 * k + 3] = ihi;
    }
    int64_t l[3] = {D, H, W}, h[3] = {0, 0, 0};
    for (int64_t k = 0; k < D; k++) {
        if (part[4 * k + 1] <= part[4 * k])
            continue;
        if (k < l[0])
            l[0] = k;
        h[0] = k + 1;
        if (part[4 * k] < l[1])
            l[1] = part[4 * k];
        if (part[4 * k + 1] > h[1])
            h[1] = part[4 * k + 1];
        if (part[4 * k + 2] < l[2])
            l[2] = part[4 * k + 2];
        if (part[4 * k + 3] > h[2])
            h[2] = part[4 * k + 3];
    }
    free(part);
    if (h[0] > l[0])
        for (int32_t a = 0; a < 3; a++) {
            lo[a] = l[a];
            hi[a] = h[a];
        }
    return SEGRT_OK;
}

static sg_status vol_stats(sg_backend_stream *stream, const float *data, const int64_t dims[4], const uint8_t *mask,
                           sg_vol_stats *out)
{
    (void)stream;
    if (!dims || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume stats: NULL dims or output");
    SG_TRY(check_dims("stats", dims, 4));
    int64_t C = dims[0], D = dims[1], plane = dims[2] * dims[3];
    for (int64_t c = 0; c < C; c++)
        out[c] = (sg_vol_stats){0, 0.0, 0.0, INFINITY, -INFINITY};
    if (C * D * plane == 0)
        return SEGRT_OK;
    if (!data)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume stats: NULL buffer");
    /* Per channel and depth, then added in order: the same sums whatever
     * the threads. */
    sg_vol_stats *part = malloc(sizeof *part * (size_t)(C * D));
    if (!part)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "cpu volume stats: no memory for %lld slices", (long long)(C * D));
#pragma omp parallel for schedule(static) if (C * D * plane >= VOL_PARALLEL_MIN)
    for (int64_t ck = 0; ck < C * D; ck++) {
        const float *x = data + ck * plane;
        const uint8_t *m = mask ? mask + (ck % D) * plane : NULL;
        sg_vol_stats s = {0, 0.0, 0.0, INFINITY, -INFINITY};
        for (int64_t v = 0; v < plane; v++) {
            if (m && !m[v])
                continue;
            double y = (double)x[v];
            s.count++;
            s.sum += y;
            s.sum_sq += y * y;
            if (y < s.min)
                s.min = y;
            if (y > s.max)
                s.max = y;
        }
        part[ck] = s;
    }
    for (int64_t ck = 0; ck < C * D; ck++) {
        sg_vol_stats *o = &out[ck / D];
        const sg_vol_stats *s = &part[ck];
        o->count += s->count;
        o->sum += s->sum;
        o->sum_sq += s->sum_sq;
        if (s->min < o->min)
            o->min = s->min;
        if (s->max > o->max)
            o->max = s->max;
    }
    free(part);
    return SEGRT_OK;
}

static sg_status vol_resample_argmax(sg_backend_stream *stream, const float *scores, int64_t classes,
                                     const int64_t in_dims[3], const sg_vol_axis ax[3], segrt_dtype out_dtype,
                                     void *labels)
{
    (void)stream;
    if (!in_dims || !ax)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume resample_argmax: NULL dims or axes");
    SG_TRY(check_dims("resample_argmax", in_dims, 3));
    for (int32_t d = 0; d < 3; d++)
        SG_TRY(check_axis("resample_argmax", &ax[d], in_dims[d], false));
    if (out_dtype != SEGRT_DTYPE_UINT8 && out_dtype != SEGRT_DTYPE_UINT16)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume resample_argmax: labels of dtype %d", (int)out_dtype);
    if (classes < 1 || classes > (out_dtype == SEGRT_DTYPE_UINT8 ? 256 : 65536))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume resample_argmax: %lld classes for %s labels",
                        (long long)classes, out_dtype == SEGRT_DTYPE_UINT8 ? "uint8" : "uint16");
    int64_t D = ax[0].n_out, H = ax[1].n_out, W = ax[2].n_out;
    if (D * H * W == 0)
        return SEGRT_OK;
    if (!scores || !labels)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cpu volume resample_argmax: NULL buffer");
    vol_taps *t = malloc(sizeof *t * (size_t)(D + H + W));
    if (!t)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "cpu volume resample_argmax: no memory for %lld positions",
                        (long long)(D + H + W));
    vol_taps *tk = t, *tj = t + D, *ti = t + D + H;
    for (int64_t o = 0; o < D; o++)
        axis_taps(&ax[0], in_dims[0], o, &tk[o]);
    for (int64_t o = 0; o < H; o++)
        axis_taps(&ax[1], in_dims[1], o, &tj[o]);
    for (int64_t o = 0; o < W; o++)
        axis_taps(&ax[2], in_dims[2], o, &ti[o]);
    int64_t ih = in_dims[1], iw = in_dims[2], in_plane = in_dims[0] * ih * iw;
#pragma omp parallel for schedule(static) if (D * H * W * classes >= VOL_PARALLEL_MIN)
    for (int64_t r = 0; r < D * H; r++) {
        const vol_taps *a = &tk[r / H], *b = &tj[r % H];
        for (int64_t i = 0; i < W; i++) {
            const vol_taps *c = &ti[i];
            int64_t best = 0;
            double best_v = 0.0;
            for (int64_t k = 0; k < classes; k++) {
                const float *s = scores + k * in_plane;
                double v = 0.0;
                for (int32_t p = 0; p < a->n; p++)
                    for (int32_t q = 0; q < b->n; q++) {
                        const float *row = s + (a->idx[p] * ih + b->idx[q]) * iw;
                        double w = a->w[p] * b->w[q], acc = 0.0;
                        for (int32_t u = 0; u < c->n; u++)
                            acc += c->w[u] * (double)row[c->idx[u]];
                        v += w * acc;
                    }
                if (k == 0 || v > best_v) {
                    best = k;
                    best_v = v;
                }
            }
            if (out_dtype == SEGRT_DTYPE_UINT8)
                ((uint8_t *)labels)[r * W + i] = (uint8_t)best;
            else
                ((uint16_t *)labels)[r * W + i] = (uint16_t)best;
        }
    }
    free(t);
    return SEGRT_OK;
}

const sg_volume_ops sg_cpu_volume_ops = {
    .name = "cpu",
    .strided_copy = vol_strided_copy,
    .fill = vol_fill,
    .resample_axis = vol_resample_axis,
    .spline_prefilter = vol_spline_prefilter,
    .intensity = vol_intensity,
    .foreground_mask = vol_foreground_mask,
    .mask_box = vol_mask_box,
    .stats = vol_stats,
    .resample_argmax = vol_resample_argmax,
};
