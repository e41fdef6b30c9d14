#include "graph/infer.h"
#include "graph/passes.h"

#include <string.h>

static bool same_static_shape(const sg_shape *a, const sg_shape *b)
{
    if (!sg_shape_is_static(a) || !sg_shape_is_static(b) || a->rank != b->rank)
        return false;
    for (int32_t i = 0; i < a->rank; i++)
        if (a->d[i].size != b->d[i].size)
            return false;
    return true;
}

/* True when every element of constant input i is zero (absent counts). */
static bool const_input_all_zero(const sg_graph *g, const sg_node *n, int32_t i)
{
    const sg_value *v = sg_infer_input(g, n, i);
    if (!v)
        return true;
    int64_t numel;
    if (!v->data || !sg_shape_numel(&v->shape, &numel))
        return false;
    const void *d = sg_blob_data(v->data);
    for (int64_t k = 0; k < numel; k++)
        if (sg_dtype_load_f64(v->dtype, d, k) != 0)
            return false;
    return true;
}

static bool const_input_all_one(const sg_graph *g, const sg_node *n, int32_t i)
{
    const sg_value *v = sg_infer_input(g, n, i);
    if (!v)
        return true;
    int64_t numel;
    if (!v->data || !sg_shape_numel(&v->shape, &numel))
        return false;
    const void *d = sg_blob_data(v->data);
    for (int64_t k = 0; k < numel; k++)
        if (sg_dtype_load_i64(v->dtype, d, k) != 1)
            return false;
    return true;
}

static bool value_is_read(const sg_graph *g, int32_t v)
{
    if (g->values[v].is_output)
        return true;
    for (int32_t i = 0; i < g->n_nodes; i++)
        for (int32_t k = 0; !g->nodes[i].dead && k < g->nodes[i].n_inputs; k++)
            if (g->nodes[i].inputs[k] == v)
                return true;
    return false;
}

/* Whether node n passes its first input through unchanged. */
static bool is_noop(const sg_graph *g, const sg_node *n)
{
    const sg_value *x = sg_infer_input(g, n, 0);
    if (!x || n->outputs[0] < 0)
        return false;
    const sg_value *y = &g->values[n->outputs[0]];
    if (x->dtype != y->dtype && n->op != SG_OP_IDENTITY && n->op != SG_OP_DROPOUT)
        return false;
    switch (n->op) {
    case SG_OP_IDENTITY:
        return true;
    case SG_OP_DROPOUT:
        /* Inference: Dropout is the identity unless training_mode is a
         * constant true; its mask output must be unread for it to go. */
        return const_input_all_zero(g, n, 2) &&
               (n->n_outputs < 2 || n->outputs[1] < 0 || !value_is_read(g, n->outputs[1]));
    case SG_OP_PAD:
        return const_input_all_zero(g, n, 1) && same_static_shape(&x->shape, &y->shape);
    case SG_OP_RESHAPE:
    case SG_OP_FLATTEN:
    case SG_OP_SQUEEZE:
    case SG_OP_UNSQUEEZE:
    case SG_OP_EXPAND:
    case SG_OP_TILE:
        return same_static_shape(&x->shape, &y->shape);
    case SG_OP_CAST:
        return x->dtype != SEGRT_DTYPE_UNDEFINED && x->dtype == y->dtype;
    case SG_OP_TRANSPOSE: {
        int32_t np;
        const int64_t *perm = sg_attr_ints(n, "perm", &np);
        if (!perm || x->shape.rank < 0 || np != x->shape.rank)
            return x->shape.rank >= 0 && x->shape.rank <= 1;
        for (int32_t i = 0; i < np; i++)
            if (perm[i] != i)
                return false;
        return true;
    }
    case SG_OP_SLICE:
        return const_input_all_one(g, n, 4) && same_static_shape(&x->shape, &y->shape);
    case SG_OP_CONCAT:
        return n->n_inputs == 1;
    default:
        return false;
    }
}

/* Makes every reader of value `from` read `to` instead. When `from` is a
 * graph output, `to` takes over its name and place, which is possible only
 * when `to` is a plain intermediate. */
static bool redirect(sg_graph *g, int32_t from, int32_t to)
{
    sg_value *f = &g->values[from], *t = &g->values[to];
    if (f->is_output) {
        if (t->is_output || t->is_input || t->data)
            return false;
        char *name = sg_strdup(f->name);
        if (!name)
            return false;
        free(t->name);
        t->name = name;
        /* The old value keeps a distinct name until compaction drops it. */
        f->name[0] = '\0';
        t->is_output = true;
        t->declared = f->declared;
        f->is_output = false;
        for (int32_t i = 0; i < g->n_outputs; i++)
            if (g->outputs[i] == from)
                g->outputs[i] = to;
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        sg_node *n = &g->nodes[i];
        for (int32_t k = 0; !n->dead && k < n->n_inputs; k++)
            if (n->inputs[k] == from)
                n->inputs[k] = to;
    }
    return true;
}

sg_status sg_pass_simplify(sg_graph *g, int32_t *changed)
{
    for (int32_t i = 0; i < g->n_nodes; i++) {
        sg_node *n = &g->nodes[i];
        if (n->dead || !is_noop(g, n))
            continue;
        if (redirect(g, n->outputs[0], n->inputs[0])) {
            n->dead = true;
            if (changed)
                (*changed)++;
        }
    }
    return SEGRT_OK;
}

sg_status sg_pass_dead_nodes(sg_graph *g, int32_t *changed)
{
    uint8_t *needed = sg_calloc((size_t)g->n_values + 1, 1);
    if (!needed)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    for (int32_t i = 0; i < g->n_outputs; i++)
        needed[g->outputs[i]] = 1;
    for (int32_t i = g->n_nodes - 1; i >= 0; i--) {
        sg_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        bool live = false;
        for (int32_t k = 0; k < n->n_outputs && !live; k++)
            live = n->outputs[k] >= 0 && needed[n->outputs[k]];
        if (!live) {
            n->dead = true;
            if (changed)
                (*changed)++;
            continue;
        }
        for (int32_t k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0)
                needed[n->inputs[k]] = 1;
    }
    free(needed);
    return SEGRT_OK;
}
