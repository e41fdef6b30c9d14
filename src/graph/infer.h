/* Shape and dtype inference.
 *
 * Each operator has a function sg_infer_<ID>(g, n) (declared below from
 * ops.def) that reads its inputs' dtypes, shapes and, where present,
 * constant data, and sets its outputs with sg_infer_set_output(). It
 * rejects contradictions (incompatible broadcast, channel mismatch, bad
 * axis, element-count mismatch in Reshape, ...) with sg_node_error(...,
 * SEGRT_ERROR_SHAPE, ...) and malformed attributes with
 * SEGRT_ERROR_INVALID_MODEL. Where something is unknown (a symbolic dim, a
 * non-constant shape input), the result is unknown rather than an error. */
#ifndef SG_GRAPH_INFER_H
#define SG_GRAPH_INFER_H

#include "graph/ir.h"

/* Infers one node's outputs from its inputs as they are now. */
sg_status sg_infer_node(sg_graph *g, sg_node *n);

/* Binds the graph input `name` to concrete dims: checks the rank and the
 * declared fixed dims, binds symbolic dims (a symbol bound twice must agree)
 * and sets the input's shape. Errors: INVALID_ARGUMENT naming the input with
 * expected and given dims. */
sg_status sg_graph_bind_input(sg_graph *g, const char *name, int32_t rank, const int64_t *dims);
/* The same for graph input number `input` (binding every input by name
 * would be quadratic in the inputs). */
sg_status sg_graph_bind_input_at(sg_graph *g, int32_t input, int32_t rank, const int64_t *dims);

/* Resets every non-constant value to what the model declared (inputs
 * keep their bound shapes), then infers every live node in order. Checks
 * graph outputs against their declared dtype and fixed dims. */
sg_status sg_graph_infer(sg_graph *g);

/* A copy of g with its first n inputs bound to these tensors' dims and
 * inferred (the caller frees it); errors start with g's path. For runs at
 * dims other than those g was built for. */
sg_status sg_graph_specialize(const sg_graph *g, size_t n_inputs, const segrt_tensor *inputs, sg_graph **out);

/* Helpers for the per-op functions --------------------------------------- */

/* The value of input i, or NULL when the input is omitted. */
const sg_value *sg_infer_input(const sg_graph *g, const sg_node *n, int32_t i);

/* Sets output j (ignored when omitted). The output's shape is checked
 * against what it declared: a known declared dim that differs is a SHAPE
 * error. */
sg_status sg_infer_set_output(sg_graph *g, sg_node *n, int32_t j, sg_dtype dtype,
                              const sg_shape *shape);

/* numpy broadcasting of a and b into out; SHAPE error naming the node on
 * incompatible known dims. Unknown rank gives unknown rank. */
sg_status sg_infer_broadcast(const sg_graph *g, const sg_node *n, const sg_shape *a,
                             const sg_shape *b, sg_shape *out);

/* Reads constant input i as int64 values (from any integer dtype) into
 * vals (room for cap). *count is the element count, or -1 when the input is
 * absent or not constant. INVALID_MODEL when it has more than cap elements
 * or a non-integer dtype. */
sg_status sg_infer_const_ints(const sg_graph *g, const sg_node *n, int32_t i, int64_t *vals,
                              int32_t cap, int32_t *count);

/* Same for float inputs (any float or integer dtype), e.g. Resize scales. */
sg_status sg_infer_const_floats(const sg_graph *g, const sg_node *n, int32_t i, float *vals,
                                int32_t cap, int32_t *count);

/* Normalises a possibly negative axis for a given rank; INVALID_MODEL
 * naming the node when out of range. */
sg_status sg_infer_axis(const sg_node *n, int64_t axis, int32_t rank, int32_t *out);

/* A dim of known size, or unknown. */
sg_dim sg_dim_of(int64_t size);
sg_dim sg_dim_unknown(void);

/* Validates a computed dim: SHAPE error when negative, or larger than any
 * real tensor can be (more than 2^40 elements along one axis). */
sg_status sg_infer_check_dim(const sg_node *n, int64_t size, const char *what);

/* The per-op functions, one per line of ops.def. */
#define SG_OP(id, name, in_min, in_max, out_min, out_max) \
    sg_status sg_infer_##id(sg_graph *g, sg_node *n);
#include "graph/ops.def"
#undef SG_OP

#endif
