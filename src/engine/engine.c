/* Engines and contexts.
 *
 * This first engine runs on the CPU through the reference backend: a run
 * binds the inputs' dims to a copy of the optimized graph, attaches the
 * input data as constants and lets constant folding evaluate everything,
 * releasing each intermediate as soon as its last reader is done. It is
 * the oracle, not the fast path: the optimized CPU (oneDNN) and CUDA
 * engines plug in behind the same handles. */
#include "backend/ref/ref.h"
#include "engine/api_internal.h"
#include "graph/infer.h"
#include "graph/passes.h"

#include <string.h>

struct segrt_engine {
    sg_graph *g; /* optimized for the build options' shapes; never modified */
    int32_t threads;
};

struct segrt_context {
    const segrt_engine *engine;
};

static sg_eval_fn ref_lookup(sg_op op) { return (sg_eval_fn)sg_ref_kernel(op); }

segrt_status segrt_engine_build(const segrt_model *model, const segrt_build_options *opts,
                                segrt_engine **out)
{
    if (!model || !out)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_engine_build: model and out must not be NULL");
    if (opts && opts->device != SEGRT_DEVICE_CPU)
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "%s: this version of segrt runs models on the CPU only; the CUDA engine is "
                        "not implemented yet",
                        model->g->path);
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
    *out = e;
    return SEGRT_OK;
}

void segrt_engine_destroy(segrt_engine *engine)
{
    if (!engine)
        return;
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
static sg_status specialize(const segrt_engine *e, size_t n_inputs, const segrt_tensor *inputs,
                            sg_graph **out)
{
    const sg_graph *eg = e->g;
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
        if (inputs[i].memory != SEGRT_MEMORY_HOST)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "%s: input `%s` is in device memory, which a CPU engine cannot read",
                            eg->path, v->name);
    }
    sg_graph *g;
    SG_TRY(sg_graph_clone(eg, &g));
    sg_status s = SEGRT_OK;
    for (size_t i = 0; i < n_inputs && s == SEGRT_OK; i++)
        s = sg_graph_bind_input(g, g->values[g->inputs[i]].name, inputs[i].rank, inputs[i].dims);
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
    sg_graph *g;
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
    *out = c;
    return SEGRT_OK;
}

void segrt_context_destroy(segrt_context *ctx) { free(ctx); }

static sg_status attach_inputs(sg_graph *g, const segrt_tensor *inputs)
{
    for (int32_t i = 0; i < g->n_inputs; i++) {
        sg_value *v = &g->values[g->inputs[i]];
        sg_tensor t = sg_value_tensor(v);
        size_t bytes = sg_tensor_bytes(&t);
        if (bytes && !inputs[i].data)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "input `%s` has no data", v->name);
        SG_TRY(sg_blob_new(bytes, false, &v->data));
        if (bytes)
            memcpy(sg_blob_data(v->data), inputs[i].data, bytes);
    }
    return SEGRT_OK;
}

static sg_status copy_outputs(const sg_graph *g, size_t n_outputs, segrt_tensor *outputs)
{
    for (size_t j = 0; j < n_outputs; j++) {
        const sg_value *v = &g->values[g->outputs[j]];
        segrt_tensor *o = &outputs[j];
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
                            sg_dims_format(o->dims, o->rank < 0 ? 0 : o->rank, b, sizeof b));
        }
        if (o->memory != SEGRT_MEMORY_HOST)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "%s: output `%s` is in device memory, which a CPU engine cannot write",
                            g->path, v->name);
        if (!v->data)
            return sg_error(SEGRT_ERROR_INTERNAL, "%s: output `%s` was not computed", g->path, v->name);
        size_t bytes = sg_blob_size(v->data);
        if (bytes && !o->data)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "output `%s` has no buffer", v->name);
        if (bytes)
            memcpy(o->data, sg_blob_data(v->data), bytes);
    }
    return SEGRT_OK;
}

segrt_status segrt_context_run(segrt_context *ctx, size_t n_inputs, const segrt_tensor *inputs,
                               size_t n_outputs, segrt_tensor *outputs)
{
    if (!ctx || (n_outputs && !outputs))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_context_run: NULL argument");
    const segrt_engine *e = ctx->engine;
    if (n_outputs != (size_t)e->g->n_outputs)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: the model gives %d outputs, given %zu buffers",
                        e->g->path, e->g->n_outputs, n_outputs);
    sg_graph *g;
    SG_TRY(specialize(e, n_inputs, inputs, &g));
    sg_fold_options fold = {ref_lookup, 0, true};
    sg_status s = attach_inputs(g, inputs);
    if (s == SEGRT_OK)
        s = sg_pass_fold_constants(g, &fold, NULL);
    if (s == SEGRT_OK)
        s = copy_outputs(g, n_outputs, outputs);
    if (s != SEGRT_OK && strncmp(sg_last_error(), g->path, strlen(g->path)) != 0)
        s = sg_error_prefix(s, "%s: ", g->path);
    sg_graph_free(g);
    return s;
}
