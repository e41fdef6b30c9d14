/* The accumulators' type (segrt_window_options_set_accumulator and
 * segrt_window_job_options.accumulator, issue 39 item 5): float32, float16
 * and bfloat16 are taken, any other type is refused with a message naming
 * it; and on the CPU, whose host path always sums in float32, the type
 * changes nothing: float16 and bfloat16 runs give float32's result bit for
 * bit, through segrt_window_run and through a window job. The CUDA
 * kernels' half-size sums are checked against float32 ones by
 * tests/gpu/test_gpu_sliding_window.py. */
#include "segrt.h"
#include "testlib.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const segrt_dtype TAKEN[] = {SEGRT_DTYPE_FLOAT32, SEGRT_DTYPE_FLOAT16, SEGRT_DTYPE_BFLOAT16};
static const segrt_dtype REFUSED[] = {SEGRT_DTYPE_UNDEFINED, SEGRT_DTYPE_UINT8, SEGRT_DTYPE_INT16,
                                      SEGRT_DTYPE_INT32,     SEGRT_DTYPE_FLOAT64, (segrt_dtype)8,
                                      (segrt_dtype)99,       (segrt_dtype)-1};

static void test_option_values(void)
{
    int64_t roi[2] = {32, 32};
    segrt_window_options *o = NULL;
    CHECK(segrt_window_options_create(2, roi, &o) == SEGRT_OK);
    for (size_t i = 0; i < sizeof TAKEN / sizeof *TAKEN; i++)
        CHECK_MSG(segrt_window_options_set_accumulator(o, TAKEN[i]) == SEGRT_OK, "dtype %d: %s", (int)TAKEN[i],
                  segrt_last_error());
    for (size_t i = 0; i < sizeof REFUSED / sizeof *REFUSED; i++) {
        CHECK_MSG(segrt_window_options_set_accumulator(o, REFUSED[i]) == SEGRT_ERROR_INVALID_ARGUMENT, "dtype %d",
                  (int)REFUSED[i]);
        const char *m = segrt_last_error();
        CHECK_MSG(strstr(m, "accumulator") != NULL && strchr(m, '\n') == NULL, "dtype %d: %s", (int)REFUSED[i], m);
    }
    CHECK(segrt_window_options_set_accumulator(NULL, SEGRT_DTYPE_FLOAT16) == SEGRT_ERROR_INVALID_ARGUMENT);
    segrt_window_options_destroy(o);
}

static segrt_tensor image_of(float *data, int64_t h, int64_t w)
{
    segrt_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = SEGRT_DTYPE_FLOAT32;
    t.rank = 4;
    t.dims[0] = 1;
    t.dims[1] = 1;
    t.dims[2] = h;
    t.dims[3] = w;
    t.data = data;
    t.memory = SEGRT_MEMORY_HOST;
    return t;
}

static size_t numel(const segrt_tensor *t)
{
    size_t n = 1;
    for (int d = 0; d < t->rank; d++)
        n *= (size_t)t->dims[d];
    return n;
}

/* Overlapping Gaussian-blended windows with mirroring, probabilities: the
 * same numbers whatever the accumulators' type, since the CPU ignores it. */
static void test_cpu_run_ignores_the_type(void)
{
    const int64_t h = 70, w = 53;
    float *x = malloc(sizeof(float) * (size_t)(h * w));
    uint32_t s = 2718u;
    for (int64_t i = 0; i < h * w; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 16777216.0f * 2.0f - 1.0f;
    }
    segrt_tensor img = image_of(x, h, w);
    int64_t roi[2] = {32, 32}, dims[SEGRT_MAX_RANK];
    double ov[2] = {0.5, 0.5};
    segrt_window_options *o = NULL;
    CHECK(segrt_window_options_create(2, roi, &o) == SEGRT_OK);
    CHECK(segrt_window_options_set_overlap(o, ov) == SEGRT_OK);
    CHECK(segrt_window_options_set_batch(o, 2) == SEGRT_OK);
    CHECK(segrt_window_options_set_blend(o, SEGRT_WINDOW_BLEND_GAUSSIAN, 0.125) == SEGRT_OK);
    CHECK(segrt_window_options_set_mirroring(o, 1u) == SEGRT_OK);
    CHECK(segrt_window_options_set_output(o, SEGRT_WINDOW_OUTPUT_PROBS, SEGRT_WINDOW_ACTIVATION_DEFAULT, 0.5f) ==
          SEGRT_OK);
    segrt_model *m = NULL;
    segrt_engine *e = NULL;
    segrt_context *ctx = NULL;
    segrt_build_options *b = NULL;
    bool ok = segrt_model_load(sg_test_model("basicunet2d_tiny.onnx"), &m) == SEGRT_OK &&
              segrt_window_input_dims(o, &img, dims) == SEGRT_OK && segrt_build_options_create(&b) == SEGRT_OK &&
              segrt_build_options_set_shape(b, "image", img.rank, dims) == SEGRT_OK &&
              segrt_engine_build(m, b, &e) == SEGRT_OK && segrt_context_create(e, &ctx) == SEGRT_OK;
    CHECK_MSG(ok, "%s", segrt_last_error());
    segrt_tensor want;
    memset(&want, 0, sizeof want);
    if (ok)
        CHECK_MSG(segrt_window_run(&ctx, 1, o, &img, &want) == SEGRT_OK, "%s", segrt_last_error());
    for (size_t i = 0; ok && want.data && i < sizeof TAKEN / sizeof *TAKEN; i++) {
        segrt_tensor got;
        memset(&got, 0, sizeof got);
        CHECK(segrt_window_options_set_accumulator(o, TAKEN[i]) == SEGRT_OK);
        CHECK_MSG(segrt_window_run(&ctx, 1, o, &img, &got) == SEGRT_OK, "%s", segrt_last_error());
        CHECK(got.data && got.dtype == want.dtype && got.rank == want.rank &&
              memcmp(got.dims, want.dims, sizeof got.dims) == 0);
        CHECK_MSG(got.data && memcmp(got.data, want.data, numel(&want) * sizeof(float)) == 0,
                  "dtype %d: another result on the CPU", (int)TAKEN[i]);
        segrt_window_result_free(&got);
    }
    segrt_window_result_free(&want);
    segrt_context_destroy(ctx);
    segrt_engine_destroy(e);
    segrt_build_options_destroy(b);
    segrt_model_destroy(m);
    segrt_window_options_destroy(o);
    free(x);
}

static bool same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        same = ca == cb;
        if (ca == EOF || cb == EOF)
            break;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return same;
}

/* A window job: job options take the same types (UNDEFINED: float32) and
 * refuse others before anything is written; on the CPU each type's result
 * file is float32's byte for byte. */
static void test_job_options(void)
{
    char model_path[512], image[512], dir[] = "/tmp/segrt-accXXXXXX", path[4][600] = {{0}};
    snprintf(model_path, sizeof model_path, "%s", sg_test_model("basicunet2d_tiny.onnx"));
    snprintf(image, sizeof image, "%s", sg_test_model("basicunet2d_tiny.in.npy"));
    const char *mp = model_path;
    CHECK(mkdtemp(dir) != NULL);
    segrt_model *m = NULL;
    CHECK_MSG(segrt_model_load(model_path, &m) == SEGRT_OK, "%s", segrt_last_error());
    segrt_window_job_options o;
    segrt_window_job_options_init(&o, 2);
    CHECK(o.accumulator == SEGRT_DTYPE_UNDEFINED);
    o.roi[0] = o.roi[1] = 64;
    o.overlap[0] = o.overlap[1] = 0.5;
    o.blend = SEGRT_WINDOW_BLEND_GAUSSIAN;
    o.output = SEGRT_WINDOW_OUTPUT_PROBS;
    const segrt_dtype types[4] = {SEGRT_DTYPE_UNDEFINED, SEGRT_DTYPE_FLOAT32, SEGRT_DTYPE_FLOAT16,
                                  SEGRT_DTYPE_BFLOAT16};
    for (int i = 0; i < 4 && m; i++) {
        snprintf(path[i], sizeof path[i], "%s/probs%d.npy", dir, i);
        segrt_output *out = NULL;
        CHECK(segrt_output_open(path[i], &out) == SEGRT_OK);
        o.accumulator = types[i];
        segrt_status s = segrt_window_job_run(&o, &m, &mp, 1, image, out, NULL, NULL);
        CHECK_MSG(s == SEGRT_OK, "dtype %d: %s", (int)types[i], segrt_last_error());
        if (s == SEGRT_OK)
            CHECK(segrt_output_commit(out) == SEGRT_OK);
        else
            segrt_output_discard(out);
        if (i > 0)
            CHECK_MSG(same_file(path[0], path[i]), "dtype %d: another result on the CPU", (int)types[i]);
    }
    char refused[600];
    snprintf(refused, sizeof refused, "%s/refused.npy", dir);
    for (size_t i = 1; i < sizeof REFUSED / sizeof *REFUSED && m; i++) { /* REFUSED[0], UNDEFINED, is float32 here */
        segrt_output *out = NULL;
        CHECK(segrt_output_open(refused, &out) == SEGRT_OK);
        o.accumulator = REFUSED[i];
        segrt_window_job_report r;
        CHECK_MSG(segrt_window_job_run(&o, &m, &mp, 1, image, out, NULL, &r) == SEGRT_ERROR_INVALID_ARGUMENT,
                  "dtype %d", (int)REFUSED[i]);
        CHECK_MSG(strstr(segrt_last_error(), "accumulator") != NULL, "%s", segrt_last_error());
        CHECK(!r.write_failed && r.windows == 0);
        segrt_output_discard(out);
        struct stat st;
        CHECK(stat(refused, &st) != 0);
    }
    segrt_model_destroy(m);
    for (int i = 0; i < 4; i++)
        if (path[i][0])
            unlink(path[i]);
    rmdir(dir);
}

int main(void)
{
    test_option_values();
    test_cpu_run_ignores_the_type();
    test_job_options();
    return sg_test_finish("test_window_accumulator");
}
