/* The CUDA half of an engine (see engine_cuda.h). */
#include "engine/engine_cuda.h"

#ifdef SEGRT_HAVE_CUDA

#include "backend/cuda/cuda_backend.h"
#include "backend/ref/ref.h"
#include "core/strmap.h"
#include "graph/infer.h"
#include "graph/passes.h"

#include <pthread.h>
#include <string.h>

struct sg_cuda_engine {
    const sg_graph *g;
    segrt_build_options opts; /* a copy; shapes and fp32_ops owned */
    sg_cuda_options copts;
    sg_cuda_weights *weights;
    pthread_mutex_t lock;     /* guards plans and the weight store's growth */
    sg_cuda_plan **plans;
    int32_t n_plans, cap_plans;
};

static sg_eval_fn ref_lookup(sg_op op) { return (sg_eval_fn)sg_ref_kernel(op); }

/* g with the inputs bound to dims[i] (rank[i]), inferred and optimized. */
static sg_status specialize(const sg_graph *g, const int32_t *rank, int64_t (*dims)[SEGRT_MAX_RANK], sg_graph **out)
{
    sg_graph *s = NULL;
    SG_TRY(sg_graph_clone(g, &s));
    sg_status st = SEGRT_OK;
    for (int32_t i = 0; i < g->n_inputs && st == SEGRT_OK; i++)
        st = sg_graph_bind_input_at(s, i, rank[i], dims[i]);
    if (st == SEGRT_OK)
        st = sg_graph_infer(s);
    if (st == SEGRT_OK)
        st = sg_graph_optimize(s, ref_lookup);
    if (st != SEGRT_OK) {
        sg_graph_free(s);
        return st;
    }
    *out = s;
    return SEGRT_OK;
}

static const sg_shape_binding *binding_of(const sg_cuda_engine *ce, const char *name)
{
    for (int32_t i = 0; i < ce->opts.n_shapes; i++)
        if (strcmp(ce->opts.shapes[i].name, name) == 0)
            return &ce->opts.shapes[i];
    return NULL;
}

/* The inputs' dims at the profile's opt (which = 0) or max (1) shape; false
 * when some input dim is neither fixed by the model nor by the profile. */
static bool profile_dims(const sg_cuda_engine *ce, int which, int32_t *rank, int64_t (*dims)[SEGRT_MAX_RANK])
{
    const sg_graph *g = ce->g;
    for (int32_t i = 0; i < g->n_inputs; i++) {
        const sg_value *v = &g->values[g->inputs[i]];
        const sg_shape_binding *b = binding_of(ce, v->name);
        if (b) {
            rank[i] = b->rank;
            memcpy(dims[i], which ? b->max : b->dims, sizeof(int64_t) * (size_t)b->rank);
            continue;
        }
        if (!sg_shape_dims(&v->shape, dims[i]))
            return false;
        rank[i] = v->shape.rank;
    }
    return true;
}

static sg_status seed_weights(sg_cuda_engine *ce, const sg_graph *g, const sg_plan_seed *seed)
{
    if (!seed || !seed->n_weights)
        return SEGRT_OK;
    /* Constants by name, the first of a name winning as a scan would. */
    sg_strmap names;
    sg_strmap_init(&names);
    sg_status s = SEGRT_OK;
    for (int32_t v = 0; v < g->n_values && s == SEGRT_OK; v++)
        if (g->values[v].data && sg_strmap_get(&names, g->values[v].name) < 0)
            s = sg_strmap_put(&names, g->values[v].name, v);
    for (int32_t i = 0; i < seed->n_weights && s == SEGRT_OK; i++) {
        const sg_plan_weight *w = &seed->weights[i];
        int32_t v = sg_strmap_get(&names, w->value);
        if (v < 0)
            s = sg_error(SEGRT_ERROR_INVALID_MODEL, "the plan's weights name `%s`, which its graph does not hold",
                         w->value);
        else
            s = sg_cuda_weights_seed(ce->weights, g->values[v].data, w->tag, w->data, w->size);
    }
    sg_strmap_free(&names);
    return s;
}

/* Compiles the plan for dims and adds it; the caller holds the lock. */
static sg_status add_plan(sg_cuda_engine *ce, const int32_t *rank, int64_t (*dims)[SEGRT_MAX_RANK],
                          const sg_plan_seed *seed, sg_cuda_plan **out, sg_graph **interpret)
{
    sg_graph *s = NULL;
    SG_TRY(specialize(ce->g, rank, dims, &s));
    if (!sg_graph_is_static(s)) {
        if (interpret && ce->copts.allow_cpu_fallback) {
            *interpret = s;
            return SEGRT_OK;
        }
        sg_graph_free(s);
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "the model's shapes depend on input values, which a CUDA plan cannot compile "
                        "(--allow-cpu-fallback interprets such models on the CPU)");
    }
    sg_status st = seed_weights(ce, s, seed);
    sg_cuda_plan *p = NULL;
    if (st == SEGRT_OK)
        st = sg_cuda_plan_build(s, &ce->copts, ce->weights, seed ? seed->choices : NULL, &p);
    sg_graph_free(s);
    if (st == SEGRT_OK)
        st = sg_grow((void **)&ce->plans, &ce->cap_plans, ce->n_plans + 1, sizeof *ce->plans);
    if (st != SEGRT_OK) {
        sg_cuda_plan_free(p);
        return st;
    }
    ce->plans[ce->n_plans++] = p;
    *out = p;
    return SEGRT_OK;
}

static sg_status copy_options(segrt_build_options *dst, const segrt_build_options *src)
{
    *dst = *src;
    dst->shapes = NULL;
    dst->fp32_ops = NULL;
    dst->n_shapes = dst->cap_shapes = 0;
    if (src->fp32_ops && !(dst->fp32_ops = sg_strdup(src->fp32_ops)))
        return SEGRT_ERROR_OUT_OF_MEMORY;
    if (src->n_shapes) {
        dst->shapes = sg_calloc((size_t)src->n_shapes, sizeof *dst->shapes);
        if (!dst->shapes)
            return SEGRT_ERROR_OUT_OF_MEMORY;
        dst->cap_shapes = src->n_shapes;
        for (int32_t i = 0; i < src->n_shapes; i++) {
            dst->shapes[i] = src->shapes[i];
            if (!(dst->shapes[i].name = sg_strdup(src->shapes[i].name)))
                return SEGRT_ERROR_OUT_OF_MEMORY;
            dst->n_shapes++;
        }
    }
    return SEGRT_OK;
}

sg_status sg_cuda_engine_new(const sg_graph *g, const segrt_build_options *opts, const sg_plan_seed *seed,
                             sg_cuda_engine **out)
{
    int32_t n_dev = 0;
    segrt_cuda_device_count(&n_dev);
    if (opts->device_index >= n_dev)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "CUDA device %d does not exist (this machine has %d)",
                        opts->device_index, n_dev);
    sg_cuda_engine *ce = sg_calloc(1, sizeof *ce);
    if (!ce)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    ce->g = g;
    pthread_mutex_init(&ce->lock, NULL);
    sg_status s = copy_options(&ce->opts, opts);
    ce->copts.device = opts->device_index;
    ce->copts.precision = opts->precision;
    ce->copts.allow_cpu_fallback = opts->allow_cpu_fallback;
    ce->copts.workspace_limit = opts->workspace ? opts->workspace : SG_DEFAULT_WORKSPACE;
    ce->copts.fp32_ops = ce->opts.fp32_ops;
    ce->copts.autotune = opts->autotune < 0 ? SG_DEFAULT_AUTOTUNE : opts->autotune;
    ce->copts.disabled_kernels = opts->disabled_kernels; /* issue 37: the kernel switches */
    if (s == SEGRT_OK)
        s = sg_cuda_weights_new(opts->device_index, &ce->weights);
    int32_t rank[SG_MAX_IO_ENGINE];
    int64_t dims[SG_MAX_IO_ENGINE][SEGRT_MAX_RANK];
    if (s == SEGRT_OK && g->n_inputs > SG_MAX_IO_ENGINE)
        s = sg_error(SEGRT_ERROR_UNSUPPORTED, "more than %d inputs", SG_MAX_IO_ENGINE);
    /* The opt shape's plan now (so that errors show at build), and the max
     * shape's, which sizes every context's memory. */
    sg_cuda_plan *p;
    if (s == SEGRT_OK && profile_dims(ce, 0, rank, dims))
        s = add_plan(ce, rank, dims, seed, &p, NULL);
    if (s == SEGRT_OK && ce->n_plans && profile_dims(ce, 1, rank, dims)) {
        const sg_graph *pg = sg_cuda_plan_graph(ce->plans[0]);
        bool same = true;
        for (int32_t i = 0; i < g->n_inputs && same; i++) {
            const sg_shape *sh = &pg->values[pg->inputs[i]].shape;
            for (int32_t d = 0; d < sh->rank; d++)
                same &= sh->d[d].size == dims[i][d];
        }
        if (!same)
            s = add_plan(ce, rank, dims, NULL, &p, NULL);
    }
    if (s != SEGRT_OK) {
        sg_cuda_engine_free(ce);
        return s;
    }
    *out = ce;
    return SEGRT_OK;
}

void sg_cuda_engine_free(sg_cuda_engine *ce)
{
    if (!ce)
        return;
    for (int32_t i = 0; i < ce->n_plans; i++)
        sg_cuda_plan_free(ce->plans[i]);
    free(ce->plans);
    sg_cuda_weights_free(ce->weights);
    for (int32_t i = 0; i < ce->opts.n_shapes; i++)
        free(ce->opts.shapes[i].name);
    free(ce->opts.shapes);
    free(ce->opts.fp32_ops);
    pthread_mutex_destroy(&ce->lock);
    free(ce);
}

static bool plan_fits(const sg_cuda_plan *p, size_t n_inputs, const segrt_tensor *inputs)
{
    const sg_graph *g = sg_cuda_plan_graph(p);
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

/* Whether t's dims lie within binding b's (from min to max). */
static bool binding_holds(const sg_shape_binding *b, const segrt_tensor *t)
{
    if (t->rank != b->rank)
        return false;
    for (int32_t d = 0; d < b->rank; d++)
        if (t->dims[d] < b->min[d] || t->dims[d] > b->max[d])
            return false;
    return true;
}

/* A run's dims must lie in the profile of ranged inputs. */
static sg_status check_profile(const sg_cuda_engine *ce, size_t n_inputs, const segrt_tensor *inputs)
{
    for (size_t i = 0; i < n_inputs; i++) {
        const sg_value *v = &ce->g->values[ce->g->inputs[i]];
        const sg_shape_binding *b = binding_of(ce, v->name);
        if (!b || !b->ranged)
            continue;
        if (!binding_holds(b, &inputs[i])) {
            char given[256], lo[256], hi[256];
            int32_t r = inputs[i].rank < 0 || inputs[i].rank > SEGRT_MAX_RANK ? 0 : inputs[i].rank;
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "input `%s` is %s, outside the plan's profile: from %s to %s", v->name,
                            sg_dims_format(inputs[i].dims, r, given, sizeof given),
                            sg_dims_format(b->min, b->rank, lo, sizeof lo),
                            sg_dims_format(b->max, b->rank, hi, sizeof hi));
        }
    }
    return SEGRT_OK;
}

sg_status sg_cuda_engine_plan(sg_cuda_engine *ce, const sg_graph *g, size_t n_inputs, const segrt_tensor *inputs,
                              const sg_cuda_plan **out, sg_graph **interpret)
{
    (void)g;
    *interpret = NULL;
    SG_TRY(check_profile(ce, n_inputs, inputs));
    pthread_mutex_lock(&ce->lock);
    for (int32_t i = 0; i < ce->n_plans; i++)
        if (plan_fits(ce->plans[i], n_inputs, inputs)) {
            *out = ce->plans[i];
            pthread_mutex_unlock(&ce->lock);
            return SEGRT_OK;
        }
    int32_t rank[SG_MAX_IO_ENGINE];
    int64_t dims[SG_MAX_IO_ENGINE][SEGRT_MAX_RANK];
    for (size_t i = 0; i < n_inputs; i++) {
        rank[i] = inputs[i].rank;
        memcpy(dims[i], inputs[i].dims, sizeof dims[i]);
    }
    sg_cuda_plan *p = NULL;
    sg_status s = add_plan(ce, rank, dims, NULL, &p, interpret);
    pthread_mutex_unlock(&ce->lock);
    if (s == SEGRT_OK && !*interpret)
        *out = p;
    return s;
}

sg_status sg_cuda_engine_exec_new(sg_cuda_engine *ce, sg_cuda_exec **out)
{
    pthread_mutex_lock(&ce->lock);
    sg_status s = sg_cuda_exec_create(ce->copts.device, (const sg_cuda_plan *const *)ce->plans, ce->n_plans, out);
    pthread_mutex_unlock(&ce->lock);
    return s;
}

sg_status sg_cuda_engine_run(sg_cuda_exec *x, const sg_cuda_plan *p, const segrt_tensor *inputs,
                             segrt_tensor *outputs)
{
    return sg_cuda_exec_run(x, p, inputs, outputs);
}

sg_status sg_cuda_engine_enqueue(sg_cuda_exec *x, const sg_cuda_plan *p, const segrt_tensor *inputs,
                                 segrt_tensor *outputs, struct CUevent_st *after, struct CUevent_st *done)
{
    return sg_cuda_exec_enqueue(x, p, inputs, outputs, after, done);
}

sg_status sg_cuda_engine_finish(sg_cuda_exec *x) { return sg_cuda_exec_finish(x); }

void sg_cuda_engine_exec_free(sg_cuda_exec *x) { sg_cuda_exec_free(x); }
sg_status sg_cuda_engine_exec_profile(sg_cuda_exec *x, bool on) { return sg_cuda_exec_profile(x, on); }
void sg_cuda_engine_exec_profile_print(const sg_cuda_exec *x, FILE *f) { sg_cuda_exec_profile_print(x, f); }

bool sg_cuda_engine_ranged(const sg_cuda_engine *ce, size_t n_inputs, const segrt_tensor *inputs)
{
    if (n_inputs == 0 || n_inputs != (size_t)ce->g->n_inputs)
        return false;
    for (size_t i = 0; i < n_inputs; i++) {
        const sg_shape_binding *b = binding_of(ce, ce->g->values[ce->g->inputs[i]].name);
        if (!b || !b->ranged || !binding_holds(b, &inputs[i]))
            return false;
    }
    return true;
}

const sg_cuda_plan *sg_cuda_engine_first_plan(sg_cuda_engine *ce)
{
    pthread_mutex_lock(&ce->lock);
    const sg_cuda_plan *p = ce->n_plans ? ce->plans[0] : NULL;
    pthread_mutex_unlock(&ce->lock);
    return p;
}

void sg_cuda_engine_info(sg_cuda_engine *ce, segrt_engine_info *out)
{
    out->device = SEGRT_DEVICE_CUDA;
    out->device_index = ce->copts.device;
    out->precision = ce->copts.precision;
    pthread_mutex_lock(&ce->lock);
    out->weight_bytes = sg_cuda_weights_bytes(ce->weights);
    for (int32_t i = 0; i < ce->n_plans; i++) {
        sg_cuda_plan_info pi;
        sg_cuda_plan_get_info(ce->plans[i], &pi);
        if (pi.arena_bytes > out->arena_bytes)
            out->arena_bytes = pi.arena_bytes;
        if (pi.workspace_bytes > out->workspace_bytes)
            out->workspace_bytes = pi.workspace_bytes;
        if (i == 0) {
            out->steps = pi.steps;
            out->fallback_steps = pi.fallback_steps;
        }
    }
    out->plans = ce->n_plans;
    pthread_mutex_unlock(&ce->lock);
}

const segrt_build_options *sg_cuda_engine_options(const sg_cuda_engine *ce) { return &ce->opts; }

const sg_graph *sg_cuda_engine_plan_graph(const sg_cuda_plan *p) { return sg_cuda_plan_graph(p); }
sg_cuda_weights *sg_cuda_engine_weights(const sg_cuda_engine *ce) { return ce->weights; }

#else /* no CUDA: engines on a CUDA device cannot be built */

sg_status sg_cuda_engine_new(const sg_graph *g, const segrt_build_options *opts, const sg_plan_seed *seed,
                             sg_cuda_engine **out)
{
    (void)g;
    (void)opts;
    (void)seed;
    (void)out;
    return sg_error(SEGRT_ERROR_UNSUPPORTED, "this segrt was built without CUDA");
}

void sg_cuda_engine_free(sg_cuda_engine *ce) { (void)ce; }

sg_status sg_cuda_engine_plan(sg_cuda_engine *ce, const sg_graph *g, size_t n_inputs, const segrt_tensor *inputs,
                              const struct sg_cuda_plan **out, sg_graph **interpret)
{
    (void)ce, (void)g, (void)n_inputs, (void)inputs, (void)out, (void)interpret;
    return sg_error(SEGRT_ERROR_UNSUPPORTED, "this segrt was built without CUDA");
}

sg_status sg_cuda_engine_exec_new(sg_cuda_engine *ce, struct sg_cuda_exec **out)
{
    (void)ce, (void)out;
    return sg_error(SEGRT_ERROR_UNSUPPORTED, "this segrt was built without CUDA");
}

sg_status sg_cuda_engine_run(struct sg_cuda_exec *x, const struct sg_cuda_plan *p, const segrt_tensor *inputs,
                             segrt_tensor *outputs)
{
    (void)x, (void)p, (void)inputs, (void)outputs;
    return sg_error(SEGRT_ERROR_UNSUPPORTED, "this segrt was built without CUDA");
}

sg_status sg_cuda_engine_enqueue(struct sg_cuda_exec *x, const struct sg_cuda_plan *p, const segrt_tensor *inputs,
                                 segrt_tensor *outputs, struct CUevent_st *after, struct CUevent_st *done)
{
    (void)x, (void)p, (void)inputs, (void)outputs, (void)after, (void)done;
    return sg_error(SEGRT_ERROR_UNSUPPORTED, "this segrt was built without CUDA");
}

sg_status sg_cuda_engine_finish(struct sg_cuda_exec *x)
{
    (void)x;
    return SEGRT_OK;
}

void sg_cuda_engine_exec_free(struct sg_cuda_exec *x) { (void)x; }
sg_status sg_cuda_engine_exec_profile(struct sg_cuda_exec *x, bool on)
{
    (void)x, (void)on;
    return SEGRT_OK;
}
void sg_cuda_engine_exec_profile_print(const struct sg_cuda_exec *x, FILE *f) { (void)x, (void)f; }
bool sg_cuda_engine_ranged(const sg_cuda_engine *ce, size_t n_inputs, const segrt_tensor *inputs)
{
    (void)ce, (void)n_inputs, (void)inputs;
    return false;
}
const struct sg_cuda_plan *sg_cuda_engine_first_plan(sg_cuda_engine *ce)
{
    (void)ce;
    return NULL;
}
void sg_cuda_engine_info(sg_cuda_engine *ce, segrt_engine_info *out) { (void)ce, (void)out; }
const segrt_build_options *sg_cuda_engine_options(const sg_cuda_engine *ce)
{
    (void)ce;
    return NULL;
}
const sg_graph *sg_cuda_engine_plan_graph(const struct sg_cuda_plan *p)
{
    (void)p;
    return NULL;
}

#endif
