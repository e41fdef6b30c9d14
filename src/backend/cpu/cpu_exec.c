/* Running a CPU plan: per-context memory objects over one arena, the
 * caller's buffers bound for the duration of a run, steps in order. */
#include "backend/cpu/cpu_internal.h"
#include "backend/ref/ref.h"
#include "core/clock.h"
#include "core/sort.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

sg_status sg_cpu_exec_profile(sg_cpu_exec *e, bool on)
{
    free(e->step_ms);
    e->step_ms = NULL;
    e->profiled_runs = 0;
    if (on && !(e->step_ms = sg_calloc((size_t)e->plan->n_steps + 1, sizeof *e->step_ms)))
        return SEGRT_ERROR_OUT_OF_MEMORY;
    return SEGRT_OK;
}

static const char *step_impl(const cpu_step *s)
{
    if (s->prim) {
        const_dnnl_primitive_desc_t pd = NULL;
        const char *impl = "oneDNN";
        if (dnnl_primitive_get_primitive_desc(s->prim, &pd) == dnnl_success)
            dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
        return impl;
    }
    return s->fallback ? "segrt:reference" : "segrt";
}

void sg_cpu_exec_profile_print(const sg_cpu_exec *e, FILE *f)
{
    const sg_cpu_plan *p = e->plan;
    if (!e->step_ms || !e->profiled_runs)
        return;
    int32_t *order = sg_order_desc(e->step_ms, p->n_steps);
    if (!order)
        return;
    double total = 0;
    for (int32_t i = 0; i < p->n_steps; i++)
        total += e->step_ms[i];
    fprintf(f, "%-8s %6s  %-26s %s\n", "ms/run", "share", "implementation", "step");
    for (int32_t k = 0; k < p->n_steps; k++) {
        const cpu_step *s = &p->steps[order[k]];
        double ms = e->step_ms[order[k]] / (double)e->profiled_runs;
        fprintf(f, "%8.3f %5.1f%%  %-26s %s%s\n", ms, total > 0 ? 100 * e->step_ms[order[k]] / total : 0,
                step_impl(s), s->name, s->layout ? " (layout)" : "");
    }
    fprintf(f, "%8.3f total over %d steps\n", total / (double)e->profiled_runs, p->n_steps);
    free(order);
}

sg_status sg_cpu_exec_create(const sg_cpu_plan *p, sg_cpu_exec **out)
{
    sg_cpu_exec *e = sg_calloc(1, sizeof *e);
    if (!e)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    e->plan = p;
    sg_status s = SEGRT_OK;
    e->mem = sg_calloc((size_t)p->n_tensors + 1, sizeof *e->mem);
    e->ptr = sg_calloc((size_t)p->n_tensors + 1, sizeof *e->ptr);
    /* The arena is sized once from the memory plan: nothing is allocated
     * on the run path. */
    e->arena = aligned_alloc(64, p->arena_bytes ? p->arena_bytes : 64);
    e->scratch = aligned_alloc(64, p->scratch_bytes ? (p->scratch_bytes + 63) & ~(size_t)63 : 64);
    e->kscratch = aligned_alloc(64, p->kscratch_bytes ? (p->kscratch_bytes + 63) & ~(size_t)63 : 64);
    if (!e->mem || !e->ptr || !e->arena || !e->scratch || !e->kscratch)
        s = sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "out of memory for a CPU context (%zu bytes of activations)",
                     p->arena_bytes);
    if (s == SEGRT_OK && dnnl_stream_create(&e->stream, p->engine, dnnl_stream_default_flags) != dnnl_success)
        s = sg_error(SEGRT_ERROR_INTERNAL, "oneDNN could not create a stream");
    for (int32_t t = 0; s == SEGRT_OK && t < p->n_tensors; t++) {
        const cpu_tensor *ct = &p->tensors[t];
        if (ct->kind == CPU_T_ARENA)
            e->ptr[t] = e->arena + ct->offset;
        else if (ct->kind == CPU_T_CONST)
            e->ptr[t] = ct->data;
        /* Views of the caller's buffers are bound at each run. */
        if (ct->has_md && dnnl_memory_create(&e->mem[t], &ct->md, p->engine, e->ptr[t]) != dnnl_success)
            s = sg_error(SEGRT_ERROR_INTERNAL, "oneDNN could not create a memory object");
    }
    if (s == SEGRT_OK && p->scratch_bytes) {
        dnnl_memory_desc_t md;
        dnnl_dims_t dims = {(dnnl_dim_t)p->scratch_bytes};
        dnnl_memory_desc_init_by_tag(&md, 1, dims, dnnl_u8, dnnl_a);
        if (dnnl_memory_create(&e->scratch_mem, &md, p->engine, e->scratch) != dnnl_success)
            s = sg_error(SEGRT_ERROR_INTERNAL, "oneDNN could not create the scratchpad");
    }
    if (s != SEGRT_OK) {
        sg_cpu_exec_free(e);
        return s;
    }
    *out = e;
    return SEGRT_OK;
}

void sg_cpu_exec_free(sg_cpu_exec *e)
{
    if (!e)
        return;
    for (int32_t t = 0; e->mem && t < e->plan->n_tensors; t++)
        if (e->mem[t])
            dnnl_memory_destroy(e->mem[t]);
    if (e->scratch_mem)
        dnnl_memory_destroy(e->scratch_mem);
    if (e->stream)
        dnnl_stream_destroy(e->stream);
    free(e->mem);
    free(e->ptr);
    free(e->arena);
    free(e->scratch);
    free(e->kscratch);
    free(e->step_ms);
    free(e);
}

static sg_tensor view(const sg_cpu_exec *e, int32_t t)
{
    const cpu_tensor *ct = &e->plan->tensors[t];
    sg_tensor v;
    memset(&v, 0, sizeof v);
    v.dtype = ct->dtype;
    v.rank = ct->rank;
    memcpy(v.dims, ct->dims, sizeof v.dims);
    v.data = e->ptr[t];
    return v;
}

sg_status cpu_copy_kernel(const cpu_step *s, sg_cpu_exec *e)
{
    const cpu_tensor *src = &e->plan->tensors[s->args[0].tensor];
    if (src->bytes)
        memcpy(e->ptr[s->args[1].tensor], e->ptr[s->args[0].tensor], src->bytes);
    return SEGRT_OK;
}

sg_status cpu_fallback_kernel(const cpu_step *s, sg_cpu_exec *e)
{
    sg_ref_kernel_fn fn = sg_ref_kernel(s->node->op);
    sg_tensor views[CPU_MAX_ARGS];
    const sg_tensor *in[CPU_MAX_ARGS];
    sg_tensor *out[CPU_MAX_ARGS];
    int32_t n_in = s->n_args - s->n_outputs;
    for (int32_t a = 0; a < s->n_args; a++) {
        bool present = s->args[a].tensor >= 0;
        if (present)
            views[a] = view(e, s->args[a].tensor);
        if (a < n_in)
            in[a] = present ? &views[a] : NULL;
        else
            out[a - n_in] = present ? &views[a] : NULL;
    }
    return fn(s->node, in, n_in, out, s->n_outputs);
}

sg_status sg_cpu_exec_run(sg_cpu_exec *e, const sg_tensor *inputs, sg_tensor *outputs)
{
    const sg_cpu_plan *p = e->plan;
    for (int32_t i = 0; i < p->g->n_inputs; i++) {
        int32_t t = p->inputs[i];
        e->ptr[t] = inputs[i].data;
        if (e->mem[t])
            DNNL_TRY(dnnl_memory_set_data_handle(e->mem[t], inputs[i].data));
    }
    for (int32_t j = 0; j < p->g->n_outputs; j++) {
        int32_t t = p->outputs[j];
        e->ptr[t] = outputs[j].data;
        if (e->mem[t])
            DNNL_TRY(dnnl_memory_set_data_handle(e->mem[t], outputs[j].data));
    }
    for (int32_t k = 0; k < p->n_aliases; k++) {
        int32_t t = p->aliases[k];
        e->ptr[t] = e->ptr[p->tensors[t].alias];
        if (e->mem[t])
            DNNL_TRY(dnnl_memory_set_data_handle(e->mem[t], e->ptr[t]));
    }
    /* OpenMP's team size is a per-thread setting: this affects only the
     * parallel regions this run starts, not other contexts' threads. */
    omp_set_num_threads(p->threads > 0 ? p->threads : omp_get_num_procs());
    for (int32_t i = 0; i < p->n_steps; i++) {
        const cpu_step *s = &p->steps[i];
        double t0 = e->step_ms ? sg_now_seconds() : 0;
        sg_status st;
        if (s->prim) {
            dnnl_exec_arg_t args[CPU_MAX_ARGS + 1];
            int n = 0;
            for (int32_t a = 0; a < s->n_args; a++)
                if (s->args[a].tensor >= 0)
                    args[n++] = (dnnl_exec_arg_t){s->args[a].dnnl_arg, e->mem[s->args[a].tensor]};
            if (e->scratch_mem)
                args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->scratch_mem};
            dnnl_status_t ds = dnnl_primitive_execute(s->prim, e->stream, n, args);
            st = ds == dnnl_success ? SEGRT_OK
                                    : sg_error(SEGRT_ERROR_INTERNAL, "step `%s`: oneDNN execution failed: %s",
                                               s->name, cpu_dnnl_status(ds));
        } else {
            st = s->kernel(s, e);
        }
        if (st != SEGRT_OK)
            return st;
        if (e->step_ms) /* CPU primitives run synchronously: the clock sees them */
            e->step_ms[i] += 1e3 * (sg_now_seconds() - t0);
    }
    DNNL_TRY(dnnl_stream_wait(e->stream));
    if (e->step_ms)
        e->profiled_runs++;
    return SEGRT_OK;
}
