/* Engines and contexts.
 *
 * An engine holds the model optimized for the build options' shapes and,
 * when those fix every shape, a CPU plan compiled once. A context owns the
 * plan's executor (arena, stream, scratchpad), so runs allocate nothing. A
 * run with other input dims (the model allows them) specializes the graph
 * for those dims and keeps that plan in the context until the dims change
 * again. */
#include "backend/backend_window.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/ref/ref.h"
#include "engine/engine_internal.h"
#include "engine/engine_profile.h"
#include "graph/infer.h"
#include "graph/passes.h"

#include <string.h>

sg_status sg_context_profile(segrt_context *ctx, bool on)
{
    ctx->profiling = on;
    if (ctx->cuda)
        return sg_cuda_engine_exec_profile(ctx->cuda, on);
    if (ctx->exec)
        SG_TRY(sg_cpu_exec_profile(ctx->exec, on));
    if (ctx->own_exec)
        SG_TRY(sg_cpu_exec_profile(ctx->own_exec, on));
    return SEGRT_OK;
}

void sg_context_profile_print(const segrt_context *ctx, FILE *f)
{
    if (ctx->cuda)
        sg_cuda_engine_exec_profile_print(ctx->cuda, f);
    else if (ctx->last)
        sg_cpu_exec_profile_print(ctx->last, f);
    else
        fprintf(f, "no plan ran: the model's shapes depend on input values, so it ran interpreted\n");
}

static sg_eval_fn ref_lookup(sg_op op) { return (sg_eval_fn)sg_ref_kernel(op); }

/* A CUDA engine: the model optimized with the fixed shapes bound (ranged
 * inputs stay symbolic), and its CUDA half compiling the profile's plans. */
static sg_status build_cuda(const segrt_model *model, const segrt_build_options *opts, segrt_engine **out)
{
    sg_graph *g = NULL;
    SG_TRY(sg_graph_clone(model->g, &g));
    sg_status s = sg_options_bind_fixed(opts, g);
    if (s == SEGRT_OK)
        s = sg_graph_optimize(g, ref_lookup);
    segrt_engine *e = s == SEGRT_OK ? sg_calloc(1, sizeof *e) : NULL;
    if (s == SEGRT_OK && !e)
        s = SEGRT_ERROR_OUT_OF_MEMORY;
    if (s != SEGRT_OK) {
        sg_graph_free(g);
        return sg_error_prefix(s, "%s: ", model->g->path);
    }
    e->g = g;
    e->device = SEGRT_DEVICE_CUDA;
    e->model_hash = sg_graph_content_hash(model->g);
    s = sg_cuda_engine_new(g, opts, NULL, &e->cuda);
    if (s != SEGRT_OK) {
        segrt_engine_destroy(e);
        return strncmp(sg_last_error(), model->g->path, strlen(model->g->path)) == 0
                   ? s
                   : sg_error_prefix(s, "%s: ", model->g->path);
    }
    *out = e;
    return SEGRT_OK;
}

segrt_status segrt_engine_build(const segrt_model *model, const segrt_build_options *opts,
                                segrt_engine **out)
{
    if (!model || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_engine_build: model and out must not be NULL");
    if (opts && opts->device == SEGRT_DEVICE_CUDA)
        return build_cuda(model, opts, out);
    segrt_model *optimized;
    SG_TRY(segrt_model_optimize(model, opts, &optimized));
    sg_graph *g = optimized->g;
    optimized->g = NULL;
    segrt_model_destroy(optimized);
    /* Every remaining operator must have a kernel: fail at build, naming the
     * node, rather than halfway through a run. */
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (!sg_ref_kernel(g->nodes[i].op)) {
            sg_status s = sg_node_error(&g->nodes[i], SEGRT_ERROR_UNSUPPORTED,
                                        "the CPU backend has no kernel for this operator yet");
            s = sg_error_prefix(s, "%s: ", g->path);
            sg_graph_free(g);
            return s;
        }
    segrt_engine *e = sg_calloc(1, sizeof *e);
    if (!e) {
        sg_graph_free(g);
        return SEGRT_ERROR_OUT_OF_MEMORY;
    }
    e->g = g;
    e->threads = opts ? opts->threads : 0;
    if (sg_graph_is_static(g)) {
        sg_status s = sg_cpu_plan_build(g, e->threads, &e->plan);
        if (s != SEGRT_OK) {
            s = sg_error_prefix(s, "%s: ", g->path);
            segrt_engine_destroy(e);
            return s;
        }
    }
    *out = e;
    return SEGRT_OK;
}

void sg_engine_set_interpret_limit(segrt_engine *e, int64_t bytes) { e->interpret_max_bytes = bytes; }

void segrt_engine_destroy(segrt_engine *engine)
{
    if (!engine)
        return;
    sg_cpu_plan_free(engine->plan);
    sg_cuda_engine_free(engine->cuda);
    sg_graph_free(engine->g);
    free(engine);
}

size_t segrt_engine_input_count(const segrt_engine *engine)
{
    return engine ? (size_t)engine->g->n_inputs : 0;
}

size_t segrt_engine_output_count(const segrt_engine *engine)
{
    return engine ? (size_t)engine->g->n_outputs : 0;
}

segrt_status segrt_engine_input(const segrt_engine *engine, size_t index, segrt_tensor_desc *out)
{
    if (!engine || !out || index >= (size_t)engine->g->n_inputs)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_engine_input: bad engine, index or out");
    sg_value_desc(engine->g, &engine->g->values[engine->g->inputs[index]], true, out);
    return SEGRT_OK;
}

segrt_status segrt_engine_output(const segrt_engine *engine, size_t index, segrt_tensor_desc *out)
{
    if (!engine || !out || index >= (size_t)engine->g->n_outputs)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_engine_output: bad engine, index or out");
    sg_value_desc(engine->g, &engine->g->values[engine->g->outputs[index]], false, out);
    return SEGRT_OK;
}

/* A copy of the engine's graph with the inputs' dims bound and shapes
 * inferred. Input dtypes and counts are checked here. */
static sg_status check_inputs(const sg_graph *eg, size_t n_inputs, const segrt_tensor *inputs, bool device_ok)
{
    if (n_inputs != (size_t)eg->n_inputs)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: the model takes %d inputs, given %zu",
                        eg->path, eg->n_inputs, n_inputs);
    if (n_inputs && !inputs)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "inputs must not be NULL");
    for (size_t i = 0; i < n_inputs; i++) {
        const sg_value *v = &eg->values[eg->inputs[i]];
        if (inputs[i].dtype != v->dtype)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: input `%s` expects %s, given %s",
                            eg->path, v->name, segrt_dtype_name(v->dtype),
                            segrt_dtype_name(inputs[i].dtype));
        if (inputs[i].memory != SEGRT_MEMORY_HOST && !device_ok)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "%s: input `%s` is in device memory, which a CPU engine cannot read",
                            eg->path, v->name);
        if (inputs[i].memory != SEGRT_MEMORY_HOST && inputs[i].memory != SEGRT_MEMORY_DEVICE)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: input `%s` has an unknown memory kind",
                            eg->path, v->name);
        if (inputs[i].rank < 0 || inputs[i].rank > SEGRT_MAX_RANK)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: input `%s` has rank %d", eg->path, v->name,
                            inputs[i].rank);
    }
    return SEGRT_OK;
}

static sg_status specialize(const segrt_engine *e, size_t n_inputs, const segrt_tensor *inputs,
                            sg_graph **out)
{
    const sg_graph *eg = e->g;
    SG_TRY(check_inputs(eg, n_inputs, inputs, e->cuda != NULL));
    sg_graph *g = NULL;
    SG_TRY(sg_graph_clone(eg, &g));
    sg_status s = SEGRT_OK;
    for (size_t i = 0; i < n_inputs && s == SEGRT_OK; i++)
        s = sg_graph_bind_input_at(g, (int32_t)i, inputs[i].rank, inputs[i].dims);
    if (s == SEGRT_OK)
        s = sg_graph_infer(g);
    if (s != SEGRT_OK) {
        sg_graph_free(g);
        return sg_error_prefix(s, "%s: ", eg->path);
    }
    *out = g;
    return SEGRT_OK;
}

static void fill_output_shape(const sg_value *v, segrt_tensor *t)
{
    t->dtype = v->dtype;
    t->rank = v->shape.rank;
    for (int32_t d = 0; d < v->shape.rank; d++)
        t->dims[d] = v->shape.d[d].size;
}

segrt_status segrt_engine_output_shapes(const segrt_engine *engine, size_t n_inputs,
                                        const segrt_tensor *inputs, size_t n_outputs,
                                        segrt_tensor *outputs)
{
    if (!engine || (n_outputs && !outputs))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_engine_output_shapes: NULL argument");
    if (n_outputs != (size_t)engine->g->n_outputs)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: the model gives %d outputs, asked for %zu",
                        engine->g->path, engine->g->n_outputs, n_outputs);
    sg_graph *g = NULL;
    SG_TRY(specialize(engine, n_inputs, inputs, &g));
    for (size_t j = 0; j < n_outputs; j++) {
        const sg_value *v = &g->values[g->outputs[j]];
        if (!sg_shape_is_static(&v->shape)) {
            char buf[256];
            sg_status s = sg_error(SEGRT_ERROR_SHAPE,
                                   "%s: output `%s` has shape %s, which depends on input data",
                                   g->path, v->name, sg_shape_format(g, &v->shape, buf, sizeof buf));
            sg_graph_free(g);
            return s;
        }
        fill_output_shape(v, &outputs[j]);
    }
    sg_graph_free(g);
    return SEGRT_OK;
}

segrt_status segrt_context_create(const segrt_engine *engine, segrt_context **out)
{
    if (!engine || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_context_create: NULL argument");
    segrt_context *c = sg_calloc(1, sizeof *c);
    if (!c)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    c->engine = engine;
    if (engine->cuda) {
        sg_status s = sg_cuda_engine_exec_new(engine->cuda, &c->cuda);
        if (s != SEGRT_OK) {
            free(c);
            return sg_error_prefix(s, "%s: ", engine->g->path);
        }
    } else if (engine->plan) {
        sg_status s = sg_cpu_exec_create(engine->plan, &c->exec);
        if (s != SEGRT_OK) {
            free(c);
            return s;
        }
    }
    *out = c;
    return SEGRT_OK;
}

void segrt_context_destroy(segrt_context *ctx)
{
    if (!ctx)
        return;
    sg_cuda_engine_exec_free(ctx->cuda);
    sg_cpu_exec_free(ctx->exec);
    sg_cpu_exec_free(ctx->own_exec);
    sg_cpu_plan_free(ctx->own_plan);
    sg_graph_free(ctx->own_g);
    free(ctx);
}

/* Checks the caller's output buffers against the shapes of this run. */
static sg_status check_outputs(const sg_graph *g, size_t n_outputs, const segrt_tensor *outputs, bool device_ok)
{
    for (size_t j = 0; j < n_outputs; j++) {
        const sg_value *v = &g->values[g->outputs[j]];
        const segrt_tensor *o = &outputs[j];
        segrt_tensor want;
        memset(&want, 0, sizeof want);
        fill_output_shape(v, &want);
        bool same = o->dtype == want.dtype && o->rank == want.rank;
        for (int32_t d = 0; same && d < want.rank; d++)
            same = o->dims[d] == want.dims[d];
        if (!same) {
            char a[256], b[256];
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "%s: output `%s` is %s %s, but the buffer given is %s %s", g->path,
                            v->name, segrt_dtype_name(want.dtype),
                            sg_dims_format(want.dims, want.rank, a, sizeof a),
                            segrt_dtype_name(o->dtype),
                            sg_dims_format(o->dims, o->rank < 0 || o->rank > SEGRT_MAX_RANK ? 0 : o->rank, b,
                                           sizeof b));
        }
        if (o->memory != SEGRT_MEMORY_HOST && (!device_ok || o->memory != SEGRT_MEMORY_DEVICE))
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "%s: output `%s` is in device memory, which a CPU engine cannot write",
                            g->path, v->name);
        int64_t numel = 1;
        for (int32_t d = 0; d < want.rank; d++)
            numel *= want.dims[d];
        if (numel && !o->data)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: output `%s` has no buffer", g->path, v->name);
    }
    return SEGRT_OK;
}

/* Whether the run's input dims are those plan p was built for. */
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

/* Picks the executor for this run's input dims: the engine's plan, the
 * context's specialization, or a new specialization that replaces it. */
static sg_status exec_for(segrt_context *ctx, size_t n_inputs, const segrt_tensor *inputs,
                          const sg_graph **g_out, sg_cpu_exec **out, sg_graph **interpret)
{
    *interpret = NULL;
    const segrt_engine *e = ctx->engine;
    if (e->plan && dims_match(e->g, n_inputs, inputs)) {
        *g_out = e->g;
        *out = ctx->exec;
        return SEGRT_OK;
    }
    if (ctx->own_g && dims_match(ctx->own_g, n_inputs, inputs)) {
        *g_out = ctx->own_g;
        *out = ctx->own_exec;
        return SEGRT_OK;
    }
    sg_graph *g = NULL;
    SG_TRY(specialize(e, n_inputs, inputs, &g));
    sg_cpu_plan *plan = NULL;
    sg_cpu_exec *exec = NULL;
    sg_status s = sg_graph_optimize(g, ref_lookup);
    if (s == SEGRT_OK && !sg_graph_is_static(g)) {
        /* Shapes that depend on input values: no plan can be made ahead;
         * the caller interprets this specialization and frees it. */
        *interpret = g;
        *g_out = NULL;
        *out = NULL;
        return SEGRT_OK;
    }
    if (s == SEGRT_OK)
        s = sg_cpu_plan_build(g, e->threads, &plan);
    if (s == SEGRT_OK)
        s = sg_cpu_exec_create(plan, &exec);
    if (s == SEGRT_OK && ctx->profiling)
        s = sg_cpu_exec_profile(exec, true);
    if (s != SEGRT_OK) {
        sg_cpu_plan_free(plan);
        s = strncmp(sg_last_error(), g->path, strlen(g->path)) ? sg_error_prefix(s, "%s: ", g->path) : s;
        sg_graph_free(g);
        return s;
    }
    if (ctx->last == ctx->own_exec)
        ctx->last = NULL;
    sg_cpu_exec_free(ctx->own_exec);
    sg_cpu_plan_free(ctx->own_plan);
    sg_graph_free(ctx->own_g);
    ctx->own_g = g;
    ctx->own_plan = plan;
    ctx->own_exec = exec;
    *g_out = g;
    *out = exec;
    return SEGRT_OK;
}

/* The interpreter path, for graphs whose shapes depend on input values:
 * bind the inputs' data as constants to g (specialized for their dims, and
 * consumed) and let constant folding evaluate the graph with the reference
 * kernels, inferring each shape as it goes and dropping intermediates once
 * read. Slower than a plan, and it allocates. */
static sg_status run_interpreted(sg_graph *g, const segrt_tensor *inputs, size_t n_outputs,
                                 segrt_tensor *outputs, int64_t max_bytes)
{
    sg_status s = SEGRT_OK;
    for (int32_t i = 0; i < g->n_inputs && s == SEGRT_OK; i++) {
        sg_value *v = &g->values[g->inputs[i]];
        sg_tensor t = sg_value_tensor(v);
        size_t bytes = sg_tensor_bytes(&t);
        s = sg_blob_new(bytes, false, &v->data);
        if (s == SEGRT_OK && bytes)
            memcpy(sg_blob_data(v->data), inputs[i].data, bytes);
    }
    sg_fold_options fold = {ref_lookup, max_bytes, true, true, NULL};
    if (s == SEGRT_OK)
        s = sg_pass_fold_constants(g, &fold, NULL);
    if (s == SEGRT_OK)
        s = check_outputs(g, n_outputs, outputs, false);
    for (size_t j = 0; j < n_outputs && s == SEGRT_OK; j++) {
        const sg_value *v = &g->values[g->outputs[j]];
        if (!v->data)
            s = sg_error(SEGRT_ERROR_INTERNAL, "output `%s` was not computed", v->name);
        else if (sg_blob_size(v->data))
            memcpy(outputs[j].data, sg_blob_data(v->data), sg_blob_size(v->data));
    }
    if (s != SEGRT_OK && strncmp(sg_last_error(), g->path, strlen(g->path)) != 0)
        s = sg_error_prefix(s, "%s: ", g->path);
    sg_graph_free(g);
    return s;
}

/* Inputs and outputs beyond this many would need a heap allocation per run. */
#define SG_MAX_IO SG_MAX_IO_ENGINE

static sg_status run_cuda(segrt_context *ctx, size_t n_inputs, const segrt_tensor *inputs, size_t n_outputs,
                          segrt_tensor *outputs)
{
    const segrt_engine *e = ctx->engine;
    const struct sg_cuda_plan *plan = NULL;
    sg_graph *interpret = NULL;
    sg_status s = sg_cuda_engine_plan(e->cuda, e->g, n_inputs, inputs, &plan, &interpret);
    if (s != SEGRT_OK)
        return strncmp(sg_last_error(), e->g->path, strlen(e->g->path)) == 0 ? s
                                                                             : sg_error_prefix(s, "%s: ", e->g->path);
    if (interpret) { /* data-dependent shapes, CPU fallback allowed */
        for (size_t i = 0; i < n_inputs; i++)
            if (inputs[i].memory != SEGRT_MEMORY_HOST) {
                sg_graph_free(interpret);
                return sg_error(SEGRT_ERROR_UNSUPPORTED,
                                "%s: this model runs interpreted on the CPU, which needs host inputs", e->g->path);
            }
        return run_interpreted(interpret, inputs, n_outputs, outputs, e->interpret_max_bytes);
    }
    s = check_outputs(sg_cuda_engine_plan_graph(plan), n_outputs, outputs, true);
    if (s == SEGRT_OK)
        s = sg_cuda_engine_run(ctx->cuda, plan, inputs, outputs);
    return s == SEGRT_OK ? s : sg_error_prefix(s, "%s: ", e->g->path);
}

/* The checks of a run's buffers that segrt_context_run and
 * sg_context_enqueue share: counts, then the inputs. */
static sg_status check_run_buffers(const segrt_engine *e, size_t n_inputs, const segrt_tensor *inputs,
                                   size_t n_outputs)
{
    if (n_outputs != (size_t)e->g->n_outputs)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: the model gives %d outputs, given %zu buffers",
                        e->g->path, e->g->n_outputs, n_outputs);
    if (n_inputs > SG_MAX_IO || n_outputs > SG_MAX_IO)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: more than %d inputs or outputs", e->g->path, SG_MAX_IO);
    return check_inputs(e->g, n_inputs, inputs, e->cuda != NULL);
}

sg_status sg_context_enqueue(segrt_context *ctx, size_t n_inputs, const segrt_tensor *inputs, size_t n_outputs,
                             segrt_tensor *outputs, struct CUevent_st *after, struct CUevent_st *done)
{
    const segrt_engine *e = ctx->engine;
    if (!e->cuda)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: an enqueued run needs a CUDA engine", e->g->path);
    SG_TRY(check_run_buffers(e, n_inputs, inputs, n_outputs));
    const struct sg_cuda_plan *plan = NULL;
    sg_graph *interpret = NULL;
    sg_status s = sg_cuda_engine_plan(e->cuda, e->g, n_inputs, inputs, &plan, &interpret);
    if (s == SEGRT_OK && interpret) {
        sg_graph_free(interpret);
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: this model runs interpreted on the CPU, not enqueued on the GPU",
                        e->g->path);
    }
    if (s == SEGRT_OK)
        s = check_outputs(sg_cuda_engine_plan_graph(plan), n_outputs, outputs, true);
    if (s == SEGRT_OK)
        s = sg_cuda_engine_enqueue(ctx->cuda, plan, inputs, outputs, after, done);
    return s == SEGRT_OK || strncmp(sg_last_error(), e->g->path, strlen(e->g->path)) == 0
               ? s
               : sg_error_prefix(s, "%s: ", e->g->path);
}

bool sg_context_in_profile(const segrt_context *ctx, size_t n_inputs, const segrt_tensor *inputs)
{
    return ctx->engine->cuda && sg_cuda_engine_ranged(ctx->engine->cuda, n_inputs, inputs);
}

const struct sg_window_ops *sg_context_window_ops(const segrt_context *ctx)
{
#ifdef SEGRT_HAVE_CUDA
    if (ctx && ctx->engine->cuda)
        return &sg_cuda_window_ops;
#endif
    (void)ctx;
    return NULL;
}

sg_status sg_context_finish(segrt_context *ctx)
{
    if (!ctx->engine->cuda)
        return SEGRT_OK;
    sg_status s = sg_cuda_engine_finish(ctx->cuda);
    return s == SEGRT_OK ? s : sg_error_prefix(s, "%s: ", ctx->engine->g->path);
}

segrt_status segrt_context_run(segrt_context *ctx, size_t n_inputs, const segrt_tensor *inputs,
                               size_t n_outputs, segrt_tensor *outputs)
{
    if (!ctx || (n_outputs && !outputs) || (n_inputs && !inputs))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_context_run: NULL argument");
    const segrt_engine *e = ctx->engine;
    SG_TRY(check_run_buffers(e, n_inputs, inputs, n_outputs));
    if (e->cuda)
        return run_cuda(ctx, n_inputs, inputs, n_outputs, outputs);
    const sg_graph *g = NULL;
    sg_cpu_exec *exec = NULL;
    sg_graph *interpret = NULL;
    SG_TRY(exec_for(ctx, n_inputs, inputs, &g, &exec, &interpret));
    if (interpret)
        return run_interpreted(interpret, inputs, n_outputs, outputs, e->interpret_max_bytes);
    SG_TRY(check_outputs(g, n_outputs, outputs, false));
    sg_tensor in[SG_MAX_IO], out[SG_MAX_IO];
    for (size_t i = 0; i < n_inputs; i++) {
        in[i] = (sg_tensor){inputs[i].dtype, inputs[i].rank, {0}, inputs[i].data};
        memcpy(in[i].dims, inputs[i].dims, sizeof in[i].dims);
    }
    for (size_t j = 0; j < n_outputs; j++) {
        out[j] = (sg_tensor){outputs[j].dtype, outputs[j].rank, {0}, outputs[j].data};
        memcpy(out[j].dims, outputs[j].dims, sizeof out[j].dims);
    }
    ctx->last = exec;
    sg_status s = sg_cpu_exec_run(exec, in, out);
    return s == SEGRT_OK ? s : sg_error_prefix(s, "%s: ", e->g->path);
}

sg_status sg_engine_from_plan(sg_graph *g, const segrt_build_options *opts, const sg_plan_seed *seed,
                              uint64_t model_hash, segrt_engine **out)
{
    segrt_engine *e = sg_calloc(1, sizeof *e);
    if (!e) {
        sg_graph_free(g);
        return SEGRT_ERROR_OUT_OF_MEMORY;
    }
    e->g = g;
    e->device = SEGRT_DEVICE_CUDA;
    e->model_hash = model_hash;
    /* The exported graph keeps its inputs' declared dims: bind the fixed
     * shapes again, as the engine was built with them. */
    sg_status s = sg_options_bind_fixed(opts, g);
    if (s == SEGRT_OK)
        s = sg_graph_infer(g);
    if (s == SEGRT_OK)
        s = sg_cuda_engine_new(g, opts, seed, &e->cuda);
    if (s != SEGRT_OK) {
        segrt_engine_destroy(e);
        return s;
    }
    *out = e;
    return SEGRT_OK;
}

segrt_status segrt_engine_get_info(const segrt_engine *engine, segrt_engine_info *out)
{
    if (!engine || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_engine_get_info: NULL argument");
    memset(out, 0, sizeof *out);
    if (engine->cuda) {
        sg_cuda_engine_info(engine->cuda, out);
        return SEGRT_OK;
    }
    out->device = SEGRT_DEVICE_CPU;
    out->precision = SEGRT_PRECISION_FP32;
    if (engine->plan) {
        out->arena_bytes = sg_cpu_plan_arena_bytes(engine->plan);
        out->workspace_bytes = sg_cpu_plan_scratch_bytes(engine->plan);
        int32_t fb = 0;
        out->steps = sg_cpu_plan_step_count(engine->plan, &fb);
        out->fallback_steps = fb;
    }
    return SEGRT_OK;
}
