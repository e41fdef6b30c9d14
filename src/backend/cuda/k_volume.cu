// Volume preprocessing kernels (k_volume.h). Each elementwise kernel is a
// grid-stride loop over its output elements with one thread per element,
// so any size runs within the grid's limits; an element's coordinates
// come from 64-bit divisions, a few hundred instructions per element at
// most, which a step run once per volume can afford. The reductions (the
// foreground's box, the statistics) fold each thread's elements, then a
// block's threads by a fixed tree into one partial per block, then the
// partials in one final block: a block count that depends only on the
// sizes, so the same call adds in the same order every time.
//
// The per-element work is in __host__ __device__ functions, the same
// code whatever runs it.
#include "backend/cuda/k_volume.h"

#include "backend/cuda/k_common.cuh"

#include <math.h>
#include <string.h>

#define VOL_THREADS 256           // elementwise blocks
#define VOL_MAX_BLOCKS (1 << 20)  // then threads loop (the grid's x limit is 2^31 - 1)
#define LINE_THREADS 128          // the prefilter's blocks: a thread per line
#define RED_THREADS 256           // reductions' blocks (a power of two: the tree)
#define RED_ELEMS 16              // elements a reducing thread takes at least
#define RED_MAX_BLOCKS 1024       // per-block partials at most (per channel)
#define MAX_GRID_Y 65535

namespace {

unsigned blocks_for(ll n, int threads, ll cap)
{
    ll b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

// Partials of a reduction over n elements: enough blocks that a thread
// takes RED_ELEMS elements or more, RED_MAX_BLOCKS at most.
unsigned red_blocks(ll n)
{
    return blocks_for(n, RED_THREADS * RED_ELEMS, RED_MAX_BLOCKS);
}

#define GRID_LOOP(t, n) for (ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x; t < (n); t += (ll)gridDim.x * blockDim.x)

// scale * o + offset rounded as the host's C computes it (no fused
// multiply-add), so that NEAREST picks the host's sample at exact halves.
__host__ __device__ __forceinline__ double axis_position(double scale, ll o, double offset)
{
#ifdef __CUDA_ARCH__
    return __dadd_rn(__dmul_rn(scale, (double)o), offset);
#else
    return scale * (double)o + offset;
#endif
}

__host__ __device__ __forceinline__ ll clamp_index(ll t, ll n)
{
    return t < 0 ? 0 : t >= n ? n - 1 : t;
}

// The sample at floor(x + 0.5), the ends' beyond them.
__host__ __device__ __forceinline__ ll nearest_index(double x, ll n)
{
    const double f = floor(x + 0.5);
    return f <= 0.0 ? 0 : f >= (double)(n - 1) ? n - 1 : (ll)f;
}

// Cubic B-spline weights of the four coefficients from floor(x) - 1 on,
// f = x - floor(x) (scipy's get_spline_interpolation_weights, order 3).
__host__ __device__ __forceinline__ void cubic_weights(double f, double *w)
{
    const double y = f, z = 1.0 - f;
    w[1] = (y * y * (y - 2.0) * 3.0 + 4.0) / 6.0;
    w[2] = (z * z * (z - 2.0) * 3.0 + 4.0) / 6.0;
    w[0] = z * z * z / 6.0;
    w[3] = 1.0 - w[0] - w[1] - w[2];
}

// The value at x along a line of n samples `stride` apart from p.
__host__ __device__ __forceinline__ float sample_line(const float *p, ll stride, ll n, double x, int interp)
{
    if (interp == SGK_VOL_NEAREST)
        return p[nearest_index(x, n) * stride];
    const double last = (double)(n - 1);
    x = x < 0.0 ? 0.0 : x > last ? last : x;
    const double fl = floor(x);
    const ll t = (ll)fl;
    const double f = x - fl;
    if (interp == SGK_VOL_LINEAR) {
        const double v0 = p[t * stride], v1 = p[clamp_index(t + 1, n) * stride];
        return (float)(v0 + f * (v1 - v0));
    }
    double w[4];
    cubic_weights(f, w);
    double s = 0.0;
    for (int m = 0; m < 4; m++)
        s += w[m] * p[clamp_index(t - 1 + m, n) * stride];
    return (float)s;
}

// sqrt(3) - 2, the cubic B-spline's pole (scipy's get_filter_poles).
#define SPLINE_POLE (-0.267949192431122706472553658494127633)

// The cubic B-spline coefficients of a line of n >= 2 samples, in place,
// as scipy's apply_filter for mode "nearest": the gain, then the causal
// pass from _init_causal_mirror's start and the anticausal pass from
// _init_anticausal_mirror's. The causal pass keeps its running value in
// double; the anticausal pass reads its results back as stored (float).
__host__ __device__ inline void prefilter_line(float *p, ll s, ll n)
{
    const double z = SPLINE_POLE;
    const double gain = (1.0 - z) * (1.0 - 1.0 / z);
    const double zn1 = pow(z, (double)(n - 1));
    double c0 = gain * p[0] + zn1 * (gain * p[(n - 1) * s]);
    double zi = z;
    // Terms past zi's underflow add exact zeros to finite data.
    for (ll i = 1; i < n - 1 && zi != 0.0; i++) {
        c0 += zi * (gain * p[i * s] + zn1 * (gain * p[(n - 1 - i) * s]));
        zi *= z;
    }
    c0 /= 1.0 - zn1 * zn1;
    double prev = c0, prev2 = 0.0;
    p[0] = (float)c0;
    for (ll i = 1; i < n; i++) {
        const double c = gain * p[i * s] + z * prev;
        p[i * s] = (float)c;
        prev2 = prev;
        prev = c;
    }
    double next = (z * prev2 + prev) * z / (z * z - 1.0);
    p[(n - 1) * s] = (float)next;
    for (ll i = n - 2; i >= 0; i--) {
        next = z * (next - (double)p[i * s]);
        p[i * s] = (float)next;
    }
}

// Two taps along one axis of resample_argmax: NEAREST's twice the same
// sample with weight 0 on the second.
struct taps {
    ll t0, t1;
    double w;
};

__host__ __device__ __forceinline__ taps axis_taps(double x, ll n, int interp)
{
    taps r;
    if (interp == SGK_VOL_NEAREST) {
        r.t0 = r.t1 = nearest_index(x, n);
        r.w = 0.0;
        return r;
    }
    const double last = (double)(n - 1);
    x = x < 0.0 ? 0.0 : x > last ? last : x;
    const double fl = floor(x);
    r.t0 = (ll)fl;
    r.t1 = clamp_index(r.t0 + 1, n);
    r.w = x - fl;
    return r;
}

__host__ __device__ __forceinline__ double lerp(double a, double b, double w)
{
    return a + w * (b - a);
}

// Elementwise kernels ---------------------------------------------------------

struct copy_args {
    ll src_offset;
    ll ss[4], ds[4], n[4];
    ll total;
};

template <typename T> __global__ void copy_kernel(const T *src, T *dst, const copy_args a)
{
    GRID_LOOP(t, a.total)
    {
        ll r = t, so = a.src_offset, dof = 0;
        for (int d = 3; d > 0; d--) {
            const ll q = r / a.n[d], x = r - q * a.n[d];
            so += x * a.ss[d];
            dof += x * a.ds[d];
            r = q;
        }
        dst[dof + r * a.ds[0]] = src[so + r * a.ss[0]];
    }
}

struct resample_args {
    const float *src;
    float *dst;
    ll inner, n_in, n_out, total; // inner: elements per step along the axis
    double scale, offset;
    int interp;
};

__global__ void resample_kernel(const resample_args a)
{
    GRID_LOOP(t, a.total)
    {
        const ll q = t / a.inner, r = t - q * a.inner;
        const ll outer = q / a.n_out, o = q - outer * a.n_out;
        const float *p = a.src + outer * a.n_in * a.inner + r;
        a.dst[t] = sample_line(p, a.inner, a.n_in, axis_position(a.scale, o, a.offset), a.interp);
    }
}

struct prefilter_args {
    float *data;
    ll inner, n, lines;
};

__global__ void prefilter_kernel(const prefilter_args a)
{
    GRID_LOOP(line, a.lines)
    {
        const ll outer = line / a.inner, r = line - outer * a.inner;
        prefilter_line(a.data + outer * a.n * a.inner + r, a.inner, a.n);
    }
}

struct intensity_args {
    float *data;
    const uint8_t *mask;
    ll voxels;
    int channels;
    sgk_vol_affine p[SGK_VOL_MAX_CHANNELS];
};

__global__ void intensity_kernel(const intensity_args a)
{
    GRID_LOOP(v, a.voxels)
    {
        const bool keep = !a.mask || a.mask[v] != 0;
        for (int c = 0; c < a.channels; c++) {
            float *q = a.data + c * a.voxels + v;
            const sgk_vol_affine f = a.p[c];
            *q = keep ? (fminf(fmaxf(*q, f.lo), f.hi) - f.sub) * f.mul : 0.0f;
        }
    }
}

struct foreground_args {
    const float *data;
    uint8_t *mask;
    ll voxels, channels;
    bool nonzero;
    float threshold;
};

__global__ void foreground_kernel(const foreground_args a)
{
    GRID_LOOP(v, a.voxels)
    {
        uint8_t fg = 0;
        for (ll c = 0; c < a.channels && !fg; c++) {
            const float x = a.data[c * a.voxels + v];
            fg = a.nonzero ? x != 0.0f : x > a.threshold;
        }
        a.mask[v] = fg;
    }
}

struct argmax_args {
    const float *scores;
    void *labels;
    int dtype;
    ll classes, in_voxels;
    ll in[3], out[3], total;
    double scale[3], offset[3];
    int interp[3];
};

__global__ void argmax_kernel(const argmax_args a)
{
    GRID_LOOP(t, a.total)
    {
        const ll q = t / a.out[2], i = t - q * a.out[2];
        const ll k = q / a.out[1], j = q - k * a.out[1];
        const ll o[3] = {k, j, i};
        taps tp[3];
        for (int d = 0; d < 3; d++)
            tp[d] = axis_taps(axis_position(a.scale[d], o[d], a.offset[d]), a.in[d], a.interp[d]);
        const ll plane = a.in[1] * a.in[2];
        const ll z0 = tp[0].t0 * plane, z1 = tp[0].t1 * plane;
        const ll y0 = tp[1].t0 * a.in[2], y1 = tp[1].t1 * a.in[2];
        const ll x0 = tp[2].t0, x1 = tp[2].t1;
        ll best = 0;
        double bv = 0.0;
        for (ll c = 0; c < a.classes; c++) {
            const float *s = a.scores + c * a.in_voxels;
            const double v00 = lerp(s[z0 + y0 + x0], s[z0 + y0 + x1], tp[2].w);
            const double v01 = lerp(s[z0 + y1 + x0], s[z0 + y1 + x1], tp[2].w);
            const double v10 = lerp(s[z1 + y0 + x0], s[z1 + y0 + x1], tp[2].w);
            const double v11 = lerp(s[z1 + y1 + x0], s[z1 + y1 + x1], tp[2].w);
            const double v = lerp(lerp(v00, v01, tp[1].w), lerp(v10, v11, tp[1].w), tp[0].w);
            // The first largest, as numpy's argmax.
            if (c == 0 || v > bv) {
                bv = v;
                best = c;
            }
        }
        if (a.dtype == SEGRT_DTYPE_UINT16)
            ((uint16_t *)a.labels)[t] = (uint16_t)best;
        else
            ((uint8_t *)a.labels)[t] = (uint8_t)best;
    }
}

// Reductions ----------------------------------------------------------------------

// The foreground's box: least coordinates and greatest plus one.
struct box6 {
    ll v[6];
};

__device__ __forceinline__ void box_empty(box6 &b)
{
    for (int d = 0; d < 3; d++) {
        b.v[d] = INT64_MAX;
        b.v[3 + d] = 0;
    }
}

__device__ __forceinline__ void box_merge(box6 &b, const box6 &o)
{
    for (int d = 0; d < 3; d++) {
        b.v[d] = o.v[d] < b.v[d] ? o.v[d] : b.v[d];
        b.v[3 + d] = o.v[3 + d] > b.v[3 + d] ? o.v[3 + d] : b.v[3 + d];
    }
}

// The block's boxes into thread 0's, by a fixed tree.
__device__ void box_block_reduce(box6 &b)
{
    __shared__ ll sh[6][RED_THREADS];
    const int tid = threadIdx.x;
    for (int d = 0; d < 6; d++)
        sh[d][tid] = b.v[d];
    __syncthreads();
    for (int w = RED_THREADS / 2; w > 0; w >>= 1) {
        if (tid < w) {
            box6 o;
            for (int d = 0; d < 6; d++)
                o.v[d] = sh[d][tid + w];
            box_merge(b, o);
            for (int d = 0; d < 6; d++)
                sh[d][tid] = b.v[d];
        }
        __syncthreads();
    }
}

struct box_args {
    const uint8_t *mask;
    ll dims[3], voxels;
    box6 *partials;
    ll *box;
};

__global__ void box_partial_kernel(const box_args a)
{
    box6 b;
    box_empty(b);
    const ll plane = a.dims[1] * a.dims[2];
    GRID_LOOP(v, a.voxels)
    {
        if (!a.mask[v])
            continue;
        const ll k = v / plane, rest = v - k * plane, j = rest / a.dims[2], i = rest - j * a.dims[2];
        const box6 o = {{k, j, i, k + 1, j + 1, i + 1}};
        box_merge(b, o);
    }
    box_block_reduce(b);
    if (threadIdx.x == 0)
        a.partials[blockIdx.x] = b;
}

__global__ void box_final_kernel(const box_args a, int n_partials)
{
    box6 b;
    box_empty(b);
    for (int p = threadIdx.x; p < n_partials; p += RED_THREADS)
        box_merge(b, a.partials[p]);
    box_block_reduce(b);
    if (threadIdx.x == 0)
        for (int d = 0; d < 6; d++)
            a.box[d] = b.v[d];
}

__device__ __forceinline__ void stats_empty(sgk_vol_stat &s)
{
    s.count = 0;
    s.sum = s.sum_sq = 0.0;
    s.min = INFINITY;
    s.max = -INFINITY;
}

__device__ __forceinline__ void stats_merge(sgk_vol_stat &s, const sgk_vol_stat &o)
{
    s.count += o.count;
    s.sum += o.sum;
    s.sum_sq += o.sum_sq;
    s.min = o.min < s.min ? o.min : s.min;
    s.max = o.max > s.max ? o.max : s.max;
}

__device__ void stats_block_reduce(sgk_vol_stat &s)
{
    __shared__ ll sh_n[RED_THREADS];
    __shared__ double sh_v[4][RED_THREADS];
    const int tid = threadIdx.x;
    sh_n[tid] = s.count;
    sh_v[0][tid] = s.sum;
    sh_v[1][tid] = s.sum_sq;
    sh_v[2][tid] = s.min;
    sh_v[3][tid] = s.max;
    __syncthreads();
    for (int w = RED_THREADS / 2; w > 0; w >>= 1) {
        if (tid < w) {
            const sgk_vol_stat o = {sh_n[tid + w], sh_v[0][tid + w], sh_v[1][tid + w], sh_v[2][tid + w],
                                     sh_v[3][tid + w]};
            stats_merge(s, o);
            sh_n[tid] = s.count;
            sh_v[0][tid] = s.sum;
            sh_v[1][tid] = s.sum_sq;
            sh_v[2][tid] = s.min;
            sh_v[3][tid] = s.max;
        }
        __syncthreads();
    }
}

struct stats_args {
    const float *data;
    const uint8_t *mask;
    ll voxels, channels;
    sgk_vol_stat *partials; // channel c's at c * gridDim.x
    sgk_vol_stat *out;
};

// Grid (partials per channel, channels in a loop over y).
__global__ void stats_partial_kernel(const stats_args a)
{
    for (ll c = blockIdx.y; c < a.channels; c += gridDim.y) {
        sgk_vol_stat s;
        stats_empty(s);
        const float *x = a.data + c * a.voxels;
        GRID_LOOP(v, a.voxels)
        {
            if (a.mask && !a.mask[v])
                continue;
            const double d = x[v];
            s.count++;
            s.sum += d;
            s.sum_sq += d * d;
            s.min = d < s.min ? d : s.min;
            s.max = d > s.max ? d : s.max;
        }
        stats_block_reduce(s);
        if (threadIdx.x == 0)
            a.partials[c * gridDim.x + blockIdx.x] = s;
        __syncthreads(); // the shared arrays are the next channel's
    }
}

__global__ void stats_final_kernel(const stats_args a, int n_partials)
{
    for (ll c = blockIdx.x; c < a.channels; c += gridDim.x) {
        sgk_vol_stat s;
        stats_empty(s);
        for (int p = threadIdx.x; p < n_partials; p += RED_THREADS)
            stats_merge(s, a.partials[c * n_partials + p]);
        stats_block_reduce(s);
        if (threadIdx.x == 0)
            a.out[c] = s;
        __syncthreads();
    }
}

ll count4(const int64_t dims[4])
{
    return dims[0] * dims[1] * dims[2] * dims[3];
}

} // namespace

extern "C" segrt_status sgk_vol_strided_copy(cudaStream_t stream, size_t elem_size, const void *src,
                                             int64_t src_offset, const int64_t src_stride[4], void *dst,
                                             const int64_t dst_stride[4], const int64_t dims[4])
{
    copy_args a;
    memset(&a, 0, sizeof a);
    a.src_offset = src_offset;
    for (int d = 0; d < 4; d++) {
        a.ss[d] = src_stride[d];
        a.ds[d] = dst_stride[d];
        a.n[d] = dims[d];
    }
    a.total = count4(dims);
    if (a.total <= 0)
        return SEGRT_OK;
    const unsigned blocks = blocks_for(a.total, VOL_THREADS, VOL_MAX_BLOCKS);
    switch (elem_size) {
    case 1: copy_kernel<uint8_t><<<blocks, VOL_THREADS, 0, stream>>>((const uint8_t *)src, (uint8_t *)dst, a); break;
    case 2:
        copy_kernel<uint16_t><<<blocks, VOL_THREADS, 0, stream>>>((const uint16_t *)src, (uint16_t *)dst, a);
        break;
    case 4:
        copy_kernel<uint32_t><<<blocks, VOL_THREADS, 0, stream>>>((const uint32_t *)src, (uint32_t *)dst, a);
        break;
    default:
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sgk_vol_strided_copy: elements of %zu bytes (1, 2 or 4)",
                        elem_size);
    }
    return launched("sgk_vol_strided_copy");
}

extern "C" segrt_status sgk_vol_resample_axis(cudaStream_t stream, const float *src, const int64_t dims[4],
                                              int32_t axis, const sgk_vol_axis *ax, float *dst)
{
    if (axis < 1 || axis > 3)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sgk_vol_resample_axis: axis %d (1 to 3)", (int)axis);
    resample_args a;
    memset(&a, 0, sizeof a);
    a.src = src;
    a.dst = dst;
    a.inner = 1;
    for (int d = axis + 1; d < 4; d++)
        a.inner *= dims[d];
    a.n_in = dims[axis];
    a.n_out = ax->n_out;
    a.total = a.n_out;
    for (int d = 0; d < 4; d++)
        a.total *= d == axis ? 1 : dims[d];
    if (a.total <= 0)
        return SEGRT_OK;
    if (a.n_in <= 0)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sgk_vol_resample_axis: %lld outputs from an empty axis",
                        (long long)a.n_out);
    a.scale = ax->scale;
    a.offset = ax->offset;
    a.interp = ax->interp;
    resample_kernel<<<blocks_for(a.total, VOL_THREADS, VOL_MAX_BLOCKS), VOL_THREADS, 0, stream>>>(a);
    return launched("sgk_vol_resample_axis");
}

extern "C" segrt_status sgk_vol_spline_prefilter(cudaStream_t stream, float *data, const int64_t dims[4],
                                                 int32_t axis)
{
    if (axis < 1 || axis > 3)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sgk_vol_spline_prefilter: axis %d (1 to 3)", (int)axis);
    prefilter_args a;
    memset(&a, 0, sizeof a);
    a.data = data;
    a.inner = 1;
    for (int d = axis + 1; d < 4; d++)
        a.inner *= dims[d];
    a.n = dims[axis];
    if (a.n < 2 || count4(dims) <= 0)
        return SEGRT_OK; // nothing, or lines of one sample, which scipy leaves as they are
    a.lines = count4(dims) / a.n;
    prefilter_kernel<<<blocks_for(a.lines, LINE_THREADS, VOL_MAX_BLOCKS), LINE_THREADS, 0, stream>>>(a);
    return launched("sgk_vol_spline_prefilter");
}

extern "C" segrt_status sgk_vol_intensity(cudaStream_t stream, float *data, const int64_t dims[4],
                                          const sgk_vol_affine *params, const uint8_t *mask)
{
    if (dims[0] > SGK_VOL_MAX_CHANNELS)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sgk_vol_intensity: %lld channels (%d at most)",
                        (long long)dims[0], SGK_VOL_MAX_CHANNELS);
    intensity_args a;
    memset(&a, 0, sizeof a);
    a.data = data;
    a.mask = mask;
    a.voxels = dims[1] * dims[2] * dims[3];
    a.channels = (int)dims[0];
    if (a.voxels <= 0 || a.channels <= 0)
        return SEGRT_OK;
    for (int c = 0; c < a.channels; c++)
        a.p[c] = params[c];
    intensity_kernel<<<blocks_for(a.voxels, VOL_THREADS, VOL_MAX_BLOCKS), VOL_THREADS, 0, stream>>>(a);
    return launched("sgk_vol_intensity");
}

extern "C" segrt_status sgk_vol_foreground_mask(cudaStream_t stream, const float *data, const int64_t dims[4],
                                                bool nonzero, float threshold, uint8_t *mask)
{
    foreground_args a = {data, mask, dims[1] * dims[2] * dims[3], dims[0], nonzero, threshold};
    if (a.voxels <= 0)
        return SEGRT_OK;
    foreground_kernel<<<blocks_for(a.voxels, VOL_THREADS, VOL_MAX_BLOCKS), VOL_THREADS, 0, stream>>>(a);
    return launched("sgk_vol_foreground_mask");
}

extern "C" size_t sgk_vol_mask_box_scratch(const int64_t dims[3])
{
    return (size_t)red_blocks(dims[0] * dims[1] * dims[2]) * sizeof(box6);
}

extern "C" segrt_status sgk_vol_mask_box(cudaStream_t stream, const uint8_t *mask, const int64_t dims[3],
                                         void *scratch, int64_t *box)
{
    box_args a;
    memset(&a, 0, sizeof a);
    a.mask = mask;
    for (int d = 0; d < 3; d++)
        a.dims[d] = dims[d] > 0 ? dims[d] : 0;
    a.voxels = a.dims[0] * a.dims[1] * a.dims[2];
    a.partials = (box6 *)scratch;
    a.box = (ll *)box;
    // Over no voxels the partial kernel's threads find nothing: every
    // partial is the empty box, and so is the result.
    const unsigned blocks = red_blocks(a.voxels);
    box_partial_kernel<<<blocks, RED_THREADS, 0, stream>>>(a);
    segrt_status s = launched("sgk_vol_mask_box (partials)");
    if (s != SEGRT_OK)
        return s;
    box_final_kernel<<<1, RED_THREADS, 0, stream>>>(a, (int)blocks);
    return launched("sgk_vol_mask_box");
}

extern "C" size_t sgk_vol_stats_scratch(const int64_t dims[4])
{
    return (size_t)red_blocks(dims[1] * dims[2] * dims[3]) * (size_t)(dims[0] > 0 ? dims[0] : 0) *
           sizeof(sgk_vol_stat);
}

extern "C" segrt_status sgk_vol_stats(cudaStream_t stream, const float *data, const int64_t dims[4],
                                      const uint8_t *mask, void *scratch, sgk_vol_stat *out)
{
    stats_args a;
    memset(&a, 0, sizeof a);
    a.data = data;
    a.mask = mask;
    a.voxels = dims[1] * dims[2] * dims[3];
    a.channels = dims[0];
    a.partials = (sgk_vol_stat *)scratch;
    a.out = out;
    if (a.channels <= 0)
        return SEGRT_OK;
    if (a.voxels < 0)
        a.voxels = 0;
    const unsigned blocks = red_blocks(a.voxels);
    const unsigned gy = (unsigned)(a.channels < MAX_GRID_Y ? a.channels : MAX_GRID_Y);
    stats_partial_kernel<<<dim3(blocks, gy), RED_THREADS, 0, stream>>>(a);
    segrt_status s = launched("sgk_vol_stats (partials)");
    if (s != SEGRT_OK)
        return s;
    stats_final_kernel<<<blocks_for(a.channels, 1, MAX_GRID_Y), RED_THREADS, 0, stream>>>(a, (int)blocks);
    return launched("sgk_vol_stats");
}

extern "C" segrt_status sgk_vol_resample_argmax(cudaStream_t stream, const float *scores, int64_t classes,
                                                const int64_t in_dims[3], const sgk_vol_axis ax[3],
                                                segrt_dtype out_dtype, void *labels)
{
    if (out_dtype != SEGRT_DTYPE_UINT8 && out_dtype != SEGRT_DTYPE_UINT16)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sgk_vol_resample_argmax: labels of dtype %d (uint8 or uint16)",
                        (int)out_dtype);
    argmax_args a;
    memset(&a, 0, sizeof a);
    a.scores = scores;
    a.labels = labels;
    a.dtype = (int)out_dtype;
    a.classes = classes;
    a.in_voxels = in_dims[0] * in_dims[1] * in_dims[2];
    a.total = 1;
    for (int d = 0; d < 3; d++) {
        a.in[d] = in_dims[d];
        a.out[d] = ax[d].n_out;
        a.total *= ax[d].n_out;
        a.scale[d] = ax[d].scale;
        a.offset[d] = ax[d].offset;
        a.interp[d] = ax[d].interp;
        if (ax[d].interp != SGK_VOL_NEAREST && ax[d].interp != SGK_VOL_LINEAR)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "sgk_vol_resample_argmax: axis %d's interpolation %d (nearest or linear)", d,
                            (int)ax[d].interp);
    }
    if (a.total <= 0)
        return SEGRT_OK;
    if (classes < 1 || a.in_voxels <= 0)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sgk_vol_resample_argmax: %lld classes over %lld voxels",
                        (long long)classes, (long long)a.in_voxels);
    argmax_kernel<<<blocks_for(a.total, VOL_THREADS, VOL_MAX_BLOCKS), VOL_THREADS, 0, stream>>>(a);
    return launched("sgk_vol_resample_argmax");
}
