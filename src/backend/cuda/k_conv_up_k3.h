/* ConvTranspose with kernel 3, stride 2 and pads 1 along each of its 2 or
 * 3 spatial dims (output_padding 0 or 1): the upsampling of MONAI's UNet,
 * on the tensor cores.
 *
 * Along one dim, output o = 2q + r (phase r) takes input q through tap 1
 * when r = 0, and inputs q (tap 2) and q + 1 (tap 0) when r = 1. So every
 * phase of the outputs at q is a product of the inputs at q plus an offset
 * of 0 or 1 per dim: with the 2^d offsets as the rows of a matrix
 * product and the 2^d phases times the output channels as its columns,
 * one m16n8k16 step covers 16 q positions, 16 input channels, 8 columns.
 * Blocks of columns an offset cannot reach (offset 1, phase 0 along some
 * dim) are skipped: 27 of the 64 (offset, phase) pairs in 3-D are taken.
 *
 * cuDNN runs these layers as strided backward-data convolutions and
 * segrt's few-channel kernel (k_conv_small.cu) on the CUDA cores, issuing
 * a shared-memory load for every four products; both run UNet's
 * upsamplings slower than this kernel (docs/perf.md).
 *
 * A block stages its channel chunk's weights (every needed column block,
 * rounded to x's dtype) once, then walks tiles of 128 q positions (4x4x8
 * in 3-D, 8x16 in 2-D), loading the next tile's inputs with their +1 halo
 * (zeros past the image) by cp.async while its warps multiply the current
 * one; each warp takes 16 positions through every offset, 16-channel
 * slice and column block, then adds the bias, applies the activation and
 * stores each pair of channels from its accumulators.
 *
 * x is [N, C, (D,) H, W] float16 or bfloat16 with channels contiguous, C a
 * multiple of 8 and at most 64, every position 16-byte aligned; y is
 * [N, K, 2D - 1 + op, ...] of any float dtype and strides. The weights are
 * float32 in the kernel's own order (sgk_conv_up_k3_pack from ONNX's
 * [C, K, 3, 3(, 3)]); bias (NULL: none) is K float32 values.
 * y = act(convT(x) + bias), rounded once to y's dtype. Deterministic:
 * every output is one sum in a fixed order. */
#ifndef SG_BACKEND_CUDA_K_CONV_UP_K3_H
#define SG_BACKEND_CUDA_K_CONV_UP_K3_H

#include "backend/cuda/cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sgk_conv_up_k3_params {
    int32_t n_spatial; /* 2 or 3 */
    int32_t C, K;      /* input and output channels */
    sgk_act act;
    float act_alpha;
    int32_t sm_count;  /* the device's multiprocessors, for the grid (0: assume 132) */
    int32_t smem_limit; /* shared memory a block may hold on the plan's GPU (0: the kernel's most) */
} sgk_conv_up_k3_params;

/* Whether the kernel takes the layer: views of the dtypes, dims (output
 * extents 2n - 1 or 2n) and strides above, the weights of a channel chunk
 * and two tiles within the shared memory it asks for, every index within
 * 32 bits. The views' data may be NULL (a builder asks before any memory
 * exists). */
bool sgk_conv_up_k3_fits(const sgk_conv_up_k3_params *p, const sgk_view *y, const sgk_view *x);

/* Elements of the packed weights, and the packing: `onnx` is ConvTranspose's
 * [C, K, 3, 3(, 3)] float32, `packed` receives sgk_conv_up_k3_weights(p)
 * floats (zeros where an offset does not reach a column). */
int64_t sgk_conv_up_k3_weights(const sgk_conv_up_k3_params *p);
void sgk_conv_up_k3_pack(const sgk_conv_up_k3_params *p, const float *onnx, float *packed);

/* Enqueues the layer; UNSUPPORTED (with a message) where
 * sgk_conv_up_k3_fits says no. w must be 16-byte aligned. */
segrt_status sgk_conv_up_k3(cudaStream_t stream, const sgk_conv_up_k3_params *p, const sgk_view *y,
                            const sgk_view *x, const float *w, const float *bias);

#ifdef __cplusplus
}
#endif

#endif
