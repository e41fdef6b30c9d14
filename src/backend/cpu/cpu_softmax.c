/* Softmax and LogSoftmax along one axis in float32 on the CPU, with the
 * reference kernel's semantics (ref_softmax.c): the maximum subtracted
 * first, NaN anywhere on a line makes the line NaN, a line of -inf is NaN.
 * Lines along the last axis one at a time; along an inner axis (a
 * segmentation network's softmax over its class channels), a block of
 * neighbouring positions at once, so that every loop runs over contiguous
 * memory. Sums in double. (oneDNN's softmax loses NaN, and the reference
 * kernel in double took a volume's class softmax on one thread per batch
 * item.) Other dtypes stay on the reference kernel. */
#include "backend/cpu/cpu_internal.h"
#include "graph/infer.h"

#include <math.h>
#include <stdlib.h>

#define BLOCK 256 /* inner positions a task takes */

typedef struct softmax_params {
    int64_t outer, len, inner;
    bool log_form;
} softmax_params;

/* e^z, or 0 below float's normal range (a subnormal changes no sum and
 * costs the CPU a hundred cycles an operation). */
static inline float exp_normal(float z)
{
    return z < -87.0f ? 0.0f : expf(z);
}

static void lines(const softmax_params *sp, const float *x, float *y, int64_t o, int64_t i0, int64_t w, float *mx,
                  double *sum)
{
    const int64_t len = sp->len, inner = sp->inner;
    const float *xo = x + o * len * inner + i0;
    float *yo = y + o * len * inner + i0;
    for (int64_t i = 0; i < w; i++) {
        mx[i] = -INFINITY;
        sum[i] = 0;
    }
    for (int64_t k = 0; k < len; k++)
        for (int64_t i = 0; i < w; i++) {
            float v = xo[k * inner + i];
            mx[i] = v > mx[i] || v != v ? v : mx[i];
        }
    for (int64_t k = 0; k < len; k++)
        for (int64_t i = 0; i < w; i++)
            sum[i] += exp_normal(xo[k * inner + i] - mx[i]);
    if (sp->log_form) {
        for (int64_t i = 0; i < w; i++)
            sum[i] = log(sum[i]);
        for (int64_t k = 0; k < len; k++)
            for (int64_t i = 0; i < w; i++)
                yo[k * inner + i] = (float)((double)(xo[k * inner + i] - mx[i]) - sum[i]);
    } else {
        for (int64_t i = 0; i < w; i++)
            sum[i] = 1.0 / sum[i];
        for (int64_t k = 0; k < len; k++)
            for (int64_t i = 0; i < w; i++)
                yo[k * inner + i] = (float)(exp_normal(xo[k * inner + i] - mx[i]) * sum[i]);
    }
}

static sg_status softmax_kernel(const cpu_step *s, sg_cpu_exec *e)
{
    const softmax_params *sp = s->params;
    const float *x = e->ptr[s->args[0].tensor];
    float *y = e->ptr[s->args[1].tensor];
    const int64_t blocks = (sp->inner + BLOCK - 1) / BLOCK, tasks = sp->outer * blocks;
#pragma omp parallel if (tasks > 1 && sp->outer * sp->len * sp->inner >= CPU_PARALLEL_MIN)
    {
        float mx[BLOCK];
        double sum[BLOCK];
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tasks; t++) {
            int64_t o = t / blocks, i0 = t % blocks * BLOCK, w = sp->inner - i0 < BLOCK ? sp->inner - i0 : BLOCK;
            lines(sp, x, y, o, i0, w, mx, sum);
        }
    }
    return SEGRT_OK;
}

sg_status cpu_build_softmax(sg_cpu_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    const sg_value *x = n->n_inputs > 0 && n->inputs[0] >= 0 ? &p->g->values[n->inputs[0]] : NULL;
    int64_t dims[SEGRT_MAX_RANK];
    int32_t axis;
    if (!x || n->outputs[0] < 0 || x->dtype != SEGRT_DTYPE_FLOAT32 || x->shape.rank < 1 ||
        !sg_shape_dims(&x->shape, dims))
        return SEGRT_ERROR_UNSUPPORTED;
    /* Opset 13's definition (segrt reads opsets from 13). */
    if (sg_infer_axis(n, sg_attr_int(n, "axis", -1), x->shape.rank, &axis) != SEGRT_OK) {
        sg_error_clear();
        return SEGRT_ERROR_UNSUPPORTED;
    }
    softmax_params sp = {1, dims[axis], 1, n->op == SG_OP_LOG_SOFTMAX};
    for (int32_t d = 0; d < x->shape.rank; d++)
        if (d != axis)
            *(d < axis ? &sp.outer : &sp.inner) *= dims[d];
    return cpu_own_step(p, n, softmax_kernel, &sp, sizeof sp);
}
