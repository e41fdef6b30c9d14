/* BatchNormalization (inference), InstanceNormalization,
 * GroupNormalization and LayerNormalization.
 *
 * Statistics are computed in double with two passes (mean, then the mean
 * of squared deviations), so large spatial extents and large offsets do
 * not lose precision; the output is rounded once on the store. */
#include "backend/ref/ref_internal.h"

#include <math.h>
#include <string.h>

/* A per-channel parameter: exactly count values of a float dtype. */
static sg_status check_param(const sg_node *n, const sg_tensor *t, int64_t count, const char *what)
{
    if (!sg_dtype_is_float(t->dtype))
        return sg_ref_unsupported_dtype(n, t->dtype);
    if (sg_ref_numel(t) != count)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "%s has %lld values; expected %lld", what,
                             (long long)sg_ref_numel(t), (long long)count);
    return SEGRT_OK;
}

/* Checks X (rank >= 2, float) and Y (same dims and dtype). */
static sg_status check_xy(const sg_node *n, const sg_tensor *x, const sg_tensor *y)
{
    if (!sg_dtype_is_float(x->dtype))
        return sg_ref_unsupported_dtype(n, x->dtype);
    if (x->rank < 2)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input must have rank >= 2");
    SG_TRY(sg_ref_check_out_dims(n, y, x->dims, x->rank));
    return sg_ref_check_dtype(n, y, x->dtype, "output");
}

static double ld(const sg_tensor *t, int64_t i) { return sg_dtype_load_f64(t->dtype, t->data, i); }

/* Mean and population variance of count values at x[off + i]. float32
 * reads its buffer directly: these loops run over whole feature maps. */
static void moments(const sg_tensor *x, int64_t off, int64_t count, double *mean, double *var)
{
    const float *xf = x->dtype == SEGRT_DTYPE_FLOAT32 ? (const float *)x->data + off : NULL;
    double s = 0;
    if (xf)
        for (int64_t i = 0; i < count; i++)
            s += xf[i];
    else
        for (int64_t i = 0; i < count; i++)
            s += ld(x, off + i);
    double m = count ? s / (double)count : NAN;
    double q = 0;
    if (xf)
        for (int64_t i = 0; i < count; i++) {
            double d = xf[i] - m;
            q += d * d;
        }
    else
        for (int64_t i = 0; i < count; i++) {
            double d = ld(x, off + i) - m;
            q += d * d;
        }
    *mean = m;
    *var = count ? q / (double)count : NAN;
}

/* y[off + i] = x[off + i] * a + b for count elements. */
static void affine(const sg_tensor *x, sg_tensor *y, int64_t off, int64_t count, double a, double b)
{
    if (x->dtype == SEGRT_DTYPE_FLOAT32 && y->dtype == SEGRT_DTYPE_FLOAT32) {
        const float *xf = (const float *)x->data + off;
        float *yf = (float *)y->data + off;
        for (int64_t i = 0; i < count; i++)
            yf[i] = (float)(xf[i] * a + b);
        return;
    }
    for (int64_t i = 0; i < count; i++)
        sg_dtype_store_f64(y->dtype, y->data, off + i, ld(x, off + i) * a + b);
}

REF_KERNEL(sg_ref_batch_normalization)
{
    const sg_tensor *x, *p[4];
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    for (int32_t i = 0; i < 4; i++)
        SG_TRY(sg_ref_need_in(n, in, n_in, i + 1, &p[i]));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    if (sg_attr_int(n, "training_mode", 0) != 0)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "training_mode=1 is not supported");
    SG_TRY(check_xy(n, x, y));
    int64_t c = x->dims[1];
    static const char *const names[4] = {"scale", "B", "mean", "var"};
    for (int32_t i = 0; i < 4; i++)
        SG_TRY(check_param(n, p[i], c, names[i]));
    double eps = sg_attr_float(n, "epsilon", 1e-5f);
    int64_t batch = x->dims[0], plane = 1;
    for (int32_t i = 2; i < x->rank; i++)
        plane *= x->dims[i];
    for (int64_t ch = 0; ch < c; ch++) {
        double a = ld(p[0], ch) / sqrt(ld(p[3], ch) + eps);
        double b = ld(p[1], ch) - ld(p[2], ch) * a;
        for (int64_t b0 = 0; b0 < batch; b0++) {
            affine(x, y, (b0 * c + ch) * plane, plane, a, b);
        }
    }
    /* Running statistics only exist in training mode; where an exporter
     * still lists them, pass the inputs through. */
    for (int32_t j = 1; j < 3; j++) {
        sg_tensor *o;
        SG_TRY(sg_ref_opt_out(n, out, n_out, j, &o));
        if (!o)
            continue;
        SG_TRY(check_param(n, o, c, j == 1 ? "running_mean" : "running_var"));
        for (int64_t ch = 0; ch < c; ch++)
            sg_dtype_store_f64(o->dtype, o->data, ch, ld(p[j + 1], ch));
    }
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_instance_normalization)
{
    const sg_tensor *x, *scale, *bias;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &scale));
    SG_TRY(sg_ref_need_in(n, in, n_in, 2, &bias));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(check_xy(n, x, y));
    int64_t c = x->dims[1];
    SG_TRY(check_param(n, scale, c, "scale"));
    SG_TRY(check_param(n, bias, c, "B"));
    double eps = sg_attr_float(n, "epsilon", 1e-5f);
    int64_t batch = x->dims[0], plane = 1;
    for (int32_t i = 2; i < x->rank; i++)
        plane *= x->dims[i];
    for (int64_t b0 = 0; b0 < batch; b0++)
        for (int64_t ch = 0; ch < c; ch++) {
            int64_t off = (b0 * c + ch) * plane;
            double mean, var;
            moments(x, off, plane, &mean, &var);
            double a = ld(scale, ch) / sqrt(var + eps);
            double b = ld(bias, ch) - mean * a;
            affine(x, y, off, plane, a, b);
        }
    return SEGRT_OK;
}

/* Scale and bias are per group in opset 18 and per channel in opset 21;
 * their size tells which (they agree when num_groups == C). */
REF_KERNEL(sg_ref_group_normalization)
{
    const sg_tensor *x, *scale, *bias;
    sg_tensor *y;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &scale));
    SG_TRY(sg_ref_need_in(n, in, n_in, 2, &bias));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(check_xy(n, x, y));
    int64_t c = x->dims[1];
    int64_t groups = sg_attr_int(n, "num_groups", 0);
    if (!sg_attr_find(n, "num_groups") || groups < 1 || c % groups != 0)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                             "num_groups (%lld) must be >= 1 and divide the %lld channels",
                             (long long)groups, (long long)c);
    bool per_channel = sg_ref_numel(scale) == c;
    int64_t nparam = per_channel ? c : groups;
    SG_TRY(check_param(n, scale, nparam, "scale"));
    SG_TRY(check_param(n, bias, nparam, "bias"));
    double eps = sg_attr_float(n, "epsilon", 1e-5f);
    int64_t batch = x->dims[0], plane = 1, cg = c / groups;
    for (int32_t i = 2; i < x->rank; i++)
        plane *= x->dims[i];
    for (int64_t b0 = 0; b0 < batch; b0++)
        for (int64_t gi = 0; gi < groups; gi++) {
            int64_t off = (b0 * c + gi * cg) * plane;
            double mean, var;
            moments(x, off, cg * plane, &mean, &var);
            double inv = 1.0 / sqrt(var + eps);
            for (int64_t k = 0; k < cg; k++) {
                int64_t pi = per_channel ? gi * cg + k : gi;
                double a = ld(scale, pi) * inv;
                double b = ld(bias, pi) - mean * a;
                affine(x, y, off + k * plane, plane, a, b);
            }
        }
    return SEGRT_OK;
}

/* Offsets into t for each element of the normalized block (dims), with t
 * broadcast to it; NULL with an error recorded on failure. */
static sg_status broadcast_map(const sg_node *n, const int64_t *dims, int32_t rank,
                               const sg_tensor *t, int64_t count, int64_t **map)
{
    ref_bcast bc;
    *map = NULL;
    SG_TRY(sg_ref_bcast_init(n, &bc, dims, rank, &t, 1));
    int64_t *m = sg_malloc(sizeof(int64_t) * (size_t)(count ? count : 1));
    if (!m)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    int64_t idx[SEGRT_MAX_RANK] = {0}, off[REF_BCAST_MAX] = {0};
    int64_t st = bc.strides[0][bc.rank - 1];
    for (int64_t r = 0; r < bc.rows; r++) {
        for (int64_t j = 0; j < bc.inner; j++)
            m[r * bc.inner + j] = off[0] + j * st;
        sg_ref_bcast_next(&bc, idx, off);
    }
    *map = m;
    return SEGRT_OK;
}

/* LayerNormalization, and RMSNormalization (opset 23) as its form without
 * the mean, the bias and the statistics outputs: x / sqrt(mean(x^2) +
 * epsilon) * scale over the axes from `axis` on. */
REF_KERNEL(sg_ref_layer_normalization)
{
    const sg_tensor *x, *scale, *bias;
    sg_tensor *y, *mean_out, *inv_out;
    SG_TRY(sg_ref_need_in(n, in, n_in, 0, &x));
    SG_TRY(sg_ref_need_in(n, in, n_in, 1, &scale));
    SG_TRY(sg_ref_opt_in(n, in, n_in, 2, &bias));
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    SG_TRY(sg_ref_opt_out(n, out, n_out, 1, &mean_out));
    SG_TRY(sg_ref_opt_out(n, out, n_out, 2, &inv_out));
    bool rms = n->op == SG_OP_RMS_NORMALIZATION;
    if (rms && (bias || mean_out || inv_out))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "RMSNormalization has two inputs and one output");
    if (!sg_dtype_is_float(x->dtype))
        return sg_ref_unsupported_dtype(n, x->dtype);
    SG_TRY(sg_ref_check_out_dims(n, y, x->dims, x->rank));
    SG_TRY(sg_ref_check_dtype(n, y, x->dtype, "output"));
    if (x->rank < 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input must have rank >= 1");
    int32_t axis = 0;
    SG_TRY(sg_ref_axis(n, sg_attr_int(n, "axis", -1), x->rank, &axis));
    double eps = sg_attr_float(n, "epsilon", 1e-5f);
    int64_t outer = 1, inner = 1;
    for (int32_t i = 0; i < axis; i++)
        outer *= x->dims[i];
    for (int32_t i = axis; i < x->rank; i++)
        inner *= x->dims[i];
    sg_tensor *stats[2] = {mean_out, inv_out};
    for (int32_t k = 0; k < 2; k++)
        if (stats[k] && (sg_ref_numel(stats[k]) != outer || !sg_dtype_is_float(stats[k]->dtype)))
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "%s output must hold %lld float values",
                                 k ? "InvStdDev" : "Mean", (long long)outer);
    const sg_tensor *params[2] = {scale, bias};
    int64_t *maps[2] = {NULL, NULL};
    sg_status s = SEGRT_OK;
    for (int32_t k = 0; k < 2 && s == SEGRT_OK; k++) {
        if (!params[k])
            continue;
        if (!sg_dtype_is_float(params[k]->dtype))
            s = sg_ref_unsupported_dtype(n, params[k]->dtype);
        else
            s = broadcast_map(n, x->dims + axis, x->rank - axis, params[k], inner, &maps[k]);
    }
    for (int64_t o = 0; o < outer && s == SEGRT_OK; o++) {
        double mean = 0, var = 0;
        if (rms) {
            for (int64_t i = 0; i < inner; i++)
                var += ld(x, o * inner + i) * ld(x, o * inner + i);
            var = inner ? var / (double)inner : NAN;
        } else {
            moments(x, o * inner, inner, &mean, &var);
        }
        double inv = 1.0 / sqrt(var + eps);
        for (int64_t i = 0; i < inner; i++) {
            double v = (ld(x, o * inner + i) - mean) * inv * ld(scale, maps[0][i]);
            if (bias)
                v += ld(bias, maps[1][i]);
            sg_dtype_store_f64(y->dtype, y->data, o * inner + i, v);
        }
        if (mean_out)
            sg_dtype_store_f64(mean_out->dtype, mean_out->data, o, mean);
        if (inv_out)
            sg_dtype_store_f64(inv_out->dtype, inv_out->data, o, inv);
    }
    free(maps[0]);
    free(maps[1]);
    return s;
}
