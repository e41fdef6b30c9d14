/* MatMul (numpy semantics: batch broadcasting, 1-D operands) and Gemm.
 *
 * The product loops run m, k, n with the innermost loop over contiguous
 * columns of B and C so it vectorises. float32 accumulates in float32 and
 * float64 in double; float16 and bfloat16 are widened to float32. Integer
 * MatMul computes in uint64, which wraps like the fixed-width result. */
#include "backend/ref/ref_internal.h"

#include <string.h>

/* C[M,N] = A[M,K] B[K,N], all row-major; C is overwritten. */
#define DEFINE_MATMUL(NAME, T)                                                                     \
    static void NAME(const T *restrict a, const T *restrict b, T *restrict c, int64_t M,           \
                     int64_t K, int64_t N)                                                         \
    {                                                                                              \
        for (int64_t m = 0; m < M; m++) {                                                          \
            T *restrict cr = c + m * N;                                                            \
            for (int64_t j = 0; j < N; j++)                                                        \
                cr[j] = 0;                                                                         \
            for (int64_t k = 0; k < K; k++) {                                                      \
                const T av = a[m * K + k];                                                         \
                const T *restrict br = b + k * N;                                                  \
                for (int64_t j = 0; j < N; j++)                                                    \
                    cr[j] += av * br[j];                                                           \
            }                                                                                      \
        }                                                                                          \
    }

DEFINE_MATMUL(matmul_f32, float)
DEFINE_MATMUL(matmul_f64, double)
DEFINE_MATMUL(matmul_u64, uint64_t)

typedef enum { K_F32, K_F64, K_U64 } compute_kind;

/* A copy of t in the compute type (NULL on allocation failure), or t's own
 * data where it already is that type. */
static void *stage(const sg_tensor *t, compute_kind k, bool *owned)
{
    *owned = false;
    if ((k == K_F32 && t->dtype == SEGRT_DTYPE_FLOAT32) ||
        (k == K_F64 && t->dtype == SEGRT_DTYPE_FLOAT64))
        return t->data;
    if (k == K_F32) {
        *owned = true;
        return sg_ref_to_f32(t);
    }
    if (k == K_F64) {
        *owned = true;
        return sg_ref_to_f64(t);
    }
    int64_t count = sg_ref_numel(t);
    uint64_t *v = sg_malloc(sizeof(uint64_t) * (size_t)(count ? count : 1));
    if (v)
        for (int64_t i = 0; i < count; i++)
            v[i] = (uint64_t)sg_dtype_load_i64(t->dtype, t->data, i);
    *owned = true;
    return v;
}

static sg_status compute_kind_of(const sg_node *n, sg_dtype t, compute_kind *k)
{
    if (t == SEGRT_DTYPE_FLOAT64)
        *k = K_F64;
    else if (sg_dtype_is_float(t))
        *k = K_F32;
    else if (sg_dtype_is_integer(t))
        *k = K_U64;
    else
        return sg_ref_unsupported_dtype(n, t);
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_mat_mul)
{
    const sg_tensor *a, *b;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &a));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &b));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_dtype(n, b, a->dtype, "B"));
    SG_TRY(sg_ref_check_dtype(n, y, a->dtype, "output"));
    compute_kind kind = K_F32;
    SG_TRY(compute_kind_of(n, a->dtype, &kind));
    if (a->rank < 1 || b->rank < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "MatMul operands must have rank >= 1");
    /* Batch views: the leading dims of each operand as tensors of their
     * own, broadcast against each other. */
    sg_tensor ab = *a, bb = *b;
    ab.rank = a->rank > 2 ? a->rank - 2 : 0;
    bb.rank = b->rank > 2 ? b->rank - 2 : 0;
    int64_t M = a->rank == 1 ? 1 : a->dims[a->rank - 2], K = a->dims[a->rank - 1];
    int64_t KB = b->rank == 1 ? b->dims[0] : b->dims[b->rank - 2];
    int64_t N = b->rank == 1 ? 1 : b->dims[b->rank - 1];
    if (K != KB)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "inner dims differ (%lld and %lld)",
                             (long long)K, (long long)KB);
    int32_t br = ab.rank > bb.rank ? ab.rank : bb.rank;
    int64_t want[SEGRT_MAX_RANK + 2];
    for (int32_t i = 0; i < br; i++) {
        int32_t ia = i - (br - ab.rank), ib = i - (br - bb.rank);
        int64_t da = ia >= 0 ? ab.dims[ia] : 1, db = ib >= 0 ? bb.dims[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "batch dims %lld and %lld do not broadcast",
                                 (long long)da, (long long)db);
        want[i] = da == 1 ? db : da;
    }
    int32_t wr = br;
    if (a->rank > 1)
        want[wr++] = M;
    if (b->rank > 1)
        want[wr++] = N;
    if (wr > SEGRT_MAX_RANK)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "output rank is too large");
    SG_TRY(sg_ref_check_out_dims(n, y, want, wr));
    int64_t numel = sg_ref_numel(y);
    if (numel == 0)
        return SEGRT_OK;
    const sg_tensor *ops[2] = {&ab, &bb};
    ref_bcast bc;
    SG_TRY(sg_ref_bcast_init(n, &bc, want, br, ops, 2));

    bool own_a, own_b, own_y = kind != K_F32 || y->dtype != SEGRT_DTYPE_FLOAT32;
    if (kind == K_F64)
        own_y = false;
    void *pa = stage(a, kind, &own_a), *pb = stage(b, kind, &own_b);
    size_t es = kind == K_F32 ? sizeof(float) : 8;
    void *py = own_y ? sg_malloc(es * (size_t)numel) : y->data;
    sg_status s = SEGRT_ERROR_OUT_OF_MEMORY;
    if (pa && pb && py) {
        int64_t idx[SEGRT_MAX_RANK] = {0}, off[REF_BCAST_MAX] = {0}, yo = 0;
        for (int64_t r = 0; r < bc.rows; r++) {
            for (int64_t j = 0; j < bc.inner; j++, yo++) {
                int64_t ao = (off[0] + j * bc.strides[0][bc.rank - 1]) * M * K;
                int64_t bo = (off[1] + j * bc.strides[1][bc.rank - 1]) * K * N;
                if (kind == K_F32)
                    matmul_f32((const float *)pa + ao, (const float *)pb + bo,
                               (float *)py + yo * M * N, M, K, N);
                else if (kind == K_F64)
                    matmul_f64((const double *)pa + ao, (const double *)pb + bo,
                               (double *)py + yo * M * N, M, K, N);
                else
                    matmul_u64((const uint64_t *)pa + ao, (const uint64_t *)pb + bo,
                               (uint64_t *)py + yo * M * N, M, K, N);
            }
            sg_ref_bcast_next(&bc, idx, off);
        }
        if (own_y) {
            if (kind == K_F32)
                sg_ref_from_f32(y, py, numel);
            else
                for (int64_t i = 0; i < numel; i++)
                    sg_dtype_store_i64(y->dtype, y->data, i, (int64_t)((uint64_t *)py)[i]);
        }
        s = SEGRT_OK;
    }
    if (own_a)
        free(pa);
    if (own_b)
        free(pb);
    if (own_y)
        free(py);
    return s;
}

/* Saturating double to int64 (a plain cast of an out-of-range value is
 * undefined). */
static int64_t to_i64(double v)
{
    if (!(v == v))
        return 0;
    if (v >= 9.2233720368547758e18)
        return INT64_MAX;
    if (v <= -9.2233720368547758e18)
        return INT64_MIN;
    return (int64_t)v;
}

/* Y = alpha * A' B' + beta * C, A' = transA ? A^T : A; C broadcasts to
 * [M, N]. Floats accumulate in double; integers in int64 with wrap-around
 * and alpha, beta truncated to integers. */
REF_KERNEL(sg_ref_gemm)
{
    const sg_tensor *a, *b, *c;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &a));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &b));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 2, &c));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_check_dtype(n, b, a->dtype, "B"));
    SG_TRY(sg_ref_check_dtype(n, y, a->dtype, "output"));
    if (!sg_dtype_is_float(a->dtype) && !sg_dtype_is_integer(a->dtype))
        return sg_ref_unsupported_dtype(n, a->dtype);
    if (a->rank != 2 || b->rank != 2)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "A and B must have rank 2");
    bool ta = sg_attr_int(n, "transA", 0) != 0, tb = sg_attr_int(n, "transB", 0) != 0;
    double alpha = sg_attr_float(n, "alpha", 1.0f), beta = sg_attr_float(n, "beta", 1.0f);
    int64_t M = ta ? a->dims[1] : a->dims[0], K = ta ? a->dims[0] : a->dims[1];
    int64_t KB = tb ? b->dims[1] : b->dims[0], N = tb ? b->dims[0] : b->dims[1];
    if (K != KB)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "inner dims differ (%lld and %lld)",
                             (long long)K, (long long)KB);
    int64_t want[2] = {M, N};
    SG_TRY(sg_ref_check_out_dims(n, y, want, 2));
    ref_bcast bc;
    if (c) {
        SG_TRY(sg_ref_bcast_init(n, &bc, want, 2, &c, 1));
    }
    /* A' as [M, K] and B' as [K, N], row-major, in the compute type. */
    int64_t sam = ta ? 1 : K, sak = ta ? M : 1, sbk = tb ? 1 : N, sbn = tb ? K : 1;
    bool fl = sg_dtype_is_float(a->dtype);
    double *acc = sg_malloc(sizeof(double) * (size_t)(N ? N : 1));
    double *bt = fl ? sg_ref_to_f64(b) : NULL;
    if (!acc || (fl && !bt)) {
        free(acc);
        free(bt);
        return SEGRT_ERROR_OUT_OF_MEMORY;
    }
    int64_t cst0 = 0, cst1 = 0;
    if (c) {
        /* C is at most 2-D, so the walk is [rows, cols] or less. */
        int64_t cs[2];
        sg_ref_strides(c->dims, c->rank, cs + 2 - c->rank);
        cst0 = c->rank == 2 && c->dims[0] != 1 ? cs[0] : 0;
        cst1 = c->rank >= 1 && c->dims[c->rank - 1] != 1 ? cs[1] : 0;
        if (c->rank > 2)
            cst0 = cst1 = 0; /* rejected by the broadcast check above */
    }
    for (int64_t m = 0; m < M; m++) {
        for (int64_t j = 0; j < N; j++)
            acc[j] = 0;
        if (fl) {
            for (int64_t k = 0; k < K; k++) {
                double av = sg_dtype_load_f64(a->dtype, a->data, m * sam + k * sak);
                for (int64_t j = 0; j < N; j++)
                    acc[j] += av * bt[k * sbk + j * sbn];
            }
            for (int64_t j = 0; j < N; j++) {
                double v = alpha * acc[j];
                if (c)
                    v += beta * sg_dtype_load_f64(c->dtype, c->data, m * cst0 + j * cst1);
                sg_dtype_store_f64(y->dtype, y->data, m * N + j, v);
            }
        } else {
            int64_t ia = to_i64(alpha), ib = to_i64(beta);
            for (int64_t j = 0; j < N; j++) {
                int64_t s = 0;
                for (int64_t k = 0; k < K; k++)
                    s = ref_add_wrap(
                        s, ref_mul_wrap(sg_dtype_load_i64(a->dtype, a->data, m * sam + k * sak),
                                        sg_dtype_load_i64(b->dtype, b->data, k * sbk + j * sbn)));
                s = ref_mul_wrap(s, ia);
                if (c)
                    s = ref_add_wrap(s, ref_mul_wrap(ib, sg_dtype_load_i64(c->dtype, c->data,
                                                                           m * cst0 + j * cst1)));
                sg_dtype_store_i64(y->dtype, y->data, m * N + j, s);
            }
        }
    }
    free(acc);
    free(bt);
    return SEGRT_OK;
}
