/* Whether a cuDNN execution plan over differently strided tensors computes
 * what the plan over dense ones does: see cdg_same_results in
 * cudnn_graph.h.
 *
 * Why run it rather than trust a finalized plan: on an H200 with cuDNN
 * 9.19, engines that finalized over an output with a concatenation
 * slice's strides wrote it as if it were dense (2-D and 1-D convolutions
 * with fused epilogues, float32 and float16; 3-D ones were right). A plan
 * that finalizes says only that the engine accepts the descriptors. */
#include "backend/cuda/cudnn_graph.h"
#include "core/dtype.h"

#include <stdlib.h>
#include <string.h>

static size_t elem_size(cudnnDataType_t dt) { return dt == CUDNN_DATA_FLOAT ? 4 : 2; }

static int64_t numel(const cdg_tensor *t)
{
    int64_t n = 1;
    for (int32_t i = 0; i < t->rank; i++)
        n *= t->dims[i];
    return n;
}

/* Elements from the first to one past the last a tensor reaches. */
static int64_t extent(const cdg_tensor *t)
{
    int64_t e = 1;
    for (int32_t i = 0; i < t->rank; i++)
        e += (t->dims[i] - 1) * t->strides[i];
    return e;
}

/* Element offset of logical element k (row-major over dims) in t. */
static int64_t offset_of(const cdg_tensor *t, int64_t k)
{
    int64_t off = 0;
    for (int32_t i = t->rank - 1; i >= 0; i--) {
        off += (k % t->dims[i]) * t->strides[i];
        k /= t->dims[i];
    }
    return off;
}

/* A small deterministic generator: values in [-1, 1). */
static float next_value(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*state >> 40) & 0xFFFFFF) / (float)(1 << 23) - 1.0f;
}

static void store(cudnnDataType_t dt, void *buf, int64_t i, float v)
{
    if (dt == CUDNN_DATA_FLOAT)
        ((float *)buf)[i] = v;
    else
        ((uint16_t *)buf)[i] = dt == CUDNN_DATA_HALF ? sg_float_to_half(v) : sg_float_to_bf16(v);
}

/* Host and device buffers of one bound tensor, for the reference plan and
 * the candidate. */
typedef struct side {
    void *host[2];
    void *dev[2];
    size_t bytes[2];
} side;

/* Fills the host buffers: inputs get the same random values at each
 * logical element (and other random values in the candidate's gaps);
 * outputs get a byte pattern the comparison looks for afterwards. */
static void fill(const cdg_bind *b, side *sd, uint64_t *rng)
{
    cudnnDataType_t dt = b->ref.dtype;
    if (b->output) {
        memset(sd->host[0], 0x5A, sd->bytes[0]);
        memset(sd->host[1], 0x5A, sd->bytes[1]);
        return;
    }
    int64_t n_cand = (int64_t)(sd->bytes[1] / elem_size(dt));
    for (int64_t i = 0; i < n_cand; i++)
        store(dt, sd->host[1], i, next_value(rng));
    int64_t n = numel(&b->ref);
    size_t es = elem_size(dt);
    for (int64_t k = 0; k < n; k++) {
        float v = next_value(rng);
        int64_t r = offset_of(&b->ref, k), c = b->cand_offset + offset_of(&b->cand, k);
        store(dt, sd->host[0], r, v);
        memcpy((char *)sd->host[1] + (size_t)c * es, (char *)sd->host[0] + (size_t)r * es, es);
    }
}

/* Whether the candidate's output holds the reference's values at every
 * logical element and the fill pattern everywhere else (it is changed in
 * place: the slice is overwritten with the pattern for that check). */
static bool same_output(const cdg_bind *b, side *sd)
{
    size_t es = elem_size(b->ref.dtype);
    int64_t n = numel(&b->ref);
    static const unsigned char pattern[4] = {0x5A, 0x5A, 0x5A, 0x5A};
    for (int64_t k = 0; k < n; k++) {
        char *c = (char *)sd->host[1] + (size_t)(b->cand_offset + offset_of(&b->cand, k)) * es;
        if (memcmp(c, (char *)sd->host[0] + (size_t)offset_of(&b->ref, k) * es, es) != 0)
            return false;
        memcpy(c, pattern, es);
    }
    const unsigned char *h = sd->host[1];
    for (size_t i = 0; i < sd->bytes[1]; i++)
        if (h[i] != 0x5A)
            return false;
    return true;
}

static sg_status run_plan(cudnnHandle_t h, cudnnBackendDescriptor_t plan, int32_t n, const cdg_bind *binds,
                          side *sides, int32_t which, void *workspace, bool *ran)
{
    int64_t uids[CDG_VERIFY_MAX];
    void *ptrs[CDG_VERIFY_MAX];
    for (int32_t i = 0; i < n; i++) {
        uids[i] = binds[i].ref.uid;
        size_t off = which ? (size_t)binds[i].cand_offset * elem_size(binds[i].ref.dtype) : 0;
        ptrs[i] = (char *)sides[i].dev[which] + off;
    }
    cudnnBackendDescriptor_t pack = NULL;
    SG_TRY(cdg_variant_pack(n, uids, ptrs, workspace, &pack));
    *ran = cudnnBackendExecute(h, plan, pack) == CUDNN_STATUS_SUCCESS;
    cudnnBackendDestroyDescriptor(pack);
    return SEGRT_OK;
}

sg_status cdg_same_results(cudnnHandle_t h, cudaStream_t stream, cudnnBackendDescriptor_t ref,
                           cudnnBackendDescriptor_t cand, int64_t workspace, int32_t n, const cdg_bind *binds,
                           size_t max_bytes, bool *same)
{
    *same = false;
    if (n < 1 || n > CDG_VERIFY_MAX)
        return sg_error(SEGRT_ERROR_INTERNAL, "cuDNN plan comparison over %d tensors (1 to %d)", n, CDG_VERIFY_MAX);
    side sides[CDG_VERIFY_MAX];
    memset(sides, 0, sizeof sides);
    /* Every buffer as large as the largest tensor reaches, and room past
     * that (cuda_padded_bytes): an engine that reads one tensor with
     * another's strides then reads memory of this check, not past it. On
     * an H200 with cuDNN 9.19 a fused convolution + bias + residual add
     * whose output was a concatenation's slice (an EfficientNet UNet's
     * skip) read its dense residual past its end, and an illegal memory
     * access in a check kills the context the plan is built in. Inputs
     * are random past their elements too, outputs the pattern, which
     * same_output checks is kept. */
    size_t biggest = 0, total = workspace > 0 ? (size_t)workspace : 0;
    for (int32_t i = 0; i < n; i++) {
        size_t es = elem_size(binds[i].ref.dtype);
        size_t r = (size_t)extent(&binds[i].ref) * es, c = (size_t)(binds[i].cand_offset + extent(&binds[i].cand)) * es;
        biggest = r > biggest ? r : biggest;
        biggest = c > biggest ? c : biggest;
    }
    for (int32_t i = 0; i < n; i++) {
        sides[i].bytes[0] = sides[i].bytes[1] = cuda_padded_bytes(biggest);
        total += 2 * sides[i].bytes[0];
    }
    if (total > max_bytes)
        return SEGRT_OK; /* untried: too big to check at build */
    sg_status s = SEGRT_OK;
    void *ws = NULL;
    bool ready = workspace <= 0 || cudaMalloc(&ws, (size_t)workspace) == cudaSuccess;
    for (int32_t i = 0; ready && i < n; i++)
        for (int32_t w = 0; ready && w < 2; w++)
            ready = (sides[i].host[w] = calloc(1, sides[i].bytes[w])) != NULL &&
                    cudaMalloc(&sides[i].dev[w], sides[i].bytes[w]) == cudaSuccess;
    if (ready) {
        uint64_t rng = 0x5E6D2A11u;
        for (int32_t i = 0; i < n; i++)
            fill(&binds[i], &sides[i], &rng);
        for (int32_t i = 0; ready && i < n; i++)
            for (int32_t w = 0; ready && w < 2; w++)
                ready = cudaMemcpyAsync(sides[i].dev[w], sides[i].host[w], sides[i].bytes[w],
                                        cudaMemcpyHostToDevice, stream) == cudaSuccess;
    }
    bool ran = false;
    if (ready)
        s = run_plan(h, ref, n, binds, sides, 0, ws, &ran);
    if (ready && s == SEGRT_OK && ran)
        s = run_plan(h, cand, n, binds, sides, 1, ws, &ran);
    bool ok = ready && s == SEGRT_OK && ran;
    for (int32_t i = 0; ok && i < n; i++)
        for (int32_t w = 0; ok && w < 2; w++)
            if (binds[i].output)
                ok = cudaMemcpyAsync(sides[i].host[w], sides[i].dev[w], sides[i].bytes[w], cudaMemcpyDeviceToHost,
                                     stream) == cudaSuccess;
    ok = ok && cudaStreamSynchronize(stream) == cudaSuccess;
    for (int32_t i = 0; ok && i < n; i++)
        if (binds[i].output)
            ok = same_output(&binds[i], &sides[i]);
    cudaStreamSynchronize(stream);
    (void)cudaGetLastError(); /* a failed allocation or run only means "not the same" */
    for (int32_t i = 0; i < n; i++)
        for (int32_t w = 0; w < 2; w++) {
            cudaFree(sides[i].dev[w]);
            free(sides[i].host[w]);
        }
    cudaFree(ws);
    *same = ok;
    return s;
}
