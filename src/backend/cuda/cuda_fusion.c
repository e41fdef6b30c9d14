/* The fusion pass: before any builder runs, one walk over the graph notes
 * what may fold into what (cuda_node_fold, cuda_value_fold in
 * cuda_internal.h):
 *  - per node, the activation that alone reads its result (a convolution's
 *    or a norm's epilogue takes it); per MaxPool, whether it is the 2x2 one
 *    a tensor-core layer's epilogue also computes; per Conv, the Concat
 *    whose upsampled half the layer may compute in its halo;
 *  - per value, the Add that alone reads it with another computed operand
 *    of its dims and dtype (a residual connection an epilogue takes), the
 *    InstanceNormalization or GroupNormalization that alone reads it as
 *    its X (a tensor-core layer then writes the norm's statistics), and
 *    whether its readers are all of the kinds that can apply a
 *    normalisation as they read the value (cuda_norm_readers);
 *  - per InstanceNormalization or GroupNormalization, whether its result
 *    may be left unnormalised to its readers (a deferred norm).
 * These are the graph's part of each decision; the builders read them and
 * add only what depends on the plan as it is built: whether a node is
 * fused already, whether a tensor or step exists yet, whether a kernel
 * takes the layer over the tensors it reads. (Where a Concat's inputs are
 * written in place is a layout decision, not a fusion: it depends on what
 * the steps already built can do with a strided view, so the Concat's
 * builder makes it, cuda_place_in_slice.) */
#include "backend/cuda/cuda_internal.h"

#include "graph/infer_util.h"

#include <string.h>

/* Whether MaxPool n is 2x2, stride 2, dilation 1, unpadded, floor. */
static bool pool2x2(const sg_graph *g, const sg_node *n)
{
    sg_conv_attrs a;
    if (sg_conv_attrs_read(g, n, 2, NULL, NULL, &a) != SEGRT_OK) {
        sg_error_clear();
        return false;
    }
    bool ok = !a.ceil_mode && (a.auto_pad == SG_AUTO_PAD_NOTSET || a.auto_pad == SG_AUTO_PAD_VALID);
    for (int32_t d = 0; d < 2; d++)
        ok = ok && a.kernel[d] == 2 && a.strides[d] == 2 && a.dilations[d] == 1 && a.pads[d] == 0 && a.pads[2 + d] == 0;
    return ok;
}

/* The Concat that Conv n alone reads: two inputs along channels, the
 * second read by the Concat alone; or -1. */
static int32_t up_cat(const sg_cuda_plan *p, const sg_node *n)
{
    const sg_graph *g = p->g;
    if (n->n_inputs < 1 || n->inputs[0] < 0)
        return -1;
    int32_t v = n->inputs[0], ci = g->values[v].producer;
    if (ci < 0 || cuda_single_reader(p, v) != cuda_node_index(p, n))
        return -1;
    const sg_node *cat = &g->nodes[ci];
    int64_t axis = sg_attr_int(cat, "axis", 0);
    if (cat->op != SG_OP_CONCAT || cat->n_inputs != 2 || (axis != 1 && axis != -3) || cat->inputs[1] < 0 ||
        cuda_single_reader(p, cat->inputs[1]) != ci)
        return -1;
    return ci;
}

/* The activation that alone reads node n's first output as its input 0;
 * whether a MaxPool is the one a layer's epilogue computes. */
static void node_fold(const sg_cuda_plan *p, const sg_node *n, cuda_node_fold *f)
{
    f->act_node = -1;
    f->act = SGK_ACT_NONE;
    f->act_alpha = 0.0f;
    f->act_keeps_dtype = false;
    f->pool2x2 = n->op == SG_OP_MAX_POOL && !n->dead && pool2x2(p->g, n);
    f->up_cat = n->op == SG_OP_CONV ? up_cat(p, n) : -1;
    if (n->n_outputs < 1 || n->outputs[0] < 0)
        return;
    int32_t y = n->outputs[0], r = cuda_single_reader(p, y);
    if (r < 0)
        return;
    const sg_node *a = &p->g->nodes[r];
    sgk_act act;
    float alpha;
    if (a->n_inputs < 1 || a->inputs[0] != y || a->n_outputs < 1 || a->outputs[0] < 0 ||
        !cuda_act_of(p, a, &act, &alpha))
        return;
    f->act_node = r;
    f->act = act;
    f->act_alpha = alpha;
    f->act_keeps_dtype = p->g->values[a->outputs[0]].dtype == p->g->values[y].dtype;
}

/* The Add that alone reads v with another operand of v's dims and dtype
 * that is not a constant, and the norm that alone reads v as its X. */
static void value_fold(const sg_cuda_plan *p, int32_t v, cuda_value_fold *f)
{
    f->add_node = f->add_other = f->norm_node = -1;
    int32_t r = cuda_single_reader(p, v);
    if (r < 0)
        return;
    const sg_graph *g = p->g;
    const sg_node *rn = &g->nodes[r];
    if ((rn->op == SG_OP_INSTANCE_NORMALIZATION || rn->op == SG_OP_GROUP_NORMALIZATION) && rn->n_inputs >= 1 &&
        rn->inputs[0] == v)
        f->norm_node = r;
    if (rn->op != SG_OP_ADD || rn->n_inputs != 2 || rn->n_outputs < 1 || rn->outputs[0] < 0)
        return;
    int32_t other = rn->inputs[0] == v ? rn->inputs[1] : rn->inputs[0];
    if (other < 0 || other == v)
        return;
    const sg_value *vv = &g->values[v], *zv = &g->values[other], *ov = &g->values[rn->outputs[0]];
    if (zv->data || zv->dtype != vv->dtype || ov->dtype != vv->dtype || zv->shape.rank != vv->shape.rank)
        return;
    int64_t vd[SEGRT_MAX_RANK], zd[SEGRT_MAX_RANK];
    if (!sg_shape_dims(&vv->shape, vd) || !sg_shape_dims(&zv->shape, zd) ||
        memcmp(vd, zd, sizeof(int64_t) * (size_t)vv->shape.rank) != 0)
        return;
    f->add_node = r;
    f->add_other = other;
}

/* Whether node r reads v only as its input 0. */
static bool reads_only_as_x(const sg_node *r, int32_t v)
{
    if (r->n_inputs < 1 || r->inputs[0] != v)
        return false;
    for (int32_t k = 1; k < r->n_inputs; k++)
        if (r->inputs[k] == v)
            return false;
    return true;
}

/* Whether Concat cat can pass a normalisation of its input v on to its
 * one reader: v comes first, once, along the channels of a tensor of rank
 * 3 or more, and a single Conv reads the result as its X (that layer's
 * prologue normalises a leading run of channels). */
static bool concat_passes_norm(const sg_cuda_plan *p, const sg_node *cat, int32_t v)
{
    const sg_value *xv = &p->g->values[v];
    int32_t axis = -1;
    if (cat->n_inputs < 2 || !reads_only_as_x(cat, v) || cat->n_outputs < 1 || cat->outputs[0] < 0 ||
        xv->shape.rank < 3 || sg_infer_axis(cat, sg_attr_int(cat, "axis", 0), xv->shape.rank, &axis) != SEGRT_OK) {
        sg_error_clear();
        return false;
    }
    int32_t rd = cuda_single_reader(p, cat->outputs[0]);
    return axis == 1 && rd >= 0 && p->g->nodes[rd].op == SG_OP_CONV &&
           reads_only_as_x(&p->g->nodes[rd], cat->outputs[0]);
}

/* What v's readers could do with v left unnormalised (cuda_norm_readers):
 * v is not a graph output, has readers, and each reads it only as its X
 * and is a Conv (CUDA_NORM_READERS_CONVS), or each is a Conv, a
 * ConvTranspose, a MaxPool of one float output of rank 3 to 5 or a Concat
 * that passes the norm on (CUDA_NORM_READERS_ANY; *has_pool says whether
 * a MaxPool is among them). */
static cuda_norm_readers norm_readers(const sg_cuda_plan *p, int32_t v, bool *has_pool)
{
    const sg_graph *g = p->g;
    *has_pool = false;
    int32_t n_readers;
    const int32_t *reader = cuda_readers(p, v, &n_readers);
    if (g->values[v].is_output || p->uses[v] < 1 || n_readers < 1)
        return CUDA_NORM_READERS_NONE;
    bool convs = true;
    for (int32_t k = 0; k < n_readers; k++) {
        const sg_node *r = &g->nodes[reader[k]];
        const sg_value *xv = &g->values[v];
        bool as_x = reads_only_as_x(r, v);
        switch (r->op) {
        case SG_OP_CONV:
            if (!as_x)
                return CUDA_NORM_READERS_NONE;
            break;
        case SG_OP_CONV_TRANSPOSE:
            if (!as_x)
                return CUDA_NORM_READERS_NONE;
            convs = false;
            break;
        case SG_OP_MAX_POOL:
            if (!as_x || (r->n_outputs > 1 && r->outputs[1] >= 0) || !sg_dtype_is_float(xv->dtype) ||
                xv->shape.rank < 3 || xv->shape.rank > 5)
                return CUDA_NORM_READERS_NONE;
            convs = false;
            *has_pool = true;
            break;
        case SG_OP_CONCAT:
            if (!concat_passes_norm(p, r, v))
                return CUDA_NORM_READERS_NONE;
            convs = false;
            break;
        default:
            return CUDA_NORM_READERS_NONE;
        }
    }
    return convs ? CUDA_NORM_READERS_CONVS : CUDA_NORM_READERS_ANY;
}

/* Whether norm node n's result (after the activation the node's fold
 * takes) may be left to its readers: they could all apply it, and where a
 * MaxPool is among them the activation never decreases (the pool then
 * takes the maximum of the raw values and normalises that). */
static bool norm_defers(const sg_cuda_plan *p, const sg_node *n, const cuda_node_fold *f)
{
    if ((n->op != SG_OP_INSTANCE_NORMALIZATION && n->op != SG_OP_GROUP_NORMALIZATION) || n->dead || n->n_outputs < 1 ||
        n->outputs[0] < 0)
        return false;
    int32_t result = f->act_node >= 0 ? p->g->nodes[f->act_node].outputs[0] : n->outputs[0];
    const cuda_value_fold *rf = &p->value_folds[result];
    return rf->norm_readers != CUDA_NORM_READERS_NONE &&
           (!rf->norm_pool_reader ||
            cuda_act_monotone(f->act_node >= 0 ? f->act : SGK_ACT_NONE, f->act_node >= 0 ? f->act_alpha : 0.0f));
}

sg_status cuda_fusion_pass(sg_cuda_plan *p)
{
    const sg_graph *g = p->g;
    p->node_folds = sg_calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *p->node_folds);
    p->value_folds = sg_calloc((size_t)(g->n_values ? g->n_values : 1), sizeof *p->value_folds);
    if (!p->node_folds || !p->value_folds)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    for (int32_t i = 0; i < g->n_nodes; i++)
        node_fold(p, &g->nodes[i], &p->node_folds[i]);
    for (int32_t v = 0; v < g->n_values; v++) {
        cuda_value_fold *f = &p->value_folds[v];
        value_fold(p, v, f);
        f->norm_readers = norm_readers(p, v, &f->norm_pool_reader);
    }
    for (int32_t i = 0; i < g->n_nodes; i++)
        p->node_folds[i].defer_norm = norm_defers(p, &g->nodes[i], &p->node_folds[i]);
    return SEGRT_OK;
}

int32_t cuda_conv_activation(const sg_cuda_plan *p, const sg_node *n, sgk_act *act, float *alpha)
{
    const cuda_node_fold *f = &p->node_folds[cuda_node_index(p, n)];
    if (f->act_node < 0 || !f->act_keeps_dtype || p->fused[f->act_node])
        return -1;
    *act = f->act;
    *alpha = f->act_alpha;
    return f->act_node;
}

int32_t cuda_norm_fused_act(const sg_cuda_plan *p, const sg_node *n, sgk_act *act, float *alpha)
{
    const cuda_node_fold *f = &p->node_folds[cuda_node_index(p, n)];
    *act = f->act_node >= 0 ? f->act : SGK_ACT_NONE;
    *alpha = f->act_node >= 0 ? f->act_alpha : 0.0f;
    return f->act_node;
}

int32_t cuda_residual_add(const sg_cuda_plan *p, int32_t v, int32_t *z)
{
    const cuda_value_fold *f = &p->value_folds[v];
    /* The other operand must be computed already (an earlier step's). */
    if (f->add_node < 0 || p->fused[f->add_node] || cuda_value(p, f->add_other) < 0)
        return -1;
    *z = f->add_other;
    return f->add_node;
}

int32_t cuda_stats_norm(const sg_cuda_plan *p, int32_t v)
{
    return p->value_folds[v].norm_node;
}

cuda_norm_readers cuda_norm_readers_of(const sg_cuda_plan *p, int32_t v)
{
    return p->value_folds[v].norm_readers;
}

bool cuda_norm_defers(const sg_cuda_plan *p, const sg_node *n)
{
    return p->node_folds[cuda_node_index(p, n)].defer_norm;
}
