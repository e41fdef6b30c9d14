/* The device window job over an image streamed from a file: a tall NPY
 * (float32, then uint8) opened as a region source and read through its row
 * reader (pipeline/sw_image.h), so that its rows go up into the device
 * ring as the windows reach them and the ring wraps many times; results
 * (logits, then labels, basicunet2d_tiny on CUDA at fp32) must be
 * bit-identical to the same job over the array in host memory, and the
 * job must have run on the device.
 *
 * usage: test_gpu_sw_stream [MODEL.onnx]   (default $SEGRT_MODELS/basicunet2d_tiny.onnx)
 * Exit 0: all matched; 1: a mismatch or a failed call; 77: skipped, no
 * CUDA device (ctest takes 77 as skipped); 2: the model is missing. */
#include "core/dtype.h"
#include "io/npy.h"
#include "io/source.h"
#include "pipeline/sliding_window.h"
#include "pipeline/sw_device.h"
#include "pipeline/sw_image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ROWS 400
#define COLS 64

static int failures;

#define EXPECT(cond, ...)                                                                                              \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "test_gpu_sw_stream: line %d: %s: ", __LINE__, #cond);                                     \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fprintf(stderr, "\n");                                                                                     \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

/* One job: the NPY at path (dtype) against its values as a float32 tensor. */
static void compare(const char *path, segrt_dtype dtype, const sg_sw_model *m, sg_sw_options *o)
{
    int64_t dims[4] = {1, 1, ROWS, COLS};
    sg_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dtype;
    t.rank = 4;
    memcpy(t.dims, dims, sizeof dims);
    t.data = malloc(sg_tensor_bytes(&t));
    float *whole = malloc(sizeof(float) * ROWS * COLS);
    uint32_t s = 99u;
    for (int64_t i = 0; i < ROWS * COLS; i++) {
        s = s * 1664525u + 1013904223u;
        double v = dtype == SEGRT_DTYPE_UINT8 ? (double)(s >> 24) : (double)(s >> 8) / 16777216.0 * 2.0 - 1.0;
        sg_dtype_store_f64(dtype, t.data, i, v);
        whole[i] = (float)sg_dtype_load_f64(dtype, t.data, i);
    }
    EXPECT(sg_npy_write(path, &t) == SEGRT_OK, "%s", segrt_last_error());
    free(t.data);
    sg_tensor img = {SEGRT_DTYPE_FLOAT32, 4, {1, 1, ROWS, COLS}, whole};
    sg_source *src = NULL;
    sg_sw_image im;
    memset(&im, 0, sizeof im);
    EXPECT(sg_source_open(path, &src) == SEGRT_OK && sg_sw_image_of_source(src, &im) == SEGRT_OK, "%s",
           segrt_last_error());
    for (int kind = 0; src && kind < 2; kind++) {
        o->output = kind == 0 ? SG_SW_OUTPUT_LOGITS : SG_SW_OUTPUT_LABELS;
        sg_tensor want, got;
        memset(&want, 0, sizeof want);
        memset(&got, 0, sizeof got);
        sg_status a = sg_sliding_window(m, 1, o, &img, &want);
        sg_status b = sg_sliding_window_image(m, 1, o, &im, &got);
        EXPECT(a == SEGRT_OK && b == SEGRT_OK, "%s", segrt_last_error());
        if (a == SEGRT_OK && b == SEGRT_OK) {
            size_t n = sg_tensor_bytes(&want);
            EXPECT(got.dtype == want.dtype && memcmp(got.dims, want.dims, sizeof got.dims) == 0, "%s: shapes", path);
            EXPECT(memcmp(got.data, want.data, n) == 0, "%s (%s): the streamed job's result differs", path,
                   kind ? "labels" : "logits");
        }
        free(want.data);
        free(got.data);
    }
    sg_sw_image_free(&im);
    sg_source_close(src);
    unlink(path);
    free(whole);
}

int main(int argc, char **argv)
{
    int32_t devices = 0;
    if (segrt_cuda_device_count(&devices) != SEGRT_OK || devices < 1) {
        printf("test_gpu_sw_stream: skipped: no CUDA device\n");
        return 77;
    }
    char model_path[4096];
    const char *dir = getenv("SEGRT_MODELS");
    if (argc > 1)
        snprintf(model_path, sizeof model_path, "%s", argv[1]);
    else
        snprintf(model_path, sizeof model_path, "%s/basicunet2d_tiny.onnx", dir ? dir : ".");
    if (access(model_path, R_OK) != 0) {
        fprintf(stderr, "test_gpu_sw_stream: no model at %s\n", model_path);
        return 2;
    }
    sg_sw_options o;
    sg_sw_options_default(&o, 2);
    o.roi[0] = o.roi[1] = 32;
    o.overlap[0] = o.overlap[1] = 0.5;
    o.sw_batch = 4;
    o.blend = SG_SW_BLEND_GAUSSIAN;
    int64_t in_dims[4] = {4, 1, 32, 32};
    segrt_model *model = NULL;
    segrt_build_options *b = NULL;
    segrt_engine *engine = NULL;
    segrt_context *ctx = NULL;
    if (segrt_model_load(model_path, &model) != SEGRT_OK || segrt_build_options_create(&b) != SEGRT_OK ||
        segrt_build_options_set_device(b, SEGRT_DEVICE_CUDA, 0) != SEGRT_OK ||
        segrt_build_options_set_precision(b, SEGRT_PRECISION_FP32) != SEGRT_OK ||
        segrt_build_options_set_shape(b, "image", 4, in_dims) != SEGRT_OK ||
        segrt_engine_build(model, b, &engine) != SEGRT_OK || segrt_context_create(engine, &ctx) != SEGRT_OK) {
        fprintf(stderr, "test_gpu_sw_stream: %s\n", segrt_last_error());
        return 1;
    }
    sg_sw_model m = {ctx, engine};
    EXPECT(sg_sw_device_capable(&m, 1), "the job would not run on the device");
    char path[] = "/tmp/segrt_sw_stream_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0)
        close(fd);
    compare(path, SEGRT_DTYPE_FLOAT32, &m, &o);
    compare(path, SEGRT_DTYPE_UINT8, &m, &o);
    segrt_context_destroy(ctx);
    segrt_engine_destroy(engine);
    segrt_build_options_destroy(b);
    segrt_model_destroy(model);
    printf("test_gpu_sw_stream: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
