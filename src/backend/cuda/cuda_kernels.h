/* segrt's own CUDA kernels, as C-callable launchers over strided views.
 *
 * Every kernel addresses its tensors through sgk_view: a device pointer,
 * a dtype and, per logical dim, a size and a stride in elements. A layout
 * (plain NCHW, channels-last NHWC/NDHWC, a transposed or broadcast view)
 * is only a choice of strides, so one kernel serves every layout the plan
 * picks and layout conversions are copies between two views.
 *
 * Launchers enqueue work on `stream` and return at once; they never
 * allocate, never synchronize, and report launch failures as a status
 * with the kernel named (sg_error). Data-dependent errors (an index out of
 * range) cannot be returned from the device: kernels that can meet them
 * take `err`, a device int the context reads after the run, and store one
 * of the SGK_ERR_* codes into it with atomicCAS(err, 0, code).
 *
 * Results are deterministic: no floating-point atomics; reductions combine
 * partial results in a fixed order, so a run repeated on the same input is
 * bit-identical. Floating-point math is done in float32 (float64 for
 * float64 tensors), whatever the storage dtype; integer math in int64. */
#ifndef SG_BACKEND_CUDA_KERNELS_H
#define SG_BACKEND_CUDA_KERNELS_H

#include "segrt.h"

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SGK_MAX_RANK SEGRT_MAX_RANK

typedef struct sgk_view {
    void *data;                    /* device memory; element (i_0..) at data + sum i_k*strides[k] */
    segrt_dtype dtype;
    int32_t rank;                  /* 0..SGK_MAX_RANK */
    int64_t dims[SGK_MAX_RANK];
    int64_t strides[SGK_MAX_RANK]; /* in elements; 0 along broadcast dims; may be negative */
} sgk_view;

/* Codes stored into a context's error word. */
enum {
    SGK_ERR_NONE = 0,
    SGK_ERR_INDEX = 1 /* Gather/ScatterND index out of range */
};

/* Elementwise ---------------------------------------------------------------
 * out[i] = f(in_0[i], in_1[i], ...) over out's dims. Every input view has
 * out's rank and dims, with stride 0 along the dims it is broadcast over
 * (the caller builds those views). Operands may have different dtypes; a
 * value is converted on load and on store (ONNX Cast rules: floats to ints
 * truncate toward zero, to bool is != 0). Results match the reference
 * kernels in src/backend/ref/ (NaN propagation included). */
typedef enum sgk_map_op {
    /* one input */
    SGK_COPY,        /* convert/copy: casts, layout changes, slices, expands */
    SGK_RELU,
    SGK_LEAKY_RELU,  /* alpha */
    SGK_ELU,         /* alpha */
    SGK_SELU,        /* alpha, gamma (in beta) */
    SGK_SIGMOID,
    SGK_HARD_SIGMOID,/* alpha, beta */
    SGK_HARD_SWISH,
    SGK_TANH,
    SGK_SOFTPLUS,
    SGK_GELU,        /* exact (erf) */
    SGK_GELU_TANH,   /* tanh approximation */
    SGK_ERF,
    SGK_CLIP,        /* min in alpha, max in beta */
    SGK_SQRT,
    SGK_EXP,
    SGK_LOG,
    SGK_NEG,
    SGK_ABS,
    SGK_RECIPROCAL,
    SGK_FLOOR,
    SGK_CEIL,
    SGK_NOT,         /* bool */
    SGK_AFFINE,      /* in * alpha + beta */
    SGK_SIN,
    SGK_COS,
    SGK_ROUND,       /* half to even */
    SGK_SIGN,
    SGK_SOFTSIGN,
    SGK_MISH,
    SGK_IS_NAN,      /* bool out */
    SGK_IS_INF,      /* bool out; alpha: detect_negative, beta: detect_positive */
    /* two inputs */
    SGK_ADD,
    SGK_SUB,
    SGK_MUL,
    SGK_DIV,
    SGK_POW,
    SGK_EQUAL,       /* bool out */
    SGK_LESS,
    SGK_GREATER,
    SGK_AND,
    SGK_OR,
    SGK_LESS_EQUAL,
    SGK_GREATER_EQUAL,
    SGK_XOR,
    SGK_MOD,         /* alpha: fmod (C's remainder) or 0 (the divisor's sign) */
    SGK_BIT_SHIFT,   /* alpha: 1 left, 0 right; unsigned operands */
    SGK_PRELU,       /* in_0 < 0 ? in_0 * in_1 : in_0 */
    /* two to SGK_MAP_MAX_IN inputs, folded left to right */
    SGK_MIN,
    SGK_MAX,
    SGK_SUM,
    SGK_MEAN,
    /* three inputs */
    SGK_WHERE,       /* in_0 (bool) ? in_1 : in_2 */
    SGK_FMA,         /* in_0 * in_1 + in_2 */
    SGK_MAP_OP_COUNT
} sgk_map_op;

#define SGK_MAP_MAX_IN 8

/* An activation applied to a map's result before the store (fusing, for
 * instance, a residual Add with the ReLU that follows it). */
typedef enum sgk_act {
    SGK_ACT_NONE = 0,
    SGK_ACT_RELU,
    SGK_ACT_LEAKY_RELU /* act_alpha */
} sgk_act;

typedef struct sgk_map_params {
    sgk_map_op op;
    float alpha, beta;
    sgk_act act;
    float act_alpha;
} sgk_map_params;

segrt_status sgk_map(cudaStream_t stream, const sgk_map_params *p, const sgk_view *out,
                     int32_t n_in, const sgk_view *in);

/* Index mapping -------------------------------------------------------------
 * Pad and Tile: out element o reads in element i where, per dim d,
 * i_d = o_d - pad_begin[d], mapped into [0, in.dims[d]) by mode; in
 * constant mode a coordinate outside gives `value`. Tile is SGK_PAD_WRAP
 * with pad_begin 0. */
typedef enum sgk_pad_mode {
    SGK_PAD_CONSTANT,
    SGK_PAD_REFLECT, /* mirror without repeating the edge (numpy "reflect") */
    SGK_PAD_EDGE,
    SGK_PAD_WRAP
} sgk_pad_mode;

segrt_status sgk_pad(cudaStream_t stream, const sgk_view *out, const sgk_view *in,
                     const int64_t *pad_begin, sgk_pad_mode mode, double value);

/* ONNX Gather along axis: out = data indexed by `indices` (int32/int64,
 * negative counts from the end) along axis. out's rank is data.rank - 1 +
 * indices.rank. An index outside [-n, n) stores SGK_ERR_INDEX into err
 * and writes 0 for that element. */
segrt_status sgk_gather(cudaStream_t stream, const sgk_view *out, const sgk_view *data,
                        const sgk_view *indices, int32_t axis, int *err);

/* ONNX ScatterND (reduction none/add/mul/max/min) into out, which the
 * caller has already filled with a copy of data. Updates are applied in
 * index order, so duplicate indices give the same result as the reference
 * kernel. */
typedef enum sgk_scatter_reduce {
    SGK_SCATTER_NONE,
    SGK_SCATTER_ADD,
    SGK_SCATTER_MUL,
    SGK_SCATTER_MAX,
    SGK_SCATTER_MIN
} sgk_scatter_reduce;

segrt_status sgk_scatter_nd(cudaStream_t stream, const sgk_view *out, const sgk_view *indices,
                            const sgk_view *updates, sgk_scatter_reduce reduction, int *err);

/* ONNX GatherElements: out (indices' dims) = data at each index along
 * axis, the other coordinates the element's own. An index outside [-n, n)
 * stores SGK_ERR_INDEX into err and writes 0 there. */
segrt_status sgk_gather_elements(cudaStream_t stream, const sgk_view *out, const sgk_view *data,
                                 const sgk_view *indices, int32_t axis, int *err);

/* ONNX GatherND with batch_dims: out (indices.dims[:-1] + the data's dims
 * after the tuple's) = the data slices the index tuples name. An index out
 * of range stores SGK_ERR_INDEX into err and writes 0 there. */
segrt_status sgk_gather_nd(cudaStream_t stream, const sgk_view *out, const sgk_view *data, const sgk_view *indices,
                           int32_t batch_dims, int *err);

/* ONNX ScatterElements into out, which the caller has filled with a copy
 * of data: each update goes to its index along axis, in index order along
 * each line (duplicates as the reference: last write wins, reductions in
 * order). An index out of range is skipped and stores SGK_ERR_INDEX. */
segrt_status sgk_scatter_elements(cudaStream_t stream, const sgk_view *out, const sgk_view *indices,
                                  const sgk_view *updates, int32_t axis, sgk_scatter_reduce reduction, int *err);

/* ONNX CumSum along axis (exclusive, reverse as the attributes), floats
 * summed in double, integers in int64 wrapping; out may not alias in. */
segrt_status sgk_cumsum(cudaStream_t stream, const sgk_view *out, const sgk_view *in, int32_t axis, bool exclusive,
                        bool reverse);

/* ONNX TopK along axis: the k first of each line in the order larger
 * (largest) or smaller first, NaN beyond every number, ties by the smaller
 * index, sorted; values moved as they are, indices int64 (or int32).
 * Quadratic in the line's length (SGK_TOPK_MAX_LEN at most). */
#define SGK_TOPK_MAX_LEN 16384
segrt_status sgk_top_k(cudaStream_t stream, const sgk_view *values, const sgk_view *indices, const sgk_view *x,
                       int32_t axis, int64_t k, bool largest);

/* ONNX GridSample over 1 to 3 spatial dims: out is N x C x (the grid's
 * spatial dims), grid N x (spatial) x nd, its last entry the last axis.
 * mode and pad are backend/grid_sample_math.h's numbers; as the
 * reference computes (ref_grid_sample.c), in double; any strides. */
#define SGK_GS_MAX_DIMS 3
segrt_status sgk_grid_sample(cudaStream_t stream, const sgk_view *out, const sgk_view *x, const sgk_view *grid,
                             int32_t mode, int32_t pad, bool align_corners);

/* ONNX Trilu over the last two dims: the elements with column - row >= k
 * (upper) or <= k (lower) kept, the others 0. */
segrt_status sgk_trilu(cudaStream_t stream, const sgk_view *out, const sgk_view *in, int64_t k, bool upper);

/* ONNX OneHot: out has indices' dims with the depth (out's extent along
 * axis) inserted at axis; values is [off, on]. Float indices truncate; an
 * index outside [-depth, depth) gives a row of off. */
segrt_status sgk_one_hot(cudaStream_t stream, const sgk_view *out, const sgk_view *indices, const sgk_view *values,
                         int32_t axis);

/* Einsum, as a plain contraction: out[free letters] = sum over the other
 * letters of the product of the inputs. Each operand gives, for every one
 * of the n_letters letters, its stride (0 where the operand lacks it);
 * letter_dims gives each letter's extent; out's view has one dim per free
 * letter in output order. Accumulates in float32 (int64 for integers). */
#define SGK_EINSUM_MAX_IN 4
#define SGK_EINSUM_MAX_LETTERS 16
typedef struct sgk_einsum_params {
    int32_t n_in;
    int32_t n_letters;
    int64_t letter_dims[SGK_EINSUM_MAX_LETTERS];
    int64_t in_strides[SGK_EINSUM_MAX_IN][SGK_EINSUM_MAX_LETTERS];
    int64_t out_strides[SGK_EINSUM_MAX_LETTERS]; /* 0 for summed letters */
    void *in_data[SGK_EINSUM_MAX_IN];
    segrt_dtype in_dtype[SGK_EINSUM_MAX_IN];
} sgk_einsum_params;

segrt_status sgk_einsum(cudaStream_t stream, const sgk_einsum_params *p, const sgk_view *out);

/* Reductions ----------------------------------------------------------------
 * out has in's rank, with size 1 along reduced dims (keepdims form; the
 * caller views it without them where the graph drops them). A reduction
 * over no elements gives the ONNX identity (0 for the sums, 1 for the
 * product, -inf for max and the logarithms, +inf for min). Max and min
 * propagate NaN. Integer sums and products wrap, as the reference's; the
 * square root and logarithms of integers are computed in double and
 * truncated (a non-finite result stores 0). With no reduced dims, out is
 * each element's image (|x|, x^2, log x...). */
typedef enum sgk_reduce_op {
    SGK_REDUCE_SUM,
    SGK_REDUCE_MEAN,
    SGK_REDUCE_MAX,
    SGK_REDUCE_MIN,
    SGK_REDUCE_PROD,
    SGK_REDUCE_L1,         /* sum of |x| */
    SGK_REDUCE_L2,         /* sqrt of the sum of x^2 */
    SGK_REDUCE_SUM_SQUARE, /* sum of x^2 */
    SGK_REDUCE_LOG_SUM,    /* log of the sum */
    SGK_REDUCE_LOG_SUM_EXP, /* log of the sum of exp(x), accumulated in double as the reference */
    /* One reduced dim; out is int64; ties: first index, or last with
     * select_last. NaN ranks above every number for both (numpy). */
    SGK_REDUCE_ARGMAX,
    SGK_REDUCE_ARGMIN
} sgk_reduce_op;

/* Long reductions with few outputs (a global pool of one sample) are split
 * over many blocks whose partial results go to scratch, device memory of
 * sgk_reduce_scratch() bytes (0: no split is worth it); with scratch NULL
 * every output is reduced by one block. */
size_t sgk_reduce_scratch(sgk_reduce_op op, const sgk_view *out, const sgk_view *in);
segrt_status sgk_reduce(cudaStream_t stream, sgk_reduce_op op, const sgk_view *out,
                        const sgk_view *in, bool select_last, void *scratch);

/* Softmax or LogSoftmax along one axis (opset 13 semantics), in float32. */
segrt_status sgk_softmax(cudaStream_t stream, const sgk_view *out, const sgk_view *in, int32_t axis,
                         bool log);

/* segrt's ScaledDotProductAttention (graph/infer_matmul.c, k_attention.cu):
 * y = softmax(scale q k^T + masks) v over the last two dims, flash-style
 * (the scores never in memory). q [batch..., S, D], k [batch..., L, D] (the
 * caller swaps a k_transposed view's last two dims), v [batch..., L, Dv],
 * y [batch..., S, Dv], one rank, the same batch dims, any strides; q, k, v
 * and the n_masks <= 2 masks of one float dtype, the masks views of the
 * scores' dims with stride 0 where they broadcast; y of any float dtype.
 * mma: the tensor-core kernel where it takes the case (sgk_sdpa_mma_takes;
 * the caller has checked compute capability 8.0), else float32 math
 * (float64 for float64), any D and Dv. */
bool sgk_sdpa_mma_takes(segrt_dtype dt, int64_t D, int64_t Dv);
segrt_status sgk_sdpa(cudaStream_t stream, const sgk_view *y, const sgk_view *q, const sgk_view *k,
                      const sgk_view *v, const sgk_view *masks, int32_t n_masks, float scale, bool mma);

/* Normalisation ---------------------------------------------------------------
 * Group normalisation over x viewed as [N, C, spatial...]: for each sample
 * and each of `groups` groups of C/groups channels, mean and variance over
 * the group's channels and all spatial positions (InstanceNorm: groups =
 * C), in float32 with a numerically stable (Welford or two-pass)
 * combination; then y = (x - mean) / sqrt(var + eps) * scale[c] + bias[c],
 * then act. scale and bias are float32 device arrays of C values. scratch
 * is device memory of sgk_group_norm_scratch() bytes for partial results.
 * one_pass_sms: the device's multiprocessors, where an InstanceNorm over
 * a channels-last tensor may run as one kernel whose grid is all resident
 * at once (a cooperative launch; it reads x once), or 0 for the three
 * kernels always; one_pass_smem: the shared memory a block of it may hold
 * on the plan's GPU (0: as much as the kernel would). */
size_t sgk_group_norm_scratch(const sgk_view *x, int64_t groups);
segrt_status sgk_group_norm(cudaStream_t stream, const sgk_view *y, const sgk_view *x,
                            const float *scale, const float *bias, int64_t groups, float eps,
                            sgk_act act, float act_alpha, int32_t one_pass_sms, int32_t one_pass_smem,
                            void *scratch);

/* Tiles over the spatial dims of an [N, C, spatial...] tensor (1 to 3
 * spatial dims, aligned right: dims[0] is 1 in 2-D), the last fastest:
 * ceil(dims[a] / tile[a]) tiles along axis a, those at the ends cut to the
 * image. A producer that has a tile's values at hand (a convolution's
 * epilogue) writes its statistics, so a following normalisation need not
 * read the tensor once more to make them. */
typedef struct sgk_tile_grid {
    int32_t dims[3];
    int32_t tile[3];
} sgk_tile_grid;

/* Tiles per sample. */
int64_t sgk_tile_grid_tiles(const sgk_tile_grid *grid);

/* Group normalisation as sgk_group_norm, from per-tile statistics instead
 * of a pass over x: part[(n * C + c) * T + t] holds the float32 (mean, M2)
 * of channel c over the positions of tile t (of T = sgk_tile_grid_tiles)
 * in sample n, as a producer wrote them; only the combination and the
 * application run. scratch: sgk_group_norm_partials_scratch() bytes. */
size_t sgk_group_norm_partials_scratch(const sgk_view *x);
segrt_status sgk_group_norm_partials(cudaStream_t stream, const sgk_view *y, const sgk_view *x,
                                     const float *scale, const float *bias, int64_t groups, float eps,
                                     sgk_act act, float act_alpha, const float *part,
                                     const sgk_tile_grid *grid, void *scratch);
/* Only the combination of sgk_group_norm_partials: float4 (mean, the
 * mean's low part, scale / std, bias) per sample and channel into ab (N *
 * C float4, 16-byte aligned), for a consumer that normalises x as it
 * reads it (sgk_conv_mma's prologue). */
segrt_status sgk_group_norm_partials_ab(cudaStream_t stream, const sgk_view *x, const float *scale,
                                        const float *bias, int64_t groups, float eps, const float *part,
                                        const sgk_tile_grid *grid, float *ab);

/* y = act((x - mean) * s + b) over channels [c_at, c_at + c_len) of x,
 * ab[n * c_len + c - c_at] holding (mean, its low part, s, b) as
 * sgk_group_norm_partials_ab writes them; x elsewhere. x and y of one
 * shape (rank 2 to 5, channels on dim 1), any float dtypes and strides. */
segrt_status sgk_norm_apply_ab(cudaStream_t stream, const sgk_view *y, const sgk_view *x, const float *ab,
                               int64_t c_at, int64_t c_len, sgk_act act, float act_alpha);

/* LayerNormalization: statistics over dims [axis, rank) of x for each
 * index of dims [0, axis); y = (x - mean) * inv_std * scale + bias where
 * scale and bias are views of x's rank broadcast over [0, axis) (bias.data
 * NULL: none). mean and inv_std (float32 views of x's rank with size 1
 * over [axis, rank)) may have NULL data. */
segrt_status sgk_layer_norm(cudaStream_t stream, const sgk_view *y, const sgk_view *mean,
                            const sgk_view *inv_std, const sgk_view *x, const sgk_view *scale,
                            const sgk_view *bias, int32_t axis, float eps);

/* Pooling ---------------------------------------------------------------------
 * x and y are [N, C, spatial...] views with n_spatial (1 to 3) spatial dims;
 * y's dims are the output dims the graph inferred (ceil_mode included).
 * Max pooling propagates NaN as the reference kernel does and, with
 * indices.data set, writes ONNX's flat indices (storage_order 0: row-major
 * over N, C, spatial; 1: column-major over the spatial dims) as int64.
 * Average pooling divides by the window's size clipped to the input
 * (count_include_pad 0) or to the padded input (1), as ONNX does. */
typedef enum sgk_pool_kind { SGK_POOL_MAX, SGK_POOL_AVG } sgk_pool_kind;

typedef struct sgk_pool_params {
    sgk_pool_kind kind;
    int32_t n_spatial;
    int64_t kernel[3], strides[3], pads_begin[3], pads_end[3], dilations[3];
    bool count_include_pad;
    int32_t storage_order;
    int32_t sm_count; /* the device's SMs: the grid of a normalising max pool */
} sgk_pool_params;

/* With norm (NULL: none; max pools with no activation, Relu or a
 * LeakyRelu of slope >= 0 only), x is a normalisation's input and the
 * pool reads act((x - mean) * s + b) instead (ab as
 * sgk_group_norm_partials_ab writes it, N * C float4), computed in float32
 * as the norm's own pass does: the result equals pooling that pass's
 * output. */
typedef struct sgk_norm_in {
    const float *ab;
    sgk_act act;
    float act_alpha;
} sgk_norm_in;
segrt_status sgk_pool(cudaStream_t stream, const sgk_pool_params *p, const sgk_view *y,
                      const sgk_view *indices, const sgk_view *x, const sgk_norm_in *norm);

/* Resize ------------------------------------------------------------------------
 * Resize (opset 11-19 semantics, as src/backend/ref/ref_resize.c computes
 * them) of x into y, both of the same rank; per dim, scale is the factor
 * the coordinate transform uses (y.dims/x.dims where sizes were given, with
 * keep_aspect_ratio_policy already applied) and roi_start/roi_end the ROI
 * (tf_crop_and_resize only). */
typedef enum sgk_resize_mode { SGK_RESIZE_NEAREST, SGK_RESIZE_LINEAR, SGK_RESIZE_CUBIC } sgk_resize_mode;
typedef enum sgk_resize_coord {
    SGK_COORD_HALF_PIXEL,
    SGK_COORD_HALF_PIXEL_SYMMETRIC,
    SGK_COORD_PYTORCH_HALF_PIXEL,
    SGK_COORD_ALIGN_CORNERS,
    SGK_COORD_ASYMMETRIC,
    SGK_COORD_TF_CROP_AND_RESIZE
} sgk_resize_coord;
typedef enum sgk_resize_nearest {
    SGK_NEAREST_ROUND_PREFER_FLOOR,
    SGK_NEAREST_ROUND_PREFER_CEIL,
    SGK_NEAREST_FLOOR,
    SGK_NEAREST_CEIL
} sgk_resize_nearest;

typedef struct sgk_resize_params {
    sgk_resize_mode mode;
    sgk_resize_coord coord;
    sgk_resize_nearest nearest;
    float cubic_a;
    bool exclude_outside;
    float extrapolation_value;
    float scale[SGK_MAX_RANK];
    float roi_start[SGK_MAX_RANK], roi_end[SGK_MAX_RANK];
} sgk_resize_params;

segrt_status sgk_resize(cudaStream_t stream, const sgk_resize_params *p, const sgk_view *y,
                        const sgk_view *x);
/* Whether sgk_resize takes the vector kernel for these views (channels-last
 * float16/bfloat16/float32, linear or nearest, 1 to 3 dims resized,
 * 16-byte vectors): host-only, for tests. */
bool sgk_resize_vec_fits(const sgk_resize_params *p, const sgk_view *y, const sgk_view *x);

/* Channel padding (k_pad.cu) ----------------------------------------------
 * y, dense channels-last [N, Cp, spatial...] of float16 or bfloat16 with
 * Cp a multiple of 8, receives x's C <= Cp channels (any view of a float
 * dtype, y's other dims) and zeros after them: the input of a convolution
 * whose few channels are padded so that cuDNN's tensor-core kernels take
 * it. 1 to 3 spatial dims. */
bool sgk_pad_channels_fits(const sgk_view *y, const sgk_view *x);
segrt_status sgk_pad_channels(cudaStream_t stream, const sgk_view *y, const sgk_view *x);

#ifdef __cplusplus
}
#endif

#endif
