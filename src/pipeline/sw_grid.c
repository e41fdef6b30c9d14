/* Sliding-window geometry (sw_grid.h): MONAI's and nnU-Net's window
 * grids and MONAI's importance map, reproduced step by step so that the
 * same settings give the same windows and, within float rounding, the
 * same weights. */
#include "pipeline/sw_grid.h"

#include "core/dtype.h"
#include "core/mem.h"
#include "core/tensor.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* More windows than any image needs; keeps every product in int64. */
#define SW_MAX_WINDOWS ((int64_t)1 << 40)

/* MONAI (_get_scan_interval, dense_patch_slices): interval
 * int(roi * (1 - overlap)), at least 1, or the whole window where it
 * covers the padded axis; windows at d * interval up to the first that
 * reaches the end, that one moved back to end flush. */
static int64_t monai_starts(int64_t size, int64_t roi, double overlap, int64_t *starts)
{
    int64_t interval = roi == size ? roi : (int64_t)((double)roi * (1.0 - overlap));
    if (interval < 1)
        interval = 1;
    if (!starts) /* the count, without walking 2^40 starts to find it */
        return (size > roi ? (size - roi + interval - 1) / interval : 0) + 1;
    int64_t n = 0;
    for (int64_t d = 0;; d++) {
        int64_t s = d * interval;
        bool last = s + roi >= size;
        starts[n] = last ? s - (s + roi - size) : s;
        n++;
        if (last)
            return n;
    }
}

/* nnU-Net v2 (compute_steps_for_sliding_window): ceil((size - roi) /
 * (roi * step)) + 1 steps spread evenly over [0, size - roi], each
 * rounded half to even as numpy's round. */
static int64_t nnunet_starts(int64_t size, int64_t roi, double overlap, int64_t *starts)
{
    double step = (double)roi * (1.0 - overlap);
    double steps = ceil((double)(size - roi) / step) + 1.0;
    if (!(steps <= (double)SW_MAX_WINDOWS)) /* converting more would be undefined */
        return SW_MAX_WINDOWS + 1;
    int64_t n = (int64_t)steps;
    if (starts) {
        double actual = n > 1 ? (double)(size - roi) / (double)(n - 1) : 0.0;
        for (int64_t i = 0; i < n; i++)
            starts[i] = (int64_t)nearbyint(actual * (double)i);
    }
    return n;
}

void sg_sw_grid_free(sg_sw_grid *g)
{
    if (!g)
        return;
    for (int32_t d = 0; d < SG_SW_MAX_DIMS; d++) {
        free(g->starts[d]);
        g->starts[d] = NULL;
    }
}

static sg_status grid_make(int32_t n_dims, const int64_t *size, const int64_t *roi, const double *overlap,
                           sg_sw_grid_kind kind, sg_sw_grid *out)
{
    memset(out, 0, sizeof *out);
    if (n_dims < 1 || n_dims > SG_SW_MAX_DIMS)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sliding window over %d spatial dims; 1 to %d are supported",
                        n_dims, SG_SW_MAX_DIMS);
    if (kind != SG_SW_GRID_MONAI && kind != SG_SW_GRID_NNUNET)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "unknown sliding-window grid %d", (int)kind);
    out->n_dims = n_dims;
    out->n_windows = 1;
    int64_t roi_voxels = 1, padded_voxels = 1;
    for (int32_t d = 0; d < n_dims; d++) {
        if (size[d] < 1 || size[d] > SG_SW_MAX_VOXELS)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "spatial dim %d of the image is %lld", d,
                            (long long)size[d]);
        if (roi[d] > SG_SW_MAX_VOXELS)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "a window of %lld voxels along dim %d; sliding windows take at most 2^40",
                            (long long)roi[d], d);
        if (!(overlap[d] >= 0.0 && overlap[d] < 1.0))
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "overlap %g along dim %d: it must be in [0, 1)",
                            overlap[d], d);
        int64_t r = roi[d] > 0 ? roi[d] : size[d];
        int64_t diff = r > size[d] ? r - size[d] : 0;
        out->size[d] = size[d];
        out->roi[d] = r;
        out->pad_begin[d] = diff / 2;
        out->pad_end[d] = diff - diff / 2;
        out->padded[d] = size[d] + diff;
        /* Voxel counts of the window and the padded image fit 2^40, so
         * that the pipelines' products with batch, channels and classes
         * are checked in int64 (sg_sw_check_buffers) without overflowing. */
        if (!sg_mul_i64(roi_voxels, r, &roi_voxels) || roi_voxels > SG_SW_MAX_VOXELS ||
            !sg_mul_i64(padded_voxels, out->padded[d], &padded_voxels) || padded_voxels > SG_SW_MAX_VOXELS) {
            char wb[96], pb[96];
            int64_t rd[SG_SW_MAX_DIMS], pd[SG_SW_MAX_DIMS];
            for (int32_t k = 0; k < n_dims; k++) {
                rd[k] = roi[k] > 0 ? roi[k] : size[k];
                pd[k] = rd[k] > size[k] ? rd[k] : size[k];
            }
            sg_dims_format(rd, n_dims, wb, sizeof wb);
            sg_dims_format(pd, n_dims, pb, sizeof pb);
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "a %s window over an image padded to %s: sliding windows take at most 2^40 voxels "
                            "in a window and in the padded image",
                            wb, pb);
        }
        int64_t n = kind == SG_SW_GRID_MONAI ? monai_starts(out->padded[d], r, overlap[d], NULL)
                                             : nnunet_starts(out->padded[d], r, overlap[d], NULL);
        if (n < 1 || n > SW_MAX_WINDOWS / out->n_windows)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "%lld windows along dim %d (image %lld, window %lld, overlap %g) are too many",
                            (long long)n, d, (long long)size[d], (long long)r, overlap[d]);
        out->n_windows *= n;
        out->n_starts[d] = n;
        out->starts[d] = malloc(sizeof(int64_t) * (size_t)n);
        if (!out->starts[d])
            return SEGRT_ERROR_OUT_OF_MEMORY;
        if (kind == SG_SW_GRID_MONAI)
            monai_starts(out->padded[d], r, overlap[d], out->starts[d]);
        else
            nnunet_starts(out->padded[d], r, overlap[d], out->starts[d]);
    }
    return SEGRT_OK;
}

sg_status sg_sw_grid_make(int32_t n_dims, const int64_t *size, const int64_t *roi, const double *overlap,
                          sg_sw_grid_kind kind, sg_sw_grid *out)
{
    /* A dim refused after earlier ones got their starts frees those. */
    sg_status s = grid_make(n_dims, size, roi, overlap, kind, out);
    if (s != SEGRT_OK)
        sg_sw_grid_free(out);
    return s;
}

void sg_sw_window_start(const sg_sw_grid *g, int64_t w, int64_t *start)
{
    for (int32_t d = g->n_dims - 1; d >= 0; d--) {
        start[d] = g->starts[d][w % g->n_starts[d]];
        w /= g->n_starts[d];
    }
}

int64_t sg_sw_batch_span(const sg_sw_grid *g, int64_t B, const uint8_t *keep, int64_t per)
{
    int64_t nw = g->n_windows, n1 = g->n_dims > 1 ? g->n_starts[1] : 1, inner = 1, span = 0;
    int64_t start[SG_SW_MAX_DIMS];
    if (B < 1)
        B = 1;
    if (per <= 0 || per > n1)
        per = n1;
    for (int32_t d = 2; d < g->n_dims; d++)
        inner *= g->n_starts[d];
    int64_t n_strips = (n1 + per - 1) / per;
    /* Per strip, the axis-0 starts of its last B windows (a circular
     * list) and how many windows it has had. */
    int64_t *last = malloc(sizeof(int64_t) * (size_t)(n_strips * B)),
            *count = calloc((size_t)n_strips, sizeof(int64_t));
    for (int64_t w = 0; last && count && w < nw; w++) {
        if (keep && !keep[w])
            continue;
        int64_t j = (g->n_dims > 1 ? (w / inner) % n1 : 0) / per, *ring = last + j * B;
        sg_sw_window_start(g, w, start);
        ring[count[j] % B] = start[0];
        count[j]++;
        int64_t first = ring[count[j] < B ? 0 : count[j] % B]; /* B - 1 windows back, or the strip's first */
        int64_t rows = start[0] + g->roi[0] - first;
        span = rows > span ? rows : span;
    }
    if (!last || !count)
        span = -1;
    free(last);
    free(count);
    return span;
}

/* nnU-Net's compute_gaussian: scipy's gaussian_filter (truncate 4) of a
 * unit impulse at n // 2 per axis, divided by its peak and times 10, as
 * float16, whose zeros (underflow, or past 4 sigma) take the least
 * non-zero weight. The filter's kernel sums to 1 per axis, so dividing by
 * the peak leaves 10 * exp(-x^2 / (2 sigma^2)) per axis, multiplied in
 * double as scipy's float64 output is, then rounded to float16 once. */
static sg_status nnunet_importance(int32_t n_dims, const int64_t *roi, double sigma_scale, int64_t total, float *out)
{
    double *axis[SG_SW_MAX_DIMS] = {NULL};
    sg_status s = SEGRT_OK;
    for (int32_t d = 0; d < n_dims; d++) {
        axis[d] = malloc(sizeof(double) * (size_t)roi[d]);
        if (!axis[d]) {
            s = sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "no memory for the importance map");
            break;
        }
        double sigma = (double)roi[d] * sigma_scale;
        int64_t radius = (int64_t)(4.0 * sigma + 0.5), centre = roi[d] / 2;
        for (int64_t i = 0; i < roi[d]; i++) {
            double x = (double)(i - centre);
            axis[d][i] = i - centre > radius || centre - i > radius ? 0.0 : exp(-0.5 * x * x / (sigma * sigma));
        }
    }
    if (s == SEGRT_OK) {
        float least = INFINITY;
        for (int64_t i = 0; i < total; i++) {
            int64_t rest = i;
            double v = 10.0;
            for (int32_t d = n_dims - 1; d >= 0; d--) {
                v *= axis[d][rest % roi[d]];
                rest /= roi[d];
            }
            out[i] = sg_half_to_float(sg_float_to_half((float)v));
            if (out[i] > 0.0f && out[i] < least)
                least = out[i];
        }
        for (int64_t i = 0; i < total; i++)
            out[i] = out[i] > 0.0f ? out[i] : least;
    }
    for (int32_t d = 0; d < n_dims; d++)
        free(axis[d]);
    return s;
}

sg_status sg_sw_importance(int32_t n_dims, const int64_t *roi, sg_sw_blend blend, double sigma_scale, float *out)
{
    if (n_dims < 1 || n_dims > SG_SW_MAX_DIMS)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "importance map over %d dims", n_dims);
    int64_t total = 1;
    for (int32_t d = 0; d < n_dims; d++) {
        if (roi[d] < 1)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "window dim %d is %lld", d, (long long)roi[d]);
        total *= roi[d];
    }
    if (blend == SG_SW_BLEND_CONSTANT) {
        for (int64_t i = 0; i < total; i++)
            out[i] = 1.0f;
        return SEGRT_OK;
    }
    if (blend != SG_SW_BLEND_GAUSSIAN && blend != SG_SW_BLEND_GAUSSIAN_NNUNET)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "unknown blend mode %d", (int)blend);
    if (!(sigma_scale > 0.0))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sigma scale %g: it must be > 0", sigma_scale);
    if (blend == SG_SW_BLEND_GAUSSIAN_NNUNET)
        return nnunet_importance(n_dims, roi, sigma_scale, total, out);
    /* One axis at a time, in float32 as MONAI's torch code: x^2 divided
     * by -2 sigma^2 (sigma = n * scale in double, the divisor rounded to
     * float), exp; then the outer product, axis 0 first. */
    float *axis[SG_SW_MAX_DIMS] = {NULL};
    sg_status s = SEGRT_OK;
    for (int32_t d = 0; d < n_dims && s == SEGRT_OK; d++) {
        axis[d] = malloc(sizeof(float) * (size_t)roi[d]);
        if (!axis[d]) {
            s = SEGRT_ERROR_OUT_OF_MEMORY;
            break;
        }
        double sigma = (double)roi[d] * sigma_scale;
        float div = (float)(-2.0 * sigma * sigma);
        for (int64_t i = 0; i < roi[d]; i++) {
            float x = (float)(-(double)(roi[d] - 1) / 2.0 + (double)i);
            axis[d][i] = expf(x * x / div);
        }
    }
    if (s == SEGRT_OK) {
        float lo = INFINITY;
        for (int64_t i = 0; i < total; i++) {
            int64_t rest = i;
            int64_t at[SG_SW_MAX_DIMS];
            for (int32_t d = n_dims - 1; d >= 0; d--) {
                at[d] = rest % roi[d];
                rest /= roi[d];
            }
            float v = axis[0][at[0]];
            for (int32_t d = 1; d < n_dims; d++)
                v *= axis[d][at[d]];
            out[i] = v;
            lo = v < lo ? v : lo;
        }
        /* Weights near zero at the corners would amplify noise where few
         * windows overlap: MONAI clamps them below at 1e-3. */
        float floor_v = (double)lo > 1e-3 ? lo : (float)1e-3;
        for (int64_t i = 0; i < total; i++)
            out[i] = out[i] < floor_v ? floor_v : out[i];
    }
    for (int32_t d = 0; d < n_dims; d++)
        free(axis[d]);
    return s;
}
