/* Kernels of sliding-window inference on the device (src/pipeline/
 * sw_device.h): a window gathered from the image, predictions combined
 * for test-time augmentation and ensembles, weighted accumulation into
 * float32, float16 or bfloat16 accumulators (sums made in float32, each
 * element rounded once a launch when stored), and the finalisation of
 * accumulator rows into logits, probabilities or labels.
 *
 * Geometry follows MONAI (../shared/notes/sliding_window.md): windows
 * live in the padded image, whose axis d is size[d] voxels with
 * pad_begin[d] in front. Images and results are N x C x spatial, float32,
 * one image at a time; the slowest spatial axis ("rows", axis 0) may be
 * held as a ring of rows, so that only a slab of a large image or of its
 * accumulators is on the device: row r is then stored at r mod ring_rows.
 *
 * Launchers enqueue on `stream`, never allocate or synchronize, and name
 * the kernel in launch errors. No atomics: every output element is
 * written by one thread, so results are deterministic. */
#ifndef SG_BACKEND_CUDA_K_WINDOW_H
#define SG_BACKEND_CUDA_K_WINDOW_H

#include "backend/cuda/cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SGK_WIN_MAX_DIMS 3

/* How positions outside the image are filled (sliding_window.h's sg_sw_pad). */
enum { SGK_WIN_PAD_CONSTANT = 0, SGK_WIN_PAD_REFLECT = 1, SGK_WIN_PAD_REPLICATE = 2 };

typedef struct sgk_win_geom {
    int32_t n_dims;                     /* spatial dims, 1 to 3 */
    int64_t roi[SGK_WIN_MAX_DIMS];      /* the window */
    int64_t size[SGK_WIN_MAX_DIMS];     /* the image, unpadded */
    int64_t padded[SGK_WIN_MAX_DIMS];   /* the padded image */
    int64_t pad_begin[SGK_WIN_MAX_DIMS];
} sgk_win_geom;

/* Rows [row0, ...) of one image's channels: element (c, r, rest) at
 * data[c * channel_stride + ((r - row0) mod ring) * plane + rest] where
 * plane is the product of the other axes and ring 0 means no wrap. */
typedef struct sgk_win_rows {
    void *data; /* float32, except a finalisation's labels and accumulators of `dtype` */
    int64_t channel_stride;
    int64_t row0;
    int64_t ring;
    segrt_dtype dtype; /* accumulators: FLOAT32 (or 0), FLOAT16, BFLOAT16 */
    int64_t row_pitch; /* finalisation's dst: elements a row (0: the geometry's plane) */
} sgk_win_rows;

/* The batched launchers take 1 to this many windows, one kernel (their
 * starts travel in its parameters); more are INVALID_ARGUMENT. */
#define SGK_WIN_BATCH 64

/* For each of `count` windows, window i starting at starts[i * n_dims ..]
 * (padded coordinates): dst + i * C * window (C x window, contiguous) =
 * that window of the image held in src (unpadded rows), flipped along the
 * axes of flip_mask (bit d: spatial axis d). Positions outside the image
 * take pad_value (constant) or their reflected or replicated source. */
segrt_status sgk_win_gather(cudaStream_t stream, const sgk_win_geom *g, const int64_t *starts, int64_t count,
                            int32_t pad_mode, float pad_value, uint32_t flip_mask, const sgk_win_rows *src,
                            int64_t channels, float *dst);

/* dst[r, j] = src[r, flip(j)] (add: dst[r, j] += ...) for `rows` windows
 * or channels of a window each; then, when divisor > 1, dst /= divisor.
 * Used to average the flips of test-time augmentation and the models of
 * an ensemble. */
segrt_status sgk_win_combine(cudaStream_t stream, const sgk_win_geom *g, uint32_t flip_mask, bool add,
                             float divisor, const float *src, float *dst, int64_t rows);

/* For each of `count` windows in order, window i starting at
 * starts[i * n_dims ..] with predictions pred + i * classes * window:
 * acc[k, p] += pred[k, j] * weight[j] for k < classes and acc[classes, p]
 * += weight[j], where p = start + j is a position of the padded image,
 * for the windows' rows in [row_lo, row_hi) only. Each voxel sums its
 * windows in their order, as one call per window would. acc holds
 * classes + 1 channels of padded rows (acc->row0 is ignored: rows are
 * absolute, stored mod acc->ring); the windows' rows in [row_lo, row_hi)
 * must fit the ring together. acc->dtype: FLOAT32 (or 0), FLOAT16 or
 * BFLOAT16, the weights' channel too; another is INVALID_ARGUMENT. */
segrt_status sgk_win_accumulate(cudaStream_t stream, const sgk_win_geom *g, const int64_t *starts, int64_t count,
                                const float *pred, const float *weight, int64_t classes, int64_t row_lo,
                                int64_t row_hi, const sgk_win_rows *acc);

typedef enum sgk_win_final {
    SGK_WIN_FINAL_VALUES = 0,  /* acc / count: the blended logits */
    SGK_WIN_FINAL_SOFTMAX,     /* their softmax over classes: float32, or uint8 round(255 p) */
    SGK_WIN_FINAL_SIGMOID,     /* their sigmoid: float32, or uint8 as softmax */
    SGK_WIN_FINAL_ARGMAX,      /* the first largest class, uint8 or uint16 */
    SGK_WIN_FINAL_THRESHOLD    /* per class, sigmoid > threshold, uint8 */
} sgk_win_final;

/* The padded rows [row_lo, row_hi) of acc (as sgk_win_accumulate leaves
 * it), cropped to the image, divided by the summed weights and finished as
 * `kind`, written into dst: dst->data is float32, uint8 or uint16 (out_dtype),
 * image rows from dst->row0 with channel_stride per output channel (no ring).
 * acc->dtype as for sgk_win_accumulate; the sums are read as float32. */
segrt_status sgk_win_finalize(cudaStream_t stream, const sgk_win_geom *g, sgk_win_final kind, float threshold,
                              int64_t classes, int64_t row_lo, int64_t row_hi, const sgk_win_rows *acc,
                              segrt_dtype out_dtype, const sgk_win_rows *dst);

#ifdef __cplusplus
}
#endif

#endif
