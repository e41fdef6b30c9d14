#include "graph/stats.h"

#include <stdlib.h>

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return x < y ? -1 : x > y;
}

sg_status sg_graph_params(const sg_graph *g, int64_t *count, int64_t *bytes)
{
    /* Collect (blob, value) pairs of weights read by live nodes, then count
     * each blob once. */
    typedef struct {
        const sg_blob *blob;
        int32_t value;
    } entry;
    int32_t cap = 0, n = 0;
    entry *e = NULL;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const sg_node *node = &g->nodes[i];
        for (int32_t k = 0; !node->dead && k < node->n_inputs; k++) {
            int32_t v = node->inputs[k];
            if (v < 0 || !g->values[v].data || !g->values[v].is_initializer ||
                !sg_dtype_is_float(g->values[v].dtype))
                continue;
            if (sg_grow((void **)&e, &cap, n + 1, sizeof *e) != SEGRT_OK) {
                free(e);
                return SEGRT_ERROR_OUT_OF_MEMORY;
            }
            e[n].blob = g->values[v].data;
            e[n].value = v;
            n++;
        }
    }
    if (n > 1)
        qsort(e, (size_t)n, sizeof *e, cmp_ptr);
    int64_t c = 0, b = 0;
    for (int32_t i = 0; i < n; i++) {
        if (i > 0 && e[i].blob == e[i - 1].blob)
            continue;
        int64_t numel = 0;
        sg_shape_numel(&g->values[e[i].value].shape, &numel);
        c += numel;
        b += (int64_t)sg_blob_size(e[i].blob);
    }
    free(e);
    *count = c;
    *bytes = b;
    return SEGRT_OK;
}

static bool numel_of(const sg_graph *g, int32_t v, double *out)
{
    int64_t n;
    if (v < 0 || !sg_shape_numel(&g->values[v].shape, &n))
        return false;
    *out = (double)n;
    return true;
}

sg_status sg_graph_flops(const sg_graph *g, double *out)
{
    double total = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const sg_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        double y = 0, x = 0;
        bool ok = numel_of(g, n->outputs[0], &y);
        const sg_value *w = n->n_inputs > 1 && n->inputs[1] >= 0 ? &g->values[n->inputs[1]] : NULL;
        int64_t wd[SEGRT_MAX_RANK];
        switch (n->op) {
        case SG_OP_CONV:
            /* Each output element sums C/group * kernel products: W[1] * k. */
            if (ok && w && sg_shape_dims(&w->shape, wd)) {
                double per = 1;
                for (int32_t d = 1; d < w->shape.rank; d++)
                    per *= (double)wd[d];
                total += 2 * y * per;
            } else
                ok = false;
            break;
        case SG_OP_CONV_TRANSPOSE:
            /* Each input element scatters into K/group * kernel outputs. */
            if (ok && w && sg_shape_dims(&w->shape, wd) && numel_of(g, n->inputs[0], &x)) {
                double per = 1;
                for (int32_t d = 1; d < w->shape.rank; d++)
                    per *= (double)wd[d];
                total += 2 * x * per;
            } else
                ok = false;
            break;
        case SG_OP_MAT_MUL:
        case SG_OP_GEMM: {
            const sg_value *a = &g->values[n->inputs[0]];
            int64_t k = -1;
            if (a->shape.rank >= 1) {
                bool trans_a = n->op == SG_OP_GEMM && sg_attr_int(n, "transA", 0);
                int32_t kd = trans_a ? 0 : a->shape.rank - 1;
                k = a->shape.d[kd].size;
            }
            if (ok && k >= 0)
                total += 2 * y * (double)k;
            else
                ok = false;
            break;
        }
        default:
            total += y;
            break;
        }
        if (!ok)
            return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                 "FLOPs need every shape known; bind the input shapes first");
    }
    *out = total;
    return SEGRT_OK;
}
