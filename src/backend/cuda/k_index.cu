// Index-mapping kernels over strided views: Pad (and Tile, as wrap-mode
// padding), Gather and GatherElements, ScatterND and ScatterElements,
// CumSum, Trilu, OneHot and a direct Einsum.
//
// A walk operand need not be a tensor: its "offset" is any coordinate
// expression linear in the dims (Trilu's column minus row, OneHot's depth
// index), which the walk computes like any other.
//
// Each kernel walks its output (ScatterND: one slice of updates) in the
// output's memory order, so writes are coalesced whatever the layout; the
// walk turns a linear index into per-operand element offsets with 32-bit
// multiply-shift division where the index fits. Elements move as raw bits
// when source and destination dtypes agree and are converted otherwise
// (ONNX Cast rules, as sgk_map does).
//
// Einsum convention (shared with cuda_build_einsum): of the n_letters
// letters, the first out->rank are the free ones, in output order (out's
// dim d is letter d); the others are summed. out_strides in the params is
// informational: the output's own view gives its strides.
#include "backend/cuda/k_common.cuh"
#include "backend/grid_sample_math.h"

#include <stdint.h>
#include <string.h>

namespace {

#define IX_THREADS 256
#define IX_MAX_BLOCKS (1 << 18)
#define IX_MAX_OPS (SGK_EINSUM_MAX_IN + 1)

// Element moves ----------------------------------------------------------------

// One element from src (element si, dtype sdt) to dst (di, ddt):
// raw bits when the dtypes agree, a converting load and store otherwise.
__device__ __forceinline__ void move_elem(void *dst, int64_t di, int32_t ddt, const void *src, int64_t si,
                                          int32_t sdt)
{
    if (ddt == sdt) {
        switch (dtype_bytes(ddt)) {
        case 1: ((uint8_t *)dst)[di] = ((const uint8_t *)src)[si]; break;
        case 2: ((uint16_t *)dst)[di] = ((const uint16_t *)src)[si]; break;
        case 4: ((uint32_t *)dst)[di] = ((const uint32_t *)src)[si]; break;
        default: ((uint64_t *)dst)[di] = ((const uint64_t *)src)[si]; break;
        }
    } else if (!is_float(ddt) && !is_float(sdt)) {
        st_i64(dst, di, ddt, ld_i64(src, si, sdt));
    } else {
        st_f64(dst, di, ddt, ld_f64(src, si, sdt));
    }
}

// Walking an iteration space -----------------------------------------------

// An iteration space of `rank` dims (outermost first) and, per dim, the
// stride of each of n_ops operands: index i maps to one element offset per
// operand. Operand 0 is what the kernel writes; dims are ordered by its
// strides so that consecutive indices write consecutive addresses.
struct walk {
    int32_t rank, n_ops;
    bool small; // indices fit in 32 bits: multiply-shift division
    int64_t n;
    int64_t dims[SGK_MAX_RANK];
    fastdiv div[SGK_MAX_RANK];
    int64_t strides[IX_MAX_OPS][SGK_MAX_RANK];
};

int64_t abs64(int64_t v) { return v < 0 ? -v : v; }

// Builds a walk over dims with strides[k][d] for operand k. Size-1 dims
// are dropped; with merge set, adjacent dims contiguous for every operand
// are merged (valid when each operand's offset is linear in the
// coordinates, as it is for every walk here).
void walk_init(walk *w, int32_t rank, const int64_t *dims, int32_t n_ops,
               const int64_t (*strides)[SGK_MAX_RANK], bool merge)
{
    memset(w, 0, sizeof *w);
    w->n_ops = n_ops;
    w->n = 1;
    int32_t order[SGK_MAX_RANK], r = 0;
    for (int32_t d = 0; d < rank; d++) {
        w->n *= dims[d];
        if (dims[d] != 1)
            order[r++] = d;
    }
    for (int32_t i = 1; i < r; i++) {
        int32_t d = order[i], j = i;
        while (j > 0 && abs64(strides[0][order[j - 1]]) < abs64(strides[0][d])) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = d;
    }
    int32_t m = 0;
    for (int32_t i = 0; i < r; i++) {
        int32_t d = order[i];
        bool join = merge && m > 0;
        for (int32_t k = 0; join && k < n_ops; k++)
            join = w->strides[k][m - 1] == strides[k][d] * dims[d];
        if (join) {
            w->dims[m - 1] *= dims[d];
            for (int32_t k = 0; k < n_ops; k++)
                w->strides[k][m - 1] = strides[k][d];
        } else {
            w->dims[m] = dims[d];
            for (int32_t k = 0; k < n_ops; k++)
                w->strides[k][m] = strides[k][d];
            m++;
        }
    }
    w->rank = m;
    w->small = w->n <= (int64_t)INT32_MAX;
    if (w->small)
        for (int32_t d = 0; d < m; d++)
            w->div[d] = fastdiv_make((uint32_t)w->dims[d]);
}

__device__ __forceinline__ void walk_offsets(const walk &w, int64_t i, int64_t *off)
{
#pragma unroll
    for (int k = 0; k < IX_MAX_OPS; k++)
        off[k] = 0;
    if (w.small) {
        uint32_t rest = (uint32_t)i;
        for (int d = w.rank - 1; d >= 0; d--) {
            uint32_t q = d ? fastdiv_div(rest, w.div[d]) : 0;
            int64_t c = d ? (int64_t)(rest - q * w.div[d].d) : (int64_t)rest;
            rest = q;
#pragma unroll
            for (int k = 0; k < IX_MAX_OPS; k++)
                if (k < w.n_ops)
                    off[k] += c * w.strides[k][d];
        }
    } else {
        int64_t rest = i;
        for (int d = w.rank - 1; d >= 0; d--) {
            int64_t c = rest % w.dims[d];
            rest /= w.dims[d];
#pragma unroll
            for (int k = 0; k < IX_MAX_OPS; k++)
                if (k < w.n_ops)
                    off[k] += c * w.strides[k][d];
        }
    }
}

unsigned blocks_for(int64_t work)
{
    int64_t b = (work + IX_THREADS - 1) / IX_THREADS;
    return (unsigned)(b < 1 ? 1 : b > IX_MAX_BLOCKS ? IX_MAX_BLOCKS : b);
}

// Pad ------------------------------------------------------------------------

// Per dim (in the output's memory order): the output's extent and stride,
// the input's extent and stride, and the begin padding.
struct pad_args {
    int32_t rank, mode;
    bool small;
    int64_t n;
    void *out;
    const void *in;
    int32_t out_dt, in_dt;
    double value;
    int64_t odims[SGK_MAX_RANK], ostr[SGK_MAX_RANK];
    int64_t idims[SGK_MAX_RANK], istr[SGK_MAX_RANK], pb[SGK_MAX_RANK];
    fastdiv div[SGK_MAX_RANK];
};

// Source coordinate of s = o - pad_begin outside [0, len), or -1 for the
// constant. len > 0 for every mode but constant (the launcher checks).
__device__ __forceinline__ int64_t pad_source(int64_t s, int64_t len, int32_t mode)
{
    switch (mode) {
    case SGK_PAD_EDGE: return s < 0 ? 0 : len - 1;
    case SGK_PAD_WRAP: return ((s % len) + len) % len;
    case SGK_PAD_REFLECT: {
        // Mirror without repeating the edge: period 2 * (len - 1).
        if (len == 1)
            return 0;
        int64_t period = 2 * (len - 1), m = ((s % period) + period) % period;
        return m < len ? m : period - m;
    }
    default: return -1;
    }
}

__global__ void pad_kernel(const pad_args a)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {
        int64_t oo = 0, io = 0;
        bool inside = true;
        uint32_t rest32 = (uint32_t)i;
        int64_t rest = i;
        for (int d = a.rank - 1; d >= 0; d--) {
            int64_t c;
            if (a.small) {
                uint32_t q = d ? fastdiv_div(rest32, a.div[d]) : 0;
                c = d ? (int64_t)(rest32 - q * a.div[d].d) : (int64_t)rest32;
                rest32 = q;
            } else {
                c = rest % a.odims[d];
                rest /= a.odims[d];
            }
            oo += c * a.ostr[d];
            int64_t s = c - a.pb[d];
            if (s < 0 || s >= a.idims[d]) {
                s = pad_source(s, a.idims[d], a.mode);
                inside &= s >= 0;
            }
            io += (s < 0 ? 0 : s) * a.istr[d];
        }
        if (inside)
            move_elem(a.out, oo, a.out_dt, a.in, io, a.in_dt);
        else
            st_f64(a.out, oo, a.out_dt, a.value);
    }
}

// Gather -----------------------------------------------------------------------

// Walk operands: 0 the output, 1 data (the dims other than axis), 2 the
// indices; the index value then moves data along axis.
struct gather_args {
    walk w;
    void *out;
    const void *data, *indices;
    int32_t out_dt, data_dt, idx_dt;
    int64_t axis_dim, axis_stride;
    int *err;
};

__global__ void gather_kernel(const gather_args a)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.w.n; i += step) {
        int64_t off[IX_MAX_OPS];
        walk_offsets(a.w, i, off);
        int64_t v = a.idx_dt == SEGRT_DTYPE_INT32 ? (int64_t)((const int32_t *)a.indices)[off[2]]
                                                  : ((const int64_t *)a.indices)[off[2]];
        if (v < -a.axis_dim || v >= a.axis_dim) {
            if (a.err)
                atomicCAS(a.err, SGK_ERR_NONE, SGK_ERR_INDEX);
            st_i64(a.out, off[0], a.out_dt, 0);
            continue;
        }
        if (v < 0)
            v += a.axis_dim;
        move_elem(a.out, off[0], a.out_dt, a.data, off[1] + v * a.axis_stride, a.data_dt);
    }
}

// ScatterND ----------------------------------------------------------------------

// One thread per element of an update slice (walk operands: 0 the output,
// 1 updates); each thread applies every index tuple in order, so
// duplicates resolve as in the reference (last write wins, reductions in
// index order) without atomics.
struct scatter_args {
    walk w;
    void *out;
    const void *indices, *updates;
    int32_t out_dt, idx_dt, upd_dt, reduction;
    int32_t k;                        // index tuple length
    int32_t t_rank;                   // tuple dims (indices.rank - 1)
    int64_t tuples;
    int64_t t_dims[SGK_MAX_RANK];
    int64_t t_idx_str[SGK_MAX_RANK];  // indices strides of the tuple dims
    int64_t t_upd_str[SGK_MAX_RANK];  // updates strides of the tuple dims
    int64_t idx_last_str;             // indices stride along the tuple
    int64_t out_dims[SGK_MAX_RANK];   // the first k dims of out
    int64_t out_str[SGK_MAX_RANK];
    int *err;
};

__device__ __forceinline__ void scatter_apply(const scatter_args &a, int64_t o, int64_t u)
{
    if (a.reduction == SGK_SCATTER_NONE) {
        move_elem(a.out, o, a.out_dt, a.updates, u, a.upd_dt);
        return;
    }
    if (is_float(a.out_dt) && a.out_dt != SEGRT_DTYPE_FLOAT64) {
        float x = ld_f32(a.out, o, a.out_dt), y = ld_f32(a.updates, u, a.upd_dt), r;
        switch (a.reduction) {
        case SGK_SCATTER_ADD: r = x + y; break;
        case SGK_SCATTER_MUL: r = x * y; break;
        case SGK_SCATTER_MAX: r = (x > y || x != x) ? x : y; break;
        default: r = (x < y || x != x) ? x : y; break;
        }
        st_f32(a.out, o, a.out_dt, r);
    } else if (is_float(a.out_dt)) {
        double x = ld_f64(a.out, o, a.out_dt), y = ld_f64(a.updates, u, a.upd_dt), r;
        switch (a.reduction) {
        case SGK_SCATTER_ADD: r = x + y; break;
        case SGK_SCATTER_MUL: r = x * y; break;
        case SGK_SCATTER_MAX: r = (x > y || x != x) ? x : y; break;
        default: r = (x < y || x != x) ? x : y; break;
        }
        st_f64(a.out, o, a.out_dt, r);
    } else {
        int64_t x = ld_i64(a.out, o, a.out_dt), y = ld_i64(a.updates, u, a.upd_dt), r;
        switch (a.reduction) {
        case SGK_SCATTER_ADD: r = (int64_t)((uint64_t)x + (uint64_t)y); break;
        case SGK_SCATTER_MUL: r = (int64_t)((uint64_t)x * (uint64_t)y); break;
        case SGK_SCATTER_MAX: r = x > y ? x : y; break;
        default: r = x < y ? x : y; break;
        }
        st_i64(a.out, o, a.out_dt, r);
    }
}

__global__ void scatter_kernel(const scatter_args a)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.w.n; i += step) {
        int64_t off[IX_MAX_OPS];
        walk_offsets(a.w, i, off);
        // Tuple coordinates as an odometer: no division in the loop.
        int64_t tc[SGK_MAX_RANK] = {0};
        int64_t io = 0, uo = 0;
        for (int64_t t = 0; t < a.tuples; t++) {
            int64_t o = 0;
            bool ok = true;
            for (int32_t j = 0; j < a.k; j++) {
                int64_t e = io + j * a.idx_last_str;
                int64_t v = a.idx_dt == SEGRT_DTYPE_INT32 ? (int64_t)((const int32_t *)a.indices)[e]
                                                          : ((const int64_t *)a.indices)[e];
                int64_t dim = a.out_dims[j];
                if (v < -dim || v >= dim)
                    ok = false;
                o += (v < 0 ? v + dim : v) * a.out_str[j];
            }
            if (ok)
                scatter_apply(a, o + off[0], uo + off[1]);
            else if (a.err)
                atomicCAS(a.err, SGK_ERR_NONE, SGK_ERR_INDEX);
            for (int32_t d = a.t_rank - 1; d >= 0; d--) {
                io += a.t_idx_str[d];
                uo += a.t_upd_str[d];
                if (++tc[d] < a.t_dims[d])
                    break;
                io -= a.t_idx_str[d] * a.t_dims[d];
                uo -= a.t_upd_str[d] * a.t_dims[d];
                tc[d] = 0;
            }
        }
    }
}

// GatherND ------------------------------------------------------------------------

// Walk operands: 0 the output, 1 data (batch and slice dims), 2 the index
// tuple's first element; the tuple's k values then move data along its
// dims b .. b + k - 1.
struct gather_nd_args {
    walk w;
    void *out;
    const void *data, *indices;
    int32_t out_dt, data_dt, idx_dt, k;
    int64_t idx_last_str;
    int64_t dims[SGK_MAX_RANK], strides[SGK_MAX_RANK]; // data's along the tuple
    int *err;
};

__global__ void gather_nd_kernel(const gather_nd_args a)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.w.n; i += step) {
        int64_t off[IX_MAX_OPS];
        walk_offsets(a.w, i, off);
        int64_t src = off[1];
        bool ok = true;
        for (int32_t j = 0; j < a.k; j++) {
            int64_t e = off[2] + j * a.idx_last_str;
            int64_t v = a.idx_dt == SEGRT_DTYPE_INT32 ? (int64_t)((const int32_t *)a.indices)[e]
                                                      : ((const int64_t *)a.indices)[e];
            ok &= v >= -a.dims[j] && v < a.dims[j];
            src += (v < 0 ? v + a.dims[j] : v) * a.strides[j];
        }
        if (!ok) {
            if (a.err)
                atomicCAS(a.err, SGK_ERR_NONE, SGK_ERR_INDEX);
            st_i64(a.out, off[0], a.out_dt, 0);
            continue;
        }
        move_elem(a.out, off[0], a.out_dt, a.data, src, a.data_dt);
    }
}

// Along an axis, one thread a line -----------------------------------------------
//
// ScatterElements and CumSum walk every dim but the axis (operand 0 the
// output's offset, 1 and 2 the others'); each thread then runs along the
// axis in order, so that duplicate indices resolve as the reference's loop
// does and the running sum adds in its order.
struct line_args {
    walk w;
    void *out;
    const void *a, *b; // ScatterElements: indices, updates; CumSum: the input
    int32_t out_dt, a_dt, b_dt, reduction;
    int64_t len;                 // elements along the axis
    int64_t out_str, a_str, b_str; // strides along it
    int64_t out_dim;             // ScatterElements: the output's extent along it
    bool exclusive, reverse;     // CumSum
    int *err;
};

__global__ void scatter_elements_kernel(const line_args a)
{
    scatter_args s; // scatter_apply's fields
    s.out = a.out;
    s.updates = a.b;
    s.out_dt = a.out_dt;
    s.upd_dt = a.b_dt;
    s.reduction = a.reduction;
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.w.n; i += step) {
        int64_t off[IX_MAX_OPS];
        walk_offsets(a.w, i, off);
        for (int64_t j = 0; j < a.len; j++) {
            int64_t e = off[1] + j * a.a_str;
            int64_t v = a.a_dt == SEGRT_DTYPE_INT32 ? (int64_t)((const int32_t *)a.a)[e] : ((const int64_t *)a.a)[e];
            if (v < -a.out_dim || v >= a.out_dim) {
                if (a.err)
                    atomicCAS(a.err, SGK_ERR_NONE, SGK_ERR_INDEX);
                continue;
            }
            scatter_apply(s, off[0] + (v < 0 ? v + a.out_dim : v) * a.out_str, off[2] + j * a.b_str);
        }
    }
}

// Floats sum in double and integers in int64 with wrapping, as the
// reference's.
__global__ void cumsum_kernel(const line_args a)
{
    bool fl = is_float(a.a_dt);
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.w.n; i += step) {
        int64_t off[IX_MAX_OPS];
        walk_offsets(a.w, i, off);
        double sf = 0;
        uint64_t si = 0;
        for (int64_t s = 0; s < a.len; s++) {
            int64_t k = a.reverse ? a.len - 1 - s : s;
            int64_t x = off[1] + k * a.a_str, y = off[0] + k * a.out_str;
            if (fl) {
                double v = ld_f64(a.a, x, a.a_dt);
                if (!a.exclusive)
                    sf += v;
                st_f64(a.out, y, a.out_dt, sf);
                if (a.exclusive)
                    sf += v;
            } else {
                uint64_t v = (uint64_t)ld_i64(a.a, x, a.a_dt);
                if (!a.exclusive)
                    si += v;
                st_i64(a.out, y, a.out_dt, (int64_t)si);
                if (a.exclusive)
                    si += v;
            }
        }
    }
}

// Trilu and OneHot: each output element from one expression ------------------------

// Trilu: operand 0 the output, 1 the input, 2 the column minus the row.
// OneHot: 0 the output, 1 the indices (not moving along the depth axis), 2
// the depth index.
struct select_args {
    walk w;
    void *out;
    const void *in, *values;
    int32_t out_dt, in_dt, values_dt;
    int64_t k;              // Trilu: the diagonal
    bool upper;
    int64_t depth;          // OneHot
    int64_t values_stride;  // OneHot: values' element 1 at this offset
};

__global__ void trilu_kernel(const select_args a)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.w.n; i += step) {
        int64_t off[IX_MAX_OPS];
        walk_offsets(a.w, i, off);
        bool keep = a.upper ? off[2] >= a.k : off[2] <= a.k;
        if (keep)
            move_elem(a.out, off[0], a.out_dt, a.in, off[1], a.in_dt);
        else
            st_i64(a.out, off[0], a.out_dt, 0);
    }
}

// Float indices are truncated; one outside [-depth, depth) gives off values.
__global__ void one_hot_kernel(const select_args a)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.w.n; i += step) {
        int64_t off[IX_MAX_OPS];
        walk_offsets(a.w, i, off);
        int64_t v = is_float(a.in_dt) ? f2i(ld_f64(a.in, off[1], a.in_dt)) : ld_i64(a.in, off[1], a.in_dt);
        v = v < 0 ? v + a.depth : v;
        move_elem(a.out, off[0], a.out_dt, a.values, v == off[2] ? a.values_stride : 0, a.values_dt);
    }
}

// Einsum ---------------------------------------------------------------------------

// Walk operands: 0 the output, 1..n_in the inputs over the free letters;
// the summed letters run as an odometer in each thread.
struct einsum_args {
    walk w;
    void *out;
    int32_t out_dt, n_in, n_sum;
    int64_t n_terms; // product of the summed extents
    const void *in[SGK_EINSUM_MAX_IN];
    int32_t in_dt[SGK_EINSUM_MAX_IN];
    int64_t sum_dims[SGK_EINSUM_MAX_LETTERS];
    int64_t sum_str[SGK_EINSUM_MAX_IN][SGK_EINSUM_MAX_LETTERS];
};

// Float accumulation in T (float or double), loads converted to T.
template <typename T> __device__ __forceinline__ T einsum_load(const void *p, int64_t i, int32_t dt);
template <> __device__ __forceinline__ float einsum_load<float>(const void *p, int64_t i, int32_t dt)
{
    return ld_f32(p, i, dt);
}
template <> __device__ __forceinline__ double einsum_load<double>(const void *p, int64_t i, int32_t dt)
{
    return ld_f64(p, i, dt);
}

template <typename T> __device__ __forceinline__ T einsum_sum(const einsum_args &a, const int64_t *base)
{
    int64_t off[SGK_EINSUM_MAX_IN], cnt[SGK_EINSUM_MAX_LETTERS];
#pragma unroll
    for (int i = 0; i < SGK_EINSUM_MAX_IN; i++)
        off[i] = base[i];
    for (int l = 0; l < SGK_EINSUM_MAX_LETTERS; l++)
        cnt[l] = 0;
    T acc = 0;
    for (int64_t s = 0; s < a.n_terms; s++) {
        T prod = 1;
#pragma unroll
        for (int i = 0; i < SGK_EINSUM_MAX_IN; i++)
            if (i < a.n_in)
                prod = (T)(prod * einsum_load<T>(a.in[i], off[i], a.in_dt[i]));
        acc = (T)(acc + prod);
        for (int l = a.n_sum - 1; l >= 0; l--) {
#pragma unroll
            for (int i = 0; i < SGK_EINSUM_MAX_IN; i++)
                off[i] += a.sum_str[i][l];
            if (++cnt[l] < a.sum_dims[l])
                break;
#pragma unroll
            for (int i = 0; i < SGK_EINSUM_MAX_IN; i++)
                off[i] -= a.sum_str[i][l] * a.sum_dims[l];
            cnt[l] = 0;
        }
    }
    return acc;
}

// Integer products wrap: multiply and add as unsigned.
template <> __device__ __forceinline__ int64_t einsum_sum<int64_t>(const einsum_args &a, const int64_t *base)
{
    int64_t off[SGK_EINSUM_MAX_IN], cnt[SGK_EINSUM_MAX_LETTERS];
#pragma unroll
    for (int i = 0; i < SGK_EINSUM_MAX_IN; i++)
        off[i] = base[i];
    for (int l = 0; l < SGK_EINSUM_MAX_LETTERS; l++)
        cnt[l] = 0;
    uint64_t acc = 0;
    for (int64_t s = 0; s < a.n_terms; s++) {
        uint64_t prod = 1;
#pragma unroll
        for (int i = 0; i < SGK_EINSUM_MAX_IN; i++)
            if (i < a.n_in)
                prod *= (uint64_t)ld_i64(a.in[i], off[i], a.in_dt[i]);
        acc += prod;
        for (int l = a.n_sum - 1; l >= 0; l--) {
#pragma unroll
            for (int i = 0; i < SGK_EINSUM_MAX_IN; i++)
                off[i] += a.sum_str[i][l];
            if (++cnt[l] < a.sum_dims[l])
                break;
#pragma unroll
            for (int i = 0; i < SGK_EINSUM_MAX_IN; i++)
                off[i] -= a.sum_str[i][l] * a.sum_dims[l];
            cnt[l] = 0;
        }
    }
    return (int64_t)acc;
}

__global__ void einsum_kernel(const einsum_args a)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.w.n; i += step) {
        int64_t off[IX_MAX_OPS];
        walk_offsets(a.w, i, off);
        if (a.out_dt == SEGRT_DTYPE_FLOAT64)
            st_f64(a.out, off[0], a.out_dt, einsum_sum<double>(a, off + 1));
        else if (is_float(a.out_dt))
            st_f32(a.out, off[0], a.out_dt, einsum_sum<float>(a, off + 1));
        else
            st_i64(a.out, off[0], a.out_dt, einsum_sum<int64_t>(a, off + 1));
    }
}

// GridSample ----------------------------------------------------------------
//
// One thread an output element (n, c, point): the location from the grid
// (its last entry is the last axis), clamped or reflected into the borders
// (border, reflection), then the taps (1, 2 or 4 an axis), each outside
// the input 0, clamped or reflected. In double, as the reference computes
// it (ref_grid_sample.c), so that a nearest location's halves round as
// its do.

struct gs_args {
    sgk_view out, x, grid;
    int32_t nd, mode, pad;
    bool align;
    int64_t n, points;
    double lo[SGK_GS_MAX_DIMS], hi[SGK_GS_MAX_DIMS];
};

__device__ double gs_pixel(const gs_args &a, int64_t base, const int64_t *idx)
{
    int64_t off = base;
    for (int32_t d = 0; d < a.nd; d++) {
        int64_t i = idx[d], n = a.x.dims[2 + d];
        if (i < 0 || i >= n) {
            if (a.pad == SG_GS_ZEROS)
                return 0.0;
            if (a.pad == SG_GS_BORDER)
                i = i < 0 ? 0 : n - 1;
            else
                i = (int64_t)sg_gs_reflect((double)i, a.lo[d], a.hi[d]);
            i = i < 0 ? 0 : i >= n ? n - 1 : i; // reflection of a 1-pixel axis
        }
        off += i * a.x.strides[2 + d];
    }
    return ld_f64(a.x.data, off, a.x.dtype);
}

__global__ void grid_sample_kernel(const gs_args a)
{
    int64_t C = a.x.dims[1], step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {
        int64_t p = i % a.points, c = (i / a.points) % C, b = i / (a.points * C);
        // The point's output coordinates (row-major over the output's spatial dims).
        int64_t at[SGK_GS_MAX_DIMS], rest = p, goff = b * a.grid.strides[0], yoff = b * a.out.strides[0] +
                                                                              c * a.out.strides[1];
        for (int32_t d = a.nd - 1; d >= 0; d--) {
            at[d] = rest % a.out.dims[2 + d];
            rest /= a.out.dims[2 + d];
            goff += at[d] * a.grid.strides[1 + d];
            yoff += at[d] * a.out.strides[2 + d];
        }
        double v[SGK_GS_MAX_DIMS], f[SGK_GS_MAX_DIMS], w[SGK_GS_MAX_DIMS][4];
        for (int32_t d = 0; d < a.nd; d++) {
            double g = ld_f64(a.grid.data, goff + (a.nd - 1 - d) * a.grid.strides[a.nd + 1], a.grid.dtype);
            double size = (double)a.x.dims[2 + d];
            v[d] = a.align ? (g + 1) / 2 * (size - 1) : ((g + 1) * size - 1) / 2;
            if (a.mode == SG_GS_NEAREST)
                v[d] = nearbyint(v[d]);
            if (v[d] < a.lo[d] || v[d] > a.hi[d]) {
                if (a.pad == SG_GS_BORDER)
                    v[d] = v[d] < 0 ? 0 : v[d] > size - 1 ? size - 1 : v[d];
                else if (a.pad == SG_GS_REFLECTION)
                    v[d] = sg_gs_reflect(v[d], a.lo[d], a.hi[d]);
            }
            f[d] = floor(v[d]);
            double t = v[d] - f[d];
            if (a.mode == SG_GS_LINEAR) {
                w[d][0] = 1 - t;
                w[d][1] = t;
            } else if (a.mode == SG_GS_CUBIC) {
                sg_gs_cubic(t, w[d]);
            }
        }
        int64_t base = b * a.x.strides[0] + c * a.x.strides[1], idx[SGK_GS_MAX_DIMS];
        double r = 0;
        if (a.mode == SG_GS_NEAREST) {
            for (int32_t d = 0; d < a.nd; d++)
                idx[d] = (int64_t)v[d];
            r = gs_pixel(a, base, idx);
        } else {
            // Every combination of taps: 2 or 4 an axis, the first axis slowest.
            int32_t taps = a.mode == SG_GS_LINEAR ? 2 : 4, first = a.mode == SG_GS_LINEAR ? 0 : -1, total = 1;
            for (int32_t d = 0; d < a.nd; d++)
                total *= taps;
            for (int32_t k = 0; k < total; k++) {
                double weight = 1;
                for (int32_t d = a.nd - 1, q = k; d >= 0; d--, q /= taps) {
                    idx[d] = (int64_t)f[d] + first + q % taps;
                    weight *= w[d][q % taps];
                }
                r += weight * gs_pixel(a, base, idx);
            }
        }
        st_f64(a.out.data, yoff, a.out.dtype, r);
    }
}

// TopK ----------------------------------------------------------------------
//
// One thread an input element: its place in the order is the number of
// elements of its line that come before it (larger first for largest, NaN
// beyond every number, ties by the smaller index: the reference's order,
// ref_select.c); one with a place below K writes its value and index
// there. Quadratic in the line's length, which the builder bounds.

struct topk_args {
    sgk_view x, values, indices;
    int32_t axis;
    int64_t k, n;
    bool largest;
};

__device__ __forceinline__ bool topk_before(double a, int64_t ia, double b, int64_t ib, bool largest)
{
    bool an = a != a, bn = b != b;
    if (an != bn)
        return largest ? an : bn;
    if (!an && a != b)
        return largest ? a > b : a < b;
    return ia < ib;
}

__global__ void topk_kernel(const topk_args a)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x, len = a.x.dims[a.axis], xs = a.x.strides[a.axis];
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < a.n; e += step) {
        // Element e of x (row-major): its line's first element and its place on it.
        int64_t rest = e, xoff = 0, voff = 0, ioff = 0, j = 0;
        for (int32_t d = a.x.rank - 1; d >= 0; d--) {
            int64_t c = rest % a.x.dims[d];
            rest /= a.x.dims[d];
            if (d == a.axis) {
                j = c;
                continue;
            }
            xoff += c * a.x.strides[d];
            voff += c * a.values.strides[d];
            ioff += c * a.indices.strides[d];
        }
        double v = ld_f64(a.x.data, xoff + j * xs, a.x.dtype);
        int64_t place = 0;
        for (int64_t m = 0; m < len && place < a.k; m++)
            place += m != j && topk_before(ld_f64(a.x.data, xoff + m * xs, a.x.dtype), m, v, j, a.largest);
        if (place < a.k) {
            move_elem(a.values.data, voff + place * a.values.strides[a.axis], a.values.dtype, a.x.data, xoff + j * xs,
                      a.x.dtype);
            st_i64(a.indices.data, ioff + place * a.indices.strides[a.axis], a.indices.dtype, j);
        }
    }
}

bool view_ok(const sgk_view *v)
{
    return v && v->rank >= 0 && v->rank <= SGK_MAX_RANK && dtype_bytes(v->dtype) != 0;
}

int64_t numel(const sgk_view *v)
{
    int64_t n = 1;
    for (int32_t d = 0; d < v->rank; d++)
        n *= v->dims[d];
    return n;
}

} // namespace

extern "C" segrt_status sgk_pad(cudaStream_t stream, const sgk_view *out, const sgk_view *in,
                                const int64_t *pad_begin, sgk_pad_mode mode, double value)
{
    if (!view_ok(out) || !view_ok(in) || in->rank != out->rank || (out->rank > 0 && !pad_begin))
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_pad: bad arguments");
    int64_t n = numel(out);
    if (n == 0)
        return SEGRT_OK;
    for (int32_t d = 0; d < out->rank; d++)
        if (mode != SGK_PAD_CONSTANT && in->dims[d] <= 0)
            return sg_error(SEGRT_ERROR_INTERNAL, "sgk_pad: cannot pad an empty dim in this mode");
    pad_args a;
    memset(&a, 0, sizeof a);
    a.mode = mode;
    a.n = n;
    a.out = out->data;
    a.in = in->data;
    a.out_dt = out->dtype;
    a.in_dt = in->dtype;
    a.value = value;
    // The output's memory order, outermost first; size-1 dims of the
    // output still map through the mode (pads may shift them), so all stay.
    int32_t order[SGK_MAX_RANK];
    for (int32_t d = 0; d < out->rank; d++) {
        int32_t j = d;
        while (j > 0 && abs64(out->strides[order[j - 1]]) < abs64(out->strides[d])) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = d;
    }
    a.rank = out->rank;
    for (int32_t i = 0; i < out->rank; i++) {
        int32_t d = order[i];
        a.odims[i] = out->dims[d];
        a.ostr[i] = out->strides[d];
        a.idims[i] = in->dims[d];
        a.istr[i] = in->strides[d];
        a.pb[i] = pad_begin[d];
    }
    a.small = n <= (int64_t)INT32_MAX;
    if (a.small)
        for (int32_t i = 0; i < a.rank; i++)
            a.div[i] = fastdiv_make((uint32_t)a.odims[i]);
    pad_kernel<<<blocks_for(n), IX_THREADS, 0, stream>>>(a);
    return launched("sgk_pad");
}

extern "C" segrt_status sgk_gather(cudaStream_t stream, const sgk_view *out, const sgk_view *data,
                                   const sgk_view *indices, int32_t axis, int *err)
{
    if (!view_ok(out) || !view_ok(data) || !view_ok(indices) || axis < 0 || axis >= data->rank ||
        out->rank != data->rank - 1 + indices->rank ||
        (indices->dtype != SEGRT_DTYPE_INT32 && indices->dtype != SEGRT_DTYPE_INT64))
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_gather: bad arguments");
    int32_t ri = indices->rank;
    int64_t st[3][SGK_MAX_RANK];
    for (int32_t d = 0; d < out->rank; d++) {
        st[0][d] = out->strides[d];
        if (d < axis) {
            st[1][d] = data->strides[d];
            st[2][d] = 0;
        } else if (d < axis + ri) {
            st[1][d] = 0;
            st[2][d] = indices->strides[d - axis];
        } else {
            st[1][d] = data->strides[d - ri + 1];
            st[2][d] = 0;
        }
    }
    gather_args a;
    memset(&a, 0, sizeof a);
    walk_init(&a.w, out->rank, out->dims, 3, st, true);
    if (a.w.n == 0)
        return SEGRT_OK;
    a.out = out->data;
    a.data = data->data;
    a.indices = indices->data;
    a.out_dt = out->dtype;
    a.data_dt = data->dtype;
    a.idx_dt = indices->dtype;
    a.axis_dim = data->dims[axis];
    a.axis_stride = data->strides[axis];
    a.err = err;
    gather_kernel<<<blocks_for(a.w.n), IX_THREADS, 0, stream>>>(a);
    return launched("sgk_gather");
}

extern "C" segrt_status sgk_scatter_nd(cudaStream_t stream, const sgk_view *out, const sgk_view *indices,
                                       const sgk_view *updates, sgk_scatter_reduce reduction, int *err)
{
    if (!view_ok(out) || !view_ok(indices) || !view_ok(updates) || indices->rank < 1 ||
        (indices->dtype != SEGRT_DTYPE_INT32 && indices->dtype != SEGRT_DTYPE_INT64))
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_scatter_nd: bad arguments");
    int32_t tr = indices->rank - 1;
    int64_t k = indices->dims[tr];
    // updates: indices.dims[:-1] + out.dims[k:]
    bool ok = k <= out->rank && updates->rank == tr + out->rank - (int32_t)k;
    for (int32_t d = 0; ok && d < tr; d++)
        ok = updates->dims[d] == indices->dims[d];
    for (int32_t d = (int32_t)k; ok && d < out->rank; d++)
        ok = updates->dims[tr + d - k] == out->dims[d];
    if (!ok)
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_scatter_nd: updates do not match indices and data");
    scatter_args a;
    memset(&a, 0, sizeof a);
    int32_t sr = out->rank - (int32_t)k;
    int64_t sdims[SGK_MAX_RANK], st[2][SGK_MAX_RANK];
    for (int32_t d = 0; d < sr; d++) {
        sdims[d] = out->dims[k + d];
        st[0][d] = out->strides[k + d];
        st[1][d] = updates->strides[tr + d];
    }
    walk_init(&a.w, sr, sdims, 2, st, true);
    a.tuples = 1;
    for (int32_t d = 0; d < tr; d++) {
        a.t_dims[d] = indices->dims[d];
        a.t_idx_str[d] = indices->strides[d];
        a.t_upd_str[d] = updates->strides[d];
        a.tuples *= indices->dims[d];
    }
    if (a.w.n == 0 || a.tuples == 0)
        return SEGRT_OK;
    a.t_rank = tr;
    a.k = (int32_t)k;
    a.idx_last_str = indices->strides[tr];
    for (int32_t j = 0; j < (int32_t)k; j++) {
        a.out_dims[j] = out->dims[j];
        a.out_str[j] = out->strides[j];
    }
    a.out = out->data;
    a.indices = indices->data;
    a.updates = updates->data;
    a.out_dt = out->dtype;
    a.idx_dt = indices->dtype;
    a.upd_dt = updates->dtype;
    a.reduction = reduction;
    a.err = err;
    scatter_kernel<<<blocks_for(a.w.n), IX_THREADS, 0, stream>>>(a);
    return launched("sgk_scatter_nd");
}

static bool index_dtype(segrt_dtype t) { return t == SEGRT_DTYPE_INT32 || t == SEGRT_DTYPE_INT64; }

static bool same_dims(const sgk_view *a, const sgk_view *b)
{
    if (a->rank != b->rank)
        return false;
    for (int32_t d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d])
            return false;
    return true;
}

extern "C" segrt_status sgk_gather_elements(cudaStream_t stream, const sgk_view *out, const sgk_view *data,
                                            const sgk_view *indices, int32_t axis, int *err)
{
    if (!view_ok(out) || !view_ok(data) || !view_ok(indices) || axis < 0 || axis >= data->rank ||
        !same_dims(out, indices) || data->rank != indices->rank || !index_dtype(indices->dtype))
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_gather_elements: bad arguments");
    int64_t st[3][SGK_MAX_RANK];
    for (int32_t d = 0; d < out->rank; d++) {
        st[0][d] = out->strides[d];
        st[1][d] = d == axis ? 0 : data->strides[d];
        st[2][d] = indices->strides[d];
    }
    gather_args a;
    memset(&a, 0, sizeof a);
    walk_init(&a.w, out->rank, out->dims, 3, st, true);
    if (a.w.n == 0)
        return SEGRT_OK;
    a.out = out->data;
    a.data = data->data;
    a.indices = indices->data;
    a.out_dt = out->dtype;
    a.data_dt = data->dtype;
    a.idx_dt = indices->dtype;
    a.axis_dim = data->dims[axis];
    a.axis_stride = data->strides[axis];
    a.err = err;
    gather_kernel<<<blocks_for(a.w.n), IX_THREADS, 0, stream>>>(a);
    return launched("sgk_gather_elements");
}

// The lines of `over` (every dim but axis) for n_ops views of its rank.
static void line_walk(line_args *a, const sgk_view *over, int32_t axis, int32_t n_ops, const sgk_view *const *v)
{
    int64_t dims[SGK_MAX_RANK], st[3][SGK_MAX_RANK];
    for (int32_t d = 0; d < over->rank; d++) {
        dims[d] = d == axis ? 1 : over->dims[d];
        for (int32_t k = 0; k < n_ops; k++)
            st[k][d] = v[k]->strides[d];
    }
    walk_init(&a->w, over->rank, dims, n_ops, st, true);
}

extern "C" segrt_status sgk_gather_nd(cudaStream_t stream, const sgk_view *out, const sgk_view *data,
                                      const sgk_view *indices, int32_t batch_dims, int *err)
{
    int32_t ir = indices->rank, b = batch_dims;
    int64_t k = ir >= 1 ? indices->dims[ir - 1] : 0;
    bool ok = view_ok(out) && view_ok(data) && view_ok(indices) && index_dtype(indices->dtype) && ir >= 1 &&
              b >= 0 && b < ir && k >= 1 && b + k <= data->rank && out->rank == ir - 1 + data->rank - b - (int32_t)k;
    for (int32_t d = 0; ok && d < b; d++)
        ok = indices->dims[d] == data->dims[d];
    for (int32_t d = 0; ok && d < out->rank; d++)
        ok = out->dims[d] == (d < ir - 1 ? indices->dims[d] : data->dims[b + k + d - (ir - 1)]);
    if (!ok)
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_gather_nd: bad arguments");
    int64_t st[3][SGK_MAX_RANK];
    for (int32_t d = 0; d < out->rank; d++) {
        st[0][d] = out->strides[d];
        st[1][d] = d < b ? data->strides[d] : d < ir - 1 ? 0 : data->strides[b + k + d - (ir - 1)];
        st[2][d] = d < ir - 1 ? indices->strides[d] : 0;
    }
    gather_nd_args a;
    memset(&a, 0, sizeof a);
    walk_init(&a.w, out->rank, out->dims, 3, st, true);
    if (a.w.n == 0)
        return SEGRT_OK;
    a.out = out->data;
    a.data = data->data;
    a.indices = indices->data;
    a.out_dt = out->dtype;
    a.data_dt = data->dtype;
    a.idx_dt = indices->dtype;
    a.k = (int32_t)k;
    a.idx_last_str = indices->strides[ir - 1];
    for (int32_t j = 0; j < (int32_t)k; j++) {
        a.dims[j] = data->dims[b + j];
        a.strides[j] = data->strides[b + j];
    }
    a.err = err;
    gather_nd_kernel<<<blocks_for(a.w.n), IX_THREADS, 0, stream>>>(a);
    return launched("sgk_gather_nd");
}

extern "C" segrt_status sgk_scatter_elements(cudaStream_t stream, const sgk_view *out, const sgk_view *indices,
                                             const sgk_view *updates, int32_t axis, sgk_scatter_reduce reduction,
                                             int *err)
{
    bool ok = view_ok(out) && view_ok(indices) && view_ok(updates) && axis >= 0 && axis < out->rank &&
              out->rank == indices->rank && same_dims(indices, updates) && index_dtype(indices->dtype);
    for (int32_t d = 0; ok && d < out->rank; d++)
        ok = d == axis || indices->dims[d] <= out->dims[d];
    if (!ok)
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_scatter_elements: bad arguments");
    line_args a;
    memset(&a, 0, sizeof a);
    const sgk_view *v[3] = {out, indices, updates};
    line_walk(&a, indices, axis, 3, v);
    a.len = indices->dims[axis];
    if (a.w.n == 0 || a.len == 0)
        return SEGRT_OK;
    a.out = out->data;
    a.a = indices->data;
    a.b = updates->data;
    a.out_dt = out->dtype;
    a.a_dt = indices->dtype;
    a.b_dt = updates->dtype;
    a.reduction = reduction;
    a.out_str = out->strides[axis];
    a.a_str = indices->strides[axis];
    a.b_str = updates->strides[axis];
    a.out_dim = out->dims[axis];
    a.err = err;
    scatter_elements_kernel<<<blocks_for(a.w.n), IX_THREADS, 0, stream>>>(a);
    return launched("sgk_scatter_elements");
}

extern "C" segrt_status sgk_cumsum(cudaStream_t stream, const sgk_view *out, const sgk_view *in, int32_t axis,
                                   bool exclusive, bool reverse)
{
    if (!view_ok(out) || !view_ok(in) || !same_dims(out, in) || axis < 0 || axis >= in->rank)
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_cumsum: bad arguments");
    line_args a;
    memset(&a, 0, sizeof a);
    const sgk_view *v[2] = {out, in};
    line_walk(&a, in, axis, 2, v);
    a.len = in->dims[axis];
    if (a.w.n == 0 || a.len == 0)
        return SEGRT_OK;
    a.out = out->data;
    a.a = in->data;
    a.out_dt = out->dtype;
    a.a_dt = in->dtype;
    a.out_str = out->strides[axis];
    a.a_str = in->strides[axis];
    a.exclusive = exclusive;
    a.reverse = reverse;
    cumsum_kernel<<<blocks_for(a.w.n), IX_THREADS, 0, stream>>>(a);
    return launched("sgk_cumsum");
}

extern "C" segrt_status sgk_trilu(cudaStream_t stream, const sgk_view *out, const sgk_view *in, int64_t k, bool upper)
{
    if (!view_ok(out) || !view_ok(in) || !same_dims(out, in) || in->rank < 2)
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_trilu: bad arguments");
    int64_t st[3][SGK_MAX_RANK];
    int32_t r = in->rank;
    for (int32_t d = 0; d < r; d++) {
        st[0][d] = out->strides[d];
        st[1][d] = in->strides[d];
        st[2][d] = d == r - 1 ? 1 : d == r - 2 ? -1 : 0; // column minus row
    }
    select_args a;
    memset(&a, 0, sizeof a);
    walk_init(&a.w, r, out->dims, 3, st, true);
    if (a.w.n == 0)
        return SEGRT_OK;
    a.out = out->data;
    a.in = in->data;
    a.out_dt = out->dtype;
    a.in_dt = in->dtype;
    a.k = k;
    a.upper = upper;
    trilu_kernel<<<blocks_for(a.w.n), IX_THREADS, 0, stream>>>(a);
    return launched("sgk_trilu");
}

extern "C" segrt_status sgk_one_hot(cudaStream_t stream, const sgk_view *out, const sgk_view *indices,
                                    const sgk_view *values, int32_t axis)
{
    bool ok = view_ok(out) && view_ok(indices) && view_ok(values) && out->rank == indices->rank + 1 && axis >= 0 &&
              axis < out->rank && values->rank == 1 && values->dims[0] == 2;
    for (int32_t d = 0, j = 0; ok && d < out->rank; d++)
        if (d != axis)
            ok = out->dims[d] == indices->dims[j++];
    if (!ok)
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_one_hot: bad arguments");
    int64_t st[3][SGK_MAX_RANK];
    for (int32_t d = 0, j = 0; d < out->rank; d++) {
        st[0][d] = out->strides[d];
        st[1][d] = d == axis ? 0 : indices->strides[j++];
        st[2][d] = d == axis ? 1 : 0; // the depth index
    }
    select_args a;
    memset(&a, 0, sizeof a);
    walk_init(&a.w, out->rank, out->dims, 3, st, true);
    if (a.w.n == 0)
        return SEGRT_OK;
    a.out = out->data;
    a.in = indices->data;
    a.values = values->data;
    a.out_dt = out->dtype;
    a.in_dt = indices->dtype;
    a.values_dt = values->dtype;
    a.depth = out->dims[axis];
    a.values_stride = values->strides[0];
    one_hot_kernel<<<blocks_for(a.w.n), IX_THREADS, 0, stream>>>(a);
    return launched("sgk_one_hot");
}

extern "C" segrt_status sgk_einsum(cudaStream_t stream, const sgk_einsum_params *p, const sgk_view *out)
{
    if (!p || !view_ok(out) || p->n_in < 1 || p->n_in > SGK_EINSUM_MAX_IN || p->n_letters < out->rank ||
        p->n_letters > SGK_EINSUM_MAX_LETTERS)
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_einsum: bad arguments");
    for (int32_t d = 0; d < out->rank; d++)
        if (out->dims[d] != p->letter_dims[d])
            return sg_error(SEGRT_ERROR_INTERNAL, "sgk_einsum: output dim %d is not its letter's extent", d);
    einsum_args a;
    memset(&a, 0, sizeof a);
    int64_t st[IX_MAX_OPS][SGK_MAX_RANK];
    for (int32_t d = 0; d < out->rank; d++) {
        st[0][d] = out->strides[d];
        for (int32_t i = 0; i < p->n_in; i++)
            st[i + 1][d] = p->in_strides[i][d];
    }
    walk_init(&a.w, out->rank, out->dims, p->n_in + 1, st, true);
    if (a.w.n == 0)
        return SEGRT_OK;
    a.out = out->data;
    a.out_dt = out->dtype;
    a.n_in = p->n_in;
    a.n_sum = p->n_letters - out->rank;
    a.n_terms = 1;
    for (int32_t l = 0; l < a.n_sum; l++) {
        a.sum_dims[l] = p->letter_dims[out->rank + l];
        a.n_terms *= a.sum_dims[l];
        for (int32_t i = 0; i < p->n_in; i++)
            a.sum_str[i][l] = p->in_strides[i][out->rank + l];
    }
    for (int32_t i = 0; i < p->n_in; i++) {
        if (dtype_bytes(p->in_dtype[i]) == 0)
            return sg_error(SEGRT_ERROR_INTERNAL, "sgk_einsum: input %d has no dtype", i);
        a.in[i] = p->in_data[i];
        a.in_dt[i] = p->in_dtype[i];
    }
    einsum_kernel<<<blocks_for(a.w.n), IX_THREADS, 0, stream>>>(a);
    return launched("sgk_einsum");
}

extern "C" segrt_status sgk_grid_sample(cudaStream_t stream, const sgk_view *out, const sgk_view *x, const sgk_view *grid,
                                        int32_t mode, int32_t pad, bool align_corners)
{
    int32_t nd = x ? x->rank - 2 : 0;
    bool ok = view_ok(out) && view_ok(x) && view_ok(grid) && nd >= 1 && nd <= SGK_GS_MAX_DIMS && out->rank == x->rank &&
              grid->rank == x->rank && grid->dims[x->rank - 1] == nd && grid->dims[0] == x->dims[0] &&
              out->dims[0] == x->dims[0] && out->dims[1] == x->dims[1];
    for (int32_t d = 0; ok && d < nd; d++)
        ok = out->dims[2 + d] == grid->dims[1 + d];
    if (!ok)
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_grid_sample: bad arguments");
    gs_args a;
    memset(&a, 0, sizeof a);
    a.out = *out;
    a.x = *x;
    a.grid = *grid;
    a.nd = nd;
    a.mode = mode;
    a.pad = pad;
    a.align = align_corners;
    a.points = 1;
    for (int32_t d = 0; d < nd; d++) {
        a.points *= out->dims[2 + d];
        a.lo[d] = align_corners ? 0.0 : -0.5;
        a.hi[d] = align_corners ? (double)(x->dims[2 + d] - 1) : (double)x->dims[2 + d] - 0.5;
    }
    a.n = out->dims[0] * out->dims[1] * a.points;
    if (a.n == 0)
        return SEGRT_OK;
    grid_sample_kernel<<<blocks_for(a.n), IX_THREADS, 0, stream>>>(a);
    return launched("sgk_grid_sample");
}

extern "C" segrt_status sgk_top_k(cudaStream_t stream, const sgk_view *values, const sgk_view *indices,
                                  const sgk_view *x, int32_t axis, int64_t k, bool largest)
{
    bool ok = view_ok(values) && view_ok(indices) && view_ok(x) && axis >= 0 && axis < x->rank &&
              values->rank == x->rank && indices->rank == x->rank && k >= 0 && k <= x->dims[axis] &&
              !is_float(indices->dtype);
    for (int32_t d = 0; ok && d < x->rank; d++)
        ok = values->dims[d] == (d == axis ? k : x->dims[d]) && indices->dims[d] == values->dims[d];
    if (!ok)
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_top_k: bad arguments");
    topk_args a;
    memset(&a, 0, sizeof a);
    a.x = *x;
    a.values = *values;
    a.indices = *indices;
    a.axis = axis;
    a.k = k;
    a.largest = largest;
    a.n = numel(x);
    if (a.n == 0 || k == 0)
        return SEGRT_OK;
    topk_kernel<<<blocks_for(a.n), IX_THREADS, 0, stream>>>(a);
    return launched("sgk_top_k");
}
