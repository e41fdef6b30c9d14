#include "graph/infer.h"
#include "graph/passes.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* A float32 constant with exactly `count` elements, or NULL. */
static const float *const_f32(const sg_graph *g, int32_t v, int64_t count)
{
    if (v < 0)
        return NULL;
    const sg_value *val = &g->values[v];
    int64_t numel;
    if (!val->data || val->dtype != SEGRT_DTYPE_FLOAT32 || !sg_shape_numel(&val->shape, &numel) ||
        numel != count)
        return NULL;
    return sg_blob_data(val->data);
}

/* Readers of each value (input slots of live nodes, plus one for a graph
 * output), kept up to date as folds rewire the graph: counting them by a
 * scan per BatchNormalization made the pass quadratic. */
typedef struct readers {
    int32_t *count;
    int32_t cap;
} readers;

static sg_status readers_init(const sg_graph *g, readers *r)
{
    r->cap = 0;
    r->count = NULL;
    SG_TRY(sg_grow((void **)&r->count, &r->cap, g->n_values + 1, sizeof *r->count));
    for (int32_t v = 0; v < g->n_values; v++)
        r->count[v] = g->values[v].is_output ? 1 : 0;
    for (int32_t i = 0; i < g->n_nodes; i++)
        for (int32_t k = 0; !g->nodes[i].dead && k < g->nodes[i].n_inputs; k++)
            if (g->nodes[i].inputs[k] >= 0)
                r->count[g->nodes[i].inputs[k]]++;
    return SEGRT_OK;
}

static void readers_add(readers *r, int32_t v, int32_t delta)
{
    if (v >= 0)
        r->count[v] += delta;
}

static sg_status add_const(sg_graph *g, const char *base, const char *suffix, sg_blob *b,
                           const sg_shape *shape, int32_t *out)
{
    char name[512];
    snprintf(name, sizeof name, "%s%s", base, suffix);
    sg_status s = sg_graph_add_value(g, name, out);
    if (s != SEGRT_OK) {
        sg_blob_unref(b);
        return s;
    }
    sg_value *v = &g->values[*out];
    v->dtype = SEGRT_DTYPE_FLOAT32;
    v->shape = *shape;
    v->declared = *shape;
    v->data = b;
    v->is_initializer = true;
    return SEGRT_OK;
}

/* Folds bn (reading conv's only output) into conv. Returns with *done false,
 * changing nothing, when the pattern does not apply. */
static sg_status fold_one(sg_graph *g, readers *rd, int32_t conv_i, int32_t bn_i, bool *done)
{
    *done = false;
    sg_node *conv = &g->nodes[conv_i];
    const sg_node *bn = &g->nodes[bn_i];
    const sg_value *w = &g->values[conv->inputs[1]];
    int64_t wdims[SEGRT_MAX_RANK];
    if (!w->data || w->dtype != SEGRT_DTYPE_FLOAT32 || !sg_shape_dims(&w->shape, wdims) ||
        w->shape.rank < 3)
        return SEGRT_OK;
    bool transposed = conv->op == SG_OP_CONV_TRANSPOSE;
    int64_t group = sg_attr_int(conv, "group", 1);
    if (group < 1)
        return SEGRT_OK;
    /* Conv weights are [K, C/group, k...]; ConvTranspose [C, K/group, k...]. */
    int64_t k_out = transposed ? wdims[1] * group : wdims[0];
    int64_t per = 1;
    for (int32_t i = 2; i < w->shape.rank; i++)
        per *= wdims[i];
    const float *scale = const_f32(g, bn->inputs[1], k_out);
    const float *beta = const_f32(g, bn->inputs[2], k_out);
    const float *mean = const_f32(g, bn->inputs[3], k_out);
    const float *var = const_f32(g, bn->inputs[4], k_out);
    const float *bias = conv->n_inputs > 2 && conv->inputs[2] >= 0
                            ? const_f32(g, conv->inputs[2], k_out)
                            : NULL;
    if (!scale || !beta || !mean || !var ||
        (conv->n_inputs > 2 && conv->inputs[2] >= 0 && !bias))
        return SEGRT_OK;
    double eps = sg_attr_float(bn, "epsilon", 1e-5f);

    sg_blob *wb, *bb;
    SG_TRY(sg_blob_new(sg_blob_size(w->data), false, &wb));
    if (sg_blob_new((size_t)k_out * 4, false, &bb) != SEGRT_OK) {
        sg_blob_unref(wb);
        return SEGRT_ERROR_OUT_OF_MEMORY;
    }
    const float *w0 = sg_blob_data(w->data);
    float *w1 = sg_blob_data(wb), *b1 = sg_blob_data(bb);
    for (int64_t k = 0; k < k_out; k++) {
        double s = scale[k] / sqrt((double)var[k] + eps);
        b1[k] = (float)(((bias ? bias[k] : 0.0) - mean[k]) * s + beta[k]);
    }
    int64_t rows = wdims[0], cols = wdims[1];
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            /* The output channel this weight slice feeds. */
            int64_t k = transposed ? (r / (rows / group)) * cols + c : r;
            double s = scale[k] / sqrt((double)var[k] + eps);
            const float *src = w0 + (r * cols + c) * per;
            float *dst = w1 + (r * cols + c) * per;
            for (int64_t e = 0; e < per; e++)
                dst[e] = (float)(src[e] * s);
        }
    sg_shape bshape = sg_shape_of_dims(&k_out, 1);
    sg_shape wshape = w->shape;
    char base[256];
    snprintf(base, sizeof base, "%.200s", conv->name);
    int32_t wv, bv;
    SG_TRY(add_const(g, base, ".bn_folded.weight", wb, &wshape, &wv));
    SG_TRY(add_const(g, base, ".bn_folded.bias", bb, &bshape, &bv));
    SG_TRY(sg_grow((void **)&rd->count, &rd->cap, g->n_values + 1, sizeof *rd->count));
    rd->count[wv] = rd->count[bv] = 0;
    conv = &g->nodes[conv_i];
    bn = &g->nodes[bn_i];
    if (conv->n_inputs < 3) {
        int32_t *ins = sg_realloc(conv->inputs, sizeof(int32_t) * 3);
        if (!ins)
            return SEGRT_ERROR_OUT_OF_MEMORY;
        conv->inputs = ins;
        conv->inputs[2] = -1;
        conv->n_inputs = 3;
    }
    readers_add(rd, conv->inputs[1], -1);
    readers_add(rd, conv->inputs[2], -1);
    readers_add(rd, wv, 1);
    readers_add(rd, bv, 1);
    conv->inputs[1] = wv;
    conv->inputs[2] = bv;
    conv->outputs[0] = bn->outputs[0];
    for (int32_t k = 0; k < bn->n_inputs; k++)
        readers_add(rd, bn->inputs[k], -1);
    g->nodes[bn_i].dead = true;
    *done = true;
    return SEGRT_OK;
}

sg_status sg_pass_fold_batchnorm(sg_graph *g, int32_t *changed)
{
    readers r;
    SG_TRY(readers_init(g, &r));
    sg_status s = SEGRT_OK;
    for (int32_t i = 0; i < g->n_nodes && s == SEGRT_OK; i++) {
        sg_node *bn = &g->nodes[i];
        if (bn->dead || bn->op != SG_OP_BATCH_NORMALIZATION || bn->n_inputs != 5 ||
            bn->inputs[0] < 0 || bn->outputs[0] < 0)
            continue;
        /* Training mode or running-statistics outputs cannot fold. */
        if (sg_attr_int(bn, "training_mode", 0) != 0)
            continue;
        bool extra = false;
        for (int32_t k = 1; k < bn->n_outputs; k++)
            extra |= bn->outputs[k] >= 0 && r.count[bn->outputs[k]] > 0;
        if (extra)
            continue;
        int32_t x = bn->inputs[0];
        int32_t p = g->values[x].producer;
        if (p < 0 || g->nodes[p].dead || g->values[x].is_output || r.count[x] != 1)
            continue;
        const sg_node *conv = &g->nodes[p];
        if ((conv->op != SG_OP_CONV && conv->op != SG_OP_CONV_TRANSPOSE) || conv->n_inputs < 2 ||
            conv->inputs[1] < 0 || conv->outputs[0] != x)
            continue;
        bool done = false;
        s = fold_one(g, &r, p, i, &done);
        if (done) {
            g->values[g->nodes[p].outputs[0]].producer = p;
            if (changed)
                (*changed)++;
        }
    }
    free(r.count);
    return s;
}
