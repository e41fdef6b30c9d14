/* Sliding-window inference on host memory (sliding_window.h): MONAI's
 * algorithm step by step. Windows are taken in MONAI's order (each
 * image's windows in turn, the last axis fastest) and a batch may span
 * two images, so every voxel's float32 sums add the same terms in the
 * same order as MONAI's. */
#include "pipeline/sliding_window.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

void sg_sw_options_default(sg_sw_options *o, int32_t n_dims)
{
    memset(o, 0, sizeof *o);
    o->n_dims = n_dims;
    for (int32_t d = 0; d < SG_SW_MAX_DIMS; d++)
        o->overlap[d] = 0.25;
    o->sw_batch = 1;
    o->grid = SG_SW_GRID_MONAI;
    o->blend = SG_SW_BLEND_CONSTANT;
    o->sigma_scale = 0.125;
    o->pad = SG_SW_PAD_CONSTANT;
    o->output = SG_SW_OUTPUT_LOGITS;
    o->activation = SG_SW_ACTIVATION_DEFAULT;
    o->threshold = 0.5f;
}

static sg_status check_image(const sg_sw_options *o, const sg_tensor *image)
{
    if (o->n_dims < 1 || o->n_dims > SG_SW_MAX_DIMS)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "a window of %d dims; 1 to %d are supported", o->n_dims,
                        SG_SW_MAX_DIMS);
    if (image->rank != o->n_dims + 2)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "the image has %d dims; a %d-D window needs N x C x %d spatial dims", image->rank,
                        o->n_dims, o->n_dims);
    if (image->dtype != SEGRT_DTYPE_FLOAT32)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "the image is %s; sliding windows read float32",
                        segrt_dtype_name(image->dtype));
    if (o->sw_batch < 1)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "a window batch of %d", o->sw_batch);
    for (int32_t d = 0; d < image->rank; d++)
        if (image->dims[d] < 1)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "image dim %d is %lld", d, (long long)image->dims[d]);
    return SEGRT_OK;
}

sg_status sg_sw_input_dims(const sg_sw_options *o, const sg_tensor *image, int64_t *dims)
{
    SG_TRY(check_image(o, image));
    dims[0] = o->sw_batch;
    dims[1] = image->dims[1];
    for (int32_t d = 0; d < o->n_dims; d++)
        dims[2 + d] = o->roi[d] > 0 ? o->roi[d] : image->dims[2 + d];
    return SEGRT_OK;
}

/* Position p of the padded axis in an axis of n voxels padded by `begin`
 * in front: the source index, or -1 for the constant. */
static int64_t pad_source(int64_t p, int64_t begin, int64_t n, sg_sw_pad mode)
{
    int64_t i = p - begin;
    if (i >= 0 && i < n)
        return i;
    if (mode == SG_SW_PAD_CONSTANT)
        return -1;
    if (mode == SG_SW_PAD_REPLICATE || n == 1)
        return i < 0 ? 0 : n - 1;
    int64_t period = 2 * (n - 1); /* reflect: ... 2 1 [0 1 2 ... n-1] n-2 ... */
    int64_t m = ((i % period) + period) % period;
    return m < n ? m : period - m;
}

/* Everything a run holds. */
typedef struct sw_run {
    const sg_sw_options *o;
    sg_sw_grid g;
    int64_t roi_numel, padded_numel, image_numel;
    int64_t channels, classes;
    float *weight;   /* importance map over the window */
    float *count;    /* summed weights over the padded image */
    float *acc;      /* N x K x padded image */
    float *win_in;   /* sw_batch x C x window */
    float *win_out;  /* sw_batch x K x window */
    int64_t *idx[SG_SW_MAX_DIMS]; /* per window axis: source index of each position (-1: constant) */
} sw_run;

static void sw_run_free(sw_run *r)
{
    sg_sw_grid_free(&r->g);
    free(r->weight);
    free(r->count);
    free(r->acc);
    free(r->win_in);
    free(r->win_out);
    for (int32_t d = 0; d < SG_SW_MAX_DIMS; d++)
        free(r->idx[d]);
}

/* Window w of the padded image n into slot b of the input batch. The
 * padded image is never made: each axis maps window positions to source
 * indices first, then the copy walks them. */
static void gather(sw_run *r, const sg_tensor *image, int64_t n, int64_t w, int64_t b)
{
    const sg_sw_options *o = r->o;
    int32_t nd = o->n_dims;
    int64_t start[SG_SW_MAX_DIMS];
    sg_sw_window_start(&r->g, w, start);
    for (int32_t d = 0; d < nd; d++)
        for (int64_t j = 0; j < r->g.roi[d]; j++)
            r->idx[d][j] = pad_source(start[d] + j, r->g.pad_begin[d], r->g.size[d], o->pad);
    const float *src = (const float *)image->data + n * r->channels * r->image_numel;
    float *dst = r->win_in + b * r->channels * r->roi_numel;
    int64_t rs[SG_SW_MAX_DIMS], ss[SG_SW_MAX_DIMS]; /* window and image strides */
    rs[nd - 1] = ss[nd - 1] = 1;
    for (int32_t d = nd - 2; d >= 0; d--) {
        rs[d] = rs[d + 1] * r->g.roi[d + 1];
        ss[d] = ss[d + 1] * r->g.size[d + 1];
    }
    for (int64_t c = 0; c < r->channels; c++)
        for (int64_t j = 0; j < r->roi_numel; j++) {
            int64_t off = 0;
            bool inside = true;
            for (int32_t d = 0; d < nd && inside; d++) {
                int64_t i = r->idx[d][(j / rs[d]) % r->g.roi[d]];
                inside = i >= 0;
                off += i * ss[d];
            }
            dst[c * r->roi_numel + j] = inside ? src[c * r->image_numel + off] : o->pad_value;
        }
}

/* Offset in the padded image of each position of window w. */
static int64_t padded_offset(const sw_run *r, const int64_t *start, int64_t j)
{
    int32_t nd = r->o->n_dims;
    int64_t off = 0, rest = j;
    int64_t pos[SG_SW_MAX_DIMS];
    for (int32_t d = nd - 1; d >= 0; d--) {
        pos[d] = rest % r->g.roi[d];
        rest /= r->g.roi[d];
    }
    for (int32_t d = 0; d < nd; d++)
        off = off * r->g.padded[d] + start[d] + pos[d];
    return off;
}

/* out[window] += pred * w, in window order (MONAI's). */
static void accumulate(sw_run *r, int64_t n, int64_t w, int64_t b)
{
    int64_t start[SG_SW_MAX_DIMS];
    sg_sw_window_start(&r->g, w, start);
    const float *pred = r->win_out + b * r->classes * r->roi_numel;
    for (int64_t j = 0; j < r->roi_numel; j++) {
        int64_t off = padded_offset(r, start, j);
        float wj = r->weight[j];
        for (int64_t k = 0; k < r->classes; k++)
            r->acc[(n * r->classes + k) * r->padded_numel + off] += pred[k * r->roi_numel + j] * wj;
    }
}

/* The summed weights: the same for every image of the batch. */
static void count_weights(sw_run *r)
{
    int64_t start[SG_SW_MAX_DIMS];
    for (int64_t w = 0; w < r->g.n_windows; w++) {
        sg_sw_window_start(&r->g, w, start);
        for (int64_t j = 0; j < r->roi_numel; j++)
            r->count[padded_offset(r, start, j)] += r->weight[j];
    }
}

static sg_status prepare(sw_run *r, const segrt_engine *engine, const sg_tensor *image, segrt_tensor *in,
                         segrt_tensor *outs, size_t n_out)
{
    const sg_sw_options *o = r->o;
    int32_t nd = o->n_dims;
    SG_TRY(sg_sw_grid_make(nd, image->dims + 2, o->roi, o->overlap, o->grid, &r->g));
    r->channels = image->dims[1];
    r->roi_numel = r->padded_numel = r->image_numel = 1;
    for (int32_t d = 0; d < nd; d++) {
        r->roi_numel *= r->g.roi[d];
        r->padded_numel *= r->g.padded[d];
        r->image_numel *= r->g.size[d];
        if (!(r->idx[d] = malloc(sizeof(int64_t) * (size_t)r->g.roi[d])))
            return SEGRT_ERROR_OUT_OF_MEMORY;
    }
    memset(in, 0, sizeof *in);
    in->dtype = SEGRT_DTYPE_FLOAT32;
    in->rank = nd + 2;
    SG_TRY(sg_sw_input_dims(o, image, in->dims));
    if (segrt_engine_input_count(engine) != 1)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sliding windows feed models of one input; this one has %zu",
                        segrt_engine_input_count(engine));
    memset(outs, 0, sizeof *outs * n_out);
    SG_TRY(segrt_engine_output_shapes(engine, 1, in, n_out, outs));
    const segrt_tensor *y = &outs[0];
    bool same = y->rank == nd + 2 && y->dims[0] == o->sw_batch && y->dtype == SEGRT_DTYPE_FLOAT32;
    for (int32_t d = 0; same && d < nd; d++)
        same = y->dims[2 + d] == r->g.roi[d];
    if (!same) {
        char got[128], want[128];
        sg_dims_format(y->dims, y->rank, got, sizeof got);
        sg_dims_format(in->dims, in->rank, want, sizeof want);
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "the model maps a %s window to a %s %s output; sliding windows need float32 "
                        "[batch, classes, window] of the window's size",
                        want, segrt_dtype_name(y->dtype), got);
    }
    r->classes = y->dims[1];
    int64_t n_img = image->dims[0];
    size_t acc_n = (size_t)(n_img * r->classes * r->padded_numel);
    r->weight = malloc(sizeof(float) * (size_t)r->roi_numel);
    r->count = calloc((size_t)r->padded_numel, sizeof(float));
    r->acc = calloc(acc_n ? acc_n : 1, sizeof(float));
    r->win_in = malloc(sizeof(float) * (size_t)(o->sw_batch * r->channels * r->roi_numel));
    r->win_out = malloc(sizeof(float) * (size_t)(o->sw_batch * r->classes * r->roi_numel));
    if (!r->weight || !r->count || !r->acc || !r->win_in || !r->win_out)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "no memory for the %lld-voxel accumulators",
                        (long long)(n_img * r->classes * r->padded_numel));
    SG_TRY(sg_sw_importance(nd, r->g.roi, o->blend, o->sigma_scale, r->weight));
    in->data = r->win_in;
    in->memory = SEGRT_MEMORY_HOST;
    return SEGRT_OK;
}

/* Every window through the engine, sw_batch at a time; a short last batch
 * repeats its last window, whose extra results are not used. */
static sg_status run_windows(sw_run *r, segrt_context *ctx, const sg_tensor *image, segrt_tensor *in,
                             segrt_tensor *outs, size_t n_out, void **extra)
{
    int64_t total = image->dims[0] * r->g.n_windows, B = r->o->sw_batch;
    outs[0].data = r->win_out;
    outs[0].memory = SEGRT_MEMORY_HOST;
    for (size_t j = 1; j < n_out; j++) { /* outputs other than the first are computed, not used */
        sg_tensor t = {outs[j].dtype, outs[j].rank, {0}, NULL};
        memcpy(t.dims, outs[j].dims, sizeof t.dims);
        size_t bytes = sg_tensor_bytes(&t);
        if (!(extra[j] = malloc(bytes ? bytes : 1)))
            return SEGRT_ERROR_OUT_OF_MEMORY;
        outs[j].data = extra[j];
        outs[j].memory = SEGRT_MEMORY_HOST;
    }
    for (int64_t first = 0; first < total; first += B) {
        int64_t got = total - first < B ? total - first : B;
        for (int64_t b = 0; b < B; b++) {
            int64_t g = first + (b < got ? b : got - 1);
            gather(r, image, g / r->g.n_windows, g % r->g.n_windows, b);
        }
        SG_TRY(segrt_context_run(ctx, 1, in, n_out, outs));
        for (int64_t b = 0; b < got; b++) {
            int64_t g = first + b;
            accumulate(r, g / r->g.n_windows, g % r->g.n_windows, b);
        }
    }
    return SEGRT_OK;
}

/* acc / count, cropped: the blended logits, N x K x image, into acc's front. */
static void normalise_and_crop(sw_run *r, int64_t n_img)
{
    int32_t nd = r->o->n_dims;
    float *dst = r->acc;
    for (int64_t nk = 0; nk < n_img * r->classes; nk++) {
        const float *src = r->acc + nk * r->padded_numel;
        for (int64_t i = 0; i < r->image_numel; i++) {
            int64_t rest = i, off = 0, pos[SG_SW_MAX_DIMS];
            for (int32_t d = nd - 1; d >= 0; d--) {
                pos[d] = rest % r->g.size[d];
                rest /= r->g.size[d];
            }
            for (int32_t d = 0; d < nd; d++)
                off = off * r->g.padded[d] + pos[d] + r->g.pad_begin[d];
            /* dst never passes src: the image is no larger than the padded one. */
            dst[nk * r->image_numel + i] = src[off] / r->count[off];
        }
    }
}

static sg_sw_activation effective_activation(const sg_sw_options *o)
{
    if (o->activation != SG_SW_ACTIVATION_DEFAULT)
        return o->activation;
    return o->output == SG_SW_OUTPUT_LOGITS ? SG_SW_ACTIVATION_NONE : SG_SW_ACTIVATION_SOFTMAX;
}

static void activate(sw_run *r, int64_t n_img, sg_sw_activation act)
{
    int64_t K = r->classes, V = r->image_numel;
    for (int64_t n = 0; n < n_img; n++) {
        float *x = r->acc + n * K * V;
        for (int64_t i = 0; i < V; i++) {
            if (act == SG_SW_ACTIVATION_SIGMOID) {
                for (int64_t k = 0; k < K; k++)
                    x[k * V + i] = 1.0f / (1.0f + expf(-x[k * V + i]));
                continue;
            }
            float m = -INFINITY, sum = 0.0f;
            for (int64_t k = 0; k < K; k++)
                m = x[k * V + i] > m ? x[k * V + i] : m;
            for (int64_t k = 0; k < K; k++) {
                x[k * V + i] = expf(x[k * V + i] - m);
                sum += x[k * V + i];
            }
            for (int64_t k = 0; k < K; k++)
                x[k * V + i] /= sum;
        }
    }
}

/* Labels from logits or probabilities: the first largest class (uint8, or
 * uint16 past 256 classes), or per class `> threshold` after a sigmoid. */
static sg_status make_labels(sw_run *r, int64_t n_img, sg_sw_activation act, sg_tensor *out)
{
    int64_t K = r->classes, V = r->image_numel;
    bool multi = act == SG_SW_ACTIVATION_SIGMOID;
    bool wide = !multi && K > 256;
    out->dtype = wide ? SEGRT_DTYPE_UINT16 : SEGRT_DTYPE_UINT8;
    out->dims[1] = multi ? K : 1;
    size_t n = (size_t)(n_img * (multi ? K : 1) * V);
    out->data = malloc((n ? n : 1) * (wide ? 2 : 1));
    if (!out->data)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    for (int64_t b = 0; b < n_img; b++) {
        const float *x = r->acc + b * K * V;
        for (int64_t i = 0; i < V; i++) {
            if (multi) {
                for (int64_t k = 0; k < K; k++)
                    ((uint8_t *)out->data)[(b * K + k) * V + i] = x[k * V + i] > r->o->threshold;
                continue;
            }
            int64_t best = 0;
            for (int64_t k = 1; k < K; k++)
                if (x[k * V + i] > x[best * V + i])
                    best = k;
            if (wide)
                ((uint16_t *)out->data)[b * V + i] = (uint16_t)best;
            else
                ((uint8_t *)out->data)[b * V + i] = (uint8_t)best;
        }
    }
    return SEGRT_OK;
}

sg_status sg_sliding_window(segrt_context *ctx, const segrt_engine *engine, const sg_sw_options *o,
                            const sg_tensor *image, sg_tensor *out)
{
    memset(out, 0, sizeof *out);
    SG_TRY(check_image(o, image));
    sw_run r;
    memset(&r, 0, sizeof r);
    r.o = o;
    enum { MAX_OUT = 16 };
    segrt_tensor in, outs[MAX_OUT];
    void *extra[MAX_OUT] = {NULL};
    size_t n_out = segrt_engine_output_count(engine);
    sg_status s = n_out >= 1 && n_out <= MAX_OUT
                      ? SEGRT_OK
                      : sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "a model with %zu outputs (1 to %d are taken)", n_out,
                                 MAX_OUT);
    if (s == SEGRT_OK)
        s = prepare(&r, engine, image, &in, outs, n_out);
    if (s == SEGRT_OK)
        s = run_windows(&r, ctx, image, &in, outs, n_out, extra);
    for (size_t j = 0; j < MAX_OUT; j++)
        free(extra[j]);
    if (s == SEGRT_OK) {
        int64_t n_img = image->dims[0];
        count_weights(&r);
        normalise_and_crop(&r, n_img);
        sg_sw_activation act = effective_activation(o);
        if (o->output != SG_SW_OUTPUT_LOGITS && act != SG_SW_ACTIVATION_NONE &&
            !(o->output == SG_SW_OUTPUT_LABELS && act == SG_SW_ACTIVATION_SOFTMAX))
            activate(&r, n_img, act); /* argmax needs no softmax: it is monotonic */
        out->rank = image->rank;
        out->dims[0] = n_img;
        out->dims[1] = r.classes;
        memcpy(out->dims + 2, image->dims + 2, sizeof(int64_t) * (size_t)o->n_dims);
        if (o->output == SG_SW_OUTPUT_LABELS) {
            s = make_labels(&r, n_img, act, out);
        } else {
            out->dtype = SEGRT_DTYPE_FLOAT32;
            out->data = r.acc; /* the cropped result is at its front */
            r.acc = NULL;
        }
    }
    sw_run_free(&r);
    if (s != SEGRT_OK) {
        free(out->data);
        memset(out, 0, sizeof *out);
    }
    return s;
}
