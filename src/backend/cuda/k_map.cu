// (Over 1,000 lines on purpose: one kernel family, every elementwise op
// behind one launcher that simplifies the iteration space first; the ops'
// functors are a few lines each and belong with it.)
//
// sgk_map: every elementwise operator of the CUDA backend (activations,
// arithmetic with broadcasting, comparisons, Where, casts and layout
// copies) as one kernel family over strided views.
//
// The launcher first simplifies the iteration space, because these maps
// run on every activation of a network and are bound by memory traffic:
//   1. dims of size 1 are dropped and the rest put in the output's memory
//      order (outermost first), so consecutive threads write consecutive
//      addresses whatever the output's layout;
//   2. adjacent dims contiguous in every operand are merged, which turns
//      the common cases (same-layout operands, broadcast of a scalar or of
//      a whole trailing block) into one or two dims.
// It then picks a path:
//   - a plain device copy for a same-dtype contiguous COPY;
//   - a row copy (copy_rows_kernel, 16/8/4-byte units, bit for bit) for a
//     same-dtype COPY whose sides are both contiguous along the last of up
//     to three dims: a Concat's input into its channel slice of the output;
//   - the fast float kernels (map_fast_kernel: 16 bytes of output per
//     thread, the operator and the output dtype compiled in) over up to
//     three dims where the output is contiguous along the last, every
//     input is contiguous or constant along it and rows are whole vectors:
//     bias adds, PReLU slopes, residual adds, activations and casts on
//     channels-last activations;
//   - a vectorized kernel (4 elements per thread, 8/16-byte accesses)
//     for float dtypes over one dim, or two with a row length divisible by
//     4, where every input is contiguous or broadcast along the last dim
//     (float16 rows of 12 or 20 channels, views the fast kernels' alignment
//     rules out);
//   - a tiled transpose for one-input maps whose input runs contiguously
//     along another dim than the output (layout conversions NCHW <->
//     NHWC), which keeps both reads and writes coalesced;
//   - a linear kernel for one remaining dim (any strides, 0 included);
//   - the general kernel, which turns each linear output index into
//     coordinates (32-bit multiply-shift division when the index fits).
//
// Values are loaded into a compute type chosen once per launch: float64
// when any operand is float64, float32 when any input is a float, int64
// otherwise (integer and bool operands; integer Div truncates, arithmetic
// wraps as in the reference kernels), and raw bits for a COPY between
// equal dtypes. Stores convert as ONNX Cast does (floats to integers
// truncate toward zero with NaN -> 0 and saturation to int64 before
// narrowing, anything to bool is != 0).
#include "backend/cuda/k_common.cuh"

#include <stdint.h>
#include <string.h>

namespace {

// Operand 0 is the output, 1..n_in the inputs.
#define MAP_OPERANDS (SGK_MAP_MAX_IN + 1)
#define MAP_THREADS 256
// Enough blocks to fill any current GPU many times over; larger maps loop.
#define MAP_MAX_BLOCKS (1 << 18)

enum map_class {
    CLS_RAW, // COPY between equal dtypes: move bits, no conversion
    CLS_F32,
    CLS_F64,
    CLS_I64
};

struct map_args {
    int32_t op, act, cls, n_in, rank;
    float alpha, beta, act_alpha;
    int64_t n; // elements of the output
    int64_t dims[SGK_MAX_RANK];
    fastdiv div[SGK_MAX_RANK];
    void *data[MAP_OPERANDS];
    int32_t dtype[MAP_OPERANDS];
    int64_t strides[MAP_OPERANDS][SGK_MAX_RANK];
};

// Element loads and stores ------------------------------------------------

// Raw element moves by size, for COPY between equal dtypes.
__device__ __forceinline__ uint64_t ld_raw(const void *p, int64_t i, int32_t es)
{
    switch (es) {
    case 1: return ((const uint8_t *)p)[i];
    case 2: return ((const uint16_t *)p)[i];
    case 4: return ((const uint32_t *)p)[i];
    default: return ((const uint64_t *)p)[i];
    }
}

__device__ __forceinline__ void st_raw(void *p, int64_t i, int32_t es, uint64_t v)
{
    switch (es) {
    case 1: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case 2: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case 4: ((uint32_t *)p)[i] = (uint32_t)v; break;
    default: ((uint64_t *)p)[i] = v; break;
    }
}

// The operators ----------------------------------------------------------

// max and min that return NaN when either operand is NaN (numpy's
// maximum/minimum, the reference's ref_max_nan/ref_min_nan).
template <typename T> __device__ __forceinline__ T max_nan(T a, T b) { return (a > b || a != a) ? a : b; }
template <typename T> __device__ __forceinline__ T min_nan(T a, T b) { return (a < b || a != a) ? a : b; }

// The float operators, written once for float32 and float64: the CUDA
// math functions are overloaded on both, so one template gives each
// precision its own arithmetic without two copies of every formula.
// op is a parameter, not read from map_args, so that the fast kernels can
// pass a compile-time constant and keep only their operator's code.
template <typename T>
__device__ __forceinline__ T map_fp_op(int32_t op, float alpha_f, float beta_f, int32_t n_in, const T *x)
{
    const T v = x[0];
    const T alpha = (T)alpha_f, beta = (T)beta_f;
    switch (op) {
    case SGK_COPY: return v;
    case SGK_RELU: return v < 0 ? (T)0 : v; // NaN stays NaN
    case SGK_LEAKY_RELU: return v < 0 ? alpha * v : v;
    case SGK_ELU: return v < 0 ? alpha * expm1(v) : v;
    case SGK_SELU: return v <= 0 ? beta * alpha * expm1(v) : beta * v; // gamma in beta
    case SGK_SIGMOID:
        // Neither branch overflows exp.
        if (v >= 0)
            return (T)1 / ((T)1 + exp(-v));
        else {
            T e = exp(v);
            return e / ((T)1 + e);
        }
    case SGK_HARD_SIGMOID: {
        T h = alpha * v + beta;
        return h < 0 ? (T)0 : (h > 1 ? (T)1 : h);
    }
    case SGK_HARD_SWISH: {
        // alpha = 1/6 as the spec's float attribute, as the reference has it.
        T h = v * (T)(1.0f / 6.0f) + (T)0.5;
        return v * (h < 0 ? (T)0 : (h > 1 ? (T)1 : h));
    }
    case SGK_TANH: return tanh(v);
    case SGK_SOFTPLUS: return v > 0 ? v + log1p(exp(-v)) : log1p(exp(v));
    case SGK_GELU: return (T)0.5 * v * ((T)1 + erf(v * (T)0.7071067811865476));
    case SGK_GELU_TANH:
        return (T)0.5 * v * ((T)1 + tanh((T)0.7978845608028654 * (v + (T)0.044715 * v * v * v)));
    case SGK_ERF: return erf(v);
    case SGK_CLIP: {
        T c = v < alpha ? alpha : v; // NaN compares false both times
        return c > beta ? beta : c;
    }
    case SGK_SQRT: return sqrt(v);
    case SGK_EXP: return exp(v);
    case SGK_LOG: return log(v);
    case SGK_NEG: return -v;
    case SGK_ABS: return fabs(v);
    case SGK_RECIPROCAL: return (T)1 / v;
    case SGK_FLOOR: return floor(v);
    case SGK_CEIL: return ceil(v);
    case SGK_NOT: return v != 0 ? (T)0 : (T)1;
    case SGK_AFFINE: return v * alpha + beta;
    case SGK_SIN: return sin(v);
    case SGK_COS: return cos(v);
    case SGK_ROUND: return rint(v); // to nearest, ties to even
    case SGK_SIGN: return v > 0 ? (T)1 : v < 0 ? (T)-1 : v; // 0 and NaN as they are
    case SGK_SOFTSIGN: return v / ((T)1 + fabs(v));
    case SGK_MISH: return v * tanh(v > 0 ? v + log1p(exp(-v)) : log1p(exp(v))); // softplus as SGK_SOFTPLUS
    case SGK_IS_NAN: return isnan(v) ? (T)1 : (T)0;
    case SGK_IS_INF: return isinf(v) && ((v < 0 && alpha != 0) || (v > 0 && beta != 0)) ? (T)1 : (T)0;
    case SGK_ADD: return v + x[1];
    case SGK_SUB: return v - x[1];
    case SGK_MUL: return v * x[1];
    case SGK_DIV: return v / x[1];
    case SGK_POW: return pow(v, x[1]);
    case SGK_EQUAL: return v == x[1] ? (T)1 : (T)0;
    case SGK_LESS: return v < x[1] ? (T)1 : (T)0;
    case SGK_GREATER: return v > x[1] ? (T)1 : (T)0;
    case SGK_AND: return (v != 0 && x[1] != 0) ? (T)1 : (T)0;
    case SGK_OR: return (v != 0 || x[1] != 0) ? (T)1 : (T)0;
    case SGK_LESS_EQUAL: return v <= x[1] ? (T)1 : (T)0;
    case SGK_GREATER_EQUAL: return v >= x[1] ? (T)1 : (T)0;
    case SGK_XOR: return ((v != 0) != (x[1] != 0)) ? (T)1 : (T)0;
    case SGK_MOD: return fmod(v, x[1]); // floats take fmod=1 only
    case SGK_PRELU: return v < 0 ? v * x[1] : v;
    case SGK_MIN:
    case SGK_MAX:
    case SGK_SUM:
    case SGK_MEAN: {
        T r = v;
#pragma unroll
        for (int k = 1; k < SGK_MAP_MAX_IN; k++) {
            if (k >= n_in)
                break;
            r = op == SGK_MIN ? min_nan(r, x[k]) : op == SGK_MAX ? max_nan(r, x[k]) : r + x[k];
        }
        return op == SGK_MEAN ? r / (T)n_in : r;
    }
    case SGK_WHERE: return v != 0 ? x[1] : x[2];
    case SGK_FMA: return fma(v, x[1], x[2]); // one rounding, closest to the reference's double
    default: return v;
    }
}

template <typename T> __device__ __forceinline__ T map_fp(const map_args &a, const T *x)
{
    return map_fp_op<T>(a.op, a.alpha, a.beta, a.n_in, x);
}

template <typename T> __device__ __forceinline__ T apply_act_op(int32_t act, float act_alpha, T r)
{
    switch (act) {
    case SGK_ACT_RELU: return r < 0 ? (T)0 : r;
    case SGK_ACT_LEAKY_RELU: return r < 0 ? (T)act_alpha * r : r;
    default: return r;
    }
}

template <typename T> __device__ __forceinline__ T apply_act(const map_args &a, T r)
{
    return apply_act_op<T>(a.act, a.act_alpha, r);
}

// Wrapping integer arithmetic without signed overflow.
__device__ __forceinline__ int64_t add_w(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
__device__ __forceinline__ int64_t sub_w(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
__device__ __forceinline__ int64_t mul_w(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

__device__ __forceinline__ int64_t ipow(int64_t base, int64_t e)
{
    if (e < 0) {
        // |base^e| < 1 truncates to 0; 0 to a negative power, an error in
        // the reference, has no way out of a kernel and gives 0 too.
        if (base == 1)
            return 1;
        if (base == -1)
            return (e & 1) ? -1 : 1;
        return 0;
    }
    uint64_t r = 1, b = (uint64_t)base;
    while (e > 0) {
        if (e & 1)
            r *= b;
        b *= b;
        e >>= 1;
    }
    return (int64_t)r;
}

// Operators with an integer form; the others compute in float64 on
// integer operands.
__host__ __device__ __forceinline__ bool int_op(int32_t op)
{
    switch (op) {
    case SGK_COPY: case SGK_RELU: case SGK_NEG: case SGK_ABS: case SGK_NOT:
    case SGK_ADD: case SGK_SUB: case SGK_MUL: case SGK_DIV: case SGK_POW:
    case SGK_EQUAL: case SGK_LESS: case SGK_GREATER: case SGK_AND: case SGK_OR:
    case SGK_LESS_EQUAL: case SGK_GREATER_EQUAL: case SGK_XOR: case SGK_SIGN: case SGK_MOD: case SGK_BIT_SHIFT:
    case SGK_PRELU: case SGK_MIN: case SGK_MAX: case SGK_SUM: case SGK_MEAN:
    case SGK_WHERE: case SGK_FMA:
        return true;
    default:
        return false;
    }
}

__device__ __forceinline__ int64_t map_int(const map_args &a, const int64_t *x)
{
    const int64_t v = x[0];
    switch (a.op) {
    case SGK_RELU: return v < 0 ? 0 : v;
    case SGK_NEG: return sub_w(0, v);
    case SGK_ABS: return v < 0 ? sub_w(0, v) : v;
    case SGK_NOT: return v == 0;
    case SGK_ADD: return add_w(v, x[1]);
    case SGK_SUB: return sub_w(v, x[1]);
    case SGK_MUL: return mul_w(v, x[1]);
    case SGK_DIV:
        // Truncating, as C and the reference; division by zero (an error
        // there) gives 0 here; INT64_MIN / -1 wraps.
        if (x[1] == 0)
            return 0;
        return x[1] == -1 ? sub_w(0, v) : v / x[1];
    case SGK_POW: return ipow(v, x[1]);
    case SGK_EQUAL: return v == x[1];
    case SGK_LESS: return v < x[1];
    case SGK_GREATER: return v > x[1];
    case SGK_AND: return v != 0 && x[1] != 0;
    case SGK_OR: return v != 0 || x[1] != 0;
    case SGK_LESS_EQUAL: return v <= x[1];
    case SGK_GREATER_EQUAL: return v >= x[1];
    case SGK_XOR: return (v != 0) != (x[1] != 0);
    case SGK_SIGN: return v > 0 ? 1 : v < 0 ? -1 : 0;
    case SGK_MOD: {
        // By zero (an error in the reference) 0; by -1 always 0 (C's
        // INT64_MIN % -1 is undefined). fmod 0: the divisor's sign.
        if (x[1] == 0 || x[1] == -1)
            return 0;
        int64_t r = v % x[1];
        return a.alpha == 0 && r != 0 && ((r < 0) != (x[1] < 0)) ? r + x[1] : r;
    }
    case SGK_BIT_SHIFT: {
        // Unsigned operands (uint8, uint16) as int64; the store narrows, so
        // bits shifted past the width are gone; 64 or more gives 0.
        if (x[1] < 0 || x[1] >= 64)
            return 0;
        return a.alpha != 0 ? (int64_t)((uint64_t)v << x[1]) : (int64_t)((uint64_t)v >> x[1]);
    }
    case SGK_PRELU: return v < 0 ? mul_w(v, x[1]) : v;
    case SGK_MIN:
    case SGK_MAX:
    case SGK_SUM:
    case SGK_MEAN: {
        int64_t r = v;
#pragma unroll
        for (int k = 1; k < SGK_MAP_MAX_IN; k++) {
            if (k >= a.n_in)
                break;
            r = a.op == SGK_MIN ? (r < x[k] ? r : x[k]) : a.op == SGK_MAX ? (r > x[k] ? r : x[k]) : add_w(r, x[k]);
        }
        return a.op == SGK_MEAN ? r / a.n_in : r;
    }
    case SGK_WHERE: return v != 0 ? x[1] : x[2];
    case SGK_FMA: return add_w(mul_w(v, x[1]), x[2]);
    default: return v; // SGK_COPY
    }
}

// One output element from its operands' element offsets (off[0] the
// output's). The class and op are uniform across the launch.
__device__ __forceinline__ void map_element(const map_args &a, const int64_t *off)
{
    switch (a.cls) {
    case CLS_RAW: {
        int32_t es = dtype_bytes(a.dtype[0]);
        st_raw(a.data[0], off[0], es, ld_raw(a.data[1], off[1], es));
        break;
    }
    case CLS_F32: {
        float x[SGK_MAP_MAX_IN];
#pragma unroll
        for (int k = 0; k < SGK_MAP_MAX_IN; k++)
            x[k] = k < a.n_in ? ld_f32(a.data[k + 1], off[k + 1], a.dtype[k + 1]) : 0.0f;
        st_f32(a.data[0], off[0], a.dtype[0], apply_act(a, map_fp<float>(a, x)));
        break;
    }
    case CLS_F64: {
        double x[SGK_MAP_MAX_IN];
#pragma unroll
        for (int k = 0; k < SGK_MAP_MAX_IN; k++)
            x[k] = k < a.n_in ? ld_f64(a.data[k + 1], off[k + 1], a.dtype[k + 1]) : 0.0;
        st_f64(a.data[0], off[0], a.dtype[0], apply_act(a, map_fp<double>(a, x)));
        break;
    }
    default: {
        if (int_op(a.op)) {
            int64_t x[SGK_MAP_MAX_IN];
#pragma unroll
            for (int k = 0; k < SGK_MAP_MAX_IN; k++)
                x[k] = k < a.n_in ? ld_i64(a.data[k + 1], off[k + 1], a.dtype[k + 1]) : 0;
            st_i64(a.data[0], off[0], a.dtype[0], map_int(a, x));
        } else {
            double x[SGK_MAP_MAX_IN];
#pragma unroll
            for (int k = 0; k < SGK_MAP_MAX_IN; k++)
                x[k] = k < a.n_in ? ld_f64(a.data[k + 1], off[k + 1], a.dtype[k + 1]) : 0.0;
            st_f64(a.data[0], off[0], a.dtype[0], map_fp<double>(a, x));
        }
        break;
    }
    }
}

// Kernels -----------------------------------------------------------------

// Rank 0 or 1 after simplification: operand k's element i is at
// i * strides[k][0] (0 for a broadcast scalar).
__global__ void map_linear_kernel(const map_args a)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {
        int64_t off[MAP_OPERANDS];
#pragma unroll
        for (int k = 0; k < MAP_OPERANDS; k++)
            off[k] = a.rank ? i * a.strides[k][0] : 0;
        map_element(a, off);
    }
}

// Any rank, fewer than 2^31 elements: coordinates by multiply-shift division.
__global__ void map_nd32_kernel(const map_args a)
{
    uint32_t step = gridDim.x * blockDim.x;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < (uint32_t)a.n; i += step) {
        int64_t off[MAP_OPERANDS];
#pragma unroll
        for (int k = 0; k < MAP_OPERANDS; k++)
            off[k] = 0;
        uint32_t rest = i;
        for (int d = a.rank - 1; d >= 0; d--) {
            uint32_t q = d ? fastdiv_div(rest, a.div[d]) : 0;
            int64_t c = d ? (int64_t)(rest - q * a.div[d].d) : (int64_t)rest;
            rest = q;
#pragma unroll
            for (int k = 0; k < MAP_OPERANDS; k++)
                if (k <= a.n_in)
                    off[k] += c * a.strides[k][d];
        }
        map_element(a, off);
    }
}

// Any rank and size: 64-bit division (tensors of 2^31 elements and more).
__global__ void map_nd64_kernel(const map_args a)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {
        int64_t off[MAP_OPERANDS];
#pragma unroll
        for (int k = 0; k < MAP_OPERANDS; k++)
            off[k] = 0;
        int64_t rest = i;
        for (int d = a.rank - 1; d >= 0; d--) {
            int64_t c = rest % a.dims[d];
            rest /= a.dims[d];
#pragma unroll
            for (int k = 0; k < MAP_OPERANDS; k++)
                if (k <= a.n_in)
                    off[k] += c * a.strides[k][d];
        }
        map_element(a, off);
    }
}

// Four consecutive float-dtype elements with one 8- or 16-byte access.
__device__ __forceinline__ void ld4(const void *p, int64_t q, int32_t dt, float *v)
{
    if (dt == SEGRT_DTYPE_FLOAT32) {
        float4 f = ((const float4 *)p)[q];
        v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
        return;
    }
    uint2 u = ((const uint2 *)p)[q];
    unsigned short h[4] = {(unsigned short)(u.x & 0xffff), (unsigned short)(u.x >> 16),
                           (unsigned short)(u.y & 0xffff), (unsigned short)(u.y >> 16)};
#pragma unroll
    for (int j = 0; j < 4; j++)
        v[j] = dt == SEGRT_DTYPE_FLOAT16 ? __half2float(__ushort_as_half(h[j]))
                                         : __bfloat162float(__ushort_as_bfloat16(h[j]));
}

__device__ __forceinline__ void st4(void *p, int64_t q, int32_t dt, const float *v)
{
    if (dt == SEGRT_DTYPE_FLOAT32) {
        ((float4 *)p)[q] = make_float4(v[0], v[1], v[2], v[3]);
        return;
    }
    unsigned short h[4];
#pragma unroll
    for (int j = 0; j < 4; j++)
        h[j] = dt == SEGRT_DTYPE_FLOAT16 ? __half_as_ushort(__float2half_rn(v[j]))
                                         : __bfloat16_as_ushort(__float2bfloat16_rn(v[j]));
    ((uint2 *)p)[q] = make_uint2((uint32_t)h[0] | ((uint32_t)h[1] << 16),
                                 (uint32_t)h[2] | ((uint32_t)h[3] << 16));
}

// Four consecutive elements per thread, one 8- or 16-byte access per
// operand, float dtypes in float32 math. The space is [rows, cols] (one
// row at rank 1; cols % 4 == 0 at rank 2); along cols each input is
// contiguous or broadcast (stride 0: one scalar load), and rows start at
// 4-element boundaries. That covers residual adds, scalar and per-channel
// ops on channels-last tensors, gates, casts and a concatenation's copies
// at full memory speed. At rank 1 the last n % 4 elements go through
// map_element.
__global__ void map_vec4_kernel(const map_args a, int64_t nq, fastdiv qcols)
{
    const bool two = a.rank == 2;
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < nq; q += step) {
        int64_t row = 0, col = q * 4;
        if (two) {
            uint32_t rq = fastdiv_div((uint32_t)q, qcols);
            row = rq;
            col = ((int64_t)q - (int64_t)rq * qcols.d) * 4;
        }
        float x[SGK_MAP_MAX_IN][4];
#pragma unroll
        for (int k = 0; k < SGK_MAP_MAX_IN; k++) {
            if (k >= a.n_in)
                break;
            int64_t base = two ? row * a.strides[k + 1][0] : 0;
            if (a.strides[k + 1][a.rank - 1] == 0) {
                float v = ld_f32(a.data[k + 1], base, a.dtype[k + 1]);
                x[k][0] = x[k][1] = x[k][2] = x[k][3] = v;
            } else {
                ld4(a.data[k + 1], (base + col) / 4, a.dtype[k + 1], x[k]);
            }
        }
        float r[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float xj[SGK_MAP_MAX_IN];
#pragma unroll
            for (int k = 0; k < SGK_MAP_MAX_IN; k++)
                xj[k] = k < a.n_in ? x[k][j] : 0.0f;
            r[j] = apply_act(a, map_fp<float>(a, xj));
        }
        st4(a.data[0], ((two ? row * a.strides[0][0] : 0) + col) / 4, a.dtype[0], r);
    }
    int64_t tail = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (!two && tail < a.n - nq * 4) {
        int64_t off[MAP_OPERANDS];
#pragma unroll
        for (int k = 0; k < MAP_OPERANDS; k++)
            off[k] = (nq * 4 + tail) * a.strides[k][0];
        map_element(a, off);
    }
}

// One-input maps where the input is contiguous along dim X and the output
// along dim Y (dims [B, X, Y] after simplification): a 32x32 tile is read
// along X and written along Y through shared memory, so both sides are
// coalesced. Covers NCHW <-> NHWC conversions of every size.
#define TILE 32
#define TILE_ROWS 8
__global__ void map_transpose_kernel(const map_args a, int64_t B, int64_t X, int64_t Y, int64_t ob,
                                     int64_t ox, int64_t ib, int64_t iy)
{
    // Raw bits or float32 values; +1 column avoids bank conflicts.
    __shared__ uint64_t tile[TILE][TILE + 1];
    int64_t xt = (X + TILE - 1) / TILE, yt = (Y + TILE - 1) / TILE;
    int32_t es = dtype_bytes(a.dtype[0]);
    for (int64_t b = blockIdx.z; b < B; b += gridDim.z)
        for (int64_t ty = blockIdx.y; ty < yt; ty += gridDim.y)
            for (int64_t tx = blockIdx.x; tx < xt; tx += gridDim.x) {
                int64_t x0 = tx * TILE, y0 = ty * TILE;
                // Read: threadIdx.x runs along X, the input's contiguous dim.
                int64_t x = x0 + threadIdx.x;
                for (int j = threadIdx.y; j < TILE; j += TILE_ROWS) {
                    int64_t y = y0 + j;
                    if (x < X && y < Y) {
                        int64_t o = b * ib + x + y * iy;
                        tile[j][threadIdx.x] =
                            a.cls == CLS_RAW ? ld_raw(a.data[1], o, es)
                                             : (uint64_t)__float_as_uint(ld_f32(a.data[1], o, a.dtype[1]));
                    }
                }
                __syncthreads();
                // Write: threadIdx.x runs along Y, the output's contiguous dim.
                int64_t y = y0 + threadIdx.x;
                for (int j = threadIdx.y; j < TILE; j += TILE_ROWS) {
                    int64_t xw = x0 + j;
                    if (xw < X && y < Y) {
                        int64_t o = b * ob + xw * ox + y;
                        uint64_t v = tile[threadIdx.x][j];
                        if (a.cls == CLS_RAW) {
                            st_raw(a.data[0], o, es, v);
                        } else {
                            float f = __uint_as_float((uint32_t)v);
                            st_f32(a.data[0], o, a.dtype[0], apply_act(a, map_fp<float>(a, &f)));
                        }
                    }
                }
                __syncthreads();
            }
}

// Fast paths ----------------------------------------------------------------
//
// What the networks spend their elementwise time on: per-channel bias and
// PReLU slopes, residual adds, activations and the copies of a Concat, on
// channels-last activations. After simplification these are [D0, D1, cols]
// spaces (cols: the channels, or everything at rank 1) where the output and
// every input run contiguously along cols, or an input holds one value per
// row (stride 0 along cols). The fast kernels take 16 bytes of the output
// per thread (V = 8 float16/bfloat16 or 4 float32 elements), the operator
// and the output's dtype fixed at compile time, so the hot loop carries
// neither the other operators' code nor their registers; inputs may have
// any float dtype (a float32 bias of a float16 convolution). The math is
// map_fp_op's, element by element, as in the general kernels.

#define FAST_MAX_IN 4
#define FAST_ANY (-1) // the operator read at run time (those not specialised)

struct fast_args {
    int32_t op, act, n_in;
    float alpha, beta, act_alpha;
    uint32_t nv;      // vectors of V elements
    uint32_t total;   // nv plus, at rank 1, the n % V elements left over
    fastdiv cols_v;   // vectors per row
    fastdiv d1;       // rows per step of dim 0
    void *data[FAST_MAX_IN + 1];
    int32_t dtype[FAST_MAX_IN + 1];
    int64_t s0[FAST_MAX_IN + 1], s1[FAST_MAX_IN + 1]; // row strides, elements
    int32_t inner[FAST_MAX_IN + 1];                   // stride along cols: 1, or 0 (one value per row)
};

// V consecutive elements of a float dtype, as float32: 16-byte loads for
// float32, one 16- or 8-byte load for 16-bit dtypes. The dtype is uniform
// across the launch, so the branch costs nothing.
template <int V> __device__ __forceinline__ void ldv(const void *p, int32_t dt, int64_t off, float *v)
{
    if (dt == SEGRT_DTYPE_FLOAT32) {
        const float4 *q = (const float4 *)((const float *)p + off);
#pragma unroll
        for (int j = 0; j < V / 4; j++) {
            float4 f = q[j];
            v[4 * j] = f.x, v[4 * j + 1] = f.y, v[4 * j + 2] = f.z, v[4 * j + 3] = f.w;
        }
        return;
    }
    uint32_t w[V / 2];
    const uint16_t *h = (const uint16_t *)p + off;
    if constexpr (V == 8) {
        uint4 u = *(const uint4 *)h;
        w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
    } else {
        uint2 u = *(const uint2 *)h;
        w[0] = u.x, w[1] = u.y;
    }
#pragma unroll
    for (int j = 0; j < V; j++) {
        unsigned short b = (unsigned short)(w[j / 2] >> (16 * (j & 1)));
        v[j] = dt == SEGRT_DTYPE_FLOAT16 ? __half2float(__ushort_as_half(b)) : __bfloat162float(__ushort_as_bfloat16(b));
    }
}

// V float32 values stored as dtype TO: 16 bytes, rounded as st_f32 does.
template <int TO, int V> __device__ __forceinline__ void stv(void *p, int64_t off, const float *v)
{
    static_assert(V == V16<TO>(), "one 16-byte vector of the output");
    *(uint4 *)((char *)p + off * (16 / V)) = vec16_pack<TO>(v);
}

template <int TO, int OP> __global__ void __launch_bounds__(MAP_THREADS) map_fast_kernel(const fast_args a)
{
    constexpr int V = V16<TO>();
    // Inputs the operator can have: fewer registers for the fixed arities.
    constexpr int NIN = OP == FAST_ANY || OP >= SGK_MIN ? FAST_MAX_IN : OP >= SGK_ADD ? 2 : 1;
    const int32_t op = OP == FAST_ANY ? a.op : OP;
    const uint32_t step = gridDim.x * blockDim.x;
    for (uint32_t q = blockIdx.x * blockDim.x + threadIdx.x; q < a.total; q += step) {
        float xj[SGK_MAP_MAX_IN];
#pragma unroll
        for (int k = 0; k < SGK_MAP_MAX_IN; k++)
            xj[k] = 0.0f;
        if (q >= a.nv) {
            // Rank 1, the last n % V elements: element e of every operand
            // (or its only value, for a broadcast scalar).
            int64_t e = (int64_t)a.nv * V + (q - a.nv);
#pragma unroll
            for (int k = 0; k < NIN; k++)
                if (k < a.n_in)
                    xj[k] = ld_f32(a.data[k + 1], a.inner[k + 1] ? e : 0, a.dtype[k + 1]);
            float r = apply_act_op<float>(a.act, a.act_alpha, map_fp_op<float>(op, a.alpha, a.beta, a.n_in, xj));
            st_f32(a.data[0], e, TO, r);
            continue;
        }
        uint32_t row = fastdiv_div(q, a.cols_v);
        int64_t col = (int64_t)(q - row * a.cols_v.d) * V;
        uint32_t r0 = fastdiv_div(row, a.d1);
        uint32_t r1 = row - r0 * a.d1.d;
        float x[FAST_MAX_IN][V];
#pragma unroll
        for (int k = 0; k < NIN; k++) {
            if (k >= a.n_in)
                break;
            int64_t off = (int64_t)r0 * a.s0[k + 1] + (int64_t)r1 * a.s1[k + 1];
            if (a.inner[k + 1]) {
                ldv<V>(a.data[k + 1], a.dtype[k + 1], off + col, x[k]);
            } else {
                float s = ld_f32(a.data[k + 1], off, a.dtype[k + 1]);
#pragma unroll
                for (int j = 0; j < V; j++)
                    x[k][j] = s;
            }
        }
        float r[V];
#pragma unroll
        for (int j = 0; j < V; j++) {
#pragma unroll
            for (int k = 0; k < NIN; k++)
                xj[k] = k < a.n_in ? x[k][j] : 0.0f;
            r[j] = apply_act_op<float>(a.act, a.act_alpha, map_fp_op<float>(op, a.alpha, a.beta, a.n_in, xj));
        }
        stv<TO, V>(a.data[0], (int64_t)r0 * a.s0[0] + (int64_t)r1 * a.s1[0] + col, r);
    }
}

// A COPY between equal dtypes over [D0, D1, cols] with both sides
// contiguous along cols (a Concat's input into its slice of the output,
// a slice out of a wider tensor): rows moved in units of U bytes (16, 8
// or 4), bit for bit.
struct rows_args {
    uint32_t total;  // units
    fastdiv cols_u;  // units per row
    fastdiv d1;
    void *out;
    const void *in;
    int64_t s0[2], s1[2]; // row strides in units: output, input
};

template <typename U> __global__ void __launch_bounds__(MAP_THREADS) copy_rows_kernel(const rows_args c)
{
    const uint32_t step = gridDim.x * blockDim.x;
    for (uint32_t q = blockIdx.x * blockDim.x + threadIdx.x; q < c.total; q += step) {
        uint32_t row = fastdiv_div(q, c.cols_u);
        int64_t col = (int64_t)(q - row * c.cols_u.d);
        uint32_t r0 = fastdiv_div(row, c.d1);
        uint32_t r1 = row - r0 * c.d1.d;
        ((U *)c.out)[(int64_t)r0 * c.s0[0] + (int64_t)r1 * c.s1[0] + col] =
            ((const U *)c.in)[(int64_t)r0 * c.s0[1] + (int64_t)r1 * c.s1[1] + col];
    }
}

// Host side ---------------------------------------------------------------

int32_t op_arity(sgk_map_op op, int32_t n_in)
{
    if (op < SGK_ADD)
        return 1;
    if (op <= SGK_PRELU)
        return 2;
    if (op <= SGK_MEAN)
        return n_in >= 1 && n_in <= SGK_MAP_MAX_IN ? n_in : -1;
    return 3;
}

int32_t pick_class(const sgk_map_params *p, const sgk_view *out, int32_t n_in, const sgk_view *in)
{
    if (p->op == SGK_COPY && in[0].dtype == out->dtype && p->act == SGK_ACT_NONE)
        return CLS_RAW;
    bool f64 = out->dtype == SEGRT_DTYPE_FLOAT64, fl = false;
    for (int32_t k = 0; k < n_in; k++) {
        f64 |= in[k].dtype == SEGRT_DTYPE_FLOAT64;
        fl |= is_float(in[k].dtype);
    }
    return f64 ? CLS_F64 : fl ? CLS_F32 : CLS_I64;
}

unsigned blocks_for(int64_t work)
{
    int64_t b = (work + MAP_THREADS - 1) / MAP_THREADS;
    return (unsigned)(b < 1 ? 1 : b > MAP_MAX_BLOCKS ? MAP_MAX_BLOCKS : b);
}

int64_t abs64(int64_t v) { return v < 0 ? -v : v; }

// Drops size-1 dims, orders the rest by the output's stride (largest
// first) and merges dims contiguous in every operand. Fills a's rank,
// dims and strides.
void simplify(map_args *a, int32_t n_ops, const sgk_view *const *ops)
{
    int32_t rank = 0;
    int32_t order[SGK_MAX_RANK];
    const sgk_view *out = ops[0];
    for (int32_t d = 0; d < out->rank; d++)
        if (out->dims[d] != 1)
            order[rank++] = d;
    // Insertion sort, stable: equal output strides keep the logical order.
    for (int32_t i = 1; i < rank; i++) {
        int32_t d = order[i], j = i;
        while (j > 0 && abs64(out->strides[order[j - 1]]) < abs64(out->strides[d])) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = d;
    }
    int32_t r = 0;
    for (int32_t i = 0; i < rank; i++) {
        int32_t d = order[i];
        bool merge = r > 0;
        for (int32_t k = 0; merge && k < n_ops; k++)
            merge = a->strides[k][r - 1] == ops[k]->strides[d] * ops[k]->dims[d];
        if (merge) {
            a->dims[r - 1] *= out->dims[d];
            for (int32_t k = 0; k < n_ops; k++)
                a->strides[k][r - 1] = ops[k]->strides[d];
        } else {
            a->dims[r] = out->dims[d];
            for (int32_t k = 0; k < n_ops; k++)
                a->strides[k][r] = ops[k]->strides[d];
            r++;
        }
    }
    a->rank = r;
}

bool aligned(const void *p, size_t bytes) { return ((uintptr_t)p % bytes) == 0; }

bool vec_dtype(int32_t dt)
{
    return dt == SEGRT_DTYPE_FLOAT32 || dt == SEGRT_DTYPE_FLOAT16 || dt == SEGRT_DTYPE_BFLOAT16;
}

// The vectorized path (see map_vec4_kernel) where its conditions hold. A
// COPY between equal float dtypes runs there as a float32 map: the values
// convert exactly.
bool try_vec(cudaStream_t stream, const map_args *in, segrt_status *st)
{
    map_args a = *in;
    if (a.cls == CLS_RAW && vec_dtype(a.dtype[0]))
        a.cls = CLS_F32;
    if (a.cls != CLS_F32 || a.rank < 1 || a.rank > 2 || a.n < 4)
        return false;
    int32_t r = a.rank;
    int64_t cols = a.dims[r - 1];
    if (r == 2 && (cols % 4 != 0 || a.n / 4 > (int64_t)INT32_MAX))
        return false;
    for (int32_t k = 0; k <= a.n_in; k++) {
        int64_t inner = a.strides[k][r - 1];
        if (!vec_dtype(a.dtype[k]))
            return false;
        if (inner == 0 && k > 0)
            continue;
        if (inner != 1 || !aligned(a.data[k], 4 * (size_t)dtype_bytes(a.dtype[k])) ||
            (r == 2 && a.strides[k][0] % 4 != 0))
            return false;
    }
    fastdiv qcols = fastdiv_make(r == 2 ? (uint32_t)(cols / 4) : 1);
    map_vec4_kernel<<<blocks_for(a.n / 4), MAP_THREADS, 0, stream>>>(a, a.n / 4, qcols);
    *st = launched("sgk_map (vec4)");
    return true;
}

// The tiled path applies to one-input maps of rank 2 or 3 after
// simplification whose output is contiguous along the last dim and whose
// input is contiguous along the one before (and not along the last).
bool try_transpose(cudaStream_t stream, const map_args *a, segrt_status *st)
{
    if (a->n_in != 1 || (a->cls != CLS_RAW && a->cls != CLS_F32) || a->rank < 2 || a->rank > 3)
        return false;
    int32_t r = a->rank;
    if (a->strides[0][r - 1] != 1 || a->strides[1][r - 2] != 1 || a->strides[1][r - 1] == 1)
        return false;
    int64_t X = a->dims[r - 2], Y = a->dims[r - 1], B = r == 3 ? a->dims[0] : 1;
    // Thin transposes gain nothing from tiles that are mostly empty.
    if (X < 8 || Y < 8)
        return false;
    int64_t ob = r == 3 ? a->strides[0][0] : 0, ib = r == 3 ? a->strides[1][0] : 0;
    int64_t xt = (X + TILE - 1) / TILE, yt = (Y + TILE - 1) / TILE;
    dim3 grid((unsigned)(xt < (1 << 30) ? xt : (1 << 30)), (unsigned)(yt < 65535 ? yt : 65535),
              (unsigned)(B < 65535 ? B : 65535));
    map_transpose_kernel<<<grid, dim3(TILE, TILE_ROWS), 0, stream>>>(*a, B, X, Y, ob, a->strides[0][r - 2], ib,
                                                                   a->strides[1][r - 1]);
    *st = launched("sgk_map (transpose)");
    return true;
}

// The simplified space as [D0, D1, cols]: rank 1 to 3, dims outermost first.
struct space3 {
    int64_t d0, d1, cols;
};

space3 space_of(const map_args *a)
{
    int32_t r = a->rank;
    space3 s = {r == 3 ? a->dims[0] : 1, r >= 2 ? a->dims[r - 2] : 1, a->dims[r - 1]};
    return s;
}

// Operand k's strides along D0 and D1 (0 where the rank lacks the dim).
int64_t stride_d0(const map_args *a, int32_t k) { return a->rank == 3 ? a->strides[k][0] : 0; }
int64_t stride_d1(const map_args *a, int32_t k) { return a->rank >= 2 ? a->strides[k][a->rank - 2] : 0; }

// A same-dtype COPY whose two sides are contiguous along the last dim
// (see copy_rows_kernel), in the widest unit that rows, strides and both
// base addresses allow.
bool try_copy_rows(cudaStream_t stream, const map_args *a, segrt_status *st)
{
    if (a->cls != CLS_RAW || a->n_in != 1 || a->rank < 2 || a->rank > 3)
        return false;
    int32_t r = a->rank;
    if (a->strides[0][r - 1] != 1 || a->strides[1][r - 1] != 1)
        return false;
    space3 sp = space_of(a);
    int64_t es = dtype_bytes(a->dtype[0]);
    int64_t unit = 16;
    for (; unit >= 4; unit /= 2) {
        bool ok = (sp.cols * es) % unit == 0;
        for (int32_t k = 0; ok && k < 2; k++)
            ok = (stride_d0(a, k) * es) % unit == 0 && (stride_d1(a, k) * es) % unit == 0 &&
                 aligned(a->data[k], (size_t)unit);
        if (ok)
            break;
    }
    if (unit < 4 || unit < es || a->n * es / unit > (int64_t)INT32_MAX)
        return false;
    int64_t per = unit / es; // elements per unit
    rows_args c;
    memset(&c, 0, sizeof c);
    c.total = (uint32_t)(a->n / per);
    c.cols_u = fastdiv_make((uint32_t)(sp.cols / per));
    c.d1 = fastdiv_make((uint32_t)sp.d1);
    c.out = a->data[0];
    c.in = a->data[1];
    for (int32_t k = 0; k < 2; k++) {
        c.s0[k] = stride_d0(a, k) / per;
        c.s1[k] = stride_d1(a, k) / per;
    }
    unsigned blocks = blocks_for(c.total);
    if (unit == 16)
        copy_rows_kernel<uint4><<<blocks, MAP_THREADS, 0, stream>>>(c);
    else if (unit == 8)
        copy_rows_kernel<uint2><<<blocks, MAP_THREADS, 0, stream>>>(c);
    else
        copy_rows_kernel<uint32_t><<<blocks, MAP_THREADS, 0, stream>>>(c);
    *st = launched("sgk_map (copy rows)");
    return true;
}

typedef void (*fast_kernel)(const fast_args);

// The operators with a kernel of their own: the ones networks run on whole
// activations. Any other float map takes the FAST_ANY instance.
template <int TO> fast_kernel fast_kernel_for(int32_t op)
{
    switch (op) {
    case SGK_COPY: return map_fast_kernel<TO, SGK_COPY>;
    case SGK_RELU: return map_fast_kernel<TO, SGK_RELU>;
    case SGK_LEAKY_RELU: return map_fast_kernel<TO, SGK_LEAKY_RELU>;
    case SGK_SIGMOID: return map_fast_kernel<TO, SGK_SIGMOID>;
    case SGK_CLIP: return map_fast_kernel<TO, SGK_CLIP>;
    case SGK_AFFINE: return map_fast_kernel<TO, SGK_AFFINE>;
    case SGK_ADD: return map_fast_kernel<TO, SGK_ADD>;
    case SGK_SUB: return map_fast_kernel<TO, SGK_SUB>;
    case SGK_MUL: return map_fast_kernel<TO, SGK_MUL>;
    case SGK_DIV: return map_fast_kernel<TO, SGK_DIV>;
    case SGK_PRELU: return map_fast_kernel<TO, SGK_PRELU>;
    case SGK_MAX: return map_fast_kernel<TO, SGK_MAX>;
    case SGK_MIN: return map_fast_kernel<TO, SGK_MIN>;
    case SGK_SUM: return map_fast_kernel<TO, SGK_SUM>;
    default: return map_fast_kernel<TO, FAST_ANY>;
    }
}

// The fast float path (see map_fast_kernel) where its conditions hold:
// float32 math on float dtypes, rank 1 to 3, the output contiguous along
// the last dim, each input contiguous or constant along it, and (except at
// rank 1) rows of whole vectors; operands read by vector need their base
// address and row strides aligned to the vector.
bool try_fast(cudaStream_t stream, const map_args *a, segrt_status *st)
{
    bool f32 = a->cls == CLS_F32 || (a->cls == CLS_RAW && vec_dtype(a->dtype[0]));
    if (!f32 || a->n_in > FAST_MAX_IN || a->rank < 1 || a->rank > 3)
        return false;
    int32_t r = a->rank;
    int32_t eo = dtype_bytes(a->dtype[0]);
    int64_t V = 16 / eo;
    space3 sp = space_of(a);
    if (r >= 2 && sp.cols % V != 0)
        return false;
    fast_args f;
    memset(&f, 0, sizeof f);
    for (int32_t k = 0; k <= a->n_in; k++) {
        int64_t inner = a->strides[k][r - 1];
        if (!vec_dtype(a->dtype[k]) || (inner != 1 && (k == 0 || inner != 0)))
            return false;
        f.data[k] = a->data[k];
        f.dtype[k] = a->dtype[k];
        f.s0[k] = stride_d0(a, k);
        f.s1[k] = stride_d1(a, k);
        f.inner[k] = inner == 1;
        size_t vbytes = (size_t)V * (size_t)dtype_bytes(a->dtype[k]);
        if (inner == 1 && (f.s0[k] % V != 0 || f.s1[k] % V != 0 || !aligned(a->data[k], vbytes < 16 ? vbytes : 16)))
            return false;
    }
    int64_t nv = a->n / V, tail = r == 1 ? a->n % V : 0;
    if (nv + tail > (int64_t)INT32_MAX)
        return false;
    f.op = a->op;
    f.act = a->act;
    f.n_in = a->n_in;
    f.alpha = a->alpha;
    f.beta = a->beta;
    f.act_alpha = a->act_alpha;
    f.nv = (uint32_t)nv;
    f.total = (uint32_t)(nv + tail);
    f.cols_v = fastdiv_make((uint32_t)(r == 1 ? (nv > 0 ? nv : 1) : sp.cols / V));
    f.d1 = fastdiv_make((uint32_t)sp.d1);
    fast_kernel kern;
    switch (a->dtype[0]) {
    case SEGRT_DTYPE_FLOAT16: kern = fast_kernel_for<SEGRT_DTYPE_FLOAT16>(a->op); break;
    case SEGRT_DTYPE_BFLOAT16: kern = fast_kernel_for<SEGRT_DTYPE_BFLOAT16>(a->op); break;
    default: kern = fast_kernel_for<SEGRT_DTYPE_FLOAT32>(a->op); break;
    }
    kern<<<blocks_for(f.total), MAP_THREADS, 0, stream>>>(f);
    *st = launched("sgk_map (fast)");
    return true;
}

} // namespace

extern "C" segrt_status sgk_map(cudaStream_t stream, const sgk_map_params *p, const sgk_view *out,
                                int32_t n_in, const sgk_view *in)
{
    if (!p || !out || (n_in > 0 && !in) || (int32_t)p->op < 0 || p->op >= SGK_MAP_OP_COUNT)
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_map: bad arguments");
    if (op_arity(p->op, n_in) != n_in)
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_map: op %d takes a different number of inputs than %d",
                        (int)p->op, n_in);
    if (out->rank < 0 || out->rank > SGK_MAX_RANK)
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_map: rank %d", out->rank);
    int64_t n = 1;
    for (int32_t d = 0; d < out->rank; d++)
        n *= out->dims[d];
    for (int32_t k = 0; k < n_in; k++) {
        bool ok = in[k].rank == out->rank && dtype_bytes(in[k].dtype) != 0;
        for (int32_t d = 0; ok && d < out->rank; d++)
            ok = in[k].dims[d] == out->dims[d];
        if (!ok)
            return sg_error(SEGRT_ERROR_INTERNAL, "sgk_map: input %d does not match the output's dims", k);
    }
    if (dtype_bytes(out->dtype) == 0)
        return sg_error(SEGRT_ERROR_INTERNAL, "sgk_map: output dtype %d", (int)out->dtype);
    if (n == 0)
        return SEGRT_OK;

    map_args a;
    memset(&a, 0, sizeof a);
    a.op = p->op;
    a.act = p->act;
    a.alpha = p->alpha;
    a.beta = p->beta;
    a.act_alpha = p->act_alpha;
    a.n_in = n_in;
    a.n = n;
    a.cls = pick_class(p, out, n_in, in);
    a.data[0] = out->data;
    a.dtype[0] = out->dtype;
    const sgk_view *ops[MAP_OPERANDS];
    ops[0] = out;
    for (int32_t k = 0; k < n_in; k++) {
        a.data[k + 1] = in[k].data;
        a.dtype[k + 1] = in[k].dtype;
        ops[k + 1] = &in[k];
    }
    simplify(&a, n_in + 1, ops);

    bool contiguous = a.rank <= 1;
    for (int32_t k = 0; contiguous && a.rank == 1 && k <= n_in; k++)
        contiguous = a.strides[k][0] == 1;

    if (contiguous && a.cls == CLS_RAW) {
        cudaError_t e = cudaMemcpyAsync(out->data, in[0].data, (size_t)n * dtype_bytes(out->dtype),
                                        cudaMemcpyDeviceToDevice, stream);
        if (e != cudaSuccess)
            return sg_error(SEGRT_ERROR_DEVICE, "sgk_map (copy): %s", cudaGetErrorString(e));
        return SEGRT_OK;
    }
    segrt_status st;
    if (try_copy_rows(stream, &a, &st) || try_fast(stream, &a, &st) || try_vec(stream, &a, &st))
        return st;
    if (a.rank <= 1) {
        map_linear_kernel<<<blocks_for(n), MAP_THREADS, 0, stream>>>(a);
        return launched("sgk_map (linear)");
    }
    if (try_transpose(stream, &a, &st))
        return st;
    // 32-bit indices while i + grid stride cannot wrap.
    if (n <= (int64_t)INT32_MAX) {
        for (int32_t d = 0; d < a.rank; d++)
            a.div[d] = fastdiv_make((uint32_t)a.dims[d]);
        map_nd32_kernel<<<blocks_for(n), MAP_THREADS, 0, stream>>>(a);
        return launched("sgk_map");
    }
    map_nd64_kernel<<<blocks_for(n), MAP_THREADS, 0, stream>>>(a);
    return launched("sgk_map (64-bit)");
}
