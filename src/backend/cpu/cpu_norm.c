/* InstanceNormalization on the CPU, in plain or channel-blocked layouts
 * (oneDNN's nChw8c / nChw16c, whatever the producing convolution chose), with
 * a following ReLU or LeakyReLU fused: two reads and one write of the
 * activation. oneDNN has no instance normalization. */
#include "backend/cpu/cpu_internal.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <string.h>

typedef struct inorm_params {
    cpu_channel_layout_t l;
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

/* Turns the sums of one group into per-channel scale and shift. */
static void group_affine(const inorm_params *ip, int64_t cb, const double *mean, const double *sq,
                         const float *gamma, const float *beta, float *scale, float *shift)
{
    for (int64_t k = 0; k < ip->l.block; k++) {
        int64_t c = cb * ip->l.block + k;
        if (c >= ip->l.c) { /* layout padding stays zero */
            scale[k] = shift[k] = 0;
            continue;
        }
        double inv = 1.0 / sqrt(sq[k] / (double)ip->l.spatial + ip->eps);
        scale[k] = (float)(gamma[c] * inv);
        shift[k] = (float)(beta[c] - gamma[c] * inv * mean[k]);
    }
}

static void apply(const inorm_params *ip, const float *xs, float *ys, int64_t from, int64_t to,
                  const float *scale, const float *shift)
{
    int64_t B = ip->l.block;
    for (int64_t i = from; i < to; i++) {
        const float *xr = xs + i * B;
        float *yr = ys + i * B;
        if (ip->relu)
            for (int64_t k = 0; k < B; k++) {
                float v = xr[k] * scale[k] + shift[k];
                yr[k] = v < 0 ? 0.0f : v;
            }
        else if (ip->act)
            for (int64_t k = 0; k < B; k++) {
                float v = xr[k] * scale[k] + shift[k];
                yr[k] = v < 0 ? v * ip->slope : v;
            }
        else
            for (int64_t k = 0; k < B; k++)
                yr[k] = xr[k] * scale[k] + shift[k];
    }
}

/* Few large groups (channels-last, or a small batch of blocked channels):
 * every thread takes a slice of the spatial rows of each group in turn. */
static void inorm_split_spatial(const inorm_params *ip, const float *x, const float *gamma, const float *beta,
                                float *y, int64_t groups)
{
    int64_t S = ip->l.spatial, B = ip->l.block;
    static_assert(CPU_MAX_CHANNEL_GROUP <= 1024, "stack arrays below");
    double mean[CPU_MAX_CHANNEL_GROUP], sq[CPU_MAX_CHANNEL_GROUP];
    float scale[CPU_MAX_CHANNEL_GROUP], shift[CPU_MAX_CHANNEL_GROUP];
    for (int64_t job = 0; job < ip->l.n * groups; job++) {
        int64_t n = job / groups, cb = job % groups;
        const float *xs = x + n * ip->l.stride_n + cb * ip->l.stride_cb;
        float *ys = y + n * ip->l.stride_n + cb * ip->l.stride_cb;
        for (int64_t k = 0; k < B; k++)
            mean[k] = sq[k] = 0;
#pragma omp parallel
        {
            double part[CPU_MAX_CHANNEL_GROUP];
            for (int64_t k = 0; k < B; k++)
                part[k] = 0;
#pragma omp for schedule(static)
            for (int64_t i = 0; i < S; i++)
                for (int64_t k = 0; k < B; k++)
                    part[k] += xs[i * B + k];
#pragma omp critical
            for (int64_t k = 0; k < B; k++)
                mean[k] += part[k];
#pragma omp barrier
#pragma omp single
            for (int64_t k = 0; k < B; k++)
                mean[k] /= (double)S;
            for (int64_t k = 0; k < B; k++)
                part[k] = 0;
#pragma omp for schedule(static)
            for (int64_t i = 0; i < S; i++)
                for (int64_t k = 0; k < B; k++) {
                    double d = xs[i * B + k] - mean[k];
                    part[k] += d * d;
                }
#pragma omp critical
            for (int64_t k = 0; k < B; k++)
                sq[k] += part[k];
#pragma omp barrier
#pragma omp single
            group_affine(ip, cb, mean, sq, gamma, beta, scale, shift);
            /* The implicit barrier after single publishes scale and shift. */
            int nt = omp_get_num_threads(), t = omp_get_thread_num();
            int64_t chunk = (S + nt - 1) / nt;
            int64_t from = t * chunk, to = from + chunk < S ? from + chunk : S;
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
#pragma omp parallel for schedule(static)
    for (int64_t job = 0; job < ip->l.n * groups; job++) {
        int64_t n = job / groups, cb = job % groups;
        const float *xs = x + n * ip->l.stride_n + cb * ip->l.stride_cb;
        float *ys = y + n * ip->l.stride_n + cb * ip->l.stride_cb;
        double mean[64], sq[64];
        float scale[64], shift[64];
        for (int64_t k = 0; k < B; k++)
            mean[k] = sq[k] = 0;
        /* Statistics in double, the mean first and then squared deviations:
         * the results match a float64 reference to float rounding. */
        for (int64_t i = 0; i < S; i++)
            for (int64_t k = 0; k < B; k++)
                mean[k] += xs[i * B + k];
        for (int64_t k = 0; k < B; k++)
            mean[k] /= (double)S;
        for (int64_t i = 0; i < S; i++)
            for (int64_t k = 0; k < B; k++) {
                double d = xs[i * B + k] - mean[k];
                sq[k] += d * d;
            }
        group_affine(ip, cb, mean, sq, gamma, beta, scale, shift);
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

sg_status cpu_build_instance_norm(sg_cpu_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    if (n->n_inputs != 3 || n->outputs[0] < 0)
        return SEGRT_ERROR_UNSUPPORTED;
    int32_t x = cpu_value(p, n->inputs[0]);
    const sg_value *sv = &p->g->values[n->inputs[1]], *bv = &p->g->values[n->inputs[2]];
    inorm_params ip;
    memset(&ip, 0, sizeof ip);
    if (x < 0 || !p->tensors[x].has_md || p->tensors[x].dtype != SEGRT_DTYPE_FLOAT32 ||
        !cpu_channel_layout(&p->tensors[x].md, &ip.l) || !sv->data || !bv->data || sv->dtype != SEGRT_DTYPE_FLOAT32 ||
        bv->dtype != SEGRT_DTYPE_FLOAT32)
        return SEGRT_ERROR_UNSUPPORTED;
    int64_t ns, nbias;
    if (!sg_shape_numel(&sv->shape, &ns) || !sg_shape_numel(&bv->shape, &nbias) || ns != ip.l.c || nbias != ip.l.c)
        return SEGRT_ERROR_UNSUPPORTED;
    ip.eps = sg_attr_float(n, "epsilon", 1e-5f);
    int32_t out_value = n->outputs[0];
    int32_t r = cpu_single_reader(p, out_value);
    if (r >= 0 && (p->g->nodes[r].op == SG_OP_RELU || p->g->nodes[r].op == SG_OP_LEAKY_RELU) &&
        p->g->nodes[r].outputs[0] >= 0) {
        ip.act = true;
        ip.relu = p->g->nodes[r].op == SG_OP_RELU;
        ip.slope = p->g->nodes[r].op == SG_OP_RELU ? 0.0f : sg_attr_float(&p->g->nodes[r], "alpha", 0.01f);
        p->fused[r] = 1;
        out_value = p->g->nodes[r].outputs[0];
    }
    inorm_params *params = sg_malloc(sizeof *params);
    if (!params)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    *params = ip;
    int32_t y, g, b;
    const dnnl_memory_desc_t x_md = p->tensors[x].md; /* new tensors may move the array */
    sg_status s = cpu_tensor_new_md(p, SEGRT_DTYPE_FLOAT32, &x_md, &y);
    if (s == SEGRT_OK)
        s = cpu_tensor_new_plain(p, CPU_T_CONST, SEGRT_DTYPE_FLOAT32, 1, &ip.l.c, &g);
    if (s == SEGRT_OK)
        s = cpu_tensor_new_plain(p, CPU_T_CONST, SEGRT_DTYPE_FLOAT32, 1, &ip.l.c, &b);
    cpu_step *st;
    if (s == SEGRT_OK)
        s = cpu_step_new(p, n->name, &st);
    if (s != SEGRT_OK) {
        free(params);
        return s;
    }
    p->tensors[g].data = sg_blob_data(sv->data);
    p->tensors[b].data = sg_blob_data(bv->data);
    p->value_tensor[out_value] = y;
    st->kernel = inorm_kernel;
    st->params = params;
    st->n_outputs = 1;
    st->args[0] = (cpu_arg){0, x};
    st->args[1] = (cpu_arg){1, g};
    st->args[2] = (cpu_arg){2, b};
    st->args[3] = (cpu_arg){3, y};
    st->n_args = 4;
    return SEGRT_OK;
}
