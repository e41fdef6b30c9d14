/* A 3x3 or 3x3x3 convolution, stride 1, padding 1, as an implicit matrix
 * product on the tensor cores, for layers with few output channels, where
 * cuDNN tiles output channels by 64 or more and runs mostly on padding
 * (docs/perf.md has the timings behind each choice below).
 *
 * A block stages all the weights ([tap][K][C]) in shared memory once, then
 * walks tiles of 128 output positions (4x4x8 in 3-D, 8x16 in 2-D): it loads
 * the next tile's input halo (zeros outside the image, cp.async) while each
 * warp takes 32 positions through every tap and 16-channel slice with
 * mma.sync m16n8k16 (float32 accumulation); the tile's shape is a
 * compile-time constant so that positions split by constant divisions. The
 * epilogue adds the bias, applies the activation, adds a residual (a
 * following Add, MONAI's residual unit) and stores through any view, so
 * the output can be a Concat's slice. Without a residual, and where y has
 * x's dtype and 16-byte positions, the results go through shared memory
 * and leave as whole positions in 16-byte stores.
 *
 * On Hopper (compute capability 9.0, the code built for sm_90a) 2-D
 * layers go through warpgroup products instead (conv_wgmma: wgmma
 * m64nKk16 reading the halo and the weights from shared memory by
 * descriptor, no ldmatrix): the tiles, the epilogues and the results are
 * the same. Up to five warpgroups share a block and one copy of the
 * weights, their buffers' addresses uniform; the normalising prologue
 * takes one 8-channel chunk a thread; 64-channel layers run four
 * warpgroups a block at 128 registers (five spilled); a warpgroup may
 * issue its next tile's loads behind its products (p->issue_late).
 *
 * Files: k_conv_mma_sync.cu (the mma.sync kernel), k_conv_wgmma.cu (the
 * wgmma kernel), k_conv_mma_instances.cuh (the template instances),
 * k_conv_mma_common.cuh (what they share), k_conv_mma.cu (planning and
 * these entry points).
 *
 * x is [N, C, (D,) H, W] float16 or bfloat16 with channels contiguous
 * (channels-last, or a slice of a channels-last buffer), C a multiple of 16;
 * y (and the residual z) [N, K, (D,) H, W] of any float dtype and strides;
 * K 8, 16 or 32 (16 at most in 3-D). The weights are float32 in [tap][K][C]
 * order, taps with the last spatial axis fastest (the caller reorders
 * ONNX's [K, C, k...]); bias (NULL: none) is K float32 values.
 * y = act(x * w + bias) + z, rounded once to y's dtype. Deterministic.
 *
 * With p->stats (no residual, y staged as above), the epilogue also writes
 * each tile's per-channel (mean, M2) of its float32 results (before the
 * rounding to y's dtype), for a normalisation that alone reads y
 * (sgk_group_norm_partials): the statistics come from values already in
 * registers, where the norm's own pass would read y from device memory
 * once more.
 *
 * With p->pool as well (2-D), it also writes y's 2x2 max pool of stride 2
 * (floor: [N, K, H / 2, W / 2], dense channels-last in y's dtype) to
 * `pooled`, taking the smallest of each window instead for the channels
 * whose bit of p->pool_min is set: the norm's scale is negative there, and
 * the pool of the normalised tensor is the normalisation of that value.
 * The layer that reads the pool then normalises it as it loads it, and
 * the pool's own pass over the full-size tensor is not run. */
#ifndef SG_BACKEND_CUDA_K_CONV_MMA_H
#define SG_BACKEND_CUDA_K_CONV_MMA_H

#include "backend/cuda/cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sgk_conv_mma_params {
    int32_t n_spatial; /* 2 or 3 */
    int32_t C, K;      /* input and output channels */
    sgk_act act;
    float act_alpha;
    int32_t sm_count;  /* the device's multiprocessors, for the grid (0: assume 132) */
    int32_t smem_limit; /* shared memory a block may hold on the plan's GPU (0: the kernel's most) */
    bool stats;        /* also write per-tile statistics of y (see above) */
    bool wgmma;        /* 2-D layers through Hopper's warpgroup products: the
                        * device is sm_90 (the kernel is built for sm_90a) */
    bool prologue;     /* x is normalised as it is read (see below) */
    sgk_act pro_act;   /* ... then activated: none, Relu or LeakyRelu of */
    float pro_alpha;   /* a slope in [0, 1] */
    int32_t pro_c;     /* ... over channels [0, pro_c) (a multiple of 8; 0: all), the
                        * rest taken as they are (a Concat's other inputs) */
    int32_t wg_groups; /* wgmma: warpgroups a block at most, sharing its copy of the
                        * weights (0: as many as fit; 1: a copy each) */
    bool issue_late;   /* wgmma: a warpgroup starts its next tile's loads once its products
                        * are under way, not before it waits for this tile's; the results
                        * are the same bit for bit */
    bool small_input;  /* wgmma, 2-D: x has x_channels (1-8) channels of any float dtype */
    int32_t x_channels; /* and layout, read as it is (see below); C is then 16 */
    bool pool;         /* stats, 2-D: also write y's 2x2 max pool (see above), */
    uint32_t pool_min; /* ... its minimum for channel c where bit c is set */
    bool up;           /* x's channels [pro_c, C) are a 2x2 upsampling's, computed in the halo
                        * (see below) */
    int32_t up_c;      /* ... of up_c input channels */
    sgk_act up_act;    /* ... activated after its bias: none, Relu or LeakyRelu of */
    float up_alpha;    /* a slope in [0, 1] */
    bool up_pro;       /* ... its input normalised as it is read, as p->prologue's */
    sgk_act up_pro_act;
    float up_pro_alpha;
} sgk_conv_mma_params;

/* With p->up, the upsampling ConvTranspose (kernel 2x2, stride 2, no
 * padding) whose results are x's channels [pro_c, C) is not run: each
 * tile computes the upsampled part of its halo from the input's 6 x 10
 * positions under it, rounded to x's dtype as the layer would store them,
 * so that the upsampled tensor, the largest of a UNet's decoder, is
 * neither written nor read. Those
 * channels of x are then not read. Taken on Hopper for 2-D layers of 64
 * input channels, 32 output channels, statistics and a normalising
 * prologue over the first 32 (UNet's decoder: Concat(skip, upsampled)),
 * the upsampling 32 or 64 -> 32 channels (64: three warpgroups a block
 * fit beside both layers' weights, not four). */
typedef struct sgk_conv_mma_up {
    sgk_view x;        /* [N, up_c, H / 2, W / 2], x's 16-bit dtype, channels contiguous */
    const float *w;    /* [phase][K'][up_c] float32, phase = kh * 2 + kw, K' = C - pro_c */
    const float *bias; /* K' float32 values, or NULL */
    const float *ab;   /* with p->up_pro: float4 (mean, -, s, b) per sample and channel */
} sgk_conv_mma_up;

/* With p->small_input (a network's first layer over an image of up to 8
 * channels, on Hopper), the kernel reads x where it lies, float32 planes
 * say, converting each value as its halo lands, channels 8-15 and the
 * weights past x_channels zero: no padded 16-bit copy of the image is
 * written and read again.
 *
 * With p->prologue (wgmma layers of 16, 32 or 64 input channels whose
 * results are staged), x is an InstanceNorm or GroupNorm's input and the
 * layer reads act((x - mean) * s + b) instead, the transform applied in
 * 16-bit arithmetic to each halo as it lands in shared memory; ab holds
 * float4 (mean, -, s, b) per sample and normalised channel (pro_c of
 * them, sgk_group_norm_partials_ab). The normalisation's own pass over x is
 * then not needed.
 *
 * Whether the kernel takes this layer: dims that match (y's spatial dims
 * equal x's), dtypes and channel counts as above, x's channels contiguous
 * with 16-byte aligned positions, weights and two tiles that fit in 100 KB of
 * shared memory, every offset within a sample of x, y and z below 2^30
 * elements (the kernel's index arithmetic is 32-bit there); with
 * p->stats, no activation, no residual and a staged y; with
 * p->small_input, a staged y of 16-bit dtype (x's channels then in any
 * layout). z may be NULL (no residual); up_x: with p->up, the
 * upsampling's input (else NULL). Data pointers may be NULL (a builder
 * asks before memory exists). */
bool sgk_conv_mma_fits(const sgk_conv_mma_params *p, const sgk_view *y, const sgk_view *x, const sgk_view *z,
                       const sgk_view *up_x);

/* The tiles the statistics are written over (p->stats): y's spatial dims
 * and the kernel's tile shape. */
void sgk_conv_mma_stats_grid(const sgk_conv_mma_params *p, const sgk_view *y, sgk_tile_grid *grid);

/* Enqueues the layer; UNSUPPORTED (with a message) where
 * sgk_conv_mma_fits says no. stats: with p->stats, float32 device memory
 * for N * K * sgk_tile_grid_tiles() (mean, M2) pairs; pooled: with
 * p->pool, the pool's view, of the dims, dtype and layout above (16-byte
 * aligned), else NULL; up: with p->up, the upsampling's input and
 * parameters (x, 16-byte aligned positions; w 16-byte aligned), else NULL. */
segrt_status sgk_conv_mma(cudaStream_t stream, const sgk_conv_mma_params *p, const sgk_view *y, const sgk_view *x,
                          const float *w, const float *bias, const sgk_view *z, float *stats, const float *ab,
                          const sgk_view *pooled, const sgk_conv_mma_up *up);

#ifdef __cplusplus
}
#endif

#endif
