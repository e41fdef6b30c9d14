/* ConvTranspose whose kernel equals its stride (a UNet's "deconv" upsampling,
 * kernel 2 stride 2, no padding, dilation 1, group 1).
 *
 * Every output position then takes exactly one input position: output
 * (i*k + a) along each spatial axis is x[i] times the weights of phase a.
 * The layer is a matrix product per phase, [positions x C] times [C x K],
 * each row's result scattered to its own output position, with nothing to
 * overlap or add. cuDNN runs it as a strided backward-data convolution at
 * a few hundred GB/s; as a product it is bound by writing the output (four
 * or eight times the input's size), and through views it can write its
 * result straight into its slice of the concatenation that follows.
 *
 * x is [N, C, spatial...] and y [N, K, spatial * kernel...] with 1 to 3
 * spatial dims, sgk_views of any strides; float16 and bfloat16 inputs go
 * through tensor cores (mma.sync, float32 accumulation), float32 through
 * the CUDA cores. The weights are float32 in [phase][C][K] order (the caller
 * reorders ONNX's [C, K, k...]; phases numbered with the last spatial axis
 * fastest); bias (NULL: none) is K float32 values. y = act(x * w + bias),
 * rounded once to y's dtype. Deterministic: every output is one dot
 * product in a fixed order. */
#ifndef SG_BACKEND_CUDA_K_CONV_UPSAMPLE_H
#define SG_BACKEND_CUDA_K_CONV_UPSAMPLE_H

#include "backend/cuda/cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sgk_conv_up_params {
    int32_t n_spatial; /* 1 to 3 */
    int64_t kernel[3]; /* the kernel along each spatial axis, also its stride */
    sgk_act act;
    float act_alpha;
    int32_t K;         /* output channels */
    int32_t C;         /* input channels */
    int32_t sm_count;  /* the device's multiprocessors, for the grid (0: assume 132) */
    int32_t smem_limit; /* shared memory a block may hold on the plan's GPU (0: the kernel's most) */
    bool prologue;     /* x is a normalisation's input, normalised as it is read (below) */
    sgk_act pro_act;   /* ... then activated: none, Relu or LeakyRelu of */
    float pro_alpha;   /* this slope */
} sgk_conv_up_params;

/* Whether the kernel takes this layer: dims that match the parameters,
 * float16, bfloat16 or float32 views, at most 2^31 - 1 input positions,
 * at most 64 input channels, and a channel chunk of the weights that fits
 * in shared memory (48 KB for float32, 100 KB for the tensor cores). The views'
 * data may be NULL (a builder asks before any memory exists). */
bool sgk_conv_up_fits(const sgk_conv_up_params *p, const sgk_view *y, const sgk_view *x);

/* With p->prologue (16-bit x read as 16-byte vectors: channels
 * contiguous, a multiple of 8), x is an InstanceNorm or GroupNorm's input
 * and the layer reads act((x - mean) * s + b) instead, computed in float32
 * as the norm's pass computes it and rounded to x's dtype as the pass
 * stores it: the same products as after the pass. ab holds float4 (mean,
 * -, s, b) per sample and channel (sgk_group_norm_partials_ab). */

/* Enqueues the layer; UNSUPPORTED (with a message) where
 * sgk_conv_up_fits says no. ab: with p->prologue, as above (else NULL). */
segrt_status sgk_conv_up(cudaStream_t stream, const sgk_conv_up_params *p, const sgk_view *y, const sgk_view *x,
                         const float *w, const float *bias, const float *ab);

#ifdef __cplusplus
}
#endif

#endif
