/* Graph passes. Each keeps results equal up to float rounding. */
#ifndef SG_GRAPH_PASSES_H
#define SG_GRAPH_PASSES_H

#include "graph/ir.h"

/* Computes one node on dense host tensors (the reference backend's
 * signature); in[i] / out[j] are NULL where omitted. */
typedef sg_status (*sg_eval_fn)(const sg_node *n, const sg_tensor *const *in, int32_t n_in,
                                sg_tensor *const *out, int32_t n_out);
/* The evaluator for an operator, or NULL. */
typedef sg_eval_fn (*sg_eval_lookup)(sg_op op);

typedef struct sg_fold_options {
    sg_eval_lookup lookup;
    int64_t max_bytes; /* largest output a fold may create; 0: no limit */
    bool release;      /* drop intermediate data once every reader is folded */
    /* An output over max_bytes fails the pass (OUT_OF_MEMORY, naming the
     * node) instead of being left unfolded: for the interpreter, where
     * every node must be computed. */
    bool limit_fails;
    /* What all folds together may still create, in bytes (NULL: no
     * limit): each fold takes its outputs' bytes from it, and a fold that
     * would overdraw it is left to run time. Bounds what a small file can
     * make the optimizer allocate (chains of large constants). */
    int64_t *budget;
} sg_fold_options;

/* Infers every live node in order and evaluates those whose inputs are all
 * constant (and Shape/Size of tensors with known dims), turning their
 * outputs into constants. With every graph input bound to data and no size
 * limit this runs the whole graph: the reference executor. */
sg_status sg_pass_fold_constants(sg_graph *g, const sg_fold_options *o, int32_t *changed);

/* Removes Identity and inference-mode Dropout, and operators that do
 * nothing for the bound shapes: Pad with zero pads, Reshape/Flatten/
 * Squeeze/Unsqueeze/Expand to the same shape, Cast to the same dtype,
 * Transpose by the identity, Slice of everything, Concat of one input.
 * First, a CastLike whose target's dtype is known becomes a Cast. */
sg_status sg_pass_simplify(sg_graph *g, int32_t *changed);

/* Folds inference BatchNormalization into the Conv or ConvTranspose that
 * feeds it (constant float32 weights, the conv's output read only by the
 * BatchNormalization). */
sg_status sg_pass_fold_batchnorm(sg_graph *g, int32_t *changed);

/* Replaces each If whose condition is a constant (one boolean) by the
 * nodes of the branch it takes (pass_if.c). */
sg_status sg_pass_fold_if(sg_graph *g, int32_t *changed);
/* The error for an If left in a graph that is to run: its condition was
 * not a constant when the plan was built. */
sg_status sg_if_not_folded(const sg_node *n);

/* Marks dead every node that no graph output depends on. */
sg_status sg_pass_dead_nodes(sg_graph *g, int32_t *changed);

/* The attribute sg_pass_lower gives the nodes it adds (an int, 1): a
 * backend computes them in float32 whatever the plan's precision, as the
 * reference kernels of the composite operators do. */
#define SG_ATTR_FP32 "segrt_fp32"

/* Replaces each composite node (RMSNormalization; QuantizeLinear and
 * DequantizeLinear per tensor or per axis, 8- and 16-bit; Attention
 * without the QK product as an output) for which
 * lower(g, node, user) is true by the primitive operators the spec
 * defines it with (pass_lower.c), then compacts, sorts and infers the
 * graph; *changed counts them. Forms it does not lower stay as they are. */
sg_status sg_pass_lower(sg_graph *g, bool (*lower)(const sg_graph *g, const sg_node *n, void *user), void *user,
                        int32_t *changed);

/* Writes each two-operand Einsum over static dims whose letters are batch,
 * row, column or contracted ones as Transposes, Reshapes and one batched
 * MatMul (pass_lower.c): the products every backend runs best. */
sg_status sg_pass_einsum_matmul(sg_graph *g, int32_t *changed);

/* Writes each x * 0.5 * (1 + Erf(x / sqrt(2))) (the Div or a Mul by
 * 1/sqrt(2), the Muls in any order) as one Gelu node (pass_gelu.c). */
sg_status sg_pass_fuse_gelu(sg_graph *g, int32_t *changed);

/* Writes each chain of MatMul(Q, K^T), scalar scales, additive masks,
 * Softmax over the last axis and MatMul(., V), with batch-only Reshapes
 * between its steps, as one ScaledDotProductAttention node of segrt's
 * (pass_attention.c): for a backend with a fused kernel for it, asked
 * when a plan is built, not by sg_graph_optimize. */
sg_status sg_pass_fuse_attention(sg_graph *g, int32_t *changed);

/* Runs everything above to a fixed point, then compacts the graph. */
sg_status sg_graph_optimize(sg_graph *g, sg_eval_lookup lookup);

#endif
