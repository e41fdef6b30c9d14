#include "graph/infer_util.h"

#include <string.h>

sg_status sg_iu_shape(const sg_graph *g, const sg_node *n, int32_t i, sg_shape *out)
{
    const sg_value *v = sg_infer_input(g, n, i);
    if (!v || v->shape.rank < 0) {
        *out = sg_shape_unknown();
        return SEGRT_OK;
    }
    if (v->shape.rank > SEGRT_MAX_RANK)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                             "input `%s` has rank %d; segrt supports up to %d", v->name,
                             v->shape.rank, SEGRT_MAX_RANK);
    *out = v->shape;
    return SEGRT_OK;
}

sg_dtype sg_iu_dtype(const sg_graph *g, const sg_node *n, int32_t i)
{
    const sg_value *v = sg_infer_input(g, n, i);
    return v ? v->dtype : SEGRT_DTYPE_UNDEFINED;
}

const char *sg_iu_name(const sg_graph *g, const sg_node *n, int32_t i)
{
    const sg_value *v = sg_infer_input(g, n, i);
    return v ? v->name : "<omitted>";
}

bool sg_iu_has_input(const sg_node *n, int32_t i)
{
    return i >= 0 && i < n->n_inputs && n->inputs[i] >= 0;
}

sg_status sg_iu_same_dtype(const sg_graph *g, const sg_node *n, int32_t i, int32_t j)
{
    const sg_value *a = sg_infer_input(g, n, i), *b = sg_infer_input(g, n, j);
    if (!a || !b || a->dtype == SEGRT_DTYPE_UNDEFINED || b->dtype == SEGRT_DTYPE_UNDEFINED ||
        a->dtype == b->dtype)
        return SEGRT_OK;
    return sg_node_error(n, SEGRT_ERROR_SHAPE,
                         "input `%s` is %s but input `%s` is %s; %s needs the same type for both",
                         a->name, segrt_dtype_name(a->dtype), b->name, segrt_dtype_name(b->dtype),
                         sg_op_name(n->op));
}

sg_status sg_iu_want_dtype(const sg_graph *g, const sg_node *n, int32_t i, sg_dtype want)
{
    const sg_value *v = sg_infer_input(g, n, i);
    if (!v || v->dtype == SEGRT_DTYPE_UNDEFINED || v->dtype == want)
        return SEGRT_OK;
    return sg_node_error(n, SEGRT_ERROR_SHAPE, "input `%s` is %s; %s needs %s here", v->name,
                         segrt_dtype_name(v->dtype), sg_op_name(n->op), segrt_dtype_name(want));
}

sg_status sg_iu_want_numeric(const sg_graph *g, const sg_node *n, int32_t i)
{
    const sg_value *v = sg_infer_input(g, n, i);
    if (!v || v->dtype != SEGRT_DTYPE_BOOL)
        return SEGRT_OK;
    return sg_node_error(n, SEGRT_ERROR_SHAPE, "input `%s` is bool; %s needs a numeric tensor",
                         v->name, sg_op_name(n->op));
}

sg_status sg_iu_want_index(const sg_graph *g, const sg_node *n, int32_t i)
{
    const sg_value *v = sg_infer_input(g, n, i);
    if (!v || v->dtype == SEGRT_DTYPE_UNDEFINED || v->dtype == SEGRT_DTYPE_INT32 ||
        v->dtype == SEGRT_DTYPE_INT64)
        return SEGRT_OK;
    return sg_node_error(n, SEGRT_ERROR_SHAPE, "indices `%s` are %s; %s needs int32 or int64",
                         v->name, segrt_dtype_name(v->dtype), sg_op_name(n->op));
}

sg_status sg_iu_passthrough(sg_graph *g, sg_node *n)
{
    sg_shape s;
    SG_TRY(sg_iu_shape(g, n, 0, &s));
    return sg_infer_set_output(g, n, 0, sg_iu_dtype(g, n, 0), &s);
}

sg_status sg_iu_broadcast(const sg_graph *g, const sg_node *n, int32_t i, const sg_shape *a,
                          int32_t j, const sg_shape *b, sg_shape *out)
{
    if (sg_infer_broadcast(g, n, a, b, out) == SEGRT_OK)
        return SEGRT_OK;
    char sa[SG_IU_SHAPE_BUF], sb[SG_IU_SHAPE_BUF];
    return sg_node_error(n, SEGRT_ERROR_SHAPE,
                         "inputs `%s` (%s) and `%s` (%s) cannot be broadcast together",
                         sg_iu_name(g, n, i), sg_shape_format(g, a, sa, sizeof sa),
                         sg_iu_name(g, n, j), sg_shape_format(g, b, sb, sizeof sb));
}

sg_status sg_iu_axes(const sg_node *n, const int64_t *axes, int32_t count, int32_t rank,
                     int32_t *out, const char *what)
{
    /* More axes than the rank means a repeat or an axis out of range; saying
     * so up front also keeps out[] within SEGRT_MAX_RANK. */
    if (count > rank || count > SEGRT_MAX_RANK)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "%s lists %d axes for rank %d", what,
                             count, rank);
    for (int32_t k = 0; k < count; k++) {
        SG_TRY(sg_infer_axis(n, axes[k], rank, &out[k]));
        for (int32_t m = 0; m < k; m++)
            if (out[m] == out[k])
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "%s repeats axis %d", what,
                                     out[k]);
    }
    return SEGRT_OK;
}

int64_t sg_iu_static_len(const sg_graph *g, const sg_node *n, int32_t i)
{
    const sg_value *v = sg_infer_input(g, n, i);
    if (!v || v->shape.rank != 1 || v->shape.d[0].size < 0)
        return -1;
    return v->shape.d[0].size;
}

sg_status sg_iu_dims_product(const sg_node *n, const sg_shape *s, int32_t from, int32_t to,
                             sg_dim *out)
{
    int64_t p = 1;
    int32_t unknown = -1, n_unknown = 0;
    for (int32_t i = from; i < to; i++) {
        if (s->d[i].size < 0) {
            unknown = i;
            n_unknown++;
        } else if (!sg_mul_i64(p, s->d[i].size, &p)) {
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "the product of dims overflows 64 bits");
        }
    }
    if (n_unknown == 0)
        *out = sg_dim_of(p);
    else if (n_unknown == 1 && p == 1)
        *out = s->d[unknown];
    else
        *out = sg_dim_unknown();
    return SEGRT_OK;
}

sg_status sg_iu_attr_ints(const sg_node *n, const char *name, int32_t count, int64_t min,
                          int64_t def, int64_t *out, bool *present)
{
    int32_t got;
    const int64_t *v = sg_attr_ints(n, name, &got);
    if (present)
        *present = v != NULL;
    if (!v) {
        for (int32_t i = 0; i < count; i++)
            out[i] = def;
        return SEGRT_OK;
    }
    if (got != count)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "`%s` has %d values; expected %d", name,
                             got, count);
    for (int32_t i = 0; i < count; i++) {
        if (v[i] < min)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                 "`%s` value %lld at index %d is below the minimum %lld", name,
                                 (long long)v[i], i, (long long)min);
        out[i] = v[i];
    }
    return SEGRT_OK;
}

/* Convolution and pooling geometry ---------------------------------------- */

static sg_status read_auto_pad(const sg_node *n, sg_auto_pad *out)
{
    const char *s = sg_attr_string(n, "auto_pad", "NOTSET");
    /* Some exporters write an empty string for the default. */
    if (strcmp(s, "NOTSET") == 0 || s[0] == '\0')
        *out = SG_AUTO_PAD_NOTSET;
    else if (strcmp(s, "SAME_UPPER") == 0)
        *out = SG_AUTO_PAD_SAME_UPPER;
    else if (strcmp(s, "SAME_LOWER") == 0)
        *out = SG_AUTO_PAD_SAME_LOWER;
    else if (strcmp(s, "VALID") == 0)
        *out = SG_AUTO_PAD_VALID;
    else
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                             "auto_pad `%s` is not NOTSET, SAME_UPPER, SAME_LOWER or VALID", s);
    return SEGRT_OK;
}

sg_status sg_conv_attrs_read(const sg_graph *g, const sg_node *n, int32_t spatial,
                             const sg_shape *w, const char *wname, sg_conv_attrs *out)
{
    memset(out, 0, sizeof *out);
    if (spatial < 1 || spatial > SEGRT_MAX_RANK - 2)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "has %d spatial axes", spatial);
    out->spatial = spatial;
    SG_TRY(read_auto_pad(n, &out->auto_pad));
    bool has_kernel;
    SG_TRY(sg_iu_attr_ints(n, "kernel_shape", spatial, 1, 0, out->kernel, &has_kernel));
    if (!has_kernel && !w)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs the `kernel_shape` attribute");
    if (w && w->rank == spatial + 2) {
        for (int32_t i = 0; i < spatial; i++) {
            int64_t wk = w->d[2 + i].size;
            if (wk < 0)
                continue;
            if (has_kernel && out->kernel[i] != wk) {
                char buf[SG_IU_SHAPE_BUF];
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                     "kernel_shape[%d] is %lld but weight `%s` (%s) has %lld there",
                                     i, (long long)out->kernel[i], wname,
                                     sg_shape_format(g, w, buf, sizeof buf), (long long)wk);
            }
            if (wk < 1)
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                     "weight `%s` has an empty kernel along spatial axis %d", wname,
                                     i);
            out->kernel[i] = wk;
        }
    }
    SG_TRY(sg_iu_attr_ints(n, "strides", spatial, 1, 1, out->strides, NULL));
    SG_TRY(sg_iu_attr_ints(n, "dilations", spatial, 1, 1, out->dilations, NULL));
    SG_TRY(sg_iu_attr_ints(n, "pads", 2 * spatial, 0, 0, out->pads, NULL));
    /* The pads attribute is not to be used with auto_pad; where both are
     * given, auto_pad decides, as in onnxruntime. */
    if (out->auto_pad != SG_AUTO_PAD_NOTSET)
        memset(out->pads, 0, sizeof out->pads);
    int64_t ceil_mode = sg_attr_int(n, "ceil_mode", 0);
    if (ceil_mode != 0 && ceil_mode != 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "ceil_mode is %lld; must be 0 or 1",
                             (long long)ceil_mode);
    out->ceil_mode = ceil_mode == 1;
    return SEGRT_OK;
}

/* (k - 1) * d + 1: how far one kernel application reaches. */
static sg_status kernel_extent(const sg_node *n, const sg_conv_attrs *a, int32_t i, int64_t *out)
{
    int64_t ek;
    if (!sg_mul_i64(a->kernel[i] - 1, a->dilations[i], &ek) || !sg_add_i64(ek, 1, &ek))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                             "kernel %lld with dilation %lld overflows along spatial axis %d",
                             (long long)a->kernel[i], (long long)a->dilations[i], i);
    *out = ek;
    return SEGRT_OK;
}

sg_status sg_conv_out_dim(const sg_node *n, const sg_conv_attrs *a, int32_t i, sg_dim in,
                          const char *xname, sg_dim *out)
{
    if (a->kernel[i] < 1) {
        *out = sg_dim_unknown();
        return SEGRT_OK;
    }
    int64_t ek = 1, s = a->strides[i];
    int64_t pb = a->pads[i], pe = a->pads[i + a->spatial];
    SG_TRY(kernel_extent(n, a, i, &ek));
    bool same = a->auto_pad == SG_AUTO_PAD_SAME_UPPER || a->auto_pad == SG_AUTO_PAD_SAME_LOWER;
    if (in.size < 0) {
        /* Where the output provably equals the input, keep its symbol. */
        bool identity =
            s == 1 &&
            (same || (a->auto_pad == SG_AUTO_PAD_VALID && ek == 1) ||
             (a->auto_pad == SG_AUTO_PAD_NOTSET && pb <= ek && pe <= ek && pb + pe == ek - 1));
        *out = identity ? in : sg_dim_unknown();
        return SEGRT_OK;
    }
    int64_t o;
    if (same) {
        o = in.size / s + (in.size % s != 0);
    } else {
        int64_t padded = in.size;
        if (!sg_add_i64(padded, pb, &padded) || !sg_add_i64(padded, pe, &padded))
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                 "pads along spatial axis %d overflow", i);
        if (padded < ek)
            return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                 "spatial axis %d of input `%s` is %lld (%lld with pads), "
                                 "smaller than the kernel's extent %lld",
                                 i, xname, (long long)in.size, (long long)padded, (long long)ek);
        int64_t num = padded - ek;
        if (a->ceil_mode && a->auto_pad == SG_AUTO_PAD_NOTSET) {
            o = num / s + (num % s != 0) + 1;
            /* A last window that would start inside the end padding is
             * dropped (ONNX since PR 5741, PyTorch, onnxruntime). */
            int64_t start;
            if (!sg_mul_i64(o - 1, s, &start) || start >= in.size + pb)
                o--;
        } else {
            o = num / s + 1;
        }
    }
    SG_TRY(sg_infer_check_dim(n, o, "an output spatial dim"));
    *out = sg_dim_of(o);
    return SEGRT_OK;
}

sg_status sg_conv_transpose_out_dim(const sg_node *n, const sg_conv_attrs *a, int32_t i, sg_dim in,
                                    int64_t output_padding, sg_dim *out)
{
    if (a->kernel[i] < 1) {
        *out = sg_dim_unknown();
        return SEGRT_OK;
    }
    int64_t ek = 1, s = a->strides[i];
    int64_t pb = a->pads[i], pe = a->pads[i + a->spatial];
    SG_TRY(kernel_extent(n, a, i, &ek));
    bool same = a->auto_pad == SG_AUTO_PAD_SAME_UPPER || a->auto_pad == SG_AUTO_PAD_SAME_LOWER;
    /* Everything but s * (in - 1): what the kernel, output_padding and pads
     * add. Pads and kernel are validated non-negative and bounded by int64,
     * so compute it with overflow checks. */
    int64_t extra = 0;
    bool ok = !__builtin_add_overflow(output_padding, ek, &extra) &&
              !__builtin_sub_overflow(extra, 1, &extra);
    if (!same && a->auto_pad != SG_AUTO_PAD_VALID)
        ok = ok && !__builtin_sub_overflow(extra, pb, &extra) &&
             !__builtin_sub_overflow(extra, pe, &extra);
    if (!ok)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                             "kernel, pads and output_padding overflow along spatial axis %d", i);
    if (in.size < 0) {
        *out = s == 1 && (same || extra == 0) ? in : sg_dim_unknown();
        return SEGRT_OK;
    }
    int64_t o;
    if (same) {
        if (!sg_mul_i64(in.size, s, &o))
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "output spatial dim %d overflows", i);
    } else {
        /* s * (in - 1) + 1 + extra, where in may be 0. */
        int64_t base;
        if (__builtin_mul_overflow(s, in.size - 1, &base) ||
            __builtin_add_overflow(base, 1, &base) || __builtin_add_overflow(base, extra, &o))
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "output spatial dim %d overflows", i);
    }
    SG_TRY(sg_infer_check_dim(n, o, "an output spatial dim"));
    *out = sg_dim_of(o);
    return SEGRT_OK;
}

/* An output of the given rank whose dims are all unknown. */
sg_shape sg_iu_unknown_dims(int32_t rank)
{
    sg_shape s = sg_shape_unknown();
    s.rank = rank;
    for (int32_t i = 0; i < rank; i++)
        s.d[i] = sg_dim_unknown();
    return s;
}

sg_status sg_iu_rank_fits(const sg_node *n, int64_t rank)
{
    if (rank <= SEGRT_MAX_RANK)
        return SEGRT_OK;
    return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED,
                         "the output would have rank %lld; segrt supports up to %d",
                         (long long)rank, SEGRT_MAX_RANK);
}

/* An INT attribute that the operator requires. */
sg_status sg_iu_required_int(const sg_node *n, const char *name, int64_t *out)
{
    const sg_attr *a = sg_attr_find(n, name);
    if (!a || a->kind != SG_ATTR_INT)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs the int attribute `%s`", name);
    *out = a->i;
    return SEGRT_OK;
}

/* Concat ------------------------------------------------------------------ */

int64_t sg_conv_pad_begin(const sg_conv_attrs *a, int32_t i, int64_t total)
{
    if (a->auto_pad == SG_AUTO_PAD_NOTSET)
        return a->pads[i];
    if (a->auto_pad == SG_AUTO_PAD_VALID)
        return 0;
    int64_t t = total > 0 ? total : 0;
    return a->auto_pad == SG_AUTO_PAD_SAME_UPPER ? t / 2 : t - t / 2;
}
