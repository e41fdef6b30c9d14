#include "graph/infer.h"
#include "graph/passes.h"

#include <string.h>

/* Shape (with start/end) and Size need only the input's dims, not its data. */
static bool fold_shape_like(sg_graph *g, sg_node *n, sg_blob **out)
{
    const sg_value *x = sg_infer_input(g, n, 0);
    if (!x || x->shape.rank < 0)
        return false;
    int32_t rank = x->shape.rank;
    if (n->op == SG_OP_SIZE) {
        int64_t numel;
        if (!sg_shape_numel(&x->shape, &numel) || sg_blob_new(8, false, out) != SEGRT_OK)
            return false;
        *(int64_t *)sg_blob_data(*out) = numel;
        return true;
    }
    int64_t start = sg_attr_int(n, "start", 0), end = sg_attr_int(n, "end", rank);
    if (start < 0)
        start += rank;
    if (end < 0)
        end += rank;
    start = start < 0 ? 0 : start > rank ? rank : start;
    end = end < 0 ? 0 : end > rank ? rank : end;
    if (end < start)
        end = start;
    for (int64_t i = start; i < end; i++)
        if (x->shape.d[i].size < 0)
            return false;
    if (sg_blob_new((size_t)(end - start) * 8, false, out) != SEGRT_OK)
        return false;
    int64_t *d = sg_blob_data(*out);
    for (int64_t i = start; i < end; i++)
        d[i - start] = x->shape.d[i].size;
    return true;
}

static sg_status fold_node(sg_graph *g, sg_node *n, const sg_fold_options *o, bool *folded)
{
    *folded = false;
    if (n->op == SG_OP_IF) /* its branch replaces it (sg_pass_fold_if), whatever its inputs */
        return SEGRT_OK;
    if (n->op == SG_OP_SHAPE || n->op == SG_OP_SIZE) {
        sg_blob *b;
        if (n->outputs[0] < 0 || !fold_shape_like(g, n, &b))
            return SEGRT_OK;
        sg_blob_unref(g->values[n->outputs[0]].data);
        g->values[n->outputs[0]].data = b;
        *folded = true;
        return SEGRT_OK;
    }
    for (int32_t i = 0; i < n->n_inputs; i++)
        if (n->inputs[i] >= 0 && !g->values[n->inputs[i]].data)
            return SEGRT_OK;
    /* Identity and Dropout of a constant share its data rather than copy:
     * weights tied through Identity stay one buffer. */
    /* (Dropout only when not in training mode: its kernel judges that.) */
    bool dropout_inference = n->op == SG_OP_DROPOUT && (n->n_inputs < 3 || n->inputs[2] < 0);
    if ((n->op == SG_OP_IDENTITY || dropout_inference) && n->n_outputs == 1 && n->outputs[0] >= 0) {
        sg_value *out = &g->values[n->outputs[0]];
        sg_blob_unref(out->data);
        out->data = sg_blob_ref(g->values[n->inputs[0]].data);
        out->is_initializer = g->values[n->inputs[0]].is_initializer;
        *folded = true;
        return SEGRT_OK;
    }
    sg_eval_fn eval = o->lookup ? o->lookup(n->op) : NULL;
    if (!eval)
        return SEGRT_OK;
    int64_t total = 0;
    for (int32_t j = 0; j < n->n_outputs; j++) {
        if (n->outputs[j] < 0)
            continue;
        const sg_value *v = &g->values[n->outputs[j]];
        int64_t numel, bytes;
        if (!sg_shape_numel(&v->shape, &numel) || v->dtype == SEGRT_DTYPE_UNDEFINED)
            return SEGRT_OK;
        if (!sg_mul_i64(numel, (int64_t)segrt_dtype_size(v->dtype), &bytes) ||
            !sg_add_i64(total, bytes, &total))
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "output is too large");
    }
    if (o->max_bytes > 0 && total > o->max_bytes) {
        if (o->limit_fails)
            return sg_node_error(n, SEGRT_ERROR_OUT_OF_MEMORY,
                                 "its outputs take %lld bytes, over the limit of %lld for one operator",
                                 (long long)total, (long long)o->max_bytes);
        return SEGRT_OK;
    }
    if (o->budget && total > *o->budget)
        return SEGRT_OK;

    enum { CAP = 64 };
    const sg_tensor *in[CAP];
    sg_tensor in_t[CAP], out_t[CAP];
    sg_tensor *out[CAP];
    sg_blob *blobs[CAP] = {0};
    if (n->n_inputs > CAP || n->n_outputs > CAP)
        return SEGRT_OK; /* variadic ops this wide are left to the backends */
    for (int32_t i = 0; i < n->n_inputs; i++) {
        in[i] = NULL;
        if (n->inputs[i] >= 0) {
            in_t[i] = sg_value_tensor(&g->values[n->inputs[i]]);
            in[i] = &in_t[i];
        }
    }
    sg_status s = SEGRT_OK;
    for (int32_t j = 0; j < n->n_outputs && s == SEGRT_OK; j++) {
        out[j] = NULL;
        if (n->outputs[j] < 0)
            continue;
        const sg_value *v = &g->values[n->outputs[j]];
        int64_t numel;
        sg_shape_numel(&v->shape, &numel);
        s = sg_blob_new((size_t)numel * segrt_dtype_size(v->dtype), false, &blobs[j]);
        if (s != SEGRT_OK)
            break;
        out_t[j] = sg_value_tensor(v);
        out_t[j].data = sg_blob_data(blobs[j]);
        out[j] = &out_t[j];
    }
    if (s == SEGRT_OK)
        s = eval(n, in, n->n_inputs, out, n->n_outputs);
    if (s != SEGRT_OK) {
        for (int32_t j = 0; j < n->n_outputs; j++)
            sg_blob_unref(blobs[j]);
        return s;
    }
    for (int32_t j = 0; j < n->n_outputs; j++) {
        if (n->outputs[j] < 0)
            continue;
        sg_value *v = &g->values[n->outputs[j]];
        sg_blob_unref(v->data);
        v->data = blobs[j];
    }
    if (o->budget)
        *o->budget -= total;
    *folded = true;
    return SEGRT_OK;
}

sg_status sg_pass_fold_constants(sg_graph *g, const sg_fold_options *o, int32_t *changed)
{
    int32_t *uses = sg_graph_use_counts(g);
    if (!uses)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    sg_status s = SEGRT_OK;
    for (int32_t i = 0; i < g->n_nodes && s == SEGRT_OK; i++) {
        sg_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        s = sg_infer_node(g, n);
        bool folded = false;
        if (s == SEGRT_OK)
            s = fold_node(g, n, o, &folded);
        if (s != SEGRT_OK || !folded)
            continue;
        n->dead = true;
        if (changed)
            (*changed)++;
        for (int32_t k = 0; k < n->n_inputs; k++) {
            int32_t v = n->inputs[k];
            if (v < 0 || --uses[v] > 0 || !o->release)
                continue;
            sg_value *val = &g->values[v];
            if (!val->is_output) {
                sg_blob_unref(val->data);
                val->data = NULL;
            }
        }
    }
    free(uses);
    return s;
}
