/* Shape inference for indexing and replicating operators: Expand, Tile,
 * Gather, ScatterND, DepthToSpace, SpaceToDepth, GatherElements,
 * ScatterElements, GatherND, CumSum, Trilu, OneHot, TopK and NonZero. */
#include "graph/infer_util.h"

#include <string.h>

sg_status sg_infer_EXPAND(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    sg_dtype t = sg_iu_dtype(g, n, 0);
    int64_t dims[SG_IU_CONST_CAP];
    int32_t count;
    SG_TRY(sg_infer_const_ints(g, n, 1, dims, SG_IU_CONST_CAP, &count));
    if (count < 0) {
        /* Only the rank (the larger of the two) and input dims above 1,
         * which the shape must leave alone, are knowable. */
        int64_t k = sg_iu_static_len(g, n, 1);
        sg_shape out = sg_shape_unknown();
        if (k >= 0 && x.rank >= 0) {
            int64_t rank = k > x.rank ? k : x.rank;
            SG_TRY(sg_iu_rank_fits(n, rank));
            out = sg_iu_unknown_dims((int32_t)rank);
            for (int32_t i = 0; i < x.rank; i++)
                if (x.d[i].size > 1)
                    out.d[rank - x.rank + i] = x.d[i];
        }
        return sg_infer_set_output(g, n, 0, t, &out);
    }
    SG_TRY(sg_iu_rank_fits(n, count));
    for (int32_t i = 0; i < count; i++)
        if (dims[i] < 0)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "the shape has %lld at index %d",
                                 (long long)dims[i], i);
    sg_shape s = sg_shape_of_dims(dims, count), out;
    SG_TRY(sg_iu_broadcast(g, n, 0, &x, 1, &s, &out));
    return sg_infer_set_output(g, n, 0, t, &out);
}

sg_status sg_infer_TILE(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    sg_dtype t = sg_iu_dtype(g, n, 0);
    int64_t reps[SEGRT_MAX_RANK];
    int32_t count;
    SG_TRY(sg_infer_const_ints(g, n, 1, reps, SEGRT_MAX_RANK, &count));
    sg_shape out = sg_shape_unknown();
    if (x.rank < 0) {
        if (count >= 0)
            out = sg_iu_unknown_dims(count);
        return sg_infer_set_output(g, n, 0, t, &out);
    }
    if (count < 0) {
        out = sg_iu_unknown_dims(x.rank);
        return sg_infer_set_output(g, n, 0, t, &out);
    }
    if (count != x.rank) {
        char buf[SG_IU_SHAPE_BUF];
        return sg_node_error(n, SEGRT_ERROR_SHAPE,
                             "repeats `%s` has %d values but input `%s` (%s) has rank %d",
                             sg_iu_name(g, n, 1), count, sg_iu_name(g, n, 0),
                             sg_shape_format(g, &x, buf, sizeof buf), x.rank);
    }
    out = x;
    for (int32_t i = 0; i < count; i++) {
        if (reps[i] < 0)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "repeats[%d] is negative (%lld)", i,
                                 (long long)reps[i]);
        if (reps[i] == 0)
            out.d[i] = sg_dim_of(0);
        else if (x.d[i].size < 0)
            out.d[i] = reps[i] == 1 ? x.d[i] : sg_dim_unknown();
        else {
            int64_t o;
            if (!sg_mul_i64(x.d[i].size, reps[i], &o))
                return sg_node_error(n, SEGRT_ERROR_SHAPE, "tiled dim %d overflows", i);
            SG_TRY(sg_infer_check_dim(n, o, "a tiled dim"));
            out.d[i] = sg_dim_of(o);
        }
    }
    return sg_infer_set_output(g, n, 0, t, &out);
}

/* Gather, ScatterND ------------------------------------------------------------ */

sg_status sg_infer_GATHER(sg_graph *g, sg_node *n)
{
    sg_shape x, idx;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    SG_TRY(sg_iu_shape(g, n, 1, &idx));
    SG_TRY(sg_iu_want_index(g, n, 1));
    sg_dtype t = sg_iu_dtype(g, n, 0);
    sg_shape out = sg_shape_unknown();
    if (x.rank < 0)
        return sg_infer_set_output(g, n, 0, t, &out);
    int32_t axis;
    SG_TRY(sg_infer_axis(n, sg_attr_int(n, "axis", 0), x.rank, &axis));
    if (idx.rank < 0)
        return sg_infer_set_output(g, n, 0, t, &out);
    SG_TRY(sg_iu_rank_fits(n, (int64_t)x.rank - 1 + idx.rank));
    out = sg_iu_unknown_dims(0);
    for (int32_t i = 0; i < axis; i++)
        out.d[out.rank++] = x.d[i];
    for (int32_t i = 0; i < idx.rank; i++)
        out.d[out.rank++] = idx.d[i];
    for (int32_t i = axis + 1; i < x.rank; i++)
        out.d[out.rank++] = x.d[i];
    return sg_infer_set_output(g, n, 0, t, &out);
}

sg_status sg_infer_SCATTER_ND(sg_graph *g, sg_node *n)
{
    sg_shape x, idx, upd;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    SG_TRY(sg_iu_shape(g, n, 1, &idx));
    SG_TRY(sg_iu_shape(g, n, 2, &upd));
    SG_TRY(sg_iu_want_index(g, n, 1));
    SG_TRY(sg_iu_same_dtype(g, n, 0, 2));
    const char *red = sg_attr_string(n, "reduction", "none");
    if (strcmp(red, "none") != 0 && strcmp(red, "add") != 0 && strcmp(red, "mul") != 0 &&
        strcmp(red, "max") != 0 && strcmp(red, "min") != 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                             "reduction `%s` is not none, add, mul, max or min", red);
    /* updates must be indices.shape[:-1] + data.shape[k:], k = indices.shape[-1]. */
    char a[SG_IU_SHAPE_BUF], b[SG_IU_SHAPE_BUF], c[SG_IU_SHAPE_BUF];
    if (idx.rank == 0)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "indices `%s` must have rank 1 or more",
                             sg_iu_name(g, n, 1));
    if (x.rank >= 0 && idx.rank >= 1 && upd.rank >= 0 && idx.d[idx.rank - 1].size >= 0) {
        int64_t k = idx.d[idx.rank - 1].size;
        bool ok = k <= x.rank && upd.rank == idx.rank - 1 + x.rank - k;
        for (int32_t i = 0; ok && i < upd.rank; i++) {
            sg_dim want = i < idx.rank - 1 ? idx.d[i] : x.d[k + i - (idx.rank - 1)];
            ok = want.size < 0 || upd.d[i].size < 0 || want.size == upd.d[i].size;
        }
        if (!ok)
            return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                 "updates `%s` (%s) do not fit data `%s` (%s) indexed by `%s` (%s)",
                                 sg_iu_name(g, n, 2), sg_shape_format(g, &upd, a, sizeof a),
                                 sg_iu_name(g, n, 0), sg_shape_format(g, &x, b, sizeof b),
                                 sg_iu_name(g, n, 1), sg_shape_format(g, &idx, c, sizeof c));
    }
    return sg_infer_set_output(g, n, 0, sg_iu_dtype(g, n, 0), &x);
}

/* DepthToSpace, SpaceToDepth ----------------------------------------------------- */

static sg_status block_attrs(const sg_graph *g, const sg_node *n, const sg_shape *x, int64_t *b,
                             int64_t *bb)
{
    SG_TRY(sg_iu_required_int(n, "blocksize", b));
    if (*b < 1 || !sg_mul_i64(*b, *b, bb))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "blocksize is %lld", (long long)*b);
    if (x->rank >= 0 && x->rank != 4) {
        char buf[SG_IU_SHAPE_BUF];
        return sg_node_error(
            n, SEGRT_ERROR_SHAPE, "input `%s` is %s; %s needs rank 4 (N x C x H x W)",
            sg_iu_name(g, n, 0), sg_shape_format(g, x, buf, sizeof buf), sg_op_name(n->op));
    }
    return SEGRT_OK;
}

sg_status sg_infer_DEPTH_TO_SPACE(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    int64_t b, bb;
    SG_TRY(block_attrs(g, n, &x, &b, &bb));
    const char *mode = sg_attr_string(n, "mode", "DCR");
    if (strcmp(mode, "DCR") != 0 && strcmp(mode, "CRD") != 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "mode `%s` is not DCR or CRD", mode);
    sg_shape out = sg_iu_unknown_dims(4);
    if (x.rank == 4) {
        out.d[0] = x.d[0];
        int64_t c = x.d[1].size;
        if (c >= 0 && c % bb != 0)
            return sg_node_error(
                n, SEGRT_ERROR_SHAPE,
                "input `%s` has %lld channels, not a multiple of blocksize^2 = %lld",
                sg_iu_name(g, n, 0), (long long)c, (long long)bb);
        if (c >= 0)
            out.d[1] = sg_dim_of(c / bb);
        for (int32_t i = 2; i < 4; i++) {
            int64_t o;
            if (x.d[i].size < 0)
                out.d[i] = b == 1 ? x.d[i] : sg_dim_unknown();
            else if (!sg_mul_i64(x.d[i].size, b, &o))
                return sg_node_error(n, SEGRT_ERROR_SHAPE, "output dim %d overflows", i);
            else {
                SG_TRY(sg_infer_check_dim(n, o, "an output dim"));
                out.d[i] = sg_dim_of(o);
            }
        }
        if (b == 1)
            out.d[1] = x.d[1];
    }
    return sg_infer_set_output(g, n, 0, sg_iu_dtype(g, n, 0), &out);
}

sg_status sg_infer_SPACE_TO_DEPTH(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    int64_t b, bb;
    SG_TRY(block_attrs(g, n, &x, &b, &bb));
    sg_shape out = sg_iu_unknown_dims(4);
    if (x.rank == 4) {
        out.d[0] = x.d[0];
        for (int32_t i = 2; i < 4; i++) {
            int64_t s = x.d[i].size;
            if (s >= 0 && s % b != 0)
                return sg_node_error(
                    n, SEGRT_ERROR_SHAPE,
                    "dim %d of input `%s` is %lld, not a multiple of blocksize %lld", i,
                    sg_iu_name(g, n, 0), (long long)s, (long long)b);
            out.d[i] = s >= 0 ? sg_dim_of(s / b) : b == 1 ? x.d[i] : sg_dim_unknown();
        }
        int64_t o;
        if (x.d[1].size < 0)
            out.d[1] = b == 1 ? x.d[1] : sg_dim_unknown();
        else if (!sg_mul_i64(x.d[1].size, bb, &o))
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "output channels overflow");
        else {
            SG_TRY(sg_infer_check_dim(n, o, "the output channels"));
            out.d[1] = sg_dim_of(o);
        }
    }
    return sg_infer_set_output(g, n, 0, sg_iu_dtype(g, n, 0), &out);
}

/* Indices of the same rank as the data (GatherElements, ScatterElements). */
static sg_status same_rank_indices(const sg_graph *g, const sg_node *n, const sg_shape *x, const sg_shape *idx)
{
    SG_TRY(sg_iu_want_index(g, n, 1));
    if (x->rank >= 0 && idx->rank >= 0 && x->rank != idx->rank)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "indices `%s` have rank %d, data `%s` rank %d", sg_iu_name(g, n, 1),
                             idx->rank, sg_iu_name(g, n, 0), x->rank);
    if (x->rank == 0)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "data `%s` must have rank 1 or more", sg_iu_name(g, n, 0));
    if (x->rank > 0) {
        int32_t axis;
        SG_TRY(sg_infer_axis(n, sg_attr_int(n, "axis", 0), x->rank, &axis));
        /* Off the axis an index addresses the data at its own position. */
        for (int32_t d = 0; idx->rank == x->rank && d < x->rank; d++)
            if (d != axis && idx->d[d].size >= 0 && x->d[d].size >= 0 && idx->d[d].size > x->d[d].size)
                return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                     "indices `%s` are larger than data `%s` along axis %d (%lld, %lld)",
                                     sg_iu_name(g, n, 1), sg_iu_name(g, n, 0), d, (long long)idx->d[d].size,
                                     (long long)x->d[d].size);
    }
    return SEGRT_OK;
}

static sg_status want_reduction(const sg_node *n)
{
    const char *red = sg_attr_string(n, "reduction", "none");
    if (strcmp(red, "none") != 0 && strcmp(red, "add") != 0 && strcmp(red, "mul") != 0 && strcmp(red, "max") != 0 &&
        strcmp(red, "min") != 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "reduction `%s` is not none, add, mul, max or min", red);
    return SEGRT_OK;
}

sg_status sg_infer_GATHER_ELEMENTS(sg_graph *g, sg_node *n)
{
    sg_shape x, idx;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    SG_TRY(sg_iu_shape(g, n, 1, &idx));
    SG_TRY(same_rank_indices(g, n, &x, &idx));
    return sg_infer_set_output(g, n, 0, sg_iu_dtype(g, n, 0), &idx);
}

sg_status sg_infer_SCATTER_ELEMENTS(sg_graph *g, sg_node *n)
{
    sg_shape x, idx, upd;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    SG_TRY(sg_iu_shape(g, n, 1, &idx));
    SG_TRY(sg_iu_shape(g, n, 2, &upd));
    SG_TRY(same_rank_indices(g, n, &x, &idx));
    SG_TRY(sg_iu_same_dtype(g, n, 0, 2));
    SG_TRY(want_reduction(n));
    bool ok = idx.rank < 0 || upd.rank < 0 || idx.rank == upd.rank;
    for (int32_t i = 0; ok && idx.rank >= 0 && i < idx.rank && upd.rank == idx.rank; i++)
        ok = idx.d[i].size < 0 || upd.d[i].size < 0 || idx.d[i].size == upd.d[i].size;
    if (!ok) {
        char a[SG_IU_SHAPE_BUF], b[SG_IU_SHAPE_BUF];
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "updates `%s` (%s) must have the shape of indices `%s` (%s)",
                             sg_iu_name(g, n, 2), sg_shape_format(g, &upd, a, sizeof a), sg_iu_name(g, n, 1),
                             sg_shape_format(g, &idx, b, sizeof b));
    }
    return sg_infer_set_output(g, n, 0, sg_iu_dtype(g, n, 0), &x);
}

sg_status sg_infer_GATHER_ND(sg_graph *g, sg_node *n)
{
    sg_shape x, idx;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    SG_TRY(sg_iu_shape(g, n, 1, &idx));
    SG_TRY(sg_iu_want_dtype(g, n, 1, SEGRT_DTYPE_INT64));
    int64_t b = sg_attr_int(n, "batch_dims", 0);
    sg_dtype t = sg_iu_dtype(g, n, 0);
    sg_shape out = sg_shape_unknown();
    if (x.rank < 0 || idx.rank < 0 || idx.d[idx.rank - 1].size < 0)
        return sg_infer_set_output(g, n, 0, t, &out);
    int64_t k = idx.d[idx.rank - 1].size;
    if (idx.rank < 1 || b < 0 || b >= idx.rank || b >= x.rank || k < 1 || b + k > x.rank)
        return sg_node_error(n, SEGRT_ERROR_SHAPE,
                             "indices of rank %d whose last dim is %lld, batch_dims %lld, over data of rank %d",
                             idx.rank, (long long)k, (long long)b, x.rank);
    SG_TRY(sg_iu_rank_fits(n, (int64_t)idx.rank - 1 + x.rank - b - k));
    out = sg_iu_unknown_dims(0);
    for (int32_t i = 0; i < idx.rank - 1; i++)
        out.d[out.rank++] = idx.d[i];
    for (int64_t i = b + k; i < x.rank; i++)
        out.d[out.rank++] = x.d[i];
    return sg_infer_set_output(g, n, 0, t, &out);
}

sg_status sg_infer_CUM_SUM(sg_graph *g, sg_node *n)
{
    SG_TRY(sg_iu_want_numeric(g, n, 0));
    SG_TRY(sg_iu_want_index(g, n, 1));
    return sg_iu_passthrough(g, n);
}

sg_status sg_infer_TRILU(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    if (x.rank >= 0 && x.rank < 2)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "input `%s` must have rank 2 or more", sg_iu_name(g, n, 0));
    if (sg_iu_has_input(n, 1))
        SG_TRY(sg_iu_want_dtype(g, n, 1, SEGRT_DTYPE_INT64));
    return sg_iu_passthrough(g, n);
}

sg_status sg_infer_ONE_HOT(sg_graph *g, sg_node *n)
{
    sg_shape idx;
    SG_TRY(sg_iu_shape(g, n, 0, &idx));
    SG_TRY(sg_iu_want_numeric(g, n, 0));
    SG_TRY(sg_iu_want_numeric(g, n, 1));
    sg_dtype t = sg_iu_dtype(g, n, 2);
    sg_shape out = sg_shape_unknown();
    if (idx.rank < 0)
        return sg_infer_set_output(g, n, 0, t, &out);
    SG_TRY(sg_iu_rank_fits(n, (int64_t)idx.rank + 1));
    int32_t axis;
    SG_TRY(sg_infer_axis(n, sg_attr_int(n, "axis", -1), idx.rank + 1, &axis));
    int64_t depth = -1;
    int32_t count;
    if (sg_dtype_is_float(sg_iu_dtype(g, n, 1))) { /* the spec takes any numeric depth */
        float f = 0;
        SG_TRY(sg_infer_const_floats(g, n, 1, &f, 1, &count));
        depth = (int64_t)f;
    } else {
        SG_TRY(sg_infer_const_ints(g, n, 1, &depth, 1, &count));
    }
    if (count == 1 && depth < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "depth is %lld; it must be 1 or more", (long long)depth);
    out = sg_iu_unknown_dims(0);
    for (int32_t i = 0, k = 0; i < idx.rank + 1; i++)
        out.d[out.rank++] = i == axis ? (count == 1 ? sg_dim_of(depth) : sg_dim_unknown()) : idx.d[k++];
    return sg_infer_set_output(g, n, 0, t, &out);
}

sg_status sg_infer_TOP_K(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    SG_TRY(sg_iu_want_numeric(g, n, 0));
    SG_TRY(sg_iu_want_dtype(g, n, 1, SEGRT_DTYPE_INT64));
    sg_dtype t = sg_iu_dtype(g, n, 0);
    sg_shape out = x;
    if (x.rank >= 0) {
        if (x.rank == 0)
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "input `%s` must have rank 1 or more", sg_iu_name(g, n, 0));
        int32_t axis;
        SG_TRY(sg_infer_axis(n, sg_attr_int(n, "axis", -1), x.rank, &axis));
        int64_t k = -1;
        int32_t count;
        SG_TRY(sg_infer_const_ints(g, n, 1, &k, 1, &count));
        if (count == 1 && (k < 0 || (x.d[axis].size >= 0 && k > x.d[axis].size)))
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "k is %lld for an axis of %lld", (long long)k,
                                 (long long)x.d[axis].size);
        out.d[axis] = count == 1 ? sg_dim_of(k) : sg_dim_unknown();
    }
    SG_TRY(sg_infer_set_output(g, n, 0, t, &out));
    return sg_infer_set_output(g, n, 1, SEGRT_DTYPE_INT64, &out);
}

/* NonZero: int64 [rank, count], the count known only where the input is
 * (a constant, or the interpreter's value): a model that takes it from an
 * input has shapes that depend on its values. A scalar counts as rank 1,
 * as numpy's nonzero takes it. */
sg_status sg_infer_NON_ZERO(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    sg_shape out = sg_iu_unknown_dims(2);
    if (x.rank >= 0)
        out.d[0] = sg_dim_of(x.rank > 0 ? x.rank : 1);
    const sg_value *v = sg_infer_input(g, n, 0);
    if (v && v->data && sg_shape_is_static(&x)) {
        int64_t numel = 1, count = 0;
        for (int32_t i = 0; i < x.rank; i++)
            numel *= x.d[i].size;
        for (int64_t i = 0; i < numel; i++)
            count += sg_dtype_is_nonzero(v->dtype, sg_blob_data(v->data), i);
        out.d[1] = sg_dim_of(count);
    }
    return sg_infer_set_output(g, n, 0, SEGRT_DTYPE_INT64, &out);
}
