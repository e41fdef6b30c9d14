/* Concat, Split, Slice, Pad, and the ops that only reinterpret dims
 * (Reshape, Flatten, Squeeze, Unsqueeze, Identity) or copy (Dropout in
 * inference). All move bytes without looking at them, so every dtype
 * works. */
#include "backend/ref/ref_internal.h"

#include <string.h>

/* Reshape, Flatten, Squeeze, Unsqueeze, Identity: the data is unchanged;
 * shape inference already gave the output its dims. memmove because an
 * executor may run these in place. */
REF_KERNEL(sg_ref_copy)
{
    const sg_tensor *x;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));
    SG_TRY(sg_ref_check_same_numel(n, x, y));
    if (y->data != x->data && sg_ref_numel(x) > 0)
        memmove(y->data, x->data, sg_tensor_bytes(x));
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_dropout)
{
    const sg_tensor *training;
    sg_tensor *mask;
    const sg_tensor *ratio;
    SG_TRY(sg_ref_opt_in(n, in, n_in, 1, &ratio));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 2, &training));
    /* Training mode drops elements at random: an inference engine has no
     * business doing that, except with ratio 0, where it is the identity. */
    bool train = training && sg_ref_numel(training) >= 1 &&
                 sg_dtype_load_i64(training->dtype, training->data, 0) != 0;
    double r = ratio && sg_ref_numel(ratio) >= 1 ? sg_dtype_load_f64(ratio->dtype, ratio->data, 0) : 0.5;
    if (train && r != 0)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "training_mode=true with ratio %g is not supported", r);
    SG_TRY(sg_ref_copy(n, in, n_in, out, n_out > 1 ? 1 : n_out));
    SG_TRY(sg_ref_opt_out(n, out, n_out, 1, &mask));
    if (mask) {
        SG_TRY(sg_ref_check_dtype(n, mask, SEGRT_DTYPE_BOOL, "mask"));
        SG_TRY(sg_ref_check_same_numel(n, in[0], mask));
        memset(mask->data, 1, (size_t)sg_ref_numel(mask));
    }
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_concat)
{
    sg_tensor *y;
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    if (!sg_attr_find(n, "axis"))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "attribute axis is required");
    if (y->rank < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "cannot concatenate scalars");
    int32_t axis = 0;
    SG_TRY(sg_ref_axis(n, sg_attr_int(n, "axis", 0), y->rank, &axis));
    int64_t total = 0;
    for (int32_t i = 0; i < n_in; i++) {
        const sg_tensor *t;
        SG_TRY(sg_ref_need_in(n, in, n_in, i, &t));
        SG_TRY(sg_ref_check_dtype(n, t, y->dtype, "input"));
        bool ok = t->rank == y->rank;
        for (int32_t d = 0; ok && d < y->rank; d++)
            ok = d == axis || t->dims[d] == y->dims[d];
        if (!ok) {
            char a[160], b[160];
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "input %d of dims %s does not fit output %s",
                                 i, sg_dims_format(t->dims, t->rank, a, sizeof a),
                                 sg_dims_format(y->dims, y->rank, b, sizeof b));
        }
        total += t->dims[axis];
    }
    if (total != y->dims[axis])
        return sg_node_error(n, SEGRT_ERROR_SHAPE,
                             "inputs sum to %lld along axis %d, output has %lld", (long long)total,
                             axis, (long long)y->dims[axis]);
    size_t es = segrt_dtype_size(y->dtype);
    int64_t outer = 1, inner = 1;
    for (int32_t d = 0; d < axis; d++)
        outer *= y->dims[d];
    for (int32_t d = axis + 1; d < y->rank; d++)
        inner *= y->dims[d];
    size_t out_row = (size_t)(y->dims[axis] * inner) * es;
    size_t at = 0;
    for (int32_t i = 0; i < n_in; i++) {
        size_t row = (size_t)(in[i]->dims[axis] * inner) * es;
        for (int64_t o = 0; o < outer && row; o++)
            memcpy((char *)y->data + (size_t)o * out_row + at,
                   (const char *)in[i]->data + (size_t)o * row, row);
        at += row;
    }
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_split)
{
    const sg_tensor *x, *split;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 1, &split));
    if (x->rank < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "cannot split a scalar");
    if (n_out < 1 || n_out > 4096)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "bad output count %d", n_out);
    int32_t axis = 0;
    SG_TRY(sg_ref_axis(n, sg_attr_int(n, "axis", 0), x->rank, &axis));
    int64_t dim = x->dims[axis];
    int64_t *sizes = sg_malloc(sizeof(int64_t) * (size_t)n_out);
    if (!sizes)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    sg_status s = SEGRT_OK;
    int32_t count = 0;
    int32_t acount = 0;
    const int64_t *attr = sg_attr_ints(n, "split", &acount);
    if (split) {
        s = sg_ref_read_ints(n, split, sizes, n_out, &count, "split");
        if (s == SEGRT_OK && count != n_out)
            s = sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "split has %d sizes for %d outputs",
                              count, n_out);
    } else if (attr) {
        if (acount != n_out)
            s = sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "split has %d sizes for %d outputs",
                              acount, n_out);
        else
            memcpy(sizes, attr, sizeof(int64_t) * (size_t)n_out);
    } else {
        /* Equal parts, the last one smaller where dim does not divide
         * (opset 18's num_outputs). */
        int64_t chunk = (dim + n_out - 1) / n_out;
        for (int32_t j = 0; j < n_out; j++) {
            int64_t left = dim - chunk * j;
            sizes[j] = left < 0 ? 0 : (left < chunk ? left : chunk);
        }
    }
    int64_t total = 0;
    for (int32_t j = 0; j < n_out && s == SEGRT_OK; j++) {
        if (sizes[j] < 0 || sizes[j] > dim)
            s = sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "split size %lld is out of range",
                              (long long)sizes[j]);
        else
            total += sizes[j]; /* each <= dim <= 2^40: no overflow */
    }
    if (s == SEGRT_OK && total != dim)
        s = sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "split sizes sum to %lld, not %lld",
                          (long long)total, (long long)dim);
    size_t es = segrt_dtype_size(x->dtype);
    int64_t outer = 1, inner = 1;
    for (int32_t d = 0; d < axis; d++)
        outer *= x->dims[d];
    for (int32_t d = axis + 1; d < x->rank; d++)
        inner *= x->dims[d];
    size_t in_row = (size_t)(dim * inner) * es, at = 0;
    for (int32_t j = 0; j < n_out && s == SEGRT_OK; j++) {
        sg_tensor *y;
        s = sg_ref_opt_out(n, out, n_out, j, &y);
        size_t row = (size_t)(sizes[j] * inner) * es;
        if (s == SEGRT_OK && y) {
            int64_t want[SEGRT_MAX_RANK];
            memcpy(want, x->dims, sizeof(int64_t) * (size_t)x->rank);
            want[axis] = sizes[j];
            s = sg_ref_check_out_dims(n, y, want, x->rank);
            if (s == SEGRT_OK)
                s = sg_ref_check_dtype(n, y, x->dtype, "output");
            for (int64_t o = 0; o < outer && row && s == SEGRT_OK; o++)
                memcpy((char *)y->data + (size_t)o * row,
                       (const char *)x->data + (size_t)o * in_row + at, row);
        }
        at += row;
    }
    free(sizes);
    return s;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

REF_KERNEL(sg_ref_slice)
{
    const sg_tensor *x, *ts, *te, *ta, *tp;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &ts));
    SG_TRY(sg_ref_need_in(n, in, n_in, 2, &te));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 3, &ta));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 4, &tp));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));
    int64_t starts[SEGRT_MAX_RANK], ends[SEGRT_MAX_RANK], axes[SEGRT_MAX_RANK],
        steps[SEGRT_MAX_RANK];
    int32_t ns = 0, ne = 0, na = 0, np = 0;
    SG_TRY(sg_ref_read_ints(n, ts, starts, SEGRT_MAX_RANK, &ns, "starts"));
    SG_TRY(sg_ref_read_ints(n, te, ends, SEGRT_MAX_RANK, &ne, "ends"));
    na = np = ns;
    if (ta)
        SG_TRY(sg_ref_read_ints(n, ta, axes, SEGRT_MAX_RANK, &na, "axes"));
    else
        for (int32_t i = 0; i < ns; i++)
            axes[i] = i;
    if (tp)
        SG_TRY(sg_ref_read_ints(n, tp, steps, SEGRT_MAX_RANK, &np, "steps"));
    else
        for (int32_t i = 0; i < ns; i++)
            steps[i] = 1;
    if (ne != ns || na != ns || np != ns)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                             "starts, ends, axes and steps have different lengths");
    int64_t start[SEGRT_MAX_RANK], step[SEGRT_MAX_RANK], len[SEGRT_MAX_RANK];
    bool seen[SEGRT_MAX_RANK] = {false};
    for (int32_t d = 0; d < x->rank; d++) {
        start[d] = 0;
        step[d] = 1;
        len[d] = x->dims[d];
    }
    for (int32_t i = 0; i < ns; i++) {
        int32_t a = 0;
        SG_TRY(sg_ref_axis(n, axes[i], x->rank, &a));
        if (seen[a])
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "axis %d is repeated", a);
        seen[a] = true;
        int64_t dim = x->dims[a], st = steps[i], b = starts[i], e = ends[i];
        if (st == 0)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "steps must not be 0");
        /* Steps beyond the dim behave alike; clamping keeps -st defined. */
        st = clamp64(st, -((int64_t)1 << 62), (int64_t)1 << 62);
        if (b < 0)
            b += dim;
        if (e < 0)
            e += dim;
        int64_t count;
        if (st > 0) {
            b = clamp64(b, 0, dim);
            e = clamp64(e, 0, dim);
            count = e > b ? (e - b + st - 1) / st : 0;
        } else {
            b = clamp64(b, 0, dim - 1);
            e = clamp64(e, -1, dim - 1);
            count = b > e ? (b - e - st - 1) / -st : 0;
        }
        start[a] = count ? b : 0;
        step[a] = st;
        len[a] = count;
    }
    SG_TRY(sg_ref_check_out_dims(n, y, len, x->rank));
    int64_t xs[SEGRT_MAX_RANK], src_st[SEGRT_MAX_RANK], off = 0;
    sg_ref_strides(x->dims, x->rank, xs);
    for (int32_t d = 0; d < x->rank; d++) {
        off += start[d] * xs[d];
        src_st[d] = step[d] * xs[d];
    }
    sg_ref_strided_copy(y->data, x->data, segrt_dtype_size(x->dtype), x->rank, len, off, src_st);
    return SEGRT_OK;
}

/* Source index along one dim for output position o, or -1 for the
 * constant. Negative pads crop first, as the spec's reference does, so
 * the source range is [lo, lo + len) and the pad modes see only it;
 * len > 0 for every mode but constant. */
static int64_t pad_source(int64_t o, int64_t pb, int64_t lo, int64_t len, char mode)
{
    int64_t s = o - pb;
    if (s >= 0 && s < len)
        return lo + s;
    switch (mode) {
    case 'e': return lo + (s < 0 ? 0 : len - 1);
    case 'w': return lo + ((s % len) + len) % len;
    case 'r': {
        if (len == 1)
            return lo;
        int64_t period = 2 * (len - 1), m = ((s % period) + period) % period;
        return lo + (m < len ? m : period - m);
    }
    default: return -1;
    }
}

REF_KERNEL(sg_ref_pad)
{
    const sg_tensor *x, *tpads, *tval, *taxes;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 1, &tpads));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 2, &tval));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 3, &taxes));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));
    if (tval)
        SG_TRY(sg_ref_check_dtype(n, tval, x->dtype, "constant_value"));
    int32_t r = x->rank;
    const char *ms = sg_attr_string(n, "mode", "constant");
    char mode = strcmp(ms, "constant") == 0  ? 'c'
                : strcmp(ms, "reflect") == 0 ? 'r'
                : strcmp(ms, "edge") == 0    ? 'e'
                : strcmp(ms, "wrap") == 0    ? 'w'
                                             : 0;
    if (!mode)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "mode \"%s\" is not supported", ms);
    int64_t pads[2 * SEGRT_MAX_RANK], axes[SEGRT_MAX_RANK];
    int32_t np = 0, na = r;
    if (tpads) {
        SG_TRY(sg_ref_read_ints(n, tpads, pads, 2 * SEGRT_MAX_RANK, &np, "pads"));
    } else {
        int32_t cnt = 0;
        const int64_t *a = sg_attr_ints(n, "pads", &cnt);
        if (!a || cnt > 2 * SEGRT_MAX_RANK)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "pads are missing or too many");
        memcpy(pads, a, sizeof(int64_t) * (size_t)cnt);
        np = cnt;
    }
    if (taxes)
        SG_TRY(sg_ref_read_ints(n, taxes, axes, SEGRT_MAX_RANK, &na, "axes"));
    else
        for (int32_t i = 0; i < r; i++)
            axes[i] = i;
    if (np != 2 * na)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "pads has %d values for %d axes", np,
                             na);
    int64_t pb[SEGRT_MAX_RANK] = {0}, pe[SEGRT_MAX_RANK] = {0}, want[SEGRT_MAX_RANK];
    for (int32_t i = 0; i < na; i++) {
        int32_t a = 0;
        SG_TRY(sg_ref_axis(n, axes[i], r, &a));
        int64_t b = pads[i], e = pads[na + i];
        if (b < -x->dims[a] || e < -x->dims[a] || b > SG_MAX_DIM || e > SG_MAX_DIM)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "pads for axis %d are out of range",
                                 a);
        pb[a] = b;
        pe[a] = e;
        want[a] = x->dims[a] + b + e;
        if (want[a] < 0)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "pads for axis %d crop below zero",
                                 a);
    }
    for (int32_t d = 0; d < r; d++) {
        bool listed = false;
        for (int32_t i = 0; i < na; i++)
            listed |= axes[i] == d || axes[i] + r == d;
        if (!listed)
            want[d] = x->dims[d];
    }
    SG_TRY(sg_ref_check_out_dims(n, y, want, r));
    size_t es = segrt_dtype_size(x->dtype);
    int64_t numel = sg_ref_numel(y);
    if (numel == 0)
        return SEGRT_OK;
    /* The kept part of each dim after cropping by negative pads. */
    int64_t lo[SEGRT_MAX_RANK], len[SEGRT_MAX_RANK];
    for (int32_t d = 0; d < r; d++) {
        lo[d] = pb[d] < 0 ? -pb[d] : 0;
        len[d] = x->dims[d] - lo[d] - (pe[d] < 0 ? -pe[d] : 0);
        pb[d] = pb[d] < 0 ? 0 : pb[d];
    }
    if (mode != 'c')
        for (int32_t d = 0; d < r; d++)
            if (len[d] <= 0 && y->dims[d] > 0)
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "cannot %s-pad an empty axis",
                                     ms);
    /* The constant's bytes; zero (of every dtype) when absent. */
    uint64_t cval = 0;
    if (tval && sg_ref_numel(tval) >= 1)
        memcpy(&cval, tval->data, es);
    /* Per-dim source tables, then one pass over the output. */
    int64_t total = 0;
    for (int32_t d = 0; d < r; d++)
        total += y->dims[d];
    int64_t *map = sg_malloc(sizeof(int64_t) * (size_t)(total ? total : 1));
    if (!map)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    int64_t *dmap[SEGRT_MAX_RANK], xs[SEGRT_MAX_RANK];
    sg_ref_strides(x->dims, r, xs);
    int64_t at = 0;
    for (int32_t d = 0; d < r; d++) {
        dmap[d] = map + at;
        for (int64_t o = 0; o < y->dims[d]; o++)
            dmap[d][o] = pad_source(o, pb[d], lo[d], len[d] < 0 ? 0 : len[d], mode);
        at += y->dims[d];
    }
    char *dst = y->data;
    const char *src = x->data;
    if (r == 0) {
        memcpy(dst, src, es);
        free(map);
        return SEGRT_OK;
    }
    int64_t inner = y->dims[r - 1], idx[SEGRT_MAX_RANK] = {0};
    for (int64_t row = 0; row < numel / inner; row++) {
        int64_t base = 0;
        bool constant = false;
        for (int32_t d = 0; d < r - 1; d++) {
            int64_t m = dmap[d][idx[d]];
            constant |= m < 0;
            base += m * xs[d];
        }
        for (int64_t j = 0; j < inner; j++, dst += es) {
            int64_t m = dmap[r - 1][j];
            if (constant || m < 0)
                memcpy(dst, &cval, es);
            else
                ref_copy_elem(dst, src + (size_t)(base + m) * es, es);
        }
        for (int32_t d = r - 2; d >= 0; d--) {
            if (++idx[d] < y->dims[d])
                break;
            idx[d] = 0;
        }
    }
    free(map);
    return SEGRT_OK;
}
