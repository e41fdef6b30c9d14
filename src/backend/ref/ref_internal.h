/* Shared by the reference kernels: their declarations (ref.c builds the
 * table from them) and the checks and loops every family needs.
 *
 * Kernels trust the dims of the tensors they are given for sizes but never
 * index past a buffer: each one checks that the dims it relies on agree with
 * each other and fails with an error naming the node where they do not. */
#ifndef SG_BACKEND_REF_INTERNAL_H
#define SG_BACKEND_REF_INTERNAL_H

#include "backend/ref/ref.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define REF_KERNEL(fn)                                                                             \
    sg_status fn(const sg_node *n, const sg_tensor *const *in, int32_t n_in,                       \
                 sg_tensor *const *out, int32_t n_out)

/* The kernels, by family. */
REF_KERNEL(sg_ref_conv);
REF_KERNEL(sg_ref_conv_transpose);
REF_KERNEL(sg_ref_max_pool);
REF_KERNEL(sg_ref_average_pool);
REF_KERNEL(sg_ref_global_average_pool);
REF_KERNEL(sg_ref_global_max_pool);
REF_KERNEL(sg_ref_batch_normalization);
REF_KERNEL(sg_ref_instance_normalization);
REF_KERNEL(sg_ref_group_normalization);
REF_KERNEL(sg_ref_layer_normalization);
REF_KERNEL(sg_ref_unary);
REF_KERNEL(sg_ref_clip);
REF_KERNEL(sg_ref_binary);
REF_KERNEL(sg_ref_variadic);
REF_KERNEL(sg_ref_where);
REF_KERNEL(sg_ref_softmax);
REF_KERNEL(sg_ref_concat);
REF_KERNEL(sg_ref_split);
REF_KERNEL(sg_ref_slice);
REF_KERNEL(sg_ref_pad);
REF_KERNEL(sg_ref_copy);
REF_KERNEL(sg_ref_dropout);
REF_KERNEL(sg_ref_transpose);
REF_KERNEL(sg_ref_expand);
REF_KERNEL(sg_ref_tile);
REF_KERNEL(sg_ref_gather);
REF_KERNEL(sg_ref_scatter_nd);
REF_KERNEL(sg_ref_gather_elements);
REF_KERNEL(sg_ref_scatter_elements);
REF_KERNEL(sg_ref_gather_nd);
REF_KERNEL(sg_ref_cum_sum);
REF_KERNEL(sg_ref_trilu);
REF_KERNEL(sg_ref_one_hot);
REF_KERNEL(sg_ref_top_k);
REF_KERNEL(sg_ref_non_zero);
REF_KERNEL(sg_ref_quantize_linear);
REF_KERNEL(sg_ref_grid_sample);
REF_KERNEL(sg_ref_attention);
REF_KERNEL(sg_ref_sdpa);
REF_KERNEL(sg_ref_dequantize_linear);
REF_KERNEL(sg_ref_depth_to_space);
REF_KERNEL(sg_ref_space_to_depth);
REF_KERNEL(sg_ref_cast);
REF_KERNEL(sg_ref_shape);
REF_KERNEL(sg_ref_size);
REF_KERNEL(sg_ref_constant_of_shape);
REF_KERNEL(sg_ref_range);
REF_KERNEL(sg_ref_constant);
/* If: never run (sg_pass_fold_if replaces it where its condition is a
 * constant); the error says so. */
REF_KERNEL(sg_ref_if);
REF_KERNEL(sg_ref_reduce);
REF_KERNEL(sg_ref_arg_max);
REF_KERNEL(sg_ref_mat_mul);
REF_KERNEL(sg_ref_gemm);
REF_KERNEL(sg_ref_einsum);
REF_KERNEL(sg_ref_resize);
REF_KERNEL(sg_ref_upsample);

/* Kernels accept dims up to SG_MAX_DIM (graph/ir.h), as shape inference does. */

/* Inputs and outputs ------------------------------------------------------- */

/* Input i, or NULL when omitted or past n_in. */
const sg_tensor *sg_ref_in(const sg_tensor *const *in, int32_t n_in, int32_t i);

/* Input i, checked (rank, dims each <= SG_MAX_DIM with a product that
 * fits, dtype, data present); INVALID_MODEL when it is omitted. */
sg_status sg_ref_need_in(const sg_node *n, const sg_tensor *const *in, int32_t n_in, int32_t i,
                         const sg_tensor **t);
/* As sg_ref_need_in, but *t is NULL without error when the input is omitted. */
sg_status sg_ref_opt_in(const sg_node *n, const sg_tensor *const *in, int32_t n_in, int32_t i,
                        const sg_tensor **t);
/* Output j, checked; INTERNAL when a required output was not given. */
sg_status sg_ref_need_out(const sg_node *n, sg_tensor *const *out, int32_t n_out, int32_t j,
                          sg_tensor **t);
/* Output j, checked, or NULL when omitted. */
sg_status sg_ref_opt_out(const sg_node *n, sg_tensor *const *out, int32_t n_out, int32_t j,
                         sg_tensor **t);

/* Element count, known to fit once the tensor has been checked. */
int64_t sg_ref_numel(const sg_tensor *t);

/* Errors ------------------------------------------------------------------ */

/* SHAPE: "output dims AxB do not match the expected CxD". */
sg_status sg_ref_out_dims_error(const sg_node *n, const sg_tensor *o, const int64_t *want,
                                int32_t want_rank);
/* Fails unless o has exactly these dims. */
sg_status sg_ref_check_out_dims(const sg_node *n, const sg_tensor *o, const int64_t *want,
                                int32_t want_rank);
/* Fails unless a and b have the same element count. */
sg_status sg_ref_check_same_numel(const sg_node *n, const sg_tensor *a, const sg_tensor *b);
/* Fails unless t has dtype want. */
sg_status sg_ref_check_dtype(const sg_node *n, const sg_tensor *t, sg_dtype want, const char *what);
sg_status sg_ref_unsupported_dtype(const sg_node *n, sg_dtype t);

/* Attributes and small integer inputs ------------------------------------ */

/* Reads an integer tensor (any integer dtype) into vals (room for cap). */
sg_status sg_ref_read_ints(const sg_node *n, const sg_tensor *t, int64_t *vals, int32_t cap,
                           int32_t *count, const char *what);
/* Normalises axis for rank; INVALID_MODEL when out of range. */
sg_status sg_ref_axis(const sg_node *n, int64_t axis, int32_t rank, int32_t *out);

/* Row-major strides of dims, in elements. */
void sg_ref_strides(const int64_t *dims, int32_t rank, int64_t *strides);

/* A scatter's `reduction` attribute (ScatterND, ScatterElements): the op
 * it combines with (SG_OP_ADD, MUL, MAX, MIN), SG_OP_COUNT for none;
 * UNSUPPORTED naming another. */
sg_status sg_ref_scatter_reduction(const sg_node *n, sg_op *out);

/* y[yi] combined with u[ui] by rop (one of sg_ref_scatter_reduction's,
 * not COUNT): floats in double, max and min passing NaN on; integers in
 * int64 with wrap-around. */
void sg_ref_scatter_combine(sg_tensor *y, int64_t yi, const sg_tensor *u, int64_t ui, sg_op rop);

/* Broadcasting ------------------------------------------------------------ */

#define REF_BCAST_MAX 4

/* numpy broadcasting of up to REF_BCAST_MAX inputs against the output's
 * dims, with adjacent dims merged where every operand is contiguous across
 * them, so the last dim is as long as possible and loops over it stay
 * simple. Strides are in elements, 0 along broadcast dims. */
typedef struct ref_bcast {
    int32_t rank; /* >= 1 */
    int32_t n;    /* operands */
    int64_t dims[SEGRT_MAX_RANK];
    int64_t strides[REF_BCAST_MAX][SEGRT_MAX_RANK];
    int64_t rows;  /* product of dims[0..rank-1) */
    int64_t inner; /* dims[rank-1] */
} ref_bcast;

/* SHAPE error when an input's dims do not broadcast to out_dims. */
sg_status sg_ref_bcast_init(const sg_node *n, ref_bcast *b, const int64_t *out_dims,
                            int32_t out_rank, const sg_tensor *const *ops, int32_t n_ops);

/* Walks rows: idx (rank entries, zeroed first) and off (element offsets of
 * each operand, zeroed first) move to the next row. */
void sg_ref_bcast_next(const ref_bcast *b, int64_t *idx, int64_t *off);

/* Copies a strided view into a dense buffer: dst element (i_0..i_r-1) of
 * dims is src element src_off + sum i_k * src_strides[k] (strides in
 * elements, possibly negative or 0). The caller guarantees the view lies
 * inside src. */
void sg_ref_strided_copy(void *dst, const void *src, size_t esize, int32_t rank,
                         const int64_t *dims, int64_t src_off, const int64_t *src_strides);

/* Float staging for kernels that compute in float32 ----------------------- */

/* A float32 copy of t's elements (any dtype), or NULL with OUT_OF_MEMORY
 * recorded. */
float *sg_ref_to_f32(const sg_tensor *t);
double *sg_ref_to_f64(const sg_tensor *t);
/* Stores count floats into t converting to its dtype. */
void sg_ref_from_f32(sg_tensor *t, const float *v, int64_t count);
void sg_ref_from_f64(sg_tensor *t, const double *v, int64_t count);

/* Copies one element of esize bytes. memcpy of a constant size compiles
 * to one move and, unlike a cast pointer, does not break aliasing rules. */
static inline void ref_copy_elem(void *dst, const void *src, size_t esize)
{
    switch (esize) {
    case 1: memcpy(dst, src, 1); break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    default: memcpy(dst, src, 8); break;
    }
}

/* max and min that return NaN when either operand is NaN, as numpy's
 * maximum/minimum do. */
static inline double ref_max_nan(double a, double b) { return (a > b || a != a) ? a : b; }
static inline double ref_min_nan(double a, double b) { return (a < b || a != a) ? a : b; }

/* Wrapping integer arithmetic without signed overflow. */
static inline int64_t ref_add_wrap(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a + (uint64_t)b);
}
static inline int64_t ref_sub_wrap(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a - (uint64_t)b);
}
static inline int64_t ref_mul_wrap(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a * (uint64_t)b);
}

#endif
