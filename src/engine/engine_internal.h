/* Engines and contexts, shared by the files of src/engine/. */
#ifndef SG_ENGINE_INTERNAL_H
#define SG_ENGINE_INTERNAL_H

#include "backend/cpu/cpu_backend.h"
#include "engine/api_internal.h"
#include "engine/engine_cuda.h"

struct segrt_engine {
    sg_graph *g;             /* CPU: optimized for the build options' shapes; CUDA: with fixed shapes
                                bound and ranged inputs symbolic. Never modified. */
    int32_t threads;
    segrt_device_kind device;
    sg_cpu_plan *plan;       /* CPU, when g's shapes are all known */
    sg_cuda_engine *cuda;    /* CUDA */
    uint64_t model_hash;     /* CUDA: the source model's content hash, for plan keys */
    int64_t interpret_max_bytes; /* the interpreter path's largest intermediate (0: no limit) */
};

struct segrt_context {
    const segrt_engine *engine;
    sg_cpu_exec *exec;       /* runs engine->plan */
    sg_graph *own_g;         /* a specialization for other input dims, */
    sg_cpu_plan *own_plan;   /* its plan */
    sg_cpu_exec *own_exec;
    sg_cpu_exec *last;       /* the executor of the last run */
    struct sg_cuda_exec *cuda; /* CUDA engines: the device half */
    bool profiling;
};

/* A 64-bit hash of everything that defines g's computation: values
 * (names, dtypes, shapes, constant bytes), nodes (ops, names, wiring,
 * attributes) and the graph's inputs and outputs. */
uint64_t sg_graph_content_hash(const sg_graph *g);

/* A CUDA context's run over device tensors, enqueued without waiting
 * (sg_cuda_exec_enqueue: after the event `after`, recording `done`), for
 * pipelines that order their own stream around it. Checked as
 * segrt_context_run checks. sg_context_finish waits for the context's
 * runs and reports a kernel's error. */
struct CUevent_st;
sg_status sg_context_enqueue(segrt_context *ctx, size_t n_inputs, const segrt_tensor *inputs, size_t n_outputs,
                             segrt_tensor *outputs, struct CUevent_st *after, struct CUevent_st *done);
sg_status sg_context_finish(segrt_context *ctx);
/* Whether ctx's engine (CUDA) was built for a range of shapes that holds
 * these inputs' dims (sg_cuda_engine_ranged). */
bool sg_context_in_profile(const segrt_context *ctx, size_t n_inputs, const segrt_tensor *inputs);

/* The window operations of ctx's backend (backend_window.h), through
 * which the pipeline runs window jobs on its device; NULL when the
 * backend has none (the CPU, or a build without CUDA). */
struct sg_window_ops;
const struct sg_window_ops *sg_context_window_ops(const segrt_context *ctx);

/* Caps each intermediate tensor of the interpreter path (graphs whose
 * shapes depend on input values) at `bytes` (0: no limit): a larger one
 * fails the run with OUT_OF_MEMORY naming the node. For callers that run
 * untrusted models under a memory budget (the fuzz targets); set it before
 * the engine is shared. */
void sg_engine_set_interpret_limit(segrt_engine *e, int64_t bytes);

/* Builds an engine from a plan file's graph and seed (plan_file.c). */
sg_status sg_engine_from_plan(sg_graph *g, const segrt_build_options *opts, const sg_plan_seed *seed,
                              uint64_t model_hash, segrt_engine **out);

#endif
