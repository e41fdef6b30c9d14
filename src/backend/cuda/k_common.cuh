// What segrt's CUDA kernels (k_*.cu) share: element loads and stores with
// ONNX Cast's conversion rules, division by a runtime constant as a
// multiply, dim lists that several views walk together, and the launch
// check. Each .cu file is its own translation unit (no relocatable device
// code), so the device functions here are inlined into each; host
// functions are static inline.
#ifndef SG_BACKEND_CUDA_K_COMMON_CUH
#define SG_BACKEND_CUDA_K_COMMON_CUH

#include "backend/cuda/cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <limits.h>
#include <stdint.h>

// core/status.h is a C header without extern "C"; declare the recorder here.
extern "C" segrt_status sg_error(segrt_status status, const char *fmt, ...);

typedef long long ll;

// Dtypes --------------------------------------------------------------------------

__host__ __device__ __forceinline__ int32_t dtype_bytes(int32_t dt)
{
    switch (dt) {
    case SEGRT_DTYPE_FLOAT64:
    case SEGRT_DTYPE_INT64: return 8;
    case SEGRT_DTYPE_FLOAT32:
    case SEGRT_DTYPE_INT32: return 4;
    case SEGRT_DTYPE_FLOAT16:
    case SEGRT_DTYPE_BFLOAT16:
    case SEGRT_DTYPE_INT16:
    case SEGRT_DTYPE_UINT16: return 2;
    case SEGRT_DTYPE_INT8:
    case SEGRT_DTYPE_UINT8:
    case SEGRT_DTYPE_BOOL: return 1;
    default: return 0;
    }
}

__host__ __device__ __forceinline__ bool is_float(int32_t dt)
{
    return dt == SEGRT_DTYPE_FLOAT32 || dt == SEGRT_DTYPE_FLOAT16 || dt == SEGRT_DTYPE_BFLOAT16 ||
           dt == SEGRT_DTYPE_FLOAT64;
}

// Element loads and stores ------------------------------------------------------

__device__ __forceinline__ int64_t f2i(double v)
{
    // ONNX Cast: NaN gives 0; out-of-range values saturate to int64 first.
    if (!(v == v))
        return 0;
    if (v >= 9.2233720368547758e18)
        return INT64_MAX;
    if (v <= -9.2233720368547758e18)
        return INT64_MIN;
    return (int64_t)v;
}

__device__ __forceinline__ float ld_f32(const void *p, int64_t i, int32_t dt)
{
    switch (dt) {
    case SEGRT_DTYPE_FLOAT32: return ((const float *)p)[i];
    case SEGRT_DTYPE_FLOAT16: return __half2float(((const __half *)p)[i]);
    case SEGRT_DTYPE_BFLOAT16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case SEGRT_DTYPE_FLOAT64: return (float)((const double *)p)[i];
    case SEGRT_DTYPE_INT64: return (float)((const int64_t *)p)[i];
    case SEGRT_DTYPE_INT32: return (float)((const int32_t *)p)[i];
    case SEGRT_DTYPE_INT16: return (float)((const int16_t *)p)[i];
    case SEGRT_DTYPE_UINT16: return (float)((const uint16_t *)p)[i];
    case SEGRT_DTYPE_INT8: return (float)((const int8_t *)p)[i];
    case SEGRT_DTYPE_UINT8: return (float)((const uint8_t *)p)[i];
    case SEGRT_DTYPE_BOOL: return ((const uint8_t *)p)[i] != 0 ? 1.0f : 0.0f;
    default: return 0.0f;
    }
}

__device__ __forceinline__ double ld_f64(const void *p, int64_t i, int32_t dt)
{
    switch (dt) {
    case SEGRT_DTYPE_FLOAT64: return ((const double *)p)[i];
    case SEGRT_DTYPE_INT64: return (double)((const int64_t *)p)[i];
    case SEGRT_DTYPE_INT32: return (double)((const int32_t *)p)[i];
    default: return (double)ld_f32(p, i, dt); // exact for every other dtype
    }
}

__device__ __forceinline__ int64_t ld_i64(const void *p, int64_t i, int32_t dt)
{
    switch (dt) {
    case SEGRT_DTYPE_INT64: return ((const int64_t *)p)[i];
    case SEGRT_DTYPE_INT32: return ((const int32_t *)p)[i];
    case SEGRT_DTYPE_INT16: return ((const int16_t *)p)[i];
    case SEGRT_DTYPE_UINT16: return ((const uint16_t *)p)[i];
    case SEGRT_DTYPE_INT8: return ((const int8_t *)p)[i];
    case SEGRT_DTYPE_UINT8: return ((const uint8_t *)p)[i];
    case SEGRT_DTYPE_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: {
        // A float read as an integer, as the reference's loader does it
        // (NaN reads as INT64_MIN there, unlike a Cast's store).
        double v = ld_f64(p, i, dt);
        if (!(v == v))
            return INT64_MIN;
        return f2i(v);
    }
    }
}

__device__ __forceinline__ void st_int(void *p, int64_t i, int32_t dt, int64_t v)
{
    // Narrowing wraps, as the reference's fixed-width store does.
    switch (dt) {
    case SEGRT_DTYPE_INT64: ((int64_t *)p)[i] = v; break;
    case SEGRT_DTYPE_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case SEGRT_DTYPE_INT16: ((int16_t *)p)[i] = (int16_t)v; break;
    case SEGRT_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case SEGRT_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case SEGRT_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case SEGRT_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: break;
    }
}

__device__ __forceinline__ void st_f32(void *p, int64_t i, int32_t dt, float v)
{
    switch (dt) {
    case SEGRT_DTYPE_FLOAT32: ((float *)p)[i] = v; break;
    case SEGRT_DTYPE_FLOAT16: ((__half *)p)[i] = __float2half_rn(v); break;
    case SEGRT_DTYPE_BFLOAT16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
    case SEGRT_DTYPE_FLOAT64: ((double *)p)[i] = (double)v; break;
    case SEGRT_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0.0f; break; // NaN is true
    default: st_int(p, i, dt, f2i((double)v)); break;
    }
}

__device__ __forceinline__ void st_f64(void *p, int64_t i, int32_t dt, double v)
{
    switch (dt) {
    case SEGRT_DTYPE_FLOAT64: ((double *)p)[i] = v; break;
    case SEGRT_DTYPE_FLOAT32: ((float *)p)[i] = (float)v; break;
    // Direct conversions: through float would round twice.
    case SEGRT_DTYPE_FLOAT16: ((__half *)p)[i] = __double2half(v); break;
    case SEGRT_DTYPE_BFLOAT16: ((__nv_bfloat16 *)p)[i] = __double2bfloat16(v); break;
    case SEGRT_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0.0; break;
    default: st_int(p, i, dt, f2i(v)); break;
    }
}

__device__ __forceinline__ void st_i64(void *p, int64_t i, int32_t dt, int64_t v)
{
    switch (dt) {
    case SEGRT_DTYPE_FLOAT32: ((float *)p)[i] = (float)v; break; // one rounding, as Cast
    case SEGRT_DTYPE_FLOAT64: ((double *)p)[i] = (double)v; break;
    case SEGRT_DTYPE_FLOAT16: ((__half *)p)[i] = __double2half((double)v); break;
    case SEGRT_DTYPE_BFLOAT16: ((__nv_bfloat16 *)p)[i] = __double2bfloat16((double)v); break;
    default: st_int(p, i, dt, v); break;
    }
}

// The same, typed by the value the kernel computes in (float, double or
// ll), for kernels templated on their accumulator.
template <typename T> __device__ __forceinline__ T ld(const void *p, segrt_dtype dt, ll i);
template <> __device__ __forceinline__ float ld<float>(const void *p, segrt_dtype dt, ll i)
{
    return ld_f32(p, i, dt);
}
template <> __device__ __forceinline__ double ld<double>(const void *p, segrt_dtype dt, ll i)
{
    return ld_f64(p, i, dt);
}
template <> __device__ __forceinline__ ll ld<ll>(const void *p, segrt_dtype dt, ll i)
{
    return (ll)ld_i64(p, i, dt);
}

template <typename T> __device__ __forceinline__ void st(void *p, segrt_dtype dt, ll i, T v);
template <> __device__ __forceinline__ void st<float>(void *p, segrt_dtype dt, ll i, float v)
{
    st_f32(p, i, dt, v);
}
template <> __device__ __forceinline__ void st<double>(void *p, segrt_dtype dt, ll i, double v)
{
    st_f64(p, i, dt, v);
}
template <> __device__ __forceinline__ void st<ll>(void *p, segrt_dtype dt, ll i, ll v)
{
    st_i64(p, i, dt, (int64_t)v);
}

// Loads and stores with the storage dtype fixed when the kernel is
// compiled (float16, bfloat16, float32: the activations), or switched on
// at run time (XT 0): the hot loops then have no branch per element.
template <int XT, typename T>
__device__ __forceinline__ T ldr(const void *p, segrt_dtype dt, ll i)
{
    if (XT == SEGRT_DTYPE_FLOAT16)
        return (T)__half2float(((const __half *)p)[i]);
    if (XT == SEGRT_DTYPE_BFLOAT16)
        return (T)__bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (XT == SEGRT_DTYPE_FLOAT32)
        return (T)((const float *)p)[i];
    return ld<T>(p, dt, i);
}

template <int XT>
__device__ __forceinline__ void stt(void *p, segrt_dtype dt, ll i, float v)
{
    if (XT == SEGRT_DTYPE_FLOAT16)
        ((__half *)p)[i] = __float2half_rn(v);
    else if (XT == SEGRT_DTYPE_BFLOAT16)
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else if (XT == SEGRT_DTYPE_FLOAT32)
        ((float *)p)[i] = v;
    else
        st<float>(p, dt, i, v);
}

// The activation a convolution or normalisation applies before its store.
// ReLU keeps NaN and maps -inf to 0 (not v * 0, which would give NaN), as
// the map kernels do.
// Written as selects, not branches: an epilogue applies it to every
// accumulator, and a branch on the (uniform) kind per value cost the
// tensor-core convolution's epilogue more instructions than the value's
// own work.
__device__ __forceinline__ float act_apply(float v, sgk_act act, float alpha)
{
    const float below = act == SGK_ACT_LEAKY_RELU ? v * alpha : act == SGK_ACT_RELU ? 0.0f : v;
    return v < 0.0f ? below : v;
}

// N consecutive floats at p (shared or global memory), aligned to
// min(16, 4 N) bytes: 16-byte accesses where N allows.
template <int N> __device__ __forceinline__ void ld_floats(const float *p, float *v)
{
    if constexpr (N % 4 == 0) {
#pragma unroll
        for (int j = 0; j < N / 4; j++) {
            float4 t = reinterpret_cast<const float4 *>(p)[j];
            v[4 * j] = t.x;
            v[4 * j + 1] = t.y;
            v[4 * j + 2] = t.z;
            v[4 * j + 3] = t.w;
        }
    } else if constexpr (N % 2 == 0) {
#pragma unroll
        for (int j = 0; j < N / 2; j++) {
            float2 t = reinterpret_cast<const float2 *>(p)[j];
            v[2 * j] = t.x;
            v[2 * j + 1] = t.y;
        }
    } else {
#pragma unroll
        for (int j = 0; j < N; j++)
            v[j] = p[j];
    }
}

// The store of ld_floats: N floats to p, aligned the same way.
template <int N> __device__ __forceinline__ void st_floats(float *p, const float *v)
{
    if constexpr (N % 4 == 0) {
#pragma unroll
        for (int j = 0; j < N / 4; j++)
            reinterpret_cast<float4 *>(p)[j] = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
    } else {
#pragma unroll
        for (int j = 0; j < N; j++)
            p[j] = v[j];
    }
}

// Index arithmetic --------------------------------------------------------------

// Unsigned 32-bit division by a runtime constant as a multiply and a shift
// (Granlund-Montgomery): integer division is tens of instructions on the
// GPU, and index decomposition needs one per dim per element.
struct fastdiv {
    uint32_t d, m, s;
};

static inline fastdiv fastdiv_make(uint32_t d)
{
    fastdiv f;
    f.d = d;
    uint32_t l = 0;
    while (l < 32 && ((uint64_t)1 << l) < d)
        l++;
    f.s = l;
    f.m = (uint32_t)((((uint64_t)1 << l) - d) * ((uint64_t)1 << 32) / d + 1);
    return f;
}

__device__ __forceinline__ uint32_t fastdiv_div(uint32_t x, const fastdiv &f)
{
    return (uint32_t)(((uint64_t)__umulhi(x, f.m) + x) >> f.s);
}

static inline ll ceil_div(ll a, ll b) { return (a + b - 1) / b; }
static inline ll llabs_(ll v) { return v < 0 ? -v : v; }

// Dim lists: up to SGK_MAX_RANK dims, outermost first, each with a size and
// up to NSTR strides (the views that walk it together). Offsets of a linear
// index are found innermost first.
#define NSTR 4

struct dimlist {
    int n;
    ll d[SGK_MAX_RANK];
    ll s[NSTR][SGK_MAX_RANK];
};

__device__ __forceinline__ void dl_offsets(const dimlist &l, int ns, ll idx, ll *off)
{
    for (int j = 0; j < ns; j++)
        off[j] = 0;
    for (int k = l.n - 1; k > 0; k--) {
        ll q = idx / l.d[k], c = idx - q * l.d[k];
        for (int j = 0; j < ns; j++)
            off[j] += c * l.s[j][k];
        idx = q;
    }
    if (l.n > 0)
        for (int j = 0; j < ns; j++)
            off[j] += idx * l.s[j][0];
}

// Orders the list by the first stride's magnitude, largest first (stable),
// then merges neighbours that every stride walks as one dim.
static inline void dl_normalise(dimlist *l, int ns)
{
    for (int i = 1; i < l->n; i++)
        for (int k = i; k > 0 && llabs_(l->s[0][k - 1]) < llabs_(l->s[0][k]); k--) {
            ll t = l->d[k];
            l->d[k] = l->d[k - 1];
            l->d[k - 1] = t;
            for (int j = 0; j < ns; j++) {
                t = l->s[j][k];
                l->s[j][k] = l->s[j][k - 1];
                l->s[j][k - 1] = t;
            }
        }
    int m = 0;
    for (int k = 0; k < l->n; k++) {
        bool merge = m > 0;
        for (int j = 0; merge && j < ns; j++)
            merge = l->s[j][m - 1] == l->s[j][k] * l->d[k];
        if (merge) {
            l->d[m - 1] *= l->d[k];
            for (int j = 0; j < ns; j++)
                l->s[j][m - 1] = l->s[j][k];
            continue;
        }
        l->d[m] = l->d[k];
        for (int j = 0; j < ns; j++)
            l->s[j][m] = l->s[j][k];
        m++;
    }
    l->n = m;
}

static inline ll dl_count(const dimlist *l)
{
    ll c = 1;
    for (int k = 0; k < l->n; k++)
        c *= l->d[k];
    return c;
}

// 16-byte vectors of float dtypes -------------------------------------------------

// Elements of float dtype XT (float16, bfloat16, float32) in 16 bytes.
template <int XT> __host__ __device__ constexpr int V16() { return XT == SEGRT_DTYPE_FLOAT32 ? 4 : 8; }

// The same at run time: 0 for dtypes without a 16-byte vector path.
static inline int vec16_width(int32_t dt)
{
    return dt == SEGRT_DTYPE_FLOAT32 ? 4 : (dt == SEGRT_DTYPE_FLOAT16 || dt == SEGRT_DTYPE_BFLOAT16) ? 8 : 0;
}

static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// Shared memory past 48 KB a block. The most a block may hold differs by
// architecture (7.5: 64 KB, 8.0: 163, 8.6 and 8.9: 99, 9.0: 227, 12.x:
// 99): a kernel's plan takes `limit` bytes (the plan's GPU: its
// sgk_*_params' smem_limit; 0: no limit beyond the kernel's own) less the
// kernel's static shared memory, and its launch opts in to this: the
// kernel's most, or what the current device allows, the same value for
// every launch on a device, so that concurrent launches of one kernel never
// lower it under one another.
static inline size_t smem_cap(size_t most, int32_t limit, size_t static_bytes)
{
    if (limit <= 0)
        return most;
    size_t room = (size_t)limit > static_bytes ? (size_t)limit - static_bytes : 0;
    return room < most ? room : most;
}

static inline int smem_opt_in_bytes(int most, int static_bytes)
{
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess || optin <= 0)
        return most;
    return (int)smem_cap((size_t)most, optin, (size_t)static_bytes);
}

// Whether every position of 16-bit view v starts a run of contiguous
// channels on a 16-byte boundary (16-byte loads of 8 channels): channels
// contiguous, every other stride a multiple of 8, the data aligned (or
// not there yet: a builder asking before memory exists).
static inline bool vec16_positions(const sgk_view *v)
{
    if (v->strides[1] != 1 || (v->data && !aligned16(v->data)))
        return false;
    for (int i = 0; i < v->rank; i++)
        if (i != 1 && v->strides[i] % 8 != 0)
            return false;
    return true;
}

// Whether every element offset within one sample of v (all dims but the
// first) fits in 32 bits, with room to spare: kernels whose per-position
// index arithmetic is 32-bit within a sample ask this.
static inline bool sample_offsets_fit(const sgk_view *v)
{
    ll span = 0;
    for (int i = 1; i < v->rank; i++)
        span += (v->dims[i] - 1) * llabs_(v->strides[i]);
    return span < INT32_MAX / 2;
}

// Whether v's dims beyond the channels, every stride but the channels'
// and its data allow two-channel vectors of its dtype (4 bytes for 16-bit,
// 8 for float32).
static inline bool pair_positions(const sgk_view *v)
{
    if (v->strides[1] != 1 || (v->data && ((uintptr_t)v->data & 7) != 0))
        return false;
    for (int i = 0; i < v->rank; i++)
        if (i != 1 && v->dims[i] > 1 && v->strides[i] % 2 != 0)
            return false;
    return true;
}

// The elements (8 or 4) of a 16-byte vector of dtype XT, as float32.
template <int XT> __device__ __forceinline__ void vec16_unpack(uint4 u, float *v)
{
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
    if constexpr (XT == SEGRT_DTYPE_FLOAT32) {
#pragma unroll
        for (int j = 0; j < 4; j++)
            v[j] = __uint_as_float(w[j]);
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            unsigned short b = (unsigned short)(w[j / 2] >> (16 * (j & 1)));
            v[j] = XT == SEGRT_DTYPE_FLOAT16 ? __half2float(__ushort_as_half(b)) : __bfloat162float(__ushort_as_bfloat16(b));
        }
    }
}

// V16<XT>() values rounded to XT as st_f32 rounds them, packed into 16 bytes.
template <int XT> __device__ __forceinline__ uint4 vec16_pack(const float *v)
{
    uint32_t w[4];
    if constexpr (XT == SEGRT_DTYPE_FLOAT32) {
#pragma unroll
        for (int j = 0; j < 4; j++)
            w[j] = __float_as_uint(v[j]);
    } else {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            unsigned short lo, hi;
            if constexpr (XT == SEGRT_DTYPE_FLOAT16) {
                lo = __half_as_ushort(__float2half_rn(v[2 * j]));
                hi = __half_as_ushort(__float2half_rn(v[2 * j + 1]));
            } else {
                lo = __bfloat16_as_ushort(__float2bfloat16_rn(v[2 * j]));
                hi = __bfloat16_as_ushort(__float2bfloat16_rn(v[2 * j + 1]));
            }
            w[j] = (uint32_t)lo | ((uint32_t)hi << 16);
        }
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// Launches ---------------------------------------------------------------------------

// The launch's error, recorded with the kernel's name.
static inline segrt_status launched(const char *kernel)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return sg_error(SEGRT_ERROR_DEVICE, "%s: %s", kernel, cudaGetErrorString(e));
    return SEGRT_OK;
}

#endif
