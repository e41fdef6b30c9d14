/* Rewriting nodes as others: rewrite.h says what each helper does. */
#include "graph/rewrite.h"
#include "graph/infer.h"
#include "graph/passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sg_status sg_rw_value(sg_rw *L, sg_dtype dtype, int32_t *out)
{
    char name[512];
    snprintf(name, sizeof name, "%s/%s_%d", L->base, L->tag, L->serial++);
    SG_TRY(sg_graph_add_value(L->g, name, out));
    L->g->values[*out].dtype = dtype;
    L->g->values[*out].shape.rank = SG_RANK_UNKNOWN;
    return SEGRT_OK;
}

/* A constant of `dtype` with `rank` dims (`numel` elements of `data`). */
sg_status sg_rw_const(sg_rw *L, sg_dtype dtype, int32_t rank, const int64_t *dims, const void *data, size_t bytes,
                      int32_t *out)
{
    sg_blob *b;
    SG_TRY(sg_blob_new(bytes, false, &b));
    memcpy(sg_blob_data(b), data, bytes);
    sg_status s = sg_rw_value(L, dtype, out);
    if (s != SEGRT_OK) {
        sg_blob_unref(b);
        return s;
    }
    sg_value *v = &L->g->values[*out];
    v->shape.rank = rank;
    for (int32_t d = 0; d < rank; d++) {
        v->shape.d[d].size = dims[d];
        v->shape.d[d].sym = SG_NO_SYM;
    }
    v->declared = v->shape;
    v->data = b;
    return SEGRT_OK;
}

sg_status sg_rw_scalar_f32(sg_rw *L, float x, int32_t *out)
{
    return sg_rw_const(L, SEGRT_DTYPE_FLOAT32, 0, NULL, &x, sizeof x, out);
}

/* A new attribute `name` of node n (zeroed but for its name and kind),
 * counted at once: the node frees whatever it holds. */
sg_status sg_rw_add_attr(sg_node *n, const char *name, sg_attr_kind kind, sg_attr **out)
{
    sg_attr *a = realloc(n->attrs, sizeof *a * (size_t)(n->n_attrs + 1));
    if (!a)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    n->attrs = a;
    *out = &a[n->n_attrs++];
    memset(*out, 0, sizeof **out);
    (*out)->kind = kind;
    return ((*out)->name = sg_strdup(name)) ? SEGRT_OK : SEGRT_ERROR_OUT_OF_MEMORY;
}

sg_status sg_rw_add_int_attr(sg_node *n, const char *name, int64_t value)
{
    sg_attr *a;
    SG_TRY(sg_rw_add_attr(n, name, SG_ATTR_INT, &a));
    a->i = value;
    return SEGRT_OK;
}

/* A node op(inputs) writing value *out: a new value of `dtype`, or the
 * given one where *out >= 0 (the lowered node's output). */
sg_status sg_rw_emit(sg_rw *L, sg_op op, const int32_t *inputs, int32_t n_inputs, sg_dtype dtype, int32_t *out,
                     sg_node **node)
{
    if (*out < 0)
        SG_TRY(sg_rw_value(L, dtype, out));
    char name[512];
    snprintf(name, sizeof name, "%s/%s_%d", L->base, L->tag, L->serial++);
    sg_node *n;
    SG_TRY(sg_graph_add_node(L->g, op, name, n_inputs, 1, &n));
    memcpy(n->inputs, inputs, sizeof(int32_t) * (size_t)n_inputs);
    n->outputs[0] = *out;
    L->g->values[*out].producer = L->g->n_nodes - 1;
    /* In float32 whatever the plan's precision (SG_ATTR_FP32): squares
     * of activations overflow float16, and quantization's quotients must
     * round as the reference's float32 ones do. (Attention's products are
     * left to the precision, as PyTorch's autocast leaves them.) */
    if (L->fp32)
        SG_TRY(sg_rw_add_int_attr(n, SG_ATTR_FP32, 1));
    if (node)
        *node = n;
    return SEGRT_OK;
}

sg_status sg_rw_emit1(sg_rw *L, sg_op op, int32_t a, sg_dtype dtype, int32_t *out)
{
    return sg_rw_emit(L, op, &a, 1, dtype, out, NULL);
}

sg_status sg_rw_emit2(sg_rw *L, sg_op op, int32_t a, int32_t b, sg_dtype dtype, int32_t *out)
{
    int32_t in[2] = {a, b};
    return sg_rw_emit(L, op, in, 2, dtype, out, NULL);
}

/* v as `to` into *out (a new value where *out < 0; v itself where it is
 * of that type already and no value is given). */
sg_status sg_rw_cast(sg_rw *L, int32_t v, sg_dtype to, int32_t *out)
{
    if (*out < 0 && L->g->values[v].dtype == to) {
        *out = v;
        return SEGRT_OK;
    }
    sg_node *n;
    SG_TRY(sg_rw_emit(L, SG_OP_CAST, &v, 1, to, out, &n));
    return sg_rw_add_int_attr(n, "to", (int64_t)to); /* segrt's dtypes are ONNX's numbers */
}

/* The scalar x as a constant of type dt (a float32 one, cast where dt
 * differs: the optimization after the sg_rw folds the Cast). */
sg_status sg_rw_scalar_as(sg_rw *L, float x, sg_dtype dt, int32_t *out)
{
    int32_t c;
    SG_TRY(sg_rw_scalar_f32(L, x, &c));
    *out = -1;
    return sg_rw_cast(L, c, dt, out);
}

sg_status sg_rw_ints(sg_rw *L, const int64_t *v, int64_t n, int32_t *out)
{
    return sg_rw_const(L, SEGRT_DTYPE_INT64, 1, &n, v, sizeof(int64_t) * (size_t)n, out);
}

/* Transpose(v, perm) into *out (a new value where *out < 0). */
sg_status sg_rw_transpose(sg_rw *L, int32_t v, const int64_t *perm, int64_t rank, sg_dtype dt, int32_t *out)
{
    sg_node *t;
    sg_attr *a;
    SG_TRY(sg_rw_emit(L, SG_OP_TRANSPOSE, &v, 1, dt, out, &t));
    SG_TRY(sg_rw_add_attr(t, "perm", SG_ATTR_INTS, &a));
    if (!(a->ints = sg_malloc(sizeof(int64_t) * (size_t)(rank ? rank : 1))))
        return SEGRT_ERROR_OUT_OF_MEMORY;
    a->n = (int32_t)rank;
    memcpy(a->ints, perm, sizeof(int64_t) * (size_t)rank);
    return SEGRT_OK;
}

/* Rewrites each live node of g for which pick gives a sg_rw; then,
 * where anything was added (a sg_rw that gave up may have added what
 * nothing reads), drops the dead, sorts and infers the graph. */
sg_status sg_rw_rewrite(sg_graph *g, const char *tag, sg_rw_fn (*pick)(const sg_graph *g, const sg_node *n, void *user),
                        void *user, int32_t *changed)
{
    int32_t n0 = g->n_nodes, lowered = 0;
    for (int32_t i = 0; i < n0; i++) {
        sg_rw_fn fn = g->nodes[i].dead ? NULL : pick(g, &g->nodes[i], user);
        if (!fn)
            continue;
        /* The node is copied: adding nodes moves the array. */
        sg_node n = g->nodes[i];
        char *base = sg_strdup(n.name && n.name[0] ? n.name : sg_op_name(n.op));
        if (!base)
            return SEGRT_ERROR_OUT_OF_MEMORY;
        sg_rw L = {g, base, tag, 0, false};
        bool done = false;
        sg_status s = fn(&L, &n, &done);
        free(base);
        SG_TRY(s);
        if (done) {
            sg_node *old = &g->nodes[i];
            old->dead = true;
            for (int32_t k = 0; k < old->n_outputs; k++)
                old->outputs[k] = -1; /* the new nodes write them */
            lowered++;
        }
    }
    if (g->n_nodes != n0) {
        /* The output values are the new nodes' now: the replaced nodes
         * gone, producers and order (the new nodes are at the end, after
         * their readers, and the dead-node pass walks readers before
         * producers), then what nothing reads goes, then shapes and
         * dtypes of the new values. */
        int32_t dead = 0;
        SG_TRY(sg_graph_compact(g));
        SG_TRY(sg_graph_toposort(g));
        SG_TRY(sg_pass_dead_nodes(g, &dead));
        SG_TRY(sg_graph_compact(g));
        SG_TRY(sg_graph_infer(g));
    }
    *changed += lowered;
    return SEGRT_OK;
}

typedef struct op_pick {
    sg_op op;
    sg_rw_fn fn;
} op_pick;

static sg_rw_fn pick_op(const sg_graph *g, const sg_node *n, void *user)
{
    (void)g;
    const op_pick *p = user;
    return n->op == p->op ? p->fn : NULL;
}

sg_status sg_rw_rewrite_op(sg_graph *g, const char *tag, sg_op op, sg_rw_fn fn, int32_t *changed)
{
    op_pick p = {op, fn};
    return sg_rw_rewrite(g, tag, pick_op, &p, changed);
}
