/* The one backend interface (issue 37). A backend is a const struct of
 * function pointers filled with designated initializers; optional members
 * are NULL. The engine holds a backend, its plan and per-context state, and
 * never branches on which backend it has; the pipeline reaches a backend's
 * window kernels through `window` (backend_window.h).
 *
 * The life of an engine through this interface:
 *   build:   supports(node) for every node of the engine's graph, then
 *            plan_build(graph, options, NULL payload)
 *   save:    payload_save(plan) -> opaque bytes, after the graph, in a plan
 *            file keyed with identity() (engine/plan_file.c)
 *   load:    plan_build(graph, options, those bytes)
 *   run:     context_create(plan); per run context_select(inputs' dims),
 *            then context_run (host or device memory, synchronous) or
 *            context_enqueue + context_finish (device memory, on a stream)
 * A plan is immutable as far as its callers see (it may compile plans for
 * new input shapes under its own lock) and shared by threads; a context
 * serves one thread at a time. */
#ifndef SG_BACKEND_H
#define SG_BACKEND_H

#include "core/clock.h"
#include "graph/ir.h"
#include "graph/passes.h"

#include <stdio.h>

/* A backend's stream and event, opaque to the engine and the pipeline. The
 * CUDA backend's are cudaStream_t and cudaEvent_t, cast. Callers order their
 * own work around a backend's runs with events, never by draining. */
typedef struct sg_backend_stream sg_backend_stream;
typedef struct sg_backend_event sg_backend_event;

/* Inputs and outputs a run takes at most. */
#define SG_MAX_IO_BACKEND 64

/* A backend's compiled model and a context's share of it, opaque here. */
typedef struct sg_backend_plan sg_backend_plan;
typedef struct sg_backend_context sg_backend_context;

/* An input's shape: fixed (min = opt = max) or a profile range. */
typedef struct sg_shape_binding {
    char *name;
    int32_t rank;
    int64_t dims[SEGRT_MAX_RANK]; /* opt */
    int64_t min[SEGRT_MAX_RANK], max[SEGRT_MAX_RANK];
    bool ranged; /* some dim has min < max */
} sg_shape_binding;

/* The build options a backend sees, borrowed for the call (a plan copies
 * what it keeps). */
typedef struct sg_backend_options {
    int32_t device;  /* the device's index */
    int32_t threads; /* host threads of a run (0: every core) */
    segrt_precision precision;
    const char *fp32_ops; /* op types or node names kept in float32, or NULL */
    bool allow_cpu_fallback;
    size_t workspace; /* 0: the default */
    int32_t autotune; /* < 0: the default */
    uint32_t disabled_kernels; /* SG_KERNEL_BIT()s of kernel_switches.h the build may not use */
    int32_t target_cc;         /* compute capability to plan for (10 * major + minor); 0: the device's */
    const sg_shape_binding *shapes;
    int32_t n_shapes;
} sg_backend_options;

/* One line of a backend's identity in a plan's key, and what it means in
 * words for the message that says a plan was built elsewhere. */
typedef struct sg_backend_key {
    const char *key, *what;
} sg_backend_key;

/* The pipeline's device window kernels (backend_window.h) and volume
 * preprocessing (backend_volume.h). */
struct sg_window_ops;
struct sg_volume_ops;

typedef struct sg_backend {
    const char *name; /* "cpu", "cuda": a plan file's backend= */
    segrt_device_kind device;
    /* The backend reads and writes tensors in device memory. */
    bool device_memory;
    /* The backend compiles ranged inputs (profiles) itself, one plan per
     * shape: the engine's graph keeps them symbolic. Otherwise the engine
     * binds them at their opt dims. */
    bool profiles;

    /* Whether the backend can run node n of g with these options (CPU
     * fallback included where the options allow it). Asked for every node
     * before plan_build (for a backend with profiles, only when g's shapes
     * are all known: it asks at each specialization itself); false sets
     * *why, which the engine reports as UNSUPPORTED naming the node and
     * op. */
    bool (*supports)(const sg_graph *g, const sg_node *n, const sg_backend_options *o, const char **why);

    /* Compiles g (the engine's optimized graph, borrowed for the plan's
     * life). payload: NULL, or the bytes payload_save gave for this graph
     * and options (a plan file's), which the plan reuses instead of
     * searching again; a payload that does not parse fails with
     * INVALID_MODEL. A plan may hold several compiled plans, one per
     * input shape, compiled at build or on a run's first use of a shape. */
    sg_status (*plan_build)(const sg_graph *g, const sg_backend_options *o, const void *payload, size_t payload_bytes,
                            sg_backend_plan **out);
    void (*plan_free)(sg_backend_plan *p);
    /* Fills the numbers of segrt_engine_info (out is zeroed). */
    void (*plan_describe)(sg_backend_plan *p, segrt_engine_info *out);
    /* Optional: what the backend knows of its plans' build (the slowest
     * nodes; backend_seconds where it builds plans after plan_build). */
    void (*plan_report)(sg_backend_plan *p, segrt_build_report *out);
    /* Optional: whether every input is bound to a range of shapes that holds
     * these inputs' dims (a run at them is expected). NULL: never. */
    bool (*plan_in_profile)(const sg_backend_plan *p, size_t n_inputs, const segrt_tensor *inputs);

    /* Optional: the plan's bytes for a plan file, besides the graph and the
     * options (choices made, converted weights); *bytes is the caller's to
     * free. NULL: the graph and options are all a plan needs. */
    sg_status (*payload_save)(sg_backend_plan *p, void **bytes, size_t *n);
    /* Optional: the machine's part of a plan's key, "key=value\n" lines of
     * the keys in identity_keys, for the device; NULL: plans of this backend
     * load anywhere this segrt runs. */
    sg_status (*identity)(int32_t device, char *buf, size_t cap);
    const sg_backend_key *identity_keys; /* ends with {NULL, NULL} */

    sg_status (*context_create)(sg_backend_plan *p, sg_backend_context **out);
    void (*context_destroy)(sg_backend_context *c);
    /* Picks the compiled plan for these inputs' dims (checked by the engine:
     * counts, dtypes, ranks), compiling it now if need be; *g is its graph,
     * for the engine's checks of the output buffers. Or *interpret: the
     * graph specialized for these dims has shapes that depend on input
     * values, and the options allow the CPU interpreter; the caller
     * interprets it and frees it. The next run or enqueue runs the pick. */
    sg_status (*context_select)(sg_backend_context *c, size_t n_inputs, const segrt_tensor *inputs, const sg_graph **g,
                                sg_graph **interpret);
    /* Runs the pick on the caller's tensors (host, or device memory where
     * device_memory) in the graph's order; returns when the outputs are
     * written. */
    sg_status (*context_run)(sg_backend_context *c, const segrt_tensor *inputs, segrt_tensor *outputs);
    /* Optional: enqueues the pick on the context's stream, device memory in
     * and out, without waiting: the stream first waits for `after` (NULL:
     * none) and records `done` (NULL: none) when the outputs are written. A
     * kernel's error surfaces at context_finish or the next run. */
    sg_status (*context_enqueue)(sg_backend_context *c, const segrt_tensor *inputs, segrt_tensor *outputs,
                                 sg_backend_event *after, sg_backend_event *done);
    /* Optional: waits for everything enqueued; NULL: nothing is. */
    sg_status (*context_finish)(sg_backend_context *c);

    /* Optional: the device stream the context's runs and enqueues use (a
     * cudaStream_t), so that a caller can order its own work before them;
     * NULL: the backend has none. */
    void *(*context_stream)(const sg_backend_context *c);
    /* Optional (with context_stream): makes the context's stream wait for
     * the work queued so far on a stream of the caller's, without the host
     * waiting. */
    sg_status (*context_wait_stream)(sg_backend_context *c, void *stream);
    /* Per-step profiling: on clears what was gathered and times each step
     * of later runs; print writes the steps of the last run's plan, slowest
     * first. */
    sg_status (*profile)(sg_backend_context *c, bool on);
    void (*profile_print)(const sg_backend_context *c, FILE *f);

    /* The host evaluator of every op this backend knows, for constant
     * folding and the interpreter path (NULL: none). */
    sg_eval_lookup eval;

    /* The device window kernels of the pipeline, or NULL. */
    const struct sg_window_ops *window;
    /* The volume preprocessing operations of the pipeline, or NULL. */
    const struct sg_volume_ops *volume;
} sg_backend;

/* The backends of this build. */
extern const sg_backend sg_cpu_backend;
#ifdef SEGRT_HAVE_CUDA
extern const sg_backend sg_cuda_backend;
#endif

/* The backend for a device kind, or NULL where this build has none (CUDA
 * in a build without it). */
const sg_backend *sg_backend_for(segrt_device_kind kind);
/* The backend of this name (a plan file's), or NULL. */
const sg_backend *sg_backend_named(const char *name);
/* The host evaluator constant folding uses where no backend is chosen yet
 * (model-level optimization): the CPU backend's. */
sg_eval_lookup sg_backend_host_eval(void);

/* Of the CUDA code a libsegrt holds (list: comma-separated sm_XY, sm_XYa
 * and compute_XY, as CMake's SEGRT_CUDA_CODE), the one the CUDA runtime
 * runs on compute capability cc (10 * major + minor): *code_cc its
 * architecture, *code_a whether it is the sm_XYa form. false: none runs
 * there. */
bool sg_cuda_code_in(const char *list, int cc, int *code_cc, bool *code_a);

/* Build reports (segrt_engine_build_report), timed by sg_now_seconds
 * (core/clock.h): a node's build time into r's slowest list where it
 * belongs (kept slowest first, SEGRT_BUILD_REPORT_NODES long); and one
 * report's counts, seconds and slowest nodes added into another's. */
void sg_report_node(segrt_build_report *r, const char *node, const char *op, double seconds);
void sg_report_add(segrt_build_report *into, const segrt_build_report *r);

#endif
