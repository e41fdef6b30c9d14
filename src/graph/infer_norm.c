/* Shape inference for the normalisations. */
#include "graph/infer_util.h"

/* Per-channel parameter input i (named what in messages) must be 1-D with
 * *c values; where the channel count is not known yet it is learnt here. */
static sg_status check_channel_param(const sg_graph *g, const sg_node *n, int32_t i,
                                     const char *what, sg_dim *c)
{
    sg_shape p;
    SG_TRY(sg_iu_shape(g, n, i, &p));
    if (p.rank < 0)
        return SEGRT_OK;
    char buf[SG_IU_SHAPE_BUF];
    if (p.rank != 1)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "%s `%s` is %s; it must be 1-D", what,
                             sg_iu_name(g, n, i), sg_shape_format(g, &p, buf, sizeof buf));
    if (p.d[0].size >= 0 && c->size >= 0 && p.d[0].size != c->size)
        return sg_node_error(
            n, SEGRT_ERROR_SHAPE, "%s `%s` has %lld values but input `%s` has %lld channels", what,
            sg_iu_name(g, n, i), (long long)p.d[0].size, sg_iu_name(g, n, 0), (long long)c->size);
    if (c->size < 0 && p.d[0].size >= 0)
        *c = p.d[0];
    return SEGRT_OK;
}

static sg_status want_rank_at_least(const sg_graph *g, const sg_node *n, const sg_shape *x,
                                    int32_t min)
{
    if (x->rank < 0 || x->rank >= min)
        return SEGRT_OK;
    char buf[SG_IU_SHAPE_BUF];
    return sg_node_error(n, SEGRT_ERROR_SHAPE, "input `%s` is %s; %s needs rank %d or more",
                         sg_iu_name(g, n, 0), sg_shape_format(g, x, buf, sizeof buf),
                         sg_op_name(n->op), min);
}

sg_status sg_infer_BATCH_NORMALIZATION(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    SG_TRY(want_rank_at_least(g, n, &x, 1));
    /* Type constraints loosened over versions: one T up to opset 13; X,
     * scale and B apart from mean and var in 14; X apart from scale and B
     * apart from mean and var from 15. */
    if (g->opset <= 14) {
        SG_TRY(sg_iu_same_dtype(g, n, 0, 1));
        SG_TRY(sg_iu_same_dtype(g, n, 0, 2));
    }
    if (g->opset <= 13)
        SG_TRY(sg_iu_same_dtype(g, n, 0, 3));
    SG_TRY(sg_iu_same_dtype(g, n, 1, 2));
    SG_TRY(sg_iu_same_dtype(g, n, 3, 4));
    int64_t training = sg_attr_int(n, "training_mode", 0);
    if (training != 0 && training != 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "training_mode is %lld; must be 0 or 1",
                             (long long)training);

    /* A 1-D input is N values of one channel. */
    sg_dim c = x.rank >= 2 ? x.d[1] : x.rank == 1 ? sg_dim_of(1) : sg_dim_unknown();
    static const char *const what[] = {"", "scale", "bias", "mean", "variance"};
    for (int32_t i = 1; i <= 4; i++)
        SG_TRY(check_channel_param(g, n, i, what[i], &c));
    SG_TRY(sg_infer_set_output(g, n, 0, sg_iu_dtype(g, n, 0), &x));
    sg_shape stats = sg_shape_unknown();
    stats.rank = 1;
    stats.d[0] = c;
    SG_TRY(sg_infer_set_output(g, n, 1, sg_iu_dtype(g, n, 3), &stats));
    return sg_infer_set_output(g, n, 2, sg_iu_dtype(g, n, 4), &stats);
}

sg_status sg_infer_INSTANCE_NORMALIZATION(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    SG_TRY(want_rank_at_least(g, n, &x, 2));
    SG_TRY(sg_iu_same_dtype(g, n, 0, 1));
    SG_TRY(sg_iu_same_dtype(g, n, 0, 2));
    sg_dim c = x.rank >= 2 ? x.d[1] : sg_dim_unknown();
    SG_TRY(check_channel_param(g, n, 1, "scale", &c));
    SG_TRY(check_channel_param(g, n, 2, "bias", &c));
    return sg_infer_set_output(g, n, 0, sg_iu_dtype(g, n, 0), &x);
}

sg_status sg_infer_GROUP_NORMALIZATION(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    SG_TRY(want_rank_at_least(g, n, &x, 2));
    SG_TRY(sg_iu_same_dtype(g, n, 0, 1));
    SG_TRY(sg_iu_same_dtype(g, n, 0, 2));
    const sg_attr *ga = sg_attr_find(n, "num_groups");
    if (!ga || ga->kind != SG_ATTR_INT)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs the int attribute `num_groups`");
    int64_t groups = ga->i;
    if (groups < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "num_groups is %lld; must be 1 or more",
                             (long long)groups);
    int64_t c = x.rank >= 2 ? x.d[1].size : -1;
    if (c >= 0 && c % groups != 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                             "num_groups %lld does not divide the %lld channels of input `%s`",
                             (long long)groups, (long long)c, sg_iu_name(g, n, 0));
    /* Scale and bias are per group before opset 21 and per channel from
     * it; exporters mix the two up, so either length is accepted. */
    for (int32_t i = 1; i <= 2; i++) {
        sg_shape p;
        SG_TRY(sg_iu_shape(g, n, i, &p));
        if (p.rank < 0)
            continue;
        char buf[SG_IU_SHAPE_BUF];
        const char *what = i == 1 ? "scale" : "bias";
        if (p.rank != 1)
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "%s `%s` is %s; it must be 1-D", what,
                                 sg_iu_name(g, n, i), sg_shape_format(g, &p, buf, sizeof buf));
        int64_t len = p.d[0].size;
        if (len >= 0 && len != groups && (c < 0 || len != c)) {
            if (c >= 0)
                return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                     "%s `%s` has %lld values; expected %lld (num_groups) or "
                                     "%lld (channels of `%s`)",
                                     what, sg_iu_name(g, n, i), (long long)len, (long long)groups,
                                     (long long)c, sg_iu_name(g, n, 0));
            if (len % groups != 0)
                return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                     "%s `%s` has %lld values, neither num_groups (%lld) nor a "
                                     "channel count it divides",
                                     what, sg_iu_name(g, n, i), (long long)len, (long long)groups);
        }
    }
    return sg_infer_set_output(g, n, 0, sg_iu_dtype(g, n, 0), &x);
}

/* Scale or bias of LayerNormalization must broadcast, one way, to the
 * normalised dims x[axis:]. */
static sg_status check_ln_param(const sg_graph *g, const sg_node *n, int32_t i, const sg_shape *x,
                                int32_t axis)
{
    sg_shape p;
    SG_TRY(sg_iu_shape(g, n, i, &p));
    if (p.rank < 0 || x->rank < 0)
        return SEGRT_OK;
    bool ok = p.rank <= x->rank - axis;
    for (int32_t k = 0; ok && k < p.rank; k++) {
        int64_t pd = p.d[p.rank - 1 - k].size, xd = x->d[x->rank - 1 - k].size;
        ok = pd < 0 || pd == 1 || xd < 0 || pd == xd;
    }
    if (ok)
        return SEGRT_OK;
    char a[SG_IU_SHAPE_BUF], b[SG_IU_SHAPE_BUF];
    return sg_node_error(
        n, SEGRT_ERROR_SHAPE,
        "%s `%s` (%s) does not broadcast to the dims from axis %d of input `%s` (%s)",
        i == 1 ? "scale" : "bias", sg_iu_name(g, n, i), sg_shape_format(g, &p, a, sizeof a), axis,
        sg_iu_name(g, n, 0), sg_shape_format(g, x, b, sizeof b));
}

/* RMSNormalization (opset 23): LayerNormalization without the mean and
 * the bias, one output. */
sg_status sg_infer_RMS_NORMALIZATION(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    SG_TRY(sg_iu_same_dtype(g, n, 0, 1));
    int64_t stash = sg_attr_int(n, "stash_type", SEGRT_DTYPE_FLOAT32);
    if (stash < 0 || stash > 64 || !sg_dtype_is_float((sg_dtype)stash))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "stash_type %lld is not a floating-point type",
                             (long long)stash);
    if (x.rank >= 0) {
        int32_t axis;
        SG_TRY(sg_infer_axis(n, sg_attr_int(n, "axis", -1), x.rank, &axis));
        SG_TRY(check_ln_param(g, n, 1, &x, axis));
    }
    return sg_infer_set_output(g, n, 0, sg_iu_dtype(g, n, 0), &x);
}

sg_status sg_infer_LAYER_NORMALIZATION(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    SG_TRY(sg_iu_same_dtype(g, n, 0, 1));
    SG_TRY(sg_iu_same_dtype(g, n, 0, 2));
    int64_t stash = sg_attr_int(n, "stash_type", SEGRT_DTYPE_FLOAT32);
    if (stash < 0 || stash > 64 || !sg_dtype_is_float((sg_dtype)stash))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                             "stash_type %lld is not a floating-point type", (long long)stash);
    sg_shape stats = sg_shape_unknown();
    if (x.rank >= 0) {
        int32_t axis;
        SG_TRY(sg_infer_axis(n, sg_attr_int(n, "axis", -1), x.rank, &axis));
        SG_TRY(check_ln_param(g, n, 1, &x, axis));
        SG_TRY(check_ln_param(g, n, 2, &x, axis));
        stats = x;
        for (int32_t i = axis; i < x.rank; i++)
            stats.d[i] = sg_dim_of(1);
    }
    SG_TRY(sg_infer_set_output(g, n, 0, sg_iu_dtype(g, n, 0), &x));
    SG_TRY(sg_infer_set_output(g, n, 1, (sg_dtype)stash, &stats));
    return sg_infer_set_output(g, n, 2, (sg_dtype)stash, &stats);
}
