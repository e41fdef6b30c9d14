/* Rewriting nodes of a graph as others (pass_lower.c's lowerings and
 * Einsum products, pass_attention.c's fusion): the helpers that add the new
 * values, constants and nodes, and the loop that replaces each picked node
 * by what its rewrite adds, then drops what no longer counts, sorts and
 * infers the graph. The new names are the old node's, a tag and a serial. */
#ifndef SG_GRAPH_REWRITE_H
#define SG_GRAPH_REWRITE_H

#include "graph/ir.h"

typedef struct sg_rw {
    sg_graph *g;
    const char *base; /* the rewritten node's name: the new nodes' and values' prefix */
    const char *tag;  /* "lowered", "fused": what the names say */
    int32_t serial;
    bool fp32; /* the new nodes carry SG_ATTR_FP32 (passes.h) */
} sg_rw;

/* A new value of dtype, its shape unknown until inferred. */
sg_status sg_rw_value(sg_rw *L, sg_dtype dtype, int32_t *out);
/* A constant of `dtype` with `rank` dims, `bytes` of `data`. */
sg_status sg_rw_const(sg_rw *L, sg_dtype dtype, int32_t rank, const int64_t *dims, const void *data, size_t bytes,
                      int32_t *out);
sg_status sg_rw_scalar_f32(sg_rw *L, float x, int32_t *out);
/* The scalar x as a constant of type dt (a float32 one, cast where dt
 * differs: the optimization after the rewrite folds the Cast). */
sg_status sg_rw_scalar_as(sg_rw *L, float x, sg_dtype dt, int32_t *out);
/* A 1-D int64 constant of n values. */
sg_status sg_rw_ints(sg_rw *L, const int64_t *v, int64_t n, int32_t *out);
/* A new attribute `name` of node n (zeroed but for its name and kind). */
sg_status sg_rw_add_attr(sg_node *n, const char *name, sg_attr_kind kind, sg_attr **out);
sg_status sg_rw_add_int_attr(sg_node *n, const char *name, int64_t value);
/* A node op(inputs) writing value *out: a new value of `dtype`, or the
 * given one where *out >= 0 (the rewritten node's output). *node, where
 * asked, is valid until the next node is added. */
sg_status sg_rw_emit(sg_rw *L, sg_op op, const int32_t *inputs, int32_t n_inputs, sg_dtype dtype, int32_t *out,
                     sg_node **node);
sg_status sg_rw_emit1(sg_rw *L, sg_op op, int32_t a, sg_dtype dtype, int32_t *out);
sg_status sg_rw_emit2(sg_rw *L, sg_op op, int32_t a, int32_t b, sg_dtype dtype, int32_t *out);
/* v as `to` into *out (a new value where *out < 0; v itself where it is of
 * that type already and no value is given). */
sg_status sg_rw_cast(sg_rw *L, int32_t v, sg_dtype to, int32_t *out);
/* Transpose(v, perm) into *out (a new value where *out < 0). */
sg_status sg_rw_transpose(sg_rw *L, int32_t v, const int64_t *perm, int64_t rank, sg_dtype dt, int32_t *out);

/* A rewrite of node n (a copy: the array moves as nodes are added): sets
 * *done when it wrote n's outputs from new nodes, so that n goes; may give
 * up (done false), leaving what it added for the dead-node pass. */
typedef sg_status (*sg_rw_fn)(sg_rw *L, const sg_node *n, bool *done);

/* Runs pick's rewrite on each live node of g it gives one for; then, where
 * anything was added, drops the dead, sorts and infers the graph. *changed
 * counts the nodes replaced. */
sg_status sg_rw_rewrite(sg_graph *g, const char *tag, sg_rw_fn (*pick)(const sg_graph *g, const sg_node *n, void *user),
                        void *user, int32_t *changed);

/* sg_rw_rewrite with fn for every live node of op. */
sg_status sg_rw_rewrite_op(sg_graph *g, const char *tag, sg_op op, sg_rw_fn fn, int32_t *changed);

#endif
