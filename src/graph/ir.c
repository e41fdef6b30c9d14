#include "graph/ir.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

sg_status sg_graph_new(sg_graph **out)
{
    sg_graph *g = sg_calloc(1, sizeof *g);
    if (!g)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    g->path = sg_strdup("<model>");
    g->producer_name = sg_strdup("");
    g->producer_version = sg_strdup("");
    if (!g->path || !g->producer_name || !g->producer_version) {
        sg_graph_free(g);
        return SEGRT_ERROR_OUT_OF_MEMORY;
    }
    *out = g;
    return SEGRT_OK;
}

static void attr_free(sg_attr *a)
{
    free(a->name);
    free(a->s);
    free(a->ints);
    free(a->floats);
    for (int32_t i = 0; a->strings && i < a->n; i++)
        free(a->strings[i]);
    free(a->strings);
    sg_blob_unref(a->t_data);
    sg_graph_free(a->graph);
}

static void node_free(sg_node *n)
{
    free(n->name);
    free(n->inputs);
    free(n->outputs);
    for (int32_t i = 0; i < n->n_attrs; i++)
        attr_free(&n->attrs[i]);
    free(n->attrs);
}

void sg_graph_free(sg_graph *g)
{
    if (!g)
        return;
    for (int32_t i = 0; i < g->n_values; i++) {
        free(g->values[i].name);
        sg_blob_unref(g->values[i].data);
    }
    free(g->values);
    for (int32_t i = 0; i < g->n_nodes; i++)
        node_free(&g->nodes[i]);
    free(g->nodes);
    free(g->inputs);
    free(g->outputs);
    for (int32_t i = 0; i < g->n_syms; i++)
        free(g->syms[i]);
    free(g->syms);
    free(g->sym_size);
    for (int32_t i = 0; i < g->n_meta; i++) {
        free(g->meta[i].key);
        free(g->meta[i].value);
    }
    free(g->meta);
    free(g->path);
    free(g->producer_name);
    free(g->producer_version);
    free(g);
}

sg_status sg_graph_add_value(sg_graph *g, const char *name, int32_t *out)
{
    SG_TRY(sg_grow((void **)&g->values, &g->cap_values, g->n_values + 1, sizeof *g->values));
    sg_value *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    v->name = sg_strdup(name);
    if (!v->name)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    v->shape = sg_shape_unknown();
    v->declared = sg_shape_unknown();
    v->producer = -1;
    *out = g->n_values++;
    return SEGRT_OK;
}

sg_status sg_graph_add_node(sg_graph *g, sg_op op, const char *name, int32_t n_inputs,
                            int32_t n_outputs, sg_node **out)
{
    SG_TRY(sg_grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes));
    sg_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->name = sg_strdup(name);
    n->inputs = sg_malloc(sizeof(int32_t) * (size_t)(n_inputs ? n_inputs : 1));
    n->outputs = sg_malloc(sizeof(int32_t) * (size_t)(n_outputs ? n_outputs : 1));
    if (!n->name || !n->inputs || !n->outputs) {
        node_free(n);
        return SEGRT_ERROR_OUT_OF_MEMORY;
    }
    for (int32_t i = 0; i < n_inputs; i++)
        n->inputs[i] = -1;
    for (int32_t i = 0; i < n_outputs; i++)
        n->outputs[i] = -1;
    n->n_inputs = n_inputs;
    n->n_outputs = n_outputs;
    g->n_nodes++;
    *out = n;
    return SEGRT_OK;
}

sg_status sg_graph_add_input(sg_graph *g, int32_t value)
{
    SG_TRY(sg_grow((void **)&g->inputs, &g->cap_inputs, g->n_inputs + 1, sizeof *g->inputs));
    g->inputs[g->n_inputs++] = value;
    g->values[value].is_input = true;
    return SEGRT_OK;
}

sg_status sg_graph_add_output(sg_graph *g, int32_t value)
{
    SG_TRY(sg_grow((void **)&g->outputs, &g->cap_outputs, g->n_outputs + 1, sizeof *g->outputs));
    g->outputs[g->n_outputs++] = value;
    g->values[value].is_output = true;
    return SEGRT_OK;
}

sg_status sg_graph_add_meta(sg_graph *g, const char *key, const char *value)
{
    SG_TRY(sg_grow((void **)&g->meta, &g->cap_meta, g->n_meta + 1, sizeof *g->meta));
    sg_meta_entry *e = &g->meta[g->n_meta];
    e->key = sg_strdup(key);
    e->value = sg_strdup(value);
    if (!e->key || !e->value) {
        free(e->key);
        free(e->value);
        return SEGRT_ERROR_OUT_OF_MEMORY;
    }
    g->n_meta++;
    return SEGRT_OK;
}

sg_status sg_graph_intern_sym(sg_graph *g, const char *name, int32_t *out)
{
    for (int32_t i = 0; i < g->n_syms; i++)
        if (strcmp(g->syms[i], name) == 0) {
            *out = i;
            return SEGRT_OK;
        }
    return sg_graph_add_sym(g, name, out);
}

sg_status sg_graph_add_sym(sg_graph *g, const char *name, int32_t *out)
{
    int32_t cap = g->cap_syms;
    SG_TRY(sg_grow((void **)&g->syms, &cap, g->n_syms + 1, sizeof *g->syms));
    SG_TRY(sg_grow((void **)&g->sym_size, &g->cap_syms, g->n_syms + 1, sizeof *g->sym_size));
    g->syms[g->n_syms] = sg_strdup(name);
    if (!g->syms[g->n_syms])
        return SEGRT_ERROR_OUT_OF_MEMORY;
    g->sym_size[g->n_syms] = SG_DIM_UNKNOWN;
    *out = g->n_syms++;
    return SEGRT_OK;
}

sg_status sg_attr_copy(const sg_attr *a, sg_attr *d)
{
    memset(d, 0, sizeof *d);
    d->kind = a->kind;
    d->i = a->i;
    d->f = a->f;
    d->n = a->n;
    d->t_dtype = a->t_dtype;
    d->t_rank = a->t_rank;
    memcpy(d->t_dims, a->t_dims, sizeof d->t_dims);
    d->t_data = sg_blob_ref(a->t_data);
    d->name = sg_strdup(a->name);
    if (!d->name)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    if (a->s && !(d->s = sg_strdup(a->s)))
        return SEGRT_ERROR_OUT_OF_MEMORY;
    if (a->ints) {
        if (!(d->ints = sg_malloc(sizeof(int64_t) * (size_t)(a->n ? a->n : 1))))
            return SEGRT_ERROR_OUT_OF_MEMORY;
        memcpy(d->ints, a->ints, sizeof(int64_t) * (size_t)a->n);
    }
    if (a->floats) {
        if (!(d->floats = sg_malloc(sizeof(float) * (size_t)(a->n ? a->n : 1))))
            return SEGRT_ERROR_OUT_OF_MEMORY;
        memcpy(d->floats, a->floats, sizeof(float) * (size_t)a->n);
    }
    if (a->strings) {
        if (!(d->strings = sg_calloc((size_t)(a->n ? a->n : 1), sizeof(char *))))
            return SEGRT_ERROR_OUT_OF_MEMORY;
        for (int32_t i = 0; i < a->n; i++)
            if (!(d->strings[i] = sg_strdup(a->strings[i])))
                return SEGRT_ERROR_OUT_OF_MEMORY;
    }
    if (a->graph)
        SG_TRY(sg_graph_clone(a->graph, &d->graph));
    return SEGRT_OK;
}

static sg_status clone_into(const sg_graph *g, sg_graph *c)
{
    free(c->path);
    free(c->producer_name);
    free(c->producer_version);
    c->path = sg_strdup(g->path);
    c->producer_name = sg_strdup(g->producer_name);
    c->producer_version = sg_strdup(g->producer_version);
    if (!c->path || !c->producer_name || !c->producer_version)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    c->ir_version = g->ir_version;
    c->opset = g->opset;
    for (int32_t i = 0; i < g->n_syms; i++) { /* distinct already */
        int32_t s;
        SG_TRY(sg_graph_add_sym(c, g->syms[i], &s));
        c->sym_size[s] = g->sym_size[i];
    }
    for (int32_t i = 0; i < g->n_meta; i++)
        SG_TRY(sg_graph_add_meta(c, g->meta[i].key, g->meta[i].value));
    for (int32_t i = 0; i < g->n_values; i++) {
        int32_t idx;
        SG_TRY(sg_graph_add_value(c, g->values[i].name, &idx));
        char *name = c->values[idx].name;
        c->values[idx] = g->values[i];
        c->values[idx].name = name;
        c->values[idx].data = sg_blob_ref(g->values[i].data);
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const sg_node *n = &g->nodes[i];
        sg_node *d;
        SG_TRY(sg_graph_add_node(c, n->op, n->name, n->n_inputs, n->n_outputs, &d));
        memcpy(d->inputs, n->inputs, sizeof(int32_t) * (size_t)n->n_inputs);
        memcpy(d->outputs, n->outputs, sizeof(int32_t) * (size_t)n->n_outputs);
        d->dead = n->dead;
        if (n->n_attrs) {
            d->attrs = sg_calloc((size_t)n->n_attrs, sizeof *d->attrs);
            if (!d->attrs)
                return SEGRT_ERROR_OUT_OF_MEMORY;
            for (int32_t a = 0; a < n->n_attrs; a++) {
                d->n_attrs = a + 1; /* counts the partly copied one for cleanup */
                SG_TRY(sg_attr_copy(&n->attrs[a], &d->attrs[a]));
            }
        }
    }
    for (int32_t i = 0; i < g->n_inputs; i++)
        SG_TRY(sg_graph_add_input(c, g->inputs[i]));
    for (int32_t i = 0; i < g->n_outputs; i++)
        SG_TRY(sg_graph_add_output(c, g->outputs[i]));
    return SEGRT_OK;
}

sg_status sg_graph_clone(const sg_graph *g, sg_graph **out)
{
    sg_graph *c;
    SG_TRY(sg_graph_new(&c));
    sg_status s = clone_into(g, c);
    if (s != SEGRT_OK) {
        sg_graph_free(c);
        return s;
    }
    *out = c;
    return SEGRT_OK;
}

/* The order toposort gives: that of sweeping the node list again and
 * again, taking each node whose inputs are all computed, so that nodes
 * already in order stay in order. Node i is taken in sweep
 *   max over its producers p of (p's sweep, plus one where p > i),
 * which Kahn's algorithm over the producer -> reader edges computes in one
 * pass; the order is by (sweep, index). (Sweeping itself took a pass over
 * the graph per node out of place.) Sets *stuck to the first node on or
 * after a cycle, or -1. */
static sg_status topo_order(const sg_graph *g, int32_t *order, int32_t *stuck)
{
    int32_t nn = g->n_nodes;
    int64_t n_edges = 0;
    for (int32_t i = 0; i < nn; i++)
        for (int32_t k = 0; k < g->nodes[i].n_inputs; k++)
            n_edges += g->nodes[i].inputs[k] >= 0 && g->values[g->nodes[i].inputs[k]].producer >= 0;
    if (n_edges >= INT32_MAX)
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "the graph has too many edges (%lld)", (long long)n_edges);
    int32_t *sweep = sg_calloc((size_t)nn + 1, sizeof *sweep);
    int32_t *waiting = sg_calloc((size_t)nn + 1, sizeof *waiting); /* inputs not computed yet */
    int32_t *edge_at = sg_calloc((size_t)nn + 2, sizeof *edge_at);
    int32_t *edges = sg_malloc(sizeof(int32_t) * (size_t)(n_edges + 1));
    int32_t *queue = sg_malloc(sizeof(int32_t) * (size_t)(nn + 1));
    sg_status s = sweep && waiting && edge_at && edges && queue ? SEGRT_OK : SEGRT_ERROR_OUT_OF_MEMORY;
    *stuck = -1;
    if (s == SEGRT_OK) {
        /* The readers of node p's outputs: edges[edge_at[p] .. edge_at[p + 1]),
         * one entry per input that reads them. */
        for (int32_t i = 0; i < nn; i++)
            for (int32_t k = 0; k < g->nodes[i].n_inputs; k++) {
                int32_t v = g->nodes[i].inputs[k];
                if (v >= 0 && g->values[v].producer >= 0) {
                    edge_at[g->values[v].producer + 2]++;
                    waiting[i]++;
                }
            }
        for (int32_t i = 2; i <= nn; i++)
            edge_at[i] += edge_at[i - 1];
        for (int32_t i = 0; i < nn; i++)
            for (int32_t k = 0; k < g->nodes[i].n_inputs; k++) {
                int32_t v = g->nodes[i].inputs[k];
                if (v >= 0 && g->values[v].producer >= 0)
                    edges[edge_at[g->values[v].producer + 1]++] = i;
            }
        int32_t head = 0, tail = 0, max_sweep = 0;
        for (int32_t i = 0; i < nn; i++)
            if (!waiting[i])
                queue[tail++] = i;
        while (head < tail) {
            int32_t p = queue[head++];
            if (sweep[p] > max_sweep)
                max_sweep = sweep[p];
            for (int32_t e = edge_at[p]; e < edge_at[p + 1]; e++) {
                int32_t r = edges[e], w = sweep[p] + (p > r ? 1 : 0);
                if (w > sweep[r])
                    sweep[r] = w;
                if (--waiting[r] == 0)
                    queue[tail++] = r;
            }
        }
        for (int32_t i = 0; i < nn && *stuck < 0 && tail < nn; i++)
            if (waiting[i])
                *stuck = i;
        /* By sweep, then by index: a counting sort, reusing edge_at. */
        if (*stuck < 0 && max_sweep < nn) {
            memset(edge_at, 0, sizeof *edge_at * ((size_t)max_sweep + 2));
            for (int32_t i = 0; i < nn; i++)
                edge_at[sweep[i] + 1]++;
            for (int32_t k = 1; k <= max_sweep; k++)
                edge_at[k] += edge_at[k - 1];
            for (int32_t i = 0; i < nn; i++)
                order[edge_at[sweep[i]]++] = i;
        }
    }
    free(sweep);
    free(waiting);
    free(edge_at);
    free(edges);
    free(queue);
    return s;
}

sg_status sg_graph_toposort(sg_graph *g)
{
    for (int32_t v = 0; v < g->n_values; v++)
        g->values[v].producer = -1;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const sg_node *n = &g->nodes[i];
        for (int32_t o = 0; o < n->n_outputs; o++) {
            int32_t v = n->outputs[o];
            if (v < 0)
                continue;
            sg_value *val = &g->values[v];
            if (val->producer >= 0 || val->data || val->is_input)
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                     "output `%s` is already defined elsewhere in the graph",
                                     val->name);
            val->producer = i;
        }
    }
    int32_t *order = sg_malloc(sizeof(int32_t) * (size_t)(g->n_nodes + 1));
    if (!order)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    int32_t stuck = -1;
    sg_status s = topo_order(g, order, &stuck);
    if (s == SEGRT_OK && stuck >= 0)
        s = sg_node_error(&g->nodes[stuck], SEGRT_ERROR_INVALID_MODEL, "the graph has a cycle through this node");
    bool sorted = true;
    for (int32_t i = 0; s == SEGRT_OK && i < g->n_nodes; i++)
        sorted &= order[i] == i;
    sg_node *nodes = NULL;
    if (s == SEGRT_OK && !sorted && !(nodes = sg_malloc(sizeof *nodes * (size_t)g->n_nodes)))
        s = SEGRT_ERROR_OUT_OF_MEMORY;
    if (nodes) {
        for (int32_t i = 0; i < g->n_nodes; i++)
            nodes[i] = g->nodes[order[i]];
        memcpy(g->nodes, nodes, sizeof *nodes * (size_t)g->n_nodes);
        free(nodes);
        for (int32_t i = 0; i < g->n_nodes; i++)
            for (int32_t o = 0; o < g->nodes[i].n_outputs; o++)
                if (g->nodes[i].outputs[o] >= 0)
                    g->values[g->nodes[i].outputs[o]].producer = i;
    }
    free(order);
    return s;
}

int32_t *sg_graph_use_counts(const sg_graph *g)
{
    int32_t *uses = sg_calloc((size_t)g->n_values + 1, sizeof *uses);
    if (!uses)
        return NULL;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const sg_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (int32_t k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0)
                uses[n->inputs[k]]++;
    }
    for (int32_t i = 0; i < g->n_outputs; i++)
        uses[g->outputs[i]]++;
    return uses;
}

sg_status sg_graph_compact(sg_graph *g)
{
    int32_t *remap = sg_malloc(sizeof(int32_t) * (size_t)(g->n_values + 1));
    uint8_t *keep = sg_calloc((size_t)g->n_values + 1, 1);
    if (!remap || !keep) {
        free(remap);
        free(keep);
        return SEGRT_ERROR_OUT_OF_MEMORY;
    }
    for (int32_t i = 0; i < g->n_inputs; i++)
        keep[g->inputs[i]] = 1;
    for (int32_t i = 0; i < g->n_outputs; i++)
        keep[g->outputs[i]] = 1;
    int32_t n_nodes = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        sg_node *n = &g->nodes[i];
        if (n->dead) {
            node_free(n);
            continue;
        }
        for (int32_t k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0)
                keep[n->inputs[k]] = 1;
        for (int32_t k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0)
                keep[n->outputs[k]] = 1;
        g->nodes[n_nodes++] = *n;
    }
    g->n_nodes = n_nodes;
    int32_t n_values = 0;
    for (int32_t v = 0; v < g->n_values; v++) {
        if (keep[v]) {
            remap[v] = n_values;
            g->values[n_values++] = g->values[v];
        } else {
            remap[v] = -1;
            free(g->values[v].name);
            sg_blob_unref(g->values[v].data);
        }
    }
    g->n_values = n_values;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        sg_node *n = &g->nodes[i];
        for (int32_t k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0)
                n->inputs[k] = remap[n->inputs[k]];
        for (int32_t k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0)
                n->outputs[k] = remap[n->outputs[k]];
    }
    for (int32_t i = 0; i < g->n_inputs; i++)
        g->inputs[i] = remap[g->inputs[i]];
    for (int32_t i = 0; i < g->n_outputs; i++)
        g->outputs[i] = remap[g->outputs[i]];
    free(remap);
    free(keep);
    for (int32_t v = 0; v < g->n_values; v++)
        g->values[v].producer = -1;
    for (int32_t i = 0; i < g->n_nodes; i++)
        for (int32_t k = 0; k < g->nodes[i].n_outputs; k++)
            if (g->nodes[i].outputs[k] >= 0)
                g->values[g->nodes[i].outputs[k]].producer = i;
    return SEGRT_OK;
}

const sg_attr *sg_attr_find(const sg_node *n, const char *name)
{
    for (int32_t i = 0; i < n->n_attrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0)
            return &n->attrs[i];
    return NULL;
}

int64_t sg_attr_int(const sg_node *n, const char *name, int64_t def)
{
    const sg_attr *a = sg_attr_find(n, name);
    return a && a->kind == SG_ATTR_INT ? a->i : def;
}

float sg_attr_float(const sg_node *n, const char *name, float def)
{
    const sg_attr *a = sg_attr_find(n, name);
    return a && a->kind == SG_ATTR_FLOAT ? a->f : def;
}

const char *sg_attr_string(const sg_node *n, const char *name, const char *def)
{
    const sg_attr *a = sg_attr_find(n, name);
    return a && a->kind == SG_ATTR_STRING ? a->s : def;
}

const int64_t *sg_attr_ints(const sg_node *n, const char *name, int32_t *count)
{
    const sg_attr *a = sg_attr_find(n, name);
    if (!a || a->kind != SG_ATTR_INTS) {
        *count = 0;
        return NULL;
    }
    *count = a->n;
    return a->ints ? a->ints : (const int64_t *)"";
}

const float *sg_attr_floats(const sg_node *n, const char *name, int32_t *count)
{
    const sg_attr *a = sg_attr_find(n, name);
    if (!a || a->kind != SG_ATTR_FLOATS) {
        *count = 0;
        return NULL;
    }
    *count = a->n;
    return a->floats ? a->floats : (const float *)"";
}

sg_status sg_node_error(const sg_node *n, sg_status status, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sg_error(status, "node `%s` (%s): %s", n->name, sg_op_name(n->op), msg);
}

sg_shape sg_shape_unknown(void)
{
    sg_shape s;
    memset(&s, 0, sizeof s);
    s.rank = SG_RANK_UNKNOWN;
    return s;
}

sg_shape sg_shape_of_dims(const int64_t *dims, int32_t rank)
{
    sg_shape s;
    memset(&s, 0, sizeof s);
    s.rank = rank;
    for (int32_t i = 0; i < rank; i++) {
        s.d[i].size = dims[i];
        s.d[i].sym = SG_NO_SYM;
    }
    return s;
}

bool sg_shape_is_static(const sg_shape *s)
{
    if (s->rank < 0)
        return false;
    for (int32_t i = 0; i < s->rank; i++)
        if (s->d[i].size < 0)
            return false;
    return true;
}

bool sg_shape_dims(const sg_shape *s, int64_t *dims)
{
    if (!sg_shape_is_static(s))
        return false;
    for (int32_t i = 0; i < s->rank; i++)
        dims[i] = s->d[i].size;
    return true;
}

bool sg_shape_numel(const sg_shape *s, int64_t *out)
{
    int64_t dims[SEGRT_MAX_RANK];
    return sg_shape_dims(s, dims) && sg_dims_product(dims, s->rank, out);
}

const char *sg_shape_format(const sg_graph *g, const sg_shape *s, char *buf, size_t cap)
{
    if (s->rank < 0) {
        snprintf(buf, cap, "?");
        return buf;
    }
    if (s->rank == 0) {
        snprintf(buf, cap, "scalar");
        return buf;
    }
    size_t used = 0;
    buf[0] = '\0';
    for (int32_t i = 0; i < s->rank && used < cap; i++) {
        const char *sep = i ? "x" : "";
        int n;
        if (s->d[i].size >= 0)
            n = snprintf(buf + used, cap - used, "%s%lld", sep, (long long)s->d[i].size);
        else if (g && s->d[i].sym >= 0 && s->d[i].sym < g->n_syms)
            n = snprintf(buf + used, cap - used, "%s%s", sep, g->syms[s->d[i].sym]);
        else
            n = snprintf(buf + used, cap - used, "%s?", sep);
        if (n < 0)
            break;
        used += (size_t)n;
    }
    return buf;
}

sg_tensor sg_value_tensor(const sg_value *v)
{
    sg_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = v->dtype;
    t.rank = v->shape.rank < 0 ? 0 : v->shape.rank;
    for (int32_t i = 0; i < t.rank; i++)
        t.dims[i] = v->shape.d[i].size;
    t.data = v->data ? sg_blob_data(v->data) : NULL;
    return t;
}

bool sg_graph_is_static(const sg_graph *g)
{
    for (int32_t i = 0; i < g->n_nodes; i++)
        for (int32_t k = 0; k < g->nodes[i].n_outputs; k++)
            if (g->nodes[i].outputs[k] >= 0 && !sg_shape_is_static(&g->values[g->nodes[i].outputs[k]].shape))
                return false;
    for (int32_t i = 0; i < g->n_inputs; i++)
        if (!sg_shape_is_static(&g->values[g->inputs[i]].shape))
            return false;
    return true;
}
