/* Sizes past what a kernel indexes are refused through the library's API
 * too, not only by the command line (issue 36, item 6), and under the
 * sanitizer build nothing on the way overflows: an engine for a window of
 * 2^31 rows or 16 GiB is UNSUPPORTED naming the input and the limit;
 * sliding-window geometry past 2^40 voxels and images whose dims overflow
 * are INVALID_ARGUMENT before anything is multiplied or allocated. Nothing
 * here allocates more than a 16x16 image. */
#include "segrt.h"
#include "testlib.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const char *model_path(void)
{
    const char *dir = getenv("SEGRT_MODELS");
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/basicunet2d_tiny.onnx", dir ? dir : "../shared/models");
    return buf;
}

static segrt_tensor image_of(float *data, int64_t n, int64_t c, int64_t h, int64_t w)
{
    segrt_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = SEGRT_DTYPE_FLOAT32;
    t.rank = 4;
    t.dims[0] = n;
    t.dims[1] = c;
    t.dims[2] = h;
    t.dims[3] = w;
    t.data = data;
    t.memory = SEGRT_MEMORY_HOST;
    return t;
}

/* The engine build for one input shape fails with `want`, its message
 * holding every word given. */
static void build_fails(segrt_model *m, int64_t h, int64_t w, segrt_status want, const char *w1, const char *w2)
{
    segrt_build_options *b = NULL;
    segrt_engine *e = NULL;
    int64_t dims[4] = {1, 1, h, w};
    CHECK(segrt_build_options_create(&b) == SEGRT_OK);
    CHECK(segrt_build_options_set_shape(b, "image", 4, dims) == SEGRT_OK);
    segrt_status s = segrt_engine_build(m, b, &e);
    const char *msg = segrt_last_error();
    CHECK_MSG(s == want, "%lldx%lld: %s: %s", (long long)h, (long long)w, segrt_status_name(s), msg);
    CHECK_MSG(strstr(msg, w1) && (!w2 || strstr(msg, w2)), "%lldx%lld: %s", (long long)h, (long long)w, msg);
    CHECK(!strchr(msg, '\n'));
    CHECK(e == NULL);
    segrt_engine_destroy(e);
    segrt_build_options_destroy(b);
}

static void test_engine_limits(segrt_model *m)
{
    /* A row count oneDNN's convolutions would hold in an int. */
    build_fails(m, (int64_t)1 << 31, 64, SEGRT_ERROR_UNSUPPORTED, "2^31", "`image`");
    build_fails(m, 64, (int64_t)1 << 32, SEGRT_ERROR_UNSUPPORTED, "2^31", "`image`");
    /* Each dim small, the tensor 16 GiB: over the 2 GiB a tensor may take. */
    build_fails(m, 65536, 65536, SEGRT_ERROR_UNSUPPORTED, "GiB", "32 bits");
    /* Past any dim segrt takes. */
    build_fails(m, (int64_t)1 << 41, 1, SEGRT_ERROR_INVALID_ARGUMENT, "image", NULL);
}

static void test_window_geometry(segrt_model *m)
{
    float *x = calloc(16 * 16, sizeof(float));
    segrt_tensor img = image_of(x, 1, 1, 16, 16);
    segrt_build_options *b = NULL;
    segrt_engine *e = NULL;
    segrt_context *ctx = NULL;
    int64_t dims[4] = {1, 1, 16, 16};
    bool ok = segrt_build_options_create(&b) == SEGRT_OK && segrt_build_options_set_shape(b, "image", 4, dims) == SEGRT_OK &&
              segrt_engine_build(m, b, &e) == SEGRT_OK && segrt_context_create(e, &ctx) == SEGRT_OK;
    CHECK_MSG(ok, "%s", segrt_last_error());
    /* Windows (or the image padded to them) past 2^40 voxels, each side or
     * together: refused before the engine's shapes are asked for. */
    const int64_t rois[][2] = {{(int64_t)1 << 30, (int64_t)1 << 30}, {(int64_t)1 << 40, 2},
                               {(int64_t)1 << 21, (int64_t)1 << 20}};
    for (size_t i = 0; ok && i < sizeof rois / sizeof rois[0]; i++) {
        segrt_window_options *o = NULL;
        CHECK(segrt_window_options_create(2, rois[i], &o) == SEGRT_OK);
        segrt_tensor out;
        segrt_status s = segrt_window_run(&ctx, 1, o, &img, &out);
        CHECK_MSG(s == SEGRT_ERROR_INVALID_ARGUMENT, "roi %lldx%lld: %s: %s", (long long)rois[i][0],
                  (long long)rois[i][1], segrt_status_name(s), segrt_last_error());
        CHECK_MSG(strstr(segrt_last_error(), "2^40") != NULL, "%s", segrt_last_error());
        segrt_window_options_destroy(o);
    }
    /* A side past 2^40 is refused as the options are made. */
    {
        const int64_t sides[][2] = {{(int64_t)1 << 41, 1}, {INT64_MAX, INT64_MAX}};
        for (size_t i = 0; i < 2; i++) {
            segrt_window_options *o = NULL;
            segrt_status s = segrt_window_options_create(2, sides[i], &o);
            CHECK_MSG(s == SEGRT_ERROR_INVALID_ARGUMENT && o == NULL && strstr(segrt_last_error(), "2^40"), "%s: %s",
                      segrt_status_name(s), segrt_last_error());
            segrt_window_options_destroy(o);
        }
    }
    /* nnU-Net's grid: a step count past any image (overlap near 1 over a
     * 2^40 axis: 1e22 steps) is refused, not converted from a double past
     * 2^63 (undefined). The image is described, never read: the grid
     * fails first. */
    {
        const int64_t roi[2] = {1, 1};
        const double overlap[2] = {0.9999999999, 0.9999999999};
        segrt_window_options *o = NULL;
        CHECK(segrt_window_options_create(2, roi, &o) == SEGRT_OK);
        CHECK(segrt_window_options_set_overlap(o, overlap) == SEGRT_OK);
        CHECK(segrt_window_options_set_grid(o, SEGRT_WINDOW_GRID_NNUNET) == SEGRT_OK);
        segrt_tensor big = image_of(x, 1, 1, (int64_t)1 << 40, 1), out;
        segrt_status s = segrt_window_run(&ctx, 1, o, &big, &out);
        CHECK_MSG(s == SEGRT_ERROR_INVALID_ARGUMENT && strstr(segrt_last_error(), "windows"), "%s: %s",
                  segrt_status_name(s), segrt_last_error());
        segrt_window_options_destroy(o);
    }
    /* Image dims whose product overflows: refused by the dims alone. */
    {
        const int64_t roi[2] = {4, 4};
        segrt_window_options *o = NULL;
        CHECK(segrt_window_options_create(2, roi, &o) == SEGRT_OK);
        int64_t in[4];
        segrt_tensor huge = image_of(NULL, (int64_t)1 << 31, (int64_t)1 << 31, (int64_t)1 << 31, (int64_t)1 << 31);
        segrt_status s = segrt_window_input_dims(o, &huge, in);
        CHECK_MSG(s == SEGRT_ERROR_INVALID_ARGUMENT && strstr(segrt_last_error(), "64-bit"), "%s: %s",
                  segrt_status_name(s), segrt_last_error());
        segrt_tensor out;
        s = segrt_window_run(&ctx, 1, o, &huge, &out);
        CHECK_MSG(s == SEGRT_ERROR_INVALID_ARGUMENT, "%s: %s", segrt_status_name(s), segrt_last_error());
        segrt_window_options_destroy(o);
    }
    segrt_context_destroy(ctx);
    segrt_engine_destroy(e);
    segrt_build_options_destroy(b);
    free(x);
}

int main(void)
{
    segrt_model *m = NULL;
    CHECK_MSG(segrt_model_load(model_path(), &m) == SEGRT_OK, "%s", segrt_last_error());
    if (m) {
        test_engine_limits(m);
        test_window_geometry(m);
    }
    segrt_model_destroy(m);
    return sg_test_finish("test_range_limits");
}
