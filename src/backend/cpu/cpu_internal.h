/* The CPU plan's pieces, shared by the files of src/backend/cpu/. */
#ifndef SG_BACKEND_CPU_INTERNAL_H
#define SG_BACKEND_CPU_INTERNAL_H

#include "backend/cpu/cpu_backend.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdbool.h>

/* Records the failing oneDNN call with file and line, and returns. */
#define DNNL_TRY(call)                                                                     \
    do {                                                                                   \
        dnnl_status_t dnnl_s_ = (call);                                                    \
        if (dnnl_s_ != dnnl_success)                                                       \
            return sg_error(dnnl_s_ == dnnl_out_of_memory ? SEGRT_ERROR_OUT_OF_MEMORY      \
                                                          : SEGRT_ERROR_INTERNAL,          \
                            "oneDNN %s failed: %s (%s:%d)", #call, cpu_dnnl_status(dnnl_s_), \
                            __FILE__, __LINE__);                                           \
    } while (0)

typedef enum cpu_tensor_kind {
    CPU_T_CONST, /* data owned by the plan (or a graph blob it references) */
    CPU_T_ARENA, /* an activation at an offset in the exec's arena */
    CPU_T_INPUT, /* the caller's input buffer */
    CPU_T_OUTPUT /* the caller's output buffer */
} cpu_tensor_kind;

typedef struct cpu_tensor {
    cpu_tensor_kind kind;
    sg_dtype dtype;
    int32_t rank;
    int64_t dims[SEGRT_MAX_RANK];
    bool has_md;            /* oneDNN knows the dtype: md is valid */
    dnnl_memory_desc_t md;  /* layout, possibly blocked */
    size_t bytes;           /* including any layout padding */
    int32_t io_index;       /* graph input / output index for INPUT / OUTPUT */
    void *data;             /* CONST */
    size_t offset;          /* ARENA */
    int32_t first, last;    /* steps that write it first and read it last */
    int32_t alias;          /* another tensor whose memory this one views, or -1 */
    int32_t layouts;        /* the newest layout step converting it, or -1 */
} cpu_tensor;

typedef struct cpu_step cpu_step;
typedef struct sg_cpu_exec sg_cpu_exec;
typedef sg_status (*cpu_kernel_fn)(const cpu_step *s, sg_cpu_exec *e);

#define CPU_MAX_ARGS 64

typedef struct cpu_arg {
    int dnnl_arg;   /* DNNL_ARG_* for primitives; position for kernels */
    int32_t tensor; /* -1 when absent */
} cpu_arg;

struct cpu_step {
    const char *name;       /* the node's name (points into the plan's graph) */
    dnnl_primitive_t prim;  /* a oneDNN primitive, or NULL for a kernel */
    cpu_kernel_fn kernel;
    cpu_arg args[CPU_MAX_ARGS];
    int32_t n_args;
    int32_t n_outputs;      /* kernels: args[0..n_in) inputs, then outputs */
    const sg_node *node;    /* reference-kernel steps */
    void *params;           /* kernel parameters, freed with the plan */
    bool fallback;
    bool layout;            /* a reorder between layouts, args FROM and TO */
    int32_t next_layout;    /* layout steps: the previous one from the same tensor, or -1 */
};

struct sg_cpu_plan {
    sg_graph *g;            /* private copy: reference steps point at its nodes */
    segrt_build_report report; /* the slowest nodes to build */
    dnnl_engine_t engine;
    int32_t threads;
    cpu_tensor *tensors;
    int32_t n_tensors, cap_tensors;
    cpu_step *steps;
    int32_t n_steps, cap_steps;
    int32_t *value_tensor;  /* graph value -> tensor holding it, or -1 */
    uint8_t *fused;         /* graph nodes absorbed into an earlier step */
    int32_t *uses;          /* readers of each graph value */
    int32_t *reader;        /* the first node reading each graph value, or -1 */
    int32_t *inputs;        /* tensors of the graph inputs */
    int32_t *outputs;       /* tensors of the caller's output buffers */
    int32_t *aliases;       /* tensors viewing an input's memory, rebound per run */
    int32_t n_aliases;
    size_t arena_bytes;
    size_t scratch_bytes;   /* oneDNN's scratchpad, the largest primitive's */
    size_t kscratch_bytes;  /* segrt kernels' scratch, the largest step's */
    void **owned;           /* buffers freed with the plan */
    int32_t n_owned, cap_owned;
    const sg_node *cur;     /* the node being built, for messages (NULL: none) */
};

struct sg_cpu_exec {
    const sg_cpu_plan *plan;
    dnnl_stream_t stream;
    uint8_t *arena;
    void *scratch;
    dnnl_memory_t scratch_mem;
    void *kscratch;         /* scratch for segrt's own kernels */
    double *step_ms;        /* summed time of each step while profiling, or NULL */
    int64_t profiled_runs;
    dnnl_memory_t *mem;     /* one per plan tensor with a descriptor */
    void **ptr;             /* each tensor's data during a run */
};

/* What the CPU backend's kernels index. oneDNN 2.6 keeps a primitive's
 * dims, and offsets within a tensor, in 32-bit ints (its convolutions'
 * configurations are ints; later versions refuse sizes over INT_MAX where
 * 2.6 overflows, and divides by what overflowed), and segrt's kernels and
 * layout conversions run on the same tensors. So every tensor of a CPU
 * plan has dims below 2^31 and at most 2^31 - 1 bytes, layout padding
 * included; a node with a larger one fails the build, named, instead of
 * computing garbage or trapping. */
#define CPU_MAX_DIM ((int64_t)INT32_MAX)
#define CPU_MAX_TENSOR_BYTES ((int64_t)INT32_MAX)

/* Checks one tensor against those limits. role and name say what it is
 * ("input", "x"); the message names the node being built, if any.
 * UNSUPPORTED when over. */
sg_status cpu_check_tensor(const sg_cpu_plan *p, const char *role, const char *name, sg_dtype dt, int32_t rank,
                           const int64_t *dims, int64_t bytes);

const char *cpu_dnnl_status(dnnl_status_t s);
bool cpu_dnnl_dtype(sg_dtype t, dnnl_data_type_t *out);

/* Tensors and steps ----------------------------------------------------- */

/* A new tensor of the given kind, dtype and dims in plain row-major layout. */
sg_status cpu_tensor_new_plain(sg_cpu_plan *p, cpu_tensor_kind kind, sg_dtype dt, int32_t rank,
                               const int64_t *dims, int32_t *out);
/* A new arena tensor with layout md (float32 or another oneDNN type). */
sg_status cpu_tensor_new_md(sg_cpu_plan *p, sg_dtype dt, const dnnl_memory_desc_t *md, int32_t *out);
/* A tensor reading the memory of tensor `of` through descriptor md (a
 * transposed or reshaped view). It lives as long as it is used. */
sg_status cpu_tensor_new_alias(sg_cpu_plan *p, int32_t of, const dnnl_memory_desc_t *md, int32_t *out);
bool cpu_tensor_is_plain(const cpu_tensor *t);
void cpu_plain_md(const cpu_tensor *t, dnnl_memory_desc_t *md);

/* Appends a step and returns it (valid until the next append). */
sg_status cpu_step_new(sg_cpu_plan *p, const char *name, cpu_step **out);
/* Appends a segrt-kernel step for node n: args are the n_in tensors in,
 * then a new arena tensor with layout md that becomes graph value `value`.
 * Takes ownership of params, freeing it on failure too. The step is
 * returned for extra settings (valid until the next append). */
sg_status cpu_kernel_step(sg_cpu_plan *p, const sg_node *n, cpu_kernel_fn kernel, void *params, const int32_t *in,
                          int32_t n_in, const dnnl_memory_desc_t *md, int32_t value, cpu_step **out);
/* Appends the step of primitive pd (ownership taken, destroyed on failure)
 * for node n: args, then a new arena tensor in pd's destination layout
 * that becomes n's first output, passed as dst_arg. */
sg_status cpu_primitive_step(sg_cpu_plan *p, const sg_node *n, dnnl_primitive_desc_t pd, const cpu_arg *args,
                             int32_t n_args, int dst_arg);
/* Appends a step running kernel (with params, taken and freed on failure)
 * over n's inputs converted to plain layout and new plain outputs: how
 * reference kernels run. */
sg_status cpu_reference_step(sg_cpu_plan *p, const sg_node *n, cpu_kernel_fn kernel, void *params);
/* The same for one of segrt's own kernels on plain tensors (params: size
 * bytes, copied). */
sg_status cpu_own_step(sg_cpu_plan *p, const sg_node *n, cpu_kernel_fn kernel, const void *params, size_t size);
/* New plain arena tensors for every present output of n, which become its
 * values; out[k] is -1 for an omitted output. */
sg_status cpu_plain_outputs(sg_cpu_plan *p, const sg_node *n, int32_t *out);
/* Creates a primitive from pd, adds its scratchpad size to the plan's, and
 * takes ownership of pd. */
sg_status cpu_primitive(sg_cpu_plan *p, dnnl_primitive_desc_t pd, dnnl_primitive_t *out);
/* An attribute with user-managed scratchpad (so that contexts own it). */
sg_status cpu_attr_new(dnnl_primitive_attr_t *out);

/* The tensor holding graph value v in layout md, adding a reorder step the
 * first time another layout is asked for. */
sg_status cpu_value_as(sg_cpu_plan *p, int32_t v, const dnnl_memory_desc_t *md, int32_t *out);
/* The tensor holding graph value v in plain layout. */
sg_status cpu_value_plain(sg_cpu_plan *p, int32_t v, int32_t *out);
/* The tensor for graph value v (whatever its layout). */
int32_t cpu_value(const sg_cpu_plan *p, int32_t v);

/* Copies constant data into plan-owned memory in layout md (reordering). */
sg_status cpu_const_reordered(sg_cpu_plan *p, const dnnl_memory_desc_t *src_md, const void *src,
                              const dnnl_memory_desc_t *dst_md, void **out);
void *cpu_plan_alloc(sg_cpu_plan *p, size_t bytes);

/* The only live reader of value v (not a graph output), or -1. */
int32_t cpu_single_reader(const sg_cpu_plan *p, int32_t v);

/* Elements below which a segrt kernel stays on the calling thread: waking
 * a team costs more than it saves, and on a loaded machine a barrier waits
 * for whichever thread was descheduled. */
#define CPU_PARALLEL_MIN 65536

/* Layouts where each (sample, channel group) is `spatial` rows of `block`
 * contiguous channels: plain nchw (block 1), oneDNN's channel-blocked
 * nChw8c/16c, and channels-last nhwc (one group of all channels). */
#define CPU_MAX_CHANNEL_GROUP 1024

typedef struct cpu_channel_layout_t {
    int64_t n, c, spatial; /* batch, channels, product of spatial dims */
    int64_t block;         /* channels per group, contiguous in memory */
    int64_t stride_n;      /* elements between samples */
    int64_t stride_cb;     /* elements between channel groups */
    int64_t padded_c;      /* channels including layout padding */
} cpu_channel_layout_t;

bool cpu_channel_layout(const dnnl_memory_desc_t *md, cpu_channel_layout_t *out);

/* Operator builders. Each returns SEGRT_ERROR_UNSUPPORTED (without a
 * message the caller needs) when the node's variant is not handled, and
 * the node then runs on its reference kernel. */
sg_status cpu_build_conv(sg_cpu_plan *p, int32_t node);
sg_status cpu_build_pool(sg_cpu_plan *p, int32_t node);
sg_status cpu_build_concat(sg_cpu_plan *p, int32_t node);
sg_status cpu_build_eltwise(sg_cpu_plan *p, int32_t node);
sg_status cpu_build_prelu(sg_cpu_plan *p, int32_t node);
sg_status cpu_build_binary(sg_cpu_plan *p, int32_t node);
sg_status cpu_build_matmul(sg_cpu_plan *p, int32_t node);
sg_status cpu_build_resize(sg_cpu_plan *p, int32_t node);
sg_status cpu_build_transpose(sg_cpu_plan *p, int32_t node);
sg_status cpu_build_sdpa(sg_cpu_plan *p, int32_t node);
sg_status cpu_build_layer_norm(sg_cpu_plan *p, int32_t node);
sg_status cpu_build_softmax(sg_cpu_plan *p, int32_t node);
sg_status cpu_build_rows(sg_cpu_plan *p, int32_t node);
sg_status cpu_build_instance_norm(sg_cpu_plan *p, int32_t node);
sg_status cpu_build_deconv_gemm(sg_cpu_plan *p, int32_t node);
sg_status cpu_build_fallback(sg_cpu_plan *p, int32_t node);

/* Kernels of cpu_exec.c: a plain copy of args[0] into args[1], and a
 * reference kernel running step->node on plain tensors. */
sg_status cpu_copy_kernel(const cpu_step *s, sg_cpu_exec *e);
sg_status cpu_fallback_kernel(const cpu_step *s, sg_cpu_exec *e);

#endif
