/* The CPU backend: a graph with static shapes compiled into a plan of
 * oneDNN primitives and segrt's own kernels, run by per-context executors.
 *
 * A plan is immutable once built and may be shared by threads; an exec
 * holds everything a run mutates (the activation arena, oneDNN's stream and
 * scratchpad) and serves one thread at a time. */
#ifndef SG_BACKEND_CPU_H
#define SG_BACKEND_CPU_H

#include "graph/ir.h"

#include <stdio.h>

typedef struct sg_cpu_plan sg_cpu_plan;
typedef struct sg_cpu_exec sg_cpu_exec;

/* Compiles g, whose shapes must all be known. threads is the OpenMP team
 * size of a run (0: every core). Operators oneDNN covers run there, with
 * bias, activations, PReLU and residual additions fused into convolutions
 * and activations kept in oneDNN's blocked layouts between the graph's
 * edges; the rest run on reference kernels in plain layout. */
sg_status sg_cpu_plan_build(const sg_graph *g, int32_t threads, sg_cpu_plan **out);
void sg_cpu_plan_free(sg_cpu_plan *p);
/* The slowest nodes of p's build (segrt_build_report). */
const segrt_build_report *sg_cpu_plan_report(const sg_cpu_plan *p);

/* Bytes of activation memory one exec allocates (the memory plan's peak). */
size_t sg_cpu_plan_arena_bytes(const sg_cpu_plan *p);
/* Bytes of scratch one exec allocates besides: oneDNN's scratchpad and
 * segrt's kernel scratch. */
size_t sg_cpu_plan_scratch_bytes(const sg_cpu_plan *p);
/* Steps of the plan and how many of them run on reference kernels. */
int32_t sg_cpu_plan_step_count(const sg_cpu_plan *p, int32_t *fallback_steps);

sg_status sg_cpu_exec_create(const sg_cpu_plan *p, sg_cpu_exec **out);
void sg_cpu_exec_free(sg_cpu_exec *e);

/* Runs the plan on dense row-major host tensors in the graph's input and
 * output order; dtypes and dims must be those the plan was built for. */
sg_status sg_cpu_exec_run(sg_cpu_exec *e, const sg_tensor *inputs, sg_tensor *outputs);

/* Profiling: while on, each run adds every step's wall time. */
sg_status sg_cpu_exec_profile(sg_cpu_exec *e, bool on);
/* Prints one line per step, slowest first: name, implementation (oneDNN's
 * or segrt's kernel), mean ms per run, share of the total. */
void sg_cpu_exec_profile_print(const sg_cpu_exec *e, FILE *f);

#endif
