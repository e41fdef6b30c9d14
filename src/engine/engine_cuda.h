/* The CUDA half of an engine: the options it was built with, the shape
 * profile, the weight store and the plans compiled so far (the profile's
 * opt and max shapes at build, other shapes on their first run). Plans are
 * never freed before the engine, so contexts may keep pointers to them. */
#ifndef SG_ENGINE_CUDA_H
#define SG_ENGINE_CUDA_H

#include "engine/api_internal.h"

#include <stdio.h>

typedef struct sg_cuda_engine sg_cuda_engine;
struct sg_cuda_exec;
struct sg_cuda_plan;
struct sg_cuda_weights;

/* What a plan file supplies: per-layer choices and converted weights. */
typedef struct sg_plan_weight {
    char *value, *tag;
    void *data;
    size_t size;
} sg_plan_weight;

typedef struct sg_plan_seed {
    struct sg_cuda_plan *choices; /* a holder made by sg_cuda_plan_choices_new */
    sg_plan_weight *weights;
    int32_t n_weights;
} sg_plan_seed;

/* g: the engine's graph (optimized, fixed shapes bound, ranged inputs
 * symbolic), borrowed for the engine's life. seed may be NULL. */
sg_status sg_cuda_engine_new(const sg_graph *g, const segrt_build_options *opts, const sg_plan_seed *seed,
                             sg_cuda_engine **out);
void sg_cuda_engine_free(sg_cuda_engine *ce);

/* The plan for these inputs' dims: compiled already, or now (once per
 * engine). *interpret is set instead (the specialized graph, the caller
 * frees it) when the shapes depend on input values and CPU fallback is
 * allowed. */
sg_status sg_cuda_engine_plan(sg_cuda_engine *ce, const sg_graph *g, size_t n_inputs, const segrt_tensor *inputs,
                              const struct sg_cuda_plan **out, sg_graph **interpret);

/* Executors for contexts, sized for every plan compiled so far. */
sg_status sg_cuda_engine_exec_new(sg_cuda_engine *ce, struct sg_cuda_exec **out);

sg_status sg_cuda_engine_run(struct sg_cuda_exec *x, const struct sg_cuda_plan *p, const segrt_tensor *inputs,
                             segrt_tensor *outputs);
/* sg_cuda_exec_enqueue and sg_cuda_exec_finish (backend/cuda/cuda_backend.h). */
struct CUevent_st;
sg_status sg_cuda_engine_enqueue(struct sg_cuda_exec *x, const struct sg_cuda_plan *p, const segrt_tensor *inputs,
                                 segrt_tensor *outputs, struct CUevent_st *after, struct CUevent_st *done);
sg_status sg_cuda_engine_finish(struct sg_cuda_exec *x);
void sg_cuda_engine_exec_free(struct sg_cuda_exec *x);
sg_status sg_cuda_engine_exec_profile(struct sg_cuda_exec *x, bool on);
void sg_cuda_engine_exec_profile_print(const struct sg_cuda_exec *x, FILE *f);

const sg_graph *sg_cuda_engine_plan_graph(const struct sg_cuda_plan *p);
struct sg_cuda_weights *sg_cuda_engine_weights(const sg_cuda_engine *ce);
/* Whether every input is bound to a range of shapes (a profile, not a
 * fixed shape) that holds these inputs' dims: a run at them is expected,
 * and worth the plan compiled for them on its first run. */
bool sg_cuda_engine_ranged(const sg_cuda_engine *ce, size_t n_inputs, const segrt_tensor *inputs);
/* The first plan (the profile's opt shape), or NULL if none was compiled. */
const struct sg_cuda_plan *sg_cuda_engine_first_plan(sg_cuda_engine *ce);
void sg_cuda_engine_info(sg_cuda_engine *ce, segrt_engine_info *out);

const segrt_build_options *sg_cuda_engine_options(const sg_cuda_engine *ce);

#endif
