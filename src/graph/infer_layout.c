/* Shape inference for layout operators: Concat, Split, Slice, Pad, Reshape,
 * Transpose, Flatten, Squeeze and Unsqueeze. */
#include "graph/infer_util.h"

#include <string.h>

/* Split outputs beyond this would need a larger table of sizes; no real
 * network splits a tensor into more pieces. */
#define SPLIT_CAP 1024

sg_status sg_infer_CONCAT(sg_graph *g, sg_node *n)
{
    int64_t axis_attr = 0;
    SG_TRY(sg_iu_required_int(n, "axis", &axis_attr));
    int32_t first = -1;
    sg_shape ref = sg_shape_unknown();
    for (int32_t i = 0; i < n->n_inputs; i++) {
        if (!sg_iu_has_input(n, i))
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input %d is missing", i);
        SG_TRY(sg_iu_same_dtype(g, n, 0, i));
        sg_shape s;
        SG_TRY(sg_iu_shape(g, n, i, &s));
        if (s.rank < 0)
            continue;
        if (first < 0) {
            first = i;
            ref = s;
        } else if (s.rank != ref.rank) {
            char a[SG_IU_SHAPE_BUF], b[SG_IU_SHAPE_BUF];
            return sg_node_error(
                n, SEGRT_ERROR_SHAPE, "input `%s` (%s) has rank %d but input `%s` (%s) has rank %d",
                sg_iu_name(g, n, first), sg_shape_format(g, &ref, a, sizeof a), ref.rank,
                sg_iu_name(g, n, i), sg_shape_format(g, &s, b, sizeof b), s.rank);
        }
    }
    sg_dtype t = sg_iu_dtype(g, n, 0);
    if (first < 0) {
        sg_shape u = sg_shape_unknown();
        return sg_infer_set_output(g, n, 0, t, &u);
    }
    int32_t axis;
    SG_TRY(sg_infer_axis(n, axis_attr, ref.rank, &axis));
    sg_shape out = ref;
    int32_t src[SEGRT_MAX_RANK]; /* the input each known dim of out came from */
    for (int32_t d = 0; d < ref.rank; d++)
        src[d] = first;
    int64_t total = 0;
    bool total_known = true;
    for (int32_t i = 0; i < n->n_inputs; i++) {
        sg_shape s;
        SG_TRY(sg_iu_shape(g, n, i, &s));
        if (s.rank < 0) {
            total_known = false;
            continue;
        }
        for (int32_t d = 0; d < s.rank; d++) {
            if (d == axis)
                continue;
            if (s.d[d].size >= 0 && out.d[d].size >= 0 && s.d[d].size != out.d[d].size) {
                char a[SG_IU_SHAPE_BUF], b[SG_IU_SHAPE_BUF];
                sg_shape other;
                SG_TRY(sg_iu_shape(g, n, src[d], &other));
                return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                     "inputs `%s` (%s) and `%s` (%s) differ in dim %d (%lld vs "
                                     "%lld); concatenating along axis %d needs the others equal",
                                     sg_iu_name(g, n, src[d]),
                                     sg_shape_format(g, &other, a, sizeof a), sg_iu_name(g, n, i),
                                     sg_shape_format(g, &s, b, sizeof b), d,
                                     (long long)out.d[d].size, (long long)s.d[d].size, axis);
            }
            if (out.d[d].size < 0 && (s.d[d].size >= 0 || out.d[d].sym < 0)) {
                out.d[d] = s.d[d];
                src[d] = i;
            }
        }
        if (s.d[axis].size < 0)
            total_known = false;
        else if (total_known && !sg_add_i64(total, s.d[axis].size, &total))
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "the concatenated dim overflows");
    }
    if (n->n_inputs == 1)
        out.d[axis] = ref.d[axis];
    else
        out.d[axis] = total_known ? sg_dim_of(total) : sg_dim_unknown();
    return sg_infer_set_output(g, n, 0, t, &out);
}

/* Split ------------------------------------------------------------------- */

sg_status sg_infer_SPLIT(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    sg_dtype t = sg_iu_dtype(g, n, 0);
    int32_t n_out = n->n_outputs;
    if (n_out > SPLIT_CAP)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED,
                             "splits into %d outputs; segrt supports up to %d", n_out, SPLIT_CAP);
    int64_t sizes[SPLIT_CAP];
    int32_t count = -1; /* number of explicit sizes; -1 when not known */
    bool explicit_split = false;
    if (sg_iu_has_input(n, 1)) {
        SG_TRY(sg_infer_const_ints(g, n, 1, sizes, SPLIT_CAP, &count));
        /* Some converters write an empty tensor for "no sizes". */
        explicit_split = count > 0 || (count < 0 && sg_iu_static_len(g, n, 1) != 0);
    } else {
        /* Before opset 13 the sizes were an attribute. */
        int32_t na;
        const int64_t *a = sg_attr_ints(n, "split", &na);
        if (a) {
            if (na > SPLIT_CAP)
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "`split` has %d values", na);
            explicit_split = na > 0;
            count = na;
            memcpy(sizes, a, sizeof(int64_t) * (size_t)na);
        }
    }
    const sg_attr *num_attr = sg_attr_find(n, "num_outputs");
    if (x.rank < 0) {
        sg_shape u = sg_shape_unknown();
        for (int32_t j = 0; j < n_out; j++)
            SG_TRY(sg_infer_set_output(g, n, j, t, &u));
        return SEGRT_OK;
    }
    int32_t axis;
    SG_TRY(sg_infer_axis(n, sg_attr_int(n, "axis", 0), x.rank, &axis));
    sg_dim d = x.d[axis];
    const char *xname = sg_iu_name(g, n, 0);

    bool known = false; /* sizes[] holds every output's length */
    if (explicit_split) {
        if (count >= 0) {
            if (count != n_out)
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                     "`split` has %d sizes but the node has %d outputs", count,
                                     n_out);
            int64_t sum = 0;
            for (int32_t j = 0; j < count; j++) {
                if (sizes[j] < 0)
                    return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                         "`split` size %d is negative (%lld)", j,
                                         (long long)sizes[j]);
                if (!sg_add_i64(sum, sizes[j], &sum))
                    return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "`split` sizes overflow");
            }
            if (d.size >= 0 && sum != d.size)
                return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                     "`split` sizes sum to %lld but axis %d of input `%s` is %lld",
                                     (long long)sum, axis, xname, (long long)d.size);
            known = true;
        }
    } else if (num_attr) {
        int64_t num = num_attr->kind == SG_ATTR_INT ? num_attr->i : -1;
        if (num < 1 || num != n_out)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                 "num_outputs is %lld but the node has %d outputs", (long long)num,
                                 n_out);
        if (d.size >= 0) {
            /* Equal chunks of ceil(d / num); the last one takes what is left. */
            int64_t chunk = d.size / num + (d.size % num != 0);
            int64_t last = d.size - chunk * (num - 1);
            if (last < 0)
                return sg_node_error(
                    n, SEGRT_ERROR_SHAPE,
                    "axis %d of input `%s` is %lld, too short for %lld outputs of %lld", axis,
                    xname, (long long)d.size, (long long)num, (long long)chunk);
            for (int32_t j = 0; j < n_out; j++)
                sizes[j] = j == n_out - 1 ? last : chunk;
            known = true;
        }
    } else if (d.size >= 0) {
        if (d.size % n_out != 0)
            return sg_node_error(
                n, SEGRT_ERROR_SHAPE,
                "axis %d of input `%s` is %lld, which does not split evenly into %d outputs", axis,
                xname, (long long)d.size, n_out);
        for (int32_t j = 0; j < n_out; j++)
            sizes[j] = d.size / n_out;
        known = true;
    }
    for (int32_t j = 0; j < n_out; j++) {
        sg_shape out = x;
        if (known)
            out.d[axis] = sg_dim_of(sizes[j]);
        else if (n_out != 1 || explicit_split)
            out.d[axis] = sg_dim_unknown();
        SG_TRY(sg_infer_set_output(g, n, j, t, &out));
    }
    return SEGRT_OK;
}

/* Slice ------------------------------------------------------------------- */

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The length along one axis, as the ONNX spec computes it. */
static sg_dim slice_dim(sg_dim in, int64_t start, int64_t end, int64_t step)
{
    if (in.size < 0) {
        /* Whole-axis slices keep the dim and its symbol. */
        bool all_fwd = step == 1 && (start == 0 || start <= -SG_MAX_DIM) && end >= SG_MAX_DIM;
        bool all_rev =
            step == -1 && (start == -1 || start >= SG_MAX_DIM) && end <= -SG_MAX_DIM;
        return all_fwd || all_rev ? in : sg_dim_unknown();
    }
    int64_t dim = in.size;
    if (dim == 0)
        return sg_dim_of(0);
    if (start < 0)
        start += dim;
    if (end < 0)
        end += dim;
    int64_t len;
    if (step > 0) {
        start = clamp64(start, 0, dim);
        end = clamp64(end, 0, dim);
        len = end > start ? (end - start - 1) / step + 1 : 0;
    } else {
        start = clamp64(start, 0, dim - 1);
        end = clamp64(end, -1, dim - 1);
        if (start <= end)
            len = 0;
        else if (step == INT64_MIN)
            len = 1;
        else
            len = (start - end - 1) / -step + 1;
    }
    return sg_dim_of(len);
}

sg_status sg_infer_SLICE(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    sg_dtype t = sg_iu_dtype(g, n, 0);
    int64_t starts[SEGRT_MAX_RANK], ends[SEGRT_MAX_RANK], axes[SEGRT_MAX_RANK],
        steps[SEGRT_MAX_RANK];
    int32_t ns, ne, na = -1, nst = -1;
    bool has_axes = sg_iu_has_input(n, 3), has_steps = sg_iu_has_input(n, 4);
    SG_TRY(sg_infer_const_ints(g, n, 1, starts, SEGRT_MAX_RANK, &ns));
    SG_TRY(sg_infer_const_ints(g, n, 2, ends, SEGRT_MAX_RANK, &ne));
    if (has_axes)
        SG_TRY(sg_infer_const_ints(g, n, 3, axes, SEGRT_MAX_RANK, &na));
    if (has_steps)
        SG_TRY(sg_infer_const_ints(g, n, 4, steps, SEGRT_MAX_RANK, &nst));
    if (x.rank < 0) {
        sg_shape u = sg_shape_unknown();
        return sg_infer_set_output(g, n, 0, t, &u);
    }
    int32_t ax[SEGRT_MAX_RANK];
    bool all_const = ns >= 0 && ne >= 0 && (!has_axes || na >= 0) && (!has_steps || nst >= 0);
    if (!all_const) {
        /* The rank survives; the sliced axes, where known, lose their size. */
        sg_shape out = x;
        int64_t k = ns >= 0 ? ns : ne >= 0 ? ne : sg_iu_static_len(g, n, 1);
        if (has_axes && na >= 0) {
            SG_TRY(sg_iu_axes(n, axes, na, x.rank, ax, "`axes`"));
            for (int32_t i = 0; i < na; i++)
                out.d[ax[i]] = sg_dim_unknown();
        } else {
            int64_t upto = !has_axes && k >= 0 && k <= x.rank ? k : x.rank;
            for (int64_t i = 0; i < upto; i++)
                out.d[i] = sg_dim_unknown();
        }
        return sg_infer_set_output(g, n, 0, t, &out);
    }
    if (ne != ns || (has_axes && na != ns) || (has_steps && nst != ns))
        return sg_node_error(
            n, SEGRT_ERROR_INVALID_MODEL,
            "starts, ends, axes and steps have %d, %d, %d and %d values; they must agree", ns, ne,
            has_axes ? na : ns, has_steps ? nst : ns);
    if (!has_axes)
        for (int32_t i = 0; i < ns; i++)
            axes[i] = i;
    SG_TRY(sg_iu_axes(n, axes, ns, x.rank, ax, "`axes`"));
    sg_shape out = x;
    for (int32_t i = 0; i < ns; i++) {
        int64_t step = has_steps ? steps[i] : 1;
        if (step == 0)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "step %d is 0", i);
        out.d[ax[i]] = slice_dim(x.d[ax[i]], starts[i], ends[i], step);
    }
    return sg_infer_set_output(g, n, 0, t, &out);
}

/* Pad --------------------------------------------------------------------- */

sg_status sg_infer_PAD(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    sg_dtype t = sg_iu_dtype(g, n, 0);
    const char *mode = sg_attr_string(n, "mode", "constant");
    if (strcmp(mode, "constant") != 0 && strcmp(mode, "reflect") != 0 &&
        strcmp(mode, "edge") != 0 && strcmp(mode, "wrap") != 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                             "mode `%s` is not constant, reflect, edge or wrap", mode);
    if (sg_iu_has_input(n, 2))
        SG_TRY(sg_iu_same_dtype(g, n, 0, 2));

    int64_t pads[2 * SEGRT_MAX_RANK], axes[SEGRT_MAX_RANK];
    int32_t np = -1, na = -1;
    bool has_axes = sg_iu_has_input(n, 3);
    if (sg_iu_has_input(n, 1)) {
        SG_TRY(sg_infer_const_ints(g, n, 1, pads, 2 * SEGRT_MAX_RANK, &np));
    } else {
        /* Before opset 11 the pads were an attribute. */
        const int64_t *a = sg_attr_ints(n, "pads", &np);
        if (!a)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs the `pads` input");
        if (np > 2 * SEGRT_MAX_RANK)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "`pads` has %d values", np);
        memcpy(pads, a, sizeof(int64_t) * (size_t)np);
    }
    if (has_axes)
        SG_TRY(sg_infer_const_ints(g, n, 3, axes, SEGRT_MAX_RANK, &na));

    if (x.rank < 0) {
        /* Pads over every axis tell the rank. */
        sg_shape out = sg_shape_unknown();
        if (!has_axes && np >= 0 && np % 2 == 0)
            out = sg_iu_unknown_dims(np / 2);
        return sg_infer_set_output(g, n, 0, t, &out);
    }
    int32_t ax[SEGRT_MAX_RANK];
    if (has_axes && na >= 0)
        SG_TRY(sg_iu_axes(n, axes, na, x.rank, ax, "`axes`"));
    sg_shape out = x;
    if (np < 0 || (has_axes && na < 0)) {
        /* Which dims change is known only where the axes are. */
        int32_t n_changed = has_axes && na >= 0 ? na : x.rank;
        for (int32_t i = 0; i < n_changed; i++)
            out.d[has_axes && na >= 0 ? ax[i] : i] = sg_dim_unknown();
        return sg_infer_set_output(g, n, 0, t, &out);
    }
    int32_t n_axes = has_axes ? na : x.rank;
    if (!has_axes)
        for (int32_t i = 0; i < x.rank; i++)
            ax[i] = i;
    if (np != 2 * n_axes)
        return sg_node_error(
            n, SEGRT_ERROR_INVALID_MODEL,
            "`pads` has %d values; expected %d (a begin and an end for each of %d axes)", np,
            2 * n_axes, n_axes);
    for (int32_t i = 0; i < n_axes; i++) {
        int64_t pb = pads[i], pe = pads[i + n_axes];
        sg_dim d = x.d[ax[i]];
        if (d.size < 0) {
            out.d[ax[i]] = pb == 0 && pe == 0 ? d : sg_dim_unknown();
            continue;
        }
        int64_t o;
        if (__builtin_add_overflow(d.size, pb, &o) || __builtin_add_overflow(o, pe, &o))
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "pads along axis %d overflow",
                                 ax[i]);
        SG_TRY(sg_infer_check_dim(n, o, "a padded dim"));
        out.d[ax[i]] = sg_dim_of(o);
    }
    return sg_infer_set_output(g, n, 0, t, &out);
}

/* Reshape ----------------------------------------------------------------- */

sg_status sg_infer_RESHAPE(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    sg_dtype t = sg_iu_dtype(g, n, 0);
    int64_t allowzero = sg_attr_int(n, "allowzero", 0);
    int64_t want[SG_IU_CONST_CAP];
    int32_t count;
    SG_TRY(sg_infer_const_ints(g, n, 1, want, SG_IU_CONST_CAP, &count));
    if (count < 0) {
        int64_t k = sg_iu_static_len(g, n, 1);
        if (k >= 0)
            SG_TRY(sg_iu_rank_fits(n, k));
        sg_shape out = k >= 0 ? sg_iu_unknown_dims((int32_t)k) : sg_shape_unknown();
        return sg_infer_set_output(g, n, 0, t, &out);
    }
    SG_TRY(sg_iu_rank_fits(n, count));
    const char *xname = sg_iu_name(g, n, 0);
    char xs[SG_IU_SHAPE_BUF];
    sg_shape_format(g, &x, xs, sizeof xs);

    sg_shape out = sg_iu_unknown_dims(count);
    int32_t infer_at = -1;
    bool copied[SEGRT_MAX_RANK] = {false}; /* input dims a 0 copied over */
    for (int32_t i = 0; i < count; i++) {
        if (want[i] == -1) {
            if (infer_at >= 0)
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                     "the shape has more than one -1");
            infer_at = i;
        } else if (want[i] < -1) {
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "the shape has %lld at index %d",
                                 (long long)want[i], i);
        } else if (want[i] == 0 && !allowzero) {
            if (x.rank >= 0 && i >= x.rank)
                return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                     "the shape copies dim %d (a 0) but input `%s` is %s", i, xname,
                                     xs);
            if (x.rank >= 0) {
                out.d[i] = x.d[i];
                copied[i] = true;
            }
        } else {
            SG_TRY(sg_infer_check_dim(n, want[i], "a dim of the shape"));
            out.d[i] = sg_dim_of(want[i]);
        }
    }
    if (allowzero && infer_at >= 0)
        for (int32_t i = 0; i < count; i++)
            if (want[i] == 0)
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                     "with allowzero the shape cannot hold both 0 and -1");
    if (x.rank < 0)
        return sg_infer_set_output(g, n, 0, t, &out);

    /* Count elements, cancelling unknown input dims against the output dims
     * that copy them, so that [N, 3, 4] -> [0, -1] gives [N, 12]. */
    int64_t in_known = 1, out_known = 1;
    bool in_complete = true, out_complete = true;
    for (int32_t i = 0; i < x.rank; i++) {
        if (i < count && copied[i] && x.d[i].size < 0)
            continue;
        if (x.d[i].size < 0)
            in_complete = false;
        else if (!sg_mul_i64(in_known, x.d[i].size, &in_known))
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "input `%s` (%s) has too many elements",
                                 xname, xs);
    }
    for (int32_t i = 0; i < count; i++) {
        if (i == infer_at || (copied[i] && x.d[i].size < 0))
            continue;
        if (out.d[i].size < 0)
            out_complete = false;
        else if (!sg_mul_i64(out_known, out.d[i].size, &out_known))
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "the shape has too many elements");
    }
    if (!in_complete || !out_complete)
        return sg_infer_set_output(g, n, 0, t, &out);
    char ws[SG_IU_SHAPE_BUF];
    if (infer_at >= 0) {
        if (out_known == 0) {
            if (in_known != 0)
                return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                     "cannot reshape input `%s` (%s) to %s: a -1 next to a 0 dim",
                                     xname, xs, sg_shape_format(g, &out, ws, sizeof ws));
            /* 0 elements either way: the -1 is not determined. */
        } else if (in_known % out_known != 0) {
            return sg_node_error(
                n, SEGRT_ERROR_SHAPE,
                "cannot reshape input `%s` (%s) to %s: %lld elements do not divide into %lld",
                xname, xs, sg_shape_format(g, &out, ws, sizeof ws), (long long)in_known,
                (long long)out_known);
        } else {
            out.d[infer_at] = sg_dim_of(in_known / out_known);
        }
    } else if (in_known != out_known) {
        return sg_node_error(n, SEGRT_ERROR_SHAPE,
                             "cannot reshape input `%s` (%s) to %s: %lld elements vs %lld", xname,
                             xs, sg_shape_format(g, &out, ws, sizeof ws), (long long)in_known,
                             (long long)out_known);
    }
    return sg_infer_set_output(g, n, 0, t, &out);
}

/* Transpose, Flatten, Squeeze, Unsqueeze ------------------------------------- */

sg_status sg_infer_TRANSPOSE(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    sg_dtype t = sg_iu_dtype(g, n, 0);
    int32_t np;
    const int64_t *perm = sg_attr_ints(n, "perm", &np);
    if (!perm) {
        sg_shape out = x;
        for (int32_t i = 0; i < x.rank; i++)
            out.d[i] = x.d[x.rank - 1 - i];
        return sg_infer_set_output(g, n, 0, t, &out);
    }
    if (np > SEGRT_MAX_RANK || (x.rank >= 0 && np != x.rank))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "perm has %d values for rank %d", np,
                             x.rank);
    bool seen[SEGRT_MAX_RANK] = {false};
    for (int32_t i = 0; i < np; i++) {
        if (perm[i] < 0 || perm[i] >= np || seen[perm[i]])
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                 "perm is not a permutation of 0..%d (value %lld at index %d)",
                                 np - 1, (long long)perm[i], i);
        seen[perm[i]] = true;
    }
    sg_shape out = sg_iu_unknown_dims(np);
    for (int32_t i = 0; i < np && x.rank >= 0; i++)
        out.d[i] = x.d[perm[i]];
    return sg_infer_set_output(g, n, 0, t, &out);
}

sg_status sg_infer_FLATTEN(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    sg_dtype t = sg_iu_dtype(g, n, 0);
    sg_shape out = sg_iu_unknown_dims(2);
    if (x.rank < 0)
        return sg_infer_set_output(g, n, 0, t, &out);
    /* Unlike most axes, this one may equal the rank: [N] -> [N, 1]. */
    int64_t axis = sg_attr_int(n, "axis", 1);
    if (axis < -x.rank || axis > x.rank)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "axis %lld is out of range for rank %d",
                             (long long)axis, x.rank);
    if (axis < 0)
        axis += x.rank;
    SG_TRY(sg_iu_dims_product(n, &x, 0, (int32_t)axis, &out.d[0]));
    SG_TRY(sg_iu_dims_product(n, &x, (int32_t)axis, x.rank, &out.d[1]));
    return sg_infer_set_output(g, n, 0, t, &out);
}

/* Axes of Squeeze and Unsqueeze: the input from opset 13, the attribute
 * before. *count is -1 when they are given but not constant, 0 when
 * absent. */
static sg_status squeeze_axes(const sg_graph *g, const sg_node *n, int64_t *axes, int32_t *count)
{
    if (sg_iu_has_input(n, 1))
        return sg_infer_const_ints(g, n, 1, axes, SG_IU_CONST_CAP, count);
    const int64_t *a = sg_attr_ints(n, "axes", count);
    if (*count > SG_IU_CONST_CAP)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "`axes` has %d values", *count);
    if (a)
        memcpy(axes, a, sizeof(int64_t) * (size_t)*count);
    return SEGRT_OK;
}

sg_status sg_infer_SQUEEZE(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    sg_dtype t = sg_iu_dtype(g, n, 0);
    int64_t axes[SG_IU_CONST_CAP];
    int32_t count;
    SG_TRY(squeeze_axes(g, n, axes, &count));
    sg_shape out = sg_shape_unknown();
    if (x.rank < 0)
        return sg_infer_set_output(g, n, 0, t, &out);
    if (count < 0) {
        int64_t k = sg_iu_static_len(g, n, 1);
        if (k > 0 && k <= x.rank)
            out = sg_iu_unknown_dims(x.rank - (int32_t)k);
        return sg_infer_set_output(g, n, 0, t, &out);
    }
    bool drop[SEGRT_MAX_RANK] = {false};
    if (count == 0) {
        /* Every dim of size 1 goes; an unknown one might, so the rank is
         * not known. */
        for (int32_t i = 0; i < x.rank; i++) {
            if (x.d[i].size < 0)
                return sg_infer_set_output(g, n, 0, t, &out);
            drop[i] = x.d[i].size == 1;
        }
    } else {
        int32_t ax[SEGRT_MAX_RANK];
        SG_TRY(sg_iu_axes(n, axes, count, x.rank, ax, "`axes`"));
        for (int32_t i = 0; i < count; i++) {
            if (x.d[ax[i]].size >= 0 && x.d[ax[i]].size != 1) {
                char buf[SG_IU_SHAPE_BUF];
                return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                     "cannot squeeze axis %d of input `%s` (%s): its size is %lld",
                                     ax[i], sg_iu_name(g, n, 0),
                                     sg_shape_format(g, &x, buf, sizeof buf),
                                     (long long)x.d[ax[i]].size);
            }
            drop[ax[i]] = true;
        }
    }
    out = sg_iu_unknown_dims(0);
    for (int32_t i = 0; i < x.rank; i++)
        if (!drop[i])
            out.d[out.rank++] = x.d[i];
    return sg_infer_set_output(g, n, 0, t, &out);
}

sg_status sg_infer_UNSQUEEZE(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    sg_dtype t = sg_iu_dtype(g, n, 0);
    int64_t axes[SG_IU_CONST_CAP];
    int32_t count;
    SG_TRY(squeeze_axes(g, n, axes, &count));
    sg_shape out = sg_shape_unknown();
    if (x.rank < 0)
        return sg_infer_set_output(g, n, 0, t, &out);
    if (count < 0) {
        int64_t k = sg_iu_static_len(g, n, 1);
        if (k >= 0) {
            SG_TRY(sg_iu_rank_fits(n, x.rank + k));
            out = sg_iu_unknown_dims(x.rank + (int32_t)k);
        }
        return sg_infer_set_output(g, n, 0, t, &out);
    }
    SG_TRY(sg_iu_rank_fits(n, (int64_t)x.rank + count));
    int32_t rank = x.rank + count;
    int32_t ax[SEGRT_MAX_RANK];
    SG_TRY(sg_iu_axes(n, axes, count, rank, ax, "`axes`"));
    bool ins[SEGRT_MAX_RANK] = {false};
    for (int32_t i = 0; i < count; i++)
        ins[ax[i]] = true;
    out = sg_iu_unknown_dims(rank);
    for (int32_t i = 0, k = 0; i < rank; i++)
        out.d[i] = ins[i] ? sg_dim_of(1) : x.d[k++];
    return sg_infer_set_output(g, n, 0, t, &out);
}

/* Expand, Tile ---------------------------------------------------------------- */
