/* The CUDA backend behind the one interface (backend/backend.h).
 *
 * A plan (an sg_cuda_engine) holds the options it was built with, the
 * shape profile, the weight store and the plans compiled so far: the
 * profile's opt and max shapes at build, other shapes on their first run.
 * Compiled plans are never freed before the engine, so contexts keep
 * pointers to them. A context is an executor (stream, handles, arena,
 * staging) and the compiled plan its last select picked.
 *
 * The payload of a plan file: the per-layer choices of the first plan and
 * the weights converted for it,
 *     u32 choices, each: u32 n + key, u64 n + bytes
 *     u32 weights, each: u32 n + value name, u32 n + tag, u64 n + bytes */
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/kernel_switches.h"
#include "backend/ref/ref.h"
#include "core/bytes.h"
#include "core/strmap.h"
#include "graph/infer.h"
#include "graph/passes.h"

#include <pthread.h>
#include <string.h>

/* The defaults where the options leave them (engine/api_internal.h's). */
#define CUDA_DEFAULT_WORKSPACE ((size_t)1 << 30)
#define CUDA_DEFAULT_AUTOTUNE 8

typedef struct sg_cuda_engine {
    const sg_graph *g;
    sg_shape_binding *shapes; /* a copy of the options' */
    int32_t n_shapes;
    char *fp32_ops;
    sg_cuda_options copts;
    sg_cuda_weights *weights;
    pthread_mutex_t lock; /* guards plans and the weight store's growth */
    sg_cuda_plan **plans;
    int32_t n_plans, cap_plans;
    segrt_build_report report; /* the plans' builds (backend_seconds: of those after plan_build) */
    bool built;                /* plan_build has returned: later plans are built on a run */
} sg_cuda_engine;

/* What a plan file's payload supplies: per-layer choices and converted
 * weights (data borrowed from the payload). */
typedef struct plan_weight {
    char *value, *tag;
    const void *data;
    size_t size;
} plan_weight;

typedef struct plan_seed {
    sg_cuda_plan *choices; /* a holder made by sg_cuda_plan_choices_new */
    plan_weight *weights;
    int32_t n_weights;
} plan_seed;

struct sg_backend_context {
    sg_cuda_engine *ce;
    sg_cuda_exec *x;
    const sg_cuda_plan *pick;
};

static sg_eval_fn ref_lookup(sg_op op)
{
    return (sg_eval_fn)sg_ref_kernel(op);
}

static sg_cuda_engine *engine_of(sg_backend_plan *p)
{
    return (sg_cuda_engine *)p;
}

static bool cuda_supports(const sg_graph *g, const sg_node *n, const sg_backend_options *o, const char **why)
{
    (void)g;
    if (sg_cuda_plan_has_op(n->op))
        return true;
    if (!o->allow_cpu_fallback) {
        *why = "the CUDA backend has no kernel for this operator; the GPU cannot run it (--allow-cpu-fallback "
               "runs such nodes on the CPU)";
        return false;
    }
    if (sg_ref_kernel(n->op))
        return true;
    *why = "no kernel on the GPU or the CPU";
    return false;
}

/* g with the inputs bound to dims[i] (rank[i]), inferred and optimized;
 * its attention chains fused unless opts turn that off (the engine fused
 * them where the model's shapes were known; here their dims are). */
static sg_status specialize(const sg_graph *g, const sg_cuda_options *opts, const int32_t *rank,
                            int64_t (*dims)[SEGRT_MAX_RANK], sg_graph **out)
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
    int32_t fused = 0;
    if (st == SEGRT_OK && !(opts->disabled_kernels & SG_KERNEL_BIT(SG_KERNEL_FUSED_ATTENTION)))
        st = sg_pass_fuse_attention(s, &fused);
    if (st == SEGRT_OK && fused)
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
    for (int32_t i = 0; i < ce->n_shapes; i++)
        if (strcmp(ce->shapes[i].name, name) == 0)
            return &ce->shapes[i];
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

static sg_status seed_weights(sg_cuda_engine *ce, const sg_graph *g, const plan_seed *seed)
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
        const plan_weight *w = &seed->weights[i];
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
                          const plan_seed *seed, sg_cuda_plan **out, sg_graph **interpret)
{
    double t0 = sg_now_seconds();
    sg_graph *s = NULL;
    SG_TRY(specialize(ce->g, &ce->copts, rank, dims, &s));
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
    /* Every node of this specialization is asked before compiling it. */
    sg_backend_options o = {.allow_cpu_fallback = ce->copts.allow_cpu_fallback};
    sg_status st = SEGRT_OK;
    for (int32_t i = 0; i < s->n_nodes && st == SEGRT_OK; i++) {
        const char *why = NULL;
        if (!s->nodes[i].dead && !cuda_supports(s, &s->nodes[i], &o, &why))
            st = sg_node_error(&s->nodes[i], SEGRT_ERROR_UNSUPPORTED, "%s", why);
    }
    if (st == SEGRT_OK)
        st = seed_weights(ce, s, seed);
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
    sg_report_add(&ce->report, sg_cuda_plan_report(p));
    if (ce->built)
        ce->report.backend_seconds += sg_now_seconds() - t0;
    *out = p;
    return SEGRT_OK;
}

static sg_status copy_options(sg_cuda_engine *ce, const sg_backend_options *o)
{
    if (o->fp32_ops && !(ce->fp32_ops = sg_strdup(o->fp32_ops)))
        return SEGRT_ERROR_OUT_OF_MEMORY;
    if (o->n_shapes) {
        ce->shapes = sg_calloc((size_t)o->n_shapes, sizeof *ce->shapes);
        if (!ce->shapes)
            return SEGRT_ERROR_OUT_OF_MEMORY;
        for (int32_t i = 0; i < o->n_shapes; i++) {
            ce->shapes[i] = o->shapes[i];
            if (!(ce->shapes[i].name = sg_strdup(o->shapes[i].name)))
                return SEGRT_ERROR_OUT_OF_MEMORY;
            ce->n_shapes++;
        }
    }
    return SEGRT_OK;
}

static void seed_free(plan_seed *seed)
{
    sg_cuda_plan_free(seed->choices);
    for (int32_t i = 0; i < seed->n_weights; i++) {
        free(seed->weights[i].value);
        free(seed->weights[i].tag);
    }
    free(seed->weights);
}

static sg_status payload_read(const void *payload, size_t n, plan_seed *seed)
{
    sg_rbuf r = {payload, n, 0, false};
    SG_TRY(sg_cuda_plan_choices_new(&seed->choices));
    uint32_t nc = sg_rbuf_u32(&r);
    for (uint32_t i = 0; i < nc && !r.bad; i++) {
        char *key = sg_rbuf_str(&r);
        uint64_t dn = sg_rbuf_u64(&r);
        const void *d = sg_rbuf_take(&r, dn);
        sg_status s = key && d ? sg_cuda_plan_choices_add(seed->choices, key, d, (size_t)dn) : SEGRT_OK;
        free(key);
        SG_TRY(s);
    }
    uint32_t nw = sg_rbuf_u32(&r);
    if (!r.bad && nw > r.n / 16)
        r.bad = true;
    if (!r.bad && nw) {
        seed->weights = sg_calloc(nw, sizeof *seed->weights);
        if (!seed->weights)
            return SEGRT_ERROR_OUT_OF_MEMORY;
    }
    for (uint32_t i = 0; i < nw && !r.bad; i++) {
        plan_weight *w = &seed->weights[seed->n_weights++];
        w->value = sg_rbuf_str(&r);
        w->tag = sg_rbuf_str(&r);
        uint64_t wn = sg_rbuf_u64(&r);
        w->data = sg_rbuf_take(&r, wn);
        w->size = (size_t)wn;
    }
    if (r.bad || r.at != r.n)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "the plan's payload is malformed");
    return SEGRT_OK;
}

static void cuda_plan_free(sg_backend_plan *bp)
{
    sg_cuda_engine *ce = engine_of(bp);
    if (!ce)
        return;
    for (int32_t i = 0; i < ce->n_plans; i++)
        sg_cuda_plan_free(ce->plans[i]);
    free(ce->plans);
    sg_cuda_weights_free(ce->weights);
    for (int32_t i = 0; i < ce->n_shapes; i++)
        free(ce->shapes[i].name);
    free(ce->shapes);
    free(ce->fp32_ops);
    pthread_mutex_destroy(&ce->lock);
    free(ce);
}

static sg_status cuda_plan_build(const sg_graph *g, const sg_backend_options *o, const void *payload,
                                 size_t payload_bytes, sg_backend_plan **out)
{
    int32_t n_dev = 0;
    segrt_cuda_device_count(&n_dev);
    if (o->device >= n_dev)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "CUDA device %d does not exist (this machine has %d)", o->device,
                        n_dev);
    plan_seed seed = {0};
    sg_status s = payload ? payload_read(payload, payload_bytes, &seed) : SEGRT_OK;
    sg_cuda_engine *ce = s == SEGRT_OK ? sg_calloc(1, sizeof *ce) : NULL;
    if (s == SEGRT_OK && !ce)
        s = SEGRT_ERROR_OUT_OF_MEMORY;
    if (s != SEGRT_OK) {
        seed_free(&seed);
        return s;
    }
    ce->g = g;
    pthread_mutex_init(&ce->lock, NULL);
    s = copy_options(ce, o);
    ce->copts.device = o->device;
    ce->copts.precision = o->precision;
    ce->copts.allow_cpu_fallback = o->allow_cpu_fallback;
    ce->copts.workspace_limit = o->workspace ? o->workspace : CUDA_DEFAULT_WORKSPACE;
    ce->copts.fp32_ops = ce->fp32_ops;
    ce->copts.autotune = o->autotune < 0 ? CUDA_DEFAULT_AUTOTUNE : o->autotune;
    ce->copts.disabled_kernels = o->disabled_kernels;
    ce->copts.target_cc = o->target_cc;
    if (s == SEGRT_OK)
        s = sg_cuda_weights_new(o->device, &ce->weights);
    int32_t rank[SG_MAX_IO_BACKEND];
    int64_t dims[SG_MAX_IO_BACKEND][SEGRT_MAX_RANK];
    if (s == SEGRT_OK && g->n_inputs > SG_MAX_IO_BACKEND)
        s = sg_error(SEGRT_ERROR_UNSUPPORTED, "more than %d inputs", SG_MAX_IO_BACKEND);
    /* The opt shape's plan now (so that errors show at build), and the max
     * shape's, which sizes every context's memory. */
    sg_cuda_plan *p;
    if (s == SEGRT_OK && profile_dims(ce, 0, rank, dims))
        s = add_plan(ce, rank, dims, payload ? &seed : NULL, &p, NULL);
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
    seed_free(&seed);
    if (s != SEGRT_OK) {
        cuda_plan_free((sg_backend_plan *)ce);
        return s;
    }
    ce->built = true;
    *out = (sg_backend_plan *)ce;
    return SEGRT_OK;
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
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "input `%s` is %s, outside the plan's profile: from %s to %s",
                            v->name, sg_dims_format(inputs[i].dims, r, given, sizeof given),
                            sg_dims_format(b->min, b->rank, lo, sizeof lo),
                            sg_dims_format(b->max, b->rank, hi, sizeof hi));
        }
    }
    return SEGRT_OK;
}

/* The compiled plan for these inputs' dims: compiled already, or now (once
 * per engine); *interpret instead, as context_select says. */
static sg_status engine_plan(sg_cuda_engine *ce, size_t n_inputs, const segrt_tensor *inputs, const sg_cuda_plan **out,
                             sg_graph **interpret)
{
    *interpret = NULL;
    SG_TRY(check_profile(ce, n_inputs, inputs));
    pthread_mutex_lock(&ce->lock);
    for (int32_t i = 0; i < ce->n_plans; i++)
        if (plan_fits(ce->plans[i], n_inputs, inputs)) {
            *out = ce->plans[i];
            pthread_mutex_unlock(&ce->lock);
            return SEGRT_OK;
        }
    int32_t rank[SG_MAX_IO_BACKEND];
    int64_t dims[SG_MAX_IO_BACKEND][SEGRT_MAX_RANK];
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

static bool cuda_plan_in_profile(const sg_backend_plan *bp, size_t n_inputs, const segrt_tensor *inputs)
{
    const sg_cuda_engine *ce = (const sg_cuda_engine *)bp;
    if (n_inputs == 0 || n_inputs != (size_t)ce->g->n_inputs)
        return false;
    for (size_t i = 0; i < n_inputs; i++) {
        const sg_shape_binding *b = binding_of(ce, ce->g->values[ce->g->inputs[i]].name);
        if (!b || !b->ranged || !binding_holds(b, &inputs[i]))
            return false;
    }
    return true;
}

static void cuda_plan_report(sg_backend_plan *bp, segrt_build_report *out)
{
    sg_cuda_engine *ce = engine_of(bp);
    pthread_mutex_lock(&ce->lock);
    sg_report_add(out, &ce->report);
    pthread_mutex_unlock(&ce->lock);
}

static void cuda_plan_describe(sg_backend_plan *bp, segrt_engine_info *out)
{
    sg_cuda_engine *ce = engine_of(bp);
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

/* The first plan's choices and the weights converted for it. */
static sg_status cuda_payload_save(sg_backend_plan *bp, void **bytes, size_t *n)
{
    sg_cuda_engine *ce = engine_of(bp);
    pthread_mutex_lock(&ce->lock);
    const sg_cuda_plan *first = ce->n_plans ? ce->plans[0] : NULL;
    pthread_mutex_unlock(&ce->lock);
    if (!first)
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "the engine has no compiled plan (bind the inputs' shapes with --shape to build one)");
    sg_wbuf w = {0};
    int32_t nc = sg_cuda_plan_choice_count(first);
    sg_wbuf_u32(&w, (uint32_t)nc);
    for (int32_t i = 0; i < nc; i++) {
        const char *key;
        const void *data;
        size_t size;
        sg_cuda_plan_choice(first, i, &key, &data, &size);
        sg_wbuf_blob32(&w, key, strlen(key));
        sg_wbuf_blob64(&w, data, size);
    }
    const sg_cuda_weights *ws = ce->weights;
    const sg_graph *pg = sg_cuda_plan_graph(first);
    int32_t nw = sg_cuda_weights_count(ws), kept = 0;
    size_t count_at = w.n;
    sg_wbuf_u32(&w, 0);
    const char **names = NULL;
    sg_status s = sg_cuda_weights_names(ws, pg, &names);
    for (int32_t i = 0; i < nw && s == SEGRT_OK; i++) {
        const char *value, *tag;
        void *host = NULL;
        size_t size = 0;
        s = sg_cuda_weights_entry(ws, names, i, &value, &tag, &host, &size);
        if (s != SEGRT_OK || !value)
            continue;
        sg_wbuf_blob32(&w, value, strlen(value));
        sg_wbuf_blob32(&w, tag, strlen(tag));
        sg_wbuf_blob64(&w, host, size);
        free(host);
        kept++;
    }
    free(names);
    if (s == SEGRT_OK && w.failed)
        s = SEGRT_ERROR_OUT_OF_MEMORY;
    if (s != SEGRT_OK) {
        free(w.b);
        return s;
    }
    memcpy(w.b + count_at, &kept, 4);
    *bytes = w.b;
    *n = w.n;
    return SEGRT_OK;
}

static const sg_backend_key cuda_keys[] = {
    {"gpu", "GPU"}, {"compute", "compute capability"}, {"cuda", "CUDA runtime"}, {"cudnn", "cuDNN version"},
    {NULL, NULL},
};

static sg_status cuda_identity(int32_t device, char *buf, size_t cap)
{
    sg_cuda_identity id;
    SG_TRY(sg_cuda_identity_get(device, &id));
    snprintf(buf, cap, "gpu=%s\ncompute=%d.%d\ncuda=%d\ncudnn=%d\n", id.gpu, id.cc_major, id.cc_minor, id.cuda_runtime,
             id.cudnn);
    return SEGRT_OK;
}

static sg_status cuda_context_create(sg_backend_plan *bp, sg_backend_context **out)
{
    sg_cuda_engine *ce = engine_of(bp);
    sg_backend_context *c = sg_calloc(1, sizeof *c);
    if (!c)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    c->ce = ce;
    pthread_mutex_lock(&ce->lock);
    sg_status s = sg_cuda_exec_create(ce->copts.device, (const sg_cuda_plan *const *)ce->plans, ce->n_plans, &c->x);
    pthread_mutex_unlock(&ce->lock);
    if (s != SEGRT_OK) {
        free(c);
        return s;
    }
    *out = c;
    return SEGRT_OK;
}

static void cuda_context_destroy(sg_backend_context *c)
{
    if (!c)
        return;
    sg_cuda_exec_free(c->x);
    free(c);
}

static sg_status cuda_context_select(sg_backend_context *c, size_t n_inputs, const segrt_tensor *inputs,
                                     const sg_graph **g, sg_graph **interpret)
{
    c->pick = NULL;
    *g = NULL;
    const sg_cuda_plan *p = NULL;
    SG_TRY(engine_plan(c->ce, n_inputs, inputs, &p, interpret));
    if (*interpret)
        return SEGRT_OK;
    c->pick = p;
    *g = sg_cuda_plan_graph(p);
    return SEGRT_OK;
}

static sg_status cuda_context_run(sg_backend_context *c, const segrt_tensor *inputs, segrt_tensor *outputs)
{
    if (!c->pick)
        return sg_error(SEGRT_ERROR_INTERNAL, "a CUDA run without a plan selected");
    return sg_cuda_exec_run(c->x, c->pick, inputs, outputs);
}

static sg_status cuda_context_enqueue(sg_backend_context *c, const segrt_tensor *inputs, segrt_tensor *outputs,
                                      sg_backend_event *after, sg_backend_event *done)
{
    if (!c->pick)
        return sg_error(SEGRT_ERROR_INTERNAL, "a CUDA run without a plan selected");
    return sg_cuda_exec_enqueue(c->x, c->pick, inputs, outputs, (struct CUevent_st *)after, (struct CUevent_st *)done);
}

static sg_status cuda_context_finish(sg_backend_context *c)
{
    return sg_cuda_exec_finish(c->x);
}

static void *cuda_context_stream(const sg_backend_context *c)
{
    return sg_cuda_exec_stream(c->x);
}

static sg_status cuda_context_wait_stream(sg_backend_context *c, void *stream)
{
    return sg_cuda_exec_wait_stream(c->x, stream);
}

static sg_status cuda_profile(sg_backend_context *c, bool on)
{
    return sg_cuda_exec_profile(c->x, on);
}

static void cuda_profile_print(const sg_backend_context *c, FILE *f)
{
    sg_cuda_exec_profile_print(c->x, f);
}

const sg_backend sg_cuda_backend = {
    .name = "cuda",
    .device = SEGRT_DEVICE_CUDA,
    .device_memory = true,
    .profiles = true,
    .supports = cuda_supports,
    .plan_build = cuda_plan_build,
    .plan_free = cuda_plan_free,
    .plan_describe = cuda_plan_describe,
    .plan_report = cuda_plan_report,
    .plan_in_profile = cuda_plan_in_profile,
    .payload_save = cuda_payload_save,
    .identity = cuda_identity,
    .identity_keys = cuda_keys,
    .context_create = cuda_context_create,
    .context_destroy = cuda_context_destroy,
    .context_select = cuda_context_select,
    .context_run = cuda_context_run,
    .context_stream = cuda_context_stream,
    .context_wait_stream = cuda_context_wait_stream,
    .context_enqueue = cuda_context_enqueue,
    .context_finish = cuda_context_finish,
    .profile = cuda_profile,
    .profile_print = cuda_profile_print,
    .eval = ref_lookup,
    .window = &sg_cuda_window_ops,
    .volume = &sg_cuda_volume_ops,
};
