/* The reference backend: plain, single-threaded C kernels over dense
 * row-major tensors, written to be obviously right rather than fast.
 *
 * It evaluates constant subgraphs during constant folding (so it covers
 * every dtype that shape arithmetic uses) and is the oracle that the
 * optimized CPU and CUDA backends are checked against. */
#ifndef SG_BACKEND_REF_H
#define SG_BACKEND_REF_H

#include "graph/ir.h"

/* Computes node n. in[i] is NULL for an omitted optional input; out[j] is
 * NULL for an omitted optional output, else allocated by the caller with the
 * dtype and dims shape inference gave. Attributes are read from n. Errors
 * (with sg_node_error): UNSUPPORTED for an attribute value or dtype the
 * kernel does not implement, INVALID_MODEL for data that the operator
 * forbids (an index out of range, say). */
typedef sg_status (*sg_ref_kernel_fn)(const sg_node *n, const sg_tensor *const *in, int32_t n_in,
                                      sg_tensor *const *out, int32_t n_out);

/* The kernel for op, or NULL where the reference backend has none. */
sg_ref_kernel_fn sg_ref_kernel(sg_op op);

#endif
