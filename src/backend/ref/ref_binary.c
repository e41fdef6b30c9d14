/* Binary elementwise ops with numpy broadcasting (Add, Sub, Mul, Div, Pow,
 * Equal, Less, Greater, And, Or, PRelu), the variadic Min, Max, Sum and
 * Mean, and Where.
 *
 * Float operands compute in double and round once on the store (float32
 * Add/Sub/Mul/Div/PRelu take a direct float path, the common case in
 * networks). Integer operands compute in int64 with wrap-around on unsigned
 * values; integer division by zero is an error rather than a trap. */
#include "backend/ref/ref_internal.h"

#include <math.h>
#include <string.h>

static bool is_compare(sg_op op)
{
    return op == SG_OP_EQUAL || op == SG_OP_LESS || op == SG_OP_GREATER || op == SG_OP_LESS_OR_EQUAL ||
           op == SG_OP_GREATER_OR_EQUAL;
}

static bool is_logic(sg_op op)
{
    return op == SG_OP_AND || op == SG_OP_OR || op == SG_OP_XOR;
}

static double bin_f64(sg_op op, double a, double b)
{
    switch (op) {
    case SG_OP_ADD: return a + b;
    case SG_OP_SUB: return a - b;
    case SG_OP_MUL: return a * b;
    case SG_OP_DIV: return a / b;
    case SG_OP_POW: return pow(a, b);
    case SG_OP_PRELU: return a < 0 ? a * b : a;
    case SG_OP_EQUAL: return a == b;
    case SG_OP_LESS: return a < b;
    case SG_OP_GREATER: return a > b;
    case SG_OP_LESS_OR_EQUAL: return a <= b;
    case SG_OP_GREATER_OR_EQUAL: return a >= b;
    case SG_OP_AND: return (a != 0) && (b != 0);
    case SG_OP_OR: return (a != 0) || (b != 0);
    case SG_OP_XOR: return (a != 0) != (b != 0);
    case SG_OP_MOD: return fmod(a, b); /* floats take fmod=1 only: C's fmod, the dividend's sign */
    case SG_OP_MIN: return ref_min_nan(a, b);
    case SG_OP_MAX: return ref_max_nan(a, b);
    case SG_OP_SUM:
    case SG_OP_MEAN: return a + b;
    default: return NAN;
    }
}

/* Integer power by squaring, wrapping like the fixed-width result would. */
static int64_t ipow_wrap(int64_t base, int64_t e)
{
    uint64_t r = 1, b = (uint64_t)base;
    while (e > 0) {
        if (e & 1)
            r *= b;
        b *= b;
        e >>= 1;
    }
    return (int64_t)r;
}

/* false on integer division by zero (and 0 to a negative power). */
static bool bin_i64(sg_op op, int64_t a, int64_t b, int64_t *r)
{
    switch (op) {
    case SG_OP_ADD:
    case SG_OP_SUM:
    case SG_OP_MEAN: *r = ref_add_wrap(a, b); return true;
    case SG_OP_SUB: *r = ref_sub_wrap(a, b); return true;
    case SG_OP_MUL: *r = ref_mul_wrap(a, b); return true;
    case SG_OP_DIV:
        if (b == 0)
            return false;
        /* INT64_MIN / -1 overflows; the wrapped result is INT64_MIN. */
        *r = b == -1 ? ref_sub_wrap(0, a) : a / b; /* truncates, as C and ORT do */
        return true;
    case SG_OP_POW:
        if (b >= 0)
            *r = ipow_wrap(a, b);
        else if (a == 1)
            *r = 1;
        else if (a == -1)
            *r = (b & 1) ? -1 : 1;
        else if (a == 0)
            return false;
        else
            *r = 0; /* |a^b| < 1 truncates to 0 */
        return true;
    case SG_OP_PRELU: *r = a < 0 ? ref_mul_wrap(a, b) : a; return true;
    case SG_OP_EQUAL: *r = a == b; return true;
    case SG_OP_LESS: *r = a < b; return true;
    case SG_OP_GREATER: *r = a > b; return true;
    case SG_OP_LESS_OR_EQUAL: *r = a <= b; return true;
    case SG_OP_GREATER_OR_EQUAL: *r = a >= b; return true;
    case SG_OP_AND: *r = (a != 0) && (b != 0); return true;
    case SG_OP_OR: *r = (a != 0) || (b != 0); return true;
    case SG_OP_XOR: *r = (a != 0) != (b != 0); return true;
    case SG_OP_BIT_SHIFT: /* unsigned operands; *r in: 1 for LEFT */
        if (b < 0 || b >= 64)
            *r = 0;
        else
            *r = *r ? (int64_t)((uint64_t)a << b) : (int64_t)((uint64_t)a >> b);
        return true;
    case SG_OP_MOD:
        if (b == 0)
            return false;
        /* fmod=1 (imod false): C's remainder, the dividend's sign; fmod=0:
         * Python's, the divisor's (the caller passes which in *r). */
        {
            bool python = *r != 0;
            int64_t m = b == -1 ? 0 : a % b;
            if (python && m != 0 && ((m < 0) != (b < 0)))
                m += b;
            *r = m;
        }
        return true;
    case SG_OP_MIN: *r = a < b ? a : b; return true;
    case SG_OP_MAX: *r = a > b ? a : b; return true;
    default: *r = 0; return true;
    }
}

static sg_status div_zero(const sg_node *n)
{
    return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "integer division by zero");
}

/* One row of a float32 op with a direct float loop; false when op has
 * none (the caller takes the general path). */
static bool row_f32(sg_op op, const float *a, int64_t sa, const float *b, int64_t sb, float *y,
                    int64_t len)
{
    switch (op) {
    case SG_OP_ADD:
        for (int64_t j = 0; j < len; j++)
            y[j] = a[j * sa] + b[j * sb];
        return true;
    case SG_OP_SUB:
        for (int64_t j = 0; j < len; j++)
            y[j] = a[j * sa] - b[j * sb];
        return true;
    case SG_OP_MUL:
        for (int64_t j = 0; j < len; j++)
            y[j] = a[j * sa] * b[j * sb];
        return true;
    case SG_OP_DIV:
        for (int64_t j = 0; j < len; j++)
            y[j] = a[j * sa] / b[j * sb];
        return true;
    case SG_OP_PRELU:
        for (int64_t j = 0; j < len; j++) {
            float v = a[j * sa];
            y[j] = v < 0 ? v * b[j * sb] : v;
        }
        return true;
    default: return false;
    }
}

REF_KERNEL(sg_ref_binary)
{
    const sg_tensor *a, *b;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &a));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &b));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    sg_op op = n->op;
    if (op != SG_OP_POW && a->dtype != b->dtype)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "inputs have different dtypes (%s and %s)",
                             segrt_dtype_name(a->dtype), segrt_dtype_name(b->dtype));
    if (is_logic(op))
        SG_TRY(sg_ref_check_dtype(n, a, SEGRT_DTYPE_BOOL, "input"));
    SG_TRY(sg_ref_check_dtype(n, y, is_compare(op) || is_logic(op) ? SEGRT_DTYPE_BOOL : a->dtype, "output"));
    bool python_mod = op == SG_OP_MOD && sg_attr_int(n, "fmod", 0) == 0;
    bool left = op == SG_OP_BIT_SHIFT && strcmp(sg_attr_string(n, "direction", ""), "LEFT") == 0;
    if (op == SG_OP_BIT_SHIFT && (a->dtype != SEGRT_DTYPE_UINT8 && a->dtype != SEGRT_DTYPE_UINT16))
        return sg_ref_unsupported_dtype(n, a->dtype);
    if (op == SG_OP_MOD && python_mod && sg_dtype_is_float(a->dtype))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "fmod=0 on float inputs; floats need fmod=1");
    const sg_tensor *ops[2] = {a, b};
    ref_bcast bc;
    SG_TRY(sg_ref_bcast_init(n, &bc, y->dims, y->rank, ops, 2));

    int64_t idx[SEGRT_MAX_RANK] = {0}, off[REF_BCAST_MAX] = {0};
    int64_t sa = bc.strides[0][bc.rank - 1], sb = bc.strides[1][bc.rank - 1];
    /* Floats compute in floating point; so does an integer base raised to
     * a float exponent (then truncated on the store, as Cast would). */
    bool use_float = sg_dtype_is_float(a->dtype) || sg_dtype_is_float(b->dtype);

    if (a->dtype == SEGRT_DTYPE_FLOAT32 && b->dtype == SEGRT_DTYPE_FLOAT32 &&
        y->dtype == SEGRT_DTYPE_FLOAT32 && row_f32(op, a->data, 0, b->data, 0, y->data, 0)) {
        for (int64_t r = 0; r < bc.rows; r++) {
            row_f32(op, (const float *)a->data + off[0], sa, (const float *)b->data + off[1], sb,
                    (float *)y->data + r * bc.inner, bc.inner);
            sg_ref_bcast_next(&bc, idx, off);
        }
        return SEGRT_OK;
    }
    for (int64_t r = 0; r < bc.rows; r++) {
        int64_t yo = r * bc.inner;
        if (use_float) {
            for (int64_t j = 0; j < bc.inner; j++) {
                double va = sg_dtype_load_f64(a->dtype, a->data, off[0] + j * sa);
                double vb = sg_dtype_load_f64(b->dtype, b->data, off[1] + j * sb);
                sg_dtype_store_f64(y->dtype, y->data, yo + j, bin_f64(op, va, vb));
            }
        } else {
            for (int64_t j = 0; j < bc.inner; j++) {
                int64_t va = sg_dtype_load_i64(a->dtype, a->data, off[0] + j * sa);
                int64_t vb = sg_dtype_load_i64(b->dtype, b->data, off[1] + j * sb);
                int64_t v = op == SG_OP_MOD ? python_mod : left; /* Mod's rule or the shift's way in, the result out */
                if (!bin_i64(op, va, vb, &v))
                    return div_zero(n);
                sg_dtype_store_i64(y->dtype, y->data, yo + j, v);
            }
        }
        sg_ref_bcast_next(&bc, idx, off);
    }
    return SEGRT_OK;
}

/* Folds input t into the accumulator acc (output-shaped) with op; the first
 * input is copied in. */
static sg_status fold_input(const sg_node *n, const sg_tensor *y, const sg_tensor *t, bool first,
                            bool use_float, double *accf, int64_t *acci)
{
    ref_bcast bc;
    SG_TRY(sg_ref_bcast_init(n, &bc, y->dims, y->rank, &t, 1));
    int64_t idx[SEGRT_MAX_RANK] = {0}, off[REF_BCAST_MAX] = {0};
    int64_t st = bc.strides[0][bc.rank - 1];
    for (int64_t r = 0; r < bc.rows; r++) {
        int64_t yo = r * bc.inner;
        for (int64_t j = 0; j < bc.inner; j++) {
            int64_t k = off[0] + j * st;
            if (use_float) {
                double v = sg_dtype_load_f64(t->dtype, t->data, k);
                accf[yo + j] = first ? v : bin_f64(n->op, accf[yo + j], v);
            } else {
                int64_t v = sg_dtype_load_i64(t->dtype, t->data, k);
                if (first)
                    acci[yo + j] = v;
                else
                    bin_i64(n->op, acci[yo + j], v, &acci[yo + j]);
            }
        }
        sg_ref_bcast_next(&bc, idx, off);
    }
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_variadic)
{
    sg_tensor *y;
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    int32_t count = n_in;
    if (count < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs at least one input");
    for (int32_t i = 0; i < count; i++) {
        const sg_tensor *t;
        SG_TRY(sg_ref_need_in(n, in, n_in, i, &t));
        SG_TRY(sg_ref_check_dtype(n, t, y->dtype, "input"));
    }
    bool use_float = sg_dtype_is_float(y->dtype);
    if (!use_float && !sg_dtype_is_integer(y->dtype))
        return sg_ref_unsupported_dtype(n, y->dtype);
    int64_t numel = sg_ref_numel(y);
    size_t esize = use_float ? sizeof(double) : sizeof(int64_t);
    void *acc = sg_malloc(esize * (size_t)(numel ? numel : 1));
    if (!acc)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    double *accf = use_float ? acc : NULL;
    int64_t *acci = use_float ? NULL : acc;
    sg_status s = SEGRT_OK;
    for (int32_t i = 0; i < count && s == SEGRT_OK; i++)
        s = fold_input(n, y, in[i], i == 0, use_float, accf, acci);
    if (s == SEGRT_OK) {
        for (int64_t k = 0; k < numel; k++) {
            if (use_float) {
                double v = accf[k];
                if (n->op == SG_OP_MEAN)
                    v /= count;
                sg_dtype_store_f64(y->dtype, y->data, k, v);
            } else {
                int64_t v = acci[k];
                if (n->op == SG_OP_MEAN)
                    v /= count;
                sg_dtype_store_i64(y->dtype, y->data, k, v);
            }
        }
    }
    free(acc);
    return s;
}

REF_KERNEL(sg_ref_where)
{
    const sg_tensor *c, *x, *yv;
    sg_tensor *o;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &c));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &x));
    SG_TRY(sg_ref_need_in(n, in, n_in, 2, &yv));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &o));
    SG_TRY(sg_ref_check_dtype(n, c, SEGRT_DTYPE_BOOL, "condition"));
    SG_TRY(sg_ref_check_dtype(n, x, o->dtype, "X"));
    SG_TRY(sg_ref_check_dtype(n, yv, o->dtype, "Y"));
    const sg_tensor *ops[3] = {c, x, yv};
    ref_bcast bc;
    SG_TRY(sg_ref_bcast_init(n, &bc, o->dims, o->rank, ops, 3));
    size_t es = segrt_dtype_size(o->dtype);
    int64_t idx[SEGRT_MAX_RANK] = {0}, off[REF_BCAST_MAX] = {0};
    int64_t sc = bc.strides[0][bc.rank - 1], sx = bc.strides[1][bc.rank - 1],
            sy = bc.strides[2][bc.rank - 1];
    const uint8_t *cd = c->data;
    const char *xd = x->data, *yd = yv->data;
    char *od = o->data;
    for (int64_t r = 0; r < bc.rows; r++) {
        int64_t oo = r * bc.inner;
        for (int64_t j = 0; j < bc.inner; j++) {
            const char *src = cd[off[0] + j * sc] ? xd + (size_t)(off[1] + j * sx) * es
                                                  : yd + (size_t)(off[2] + j * sy) * es;
            ref_copy_elem(od + (size_t)(oo + j) * es, src, es);
        }
        sg_ref_bcast_next(&bc, idx, off);
    }
    return SEGRT_OK;
}
