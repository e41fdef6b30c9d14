/* What the pipeline asks of a device to preprocess a medical volume and
 * bring a result back into its grid (src/pipeline/vol_prep.h): strided
 * copies (transpose, flips, crops and their inverses), separable
 * resampling, intensities, statistics, the foreground's box, and
 * resampling class scores straight to labels. A backend that has them
 * fills one const sg_volume_ops; struct sg_backend's `volume` member
 * points to it. The CPU backend's work on host memory and are the
 * reference the CUDA backend's are tested against.
 *
 * Contract, for every member (as backend_window.h's):
 * - Volumes are planar: element (c, k, j, i) of a C x D x H x W volume at
 *   c * D * H * W + (k * H + j) * W + i, float32 unless said.
 * - Buffers are the backend's memory (device memory for CUDA, host memory
 *   for the CPU); parameters passed by pointer are host memory, read
 *   before the call returns.
 * - Members that return results in host memory (stats, foreground_box)
 *   synchronize the stream; the others only enqueue (the CPU's run at
 *   once). The stream may be NULL for the CPU.
 * - Deterministic: each output element is written by one thread, and
 *   reductions add in a fixed order, so a job repeats bit for bit.
 * - Failures return a status with a message naming the call. */
#ifndef SG_BACKEND_VOLUME_H
#define SG_BACKEND_VOLUME_H

#include "backend/backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_VOLUME_MAX_CHANNELS 8 /* SEGRT_PREPROCESS_MAX_CHANNELS */

typedef enum sg_vol_interp {
    SG_VOL_NEAREST = 0, /* the sample at floor(x + 0.5) */
    SG_VOL_LINEAR,      /* linear between floor(x) and floor(x) + 1 */
    SG_VOL_CUBIC        /* cubic B-spline over coefficients made by spline_prefilter */
} sg_vol_interp;

/* One axis of a resampling: output position o reads the input at
 * x = scale * (o + shift) + offset (input voxel units), computed in that
 * order in double: nnU-Net's and skimage's grid is scale * (o + 0.5) - 0.5,
 * and where that lands exactly halfway between two samples (a ratio like
 * 4/3) NEAREST must round as scipy does, which scale * o + (0.5 * scale -
 * 0.5) would not. Positions are read as scipy's mode "nearest"
 * reads them (torch's border padding for LINEAR). NEAREST and LINEAR clamp
 * x to [0, n - 1] first, so positions past the ends take the edge sample.
 * CUBIC does not clamp: it evaluates at x the spline of the input extended
 * by its edge samples forever (scipy pads 12 of them before its filter;
 * the difference is about 1e-7), whose coefficients past the ends follow
 * from the first two (the last two likewise): with z = sqrt(3) - 2 and
 * s0 = ((5 + z) c[0] + (1 - z) c[1]) / 6 (the edge sample), coefficient
 * k < 0 is s0 + (c[0] - s0) z^-k. A position just past the end is then
 * not quite the edge sample: scipy's zoom and skimage's resize give the
 * same. */
typedef struct sg_vol_axis {
    int64_t n_out;
    double scale, offset;
    sg_vol_interp interp;
    double shift; /* last, so that an initializer without it means 0 */
} sg_vol_axis;

/* An affine intensity map per channel: y = (min(max(x, lo), hi) - sub) * mul,
 * a NaN staying NaN (as numpy's clip; fminf/fmaxf would drop it). */
typedef struct sg_vol_affine {
    float lo, hi, sub, mul;
} sg_vol_affine;

/* Per channel statistics of a volume, summed in double. */
typedef struct sg_vol_stats {
    int64_t count;
    double sum, sum_sq, min, max;
} sg_vol_stats;

typedef struct sg_volume_ops {
    const char *name;
    /* dst[dst_stride . (c, k, j, i)] = src[src_offset + src_stride . (c, k,
     * j, i)] for every index below dims[4] (c, k, j, i), elements of
     * elem_size bytes (1, 2 or 4). Strides are in elements and may be
     * negative: transposes, flips, crops and their inverses (a crop's
     * inverse writes into a larger, zeroed dst) in one pass. */
    sg_status (*strided_copy)(sg_backend_stream *stream, size_t elem_size, const void *src, int64_t src_offset,
                              const int64_t src_stride[4], void *dst, const int64_t dst_stride[4],
                              const int64_t dims[4]);
    /* Fills bytes of dst with value (labels' background). */
    sg_status (*fill)(sg_backend_stream *stream, void *dst, int value, size_t bytes);
    /* Along `axis` (1 depth, 2 height, 3 width) of src (dims C x D x H x
     * W): dst has dims with dims[axis] replaced by ax->n_out. CUBIC reads
     * coefficients (spline_prefilter's output), not samples. */
    sg_status (*resample_axis)(sg_backend_stream *stream, const float *src, const int64_t dims[4], int32_t axis,
                               const sg_vol_axis *ax, float *dst);
    /* Cubic B-spline coefficients of data along `axis`, in place, of each
     * line extended by its edge samples forever (scipy's spline_filter
     * after its padding for mode "nearest"): the causal pass starts at
     * s[0] / (1 - z), the anticausal at -z (P / (1 - z) + (c+[n-1] - P) /
     * (1 - z^2)) with P = s[n-1] / (1 - z), and the result is scaled by 6. */
    sg_status (*spline_prefilter)(sg_backend_stream *stream, float *data, const int64_t dims[4], int32_t axis);
    /* data = the affine of its channel (params[c], dims[0] of them) where
     * mask is NULL or mask[voxel] != 0; 0 where mask[voxel] == 0. mask
     * (uint8, D x H x W) may be NULL. */
    sg_status (*intensity)(sg_backend_stream *stream, float *data, const int64_t dims[4], const sg_vol_affine *params,
                           const uint8_t *mask);
    /* mask[voxel] = 1 where some channel of data is != 0 (nonzero) or
     * > threshold, else 0: nnU-Net's and MONAI's foreground. */
    sg_status (*foreground_mask)(sg_backend_stream *stream, const float *data, const int64_t dims[4], bool nonzero,
                                 float threshold, uint8_t *mask);
    /* The bounding box of mask's non-zero voxels: lo[3] and hi[3]
     * (exclusive), host memory; hi <= lo when there are none. Synchronous. */
    sg_status (*mask_box)(sg_backend_stream *stream, const uint8_t *mask, const int64_t dims[3], int64_t lo[3],
                          int64_t hi[3]);
    /* out[c] (dims[0] entries, host memory) over each channel's voxels, or
     * over those where mask != 0 (mask may be NULL). Synchronous. */
    sg_status (*stats)(sg_backend_stream *stream, const float *data, const int64_t dims[4], const uint8_t *mask,
                       sg_vol_stats *out);
    /* Labels (uint8 or uint16, out_dims D x H x W) from the `classes`
     * score volumes of scores (classes x in_dims): per output voxel, each
     * class's score interpolated at ax[0..2] (NEAREST or LINEAR per axis),
     * and the first largest class. Never holds classes x out_dims. */
    sg_status (*resample_argmax)(sg_backend_stream *stream, const float *scores, int64_t classes,
                                 const int64_t in_dims[3], const sg_vol_axis ax[3], segrt_dtype out_dtype,
                                 void *labels);
} sg_volume_ops;

#endif
