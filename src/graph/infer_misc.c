/* Shape inference for shape, type and constant operators: Cast, CastLike,
 * QuantizeLinear, DequantizeLinear, Shape, Size, ConstantOfShape, Range,
 * Constant, Identity and Dropout. */
#include "graph/infer_util.h"

#include <math.h>
#include <string.h>

/* An ONNX dtype number from an attribute as a dtype segrt supports;
 * UNSUPPORTED otherwise (strings, complex, float8, ...). */
static sg_status supported_dtype(const sg_node *n, int64_t v, const char *what, sg_dtype *out)
{
    if (v <= 0 || v > 64 || !sg_dtype_is_supported((sg_dtype)v))
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED,
                             "%s is ONNX data type %lld, which segrt does not support", what,
                             (long long)v);
    *out = (sg_dtype)v;
    return SEGRT_OK;
}

sg_status sg_infer_CAST(sg_graph *g, sg_node *n)
{
    const sg_attr *a = sg_attr_find(n, "to");
    if (!a || a->kind != SG_ATTR_INT)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs the int attribute `to`");
    sg_dtype to = SEGRT_DTYPE_UNDEFINED;
    SG_TRY(supported_dtype(n, a->i, "`to`", &to));
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    return sg_infer_set_output(g, n, 0, to, &x);
}

/* CastLike: input 0 as input 1's dtype (its values unused). */
sg_status sg_infer_CAST_LIKE(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    return sg_infer_set_output(g, n, 0, sg_iu_dtype(g, n, 1), &x);
}

/* The quantisers' scale (and zero point): a scalar, one value per index
 * of `axis`, or (block_size, opset 21) the input's shape with `axis`
 * divided into blocks. */
static sg_status quant_params(sg_graph *g, sg_node *n, const sg_shape *x)
{
    int64_t bs = sg_attr_int(n, "block_size", 0);
    if (bs < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "block_size is %lld", (long long)bs);
    for (int32_t i = 1; i <= 2; i++) {
        if (!sg_iu_has_input(n, i))
            continue;
        sg_shape s;
        SG_TRY(sg_iu_shape(g, n, i, &s));
        if (bs > 0) {
            if (s.rank >= 0 && x->rank >= 0 && s.rank != x->rank)
                return sg_node_error(n, SEGRT_ERROR_SHAPE, "`%s` has rank %d; blocked, it has the input's %d",
                                     sg_iu_name(g, n, i), s.rank, x->rank);
            continue;
        }
        if (s.rank > 1)
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "`%s` has rank %d; a scale or zero point is a scalar or 1-D",
                                 sg_iu_name(g, n, i), s.rank);
        if (s.rank == 1 && x->rank >= 0) {
            int32_t axis;
            SG_TRY(sg_infer_axis(n, sg_attr_int(n, "axis", 1), x->rank, &axis));
            if (s.d[0].size >= 0 && x->d[axis].size >= 0 && s.d[0].size != x->d[axis].size && s.d[0].size != 1)
                return sg_node_error(n, SEGRT_ERROR_SHAPE, "`%s` has %lld values for an axis of %lld",
                                     sg_iu_name(g, n, i), (long long)s.d[0].size, (long long)x->d[axis].size);
        }
    }
    return SEGRT_OK;
}

sg_status sg_infer_QUANTIZE_LINEAR(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    SG_TRY(quant_params(g, n, &x));
    sg_dtype t = SEGRT_DTYPE_UINT8;
    const sg_attr *od = sg_attr_find(n, "output_dtype");
    if (sg_iu_has_input(n, 2))
        t = sg_iu_dtype(g, n, 2);
    else if (od && od->kind == SG_ATTR_INT && od->i != 0)
        SG_TRY(supported_dtype(n, od->i, "`output_dtype`", &t));
    if (t != SEGRT_DTYPE_UNDEFINED && t != SEGRT_DTYPE_UINT8 && t != SEGRT_DTYPE_INT8 && t != SEGRT_DTYPE_UINT16 &&
        t != SEGRT_DTYPE_INT16)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "quantising to %s (segrt: 8- and 16-bit integers)",
                             segrt_dtype_name(t));
    return sg_infer_set_output(g, n, 0, t, &x);
}

sg_status sg_infer_DEQUANTIZE_LINEAR(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    SG_TRY(quant_params(g, n, &x));
    return sg_infer_set_output(g, n, 0, sg_iu_dtype(g, n, 1), &x);
}

sg_status sg_infer_SHAPE(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    sg_shape out = sg_shape_unknown();
    out.rank = 1;
    out.d[0] = sg_dim_unknown();
    if (x.rank >= 0) {
        /* start and end (opset 15) clamp to [0, rank] rather than fail. */
        int64_t r = x.rank;
        int64_t start = sg_attr_int(n, "start", 0), end = sg_attr_int(n, "end", r);
        if (start < 0)
            start = start < -r ? 0 : start + r;
        if (end < 0)
            end = end < -r ? 0 : end + r;
        start = start > r ? r : start;
        end = end > r ? r : end;
        out.d[0] = sg_dim_of(end > start ? end - start : 0);
    }
    return sg_infer_set_output(g, n, 0, SEGRT_DTYPE_INT64, &out);
}

sg_status sg_infer_SIZE(sg_graph *g, sg_node *n)
{
    sg_shape out = sg_shape_unknown();
    out.rank = 0;
    return sg_infer_set_output(g, n, 0, SEGRT_DTYPE_INT64, &out);
}

/* The dtype of a one-element `value` tensor attribute (ConstantOfShape),
 * float32 when absent. */
static sg_status fill_dtype(const sg_node *n, sg_dtype *out)
{
    *out = SEGRT_DTYPE_FLOAT32;
    const sg_attr *a = sg_attr_find(n, "value");
    if (!a)
        return SEGRT_OK;
    if (a->kind != SG_ATTR_TENSOR)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "`value` must be a tensor");
    SG_TRY(supported_dtype(n, a->t_dtype, "`value`", out));
    if (a->t_rank < 0 || a->t_rank > SEGRT_MAX_RANK)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "`value` has rank %d", a->t_rank);
    int64_t numel;
    if (!sg_dims_product(a->t_dims, a->t_rank, &numel) || numel != 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "`value` must hold exactly one element");
    return SEGRT_OK;
}

sg_status sg_infer_CONSTANT_OF_SHAPE(sg_graph *g, sg_node *n)
{
    sg_dtype t;
    SG_TRY(fill_dtype(n, &t));
    int64_t dims[SG_IU_CONST_CAP];
    int32_t count;
    SG_TRY(sg_infer_const_ints(g, n, 0, dims, SG_IU_CONST_CAP, &count));
    sg_shape out = sg_shape_unknown();
    if (count < 0) {
        int64_t k = sg_iu_static_len(g, n, 0);
        if (k > SEGRT_MAX_RANK)
            return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED,
                                 "the output would have rank %lld; segrt supports up to %d",
                                 (long long)k, SEGRT_MAX_RANK);
        if (k >= 0) {
            out.rank = (int32_t)k;
            for (int32_t i = 0; i < out.rank; i++)
                out.d[i] = sg_dim_unknown();
        }
        return sg_infer_set_output(g, n, 0, t, &out);
    }
    if (count > SEGRT_MAX_RANK)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED,
                             "the output would have rank %d; segrt supports up to %d", count,
                             SEGRT_MAX_RANK);
    for (int32_t i = 0; i < count; i++)
        SG_TRY(sg_infer_check_dim(n, dims[i], "a dim of the shape"));
    out = sg_shape_of_dims(dims, count);
    return sg_infer_set_output(g, n, 0, t, &out);
}

/* Range ------------------------------------------------------------------ */

/* The single value of constant scalar input i: *known false when it is
 * not constant. SHAPE error when it has more than one element. */
static sg_status range_scalar(const sg_graph *g, const sg_node *n, int32_t i, bool *known,
                              double *f, int64_t *v)
{
    const sg_value *val = sg_infer_input(g, n, i);
    *known = false;
    if (!val)
        return SEGRT_OK;
    const sg_shape *s = &val->shape;
    bool one = s->rank == 0 || (s->rank == 1 && s->d[0].size == 1);
    bool maybe_one = s->rank < 0 || one || (s->rank == 1 && s->d[0].size < 0);
    if (!maybe_one) {
        char buf[SG_IU_SHAPE_BUF];
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "input `%s` is %s; it must be a scalar",
                             val->name, sg_shape_format(g, s, buf, sizeof buf));
    }
    if (!one || !val->data || sg_blob_size(val->data) < segrt_dtype_size(val->dtype) ||
        segrt_dtype_size(val->dtype) == 0)
        return SEGRT_OK;
    const void *data = sg_blob_data(val->data);
    *f = sg_dtype_load_f64(val->dtype, data, 0);
    *v = sg_dtype_load_i64(val->dtype, data, 0);
    *known = true;
    return SEGRT_OK;
}

/* max(ceil((limit - start) / delta), 0) in int64 without overflow. */
static sg_status range_len_int(const sg_node *n, int64_t start, int64_t limit, int64_t delta,
                               int64_t *out)
{
    int64_t diff;
    if (__builtin_sub_overflow(limit, start, &diff) || (delta == -1 && diff == INT64_MIN))
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "the range has too many elements");
    int64_t q = diff / delta;
    if (diff % delta != 0 && ((diff < 0) == (delta < 0)))
        q++;
    *out = q > 0 ? q : 0;
    return SEGRT_OK;
}

sg_status sg_infer_RANGE(sg_graph *g, sg_node *n)
{
    SG_TRY(sg_iu_same_dtype(g, n, 0, 1));
    SG_TRY(sg_iu_same_dtype(g, n, 0, 2));
    SG_TRY(sg_iu_want_numeric(g, n, 0));
    sg_dtype t = sg_iu_dtype(g, n, 0);
    bool known[3];
    double f[3] = {0, 0, 0};
    int64_t v[3] = {0, 0, 0};
    for (int32_t i = 0; i < 3; i++)
        SG_TRY(range_scalar(g, n, i, &known[i], &f[i], &v[i]));
    sg_shape out = sg_shape_unknown();
    out.rank = 1;
    out.d[0] = sg_dim_unknown();
    if (known[0] && known[1] && known[2] && t != SEGRT_DTYPE_UNDEFINED) {
        int64_t len = 0;
        if (sg_dtype_is_integer(t)) {
            if (v[2] == 0)
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "delta is 0");
            SG_TRY(range_len_int(n, v[0], v[1], v[2], &len));
        } else {
            /* In the input's own precision, as the kernels compute it, so
             * that the length agrees with what they produce. */
            if (f[2] == 0)
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "delta is 0");
            double q;
            if (t == SEGRT_DTYPE_FLOAT64) {
                q = ceil((f[1] - f[0]) / f[2]);
            } else {
                float fq = ((float)f[1] - (float)f[0]) / (float)f[2];
                q = ceilf(fq);
            }
            if (isnan(q) || q > 4.0 * (double)SG_MAX_DIM)
                return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                     "the range from %g to %g by %g has too many elements", f[0],
                                     f[1], f[2]);
            len = q > 0 ? (int64_t)q : 0;
        }
        SG_TRY(sg_infer_check_dim(n, len, "the range's length"));
        out.d[0] = sg_dim_of(len);
    }
    return sg_infer_set_output(g, n, 0, t, &out);
}

/* Constant --------------------------------------------------------------- */

sg_status sg_infer_CONSTANT(sg_graph *g, sg_node *n)
{
    static const char *const unsupported[] = {"sparse_value", "value_string", "value_strings"};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (sg_attr_find(n, unsupported[i]))
            return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED,
                                 "segrt does not support `%s` constants", unsupported[i]);
    sg_shape out = sg_shape_unknown();
    const sg_attr *a;
    if ((a = sg_attr_find(n, "value")) != NULL) {
        if (a->kind != SG_ATTR_TENSOR)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "`value` must be a tensor");
        sg_dtype t = SEGRT_DTYPE_UNDEFINED;
        SG_TRY(supported_dtype(n, a->t_dtype, "`value`", &t));
        if (a->t_rank < 0 || a->t_rank > SEGRT_MAX_RANK)
            return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED,
                                 "`value` has rank %d; segrt supports up to %d", a->t_rank,
                                 SEGRT_MAX_RANK);
        for (int32_t i = 0; i < a->t_rank; i++)
            if (a->t_dims[i] < 0)
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "`value` has dim %lld",
                                     (long long)a->t_dims[i]);
        out = sg_shape_of_dims(a->t_dims, a->t_rank);
        int64_t numel;
        size_t bytes;
        if (!sg_dims_product(a->t_dims, a->t_rank, &numel) ||
            __builtin_mul_overflow((size_t)numel, segrt_dtype_size(t), &bytes))
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "`value` is too large");
        if (a->t_data && sg_blob_size(a->t_data) < bytes)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                 "`value` holds %zu bytes; its shape needs %zu",
                                 sg_blob_size(a->t_data), bytes);
        return sg_infer_set_output(g, n, 0, t, &out);
    }
    static const struct {
        const char *name;
        sg_attr_kind kind;
        sg_dtype dtype;
    } scalars[] = {
        {"value_float", SG_ATTR_FLOAT, SEGRT_DTYPE_FLOAT32},
        {"value_int", SG_ATTR_INT, SEGRT_DTYPE_INT64},
        {"value_floats", SG_ATTR_FLOATS, SEGRT_DTYPE_FLOAT32},
        {"value_ints", SG_ATTR_INTS, SEGRT_DTYPE_INT64},
    };
    for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++) {
        if (!(a = sg_attr_find(n, scalars[i].name)))
            continue;
        if (a->kind != scalars[i].kind)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "`%s` has the wrong attribute type",
                                 scalars[i].name);
        out.rank = 0;
        if (a->kind == SG_ATTR_FLOATS || a->kind == SG_ATTR_INTS) {
            int64_t d = a->n;
            out = sg_shape_of_dims(&d, 1);
        }
        return sg_infer_set_output(g, n, 0, scalars[i].dtype, &out);
    }
    return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "has no value attribute");
}

sg_status sg_infer_IDENTITY(sg_graph *g, sg_node *n) { return sg_iu_passthrough(g, n); }

sg_status sg_infer_DROPOUT(sg_graph *g, sg_node *n)
{
    SG_TRY(sg_iu_want_numeric(g, n, 0));
    if (sg_iu_has_input(n, 1)) {
        sg_dtype r = sg_iu_dtype(g, n, 1);
        if (r != SEGRT_DTYPE_UNDEFINED && !sg_dtype_is_float(r))
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "ratio `%s` is %s; it must be a float",
                                 sg_iu_name(g, n, 1), segrt_dtype_name(r));
    }
    if (sg_iu_has_input(n, 2))
        SG_TRY(sg_iu_want_dtype(g, n, 2, SEGRT_DTYPE_BOOL));
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    SG_TRY(sg_infer_set_output(g, n, 0, sg_iu_dtype(g, n, 0), &x));
    return sg_infer_set_output(g, n, 1, SEGRT_DTYPE_BOOL, &x);
}

/* If: one boolean element decides; each output takes its dtype from the
 * branches' declarations, and a shape where both declare the same (the
 * fold pass, sg_pass_fold_if, replaces the node by a branch once the
 * condition is a constant, and the branch's own nodes infer the rest). */
sg_status sg_infer_IF(sg_graph *g, sg_node *n)
{
    SG_TRY(sg_iu_want_dtype(g, n, 0, SEGRT_DTYPE_BOOL));
    sg_shape c;
    SG_TRY(sg_iu_shape(g, n, 0, &c));
    int64_t numel;
    if (sg_shape_numel(&c, &numel) && numel != 1)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "condition `%s` has %lld elements; it must have one",
                             sg_iu_name(g, n, 0), (long long)numel);
    const sg_graph *br[2] = {NULL, NULL};
    static const char *const names[2] = {"then_branch", "else_branch"};
    for (int b = 0; b < 2; b++) {
        const sg_attr *a = sg_attr_find(n, names[b]);
        if (!a || a->kind != SG_ATTR_GRAPH || !a->graph)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "it has no graph attribute %s", names[b]);
        br[b] = a->graph;
        if (br[b]->n_outputs != n->n_outputs)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "its %s has %d outputs; the node has %d", names[b],
                                 br[b]->n_outputs, n->n_outputs);
    }
    for (int32_t j = 0; j < n->n_outputs; j++) {
        const sg_value *t = &br[0]->values[br[0]->outputs[j]], *e = &br[1]->values[br[1]->outputs[j]];
        sg_dtype dt = t->dtype != SEGRT_DTYPE_UNDEFINED ? t->dtype : e->dtype;
        sg_shape s = sg_shape_unknown();
        if (sg_shape_is_static(&t->declared) && sg_shape_is_static(&e->declared) &&
            t->declared.rank == e->declared.rank) {
            s = t->declared;
            for (int32_t d = 0; d < s.rank; d++)
                if (t->declared.d[d].size != e->declared.d[d].size)
                    s.d[d] = (sg_dim){SG_DIM_UNKNOWN, SG_NO_SYM};
        }
        SG_TRY(sg_infer_set_output(g, n, j, dt, &s));
    }
    return SEGRT_OK;
}
