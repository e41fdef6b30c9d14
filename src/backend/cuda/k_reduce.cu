// Reductions (ReduceSum/Mean/Max/Min/Prod/L1/L2/SumSquare/LogSum/LogSumExp,
// ArgMax/ArgMin, the global pools) and Softmax/LogSoftmax over strided views.
//
// A reduction is planned on the host: the input's dims split into reduced
// and kept ones, each list ordered by stride (innermost last) and merged
// where memory allows, so that the common cases (a contiguous row, the
// spatial plane of a channels-last tensor) become one reduced dim and one or
// two kept dims, addressed without divisions. Then one of two shapes of
// kernel runs:
//  - rows: the reduced dims hold the input's innermost stride; a warp per
//    output walks its elements with consecutive lanes on consecutive
//    elements;
//  - columns: a kept dim is innermost (channels-last GlobalAveragePool);
//    threads of a block lie across it, so a warp reads neighbours, and the
//    block's other threads share the reduction.
// Long reductions with few outputs are split over several blocks; each
// writes a partial result to scratch and a second kernel combines them in
// a fixed order. Every combination order is fixed, so results are
// bit-identical from run to run.
#include "backend/cuda/k_common.cuh"

#include <math.h>
#include <stdint.h>
#include <string.h>

// Reductions ------------------------------------------------------------------------

// A partial result: a value and, for ArgMax and ArgMin, the index it was
// found at (-1: none yet).
template <typename T>
struct racc {
    T v;
    ll i;
};

template <typename T> __device__ __forceinline__ T lowest();
template <> __device__ __forceinline__ float lowest<float>() { return -INFINITY; }
template <> __device__ __forceinline__ double lowest<double>() { return -INFINITY; }
template <> __device__ __forceinline__ ll lowest<ll>() { return LLONG_MIN; }
template <typename T> __device__ __forceinline__ T highest();
template <> __device__ __forceinline__ float highest<float>() { return INFINITY; }
template <> __device__ __forceinline__ double highest<double>() { return INFINITY; }
template <> __device__ __forceinline__ ll highest<ll>() { return LLONG_MAX; }

template <typename T> __device__ __forceinline__ T add(T a, T b) { return a + b; }
template <typename T> __device__ __forceinline__ T mul(T a, T b) { return a * b; }
template <typename T> __device__ __forceinline__ T abs_(T v) { return v < 0 ? -v : v; }
// Integer sums and products wrap, as the reference's do, without signed
// overflow.
template <> __device__ __forceinline__ ll add<ll>(ll a, ll b)
{
    return (ll)((unsigned long long)a + (unsigned long long)b);
}
template <> __device__ __forceinline__ ll mul<ll>(ll a, ll b)
{
    return (ll)((unsigned long long)a * (unsigned long long)b);
}
template <> __device__ __forceinline__ ll abs_<ll>(ll v) { return v < 0 ? (ll)(0ull - (unsigned long long)v) : v; }
template <> __device__ __forceinline__ float abs_<float>(float v) { return fabsf(v); }
template <> __device__ __forceinline__ double abs_<double>(double v) { return fabs(v); }

// The square root, logarithm and exponential of the accumulator type; the
// builder never asks them of an integer accumulator (those reductions run
// in double), so ll's are never called.
__device__ __forceinline__ float sqrt_(float v) { return sqrtf(v); }
__device__ __forceinline__ double sqrt_(double v) { return sqrt(v); }
__device__ __forceinline__ ll sqrt_(ll v) { return v; }
__device__ __forceinline__ float log_(float v) { return logf(v); }
__device__ __forceinline__ double log_(double v) { return log(v); }
__device__ __forceinline__ ll log_(ll v) { return v; }
__device__ __forceinline__ float exp_(float v) { return expf(v); }
__device__ __forceinline__ double exp_(double v) { return exp(v); }
__device__ __forceinline__ ll exp_(ll v) { return v; }
__device__ __forceinline__ bool finite_(float v) { return isfinite(v); }
__device__ __forceinline__ bool finite_(double v) { return isfinite(v); }
__device__ __forceinline__ bool finite_(ll) { return true; }

__host__ __device__ __forceinline__ bool is_arg(sgk_reduce_op op)
{
    return op == SGK_REDUCE_ARGMAX || op == SGK_REDUCE_ARGMIN;
}

template <typename T>
__device__ __forceinline__ racc<T> acc_init(sgk_reduce_op op)
{
    racc<T> a;
    a.i = is_arg(op) ? -1 : 0;
    a.v = op == SGK_REDUCE_MAX ? lowest<T>() : op == SGK_REDUCE_MIN ? highest<T>() : op == SGK_REDUCE_PROD ? (T)1 : (T)0;
    return a;
}

// What an element contributes: its image under op's map (|x|, x^2, e^x)
// or itself.
template <typename T>
__device__ __forceinline__ T element(sgk_reduce_op op, T v)
{
    switch (op) {
    case SGK_REDUCE_L1: return abs_<T>(v);
    case SGK_REDUCE_L2:
    case SGK_REDUCE_SUM_SQUARE: return mul<T>(v, v);
    case SGK_REDUCE_LOG_SUM_EXP: return exp_(v);
    default: return v;
    }
}

// Combines a (covering earlier elements) with b (values already mapped by
// element()). Max and min keep a NaN as the reference's (a > b || a != a)
// ? a : b does. ArgMax and ArgMin rank NaN above every number (numpy's
// argmax and argmin both find the first NaN) and break ties by index,
// first or last; as the index decides ties, the order of combination does
// not matter.
template <typename T>
__device__ __forceinline__ racc<T> combine(sgk_reduce_op op, bool last, racc<T> a, racc<T> b)
{
    switch (op) {
    case SGK_REDUCE_MAX: return (a.v > b.v || a.v != a.v) ? a : b;
    case SGK_REDUCE_MIN: return (a.v < b.v || a.v != a.v) ? a : b;
    case SGK_REDUCE_PROD: a.v = mul<T>(a.v, b.v); return a;
    case SGK_REDUCE_ARGMAX:
    case SGK_REDUCE_ARGMIN: {
        if (b.i < 0)
            return a;
        if (a.i < 0)
            return b;
        bool an = a.v != a.v, bn = b.v != b.v;
        bool tie = (an && bn) || (!an && !bn && a.v == b.v);
        if (tie)
            return (last ? b.i > a.i : b.i < a.i) ? b : a;
        bool b_wins = bn || (!an && (op == SGK_REDUCE_ARGMAX ? b.v > a.v : b.v < a.v));
        return b_wins ? b : a;
    }
    default: a.v = add<T>(a.v, b.v); return a; // the sums
    }
}

template <typename T>
__device__ __forceinline__ racc<T> shfl_down(racc<T> a, int delta)
{
    racc<T> r;
    r.v = __shfl_down_sync(0xffffffffu, a.v, delta);
    r.i = __shfl_down_sync(0xffffffffu, a.i, delta);
    return r;
}

// Lane 0 gets the warp's combination (a fixed tree: deterministic).
template <typename T>
__device__ __forceinline__ racc<T> warp_combine(sgk_reduce_op op, bool last, racc<T> a)
{
    for (int d = 16; d > 0; d >>= 1)
        a = combine<T>(op, last, a, shfl_down<T>(a, d));
    return a;
}

// The geometry a reduction runs on.
struct rgeom {
    dimlist red;  // reduced dims; s[0]: input strides
    dimlist kept; // kept dims; s[0]: input strides, s[1]: output strides
    ll M, L;      // outputs, elements per output
    ll chunk;     // elements per split
    int S;        // splits (1: no partials)
    bool cols;    // column kernel
    int tw, ry;   // column kernel: threads across the innermost kept dim, along the reduction
    ll tiles;     // column kernel: tiles of tw along the innermost kept dim
};

struct rio {
    const void *x;
    segrt_dtype xt;
    void *y;
    segrt_dtype yt;
    sgk_reduce_op op;
    bool last;
};

// Writes the final value of output m (index in the kept list's order).
template <typename T>
__device__ __forceinline__ void finish(const rio &io, const rgeom &g, ll m, racc<T> a)
{
    ll off[NSTR];
    dl_offsets(g.kept, 2, m, off);
    if (is_arg(io.op)) {
        st<ll>(io.y, io.yt, off[1], a.i < 0 ? 0 : a.i);
        return;
    }
    T v = a.v;
    if (io.op == SGK_REDUCE_MEAN)
        v = v / (T)g.L;
    else if (io.op == SGK_REDUCE_L2)
        v = sqrt_(v);
    else if (io.op == SGK_REDUCE_LOG_SUM || io.op == SGK_REDUCE_LOG_SUM_EXP)
        v = log_(v);
    if (!is_float(io.yt) && !finite_(v)) // log 0 into an integer: 0, as the reference
        v = (T)0;
    st<T>(io.y, io.yt, off[1], v);
}

// Offset of reduction element r (fast path: one reduced dim).
__device__ __forceinline__ ll red_offset(const rgeom &g, ll r)
{
    if (g.red.n == 1)
        return r * g.red.s[0][0];
    ll off[NSTR];
    dl_offsets(g.red, 1, r, off);
    return off[0];
}

#define RED_BATCH 4

// One thread's part: elements r0, r0 + step, ... < r1 of the reduction at
// input offset base, in order; RED_BATCH loads are issued before any is
// combined, so that several are in flight.
template <int XT, typename T>
__device__ __forceinline__ racc<T> reduce_span(const rio &io, const rgeom &g, ll base, ll r0, ll r1, ll step)
{
    racc<T> a = acc_init<T>(io.op);
    ll r = r0;
    for (; r + (RED_BATCH - 1) * step < r1; r += RED_BATCH * step) {
        T v[RED_BATCH];
#pragma unroll
        for (int u = 0; u < RED_BATCH; u++)
            v[u] = element<T>(io.op, ldr<XT, T>(io.x, io.xt, base + red_offset(g, r + u * step)));
#pragma unroll
        for (int u = 0; u < RED_BATCH; u++) {
            racc<T> b;
            b.v = v[u];
            b.i = r + u * step;
            a = combine<T>(io.op, io.last, a, b);
        }
    }
    for (; r < r1; r += step) {
        racc<T> b;
        b.v = element<T>(io.op, ldr<XT, T>(io.x, io.xt, base + red_offset(g, r)));
        b.i = r;
        a = combine<T>(io.op, io.last, a, b);
    }
    return a;
}

#define ROW_WARPS 8

// Rows: warp w of block (bx, s) reduces output bx * ROW_WARPS + w over
// split s of its elements.
template <int XT, typename T>
__global__ void __launch_bounds__(ROW_WARPS * 32) reduce_rows(rio io, rgeom g, racc<T> *part)
{
    int lane = threadIdx.x & 31;
    ll m = (ll)blockIdx.x * ROW_WARPS + (threadIdx.x >> 5);
    if (m >= g.M)
        return;
    ll off[NSTR];
    dl_offsets(g.kept, 1, m, off);
    ll r0 = (ll)blockIdx.y * g.chunk, r1 = r0 + g.chunk < g.L ? r0 + g.chunk : g.L;
    racc<T> a = reduce_span<XT, T>(io, g, off[0], r0 + lane, r1, 32);
    a = warp_combine<T>(io.op, io.last, a);
    if (lane != 0)
        return;
    if (g.S == 1)
        finish<T>(io, g, m, a);
    else
        part[(ll)blockIdx.y * g.M + m] = a;
}

#define COL_THREADS 256

// Columns: block (bx, s) covers tw consecutive indices of the innermost
// kept dim (threadIdx.x % tw) of one index of the outer kept dims, and
// split s of the reduction, shared by ry rows of threads.
template <int XT, typename T>
__global__ void __launch_bounds__(COL_THREADS) reduce_cols(rio io, rgeom g, racc<T> *part)
{
    __shared__ racc<T> sh[COL_THREADS];
    int tx = threadIdx.x % g.tw, ty = threadIdx.x / g.tw;
    ll tile = (ll)blockIdx.x % g.tiles, mo = (ll)blockIdx.x / g.tiles;
    int nk = g.kept.n;
    ll k0n = g.kept.d[nk - 1];
    ll k0 = tile * g.tw + tx;
    bool valid = k0 < k0n && ty < g.ry;
    racc<T> a = acc_init<T>(io.op);
    if (valid) {
        // Offset of the outer kept index: the list without its last dim.
        ll base = 0, idx = mo;
        for (int k = nk - 2; k >= 0; k--) {
            ll q = idx / g.kept.d[k];
            base += (idx - q * g.kept.d[k]) * g.kept.s[0][k];
            idx = q;
        }
        base += k0 * g.kept.s[0][nk - 1];
        ll r0 = (ll)blockIdx.y * g.chunk, r1 = r0 + g.chunk < g.L ? r0 + g.chunk : g.L;
        a = reduce_span<XT, T>(io, g, base, r0 + ty, r1, g.ry);
    }
    sh[threadIdx.x] = a;
    __syncthreads();
    // Tree over the rows of threads, lower rows first: a fixed order.
    int rows = COL_THREADS / g.tw;
    for (int h = rows / 2; h > 0; h /= 2) {
        if (ty < h)
            sh[threadIdx.x] = combine<T>(io.op, io.last, sh[threadIdx.x], sh[threadIdx.x + h * g.tw]);
        __syncthreads();
    }
    if (ty != 0 || k0 >= k0n)
        return;
    ll m = mo * k0n + k0;
    if (g.S == 1)
        finish<T>(io, g, m, sh[tx]);
    else
        part[(ll)blockIdx.y * g.M + m] = sh[tx];
}

// Combines the S partials of each output (a warp per output, splits in
// order within each lane, then a fixed tree).
template <typename T>
__global__ void __launch_bounds__(ROW_WARPS * 32) reduce_finish(rio io, rgeom g, const racc<T> *part)
{
    int lane = threadIdx.x & 31;
    ll m = (ll)blockIdx.x * ROW_WARPS + (threadIdx.x >> 5);
    if (m >= g.M)
        return;
    racc<T> a = acc_init<T>(io.op);
    for (ll s = lane; s < g.S; s += 32)
        a = combine<T>(io.op, io.last, a, part[s * g.M + m]);
    a = warp_combine<T>(io.op, io.last, a);
    if (lane == 0)
        finish<T>(io, g, m, a);
}

// The identity of a reduction over no elements, into every output.
__global__ void reduce_fill(void *y, segrt_dtype yt, dimlist l, ll count, bool as_float, double fv, ll iv)
{
    for (ll i = (ll)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (ll)gridDim.x * blockDim.x) {
        ll off[NSTR];
        dl_offsets(l, 1, i, off);
        if (as_float)
            st<double>(y, yt, off[0], fv);
        else
            st<ll>(y, yt, off[0], iv);
    }
}

// Accumulation type of a reduction: 0 float, 1 double, 2 int64. The
// square root and logarithms of integers are taken in double, as the
// reference; so is LogSumExp of any input, whose exponentials would
// overflow float from e^89.
static int acc_kind(sgk_reduce_op op, segrt_dtype t)
{
    if (op == SGK_REDUCE_LOG_SUM_EXP || t == SEGRT_DTYPE_FLOAT64)
        return 1;
    if (is_float(t))
        return 0;
    return op == SGK_REDUCE_L2 || op == SGK_REDUCE_LOG_SUM ? 1 : 2;
}

static size_t acc_size(sgk_reduce_op op, segrt_dtype t)
{
    switch (acc_kind(op, t)) {
    case 0: return sizeof(racc<float>);
    case 1: return sizeof(racc<double>);
    default: return sizeof(racc<ll>);
    }
}

// Targets for splitting: enough warps or blocks to fill the GPU, each with
// enough elements to be worth a partial.
#define SPLIT_WARPS 8192
#define SPLIT_BLOCKS 1024
#define MAX_SPLITS 4096

// Plans a reduction; false with *msg set when out and in do not match.
static bool reduce_plan(const sgk_view *out, const sgk_view *in, bool split, rgeom *g, const char **msg)
{
    memset(g, 0, sizeof *g);
    if (out->rank != in->rank) {
        *msg = "output rank differs from the input's";
        return false;
    }
    for (int d = 0; d < in->rank; d++) {
        if (in->dims[d] == 1 && out->dims[d] == 1)
            continue;
        if (out->dims[d] == 1) {
            int k = g->red.n++;
            g->red.d[k] = in->dims[d];
            g->red.s[0][k] = in->strides[d];
        } else if (out->dims[d] == in->dims[d]) {
            int k = g->kept.n++;
            g->kept.d[k] = in->dims[d];
            g->kept.s[0][k] = in->strides[d];
            g->kept.s[1][k] = out->strides[d];
        } else {
            *msg = "output dims are neither the input's nor 1";
            return false;
        }
    }
    dl_normalise(&g->red, 1);
    dl_normalise(&g->kept, 2);
    g->M = dl_count(&g->kept);
    g->L = dl_count(&g->red);
    g->S = 1;
    g->chunk = g->L;
    if (g->M == 0 || g->L == 0)
        return true;
    // Columns when the innermost-stride dim of the input is kept.
    int nk = g->kept.n, nr = g->red.n;
    g->cols = nk > 0 && (nr == 0 || llabs_(g->kept.s[0][nk - 1]) < llabs_(g->red.s[0][nr - 1]));
    ll S = 1;
    if (g->cols) {
        ll k0 = g->kept.d[nk - 1];
        int tw = 1;
        while (tw < 32 && tw < k0)
            tw *= 2;
        g->tw = tw;
        g->ry = COL_THREADS / tw;
        g->tiles = ceil_div(k0, tw);
        ll blocks = g->tiles * (g->M / k0);
        if (split) {
            ll by_fill = ceil_div(SPLIT_BLOCKS, blocks);
            ll by_len = g->L / (16 * (ll)g->ry);
            S = by_fill < by_len ? by_fill : by_len;
        }
    } else if (split) {
        ll by_fill = ceil_div(SPLIT_WARPS, g->M), by_len = g->L / 1024;
        S = by_fill < by_len ? by_fill : by_len;
    }
    S = S < 1 ? 1 : S > MAX_SPLITS ? MAX_SPLITS : S;
    g->chunk = ceil_div(g->L, S);
    g->S = (int)ceil_div(g->L, g->chunk);
    return true;
}

extern "C" size_t sgk_reduce_scratch(sgk_reduce_op op, const sgk_view *out, const sgk_view *in)
{
    rgeom g;
    const char *msg = NULL;
    if (!reduce_plan(out, in, true, &g, &msg) || g.S <= 1)
        return 0;
    return (size_t)g.S * (size_t)g.M * acc_size(op, in->dtype);
}

template <int XT, typename T>
static segrt_status reduce_launch(cudaStream_t stream, const rio &io, const rgeom &g, void *scratch)
{
    racc<T> *part = (racc<T> *)scratch;
    if (g.cols) {
        dim3 grid((unsigned)(g.tiles * (g.M / g.kept.d[g.kept.n - 1])), (unsigned)g.S);
        reduce_cols<XT, T><<<grid, COL_THREADS, 0, stream>>>(io, g, part);
        segrt_status s = launched("reduce_cols");
        if (s != SEGRT_OK)
            return s;
    } else {
        dim3 grid((unsigned)ceil_div(g.M, ROW_WARPS), (unsigned)g.S);
        reduce_rows<XT, T><<<grid, ROW_WARPS * 32, 0, stream>>>(io, g, part);
        segrt_status s = launched("reduce_rows");
        if (s != SEGRT_OK)
            return s;
    }
    if (g.S == 1)
        return SEGRT_OK;
    reduce_finish<T><<<(unsigned)ceil_div(g.M, ROW_WARPS), ROW_WARPS * 32, 0, stream>>>(io, g, part);
    return launched("reduce_finish");
}

// The identities of max and min over an empty set for integer dtypes: the
// dtype's extremes (bool: false and true), as the reference.
static ll int_lowest(segrt_dtype t)
{
    switch (t) {
    case SEGRT_DTYPE_INT8: return INT8_MIN;
    case SEGRT_DTYPE_INT16: return INT16_MIN;
    case SEGRT_DTYPE_INT32: return INT32_MIN;
    case SEGRT_DTYPE_INT64: return LLONG_MIN;
    default: return 0;
    }
}

static ll int_highest(segrt_dtype t)
{
    switch (t) {
    case SEGRT_DTYPE_INT8: return INT8_MAX;
    case SEGRT_DTYPE_UINT8: return UINT8_MAX;
    case SEGRT_DTYPE_INT16: return INT16_MAX;
    case SEGRT_DTYPE_UINT16: return UINT16_MAX;
    case SEGRT_DTYPE_INT32: return INT32_MAX;
    case SEGRT_DTYPE_BOOL: return 1;
    default: return LLONG_MAX;
    }
}

static segrt_status reduce_empty(cudaStream_t stream, sgk_reduce_op op, const sgk_view *out, segrt_dtype xt)
{
    dimlist l;
    memset(&l, 0, sizeof l);
    for (int d = 0; d < out->rank; d++) {
        l.d[l.n] = out->dims[d];
        l.s[0][l.n++] = out->strides[d];
    }
    ll count = dl_count(&l);
    bool fl = (is_float(xt) || acc_kind(op, xt) == 1) && !is_arg(op);
    bool logs = op == SGK_REDUCE_LOG_SUM || op == SGK_REDUCE_LOG_SUM_EXP;
    double fv = op == SGK_REDUCE_MAX || logs ? -INFINITY
                : op == SGK_REDUCE_MIN       ? INFINITY
                : op == SGK_REDUCE_MEAN      ? NAN
                : op == SGK_REDUCE_PROD      ? 1.0
                                             : 0.0;
    if (logs && !is_float(out->dtype))
        fv = 0.0; // log 0 into an integer, as finish()
    ll iv = op == SGK_REDUCE_MAX ? int_lowest(xt) : op == SGK_REDUCE_MIN ? int_highest(xt) : op == SGK_REDUCE_PROD ? 1 : 0;
    ll blocks = ceil_div(count, 256);
    blocks = blocks > 4096 ? 4096 : blocks;
    reduce_fill<<<(unsigned)blocks, 256, 0, stream>>>(out->data, out->dtype, l, count, fl, fv, iv);
    return launched("reduce_fill");
}

extern "C" segrt_status sgk_reduce(cudaStream_t stream, sgk_reduce_op op, const sgk_view *out,
                                   const sgk_view *in, bool select_last, void *scratch)
{
    rgeom g;
    const char *msg = NULL;
    if (!reduce_plan(out, in, scratch != NULL, &g, &msg))
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_reduce: %s", msg);
    if (g.M == 0)
        return SEGRT_OK;
    if (g.L == 0)
        return reduce_empty(stream, op, out, in->dtype);
    if (is_arg(op) && g.red.n > 1)
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_reduce: ArgMax/ArgMin over more than one dim");
    rio io = {in->data, in->dtype, out->data, out->dtype, op, select_last};
    if (acc_kind(op, in->dtype) == 1)
        return reduce_launch<0, double>(stream, io, g, scratch);
    switch (in->dtype) {
    case SEGRT_DTYPE_FLOAT16: return reduce_launch<SEGRT_DTYPE_FLOAT16, float>(stream, io, g, scratch);
    case SEGRT_DTYPE_BFLOAT16: return reduce_launch<SEGRT_DTYPE_BFLOAT16, float>(stream, io, g, scratch);
    case SEGRT_DTYPE_FLOAT32: return reduce_launch<SEGRT_DTYPE_FLOAT32, float>(stream, io, g, scratch);
    default: return reduce_launch<0, ll>(stream, io, g, scratch);
    }
}

// Softmax -------------------------------------------------------------------------
//
// Each row (the elements along the axis at one index of the other dims)
// is read three times: its maximum (NaN-propagating), the sum of exp(x -
// max), then the outputs; the rows are short or stay in cache. As in the
// reference, an infinite maximum gives NaN (inf - inf), as does a NaN.
// float32 math (float64 for float64 tensors).

struct smgeom {
    dimlist rows; // the other dims; s[0]: input strides, s[1]: output strides
    ll R, L;      // rows, elements per row
    ll xs, ys;    // strides along the axis
    bool log_form;
};


template <typename T> __device__ __forceinline__ T max_nan(T a, T b) { return (a > b || a != a) ? a : b; }

// One row per thread: for short rows, or rows along a strided axis where
// neighbouring threads then read neighbouring elements.
template <typename T>
__global__ void softmax_thread(const void *x, segrt_dtype xt, void *y, segrt_dtype yt, smgeom g)
{
    for (ll row = (ll)blockIdx.x * blockDim.x + threadIdx.x; row < g.R; row += (ll)gridDim.x * blockDim.x) {
        ll off[NSTR];
        dl_offsets(g.rows, 2, row, off);
        T mx = -INFINITY;
        for (ll k = 0; k < g.L; k++)
            mx = max_nan<T>(mx, ld<T>(x, xt, off[0] + k * g.xs));
        T sum = 0;
        for (ll k = 0; k < g.L; k++)
            sum += exp_(ld<T>(x, xt, off[0] + k * g.xs) - mx);
        T lsum = log_(sum);
        for (ll k = 0; k < g.L; k++) {
            T d = ld<T>(x, xt, off[0] + k * g.xs) - mx;
            st<T>(y, yt, off[1] + k * g.ys, g.log_form ? d - lsum : exp_(d) / sum);
        }
    }
}

// The warps of a group of `width` threads (32: a warp per row; the whole
// block: a block per row) combine a value: max or sum, in a fixed order.
template <typename T>
__device__ __forceinline__ T group_reduce(T v, bool is_max, int width, T *sh)
{
    for (int d = 16; d > 0; d >>= 1) {
        T o = __shfl_xor_sync(0xffffffffu, v, d);
        v = is_max ? max_nan<T>(v, o) : v + o;
    }
    if (width == 32)
        return v;
    int w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads(); // sh may still be read from the previous call
    if ((threadIdx.x & 31) == 0)
        sh[w] = v;
    __syncthreads();
    T r = sh[0];
    for (int k = 1; k < nw; k++)
        r = is_max ? max_nan<T>(r, sh[k]) : r + sh[k];
    return r;
}

// A group of `width` threads per row: long rows along the innermost axis.
template <typename T>
__global__ void softmax_group(const void *x, segrt_dtype xt, void *y, segrt_dtype yt, smgeom g, int width)
{
    __shared__ T sh[32];
    int lane = threadIdx.x % width;
    ll row = (ll)blockIdx.x * (blockDim.x / width) + threadIdx.x / width;
    // Every thread of a block-wide group must reach the barriers.
    bool active = row < g.R;
    if (width == 32 && !active)
        return;
    ll off[NSTR] = {0, 0, 0};
    if (active)
        dl_offsets(g.rows, 2, row, off);
    ll L = active ? g.L : 0;
    T mx = -INFINITY;
    for (ll k = lane; k < L; k += width)
        mx = max_nan<T>(mx, ld<T>(x, xt, off[0] + k * g.xs));
    mx = group_reduce<T>(mx, true, width, sh);
    T sum = 0;
    for (ll k = lane; k < L; k += width)
        sum += exp_(ld<T>(x, xt, off[0] + k * g.xs) - mx);
    sum = group_reduce<T>(sum, false, width, sh);
    T lsum = log_(sum);
    for (ll k = lane; k < L; k += width) {
        T d = ld<T>(x, xt, off[0] + k * g.xs) - mx;
        st<T>(y, yt, off[1] + k * g.ys, g.log_form ? d - lsum : exp_(d) / sum);
    }
}

template <typename T>
static segrt_status softmax_launch(cudaStream_t stream, const sgk_view *out, const sgk_view *in, const smgeom &g,
                                   bool axis_inner)
{
    // Rows along the innermost axis longer than a few elements: a warp per
    // row (a block for very long rows with few of them); otherwise a thread
    // per row, which also keeps neighbouring threads on neighbouring
    // elements when the axis is strided, unless there are too few rows to
    // fill the GPU.
    bool group = axis_inner ? g.L > 16 : (g.R < 8192 && g.L > 256);
    if (!group) {
        ll blocks = ceil_div(g.R, 256);
        blocks = blocks > 65535 ? 65535 : blocks;
        softmax_thread<T><<<(unsigned)blocks, 256, 0, stream>>>(in->data, in->dtype, out->data, out->dtype, g);
        return launched("softmax_thread");
    }
    if (g.L > 8192 && g.R < 1024) {
        softmax_group<T><<<(unsigned)g.R, 1024, 0, stream>>>(in->data, in->dtype, out->data, out->dtype, g, 1024);
        return launched("softmax_group");
    }
    softmax_group<T><<<(unsigned)ceil_div(g.R, 8), 256, 0, stream>>>(in->data, in->dtype, out->data, out->dtype, g, 32);
    return launched("softmax_group");
}

extern "C" segrt_status sgk_softmax(cudaStream_t stream, const sgk_view *out, const sgk_view *in, int32_t axis,
                                    bool log)
{
    if (in->rank != out->rank || axis < 0 || axis >= in->rank)
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_softmax: bad views or axis %d", axis);
    if (!is_float(in->dtype))
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_softmax: %s input", segrt_dtype_name(in->dtype));
    smgeom g;
    memset(&g, 0, sizeof g);
    g.L = in->dims[axis];
    g.xs = in->strides[axis];
    g.ys = out->strides[axis];
    g.log_form = log;
    ll smallest = LLONG_MAX;
    for (int d = 0; d < in->rank; d++) {
        if (in->dims[d] != out->dims[d])
            return sg_error(SEGRT_ERROR_INTERNAL, "sgk_softmax: output dims differ from the input's");
        if (d == axis || in->dims[d] == 1)
            continue;
        int k = g.rows.n++;
        g.rows.d[k] = in->dims[d];
        g.rows.s[0][k] = in->strides[d];
        g.rows.s[1][k] = out->strides[d];
        smallest = llabs_(in->strides[d]) < smallest ? llabs_(in->strides[d]) : smallest;
    }
    dl_normalise(&g.rows, 2);
    g.R = dl_count(&g.rows);
    if (g.R == 0 || g.L == 0)
        return SEGRT_OK;
    bool axis_inner = llabs_(g.xs) <= smallest;
    if (in->dtype == SEGRT_DTYPE_FLOAT64)
        return softmax_launch<double>(stream, out, in, g, axis_inner);
    return softmax_launch<float>(stream, out, in, g, axis_inner);
}
