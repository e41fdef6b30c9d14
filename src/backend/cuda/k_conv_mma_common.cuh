// What the 3x3(x3) tensor-core convolution's two kernels share
// (k_conv_mma.h is the contract): the tile's shape, cmgeom (a layer as the
// kernels see it, planned by k_conv_mma.cu), the halo loads, the epilogues
// (bias, activation, residual, staged stores, the 2x2 max pool, per-tile
// statistics), and the launchers each kernel's file defines for the
// instances k_conv_mma_instances.cuh lists.
//
// The files by form: k_conv_mma_sync.cu, the mma.sync kernel (every GPU
// the build targets; 3-D layers and 2-D ones off Hopper);
// k_conv_wgmma.cu, the warpgroup (wgmma) kernel (compute capability 9.0);
// k_conv_mma_instances.cuh, the template instances the two define and
// the dispatch launches; k_conv_mma.cu, planning (cm_plan) and the C entry
// points.
#ifndef SG_BACKEND_CUDA_K_CONV_MMA_COMMON_CUH
#define SG_BACKEND_CUDA_K_CONV_MMA_COMMON_CUH

#include "backend/cuda/k_conv_mma.h"
#include "backend/cuda/k_mma.cuh"

#include <string.h>

#define CM_THREADS 128
#define CM_TP 128 // output positions per tile: 32 per warp
#define CM_MAX_K 32 // four n8 blocks: the builder asks for no more, and each
                    // instantiation unrolls every tap
#define CM_MAX_K_3D 16 // in 3-D, 27 unrolled taps of four n8 blocks spill registers
#define CM_SMEM_MAX (100 * 1024) // a layer's weights and one tile group's buffers; opted in at launch
#define CM_BLOCKS_PER_SM 4
// conv_wgmma: warpgroups a block (its epilogue's latency hides behind
// more of them), as many as fit in an SM's shared memory (227 KB a block
// on sm_90) next to one copy of the weights; five is 640 threads, the
// register budget the kernel was tuned at (five blocks of one warpgroup:
// 64 -> 32 channel layers then fitted only two, each with its own copy
// of the weights).
#define CM_WG_MAX 5
#define CM_WG_SMEM_MAX (227 * 1024)
// conv_wgmma with a small input (XS): tile halos in flight, the one
// multiplied included (see the kernel).
#define CM_XS_RING 4
// conv_wgmma with the upsampling folded in (UP): the input positions under
// a tile's halo (6 x 10, as 64 rows of a product).
#define CM_UP_R 6
#define CM_UP_W 10
#define CM_UP_ROWS 64
// ... except with 64 input channels (KS 4; 2-D only), where four fit next
// to the weights anyway and five's 96 registers a thread made the
// normalising instantiation spill: reloaded from local memory every tile,
// the spilled halo offsets missed L1 (its carve-out is shared memory) and
// stalled the halo loads. 512 threads get 128 registers.
__host__ __device__ constexpr int cm_wg_max(int ks) { return ks == 4 ? 4 : CM_WG_MAX; }

// The tile's shape, fixed at compile time so that positions split into
// (d, h, w) by constant divisions: a runtime-shaped first version spent
// more instructions on the halo's and the epilogue's index arithmetic than
// on the products, the tensor pipes mostly idle.
template <bool D3> struct cm_shape {
    static constexpr int kd = D3 ? 3 : 1;                 // the kernel along D
    static constexpr int t0 = D3 ? 4 : 1, t1 = D3 ? 4 : 8, t2 = D3 ? 8 : 16; // output positions along D, H, W
    static constexpr int h0 = t0 + kd - 1, h1 = t1 + 2, h2 = t2 + 2;          // the halo it reads
    static constexpr int halo = h0 * h1 * h2;
    static constexpr int taps = 9 * kd;
    static_assert(t0 * t1 * t2 == 128, "128 output positions a tile");
};

// Shared-memory row length (elements) of the halo and the weights for C
// channels: 16 bytes longer than the data, so that ldmatrix's eight row
// reads fall in distinct banks.
__host__ __device__ constexpr int cm_ld(int C) { return C + 8; }

struct cmgeom {
    int sp[3];     // spatial dims of x and y: D (1 in 2-D), H, W
    int C, K;      // input and output channels
    int ntile[3];  // tiles along D, H, W
    fastdiv fnt[3]; // ntile, for a tile's origin
    int ntiles;    // all tiles, N included
    int tps;       // tiles per sample
    bool d3;       // 3-D (cm_shape<true>), else 2-D
    bool wg;       // conv_wgmma (2-D, sm_90a), else conv_mma
    bool late;     // conv_wgmma: the next tile's loads start behind this tile's products
    bool pro;      // conv_wgmma normalises x as it lands (ab, pro_act; see below)
    int pro_c;     // ... its channels [0, pro_c)
    sgk_act pro_act;
    float pro_alpha;
    // Strides: a sample's in 64 bits, the rest in 32 (cm_plan checks that
    // every offset within a sample fits), so that the per-position index
    // arithmetic of the halo loads and the stores is 32-bit.
    ll xn, yn, zn;
    int xs[3], ys[3], zs[3], yc, zc;
    segrt_dtype yt, zt;
    sgk_act act;
    float alpha;
    bool ypair, zpair; // two channels as one vector store / load
    bool staged;       // results out through shared memory (see conv_mma)
    bool stage_own;    // the staging tile has its own space (it does not fit in a halo buffer)
    bool stats;        // per-tile statistics to part (staged only)
    bool xsmall;       // conv_wgmma: x has xcn <= 8 channels of any float dtype xt and
    int xcn, xc;       // ... strides (channel stride xc), read element by element (C is 16)
    segrt_dtype xt;
    void *pool;        // stats: also y's 2x2 max pool (stride 2, floor) there, dense channels-last,
    ll pn;             // ... its sample stride
    int ps[2];         // ... and its H, W strides
    uint32_t pool_min; // ... taking channel c's minimum where bit c is set (see store_pooled)
    bool up;           // conv_wgmma: channels [pro_c, C) from the upsampling of ux (see conv_wgmma)
    int up_c;          // ... of up_c (32 or 64) input channels
    const void *ux;    // ... [N, up_c, H / 2, W / 2], channels contiguous: its sample stride,
    ll un;             //     H and W strides and dims
    int us[2], usp[2];
    const float *uw, *ub; // ... the upsampling's weights and bias (NULL: none)
    const float4 *uab; // ... with up_pro, its input's normalisation
    sgk_act up_act, up_pro_act;
    float up_alpha, up_pro_alpha;
    bool up_pro;
    int wgs;           // conv_wgmma: warpgroups a block
    int wg_w_bytes;    // ... shared memory: the weights, then wgs regions of
    int wg_bytes;      //     wg_bytes (two halos, the staging tile, (mean, s, b), the statistics' sums)
};

// The output origin of a tile along D, H, W, and its sample.
template <bool D3>
__device__ __forceinline__ void tile_origin(const cmgeom &g, int tile, int *o0, int *o1, int *o2, int *n)
{
    typedef cm_shape<D3> S;
    uint32_t q = (uint32_t)tile, r = fastdiv_div(q, g.fnt[2]);
    *o2 = (int)(q - r * g.ntile[2]) * S::t2;
    q = fastdiv_div(r, g.fnt[1]);
    *o1 = (int)(r - q * g.ntile[1]) * S::t1;
    r = fastdiv_div(q, g.fnt[0]);
    *o0 = (int)(q - r * g.ntile[0]) * S::t0;
    *n = (int)r;
}

// Starts copying a tile's halo into xsh: a thread per halo position, all
// of its C channels (8 a copy; C a compile-time constant where the
// caller's KS is).
template <bool D3, typename T>
__device__ __forceinline__ void halo_issue(const cmgeom &g, const T *x, int tile, T *xsh, int C, int ldx)
{
    typedef cm_shape<D3> S;
    int o0, o1, o2, n;
    tile_origin<D3>(g, tile, &o0, &o1, &o2, &n);
    const T *xb = x + (ll)n * g.xn;
    o0 -= S::kd / 2;
    o1 -= 1;
    o2 -= 1;
    for (int hp = threadIdx.x; hp < S::halo; hp += CM_THREADS) {
        const int a2 = hp % S::h2, rest = hp / S::h2;
        const int a1 = rest % S::h1, a0 = rest / S::h1;
        const int i0 = o0 + a0, i1 = o1 + a1, i2 = o2 + a2;
        const bool in = (unsigned)i0 < (unsigned)g.sp[0] && (unsigned)i1 < (unsigned)g.sp[1] &&
                        (unsigned)i2 < (unsigned)g.sp[2];
        const T *src = xb + (in ? i0 * g.xs[0] + i1 * g.xs[1] + i2 * g.xs[2] : 0);
        T *dst = xsh + hp * ldx;
#pragma unroll
        for (int c = 0; c < C; c += 8)
            cp_async16(dst + c, src + (in ? c : 0), in);
    }
}

// Position r of a tile as (d, h, w) within it.
template <bool D3> __device__ __forceinline__ void tile_pos(int r, int *d, int *h, int *w)
{
    typedef cm_shape<D3> S;
    *w = r % S::t2;
    *h = (r / S::t2) % S::t1;
    *d = r / (S::t2 * S::t1);
}

// Offset in y (or z) of tile position r from the tile's first position;
// -1 outside the image (e: positions left along D, H, W from the tile's
// origin to the image's far ends).
template <bool D3> __device__ __forceinline__ int out_offset(const int *st, const int *e, int r)
{
    int d, h, wi;
    tile_pos<D3>(r, &d, &h, &wi);
    if (d >= e[0] || h >= e[1] || wi >= e[2])
        return -1;
    return d * st[0] + h * st[1] + wi * st[2];
}

// Channels c and c + 1 of one output position (at element yo of y; its
// residual at zo): bias (bz, of the two channels), activation, residual,
// one rounding to y's dtype.
template <int XT>
__device__ __forceinline__ void store_pair(const cmgeom &g, void *y, const void *z, const float *bz, ll yo, ll zo,
                                           int c, float v0, float v1)
{
    typedef typename mma_elem<XT>::type T;
    v0 = act_apply(v0 + bz[0], g.act, g.alpha);
    v1 = act_apply(v1 + bz[1], g.act, g.alpha);
    if (z) {
        if (g.zpair) {
            float2 f = XT == SEGRT_DTYPE_BFLOAT16 ? __bfloat1622float2(*(const __nv_bfloat162 *)((const T *)z + zo + c))
                                                  : __half22float2(*(const __half2 *)((const T *)z + zo + c));
            v0 += f.x;
            v1 += f.y;
        } else {
            v0 += ld_f32(z, zo + (ll)c * g.zc, g.zt);
            v1 += ld_f32(z, zo + (ll)(c + 1) * g.zc, g.zt);
        }
    }
    mma_store_pair<XT>(y, g.yt, g.ypair, yo + (ll)c * g.yc, g.yc, v0, v1);
}

// Stores the block's 128 x K results from the staging tile osh (rows of
// ldo elements, already biased, activated and rounded) with 16-byte
// stores: whole positions at a time, where the accumulators' fragment
// layout would give each lane 4-byte pieces of eight positions. yt: y at
// the tile's first position.
// (Every shared-memory load before the first store: the compiler cannot
// tell the generic pointers apart, and one at a time each load waited for
// the store before it.)
template <bool D3, int NT, typename T>
__device__ __forceinline__ void store_staged(const cmgeom &g, T *yt, const T *osh, int ldo, const int *e, int tid)
{
    static_assert(CM_TP * NT % CM_THREADS == 0, "whole vectors a thread");
    constexpr int Q = CM_TP * NT / CM_THREADS;
    uint4 v[Q];
    int yo[Q];
#pragma unroll
    for (int i = 0; i < Q; i++) {
        const int q = tid + i * CM_THREADS, r = q / NT, cv = q % NT;
        v[i] = *(const uint4 *)(osh + r * ldo + cv * 8);
        yo[i] = out_offset<D3>(g.ys, e, r);
        yo[i] = yo[i] < 0 ? -1 : yo[i] + cv * 8;
    }
#pragma unroll
    for (int i = 0; i < Q; i++)
        if (yo[i] >= 0)
            *(uint4 *)(yt + yo[i]) = v[i];
}

// A pair of 16-bit values of dtype T (the normalising prologue's and the
// pool's arithmetic).
template <typename T> struct pro_pair;
template <> struct pro_pair<__half> {
    typedef __half2 type;
    static __device__ __forceinline__ type of(float a, float b) { return __floats2half2_rn(a, b); }
    static __device__ __forceinline__ float2 to(type v) { return __half22float2(v); }
};
template <> struct pro_pair<__nv_bfloat16> {
    typedef __nv_bfloat162 type;
    static __device__ __forceinline__ type of(float a, float b) { return __floats2bfloat162_rn(a, b); }
    static __device__ __forceinline__ float2 to(type v) { return __bfloat1622float2(v); }
};

// The tile's 2x2 max pool (stride 2, 2-D), from the staging tile osh:
// whole 16-byte channel vectors of the 4x8 pooled positions, each the
// largest of its four results, or the smallest for the channels whose bit
// of g.pool_min is set. A norm with a negative scale follows there (the
// planner reads the signs of its constant scale): the pool of the
// normalised tensor is the normalisation of that smallest value, so the
// layer reading the pool normalises this tensor as it loads it and the
// pool's own pass over the full-size tensor is not run. Tile origins are
// even, so no window straddles two tiles; a window that reaches past the
// image's last row or column has no output (floor). pt: the pool at the
// tile's first pooled position.
template <typename T> __device__ __forceinline__ uint32_t pool2_word(uint32_t a, uint32_t b, bool lo_min, bool hi_min)
{
    typedef typename pro_pair<T>::type T2;
    T2 x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    const T2 mx = __hmax2(x, y), mn = __hmin2(x, y);
    uint32_t umx, umn;
    memcpy(&umx, &mx, 4);
    memcpy(&umn, &mn, 4);
    const uint32_t sel = (lo_min ? 0xffffu : 0u) | (hi_min ? 0xffff0000u : 0u);
    return (umx & ~sel) | (umn & sel);
}

template <int NT, typename T>
__device__ __forceinline__ void store_pooled(const cmgeom &g, T *pt, const T *osh, int ldo, const int *e, int tid)
{
    typedef cm_shape<false> S;
    constexpr int PW = S::t2 / 2, PP = S::t1 / 2 * PW; // 4 x 8 pooled positions
    for (int q = tid; q < PP * NT; q += CM_THREADS) {
        const int pp = q / NT, cv = q % NT, i = pp / PW, j = pp % PW;
        if (2 * i + 1 >= e[1] || 2 * j + 1 >= e[2])
            continue;
        const T *o = osh + (2 * i * S::t2 + 2 * j) * ldo + cv * 8;
        const uint4 a = *(const uint4 *)o, b = *(const uint4 *)(o + ldo), c = *(const uint4 *)(o + S::t2 * ldo),
                    d = *(const uint4 *)(o + (S::t2 + 1) * ldo);
        const uint32_t bits = g.pool_min >> (cv * 8);
        uint32_t av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w}, cv4[4] = {c.x, c.y, c.z, c.w},
                 dv[4] = {d.x, d.y, d.z, d.w}, r[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const bool lo = bits >> (2 * k) & 1u, hi = bits >> (2 * k + 1) & 1u;
            // (Max of maxes, or min of mins: each half-word selects one
            // of the two the same way at both levels.)
            r[k] = pool2_word<T>(pool2_word<T>(av[k], bv[k], lo, hi), pool2_word<T>(cv4[k], dv[k], lo, hi),
                                     lo, hi);
        }
        *(uint4 *)(pt + i * g.ps[0] + j * g.ps[1] + cv * 8) = make_uint4(r[0], r[1], r[2], r[3]);
    }
}

// Per-tile statistics (EPI_STATS) --------------------------------------------------
//
// Taken from the accumulators as the epilogue goes. The kernel is bound by
// instruction issue, so this is about instructions (docs/perf.md: the
// forms tried). Each channel's sums are of its deviations from its
// bias, which are the accumulators themselves, so every lane and warp
// shares one shift and partial sums simply add: a lane sums its four
// positions, lanes of a channel pair up twice by shuffles, and the eight
// partial sums per channel meet in shared memory at the epilogue's
// barrier, where one thread per channel adds them in a fixed order and
// writes the tile's (mean, M2). (Cancellation in M2 = S2 - S1^2 / n grows
// with (mean / std)^2 of the channel's accumulators, as does the rounding
// of the stored float16 or bfloat16 values the norm reads: the sums lose
// no more than storage already has.)
template <int NT> struct wsums {
    float s1[NT][2], s2[NT][2];
};

template <int NT> __device__ __forceinline__ void wsums_add(wsums<NT> &ws, int nt, float d0, float d1)
{
    ws.s1[nt][0] += d0;
    ws.s2[nt][0] = fmaf(d0, d0, ws.s2[nt][0]);
    ws.s1[nt][1] += d1;
    ws.s2[nt][1] = fmaf(d1, d1, ws.s2[nt][1]);
}

// Adds lane bits 3 and 4 (grp / 2); lanes 0-7 then write their sums to
// sh[(warp * 2 + grp) * 2 * K + 2 * c + {0, 1}] (S1, S2 of channel c).
template <int NT> __device__ __forceinline__ void wsums_put(wsums<NT> &ws, float *sh, int warp, int lane)
{
    constexpr int K = NT * 8;
#pragma unroll
    for (int d = 8; d < 32; d <<= 1)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                ws.s1[nt][j] += __shfl_xor_sync(0xffffffffu, ws.s1[nt][j], d);
                ws.s2[nt][j] += __shfl_xor_sync(0xffffffffu, ws.s2[nt][j], d);
            }
    if (lane < 8) {
        const int grp = lane >> 2, t4 = lane & 3;
        float2 *row = (float2 *)(sh + (warp * 2 + grp) * 2 * K);
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int j = 0; j < 2; j++)
                row[nt * 8 + 2 * t4 + j] = make_float2(ws.s1[nt][j], ws.s2[nt][j]);
    }
}

// After the barrier: thread c < K adds channel c's eight partial sums and
// writes the tile's (mean, M2) to part[(n * K + c) * tps + the tile's
// index in its sample]; count: the tile's positions inside the image.
template <int NT>
__device__ __forceinline__ void wsums_merge(const float *sh, float bias_c, float count, float2 *part, int n,
                                            int tile, int tps, int c)
{
    constexpr int K = NT * 8;
    float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
    for (int e = 0; e < 2 * CM_THREADS / 32; e++) {
        const float2 q = ((const float2 *)(sh + e * 2 * K))[c];
        s1 += q.x;
        s2 += q.y;
    }
    const float m = s1 * (1.0f / count), m2 = s2 - s1 * m;
    part[((ll)n * K + c) * tps + (tile - n * tps)] = make_float2(bias_c + m, m2 > 0.0f ? m2 : 0.0f);
}

// How the results leave: straight from the accumulators, or through
// shared memory (g.staged: no residual, y of x's dtype with 16-byte
// positions), or so and with per-tile statistics (g.stats). The
// statistics are an instantiation of their own: their code in the staged
// one, even when skipped, slowed its main loop.
enum { EPI_DIRECT, EPI_STAGED, EPI_STATS };

// The A (halo) and B (weight) fragments of one step of the main loop: a
// tap and a 16-channel slice.
template <int NT> struct cm_frags {
    uint32_t a[2][4];
    uint32_t b[(NT + 1) / 2][4];
};

// Loads step s's fragments (tap s / ksteps, slice s % ksteps). xa: this
// lane's ldmatrix rows of the warp's two 16-position blocks at tap
// (0, 0, 0); wb: its row of the weights for a pair of n8 blocks; wodd: its
// B operand of an odd last n8 block. Where ksteps, ldx and ldw are
// compile-time constants (KS > 0) every address is a register plus a
// constant.
template <bool D3, int NT, typename T>
__device__ __forceinline__ void frags_load(cm_frags<NT> &f, const T *const *xa, const T *wb, const T *wodd, int s,
                                           int ksteps, int ldx, int ldw)
{
    typedef cm_shape<D3> S;
    constexpr int K = NT * 8;
    const int tap = s / ksteps, ks = s % ksteps;
    const int k0 = tap / 9, k1 = (tap / 3) % 3, k2 = tap % 3;
    const int toff = ((k0 * S::h1 + k1) * S::h2 + k2) * ldx + ks * 16;
    const int woff = tap * K * ldw + ks * 16;
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
        ldmatrix_x4(f.a[mt], xa[mt] + toff);
#pragma unroll
    for (int nt = 0; nt + 1 < NT; nt += 2)
        ldmatrix_x4(f.b[nt / 2], wb + woff + nt * 8 * ldw);
    if constexpr (NT % 2 == 1) {
        f.b[NT / 2][0] = *(const uint32_t *)(wodd + woff);
        f.b[NT / 2][1] = *(const uint32_t *)(wodd + woff + 8);
    }
}

template <int XT, int NT> __device__ __forceinline__ void frags_mma(float (*acc)[NT][4], const cm_frags<NT> &f)
{
#pragma unroll
    for (int nt = 0; nt + 1 < NT; nt += 2)
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
            mma16816<XT>(acc[mt][nt], f.a[mt], f.b[nt / 2]);
            mma16816<XT>(acc[mt][nt + 1], f.a[mt], f.b[nt / 2] + 2);
        }
    if constexpr (NT % 2 == 1) {
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
            mma16816<XT>(acc[mt][NT - 1], f.a[mt], f.b[NT / 2]);
    }
}

// Which tile position an accumulator row holds: mma.sync's warp w has
// positions 32 w .. 32 w + 31 (two m16 blocks mt); a warpgroup product's
// block mt is the tile's 8x8 patch at column 8 mt, warp w its rows 2 w
// and 2 w + 1 (2-D only). grp: the lane's row in an m16 block (lane / 4),
// half: + 8 rows.
template <bool WG> __device__ __forceinline__ int acc_row(int warp, int mt, int grp, int half)
{
    if constexpr (WG)
        return (2 * warp + half) * cm_shape<false>::t2 + 8 * mt + grp;
    else
        return warp * 32 + mt * 16 + grp + 8 * half;
}

// The statistics' partial sums of a tile: 8 (S1, S2) pairs per channel.
__host__ __device__ constexpr int cm_ssh_floats(int K) { return 2 * CM_THREADS / 32 * 2 * K; }

// The tile's results out of the accumulators (two position blocks mt of
// NT n8 blocks; lane (grp, t4) holds rows grp and grp + 8 of each block,
// channels 2 t4 and 2 t4 + 1 of each n8 block), after the barrier that
// ends the tile's products. The tile belongs to CM_THREADS threads (tid:
// this one's index among them; sync: their barrier). xsh: the tile's
// halo buffer, free for staging (osh_own where the staging tile does not
// fit there); ssh: cm_ssh_floats(K) floats for the statistics.
template <int XT, int NT, bool D3, int EPI, bool WG, typename Sync>
__device__ __forceinline__ void tile_epilogue(const cmgeom &g, float (&acc)[2][NT][4], const float (&bz)[NT][2],
                                              int tile, typename mma_elem<XT>::type *xsh,
                                              typename mma_elem<XT>::type *osh_own, float *ssh, int tid, Sync sync,
                                              void *__restrict__ y, const void *__restrict__ z,
                                              const float *__restrict__ bias, float2 *__restrict__ part)
{
    typedef typename mma_elem<XT>::type T;
    typedef cm_shape<D3> S;
    constexpr int K = NT * 8;
    const int lane = tid & 31, warp = tid >> 5, grp = lane >> 2, t4 = lane & 3;
    int o0, o1, o2, n;
    tile_origin<D3>(g, tile, &o0, &o1, &o2, &n);
    // Positions left of the image's far ends along D, H, W: the tile's
    // all but at those ends.
    const int e[3] = {g.sp[0] - o0, g.sp[1] - o1, g.sp[2] - o2};
    // (Every accumulator index below is a constant once unrolled, so the
    // accumulators stay in registers.)
    if constexpr (EPI != EPI_DIRECT) {
        constexpr bool STATS = EPI == EPI_STATS;
        // Staged in this tile's halo buffer where it fits (read: the
        // barrier above), else in its own space.
        T *osh = g.stage_own ? osh_own : xsh;
        constexpr int ldo = K + 8;
        [[maybe_unused]] wsums<NT> ws;
        [[maybe_unused]] const bool edge = e[0] < S::t0 || e[1] < S::t1 || e[2] < S::t2;
        if constexpr (STATS) {
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int j = 0; j < 2; j++)
                    ws.s1[nt][j] = ws.s2[nt][j] = 0.0f;
            // Positions outside the image add nothing: their
            // accumulators become zero (they are not stored), so the
            // sums below need no test per position (tested there, the
            // index arithmetic ran for every tile, predicated off).
            if (edge) {
#pragma unroll
                for (int mt = 0; mt < 2; mt++)
#pragma unroll
                    for (int half = 0; half < 2; half++) {
                        int d, h, wi;
                        tile_pos<D3>(acc_row<WG>(warp, mt, grp, half), &d, &h, &wi);
                        if (d >= e[0] || h >= e[1] || wi >= e[2]) {
#pragma unroll
                            for (int nt = 0; nt < NT; nt++)
                                acc[mt][nt][2 * half] = acc[mt][nt][2 * half + 1] = 0.0f;
                        }
                    }
            }
        }
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const int c = nt * 8 + 2 * t4;
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int r = acc_row<WG>(warp, mt, grp, half);
                    // (cm_plan takes statistics only without an activation.)
                    float v0 = acc[mt][nt][2 * half] + bz[nt][0], v1 = acc[mt][nt][2 * half + 1] + bz[nt][1];
                    if constexpr (!STATS) {
                        v0 = act_apply(v0, g.act, g.alpha);
                        v1 = act_apply(v1, g.act, g.alpha);
                    }
                    T *o = osh + r * ldo + c;
                    if constexpr (XT == SEGRT_DTYPE_BFLOAT16)
                        *(__nv_bfloat162 *)o = __floats2bfloat162_rn(v0, v1);
                    else
                        *(__half2 *)o = __floats2half2_rn(v0, v1);
                    if constexpr (STATS)
                        wsums_add<NT>(ws, nt, acc[mt][nt][2 * half], acc[mt][nt][2 * half + 1]);
                }
            }
        }
        if constexpr (STATS)
            wsums_put<NT>(ws, ssh, warp, lane);
        sync();
        T *ytile = (T *)y + (ll)n * g.yn + (ll)o0 * g.ys[0] + (ll)o1 * g.ys[1] + (ll)o2 * g.ys[2];
        store_staged<D3, NT>(g, ytile, osh, ldo, e, tid);
        if constexpr (STATS && !D3)
            if (g.pool)
                store_pooled<NT, T>(g, (T *)g.pool + (ll)n * g.pn + (ll)(o1 / 2) * g.ps[0] + (ll)(o2 / 2) * g.ps[1],
                                    osh, ldo, e, tid);
        if (STATS && tid < K)
            wsums_merge<NT>(ssh, bias ? bias[tid] : 0.0f,
                            (float)((e[0] < S::t0 ? e[0] : S::t0) * (e[1] < S::t1 ? e[1] : S::t1) *
                                    (e[2] < S::t2 ? e[2] : S::t2)),
                            part, n, tile, g.tps, tid);
        // The staging tile is read: the next iteration may refill it.
        // (conv_wgmma with g.late refills this buffer only after its next
        // tile's first barrier, which every thread reaches past here.)
        if (!(WG && g.late))
            sync();
    } else {
        const ll ybase = (ll)n * g.yn + (ll)o0 * g.ys[0] + (ll)o1 * g.ys[1] + (ll)o2 * g.ys[2];
        const ll zbase = z ? (ll)n * g.zn + (ll)o0 * g.zs[0] + (ll)o1 * g.zs[1] + (ll)o2 * g.zs[2] : 0;
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const int r = acc_row<WG>(warp, mt, grp, half);
                const int yo = out_offset<D3>(g.ys, e, r);
                if (yo < 0)
                    continue;
                const ll zo = z ? zbase + out_offset<D3>(g.zs, e, r) : 0;
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
                    store_pair<XT>(g, y, z, bz[nt], ybase + yo, zo, nt * 8 + 2 * t4, acc[mt][nt][2 * half],
                                   acc[mt][nt][2 * half + 1]);
            }
    }
}

// The kernel's arguments past the launch configuration.
struct cmargs {
    const sgk_view *y, *x, *z;
    const float *w, *bias;
    float2 *part;
    const float4 *ab;
};

// conv_mma's static shared memory (its statistics' sums).
__host__ __device__ constexpr int cm_static_smem(int K, bool stats) { return stats ? 4 * cm_ssh_floats(K) : 8; }

// Past 48 KB a kernel must opt in (a function attribute, not a stream
// operation: allowed while a CUDA graph is captured), to its most or the
// device's (smem_opt_in_bytes).
template <typename F> inline bool smem_opt_in(F kernel, int bytes = CM_SMEM_MAX, int static_bytes = 0)
{
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                smem_opt_in_bytes(bytes, static_bytes)) == cudaSuccess;
}

// The launchers: conv_mma (k_conv_mma_sync.cu) and conv_wgmma
// (k_conv_wgmma.cu, 2-D only) with the layer's launch configuration; each
// file instantiates them for the instances k_conv_mma_instances.cuh lists.
template <int XT, int NT, bool D3, int KS, int EPI>
segrt_status cm_launch_mma(cudaStream_t stream, unsigned grid, size_t smem, const cmargs &a, const cmgeom &g);
template <int XT, int NT, int KS, int EPI>
segrt_status cm_launch_wgmma(cudaStream_t stream, unsigned grid, size_t smem, const cmargs &a, const cmgeom &g);

#endif
