// 3x3(x3) stride-1 convolution as an implicit matrix product on the tensor
// cores (see k_conv_mma.h).
//
// Shared memory holds every weight, [tap][K][C] rounded to the input's
// dtype, and two tiles' input halos, [position][C]: while the warps
// multiply one, cp.async fills the other with the block's next tile
// (zeros where the halo leaves the image). Rows are 16 bytes longer than
// the data so that ldmatrix's eight row reads, of the halo (the A operand)
// and of the weights (B), fall in distinct banks. Each warp owns 32 of the
// tile's 128 output positions (two m16 blocks) and all K channels (K/8 n8
// blocks); for a tap, the A operand of a position is the halo row the tap
// shifts it to, so a tap costs no data movement, only another row address.
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
// stalled the halo loads (ncu, BasicUNet's 64 -> 32 layer at 256^2: a
// tenth of the stall samples). 512 threads get 128 registers.
__host__ __device__ constexpr int cm_wg_max(int ks) { return ks == 4 ? 4 : CM_WG_MAX; }
// ... for a 2-D layer of C input channels (launch_ks: KS 4 at 64).
static int cm_wg_cap(int C) { return cm_wg_max(C == 64 ? 4 : 0); }

// The tile's shape, fixed at compile time so that positions split into
// (d, h, w) by constant divisions: a runtime-shaped first version spent
// more instructions on the halo's and the epilogue's index arithmetic than
// on the products (ncu: 2.1 instructions issued a cycle, tensor pipes
// mostly idle).
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
// instruction issue, so this is about instructions: BasicUNet's 32 -> 32
// layers at 512^2 (batch 16, H100) took 0.35 ms without statistics, 0.45
// when a second pass read the staged tile back, 0.43 with per-lane shifts
// merged between lanes by Chan's formula, and 0.42 as here. Each channel's
// sums are of its deviations from its
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
// one, even when skipped, made its main loop 10 % slower.
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

// KS: C / 16 where it is 1, 2 or 4 (C, the shared-memory rows and every
// step are then compile-time constants, and the next step's fragments load
// while this step's products run), else 0 (a loop over the 16-channel
// slices). EPI: one of the above.
template <int XT, int NT, bool D3, int KS, int EPI>
__global__ void __launch_bounds__(CM_THREADS, CM_BLOCKS_PER_SM)
    conv_mma(const void *__restrict__ x, void *__restrict__ y, const float *__restrict__ w,
             const float *__restrict__ bias, const void *__restrict__ z, float2 *__restrict__ part, cmgeom g)
{
    typedef typename mma_elem<XT>::type T;
    typedef cm_shape<D3> S;
    constexpr int K = NT * 8;
    const int C = KS ? KS * 16 : g.C, ldx = cm_ld(C), ldw = cm_ld(C);
    const int ksteps = C / 16;
    extern __shared__ __align__(128) unsigned char smem[];
    T *wsh = (T *)smem;                   // [tap][K][ldw]
    T *xsh0 = wsh + S::taps * K * ldw;    // two of [halo position][ldx]
    T *osh_own = xsh0 + 2 * S::halo * ldx; // the staging tile, where it has its own space
    __shared__ __align__(8) float ssh[EPI == EPI_STATS ? cm_ssh_floats(K) : 2];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, grp = lane >> 2, t4 = lane & 3;

    // Four weights a load (C is a multiple of 16), several loads in flight.
#pragma unroll 4
    for (int e = threadIdx.x * 4; e < S::taps * K * C; e += CM_THREADS * 4) {
        float4 v = *(const float4 *)(w + e);
        T *d = wsh + (e / C) * ldw + e % C;
        d[0] = mma_round<XT>(v.x);
        d[1] = mma_round<XT>(v.y);
        d[2] = mma_round<XT>(v.z);
        d[3] = mma_round<XT>(v.w);
    }
    // This lane's output channels' biases, read once.
    float bz[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int c = nt * 8 + 2 * t4;
        bz[nt][0] = bias ? bias[c] : 0.0f;
        bz[nt][1] = bias ? bias[c + 1] : 0.0f;
    }
    // This lane's ldmatrix row in each of the warp's two 16-position
    // blocks, as a halo index at tap (0, 0, 0).
    const int lrow = (lane & 7) + ((lane >> 3) & 1) * 8, lcol = (lane >> 4) * 8;
    int hb[2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
        int d, h, wi;
        tile_pos<D3>(warp * 32 + mt * 16 + lrow, &d, &h, &wi);
        hb[mt] = (d * S::h1 + h) * S::h2 + wi;
    }
    // The weights as ldmatrix reads them for a pair of n8 blocks: lanes
    // 0-7 and 8-15 address the first block's rows (output channels) at
    // input channels 0-7 and 8-15 of a slice, lanes 16-31 the second's: in
    // mma's b0, b1 order, one instruction for what took four loads.
    const int wrow = (lane & 7) + (lane >> 4) * 8, wcol = ((lane >> 3) & 1) * 8;
    const T *wb = wsh + wrow * ldw + wcol, *wodd = wsh + ((NT - 1) * 8 + grp) * ldw + 2 * t4;
    const T *xt = (const T *)x;
    if (blockIdx.x < g.ntiles)
        halo_issue<D3>(g, xt, blockIdx.x, xsh0, C, ldx);
    cp_async_commit();
    for (int tile = blockIdx.x, it = 0; tile < g.ntiles; tile += gridDim.x, it++) {
        T *xsh = xsh0 + (it & 1) * S::halo * ldx;
        if (tile + (int)gridDim.x < g.ntiles)
            halo_issue<D3>(g, xt, tile + gridDim.x, xsh0 + ((it + 1) & 1) * S::halo * ldx, C, ldx);
        cp_async_commit(); // possibly empty: one group per iteration
        cp_async_wait1();  // this tile's halo has landed (this thread's part)
        __syncthreads();   // everyone's part, and the weights, the first time
        float acc[2][NT][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    acc[mt][nt][i] = 0.0f;
        const T *xa[2] = {xsh + hb[0] * ldx + lcol, xsh + hb[1] * ldx + lcol};
        if constexpr (KS > 0) {
            // Every tap and slice unrolled, the next step's fragments in
            // flight while this step's products run (loaded just before
            // their products, ldmatrix's latency stalled the tensor pipe:
            // ncu's short-scoreboard stalls were a quarter of all).
            constexpr int STEPS = S::taps * KS;
            cm_frags<NT> f[2];
            frags_load<D3>(f[0], xa, wb, wodd, 0, KS, ldx, ldw);
#pragma unroll
            for (int s = 0; s < STEPS; s++) {
                if (s + 1 < STEPS)
                    frags_load<D3>(f[(s + 1) & 1], xa, wb, wodd, s + 1, KS, ldx, ldw);
                frags_mma<XT, NT>(acc, f[s & 1]);
            }
        } else {
#pragma unroll
            for (int tap = 0; tap < S::taps; tap++)
                for (int ks = 0; ks < ksteps; ks++) {
                    cm_frags<NT> f;
                    frags_load<D3>(f, xa, wb, wodd, tap * ksteps + ks, ksteps, ldx, ldw);
                    frags_mma<XT, NT>(acc, f);
                }
        }
        __syncthreads(); // the halo is read: the next iteration may refill it
        tile_epilogue<XT, NT, D3, EPI, false>(g, acc, bz, tile, xsh, osh_own, ssh, threadIdx.x,
                                              [] { __syncthreads(); }, y, z, bias, part);
    }
}

// Every accumulator of a tile pinned (wg_pin).
template <int NT> __device__ __forceinline__ void wg_pin_all(float (&acc)[2][NT][4])
{
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                wg_pin(acc[mt][nt][i]);
}

// The same layer through Hopper's warpgroup products (2-D): four warps are
// a warpgroup, and each tap and 16-channel slice of its tile is two wgmma
// m64nKk16, one per 8x8 patch of the 8x16 tile, reading both operands
// from shared memory by descriptor. A block holds up to CM_WG_MAX
// warpgroups that share one copy of the weights and otherwise walk their
// own tiles with their own buffers and barriers. The mma.sync kernel above
// spends most of its issue slots on ldmatrix and products 16x8 at a time
// (ncu: issue-bound); here a tile's products are 36 instructions (32
// channels) and run while the warps wait.
//
// The layouts are wgmma's without swizzling, 8-channel chunks outermost:
// the halo [chunk][halo position][8], so that the 8x8 patch a tap shifts
// to is eight core matrices (8 positions of one row, 16 bytes each,
// contiguous) a halo row apart; the weights [tap][chunk][K][8].
//
// With PRO, x is a normalisation's input, not its output: each thread
// applies y = act((x - mean) * s + b) (ab: float4 (mean, mean's low part,
// s, b) per sample and channel, sgk_group_norm_partials_ab) to the halo
// positions it copied, once they land and before the products read them,
// in 16-bit pairs; positions outside the image stay zero (the
// convolution's padding is of the normalised tensor). The normalisation's
// own pass, a read and a write of x, is then not run.
// One sample's (mean, s, b) of its Cn normalised channels as 16-bit pairs,
// [3][C / 2], in shared memory.
template <typename T>
__device__ __forceinline__ void pro_stage(const float4 *__restrict__ ab, int n, int C, int Cn,
                                          typename pro_pair<T>::type *sh, int tid)
{
    typedef pro_pair<T> P;
    for (int j = tid; j < Cn / 2; j += CM_THREADS) {
        const float4 u = ab[(ll)n * Cn + 2 * j], v = ab[(ll)n * Cn + 2 * j + 1];
        sh[j] = P::of(u.x, v.x);
        sh[C / 2 + j] = P::of(u.z, v.z);
        sh[C + j] = P::of(u.w, v.w);
    }
}

template <typename T>
__device__ __forceinline__ typename pro_pair<T>::type pro_apply(typename pro_pair<T>::type v,
                                                                typename pro_pair<T>::type m,
                                                                typename pro_pair<T>::type s,
                                                                typename pro_pair<T>::type b,
                                                                typename pro_pair<T>::type alpha, sgk_act act)
{
    v = __hfma2(__hsub2(v, m), s, b);
    // (cm_plan takes slopes in [0, 1], where max(v, alpha v) is LeakyRelu.)
    return act == SGK_ACT_NONE ? v : __hmax2(v, __hmul2(v, alpha));
}

// 16 bytes from one object to another of another type (a uint4, four
// 16-bit pairs), without reading either through the other's type.
template <typename To, typename From> __device__ __forceinline__ void bits16(To *to, const From &from)
{
    static_assert(sizeof(From) == 16, "16 bytes");
    memcpy((void *)to, (const void *)&from, 16);
}

// A warpgroup's barrier: named barrier 1 + wg over its CM_THREADS threads
// (0 is __syncthreads').
__device__ __forceinline__ void wg_sync(int wg)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(1 + wg), "r"(CM_THREADS) : "memory");
}

// Weights [taps][K][C] float32 as [tap][chunk][K][8] of T in shared memory
// (wgmma's layout, below), four a load.
template <int XT>
__device__ __forceinline__ void wg_stage_weights(typename mma_elem<XT>::type *wsh, const float *__restrict__ w,
                                                 int taps, int K, int C)
{
    typedef typename mma_elem<XT>::type T;
    const int chunks = C / 8;
#pragma unroll 4
    for (int e = threadIdx.x * 4; e < taps * K * C; e += blockDim.x * 4) {
        float4 v = *(const float4 *)(w + e);
        const int c = e % C, k = (e / C) % K, tap = e / (K * C);
        T *d = wsh + ((tap * chunks + c / 8) * K + k) * 8 + c % 8;
        d[0] = mma_round<XT>(v.x);
        d[1] = mma_round<XT>(v.y);
        d[2] = mma_round<XT>(v.z);
        d[3] = mma_round<XT>(v.w);
    }
}

// UP: with the upsampling of UP (32 or 64) input channels folded in
// (cmgeom.up; KS 4, C 64, 32 of them the upsampling's), a tile's halo
// channels 32-63 are computed, not loaded. The upsampling's input under
// the halo, 6 x 10 positions (zeros outside it), lands by cp.async in the halo
// buffer's space for those channels, as 64 rows [chunk][row][8], with
// its normalisation's (mean, -, s, b) after them; each thread normalises
// the rows it copied (float32, as the norm's pass), then the warpgroup
// multiplies them by the weights of each of the four phases (wgmma
// m64n32k16), and after a barrier the results, bias added and rounded to
// x's dtype as the upsampling's store rounds them, are written over the
// same space as the halo's channels 32-63 (zeros outside the image), and
// the tile goes on as if they had been read. The statistics' sums, which
// have no space left beside the weights of both layers, go after the
// staging tile in the halo buffer.
template <int XT, int NT, int KS, int EPI, bool PRO, bool XS, int UP = 0>
__global__ void __launch_bounds__(CM_THREADS *cm_wg_max(KS), 1)
    conv_wgmma(const void *__restrict__ x, void *__restrict__ y, const float *__restrict__ w,
               const float *__restrict__ bias, const void *__restrict__ z, float2 *__restrict__ part,
               const float4 *__restrict__ ab, cmgeom g)
{
    typedef typename mma_elem<XT>::type T;
    typedef cm_shape<false> S;
    constexpr int K = NT * 8;
    static_assert(!UP || (KS == 4 && NT == 4 && PRO && EPI == EPI_STATS && !XS), "UP: 64 -> 32 with statistics");
    // UP: the upsampling's input chunks, its output channels, the halo's
    // first chunk of them.
    constexpr int UCH = UP / 8, KU = 32, HU = 4;
    static_assert(UP == 0 || UP == 32 || UP == 64, "UP: 32 or 64 input channels");
    // (Its rows and their (mean, -, s, b) fit in the space of halo chunks 4-7.)
    static_assert(UCH * CM_UP_ROWS * 16 + UP * 16 <= (8 - HU) * S::halo * 16, "UP: the input in the halo buffer");
    const int C = KS ? KS * 16 : g.C, chunks = C / 8, ksteps = C / 16;
    // Warpgroup wg of wgs walks its own tiles; the weights are the block's.
    // (wg through a shuffle: known to be the same across the warp, so that
    // its buffers' addresses and the descriptors derived from them live in
    // uniform registers; from threadIdx.x, every product waited for an
    // R2UR move, ncu: 7 % of all instructions.)
    const int wgs = blockDim.x / CM_THREADS, wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / CM_THREADS, 0),
              tid = threadIdx.x % CM_THREADS;
    extern __shared__ __align__(128) unsigned char smem[];
    T *wsh = (T *)smem; // [tap][chunk][K][8]
    unsigned char *mine = smem + g.wg_w_bytes + (size_t)wg * g.wg_bytes;
    T *xsh0 = (T *)mine;                 // two of [chunk][halo position][8]
    T *osh_own = xsh0 + 2 * S::halo * C; // the staging tile, where it has its own space
    typedef typename pro_pair<T>::type T2;
    // PRO: two tiles' samples' (mean, s, b), after the staging tile.
    T2 *prosh = (T2 *)(osh_own + (g.stage_own ? CM_TP * (K + 8) : 0));
    float *ssh = (float *)(prosh + (PRO ? 2 * 3 * (C / 2) : 0));
    // XS: the ring of landed halos after the statistics' sums (cm_plan).
    [[maybe_unused]] float *ring = ssh + (EPI == EPI_STATS ? cm_ssh_floats(K) : 0);
    const int t4 = tid & 3;
    wg_stage_weights<XT>(wsh, w, S::taps, K, C);
    [[maybe_unused]] T *wsh_up = wsh + S::taps * K * C; // UP: [phase][chunk][KU][8]
    if constexpr (UP)
        wg_stage_weights<XT>(wsh_up, g.uw, 4, KU, UP);
    wg_fence_smem(); // the weights, to the async proxy
    float bz[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int c = nt * 8 + 2 * t4;
        bz[nt][0] = bias ? bias[c] : 0.0f;
        bz[nt][1] = bias ? bias[c + 1] : 0.0f;
    }
    [[maybe_unused]] float ubz[KU / 8][2]; // UP: the upsampling's biases
    if constexpr (UP)
#pragma unroll
        for (int nt = 0; nt < KU / 8; nt++) {
            const int c = nt * 8 + 2 * t4;
            ubz[nt][0] = g.ub ? g.ub[c] : 0.0f;
            ubz[nt][1] = g.ub ? g.ub[c + 1] : 0.0f;
        }
    const T *xt = (const T *)x;
    constexpr int HPT = (S::halo + CM_THREADS - 1) / CM_THREADS; // halo positions a thread
    // XS: x's xcn channels land as float32 in a ring of CM_XS_RING tile
    // halos, [slot][channel][halo position], copied CM_XS_RING - 1 tiles
    // ahead of the products; a tile's turn rounds its slot into chunk 0 of
    // its halo buffer (zeros past xcn); chunk 1, channels 8-15, stays zero.
    // A thread copies and rounds the same positions, so the ring needs no
    // barrier. (The halo of the next tile alone, loaded into registers by
    // ld_f32's switch on the dtype, left the loads the epilogue's time to
    // land, and their uneven share, two positions for some threads and
    // one for the rest, held the warpgroup at the barrier after the
    // products: ncu on BasicUNet's first layer, a sixth of the stall
    // samples there.)
    constexpr int XR = CM_XS_RING;
    [[maybe_unused]] const int ring_slot = g.xcn * S::halo;
    if constexpr (XS)
        for (int i = tid; i < 2 * S::halo; i += CM_THREADS)
            *(uint4 *)(xsh0 + (i / S::halo) * S::halo * C + (S::halo + i % S::halo) * 8) = make_uint4(0, 0, 0, 0);
    // One thread a (halo position, chunk), chunks outermost in xsh.
    // Returns which of this thread's positions are inside the image (bit
    // j: position tid + j CM_THREADS); with PRO, also stages the tile's
    // sample's (mean, s, b) in prosh's half `buf`.
    //
    // Where C is a compile-time constant (KS > 0, not XS), a thread copies
    // one chunk instead, ck, of positions cp0 + j CPR (bit j of the
    // result): with PRO it then normalises one chunk's channels, their
    // (mean, s, b) read once a tile, and can load all its positions before
    // it stores any (over every chunk of its own positions, each step's
    // shared-memory load waited for the store before it: ncu put a quarter
    // of the stall samples there). Eight consecutive threads take eight
    // consecutive positions of a chunk: 128 contiguous bytes of shared
    // memory (one phase of 16-byte accesses, free of bank conflicts; with
    // ck = tid % CHK, 2-way conflicts), while a warp's global loads still
    // read 64 contiguous bytes or more of each position they touch.
    //
    // With 64 channels (KS 4) a thread takes two chunks, ck and ck + 4, of
    // half as many positions: a Concat whose first half alone is
    // normalised (UNet's decoder, the skip beside the upsampling) then
    // gives every thread the same share of the prologue's work. (With one
    // chunk a thread, warps 0 and 2 normalised while 1 and 3 waited at the
    // barrier before the products: ncu put 30 % of the stall samples of
    // BasicUNet's 64 -> 32 layer at 512^2 on barriers.)
    //
    // UP: the upsampled chunks 4-7 are not loaded: a thread copies one of
    // chunks 0-3, and the same chunk of two of the upsampling's input rows
    // (and chunk + 4, with 64 channels).
    constexpr int NCH = KS == 4 && !UP ? 2 : 1; // chunks a thread
    constexpr int CHK = UP ? 4 : KS ? 2 * KS / NCH : 1, CPR = CM_THREADS / CHK, CPT = (S::halo + CPR - 1) / CPR;
    static_assert(!UP || (CHK == 4 && 2 * CPR == CM_UP_ROWS), "UP: two input rows a thread");
    [[maybe_unused]] const int ck = (tid >> 3) % CHK, cp0 = (tid >> 3) / CHK * 8 + (tid & 7);
    [[maybe_unused]] int pro_n0 = -1, pro_n1 = -1; // the samples whose (mean, s, b) prosh's halves hold
    // Halo position hp of the tile at (o1, o2): its offset in a sample of
    // x (0 outside the image), and whether it is inside.
    auto halo_at = [&](int hp, int o1, int o2, int *off) {
        const int i1 = o1 - 1 + hp / S::h2, i2 = o2 - 1 + hp % S::h2;
        const bool in = (unsigned)i1 < (unsigned)g.sp[1] && (unsigned)i2 < (unsigned)g.sp[2];
        *off = in ? i1 * g.xs[1] + i2 * g.xs[2] : 0;
        return in;
    };
    auto issue = [&](int tile, T *xsh, int buf) {
        int o0, o1, o2, n, off;
        tile_origin<false>(g, tile, &o0, &o1, &o2, &n);
        const T *xb = xt + (ll)n * g.xn;
        uint32_t inside = 0;
        if constexpr (KS > 0 && !XS) {
#pragma unroll
            for (int j = 0; j < CPT; j++) {
                const int hp = cp0 + j * CPR;
                if (hp >= S::halo)
                    break;
                const bool in = halo_at(hp, o1, o2, &off);
                inside |= (uint32_t)in << j;
#pragma unroll
                for (int h = 0; h < NCH; h++) {
                    const int c8 = ck + h * CHK;
                    cp_async16(xsh + (c8 * S::halo + hp) * 8, xb + (in ? off + c8 * 8 : 0), in);
                }
            }
        } else {
#pragma unroll
            for (int j = 0; j < HPT; j++) {
                const int hp = tid + j * CM_THREADS;
                if (hp >= S::halo)
                    break;
                const bool in = halo_at(hp, o1, o2, &off);
                inside |= (uint32_t)in << j;
                const T *src = xb + off;
                for (int ch = 0; ch < chunks; ch++)
                    cp_async16(xsh + (ch * S::halo + hp) * 8, src + (in ? ch * 8 : 0), in);
            }
        }
        if constexpr (UP) {
            // The upsampling's input under the halo, and its normalisation.
            T *low = xsh + HU * S::halo * 8;
            const int l1 = o1 / 2 - 1, l2 = o2 / 2 - 1;
            const T *ub = (const T *)g.ux + (ll)n * g.un;
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const int lr = cp0 + j * CPR, i1 = l1 + lr / CM_UP_W, i2 = l2 + lr % CM_UP_W;
                const bool in = lr < CM_UP_R * CM_UP_W && (unsigned)i1 < (unsigned)g.usp[0] &&
                                (unsigned)i2 < (unsigned)g.usp[1];
#pragma unroll
                for (int c8 = ck; c8 < UCH; c8 += 4)
                    cp_async16(low + (c8 * CM_UP_ROWS + lr) * 8,
                               ub + (in ? i1 * g.us[0] + i2 * g.us[1] + c8 * 8 : 0), in);
            }
            // (Read by every thread, before the barrier that follows the
            // landing: copied here, not by cp.async, which the copying
            // thread alone waits for, so that the barriers between this
            // issue and the tile's turn publish it.)
            if (g.up_pro && tid < UP)
                *(float4 *)(low + UCH * CM_UP_ROWS * 8 + tid * 8) = g.uab[(ll)n * UP + tid];
        }
        // (A warpgroup's tiles follow each other within a sample, mostly:
        // staged anew, every tile waited for the loads.)
        if constexpr (PRO)
            if ((buf ? pro_n1 : pro_n0) != n) {
                pro_stage<T>(ab, n, C, g.pro_c, prosh + buf * 3 * (C / 2), tid);
                (buf ? pro_n1 : pro_n0) = n;
            }
        return inside;
    };
    // XS: starts copying tile's halo into ring slot `slot` (zeros outside
    // the image); 16-bit inputs, which cp.async cannot take element by
    // element, are converted as they are read.
    auto issue_xs = [&](int tile, int slot) {
        int o0, o1, o2, n, off;
        tile_origin<false>(g, tile, &o0, &o1, &o2, &n);
        float *r = ring + slot * ring_slot;
#pragma unroll
        for (int j = 0; j < HPT; j++) {
            const int hp = tid + j * CM_THREADS;
            if (hp >= S::halo)
                break;
            const bool in = halo_at(hp, o1, o2, &off);
            const ll at = (ll)n * g.xn + off;
            if (g.xt == SEGRT_DTYPE_FLOAT32) {
                const float *src = (const float *)x + (in ? at : 0);
                for (int c = 0; c < g.xcn; c++, src += in ? g.xc : 0)
                    cp_async4(r + c * S::halo + hp, src, in);
            } else {
                for (int c = 0; c < g.xcn; c++)
                    r[c * S::halo + hp] = in ? ld_f32(x, at + (ll)c * g.xc, g.xt) : 0.0f;
            }
        }
    };
    // XS: ring slot `slot`, landed, rounded into chunk 0 of xsh.
    auto round_xs = [&](int slot, T *xsh) {
        const float *r = ring + slot * ring_slot;
#pragma unroll
        for (int j = 0; j < HPT; j++) {
            const int hp = tid + j * CM_THREADS;
            if (hp >= S::halo)
                break;
            T2 v[4];
#pragma unroll
            for (int e = 0; e < 4; e++)
                v[e] = pro_pair<T>::of(2 * e < g.xcn ? r[2 * e * S::halo + hp] : 0.0f,
                                       2 * e + 1 < g.xcn ? r[(2 * e + 1) * S::halo + hp] : 0.0f);
            uint4 out;
            bits16(&out, v);
            *(uint4 *)(xsh + hp * 8) = out;
        }
    };
    // PRO: this thread's landed positions of the tile, normalised in place.
    [[maybe_unused]] const T2 alpha2 = pro_pair<T>::of(g.pro_alpha, g.pro_alpha);
    // (PRO is instantiated with KS > 0 only: NCH chunks a thread, one at a time.)
    auto normalise_chunk = [&](T *xsh, uint32_t inside, int buf, int c8) {
        const T2 *m = prosh + buf * 3 * (C / 2) + c8 * 4, *sc = m + C / 2, *b = m + C;
        // (16-byte moves between 16-bit pairs and uint4 through bits16:
        // through a pointer cast, a T2 written into a uint4 is another
        // type's object, which the compiler may take as not written.)
        // (Loaded into uint4s first: copied straight from shared memory,
        // the three became 48 byte loads, ncu.)
        const uint4 mu = *(const uint4 *)m, su = *(const uint4 *)sc, bu = *(const uint4 *)b;
        T2 mv[4], sv[4], bv[4];
        bits16(mv, mu);
        bits16(sv, su);
        bits16(bv, bu);
        // Four positions' loads in flight before their stores.
        constexpr int G = 4;
#pragma unroll
        for (int j0 = 0; j0 < CPT; j0 += G) {
            uint4 v[G];
#pragma unroll
            for (int j = j0; j < j0 + G && j < CPT; j++)
                if (cp0 + j * CPR < S::halo && (inside >> j & 1))
                    v[j - j0] = *(const uint4 *)(xsh + (c8 * S::halo + cp0 + j * CPR) * 8);
#pragma unroll
            for (int j = j0; j < j0 + G && j < CPT; j++) {
                if (cp0 + j * CPR >= S::halo || !(inside >> j & 1))
                    continue;
                T2 e2[4];
                bits16(e2, v[j - j0]);
#pragma unroll
                for (int e = 0; e < 4; e++)
                    e2[e] = pro_apply<T>(e2[e], mv[e], sv[e], bv[e], alpha2, g.pro_act);
                uint4 out;
                bits16(&out, e2);
                *(uint4 *)(xsh + (c8 * S::halo + cp0 + j * CPR) * 8) = out;
            }
        }
    };
    auto normalise = [&](T *xsh, uint32_t inside, int buf) {
#pragma unroll
        for (int h = 0; h < NCH; h++)
            if ((ck + h * CHK) * 8 < g.pro_c) // (the rest taken as they are)
                normalise_chunk(xsh, inside, buf, ck + h * CHK);
    };
    // UP: this thread's two landed rows of the upsampling's input (a
    // chunk of them), normalised in place (rows outside the input too:
    // their results fall outside the image, where zeros are written
    // instead).
    auto normalise_up_chunk = [&](T *low, int c8) {
        const float4 *q = (const float4 *)(low + UCH * CM_UP_ROWS * 8) + c8 * 8;
        uint4 v[2];
        T2 e2[2][4];
#pragma unroll
        for (int j = 0; j < 2; j++) {
            v[j] = *(const uint4 *)(low + (c8 * CM_UP_ROWS + cp0 + j * CPR) * 8);
            bits16(e2[j], v[j]);
        }
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float4 qa = q[2 * e], qb = q[2 * e + 1];
#pragma unroll
            for (int j = 0; j < 2; j++) {
                float2 f = pro_pair<T>::to(e2[j][e]);
                f.x = act_apply(((f.x - qa.x) - qa.y) * qa.z + qa.w, g.up_pro_act, g.up_pro_alpha);
                f.y = act_apply(((f.y - qb.x) - qb.y) * qb.z + qb.w, g.up_pro_act, g.up_pro_alpha);
                e2[j][e] = pro_pair<T>::of(f.x, f.y);
            }
        }
#pragma unroll
        for (int j = 0; j < 2; j++) {
            bits16(&v[j], e2[j]);
            *(uint4 *)(low + (c8 * CM_UP_ROWS + cp0 + j * CPR) * 8) = v[j];
        }
    };
    auto normalise_up = [&](T *xsh) {
#pragma unroll
        for (int c8 = ck; c8 < UCH; c8 += 4)
            normalise_up_chunk(xsh + HU * S::halo * 8, c8);
    };
    // Descriptors at tap (0, 0), slice 0, patch 0 of halo buffer 0, and of
    // the weights at tap 0, slice 0: along K the next chunk, along M (N)
    // the next 8 rows (a halo row; 8 output channels).
    const uint64_t da0 = wg_desc(xsh0, S::halo * 16, S::h2 * 16), db0 = wg_desc(wsh, K * 16, 128);
    // UP: the upsampling's input rows in halo buffer 0 (chunks outermost,
    // 8 rows a core matrix) and its weights at phase 0, slice 0.
    [[maybe_unused]] const uint64_t dl0 = wg_desc(xsh0 + HU * S::halo * 8, CM_UP_ROWS * 16, 128),
                                    dbu0 = wg_desc(wsh_up, KU * 16, 128);
    // UP: the tile's halo channels 32-63 from the upsampling's input (rows
    // normalised, behind the barrier that follows).
    auto up_halo = [&](T *xsh, int buf, int tile) {
        const uint64_t dl = dl0 + (uint64_t)(buf * S::halo * C / 8);
        uint32_t pk[2][2][KU / 8][2]; // [kh][kw][n8 block][row half]: two channels rounded
#pragma unroll
        for (int f1 = 0; f1 < 2; f1++) {
            // A phase row at a time: two phases' accumulators, as many as the layer's own.
            float au[2][KU / 8][4] = {};
            wg_pin_all<KU / 8>(au);
            wg_fence();
#pragma unroll
            for (int f2 = 0; f2 < 2; f2++)
#pragma unroll
                for (int sl = 0; sl < UCH / 2; sl++)
                    wgmma_k16<XT, KU / 8>(au[f2], dl + (uint64_t)(2 * sl * CM_UP_ROWS),
                                          dbu0 + (uint64_t)(((2 * f1 + f2) * UCH + 2 * sl) * KU));
            wg_commit();
            wg_wait0();
            wg_pin_all<KU / 8>(au);
#pragma unroll
            for (int f2 = 0; f2 < 2; f2++)
#pragma unroll
                for (int nt = 0; nt < KU / 8; nt++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const T2 v = pro_pair<T>::of(act_apply(au[f2][nt][2 * h] + ubz[nt][0], g.up_act, g.up_alpha),
                                                     act_apply(au[f2][nt][2 * h + 1] + ubz[nt][1], g.up_act,
                                                               g.up_alpha));
                        memcpy(&pk[f1][f2][nt][h], &v, 4);
                    }
        }
        wg_sync(wg); // every warp's products have read the input rows
        int o0, o1, o2, n;
        tile_origin<false>(g, tile, &o0, &o1, &o2, &n);
        const int row0 = (tid >> 5) * 16 + ((tid & 31) >> 2);
#pragma unroll
        for (int f1 = 0; f1 < 2; f1++)
#pragma unroll
            for (int f2 = 0; f2 < 2; f2++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    // Input row r (6 x 10 from the halo's origin, less one)
                    // lands at halo position (2 r1 + kh - 1, 2 r2 + kw - 1).
                    const int r = row0 + 8 * h, a1 = 2 * (r / CM_UP_W) + f1 - 1, a2 = 2 * (r % CM_UP_W) + f2 - 1;
                    if (r >= CM_UP_R * CM_UP_W || a1 < 0 || a1 >= S::h1 || a2 < 0 || a2 >= S::h2)
                        continue;
                    const bool in = (unsigned)(o1 - 1 + a1) < (unsigned)g.sp[1] &&
                                    (unsigned)(o2 - 1 + a2) < (unsigned)g.sp[2];
                    T *d = xsh + (HU * S::halo + a1 * S::h2 + a2) * 8 + 2 * t4;
#pragma unroll
                    for (int nt = 0; nt < KU / 8; nt++)
                        *(uint32_t *)(d + nt * S::halo * 8) = in ? pk[f1][f2][nt][h] : 0u;
                }
        wg_fence_smem(); // the upsampled channels, to the async proxy
        wg_sync(wg);
    };
    const int first = blockIdx.x * wgs + wg, stride = gridDim.x * wgs;
    uint32_t inside_next = 0;
    if constexpr (XS) {
        for (int k = 0; k < XR - 1; k++) {
            if (first + k * stride < g.ntiles)
                issue_xs(first + k * stride, k);
            cp_async_commit();
        }
    } else {
        if (first < g.ntiles)
            inside_next = issue(first, xsh0, 0);
        cp_async_commit();
    }
    __syncthreads(); // the weights (and with PRO the first tile's (mean, s, b); later
                     // ones: the barriers of the tile before)
    for (int tile = first, it = 0; tile < g.ntiles; tile += stride, it++) {
        T *xsh = xsh0 + (it & 1) * S::halo * C;
        // XS: the tile XR - 1 ahead starts (into the slot this thread
        // rounded last tile), then this tile's slot, landed, is rounded.
        if constexpr (XS) {
            if (tile + (XR - 1) * stride < g.ntiles)
                issue_xs(tile + (XR - 1) * stride, (it + XR - 1) % XR);
            cp_async_commit();
            cp_async_wait<XR - 1>();
            round_xs(it % XR, xsh);
        }
        [[maybe_unused]] const uint32_t inside = inside_next;
        // The next tile's loads go to the other buffer, free since the tile
        // before's epilogue ended. g.late: once this tile's products are
        // issued, so that their address arithmetic and copies run while
        // the products do (ncu: a fifth of the warps' time went to waiting
        // for the products, another to issuing the loads before them);
        // they then have the epilogue's time to land, not a whole tile's.
        auto issue_next = [&] {
            if (tile + stride < g.ntiles)
                inside_next = issue(tile + stride, xsh0 + ((it + 1) & 1) * S::halo * C, (it + 1) & 1);
            cp_async_commit();
        };
        if constexpr (!XS) {
            if (g.late) {
                cp_async_wait0();
            } else {
                issue_next();
                cp_async_wait1();
            }
        }
        if constexpr (PRO)
            normalise(xsh, inside, it & 1); // this thread's own copies: no barrier before
        if constexpr (UP)
            if (g.up_pro)
                normalise_up(xsh);
        wg_fence_smem(); // this thread's halo to the async proxy
        wg_sync(wg);
        if constexpr (UP)
            up_halo(xsh, it & 1, tile);
        float acc[2][NT][4] = {};
        wg_pin_all<NT>(acc);
        wg_fence();
        // Descriptor start addresses count 16 bytes.
        const uint64_t da = da0 + (uint64_t)((it & 1) * S::halo * C / 8);
#pragma unroll
        for (int tap = 0; tap < S::taps; tap++) {
            const int k1 = tap / 3, k2 = tap % 3;
#pragma unroll
            for (int ks = 0; ks < (KS ? KS : 1); ks++)
                for (int kl = 0; kl < (KS ? 1 : ksteps); kl++) {
                    const int sl = KS ? ks : kl;
                    const uint64_t db = db0 + (uint64_t)((tap * chunks + 2 * sl) * K);
#pragma unroll
                    for (int mt = 0; mt < 2; mt++)
                        wgmma_k16<XT, NT>(acc[mt], da + (uint64_t)(2 * sl * S::halo + k1 * S::h2 + k2 + 8 * mt), db);
                }
        }
        wg_commit();
        if constexpr (!XS)
            if (g.late)
                issue_next();
        wg_wait0();
        wg_pin_all<NT>(acc);
        wg_sync(wg); // every warp's products are done: the halo buffer is free
        // (UP: the statistics' sums after the staging tile, see above.)
        tile_epilogue<XT, NT, false, EPI, true>(g, acc, bz, tile, xsh, osh_own,
                                                UP ? (float *)(xsh + CM_TP * (K + 8)) : ssh, tid,
                                                [wg] { wg_sync(wg); }, y, z, bias, part);
    }
}

static bool cm_float(segrt_dtype t)
{
    return t == SEGRT_DTYPE_FLOAT32 || t == SEGRT_DTYPE_FLOAT16 || t == SEGRT_DTYPE_BFLOAT16;
}

// A tile's output positions along D, H, W (cm_shape's, at run time).
static void cm_tile_shape(bool d3, int t[3])
{
    t[0] = d3 ? cm_shape<true>::t0 : cm_shape<false>::t0;
    t[1] = d3 ? cm_shape<true>::t1 : cm_shape<false>::t1;
    t[2] = d3 ? cm_shape<true>::t2 : cm_shape<false>::t2;
}

static bool cm_act_slope(sgk_act act, float alpha)
{
    return act == SGK_ACT_NONE || act == SGK_ACT_RELU || (act == SGK_ACT_LEAKY_RELU && alpha >= 0.0f && alpha <= 1.0f);
}

// p->up: the upsampling's input u and what the kernel takes (see
// sgk_conv_mma_up), given the rest of g planned.
static bool cm_plan_up(const sgk_conv_mma_params *p, const sgk_view *x, const sgk_view *u, cmgeom *g)
{
    if (!g->wg || !g->pro || !g->stats || g->stage_own || p->C != 64 || p->K != 32 || g->pro_c != 32 ||
        (p->up_c != 32 && p->up_c != 64) || !u || u->rank != 4 || u->dtype != x->dtype ||
        u->dims[0] != x->dims[0] || u->dims[1] != p->up_c || u->dims[2] * 2 != x->dims[2] || u->dims[3] * 2 != x->dims[3] ||
        !vec16_positions(u) || !sample_offsets_fit(u) || !cm_act_slope(p->up_act, p->up_alpha) ||
        (p->up_pro && !cm_act_slope(p->up_pro_act, p->up_pro_alpha)))
        return false;
    g->up = true;
    g->up_c = p->up_c;
    g->un = u->strides[0];
    for (int a = 0; a < 2; a++) {
        g->us[a] = (int)u->strides[2 + a];
        g->usp[a] = (int)u->dims[2 + a];
    }
    g->up_act = p->up_act;
    g->up_alpha = p->up_act == SGK_ACT_LEAKY_RELU ? p->up_alpha : 0.0f;
    g->up_pro = p->up_pro;
    g->up_pro_act = p->up_pro_act;
    g->up_pro_alpha = p->up_pro_act == SGK_ACT_LEAKY_RELU ? p->up_pro_alpha : 0.0f;
    return true;
}

static bool cm_plan(const sgk_conv_mma_params *p, const sgk_view *y, const sgk_view *x, const sgk_view *z,
                    const sgk_view *u, cmgeom *g, size_t *smem)
{
    memset(g, 0, sizeof *g);
    int nsp = p->n_spatial;
    // The products' 16-bit dtype: x's, or with small_input y's.
    const segrt_dtype et = p->small_input ? y->dtype : x->dtype;
    if (p->small_input && (!p->wgmma || nsp != 2 || p->C != 16 || p->x_channels < 1 || p->x_channels > 8 ||
                           p->prologue || !cm_float(x->dtype)))
        return false;
    if ((nsp != 2 && nsp != 3) || x->rank != nsp + 2 || y->rank != nsp + 2 ||
        (et != SEGRT_DTYPE_FLOAT16 && et != SEGRT_DTYPE_BFLOAT16) || !cm_float(y->dtype) ||
        p->C < 16 || p->C % 16 != 0 || (p->K != 8 && p->K != 16 && p->K != 32) ||
        p->K > (nsp == 3 ? CM_MAX_K_3D : CM_MAX_K) || x->dims[1] != (p->small_input ? p->x_channels : p->C) ||
        y->dims[1] != p->K || x->dims[0] != y->dims[0] || x->dims[0] < 1 || x->dims[0] > INT32_MAX ||
        (p->act != SGK_ACT_NONE && p->act != SGK_ACT_RELU && p->act != SGK_ACT_LEAKY_RELU))
        return false;
    if (z && (z->rank != y->rank || !cm_float(z->dtype)))
        return false;
    for (int i = 0; i < y->rank; i++)
        if ((i != 1 && x->dims[i] != y->dims[i]) || (z && z->dims[i] != y->dims[i]))
            return false;
    // 16-byte loads of 8 channels (small_input: element by element).
    if (!p->small_input && !vec16_positions(x))
        return false;
    // Offsets within a sample in 32 bits (see cmgeom).
    if (!sample_offsets_fit(x) || !sample_offsets_fit(y) || (z && !sample_offsets_fit(z)))
        return false;
    ll tiles = x->dims[0];
    for (int a = 0; a < 3; a++) {
        int s = a - (3 - nsp);
        ll d = s >= 0 ? x->dims[2 + s] : 1;
        if (d < 1 || d > INT32_MAX / 2)
            return false;
        g->sp[a] = (int)d;
        g->xs[a] = s >= 0 ? (int)x->strides[2 + s] : 0;
        g->ys[a] = s >= 0 ? (int)y->strides[2 + s] : 0;
        g->zs[a] = z && s >= 0 ? (int)z->strides[2 + s] : 0;
    }
    g->d3 = nsp == 3;
    int t[3];
    cm_tile_shape(g->d3, t);
    const int taps = g->d3 ? cm_shape<true>::taps : cm_shape<false>::taps;
    const int halo = g->d3 ? cm_shape<true>::halo : cm_shape<false>::halo;
    for (int a = 0; a < 3; a++) {
        g->ntile[a] = (int)ceil_div(g->sp[a], t[a]);
        g->fnt[a] = fastdiv_make((uint32_t)g->ntile[a]);
        tiles *= g->ntile[a];
    }
    if (tiles > INT32_MAX)
        return false;
    g->ntiles = (int)tiles;
    g->tps = g->ntile[0] * g->ntile[1] * g->ntile[2];
    g->C = p->C;
    g->K = p->K;
    // Staged stores need whole 16-byte positions of the products' dtype in y.
    g->staged = !z && y->dtype == et && y->strides[1] == 1 && (!y->data || aligned16(y->data));
    for (int i = 0; i < y->rank; i++)
        if (i != 1 && y->strides[i] % 8 != 0)
            g->staged = false;
    // The statistics are of the accumulators: no activation. (Also
    // staged: small_input, whose kernel is instantiated only so.)
    if ((p->stats || p->small_input) && !g->staged)
        return false;
    if (p->stats && p->act != SGK_ACT_NONE)
        return false;
    g->stats = p->stats;
    // The pool: from the staged tile, beside the statistics, in 2-D.
    if (p->pool && (!p->stats || nsp != 2))
        return false;
    g->wg = p->wgmma && !g->d3;
    g->late = g->wg && p->issue_late;
    // The normalising prologue: conv_wgmma, C 16, 32 or 64 (compile-time
    // chunks), staged results, and an activation max(v, alpha v) is.
    if (p->prologue && (!g->wg || !g->staged || (p->C != 16 && p->C != 32 && p->C != 64) ||
                        (p->pro_act != SGK_ACT_NONE && p->pro_act != SGK_ACT_RELU &&
                         p->pro_act != SGK_ACT_LEAKY_RELU) ||
                        (p->pro_act == SGK_ACT_LEAKY_RELU && !(p->pro_alpha >= 0.0f && p->pro_alpha <= 1.0f))))
        return false;
    g->pro = p->prologue;
    g->pro_c = p->pro_c > 0 ? p->pro_c : p->C;
    if (g->pro && (g->pro_c % 8 != 0 || g->pro_c > p->C))
        return false;
    g->pro_act = p->pro_act;
    g->pro_alpha = p->pro_act == SGK_ACT_LEAKY_RELU ? p->pro_alpha : 0.0f;
    const size_t stage = (size_t)CM_TP * (g->K + 8);
    const size_t ssh_bytes = 4 * (size_t)cm_ssh_floats(g->K);
    // Shared-memory rows: padded for ldmatrix, unpadded for wgmma.
    const size_t ld = g->wg ? (size_t)p->C : (size_t)cm_ld(p->C);
    // (small_input: the halo buffers' channels 8-15 stay zero, so the
    // staging tile never goes there.)
    g->stage_own = g->staged && (stage > (size_t)halo * ld || p->small_input);
    // (UP: the statistics' sums after the staging tile, in the halo buffer.)
    if (p->up && (!cm_plan_up(p, x, u, g) || stage + ssh_bytes / 2 > (size_t)halo * ld))
        return false;
    g->xsmall = p->small_input;
    g->xcn = p->x_channels;
    g->xc = p->small_input ? (int)x->strides[1] : 0;
    g->xt = x->dtype;
    const size_t wbytes = 2 * (size_t)taps * g->K * ld + (g->up ? 2 * 4 * 32 * (size_t)g->up_c : 0);
    size_t group = 2 * (2 * (size_t)halo * ld + (g->stage_own ? stage : 0)) +
                   (g->pro ? 2 * 3 * (size_t)p->C * 2 : 0); // two tiles' (mean, s, b), 16-bit
    // (Whether a layer runs here is decided at one tile group without the
    // statistics' sums, as before conv_wgmma took several groups.)
    if (wbytes + group > CM_SMEM_MAX)
        return false;
    size_t need = wbytes + group;
    if (g->wg) {
        group += p->stats && !g->up ? ssh_bytes : 0;
        group += p->small_input ? 4 * (size_t)CM_XS_RING * (size_t)p->x_channels * (size_t)halo : 0;
        group = (group + 127) / 128 * 128;
        size_t n = (CM_WG_SMEM_MAX - wbytes) / group;
        const size_t cap = (size_t)cm_wg_cap(p->C);
        const size_t most = p->wg_groups > 0 && (size_t)p->wg_groups < cap ? (size_t)p->wg_groups : cap;
        g->wgs = n < 1 ? 1 : n > most ? (int)most : (int)n;
        g->wg_w_bytes = (int)((wbytes + 127) / 128 * 128);
        g->wg_bytes = (int)group;
        need = (size_t)g->wg_w_bytes + (size_t)g->wgs * group;
    }
    g->xn = x->strides[0];
    g->yn = y->strides[0];
    g->yc = (int)y->strides[1];
    g->yt = y->dtype;
    g->zn = z ? z->strides[0] : 0;
    g->zc = z ? (int)z->strides[1] : 0;
    g->zt = z ? z->dtype : SEGRT_DTYPE_FLOAT32;
    g->act = p->act;
    g->alpha = p->act_alpha;
    g->ypair = pair_positions(y);
    g->zpair = z && z->dtype == x->dtype && pair_positions(z);
    *smem = need;
    return true;
}

// The kernel's arguments past the launch configuration.
struct cmargs {
    const sgk_view *y, *x, *z;
    const float *w, *bias;
    float2 *part;
    const float4 *ab;
};

// Past 48 KB a kernel must opt in (a function attribute, not a stream
// operation: allowed while a CUDA graph is captured).
template <typename F> static bool smem_opt_in(F kernel, int bytes = CM_SMEM_MAX)
{
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) == cudaSuccess;
}

template <int XT, int NT, int KS, int EPI, int UP>
static segrt_status launch_wg_up(cudaStream_t stream, unsigned grid, size_t smem, const cmargs &a, const cmgeom &g)
{
    if (!smem_opt_in(conv_wgmma<XT, NT, KS, EPI, true, false, UP>, CM_WG_SMEM_MAX))
        return launched("conv_wgmma (shared memory)");
    conv_wgmma<XT, NT, KS, EPI, true, false, UP><<<grid, CM_THREADS * g.wgs, smem, stream>>>(
        a.x->data, a.y->data, a.w, a.bias, a.z ? a.z->data : NULL, a.part, a.ab, g);
    return launched("conv_wgmma");
}

template <int XT, int NT, int KS, int EPI>
static segrt_status launch_wg(cudaStream_t stream, unsigned grid, size_t smem, const cmargs &a, const cmgeom &g)
{
    const void *z = a.z ? a.z->data : NULL;
    if constexpr (KS == 4 && NT == 4 && EPI == EPI_STATS)
        if (g.up)
            return g.up_c == 64 ? launch_wg_up<XT, NT, KS, EPI, 64>(stream, grid, smem, a, g)
                                : launch_wg_up<XT, NT, KS, EPI, 32>(stream, grid, smem, a, g);
    if (g.up)
        return sg_error(SEGRT_ERROR_INTERNAL, "conv_wgmma: no folded upsampling for this layer");
    if constexpr (KS > 0 && EPI != EPI_DIRECT)
        if (g.pro) {
            if (!smem_opt_in(conv_wgmma<XT, NT, KS, EPI, true, false>, CM_WG_SMEM_MAX))
                return launched("conv_wgmma (shared memory)");
            conv_wgmma<XT, NT, KS, EPI, true, false><<<grid, CM_THREADS * g.wgs, smem, stream>>>(
                a.x->data, a.y->data, a.w, a.bias, z, a.part, a.ab, g);
            return launched("conv_wgmma");
        }
    if constexpr (KS == 1 && EPI != EPI_DIRECT)
        if (g.xsmall) {
            if (!smem_opt_in(conv_wgmma<XT, NT, KS, EPI, false, true>, CM_WG_SMEM_MAX))
                return launched("conv_wgmma (shared memory)");
            conv_wgmma<XT, NT, KS, EPI, false, true><<<grid, CM_THREADS * g.wgs, smem, stream>>>(
                a.x->data, a.y->data, a.w, a.bias, z, a.part, NULL, g);
            return launched("conv_wgmma");
        }
    if (g.pro || g.xsmall)
        return sg_error(SEGRT_ERROR_INTERNAL, "conv_wgmma: no %s for this layer",
                        g.pro ? "normalising prologue" : "element-wise input");
    if (!smem_opt_in(conv_wgmma<XT, NT, KS, EPI, false, false>, CM_WG_SMEM_MAX))
        return launched("conv_wgmma (shared memory)");
    conv_wgmma<XT, NT, KS, EPI, false, false><<<grid, CM_THREADS * g.wgs, smem, stream>>>(
        a.x->data, a.y->data, a.w, a.bias, z, a.part, NULL, g);
    return launched("conv_wgmma");
}

template <int XT, int NT, bool D3, int KS, int EPI>
static segrt_status launch(cudaStream_t stream, unsigned grid, size_t smem, const cmargs &a, const cmgeom &g)
{
    if constexpr (!D3)
        if (g.wg)
            return launch_wg<XT, NT, KS, EPI>(stream, grid, smem, a, g);
    if (!smem_opt_in(conv_mma<XT, NT, D3, KS, EPI>))
        return launched("conv_mma (shared memory)");
    conv_mma<XT, NT, D3, KS, EPI><<<grid, CM_THREADS, smem, stream>>>(a.x->data, a.y->data, a.w, a.bias,
                                                                        a.z ? a.z->data : NULL, a.part, g);
    return launched("conv_mma");
}

template <int XT, int NT, bool D3, int EPI>
static segrt_status launch_ks(cudaStream_t stream, unsigned grid, size_t smem, const cmargs &a, const cmgeom &g)
{
    switch (g.C) {
    case 16: return launch<XT, NT, D3, 1, EPI>(stream, grid, smem, a, g);
    case 32: return launch<XT, NT, D3, 2, EPI>(stream, grid, smem, a, g);
    case 64:
        // (A 3-D layer of 64 input channels does not fit in shared memory.)
        if constexpr (!D3)
            return launch<XT, NT, D3, 4, EPI>(stream, grid, smem, a, g);
        [[fallthrough]];
    default: return launch<XT, NT, D3, 0, EPI>(stream, grid, smem, a, g);
    }
}

template <int XT, int NT>
static segrt_status launch_shape(cudaStream_t stream, unsigned grid, size_t smem, const cmargs &a, const cmgeom &g)
{
    if (g.d3) {
        // (cm_plan keeps 3-D layers at CM_MAX_K_3D channels.)
        if constexpr (NT * 8 <= CM_MAX_K_3D) {
            if (g.stats)
                return launch_ks<XT, NT, true, EPI_STATS>(stream, grid, smem, a, g);
            return g.staged ? launch_ks<XT, NT, true, EPI_STAGED>(stream, grid, smem, a, g)
                            : launch_ks<XT, NT, true, EPI_DIRECT>(stream, grid, smem, a, g);
        }
        return sg_error(SEGRT_ERROR_INTERNAL, "3x3x3 tensor-core convolution: %d output channels", g.K);
    }
    if (g.stats)
        return launch_ks<XT, NT, false, EPI_STATS>(stream, grid, smem, a, g);
    return g.staged ? launch_ks<XT, NT, false, EPI_STAGED>(stream, grid, smem, a, g)
                    : launch_ks<XT, NT, false, EPI_DIRECT>(stream, grid, smem, a, g);
}

template <int XT>
static segrt_status launch_k(cudaStream_t stream, unsigned grid, size_t smem, const cmargs &a, const cmgeom &g)
{
    switch (g.K) {
    case 8: return launch_shape<XT, 1>(stream, grid, smem, a, g);
    case 16: return launch_shape<XT, 2>(stream, grid, smem, a, g);
    default: return launch_shape<XT, 4>(stream, grid, smem, a, g);
    }
}

extern "C" bool sgk_conv_mma_fits(const sgk_conv_mma_params *p, const sgk_view *y, const sgk_view *x,
                                  const sgk_view *z, const sgk_view *up_x)
{
    cmgeom g;
    size_t smem;
    return cm_plan(p, y, x, z, up_x, &g, &smem);
}

extern "C" void sgk_conv_mma_stats_grid(const sgk_conv_mma_params *p, const sgk_view *y, sgk_tile_grid *grid)
{
    int t[3];
    cm_tile_shape(p->n_spatial == 3, t);
    for (int a = 0; a < 3; a++) {
        const int s = a - (3 - p->n_spatial);
        grid->dims[a] = s >= 0 ? (int32_t)y->dims[2 + s] : 1;
        grid->tile[a] = t[a];
    }
}

extern "C" segrt_status sgk_conv_mma(cudaStream_t stream, const sgk_conv_mma_params *p, const sgk_view *y,
                                     const sgk_view *x, const float *w, const float *bias, const sgk_view *z,
                                     float *stats, const float *ab, const sgk_view *pooled,
                                     const sgk_conv_mma_up *up)
{
    cmgeom g;
    size_t smem;
    if (!cm_plan(p, y, x, z, p->up && up ? &up->x : NULL, &g, &smem))
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "3x3 tensor-core convolution: layer not supported by the kernel");
    if (p->up) {
        if (!aligned16(up->x.data) || ((uintptr_t)up->w & 15) != 0 || (p->up_pro && (!up->ab || !aligned16(up->ab))))
            return sg_error(SEGRT_ERROR_INTERNAL, "3x3 tensor-core convolution: the upsampling's input, weights "
                                                  "or normalisation are not 16-byte aligned");
        g.ux = up->x.data;
        g.uw = up->w;
        g.ub = up->bias;
        g.uab = (const float4 *)up->ab;
    }
    if (p->pool) {
        const sgk_view *q = pooled;
        bool ok = q && q->rank == 4 && q->dtype == y->dtype && q->dims[0] == y->dims[0] && q->dims[1] == p->K &&
                  q->dims[2] == y->dims[2] / 2 && q->dims[3] == y->dims[3] / 2 && q->strides[1] == 1 &&
                  aligned16(q->data) && sample_offsets_fit(q);
        for (int i = 0; ok && i < 4; i++)
            ok = i == 1 || q->strides[i] % 8 == 0;
        if (!ok)
            return sg_error(SEGRT_ERROR_INTERNAL, "3x3 tensor-core convolution: the pool's tensor does not fit");
        g.pool = q->data;
        g.pn = q->strides[0];
        g.ps[0] = (int)q->strides[2];
        g.ps[1] = (int)q->strides[3];
        g.pool_min = p->pool_min;
    }
    if (((uintptr_t)w & 15) != 0)
        return sg_error(SEGRT_ERROR_INTERNAL, "3x3 tensor-core convolution: weights at %p, not 16-byte aligned",
                        (const void *)w);
    // Blocks an SM: as many as fit (an SM's 228 KB, 1 KB reserved a
    // block), up to CM_BLOCKS_PER_SM, or cm_wg_cap's warpgroups.
    ll per_sm = (ll)(220 * 1024) / (ll)(smem + 1024);
    const ll most = g.wg ? cm_wg_cap(g.C) / g.wgs : CM_BLOCKS_PER_SM;
    per_sm = per_sm < 1 ? 1 : per_sm > most ? most : per_sm;
    ll cap = (ll)(p->sm_count > 0 ? p->sm_count : 132) * per_sm;
    unsigned grid = (unsigned)(g.ntiles < cap ? g.ntiles : cap);
    // Few tiles: fewer warpgroups a block, so that every block has work.
    if (g.wg && ceil_div(g.ntiles, (ll)grid) < g.wgs) {
        const int per = (int)ceil_div(g.ntiles, (ll)grid);
        smem -= (size_t)(g.wgs - per) * (size_t)g.wg_bytes;
        g.wgs = per;
    }
    if (p->stats && (!stats || ((uintptr_t)stats & 7) != 0))
        return sg_error(SEGRT_ERROR_INTERNAL, "3x3 tensor-core convolution: statistics at %p", (void *)stats);
    if (p->prologue && (!ab || ((uintptr_t)ab & 15) != 0))
        return sg_error(SEGRT_ERROR_INTERNAL, "3x3 tensor-core convolution: normalisation parameters at %p",
                        (const void *)ab);
    const cmargs a = {y, x, z, w, bias, (float2 *)stats, (const float4 *)ab};
    if ((p->small_input ? y->dtype : x->dtype) == SEGRT_DTYPE_BFLOAT16)
        return launch_k<SEGRT_DTYPE_BFLOAT16>(stream, grid, smem, a, g);
    return launch_k<SEGRT_DTYPE_FLOAT16>(stream, grid, smem, a, g);
}
