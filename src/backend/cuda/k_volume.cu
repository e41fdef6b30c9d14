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
// Positions, taps and sums follow the CPU backend's (cpu_volume.c, the
// reference) step for step, so that the two agree to the bit where the
// arithmetic allows it: everywhere but the spline prefilter, whose causal
// pass is stored as floats between the passes here, and CUBIC's weights
// past the ends, which take powers of z from each side's pow. The per-element work
// is in __host__ __device__ functions.
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
    const ll b = ceil_div(n, threads);
    return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

// Partials of a reduction over n elements: a block per RED_ELEMS elements
// a thread, RED_MAX_BLOCKS at most (threads then take more).
unsigned red_blocks(ll n)
{
    return blocks_for(n, RED_THREADS * RED_ELEMS, RED_MAX_BLOCKS);
}

#define GRID_LOOP(t, n) for (ll t = (ll)blockIdx.x * blockDim.x + threadIdx.x; t < (n); t += (ll)gridDim.x * blockDim.x)

// Double arithmetic rounded at every step, as the host's C rounds it:
// nvcc would fuse a multiply and an add into one rounding, and then a
// position, a weight or a sum could differ from the CPU backend's in its
// last bit, enough to move a NEAREST sample at an exact half or turn a tie
// between two classes.
#ifdef __CUDA_ARCH__
#define DMUL(a, b) __dmul_rn((a), (b))
#define DADD(a, b) __dadd_rn((a), (b))
#define DSUB(a, b) __dsub_rn((a), (b))
#else
#define DMUL(a, b) ((a) * (b))
#define DADD(a, b) ((a) + (b))
#define DSUB(a, b) ((a) - (b))
#endif

// sqrt(3) - 2, the cubic B-spline's pole.
#define SPLINE_Z (-0.267949192431122706472553658494127633)

// What one output position reads along an axis: up to N samples and their
// weights (CUBIC, with the coefficients past the ends folded into the
// nearest two, 6 at most; NEAREST and LINEAR 2). Samples read twice are
// merged and zero weights left out, as the CPU backend builds them, so
// that both add the same terms in the same order.
template <int N> struct taps {
    int n;
    ll idx[N];
    double w[N];
};

template <int N> __host__ __device__ __forceinline__ void taps_add(taps<N> &t, ll idx, double w)
{
    if (w == 0.0)
        return;
    for (int i = 0; i < t.n; i++)
        if (t.idx[i] == idx) {
            t.w[i] = DADD(t.w[i], w);
            return;
        }
    t.idx[t.n] = idx;
    t.w[t.n++] = w;
}

// Coefficient idx (any) of a line of n: those of the line extended by its
// edge samples forever. Before index 0, c[k] = s0 (1 - z^-k) + c[0] z^-k
// with s0 = ((5 + z) c[0] + (1 - z) c[1]) / 6 the edge sample, a
// combination of c[0] and c[1]; past n - 1 likewise.
template <int N> __host__ __device__ __forceinline__ void spline_tap(taps<N> &t, ll idx, ll n, double w)
{
    const double z = SPLINE_Z;
    if (n == 1) {
        taps_add(t, 0, w);
        return;
    }
    if (idx >= 0 && idx < n) {
        taps_add(t, idx, w);
        return;
    }
    const ll e0 = idx < 0 ? 0 : n - 1, e1 = idx < 0 ? 1 : n - 2, m = idx < 0 ? -idx : idx - (n - 1);
    const double q = m < 64 ? pow(z, (double)m) : 0.0;
    taps_add(t, e0, DMUL(w, DADD(DMUL(DSUB(1.0, q), 5.0 + z) / 6.0, q)));
    taps_add(t, e1, DMUL(DMUL(w, DSUB(1.0, q)), 1.0 - z) / 6.0);
}

// Output position o of an axis of n inputs reads x = scale * (o + shift) +
// offset (rounded in that order: scipy's grid, scale * (o + 0.5) - 0.5,
// lands on exact halves that scale * o + (0.5 scale - 0.5) misses):
// NEAREST the sample at floor(x + 0.5) and LINEAR the two around x, x
// clamped to [0, n - 1]; CUBIC the four B-spline coefficients around x
// unclamped (the spline of the edge-extended line, as scipy's zoom
// evaluates it past the ends).
template <int N>
__host__ __device__ __forceinline__ void axis_taps(double scale, double shift, double offset, int interp, ll n, ll o,
                                                   taps<N> &t)
{
    double x = DADD(DMUL(scale, DADD((double)o, shift)), offset);
    t.n = 0;
    if (interp == SGK_VOL_CUBIC) {
        const double f = floor(x), u = x - f, u2 = DMUL(u, u), u3 = DMUL(u2, u), v = 1.0 - u;
        const ll i0 = (ll)f;
        const double w[4] = {DMUL(DMUL(v, v), v) / 6.0, DADD(DSUB(DMUL(3.0, u3), DMUL(6.0, u2)), 4.0) / 6.0,
                             DADD(DADD(DADD(DMUL(-3.0, u3), DMUL(3.0, u2)), DMUL(3.0, u)), 1.0) / 6.0, u3 / 6.0};
        for (int k = 0; k < 4; k++)
            if (w[k] != 0.0)
                spline_tap(t, i0 - 1 + k, n, w[k]);
        return;
    }
    if (!(x > 0.0))
        x = 0.0;
    if (x > (double)(n - 1))
        x = (double)(n - 1);
    if (interp == SGK_VOL_NEAREST) {
        const ll i = (ll)floor(x + 0.5);
        taps_add(t, i < n ? i : n - 1, 1.0);
        return;
    }
    const double f = floor(x);
    const ll i0 = (ll)f;
    const double u = x - f;
    taps_add(t, i0, 1.0 - u);
    taps_add(t, i0 + 1 < n ? i0 + 1 : n - 1, u);
}

// The cubic B-spline coefficients of a line of n >= 2 samples `s` apart,
// in place: the causal and anticausal passes of the inverse filter,
// started as for the line extended by its edge samples forever (scipy's
// zoom and map_coordinates pad a line with its edge before the filter),
// then the gain 6. The passes run in double; the causal pass's results
// wait in the line as floats for the anticausal pass.
__host__ __device__ inline void prefilter_line(float *p, ll s, ll n)
{
    const double z = SPLINE_Z;
    // The causal pass's limit past the end, for the anticausal start.
    const double p_end = (double)p[(n - 1) * s] / (1.0 - z);
    double prev = (double)p[0] / (1.0 - z);
    p[0] = (float)prev;
    for (ll k = 1; k < n; k++) {
        prev = DADD((double)p[k * s], DMUL(z, prev));
        p[k * s] = (float)prev;
    }
    double next = DMUL(-z, DADD(p_end / (1.0 - z), DSUB(prev, p_end) / DSUB(1.0, DMUL(z, z))));
    p[(n - 1) * s] = (float)DMUL(6.0, next);
    for (ll k = n - 2; k >= 0; k--) {
        next = DMUL(z, DSUB(next, (double)p[k * s]));
        p[k * s] = (float)DMUL(6.0, next);
    }
}

// The value of a line at one output position: its taps' weighted sum.
template <int N> __host__ __device__ __forceinline__ float sample_taps(const float *p, ll stride, const taps<N> &t)
{
    double a = 0.0;
    for (int q = 0; q < t.n; q++)
        a = DADD(a, DMUL(t.w[q], (double)p[t.idx[q] * stride]));
    return (float)a;
}

// Elementwise kernels ---------------------------------------------------------

struct copy_args {
    const void *src;
    void *dst;
    ll src_offset;
    ll ss[4], ds[4], n[4];
    ll total;
};

template <typename T> __host__ __device__ __forceinline__ void copy_at(const copy_args &a, ll t)
{
    ll r = t, so = a.src_offset, dof = 0;
    for (int d = 3; d > 0; d--) {
        const ll q = r / a.n[d], x = r - q * a.n[d];
        so += x * a.ss[d];
        dof += x * a.ds[d];
        r = q;
    }
    ((T *)a.dst)[dof + r * a.ds[0]] = ((const T *)a.src)[so + r * a.ss[0]];
}

template <typename T> __global__ void copy_kernel(const copy_args a)
{
    GRID_LOOP(t, a.total)
    {
        copy_at<T>(a, t);
    }
}

struct resample_args {
    const float *src;
    float *dst;
    ll inner, n_in, n_out, total; // inner: elements per step along the axis
    double scale, shift, offset;
    int interp;
};

__host__ __device__ __forceinline__ void resample_at(const resample_args &a, ll t)
{
    const ll q = t / a.inner, r = t - q * a.inner;
    const ll outer = q / a.n_out, o = q - outer * a.n_out;
    taps<6> tp;
    axis_taps(a.scale, a.shift, a.offset, a.interp, a.n_in, o, tp);
    a.dst[t] = sample_taps(a.src + outer * a.n_in * a.inner + r, a.inner, tp);
}

__global__ void resample_kernel(const resample_args a)
{
    GRID_LOOP(t, a.total)
    {
        resample_at(a, t);
    }
}

struct prefilter_args {
    float *data;
    ll inner, n, lines;
};

__host__ __device__ __forceinline__ void prefilter_at(const prefilter_args &a, ll line)
{
    const ll outer = line / a.inner, r = line - outer * a.inner;
    prefilter_line(a.data + outer * a.n * a.inner + r, a.inner, a.n);
}

__global__ void prefilter_kernel(const prefilter_args a)
{
    GRID_LOOP(line, a.lines)
    {
        prefilter_at(a, line);
    }
}

struct intensity_args {
    float *data;
    const uint8_t *mask;
    ll voxels;
    int channels;
    sgk_vol_affine p[SGK_VOL_MAX_CHANNELS];
};

__host__ __device__ __forceinline__ void intensity_at(const intensity_args &a, ll v)
{
    const bool keep = !a.mask || a.mask[v] != 0;
    for (int c = 0; c < a.channels; c++) {
        float *q = a.data + c * a.voxels + v;
        const sgk_vol_affine f = a.p[c];
        const float x = *q;
        // A NaN stays NaN, as the CPU backend's clamp keeps it.
        *q = keep ? ((x < f.lo ? f.lo : x > f.hi ? f.hi : x) - f.sub) * f.mul : 0.0f;
    }
}

__global__ void intensity_kernel(const intensity_args a)
{
    GRID_LOOP(v, a.voxels)
    {
        intensity_at(a, v);
    }
}

struct foreground_args {
    const float *data;
    uint8_t *mask;
    ll voxels, channels;
    bool nonzero;
    float threshold;
};

__host__ __device__ __forceinline__ void foreground_at(const foreground_args &a, ll v)
{
    uint8_t fg = 0;
    for (ll c = 0; c < a.channels && !fg; c++) {
        const float x = a.data[c * a.voxels + v];
        fg = a.nonzero ? x != 0.0f : x > a.threshold;
    }
    a.mask[v] = fg;
}

__global__ void foreground_kernel(const foreground_args a)
{
    GRID_LOOP(v, a.voxels)
    {
        foreground_at(a, v);
    }
}

struct argmax_args {
    const float *scores;
    void *labels;
    int dtype;
    ll classes, in_voxels;
    ll in[3], out[3], total;
    double scale[3], shift[3], offset[3];
    int interp[3];
};

__host__ __device__ __forceinline__ void argmax_at(const argmax_args &a, ll t)
{
    const ll q = t / a.out[2], i = t - q * a.out[2];
    const ll k = q / a.out[1], j = q - k * a.out[1];
    taps<2> tk, tj, ti;
    axis_taps(a.scale[0], a.shift[0], a.offset[0], a.interp[0], a.in[0], k, tk);
    axis_taps(a.scale[1], a.shift[1], a.offset[1], a.interp[1], a.in[1], j, tj);
    axis_taps(a.scale[2], a.shift[2], a.offset[2], a.interp[2], a.in[2], i, ti);
    // The rows and weights every class reads, held in registers (loops of
    // constant bounds, unrolled) across the classes' loop.
    ll row[2][2], col[2];
    double w[2][2], wc[2];
    for (int p = 0; p < 2; p++) {
        for (int r = 0; r < 2; r++) {
            row[p][r] = p < tk.n && r < tj.n ? (tk.idx[p] * a.in[1] + tj.idx[r]) * a.in[2] : 0;
            w[p][r] = p < tk.n && r < tj.n ? DMUL(tk.w[p], tj.w[r]) : 0.0;
        }
        col[p] = p < ti.n ? ti.idx[p] : 0;
        wc[p] = p < ti.n ? ti.w[p] : 0.0;
    }
    const int nk = tk.n, nj = tj.n, ni = ti.n;
    ll best = 0;
    double best_v = 0.0;
    for (ll c = 0; c < a.classes; c++) {
        const float *s = a.scores + c * a.in_voxels;
        // The CPU's sum: over depth and height taps, each a row's sum over
        // the width taps.
        double v = 0.0;
        for (int p = 0; p < 2; p++)
            for (int r = 0; r < 2; r++) {
                if (p >= nk || r >= nj)
                    continue;
                double acc = 0.0;
                for (int u = 0; u < 2; u++)
                    if (u < ni)
                        acc = DADD(acc, DMUL(wc[u], (double)s[row[p][r] + col[u]]));
                v = DADD(v, DMUL(w[p][r], acc));
            }
        // The first largest, as numpy's argmax.
        if (c == 0 || v > best_v) {
            best_v = v;
            best = c;
        }
    }
    if (a.dtype == SEGRT_DTYPE_UINT16)
        ((uint16_t *)a.labels)[t] = (uint16_t)best;
    else
        ((uint8_t *)a.labels)[t] = (uint8_t)best;
}

__global__ void argmax_kernel(const argmax_args a)
{
    GRID_LOOP(t, a.total)
    {
        argmax_at(a, t);
    }
}

// Reductions ----------------------------------------------------------------------

// The foreground's box: least coordinates and greatest plus one.
struct box6 {
    ll v[6];
};

__host__ __device__ __forceinline__ void box_empty(box6 &b)
{
    for (int d = 0; d < 3; d++) {
        b.v[d] = INT64_MAX;
        b.v[3 + d] = 0;
    }
}

__host__ __device__ __forceinline__ void merge(box6 &b, const box6 &o)
{
    for (int d = 0; d < 3; d++) {
        b.v[d] = o.v[d] < b.v[d] ? o.v[d] : b.v[d];
        b.v[3 + d] = o.v[3 + d] > b.v[3 + d] ? o.v[3 + d] : b.v[3 + d];
    }
}

__host__ __device__ __forceinline__ void stats_empty(sgk_vol_stat &s)
{
    s.count = 0;
    s.sum = s.sum_sq = 0.0;
    s.min = INFINITY;
    s.max = -INFINITY;
}

__host__ __device__ __forceinline__ void merge(sgk_vol_stat &s, const sgk_vol_stat &o)
{
    s.count += o.count;
    s.sum += o.sum;
    s.sum_sq += o.sum_sq;
    s.min = o.min < s.min ? o.min : s.min;
    s.max = o.max > s.max ? o.max : s.max;
}

// The block's values (boxes, statistics) into thread 0's, by a fixed tree.
template <typename T> __device__ void block_reduce(T &v)
{
    __shared__ T sh[RED_THREADS];
    const int tid = threadIdx.x;
    sh[tid] = v;
    __syncthreads();
    for (int w = RED_THREADS / 2; w > 0; w >>= 1) {
        if (tid < w) {
            merge(v, sh[tid + w]);
            sh[tid] = v;
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
        merge(b, o);
    }
    block_reduce(b);
    if (threadIdx.x == 0)
        a.partials[blockIdx.x] = b;
}

__global__ void box_final_kernel(const box_args a, int n_partials)
{
    box6 b;
    box_empty(b);
    for (int p = threadIdx.x; p < n_partials; p += RED_THREADS)
        merge(b, a.partials[p]);
    block_reduce(b);
    if (threadIdx.x == 0)
        for (int d = 0; d < 6; d++)
            a.box[d] = b.v[d];
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
        block_reduce(s);
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
            merge(s, a.partials[c * n_partials + p]);
        block_reduce(s);
        if (threadIdx.x == 0)
            a.out[c] = s;
        __syncthreads();
    }
}

ll count4(const int64_t dims[4])
{
    return dims[0] * dims[1] * dims[2] * dims[3];
}

// The launches' arguments, built apart from the launches so that the
// element functions can be run over them by other code than a kernel.
// Each fills *a and returns OK; a total of 0 means there is nothing to do.

segrt_status copy_setup(size_t elem_size, const void *src, int64_t src_offset, const int64_t src_stride[4], void *dst,
                        const int64_t dst_stride[4], const int64_t dims[4], copy_args *a)
{
    memset(a, 0, sizeof *a);
    if (elem_size != 1 && elem_size != 2 && elem_size != 4)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sgk_vol_strided_copy: elements of %zu bytes (1, 2 or 4)",
                        elem_size);
    a->src = src;
    a->dst = dst;
    a->src_offset = src_offset;
    for (int d = 0; d < 4; d++) {
        a->ss[d] = src_stride[d];
        a->ds[d] = dst_stride[d];
        a->n[d] = dims[d];
    }
    a->total = count4(dims) > 0 ? count4(dims) : 0;
    return SEGRT_OK;
}

segrt_status resample_setup(const float *src, const int64_t dims[4], int32_t axis, const sgk_vol_axis *ax, float *dst,
                            resample_args *a)
{
    memset(a, 0, sizeof *a);
    if (axis < 1 || axis > 3)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sgk_vol_resample_axis: axis %d (1 to 3)", (int)axis);
    if (ax->interp != SGK_VOL_NEAREST && ax->interp != SGK_VOL_LINEAR && ax->interp != SGK_VOL_CUBIC)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sgk_vol_resample_axis: interpolation %d", (int)ax->interp);
    a->src = src;
    a->dst = dst;
    a->inner = 1;
    for (int d = axis + 1; d < 4; d++)
        a->inner *= dims[d];
    a->n_in = dims[axis];
    a->n_out = ax->n_out;
    ll total = ax->n_out;
    for (int d = 0; d < 4; d++)
        total *= d == axis ? 1 : dims[d];
    if (total > 0 && a->n_in <= 0)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sgk_vol_resample_axis: %lld outputs from an empty axis",
                        (long long)a->n_out);
    a->total = total > 0 ? total : 0;
    a->scale = ax->scale;
    a->shift = ax->shift;
    a->offset = ax->offset;
    a->interp = ax->interp;
    return SEGRT_OK;
}

segrt_status prefilter_setup(float *data, const int64_t dims[4], int32_t axis, prefilter_args *a)
{
    memset(a, 0, sizeof *a);
    if (axis < 1 || axis > 3)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sgk_vol_spline_prefilter: axis %d (1 to 3)", (int)axis);
    a->data = data;
    a->inner = 1;
    for (int d = axis + 1; d < 4; d++)
        a->inner *= dims[d];
    a->n = dims[axis];
    // Nothing, or lines of one sample, each its own coefficient.
    a->lines = a->n >= 2 && count4(dims) > 0 ? count4(dims) / a->n : 0;
    return SEGRT_OK;
}

segrt_status intensity_setup(float *data, const int64_t dims[4], const sgk_vol_affine *params, const uint8_t *mask,
                             intensity_args *a)
{
    memset(a, 0, sizeof *a);
    if (dims[0] > SGK_VOL_MAX_CHANNELS)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sgk_vol_intensity: %lld channels (%d at most)",
                        (long long)dims[0], SGK_VOL_MAX_CHANNELS);
    a->data = data;
    a->mask = mask;
    a->channels = dims[0] > 0 ? (int)dims[0] : 0;
    a->voxels = a->channels > 0 && dims[1] * dims[2] * dims[3] > 0 ? dims[1] * dims[2] * dims[3] : 0;
    for (int c = 0; c < a->channels; c++)
        a->p[c] = params[c];
    return SEGRT_OK;
}

segrt_status foreground_setup(const float *data, const int64_t dims[4], bool nonzero, float threshold, uint8_t *mask,
                              foreground_args *a)
{
    memset(a, 0, sizeof *a);
    a->data = data;
    a->mask = mask;
    a->voxels = dims[1] * dims[2] * dims[3] > 0 ? dims[1] * dims[2] * dims[3] : 0;
    a->channels = dims[0];
    a->nonzero = nonzero;
    a->threshold = threshold;
    return SEGRT_OK;
}

segrt_status argmax_setup(const float *scores, int64_t classes, const int64_t in_dims[3], const sgk_vol_axis ax[3],
                          segrt_dtype out_dtype, void *labels, argmax_args *a)
{
    memset(a, 0, sizeof *a);
    if (out_dtype != SEGRT_DTYPE_UINT8 && out_dtype != SEGRT_DTYPE_UINT16)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sgk_vol_resample_argmax: labels of dtype %d (uint8 or uint16)",
                        (int)out_dtype);
    a->scores = scores;
    a->labels = labels;
    a->dtype = (int)out_dtype;
    a->classes = classes;
    a->in_voxels = in_dims[0] * in_dims[1] * in_dims[2];
    ll total = 1;
    for (int d = 0; d < 3; d++) {
        if (ax[d].interp != SGK_VOL_NEAREST && ax[d].interp != SGK_VOL_LINEAR)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "sgk_vol_resample_argmax: axis %d's interpolation %d (nearest or linear)", d,
                            (int)ax[d].interp);
        a->in[d] = in_dims[d];
        a->out[d] = ax[d].n_out;
        total *= ax[d].n_out;
        a->scale[d] = ax[d].scale;
        a->shift[d] = ax[d].shift;
        a->offset[d] = ax[d].offset;
        a->interp[d] = ax[d].interp;
    }
    if (total > 0 && (classes < 1 || a->in_voxels <= 0))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sgk_vol_resample_argmax: %lld classes over %lld voxels",
                        (long long)classes, (long long)a->in_voxels);
    a->total = total > 0 ? total : 0;
    return SEGRT_OK;
}

} // namespace

extern "C" segrt_status sgk_vol_strided_copy(cudaStream_t stream, size_t elem_size, const void *src,
                                             int64_t src_offset, const int64_t src_stride[4], void *dst,
                                             const int64_t dst_stride[4], const int64_t dims[4])
{
    copy_args a;
    segrt_status s = copy_setup(elem_size, src, src_offset, src_stride, dst, dst_stride, dims, &a);
    if (s != SEGRT_OK || !a.total)
        return s;
    const unsigned blocks = blocks_for(a.total, VOL_THREADS, VOL_MAX_BLOCKS);
    if (elem_size == 1)
        copy_kernel<uint8_t><<<blocks, VOL_THREADS, 0, stream>>>(a);
    else if (elem_size == 2)
        copy_kernel<uint16_t><<<blocks, VOL_THREADS, 0, stream>>>(a);
    else
        copy_kernel<uint32_t><<<blocks, VOL_THREADS, 0, stream>>>(a);
    return launched("sgk_vol_strided_copy");
}

extern "C" segrt_status sgk_vol_resample_axis(cudaStream_t stream, const float *src, const int64_t dims[4],
                                              int32_t axis, const sgk_vol_axis *ax, float *dst)
{
    resample_args a;
    segrt_status s = resample_setup(src, dims, axis, ax, dst, &a);
    if (s != SEGRT_OK || !a.total)
        return s;
    resample_kernel<<<blocks_for(a.total, VOL_THREADS, VOL_MAX_BLOCKS), VOL_THREADS, 0, stream>>>(a);
    return launched("sgk_vol_resample_axis");
}

extern "C" segrt_status sgk_vol_spline_prefilter(cudaStream_t stream, float *data, const int64_t dims[4],
                                                 int32_t axis)
{
    prefilter_args a;
    segrt_status s = prefilter_setup(data, dims, axis, &a);
    if (s != SEGRT_OK || !a.lines)
        return s;
    prefilter_kernel<<<blocks_for(a.lines, LINE_THREADS, VOL_MAX_BLOCKS), LINE_THREADS, 0, stream>>>(a);
    return launched("sgk_vol_spline_prefilter");
}

extern "C" segrt_status sgk_vol_intensity(cudaStream_t stream, float *data, const int64_t dims[4],
                                          const sgk_vol_affine *params, const uint8_t *mask)
{
    intensity_args a;
    segrt_status s = intensity_setup(data, dims, params, mask, &a);
    if (s != SEGRT_OK || !a.voxels)
        return s;
    intensity_kernel<<<blocks_for(a.voxels, VOL_THREADS, VOL_MAX_BLOCKS), VOL_THREADS, 0, stream>>>(a);
    return launched("sgk_vol_intensity");
}

extern "C" segrt_status sgk_vol_foreground_mask(cudaStream_t stream, const float *data, const int64_t dims[4],
                                                bool nonzero, float threshold, uint8_t *mask)
{
    foreground_args a;
    segrt_status s = foreground_setup(data, dims, nonzero, threshold, mask, &a);
    if (s != SEGRT_OK || !a.voxels)
        return s;
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
    argmax_args a;
    segrt_status s = argmax_setup(scores, classes, in_dims, ax, out_dtype, labels, &a);
    if (s != SEGRT_OK || !a.total)
        return s;
    argmax_kernel<<<blocks_for(a.total, VOL_THREADS, VOL_MAX_BLOCKS), VOL_THREADS, 0, stream>>>(a);
    return launched("sgk_vol_resample_argmax");
}
