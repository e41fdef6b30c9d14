/* GELU written out as exporters write it before opset 20 (passes.h,
 * sg_pass_fuse_gelu):
 *
 *   y = x * 0.5 * (1 + Erf(x / sqrt(2)))
 *
 * as Div (or Mul by 1/sqrt(2)), Erf, Add 1, and two Muls in any of the
 * orders torch's exporters and hand-written blocks give them (x times the
 * sum then times 0.5; 0.5 x times the sum; the sum times 0.5 then x)
 * becomes one Gelu node: five elementwise passes over a transformer's
 * widest activation become one, on every backend, and a float16 plan
 * rounds once instead of five times. The last Mul becomes the Gelu, so the
 * order stays valid; the other nodes are left to the dead-node pass. Every
 * value inside the pattern must be read by the pattern only. */
#include "graph/passes.h"

#include <math.h>
#include <stdlib.h>

/* Whether v is a constant float scalar within a relative 1e-3 of want
 * (float16 holds sqrt(2) as 1.4140625). */
static bool scalar_near(const sg_graph *g, int32_t v, double want)
{
    const sg_value *x = &g->values[v];
    int64_t numel;
    if (v < 0 || !x->data || !sg_dtype_is_float(x->dtype) || !sg_shape_numel(&x->shape, &numel) || numel != 1)
        return false;
    double c = sg_dtype_load_f64(x->dtype, sg_blob_data(x->data), 0);
    return fabs(c - want) <= 1e-3 * fabs(want);
}

/* The live node that alone reads v (v not a graph output), or NULL. */
static sg_node *sole_reader(sg_graph *g, const int32_t *uses, int32_t v, sg_op op)
{
    if (v < 0 || uses[v] != 1 || g->values[v].is_output)
        return NULL;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        sg_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (int32_t k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] == v)
                return n->op == op && n->n_inputs == 2 ? n : NULL;
    }
    return NULL;
}

/* The operand of binary node n that is not v (v one of them), or -1. */
static int32_t other(const sg_node *n, int32_t v)
{
    return n->inputs[0] == v ? n->inputs[1] : n->inputs[1] == v ? n->inputs[0] : -1;
}

/* The node producing v, live, of op with two inputs; or NULL. */
static const sg_node *made_by(const sg_graph *g, int32_t v, sg_op op)
{
    int32_t p = v >= 0 ? g->values[v].producer : -1;
    const sg_node *n = p >= 0 ? &g->nodes[p] : NULL;
    return n && !n->dead && n->op == op && n->n_inputs == 2 ? n : NULL;
}

/* Erf node e's GELU: the node to become the Gelu and its x, or NULL. */
static sg_node *match(sg_graph *g, const int32_t *uses, const sg_node *e, int32_t *x)
{
    int32_t t = e->inputs[0];
    const sg_node *d = made_by(g, t, SG_OP_DIV), *m = made_by(g, t, SG_OP_MUL);
    if (uses[t] != 1 || g->values[t].is_output)
        return NULL;
    if (d && scalar_near(g, d->inputs[1], sqrt(2.0)))
        *x = d->inputs[0];
    else if (m && scalar_near(g, m->inputs[1], sqrt(0.5)))
        *x = m->inputs[0];
    else if (m && scalar_near(g, m->inputs[0], sqrt(0.5)))
        *x = m->inputs[1];
    else
        return NULL;
    sg_dtype dt = g->values[*x].dtype;
    if (dt != SEGRT_DTYPE_FLOAT32 && dt != SEGRT_DTYPE_FLOAT16 && dt != SEGRT_DTYPE_BFLOAT16 &&
        dt != SEGRT_DTYPE_FLOAT64)
        return NULL;
    sg_node *add = sole_reader(g, uses, e->outputs[0], SG_OP_ADD);
    if (!add || !scalar_near(g, other(add, e->outputs[0]), 1.0))
        return NULL;
    int32_t a = add->outputs[0];
    sg_node *m1 = sole_reader(g, uses, a, SG_OP_MUL);
    if (!m1)
        return NULL;
    int32_t u = other(m1, a);
    sg_node *last = NULL;
    if (u == *x) { /* (x * a) * 0.5 */
        last = sole_reader(g, uses, m1->outputs[0], SG_OP_MUL);
        if (last && !scalar_near(g, other(last, m1->outputs[0]), 0.5))
            last = NULL;
    } else if (scalar_near(g, u, 0.5)) { /* (a * 0.5) * x */
        last = sole_reader(g, uses, m1->outputs[0], SG_OP_MUL);
        if (last && other(last, m1->outputs[0]) != *x)
            last = NULL;
    } else { /* a * (x * 0.5) */
        const sg_node *h = made_by(g, u, SG_OP_MUL);
        if (h && uses[u] == 1 && !g->values[u].is_output &&
            ((h->inputs[0] == *x && scalar_near(g, h->inputs[1], 0.5)) ||
             (h->inputs[1] == *x && scalar_near(g, h->inputs[0], 0.5))))
            last = m1;
    }
    /* The result keeps x's dims (a scalar's broadcast changes nothing) and dtype. */
    if (last && (g->values[last->outputs[0]].dtype != dt || !sg_shape_is_static(&g->values[last->outputs[0]].shape) ||
                 !sg_shape_is_static(&g->values[*x].shape) ||
                 g->values[last->outputs[0]].shape.rank != g->values[*x].shape.rank))
        last = NULL;
    return last;
}

sg_status sg_pass_fuse_gelu(sg_graph *g, int32_t *changed)
{
    int32_t *uses = NULL;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const sg_node *e = &g->nodes[i];
        if (e->dead || e->op != SG_OP_ERF || e->n_inputs != 1 || e->inputs[0] < 0 || e->outputs[0] < 0)
            continue;
        if (!uses && !(uses = sg_graph_use_counts(g)))
            return SEGRT_ERROR_OUT_OF_MEMORY;
        int32_t x;
        sg_node *last = match(g, uses, e, &x);
        if (!last)
            continue;
        int64_t xd[SEGRT_MAX_RANK], yd[SEGRT_MAX_RANK];
        sg_shape_dims(&g->values[x].shape, xd);
        sg_shape_dims(&g->values[last->outputs[0]].shape, yd);
        bool same = true;
        for (int32_t d = 0; d < g->values[x].shape.rank; d++)
            same = same && xd[d] == yd[d];
        if (!same)
            continue;
        last->op = SG_OP_GELU;
        last->inputs[0] = x;
        last->n_inputs = 1;
        (*changed)++;
        /* The pattern's other nodes now feed nothing: counts again before the next match. */
        free(uses);
        uses = NULL;
    }
    free(uses);
    return SEGRT_OK;
}
