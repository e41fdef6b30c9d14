/* InstanceNormalization and GroupNormalization on the CPU, in plain,
 * channel-blocked or channels-last layouts (whatever the producing
 * convolution chose), with a following ReLU or LeakyReLU fused: two reads and
 * one write of the activation. oneDNN has neither. And LayerNormalization
 * in float32 (at the end). */
#include "backend/cpu/cpu_internal.h"
#include "graph/infer.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <string.h>

typedef struct inorm_params {
    cpu_channel_layout_t l;
    int64_t norm_group;     /* channels normalized together: 1 for InstanceNorm */
    float eps;
    float slope;            /* fused LeakyReLU: y < 0 ? slope * y : y */
    bool act;
    bool relu;              /* fused ReLU: y < 0 ? 0 : y (NaN stays, -inf gives 0) */
} inorm_params;

bool cpu_channel_layout(const dnnl_memory_desc_t *md, cpu_channel_layout_t *cl)
{
    if (md->format_kind != dnnl_blocked || md->ndims < 2)
        return false;
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    int64_t block = 1;
    if (b->inner_nblks == 1 && b->inner_idxs[0] == 1)
        block = b->inner_blks[0];
    else if (b->inner_nblks != 0)
        return false;
    int64_t cgroups = md->padded_dims[1] / block;
    if (block == 1 && b->strides[1] == 1 && cgroups > 1) {
        block = md->padded_dims[1]; /* channels-last */
        cgroups = 1;
    }
    int64_t expect = block;
    for (int32_t d = md->ndims - 1; d >= 2; d--) {
        if (b->strides[d] != expect)
            return false;
        expect *= md->padded_dims[d];
    }
    if (block > CPU_MAX_CHANNEL_GROUP || (cgroups > 1 && b->strides[1] < expect))
        return false;
    cl->block = block;
    cl->stride_cb = cgroups > 1 ? b->strides[1] : 0;
    cl->stride_n = b->strides[0];
    cl->padded_c = md->padded_dims[1];
    cl->n = md->dims[0];
    cl->c = md->dims[1];
    cl->spatial = 1;
    for (int32_t d = 2; d < md->ndims; d++)
        cl->spatial *= md->dims[d];
    return true;
}

/* Running statistics of one channel group: count, mean and the sum of
 * squared deviations (M2), in double. */
typedef struct group_stats {
    double count;
    double mean[CPU_MAX_CHANNEL_GROUP];
    double m2[CPU_MAX_CHANNEL_GROUP];
} group_stats;

/* Rows per chunk: a chunk of up to 1024 channels stays in L1/L2 between
 * its two passes. */
#define INORM_CHUNK_ROWS 32

/* Adds rows [from, to) of a group to st: float sums per small chunk (these
 * vectorize), then each chunk's mean and M2 merged in double with Chan's
 * formula, so precision does not depend on the number of rows. */
static inline __attribute__((always_inline)) void stats_rows_b(const float *restrict xs, int64_t B, int64_t from,
                                                                 int64_t to, group_stats *st)
{
    float csum[CPU_MAX_CHANNEL_GROUP], cm2[CPU_MAX_CHANNEL_GROUP], cmean[CPU_MAX_CHANNEL_GROUP];
    for (int64_t r0 = from; r0 < to; r0 += INORM_CHUNK_ROWS) {
        int64_t r1 = r0 + INORM_CHUNK_ROWS < to ? r0 + INORM_CHUNK_ROWS : to;
        float n = (float)(r1 - r0);
        for (int64_t k = 0; k < B; k++)
            csum[k] = cm2[k] = 0;
        for (int64_t i = r0; i < r1; i++)
            for (int64_t k = 0; k < B; k++)
                csum[k] += xs[i * B + k];
        for (int64_t k = 0; k < B; k++)
            cmean[k] = csum[k] / n;
        for (int64_t i = r0; i < r1; i++)
            for (int64_t k = 0; k < B; k++) {
                float d = xs[i * B + k] - cmean[k];
                cm2[k] += d * d;
            }
        double tot = st->count + n, w = st->count * n / tot;
        for (int64_t k = 0; k < B; k++) {
            double delta = cmean[k] - st->mean[k];
            st->mean[k] += delta * n / tot;
            st->m2[k] += cm2[k] + delta * delta * w;
        }
        st->count = tot;
    }
}

/* Adds rows [from, to) of a group to st: float sums per small chunk (these
 * vectorize), then each chunk's mean and M2 merged in double with Chan's
 * formula, so precision does not depend on the number of rows. The common
 * channel counts get their own copy with the count known at compile time,
 * which the compiler turns into straight vector code. */
static void stats_add_rows(const float *xs, int64_t B, int64_t from, int64_t to, group_stats *st)
{
    switch (B) {
    case 8: stats_rows_b(xs, 8, from, to, st); break;
    case 16: stats_rows_b(xs, 16, from, to, st); break;
    case 32: stats_rows_b(xs, 32, from, to, st); break;
    case 64: stats_rows_b(xs, 64, from, to, st); break;
    default: stats_rows_b(xs, B, from, to, st); break;
    }
}

static void stats_merge(group_stats *into, const group_stats *from, int64_t B)
{
    if (from->count == 0)
        return;
    double tot = into->count + from->count, w = into->count * from->count / tot;
    for (int64_t k = 0; k < B; k++) {
        double delta = from->mean[k] - into->mean[k];
        into->mean[k] += delta * from->count / tot;
        into->m2[k] += from->m2[k] + delta * delta * w;
    }
    into->count = tot;
}

/* Turns a memory block's per-channel statistics into per-channel scale and
 * shift. With GroupNorm, the statistics of each norm group's channels (all
 * inside this block) are merged first. */
static void group_affine(const inorm_params *ip, int64_t cb, const group_stats *st, const float *gamma,
                         const float *beta, float *scale, float *shift)
{
    int64_t B = ip->l.block, G = ip->norm_group;
    for (int64_t k0 = 0; k0 < B; k0 += G) {
        double mean = st->mean[k0], m2 = st->m2[k0], count = st->count;
        for (int64_t k = k0 + 1; k < k0 + G && k < B; k++) {
            /* Chan's merge of equal counts. */
            double tot = count + st->count, delta = st->mean[k] - mean;
            mean += delta * st->count / tot;
            m2 += st->m2[k] + delta * delta * count * st->count / tot;
            count = tot;
        }
        double inv = 1.0 / sqrt(m2 / count + ip->eps);
        for (int64_t k = k0; k < k0 + G && k < B; k++) {
            int64_t c = cb * B + k;
            if (c >= ip->l.c) { /* layout padding stays zero */
                scale[k] = shift[k] = 0;
                continue;
            }
            scale[k] = (float)(gamma[c] * inv);
            shift[k] = (float)(beta[c] - gamma[c] * inv * mean);
        }
    }
}

/* Act: 0 none, 1 LeakyReLU (slope), 2 ReLU. Plain values and restrict
 * pointers, so that the compiler vectorizes the channel loop. */
static inline __attribute__((always_inline)) void apply_b(int act, float slope, int64_t B,
                                                            const float *restrict xs, float *restrict ys,
                                                            int64_t from, int64_t to,
                                                            const float *restrict scale,
                                                            const float *restrict shift)
{
    for (int64_t i = from; i < to; i++) {
        const float *restrict xr = xs + i * B;
        float *restrict yr = ys + i * B;
        if (act == 2)
            for (int64_t k = 0; k < B; k++) {
                float v = xr[k] * scale[k] + shift[k];
                yr[k] = v < 0 ? 0.0f : v; /* not v * 0: -inf * 0 is NaN */
            }
        else if (act == 1)
            for (int64_t k = 0; k < B; k++) {
                float v = xr[k] * scale[k] + shift[k];
                yr[k] = v < 0 ? v * slope : v;
            }
        else
            for (int64_t k = 0; k < B; k++)
                yr[k] = xr[k] * scale[k] + shift[k];
    }
}

static void apply(const inorm_params *ip, const float *xs, float *ys, int64_t from, int64_t to,
                  const float *scale, const float *shift)
{
    int act = ip->relu ? 2 : ip->act ? 1 : 0;
    float slope = ip->slope;
    switch (ip->l.block) {
    case 8: apply_b(act, slope, 8, xs, ys, from, to, scale, shift); break;
    case 16: apply_b(act, slope, 16, xs, ys, from, to, scale, shift); break;
    case 32: apply_b(act, slope, 32, xs, ys, from, to, scale, shift); break;
    case 64: apply_b(act, slope, 64, xs, ys, from, to, scale, shift); break;
    default: apply_b(act, slope, ip->l.block, xs, ys, from, to, scale, shift); break;
    }
}

/* Few large groups (channels-last, or a small batch of blocked channels):
 * the threads share the spatial rows of each group in turn. */
static void inorm_split_spatial(const inorm_params *ip, const float *x, const float *gamma, const float *beta,
                                float *y, int64_t groups)
{
    int64_t S = ip->l.spatial, B = ip->l.block;
    group_stats total;
    float scale[CPU_MAX_CHANNEL_GROUP], shift[CPU_MAX_CHANNEL_GROUP];
    for (int64_t job = 0; job < ip->l.n * groups; job++) {
        int64_t n = job / groups, cb = job % groups;
        const float *xs = x + n * ip->l.stride_n + cb * ip->l.stride_cb;
        float *ys = y + n * ip->l.stride_n + cb * ip->l.stride_cb;
        memset(&total, 0, sizeof total);
#pragma omp parallel if (S * B >= CPU_PARALLEL_MIN)
        {
            int nt = omp_get_num_threads(), t = omp_get_thread_num();
            int64_t chunk = (S + nt - 1) / nt;
            int64_t from = t * chunk, to = from + chunk < S ? from + chunk : S;
            group_stats part;
            part.count = 0;
            for (int64_t k = 0; k < B; k++)
                part.mean[k] = part.m2[k] = 0;
            if (from < to)
                stats_add_rows(xs, B, from, to, &part);
#pragma omp critical
            stats_merge(&total, &part, B);
#pragma omp barrier
#pragma omp single
            group_affine(ip, cb, &total, gamma, beta, scale, shift);
            /* The implicit barrier after single publishes scale and shift. */
            if (from < to)
                apply(ip, xs, ys, from, to, scale, shift);
        }
    }
}

/* Many small groups: one thread per group. */
static void inorm_split_groups(const inorm_params *ip, const float *x, const float *gamma, const float *beta,
                               float *y, int64_t groups)
{
    int64_t S = ip->l.spatial, B = ip->l.block;
#pragma omp parallel for schedule(static) if (ip->l.n * groups * S * B >= CPU_PARALLEL_MIN)
    for (int64_t job = 0; job < ip->l.n * groups; job++) {
        int64_t n = job / groups, cb = job % groups;
        const float *xs = x + n * ip->l.stride_n + cb * ip->l.stride_cb;
        float *ys = y + n * ip->l.stride_n + cb * ip->l.stride_cb;
        group_stats st;
        float scale[CPU_MAX_CHANNEL_GROUP], shift[CPU_MAX_CHANNEL_GROUP];
        st.count = 0;
        for (int64_t k = 0; k < B; k++)
            st.mean[k] = st.m2[k] = 0;
        stats_add_rows(xs, B, 0, S, &st);
        group_affine(ip, cb, &st, gamma, beta, scale, shift);
        apply(ip, xs, ys, 0, S, scale, shift);
    }
}

static sg_status inorm_kernel(const cpu_step *s, sg_cpu_exec *e)
{
    const inorm_params *ip = s->params;
    const float *x = e->ptr[s->args[0].tensor];
    const float *gamma = e->ptr[s->args[1].tensor];
    const float *beta = e->ptr[s->args[2].tensor];
    float *y = e->ptr[s->args[3].tensor];
    int64_t groups = ip->l.padded_c / ip->l.block;
    if (ip->l.block <= 64 && ip->l.n * groups >= 4 * (int64_t)omp_get_max_threads())
        inorm_split_groups(ip, x, gamma, beta, y, groups);
    else
        inorm_split_spatial(ip, x, gamma, beta, y, groups);
    return SEGRT_OK;
}

/* Per-channel gamma and beta: the constant as is, or (GroupNormalization
 * before opset 21) one value per norm group repeated over its channels. */
static const float *per_channel(sg_cpu_plan *p, const sg_value *v, int64_t c, int64_t norm_group)
{
    int64_t numel;
    if (!v->data || v->dtype != SEGRT_DTYPE_FLOAT32 || !sg_shape_numel(&v->shape, &numel))
        return NULL;
    const float *src = sg_blob_data(v->data);
    if (numel == c)
        return src;
    if (norm_group <= 1 || numel * norm_group != c)
        return NULL;
    float *dst = cpu_plan_alloc(p, (size_t)c * sizeof(float));
    if (!dst)
        return NULL;
    for (int64_t k = 0; k < c; k++)
        dst[k] = src[k / norm_group];
    return dst;
}

/* InstanceNormalization and GroupNormalization (with a ReLU or LeakyReLU
 * that follows fused). */
sg_status cpu_build_instance_norm(sg_cpu_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    bool group_norm = n->op == SG_OP_GROUP_NORMALIZATION;
    if (n->n_inputs != 3 || n->outputs[0] < 0 || n->n_outputs != 1)
        return SEGRT_ERROR_UNSUPPORTED;
    int32_t x = cpu_value(p, n->inputs[0]);
    inorm_params ip;
    memset(&ip, 0, sizeof ip);
    if (x < 0 || !p->tensors[x].has_md || p->tensors[x].dtype != SEGRT_DTYPE_FLOAT32 ||
        !cpu_channel_layout(&p->tensors[x].md, &ip.l))
        return SEGRT_ERROR_UNSUPPORTED;
    ip.norm_group = 1;
    if (group_norm) {
        int64_t groups = sg_attr_int(n, "num_groups", 0);
        if (groups < 1 || ip.l.c % groups)
            return SEGRT_ERROR_UNSUPPORTED;
        ip.norm_group = ip.l.c / groups;
    }
    /* Checked before any conversion below: declining after adding a step
     * would leave it behind. */
    const float *gamma = per_channel(p, &p->g->values[n->inputs[1]], ip.l.c, ip.norm_group);
    const float *beta = per_channel(p, &p->g->values[n->inputs[2]], ip.l.c, ip.norm_group);
    if (!gamma || !beta)
        return SEGRT_ERROR_UNSUPPORTED;
    if (group_norm) {
        /* A norm group must lie inside one memory block: else work in
         * channels-last, where one block holds every channel. */
        if (ip.l.block % ip.norm_group || ip.l.padded_c != ip.l.c) {
            dnnl_memory_desc_t cl;
            const cpu_tensor *t = &p->tensors[x];
            dnnl_format_tag_t tag = t->rank == 3 ? dnnl_acb : t->rank == 4 ? dnnl_acdb : dnnl_acdeb;
            if (t->rank < 3 || t->rank > 5 ||
                dnnl_memory_desc_init_by_tag(&cl, t->md.ndims, t->md.dims, dnnl_f32, tag) != dnnl_success)
                return SEGRT_ERROR_UNSUPPORTED;
            SG_TRY(cpu_value_as(p, n->inputs[0], &cl, &x));
            if (!cpu_channel_layout(&p->tensors[x].md, &ip.l) || ip.l.block % ip.norm_group)
                return sg_error(SEGRT_ERROR_INTERNAL, "node `%s`: channels-last layout not understood", n->name);
        }
    }
    ip.eps = sg_attr_float(n, "epsilon", 1e-5f);
    int32_t out_value = n->outputs[0];
    int32_t r = cpu_single_reader(p, out_value);
    if (r >= 0 && (p->g->nodes[r].op == SG_OP_RELU || p->g->nodes[r].op == SG_OP_LEAKY_RELU) &&
        p->g->nodes[r].outputs[0] >= 0) {
        ip.act = true;
        ip.relu = p->g->nodes[r].op == SG_OP_RELU;
        ip.slope = ip.relu ? 0.0f : sg_attr_float(&p->g->nodes[r], "alpha", 0.01f);
        p->fused[r] = 1;
        out_value = p->g->nodes[r].outputs[0];
    }
    int32_t in[3] = {x, -1, -1};
    SG_TRY(cpu_tensor_new_plain(p, CPU_T_CONST, SEGRT_DTYPE_FLOAT32, 1, &ip.l.c, &in[1]));
    p->tensors[in[1]].data = (void *)gamma;
    SG_TRY(cpu_tensor_new_plain(p, CPU_T_CONST, SEGRT_DTYPE_FLOAT32, 1, &ip.l.c, &in[2]));
    p->tensors[in[2]].data = (void *)beta;
    inorm_params *params = sg_malloc(sizeof *params);
    if (!params)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    *params = ip;
    return cpu_kernel_step(p, n, inorm_kernel, params, in, 3, &p->tensors[x].md, out_value, NULL);
}

/* LayerNormalization in float32 over the axes from `axis` on, scale and
 * bias of exactly those dims (the form exporters write; others, and a
 * request for Mean or InvStdDev, go to the reference kernel): rows in
 * parallel, whatever the leading dims (a transformer's batch of 1 was one
 * thread on the reference kernel), statistics in double. */
typedef struct lnorm_params {
    int64_t rows, inner;
    float eps;
    bool bias;
} lnorm_params;

static sg_status lnorm_kernel(const cpu_step *s, sg_cpu_exec *e)
{
    const lnorm_params *lp = s->params;
    const float *x = e->ptr[s->args[0].tensor], *gamma = e->ptr[s->args[1].tensor];
    const float *beta = lp->bias ? e->ptr[s->args[2].tensor] : NULL;
    float *y = e->ptr[s->args[s->n_args - 1].tensor];
    const int64_t C = lp->inner;
#pragma omp parallel for schedule(static) if (lp->rows * C >= CPU_PARALLEL_MIN)
    for (int64_t r = 0; r < lp->rows; r++) {
        const float *xr = x + r * C;
        float *yr = y + r * C;
        double sum = 0, sq = 0;
        for (int64_t c = 0; c < C; c++)
            sum += xr[c];
        double mean = sum / (double)C;
        for (int64_t c = 0; c < C; c++) {
            double d = xr[c] - mean;
            sq += d * d;
        }
        float m = (float)mean, inv = (float)(1.0 / sqrt(sq / (double)C + lp->eps));
        if (beta)
            for (int64_t c = 0; c < C; c++)
                yr[c] = (xr[c] - m) * inv * gamma[c] + beta[c];
        else
            for (int64_t c = 0; c < C; c++)
                yr[c] = (xr[c] - m) * inv * gamma[c];
    }
    return SEGRT_OK;
}

sg_status cpu_build_layer_norm(sg_cpu_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    const sg_graph *g = p->g;
    for (int32_t k = 1; k < n->n_outputs; k++)
        if (n->outputs[k] >= 0)
            return SEGRT_ERROR_UNSUPPORTED;
    if (n->n_inputs < 2 || n->inputs[0] < 0 || n->inputs[1] < 0 || n->outputs[0] < 0)
        return SEGRT_ERROR_UNSUPPORTED;
    const sg_value *x = &g->values[n->inputs[0]];
    int64_t xd[SEGRT_MAX_RANK];
    int32_t rank = x->shape.rank, axis;
    if (x->dtype != SEGRT_DTYPE_FLOAT32 || rank < 1 || !sg_shape_dims(&x->shape, xd))
        return SEGRT_ERROR_UNSUPPORTED;
    if (sg_infer_axis(n, sg_attr_int(n, "axis", -1), rank, &axis) != SEGRT_OK) {
        sg_error_clear();
        return SEGRT_ERROR_UNSUPPORTED;
    }
    lnorm_params lp = {1, 1, sg_attr_float(n, "epsilon", 1e-5f), n->n_inputs > 2 && n->inputs[2] >= 0};
    for (int32_t d = 0; d < rank; d++)
        *(d < axis ? &lp.rows : &lp.inner) *= xd[d];
    /* Scale and bias: float32, exactly the normalized dims. */
    for (int32_t k = 1; k < (lp.bias ? 3 : 2); k++) {
        const sg_value *v = &g->values[n->inputs[k]];
        int64_t vd[SEGRT_MAX_RANK];
        if (v->dtype != SEGRT_DTYPE_FLOAT32 || v->shape.rank != rank - axis || !sg_shape_dims(&v->shape, vd) ||
            memcmp(vd, xd + axis, sizeof(int64_t) * (size_t)(rank - axis)) != 0)
            return SEGRT_ERROR_UNSUPPORTED;
    }
    if (lp.inner < 1)
        return SEGRT_ERROR_UNSUPPORTED;
    return cpu_own_step(p, n, lnorm_kernel, &lp, sizeof lp);
}
