// Sliding-window kernels (k_window.h). Each thread owns one output
// element (or one voxel, with its classes); offsets are 64-bit (a window
// or a slab of a large volume exceeds 2^31 elements with many classes).
//
// Each kernel walks "lines", all voxels along the last spatial
// axis at fixed other coordinates: a block's warps take a line each, their
// lanes the line's voxels, and a line's coordinates come from one 32-bit
// decomposition instead of every element's 64-bit divisions (a long
// instruction sequence each on the GPU).
#include "backend/cuda/k_window.h"

#include "backend/cuda/k_common.cuh"

#include <math.h>
#include <string.h>

#define WIN_LANES 32 // a line's voxels, strided
#define WIN_LINES 8  // lines a block: blockDim (WIN_LANES, WIN_LINES)

namespace {

// Source index of padded position p along an axis of n voxels with
// `begin` voxels of padding in front, or -1 for the constant.
__device__ __forceinline__ ll pad_source(ll p, ll begin, ll n, int mode)
{
    ll i = p - begin;
    if (i >= 0 && i < n)
        return i;
    if (mode == SGK_WIN_PAD_CONSTANT)
        return -1;
    if (mode == SGK_WIN_PAD_REPLICATE || n == 1)
        return i < 0 ? 0 : n - 1;
    ll period = 2 * (n - 1); // reflect: ... 2 1 [0 1 2 ... n-1] n-2 ...
    ll m = ((i % period) + period) % period;
    return m < n ? m : period - m;
}

struct win_dims {
    int nd;
    ll roi[SGK_WIN_MAX_DIMS];
    unsigned roi32[SGK_WIN_MAX_DIMS]; // the same, for a line's 32-bit decomposition
    ll numel; // of the window
};

win_dims dims_of(const sgk_win_geom *g)
{
    win_dims d;
    d.nd = g->n_dims;
    d.numel = 1;
    for (int i = 0; i < SGK_WIN_MAX_DIMS; i++) {
        d.roi[i] = i < g->n_dims ? g->roi[i] : 1;
        d.roi32[i] = (unsigned)d.roi[i];
        d.numel *= d.roi[i];
    }
    return d;
}

// Blocks of WIN_LINES lines for n lines.
unsigned line_blocks(ll n)
{
    ll b = (n + WIN_LINES - 1) / WIN_LINES;
    return (unsigned)(b < 1 ? 1 : b > 0x7fffffffLL ? 0x7fffffffLL : b);
}

// The coordinates along axes 0 .. nd-2 of line L of a box of dims `ext`
// (row-major, the last axis excluded); what is left of L is returned (the
// channel, where lines of several channels are numbered together).
__device__ __forceinline__ unsigned line_split(int nd, const unsigned *ext, unsigned L, unsigned *pos)
{
    for (int a = nd - 2; a >= 0; a--) {
        pos[a] = L % ext[a];
        L /= ext[a];
    }
    return L;
}

__device__ __forceinline__ ll ring_row(ll r, ll row0, ll ring)
{
    ll i = r - row0;
    return ring > 0 ? i % ring : i;
}

// Accumulator elements: float, __half or __nv_bfloat16, converted to and
// from float (round to nearest) so that all arithmetic is in float32.
__device__ __forceinline__ float acc_f(float v)
{
    return v;
}
__device__ __forceinline__ float acc_f(__half v)
{
    return __half2float(v);
}
__device__ __forceinline__ float acc_f(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}

template <typename T> __device__ __forceinline__ T acc_t(float v);
template <> __device__ __forceinline__ float acc_t<float>(float v)
{
    return v;
}
template <> __device__ __forceinline__ __half acc_t<__half>(float v)
{
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 acc_t<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}

// The 16 bits of a half-size accumulator element, and back.
__device__ __forceinline__ unsigned short acc_bits(__half v)
{
    return __half_as_ushort(v);
}
__device__ __forceinline__ unsigned short acc_bits(__nv_bfloat16 v)
{
    return __bfloat16_as_ushort(v);
}
template <typename T> __device__ __forceinline__ T acc_of_bits(unsigned short b);
template <> __device__ __forceinline__ __half acc_of_bits<__half>(unsigned short b)
{
    return __ushort_as_half(b);
}
template <> __device__ __forceinline__ __nv_bfloat16 acc_of_bits<__nv_bfloat16>(unsigned short b)
{
    return __ushort_as_bfloat16(b);
}

// V accumulators at p as floats: V = 4 in one access (a float4, or four
// halves in a uint2), p aligned to it.
template <typename T, int V> __device__ __forceinline__ void ld_acc(const T *p, float *v)
{
    if constexpr (V == 4 && sizeof(T) == 4) {
        ld_floats<4>(reinterpret_cast<const float *>(p), v);
    } else if constexpr (V == 4) {
        const uint2 t = *reinterpret_cast<const uint2 *>(p);
        v[0] = acc_f(acc_of_bits<T>((unsigned short)(t.x & 0xffffu)));
        v[1] = acc_f(acc_of_bits<T>((unsigned short)(t.x >> 16)));
        v[2] = acc_f(acc_of_bits<T>((unsigned short)(t.y & 0xffffu)));
        v[3] = acc_f(acc_of_bits<T>((unsigned short)(t.y >> 16)));
    } else {
#pragma unroll
        for (int j = 0; j < V; j++)
            v[j] = acc_f(p[j]);
    }
}

// The store of ld_acc: each value rounded once to T.
template <typename T, int V> __device__ __forceinline__ void st_acc(T *p, const float *v)
{
    if constexpr (V == 4 && sizeof(T) == 4) {
        st_floats<4>(reinterpret_cast<float *>(p), v);
    } else if constexpr (V == 4) {
        unsigned b[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            b[j] = acc_bits(acc_t<T>(v[j]));
        *reinterpret_cast<uint2 *>(p) = make_uint2(b[0] | b[1] << 16, b[2] | b[3] << 16);
    } else {
#pragma unroll
        for (int j = 0; j < V; j++)
            p[j] = acc_t<T>(v[j]);
    }
}

struct gather_args {
    win_dims d;
    ll size[SGK_WIN_MAX_DIMS], pad_begin[SGK_WIN_MAX_DIMS];
    int pad_mode;
    float pad_value;
    unsigned flip;
    const float *src;
    ll cstride, row0, ring, plane; // plane: voxels per image row
    unsigned lines;                // channels x the window's lines
    float *dst;                    // window i of the launch at dst + i * window
    ll window;                     // channels x the window's voxels
    ll start[SGK_WIN_BATCH][SGK_WIN_MAX_DIMS];
    // Window i lies inside the image, unflipped, its lines 16-byte aligned
    // rows of the source: it is copied a float4 at a time.
    bool whole[SGK_WIN_BATCH];
    fastdiv fq, fring;             // len / 4 and the ring's rows (whole windows)
    fastdiv froi[SGK_WIN_MAX_DIMS];
};

// A whole window: float4 copies, a thread per four voxels, the line's
// place in the source from fastdivs: the general loop's per-line
// divisions and per-voxel padding tests are wasted on windows inside the
// image, which is nearly every window of a large one.
__device__ __forceinline__ void gather_whole(const gather_args &a, const ll *start, float *dst)
{
    const int nd = a.d.nd, last = nd - 1;
    const unsigned q = (unsigned)(a.d.roi[last] / 4), total = a.lines * q;
    const unsigned step = gridDim.x * blockDim.x * blockDim.y;
    for (unsigned i = (blockIdx.x * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x; i < total; i += step) {
        unsigned L = fastdiv_div(i, a.fq);
        const unsigned x4 = i - L * q;
        unsigned p[SGK_WIN_MAX_DIMS];
        for (int ax = nd - 2; ax >= 0; ax--) {
            const unsigned nx = fastdiv_div(L, a.froi[ax]);
            p[ax] = L - nx * a.froi[ax].d;
            L = nx;
        }
        // L is now the channel. Row, then the axes between, then the column.
        unsigned r = (unsigned)(start[0] - a.pad_begin[0] + p[0] - a.row0);
        if (a.ring > 0)
            r -= fastdiv_div(r, a.fring) * a.fring.d;
        ll at = L * a.cstride + (ll)r * a.plane, inner = 0;
        for (int ax = 1; ax < last; ax++)
            inner = inner * a.size[ax] + start[ax] - a.pad_begin[ax] + p[ax];
        at += inner * a.size[last] + start[last] - a.pad_begin[last] + 4 * (ll)x4;
        const float4 v = *reinterpret_cast<const float4 *>(a.src + at);
        *reinterpret_cast<float4 *>(dst + (ll)i * 4) = v;
    }
}

// Line by line: the source row and offset of a line once, then only the
// last axis per voxel (flipped, padded).
__device__ __forceinline__ void gather_lines(const gather_args &a, const ll *start, float *dst_window)
{
    const int nd = a.d.nd, last = nd - 1;
    const ll len = a.d.roi[last];
    for (ll line = (ll)blockIdx.x * WIN_LINES + threadIdx.y; line < a.lines; line += (ll)gridDim.x * WIN_LINES) {
        unsigned pos[SGK_WIN_MAX_DIMS];
        const unsigned c = line_split(nd, a.d.roi32, (unsigned)line, pos);
        ll row = 0, inner = 0;
        bool inside = true;
        for (int ax = 0; ax < last; ax++) {
            ll p = (a.flip >> ax) & 1u ? a.d.roi[ax] - 1 - pos[ax] : pos[ax];
            ll i = pad_source(start[ax] + p, a.pad_begin[ax], a.size[ax], a.pad_mode);
            inside = inside && i >= 0;
            if (ax == 0)
                row = i >= 0 ? ring_row(i, a.row0, a.ring) : 0;
            else
                inner = inner * a.size[ax] + (i >= 0 ? i : 0);
        }
        const float *src = a.src + c * a.cstride + (nd > 1 ? row * a.plane + inner * a.size[last] : 0);
        float *dst = dst_window + (ll)line * len;
        const bool flip = (a.flip >> last) & 1u;
        for (ll x = threadIdx.x; x < len; x += WIN_LANES) {
            ll i = pad_source(start[last] + (flip ? len - 1 - x : x), a.pad_begin[last], a.size[last], a.pad_mode);
            float v = a.pad_value;
            if (inside && i >= 0)
                v = nd > 1 ? src[i] : src[ring_row(i, a.row0, a.ring)];
            dst[x] = v;
        }
    }
}

// blockIdx.y: the window of the launch.
__global__ void gather_kernel(const gather_args a)
{
    const unsigned w = blockIdx.y;
    float *dst = a.dst + (ll)w * a.window;
    if (a.whole[w])
        gather_whole(a, a.start[w], dst);
    else
        gather_lines(a, a.start[w], dst);
}

struct combine_args {
    win_dims d;
    unsigned flip;
    bool add;
    float divisor;
    const float *src;
    float *dst;
    unsigned lines; // rows x the window's lines
};

// Line by line: the flipped source line once, the last axis per voxel.
__global__ void combine_kernel(const combine_args a)
{
    const int nd = a.d.nd, last = nd - 1;
    const ll len = a.d.roi[last];
    for (ll line = (ll)blockIdx.x * WIN_LINES + threadIdx.y; line < a.lines; line += (ll)gridDim.x * WIN_LINES) {
        unsigned pos[SGK_WIN_MAX_DIMS];
        const unsigned r = line_split(nd, a.d.roi32, (unsigned)line, pos);
        ll from = r; // the source line: row r's, flipped along axes 0 .. nd-2
        for (int ax = 0; ax < last; ax++)
            from = from * a.d.roi[ax] + ((a.flip >> ax) & 1u ? a.d.roi[ax] - 1 - pos[ax] : pos[ax]);
        const float *src = a.src + from * len;
        float *dst = a.dst + (ll)line * len;
        const bool flip = (a.flip >> last) & 1u;
        for (ll x = threadIdx.x; x < len; x += WIN_LANES) {
            float v = src[flip ? len - 1 - x : x];
            if (a.add)
                v = dst[x] + v;
            if (a.divisor > 1.0f)
                v = v / a.divisor;
            dst[x] = v;
        }
    }
}

struct acc_args {
    win_dims d;
    ll padded[SGK_WIN_MAX_DIMS];
    const float *pred, *weight; // window i of the launch: pred + i * classes * numel
    ll classes;
    void *acc; // of the kernel's accumulator type
    ll cstride, ring, plane;
    int count;
    ll start[SGK_WIN_BATCH][SGK_WIN_MAX_DIMS];
    // The box the launch's windows cover (padded coordinates, axis 0
    // clipped to the caller's rows): lines over axes 0 .. nd-2, voxels
    // [lo[last], lo[last] + ext[last]) of each.
    ll lo[SGK_WIN_MAX_DIMS];
    unsigned ext[SGK_WIN_MAX_DIMS];
    unsigned lines;
    bool vec4; // see accumulate_voxels
};

// Voxels x .. x + V - 1 of a line: acc's classes and weight (cstride
// apart) plus the contributions of the line's covering windows that
// contain x, in the windows' order. KC: the classes at compile time
// (accumulators in registers, each read and written once), 0: any number
// (class by class, V = 1). V = 4 where a.vec4: every window of the launch
// starts on a multiple of 4 along the last axis and the rows, the window
// and the buffers hold whole float4s, so a window covers all four voxels
// or none. One float at a time, the kernel fell well short of the
// memory's bandwidth. T: the accumulators' type, read into floats once
// and rounded back once, the sums made in float as with float32 ones.
template <typename T, int KC, int V>
__device__ __forceinline__ void accumulate_voxels(const acc_args &a, T *p, ll x, int n, const ll *jline,
                                                  const ll *pline, const ll *xlo)
{
    const ll rl = a.d.roi[a.d.nd - 1];
    if constexpr (KC > 0) {
        float v[KC + 1][V];
#pragma unroll
        for (int k = 0; k <= KC; k++)
            ld_acc<T, V>(p + k * a.cstride, v[k]);
        for (int i = 0; i < n; i++) {
            if (x < xlo[i] || x >= xlo[i] + rl)
                continue;
            float wt[V];
            ld_floats<V>(a.weight + jline[i] + x, wt);
            const float *pr = a.pred + pline[i] + x;
#pragma unroll
            for (int k = 0; k < KC; k++) {
                float q[V];
                ld_floats<V>(pr + k * a.d.numel, q);
#pragma unroll
                for (int j = 0; j < V; j++)
                    v[k][j] = fmaf(q[j], wt[j], v[k][j]);
            }
#pragma unroll
            for (int j = 0; j < V; j++)
                v[KC][j] += wt[j];
        }
#pragma unroll
        for (int k = 0; k <= KC; k++)
            st_acc<T, V>(p + k * a.cstride, v[k]);
    } else {
        static_assert(V == 1, "any number of classes: one voxel at a time");
        for (ll k = 0; k <= a.classes; k++) {
            float v = acc_f(p[k * a.cstride]);
            for (int i = 0; i < n; i++) {
                if (x < xlo[i] || x >= xlo[i] + rl)
                    continue;
                const float wt = a.weight[jline[i] + x];
                v = k < a.classes ? fmaf(a.pred[pline[i] + k * a.d.numel + x], wt, v) : v + wt;
            }
            p[k * a.cstride] = acc_t<T>(v);
        }
    }
}

// A thread per accumulator voxel of the box: it reads the voxel's classes
// and weight once, adds every covering window's contribution in the
// windows' order (the order one launch per window had, so the sums round
// the same), and writes them once. One launch per window read and wrote
// every voxel once per covering window: most of a batch's traffic where
// windows overlap by half. A line's covering windows and their offsets
// are found once, by the warp's lanes, into shared memory.
template <typename T, int KC>
__global__ void accumulate_kernel(const acc_args a)
{
    __shared__ ll s_jline[WIN_LINES][SGK_WIN_BATCH], s_pline[WIN_LINES][SGK_WIN_BATCH], s_xlo[WIN_LINES][SGK_WIN_BATCH];
    const int nd = a.d.nd, last = nd - 1, lane = threadIdx.x;
    ll *jline = s_jline[threadIdx.y], *pline = s_pline[threadIdx.y], *xlo = s_xlo[threadIdx.y];
    const ll rl = a.d.roi[last];
    for (ll line = (ll)blockIdx.x * WIN_LINES + threadIdx.y; line < a.lines; line += (ll)gridDim.x * WIN_LINES) {
        unsigned rel[SGK_WIN_MAX_DIMS];
        line_split(nd, a.ext, (unsigned)line, rel);
        ll pos[SGK_WIN_MAX_DIMS];
        for (int ax = 0; ax < last; ax++)
            pos[ax] = a.lo[ax] + rel[ax];
        // Lane w looks at window w (and w + 32): whether it covers the
        // line, and where the line's voxel x is in it (jline + x) and in
        // its predictions (pline + x). Ballots keep the windows' order.
        int n = 0;
        __syncwarp();
        for (int w0 = 0; w0 < a.count; w0 += WIN_LANES) {
            const int w = w0 + lane;
            bool in = w < a.count;
            ll j = 0;
            for (int ax = 0; ax < last && in; ax++) {
                const ll d = pos[ax] - a.start[w][ax];
                in = d >= 0 && d < a.d.roi[ax];
                j = j * a.d.roi[ax] + d;
            }
            const unsigned mask = __ballot_sync(0xffffffffu, in);
            if (in) {
                const int at = n + __popc(mask & ((1u << lane) - 1u));
                const ll s = a.start[w][last];
                jline[at] = j * rl - s;
                pline[at] = (ll)w * a.classes * a.d.numel + j * rl - s;
                xlo[at] = s;
            }
            n += __popc(mask);
        }
        __syncwarp();
        if (!n)
            continue;
        ll base = 0; // the accumulators' offset of the line's voxel 0
        if (nd > 1) {
            ll inner = 0;
            for (int ax = 1; ax < last; ax++)
                inner = inner * a.padded[ax] + pos[ax];
            base = ring_row(pos[0], 0, a.ring) * a.plane + inner * a.padded[last];
        }
        const int V = KC > 0 && a.vec4 ? 4 : 1;
        for (ll x = a.lo[last] + lane * V; x < a.lo[last] + a.ext[last]; x += WIN_LANES * V) {
            bool any = false;
            for (int i = 0; i < n && !any; i++)
                any = x >= xlo[i] && x < xlo[i] + rl;
            if (!any)
                continue;
            T *p = static_cast<T *>(a.acc) + (nd > 1 ? base + x : ring_row(x, 0, a.ring));
            if constexpr (KC > 0) {
                if (a.vec4)
                    accumulate_voxels<T, KC, 4>(a, p, x, n, jline, pline, xlo);
                else
                    accumulate_voxels<T, KC, 1>(a, p, x, n, jline, pline, xlo);
            } else
                accumulate_voxels<T, 0, 1>(a, p, x, n, jline, pline, xlo);
        }
    }
}

struct final_args {
    int nd, kind;
    float threshold;
    ll size[SGK_WIN_MAX_DIMS], padded[SGK_WIN_MAX_DIMS], pad_begin[SGK_WIN_MAX_DIMS];
    unsigned size32[SGK_WIN_MAX_DIMS]; // axes 1 .. nd-2 for a line's decomposition (axis 0: the row, what is left)
    unsigned lines;                    // n_rows x the plane's lines (1-D: the rows in groups of WIN_LANES)
    ll classes, img_lo, n_rows;  // image rows [img_lo, img_lo + n_rows)
    ll img_plane, pad_plane;
    ll dst_plane; // dst's elements a row: img_plane, or the caller's pitch for a strip of axis 1
    const void *acc; // of the kernel's accumulator type
    ll acc_cstride, acc_ring;
    void *dst;
    int dst_dtype;
    ll dst_cstride, dst_row0;
};

__device__ __forceinline__ void store_label(const final_args &a, ll at, ll v)
{
    if (a.dst_dtype == SEGRT_DTYPE_UINT16)
        ((uint16_t *)a.dst)[at] = (uint16_t)v;
    else
        ((uint8_t *)a.dst)[at] = (uint8_t)v;
}

// One voxel: its classes' sums at src (acc_cstride apart) over the count,
// finished as a.kind into output element `out`. The sums are read as
// floats whatever their type T.
template <typename T> __device__ __forceinline__ void finish_voxel(const final_args &a, const T *src, ll out)
{
    const auto sum = [&](ll k) { return acc_f(src[k * a.acc_cstride]); };
    float count = sum(a.classes);
    float *fd = (float *)a.dst;
    // Probabilities as uint8 (dst_dtype uint8): round(255 p), ties to even
    // as the host path's lrintf.
    const bool u8 = a.dst_dtype == SEGRT_DTYPE_UINT8;
    const auto put = [&](ll k, float p) {
        if (u8)
            ((uint8_t *)a.dst)[k * a.dst_cstride + out] =
                (uint8_t)__float2int_rn(fminf(fmaxf(p, 0.0f), 1.0f) * 255.0f);
        else
            fd[k * a.dst_cstride + out] = p;
    };
    if (count == 0.0f) { // no window that ran covers it (windows skipped): background, every value 0
        if (a.kind == SGK_WIN_FINAL_THRESHOLD)
            for (ll k = 0; k < a.classes; k++)
                ((uint8_t *)a.dst)[k * a.dst_cstride + out] = 0;
        else if (a.kind == SGK_WIN_FINAL_VALUES || a.kind == SGK_WIN_FINAL_SIGMOID || a.kind == SGK_WIN_FINAL_SOFTMAX)
            for (ll k = 0; k < a.classes; k++)
                put(k, 0.0f);
        else
            store_label(a, out, 0);
        return;
    }
    switch (a.kind) {
    case SGK_WIN_FINAL_VALUES:
        for (ll k = 0; k < a.classes; k++)
            fd[k * a.dst_cstride + out] = sum(k) / count;
        break;
    case SGK_WIN_FINAL_SIGMOID:
        for (ll k = 0; k < a.classes; k++)
            put(k, 1.0f / (1.0f + expf(-(sum(k) / count))));
        break;
    case SGK_WIN_FINAL_THRESHOLD:
        for (ll k = 0; k < a.classes; k++) {
            float s = 1.0f / (1.0f + expf(-(sum(k) / count)));
            ((uint8_t *)a.dst)[k * a.dst_cstride + out] = s > a.threshold;
        }
        break;
    case SGK_WIN_FINAL_SOFTMAX: {
        float m = -INFINITY, total = 0.0f;
        for (ll k = 0; k < a.classes; k++)
            m = fmaxf(m, sum(k) / count);
        for (ll k = 0; k < a.classes; k++)
            total += expf(sum(k) / count - m);
        for (ll k = 0; k < a.classes; k++)
            put(k, expf(sum(k) / count - m) / total);
        break;
    }
    default: { // argmax: the first largest
        ll best = 0;
        float bv = sum(0) / count;
        for (ll k = 1; k < a.classes; k++) {
            float v = sum(k) / count;
            if (v > bv) {
                bv = v;
                best = k;
            }
        }
        store_label(a, out, best);
    }
    }
}

// Lines of the image rows [img_lo, img_lo + n_rows): a line's place in the
// padded accumulators and in the output once, then voxel by voxel.
template <typename T> __global__ void finalize_kernel(const final_args a)
{
    const int nd = a.nd, last = nd - 1;
    const T *acc = static_cast<const T *>(a.acc);
    if (nd == 1) { // the rows are the voxels: every thread a voxel
        const ll stride = (ll)gridDim.x * WIN_LINES * WIN_LANES;
        for (ll x = ((ll)blockIdx.x * WIN_LINES + threadIdx.y) * WIN_LANES + threadIdx.x; x < a.n_rows; x += stride) {
            ll r = a.img_lo + x;
            finish_voxel(a, acc + ring_row(r + a.pad_begin[0], 0, a.acc_ring) * a.pad_plane, (r - a.dst_row0) * a.dst_plane);
        }
        return;
    }
    const ll len = a.size[last];
    for (ll line = (ll)blockIdx.x * WIN_LINES + threadIdx.y; line < a.lines; line += (ll)gridDim.x * WIN_LINES) {
        unsigned pos[SGK_WIN_MAX_DIMS], L = (unsigned)line;
        for (int ax = last - 1; ax >= 1; ax--) {
            pos[ax] = L % a.size32[ax];
            L /= a.size32[ax];
        }
        const ll r = a.img_lo + L; // what is left: the row
        ll pin = 0, oin = 0;
        for (int ax = 1; ax < last; ax++) {
            pin = pin * a.padded[ax] + a.pad_begin[ax] + pos[ax];
            oin = oin * a.size[ax] + pos[ax];
        }
        const T *src = acc + ring_row(r + a.pad_begin[0], 0, a.acc_ring) * a.pad_plane + pin * a.padded[last] +
                       a.pad_begin[last];
        const ll out = (r - a.dst_row0) * a.dst_plane + oin * len;
        for (ll x = threadIdx.x; x < len; x += WIN_LANES)
            finish_voxel(a, src + x, out + x);
    }
}

// The class-count specialisations of accumulate_kernel for accumulators of T.
template <typename T> void launch_accumulate(cudaStream_t stream, dim3 grid, dim3 block, ll classes, const acc_args &a)
{
    switch (classes) {
    case 1: accumulate_kernel<T, 1><<<grid, block, 0, stream>>>(a); break;
    case 2: accumulate_kernel<T, 2><<<grid, block, 0, stream>>>(a); break;
    case 3: accumulate_kernel<T, 3><<<grid, block, 0, stream>>>(a); break;
    case 4: accumulate_kernel<T, 4><<<grid, block, 0, stream>>>(a); break;
    default: accumulate_kernel<T, 0><<<grid, block, 0, stream>>>(a); break;
    }
}

} // namespace

// Bytes of an accumulator of type dt, 0 for a type accumulators are not.
static int acc_bytes(segrt_dtype dt)
{
    if (dt == SEGRT_DTYPE_UNDEFINED || dt == SEGRT_DTYPE_FLOAT32)
        return 4;
    return dt == SEGRT_DTYPE_FLOAT16 || dt == SEGRT_DTYPE_BFLOAT16 ? 2 : 0;
}

// Whether window `start` lies inside the image unflipped with 16-byte
// aligned lines in src: gather_whole copies it.
static bool gather_is_whole(const sgk_win_geom *g, const int64_t *start, uint32_t flip_mask, const sgk_win_rows *src,
                            ll plane)
{
    const int last = g->n_dims - 1;
    if (g->n_dims < 2 || flip_mask || g->roi[last] % 4 || (uintptr_t)src->data % 16 || src->channel_stride % 4 ||
        plane % 4 || g->size[last] % 4)
        return false;
    for (int d = 0; d < g->n_dims; d++) {
        ll i = start[d] - g->pad_begin[d];
        if (i < 0 || i + g->roi[d] > g->size[d])
            return false;
    }
    return (start[last] - g->pad_begin[last]) % 4 == 0;
}

extern "C" segrt_status sgk_win_gather(cudaStream_t stream, const sgk_win_geom *g, const int64_t *starts,
                                       int64_t count, int32_t pad_mode, float pad_value, uint32_t flip_mask,
                                       const sgk_win_rows *src, int64_t channels, float *dst)
{
    gather_args a;
    memset(&a, 0, sizeof a);
    a.d = dims_of(g);
    a.plane = 1;
    for (int i = 0; i < SGK_WIN_MAX_DIMS; i++) {
        a.size[i] = i < g->n_dims ? g->size[i] : 1;
        a.pad_begin[i] = i < g->n_dims ? g->pad_begin[i] : 0;
        if (i >= 1 && i < g->n_dims)
            a.plane *= g->size[i];
    }
    a.pad_mode = pad_mode;
    a.pad_value = pad_value;
    a.flip = flip_mask;
    a.src = (const float *)src->data;
    a.cstride = src->channel_stride;
    a.row0 = src->row0;
    a.ring = src->ring;
    a.window = channels * a.d.numel;
    const int last = g->n_dims - 1;
    ll lines = channels * (a.d.numel / a.d.roi[last]);
    if (lines > 0xffffffffLL || a.window > 0xffffffffLL || a.d.numel > 0x7fffffffLL)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "window gather: %lld channels of a %lld-voxel window",
                        (long long)channels, (long long)a.d.numel);
    a.lines = (unsigned)lines;
    a.fq = fastdiv_make((uint32_t)(a.d.roi[last] / 4 > 0 ? a.d.roi[last] / 4 : 1));
    a.fring = fastdiv_make((uint32_t)(a.ring > 0 && a.ring <= 0xffffffffLL ? a.ring : 1));
    for (int i = 0; i < SGK_WIN_MAX_DIMS; i++)
        a.froi[i] = fastdiv_make((uint32_t)a.d.roi[i]);
    if (count < 1 || count > SGK_WIN_BATCH)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "window gather: %lld windows in one launch (1 to %d)",
                        (long long)count, SGK_WIN_BATCH);
    // gather_whole's row arithmetic is 32-bit.
    const bool rows32 = a.ring <= 0xffffffffLL && g->size[0] - a.row0 <= 0xffffffffLL;
    for (int i = 0; i < count; i++) {
        const int64_t *st = starts + i * g->n_dims;
        for (int d = 0; d < SGK_WIN_MAX_DIMS; d++)
            a.start[i][d] = d < g->n_dims ? st[d] : 0;
        a.whole[i] = rows32 && gather_is_whole(g, st, flip_mask, src, a.plane);
    }
    a.dst = dst;
    gather_kernel<<<dim3(line_blocks(lines), (unsigned)count), dim3(WIN_LANES, WIN_LINES), 0, stream>>>(a);
    return launched("sgk_win_gather");
}

extern "C" segrt_status sgk_win_combine(cudaStream_t stream, const sgk_win_geom *g, uint32_t flip_mask, bool add,
                                        float divisor, const float *src, float *dst, int64_t rows)
{
    combine_args a = {dims_of(g), flip_mask, add, divisor, src, dst, 0};
    ll lines = rows * (a.d.numel / a.d.roi[g->n_dims - 1]);
    if (lines > 0xffffffffLL)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "window combination: %lld rows of a %lld-voxel window",
                        (long long)rows, (long long)a.d.numel);
    a.lines = (unsigned)lines;
    combine_kernel<<<line_blocks(lines), dim3(WIN_LANES, WIN_LINES), 0, stream>>>(a);
    return launched("sgk_win_combine");
}

extern "C" segrt_status sgk_win_accumulate(cudaStream_t stream, const sgk_win_geom *g, const int64_t *starts,
                                           int64_t count, const float *pred, const float *weight, int64_t classes,
                                           int64_t row_lo, int64_t row_hi, const sgk_win_rows *acc)
{
    acc_args a;
    memset(&a, 0, sizeof a);
    a.d = dims_of(g);
    a.plane = 1;
    for (int i = 0; i < SGK_WIN_MAX_DIMS; i++) {
        a.padded[i] = i < g->n_dims ? g->padded[i] : 1;
        if (i >= 1 && i < g->n_dims)
            a.plane *= g->padded[i];
    }
    if (a.d.numel > 0x7fffffffLL)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "window accumulation: a %lld-voxel window", (long long)a.d.numel);
    const int esize = acc_bytes(acc->dtype);
    if (!esize)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "window accumulation: accumulators of dtype %d (float32, float16 or bfloat16)",
                        (int)acc->dtype);
    a.weight = weight;
    a.classes = classes;
    a.acc = acc->data;
    a.cstride = acc->channel_stride;
    a.ring = acc->ring;
    if (count < 1 || count > SGK_WIN_BATCH)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "window accumulation: %lld windows in one launch (1 to %d)",
                        (long long)count, SGK_WIN_BATCH);
    const int nd = g->n_dims, last = nd - 1;
    ll lo[SGK_WIN_MAX_DIMS], hi[SGK_WIN_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        lo[d] = INT64_MAX;
        hi[d] = INT64_MIN;
    }
    for (int i = 0; i < count; i++)
        for (int d = 0; d < SGK_WIN_MAX_DIMS; d++) {
            const ll v = d < nd ? starts[i * nd + d] : 0;
            a.start[i][d] = v;
            if (d < nd) {
                lo[d] = v < lo[d] ? v : lo[d];
                hi[d] = v + g->roi[d] > hi[d] ? v + g->roi[d] : hi[d];
            }
        }
    // Only the caller's rows: a contiguous run of each window's voxels,
    // since axis 0 is the slowest.
    lo[0] = lo[0] > row_lo ? lo[0] : row_lo;
    hi[0] = hi[0] < row_hi ? hi[0] : row_hi;
    if (hi[0] <= lo[0])
        return SEGRT_OK;
    ll lines = 1;
    for (int d = 0; d < SGK_WIN_MAX_DIMS; d++) {
        a.lo[d] = d < nd ? lo[d] : 0;
        a.ext[d] = (unsigned)(d < nd ? hi[d] - lo[d] : 1);
        if (d < last)
            lines *= hi[d] - lo[d];
    }
    if (lines > 0xffffffffLL)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "window accumulation: %lld lines", (long long)lines);
    a.lines = (unsigned)lines;
    a.count = (int)count;
    a.pred = pred;
    // Whole groups of four: rows (the plane, the last axis), the window,
    // the channels' stride, the buffers (four accumulators: 16 or 8 bytes)
    // and every start along the last axis.
    a.vec4 = nd > 1 && classes <= 4 && g->roi[last] % 4 == 0 && g->padded[last] % 4 == 0 && a.cstride % 4 == 0 &&
             (uintptr_t)a.acc % (4 * esize) == 0 && (uintptr_t)pred % 16 == 0 && (uintptr_t)weight % 16 == 0;
    for (int i = 0; i < count && a.vec4; i++)
        a.vec4 = a.start[i][last] % 4 == 0;
    const dim3 grid(line_blocks(lines)), block(WIN_LANES, WIN_LINES);
    if (esize == 4)
        launch_accumulate<float>(stream, grid, block, classes, a);
    else if (acc->dtype == SEGRT_DTYPE_FLOAT16)
        launch_accumulate<__half>(stream, grid, block, classes, a);
    else
        launch_accumulate<__nv_bfloat16>(stream, grid, block, classes, a);
    return launched("sgk_win_accumulate");
}

extern "C" segrt_status sgk_win_finalize(cudaStream_t stream, const sgk_win_geom *g, sgk_win_final kind,
                                         float threshold, int64_t classes, int64_t row_lo, int64_t row_hi,
                                         const sgk_win_rows *acc, segrt_dtype out_dtype, const sgk_win_rows *dst)
{
    final_args a;
    a.nd = g->n_dims;
    a.kind = (int)kind;
    a.threshold = threshold;
    a.img_plane = a.pad_plane = 1;
    for (int i = 0; i < SGK_WIN_MAX_DIMS; i++) {
        a.size[i] = i < g->n_dims ? g->size[i] : 1;
        a.padded[i] = i < g->n_dims ? g->padded[i] : 1;
        a.pad_begin[i] = i < g->n_dims ? g->pad_begin[i] : 0;
        if (i >= 1 && i < g->n_dims) {
            a.img_plane *= g->size[i];
            a.pad_plane *= g->padded[i];
        }
    }
    if (!acc_bytes(acc->dtype))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "window finalisation: accumulators of dtype %d (float32, float16 or bfloat16)",
                        (int)acc->dtype);
    // Padded rows [row_lo, row_hi) as image rows, cropped to the image.
    ll lo = row_lo - g->pad_begin[0], hi = row_hi - g->pad_begin[0];
    lo = lo < 0 ? 0 : lo;
    hi = hi > g->size[0] ? g->size[0] : hi;
    if (hi <= lo)
        return SEGRT_OK;
    a.classes = classes;
    a.img_lo = lo;
    a.n_rows = hi - lo;
    a.acc = acc->data;
    a.acc_cstride = acc->channel_stride;
    a.acc_ring = acc->ring;
    a.dst = dst->data;
    a.dst_dtype = (int)out_dtype;
    a.dst_cstride = dst->channel_stride;
    a.dst_row0 = dst->row0;
    a.dst_plane = dst->row_pitch > 0 ? dst->row_pitch : a.img_plane;
    const int last = g->n_dims - 1;
    ll lines = last == 0 ? (a.n_rows + WIN_LANES - 1) / WIN_LANES : a.n_rows * (a.img_plane / a.size[last]);
    if (lines > 0xffffffffLL)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "window finalisation: %lld rows of %lld voxels", (long long)a.n_rows,
                        (long long)a.img_plane);
    for (int i = 0; i < SGK_WIN_MAX_DIMS; i++)
        a.size32[i] = (unsigned)a.size[i];
    a.lines = (unsigned)lines;
    const dim3 grid(line_blocks(lines)), block(WIN_LANES, WIN_LINES);
    if (acc_bytes(acc->dtype) == 4)
        finalize_kernel<float><<<grid, block, 0, stream>>>(a);
    else if (acc->dtype == SEGRT_DTYPE_FLOAT16)
        finalize_kernel<__half><<<grid, block, 0, stream>>>(a);
    else
        finalize_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(a);
    return launched("sgk_win_finalize");
}
