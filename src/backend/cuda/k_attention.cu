// segrt's ScaledDotProductAttention (cuda_kernels.h, sgk_sdpa) in the
// flash-attention form: a block takes a tile of query rows of one batch
// index and walks the keys in tiles, keeping each row's running maximum,
// sum and weighted sum of values (the online softmax), so that the scores
// [S, L] never reach memory. Two kernels:
//
//   sdpa_mma   float16 and bfloat16 on tensor cores (sm_80's m16n8k16):
//              4 warps of 16 query rows, key tiles of 64 (32 for head
//              dims over 64), Q's fragments kept in registers, the
//              scores' accumulators reused as the A operand of P V as
//              the PTX fragment layouts allow. D and Dv up to 128.
//   sdpa_simt  every float dtype and size, in float32 (float64 for
//              float64): 8 warps of 4 rows, a lane per key of a 32-key
//              tile, head dims in chunks through shared memory.
//
// Every operand is read at its view's strides (a Transpose before the
// chain is a view, not a copy); the masks at theirs, 0 where they
// broadcast. Scores are kept in base 2 (scale and masks times log2 e) so
// that the exponentials are exp2.
#include "backend/cuda/k_mma.cuh"

#include <cuda_fp16.h>

namespace {

constexpr int MAX_MASKS = 2;

struct sdpa_args {
    const void *q, *k, *v, *m[MAX_MASKS];
    void *y;
    segrt_dtype ydt;
    int32_t nbd, n_masks;
    ll batch[SGK_MAX_RANK];                                  // the batch dims
    ll qb[SGK_MAX_RANK], kb[SGK_MAX_RANK], vb[SGK_MAX_RANK]; // their strides in each operand
    ll yb[SGK_MAX_RANK], mb[MAX_MASKS][SGK_MAX_RANK];
    ll q_row, q_col, k_row, k_col, v_row, v_col, y_row, y_col; // [S, D], [L, D], [L, Dv], [S, Dv]
    ll m_row[MAX_MASKS], m_col[MAX_MASKS];
    ll S, L, D, Dv;
    ll row_blocks; // blocks along S per batch index
    float scale;
    bool m_pair[MAX_MASKS]; // 16-bit mask m's keys in pairs: contiguous, even offsets, 4-byte aligned
};

// The element offsets of batch index b in every operand.
struct batch_offsets {
    ll q, k, v, y, m[MAX_MASKS];
};

__device__ __forceinline__ batch_offsets offsets_of(const sdpa_args &a, ll b)
{
    batch_offsets o = {0, 0, 0, 0, {0, 0}};
    for (int d = a.nbd - 1; d >= 0; d--) {
        ll i = b % a.batch[d];
        b /= a.batch[d];
        o.q += i * a.qb[d];
        o.k += i * a.kb[d];
        o.v += i * a.vb[d];
        o.y += i * a.yb[d];
#pragma unroll
        for (int m = 0; m < MAX_MASKS; m++)
            o.m[m] += i * a.mb[m][d];
    }
    return o;
}

// Tensor cores ----------------------------------------------------------------------------

// Below compute capability 8.0 the tensor-core kernel compiles to nothing
// (k_mma.cuh), and so do the helpers only it uses.
#if SG_MMA_SYNC
constexpr float LOG2E = 1.4426950408889634f;

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

__device__ __forceinline__ float quad_max(float x)
{
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x)
{
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Two consecutive 16-bit elements (4-byte aligned) as float32.
template <int XT> __device__ __forceinline__ float2 load_pair(const void *p)
{
    if constexpr (XT == SEGRT_DTYPE_BFLOAT16)
        return __bfloat1622float2(*static_cast<const __nv_bfloat162 *>(p));
    else
        return __half22float2(*static_cast<const __half2 *>(p));
}

template <int XT> __device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
    if constexpr (XT == SEGRT_DTYPE_BFLOAT16) {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&h);
    } else {
        __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&h);
    }
}

// rows x DP elements of a 16-bit operand into shared memory rows of P
// elements (zeros past n_rows and n_cols): 16-byte copies where the
// caller found the operand's columns contiguous and every other stride
// and its base 16-byte aligned (vec), element copies otherwise.
template <int ROWS, int DP, int P, typename T>
__device__ __forceinline__ void load_tile16(T *dst, const T *src, ll rs, ll cs, ll row0, ll n_rows, ll n_cols,
                                            bool vec)
{
    if (vec) {
        for (int c = threadIdx.x; c < ROWS * DP / 8; c += blockDim.x) {
            int r = c / (DP / 8), j = c % (DP / 8) * 8;
            uint4 u = make_uint4(0, 0, 0, 0);
            if (row0 + r < n_rows && j < n_cols)
                u = *reinterpret_cast<const uint4 *>(src + (row0 + r) * rs + j);
            *reinterpret_cast<uint4 *>(dst + r * P + j) = u;
        }
        return;
    }
    const unsigned short *s = reinterpret_cast<const unsigned short *>(src);
    unsigned short *d = reinterpret_cast<unsigned short *>(dst);
    for (int c = threadIdx.x; c < ROWS * DP; c += blockDim.x) {
        int r = c / DP, j = c % DP;
        d[r * P + j] = row0 + r < n_rows && j < n_cols ? s[(row0 + r) * rs + j * cs] : (unsigned short)0;
    }
}

#endif

template <int XT, int DP, int BN>
__global__ void __launch_bounds__(128) sdpa_mma(const sdpa_args a, bool vq, bool vk, bool vv)
{
#if SG_MMA_SYNC
    typedef typename mma_elem<XT>::type T;
    constexpr int BM = 64, P = DP + 8; // 8 elements of padding: fragment loads free of bank conflicts
    __shared__ __align__(16) T qs[BM * P];
    __shared__ __align__(16) T ks[BN * P];
    __shared__ __align__(16) T vs[BN * P];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const ll b = blockIdx.x / a.row_blocks, r0 = blockIdx.x % a.row_blocks * BM;
    const batch_offsets off = offsets_of(a, b);
    const T *q = static_cast<const T *>(a.q) + off.q;
    const T *k = static_cast<const T *>(a.k) + off.k;
    const T *v = static_cast<const T *>(a.v) + off.v;
    load_tile16<BM, DP, P>(qs, q, a.q_row, a.q_col, r0, a.S, a.D, vq);
    __syncthreads();
    // Q's A fragments for the warp's 16 rows, every 16 of the head dims.
    uint32_t qf[DP / 16][4];
    const int wr = 16 * warp;
#pragma unroll
    for (int kk = 0; kk < DP / 16; kk++) {
        qf[kk][0] = *reinterpret_cast<const uint32_t *>(&qs[(wr + g) * P + 16 * kk + 2 * t]);
        qf[kk][1] = *reinterpret_cast<const uint32_t *>(&qs[(wr + g + 8) * P + 16 * kk + 2 * t]);
        qf[kk][2] = *reinterpret_cast<const uint32_t *>(&qs[(wr + g) * P + 16 * kk + 8 + 2 * t]);
        qf[kk][3] = *reinterpret_cast<const uint32_t *>(&qs[(wr + g + 8) * P + 16 * kk + 8 + 2 * t]);
    }
    float o[DP / 8][4];
#pragma unroll
    for (int n = 0; n < DP / 8; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0;
    // Rows g and g + 8 of the warp's: their running maximum (base 2) and
    // the sum of this thread's share of their weights.
    float mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0, 0};
    const ll row[2] = {r0 + wr + g, r0 + wr + g + 8};
    const float sl = a.scale * LOG2E;
    const unsigned short *vh = reinterpret_cast<const unsigned short *>(vs);
    // The masks' rows of rows g and g + 8 (read only for rows before S).
    const T *mrow[MAX_MASKS][2];
#pragma unroll
    for (int m = 0; m < MAX_MASKS; m++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            mrow[m][h] = m < a.n_masks ? static_cast<const T *>(a.m[m]) + off.m[m] + row[h] * a.m_row[m] : nullptr;
    for (ll k0 = 0; k0 < a.L; k0 += BN) {
        __syncthreads();
        load_tile16<BN, DP, P>(ks, k, a.k_row, a.k_col, k0, a.L, a.D, vk);
        load_tile16<BN, DP, P>(vs, v, a.v_row, a.v_col, k0, a.L, a.Dv, vv);
        __syncthreads();
        float s[BN / 8][4];
#pragma unroll
        for (int n = 0; n < BN / 8; n++)
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0;
#pragma unroll
        for (int kk = 0; kk < DP / 16; kk++)
#pragma unroll
            for (int n = 0; n < BN / 8; n++) {
                uint32_t bf[2];
                bf[0] = *reinterpret_cast<const uint32_t *>(&ks[(8 * n + g) * P + 16 * kk + 2 * t]);
                bf[1] = *reinterpret_cast<const uint32_t *>(&ks[(8 * n + g) * P + 16 * kk + 8 + 2 * t]);
                mma16816<XT>(s[n], qf[kk], bf);
            }
        float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < BN / 8; n++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                // Keys key and key + 1 of row h: the masks read in pairs
                // where they lie so.
                const ll key = k0 + 8 * n + 2 * t;
                float m0 = 0, m1 = 0;
                if (a.n_masks && row[h] < a.S) {
#pragma unroll
                    for (int m = 0; m < MAX_MASKS; m++) {
                        if (m >= a.n_masks)
                            break;
                        const T *mp = mrow[m][h];
                        if (a.m_pair[m] && key + 1 < a.L) {
                            float2 f = load_pair<XT>(mp + key);
                            m0 += f.x;
                            m1 += f.y;
                        } else {
                            if (key < a.L)
                                m0 += to_float(mp[key * a.m_col[m]]);
                            if (key + 1 < a.L)
                                m1 += to_float(mp[(key + 1) * a.m_col[m]]);
                        }
                    }
                }
                float x0 = key < a.L ? s[n][2 * h] * sl + m0 * LOG2E : -INFINITY;
                float x1 = key + 1 < a.L ? s[n][2 * h + 1] * sl + m1 * LOG2E : -INFINITY;
                s[n][2 * h] = x0;
                s[n][2 * h + 1] = x1;
                tmax[h] = fmaxf(tmax[h], fmaxf(x0, x1));
            }
        float corr[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float m = fmaxf(mx[h], quad_max(tmax[h]));
            // A row with every score so far -inf subtracts 0: its weights
            // are 0, and 0 / 0 at the end gives NaN, as the reference's
            // softmax does.
            float ref = m == -INFINITY ? 0.0f : m;
            corr[h] = exp2f(mx[h] - ref);
            mx[h] = m;
            float part = 0;
#pragma unroll
            for (int n = 0; n < BN / 8; n++) {
                s[n][2 * h] = exp2f(s[n][2 * h] - ref);
                s[n][2 * h + 1] = exp2f(s[n][2 * h + 1] - ref);
                part += s[n][2 * h] + s[n][2 * h + 1];
            }
            sum[h] = sum[h] * corr[h] + part;
        }
#pragma unroll
        for (int n = 0; n < DP / 8; n++) {
            o[n][0] *= corr[0];
            o[n][1] *= corr[0];
            o[n][2] *= corr[1];
            o[n][3] *= corr[1];
        }
        // P V: the scores' accumulators of keys 16kk..16kk+15 are the A
        // fragment of that k-step (n-tiles 2kk and 2kk + 1); V's B fragment
        // is gathered from its [key][dim] rows.
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            uint32_t pa[4] = {pack2<XT>(s[2 * kk][0], s[2 * kk][1]), pack2<XT>(s[2 * kk][2], s[2 * kk][3]),
                              pack2<XT>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack2<XT>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            const int kr = 16 * kk + 2 * t;
#pragma unroll
            for (int n = 0; n < DP / 8; n++) {
                const int c = 8 * n + g;
                uint32_t bf[2];
                bf[0] = (uint32_t)vh[kr * P + c] | (uint32_t)vh[(kr + 1) * P + c] << 16;
                bf[1] = (uint32_t)vh[(kr + 8) * P + c] | (uint32_t)vh[(kr + 9) * P + c] << 16;
                mma16816<XT>(o[n], pa, bf);
            }
        }
    }
    float inv[2] = {1.0f / quad_sum(sum[0]), 1.0f / quad_sum(sum[1])};
#pragma unroll
    for (int n = 0; n < DP / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            ll r = row[e >> 1], c = 8 * n + 2 * t + (e & 1);
            if (r < a.S && c < a.Dv)
                st_f32(a.y, r * a.y_row + c * a.y_col + off.y, a.ydt, o[n][e] * inv[e >> 1]);
        }
#endif
}

// Every dtype: float32 (float64) math -------------------------------------------------

template <typename A> __device__ __forceinline__ A exp_(A x);
template <> __device__ __forceinline__ float exp_<float>(float x) { return expf(x); }
template <> __device__ __forceinline__ double exp_<double>(double x) { return exp(x); }

template <typename A> __device__ __forceinline__ A warp_max(A x)
{
    for (int s = 16; s; s >>= 1) {
        A y = __shfl_xor_sync(0xffffffffu, x, s);
        x = x > y ? x : y;
    }
    return x;
}

template <typename A> __device__ __forceinline__ A warp_sum(A x)
{
    for (int s = 16; s; s >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, s);
    return x;
}

// rows x cols elements (of n_rows, n_cols from row0, col0) into shared
// memory rows of `pitch`, converted to A, zeros outside.
template <int XT, typename A>
__device__ __forceinline__ void load_tile(A *dst, int rows, int cols, int pitch, const void *src, ll rs, ll cs,
                                          ll row0, ll col0, ll n_rows, ll n_cols)
{
    for (int c = threadIdx.x; c < rows * cols; c += blockDim.x) {
        int r = c / cols, j = c % cols;
        ll gr = row0 + r, gc = col0 + j;
        dst[r * pitch + j] = gr < n_rows && gc < n_cols ? ldr<XT, A>(src, (segrt_dtype)XT, gr * rs + gc * cs) : (A)0;
    }
}

// 8 warps of 4 query rows; a lane per key of a 32-key tile; head dims in
// chunks of DC, value dims in chunks of 32 * DVT (one pass over the keys
// each: models' Dv fits one).
template <int XT, typename A, int DC, int DVT>
__global__ void __launch_bounds__(256) sdpa_simt(const sdpa_args a)
{
    constexpr int BM = 32, BK = 32, RW = 4, DVC = 32 * DVT;
    __shared__ A qs[BM * DC];
    __shared__ A ks[BK * (DC + 1)]; // odd pitch: lane j's row j in its own bank
    __shared__ A vs[BK * DVC];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const ll b = blockIdx.x / a.row_blocks, r0 = blockIdx.x % a.row_blocks * BM;
    const batch_offsets off = offsets_of(a, b);
    const char *q = static_cast<const char *>(a.q), *k = static_cast<const char *>(a.k);
    const char *v = static_cast<const char *>(a.v);
    const int eb = dtype_bytes(XT);
    q += off.q * eb;
    k += off.k * eb;
    v += off.v * eb;
    const bool q_once = a.D <= DC;
    for (ll c0 = 0; c0 < a.Dv; c0 += DVC) {
        A mx[RW], sum[RW], o[RW][DVT];
#pragma unroll
        for (int r = 0; r < RW; r++) {
            mx[r] = -INFINITY;
            sum[r] = 0;
#pragma unroll
            for (int j = 0; j < DVT; j++)
                o[r][j] = 0;
        }
        if (q_once) {
            __syncthreads();
            load_tile<XT, A>(qs, BM, DC, DC, q, a.q_row, a.q_col, r0, 0, a.S, a.D);
        }
        for (ll k0 = 0; k0 < a.L; k0 += BK) {
            A s[RW] = {};
            for (ll d0 = 0; d0 < a.D; d0 += DC) {
                __syncthreads();
                if (!q_once)
                    load_tile<XT, A>(qs, BM, DC, DC, q, a.q_row, a.q_col, r0, d0, a.S, a.D);
                load_tile<XT, A>(ks, BK, DC, DC + 1, k, a.k_row, a.k_col, k0, d0, a.L, a.D);
                __syncthreads();
                const int dn = a.D - d0 < DC ? (int)(a.D - d0) : DC;
                for (int d = 0; d < dn; d++) {
                    A kv = ks[lane * (DC + 1) + d];
#pragma unroll
                    for (int r = 0; r < RW; r++)
                        s[r] += qs[(RW * warp + r) * DC + d] * kv;
                }
            }
            const ll key = k0 + lane;
            A p[RW];
#pragma unroll
            for (int r = 0; r < RW; r++) {
                ll row = r0 + RW * warp + r;
                A x = s[r] * (A)a.scale;
                if (key >= a.L)
                    x = -INFINITY;
                else if (row < a.S)
#pragma unroll
                    for (int m = 0; m < MAX_MASKS; m++)
                        if (m < a.n_masks)
                            x += ldr<XT, A>(a.m[m], (segrt_dtype)XT,
                                            off.m[m] + row * a.m_row[m] + key * a.m_col[m]);
                A m = warp_max(x);
                // NaN scores: x != x keeps the row NaN, as the reference.
                m = mx[r] > m ? mx[r] : m;
                A ref = m == -INFINITY ? (A)0 : m;
                A corr = exp_<A>(mx[r] - ref);
                mx[r] = m;
                p[r] = exp_<A>(x - ref);
                sum[r] = sum[r] * corr + p[r];
#pragma unroll
                for (int j = 0; j < DVT; j++)
                    o[r][j] *= corr;
            }
            __syncthreads();
            load_tile<XT, A>(vs, BK, DVC, DVC, v, a.v_row, a.v_col, k0, c0, a.L, a.Dv);
            __syncthreads();
            const int kn = a.L - k0 < BK ? (int)(a.L - k0) : BK;
            for (int j = 0; j < kn; j++)
#pragma unroll
                for (int r = 0; r < RW; r++) {
                    A pj = __shfl_sync(0xffffffffu, p[r], j);
#pragma unroll
                    for (int u = 0; u < DVT; u++)
                        o[r][u] += pj * vs[j * DVC + lane + 32 * u];
                }
        }
#pragma unroll
        for (int r = 0; r < RW; r++) {
            ll row = r0 + RW * warp + r;
            A total = warp_sum(sum[r]);
#pragma unroll
            for (int u = 0; u < DVT; u++) {
                ll c = c0 + lane + 32 * u;
                if (row < a.S && c < a.Dv)
                    st<A>(a.y, a.ydt, off.y + row * a.y_row + c * a.y_col, o[r][u] / total);
            }
        }
    }
}

// Host ---------------------------------------------------------------------------------------

// The head-dim tile of the tensor-core kernel for D and Dv, or 0.
int mma_tile(ll D, ll Dv)
{
    ll d = D > Dv ? D : Dv;
    return d <= 16 ? 16 : d <= 32 ? 32 : d <= 64 ? 64 : d <= 128 ? 128 : 0;
}

// Whether 16-byte loads read rows of view x (strides in elements, its
// last dim the one loaded contiguously) for n_cols columns.
bool vec_rows(const sgk_view *x, ll n_cols)
{
    int r = x->rank;
    if (x->strides[r - 1] != 1 || n_cols % 8 != 0 || !aligned16(x->data))
        return false;
    for (int d = 0; d < r - 1; d++)
        if (x->dims[d] > 1 && x->strides[d] % 8 != 0)
            return false;
    return true;
}

template <int XT, int DP>
segrt_status launch_mma(cudaStream_t stream, const sdpa_args &a, ll blocks, bool vq, bool vk, bool vv)
{
    constexpr int BN = DP > 64 ? 32 : 64;
    sdpa_mma<XT, DP, BN><<<(unsigned)blocks, 128, 0, stream>>>(a, vq, vk, vv);
    return launched("sdpa_mma");
}

template <int XT> segrt_status mma_for(cudaStream_t stream, const sdpa_args &a, ll blocks, bool vq, bool vk, bool vv)
{
    switch (mma_tile(a.D, a.Dv)) {
    case 16: return launch_mma<XT, 16>(stream, a, blocks, vq, vk, vv);
    case 32: return launch_mma<XT, 32>(stream, a, blocks, vq, vk, vv);
    case 64: return launch_mma<XT, 64>(stream, a, blocks, vq, vk, vv);
    default: return launch_mma<XT, 128>(stream, a, blocks, vq, vk, vv);
    }
}

} // namespace

extern "C" bool sgk_sdpa_mma_takes(segrt_dtype dt, int64_t D, int64_t Dv)
{
    return (dt == SEGRT_DTYPE_FLOAT16 || dt == SEGRT_DTYPE_BFLOAT16) && mma_tile(D, Dv) != 0;
}

extern "C" segrt_status sgk_sdpa(cudaStream_t stream, const sgk_view *y, const sgk_view *q, const sgk_view *k,
                                 const sgk_view *v, const sgk_view *masks, int32_t n_masks, float scale, bool mma)
{
    const int r = q->rank;
    if (r < 2 || r > SGK_MAX_RANK || k->rank != r || v->rank != r || y->rank != r || n_masks < 0 ||
        n_masks > MAX_MASKS)
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_sdpa: bad views");
    if (k->dtype != q->dtype || v->dtype != q->dtype || !is_float(q->dtype))
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_sdpa: q, k and v must have one float dtype");
    sdpa_args a;
    memset(&a, 0, sizeof a);
    a.S = q->dims[r - 2];
    a.D = q->dims[r - 1];
    a.L = k->dims[r - 2];
    a.Dv = v->dims[r - 1];
    if (k->dims[r - 1] != a.D || v->dims[r - 2] != a.L || y->dims[r - 2] != a.S || y->dims[r - 1] != a.Dv)
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_sdpa: k, v or y do not fit q");
    a.nbd = r - 2;
    ll nb = 1;
    for (int d = 0; d < r - 2; d++) {
        if (k->dims[d] != q->dims[d] || v->dims[d] != q->dims[d] || y->dims[d] != q->dims[d])
            return sg_error(SEGRT_ERROR_INTERNAL, "sgk_sdpa: batch dims differ");
        a.batch[d] = q->dims[d];
        a.qb[d] = q->strides[d];
        a.kb[d] = k->strides[d];
        a.vb[d] = v->strides[d];
        a.yb[d] = y->strides[d];
        nb *= q->dims[d];
    }
    a.n_masks = n_masks;
    for (int m = 0; m < n_masks; m++) {
        const sgk_view *mv = &masks[m];
        if (mv->rank != r || mv->dtype != q->dtype)
            return sg_error(SEGRT_ERROR_INTERNAL, "sgk_sdpa: mask %d is not a view of the scores in q's dtype", m);
        for (int d = 0; d < r; d++) {
            ll want = d == r - 1 ? a.L : q->dims[d];
            if (mv->dims[d] != want && mv->strides[d] != 0)
                return sg_error(SEGRT_ERROR_INTERNAL, "sgk_sdpa: mask %d does not broadcast to the scores", m);
        }
        a.m[m] = mv->data;
        for (int d = 0; d < r - 2; d++)
            a.mb[m][d] = mv->strides[d];
        a.m_row[m] = mv->strides[r - 2];
        a.m_col[m] = mv->strides[r - 1];
        bool pair = mv->strides[r - 1] == 1 && ((uintptr_t)mv->data & 3) == 0 && dtype_bytes(mv->dtype) == 2;
        for (int d = 0; d < r - 1; d++)
            pair &= mv->strides[d] % 2 == 0;
        a.m_pair[m] = pair;
    }
    a.q = q->data;
    a.k = k->data;
    a.v = v->data;
    a.y = y->data;
    a.ydt = y->dtype;
    a.q_row = q->strides[r - 2];
    a.q_col = q->strides[r - 1];
    a.k_row = k->strides[r - 2];
    a.k_col = k->strides[r - 1];
    a.v_row = v->strides[r - 2];
    a.v_col = v->strides[r - 1];
    a.y_row = y->strides[r - 2];
    a.y_col = y->strides[r - 1];
    a.scale = scale;
    if (nb == 0 || a.S == 0 || a.Dv == 0)
        return SEGRT_OK;
    if (mma && sgk_sdpa_mma_takes(q->dtype, a.D, a.Dv)) {
        a.row_blocks = (a.S + 63) / 64;
        ll blocks = nb * a.row_blocks;
        if (blocks > INT32_MAX)
            return sg_error(SEGRT_ERROR_UNSUPPORTED, "sgk_sdpa: %lld row blocks", (long long)blocks);
        bool vq = vec_rows(q, a.D), vk = vec_rows(k, a.D), vv = vec_rows(v, a.Dv);
        if (q->dtype == SEGRT_DTYPE_BFLOAT16)
            return mma_for<SEGRT_DTYPE_BFLOAT16>(stream, a, blocks, vq, vk, vv);
        return mma_for<SEGRT_DTYPE_FLOAT16>(stream, a, blocks, vq, vk, vv);
    }
    a.row_blocks = (a.S + 31) / 32;
    ll blocks = nb * a.row_blocks;
    if (blocks > INT32_MAX)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "sgk_sdpa: %lld row blocks", (long long)blocks);
    switch (q->dtype) {
    case SEGRT_DTYPE_FLOAT16: sdpa_simt<SEGRT_DTYPE_FLOAT16, float, 64, 4><<<(unsigned)blocks, 256, 0, stream>>>(a); break;
    case SEGRT_DTYPE_BFLOAT16: sdpa_simt<SEGRT_DTYPE_BFLOAT16, float, 64, 4><<<(unsigned)blocks, 256, 0, stream>>>(a); break;
    case SEGRT_DTYPE_FLOAT32: sdpa_simt<SEGRT_DTYPE_FLOAT32, float, 64, 4><<<(unsigned)blocks, 256, 0, stream>>>(a); break;
    case SEGRT_DTYPE_FLOAT64: sdpa_simt<SEGRT_DTYPE_FLOAT64, double, 32, 2><<<(unsigned)blocks, 256, 0, stream>>>(a); break;
    default: return sg_error(SEGRT_ERROR_INTERNAL, "sgk_sdpa: %s", segrt_dtype_name(q->dtype));
    }
    return launched("sdpa_simt");
}
