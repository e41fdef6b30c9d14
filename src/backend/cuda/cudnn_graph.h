/* Helpers over cuDNN's backend (graph) API for the convolution builders:
 * descriptor sets freed together, tensor/convolution/pointwise
 * descriptors, the engine search with segrt's numerical filters, and the
 * rebuild of an execution plan from a recorded choice.
 *
 * The search and the rebuild take an already finalized operation graph.
 * Failures that only mean "this configuration cannot run" (an operation
 * graph or execution plan that does not finalize) are reported as such,
 * never as errors; every other failing call is an error naming the call. */
#ifndef SG_BACKEND_CUDA_CUDNN_GRAPH_H
#define SG_BACKEND_CUDA_CUDNN_GRAPH_H

#include "backend/cuda/cuda_internal.h"

#include <stdbool.h>
#include <stdint.h>

/* A set of backend descriptors owned together: every descriptor a plan
 * refers to stays alive as long as the plan (cuDNN does not say that a
 * finalized plan keeps its graph and engine config alive on its own). */
#define CDG_POOL_MAX 160

typedef struct cdg_pool {
    cudnnBackendDescriptor_t d[CDG_POOL_MAX];
    int32_t n;
} cdg_pool;

/* Creates a descriptor owned by pool. */
sg_status cdg_new(cdg_pool *pool, cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *out);
/* Destroys every descriptor of pool (newest first) and empties it. */
void cdg_pool_clear(cdg_pool *pool);

/* A tensor as cuDNN sees it: logical N, C, (D,) H, W dims, strides in
 * elements, 16-byte aligned base. */
typedef struct cdg_tensor {
    int64_t uid;
    cudnnDataType_t dtype;
    int32_t rank;
    int64_t dims[5];
    int64_t strides[5];
    bool is_virtual;
} cdg_tensor;

sg_status cdg_tensor_desc(cdg_pool *pool, const cdg_tensor *t, cudnnBackendDescriptor_t *out);

/* The geometry of a convolution in cuDNN's terms (1-D already lifted to
 * 2-D): nsp spatial dims, paddings, strides and dilations. */
typedef struct cdg_conv_geom {
    int32_t nsp;
    int64_t pre[3], post[3], stride[3], dil[3];
} cdg_conv_geom;

/* A convolution descriptor (cross-correlation, compute type comp). */
sg_status cdg_conv_desc(cdg_pool *pool, const cdg_conv_geom *g, cudnnDataType_t comp,
                        cudnnBackendDescriptor_t *out);
/* Forward (x, w -> y) or backward-data (dy = x, w -> dx = y) operation. */
sg_status cdg_conv_op(cdg_pool *pool, bool dgrad, cudnnBackendDescriptor_t conv, cudnnBackendDescriptor_t x,
                      cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t *out);

/* A pointwise operation y = mode(x[, b]) in float math. For RELU_FWD a
 * slope other than 0 makes it a leaky ReLU, for slopes up to 1 only (cuDNN
 * 9.19 computes max(x, slope x)). b may be NULL. */
sg_status cdg_pointwise_op(cdg_pool *pool, cudnnPointwiseMode_t mode, double relu_slope,
                           cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y,
                           cudnnBackendDescriptor_t *out);

/* An operation graph over ops. *ok is false (and *why says why) when
 * cuDNN does not finalize it: the pattern is not supported. */
sg_status cdg_graph(cdg_pool *pool, cudnnHandle_t h, const cudnnBackendDescriptor_t *ops, int32_t n_ops,
                    cudnnBackendDescriptor_t *out, bool *ok, char *why, size_t why_cap);

/* An engine configuration as data, for plan files and for rebuilding the
 * same execution plan in every context. Fixed size and versioned. */
#define CDG_CHOICE_VERSION 1u
#define CDG_MAX_KNOBS 64

typedef struct cdg_choice {
    uint32_t version;       /* CDG_CHOICE_VERSION */
    uint32_t cudnn_version; /* cudnnGetVersion() of the build that chose it */
    int32_t variant;        /* builder-defined: which graph the choice is for */
    int32_t n_knobs;
    int64_t engine;         /* CUDNN_ATTR_ENGINE_GLOBAL_INDEX */
    int64_t workspace;      /* bytes the plan needs */
    int64_t knob_type[CDG_MAX_KNOBS];
    int64_t knob_value[CDG_MAX_KNOBS];
} cdg_choice;

/* What the search accepts. Configs that are nondeterministic or
 * down-convert their inputs are always refused. */
typedef struct cdg_filter {
    bool no_tensor_core; /* float32 without TF32: refuse tensor-core engines */
    int64_t max_workspace;
} cdg_filter;

/* Autotuning: how many of heuristics A's configurations that fit are
 * timed, and the graph's non-virtual tensors (unique id and size) so the
 * search can bind scratch buffers to them. */
#define CDG_TUNE_MAX_TENSORS 8
#define CDG_TUNE_MAX_CANDIDATES 16

typedef struct cdg_tuning {
    int32_t candidates;   /* configurations to time; <= 1: the best-ranked one that fits */
    int32_t *finalized;   /* when not NULL: += the execution plans the search finalized */
    cudaStream_t stream;  /* h's stream */
    int32_t n;
    int64_t uids[CDG_TUNE_MAX_TENSORS];
    size_t bytes[CDG_TUNE_MAX_TENSORS];
} cdg_tuning;

/* Heuristics (mode A, then FALLBACK) over the finalized graph: the
 * engine configurations that pass the filter and whose execution plans
 * finalize on h. Without tuning (NULL, or candidates <= 1) the
 * best-ranked one is taken; with it, up to `candidates` of mode A's are
 * run on zero-filled buffers and the fastest is taken (a configuration
 * that fails to run is skipped). *found is false when none fits (*why
 * says how many were tried and why they were refused). With json, the
 * chosen plan serialized as cdg_plan_json does it (NULL where it is not
 * serializable; the caller frees it). */
sg_status cdg_search(cudnnHandle_t h, cudnnBackendDescriptor_t graph, const cdg_filter *f, const cdg_tuning *t,
                     cdg_choice *out, bool *found, char **json, size_t *json_len, char *why, size_t why_cap);

/* The execution plan of a recorded choice over the finalized graph, its
 * descriptors owned by pool. *ok is false (with *why) when it does not
 * finalize; other failures are errors. */
sg_status cdg_plan_from_choice(cdg_pool *pool, cudnnHandle_t h, cudnnBackendDescriptor_t graph,
                               const cdg_choice *c, cudnnBackendDescriptor_t *plan, int64_t *workspace, bool *ok,
                               char *why, size_t why_cap);

/* The finalized plan's serialized form (cuDNN's JSON representation,
 * which runtime-compiled engines keep with their compiled kernel): *json
 * (caller frees) of *len bytes, or NULL where the engine has none. */
sg_status cdg_plan_json(cudnnBackendDescriptor_t plan, char **json, size_t *len);

/* An execution plan restored from cdg_plan_json's output for handle h,
 * without the runtime compilation a finalize from the engine config
 * costs, owned by pool. *ok is false (with *why) where this cuDNN does
 * not restore it; other failures are errors. */
sg_status cdg_plan_from_json(cdg_pool *pool, cudnnHandle_t h, const char *json, size_t len,
                             cudnnBackendDescriptor_t *plan, int64_t *workspace, bool *ok, char *why,
                             size_t why_cap);

/* A finalized variant pack (caller destroys it). */
sg_status cdg_variant_pack(int32_t n, const int64_t *uids, void *const *ptrs, void *workspace,
                           cudnnBackendDescriptor_t *out);

/* One tensor of two execution plans compared by cdg_same_results: its
 * description in the reference plan (dense, say) and in the candidate
 * (the same dims, other strides, `cand_offset` elements into its buffer),
 * and whether the plans write it. */
#define CDG_VERIFY_MAX 8

typedef struct cdg_bind {
    cdg_tensor ref, cand; /* ref.uid names it in both plans */
    int64_t cand_offset;
    bool output;
} cdg_bind;

/* Runs plan `ref` and plan `cand` (one operation graph and engine over
 * differently strided tensors; each needs at most `workspace` bytes) on
 * the same random inputs: *same when cand writes bit for bit what ref
 * writes and touches nothing else of its output buffers. false, untried,
 * where the buffers would take more than max_bytes, or where memory or a
 * run fails. Runs on h's stream (`stream`) and waits for it. */
sg_status cdg_same_results(cudnnHandle_t h, cudaStream_t stream, cudnnBackendDescriptor_t ref,
                           cudnnBackendDescriptor_t cand, int64_t workspace, int32_t n, const cdg_bind *binds,
                           size_t max_bytes, bool *same);

/* cuDNN's data type for a segrt float dtype (FLOAT for anything else). */
cudnnDataType_t cdg_dtype(sg_dtype dt);

#endif
