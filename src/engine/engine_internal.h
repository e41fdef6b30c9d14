/* Engines and contexts, shared by the files of src/engine/.
 *
 * An engine is a backend (backend/backend.h), the graph it compiled and its
 * plan; a context is the backend's per-context state. Nothing here knows
 * which backend it holds. */
#ifndef SG_ENGINE_INTERNAL_H
#define SG_ENGINE_INTERNAL_H

#include "backend/backend.h"
#include "engine/api_internal.h"

struct segrt_engine {
    sg_graph *g; /* optimized for the build options' shapes (ranged inputs symbolic where the
                    backend compiles profiles itself). Never modified. */
    const sg_backend *backend;
    sg_backend_plan *plan;
    segrt_build_options *opts;   /* a copy of the options built with, for plan keys */
    uint64_t model_hash;         /* the source model's content hash, for plan keys */
    int64_t interpret_max_bytes; /* the interpreter path's largest intermediate (0: no limit) */
    double total_seconds;        /* the build or load, whole (segrt_engine_build_report) */
    double graph_seconds;        /* its graph passes */
    double backend_seconds;      /* its plan_build */
};

struct segrt_context {
    const segrt_engine *engine;
    sg_backend_context *bc;
};

/* A 64-bit hash of everything that defines g's computation: values
 * (names, dtypes, shapes, constant bytes), nodes (ops, names, wiring,
 * attributes) and the graph's inputs and outputs. */
uint64_t sg_graph_content_hash(const sg_graph *g);

/* The backend of ctx's engine. */
const sg_backend *sg_context_backend(const segrt_context *ctx);

/* A context's run over device tensors, enqueued without waiting (the
 * backend's context_enqueue: after the event `after`, recording `done`),
 * for pipelines that order their own stream around it. Checked as
 * segrt_context_run checks; UNSUPPORTED for a backend that cannot enqueue.
 * sg_context_finish waits for the context's runs and reports a kernel's
 * error (nothing to wait for on a backend that cannot enqueue). */
sg_status sg_context_enqueue(segrt_context *ctx, size_t n_inputs, const segrt_tensor *inputs, size_t n_outputs,
                             segrt_tensor *outputs, sg_backend_event *after, sg_backend_event *done);
sg_status sg_context_finish(segrt_context *ctx);
/* Whether ctx's engine was built for a range of shapes that holds these
 * inputs' dims (the backend's plan_in_profile). */
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

/* Builds an engine on backend b from a plan file's graph (taken, freed on
 * failure too), options and backend payload (plan_file.c). */
sg_status sg_engine_from_plan(const sg_backend *b, sg_graph *g, const segrt_build_options *opts, const void *payload,
                              size_t payload_bytes, uint64_t model_hash, segrt_engine **out);

#endif
