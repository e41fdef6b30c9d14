/* 3x3 and 3x3x3 convolutions (stride 1, padding 1) with few output
 * channels through segrt's tensor-core kernel, k_conv_mma.cu.
 *
 * cuDNN tiles output channels by 64 or more, so a layer with 16 runs
 * mostly on padding (docs/perf.md: the timings). The kernel also applies
 * the bias, a following Relu, LeakyRelu or single-slope PRelu, and a
 * residual Add after them (a MONAI residual unit's last layer), and writes
 * through any view, so its output can become a Concat's slice. It beats
 * cuDNN at 32 output channels too, so those come here as well.
 *
 * Taken: float16 and bfloat16 plans, input channels a multiple of 16 and
 * already channels-last in the plan's dtype (fewer: a padded copy, or on
 * Hopper up to 8 read as they lie), 8, 16 or 32 output channels
 * (at most 16 in 3-D), constant weights and bias, group 1, dilation 1.
 * A layer that writes its norm's statistics can also do the 2x2 max pool
 * that reads the norm's result (mma_pool_of), or compute the 2x2
 * upsampling whose result is the second half of its input (mma_up_fold).
 * For comparisons (disabled kernels, backend/kernel_switches.h):
 * mma-conv sends these layers to cuDNN; wgmma keeps 2-D layers on the
 * mma.sync kernel on Hopper; wgmma-shared gives each of its warpgroups a
 * block and a copy of the weights of its own; mma-small-input pads an
 * image of up to 8 channels to a 16-bit copy for it. */
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/k_conv_mma.h"
#include "backend/cuda/k_conv_upsample.h"

#include "graph/infer_util.h"

#include <stdlib.h>
#include <string.h>

#define MMA_MAX_K 32

typedef struct mma_params {
    sgk_conv_mma_params kp;
    bool has_bias, has_residual;
} mma_params;

/* args: x, w, [bias], [residual], [the deferred norm's ab], [the folded
 * upsampling's x, w, bias and ab (-1: none)], y, [statistics], [pool] */
static sg_status mma_run(const cuda_step *s, cuda_run *r)
{
    const mma_params *mp = s->params;
    int32_t si = s->n_args - 1 - (mp->kp.pool ? 1 : 0), yi = si - (mp->kp.stats ? 1 : 0);
    int32_t ui = yi - (mp->kp.up ? 4 : 0), zi = ui - 1 - (mp->kp.prologue ? 1 : 0);
    sgk_view x = cuda_view(r, s->args[0]);
    sgk_view y = cuda_view(r, s->args[yi]);
    sgk_view z;
    if (mp->has_residual)
        z = cuda_view(r, s->args[zi]);
    const float *w = r->ptr[s->args[1]];
    const float *b = mp->has_bias ? r->ptr[s->args[2]] : NULL;
    float *stats = mp->kp.stats ? r->ptr[s->args[si]] : NULL;
    const float *ab = mp->kp.prologue ? r->ptr[s->args[ui - 1]] : NULL;
    sgk_view pooled;
    if (mp->kp.pool)
        pooled = cuda_view(r, s->args[s->n_args - 1]);
    sgk_conv_mma_up up;
    if (mp->kp.up) {
        up.x = cuda_view(r, s->args[ui]);
        up.w = r->ptr[s->args[ui + 1]];
        up.bias = s->args[ui + 2] >= 0 ? r->ptr[s->args[ui + 2]] : NULL;
        up.ab = s->args[ui + 3] >= 0 ? r->ptr[s->args[ui + 3]] : NULL;
    }
    return sgk_conv_mma(r->stream, &mp->kp, &y, &x, w, b, mp->has_residual ? &z : NULL, stats, ab,
                        mp->kp.pool ? &pooled : NULL, mp->kp.up ? &up : NULL);
}

/* The kernel's parameters for node n, or false for a node this path
 * leaves to cuDNN: kernel 3, stride 1, dilation 1, group 1, output of
 * the input's size (padding 1 on every side), constant weights. */
static bool mma_geometry(const sg_cuda_plan *p, const sg_node *n, sgk_conv_mma_params *kp)
{
    memset(kp, 0, sizeof *kp);
    kp->smem_limit = p->smem_limit;
    const cuda_conv_desc *d = cuda_conv_desc_of(p, n);
    const int64_t *xd = d->xd, *wd = d->wd, *yd = d->yd;
    int32_t rank = cuda_conv_desc_rank(d, 4, 5), nsp = rank - 2;
    if (!rank || d->group != 1)
        return false;
    int64_t K = wd[0], C = wd[1], wnumel = K * C;
    if (K < 1 || K > MMA_MAX_K || C < 1 || C > INT32_MAX || xd[1] != C || yd[1] != K || yd[0] != xd[0])
        return false;
    for (int32_t i = 0; i < nsp; i++) {
        if (wd[2 + i] != 3 || yd[2 + i] != xd[2 + i])
            return false;
        wnumel *= 3;
    }
    if (!cuda_conv_consts_float(p, n, wnumel, K) || !d->attrs_ok)
        return false;
    for (int32_t i = 0; i < nsp; i++)
        if (d->a.strides[i] != 1 || d->a.dilations[i] != 1 || sg_conv_pad_begin(&d->a, i, 2) != 1)
            return false;
    kp->n_spatial = nsp;
    kp->C = (int32_t)C;
    kp->K = (int32_t)K;
    kp->act = SGK_ACT_NONE;
    return true;
}

/* Whether the output of the kernel for node n (epilogue e) goes only to
 * an InstanceNormalization or GroupNormalization as its X, with nothing
 * fused between them: the kernel then also writes the norm's per-tile
 * statistics from its accumulators, and the norm skips its pass over the
 * tensor (which costs twice what the statistics add to the layer).
 * Disabling conv-stats turns this off. */
static bool mma_feeds_norm(const sg_cuda_plan *p, const cuda_kernel_epilogue *e)
{
    if (e->act_node >= 0 || e->res_node >= 0 || cuda_off(p, SG_KERNEL_CONV_STATS))
        return false;
    return cuda_stats_norm(p, e->out_value) >= 0;
}

/* Whether value v (a pool of the layer's output yg, normalised by act,
 * alpha) has readers and each is a layer of this kernel that normalises
 * it as it loads it: the fusion pass found them all convolutions reading
 * it as X (CUDA_NORM_READERS_CONVS), and each one's kernel takes it. */
static bool mma_pool_readers_take(const sg_cuda_plan *p, int32_t v, const sgk_view *yg, sgk_act act, float alpha)
{
    if (cuda_norm_readers_of(p, v) != CUDA_NORM_READERS_CONVS)
        return false;
    sgk_view pg = *yg;
    pg.data = NULL;
    pg.dims[2] /= 2;
    pg.dims[3] /= 2;
    cuda_layout_strides(CUDA_LAYOUT_CHANNELS_LAST, 4, pg.dims, pg.strides);
    cuda_deferred_norm dn = {v, -1, -1, act, alpha, 0, yg->dims[1], NULL};
    int32_t readers = 0, n_readers;
    const int32_t *reader = cuda_readers(p, v, &n_readers);
    for (int32_t k = 0; k < n_readers; k++) {
        int32_t i = reader[k];
        const sg_node *r = &p->g->nodes[i];
        if (p->fused[i] || !cuda_conv_mma_takes_norm(p, r, &dn, &pg))
            return false;
        readers++;
    }
    return readers > 0;
}

/* The MaxPool whose work a layer that writes its norm's statistics can
 * do in its epilogue (k_conv_mma.h's p->pool), or -1: the norm (e's
 * single reader) has a constant scale, whose signs give *min_bits, and
 * a monotone activation or none after it, and one reader of its result
 * is a MaxPool of kernel 2x2, stride 2, no padding, dilation 1, floor,
 * without indices, whose result is not a graph output and goes only to
 * layers of this kernel that normalise it as they load it (a cuDNN layer
 * would need the normalised pool written out, by a pass slower than the
 * pool's own: BasicUNet's second level). Its pass over the full-size
 * tensor is then not run: cuda_build_pool.c defers the norm to the pool's
 * readers, over the layer's pooled tensor of yg's dtype. (Should the norm
 * not be deferred after all, the pool reads its result as before, and the
 * pooled tensor goes unread.) Disabling conv-pool turns this off. */
static int32_t mma_pool_of(const sg_cuda_plan *p, const cuda_kernel_epilogue *e, const sgk_view *yg,
                           uint32_t *min_bits)
{
    const int64_t K = yg->dims[1];
    *min_bits = 0;
    int32_t r = cuda_single_reader(p, e->out_value);
    if (r < 0 || K > 32 || cuda_off(p, SG_KERNEL_CONV_POOL))
        return -1;
    const sg_graph *g = p->g;
    const sg_node *norm = &g->nodes[r];
    if (norm->n_inputs < 3 || norm->inputs[1] < 0 || !g->values[norm->inputs[1]].data || norm->n_outputs < 1 ||
        norm->outputs[0] < 0)
        return -1;
    sgk_act act;
    float alpha;
    int32_t ar = cuda_norm_fused_act(p, norm, &act, &alpha);
    int32_t result = ar >= 0 ? g->nodes[ar].outputs[0] : norm->outputs[0];
    if (!cuda_act_monotone(act, alpha))
        return -1;
    int32_t pool = -1, n_readers;
    const int32_t *reader = cuda_readers(p, result, &n_readers); /* the candidates read result */
    for (int32_t k = 0; k < n_readers && pool < 0; k++) {
        int32_t i = reader[k];
        const sg_node *n = &g->nodes[i];
        if (n->dead || p->fused[i] || n->op != SG_OP_MAX_POOL || n->n_inputs < 1 || n->inputs[0] != result ||
            n->n_outputs < 1 || n->outputs[0] < 0 || (n->n_outputs > 1 && n->outputs[1] >= 0) ||
            g->values[n->outputs[0]].is_output || g->values[result].shape.rank != 4)
            continue;
        if (p->node_folds[i].pool2x2 && mma_pool_readers_take(p, n->outputs[0], yg, act, alpha))
            pool = i;
    }
    if (pool < 0)
        return -1;
    /* Per-channel or (GroupNormalization) per-group scales. */
    int64_t numel = 0;
    if (!sg_shape_numel(&g->values[norm->inputs[1]].shape, &numel) || numel < 1 || K % numel != 0)
        return -1;
    float *scale = cuda_const_f32(p, norm->inputs[1]);
    if (!scale) {
        sg_error_clear();
        return -1;
    }
    for (int64_t k = 0; k < K; k++)
        if (scale[k / (K / numel)] < 0.0f)
            *min_bits |= 1u << k;
    free(scale);
    return pool;
}

/* Whether the kernel takes the layer as kp says, with the statistics for
 * a norm that reads y where it can. */
static bool mma_fits(const sg_cuda_plan *p, sgk_conv_mma_params *kp, const cuda_kernel_epilogue *ep,
                     const sgk_view *yg, const sgk_view *xg, const sgk_view *zg)
{
    kp->stats = mma_feeds_norm(p, ep);
    if (kp->stats && sgk_conv_mma_fits(kp, yg, xg, NULL, NULL))
        return true;
    kp->stats = false;
    return sgk_conv_mma_fits(kp, yg, xg, ep->z_tensor >= 0 ? zg : NULL, NULL);
}

/* Whether the kernel takes node n reading tensor xt, and its parameters,
 * epilogue and 16-bit dtype (*io) if so; asks the kernel before anything
 * touches the plan, so a no leaves the node to cuDNN. An input of 1 to 15
 * channels (an image) is read from a copy padded to 16 (*pad_to; 0 for
 * none), as cuDNN's path pads it to 8 (where cuDNN runs such a layer far
 * below the chip's speed). On Hopper an image of up to 8 channels is read
 * as it is instead (kp->small_input). */
static bool mma_plan(const sg_cuda_plan *p, const sg_node *n, const sgk_view *x, const cuda_deferred_norm *dn,
                     sgk_conv_mma_params *kp, cuda_kernel_epilogue *ep, int64_t *pad_to, sg_dtype *io)
{
    *pad_to = 0;
    cuda_math math = cuda_node_math(p, n);
    if ((math != CUDA_MATH_FP16 && math != CUDA_MATH_BF16) || cuda_off(p, SG_KERNEL_MMA_CONV) ||
        !mma_geometry(p, n, kp) || (dn && dn->c_at != 0))
        return false;
    *io = math == CUDA_MATH_FP16 ? SEGRT_DTYPE_FLOAT16 : SEGRT_DTYPE_BFLOAT16;
    /* Hopper's warpgroup products where the kernel's sm_90a code runs
     * (cuda_kernel_runs). */
    kp->wgmma = !cuda_off(p, SG_KERNEL_WGMMA);
    kp->wg_groups = cuda_off(p, SG_KERNEL_WGMMA_SHARED) ? 1 : 0;
    kp->issue_late = !cuda_off(p, SG_KERNEL_WGMMA_ISSUE_LATE);
    if (dn) {
        kp->prologue = true;
        kp->pro_act = dn->act;
        kp->pro_alpha = dn->act_alpha;
        kp->pro_c = (int32_t)dn->c_len;
    }
    cuda_kernel_epilogue_of(p, n, ep);
    kp->act = ep->act;
    kp->act_alpha = ep->act_alpha;
    sgk_view yg, zg;
    if (ep->z_tensor >= 0)
        zg = cuda_geometry_view(p, ep->z_tensor);
    if (!cuda_output_geometry(p, n->outputs[0], ep->out_dtype, CUDA_LAYOUT_CHANNELS_LAST, &yg))
        return false;
    const int32_t C = kp->C;
    if (C <= 8 && !dn && kp->wgmma && kp->n_spatial == 2 && !cuda_off(p, SG_KERNEL_MMA_SMALL_INPUT)) {
        /* The image as it is, each value converted as the kernel reads it
         * (staged results only: else the padded copy below). */
        kp->small_input = true;
        kp->x_channels = C;
        kp->C = 16;
        if (mma_fits(p, kp, ep, &yg, x, &zg))
            return true;
        kp->small_input = false;
        kp->x_channels = 0;
        kp->C = C;
    }
    sgk_view xg = *x;
    if (C < 16 && !dn && !cuda_off(p, SG_KERNEL_PAD_CHANNELS)) {
        sgk_view padded = xg;
        padded.dtype = *io;
        padded.dims[1] = 16;
        cuda_layout_strides(CUDA_LAYOUT_CHANNELS_LAST, padded.rank, padded.dims, padded.strides);
        if (!sgk_pad_channels_fits(&padded, &xg))
            return false;
        xg = padded;
        kp->C = 16;
        *pad_to = 16;
    } else if (x->dtype != *io) {
        /* Otherwise the input as the plan holds it: the kernel reads
         * channels-last 16-bit data, as the layer before has written it. */
        return false;
    }
    return mma_fits(p, kp, ep, &yg, &xg, &zg);
}

/* An upsampling step that a layer computes in its halo instead (k_conv_mma.h's p->up). */
typedef struct mma_fold {
    int32_t step;         /* the upsampling's step, built already */
    sgk_conv_up_params up;
    int32_t x, bias, ab;  /* its tensors: input, bias (-1: none), its input's norm's ab (-1: none) */
    sgk_view xg;
} mma_fold;

/* Whether node n (planned as kp, reading tensor xt) takes the upsampling
 * that writes the second half of its input: xt is a Concat's result of
 * two inputs along channels that n alone reads, the first normalised by
 * n's prologue, the second written into its slice by a "segrt upsample
 * conv" step (kernel 2x2) that the Concat alone reads. The step is then
 * not run, and its result, the decoder's largest tensor, is neither
 * written nor read back. Sets kp's up fields if so.
 * Disabling up-fold turns this off. */
static bool mma_up_fold(const sg_cuda_plan *p, const sg_node *n, int32_t xt, sgk_conv_mma_params *kp,
                        const sgk_view *yg, const sgk_view *xg, mma_fold *f)
{
    const sg_graph *g = p->g;
    if (!kp->wgmma || !kp->prologue || !kp->stats || kp->pro_c <= 0 || kp->n_spatial != 2 ||
        cuda_off(p, SG_KERNEL_UP_FOLD))
        return false;
    int32_t ci = p->node_folds[cuda_node_index(p, n)].up_cat; /* the fusion pass's */
    if (ci < 0)
        return false;
    const sg_node *cat = &g->nodes[ci];
    int32_t ut = cuda_value(p, cat->inputs[1]), uy = -1;
    if (ut < 0)
        return false;
    /* The last upsampling step writing ut: among the steps naming ut (its
     * chain, in plan order), not by a scan back through the whole plan. */
    f->step = -1;
    for (int32_t k = p->tensors[ut].touch_head; k; k = p->touch_next[k - 1]) {
        int32_t s = cuda_step_of_serial(p, p->touch_serial[k - 1]);
        if (s > f->step && cuda_conv_upsample_step(&p->steps[s], &f->up, &f->x, &f->bias, &f->ab, &uy) && uy == ut)
            f->step = s;
    }
    if (f->step < 0 || !cuda_conv_upsample_step(&p->steps[f->step], &f->up, &f->x, &f->bias, &f->ab, &uy))
        return false;
    const cuda_tensor *u = &p->tensors[ut];
    if (u->kind != CUDA_T_ALIAS || u->alias != xt || u->alias_offset != kp->pro_c || f->up.n_spatial != 2 ||
        f->up.kernel[0] != 2 || f->up.kernel[1] != 2 || f->up.K != kp->C - kp->pro_c)
        return false;
    kp->up = true;
    kp->up_c = f->up.C;
    kp->up_act = f->up.act;
    kp->up_alpha = f->up.act_alpha;
    kp->up_pro = f->up.prologue;
    kp->up_pro_act = f->up.pro_act;
    kp->up_pro_alpha = f->up.pro_alpha;
    f->xg = cuda_geometry_view(p, f->x);
    if (sgk_conv_mma_fits(kp, yg, xg, NULL, &f->xg))
        return true;
    kp->up = false;
    return false;
}

/* The folded upsampling's ONNX [C, K, 2, 2] weights as the kernel's
 * [phase][K][C] (phase = kh * 2 + kw), float32. */
static sg_status mma_up_weights(sg_cuda_plan *p, const sg_node *up_node, int64_t C, int64_t K, int32_t *out)
{
    float *onnx = cuda_const_f32(p, up_node->inputs[1]), *mine = sg_malloc(sizeof(float) * (size_t)(C * K * 4));
    sg_status s = SEGRT_OK;
    if (!onnx || !mine) {
        s = sg_node_error(up_node, SEGRT_ERROR_OUT_OF_MEMORY, "no memory for a copy of the weights");
    } else {
        for (int64_t c = 0; c < C; c++)
            for (int64_t k = 0; k < K; k++)
                for (int64_t f = 0; f < 4; f++)
                    mine[(f * K + k) * C + c] = onnx[(c * K + k) * 4 + f];
        s = cuda_const_f32_tensor(p, up_node->inputs[1], "mma_up_w", mine, C * K * 4, out);
    }
    free(onnx);
    free(mine);
    return s;
}

bool cuda_conv_mma_takes_norm(const sg_cuda_plan *p, const sg_node *n, const cuda_deferred_norm *dn,
                              const sgk_view *xg)
{
    if (!cuda_reads_only_as_x(p, n, SG_OP_CONV, dn->value))
        return false;
    sgk_conv_mma_params kp;
    cuda_kernel_epilogue ep;
    int64_t pad_to = 0;
    sg_dtype io;
    return mma_plan(p, n, xg, dn, &kp, &ep, &pad_to, &io) && kp.prologue && !pad_to;
}

sg_status cuda_build_conv_mma(sg_cuda_plan *p, const sg_node *n, bool *taken)
{
    *taken = false;
    sgk_conv_mma_params kp;
    cuda_kernel_epilogue ep;
    int32_t xt = cuda_value(p, n->inputs[0]);
    int64_t pad_to = 0;
    sg_dtype io;
    /* A normalisation left to this layer (cuda_build_norm.c asked
     * cuda_conv_mma_takes_norm first): x is the norm's input. */
    const cuda_deferred_norm *dn = cuda_deferred_norm_find(p, n->inputs[0]);
    if (xt < 0)
        return SEGRT_OK;
    sgk_view xg = cuda_geometry_view(p, xt);
    if (!mma_plan(p, n, &xg, dn, &kp, &ep, &pad_to, &io))
        return SEGRT_OK;
    SG_TRY(cuda_sm_count(p, &kp.sm_count));
    mma_fold fold;
    sgk_view yg0;
    if (!pad_to && cuda_output_geometry(p, n->outputs[0], ep.out_dtype, CUDA_LAYOUT_CHANNELS_LAST, &yg0))
        mma_up_fold(p, n, xt, &kp, &yg0, &xg, &fold);

    /* ONNX's [K, C0, taps] weights as the kernel's [tap][K][C], float32
     * (zeros for the channels the padding adds). */
    int64_t C = kp.C, K = kp.K, taps = kp.n_spatial == 3 ? 27 : 9;
    int64_t C0 = p->g->values[n->inputs[1]].shape.d[1].size;
    float *onnx = cuda_const_f32(p, n->inputs[1]), *mine = sg_calloc((size_t)(C * K * taps), sizeof(float));
    sg_status s = SEGRT_OK;
    int32_t wt = -1;
    if (!onnx || !mine) {
        s = sg_node_error(n, SEGRT_ERROR_OUT_OF_MEMORY, "no memory for a copy of the weights");
    } else {
        for (int64_t k = 0; k < K; k++)
            for (int64_t c = 0; c < C0; c++)
                for (int64_t t = 0; t < taps; t++)
                    mine[(t * K + k) * C + c] = onnx[(k * C0 + c) * taps + t];
        s = cuda_const_f32_tensor(p, n->inputs[1], C != C0 ? "mma_w_pad16" : "mma_w", mine, C * K * taps, &wt);
    }
    free(onnx);
    free(mine);
    SG_TRY(s);
    if (pad_to)
        SG_TRY(cuda_conv_padded_input(p, n, pad_to, io, &xt));
    cuda_layout out_layout = CUDA_LAYOUT_CHANNELS_LAST;
    cuda_conv_args a;
    SG_TRY(cuda_conv_args_make(p, n, xt, wt, "mma_b", kp.K, ep.z_tensor, ep.out_dtype, out_layout, &a));
    int32_t args[12];
    uint64_t views;
    int32_t n_args = cuda_conv_args_insert(&a, dn ? dn->ab : -1, args, &views); /* the norm's ab before y */
    if (kp.up) {
        /* The upsampling's x, weights, bias and ab before y, its step gone. */
        int32_t uw;
        SG_TRY(mma_up_weights(p, p->steps[fold.step].node, kp.up_c, kp.C - kp.pro_c, &uw));
        const int32_t y = args[n_args - 1], yv = (int32_t)(views >> (n_args - 1) & 1u);
        views &= ~((uint64_t)1 << (n_args - 1));
        views |= (uint64_t)1 << (n_args - 1) | (uint64_t)yv << (n_args + 3); /* x read through its view */
        args[n_args - 1] = fold.x;
        args[n_args] = uw;
        args[n_args + 1] = fold.bias;
        args[n_args + 2] = fold.ab;
        args[n_args + 3] = y;
        n_args += 4;
        cuda_step_remove(p, fold.step);
    }
    sgk_tile_grid grid;
    int32_t pool_node = -1, pooled = -1;
    if (kp.stats) {
        /* N * K * tiles (mean, M2) pairs beside y, for the norm. */
        sgk_view yg = cuda_geometry_view(p, a.y);
        sgk_conv_mma_stats_grid(&kp, &yg, &grid);
        int64_t pairs = yg.dims[0] * K * sgk_tile_grid_tiles(&grid) * 2;
        SG_TRY(cuda_tensor_new(p, SEGRT_DTYPE_FLOAT32, 1, &pairs, CUDA_LAYOUT_PLAIN, &args[n_args++]));
        pool_node = mma_pool_of(p, &ep, &yg, &kp.pool_min);
        kp.pool = pool_node >= 0;
        if (kp.pool && !sgk_conv_mma_fits(&kp, &yg, &xg, NULL, kp.up ? &fold.xg : NULL)) {
            kp.pool = false;
            pool_node = -1;
        }
        if (kp.pool) {
            int64_t pd[4] = {yg.dims[0], K, yg.dims[2] / 2, yg.dims[3] / 2};
            SG_TRY(cuda_tensor_new(p, yg.dtype, 4, pd, CUDA_LAYOUT_CHANNELS_LAST, &pooled));
            args[n_args++] = pooled;
        }
    }
    mma_params *mp = sg_calloc(1, sizeof *mp);
    if (!mp)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    mp->kp = kp;
    mp->has_bias = a.has_bias;
    mp->has_residual = a.has_residual;
    cuda_step *st;
    const char *impl = kp.up     ? (kp.pool ? "segrt mma conv+up+stats+pool" : "segrt mma conv+up+stats")
                       : kp.pool ? "segrt mma conv+stats+pool"
                       : kp.stats ? "segrt mma conv+stats"
                                  : "segrt mma conv";
    SG_TRY(cuda_step_new(p, n, impl, mma_run, args, n_args, 1 + kp.stats + kp.pool, mp, NULL, &st));
    double positions = 1.0;
    for (int32_t i = 0; i < p->tensors[a.y].rank; i++)
        positions *= i == 1 ? 1.0 : (double)p->tensors[a.y].dims[i];
    st->flops = 2.0 * positions * (double)(C0 * K * taps); /* the layer's own work, not the padding's */
    if (kp.up) /* and the upsampling's: a quarter of the positions, four phases */
        st->flops += 2.0 * positions * (double)kp.up_c * (double)(kp.C - kp.pro_c);
    st->any_view = views;
    cuda_kernel_epilogue_bind(p, &ep, a.y);
    if (kp.stats)
        SG_TRY(cuda_tile_stats_put(p, a.y, args[n_args - 1 - kp.pool], &grid, pooled, pool_node));
    *taken = true;
    return SEGRT_OK;
}
