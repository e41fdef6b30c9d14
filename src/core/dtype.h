/* Element types: sizes, names, and conversions of single elements. */
#ifndef SG_CORE_DTYPE_H
#define SG_CORE_DTYPE_H

#include "segrt.h"

#include <stdbool.h>
#include <stdint.h>

typedef segrt_dtype sg_dtype;

/* True for the dtypes segrt stores and computes with. */
bool sg_dtype_is_supported(sg_dtype t);
bool sg_dtype_is_float(sg_dtype t); /* f16, bf16, f32, f64 */
bool sg_dtype_is_integer(sg_dtype t);
/* The range of a quantized type (QuantizeLinear's saturation): uint8,
 * int8, uint16 and int16; false for any other type. */
bool sg_dtype_quant_range(sg_dtype t, double *lo, double *hi);

float sg_half_to_float(uint16_t h);
uint16_t sg_float_to_half(float f);
float sg_bf16_to_float(uint16_t b);
uint16_t sg_float_to_bf16(float f);

/* Element i of a buffer of type t, widened. Bool reads as 0 or 1. */
double sg_dtype_load_f64(sg_dtype t, const void *data, int64_t i);
int64_t sg_dtype_load_i64(sg_dtype t, const void *data, int64_t i);
/* Stores v into element i, converting as ONNX Cast does (floats to ints
 * truncate toward zero; to bool: v != 0). */
void sg_dtype_store_f64(sg_dtype t, void *data, int64_t i, double v);
/* Whether element i is not zero, as ONNX's casts to bool decide (NaN is
 * nonzero, -0.0 zero). */
bool sg_dtype_is_nonzero(sg_dtype t, const void *data, int64_t i);
void sg_dtype_store_i64(sg_dtype t, void *data, int64_t i, int64_t v);
/* n elements of type t as float32, each as (float)sg_dtype_load_f64 gives
 * it, by loops typed outside the element loop (a volume's voxels). */
void sg_dtype_to_f32(sg_dtype t, const void *src, float *dst, int64_t n);

#endif
