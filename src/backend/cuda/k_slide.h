/* Kernels of whole-slide jobs (backend_window.h's area_u8): a slide's
 * decoded 8-bit planes to the float32 rows a window job reads, shrunk by
 * area where the job's resolution is coarser than the level's. Launchers
 * enqueue on `stream`, never allocate or synchronize. */
#ifndef SG_BACKEND_CUDA_K_SLIDE_H
#define SG_BACKEND_CUDA_K_SLIDE_H

#include "backend/cuda/cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Area weights along one axis, in device memory: output i covers input
 * [first[i], first[i] + count[i]) with weights w[i * span ...]. */
typedef struct sgk_area_axis {
    const int64_t *first;
    const int32_t *count;
    const float *w;
    int64_t span;
} sgk_area_axis;

/* x -> (x * scale - mean[c]) / std[c] in float32, step by step (off: x). */
typedef struct sgk_norm3 {
    bool on;
    float scale, mean[3], std[3];
} sgk_norm3;

/* dst[c * dst_cstride + (i - row0) * dst_pitch + x] = sum over k, l of
 * rows.w[i][k] * cols.w[x][l] * src[c * src_plane + ((rows.first[i] + k)
 * mod src_ring) * src_pitch + cols.first[x] + l], normalised by norm
 * (channels 1 to 3), for i in [row0, row0 + n_rows), x below n_cols, c
 * below channels. */
segrt_status sgk_area_u8(cudaStream_t stream, const uint8_t *src, int64_t src_pitch, int64_t src_plane,
                         int64_t src_ring, int32_t channels, const sgk_area_axis *rows, int64_t row0, int64_t n_rows,
                         const sgk_area_axis *cols, int64_t n_cols, const sgk_norm3 *norm, float *dst,
                         int64_t dst_pitch, int64_t dst_cstride);

#ifdef __cplusplus
}
#endif

#endif
