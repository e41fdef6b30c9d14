/* Shape inference for elementwise operators: activations, unary math,
 * softmax, binary and variadic arithmetic with numpy broadcasting,
 * comparisons and logic, Where and PRelu. */
#include "graph/infer_util.h"

#include <string.h>

/* Unary math and activations: same dtype and shape as the input, which
 * must be numeric. */
static sg_status infer_unary(sg_graph *g, sg_node *n)
{
    SG_TRY(sg_iu_want_numeric(g, n, 0));
    return sg_iu_passthrough(g, n);
}

#define SG_UNARY(id)                                                                               \
    sg_status sg_infer_##id(sg_graph *g, sg_node *n) { return infer_unary(g, n); }

SG_UNARY(RELU)
SG_UNARY(LEAKY_RELU)
SG_UNARY(ELU)
SG_UNARY(SELU)
SG_UNARY(SIGMOID)
SG_UNARY(HARD_SIGMOID)
SG_UNARY(HARD_SWISH)
SG_UNARY(TANH)
SG_UNARY(SOFTPLUS)
SG_UNARY(ERF)
SG_UNARY(SQRT)
SG_UNARY(EXP)
SG_UNARY(LOG)
SG_UNARY(NEG)
SG_UNARY(ABS)
SG_UNARY(RECIPROCAL)
SG_UNARY(FLOOR)
SG_UNARY(CEIL)
SG_UNARY(SIN)
SG_UNARY(COS)
SG_UNARY(SIGN)
SG_UNARY(ROUND)
SG_UNARY(MISH)
SG_UNARY(SOFTSIGN)

#undef SG_UNARY

sg_status sg_infer_GELU(sg_graph *g, sg_node *n)
{
    const char *approx = sg_attr_string(n, "approximate", "none");
    if (strcmp(approx, "none") != 0 && strcmp(approx, "tanh") != 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                             "approximate is `%s`; must be `none` or `tanh`", approx);
    return infer_unary(g, n);
}

/* IsNaN, IsInf: a float input, a bool of its shape. */
static sg_status infer_float_test(sg_graph *g, sg_node *n)
{
    sg_dtype t = sg_iu_dtype(g, n, 0);
    if (t != SEGRT_DTYPE_UNDEFINED && !sg_dtype_is_float(t))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input `%s` is %s; it must be a float tensor",
                             sg_iu_name(g, n, 0), segrt_dtype_name(t));
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    return sg_infer_set_output(g, n, 0, SEGRT_DTYPE_BOOL, &x);
}

sg_status sg_infer_IS_NAN(sg_graph *g, sg_node *n) { return infer_float_test(g, n); }
sg_status sg_infer_IS_INF(sg_graph *g, sg_node *n) { return infer_float_test(g, n); }

sg_status sg_infer_NOT(sg_graph *g, sg_node *n)
{
    SG_TRY(sg_iu_want_dtype(g, n, 0, SEGRT_DTYPE_BOOL));
    return sg_iu_passthrough(g, n);
}

sg_status sg_infer_CLIP(sg_graph *g, sg_node *n)
{
    SG_TRY(sg_iu_want_numeric(g, n, 0));
    for (int32_t i = 1; i <= 2; i++) {
        if (!sg_iu_has_input(n, i))
            continue;
        SG_TRY(sg_iu_same_dtype(g, n, 0, i));
        sg_shape s;
        SG_TRY(sg_iu_shape(g, n, i, &s));
        /* A scalar, or the [1] that some exporters write for one. */
        bool scalar =
            s.rank < 0 || s.rank == 0 || (s.rank == 1 && (s.d[0].size < 0 || s.d[0].size == 1));
        if (!scalar) {
            char buf[SG_IU_SHAPE_BUF];
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "%s `%s` is %s; it must be a scalar",
                                 i == 1 ? "min" : "max", sg_iu_name(g, n, i),
                                 sg_shape_format(g, &s, buf, sizeof buf));
        }
    }
    return sg_iu_passthrough(g, n);
}

static sg_status infer_softmax(sg_graph *g, sg_node *n)
{
    sg_shape x;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    SG_TRY(sg_iu_want_numeric(g, n, 0));
    /* Opset 13 made the default the last axis (it was 1, with flattening). */
    int64_t axis = sg_attr_int(n, "axis", g->opset >= 13 ? -1 : 1);
    if (x.rank >= 0) {
        int32_t a;
        SG_TRY(sg_infer_axis(n, axis, x.rank, &a));
    }
    return sg_infer_set_output(g, n, 0, sg_iu_dtype(g, n, 0), &x);
}

sg_status sg_infer_SOFTMAX(sg_graph *g, sg_node *n) { return infer_softmax(g, n); }

sg_status sg_infer_LOG_SOFTMAX(sg_graph *g, sg_node *n) { return infer_softmax(g, n); }

/* Broadcasts every input together. same_type: all must share input 0's
 * dtype. */
static sg_status broadcast_all(sg_graph *g, sg_node *n, bool same_type, sg_shape *out)
{
    for (int32_t i = 0; i < n->n_inputs; i++)
        if (!sg_iu_has_input(n, i))
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input %d is missing", i);
    SG_TRY(sg_iu_shape(g, n, 0, out));
    for (int32_t i = 1; i < n->n_inputs; i++) {
        if (same_type)
            SG_TRY(sg_iu_same_dtype(g, n, 0, i));
        sg_shape s, r;
        SG_TRY(sg_iu_shape(g, n, i, &s));
        if (i == 1) {
            SG_TRY(sg_iu_broadcast(g, n, 0, out, 1, &s, &r));
        } else if (sg_infer_broadcast(g, n, out, &s, &r) != SEGRT_OK) {
            char a[SG_IU_SHAPE_BUF], b[SG_IU_SHAPE_BUF];
            return sg_node_error(
                n, SEGRT_ERROR_SHAPE,
                "input `%s` (%s) cannot be broadcast with the inputs before it (%s)",
                sg_iu_name(g, n, i), sg_shape_format(g, &s, a, sizeof a),
                sg_shape_format(g, out, b, sizeof b));
        }
        *out = r;
    }
    return SEGRT_OK;
}

/* The dtype of the first input whose dtype is known. */
static sg_dtype first_dtype(const sg_graph *g, const sg_node *n)
{
    for (int32_t i = 0; i < n->n_inputs; i++) {
        sg_dtype t = sg_iu_dtype(g, n, i);
        if (t != SEGRT_DTYPE_UNDEFINED)
            return t;
    }
    return SEGRT_DTYPE_UNDEFINED;
}

static sg_status infer_arith(sg_graph *g, sg_node *n)
{
    sg_shape out;
    SG_TRY(broadcast_all(g, n, true, &out));
    for (int32_t i = 0; i < n->n_inputs; i++)
        SG_TRY(sg_iu_want_numeric(g, n, i));
    return sg_infer_set_output(g, n, 0, first_dtype(g, n), &out);
}

sg_status sg_infer_ADD(sg_graph *g, sg_node *n) { return infer_arith(g, n); }
sg_status sg_infer_SUB(sg_graph *g, sg_node *n) { return infer_arith(g, n); }
sg_status sg_infer_MUL(sg_graph *g, sg_node *n) { return infer_arith(g, n); }
sg_status sg_infer_DIV(sg_graph *g, sg_node *n) { return infer_arith(g, n); }
sg_status sg_infer_MIN(sg_graph *g, sg_node *n) { return infer_arith(g, n); }
sg_status sg_infer_MAX(sg_graph *g, sg_node *n) { return infer_arith(g, n); }
sg_status sg_infer_SUM(sg_graph *g, sg_node *n) { return infer_arith(g, n); }
sg_status sg_infer_MEAN(sg_graph *g, sg_node *n) { return infer_arith(g, n); }

sg_status sg_infer_POW(sg_graph *g, sg_node *n)
{
    /* Base and exponent may differ in type; the result has the base's. */
    sg_shape out;
    SG_TRY(broadcast_all(g, n, false, &out));
    SG_TRY(sg_iu_want_numeric(g, n, 0));
    SG_TRY(sg_iu_want_numeric(g, n, 1));
    return sg_infer_set_output(g, n, 0, sg_iu_dtype(g, n, 0), &out);
}

static sg_status infer_compare(sg_graph *g, sg_node *n)
{
    sg_shape out;
    SG_TRY(broadcast_all(g, n, true, &out));
    return sg_infer_set_output(g, n, 0, SEGRT_DTYPE_BOOL, &out);
}

sg_status sg_infer_EQUAL(sg_graph *g, sg_node *n) { return infer_compare(g, n); }
sg_status sg_infer_LESS(sg_graph *g, sg_node *n) { return infer_compare(g, n); }
sg_status sg_infer_GREATER(sg_graph *g, sg_node *n) { return infer_compare(g, n); }
sg_status sg_infer_LESS_OR_EQUAL(sg_graph *g, sg_node *n) { return infer_compare(g, n); }
sg_status sg_infer_GREATER_OR_EQUAL(sg_graph *g, sg_node *n) { return infer_compare(g, n); }

sg_status sg_infer_BIT_SHIFT(sg_graph *g, sg_node *n)
{
    const char *dir = sg_attr_string(n, "direction", "");
    if (strcmp(dir, "LEFT") != 0 && strcmp(dir, "RIGHT") != 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "direction is `%s`; must be LEFT or RIGHT", dir);
    sg_dtype t = sg_iu_dtype(g, n, 0);
    if (t != SEGRT_DTYPE_UNDEFINED && t != SEGRT_DTYPE_UINT8 && t != SEGRT_DTYPE_UINT16)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input `%s` is %s; BitShift takes unsigned integers",
                             sg_iu_name(g, n, 0), segrt_dtype_name(t));
    return infer_arith(g, n);
}

sg_status sg_infer_MOD(sg_graph *g, sg_node *n)
{
    int64_t fmod_attr = sg_attr_int(n, "fmod", 0);
    if (fmod_attr != 0 && fmod_attr != 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "fmod is %lld; must be 0 or 1", (long long)fmod_attr);
    sg_dtype t = sg_iu_dtype(g, n, 0);
    if (fmod_attr == 0 && t != SEGRT_DTYPE_UNDEFINED && sg_dtype_is_float(t))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "fmod=0 on %s inputs; floats need fmod=1",
                             segrt_dtype_name(t));
    return infer_arith(g, n);
}

static sg_status infer_logic(sg_graph *g, sg_node *n)
{
    SG_TRY(sg_iu_want_dtype(g, n, 0, SEGRT_DTYPE_BOOL));
    SG_TRY(sg_iu_want_dtype(g, n, 1, SEGRT_DTYPE_BOOL));
    sg_shape out;
    SG_TRY(broadcast_all(g, n, true, &out));
    return sg_infer_set_output(g, n, 0, SEGRT_DTYPE_BOOL, &out);
}

sg_status sg_infer_AND(sg_graph *g, sg_node *n) { return infer_logic(g, n); }
sg_status sg_infer_OR(sg_graph *g, sg_node *n) { return infer_logic(g, n); }
sg_status sg_infer_XOR(sg_graph *g, sg_node *n) { return infer_logic(g, n); }

sg_status sg_infer_WHERE(sg_graph *g, sg_node *n)
{
    SG_TRY(sg_iu_want_dtype(g, n, 0, SEGRT_DTYPE_BOOL));
    SG_TRY(sg_iu_same_dtype(g, n, 1, 2));
    sg_shape c, x, y, cx, out;
    SG_TRY(sg_iu_shape(g, n, 0, &c));
    SG_TRY(sg_iu_shape(g, n, 1, &x));
    SG_TRY(sg_iu_shape(g, n, 2, &y));
    SG_TRY(sg_iu_broadcast(g, n, 0, &c, 1, &x, &cx));
    if (sg_infer_broadcast(g, n, &cx, &y, &out) != SEGRT_OK) {
        char a[SG_IU_SHAPE_BUF], b[SG_IU_SHAPE_BUF], d[SG_IU_SHAPE_BUF];
        return sg_node_error(
            n, SEGRT_ERROR_SHAPE,
            "condition `%s` (%s), `%s` (%s) and `%s` (%s) cannot be broadcast together",
            sg_iu_name(g, n, 0), sg_shape_format(g, &c, a, sizeof a), sg_iu_name(g, n, 1),
            sg_shape_format(g, &x, b, sizeof b), sg_iu_name(g, n, 2),
            sg_shape_format(g, &y, d, sizeof d));
    }
    sg_dtype t = sg_iu_dtype(g, n, 1);
    if (t == SEGRT_DTYPE_UNDEFINED)
        t = sg_iu_dtype(g, n, 2);
    return sg_infer_set_output(g, n, 0, t, &out);
}

sg_status sg_infer_PRELU(sg_graph *g, sg_node *n)
{
    SG_TRY(sg_iu_same_dtype(g, n, 0, 1));
    SG_TRY(sg_iu_want_numeric(g, n, 0));
    sg_shape x, slope;
    SG_TRY(sg_iu_shape(g, n, 0, &x));
    SG_TRY(sg_iu_shape(g, n, 1, &slope));
    /* The slope broadcasts to X one way only: the output is X's shape. */
    if (x.rank >= 0 && slope.rank >= 0) {
        bool ok = slope.rank <= x.rank;
        for (int32_t k = 0; ok && k < slope.rank; k++) {
            int64_t sd = slope.d[slope.rank - 1 - k].size, xd = x.d[x.rank - 1 - k].size;
            ok = sd < 0 || sd == 1 || xd < 0 || sd == xd;
        }
        if (!ok) {
            char a[SG_IU_SHAPE_BUF], b[SG_IU_SHAPE_BUF];
            return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                 "slope `%s` (%s) does not broadcast to input `%s` (%s)",
                                 sg_iu_name(g, n, 1), sg_shape_format(g, &slope, a, sizeof a),
                                 sg_iu_name(g, n, 0), sg_shape_format(g, &x, b, sizeof b));
        }
    }
    return sg_infer_set_output(g, n, 0, sg_iu_dtype(g, n, 0), &x);
}
