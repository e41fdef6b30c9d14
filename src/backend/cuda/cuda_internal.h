/* The CUDA plan's pieces, shared by the files of src/backend/cuda/.
 *
 * A plan is a list of steps over tensors. A tensor is a strided view of
 * device memory: an activation at an offset of the context's arena, a
 * constant on the device (the engine's weight store), the caller's input
 * or output, or a view of another tensor's memory. Its layout is only its
 * strides, so kernels written against sgk_view serve every layout; the
 * plan keeps 4-D and 5-D activations channels-last (NHWC/NDHWC) from the
 * first convolution on and converts only where an operator needs another
 * layout (a Reshape, a matrix product, the graph's outputs).
 *
 * Builders (cuda_build_*.c) turn one graph node into steps: they ask for
 * their inputs with cuda_value_as (which adds a conversion step the first
 * time a dtype or layout is asked for that the value does not have yet),
 * create their outputs with cuda_output_new, and append a step whose run
 * function launches the kernel. A builder returns SEGRT_ERROR_UNSUPPORTED
 * for a variant it does not handle; the plan then fails naming the node,
 * or, when the user allowed it, runs that node on the CPU. */
#ifndef SG_BACKEND_CUDA_INTERNAL_H
#define SG_BACKEND_CUDA_INTERNAL_H

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/kernel_switches.h"
#include "core/strmap.h"
#include "graph/infer_util.h"

/* cublasLt.h declares a function without a prototype, which our
 * warning flags reject in C; the header is not ours to fix. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <stdbool.h>

/* Every CUDA runtime, cuDNN and cuBLASLt call goes through one of these:
 * on failure they record the call, the library's message, file and line,
 * and return the status from the enclosing function. */
#define CUDA_TRY(call)                                                                      \
    do {                                                                                    \
        cudaError_t cuda_e_ = (call);                                                       \
        if (cuda_e_ != cudaSuccess)                                                         \
            return cuda_error(cuda_e_, #call, __FILE__, __LINE__);                          \
    } while (0)
#define CUDNN_TRY(call)                                                                     \
    do {                                                                                    \
        cudnnStatus_t cudnn_s_ = (call);                                                    \
        if (cudnn_s_ != CUDNN_STATUS_SUCCESS)                                               \
            return cudnn_error(cudnn_s_, #call, __FILE__, __LINE__);                        \
    } while (0)
#define CUBLAS_TRY(call)                                                                    \
    do {                                                                                    \
        cublasStatus_t cublas_s_ = (call);                                                  \
        if (cublas_s_ != CUBLAS_STATUS_SUCCESS)                                             \
            return cublas_error(cublas_s_, #call, __FILE__, __LINE__);                      \
    } while (0)

sg_status cuda_error(cudaError_t e, const char *call, const char *file, int line);
sg_status cudnn_error(cudnnStatus_t s, const char *call, const char *file, int line);
sg_status cublas_error(cublasStatus_t s, const char *call, const char *file, int line);

/* Tensors ------------------------------------------------------------------ */

typedef enum cuda_tensor_kind {
    CUDA_T_CONST,  /* device constant from the weight store (dev set at build) */
    CUDA_T_ARENA,  /* an activation at `offset` in the context's arena */
    CUDA_T_INPUT,  /* graph input io_index (caller's device buffer or the context's upload) */
    CUDA_T_OUTPUT, /* graph output io_index (caller's device buffer or the context's download) */
    CUDA_T_ALIAS   /* tensor `alias`'s memory from element `alias_offset`, other dims and strides */
} cuda_tensor_kind;

typedef enum cuda_layout {
    CUDA_LAYOUT_ANY = 0,     /* in requests: whatever the value has */
    CUDA_LAYOUT_PLAIN,       /* row-major over the logical dims */
    CUDA_LAYOUT_CHANNELS_LAST/* rank >= 3: dim 1 (channels) innermost, then the others in order */
} cuda_layout;

typedef struct cuda_tensor {
    cuda_tensor_kind kind;
    sg_dtype dtype;
    cuda_layout layout;             /* PLAIN or CHANNELS_LAST for dense tensors; ANY for other views */
    int32_t rank;
    int64_t dims[SEGRT_MAX_RANK];
    int64_t strides[SEGRT_MAX_RANK];/* elements */
    size_t bytes;                   /* storage this tensor owns (0 for aliases) */
    int32_t io_index;               /* INPUT / OUTPUT */
    void *dev;                      /* CONST */
    size_t offset;                  /* ARENA: bytes into the arena */
    int32_t alias;                  /* ALIAS: the tensor whose memory this views */
    int64_t alias_offset;           /* ALIAS: elements from the start of that memory */
    int32_t first, last;            /* first step writing it, last step reading it */
    int32_t views;                  /* aliases made of it so far */
    int32_t touch_head, touch_tail; /* steps naming it (p->touch, 1-based; 0: none) */
} cuda_tensor;

/* Steps -------------------------------------------------------------------- */

typedef struct cuda_step cuda_step;
typedef struct cuda_run cuda_run;
typedef sg_status (*cuda_run_fn)(const cuda_step *s, cuda_run *r);

#define CUDA_MAX_ARGS 64

struct cuda_step {
    const char *name;      /* the node's name (points into the plan's graph) */
    const char *impl;      /* what runs it, for profiles: "cudnn conv", "segrt map", ... */
    const sg_node *node;   /* the node, for CPU fallback steps and messages */
    cuda_run_fn run;
    int32_t args[CUDA_MAX_ARGS]; /* tensor indices; inputs first, then outputs; -1 absent */
    int32_t n_args;
    int32_t n_outputs;     /* the last n_outputs args are written */
    void *params;          /* builder's parameters; freed with params_free (NULL: free) */
    void (*params_free)(void *);
    size_t scratch_bytes;  /* device scratch the step needs during its run */
    size_t workspace_bytes;/* cuDNN / cuBLASLt workspace the step needs */
    double flops;          /* for profiles */
    double bytes;          /* bytes its tensors hold, read and written once: for profiles' GB/s */
    bool fallback;         /* runs on the CPU */
    int32_t serial;        /* creation number: steps stay in creation order, removals aside */
    /* Bit a is set when the step reaches args[a] only through the view it
     * resolves at run time (segrt's own kernels), never through strides
     * fixed at build (cuDNN and cuBLASLt descriptors, CPU copies). Only
     * such tensors may later become a slice of a larger buffer (a
     * concatenation written in place, cuda_place_in_slice). */
    uint64_t any_view;
    /* Optional, for steps whose library fixes strides at build (cuDNN's
     * descriptors): whether the step can reach tensor t as *as says (its
     * strides and alias offset) instead, re-described to the library.
     * With commit false it only asks (cuDNN's steps find out by running
     * both descriptions, or read the answer from the plan file); with
     * commit true it takes the new description. This lets a cuDNN
     * convolution write its slice of a concatenation. */
    bool (*restride)(sg_cuda_plan *p, cuda_step *s, int32_t t, const cuda_tensor *as, bool commit);
    /* Per-context state (optional): cuDNN execution plans are not safe to
     * share between threads, so each context finalizes its own from the
     * choice the engine recorded. ctx_init runs at context creation with
     * the context's handles; run sees the result as r->state. */
    sg_status (*ctx_init)(const cuda_step *s, cudnnHandle_t cudnn, cublasLtHandle_t lt, void **state);
    void (*ctx_free)(void *state);
    /* Optional: runs once every node is built (tensors' strides final,
     * the build's handles still valid), for work that needs the final
     * plan: a cuDNN step serializes its execution plan for contexts. */
    sg_status (*build_done)(sg_cuda_plan *p, cuda_step *s);
};

/* What a step's run function sees: the context's stream and handles and
 * each tensor's device pointer for this run. */
struct cuda_run {
    const sg_cuda_plan *plan;
    cudaStream_t stream;
    cudnnHandle_t cudnn;
    cublasLtHandle_t lt;
    void **ptr;             /* device pointer of every plan tensor */
    void *scratch;          /* device scratch, plan->scratch_bytes */
    void *workspace;        /* cuDNN/cuBLASLt workspace, plan->workspace_bytes */
    size_t workspace_bytes;
    int *err;               /* device error word (sgk SGK_ERR_*) */
    void *host_scratch;     /* pinned host memory for CPU fallback steps */
    void *state;            /* the running step's per-context state (ctx_init) */
};

/* The view of tensor t for this run. */
sgk_view cuda_view(const cuda_run *r, int32_t t);
/* Tensor t's dims and strides without memory: for sizing scratch at build
 * time, when strides are known but pointers are not. */
sgk_view cuda_geometry_view(const sg_cuda_plan *p, int32_t t);

/* Per-layer choices that a plan file keeps so a load does not redo them:
 * for each step that chose among implementations, an opaque record the
 * builder writes and reads back (cuDNN's engine and knobs, cuBLASLt's
 * algorithm). Keyed by the node's name and a tag. */
typedef struct cuda_choice {
    char *key;
    void *data;
    size_t size;
} cuda_choice;

/* Statistics a step writes beside its output tensor `of` (a convolution's
 * epilogue, cuda_conv_mma.c): per (sample, channel, tile of grid) a float32
 * (mean, M2) pair in tensor `part`, for the normalisation that alone reads
 * `of` (cuda_build_norm.c), which then skips its own pass over it. */
typedef struct cuda_tile_stats {
    int32_t of, part;
    sgk_tile_grid grid;
    /* The step also wrote tensor `pooled`, the 2x2 max pool of `of` for
     * MaxPool node `pool_node` of the norm's result (k_conv_mma.h's
     * p->pool: each channel's max, or min under a negative scale), or -1:
     * the pool defers the norm to its readers over that tensor
     * (cuda_build_pool.c) instead of reading `of`. */
    int32_t pooled, pool_node;
} cuda_tile_stats;

/* A normalisation left to the layers that read its result
 * (cuda_build_norm.c): graph value `value`, the result of an InstanceNorm
 * or GroupNorm (and its fused activation), is held as the norm's input,
 * tensor `raw`, and each reader applies act((raw - mean) * s + b) as it
 * reads it, with tensor `ab` holding float4 (mean, -, s, b) per sample and
 * normalised channel (sgk_group_norm_partials_ab). Channels [c_at, c_at +
 * c_len) of raw are normalised, the others are taken as they are: a
 * Concat whose slice the norm's input was written into leaves its result
 * deferred over that slice. Readers that take it: sgk_conv_mma's,
 * sgk_conv_small's and sgk_conv_up's prologues (cuda_conv_*_takes_norm), the max pool
 * (cuda_pool_takes_norm) and a Concat read by such a convolution. A max
 * pool that the producing layer already did (cuda_tile_stats' pooled)
 * passes the deferral on: its result is the pooled tensor as `raw`. Any
 * other reader gets the normalised tensor from cuda_deferred_norm_apply
 * (the plan calls it before a builder that does not know of deferral). */
typedef struct cuda_deferred_norm {
    int32_t value, raw, ab;
    sgk_act act;
    float act_alpha;
    int64_t c_at, c_len;
    const sg_node *node; /* the normalisation, for the applying step's name */
} cuda_deferred_norm;

/* The plan ------------------------------------------------------------------ */

struct sg_cuda_plan {
    sg_graph *g;             /* private copy: steps point at its nodes and names */
    sg_cuda_options opts;
    sg_cuda_weights *weights;/* shared with the engine and its other plans */
    int device;
    /* The compute capability planned for: the GPU's, or the older one the
     * build options' target_cc names. code_cc: the machine code (or PTX)
     * of libsegrt the GPU runs (sg_cuda_code_in), code_a: its sm_XYa form. */
    int sm_major, sm_minor;
    int code_cc;
    bool code_a;
    /* Shared memory a block may hold on the GPU planned for: the device's
     * opt-in maximum, or less for an older target (smem_limit in the
     * kernels' parameters). */
    int32_t smem_limit;
    cuda_tensor *tensors;
    int32_t n_tensors, cap_tensors;
    cuda_step *steps;
    int32_t n_steps, cap_steps;
    int32_t next_serial;     /* of the next step */
    /* Which steps name each tensor, so that turning a tensor into a slice
     * asks only those: per tensor (touch_head) a chain of step serials in
     * creation order; serials of removed steps no longer resolve. */
    int32_t *touch_serial, *touch_next; /* touch_next: 1-based, 0 ends */
    int32_t n_touch, cap_touch_serial, cap_touch_next;
    int32_t *value_tensor;   /* graph value -> tensor holding it as produced, or -1 */
    int32_t *uses;           /* readers of each graph value */
    int32_t *reader_at;      /* graph value v's live readers: readers[reader_at[v] .. reader_at[v + 1]) */
    int32_t *readers;        /* node indices, in node order, each node once */
    uint8_t *fused;          /* graph nodes absorbed into an earlier node's step */
    int32_t *inputs;         /* INPUT tensor of each graph input */
    int32_t *outputs;        /* OUTPUT tensor of each graph output */
    size_t arena_bytes;
    size_t scratch_bytes;    /* largest step scratch */
    size_t workspace_bytes;  /* largest step workspace */
    size_t host_scratch_bytes;
    void *conv;              /* cuda_value_as's remembered conversions */
    int32_t n_conv, cap_conv;
    int32_t *conv_of;        /* graph value -> its newest conversion, or -1 (chained by entry) */
    cuda_choice *choices;    /* recorded while building */
    const sg_cuda_plan *given;/* while building: choices to reuse (from a plan file), or NULL */
    int32_t n_choices, cap_choices;
    cuda_tile_stats *tile_stats;
    int32_t n_tile_stats, cap_tile_stats;
    int32_t *tile_stats_of;  /* tensor -> its first tile_stats entry, or -1 */
    int32_t cap_tile_stats_of;
    struct cuda_conv_desc *conv_descs; /* per graph node: its convolution's attributes (cuda_conv_desc_of) */
    struct cuda_node_fold *node_folds; /* per graph node: what the fusion pass found may fold into it */
    struct cuda_value_fold *value_folds; /* per graph value: likewise (cuda_fusion.c) */
    cuda_deferred_norm *deferred;
    int32_t n_deferred, cap_deferred;
    int32_t *deferred_of;    /* graph value -> its newest deferred entry, or -1 */
    int32_t *deferred_next;  /* per deferred entry: the previous one of the same value, or -1 */
    int32_t cap_deferred_next;
    sg_strmap given_keys;    /* while building: given's choice keys -> index (the first of a key) */
    struct cudnn_conv_seen *cudnn_seen; /* while building: cuDNN choices by convolution graph (cudnn_conv.c) */
    segrt_build_report report; /* the build's slowest nodes and cuDNN searches */
    int32_t n_cudnn_seen, cap_cudnn_seen;
    bool has_fallback;
    /* Valid while the plan is built (NULL afterwards): handles for
     * searching and checking cuDNN/cuBLASLt configurations. */
    cudnnHandle_t build_cudnn;
    cublasLtHandle_t build_lt;
    cudaStream_t build_stream;
};

/* Builder API ----------------------------------------------------------------- */

/* Storage dtype of node n's float outputs: the plan's activation dtype
 * (float16/bfloat16 at those precisions), float32 for ops the user pinned
 * with --fp32-ops, or the graph's dtype for non-float values. */
sg_dtype cuda_out_dtype(const sg_cuda_plan *p, const sg_node *n, int32_t value);
/* Whether node n computes in float32 only (pinned by the user). */
bool cuda_node_fp32(const sg_cuda_plan *p, const sg_node *n);
/* The math type for convolutions and matrix products of node n. */
typedef enum cuda_math { CUDA_MATH_FP32, CUDA_MATH_TF32, CUDA_MATH_FP16, CUDA_MATH_BF16 } cuda_math;
cuda_math cuda_node_math(const sg_cuda_plan *p, const sg_node *n);

/* The tensor holding graph value v with dtype dt (UNDEFINED: as it is) in
 * layout l (ANY: as it is), adding a conversion step the first time. A
 * constant value is uploaded converted. */
sg_status cuda_value_as(sg_cuda_plan *p, int32_t v, sg_dtype dt, cuda_layout l, int32_t *out);
/* The tensor for graph value v as it is, or -1 when it has none yet. */
int32_t cuda_value(const sg_cuda_plan *p, int32_t v);
/* A new arena tensor for output k of node n with the given dtype, dims of
 * the graph's value and layout (PLAIN or CHANNELS_LAST; ANY: PLAIN); it
 * becomes the value's tensor. */
sg_status cuda_output_new(sg_cuda_plan *p, const sg_node *n, int32_t k, sg_dtype dt, cuda_layout l,
                          int32_t *out);
/* The caller's input or output io as a dense plain tensor. */
sg_status cuda_tensor_io(sg_cuda_plan *p, cuda_tensor_kind kind, int32_t io, sg_dtype dt, int32_t rank,
                         const int64_t *dims, int32_t *out);
/* Appends a step copying (converting dtype and layout) tensor from into to. */
sg_status cuda_copy_step(sg_cuda_plan *p, const sg_node *n, int32_t from, int32_t to);
/* The weight store's device copy under (blob, tag), if it has one. */
bool sg_cuda_weights_lookup(sg_cuda_weights *w, const void *blob, const char *tag, void **dev);
/* A new arena tensor not tied to a value (a builder's intermediate). */
sg_status cuda_tensor_new(sg_cuda_plan *p, sg_dtype dt, int32_t rank, const int64_t *dims, cuda_layout l,
                          int32_t *out);
/* A view of tensor `of` with other dims and strides starting elem_offset
 * elements in: transposes, slices, reshapes of plain tensors, channel
 * slices of a concatenation. Lives as long as it is used. */
sg_status cuda_tensor_alias(sg_cuda_plan *p, int32_t of, int32_t rank, const int64_t *dims,
                            const int64_t *strides, int64_t elem_offset, int32_t *out);
/* Makes tensor t graph value v's tensor (for steps that produce a view). */
void cuda_value_set(sg_cuda_plan *p, int32_t v, int32_t t);
/* Strides of a dense tensor with these dims in layout l. */
void cuda_layout_strides(cuda_layout l, int32_t rank, const int64_t *dims, int64_t *strides);
/* The dense layout tensor t has (PLAIN, CHANNELS_LAST) or ANY for other views. */
cuda_layout cuda_tensor_layout(const cuda_tensor *t);
/* The layout of a new tensor that keeps t's dims: CHANNELS_LAST where t is
 * dense channels-last, else PLAIN. */
cuda_layout cuda_dense_layout(const sg_cuda_plan *p, int32_t t);

/* Appends a step for node n (NULL for plan-made steps) running fn with
 * args (inputs then n_outputs outputs). Takes params (freed on failure
 * too). The step is returned for extra settings, valid until the next
 * append. */
sg_status cuda_step_new(sg_cuda_plan *p, const sg_node *n, const char *impl, cuda_run_fn fn,
                        const int32_t *args, int32_t n_args, int32_t n_outputs, void *params,
                        void (*params_free)(void *), cuda_step **out);
/* Takes step i out of the plan (a later step does its work: an
 * upsampling folded into the convolution after it), freeing its
 * parameters; the steps after it move up. Only while the plan is built,
 * before tensors' lifetimes are. */
void cuda_step_remove(sg_cuda_plan *p, int32_t i);
/* The index of the step created with this serial, or -1 (removed). */
int32_t cuda_step_of_serial(const sg_cuda_plan *p, int32_t serial);

/* A device copy of constant host data (dtype dt, n_bytes) owned by the
 * weight store under key (blob, tag): uploads once per engine. */
sg_status cuda_const_upload(sg_cuda_plan *p, const void *key_blob, const char *tag, const void *host,
                            size_t n_bytes, void **dev);
/* A CONST tensor over device memory dev with the given dims and strides. */
sg_status cuda_tensor_const(sg_cuda_plan *p, void *dev, sg_dtype dt, int32_t rank, const int64_t *dims,
                            const int64_t *strides, int32_t *out);
/* Constant value v in dtype dt and layout l, zero-padded along axis to
 * size elements (a weight whose input channels a convolution pads). */
sg_status cuda_const_padded(sg_cuda_plan *p, int32_t v, sg_dtype dt, cuda_layout l, int32_t axis, int64_t size,
                            int32_t *out);
/* A float32 host copy of constant value v's data (caller frees), or NULL
 * with OUT_OF_MEMORY recorded; NULL without error if v is not constant. */
float *cuda_const_f32(const sg_cuda_plan *p, int32_t v);

/* Constant value v's `numel` values as a 1-D float32 CONST tensor, kept by
 * the weight store under (v's data, tag): host holds them already
 * converted (reordered, say), or NULL to convert v's own data. */
sg_status cuda_const_f32_tensor(sg_cuda_plan *p, int32_t v, const char *tag, const float *host, int64_t numel,
                                int32_t *out);

/* Every arg of step st reached through run-time views (any_view). */
void cuda_step_any_view(cuda_step *st);
/* Turns tensor t into the slice [at, at + t's size) along axis of buffer
 * `into` (a dense arena tensor, or a graph output, of t's rank and
 * dtype) when every step built so far reaches t through run-time views
 * (or, for an arena buffer, takes the slice's strides through its
 * restride) and nothing views t: the steps that write t then write the
 * slice. Returns whether it did. */
bool cuda_place_in_slice(sg_cuda_plan *p, int32_t t, int32_t into, int32_t axis, int64_t at);

/* The activation node a applies, for fusing it into the step that
 * produces its input: Relu, LeakyRelu, or PRelu with a single constant
 * slope (a LeakyRelu of that slope). false for anything else. */
bool cuda_act_of(const sg_cuda_plan *p, const sg_node *a, sgk_act *act, float *alpha);

/* The only live reader of value v (not a graph output), or -1. */
int32_t cuda_single_reader(const sg_cuda_plan *p, int32_t v);

/* The following Relu, LeakyRelu or single-slope PRelu that alone reads
 * convolution n's output and can join its step, or -1 (act and alpha
 * then untouched). */
int32_t cuda_conv_activation(const sg_cuda_plan *p, const sg_node *n, sgk_act *act, float *alpha);

/* Whether value v is a constant of exactly `numel` elements of a float
 * dtype (weights a kernel of segrt's can take as float32). */
bool cuda_const_float(const sg_value *v, int64_t numel);
/* Whether convolution-like node n's weights (input 1) are such a constant
 * of wnumel elements and its bias (input 2), if any, one of K: what a
 * kernel that stages its weights at build needs. */
bool cuda_conv_consts_float(const sg_cuda_plan *p, const sg_node *n, int64_t wnumel, int64_t K);

/* The view a new dense tensor for graph value v would have (dtype dt,
 * layout l, no memory): what a builder asks a kernel about before adding
 * its step. false where v's dims are not all known. */
bool cuda_output_geometry(const sg_cuda_plan *p, int32_t v, sg_dtype dt, cuda_layout l, sgk_view *out);

/* The plan's device's multiprocessors, asked at build time (a launch may
 * be captured into a CUDA graph, where it should not ask). */
sg_status cuda_sm_count(const sg_cuda_plan *p, int32_t *out);

/* The bytes to allocate for a device buffer of `bytes` that cuDNN engines
 * may read: 1 MiB more. Some engines read past the end of an input (on an
 * H200 with cuDNN 9.19, compute-sanitizer showed a runtime-compiled FMA
 * convolution of an EfficientNet layer reading 5 KB past a dense input).
 * Inside the plan's arena such reads land in other activations; a buffer
 * of the exact size, as the build's timing and checking runs had, can end
 * at an unmapped page, and the read then kills the context ("an illegal
 * memory access"). */
static inline size_t cuda_padded_bytes(size_t bytes) { return bytes + ((size_t)1 << 20); }

/* Whether the build options turned kernel or fusion k off
 * (segrt_build_options_set_disabled_kernels; backend/kernel_switches.h
 * says what each does). Part of the plan key, so a plan, and the CUDA
 * graph replaying it, keeps one choice. */
/* Whether switchable kernel k runs on the capability the plan is for and
 * in the code libsegrt holds for the GPU. Hopper's warpgroup products
 * (wgmma) are sm_90a machine code: capability 9.0 exactly, with that code
 * present. The mma.sync kernels (m16n8k16 products, cp.async) need 8.0;
 * below it their code traps (k_mma.cuh). Every other kernel of segrt runs
 * on every capability segrt builds for (7.5 and up). */
static inline bool cuda_kernel_runs(const sg_cuda_plan *p, sg_kernel_switch k)
{
    int cc = 10 * p->sm_major + p->sm_minor;
    switch (k) {
    case SG_KERNEL_WGMMA:
    case SG_KERNEL_WGMMA_SHARED:
    case SG_KERNEL_WGMMA_ISSUE_LATE: return cc == 90 && p->code_cc == 90 && p->code_a;
    case SG_KERNEL_MMA_CONV:
    case SG_KERNEL_UP_K3:
    case SG_KERNEL_UPSAMPLE_CONV:
    case SG_KERNEL_MMA_ATTENTION: return cc >= 80 && p->code_cc >= 80;
    default: return true;
    }
}

/* Whether kernel or fusion k is off for this plan: turned off by the build
 * options (segrt_build_options_set_disabled_kernels; backend/kernel_switches.h
 * says what each does), or not runnable where the plan is for
 * (cuda_kernel_runs). Part of the plan key, so a plan, and the CUDA graph
 * replaying it, keeps one choice. */
static inline bool cuda_off(const sg_cuda_plan *p, sg_kernel_switch k)
{
    return (p->opts.disabled_kernels & SG_KERNEL_BIT(k)) != 0 || !cuda_kernel_runs(p, k);
}

/* The Add that alone reads v, adding a tensor of v's shape and dtype
 * computed earlier (a residual connection) that a convolution's epilogue
 * can take, or -1; *z is the other operand. */
int32_t cuda_residual_add(const sg_cuda_plan *p, int32_t v, int32_t *z);

/* What one of segrt's convolution kernels takes into its epilogue after
 * node n: the activation that alone reads n's output (Relu, LeakyRelu,
 * single-slope PRelu; act_node -1 for none), a residual Add after it
 * (res_node -1 for none; z_tensor the other operand's tensor), and the
 * value and dtype the kernel's output then stands for. */
typedef struct cuda_kernel_epilogue {
    int32_t act_node, act_value;
    sgk_act act;
    float act_alpha;
    int32_t res_node, z_tensor;
    int32_t out_value;
    sg_dtype out_dtype;
} cuda_kernel_epilogue;

void cuda_kernel_epilogue_of(const sg_cuda_plan *p, const sg_node *n, cuda_kernel_epilogue *e);
/* The same without the residual Add (res_node -1): for kernels whose
 * epilogue adds none. */
void cuda_kernel_act_epilogue_of(const sg_cuda_plan *p, const sg_node *n, cuda_kernel_epilogue *e);
/* Marks e's nodes fused and points their values at the kernel's output y. */
void cuda_kernel_epilogue_bind(sg_cuda_plan *p, const cuda_kernel_epilogue *e, int32_t y);

/* A Conv's or ConvTranspose's shapes and attributes, parsed once per node
 * before the builders run (cuda_conv_descs_read, cuda_conv_desc.c) and
 * read by every convolution path: segrt's direct, tensor-core and
 * upsampling kernels and cuDNN's. */
typedef struct cuda_conv_desc {
    bool transposed; /* ConvTranspose */
    /* The common rank of x, w and y, with xd, wd and yd their dims; 0 where
     * an operand is missing, the ranks differ, a dim is unknown or x is a
     * constant (what every kernel builder checks first). */
    int32_t rank, n_spatial;
    int64_t xd[SEGRT_MAX_RANK], wd[SEGRT_MAX_RANK], yd[SEGRT_MAX_RANK];
    int64_t group;               /* the group attribute (1 when absent; not checked) */
    bool has_output_shape;       /* ConvTranspose's output_shape is given */
    const int64_t *output_shape; /* its values (the node's), n_output_shape of them; NULL if not ints */
    int32_t n_output_shape;
    /* sg_conv_attrs_read over x's spatial axes with w's kernel dims
     * accepted them (read where x has rank 3 or more and w the same; a
     * builder reporting the error reads them again for its message). */
    bool attrs_ok;
    sg_conv_attrs a;
    bool opad_ok; /* ConvTranspose: output_padding read into opad (zeros when absent) */
    int64_t opad[SEGRT_MAX_RANK];
} cuda_conv_desc;

/* The fusion pass (cuda_fusion.c), run with cuda_conv_descs_read before
 * any builder: the graph's part of each fusion decision, per node and per
 * value. The builders' questions below (cuda_conv_activation,
 * cuda_residual_add, cuda_norm_fused_act, cuda_stats_norm) read these and
 * add only what depends on the plan as it is built. */
typedef struct cuda_node_fold {
    int32_t act_node; /* the Relu, LeakyRelu or single-slope PRelu that alone reads
                       * the node's first output as its input, or -1 */
    sgk_act act;      /* ... its activation */
    float act_alpha;
    bool act_keeps_dtype; /* ... whose output has the node's output's dtype */
    bool pool2x2;         /* a MaxPool of kernel 2x2, stride 2, dilation 1, no padding, floor:
                           * one a tensor-core layer's epilogue can compute (cuda_conv_mma.c) */
    int32_t up_cat;       /* a Conv alone reading a Concat of two inputs along channels that alone
                           * reads its second: the Concat, whose second input's upsampling the
                           * layer may compute in its halo (cuda_conv_mma.c's up fold), or -1 */
    bool defer_norm;      /* an InstanceNormalization or GroupNormalization whose result (after
                           * act_node) may be left to its readers (cuda_deferred_norm): they could
                           * all apply it, and with a MaxPool among them the activation is monotone */
} cuda_node_fold;
/* How a value's readers could take it unnormalised, each applying the
 * normalisation as it reads it (the graph's part: the kernels decide the
 * rest over the tensors the plan holds). NONE: a graph output, no
 * readers, or a reader that cannot. CONVS: each reader is a Conv reading
 * it only as X. ANY: each is such a Conv or ConvTranspose, a MaxPool of
 * one float output over rank 3 to 5, or a Concat having it first, once,
 * along the channels, whose result one Conv alone reads as its X. */
typedef enum cuda_norm_readers {
    CUDA_NORM_READERS_NONE = 0,
    CUDA_NORM_READERS_CONVS,
    CUDA_NORM_READERS_ANY
} cuda_norm_readers;
typedef struct cuda_value_fold {
    int32_t add_node;  /* the Add that alone reads the value, whose other operand */
    int32_t add_other; /* (this) is computed (no constant) with the value's dims and dtype, or -1 */
    int32_t norm_node; /* the InstanceNormalization or GroupNormalization that alone
                        * reads the value as its X, or -1 */
    cuda_norm_readers norm_readers;
    bool norm_pool_reader; /* ... a MaxPool among them (ANY) */
} cuda_value_fold;
sg_status cuda_fusion_pass(sg_cuda_plan *p);
/* The norm that alone reads value v as its X (the fusion pass's), or -1. */
int32_t cuda_stats_norm(const sg_cuda_plan *p, int32_t v);
/* How value v's readers could take it unnormalised (the fusion pass's). */
cuda_norm_readers cuda_norm_readers_of(const sg_cuda_plan *p, int32_t v);
/* Whether norm node n's result may be left to its readers (the fusion
 * pass's defer_norm): the builder then asks each reader's kernel. */
bool cuda_norm_defers(const sg_cuda_plan *p, const sg_node *n);

/* Reads the desc of every live Conv and ConvTranspose node of the plan. */
sg_status cuda_conv_descs_read(sg_cuda_plan *p);
/* Node n's desc (all zero, rank 0, for a node of another op). */
const cuda_conv_desc *cuda_conv_desc_of(const sg_cuda_plan *p, const sg_node *n);
/* d->rank where it lies in [min_rank, max_rank], else 0. */
int32_t cuda_conv_desc_rank(const cuda_conv_desc *d, int32_t min_rank, int32_t max_rank);

/* The arguments of a convolution kernel's step, in the order the kernels'
 * run functions read them: x, w, [bias], [residual z], y. */
typedef struct cuda_conv_args {
    int32_t t[5], n;
    int32_t y;
    bool has_bias, has_residual;
} cuda_conv_args;

/* Fills a for node n: the bias (n's third input, if any) as a float32
 * constant of K values tagged bias_tag, the residual tensor z (-1: none)
 * and a new output of n with dtype out_dt and layout out_layout. */
sg_status cuda_conv_args_make(sg_cuda_plan *p, const sg_node *n, int32_t x, int32_t w, const char *bias_tag,
                              int64_t K, int32_t z, sg_dtype out_dt, cuda_layout out_layout, cuda_conv_args *a);
/* The step's any_view mask for a: x, the residual and y are read through
 * the views they have at run time (y may become a slice of a
 * concatenation or the caller's output buffer). */
uint64_t cuda_conv_args_views(const cuda_conv_args *a);
/* a's arguments into args with tensor `extra` (-1: none) inserted before
 * y, and their any_view mask; returns their count (at most a->n + 1). */
int32_t cuda_conv_args_insert(const cuda_conv_args *a, int32_t extra, int32_t *args, uint64_t *views);

/* Records that tensor `part` holds per-tile statistics of tensor `of`;
 * the statistics recorded for tensor `of`, or NULL. */
sg_status cuda_tile_stats_put(sg_cuda_plan *p, int32_t of, int32_t part, const sgk_tile_grid *grid, int32_t pooled,
                              int32_t pool_node);
const cuda_tile_stats *cuda_tile_stats_find(const sg_cuda_plan *p, int32_t of);
sg_status cuda_deferred_norm_put(sg_cuda_plan *p, const cuda_deferred_norm *d);
const cuda_deferred_norm *cuda_deferred_norm_find(const sg_cuda_plan *p, int32_t value);
/* The index in p->deferred of what cuda_deferred_norm_find finds, or -1. */
int32_t cuda_deferred_norm_index(const sg_cuda_plan *p, int32_t value);
/* Whether d normalises all of its raw tensor's channels. */
bool cuda_deferred_norm_whole(const sg_cuda_plan *p, const cuda_deferred_norm *d);
/* Ends value's deferral (cuda_build_norm.c): a step writes the normalised
 * tensor, which becomes the value's tensor for the readers built after. */
sg_status cuda_deferred_norm_apply(sg_cuda_plan *p, int32_t value);
/* Whether the plan's builder for node n applies a deferred normalisation
 * of its input k itself (or calls cuda_deferred_norm_apply). */
bool cuda_reads_deferred(const sg_node *n, int32_t k);
/* The activation node that alone reads normalisation n's result and is
 * fused into it (cuda_build_norm.c's rule), its activation in *act and
 * *alpha, or -1 (*act NONE). */
int32_t cuda_norm_fused_act(const sg_cuda_plan *p, const sg_node *n, sgk_act *act, float *alpha);
/* Whether activation act (slope alpha) never decreases: none, Relu, or a
 * LeakyRelu of slope >= 0 (a max over raw values then picks the largest
 * activated one). */
static inline bool cuda_act_monotone(sgk_act act, float alpha)
{
    return act == SGK_ACT_NONE || act == SGK_ACT_RELU || (act == SGK_ACT_LEAKY_RELU && alpha >= 0.0f);
}
/* Whether node n is live and reads value v (as any of its inputs). */
bool cuda_node_reads(const sg_node *n, int32_t v);
/* The live nodes that read value v, in node order, each once; their
 * count in *n. */
const int32_t *cuda_readers(const sg_cuda_plan *p, int32_t v, int32_t *n);
/* Whether node n, not fused, is an `op` that reads value v as its first
 * input and only there (the readers that may take v's deferred norm). */
bool cuda_reads_only_as_x(const sg_cuda_plan *p, const sg_node *n, sg_op op, int32_t v);

/* Choices: the record stored under (node name, tag), or NULL. */
const cuda_choice *cuda_choice_find(const sg_cuda_plan *p, const char *node, const char *tag);
/* Frees what cudnn_conv.c remembered of its searches (p->cudnn_seen). */
void cuda_cudnn_seen_free(sg_cuda_plan *p);
sg_status cuda_choice_put(sg_cuda_plan *p, const char *node, const char *tag, const void *data, size_t size);

/* Broadcast view: tensor t's view (at run time) seen with out's rank and
 * dims, stride 0 along broadcast dims (numpy rules, aligned right). */
sgk_view cuda_view_bcast(const cuda_run *r, int32_t t, int32_t rank, const int64_t *dims);

/* Operator builders. Each returns SEGRT_ERROR_UNSUPPORTED when the node's
 * variant is not handled (with a message saying what), other errors as
 * usual. */
typedef sg_status (*cuda_builder_fn)(sg_cuda_plan *p, const sg_node *n);

/* Dispatch by table. An operator has an ordered list of implementations,
 * segrt's kernels first and cuDNN's or cuBLASLt's last; the plan builder
 * walks it and takes the first that matches and builds. match (NULL: every
 * node) is the cheap test (the op's variant, a kernel switch); try_build
 * looks closer and may still decline (*taken false, the plan untouched),
 * and the walk goes on; build, for the last entry of a list, always
 * answers (UNSUPPORTED, with the reason, for a variant it does not run).
 * A list ends with an entry whose name is NULL. */
typedef struct cuda_impl {
    const char *name;
    bool (*match)(const sg_cuda_plan *p, const sg_node *n);
    sg_status (*try_build)(sg_cuda_plan *p, const sg_node *n, bool *taken);
    cuda_builder_fn build;
} cuda_impl;

/* Node n's op's list (cuda_dispatch.c), or NULL for an op the GPU does
 * not run (those folded at build: Shape, Size, Range, Constant...). */
const cuda_impl *cuda_impls_of(const sg_node *n);
/* Walks list for node n; *taken says whether an implementation took it. */
sg_status cuda_impls_run(sg_cuda_plan *p, const sg_node *n, const cuda_impl *list, bool *taken);
/* Walks list for node n: UNSUPPORTED, naming the list's implementations,
 * where none takes it. */
sg_status cuda_impls_build(sg_cuda_plan *p, const sg_node *n, const cuda_impl *list);

/* cuda_build_map.c: unary, binary, variadic, Where, Clip, Cast, PRelu, BatchNormalization (inference) */
sg_status cuda_build_unary(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_binary(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_variadic(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_where(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_clip(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_cast(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_prelu(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_batch_norm(sg_cuda_plan *p, const sg_node *n);
/* cuda_build_layout.c: Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout, Transpose,
 * Slice, Concat, Split, Expand, Tile, Pad, DepthToSpace, SpaceToDepth, Gather, ScatterND */
sg_status cuda_build_reshape(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_transpose(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_slice(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_concat(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_split(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_expand(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_tile(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_pad(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_depth_space(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_gather(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_scatter_nd(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_gather_elements(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_gather_nd(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_scatter_elements(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_cumsum(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_trilu(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_grid_sample(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_top_k(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_one_hot(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_einsum(sg_cuda_plan *p, const sg_node *n);
/* cuda_build_reduce.c: reductions, ArgMax, global pools, Softmax, LogSoftmax */
sg_status cuda_build_reduce(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_softmax(sg_cuda_plan *p, const sg_node *n);
/* cuda_build_attention.c: segrt's ScaledDotProductAttention */
sg_status cuda_build_sdpa(sg_cuda_plan *p, const sg_node *n);
/* cuda_build_norm.c: Instance-, Group-, LayerNormalization (with a following ReLU/LeakyRelu fused) */
sg_status cuda_build_norm(sg_cuda_plan *p, const sg_node *n);
/* cuda_build_pool.c: MaxPool, AveragePool; Resize, Upsample */
sg_status cuda_build_pool(sg_cuda_plan *p, const sg_node *n);
/* Whether cuda_build_pool applies the normalisation deferred over all the
 * channels of its input dn->value as it reads it (a MaxPool). */
bool cuda_pool_takes_norm(const sg_cuda_plan *p, const sg_node *n, const cuda_deferred_norm *dn);
sg_status cuda_build_resize(sg_cuda_plan *p, const sg_node *n);
/* cuda_conv.c: Conv and ConvTranspose, through their implementation lists */
sg_status cuda_build_conv(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_conv_transpose(sg_cuda_plan *p, const sg_node *n);
/* cudnn_conv.c: cuDNN's convolution (dgrad: ConvTranspose), the last of
 * cuda_conv.c's lists. */
sg_status cuda_build_conv_cudnn(sg_cuda_plan *p, const sg_node *n, bool dgrad);
/* Node n's input copied into a new channels-last tensor of dtype io with
 * `to` channels, zeros after its own (cudnn_conv.c): a convolution over an
 * image's few channels then runs on tensor cores, with zero weights for
 * the added channels. */
sg_status cuda_conv_padded_input(sg_cuda_plan *p, const sg_node *n, int64_t to, sg_dtype io, int32_t *out);
/* cuda_conv_small.c: the direct kernel for <= 4 output channels; *taken false: cuDNN's turn */
sg_status cuda_build_conv_small(sg_cuda_plan *p, const sg_node *n, bool transposed, bool *taken);
/* cuda_conv_small.c too: a forward Conv over <= 4 input channels (an image's first layers), <= 16 outputs,
 * written channels-last; *taken false: cuDNN's turn */
sg_status cuda_build_conv_few_inputs(sg_cuda_plan *p, const sg_node *n, bool *taken);
/* cuda_conv_upsample.c: ConvTranspose with kernel == stride (<= 64 input channels); *taken false: cuDNN's turn */
sg_status cuda_build_conv_upsample(sg_cuda_plan *p, const sg_node *n, bool *taken);
/* Likewise for cuda_build_conv_upsample (a ConvTranspose node n). */
bool cuda_conv_upsample_takes_norm(const sg_cuda_plan *p, const sg_node *n, const cuda_deferred_norm *dn);
/* Whether step s is an upsampling of cuda_build_conv_upsample's, with its
 * parameters and tensors: x, the bias (-1: none), its deferred norm's ab
 * (-1: none) and y. */
struct sgk_conv_up_params;
bool cuda_conv_upsample_step(const cuda_step *s, struct sgk_conv_up_params *kp, int32_t *x, int32_t *bias,
                             int32_t *ab, int32_t *y);
/* cuda_conv_up_k3.c: ConvTranspose kernel 3, stride 2, pads 1 (<= 64 input channels, 16-bit), tensor cores;
 * *taken false: the other paths' turn */
sg_status cuda_build_conv_up_k3(sg_cuda_plan *p, const sg_node *n, bool *taken);
/* cuda_conv_mma.c: 3x3(x3) stride-1 Conv, <= 32 output channels (16 in 3-D), tensor cores; *taken false:
 * cuDNN's turn */
sg_status cuda_build_conv_mma(sg_cuda_plan *p, const sg_node *n, bool *taken);
/* Whether cuda_build_conv_mma will take Conv node n reading value
 * dn->value, of geometry xg, with its normalisation deferred to it as dn
 * says (channels [0, dn->c_len); dn->raw and dn->ab unused). */
bool cuda_conv_mma_takes_norm(const sg_cuda_plan *p, const sg_node *n, const cuda_deferred_norm *dn,
                              const sgk_view *xg);
/* Likewise for cuda_build_conv_small (forward, few output channels), the
 * value held as tensor dn->raw and normalised over all its channels. */
bool cuda_conv_small_takes_norm(const sg_cuda_plan *p, const sg_node *n, const cuda_deferred_norm *dn);
/* cuda_matmul.c (cuBLASLt): MatMul, Gemm */
sg_status cuda_build_matmul(sg_cuda_plan *p, const sg_node *n);
sg_status cuda_build_gemm(sg_cuda_plan *p, const sg_node *n);

/* Marks graph node index `node` as fused into the step being built (a
 * following activation, say), so the plan skips it; its output value
 * becomes an alias of the fusing step's output (cuda_value_set). */
void cuda_mark_fused(sg_cuda_plan *p, int32_t node);
/* Index of node n in the plan's graph. */
int32_t cuda_node_index(const sg_cuda_plan *p, const sg_node *n);

#endif
