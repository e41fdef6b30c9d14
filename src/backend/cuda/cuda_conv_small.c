/* Conv and ConvTranspose with few output channels (a network's last
 * layers: 1 to 4 classes) through segrt's direct kernel, k_conv_small.cu.
 *
 * Tensor cores cannot use such layers, and cuDNN runs them at a few
 * TFLOP/s; the direct kernel is bound by reading its input instead. It
 * also takes any input and output strides, so the input is read in the
 * layout it has (no conversion to channels-last first) and a graph output
 * is written by the kernel itself, plain and in float32, with no copy
 * after it. A following Relu, LeakyRelu or single-slope PRelu is applied
 * before the store, as cudnn_conv.c fuses it, and a residual Add after
 * that (a MONAI residual unit's last layer) is added there too.
 *
 * cuda_conv.c asks here first; a node this file does not take (more output
 * channels, groups, weights computed at run time, an output_shape or SAME
 * padding on a ConvTranspose, weights too large for shared memory) leaves
 * the plan untouched and goes to cuDNN. Disabling small-conv (a
 * build option) sends every node to cuDNN (for comparisons).
 *
 * A forward layer that alone reads an InstanceNorm's or GroupNorm's
 * result may be given that normalisation (cuda_deferred_norm): it reads
 * the norm's input and the general kernel normalises each value, so the
 * norm's pass is not run; only where the general variant would run the
 * layer anyway (cuda_conv_small_takes_norm). */
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/k_conv_small.h"

#include "graph/infer.h"
#include "graph/infer_util.h"

#include <stdlib.h>
#include <string.h>

/* Beyond 4 output channels cuDNN's engines start to pay off, except on
 * an image's first layers (cuda_build_conv_few_inputs). */
#define SMALL_MAX_K 4

typedef struct small_params {
    sgk_conv_small_params kp;
    bool has_bias;
    bool has_residual;
} small_params;

/* args: x, w, [bias], [residual], [the deferred norm's ab], y */
static sg_status small_run(const cuda_step *s, cuda_run *r)
{
    const small_params *sp = s->params;
    const int32_t yi = s->n_args - 1, zi = yi - 1 - (sp->kp.prologue ? 1 : 0);
    sgk_view x = cuda_view(r, s->args[0]);
    const float *w = r->ptr[s->args[1]];
    const float *b = sp->has_bias ? r->ptr[s->args[2]] : NULL;
    sgk_view y = cuda_view(r, s->args[yi]), z;
    if (sp->has_residual)
        z = cuda_view(r, s->args[zi]);
    const float *ab = sp->kp.prologue ? r->ptr[s->args[yi - 1]] : NULL;
    return sgk_conv_small(r->stream, &sp->kp, &y, &x, w, b, sp->has_residual ? &z : NULL, ab);
}

static bool small_dtype(sg_dtype t)
{
    return t == SEGRT_DTYPE_FLOAT32 || t == SEGRT_DTYPE_FLOAT16 || t == SEGRT_DTYPE_BFLOAT16;
}

/* Whether the attributes are well formed (cuDNN's builder reports those
 * that are not) and ask for nothing this path leaves to cuDNN. */
static bool small_attrs(const cuda_conv_desc *d, bool transposed)
{
    if (!d->attrs_ok || !transposed)
        return d->attrs_ok;
    /* Pads from output_shape or SAME are the reference's own rules; not
     * worth a second copy here. */
    bool same = d->a.auto_pad == SG_AUTO_PAD_SAME_UPPER || d->a.auto_pad == SG_AUTO_PAD_SAME_LOWER;
    return !same && !d->has_output_shape && d->opad_ok;
}

/* The kernel's geometry for node n, checked against the graph's shapes;
 * false for anything this path does not take. */
static bool small_geometry(const sg_cuda_plan *p, const sg_node *n, bool transposed, int64_t max_k,
                           sgk_conv_small_params *kp)
{
    const sg_graph *g = p->g;
    memset(kp, 0, sizeof *kp);
    const cuda_conv_desc *d = cuda_conv_desc_of(p, n);
    const int64_t *xd = d->xd, *wd = d->wd, *yd = d->yd;
    int32_t rank = cuda_conv_desc_rank(d, 3, 5);
    if (!rank)
        return false;
    const sg_value *xv = &g->values[n->inputs[0]], *yv = &g->values[n->outputs[0]];
    if (!small_dtype(xv->dtype) || yv->dtype != xv->dtype || d->group != 1)
        return false;
    int64_t K = transposed ? wd[1] : wd[0], C = transposed ? wd[0] : wd[1];
    if (K < 1 || K > max_k || C < 1 || C > INT32_MAX || xd[1] != C || yd[1] != K || yd[0] != xd[0])
        return false;
    int64_t wnumel = 1;
    for (int32_t i = 0; i < rank; i++)
        wnumel *= wd[i];
    if (!cuda_conv_consts_float(p, n, wnumel, K))
        return false;
    int32_t nsp = rank - 2;
    if (!small_attrs(d, transposed))
        return false;
    const sg_conv_attrs *a = &d->a;
    for (int32_t i = 0; i < nsp; i++) {
        /* The graph's output size must be the one the attributes give (the
         * reference checks the same); the kernel writes exactly y's dims. */
        sg_dim want;
        sg_status s = transposed ? sg_conv_transpose_out_dim(n, a, i, sg_dim_of(xd[2 + i]), d->opad[i], &want)
                                 : sg_conv_out_dim(n, a, i, sg_dim_of(xd[2 + i]), xv->name, &want);
        if (s != SEGRT_OK) {
            sg_error_clear();
            return false;
        }
        if (want.size != yd[2 + i])
            return false;
        int64_t ext = (wd[2 + i] - 1) * a->dilations[i] + 1;
        kp->kernel[i] = wd[2 + i];
        kp->stride[i] = a->strides[i];
        kp->dil[i] = a->dilations[i];
        /* ConvTranspose: explicit pads (VALID reads as zeros). */
        kp->pad_begin[i] =
            transposed ? a->pads[i] : sg_conv_pad_begin(a, i, (yd[2 + i] - 1) * a->strides[i] + ext - xd[2 + i]);
    }
    kp->transposed = transposed;
    kp->n_spatial = nsp;
    kp->K = (int32_t)K;
    kp->C = (int32_t)C;
    kp->act = SGK_ACT_NONE;
    return true;
}

/* Whether the kernel takes node n reading tensor xt (dn: x's deferred
 * normalisation, or NULL), and its parameters, epilogue, output layout
 * and geometries if so. few_inputs: the first-layer case
 * (cuda_build_conv_few_inputs), else the few-output-channel one. */
static bool small_plan(const sg_cuda_plan *p, const sg_node *n, bool transposed, bool few_inputs, int32_t xt,
                       const cuda_deferred_norm *dn, sgk_conv_small_params *kp, cuda_kernel_epilogue *ep,
                       cuda_layout *out_layout, sgk_view *xg, sgk_view *yg)
{
    if (cuda_off(p, SG_KERNEL_SMALL_CONV) ||
        !small_geometry(p, n, transposed, few_inputs ? SGK_CONV_SMALL_MAX_K_FEW_C : SMALL_MAX_K, kp) ||
        (few_inputs && (transposed || kp->C > SGK_CONV_SMALL_FEW_C)) || xt < 0)
        return false;
    if (dn) {
        kp->prologue = true;
        kp->pro_act = dn->act;
        kp->pro_alpha = dn->act_alpha;
    }
    /* The activation, and a residual Add after it: the kernel adds the
     * other operand, read through its own view, before the store. */
    cuda_kernel_epilogue_of(p, n, ep);
    kp->act = ep->act;
    kp->act_alpha = ep->act_alpha;
    /* An image's first layer feeds channels-last layers (a one-channel
     * image reads as plain); a last layer keeps its input's layout. */
    *out_layout = few_inputs ? CUDA_LAYOUT_CHANNELS_LAST : cuda_dense_layout(p, xt);
    /* Ask the kernel before touching the plan: a no leaves it for cuDNN. */
    *xg = cuda_geometry_view(p, xt);
    return cuda_output_geometry(p, n->outputs[0], ep->out_dtype, *out_layout, yg) && sgk_conv_small_fits(kp, yg, xg);
}

bool cuda_conv_small_takes_norm(const sg_cuda_plan *p, const sg_node *n, const cuda_deferred_norm *dn)
{
    if (!cuda_reads_only_as_x(p, n, SG_OP_CONV, dn->value) || !cuda_deferred_norm_whole(p, dn))
        return false;
    int32_t raw = dn->raw;
    sgk_conv_small_params kp;
    cuda_kernel_epilogue ep;
    cuda_layout l;
    sgk_view xg, yg;
    /* Only where the general kernel would run the layer anyway: the tiled
     * variants (unet3d_spleen's last 3x3x3 layer, say) are worth more
     * than the norm's pass. */
    if (!small_plan(p, n, false, false, raw, NULL, &kp, &ep, &l, &xg, &yg) ||
        sgk_conv_small_variant_of(&kp, &yg, &xg) != SGK_CONV_SMALL_GENERAL)
        return false;
    return small_plan(p, n, false, false, raw, dn, &kp, &ep, &l, &xg, &yg);
}

static sg_status build_small(sg_cuda_plan *p, const sg_node *n, bool transposed, bool few_inputs, bool *taken)
{
    *taken = false;
    sgk_conv_small_params kp;
    cuda_kernel_epilogue ep;
    cuda_layout out_layout;
    sgk_view xg, yg;
    /* The input as it is, whatever its layout: the kernel reads any view;
     * with its normalisation deferred to this layer, the norm's input
     * (cuda_build_norm.c asked cuda_conv_small_takes_norm first). */
    int32_t xt = cuda_value(p, n->inputs[0]);
    const cuda_deferred_norm *dn = transposed || few_inputs ? NULL : cuda_deferred_norm_find(p, n->inputs[0]);
    if (dn && !cuda_deferred_norm_whole(p, dn))
        return SEGRT_OK; /* a part of the channels: the kernel's prologue takes all */
    if (!small_plan(p, n, transposed, few_inputs, xt, dn, &kp, &ep, &out_layout, &xg, &yg))
        return SEGRT_OK;
    int32_t res_node = ep.res_node, zt = ep.z_tensor;
    sg_dtype out_dt = ep.out_dtype;
    SG_TRY(cuda_sm_count(p, &kp.sm_count));
    kp.no_tiled = cuda_off(p, SG_KERNEL_TILED_CONV);
    kp.no_up = cuda_off(p, SG_KERNEL_UP_CONV);

    int64_t wnumel = (int64_t)kp.K * kp.C;
    double positions = 1.0;
    for (int32_t i = 0; i < kp.n_spatial; i++) {
        wnumel *= kp.kernel[i];
        /* MACs: every input-output channel pair, tap and position of the
         * small side (the output of a Conv, the input of a ConvTranspose). */
        positions *= (double)(transposed ? xg.dims[2 + i] : yg.dims[2 + i]);
    }
    int32_t wt;
    SG_TRY(cuda_const_f32_tensor(p, n->inputs[1], "small_w", NULL, wnumel, &wt));
    cuda_conv_args a;
    SG_TRY(cuda_conv_args_make(p, n, xt, wt, "small_b", kp.K, res_node >= 0 ? zt : -1, out_dt, out_layout, &a));

    small_params *sp = sg_calloc(1, sizeof *sp);
    if (!sp)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    sp->kp = kp;
    sp->has_bias = a.has_bias;
    sp->has_residual = a.has_residual;
    cuda_step *st;
    static const char *const impl[] = {"segrt small conv", "segrt small conv tiled", "segrt small conv up"};
    int32_t args[6];
    uint64_t views;
    int32_t n_args = cuda_conv_args_insert(&a, dn ? dn->ab : -1, args, &views); /* the norm's ab before y */
    SG_TRY(cuda_step_new(p, n, impl[sgk_conv_small_variant_of(&kp, &yg, &xg)], small_run, args, n_args, 1, sp,
                         NULL, &st));
    st->flops = 2.0 * (double)xg.dims[0] * (double)wnumel * positions;
    st->any_view = views;
    cuda_kernel_epilogue_bind(p, &ep, a.y);
    *taken = true;
    return SEGRT_OK;
}

sg_status cuda_build_conv_small(sg_cuda_plan *p, const sg_node *n, bool transposed, bool *taken)
{
    return build_small(p, n, transposed, false, taken);
}

sg_status cuda_build_conv_few_inputs(sg_cuda_plan *p, const sg_node *n, bool *taken)
{
    return build_small(p, n, false, true, taken);
}
