/* Arithmetic through oneDNN where it keeps ONNX's semantics exactly: Add,
 * Sub, Mul and Div with numpy broadcasting of one operand (IEEE operations,
 * so NaN and Inf flow as the spec's formulas say), MatMul, and Resize in
 * linear half-pixel mode (the one resampling whose coordinates oneDNN
 * computes as ONNX does). Max and Min stay on the reference kernels, and
 * Softmax and LogSoftmax have segrt's (cpu_softmax.c): oneDNN's lose NaN
 * (Softmax of a row with NaN gave 0). */
#include "backend/cpu/cpu_internal.h"

#include <string.h>

/* A oneDNN descriptor for value v at rank `rank` (ones in front), or false
 * when v would need a reshaped view of an activation in a non-plain layout. */
static bool md_at_rank(sg_cpu_plan *p, int32_t v, int32_t rank, int32_t *tensor, dnnl_memory_desc_t *md)
{
    int32_t t = cpu_value(p, v);
    if (t < 0 || !p->tensors[t].has_md || p->tensors[t].dtype != SEGRT_DTYPE_FLOAT32)
        return false;
    const cpu_tensor *ct = &p->tensors[t];
    if (ct->rank == rank) {
        *tensor = t;
        *md = ct->md;
        return true;
    }
    /* A constant can be viewed at another rank: a new tensor over its data. */
    if (ct->kind != CPU_T_CONST || ct->rank > rank)
        return false;
    int64_t dims[SEGRT_MAX_RANK];
    for (int32_t d = 0; d < rank; d++)
        dims[d] = d < rank - ct->rank ? 1 : ct->dims[d - (rank - ct->rank)];
    void *data = ct->data;
    int32_t view;
    if (cpu_tensor_new_plain(p, CPU_T_CONST, SEGRT_DTYPE_FLOAT32, rank, dims, &view) != SEGRT_OK)
        return false;
    p->tensors[view].data = data;
    *tensor = view;
    *md = p->tensors[view].md;
    return true;
}

static sg_status create(sg_cpu_plan *p, const_dnnl_op_desc_t desc, dnnl_primitive_desc_t *pd)
{
    dnnl_primitive_attr_t attr;
    SG_TRY(cpu_attr_new(&attr));
    dnnl_status_t ds = dnnl_primitive_desc_create(pd, desc, attr, p->engine, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (ds != dnnl_success)
        return SEGRT_ERROR_UNSUPPORTED;
    /* Its reference kernels are slower than segrt's. */
    const char *impl = "";
    dnnl_primitive_desc_query(*pd, dnnl_query_impl_info_str, 0, &impl);
    if (strncmp(impl, "ref", 3) == 0) {
        dnnl_primitive_desc_destroy(*pd);
        return SEGRT_ERROR_UNSUPPORTED;
    }
    return SEGRT_OK;
}

static void value_dims(const sg_cpu_plan *p, int32_t v, dnnl_dims_t dims)
{
    const sg_shape *s = &p->g->values[v].shape;
    for (int32_t d = 0; d < s->rank; d++)
        dims[d] = s->d[d].size;
}

sg_status cpu_build_binary(sg_cpu_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    dnnl_alg_kind_t alg;
    switch (n->op) {
    case SG_OP_ADD: alg = dnnl_binary_add; break;
    case SG_OP_SUB: alg = dnnl_binary_sub; break;
    case SG_OP_MUL: alg = dnnl_binary_mul; break;
    case SG_OP_DIV: alg = dnnl_binary_div; break;
    default: return SEGRT_ERROR_UNSUPPORTED;
    }
    if (n->n_inputs != 2 || n->inputs[0] < 0 || n->inputs[1] < 0 || n->outputs[0] < 0)
        return SEGRT_ERROR_UNSUPPORTED;
    const sg_value *yv = &p->g->values[n->outputs[0]];
    int32_t rank = yv->shape.rank;
    if (yv->dtype != SEGRT_DTYPE_FLOAT32 || rank < 1)
        return SEGRT_ERROR_UNSUPPORTED;
    int32_t tensors_before = p->n_tensors;
    int32_t ta, tb;
    dnnl_memory_desc_t a, b;
    if (!md_at_rank(p, n->inputs[0], rank, &ta, &a) || !md_at_rank(p, n->inputs[1], rank, &tb, &b)) {
        p->n_tensors = tensors_before;
        return SEGRT_ERROR_UNSUPPORTED;
    }
    /* oneDNN broadcasts only its second operand: the first must have the
     * output's dims. Add and Mul commute; Sub and Div cannot swap. */
    bool a_full = true, b_full = true;
    for (int32_t d = 0; d < rank; d++) {
        a_full &= a.dims[d] == yv->shape.d[d].size;
        b_full &= b.dims[d] == yv->shape.d[d].size;
    }
    if (!a_full) {
        if (!b_full || (alg != dnnl_binary_add && alg != dnnl_binary_mul)) {
            p->n_tensors = tensors_before;
            return SEGRT_ERROR_UNSUPPORTED;
        }
        dnnl_memory_desc_t tmd = a;
        a = b;
        b = tmd;
        int32_t tt = ta;
        ta = tb;
        tb = tt;
    }
    dnnl_dims_t ydims;
    value_dims(p, n->outputs[0], ydims);
    dnnl_memory_desc_t dst;
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&dst, rank, ydims, dnnl_f32, dnnl_format_tag_any));
    dnnl_binary_desc_t d;
    dnnl_primitive_desc_t pd;
    if (dnnl_binary_desc_init(&d, alg, &a, &b, &dst) != dnnl_success || create(p, &d, &pd) != SEGRT_OK) {
        p->n_tensors = tensors_before;
        return SEGRT_ERROR_UNSUPPORTED;
    }
    cpu_arg args[2] = {{DNNL_ARG_SRC_0, ta}, {DNNL_ARG_SRC_1, tb}};
    return cpu_primitive_step(p, n, pd, args, 2, DNNL_ARG_DST);
}

sg_status cpu_build_matmul(sg_cpu_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    if (n->n_inputs != 2 || n->outputs[0] < 0)
        return SEGRT_ERROR_UNSUPPORTED;
    const sg_value *yv = &p->g->values[n->outputs[0]];
    int32_t rank = yv->shape.rank;
    /* 1-D operands drop a dim from the output: the reference handles them. */
    if (yv->dtype != SEGRT_DTYPE_FLOAT32 || rank < 2 || p->g->values[n->inputs[0]].shape.rank < 2 ||
        p->g->values[n->inputs[1]].shape.rank < 2)
        return SEGRT_ERROR_UNSUPPORTED;
    int32_t tensors_before = p->n_tensors;
    int32_t ta, tb;
    dnnl_memory_desc_t a, b;
    if (!md_at_rank(p, n->inputs[0], rank, &ta, &a) || !md_at_rank(p, n->inputs[1], rank, &tb, &b)) {
        p->n_tensors = tensors_before;
        return SEGRT_ERROR_UNSUPPORTED;
    }
    dnnl_dims_t ydims;
    value_dims(p, n->outputs[0], ydims);
    dnnl_memory_desc_t dst;
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&dst, rank, ydims, dnnl_f32, dnnl_format_tag_any));
    dnnl_matmul_desc_t d;
    dnnl_primitive_desc_t pd;
    if (dnnl_matmul_desc_init(&d, &a, &b, NULL, &dst) != dnnl_success || create(p, &d, &pd) != SEGRT_OK) {
        p->n_tensors = tensors_before;
        return SEGRT_ERROR_UNSUPPORTED;
    }
    cpu_arg args[2] = {{DNNL_ARG_SRC, ta}, {DNNL_ARG_WEIGHTS, tb}};
    return cpu_primitive_step(p, n, pd, args, 2, DNNL_ARG_DST);
}

sg_status cpu_build_resize(sg_cpu_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    int32_t x = cpu_value(p, n->inputs[0]);
    if (n->outputs[0] < 0 || x < 0 || !p->tensors[x].has_md || p->tensors[x].dtype != SEGRT_DTYPE_FLOAT32)
        return SEGRT_ERROR_UNSUPPORTED;
    const sg_value *xv = &p->g->values[n->inputs[0]], *yv = &p->g->values[n->outputs[0]];
    int32_t rank = xv->shape.rank;
    const char *mode = sg_attr_string(n, "mode", "nearest");
    const char *ctm = sg_attr_string(n, "coordinate_transformation_mode", "half_pixel");
    /* oneDNN's linear resampling maps output x to input (x + 0.5) * in/out -
     * 0.5: ONNX's half_pixel, and pytorch_half_pixel when no output dim is 1.
     * Its scale is in/out, which equals ONNX's 1/scale only when the output
     * size comes from sizes, or from scales that divide exactly: require
     * in * scale == out by checking the given scales, when there are any. */
    bool pytorch = strcmp(ctm, "pytorch_half_pixel") == 0;
    if (strcmp(mode, "linear") != 0 || (strcmp(ctm, "half_pixel") != 0 && !pytorch) ||
        sg_attr_int(n, "antialias", 0) != 0 || rank < 3 || rank > 5 || sg_attr_find(n, "axes"))
        return SEGRT_ERROR_UNSUPPORTED;
    if (n->n_inputs > 2 && n->inputs[2] >= 0) {
        const sg_value *sv = &p->g->values[n->inputs[2]];
        int64_t numel;
        if (!sv->data || sv->dtype != SEGRT_DTYPE_FLOAT32 || !sg_shape_numel(&sv->shape, &numel))
            return SEGRT_ERROR_UNSUPPORTED;
        const float *scales = sg_blob_data(sv->data);
        for (int64_t d = 0; d < numel && numel == rank; d++)
            if ((double)xv->shape.d[d].size * scales[d] != (double)yv->shape.d[d].size)
                return SEGRT_ERROR_UNSUPPORTED;
        if (numel != rank && numel != 0)
            return SEGRT_ERROR_UNSUPPORTED;
    }
    for (int32_t d = 0; d < rank; d++) {
        bool spatial = d >= 2;
        if (!spatial && xv->shape.d[d].size != yv->shape.d[d].size)
            return SEGRT_ERROR_UNSUPPORTED; /* resampling of batch or channels */
        if (pytorch && yv->shape.d[d].size == 1 && spatial)
            return SEGRT_ERROR_UNSUPPORTED;
    }
    dnnl_dims_t ydims;
    value_dims(p, n->outputs[0], ydims);
    dnnl_memory_desc_t src = p->tensors[x].md, dst;
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&dst, rank, ydims, dnnl_f32, dnnl_format_tag_any));
    dnnl_resampling_desc_t d;
    dnnl_primitive_desc_t pd;
    if (dnnl_resampling_forward_desc_init(&d, dnnl_forward_inference, dnnl_resampling_linear, NULL, &src, &dst) !=
            dnnl_success ||
        create(p, &d, &pd) != SEGRT_OK)
        return SEGRT_ERROR_UNSUPPORTED;
    cpu_arg args[1] = {{DNNL_ARG_SRC, x}};
    return cpu_primitive_step(p, n, pd, args, 1, DNNL_ARG_DST);
}
