// (Over 1,000 lines on purpose: the three group-norm kernels, their
// vectorised forms, the one-pass cooperative kernel, the forms the fusions
// use (combining a convolution's tile statistics, applying a deferred
// norm) and LayerNorm share one geometry and one set of device helpers;
// split, each file would repeat them.)
//
// Group normalisation (InstanceNormalization: one channel per group) and
// LayerNormalization over strided views.
//
// Group normalisation runs as three kernels:
//  1. statistics: blocks over (sample, spatial tile); per (sample, channel,
//     tile) a mean and sum of squared deviations (M2) go to scratch. For a
//     channels-last input the threads of a block lie across the channels,
//     so a warp reads neighbouring elements; otherwise across the spatial
//     positions of one channel (plain NCHW: contiguous).
//  2. combination: a warp per (sample, group) merges the partials of the
//     group's channels and tiles (Chan's formula, in double, in a fixed
//     order) into mean and 1/std, and turns them into a per-channel
//     y = (x - mean) * a + bias.
//  3. application: y = act(((x - mean_hi) - mean_lo) * a + bias), with the
//     same thread layout as 1. The mean is kept as two floats (hi + lo):
//     with a large mean and a small deviation, x * a + b or a rounded mean
//     would lose about |mean| / std units in the last place.
// Statistics are float32: each thread sums deviations from a shift (the
// tile's first value) over chunks of about 64 elements and merges the
// chunks' (count, mean, M2) with Chan's formula, so neither large spatial extents
// nor large offsets lose precision. Nothing is combined with atomics; the
// order of every combination is fixed, so results are bit-identical from
// run to run.
// Float16, bfloat16 and float32 tensors laid out channels-last or plain
// NCHW, with 16-byte alignment, take vectorized versions of kernels 1 and
// 3 (see "Vectorized paths"); the rest, the general ones.
#include "backend/cuda/k_common.cuh"

#include <cooperative_groups.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

// Offset along stride j of index idx; one dim needs no division.
__device__ __forceinline__ ll dl_offset1(const dimlist &l, int j, ll idx)
{
    if (l.n == 1)
        return idx * l.s[j][0];
    ll off = 0;
    for (int k = l.n - 1; k > 0; k--) {
        ll q = idx / l.d[k];
        off += (idx - q * l.d[k]) * l.s[j][k];
        idx = q;
    }
    return l.n > 0 ? off + idx * l.s[j][0] : 0;
}

// Running statistics ---------------------------------------------------------------

struct mstat {
    float n, mean, m2;
};

// Chan's parallel merge of two sets' (count, mean, M2).
__device__ __forceinline__ mstat mstat_merge(mstat a, mstat b)
{
    if (b.n == 0.0f)
        return a;
    if (a.n == 0.0f)
        return b;
    float n = a.n + b.n, d = b.mean - a.mean;
    mstat r;
    r.n = n;
    r.mean = a.mean + d * (b.n / n);
    r.m2 = a.m2 + b.m2 + d * d * (a.n * (b.n / n));
    return r;
}

// A chunk of cn values summed as deviations from shift k.
__device__ __forceinline__ mstat mstat_chunk(float cn, float s1, float s2, float k)
{
    mstat r;
    r.n = cn;
    r.mean = k + s1 / cn;
    float m2 = s2 - s1 * (s1 / cn);
    r.m2 = m2 > 0.0f ? m2 : 0.0f;
    return r;
}

// One thread's statistics: deviations from the shift k summed in float,
// folded into the running (count, mean, M2) once a chunk holds CHUNK or
// more values.
#define CHUNK 64

struct macc {
    mstat total;
    float s1, s2, k;
    int cn;
};

__device__ __forceinline__ void macc_init(macc *a, float k)
{
    a->total.n = a->total.mean = a->total.m2 = 0.0f;
    a->s1 = a->s2 = 0.0f;
    a->k = k;
    a->cn = 0;
}

__device__ __forceinline__ void macc_add(macc *a, float v)
{
    float d = v - a->k;
    a->s1 += d;
    a->s2 += d * d;
    a->cn++;
}

__device__ __forceinline__ void macc_fold(macc *a)
{
    a->total = mstat_merge(a->total, mstat_chunk((float)a->cn, a->s1, a->s2, a->k));
    a->s1 = a->s2 = 0.0f;
    a->cn = 0;
}

__device__ __forceinline__ void macc_check(macc *a)
{
    if (a->cn >= CHUNK)
        macc_fold(a);
}

__device__ __forceinline__ mstat macc_done(macc *a)
{
    if (a->cn)
        macc_fold(a);
    return a->total;
}

// Group normalisation -------------------------------------------------------------------

#define GN_THREADS 256
#define GN_TARGET_BLOCKS 1024
#define GN_UNROLL 8      // rows loaded before they are used: loads in flight per thread
#define GN_APPLY_ROWS 16 // rows per thread in the application kernels

struct gngeom {
    ll N, C, S, groups, cg;
    ll xn, xc, yn, yc; // strides of dims 0 and 1
    dimlist sp;        // spatial dims; s[0]: x strides, s[1]: y strides
    bool cl;           // channels-last statistics: threads across channels
    bool cl_apply;     // channels-last application (y too)
    int nct, ct, ry;   // channels-last: channel chunks, channels per chunk, rows of threads
    ll tiles, rpt;     // statistics: spatial tiles per sample and rows per tile
    ll tiles3, rpt3;   // application: likewise
};

// Plans the kernels for x (and y, where given: the scratch size only needs
// x). Returns false for views that are not [N, C, ...].
static bool gn_plan(const sgk_view *x, const sgk_view *y, int64_t groups, gngeom *g)
{
    memset(g, 0, sizeof *g);
    if (x->rank < 2 || groups < 1 || x->dims[1] % groups != 0)
        return false;
    g->N = x->dims[0];
    g->C = x->dims[1];
    g->groups = groups;
    g->cg = g->C / groups;
    g->xn = x->strides[0];
    g->xc = x->strides[1];
    g->yn = y ? y->strides[0] : 0;
    g->yc = y ? y->strides[1] : 0;
    for (int d = 2; d < x->rank; d++) {
        if (x->dims[d] == 1)
            continue;
        int k = g->sp.n++;
        g->sp.d[k] = x->dims[d];
        g->sp.s[0][k] = x->strides[d];
        g->sp.s[1][k] = y ? y->strides[d] : 0;
    }
    dl_normalise(&g->sp, 2);
    g->S = dl_count(&g->sp);
    g->cl = g->C > 1 && g->xc == 1;
    g->cl_apply = g->cl && y && g->yc == 1;
    ll NC = g->N * g->C;
    if (g->cl) {
        // Threads across channels: ct channels per block (chunks of at most
        // 256), ry rows of them; tiles so that about GN_TARGET_BLOCKS blocks
        // share the work, each thread taking at least 32 rows.
        g->nct = (int)ceil_div(g->C, GN_THREADS);
        g->ct = (int)ceil_div(g->C, g->nct);
        g->ry = GN_THREADS / g->ct;
        ll want = ceil_div(GN_TARGET_BLOCKS, g->N * g->nct), by_len = ceil_div(g->S, (ll)g->ry * 32);
        g->tiles = want < by_len ? want : by_len;
    } else {
        ll want = NC > 0 ? ceil_div(GN_TARGET_BLOCKS, NC) : 1, by_len = ceil_div(g->S, GN_THREADS * 16);
        g->tiles = want < by_len ? want : by_len;
    }
    if (g->tiles < 1)
        g->tiles = 1;
    g->rpt = g->S > 0 ? ceil_div(g->S, g->tiles) : 1;
    g->tiles = g->S > 0 ? ceil_div(g->S, g->rpt) : 1;
    g->rpt3 = g->cl_apply ? (ll)g->ry * GN_APPLY_ROWS : (ll)GN_THREADS * GN_APPLY_ROWS;
    g->tiles3 = g->S > 0 ? ceil_div(g->S, g->rpt3) : 1;
    return true;
}


// Merges the block's per-thread statistics along rows of threads: entry
// (row, col) at sh[row * cols + col]; rows need not be a power of two.
__device__ __forceinline__ void block_merge_rows(mstat *sh, int row, int col, int rows, int cols)
{
    int p = 1;
    while (p < rows)
        p *= 2;
    for (int h = p / 2; h > 0; h /= 2) {
        __syncthreads();
        if (row < h && row + h < rows)
            sh[row * cols + col] = mstat_merge(sh[row * cols + col], sh[(row + h) * cols + col]);
    }
    __syncthreads();
}

// Adds x[base + spatial offset of r] for r = r0, r0 + step, ... < r1,
// GN_UNROLL rows loaded at a time.
template <int T>
__device__ __forceinline__ mstat stats_rows(const void *x, segrt_dtype xt, const dimlist &sp, ll base, ll r0, ll r1,
                                            ll step, ll first)
{
    macc a;
    macc_init(&a, ldr<T, float>(x, xt, base + dl_offset1(sp, 0, first)));
    ll r = r0;
    for (; r + (GN_UNROLL - 1) * step < r1; r += GN_UNROLL * step) {
        float v[GN_UNROLL];
#pragma unroll
        for (int u = 0; u < GN_UNROLL; u++)
            v[u] = ldr<T, float>(x, xt, base + dl_offset1(sp, 0, r + u * step));
#pragma unroll
        for (int u = 0; u < GN_UNROLL; u++)
            macc_add(&a, v[u]);
        macc_check(&a);
    }
    for (; r < r1; r += step) {
        macc_add(&a, ldr<T, float>(x, xt, base + dl_offset1(sp, 0, r)));
        macc_check(&a);
    }
    return macc_done(&a);
}

// 1, channels-last: block (n, chunk, tile); thread (tx: channel, ty: row).
template <int T>
__global__ void __launch_bounds__(GN_THREADS) gn_stats_cl(const void *x, segrt_dtype xt, gngeom g, float2 *part)
{
    __shared__ mstat sh[GN_THREADS];
    ll bx = blockIdx.x;
    ll t = bx % g.tiles, rest = bx / g.tiles;
    int chunk = (int)(rest % g.nct);
    ll n = rest / g.nct;
    int tx = threadIdx.x % g.ct, ty = threadIdx.x / g.ct;
    ll c = (ll)chunk * g.ct + tx;
    bool valid = ty < g.ry && c < g.C;
    ll r0 = t * g.rpt, r1 = r0 + g.rpt < g.S ? r0 + g.rpt : g.S;
    mstat m = {0.0f, 0.0f, 0.0f};
    if (valid)
        m = stats_rows<T>(x, xt, g.sp, n * g.xn + c, r0 + ty, r1, g.ry, r0);
    if (ty < g.ry)
        sh[ty * g.ct + tx] = m;
    block_merge_rows(sh, ty, tx, g.ry, g.ct);
    if (valid && ty == 0)
        part[(n * g.C + c) * g.tiles + t] = make_float2(sh[tx].mean, sh[tx].m2);
}

// 1, other layouts: block (n, c, tile); threads across spatial positions
// (contiguous for plain NCHW).
template <int T>
__global__ void __launch_bounds__(GN_THREADS) gn_stats_sp(const void *x, segrt_dtype xt, gngeom g, float2 *part)
{
    __shared__ mstat sh[GN_THREADS];
    ll bx = blockIdx.x;
    ll t = bx % g.tiles, nc = bx / g.tiles;
    ll n = nc / g.C, c = nc % g.C;
    ll r0 = t * g.rpt, r1 = r0 + g.rpt < g.S ? r0 + g.rpt : g.S;
    sh[threadIdx.x] = stats_rows<T>(x, xt, g.sp, n * g.xn + c * g.xc, r0 + threadIdx.x, r1, GN_THREADS, r0);
    block_merge_rows(sh, threadIdx.x, 0, GN_THREADS, 1);
    if (threadIdx.x == 0)
        part[nc * g.tiles + t] = make_float2(sh[0].mean, sh[0].m2);
}

struct dstat {
    double n, mean, m2;
};

__device__ __forceinline__ dstat dstat_merge(dstat a, dstat b)
{
    if (b.n == 0.0)
        return a;
    if (a.n == 0.0)
        return b;
    double n = a.n + b.n, d = b.mean - a.mean;
    dstat r;
    r.n = n;
    r.mean = a.mean + d * (b.n / n);
    r.m2 = a.m2 + b.m2 + d * d * (a.n * (b.n / n));
    return r;
}

// The warp's statistics merged into lane 0's, pairwise in a fixed order.
__device__ __forceinline__ dstat dstat_warp_merge(dstat a)
{
    for (int d = 16; d > 0; d >>= 1) {
        dstat b;
        b.n = __shfl_down_sync(0xffffffffu, a.n, d);
        b.mean = __shfl_down_sync(0xffffffffu, a.mean, d);
        b.m2 = __shfl_down_sync(0xffffffffu, a.m2, d);
        a = dstat_merge(a, b);
    }
    return a;
}

// From lane 0's statistics of group (n, channels c0 ..): ab[n * C + c] =
// (mean_hi, mean_lo, a, bias[c]) with a = scale[c] / std. A whole warp.
__device__ __forceinline__ void gn_write_ab(const gngeom &g, dstat a, ll n, ll c0, const float *scale,
                                            const float *bias, double eps, float4 *ab)
{
    const int lane = threadIdx.x & 31;
    const double mean = __shfl_sync(0xffffffffu, a.mean, 0);
    const double var = __shfl_sync(0xffffffffu, a.n > 0.0 ? a.m2 / a.n : 0.0, 0);
    const double inv = 1.0 / sqrt(var + eps);
    const float hi = (float)mean, lo = (float)(mean - (double)hi);
    for (ll k = lane; k < g.cg; k += 32) {
        const ll c = c0 + k;
        ab[n * g.C + c] = make_float4(hi, lo, (float)((double)scale[c] * inv), bias[c]);
    }
}

// 2: a warp per (n, group); writes ab (gn_write_ab).
__global__ void gn_combine(gngeom g, const float2 *part, const float *scale, const float *bias, double eps,
                           float4 *ab)
{
    int lane = threadIdx.x & 31;
    ll w = (ll)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (w >= g.N * g.groups)
        return;
    ll n = w / g.groups, gi = w % g.groups;
    ll c0 = gi * g.cg;
    ll count = g.cg * g.tiles;
    dstat a = {0.0, 0.0, 0.0};
    for (ll q = lane; q < count; q += 32) {
        ll c = c0 + q / g.tiles, t = q % g.tiles;
        ll rows = g.S - t * g.rpt < g.rpt ? g.S - t * g.rpt : g.rpt;
        float2 pm = part[(n * g.C + c) * g.tiles + t];
        dstat b = {(double)rows, (double)pm.x, (double)pm.y};
        a = dstat_merge(a, b);
    }
    gn_write_ab(g, dstat_warp_merge(a), n, c0, scale, bias, eps, ab);
}

// y = act(((x - mean_hi) - mean_lo) * a + bias) for rows r0, r0 + step, ...
// < r1 of one (n, c), GN_UNROLL rows loaded at a time.
template <int TX, int TY>
__device__ __forceinline__ void apply_rows(const void *x, segrt_dtype xt, void *y, segrt_dtype yt, const dimlist &sp,
                                           ll xb, ll yb, ll r0, ll r1, ll step, float4 k, sgk_act act, float alpha)
{
    ll r = r0;
    for (; r + (GN_UNROLL - 1) * step < r1; r += GN_UNROLL * step) {
        float v[GN_UNROLL];
#pragma unroll
        for (int u = 0; u < GN_UNROLL; u++)
            v[u] = ldr<TX, float>(x, xt, xb + dl_offset1(sp, 0, r + u * step));
#pragma unroll
        for (int u = 0; u < GN_UNROLL; u++)
            stt<TY>(y, yt, yb + dl_offset1(sp, 1, r + u * step), act_apply(((v[u] - k.x) - k.y) * k.z + k.w, act, alpha));
    }
    for (; r < r1; r += step) {
        float v = ldr<TX, float>(x, xt, xb + dl_offset1(sp, 0, r));
        stt<TY>(y, yt, yb + dl_offset1(sp, 1, r), act_apply(((v - k.x) - k.y) * k.z + k.w, act, alpha));
    }
}

// 3, channels-last: block (n, chunk, tile); each thread keeps its channel's
// statistics.
template <int TX, int TY>
__global__ void __launch_bounds__(GN_THREADS) gn_apply_cl(const void *x, segrt_dtype xt, void *y, segrt_dtype yt,
                                                          gngeom g, const float4 *ab, sgk_act act, float alpha)
{
    ll bx = blockIdx.x;
    ll t = bx % g.tiles3, rest = bx / g.tiles3;
    int chunk = (int)(rest % g.nct);
    ll n = rest / g.nct;
    int tx = threadIdx.x % g.ct, ty = threadIdx.x / g.ct;
    ll c = (ll)chunk * g.ct + tx;
    if (ty >= g.ry || c >= g.C)
        return;
    ll r0 = t * g.rpt3, r1 = r0 + g.rpt3 < g.S ? r0 + g.rpt3 : g.S;
    apply_rows<TX, TY>(x, xt, y, yt, g.sp, n * g.xn + c, n * g.yn + c, r0 + ty, r1, g.ry, ab[n * g.C + c], act,
                       alpha);
}

// 3, other layouts: block (n, c, tile); threads across spatial positions.
template <int TX, int TY>
__global__ void __launch_bounds__(GN_THREADS) gn_apply_sp(const void *x, segrt_dtype xt, void *y, segrt_dtype yt,
                                                          gngeom g, const float4 *ab, sgk_act act, float alpha)
{
    ll bx = blockIdx.x;
    ll t = bx % g.tiles3, nc = bx / g.tiles3;
    ll n = nc / g.C, c = nc % g.C;
    ll r0 = t * g.rpt3, r1 = r0 + g.rpt3 < g.S ? r0 + g.rpt3 : g.S;
    apply_rows<TX, TY>(x, xt, y, yt, g.sp, n * g.xn + c * g.xc, n * g.yn + c * g.yc, r0 + threadIdx.x, r1, GN_THREADS,
                       ab[nc], act, alpha);
}

// Vectorized paths ----------------------------------------------------------------------
//
// For x of float16, bfloat16 or float32 read as 16-byte vectors (V = 8, 8
// or 4 elements), in two layouts:
//  - channels-last (CL): C contiguous, a multiple of V, and the spatial
//    dims one run of pixels with a stride that keeps vectors aligned. A
//    thread owns one vector of channels and walks pixels; a block is
//    (n, tile of pixels) with ry rows of C / V threads, so a warp reads
//    whole pixels, 16 bytes a thread. y may have a larger pixel stride (a
//    channel slice of a concatenation's buffer).
//  - spatial-contiguous (SP, plain NCHW): each (n, c) plane contiguous with
//    S a multiple of V. A thread walks vectors of one plane.
// The statistics keep gn_stats_*'s scheme (deviations from the tile's first
// value, chunks merged with Chan's formula, a fixed merge tree), one
// accumulator per channel; the partials have the same layout, so
// gn_combine serves both. The application computes what apply_rows does.

#define GNV_TARGET_BLOCKS 2048
#define GNV_UNROLL 4 // vectors loaded before they are used, per thread

enum { GNV_NONE, GNV_CL, GNV_SP };

struct gnvec {
    int kind;
    int cv, ry;     // CL: channel vectors per pixel, rows of threads per block
    ll px, py;      // CL: pixel strides of x and y, in elements
    ll tiles, rpt;  // statistics: tiles per sample (CL) or per plane (SP), rows per tile
    ll tiles3, rpt3; // application: likewise
};

static ll clamp_tiles(ll want, ll by_len)
{
    ll t = want < by_len ? want : by_len;
    return t < 1 ? 1 : t;
}

// Plans the vectorized statistics for x (g from gn_plan); the kind is
// GNV_NONE where x does not qualify. Geometry only: base addresses and y
// are checked at launch.
static void gnv_plan(const sgk_view *x, const gngeom *g, gnvec *v)
{
    memset(v, 0, sizeof *v);
    ll V = vec16_width(x->dtype);
    // (A batch of one never steps along dim 0: its stride does not matter.)
    if (V == 0 || g->S == 0 || g->sp.n > 1 || (g->N > 1 && g->xn % V != 0))
        return;
    if (g->cl) {
        v->px = g->sp.n ? g->sp.s[0][0] : 0;
        v->py = g->sp.n ? g->sp.s[1][0] : 0;
        if (g->C % V != 0 || g->C / V > GN_THREADS || v->px % V != 0)
            return;
        v->cv = (int)(g->C / V);
        v->ry = GN_THREADS / v->cv;
        v->tiles = clamp_tiles(ceil_div(GNV_TARGET_BLOCKS, g->N), ceil_div(g->S, (ll)v->ry * 16));
        // At most CHUNK rows per thread (see gnv_stats_cl).
        ll least = ceil_div(g->S, (ll)v->ry * CHUNK);
        v->tiles = v->tiles > least ? v->tiles : least;
        v->rpt = ceil_div(g->S, v->tiles);
        v->tiles = ceil_div(g->S, v->rpt);
        v->rpt3 = (ll)v->ry * GN_APPLY_ROWS;
        v->tiles3 = ceil_div(g->S, v->rpt3);
        v->kind = GNV_CL;
        return;
    }
    if (g->sp.n != 1 || g->sp.s[0][0] != 1 || g->S % V != 0 || (g->C > 1 && g->xc % V != 0))
        return;
    ll sv = g->S / V, planes = g->N * g->C;
    ll tiles = clamp_tiles(ceil_div(GN_TARGET_BLOCKS, planes), ceil_div(sv, GN_THREADS * 8));
    ll rptv = ceil_div(sv, tiles);
    v->tiles = ceil_div(sv, rptv);
    v->rpt = rptv * V;
    v->rpt3 = (ll)GN_THREADS * GNV_UNROLL * 2 * V;
    v->tiles3 = ceil_div(g->S, v->rpt3);
    v->kind = GNV_SP;
}

// Whether y (same dims as x) can be written by the vectorized application.
static bool gnv_apply_ok(const gnvec *v, const gngeom *g, const sgk_view *x, const sgk_view *y)
{
    ll V = vec16_width(x->dtype);
    if (v->kind == GNV_NONE || y->dtype != x->dtype || !aligned16(y->data) || (g->N > 1 && g->yn % V != 0))
        return false;
    if (v->kind == GNV_CL)
        return g->cl_apply && v->py % V == 0;
    return (g->sp.n == 1 && g->sp.s[1][0] == 1) && (g->C == 1 || g->yc % V == 0);
}

template <int XT, int V> __device__ __forceinline__ void vadd(uint4 raw, const float *k, float *s1, float *s2)
{
    float val[V];
    vec16_unpack<XT>(raw, val);
#pragma unroll
    for (int j = 0; j < V; j++) {
        float d = val[j] - k[j];
        s1[j] += d;
        s2[j] += d * d;
    }
}

// 1, CL: block (n, tile); thread (tx: channel vector, ty: row of pixels).
// The plan keeps a thread's rows within one chunk (rpt <= ry * CHUNK), so
// its sums need no merging on the way: only k, s1 and s2 per channel live
// in registers, next to the loads in flight.
template <int XT>
__global__ void __launch_bounds__(GN_THREADS) gnv_stats_cl(const void *x, gngeom g, gnvec v, float2 *part)
{
    constexpr int V = V16<XT>();
    // Entry (row ty, channel c) at sh[ty * C + c].
    __shared__ mstat sh[GN_THREADS * V];
    ll t = blockIdx.x % v.tiles, n = blockIdx.x / v.tiles;
    int tx = threadIdx.x % v.cv, ty = threadIdx.x / v.cv;
    bool active = ty < v.ry;
    ll r0 = t * v.rpt, r1 = r0 + v.rpt < g.S ? r0 + v.rpt : g.S;
    // Vector indices: pixel r of this thread's channels at xb[r * pv].
    const uint4 *xb = (const uint4 *)x + (n * g.xn + (ll)tx * V) / V;
    const ll pv = v.px / V;
    if (active) {
        float k[V], s1[V], s2[V];
        vec16_unpack<XT>(xb[r0 * pv], k);
#pragma unroll
        for (int j = 0; j < V; j++)
            s1[j] = s2[j] = 0.0f;
        int rows = r0 + ty < r1 ? (int)((r1 - r0 - ty + v.ry - 1) / v.ry) : 0;
        const uint4 *p = xb + (r0 + ty) * pv;
        const ll step = (ll)v.ry * pv;
        int i = 0;
        for (; i + GNV_UNROLL <= rows; i += GNV_UNROLL) {
            uint4 raw[GNV_UNROLL];
#pragma unroll
            for (int u = 0; u < GNV_UNROLL; u++)
                raw[u] = p[(i + u) * step];
#pragma unroll
            for (int u = 0; u < GNV_UNROLL; u++)
                vadd<XT, V>(raw[u], k, s1, s2);
        }
        for (; i < rows; i++)
            vadd<XT, V>(p[i * step], k, s1, s2);
        mstat *mine = sh + ty * g.C + tx * V;
#pragma unroll
        for (int j = 0; j < V; j++) {
            mstat z = {0.0f, 0.0f, 0.0f};
            mine[j] = rows ? mstat_chunk((float)rows, s1[j], s2[j], k[j]) : z;
        }
    }
    // Rows of partials merged pairwise, in a fixed order.
    int pw = 1;
    while (pw < v.ry)
        pw *= 2;
    for (int h = pw / 2; h > 0; h /= 2) {
        __syncthreads();
        if (active && ty < h && ty + h < v.ry) {
#pragma unroll
            for (int j = 0; j < V; j++) {
                ll a = (ll)ty * g.C + tx * V + j;
                sh[a] = mstat_merge(sh[a], sh[a + (ll)h * g.C]);
            }
        }
    }
    __syncthreads();
    if (active && ty == 0) {
#pragma unroll
        for (int j = 0; j < V; j++) {
            mstat m = sh[tx * V + j];
            part[(n * g.C + tx * V + j) * v.tiles + t] = make_float2(m.mean, m.m2);
        }
    }
}

// 1, SP: block (n, c, tile); threads across the plane's vectors.
template <int XT>
__global__ void __launch_bounds__(GN_THREADS) gnv_stats_sp(const void *x, gngeom g, gnvec v, float2 *part)
{
    constexpr int V = V16<XT>();
    __shared__ mstat sh[GN_THREADS];
    ll t = blockIdx.x % v.tiles, nc = blockIdx.x / v.tiles;
    ll n = nc / g.C, c = nc % g.C;
    ll r0 = t * v.rpt, r1 = r0 + v.rpt < g.S ? r0 + v.rpt : g.S; // multiples of V
    const uint4 *xb = (const uint4 *)x + (n * g.xn + c * g.xc) / V;
    float first[V];
    vec16_unpack<XT>(xb[r0 / V], first);
    macc a;
    macc_init(&a, first[0]);
    ll q = r0 / V + threadIdx.x, q1 = r1 / V;
    for (; q + (GNV_UNROLL - 1) * GN_THREADS < q1; q += GNV_UNROLL * GN_THREADS) {
        uint4 raw[GNV_UNROLL];
#pragma unroll
        for (int u = 0; u < GNV_UNROLL; u++)
            raw[u] = xb[q + u * GN_THREADS];
#pragma unroll
        for (int u = 0; u < GNV_UNROLL; u++) {
            float val[V];
            vec16_unpack<XT>(raw[u], val);
#pragma unroll
            for (int j = 0; j < V; j++)
                macc_add(&a, val[j]);
            macc_check(&a);
        }
    }
    for (; q < q1; q += GN_THREADS) {
        float val[V];
        vec16_unpack<XT>(xb[q], val);
#pragma unroll
        for (int j = 0; j < V; j++)
            macc_add(&a, val[j]);
        macc_check(&a);
    }
    sh[threadIdx.x] = macc_done(&a);
    block_merge_rows(sh, threadIdx.x, 0, GN_THREADS, 1);
    if (threadIdx.x == 0)
        part[nc * v.tiles + t] = make_float2(sh[0].mean, sh[0].m2);
}

// y = act(((x - mean_hi) - mean_lo) * a + bias) on one vector, k[j] the
// (mean_hi, mean_lo, a, bias) of its element j's channel.
template <int XT, int V>
__device__ __forceinline__ uint4 vapply(uint4 raw, const float4 *k, sgk_act act, float alpha)
{
    float val[V];
    vec16_unpack<XT>(raw, val);
#pragma unroll
    for (int j = 0; j < V; j++)
        val[j] = act_apply(((val[j] - k[j].x) - k[j].y) * k[j].z + k[j].w, act, alpha);
    return vec16_pack<XT>(val);
}

// 3, CL: block (n, tile); each thread keeps its channels' coefficients.
template <int XT>
__global__ void __launch_bounds__(GN_THREADS) gnv_apply_cl(const void *x, void *y, gngeom g, gnvec v,
                                                           const float4 *ab, sgk_act act, float alpha)
{
    constexpr int V = V16<XT>();
    ll t = blockIdx.x % v.tiles3, n = blockIdx.x / v.tiles3;
    int tx = threadIdx.x % v.cv, ty = threadIdx.x / v.cv;
    ll r0 = t * v.rpt3 + ty, r1 = t * v.rpt3 + v.rpt3 < g.S ? t * v.rpt3 + v.rpt3 : g.S;
    if (ty >= v.ry || r0 >= r1)
        return;
    float4 k[V];
#pragma unroll
    for (int j = 0; j < V; j++)
        k[j] = ab[n * g.C + tx * V + j];
    const uint4 *xp = (const uint4 *)x + (n * g.xn + (ll)tx * V) / V + r0 * (v.px / V);
    uint4 *yp = (uint4 *)y + (n * g.yn + (ll)tx * V) / V + r0 * (v.py / V);
    const ll xs = (ll)v.ry * (v.px / V), ys = (ll)v.ry * (v.py / V);
    ll rows = (r1 - r0 + v.ry - 1) / v.ry, i = 0;
    for (; i + GNV_UNROLL <= rows; i += GNV_UNROLL) {
        uint4 raw[GNV_UNROLL];
#pragma unroll
        for (int u = 0; u < GNV_UNROLL; u++)
            raw[u] = xp[(i + u) * xs];
#pragma unroll
        for (int u = 0; u < GNV_UNROLL; u++)
            yp[(i + u) * ys] = vapply<XT, V>(raw[u], k, act, alpha);
    }
    for (; i < rows; i++)
        yp[i * ys] = vapply<XT, V>(xp[i * xs], k, act, alpha);
}

// 3, SP: block (n, c, tile); threads across the plane's vectors.
template <int XT>
__global__ void __launch_bounds__(GN_THREADS) gnv_apply_sp(const void *x, void *y, gngeom g, gnvec v,
                                                           const float4 *ab, sgk_act act, float alpha)
{
    constexpr int V = V16<XT>();
    ll t = blockIdx.x % v.tiles3, nc = blockIdx.x / v.tiles3;
    ll n = nc / g.C, c = nc % g.C;
    float4 k[V];
    float4 kc = ab[nc];
#pragma unroll
    for (int j = 0; j < V; j++)
        k[j] = kc;
    const uint4 *xb = (const uint4 *)x + (n * g.xn + c * g.xc) / V;
    uint4 *yb = (uint4 *)y + (n * g.yn + c * g.yc) / V;
    ll q = t * v.rpt3 / V + threadIdx.x;
    ll q1 = (t * v.rpt3 + v.rpt3 < g.S ? t * v.rpt3 + v.rpt3 : g.S) / V;
    for (; q + (GNV_UNROLL - 1) * GN_THREADS < q1; q += GNV_UNROLL * GN_THREADS) {
        uint4 raw[GNV_UNROLL];
#pragma unroll
        for (int u = 0; u < GNV_UNROLL; u++)
            raw[u] = xb[q + u * GN_THREADS];
#pragma unroll
        for (int u = 0; u < GNV_UNROLL; u++)
            yb[q + u * GN_THREADS] = vapply<XT, V>(raw[u], k, act, alpha);
    }
    for (; q < q1; q += GN_THREADS)
        yb[q] = vapply<XT, V>(xb[q], k, act, alpha);
}

template <int XT>
static segrt_status gnv_stats_launch(cudaStream_t stream, const sgk_view *x, const gngeom &g, const gnvec &v,
                                     float2 *part)
{
    if (v.kind == GNV_CL) {
        gnv_stats_cl<XT><<<(unsigned)(g.N * v.tiles), GN_THREADS, 0, stream>>>(x->data, g, v, part);
        return launched("gnv_stats_cl");
    }
    gnv_stats_sp<XT><<<(unsigned)(g.N * g.C * v.tiles), GN_THREADS, 0, stream>>>(x->data, g, v, part);
    return launched("gnv_stats_sp");
}

template <int XT>
static segrt_status gnv_apply_launch(cudaStream_t stream, const sgk_view *y, const sgk_view *x, const gngeom &g,
                                     const gnvec &v, const float4 *ab, sgk_act act, float alpha)
{
    if (v.kind == GNV_CL) {
        gnv_apply_cl<XT><<<(unsigned)(g.N * v.tiles3), GN_THREADS, 0, stream>>>(x->data, y->data, g, v, ab, act,
                                                                                alpha);
        return launched("gnv_apply_cl");
    }
    gnv_apply_sp<XT><<<(unsigned)(g.N * g.C * v.tiles3), GN_THREADS, 0, stream>>>(x->data, y->data, g, v, ab, act,
                                                                                  alpha);
    return launched("gnv_apply_sp");
}

#define GNF_MAX_SMS 264 // the one pass's most blocks (gnf_cl; its partials are sized for them)
#define GNF_MAX_P 32    // ... and blocks a sample (see gnf_plan)

// Scratch: per (n, c, tile) mean and M2, then per (n, c) the mean (hi, lo),
// a and bias (rounded up so that the float4 array stays aligned). Sized
// for the larger of the general and the vectorized tilings: which one runs
// is only known at launch (it depends on the base addresses).
static size_t gn_part_bytes(const gngeom *g, const gnvec *v)
{
    ll tiles = v->kind != GNV_NONE && v->tiles > g->tiles ? v->tiles : g->tiles;
    ll one_pass = g->N > 0 ? ceil_div(GNF_MAX_SMS, g->N) : 1; // gnf_cl's blocks per sample, at most
    one_pass = one_pass < GNF_MAX_P ? one_pass : GNF_MAX_P;
    tiles = tiles > one_pass ? tiles : one_pass;
    return ((size_t)(g->N * g->C * tiles) * sizeof(float2) + 15) & ~(size_t)15;
}

extern "C" size_t sgk_group_norm_scratch(const sgk_view *x, int64_t groups)
{
    gngeom g;
    if (!gn_plan(x, NULL, groups, &g))
        return 0;
    gnvec v;
    gnv_plan(x, &g, &v);
    return gn_part_bytes(&g, &v) + (size_t)(g.N * g.C) * sizeof(float4);
}

template <int T>
static segrt_status gn_stats_launch(cudaStream_t stream, const sgk_view *x, const gngeom &g, float2 *part)
{
    if (g.cl) {
        gn_stats_cl<T><<<(unsigned)(g.N * g.nct * g.tiles), GN_THREADS, 0, stream>>>(x->data, x->dtype, g, part);
        return launched("gn_stats_cl");
    }
    gn_stats_sp<T><<<(unsigned)(g.N * g.C * g.tiles), GN_THREADS, 0, stream>>>(x->data, x->dtype, g, part);
    return launched("gn_stats_sp");
}

template <int TX, int TY>
static segrt_status gn_apply_launch(cudaStream_t stream, const sgk_view *y, const sgk_view *x, const gngeom &g,
                                    const float4 *ab, sgk_act act, float alpha)
{
    if (g.cl_apply) {
        gn_apply_cl<TX, TY><<<(unsigned)(g.N * g.nct * g.tiles3), GN_THREADS, 0, stream>>>(
            x->data, x->dtype, y->data, y->dtype, g, ab, act, alpha);
        return launched("gn_apply_cl");
    }
    gn_apply_sp<TX, TY><<<(unsigned)(g.N * g.C * g.tiles3), GN_THREADS, 0, stream>>>(x->data, x->dtype, y->data,
                                                                                    y->dtype, g, ab, act, alpha);
    return launched("gn_apply_sp");
}

// The general application, with the storage dtypes fixed where x and y
// share one.
static segrt_status gn_apply_any(cudaStream_t stream, const sgk_view *y, const sgk_view *x, const gngeom &g,
                                 const float4 *ab, sgk_act act, float act_alpha)
{
    segrt_dtype same = x->dtype == y->dtype ? x->dtype : SEGRT_DTYPE_UNDEFINED;
    switch (same) {
    case SEGRT_DTYPE_FLOAT16:
        return gn_apply_launch<SEGRT_DTYPE_FLOAT16, SEGRT_DTYPE_FLOAT16>(stream, y, x, g, ab, act, act_alpha);
    case SEGRT_DTYPE_BFLOAT16:
        return gn_apply_launch<SEGRT_DTYPE_BFLOAT16, SEGRT_DTYPE_BFLOAT16>(stream, y, x, g, ab, act, act_alpha);
    case SEGRT_DTYPE_FLOAT32:
        return gn_apply_launch<SEGRT_DTYPE_FLOAT32, SEGRT_DTYPE_FLOAT32>(stream, y, x, g, ab, act, act_alpha);
    default: return gn_apply_launch<0, 0>(stream, y, x, g, ab, act, act_alpha);
    }
}

// The application: vectorized where v and y allow it (v.kind GNV_NONE:
// never), else the general kernels.
static segrt_status gn_apply_best(cudaStream_t stream, const sgk_view *y, const sgk_view *x, const gngeom &g,
                                  const gnvec &v, const float4 *ab, sgk_act act, float act_alpha)
{
    if (gnv_apply_ok(&v, &g, x, y)) {
        switch (x->dtype) {
        case SEGRT_DTYPE_FLOAT16: return gnv_apply_launch<SEGRT_DTYPE_FLOAT16>(stream, y, x, g, v, ab, act, act_alpha);
        case SEGRT_DTYPE_BFLOAT16:
            return gnv_apply_launch<SEGRT_DTYPE_BFLOAT16>(stream, y, x, g, v, ab, act, act_alpha);
        default: return gnv_apply_launch<SEGRT_DTYPE_FLOAT32>(stream, y, x, g, v, ab, act, act_alpha);
        }
    }
    return gn_apply_any(stream, y, x, g, ab, act, act_alpha);
}

// The vectorized statistics (v.kind set, x aligned), the combination on
// their tiling, then the vectorized application where y allows it.
static segrt_status gnv_launch(cudaStream_t stream, const sgk_view *y, const sgk_view *x, const gngeom &g,
                               const gnvec &v, float2 *part, float4 *ab, const float *scale, const float *bias,
                               float eps, sgk_act act, float act_alpha)
{
    segrt_status s;
    switch (x->dtype) {
    case SEGRT_DTYPE_FLOAT16: s = gnv_stats_launch<SEGRT_DTYPE_FLOAT16>(stream, x, g, v, part); break;
    case SEGRT_DTYPE_BFLOAT16: s = gnv_stats_launch<SEGRT_DTYPE_BFLOAT16>(stream, x, g, v, part); break;
    default: s = gnv_stats_launch<SEGRT_DTYPE_FLOAT32>(stream, x, g, v, part); break;
    }
    if (s != SEGRT_OK)
        return s;
    gngeom gc = g; // the combination reads the partials on the tiling that wrote them
    gc.tiles = v.tiles;
    gc.rpt = v.rpt;
    gn_combine<<<(unsigned)ceil_div(g.N * g.groups, 8), 256, 0, stream>>>(gc, part, scale, bias, (double)eps, ab);
    if ((s = launched("gn_combine")) != SEGRT_OK)
        return s;
    return gn_apply_best(stream, y, x, g, v, ab, act, act_alpha);
}

// One pass: InstanceNormalization, channels-last --------------------------------------
//
// Where the whole grid fits on the device at once (a cooperative launch),
// one kernel does all three steps and reads x once: a block takes a range
// of one sample's positions, sums them as gnv_stats_cl does while keeping
// them in shared memory, writes its per-channel (mean, M2), waits for the
// grid, merges its sample's partials (every block of the sample the same
// way, in the same order as gn_combine: double, Chan's formula), and
// normalises its positions from shared memory (those that did not fit are
// read again). For the small norms after cuDNN's convolutions, three
// kernels, each near its own floor, take more than twice a read and a
// write of x.
#define GNF_THREADS 512
#define GNF_WARPS (GNF_THREADS / 32)
#define GNF_SMEM_MAX (227 * 1024)

struct gnfgeom {
    int P;          // blocks per sample
    int rpb;        // positions per block
    int cache_rows; // positions a block keeps in shared memory
    int cv, ry;     // threads: channel vectors across, rows of threads
};

template <int XT>
__global__ void __launch_bounds__(GNF_THREADS, 1)
    gnf_cl(const void *x, void *y, gngeom g, gnvec v, gnfgeom f, const float *scale, const float *bias, double eps,
           sgk_act act, float alpha, float2 *part)
{
    constexpr int V = V16<XT>();
    extern __shared__ __align__(16) unsigned char gnf_smem[];
    uint4 *cache = (uint4 *)gnf_smem;                                // [cache_rows][cv]
    float4 *coef = (float4 *)(cache + (size_t)f.cache_rows * f.cv);  // [C]
    mstat *red = (mstat *)(coef + g.C);                              // [warps][C]
    const int C = (int)g.C, n = blockIdx.x / f.P, p = blockIdx.x % f.P;
    const int tx = threadIdx.x % f.cv, ty = threadIdx.x / f.cv, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const ll r0 = (ll)p * f.rpb, r1 = r0 + f.rpb < g.S ? r0 + f.rpb : g.S;
    const int rows = r0 + ty < r1 ? (int)((r1 - r0 - ty + f.ry - 1) / f.ry) : 0;
    const uint4 *xb = (const uint4 *)x + ((ll)n * g.xn + (ll)tx * V) / V;
    const ll pv = v.px / V;
    // 1. This thread's rows: deviations from the block's first row, summed
    // (rows <= CHUNK: gnf_plan), and kept where they fit.
    mstat m[V];
    {
        float k[V], s1[V], s2[V];
        vec16_unpack<XT>(xb[r0 * pv], k);
#pragma unroll
        for (int j = 0; j < V; j++)
            s1[j] = s2[j] = 0.0f;
        int i = 0;
        for (; i + GNV_UNROLL <= rows; i += GNV_UNROLL) {
            uint4 raw[GNV_UNROLL];
#pragma unroll
            for (int u = 0; u < GNV_UNROLL; u++)
                raw[u] = xb[(r0 + ty + (ll)(i + u) * f.ry) * pv];
#pragma unroll
            for (int u = 0; u < GNV_UNROLL; u++) {
                vadd<XT, V>(raw[u], k, s1, s2);
                const int lr = ty + (i + u) * f.ry;
                if (lr < f.cache_rows)
                    cache[lr * f.cv + tx] = raw[u];
            }
        }
        for (; i < rows; i++) {
            const uint4 raw = xb[(r0 + ty + (ll)i * f.ry) * pv];
            vadd<XT, V>(raw, k, s1, s2);
            const int lr = ty + i * f.ry;
            if (lr < f.cache_rows)
                cache[lr * f.cv + tx] = raw;
        }
#pragma unroll
        for (int j = 0; j < V; j++) {
            const mstat z = {0.0f, 0.0f, 0.0f};
            m[j] = rows ? mstat_chunk((float)rows, s1[j], s2[j], k[j]) : z;
        }
    }
    // The warp's rows of threads merged pairwise (lanes cv apart hold the
    // same channels; cv is a power of two up to 32: gnf_plan), then the
    // warps' in order by one thread a channel.
    for (int d = f.cv; d < 32; d <<= 1)
#pragma unroll
        for (int j = 0; j < V; j++) {
            mstat b;
            b.n = __shfl_down_sync(0xffffffffu, m[j].n, d);
            b.mean = __shfl_down_sync(0xffffffffu, m[j].mean, d);
            b.m2 = __shfl_down_sync(0xffffffffu, m[j].m2, d);
            if (lane + d < 32)
                m[j] = mstat_merge(m[j], b);
        }
    if (lane < f.cv) {
#pragma unroll
        for (int j = 0; j < V; j++)
            red[warp * C + tx * V + j] = m[j];
    }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += GNF_THREADS) {
        mstat a = red[c];
        for (int w = 1; w < GNF_WARPS; w++)
            a = mstat_merge(a, red[w * C + c]);
        part[((ll)n * C + c) * f.P + p] = make_float2(a.mean, a.m2);
    }
    // 2. Every block's partials, then the sample's (mean, a, bias).
    cooperative_groups::this_grid().sync();
    for (int c = threadIdx.x; c < C; c += GNF_THREADS) {
        dstat a = {0.0, 0.0, 0.0};
        for (int q = 0; q < f.P; q++) {
            const ll left = g.S - (ll)q * f.rpb;
            const float2 pm = part[((ll)n * C + c) * f.P + q];
            const dstat b = {(double)(left < f.rpb ? left : f.rpb), (double)pm.x, (double)pm.y};
            a = dstat_merge(a, b);
        }
        const double var = a.n > 0.0 ? a.m2 / a.n : 0.0, inv = 1.0 / sqrt(var + eps);
        const float hi = (float)a.mean, lo = (float)(a.mean - (double)hi);
        coef[c] = make_float4(hi, lo, (float)((double)scale[c] * inv), bias[c]);
    }
    __syncthreads();
    // 3. The same rows normalised: from shared memory where they were kept.
    float4 k[V];
#pragma unroll
    for (int j = 0; j < V; j++)
        k[j] = coef[tx * V + j];
    uint4 *yb = (uint4 *)y + ((ll)n * g.yn + (ll)tx * V) / V;
    const ll py = v.py / V;
    for (int i = 0; i < rows; i++) {
        const int lr = ty + i * f.ry;
        const ll r = r0 + lr;
        const uint4 raw = lr < f.cache_rows ? cache[lr * f.cv + tx] : xb[r * pv];
        yb[r * py] = vapply<XT, V>(raw, k, act, alpha);
    }
}

// The one pass's grid for x on sm_count multiprocessors with smem_limit
// bytes of shared memory a block (InstanceNorm, channels-last, y as
// gnv_apply_cl writes it), or false.
static bool gnf_plan(const gngeom &g, const gnvec &v, const sgk_view *x, const sgk_view *y, int sm_count,
                     int smem_limit, gnfgeom *f, size_t *smem)
{
    if (sm_count < 1 || v.kind != GNV_CL || g.groups != g.C || !gnv_apply_ok(&v, &g, x, y))
        return false;
    const ll V = vec16_width(x->dtype);
    const int cv = (int)(g.C / V);
    if (cv < 1 || cv > 32 || (cv & (cv - 1)) != 0)
        return false;
    f->cv = cv;
    f->ry = GNF_THREADS / cv;
    const int sms = sm_count < GNF_MAX_SMS ? sm_count : GNF_MAX_SMS;
    const ll P = sms / g.N, rpb = ceil_div(g.S, P);
    // At least a block a sample (all resident at once), at most GNF_MAX_P:
    // each block merges its sample's partials in double, one after
    // another, so with many blocks a sample (a batch of one) the merge
    // costs more than the three kernels do.
    // Rows a thread: one chunk of the statistics, as gnv_stats_cl keeps them.
    if (P < 1 || P > GNF_MAX_P || rpb > INT32_MAX || ceil_div(rpb, f->ry) > CHUNK)
        return false;
    f->rpb = (int)rpb;
    f->P = (int)ceil_div(g.S, rpb);
    const size_t fixed = (size_t)g.C * sizeof(float4) + (size_t)GNF_WARPS * g.C * sizeof(mstat);
    const size_t row = (size_t)cv * 16;
    const size_t most = smem_cap(GNF_SMEM_MAX, smem_limit, 0);
    if (fixed + row > most)
        return false;
    const size_t fit = (most - fixed) / row;
    f->cache_rows = (int)(fit < (size_t)rpb ? fit : (size_t)rpb);
    *smem = fixed + (size_t)f->cache_rows * row;
    return true;
}

template <int XT>
static segrt_status gnf_launch(cudaStream_t stream, const sgk_view *y, const sgk_view *x, const gngeom &g,
                               const gnvec &v, const gnfgeom &f, size_t smem, const float *scale,
                               const float *bias, float eps, sgk_act act, float alpha, float2 *part)
{
    if (cudaFuncSetAttribute(gnf_cl<XT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             smem_opt_in_bytes(GNF_SMEM_MAX, 0)) != cudaSuccess)
        return launched("gnf_cl (shared memory)");
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(g.N * f.P));
    cfg.blockDim = dim3(GNF_THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    const double e = (double)eps;
    cudaLaunchKernelEx(&cfg, gnf_cl<XT>, x->data, y->data, g, v, f, scale, bias, e, act, alpha, part);
    return launched("gnf_cl");
}

extern "C" segrt_status sgk_group_norm(cudaStream_t stream, const sgk_view *y, const sgk_view *x, const float *scale,
                                       const float *bias, int64_t groups, float eps, sgk_act act, float act_alpha,
                                       int32_t one_pass_sms, int32_t one_pass_smem, void *scratch)
{
    if (!is_float(x->dtype) || !is_float(y->dtype) || y->rank != x->rank)
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_group_norm: unsupported views");
    for (int d = 0; d < x->rank; d++)
        if (x->dims[d] != y->dims[d])
            return sg_error(SEGRT_ERROR_INTERNAL, "sgk_group_norm: output dims differ from the input's");
    gngeom g;
    if (!gn_plan(x, y, groups, &g))
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_group_norm: %lld groups for a view of rank %d",
                        (long long)groups, x->rank);
    if (g.N * g.C * g.S == 0)
        return SEGRT_OK;
    gnvec v;
    gnv_plan(x, &g, &v);
    float2 *part = (float2 *)scratch;
    float4 *ab = (float4 *)((char *)scratch + gn_part_bytes(&g, &v));
    if (!aligned16(x->data))
        v.kind = GNV_NONE;
    gnfgeom f;
    size_t fsmem;
    if (gnf_plan(g, v, x, y, one_pass_sms, one_pass_smem, &f, &fsmem)) {
        switch (x->dtype) {
        case SEGRT_DTYPE_FLOAT16:
            return gnf_launch<SEGRT_DTYPE_FLOAT16>(stream, y, x, g, v, f, fsmem, scale, bias, eps, act, act_alpha, part);
        case SEGRT_DTYPE_BFLOAT16:
            return gnf_launch<SEGRT_DTYPE_BFLOAT16>(stream, y, x, g, v, f, fsmem, scale, bias, eps, act, act_alpha,
                                                    part);
        default:
            return gnf_launch<SEGRT_DTYPE_FLOAT32>(stream, y, x, g, v, f, fsmem, scale, bias, eps, act, act_alpha, part);
        }
    }
    segrt_status s;
    if (v.kind != GNV_NONE)
        return gnv_launch(stream, y, x, g, v, part, ab, scale, bias, eps, act, act_alpha);
    switch (x->dtype) {
    case SEGRT_DTYPE_FLOAT16: s = gn_stats_launch<SEGRT_DTYPE_FLOAT16>(stream, x, g, part); break;
    case SEGRT_DTYPE_BFLOAT16: s = gn_stats_launch<SEGRT_DTYPE_BFLOAT16>(stream, x, g, part); break;
    case SEGRT_DTYPE_FLOAT32: s = gn_stats_launch<SEGRT_DTYPE_FLOAT32>(stream, x, g, part); break;
    default: s = gn_stats_launch<0>(stream, x, g, part); break;
    }
    if (s != SEGRT_OK)
        return s;
    gn_combine<<<(unsigned)ceil_div(g.N * g.groups, 8), 256, 0, stream>>>(g, part, scale, bias, (double)eps, ab);
    if ((s = launched("gn_combine")) != SEGRT_OK)
        return s;
    return gn_apply_any(stream, y, x, g, ab, act, act_alpha);
}

// From a producer's per-tile statistics ------------------------------------------------

struct tgrid {
    int dims[3], tile[3], nt[3];
    ll T;           // tiles per sample (below 2^32: tgrid_make checks)
    fastdiv fnt[3]; // nt, for a tile's indices
    uint32_t whole; // every tile's positions where the tiles divide the dims, else 0
};

static bool tgrid_make(const sgk_tile_grid *in, tgrid *t)
{
    t->T = 1;
    for (int a = 0; a < 3; a++) {
        if (in->dims[a] < 1 || in->tile[a] < 1)
            return false;
        t->dims[a] = in->dims[a];
        t->tile[a] = in->tile[a];
        t->nt[a] = (int)ceil_div(in->dims[a], in->tile[a]);
        t->fnt[a] = fastdiv_make((uint32_t)t->nt[a]);
        t->T *= t->nt[a];
    }
    t->whole = 1;
    for (int a = 0; a < 3; a++)
        t->whole = t->dims[a] % t->tile[a] == 0 ? t->whole * (uint32_t)t->tile[a] : 0;
    return t->T <= (ll)UINT32_MAX;
}

extern "C" int64_t sgk_tile_grid_tiles(const sgk_tile_grid *grid)
{
    tgrid t;
    return tgrid_make(grid, &t) ? t.T : 0;
}

// Positions of tile q (within a sample) inside the image.
__device__ __forceinline__ uint32_t tgrid_count(const tgrid &t, uint32_t q)
{
    if (t.whole)
        return t.whole;
    uint32_t count = 1;
    for (int a = 2; a >= 0; a--) {
        const uint32_t next = fastdiv_div(q, t.fnt[a]);
        const int i = (int)(q - next * (uint32_t)t.nt[a]), left = t.dims[a] - i * t.tile[a];
        q = next;
        count *= (uint32_t)(left < t.tile[a] ? left : t.tile[a]);
    }
    return count;
}

#define GNT_THREADS 256

// Three double sums over the warp into lane 0, in a fixed order.
__device__ __forceinline__ void sums_warp_add(double &a, double &b, double &c)
{
    for (int d = 16; d > 0; d >>= 1) {
        a += __shfl_down_sync(0xffffffffu, a, d);
        b += __shfl_down_sync(0xffffffffu, b, d);
        c += __shfl_down_sync(0xffffffffu, c, d);
    }
}

// 2 on tile partials: a block per (n, group) writes the group's ab
// (gn_write_ab). A block, not gn_combine's warp: a convolution's tiles
// are small, so there are thousands per channel. Each thread sums its
// tiles about one reference, the group's first tile's mean: positions,
// sum n_i (m_i - ref) and sum (m2_i + n_i (m_i - ref)^2), in double, then
// a fixed tree over the block. Chan's pairwise merge divided once a tile
// and its tile indices were 64-bit divisions: an instruction-bound
// kernel. Where a channel's partials
// are 16-byte aligned (T even), two tiles load as one float4 and
// GNT_UNROLL loads are in flight before any is added (one at a time,
// the kernel stalled on them); where the tiles divide the image,
// every tile counts
// tgrid.whole positions.
#define GNT_UNROLL 4

struct tile_sums {
    double cnt, s1, s2;
};

__device__ __forceinline__ void tile_sums_add(tile_sums &a, const tgrid &tg, uint32_t t, float mean, float m2,
                                              double ref)
{
    const double w = (double)tgrid_count(tg, t), d = (double)mean - ref;
    a.cnt += w;
    a.s1 += w * d;
    a.s2 += (double)m2 + w * d * d;
}

__global__ void __launch_bounds__(GNT_THREADS) gn_combine_tiles(gngeom g, tgrid tg, const float2 *part,
                                                                const float *scale, const float *bias, double eps,
                                                                float4 *ab)
{
    __shared__ double sh[3][GNT_THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const ll n = blockIdx.x / g.groups, gi = blockIdx.x % g.groups, c0 = gi * g.cg;
    const uint32_t T = (uint32_t)tg.T;
    const double ref = (double)part[(n * g.C + c0) * tg.T].x;
    tile_sums acc = {0.0, 0.0, 0.0};
    const bool pairs = T % 2 == 0 && ((uintptr_t)part & 15) == 0;
    for (ll k = 0; k < g.cg; k++) {
        const float2 *pc = part + (n * g.C + c0 + k) * tg.T;
        if (pairs) {
            const float4 *p4 = (const float4 *)pc;
            const uint32_t T2 = T / 2;
            for (uint32_t t0 = threadIdx.x; t0 < T2; t0 += GNT_THREADS * GNT_UNROLL) {
                float4 v[GNT_UNROLL];
#pragma unroll
                for (int u = 0; u < GNT_UNROLL; u++)
                    if (t0 + u * GNT_THREADS < T2)
                        v[u] = p4[t0 + u * GNT_THREADS];
#pragma unroll
                for (int u = 0; u < GNT_UNROLL; u++) {
                    const uint32_t t = t0 + u * GNT_THREADS;
                    if (t < T2) {
                        tile_sums_add(acc, tg, 2 * t, v[u].x, v[u].y, ref);
                        tile_sums_add(acc, tg, 2 * t + 1, v[u].z, v[u].w, ref);
                    }
                }
            }
        } else {
            for (uint32_t t = threadIdx.x; t < T; t += GNT_THREADS) {
                const float2 pm = pc[t];
                tile_sums_add(acc, tg, t, pm.x, pm.y, ref);
            }
        }
    }
    double cnt = acc.cnt, s1 = acc.s1, s2 = acc.s2;
    sums_warp_add(cnt, s1, s2);
    if (lane == 0) {
        sh[0][warp] = cnt;
        sh[1][warp] = s1;
        sh[2][warp] = s2;
    }
    __syncthreads();
    if (warp != 0)
        return;
    const bool mine = lane < GNT_THREADS / 32;
    cnt = mine ? sh[0][lane] : 0.0;
    s1 = mine ? sh[1][lane] : 0.0;
    s2 = mine ? sh[2][lane] : 0.0;
    sums_warp_add(cnt, s1, s2);
    dstat a = {cnt, ref, 0.0};
    if (cnt > 0.0) {
        a.mean = ref + s1 / cnt;
        a.m2 = s2 - s1 * (s1 / cnt);
        a.m2 = a.m2 > 0.0 ? a.m2 : 0.0;
    }
    gn_write_ab(g, a, n, c0, scale, bias, eps, ab);
}

extern "C" size_t sgk_group_norm_partials_scratch(const sgk_view *x)
{
    return x->rank >= 2 ? (size_t)(x->dims[0] * x->dims[1]) * sizeof(float4) : 0;
}

// The combination alone: per (sample, channel) float4 (mean, its low
// part, scale / std, bias) into ab. g: planned over x (and y).
static segrt_status gn_partials_ab(cudaStream_t stream, const sgk_view *x, const gngeom &g, const float *scale,
                                   const float *bias, int64_t groups, float eps, const float *part,
                                   const sgk_tile_grid *grid, float4 *ab)
{
    tgrid tg;
    if (!tgrid_make(grid, &tg) || x->rank > 5)
        return sg_error(SEGRT_ERROR_INTERNAL,
                        "sgk_group_norm_partials: a tile grid it cannot take (%lld groups, a view of rank %d)",
                        (long long)groups, x->rank);
    // The grid must cover x's spatial dims exactly (aligned right).
    for (int a = 0; a < 3; a++) {
        const int d = x->rank - 3 + a;
        if ((d >= 2 ? x->dims[d] : 1) != tg.dims[a])
            return sg_error(SEGRT_ERROR_INTERNAL, "sgk_group_norm_partials: tile grid does not match the input");
    }
    if (g.N * g.groups > INT32_MAX)
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_group_norm_partials: %lld groups", (long long)(g.N * g.groups));
    if (g.N * g.C * g.S == 0)
        return SEGRT_OK;
    gn_combine_tiles<<<(unsigned)(g.N * g.groups), GNT_THREADS, 0, stream>>>(g, tg, (const float2 *)part, scale,
                                                                            bias, (double)eps, ab);
    return launched("gn_combine_tiles");
}

extern "C" segrt_status sgk_group_norm_partials_ab(cudaStream_t stream, const sgk_view *x, const float *scale,
                                                   const float *bias, int64_t groups, float eps, const float *part,
                                                   const sgk_tile_grid *grid, float *ab)
{
    gngeom g;
    if (!is_float(x->dtype) || !gn_plan(x, NULL, groups, &g))
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_group_norm_partials_ab: %lld groups for a view of rank %d",
                        (long long)groups, x->rank);
    return gn_partials_ab(stream, x, g, scale, bias, groups, eps, part, grid, (float4 *)ab);
}

extern "C" segrt_status sgk_group_norm_partials(cudaStream_t stream, const sgk_view *y, const sgk_view *x,
                                                const float *scale, const float *bias, int64_t groups, float eps,
                                                sgk_act act, float act_alpha, const float *part,
                                                const sgk_tile_grid *grid, void *scratch)
{
    if (!is_float(x->dtype) || !is_float(y->dtype) || y->rank != x->rank)
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_group_norm_partials: unsupported views");
    for (int d = 0; d < x->rank; d++)
        if (x->dims[d] != y->dims[d])
            return sg_error(SEGRT_ERROR_INTERNAL, "sgk_group_norm_partials: output dims differ from the input's");
    gngeom g;
    if (!gn_plan(x, y, groups, &g))
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_group_norm_partials: %lld groups for a view of rank %d",
                        (long long)groups, x->rank);
    float4 *ab = (float4 *)scratch;
    segrt_status s = gn_partials_ab(stream, x, g, scale, bias, groups, eps, part, grid, ab);
    if (s != SEGRT_OK || g.N * g.C * g.S == 0)
        return s;
    gnvec v;
    gnv_plan(x, &g, &v);
    if (!aligned16(x->data))
        v.kind = GNV_NONE;
    return gn_apply_best(stream, y, x, g, v, ab, act, act_alpha);
}

// A deferred normalisation applied -------------------------------------------------------
//
// y = act(((x - mean_hi) - mean_lo) * s + b) over channels [c_at, c_at +
// c_len), a copy of x elsewhere: what a reader that does not normalise as
// it reads gets (cuda_deferred_norm_apply). The plan's readers of a
// deferred norm take it themselves, so this is a fallback: one thread an
// element, any strides.

#define NA_RANK 5

struct nageom {
    int rank;
    ll dims[NA_RANK], xs[NA_RANK], ys[NA_RANK];
    ll total, c_at, c_len;
    segrt_dtype xt, yt;
};

__global__ void norm_apply_ab(const void *x, void *y, const float4 *ab, nageom g, sgk_act act, float alpha)
{
    for (ll i = (ll)blockIdx.x * blockDim.x + threadIdx.x; i < g.total; i += (ll)gridDim.x * blockDim.x) {
        ll rest = i, xo = 0, yo = 0, co[NA_RANK];
        for (int d = g.rank - 1; d >= 0; d--) {
            co[d] = rest % g.dims[d];
            rest /= g.dims[d];
            xo += co[d] * g.xs[d];
            yo += co[d] * g.ys[d];
        }
        float v = ld<float>(x, g.xt, xo);
        const ll c = co[1] - g.c_at;
        if (c >= 0 && c < g.c_len) {
            const float4 k = ab[co[0] * g.c_len + c];
            v = act_apply(((v - k.x) - k.y) * k.z + k.w, act, alpha);
        }
        st<float>(y, g.yt, yo, v);
    }
}

extern "C" segrt_status sgk_norm_apply_ab(cudaStream_t stream, const sgk_view *y, const sgk_view *x, const float *ab,
                                          int64_t c_at, int64_t c_len, sgk_act act, float act_alpha)
{
    if (x->rank != y->rank || x->rank < 2 || x->rank > NA_RANK || !is_float(x->dtype) || !is_float(y->dtype) ||
        c_at < 0 || c_len < 0 || c_at + c_len > x->dims[1])
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_norm_apply_ab: unsupported views");
    nageom g;
    memset(&g, 0, sizeof g);
    g.rank = x->rank;
    g.total = 1;
    for (int d = 0; d < g.rank; d++) {
        if (x->dims[d] != y->dims[d])
            return sg_error(SEGRT_ERROR_INTERNAL, "sgk_norm_apply_ab: output dims differ from the input's");
        g.dims[d] = x->dims[d];
        g.xs[d] = x->strides[d];
        g.ys[d] = y->strides[d];
        g.total *= x->dims[d];
    }
    if (g.total == 0)
        return SEGRT_OK;
    g.c_at = c_at;
    g.c_len = c_len;
    g.xt = x->dtype;
    g.yt = y->dtype;
    ll blocks = ceil_div(g.total, 256);
    blocks = blocks > (1 << 20) ? (1 << 20) : blocks;
    norm_apply_ab<<<(unsigned)blocks, 256, 0, stream>>>(x->data, y->data, (const float4 *)ab, g, act, act_alpha);
    return launched("norm_apply_ab");
}

// Layer normalisation ---------------------------------------------------------------------
//
// A warp per row (a block for long rows when there are few of them) reads
// its row three times: the mean, the mean of squared deviations from it
// (two passes, as the reference), then y = (x - mean) * inv_std * scale +
// bias. The row's dims are walked in x's memory order.

struct lngeom {
    dimlist outer; // dims [0, axis); s: x, y, mean, inv_std
    dimlist inner; // dims [axis, rank); s: x, y, scale, bias
    ll R, L;
    float eps;
};

struct lnio {
    const void *x;
    segrt_dtype xt;
    void *y;
    segrt_dtype yt;
    void *mean, *inv;
    segrt_dtype mt, it;
    const void *scale, *bias;
    segrt_dtype st, bt;
};

// The sum over a group of `width` threads (a warp, or the whole block),
// in a fixed order.
__device__ __forceinline__ float group_sum(float v, int width, float *sh)
{
    for (int d = 16; d > 0; d >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, d);
    if (width == 32)
        return v;
    __syncthreads(); // sh may still be read from the previous call
    if ((threadIdx.x & 31) == 0)
        sh[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = sh[0];
    for (int k = 1; k < (int)(blockDim.x >> 5); k++)
        r += sh[k];
    return r;
}

#define LN_BATCH 4

__global__ void layer_norm_rows(lnio io, lngeom g, int width)
{
    __shared__ float sh[32];
    int lane = threadIdx.x % width;
    ll row = (ll)blockIdx.x * (blockDim.x / width) + threadIdx.x / width;
    if (row >= g.R)
        return; // a whole warp or a whole block: no barrier is left waiting
    ll ob[NSTR];
    dl_offsets(g.outer, 4, row, ob);
    // Loads LN_BATCH elements before using them: several in flight.
    float sum = 0.0f;
    ll i = lane;
    for (; i + (LN_BATCH - 1) * width < g.L; i += LN_BATCH * width) {
        float v[LN_BATCH];
#pragma unroll
        for (int u = 0; u < LN_BATCH; u++)
            v[u] = ld<float>(io.x, io.xt, ob[0] + dl_offset1(g.inner, 0, i + u * width));
#pragma unroll
        for (int u = 0; u < LN_BATCH; u++)
            sum += v[u];
    }
    for (; i < g.L; i += width)
        sum += ld<float>(io.x, io.xt, ob[0] + dl_offset1(g.inner, 0, i));
    float mean = group_sum(sum, width, sh) / (float)g.L;
    float q = 0.0f;
    for (i = lane; i + (LN_BATCH - 1) * width < g.L; i += LN_BATCH * width) {
        float v[LN_BATCH];
#pragma unroll
        for (int u = 0; u < LN_BATCH; u++)
            v[u] = ld<float>(io.x, io.xt, ob[0] + dl_offset1(g.inner, 0, i + u * width)) - mean;
#pragma unroll
        for (int u = 0; u < LN_BATCH; u++)
            q += v[u] * v[u];
    }
    for (; i < g.L; i += width) {
        float d = ld<float>(io.x, io.xt, ob[0] + dl_offset1(g.inner, 0, i)) - mean;
        q += d * d;
    }
    float var = group_sum(q, width, sh) / (float)g.L;
    float inv = 1.0f / sqrtf(var + g.eps);
    for (ll i = lane; i < g.L; i += width) {
        ll off[NSTR];
        dl_offsets(g.inner, 4, i, off);
        float v = (ld<float>(io.x, io.xt, ob[0] + off[0]) - mean) * inv * ld<float>(io.scale, io.st, off[2]);
        if (io.bias)
            v += ld<float>(io.bias, io.bt, off[3]);
        st<float>(io.y, io.yt, ob[1] + off[1], v);
    }
    if (lane == 0) {
        if (io.mean)
            st<float>(io.mean, io.mt, ob[2], mean);
        if (io.inv)
            st<float>(io.inv, io.it, ob[3], inv);
    }
}

// The usual LayerNorm (a transformer's, over its embedding: one contiguous
// dim of L <= 1024 elements of float16, bfloat16 or float32, float32 scale
// and bias): a row in the registers of G lanes (8, 16 or a warp: several
// rows a warp where L is small), E elements a lane at lane + G e, so that
// the row is read once and each load is coalesced; mean and variance over
// the registers, as layer_norm_rows computes them (two passes), then the
// store. Rows past R in a warp only take part in the shuffles.
template <int XT, int G, int E> __global__ void __launch_bounds__(256) layer_norm_regs(lnio io, lngeom g)
{
    const int lane = threadIdx.x % G;
    const ll row = (ll)blockIdx.x * (blockDim.x / G) + threadIdx.x / G;
    const bool live = row < g.R;
    ll ob[NSTR] = {0, 0, 0, 0};
    if (live)
        dl_offsets(g.outer, 4, row, ob);
    const ll L = g.L, ss = g.inner.s[2][0], bs = g.inner.s[3][0];
    float v[E], sum = 0.0f;
#pragma unroll
    for (int e = 0; e < E; e++) {
        ll j = lane + (ll)G * e;
        v[e] = live && j < L ? ldr<XT, float>(io.x, (segrt_dtype)XT, ob[0] + j) : 0.0f;
        sum += v[e];
    }
#pragma unroll
    for (int d = G / 2; d > 0; d >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, d);
    const float mean = sum / (float)L;
    float q = 0.0f;
#pragma unroll
    for (int e = 0; e < E; e++) {
        float d = v[e] - mean;
        if (lane + (ll)G * e < L)
            q += d * d;
    }
#pragma unroll
    for (int d = G / 2; d > 0; d >>= 1)
        q += __shfl_xor_sync(0xffffffffu, q, d);
    const float inv = 1.0f / sqrtf(q / (float)L + g.eps);
    if (!live)
        return;
    const float *scale = static_cast<const float *>(io.scale), *bias = static_cast<const float *>(io.bias);
#pragma unroll
    for (int e = 0; e < E; e++) {
        ll j = lane + (ll)G * e;
        if (j >= L)
            continue;
        float y = (v[e] - mean) * inv * scale[j * ss];
        if (bias)
            y += bias[j * bs];
        stt<XT>(io.y, io.yt, ob[1] + j, y);
    }
    if (lane == 0) {
        if (io.mean)
            st<float>(io.mean, io.mt, ob[2], mean);
        if (io.inv)
            st<float>(io.inv, io.it, ob[3], inv);
    }
}

template <int XT, int G, int E> static void ln_regs_launch(cudaStream_t stream, const lnio &io, const lngeom &g)
{
    ll blocks = ceil_div(g.R, 256 / G);
    layer_norm_regs<XT, G, E><<<(unsigned)blocks, 256, 0, stream>>>(io, g);
}

// Whether layer_norm_regs takes the case; its launch where it does.
template <int XT> static bool ln_regs(cudaStream_t stream, const lnio &io, const lngeom &g)
{
    ll L = g.L;
    if (L <= 32)
        ln_regs_launch<XT, 8, 4>(stream, io, g);
    else if (L <= 64)
        ln_regs_launch<XT, 16, 4>(stream, io, g);
    else if (L <= 128)
        ln_regs_launch<XT, 32, 4>(stream, io, g);
    else if (L <= 256)
        ln_regs_launch<XT, 32, 8>(stream, io, g);
    else if (L <= 512)
        ln_regs_launch<XT, 32, 16>(stream, io, g);
    else if (L <= 1024)
        ln_regs_launch<XT, 32, 32>(stream, io, g);
    else
        return false;
    return true;
}

extern "C" segrt_status sgk_layer_norm(cudaStream_t stream, const sgk_view *y, const sgk_view *mean,
                                       const sgk_view *inv_std, const sgk_view *x, const sgk_view *scale,
                                       const sgk_view *bias, int32_t axis, float eps)
{
    int r = x->rank;
    if (axis < 0 || axis > r || y->rank != r || scale->rank != r || (bias->data && bias->rank != r) ||
        (mean->data && mean->rank != r) || (inv_std->data && inv_std->rank != r) || !is_float(x->dtype) ||
        !is_float(y->dtype) || !is_float(scale->dtype) || (bias->data && !is_float(bias->dtype)))
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_layer_norm: unsupported views");
    lngeom g;
    memset(&g, 0, sizeof g);
    g.eps = eps;
    for (int d = 0; d < r; d++) {
        if (x->dims[d] == 1)
            continue;
        bool in = d >= axis;
        dimlist *l = in ? &g.inner : &g.outer;
        int k = l->n++;
        l->d[k] = x->dims[d];
        l->s[0][k] = x->strides[d];
        l->s[1][k] = y->strides[d];
        if (in) {
            l->s[2][k] = scale->strides[d];
            l->s[3][k] = bias->data ? bias->strides[d] : 0;
        } else {
            l->s[2][k] = mean->data ? mean->strides[d] : 0;
            l->s[3][k] = inv_std->data ? inv_std->strides[d] : 0;
        }
    }
    dl_normalise(&g.outer, 4);
    dl_normalise(&g.inner, 4);
    g.R = dl_count(&g.outer);
    g.L = dl_count(&g.inner);
    if (g.R == 0)
        return SEGRT_OK;
    // An empty row has NaN statistics, as the reference gives; it only
    // writes them.
    lnio io = {x->data, x->dtype, y->data, y->dtype, mean->data, inv_std->data, mean->dtype, inv_std->dtype,
               scale->data, bias->data, scale->dtype, bias->dtype};
    // The register kernel: one inner dim, contiguous in x and y, of the
    // activations' dtype on both sides; float32 scale and bias.
    bool regs = g.L >= 1 && g.inner.n == 1 && g.inner.s[0][0] == 1 && g.inner.s[1][0] == 1 && x->dtype == y->dtype &&
                scale->dtype == SEGRT_DTYPE_FLOAT32 && (!bias->data || bias->dtype == SEGRT_DTYPE_FLOAT32) &&
                g.R < ((ll)1 << 40);
    if (regs) {
        bool taken = false;
        switch (x->dtype) {
        case SEGRT_DTYPE_FLOAT16: taken = ln_regs<SEGRT_DTYPE_FLOAT16>(stream, io, g); break;
        case SEGRT_DTYPE_BFLOAT16: taken = ln_regs<SEGRT_DTYPE_BFLOAT16>(stream, io, g); break;
        case SEGRT_DTYPE_FLOAT32: taken = ln_regs<SEGRT_DTYPE_FLOAT32>(stream, io, g); break;
        default: break;
        }
        if (taken)
            return launched("layer_norm_regs");
    }
    int width = g.L > 4096 && g.R < 2048 ? 256 : 32;
    ll blocks = ceil_div(g.R, 256 / width);
    layer_norm_rows<<<(unsigned)blocks, 256, 0, stream>>>(io, g, width);
    return launched("layer_norm_rows");
}
