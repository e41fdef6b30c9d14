/* Unary activations and math, and Clip.
 *
 * Float inputs of every width are computed in double through one scalar
 * function per op and rounded once on the store, which is at least as
 * accurate as computing in the input's own precision. Integer inputs (for
 * the ops the spec allows them: Relu, Neg, Abs, Clip) compute in int64 with
 * wrap-around done on unsigned values. */
#include "backend/ref/ref_internal.h"

#include <float.h>
#include <math.h>
#include <string.h>

typedef struct unary_params {
    double alpha, beta, gamma;
    bool tanh_approx;
} unary_params;

typedef double (*unary_f64_fn)(double x, const unary_params *p);

static double un_relu(double x, const unary_params *p)
{
    (void)p;
    return x < 0 ? 0.0 : x; /* NaN stays NaN */
}

static double un_leaky_relu(double x, const unary_params *p) { return x < 0 ? p->alpha * x : x; }

static double un_elu(double x, const unary_params *p) { return x < 0 ? p->alpha * expm1(x) : x; }

static double un_selu(double x, const unary_params *p)
{
    return x <= 0 ? p->gamma * p->alpha * expm1(x) : p->gamma * x;
}

static double un_sigmoid(double x, const unary_params *p)
{
    (void)p;
    /* Written so that neither branch overflows exp. */
    if (x >= 0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

static double un_hard_sigmoid(double x, const unary_params *p)
{
    double v = p->alpha * x + p->beta;
    return v < 0 ? 0.0 : (v > 1 ? 1.0 : v);
}

static double un_hard_swish(double x, const unary_params *p)
{
    (void)p;
    /* The spec defines it as HardSigmoid with alpha = 1/6, an attribute
     * value and so a float: float64 inputs see that rounding. */
    double v = x * (double)(1.0f / 6.0f) + 0.5;
    return x * (v < 0 ? 0.0 : (v > 1 ? 1.0 : v));
}

static double un_tanh(double x, const unary_params *p)
{
    (void)p;
    return tanh(x);
}

static double un_softplus(double x, const unary_params *p)
{
    (void)p;
    /* log(1 + e^x) without overflow for large x. */
    return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
}

static double un_gelu(double x, const unary_params *p)
{
    if (p->tanh_approx) {
        const double k = 0.7978845608028654; /* sqrt(2 / pi) */
        return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
    }
    return 0.5 * x * (1.0 + erf(x * 0.7071067811865476));
}

static double un_erf(double x, const unary_params *p)
{
    (void)p;
    return erf(x);
}

static double un_sqrt(double x, const unary_params *p)
{
    (void)p;
    return sqrt(x);
}

static double un_exp(double x, const unary_params *p)
{
    (void)p;
    return exp(x);
}

static double un_log(double x, const unary_params *p)
{
    (void)p;
    return log(x);
}

static double un_neg(double x, const unary_params *p)
{
    (void)p;
    return -x;
}

static double un_abs(double x, const unary_params *p)
{
    (void)p;
    return fabs(x);
}

static double un_reciprocal(double x, const unary_params *p)
{
    (void)p;
    return 1.0 / x;
}

static double un_floor(double x, const unary_params *p)
{
    (void)p;
    return floor(x);
}

static double un_ceil(double x, const unary_params *p)
{
    (void)p;
    return ceil(x);
}

static double un_sin(double x, const unary_params *p)
{
    (void)p;
    return sin(x);
}

static double un_cos(double x, const unary_params *p)
{
    (void)p;
    return cos(x);
}

static double un_sign(double x, const unary_params *p)
{
    (void)p;
    return x > 0 ? 1.0 : x < 0 ? -1.0 : x; /* 0 and NaN stay as they are */
}

static double un_round(double x, const unary_params *p)
{
    (void)p;
    return nearbyint(x); /* halves to even, the default rounding mode (the spec's rule) */
}

static double un_mish(double x, const unary_params *p)
{
    /* x tanh(softplus(x)) */
    return x * tanh(un_softplus(x, p));
}

static double un_softsign(double x, const unary_params *p)
{
    (void)p;
    return x / (1.0 + fabs(x));
}

static unary_f64_fn unary_float_fn(sg_op op)
{
    switch (op) {
    case SG_OP_RELU: return un_relu;
    case SG_OP_LEAKY_RELU: return un_leaky_relu;
    case SG_OP_ELU: return un_elu;
    case SG_OP_SELU: return un_selu;
    case SG_OP_SIGMOID: return un_sigmoid;
    case SG_OP_HARD_SIGMOID: return un_hard_sigmoid;
    case SG_OP_HARD_SWISH: return un_hard_swish;
    case SG_OP_TANH: return un_tanh;
    case SG_OP_SOFTPLUS: return un_softplus;
    case SG_OP_GELU: return un_gelu;
    case SG_OP_ERF: return un_erf;
    case SG_OP_SQRT: return un_sqrt;
    case SG_OP_EXP: return un_exp;
    case SG_OP_LOG: return un_log;
    case SG_OP_NEG: return un_neg;
    case SG_OP_ABS: return un_abs;
    case SG_OP_RECIPROCAL: return un_reciprocal;
    case SG_OP_FLOOR: return un_floor;
    case SG_OP_CEIL: return un_ceil;
    case SG_OP_SIN: return un_sin;
    case SG_OP_COS: return un_cos;
    case SG_OP_SIGN: return un_sign;
    case SG_OP_ROUND: return un_round;
    case SG_OP_MISH: return un_mish;
    case SG_OP_SOFTSIGN: return un_softsign;
    default: return NULL;
    }
}

static sg_status read_params(const sg_node *n, unary_params *p)
{
    memset(p, 0, sizeof *p);
    switch (n->op) {
    case SG_OP_LEAKY_RELU: p->alpha = sg_attr_float(n, "alpha", 0.01f); break;
    case SG_OP_ELU: p->alpha = sg_attr_float(n, "alpha", 1.0f); break;
    case SG_OP_SELU:
        p->alpha = sg_attr_float(n, "alpha", 1.67326319217681884765625f);
        p->gamma = sg_attr_float(n, "gamma", 1.05070102214813232421875f);
        break;
    case SG_OP_HARD_SIGMOID:
        p->alpha = sg_attr_float(n, "alpha", 0.2f);
        p->beta = sg_attr_float(n, "beta", 0.5f);
        break;
    case SG_OP_GELU: {
        const char *approx = sg_attr_string(n, "approximate", "none");
        if (strcmp(approx, "tanh") == 0)
            p->tanh_approx = true;
        else if (strcmp(approx, "none") != 0)
            return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "approximate=\"%s\" is not supported",
                                 approx);
        break;
    }
    default: break;
    }
    return SEGRT_OK;
}

/* Integer forms of the ops the spec defines on integers. */
static bool unary_int(sg_op op, int64_t x, int64_t *y)
{
    switch (op) {
    case SG_OP_RELU: *y = x < 0 ? 0 : x; return true;
    case SG_OP_NEG: *y = ref_sub_wrap(0, x); return true;
    case SG_OP_ABS: *y = x < 0 ? ref_sub_wrap(0, x) : x; return true;
    case SG_OP_SIGN: *y = x > 0 ? 1 : x < 0 ? -1 : 0; return true;
    default: return false;
    }
}

REF_KERNEL(sg_ref_unary)
{
    const sg_tensor *x;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_same_numel(n, x, y));
    int64_t count = sg_ref_numel(x);

    if (n->op == SG_OP_IS_NAN || n->op == SG_OP_IS_INF) {
        if (!sg_dtype_is_float(x->dtype))
            return sg_ref_unsupported_dtype(n, x->dtype);
        SG_TRY(sg_ref_check_dtype(n, y, SEGRT_DTYPE_BOOL, "output"));
        bool neg = sg_attr_int(n, "detect_negative", 1) != 0, pos = sg_attr_int(n, "detect_positive", 1) != 0;
        uint8_t *ys = y->data;
        for (int64_t i = 0; i < count; i++) {
            double v = sg_dtype_load_f64(x->dtype, x->data, i);
            ys[i] = n->op == SG_OP_IS_NAN ? isnan(v) : isinf(v) && (v > 0 ? pos : neg);
        }
        return SEGRT_OK;
    }
    if (n->op == SG_OP_NOT) {
        SG_TRY(sg_ref_check_dtype(n, x, SEGRT_DTYPE_BOOL, "input"));
        SG_TRY(sg_ref_check_dtype(n, y, SEGRT_DTYPE_BOOL, "output"));
        const uint8_t *xs = x->data;
        uint8_t *ys = y->data;
        for (int64_t i = 0; i < count; i++)
            ys[i] = !xs[i];
        return SEGRT_OK;
    }
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));

    if (sg_dtype_is_integer(x->dtype)) {
        int64_t probe;
        if (!unary_int(n->op, 0, &probe))
            return sg_ref_unsupported_dtype(n, x->dtype);
        for (int64_t i = 0; i < count; i++) {
            int64_t v = 0;
            unary_int(n->op, sg_dtype_load_i64(x->dtype, x->data, i), &v);
            sg_dtype_store_i64(y->dtype, y->data, i, v);
        }
        return SEGRT_OK;
    }
    unary_f64_fn f = unary_float_fn(n->op);
    if (!f || !sg_dtype_is_float(x->dtype))
        return f ? sg_ref_unsupported_dtype(n, x->dtype)
                 : sg_node_error(n, SEGRT_ERROR_INTERNAL, "not a unary operator");
    unary_params p;
    SG_TRY(read_params(n, &p));
    if (x->dtype == SEGRT_DTYPE_FLOAT32) {
        const float *xs = x->data;
        float *ys = y->data;
        /* The activations of every conv block get direct loops; the float
         * product rounds exactly as the double one does. */
        if (n->op == SG_OP_RELU) {
            for (int64_t i = 0; i < count; i++)
                ys[i] = xs[i] < 0 ? 0.0f : xs[i];
        } else if (n->op == SG_OP_LEAKY_RELU) {
            float alpha = (float)p.alpha;
            for (int64_t i = 0; i < count; i++)
                ys[i] = xs[i] < 0 ? alpha * xs[i] : xs[i];
        } else {
            for (int64_t i = 0; i < count; i++)
                ys[i] = (float)f(xs[i], &p);
        }
    } else if (x->dtype == SEGRT_DTYPE_FLOAT64) {
        const double *xs = x->data;
        double *ys = y->data;
        for (int64_t i = 0; i < count; i++)
            ys[i] = f(xs[i], &p);
    } else {
        /* float16 and bfloat16: computed in float, as the spec's reference
         * does, then rounded back. */
        for (int64_t i = 0; i < count; i++)
            sg_dtype_store_f64(y->dtype, y->data, i,
                               (float)f(sg_dtype_load_f64(x->dtype, x->data, i), &p));
    }
    return SEGRT_OK;
}

/* Clip: bounds from inputs 1 and 2 (opset 11+) or the min/max attributes
 * (opset 6), each optional. */
REF_KERNEL(sg_ref_clip)
{
    const sg_tensor *x, *tlo, *thi;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 1, &tlo));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 2, &thi));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_same_numel(n, x, y));
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));
    const sg_tensor *bounds[2] = {tlo, thi};
    for (int32_t k = 0; k < 2; k++)
        if (bounds[k] && sg_ref_numel(bounds[k]) != 1)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "%s must be a scalar",
                                 k ? "max" : "min");
    int64_t count = sg_ref_numel(x);

    if (sg_dtype_is_integer(x->dtype)) {
        int64_t lo = INT64_MIN, hi = INT64_MAX;
        if (tlo)
            lo = sg_dtype_load_i64(tlo->dtype, tlo->data, 0);
        if (thi)
            hi = sg_dtype_load_i64(thi->dtype, thi->data, 0);
        for (int64_t i = 0; i < count; i++) {
            int64_t v = sg_dtype_load_i64(x->dtype, x->data, i);
            v = v < lo ? lo : v;
            v = v > hi ? hi : v;
            sg_dtype_store_i64(y->dtype, y->data, i, v);
        }
        return SEGRT_OK;
    }
    if (!sg_dtype_is_float(x->dtype))
        return sg_ref_unsupported_dtype(n, x->dtype);
    /* An absent bound is the dtype's largest finite value, as the spec's
     * numeric_limits default and onnxruntime have it: Inf clips to it. */
    double big = x->dtype == SEGRT_DTYPE_FLOAT64    ? DBL_MAX
                 : x->dtype == SEGRT_DTYPE_FLOAT16  ? 65504.0
                 : x->dtype == SEGRT_DTYPE_BFLOAT16 ? 3.3895313892515355e38
                                                    : FLT_MAX;
    double lo, hi;
    if (tlo)
        lo = sg_dtype_load_f64(tlo->dtype, tlo->data, 0);
    else
        lo = sg_attr_find(n, "min") ? sg_attr_float(n, "min", 0) : -big;
    if (thi)
        hi = sg_dtype_load_f64(thi->dtype, thi->data, 0);
    else
        hi = sg_attr_find(n, "max") ? sg_attr_float(n, "max", 0) : big;
    for (int64_t i = 0; i < count; i++) {
        double v = sg_dtype_load_f64(x->dtype, x->data, i);
        v = v < lo ? lo : v; /* NaN compares false both times and stays NaN */
        v = v > hi ? hi : v;
        sg_dtype_store_f64(y->dtype, y->data, i, v);
    }
    return SEGRT_OK;
}
