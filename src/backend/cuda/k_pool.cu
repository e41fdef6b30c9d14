// MaxPool and AveragePool over 1 to 3 spatial dims of strided views.
//
// Channels-last float tensors whose channels make whole 16-byte vectors
// take pool_cl_kernel (below); everything else the general kernel:
// One thread per output element walks its window tap by tap in the
// reference's order (loading a batch of taps before using them) (src/backend/ref/ref_pool.c), so that the choice among
// equal maxima, the first NaN winning, the index written and the average's
// divisor all come out as the reference's. Consecutive threads take
// consecutive indices along the output dim with the smallest stride
// (channels, for channels-last tensors), so loads and stores coalesce.
// Lower ranks run as 3-D with leading spatial dims of size 1.
//
// A max pool may also be given a normalisation deferred to it (x is an
// InstanceNorm's input, sgk_norm_in): the general kernel normalises each
// value it reads, the channels-last one pools the raw values (their least
// too) and normalises once per channel (see pool_cl_kernel).
#include "backend/cuda/k_common.cuh"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <type_traits>

#define POOL_BATCH 8

static bool pool_dtype(segrt_dtype t, bool is_max)
{
    switch (t) {
    case SEGRT_DTYPE_FLOAT32:
    case SEGRT_DTYPE_FLOAT16:
    case SEGRT_DTYPE_BFLOAT16:
    case SEGRT_DTYPE_FLOAT64: return true;
    case SEGRT_DTYPE_INT8:
    case SEGRT_DTYPE_UINT8: return is_max;
    default: return false;
    }
}

#define PRANK 5 // N, C and up to 3 spatial dims

struct pgeom {
    int rank;
    int perm[PRANK];              // output dims, fastest-varying thread index first
    fastdiv fd[PRANK];           // yd[perm[j]], for the 32-bit path
    bool small;                   // every index fits the 32-bit path
    ll yd[PRANK], ys[PRANK], is[PRANK]; // output dims, y strides, indices strides
    ll xn, xc, xs[3];             // x strides: N, C, spatial (embedded in 3-D; 0 where padded)
    ll C, in_plane, total, taps;
    ll in[3], out[3], k[3], st[3], dil[3], pb[3], pe[3];
    bool is_max, include_pad, col_major, want_idx;
};

template <int XT, typename T>
__global__ void pool_kernel(const void *x, segrt_dtype xt, void *y, segrt_dtype yt, ll *indices, pgeom g,
                            sgk_norm_in norm)
{
    int ns = g.rank - 2;
    for (ll i = (ll)blockIdx.x * blockDim.x + threadIdx.x; i < g.total; i += (ll)gridDim.x * blockDim.x) {
        ll co[PRANK];
        if (g.small) {
            unsigned rest = (unsigned)i;
            for (int j = 0; j < g.rank; j++) {
                unsigned q = fastdiv_div(rest, g.fd[j]);
                co[g.perm[j]] = rest - q * g.fd[j].d;
                rest = q;
            }
        } else {
            ll rest = i;
            for (int j = 0; j < g.rank; j++) {
                int d = g.perm[j];
                ll q = rest / g.yd[d];
                co[d] = rest - q * g.yd[d];
                rest = q;
            }
        }
        ll o[3];
        for (int a = 0; a < 3; a++) {
            int s = a - (3 - ns);
            o[a] = s >= 0 ? co[2 + s] : 0;
        }
        ll base = co[0] * g.xn + co[1] * g.xc;
        // A deferred normalisation: its (mean, -, s, b) for this channel.
        const float4 k = norm.ab ? ((const float4 *)norm.ab)[co[0] * g.C + co[1]] : make_float4(0, 0, 0, 0);
        T best = -INFINITY, sum = 0;
        ll count = 0, best_t = -1;
        // Taps in the reference's order (kd, kh, kw), POOL_BATCH at a time:
        // the batch's loads are issued before any is used, so several are
        // in flight; then they are consumed in order.
        ll kd = 0, kh = 0, kw = 0;
        for (ll t0 = 0; t0 < g.taps; t0 += POOL_BATCH) {
            T v[POOL_BATCH];
            unsigned valid = 0, padded = 0;
#pragma unroll
            for (int b = 0; b < POOL_BATCH; b++) {
                v[b] = 0;
                if (t0 + b >= g.taps)
                    break;
                ll pd = o[0] * g.st[0] + kd * g.dil[0] - g.pb[0];
                ll ph = o[1] * g.st[1] + kh * g.dil[1] - g.pb[1];
                ll pw = o[2] * g.st[2] + kw * g.dil[2] - g.pb[2];
                bool in_x = pd >= 0 && pd < g.in[0] && ph >= 0 && ph < g.in[1] && pw >= 0 && pw < g.in[2];
                // Padding counts toward the average's divisor when asked to
                // and inside the declared pads.
                bool in_pads = pd >= -g.pb[0] && pd < g.in[0] + g.pe[0] && ph >= -g.pb[1] &&
                               ph < g.in[1] + g.pe[1] && pw >= -g.pb[2] && pw < g.in[2] + g.pe[2];
                if (in_x) {
                    valid |= 1u << b;
                    v[b] = ldr<XT, T>(x, xt, base + pd * g.xs[0] + ph * g.xs[1] + pw * g.xs[2]);
                    if (norm.ab)
                        v[b] = (T)act_apply((((float)v[b] - k.x) - k.y) * k.z + k.w, norm.act, norm.act_alpha);
                } else if (in_pads) {
                    padded |= 1u << b;
                }
                if (++kw == g.k[2]) {
                    kw = 0;
                    if (++kh == g.k[1]) {
                        kh = 0;
                        kd++;
                    }
                }
            }
#pragma unroll
            for (int b = 0; b < POOL_BATCH; b++) {
                if (!(valid >> b & 1u)) {
                    count += g.include_pad && (padded >> b & 1u);
                    continue;
                }
                count++;
                if (g.is_max) {
                    // The first NaN wins and stays, as numpy's max.
                    if (best_t < 0 || v[b] > best || (v[b] != v[b] && best == best)) {
                        best = v[b];
                        best_t = t0 + b;
                    }
                } else {
                    sum += v[b];
                }
            }
        }
        ll yo = 0, io = 0;
        for (int d = 0; d < g.rank; d++) {
            yo += co[d] * g.ys[d];
            io += co[d] * g.is[d];
        }
        if (g.is_max) {
            st<T>(y, yt, yo, best);
            if (g.want_idx) {
                // The chosen tap's input position, flat over the spatial
                // dims (row-major, or column-major for storage_order 1).
                ll at = 0;
                if (best_t >= 0) {
                    ll td = best_t / (g.k[1] * g.k[2]), th = best_t / g.k[2] % g.k[1], tw = best_t % g.k[2];
                    ll pd = o[0] * g.st[0] + td * g.dil[0] - g.pb[0];
                    ll ph = o[1] * g.st[1] + th * g.dil[1] - g.pb[1];
                    ll pw = o[2] * g.st[2] + tw * g.dil[2] - g.pb[2];
                    at = g.col_major ? (pw * g.in[1] + ph) * g.in[0] + pd : (pd * g.in[1] + ph) * g.in[2] + pw;
                }
                indices[io] = (co[0] * g.C + co[1]) * g.in_plane + at;
            }
        } else {
            st<T>(y, yt, yo, sum / (T)count); // an empty window gives NaN, as the reference
        }
    }
}

// Channels-last fast path -----------------------------------------------------------
//
// x and y of one float dtype, both with C contiguous (stride 1) and C a
// multiple of the 16-byte vector (8 float16/bfloat16 or 4 float32
// channels), no indices wanted: one thread per (output position, vector of
// channels) loads each tap's channels with one 16-byte load, consecutive
// threads taking consecutive vectors, so a warp reads whole pixels. The
// taps go in the reference's order, PCL_BATCH loads in flight, and every
// channel applies the general kernel's rules (first NaN wins and stays, the
// first of equal maxima is kept, the average's divisor counts the taps
// inside x plus, with count_include_pad, those inside the declared pads).

#define PCL_BATCH 4

struct pfast {
    uint32_t total;          // output positions times channel vectors
    fastdiv cv, od, oh, ow;  // channel vectors; output dims, 3-D embedding
    ll xn, xs[3], yn, ys[3]; // strides in elements (0 along padded dims)
    int in[3], k[3], st[3], dil[3], pb[3], pe[3], taps;
    int C;                   // channels (a deferred normalisation's ab rows)
    int ab_rows;             // N * C where they are staged in shared memory, else 0
    bool include_pad;
};

#define POOL_AB_ROWS_MAX 2048 // 32 KB of normalisation rows staged per block
#define POOL_NORM_BLOCKS_PER_SM 4

// Elementwise maxima (MAX) or minima of eight 16-bit values, a NaN in
// either operand giving NaN (the reference's first NaN wins: its payload
// aside, the same result).
template <int XT, bool MAX> __device__ __forceinline__ uint4 pair_extreme(uint4 a, uint4 b)
{
    typedef typename std::conditional<XT == SEGRT_DTYPE_BFLOAT16, __nv_bfloat162, __half2>::type P;
    uint4 r;
    const P *pa = (const P *)&a, *pb = (const P *)&b;
    P *pr = (P *)&r;
#pragma unroll
    for (int e = 0; e < 4; e++)
        pr[e] = MAX ? __hmax2_nan(pa[e], pb[e]) : __hmin2_nan(pa[e], pb[e]);
    return r;
}

// Positions are 32-bit here (the launcher checks that they fit): fewer
// registers, more threads in flight.
template <int XT, bool MAX, bool NORM>
__global__ void __launch_bounds__(256) pool_cl_kernel(const void *x, void *y, pfast g, sgk_norm_in norm)
{
    // NORM: the normalisation's (mean, -, s, b) rows in shared memory where
    // they fit (g.ab_rows > 0; the grid is then a few blocks an SM, each
    // walking many outputs, so a block stages them once).
    extern __shared__ float4 absh[];
    if constexpr (NORM) {
        for (int i = threadIdx.x; i < g.ab_rows; i += blockDim.x)
            absh[i] = ((const float4 *)norm.ab)[i];
        __syncthreads();
    }
    constexpr int V = V16<XT>();
    constexpr int ES = 16 / V; // element bytes
    const uint32_t step = gridDim.x * blockDim.x;
    for (uint32_t q = blockIdx.x * blockDim.x + threadIdx.x; q < g.total; q += step) {
        uint32_t rest = fastdiv_div(q, g.cv);
        uint32_t c = (q - rest * g.cv.d) * V;
        uint32_t t = fastdiv_div(rest, g.ow);
        int o2 = (int)(rest - t * g.ow.d);
        rest = t;
        t = fastdiv_div(rest, g.oh);
        int o1 = (int)(rest - t * g.oh.d);
        rest = t;
        t = fastdiv_div(rest, g.od);
        int o0 = (int)(rest - t * g.od.d);
        uint32_t n = t;
        const char *xb = (const char *)x + ((ll)n * g.xn + c) * ES;
        // The window's first tap, in input coordinates.
        const int b0 = o0 * g.st[0] - g.pb[0], b1 = o1 * g.st[1] - g.pb[1], b2 = o2 * g.st[2] - g.pb[2];
        float acc[V];
#pragma unroll
        for (int j = 0; j < V; j++)
            acc[j] = MAX ? -INFINITY : 0.0f;
        // NORM: the least of the raw values too (below); 16-bit values as
        // pairs, packed (two maxima and minima an instruction: unpacked,
        // the extra comparisons cost the pool much of its time).
        [[maybe_unused]] float lo[NORM ? V : 1];
        [[maybe_unused]] uint4 hi2 = make_uint4(0, 0, 0, 0), lo2 = make_uint4(0, 0, 0, 0);
        bool any = false;
        int count = 0, kd = 0, kh = 0, kw = 0;
        for (int t0 = 0; t0 < g.taps; t0 += PCL_BATCH) {
            uint4 raw[PCL_BATCH];
            unsigned valid = 0, padded = 0;
#pragma unroll
            for (int b = 0; b < PCL_BATCH; b++) {
                raw[b] = make_uint4(0, 0, 0, 0);
                if (t0 + b >= g.taps)
                    break;
                int pd = b0 + kd * g.dil[0], ph = b1 + kh * g.dil[1], pw = b2 + kw * g.dil[2];
                bool in_x = pd >= 0 && pd < g.in[0] && ph >= 0 && ph < g.in[1] && pw >= 0 && pw < g.in[2];
                bool in_pads = pd >= -g.pb[0] && pd < g.in[0] + g.pe[0] && ph >= -g.pb[1] &&
                               ph < g.in[1] + g.pe[1] && pw >= -g.pb[2] && pw < g.in[2] + g.pe[2];
                if (in_x) {
                    valid |= 1u << b;
                    raw[b] = *(const uint4 *)(xb + (pd * g.xs[0] + ph * g.xs[1] + pw * g.xs[2]) * ES);
                } else if (in_pads) {
                    padded |= 1u << b;
                }
                if (++kw == g.k[2]) {
                    kw = 0;
                    if (++kh == g.k[1]) {
                        kh = 0;
                        kd++;
                    }
                }
            }
#pragma unroll
            for (int b = 0; b < PCL_BATCH; b++) {
                if (!(valid >> b & 1u)) {
                    count += g.include_pad && (padded >> b & 1u);
                    continue;
                }
                count++;
                if constexpr (NORM && V == 8) {
                    hi2 = any ? pair_extreme<XT, true>(hi2, raw[b]) : raw[b];
                    lo2 = any ? pair_extreme<XT, false>(lo2, raw[b]) : raw[b];
                    any = true;
                    continue;
                }
                float v[V];
                vec16_unpack<XT>(raw[b], v);
#pragma unroll
                for (int j = 0; j < V; j++) {
                    if constexpr (NORM)
                        if (!any || v[j] < lo[j] || (v[j] != v[j] && lo[j] == lo[j]))
                            lo[j] = v[j];
                    if (MAX) {
                        if (!any || v[j] > acc[j] || (v[j] != v[j] && acc[j] == acc[j]))
                            acc[j] = v[j];
                    } else {
                        acc[j] += v[j];
                    }
                }
                any = true;
            }
        }
        if (!MAX) {
#pragma unroll
            for (int j = 0; j < V; j++)
                acc[j] = acc[j] / (float)count; // an empty window gives NaN, as the reference
        }
        if constexpr (NORM) {
            // The normalisation f(v) = act((v - mean) * s + b), each step
            // rounded as the norm's own pass rounds it, never decreases
            // with v where s >= 0 and never increases where s < 0 (the
            // activations taken have slopes >= 0): the largest f(v) is
            // f(max v) or f(min v), the same float as the pass then the
            // pool give. One transform a channel instead of one a tap, its
            // parameters from shared memory (loaded per output from global
            // memory, mostly missing L1 beside the streamed x, they left
            // the loads of x waiting).
            const float4 *abr = (g.ab_rows ? absh : (const float4 *)norm.ab) + (ll)n * g.C + c;
            if constexpr (V == 8) {
                if (any) { // (else acc keeps -inf: a window with no tap inside)
                    vec16_unpack<XT>(hi2, acc);
                    vec16_unpack<XT>(lo2, lo);
                }
            }
#pragma unroll
            for (int j = 0; j < V; j++) {
                const float4 k = abr[j];
                const float v = k.z < 0.0f ? lo[j] : acc[j];
                if (any)
                    acc[j] = act_apply(((v - k.x) - k.y) * k.z + k.w, norm.act, norm.act_alpha);
            }
        }
        ll yo = (ll)n * g.yn + o0 * g.ys[0] + o1 * g.ys[1] + o2 * g.ys[2] + c;
        *(uint4 *)((char *)y + yo * ES) = vec16_pack<XT>(acc);
    }
}

template <int XT>
static void pool_cl_launch(cudaStream_t stream, unsigned nb, bool mx, const sgk_view *x, const sgk_view *y,
                           const pfast &g, const sgk_norm_in &norm)
{
    // (sgk_pool gives a normalisation to max pools only.)
    if (norm.ab)
        pool_cl_kernel<XT, true, true>
            <<<nb, 256, (size_t)g.ab_rows * sizeof(float4), stream>>>(x->data, y->data, g, norm);
    else if (mx)
        pool_cl_kernel<XT, true, false><<<nb, 256, 0, stream>>>(x->data, y->data, g, norm);
    else
        pool_cl_kernel<XT, false, false><<<nb, 256, 0, stream>>>(x->data, y->data, g, norm);
}

// Launches pool_cl_kernel where its conditions hold; false otherwise.
static bool try_pool_cl(cudaStream_t stream, const sgk_pool_params *p, const sgk_view *y, bool want_idx,
                        const sgk_view *x, const sgk_norm_in &norm, segrt_status *st)
{
    segrt_dtype dt = x->dtype;
    ll V = vec16_width(dt), C = x->dims[1];
    if (want_idx || y->dtype != dt || V == 0)
        return false;
    if (x->strides[1] != 1 || y->strides[1] != 1 || C % V != 0 || !aligned16(x->data) || !aligned16(y->data))
        return false;
    int ns = p->n_spatial;
    pfast g;
    memset(&g, 0, sizeof g);
    ll total = y->dims[0] * (C / V), span = 1;
    for (int d = 0; d < x->rank; d++)
        if (d != 1 && ((x->dims[d] > 1 && x->strides[d] % V != 0) || (y->dims[d] > 1 && y->strides[d] % V != 0)))
            return false;
    g.xn = x->strides[0];
    g.yn = y->strides[0];
    uint32_t od[3];
    for (int a = 0; a < 3; a++) {
        int s = a - (3 - ns);
        bool real = s >= 0;
        ll in = real ? x->dims[2 + s] : 1, k = real ? p->kernel[s] : 1, st = real ? p->strides[s] : 1;
        ll dil = real ? p->dilations[s] : 1, pb = real ? p->pads_begin[s] : 0, pe = real ? p->pads_end[s] : 0;
        ll out = real ? y->dims[2 + s] : 1;
        // Every coordinate the kernel forms must fit in an int.
        ll reach = out * st + k * dil + in + pb + pe;
        if (reach >= ((ll)1 << 30) || k < 1 || st < 1 || dil < 1 || pb < 0 || pe < 0)
            return false;
        g.in[a] = (int)in;
        g.k[a] = (int)k;
        g.st[a] = (int)st;
        g.dil[a] = (int)dil;
        g.pb[a] = (int)pb;
        g.pe[a] = (int)pe;
        g.xs[a] = real ? x->strides[2 + s] : 0;
        g.ys[a] = real ? y->strides[2 + s] : 0;
        od[a] = (uint32_t)out;
        total *= out;
        span *= k;
    }
    if (total >= ((ll)1 << 31) || span >= ((ll)1 << 30))
        return false;
    g.taps = (int)span;
    g.total = (uint32_t)total;
    g.cv = fastdiv_make((uint32_t)(C / V));
    g.od = fastdiv_make(od[0]);
    g.oh = fastdiv_make(od[1]);
    g.ow = fastdiv_make(od[2]);
    g.include_pad = p->count_include_pad;
    g.C = (int)C;
    ll blocks = ceil_div(total, 256);
    unsigned nb = (unsigned)(blocks > (1 << 20) ? (1 << 20) : blocks);
    if (norm.ab && y->dims[0] * C <= POOL_AB_ROWS_MAX) {
        g.ab_rows = (int)(y->dims[0] * C);
        const ll most = (ll)(p->sm_count > 0 ? p->sm_count : 1) * POOL_NORM_BLOCKS_PER_SM;
        nb = (unsigned)(blocks < most ? blocks : most);
    }
    bool mx = p->kind == SGK_POOL_MAX;
    switch (dt) {
    case SEGRT_DTYPE_FLOAT16: pool_cl_launch<SEGRT_DTYPE_FLOAT16>(stream, nb, mx, x, y, g, norm); break;
    case SEGRT_DTYPE_BFLOAT16: pool_cl_launch<SEGRT_DTYPE_BFLOAT16>(stream, nb, mx, x, y, g, norm); break;
    default: pool_cl_launch<SEGRT_DTYPE_FLOAT32>(stream, nb, mx, x, y, g, norm); break;
    }
    *st = launched("pool_cl_kernel");
    return true;
}

extern "C" segrt_status sgk_pool(cudaStream_t stream, const sgk_pool_params *p, const sgk_view *y,
                                 const sgk_view *indices, const sgk_view *x, const sgk_norm_in *normp)
{
    sgk_norm_in norm;
    memset(&norm, 0, sizeof norm);
    if (normp)
        norm = *normp;
    if (norm.ab && (((uintptr_t)norm.ab & 15) != 0 || p->kind != SGK_POOL_MAX ||
                    (norm.act != SGK_ACT_NONE && norm.act != SGK_ACT_RELU && norm.act != SGK_ACT_LEAKY_RELU) ||
                    (norm.act == SGK_ACT_LEAKY_RELU && !(norm.act_alpha >= 0.0f))))
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_pool: a normalisation it does not take (at %p)",
                        (const void *)norm.ab);
    int ns = p->n_spatial;
    bool is_max = p->kind == SGK_POOL_MAX;
    if (ns < 1 || ns > 3 || x->rank != ns + 2 || y->rank != ns + 2 || y->dims[0] != x->dims[0] ||
        y->dims[1] != x->dims[1])
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_pool: views do not match %d spatial dims", ns);
    if (!pool_dtype(x->dtype, is_max) || !pool_dtype(y->dtype, is_max))
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_pool: unsupported dtype %s", segrt_dtype_name(x->dtype));
    bool want_idx = is_max && indices && indices->data;
    if (want_idx && (indices->dtype != SEGRT_DTYPE_INT64 || indices->rank != y->rank))
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_pool: indices must be int64 of the output's dims");
    for (int d = 0; d < y->rank; d++)
        if (y->dims[d] == 0)
            return SEGRT_OK;
    segrt_status fast;
    if (try_pool_cl(stream, p, y, want_idx, x, norm, &fast))
        return fast;
    pgeom g;
    memset(&g, 0, sizeof g);
    g.rank = y->rank;
    g.total = 1;
    for (int d = 0; d < g.rank; d++) {
        g.yd[d] = y->dims[d];
        g.ys[d] = y->strides[d];
        g.is[d] = want_idx ? indices->strides[d] : 0;
        g.total *= y->dims[d];
        g.perm[d] = d;
    }
    if (g.total == 0)
        return SEGRT_OK;
    // Thread order: smallest output stride first; among equals, later dims
    // first (size-1 dims and broadcasts do not matter).
    for (int i = 1; i < g.rank; i++)
        for (int k = i; k > 0; k--) {
            int a = g.perm[k - 1], b = g.perm[k];
            bool swap = llabs_(g.ys[b]) < llabs_(g.ys[a]) || (llabs_(g.ys[b]) == llabs_(g.ys[a]) && b > a);
            if (!swap)
                break;
            g.perm[k - 1] = b;
            g.perm[k] = a;
        }
    g.small = g.total < ((ll)1 << 31);
    for (int j = 0; g.small && j < g.rank; j++)
        g.fd[j] = fastdiv_make((unsigned)g.yd[g.perm[j]]);
    g.xn = x->strides[0];
    g.xc = x->strides[1];
    g.C = x->dims[1];
    g.in_plane = 1;
    for (int a = 0; a < 3; a++) {
        int s = a - (3 - ns);
        bool real = s >= 0;
        g.in[a] = real ? x->dims[2 + s] : 1;
        g.out[a] = real ? y->dims[2 + s] : 1;
        g.xs[a] = real ? x->strides[2 + s] : 0;
        g.k[a] = real ? p->kernel[s] : 1;
        g.st[a] = real ? p->strides[s] : 1;
        g.dil[a] = real ? p->dilations[s] : 1;
        g.pb[a] = real ? p->pads_begin[s] : 0;
        g.pe[a] = real ? p->pads_end[s] : 0;
        g.in_plane *= g.in[a];
    }
    g.taps = g.k[0] * g.k[1] * g.k[2];
    g.is_max = is_max;
    g.include_pad = p->count_include_pad;
    g.col_major = p->storage_order == 1;
    g.want_idx = want_idx;
    ll blocks = ceil_div(g.total, 256);
    blocks = blocks > (1 << 20) ? (1 << 20) : blocks;
    ll *idx = want_idx ? (ll *)indices->data : NULL;
    switch (x->dtype) {
    case SEGRT_DTYPE_FLOAT16:
        pool_kernel<SEGRT_DTYPE_FLOAT16, float>
            <<<(unsigned)blocks, 256, 0, stream>>>(x->data, x->dtype, y->data, y->dtype, idx, g, norm);
        break;
    case SEGRT_DTYPE_BFLOAT16:
        pool_kernel<SEGRT_DTYPE_BFLOAT16, float>
            <<<(unsigned)blocks, 256, 0, stream>>>(x->data, x->dtype, y->data, y->dtype, idx, g, norm);
        break;
    case SEGRT_DTYPE_FLOAT32:
        pool_kernel<SEGRT_DTYPE_FLOAT32, float>
            <<<(unsigned)blocks, 256, 0, stream>>>(x->data, x->dtype, y->data, y->dtype, idx, g, norm);
        break;
    case SEGRT_DTYPE_FLOAT64:
        pool_kernel<0, double><<<(unsigned)blocks, 256, 0, stream>>>(x->data, x->dtype, y->data, y->dtype, idx, g, norm);
        break;
    default:
        pool_kernel<0, float><<<(unsigned)blocks, 256, 0, stream>>>(x->data, x->dtype, y->data, y->dtype, idx, g, norm);
        break;
    }
    return launched("pool_kernel");
}
