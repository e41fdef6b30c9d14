/* ConvTranspose with kernel == stride (a UNet's "deconv" upsampling)
 * through segrt's per-phase product kernel, k_conv_upsample.cu.
 *
 * cuDNN runs these layers as strided backward-data convolutions, far from
 * the bandwidth their output needs. The kernel also writes through any
 * view, so its
 * output becomes its slice of the concatenation a UNet puts after it and
 * that copy goes too. A following Relu, LeakyRelu or single-slope PRelu is
 * applied before the store.
 *
 * cuda_conv.c asks here after the few-channel kernel; a node this file
 * does not take (kernel != stride, pads, dilations, output_padding or an
 * output_shape, groups, weights computed at run time, or more than the 64
 * input channels sgk_conv_up_fits takes: the tensor-core path keeps a
 * warp's inputs in registers, and past that cuDNN's kernels hold their
 * own) goes to cuDNN. Disabling upsample-conv (a build
 * option) sends every node to cuDNN (for comparisons). */
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/k_conv_upsample.h"

#include "graph/infer_util.h"

#include <stdlib.h>
#include <string.h>

typedef struct upsample_params {
    sgk_conv_up_params kp;
    bool has_bias;
} upsample_params;

/* args: x, w, [bias], [the deferred norm's ab], y */
static sg_status upsample_run(const cuda_step *s, cuda_run *r)
{
    const upsample_params *up = s->params;
    sgk_view x = cuda_view(r, s->args[0]);
    sgk_view y = cuda_view(r, s->args[s->n_args - 1]);
    const float *w = r->ptr[s->args[1]];
    const float *b = up->has_bias ? r->ptr[s->args[2]] : NULL;
    const float *ab = up->kp.prologue ? r->ptr[s->args[s->n_args - 2]] : NULL;
    return sgk_conv_up(r->stream, &up->kp, &y, &x, w, b, ab);
}

bool cuda_conv_upsample_step(const cuda_step *s, sgk_conv_up_params *kp, int32_t *x, int32_t *bias, int32_t *ab,
                             int32_t *y)
{
    if (s->run != upsample_run)
        return false;
    const upsample_params *up = s->params;
    *kp = up->kp;
    *x = s->args[0];
    *bias = up->has_bias ? s->args[2] : -1;
    *ab = up->kp.prologue ? s->args[s->n_args - 2] : -1;
    *y = s->args[s->n_args - 1];
    return true;
}

/* Whether node n's attributes are those of a kernel == stride upsampling:
 * no pads, dilations, output_padding, output_shape or groups. */
static bool upsample_attrs(const cuda_conv_desc *d)
{
    const sg_conv_attrs *a = &d->a;
    const int32_t nsp = d->n_spatial;
    bool ok = d->attrs_ok && (a->auto_pad == SG_AUTO_PAD_NOTSET || a->auto_pad == SG_AUTO_PAD_VALID) &&
              !d->has_output_shape && d->group == 1 && d->opad_ok;
    for (int32_t i = 0; ok && i < nsp; i++)
        ok = a->strides[i] == d->wd[2 + i] && a->dilations[i] == 1 && a->pads[i] == 0 && a->pads[nsp + i] == 0 &&
             d->opad[i] == 0;
    return ok;
}

/* The kernel's parameters for node n, or false for a node this path
 * leaves to cuDNN. */
static bool upsample_geometry(const sg_cuda_plan *p, const sg_node *n, sgk_conv_up_params *kp)
{
    memset(kp, 0, sizeof *kp);
    kp->smem_limit = p->smem_limit;
    const cuda_conv_desc *d = cuda_conv_desc_of(p, n);
    const int64_t *xd = d->xd, *wd = d->wd, *yd = d->yd;
    int32_t rank = cuda_conv_desc_rank(d, 3, 5), nsp = rank - 2;
    if (!rank)
        return false;
    int64_t C = wd[0], K = wd[1], wnumel = C * K;
    if (C < 1 || C > INT32_MAX || K < 1 || K > INT32_MAX / 2 || xd[1] != C || yd[1] != K || yd[0] != xd[0])
        return false;
    for (int32_t i = 0; i < nsp; i++) {
        if (wd[2 + i] < 1 || yd[2 + i] != xd[2 + i] * wd[2 + i])
            return false;
        wnumel *= wd[2 + i];
        kp->kernel[i] = wd[2 + i];
    }
    if (!cuda_conv_consts_float(p, n, wnumel, K) || !upsample_attrs(d))
        return false;
    kp->n_spatial = nsp;
    kp->C = (int32_t)C;
    kp->K = (int32_t)K;
    kp->act = SGK_ACT_NONE;
    return true;
}

/* ONNX's [C, K, phases] weights as the kernel's [phase][C][K], float32. */
static sg_status upsample_weights(sg_cuda_plan *p, const sg_node *n, const sgk_conv_up_params *kp, int32_t *out)
{
    int64_t C = kp->C, K = kp->K, F = 1;
    for (int32_t i = 0; i < kp->n_spatial; i++)
        F *= kp->kernel[i];
    int32_t v = n->inputs[1];
    float *onnx = cuda_const_f32(p, v), *mine = sg_malloc(sizeof(float) * (size_t)(C * K * F));
    sg_status s = SEGRT_OK;
    if (!onnx || !mine) {
        s = sg_node_error(n, SEGRT_ERROR_OUT_OF_MEMORY, "no memory for a copy of `%s`", p->g->values[v].name);
    } else {
        for (int64_t c = 0; c < C; c++)
            for (int64_t k = 0; k < K; k++)
                for (int64_t f = 0; f < F; f++)
                    mine[(f * C + c) * K + k] = onnx[(c * K + k) * F + f];
        s = cuda_const_f32_tensor(p, v, "upsample_w", mine, C * K * F, out);
    }
    free(onnx);
    free(mine);
    return s;
}

/* Whether the kernel takes node n reading tensor xt (dn: x's deferred
 * normalisation, or NULL), with its parameters, epilogue and geometries. */
static bool upsample_plan(const sg_cuda_plan *p, const sg_node *n, int32_t xt, const cuda_deferred_norm *dn,
                          sgk_conv_up_params *kp, cuda_kernel_epilogue *ep, sgk_view *xg, sgk_view *yg)
{
    if (cuda_off(p, SG_KERNEL_UPSAMPLE_CONV) || xt < 0 || !upsample_geometry(p, n, kp) ||
        (dn && !cuda_deferred_norm_whole(p, dn)))
        return false;
    if (dn) {
        kp->prologue = true;
        kp->pro_act = dn->act;
        kp->pro_alpha = dn->act_alpha;
    }
    cuda_kernel_act_epilogue_of(p, n, ep);
    kp->act = ep->act;
    kp->act_alpha = ep->act_alpha;
    /* Ask the kernel before touching the plan: a no leaves it for cuDNN. */
    *xg = cuda_geometry_view(p, xt);
    return cuda_output_geometry(p, n->outputs[0], ep->out_dtype, cuda_dense_layout(p, xt), yg) &&
           sgk_conv_up_fits(kp, yg, xg);
}

bool cuda_conv_upsample_takes_norm(const sg_cuda_plan *p, const sg_node *n, const cuda_deferred_norm *dn)
{
    sgk_conv_up_params kp;
    cuda_kernel_epilogue ep;
    sgk_view xg, yg;
    return cuda_reads_only_as_x(p, n, SG_OP_CONV_TRANSPOSE, dn->value) &&
           upsample_plan(p, n, dn->raw, dn, &kp, &ep, &xg, &yg);
}

sg_status cuda_build_conv_upsample(sg_cuda_plan *p, const sg_node *n, bool *taken)
{
    *taken = false;
    sgk_conv_up_params kp;
    cuda_kernel_epilogue ep;
    sgk_view xg, yg;
    int32_t xt = cuda_value(p, n->inputs[0]);
    /* With x's normalisation deferred to this layer (cuda_build_norm.c
     * asked cuda_conv_upsample_takes_norm), x is the norm's input. */
    const cuda_deferred_norm *dn = cuda_deferred_norm_find(p, n->inputs[0]);
    if (!upsample_plan(p, n, xt, dn, &kp, &ep, &xg, &yg))
        return SEGRT_OK;
    sg_dtype out_dt = ep.out_dtype;
    cuda_layout out_layout = cuda_dense_layout(p, xt);
    SG_TRY(cuda_sm_count(p, &kp.sm_count));

    int32_t wt;
    SG_TRY(upsample_weights(p, n, &kp, &wt));
    cuda_conv_args a;
    SG_TRY(cuda_conv_args_make(p, n, xt, wt, "upsample_b", kp.K, -1, out_dt, out_layout, &a));
    upsample_params *up = sg_calloc(1, sizeof *up);
    if (!up)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    up->kp = kp;
    up->has_bias = a.has_bias;
    cuda_step *st;
    int32_t args[6];
    uint64_t views;
    int32_t n_args = cuda_conv_args_insert(&a, dn ? dn->ab : -1, args, &views); /* the norm's ab before y */
    SG_TRY(cuda_step_new(p, n, "segrt upsample conv", upsample_run, args, n_args, 1, up, NULL, &st));
    /* MACs: each input position times C x K per phase. */
    double macs = (double)kp.C * kp.K;
    for (int32_t i = 0; i < yg.rank; i++)
        macs *= i == 1 ? 1.0 : (double)yg.dims[i];
    st->flops = 2.0 * macs;
    st->any_view = views;
    cuda_kernel_epilogue_bind(p, &ep, a.y);
    *taken = true;
    return SEGRT_OK;
}
