// Index-mapping kernels over strided views: Pad (and Tile, as wrap-mode
// padding), Gather, ScatterND and a direct Einsum.
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
