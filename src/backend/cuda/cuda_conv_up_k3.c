/* ConvTranspose with kernel 3, stride 2 and pads 1 (MONAI UNet's
 * upsampling) through segrt's tensor-core kernel, k_conv_up_k3.cu.
 *
 * cuDNN runs these layers as strided backward-data convolutions, and the
 * few-channel kernel (cuda_conv_small.c), which took the last of them,
 * on the CUDA cores; both are slower than this kernel (docs/perf.md).
 * A following Relu, LeakyRelu or single-slope PRelu is applied before the
 * store.
 *
 * cuda_conv.c asks here first for a ConvTranspose; a node this file does
 * not take (other kernels, strides, pads or dilations, an output_shape,
 * auto_pad, groups, weights computed at run time, float32 math, an input
 * that is not channels-last with a multiple of 8 channels, more than 64
 * input channels) goes on to the other kernels and cuDNN.
 * Disabling up-k3 (a build option) turns this path off (for
 * comparisons). */
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/k_conv_up_k3.h"

#include "graph/infer_util.h"

#include <stdlib.h>
#include <string.h>

typedef struct up_k3_params {
    sgk_conv_up_k3_params kp;
    bool has_bias;
} up_k3_params;

/* args: x, w, [bias], y */
static sg_status up_k3_run(const cuda_step *s, cuda_run *r)
{
    const up_k3_params *up = s->params;
    sgk_view x = cuda_view(r, s->args[0]);
    sgk_view y = cuda_view(r, s->args[s->n_args - 1]);
    const float *w = r->ptr[s->args[1]];
    const float *b = up->has_bias ? r->ptr[s->args[2]] : NULL;
    return sgk_conv_up_k3(r->stream, &up->kp, &y, &x, w, b);
}

/* Whether node n's attributes are kernel 3, stride 2, pads 1, dilation 1
 * along every spatial dim, output_padding 0 or 1 (the graph's output
 * extents must then be 2n - 1 + output_padding), group 1, no output_shape
 * or auto_pad. */
static bool up_k3_attrs(const cuda_conv_desc *d)
{
    const sg_conv_attrs *a = &d->a;
    const int32_t nsp = d->n_spatial;
    bool ok = d->attrs_ok && a->auto_pad == SG_AUTO_PAD_NOTSET && !d->has_output_shape && d->group == 1 && d->opad_ok;
    for (int32_t i = 0; ok && i < nsp; i++)
        ok = a->kernel[i] == 3 && a->strides[i] == 2 && a->dilations[i] == 1 && a->pads[i] == 1 &&
             a->pads[nsp + i] == 1 && (d->opad[i] == 0 || d->opad[i] == 1) &&
             d->yd[2 + i] == 2 * d->xd[2 + i] - 1 + d->opad[i];
    return ok;
}

/* The kernel's parameters for node n, or false for a node this path
 * leaves to the others. */
static bool up_k3_geometry(const sg_cuda_plan *p, const sg_node *n, sgk_conv_up_k3_params *kp)
{
    memset(kp, 0, sizeof *kp);
    kp->smem_limit = p->smem_limit;
    const cuda_conv_desc *d = cuda_conv_desc_of(p, n);
    const int64_t *xd = d->xd, *wd = d->wd, *yd = d->yd;
    int32_t rank = cuda_conv_desc_rank(d, 4, 5), nsp = rank - 2;
    if (!rank)
        return false;
    int64_t C = wd[0], K = wd[1], wnumel = C * K * (nsp == 3 ? 27 : 9);
    if (C < 1 || C > INT32_MAX || K < 1 || K > INT32_MAX || xd[1] != C || yd[1] != K || yd[0] != xd[0])
        return false;
    for (int32_t i = 0; i < nsp; i++)
        if (wd[2 + i] != 3)
            return false;
    if (!cuda_conv_consts_float(p, n, wnumel, K) || !up_k3_attrs(d))
        return false;
    kp->n_spatial = nsp;
    kp->C = (int32_t)C;
    kp->K = (int32_t)K;
    kp->act = SGK_ACT_NONE;
    return true;
}

/* ONNX's [C, K, 3, 3(, 3)] weights in the kernel's packed order. */
static sg_status up_k3_weights(sg_cuda_plan *p, const sg_node *n, const sgk_conv_up_k3_params *kp, int32_t *out)
{
    int32_t v = n->inputs[1];
    int64_t numel = sgk_conv_up_k3_weights(kp);
    float *onnx = cuda_const_f32(p, v), *packed = sg_malloc(sizeof(float) * (size_t)numel);
    sg_status s = SEGRT_OK;
    if (!onnx || !packed) {
        s = sg_node_error(n, SEGRT_ERROR_OUT_OF_MEMORY, "no memory for a copy of `%s`", p->g->values[v].name);
    } else {
        sgk_conv_up_k3_pack(kp, onnx, packed);
        s = cuda_const_f32_tensor(p, v, "up_k3_w", packed, numel, out);
    }
    free(onnx);
    free(packed);
    return s;
}

sg_status cuda_build_conv_up_k3(sg_cuda_plan *p, const sg_node *n, bool *taken)
{
    *taken = false;
    sgk_conv_up_k3_params kp;
    if (cuda_off(p, SG_KERNEL_UP_K3) || cuda_node_math(p, n) == CUDA_MATH_FP32 || !up_k3_geometry(p, n, &kp))
        return SEGRT_OK;
    int32_t xt = cuda_value(p, n->inputs[0]);
    if (xt < 0)
        return SEGRT_OK;
    cuda_kernel_epilogue ep;
    cuda_kernel_act_epilogue_of(p, n, &ep);
    kp.act = ep.act;
    kp.act_alpha = ep.act_alpha;
    sg_dtype out_dt = ep.out_dtype;
    cuda_layout out_layout = cuda_dense_layout(p, xt);

    /* Ask the kernel before touching the plan: a no leaves the node to the
     * other paths. */
    sgk_view xg = cuda_geometry_view(p, xt), yg;
    if (!cuda_output_geometry(p, n->outputs[0], out_dt, out_layout, &yg) || !sgk_conv_up_k3_fits(&kp, &yg, &xg))
        return SEGRT_OK;
    SG_TRY(cuda_sm_count(p, &kp.sm_count));

    int32_t wt;
    SG_TRY(up_k3_weights(p, n, &kp, &wt));
    cuda_conv_args a;
    SG_TRY(cuda_conv_args_make(p, n, xt, wt, "up_k3_b", kp.K, -1, out_dt, out_layout, &a));
    up_k3_params *up = sg_calloc(1, sizeof *up);
    if (!up)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    up->kp = kp;
    up->has_bias = a.has_bias;
    cuda_step *st;
    SG_TRY(cuda_step_new(p, n, "segrt convT k3s2", up_k3_run, a.t, a.n, 1, up, NULL, &st));
    /* MACs: every input position times C x K per tap. */
    double macs = (double)kp.C * kp.K * (kp.n_spatial == 3 ? 27.0 : 9.0);
    for (int32_t i = 0; i < xg.rank; i++)
        macs *= i == 1 ? 1.0 : (double)xg.dims[i];
    st->flops = 2.0 * macs;
    st->any_view = cuda_conv_args_views(&a);
    cuda_kernel_epilogue_bind(p, &ep, a.y);
    *taken = true;
    return SEGRT_OK;
}
