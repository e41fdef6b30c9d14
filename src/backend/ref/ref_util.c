/* Checks, broadcasting and dtype staging shared by the reference kernels. */
#include "backend/ref/ref_internal.h"

#include <string.h>

const sg_tensor *sg_ref_in(const sg_tensor *const *in, int32_t n_in, int32_t i)
{
    if (!in || i < 0 || i >= n_in)
        return NULL;
    return in[i];
}

/* A tensor reaching a kernel must have a rank segrt supports, non-negative
 * dims whose product fits, a dtype segrt stores, and data wherever it has
 * elements. Anything else would make index arithmetic below unsafe. */
static sg_status check_tensor(const sg_node *n, const sg_tensor *t, const char *what, int32_t i)
{
    if (t->rank < 0 || t->rank > SEGRT_MAX_RANK)
        return sg_node_error(n, SEGRT_ERROR_INTERNAL, "%s %d has rank %d", what, i, t->rank);
    int64_t numel;
    if (!sg_dims_product(t->dims, t->rank, &numel))
        return sg_node_error(n, SEGRT_ERROR_INTERNAL, "%s %d has invalid dims", what, i);
    /* Shape inference allows no dim beyond 2^40; holding kernels to the
     * same bound keeps their index arithmetic far from overflow even for
     * empty tensors with a huge dim. */
    for (int32_t d = 0; d < t->rank; d++)
        if (t->dims[d] > SG_MAX_DIM)
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "%s %d has a dim of %lld", what, i,
                                 (long long)t->dims[d]);
    if (!sg_dtype_is_supported(t->dtype))
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%s %d has unsupported dtype %s", what, i,
                             segrt_dtype_name(t->dtype));
    if (numel > 0 && !t->data)
        return sg_node_error(n, SEGRT_ERROR_INTERNAL, "%s %d has no data", what, i);
    return SEGRT_OK;
}

sg_status sg_ref_opt_in(const sg_node *n, const sg_tensor *const *in, int32_t n_in, int32_t i,
                        const sg_tensor **t)
{
    *t = sg_ref_in(in, n_in, i);
    return *t ? check_tensor(n, *t, "input", i) : SEGRT_OK;
}

sg_status sg_ref_need_in(const sg_node *n, const sg_tensor *const *in, int32_t n_in, int32_t i,
                         const sg_tensor **t)
{
    SG_TRY(sg_ref_opt_in(n, in, n_in, i, t));
    if (!*t)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "required input %d is missing", i);
    return SEGRT_OK;
}

sg_status sg_ref_opt_out(const sg_node *n, sg_tensor *const *out, int32_t n_out, int32_t j,
                         sg_tensor **t)
{
    *t = (out && j >= 0 && j < n_out) ? out[j] : NULL;
    return *t ? check_tensor(n, *t, "output", j) : SEGRT_OK;
}

sg_status sg_ref_need_out(const sg_node *n, sg_tensor *const *out, int32_t n_out, int32_t j,
                          sg_tensor **t)
{
    SG_TRY(sg_ref_opt_out(n, out, n_out, j, t));
    if (!*t)
        return sg_node_error(n, SEGRT_ERROR_INTERNAL, "required output %d was not given", j);
    return SEGRT_OK;
}

int64_t sg_ref_numel(const sg_tensor *t) { return sg_tensor_numel(t); }

sg_status sg_ref_out_dims_error(const sg_node *n, const sg_tensor *o, const int64_t *want,
                                int32_t want_rank)
{
    char a[160], b[160];
    return sg_node_error(n, SEGRT_ERROR_SHAPE, "output dims %s do not match the computed %s",
                         sg_dims_format(o->dims, o->rank, a, sizeof a),
                         sg_dims_format(want, want_rank, b, sizeof b));
}

sg_status sg_ref_check_out_dims(const sg_node *n, const sg_tensor *o, const int64_t *want,
                                int32_t want_rank)
{
    if (o->rank != want_rank)
        return sg_ref_out_dims_error(n, o, want, want_rank);
    for (int32_t i = 0; i < want_rank; i++)
        if (o->dims[i] != want[i])
            return sg_ref_out_dims_error(n, o, want, want_rank);
    return SEGRT_OK;
}

sg_status sg_ref_check_same_numel(const sg_node *n, const sg_tensor *a, const sg_tensor *b)
{
    if (sg_ref_numel(a) != sg_ref_numel(b)) {
        char sa[160], sb[160];
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "%s and %s have different element counts",
                             sg_dims_format(a->dims, a->rank, sa, sizeof sa),
                             sg_dims_format(b->dims, b->rank, sb, sizeof sb));
    }
    return SEGRT_OK;
}

sg_status sg_ref_check_dtype(const sg_node *n, const sg_tensor *t, sg_dtype want, const char *what)
{
    if (t->dtype != want)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "%s is %s, expected %s", what,
                             segrt_dtype_name(t->dtype), segrt_dtype_name(want));
    return SEGRT_OK;
}

sg_status sg_ref_unsupported_dtype(const sg_node *n, sg_dtype t)
{
    return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "dtype %s is not supported here",
                         segrt_dtype_name(t));
}

sg_status sg_ref_read_ints(const sg_node *n, const sg_tensor *t, int64_t *vals, int32_t cap,
                           int32_t *count, const char *what)
{
    *count = 0;
    if (!sg_dtype_is_integer(t->dtype))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "%s must be an integer tensor, not %s",
                             what, segrt_dtype_name(t->dtype));
    int64_t numel = sg_ref_numel(t);
    if (numel > cap)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "%s has %lld values; at most %d allowed",
                             what, (long long)numel, cap);
    for (int64_t i = 0; i < numel; i++)
        vals[i] = sg_dtype_load_i64(t->dtype, t->data, i);
    *count = (int32_t)numel;
    return SEGRT_OK;
}

sg_status sg_ref_axis(const sg_node *n, int64_t axis, int32_t rank, int32_t *out)
{
    *out = 0;
    if (axis < -(int64_t)rank || axis >= rank)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "axis %lld is out of range for rank %d",
                             (long long)axis, rank);
    *out = (int32_t)(axis < 0 ? axis + rank : axis);
    return SEGRT_OK;
}

void sg_ref_strides(const int64_t *dims, int32_t rank, int64_t *strides)
{
    int64_t s = 1;
    for (int32_t i = rank - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i];
    }
}

sg_status sg_ref_bcast_init(const sg_node *n, ref_bcast *b, const int64_t *out_dims,
                            int32_t out_rank, const sg_tensor *const *ops, int32_t n_ops)
{
    SG_ASSERT(n_ops >= 1 && n_ops <= REF_BCAST_MAX);
    memset(b, 0, sizeof *b);
    int64_t st[REF_BCAST_MAX][SEGRT_MAX_RANK];
    for (int32_t k = 0; k < n_ops; k++) {
        const sg_tensor *t = ops[k];
        if (t->rank > out_rank)
            goto mismatch;
        int64_t tst[SEGRT_MAX_RANK];
        sg_ref_strides(t->dims, t->rank, tst);
        for (int32_t i = 0; i < out_rank; i++) {
            int32_t ti = i - (out_rank - t->rank);
            int64_t d = ti >= 0 ? t->dims[ti] : 1;
            if (d == out_dims[i])
                st[k][i] = d == 1 ? 0 : tst[ti];
            else if (d == 1)
                st[k][i] = 0;
            else
                goto mismatch;
        }
    }
    /* Drop size-1 dims and merge neighbours every operand walks
     * contiguously (or broadcasts along both). */
    memset(b, 0, sizeof *b);
    b->n = n_ops;
    int32_t r = 0;
    for (int32_t i = 0; i < out_rank; i++) {
        if (out_dims[i] == 1)
            continue;
        bool merge = r > 0;
        for (int32_t k = 0; k < n_ops && merge; k++)
            merge = b->strides[k][r - 1] == st[k][i] * out_dims[i];
        if (merge) {
            b->dims[r - 1] *= out_dims[i];
            for (int32_t k = 0; k < n_ops; k++)
                b->strides[k][r - 1] = st[k][i];
        } else {
            b->dims[r] = out_dims[i];
            for (int32_t k = 0; k < n_ops; k++)
                b->strides[k][r] = st[k][i];
            r++;
        }
    }
    if (r == 0) {
        b->dims[0] = 1;
        for (int32_t k = 0; k < n_ops; k++)
            b->strides[k][0] = 0;
        r = 1;
    }
    b->rank = r;
    b->inner = b->dims[r - 1];
    b->rows = 1;
    for (int32_t i = 0; i < r - 1; i++)
        b->rows *= b->dims[i];
    /* An empty output has nothing to walk. */
    for (int32_t i = 0; i < out_rank; i++)
        if (out_dims[i] == 0)
            b->rows = 0;
    return SEGRT_OK;

mismatch:;
    char so[160], si[160];
    for (int32_t k = 0; k < n_ops; k++) {
        const sg_tensor *t = ops[k];
        bool ok = t->rank <= out_rank;
        for (int32_t i = 0; ok && i < t->rank; i++) {
            int64_t d = t->dims[i], o = out_dims[i + out_rank - t->rank];
            ok = d == o || d == 1;
        }
        if (!ok)
            return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                 "input %d of dims %s does not broadcast to %s", k,
                                 sg_dims_format(t->dims, t->rank, si, sizeof si),
                                 sg_dims_format(out_dims, out_rank, so, sizeof so));
    }
    return sg_node_error(n, SEGRT_ERROR_SHAPE, "inputs do not broadcast");
}

void sg_ref_bcast_next(const ref_bcast *b, int64_t *idx, int64_t *off)
{
    for (int32_t i = b->rank - 2; i >= 0; i--) {
        idx[i]++;
        for (int32_t k = 0; k < b->n; k++)
            off[k] += b->strides[k][i];
        if (idx[i] < b->dims[i])
            return;
        for (int32_t k = 0; k < b->n; k++)
            off[k] -= b->strides[k][i] * b->dims[i];
        idx[i] = 0;
    }
}

float *sg_ref_to_f32(const sg_tensor *t)
{
    int64_t count = sg_ref_numel(t);
    float *v = sg_malloc(sizeof(float) * (size_t)(count ? count : 1));
    if (!v)
        return NULL;
    if (t->dtype == SEGRT_DTYPE_FLOAT32)
        memcpy(v, t->data, sizeof(float) * (size_t)count);
    else
        for (int64_t i = 0; i < count; i++)
            v[i] = (float)sg_dtype_load_f64(t->dtype, t->data, i);
    return v;
}

double *sg_ref_to_f64(const sg_tensor *t)
{
    int64_t count = sg_ref_numel(t);
    double *v = sg_malloc(sizeof(double) * (size_t)(count ? count : 1));
    if (!v)
        return NULL;
    for (int64_t i = 0; i < count; i++)
        v[i] = sg_dtype_load_f64(t->dtype, t->data, i);
    return v;
}

void sg_ref_from_f32(sg_tensor *t, const float *v, int64_t count)
{
    if (t->dtype == SEGRT_DTYPE_FLOAT32) {
        memcpy(t->data, v, sizeof(float) * (size_t)count);
        return;
    }
    for (int64_t i = 0; i < count; i++)
        sg_dtype_store_f64(t->dtype, t->data, i, v[i]);
}

void sg_ref_from_f64(sg_tensor *t, const double *v, int64_t count)
{
    for (int64_t i = 0; i < count; i++)
        sg_dtype_store_f64(t->dtype, t->data, i, v[i]);
}

void sg_ref_strided_copy(void *dst, const void *src, size_t esize, int32_t rank,
                         const int64_t *dims, int64_t src_off, const int64_t *src_strides)
{
    int64_t numel = 1;
    for (int32_t i = 0; i < rank; i++)
        numel *= dims[i];
    if (numel == 0)
        return;
    if (rank == 0) {
        memcpy(dst, (const char *)src + (size_t)src_off * esize, esize);
        return;
    }
    int64_t inner = dims[rank - 1], st = src_strides[rank - 1];
    int64_t idx[SEGRT_MAX_RANK] = {0};
    int64_t off = src_off;
    char *d = dst;
    const char *s = src;
    for (int64_t row = 0; row < numel / inner; row++) {
        if (st == 1) {
            memcpy(d, s + (size_t)off * esize, (size_t)inner * esize);
            d += (size_t)inner * esize;
        } else {
            for (int64_t j = 0; j < inner; j++, d += esize)
                ref_copy_elem(d, s + (size_t)(off + j * st) * esize, esize);
        }
        for (int32_t i = rank - 2; i >= 0; i--) {
            off += src_strides[i];
            if (++idx[i] < dims[i])
                break;
            off -= src_strides[i] * dims[i];
            idx[i] = 0;
        }
    }
}

sg_status sg_ref_scatter_reduction(const sg_node *n, sg_op *out)
{
    const char *red = sg_attr_string(n, "reduction", "none");
    *out = strcmp(red, "none") == 0  ? SG_OP_COUNT
           : strcmp(red, "add") == 0 ? SG_OP_ADD
           : strcmp(red, "mul") == 0 ? SG_OP_MUL
           : strcmp(red, "max") == 0 ? SG_OP_MAX
           : strcmp(red, "min") == 0 ? SG_OP_MIN
                                     : SG_OP_IDENTITY;
    if (*out == SG_OP_IDENTITY)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "reduction \"%s\" is not supported", red);
    return SEGRT_OK;
}

void sg_ref_scatter_combine(sg_tensor *y, int64_t yi, const sg_tensor *u, int64_t ui, sg_op rop)
{
    if (sg_dtype_is_float(y->dtype)) {
        double a = sg_dtype_load_f64(y->dtype, y->data, yi), b = sg_dtype_load_f64(u->dtype, u->data, ui);
        double r = rop == SG_OP_ADD   ? a + b
                   : rop == SG_OP_MUL ? a * b
                   : rop == SG_OP_MAX ? ref_max_nan(a, b)
                                      : ref_min_nan(a, b);
        sg_dtype_store_f64(y->dtype, y->data, yi, r);
        return;
    }
    int64_t a = sg_dtype_load_i64(y->dtype, y->data, yi), b = sg_dtype_load_i64(u->dtype, u->data, ui);
    int64_t r = rop == SG_OP_ADD   ? ref_add_wrap(a, b)
                : rop == SG_OP_MUL ? ref_mul_wrap(a, b)
                : rop == SG_OP_MAX ? (a > b ? a : b)
                                   : (a < b ? a : b);
    sg_dtype_store_i64(y->dtype, y->data, yi, r);
}
