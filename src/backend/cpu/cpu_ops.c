/* CPU builders for the simpler operators: elementwise activations, pooling
 * and concatenation through oneDNN, and everything else through the
 * reference kernels. */
#include "backend/cpu/cpu_internal.h"
#include "backend/ref/ref.h"
#include "graph/infer_util.h"

#include <float.h>
#include <string.h>

/* A float32 scalar constant input, or def when absent; false when present
 * but not a constant scalar. */
static bool const_scalar(const sg_cpu_plan *p, const sg_node *n, int32_t i, float def, float *out)
{
    if (i >= n->n_inputs || n->inputs[i] < 0) {
        *out = def;
        return true;
    }
    const sg_value *v = &p->g->values[n->inputs[i]];
    int64_t numel;
    if (!v->data || v->dtype != SEGRT_DTYPE_FLOAT32 || !sg_shape_numel(&v->shape, &numel) || numel != 1)
        return false;
    *out = *(const float *)sg_blob_data(v->data);
    return true;
}

bool cpu_eltwise_of(const sg_cpu_plan *p, const sg_node *n, dnnl_alg_kind_t *alg, float *alpha,
                    float *beta)
{
    if (n->n_inputs < 1 || n->inputs[0] < 0 || p->g->values[n->inputs[0]].dtype != SEGRT_DTYPE_FLOAT32)
        return false;
    *alpha = 0;
    *beta = 0;
    switch (n->op) {
    case SG_OP_RELU: *alg = dnnl_eltwise_relu; return true;
    case SG_OP_LEAKY_RELU:
        *alg = dnnl_eltwise_relu;
        *alpha = sg_attr_float(n, "alpha", 0.01f);
        return true;
    case SG_OP_SIGMOID: *alg = dnnl_eltwise_logistic; return true;
    case SG_OP_TANH: *alg = dnnl_eltwise_tanh; return true;
    case SG_OP_ELU:
        *alg = dnnl_eltwise_elu;
        *alpha = sg_attr_float(n, "alpha", 1.0f);
        return true;
    case SG_OP_EXP: *alg = dnnl_eltwise_exp; return true;
    case SG_OP_SQRT: *alg = dnnl_eltwise_sqrt; return true;
    case SG_OP_ABS: *alg = dnnl_eltwise_abs; return true;
    case SG_OP_NEG:
        *alg = dnnl_eltwise_linear;
        *alpha = -1;
        return true;
    case SG_OP_HARD_SWISH: *alg = dnnl_eltwise_hardswish; return true;
    case SG_OP_GELU: {
        const char *approx = sg_attr_string(n, "approximate", "none");
        *alg = strcmp(approx, "tanh") == 0 ? dnnl_eltwise_gelu_tanh : dnnl_eltwise_gelu_erf;
        return strcmp(approx, "tanh") == 0 || strcmp(approx, "none") == 0;
    }
    case SG_OP_CLIP:
        /* Clip without a bound leaves that side open (ONNX: the dtype's
         * largest value), as the reference kernel does. */
        *alg = dnnl_eltwise_clip_v2;
        return const_scalar(p, n, 1, -FLT_MAX, alpha) && const_scalar(p, n, 2, FLT_MAX, beta);
    default: return false;
    }
}

static bool f32_with_md(const sg_cpu_plan *p, int32_t v)
{
    int32_t t = cpu_value(p, v);
    return t >= 0 && p->tensors[t].dtype == SEGRT_DTYPE_FLOAT32 && p->tensors[t].has_md;
}

/* Gives graph value v (the output of a oneDNN step) a new arena tensor
 * with layout md. */
static sg_status new_output(sg_cpu_plan *p, int32_t v, const dnnl_memory_desc_t *md, int32_t *out)
{
    SG_TRY(cpu_tensor_new_md(p, p->g->values[v].dtype, md, out));
    p->value_tensor[v] = *out;
    return SEGRT_OK;
}

sg_status cpu_build_eltwise(sg_cpu_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    /* oneDNN's ReLU maps NaN to 0; ONNX keeps NaN. segrt's kernel does. */
    if (n->op == SG_OP_RELU || n->op == SG_OP_LEAKY_RELU)
        return cpu_build_prelu(p, i);
    dnnl_alg_kind_t alg;
    float alpha, beta;
    if (!cpu_eltwise_of(p, n, &alg, &alpha, &beta) || !f32_with_md(p, n->inputs[0]) || n->outputs[0] < 0)
        return SEGRT_ERROR_UNSUPPORTED;
    int32_t x = cpu_value(p, n->inputs[0]);
    dnnl_eltwise_desc_t d;
    /* oneDNN refuses some valid ONNX cases (Clip with min > max, empty
     * tensors): those run on the reference kernel. */
    if (dnnl_eltwise_forward_desc_init(&d, dnnl_forward_inference, alg, &p->tensors[x].md, alpha, beta) !=
        dnnl_success)
        return SEGRT_ERROR_UNSUPPORTED;
    dnnl_primitive_attr_t attr;
    SG_TRY(cpu_attr_new(&attr));
    dnnl_primitive_desc_t pd;
    dnnl_status_t ds = dnnl_primitive_desc_create(&pd, &d, attr, p->engine, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (ds == dnnl_unimplemented)
        return SEGRT_ERROR_UNSUPPORTED;
    DNNL_TRY(ds);
    int32_t y;
    sg_status s = new_output(p, n->outputs[0], dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), &y);
    cpu_step *st;
    if (s == SEGRT_OK)
        s = cpu_step_new(p, n->name, &st);
    if (s != SEGRT_OK) {
        dnnl_primitive_desc_destroy(pd);
        return s;
    }
    SG_TRY(cpu_primitive(p, pd, &st->prim));
    st->args[0] = (cpu_arg){DNNL_ARG_SRC, x};
    st->args[1] = (cpu_arg){DNNL_ARG_DST, y};
    st->n_args = 2;
    return SEGRT_OK;
}

sg_status cpu_build_pool(sg_cpu_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    if (!f32_with_md(p, n->inputs[0]) || (n->n_outputs > 1 && n->outputs[1] >= 0) || n->outputs[0] < 0)
        return SEGRT_ERROR_UNSUPPORTED;
    const sg_value *xv = &p->g->values[n->inputs[0]], *yv = &p->g->values[n->outputs[0]];
    int32_t spatial = xv->shape.rank - 2;
    if (spatial < 1 || spatial > 3)
        return SEGRT_ERROR_UNSUPPORTED;
    bool global = n->op == SG_OP_GLOBAL_AVERAGE_POOL || n->op == SG_OP_GLOBAL_MAX_POOL;
    bool is_max = n->op == SG_OP_MAX_POOL || n->op == SG_OP_GLOBAL_MAX_POOL;
    sg_conv_attrs a;
    memset(&a, 0, sizeof a);
    if (!global && sg_conv_attrs_read(p->g, n, spatial, NULL, NULL, &a) != SEGRT_OK)
        return SEGRT_ERROR_UNSUPPORTED;
    dnnl_dims_t strides, kernel, dil, pl, pr;
    for (int32_t d = 0; d < spatial; d++) {
        int64_t in = xv->shape.d[2 + d].size, out = yv->shape.d[2 + d].size;
        if (global) {
            kernel[d] = in;
            strides[d] = 1;
            dil[d] = 0;
            pl[d] = pr[d] = 0;
            continue;
        }
        int64_t k_eff = (a.kernel[d] - 1) * a.dilations[d] + 1;
        int64_t total = (out - 1) * a.strides[d] + k_eff - in;
        kernel[d] = a.kernel[d];
        strides[d] = a.strides[d];
        dil[d] = a.dilations[d] - 1;
        if (a.auto_pad == SG_AUTO_PAD_NOTSET)
            pl[d] = a.pads[d];
        else if (a.auto_pad == SG_AUTO_PAD_VALID)
            pl[d] = 0;
        else {
            int64_t t = total > 0 ? total : 0;
            pl[d] = a.auto_pad == SG_AUTO_PAD_SAME_UPPER ? t / 2 : t - t / 2;
        }
        pr[d] = total - pl[d];
        /* oneDNN wants the padding that yields exactly this output size.
         * Average pooling whose ceil mode adds padding beyond the model's
         * would count it differently, so that case stays on the reference. */
        int64_t model_end = a.auto_pad == SG_AUTO_PAD_NOTSET ? a.pads[spatial + d] : pr[d];
        if (pr[d] < 0 || (!is_max && pr[d] != model_end))
            return SEGRT_ERROR_UNSUPPORTED;
    }
    dnnl_alg_kind_t alg = is_max ? dnnl_pooling_max
                          : sg_attr_int(n, "count_include_pad", 0) ? dnnl_pooling_avg_include_padding
                                                                   : dnnl_pooling_avg_exclude_padding;
    int32_t x = cpu_value(p, n->inputs[0]);
    dnnl_memory_desc_t dst_any;
    dnnl_dims_t ydims;
    for (int32_t d = 0; d < yv->shape.rank; d++)
        ydims[d] = yv->shape.d[d].size;
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&dst_any, yv->shape.rank, ydims, dnnl_f32, dnnl_format_tag_any));
    dnnl_pooling_v2_desc_t d;
    if (dnnl_pooling_v2_forward_desc_init(&d, dnnl_forward_inference, alg, &p->tensors[x].md, &dst_any, strides,
                                          kernel, dil, pl, pr) != dnnl_success)
        return SEGRT_ERROR_UNSUPPORTED; /* e.g. padding as large as the window */
    dnnl_primitive_attr_t attr;
    SG_TRY(cpu_attr_new(&attr));
    dnnl_primitive_desc_t pd;
    dnnl_status_t ds = dnnl_primitive_desc_create(&pd, &d, attr, p->engine, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (ds == dnnl_unimplemented)
        return SEGRT_ERROR_UNSUPPORTED;
    DNNL_TRY(ds);
    int32_t y;
    sg_status s = new_output(p, n->outputs[0], dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), &y);
    cpu_step *st;
    if (s == SEGRT_OK)
        s = cpu_step_new(p, n->name, &st);
    if (s != SEGRT_OK) {
        dnnl_primitive_desc_destroy(pd);
        return s;
    }
    SG_TRY(cpu_primitive(p, pd, &st->prim));
    st->args[0] = (cpu_arg){DNNL_ARG_SRC, x};
    st->args[1] = (cpu_arg){DNNL_ARG_DST, y};
    st->n_args = 2;
    return SEGRT_OK;
}

/* The format tag of md among the layouts oneDNN's primitives produce
 * for 3-5 dims (plain, channels-last, channel-blocked by 8 or 16), or
 * dnnl_format_tag_undef. */
static dnnl_format_tag_t tag_of(const dnnl_memory_desc_t *md)
{
    static const dnnl_format_tag_t tags[3][4] = {
        {dnnl_abc, dnnl_acb, dnnl_aBc16b, dnnl_aBc8b},
        {dnnl_abcd, dnnl_acdb, dnnl_aBcd16b, dnnl_aBcd8b},
        {dnnl_abcde, dnnl_acdeb, dnnl_aBcde16b, dnnl_aBcde8b},
    };
    if (md->ndims < 3 || md->ndims > 5)
        return dnnl_format_tag_undef;
    for (int k = 0; k < 4; k++) {
        dnnl_memory_desc_t t;
        if (dnnl_memory_desc_init_by_tag(&t, md->ndims, md->dims, md->data_type, tags[md->ndims - 3][k]) ==
                dnnl_success &&
            dnnl_memory_desc_equal(&t, md))
            return tags[md->ndims - 3][k];
    }
    return dnnl_format_tag_undef;
}

static bool is_channels_last(dnnl_format_tag_t t) { return t == dnnl_acb || t == dnnl_acdb || t == dnnl_acdeb; }

sg_status cpu_build_concat(sg_cpu_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    if (n->n_inputs < 1 || n->n_inputs >= CPU_MAX_ARGS || n->outputs[0] < 0)
        return SEGRT_ERROR_UNSUPPORTED;
    for (int32_t k = 0; k < n->n_inputs; k++)
        if (n->inputs[k] < 0 || !f32_with_md(p, n->inputs[k]))
            return SEGRT_ERROR_UNSUPPORTED;
    const sg_value *yv = &p->g->values[n->outputs[0]];
    int32_t axis;
    if (yv->shape.rank < 1 || sg_infer_axis(n, sg_attr_int(n, "axis", 0), yv->shape.rank, &axis) != SEGRT_OK)
        return SEGRT_ERROR_UNSUPPORTED;
    /* oneDNN's fast concat wants every input in one layout, else it falls to
     * a slow reference kernel. Pick channels-last when any input has it (the
     * layout oneDNN's convolutions prefer here), else the first input's. */
    dnnl_format_tag_t tag = tag_of(&p->tensors[cpu_value(p, n->inputs[0])].md);
    for (int32_t k = 0; k < n->n_inputs; k++) {
        dnnl_format_tag_t t = tag_of(&p->tensors[cpu_value(p, n->inputs[k])].md);
        if (is_channels_last(t))
            tag = t;
    }
    dnnl_memory_desc_t srcs[CPU_MAX_ARGS];
    int32_t tensors[CPU_MAX_ARGS];
    for (int32_t k = 0; k < n->n_inputs; k++) {
        tensors[k] = cpu_value(p, n->inputs[k]);
        if (tag != dnnl_format_tag_undef) {
            dnnl_memory_desc_t want;
            const cpu_tensor *t = &p->tensors[tensors[k]];
            DNNL_TRY(dnnl_memory_desc_init_by_tag(&want, t->md.ndims, t->md.dims, dnnl_f32, tag));
            SG_TRY(cpu_value_as(p, n->inputs[k], &want, &tensors[k]));
        }
        srcs[k] = p->tensors[tensors[k]].md;
    }
    dnnl_memory_desc_t dst_md;
    dnnl_dims_t ydims;
    for (int32_t d = 0; d < yv->shape.rank; d++)
        ydims[d] = yv->shape.d[d].size;
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&dst_md, yv->shape.rank, ydims, dnnl_f32,
                                          tag != dnnl_format_tag_undef ? tag : dnnl_format_tag_any));
    dnnl_primitive_attr_t attr;
    SG_TRY(cpu_attr_new(&attr));
    dnnl_primitive_desc_t pd;
    dnnl_status_t ds = dnnl_concat_primitive_desc_create(&pd, &dst_md, n->n_inputs, axis, srcs, attr, p->engine);
    dnnl_primitive_attr_destroy(attr);
    DNNL_TRY(ds);
    int32_t y;
    sg_status s = new_output(p, n->outputs[0], dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), &y);
    cpu_step *st;
    if (s == SEGRT_OK)
        s = cpu_step_new(p, n->name, &st);
    if (s != SEGRT_OK) {
        dnnl_primitive_desc_destroy(pd);
        return s;
    }
    SG_TRY(cpu_primitive(p, pd, &st->prim));
    for (int32_t k = 0; k < n->n_inputs; k++)
        st->args[k] = (cpu_arg){DNNL_ARG_MULTIPLE_SRC + k, tensors[k]};
    st->args[n->n_inputs] = (cpu_arg){DNNL_ARG_DST, y};
    st->n_args = n->n_inputs + 1;
    return SEGRT_OK;
}

sg_status cpu_build_fallback(sg_cpu_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    if (!sg_ref_kernel(n->op))
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "the CPU backend has no kernel for this operator");
    if (n->n_inputs + n->n_outputs > CPU_MAX_ARGS)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "more than %d inputs and outputs", CPU_MAX_ARGS);
    int32_t args[CPU_MAX_ARGS];
    for (int32_t k = 0; k < n->n_inputs; k++) {
        args[k] = -1;
        if (n->inputs[k] >= 0)
            SG_TRY(cpu_value_plain(p, n->inputs[k], &args[k]));
    }
    for (int32_t k = 0; k < n->n_outputs; k++) {
        int32_t v = n->outputs[k];
        args[n->n_inputs + k] = -1;
        if (v < 0)
            continue;
        const sg_value *val = &p->g->values[v];
        int64_t dims[SEGRT_MAX_RANK];
        if (!sg_shape_dims(&val->shape, dims))
            return sg_node_error(n, SEGRT_ERROR_INTERNAL, "output `%s` has no static shape", val->name);
        SG_TRY(cpu_tensor_new_plain(p, CPU_T_ARENA, val->dtype, val->shape.rank, dims, &args[n->n_inputs + k]));
        p->value_tensor[v] = args[n->n_inputs + k];
    }
    cpu_step *st;
    SG_TRY(cpu_step_new(p, n->name, &st));
    st->kernel = cpu_fallback_kernel;
    st->node = n;
    st->fallback = true;
    st->n_outputs = n->n_outputs;
    st->n_args = n->n_inputs + n->n_outputs;
    for (int32_t k = 0; k < st->n_args; k++)
        st->args[k] = (cpu_arg){k, args[k]};
    return SEGRT_OK;
}
