/* Direct Conv and ConvTranspose for layers with few output channels.
 *
 * Tensor cores gain nothing on a convolution with one to a handful of
 * output channels (a segmentation network's last layers), and cuDNN runs
 * such layers at a few TFLOP/s; a direct kernel that reads the input once
 * through the caches is bound by memory instead. One thread computes all
 * K output channels of one output position, with the weights staged in
 * shared memory. The transposed convolution gathers (no atomics), so the
 * results are deterministic.
 *
 * x is [N, C, spatial...] and y [N, K, spatial...] with 1 to 3 spatial
 * dims, as sgk_views of any strides (plain, channels-last, a slice of a
 * larger buffer); x is float16, bfloat16 or float32, y one of those too,
 * and the math is float32. The weights are a float32 device array in
 * ONNX's layout: Conv [K, C, k...], ConvTranspose [C, K, k...] (group 1);
 * bias (NULL: none) is K float32 values. z (NULL: none) is a residual of
 * y's dims, any strides and a float dtype:
 * y = act(conv(x) + bias) + z, rounded once. */
#ifndef SG_BACKEND_CUDA_K_CONV_SMALL_H
#define SG_BACKEND_CUDA_K_CONV_SMALL_H

#include "backend/cuda/cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most output channels the kernel computes per thread: 8, and 16 for
 * a forward convolution of at most SGK_CONV_SMALL_FEW_C input channels
 * (an image's first layers, where the input is all the traffic there is
 * and cuDNN's tensor cores need it copied into 8 channels first). */
#define SGK_CONV_SMALL_MAX_K 8
#define SGK_CONV_SMALL_MAX_K_FEW_C 16
#define SGK_CONV_SMALL_FEW_C 4

typedef struct sgk_conv_small_params {
    bool transposed;      /* ConvTranspose: y[o] gathers x[i] where o = i*stride + k*dil - pad_begin */
    int32_t n_spatial;    /* 1 to 3; the arrays below use their first n_spatial entries */
    int64_t kernel[3];
    int64_t stride[3];
    int64_t dil[3];
    int64_t pad_begin[3]; /* as resolved by the caller (auto_pad applied); >= 0 */
    sgk_act act;
    float act_alpha;
    int32_t K;            /* output channels, 1 to SGK_CONV_SMALL_MAX_K */
    int32_t C;            /* input channels */
    int32_t sm_count;     /* the device's multiprocessors, for the grid (0: assume 132) */
    bool no_tiled;        /* keep the general kernel where the tiled variant would run (A/B) */
    bool no_up;           /* likewise for the phase-tiled variant */
    /* A forward layer whose x is an InstanceNorm or GroupNorm's input: the
     * general kernel reads pro_act((x - mean) * s + b) instead, with
     * float4 (mean, -, s, b) per sample and channel in sgk_conv_small's ab
     * (sgk_group_norm_partials_ab), so the norm's own pass is not run. */
    bool prologue;
    sgk_act pro_act;
    float pro_alpha;
} sgk_conv_small_params;

/* Whether the kernel takes this layer: the parameters are in range, the
 * views have the ranks, channels and dtypes above and the same batch, the
 * weights fit in 48 KB of shared memory, and every position fits the
 * kernel's 32-bit index arithmetic. The views' data may be NULL (a
 * builder asks before any memory exists). */
bool sgk_conv_small_fits(const sgk_conv_small_params *p, const sgk_view *y, const sgk_view *x);

/* Which of the kernel's variants runs the layer (for profiles): the
 * general one, the tiled one (stride-1 layers with a halo and few input
 * channels) or the phase-tiled one (stride-2 upsampling, kernel 3 pad 1 or
 * kernel 2 pad 0). x's data may be NULL (taken as aligned). */
typedef enum sgk_conv_small_variant {
    SGK_CONV_SMALL_GENERAL,
    SGK_CONV_SMALL_TILED,
    SGK_CONV_SMALL_PHASE_TILES
} sgk_conv_small_variant;
sgk_conv_small_variant sgk_conv_small_variant_of(const sgk_conv_small_params *p, const sgk_view *y,
                                                 const sgk_view *x);

/* Whether z can be the residual added to y (a float dtype, y's dims). */
bool sgk_conv_small_residual_fits(const sgk_view *y, const sgk_view *z);

/* Enqueues the convolution; UNSUPPORTED (with a message) where
 * sgk_conv_small_fits or sgk_conv_small_residual_fits says no. */
segrt_status sgk_conv_small(cudaStream_t stream, const sgk_conv_small_params *p, const sgk_view *y,
                            const sgk_view *x, const float *w, const float *bias, const sgk_view *z,
                            const float *ab);

#ifdef __cplusplus
}
#endif

#endif
