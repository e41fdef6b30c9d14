// (Over 1,000 lines on purpose: the general, tiled and phase-tiled
// variants share the weight staging, the epilogue and one launcher that
// picks the variant by the layer's shape; k_conv_small.h is the contract.)
//
// Direct Conv and ConvTranspose for few output channels (k_conv_small.h).
//
// One thread per output position accumulates all K channels in registers
// (KP of them: K rounded up to 1, 2, 4, 8 or 16, the extra weights zero;
// 16 only in the general kernel, for few input channels). The
// weights are staged once per block in shared memory, reordered to
// [tap][c][KP], so that one tap's weights for V consecutive input channels
// are a single run the thread reads with 16-byte loads; blocks loop over
// the positions (a grid of a few blocks per SM), so the staging is paid a
// few thousand times, not once per 256 positions.
//
// The transposed convolution gathers: output o along a dim takes tap k
// from input i = (o + pad - k*dil) / stride where that divides exactly.
// Which taps divide depends only on o's phase r = o mod stride, so threads
// are laid out phase-major: position o = q*stride + r with r slowest and
// q fastest. All threads of a warp then take the same taps (no divergence,
// one shared-memory broadcast per weight run), and consecutive threads
// read consecutive input positions. A forward convolution is the case
// stride-phase 1.
//
// Input channels are read V at a time where x's channels are contiguous
// and aligned (16-byte loads of 8 float16/bfloat16 or 4 float32 values, or
// 4-byte loads of 2 float16/bfloat16 values); otherwise one at a time
// through x's strides. Lower ranks run as 3-D with leading unit dims.
#include "backend/cuda/k_conv_small.h"
#include "backend/cuda/k_common.cuh"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CS_THREADS 256
#define CS_SMEM_MAX (48 * 1024)
#define CS_INDEX_MAX ((ll)1 << 30) // positions and offsets along a dim stay in int32 math
// Blocks per SM of the launch: 4 x 256 threads fit any variant (the launch
// bounds hold each to 64 registers), and so do 4 x 49 KB of shared memory
// on sm_90 (228 KB per SM).
#define CS_BLOCKS_PER_SM 4
#define CS_DEFAULT_SMS 132 // where the caller does not know the device's count

namespace {

struct csgeom {
    int K, C, taps, N;
    int k[3], st[3], dil[3], pb[3];
    int in[3], out[3];
    int P[3];         // phases per dim: the stride for a transposed convolution, else 1
    fastdiv fst[3];   // the strides, for the transposed gather's exact division
    fastdiv fq[3];    // positions per phase per dim, ceil(out / P)
    fastdiv fp[3];    // P
    uint32_t per_sample;
    ll xn, xc, xs[3]; // x strides: N, C, spatial (0 along the leading unit dims)
    ll yn, yc, ys[3];
    ll zn, zc, zs[3]; // the residual's strides (z: a view of y's dims), where there is one
    segrt_dtype ydt, zdt;
    sgk_act act;
    float alpha;
    bool transposed;
    bool yvec; // the general kernel stores a position's K channels as 16-byte vectors (no residual)
    // A one-channel forward layer of kernel 3 along the last two dims (1 or
    // 3 along the first) whose every offset within a sample fits in 32
    // bits: the general kernel's first-layer loop, with x's strides xs32.
    bool first3;
    int xs32[3];
    // x is a normalisation's input (sgk_conv_small_params.prologue): each
    // value read becomes pro_act((x - mean) * s + b) of its sample and
    // channel, the (mean, s, b) staged per sample after the bias.
    bool pro;
    sgk_act pro_act;
    float pro_alpha;
};

// The stored value: the activation, then the residual where there is one.
__device__ __forceinline__ float cs_out(float acc, const csgeom &g, const void *z, ll zi)
{
    float v = act_apply(acc, g.act, g.alpha);
    return z ? v + ld_f32(z, zi, g.zdt) : v;
}

// A position's KP results, activated, as 16-byte vectors of y's dtype at
// element yo (g.yvec: KP == K channels contiguous and every position
// 16-byte aligned): 16 output channels stored one element at a time were
// 16 store instructions a thread, for two or four vectors' worth.
template <int KP> __device__ __forceinline__ void cs_store_vec(const csgeom &g, void *y, ll yo, const float *acc)
{
    float v[KP];
#pragma unroll
    for (int k = 0; k < KP; k++)
        v[k] = act_apply(acc[k], g.act, g.alpha);
    if constexpr (KP % 8 == 0) {
        if (g.ydt == SEGRT_DTYPE_FLOAT16) {
#pragma unroll
            for (int j = 0; j < KP; j += 8)
                *(uint4 *)((__half *)y + yo + j) = vec16_pack<SEGRT_DTYPE_FLOAT16>(v + j);
            return;
        }
        if (g.ydt == SEGRT_DTYPE_BFLOAT16) {
#pragma unroll
            for (int j = 0; j < KP; j += 8)
                *(uint4 *)((__nv_bfloat16 *)y + yo + j) = vec16_pack<SEGRT_DTYPE_BFLOAT16>(v + j);
            return;
        }
    }
    if constexpr (KP % 4 == 0) {
#pragma unroll
        for (int j = 0; j < KP; j += 4)
            *(uint4 *)((float *)y + yo + j) = vec16_pack<SEGRT_DTYPE_FLOAT32>(v + j);
    }
}

// The weights, staged by the block in shared memory as ws[tap][c][KP]
// (read in ONNX's order, coalesced: Conv [K][C][taps], ConvTranspose
// [C][K][taps]; the padding channels K..KP-1 zero) and the bias as bs[KP].
// The caller synchronizes.
template <int KP>
__device__ __forceinline__ void cs_stage_weights(const csgeom &g, const float *__restrict__ w,
                                                 const float *__restrict__ bias, float *ws, float *bs)
{
    const int nk = g.taps * g.C * g.K;
    for (int j = threadIdx.x; j < nk; j += blockDim.x) {
        int tap = j % g.taps, r = j / g.taps;
        int c = g.transposed ? r / g.K : r % g.C, k = g.transposed ? r % g.K : r / g.C;
        ws[(tap * g.C + c) * KP + k] = w[j];
    }
    if (g.K < KP)
        for (int j = threadIdx.x; j < g.taps * g.C * (KP - g.K); j += blockDim.x) {
            int tc = j / (KP - g.K), k = g.K + j % (KP - g.K);
            ws[tc * KP + k] = 0.0f;
        }
    if ((int)threadIdx.x < KP)
        bs[threadIdx.x] = bias && (int)threadIdx.x < g.K ? bias[threadIdx.x] : 0.0f;
}

// Whether tap k of output position o along dim d reads the input, and at
// which position *i.
__device__ __forceinline__ bool cs_tap(const csgeom &g, int d, int o, int k, int *i)
{
    if (!g.transposed) {
        int p = o * g.st[d] + k * g.dil[d] - g.pb[d];
        *i = p;
        return p >= 0 && p < g.in[d];
    }
    int t = o + g.pb[d] - k * g.dil[d];
    if (t < 0)
        return false;
    uint32_t q = fastdiv_div((uint32_t)t, g.fst[d]);
    if ((int)(q * g.fst[d].d) != t)
        return false;
    *i = (int)q;
    return (int)q < g.in[d];
}

// V input channels from element i on (contiguous where V > 1), as float.
template <int XT, int V> __device__ __forceinline__ void cs_ldx(const void *x, ll i, float *v)
{
    if constexpr (V == 1) {
        v[0] = ldr<XT, float>(x, (segrt_dtype)XT, i);
    } else {
        constexpr int ES = XT == SEGRT_DTYPE_FLOAT32 ? 4 : 2;
        const char *p = (const char *)x + i * ES;
        if constexpr (V * ES == 16) {
            vec16_unpack<XT>(*(const uint4 *)p, v);
        } else {
            static_assert(V * ES == 4 && ES == 2, "4-byte loads are of two 16-bit values");
            uint32_t u = *(const uint32_t *)p;
            unsigned short lo = (unsigned short)(u & 0xffffu), hi = (unsigned short)(u >> 16);
            if constexpr (XT == SEGRT_DTYPE_FLOAT16) {
                v[0] = __half2float(__ushort_as_half(lo));
                v[1] = __half2float(__ushort_as_half(hi));
            } else {
                v[0] = __bfloat162float(__ushort_as_bfloat16(lo));
                v[1] = __bfloat162float(__ushort_as_bfloat16(hi));
            }
        }
    }
}

// Where a normalising prologue's (mean, s, b) start in shared memory, in
// floats past the weights (nw) and the bias (kp): 16-byte aligned; each
// is cs_pro_stride(C) floats long.
__host__ __device__ constexpr ll cs_pro_at(ll nw, int kp) { return (nw + kp + 3) / 4 * 4; }
__host__ __device__ constexpr int cs_pro_stride(int C) { return (C + 3) / 4 * 4; }

template <int XT, int KP, int V>
__global__ void __launch_bounds__(CS_THREADS, CS_BLOCKS_PER_SM)
    conv_small_kernel(const void *__restrict__ x, void *__restrict__ y, const float *__restrict__ w,
                      const float *__restrict__ bias, const void *__restrict__ z, const float4 *__restrict__ ab,
                      csgeom g)
{
    extern __shared__ float4 cs_smem[];
    float *ws = reinterpret_cast<float *>(cs_smem); // [tap][c][KP]
    const int nw = g.taps * g.C * KP;
    float *bs = ws + nw;
    // g.pro: this sample's mean, s, b, each 16-byte aligned (cs_pro_at),
    // so that four channels' load as one vector.
    const int cp = cs_pro_stride(g.C);
    float *pm = ws + cs_pro_at(nw, KP), *ps = pm + cp, *pbias = ps + cp;
    cs_stage_weights<KP>(g, w, bias, ws, bs);
    __syncthreads();

    const uint32_t step = gridDim.x * blockDim.x;
    for (int n = blockIdx.y; n < g.N; n += gridDim.y) {
        const ll xb = (ll)n * g.xn, yb = (ll)n * g.yn;
        if (g.pro) {
            __syncthreads(); // the last sample's are read
            for (int c = threadIdx.x; c < g.C; c += blockDim.x) {
                const float4 q = ab[(ll)n * g.C + c];
                pm[c] = q.x;
                ps[c] = q.z;
                pbias[c] = q.w;
            }
            __syncthreads();
        }
        for (uint32_t q = blockIdx.x * blockDim.x + threadIdx.x; q < g.per_sample; q += step) {
            // q -> (phase, qd, qh, qw), qw fastest, the phase slowest.
            uint32_t t = fastdiv_div(q, g.fq[2]);
            int qw = (int)(q - t * g.fq[2].d);
            uint32_t u = fastdiv_div(t, g.fq[1]);
            int qh = (int)(t - u * g.fq[1].d);
            t = fastdiv_div(u, g.fq[0]);
            int qd = (int)(u - t * g.fq[0].d);
            u = fastdiv_div(t, g.fp[2]);
            int rw = (int)(t - u * g.fp[2].d);
            t = fastdiv_div(u, g.fp[1]);
            int rh = (int)(u - t * g.fp[1].d);
            int rd = (int)t;
            const int o0 = qd * g.P[0] + rd, o1 = qh * g.P[1] + rh, o2 = qw * g.P[2] + rw;
            if (o0 >= g.out[0] || o1 >= g.out[1] || o2 >= g.out[2])
                continue; // the last positions of a phase that out does not divide
            float acc[KP];
#pragma unroll
            for (int k = 0; k < KP; k++)
                acc[k] = bs[k];
            if (KP == 16 && V == 1 && g.first3) {
                // An image's one-channel first layer, 3x3(x3): each dim's
                // three input offsets and their bounds found once, a
                // plane's nine taps loaded before any of their products
                // (the general loop below, 64-bit index arithmetic and a
                // load and its wait per tap, issued several instructions
                // an FMA).
                int off[3][3];
                bool ok[3][3];
                const int o[3] = {o0, o1, o2};
#pragma unroll
                for (int d = 0; d < 3; d++)
#pragma unroll
                    for (int k = 0; k < 3; k++) {
                        const int i = o[d] * g.st[d] + k * g.dil[d] - g.pb[d];
                        ok[d][k] = k < g.k[d] && (unsigned)i < (unsigned)g.in[d];
                        off[d][k] = i * g.xs32[d];
                    }
#pragma unroll
                for (int kd = 0; kd < 3; kd++) {
                    if (!ok[0][kd])
                        continue;
                    float xv[9];
#pragma unroll
                    for (int t = 0; t < 9; t++) {
                        const int i = off[0][kd] + off[1][t / 3] + off[2][t % 3];
                        xv[t] = ok[1][t / 3] && ok[2][t % 3] ? ldr<XT, float>(x, (segrt_dtype)XT, xb + i) : 0.0f;
                    }
#pragma unroll
                    for (int t = 0; t < 9; t++) {
                        float wv[KP];
                        ld_floats<KP>(ws + (kd * 9 + t) * KP, wv);
#pragma unroll
                        for (int k = 0; k < KP; k++)
                            acc[k] = fmaf(xv[t], wv[k], acc[k]);
                    }
                }
            } else {
                for (int kd = 0; kd < g.k[0]; kd++) {
                    int i0;
                    if (!cs_tap(g, 0, o0, kd, &i0))
                        continue;
                    const ll a0 = xb + i0 * g.xs[0];
                    for (int kh = 0; kh < g.k[1]; kh++) {
                        int i1;
                        if (!cs_tap(g, 1, o1, kh, &i1))
                            continue;
                        const ll a1 = a0 + i1 * g.xs[1];
                        for (int kw = 0; kw < g.k[2]; kw++) {
                            int i2;
                            if (!cs_tap(g, 2, o2, kw, &i2))
                                continue;
                            const ll a2 = a1 + i2 * g.xs[2];
                            const float *wt = ws + ((kd * g.k[1] + kh) * g.k[2] + kw) * g.C * KP;
                            // Unrolled so that several loads are in flight
                            // before the first FMA waits: one load at a time
                            // left these layers bound by latency.
#pragma unroll 4
                            for (int c = 0; c < g.C; c += V) {
                                float xv[V], wv[V * KP];
                                cs_ldx<XT, V>(x, V == 1 ? a2 + c * g.xc : a2 + c, xv);
                                if (g.pro) {
                                    if constexpr (V % 4 == 0) {
                                        // (c + j a multiple of 4: c steps by V.
                                        // One scalar load a parameter was three
                                        // of the final 1x1 layer's loads a channel.)
#pragma unroll
                                        for (int j = 0; j < V; j += 4) {
                                            const float4 m4 = *(const float4 *)(pm + c + j),
                                                         s4 = *(const float4 *)(ps + c + j),
                                                         b4 = *(const float4 *)(pbias + c + j);
                                            const float mv[4] = {m4.x, m4.y, m4.z, m4.w},
                                                        sv[4] = {s4.x, s4.y, s4.z, s4.w},
                                                        bv[4] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
                                            for (int e = 0; e < 4; e++)
                                                xv[j + e] = act_apply(fmaf(xv[j + e] - mv[e], sv[e], bv[e]),
                                                                      g.pro_act, g.pro_alpha);
                                        }
                                    } else {
#pragma unroll
                                        for (int j = 0; j < V; j++)
                                            xv[j] = act_apply(fmaf(xv[j] - pm[c + j], ps[c + j], pbias[c + j]),
                                                              g.pro_act, g.pro_alpha);
                                    }
                                }
                                ld_floats<V * KP>(wt + c * KP, wv);
#pragma unroll
                                for (int j = 0; j < V; j++)
#pragma unroll
                                    for (int k = 0; k < KP; k++)
                                        acc[k] = fmaf(xv[j], wv[j * KP + k], acc[k]);
                            }
                        }
                    }
                }
            }
            const ll yo = yb + o0 * g.ys[0] + o1 * g.ys[1] + o2 * g.ys[2];
            if (g.yvec) {
                cs_store_vec<KP>(g, y, yo, acc);
                continue;
            }
            const ll zo = (ll)n * g.zn + o0 * g.zs[0] + o1 * g.zs[1] + o2 * g.zs[2];
#pragma unroll
            for (int k = 0; k < KP; k++)
                if (k < g.K)
                    st_f32(y, yo + k * g.yc, g.ydt, cs_out(acc[k], g, z, zo + k * g.zc));
        }
    }
}

int kp_of(int K) { return K <= 1 ? 1 : K <= 2 ? 2 : K <= 4 ? 4 : K <= 8 ? 8 : 16; }

// The tiled variant: forward, stride 1, dilation 1, few input channels.
// A block computes a TD x 8 x 32 tile of output positions (x fastest, one
// thread per (h, w), TD along d each) from an input tile with its halo
// staged once in shared memory, so each input value is read from global
// memory about (TD + kd - 1) / TD times instead of once per tap: the
// last layers of a 3-D UNet (2 channels in, 2 out, 3x3x3) are memory
// bound, and the per-tap loads and index arithmetic of the general kernel
// made them several times slower than their traffic.
#define CT_W 32
#define CT_H 8

struct ctgeom {
    csgeom g;
    int tz, ty, tx;        // input tile extents: TD + k0 - 1, CT_H + k1 - 1, CT_W + k2 - 1
    int tiles_d, tiles_h, tiles_w;
    fastdiv frow, fty, fc; // tx * C (a tile row's elements), ty, C
    fastdiv ftx;           // tx
    int pos_bytes;         // x's channels of a position as one aligned load of 2 to 16 bytes, or 0
};

// Tile elements each thread loads before it stores any: independent loads
// in flight, where one at a time (a 2-byte load per lane, then a wait)
// held the staging to a fraction of the memory's bandwidth.
#define CT_LOADS 8

// Stages the input tile a whole position at a time (t.pos_bytes = PB):
// one load of the position's C contiguous channels, where the element
// loop spent a load and three divisions on each channel. unet3d_spleen's
// last layer (2 channels of float16: 4 bytes a position) spent most of its
// instructions there.
template <int XT, int PB>
__device__ __forceinline__ void ct_stage_positions(const void *x, const ctgeom &t, ll xb, int d0, int h0, int w0,
                                                   float *tile)
{
    const csgeom &g = t.g;
    constexpr int ES = XT == SEGRT_DTYPE_FLOAT32 ? 4 : 2;
    const int plane = t.ty * t.tx, vol = t.tz * plane;
    for (int base = threadIdx.x; base < vol; base += CS_THREADS * CT_LOADS) {
        uint4 v[CT_LOADS];
        int dst[CT_LOADS];
#pragma unroll
        for (int u = 0; u < CT_LOADS; u++) {
            const int e = base + u * CS_THREADS;
            v[u] = make_uint4(0, 0, 0, 0);
            dst[u] = -1;
            if (e >= vol)
                continue;
            const int row = (int)fastdiv_div((uint32_t)e, t.ftx), ix = e - row * t.tx;
            const int iz = (int)fastdiv_div((uint32_t)row, t.fty), iy = row - iz * t.ty;
            const int i0 = d0 + iz - g.pb[0], i1 = h0 + iy - g.pb[1], i2 = w0 + ix - g.pb[2];
            dst[u] = e;
            if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1] || i2 < 0 || i2 >= g.in[2])
                continue;
            const char *at = (const char *)x + (xb + (ll)i0 * g.xs[0] + (ll)i1 * g.xs[1] + (ll)i2 * g.xs[2]) * ES;
            if constexpr (PB == 2)
                v[u].x = *(const unsigned short *)at;
            else if constexpr (PB == 4)
                v[u].x = *(const uint32_t *)at;
            else if constexpr (PB == 8) {
                const uint2 q = *(const uint2 *)at;
                v[u].x = q.x;
                v[u].y = q.y;
            } else
                v[u] = *(const uint4 *)at;
        }
#pragma unroll
        for (int u = 0; u < CT_LOADS; u++)
            if (dst[u] >= 0) {
                float f[16 / ES];
                vec16_unpack<XT>(v[u], f);
#pragma unroll
                for (int c = 0; c < PB / ES; c++)
                    tile[c * vol + dst[u]] = f[c];
            }
    }
}

// CUBE3: the kernel is 3 x 3 x 3 (a 3-D UNet's), known at compile time:
// the taps unroll into loads at fixed offsets, and each input plane is
// read once per (h, w) tap for the up to three outputs along d it feeds,
// not once per output. The loop over runtime extents spent most of its
// instructions on indices and repeated loads.
template <int XT, int KP, int TD, bool CUBE3>
__global__ void __launch_bounds__(CS_THREADS)
    conv_tiled_kernel(const void *__restrict__ x, void *__restrict__ y, const float *__restrict__ w,
                      const float *__restrict__ bias, const void *__restrict__ z, ctgeom t)
{
    extern __shared__ float4 ct_smem[];
    const csgeom &g = t.g;
    float *ws = reinterpret_cast<float *>(ct_smem); // [tap][c][KP]
    const int nw = g.taps * g.C * KP;
    float *bs = ws + nw;
    float *tile = bs + KP; // [c][tz][ty][tx]
    cs_stage_weights<KP>(g, w, bias, ws, bs);

    int b = blockIdx.x;
    const int bw = b % t.tiles_w;
    b /= t.tiles_w;
    const int bh = b % t.tiles_h;
    b /= t.tiles_h;
    const int bd = b % t.tiles_d;
    const int n = b / t.tiles_d;
    const int d0 = bd * TD, h0 = bh * CT_H, w0 = bw * CT_W;
    const ll xb = (ll)n * g.xn;
    // The input tile, zero outside the input (the padding), as one index
    // space of (z, y) rows of x positions times channels, channel fastest,
    // so that consecutive threads read consecutive addresses of a
    // channels-last row.
    const int plane = t.ty * t.tx, vol = t.tz * plane, row_len = t.tx * g.C;
    const int total = t.pos_bytes ? 0 : t.tz * t.ty * row_len;
    if constexpr (XT != 0) {
        switch (t.pos_bytes) {
        case 2: ct_stage_positions<XT, 2>(x, t, xb, d0, h0, w0, tile); break;
        case 4: ct_stage_positions<XT, 4>(x, t, xb, d0, h0, w0, tile); break;
        case 8: ct_stage_positions<XT, 8>(x, t, xb, d0, h0, w0, tile); break;
        case 16: ct_stage_positions<XT, 16>(x, t, xb, d0, h0, w0, tile); break;
        default: break;
        }
    }
    for (int base = threadIdx.x; base < total; base += CS_THREADS * CT_LOADS) {
        float v[CT_LOADS];
        int dst[CT_LOADS];
#pragma unroll
        for (int u = 0; u < CT_LOADS; u++) {
            const int e = base + u * CS_THREADS;
            v[u] = 0.0f;
            dst[u] = -1;
            if (e >= total)
                continue;
            const int row = (int)fastdiv_div((uint32_t)e, t.frow), r = e - row * row_len;
            const int iz = (int)fastdiv_div((uint32_t)row, t.fty), iy = row - iz * t.ty;
            const int ix = (int)fastdiv_div((uint32_t)r, t.fc), c = r - ix * g.C;
            const int i0 = d0 + iz - g.pb[0], i1 = h0 + iy - g.pb[1], i2 = w0 + ix - g.pb[2];
            dst[u] = c * vol + iz * plane + iy * t.tx + ix;
            if (i0 >= 0 && i0 < g.in[0] && i1 >= 0 && i1 < g.in[1] && i2 >= 0 && i2 < g.in[2])
                v[u] = ldr<XT, float>(x, (segrt_dtype)XT,
                                      xb + (ll)i0 * g.xs[0] + (ll)i1 * g.xs[1] + (ll)i2 * g.xs[2] + c * g.xc);
        }
#pragma unroll
        for (int u = 0; u < CT_LOADS; u++)
            if (dst[u] >= 0)
                tile[dst[u]] = v[u];
    }
    __syncthreads();

    const int tx = threadIdx.x % CT_W, ty = threadIdx.x / CT_W;
    float acc[TD][KP];
#pragma unroll
    for (int j = 0; j < TD; j++)
#pragma unroll
        for (int k = 0; k < KP; k++)
            acc[j][k] = bs[k];
    if constexpr (CUBE3) {
        constexpr int TX = CT_W + 2, PLANE = TX * (CT_H + 2);
        for (int c = 0; c < g.C; c++) {
            const float *tc = tile + c * vol + ty * TX + tx;
#pragma unroll
            for (int kh = 0; kh < 3; kh++)
#pragma unroll
                for (int kw = 0; kw < 3; kw++) {
                    float wv[3][KP];
#pragma unroll
                    for (int kd = 0; kd < 3; kd++)
                        ld_floats<KP>(ws + (((kd * 3 + kh) * 3 + kw) * g.C + c) * KP, wv[kd]);
#pragma unroll
                    for (int zz = 0; zz < TD + 2; zz++) {
                        const float v = tc[zz * PLANE + kh * TX + kw];
#pragma unroll
                        for (int kd = 0; kd < 3; kd++) {
                            const int j = zz - kd; // the output along d this tap of plane zz feeds
                            if (j >= 0 && j < TD) {
#pragma unroll
                                for (int k = 0; k < KP; k++)
                                    acc[j][k] = fmaf(v, wv[kd][k], acc[j][k]);
                            }
                        }
                    }
                }
        }
    } else
    for (int c = 0; c < g.C; c++) {
        const float *tc = tile + c * vol;
        for (int kd = 0; kd < g.k[0]; kd++)
            for (int kh = 0; kh < g.k[1]; kh++)
                for (int kw = 0; kw < g.k[2]; kw++) {
                    float wv[KP];
                    ld_floats<KP>(ws + (((kd * g.k[1] + kh) * g.k[2] + kw) * g.C + c) * KP, wv);
                    const float *src = tc + (kd * t.ty + ty + kh) * t.tx + tx + kw;
#pragma unroll
                    for (int j = 0; j < TD; j++) {
                        float v = src[j * plane];
#pragma unroll
                        for (int k = 0; k < KP; k++)
                            acc[j][k] = fmaf(v, wv[k], acc[j][k]);
                    }
                }
    }
    const int o1 = h0 + ty, o2 = w0 + tx;
    if (o1 >= g.out[1] || o2 >= g.out[2])
        return;
    const ll yb = (ll)n * g.yn + o1 * g.ys[1] + o2 * g.ys[2];
    const ll zb = (ll)n * g.zn + o1 * g.zs[1] + o2 * g.zs[2];
#pragma unroll
    for (int j = 0; j < TD; j++) {
        if (d0 + j >= g.out[0])
            break;
#pragma unroll
        for (int k = 0; k < KP; k++)
            if (k < g.K)
                st_f32(y, yb + (d0 + j) * g.ys[0] + k * g.yc, g.ydt,
                       cs_out(acc[j][k], g, z, zb + (d0 + j) * g.zs[0] + k * g.zc));
    }
}

// Shared memory of the tiled variant for tiles TD deep.
size_t tiled_smem(const csgeom &g, int kp, int td)
{
    size_t tile = (size_t)(td + g.k[0] - 1) * (size_t)(CT_H + g.k[1] - 1) * (size_t)(CT_W + g.k[2] - 1);
    return ((size_t)g.taps * g.C * kp + kp + tile * g.C) * sizeof(float);
}

// Whether the tiled variant's 3x3x3 loop runs tiles 8 deep: at most two
// output channels (a 3-D UNet's last layer), where a thread's 8 x 2
// accumulators still leave room, each plane read serves 24 products
// where 4-deep tiles gave 12, and the halo is a fifth of the tile's
// planes where it was a third.
static bool tiled_deep8(const csgeom &g)
{
    return kp_of(g.K) <= 2 && g.k[0] == 3 && g.k[1] == 3 && g.k[2] == 3 && g.out[0] >= 8;
}

// The deepest tile (8 where tiled_deep8, else 4, 2 or 1) whose staging
// fits, or 0 where the tiled variant does not apply: a 1x1, transposed,
// strided or dilated layer, or too many input channels for any tile.
int tiled_depth(const csgeom &g)
{
    // A 1x1 layer has no halo to share: the general kernel's wide loads
    // read its input once already.
    if (g.transposed || g.taps == 1)
        return 0;
    for (int a = 0; a < 3; a++)
        if (g.st[a] != 1 || g.dil[a] != 1)
            return 0;
    const int kp = kp_of(g.K);
    for (int td = tiled_deep8(g) ? 8 : g.out[0] >= 4 ? 4 : g.out[0] >= 2 ? 2 : 1; td >= 1; td /= 2)
        if (tiled_smem(g, kp, td) <= CS_SMEM_MAX)
            return td;
    return 0;
}

template <int XT, int KP>
segrt_status launch_tiled(cudaStream_t stream, const csgeom &g, int td, const sgk_view *y, const sgk_view *x,
                          const float *w, const float *bias, const void *z)
{
    ctgeom t;
    t.g = g;
    t.tz = td + g.k[0] - 1;
    t.ty = CT_H + g.k[1] - 1;
    t.tx = CT_W + g.k[2] - 1;
    t.tiles_d = (int)ceil_div(g.out[0], td);
    t.tiles_h = (int)ceil_div(g.out[1], CT_H);
    t.tiles_w = (int)ceil_div(g.out[2], CT_W);
    t.frow = fastdiv_make((uint32_t)(t.tx * g.C));
    t.fty = fastdiv_make((uint32_t)t.ty);
    t.fc = fastdiv_make((uint32_t)g.C);
    t.ftx = fastdiv_make((uint32_t)t.tx);
    // Whole positions in one load: channels contiguous, 2 to 16 bytes a
    // position, every position aligned to that size.
    t.pos_bytes = 0;
    const int es = XT == SEGRT_DTYPE_FLOAT32 ? 4 : 2, pb = g.C * es;
    if (XT != 0 && g.xc == 1 && (pb == 2 || pb == 4 || pb == 8 || pb == 16) &&
        (uintptr_t)x->data % (uintptr_t)pb == 0 && (g.N == 1 || g.xn % g.C == 0) && g.xs[0] % g.C == 0 &&
        g.xs[1] % g.C == 0 && g.xs[2] % g.C == 0)
        t.pos_bytes = pb;
    ll blocks = (ll)t.tiles_d * t.tiles_h * t.tiles_w * g.N;
    size_t smem = tiled_smem(g, KP, td);
    const bool cube3 = g.k[0] == 3 && g.k[1] == 3 && g.k[2] == 3;
    if constexpr (KP <= 2)
        if (td == 8 && cube3) {
            conv_tiled_kernel<XT, KP, 8, true><<<(unsigned)blocks, CS_THREADS, smem, stream>>>(x->data, y->data, w, bias, z, t);
            return launched("conv_tiled_kernel");
        }
    if (td == 4 && cube3)
        conv_tiled_kernel<XT, KP, 4, true><<<(unsigned)blocks, CS_THREADS, smem, stream>>>(x->data, y->data, w, bias, z, t);
    else if (td == 4)
        conv_tiled_kernel<XT, KP, 4, false><<<(unsigned)blocks, CS_THREADS, smem, stream>>>(x->data, y->data, w, bias, z, t);
    else if (td == 2)
        conv_tiled_kernel<XT, KP, 2, false><<<(unsigned)blocks, CS_THREADS, smem, stream>>>(x->data, y->data, w, bias, z, t);
    else
        conv_tiled_kernel<XT, KP, 1, false><<<(unsigned)blocks, CS_THREADS, smem, stream>>>(x->data, y->data, w, bias, z, t);
    return launched("conv_tiled_kernel");
}



// The phase-tiled variant: a stride-2 ConvTranspose of a UNet's upsampling
// (kernel 3, pad 1 -- MONAI's UNet -- or kernel 2, pad 0 -- BasicUNet's
// deconv) along every real dim. Output o = 2q + r takes, per dim, the
// (input offset, phase r, tap) triples below at input q + offset, so one
// thread per q computes the outputs of every phase from the few input
// positions q + {0, 1}: each tap is used once per thread, and every input
// value is read once from global memory into a shared-memory tile (the
// general kernel read each 16-byte piece through L1 once per tap and was
// bound by L1's wavefronts, not by memory).
//   TS 0: a leading unit dim (k 1, s 1): (0, 0, 0).
//   TS 1: k 3, s 2, pad 1: (0, 0, 1), (1, 1, 0), (0, 1, 2).
//   TS 2: k 2, s 2, pad 0: (0, 0, 0), (0, 1, 1).
template <int TS> struct up_dim {
    static constexpr int n = TS == 0 ? 1 : TS == 1 ? 3 : 2;
    static constexpr int phases = TS == 0 ? 1 : 2, taps = TS == 0 ? 1 : TS == 1 ? 3 : 2;
    static constexpr int reach = TS == 1 ? 1 : 0;
    // Triple i: (input offset, phase, tap).
    __host__ __device__ static constexpr int off(int i) { return TS == 1 && i == 1 ? 1 : 0; }
    __host__ __device__ static constexpr int ph(int i) { return TS == 0 ? 0 : i == 0 ? 0 : 1; }
    __host__ __device__ static constexpr int tap(int i)
    {
        return TS == 0 ? 0 : TS == 1 ? (i == 0 ? 1 : i == 1 ? 0 : 2) : i;
    }
};

// q positions per block: 256 threads, 4 x 4 x 16 (3-D) or 16 x 16 (2-D).
template <int TS0> struct up_block {
    static constexpr int qd = TS0 == 0 ? 1 : 4, qh = TS0 == 0 ? 16 : 4, qw = 16;
};

struct upgeom {
    csgeom g;
    int q[3];                 // q positions per dim: ceil(out / phases)
    int blocks[3];            // blocks per dim
    int tile[3];              // staged input positions per dim: block q extent + reach
    int pos_stride;           // 16-byte units per staged position (channels, padded against bank conflicts)
};

template <int XT, int KP, int TS0, int TS1, int TS2>
__global__ void __launch_bounds__(CS_THREADS)
    conv_up_kernel(const void *__restrict__ x, void *__restrict__ y, const float *__restrict__ w,
                   const float *__restrict__ bias, const void *__restrict__ z, upgeom u)
{
    using D0 = up_dim<TS0>;
    using D1 = up_dim<TS1>;
    using D2 = up_dim<TS2>;
    using B = up_block<TS0>;
    constexpr int ES = XT == SEGRT_DTYPE_FLOAT32 ? 4 : 2, V = 16 / ES;
    constexpr int PH = D0::phases * D1::phases * D2::phases;
    static_assert(D0::taps * D1::taps * D2::taps >= 1, "every dim has a tap");
    extern __shared__ float4 up_smem[];
    const csgeom &g = u.g;
    float *ws = reinterpret_cast<float *>(up_smem); // [tap][c][KP]
    const int nw = g.taps * g.C * KP;
    float *bs = ws + nw;
    // The tile starts at the next 16-byte boundary after the weights.
    uint4 *tile = reinterpret_cast<uint4 *>(up_smem + (nw + KP + 3) / 4);
    cs_stage_weights<KP>(g, w, bias, ws, bs);

    int b = blockIdx.x;
    const int bw = b % u.blocks[2];
    b /= u.blocks[2];
    const int bh = b % u.blocks[1];
    b /= u.blocks[1];
    const int bd = b % u.blocks[0];
    const int n = b / u.blocks[0];
    const int q0 = bd * B::qd, q1 = bh * B::qh, q2 = bw * B::qw;
    const ll xb = (ll)n * g.xn;
    // Stage the input tile: positions (q0.., q1.., q2..) + [0, tile), every
    // channel, in x's dtype, V channels per 16-byte unit; zero outside x.
    const int runs = g.C / V, npos = u.tile[0] * u.tile[1] * u.tile[2];
    for (int e = threadIdx.x; e < npos * runs; e += CS_THREADS) {
        const int run = e % runs, pos = e / runs;
        const int t2 = pos % u.tile[2], t1 = (pos / u.tile[2]) % u.tile[1], t0 = pos / (u.tile[2] * u.tile[1]);
        const int i0 = q0 + t0, i1 = q1 + t1, i2 = q2 + t2;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (i0 < g.in[0] && i1 < g.in[1] && i2 < g.in[2]) {
            const ll at = xb + (ll)i0 * g.xs[0] + (ll)i1 * g.xs[1] + (ll)i2 * g.xs[2];
            if (g.xc == 1) {
                v = *reinterpret_cast<const uint4 *>((const char *)x + (at + (ll)run * V) * ES);
            } else {
                float f[V];
#pragma unroll
                for (int j = 0; j < V; j++)
                    f[j] = ldr<XT, float>(x, (segrt_dtype)XT, at + (ll)(run * V + j) * g.xc);
                v = vec16_pack<XT>(f);
            }
        }
        tile[pos * u.pos_stride + run] = v;
    }
    __syncthreads();

    const int lw = threadIdx.x % B::qw, lh = (threadIdx.x / B::qw) % B::qh, ld = threadIdx.x / (B::qw * B::qh);
    const int qa = q0 + ld, qb = q1 + lh, qc = q2 + lw;
    if (qa >= u.q[0] || qb >= u.q[1] || qc >= u.q[2])
        return;
    float acc[PH][KP];
#pragma unroll
    for (int p = 0; p < PH; p++)
#pragma unroll
        for (int k = 0; k < KP; k++)
            acc[p][k] = bs[k];
    for (int run = 0; run < runs; run++) {
#pragma unroll
        for (int od = 0; od <= D0::reach; od++)
#pragma unroll
            for (int oh = 0; oh <= D1::reach; oh++)
#pragma unroll
                for (int ow = 0; ow <= D2::reach; ow++) {
                    const int pos = ((ld + od) * u.tile[1] + lh + oh) * u.tile[2] + lw + ow;
                    float xv[V];
                    vec16_unpack<XT>(tile[pos * u.pos_stride + run], xv);
#pragma unroll
                    for (int a = 0; a < D0::n; a++) {
                        if (D0::off(a) != od)
                            continue;
#pragma unroll
                        for (int c = 0; c < D1::n; c++) {
                            if (D1::off(c) != oh)
                                continue;
#pragma unroll
                            for (int e = 0; e < D2::n; e++) {
                                if (D2::off(e) != ow)
                                    continue;
                                const int tap = (D0::tap(a) * D1::taps + D1::tap(c)) * D2::taps + D2::tap(e);
                                const int ph = (D0::ph(a) * D1::phases + D1::ph(c)) * D2::phases + D2::ph(e);
                                float wv[V * KP];
                                ld_floats<V * KP>(ws + (tap * g.C + run * V) * KP, wv);
#pragma unroll
                                for (int j = 0; j < V; j++)
#pragma unroll
                                    for (int k = 0; k < KP; k++)
                                        acc[ph][k] = fmaf(xv[j], wv[j * KP + k], acc[ph][k]);
                            }
                        }
                    }
                }
    }
    const ll yb = (ll)n * g.yn, zb = (ll)n * g.zn;
#pragma unroll
    for (int r0 = 0; r0 < D0::phases; r0++)
#pragma unroll
        for (int r1 = 0; r1 < D1::phases; r1++)
#pragma unroll
            for (int r2 = 0; r2 < D2::phases; r2++) {
                const int o0 = qa * D0::phases + r0, o1 = qb * D1::phases + r1, o2 = qc * D2::phases + r2;
                if (o0 >= g.out[0] || o1 >= g.out[1] || o2 >= g.out[2])
                    continue; // an odd output extent's last phase
                const int ph = (r0 * D1::phases + r1) * D2::phases + r2;
                const ll yo = yb + o0 * g.ys[0] + o1 * g.ys[1] + o2 * g.ys[2];
                const ll zo = zb + o0 * g.zs[0] + o1 * g.zs[1] + o2 * g.zs[2];
#pragma unroll
                for (int k = 0; k < KP; k++)
                    if (k < g.K)
                        st_f32(y, yo + k * g.yc, g.ydt, cs_out(acc[ph][k], g, z, zo + k * g.zc));
            }
}

// The triple set of dim a (0 trivial, 1 k3 s2 p1, 2 k2 s2 p0), or -1.
int up_set(const csgeom &g, int a, int real_from)
{
    if (a < real_from)
        return g.k[a] == 1 && g.st[a] == 1 && g.pb[a] == 0 ? 0 : -1;
    if (g.st[a] != 2 || g.dil[a] != 1)
        return -1;
    if (g.k[a] == 3 && g.pb[a] == 1)
        return 1;
    if (g.k[a] == 2 && g.pb[a] == 0)
        return 2;
    return -1;
}

// Shared memory of the phase-tiled variant, with its geometry filled in;
// 0 where it does not apply: not a transposed 2-D or 3-D layer of one of
// the two shapes along every real dim, channels not a multiple of a
// 16-byte run, x not 16-byte aligned at every run, or too large a tile.
size_t up_plan(const csgeom &g, int nsp, int es, uintptr_t xaddr, upgeom *u, int *set)
{
    const int v = 16 / es;
    if (!g.transposed || nsp < 2 || g.C % v != 0)
        return 0;
    const int real_from = 3 - nsp;
    int s0 = up_set(g, 0, real_from), s1 = up_set(g, 1, real_from), s2 = up_set(g, 2, real_from);
    if (s0 < 0 || s1 < 0 || s2 < 0 || s1 == 0 || s2 != s1 || (s0 != 0 && s0 != s1))
        return 0;
    if (g.xc == 1 && (xaddr % 16 != 0 || g.xn % v != 0 || g.xs[0] % v != 0 || g.xs[1] % v != 0 ||
                      g.xs[2] % v != 0))
        return 0;
    const int reach = s1 == 1 ? 1 : 0;
    const int bq[3] = {s0 == 0 ? 1 : 4, s0 == 0 ? 16 : 4, 16};
    for (int a = 0; a < 3; a++) {
        const int phases = a < real_from ? 1 : 2;
        u->q[a] = (g.out[a] + phases - 1) / phases;
        u->blocks[a] = (u->q[a] + bq[a] - 1) / bq[a];
        u->tile[a] = bq[a] + (a < real_from ? 0 : reach);
    }
    const int runs = g.C / v;
    u->pos_stride = runs % 2 == 0 ? runs + 1 : runs;
    u->g = g;
    *set = s1 * 10 + s0; // which instantiation
    // The kernel's layout: ws[tap][c][KP] and bs[KP] floats, then the tile
    // from the next 16-byte boundary.
    const size_t kp = (size_t)kp_of(g.K);
    size_t weights = ((size_t)g.taps * g.C * kp + kp + 3) / 4 * 16;
    size_t tile = (size_t)u->tile[0] * u->tile[1] * u->tile[2] * u->pos_stride * 16;
    size_t total = weights + tile;
    return total <= CS_SMEM_MAX ? total : 0;
}

// The variant that runs a layer, with its geometry: the phase-tiled one
// where it applies and the caller allows it, else the tiled one, else the
// general kernel.
struct variant_choice {
    sgk_conv_small_variant v;
    upgeom u;
    int set;
    size_t smem;
    int td;
};

variant_choice choose(const sgk_conv_small_params *p, const csgeom &g, int es, uintptr_t xaddr)
{
    variant_choice c;
    memset(&c, 0, sizeof c);
    c.v = SGK_CONV_SMALL_GENERAL;
    if (g.pro) // (the general kernel alone normalises its input)
        return c;
    if (!p->no_up && kp_of(g.K) <= 4) {
        c.smem = up_plan(g, p->n_spatial, es, xaddr, &c.u, &c.set);
        if (c.smem > 0 && (ll)c.u.blocks[0] * c.u.blocks[1] * c.u.blocks[2] * g.N < INT32_MAX) {
            c.v = SGK_CONV_SMALL_PHASE_TILES;
            return c;
        }
    }
    if (!p->no_tiled && kp_of(g.K) <= 8) {
        c.td = tiled_depth(g);
        if (c.td > 0)
            c.v = SGK_CONV_SMALL_TILED;
    }
    return c;
}

template <int XT, int KP>
segrt_status launch_up(cudaStream_t stream, const upgeom &u, int set, size_t smem, const sgk_view *y,
                       const sgk_view *x, const float *w, const float *bias, const void *z)
{
    const ll blocks = (ll)u.blocks[0] * u.blocks[1] * u.blocks[2] * u.g.N;
    const dim3 grid((unsigned)blocks);
    switch (set) {
    case 11: conv_up_kernel<XT, KP, 1, 1, 1><<<grid, CS_THREADS, smem, stream>>>(x->data, y->data, w, bias, z, u); break;
    case 22: conv_up_kernel<XT, KP, 2, 2, 2><<<grid, CS_THREADS, smem, stream>>>(x->data, y->data, w, bias, z, u); break;
    case 10: conv_up_kernel<XT, KP, 0, 1, 1><<<grid, CS_THREADS, smem, stream>>>(x->data, y->data, w, bias, z, u); break;
    default: conv_up_kernel<XT, KP, 0, 2, 2><<<grid, CS_THREADS, smem, stream>>>(x->data, y->data, w, bias, z, u); break;
    }
    return launched("conv_up_kernel");
}

bool cs_dtype(segrt_dtype t)
{
    return t == SEGRT_DTYPE_FLOAT32 || t == SEGRT_DTYPE_FLOAT16 || t == SEGRT_DTYPE_BFLOAT16;
}

size_t smem_bytes(int K, int C, ll taps, bool pro)
{
    int kp = kp_of(K);
    const ll nw = taps * C * kp;
    return pro ? ((size_t)cs_pro_at(nw, kp) + 3 * (size_t)cs_pro_stride(C)) * sizeof(float)
               : (size_t)(nw + kp) * sizeof(float);
}

// The geometry of a layer sgk_conv_small_fits accepts, lifted to 3-D.
csgeom geom_of(const sgk_conv_small_params *p, const sgk_view *y, const sgk_view *x, const sgk_view *z)
{
    csgeom g;
    memset(&g, 0, sizeof g);
    int nsp = p->n_spatial;
    g.K = p->K;
    g.C = p->C;
    g.N = (int)x->dims[0];
    g.transposed = p->transposed;
    g.xn = x->strides[0];
    g.xc = x->strides[1];
    g.yn = y->strides[0];
    g.yc = y->strides[1];
    g.ydt = y->dtype;
    g.zdt = z ? z->dtype : y->dtype;
    g.zn = z ? z->strides[0] : 0;
    g.zc = z ? z->strides[1] : 0;
    g.act = p->act;
    g.alpha = p->act_alpha;
    ll taps = 1, per_sample = 1;
    for (int a = 0; a < 3; a++) {
        int s = a - (3 - nsp);
        bool real = s >= 0;
        g.k[a] = real ? (int)p->kernel[s] : 1;
        g.st[a] = real ? (int)p->stride[s] : 1;
        g.dil[a] = real ? (int)p->dil[s] : 1;
        g.pb[a] = real ? (int)p->pad_begin[s] : 0;
        g.in[a] = real ? (int)x->dims[2 + s] : 1;
        g.out[a] = real ? (int)y->dims[2 + s] : 1;
        g.xs[a] = real ? x->strides[2 + s] : 0;
        g.ys[a] = real ? y->strides[2 + s] : 0;
        g.zs[a] = real && z ? z->strides[2 + s] : 0;
        g.P[a] = p->transposed ? g.st[a] : 1;
        ll qn = ceil_div(g.out[a], g.P[a]);
        g.fst[a] = fastdiv_make((uint32_t)g.st[a]);
        g.fp[a] = fastdiv_make((uint32_t)g.P[a]);
        g.fq[a] = fastdiv_make((uint32_t)qn);
        taps *= g.k[a];
        per_sample *= qn * g.P[a];
    }
    g.taps = (int)taps;
    g.per_sample = (uint32_t)per_sample;
    const int es = dtype_bytes(y->dtype);
    g.yvec = !z && g.K == kp_of(g.K) && g.K * es % 16 == 0 && y->strides[1] == 1 &&
             (!y->data || ((uintptr_t)y->data & 15) == 0);
    for (int d = 0; d < y->rank && g.yvec; d++)
        g.yvec = d == 1 || y->dims[d] <= 1 || y->strides[d] * es % 16 == 0;
    for (int a = 0; a < 3; a++)
        g.xs32[a] = (int)g.xs[a];
    g.pro = p->prologue;
    g.pro_act = p->pro_act;
    g.pro_alpha = p->pro_alpha;
    g.first3 = !g.pro && !g.transposed && g.C == 1 && (g.k[0] == 1 || g.k[0] == 3) && g.k[1] == 3 &&
               g.k[2] == 3 && sample_offsets_fit(x);
    return g;
}

// The channels per load: 16 bytes, else (16-bit dtypes) 4 bytes, where x's
// channels are contiguous, C a multiple and every address aligned; else 1.
int vec_of(const sgk_view *x, int C)
{
    int es = dtype_bytes(x->dtype);
    if (x->strides[1] != 1)
        return 1;
    const int cands[2] = {16 / es, 4 / es};
    for (int v : cands) {
        if (v < 2 || C % v != 0 || ((uintptr_t)x->data % (uintptr_t)(v * es)) != 0)
            continue;
        bool ok = true;
        for (int d = 0; d < x->rank && ok; d++)
            ok = d == 1 || x->dims[d] <= 1 || x->strides[d] % v == 0;
        if (ok)
            return v;
    }
    return 1;
}

template <int XT, int KP, int V>
segrt_status launch(cudaStream_t stream, const csgeom &g, int sm_count, const sgk_view *y, const sgk_view *x,
                    const float *w, const float *bias, const void *z, const float4 *ab)
{
    size_t smem = smem_bytes(g.K, g.C, g.taps, g.pro);
    // One wave of blocks that all stay resident (CS_BLOCKS_PER_SM fit
    // whatever the weights' size and the variant's registers): each stages
    // the weights once and loops over an equal share of the positions.
    ll gy = g.N < 65535 ? g.N : 65535;
    ll want = (ll)(sm_count > 0 ? sm_count : CS_DEFAULT_SMS) * CS_BLOCKS_PER_SM;
    ll gx = ceil_div(want, gy);
    ll need = ceil_div((ll)g.per_sample, CS_THREADS);
    gx = gx < need ? gx : need;
    gx = gx < 1 ? 1 : gx;
    conv_small_kernel<XT, KP, V>
        <<<dim3((unsigned)gx, (unsigned)gy), CS_THREADS, smem, stream>>>(x->data, y->data, w, bias, z, ab, g);
    return launched("conv_small_kernel");
}

template <int XT, int KP>
segrt_status launch_vec(cudaStream_t stream, const csgeom &g, int sm_count, int v, const sgk_view *y,
                        const sgk_view *x, const float *w, const float *bias, const void *z, const float4 *ab)
{
    if constexpr (XT == SEGRT_DTYPE_FLOAT32) {
        if (v == 4)
            return launch<XT, KP, 4>(stream, g, sm_count, y, x, w, bias, z, ab);
    } else {
        if (v == 8)
            return launch<XT, KP, 8>(stream, g, sm_count, y, x, w, bias, z, ab);
        if (v == 2)
            return launch<XT, KP, 2>(stream, g, sm_count, y, x, w, bias, z, ab);
    }
    return launch<XT, KP, 1>(stream, g, sm_count, y, x, w, bias, z, ab);
}

template <int XT>
segrt_status launch_kp(cudaStream_t stream, const sgk_conv_small_params *p, const csgeom &g, int v,
                       const sgk_view *y, const sgk_view *x, const float *w, const float *bias, const void *z,
                       const float4 *ab)
{
    const int sm_count = p->sm_count;
    const variant_choice c = choose(p, g, XT == SEGRT_DTYPE_FLOAT32 ? 4 : 2, (uintptr_t)x->data);
    if (c.v == SGK_CONV_SMALL_PHASE_TILES) {
        switch (kp_of(g.K)) {
        case 1: return launch_up<XT, 1>(stream, c.u, c.set, c.smem, y, x, w, bias, z);
        case 2: return launch_up<XT, 2>(stream, c.u, c.set, c.smem, y, x, w, bias, z);
        default: return launch_up<XT, 4>(stream, c.u, c.set, c.smem, y, x, w, bias, z);
        }
    }
    const int td = c.td;
    if (c.v == SGK_CONV_SMALL_TILED) {
        switch (kp_of(g.K)) {
        case 1: return launch_tiled<XT, 1>(stream, g, td, y, x, w, bias, z);
        case 2: return launch_tiled<XT, 2>(stream, g, td, y, x, w, bias, z);
        case 4: return launch_tiled<XT, 4>(stream, g, td, y, x, w, bias, z);
        default: return launch_tiled<XT, 8>(stream, g, td, y, x, w, bias, z);
        }
    }
    switch (kp_of(g.K)) {
    case 1: return launch_vec<XT, 1>(stream, g, sm_count, v, y, x, w, bias, z, ab);
    case 2: return launch_vec<XT, 2>(stream, g, sm_count, v, y, x, w, bias, z, ab);
    case 4: return launch_vec<XT, 4>(stream, g, sm_count, v, y, x, w, bias, z, ab);
    case 8: return launch_vec<XT, 8>(stream, g, sm_count, v, y, x, w, bias, z, ab);
    default: return launch_vec<XT, 16>(stream, g, sm_count, v, y, x, w, bias, z, ab);
    }
}

} // namespace

extern "C" bool sgk_conv_small_fits(const sgk_conv_small_params *p, const sgk_view *y, const sgk_view *x)
{
    int nsp = p->n_spatial;
    const int max_k = !p->transposed && p->C <= SGK_CONV_SMALL_FEW_C ? SGK_CONV_SMALL_MAX_K_FEW_C : SGK_CONV_SMALL_MAX_K;
    if (nsp < 1 || nsp > 3 || p->K < 1 || p->K > max_k || p->C < 1 || x->rank != nsp + 2 ||
        y->rank != nsp + 2 || !cs_dtype(x->dtype) || !cs_dtype(y->dtype) || x->dims[0] != y->dims[0] ||
        x->dims[0] > INT32_MAX || x->dims[1] != p->C || y->dims[1] != p->K)
        return false;
    if (p->act != SGK_ACT_NONE && p->act != SGK_ACT_RELU && p->act != SGK_ACT_LEAKY_RELU)
        return false;
    ll taps = 1, per_sample = 1;
    for (int s = 0; s < nsp; s++) {
        ll k = p->kernel[s], st = p->stride[s], d = p->dil[s], pb = p->pad_begin[s];
        ll in = x->dims[2 + s], out = y->dims[2 + s];
        if (k < 1 || st < 1 || d < 1 || pb < 0 || k > 1024 || st > 1024 || d > 1024 || pb > CS_INDEX_MAX ||
            in < 0 || out < 0 || in > CS_INDEX_MAX || out > CS_INDEX_MAX)
            return false;
        // The largest magnitudes cs_tap forms, o * stride + k * dil (forward)
        // and o + pad (transposed), stay inside int32.
        ll reach = p->transposed ? out + pb + (k - 1) * d : out * st + (k - 1) * d + pb;
        if (reach >= INT32_MAX)
            return false;
        taps *= k;
        ll phases = p->transposed ? st : 1;
        per_sample *= ceil_div(out, phases) * phases;
        if (per_sample > CS_INDEX_MAX * 2)
            return false;
    }
    if (p->prologue && (p->transposed || (p->pro_act != SGK_ACT_NONE && p->pro_act != SGK_ACT_RELU &&
                                          p->pro_act != SGK_ACT_LEAKY_RELU)))
        return false;
    return smem_bytes(p->K, p->C, taps, p->prologue) <= CS_SMEM_MAX;
}

extern "C" sgk_conv_small_variant sgk_conv_small_variant_of(const sgk_conv_small_params *p, const sgk_view *y,
                                                              const sgk_view *x)
{
    if (!sgk_conv_small_fits(p, y, x))
        return SGK_CONV_SMALL_GENERAL;
    csgeom g = geom_of(p, y, x, NULL);
    return choose(p, g, x->dtype == SEGRT_DTYPE_FLOAT32 ? 4 : 2, (uintptr_t)x->data).v;
}

extern "C" bool sgk_conv_small_residual_fits(const sgk_view *y, const sgk_view *z)
{
    if (!cs_dtype(z->dtype) || z->rank != y->rank)
        return false;
    for (int d = 0; d < y->rank; d++)
        if (z->dims[d] != y->dims[d])
            return false;
    return true;
}

extern "C" segrt_status sgk_conv_small(cudaStream_t stream, const sgk_conv_small_params *p, const sgk_view *y,
                                       const sgk_view *x, const float *w, const float *bias, const sgk_view *z,
                                       const float *ab)
{
    if (p->prologue && (!ab || ((uintptr_t)ab & 15) != 0))
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_conv_small: normalisation parameters at %p", (const void *)ab);
    if (!sgk_conv_small_fits(p, y, x) || (z && !sgk_conv_small_residual_fits(y, z)))
        return sg_error(SEGRT_ERROR_UNSUPPORTED,
                        "sgk_conv_small: a %d-D %s with %d input and %d output channels (%s to %s) is outside "
                        "what the direct kernel takes",
                        p->n_spatial, p->transposed ? "ConvTranspose" : "Conv", p->C, p->K,
                        segrt_dtype_name(x->dtype), segrt_dtype_name(y->dtype));
    for (int d = 0; d < y->rank; d++)
        if (y->dims[d] == 0)
            return SEGRT_OK;
    csgeom g = geom_of(p, y, x, z);
    int v = vec_of(x, g.C);
    const void *zd = z ? z->data : NULL;
    const float4 *abv = (const float4 *)ab;
    switch (x->dtype) {
    case SEGRT_DTYPE_FLOAT16: return launch_kp<SEGRT_DTYPE_FLOAT16>(stream, p, g, v, y, x, w, bias, zd, abv);
    case SEGRT_DTYPE_BFLOAT16:
        return launch_kp<SEGRT_DTYPE_BFLOAT16>(stream, p, g, v, y, x, w, bias, zd, abv);
    default: return launch_kp<SEGRT_DTYPE_FLOAT32>(stream, p, g, v, y, x, w, bias, zd, abv);
    }
}
