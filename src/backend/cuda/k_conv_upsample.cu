// ConvTranspose with kernel == stride as a matrix product per phase (see
// k_conv_upsample.h).
//
// A block stages one channel chunk of the weights in shared memory once,
// then walks tiles of input positions: it loads a tile's [positions x C]
// inputs and computes the products of every phase and 8-channel group.
// Float16 and bfloat16 use the tensor cores through mma.sync m16n8k16
// (float32 accumulation): each warp walks its own tiles of 16
// positions, copying the next one's inputs while it multiplies this one,
// and loads a tile's inputs into registers once (ldmatrix). Where y has
// x's dtype and rows of whole 16-byte vectors (a channels-last tensor or
// its slice of a Concat), a phase's results, bias and activation applied,
// are rounded into the warp's own square in shared memory and stored 16
// bytes a lane; otherwise each lane stores its two channels of two
// positions straight from its accumulators. Float32 uses the CUDA cores:
// a lane per input position, 8 output channels per pass, the weights read
// as broadcasts.
#include "backend/cuda/k_common.cuh"
#include "backend/cuda/k_conv_upsample.h"
#include "backend/cuda/k_mma.cuh"

#include <string.h>

#define UP_THREADS 256
#define UP_WARPS (UP_THREADS / 32)
#define UP_TP_TC (16 * UP_WARPS) // input positions per tile, tensor cores: 16 per warp
#define UP_TP_F32 64        // input positions per tile, CUDA cores: 32 per lane row, twice
#define UP_MAX_F 64         // phases: the kernel's volume
#define UP_MAX_CP 64        // input channels the tensor-core path keeps in registers
#define UP_SMEM_MAX (48 * 1024)     // CUDA cores: the default limit
#define UP_SMEM_MAX_TC (100 * 1024) // tensor cores (opted in at launch): 4 blocks fit in an SM's 228 KB
// Blocks resident per SM: a tile's loads, products and stores run one
// after another within a block, so other blocks must fill the gaps (and
// registers are capped to let them in).
#define UP_MIN_BLOCKS 4
// ... tensor cores: a warp's next tile's copies are in flight while it
// multiplies, so fewer warps hide the loads, and at 64 registers the
// fragments, offsets and store addresses spilled.
#define UP_MIN_BLOCKS_TC 3

struct upgeom {
    int P;          // input positions: N times the spatial sizes
    int C, K, F;    // input channels, output channels, phases (the kernel's volume)
    int Kc;         // output channels per block (blockIdx.y chooses the chunk)
    int Cp;         // C as staged: rounded up to 16 for tensor cores
    int ldx, ldw;   // shared-memory row lengths of the input tile and the weights, in elements
    int tp;         // input positions per tile
    int lds;        // row length of a warp's square of results (tensor cores, ystage)
    int in[3], k[3];
    fastdiv fin[3]; // the spatial sizes, innermost last
    fastdiv fcp;    // Cp, for the CUDA cores' tile loads
    ll xn, xc, xs[3];
    ll yn, yc, ys[3];
    sgk_act act;
    float alpha;
    bool xvec;      // x's channels load as 16-byte vectors
    bool yvec;      // 8 output channels store as 16-byte vectors (one or two); CUDA cores
    bool ypair;     // 2 output channels store as one 4- or 8-byte vector; tensor cores
    bool ystage;    // y has x's dtype and 16-byte rows of 8 channels: results go out through
                    // the warp's square, 16 bytes a lane (tensor cores)
    bool pro;       // x normalised as it is staged (sgk_conv_up_params.prologue)
    sgk_act pro_act;
    float pro_alpha;
    int ab_rows;    // pro: N * C rows of (mean, -, s, b) staged in shared memory, or 0 (read from ab)
};

#define UP_AB_ROWS_MAX 2048 // 32 KB

// Offsets in y of the phases (last spatial axis fastest), once per block.
__device__ __forceinline__ void phase_offsets(const upgeom &g, ll *phase)
{
    for (int f = threadIdx.x; f < g.F; f += blockDim.x) {
        int a2 = f % g.k[2], r = f / g.k[2];
        int a1 = r % g.k[1], a0 = r / g.k[1];
        phase[f] = a0 * g.ys[0] + a1 * g.ys[1] + a2 * g.ys[2];
    }
}

// Stores cnt (<= 8) channels starting at element `off` of y, the bias of
// channel co onwards added and the activation applied.
__device__ __forceinline__ void up_store(void *y, segrt_dtype yt, const upgeom &g, ll off, const float *acc, int cnt,
                                         const float *bias, int co)
{
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; j++)
        v[j] = j < cnt ? act_apply(acc[j] + (bias ? bias[co + j] : 0.0f), g.act, g.alpha) : 0.0f;
    if (g.yvec && cnt == 8) {
        if (yt == SEGRT_DTYPE_FLOAT16) {
            *(uint4 *)((__half *)y + off) = vec16_pack<SEGRT_DTYPE_FLOAT16>(v);
            return;
        }
        if (yt == SEGRT_DTYPE_BFLOAT16) {
            *(uint4 *)((__nv_bfloat16 *)y + off) = vec16_pack<SEGRT_DTYPE_BFLOAT16>(v);
            return;
        }
        *(uint4 *)((float *)y + off) = vec16_pack<SEGRT_DTYPE_FLOAT32>(v);
        *(uint4 *)((float *)y + off + 4) = vec16_pack<SEGRT_DTYPE_FLOAT32>(v + 4);
        return;
    }
    for (int j = 0; j < cnt; j++)
        st_f32(y, off + j * g.yc, yt, v[j]);
}

// Input position p (< g.P) as its offsets in x and y and its sample.
__device__ __forceinline__ void pos_offsets(const upgeom &g, int p, ll *xo, ll *yo, int *n)
{
    uint32_t q = (uint32_t)p;
    ll a = 0, b = 0;
    for (int d = 2; d >= 0; d--) {
        uint32_t qd = fastdiv_div(q, g.fin[d]);
        ll i = (ll)(q - qd * (uint32_t)g.in[d]);
        a += i * g.xs[d];
        b += i * g.k[d] * g.ys[d];
        q = qd;
    }
    *xo = a + (ll)q * g.xn;
    *yo = b + (ll)q * g.yn;
    *n = (int)q;
}

// The tile's input and output offsets, one thread per position (-1: past
// the end).
__device__ __forceinline__ void tile_offsets(const upgeom &g, int tile, ll *pix_x, ll *pix_y)
{
    int t = threadIdx.x, n;
    if (t >= g.tp)
        return;
    int p = tile * g.tp + t;
    ll xo = -1, yo = -1;
    if (p < g.P)
        pos_offsets(g, p, &xo, &yo, &n);
    pix_x[t] = xo;
    pix_y[t] = yo;
}

// Stores channels co, co + 1 (cnt of them) at element `off` of y, bias and
// activation applied.
__device__ __forceinline__ void up_store2(void *y, segrt_dtype yt, const upgeom &g, ll off, float v0, float v1,
                                          int cnt, const float *bias, int co)
{
    v0 = act_apply(v0 + (bias ? bias[co] : 0.0f), g.act, g.alpha);
    if (cnt > 1)
        v1 = act_apply(v1 + (bias ? bias[co + 1] : 0.0f), g.act, g.alpha);
    if (g.ypair && cnt == 2) {
        if (yt == SEGRT_DTYPE_FLOAT16)
            *(__half2 *)((__half *)y + off) = __floats2half2_rn(v0, v1);
        else if (yt == SEGRT_DTYPE_BFLOAT16)
            *(__nv_bfloat162 *)((__nv_bfloat16 *)y + off) = __floats2bfloat162_rn(v0, v1);
        else
            *(float2 *)((float *)y + off) = make_float2(v0, v1);
        return;
    }
    st_f32(y, off, yt, v0);
    if (cnt > 1)
        st_f32(y, off + g.yc, yt, v1);
}

// Two results rounded to T and packed as one 32-bit word (the lower
// channel first), as two mma_round would store them.
template <int XT> __device__ __forceinline__ uint32_t round_pair(float v0, float v1)
{
    uint32_t u;
    if constexpr (XT == SEGRT_DTYPE_BFLOAT16) {
        __nv_bfloat162 h = __floats2bfloat162_rn(v0, v1);
        memcpy(&u, &h, sizeof u);
    } else {
        __half2 h = __floats2half2_rn(v0, v1);
        memcpy(&u, &h, sizeof u);
    }
    return u;
}

// A 32-bit word of two 16-bit values (the lower channel first) as float32.
template <int XT> __device__ __forceinline__ float2 unpack_pair(uint32_t u)
{
    if constexpr (XT == SEGRT_DTYPE_BFLOAT16) {
        __nv_bfloat162 h;
        memcpy(&h, &u, sizeof u);
        return __bfloat1622float2(h);
    } else {
        __half2 h;
        memcpy(&h, &u, sizeof u);
        return __half22float2(h);
    }
}

// Float16 and bfloat16 inputs: tensor cores. NKS: the k16 steps over the
// staged channels (Cp / 16), fixed so that the products are straight-line
// code. Each warp walks its own tiles of 16 input positions, with no
// barrier between warps after the weights are staged: lanes 0-15 find the
// offsets of one position each (shared by shuffles), the warp copies the
// next tile's inputs into the other of its two buffers (cp.async) before
// it multiplies this one, and the normalising prologue works on the A
// fragments in registers. (A first version that walked 128-position tiles
// a block, its loads synchronous and normalised from shared-memory rows,
// each tile behind block barriers, stalled on its loads.)
//
// NF, NT: the phases and the chunk's 8-channel groups where fixed at
// compile time (a 2-D kernel of 2 and a chunk of 32 channels, stored
// staged: UNet's upsampling), else 0. Run-time loops over them, with the
// epilogue's branches between store paths, cost more instructions than the
// products and stores.
template <int XT, int NKS, int NF, int NT>
__global__ void __launch_bounds__(UP_THREADS, UP_MIN_BLOCKS_TC)
    conv_up_tc(const void *__restrict__ x, void *__restrict__ y, segrt_dtype yt, const float *__restrict__ w,
               const float *__restrict__ bias, const float4 *__restrict__ ab, upgeom g)
{
#if SG_MMA_SYNC
    typedef typename mma_elem<XT>::type T;
    constexpr bool FIXED = NF > 0;
    extern __shared__ __align__(128) unsigned char smem[];
    float4 *absh = (float4 *)smem; // g.pro: the normalisation's rows (g.ab_rows of them)
    ll *phase = (ll *)(absh + g.ab_rows);
    T *wsh = (T *)(phase + UP_MAX_F); // [phase][output channel][input channel], row length ldw
    float *bsh = (float *)(wsh + g.F * g.Kc * g.ldw); // the chunk's bias, 0 past kn
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, grp = lane >> 2, t4 = lane & 3;
    const int ldx = FIXED ? NKS * 16 + 8 : g.ldx, ldw = FIXED ? NKS * 16 + 8 : g.ldw, lds = FIXED ? NT * 8 + 8 : g.lds;
    // This warp's two input buffers, [16 positions][channel] of row length
    // ldx, then its square of results, [16 positions][chunk channels] of
    // row length lds.
    T *xb0 = (T *)(bsh + g.Kc) + warp * (2 * 16 * ldx + 16 * lds);
    T *wst = xb0 + 2 * 16 * ldx;
    const int k0 = blockIdx.y * g.Kc, kn = FIXED ? NT * 8 : min(g.Kc, g.K - k0);
    const int F = FIXED ? NF : g.F;
    const bool ystage = FIXED || g.ystage;

    phase_offsets(g, phase);
    for (int i = threadIdx.x; i < g.ab_rows; i += UP_THREADS)
        absh[i] = ab[i];
    for (int j = threadIdx.x; j < g.Kc; j += UP_THREADS)
        bsh[j] = bias && j < kn ? bias[k0 + j] : 0.0f;
    for (int e = threadIdx.x; e < F * g.Kc * g.Cp; e += UP_THREADS) {
        int ci = e % g.Cp, r = e / g.Cp, j = r % g.Kc, f = r / g.Kc;
        float v = ci < g.C && j < kn ? w[((ll)f * g.C + ci) * g.K + k0 + j] : 0.0f;
        wsh[r * ldw + ci] = mma_round<XT>(v);
    }
    __syncthreads();
    // The staged stores' (row, 8-channel chunk) for this lane: at most 16
    // rows x 8 chunks over 32 lanes (-1: none).
    constexpr int SI = FIXED ? (16 * NT + 31) / 32 : 4;
    const int chunks = ystage ? kn / 8 : 0;
    int srow[SI], scol[SI];
#pragma unroll
    for (int i = 0; i < SI; i++) {
        const int e = lane + 32 * i;
        srow[i] = e < 16 * chunks ? e / chunks : -1;
        scol[i] = e < 16 * chunks ? (e - srow[i] * chunks) * 8 : 0;
    }
    const int xchunks = (FIXED ? NKS * 16 : g.Cp) / 8, ntiles = (g.P + 15) / 16;
    const int first = blockIdx.x * UP_WARPS + warp, stride = gridDim.x * UP_WARPS;
    // Lane l < 16: position l of a tile (xo -1 past the end); lanes 16-31 repeat them.
    auto offsets = [&](int tile, ll *xo, ll *yo, int *n) {
        const int p = tile * 16 + (lane & 15);
        *xo = *yo = -1;
        *n = 0;
        if (p < g.P)
            pos_offsets(g, p, xo, yo, n);
    };
    // A tile's inputs into buffer xb: 16-byte copies (g.xvec, zeros past
    // the end and past C), or element by element, rounded as they land.
    auto load = [&](T *xb, ll xo) {
        if (g.xvec) {
#pragma unroll
            for (int e = lane; e < 16 * xchunks; e += 32) {
                const int r = e / xchunks, c = (e - r * xchunks) * 8;
                const ll o = __shfl_sync(0xffffffffu, xo, r);
                const bool in = o >= 0 && c < g.C;
                cp_async16(xb + r * ldx + c, (const T *)x + (in ? o + c : 0), in);
            }
        } else {
            for (int e = lane; e < 16 * g.Cp; e += 32) {
                const int r = e / g.Cp, c = e - r * g.Cp;
                const ll o = __shfl_sync(0xffffffffu, xo, r);
                const float v = o >= 0 && c < g.C ? ldr<XT, float>(x, (segrt_dtype)XT, o + c * g.xc) : 0.0f;
                xb[r * ldx + c] = mma_round<XT>(v);
            }
        }
    };
    // The normalisation's (mean, -, s, b) of channel c of sample n.
    auto ab_row = [&](int n, int c) { return g.ab_rows ? absh[n * g.C + c] : ab[(ll)n * g.C + c]; };
    ll xo_next, yo_next;
    int n_next;
    if (first < ntiles) {
        offsets(first, &xo_next, &yo_next, &n_next);
        if (g.xvec)
            load(xb0, xo_next);
    }
    cp_async_commit();
    for (int tile = first, it = 0; tile < ntiles; tile += stride, it++) {
        const ll yo = yo_next;
        const int n = n_next;
        T *xb = xb0 + (it & 1) * 16 * ldx;
        if (g.xvec) {
            // The next tile's copies go out before this tile's products.
            if (tile + stride < ntiles) {
                offsets(tile + stride, &xo_next, &yo_next, &n_next);
                load(xb0 + ((it + 1) & 1) * 16 * ldx, xo_next);
            }
            cp_async_commit();
            cp_async_wait1();
        } else {
            load(xb, xo_next);
            if (tile + stride < ntiles)
                offsets(tile + stride, &xo_next, &yo_next, &n_next);
        }
        __syncwarp();
        // This warp's 16 positions, as mma's A operand for every k-step:
        // a[ks][0] rows 0-7 and [1] rows 8-15 of channels 16 ks + 0-7, [2]
        // and [3] of channels 16 ks + 8-15; this lane's are rows grp and
        // grp + 8, channels 2 t4 and 2 t4 + 1 of each eight.
        uint32_t a[NKS][4];
#pragma unroll
        for (int ks = 0; ks < NKS; ks++)
            ldmatrix_x4(a[ks], xb + ((lane & 7) + ((lane >> 3) & 1) * 8) * ldx + ks * 16 + (lane >> 4) * 8);
        __syncwarp(); // the buffer is free for the copies two tiles on
        if (__shfl_sync(0xffffffffu, yo, 0) < 0)
            continue; // all 16 positions past the end
        if (g.pro) {
            // As the norm's pass computes and stores it, in float32 (rows
            // past the end take sample 0's rows; they are not stored).
            const int rn[2] = {__shfl_sync(0xffffffffu, n, grp), __shfl_sync(0xffffffffu, n, grp + 8)};
#pragma unroll
            for (int ks = 0; ks < NKS; ks++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int c = ks * 16 + (i >> 1) * 8 + 2 * t4;
                    if (c >= g.C)
                        continue; // the padding stays zero
                    const float4 ka = ab_row(rn[i & 1], c), kb = ab_row(rn[i & 1], c + 1);
                    float2 v = unpack_pair<XT>(a[ks][i]);
                    v.x = act_apply(((v.x - ka.x) - ka.y) * ka.z + ka.w, g.pro_act, g.pro_alpha);
                    v.y = act_apply(((v.y - kb.x) - kb.y) * kb.z + kb.w, g.pro_act, g.pro_alpha);
                    a[ks][i] = round_pair<XT>(v.x, v.y);
                }
        }
        const ll yo0 = __shfl_sync(0xffffffffu, yo, grp), yo1 = __shfl_sync(0xffffffffu, yo, grp + 8);
        ll syo[SI];
#pragma unroll
        for (int i = 0; i < SI; i++) {
            const ll o = __shfl_sync(0xffffffffu, yo, srow[i] >= 0 ? srow[i] : 0);
            syo[i] = srow[i] >= 0 ? o : -1;
        }
#pragma unroll(FIXED ? NF : 1)
        for (int f = 0; f < F; f++) {
#pragma unroll(FIXED ? NT : 1)
            for (int nt = 0; nt < (FIXED ? NT : (kn + 7) / 8); nt++) {
                float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                // The B operands of every k-step: ldmatrix's lane l addresses
                // output channel nt 8 + l % 8, input channels 8 (l / 8) on
                // (whole k-steps two at a time, then one).
                uint32_t b[NKS][2];
                const T *wrow = wsh + (f * g.Kc + nt * 8 + (lane & 7)) * ldw;
#pragma unroll
                for (int ks = 0; ks + 1 < NKS; ks += 2) {
                    uint32_t r4[4];
                    ldmatrix_x4(r4, wrow + ks * 16 + (lane >> 3) * 8);
                    b[ks][0] = r4[0];
                    b[ks][1] = r4[1];
                    b[ks + 1][0] = r4[2];
                    b[ks + 1][1] = r4[3];
                }
                if constexpr (NKS % 2)
                    ldmatrix_x2(b[NKS - 1], wrow + (NKS - 1) * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
                for (int ks = 0; ks < NKS; ks++)
                    mma16816<XT>(d, a[ks], b[ks]);
                int c = nt * 8 + 2 * t4;
                if (ystage) {
                    // Rounded into the warp's square; stored below, 16 bytes a lane.
                    const float2 bb = *(const float2 *)(bsh + c);
                    float v[4] = {d[0] + bb.x, d[1] + bb.y, d[2] + bb.x, d[3] + bb.y};
                    if (g.act != SGK_ACT_NONE) {
#pragma unroll
                        for (int j = 0; j < 4; j++)
                            v[j] = act_apply(v[j], g.act, g.alpha);
                    }
                    *(uint32_t *)(wst + grp * lds + c) = round_pair<XT>(v[0], v[1]);
                    *(uint32_t *)(wst + (grp + 8) * lds + c) = round_pair<XT>(v[2], v[3]);
                } else if (c < kn) {
                    int cnt = min(2, kn - c);
                    ll off = phase[f] + (k0 + c) * g.yc;
                    if (yo0 >= 0)
                        up_store2(y, yt, g, yo0 + off, d[0], d[1], cnt, bias, k0 + c);
                    if (yo1 >= 0)
                        up_store2(y, yt, g, yo1 + off, d[2], d[3], cnt, bias, k0 + c);
                }
            }
            if (ystage) {
                __syncwarp();
                T *yf = (T *)y + phase[f] + k0;
#pragma unroll
                for (int i = 0; i < SI; i++)
                    if (syo[i] >= 0)
                        *(uint4 *)(yf + syo[i] + scol[i]) = *(const uint4 *)(wst + srow[i] * lds + scol[i]);
                __syncwarp();
            }
        }
    }
    cp_async_wait0(); // (none outstanding past the last tile, but a block leaves with its copies landed)
#else
    __trap(); // never launched here (cuda_kernel_runs)
#endif
}

// Float32 inputs: CUDA cores, float32 products.
__global__ void __launch_bounds__(UP_THREADS, UP_MIN_BLOCKS)
    conv_up_f32(const float *__restrict__ x, void *__restrict__ y, segrt_dtype yt, const float *__restrict__ w,
                const float *__restrict__ bias, upgeom g)
{
    extern __shared__ __align__(128) unsigned char smem[];
    ll *pix_x = (ll *)smem, *pix_y = pix_x + UP_TP_F32, *phase = pix_y + UP_TP_F32;
    float *xsf = (float *)(phase + UP_MAX_F);
    float *wsf = xsf + UP_TP_F32 * g.ldx;
    const int k0 = blockIdx.y * g.Kc, kn = min(g.Kc, g.K - k0);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    phase_offsets(g, phase);
    for (int e = threadIdx.x; e < g.F * g.C * g.Kc; e += UP_THREADS) {
        int j = e % g.Kc, r = e / g.Kc; // r = f * C + ci
        wsf[r * g.ldw + j] = j < kn ? w[(ll)r * g.K + k0 + j] : 0.0f;
    }
    const int ntiles = (g.P + UP_TP_F32 - 1) / UP_TP_F32, groups = g.Kc / 8;
    for (int tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        __syncthreads();
        tile_offsets(g, tile, pix_x, pix_y);
        __syncthreads();
        for (int e = threadIdx.x; e < UP_TP_F32 * g.C; e += UP_THREADS) {
            int pix = (int)fastdiv_div((uint32_t)e, g.fcp), c = e - pix * g.C;
            xsf[pix * g.ldx + c] = pix_x[pix] >= 0 ? x[pix_x[pix] + c * g.xc] : 0.0f;
        }
        __syncthreads();
        for (int item = warp; item < g.F * (UP_TP_F32 / 32) * groups; item += UP_WARPS) {
            int gi = item % groups, rest = item / groups, h = rest % (UP_TP_F32 / 32), f = rest / (UP_TP_F32 / 32);
            int c = gi * 8;
            if (c >= kn)
                continue;
            int pix = h * 32 + lane;
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            const float *xr = xsf + pix * g.ldx, *wr = wsf + f * g.C * g.ldw + c;
            for (int ci = 0; ci < g.C; ci++) {
                float xv = xr[ci];
                float4 w0 = *(const float4 *)(wr + ci * g.ldw), w1 = *(const float4 *)(wr + ci * g.ldw + 4);
                acc[0] += xv * w0.x;
                acc[1] += xv * w0.y;
                acc[2] += xv * w0.z;
                acc[3] += xv * w0.w;
                acc[4] += xv * w1.x;
                acc[5] += xv * w1.y;
                acc[6] += xv * w1.z;
                acc[7] += xv * w1.w;
            }
            ll yo = pix_y[pix];
            if (yo >= 0)
                up_store(y, yt, g, yo + phase[f] + (k0 + c) * g.yc, acc, min(8, kn - c), bias, k0 + c);
        }
    }
}

static bool up_dtype(segrt_dtype t)
{
    return t == SEGRT_DTYPE_FLOAT32 || t == SEGRT_DTYPE_FLOAT16 || t == SEGRT_DTYPE_BFLOAT16;
}

static ll round_up(ll v, ll m) { return (v + m - 1) / m * m; }

// The shared memory a launch with chunk Kc takes, filling g's chunk, tile
// and row lengths.
static size_t up_layout(upgeom *g, bool tc, int Kc)
{
    g->Kc = Kc;
    g->tp = tc ? UP_TP_TC : UP_TP_F32;
    if (tc) {
        // The normalisation's rows, the phases' offsets, the weights, the
        // bias, then each warp's two input buffers and its square of
        // results. Rows 16 bytes longer than the data: ldmatrix's eight
        // row reads and the lanes' weight reads then fall in distinct banks.
        g->Cp = (int)round_up(g->C, 16);
        g->ldx = g->Cp + 8;
        g->ldw = g->Cp + 8;
        g->lds = Kc + 8;
        return (size_t)g->ab_rows * 16 + UP_MAX_F * sizeof(ll) +
               2 * ((size_t)g->F * Kc * g->ldw + (size_t)UP_WARPS * 16 * (2 * g->ldx + g->lds)) +
               sizeof(float) * (size_t)Kc;
    }
    g->Cp = g->C;
    g->ldx = g->C + 1; // odd: lanes reading one channel of 32 positions hit 32 banks
    g->ldw = Kc;
    return (2 * (size_t)g->tp + UP_MAX_F) * sizeof(ll) +
           sizeof(float) * ((size_t)g->tp * g->ldx + (size_t)g->F * g->C * Kc);
}

// The launch geometry, or false where the kernel does not take the layer.
static bool up_plan(const sgk_conv_up_params *p, const sgk_view *y, const sgk_view *x, upgeom *g, size_t *smem)
{
    int nsp = p->n_spatial;
    memset(g, 0, sizeof *g);
    if (nsp < 1 || nsp > 3 || p->K < 1 || p->C < 1 || x->rank != nsp + 2 || y->rank != nsp + 2 ||
        !up_dtype(x->dtype) || !up_dtype(y->dtype) || x->dims[0] != y->dims[0] || x->dims[1] != p->C ||
        y->dims[1] != p->K || (p->act != SGK_ACT_NONE && p->act != SGK_ACT_RELU && p->act != SGK_ACT_LEAKY_RELU))
        return false;
    bool tc = x->dtype != SEGRT_DTYPE_FLOAT32;
    if (p->C > UP_MAX_CP || p->K > INT32_MAX / 2)
        return false;
    ll P = x->dims[0], F = 1;
    for (int a = 0; a < 3; a++) {
        int s = a - (3 - nsp);
        ll in = s >= 0 ? x->dims[2 + s] : 1, k = s >= 0 ? p->kernel[s] : 1;
        if (k < 1 || k > 16 || in < 0 || in > INT32_MAX || (s >= 0 && y->dims[2 + s] != in * k))
            return false;
        g->in[a] = (int)in;
        g->k[a] = (int)k;
        g->fin[a] = fastdiv_make((uint32_t)(in > 0 ? in : 1));
        g->xs[a] = s >= 0 ? x->strides[2 + s] : 0;
        g->ys[a] = s >= 0 ? y->strides[2 + s] : 0;
        P *= in;
        F *= k;
    }
    if (P > INT32_MAX || F > UP_MAX_F)
        return false;
    g->P = (int)P;
    g->F = (int)F;
    g->C = p->C;
    g->K = p->K;
    g->xn = x->strides[0];
    g->xc = x->strides[1];
    g->yn = y->strides[0];
    g->yc = y->strides[1];
    g->act = p->act;
    g->alpha = p->act_alpha;
    // The normalising prologue: on the tensor-core path with vector loads
    // (checked below), its rows in shared memory where they fit.
    if (p->prologue && (!tc || (p->pro_act != SGK_ACT_NONE && p->pro_act != SGK_ACT_RELU &&
                                p->pro_act != SGK_ACT_LEAKY_RELU)))
        return false;
    g->pro = p->prologue;
    g->pro_act = p->pro_act;
    g->pro_alpha = p->pro_act == SGK_ACT_LEAKY_RELU ? p->pro_alpha : 0.0f;
    g->ab_rows = g->pro && x->dims[0] * p->C <= UP_AB_ROWS_MAX ? (int)(x->dims[0] * p->C) : 0;
    // The widest channel chunk whose weights fit beside the tile.
    int step = 8, most = tc ? 64 : 32;
    int Kc = (int)(p->K < most ? round_up(p->K, step) : most);
    size_t need, most_smem = tc ? smem_cap(UP_SMEM_MAX_TC, p->smem_limit, 0) : UP_SMEM_MAX;
    while ((need = up_layout(g, tc, Kc)) > most_smem && Kc > step)
        Kc = (int)round_up(Kc / 2, step);
    if (need > most_smem)
        return false;
    // The chunks of output channels are the grid's y, at most 65535.
    if (ceil_div(p->K, Kc) > 65535)
        return false;
    g->fcp = fastdiv_make((uint32_t)g->Cp);
    // 16-byte input loads: channels contiguous, every position's first
    // channel 16-byte aligned, whole vectors per position.
    ll xw = 8;
    g->xvec = tc && g->xc == 1 && g->C % 8 == 0 && g->xn % xw == 0 && g->xs[0] % xw == 0 && g->xs[1] % xw == 0 &&
              g->xs[2] % xw == 0 && (x->data == NULL || aligned16(x->data));
    if (g->pro && !g->xvec)
        return false;
    // Stores of 8 channels as one (16-bit) or two (float32) 16-byte
    // vectors: chunks and groups start at multiples of 8 channels.
    ll yw = vec16_width(y->dtype);
    bool y16 = y->data == NULL || aligned16(y->data);
    g->yvec = g->yc == 1 && p->K % 8 == 0 && g->yn % yw == 0 && g->ys[0] % yw == 0 && g->ys[1] % yw == 0 &&
              g->ys[2] % yw == 0 && y16;
    g->ystage = tc && y->dtype == x->dtype && g->yvec;
    // Stores of 2 channels (an even first one) as one vector.
    g->ypair = g->yc == 1 && g->yn % 2 == 0 && g->ys[0] % 2 == 0 && g->ys[1] % 2 == 0 && g->ys[2] % 2 == 0 && y16;
    *smem = need;
    return true;
}

template <int XT, int NKS, int NF, int NT>
static segrt_status launch_tc_k(cudaStream_t stream, dim3 grid, size_t smem, const sgk_view *y, const sgk_view *x,
                                const float *w, const float *bias, const float *ab, const upgeom &g)
{
    // Past 48 KB a kernel must opt in (a function attribute, not a stream
    // operation: allowed while a CUDA graph is captured).
    if (cudaFuncSetAttribute(conv_up_tc<XT, NKS, NF, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             smem_opt_in_bytes(UP_SMEM_MAX_TC, 0)) != cudaSuccess)
        return launched("conv_up (shared memory)");
    conv_up_tc<XT, NKS, NF, NT>
        <<<grid, UP_THREADS, smem, stream>>>(x->data, y->data, y->dtype, w, bias, (const float4 *)ab, g);
    return launched("conv_up");
}

// Four phases (a 2-D kernel of 2, say) in chunks of 32 output channels,
// stored staged: the compiled-in instantiation; anything else loops at run time.
template <int XT, int NKS>
static segrt_status launch_tc_f(cudaStream_t stream, dim3 grid, size_t smem, const sgk_view *y, const sgk_view *x,
                                const float *w, const float *bias, const float *ab, const upgeom &g)
{
    if (g.F == 4 && g.Kc == 32 && g.K % 32 == 0 && g.ystage)
        return launch_tc_k<XT, NKS, 4, 4>(stream, grid, smem, y, x, w, bias, ab, g);
    return launch_tc_k<XT, NKS, 0, 0>(stream, grid, smem, y, x, w, bias, ab, g);
}

template <int XT>
static segrt_status launch_tc(cudaStream_t stream, dim3 grid, size_t smem, const sgk_view *y, const sgk_view *x,
                              const float *w, const float *bias, const float *ab, const upgeom &g)
{
    switch (g.Cp / 16) { // (up_plan keeps C within UP_MAX_CP)
    case 1: return launch_tc_f<XT, 1>(stream, grid, smem, y, x, w, bias, ab, g);
    case 2: return launch_tc_f<XT, 2>(stream, grid, smem, y, x, w, bias, ab, g);
    case 3: return launch_tc_f<XT, 3>(stream, grid, smem, y, x, w, bias, ab, g);
    default: return launch_tc_f<XT, 4>(stream, grid, smem, y, x, w, bias, ab, g);
    }
}

extern "C" bool sgk_conv_up_fits(const sgk_conv_up_params *p, const sgk_view *y, const sgk_view *x)
{
    upgeom g;
    size_t smem;
    return up_plan(p, y, x, &g, &smem);
}

extern "C" segrt_status sgk_conv_up(cudaStream_t stream, const sgk_conv_up_params *p, const sgk_view *y,
                                    const sgk_view *x, const float *w, const float *bias, const float *ab)
{
    upgeom g;
    size_t smem;
    if (!up_plan(p, y, x, &g, &smem))
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "upsampling convolution: layer not supported by the kernel");
    if (p->prologue && (!ab || ((uintptr_t)ab & 15) != 0))
        return sg_error(SEGRT_ERROR_INTERNAL, "upsampling convolution: normalisation parameters at %p",
                        (const void *)ab);
    if (g.P == 0)
        return SEGRT_OK;
    // One wave of resident blocks, each walking its share of the tiles.
    const int per_sm = x->dtype == SEGRT_DTYPE_FLOAT32 ? UP_MIN_BLOCKS : UP_MIN_BLOCKS_TC;
    ll tiles = ceil_div(g.P, g.tp), cap = (ll)(p->sm_count > 0 ? p->sm_count : 132) * per_sm;
    dim3 grid((unsigned)(tiles < cap ? tiles : cap), (unsigned)ceil_div(g.K, g.Kc));
    switch (x->dtype) {
    case SEGRT_DTYPE_FLOAT16: return launch_tc<SEGRT_DTYPE_FLOAT16>(stream, grid, smem, y, x, w, bias, ab, g);
    case SEGRT_DTYPE_BFLOAT16: return launch_tc<SEGRT_DTYPE_BFLOAT16>(stream, grid, smem, y, x, w, bias, ab, g);
    default:
        conv_up_f32<<<grid, UP_THREADS, smem, stream>>>((const float *)x->data, y->data, y->dtype, w, bias, g);
        break;
    }
    return launched("conv_up");
}
