/* The CUDA backend as the engine sees it: plans compiled for one set of
 * input dims, a weight store shared by an engine's plans, and executors
 * (the device half of a context).
 *
 * A plan and the weight store are immutable once built (the store is
 * filled under a lock while plans are built) and shared by threads; an
 * executor owns a stream, cuDNN and cuBLASLt handles, the activation arena,
 * workspaces and pinned staging buffers, and serves one thread at a time.
 * Nothing is allocated while a plan runs. */
#ifndef SG_BACKEND_CUDA_H
#define SG_BACKEND_CUDA_H

#include "backend/backend_window.h"
#include "graph/ir.h"

#include <stdio.h>

typedef struct sg_cuda_options {
    int32_t device;
    segrt_precision precision;
    bool allow_cpu_fallback;   /* run nodes the GPU cannot on the CPU instead of failing */
    size_t workspace_limit;    /* largest cuDNN/cuBLASLt workspace one step may use */
    const char *fp32_ops;      /* comma-separated op types or node names kept in float32, or NULL */
    int32_t autotune;          /* cuDNN configurations timed per convolution; 0 or 1: heuristics' first */
    uint32_t disabled_kernels; /* kernels and fusions not used: SG_KERNEL_BIT of backend/kernel_switches.h */
    int32_t target_cc;         /* compute capability to plan for (10 * major + minor); 0: the device's */
} sg_cuda_options;

typedef struct sg_cuda_weights sg_cuda_weights;
typedef struct sg_cuda_plan sg_cuda_plan;
typedef struct sg_cuda_exec sg_cuda_exec;

/* The device constants of an engine: uploaded once, converted to the
 * dtype and layout each step wants, shared by every plan of the engine. */
sg_status sg_cuda_weights_new(int32_t device, sg_cuda_weights **out);
void sg_cuda_weights_free(sg_cuda_weights *w);
size_t sg_cuda_weights_bytes(const sg_cuda_weights *w);

/* Compiles g (every shape known) for the device. `given` choices (from a
 * plan file, may be NULL) are used instead of searching where present.
 * Fails with UNSUPPORTED naming the node and op for an operator the GPU
 * cannot run, unless opts->allow_cpu_fallback. */
sg_status sg_cuda_plan_build(const sg_graph *g, const sg_cuda_options *opts, sg_cuda_weights *w,
                             const sg_cuda_plan *given, sg_cuda_plan **out);
void sg_cuda_plan_free(sg_cuda_plan *p);
/* Whether the GPU has kernels for op (a build may still refuse a node for
 * its dtypes or attributes). Ops without them are folded at build (Shape,
 * Constant) or run on the CPU where fallback is allowed. */
bool sg_cuda_plan_has_op(sg_op op);

typedef struct sg_cuda_plan_info {
    size_t arena_bytes, scratch_bytes, workspace_bytes;
    size_t io_bytes;           /* staging for the caller's host inputs and outputs */
    int32_t steps, fallback_steps;
} sg_cuda_plan_info;
void sg_cuda_plan_get_info(const sg_cuda_plan *p, sg_cuda_plan_info *out);
const sg_graph *sg_cuda_plan_graph(const sg_cuda_plan *p);
/* Its build: the slowest nodes and the cuDNN searches (segrt_build_report). */
const segrt_build_report *sg_cuda_plan_report(const sg_cuda_plan *p);

/* Per-layer choices of a plan, for plan files: count, and each one's key
 * and bytes. sg_cuda_plan_choices_new builds an empty holder a loader
 * fills and passes as `given` to sg_cuda_plan_build. */
int32_t sg_cuda_plan_choice_count(const sg_cuda_plan *p);
void sg_cuda_plan_choice(const sg_cuda_plan *p, int32_t i, const char **key, const void **data, size_t *size);
sg_status sg_cuda_plan_choices_new(sg_cuda_plan **out);
sg_status sg_cuda_plan_choices_add(sg_cuda_plan *holder, const char *key, const void *data, size_t size);

/* Weight store entries, for plan files. */
int32_t sg_cuda_weights_count(const sg_cuda_weights *w);
/* For each entry, the name of the first value of g (the plan's graph)
 * holding its constant, or NULL for data derived on the host; an array of
 * sg_cuda_weights_count names the caller frees (the names are g's). */
sg_status sg_cuda_weights_names(const sg_cuda_weights *w, const sg_graph *g, const char ***out);
/* Entry i: the constant's value name from sg_cuda_weights_names, the tag
 * saying how it was converted, and a host copy of its device bytes
 * (caller frees; none for derived data). */
sg_status sg_cuda_weights_entry(const sg_cuda_weights *w, const char *const *names, int32_t i, const char **value,
                                const char **tag, void **host, size_t *size);
/* Seeds the store with an entry read from a plan file, for the constant
 * blob of the graph value the file names (the blob is the key). */
sg_status sg_cuda_weights_seed(sg_cuda_weights *w, sg_blob *blob, const char *tag, const void *host, size_t size);

/* Executors: sized for the largest of the plans given; a later run of a
 * plan needing more grows the arena once (the only allocation outside
 * creation, on the first run of a new input shape). */
sg_status sg_cuda_exec_create(int32_t device, const sg_cuda_plan *const *plans, int32_t n_plans,
                              sg_cuda_exec **out);
void sg_cuda_exec_free(sg_cuda_exec *e);

/* Runs plan p. inputs and outputs are the caller's tensors (host or
 * device memory) in the graph's order, checked by the caller for dtype
 * and dims. Returns when the outputs are written. */
sg_status sg_cuda_exec_run(sg_cuda_exec *e, const sg_cuda_plan *p, const segrt_tensor *inputs,
                           segrt_tensor *outputs);

/* Enqueues plan p on the executor's stream and returns without waiting:
 * inputs and outputs must be device memory. The stream first waits for
 * `after` (an event recorded by the caller; NULL: none) and records `done`
 * (NULL: none) when the outputs are written, so a caller's own stream
 * orders itself around the run with events, not by draining. An error a
 * kernel reports (an index out of range) surfaces at sg_cuda_exec_finish
 * or the next sg_cuda_exec_run. */
struct CUevent_st;
sg_status sg_cuda_exec_enqueue(sg_cuda_exec *e, const sg_cuda_plan *p, const segrt_tensor *inputs,
                               segrt_tensor *outputs, struct CUevent_st *after, struct CUevent_st *done);
/* Waits for everything enqueued; the status of the kernels' error flag. */
sg_status sg_cuda_exec_finish(sg_cuda_exec *e);

/* The executor's stream (a cudaStream_t): every run and enqueue uses it. */
void *sg_cuda_exec_stream(const sg_cuda_exec *e);
/* Makes the exec's stream wait for the work queued so far on stream (a
 * cudaStream_t of the caller's, on the exec's device; NULL: the legacy
 * default stream), without the host waiting. */
sg_status sg_cuda_exec_wait_stream(sg_cuda_exec *e, void *stream);

/* Profiling: while on, each run records every step's device time. */
sg_status sg_cuda_exec_profile(sg_cuda_exec *e, bool on);
void sg_cuda_exec_profile_print(const sg_cuda_exec *e, FILE *f);
/* Peak device memory of the executor's buffers (arena, workspaces, staging). */
size_t sg_cuda_exec_device_bytes(const sg_cuda_exec *e);

/* The machine's identity for plan keys: GPU name and compute capability,
 * CUDA runtime and cuDNN versions. */
typedef struct sg_cuda_identity {
    char gpu[256];
    int32_t cc_major, cc_minor;
    int32_t cuda_runtime, cudnn;
} sg_cuda_identity;
sg_status sg_cuda_identity_get(int32_t device, sg_cuda_identity *out);

/* The window operations of the CUDA backend (cuda_window.c), the
 * sg_cuda_backend's `window`: others reach them through the backend. */
extern const sg_window_ops sg_cuda_window_ops;

/* Its JPEG decoder (cuda_jpeg.c: nvJPEG, loaded when first asked for). */
sg_status sg_cuda_jpeg_create(sg_backend_jpeg **out);
void sg_cuda_jpeg_destroy(sg_backend_jpeg *d);
sg_status sg_cuda_jpeg_decode(sg_backend_jpeg *d, sg_backend_stream *stream, int32_t count, const uint8_t *const *data,
                              const size_t *bytes, bool ycbcr, uint8_t *const *planes, size_t pitch);
const char *sg_cuda_jpeg_engine(const sg_backend_jpeg *d);

/* The volume operations of the CUDA backend (cuda_volume.c), the
 * sg_cuda_backend's `volume`. */
extern const struct sg_volume_ops sg_cuda_volume_ops;

#endif
