/* The CPU backend behind the one interface (backend/backend.h).
 *
 * A plan holds the engine's graph and, when its shapes are all known, the
 * plan compiled for them. A context owns that plan's executor (arena,
 * oneDNN stream and scratchpad), so runs allocate nothing; a run with other
 * input dims (the model allows them) specializes the graph for those dims
 * and keeps that plan in the context until the dims change again. A graph
 * whose shapes depend on input values goes to the interpreter. */
#include "backend/backend.h"
#include "backend/backend_volume.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/ref/ref.h"
#include "graph/infer.h"

#include <string.h>

struct sg_backend_plan {
    const sg_graph *g;
    int32_t threads;
    sg_cpu_plan *plan; /* when g's shapes are all known */
};

struct sg_backend_context {
    const struct sg_backend_plan *p;
    sg_cpu_exec *exec;     /* runs p->plan */
    sg_graph *own_g;       /* a specialization for other input dims, */
    sg_cpu_plan *own_plan; /* its plan */
    sg_cpu_exec *own_exec;
    sg_cpu_exec *pick; /* the executor context_select chose */
    sg_cpu_exec *last; /* the executor of the last run */
    bool profiling;
};

static sg_eval_fn ref_lookup(sg_op op)
{
    return (sg_eval_fn)sg_ref_kernel(op);
}

static bool cpu_supports(const sg_graph *g, const sg_node *n, const sg_backend_options *o, const char **why)
{
    (void)g, (void)o;
    if (sg_ref_kernel(n->op))
        return true;
    *why = "the CPU backend has no kernel for this operator yet";
    return false;
}

static sg_status cpu_plan_build(const sg_graph *g, const sg_backend_options *o, const void *payload,
                                size_t payload_bytes, sg_backend_plan **out)
{
    /* A CPU plan is its graph and options: nothing more is saved. */
    if (payload_bytes)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "a CPU plan has no payload, this one has %zu bytes", payload_bytes);
    (void)payload;
    sg_backend_plan *p = sg_calloc(1, sizeof *p);
    if (!p)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    p->g = g;
    p->threads = o->threads;
    if (sg_graph_is_static(g)) {
        sg_status s = sg_cpu_plan_build(g, p->threads, &p->plan);
        if (s != SEGRT_OK) {
            free(p);
            return s;
        }
    }
    *out = p;
    return SEGRT_OK;
}

static void cpu_plan_free(sg_backend_plan *p)
{
    if (!p)
        return;
    sg_cpu_plan_free(p->plan);
    free(p);
}

static void cpu_plan_report(sg_backend_plan *p, segrt_build_report *out)
{
    if (p->plan) /* a graph with symbolic dims builds its plans at run time, unreported */
        sg_report_add(out, sg_cpu_plan_report(p->plan));
}

static void cpu_plan_describe(sg_backend_plan *p, segrt_engine_info *out)
{
    out->device = SEGRT_DEVICE_CPU;
    out->precision = SEGRT_PRECISION_FP32;
    if (p->plan) {
        out->arena_bytes = sg_cpu_plan_arena_bytes(p->plan);
        out->workspace_bytes = sg_cpu_plan_scratch_bytes(p->plan);
        int32_t fb = 0;
        out->steps = sg_cpu_plan_step_count(p->plan, &fb);
        out->fallback_steps = fb;
    }
}

static sg_status cpu_context_create(sg_backend_plan *p, sg_backend_context **out)
{
    sg_backend_context *c = sg_calloc(1, sizeof *c);
    if (!c)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    c->p = p;
    if (p->plan) {
        sg_status s = sg_cpu_exec_create(p->plan, &c->exec);
        if (s != SEGRT_OK) {
            free(c);
            return s;
        }
    }
    *out = c;
    return SEGRT_OK;
}

static void cpu_context_destroy(sg_backend_context *c)
{
    if (!c)
        return;
    sg_cpu_exec_free(c->exec);
    sg_cpu_exec_free(c->own_exec);
    sg_cpu_plan_free(c->own_plan);
    sg_graph_free(c->own_g);
    free(c);
}

/* Whether the run's input dims are those g was specialized for. */
static bool dims_match(const sg_graph *g, size_t n_inputs, const segrt_tensor *inputs)
{
    for (size_t i = 0; i < n_inputs; i++) {
        const sg_shape *s = &g->values[g->inputs[i]].shape;
        if (inputs[i].rank != s->rank)
            return false;
        for (int32_t d = 0; d < s->rank; d++)
            if (s->d[d].size != inputs[i].dims[d])
                return false;
    }
    return true;
}

/* The plan's graph with the inputs' dims bound, inferred and optimized. */
static sg_status specialize(const sg_graph *eg, size_t n_inputs, const segrt_tensor *inputs, sg_graph **out)
{
    sg_graph *g = NULL;
    SG_TRY(sg_graph_specialize(eg, n_inputs, inputs, &g));
    sg_status s = sg_graph_optimize(g, ref_lookup);
    if (s != SEGRT_OK) {
        sg_graph_free(g);
        return s;
    }
    *out = g;
    return SEGRT_OK;
}

/* The engine's plan, the context's specialization, or a new specialization
 * that replaces it. */
static sg_status cpu_context_select(sg_backend_context *c, size_t n_inputs, const segrt_tensor *inputs,
                                    const sg_graph **g_out, sg_graph **interpret)
{
    *interpret = NULL;
    *g_out = NULL;
    c->pick = NULL;
    const sg_backend_plan *p = c->p;
    if (p->plan && dims_match(p->g, n_inputs, inputs)) {
        *g_out = p->g;
        c->pick = c->exec;
        return SEGRT_OK;
    }
    if (c->own_g && dims_match(c->own_g, n_inputs, inputs)) {
        *g_out = c->own_g;
        c->pick = c->own_exec;
        return SEGRT_OK;
    }
    sg_graph *g = NULL;
    SG_TRY(specialize(p->g, n_inputs, inputs, &g));
    if (!sg_graph_is_static(g)) {
        /* Shapes that depend on input values: no plan can be made ahead. */
        *interpret = g;
        return SEGRT_OK;
    }
    sg_cpu_plan *plan = NULL;
    sg_cpu_exec *exec = NULL;
    sg_status s = sg_cpu_plan_build(g, p->threads, &plan);
    if (s == SEGRT_OK)
        s = sg_cpu_exec_create(plan, &exec);
    if (s == SEGRT_OK && c->profiling)
        s = sg_cpu_exec_profile(exec, true);
    if (s != SEGRT_OK) {
        sg_cpu_exec_free(exec);
        sg_cpu_plan_free(plan);
        s = strncmp(sg_last_error(), g->path, strlen(g->path)) ? sg_error_prefix(s, "%s: ", g->path) : s;
        sg_graph_free(g);
        return s;
    }
    if (c->last == c->own_exec)
        c->last = NULL;
    sg_cpu_exec_free(c->own_exec);
    sg_cpu_plan_free(c->own_plan);
    sg_graph_free(c->own_g);
    c->own_g = g;
    c->own_plan = plan;
    c->own_exec = exec;
    *g_out = g;
    c->pick = exec;
    return SEGRT_OK;
}

static sg_status cpu_context_run(sg_backend_context *c, const segrt_tensor *inputs, segrt_tensor *outputs)
{
    if (!c->pick)
        return sg_error(SEGRT_ERROR_INTERNAL, "a CPU run without a plan selected");
    const sg_graph *g = c->pick == c->exec ? c->p->g : c->own_g;
    sg_tensor in[SG_MAX_IO_BACKEND], out[SG_MAX_IO_BACKEND];
    if (g->n_inputs > SG_MAX_IO_BACKEND || g->n_outputs > SG_MAX_IO_BACKEND)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "more than %d inputs or outputs", SG_MAX_IO_BACKEND);
    for (int32_t i = 0; i < g->n_inputs; i++) {
        in[i] = (sg_tensor){inputs[i].dtype, inputs[i].rank, {0}, inputs[i].data};
        memcpy(in[i].dims, inputs[i].dims, sizeof in[i].dims);
    }
    for (int32_t j = 0; j < g->n_outputs; j++) {
        out[j] = (sg_tensor){outputs[j].dtype, outputs[j].rank, {0}, outputs[j].data};
        memcpy(out[j].dims, outputs[j].dims, sizeof out[j].dims);
    }
    c->last = c->pick;
    return sg_cpu_exec_run(c->pick, in, out);
}

static sg_status cpu_profile(sg_backend_context *c, bool on)
{
    c->profiling = on;
    if (c->exec)
        SG_TRY(sg_cpu_exec_profile(c->exec, on));
    if (c->own_exec)
        SG_TRY(sg_cpu_exec_profile(c->own_exec, on));
    return SEGRT_OK;
}

static void cpu_profile_print(const sg_backend_context *c, FILE *f)
{
    if (c->last)
        sg_cpu_exec_profile_print(c->last, f);
    else
        fprintf(f, "no plan ran: the model's shapes depend on input values, so it ran interpreted\n");
}

/* cpu_volume.c */
extern const sg_volume_ops sg_cpu_volume_ops;

const sg_backend sg_cpu_backend = {
    .name = "cpu",
    .device = SEGRT_DEVICE_CPU,
    .device_memory = false,
    .profiles = false,
    .supports = cpu_supports,
    .plan_build = cpu_plan_build,
    .plan_free = cpu_plan_free,
    .plan_describe = cpu_plan_describe,
    .plan_report = cpu_plan_report,
    .plan_in_profile = NULL,
    .payload_save = NULL,
    .identity = NULL,
    .identity_keys = NULL,
    .context_create = cpu_context_create,
    .context_destroy = cpu_context_destroy,
    .context_select = cpu_context_select,
    .context_run = cpu_context_run,
    .context_enqueue = NULL,
    .context_finish = NULL,
    .profile = cpu_profile,
    .profile_print = cpu_profile_print,
    .eval = ref_lookup,
    .window = NULL,
    .volume = &sg_cpu_volume_ops,
};
