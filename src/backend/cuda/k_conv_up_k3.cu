// ConvTranspose kernel 3, stride 2, pads 1 on the tensor cores (see
// k_conv_up_k3.h).
//
// Columns of the product are phase-major: column j is phase j / KP and
// output channel j % KP of the block's chunk of KP channels, so an n8
// block holds 8 / KP phases of 2 or 4 channels, or 8 channels of one
// phase. Offsets and phases are numbered with a bit per dim, the last
// dim lowest. Shared memory holds the chunk's weights as the needed
// (offset, column block) pairs in offset-major order, each [8 columns]
// [C] with rows 16 bytes longer than the data (ldmatrix's eight row reads
// then fall in distinct banks), and two tiles of inputs, [position][C]
// likewise.
#include "backend/cuda/k_conv_up_k3.h"
#include "backend/cuda/k_mma.cuh"

#include <string.h>
#include <utility>

#define UK_THREADS 256
#define UK_MAX_C 64
#define UK_SMEM_MAX (110 * 1024) // opted in at launch; two blocks fit in an SM's 228 KB
#define UK_MAX_BLOCKS_PER_SM (2048 / UK_THREADS)

// The (offset, phase) structure, for the kernel (with constant arguments)
// and for the weights' packing on the host alike.
//
// Offset o reaches phase r when every dim with offset 1 has phase 1.
__host__ __device__ constexpr bool uk_reaches(int o, int r) { return (o & ~r) == 0; }
// Column blocks of nsp dims and kp channels a chunk, and their phases.
__host__ __device__ constexpr int uk_nblocks(int nsp, int kp) { return (1 << nsp) * kp / 8; }
__host__ __device__ constexpr int uk_first_phase(int kp, int nb) { return nb * 8 / kp; }
__host__ __device__ constexpr int uk_block_phases(int kp) { return kp >= 8 ? 1 : 8 / kp; }
__host__ __device__ constexpr bool uk_needed(int kp, int o, int nb)
{
    for (int i = 0; i < uk_block_phases(kp); i++)
        if (uk_reaches(o, uk_first_phase(kp, nb) + i))
            return true;
    return false;
}
// Needed blocks of offset o; of all offsets before o; the i-th of o's.
__host__ __device__ constexpr int uk_count(int nsp, int kp, int o)
{
    int c = 0;
    for (int nb = 0; nb < uk_nblocks(nsp, kp); nb++)
        c += uk_needed(kp, o, nb) ? 1 : 0;
    return c;
}
__host__ __device__ constexpr int uk_base(int nsp, int kp, int o)
{
    int c = 0;
    for (int p = 0; p < o; p++)
        c += uk_count(nsp, kp, p);
    return c;
}
__host__ __device__ constexpr int uk_nth(int nsp, int kp, int o, int i)
{
    for (int nb = 0, seen = 0; nb < uk_nblocks(nsp, kp); nb++)
        if (uk_needed(kp, o, nb) && seen++ == i)
            return nb;
    return -1;
}
// ONNX's tap (last dim fastest) that offset o and phase r use: per dim,
// tap 1 for phase 0, tap 2 for phase 1 at offset 0, tap 0 at offset 1.
__host__ __device__ constexpr int uk_tap(int nsp, int o, int r)
{
    int t = 0;
    for (int a = nsp - 1, m = 1; a >= 0; a--, m *= 3) {
        const int ob = (o >> (nsp - 1 - a)) & 1, rb = (r >> (nsp - 1 - a)) & 1;
        t += m * (rb == 0 ? 1 : ob ? 0 : 2);
    }
    return t;
}

// f(std::integral_constant<int, i>) for i in [0, N): a loop whose index
// is a compile-time constant in the body (the accumulator a block goes
// to, and how many blocks an offset has, must be known there, or the
// accumulators land in local memory).
template <typename F, int... I> __device__ __forceinline__ void uk_static_for_seq(F &&f, std::integer_sequence<int, I...>)
{
    (f(std::integral_constant<int, I>{}), ...);
}
template <int N, typename F> __device__ __forceinline__ void uk_static_for(F &&f)
{
    uk_static_for_seq(f, std::make_integer_sequence<int, N>{});
}

// A block's q positions: 4 x 4 x 8 (3-D) or 8 x 16 (2-D), 16 a warp;
// its tile of inputs adds the +1 halo along each real dim.
template <int NSP> struct uk_box {
    static constexpr int b0 = NSP == 3 ? 4 : 1, b1 = NSP == 3 ? 4 : 8, b2 = NSP == 3 ? 8 : 16;
    static constexpr int t0 = NSP == 3 ? b0 + 1 : 1, t1 = b1 + 1, t2 = b2 + 1;
    static constexpr int tile = t0 * t1 * t2;
    static_assert(b0 * b1 * b2 == 128, "128 positions a block");
};

struct ukgeom {
    int in[3], out[3]; // spatial dims of x and y (1 in front in 2-D)
    int C, Cp, K;      // input channels (Cp: rounded up to 16), output channels
    int kp;            // output channels a chunk (blockIdx.y)
    int ld;            // shared-memory row length of the weights and the tiles (Cp + 8)
    int ntile[3];      // tiles along each dim
    int ntiles;        // all tiles, N included
    fastdiv fntile[3]; // ntile, for the tile's origin
    fastdiv fpieces;   // Cp / 8, for the tile's copies
    ll xn, xs[3], yn, yc, ys[3];
    segrt_dtype yt;
    sgk_act act;
    float alpha;
    bool ypair; // two channels as one vector store
};

// The q origin of a tile along each dim, and its sample.
template <int NSP> __device__ __forceinline__ void uk_origin(const ukgeom &g, int tile, int *q, int *n)
{
    typedef uk_box<NSP> B;
    uint32_t t = (uint32_t)tile, u = fastdiv_div(t, g.fntile[2]);
    q[2] = (int)(t - u * g.ntile[2]) * B::b2;
    t = fastdiv_div(u, g.fntile[1]);
    q[1] = (int)(u - t * g.ntile[1]) * B::b1;
    u = fastdiv_div(t, g.fntile[0]);
    q[0] = (int)(t - u * g.ntile[0]) * B::b0;
    *n = (int)u;
}

// Starts copying a tile's inputs into xsh (zeros past the image and past
// C), 8 channels a copy: consecutive threads take consecutive pieces of a
// position and then of the next, so a warp reads whole runs of memory.
template <int NSP, typename T>
__device__ __forceinline__ void uk_issue(const ukgeom &g, const T *x, int tile, T *xsh)
{
    typedef uk_box<NSP> B;
    int q[3], n;
    uk_origin<NSP>(g, tile, q, &n);
    const T *xb = x + (ll)n * g.xn;
    const int pieces = g.Cp / 8;
    for (int e = threadIdx.x; e < B::tile * pieces; e += UK_THREADS) {
        const int tp = (int)fastdiv_div((uint32_t)e, g.fpieces), c = (e - tp * pieces) * 8;
        const int a2 = tp % B::t2, a1 = (tp / B::t2) % B::t1, a0 = tp / (B::t2 * B::t1);
        const int i0 = q[0] + a0, i1 = q[1] + a1, i2 = q[2] + a2;
        const bool in = i0 < g.in[0] && i1 < g.in[1] && i2 < g.in[2] && c < g.C;
        const T *src = in ? xb + i0 * g.xs[0] + i1 * g.xs[1] + i2 * g.xs[2] + c : xb;
        cp_async16(xsh + tp * g.ld + c, src, in);
    }
}

// Blocks an SM should hold: few columns leave registers to spare for more
// tiles in flight (the kernel is bound by memory).
__host__ __device__ constexpr int uk_min_blocks(int kp) { return kp <= 2 ? 3 : 2; }

template <int XT, int NSP, int KP>
__global__ void __launch_bounds__(UK_THREADS, uk_min_blocks(KP))
    conv_up_k3(const void *__restrict__ x, void *__restrict__ y, const float *__restrict__ w,
               const float *__restrict__ bias, ukgeom g)
{
#if SG_MMA_SYNC
    typedef typename mma_elem<XT>::type T;
    typedef uk_box<NSP> B;
    constexpr int PH = 1 << NSP, NB = uk_nblocks(NSP, KP), NW = uk_base(NSP, KP, PH);
    constexpr int BZ = KP >= 8 ? KP / 8 : 1; // distinct channel pairs a lane stores
    extern __shared__ __align__(128) unsigned char smem[];
    T *wsh = (T *)smem;                // [needed block][8][ld]
    T *xsh0 = wsh + NW * 8 * g.ld;     // two of [tile position][ld]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, grp = lane >> 2, t4 = lane & 3;
    const int chunk = blockIdx.y;

    // This chunk's weights, four a load; Cp is a multiple of 16.
    const float *wc = w + (ll)chunk * NW * 8 * g.Cp;
#pragma unroll 4
    for (int e = threadIdx.x * 4; e < NW * 8 * g.Cp; e += UK_THREADS * 4) {
        float4 v = *(const float4 *)(wc + e);
        T *d = wsh + (e / g.Cp) * g.ld + e % g.Cp;
        d[0] = mma_round<XT>(v.x);
        d[1] = mma_round<XT>(v.y);
        d[2] = mma_round<XT>(v.z);
        d[3] = mma_round<XT>(v.w);
    }
    // The lane's columns, the same in every tile (worked out per store,
    // their index arithmetic made the kernel issue-bound): column
    // nb * 8 + 2 * t4
    // (and the next) is phase (nb * 8 + 2 * t4) / KP, whose bits are a
    // block's own (known here at compile time) or'ed with the lane's, lr;
    // and channel chunk * KP + (nb * 8 + 2 * t4) % KP, one of BZ per lane.
    // Their biases, and their offsets in y less the block's phase bits.
    const int lr = KP >= 8 ? 0 : 2 * t4 / KP;
    const ll lr_off = (NSP == 3 && (lr & 4) ? g.ys[0] : 0) + ((lr & 2) ? g.ys[1] : 0) + ((lr & 1) ? g.ys[2] : 0);
    float bz[BZ][2];
    int kz[BZ];
    ll kz_off[BZ];
#pragma unroll
    for (int i = 0; i < BZ; i++) {
        const int k = chunk * KP + (i * 8 + 2 * t4) % KP;
        kz[i] = k;
        kz_off[i] = lr_off + (ll)k * g.yc;
        bz[i][0] = bias && k < g.K ? bias[k] : 0.0f;
        bz[i][1] = bias && k + 1 < g.K ? bias[k + 1] : 0.0f;
    }
    // Stores of y's dtype in pairs: the usual case, without the general
    // store's dtype tests.
    const bool own_pairs = g.ypair && g.yt == (segrt_dtype)XT;
    // This lane's ldmatrix row of the warp's 16 positions, as a tile index
    // at offset 0; and its rows of the weights (two blocks a load).
    const int lrow = (lane & 7) + ((lane >> 3) & 1) * 8, lcol = (lane >> 4) * 8;
    int hb;
    {
        const int r = warp * 16 + lrow;
        hb = ((r / (B::b2 * B::b1)) * B::t1 + (r / B::b2) % B::b1) * B::t2 + r % B::b2;
    }
    const int wrow = (lane & 7) + (lane >> 4) * 8, wcol = ((lane >> 3) & 1) * 8;
    const int ksteps = g.Cp / 16;
    const T *xt = (const T *)x;
    if (blockIdx.x < g.ntiles)
        uk_issue<NSP>(g, xt, blockIdx.x, xsh0);
    cp_async_commit();
    for (int tile = blockIdx.x, it = 0; tile < g.ntiles; tile += gridDim.x, it++) {
        const T *xsh = xsh0 + (it & 1) * B::tile * g.ld;
        if (tile + (int)gridDim.x < g.ntiles)
            uk_issue<NSP>(g, xt, tile + gridDim.x, xsh0 + ((it + 1) & 1) * B::tile * g.ld);
        cp_async_commit(); // possibly empty: one group per iteration
        cp_async_wait1();  // this tile's inputs have landed (this thread's part)
        __syncthreads();   // everyone's part, and the weights, the first time
        float acc[NB][4];
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                acc[nb][i] = 0.0f;
#pragma unroll 1
        for (int ks = 0; ks < ksteps; ks++) {
            uk_static_for<PH>([&](auto oc) {
                constexpr int O = decltype(oc)::value;
                constexpr int od = NSP == 3 ? (O >> 2) & 1 : 0, oh = (O >> 1) & 1, ow = O & 1;
                uint32_t a[4];
                ldmatrix_x4(a, xsh + (hb + (od * B::t1 + oh) * B::t2 + ow) * g.ld + ks * 16 + lcol);
                uk_static_for<(uk_count(NSP, KP, O) + 1) / 2>([&](auto pc) {
                    constexpr int i = 2 * decltype(pc)::value, cnt = uk_count(NSP, KP, O);
                    const T *wb = wsh + ((uk_base(NSP, KP, O) + i) * 8 + wrow) * g.ld + ks * 16 + wcol;
                    if constexpr (i + 1 < cnt) {
                        uint32_t b[4];
                        ldmatrix_x4(b, wb);
                        mma16816<XT>(acc[uk_nth(NSP, KP, O, i)], a, b);
                        mma16816<XT>(acc[uk_nth(NSP, KP, O, i + 1)], a, b + 2);
                    } else {
                        uint32_t b[2];
                        ldmatrix_x2(b, wb);
                        mma16816<XT>(acc[uk_nth(NSP, KP, O, i)], a, b);
                    }
                });
            });
        }
        // The epilogue: rows grp and grp + 8 of the warp's 16 positions.
        int q0[3], n;
        uk_origin<NSP>(g, tile, q0, &n);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = warp * 16 + grp + 8 * h;
            const int q[3] = {q0[0] + r / (B::b2 * B::b1), q0[1] + (r / B::b2) % B::b1, q0[2] + r % B::b2};
            if (q[0] >= g.in[0] || q[1] >= g.in[1] || q[2] >= g.in[2])
                continue;
            // Phase bits this position cannot have: phase 1 of the last q
            // is past an output of extent 2n - 1.
            const int past = (NSP == 3 && 2 * q[0] + 1 >= g.out[0] ? 4 : 0) | (2 * q[1] + 1 >= g.out[1] ? 2 : 0) |
                             (2 * q[2] + 1 >= g.out[2] ? 1 : 0);
            const ll yq = (ll)n * g.yn + 2 * q[0] * g.ys[0] + 2 * q[1] * g.ys[1] + 2 * q[2] * g.ys[2];
            uk_static_for<NB>([&](auto nc) {
                constexpr int nb = decltype(nc)::value, pb = uk_first_phase(KP, nb), i = KP >= 8 ? nb % BZ : 0;
                const int k = kz[i];
                if (k >= g.K || ((pb | lr) & past))
                    return;
                const float v0 = act_apply(acc[nb][2 * h] + bz[i][0], g.act, g.alpha);
                const float v1 = act_apply(acc[nb][2 * h + 1] + bz[i][1], g.act, g.alpha);
                const ll yo = yq + kz_off[i] + (NSP == 3 && (pb & 4) ? g.ys[0] : 0) + ((pb & 2) ? g.ys[1] : 0) +
                              ((pb & 1) ? g.ys[2] : 0);
                if (own_pairs && k + 1 < g.K)
                    mma_store_pair<XT>(y, (segrt_dtype)XT, true, yo, 1, v0, v1);
                else if (k + 1 < g.K)
                    mma_store_pair<XT>(y, g.yt, g.ypair, yo, g.yc, v0, v1);
                else
                    st_f32(y, yo, g.yt, v0);
            });
        }
        __syncthreads(); // every warp is done with this tile before the issue two tiles on overwrites it
    }
#else
    __trap(); // never launched here (cuda_kernel_runs)
#endif
}

static bool k3_dtype16(segrt_dtype t) { return t == SEGRT_DTYPE_FLOAT16 || t == SEGRT_DTYPE_BFLOAT16; }

static bool k3_float(segrt_dtype t) { return k3_dtype16(t) || t == SEGRT_DTYPE_FLOAT32; }

// Shared memory for chunks of kp channels.
static size_t k3_smem(int nsp, int kp, int ld)
{
    const int tile = nsp == 3 ? uk_box<3>::tile : uk_box<2>::tile;
    return 2 * ((size_t)uk_base(nsp, kp, 1 << nsp) * 8 * ld + 2 * (size_t)tile * ld);
}

// Output channels a chunk: the fewest columns that hold K (two, four or
// eight phases of 2 or 4 channels, else 8 channels of one phase), up to
// 16 channels where their weights fit beside two tiles.
static int k3_kp(const sgk_conv_up_k3_params *p)
{
    const int ld = (p->C + 15) / 16 * 16 + 8;
    int kp = p->K <= 2 ? 2 : p->K <= 4 ? 4 : p->K <= 8 ? 8 : 16;
    while (kp > 8 && k3_smem(p->n_spatial, kp, ld) > smem_cap(UK_SMEM_MAX, p->smem_limit, 0))
        kp /= 2;
    return kp;
}

// The launch geometry, or false where the kernel does not take the layer.
static bool k3_plan(const sgk_conv_up_k3_params *p, const sgk_view *y, const sgk_view *x, ukgeom *g, size_t *smem)
{
    memset(g, 0, sizeof *g);
    const int nsp = p->n_spatial;
    if ((nsp != 2 && nsp != 3) || x->rank != nsp + 2 || y->rank != nsp + 2 || !k3_dtype16(x->dtype) ||
        !k3_float(y->dtype) || p->C < 8 || p->C > UK_MAX_C || p->C % 8 != 0 || p->K < 1 || p->K > (1 << 20) ||
        x->dims[1] != p->C || y->dims[1] != p->K || x->dims[0] != y->dims[0] || x->dims[0] < 1 ||
        (p->act != SGK_ACT_NONE && p->act != SGK_ACT_RELU && p->act != SGK_ACT_LEAKY_RELU))
        return false;
    // 16-byte copies of 8 channels.
    if (!vec16_positions(x))
        return false;
    ll tiles = x->dims[0];
    const int b[3] = {nsp == 3 ? uk_box<3>::b0 : 1, nsp == 3 ? uk_box<3>::b1 : uk_box<2>::b1,
                      nsp == 3 ? uk_box<3>::b2 : uk_box<2>::b2};
    for (int a = 0; a < 3; a++) {
        const int s = a - (3 - nsp);
        const ll in = s >= 0 ? x->dims[2 + s] : 1, out = s >= 0 ? y->dims[2 + s] : 1;
        if (in < 1 || (s >= 0 && out != 2 * in && out != 2 * in - 1) || in > INT32_MAX / 4)
            return false;
        g->in[a] = (int)in;
        g->out[a] = (int)out;
        g->ntile[a] = (int)((in + b[a] - 1) / b[a]);
        g->fntile[a] = fastdiv_make((uint32_t)g->ntile[a]);
        g->xs[a] = s >= 0 ? x->strides[2 + s] : 0;
        g->ys[a] = s >= 0 ? y->strides[2 + s] : 0;
        tiles *= g->ntile[a];
    }
    if (tiles > INT32_MAX)
        return false;
    g->ntiles = (int)tiles;
    g->C = p->C;
    g->Cp = (p->C + 15) / 16 * 16;
    g->ld = g->Cp + 8;
    g->fpieces = fastdiv_make((uint32_t)(g->Cp / 8));
    g->K = p->K;
    g->kp = k3_kp(p);
    if (k3_smem(nsp, g->kp, g->ld) > smem_cap(UK_SMEM_MAX, p->smem_limit, 0))
        return false;
    // The chunks of output channels are the grid's y, at most 65535.
    if ((g->K + g->kp - 1) / g->kp > 65535)
        return false;
    g->xn = x->strides[0];
    g->yn = y->strides[0];
    g->yc = y->strides[1];
    g->yt = y->dtype;
    g->act = p->act;
    g->alpha = p->act_alpha;
    g->ypair = pair_positions(y);
    *smem = k3_smem(nsp, g->kp, g->ld);
    return true;
}

extern "C" bool sgk_conv_up_k3_fits(const sgk_conv_up_k3_params *p, const sgk_view *y, const sgk_view *x)
{
    ukgeom g;
    size_t smem;
    return k3_plan(p, y, x, &g, &smem);
}

extern "C" int64_t sgk_conv_up_k3_weights(const sgk_conv_up_k3_params *p)
{
    const int kp = k3_kp(p), cp = (p->C + 15) / 16 * 16;
    const ll chunks = (p->K + kp - 1) / kp;
    return chunks * uk_base(p->n_spatial, kp, 1 << p->n_spatial) * 8 * cp;
}

extern "C" void sgk_conv_up_k3_pack(const sgk_conv_up_k3_params *p, const float *onnx, float *packed)
{
    const int nsp = p->n_spatial, kp = k3_kp(p), cp = (p->C + 15) / 16 * 16, taps = nsp == 3 ? 27 : 9;
    const int chunks = (p->K + kp - 1) / kp;
    float *d = packed;
    for (int ch = 0; ch < chunks; ch++)
        for (int o = 0; o < (1 << nsp); o++)
            for (int i = 0; i < uk_count(nsp, kp, o); i++) {
                const int nb = uk_nth(nsp, kp, o, i);
                for (int row = 0; row < 8; row++, d += cp) {
                    const int j = nb * 8 + row, r = j / kp, k = ch * kp + j % kp;
                    const bool live = uk_reaches(o, r) && k < p->K;
                    const int tap = uk_tap(nsp, o, r);
                    for (int c = 0; c < cp; c++)
                        d[c] = live && c < p->C ? onnx[((ll)c * p->K + k) * taps + tap] : 0.0f;
                }
            }
}

template <int XT, int NSP, int KP>
static segrt_status k3_launch(cudaStream_t stream, const sgk_conv_up_k3_params *p, size_t smem, const sgk_view *y,
                              const sgk_view *x, const float *w, const float *bias, const ukgeom &g)
{
    // Past 48 KB a kernel must opt in (a function attribute, not a stream
    // operation: allowed while a CUDA graph is captured).
    if (cudaFuncSetAttribute(conv_up_k3<XT, NSP, KP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             smem_opt_in_bytes(UK_SMEM_MAX, 0)) != cudaSuccess)
        return launched("conv_up_k3 (shared memory)");
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, conv_up_k3<XT, NSP, KP>, UK_THREADS, smem) !=
        cudaSuccess)
        return launched("conv_up_k3 (occupancy)");
    per_sm = per_sm < 1 ? 1 : per_sm > UK_MAX_BLOCKS_PER_SM ? UK_MAX_BLOCKS_PER_SM : per_sm;
    const ll cap = (ll)(p->sm_count > 0 ? p->sm_count : 132) * per_sm;
    const dim3 grid((unsigned)(g.ntiles < cap ? g.ntiles : cap), (unsigned)((g.K + KP - 1) / KP));
    conv_up_k3<XT, NSP, KP><<<grid, UK_THREADS, smem, stream>>>(x->data, y->data, w, bias, g);
    return launched("conv_up_k3");
}

template <int XT, int NSP>
static segrt_status k3_launch_kp(cudaStream_t stream, const sgk_conv_up_k3_params *p, size_t smem,
                                 const sgk_view *y, const sgk_view *x, const float *w, const float *bias,
                                 const ukgeom &g)
{
    switch (g.kp) {
    case 2: return k3_launch<XT, NSP, 2>(stream, p, smem, y, x, w, bias, g);
    case 4: return k3_launch<XT, NSP, 4>(stream, p, smem, y, x, w, bias, g);
    case 8: return k3_launch<XT, NSP, 8>(stream, p, smem, y, x, w, bias, g);
    default: return k3_launch<XT, NSP, 16>(stream, p, smem, y, x, w, bias, g);
    }
}

template <int XT>
static segrt_status k3_launch_nsp(cudaStream_t stream, const sgk_conv_up_k3_params *p, size_t smem,
                                  const sgk_view *y, const sgk_view *x, const float *w, const float *bias,
                                  const ukgeom &g)
{
    if (p->n_spatial == 3)
        return k3_launch_kp<XT, 3>(stream, p, smem, y, x, w, bias, g);
    return k3_launch_kp<XT, 2>(stream, p, smem, y, x, w, bias, g);
}

extern "C" segrt_status sgk_conv_up_k3(cudaStream_t stream, const sgk_conv_up_k3_params *p, const sgk_view *y,
                                       const sgk_view *x, const float *w, const float *bias)
{
    ukgeom g;
    size_t smem;
    if (!k3_plan(p, y, x, &g, &smem))
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "kernel-3 upsampling convolution: layer not supported by the kernel");
    if (((uintptr_t)w & 15) != 0)
        return sg_error(SEGRT_ERROR_INTERNAL, "kernel-3 upsampling convolution: weights at %p, not 16-byte aligned",
                        (const void *)w);
    if (x->dtype == SEGRT_DTYPE_BFLOAT16)
        return k3_launch_nsp<SEGRT_DTYPE_BFLOAT16>(stream, p, smem, y, x, w, bias, g);
    return k3_launch_nsp<SEGRT_DTYPE_FLOAT16>(stream, p, smem, y, x, w, bias, g);
}
