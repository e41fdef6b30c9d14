/* Sliding-window inference on host memory (sliding_window.h): MONAI's
 * algorithm step by step. Windows are taken in MONAI's order (each
 * image's windows in turn, the last axis fastest) and a batch may span
 * two images, so every voxel's float32 sums add the same terms in the
 * same order as MONAI's. */
#include "pipeline/sliding_window.h"

#include "core/mem.h"

#include "pipeline/sw_device.h"

#include "core/mem.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* The most elements of any buffer a windowed run computes the size of:
 * their bytes (up to 8 per element) stay in int64. */
#define SW_MAX_ELEMENTS (INT64_MAX / 8)

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
    o->acc_dtype = SEGRT_DTYPE_FLOAT32;
}

sg_status sg_sw_check_image(const sg_sw_options *o, int32_t rank, segrt_dtype dtype, const int64_t *dims)
{
    if (o->n_dims < 1 || o->n_dims > SG_SW_MAX_DIMS)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "a window of %d dims; 1 to %d are supported", o->n_dims,
                        SG_SW_MAX_DIMS);
    if (rank != o->n_dims + 2)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "the image has %d dims; a %d-D window needs N x C x %d spatial dims", rank, o->n_dims,
                        o->n_dims);
    if (dtype != SEGRT_DTYPE_FLOAT32)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "the image is %s; sliding windows read float32",
                        segrt_dtype_name(dtype));
    if (o->sw_batch < 1)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "a window batch of %d", o->sw_batch);
    if (o->probs_u8 && (o->output != SG_SW_OUTPUT_PROBS || sg_sw_effective_activation(o) == SG_SW_ACTIVATION_NONE))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "probabilities as uint8 are the probabilities output of a softmax or sigmoid");
    int64_t numel = 1;
    for (int32_t d = 0; d < rank; d++) {
        if (dims[d] < 1)
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "image dim %d is %lld", d, (long long)dims[d]);
        if (!sg_mul_i64(numel, dims[d], &numel) || numel > SW_MAX_ELEMENTS) {
            char b[160];
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "an image of %s elements: more than 64-bit byte counts hold",
                            sg_dims_format(dims, rank, b, sizeof b));
        }
    }
    return SEGRT_OK;
}

/* a * b * c, or -1 past SW_MAX_ELEMENTS. */
static int64_t product3(int64_t a, int64_t b, int64_t c)
{
    int64_t p;
    return sg_mul_i64(a, b, &p) && sg_mul_i64(p, c, &p) && p <= SW_MAX_ELEMENTS ? p : -1;
}

sg_status sg_sw_check_buffers(const sg_sw_options *o, const sg_sw_grid *g, int64_t n_img, int64_t channels,
                              int64_t classes)
{
    int64_t roi = 1, padded = 1;
    for (int32_t d = 0; d < g->n_dims; d++) { /* each at most SG_SW_MAX_VOXELS (sg_sw_grid_make) */
        roi *= g->roi[d];
        padded *= g->padded[d];
    }
    const char *what = NULL;
    if (product3(o->sw_batch, channels, roi) < 0)
        what = "the batch of windows (batch x channels x window)";
    else if (product3(o->sw_batch, classes, roi) < 0)
        what = "the batch of results (batch x classes x window)";
    else if (product3(n_img, classes, padded) < 0)
        what = "the accumulators (images x classes x padded image)";
    if (!what)
        return SEGRT_OK;
    char wb[96];
    return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                    "a %s window, batch %d, %lld channels, %lld classes, %lld images: %s has more elements than "
                    "64-bit byte counts hold",
                    sg_dims_format(g->roi, g->n_dims, wb, sizeof wb), o->sw_batch, (long long)channels,
                    (long long)classes, (long long)n_img, what);
}

static sg_status check_image(const sg_sw_options *o, const sg_tensor *image)
{
    return sg_sw_check_image(o, image->rank, image->dtype, image->dims);
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

sg_status sg_sw_auto_batch(const sg_sw_options *opts, const sg_tensor *image, segrt_engine *const *engines, int32_t n,
                           int32_t device, int32_t *out)
{
    *out = 1;
    sg_sw_options one = *opts;
    one.sw_batch = 1;
    const sg_sw_options *o = &one;
    SG_TRY(check_image(o, image));
    sg_sw_grid g;
    SG_TRY(sg_sw_grid_make(o->n_dims, image->dims + 2, o->roi, o->overlap, o->grid, &g));
    int64_t roi_numel = 1, pad_plane = 1, plane = 1;
    for (int32_t d = 0; d < g.n_dims; d++) {
        roi_numel *= g.roi[d];
        if (d > 0) {
            pad_plane *= g.padded[d];
            plane *= g.size[d];
        }
    }
    int64_t windows = g.n_windows, rows = g.roi[0] < g.padded[0] ? g.roi[0] : g.padded[0];
    sg_sw_grid_free(&g);
    int64_t C = image->dims[1], K = 1;
    uint64_t held = 0, fixed = 0, per_window = 0;
    for (int32_t m = 0; m < n; m++) {
        segrt_engine_info info;
        segrt_tensor in, y[16];
        memset(&in, 0, sizeof in);
        in.dtype = SEGRT_DTYPE_FLOAT32;
        in.rank = image->rank;
        SG_TRY(sg_sw_input_dims(o, image, in.dims));
        size_t n_out = segrt_engine_output_count(engines[m]);
        SG_TRY(segrt_engine_get_info(engines[m], &info));
        if (info.device != SEGRT_DEVICE_CUDA)
            return SEGRT_OK; /* the host path: a window a run */
        SG_TRY(segrt_engine_output_shapes(engines[m], 1, &in, n_out < 16 ? n_out : 16, y));
        K = y[0].rank > 1 ? y[0].dims[1] : 1;
        held += info.weight_bytes + info.arena_bytes + info.workspace_bytes;
        fixed += info.weight_bytes + info.workspace_bytes;
        per_window += info.arena_bytes;
    }
    int32_t flips = 1 << __builtin_popcount(o->tta_axes);
    per_window += 4u * (uint64_t)roi_numel * (uint64_t)(C + K * (1 + (flips > 1) + (n > 1)));
    fixed += 4u * (uint64_t)((K + 1) * rows * pad_plane) + 4u * (uint64_t)(C * 2 * rows * plane);
    uint64_t budget = o->max_memory;
    if (!budget || budget == SG_SW_MEMORY_AUTO) {
        segrt_device_info di;
        SG_TRY(segrt_cuda_device_info(device, &di));
        budget = budget ? sg_sw_auto_budget(di.free_memory_bytes, di.total_memory_bytes, held)
                        : di.free_memory_bytes + held;
    }
    budget = budget / 10 * 9; /* room for what the estimate misses */
    int64_t b = budget > fixed ? (int64_t)((budget - fixed) / (per_window ? per_window : 1)) : 1;
    b = b < windows ? b : windows;
    b = b < 64 ? b : 64;
    *out = b < 1 ? 1 : (int32_t)b;
    return SEGRT_OK;
}

uint64_t sg_sw_auto_budget(uint64_t free_bytes, uint64_t total_bytes, uint64_t held_bytes)
{
    uint64_t room = total_bytes / 20 > ((uint64_t)256 << 20) ? total_bytes / 20 : (uint64_t)256 << 20;
    uint64_t have = free_bytes + held_bytes < free_bytes ? UINT64_MAX : free_bytes + held_bytes;
    return have > room ? have - room : 0;
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

#define SW_MAX_OUTPUTS SG_SW_MAX_OUTPUTS
#define SW_MAX_FLIPS SG_SW_MAX_FLIPS

/* One model's engine outputs for a batch of windows. */
typedef struct sw_outputs {
    size_t n;
    segrt_tensor t[SW_MAX_OUTPUTS]; /* t[0]: the prediction (into sw_run's win_pred) */
    void *extra[SW_MAX_OUTPUTS];   /* the others: computed, not used */
} sw_outputs;

/* Everything a run holds. */
typedef struct sw_run {
    const sg_sw_options *o;
    const sg_sw_model *models;
    int32_t n_models;
    sg_sw_grid g;
    int64_t roi_numel, padded_numel, image_numel;
    int64_t channels, classes;
    uint32_t flips[SW_MAX_FLIPS]; /* axis masks: 0 (the identity) first */
    int32_t n_flips;
    float *weight;    /* importance map over the window */
    float *count;     /* summed weights over the padded image */
    float *acc;       /* N x K x padded image */
    float *win_in;    /* sw_batch x C x window */
    float *win_flip;  /* the same, flipped */
    float *win_pred;  /* sw_batch x K x window: one engine run */
    float *win_back;  /* the same, flipped back */
    float *win_model; /* one model's result after test-time augmentation */
    float *win_out;   /* the ensemble's */
    sw_outputs *outs; /* per model */
    int64_t *idx[SG_SW_MAX_DIMS]; /* per window axis: source index of each position (-1: constant) */
    int64_t *kept;                /* the windows that run (sg_sw_kept_windows) */
    int64_t n_kept;
    uint8_t *bare; /* per image voxel: 1 where no window that ran covers it (NULL: none such) */
} sw_run;

static void sw_run_free(sw_run *r)
{
    sg_sw_grid_free(&r->g);
    free(r->weight);
    free(r->count);
    free(r->acc);
    free(r->win_in);
    free(r->win_flip);
    free(r->win_pred);
    free(r->win_back);
    free(r->win_model);
    free(r->win_out);
    for (int32_t m = 0; r->outs && m < r->n_models; m++)
        for (size_t j = 0; j < SW_MAX_OUTPUTS; j++)
            free(r->outs[m].extra[j]);
    free(r->outs);
    for (int32_t d = 0; d < SG_SW_MAX_DIMS; d++)
        free(r->idx[d]);
    free(r->kept);
    free(r->bare);
}

sg_status sg_sw_kept_windows(const sg_sw_options *o, const sg_sw_grid *g, int64_t **list, int64_t *n)
{
    *list = NULL;
    *n = 0;
    if (g->n_windows < 1)
        return SEGRT_OK;
    int64_t *out = malloc(sizeof *out * (size_t)g->n_windows);
    if (!out)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "no memory for the list of %lld windows", (long long)g->n_windows);
    int64_t k = 0;
    for (int64_t w = 0; w < g->n_windows; w++) {
        int64_t start[SG_SW_MAX_DIMS], box_start[SG_SW_MAX_DIMS], box_size[SG_SW_MAX_DIMS];
        sg_sw_window_start(g, w, start);
        for (int32_t d = 0; d < g->n_dims; d++) {
            int64_t a = start[d] - g->pad_begin[d], b = a + g->roi[d];
            a = a < 0 ? 0 : a;
            b = b > g->size[d] ? g->size[d] : b;
            box_start[d] = a;
            box_size[d] = b - a;
        }
        if (!o->keep_window || o->keep_window(o->keep_window_user, box_start, box_size))
            out[k++] = w;
    }
    if (k == 0) {
        free(out);
        out = NULL;
    }
    *list = out;
    *n = k;
    return SEGRT_OK;
}

/* Among as many axes, flips go in lexicographic order (for at most 3
 * axes, increasing masks). */
void sg_sw_flips(uint32_t axes, int32_t n_dims, uint32_t *flips, int32_t *n)
{
    *n = 0;
    flips[(*n)++] = 0;
    uint32_t all = (1u << n_dims) - 1;
    for (int32_t k = 1; k <= n_dims; k++)
        for (uint32_t m = 1; m <= all; m++)
            if ((m & ~axes) == 0 && __builtin_popcount(m) == k)
                flips[(*n)++] = m;
}

/* dst = src flipped along the axes of mask, for `rows` arrays of a window
 * (channels of each window of a batch). Its own inverse. */
static void flip_windows(const sw_run *r, const float *src, float *dst, int64_t rows, uint32_t mask)
{
    int32_t nd = r->o->n_dims;
    for (int64_t j = 0; j < r->roi_numel; j++) {
        int64_t rest = j, f = 0, pos[SG_SW_MAX_DIMS];
        for (int32_t d = nd - 1; d >= 0; d--) {
            pos[d] = rest % r->g.roi[d];
            rest /= r->g.roi[d];
        }
        for (int32_t d = 0; d < nd; d++)
            f = f * r->g.roi[d] + (mask >> d & 1u ? r->g.roi[d] - 1 - pos[d] : pos[d]);
        for (int64_t c = 0; c < rows; c++)
            dst[c * r->roi_numel + f] = src[c * r->roi_numel + j];
    }
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

/* The summed weights of the windows that run: the same for every image
 * of the batch. */
static void count_weights(sw_run *r)
{
    int64_t start[SG_SW_MAX_DIMS];
    for (int64_t k = 0; k < r->n_kept; k++) {
        sg_sw_window_start(&r->g, r->kept[k], start);
        for (int64_t j = 0; j < r->roi_numel; j++)
            r->count[padded_offset(r, start, j)] += r->weight[j];
    }
}

sg_status sg_sw_model_outputs(const sg_sw_model *models, int32_t m, const sg_sw_options *o, const int64_t *roi,
                              const segrt_tensor *in, size_t *n, segrt_tensor *t, int64_t *classes)
{
    const segrt_engine *e = models[m].engine;
    if (segrt_engine_input_count(e) != 1)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "model %d: sliding windows feed models of one input; it has %zu",
                        m + 1, segrt_engine_input_count(e));
    *n = segrt_engine_output_count(e);
    if (*n < 1 || *n > SW_MAX_OUTPUTS)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "model %d has %zu outputs (1 to %d are taken)", m + 1, *n,
                        SW_MAX_OUTPUTS);
    SG_TRY(segrt_engine_output_shapes(e, 1, in, *n, t));
    const segrt_tensor *y = &t[0];
    int32_t nd = o->n_dims;
    bool same = y->rank == nd + 2 && y->dims[0] == o->sw_batch && y->dtype == SEGRT_DTYPE_FLOAT32;
    for (int32_t d = 0; same && d < nd; d++)
        same = y->dims[2 + d] == roi[d];
    if (!same) {
        char got[128], want[128];
        sg_dims_format(y->dims, y->rank, got, sizeof got);
        sg_dims_format(in->dims, in->rank, want, sizeof want);
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "model %d maps a %s window to a %s %s output; sliding windows need float32 "
                        "[batch, classes, window] of the window's size",
                        m + 1, want, segrt_dtype_name(y->dtype), got);
    }
    if (m == 0)
        *classes = y->dims[1];
    else if (y->dims[1] != *classes)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "model %d gives %lld classes; model 1 gives %lld: an "
                        "ensemble averages models of one class count", m + 1, (long long)y->dims[1],
                        (long long)*classes);
    return SEGRT_OK;
}

/* Model m's outputs for the window batch in: checked, and host buffers
 * for the outputs other than the first. */
static sg_status model_outputs(sw_run *r, int32_t m, const segrt_tensor *in)
{
    sw_outputs *so = &r->outs[m];
    SG_TRY(sg_sw_model_outputs(r->models, m, r->o, r->g.roi, in, &so->n, so->t, &r->classes));
    for (size_t j = 1; j < so->n; j++) { /* outputs other than the first are computed, not used */
        sg_tensor t = {so->t[j].dtype, so->t[j].rank, {0}, NULL};
        memcpy(t.dims, so->t[j].dims, sizeof t.dims);
        size_t bytes = sg_tensor_bytes(&t);
        if (!(so->extra[j] = malloc(bytes ? bytes : 1)))
            return SEGRT_ERROR_OUT_OF_MEMORY;
        so->t[j].data = so->extra[j];
        so->t[j].memory = SEGRT_MEMORY_HOST;
    }
    return SEGRT_OK;
}

static sg_status prepare(sw_run *r, const sg_tensor *image, segrt_tensor *in)
{
    const sg_sw_options *o = r->o;
    int32_t nd = o->n_dims;
    SG_TRY(sg_sw_grid_make(nd, image->dims + 2, o->roi, o->overlap, o->grid, &r->g));
    if (o->tta_axes >> nd)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "mirroring asks for a spatial axis beyond the image's %d", nd);
    sg_sw_flips(o->tta_axes, nd, r->flips, &r->n_flips);
    SG_TRY(sg_sw_kept_windows(o, &r->g, &r->kept, &r->n_kept));
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
    if (!(r->outs = calloc((size_t)r->n_models, sizeof *r->outs)))
        return SEGRT_ERROR_OUT_OF_MEMORY;
    for (int32_t m = 0; m < r->n_models; m++)
        SG_TRY(model_outputs(r, m, in));
    SG_TRY(sg_sw_check_buffers(o, &r->g, image->dims[0], r->channels, r->classes));
    int64_t n_img = image->dims[0];
    size_t acc_n = (size_t)(n_img * r->classes * r->padded_numel);
    size_t in_n = (size_t)(o->sw_batch * r->channels * r->roi_numel);
    size_t out_n = (size_t)(o->sw_batch * r->classes * r->roi_numel);
    r->weight = malloc(sizeof(float) * (size_t)r->roi_numel);
    r->count = calloc((size_t)r->padded_numel, sizeof(float));
    r->acc = calloc(acc_n ? acc_n : 1, sizeof(float));
    r->win_in = malloc(sizeof(float) * in_n);
    r->win_flip = malloc(sizeof(float) * in_n);
    r->win_pred = malloc(sizeof(float) * out_n);
    r->win_back = malloc(sizeof(float) * out_n);
    r->win_model = malloc(sizeof(float) * out_n);
    r->win_out = malloc(sizeof(float) * out_n);
    if (!r->weight || !r->count || !r->acc || !r->win_in || !r->win_flip || !r->win_pred || !r->win_back ||
        !r->win_model || !r->win_out)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "no memory for the %lld-voxel accumulators",
                        (long long)(n_img * r->classes * r->padded_numel));
    SG_TRY(sg_sw_importance(nd, r->g.roi, o->blend, o->sigma_scale, r->weight));
    in->memory = SEGRT_MEMORY_HOST;
    return SEGRT_OK;
}

/* One model over the batch in win_in, with its test-time augmentation:
 * the result in win_model. */
static sg_status run_model(sw_run *r, int32_t m, segrt_tensor *in)
{
    int64_t n = r->o->sw_batch * r->classes * r->roi_numel;
    sw_outputs *so = &r->outs[m];
    so->t[0].data = r->win_pred;
    so->t[0].memory = SEGRT_MEMORY_HOST;
    for (int32_t f = 0; f < r->n_flips; f++) {
        if (f > 0)
            flip_windows(r, r->win_in, r->win_flip, r->o->sw_batch * r->channels, r->flips[f]);
        in->data = f > 0 ? r->win_flip : r->win_in;
        SG_TRY(segrt_context_run(r->models[m].ctx, 1, in, so->n, so->t));
        if (f == 0) {
            memcpy(r->win_model, r->win_pred, sizeof(float) * (size_t)n);
            continue;
        }
        flip_windows(r, r->win_pred, r->win_back, r->o->sw_batch * r->classes, r->flips[f]);
        for (int64_t i = 0; i < n; i++)
            r->win_model[i] += r->win_back[i];
    }
    if (r->n_flips > 1)
        for (int64_t i = 0; i < n; i++)
            r->win_model[i] /= (float)r->n_flips;
    return SEGRT_OK;
}

/* Every kept window of every image through every model, sw_batch at a
 * time, in MONAI's order; a short last batch repeats its last window,
 * whose extra results are not used. */
static sg_status run_windows(sw_run *r, const sg_tensor *image, segrt_tensor *in)
{
    int64_t total = image->dims[0] * r->n_kept, B = r->o->sw_batch;
    int64_t n = B * r->classes * r->roi_numel;
    for (int64_t first = 0; first < total; first += B) {
        int64_t got = total - first < B ? total - first : B;
        for (int64_t b = 0; b < B; b++) {
            int64_t g = first + (b < got ? b : got - 1);
            gather(r, image, g / r->n_kept, r->kept[g % r->n_kept], b);
        }
        for (int32_t m = 0; m < r->n_models; m++) {
            SG_TRY(run_model(r, m, in));
            if (m == 0)
                memcpy(r->win_out, r->win_model, sizeof(float) * (size_t)n);
            else
                for (int64_t i = 0; i < n; i++)
                    r->win_out[i] += r->win_model[i];
        }
        if (r->n_models > 1)
            for (int64_t i = 0; i < n; i++)
                r->win_out[i] /= (float)r->n_models;
        for (int64_t b = 0; b < got; b++) {
            int64_t g = first + b;
            accumulate(r, g / r->n_kept, r->kept[g % r->n_kept], b);
        }
        if (r->o->progress)
            r->o->progress(r->o->progress_user, first + got, total);
    }
    return SEGRT_OK;
}

/* acc / count, cropped: the blended logits, N x K x image, into acc's
 * front; 0 where no window that ran covers a voxel (count 0), each such
 * voxel marked in r->bare for the finishing steps. */
static sg_status normalise_and_crop(sw_run *r, int64_t n_img)
{
    int32_t nd = r->o->n_dims;
    float *dst = r->acc;
    if (r->n_kept < r->g.n_windows) {
        if (!(r->bare = calloc((size_t)r->image_numel, 1)))
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "no memory to mark the %lld voxels no window covers",
                            (long long)r->image_numel);
    }
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
            if (r->count[off] > 0.0f) {
                dst[nk * r->image_numel + i] = src[off] / r->count[off];
            } else {
                dst[nk * r->image_numel + i] = 0.0f;
                r->bare[i] = 1; /* count is positive everywhere when every window runs */
            }
        }
    }
    return SEGRT_OK;
}

sg_sw_activation sg_sw_effective_activation(const sg_sw_options *o)
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
            if (r->bare && r->bare[i])
                continue; /* background: 0 for every class */
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

/* Probabilities (activate's) as uint8, each round(255 p) as the device's
 * finalisation rounds it (to nearest, ties to even). */
static sg_status make_probs_u8(sw_run *r, int64_t n_img, sg_tensor *out)
{
    size_t n = (size_t)(n_img * r->classes * r->image_numel);
    uint8_t *q = malloc(n ? n : 1);
    if (!q)
        return SEGRT_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < n; i++)
        q[i] = (uint8_t)lrintf(fminf(fmaxf(r->acc[i], 0.0f), 1.0f) * 255.0f);
    out->dtype = SEGRT_DTYPE_UINT8;
    out->data = q;
    return SEGRT_OK;
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
            bool bare = r->bare && r->bare[i]; /* background: label 0 (no class, for sigmoid) */
            if (multi) {
                for (int64_t k = 0; k < K; k++)
                    ((uint8_t *)out->data)[(b * K + k) * V + i] = !bare && x[k * V + i] > r->o->threshold;
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

/* The device path's pinned staging: two buffers of 8 MiB, or of one image
 * plane when that is larger (sw_job.h, SW_PINNED_BYTES). */
#define SW_DEVICE_PINNED_BYTES ((uint64_t)8 << 20)

/* a * b * ..., false past 64 bits. */
static bool mul_u64(uint64_t *acc, uint64_t v)
{
    if (v && *acc > UINT64_MAX / v)
        return false;
    *acc *= v;
    return true;
}

sg_status sg_sw_host_need_of(const sg_sw_options *o, const int64_t *dims, int64_t classes, bool device_path,
                              uint64_t extra_image, uint64_t networks, sg_sw_host_need *need)
{
    memset(need, 0, sizeof *need);
    sg_sw_grid g;
    SG_TRY(sg_sw_grid_make(o->n_dims, dims + 2, o->roi, o->overlap, o->grid, &g));
    uint64_t numel = 1, padded = 1, roi = 1, plane = 1;
    bool ok = true;
    for (int32_t d = 0; d < g.n_dims; d++) {
        ok &= mul_u64(&numel, (uint64_t)g.size[d]) && mul_u64(&padded, (uint64_t)g.padded[d]) &&
              mul_u64(&roi, (uint64_t)g.roi[d]);
        if (d > 0)
            ok &= mul_u64(&plane, (uint64_t)g.size[d]);
    }
    sg_sw_grid_free(&g);
    uint64_t N = (uint64_t)dims[0], C = (uint64_t)dims[1], K = classes > 0 ? (uint64_t)classes : 1;
    uint64_t B = (uint64_t)(o->sw_batch > 0 ? o->sw_batch : 1);
    bool labels = o->output == SG_SW_OUTPUT_LABELS, sigmoid = sg_sw_effective_activation(o) == SG_SW_ACTIVATION_SIGMOID;
    uint64_t out_ch = labels && !sigmoid ? 1 : K,
             esize = o->probs_u8 ? 1 : !labels ? 4 : (!sigmoid && K > 256 ? 2 : 1);
    uint64_t image = N, result = N, acc = N, weights = padded, in_win = B, out_win = B;
    ok &= mul_u64(&image, C) && mul_u64(&image, numel) && mul_u64(&image, 4);
    ok &= mul_u64(&result, out_ch) && mul_u64(&result, numel) && mul_u64(&result, esize);
    ok &= mul_u64(&acc, K) && mul_u64(&acc, padded) && mul_u64(&weights, 4);
    ok &= mul_u64(&in_win, C) && mul_u64(&in_win, roi) && mul_u64(&out_win, K) && mul_u64(&out_win, roi);
    ok &= mul_u64(&acc, 4);
    need->image = image + extra_image;
    if (device_path) {
        uint64_t staging = plane;
        ok &= mul_u64(&staging, C * 4);
        need->windows = 2 * (staging > SW_DEVICE_PINNED_BYTES ? staging : SW_DEVICE_PINNED_BYTES);
        need->result = o->row_sink ? 0 : result; /* rows handed on as they finish: the pinned staging holds them */
    } else {
        /* Two window buffers in, four out (sliding_window.c's prepare) and
         * the importance map; logits and probabilities are cropped into the
         * accumulators' memory. */
        need->accumulators = acc + weights;
        need->windows = 4 * (2 * in_win + 4 * out_win + roi);
        need->result = labels || o->probs_u8 ? result : 0;
    }
    need->networks = networks;
    uint64_t parts[] = {need->image, need->accumulators, need->windows, need->result, need->networks};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        ok &= parts[i] <= UINT64_MAX - need->total;
        need->total += ok ? parts[i] : 0;
    }
    if (!ok) {
        char d[256];
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "sliding windows over a %s image with %lld classes need more "
                        "host memory than 64 bits count", sg_dims_format(dims, o->n_dims + 2, d, sizeof d),
                        (long long)K);
    }
    return SEGRT_OK;
}

/* "1.5 GiB", "12.0 MiB", "512 KiB". */
static const char *size_text(uint64_t bytes, char *buf, size_t cap)
{
    if (bytes >= (uint64_t)1 << 30)
        snprintf(buf, cap, "%.1f GiB", (double)bytes / (double)(1 << 30));
    else if (bytes >= (uint64_t)1 << 20)
        snprintf(buf, cap, "%.1f MiB", (double)bytes / (double)(1 << 20));
    else
        snprintf(buf, cap, "%llu KiB", (unsigned long long)((bytes + 1023) >> 10));
    return buf;
}

sg_status sg_sw_host_need_check(const sg_sw_options *o, const sg_sw_host_need *need, uint64_t held,
                                const char *limit_name)
{
    uint64_t avail = 0;
    const char *source = NULL;
    bool over_limit = o->max_host_memory && need->total > o->max_host_memory;
    bool over_machine = !over_limit && sg_host_memory_available(&avail, &source) &&
                        need->total - (held < need->total ? held : need->total) > avail;
    if (!over_limit && !over_machine)
        return SEGRT_OK;
    char t[32], a[32], b[32], c[32], d[32], e[32], l[32];
    char parts[256];
    snprintf(parts, sizeof parts, "image %s, accumulators %s, windows %s, result %s, networks %s",
             size_text(need->image, a, sizeof a), size_text(need->accumulators, b, sizeof b),
             size_text(need->windows, c, sizeof c), size_text(need->result, d, sizeof d),
             size_text(need->networks, e, sizeof e));
    /* Past the caller's own limit: an option that does not suit the job
     * (as a device budget below one window); past the machine: memory. */
    if (over_limit)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "the job needs %s of host memory (%s); the limit (%s) is %s",
                        size_text(need->total, t, sizeof t), parts, limit_name,
                        size_text(o->max_host_memory, l, sizeof l));
    return sg_error(SEGRT_ERROR_OUT_OF_MEMORY,
                    "the job needs %s of host memory (%s)%s%s%s; this machine has %s available (%s)",
                    size_text(need->total, t, sizeof t), parts, held ? ", " : "",
                    held ? size_text(held, l, sizeof l) : "", held ? " of it held already" : "",
                    size_text(avail, e, sizeof e), source);
}

void sg_sw_host_need_streamed(sg_sw_host_need *need, uint64_t image_held)
{
    need->total -= need->image;
    need->image = image_held;
    need->total = need->total > UINT64_MAX - image_held ? UINT64_MAX : need->total + image_held;
}

/* sg_sw_check_host_memory; with image_streamed (a device job reading its
 * image's rows from a source), the image takes no host memory of its own
 * but image_held: its rows pass through the pinned staging the windows'
 * part counts. */
static sg_status check_host_memory(const sg_sw_model *models, int32_t n_models, const sg_sw_options *o, int32_t rank,
                                   const int64_t *dims, bool image_on_host, bool device_path, bool image_streamed,
                                   uint64_t image_held, const char *limit_name)
{
    sg_tensor image = {SEGRT_DTYPE_FLOAT32, rank, {0}, NULL};
    memcpy(image.dims, dims, sizeof(int64_t) * (size_t)rank);
    sg_sw_grid g;
    SG_TRY(sg_sw_grid_make(o->n_dims, dims + 2, o->roi, o->overlap, o->grid, &g));
    segrt_tensor in, t[SG_SW_MAX_OUTPUTS];
    memset(&in, 0, sizeof in);
    in.dtype = SEGRT_DTYPE_FLOAT32;
    in.rank = rank;
    size_t n = 0;
    int64_t classes = 0;
    sg_status s = sg_sw_input_dims(o, &image, in.dims);
    if (s == SEGRT_OK)
        s = sg_sw_model_outputs(models, 0, o, g.roi, &in, &n, t, &classes);
    sg_sw_grid_free(&g);
    SG_TRY(s);
    uint64_t networks = 0;
    for (int32_t m = 0; m < n_models; m++) {
        segrt_engine_info info;
        if (segrt_engine_get_info(models[m].engine, &info) == SEGRT_OK && info.device == SEGRT_DEVICE_CPU)
            networks += info.arena_bytes + info.workspace_bytes;
    }
    sg_sw_host_need need;
    SG_TRY(sg_sw_host_need_of(o, dims, classes, device_path, 0, networks, &need));
    if (image_streamed)
        sg_sw_host_need_streamed(&need, image_held);
    return sg_sw_host_need_check(o, &need, networks + (image_on_host ? need.image : 0), limit_name);
}

sg_status sg_sw_check_host_memory(const sg_sw_model *models, int32_t n_models, const sg_sw_options *o,
                                  int32_t rank, const int64_t *dims, bool image_on_host, bool device_path,
                                  const char *limit_name)
{
    return check_host_memory(models, n_models, o, rank, dims, image_on_host, device_path, false, 0, limit_name);
}

sg_status sg_sw_check_host_memory_streamed(const sg_sw_model *models, int32_t n_models, const sg_sw_options *o,
                                           int32_t rank, const int64_t *dims, uint64_t image_held,
                                           const char *limit_name)
{
    return check_host_memory(models, n_models, o, rank, dims, false, true, true, image_held, limit_name);
}

sg_status sg_sliding_window(const sg_sw_model *models, int32_t n_models, const sg_sw_options *o,
                            const sg_tensor *image, sg_tensor *out)
{
    memset(out, 0, sizeof *out);
    SG_TRY(check_image(o, image));
    if (n_models < 1)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sliding windows need a model");
    bool device_path = sg_sw_device_capable(models, n_models) && !o->host_path;
    SG_TRY(sg_sw_check_host_memory(models, n_models, o, image->rank, image->dims, true, device_path,
                                   "max_host_memory"));
    if (device_path) {
        segrt_tensor in, res;
        memset(&in, 0, sizeof in);
        in.dtype = image->dtype;
        in.rank = image->rank;
        memcpy(in.dims, image->dims, sizeof in.dims);
        in.data = image->data;
        in.memory = SEGRT_MEMORY_HOST;
        SG_TRY(sg_sw_device_run(models, n_models, o, &in, SEGRT_MEMORY_HOST, &res, NULL));
        out->dtype = res.dtype;
        out->rank = res.rank;
        memcpy(out->dims, res.dims, sizeof out->dims);
        out->data = res.data;
        return SEGRT_OK;
    }
    sw_run r;
    memset(&r, 0, sizeof r);
    r.o = o;
    r.models = models;
    r.n_models = n_models;
    segrt_tensor in;
    sg_status s = prepare(&r, image, &in);
    if (s == SEGRT_OK)
        s = run_windows(&r, image, &in);
    if (s == SEGRT_OK) {
        int64_t n_img = image->dims[0];
        count_weights(&r);
        s = normalise_and_crop(&r, n_img);
    }
    if (s == SEGRT_OK) {
        int64_t n_img = image->dims[0];
        sg_sw_activation act = sg_sw_effective_activation(o);
        if (o->output != SG_SW_OUTPUT_LOGITS && act != SG_SW_ACTIVATION_NONE &&
            !(o->output == SG_SW_OUTPUT_LABELS && act == SG_SW_ACTIVATION_SOFTMAX))
            activate(&r, n_img, act); /* argmax needs no softmax: it is monotonic */
        out->rank = image->rank;
        out->dims[0] = n_img;
        out->dims[1] = r.classes;
        memcpy(out->dims + 2, image->dims + 2, sizeof(int64_t) * (size_t)o->n_dims);
        if (o->output == SG_SW_OUTPUT_LABELS) {
            s = make_labels(&r, n_img, act, out);
        } else if (o->probs_u8) {
            s = make_probs_u8(&r, n_img, out);
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

sg_status sg_sliding_window_image(const sg_sw_model *models, int32_t n_models, const sg_sw_options *o,
                                  sg_sw_image *image, sg_tensor *out)
{
    memset(out, 0, sizeof *out);
    sg_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = SEGRT_DTYPE_FLOAT32;
    t.rank = image->rank;
    memcpy(t.dims, image->dims, sizeof(int64_t) * (size_t)image->rank);
    if (image->data) {
        t.data = (void *)image->data;
        return sg_sliding_window(models, n_models, o, &t, out);
    }
    SG_TRY(check_image(o, &t));
    if (n_models < 1)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "sliding windows need a model");
    if (sg_sw_device_capable(models, n_models) && !o->host_path) {
        SG_TRY(sg_sw_check_host_memory_streamed(models, n_models, o, t.rank, t.dims, 0, "max_host_memory"));
        segrt_tensor res;
        SG_TRY(sg_sw_device_run_image(models, n_models, o, image, SEGRT_MEMORY_HOST, &res, NULL, NULL));
        out->dtype = res.dtype;
        out->rank = res.rank;
        memcpy(out->dims, res.dims, sizeof out->dims);
        out->data = res.data;
        return SEGRT_OK;
    }
    /* The host path: the whole image through the reader, image by image. */
    int64_t rows = t.dims[2], image_numel = rows * sg_sw_image_row_numel(image), C = t.dims[1];
    size_t bytes = sg_tensor_bytes(&t);
    if (!(t.data = malloc(bytes ? bytes : 1)))
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "sliding windows: no host memory for the %.1f MiB image",
                        bytes / 1048576.0);
    sg_status s = SEGRT_OK;
    for (int64_t n = 0; n < t.dims[0] && s == SEGRT_OK; n++)
        s = sg_sw_image_read(image, n, 0, rows, (float *)t.data + n * C * image_numel, image_numel);
    if (s == SEGRT_OK)
        s = sg_sliding_window(models, n_models, o, &t, out);
    free(t.data);
    return s;
}
