/* MatMul and Gemm through cuBLASLt.
 *
 * Operands are dense row-major; cuBLASLt is column-major, so the product
 * is computed transposed: a row-major C[M, N] is a column-major C^T[N, M]
 * = B^T A^T, which needs no copies (a row-major matrix read column-major
 * is its transpose). Gemm's transA/transB become cuBLASLt's ops.
 *
 * MatMul follows numpy: a 1-D left operand is a row, a 1-D right one a
 * column, and batch dims broadcast. The innermost batch dims over which
 * every operand advances by one fixed stride (0 where it is broadcast) run
 * as one strided-batched call; the remaining outer batch dims are looped
 * over in the run function.
 *
 * Math: float16/bfloat16 operands at those precisions, float32 otherwise,
 * always accumulated in float32; TF32 only at the TF32 precision. The
 * algorithm is chosen at plan build by cuBLASLt's heuristic within the
 * workspace limit, without in-place split-K reductions (see heuristic()),
 * and recorded for plan files. */
#include "backend/cuda/cuda_internal.h"

#include <string.h>

#define MM_CHOICE_VERSION 1u

/* The record kept in plan files. */
typedef struct mm_choice {
    uint32_t version;         /* MM_CHOICE_VERSION */
    uint32_t reserved;
    uint64_t cublaslt_version;/* cublasLtGetVersion() of the build that chose it */
    uint64_t workspace;
    cublasLtMatmulAlgo_t algo;
} mm_choice;

/* The column-major problem cuBLASLt solves: D[m, n] = op_a(A) op_b(B),
 * A being the node's right operand and B its left one. */
typedef struct mm_params {
    int64_t m, n, k;
    int32_t op_a, op_b;              /* cublasOperation_t */
    int64_t a_rows, a_cols, a_ld;    /* stored matrices, column-major */
    int64_t b_rows, b_cols, b_ld;
    int64_t d_ld;
    cudaDataType_t ab_type, d_type;
    cublasComputeType_t compute;
    float alpha, beta;
    int32_t batch;                   /* strided batch count */
    int64_t a_stride, b_stride, d_stride; /* elements between batch matrices */
    int32_t outer_rank;              /* batch dims looped over in the run function */
    int64_t outer_dims[SEGRT_MAX_RANK];
    int64_t outer_a[SEGRT_MAX_RANK], outer_b[SEGRT_MAX_RANK], outer_d[SEGRT_MAX_RANK];
    int64_t n_outer;
    size_t ab_size, d_size;          /* element sizes */
    uint32_t align;                  /* pointer alignment the algorithm was chosen for */
    cublasLtMatmulAlgo_t algo;
    size_t workspace;
} mm_params;

/* Per-context descriptors (host objects; one set per context keeps
 * contexts from sharing anything mutable). */
typedef struct mm_state {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
} mm_state;

typedef struct mm_map_params {
    sgk_map_params mp;
} mm_map_params;

/* Descriptors ------------------------------------------------------------------ */

static void mm_state_destroy(mm_state *st)
{
    if (st->ld)
        cublasLtMatrixLayoutDestroy(st->ld);
    if (st->lb)
        cublasLtMatrixLayoutDestroy(st->lb);
    if (st->la)
        cublasLtMatrixLayoutDestroy(st->la);
    if (st->op)
        cublasLtMatmulDescDestroy(st->op);
    memset(st, 0, sizeof *st);
}

static sg_status layout_batch(cublasLtMatrixLayout_t l, int32_t batch, int64_t stride)
{
    if (batch <= 1)
        return SEGRT_OK;
    CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
    CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                sizeof stride));
    return SEGRT_OK;
}

/* Creates the descriptors of mp into st (partly filled on failure: the
 * caller destroys st either way). */
static sg_status mm_state_create(const mm_params *mp, mm_state *st)
{
    CUBLAS_TRY(cublasLtMatmulDescCreate(&st->op, mp->compute, CUDA_R_32F));
    CUBLAS_TRY(cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_TRANSA, &mp->op_a, sizeof mp->op_a));
    CUBLAS_TRY(cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_TRANSB, &mp->op_b, sizeof mp->op_b));
    CUBLAS_TRY(cublasLtMatrixLayoutCreate(&st->la, mp->ab_type, (uint64_t)mp->a_rows, (uint64_t)mp->a_cols,
                                          mp->a_ld));
    CUBLAS_TRY(cublasLtMatrixLayoutCreate(&st->lb, mp->ab_type, (uint64_t)mp->b_rows, (uint64_t)mp->b_cols,
                                          mp->b_ld));
    CUBLAS_TRY(cublasLtMatrixLayoutCreate(&st->ld, mp->d_type, (uint64_t)mp->m, (uint64_t)mp->n, mp->d_ld));
    SG_TRY(layout_batch(st->la, mp->batch, mp->a_stride));
    SG_TRY(layout_batch(st->lb, mp->batch, mp->b_stride));
    SG_TRY(layout_batch(st->ld, mp->batch, mp->d_stride));
    return SEGRT_OK;
}

/* Algorithm choice ------------------------------------------------------------- */

static sg_status heuristic_in(sg_cuda_plan *p, const mm_params *mp, const mm_state *st,
                              cublasLtMatmulPreference_t pref, uint32_t reduction_mask, bool no_tensor_ops,
                              cublasLtMatmulHeuristicResult_t *best, bool *found)
{
    *found = false;
    uint64_t ws = p->opts.workspace_limit;
    CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                    &reduction_mask, sizeof reduction_mask));
    CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &mp->align,
                                                    sizeof mp->align));
    CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &mp->align,
                                                    sizeof mp->align));
    CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &mp->align,
                                                    sizeof mp->align));
    CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &mp->align,
                                                    sizeof mp->align));
    if (no_tensor_ops) {
        /* float32 products without TF32: no tensor-core implementations. */
        uint64_t impl = ~(uint64_t)CUBLASLT_NUMERICAL_IMPL_FLAGS_TENSOR_OP_MASK;
        CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_IMPL_MASK, &impl, sizeof impl));
    }
    cublasLtMatmulHeuristicResult_t res[8];
    int got = 0;
    memset(res, 0, sizeof res);
    cublasStatus_t cs = cublasLtMatmulAlgoGetHeuristic(p->build_lt, st->op, st->la, st->lb, st->ld, st->ld, pref, 8,
                                                       res, &got);
    if (cs == CUBLAS_STATUS_NOT_SUPPORTED)
        return SEGRT_OK;
    if (cs != CUBLAS_STATUS_SUCCESS)
        return cublas_error(cs, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    /* Ranked by estimated time: the first usable one. */
    for (int i = 0; i < got && i < 8; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= p->opts.workspace_limit) {
            *best = res[i];
            *found = true;
            return SEGRT_OK;
        }
    return SEGRT_OK;
}

/* cuBLASLt's best algorithm for mp within the workspace limit. Runs must
 * be bit-identical, so split-K never reduces "in place" (partial results
 * combined through counters in the output, in whatever order the CTAs
 * finish); it may stage partials in the workspace and reduce them in a
 * separate pass, in a fixed order: first in float32 only, and only if that
 * leaves nothing, in the output dtype too. */
static sg_status heuristic(sg_cuda_plan *p, const sg_node *n, const mm_params *mp, bool no_tensor_ops,
                           cublasLtMatmulHeuristicResult_t *best)
{
    mm_state st;
    memset(&st, 0, sizeof st);
    cublasLtMatmulPreference_t pref = NULL;
    bool found = false;
    sg_status s = mm_state_create(mp, &st);
    if (s == SEGRT_OK) {
        cublasStatus_t cs = cublasLtMatmulPreferenceCreate(&pref);
        if (cs != CUBLAS_STATUS_SUCCESS)
            s = cublas_error(cs, "cublasLtMatmulPreferenceCreate", __FILE__, __LINE__);
    }
    if (s == SEGRT_OK)
        s = heuristic_in(p, mp, &st, pref, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, no_tensor_ops, best, &found);
    if (s == SEGRT_OK && !found)
        s = heuristic_in(p, mp, &st, pref,
                         CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE | CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE, no_tensor_ops,
                         best, &found);
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    mm_state_destroy(&st);
    if (s != SEGRT_OK)
        return sg_error_prefix(s, "node `%s` (%s): cuBLASLt heuristic: ", n->name, sg_op_name(n->op));
    if (!found)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED,
                             "cuBLASLt has no algorithm for this product (%lldx%lldx%lld, batch %d, %zu-byte "
                             "elements, %u-byte alignment) within the %zu-byte workspace limit",
                             (long long)mp->n, (long long)mp->m, (long long)mp->k, mp->batch, mp->ab_size,
                             mp->align, p->opts.workspace_limit);
    return SEGRT_OK;
}

/* Whether algo runs mp on handle lt; its workspace. */
static sg_status algo_check(cublasLtHandle_t lt, const mm_params *mp, const cublasLtMatmulAlgo_t *algo,
                            size_t *workspace, bool *ok)
{
    mm_state st;
    memset(&st, 0, sizeof st);
    *ok = false;
    sg_status s = mm_state_create(mp, &st);
    if (s == SEGRT_OK) {
        cublasLtMatmulHeuristicResult_t res;
        memset(&res, 0, sizeof res);
        cublasStatus_t cs = cublasLtMatmulAlgoCheck(lt, st.op, st.la, st.lb, st.ld, st.ld, algo, &res);
        if (cs == CUBLAS_STATUS_SUCCESS) {
            *ok = true;
            *workspace = res.workspaceSize;
        } else {
            s = cublas_error(cs, "cublasLtMatmulAlgoCheck", __FILE__, __LINE__);
        }
    }
    mm_state_destroy(&st);
    return s;
}

/* The algorithm: the plan file's (checked; *given set) or the
 * heuristic's. */
static sg_status choose(sg_cuda_plan *p, const sg_node *n, mm_params *mp, bool no_tensor_ops, mm_choice *c,
                        bool *given_out)
{
    const cuda_choice *given = cuda_choice_find(p, n->name, "cublaslt");
    memset(c, 0, sizeof *c);
    *given_out = given != NULL;
    if (given) {
        if (given->size != sizeof *c)
            return sg_node_error(n, SEGRT_ERROR_INVALID_ARGUMENT, "the plan file's cuBLASLt choice has %zu bytes; "
                                 "this build records %zu", given->size, sizeof *c);
        memcpy(c, given->data, sizeof *c);
        if (c->version != MM_CHOICE_VERSION || c->cublaslt_version != (uint64_t)cublasLtGetVersion())
            return sg_node_error(n, SEGRT_ERROR_INVALID_ARGUMENT, "the plan file's cuBLASLt choice is version %u "
                                 "for cuBLASLt %llu; this build reads version %u and runs cuBLASLt %zu",
                                 c->version, (unsigned long long)c->cublaslt_version, MM_CHOICE_VERSION,
                                 cublasLtGetVersion());
        size_t ws = 0;
        bool ok = false;
        sg_status s = algo_check(p->build_lt, mp, &c->algo, &ws, &ok);
        if (s != SEGRT_OK)
            return sg_error_prefix(s, "node `%s` (%s): the plan file's cuBLASLt algorithm does not run here: ",
                                   n->name, sg_op_name(n->op));
        c->workspace = ws;
    } else {
        cublasLtMatmulHeuristicResult_t best;
        SG_TRY(heuristic(p, n, mp, no_tensor_ops, &best));
        c->version = MM_CHOICE_VERSION;
        c->cublaslt_version = (uint64_t)cublasLtGetVersion();
        c->algo = best.algo;
        c->workspace = best.workspaceSize;
    }
    mp->algo = c->algo;
    mp->workspace = (size_t)c->workspace;
    return SEGRT_OK;
}

/* Running ----------------------------------------------------------------------- */

static void mm_ctx_free(void *state)
{
    mm_state *st = state;
    if (!st)
        return;
    mm_state_destroy(st);
    free(st);
}

static sg_status mm_ctx_init(const cuda_step *s, cudnnHandle_t cudnn, cublasLtHandle_t lt, void **state)
{
    (void)cudnn;
    const mm_params *mp = s->params;
    *state = NULL;
    mm_state *st = sg_calloc(1, sizeof *st);
    if (!st)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    sg_status r = mm_state_create(mp, st);
    if (r == SEGRT_OK) {
        cublasLtMatmulHeuristicResult_t res;
        memset(&res, 0, sizeof res);
        cublasStatus_t cs = cublasLtMatmulAlgoCheck(lt, st->op, st->la, st->lb, st->ld, st->ld, &mp->algo, &res);
        if (cs != CUBLAS_STATUS_SUCCESS)
            r = cublas_error(cs, "cublasLtMatmulAlgoCheck (the plan's algorithm in this context)", __FILE__,
                             __LINE__);
        else if (res.workspaceSize > mp->workspace)
            r = sg_error(SEGRT_ERROR_DEVICE, "cuBLASLt's algorithm needs %zu bytes of workspace in this context, "
                         "%zu at plan build", res.workspaceSize, mp->workspace);
    }
    if (r != SEGRT_OK) {
        mm_ctx_free(st);
        return r;
    }
    *state = st;
    return SEGRT_OK;
}

static sg_status mm_run(const cuda_step *s, cuda_run *r)
{
    const mm_params *mp = s->params;
    const mm_state *st = r->state;
    if (!st)
        return sg_error(SEGRT_ERROR_INTERNAL, "the cuBLASLt descriptors of this context were not made (ctx_init)");
    if (mp->workspace > r->workspace_bytes)
        return sg_error(SEGRT_ERROR_INTERNAL, "cuBLASLt needs %zu bytes of workspace; the context has %zu",
                        mp->workspace, r->workspace_bytes);
    /* cuBLASLt's A is the node's right operand, its B the left one. */
    const char *left = r->ptr[s->args[0]], *right = r->ptr[s->args[1]];
    char *d = r->ptr[s->args[2]];
    const void *bases[3] = {left, right, d};
    for (int32_t i = 0; i < 3; i++)
        if (((uintptr_t)bases[i] % mp->align) != 0)
            return sg_error(SEGRT_ERROR_INTERNAL, "cuBLASLt operand %d is at %p, not %u-byte aligned as the "
                            "algorithm was chosen for", i, bases[i], mp->align);
    int64_t idx[SEGRT_MAX_RANK] = {0};
    for (int64_t o = 0; o < mp->n_outer; o++) {
        int64_t oa = 0, ob = 0, od = 0;
        for (int32_t i = 0; i < mp->outer_rank; i++) {
            oa += idx[i] * mp->outer_a[i];
            ob += idx[i] * mp->outer_b[i];
            od += idx[i] * mp->outer_d[i];
        }
        const void *a = right + oa * (int64_t)mp->ab_size;
        const void *b = left + ob * (int64_t)mp->ab_size;
        void *dd = d + od * (int64_t)mp->d_size;
        /* C is D: with beta 1 (Gemm with C) the product adds onto what a
         * map wrote there. */
        CUBLAS_TRY(cublasLtMatmul(r->lt, st->op, &mp->alpha, a, st->la, b, st->lb, &mp->beta, dd, st->ld, dd, st->ld,
                                  &mp->algo, r->workspace, mp->workspace, r->stream));
        for (int32_t i = mp->outer_rank - 1; i >= 0; i--) {
            if (++idx[i] < mp->outer_dims[i])
                break;
            idx[i] = 0;
        }
    }
    return SEGRT_OK;
}

/* out = in * alpha + beta, in broadcast to out's dims (Gemm's C) or a
 * plain dtype conversion. */
static sg_status mm_map_run(const cuda_step *s, cuda_run *r)
{
    const mm_map_params *mm = s->params;
    sgk_view out = cuda_view(r, s->args[1]);
    sgk_view in = cuda_view_bcast(r, s->args[0], out.rank, out.dims);
    return sgk_map(r->stream, &mm->mp, &out, 1, &in);
}

static sg_status map_step(sg_cuda_plan *p, const sg_node *n, int32_t in, int32_t out, sgk_map_op op, float alpha,
                          float beta)
{
    mm_map_params *mm = sg_calloc(1, sizeof *mm);
    if (!mm)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    mm->mp.op = op;
    mm->mp.alpha = alpha;
    mm->mp.beta = beta;
    int32_t args[2] = {in, out};
    return cuda_step_new(p, n, op == SGK_AFFINE ? "segrt gemm C" : "segrt copy", mm_map_run, args, 2, 1, mm, NULL,
                         NULL);
}

/* Building ---------------------------------------------------------------------- */

/* The largest power of two (at most 256) dividing v; 256 for 0. */
static uint32_t pow2_of(int64_t v)
{
    if (v < 0)
        v = -v;
    if (v == 0)
        return 256;
    uint64_t low = (uint64_t)v & (~(uint64_t)v + 1);
    return low >= 256 ? 256 : (uint32_t)low;
}

static uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

/* The alignment a tensor's pointer is known to have at run time: the
 * arena and the weight store align to 256 bytes; the caller's buffers are
 * assumed to be 16-byte aligned (checked when run); views add their
 * offset. */
static uint32_t tensor_align(const sg_cuda_plan *p, int32_t t)
{
    const cuda_tensor *ct = &p->tensors[t];
    int64_t off = 0;
    if (ct->kind == CUDA_T_ALIAS) {
        off = ct->alias_offset * (int64_t)segrt_dtype_size(ct->dtype);
        ct = &p->tensors[ct->alias];
    }
    uint32_t base = (ct->kind == CUDA_T_ARENA || ct->kind == CUDA_T_CONST) ? 256 : 16;
    return min_u32(base, pow2_of(off));
}

static bool dense_plain(const cuda_tensor *t)
{
    int64_t want[SEGRT_MAX_RANK];
    cuda_layout_strides(CUDA_LAYOUT_PLAIN, t->rank, t->dims, want);
    for (int32_t i = 0; i < t->rank; i++)
        if (t->dims[i] > 1 && t->strides[i] != want[i])
            return false;
    return true;
}

static sg_status operand(sg_cuda_plan *p, const sg_node *n, int32_t v, sg_dtype dt, int32_t *out)
{
    SG_TRY(cuda_value_as(p, v, dt, CUDA_LAYOUT_PLAIN, out));
    if (!dense_plain(&p->tensors[*out]))
        return sg_node_error(n, SEGRT_ERROR_INTERNAL, "operand `%s` is not dense row-major", p->g->values[v].name);
    return SEGRT_OK;
}

static cudaDataType_t cuda_type(sg_dtype dt)
{
    switch (dt) {
    case SEGRT_DTYPE_FLOAT16: return CUDA_R_16F;
    case SEGRT_DTYPE_BFLOAT16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
    }
}

/* Math dtype, compute type and whether tensor cores are off limits. */
static sg_dtype math_setup(const sg_cuda_plan *p, const sg_node *n, mm_params *mp, bool *no_tensor_ops)
{
    cuda_math m = cuda_node_math(p, n);
    sg_dtype io = m == CUDA_MATH_FP16 ? SEGRT_DTYPE_FLOAT16
                  : m == CUDA_MATH_BF16 ? SEGRT_DTYPE_BFLOAT16
                                        : SEGRT_DTYPE_FLOAT32;
    mp->compute = m == CUDA_MATH_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    *no_tensor_ops = m == CUDA_MATH_FP32;
    mp->ab_type = cuda_type(io);
    mp->ab_size = segrt_dtype_size(io);
    return io;
}

static sg_status check_dtype(const sg_node *n, sg_dtype dt)
{
    if (dt == SEGRT_DTYPE_FLOAT32 || dt == SEGRT_DTYPE_FLOAT16 || dt == SEGRT_DTYPE_BFLOAT16)
        return SEGRT_OK;
    if (sg_dtype_is_integer(dt))
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%s products: cuBLASLt has no 64-bit integer GEMM and "
                             "segrt runs integer products on the CPU only", segrt_dtype_name(dt));
    return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%s products are not run on the GPU", segrt_dtype_name(dt));
}

/* cuBLASLt's view of row-major Y[M, N] = op(A_node)[M, K] op(B_node)[K, N]. */
static void gemm_shape(mm_params *mp, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b)
{
    mp->m = N;
    mp->n = M;
    mp->k = K;
    /* cuBLASLt's A is B_node: stored [K, N] row-major = column-major N x K. */
    mp->op_a = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    mp->a_rows = trans_b ? K : N;
    mp->a_cols = trans_b ? N : K;
    mp->a_ld = mp->a_rows;
    /* cuBLASLt's B is A_node: stored [M, K] row-major = column-major K x M. */
    mp->op_b = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    mp->b_rows = trans_a ? M : K;
    mp->b_cols = trans_a ? K : M;
    mp->b_ld = mp->b_rows;
    mp->d_ld = N;
}

/* The output's dtype if cuBLASLt can write it from these operands, else
 * the operands' dtype (and a conversion after). */
static sg_dtype d_dtype(sg_dtype io, sg_dtype out)
{
    if (out == io || (out == SEGRT_DTYPE_FLOAT32 && io != SEGRT_DTYPE_FLOAT32))
        return out;
    return io;
}

/* The pointer alignment the strides guarantee for every matrix the calls
 * touch, capped at 16 bytes (what vector loads and the TMA need); the
 * base pointers are checked once the operand tensors exist. */
static uint32_t stride_align(const mm_params *mp)
{
    uint32_t align = 16;
    if (mp->batch > 1) {
        align = min_u32(align, pow2_of(mp->b_stride * (int64_t)mp->ab_size)); /* left */
        align = min_u32(align, pow2_of(mp->a_stride * (int64_t)mp->ab_size)); /* right */
        align = min_u32(align, pow2_of(mp->d_stride * (int64_t)mp->d_size));
    }
    for (int32_t i = 0; i < mp->outer_rank; i++) {
        align = min_u32(align, pow2_of(mp->outer_b[i] * (int64_t)mp->ab_size));
        align = min_u32(align, pow2_of(mp->outer_a[i] * (int64_t)mp->ab_size));
        align = min_u32(align, pow2_of(mp->outer_d[i] * (int64_t)mp->d_size));
    }
    return align;
}

/* Chooses the algorithm, then fetches the operands (values a_v, b_v in the
 * math dtype; c_v >= 0: Gemm's C, scaled into the destination by a map
 * first) and appends the product step, and a conversion into the output
 * when cuBLASLt cannot write its dtype. The choice comes first so that an
 * UNSUPPORTED leaves no conversion steps behind. */
static sg_status product_steps(sg_cuda_plan *p, const sg_node *n, mm_params *mp, bool no_tensor_ops, sg_dtype io,
                               int32_t a_v, int32_t b_v, int32_t c_v, float c_scale, double flops)
{
    int32_t out_v = n->outputs[0];
    sg_dtype out_dt = cuda_out_dtype(p, n, out_v);
    sg_dtype ddt = d_dtype(io, out_dt);
    mp->d_type = cuda_type(ddt);
    mp->d_size = segrt_dtype_size(ddt);
    mp->beta = c_v >= 0 ? 1.0f : 0.0f;
    mp->align = stride_align(mp);
    mm_choice c;
    bool given = false;
    SG_TRY(choose(p, n, mp, no_tensor_ops, &c, &given));

    int32_t at, bt, ct = -1, outt;
    SG_TRY(operand(p, n, a_v, io, &at));
    SG_TRY(operand(p, n, b_v, io, &bt));
    /* C goes through a broadcast view of the map that scales it into the
     * destination (so a zero beta still turns an infinite C into NaN, as
     * the reference does); any dtype and layout will do. */
    if (c_v >= 0)
        SG_TRY(cuda_value_as(p, c_v, SEGRT_DTYPE_UNDEFINED, CUDA_LAYOUT_ANY, &ct));
    uint32_t base = min_u32(tensor_align(p, at), tensor_align(p, bt));
    if (base < mp->align) {
        /* A view at an odd offset: choose again for what it guarantees
         * (a plan file's algorithm is kept; the run checks the pointers). */
        mp->align = base;
        if (!given)
            SG_TRY(choose(p, n, mp, no_tensor_ops, &c, &given));
    }
    SG_TRY(cuda_choice_put(p, n->name, "cublaslt", &c, sizeof c));

    SG_TRY(cuda_output_new(p, n, 0, out_dt, CUDA_LAYOUT_PLAIN, &outt));
    int32_t dt = outt;
    if (ddt != out_dt) {
        const cuda_tensor *o = &p->tensors[outt];
        SG_TRY(cuda_tensor_new(p, ddt, o->rank, o->dims, CUDA_LAYOUT_PLAIN, &dt));
    }
    if (ct >= 0)
        SG_TRY(map_step(p, n, ct, dt, SGK_AFFINE, c_scale, 0.0f));
    mm_params *params = sg_malloc(sizeof *params);
    if (!params)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    *params = *mp;
    int32_t args[3] = {at, bt, dt};
    cuda_step *st;
    SG_TRY(cuda_step_new(p, n, "cublaslt matmul", mm_run, args, 3, 1, params, NULL, &st));
    st->workspace_bytes = mp->workspace;
    st->flops = flops;
    st->ctx_init = mm_ctx_init;
    st->ctx_free = mm_ctx_free;
    if (dt != outt)
        SG_TRY(map_step(p, n, dt, outt, SGK_COPY, 1.0f, 0.0f));
    return SEGRT_OK;
}

/* Batch strides of an operand over the output's batch dims: its own dense
 * matrix-to-matrix strides, 0 along dims it is broadcast over. */
static void batch_strides(int32_t nb, int32_t op_nb, const int64_t *op_bd, int64_t mat, int64_t *st)
{
    int64_t s = mat;
    for (int32_t i = nb - 1; i >= 0; i--) {
        int32_t j = i - (nb - op_nb);
        if (j < 0) {
            st[i] = 0;
            continue;
        }
        st[i] = op_bd[j] == 1 ? 0 : s;
        s *= op_bd[j];
    }
}

/* Whether st over dims [from, nb) is one stride times the dense index:
 * st[i] == s * prod(bd[i+1..nb)) wherever bd[i] > 1. */
static bool collapses(int32_t from, int32_t nb, const int64_t *bd, const int64_t *st, int64_t *s_out)
{
    int64_t s = -1, inner = 1;
    for (int32_t i = nb - 1; i >= from; i--) {
        if (bd[i] > 1) {
            if (st[i] % inner != 0)
                return false;
            int64_t si = st[i] / inner;
            if (s >= 0 && si != s)
                return false;
            s = si;
        }
        inner *= bd[i];
    }
    *s_out = s < 0 ? 0 : s;
    return true;
}

/* Products cuBLASLt does not take (int64, float64, K = 0) run as a
 * contraction on segrt's einsum kernel (exact int64 accumulation, wrapping
 * like the reference; float64 in double). These are small shape
 * arithmetic in practice, so the naive kernel is enough. */
static sg_status run_int_matmul(const cuda_step *s, cuda_run *r)
{
    sgk_view a = cuda_view(r, s->args[0]), b = cuda_view(r, s->args[1]), y = cuda_view(r, s->args[2]);
    int32_t ar = a.rank, br = b.rank, yr = y.rank;
    int32_t a_nb = ar > 2 ? ar - 2 : 0, b_nb = br > 2 ? br - 2 : 0;
    int32_t nb = yr - (ar > 1) - (br > 1);
    sgk_einsum_params ep;
    memset(&ep, 0, sizeof ep);
    ep.n_in = 2;
    ep.n_letters = yr + 1;
    if (ep.n_letters > SGK_EINSUM_MAX_LETTERS)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "an integer MatMul of rank %d", yr);
    for (int32_t i = 0; i < yr; i++) {
        ep.letter_dims[i] = y.dims[i];
        ep.out_strides[i] = y.strides[i];
    }
    int32_t k = yr, m = nb, nl = nb + (ar > 1);
    ep.letter_dims[k] = a.dims[ar - 1];
    ep.in_strides[0][k] = a.strides[ar - 1];
    if (ar > 1)
        ep.in_strides[0][m] = a.strides[ar - 2];
    for (int32_t j = 0; j < a_nb; j++)
        ep.in_strides[0][j + nb - a_nb] = a.dims[j] == 1 ? 0 : a.strides[j];
    if (br == 1) {
        ep.in_strides[1][k] = b.strides[0];
    } else {
        ep.in_strides[1][k] = b.strides[br - 2];
        ep.in_strides[1][nl] = b.strides[br - 1];
    }
    for (int32_t j = 0; j < b_nb; j++)
        ep.in_strides[1][j + nb - b_nb] = b.dims[j] == 1 ? 0 : b.strides[j];
    ep.in_data[0] = a.data;
    ep.in_data[1] = b.data;
    ep.in_dtype[0] = a.dtype;
    ep.in_dtype[1] = b.dtype;
    return sgk_einsum(r->stream, &ep, &y);
}

static sg_status build_int_matmul(sg_cuda_plan *p, const sg_node *n)
{
    int32_t args[3];
    SG_TRY(cuda_value_as(p, n->inputs[0], SEGRT_DTYPE_UNDEFINED, CUDA_LAYOUT_ANY, &args[0]));
    SG_TRY(cuda_value_as(p, n->inputs[1], SEGRT_DTYPE_UNDEFINED, CUDA_LAYOUT_ANY, &args[1]));
    SG_TRY(cuda_output_new(p, n, 0, p->g->values[n->outputs[0]].dtype, CUDA_LAYOUT_PLAIN, &args[2]));
    return cuda_step_new(p, n, "segrt int matmul", run_int_matmul, args, 3, 1, NULL, NULL, NULL);
}

sg_status cuda_build_matmul(sg_cuda_plan *p, const sg_node *n)
{
    const sg_graph *g = p->g;
    if (n->n_inputs < 2 || n->inputs[0] < 0 || n->inputs[1] < 0 || n->n_outputs < 1 || n->outputs[0] < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs A, B and an output");
    const sg_value *av = &g->values[n->inputs[0]], *bv = &g->values[n->inputs[1]], *yv = &g->values[n->outputs[0]];
    /* Integer and float64 products, and empty inner dims (a sum of
     * nothing: zeros), run on the contraction kernel. */
    bool generic = sg_dtype_is_integer(av->dtype) || av->dtype == SEGRT_DTYPE_FLOAT64 ||
                   (av->shape.rank >= 1 && av->shape.d[av->shape.rank - 1].size == 0);
    if (generic && av->dtype == bv->dtype && av->shape.rank >= 1 && bv->shape.rank >= 1 &&
        yv->shape.rank + 1 <= SGK_EINSUM_MAX_LETTERS)
        return build_int_matmul(p, n);
    SG_TRY(check_dtype(n, av->dtype));
    SG_TRY(check_dtype(n, bv->dtype));
    int64_t ad[SEGRT_MAX_RANK], bd_[SEGRT_MAX_RANK], yd[SEGRT_MAX_RANK];
    int32_t ar = av->shape.rank, br = bv->shape.rank;
    if (!sg_shape_dims(&av->shape, ad) || !sg_shape_dims(&bv->shape, bd_) || !sg_shape_dims(&yv->shape, yd) ||
        ar < 1 || br < 1)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "needs static operand shapes of rank 1 or more");
    int64_t M = ar == 1 ? 1 : ad[ar - 2], K = ad[ar - 1];
    int64_t KB = br == 1 ? bd_[0] : bd_[br - 2], N = br == 1 ? 1 : bd_[br - 1];
    if (K != KB)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "inner dims differ (%lld and %lld)", (long long)K, (long long)KB);
    /* Batch dims: each operand's leading dims, broadcast. */
    int32_t a_nb = ar > 2 ? ar - 2 : 0, b_nb = br > 2 ? br - 2 : 0;
    int32_t nb = a_nb > b_nb ? a_nb : b_nb;
    int64_t bdims[SEGRT_MAX_RANK];
    int64_t batch_total = 1;
    for (int32_t i = 0; i < nb; i++) {
        int32_t ia = i - (nb - a_nb), ib = i - (nb - b_nb);
        int64_t da = ia >= 0 ? ad[ia] : 1, db = ib >= 0 ? bd_[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "batch dims %lld and %lld do not broadcast", (long long)da,
                                 (long long)db);
        bdims[i] = da == 1 ? db : da;
        batch_total *= bdims[i];
    }
    int64_t y_numel = 1;
    for (int32_t i = 0; i < yv->shape.rank; i++)
        y_numel *= yd[i];
    if (y_numel != batch_total * M * N)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "the output has %lld elements; the operands give %lld",
                             (long long)y_numel, (long long)(batch_total * M * N));
    mm_params mp;
    memset(&mp, 0, sizeof mp);
    bool no_tc = false;
    sg_dtype io = math_setup(p, n, &mp, &no_tc);
    if (y_numel == 0) { /* nothing to compute; the output only has to exist */
        int32_t outt;
        return cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), CUDA_LAYOUT_PLAIN, &outt);
    }
    if (K == 0)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "an empty inner dim (K = 0) is not run through cuBLASLt");
    gemm_shape(&mp, M, N, K, false, false);
    mp.alpha = 1.0f;
    /* Strided batch over the largest collapsible suffix of batch dims,
     * a loop over the rest. */
    int64_t sa[SEGRT_MAX_RANK], sb[SEGRT_MAX_RANK], sd[SEGRT_MAX_RANK];
    batch_strides(nb, a_nb, ad, M * K, sa);
    batch_strides(nb, b_nb, bd_, K * N, sb);
    batch_strides(nb, nb, bdims, M * N, sd);
    int32_t from = 0;
    int64_t s_left = 0, s_right = 0, s_out = 0;
    for (from = 0; from <= nb; from++)
        if (collapses(from, nb, bdims, sa, &s_left) && collapses(from, nb, bdims, sb, &s_right) &&
            collapses(from, nb, bdims, sd, &s_out))
            break;
    int64_t inner = 1;
    for (int32_t i = from; i < nb; i++)
        inner *= bdims[i];
    if (inner > INT32_MAX)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "a batch of %lld matrices", (long long)inner);
    mp.batch = (int32_t)inner;
    mp.a_stride = s_right; /* cuBLASLt's A is the right operand */
    mp.b_stride = s_left;
    mp.d_stride = s_out;
    mp.outer_rank = from;
    mp.n_outer = 1;
    for (int32_t i = 0; i < from; i++) {
        mp.outer_dims[i] = bdims[i];
        mp.outer_a[i] = sb[i];
        mp.outer_b[i] = sa[i];
        mp.outer_d[i] = sd[i];
        mp.n_outer *= bdims[i];
    }
    double flops = 2.0 * (double)batch_total * (double)M * (double)N * (double)K;
    return product_steps(p, n, &mp, no_tc, io, n->inputs[0], n->inputs[1], -1, 0.0f, flops);
}

/* Gemm for what cuBLASLt does not take: Y = contraction of op(A), op(B)
 * on the einsum kernel, then alpha and beta*C applied in place by maps. */
typedef struct generic_gemm {
    bool ta, tb;
    float alpha, beta;
} generic_gemm;

static sg_status run_generic_gemm(const cuda_step *s, cuda_run *r)
{
    const generic_gemm *gp = s->params;
    bool has_c = s->n_args == 5;
    sgk_view a = cuda_view(r, s->args[0]), b = cuda_view(r, s->args[1]);
    sgk_view y = cuda_view(r, s->args[s->n_args - 1]);
    sgk_einsum_params ep;
    memset(&ep, 0, sizeof ep);
    ep.n_in = 2;
    ep.n_letters = 3; /* m, n, k */
    ep.letter_dims[0] = y.dims[0];
    ep.letter_dims[1] = y.dims[1];
    ep.letter_dims[2] = gp->ta ? a.dims[0] : a.dims[1];
    ep.out_strides[0] = y.strides[0];
    ep.out_strides[1] = y.strides[1];
    ep.in_strides[0][0] = gp->ta ? a.strides[1] : a.strides[0];
    ep.in_strides[0][2] = gp->ta ? a.strides[0] : a.strides[1];
    ep.in_strides[1][2] = gp->tb ? b.strides[1] : b.strides[0];
    ep.in_strides[1][1] = gp->tb ? b.strides[0] : b.strides[1];
    ep.in_data[0] = a.data;
    ep.in_data[1] = b.data;
    ep.in_dtype[0] = a.dtype;
    ep.in_dtype[1] = b.dtype;
    SG_TRY(sgk_einsum(r->stream, &ep, &y));
    sgk_map_params mp;
    memset(&mp, 0, sizeof mp);
    if (gp->alpha != 1.0f) {
        mp.op = SGK_AFFINE;
        mp.alpha = gp->alpha;
        SG_TRY(sgk_map(r->stream, &mp, &y, 1, &y));
    }
    if (has_c) {
        /* y = C * beta + y, with beta as a broadcast scalar tensor. */
        sgk_view in[3];
        in[0] = cuda_view_bcast(r, s->args[2], y.rank, y.dims);
        in[1] = cuda_view_bcast(r, s->args[3], y.rank, y.dims);
        in[2] = y;
        mp.op = SGK_FMA;
        SG_TRY(sgk_map(r->stream, &mp, &y, 3, in));
    }
    return SEGRT_OK;
}

static sg_status build_generic_gemm(sg_cuda_plan *p, const sg_node *n, bool ta, bool tb, float alpha, float beta)
{
    const sg_graph *g = p->g;
    sg_dtype dt = g->values[n->inputs[0]].dtype;
    bool has_c = n->n_inputs > 2 && n->inputs[2] >= 0;
    if (sg_dtype_is_integer(dt) && (alpha != 1.0f || (has_c && beta != 1.0f)))
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "an integer Gemm with alpha or beta other than 1");
    int32_t args[5], na = 0;
    SG_TRY(cuda_value_as(p, n->inputs[0], SEGRT_DTYPE_UNDEFINED, CUDA_LAYOUT_ANY, &args[na++]));
    SG_TRY(cuda_value_as(p, n->inputs[1], SEGRT_DTYPE_UNDEFINED, CUDA_LAYOUT_ANY, &args[na++]));
    if (has_c) {
        SG_TRY(cuda_value_as(p, n->inputs[2], SEGRT_DTYPE_UNDEFINED, CUDA_LAYOUT_ANY, &args[na++]));
        /* beta as a device scalar of the output's dtype */
        uint8_t host[8];
        sg_dtype_store_f64(dt, host, 0, (double)beta);
        char tag[64];
        snprintf(tag, sizeof tag, "gemm beta %.9g %s", (double)beta, segrt_dtype_name(dt));
        void *dev = NULL;
        /* The store keys constants by blob: this scalar gets its own. */
        sg_blob *key = NULL;
        SG_TRY(sg_blob_new(segrt_dtype_size(dt), false, &key));
        memcpy(sg_blob_data(key), host, segrt_dtype_size(dt));
        sg_status us = cuda_const_upload(p, key, tag, host, segrt_dtype_size(dt), &dev);
        sg_blob_unref(key);
        SG_TRY(us);
        SG_TRY(cuda_tensor_const(p, dev, dt, 0, NULL, NULL, &args[na++]));
    }
    SG_TRY(cuda_output_new(p, n, 0, g->values[n->outputs[0]].dtype, CUDA_LAYOUT_PLAIN, &args[na++]));
    generic_gemm *gp = sg_malloc(sizeof *gp);
    if (!gp)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    *gp = (generic_gemm){ta, tb, alpha, beta};
    return cuda_step_new(p, n, "segrt gemm", run_generic_gemm, args, na, 1, gp, NULL, NULL);
}

sg_status cuda_build_gemm(sg_cuda_plan *p, const sg_node *n)
{
    const sg_graph *g = p->g;
    if (n->n_inputs < 2 || n->inputs[0] < 0 || n->inputs[1] < 0 || n->n_outputs < 1 || n->outputs[0] < 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs A, B and an output");
    const sg_value *av = &g->values[n->inputs[0]], *bv = &g->values[n->inputs[1]], *yv = &g->values[n->outputs[0]];
    int64_t ad[SEGRT_MAX_RANK], bd_[SEGRT_MAX_RANK], yd[SEGRT_MAX_RANK];
    if (!sg_shape_dims(&av->shape, ad) || !sg_shape_dims(&bv->shape, bd_) || !sg_shape_dims(&yv->shape, yd) ||
        av->shape.rank != 2 || bv->shape.rank != 2 || yv->shape.rank != 2)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "needs static 2-D A, B and output");
    bool ta = sg_attr_int(n, "transA", 0) != 0, tb = sg_attr_int(n, "transB", 0) != 0;
    float alpha = sg_attr_float(n, "alpha", 1.0f), beta = sg_attr_float(n, "beta", 1.0f);
    bool c_wide = n->n_inputs > 2 && n->inputs[2] >= 0 &&
                  (g->values[n->inputs[2]].dtype == SEGRT_DTYPE_FLOAT64 || sg_dtype_is_integer(g->values[n->inputs[2]].dtype));
    if ((sg_dtype_is_integer(av->dtype) || av->dtype == SEGRT_DTYPE_FLOAT64 || c_wide ||
         (ta ? ad[0] : ad[1]) == 0) && av->dtype == bv->dtype)
        return build_generic_gemm(p, n, ta, tb, alpha, beta);
    SG_TRY(check_dtype(n, av->dtype));
    SG_TRY(check_dtype(n, bv->dtype));
    int64_t M = ta ? ad[1] : ad[0], K = ta ? ad[0] : ad[1];
    int64_t KB = tb ? bd_[1] : bd_[0], N = tb ? bd_[0] : bd_[1];
    if (K != KB || yd[0] != M || yd[1] != N)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "A', B' and the output do not agree (%lldx%lld, %lldx%lld, "
                             "%lldx%lld)", (long long)M, (long long)K, (long long)KB, (long long)N,
                             (long long)yd[0], (long long)yd[1]);
    bool has_c = n->n_inputs > 2 && n->inputs[2] >= 0;
    if (has_c) {
        const sg_value *cv = &g->values[n->inputs[2]];
        if (!sg_dtype_is_float(cv->dtype) || cv->dtype == SEGRT_DTYPE_FLOAT64)
            return check_dtype(n, cv->dtype);
        int64_t cd[SEGRT_MAX_RANK];
        if (!sg_shape_dims(&cv->shape, cd) || cv->shape.rank > 2)
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "C must be static and of rank 2 or less");
        for (int32_t k = 0; k < cv->shape.rank; k++) {
            int64_t c_dim = cd[cv->shape.rank - 1 - k], o_dim = yd[1 - k];
            if (c_dim != 1 && c_dim != o_dim)
                return sg_node_error(n, SEGRT_ERROR_SHAPE, "C does not broadcast to %lldx%lld", (long long)M,
                                     (long long)N);
        }
    }
    mm_params mp;
    memset(&mp, 0, sizeof mp);
    bool no_tc = false;
    sg_dtype io = math_setup(p, n, &mp, &no_tc);
    if (M * N == 0) {
        int32_t outt;
        return cuda_output_new(p, n, 0, cuda_out_dtype(p, n, n->outputs[0]), CUDA_LAYOUT_PLAIN, &outt);
    }
    if (K == 0)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "an empty inner dim (K = 0) is not run through cuBLASLt");
    gemm_shape(&mp, M, N, K, ta, tb);
    mp.alpha = alpha;
    mp.batch = 1;
    mp.n_outer = 1;
    double flops = 2.0 * (double)M * (double)N * (double)K;
    return product_steps(p, n, &mp, no_tc, io, n->inputs[0], n->inputs[1], has_c ? n->inputs[2] : -1, beta, flops);
}
