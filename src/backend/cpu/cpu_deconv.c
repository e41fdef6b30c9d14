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
    int64_t batch;      /* samples per matrix product */
    /* Per spatial dim (padded to 3) and output coordinate o: the taps k
     * that reach o and the input index each reads, from tap_first[o] for
     * tap_count[o] entries. Built once, so runs do no integer division. */
    int32_t *tap_first[3], *tap_count[3], *tap_k[3], *tap_i[3];
    int64_t dims3_in[3], dims3_out[3], k3[3];
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
    const int64_t *in = dp->dims3_in, *out = dp->dims3_out, *k = dp->k3;
    /* As many samples per product as the scratch holds (sized at build):
     * small layers at large batch otherwise pay per-sample call costs. */
    for (int64_t n0 = 0; n0 < dp->n; n0 += dp->batch) {
        int64_t nb = n0 + dp->batch <= dp->n ? dp->batch : dp->n - n0;
        dnnl_status_t ds = dnnl_sgemm('N', 'N', nb * dp->s_in, ncols, dp->ic, 1.0f, x + n0 * dp->s_in * dp->ic,
                                      dp->ic, dp->wt, ncols, 0.0f, cols, ncols);
        if (ds != dnnl_success)
            return sg_error(SEGRT_ERROR_INTERNAL, "step `%s`: dnnl_sgemm failed: %s", s->name, cpu_dnnl_status(ds));
        int64_t rows = nb * out[0] * out[1];
#pragma omp parallel for schedule(static) if (rows * out[2] * dp->oc >= CPU_PARALLEL_MIN)
        for (int64_t r = 0; r < rows; r++) {
            int64_t o1 = r % out[1], o0 = (r / out[1]) % out[0], nl = r / (out[0] * out[1]);
            const float *cn = cols + nl * dp->s_in * ncols;
            float *yrow = y + (((n0 + nl) * out[0] + o0) * out[1] + o1) * out[2] * dp->oc;
            for (int64_t o2 = 0; o2 < out[2]; o2++) {
                float acc[DECONV_MAX_OC];
                for (int64_t c = 0; c < dp->oc; c++)
                    acc[c] = dp->bias ? dp->bias[c] : 0.0f;
                for (int32_t a0 = 0; a0 < dp->tap_count[0][o0]; a0++) {
                    int32_t t0 = dp->tap_first[0][o0] + a0;
                    for (int32_t a1 = 0; a1 < dp->tap_count[1][o1]; a1++) {
                        int32_t t1 = dp->tap_first[1][o1] + a1;
                        for (int32_t a2 = 0; a2 < dp->tap_count[2][o2]; a2++) {
                            int32_t t2 = dp->tap_first[2][o2] + a2;
                            int64_t si = ((int64_t)dp->tap_i[0][t0] * in[1] + dp->tap_i[1][t1]) * in[2] +
                                         dp->tap_i[2][t2];
                            int64_t kf = ((int64_t)dp->tap_k[0][t0] * k[1] + dp->tap_k[1][t1]) * k[2] +
                                         dp->tap_k[2][t2];
                            const float *src = cn + si * ncols + kf * dp->oc;
                            for (int64_t c = 0; c < dp->oc; c++)
                                acc[c] += src[c];
                        }
                    }
                }
                float *dst = yrow + o2 * dp->oc;
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
    }
    return SEGRT_OK;
}

/* Builds the tap tables of one (padded) dim: for each output coordinate o,
 * the taps k with (o + pad - k * dil) a multiple of stride landing inside
 * the input. */
static sg_status build_taps(sg_cpu_plan *p, deconv_params *dp, int32_t d, int64_t in, int64_t out, int64_t k,
                            int64_t st, int64_t dl, int64_t pad)
{
    int32_t *first = cpu_plan_alloc(p, (size_t)out * sizeof(int32_t));
    int32_t *count = cpu_plan_alloc(p, (size_t)out * sizeof(int32_t));
    int32_t *tk = cpu_plan_alloc(p, (size_t)(out * k) * sizeof(int32_t));
    int32_t *ti = cpu_plan_alloc(p, (size_t)(out * k) * sizeof(int32_t));
    if (!first || !count || !tk || !ti)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    int32_t n = 0;
    for (int64_t o = 0; o < out; o++) {
        first[o] = n;
        for (int64_t kk = 0; kk < k; kk++) {
            int64_t t = o + pad - kk * dl;
            if (t < 0 || t % st || t / st >= in)
                continue;
            tk[n] = (int32_t)kk;
            ti[n] = (int32_t)(t / st);
            n++;
        }
        count[o] = n - first[o];
    }
    dp->tap_first[d] = first;
    dp->tap_count[d] = count;
    dp->tap_k[d] = tk;
    dp->tap_i[d] = ti;
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
    /* The tap tables are int32 and hold out * k entries per dim; decline
     * before adding anything to the plan (build_node's rule). */
    for (int32_t d = 0; d < 3; d++) {
        int32_t src = d - (3 - sd); /* unused leading dims act as size 1 */
        dp.dims3_in[d] = src >= 0 ? dp.in[src] : 1;
        dp.dims3_out[d] = src >= 0 ? dp.out[src] : 1;
        dp.k3[d] = src >= 0 ? dp.k[src] : 1;
        if (dp.dims3_in[d] > INT32_MAX || dp.k3[d] > INT32_MAX || dp.dims3_out[d] > INT32_MAX / dp.k3[d])
            return SEGRT_ERROR_UNSUPPORTED;
    }
    /* One sample's product (the scratch) is a tensor like any other. */
    int64_t per_sample;
    if (!sg_mul_i64(dp.s_in, dp.kvol, &per_sample) || !sg_mul_i64(per_sample, dp.oc * (int64_t)sizeof(float), &per_sample) ||
        per_sample > CPU_MAX_TENSOR_BYTES)
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
    int32_t x;
    SG_TRY(cpu_value_as(p, n->inputs[0], &x_md, &x));
    for (int32_t d = 0; d < 3; d++) {
        int32_t src = d - (3 - sd);
        SG_TRY(build_taps(p, &dp, d, dp.dims3_in[d], dp.dims3_out[d], dp.k3[d], src >= 0 ? dp.stride[src] : 1,
                          src >= 0 ? dp.dil[src] : 1, src >= 0 ? dp.pad[src] : 0));
    }
    /* Samples per product: up to 16 MiB of scratch, at least one. */
    dp.batch = per_sample > 0 ? ((int64_t)16 << 20) / per_sample : 1;
    dp.batch = dp.batch < 1 ? 1 : dp.batch > dp.n ? dp.n : dp.batch;
    deconv_params *params = sg_malloc(sizeof *params);
    if (!params)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    *params = dp;
    SG_TRY(cpu_kernel_step(p, n, deconv_kernel, params, &x, 1, &y_md, out_value, NULL));
    size_t scratch = (size_t)(dp.batch * dp.s_in * dp.kvol * dp.oc) * sizeof(float);
    if (scratch > p->kscratch_bytes)
        p->kscratch_bytes = scratch;
    return SEGRT_OK;
}
