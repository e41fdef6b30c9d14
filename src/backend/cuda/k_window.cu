// Sliding-window kernels (k_window.h). Each thread owns one output
// element; positions are decomposed with 64-bit arithmetic (a window or a
// slab of a large volume exceeds 2^31 elements with many classes).
#include "backend/cuda/k_window.h"

#include "backend/cuda/k_common.cuh"

#include <math.h>

#define WIN_THREADS 256

namespace {

unsigned blocks_of(ll n)
{
    ll b = (n + WIN_THREADS - 1) / WIN_THREADS;
    return (unsigned)(b < 1 ? 1 : b > 0x7fffffffLL ? 0x7fffffffLL : b);
}

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
    ll numel; // of the window
};

win_dims dims_of(const sgk_win_geom *g)
{
    win_dims d;
    d.nd = g->n_dims;
    d.numel = 1;
    for (int i = 0; i < SGK_WIN_MAX_DIMS; i++) {
        d.roi[i] = i < g->n_dims ? g->roi[i] : 1;
        d.numel *= d.roi[i];
    }
    return d;
}

// Window position j as per-axis coordinates (axis nd-1 fastest).
__device__ __forceinline__ void split(const win_dims &d, ll j, ll *pos)
{
    for (int a = d.nd - 1; a >= 0; a--) {
        pos[a] = j % d.roi[a];
        j /= d.roi[a];
    }
}

__device__ __forceinline__ ll flipped(const win_dims &d, ll j, unsigned mask)
{
    if (!mask)
        return j;
    ll pos[SGK_WIN_MAX_DIMS];
    split(d, j, pos);
    ll f = 0;
    for (int a = 0; a < d.nd; a++)
        f = f * d.roi[a] + ((mask >> a) & 1u ? d.roi[a] - 1 - pos[a] : pos[a]);
    return f;
}

__device__ __forceinline__ ll ring_row(ll r, ll row0, ll ring)
{
    ll i = r - row0;
    return ring > 0 ? i % ring : i;
}

struct gather_args {
    win_dims d;
    ll start[SGK_WIN_MAX_DIMS], size[SGK_WIN_MAX_DIMS], pad_begin[SGK_WIN_MAX_DIMS];
    int pad_mode;
    float pad_value;
    unsigned flip;
    const float *src;
    ll cstride, row0, ring, plane; // plane: voxels per image row
    ll channels;
    float *dst;
};

__global__ void gather_kernel(const gather_args a)
{
    ll n = a.channels * a.d.numel;
    for (ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (ll)gridDim.x * blockDim.x) {
        ll c = t / a.d.numel, j = t % a.d.numel;
        ll pos[SGK_WIN_MAX_DIMS];
        split(a.d, flipped(a.d, j, a.flip), pos);
        ll row = 0, inner = 0;
        bool inside = true;
        for (int ax = 0; ax < a.d.nd && inside; ax++) {
            ll i = pad_source(a.start[ax] + pos[ax], a.pad_begin[ax], a.size[ax], a.pad_mode);
            inside = i >= 0;
            if (ax == 0)
                row = ring_row(i, a.row0, a.ring);
            else
                inner = inner * a.size[ax] + i;
        }
        a.dst[t] = inside ? a.src[c * a.cstride + row * a.plane + inner] : a.pad_value;
    }
}

struct combine_args {
    win_dims d;
    unsigned flip;
    bool add;
    float divisor;
    const float *src;
    float *dst;
    ll rows;
};

__global__ void combine_kernel(const combine_args a)
{
    ll n = a.rows * a.d.numel;
    for (ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (ll)gridDim.x * blockDim.x) {
        ll r = t / a.d.numel, j = t % a.d.numel;
        float v = a.src[r * a.d.numel + flipped(a.d, j, a.flip)];
        if (a.add)
            v = a.dst[t] + v;
        if (a.divisor > 1.0f)
            v = v / a.divisor;
        a.dst[t] = v;
    }
}

struct acc_args {
    win_dims d;
    ll start[SGK_WIN_MAX_DIMS], padded[SGK_WIN_MAX_DIMS];
    const float *pred, *weight;
    ll classes, j_lo, j_n; // window positions [j_lo, j_lo + j_n): its rows in the caller's range
    float *acc;
    ll cstride, ring, plane;
};

__global__ void accumulate_kernel(const acc_args a)
{
    ll n = (a.classes + 1) * a.j_n;
    for (ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (ll)gridDim.x * blockDim.x) {
        ll k = t / a.j_n, j = a.j_lo + t % a.j_n;
        ll pos[SGK_WIN_MAX_DIMS];
        split(a.d, j, pos);
        ll off = ring_row(a.start[0] + pos[0], 0, a.ring) * a.plane, inner = 0;
        for (int ax = 1; ax < a.d.nd; ax++)
            inner = inner * a.padded[ax] + a.start[ax] + pos[ax];
        float *p = a.acc + k * a.cstride + off + inner;
        float w = a.weight[j];
        *p += k < a.classes ? a.pred[k * a.d.numel + j] * w : w;
    }
}

struct final_args {
    int nd, kind;
    float threshold;
    ll size[SGK_WIN_MAX_DIMS], padded[SGK_WIN_MAX_DIMS], pad_begin[SGK_WIN_MAX_DIMS];
    ll classes, img_lo, n_rows;  // image rows [img_lo, img_lo + n_rows)
    ll img_plane, pad_plane;
    const float *acc;
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

__global__ void finalize_kernel(const final_args a)
{
    ll n = a.n_rows * a.img_plane;
    for (ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (ll)gridDim.x * blockDim.x) {
        ll r = a.img_lo + t / a.img_plane, rest = t % a.img_plane;
        // The voxel's offset in the padded plane.
        ll inner = 0, q = rest, mul = 1;
        for (int ax = a.nd - 1; ax >= 1; ax--) {
            ll p = q % a.size[ax] + a.pad_begin[ax];
            q /= a.size[ax];
            inner += p * mul;
            mul *= a.padded[ax];
        }
        ll pr = r + a.pad_begin[0];
        const float *src = a.acc + ring_row(pr, 0, a.acc_ring) * a.pad_plane + inner;
        float count = src[a.classes * a.acc_cstride];
        ll out = (r - a.dst_row0) * a.img_plane + rest;
        float *fd = (float *)a.dst;
        switch (a.kind) {
        case SGK_WIN_FINAL_VALUES:
            for (ll k = 0; k < a.classes; k++)
                fd[k * a.dst_cstride + out] = src[k * a.acc_cstride] / count;
            break;
        case SGK_WIN_FINAL_SIGMOID:
            for (ll k = 0; k < a.classes; k++)
                fd[k * a.dst_cstride + out] = 1.0f / (1.0f + expf(-(src[k * a.acc_cstride] / count)));
            break;
        case SGK_WIN_FINAL_THRESHOLD:
            for (ll k = 0; k < a.classes; k++) {
                float s = 1.0f / (1.0f + expf(-(src[k * a.acc_cstride] / count)));
                ((uint8_t *)a.dst)[k * a.dst_cstride + out] = s > a.threshold;
            }
            break;
        case SGK_WIN_FINAL_SOFTMAX: {
            float m = -INFINITY, sum = 0.0f;
            for (ll k = 0; k < a.classes; k++)
                m = fmaxf(m, src[k * a.acc_cstride] / count);
            for (ll k = 0; k < a.classes; k++)
                sum += expf(src[k * a.acc_cstride] / count - m);
            for (ll k = 0; k < a.classes; k++)
                fd[k * a.dst_cstride + out] = expf(src[k * a.acc_cstride] / count - m) / sum;
            break;
        }
        default: { // argmax: the first largest
            ll best = 0;
            float bv = src[0] / count;
            for (ll k = 1; k < a.classes; k++) {
                float v = src[k * a.acc_cstride] / count;
                if (v > bv) {
                    bv = v;
                    best = k;
                }
            }
            store_label(a, out, best);
        }
        }
    }
}

} // namespace

extern "C" segrt_status sgk_win_gather(cudaStream_t stream, const sgk_win_geom *g, const int64_t *start,
                                       int32_t pad_mode, float pad_value, uint32_t flip_mask,
                                       const sgk_win_rows *src, int64_t channels, float *dst)
{
    gather_args a;
    a.d = dims_of(g);
    a.plane = 1;
    for (int i = 0; i < SGK_WIN_MAX_DIMS; i++) {
        a.start[i] = i < g->n_dims ? start[i] : 0;
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
    a.channels = channels;
    a.dst = dst;
    gather_kernel<<<blocks_of(channels * a.d.numel), WIN_THREADS, 0, stream>>>(a);
    return launched("sgk_win_gather");
}

extern "C" segrt_status sgk_win_combine(cudaStream_t stream, const sgk_win_geom *g, uint32_t flip_mask, bool add,
                                        float divisor, const float *src, float *dst, int64_t rows)
{
    combine_args a = {dims_of(g), flip_mask, add, divisor, src, dst, rows};
    combine_kernel<<<blocks_of(rows * a.d.numel), WIN_THREADS, 0, stream>>>(a);
    return launched("sgk_win_combine");
}

extern "C" segrt_status sgk_win_accumulate(cudaStream_t stream, const sgk_win_geom *g, const int64_t *start,
                                           const float *pred, const float *weight, int64_t classes, int64_t row_lo,
                                           int64_t row_hi, const sgk_win_rows *acc)
{
    acc_args a;
    a.d = dims_of(g);
    a.plane = 1;
    for (int i = 0; i < SGK_WIN_MAX_DIMS; i++) {
        a.start[i] = i < g->n_dims ? start[i] : 0;
        a.padded[i] = i < g->n_dims ? g->padded[i] : 1;
        if (i >= 1 && i < g->n_dims)
            a.plane *= g->padded[i];
    }
    // The window's rows inside [row_lo, row_hi): a contiguous run of its
    // positions, since axis 0 is the slowest.
    ll lo = row_lo > start[0] ? row_lo - start[0] : 0;
    ll hi = row_hi - start[0] < a.d.roi[0] ? row_hi - start[0] : a.d.roi[0];
    if (hi <= lo)
        return SEGRT_OK;
    ll per_row = a.d.numel / a.d.roi[0];
    a.j_lo = lo * per_row;
    a.j_n = (hi - lo) * per_row;
    a.pred = pred;
    a.weight = weight;
    a.classes = classes;
    a.acc = (float *)acc->data;
    a.cstride = acc->channel_stride;
    a.ring = acc->ring;
    accumulate_kernel<<<blocks_of((classes + 1) * a.j_n), WIN_THREADS, 0, stream>>>(a);
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
    // Padded rows [row_lo, row_hi) as image rows, cropped to the image.
    ll lo = row_lo - g->pad_begin[0], hi = row_hi - g->pad_begin[0];
    lo = lo < 0 ? 0 : lo;
    hi = hi > g->size[0] ? g->size[0] : hi;
    if (hi <= lo)
        return SEGRT_OK;
    a.classes = classes;
    a.img_lo = lo;
    a.n_rows = hi - lo;
    a.acc = (const float *)acc->data;
    a.acc_cstride = acc->channel_stride;
    a.acc_ring = acc->ring;
    a.dst = dst->data;
    a.dst_dtype = (int)out_dtype;
    a.dst_cstride = dst->channel_stride;
    a.dst_row0 = dst->row0;
    finalize_kernel<<<blocks_of(a.n_rows * a.img_plane), WIN_THREADS, 0, stream>>>(a);
    return launched("sgk_win_finalize");
}
