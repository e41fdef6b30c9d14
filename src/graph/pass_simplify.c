#include "graph/infer.h"
#include "graph/passes.h"

#include <stdlib.h>
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

/* True when every element of constant input i equals want (an absent or
 * empty input counts: Dropout's ratio, Pad's pads, Slice's steps, Resize's
 * scales). */
static bool const_input_all(const sg_graph *g, const sg_node *n, int32_t i, double want)
{
    const sg_value *v = sg_infer_input(g, n, i);
    if (!v)
        return true;
    int64_t numel;
    if (!v->data || !sg_shape_numel(&v->shape, &numel))
        return false;
    const void *d = sg_blob_data(v->data);
    for (int64_t k = 0; k < numel; k++)
        if (sg_dtype_load_f64(v->dtype, d, k) != want)
            return false;
    return true;
}

/* A Resize to its input's own dims at scale 1: every
 * coordinate transform maps each output coordinate onto the input's same
 * one exactly (x + 0.5 and x * (n - 1) are exact in float below 2^22), so
 * every mode reads that one sample alone. Not tf_crop_and_resize, whose
 * region of interest moves them. Sizes equal to the input's dims give
 * scale 1 under every aspect-ratio policy. */
static bool resize_is_identity(const sg_graph *g, const sg_node *n, const sg_value *x, const sg_value *y)
{
    if (!same_static_shape(&x->shape, &y->shape))
        return false;
    for (int32_t d = 0; d < x->shape.rank; d++)
        if (x->shape.d[d].size >= ((int64_t)1 << 22))
            return false;
    const char *coord = sg_attr_string(n, "coordinate_transformation_mode", "half_pixel");
    return strcmp(coord, "tf_crop_and_resize") != 0 && const_input_all(g, n, 2, 1.0);
}

/* Who reads what, kept up to date as the pass rewires the graph, so that a
 * removal costs the readers it moves rather than a scan of the graph (the
 * scans made the pass quadratic: 20,000 no-ops in a chain took 3 s). Every
 * input slot (node, position) is on the list of the value it reads; a
 * slot's node may have died since (the pass then leaves it alone, as it
 * leaves dead nodes). The graph's output positions of each value are
 * chained the same way. */
typedef struct readers {
    int32_t *live;     /* per value: input slots of live nodes reading it */
    int32_t *head;     /* per value: first slot reading it, or -1 */
    int32_t *tail;     /* per value: last slot reading it, or -1 */
    int32_t *next;     /* per slot: the next slot reading the same value, or -1 */
    int32_t *node;     /* per slot: its node */
    int32_t *pos;      /* per slot: its input position */
    int32_t *out_head; /* per value: first position in g->outputs, or -1 */
    int32_t *out_next; /* per output position: the next of the same value, or -1 */
} readers;

static void readers_free(readers *r)
{
    free(r->live);
    free(r->head);
    free(r->tail);
    free(r->next);
    free(r->node);
    free(r->pos);
    free(r->out_head);
    free(r->out_next);
}

static sg_status readers_init(const sg_graph *g, readers *r)
{
    int64_t n_slots = 0;
    for (int32_t i = 0; i < g->n_nodes; i++)
        n_slots += g->nodes[i].n_inputs;
    if (n_slots >= INT32_MAX)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "the graph has too many edges (%lld)", (long long)n_slots);
    size_t nv = (size_t)g->n_values + 1, ns = (size_t)n_slots + 1;
    memset(r, 0, sizeof *r);
    r->live = sg_calloc(nv, sizeof(int32_t));
    r->head = sg_malloc(nv * sizeof(int32_t));
    r->tail = sg_malloc(nv * sizeof(int32_t));
    r->next = sg_malloc(ns * sizeof(int32_t));
    r->node = sg_malloc(ns * sizeof(int32_t));
    r->pos = sg_malloc(ns * sizeof(int32_t));
    r->out_head = sg_malloc(nv * sizeof(int32_t));
    r->out_next = sg_malloc(((size_t)g->n_outputs + 1) * sizeof(int32_t));
    if (!r->live || !r->head || !r->tail || !r->next || !r->node || !r->pos || !r->out_head || !r->out_next) {
        readers_free(r);
        return SEGRT_ERROR_OUT_OF_MEMORY;
    }
    for (size_t v = 0; v < nv; v++)
        r->head[v] = r->tail[v] = r->out_head[v] = -1;
    int32_t slot = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const sg_node *n = &g->nodes[i];
        for (int32_t k = 0; k < n->n_inputs; k++, slot++) {
            int32_t v = n->inputs[k];
            r->node[slot] = i;
            r->pos[slot] = k;
            r->next[slot] = -1;
            if (v < 0)
                continue;
            if (r->tail[v] >= 0)
                r->next[r->tail[v]] = slot;
            else
                r->head[v] = slot;
            r->tail[v] = slot;
            r->live[v] += !n->dead;
        }
    }
    for (int32_t j = g->n_outputs - 1; j >= 0; j--) {
        r->out_next[j] = r->out_head[g->outputs[j]];
        r->out_head[g->outputs[j]] = j;
    }
    return SEGRT_OK;
}

static bool value_is_read(const sg_graph *g, const readers *r, int32_t v)
{
    return g->values[v].is_output || r->live[v] > 0;
}

/* Whether node n passes its first input through unchanged. */
static bool is_noop(const sg_graph *g, const readers *r, const sg_node *n)
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
        return const_input_all(g, n, 2, 0.0) &&
               (n->n_outputs < 2 || n->outputs[1] < 0 || !value_is_read(g, r, n->outputs[1]));
    case SG_OP_PAD:
        return const_input_all(g, n, 1, 0.0) && same_static_shape(&x->shape, &y->shape);
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
        return const_input_all(g, n, 4, 1.0) && same_static_shape(&x->shape, &y->shape);
    case SG_OP_CONCAT:
        return n->n_inputs == 1;
    case SG_OP_RESIZE:
        return resize_is_identity(g, n, x, y);
    default:
        return false;
    }
}

/* Makes every reader of value `from` read `to` instead. When `from` is a
 * graph output, `to` takes over its name and place, which is possible only
 * when `to` is a plain intermediate. */
static bool redirect(sg_graph *g, readers *r, int32_t from, int32_t to)
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
        for (int32_t j = r->out_head[from]; j >= 0; j = r->out_next[j])
            g->outputs[j] = to;
        /* to was no output: from's positions become its own. */
        r->out_head[to] = r->out_head[from];
        r->out_head[from] = -1;
    }
    if (r->head[from] < 0)
        return true;
    for (int32_t slot = r->head[from]; slot >= 0; slot = r->next[slot]) {
        sg_node *n = &g->nodes[r->node[slot]];
        if (n->dead)
            continue; /* left reading `from`, as a dead node keeps what it read */
        n->inputs[r->pos[slot]] = to;
        r->live[from]--;
        r->live[to]++;
    }
    /* The slots of dead nodes move too, and are passed over there alike. */
    if (r->tail[to] >= 0)
        r->next[r->tail[to]] = r->head[from];
    else
        r->head[to] = r->head[from];
    r->tail[to] = r->tail[from];
    r->head[from] = r->tail[from] = -1;
    return true;
}

/* CastLike(x, like) is Cast(x, to = like's dtype) once that dtype is
 * known (its values are never read): the backends then need Cast only. */
static sg_status cast_like_to_cast(sg_graph *g, int32_t *changed)
{
    for (int32_t i = 0; i < g->n_nodes; i++) {
        sg_node *n = &g->nodes[i];
        if (n->dead || n->op != SG_OP_CAST_LIKE || n->n_inputs < 2 || n->inputs[1] < 0 ||
            g->values[n->inputs[1]].dtype == SEGRT_DTYPE_UNDEFINED)
            continue;
        sg_attr *a = realloc(n->attrs, sizeof *a * (size_t)(n->n_attrs + 1));
        if (!a)
            return SEGRT_ERROR_OUT_OF_MEMORY;
        n->attrs = a;
        memset(&a[n->n_attrs], 0, sizeof *a);
        if (!(a[n->n_attrs].name = sg_strdup("to")))
            return SEGRT_ERROR_OUT_OF_MEMORY;
        a[n->n_attrs].kind = SG_ATTR_INT;
        a[n->n_attrs].i = (int64_t)g->values[n->inputs[1]].dtype; /* segrt's dtypes are ONNX's numbers */
        n->n_attrs++;
        n->op = SG_OP_CAST;
        n->n_inputs = 1;
        if (changed)
            (*changed)++;
    }
    return SEGRT_OK;
}

sg_status sg_pass_simplify(sg_graph *g, int32_t *changed)
{
    SG_TRY(cast_like_to_cast(g, changed));
    readers r = {0};
    SG_TRY(readers_init(g, &r));
    for (int32_t i = 0; i < g->n_nodes; i++) {
        sg_node *n = &g->nodes[i];
        if (n->dead || !is_noop(g, &r, n))
            continue;
        if (redirect(g, &r, n->outputs[0], n->inputs[0])) {
            n->dead = true;
            for (int32_t k = 0; k < n->n_inputs; k++)
                if (n->inputs[k] >= 0)
                    r.live[n->inputs[k]]--;
            if (changed)
                (*changed)++;
        }
    }
    readers_free(&r);
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
