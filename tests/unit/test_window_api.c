/* The public sliding-window API (segrt_window_*) on the CPU with
 * basicunet2d_tiny: a window as large as the image gives the engine's own
 * output bit for bit; labels are the argmax of the logits; probabilities
 * sum to 1; several windows, Gaussian blending and mirroring run; a
 * window session gives, run after run and over images of other sizes,
 * segrt_window_run's numbers bit for bit; bad options, images and
 * session calls are refused with a message. The numbers of the
 * blending itself are checked against MONAI's algorithm by
 * tests/python/test_sliding_window.py. */
#include "segrt.h"
#include "testlib.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const char *model_path(void)
{
    return sg_test_model("basicunet2d_tiny.onnx");
}

typedef struct rig {
    segrt_model *model;
    segrt_engine *engine;
    segrt_context *ctx;
} rig;

/* An engine of the tiny model for the windows of opts over image. */
static bool rig_make(rig *r, const segrt_window_options *opts, const segrt_tensor *image)
{
    memset(r, 0, sizeof *r);
    int64_t dims[SEGRT_MAX_RANK];
    segrt_build_options *b = NULL;
    bool ok = segrt_model_load(model_path(), &r->model) == SEGRT_OK &&
              segrt_window_input_dims(opts, image, dims) == SEGRT_OK &&
              segrt_build_options_create(&b) == SEGRT_OK &&
              segrt_build_options_set_shape(b, "image", image->rank, dims) == SEGRT_OK &&
              segrt_engine_build(r->model, b, &r->engine) == SEGRT_OK &&
              segrt_context_create(r->engine, &r->ctx) == SEGRT_OK;
    CHECK_MSG(ok, "%s", segrt_last_error());
    segrt_build_options_destroy(b);
    return ok;
}

static void rig_free(rig *r)
{
    segrt_context_destroy(r->ctx);
    segrt_engine_destroy(r->engine);
    segrt_model_destroy(r->model);
}

static segrt_tensor image_of(float *data, int64_t n, int64_t h, int64_t w)
{
    segrt_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = SEGRT_DTYPE_FLOAT32;
    t.rank = 4;
    t.dims[0] = n;
    t.dims[1] = 1;
    t.dims[2] = h;
    t.dims[3] = w;
    t.data = data;
    t.memory = SEGRT_MEMORY_HOST;
    return t;
}

static float *random_image(int64_t numel)
{
    float *x = malloc(sizeof(float) * (size_t)numel);
    uint32_t s = 12345u;
    for (int64_t i = 0; i < numel; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 16777216.0f * 2.0f - 1.0f;
    }
    return x;
}

/* One window covering the image (sides multiples of 16, as the tiny UNet
 * needs): the result is the engine's output. */
static void test_one_window_is_the_engine(void)
{
    float *x = random_image(2 * 48 * 32);
    segrt_tensor img = image_of(x, 2, 48, 32);
    int64_t roi[2] = {48, 32};
    segrt_window_options *o = NULL;
    CHECK(segrt_window_options_create(2, roi, &o) == SEGRT_OK);
    CHECK(segrt_window_options_set_batch(o, 2) == SEGRT_OK);
    rig r;
    if (rig_make(&r, o, &img)) {
        segrt_tensor res, direct;
        CHECK_MSG(segrt_window_run(&r.ctx, 1, o, &img, &res) == SEGRT_OK, "%s", segrt_last_error());
        CHECK(segrt_engine_output_shapes(r.engine, 1, &img, 1, &direct) == SEGRT_OK);
        size_t n = (size_t)(direct.dims[0] * direct.dims[1] * direct.dims[2] * direct.dims[3]);
        direct.data = malloc(n * sizeof(float));
        direct.memory = SEGRT_MEMORY_HOST;
        CHECK(segrt_context_run(r.ctx, 1, &img, 1, &direct) == SEGRT_OK);
        CHECK(res.dtype == SEGRT_DTYPE_FLOAT32 && res.rank == 4 && memcmp(res.dims, direct.dims, 4 * 8) == 0);
        CHECK(res.data && memcmp(res.data, direct.data, n * sizeof(float)) == 0);
        free(direct.data);
        segrt_window_result_free(&res);
        CHECK(res.data == NULL);
        rig_free(&r);
    }
    segrt_window_options_destroy(o);
    free(x);
}

/* Several windows: labels are the logits' argmax; probabilities sum to 1. */
static void test_outputs_agree(void)
{
    float *x = random_image(70 * 53);
    segrt_tensor img = image_of(x, 1, 70, 53);
    int64_t roi[2] = {32, 32};
    double ov[2] = {0.5, 0.25};
    segrt_window_options *o = NULL;
    CHECK(segrt_window_options_create(2, roi, &o) == SEGRT_OK);
    CHECK(segrt_window_options_set_overlap(o, ov) == SEGRT_OK);
    CHECK(segrt_window_options_set_batch(o, 3) == SEGRT_OK);
    CHECK(segrt_window_options_set_blend(o, SEGRT_WINDOW_BLEND_GAUSSIAN, 0.125) == SEGRT_OK);
    CHECK(segrt_window_options_set_mirroring(o, 3u) == SEGRT_OK);
    rig r;
    if (rig_make(&r, o, &img)) {
        segrt_tensor logits, probs, labels;
        CHECK_MSG(segrt_window_run(&r.ctx, 1, o, &img, &logits) == SEGRT_OK, "%s", segrt_last_error());
        CHECK(segrt_window_options_set_output(o, SEGRT_WINDOW_OUTPUT_PROBS, SEGRT_WINDOW_ACTIVATION_DEFAULT, 0.5f) ==
              SEGRT_OK);
        CHECK(segrt_window_run(&r.ctx, 1, o, &img, &probs) == SEGRT_OK);
        CHECK(segrt_window_options_set_output(o, SEGRT_WINDOW_OUTPUT_LABELS, SEGRT_WINDOW_ACTIVATION_DEFAULT, 0.5f) ==
              SEGRT_OK);
        CHECK(segrt_window_run(&r.ctx, 1, o, &img, &labels) == SEGRT_OK);
        /* The stats and times entry point gives the same labels; on the
         * host path its device times are zero (garbage in, to be cleared). */
        segrt_tensor timed;
        segrt_window_stats st;
        segrt_window_times tm;
        memset(&tm, 0x7f, sizeof tm);
        CHECK(segrt_window_run_timed(&r.ctx, 1, o, &img, &timed, &st, &tm) == SEGRT_OK);
        CHECK(timed.dtype == labels.dtype && memcmp(timed.data, labels.data, 70 * 53) == 0);
        CHECK(st.windows == 8 && st.runs == 8 * 4 && st.on_device == 0); /* 4 x 2 windows, 4 flips */
        CHECK(tm.setup == 0 && tm.run == 0 && tm.uploading == 0 && tm.waiting == 0 && tm.downloading == 0);
        segrt_window_result_free(&timed);
        int64_t K = logits.dims[1], V = 70 * 53;
        CHECK(K == 2 && labels.dtype == SEGRT_DTYPE_UINT8 && labels.dims[1] == 1 && labels.dims[2] == 70);
        const float *lg = logits.data, *pr = probs.data;
        const uint8_t *lb = labels.data;
        bool argmax_ok = true, sums_ok = true;
        for (int64_t i = 0; i < V; i++) {
            argmax_ok = argmax_ok && lb[i] == (lg[V + i] > lg[i] ? 1 : 0);
            sums_ok = sums_ok && fabsf(pr[i] + pr[V + i] - 1.0f) < 1e-6f;
        }
        CHECK(argmax_ok);
        CHECK(sums_ok);
        segrt_window_result_free(&logits);
        segrt_window_result_free(&probs);
        segrt_window_result_free(&labels);
        rig_free(&r);
    }
    segrt_window_options_destroy(o);
    free(x);
}

static void test_bad_arguments(void)
{
    int64_t roi[3] = {32, 32, 32};
    segrt_window_options *o = NULL;
    CHECK(segrt_window_options_create(0, roi, &o) == SEGRT_ERROR_INVALID_ARGUMENT && o == NULL);
    CHECK(segrt_window_options_create(4, roi, &o) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_window_options_create(2, NULL, &o) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_window_options_create(2, roi, &o) == SEGRT_OK);
    double bad[2] = {0.5, 1.0};
    CHECK(segrt_window_options_set_overlap(o, bad) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(segrt_last_error(), "overlap") != NULL);
    CHECK(segrt_window_options_set_batch(o, 0) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_window_options_set_blend(o, SEGRT_WINDOW_BLEND_GAUSSIAN, 0.0) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_window_options_set_blend(o, (segrt_window_blend)7, 0.1) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_window_options_set_padding(o, (segrt_window_pad)9, 0.0f) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_window_options_set_grid(o, (segrt_window_grid)2) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_window_options_set_output(o, (segrt_window_output)3, SEGRT_WINDOW_ACTIVATION_NONE, 0.5f) ==
          SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_window_options_set_mirroring(o, 4u) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_window_options_set_mirroring(NULL, 1u) == SEGRT_ERROR_INVALID_ARGUMENT);
    /* A 3-D image for 2-D windows. */
    float x[8] = {0};
    segrt_tensor img;
    memset(&img, 0, sizeof img);
    img.dtype = SEGRT_DTYPE_FLOAT32;
    img.rank = 5;
    for (int d = 0; d < 5; d++)
        img.dims[d] = d < 2 ? 1 : 2;
    img.data = x;
    int64_t dims[SEGRT_MAX_RANK];
    CHECK(segrt_window_input_dims(o, &img, dims) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(segrt_last_error(), "dims") != NULL);
    segrt_tensor out;
    CHECK(segrt_window_run(NULL, 1, o, &img, &out) == SEGRT_ERROR_INVALID_ARGUMENT);
    segrt_context *none = NULL;
    CHECK(segrt_window_run(&none, 1, o, &img, &out) == SEGRT_ERROR_INVALID_ARGUMENT);
    segrt_window_result_free(NULL);
    segrt_window_options_destroy(o);
    segrt_window_options_destroy(NULL);
}

/* A session run twice, then over an image of another size, then over the
 * first again: each result bit-identical to a one-shot segrt_window_run
 * (and so to each other); results handed out stay the caller's. */
static void test_session_repeats(void)
{
    float *x = random_image(2 * 70 * 53), *y = random_image(2 * 40 * 61);
    segrt_tensor img = image_of(x, 2, 70, 53), other = image_of(y, 2, 40, 61);
    int64_t roi[2] = {32, 32};
    double ov[2] = {0.5, 0.25};
    segrt_window_options *o = NULL;
    CHECK(segrt_window_options_create(2, roi, &o) == SEGRT_OK);
    CHECK(segrt_window_options_set_overlap(o, ov) == SEGRT_OK);
    CHECK(segrt_window_options_set_batch(o, 3) == SEGRT_OK);
    CHECK(segrt_window_options_set_blend(o, SEGRT_WINDOW_BLEND_GAUSSIAN, 0.125) == SEGRT_OK);
    CHECK(segrt_window_options_set_output(o, SEGRT_WINDOW_OUTPUT_PROBS, SEGRT_WINDOW_ACTIVATION_DEFAULT, 0.5f) ==
          SEGRT_OK);
    rig r;
    if (rig_make(&r, o, &img)) {
        segrt_tensor want, want_other;
        CHECK_MSG(segrt_window_run(&r.ctx, 1, o, &img, &want) == SEGRT_OK, "%s", segrt_last_error());
        CHECK_MSG(segrt_window_run(&r.ctx, 1, o, &other, &want_other) == SEGRT_OK, "%s", segrt_last_error());
        size_t bytes = (size_t)(2 * 2 * 70 * 53) * sizeof(float), bytes_other = (size_t)(2 * 2 * 40 * 61) * 4;
        segrt_window_session *s = NULL;
        CHECK_MSG(segrt_window_session_create(&r.ctx, 1, o, &s) == SEGRT_OK, "%s", segrt_last_error());
        /* The session copied the options: changing them now does not reach it. */
        CHECK(segrt_window_options_set_output(o, SEGRT_WINDOW_OUTPUT_LABELS, SEGRT_WINDOW_ACTIVATION_DEFAULT,
                                              0.5f) == SEGRT_OK);
        segrt_tensor got[4];
        segrt_window_stats st;
        segrt_window_times tm;
        const segrt_tensor *images[4] = {&img, &img, &other, &img};
        for (int i = 0; i < 4; i++) {
            memset(&st, 0x7f, sizeof st);
            memset(&tm, 0x7f, sizeof tm);
            CHECK_MSG(segrt_window_session_run_timed(s, images[i], &got[i], &st, &tm) == SEGRT_OK, "%s",
                      segrt_last_error());
            const segrt_tensor *w = images[i] == &img ? &want : &want_other;
            size_t n = images[i] == &img ? bytes : bytes_other;
            CHECK(got[i].dtype == SEGRT_DTYPE_FLOAT32 && got[i].memory == SEGRT_MEMORY_HOST &&
                  memcmp(got[i].dims, w->dims, sizeof w->dims) == 0);
            CHECK(got[i].data && got[i].data != w->data && memcmp(got[i].data, w->data, n) == 0);
            CHECK(st.on_device == 0 && st.passes == 1 && st.windows > 0 && st.runs == st.windows);
            CHECK(tm.setup == 0 && tm.run == 0 && tm.waiting == 0);
        }
        /* Each run handed out a buffer of its own. */
        CHECK(got[0].data != got[1].data && got[1].data != got[3].data);
        CHECK(memcmp(got[0].data, got[1].data, bytes) == 0 && memcmp(got[1].data, got[3].data, bytes) == 0);
        segrt_tensor plain;
        CHECK(segrt_window_session_run(s, &img, &plain, NULL) == SEGRT_OK);
        CHECK(memcmp(plain.data, want.data, bytes) == 0);
        segrt_window_result_free(&plain);
        for (int i = 0; i < 4; i++)
            segrt_window_result_free(&got[i]);
        segrt_window_session_destroy(s);
        segrt_window_result_free(&want);
        segrt_window_result_free(&want_other);
        rig_free(&r);
    }
    segrt_window_options_destroy(o);
    free(x);
    free(y);
}

/* A session's bad calls: refused with a message, nothing written, and a
 * failed run leaves the session usable. */
static void test_session_errors(void)
{
    float *x = random_image(1 * 48 * 32);
    segrt_tensor img = image_of(x, 1, 48, 32);
    int64_t roi[2] = {48, 32};
    segrt_window_options *o = NULL;
    CHECK(segrt_window_options_create(2, roi, &o) == SEGRT_OK);
    rig r;
    if (rig_make(&r, o, &img)) {
        segrt_window_session *s = (segrt_window_session *)&img; /* garbage in: must become NULL */
        CHECK(segrt_window_session_create(NULL, 1, o, &s) == SEGRT_ERROR_INVALID_ARGUMENT && s == NULL);
        CHECK(strstr(segrt_last_error(), "segrt_window_session_create") != NULL);
        CHECK(segrt_window_session_create(&r.ctx, 0, o, &s) == SEGRT_ERROR_INVALID_ARGUMENT && s == NULL);
        CHECK(segrt_window_session_create(&r.ctx, 65, o, &s) == SEGRT_ERROR_INVALID_ARGUMENT);
        CHECK(segrt_window_session_create(&r.ctx, 1, NULL, &s) == SEGRT_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(segrt_last_error(), "opts") != NULL);
        segrt_context *none = NULL;
        CHECK(segrt_window_session_create(&none, 1, o, &s) == SEGRT_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(segrt_last_error(), "context 0 is NULL") != NULL);
        CHECK(segrt_window_session_create(&r.ctx, 1, o, NULL) == SEGRT_ERROR_INVALID_ARGUMENT);
        CHECK(segrt_window_session_create(&r.ctx, 1, o, &s) == SEGRT_OK && s != NULL);
        segrt_tensor out;
        CHECK(segrt_window_session_run(NULL, &img, &out, NULL) == SEGRT_ERROR_INVALID_ARGUMENT);
        CHECK(segrt_window_session_run(s, NULL, &out, NULL) == SEGRT_ERROR_INVALID_ARGUMENT);
        CHECK(segrt_window_session_run(s, &img, NULL, NULL) == SEGRT_ERROR_INVALID_ARGUMENT);
        /* An image the engine was not built for (other channels), then a
         * good run. */
        float *z = random_image(2 * 48 * 32);
        segrt_tensor two = image_of(z, 1, 48, 32);
        two.dims[1] = 2;
        memset(&out, 0x55, sizeof out);
        CHECK(segrt_window_session_run(s, &two, &out, NULL) != SEGRT_OK);
        CHECK(out.data == NULL);
        CHECK(segrt_last_error()[0] != '\0');
        /* A device result needs contexts with a device path. */
        segrt_window_options *dev = NULL;
        segrt_window_session *ds = NULL;
        CHECK(segrt_window_options_create(2, roi, &dev) == SEGRT_OK);
        CHECK(segrt_window_options_set_result_memory(dev, SEGRT_MEMORY_DEVICE) == SEGRT_OK);
        CHECK(segrt_window_session_create(&r.ctx, 1, dev, &ds) == SEGRT_OK);
        CHECK(segrt_window_session_run(ds, &img, &out, NULL) == SEGRT_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(segrt_last_error(), "device result") != NULL);
        segrt_window_session_destroy(ds);
        segrt_window_options_destroy(dev);
        segrt_tensor res, want;
        CHECK_MSG(segrt_window_session_run(s, &img, &res, NULL) == SEGRT_OK, "%s", segrt_last_error());
        CHECK(segrt_window_run(&r.ctx, 1, o, &img, &want) == SEGRT_OK);
        CHECK(memcmp(res.data, want.data, (size_t)(2 * 48 * 32) * sizeof(float)) == 0);
        segrt_window_result_free(&res);
        segrt_window_result_free(&want);
        segrt_window_session_destroy(s);
        segrt_window_session_destroy(NULL);
        free(z);
        rig_free(&r);
    }
    segrt_window_options_destroy(o);
    free(x);
}

typedef struct progress_log {
    int calls;
    int64_t last_done, total;
    bool monotonic;
} progress_log;

static void log_progress(void *user, int64_t done, int64_t total)
{
    progress_log *l = user;
    if (l->calls && (done < l->last_done || total != l->total))
        l->monotonic = false;
    l->calls++;
    l->last_done = done;
    l->total = total;
}

/* The progress callback: once per batch of windows, from this thread,
 * counting up to the run's windows; results do not change with it. Auto
 * batch: 1 on the CPU; bad arguments are refused. A CPU context has no
 * stream. */
static void test_progress_and_auto_batch(void)
{
    float *x = random_image(2 * 70 * 53);
    segrt_tensor img = image_of(x, 2, 70, 53);
    int64_t roi[2] = {32, 32};
    segrt_window_options *o = NULL;
    CHECK(segrt_window_options_create(2, roi, &o) == SEGRT_OK);
    CHECK(segrt_window_options_set_batch(o, 3) == SEGRT_OK);
    rig r;
    if (rig_make(&r, o, &img)) {
        segrt_tensor plain, with;
        segrt_window_stats st;
        CHECK(segrt_window_run(&r.ctx, 1, o, &img, &plain) == SEGRT_OK);
        progress_log log = {0, 0, 0, true};
        CHECK(segrt_window_options_set_progress(o, log_progress, &log) == SEGRT_OK);
        CHECK_MSG(segrt_window_run_with_stats(&r.ctx, 1, o, &img, &with, &st) == SEGRT_OK, "%s", segrt_last_error());
        CHECK_MSG(log.calls == (int)((st.windows + 2) / 3), "%d calls for %lld windows", log.calls,
                  (long long)st.windows);
        CHECK(log.monotonic && log.total == st.windows && log.last_done == st.windows);
        size_t n = (size_t)(plain.dims[0] * plain.dims[1] * plain.dims[2] * plain.dims[3]);
        CHECK(memcmp(plain.data, with.data, n * sizeof(float)) == 0);
        segrt_window_result_free(&plain);
        segrt_window_result_free(&with);
        CHECK(segrt_window_options_set_progress(o, NULL, NULL) == SEGRT_OK);
        CHECK(segrt_window_options_set_progress(NULL, log_progress, &log) == SEGRT_ERROR_INVALID_ARGUMENT);

        int32_t b = 0;
        CHECK_MSG(segrt_window_auto_batch(o, &img, &r.engine, 1, &b) == SEGRT_OK, "%s", segrt_last_error());
        CHECK(b == 1);
        CHECK(segrt_window_auto_batch(o, &img, &r.engine, 0, &b) == SEGRT_ERROR_INVALID_ARGUMENT);
        CHECK(segrt_window_auto_batch(o, &img, NULL, 1, &b) == SEGRT_ERROR_INVALID_ARGUMENT);
        CHECK(segrt_window_auto_batch(o, NULL, &r.engine, 1, &b) == SEGRT_ERROR_INVALID_ARGUMENT);
        CHECK(segrt_window_auto_batch(NULL, &img, &r.engine, 1, &b) == SEGRT_ERROR_INVALID_ARGUMENT);
        segrt_tensor flat = img;
        flat.rank = 3;
        CHECK(segrt_window_auto_batch(o, &flat, &r.engine, 1, &b) == SEGRT_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(segrt_last_error(), "dims") || strstr(segrt_last_error(), "rank"));

        void *stream = (void *)1;
        CHECK(segrt_context_stream(r.ctx, &stream) == SEGRT_OK && stream == NULL);
        CHECK(segrt_context_stream(NULL, &stream) == SEGRT_ERROR_INVALID_ARGUMENT);
        CHECK(segrt_context_stream(r.ctx, NULL) == SEGRT_ERROR_INVALID_ARGUMENT);
        /* A CPU context has no stream to order. */
        CHECK(segrt_context_wait_stream(r.ctx, NULL) == SEGRT_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(segrt_last_error(), "no stream"));
        CHECK(segrt_context_wait_stream(NULL, NULL) == SEGRT_ERROR_INVALID_ARGUMENT);
        rig_free(&r);
    }
    segrt_window_options_destroy(o);
    free(x);
}

int main(void)
{
    test_one_window_is_the_engine();
    test_outputs_agree();
    test_session_repeats();
    test_session_errors();
    test_bad_arguments();
    test_progress_and_auto_batch();
    return sg_test_finish("test_window_api");
}
