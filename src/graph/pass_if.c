/* If folding (passes.h): an If whose condition is a constant becomes the
 * nodes of the branch it takes.
 *
 * Exporters write If where the traced code branched on a shape (an odd
 * size padded, a small input taken whole); once a plan binds the input's
 * dims those conditions fold to constants, and the If is that branch's
 * nodes. The branch is copied into the graph: its own values under new
 * names (the If's name and the branch's, then the value's), the values it
 * reads from around it by their names (the importer made each of those an
 * input of the If too, so that passes see the If read them), its
 * constants shared, and an Identity from each branch output to the If's
 * output (the simplify pass removes them). A branch holding an If of its
 * own reads the renamed values by their new names. */
#include "core/strmap.h"
#include "graph/passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A name the graph does not have yet: base, else base#2, base#3, ... (the
 * map holds every value name of g). Malloc'd; NULL when out of memory. */
static char *unique_name(const sg_strmap *names, const char *base)
{
    size_t len = strlen(base) + 24;
    char *s = malloc(len);
    if (!s)
        return NULL;
    snprintf(s, len, "%s", base);
    for (int k = 2; sg_strmap_get(names, s) >= 0; k++)
        snprintf(s, len, "%s#%d", base, k);
    return s;
}

/* In branch b and the branches inside it: values read from around them
 * (no producer, no data) named old[i] take the name new[i]. */
static sg_status rename_captures(sg_graph *b, char *const *old, char *const *new, int32_t n)
{
    for (int32_t v = 0; v < b->n_values; v++) {
        sg_value *val = &b->values[v];
        if (val->producer >= 0 || val->data || val->is_input)
            continue;
        for (int32_t i = 0; i < n; i++)
            if (strcmp(val->name, old[i]) == 0) {
                char *s = sg_strdup(new[i]);
                if (!s)
                    return SEGRT_ERROR_OUT_OF_MEMORY;
                free(val->name);
                val->name = s;
                break;
            }
    }
    for (int32_t k = 0; k < b->n_nodes; k++)
        for (int32_t a = 0; a < b->nodes[k].n_attrs; a++)
            if (b->nodes[k].attrs[a].graph)
                SG_TRY(rename_captures(b->nodes[k].attrs[a].graph, old, new, n));
    return SEGRT_OK;
}

typedef struct splice {
    sg_graph *g;
    sg_strmap names;   /* every value name of g */
    int32_t *map;      /* branch value -> g value */
    char **old, **new; /* the branch's produced values' names, before and after */
    int32_t n_renamed;
} splice;

/* Branch value v as a value of g (made on first use). */
static sg_status map_value(splice *sp, const sg_graph *b, const char *prefix, const sg_node *at, int32_t v,
                           int32_t *out)
{
    if (sp->map[v] >= 0) {
        *out = sp->map[v];
        return SEGRT_OK;
    }
    const sg_value *bv = &b->values[v];
    if (bv->producer < 0 && !bv->data) { /* read from around the branch */
        int32_t u = sg_strmap_get(&sp->names, bv->name);
        if (u < 0)
            return sg_node_error(at, SEGRT_ERROR_INVALID_MODEL, "a branch reads `%s`, which the graph does not have",
                                 bv->name);
        sp->map[v] = *out = u;
        return SEGRT_OK;
    }
    size_t len = strlen(prefix) + strlen(bv->name) + 1;
    char *base = malloc(len);
    if (!base)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    snprintf(base, len, "%s%s", prefix, bv->name);
    char *name = unique_name(&sp->names, base);
    free(base);
    if (!name)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    int32_t u;
    sg_status s = sg_graph_add_value(sp->g, name, &u);
    free(name);
    SG_TRY(s);
    /* Symbolic dims by name: the branch numbers its symbols its own way. */
    sg_shape shape = bv->shape, declared = bv->declared;
    for (int32_t d = 0; d < shape.rank; d++)
        if (shape.d[d].sym >= 0)
            SG_TRY(sg_graph_intern_sym(sp->g, b->syms[shape.d[d].sym], &shape.d[d].sym));
    for (int32_t d = 0; d < declared.rank; d++)
        if (declared.d[d].sym >= 0)
            SG_TRY(sg_graph_intern_sym(sp->g, b->syms[declared.d[d].sym], &declared.d[d].sym));
    sg_value *nv = &sp->g->values[u];
    nv->dtype = bv->dtype;
    nv->shape = shape;
    nv->declared = declared;
    nv->data = sg_blob_ref(bv->data);
    SG_TRY(sg_strmap_put(&sp->names, nv->name, u));
    sp->old[sp->n_renamed] = bv->name; /* nested branches read it by its new name */
    sp->new[sp->n_renamed++] = nv->name;
    sp->map[v] = *out = u;
    return SEGRT_OK;
}

/* Node k of g, an If whose condition is `taken`, replaced by its branch. */
static sg_status splice_branch(splice *sp, int32_t k, bool taken)
{
    sg_graph *g = sp->g;
    const char *which = taken ? "then_branch" : "else_branch";
    const sg_attr *a = sg_attr_find(&g->nodes[k], which);
    if (!a || a->kind != SG_ATTR_GRAPH || !a->graph || a->graph->n_outputs != g->nodes[k].n_outputs)
        return sg_node_error(&g->nodes[k], SEGRT_ERROR_INVALID_MODEL, "its %s does not give its outputs", which);
    const sg_graph *b = a->graph;
    size_t plen = strlen(g->nodes[k].name) + 16;
    char *prefix = malloc(plen);
    if (!prefix)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    snprintf(prefix, plen, "%s/%s/", g->nodes[k].name, taken ? "then" : "else");
    sg_status s = SEGRT_OK;
    sp->map = malloc(sizeof(int32_t) * (size_t)(b->n_values ? b->n_values : 1));
    sp->old = calloc((size_t)(b->n_values ? b->n_values : 1), sizeof(char *));
    sp->new = calloc((size_t)(b->n_values ? b->n_values : 1), sizeof(char *));
    sp->n_renamed = 0;
    if (!sp->map || !sp->old || !sp->new)
        s = SEGRT_ERROR_OUT_OF_MEMORY;
    for (int32_t v = 0; s == SEGRT_OK && v < b->n_values; v++)
        sp->map[v] = -1;
    /* The branch's own values first (their new names are what nested
     * branches read), then the nodes. */
    for (int32_t v = 0; s == SEGRT_OK && v < b->n_values; v++)
        if (b->values[v].producer >= 0 || b->values[v].data)
            s = map_value(sp, b, prefix, &g->nodes[k], v, &(int32_t){0});
    for (int32_t i = 0; s == SEGRT_OK && i < b->n_nodes; i++) {
        const sg_node *bn = &b->nodes[i];
        if (bn->dead)
            continue;
        size_t nlen = strlen(prefix) + strlen(bn->name) + 1;
        char *name = malloc(nlen);
        if (!name) {
            s = SEGRT_ERROR_OUT_OF_MEMORY;
            break;
        }
        snprintf(name, nlen, "%s%s", prefix, bn->name);
        sg_node *nn;
        s = sg_graph_add_node(g, bn->op, name, bn->n_inputs, bn->n_outputs, &nn);
        free(name);
        /* (Mapping adds values, never nodes: nn stays put.) */
        for (int32_t j = 0; s == SEGRT_OK && j < bn->n_inputs; j++)
            if (bn->inputs[j] >= 0)
                s = map_value(sp, b, prefix, &g->nodes[k], bn->inputs[j], &nn->inputs[j]);
        for (int32_t j = 0; s == SEGRT_OK && j < bn->n_outputs; j++)
            nn->outputs[j] = bn->outputs[j] >= 0 ? sp->map[bn->outputs[j]] : -1;
        if (s == SEGRT_OK && bn->n_attrs && !(nn->attrs = sg_calloc((size_t)bn->n_attrs, sizeof *nn->attrs)))
            s = SEGRT_ERROR_OUT_OF_MEMORY;
        for (int32_t j = 0; s == SEGRT_OK && j < bn->n_attrs; j++) {
            nn->n_attrs = j + 1;
            s = sg_attr_copy(&bn->attrs[j], &nn->attrs[j]);
            if (s == SEGRT_OK && nn->attrs[j].graph)
                s = rename_captures(nn->attrs[j].graph, sp->old, sp->new, sp->n_renamed);
        }
    }
    /* Each output of the If: an Identity of the branch's. */
    for (int32_t j = 0; s == SEGRT_OK && j < b->n_outputs; j++) {
        int32_t from;
        if ((s = map_value(sp, b, prefix, &g->nodes[k], b->outputs[j], &from)) != SEGRT_OK)
            break;
        int32_t to = g->nodes[k].outputs[j];
        if (to < 0)
            continue;
        size_t nlen = strlen(prefix) + 32;
        char *name = malloc(nlen);
        if (!name) {
            s = SEGRT_ERROR_OUT_OF_MEMORY;
            break;
        }
        snprintf(name, nlen, "%soutput_%d", prefix, (int)j);
        sg_node *id;
        s = sg_graph_add_node(g, SG_OP_IDENTITY, name, 1, 1, &id);
        free(name);
        if (s == SEGRT_OK) {
            id->inputs[0] = from;
            id->outputs[0] = to;
        }
    }
    if (s == SEGRT_OK) {
        /* The If's outputs are the Identities' now. */
        g->nodes[k].dead = true;
        for (int32_t j = 0; j < g->nodes[k].n_outputs; j++)
            g->nodes[k].outputs[j] = -1;
    }
    free(prefix);
    free(sp->map);
    free(sp->old);
    free(sp->new);
    sp->map = NULL;
    sp->old = sp->new = NULL;
    return s;
}

sg_status sg_pass_fold_if(sg_graph *g, int32_t *changed)
{
    int32_t n = g->n_nodes, folded = 0;
    bool any = false;
    for (int32_t k = 0; k < n && !any; k++)
        any = !g->nodes[k].dead && g->nodes[k].op == SG_OP_IF;
    if (!any)
        return SEGRT_OK;
    splice sp = {g, {0}, NULL, NULL, NULL, 0};
    sg_strmap_init(&sp.names);
    sg_status s = SEGRT_OK;
    for (int32_t v = 0; v < g->n_values && s == SEGRT_OK; v++)
        s = sg_strmap_put(&sp.names, g->values[v].name, v);
    /* The Ifs of the graph as it was; those a branch brings in wait for
     * the next round (their conditions are not inferred yet). */
    for (int32_t k = 0; k < n && s == SEGRT_OK; k++) {
        const sg_node *nd = &g->nodes[k];
        if (nd->dead || nd->op != SG_OP_IF || nd->n_inputs < 1 || nd->inputs[0] < 0)
            continue;
        const sg_value *c = &g->values[nd->inputs[0]];
        int64_t numel;
        if (!c->data || c->dtype != SEGRT_DTYPE_BOOL || !sg_shape_numel(&c->shape, &numel) || numel != 1)
            continue;
        s = splice_branch(&sp, k, ((const uint8_t *)sg_blob_data(c->data))[0] != 0);
        folded++;
    }
    sg_strmap_free(&sp.names);
    if (s == SEGRT_OK && folded) {
        /* The branches' nodes came last: into order (folded nodes, whose
         * outputs are constants now, dropped first). */
        s = sg_graph_compact(g);
        if (s == SEGRT_OK)
            s = sg_graph_toposort(g);
        if (changed)
            *changed += folded;
    }
    return s;
}

sg_status sg_if_not_folded(const sg_node *n)
{
    return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED,
                         "its condition is not known when the plan is built; segrt runs an If whose condition "
                         "folds to a constant once the input's dims are bound (give them with --shape)");
}
