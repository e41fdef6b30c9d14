/* Shape inference for convolutions and pools. */
#include "graph/infer_util.h"

/* The rank of a conv or pool whose data input has unknown rank: from the
 * weight, or else from kernel_shape; -1 when neither says. */
static int32_t guess_rank(const sg_node *n, const sg_shape *x, const sg_shape *w)
{
    if (x->rank >= 0)
        return x->rank;
    if (w && w->rank >= 0)
        return w->rank;
    int32_t nk;
    sg_attr_ints(n, "kernel_shape", &nk);
    return nk > 0 && nk <= SEGRT_MAX_RANK - 2 ? nk + 2 : -1;
}

static sg_status want_spatial_rank(const sg_graph *g, const sg_node *n, const sg_shape *x,
                                   int32_t rank)
{
    if (rank >= 3)
        return SEGRT_OK;
    char buf[SG_IU_SHAPE_BUF];
    return sg_node_error(
        n, SEGRT_ERROR_SHAPE, "input `%s` is %s; %s needs rank 3 or more (N x C x D1 ...)",
        sg_iu_name(g, n, 0), sg_shape_format(g, x, buf, sizeof buf), sg_op_name(n->op));
}

/* Conv and ConvTranspose: the weight has the data's rank. */
static sg_status check_weight_rank(const sg_graph *g, const sg_node *n, const sg_shape *x,
                                   const sg_shape *w)
{
    if (x->rank < 0 || w->rank < 0 || x->rank == w->rank)
        return SEGRT_OK;
    char a[SG_IU_SHAPE_BUF], b[SG_IU_SHAPE_BUF];
    return sg_node_error(n, SEGRT_ERROR_SHAPE,
                         "input `%s` (%s) has rank %d but weight `%s` (%s) has rank %d",
                         sg_iu_name(g, n, 0), sg_shape_format(g, x, a, sizeof a), x->rank,
                         sg_iu_name(g, n, 1), sg_shape_format(g, w, b, sizeof b), w->rank);
}

/* The optional bias is 1-D with one value per output channel; where the
 * weight left that count unknown, the bias supplies it. */
static sg_status check_bias(const sg_graph *g, const sg_node *n, sg_dim *out_channels)
{
    if (!sg_iu_has_input(n, 2))
        return SEGRT_OK;
    SG_TRY(sg_iu_same_dtype(g, n, 0, 2));
    sg_shape b;
    SG_TRY(sg_iu_shape(g, n, 2, &b));
    if (b.rank < 0)
        return SEGRT_OK;
    char buf[SG_IU_SHAPE_BUF];
    if (b.rank != 1)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "bias `%s` is %s; it must be 1-D",
                             sg_iu_name(g, n, 2), sg_shape_format(g, &b, buf, sizeof buf));
    if (b.d[0].size >= 0 && out_channels->size >= 0 && b.d[0].size != out_channels->size)
        return sg_node_error(
            n, SEGRT_ERROR_SHAPE, "bias `%s` has %lld values but the output has %lld channels",
            sg_iu_name(g, n, 2), (long long)b.d[0].size, (long long)out_channels->size);
    if (out_channels->size < 0 && b.d[0].size >= 0)
        *out_channels = b.d[0];
    return SEGRT_OK;
}

static sg_status read_group(const sg_node *n, int64_t *group)
{
    *group = sg_attr_int(n, "group", 1);
    if (*group < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "group is %lld; must be 1 or more",
                             (long long)*group);
    return SEGRT_OK;
}

static sg_dtype data_dtype(const sg_graph *g, const sg_node *n)
{
    sg_dtype t = sg_iu_dtype(g, n, 0);
    return t != SEGRT_DTYPE_UNDEFINED ? t : sg_iu_dtype(g, n, 1);
}

sg_status sg_infer_CONV(sg_graph *g, sg_node *n)
{
    sg_shape x, w;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    SG_TRY(sg_iu_shape(g, n, 1, &w));
    SG_TRY(sg_iu_same_dtype(g, n, 0, 1));
    SG_TRY(check_weight_rank(g, n, &x, &w));
    int32_t rank = guess_rank(n, &x, &w);
    if (rank < 0) {
        sg_shape u = sg_shape_unknown();
        return sg_infer_set_output(g, n, 0, data_dtype(g, n), &u);
    }
    SG_TRY(want_spatial_rank(g, n, &x, rank));
    sg_conv_attrs a;
    const char *xname = sg_iu_name(g, n, 0), *wname = sg_iu_name(g, n, 1);
    SG_TRY(sg_conv_attrs_read(g, n, rank - 2, &w, wname, &a));
    int64_t group;
    SG_TRY(read_group(n, &group));

    sg_dim m = w.rank >= 0 ? w.d[0] : sg_dim_unknown();
    if (m.size >= 0 && m.size % group != 0)
        return sg_node_error(
            n, SEGRT_ERROR_INVALID_MODEL,
            "weight `%s` has %lld output channels, which group %lld does not divide", wname,
            (long long)m.size, (long long)group);
    int64_t c = x.rank >= 0 ? x.d[1].size : -1;
    int64_t per_group = w.rank >= 0 ? w.d[1].size : -1;
    if (c >= 0 && per_group >= 0) {
        int64_t want;
        if (!sg_mul_i64(per_group, group, &want) || want != c) {
            if (group == 1)
                return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                     "input `%s` has %lld channels but weight `%s` expects %lld",
                                     xname, (long long)c, wname, (long long)per_group);
            return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                 "input `%s` has %lld channels but weight `%s` expects %lld "
                                 "(%lld per group x %lld groups)",
                                 xname, (long long)c, wname, (long long)want, (long long)per_group,
                                 (long long)group);
        }
    }
    SG_TRY(check_bias(g, n, &m));

    sg_shape out = sg_shape_unknown();
    out.rank = rank;
    out.d[0] = x.rank >= 0 ? x.d[0] : sg_dim_unknown();
    out.d[1] = m;
    for (int32_t i = 0; i < rank - 2; i++) {
        sg_dim in = x.rank >= 0 ? x.d[2 + i] : sg_dim_unknown();
        SG_TRY(sg_conv_out_dim(n, &a, i, in, xname, &out.d[2 + i]));
    }
    return sg_infer_set_output(g, n, 0, data_dtype(g, n), &out);
}

sg_status sg_infer_CONV_TRANSPOSE(sg_graph *g, sg_node *n)
{
    sg_shape x, w;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    SG_TRY(sg_iu_shape(g, n, 1, &w));
    SG_TRY(sg_iu_same_dtype(g, n, 0, 1));
    SG_TRY(check_weight_rank(g, n, &x, &w));
    int32_t rank = guess_rank(n, &x, &w);
    if (rank < 0) {
        sg_shape u = sg_shape_unknown();
        return sg_infer_set_output(g, n, 0, data_dtype(g, n), &u);
    }
    SG_TRY(want_spatial_rank(g, n, &x, rank));
    int32_t spatial = rank - 2;
    sg_conv_attrs a;
    const char *xname = sg_iu_name(g, n, 0), *wname = sg_iu_name(g, n, 1);
    SG_TRY(sg_conv_attrs_read(g, n, spatial, &w, wname, &a));
    int64_t group;
    SG_TRY(read_group(n, &group));
    int64_t output_padding[SEGRT_MAX_RANK];
    SG_TRY(sg_iu_attr_ints(n, "output_padding", spatial, 0, 0, output_padding, NULL));

    /* W is [C, M / group, k...]: its first dim must be the input's channels. */
    int64_t c = x.rank >= 0 ? x.d[1].size : -1;
    int64_t wc = w.rank >= 0 ? w.d[0].size : -1;
    if (c >= 0 && wc >= 0 && c != wc)
        return sg_node_error(n, SEGRT_ERROR_SHAPE,
                             "input `%s` has %lld channels but weight `%s` expects %lld", xname,
                             (long long)c, wname, (long long)wc);
    if (wc >= 0 && wc % group != 0)
        return sg_node_error(
            n, SEGRT_ERROR_INVALID_MODEL,
            "weight `%s` has %lld input channels, which group %lld does not divide", wname,
            (long long)wc, (long long)group);
    sg_dim m = sg_dim_unknown();
    if (w.rank >= 0 && w.d[1].size >= 0) {
        int64_t mm;
        if (!sg_mul_i64(w.d[1].size, group, &mm))
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "output channels overflow");
        m = sg_dim_of(mm);
    } else if (w.rank >= 0 && group == 1) {
        m = w.d[1];
    }
    SG_TRY(check_bias(g, n, &m));

    sg_shape out = sg_shape_unknown();
    out.rank = rank;
    out.d[0] = x.rank >= 0 ? x.d[0] : sg_dim_unknown();
    out.d[1] = m;
    int32_t n_os;
    const int64_t *os = sg_attr_ints(n, "output_shape", &n_os);
    if (os) {
        /* The spec gives spatial dims only; some exporters give all of them. */
        if (n_os != spatial && n_os != rank)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                 "output_shape has %d values; expected %d (one per spatial axis)",
                                 n_os, spatial);
        for (int32_t i = 0; i < spatial; i++) {
            int64_t v = os[n_os - spatial + i];
            if (v < 0)
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                     "output_shape[%d] is negative (%lld)", i, (long long)v);
            SG_TRY(sg_infer_check_dim(n, v, "an output_shape value"));
            out.d[2 + i] = sg_dim_of(v);
        }
    } else {
        for (int32_t i = 0; i < spatial; i++) {
            sg_dim in = x.rank >= 0 ? x.d[2 + i] : sg_dim_unknown();
            SG_TRY(sg_conv_transpose_out_dim(n, &a, i, in, output_padding[i], &out.d[2 + i]));
        }
    }
    return sg_infer_set_output(g, n, 0, data_dtype(g, n), &out);
}

static sg_status infer_pool(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    sg_dtype t = sg_iu_dtype(g, n, 0);
    SG_TRY(sg_iu_want_numeric(g, n, 0));
    int32_t rank = guess_rank(n, &x, NULL);
    sg_shape out = sg_shape_unknown();
    if (rank >= 0) {
        SG_TRY(want_spatial_rank(g, n, &x, rank));
        sg_conv_attrs a;
        SG_TRY(sg_conv_attrs_read(g, n, rank - 2, NULL, NULL, &a));
        int64_t storage_order = sg_attr_int(n, "storage_order", 0);
        if (storage_order != 0 && storage_order != 1)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                 "storage_order is %lld; must be 0 or 1", (long long)storage_order);
        out.rank = rank;
        for (int32_t i = 0; i < 2; i++)
            out.d[i] = x.rank >= 0 ? x.d[i] : sg_dim_unknown();
        for (int32_t i = 0; i < rank - 2; i++) {
            sg_dim in = x.rank >= 0 ? x.d[2 + i] : sg_dim_unknown();
            SG_TRY(sg_conv_out_dim(n, &a, i, in, sg_iu_name(g, n, 0), &out.d[2 + i]));
        }
    }
    SG_TRY(sg_infer_set_output(g, n, 0, t, &out));
    return sg_infer_set_output(g, n, 1, SEGRT_DTYPE_INT64, &out);
}

sg_status sg_infer_MAX_POOL(sg_graph *g, sg_node *n) { return infer_pool(g, n); }

sg_status sg_infer_AVERAGE_POOL(sg_graph *g, sg_node *n) { return infer_pool(g, n); }

static sg_status infer_global_pool(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    SG_TRY(sg_iu_want_numeric(g, n, 0));
    if (x.rank >= 0 && x.rank < 2) {
        char buf[SG_IU_SHAPE_BUF];
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "input `%s` is %s; %s needs N x C x D1 ...",
                             sg_iu_name(g, n, 0), sg_shape_format(g, &x, buf, sizeof buf),
                             sg_op_name(n->op));
    }
    sg_shape out = x;
    for (int32_t i = 2; i < x.rank; i++)
        out.d[i] = sg_dim_of(1);
    return sg_infer_set_output(g, n, 0, sg_iu_dtype(g, n, 0), &out);
}

sg_status sg_infer_GLOBAL_AVERAGE_POOL(sg_graph *g, sg_node *n) { return infer_global_pool(g, n); }

sg_status sg_infer_GLOBAL_MAX_POOL(sg_graph *g, sg_node *n) { return infer_global_pool(g, n); }
