/* cuDNN backend-API helpers: descriptor sets, the descriptors a
 * convolution graph is made of, the engine search and the rebuild of a
 * recorded engine configuration. See cudnn_graph.h. */
#include "backend/cuda/cudnn_graph.h"
#include "backend/backend.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Heuristics can list hundreds of configurations in FALLBACK mode; each
 * failing one costs a finalize (a runtime compilation for fusion
 * engines), so only the best-ranked ones are tried. */
#define CDG_MAX_CFGS 64

_Static_assert(CUDNN_KNOB_TYPE_COUNTS <= CDG_MAX_KNOBS, "cdg_choice has room for every knob type");

#define CDG_SET(desc, name, type, count, ptr) CUDNN_TRY(cudnnBackendSetAttribute((desc), (name), (type), (count), (ptr)))

sg_status cdg_new(cdg_pool *pool, cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *out)
{
    *out = NULL;
    if (pool->n >= CDG_POOL_MAX)
        return sg_error(SEGRT_ERROR_INTERNAL, "cuDNN descriptor set is full (%d descriptors)", CDG_POOL_MAX);
    cudnnBackendDescriptor_t d = NULL;
    CUDNN_TRY(cudnnBackendCreateDescriptor(type, &d));
    pool->d[pool->n++] = d;
    *out = d;
    return SEGRT_OK;
}

void cdg_pool_clear(cdg_pool *pool)
{
    /* Newest first: users of a descriptor go before the descriptor. */
    for (int32_t i = pool->n - 1; i >= 0; i--)
        if (pool->d[i])
            cudnnBackendDestroyDescriptor(pool->d[i]);
    pool->n = 0;
}

cudnnDataType_t cdg_dtype(sg_dtype dt)
{
    switch (dt) {
    case SEGRT_DTYPE_FLOAT16: return CUDNN_DATA_HALF;
    case SEGRT_DTYPE_BFLOAT16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
    }
}

/* "what: STATUS (code): cuDNN's detail" into why, for a configuration
 * that cuDNN refused (not an error of ours). */
static void refusal(char *why, size_t cap, const char *what, cudnnStatus_t st)
{
    if (!why || !cap)
        return;
    char detail[384];
    detail[0] = '\0';
    cudnnGetLastErrorString(detail, sizeof detail);
    detail[sizeof detail - 1] = '\0';
    snprintf(why, cap, "%s: %s (%d)%s%s", what, cudnnGetErrorString(st), (int)st, detail[0] ? ": " : "", detail);
}

sg_status cdg_tensor_desc(cdg_pool *pool, const cdg_tensor *t, cudnnBackendDescriptor_t *out)
{
    cudnnBackendDescriptor_t d;
    SG_TRY(cdg_new(pool, CUDNN_BACKEND_TENSOR_DESCRIPTOR, &d));
    int64_t align = 16;
    CDG_SET(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t->dtype);
    CDG_SET(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, t->rank, t->dims);
    CDG_SET(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, t->rank, t->strides);
    CDG_SET(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t->uid);
    CDG_SET(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    if (t->is_virtual) {
        bool v = true;
        CDG_SET(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
    }
    CUDNN_TRY(cudnnBackendFinalize(d));
    *out = d;
    return SEGRT_OK;
}

sg_status cdg_conv_desc(cdg_pool *pool, const cdg_conv_geom *g, cudnnDataType_t comp,
                        cudnnBackendDescriptor_t *out)
{
    cudnnBackendDescriptor_t d;
    SG_TRY(cdg_new(pool, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &d));
    int64_t nsp = g->nsp;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    CDG_SET(d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nsp);
    CDG_SET(d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    CDG_SET(d, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    CDG_SET(d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, nsp, g->pre);
    CDG_SET(d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, nsp, g->post);
    CDG_SET(d, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, nsp, g->dil);
    CDG_SET(d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, nsp, g->stride);
    CUDNN_TRY(cudnnBackendFinalize(d));
    *out = d;
    return SEGRT_OK;
}

sg_status cdg_conv_op(cdg_pool *pool, bool dgrad, cudnnBackendDescriptor_t conv, cudnnBackendDescriptor_t x,
                      cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t *out)
{
    cudnnBackendDescriptor_t d;
    /* alpha and beta are FLOAT for float and half compute types. */
    float alpha = 1.0f, beta = 0.0f;
    if (!dgrad) {
        SG_TRY(cdg_new(pool, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &d));
        CDG_SET(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
        CDG_SET(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
        CDG_SET(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
        CDG_SET(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
        CDG_SET(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
        CDG_SET(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    } else {
        SG_TRY(cdg_new(pool, CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, &d));
        CDG_SET(d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
        CDG_SET(d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
        CDG_SET(d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
        CDG_SET(d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
        CDG_SET(d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
        CDG_SET(d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    }
    CUDNN_TRY(cudnnBackendFinalize(d));
    *out = d;
    return SEGRT_OK;
}

sg_status cdg_pointwise_op(cdg_pool *pool, cudnnPointwiseMode_t mode, double relu_slope,
                           cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y,
                           cudnnBackendDescriptor_t *out)
{
    cudnnBackendDescriptor_t pw, d;
    SG_TRY(cdg_new(pool, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw));
    cudnnDataType_t prec = CUDNN_DATA_FLOAT; /* activations are FLOAT-only in runtime fusion */
    CDG_SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    CDG_SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (mode == CUDNN_POINTWISE_RELU_FWD) {
        /* y = x > 0 ? x : slope * x (the upper clip stays at its default,
         * the largest float). */
        double lower = 0.0;
        CDG_SET(pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, CUDNN_TYPE_DOUBLE, 1, &lower);
        CDG_SET(pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE, CUDNN_TYPE_DOUBLE, 1, &relu_slope);
    }
    CUDNN_TRY(cudnnBackendFinalize(pw));
    SG_TRY(cdg_new(pool, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, &d));
    CDG_SET(d, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    CDG_SET(d, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b)
        CDG_SET(d, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    CDG_SET(d, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    CUDNN_TRY(cudnnBackendFinalize(d));
    *out = d;
    return SEGRT_OK;
}

sg_status cdg_graph(cdg_pool *pool, cudnnHandle_t h, const cudnnBackendDescriptor_t *ops, int32_t n_ops,
                    cudnnBackendDescriptor_t *out, bool *ok, char *why, size_t why_cap)
{
    *ok = false;
    cudnnBackendDescriptor_t d;
    SG_TRY(cdg_new(pool, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &d));
    CDG_SET(d, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n_ops, ops);
    CDG_SET(d, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    cudnnStatus_t st = cudnnBackendFinalize(d);
    if (st != CUDNN_STATUS_SUCCESS) {
        refusal(why, why_cap, "cudnnBackendFinalize(operation graph)", st);
        return SEGRT_OK;
    }
    *out = d;
    *ok = true;
    return SEGRT_OK;
}

/* Counts of what the search refused, for the message when nothing fits. */
typedef struct search_stats {
    int32_t tried, by_notes, by_workspace, not_final, finalized;
    char last[512];
} search_stats;

/* Whether an engine's numerical notes pass the filter. */
static sg_status notes_pass(cudnnBackendDescriptor_t engine, const cdg_filter *f, bool *pass)
{
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT + 8];
    int64_t n = 0;
    CUDNN_TRY(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                       (int64_t)(sizeof notes / sizeof notes[0]), &n, notes));
    *pass = true;
    for (int64_t i = 0; i < n && i < (int64_t)(sizeof notes / sizeof notes[0]); i++) {
        /* Runs must be bit-identical, and inputs are not to be narrowed
         * behind the user's back. */
        if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC || notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS)
            *pass = false;
        /* For float32 data, tensor cores mean TF32 products. */
        if (f->no_tensor_core && notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE)
            *pass = false;
    }
    return SEGRT_OK;
}

/* The engine index and knob choices of a heuristics configuration. */
static sg_status read_config(cudnnBackendDescriptor_t cfg, cudnnBackendDescriptor_t engine, cdg_choice *c)
{
    cdg_pool pool;
    pool.n = 0;
    cudnnBackendDescriptor_t knobs[CUDNN_KNOB_TYPE_COUNTS];
    sg_status s = SEGRT_OK;
    for (int32_t i = 0; i < CUDNN_KNOB_TYPE_COUNTS && s == SEGRT_OK; i++)
        s = cdg_new(&pool, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knobs[i]);
    int64_t n = 0, cnt = 0;
    cudnnStatus_t cs = CUDNN_STATUS_SUCCESS;
    if (s == SEGRT_OK) {
        cs = cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &cnt, &c->engine);
        if (cs != CUDNN_STATUS_SUCCESS)
            s = cudnn_error(cs, "cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX)", __FILE__,
                            __LINE__);
    }
    if (s == SEGRT_OK) {
        cs = cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                      CUDNN_KNOB_TYPE_COUNTS, &n, knobs);
        if (cs != CUDNN_STATUS_SUCCESS)
            s = cudnn_error(cs, "cudnnBackendGetAttribute(engine config, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES)",
                            __FILE__, __LINE__);
    }
    if (s == SEGRT_OK && (n < 0 || n > CUDNN_KNOB_TYPE_COUNTS))
        s = sg_error(SEGRT_ERROR_DEVICE, "cuDNN reported %lld knob choices (at most %d expected)", (long long)n,
                     CUDNN_KNOB_TYPE_COUNTS);
    for (int64_t i = 0; i < n && s == SEGRT_OK; i++) {
        cudnnBackendKnobType_t type = CUDNN_KNOB_TYPE_COUNTS;
        int64_t value = 0;
        cs = cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &cnt,
                                      &type);
        if (cs == CUDNN_STATUS_SUCCESS)
            cs = cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &cnt,
                                          &value);
        if (cs != CUDNN_STATUS_SUCCESS)
            s = cudnn_error(cs, "cudnnBackendGetAttribute(knob choice, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE/VALUE)",
                            __FILE__, __LINE__);
        c->knob_type[i] = (int64_t)type;
        c->knob_value[i] = value;
    }
    c->n_knobs = (int32_t)n;
    cdg_pool_clear(&pool);
    return s;
}

/* Tries one heuristics configuration; *taken says whether it became the
 * choice, and *plan (when asked for) is its finalized plan. Descriptors
 * live in pool (the caller clears it, or keeps it with the plan).
 *
 * The plan is finalized once, from the recorded engine and knobs: that is
 * what every context builds, so a choice that would not rebuild is never
 * recorded, and the plan timed is the plan run. A finalize is the search's
 * cost (a runtime-fusion engine compiles its kernel there), so a
 * candidate is finalized once. */
static sg_status try_config(cdg_pool *pool, cudnnHandle_t h, cudnnBackendDescriptor_t graph,
                            cudnnBackendDescriptor_t cfg, const cdg_filter *f, cdg_choice *out, bool *taken,
                            search_stats *st, cudnnBackendDescriptor_t *plan)
{
    *taken = false;
    st->tried++;
    cudnnBackendDescriptor_t engine;
    int64_t cnt = 0;
    SG_TRY(cdg_new(pool, CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine));
    CUDNN_TRY(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt,
                                       &engine));
    bool pass = false;
    SG_TRY(notes_pass(engine, f, &pass));
    if (!pass) {
        st->by_notes++;
        return SEGRT_OK;
    }
    /* The config knows its workspace (cuDNN >= 9.2): refuse before paying
     * for a finalize. Where it cannot say, the plan's size decides. */
    int64_t ws = -1;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt, &ws) ==
            CUDNN_STATUS_SUCCESS &&
        ws > f->max_workspace) {
        st->by_workspace++;
        return SEGRT_OK;
    }
    cdg_choice c;
    memset(&c, 0, sizeof c);
    c.version = CDG_CHOICE_VERSION;
    c.cudnn_version = (uint32_t)cudnnGetVersion();
    SG_TRY(read_config(cfg, engine, &c));
    st->finalized++;
    cudnnBackendDescriptor_t p = NULL;
    bool ok = false;
    char why[400];
    SG_TRY(cdg_plan_from_choice(pool, h, graph, &c, &p, &ws, &ok, why, sizeof why));
    if (!ok) {
        st->not_final++;
        snprintf(st->last, sizeof st->last, "engine %lld: %s", (long long)c.engine, why);
        return SEGRT_OK;
    }
    if (ws > f->max_workspace) {
        st->by_workspace++;
        return SEGRT_OK;
    }
    c.workspace = ws;
    *out = c;
    *taken = true;
    if (plan)
        *plan = p;
    return SEGRT_OK;
}

/* Candidates gathered for timing, each with its finalized plan (owned by
 * its pool). */
typedef struct cand_list {
    int32_t n, cap;
    cdg_choice c[CDG_TUNE_MAX_CANDIDATES];
    cudnnBackendDescriptor_t plan[CDG_TUNE_MAX_CANDIDATES];
    cdg_pool pool[CDG_TUNE_MAX_CANDIDATES];
} cand_list;

static void cands_clear(cand_list *cands)
{
    for (int32_t i = 0; i < cands->n; i++)
        cdg_pool_clear(&cands->pool[i]);
    cands->n = 0;
}

/* One configuration tried on a thread of its own (search_mode): what
 * try_config reads and what it found. */
typedef struct cfg_job {
    cudnnHandle_t h;
    cudnnBackendDescriptor_t graph, cfg;
    const cdg_filter *f;
    int device;
    cdg_pool pool; /* the configuration's descriptors, its plan's among them */
    cdg_choice c;
    cudnnBackendDescriptor_t plan;
    bool taken;
    search_stats st;
    sg_status s;
    char err[512]; /* the thread's message when s fails */
} cfg_job;

static void cfg_job_run(cfg_job *j)
{
    j->s = try_config(&j->pool, j->h, j->graph, j->cfg, j->f, &j->c, &j->taken, &j->st, &j->plan);
    if (j->s != SEGRT_OK)
        snprintf(j->err, sizeof j->err, "%s", sg_last_error());
}

static void *cfg_job_main(void *arg)
{
    cfg_job *j = arg;
    cudaError_t e = cudaSetDevice(j->device);
    if (e != cudaSuccess) {
        j->s = SEGRT_ERROR_DEVICE;
        snprintf(j->err, sizeof j->err, "cudaSetDevice(%d) on a cuDNN search thread: %s", j->device,
                 cudaGetErrorString(e));
        return NULL;
    }
    cfg_job_run(j);
    return NULL;
}

/* Threads that finalize configurations at once while tuning. A finalize
 * is host work (a runtime-fusion engine compiles its kernel there) and
 * most of a build's time; cuDNN builds plans of one graph and handle from
 * several threads (the frontend's build_plan_at_index is meant for that),
 * and they overlap at least in part (docs/perf.md). */
static int32_t search_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > CDG_TUNE_MAX_CANDIDATES ? CDG_TUNE_MAX_CANDIDATES : (int32_t)n;
}

/* Tries cfgs[0..n) at once (on threads beyond the first; in line where a
 * thread will not start) and takes what fits, in ranking order, into
 * cands while it has room. */
static sg_status try_configs(cfg_job *jobs, int32_t n, cudnnBackendDescriptor_t *cfgs, search_stats *st,
                             cand_list *cands)
{
    pthread_t th[CDG_TUNE_MAX_CANDIDATES];
    bool started[CDG_TUNE_MAX_CANDIDATES] = {false};
    for (int32_t j = 0; j < n; j++) {
        jobs[j].cfg = cfgs[j];
        jobs[j].pool.n = 0;
        jobs[j].plan = NULL;
        jobs[j].taken = false;
        memset(&jobs[j].st, 0, sizeof jobs[j].st);
        jobs[j].s = SEGRT_OK;
        jobs[j].err[0] = '\0';
    }
    for (int32_t j = 1; j < n; j++)
        started[j] = pthread_create(&th[j], NULL, cfg_job_main, &jobs[j]) == 0;
    cfg_job_run(&jobs[0]);
    for (int32_t j = 1; j < n; j++) {
        if (started[j])
            pthread_join(th[j], NULL);
        else
            cfg_job_run(&jobs[j]);
    }
    sg_status s = SEGRT_OK;
    for (int32_t j = 0; j < n; j++) {
        cfg_job *jb = &jobs[j];
        st->tried += jb->st.tried;
        st->by_notes += jb->st.by_notes;
        st->by_workspace += jb->st.by_workspace;
        st->not_final += jb->st.not_final;
        st->finalized += jb->st.finalized;
        if (jb->st.last[0])
            memcpy(st->last, jb->st.last, sizeof st->last);
        if (jb->s != SEGRT_OK && s == SEGRT_OK)
            s = sg_error(jb->s, "%s", jb->err);
        if (s == SEGRT_OK && jb->taken && cands->n < cands->cap) {
            cands->c[cands->n] = jb->c;
            cands->plan[cands->n] = jb->plan;
            cands->pool[cands->n++] = jb->pool; /* the candidate owns its descriptors now */
            jb->pool.n = 0;
        }
        cdg_pool_clear(&jb->pool);
    }
    return s;
}

/* When heuristics' best takes longer than this (seconds) to finalize,
 * only a quarter of the candidates asked for are finalized besides it:
 * the engines that compile slowly (plainunet_2d's ConvTransposes, 3-4 s
 * each eight at a time) rarely beat heuristics' best by much, while
 * cheap ones often rank their fastest sixth or eighth (docs/perf.md). */
#define SLOW_FINALIZE_S 0.25

/* One heuristics mode; descriptors in pool (the caller clears it). Every
 * fitting configuration goes into cands until it is full: heuristics'
 * best alone, then as many at a time as there are places left and
 * threads to run them. *found: cands has one. */
static sg_status search_mode(cdg_pool *pool, cudnnHandle_t h, cudnnBackendDescriptor_t graph,
                             cudnnBackendHeurMode_t mode, const cdg_filter *f, bool *found, search_stats *st,
                             cand_list *cands)
{
    cudnnBackendDescriptor_t heur;
    SG_TRY(cdg_new(pool, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
    CDG_SET(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    CDG_SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    cudnnStatus_t hs = cudnnBackendFinalize(heur);
    if (hs != CUDNN_STATUS_SUCCESS) { /* no heuristics of this mode for the graph */
        refusal(st->last, sizeof st->last, "cudnnBackendFinalize(engine heuristics)", hs);
        return SEGRT_OK;
    }
    int64_t count = 0;
    CUDNN_TRY(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                       NULL));
    if (count > CDG_MAX_CFGS)
        count = CDG_MAX_CFGS;
    if (count <= 0)
        return SEGRT_OK;
    cudnnBackendDescriptor_t cfgs[CDG_MAX_CFGS];
    for (int64_t i = 0; i < count; i++)
        SG_TRY(cdg_new(pool, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[i]));
    int64_t got = 0;
    CUDNN_TRY(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                       &got, cfgs));
    if (got > count)
        got = count;
    int32_t threads = cands->cap > 1 ? search_threads() : 1;
    cfg_job *jobs = calloc((size_t)threads, sizeof *jobs); /* a descriptor set each: not for the stack */
    if (!jobs)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "cuDNN engine search: no memory for %d configurations", threads);
    int device = 0;
    cudaGetDevice(&device);
    for (int32_t j = 0; j < threads; j++) {
        jobs[j].h = h;
        jobs[j].graph = graph;
        jobs[j].f = f;
        jobs[j].device = device;
    }
    sg_status s = SEGRT_OK;
    for (int64_t i = 0; i < got && cands->n < cands->cap && s == SEGRT_OK;) {
        /* Heuristics' best alone first: what its finalize costs decides
         * how many others are worth finalizing. */
        int64_t batch = cands->n ? cands->cap - cands->n : 1;
        batch = batch < threads ? batch : threads;
        batch = batch < got - i ? batch : got - i;
        bool first = cands->n == 0;
        double t0 = sg_now_seconds();
        s = try_configs(jobs, (int32_t)batch, &cfgs[i], st, cands);
        if (first && cands->n > 0 && sg_now_seconds() - t0 > SLOW_FINALIZE_S && cands->cap > 1 + cands->cap / 4)
            cands->cap = 1 + cands->cap / 4;
        i += batch;
    }
    free(jobs);
    *found = cands->n > 0;
    return s;
}

/* Milliseconds of one run of a candidate's plan (median of a few after
 * a warm-up), or a negative value when it does not run. */
static sg_status time_plan(cudnnHandle_t h, cudnnBackendDescriptor_t plan, const cdg_tuning *t, void *const *bufs,
                           void *workspace, cudaEvent_t ev[2], float *ms)
{
    *ms = -1.0f;
    cudnnBackendDescriptor_t pack = NULL;
    sg_status s = cdg_variant_pack(t->n, t->uids, bufs, workspace, &pack);
    enum { REPS = 5 };
    float runs[REPS];
    int32_t good = 0;
    if (s == SEGRT_OK && cudnnBackendExecute(h, plan, pack) == CUDNN_STATUS_SUCCESS) {
        for (int32_t r = 0; r < REPS; r++) {
            if (cudaEventRecord(ev[0], t->stream) != cudaSuccess ||
                cudnnBackendExecute(h, plan, pack) != CUDNN_STATUS_SUCCESS ||
                cudaEventRecord(ev[1], t->stream) != cudaSuccess || cudaEventSynchronize(ev[1]) != cudaSuccess ||
                cudaEventElapsedTime(&runs[good], ev[0], ev[1]) != cudaSuccess)
                break;
            good++;
        }
    }
    (void)cudaGetLastError();
    if (pack)
        cudnnBackendDestroyDescriptor(pack);
    SG_TRY(s);
    if (good == REPS) {
        for (int32_t i = 1; i < REPS; i++)
            for (int32_t j = i; j > 0 && runs[j] < runs[j - 1]; j--) {
                float x = runs[j];
                runs[j] = runs[j - 1];
                runs[j - 1] = x;
            }
        *ms = runs[REPS / 2];
    }
    return SEGRT_OK;
}

/* Times the candidates on zero-filled buffers; *best is the index of the
 * fastest, or 0 when none could be timed (no memory for the buffers,
 * say). */
static sg_status time_candidates(cudnnHandle_t h, const cdg_tuning *t, const cand_list *cands, int32_t *best)
{
    *best = 0;
    if (cands->n < 2 || t->n > CDG_TUNE_MAX_TENSORS)
        return SEGRT_OK;
    void *bufs[CDG_TUNE_MAX_TENSORS] = {0};
    void *workspace = NULL;
    cudaEvent_t ev[2] = {NULL, NULL};
    int64_t ws = 0;
    for (int32_t i = 0; i < cands->n; i++)
        if (cands->c[i].workspace > ws)
            ws = cands->c[i].workspace;
    bool ready = cudaEventCreate(&ev[0]) == cudaSuccess && cudaEventCreate(&ev[1]) == cudaSuccess &&
                 (ws == 0 || cudaMalloc(&workspace, (size_t)ws) == cudaSuccess);
    for (int32_t i = 0; ready && i < t->n; i++)
        ready = cudaMalloc(&bufs[i], cuda_padded_bytes(t->bytes[i])) == cudaSuccess &&
                cudaMemsetAsync(bufs[i], 0, cuda_padded_bytes(t->bytes[i]), t->stream) == cudaSuccess;
    sg_status s = SEGRT_OK;
    float best_ms = -1.0f;
    for (int32_t i = 0; ready && s == SEGRT_OK && i < cands->n; i++) {
        float ms = -1.0f;
        s = time_plan(h, cands->plan[i], t, bufs, workspace, ev, &ms);
        if (s == SEGRT_OK && ms >= 0 && (best_ms < 0 || ms < best_ms)) {
            best_ms = ms;
            *best = i;
        }
    }
    cudaStreamSynchronize(t->stream);
    (void)cudaGetLastError(); /* an allocation that failed leaves the untimed choice */
    for (int32_t i = 0; i < t->n; i++)
        cudaFree(bufs[i]);
    cudaFree(workspace);
    for (int32_t i = 0; i < 2; i++)
        if (ev[i])
            cudaEventDestroy(ev[i]);
    return s;
}

sg_status cdg_search(cudnnHandle_t h, cudnnBackendDescriptor_t graph, const cdg_filter *f, const cdg_tuning *t,
                     cdg_choice *out, bool *found, char **json, size_t *json_len, char *why, size_t why_cap)
{
    static const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    search_stats st;
    memset(&st, 0, sizeof st);
    *found = false;
    if (json) {
        *json = NULL;
        *json_len = 0;
    }
    bool tune = t && t->candidates > 1;
    cand_list *cands = malloc(sizeof *cands); /* 16 pools of descriptors: too big for the stack */
    if (!cands)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "cuDNN engine search: no memory for the candidates");
    cands->n = 0;
    cands->cap = !tune ? 1 : t->candidates < CDG_TUNE_MAX_CANDIDATES ? t->candidates : CDG_TUNE_MAX_CANDIDATES;
    sg_status s = SEGRT_OK;
    for (int32_t m = 0; m < 2 && !*found && s == SEGRT_OK; m++) {
        cdg_pool pool;
        pool.n = 0;
        /* Only heuristics A's ranking is worth timing; FALLBACK is the
         * last resort and its first fit is taken. */
        if (m > 0)
            cands->cap = 1;
        s = search_mode(&pool, h, graph, modes[m], f, found, &st, cands);
        cdg_pool_clear(&pool);
    }
    int32_t best = 0;
    if (s == SEGRT_OK && tune && cands->n > 1)
        s = time_candidates(h, t, cands, &best);
    if (s == SEGRT_OK && cands->n > 0) {
        *out = cands->c[best];
        if (json)
            s = cdg_plan_json(cands->plan[best], json, json_len);
    }
    cands_clear(cands);
    free(cands);
    if (t && t->finalized)
        *t->finalized += st.finalized;
    SG_TRY(s);
    if (!*found && why && why_cap)
        snprintf(why, why_cap,
                 "no cuDNN engine fits: %d configs tried (heuristics A and FALLBACK); %d refused by numerical "
                 "notes (nondeterministic, down-converting%s), %d over the %lld-byte workspace limit, %d did not "
                 "finalize from their engine and knobs; last: %s",
                 st.tried, st.by_notes, f->no_tensor_core ? ", tensor-core/TF32" : "", st.by_workspace,
                 (long long)f->max_workspace, st.not_final, st.last[0] ? st.last : "none");
    return SEGRT_OK;
}

sg_status cdg_plan_json(cudnnBackendDescriptor_t plan, char **json, size_t *len)
{
    *json = NULL;
    *len = 0;
    int64_t n = 0;
    if (cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, 0, &n,
                                 NULL) != CUDNN_STATUS_SUCCESS ||
        n <= 0)
        return SEGRT_OK; /* not serializable: contexts finalize from the engine config */
    char *buf = malloc((size_t)n);
    if (!buf)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "no memory for a cuDNN plan's %lld-byte JSON", (long long)n);
    int64_t got = 0;
    if (cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, n, &got,
                                 buf) != CUDNN_STATUS_SUCCESS ||
        got <= 0 || got > n) {
        free(buf);
        return SEGRT_OK;
    }
    *json = buf;
    *len = (size_t)got;
    return SEGRT_OK;
}

/* Finalizes execution plan p (its attributes set, st: how setting them
 * went) and hands it out with its workspace; *ok false, with *why, where
 * cuDNN refuses it. */
static sg_status plan_finish(cudnnBackendDescriptor_t p, cudnnStatus_t st, const char *what,
                             cudnnBackendDescriptor_t *plan, int64_t *workspace, bool *ok, char *why, size_t why_cap)
{
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendFinalize(p);
    if (st != CUDNN_STATUS_SUCCESS) {
        refusal(why, why_cap, what, st);
        return SEGRT_OK;
    }
    int64_t cnt = 0, ws = 0;
    CUDNN_TRY(cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt, &ws));
    *plan = p;
    *workspace = ws;
    *ok = true;
    return SEGRT_OK;
}

sg_status cdg_plan_from_json(cdg_pool *pool, cudnnHandle_t h, const char *json, size_t len,
                             cudnnBackendDescriptor_t *plan, int64_t *workspace, bool *ok, char *why,
                             size_t why_cap)
{
    *ok = false;
    *plan = NULL;
    *workspace = 0;
    if (len < 1 || len > (size_t)INT64_MAX)
        return SEGRT_OK;
    cudnnBackendDescriptor_t p;
    SG_TRY(cdg_new(pool, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p));
    CDG_SET(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    cudnnStatus_t st = cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                                                (int64_t)len, json);
    return plan_finish(p, st, "cudnnBackendFinalize(execution plan from JSON)", plan, workspace, ok, why, why_cap);
}

sg_status cdg_plan_from_choice(cdg_pool *pool, cudnnHandle_t h, cudnnBackendDescriptor_t graph,
                               const cdg_choice *c, cudnnBackendDescriptor_t *plan, int64_t *workspace, bool *ok,
                               char *why, size_t why_cap)
{
    *ok = false;
    *plan = NULL;
    *workspace = 0;
    if (c->n_knobs < 0 || c->n_knobs > CDG_MAX_KNOBS)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "cuDNN choice has %d knobs (at most %d)", c->n_knobs,
                        CDG_MAX_KNOBS);
    cudnnBackendDescriptor_t engine, cfg, p;
    SG_TRY(cdg_new(pool, CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine));
    CDG_SET(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    CDG_SET(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &c->engine);
    cudnnStatus_t st = cudnnBackendFinalize(engine);
    if (st != CUDNN_STATUS_SUCCESS) {
        refusal(why, why_cap, "cudnnBackendFinalize(engine)", st);
        return SEGRT_OK;
    }
    cudnnBackendDescriptor_t knobs[CDG_MAX_KNOBS];
    for (int32_t i = 0; i < c->n_knobs; i++) {
        cudnnBackendKnobType_t type = (cudnnBackendKnobType_t)c->knob_type[i];
        SG_TRY(cdg_new(pool, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knobs[i]));
        CDG_SET(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &type);
        CDG_SET(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &c->knob_value[i]);
        CUDNN_TRY(cudnnBackendFinalize(knobs[i]));
    }
    SG_TRY(cdg_new(pool, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg));
    CDG_SET(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &engine);
    if (c->n_knobs > 0)
        CDG_SET(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, c->n_knobs, knobs);
    st = cudnnBackendFinalize(cfg);
    if (st != CUDNN_STATUS_SUCCESS) {
        refusal(why, why_cap, "cudnnBackendFinalize(engine config)", st);
        return SEGRT_OK;
    }
    SG_TRY(cdg_new(pool, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p));
    CDG_SET(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    CDG_SET(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg);
    return plan_finish(p, CUDNN_STATUS_SUCCESS, "cudnnBackendFinalize(execution plan)", plan, workspace, ok, why,
                       why_cap);
}

sg_status cdg_variant_pack(int32_t n, const int64_t *uids, void *const *ptrs, void *workspace,
                           cudnnBackendDescriptor_t *out)
{
    cdg_pool pool;
    pool.n = 0;
    cudnnBackendDescriptor_t d;
    SG_TRY(cdg_new(&pool, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &d));
    cudnnStatus_t st = cudnnBackendSetAttribute(d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                                                &workspace);
    const char *what = "cudnnBackendSetAttribute(variant pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE)";
    if (st == CUDNN_STATUS_SUCCESS) {
        st = cudnnBackendSetAttribute(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
        what = "cudnnBackendSetAttribute(variant pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS)";
    }
    if (st == CUDNN_STATUS_SUCCESS) {
        st = cudnnBackendSetAttribute(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
        what = "cudnnBackendSetAttribute(variant pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS)";
    }
    if (st == CUDNN_STATUS_SUCCESS) {
        st = cudnnBackendFinalize(d);
        what = "cudnnBackendFinalize(variant pack)";
    }
    if (st != CUDNN_STATUS_SUCCESS) {
        sg_status s = cudnn_error(st, what, __FILE__, __LINE__);
        cdg_pool_clear(&pool);
        return s;
    }
    *out = d; /* the caller owns it now */
    return SEGRT_OK;
}
