/* cuDNN's implementation of Conv and ConvTranspose (the last of their
 * lists in cuda_conv.c), through its backend (graph) API.
 *
 * (Over 1,000 lines on purpose: the node's spec, the engine choice and its
 * record in plan files, each context's execution plans and the restriding
 * a Concat asks for all work on one conv_spec and one step's parameters.)
 *
 * Conv is a forward convolution; where the convolution's only reader is a
 * Relu or LeakyRelu, that activation and the bias join it in one
 * runtime-fusion graph (conv -> add bias -> relu), so the output is
 * written once. When no engine takes the fused graph, the convolution
 * runs alone and a segrt map adds the bias and applies the activation.
 * ConvTranspose is cuDNN's backward-data convolution (dgrad) with the
 * op's input as dy; its bias and activation are always a separate map
 * (Hopper's fusion engines do not take strided dgrad epilogues).
 *
 * A Concat built later may turn the output (or an input) into a slice of
 * its buffer (conv_restride): the step is then described to cuDNN with
 * the slice's strides, where the recorded engine computes the same
 * results over them.
 *
 * Tensors are channels-last (NHWC / NDHWC; weights KRSC), described to
 * cuDNN with logical N, C, (D,) H, W dims and their strides; 1-D
 * convolutions are 2-D ones with a unit H.
 *
 * The engine is chosen once, at plan build (or read back from a plan
 * file), and recorded as data: engine index, knob choices, graph variant,
 * workspace. cuDNN execution plans must not be shared between threads, so
 * each context rebuilds the plan from that record in ctx_init with its
 * own handle (fast: cuDNN caches the compiled kernels) and keeps it, with
 * its variant pack, as the step's per-context state. */
#include "backend/cuda/cudnn_graph.h"
#include "graph/infer_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Unique ids of the tensors in the graphs below. */
enum { UID_X = 1, UID_W = 2, UID_Y = 3, UID_B = 4, UID_ADD = 5, UID_ACT = 6, UID_Z = 7, UID_RES = 8 };

/* The graphs a choice can be for. */
enum {
    VARIANT_PLAIN = 0,          /* the convolution alone */
    VARIANT_FUSED_F32_BIAS = 1, /* conv -> [add float32 bias] -> [activation] */
    VARIANT_FUSED_IO_BIAS = 2,  /* the same with the bias in the input dtype */
    VARIANT_F32_BIAS_RES = 3,   /* conv -> [add float32 bias] -> [activation] -> add residual */
    VARIANT_IO_BIAS_RES = 4     /* the same with the bias in the input dtype */
};

static bool variant_fused(int32_t v) { return v != VARIANT_PLAIN; }
static bool variant_io_bias(int32_t v) { return v == VARIANT_FUSED_IO_BIAS || v == VARIANT_IO_BIAS_RES; }
static bool variant_residual(int32_t v) { return v == VARIANT_F32_BIAS_RES || v == VARIANT_IO_BIAS_RES; }

#define CONV_MAX_UIDS 5

/* Everything needed to describe the op graph again, in any context. */
typedef struct conv_spec {
    bool dgrad;
    int32_t rank; /* 4 or 5 as cuDNN sees it */
    cdg_conv_geom geom;
    cdg_tensor x, w, y;  /* X (dY for dgrad), W, and what the graph writes (Y, dX or the epilogue's
                          * result): its strides may be a concatenation's slice (restride) */
    cdg_tensor z;        /* the residual a fused Add reads */
    int64_t channels;    /* output channels: the bias length */
    bool has_bias;
    sgk_act act;         /* activation fused after the bias, or NONE */
    float act_alpha;
    bool residual;       /* a following Add of a same-shaped tensor may join the epilogue */
    cudnnDataType_t out; /* dtype of the fused graph's final output */
    cdg_filter filter;
} conv_spec;

typedef struct conv_params {
    conv_spec spec;
    cdg_choice choice;
    const char *tag;  /* the choice's record in the plan file */
    char *json;       /* the execution plan serialized (conv_build_done), or NULL */
    size_t json_len;
    int32_t n_uids;
    int64_t uids[CONV_MAX_UIDS]; /* per step arg, in arg order */
} conv_params;

static void conv_params_free(void *params)
{
    conv_params *cp = params;
    if (cp)
        free(cp->json);
    free(cp);
}

/* Per-context state: the plan and its descriptors, and the variant pack
 * of the pointers it was last made for. */
typedef struct conv_state {
    cdg_pool pool;
    cudnnBackendDescriptor_t plan;
    cudnnBackendDescriptor_t pack;
    void *ptrs[CONV_MAX_UIDS];
    void *workspace;
} conv_state;

/* The bias and activation a map applies after a convolution that ran
 * without its epilogue. */
typedef struct epi_params {
    sgk_map_params mp;
    bool has_bias;
} epi_params;

static const char *variant_name(int32_t v)
{
    switch (v) {
    case VARIANT_PLAIN: return "convolution alone";
    case VARIANT_FUSED_F32_BIAS: return "fused epilogue, float32 bias";
    case VARIANT_FUSED_IO_BIAS: return "fused epilogue, bias in the input dtype";
    case VARIANT_F32_BIAS_RES: return "fused epilogue with the residual add, float32 bias";
    case VARIANT_IO_BIAS_RES: return "fused epilogue with the residual add, bias in the input dtype";
    default: return "unknown";
    }
}

/* Op graphs ------------------------------------------------------------------ */

/* The [1, K, 1, 1(, 1)] bias, channels-last. */
static cdg_tensor bias_tensor(const conv_spec *cs, cudnnDataType_t dt)
{
    cdg_tensor b;
    memset(&b, 0, sizeof b);
    b.uid = UID_B;
    b.dtype = dt;
    b.rank = cs->rank;
    for (int32_t i = 0; i < cs->rank; i++)
        b.dims[i] = i == 1 ? cs->channels : 1;
    cuda_layout_strides(CUDA_LAYOUT_CHANNELS_LAST, b.rank, b.dims, b.strides);
    return b;
}

/* The operation graph of a variant, in pool. *ok false (with why) when
 * cuDNN does not take the pattern. */
static sg_status conv_graph(cdg_pool *pool, cudnnHandle_t h, const conv_spec *cs, int32_t variant,
                            cudnnBackendDescriptor_t *graph, bool *ok, char *why, size_t why_cap)
{
    cudnnBackendDescriptor_t x, w, y, conv, ops[4];
    int32_t n_ops = 0;
    cdg_tensor yt = cs->y;
    bool fused = variant_fused(variant);
    bool res = variant_residual(variant);
    /* Results that stay on chip are described dense whatever the
     * output's strides. */
    cdg_tensor onchip = cs->y;
    onchip.is_virtual = true;
    onchip.dtype = CUDNN_DATA_FLOAT;
    cuda_layout_strides(CUDA_LAYOUT_CHANNELS_LAST, onchip.rank, onchip.dims, onchip.strides);
    if (fused) /* the convolution's result stays on chip */
        yt = onchip;
    SG_TRY(cdg_tensor_desc(pool, &cs->x, &x));
    SG_TRY(cdg_tensor_desc(pool, &cs->w, &w));
    SG_TRY(cdg_tensor_desc(pool, &yt, &y));
    SG_TRY(cdg_conv_desc(pool, &cs->geom, CUDNN_DATA_FLOAT, &conv));
    SG_TRY(cdg_conv_op(pool, cs->dgrad, conv, x, w, y, &ops[n_ops++]));
    if (fused) {
        cudnnBackendDescriptor_t cur = y;
        if (cs->has_bias) {
            cdg_tensor bt = bias_tensor(cs, variant_io_bias(variant) ? cs->x.dtype : CUDNN_DATA_FLOAT);
            bool last = cs->act == SGK_ACT_NONE && !res;
            cdg_tensor at = last ? cs->y : onchip;
            at.uid = UID_ADD;
            at.dtype = last ? cs->out : CUDNN_DATA_FLOAT;
            cudnnBackendDescriptor_t b, a;
            SG_TRY(cdg_tensor_desc(pool, &bt, &b));
            SG_TRY(cdg_tensor_desc(pool, &at, &a));
            /* The convolution's output must be the first operand. */
            SG_TRY(cdg_pointwise_op(pool, CUDNN_POINTWISE_ADD, 0.0, cur, b, a, &ops[n_ops++]));
            cur = a;
        }
        if (cs->act != SGK_ACT_NONE) {
            cdg_tensor rt = res ? onchip : cs->y;
            rt.uid = UID_ACT;
            rt.dtype = res ? CUDNN_DATA_FLOAT : cs->out;
            cudnnBackendDescriptor_t r;
            SG_TRY(cdg_tensor_desc(pool, &rt, &r));
            double slope = cs->act == SGK_ACT_LEAKY_RELU ? (double)cs->act_alpha : 0.0;
            SG_TRY(cdg_pointwise_op(pool, CUDNN_POINTWISE_RELU_FWD, slope, cur, NULL, r, &ops[n_ops++]));
            cur = r;
        }
        if (res) { /* the residual: a tensor of the output's shape, second operand */
            cdg_tensor zt = cs->z, ot = cs->y;
            ot.uid = UID_RES;
            ot.dtype = cs->out;
            cudnnBackendDescriptor_t z, o;
            SG_TRY(cdg_tensor_desc(pool, &zt, &z));
            SG_TRY(cdg_tensor_desc(pool, &ot, &o));
            SG_TRY(cdg_pointwise_op(pool, CUDNN_POINTWISE_ADD, 0.0, cur, z, o, &ops[n_ops++]));
        }
    }
    return cdg_graph(pool, h, ops, n_ops, graph, ok, why, why_cap);
}

/* The UID of the tensor a variant writes. */
static int64_t output_uid(const conv_spec *cs, int32_t variant)
{
    if (!variant_fused(variant))
        return UID_Y;
    if (variant_residual(variant))
        return UID_RES;
    return cs->act != SGK_ACT_NONE ? UID_ACT : UID_ADD;
}

/* Per-context plans ---------------------------------------------------------------- */

static void conv_ctx_free(void *state)
{
    conv_state *st = state;
    if (!st)
        return;
    if (st->pack)
        cudnnBackendDestroyDescriptor(st->pack);
    cdg_pool_clear(&st->pool);
    free(st);
}

static sg_status conv_ctx_build(const cuda_step *s, cudnnHandle_t cudnn, conv_state *st)
{
    const conv_params *cp = s->params;
    cudnnBackendDescriptor_t graph;
    bool ok = false;
    char why[600];
    int64_t ws = 0;
    /* The plan as the build serialized it: no runtime compilation here.
     * (Where this cuDNN does not restore it, the choice is finalized.) */
    if (cp->json) {
        SG_TRY(cdg_plan_from_json(&st->pool, cudnn, cp->json, cp->json_len, &st->plan, &ws, &ok, why, sizeof why));
        if (ok && (size_t)ws <= s->workspace_bytes)
            return SEGRT_OK;
        st->plan = NULL;
    }
    SG_TRY(conv_graph(&st->pool, cudnn, &cp->spec, cp->choice.variant, &graph, &ok, why, sizeof why));
    if (!ok)
        return sg_error(SEGRT_ERROR_DEVICE, "the cuDNN operation graph (%s) that finalized at plan build does not "
                        "finalize in this context: %s", variant_name(cp->choice.variant), why);
    SG_TRY(cdg_plan_from_choice(&st->pool, cudnn, graph, &cp->choice, &st->plan, &ws, &ok, why, sizeof why));
    if (!ok)
        return sg_error(SEGRT_ERROR_DEVICE, "cuDNN engine %lld (%s), chosen at plan build, does not finalize in "
                        "this context: %s", (long long)cp->choice.engine, variant_name(cp->choice.variant), why);
    if ((size_t)ws > s->workspace_bytes)
        return sg_error(SEGRT_ERROR_DEVICE, "cuDNN engine %lld needs %lld bytes of workspace in this context, "
                        "%zu at plan build", (long long)cp->choice.engine, (long long)ws, s->workspace_bytes);
    return SEGRT_OK;
}

static sg_status conv_ctx_init(const cuda_step *s, cudnnHandle_t cudnn, cublasLtHandle_t lt, void **state)
{
    (void)lt;
    *state = NULL;
    conv_state *st = sg_calloc(1, sizeof *st);
    if (!st)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    sg_status s_ = conv_ctx_build(s, cudnn, st);
    if (s_ != SEGRT_OK) {
        conv_ctx_free(st);
        return s_;
    }
    *state = st;
    return SEGRT_OK;
}

/* Runs the context's plan. The variant pack is kept while the pointers
 * stay the same (arena tensors do; the caller's buffers may not); cuDNN
 * has no documented way to update a finalized pack, so a new pointer set
 * makes a new one (a host allocation, only when the pointers changed). */
static sg_status conv_run(const cuda_step *s, cuda_run *r)
{
    const conv_params *cp = s->params;
    conv_state *st = r->state;
    if (!st || !st->plan)
        return sg_error(SEGRT_ERROR_INTERNAL, "the cuDNN plan of this context was not built (ctx_init)");
    if (s->workspace_bytes > r->workspace_bytes || (s->workspace_bytes && !r->workspace))
        return sg_error(SEGRT_ERROR_INTERNAL, "cuDNN needs %zu bytes of workspace; the context has %zu",
                        s->workspace_bytes, r->workspace_bytes);
    void *ptrs[CONV_MAX_UIDS];
    bool same = st->pack != NULL && st->workspace == r->workspace;
    for (int32_t i = 0; i < cp->n_uids; i++) {
        ptrs[i] = r->ptr[s->args[i]];
        if (((uintptr_t)ptrs[i] & 15u) != 0)
            return sg_error(SEGRT_ERROR_INTERNAL, "cuDNN tensor %lld is at %p, not 16-byte aligned as the plan "
                            "declared", (long long)cp->uids[i], ptrs[i]);
        same = same && ptrs[i] == st->ptrs[i];
    }
    if (!same) {
        if (st->pack) {
            cudnnBackendDestroyDescriptor(st->pack);
            st->pack = NULL;
        }
        SG_TRY(cdg_variant_pack(cp->n_uids, cp->uids, ptrs, r->workspace, &st->pack));
        memcpy(st->ptrs, ptrs, sizeof(void *) * (size_t)cp->n_uids);
        st->workspace = r->workspace;
    }
    CUDNN_TRY(cudnnBackendExecute(r->cudnn, st->plan, st->pack));
    return SEGRT_OK;
}

/* The epilogue map: out = act(conv + bias), with a dtype change. */
static sg_status epi_run(const cuda_step *s, cuda_run *r)
{
    const epi_params *ep = s->params;
    sgk_view in[2];
    in[0] = cuda_view(r, s->args[0]);
    sgk_view out = cuda_view(r, s->args[s->n_args - 1]);
    int32_t n_in = 1;
    if (ep->has_bias) {
        /* The 1-D bias seen as [1, K, 1, ...] over the output. */
        sgk_view b = cuda_view(r, s->args[1]);
        int64_t stride = b.strides[0];
        b.rank = out.rank;
        for (int32_t i = 0; i < SGK_MAX_RANK; i++) {
            b.dims[i] = out.dims[i];
            b.strides[i] = i == 1 ? stride : 0;
        }
        in[n_in++] = b;
    }
    return sgk_map(r->stream, &ep->mp, &out, n_in, in);
}

/* Slices of a concatenation ------------------------------------------------------------
 * A UNet's skip connection concatenates two convolutions' results. Where
 * cuDNN takes a convolution's output (or input, or residual) with the
 * strides of its slice of the concatenated buffer, the convolution writes
 * (reads) the slice itself and the concatenation costs no copy; that is
 * asked of the engine recorded at build, by finalizing its plan over the
 * new descriptors. */

/* d (cuDNN's view of a plan tensor) with the dims and strides of as; false
 * if they do not describe the same tensor. 1-D tensors get the unit H
 * back. */
static bool restride_desc(cdg_tensor *d, const cuda_tensor *as)
{
    int64_t dims[5], strides[5];
    int32_t rank = as->rank;
    memcpy(dims, as->dims, sizeof(int64_t) * (size_t)rank);
    memcpy(strides, as->strides, sizeof(int64_t) * (size_t)rank);
    if (rank == 3) { /* N, C, W -> N, C, 1, W */
        dims[3] = dims[2];
        strides[3] = strides[2];
        dims[2] = 1;
        strides[2] = strides[3] * dims[3];
        rank = 4;
    }
    if (rank != d->rank)
        return false;
    for (int32_t i = 0; i < rank; i++)
        if (dims[i] != d->dims[i])
            return false;
    memcpy(d->strides, strides, sizeof(int64_t) * (size_t)rank);
    return true;
}

/* The description of the tensor a graph variant binds to uid. */
static cdg_tensor bound_tensor(const conv_spec *cs, int32_t variant, int64_t uid)
{
    if (uid == UID_X)
        return cs->x;
    if (uid == UID_W)
        return cs->w;
    if (uid == UID_B)
        return bias_tensor(cs, variant_io_bias(variant) ? cs->x.dtype : CUDNN_DATA_FLOAT);
    if (uid == UID_Z)
        return cs->z;
    cdg_tensor y = cs->y;
    y.uid = uid;
    y.dtype = variant_fused(variant) ? cs->out : cs->y.dtype;
    return y;
}

/* A plan file's record of one slice check: what was asked and the
 * verdict, so that loading the plan does not run the check again. */
#define SLICE_RECORD_VERSION 1u

typedef struct slice_record {
    uint32_t version;
    uint32_t same;
    int64_t offset;
    int64_t strides[3][5]; /* x, y, z as asked */
} slice_record;

static slice_record slice_ask(const conv_spec *cs, int64_t offset)
{
    slice_record r;
    memset(&r, 0, sizeof r);
    r.version = SLICE_RECORD_VERSION;
    r.offset = offset;
    memcpy(r.strides[0], cs->x.strides, sizeof r.strides[0]);
    memcpy(r.strides[1], cs->y.strides, sizeof r.strides[1]);
    memcpy(r.strides[2], cs->z.strides, sizeof r.strides[2]);
    return r;
}

/* Choices already made in this build, by graph --------------------------------------
 * A network repeats its convolutions: a residual encoder's stage is four
 * to six identical blocks, a transformer's stages repeat their layers.
 * The same graph gets the same answer, so it is searched (and timed) once
 * a build; only the node's own record differs. */
struct cudnn_conv_seen {
    conv_spec spec;
    cdg_choice choice;
    char *json; /* the chosen plan serialized, or NULL */
    size_t json_len;
};

void cuda_cudnn_seen_free(sg_cuda_plan *p)
{
    for (int32_t i = 0; i < p->n_cudnn_seen; i++)
        free(p->cudnn_seen[i].json);
    free(p->cudnn_seen);
    p->cudnn_seen = NULL;
    p->n_cudnn_seen = p->cap_cudnn_seen = 0;
}

/* A copy of json (NULL stays NULL) into *out. */
static sg_status json_copy(const char *json, size_t len, char **out)
{
    *out = NULL;
    if (!json)
        return SEGRT_OK;
    if (!(*out = malloc(len)))
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "no memory for a %zu-byte cuDNN plan", len);
    memcpy(*out, json, len);
    return SEGRT_OK;
}

static bool tensor_same(const cdg_tensor *a, const cdg_tensor *b)
{
    if (a->uid != b->uid || a->dtype != b->dtype || a->rank != b->rank || a->is_virtual != b->is_virtual)
        return false;
    for (int32_t i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i] || a->strides[i] != b->strides[i])
            return false;
    return true;
}

static bool spec_same(const conv_spec *a, const conv_spec *b)
{
    const cdg_conv_geom *ga = &a->geom, *gb = &b->geom;
    if (a->dgrad != b->dgrad || a->rank != b->rank || ga->nsp != gb->nsp || a->channels != b->channels ||
        a->has_bias != b->has_bias || a->act != b->act || a->act_alpha != b->act_alpha || a->residual != b->residual ||
        a->out != b->out || a->filter.no_tensor_core != b->filter.no_tensor_core ||
        a->filter.max_workspace != b->filter.max_workspace)
        return false;
    for (int32_t i = 0; i < ga->nsp; i++)
        if (ga->pre[i] != gb->pre[i] || ga->post[i] != gb->post[i] || ga->stride[i] != gb->stride[i] ||
            ga->dil[i] != gb->dil[i])
            return false;
    return tensor_same(&a->x, &b->x) && tensor_same(&a->w, &b->w) && tensor_same(&a->y, &b->y) &&
           tensor_same(&a->z, &b->z);
}

static const struct cudnn_conv_seen *seen_find(const sg_cuda_plan *p, const conv_spec *cs)
{
    for (int32_t i = 0; i < p->n_cudnn_seen; i++)
        if (spec_same(&p->cudnn_seen[i].spec, cs))
            return &p->cudnn_seen[i];
    return NULL;
}

static sg_status seen_add(sg_cuda_plan *p, const conv_spec *cs, const cdg_choice *c, const char *json, size_t json_len)
{
    if (p->n_cudnn_seen == p->cap_cudnn_seen) {
        int32_t cap = p->cap_cudnn_seen ? 2 * p->cap_cudnn_seen : 32;
        struct cudnn_conv_seen *n = realloc(p->cudnn_seen, (size_t)cap * sizeof *n);
        if (!n)
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "no memory for %d cuDNN choices", cap);
        p->cudnn_seen = n;
        p->cap_cudnn_seen = cap;
    }
    struct cudnn_conv_seen *e = &p->cudnn_seen[p->n_cudnn_seen];
    SG_TRY(json_copy(json, json_len, &e->json));
    e->spec = *cs;
    e->choice = *c;
    e->json_len = json_len;
    p->n_cudnn_seen++;
    return SEGRT_OK;
}

/* The serialized plan the search made for this graph and choice, or NULL
 * (a graph restrided since, or a choice from a plan file). */
static const struct cudnn_conv_seen *seen_plan(const sg_cuda_plan *p, const conv_spec *cs, const cdg_choice *c)
{
    const struct cudnn_conv_seen *e = seen_find(p, cs);
    return e && e->json && memcmp(&e->choice, c, sizeof *c) == 0 ? e : NULL;
}

/* Finalizes the recorded engine over `spec` and over the step's own
 * descriptions and runs both on random data (cdg_same_results). */
static sg_status slice_check(sg_cuda_plan *p, const cuda_step *s, const conv_spec *spec, int32_t t, int64_t offset,
                             bool *same)
{
    const conv_params *cp = s->params;
    *same = false;
    cdg_pool pool;
    pool.n = 0;
    cudnnBackendDescriptor_t graph[2], plan[2];
    int64_t ws[2] = {0, 0};
    bool ok = true;
    char why[600];
    sg_status st = SEGRT_OK;
    /* The dense plan as the search serialized it, where it did: restoring
     * it skips a runtime-fusion engine's compilation. */
    const struct cudnn_conv_seen *seen = seen_plan(p, &cp->spec, &cp->choice);
    for (int32_t w = 0; w < 2 && st == SEGRT_OK && ok; w++) {
        const conv_spec *cs = w ? spec : &cp->spec;
        if (!w && seen) {
            st = cdg_plan_from_json(&pool, p->build_cudnn, seen->json, seen->json_len, &plan[w], &ws[w], &ok, why,
                                    sizeof why);
            continue;
        }
        st = conv_graph(&pool, p->build_cudnn, cs, cp->choice.variant, &graph[w], &ok, why, sizeof why);
        if (st == SEGRT_OK && ok)
            st = cdg_plan_from_choice(&pool, p->build_cudnn, graph[w], &cp->choice, &plan[w], &ws[w], &ok, why,
                                      sizeof why);
    }
    if (st == SEGRT_OK && ok && (size_t)ws[1] <= s->workspace_bytes && cp->n_uids <= CDG_VERIFY_MAX) {
        cdg_bind binds[CDG_VERIFY_MAX];
        int64_t out_uid = output_uid(&cp->spec, cp->choice.variant);
        for (int32_t i = 0; i < cp->n_uids; i++) {
            binds[i].ref = bound_tensor(&cp->spec, cp->choice.variant, cp->uids[i]);
            binds[i].cand = bound_tensor(spec, cp->choice.variant, cp->uids[i]);
            binds[i].cand_offset = s->args[i] == t ? offset : 0;
            binds[i].output = cp->uids[i] == out_uid;
        }
        int64_t need = ws[0] > ws[1] ? ws[0] : ws[1];
        st = cdg_same_results(p->build_cudnn, p->build_stream, plan[0], plan[1], need, cp->n_uids, binds,
                              (size_t)1 << 30, same);
    }
    cdg_pool_clear(&pool);
    return st;
}

static bool conv_restride(sg_cuda_plan *p, cuda_step *s, int32_t t, const cuda_tensor *as, bool commit)
{
    conv_params *cp = s->params;
    conv_spec spec = cp->spec;
    /* The plan declares 16-byte aligned tensors (conv_run checks it);
     * every row of channels must start aligned too. */
    size_t esize = segrt_dtype_size(as->dtype);
    if ((size_t)as->alias_offset * esize % 16 != 0 || as->rank < 3 || as->strides[1] != 1)
        return false;
    for (int32_t i = 0; i < as->rank; i++)
        if (i != 1 && as->dims[i] > 1 && (size_t)as->strides[i] * esize % 16 != 0)
            return false;
    int64_t out_uid = output_uid(&spec, cp->choice.variant);
    const char *tag = NULL;
    for (int32_t i = 0; i < cp->n_uids; i++) {
        if (s->args[i] != t)
            continue;
        int64_t uid = cp->uids[i];
        cdg_tensor *d = uid == UID_X ? &spec.x : uid == UID_Z ? &spec.z : uid == out_uid ? &spec.y : NULL;
        if (!d || !restride_desc(d, as))
            return false;
        if (!tag)
            tag = uid == UID_X ? "cudnn-slice-x" : uid == UID_Z ? "cudnn-slice-z" : "cudnn-slice-y";
    }
    if (!tag)
        return false;
    if (commit) {
        cp->spec = spec;
        return true;
    }
    /* The plan file's verdict on this very question, else the check. */
    slice_record ask = slice_ask(&spec, as->alias_offset);
    const cuda_choice *given = cuda_choice_find(p, s->node->name, tag);
    if (given && given->size == sizeof ask) {
        slice_record was;
        memcpy(&was, given->data, sizeof was);
        ask.same = was.same;
        if (memcmp(&was, &ask, sizeof ask) == 0)
            return cuda_choice_put(p, s->node->name, tag, &ask, sizeof ask) == SEGRT_OK && ask.same;
    }
    bool same = false;
    /* An error here only means the copy stays. */
    if (slice_check(p, s, &spec, t, as->alias_offset, &same) != SEGRT_OK)
        return false;
    ask.same = same;
    return cuda_choice_put(p, s->node->name, tag, &ask, sizeof ask) == SEGRT_OK && same;
}

/* Once the plan's strides are final (a Concat may have restrided the
 * step's tensors since it was built): the execution plan serialized, so
 * that each context restores it instead of finalizing it from the engine
 * config, which for cuDNN's runtime-compiled fusion engines compiles a
 * kernel every time (most of a plan load's time to its first result).
 * Kept in the plan file beside the choice; a plan file's is taken as it
 * is. Disabling cudnn-plan-json turns this off. */
static sg_status conv_build_done(sg_cuda_plan *p, cuda_step *s)
{
    conv_params *cp = s->params;
    if (cuda_off(p, SG_KERNEL_CUDNN_PLAN_JSON))
        return SEGRT_OK;
    char tag[32];
    snprintf(tag, sizeof tag, "%s-json", cp->tag);
    const cuda_choice *given = cuda_choice_find(p, s->node->name, tag);
    const struct cudnn_conv_seen *seen;
    if (given) {
        if (given->size < 1)
            return sg_node_error(s->node, SEGRT_ERROR_INVALID_ARGUMENT, "the plan file's cuDNN plan is empty");
        if (!(cp->json = malloc(given->size)))
            return SEGRT_ERROR_OUT_OF_MEMORY;
        memcpy(cp->json, given->data, given->size);
        cp->json_len = given->size;
    } else if ((seen = seen_plan(p, &cp->spec, &cp->choice))) { /* as the search left it: no second finalize */
        SG_TRY(json_copy(seen->json, seen->json_len, &cp->json));
        cp->json_len = seen->json_len;
    } else {
        cdg_pool pool;
        pool.n = 0;
        cudnnBackendDescriptor_t graph, plan;
        bool ok = false;
        int64_t ws = 0;
        char why[600];
        sg_status st = conv_graph(&pool, p->build_cudnn, &cp->spec, cp->choice.variant, &graph, &ok, why, sizeof why);
        if (st == SEGRT_OK && ok)
            st = cdg_plan_from_choice(&pool, p->build_cudnn, graph, &cp->choice, &plan, &ws, &ok, why, sizeof why);
        if (st == SEGRT_OK && ok)
            st = cdg_plan_json(plan, &cp->json, &cp->json_len);
        cdg_pool_clear(&pool);
        SG_TRY(st);
        if (!cp->json) /* not serializable, or not finalized here: contexts finalize (and say why) */
            return SEGRT_OK;
    }
    return cuda_choice_put(p, s->node->name, tag, cp->json, cp->json_len);
}

/* Building ------------------------------------------------------------------------ */

/* Whether t is dense in layout l (dims of size 1 may have any stride:
 * they never move an address). */
static bool dense_as(const cuda_tensor *t, cuda_layout l)
{
    int64_t want[SEGRT_MAX_RANK];
    cuda_layout_strides(l, t->rank, t->dims, want);
    for (int32_t i = 0; i < t->rank; i++)
        if (t->dims[i] > 1 && t->strides[i] != want[i])
            return false;
    return true;
}

/* A channels-last tensor description from the graph's dims, with a unit H
 * inserted for 1-D convolutions. */
static cdg_tensor describe(int64_t uid, cudnnDataType_t dt, int32_t rank, const int64_t *dims)
{
    cdg_tensor t;
    memset(&t, 0, sizeof t);
    t.uid = uid;
    t.dtype = dt;
    if (rank == 3) {
        t.rank = 4;
        t.dims[0] = dims[0];
        t.dims[1] = dims[1];
        t.dims[2] = 1;
        t.dims[3] = dims[2];
    } else {
        t.rank = rank;
        memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
    }
    cuda_layout_strides(CUDA_LAYOUT_CHANNELS_LAST, t.rank, t.dims, t.strides);
    return t;
}

/* cuDNN's post padding: the smallest non-negative one for which a
 * convolution over `big` positions padded by pre gives `small` outputs.
 * False when that would need a negative padding. */
static bool post_padding(int64_t big, int64_t small, int64_t pre, int64_t ext, int64_t stride, int64_t *post)
{
    int64_t need = (small - 1) * stride + ext - big - pre; /* exact fit */
    int64_t v = need < 0 ? 0 : need;
    if (v > need + stride - 1)
        return false;
    *post = v;
    return true;
}

/* cuDNN takes tensors of fewer than 2^31 elements ("the total size of a
 * tensor descriptor" is limited to 2 Giga-elements; its engines index in
 * 32 bits). dims are below 2^31 each (cuda_plan.c checks every node). A
 * channel-padded input (padded_channels) is checked again where padded. */
static sg_status cudnn_fits(const sg_node *n, const char *role, const char *name, const int64_t *dims, int32_t rank)
{
    int64_t numel = 1;
    bool ok = true;
    for (int32_t d = 0; d < rank && ok; d++)
        ok = sg_mul_i64(numel, dims[d], &numel) && numel <= INT32_MAX;
    if (ok)
        return SEGRT_OK;
    char b[160];
    return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED,
                         "%s `%s` (%s) has 2^31 elements or more; cuDNN's convolutions index a tensor's "
                         "elements in 32 bits",
                         role, name, sg_dims_format(dims, rank, b, sizeof b));
}

/* The status of reading again an attribute cuda_conv_descs_read found
 * malformed, for its message; the same reading cannot succeed twice. */
static sg_status reread_failure(const sg_node *n, sg_status s)
{
    return s != SEGRT_OK ? s
                         : sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "the attributes read differently a second time");
}

/* Reads the node into a spec: dims, geometry, epilogue. UNSUPPORTED (with
 * a message) for what cuDNN is not asked to do. */
static sg_status conv_spec_read(const sg_cuda_plan *p, const sg_node *n, bool dgrad, cudnnDataType_t io,
                                conv_spec *cs, double *flops)
{
    memset(cs, 0, sizeof *cs);
    const sg_graph *g = p->g;
    if (n->n_inputs < 2 || n->inputs[0] < 0 || n->inputs[1] < 0 || n->n_outputs < 1 || n->outputs[0] < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs X, W and an output");
    const sg_value *xv = &g->values[n->inputs[0]], *wv = &g->values[n->inputs[1]], *yv = &g->values[n->outputs[0]];
    int32_t rank = xv->shape.rank;
    if (rank < 3 || rank > 5)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "input of rank %d: the CUDA backend runs 1-D, 2-D and "
                             "3-D convolutions", rank);
    sg_dtype xdt = xv->dtype;
    if (xdt != SEGRT_DTYPE_FLOAT32 && xdt != SEGRT_DTYPE_FLOAT16 && xdt != SEGRT_DTYPE_BFLOAT16)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%s data: cuDNN convolutions take float32, float16 and "
                             "bfloat16", segrt_dtype_name(xdt));
    int64_t xd[5], wd[5], yd[5];
    if (!sg_shape_dims(&xv->shape, xd) || !sg_shape_dims(&wv->shape, wd) || !sg_shape_dims(&yv->shape, yd) ||
        wv->shape.rank != rank || yv->shape.rank != rank)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "needs static X, W and output shapes of one rank");
    int64_t numel_x = 1, numel_y = 1;
    for (int32_t i = 0; i < rank; i++) {
        numel_x *= xd[i];
        numel_y *= yd[i];
    }
    if (numel_x == 0 || numel_y == 0 || wd[0] == 0 || wd[1] == 0)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "empty tensors are not run through cuDNN");
    SG_TRY(cudnn_fits(n, "input", xv->name, xd, rank));
    SG_TRY(cudnn_fits(n, "weight", wv->name, wd, rank));
    SG_TRY(cudnn_fits(n, "output", yv->name, yd, rank));
    int32_t nsp = rank - 2;
    /* The attributes as cuda_conv_descs_read parsed them; a malformed node
     * is read again only for the message saying why. */
    const cuda_conv_desc *desc = cuda_conv_desc_of(p, n);
    if (!desc->attrs_ok) {
        sg_conv_attrs again;
        return reread_failure(n, sg_conv_attrs_read(g, n, nsp, &wv->shape, wv->name, &again));
    }
    const sg_conv_attrs a = desc->a;
    int64_t group = desc->group;
    if (group < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "group is %lld", (long long)group);
    int64_t opad[SEGRT_MAX_RANK] = {0};
    int32_t n_os = 0;
    const int64_t *os = NULL;
    if (dgrad) {
        if (!desc->opad_ok)
            return reread_failure(n, sg_iu_attr_ints(n, "output_padding", nsp, 0, 0, opad, NULL));
        memcpy(opad, desc->opad, sizeof opad);
        os = desc->output_shape;
        n_os = desc->n_output_shape;
        if (os && n_os < nsp)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "output_shape has %d values for %d spatial dims",
                                 n_os, nsp);
    }
    /* Spatial geometry; 1-D gets a leading unit H. */
    int32_t off = nsp == 1 ? 1 : 0;
    cs->geom.nsp = nsp + off;
    for (int32_t i = 0; i < cs->geom.nsp; i++) {
        cs->geom.stride[i] = cs->geom.dil[i] = 1;
        cs->geom.pre[i] = cs->geom.post[i] = 0;
    }
    double macs = 1.0;
    for (int32_t i = 0; i < nsp; i++) {
        int64_t in = xd[2 + i], out = yd[2 + i], s = a.strides[i], d = a.dilations[i], k = wd[2 + i];
        int64_t ext = (k - 1) * d + 1, pre;
        bool fits;
        if (!dgrad) {
            pre = sg_conv_pad_begin(&a, i, (out - 1) * s + ext - in);
            fits = post_padding(in, out, pre, ext, s, &cs->geom.post[off + i]);
            macs *= (double)out * (double)k;
        } else {
            /* As the reference does: pads from output_shape or SAME
             * (the odd one at the end for SAME_UPPER, at the start
             * otherwise), else the explicit ones. */
            bool same = a.auto_pad == SG_AUTO_PAD_SAME_UPPER || a.auto_pad == SG_AUTO_PAD_SAME_LOWER;
            if (os || same) {
                int64_t full = s * (in - 1) + opad[i] + ext;
                int64_t want = os ? os[n_os - nsp + i] : in * s;
                int64_t total = full > want ? full - want : 0;
                pre = a.auto_pad == SG_AUTO_PAD_SAME_UPPER ? total / 2 : total - total / 2;
            } else {
                pre = a.auto_pad == SG_AUTO_PAD_VALID ? 0 : a.pads[i];
            }
            /* The forward convolution this is the data gradient of maps
             * the op's output (dx) back to its input (dy). */
            fits = post_padding(out, in, pre, ext, s, &cs->geom.post[off + i]);
            macs *= (double)in * (double)k;
        }
        if (!fits || pre < 0)
            return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "spatial dim %d: output %lld from input %lld would "
                                 "need a negative cuDNN padding", i, (long long)out, (long long)in);
        cs->geom.pre[off + i] = pre;
        cs->geom.stride[off + i] = s;
        cs->geom.dil[off + i] = d;
    }
    cs->dgrad = dgrad;
    cs->rank = rank == 3 ? 4 : rank;
    cs->x = describe(UID_X, io, rank, xd);
    cs->w = describe(UID_W, io, rank, wd);
    cs->y = describe(UID_Y, io, rank, yd);
    cs->z = describe(UID_Z, io, rank, yd);
    cs->channels = yd[1];
    cs->has_bias = n->n_inputs > 2 && n->inputs[2] >= 0;
    /* cuDNN infers the groups as C_x / C_w (forward) or C_dx / C_w (dgrad). */
    bool channels_ok = dgrad ? (yd[1] == wd[1] * group && xd[1] == wd[0])
                             : (xd[1] == wd[1] * group && yd[1] == wd[0]);
    if (!channels_ok || wd[0] % group != 0)
        return sg_node_error(n, SEGRT_ERROR_SHAPE,
                             "channels do not agree: input %lld, output %lld, weight %lldx%lld, group %lld",
                             (long long)xd[1], (long long)yd[1], (long long)wd[0], (long long)wd[1],
                             (long long)group);
    /* 2 * N * (output channels of the small side) * positions * taps * C/g. */
    double cpg = dgrad ? (double)yd[1] / (double)group : (double)wd[1];
    double kout = dgrad ? (double)xd[1] : (double)yd[1];
    *flops = 2.0 * (double)xd[0] * kout * macs * cpg;
    return SEGRT_OK;
}

/* Engine choice --------------------------------------------------------------------- */

static size_t cdg_bytes(const cdg_tensor *t, cudnnDataType_t dt)
{
    size_t n = dt == CUDNN_DATA_FLOAT ? 4 : 2;
    for (int32_t i = 0; i < t->rank; i++)
        n *= (size_t)t->dims[i];
    return n;
}

/* The tensors a variant's graph binds, for timing its configurations. */
static void tuning_of(sg_cuda_plan *p, const conv_spec *cs, int32_t variant, cdg_tuning *t)
{
    memset(t, 0, sizeof *t);
    t->candidates = p->opts.autotune;
    t->finalized = &p->report.cudnn_finalized;
    t->stream = p->build_stream;
    t->uids[t->n] = UID_X;
    t->bytes[t->n++] = cdg_bytes(&cs->x, cs->x.dtype);
    t->uids[t->n] = UID_W;
    t->bytes[t->n++] = cdg_bytes(&cs->w, cs->w.dtype);
    bool fused = variant_fused(variant);
    if (fused && cs->has_bias) {
        cdg_tensor b = bias_tensor(cs, variant_io_bias(variant) ? cs->x.dtype : CUDNN_DATA_FLOAT);
        t->uids[t->n] = UID_B;
        t->bytes[t->n++] = cdg_bytes(&b, b.dtype);
    }
    if (variant_residual(variant)) {
        t->uids[t->n] = UID_Z;
        t->bytes[t->n++] = cdg_bytes(&cs->z, cs->z.dtype);
    }
    t->uids[t->n] = output_uid(cs, variant);
    t->bytes[t->n++] = cdg_bytes(&cs->y, fused ? cs->out : cs->y.dtype);
}

/* Searches one variant with the build handle. */
static sg_status try_variant(sg_cuda_plan *p, const sg_node *n, const conv_spec *cs, int32_t variant, cdg_choice *out,
                             bool *found, char **json, size_t *json_len, char *why, size_t why_cap)
{
    cdg_pool pool;
    pool.n = 0;
    cudnnBackendDescriptor_t graph;
    bool ok = false;
    *found = false;
    cdg_tuning tune;
    tuning_of(p, cs, variant, &tune);
    sg_status s = conv_graph(&pool, p->build_cudnn, cs, variant, &graph, &ok, why, why_cap);
    if (s == SEGRT_OK && ok)
        s = cdg_search(p->build_cudnn, graph, &cs->filter, &tune, out, found, json, json_len, why, why_cap);
    cdg_pool_clear(&pool);
    if (s != SEGRT_OK)
        return sg_error_prefix(s, "node `%s` (%s): engine search (%s): ", n->name, sg_op_name(n->op),
                               variant_name(variant));
    if (*found)
        out->variant = variant;
    return SEGRT_OK;
}

/* The choice for this node: the plan file's, one made for the same graph
 * earlier in this build, or a search over the variants, fused ones
 * first. */
static sg_status conv_choose(sg_cuda_plan *p, const sg_node *n, const conv_spec *cs, const char *tag,
                             cdg_choice *out)
{
    const cuda_choice *given = cuda_choice_find(p, n->name, tag);
    if (given) {
        if (given->size != sizeof(cdg_choice))
            return sg_node_error(n, SEGRT_ERROR_INVALID_ARGUMENT, "the plan file's cuDNN choice has %zu bytes; "
                                 "this build records %zu", given->size, sizeof(cdg_choice));
        memcpy(out, given->data, sizeof *out);
        if (out->version != CDG_CHOICE_VERSION)
            return sg_node_error(n, SEGRT_ERROR_INVALID_ARGUMENT, "the plan file's cuDNN choice is version %u; "
                                 "this build reads version %u", out->version, CDG_CHOICE_VERSION);
        if (out->cudnn_version != (uint32_t)cudnnGetVersion())
            return sg_node_error(n, SEGRT_ERROR_INVALID_ARGUMENT, "the plan file's cuDNN choice was made with "
                                 "cuDNN %u; this is cuDNN %zu", out->cudnn_version, cudnnGetVersion());
        bool fusable = cs->has_bias || cs->act != SGK_ACT_NONE || cs->residual;
        bool known = out->variant >= VARIANT_PLAIN && out->variant <= VARIANT_IO_BIAS_RES;
        if (!known || (variant_fused(out->variant) && !fusable) ||
            (variant_residual(out->variant) && !cs->residual) || (variant_io_bias(out->variant) && !cs->has_bias))
            return sg_node_error(n, SEGRT_ERROR_INVALID_ARGUMENT, "the plan file's cuDNN choice is for a %s graph, "
                                 "which this node does not have", variant_name(out->variant));
        if (out->workspace < 0 || out->workspace > cs->filter.max_workspace)
            return sg_node_error(n, SEGRT_ERROR_INVALID_ARGUMENT, "the plan file's cuDNN choice needs %lld bytes of "
                                 "workspace; the limit is %lld", (long long)out->workspace,
                                 (long long)cs->filter.max_workspace);
        /* Taken as recorded: every context finalizes it (ctx_init) and
         * fails there, naming the node, if this cuDNN cannot. Finalizing
         * it here too would double a plan load's cost (a runtime
         * compilation per fused convolution). */
        return SEGRT_OK;
    }
    const struct cudnn_conv_seen *seen = seen_find(p, cs);
    if (seen) {
        *out = seen->choice;
        p->report.cudnn_reused++;
        return SEGRT_OK;
    }
    p->report.cudnn_searches++;
    double t0 = sg_now_seconds();
    int32_t variants[5], nv = 0;
    bool io_bias = cs->has_bias && cs->x.dtype != CUDNN_DATA_FLOAT;
    if (!cs->dgrad && cs->residual) {
        variants[nv++] = VARIANT_F32_BIAS_RES;
        if (io_bias)
            variants[nv++] = VARIANT_IO_BIAS_RES;
    }
    /* A ConvTranspose (dgrad) asks for the epilogue too: where cuDNN's
     * runtime fusion has no engine for it, the search falls through to the
     * plain graph and a map applies bias and activation after it, a pass
     * that can take nearly half the layer's time. */
    if (cs->has_bias || cs->act != SGK_ACT_NONE) {
        variants[nv++] = VARIANT_FUSED_F32_BIAS;
        if (io_bias)
            variants[nv++] = VARIANT_FUSED_IO_BIAS;
    }
    variants[nv++] = VARIANT_PLAIN;
    char why[5][700];
    for (int32_t i = 0; i < nv; i++) {
        bool found = false;
        why[i][0] = '\0';
        char *json = NULL;
        size_t json_len = 0;
        SG_TRY(try_variant(p, n, cs, variants[i], out, &found, &json, &json_len, why[i], sizeof why[i]));
        if (!found)
            continue;
        sg_status s = seen_add(p, cs, out, json, json_len);
        free(json);
        p->report.cudnn_seconds += sg_now_seconds() - t0;
        return s;
    }
    p->report.cudnn_seconds += sg_now_seconds() - t0;
    char msg[3600];
    size_t len = 0;
    msg[0] = '\0';
    for (int32_t i = 0; i < nv && len < sizeof msg; i++) {
        int w = snprintf(msg + len, sizeof msg - len, "%s%s: %s", i ? "; " : "", variant_name(variants[i]), why[i]);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "cuDNN has no engine for this %s (%s data): %s",
                         cs->dgrad ? "data-gradient convolution" : "convolution",
                         cs->x.dtype == CUDNN_DATA_HALF       ? "float16"
                         : cs->x.dtype == CUDNN_DATA_BFLOAT16 ? "bfloat16"
                                                              : "float32",
                         msg);
}

/* Steps ------------------------------------------------------------------------------ */

/* The tensor of value v in dtype dt, dense in layout l. */
static sg_status input_as(sg_cuda_plan *p, const sg_node *n, int32_t v, sg_dtype dt, cuda_layout l, int32_t *out)
{
    SG_TRY(cuda_value_as(p, v, dt, l, out));
    if (!dense_as(&p->tensors[*out], l))
        return sg_node_error(n, SEGRT_ERROR_INTERNAL, "input `%s` is not dense %s", p->g->values[v].name,
                             l == CUDA_LAYOUT_PLAIN ? "row-major" : "channels-last");
    return SEGRT_OK;
}

/* Input channels padded to 8 ------------------------------------------------------
 * A convolution over 2 to 7 channels (an RGB image) has too few for
 * cuDNN's tensor-core kernels, and the engines left ran basicunet2d's
 * first layer slower than the next layer with ten times its work. With
 * the input copied into 8 channels, the rest zero (a kernel
 * that also does the dtype and layout conversion the input needed anyway),
 * and the weights padded with zeros, the tensor-core kernels take it and
 * the sums are the same. Disabling pad-channels turns it off (A/B). */
#define PAD_CHANNELS 8

/* The channels node n's input is padded to, or 0 for none. */
static int64_t padded_channels(const sg_cuda_plan *p, const sg_node *n, bool dgrad, sg_dtype io)
{
    if (dgrad || cuda_off(p, SG_KERNEL_PAD_CHANNELS) || (io != SEGRT_DTYPE_FLOAT16 && io != SEGRT_DTYPE_BFLOAT16) ||
        cuda_conv_desc_of(p, n)->group != 1)
        return 0;
    const sg_value *wv = &p->g->values[n->inputs[1]];
    int32_t xt = cuda_value(p, n->inputs[0]);
    if (xt < 0 || !wv->data)
        return 0;
    sgk_view x = cuda_geometry_view(p, xt), y = x;
    if (x.rank < 3 || x.dims[1] < 2 || x.dims[1] >= PAD_CHANNELS)
        return 0;
    y.dtype = io;
    y.dims[1] = PAD_CHANNELS;
    cuda_layout_strides(CUDA_LAYOUT_CHANNELS_LAST, y.rank, y.dims, y.strides);
    return sgk_pad_channels_fits(&y, &x) ? PAD_CHANNELS : 0;
}

static sg_status pad_run(const cuda_step *s, cuda_run *r)
{
    sgk_view x = cuda_view(r, s->args[0]), y = cuda_view(r, s->args[1]);
    return sgk_pad_channels(r->stream, &y, &x);
}

sg_status cuda_conv_padded_input(sg_cuda_plan *p, const sg_node *n, int64_t to, sg_dtype io, int32_t *out)
{
    int32_t xt = cuda_value(p, n->inputs[0]);
    int64_t dims[SEGRT_MAX_RANK];
    const cuda_tensor *x = &p->tensors[xt];
    int32_t rank = x->rank;
    memcpy(dims, x->dims, sizeof(int64_t) * (size_t)rank);
    dims[1] = to;
    SG_TRY(cuda_tensor_new(p, io, rank, dims, CUDA_LAYOUT_CHANNELS_LAST, out));
    int32_t args[2] = {xt, *out};
    cuda_step *st;
    SG_TRY(cuda_step_new(p, n, "segrt pad channels", pad_run, args, 2, 1, NULL, NULL, &st));
    st->name = p->g->values[n->inputs[0]].name;
    st->any_view = 1; /* x as it is at run time (the caller's buffer, say) */
    return SEGRT_OK;
}

static sg_dtype io_dtype(cuda_math m)
{
    switch (m) {
    case CUDA_MATH_FP16: return SEGRT_DTYPE_FLOAT16;
    case CUDA_MATH_BF16: return SEGRT_DTYPE_BFLOAT16;
    default: return SEGRT_DTYPE_FLOAT32;
    }
}

sg_status cuda_build_conv_cudnn(sg_cuda_plan *p, const sg_node *n, bool dgrad)
{
    cuda_math math = cuda_node_math(p, n);
    sg_dtype io = io_dtype(math);
    conv_spec cs;
    double flops = 0;
    SG_TRY(conv_spec_read(p, n, dgrad, cdg_dtype(io), &cs, &flops));
    int64_t pad_to = padded_channels(p, n, dgrad, io);
    if (pad_to > 0) {
        cs.x.dims[1] = cs.w.dims[1] = pad_to;
        SG_TRY(cudnn_fits(n, "channel-padded input", p->g->values[n->inputs[0]].name, cs.x.dims, cs.x.rank));
        cuda_layout_strides(CUDA_LAYOUT_CHANNELS_LAST, cs.x.rank, cs.x.dims, cs.x.strides);
        cuda_layout_strides(CUDA_LAYOUT_CHANNELS_LAST, cs.w.rank, cs.w.dims, cs.w.strides);
    }
    cs.filter.no_tensor_core = math == CUDA_MATH_FP32;
    cs.filter.max_workspace = p->opts.workspace_limit > (size_t)INT64_MAX ? INT64_MAX
                                                                          : (int64_t)p->opts.workspace_limit;
    int32_t act_node = cuda_conv_activation(p, n, &cs.act, &cs.act_alpha);
    /* cuDNN's RELU_FWD with a lower slope above 1 gives max(x, slope x),
     * not the LeakyRelu (tests/gpu/test_gpu_act_slopes.py: a slope of 1.5
     * fused here was off by 40 %; MONAI's PReLU slopes may be above 1).
     * Such an activation stays a step of its own. */
    if (act_node >= 0 && cs.act == SGK_ACT_LEAKY_RELU && !(cs.act_alpha <= 1.0f))
        act_node = -1;
    if (act_node < 0)
        cs.act = SGK_ACT_NONE;
    int32_t act_value = act_node >= 0 ? p->g->nodes[act_node].outputs[0] : n->outputs[0];
    /* A residual Add after the activation joins a fused epilogue (the
     * choice below says whether one was found). */
    sg_dtype out_dt = cuda_out_dtype(p, act_node >= 0 ? &p->g->nodes[act_node] : n, act_value);
    int32_t z_value = -1;
    int32_t res_node = dgrad ? -1 : cuda_residual_add(p, act_value, &z_value);
    /* Only where the sum is stored as the activation would be: the choice
     * is searched for one output dtype whether the Add joins or not. */
    if (res_node >= 0 && cuda_out_dtype(p, &p->g->nodes[res_node], p->g->nodes[res_node].outputs[0]) != out_dt)
        res_node = -1;
    cs.residual = res_node >= 0;
    int32_t out_value = res_node >= 0 ? p->g->nodes[res_node].outputs[0] : act_value;
    cs.out = cdg_dtype(out_dt);

    /* Choose before touching the plan: an UNSUPPORTED here leaves it as
     * it was, for the CPU fallback. */
    cdg_choice choice;
    memset(&choice, 0, sizeof choice);
    /* A padded layer's choice is for other shapes: its own record. */
    const char *tag = pad_to ? "cudnn-pad8" : "cudnn";
    SG_TRY(conv_choose(p, n, &cs, tag, &choice));
    SG_TRY(cuda_choice_put(p, n->name, tag, &choice, sizeof choice));
    if (cs.residual && !variant_residual(choice.variant)) {
        /* No engine takes the residual: the Add stays a node of its own. */
        cs.residual = false;
        res_node = -1;
        out_value = act_value;
    }

    int32_t xt, wt, bt = -1, outt;
    if (pad_to > 0) {
        SG_TRY(cuda_conv_padded_input(p, n, pad_to, io, &xt));
        SG_TRY(cuda_const_padded(p, n->inputs[1], io, CUDA_LAYOUT_CHANNELS_LAST, 1, pad_to, &wt));
    } else {
        SG_TRY(input_as(p, n, n->inputs[0], io, CUDA_LAYOUT_CHANNELS_LAST, &xt));
        SG_TRY(input_as(p, n, n->inputs[1], io, CUDA_LAYOUT_CHANNELS_LAST, &wt));
    }
    bool fused = variant_fused(choice.variant);
    int32_t zt = -1;
    if (cs.residual)
        SG_TRY(input_as(p, n, z_value, io, CUDA_LAYOUT_CHANNELS_LAST, &zt));
    if (cs.has_bias) {
        sg_dtype bdt = variant_io_bias(choice.variant) ? io : SEGRT_DTYPE_FLOAT32;
        SG_TRY(input_as(p, n, n->inputs[2], bdt, CUDA_LAYOUT_PLAIN, &bt));
        if (p->tensors[bt].rank != 1 || p->tensors[bt].dims[0] != cs.channels)
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "bias has %lld values for %lld output channels",
                                 (long long)(p->tensors[bt].rank ? p->tensors[bt].dims[0] : 1),
                                 (long long)cs.channels);
    }
    SG_TRY(cuda_output_new(p, n, 0, out_dt, CUDA_LAYOUT_CHANNELS_LAST, &outt));
    /* Without a fused epilogue the convolution writes its own dtype, into
     * a scratch tensor when a map still has to finish the job. */
    bool need_epi = !fused && (cs.has_bias || cs.act != SGK_ACT_NONE || out_dt != io);
    int32_t convt = outt;
    if (need_epi) {
        const cuda_tensor *o = &p->tensors[outt];
        SG_TRY(cuda_tensor_new(p, io, o->rank, o->dims, CUDA_LAYOUT_CHANNELS_LAST, &convt));
    }

    conv_params *cp = sg_calloc(1, sizeof *cp);
    if (!cp)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    cp->spec = cs;
    cp->choice = choice;
    cp->tag = tag;
    int32_t args[CONV_MAX_UIDS], na = 0;
    args[na] = xt;
    cp->uids[na++] = UID_X;
    args[na] = wt;
    cp->uids[na++] = UID_W;
    if (fused && cs.has_bias) {
        args[na] = bt;
        cp->uids[na++] = UID_B;
    }
    if (cs.residual) {
        args[na] = zt;
        cp->uids[na++] = UID_Z;
    }
    args[na] = convt;
    cp->uids[na++] = output_uid(&cs, choice.variant);
    cp->n_uids = na;
    const char *impl = dgrad ? "cudnn dgrad" : fused ? "cudnn conv+epilogue" : "cudnn conv";
    cuda_step *st;
    SG_TRY(cuda_step_new(p, n, impl, conv_run, args, na, 1, cp, conv_params_free, &st));
    st->workspace_bytes = (size_t)choice.workspace;
    st->flops = flops;
    st->ctx_init = conv_ctx_init;
    st->ctx_free = conv_ctx_free;
    st->build_done = conv_build_done;
    if (!cuda_off(p, SG_KERNEL_CONCAT_SLICES))
        st->restride = conv_restride;

    if (need_epi) {
        epi_params *ep = sg_calloc(1, sizeof *ep);
        if (!ep)
            return SEGRT_ERROR_OUT_OF_MEMORY;
        ep->has_bias = cs.has_bias;
        ep->mp.op = cs.has_bias ? SGK_ADD : SGK_COPY;
        ep->mp.act = cs.act;
        ep->mp.act_alpha = cs.act_alpha;
        int32_t eargs[3], ne = 0;
        eargs[ne++] = convt;
        if (cs.has_bias)
            eargs[ne++] = bt;
        eargs[ne++] = outt;
        cuda_step *est;
        SG_TRY(cuda_step_new(p, n, "segrt bias+act", epi_run, eargs, ne, 1, ep, NULL, &est));
        cuda_step_any_view(est);
    }
    if (act_node >= 0) {
        cuda_mark_fused(p, act_node);
        cuda_value_set(p, act_value, outt);
    }
    if (res_node >= 0) {
        cuda_mark_fused(p, res_node);
        cuda_value_set(p, out_value, outt);
    }
    return SEGRT_OK;
}
