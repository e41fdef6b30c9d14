/* Scaled dot-product attention as one node (passes.h,
 * sg_pass_fuse_attention). Exporters write attention as a chain:
 *
 *   Q' = Q * c                      (optional, scalar c: Swin's q * scale)
 *   A  = MatMul(Q', Transpose(K))   (K^T given as it is where no Transpose)
 *   A  = A * c | A / c              (scalar scales)
 *   A  = A + M                      (additive masks: a relative position bias,
 *                                    a shifted window's mask)
 *   P  = Softmax(A, last axis)
 *   Y  = MatMul(P, V)
 *
 * with Reshapes between the steps that regroup the batch dims only (Swin
 * adds its window mask at [B, windows, heads, N, N] to scores of [B *
 * windows, heads, N, N]; the Einsum rewrite flattens batch dims to one).
 * The chain becomes segrt's ScaledDotProductAttention (infer_matmul.c) over
 * the finest batch grouping met along it: Q, K, V and the masks are
 * reshaped to it (views), the result reshaped back to Y's dims. Every value
 * inside the chain must be read by the next step only; every dim must be
 * known (the pass runs on a plan's bound graph). Anything else is left as
 * it is. */
#include "graph/infer.h"
#include "graph/passes.h"
#include "graph/rewrite.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STAGES 16
#define MAX_MASKS 2

typedef struct match {
    const sg_graph *g;
    const int32_t *uses;
    int32_t q, k, v;
    bool k_transposed;
    double scale;
    int32_t masks[MAX_MASKS], mask_stage[MAX_MASKS], n_masks;
    int32_t stages[MAX_STAGES], n_stages; /* values of [batch..., x, y] along the chain */
} match;

static const sg_node *producer(const sg_graph *g, int32_t v)
{
    int32_t p = v >= 0 ? g->values[v].producer : -1;
    return p >= 0 && !g->nodes[p].dead ? &g->nodes[p] : NULL;
}

static bool static_dims(const sg_graph *g, int32_t v, int64_t *dims, int32_t *rank)
{
    const sg_value *x = &g->values[v];
    *rank = x->shape.rank;
    return *rank >= 0 && sg_shape_dims(&x->shape, dims);
}

/* Read once, by the chain's next step, and not a graph output. */
static bool single_use(const match *m, int32_t v)
{
    return v >= 0 && m->uses[v] == 1 && !m->g->values[v].is_output;
}

static bool add_stage(match *m, int32_t v)
{
    if (m->n_stages >= MAX_STAGES)
        return false;
    m->stages[m->n_stages++] = v;
    return true;
}

/* A Reshape of v's producer that changes the batch dims only (the last
 * two stay): its input, or -1. */
static int32_t batch_reshape_input(const match *m, int32_t v)
{
    const sg_node *p = producer(m->g, v);
    if (!p || p->op != SG_OP_RESHAPE || p->inputs[0] < 0)
        return -1;
    int64_t a[SEGRT_MAX_RANK], b[SEGRT_MAX_RANK];
    int32_t ra, rb;
    if (!static_dims(m->g, p->inputs[0], a, &ra) || !static_dims(m->g, v, b, &rb) || ra < 2 || rb < 2 ||
        a[ra - 1] != b[rb - 1] || a[ra - 2] != b[rb - 2])
        return -1;
    return p->inputs[0];
}

/* v with the batch-only Reshapes that only it reads peeled off, each
 * value on the way a stage. */
static int32_t peel_reshapes(match *m, int32_t v, bool *ok)
{
    for (int32_t x; single_use(m, v) && (x = batch_reshape_input(m, v)) >= 0; v = x)
        *ok = *ok && add_stage(m, x);
    return v;
}

/* The value of a constant float scalar (one element), or false. */
static bool scalar_const(const sg_graph *g, int32_t v, double *out)
{
    const sg_value *x = &g->values[v];
    int64_t numel;
    if (!x->data || !sg_dtype_is_float(x->dtype) || !sg_shape_numel(&x->shape, &numel) || numel != 1)
        return false;
    *out = sg_dtype_load_f64(x->dtype, sg_blob_data(x->data), 0);
    return isfinite(*out) && *out != 0;
}

static bool same_dims(const sg_graph *g, int32_t a, int32_t b)
{
    int64_t da[SEGRT_MAX_RANK], db[SEGRT_MAX_RANK];
    int32_t ra, rb;
    return static_dims(g, a, da, &ra) && static_dims(g, b, db, &rb) && ra == rb &&
           memcmp(da, db, sizeof(int64_t) * (size_t)ra) == 0;
}

/* A MatMul whose operands have the same batch dims (no broadcasting). */
static bool plain_batched(const sg_graph *g, const sg_node *p)
{
    int64_t a[SEGRT_MAX_RANK], b[SEGRT_MAX_RANK];
    int32_t ra, rb;
    if (!static_dims(g, p->inputs[0], a, &ra) || !static_dims(g, p->inputs[1], b, &rb) || ra != rb || ra < 2)
        return false;
    return memcmp(a, b, sizeof(int64_t) * (size_t)(ra - 2)) == 0;
}

/* Whether scores node p's operand i continues the chain (the other is a
 * mask or a scale): of the scores' dims and produced by a step of it. */
static bool chain_operand(const match *m, const sg_node *p, int32_t i)
{
    int32_t v = p->inputs[i];
    const sg_node *q = producer(m->g, v);
    if (!q || !single_use(m, v) || !same_dims(m->g, v, p->outputs[0]))
        return false;
    return q->op == SG_OP_MAT_MUL || q->op == SG_OP_ADD || q->op == SG_OP_MUL || q->op == SG_OP_DIV ||
           q->op == SG_OP_RESHAPE;
}

/* Matches the chain that ends in MatMul node n (P x V). */
static bool match_chain(match *m, const sg_node *n)
{
    const sg_graph *g = m->g;
    bool ok = true;
    if (n->op != SG_OP_MAT_MUL || n->n_inputs != 2 || n->inputs[0] < 0 || n->inputs[1] < 0 || n->outputs[0] < 0 ||
        !plain_batched(g, n))
        return false;
    sg_dtype dt = g->values[n->outputs[0]].dtype;
    if (dt != SEGRT_DTYPE_FLOAT32 && dt != SEGRT_DTYPE_FLOAT16 && dt != SEGRT_DTYPE_BFLOAT16)
        return false;
    ok = add_stage(m, n->outputs[0]);
    m->v = peel_reshapes(m, n->inputs[1], &ok);
    ok = ok && add_stage(m, m->v);
    int32_t x = peel_reshapes(m, n->inputs[0], &ok);
    const sg_node *sm = producer(g, x);
    if (!ok || !sm || sm->op != SG_OP_SOFTMAX || !single_use(m, x))
        return false;
    int32_t rank = g->values[x].shape.rank;
    int64_t axis = sg_attr_int(sm, "axis", g->opset >= 13 ? -1 : 1);
    if (rank < 2 || (axis != -1 && axis != rank - 1))
        return false;
    ok = add_stage(m, x);
    x = sm->inputs[0];
    m->scale = 1;
    bool scaled = false; /* a scale seen: a mask added before it would be scaled too */
    for (;;) {
        const sg_node *p = producer(g, x);
        if (!ok || !p || !single_use(m, x))
            return false;
        ok = add_stage(m, x);
        if (p->op == SG_OP_MAT_MUL) {
            if (!plain_batched(g, p))
                return false;
            break;
        }
        int32_t next = -1;
        double c;
        if (p->op == SG_OP_RESHAPE) {
            next = batch_reshape_input(m, x);
        } else if (p->op == SG_OP_ADD && !scaled && m->n_masks < MAX_MASKS) {
            int32_t i = chain_operand(m, p, 0) ? 0 : chain_operand(m, p, 1) ? 1 : -1;
            if (i >= 0 && g->values[p->inputs[1 - i]].dtype == dt) {
                next = p->inputs[i];
                m->mask_stage[m->n_masks] = m->n_stages - 1;
                m->masks[m->n_masks++] = p->inputs[1 - i];
            }
        } else if (p->op == SG_OP_MUL || p->op == SG_OP_DIV) {
            int32_t i = p->op == SG_OP_MUL && scalar_const(g, p->inputs[0], &c) ? 1 : 0;
            if (scalar_const(g, p->inputs[1 - i], &c) && chain_operand(m, p, i)) {
                m->scale *= p->op == SG_OP_MUL ? c : 1 / c;
                scaled = true;
                next = p->inputs[i];
            }
        }
        if (next < 0)
            return false;
        x = next;
    }
    const sg_node *qk = producer(g, x);
    /* Q: a scalar Mul folds into the scale; batch-only Reshapes peel. */
    int32_t q = peel_reshapes(m, qk->inputs[0], &ok);
    for (const sg_node *p; single_use(m, q) && (p = producer(g, q)) && p->op == SG_OP_MUL;) {
        double c;
        int32_t i = scalar_const(g, p->inputs[1], &c) ? 0 : scalar_const(g, p->inputs[0], &c) ? 1 : -1;
        if (i < 0)
            break;
        m->scale *= c;
        q = p->inputs[i];
    }
    m->q = q;
    ok = ok && add_stage(m, q);
    /* K^T: K itself where a Transpose of the last two dims made it. */
    int32_t kt = peel_reshapes(m, qk->inputs[1], &ok);
    const sg_node *t = single_use(m, kt) ? producer(g, kt) : NULL;
    int32_t np = 0, kr = g->values[kt].shape.rank;
    const int64_t *perm = t && t->op == SG_OP_TRANSPOSE ? sg_attr_ints(t, "perm", &np) : NULL;
    bool swap = perm && np == kr && kr >= 2 && perm[kr - 1] == kr - 2 && perm[kr - 2] == kr - 1;
    for (int32_t d = 0; swap && d < kr - 2; d++)
        swap = perm[d] == d;
    m->k_transposed = !swap;
    m->k = swap ? peel_reshapes(m, t->inputs[0], &ok) : kt;
    ok = ok && add_stage(m, m->k);
    for (int32_t i = 0; i < m->n_masks; i++)
        ok = ok && g->values[m->masks[i]].shape.rank >= 0 && sg_shape_is_static(&g->values[m->masks[i]].shape);
    return ok && g->values[m->q].dtype == dt && g->values[m->k].dtype == dt && g->values[m->v].dtype == dt;
}

/* The fine batch dims' groups that make each of a stage's batch dims:
 * dims of 1 aside, consecutive fine dims whose product is the stage's dim.
 * start[k] .. end[k] are stage dim k's fine dims (empty for a dim of 1). */
static bool group_dims(const int64_t *fine, int32_t nf, const int64_t *coarse, int32_t nc, int32_t *start, int32_t *end)
{
    int32_t j = 0;
    for (int32_t k = 0; k < nc; k++) {
        while (j < nf && fine[j] == 1)
            j++;
        start[k] = end[k] = j;
        if (coarse[k] == 1)
            continue;
        int64_t p = 1;
        while (j < nf && p < coarse[k])
            p *= fine[j++];
        if (p != coarse[k])
            return false;
        end[k] = j;
    }
    while (j < nf && fine[j] == 1)
        j++;
    return j == nf;
}

/* Reshape(v, dims) into *out where v's dims differ (else v itself). */
static sg_status reshape_to(sg_rw *L, int32_t v, const int64_t *dims, int32_t rank, int32_t *out)
{
    int64_t have[SEGRT_MAX_RANK];
    int32_t hr;
    if (static_dims(L->g, v, have, &hr) && hr == rank && memcmp(have, dims, sizeof(int64_t) * (size_t)rank) == 0) {
        if (*out < 0) {
            *out = v;
            return SEGRT_OK;
        }
    }
    int32_t shape;
    SG_TRY(sg_rw_ints(L, dims, rank, &shape));
    return sg_rw_emit2(L, SG_OP_RESHAPE, v, shape, L->g->values[v].dtype, out);
}

static sg_status fuse(sg_rw *L, const sg_node *n, bool *done)
{
    sg_graph *g = L->g;
    /* Only a MatMul whose first operand a Softmax makes (through Reshapes)
     * counts the graph's uses: the others cannot end a chain. */
    const sg_node *p = n->n_inputs == 2 ? producer(g, n->inputs[0]) : NULL;
    while (p && p->op == SG_OP_RESHAPE)
        p = producer(g, p->inputs[0]);
    if (!p || p->op != SG_OP_SOFTMAX)
        return SEGRT_OK;
    int32_t *uses = sg_graph_use_counts(g);
    if (!uses)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    match m = {.g = g, .uses = uses};
    bool ok = match_chain(&m, n);
    free(uses);
    if (!ok)
        return SEGRT_OK;
    /* Every stage's dims, and the finest batch grouping among them. */
    int64_t dims[MAX_STAGES][SEGRT_MAX_RANK];
    int32_t rank[MAX_STAGES], fine = -1, fine_n = -1;
    for (int32_t s = 0; s < m.n_stages; s++) {
        if (!static_dims(g, m.stages[s], dims[s], &rank[s]) || rank[s] < 2)
            return SEGRT_OK;
        int32_t big = 0;
        for (int32_t d = 0; d < rank[s] - 2; d++)
            big += dims[s][d] != 1;
        if (big > fine_n || (big == fine_n && rank[s] > rank[fine]))
            fine = s, fine_n = big;
    }
    int32_t nf = rank[fine] - 2, start[SEGRT_MAX_RANK], end[SEGRT_MAX_RANK];
    const int64_t *F = dims[fine];
    for (int32_t s = 0; s < m.n_stages; s++)
        if (!group_dims(F, nf, dims[s], rank[s] - 2, start, end))
            return SEGRT_OK;
    /* Q, K, V at the fine batch dims, their last two dims kept. */
    int32_t in[3 + MAX_MASKS], src[3] = {m.q, m.k, m.v};
    for (int32_t i = 0; i < 3; i++) {
        int64_t want[SEGRT_MAX_RANK], have[SEGRT_MAX_RANK];
        int32_t hr;
        static_dims(g, src[i], have, &hr);
        memcpy(want, F, sizeof(int64_t) * (size_t)nf);
        want[nf] = have[hr - 2];
        want[nf + 1] = have[hr - 1];
        in[i] = -1;
        SG_TRY(reshape_to(L, src[i], want, nf + 2, &in[i]));
    }
    /* Each mask: numpy-broadcast to its stage's dims, its full dims split
     * into the fine ones they group, its broadcast ones 1. */
    for (int32_t i = 0; i < m.n_masks; i++) {
        int32_t s = m.mask_stage[i], rs = rank[s], mr;
        int64_t md[SEGRT_MAX_RANK], pad[SEGRT_MAX_RANK], want[SEGRT_MAX_RANK];
        static_dims(g, m.masks[i], md, &mr);
        if (mr > rs)
            return SEGRT_OK;
        for (int32_t d = 0; d < rs; d++)
            pad[d] = d < rs - mr ? 1 : md[d - (rs - mr)];
        group_dims(F, nf, dims[s], rs - 2, start, end);
        for (int32_t d = 0; d < nf; d++)
            want[d] = 1;
        for (int32_t k = 0; k < rs - 2; k++)
            for (int32_t d = start[k]; pad[k] != 1 && d < end[k]; d++)
                want[d] = F[d];
        want[nf] = pad[rs - 2];
        want[nf + 1] = pad[rs - 1];
        in[3 + i] = -1;
        SG_TRY(reshape_to(L, m.masks[i], want, nf + 2, &in[3 + i]));
    }
    sg_dtype dt = g->values[n->outputs[0]].dtype;
    int32_t y = n->outputs[0], fused = -1;
    int64_t ydims[SEGRT_MAX_RANK], fdims[SEGRT_MAX_RANK];
    int32_t yr;
    static_dims(g, y, ydims, &yr);
    memcpy(fdims, F, sizeof(int64_t) * (size_t)nf);
    fdims[nf] = ydims[yr - 2];
    fdims[nf + 1] = ydims[yr - 1];
    bool same = yr == nf + 2 && memcmp(ydims, fdims, sizeof(int64_t) * (size_t)yr) == 0;
    if (same)
        fused = y;
    sg_node *node;
    SG_TRY(sg_rw_emit(L, SG_OP_SDPA, in, 3 + m.n_masks, dt, &fused, &node));
    sg_attr *a;
    SG_TRY(sg_rw_add_attr(node, "scale", SG_ATTR_FLOAT, &a));
    a->f = (float)m.scale;
    SG_TRY(sg_rw_add_int_attr(node, "k_transposed", m.k_transposed));
    if (!same) {
        int32_t shape;
        SG_TRY(sg_rw_ints(L, ydims, yr, &shape));
        SG_TRY(sg_rw_emit2(L, SG_OP_RESHAPE, fused, shape, dt, &y));
    }
    *done = true;
    return SEGRT_OK;
}

sg_status sg_pass_fuse_attention(sg_graph *g, int32_t *changed)
{
    return sg_rw_rewrite_op(g, "fused", SG_OP_MAT_MUL, fuse, changed);
}
