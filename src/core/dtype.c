#include "core/dtype.h"

#include <math.h>
#include <string.h>

size_t segrt_dtype_size(segrt_dtype t)
{
    switch (t) {
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
    case SEGRT_DTYPE_UNDEFINED: return 0;
    }
    return 0;
}

const char *segrt_dtype_name(segrt_dtype t)
{
    switch (t) {
    case SEGRT_DTYPE_FLOAT32: return "float32";
    case SEGRT_DTYPE_UINT8: return "uint8";
    case SEGRT_DTYPE_INT8: return "int8";
    case SEGRT_DTYPE_UINT16: return "uint16";
    case SEGRT_DTYPE_INT16: return "int16";
    case SEGRT_DTYPE_INT32: return "int32";
    case SEGRT_DTYPE_INT64: return "int64";
    case SEGRT_DTYPE_BOOL: return "bool";
    case SEGRT_DTYPE_FLOAT16: return "float16";
    case SEGRT_DTYPE_FLOAT64: return "float64";
    case SEGRT_DTYPE_BFLOAT16: return "bfloat16";
    case SEGRT_DTYPE_UNDEFINED: break;
    }
    return "undefined";
}

bool sg_dtype_is_supported(sg_dtype t) { return segrt_dtype_size(t) != 0; }

bool sg_dtype_is_float(sg_dtype t)
{
    return t == SEGRT_DTYPE_FLOAT32 || t == SEGRT_DTYPE_FLOAT16 || t == SEGRT_DTYPE_BFLOAT16 ||
           t == SEGRT_DTYPE_FLOAT64;
}

bool sg_dtype_is_integer(sg_dtype t)
{
    return t == SEGRT_DTYPE_UINT8 || t == SEGRT_DTYPE_INT8 || t == SEGRT_DTYPE_UINT16 ||
           t == SEGRT_DTYPE_INT16 || t == SEGRT_DTYPE_INT32 || t == SEGRT_DTYPE_INT64;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float sg_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f)
        return bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        /* Zero or subnormal: man * 2^-24, exact in float. */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t sg_float_to_half(float f)
{
    /* Round to nearest even, as IEEE conversion does. */
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t abs = u & 0x7fffffffu;
    if (abs >= 0x7f800000u) /* inf or nan */
        return sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0);
    if (abs >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return sign | 0x7c00;
    if (abs < 0x38800000u) { /* below the smallest normal half: subnormal */
        float v = bits_f32(abs) * 16777216.0f; /* scale by 2^24: units of the subnormal step */
        uint32_t m = (uint32_t)lrintf(v);      /* round-half-even in the current mode */
        return sign | (uint16_t)m;
    }
    uint32_t mant_odd = (abs >> 13) & 1;
    abs += 0xfff + mant_odd;
    return sign | (uint16_t)((abs - 0x38000000u) >> 13);
}

float sg_bf16_to_float(uint16_t b) { return bits_f32((uint32_t)b << 16); }

uint16_t sg_float_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* quiet nan */
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

double sg_dtype_load_f64(sg_dtype t, const void *data, int64_t i)
{
    switch (t) {
    case SEGRT_DTYPE_FLOAT32: return ((const float *)data)[i];
    case SEGRT_DTYPE_FLOAT64: return ((const double *)data)[i];
    case SEGRT_DTYPE_FLOAT16: return sg_half_to_float(((const uint16_t *)data)[i]);
    case SEGRT_DTYPE_BFLOAT16: return sg_bf16_to_float(((const uint16_t *)data)[i]);
    case SEGRT_DTYPE_INT64: return (double)((const int64_t *)data)[i];
    case SEGRT_DTYPE_INT32: return ((const int32_t *)data)[i];
    case SEGRT_DTYPE_INT16: return ((const int16_t *)data)[i];
    case SEGRT_DTYPE_UINT16: return ((const uint16_t *)data)[i];
    case SEGRT_DTYPE_INT8: return ((const int8_t *)data)[i];
    case SEGRT_DTYPE_UINT8: return ((const uint8_t *)data)[i];
    case SEGRT_DTYPE_BOOL: return ((const uint8_t *)data)[i] != 0;
    case SEGRT_DTYPE_UNDEFINED: break;
    }
    return 0;
}

int64_t sg_dtype_load_i64(sg_dtype t, const void *data, int64_t i)
{
    switch (t) {
    case SEGRT_DTYPE_INT64: return ((const int64_t *)data)[i];
    case SEGRT_DTYPE_INT32: return ((const int32_t *)data)[i];
    case SEGRT_DTYPE_INT16: return ((const int16_t *)data)[i];
    case SEGRT_DTYPE_UINT16: return ((const uint16_t *)data)[i];
    case SEGRT_DTYPE_INT8: return ((const int8_t *)data)[i];
    case SEGRT_DTYPE_UINT8: return ((const uint8_t *)data)[i];
    case SEGRT_DTYPE_BOOL: return ((const uint8_t *)data)[i] != 0;
    default: {
        double v = sg_dtype_load_f64(t, data, i);
        if (!(v == v))
            return INT64_MIN; /* nan: what x86 conversion gives */
        if (v >= 9.2233720368547758e18)
            return INT64_MAX;
        if (v <= -9.2233720368547758e18)
            return INT64_MIN;
        return (int64_t)v;
    }
    }
}

void sg_dtype_store_f64(sg_dtype t, void *data, int64_t i, double v)
{
    switch (t) {
    case SEGRT_DTYPE_FLOAT32: ((float *)data)[i] = (float)v; return;
    case SEGRT_DTYPE_FLOAT64: ((double *)data)[i] = v; return;
    case SEGRT_DTYPE_FLOAT16: ((uint16_t *)data)[i] = sg_float_to_half((float)v); return;
    case SEGRT_DTYPE_BFLOAT16: ((uint16_t *)data)[i] = sg_float_to_bf16((float)v); return;
    case SEGRT_DTYPE_BOOL: ((uint8_t *)data)[i] = v != 0; return;
    default: {
        int64_t x;
        if (!(v == v))
            x = 0;
        else if (v >= 9.2233720368547758e18)
            x = INT64_MAX;
        else if (v <= -9.2233720368547758e18)
            x = INT64_MIN;
        else
            x = (int64_t)v;
        sg_dtype_store_i64(t, data, i, x);
        return;
    }
    }
}

void sg_dtype_store_i64(sg_dtype t, void *data, int64_t i, int64_t v)
{
    switch (t) {
    case SEGRT_DTYPE_INT64: ((int64_t *)data)[i] = v; return;
    case SEGRT_DTYPE_INT32: ((int32_t *)data)[i] = (int32_t)v; return;
    case SEGRT_DTYPE_INT16: ((int16_t *)data)[i] = (int16_t)v; return;
    case SEGRT_DTYPE_UINT16: ((uint16_t *)data)[i] = (uint16_t)v; return;
    case SEGRT_DTYPE_INT8: ((int8_t *)data)[i] = (int8_t)v; return;
    case SEGRT_DTYPE_UINT8: ((uint8_t *)data)[i] = (uint8_t)v; return;
    case SEGRT_DTYPE_BOOL: ((uint8_t *)data)[i] = v != 0; return;
    default: sg_dtype_store_f64(t, data, i, (double)v); return;
    }
}

void sg_dtype_to_f32(sg_dtype t, const void *src, float *dst, int64_t n)
{
    /* Each of these converts exactly to double, so one rounding to float
     * is what load_f64's double then float gives. */
#define SG_TO_F32(T)                                                                                                   \
    do {                                                                                                               \
        const T *s_ = src;                                                                                             \
        for (int64_t i = 0; i < n; i++)                                                                                \
            dst[i] = (float)s_[i];                                                                                     \
    } while (0)
    switch (t) {
    case SEGRT_DTYPE_FLOAT32: memcpy(dst, src, sizeof(float) * (size_t)n); return;
    case SEGRT_DTYPE_FLOAT64: SG_TO_F32(double); return;
    case SEGRT_DTYPE_INT32: SG_TO_F32(int32_t); return;
    case SEGRT_DTYPE_INT16: SG_TO_F32(int16_t); return;
    case SEGRT_DTYPE_UINT16: SG_TO_F32(uint16_t); return;
    case SEGRT_DTYPE_INT8: SG_TO_F32(int8_t); return;
    case SEGRT_DTYPE_UINT8: SG_TO_F32(uint8_t); return;
    default:
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)sg_dtype_load_f64(t, src, i);
        return;
    }
#undef SG_TO_F32
}

bool sg_dtype_is_nonzero(sg_dtype t, const void *data, int64_t i)
{
    return sg_dtype_is_float(t) ? sg_dtype_load_f64(t, data, i) != 0.0 : sg_dtype_load_i64(t, data, i) != 0;
}

bool sg_dtype_quant_range(sg_dtype t, double *lo, double *hi)
{
    switch (t) {
    case SEGRT_DTYPE_UINT8: *lo = 0, *hi = 255; return true;
    case SEGRT_DTYPE_INT8: *lo = -128, *hi = 127; return true;
    case SEGRT_DTYPE_UINT16: *lo = 0, *hi = 65535; return true;
    case SEGRT_DTYPE_INT16: *lo = -32768, *hi = 32767; return true;
    default: return false;
    }
}
