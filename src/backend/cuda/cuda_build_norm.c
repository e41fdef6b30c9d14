/* Builders for InstanceNormalization, GroupNormalization (with a following
 * Relu or LeakyRelu fused) and LayerNormalization.
 *
 * The input is taken in the layout it has and the output keeps it: the
 * kernels are coalesced for channels-last activations (what the plan keeps
 * between convolutions) and correct for any strides. Scale and bias become
 * per-channel float32 arrays; GroupNormalization's per-group parameters
 * (opset 18) are repeated over each group's channels once, at build. */
#include "backend/cuda/cuda_internal.h"

#include "graph/infer.h"

#include <stdlib.h>
#include <string.h>

static int64_t value_numel(const sg_value *v)
{
    int64_t numel = -1;
    return sg_shape_numel(&v->shape, &numel) ? numel : -1;
}

/* Instance and group normalisation --------------------------------------------- */

typedef struct gn_params {
    int64_t groups;
    float eps;
    sgk_act act;
    float act_alpha;
    bool from_stats;    /* the producer wrote x's per-tile statistics, over grid */
    sgk_tile_grid grid;
    int32_t one_pass_sms; /* sgk_group_norm's: the device's SMs, or 0 */
    int32_t one_pass_smem; /* ... and the shared memory a block may hold */
} gn_params;

/* args: x, scale, bias, the producer's per-tile statistics, ab: the
 * normalisation's parameters for the layer it is left to (see
 * cuda_deferred_norm). */
static sg_status gn_ab_run(const cuda_step *s, cuda_run *r)
{
    const gn_params *gp = s->params;
    sgk_view x = cuda_view(r, s->args[0]);
    return sgk_group_norm_partials_ab(r->stream, &x, r->ptr[s->args[1]], r->ptr[s->args[2]], gp->groups, gp->eps,
                                      r->ptr[s->args[3]], &gp->grid, r->ptr[s->args[4]]);
}

/* args: x, scale, bias, [the producer's per-tile statistics], y */
static sg_status gn_run(const cuda_step *s, cuda_run *r)
{
    const gn_params *gp = s->params;
    sgk_view x = cuda_view(r, s->args[0]);
    sgk_view scale = cuda_view(r, s->args[1]);
    sgk_view bias = cuda_view(r, s->args[2]);
    sgk_view y = cuda_view(r, s->args[s->n_args - 1]);
    if (gp->from_stats)
        return sgk_group_norm_partials(r->stream, &y, &x, scale.data, bias.data, gp->groups, gp->eps, gp->act,
                                       gp->act_alpha, r->ptr[s->args[3]], &gp->grid, r->scratch);
    return sgk_group_norm(r->stream, &y, &x, scale.data, bias.data, gp->groups, gp->eps, gp->act, gp->act_alpha,
                          gp->one_pass_sms, gp->one_pass_smem, r->scratch);
}

/* Scale or bias (input i) as a float32 tensor of c values: a constant is
 * converted on the host (per-group values repeated over their channels)
 * and kept by the weight store; a computed one must already be per
 * channel and is converted on the device. Checked by gn_param_ok first. */
static sg_status gn_param(sg_cuda_plan *p, const sg_node *n, int32_t i, int64_t c, int32_t *out)
{
    const sg_value *v = &p->g->values[n->inputs[i]];
    if (!v->data)
        return cuda_value_as(p, n->inputs[i], SEGRT_DTYPE_FLOAT32, CUDA_LAYOUT_PLAIN, out);
    int64_t numel = value_numel(v);
    float *host = cuda_const_f32(p, n->inputs[i]);
    if (!host)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    const char *tag = "f32";
    if (numel != c) {
        float *per_channel = sg_malloc(sizeof(float) * (size_t)c);
        if (!per_channel) {
            free(host);
            return SEGRT_ERROR_OUT_OF_MEMORY;
        }
        int64_t per_group = c / numel;
        for (int64_t k = 0; k < c; k++)
            per_channel[k] = host[k / per_group];
        free(host);
        host = per_channel;
        tag = "f32 per group to per channel";
    }
    void *dev = NULL;
    sg_status s = cuda_const_upload(p, v->data, tag, host, sizeof(float) * (size_t)c, &dev);
    free(host);
    SG_TRY(s);
    int64_t stride = 1;
    return cuda_tensor_const(p, dev, SEGRT_DTYPE_FLOAT32, 1, &c, &stride, out);
}

/* Whether input i can serve as per-channel scale or bias: c values, or
 * (GroupNormalization, constant) one per group. */
static sg_status gn_param_ok(const sg_cuda_plan *p, const sg_node *n, int32_t i, int64_t c, int64_t groups)
{
    const sg_value *v = &p->g->values[n->inputs[i]];
    int64_t numel = value_numel(v);
    const char *what = i == 1 ? "scale" : "bias";
    if (!sg_dtype_is_float(v->dtype))
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%s of dtype %s", what, segrt_dtype_name(v->dtype));
    if (numel == c)
        return SEGRT_OK;
    if (numel != groups || n->op != SG_OP_GROUP_NORMALIZATION)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "%s has %lld values; expected %lld", what, (long long)numel,
                             (long long)c);
    if (!v->data)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "per-group %s computed at run time", what);
    return SEGRT_OK;
}

/* Geometry of a Concat's channels-last result over tensor raw's dtype and
 * spatial dims, for a reader's kernel asked before the Concat is built. */
static bool concat_geometry(const sg_cuda_plan *p, const sg_node *cat, int32_t raw, sgk_view *g)
{
    const sg_value *cv = &p->g->values[cat->outputs[0]];
    *g = cuda_geometry_view(p, raw);
    if (cv->shape.rank != g->rank)
        return false;
    for (int32_t d = 0; d < g->rank; d++) {
        if (d != 1 && cv->shape.d[d].size != g->dims[d])
            return false;
        g->dims[d] = cv->shape.d[d].size;
    }
    cuda_layout_strides(CUDA_LAYOUT_CHANNELS_LAST, g->rank, g->dims, g->strides);
    return true;
}

/* Whether Concat node cat, reading dn's value first along the channels
 * (the fusion pass's concat_passes_norm), can leave its normalisation to
 * the one convolution that reads the Concat's result: that layer's kernel
 * normalises the leading channels as it loads them. */
static bool concat_takes_norm(const sg_cuda_plan *p, const sg_node *cat, const cuda_deferred_norm *dn)
{
    int32_t rd = cuda_single_reader(p, cat->outputs[0]);
    cuda_deferred_norm part = *dn;
    part.value = cat->outputs[0];
    sgk_view g;
    return rd >= 0 && concat_geometry(p, cat, dn->raw, &g) && cuda_conv_mma_takes_norm(p, &p->g->nodes[rd], &part, &g);
}

/* Whether every reader of dn's value (the norm's result, held as tensor
 * dn->raw) applies the normalisation as it reads it. The fusion pass said
 * whether the graph allows it (cuda_norm_defers: convolutions, kernel ==
 * stride ConvTransposes, max pools and Concats read by a convolution, no
 * graph output); here each reader that is not fused yet is asked whether
 * its kernel takes it over the tensors the plan holds. */
static bool deferred_takers(const sg_cuda_plan *p, const sg_node *norm, const cuda_deferred_norm *dn)
{
    if (!cuda_norm_defers(p, norm))
        return false;
    sgk_view xg = cuda_geometry_view(p, dn->raw);
    int32_t n_readers;
    const int32_t *reader = cuda_readers(p, dn->value, &n_readers);
    for (int32_t k = 0; k < n_readers; k++) {
        int32_t i = reader[k];
        const sg_node *r = &p->g->nodes[i];
        if (p->fused[i])
            return false;
        bool takes = false;
        switch (r->op) {
        case SG_OP_CONV:
            takes = cuda_conv_small_takes_norm(p, r, dn) || cuda_conv_mma_takes_norm(p, r, dn, &xg);
            break;
        case SG_OP_CONV_TRANSPOSE:
            takes = cuda_conv_upsample_takes_norm(p, r, dn);
            break;
        case SG_OP_MAX_POOL:
            takes = cuda_pool_takes_norm(p, r, dn);
            break;
        case SG_OP_CONCAT:
            takes = concat_takes_norm(p, r, dn);
            break;
        default:
            break;
        }
        if (!takes)
            return false;
    }
    return n_readers > 0;
}

/* Applying a deferred normalisation (cuda_deferred_norm_apply) -------------------- */

typedef struct apply_params {
    sgk_act act;
    float act_alpha;
    int64_t c_at, c_len;
} apply_params;

/* args: raw, ab, y */
static sg_status apply_run(const cuda_step *s, cuda_run *r)
{
    const apply_params *ap = s->params;
    sgk_view x = cuda_view(r, s->args[0]), y = cuda_view(r, s->args[2]);
    return sgk_norm_apply_ab(r->stream, &y, &x, r->ptr[s->args[1]], ap->c_at, ap->c_len, ap->act, ap->act_alpha);
}

sg_status cuda_deferred_norm_apply(sg_cuda_plan *p, int32_t value)
{
    int32_t i = cuda_deferred_norm_index(p, value);
    if (i < 0)
        return SEGRT_OK;
    cuda_deferred_norm d = p->deferred[i];
    p->deferred[i].value = -1; /* readers built from now on see the normalised tensor */
    const cuda_tensor *raw = &p->tensors[d.raw];
    int32_t y;
    SG_TRY(cuda_tensor_new(p, raw->dtype, raw->rank, raw->dims, cuda_dense_layout(p, d.raw), &y));
    apply_params *ap = sg_malloc(sizeof *ap);
    if (!ap)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    *ap = (apply_params){d.act, d.act_alpha, d.c_at, d.c_len};
    int32_t args[3] = {d.raw, d.ab, y};
    cuda_step *st;
    SG_TRY(cuda_step_new(p, d.node, "segrt norm apply", apply_run, args, 3, 1, ap, NULL, &st));
    st->any_view = 1 | 4; /* x and y through their views (y may become a Concat's slice) */
    cuda_value_set(p, value, y);
    return SEGRT_OK;
}

static sg_status build_group_norm(sg_cuda_plan *p, const sg_node *n)
{
    if (n->n_inputs < 3 || n->inputs[0] < 0 || n->inputs[1] < 0 || n->inputs[2] < 0 || n->n_outputs < 1 ||
        n->outputs[0] < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs X, scale, B and an output");
    const sg_value *xv = &p->g->values[n->inputs[0]];
    int32_t rank = xv->shape.rank;
    if (!sg_dtype_is_float(xv->dtype))
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%s input", segrt_dtype_name(xv->dtype));
    if (rank < 2)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input must have rank >= 2");
    int64_t c = xv->shape.d[1].size, groups = c;
    if (n->op == SG_OP_GROUP_NORMALIZATION) {
        groups = sg_attr_int(n, "num_groups", 0);
        if (!sg_attr_find(n, "num_groups") || groups < 1 || c % groups != 0)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                 "num_groups (%lld) must be >= 1 and divide the %lld channels", (long long)groups,
                                 (long long)c);
    }
    SG_TRY(gn_param_ok(p, n, 1, c, groups));
    SG_TRY(gn_param_ok(p, n, 2, c, groups));

    gn_params gp;
    memset(&gp, 0, sizeof gp);
    gp.groups = groups;
    gp.eps = sg_attr_float(n, "epsilon", 1e-5f);
    gp.act = SGK_ACT_NONE;
    /* One kernel where the grid fits (see sgk_group_norm); disabling
     * norm-one-pass keeps the three. */
    if (!cuda_off(p, SG_KERNEL_NORM_ONE_PASS))
        SG_TRY(cuda_sm_count(p, &gp.one_pass_sms));
    gp.one_pass_smem = p->smem_limit;
    /* A Relu or LeakyRelu that alone reads the result is applied before
     * the store: the activation is not written and read back. */
    int32_t out_value = n->outputs[0];
    int32_t reader = cuda_norm_fused_act(p, n, &gp.act, &gp.act_alpha);
    const sg_node *fuse = reader >= 0 ? &p->g->nodes[reader] : NULL;

    int32_t args[4];
    SG_TRY(cuda_value_as(p, n->inputs[0], SEGRT_DTYPE_UNDEFINED, CUDA_LAYOUT_ANY, &args[0]));
    SG_TRY(gn_param(p, n, 1, c, &args[1]));
    SG_TRY(gn_param(p, n, 2, c, &args[2]));
    const cuda_tile_stats *ts = cuda_tile_stats_find(p, args[0]);
    if (ts) {
        gp.from_stats = true;
        gp.grid = ts->grid;
    }
    /* With the producer's statistics, and readers that all normalise x as
     * they read it (deferred_takers): this node only combines the
     * statistics into (mean, s, b), so x is not read and written once
     * more. Disabling norm-prologue keeps the pass. */
    int32_t result = fuse ? fuse->outputs[0] : out_value;
    cuda_deferred_norm dn = {result, args[0], -1, gp.act, gp.act_alpha, 0, c, n};
    if (ts && !cuda_off(p, SG_KERNEL_NORM_PROLOGUE) && deferred_takers(p, n, &dn)) {
        int64_t abn = xv->shape.d[0].size * c * 4;
        SG_TRY(cuda_tensor_new(p, SEGRT_DTYPE_FLOAT32, 1, &abn, CUDA_LAYOUT_PLAIN, &dn.ab));
        gn_params *params = sg_malloc(sizeof *params);
        if (!params)
            return SEGRT_ERROR_OUT_OF_MEMORY;
        *params = gp;
        int32_t aargs[5] = {args[0], args[1], args[2], ts->part, dn.ab};
        cuda_step *st;
        SG_TRY(cuda_step_new(p, n, "segrt norm stats only", gn_ab_run, aargs, 5, 1, params, NULL, &st));
        st->any_view = 1; /* x: its dims only */
        if (fuse)
            cuda_mark_fused(p, reader);
        cuda_value_set(p, result, args[0]);
        return cuda_deferred_norm_put(p, &dn);
    }
    sg_dtype yt = fuse ? cuda_out_dtype(p, fuse, fuse->outputs[0]) : cuda_out_dtype(p, n, out_value);
    SG_TRY(cuda_output_new(p, n, 0, yt, cuda_dense_layout(p, args[0]), &args[3]));
    if (fuse) {
        cuda_mark_fused(p, reader);
        cuda_value_set(p, fuse->outputs[0], args[3]);
    }
    sgk_view xg = cuda_geometry_view(p, args[0]);
    /* Where the producer wrote x's per-tile statistics (a convolution's
     * epilogue, ts), only the combination and the application run. */
    size_t scratch = ts ? sgk_group_norm_partials_scratch(&xg) : sgk_group_norm_scratch(&xg, groups);
    gn_params *params = sg_malloc(sizeof *params);
    if (!params)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    *params = gp;
    cuda_step *st;
    bool group = n->op == SG_OP_GROUP_NORMALIZATION;
    if (ts) {
        /* (Profiles print 26 characters of the name.) */
        int32_t pargs[5] = {args[0], args[1], args[2], ts->part, args[3]};
        SG_TRY(cuda_step_new(p, n, "segrt norm from stats", gn_run, pargs, 5, 1, params, NULL, &st));
        st->any_view = (uint64_t)1 << 4; /* y */
    } else {
        SG_TRY(cuda_step_new(p, n, group ? "segrt group norm" : "segrt instance norm", gn_run, args, 4, 1, params,
                             NULL, &st));
        st->any_view = (uint64_t)1 << 3; /* y; the scratch was sized from x's strides */
    }
    st->scratch_bytes = scratch;
    return SEGRT_OK;
}

/* Layer normalisation ------------------------------------------------------------ */

typedef struct ln_params {
    int32_t axis;
    float eps;
    int32_t rank;
    bool has_bias, has_mean, has_inv;
} ln_params;

static sg_status ln_run(const cuda_step *s, cuda_run *r)
{
    const ln_params *lp = s->params;
    /* args: x, scale, [bias], y, [mean], [inv_std] */
    int32_t k = 0;
    sgk_view x = cuda_view(r, s->args[k++]);
    sgk_view scale = cuda_view_bcast(r, s->args[k++], x.rank, x.dims);
    sgk_view none;
    memset(&none, 0, sizeof none);
    sgk_view bias = lp->has_bias ? cuda_view_bcast(r, s->args[k++], x.rank, x.dims) : none;
    sgk_view y = cuda_view(r, s->args[k++]);
    sgk_view mean = lp->has_mean ? cuda_view(r, s->args[k++]) : none;
    sgk_view inv = lp->has_inv ? cuda_view(r, s->args[k++]) : none;
    return sgk_layer_norm(r->stream, &y, &mean, &inv, &x, &scale, lp->has_bias ? &bias : &none, lp->axis, lp->eps);
}

static sg_status build_layer_norm(sg_cuda_plan *p, const sg_node *n)
{
    if (n->n_inputs < 2 || n->inputs[0] < 0 || n->inputs[1] < 0 || n->n_outputs < 1 || n->outputs[0] < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs X, Scale and an output");
    const sg_value *xv = &p->g->values[n->inputs[0]];
    int32_t rank = xv->shape.rank;
    if (!sg_dtype_is_float(xv->dtype))
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%s input", segrt_dtype_name(xv->dtype));
    if (rank < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input must have rank >= 1");
    ln_params lp;
    memset(&lp, 0, sizeof lp);
    lp.rank = rank;
    SG_TRY(sg_infer_axis(n, sg_attr_int(n, "axis", -1), rank, &lp.axis));
    lp.eps = sg_attr_float(n, "epsilon", 1e-5f);
    lp.has_bias = n->n_inputs > 2 && n->inputs[2] >= 0;
    lp.has_mean = n->n_outputs > 1 && n->outputs[1] >= 0;
    lp.has_inv = n->n_outputs > 2 && n->outputs[2] >= 0;
    for (int32_t i = 1; i <= (lp.has_bias ? 2 : 1); i++) {
        const sg_value *v = &p->g->values[n->inputs[i]];
        if (!sg_dtype_is_float(v->dtype))
            return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%s of dtype %s", i == 1 ? "scale" : "bias",
                                 segrt_dtype_name(v->dtype));
        if (v->shape.rank > rank)
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "%s has a higher rank than the input",
                                 i == 1 ? "scale" : "bias");
    }
    int32_t args[6], k = 0;
    SG_TRY(cuda_value_as(p, n->inputs[0], SEGRT_DTYPE_UNDEFINED, CUDA_LAYOUT_ANY, &args[k]));
    int32_t x = args[k++];
    /* Scale and bias in float32 (the kernel reads any dtype, but a
     * constant would otherwise be stored at the activations' precision). */
    SG_TRY(cuda_value_as(p, n->inputs[1], SEGRT_DTYPE_FLOAT32, CUDA_LAYOUT_PLAIN, &args[k++]));
    if (lp.has_bias)
        SG_TRY(cuda_value_as(p, n->inputs[2], SEGRT_DTYPE_FLOAT32, CUDA_LAYOUT_PLAIN, &args[k++]));
    SG_TRY(cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), cuda_dense_layout(p, x), &args[k++]));
    /* Mean and InvStdDev are float32 whatever stash_type says: the
     * statistics are computed in float32. */
    if (lp.has_mean)
        SG_TRY(cuda_output_new(p, n, 1, SEGRT_DTYPE_FLOAT32, CUDA_LAYOUT_PLAIN, &args[k++]));
    if (lp.has_inv)
        SG_TRY(cuda_output_new(p, n, 2, SEGRT_DTYPE_FLOAT32, CUDA_LAYOUT_PLAIN, &args[k++]));
    int32_t n_out = 1 + lp.has_mean + lp.has_inv;
    ln_params *params = sg_malloc(sizeof *params);
    if (!params)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    *params = lp;
    cuda_step *st;
    return cuda_step_new(p, n, "segrt layer norm", ln_run, args, k, n_out, params, NULL, &st);
}

sg_status cuda_build_norm(sg_cuda_plan *p, const sg_node *n)
{
    switch (n->op) {
    case SG_OP_INSTANCE_NORMALIZATION:
    case SG_OP_GROUP_NORMALIZATION: return build_group_norm(p, n);
    case SG_OP_LAYER_NORMALIZATION: return build_layer_norm(p, n);
    default: return sg_node_error(n, SEGRT_ERROR_INTERNAL, "not a normalisation");
    }
}
