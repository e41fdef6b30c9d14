// The warpgroup (wgmma) form of the 3x3 stride-1 convolution (see
// k_conv_mma.h; 2-D layers on compute capability 9.0, the code built for
// sm_90a): conv_wgmma, its helpers and its launcher, instantiated for
// k_conv_mma_instances.cuh's list. The tiles, epilogues and results are
// the mma.sync kernel's (k_conv_mma_sync.cu).
#include "backend/cuda/k_conv_mma_common.cuh"
#include "backend/cuda/k_conv_mma_instances.cuh"

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
#if SG_WGMMA
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
    // R2UR move.)
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
    // products.)
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
    // shared-memory load waited for the store before it). Eight
    // consecutive threads take eight
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
    // barrier before the products.)
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
        // the products do (issued before the products, the loads' issue
        // and the wait for the products ran one after the other);
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
#else
    __trap(); // sm_90a only; never launched elsewhere (cuda_kernel_runs)
#endif
}

template <int XT, int NT, int KS, int EPI, int UP>
static segrt_status cm_launch_wg_up(cudaStream_t stream, unsigned grid, size_t smem, const cmargs &a, const cmgeom &g)
{
    if (!smem_opt_in(conv_wgmma<XT, NT, KS, EPI, true, false, UP>, CM_WG_SMEM_MAX))
        return launched("conv_wgmma (shared memory)");
    conv_wgmma<XT, NT, KS, EPI, true, false, UP><<<grid, CM_THREADS * g.wgs, smem, stream>>>(
        a.x->data, a.y->data, a.w, a.bias, a.z ? a.z->data : NULL, a.part, a.ab, g);
    return launched("conv_wgmma");
}

template <int XT, int NT, int KS, int EPI>
segrt_status cm_launch_wgmma(cudaStream_t stream, unsigned grid, size_t smem, const cmargs &a, const cmgeom &g)
{
    const void *z = a.z ? a.z->data : NULL;
    if constexpr (KS == 4 && NT == 4 && EPI == EPI_STATS)
        if (g.up)
            return g.up_c == 64 ? cm_launch_wg_up<XT, NT, KS, EPI, 64>(stream, grid, smem, a, g)
                                : cm_launch_wg_up<XT, NT, KS, EPI, 32>(stream, grid, smem, a, g);
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

#define CM_WGMMA_DEFINE(XT, NT, KS, EPI)                                                                               \
    template segrt_status cm_launch_wgmma<XT, NT, KS, EPI>(cudaStream_t, unsigned, size_t, const cmargs &,            \
                                                           const cmgeom &);
CM_WGMMA_INSTANCES(CM_WGMMA_DEFINE)
