/*
 * segrt: inference for segmentation networks over large medical images.
 *
 * This header is the whole public C API (one file on purpose, over 1,000
 * lines: users and bindings include one header). The library loads an ONNX model
 * into an immutable segrt_model, optimizes it for bound input shapes, builds
 * an immutable segrt_engine for a device, and runs it through segrt_context
 * objects, one per thread.
 *
 *     segrt_model *model = NULL;
 *     if (segrt_model_load("net.onnx", &model) != SEGRT_OK) {
 *         fprintf(stderr, "%s\n", segrt_last_error());
 *         return 2;
 *     }
 *     segrt_build_options *opts = NULL;
 *     segrt_build_options_create(&opts);
 *     int64_t dims[4] = {1, 3, 512, 512};
 *     segrt_build_options_set_shape(opts, "image", 4, dims);
 *     segrt_engine *engine = NULL;
 *     segrt_engine_build(model, opts, &engine);
 *     segrt_context *ctx = NULL;
 *     segrt_context_create(engine, &ctx);
 *     ... segrt_context_run(ctx, 1, &input, 1, &output) ...
 *     segrt_context_destroy(ctx);
 *     segrt_engine_destroy(engine);
 *     segrt_build_options_destroy(opts);
 *     segrt_model_destroy(model);
 *
 * Conventions that hold for every function below:
 *  - Functions that can fail return a segrt_status. On failure the calling
 *    thread's last-error message (segrt_last_error) says what went wrong,
 *    naming the file, the node and the tensor involved where there is one.
 *    The library never prints, never exits and never aborts on bad input.
 *  - Output arguments are written only on success.
 *  - Objects are created by *_create or *_load and released by *_destroy;
 *    every *_destroy accepts NULL.
 *  - Strings returned through descriptors are owned by the object they came
 *    from and live as long as it does.
 *  - segrt_model and segrt_engine are immutable once created: any number of
 *    threads may use one concurrently. A segrt_context or
 *    segrt_build_options is used by one thread at a time.
 */
#ifndef SEGRT_H
#define SEGRT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define SEGRT_API
#else
#define SEGRT_API __attribute__((visibility("default")))
#endif

#define SEGRT_VERSION_MAJOR 0
#define SEGRT_VERSION_MINOR 1
#define SEGRT_VERSION_PATCH 0

/* The most dimensions a tensor may have. */
#define SEGRT_MAX_RANK 8

/* Results. New codes are only ever added at the end. */
typedef enum segrt_status {
    SEGRT_OK = 0,
    SEGRT_ERROR_INVALID_ARGUMENT = 1, /* the caller passed a bad argument */
    SEGRT_ERROR_IO = 2,               /* a file could not be opened, read or written */
    SEGRT_ERROR_INVALID_MODEL = 3,    /* the model or data file is malformed */
    SEGRT_ERROR_UNSUPPORTED = 4,      /* well-formed, but uses what segrt lacks */
    SEGRT_ERROR_SHAPE = 5,            /* shapes or dtypes contradict each other */
    SEGRT_ERROR_OUT_OF_MEMORY = 6,    /* host or device memory ran out */
    SEGRT_ERROR_DEVICE = 7,           /* the GPU, driver or a GPU library failed */
    SEGRT_ERROR_INTERNAL = 8,         /* a bug in segrt: please report it */
    SEGRT_ERROR_CASES_FAILED = 9,     /* a job over many cases ran, but some of them failed (segrt_cases_run) */
    SEGRT_STATUS_COUNT
} segrt_status;

/* Element types. The numbers are ONNX's TensorProto.DataType values. */
typedef enum segrt_dtype {
    SEGRT_DTYPE_UNDEFINED = 0,
    SEGRT_DTYPE_FLOAT32 = 1,
    SEGRT_DTYPE_UINT8 = 2,
    SEGRT_DTYPE_INT8 = 3,
    SEGRT_DTYPE_UINT16 = 4,
    SEGRT_DTYPE_INT16 = 5,
    SEGRT_DTYPE_INT32 = 6,
    SEGRT_DTYPE_INT64 = 7,
    SEGRT_DTYPE_BOOL = 9,
    SEGRT_DTYPE_FLOAT16 = 10,
    SEGRT_DTYPE_FLOAT64 = 11,
    SEGRT_DTYPE_BFLOAT16 = 16
} segrt_dtype;

/* ---------------------------------------------------------------------
 * Library
 * ------------------------------------------------------------------- */

/* "MAJOR.MINOR.PATCH" of the library actually loaded. Thread-safe. */
SEGRT_API const char *segrt_version(void);

/* The calling thread's message for the last failed call, or "" if none
 * failed yet. Valid until the thread's next failing segrt call.
 * Thread-safe: each thread has its own message. */
SEGRT_API const char *segrt_last_error(void);

/* Stable short name of a status ("SEGRT_ERROR_SHAPE"); "unknown" for values
 * outside the enum. Thread-safe. */
SEGRT_API const char *segrt_status_name(segrt_status status);

/* ONNX-style name of a dtype ("float32", "int64", ...); "undefined" for
 * values outside the enum. Thread-safe. */
SEGRT_API const char *segrt_dtype_name(segrt_dtype dtype);

/* Bytes per element; 0 for SEGRT_DTYPE_UNDEFINED and unknown values. */
SEGRT_API size_t segrt_dtype_size(segrt_dtype dtype);

/* Files segrt writes (plan files, and the outputs of the segrt command)
 * go to a temporary name beside the destination (".NAME.segrt-" and 16
 * random hex digits), created exclusively, and are renamed over the
 * destination only when complete: a reader sees the previous file or the
 * new one whole, and a symbolic link planted at either name cannot
 * redirect the write. This removes the temporary files of every such
 * write in progress in this process and makes those writes fail, so that
 * an interrupted program leaves nothing behind. Async-signal-safe: made
 * to be called from a SIGINT or SIGTERM handler before the process ends.
 * (After SIGKILL a ".NAME.segrt-*" file may remain; segrt never reads or
 * reuses such a name, and it can be deleted.) */
SEGRT_API void segrt_abandon_outputs(void);

/* ---------------------------------------------------------------------
 * Models: a parsed and validated ONNX graph
 * ------------------------------------------------------------------- */

typedef struct segrt_model segrt_model;

/* Loads an ONNX model file. External data files are resolved relative to
 * the model's folder; absolute paths and paths that leave the folder are
 * rejected. Operators, opsets (13 to 23 of the default domain) and dtypes
 * are validated here, so an unsupported model fails at load with the node
 * named. On success *out owns the model; release it with
 * segrt_model_destroy.
 * Errors: INVALID_ARGUMENT (NULL arguments), IO (cannot read the file or
 * its external data), INVALID_MODEL (not a well-formed ONNX model),
 * UNSUPPORTED (operator, opset or dtype segrt lacks), SHAPE (the graph's
 * shapes contradict themselves), OUT_OF_MEMORY. */
SEGRT_API segrt_status segrt_model_load(const char *path, segrt_model **out);

/* As segrt_model_load, from bytes in memory. base_dir is where external
 * data files are looked up; NULL rejects models with external data. name is
 * used in messages (NULL: "<memory>"). The bytes are not retained. */
SEGRT_API segrt_status segrt_model_load_from_memory(const void *data, size_t size,
                                                    const char *base_dir, const char *name,
                                                    segrt_model **out);

SEGRT_API void segrt_model_destroy(segrt_model *model);

/* A tensor's declared or inferred type. dims[i] is -1 where the size is
 * not known; dim_names[i] is the symbolic name ("batch", "s77") where the
 * model gives one, else NULL. rank is -1 where the rank is unknown. */
typedef struct segrt_tensor_desc {
    const char *name;
    segrt_dtype dtype;
    int32_t rank;
    int64_t dims[SEGRT_MAX_RANK];
    const char *dim_names[SEGRT_MAX_RANK];
} segrt_tensor_desc;

/* Counts and descriptors of the graph's inputs and outputs, in the model's
 * order. Initializers are not inputs. Errors: INVALID_ARGUMENT (index out of
 * range or NULL). */
SEGRT_API size_t segrt_model_input_count(const segrt_model *model);
SEGRT_API size_t segrt_model_output_count(const segrt_model *model);
SEGRT_API segrt_status segrt_model_input(const segrt_model *model, size_t index,
                                         segrt_tensor_desc *out);
SEGRT_API segrt_status segrt_model_output(const segrt_model *model, size_t index,
                                          segrt_tensor_desc *out);

typedef struct segrt_model_meta {
    const char *path;             /* the file it was loaded from, or the name given */
    const char *producer_name;    /* "" where absent */
    const char *producer_version; /* "" where absent */
    int64_t ir_version;
    int64_t opset;                /* of the default ONNX domain */
    int64_t parameter_count;      /* elements of all initializers in use */
    int64_t parameter_bytes;      /* their bytes as stored */
} segrt_model_meta;

SEGRT_API segrt_status segrt_model_metadata(const segrt_model *model, segrt_model_meta *out);

/* The value of a metadata_props entry of the model, or NULL if absent. */
SEGRT_API const char *segrt_model_metadata_value(const segrt_model *model, const char *key);

typedef struct segrt_node_desc {
    const char *name;    /* the node's name; generated ("Conv_12") where the model gave none */
    const char *op_type; /* ONNX operator name */
    const char *domain;  /* "" for the default domain */
} segrt_node_desc;

/* The graph's nodes in execution order. */
SEGRT_API size_t segrt_model_node_count(const segrt_model *model);
SEGRT_API segrt_status segrt_model_node(const segrt_model *model, size_t index,
                                        segrt_node_desc *out);

/* Multiply-add FLOPs (2 per multiply-add) of convolutions, transposed
 * convolutions and matrix products, plus one per output element of other
 * arithmetic, for one run. Needs every shape known: use an optimized model
 * with bound shapes. Errors: SHAPE (a shape is not known). */
SEGRT_API segrt_status segrt_model_flops(const segrt_model *model, double *out);

/* ---------------------------------------------------------------------
 * Build options: shapes, device, threads
 * ------------------------------------------------------------------- */

typedef struct segrt_build_options segrt_build_options;

typedef enum segrt_device_kind {
    SEGRT_DEVICE_CPU = 0,
    SEGRT_DEVICE_CUDA = 1
} segrt_device_kind;

SEGRT_API segrt_status segrt_build_options_create(segrt_build_options **out);
SEGRT_API void segrt_build_options_destroy(segrt_build_options *opts);

/* Binds the model input `name` to a concrete shape. A later call for the
 * same name replaces the earlier one. Errors: INVALID_ARGUMENT (rank outside
 * 0..SEGRT_MAX_RANK, negative dims, NULL). */
SEGRT_API segrt_status segrt_build_options_set_shape(segrt_build_options *opts, const char *name,
                                                     int32_t rank, const int64_t *dims);

/* Worker threads for CPU execution; 0 (the default) uses every core. */
SEGRT_API segrt_status segrt_build_options_set_threads(segrt_build_options *opts, int32_t threads);

/* Where the engine runs. Default: SEGRT_DEVICE_CPU, index 0. */
SEGRT_API segrt_status segrt_build_options_set_device(segrt_build_options *opts,
                                                      segrt_device_kind kind, int32_t index);

/* Binds input `name` to a range of shapes, as TensorRT's optimization
 * profiles do: each dim d may take any size in [min[d], max[d]] at run
 * time; the engine is compiled for opt and its memory sized for max. A dim
 * with min == opt == max is fixed. Errors: INVALID_ARGUMENT (min > opt or
 * opt > max, a negative dim, rank outside 0..SEGRT_MAX_RANK, NULL). */
SEGRT_API segrt_status segrt_build_options_set_shape_range(segrt_build_options *opts,
                                                           const char *name, int32_t rank,
                                                           const int64_t *min,
                                                           const int64_t *opt,
                                                           const int64_t *max);

/* Arithmetic precision of a CUDA engine. Convolutions and matrix products
 * take float16/bfloat16 operands at those precisions and accumulate in
 * float32; normalisation statistics, softmax and reductions are computed
 * in float32 at every precision; inputs and outputs stay float32. */
typedef enum segrt_precision {
    SEGRT_PRECISION_FP32 = 0, /* float32 everywhere, TF32 off */
    SEGRT_PRECISION_TF32 = 1, /* float32 storage, TF32 tensor-core products */
    SEGRT_PRECISION_FP16 = 2, /* float16 activations and weights */
    SEGRT_PRECISION_BF16 = 3  /* bfloat16 activations and weights */
} segrt_precision;

/* Default SEGRT_PRECISION_FP32. The CPU engine computes in float32 whatever
 * is set. Errors: INVALID_ARGUMENT (a value outside the enum). */
SEGRT_API segrt_status segrt_build_options_set_precision(segrt_build_options *opts,
                                                         segrt_precision precision);
/* "fp32", "tf32", "fp16", "bf16"; NULL for values outside the enum. */
SEGRT_API const char *segrt_precision_name(segrt_precision precision);

/* Comma-separated op types ("Softmax") or node names kept in float32 at
 * reduced precisions (NULL or "": none). The list is copied. */
SEGRT_API segrt_status segrt_build_options_set_fp32_ops(segrt_build_options *opts, const char *list);

/* Lets a CUDA engine run operators the GPU backend cannot run on the CPU
 * (copying their inputs and outputs through host memory) instead of
 * failing the build. Off by default. */
SEGRT_API segrt_status segrt_build_options_set_allow_cpu_fallback(segrt_build_options *opts,
                                                                  int allow);

/* The most cuDNN/cuBLASLt workspace one layer may use (default 1 GiB). */
SEGRT_API segrt_status segrt_build_options_set_workspace(segrt_build_options *opts, size_t bytes);

/* How many cuDNN engine configurations a CUDA build times for each
 * convolution, keeping the fastest in the plan (default 8; 0 or 1 takes
 * cuDNN's best-ranked one untimed, which builds faster and gives the
 * same plan on every build). At most 16. */
SEGRT_API segrt_status segrt_build_options_set_autotune(segrt_build_options *opts, int32_t candidates);

/* Comma-separated names of kernels and fusions a CUDA build does not use,
 * for comparisons (A/B timings, differential tests): each sends the layers
 * it would take to the path taken without it, cuDNN in the end. NULL or ""
 * disables none (the default). The set is part of the plan key. Names
 * (docs/design.md says what each turns off): graphs, mma-conv, wgmma,
 * wgmma-shared, wgmma-issue-late, mma-small-input, pad-channels,
 * conv-stats, conv-pool, up-fold, small-conv, tiled-conv, up-conv,
 * upsample-conv, up-k3, concat-slices, norm-one-pass, norm-prologue,
 * cudnn-plan-json. Spaces around a name are ignored, as is an empty name.
 * Errors: INVALID_ARGUMENT (an unknown name: the message names it and
 * lists the valid ones; opts is unchanged). */
SEGRT_API segrt_status segrt_build_options_set_disabled_kernels(segrt_build_options *opts, const char *list);

/* Builds CUDA plans as for an older GPU: only the kernels a GPU of that
 * compute capability may run are chosen (sm_90a's warpgroup kernels on
 * 9.0 only, the mma.sync ones from 8.0, bfloat16 from 8.0), so that one
 * GPU runs the test suite and benchmarks as an Ampere or Turing card
 * would plan them; cuDNN and cuBLASLt still choose their own engines for
 * the GPU present. arch: "sm_80", "80" or "8.0" (7.5 to 12.x); NULL or ""
 * plans for the GPU itself (the default). Part of the plan key. A target
 * newer than the GPU fails the build with INVALID_ARGUMENT. Errors:
 * INVALID_ARGUMENT (not a compute capability segrt supports; opts is
 * unchanged). */
SEGRT_API segrt_status segrt_build_options_set_target_arch(segrt_build_options *opts, const char *arch);

/* Returns a new model: input shapes bound from opts (NULL: none bound;
 * unbound dims stay symbolic), shapes and dtypes inferred, and the graph
 * simplified: constants folded, Identity and Dropout removed, no-op
 * Reshape/Pad/Cast/Slice/Transpose removed, BatchNormalization folded into a
 * preceding Conv or ConvTranspose, dead nodes removed. Results change by no
 * more than float rounding. The input model is not changed.
 * Errors: INVALID_ARGUMENT (an option names no input, or its rank or a fixed
 * dim disagrees: the message gives expected and given dims), SHAPE
 * (contradictory shapes, naming the node), UNSUPPORTED, OUT_OF_MEMORY. */
SEGRT_API segrt_status segrt_model_optimize(const segrt_model *model,
                                            const segrt_build_options *opts, segrt_model **out);

/* ---------------------------------------------------------------------
 * Engines and contexts
 * ------------------------------------------------------------------- */

typedef enum segrt_memory_kind {
    SEGRT_MEMORY_HOST = 0,
    SEGRT_MEMORY_DEVICE = 1
} segrt_memory_kind;

/* A tensor passed into or out of a run: dense, row-major (C order). */
typedef struct segrt_tensor {
    segrt_dtype dtype;
    int32_t rank;
    int64_t dims[SEGRT_MAX_RANK];
    void *data;
    segrt_memory_kind memory;
    int32_t device; /* device index where memory is SEGRT_MEMORY_DEVICE */
} segrt_tensor;

typedef struct segrt_engine segrt_engine;
typedef struct segrt_context segrt_context;

/* Builds an engine for the device in opts (NULL: CPU defaults). The model
 * is optimized first with the shapes in opts; the engine keeps what it
 * needs, so the model may be destroyed afterwards.
 * Errors: as segrt_model_optimize; UNSUPPORTED (an operator the device
 * cannot run, naming node and op; a device segrt was built without);
 * DEVICE. */
SEGRT_API segrt_status segrt_engine_build(const segrt_model *model,
                                          const segrt_build_options *opts, segrt_engine **out);
SEGRT_API void segrt_engine_destroy(segrt_engine *engine);

/* The engine's inputs and outputs, as segrt_model_input/output. */
SEGRT_API size_t segrt_engine_input_count(const segrt_engine *engine);
SEGRT_API size_t segrt_engine_output_count(const segrt_engine *engine);
SEGRT_API segrt_status segrt_engine_input(const segrt_engine *engine, size_t index,
                                          segrt_tensor_desc *out);
SEGRT_API segrt_status segrt_engine_output(const segrt_engine *engine, size_t index,
                                           segrt_tensor_desc *out);

/* Given input dtypes and dims, writes each output's dtype, rank and dims
 * so that the caller can allocate them. The inputs' data is not read,
 * except where an output's shape depends on the inputs' values (NonZero):
 * then, when every input's data is given in host memory, the graph is
 * evaluated on the host to learn it (as a run would: the model runs twice).
 * Errors: INVALID_ARGUMENT (count, dtype, rank or dims that do not fit an
 * input: the message names it with expected and given dims), SHAPE (also
 * a value-dependent shape whose inputs' data is not given), or the
 * evaluation's. */
SEGRT_API segrt_status segrt_engine_output_shapes(const segrt_engine *engine, size_t n_inputs,
                                                  const segrt_tensor *inputs, size_t n_outputs,
                                                  segrt_tensor *outputs);

/* A context holds everything a run mutates. One thread at a time. */
SEGRT_API segrt_status segrt_context_create(const segrt_engine *engine, segrt_context **out);
SEGRT_API void segrt_context_destroy(segrt_context *ctx);

/* Runs the engine. inputs and outputs follow the engine's order; outputs
 * are caller-allocated with the dtype and dims segrt_engine_output_shapes
 * gives, and are written only by this call. Errors: INVALID_ARGUMENT (counts,
 * dtypes, dims or memory kinds that do not fit), SHAPE, OUT_OF_MEMORY,
 * DEVICE, UNSUPPORTED. NaN and Inf flow through as IEEE arithmetic says. */
SEGRT_API segrt_status segrt_context_run(segrt_context *ctx, size_t n_inputs,
                                         const segrt_tensor *inputs, size_t n_outputs,
                                         segrt_tensor *outputs);

/* The CUDA stream (a cudaStream_t) the runs of ctx use, in *out; NULL for
 * a context of a CPU engine. segrt_context_run queues its copies and
 * kernels on this stream and waits for it before returning, so outputs are
 * complete when it returns; it does not wait for work queued on other
 * streams. A caller whose device inputs are still being written
 * asynchronously (by PyTorch on its current stream, say) makes this stream
 * wait for that work before the run: cudaStreamWaitEvent, or DLPack's
 * __dlpack__(stream=...) with this stream. It is created with
 * cudaStreamNonBlocking, so it does not synchronize with the legacy
 * default stream either. Valid while ctx is. Errors: INVALID_ARGUMENT
 * (NULL). */
SEGRT_API segrt_status segrt_context_stream(const segrt_context *ctx, void **out);

/* Makes the context's later runs wait for the work queued so far on
 * `stream`, a cudaStream_t of the caller's on the engine's device (NULL:
 * the legacy default stream), without the host waiting: the cheap way to
 * order a producer's pending writes of device inputs before a run (a
 * cudaEventRecord on stream and a cudaStreamWaitEvent on the context's).
 * Errors: INVALID_ARGUMENT (NULL ctx; a CPU engine's context, which has
 * no stream), DEVICE (stream is not a stream of that device). */
SEGRT_API segrt_status segrt_context_wait_stream(segrt_context *ctx, void *stream);

/* What an engine was built as. */
typedef struct segrt_engine_info {
    segrt_device_kind device;
    int32_t device_index;
    segrt_precision precision;
    uint64_t weight_bytes;      /* device memory of the weights (CUDA) */
    uint64_t arena_bytes;       /* activation memory each context allocates */
    uint64_t workspace_bytes;   /* cuDNN/cuBLASLt workspace (CUDA), oneDNN scratchpad and kernel
                                 * scratch (CPU) each context allocates */
    int32_t steps;              /* steps of the plan for the profile's opt shape */
    int32_t fallback_steps;     /* steps that run on the CPU (--allow-cpu-fallback) */
    int32_t plans;              /* CUDA: plans compiled so far (the profile's opt and max
                                 * shapes at build, other shapes on their first run) */
} segrt_engine_info;

SEGRT_API segrt_status segrt_engine_get_info(const segrt_engine *engine, segrt_engine_info *out);

/* Where an engine's build went, for finding what makes one slow: wall
 * seconds (they vary from build to build) of the whole build or plan
 * load, of the graph passes, and of the backend's plans (CUDA: every
 * plan compiled so far, the profile's opt and max shapes at build, other
 * shapes on their first run), the nodes whose plan steps took longest
 * to make, and for CUDA the cuDNN engine searches. Thread-safe. */
#define SEGRT_BUILD_REPORT_NODES 8

typedef struct segrt_build_node_time {
    char node[128]; /* the node's name (cut to fit) */
    char op[32];    /* its operator */
    double seconds;
} segrt_build_node_time;

typedef struct segrt_build_report {
    double total_seconds;   /* segrt_engine_build or segrt_engine_load, whole */
    double graph_seconds;   /* the graph passes: folding, simplification, fusion */
    double backend_seconds; /* the backend's plans */
    int32_t n_slowest;
    segrt_build_node_time slowest[SEGRT_BUILD_REPORT_NODES]; /* slowest first */
    int32_t cudnn_searches;  /* CUDA: convolution graphs searched */
    int32_t cudnn_reused;    /* convolutions that took an identical earlier one's choice */
    int32_t cudnn_finalized; /* candidate plans finalized by the searches */
    double cudnn_seconds;    /* in the searches: finalizing and timing candidates */
} segrt_build_report;

SEGRT_API segrt_status segrt_engine_build_report(const segrt_engine *engine, segrt_build_report *out);

/* FLOPs of one run of the engine for inputs of these dims (in the
 * engine's input order; data is not read), counted as segrt_model_flops
 * counts them on the engine's graph with these shapes bound: for engines
 * loaded from a plan file, which have no segrt_model. Thread-safe.
 * Errors: INVALID_ARGUMENT (NULL, a count other than the engine's inputs,
 * dims an input does not take), SHAPE (a shape is not known). */
SEGRT_API segrt_status segrt_engine_flops(const segrt_engine *engine, size_t n_inputs, const segrt_tensor *inputs,
                                          double *out);

/* ---------------------------------------------------------------------
 * Plan files and the plan cache
 *
 * A plan file holds the optimized graph and what its backend keeps besides
 * (for CUDA: the weights converted to the plan's layout and precision and
 * every per-layer choice; for the CPU: nothing more), behind a header with
 * a format version and a key: the model's hash, the segrt version, the
 * backend and its machine (for CUDA: the GPU's name and compute
 * capability, the CUDA runtime and cuDNN versions) and the build options.
 * A plan loads only where its key matches.
 * ------------------------------------------------------------------- */

/* Writes the engine's plan to path (through a temporary file renamed when
 * complete). Errors: UNSUPPORTED (a CUDA engine that compiled no plan: its
 * inputs' shapes were not bound), IO. */
SEGRT_API segrt_status segrt_engine_save(const segrt_engine *engine, const char *path);

/* Loads a plan file onto device `device` (a CPU plan ignores it). Errors:
 * IO, INVALID_MODEL (not a plan, truncated, corrupt), UNSUPPORTED (a format
 * version or a key that does not match this machine: the message says what
 * differs; a backend this build lacks), DEVICE, OUT_OF_MEMORY. */
SEGRT_API segrt_status segrt_engine_load(const char *path, int32_t device, segrt_engine **out);

/* Builds an engine through the on-disk plan cache: a plan in cache_dir
 * (NULL: $XDG_CACHE_HOME/segrt, else ~/.cache/segrt) with the same key is
 * loaded; otherwise the engine is built and its plan stored there. Failing
 * to write the cache is not an error. *hit (may be NULL) says whether the
 * cache served it. */
SEGRT_API segrt_status segrt_engine_build_cached(const segrt_model *model,
                                                 const segrt_build_options *opts,
                                                 const char *cache_dir, int *hit,
                                                 segrt_engine **out);

/* ---------------------------------------------------------------------
 * Context pools: contexts handed to concurrent callers
 * ------------------------------------------------------------------- */

typedef struct segrt_context_pool segrt_context_pool;

/* Creates `size` contexts of the engine up front. The engine must outlive
 * the pool. Thread-safe after creation. */
SEGRT_API segrt_status segrt_context_pool_create(const segrt_engine *engine, size_t size,
                                                 segrt_context_pool **out);
/* Destroys the pool and its contexts; every context must be released. */
SEGRT_API void segrt_context_pool_destroy(segrt_context_pool *pool);
/* Takes a free context, waiting until one is released. */
SEGRT_API segrt_status segrt_context_pool_acquire(segrt_context_pool *pool, segrt_context **out);
/* Gives a context taken with acquire back to the pool. */
SEGRT_API segrt_status segrt_context_pool_release(segrt_context_pool *pool, segrt_context *ctx);
/* Acquire, run, release in one call. */
SEGRT_API segrt_status segrt_context_pool_run(segrt_context_pool *pool, size_t n_inputs,
                                              const segrt_tensor *inputs, size_t n_outputs,
                                              segrt_tensor *outputs);

/* ---------------------------------------------------------------------
 * Sliding windows: an image larger than the network's window, tiled,
 * run in batches of windows, blended and reduced, with the numbers of
 * MONAI's sliding_window_inference for the same settings.
 * ------------------------------------------------------------------- */

typedef struct segrt_window_options segrt_window_options;

typedef enum segrt_window_blend {
    SEGRT_WINDOW_BLEND_CONSTANT = 0, /* every voxel of a window weighs 1 */
    SEGRT_WINDOW_BLEND_GAUSSIAN = 1, /* MONAI's Gaussian, sigma = sigma_scale * window */
    /* nnU-Net's (compute_gaussian): centred on voxel n / 2, not (n - 1) / 2,
     * cut at 4 sigma, peak 10, rounded to float16, zeros raised to the least
     * non-zero weight; sigma = sigma_scale * window */
    SEGRT_WINDOW_BLEND_GAUSSIAN_NNUNET = 2
} segrt_window_blend;

typedef enum segrt_window_pad {
    SEGRT_WINDOW_PAD_CONSTANT = 0,  /* axes smaller than the window padded with a value */
    SEGRT_WINDOW_PAD_REFLECT = 1,   /* mirrored without repeating the edge */
    SEGRT_WINDOW_PAD_REPLICATE = 2  /* the edge repeated */
} segrt_window_pad;

typedef enum segrt_window_grid {
    SEGRT_WINDOW_GRID_MONAI = 0,  /* MONAI's window placement (the default) */
    SEGRT_WINDOW_GRID_NNUNET = 1  /* nnU-Net's evenly spread windows */
} segrt_window_grid;

typedef enum segrt_window_output {
    SEGRT_WINDOW_OUTPUT_LOGITS = 0, /* float32 N x K x spatial: the blended network output */
    SEGRT_WINDOW_OUTPUT_PROBS = 1,  /* float32 N x K x spatial: its activation */
    SEGRT_WINDOW_OUTPUT_LABELS = 2  /* uint8 (uint16 past 256 classes) N x 1 x spatial: argmax;
                                       with a sigmoid, uint8 N x K x spatial: above the threshold */
} segrt_window_output;

typedef enum segrt_window_activation {
    SEGRT_WINDOW_ACTIVATION_DEFAULT = 0, /* none for logits, softmax otherwise */
    SEGRT_WINDOW_ACTIVATION_NONE = 1,
    SEGRT_WINDOW_ACTIVATION_SOFTMAX = 2, /* over the class axis */
    SEGRT_WINDOW_ACTIVATION_SIGMOID = 3
} segrt_window_activation;

/* Options for windows of roi (spatial_dims values, 1 to 3; a value <= 0
 * is the whole axis), with MONAI's defaults: overlap 0.25, one window a
 * run, constant blending, constant padding with 0, MONAI's grid, logits. */
SEGRT_API segrt_status segrt_window_options_create(int32_t spatial_dims, const int64_t *roi,
                                                   segrt_window_options **out);
SEGRT_API void segrt_window_options_destroy(segrt_window_options *opts);
/* One overlap per spatial dim, each in [0, 1). */
SEGRT_API segrt_status segrt_window_options_set_overlap(segrt_window_options *opts, const double *overlap);
/* Windows per run of the network: the batch dim its engines are built for. */
SEGRT_API segrt_status segrt_window_options_set_batch(segrt_window_options *opts, int32_t windows);
SEGRT_API segrt_status segrt_window_options_set_blend(segrt_window_options *opts, segrt_window_blend blend,
                                                     double sigma_scale);
SEGRT_API segrt_status segrt_window_options_set_padding(segrt_window_options *opts, segrt_window_pad pad,
                                                       float value);
SEGRT_API segrt_status segrt_window_options_set_grid(segrt_window_options *opts, segrt_window_grid grid);
SEGRT_API segrt_status segrt_window_options_set_output(segrt_window_options *opts, segrt_window_output output,
                                                      segrt_window_activation activation, float threshold);
/* nnU-Net's mirroring: bit d of axes flips spatial axis d (0: off). */
SEGRT_API segrt_status segrt_window_options_set_mirroring(segrt_window_options *opts, uint32_t axes);

/* The most device memory a windowed run on CUDA may hold: its buffers,
 * accumulators and result staging plus the contexts' activations,
 * workspaces and weights (0, the default: no limit). SEGRT_MAX_MEMORY_AUTO:
 * what the device has free when the run plans its memory, plus what the
 * run's contexts already hold there, less room for the card's other users
 * (a display): the larger of 5 % of its memory and 256 MiB. A budget too small
 * for a window's rows of accumulators over the whole plane makes the run
 * go over the image in strips of axis 1, each window once, the sums
 * shared by neighbouring strips kept in pinned host memory between them
 * (the sums then add in another order: equal to the unbounded run's to
 * rounding, not bit for bit); one too small even for that, in thinner
 * slabs of rows, running windows once per slab they touch. */
#define SEGRT_MAX_MEMORY_AUTO UINT64_MAX
SEGRT_API segrt_status segrt_window_options_set_max_memory(segrt_window_options *opts, uint64_t bytes);

/* The element type of the device path's accumulators (the blended sums
 * of the windows' predictions and weights): SEGRT_DTYPE_FLOAT32 (the
 * default), SEGRT_DTYPE_FLOAT16 or SEGRT_DTYPE_BFLOAT16. Each batch's sums
 * are made in float32 and rounded once to the type when stored; half the
 * bytes let many classes (over 100) fit a budget with fewer strips or
 * passes, at float16's 11 bits (bfloat16's 8) of each sum. Labels may then
 * differ from float32's where two classes nearly tie. The host path always
 * accumulates in float32. Errors: INVALID_ARGUMENT (another type). */
SEGRT_API segrt_status segrt_window_options_set_accumulator(segrt_window_options *opts, segrt_dtype dtype);

/* The most host memory a windowed run may hold, the image, accumulators,
 * window buffers, result and CPU engines' activations together (0, the
 * default: what the machine has available). Before allocating, a run
 * estimates what it needs and fails, naming the need, its parts and the
 * limit: INVALID_ARGUMENT when it would pass this limit, OUT_OF_MEMORY
 * when it would pass what the machine (or the process's cgroup) has
 * available. */
SEGRT_API segrt_status segrt_window_options_set_max_host_memory(segrt_window_options *opts, uint64_t bytes);
/* Where segrt_window_run puts its result: SEGRT_MEMORY_HOST (the default)
 * or SEGRT_MEMORY_DEVICE (CUDA contexts only; on their device). */
SEGRT_API segrt_status segrt_window_options_set_result_memory(segrt_window_options *opts,
                                                              segrt_memory_kind memory);

/* Calls fn(user, done, total) from the calling thread of a windowed run
 * (segrt_window_run and window sessions) after each batch of windows:
 * windows done so far and the run's total, each window counted once
 * whatever the ensemble and mirroring (fn NULL: none, the default). The
 * callback runs between batches, so the run waits for it: keep it short.
 * Errors: INVALID_ARGUMENT (NULL opts). */
SEGRT_API segrt_status segrt_window_options_set_progress(segrt_window_options *opts,
                                                         void (*fn)(void *user, int64_t done, int64_t total),
                                                         void *user);

/* What a windowed run did. */
typedef struct segrt_window_stats {
    int64_t windows;         /* windows over all images */
    int64_t runs;            /* windows run through the networks (each model and mirror counts) */
    int32_t passes;          /* slabs the image was done in (1 unless the budget forced more) */
    int32_t on_device;       /* 1: gathered and blended on the GPU; 0: on the host */
    int64_t slab_rows;       /* accumulator rows held at once (device) */
    uint64_t pipeline_bytes; /* device memory of the pipeline's own buffers */
    uint64_t context_bytes;  /* device memory of the engines' weights and the contexts */
} segrt_window_stats;

/* Where the calling thread's time went in a windowed run, in seconds
 * (runs on the device; all 0 on the host path). A struct of its own so
 * that segrt_window_stats keeps its size for existing callers. */
typedef struct segrt_window_times {
    double setup;       /* buffers, streams, the importance map */
    double run;         /* the windows, from the first gather to the result in place; of it: */
    double uploading;   /* copying a host image's rows into pinned memory (and waiting for those buffers) */
    double waiting;     /* waiting for the GPU: to come within a few batches of the host, and to finish */
    double downloading; /* copying a host result's finished rows down, during the windows and after */
} segrt_window_times;

/* The input dims (rank image->rank) every engine of a windowed run must be
 * built for: [windows per run, C, window...]. */
SEGRT_API segrt_status segrt_window_input_dims(const segrt_window_options *opts, const segrt_tensor *image,
                                               int64_t *dims);

/* The window batch `segrt run --sw-batch auto` takes, for a caller that
 * builds its own engines: from engines (one per ensemble member, each
 * built for one window: segrt_window_input_dims with a batch of 1) and the
 * image's dtype and dims (data is not read), the largest batch whose
 * activations, window buffers and accumulators fit opts' max_memory, else
 * the device's free memory, at most the image's windows and 64; 1 when an
 * engine runs on the CPU (the host path runs a window at a time). An
 * estimate: a run with it that fails with OUT_OF_MEMORY is best retried
 * with half. Errors: INVALID_ARGUMENT (NULL, n_engines outside 1..64, an
 * image the options reject, engines that do not take one window), and
 * those of segrt_cuda_device_info. */
SEGRT_API segrt_status segrt_window_auto_batch(const segrt_window_options *opts, const segrt_tensor *image,
                                               segrt_engine *const *engines, size_t n_engines, int32_t *out);

/* Runs image (float32 N x C x spatial, host or device memory) through the
 * contexts (an ensemble, averaged per window; one is the usual case),
 * each of an engine built for segrt_window_input_dims and giving float32
 * [windows, K, window...] as its first output. *out receives the result
 * (host memory unless set otherwise), allocated by segrt: release it with
 * segrt_window_result_free. With CUDA contexts (one device, no CPU
 * fallback) the windows are gathered, blended and finished on the GPU;
 * otherwise on the host (a device image is copied down first). Each call
 * is a job of its own: the GPU path's buffers, streams and pinned memory
 * are made for it and freed after it; to repeat a job without that, run it
 * through a window session (below).
 * Errors: INVALID_ARGUMENT (options, image, engines that do not fit the
 * windows or disagree on K; the message says which), OUT_OF_MEMORY, and
 * the engines' own. */
SEGRT_API segrt_status segrt_window_run(segrt_context *const *contexts, size_t n_contexts,
                                        const segrt_window_options *opts, const segrt_tensor *image,
                                        segrt_tensor *out);
/* segrt_window_run, also filling *stats (which may be NULL). */
SEGRT_API segrt_status segrt_window_run_with_stats(segrt_context *const *contexts, size_t n_contexts,
                                                   const segrt_window_options *opts, const segrt_tensor *image,
                                                   segrt_tensor *out, segrt_window_stats *stats);
/* segrt_window_run_with_stats, also filling *times (which may be NULL). */
SEGRT_API segrt_status segrt_window_run_timed(segrt_context *const *contexts, size_t n_contexts,
                                              const segrt_window_options *opts, const segrt_tensor *image,
                                              segrt_tensor *out, segrt_window_stats *stats, segrt_window_times *times);
SEGRT_API void segrt_window_result_free(segrt_tensor *result);

/* A window session: a job (contexts and options) run over any number of
 * images, one after another. On the GPU path a run keeps its buffers
 * (stats' pipeline_bytes), streams, events, pinned memory and host copy
 * threads (asleep between copies) for the session's next run, which takes
 * back those that fit its image and frees the rest; so a job repeated over
 * images of one size allocates nothing after its first run. Results are
 * the same, bit for bit, as segrt_window_run's with the same contexts,
 * options and image; a result handed out (host or device) is the
 * caller's and never reused.
 *
 * Thread rules: a session is used by one thread at a time, and its
 * contexts by nothing else while it runs. The session borrows the
 * contexts (destroy it before them) and copies the options (later changes
 * to opts do not reach it).
 *
 * create: contexts and options as segrt_window_run takes them; nothing is
 * allocated on the device until the first run. Errors: INVALID_ARGUMENT
 * (NULL or too many contexts, NULL opts or out), OUT_OF_MEMORY.
 * run: as segrt_window_run over image (release *out with
 * segrt_window_result_free), filling *stats (may be NULL). A failed run
 * frees what the session kept; the session stays usable. Errors: those of
 * segrt_window_run.
 * run_timed: also filling *times (may be NULL).
 * destroy: waits for nothing (every run has finished when it returns) and
 * frees what the session kept; accepts NULL. */
typedef struct segrt_window_session segrt_window_session;
SEGRT_API segrt_status segrt_window_session_create(segrt_context *const *contexts, size_t n_contexts,
                                                   const segrt_window_options *opts, segrt_window_session **out);
SEGRT_API segrt_status segrt_window_session_run(segrt_window_session *session, const segrt_tensor *image,
                                                segrt_tensor *out, segrt_window_stats *stats);
SEGRT_API segrt_status segrt_window_session_run_timed(segrt_window_session *session, const segrt_tensor *image,
                                                      segrt_tensor *out, segrt_window_stats *stats,
                                                      segrt_window_times *times);
SEGRT_API void segrt_window_session_destroy(segrt_window_session *session);

/* ---------------------------------------------------------------------
 * Devices
 * ------------------------------------------------------------------- */

typedef struct segrt_device_info {
    char name[256];
    int32_t index;
    int32_t compute_major, compute_minor;
    int32_t multiprocessors;
    uint64_t total_memory_bytes;
    uint64_t free_memory_bytes;
} segrt_device_info;

typedef struct segrt_cuda_versions {
    int32_t built_with_cuda;     /* 1 if this library has its CUDA backend */
    int32_t driver_version;      /* CUDA driver API version (13000 = 13.0), 0 if none */
    int32_t runtime_version;     /* CUDA runtime version, 0 if not built with CUDA */
    int32_t cudnn_version;       /* cuDNN version (91900 = 9.19.0), 0 if none */
} segrt_cuda_versions;

/* Number of CUDA devices usable; 0 (and SEGRT_OK) on a machine without a
 * GPU or driver, or when built without CUDA. */
SEGRT_API segrt_status segrt_cuda_device_count(int32_t *out);
/* Brings CUDA up for device `device` on a thread of the library's own and
 * returns at once: the driver, the device's context and the libraries a
 * plan uses (cuDNN, cuBLASLt), about 0.35 s on an H200 that a program can
 * spend parsing its model meanwhile. The library's next CUDA call waits
 * for it; so does the process's exit. Only the first call does anything;
 * a device that does not exist is reported by the call that uses it. A
 * no-op without CUDA. */
SEGRT_API void segrt_cuda_prepare(int32_t device);
SEGRT_API segrt_status segrt_cuda_device_info(int32_t index, segrt_device_info *out);
SEGRT_API segrt_status segrt_cuda_versions_get(segrt_cuda_versions *out);

/* Device memory, so that inputs and outputs can stay on the GPU between
 * runs (segrt_tensor with memory = SEGRT_MEMORY_DEVICE). Without these a
 * caller may pass memory from its own CUDA allocator (cudaMalloc, a
 * PyTorch tensor's data pointer) just the same. In a build without CUDA
 * they fail with UNSUPPORTED, and on a machine without a GPU with
 * INVALID_ARGUMENT (device 0 does not exist); host-to-host copies work
 * everywhere. Thread-safe; none of them changes the calling thread's
 * current CUDA device. */

/* Allocates `bytes` (0 allocates a minimal block) on CUDA device `device`;
 * *out receives the pointer, suitably aligned for every dtype. Release it
 * with segrt_device_free. Errors: INVALID_ARGUMENT (no such device, NULL
 * out), OUT_OF_MEMORY (the message gives the device's free memory),
 * DEVICE, UNSUPPORTED (built without CUDA). */
SEGRT_API segrt_status segrt_device_alloc(int32_t device, size_t bytes, void **out);

/* Frees memory from segrt_device_alloc, waiting for work that uses it to
 * finish; NULL is a no-op. Errors: INVALID_ARGUMENT (not device memory),
 * DEVICE. */
SEGRT_API segrt_status segrt_device_free(void *ptr);

/* Copies `bytes` from src to dst, each in host or device memory as its
 * kind says, and returns when the copy is complete (dst may be read at
 * once; src may be reused). `device` is the CUDA device whose memory is
 * involved (for a copy between two devices, the destination's); it is
 * ignored when both are host memory, which is a plain memcpy. Host memory
 * may be ordinary (pageable) or pinned. The buffers must not overlap.
 * Errors: INVALID_ARGUMENT (NULL pointers with bytes > 0, an unknown kind,
 * no such device), DEVICE (the copy failed: a bad pointer or size),
 * UNSUPPORTED (device memory in a build without CUDA). */
SEGRT_API segrt_status segrt_device_copy(void *dst, segrt_memory_kind dst_kind, const void *src,
                                         segrt_memory_kind src_kind, size_t bytes, int32_t device);

/* Waits until all work queued on CUDA device `device`, by segrt or anyone
 * else in the process, is done. segrt_context_run already returns only
 * when its outputs are written, so this is for callers that mix segrt with
 * their own asynchronous work. Errors: INVALID_ARGUMENT (no such device),
 * DEVICE (a kernel failed earlier), UNSUPPORTED (built without CUDA). */
SEGRT_API segrt_status segrt_device_synchronize(int32_t device);

/* ---------------------------------------------------------------------
 * Tensors the library allocates
 * ------------------------------------------------------------------- */

/* Frees the data of a host tensor that segrt allocated and returned
 * (segrt_array_load, segrt_image_load), and sets data to NULL; the other
 * fields stay. NULL, and a tensor whose data is NULL, are no-ops. A tensor
 * in device memory is freed as segrt_device_free frees it. */
SEGRT_API void segrt_tensor_free(segrt_tensor *t);

/* ---------------------------------------------------------------------
 * Output files: written whole or not at all
 *
 * What segrt writes (arrays, images, plans, a window job's result) goes to
 * a temporary file beside the destination (".NAME.segrt-" and 16 random
 * hex digits, created exclusively, never through a link) and is renamed
 * over it on commit: a reader sees the previous file or the whole new one.
 * A destination that exists must be a regular file: a link, folder,
 * device, FIFO or socket is refused. segrt_abandon_outputs removes the
 * temporary files of every output still open. An output is used by one
 * thread at a time; different outputs are independent.
 * ------------------------------------------------------------------- */

typedef struct segrt_output segrt_output;

/* Whether path may be written, without creating anything: its folder
 * exists, is a folder and is writable (IO naming path otherwise), and path
 * is absent or a regular file (INVALID_ARGUMENT naming what it is).
 * A caller checks its destinations with this before long work. */
SEGRT_API segrt_status segrt_output_check(const char *path);

/* Checks path as segrt_output_check does and creates its temporary file.
 * *out owns it until segrt_output_commit or segrt_output_discard.
 * Errors: INVALID_ARGUMENT (NULL, or a destination that is not a regular
 * file), IO, OUT_OF_MEMORY. */
SEGRT_API segrt_status segrt_output_open(const char *path, segrt_output **out);

/* The destination, as given to segrt_output_open; valid while o is. */
SEGRT_API const char *segrt_output_path(const segrt_output *o);

/* Flushes, fsyncs and closes the temporary file and renames it over the
 * destination. Frees o whatever happens (on failure the temporary file is
 * removed). Errors: IO naming the destination, INVALID_ARGUMENT (NULL). */
SEGRT_API segrt_status segrt_output_commit(segrt_output *o);

/* Removes the temporary file and frees o; NULL is a no-op. */
SEGRT_API void segrt_output_discard(segrt_output *o);

/* Identity of a file, or of the name where one would be: an existing
 * file's device and inode (links followed), else its folder's and the
 * name. Two paths with equal identities name the same file, however they
 * are spelled and through whichever hard link, so that a caller can refuse
 * to write over its own inputs. */
typedef struct segrt_file_id {
    int32_t exists;  /* 1: the file exists; 0: only its folder does */
    uint64_t device; /* of the file, or of its folder */
    uint64_t inode;
    char name[256]; /* where !exists: the last component of the path */
} segrt_file_id;

/* Fills *out for path. Errors: IO naming path when its folder does not
 * exist, INVALID_ARGUMENT (NULL). Thread-safe. */
SEGRT_API segrt_status segrt_file_identity(const char *path, segrt_file_id *out);
/* 1 when a and b name the same file, else 0 (also for NULL). */
SEGRT_API int segrt_file_id_equal(const segrt_file_id *a, const segrt_file_id *b);

/* ---------------------------------------------------------------------
 * Arrays (NumPy .npy) and images (PNG, JPEG, TIFF) in files
 *
 * Loads allocate host memory that the caller releases with
 * segrt_tensor_free; saves go through an output (above), so that a
 * destination holds its previous file or the whole new one. Files are
 * opened only when they are regular files (a FIFO is refused, never
 * waited on). Every function is thread-safe.
 * ------------------------------------------------------------------- */

typedef enum segrt_file_format {
    SEGRT_FILE_UNKNOWN = 0,
    SEGRT_FILE_NPY = 1,
    SEGRT_FILE_PNG = 2,
    SEGRT_FILE_JPEG = 3,
    SEGRT_FILE_TIFF = 4,
    SEGRT_FILE_NIFTI = 5, /* .nii, .nii.gz (NIfTI-1 and -2) */
    SEGRT_FILE_DICOM = 6  /* a DICOM file, or a folder of them (a series) */
} segrt_file_format;

/* The format a file name's extension names (.npy, .png, .jpg/.jpeg,
 * .tif/.tiff, .nii/.nii.gz, .dcm, any case); UNKNOWN for another
 * extension, none or NULL. */
SEGRT_API segrt_file_format segrt_file_format_of_name(const char *path);

/* The format of the file's first bytes (a folder: DICOM); UNKNOWN when
 * they are none of these, or when the file cannot be read (no error is
 * recorded: the thread's last error is left as it was). A gzip file is
 * taken for NIfTI (a .nii.gz); opening it checks. */
SEGRT_API segrt_file_format segrt_file_format_of_file(const char *path);

/* What segrt_array_load(path) would give, from the header and the file's
 * size alone: out's dtype, rank and dims, out->data NULL, host memory.
 * Errors name the file: IO (cannot read), INVALID_MODEL (malformed
 * header, a size that does not match it, an array over 64 GiB),
 * UNSUPPORTED (Fortran order, big-endian or a dtype segrt lacks),
 * INVALID_ARGUMENT (NULL). */
SEGRT_API segrt_status segrt_array_probe(const char *path, segrt_tensor *out);

/* Reads an .npy file (format versions 1 to 3, little-endian, C order)
 * into *out, in host memory the caller frees with segrt_tensor_free.
 * Errors as segrt_array_probe's, and OUT_OF_MEMORY. */
SEGRT_API segrt_status segrt_array_load(const char *path, segrt_tensor *out);

/* Writes t (host memory, any dtype of segrt_dtype but UNDEFINED) as .npy
 * to path, whole or not at all. Errors: INVALID_ARGUMENT (NULL, device
 * memory, a bad tensor, a destination that is not a regular file), IO. */
SEGRT_API segrt_status segrt_array_save(const char *path, const segrt_tensor *t);

/* As segrt_array_save, into an output the caller then commits or
 * discards (so that several files can be written before any is renamed
 * into place). */
SEGRT_API segrt_status segrt_array_write(segrt_output *o, const segrt_tensor *t);

/* Where an image lies in the patient: segrt's one geometry model.
 *
 * World coordinates are LPS in mm (x towards the patient's left, y
 * posterior, z superior), as in DICOM and ITK; NIfTI's RAS is converted
 * (x and y negated) when read and written. Index axes: i the width
 * (column), j the height (row), k the depth (slice). The world position
 * of voxel (k, j, i) (array order: depth, height, width) is
 *     origin + direction * (i * spacing[2], j * spacing[1], k * spacing[0])
 * so column c of direction is the unit vector of index axis c in the
 * order i, j, k, as SimpleITK's GetDirection gives it row by row (its
 * spacing and size are ours reversed); spacing is in the array's order,
 * as dims are.
 *
 * For a DICOM series: origin is the first slice's ImagePositionPatient
 * (slices sorted along the normal), columns i and j are
 * ImageOrientationPatient's row and column cosines, k their cross product.
 * For NIfTI: nibabel's affine (the sform where sform_code > 0, else the
 * qform where qform_code > 0), columns normalised, x and y negated.
 * known is 0 where the file says nothing of position (PNG, JPEG, TIFF,
 * NPY, NIfTI with both codes 0, DICOM without position): origin 0,
 * direction the identity, spacing what the file says or 1. qform_code and
 * sform_code are a NIfTI file's own (0 otherwise), which the NIfTI writer
 * copies (segrt_volume_save). */
typedef struct segrt_geometry {
    int32_t known;
    double spacing[3];      /* mm along depth, height, width */
    double origin[3];       /* LPS position of voxel (0, 0, 0) */
    double direction[3][3]; /* direction[r][c]: LPS component r of index axis c (i, j, k) */
    int32_t qform_code, sform_code;
} segrt_geometry;

/* An image file as segrt_image_load will give it, from its header. */
typedef struct segrt_image_info {
    segrt_file_format format; /* PNG, JPEG, TIFF, NIFTI or DICOM */
    int32_t width, height;
    int32_t depth;          /* pages of a multi-page TIFF, slices of a volume; 1 for a 2-D image */
    int32_t channels;       /* 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA; a 4-D NIfTI's volumes */
    int32_t bits;           /* bits per sample as loaded (8 or 16 for pictures) */
    uint64_t pixel_bytes;   /* the pixels a load allocates */
    uint64_t scratch_bytes; /* an upper estimate of what a load holds beside them at once */
    segrt_dtype dtype;      /* the samples as loaded (uint8 or uint16 for pictures) */
    segrt_geometry geometry;
} segrt_image_info;

/* Reads the header of a PNG, JPEG, TIFF, NIfTI or DICOM file, or of the
 * DICOM series in a folder (by its bytes, whatever its name; a folder
 * holding several series is refused, listing them: open the one wanted
 * with segrt_volume_open). Errors name the file: IO, UNSUPPORTED (not one
 * of these, a kind of image segrt lacks, or a format this build lacks:
 * "built without DICOM support"), INVALID_MODEL (malformed, dimensions
 * past segrt's limits; for DICOM, a series with missing slices, uneven
 * spacing, mixed orientations or sizes, naming the series),
 * INVALID_ARGUMENT (NULL; several series). */
SEGRT_API segrt_status segrt_image_probe(const char *path, segrt_image_info *out);

/* Reads an image file's pixels as stored: uint8 or uint16, dims
 * [height, width, channels], or [depth, height, width, channels] for a
 * multi-page TIFF (numpy's and PIL's layout), in host memory the caller
 * frees with segrt_tensor_free. A volume (NIfTI, DICOM) is [depth,
 * height, width, channels] (a 2-D NIfTI [height, width, channels]) of
 * info.dtype, the values as the readers give them (NIfTI's scl_slope and
 * DICOM's rescale applied). Errors as segrt_image_probe's, and
 * OUT_OF_MEMORY. */
SEGRT_API segrt_status segrt_image_load(const char *path, segrt_tensor *out);

/* Writes pixels (uint8 or uint16, host memory, [height, width] or
 * [height, width, channels] with 1 to 4 channels, or [depth, height,
 * width, channels] for a TIFF) to path as PNG or TIFF, by its extension,
 * whole or not at all. Errors: INVALID_ARGUMENT (NULL, another dtype or
 * layout, an extension that is neither), UNSUPPORTED (.jpg: segrt writes
 * no lossy files), IO. */
SEGRT_API segrt_status segrt_image_save(const char *path, const segrt_tensor *pixels);

/* ---------------------------------------------------------------------
 * Volumes: any image segrt reads, as a region source (read by boxes, so
 * that a volume larger than memory is read by parts), with its geometry;
 * DICOM series chosen and listed; NIfTI written with a geometry.
 *
 * What a box costs: NIfTI .nii and NPY are mapped (any box is cheap);
 * TIFF decodes the strips or tiles the box touches; PNG, JPEG and
 * .nii.gz decode forward (a box starting at or below the last one's first
 * row costs only new rows; one above it restarts); DICOM decodes the
 * slices the box touches, keeping the last ones (64 MiB).
 * ------------------------------------------------------------------- */

typedef struct segrt_volume segrt_volume;

/* Opens path: a file of any format segrt reads, or a folder holding a
 * DICOM series (found recursively; files that are not DICOM images are
 * skipped). series_uid chooses a series where the files hold several
 * (NULL: there must be one). Only headers are read.
 * Errors: as segrt_image_probe's; INVALID_ARGUMENT when several series
 * are found and none is chosen, or series_uid names none, the message
 * listing each series (UID, modality, slices, description). */
SEGRT_API segrt_status segrt_volume_open(const char *path, const char *series_uid, segrt_volume **out);

/* A DICOM series from n files (each a DICOM image), as segrt_volume_open
 * takes a folder. */
SEGRT_API segrt_status segrt_volume_open_files(const char *const *paths, size_t n, const char *series_uid,
                                               segrt_volume **out);

/* As segrt_volume_open; with allow_uneven 1, a DICOM series with missing
 * slices or uneven spacing is resampled to even spacing along the slice
 * normal instead of refused: the step is the median step, the grid runs
 * from the first slice to the last, and each grid slice interpolates
 * linearly (by position) between the two slices around it, as float32
 * (float64 for 32-bit samples); segrt_volume_notice says what was done.
 * Mixed orientations or sizes, two slices at one position and gantry
 * tilt are still refused. Other formats ignore allow_uneven. */
SEGRT_API segrt_status segrt_volume_open_with(const char *path, const char *series_uid, int32_t allow_uneven,
                                              segrt_volume **out);

/* A line saying what opening v did on its own (a series resampled to even
 * spacing, from how many slices to how many), or NULL; owned by v. */
SEGRT_API const char *segrt_volume_notice(const segrt_volume *v);

/* What the volume holds: dims, channels, dtype, geometry (as
 * segrt_image_probe's). */
SEGRT_API segrt_status segrt_volume_info(const segrt_volume *v, segrt_image_info *out);

/* Reads the box start[0..2] + size[0..2] (depth, height, width) into dst
 * (bytes long, at least channels x the box's voxels x the dtype's size),
 * planar: channel, then depth, height, width, in info.dtype. Errors:
 * INVALID_ARGUMENT (a box outside the volume, dst too small, NULL), and
 * the files' own (a file that changed or broke since the open). One
 * thread at a time per volume. */
SEGRT_API segrt_status segrt_volume_read(segrt_volume *v, const int64_t start[3], const int64_t size[3], void *dst,
                                         size_t bytes);

SEGRT_API void segrt_volume_close(segrt_volume *v);

/* One DICOM series among files. */
typedef struct segrt_dicom_series {
    char uid[72];
    char modality[72];
    char description[72];
    int64_t slices; /* images (frames of multi-frame files counted) */
    int32_t rows, columns;
} segrt_dicom_series;

/* The series in a folder (paths[0], n 1) or among n files, in order of
 * first appearance (files sorted by name); *out (count entries) is the
 * caller's, freed with segrt_dicom_series_free. Files that are not DICOM
 * images are skipped (in a list too). Errors: INVALID_MODEL (no DICOM
 * image; a file with DICOM's preamble that cannot be parsed), IO,
 * UNSUPPORTED (built without DICOM support), INVALID_ARGUMENT. */
SEGRT_API segrt_status segrt_dicom_series_list(const char *const *paths, size_t n, segrt_dicom_series **out,
                                               size_t *count);
SEGRT_API void segrt_dicom_series_free(segrt_dicom_series *list);

/* Writes a label map or image as NIfTI to path (.nii, or .nii.gz:
 * deflated), whole or not at all (an output as segrt_output's). t is host
 * memory, [depth, height, width] or [height, width] with any leading dims
 * of 1 (a window job's N=1 x 1 x D x H x W), of any dtype but float16 and
 * bfloat16 (bool as uint8). geometry (NULL: none) places it: spacing as
 * pixdim, the affine (LPS converted to RAS) as both sform and qform, with
 * the codes copied where the geometry came from a NIfTI file and 1
 * (scanner) otherwise; for a DICOM series that is the affine dcm2niix and
 * SimpleITK write. Errors: INVALID_ARGUMENT (NULL, another layout, a path
 * that does not end in .nii or .nii.gz), UNSUPPORTED (a dtype NIfTI lacks;
 * built without NIfTI support), IO. */
SEGRT_API segrt_status segrt_volume_save(const char *path, const segrt_tensor *t, const segrt_geometry *geometry);

/* Writes a label map over the DICOM series `source` as a DICOM
 * Segmentation to path (.dcm), whole or not at all: SegmentationType
 * BINARY, one segment per label value > 0 that occurs (numbered 1, 2, ...
 * in increasing value), labelled names[value] where value < n_names and
 * the name is not empty (names[0] is the background's, unused), else
 * "Segment VALUE"; a frame per segment and source slice it occurs in,
 * referencing that slice's SOP instance, at its position; study, patient
 * and frame of reference copied from the series; new series and instance
 * UIDs. labels: host memory, an integer dtype, [depth, height, width] of
 * source's voxels with any leading dims of 1. A series opened with
 * allow_uneven keeps its slices: each takes the labels of the grid slice
 * nearest to it. Errors: INVALID_ARGUMENT (NULL, source not a DICOM
 * series, labels of another shape or dtype, a value outside 0 to 65535,
 * no value above 0: a SEG holds at least one segment), UNSUPPORTED (built
 * without DICOM support), IO. */
SEGRT_API segrt_status segrt_dicom_seg_save(const char *path, const segrt_tensor *labels, const segrt_volume *source,
                                            const char *const *names, size_t n_names);

/* ---------------------------------------------------------------------
 * Comparing two arrays: what `segrt compare` prints
 *
 * Both tensors are in host memory and may have any dtype of segrt_dtype;
 * elements are read as double (bool as 0 or 1) and sums accumulate in
 * double, streamed in fixed-size chunks. Thread-safe.
 * ------------------------------------------------------------------- */

/* Elementwise error of A (under test) against B (the reference). A
 * position NaN in both counts as an exact match, as do equal infinities;
 * a position NaN in only one is a NaN mismatch, and any mismatch makes
 * max_abs, mae, rel_l2 and psnr_db NaN so that every threshold on them
 * fails. */
typedef struct segrt_compare_stats {
    int64_t count;          /* elements compared */
    int64_t nan_mismatches; /* positions NaN in one tensor but not the other */
    double max_abs;         /* max |A - B| */
    double mae;             /* sum |A - B| / count; 0 for no elements */
    double mse;             /* sum (A - B)^2 / count; 0 for no elements */
    double rel_l2;          /* ||A - B||2 / ||B||2; 0 when both are all zero, inf when only B is */
    double range;           /* max(B) - min(B) over B's finite elements; 0 when there are none */
    double psnr_db;         /* 10 log10(range^2 / mse); +inf when mse is 0 */
} segrt_compare_stats;

/* Errors: SHAPE (dims differ: the message gives both), INVALID_ARGUMENT
 * (NULL, device memory, a dtype segrt lacks). */
SEGRT_API segrt_status segrt_compare(const segrt_tensor *a, const segrt_tensor *b, segrt_compare_stats *out);

/* Agreement of the label maps argmax(A) and argmax(B) over a class axis
 * (numpy's argmax: the first maximum wins; a NaN counts as the maximum). */
typedef struct segrt_class_stats {
    int32_t axis;            /* the class axis, normalized to 0..rank-1 */
    int64_t n_classes;       /* dims[axis] */
    int64_t positions;       /* label-map positions: count / n_classes */
    int64_t agree;           /* positions whose labels agree */
    double argmax_agreement; /* agree / positions; NaN when there are no positions */
    /* Per class c, arrays of n_classes entries owned by the struct:
     * dice[c] = 2 inter[c] / (count_a[c] + count_b[c]), NaN where c occurs
     * in neither map; count_a[c], count_b[c]: positions labelled c. */
    double *dice;
    int64_t *count_a, *count_b, *inter;
    int64_t n_present; /* classes that occur in either map */
    double mean_dice;  /* mean of dice over those classes; NaN when none */
} segrt_class_stats;

/* axis may be negative (counting from the end). On success the arrays of
 * *out belong to the caller: release them with segrt_class_stats_free.
 * Errors: SHAPE (dims differ), INVALID_ARGUMENT (NULL, device memory, axis
 * outside -rank..rank-1, a class axis of size 0, a dtype segrt lacks),
 * OUT_OF_MEMORY. */
SEGRT_API segrt_status segrt_compare_classes(const segrt_tensor *a, const segrt_tensor *b, int32_t axis,
                                             segrt_class_stats *out);

/* Frees the arrays of s and sets them to NULL; NULL and a zeroed s are
 * no-ops. */
SEGRT_API void segrt_class_stats_free(segrt_class_stats *s);

/* ---------------------------------------------------------------------
 * Profiling a context: where each step of a run's plan spent its time
 * ------------------------------------------------------------------- */

/* Starts (on != 0) or stops timing each step of the context's runs;
 * starting clears what was gathered. Runs are slower while it is on (a
 * CUDA context synchronizes after each step). Same thread rules as the
 * context. Errors: INVALID_ARGUMENT (NULL). */
SEGRT_API segrt_status segrt_context_profile(segrt_context *ctx, int on);

/* Writes the report of the plan that served the context's last run, its
 * steps slowest first, as text to f. Errors: INVALID_ARGUMENT (NULL). */
SEGRT_API segrt_status segrt_context_profile_print(const segrt_context *ctx, FILE *f);

/* The same report into buf (cap bytes, NUL-terminated, cut short where it
 * does not fit; buf may be NULL when cap is 0); *needed (may be NULL)
 * receives its whole length without the NUL, as snprintf counts, so a
 * caller can ask with cap 0 and call again. Errors: INVALID_ARGUMENT
 * (NULL ctx, NULL buf with cap > 0), OUT_OF_MEMORY. */
SEGRT_API segrt_status segrt_context_profile_text(const segrt_context *ctx, char *buf, size_t cap, size_t *needed);

/* ---------------------------------------------------------------------
 * Preprocessing a medical volume for a network, and its result back into
 * the volume's own grid (a window job over a NIfTI file or a DICOM series).
 *
 * Forward, in this order, on the device where the models run on one
 * (else on the host, the same numbers within float rounding):
 *   1. transpose: array axes (depth, height, width) taken in the order
 *      `transpose` gives (nnU-Net's transpose_forward);
 *   2. reorientation to `orientation` (MONAI's Orientationd): axes
 *      permuted and flipped, no interpolation;
 *   3. crop to the foreground's bounding box (nnU-Net's crop_to_nonzero:
 *      voxels non-zero in any channel; MONAI's CropForeground: voxels
 *      greater than crop_threshold in any channel), grown by crop_margin
 *      and kept inside the volume;
 *   4. intensities (per channel) where intensity_first (nnU-Net);
 *   5. resampling to `spacing` (the grid's extent kept, the shape
 *      rounded as nnU-Net and MONAI round it);
 *   6. intensities otherwise (MONAI: ScaleIntensityRange after Spacing);
 *   7. the networks' axes: depth, height, width as segrt, SimpleITK and
 *      nnU-Net lay a volume out, or width, height, depth (`axes` WHD) as
 *      nibabel and MONAI index it (a MONAI network is trained on arrays
 *      indexed i, j, k, and is not the same network on their transpose).
 *      The window's roi and the scores follow the networks' axes.
 * Back: the networks' class scores (in the networks' axes, step 7 undone
 * first) (logits, or probabilities where
 * result_probs) resampled to the grid before step 5 (result_interp
 * LINEAR), then argmax; or the labels by nearest neighbour (NEAREST);
 * then put back into the uncropped volume (background 0), and steps 2
 * and 1 undone, so the labels lie voxel for voxel on the input.
 *
 * Index axes i, j, k are width, height, depth (segrt_geometry's): the
 * orientation string names the way i, j and k point, in that order, as
 * nibabel and MONAI name a NIfTI array's axes ("RAS": i increases towards
 * the patient's right, j anterior, k superior; "LPS": DICOM's own).
 * Spacings are in array order (depth, height, width), as segrt_geometry's.
 * ------------------------------------------------------------------- */

#define SEGRT_PREPROCESS_MAX_CHANNELS 8

typedef enum segrt_intensity_kind {
    SEGRT_INTENSITY_NONE = 0,
    SEGRT_INTENSITY_CT,        /* clip to [lo, hi], then (x - mean) / std: nnU-Net's CTNormalization */
    SEGRT_INTENSITY_ZSCORE,    /* (x - mean) / max(std, 1e-8) of this volume (nnU-Net's ZScoreNormalization) */
    SEGRT_INTENSITY_RANGE,     /* MONAI's ScaleIntensityRange: (x - a_min) / (a_max - a_min) * (b_max - b_min)
                                * + b_min, then clipped to [b_min, b_max] where clip */
    SEGRT_INTENSITY_RESCALE01  /* (x - min) / (max - min) of this volume (nnU-Net's RescaleTo01Normalization) */
} segrt_intensity_kind;

typedef struct segrt_intensity {
    segrt_intensity_kind kind;
    double lo, hi, mean, std;          /* CT: the dataset's 0.5 and 99.5 percentiles, mean and std */
    double a_min, a_max, b_min, b_max; /* RANGE */
    int32_t clip;                      /* RANGE */
    int32_t masked; /* ZSCORE: statistics over the foreground of step 3, the background set to 0
                     * (nnU-Net's use_mask_for_norm) */
} segrt_intensity;

typedef enum segrt_interp {
    SEGRT_INTERP_NEAREST = 0,
    SEGRT_INTERP_LINEAR, /* trilinear (MONAI's "bilinear"; nnU-Net's order 1) */
    SEGRT_INTERP_CUBIC   /* third-order spline (nnU-Net's order 3, as skimage's resize) */
} segrt_interp;

/* Where a resampled grid's voxels lie. */
typedef enum segrt_resample_grid {
    /* nnU-Net's (skimage's resize): the volume's extent kept, shape
     * round(n * spacing / new spacing), voxel o of the new grid centred at
     * (o + 0.5) * n / n' - 0.5 of the old. */
    SEGRT_RESAMPLE_NNUNET = 0,
    /* MONAI's Spacing: the first voxel's centre kept, shape and step as
     * MONAI computes them (docs/preprocess.md). */
    SEGRT_RESAMPLE_MONAI
} segrt_resample_grid;

typedef enum segrt_crop_kind {
    SEGRT_CROP_NONE = 0,
    SEGRT_CROP_NONZERO,  /* nnU-Net: non-zero in any channel */
    SEGRT_CROP_THRESHOLD /* MONAI's CropForeground: > crop_threshold in any channel */
} segrt_crop_kind;

/* The order of the networks' spatial axes (step 7 above). */
typedef enum segrt_network_axes {
    SEGRT_AXES_DHW = 0, /* depth, height, width: segrt's, SimpleITK's and nnU-Net's arrays */
    SEGRT_AXES_WHD      /* width, height, depth: index order i, j, k, as nibabel and MONAI index a volume */
} segrt_network_axes;

typedef struct segrt_preprocess {
    int32_t transpose[3]; /* {0, 1, 2}: none */
    char orientation[4];  /* "RAS", "LPS", "PLI", ...; "" keeps the stored orientation */
    segrt_crop_kind crop;
    double crop_threshold;
    int64_t crop_margin[3]; /* voxels, array order */
    /* 0: no intensity scheme; 1: intensity[0] for every channel; n: one per channel. */
    int32_t n_intensity;
    segrt_intensity intensity[SEGRT_PREPROCESS_MAX_CHANNELS];
    int32_t intensity_first;  /* before resampling (nnU-Net) rather than after (MONAI) */
    double spacing[3];        /* the model's, mm, array order after transposing; all 0: no resampling */
    segrt_resample_grid grid;
    segrt_interp image_interp;
    segrt_interp result_interp;
    int32_t result_probs;     /* LINEAR: resample probabilities (MONAI's Invertd after softmax), not logits */
    /* nnU-Net's anisotropic rule: where the largest spacing is more than
     * anisotropy times the smallest (of the volume's, else the model's),
     * that axis is resampled on its own with the *_interp_z orders.
     * anisotropy 0: never. */
    double anisotropy;
    segrt_interp image_interp_z, result_interp_z;
    const char *source; /* what set these, for messages ("the model's metadata", a plans file); may be NULL */
    segrt_network_axes axes;
} segrt_preprocess;

/* Nothing done: no transpose, orientation, crop, intensity or resampling;
 * LINEAR interpolation (NEAREST along a separate axis, anisotropy 0); the
 * networks' axes DHW. */
SEGRT_API void segrt_preprocess_init(segrt_preprocess *p);

/* The preprocessing the model's metadata declares (keys segrt.preprocess.*,
 * docs/preprocess.md); *declared (may be NULL) is 1 where it declares any,
 * else p is segrt_preprocess_init's. Errors: INVALID_MODEL naming the key
 * and the value that cannot be read, INVALID_ARGUMENT (NULL). */
SEGRT_API segrt_status segrt_preprocess_from_model(const segrt_model *model, segrt_preprocess *p, int32_t *declared);

/* Sets one setting of p from its text, as the metadata key
 * segrt.preprocess.KEY and `segrt run`'s options write it
 * (docs/preprocess.md): KEY is orientation, spacing, transpose, crop,
 * crop_margin, intensity, intensity_first, image_interp, result_interp,
 * image_interp_z, result_interp_z, result_probs, grid, anisotropy or axes.
 * Errors: INVALID_ARGUMENT naming the key and the value (an unknown key,
 * a malformed or out-of-range value; p is then unchanged). */
SEGRT_API segrt_status segrt_preprocess_set(segrt_preprocess *p, const char *key, const char *value);

/* ---------------------------------------------------------------------
 * A sliding-window job from files: an image (.npy, PNG, JPEG, TIFF) in,
 * the result (.npy, or a label map as PNG/TIFF) and an overlay picture
 * out, the engines built for the window, host memory checked before the
 * image is read, and the device or host path chosen as segrt_window_run
 * chooses. (Volume and slide jobs will sit beside it.)
 *
 * Image files are normalised as the model's metadata says, unless
 * raw_input: x * segrt.input.scale, minus segrt.input.mean, divided by
 * segrt.input.std (per channel, or one value for all). An NPY image is
 * taken as the model's input already (float32 N x C x spatial).
 *
 * On the device path (CUDA engines, host_path 0) a float32 NPY and a
 * TIFF of one level with 8- or 16-bit samples stream: read by rows as the
 * windows reach them, never held whole, and not counted in the host
 * memory but for the strip or tile read at once. Other inputs, the host
 * path and a job with an overlay read the image whole first.
 * ------------------------------------------------------------------- */

/* Builds the engine of one ensemble member for the window batch: input
 * `input` bound to rank/dims. Returns a status with the message set (by
 * segrt's own calls). */
typedef segrt_status (*segrt_engine_builder)(void *user, const segrt_model *model, const char *input, int32_t rank,
                                             const int64_t *dims, segrt_engine **out);

typedef struct segrt_window_job_options {
    int32_t spatial_dims; /* 1 to 3 */
    int64_t roi[3];       /* the window; <= 0: the whole axis */
    double overlap[3];    /* per spatial dim, each in [0, 1) */
    int32_t batch;        /* windows per run of the networks (>= 1) */
    int32_t auto_batch;   /* CUDA engines: the largest batch that fits the device's free memory
                           * (or max_memory), halved while a run runs out of it */
    segrt_window_blend blend;
    double sigma_scale; /* Gaussian blend */
    segrt_window_pad pad;
    float pad_value;
    segrt_window_grid grid;
    segrt_window_output output;
    segrt_window_activation activation;
    float threshold;                  /* sigmoid labels */
    uint32_t mirror_axes;             /* nnU-Net's mirroring: bit d flips spatial axis d */
    uint64_t max_memory;              /* as segrt_window_options_set_max_memory */
    uint64_t max_host_memory;         /* as segrt_window_options_set_max_host_memory */
    const char *max_host_memory_name; /* how messages name that limit (NULL: "max_host_memory") */
    int32_t whole_accumulators;       /* device path: the whole image's accumulators, not a ring of rows */
    int32_t host_path;                /* gather and blend on the host even with CUDA engines */
    int32_t raw_input;                /* image files are not normalised */
    segrt_engine_builder build;       /* NULL: segrt_engine_build with default (CPU) options */
    void *build_user;
    /* Once with done 0 as the windows start (the engines built and the
     * image read), then after each batch of windows: windows done and the
     * total (NULL: none). */
    void (*progress)(void *user, int64_t done, int64_t total);
    void *progress_user;
    /* A line about what the job did on its own, e.g. a smaller batch after
     * running out of device memory (NULL: none). */
    void (*notice)(void *user, const char *line);
    void *notice_user;
    /* A DICOM folder holding several series: the one to read, by its
     * SeriesInstanceUID (NULL: the folder must hold one). */
    const char *series_uid;
    /* A volume input (NIfTI, DICOM): how it is preprocessed and how the
     * result returns to its grid (NULL: as the first model's metadata
     * declares, segrt_preprocess_from_model; none where it declares none).
     * Other inputs refuse one that does anything. */
    const segrt_preprocess *preprocess;
    /* A DICOM series with missing slices or uneven spacing: resampled to
     * even spacing (as segrt_volume_open_with) with a notice, not refused. */
    int32_t allow_uneven;
    /* The device path's accumulators, as segrt_window_options_set_accumulator
     * (SEGRT_DTYPE_UNDEFINED, what init leaves: float32). */
    segrt_dtype accumulator;
    /* A whole-slide image (a file OpenSlide reads as a vendor's slide, or
     * a tiled TIFF with reduced levels): the microns per pixel the windows
     * run at (0: the first model's metadata segrt.mpp, else the slide's
     * level 0). The coarsest level no coarser than that is read, shrunk by
     * area where no level matches within 1 %; the labels are written at
     * that resolution as a pyramidal tiled TIFF (the output must be .tif),
     * streamed row by row on the device path, so that host memory stays
     * bounded whatever the slide's size. */
    double mpp;
    /* Reader threads decoding the slide (0: one per core, at most 16). */
    int32_t slide_threads;
    /* Only windows that touch tissue run (SEGRT_TISSUE_OTSU, what init
     * leaves), or all of them (SEGRT_TISSUE_NONE); pixels no window
     * covers are label 0. */
    int32_t tissue;
    /* Written beside a slide's labels where given (NULL: not): the tissue
     * mask (PNG), the slide's thumbnail with the labels tinted over it
     * (PNG), the label regions as polygons QuPath imports (GeoJSON, in
     * level-0 pixels). Each written whole, atomically. */
    const char *tissue_mask_path;
    const char *thumbnail_path;
    const char *geojson_path;
} segrt_window_job_options;

/* segrt_window_job_options.tissue. */
enum { SEGRT_TISSUE_OTSU = 0, SEGRT_TISSUE_NONE = 1 };

/* MONAI's defaults for spatial_dims dims: the window the whole axis,
 * overlap 0.25, one window a run, constant blend (sigma scale 0.125),
 * constant padding with 0, MONAI's grid, logits; everything else 0/NULL. */
SEGRT_API void segrt_window_job_options_init(segrt_window_job_options *o, int32_t spatial_dims);

/* The preprocessing and window options of an nnU-Net v2 model folder's
 * configuration, as nnU-Net's predictor runs it: DIR/plans.json's
 * configurations[config] (its inherits_from chain followed) and
 * DIR/dataset.json. p is filled from segrt_preprocess_init's (transpose,
 * spacing, crop to non-zero, the normalisation schemes per channel with
 * the foreground intensity properties, intensities before resampling,
 * interpolation orders and the separate-z rule, nnU-Net's grid); o (may
 * be NULL) from segrt_window_job_options_init's for 3 dims: roi =
 * patch_size, overlap 0.5, nnU-Net's Gaussian (SEGRT_WINDOW_BLEND_GAUSSIAN_NNUNET), sigma scale 1/8, nnU-Net's
 * window grid, mirroring along every axis, softmax labels. A caller that
 * wants other window options sets them afterwards. p->source is a static
 * string. Errors name the file and the key: IO (a file missing or
 * unreadable), INVALID_MODEL (malformed JSON or a value of the wrong kind),
 * UNSUPPORTED (a 2-D configuration, a normalisation scheme, resampling
 * function or image reader segrt lacks, region-based labels),
 * INVALID_ARGUMENT (NULL; config not among the configurations, which the
 * message lists). */
SEGRT_API segrt_status segrt_preprocess_from_nnunet(const char *dir, const char *config, segrt_preprocess *p,
                                                    segrt_window_job_options *o);

/* What segrt_window_job_run will read: the image as the job takes it
 * (float32 N x C x spatial; an image file as 1 x C x [depth x] height x
 * width with alpha dropped; a NIfTI or DICOM volume as 1 x C x [depth x]
 * height x width of its values), from its header alone, data NULL; and the
 * host bytes the read holds besides that tensor (*extra_bytes may be
 * NULL). Errors as segrt_array_probe's and segrt_image_probe's. */
SEGRT_API segrt_status segrt_window_job_probe(const char *image_path, segrt_tensor *image, uint64_t *extra_bytes);
/* As segrt_window_job_probe, with the job's options (o->series_uid picks
 * a DICOM series; o may be NULL). */
SEGRT_API segrt_status segrt_window_job_probe_with(const segrt_window_job_options *o, const char *image_path,
                                                   segrt_tensor *image, uint64_t *extra_bytes);

/* Where a job's time went, seconds on the calling thread, in the order
 * the job spends them. */
typedef struct segrt_window_job_seconds {
    double read;    /* reading the image: a volume's files, decoded (on a thread of its own while the engines
                     * are built, overlapping build; a folder's case read by its reader: 0) */
    double build;   /* building or loading the engines (0 where a folder's earlier case left them fitting) */
    double prep;    /* a volume preprocessed into the networks' grid (segrt_preprocess) */
    double windows; /* the windows: the report's seconds */
    double back;    /* the networks' scores back into the volume's grid as labels */
    double write;   /* writing the result and the overlay */
} segrt_window_job_seconds;

/* What a job did. */
typedef struct segrt_window_job_report {
    segrt_tensor image;       /* the image's dtype, rank and dims (data NULL) */
    segrt_tensor result;      /* the result's dtype, rank and dims (data NULL) */
    int64_t windows;          /* windows over all images */
    int32_t batch;            /* windows per run, as finally run */
    double seconds;           /* the windows' run, from the first gather to the result */
    segrt_window_stats stats; /* on_device, passes, memory */
    segrt_window_times times; /* device path: where the time went */
    int32_t write_failed;     /* 1: the job failed writing into an output (a full disk, say), after the
                               * windows ran and every check passed */
    int32_t strips;           /* device path: strips of axis 1 the windows went in under max_memory
                               * (1: whole planes; see segrt_window_options_set_max_memory) */
    uint64_t seam_host_bytes; /* pinned host memory that held the sums neighbouring strips share */
    segrt_window_job_seconds parts; /* where the time went */
} segrt_window_job_report;

/* Runs the job: models (n_models >= 1, an ensemble averaged per window)
 * each of one input taking rank-(spatial_dims + 2) float32 images, over
 * the image at image_path; writes the result into `result` and, when
 * overlay is not NULL, the labels drawn over the image into `overlay`
 * (both opened by the caller, who commits or discards them: this writes,
 * never commits). model_paths (may be NULL) name the models in messages.
 * report (may be NULL) is zeroed, then filled as far as the job got, on
 * failure too (write_failed tells a failed write from a refused job).
 * The result's kind follows the destination: .npy takes any output; .png
 * and .tif take a label map of one image (one channel); .nii and .nii.gz
 * a volume's result in its grid; .dcm a label map over a DICOM series, as
 * a DICOM SEG (segrt_dicom_seg_save's, segments named by the first
 * model's segrt.classes metadata: "background,liver,..."), refused before
 * anything runs for another input or output kind. The overlay wants a 2-D
 * image file and labels.
 * Errors: INVALID_ARGUMENT (options, an image or models that do not fit
 * the window or each other, a result the destination cannot hold, host
 * memory past max_host_memory: the message names the need and its parts),
 * OUT_OF_MEMORY (the machine's memory, or the device's), and the errors of
 * the files, the builder and the engines. Models and options are only
 * read; one job per thread at a time for the same outputs. */
SEGRT_API segrt_status segrt_window_job_run(const segrt_window_job_options *o, segrt_model *const *models,
                                            const char *const *model_paths, size_t n_models, const char *image_path,
                                            segrt_output *result, segrt_output *overlay,
                                            segrt_window_job_report *report);

/* ---------------------------------------------------------------------
 * A folder of cases: the window job over every case of IN_DIR, one
 * result per case in OUT_DIR (`segrt run MODEL -i IN_DIR -o OUT_DIR`).
 *
 * Cases, in byte order of their names (the same on every machine):
 *   - NIfTI files named as nnU-Net names them, CASE_XXXX.nii.gz or
 *     CASE_XXXX.nii (XXXX: four digits, the channel): the channels of
 *     case CASE, stacked in channel order. The numbers must run from 0000
 *     without a gap, and the files share dims and geometry; otherwise the
 *     case fails, naming the file.
 *   - other .nii/.nii.gz files: a case of one channel named as the file
 *     without its extension;
 *   - subfolders that hold a DICOM series (found recursively in them):
 *     a case named as the subfolder; a subfolder that holds several
 *     series takes the options' series_uid, else fails listing them.
 *     Subfolders without DICOM images and other files are passed over.
 * A name claimed twice (CASE.nii.gz beside CASE_0000.nii.gz, or a folder
 * CASE) fails both claims' case. Each case's result is
 * OUT_DIR/CASE.nii.gz (or .nii), written whole or not at all as every
 * output (segrt_output), in the case's own grid, the window job's result
 * for that volume byte for byte.
 *
 * The engines are built once, for the first case, and again only when a
 * case needs other window input dims (a window along a whole axis of
 * another size, another channel count). With prefetch, a thread reads
 * case i+1 into host memory while case i runs (one case ahead at most);
 * the host-memory check of case i counts case i+1's volume, and where
 * the two do not fit together case i+1 is read after case i. A case that
 * fails (a file that cannot be read, a mismatched channel, a result that
 * cannot be written) is reported with its one-line message and the
 * others still run; options, models and engines that cannot be built
 * stop the job.
 * ------------------------------------------------------------------- */

/* What a case callback is told. */
typedef enum segrt_case_state {
    SEGRT_CASE_STARTED = 0, /* read; its windows start (progress within it: the options' progress) */
    SEGRT_CASE_DONE = 1,    /* its result written */
    SEGRT_CASE_SKIPPED = 2, /* skip_existing, and its result existed */
    SEGRT_CASE_FAILED = 3   /* error says why; nothing was written for it */
} segrt_case_state;

/* One case, as a callback sees it and summary.json records it. Pointers
 * are valid during the callback only. */
typedef struct segrt_case_info {
    const char *name;
    size_t index, count;       /* this case's place among all: 0 .. count - 1 */
    const char *const *inputs; /* its files (channels in order) or its DICOM folder */
    size_t n_inputs;
    const char *output; /* OUT_DIR/CASE.nii.gz */
    segrt_case_state state;
    const char *error;    /* FAILED: the one-line message; else "" */
    int32_t channels;     /* 0 until the case is read */
    int64_t dims[3];      /* depth, height, width */
    double spacing[3];    /* mm, depth, height, width */
    double seconds_read;  /* reading the files (on the prefetch thread, in parallel with another case) */
    double seconds_wait;  /* waiting for the read to finish (0 where it was read ahead in time) */
    double seconds_run;   /* the engines (built where they had to be) and the windows */
    double seconds_write; /* writing and committing the result */
    double seconds_total; /* from the case's turn to its result, waiting for its read included */
} segrt_case_info;

typedef struct segrt_cases_options {
    const char *in_dir;    /* the cases */
    const char *out_dir;   /* their results; it must exist */
    const char *extension; /* ".nii.gz" (NULL) or ".nii" */
    int32_t skip_existing; /* a case whose result exists is skipped (resume a job) */
    int32_t no_prefetch;   /* read each case when its turn comes */
    /* summary.json: NULL writes OUT_DIR/summary.json, "" none; rewritten
     * (whole, as every output) after each case and at the end. */
    const char *summary_path;
    /* Called on the calling thread as each case starts and ends (NULL: none). */
    void (*on_case)(void *user, const segrt_case_info *info);
    void *on_case_user;
} segrt_cases_options;

/* init: every field 0/NULL (.nii.gz, prefetch, OUT_DIR/summary.json). */
SEGRT_API void segrt_cases_options_init(segrt_cases_options *c);

typedef struct segrt_cases_report {
    size_t cases, done, skipped, failed;
    char **failed_names; /* `failed` names, in order; freed by segrt_cases_report_free */
    double seconds;      /* the whole job */
} segrt_cases_report;

/* Frees what a report holds (NULL is a no-op) and zeroes it. */
SEGRT_API void segrt_cases_report_free(segrt_cases_report *r);

/* Runs the window job o (its options apply to each case; o->progress
 * reports the windows of the case that runs) with the models over every
 * case of c->in_dir. report (may be NULL; free it with
 * segrt_cases_report_free) is filled on every return. Returns SEGRT_OK
 * when every case was done or skipped; SEGRT_ERROR_CASES_FAILED when
 * some failed (the others ran; the message names the failed ones);
 * other errors stop the job: INVALID_ARGUMENT (options, a folder that
 * cannot be listed or written, no cases), the builder's and the
 * engines' errors, IO writing summary.json. o->series_uid applies to
 * every DICOM case. Whole slides in the folder are cases (their results
 * NAME.tif; o's thumbnail, tissue mask and GeoJSON paths must be NULL). One job per thread; models and options are only
 * read. */
SEGRT_API segrt_status segrt_cases_run(const segrt_window_job_options *o, segrt_model *const *models,
                                       const char *const *model_paths, size_t n_models, const segrt_cases_options *c,
                                       segrt_cases_report *report);

#ifdef __cplusplus
}
#endif

#endif /* SEGRT_H */
