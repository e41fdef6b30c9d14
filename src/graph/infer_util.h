/* Helpers shared by the per-family shape-inference files (infer_*.c).
 * Private to src/graph: the driver and the public helpers are in infer.h. */
#ifndef SG_GRAPH_INFER_UTIL_H
#define SG_GRAPH_INFER_UTIL_H

#include "graph/infer.h"

#include <stdbool.h>
#include <stdint.h>

/* Room for constant integer inputs (axes, pads, shapes, repeats). Longer
 * ones cannot describe a tensor of rank SEGRT_MAX_RANK, so they are
 * rejected as malformed rather than read. */
#define SG_IU_CONST_CAP 64

/* A slice end or pad at or past SG_MAX_DIM (ir.h) means "to the end",
 * whatever a symbolic dim turns out to be. */

/* Input i's shape; unknown when the input is omitted. INVALID_MODEL when
 * its rank is beyond SEGRT_MAX_RANK (only a hostile importer gets there). */
sg_status sg_iu_shape(const sg_graph *g, const sg_node *n, int32_t i, sg_shape *out);

/* Input i's dtype, or SEGRT_DTYPE_UNDEFINED when omitted or not yet known. */
sg_dtype sg_iu_dtype(const sg_graph *g, const sg_node *n, int32_t i);

/* Input i's name for messages ("<omitted>" when absent). */
const char *sg_iu_name(const sg_graph *g, const sg_node *n, int32_t i);

/* True when optional input i is given. */
bool sg_iu_has_input(const sg_node *n, int32_t i);

/* SHAPE error naming both tensors unless inputs i and j have the same dtype
 * (nothing is checked while either is unknown). */
sg_status sg_iu_same_dtype(const sg_graph *g, const sg_node *n, int32_t i, int32_t j);

/* SHAPE error when input i's dtype is known and is not want. */
sg_status sg_iu_want_dtype(const sg_graph *g, const sg_node *n, int32_t i, sg_dtype want);

/* SHAPE error when input i is known to be bool: arithmetic needs numbers. */
sg_status sg_iu_want_numeric(const sg_graph *g, const sg_node *n, int32_t i);

/* SHAPE error when input i's dtype is known and is not int32 or int64
 * (indices of Gather and ScatterND). */
sg_status sg_iu_want_index(const sg_graph *g, const sg_node *n, int32_t i);

/* Sets output 0 to input 0's dtype and shape (symbols kept). */
sg_status sg_iu_passthrough(sg_graph *g, sg_node *n);

/* Broadcasts the shapes of inputs i and j (given as a and b) like
 * sg_infer_broadcast, but the error names both tensors. */
sg_status sg_iu_broadcast(const sg_graph *g, const sg_node *n, int32_t i, const sg_shape *a,
                          int32_t j, const sg_shape *b, sg_shape *out);

/* Normalises count axes (possibly negative) for rank into out, which has
 * room for SEGRT_MAX_RANK. INVALID_MODEL when an axis is out of range, is
 * repeated, or there are more axes than the rank. what names the list in
 * messages ("`axes`"). */
sg_status sg_iu_axes(const sg_node *n, const int64_t *axes, int32_t count, int32_t rank,
                     int32_t *out, const char *what);

/* The element count of input i when its shape is static and 1-D (a shape
 * or axes input that is computed rather than constant), else -1. */
int64_t sg_iu_static_len(const sg_graph *g, const sg_node *n, int32_t i);

/* The product of dims [from, to) of s. Known when every dim is; when
 * exactly one is unknown and the rest multiply to 1, that dim itself, so
 * its symbol survives; otherwise unknown. SHAPE error on overflow. */
sg_status sg_iu_dims_product(const sg_node *n, const sg_shape *s, int32_t from, int32_t to,
                             sg_dim *out);

/* Reads INTS attribute name into out[0..count): INVALID_MODEL when present
 * with another length or with a value below min; def fills out when absent.
 * *present (may be NULL) says whether the attribute was there. */
sg_status sg_iu_attr_ints(const sg_node *n, const char *name, int32_t count, int64_t min,
                          int64_t def, int64_t *out, bool *present);

/* The shape's text for messages, in a caller buffer. */
#define SG_IU_SHAPE_BUF 256

/* Convolution and pooling geometry ---------------------------------------- */

typedef enum sg_auto_pad {
    SG_AUTO_PAD_NOTSET,
    SG_AUTO_PAD_SAME_UPPER,
    SG_AUTO_PAD_SAME_LOWER,
    SG_AUTO_PAD_VALID
} sg_auto_pad;

typedef struct sg_conv_attrs {
    int32_t spatial; /* number of spatial axes */
    sg_auto_pad auto_pad;
    int64_t kernel[SEGRT_MAX_RANK]; /* 0 where the kernel size is not known */
    int64_t strides[SEGRT_MAX_RANK];
    int64_t dilations[SEGRT_MAX_RANK];
    int64_t pads[2 * SEGRT_MAX_RANK]; /* ONNX order: all begins, then all ends */
    bool ceil_mode;                   /* pools only */
} sg_conv_attrs;

/* Reads and validates auto_pad, kernel_shape, strides, dilations, pads and
 * ceil_mode for `spatial` spatial axes. With a weight shape w (Conv and
 * ConvTranspose: its dims 2.. are the kernel) kernel_shape is optional and
 * must agree with w; without (pools) it is required. Malformed values are
 * INVALID_MODEL. */
sg_status sg_conv_attrs_read(const sg_graph *g, const sg_node *n, int32_t spatial,
                             const sg_shape *w, const char *wname, sg_conv_attrs *out);

/* Output size along spatial axis i of a convolution or pool of input dim
 * in (input tensor named xname for messages). SHAPE error when the padded
 * input is smaller than the kernel's extent. */
sg_status sg_conv_out_dim(const sg_node *n, const sg_conv_attrs *a, int32_t i, sg_dim in,
                          const char *xname, sg_dim *out);

/* The begin padding along spatial axis i of a convolution or pool whose
 * padded extent exceeds the input by total elements: the explicit pad, or
 * what auto_pad gives (SAME_UPPER puts the odd element at the end). */
int64_t sg_conv_pad_begin(const sg_conv_attrs *a, int32_t i, int64_t total);

/* Output size along spatial axis i of a transposed convolution without an
 * explicit output_shape. */
sg_status sg_conv_transpose_out_dim(const sg_node *n, const sg_conv_attrs *a, int32_t i, sg_dim in,
                                    int64_t output_padding, sg_dim *out);

/* An output of the given rank whose dims are all unknown. */
sg_shape sg_iu_unknown_dims(int32_t rank);

/* UNSUPPORTED naming the node when an output would exceed SEGRT_MAX_RANK. */
sg_status sg_iu_rank_fits(const sg_node *n, int64_t rank);

/* An INT attribute that the operator requires (INVALID_MODEL if absent). */
sg_status sg_iu_required_int(const sg_node *n, const char *name, int64_t *out);

#endif
