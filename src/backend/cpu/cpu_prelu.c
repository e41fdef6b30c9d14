/* PReLU with one slope or one per channel (and ReLU and LeakyReLU, as one
 * slope), in whatever layout its producer chose. NaN passes through (oneDNN's
 * ReLU would make it 0), and Relu(-inf) is 0, not -inf * 0. oneDNN 2.6 runs these shapes on its slow reference kernel,
 * and its convolutions do not take a PReLU post-op in 3D. */
#include "backend/cpu/cpu_internal.h"

#include <string.h>

typedef struct prelu_params {
    cpu_channel_layout_t l;
    const float *slope; /* [c] */
    bool relu;          /* Relu: x < 0 ? 0 : x, so -inf gives 0 (not -inf * 0) */
    bool single;        /* one slope for every element: */
    float slope_value;
    int64_t elements;   /* in the buffer, layout padding included */
} prelu_params;

static sg_status prelu_kernel(const cpu_step *s, sg_cpu_exec *e)
{
    const prelu_params *pp = s->params;
    const float *x = e->ptr[s->args[0].tensor];
    float *y = e->ptr[s->args[1].tensor];
    const cpu_channel_layout_t *l = &pp->l;
    if (pp->single) {
        /* One slope: the layout does not matter; padding zeros stay zero. */
        float a = pp->slope_value;
        if (pp->relu) {
#pragma omp parallel for schedule(static) if (pp->elements >= CPU_PARALLEL_MIN)
            for (int64_t k = 0; k < pp->elements; k++)
                y[k] = x[k] < 0 ? 0.0f : x[k];
        } else {
#pragma omp parallel for schedule(static) if (pp->elements >= CPU_PARALLEL_MIN)
            for (int64_t k = 0; k < pp->elements; k++)
                y[k] = x[k] < 0 ? x[k] * a : x[k];
        }
        return SEGRT_OK;
    }
    int64_t groups = l->padded_c / l->block, B = l->block, S = l->spatial;
    int64_t rows = l->n * groups * S;
#pragma omp parallel for schedule(static) if (rows * B >= CPU_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t i = r % S, cb = (r / S) % groups, n = r / (S * groups);
        int64_t off = n * l->stride_n + cb * l->stride_cb + i * B;
        for (int64_t k = 0; k < B; k++) {
            int64_t c = cb * B + k;
            /* Layout padding past c holds zeros and stays zero. */
            float a = c < l->c ? pp->slope[c] : 0.0f;
            float v = x[off + k];
            y[off + k] = v < 0 ? v * a : v;
        }
    }
    return SEGRT_OK;
}

/* PReLU, and ReLU / LeakyReLU as PReLU with one slope. */
sg_status cpu_build_prelu(sg_cpu_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    bool prelu = n->op == SG_OP_PRELU;
    if (n->n_inputs != (prelu ? 2 : 1) || n->outputs[0] < 0)
        return SEGRT_ERROR_UNSUPPORTED;
    int32_t x = cpu_value(p, n->inputs[0]);
    if (x < 0 || !p->tensors[x].has_md || p->tensors[x].dtype != SEGRT_DTYPE_FLOAT32)
        return SEGRT_ERROR_UNSUPPORTED;
    prelu_params pp;
    memset(&pp, 0, sizeof pp);
    pp.elements = (int64_t)(p->tensors[x].bytes / sizeof(float));
    if (!prelu) {
        pp.single = true;
        pp.relu = n->op == SG_OP_RELU;
        pp.slope_value = pp.relu ? 0.0f : sg_attr_float(n, "alpha", 0.01f);
    } else {
        const sg_value *sv = &p->g->values[n->inputs[1]];
        int64_t numel;
        int32_t rank = p->tensors[x].rank;
        if (!sv->data || sv->dtype != SEGRT_DTYPE_FLOAT32 || !sg_shape_numel(&sv->shape, &numel) ||
            sv->shape.rank > rank)
            return SEGRT_ERROR_UNSUPPORTED;
        pp.slope = sg_blob_data(sv->data);
        pp.single = numel == 1;
        if (pp.single) {
            pp.slope_value = pp.slope[0];
        } else {
            /* One slope per channel, broadcast along axis 1. */
            if (!cpu_channel_layout(&p->tensors[x].md, &pp.l) || numel != pp.l.c)
                return SEGRT_ERROR_UNSUPPORTED;
            for (int32_t d = 0; d < sv->shape.rank; d++)
                if (sv->shape.d[d].size != (rank - sv->shape.rank + d == 1 ? pp.l.c : 1))
                    return SEGRT_ERROR_UNSUPPORTED;
        }
    }
    prelu_params *params = sg_malloc(sizeof *params);
    if (!params)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    *params = pp;
    return cpu_kernel_step(p, n, prelu_kernel, params, &x, 1, &p->tensors[x].md, n->outputs[0], NULL);
}
