/* The builder of segrt's ScaledDotProductAttention (graph/infer_matmul.c),
 * the node graph/pass_attention.c makes of an attention chain: one step of
 * the flash-style kernel (k_attention.cu). Q, K and V are taken as they
 * lie (a Transpose before the chain is a strided view), in the plan's
 * activation dtype, the masks converted to it; K^T is read as K by
 * swapping its view's last two dims. The tensor-core kernel takes float16
 * and bfloat16 with head dims up to 128 on compute capability 8.0 and up
 * ("segrt attention mma" in profiles); everything else runs in float32
 * math ("segrt attention"). */
#include "backend/cuda/cuda_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct sdpa_params {
    float scale;
    bool kt;  /* K given as K^T */
    bool mma; /* the tensor-core kernel */
    int32_t rank, n_masks;
} sdpa_params;

/* Mask view m read at the scores' dims full (rank r): leading dims of
 * size 1 added, stride 0 along every dim it broadcasts over. */
static sgk_view mask_view(const sgk_view *m, const int64_t *full, int32_t r)
{
    sgk_view w = *m;
    w.rank = r;
    for (int32_t d = 0; d < r; d++) {
        int32_t at = d - (r - m->rank);
        bool here = at >= 0 && m->dims[at] != 1;
        w.dims[d] = full[d];
        w.strides[d] = here ? m->strides[at] : 0;
    }
    return w;
}

static sg_status sdpa_run(const cuda_step *s, cuda_run *r)
{
    const sdpa_params *sp = s->params;
    int32_t rk = sp->rank;
    sgk_view q = cuda_view(r, s->args[0]), k = cuda_view(r, s->args[1]), v = cuda_view(r, s->args[2]);
    sgk_view y = cuda_view(r, s->args[3 + sp->n_masks]);
    if (sp->kt) {
        int64_t d = k.dims[rk - 1], st = k.strides[rk - 1];
        k.dims[rk - 1] = k.dims[rk - 2];
        k.strides[rk - 1] = k.strides[rk - 2];
        k.dims[rk - 2] = d;
        k.strides[rk - 2] = st;
    }
    int64_t full[SEGRT_MAX_RANK];
    memcpy(full, q.dims, sizeof(int64_t) * (size_t)rk);
    full[rk - 1] = k.dims[rk - 2];
    sgk_view masks[2];
    for (int32_t m = 0; m < sp->n_masks; m++) {
        sgk_view mv = cuda_view(r, s->args[3 + m]);
        masks[m] = mask_view(&mv, full, rk);
    }
    return sgk_sdpa(r->stream, &y, &q, &k, &v, masks, sp->n_masks, sp->scale, sp->mma);
}

sg_status cuda_build_sdpa(sg_cuda_plan *p, const sg_node *n)
{
    const sg_graph *g = p->g;
    if (n->n_inputs < 3 || n->n_inputs > 5 || n->n_outputs < 1 || n->outputs[0] < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs Q, K, V, at most two masks and an output");
    for (int32_t i = 0; i < n->n_inputs; i++)
        if (n->inputs[i] < 0)
            return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "an absent input %d", i);
    const sg_value *qv = &g->values[n->inputs[0]], *kv = &g->values[n->inputs[1]], *vv = &g->values[n->inputs[2]];
    int32_t rank = qv->shape.rank;
    int64_t qd[SEGRT_MAX_RANK], kd[SEGRT_MAX_RANK], vd[SEGRT_MAX_RANK];
    if (rank < 2 || !sg_shape_dims(&qv->shape, qd) || !sg_shape_dims(&kv->shape, kd) || !sg_shape_dims(&vv->shape, vd))
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "Q, K and V need known dims, rank 2 or more");
    sdpa_params *sp = sg_malloc(sizeof *sp);
    if (!sp)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    sp->kt = sg_attr_int(n, "k_transposed", 0) != 0;
    sp->rank = rank;
    sp->n_masks = n->n_inputs - 3;
    int64_t D = qd[rank - 1], Dv = vd[rank - 1];
    sp->scale = sg_attr_find(n, "scale") ? sg_attr_float(n, "scale", 1.0f) : 1.0f / sqrtf((float)(D ? D : 1));
    /* The activation dtype: float32 inputs at fp16 and bf16 are taken in those. */
    sg_dtype dt = qv->dtype;
    if (dt == SEGRT_DTYPE_FLOAT32) {
        cuda_math m = cuda_node_math(p, n);
        dt = m == CUDA_MATH_FP16 ? SEGRT_DTYPE_FLOAT16 : m == CUDA_MATH_BF16 ? SEGRT_DTYPE_BFLOAT16 : dt;
    }
    sp->mma = !cuda_off(p, SG_KERNEL_MMA_ATTENTION) && sgk_sdpa_mma_takes(dt, D, Dv);
    int32_t args[6];
    sg_status s = SEGRT_OK;
    for (int32_t i = 0; i < n->n_inputs && s == SEGRT_OK; i++)
        s = cuda_value_as(p, n->inputs[i], dt, CUDA_LAYOUT_ANY, &args[i]);
    if (s == SEGRT_OK)
        s = cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), CUDA_LAYOUT_PLAIN, &args[n->n_inputs]);
    if (s != SEGRT_OK) {
        free(sp);
        return s;
    }
    cuda_step *st;
    return cuda_step_new(p, n, sp->mma ? "segrt attention mma" : "segrt attention", sdpa_run, args, n->n_inputs + 1, 1,
                         sp, NULL, &st);
}
