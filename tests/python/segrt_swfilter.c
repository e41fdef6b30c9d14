/* The driver of test_sliding_window.py's window-filter cases: the host
 * path of sliding windows (pipeline/sliding_window.h, o.host_path) with
 * a keep_window filter, which the command line does not expose.
 *
 *   segrt_swfilter MODEL.onnx IMAGE.npy MASK.npy OUT.npy CALLS.npy [KEY=VALUE...]
 *
 * runs MODEL (on the CPU) over IMAGE (float32 N x C x spatial), keeping
 * the windows whose box holds a nonzero voxel of MASK (uint8, the image's
 * spatial dims), writes the result to OUT.npy and every box the filter was
 * asked about (int64, one row per call: the starts, then the sizes) to
 * CALLS.npy. Keys: roi=A,B[,C] overlap=A[,B,C] batch=N blend=constant|
 * gaussian grid=monai|nnunet output=logits|probs|labels activation=none|
 * softmax|sigmoid threshold=T. A failure prints "STATUS: message" on
 * stderr and exits 1. */
#include "io/npy.h"
#include "pipeline/sliding_window.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct filter {
    const sg_tensor *mask;
    int32_t n_dims;
    int64_t *calls; /* n_calls rows of 2 * n_dims */
    int64_t n_calls, cap;
} filter;

static bool keep(void *user, const int64_t *start, const int64_t *size)
{
    filter *f = user;
    if (f->n_calls == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 64;
        int64_t *c = realloc(f->calls, sizeof *c * (size_t)(f->cap * 2 * f->n_dims));
        if (!c)
            abort();
        f->calls = c;
    }
    int32_t nd = f->n_dims;
    memcpy(f->calls + f->n_calls * 2 * nd, start, sizeof *start * (size_t)nd);
    memcpy(f->calls + f->n_calls * 2 * nd + nd, size, sizeof *size * (size_t)nd);
    f->n_calls++;
    const uint8_t *m = f->mask->data;
    int64_t total = 1;
    for (int32_t d = 0; d < nd; d++)
        total *= size[d];
    for (int64_t j = 0; j < total; j++) {
        int64_t rest = j, off = 0, pos[3];
        for (int32_t d = nd - 1; d >= 0; d--) {
            pos[d] = rest % size[d];
            rest /= size[d];
        }
        for (int32_t d = 0; d < nd; d++)
            off = off * f->mask->dims[d] + start[d] + pos[d];
        if (m[off])
            return true;
    }
    return false;
}

static int fail(sg_status st)
{
    fprintf(stderr, "%s: %s\n", segrt_status_name(st), sg_last_error());
    return 1;
}

static void numbers(const char *text, double *v, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        char *end;
        v[i] = strtod(text, &end);
        text = *end == ',' ? end + 1 : end;
        if (!*end && i + 1 < n) { /* one value for every axis */
            for (int32_t k = i + 1; k < n; k++)
                v[k] = v[i];
            return;
        }
    }
}

static bool option(sg_sw_options *o, const char *kv)
{
    const char *v = strchr(kv, '=');
    if (!v)
        return false;
    size_t k = (size_t)(v++ - kv);
    double x[3] = {0, 0, 0};
    if (!strncmp(kv, "roi", k)) {
        numbers(v, x, o->n_dims);
        for (int32_t d = 0; d < o->n_dims; d++)
            o->roi[d] = (int64_t)x[d];
    } else if (!strncmp(kv, "overlap", k)) {
        numbers(v, o->overlap, o->n_dims);
    } else if (!strncmp(kv, "batch", k)) {
        o->sw_batch = atoi(v);
    } else if (!strncmp(kv, "blend", k)) {
        o->blend = !strcmp(v, "gaussian") ? SG_SW_BLEND_GAUSSIAN : SG_SW_BLEND_CONSTANT;
    } else if (!strncmp(kv, "grid", k)) {
        o->grid = !strcmp(v, "nnunet") ? SG_SW_GRID_NNUNET : SG_SW_GRID_MONAI;
    } else if (!strncmp(kv, "output", k)) {
        o->output = !strcmp(v, "probs")    ? SG_SW_OUTPUT_PROBS
                    : !strcmp(v, "labels") ? SG_SW_OUTPUT_LABELS
                                           : SG_SW_OUTPUT_LOGITS;
    } else if (!strncmp(kv, "activation", k)) {
        o->activation = !strcmp(v, "sigmoid") ? SG_SW_ACTIVATION_SIGMOID
                        : !strcmp(v, "none")  ? SG_SW_ACTIVATION_NONE
                                              : SG_SW_ACTIVATION_SOFTMAX;
    } else if (!strncmp(kv, "threshold", k)) {
        o->threshold = (float)atof(v);
    } else {
        return false;
    }
    return true;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: segrt_swfilter MODEL IMAGE.npy MASK.npy OUT.npy CALLS.npy [KEY=VALUE...]\n");
        return 2;
    }
    sg_tensor image = {0}, mask = {0}, out = {0};
    sg_status st = sg_npy_read(argv[2], &image);
    if (st == SEGRT_OK)
        st = sg_npy_read(argv[3], &mask);
    if (st != SEGRT_OK)
        return fail(st);
    int32_t nd = image.rank - 2;
    sg_sw_options o;
    sg_sw_options_default(&o, nd);
    o.host_path = true;
    for (int i = 6; i < argc; i++)
        if (!option(&o, argv[i])) {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    if (mask.dtype != SEGRT_DTYPE_UINT8 || mask.rank != nd ||
        memcmp(mask.dims, image.dims + 2, sizeof(int64_t) * (size_t)nd)) {
        fprintf(stderr, "%s: the mask is uint8 of the image's spatial dims\n", argv[3]);
        return 2;
    }
    filter f = {&mask, nd, NULL, 0, 0};
    o.keep_window = keep;
    o.keep_window_user = &f;
    segrt_model *model = NULL;
    segrt_build_options *b = NULL;
    segrt_engine *engine = NULL;
    segrt_context *ctx = NULL;
    segrt_tensor_desc in;
    int64_t dims[SEGRT_MAX_RANK];
    st = segrt_model_load(argv[1], &model);
    if (st == SEGRT_OK)
        st = segrt_model_input(model, 0, &in);
    if (st == SEGRT_OK)
        st = sg_sw_input_dims(&o, &image, dims);
    if (st == SEGRT_OK)
        st = segrt_build_options_create(&b);
    if (st == SEGRT_OK)
        st = segrt_build_options_set_shape(b, in.name, image.rank, dims);
    if (st == SEGRT_OK)
        st = segrt_engine_build(model, b, &engine);
    if (st == SEGRT_OK)
        st = segrt_context_create(engine, &ctx);
    if (st == SEGRT_OK) {
        sg_sw_model m = {ctx, engine};
        st = sg_sliding_window(&m, 1, &o, &image, &out);
    }
    if (st == SEGRT_OK)
        st = sg_npy_write(argv[4], &out);
    if (st == SEGRT_OK) {
        sg_tensor calls = {.dtype = SEGRT_DTYPE_INT64, .rank = 2, .dims = {f.n_calls, 2 * nd}, .data = f.calls};
        st = sg_npy_write(argv[5], &calls);
    }
    int rc = st == SEGRT_OK ? 0 : fail(st);
    segrt_context_destroy(ctx);
    segrt_engine_destroy(engine);
    segrt_build_options_destroy(b);
    segrt_model_destroy(model);
    free(image.data);
    free(mask.data);
    free(out.data);
    free(f.calls);
    return rc;
}
