/* CPU builders for the simpler operators: elementwise activations, pooling
 * and concatenation through oneDNN, and everything else through the
 * reference kernels. */
#include "backend/cpu/cpu_internal.h"
#include "backend/ref/ref.h"
#include "graph/infer_util.h"

#include <float.h>
#include <math.h>
#include <string.h>

static bool f32_with_md(const sg_cpu_plan *p, int32_t v)
{
    int32_t t = cpu_value(p, v);
    return t >= 0 && p->tensors[t].dtype == SEGRT_DTYPE_FLOAT32 && p->tensors[t].has_md;
}

/* Unary elementwise operators run their reference kernel on the flat
 * buffer, whatever its layout (a layout without padding holds each element
 * once), split into chunks across threads. The reference kernels use libm,
 * so results, NaN and Inf included, are those of the spec's formulas; oneDNN's
 * eltwise approximations lose NaN (Exp(NaN) = inf, Clip(NaN) = min). */
typedef struct flat_params {
    int64_t elements;
} flat_params;

#define FLAT_CHUNK 65536

static sg_status flat_chunk(const cpu_step *s, sg_cpu_exec *e, int64_t from, int64_t to)
{
    sg_ref_kernel_fn fn = sg_ref_kernel(s->node->op);
    sg_tensor views[CPU_MAX_ARGS];
    const sg_tensor *in[CPU_MAX_ARGS];
    sg_tensor *out[1];
    int32_t n_in = s->n_args - 1;
    for (int32_t a = 0; a < s->n_args; a++) {
        if (s->args[a].tensor < 0) { /* an omitted optional operand */
            in[a] = NULL;
            continue;
        }
        const cpu_tensor *t = &e->plan->tensors[s->args[a].tensor];
        sg_tensor *v = &views[a];
        memset(v, 0, sizeof *v);
        v->dtype = t->dtype;
        if (a == 0 || a == s->n_args - 1) { /* the flat input and output */
            v->rank = 1;
            v->dims[0] = to - from;
            v->data = (char *)e->ptr[s->args[a].tensor] + from * (int64_t)segrt_dtype_size(t->dtype);
        } else { /* a constant operand (Clip's bounds) as it is */
            v->rank = t->rank;
            memcpy(v->dims, t->dims, sizeof v->dims);
            v->data = e->ptr[s->args[a].tensor];
        }
        if (a < n_in)
            in[a] = v;
    }
    out[0] = &views[s->n_args - 1];
    return fn(s->node, in, n_in, out, 1);
}

static sg_status flat_kernel(const cpu_step *s, sg_cpu_exec *e)
{
    const flat_params *fp = s->params;
    int64_t chunks = (fp->elements + FLAT_CHUNK - 1) / FLAT_CHUNK;
    int failed = 0;
#pragma omp parallel for schedule(static) if (chunks > 1) reduction(| : failed)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t from = c * FLAT_CHUNK, to = from + FLAT_CHUNK < fp->elements ? from + FLAT_CHUNK : fp->elements;
        failed |= flat_chunk(s, e, from, to) != SEGRT_OK;
    }
    /* A worker's message is in its own thread's buffer: redo the first
     * chunk here so that the caller's message says what went wrong. */
    if (failed)
        return flat_chunk(s, e, 0, fp->elements < FLAT_CHUNK ? fp->elements : FLAT_CHUNK);
    return SEGRT_OK;
}

static bool is_unary_elementwise(sg_op op)
{
    switch (op) {
    case SG_OP_ELU: case SG_OP_SELU: case SG_OP_SIGMOID: case SG_OP_HARD_SIGMOID: case SG_OP_HARD_SWISH:
    case SG_OP_TANH: case SG_OP_SOFTPLUS: case SG_OP_GELU: case SG_OP_ERF: case SG_OP_CLIP: case SG_OP_SQRT:
    case SG_OP_EXP: case SG_OP_LOG: case SG_OP_NEG: case SG_OP_ABS: case SG_OP_RECIPROCAL: case SG_OP_FLOOR:
    case SG_OP_CEIL: case SG_OP_SIN: case SG_OP_COS: case SG_OP_SIGN: case SG_OP_ROUND: case SG_OP_MISH:
    case SG_OP_SOFTSIGN:
        return true;
    default:
        return false;
    }
}

sg_status cpu_build_eltwise(sg_cpu_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    if (n->op == SG_OP_RELU || n->op == SG_OP_LEAKY_RELU)
        return cpu_build_prelu(p, i);
    if (!is_unary_elementwise(n->op) || n->outputs[0] < 0 || n->n_outputs != 1 || !f32_with_md(p, n->inputs[0]))
        return SEGRT_ERROR_UNSUPPORTED;
    int32_t x = cpu_value(p, n->inputs[0]);
    const dnnl_memory_desc_t x_md = p->tensors[x].md; /* new tensors may move the array */
    for (int32_t d = 0; d < x_md.ndims; d++)
        if (x_md.padded_dims[d] != x_md.dims[d])
            return SEGRT_ERROR_UNSUPPORTED; /* padding would be overwritten with f(0) */
    const sg_value *yv = &p->g->values[n->outputs[0]];
    if (yv->dtype != SEGRT_DTYPE_FLOAT32)
        return SEGRT_ERROR_UNSUPPORTED;
    int32_t args[CPU_MAX_ARGS];
    args[0] = x;
    for (int32_t k = 1; k < n->n_inputs; k++) {
        /* Other operands (Clip's bounds) must be constants or omitted. */
        if (n->inputs[k] >= 0 && !p->g->values[n->inputs[k]].data)
            return SEGRT_ERROR_UNSUPPORTED;
        args[k] = n->inputs[k] >= 0 ? cpu_value(p, n->inputs[k]) : -1;
    }
    flat_params *fp = sg_malloc(sizeof *fp);
    if (!fp)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    fp->elements = (int64_t)(dnnl_memory_desc_get_size(&x_md) / sizeof(float));
    cpu_step *st;
    SG_TRY(cpu_kernel_step(p, n, flat_kernel, fp, args, n->n_inputs, &x_md, n->outputs[0], &st));
    st->node = n;
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

/* MaxPool in plain, channel-blocked or channels-last layout. oneDNN's max
 * pooling skips NaN; ONNX's max takes it (NaN in a window gives NaN). */
typedef struct maxpool_params {
    cpu_channel_layout_t lx, ly;
    int64_t in[3], out[3], k[3], st[3], dl[3], pl[3]; /* spatial, padded to 3 with 1s */
} maxpool_params;

static sg_status maxpool_kernel(const cpu_step *s, sg_cpu_exec *e)
{
    const maxpool_params *mp = s->params;
    const float *x = e->ptr[s->args[0].tensor];
    float *y = e->ptr[s->args[1].tensor];
    const cpu_channel_layout_t *lx = &mp->lx, *ly = &mp->ly;
    int64_t B = lx->block, groups = lx->padded_c / B;
    int64_t s_out = mp->out[0] * mp->out[1] * mp->out[2];
    int64_t rows = lx->n * groups * s_out;
#pragma omp parallel for schedule(static) if (rows * B >= CPU_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t p = r % s_out, cb = (r / s_out) % groups, n = r / (s_out * groups);
        int64_t o2 = p % mp->out[2], o1 = (p / mp->out[2]) % mp->out[1], o0 = p / (mp->out[2] * mp->out[1]);
        const float *xs = x + n * lx->stride_n + cb * lx->stride_cb;
        float m[CPU_MAX_CHANNEL_GROUP];
        for (int64_t k = 0; k < B; k++)
            m[k] = -INFINITY;
        for (int64_t a = 0; a < mp->k[0]; a++) {
            int64_t i0 = o0 * mp->st[0] - mp->pl[0] + a * mp->dl[0];
            if (i0 < 0 || i0 >= mp->in[0])
                continue;
            for (int64_t b = 0; b < mp->k[1]; b++) {
                int64_t i1 = o1 * mp->st[1] - mp->pl[1] + b * mp->dl[1];
                if (i1 < 0 || i1 >= mp->in[1])
                    continue;
                for (int64_t c = 0; c < mp->k[2]; c++) {
                    int64_t i2 = o2 * mp->st[2] - mp->pl[2] + c * mp->dl[2];
                    if (i2 < 0 || i2 >= mp->in[2])
                        continue;
                    const float *v = xs + ((i0 * mp->in[1] + i1) * mp->in[2] + i2) * B;
                    for (int64_t k = 0; k < B; k++)
                        m[k] = (v[k] > m[k] || v[k] != v[k]) ? v[k] : m[k];
                }
            }
        }
        float *ys = y + n * ly->stride_n + cb * ly->stride_cb + p * B;
        for (int64_t k = 0; k < B; k++)
            ys[k] = cb * B + k < lx->c ? m[k] : 0.0f; /* layout padding stays zero */
    }
    return SEGRT_OK;
}

static sg_status build_maxpool(sg_cpu_plan *p, int32_t i, int32_t spatial, const dnnl_dims_t strides,
                               const dnnl_dims_t kernel, const dnnl_dims_t dil, const dnnl_dims_t pl)
{
    const sg_node *n = &p->g->nodes[i];
    int32_t x = cpu_value(p, n->inputs[0]);
    const dnnl_memory_desc_t x_md = p->tensors[x].md; /* new tensors may move the array */
    maxpool_params mp;
    memset(&mp, 0, sizeof mp);
    dnnl_format_tag_t tag = tag_of(&x_md);
    if (tag == dnnl_format_tag_undef || !cpu_channel_layout(&x_md, &mp.lx))
        return SEGRT_ERROR_UNSUPPORTED;
    const sg_value *yv = &p->g->values[n->outputs[0]];
    dnnl_dims_t ydims;
    for (int32_t d = 0; d < yv->shape.rank; d++)
        ydims[d] = yv->shape.d[d].size;
    dnnl_memory_desc_t y_md;
    if (dnnl_memory_desc_init_by_tag(&y_md, yv->shape.rank, ydims, dnnl_f32, tag) != dnnl_success ||
        !cpu_channel_layout(&y_md, &mp.ly) || mp.ly.block != mp.lx.block)
        return SEGRT_ERROR_UNSUPPORTED;
    for (int32_t d = 0; d < 3; d++) {
        mp.in[d] = mp.out[d] = mp.k[d] = mp.st[d] = mp.dl[d] = 1;
        mp.pl[d] = 0;
    }
    for (int32_t d = 0; d < spatial; d++) {
        int32_t at = 3 - spatial + d;
        mp.in[at] = x_md.dims[2 + d];
        mp.out[at] = ydims[2 + d];
        mp.k[at] = kernel[d];
        mp.st[at] = strides[d];
        mp.dl[at] = dil[d] + 1; /* oneDNN counts dilation from 0 */
        mp.pl[at] = pl[d];
    }
    maxpool_params *params = sg_malloc(sizeof *params);
    if (!params)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    *params = mp;
    return cpu_kernel_step(p, n, maxpool_kernel, params, &x, 1, &y_md, n->outputs[0], NULL);
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
        pl[d] = sg_conv_pad_begin(&a, d, total);
        pr[d] = total - pl[d];
        /* oneDNN wants the padding that yields exactly this output size.
         * Average pooling whose ceil mode adds padding beyond the model's
         * would count it differently, so that case stays on the reference. */
        int64_t model_end = a.auto_pad == SG_AUTO_PAD_NOTSET ? a.pads[spatial + d] : pr[d];
        if (pr[d] < 0 || (!is_max && pr[d] != model_end))
            return SEGRT_ERROR_UNSUPPORTED;
    }
    if (is_max)
        return build_maxpool(p, i, spatial, strides, kernel, dil, pl);
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
    cpu_arg args[1] = {{DNNL_ARG_SRC, x}};
    return cpu_primitive_step(p, n, pd, args, 1, DNNL_ARG_DST);
}

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
    cpu_arg args[CPU_MAX_ARGS];
    for (int32_t k = 0; k < n->n_inputs; k++)
        args[k] = (cpu_arg){DNNL_ARG_MULTIPLE_SRC + k, tensors[k]};
    return cpu_primitive_step(p, n, pd, args, n->n_inputs, DNNL_ARG_DST);
}

sg_status cpu_reference_step(sg_cpu_plan *p, const sg_node *n, cpu_kernel_fn kernel, void *params)
{
    sg_status s = n->n_inputs + n->n_outputs <= CPU_MAX_ARGS
                      ? SEGRT_OK
                      : sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "more than %d inputs and outputs", CPU_MAX_ARGS);
    int32_t args[CPU_MAX_ARGS];
    for (int32_t k = 0; s == SEGRT_OK && k < n->n_inputs; k++) {
        args[k] = -1;
        if (n->inputs[k] >= 0)
            s = cpu_value_plain(p, n->inputs[k], &args[k]);
    }
    if (s == SEGRT_OK)
        s = cpu_plain_outputs(p, n, args + n->n_inputs);
    cpu_step *st;
    if (s == SEGRT_OK)
        s = cpu_step_new(p, n->name, &st);
    if (s != SEGRT_OK) {
        free(params);
        return s;
    }
    st->kernel = kernel;
    st->params = params;
    st->node = n;
    st->fallback = true;
    st->n_outputs = n->n_outputs;
    st->n_args = n->n_inputs + n->n_outputs;
    for (int32_t k = 0; k < st->n_args; k++)
        st->args[k] = (cpu_arg){k, args[k]};
    return SEGRT_OK;
}

sg_status cpu_own_step(sg_cpu_plan *p, const sg_node *n, cpu_kernel_fn kernel, const void *params, size_t size)
{
    void *copy = sg_malloc(size);
    if (!copy)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    memcpy(copy, params, size);
    SG_TRY(cpu_reference_step(p, n, kernel, copy));
    p->steps[p->n_steps - 1].fallback = false; /* segrt's own kernel: profiles say "segrt" */
    return SEGRT_OK;
}

sg_status cpu_build_fallback(sg_cpu_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    if (!sg_ref_kernel(n->op))
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "the CPU backend has no kernel for this operator");
    return cpu_reference_step(p, n, cpu_fallback_kernel, NULL);
}
