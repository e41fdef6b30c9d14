/* Convolution attributes, read once: every Conv and ConvTranspose node's
 * shapes, strides, pads, dilations, groups and output padding, parsed into
 * one cuda_conv_desc before any builder runs, so that every convolution
 * path (segrt's direct, tensor-core and upsampling kernels and cuDNN's)
 * reads the same struct instead of parsing the node again. */
#include "backend/cuda/cuda_internal.h"

#include "graph/infer_util.h"

#include <string.h>

/* The desc of a node that is not a convolution: no rank, nothing read. */
static const cuda_conv_desc no_desc;

static void desc_read(const sg_graph *g, const sg_node *n, cuda_conv_desc *d)
{
    memset(d, 0, sizeof *d);
    d->transposed = n->op == SG_OP_CONV_TRANSPOSE;
    d->group = sg_attr_int(n, "group", 1);
    d->has_output_shape = sg_attr_find(n, "output_shape") != NULL;
    d->output_shape = sg_attr_ints(n, "output_shape", &d->n_output_shape);
    if (n->n_inputs < 2 || n->inputs[0] < 0 || n->inputs[1] < 0)
        return;
    const sg_value *xv = &g->values[n->inputs[0]], *wv = &g->values[n->inputs[1]];
    int32_t xrank = xv->shape.rank;
    /* The attributes over x's spatial axes and w's kernel dims, where the
     * two agree in rank: what every path asks before it reads them. */
    if (xrank >= 3 && wv->shape.rank == xrank) {
        int32_t nsp = xrank - 2;
        d->attrs_ok = sg_conv_attrs_read(g, n, nsp, &wv->shape, wv->name, &d->a) == SEGRT_OK;
        if (d->transposed)
            d->opad_ok = sg_iu_attr_ints(n, "output_padding", nsp, 0, 0, d->opad, NULL) == SEGRT_OK;
        sg_error_clear();
    }
    if (n->n_outputs < 1 || n->outputs[0] < 0)
        return;
    const sg_value *yv = &g->values[n->outputs[0]];
    if (wv->shape.rank != xrank || yv->shape.rank != xrank || xv->data || !sg_shape_dims(&xv->shape, d->xd) ||
        !sg_shape_dims(&wv->shape, d->wd) || !sg_shape_dims(&yv->shape, d->yd))
        return;
    d->rank = xrank;
    d->n_spatial = xrank - 2;
}

sg_status cuda_conv_descs_read(sg_cuda_plan *p)
{
    const sg_graph *g = p->g;
    p->conv_descs = sg_calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *p->conv_descs);
    if (!p->conv_descs)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const sg_node *n = &g->nodes[i];
        if (!n->dead && (n->op == SG_OP_CONV || n->op == SG_OP_CONV_TRANSPOSE))
            desc_read(g, n, &p->conv_descs[i]);
    }
    return SEGRT_OK;
}

const cuda_conv_desc *cuda_conv_desc_of(const sg_cuda_plan *p, const sg_node *n)
{
    if (n->op != SG_OP_CONV && n->op != SG_OP_CONV_TRANSPOSE)
        return &no_desc;
    return &p->conv_descs[cuda_node_index(p, n)];
}

int32_t cuda_conv_desc_rank(const cuda_conv_desc *d, int32_t min_rank, int32_t max_rank)
{
    return d->rank >= min_rank && d->rank <= max_rank ? d->rank : 0;
}
