/* Element-wise gathers and scatters along an axis (GatherElements,
 * ScatterElements), tuple gathers (GatherND), running sums (CumSum),
 * triangles (Trilu), one-hot encoding (OneHot) and the k largest or
 * smallest (TopK), and the indices of the nonzero elements (NonZero).
 *
 * Indices are checked before anything is written, so a bad one leaves no
 * partial output. Values move as their bytes (gathers, Trilu, TopK) or
 * compute in double / int64 as the other reference kernels do (CumSum,
 * the scatters' reductions). */
#include "backend/ref/ref_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The flat offset of element `i` of a tensor of `dims` whose axis `axis`
 * index is replaced by `v`, with the row-major strides `st`. */
static int64_t offset_with(const int64_t *dims, const int64_t *st, int32_t rank, int64_t i, int32_t axis, int64_t v)
{
    int64_t off = 0;
    for (int32_t d = rank - 1; d >= 0; d--) {
        int64_t c = i % dims[d];
        i /= dims[d];
        off += (d == axis ? v : c) * st[d];
    }
    return off;
}

static sg_status want_index_dtype(const sg_node *n, const sg_tensor *t)
{
    if (t->dtype != SEGRT_DTYPE_INT64 && t->dtype != SEGRT_DTYPE_INT32)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "indices must be int32 or int64");
    return SEGRT_OK;
}

/* Every index of t in [-dim, dim): the normalised ones into *out (malloc'd). */
static sg_status read_indices(const sg_node *n, const sg_tensor *t, int64_t dim, int64_t **out)
{
    int64_t count = sg_ref_numel(t);
    int64_t *v = malloc(sizeof(int64_t) * (size_t)(count ? count : 1));
    if (!v)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    for (int64_t j = 0; j < count; j++) {
        int64_t k = sg_dtype_load_i64(t->dtype, t->data, j);
        if (k < -dim || k >= dim) {
            free(v);
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "index %lld is out of range for an axis of %lld",
                                 (long long)k, (long long)dim);
        }
        v[j] = k < 0 ? k + dim : k;
    }
    *out = v;
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_gather_elements)
{
    const sg_tensor *x, *ti;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &ti));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));
    SG_TRY(want_index_dtype(n, ti));
    if (x->rank < 1 || ti->rank != x->rank)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "indices and data must have the same rank (>= 1)");
    SG_TRY(sg_ref_check_out_dims(n, y, ti->dims, ti->rank));
    int32_t axis;
    SG_TRY(sg_ref_axis(n, sg_attr_int(n, "axis", 0), x->rank, &axis));
    for (int32_t d = 0; d < x->rank; d++)
        if (d != axis && ti->dims[d] > x->dims[d])
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "indices are larger than the data along axis %d", d);
    int64_t *idx;
    SG_TRY(read_indices(n, ti, x->dims[axis], &idx));
    int64_t xs[SEGRT_MAX_RANK], count = sg_ref_numel(ti);
    sg_ref_strides(x->dims, x->rank, xs);
    size_t es = segrt_dtype_size(x->dtype);
    for (int64_t i = 0; i < count; i++)
        ref_copy_elem((char *)y->data + (size_t)i * es,
                      (const char *)x->data + (size_t)offset_with(ti->dims, xs, x->rank, i, axis, idx[i]) * es, es);
    free(idx);
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_scatter_elements)
{
    const sg_tensor *x, *ti, *u;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &ti));
    SG_TRY(sg_ref_need_in(n, in, n_in, 2, &u));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_out_dims(n, y, x->dims, x->rank));
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));
    SG_TRY(sg_ref_check_dtype(n, u, x->dtype, "updates"));
    SG_TRY(want_index_dtype(n, ti));
    bool same = x->rank >= 1 && ti->rank == x->rank && u->rank == ti->rank;
    for (int32_t d = 0; same && d < ti->rank; d++)
        same = u->dims[d] == ti->dims[d];
    if (!same)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "indices and updates must have one shape, of the data's rank");
    sg_op rop;
    SG_TRY(sg_ref_scatter_reduction(n, &rop));
    int32_t axis;
    SG_TRY(sg_ref_axis(n, sg_attr_int(n, "axis", 0), x->rank, &axis));
    for (int32_t d = 0; d < x->rank; d++)
        if (d != axis && ti->dims[d] > x->dims[d])
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "indices are larger than the data along axis %d", d);
    int64_t *idx;
    SG_TRY(read_indices(n, ti, x->dims[axis], &idx));
    if (y->data != x->data && sg_ref_numel(x) > 0)
        memmove(y->data, x->data, sg_tensor_bytes(x));
    int64_t xs[SEGRT_MAX_RANK], count = sg_ref_numel(ti);
    sg_ref_strides(x->dims, x->rank, xs);
    size_t es = segrt_dtype_size(x->dtype);
    for (int64_t i = 0; i < count; i++) {
        int64_t o = offset_with(ti->dims, xs, x->rank, i, axis, idx[i]);
        if (rop == SG_OP_COUNT)
            ref_copy_elem((char *)y->data + (size_t)o * es, (const char *)u->data + (size_t)i * es, es);
        else
            sg_ref_scatter_combine(y, o, u, i, rop);
    }
    free(idx);
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_gather_nd)
{
    const sg_tensor *x, *ti;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &ti));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));
    SG_TRY(want_index_dtype(n, ti));
    int64_t b = sg_attr_int(n, "batch_dims", 0);
    if (ti->rank < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "indices must have rank >= 1");
    int64_t k = ti->dims[ti->rank - 1];
    if (b < 0 || b >= ti->rank || b >= x->rank || k < 1 || b + k > x->rank)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "index tuples of %lld with batch_dims %lld over rank %d",
                             (long long)k, (long long)b, x->rank);
    for (int64_t d = 0; d < b; d++)
        if (ti->dims[d] != x->dims[d])
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "batch dim %lld differs between data and indices", (long long)d);
    int64_t want[SEGRT_MAX_RANK];
    int32_t wr = 0;
    for (int32_t d = 0; d < ti->rank - 1; d++)
        want[wr++] = ti->dims[d];
    for (int64_t d = b + k; d < x->rank; d++)
        want[wr++] = x->dims[d];
    SG_TRY(sg_ref_check_out_dims(n, y, want, wr));
    int64_t xs[SEGRT_MAX_RANK], batches = 1, per_batch = 1, slice = 1;
    sg_ref_strides(x->dims, x->rank, xs);
    for (int64_t d = 0; d < b; d++)
        batches *= x->dims[d];
    for (int32_t d = (int32_t)b; d < ti->rank - 1; d++)
        per_batch *= ti->dims[d];
    for (int64_t d = b + k; d < x->rank; d++)
        slice *= x->dims[d];
    int64_t tuples = batches * per_batch;
    for (int64_t t = 0; t < tuples * k; t++) {
        int64_t v = sg_dtype_load_i64(ti->dtype, ti->data, t), dim = x->dims[b + t % k];
        if (v < -dim || v >= dim)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "index %lld is out of range for an axis of %lld",
                                 (long long)v, (long long)dim);
    }
    size_t es = segrt_dtype_size(x->dtype), bytes = (size_t)slice * es;
    int64_t batch_stride = b > 0 ? xs[b - 1] : 0;
    for (int64_t t = 0; t < tuples; t++) {
        int64_t off = (t / per_batch) * batch_stride;
        for (int64_t j = 0; j < k; j++) {
            int64_t v = sg_dtype_load_i64(ti->dtype, ti->data, t * k + j), dim = x->dims[b + j];
            off += (v < 0 ? v + dim : v) * xs[b + j];
        }
        memcpy((char *)y->data + (size_t)t * bytes, (const char *)x->data + (size_t)off * es, bytes);
    }
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_cum_sum)
{
    const sg_tensor *x, *ta;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &ta));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_out_dims(n, y, x->dims, x->rank));
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));
    if (x->rank < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input must have rank >= 1");
    if (sg_ref_numel(ta) != 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "axis must be one integer");
    int32_t axis;
    SG_TRY(sg_ref_axis(n, sg_dtype_load_i64(ta->dtype, ta->data, 0), x->rank, &axis));
    bool excl = sg_attr_int(n, "exclusive", 0) != 0, rev = sg_attr_int(n, "reverse", 0) != 0;
    bool fl = sg_dtype_is_float(x->dtype);
    if (!fl && !sg_dtype_is_integer(x->dtype))
        return sg_ref_unsupported_dtype(n, x->dtype);
    int64_t outer = 1, len = x->dims[axis], inner = 1;
    for (int32_t d = 0; d < axis; d++)
        outer *= x->dims[d];
    for (int32_t d = axis + 1; d < x->rank; d++)
        inner *= x->dims[d];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double sf = 0;
            int64_t si = 0;
            for (int64_t s = 0; s < len; s++) {
                int64_t k = rev ? len - 1 - s : s, at = (o * len + k) * inner + i;
                if (fl) {
                    double v = sg_dtype_load_f64(x->dtype, x->data, at);
                    if (!excl)
                        sf += v;
                    sg_dtype_store_f64(y->dtype, y->data, at, sf);
                    if (excl)
                        sf += v;
                } else {
                    int64_t v = sg_dtype_load_i64(x->dtype, x->data, at);
                    if (!excl)
                        si = ref_add_wrap(si, v);
                    sg_dtype_store_i64(y->dtype, y->data, at, si);
                    if (excl)
                        si = ref_add_wrap(si, v);
                }
            }
        }
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_trilu)
{
    const sg_tensor *x, *tk;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 1, &tk));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_out_dims(n, y, x->dims, x->rank));
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));
    if (x->rank < 2)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input must have rank >= 2");
    if (tk && sg_ref_numel(tk) != 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "k must be one integer");
    int64_t k = tk ? sg_dtype_load_i64(tk->dtype, tk->data, 0) : 0;
    bool upper = sg_attr_int(n, "upper", 1) != 0;
    int64_t R = x->dims[x->rank - 2], C = x->dims[x->rank - 1], plane = R * C;
    int64_t mats = plane > 0 ? sg_ref_numel(x) / plane : 0;
    size_t es = segrt_dtype_size(x->dtype);
    for (int64_t m = 0; m < mats; m++)
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++) {
                size_t at = (size_t)((m * R + r) * C + c) * es;
                bool keep = upper ? c - r >= k : c - r <= k;
                if (keep)
                    ref_copy_elem((char *)y->data + at, (const char *)x->data + at, es);
                else
                    memset((char *)y->data + at, 0, es); /* zero is all-zero bytes in every dtype */
            }
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_one_hot)
{
    const sg_tensor *ti, *td, *tv;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &ti));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &td));
    SG_TRY(sg_ref_need_in(n, in, n_in, 2, &tv));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_dtype(n, y, tv->dtype, "output"));
    if (sg_ref_numel(td) != 1 || sg_ref_numel(tv) != 2)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "depth must be one number and values two");
    double dd = sg_dtype_load_f64(td->dtype, td->data, 0);
    if (!(dd >= 1) || dd > 1e12)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "depth is %g; it must be 1 or more", dd);
    int64_t depth = (int64_t)dd;
    if (ti->rank + 1 > SEGRT_MAX_RANK)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "output rank %d is too large", ti->rank + 1);
    int32_t axis;
    SG_TRY(sg_ref_axis(n, sg_attr_int(n, "axis", -1), ti->rank + 1, &axis));
    int64_t want[SEGRT_MAX_RANK];
    for (int32_t d = 0, k = 0; d < ti->rank + 1; d++)
        want[d] = d == axis ? depth : ti->dims[k++];
    SG_TRY(sg_ref_check_out_dims(n, y, want, ti->rank + 1));
    int64_t outer = 1, inner = 1;
    for (int32_t d = 0; d < axis; d++)
        outer *= ti->dims[d];
    for (int32_t d = axis; d < ti->rank; d++)
        inner *= ti->dims[d];
    size_t es = segrt_dtype_size(tv->dtype);
    const char *off = tv->data, *on = (const char *)tv->data + es;
    bool fl = sg_dtype_is_float(ti->dtype);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            /* Float indices are truncated; an index outside [-depth, depth)
             * gives a row of off values, as the spec says. */
            int64_t v = fl ? (int64_t)sg_dtype_load_f64(ti->dtype, ti->data, o * inner + i)
                           : sg_dtype_load_i64(ti->dtype, ti->data, o * inner + i);
            v = v < 0 ? v + depth : v;
            for (int64_t d = 0; d < depth; d++)
                ref_copy_elem((char *)y->data + (size_t)((o * depth + d) * inner + i) * es, d == v ? on : off, es);
        }
    return SEGRT_OK;
}

/* TopK's order: larger first (largest) or smaller first, NaN beyond every
 * number, ties by the smaller index. */
typedef struct topk_item {
    double v;
    int64_t i;
} topk_item;

static int topk_largest(const void *pa, const void *pb)
{
    const topk_item *a = pa, *b = pb;
    bool an = a->v != a->v, bn = b->v != b->v;
    if (an != bn)
        return an ? -1 : 1;
    if (!an && a->v != b->v)
        return a->v > b->v ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

static int topk_smallest(const void *pa, const void *pb)
{
    const topk_item *a = pa, *b = pb;
    bool an = a->v != a->v, bn = b->v != b->v;
    if (an != bn)
        return an ? 1 : -1;
    if (!an && a->v != b->v)
        return a->v < b->v ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

REF_KERNEL(sg_ref_top_k)
{
    const sg_tensor *x, *tk;
    sg_tensor *yv, *yi;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &tk));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &yv));
    SG_TRY(sg_ref_need_out(n, out, n_out, 1, &yi));
    SG_TRY(sg_ref_check_dtype(n, yv, x->dtype, "values"));
    SG_TRY(sg_ref_check_dtype(n, yi, SEGRT_DTYPE_INT64, "indices"));
    if (x->rank < 1 || sg_ref_numel(tk) != 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input must have rank >= 1 and K one integer");
    int32_t axis;
    SG_TRY(sg_ref_axis(n, sg_attr_int(n, "axis", -1), x->rank, &axis));
    int64_t k = sg_dtype_load_i64(tk->dtype, tk->data, 0), len = x->dims[axis];
    if (k < 0 || k > len)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "K is %lld for an axis of %lld", (long long)k,
                             (long long)len);
    if (!sg_dtype_is_float(x->dtype) && !sg_dtype_is_integer(x->dtype))
        return sg_ref_unsupported_dtype(n, x->dtype);
    int64_t want[SEGRT_MAX_RANK];
    memcpy(want, x->dims, sizeof(int64_t) * (size_t)x->rank);
    want[axis] = k;
    SG_TRY(sg_ref_check_out_dims(n, yv, want, x->rank));
    SG_TRY(sg_ref_check_out_dims(n, yi, want, x->rank));
    bool largest = sg_attr_int(n, "largest", 1) != 0;
    int64_t outer = 1, inner = 1;
    for (int32_t d = 0; d < axis; d++)
        outer *= x->dims[d];
    for (int32_t d = axis + 1; d < x->rank; d++)
        inner *= x->dims[d];
    topk_item *items = malloc(sizeof *items * (size_t)(len ? len : 1));
    if (!items)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    /* (sorted=0 lets the order be any; the sorted order is one.) Integers
     * past 2^53 compare through double: beyond any index a network sorts. */
    size_t es = segrt_dtype_size(x->dtype);
    int64_t *yd = yi->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            for (int64_t j = 0; j < len; j++)
                items[j] = (topk_item){sg_dtype_load_f64(x->dtype, x->data, (o * len + j) * inner + i), j};
            qsort(items, (size_t)len, sizeof *items, largest ? topk_largest : topk_smallest);
            for (int64_t j = 0; j < k; j++) {
                int64_t at = (o * k + j) * inner + i;
                ref_copy_elem((char *)yv->data + (size_t)at * es,
                              (const char *)x->data + (size_t)((o * len + items[j].i) * inner + i) * es, es);
                yd[at] = items[j].i;
            }
        }
    free(items);
    return SEGRT_OK;
}

/* The indices of the nonzero elements, dimension by dimension, in
 * row-major order (numpy's nonzero; NaN is nonzero, -0.0 zero). */
REF_KERNEL(sg_ref_non_zero)
{
    const sg_tensor *x;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_dtype(n, y, SEGRT_DTYPE_INT64, "output"));
    int32_t R = x->rank > 0 ? x->rank : 1;
    int64_t numel = sg_ref_numel(x), count = 0;
    for (int64_t i = 0; i < numel; i++)
        count += sg_dtype_is_nonzero(x->dtype, x->data, i);
    int64_t want[2] = {R, count};
    SG_TRY(sg_ref_check_out_dims(n, y, want, 2));
    int64_t *o = y->data;
    for (int64_t i = 0, k = 0; i < numel; i++) {
        if (!sg_dtype_is_nonzero(x->dtype, x->data, i))
            continue;
        int64_t rest = i;
        for (int32_t d = x->rank - 1; d >= 0; d--) {
            o[d * count + k] = rest % x->dims[d];
            rest /= x->dims[d];
        }
        if (x->rank == 0)
            o[k] = 0;
        k++;
    }
    return SEGRT_OK;
}
