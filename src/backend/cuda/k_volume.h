/* Kernels of a medical volume's preprocessing on the device
 * (backend/backend_volume.h, whose contract they keep; cuda_volume.c
 * fills the backend's table with them): strided copies, separable
 * resampling along one axis, the cubic B-spline prefilter, intensities,
 * the foreground's mask and box, per-channel statistics, and class
 * scores resampled straight to labels.
 *
 * Volumes are planar, C x D x H x W, element (c, k, j, i) at
 * c * D * H * W + (k * H + j) * W + i; sizes and offsets are 64-bit.
 * Launchers enqueue on `stream`, never allocate or synchronize, and name
 * the kernel in launch errors. No atomics: every output element is
 * written by one thread, and reductions combine per-block partials in a
 * fixed order that depends only on the sizes, so a repeated call gives
 * the same bits. */
#ifndef SG_BACKEND_CUDA_K_VOLUME_H
#define SG_BACKEND_CUDA_K_VOLUME_H

#include "backend/cuda/cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SGK_VOL_MAX_CHANNELS 8

enum { SGK_VOL_NEAREST = 0, SGK_VOL_LINEAR = 1, SGK_VOL_CUBIC = 2 };

/* Output position o of an axis reads the input at x = scale * (o +
 * shift) + offset, in that order (sgk_vol_resample_axis says how past the
 * ends). */
typedef struct sgk_vol_axis {
    int64_t n_out;
    double scale, offset;
    int32_t interp; /* SGK_VOL_* */
    double shift;
} sgk_vol_axis;

/* y = (min(max(x, lo), hi) - sub) * mul, a NaN staying NaN */
typedef struct sgk_vol_affine {
    float lo, hi, sub, mul;
} sgk_vol_affine;

typedef struct sgk_vol_stat {
    int64_t count;
    double sum, sum_sq, min, max;
} sgk_vol_stat;

/* dst[dst_stride . (c, k, j, i)] = src[src_offset + src_stride . (c, k, j,
 * i)] for every index below dims, elements of elem_size bytes (1, 2, 4);
 * strides in elements, possibly negative. */
segrt_status sgk_vol_strided_copy(cudaStream_t stream, size_t elem_size, const void *src, int64_t src_offset,
                                  const int64_t src_stride[4], void *dst, const int64_t dst_stride[4],
                                  const int64_t dims[4]);

/* dst (dims with dims[axis] = ax->n_out) = src resampled along axis (1 to
 * 3). Output position o reads x = scale * (o + shift) + offset: NEAREST
 * the sample at floor(x + 0.5) and LINEAR the two around x, x clamped to
 * [0, n - 1]; CUBIC, x unclamped, the four B-spline coefficients around x
 * (src holds coefficients then), those past the ends those of the line
 * extended by its edge samples. Weights and sums in double, rounded at
 * each step as the CPU backend's are, one rounding to float. */
segrt_status sgk_vol_resample_axis(cudaStream_t stream, const float *src, const int64_t dims[4], int32_t axis,
                                   const sgk_vol_axis *ax, float *dst);

/* The cubic B-spline coefficients of data along axis (1 to 3), in place:
 * one thread per line, a causal and an anticausal pass with pole
 * sqrt(3) - 2 started as for the line extended by its edge samples (the
 * edge padding scipy's zoom and map_coordinates put before the filter in
 * mode "nearest"), then the gain; lines of one sample are left as they
 * are. Sums in double. */
segrt_status sgk_vol_spline_prefilter(cudaStream_t stream, float *data, const int64_t dims[4], int32_t axis);

/* data[c, v] = the affine params[c] of it where mask is NULL or mask[v]
 * != 0, else 0 (dims[0] <= SGK_VOL_MAX_CHANNELS). */
segrt_status sgk_vol_intensity(cudaStream_t stream, float *data, const int64_t dims[4], const sgk_vol_affine *params,
                               const uint8_t *mask);

/* mask[v] = 1 where some channel's data[c, v] is != 0 (nonzero) or >
 * threshold, else 0. */
segrt_status sgk_vol_foreground_mask(cudaStream_t stream, const float *data, const int64_t dims[4], bool nonzero,
                                     float threshold, uint8_t *mask);

/* Device bytes of the scratch sgk_vol_mask_box takes for these dims. */
size_t sgk_vol_mask_box_scratch(const int64_t dims[3]);

/* box[0..2] = the least (k, j, i) of mask's non-zero voxels, box[3..5] =
 * the greatest plus one, in device memory (6 int64); box[0] = INT64_MAX
 * and box[3] = 0 (and so on) where there are none. scratch: device
 * memory of sgk_vol_mask_box_scratch(dims) bytes. */
segrt_status sgk_vol_mask_box(cudaStream_t stream, const uint8_t *mask, const int64_t dims[3], void *scratch,
                              int64_t *box);

/* Device bytes of the scratch sgk_vol_stats takes for these dims. */
size_t sgk_vol_stats_scratch(const int64_t dims[4]);

/* out[c] (device memory, dims[0] of them) = count, sum, sum of squares,
 * min and max of channel c's voxels, or of those where mask != 0 (mask
 * NULL: all); min = +inf and max = -inf over no voxels. scratch: device
 * memory of sgk_vol_stats_scratch(dims) bytes. */
segrt_status sgk_vol_stats(cudaStream_t stream, const float *data, const int64_t dims[4], const uint8_t *mask,
                           void *scratch, sgk_vol_stat *out);

/* labels (uint8 or uint16, dims ax[0..2].n_out) = per output voxel, the
 * first class k < classes whose score, interpolated at the voxel from
 * scores + k * (in_dims' voxels) along each axis as ax[axis].interp
 * (NEAREST or LINEAR, positions as sgk_vol_resample_axis's) says, is the
 * largest. One thread per output voxel, its classes in a loop. */
segrt_status sgk_vol_resample_argmax(cudaStream_t stream, const float *scores, int64_t classes,
                                     const int64_t in_dims[3], const sgk_vol_axis ax[3], segrt_dtype out_dtype,
                                     void *labels);

#ifdef __cplusplus
}
#endif

#endif
