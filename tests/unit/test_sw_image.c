/* The window job's image as a row reader (pipeline/sw_image.h): a reader
 * over a memory-mapped NPY (float32 and uint8, 2-D and 3-D) gives every
 * run of rows that the array holds, as float32, as the tensor's reader
 * does; a sliding-window job over the NPY's reader gives the tensor's job
 * bit for bit (basicunet2d_tiny on the CPU); rows outside the image are
 * refused. */
#include "core/dtype.h"
#include "io/npy.h"
#include "io/source.h"
#include "pipeline/sliding_window.h"
#include "pipeline/sw_image.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/segrt_test_sw_image_XXXXXX";

static const char *in_dir(const char *name)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

/* An array of dims in dtype with varied values, written to path; *whole
 * gets it as float32. */
static bool write_npy(const char *path, segrt_dtype dtype, int32_t rank, const int64_t *dims, float **whole)
{
    sg_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dtype;
    t.rank = rank;
    memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
    int64_t numel = 1;
    for (int32_t d = 0; d < rank; d++)
        numel *= dims[d];
    t.data = malloc(sg_tensor_bytes(&t));
    *whole = malloc(sizeof(float) * (size_t)numel);
    uint32_t s = 777u + (uint32_t)rank;
    for (int64_t i = 0; i < numel; i++) {
        s = s * 1664525u + 1013904223u;
        float v = dtype == SEGRT_DTYPE_UINT8 ? (float)(s >> 24) : (float)(s >> 8) / 16777216.0f * 2.0f - 1.0f;
        sg_dtype_store_f64(dtype, t.data, i, v);
        (*whole)[i] = (float)sg_dtype_load_f64(dtype, t.data, i);
    }
    sg_status st = sg_npy_write(path, &t);
    free(t.data);
    CHECK_MSG(st == SEGRT_OK, "%s", segrt_last_error());
    return st == SEGRT_OK;
}

/* Every run of rows [r0, r1) of the NPY's reader equals the same rows of
 * the tensor's reader over the whole array. */
static void test_rows_match(const char *name, segrt_dtype dtype, int32_t rank, const int64_t *dims)
{
    float *whole = NULL;
    if (!write_npy(in_dir(name), dtype, rank, dims, &whole)) {
        free(whole);
        return;
    }
    sg_source *src = NULL;
    sg_sw_image im, view;
    CHECK_MSG(sg_source_open(in_dir(name), &src) == SEGRT_OK, "%s", segrt_last_error());
    CHECK_MSG(src && sg_sw_image_of_source(src, &im) == SEGRT_OK, "%s", segrt_last_error());
    sg_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = SEGRT_DTYPE_FLOAT32;
    t.rank = rank;
    memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
    t.data = whole;
    sg_sw_image_of_tensor(&t, &view);
    CHECK(src && im.rank == rank && memcmp(im.dims, dims, sizeof(int64_t) * (size_t)rank) == 0 && !im.data);
    int64_t rows = dims[2], plane = sg_sw_image_row_numel(&view), C = dims[1];
    /* A gap between channels: the stride is the caller's. */
    int64_t stride = rows * plane + 3;
    float *a = malloc(sizeof(float) * (size_t)(C * stride)), *b = malloc(sizeof(float) * (size_t)(C * stride));
    bool same = true;
    for (int64_t r0 = 0; src && r0 <= rows; r0++)
        for (int64_t r1 = r0; r1 <= rows; r1++) {
            memset(a, 0, sizeof(float) * (size_t)(C * stride));
            memset(b, 0, sizeof(float) * (size_t)(C * stride));
            same = same && sg_sw_image_read(&im, 0, r0, r1, a, stride) == SEGRT_OK &&
                   sg_sw_image_read(&view, 0, r0, r1, b, stride) == SEGRT_OK &&
                   memcmp(a, b, sizeof(float) * (size_t)(C * stride)) == 0;
            /* Packed channels (the stride of the rows read): float32 NPYs
             * are read straight into the caller's buffer. */
            same = same && sg_sw_image_read(&im, 0, r0, r1, a, (r1 - r0) * plane) == SEGRT_OK &&
                   sg_sw_image_read(&view, 0, r0, r1, b, (r1 - r0) * plane) == SEGRT_OK &&
                   memcmp(a, b, sizeof(float) * (size_t)(C * (r1 - r0) * plane)) == 0;
        }
    CHECK_MSG(same, "%s: rows read through the source differ from the array's", name);
    if (src) {
        CHECK(sg_sw_image_read(&im, 0, 0, rows + 1, a, stride) == SEGRT_ERROR_INVALID_ARGUMENT);
        CHECK(sg_sw_image_read(&im, 1, 0, 1, a, stride) == SEGRT_ERROR_INVALID_ARGUMENT);
        CHECK(sg_sw_image_read(&im, 0, 2, 1, a, stride) == SEGRT_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(segrt_last_error(), "rows") != NULL);
    }
    free(a);
    free(b);
    sg_sw_image_free(&im);
    sg_sw_image_free(NULL);
    sg_source_close(src);
    free(whole);
}

/* The job over the NPY's reader equals the job over the array. */
static void test_job_over_source(void)
{
    int64_t dims[4] = {1, 1, 70, 53};
    float *whole = NULL;
    if (!write_npy(in_dir("job.npy"), SEGRT_DTYPE_FLOAT32, 4, dims, &whole)) {
        free(whole);
        return;
    }
    sg_sw_options o;
    sg_sw_options_default(&o, 2);
    o.roi[0] = o.roi[1] = 32;
    o.overlap[0] = 0.5;
    o.sw_batch = 3;
    o.blend = SG_SW_BLEND_GAUSSIAN;
    o.output = SG_SW_OUTPUT_PROBS;
    sg_tensor img;
    memset(&img, 0, sizeof img);
    img.dtype = SEGRT_DTYPE_FLOAT32;
    img.rank = 4;
    memcpy(img.dims, dims, sizeof dims);
    img.data = whole;
    int64_t in_dims[4];
    segrt_model *model = NULL;
    segrt_build_options *b = NULL;
    segrt_engine *engine = NULL;
    segrt_context *ctx = NULL;
    bool ok = segrt_model_load(sg_test_model("basicunet2d_tiny.onnx"), &model) == SEGRT_OK &&
              sg_sw_input_dims(&o, &img, in_dims) == SEGRT_OK && segrt_build_options_create(&b) == SEGRT_OK &&
              segrt_build_options_set_shape(b, "image", 4, in_dims) == SEGRT_OK &&
              segrt_engine_build(model, b, &engine) == SEGRT_OK && segrt_context_create(engine, &ctx) == SEGRT_OK;
    CHECK_MSG(ok, "%s", segrt_last_error());
    sg_source *src = NULL;
    sg_sw_image im;
    memset(&im, 0, sizeof im);
    if (ok && sg_source_open(in_dir("job.npy"), &src) == SEGRT_OK && sg_sw_image_of_source(src, &im) == SEGRT_OK) {
        sg_sw_model m = {ctx, engine};
        sg_tensor want, got;
        CHECK_MSG(sg_sliding_window(&m, 1, &o, &img, &want) == SEGRT_OK, "%s", segrt_last_error());
        CHECK_MSG(sg_sliding_window_image(&m, 1, &o, &im, &got) == SEGRT_OK, "%s", segrt_last_error());
        CHECK(got.dtype == want.dtype && got.rank == 4 && memcmp(got.dims, want.dims, sizeof got.dims) == 0);
        CHECK(got.data && memcmp(got.data, want.data, sg_tensor_bytes(&want)) == 0);
        free(want.data);
        free(got.data);
        /* The tensor's reader is the tensor. */
        sg_sw_image view;
        sg_sw_image_of_tensor(&img, &view);
        CHECK(sg_sliding_window_image(&m, 1, &o, &view, &got) == SEGRT_OK);
        CHECK(sg_sliding_window(&m, 1, &o, &img, &want) == SEGRT_OK);
        CHECK(memcmp(got.data, want.data, sg_tensor_bytes(&want)) == 0);
        free(want.data);
        free(got.data);
        /* Options that do not suit the image are refused before any read. */
        o.n_dims = 3;
        CHECK(sg_sliding_window_image(&m, 1, &o, &im, &got) == SEGRT_ERROR_INVALID_ARGUMENT && got.data == NULL);
    } else {
        CHECK_MSG(!ok, "%s", segrt_last_error());
    }
    sg_sw_image_free(&im);
    sg_source_close(src);
    segrt_context_destroy(ctx);
    segrt_engine_destroy(engine);
    segrt_build_options_destroy(b);
    segrt_model_destroy(model);
    free(whole);
}

/* sg_sw_host_need_streamed: the image's part becomes what the source
 * holds; the rest is unchanged, and the limit is judged on that. */
static void test_streamed_need(void)
{
    sg_sw_options o;
    sg_sw_options_default(&o, 2);
    o.roi[0] = o.roi[1] = 64;
    o.output = SG_SW_OUTPUT_LABELS;
    int64_t dims[4] = {1, 1, 4096, 4096}; /* 64 MiB of float32 */
    uint64_t image = (uint64_t)4096 * 4096 * 4, tile = (uint64_t)4096 * 4;
    sg_sw_host_need dev, streamed, host;
    CHECK(sg_sw_host_need_of(&o, dims, 3, true, 0, 0, &dev) == SEGRT_OK);
    CHECK(sg_sw_host_need_of(&o, dims, 3, false, 0, 0, &host) == SEGRT_OK);
    CHECK(dev.image == image && host.image == image);
    streamed = dev;
    sg_sw_host_need_streamed(&streamed, tile);
    CHECK(streamed.image == tile && streamed.total == dev.total - image + tile);
    CHECK(streamed.windows == dev.windows && streamed.result == dev.result && streamed.accumulators == 0);
    CHECK(streamed.total < image); /* pinned staging and the uint8 labels: well under the image */
    /* A limit below the image: the streamed device job passes it; the
     * device job holding the image, and the host path, do not. */
    o.max_host_memory = (size_t)(image - 1);
    CHECK_MSG(sg_sw_host_need_check(&o, &streamed, 0, "--limit") == SEGRT_OK, "%s", segrt_last_error());
    CHECK(sg_sw_host_need_check(&o, &dev, 0, "--limit") == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(segrt_last_error(), "--limit") != NULL && strstr(segrt_last_error(), "image 64.0 MiB") != NULL);
    CHECK(sg_sw_host_need_check(&o, &host, 0, "--limit") == SEGRT_ERROR_INVALID_ARGUMENT);
    /* Below even the staging: refused, naming the image's part as held. */
    o.max_host_memory = (size_t)(streamed.total - 1);
    CHECK(sg_sw_host_need_check(&o, &streamed, 0, "--limit") == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(segrt_last_error(), "image 16 KiB") != NULL);
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    test_rows_match("f32-2d.npy", SEGRT_DTYPE_FLOAT32, 4, (const int64_t[]){1, 3, 9, 7});
    test_rows_match("u8-2d.npy", SEGRT_DTYPE_UINT8, 4, (const int64_t[]){1, 2, 11, 5});
    test_rows_match("f32-3d.npy", SEGRT_DTYPE_FLOAT32, 5, (const int64_t[]){1, 2, 6, 5, 4});
    test_rows_match("u8-3d.npy", SEGRT_DTYPE_UINT8, 5, (const int64_t[]){1, 1, 7, 3, 5});
    test_job_over_source();
    test_streamed_need();
    const char *names[] = {"f32-2d.npy", "u8-2d.npy", "f32-3d.npy", "u8-3d.npy", "job.npy"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unlink(in_dir(names[i]));
    rmdir(dir);
    return sg_test_finish("test_sw_image");
}
