/* ConvTranspose as one matrix product and a gather, in channels-last
 * layout. oneDNN 2.6's transposed convolutions are slow in 3D (about
 * 1 GFLOP/s for the spleen UNet's up-sampling layers); this form runs at
 * sgemm speed:
 *
 *   cols[s][k*K + o] = sum_c x[s][c] * w[c][o][k]         (dnnl_sgemm)
 *   y[p][o] = bias[o] + sum over the (k, s) that reach output p of cols[s][k*K + o]
 *
 * The gather visits each output once, so threads never write the same
 * element. A LeakyReLU/ReLU or PReLU that follows is applied on the way out. */
#include "backend/cpu/cpu_internal.h"
#include "graph/infer_util.h"

#include <string.h>

/* Output channels accumulated on the stack per output position. */
#define DECONV_MAX_OC 1024

typedef enum deconv_act { DECONV_NONE, DECONV_LEAKY, DECONV_PRELU } deconv_act;

typedef struct deconv_params {
    int32_t sd; /* spatial dims, 1 to 3 */
    int64_t n, ic, oc;
    int64_t in[3], out[3], k[3], stride[3], dil[3], pad[3];
    int64_t s_in, s_out, kvol;
    const float *wt;    /* [ic][kvol * oc]: the weights regrouped at build */
    const float *bias;  /* [oc] or NULL */
    deconv_act act;
    float slope;        /* LeakyReLU, or a single PReLU slope */
    bool relu;          /* ReLU: x < 0 ? 0 : x, so -inf gives 0 (not -inf * 0) */
    const float *slopes; /* per-channel PReLU, or NULL */
} deconv_params;

static sg_status deconv_kernel(const cpu_step *s, sg_cpu_exec *e)
{
    const deconv_params *dp = s->params;
    const float *x = e->ptr[s->args[0].tensor];
    float *y = e->ptr[s->args[1].tensor];
    float *cols = e->kscratch;
    int64_t ncols = dp->kvol * dp->oc;
    /* Unused spatial dims act as size 1. */
    int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, st[3] = {1, 1, 1}, dl[3] = {1, 1, 1},
            pd[3] = {0, 0, 0};
    for (int32_t d = 0; d < dp->sd; d++) {
        int32_t at = 3 - dp->sd + d;
        in[at] = dp->in[d];
        out[at] = dp->out[d];
        k[at] = dp->k[d];
        st[at] = dp->stride[d];
        dl[at] = dp->dil[d];
        pd[at] = dp->pad[d];
    }
    for (int64_t n = 0; n < dp->n; n++) {
        /* One sample at a time keeps the scratch to s_in x kvol x oc. */
        dnnl_status_t ds = dnnl_sgemm('N', 'N', dp->s_in, ncols, dp->ic, 1.0f, x + n * dp->s_in * dp->ic, dp->ic,
                                      dp->wt, ncols, 0.0f, cols, ncols);
        if (ds != dnnl_success)
            return sg_error(SEGRT_ERROR_INTERNAL, "step `%s`: dnnl_sgemm failed: %s", s->name, cpu_dnnl_status(ds));
        float *yn = y + n * dp->s_out * dp->oc;
#pragma omp parallel for schedule(static) if (dp->s_out * dp->oc >= CPU_PARALLEL_MIN)
        for (int64_t p = 0; p < dp->s_out; p++) {
            int64_t o2 = p % out[2], o1 = (p / out[2]) % out[1], o0 = p / (out[2] * out[1]);
            float acc[DECONV_MAX_OC];
            for (int64_t c = 0; c < dp->oc; c++)
                acc[c] = dp->bias ? dp->bias[c] : 0.0f;
            for (int64_t k0 = 0; k0 < k[0]; k0++) {
                int64_t t0 = o0 + pd[0] - k0 * dl[0];
                if (t0 < 0 || t0 % st[0] || t0 / st[0] >= in[0])
                    continue;
                for (int64_t k1 = 0; k1 < k[1]; k1++) {
                    int64_t t1 = o1 + pd[1] - k1 * dl[1];
                    if (t1 < 0 || t1 % st[1] || t1 / st[1] >= in[1])
                        continue;
                    for (int64_t k2 = 0; k2 < k[2]; k2++) {
                        int64_t t2 = o2 + pd[2] - k2 * dl[2];
                        if (t2 < 0 || t2 % st[2] || t2 / st[2] >= in[2])
                            continue;
                        int64_t si = ((t0 / st[0]) * in[1] + t1 / st[1]) * in[2] + t2 / st[2];
                        int64_t kf = (k0 * k[1] + k1) * k[2] + k2;
                        const float *src = cols + si * ncols + kf * dp->oc;
                        for (int64_t c = 0; c < dp->oc; c++)
                            acc[c] += src[c];
                    }
                }
            }
            float *dst = yn + p * dp->oc;
            if (dp->act == DECONV_NONE)
                for (int64_t c = 0; c < dp->oc; c++)
                    dst[c] = acc[c];
            else if (dp->slopes)
                for (int64_t c = 0; c < dp->oc; c++)
                    dst[c] = acc[c] < 0 ? acc[c] * dp->slopes[c] : acc[c];
            else if (dp->relu)
                for (int64_t c = 0; c < dp->oc; c++)
                    dst[c] = acc[c] < 0 ? 0.0f : acc[c];
            else
                for (int64_t c = 0; c < dp->oc; c++)
                    dst[c] = acc[c] < 0 ? acc[c] * dp->slope : acc[c];
        }
    }
    return SEGRT_OK;
}

static dnnl_format_tag_t channels_last_tag(int32_t rank)
{
    return rank == 3 ? dnnl_acb : rank == 4 ? dnnl_acdb : dnnl_acdeb;
}

/* A fused activation after the transposed convolution, if its only reader
 * is one. Sets dp and returns the graph value the step then produces. */
static int32_t fuse_activation(sg_cpu_plan *p, int32_t y, deconv_params *dp)
{
    int32_t r = cpu_single_reader(p, y);
    if (r < 0)
        return y;
    const sg_node *n = &p->g->nodes[r];
    if (n->outputs[0] < 0 || n->inputs[0] != y)
        return y;
    if (n->op == SG_OP_RELU || n->op == SG_OP_LEAKY_RELU) {
        dp->act = DECONV_LEAKY;
        dp->relu = n->op == SG_OP_RELU;
        dp->slope = dp->relu ? 0.0f : sg_attr_float(n, "alpha", 0.01f);
    } else if (n->op == SG_OP_PRELU) {
        const sg_value *sv = &p->g->values[n->inputs[1]];
        int64_t numel;
        if (!sv->data || sv->dtype != SEGRT_DTYPE_FLOAT32 || !sg_shape_numel(&sv->shape, &numel))
            return y;
        /* One slope, or one per channel broadcast along axis 1. */
        int32_t rank = p->g->values[y].shape.rank;
        bool per_channel = numel == dp->oc && dp->oc > 1 && sv->shape.rank <= rank;
        for (int32_t d = 0; per_channel && d < sv->shape.rank; d++)
            per_channel = sv->shape.d[d].size == (rank - sv->shape.rank + d == 1 ? dp->oc : 1);
        if (numel != 1 && !per_channel)
            return y;
        dp->act = DECONV_PRELU;
        if (numel == 1)
            dp->slope = *(const float *)sg_blob_data(sv->data);
        else
            dp->slopes = sg_blob_data(sv->data);
    } else {
        return y;
    }
    p->fused[r] = 1;
    return n->outputs[0];
}

sg_status cpu_build_deconv_gemm(sg_cpu_plan *p, int32_t i)
{
    const sg_node *n = &p->g->nodes[i];
    if (n->n_inputs < 2 || n->outputs[0] < 0 || sg_attr_int(n, "group", 1) != 1)
        return SEGRT_ERROR_UNSUPPORTED;
    const sg_value *xv = &p->g->values[n->inputs[0]], *wv = &p->g->values[n->inputs[1]];
    const sg_value *bv = n->n_inputs > 2 && n->inputs[2] >= 0 ? &p->g->values[n->inputs[2]] : NULL;
    const sg_value *yv = &p->g->values[n->outputs[0]];
    int32_t rank = xv->shape.rank, sd = rank - 2;
    int32_t xt = cpu_value(p, n->inputs[0]);
    if (sd < 1 || sd > 3 || xv->dtype != SEGRT_DTYPE_FLOAT32 || xt < 0 || !p->tensors[xt].has_md || !wv->data ||
        wv->dtype != SEGRT_DTYPE_FLOAT32 || (bv && (!bv->data || bv->dtype != SEGRT_DTYPE_FLOAT32)))
        return SEGRT_ERROR_UNSUPPORTED;
    sg_conv_attrs a;
    if (sg_conv_attrs_read(p->g, n, sd, &wv->shape, wv->name, &a) != SEGRT_OK)
        return SEGRT_ERROR_UNSUPPORTED;
    /* auto_pad and output_shape set the begin padding by ConvTranspose's own
     * rules; the reference implements them. */
    if (sg_attr_find(n, "output_shape") || a.auto_pad != SG_AUTO_PAD_NOTSET)
        return SEGRT_ERROR_UNSUPPORTED;
    deconv_params dp;
    memset(&dp, 0, sizeof dp);
    dp.sd = sd;
    dp.n = xv->shape.d[0].size;
    dp.ic = xv->shape.d[1].size;
    dp.oc = yv->shape.d[1].size;
    dp.s_in = dp.s_out = dp.kvol = 1;
    for (int32_t d = 0; d < sd; d++) {
        dp.in[d] = xv->shape.d[2 + d].size;
        dp.out[d] = yv->shape.d[2 + d].size;
        dp.k[d] = a.kernel[d];
        dp.stride[d] = a.strides[d];
        dp.dil[d] = a.dilations[d];
        dp.pad[d] = a.pads[d];
        dp.s_in *= dp.in[d];
        dp.s_out *= dp.out[d];
        dp.kvol *= dp.k[d];
    }
    if (dp.oc > DECONV_MAX_OC || dp.oc < 1 || dp.ic < 1 || dp.s_in < 1)
        return SEGRT_ERROR_UNSUPPORTED;
    /* Regroup weights [ic][oc][k] as [ic][k][oc]: each row of the product is
     * then every kernel tap's contribution of one input position. */
    float *wt = cpu_plan_alloc(p, (size_t)(dp.ic * dp.kvol * dp.oc) * sizeof(float));
    if (!wt)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    const float *w = sg_blob_data(wv->data);
    for (int64_t c = 0; c < dp.ic; c++)
        for (int64_t o = 0; o < dp.oc; o++)
            for (int64_t kk = 0; kk < dp.kvol; kk++)
                wt[(c * dp.kvol + kk) * dp.oc + o] = w[(c * dp.oc + o) * dp.kvol + kk];
    dp.wt = wt;
    dp.bias = bv ? sg_blob_data(bv->data) : NULL;
    int32_t out_value = fuse_activation(p, n->outputs[0], &dp);

    dnnl_memory_desc_t x_md, y_md;
    dnnl_dims_t xdims, ydims;
    for (int32_t d = 0; d < rank; d++) {
        xdims[d] = xv->shape.d[d].size;
        ydims[d] = yv->shape.d[d].size;
    }
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&x_md, rank, xdims, dnnl_f32, channels_last_tag(rank)));
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&y_md, rank, ydims, dnnl_f32, channels_last_tag(rank)));
    int32_t x, y;
    SG_TRY(cpu_value_as(p, n->inputs[0], &x_md, &x));
    SG_TRY(cpu_tensor_new_md(p, SEGRT_DTYPE_FLOAT32, &y_md, &y));
    deconv_params *params = sg_malloc(sizeof *params);
    if (!params)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    *params = dp;
    cpu_step *st;
    sg_status s = cpu_step_new(p, n->name, &st);
    if (s != SEGRT_OK) {
        free(params);
        return s;
    }
    st->kernel = deconv_kernel;
    st->params = params;
    st->n_outputs = 1;
    st->args[0] = (cpu_arg){0, x};
    st->args[1] = (cpu_arg){1, y};
    st->n_args = 2;
    p->value_tensor[out_value] = y;
    size_t scratch = (size_t)(dp.s_in * dp.kvol * dp.oc) * sizeof(float);
    if (scratch > p->kscratch_bytes)
        p->kscratch_bytes = scratch;
    return SEGRT_OK;
}
