/* InstanceNormalization on the CPU, in plain or channel-blocked layouts
 * (oneDNN's nChw8c / nChw16c, whatever the producing convolution chose), with
 * a following ReLU or LeakyReLU fused: two reads and one write of the
 * activation. oneDNN has no instance normalization. */
#include "backend/cpu/cpu_internal.h"

#include <math.h>
#include <string.h>

typedef struct inorm_params {
    int64_t n, c, spatial;  /* batch, channels, product of spatial dims */
    int64_t block;          /* channels per block (1: plain layout) */
    int64_t stride_n;       /* elements between samples */
    int64_t stride_cb;      /* elements between channel blocks */
    int64_t padded_c;       /* channels including layout padding */
    float eps;
    float slope;            /* fused activation: y = y < 0 ? slope * y : y */
    bool act;
} inorm_params;

/* Reads the layout of md: plain, or one inner block over channels with the
 * spatial dims dense inside each block. */
static bool layout_of(const dnnl_memory_desc_t *md, inorm_params *ip)
{
    if (md->format_kind != dnnl_blocked || md->ndims < 3)
        return false;
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    int64_t block = 1;
    if (b->inner_nblks == 1 && b->inner_idxs[0] == 1)
        block = b->inner_blks[0];
    else if (b->inner_nblks != 0)
        return false;
    int64_t expect = block;
    for (int32_t d = md->ndims - 1; d >= 2; d--) {
        if (b->strides[d] != expect)
            return false;
        expect *= md->padded_dims[d];
    }
    if (block > 64 || b->strides[1] < expect)
        return false;
    ip->block = block;
    ip->stride_cb = b->strides[1];
    ip->stride_n = b->strides[0];
    ip->padded_c = md->padded_dims[1];
    ip->n = md->dims[0];
    ip->c = md->dims[1];
    ip->spatial = 1;
    for (int32_t d = 2; d < md->ndims; d++)
        ip->spatial *= md->dims[d];
    return true;
}

static sg_status inorm_kernel(const cpu_step *s, sg_cpu_exec *e)
{
    const inorm_params *ip = s->params;
    const float *x = e->ptr[s->args[0].tensor];
    const float *gamma = e->ptr[s->args[1].tensor];
    const float *beta = e->ptr[s->args[2].tensor];
    float *y = e->ptr[s->args[3].tensor];
    int64_t nb = (ip->padded_c + ip->block - 1) / ip->block;
    int64_t jobs = ip->n * nb, S = ip->spatial, B = ip->block;
#pragma omp parallel for schedule(static)
    for (int64_t job = 0; job < jobs; job++) {
        int64_t n = job / nb, cb = job % nb;
        const float *xs = x + n * ip->stride_n + cb * ip->stride_cb;
        float *ys = y + n * ip->stride_n + cb * ip->stride_cb;
        double sum[64], sq[64];
        float scale[64], shift[64];
        for (int64_t k = 0; k < B; k++)
            sum[k] = sq[k] = 0;
        /* Statistics in double, the mean first and then squared deviations:
         * the results match a float64 reference to float rounding. */
        for (int64_t i = 0; i < S; i++)
            for (int64_t k = 0; k < B; k++)
                sum[k] += xs[i * B + k];
        for (int64_t k = 0; k < B; k++)
            sum[k] /= (double)S;
        for (int64_t i = 0; i < S; i++)
            for (int64_t k = 0; k < B; k++) {
                double d = xs[i * B + k] - sum[k];
                sq[k] += d * d;
            }
        for (int64_t k = 0; k < B; k++) {
            int64_t c = cb * B + k;
            if (c >= ip->c) { /* layout padding stays zero */
                scale[k] = shift[k] = 0;
                continue;
            }
            double inv = 1.0 / sqrt(sq[k] / (double)S + ip->eps);
            scale[k] = (float)(gamma[c] * inv);
            shift[k] = (float)(beta[c] - gamma[c] * inv * sum[k]);
        }
        if (ip->act) {
            for (int64_t i = 0; i < S; i++)
                for (int64_t k = 0; k < B; k++) {
                    float v = xs[i * B + k] * scale[k] + shift[k];
                    ys[i * B + k] = v < 0 ? v * ip->slope : v;
                }
        } else {
            for (int64_t i = 0; i < S; i++)
                for (int64_t k = 0; k < B; k++)
                    ys[i * B + k] = xs[i * B + k] * scale[k] + shift[k];
        }
    }
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
        !layout_of(&p->tensors[x].md, &ip) || !sv->data || !bv->data || sv->dtype != SEGRT_DTYPE_FLOAT32 ||
        bv->dtype != SEGRT_DTYPE_FLOAT32)
        return SEGRT_ERROR_UNSUPPORTED;
    int64_t ns, nbias;
    if (!sg_shape_numel(&sv->shape, &ns) || !sg_shape_numel(&bv->shape, &nbias) || ns != ip.c || nbias != ip.c)
        return SEGRT_ERROR_UNSUPPORTED;
    ip.eps = sg_attr_float(n, "epsilon", 1e-5f);
    int32_t out_value = n->outputs[0];
    int32_t r = cpu_single_reader(p, out_value);
    if (r >= 0 && (p->g->nodes[r].op == SG_OP_RELU || p->g->nodes[r].op == SG_OP_LEAKY_RELU) &&
        p->g->nodes[r].outputs[0] >= 0) {
        ip.act = true;
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
        s = cpu_tensor_new_plain(p, CPU_T_CONST, SEGRT_DTYPE_FLOAT32, 1, &ip.c, &g);
    if (s == SEGRT_OK)
        s = cpu_tensor_new_plain(p, CPU_T_CONST, SEGRT_DTYPE_FLOAT32, 1, &ip.c, &b);
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
