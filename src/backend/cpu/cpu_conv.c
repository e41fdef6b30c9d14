/* Convolution and transposed convolution through oneDNN, with the
 * operators that follow fused as post-ops where oneDNN keeps their IEEE
 * semantics: per-channel PReLU and a residual Add.
 * Weights are reordered once, at plan build, into the layout oneDNN picked. */
#include "backend/cpu/cpu_internal.h"
#include "graph/infer_util.h"

#include <string.h>

typedef struct conv_fusion {
    dnnl_post_ops_t po;
    int32_t n_post;
    cpu_arg extra[8]; /* post-op operands: PReLU slopes, residuals */
    int32_t n_extra;
    int32_t out_value; /* the graph value the fused chain produces */
    int32_t nodes[8];  /* the nodes absorbed, n_post of them */
} conv_fusion;

/* Strides describing ONNX's weight layout in oneDNN's dim order. Conv
 * weights are [K, C/G, k...]; oneDNN's grouped dims are (G, K/G, C/G, k...),
 * which is the same memory. ConvTranspose weights are [C, K/G, k...], i.e.
 * (G, C/G, K/G, k...) in memory, while oneDNN orders dims (G, K/G, C/G, k...). */
static void weight_md(bool transposed, int64_t group, int64_t k_out, int64_t c_in, int32_t spatial,
                      const int64_t *kernel, dnnl_memory_desc_t *md)
{
    dnnl_dims_t dims, strides;
    int64_t ks = 1;
    for (int32_t d = 0; d < spatial; d++)
        ks *= kernel[d];
    int32_t nd = 0;
    if (group > 1)
        dims[nd++] = group;
    dims[nd++] = k_out / group;
    dims[nd++] = c_in / group;
    for (int32_t d = 0; d < spatial; d++)
        dims[nd + d] = kernel[d];
    int64_t s = 1;
    for (int32_t d = spatial - 1; d >= 0; d--) {
        strides[nd + d] = s;
        s *= kernel[d];
    }
    int32_t o = group > 1 ? 1 : 0; /* index of K/G */
    if (!transposed) {
        strides[o + 1] = ks;                       /* C/G */
        strides[o] = ks * (c_in / group);          /* K/G */
        if (group > 1)
            strides[0] = strides[o] * (k_out / group);
    } else {
        strides[o] = ks;                           /* K/G */
        strides[o + 1] = ks * (k_out / group);     /* C/G */
        if (group > 1)
            strides[0] = strides[o + 1] * (c_in / group);
    }
    dnnl_memory_desc_init_by_strides(md, nd + spatial, dims, dnnl_f32, strides);
}

/* A per-channel (or single) PReLU slope: its element count, or 0. */
static int64_t prelu_channels(const sg_cpu_plan *p, const sg_node *n, int64_t k, int32_t rank)
{
    const sg_value *s = &p->g->values[n->inputs[1]];
    int64_t numel;
    if (!s->data || s->dtype != SEGRT_DTYPE_FLOAT32 || !sg_shape_numel(&s->shape, &numel))
        return 0;
    if (numel == 1)
        return 1;
    if (numel != k)
        return 0;
    /* Broadcast against [N, K, spatial...]: K must land on axis 1. */
    int32_t r = s->shape.rank;
    if (r > rank)
        return 0;
    for (int32_t d = 0; d < r; d++) {
        int32_t axis = rank - r + d;
        int64_t want = axis == 1 ? k : 1;
        if (s->shape.d[d].size != want)
            return 0;
    }
    return numel;
}

/* Extends the chain after the convolution's output while the only reader
 * of the current value is an operator oneDNN can apply as a post-op. */
static sg_status fuse_post_ops(sg_cpu_plan *p, int32_t conv_node, int64_t k, int32_t rank, int32_t max_post,
                              conv_fusion *f)
{
    DNNL_TRY(dnnl_post_ops_create(&f->po));
    int32_t cur = p->g->nodes[conv_node].outputs[0];
    while (f->n_post < max_post) {
        int32_t r = cpu_single_reader(p, cur);
        if (r < 0 || f->n_extra >= 8)
            break;
        const sg_node *n = &p->g->nodes[r];
        if (n->n_outputs < 1 || n->outputs[0] < 0 || p->g->values[n->outputs[0]].dtype != SEGRT_DTYPE_FLOAT32)
            break;
        /* No eltwise post-ops: oneDNN's lose NaN (Relu(NaN) = 0, Exp(NaN) =
         * inf) and mix up the parameters of two of the same kind. PReLU and
         * addition keep IEEE semantics. */
        if (n->op == SG_OP_PRELU && n->inputs[0] == cur) {
            int64_t ch = prelu_channels(p, n, k, rank);
            if (!ch)
                break;
            DNNL_TRY(dnnl_post_ops_append_prelu(f->po, ch == 1 ? 0 : 1 << 1));
            int64_t dims[SEGRT_MAX_RANK];
            for (int32_t d = 0; d < rank; d++)
                dims[d] = d == 1 ? ch : 1;
            int32_t t;
            SG_TRY(cpu_tensor_new_plain(p, CPU_T_CONST, SEGRT_DTYPE_FLOAT32, rank, dims, &t));
            p->tensors[t].data = sg_blob_data(p->g->values[n->inputs[1]].data);
            f->extra[f->n_extra++] = (cpu_arg){DNNL_ARG_ATTR_MULTIPLE_POST_OP(f->n_post) | DNNL_ARG_WEIGHTS, t};
        } else if (n->op == SG_OP_ADD && n->n_inputs == 2) {
            int32_t other = n->inputs[0] == cur ? n->inputs[1] : n->inputs[0];
            int32_t ot = cpu_value(p, other);
            /* The residual must already be computed and have this shape. */
            if (other == cur || ot < 0 || !p->tensors[ot].has_md || p->tensors[ot].dtype != SEGRT_DTYPE_FLOAT32 ||
                p->tensors[ot].rank != rank)
                break;
            const sg_value *cv = &p->g->values[n->outputs[0]];
            bool same = true;
            for (int32_t d = 0; d < rank; d++)
                same &= p->tensors[ot].dims[d] == cv->shape.d[d].size;
            if (!same)
                break;
            DNNL_TRY(dnnl_post_ops_append_binary(f->po, dnnl_binary_add, &p->tensors[ot].md));
            f->extra[f->n_extra++] = (cpu_arg){DNNL_ARG_ATTR_MULTIPLE_POST_OP(f->n_post) | DNNL_ARG_SRC_1, ot};
        } else {
            break;
        }
        p->fused[r] = 1;
        f->nodes[f->n_post++] = r;
        cur = n->outputs[0];
    }
    f->out_value = cur;
    return SEGRT_OK;
}

/* Takes back the marks of a fusion attempt. */
static void unfuse(sg_cpu_plan *p, const conv_fusion *f)
{
    for (int32_t k = 0; k < f->n_post; k++)
        p->fused[f->nodes[k]] = 0;
}

static sg_status create_pd(sg_cpu_plan *p, bool transposed, const dnnl_memory_desc_t *src,
                           const dnnl_memory_desc_t *w, const dnnl_memory_desc_t *b,
                           const dnnl_memory_desc_t *dst, const dnnl_dims_t strides, const dnnl_dims_t dil,
                           const dnnl_dims_t pl, const dnnl_dims_t pr, dnnl_post_ops_t po,
                           dnnl_primitive_desc_t *pd)
{
    dnnl_primitive_attr_t attr;
    SG_TRY(cpu_attr_new(&attr));
    dnnl_status_t s = dnnl_primitive_attr_set_post_ops(attr, po);
    if (s == dnnl_success) {
        if (transposed) {
            dnnl_deconvolution_desc_t d;
            s = dnnl_dilated_deconvolution_forward_desc_init(&d, dnnl_forward_inference, dnnl_deconvolution_direct,
                                                             src, w, b, dst, strides, dil, pl, pr);
            if (s == dnnl_success)
                s = dnnl_primitive_desc_create(pd, &d, attr, p->engine, NULL);
        } else {
            dnnl_convolution_desc_t d;
            s = dnnl_dilated_convolution_forward_desc_init(&d, dnnl_forward_inference, dnnl_convolution_direct,
                                                           src, w, b, dst, strides, dil, pl, pr);
            if (s == dnnl_success)
                s = dnnl_primitive_desc_create(pd, &d, attr, p->engine, NULL);
        }
    }
    dnnl_primitive_attr_destroy(attr);
    /* Shapes oneDNN's descriptors refuse (checked there, not by segrt's
     * builder) go to the reference kernel as unimplemented ones do. */
    if (s == dnnl_unimplemented || s == dnnl_invalid_arguments)
        return SEGRT_ERROR_UNSUPPORTED;
    DNNL_TRY(s);
    return SEGRT_OK;
}

sg_status cpu_build_conv(sg_cpu_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    bool transposed = n->op == SG_OP_CONV_TRANSPOSE;
    if (n->n_inputs < 2 || n->outputs[0] < 0)
        return SEGRT_ERROR_UNSUPPORTED;
    const sg_value *xv = &p->g->values[n->inputs[0]], *wv = &p->g->values[n->inputs[1]];
    const sg_value *bv = n->n_inputs > 2 && n->inputs[2] >= 0 ? &p->g->values[n->inputs[2]] : NULL;
    const sg_value *yv = &p->g->values[n->outputs[0]];
    int32_t rank = xv->shape.rank, spatial = rank - 2;
    if (spatial < 1 || spatial > 3 || xv->dtype != SEGRT_DTYPE_FLOAT32 || !wv->data ||
        wv->dtype != SEGRT_DTYPE_FLOAT32 || (bv && (!bv->data || bv->dtype != SEGRT_DTYPE_FLOAT32)) ||
        cpu_value(p, n->inputs[0]) < 0 || !p->tensors[cpu_value(p, n->inputs[0])].has_md)
        return SEGRT_ERROR_UNSUPPORTED;
    /* Transposed convolutions with auto_pad or output_shape compute their
     * padding by rules oneDNN does not share; the reference handles them. */
    if (transposed && (sg_attr_find(n, "output_shape") || strcmp(sg_attr_string(n, "auto_pad", "NOTSET"), "NOTSET")))
        return SEGRT_ERROR_UNSUPPORTED;
    sg_conv_attrs a;
    if (sg_conv_attrs_read(p->g, n, spatial, &wv->shape, wv->name, &a) != SEGRT_OK)
        return SEGRT_ERROR_UNSUPPORTED;
    int64_t group = sg_attr_int(n, "group", 1);
    int64_t c_in = xv->shape.d[1].size, k_out = yv->shape.d[1].size;
    dnnl_dims_t strides, dil, pl, pr;
    for (int32_t d = 0; d < spatial; d++) {
        int64_t in = xv->shape.d[2 + d].size, out = yv->shape.d[2 + d].size;
        int64_t k_eff = (a.kernel[d] - 1) * a.dilations[d] + 1;
        strides[d] = a.strides[d];
        dil[d] = a.dilations[d] - 1;
        if (transposed) {
            pl[d] = a.pads[d];
            pr[d] = (in - 1) * a.strides[d] + k_eff - pl[d] - out; /* output_padding included */
        } else {
            int64_t total = (out - 1) * a.strides[d] + k_eff - in;
            pl[d] = sg_conv_pad_begin(&a, d, total);
            pr[d] = total - pl[d];
        }
        if (pr[d] < 0)
            return SEGRT_ERROR_UNSUPPORTED;
    }
    dnnl_dims_t xdims, ydims;
    for (int32_t d = 0; d < rank; d++) {
        xdims[d] = xv->shape.d[d].size;
        ydims[d] = yv->shape.d[d].size;
    }
    dnnl_memory_desc_t src_any, w_user, w_any, b_md, dst_any;
    weight_md(transposed, group, k_out, c_in, spatial, a.kernel, &w_user);
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&w_any, w_user.ndims, w_user.dims, dnnl_f32, dnnl_format_tag_any));
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&src_any, rank, xdims, dnnl_f32, dnnl_format_tag_any));
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&dst_any, rank, ydims, dnnl_f32, dnnl_format_tag_any));
    dnnl_dims_t bdims = {k_out};
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&b_md, 1, bdims, dnnl_f32, dnnl_a));

    /* Fusion marks readers as absorbed (readers that were not); each
     * attempt starts by taking back the marks of the one before. */
    int32_t tensors_before = p->n_tensors;
    conv_fusion f;
    memset(&f, 0, sizeof f);
    dnnl_primitive_desc_t pd = NULL;
    sg_status s = SEGRT_OK;
    /* oneDNN's optimized kernels take only some post-op chains (3D
     * convolutions with PReLU, say, fall to its slow reference kernel):
     * shorten the chain until an optimized implementation is found; the
     * operators left out run as steps of their own. */
    for (int32_t max_post = 8; max_post >= 0; max_post--) {
        unfuse(p, &f);
        p->n_tensors = tensors_before;
        memset(&f, 0, sizeof f);
        s = fuse_post_ops(p, i, k_out, rank, max_post, &f);
        if (s == SEGRT_OK)
            s = create_pd(p, transposed, &src_any, &w_any, bv ? &b_md : NULL, &dst_any, strides, dil, pl, pr, f.po,
                          &pd);
        if (f.po)
            dnnl_post_ops_destroy(f.po);
        if (s != SEGRT_OK && s != SEGRT_ERROR_UNSUPPORTED)
            break;
        if (s == SEGRT_OK) {
            const char *impl = "";
            dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
            /* Its reference kernel, and the im2col+gemm path it takes for
             * some fused 3D layouts, are many times slower than fusing less. */
            bool slow = strncmp(impl, "ref", 3) == 0 || strstr(impl, "gemm") != NULL;
            if (!slow || f.n_post == 0)
                break;
            dnnl_primitive_desc_destroy(pd);
            pd = NULL;
            s = SEGRT_ERROR_UNSUPPORTED;
        }
        if (max_post > f.n_post)
            max_post = f.n_post; /* the loop's decrement then drops one */
    }
    if (s != SEGRT_OK) {
        unfuse(p, &f);
        p->n_tensors = tensors_before;
        return s;
    }

    /* From here on the node is ours: conversions and constants. */
    int32_t x, w, b = -1, y;
    void *wdata;
    s = cpu_value_as(p, n->inputs[0], dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0), &x);
    const dnnl_memory_desc_t *w_md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    if (s == SEGRT_OK)
        s = cpu_const_reordered(p, &w_user, sg_blob_data(wv->data), w_md, &wdata);
    if (s == SEGRT_OK)
        s = cpu_tensor_new_md(p, SEGRT_DTYPE_FLOAT32, w_md, &w);
    if (s == SEGRT_OK) {
        p->tensors[w].kind = CPU_T_CONST;
        p->tensors[w].data = wdata;
    }
    if (s == SEGRT_OK && bv) {
        s = cpu_tensor_new_plain(p, CPU_T_CONST, SEGRT_DTYPE_FLOAT32, 1, &k_out, &b);
        if (s == SEGRT_OK)
            p->tensors[b].data = sg_blob_data(bv->data);
    }
    if (s == SEGRT_OK)
        s = cpu_tensor_new_md(p, SEGRT_DTYPE_FLOAT32, dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), &y);
    cpu_step *st = NULL;
    if (s == SEGRT_OK)
        s = cpu_step_new(p, n->name, &st);
    if (s != SEGRT_OK) {
        dnnl_primitive_desc_destroy(pd);
        return s;
    }
    p->value_tensor[f.out_value] = y;
    SG_TRY(cpu_primitive(p, pd, &st->prim));
    st->args[st->n_args++] = (cpu_arg){DNNL_ARG_SRC, x};
    st->args[st->n_args++] = (cpu_arg){DNNL_ARG_WEIGHTS, w};
    if (b >= 0)
        st->args[st->n_args++] = (cpu_arg){DNNL_ARG_BIAS, b};
    st->args[st->n_args++] = (cpu_arg){DNNL_ARG_DST, y};
    for (int32_t e = 0; e < f.n_extra; e++)
        st->args[st->n_args++] = f.extra[e];
    return SEGRT_OK;
}
