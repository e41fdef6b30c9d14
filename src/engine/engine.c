/* Engines and contexts, on whichever backend the build options name
 * (backend/backend.h): the engine optimizes the model, asks the backend
 * whether it can run every node, and keeps the backend's plan; a context
 * keeps the backend's per-context state. Runs are checked here (counts,
 * dtypes, ranks, output buffers) and graphs whose shapes depend on input
 * values are interpreted here, whatever the backend. */
#include "engine/engine_internal.h"
#include "backend/kernel_switches.h"
#include "engine/engine_profile.h"
#include "graph/infer.h"
#include "graph/passes.h"

#include <string.h>

sg_status sg_context_profile(segrt_context *ctx, bool on)
{
    return ctx->engine->backend->profile(ctx->bc, on);
}

void sg_context_profile_print(const segrt_context *ctx, FILE *f)
{
    ctx->engine->backend->profile_print(ctx->bc, f);
}

const sg_backend *sg_context_backend(const segrt_context *ctx)
{
    return ctx->engine->backend;
}

const struct sg_window_ops *sg_context_window_ops(const segrt_context *ctx)
{
    return ctx ? ctx->engine->backend->window : NULL;
}

/* s, with g's path in front unless the message starts with it already. */
static sg_status with_path(sg_status s, const sg_graph *g)
{
    if (s == SEGRT_OK || strncmp(sg_last_error(), g->path, strlen(g->path)) == 0)
        return s;
    return sg_error_prefix(s, "%s: ", g->path);
}

/* Every live node of g must run on the backend: fail at build, naming the
 * node, rather than halfway through a run. A backend that compiles one
 * plan per input shape (profiles) is asked here only when g's shapes are
 * all known (g is what it compiles); otherwise it asks at each
 * specialization, whose folding removes shape arithmetic (Shape, Range)
 * that no device kernel runs. */
static sg_status check_supported(const sg_backend *b, const sg_graph *g, const sg_backend_options *bo)
{
    if (b->profiles && !sg_graph_is_static(g))
        return SEGRT_OK;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const char *why = "the backend cannot run this operator";
        if (!g->nodes[i].dead && !b->supports(g, &g->nodes[i], bo, &why))
            return sg_error_prefix(sg_node_error(&g->nodes[i], SEGRT_ERROR_UNSUPPORTED, "%s", why), "%s: ", g->path);
    }
    return SEGRT_OK;
}

/* Lowers a composite node where the backend has no kernel of its own for
 * it (asked without CPU fallback: the primitive operators run on the
 * device, the fallback would not), or everywhere where the build turned
 * the composite-ops switch off (how the CPU's differential tests run the
 * lowered forms). */
typedef struct lower_ctx {
    const sg_backend *b;
    sg_backend_options bo;
} lower_ctx;

static bool lower_here(const sg_graph *g, const sg_node *n, void *user)
{
    const lower_ctx *c = user;
    if (c->bo.disabled_kernels & SG_KERNEL_BIT(SG_KERNEL_COMPOSITE_OPS))
        return true;
    const char *why = NULL;
    return !c->b->supports(g, n, &c->bo, &why);
}

static sg_status lower_composites(const sg_backend *b, const segrt_build_options *opts, sg_graph *g)
{
    lower_ctx c = {b, {0}};
    sg_options_backend(opts, &c.bo);
    c.bo.allow_cpu_fallback = false;
    int32_t changed = 0;
    SG_TRY(sg_pass_lower(g, lower_here, &c, &changed));
    /* The lowered forms' constants (casts of scalars, shapes) fold, and
     * no-op reshapes and transposes go, as in the rest of the graph. */
    return changed ? sg_graph_optimize(g, sg_backend_host_eval()) : SEGRT_OK;
}

/* Attention chains as one node where the backend has a kernel of its own
 * for it (asked without CPU fallback) and the build leaves the
 * fused-attention switch on; then the constants it reshaped fold. */
static sg_status fuse_attention(const sg_backend *b, const segrt_build_options *opts, sg_graph *g)
{
    sg_backend_options bo = {0};
    sg_options_backend(opts, &bo);
    bo.allow_cpu_fallback = false;
    const sg_node probe = {.op = SG_OP_SDPA};
    const char *why = NULL;
    if ((bo.disabled_kernels & SG_KERNEL_BIT(SG_KERNEL_FUSED_ATTENTION)) || !b->supports(g, &probe, &bo, &why))
        return SEGRT_OK;
    int32_t changed = 0;
    SG_TRY(sg_pass_fuse_attention(g, &changed));
    return changed ? sg_graph_optimize(g, sg_backend_host_eval()) : SEGRT_OK;
}

/* An engine over g (taken: freed on failure too), compiled by b with opts. */
static sg_status engine_new(const sg_backend *b, sg_graph *g, const segrt_build_options *opts, const void *payload,
                            size_t payload_bytes, uint64_t model_hash, bool check, segrt_engine **out)
{
    segrt_engine *e = sg_calloc(1, sizeof *e);
    if (!e) {
        sg_graph_free(g);
        return SEGRT_ERROR_OUT_OF_MEMORY;
    }
    e->g = g;
    e->backend = b;
    e->model_hash = model_hash;
    sg_status s = sg_options_copy(opts, &e->opts);
    sg_backend_options bo;
    sg_options_backend(e->opts, &bo);
    if (s == SEGRT_OK && check)
        s = check_supported(b, g, &bo);
    double t0 = sg_now_seconds();
    if (s == SEGRT_OK)
        s = with_path(b->plan_build(g, &bo, payload, payload_bytes, &e->plan), g);
    e->backend_seconds = sg_now_seconds() - t0;
    if (s != SEGRT_OK) {
        segrt_engine_destroy(e);
        return s;
    }
    *out = e;
    return SEGRT_OK;
}

/* Binds opts' shapes to g: all of them, ranged ones at their opt dims,
 * unless the backend compiles profiles itself (then the fixed ones only). */
static sg_status bind_options(const sg_backend *b, const segrt_build_options *opts, sg_graph *g)
{
    return b && b->profiles ? sg_options_bind_fixed(opts, g) : sg_options_bind(opts, g);
}

segrt_status segrt_engine_build(const segrt_model *model, const segrt_build_options *opts, segrt_engine **out)
{
    if (!model || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_engine_build: model and out must not be NULL");
    double t0 = sg_now_seconds();
    segrt_device_kind kind = opts ? opts->device : SEGRT_DEVICE_CPU;
    const sg_backend *b = sg_backend_for(kind);
    sg_graph *g = NULL;
    SG_TRY(sg_graph_clone(model->g, &g));
    sg_status s = bind_options(b, opts, g);
    if (s == SEGRT_OK)
        s = sg_graph_optimize(g, sg_backend_host_eval());
    for (int32_t i = 0; s == SEGRT_OK && i < g->n_nodes; i++)
        if (!g->nodes[i].dead && g->nodes[i].op == SG_OP_IF)
            s = sg_if_not_folded(&g->nodes[i]);
    if (s == SEGRT_OK && b)
        s = lower_composites(b, opts, g);
    if (s == SEGRT_OK && b)
        s = fuse_attention(b, opts, g);
    if (s == SEGRT_OK && !b)
        s = sg_error(SEGRT_ERROR_UNSUPPORTED, "this segrt was built without %s",
                     kind == SEGRT_DEVICE_CUDA ? "CUDA" : "a backend for this device");
    if (s != SEGRT_OK) {
        sg_graph_free(g);
        return sg_error_prefix(s, "%s: ", model->g->path);
    }
    double t1 = sg_now_seconds();
    SG_TRY(engine_new(b, g, opts, NULL, 0, sg_graph_content_hash(model->g), true, out));
    (*out)->graph_seconds = t1 - t0;
    (*out)->total_seconds = sg_now_seconds() - t0;
    return SEGRT_OK;
}

void sg_engine_set_interpret_limit(segrt_engine *e, int64_t bytes) { e->interpret_max_bytes = bytes; }

void segrt_engine_destroy(segrt_engine *engine)
{
    if (!engine)
        return;
    if (engine->plan)
        engine->backend->plan_free(engine->plan);
    segrt_build_options_destroy(engine->opts);
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
    SG_TRY(check_inputs(eg, n_inputs, inputs, e->backend->device_memory));
    return sg_graph_specialize(eg, n_inputs, inputs, out);
}

static void fill_output_shape(const sg_value *v, segrt_tensor *t)
{
    t->dtype = v->dtype;
    t->rank = v->shape.rank;
    for (int32_t d = 0; d < v->shape.rank; d++)
        t->dims[d] = v->shape.d[d].size;
}

/* Evaluates g (specialized for the inputs' dims) on the inputs' data, on
 * the host: their data bound as constants, constant folding running the
 * reference kernels and inferring each shape as it goes. */
static sg_status interpret(sg_graph *g, const segrt_tensor *inputs, int64_t max_bytes)
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
    sg_fold_options fold = {sg_backend_host_eval(), max_bytes, true, true, NULL};
    return s == SEGRT_OK ? sg_pass_fold_constants(g, &fold, NULL) : s;
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
    /* Outputs whose shapes depend on the inputs' values (NonZero): the
     * graph evaluated on the inputs' data, where the caller gave it in
     * host memory. */
    bool dynamic = false, fed = true;
    for (size_t j = 0; j < n_outputs; j++)
        dynamic |= !sg_shape_is_static(&g->values[g->outputs[j]].shape);
    for (size_t i = 0; i < n_inputs; i++)
        fed &= inputs[i].data != NULL && inputs[i].memory == SEGRT_MEMORY_HOST;
    if (dynamic && fed) {
        sg_status s = with_path(interpret(g, inputs, engine->interpret_max_bytes), g);
        if (s != SEGRT_OK) {
            sg_graph_free(g);
            return s;
        }
    }
    for (size_t j = 0; j < n_outputs; j++) {
        const sg_value *v = &g->values[g->outputs[j]];
        if (!sg_shape_is_static(&v->shape)) {
            char buf[256];
            sg_status s = sg_error(SEGRT_ERROR_SHAPE,
                                   "%s: output `%s` has shape %s, which depends on input data (give the inputs' "
                                   "data, in host memory, to learn it)",
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
    sg_status s = engine->backend->context_create(engine->plan, &c->bc);
    if (s != SEGRT_OK) {
        free(c);
        return with_path(s, engine->g);
    }
    *out = c;
    return SEGRT_OK;
}

void segrt_context_destroy(segrt_context *ctx)
{
    if (!ctx)
        return;
    ctx->engine->backend->context_destroy(ctx->bc);
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

/* The interpreter path, for graphs whose shapes depend on input values:
 * bind the inputs' data as constants to g (specialized for their dims, and
 * consumed) and let constant folding evaluate the graph with the reference
 * kernels, inferring each shape as it goes and dropping intermediates once
 * read. Slower than a plan, and it allocates. */
static sg_status run_interpreted(sg_graph *g, const segrt_tensor *inputs, size_t n_outputs,
                                 segrt_tensor *outputs, int64_t max_bytes)
{
    sg_status s = interpret(g, inputs, max_bytes);
    if (s == SEGRT_OK)
        s = check_outputs(g, n_outputs, outputs, false);
    for (size_t j = 0; j < n_outputs && s == SEGRT_OK; j++) {
        const sg_value *v = &g->values[g->outputs[j]];
        if (!v->data)
            s = sg_error(SEGRT_ERROR_INTERNAL, "output `%s` was not computed", v->name);
        else if (sg_blob_size(v->data))
            memcpy(outputs[j].data, sg_blob_data(v->data), sg_blob_size(v->data));
    }
    s = with_path(s, g);
    sg_graph_free(g);
    return s;
}

/* Inputs and outputs beyond this many would need a heap allocation per run. */
#define SG_MAX_IO SG_MAX_IO_ENGINE

/* The backend's pick for this run's input dims, checked against the
 * caller's output buffers; or *interpret (see context_select). */
static sg_status select_plan(segrt_context *ctx, size_t n_inputs, const segrt_tensor *inputs, size_t n_outputs,
                             const segrt_tensor *outputs, sg_graph **interpret)
{
    const segrt_engine *e = ctx->engine;
    const sg_graph *g = NULL;
    SG_TRY(with_path(e->backend->context_select(ctx->bc, n_inputs, inputs, &g, interpret), e->g));
    if (*interpret)
        return SEGRT_OK;
    return check_outputs(g, n_outputs, outputs, e->backend->device_memory);
}

/* The checks of a run's buffers that segrt_context_run and
 * sg_context_enqueue share: counts, then the inputs. */
static sg_status check_run_buffers(const segrt_engine *e, size_t n_inputs, const segrt_tensor *inputs, size_t n_outputs)
{
    if (n_outputs != (size_t)e->g->n_outputs)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: the model gives %d outputs, given %zu buffers", e->g->path,
                        e->g->n_outputs, n_outputs);
    if (n_inputs > SG_MAX_IO || n_outputs > SG_MAX_IO)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: more than %d inputs or outputs", e->g->path, SG_MAX_IO);
    return check_inputs(e->g, n_inputs, inputs, e->backend->device_memory);
}

sg_status sg_context_enqueue(segrt_context *ctx, size_t n_inputs, const segrt_tensor *inputs, size_t n_outputs,
                             segrt_tensor *outputs, sg_backend_event *after, sg_backend_event *done)
{
    const segrt_engine *e = ctx->engine;
    if (!e->backend->context_enqueue)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: the %s backend does not enqueue runs on a stream",
                        e->g->path, e->backend->name);
    SG_TRY(check_run_buffers(e, n_inputs, inputs, n_outputs));
    sg_graph *interpret = NULL;
    SG_TRY(select_plan(ctx, n_inputs, inputs, n_outputs, outputs, &interpret));
    if (interpret) {
        sg_graph_free(interpret);
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "%s: this model runs interpreted on the CPU, not enqueued on the %s "
                        "backend",
                        e->g->path, e->backend->name);
    }
    return with_path(e->backend->context_enqueue(ctx->bc, inputs, outputs, after, done), e->g);
}

bool sg_context_in_profile(const segrt_context *ctx, size_t n_inputs, const segrt_tensor *inputs)
{
    const segrt_engine *e = ctx->engine;
    return e->backend->plan_in_profile && e->backend->plan_in_profile(e->plan, n_inputs, inputs);
}

sg_status sg_context_finish(segrt_context *ctx)
{
    const sg_backend *b = ctx->engine->backend;
    if (!b->context_finish)
        return SEGRT_OK;
    sg_status s = b->context_finish(ctx->bc);
    return s == SEGRT_OK ? s : sg_error_prefix(s, "%s: ", ctx->engine->g->path);
}

segrt_status segrt_context_run(segrt_context *ctx, size_t n_inputs, const segrt_tensor *inputs, size_t n_outputs,
                               segrt_tensor *outputs)
{
    if (!ctx || (n_outputs && !outputs) || (n_inputs && !inputs))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_context_run: NULL argument");
    const segrt_engine *e = ctx->engine;
    SG_TRY(check_run_buffers(e, n_inputs, inputs, n_outputs));
    sg_graph *interpret = NULL;
    SG_TRY(select_plan(ctx, n_inputs, inputs, n_outputs, outputs, &interpret));
    if (interpret) { /* data-dependent shapes */
        for (size_t i = 0; i < n_inputs; i++)
            if (inputs[i].memory != SEGRT_MEMORY_HOST) {
                sg_graph_free(interpret);
                return sg_error(SEGRT_ERROR_UNSUPPORTED,
                                "%s: this model runs interpreted on the CPU, which needs host inputs", e->g->path);
            }
        return run_interpreted(interpret, inputs, n_outputs, outputs, e->interpret_max_bytes);
    }
    sg_status s = e->backend->context_run(ctx->bc, inputs, outputs);
    return s == SEGRT_OK ? s : sg_error_prefix(s, "%s: ", e->g->path);
}

segrt_status segrt_context_stream(const segrt_context *ctx, void **out)
{
    if (!ctx || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_context_stream: NULL argument");
    const sg_backend *b = ctx->engine->backend;
    *out = b->context_stream ? b->context_stream(ctx->bc) : NULL;
    return SEGRT_OK;
}

segrt_status segrt_context_wait_stream(segrt_context *ctx, void *stream)
{
    if (!ctx)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_context_wait_stream: NULL context");
    const sg_backend *b = ctx->engine->backend;
    if (!b->context_wait_stream)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "segrt_context_wait_stream: a context of a %s engine has no stream to order", b->name);
    return b->context_wait_stream(ctx->bc, stream);
}

sg_status sg_engine_from_plan(const sg_backend *b, sg_graph *g, const segrt_build_options *opts, const void *payload,
                              size_t payload_bytes, uint64_t model_hash, segrt_engine **out)
{
    /* The exported graph keeps its inputs' declared dims: bind the shapes
     * again, as the engine was built with them. */
    sg_status s = bind_options(b, opts, g);
    if (s == SEGRT_OK)
        s = sg_graph_infer(g);
    if (s != SEGRT_OK) {
        sg_graph_free(g);
        return s;
    }
    return engine_new(b, g, opts, payload, payload_bytes, model_hash, false, out);
}

segrt_status segrt_engine_get_info(const segrt_engine *engine, segrt_engine_info *out)
{
    if (!engine || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_engine_get_info: NULL argument");
    memset(out, 0, sizeof *out);
    engine->backend->plan_describe(engine->plan, out);
    return SEGRT_OK;
}

segrt_status segrt_engine_build_report(const segrt_engine *engine, segrt_build_report *out)
{
    if (!engine || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_engine_build_report: NULL argument");
    memset(out, 0, sizeof *out);
    out->backend_seconds = engine->backend_seconds;
    if (engine->backend->plan_report)
        engine->backend->plan_report(engine->plan, out);
    out->graph_seconds = engine->graph_seconds;
    /* A plan built after the engine (CUDA: another shape) adds to both. */
    out->total_seconds = engine->total_seconds + (out->backend_seconds - engine->backend_seconds);
    return SEGRT_OK;
}
