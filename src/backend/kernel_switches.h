/* The kernels and fusions a build may turn off by name: the list that
 * segrt_build_options_set_disabled_kernels and `segrt --disable-kernels`
 * accept, the bits of the mask the build options and the CUDA backend's
 * options carry, and the names a plan's key spells them with.
 *
 * Each switch sends the layers its kernel or fusion would take to the path
 * taken without it (the next implementation in the op's table, cuDNN in the
 * end); results stay within the precision's tolerance, so the switches are
 * for comparisons (A/B timings, differential tests), not for correctness.
 * They replace the SEGRT_CUDA_* environment variables of earlier versions
 * (the README's table maps one to the other).
 *
 * X(ID, "name", what it turns off). Append only: a plan file spells the
 * mask by name, so the order may change, but a name once given stays. */
#ifndef SG_BACKEND_KERNEL_SWITCHES_H
#define SG_BACKEND_KERNEL_SWITCHES_H

#include <stdint.h>

#define SG_KERNEL_SWITCHES(X)                                                                                          \
    X(GRAPHS, "graphs", "CUDA graphs: every run launches its steps one by one")                                        \
    X(MMA_CONV, "mma-conv", "segrt's tensor-core 3x3(x3) convolution: those layers go to cuDNN")                       \
    X(WGMMA, "wgmma", "Hopper's warpgroup form of that kernel: its mma.sync form instead")                             \
    X(WGMMA_SHARED, "wgmma-shared", "warpgroups sharing a block's weights: a block and a copy each")                   \
    X(WGMMA_ISSUE_LATE, "wgmma-issue-late", "next tile's loads issued behind the products: before them")               \
    X(MMA_SMALL_INPUT, "mma-small-input", "an image of up to 8 channels read as it lies: a padded copy")               \
    X(PAD_CHANNELS, "pad-channels", "few input channels zero-padded (to 8 for cuDNN, 16 for segrt's): unpadded")       \
    X(CONV_STATS, "conv-stats", "a norm's statistics from the convolution's epilogue: the norm's own pass")            \
    X(CONV_POOL, "conv-pool", "a 2x2 max pool folded into the convolution's epilogue: the pool's own pass")            \
    X(UP_FOLD, "up-fold", "a 2x2 upsampling computed in the next convolution's halo: its own step")                    \
    X(SMALL_CONV, "small-conv", "segrt's direct kernel for few output channels: cuDNN")                                \
    X(TILED_CONV, "tiled-conv", "that kernel's tiled stride-1 variant: its general one")                               \
    X(UP_CONV, "up-conv", "that kernel's phase-tiled variant for ConvTranspose: its general one")                      \
    X(UPSAMPLE_CONV, "upsample-conv", "segrt's ConvTranspose kernel 2 stride 2: cuDNN")                                \
    X(UP_K3, "up-k3", "segrt's tensor-core ConvTranspose kernel 3 stride 2: cuDNN")                                    \
    X(CONCAT_SLICES, "concat-slices", "Concat inputs written in place into the result: copied")                        \
    X(NORM_ONE_PASS, "norm-one-pass", "a norm's statistics and apply in one kernel: three kernels")                    \
    X(NORM_PROLOGUE, "norm-prologue", "a norm applied as its readers load it: the norm's own pass")                    \
    X(CUDNN_PLAN_JSON, "cudnn-plan-json", "cuDNN plans serialized into plan files: finalized at load")            \
    X(COMPOSITE_OPS, "composite-ops", "RMSNormalization, Quantize/DequantizeLinear, Attention by their own "         \
                                      "kernels: as the primitive operators they are defined by (graph/pass_lower.c)")  \
    X(FUSED_ATTENTION, "fused-attention", "MatMul, Softmax, MatMul chains as one attention kernel "                    \
                                          "(graph/pass_attention.c): as the chains they are")                \
    X(MMA_ATTENTION, "mma-attention", "segrt's tensor-core attention kernel (float16, bfloat16): its float32-math "    \
                                      "one")

typedef enum sg_kernel_switch {
#define SG_KERNEL_SWITCH_ENUM(id, name, what) SG_KERNEL_##id,
    SG_KERNEL_SWITCHES(SG_KERNEL_SWITCH_ENUM)
#undef SG_KERNEL_SWITCH_ENUM
        SG_KERNEL_SWITCH_COUNT
} sg_kernel_switch;

_Static_assert(SG_KERNEL_SWITCH_COUNT <= 32, "the switches are bits of a uint32_t");

/* The bit of switch k in a disabled-kernels mask. */
#define SG_KERNEL_BIT(k) ((uint32_t)1 << (k))
/* Every switch's bit. */
#define SG_KERNEL_ALL ((uint32_t)(((uint64_t)1 << SG_KERNEL_SWITCH_COUNT) - 1))

#endif
