/* The public C API: argument checks, ownership, per-thread errors, and a
 * whole run of basicunet2d_tiny against its reference pair. */
#include "backend/backend.h"
#include "backend/kernel_switches.h"
#include "engine/api_internal.h"
#include "io/npy.h"
#include "segrt.h"
#include "testlib.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static void test_null_arguments(void)
{
    segrt_model *m = NULL;
    CHECK(segrt_model_load(NULL, &m) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(segrt_last_error(), "NULL") != NULL);
    CHECK(segrt_model_load("x.onnx", NULL) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_model_input_count(NULL) == 0);
    segrt_model_destroy(NULL);
    segrt_engine_destroy(NULL);
    segrt_context_destroy(NULL);
    segrt_build_options_destroy(NULL);
    CHECK(segrt_model_load("/no/such/model.onnx", &m) == SEGRT_ERROR_IO);
    CHECK(m == NULL); /* outputs are written only on success */
    CHECK(strstr(segrt_last_error(), "/no/such/model.onnx") != NULL);
    segrt_build_options *o;
    CHECK(segrt_build_options_create(&o) == SEGRT_OK);
    int64_t dims[2] = {1, -1};
    CHECK(segrt_build_options_set_shape(o, "x", 2, dims) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_build_options_set_shape(o, "x", 9, dims) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_build_options_set_threads(o, -1) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_build_options_set_device(o, (segrt_device_kind)7, 0) == SEGRT_ERROR_INVALID_ARGUMENT);
    segrt_build_options_destroy(o);
    int32_t n = -1;
    CHECK(segrt_cuda_device_count(&n) == SEGRT_OK && n >= 0);
    segrt_device_info di;
    CHECK(segrt_cuda_device_info(n, &di) == SEGRT_ERROR_INVALID_ARGUMENT);
}

/* segrt_cuda_prepare: the first call with a device index starts the
 * thread (a device that does not exist included: the thread finds none),
 * later calls and negative indices do nothing, and callers of the device
 * API on several threads meanwhile wait for it and agree. */
static void *count_devices(void *arg)
{
    int32_t *n = arg;
    if (segrt_cuda_device_count(n) != SEGRT_OK)
        *n = -1;
    return NULL;
}

static void test_cuda_prepare(void)
{
    segrt_cuda_prepare(-1);
    segrt_cuda_prepare(4096);
    segrt_cuda_prepare(0);
    pthread_t t[4];
    int32_t n[4] = {-2, -2, -2, -2};
    for (int i = 0; i < 4; i++)
        CHECK(pthread_create(&t[i], NULL, count_devices, &n[i]) == 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    int32_t want = -1;
    CHECK(segrt_cuda_device_count(&want) == SEGRT_OK && want >= 0 && want < 4096);
    for (int i = 0; i < 4; i++)
        CHECK(n[i] == want);
    segrt_device_info di;
    CHECK(segrt_cuda_device_info(4096, &di) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(segrt_last_error(), "4096") != NULL);
}

/* The disabled-kernels option: names to bits and back in the switches'
 * order, spaces and empty names ignored, an unknown name refused with the
 * name and the valid ones, leaving the option as it was. */
static void test_disabled_kernels(void)
{
    segrt_build_options *o;
    CHECK(segrt_build_options_create(&o) == SEGRT_OK);
    CHECK(o->disabled_kernels == 0);
    CHECK(segrt_build_options_set_disabled_kernels(NULL, "wgmma") == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_build_options_set_disabled_kernels(o, " up-fold , wgmma,,graphs ") == SEGRT_OK);
    uint32_t want = SG_KERNEL_BIT(SG_KERNEL_UP_FOLD) | SG_KERNEL_BIT(SG_KERNEL_WGMMA) | SG_KERNEL_BIT(SG_KERNEL_GRAPHS);
    CHECK(o->disabled_kernels == want);
    char text[512];
    sg_disabled_kernels_text(o->disabled_kernels, text, sizeof text);
    CHECK_MSG(strcmp(text, "graphs,wgmma,up-fold") == 0, "%s", text);
    CHECK(segrt_build_options_set_disabled_kernels(o, "wgmma,up-folds") == SEGRT_ERROR_INVALID_ARGUMENT);
    const char *msg = segrt_last_error();
    CHECK_MSG(strstr(msg, "`up-folds`") && strstr(msg, "graphs,mma-conv,wgmma") && strstr(msg, "cudnn-plan-json"), "%s",
              msg);
    CHECK(o->disabled_kernels == want);
    /* Every name is accepted, and the text of all of them reads back to all. */
    sg_disabled_kernels_text(SG_KERNEL_ALL, text, sizeof text);
    CHECK(segrt_build_options_set_disabled_kernels(o, text) == SEGRT_OK && o->disabled_kernels == SG_KERNEL_ALL);
    CHECK(segrt_build_options_set_disabled_kernels(o, NULL) == SEGRT_OK && o->disabled_kernels == 0);
    CHECK(segrt_build_options_set_disabled_kernels(o, "") == SEGRT_OK && o->disabled_kernels == 0);
    sg_disabled_kernels_text(0, text, sizeof text);
    CHECK(text[0] == '\0');
    segrt_build_options_destroy(o);
}

/* --target-arch: the spellings of a compute capability, 7.5 to 12.x, and
 * clear refusals leaving the option as it was. */
static void test_target_arch(void)
{
    segrt_build_options *o;
    CHECK(segrt_build_options_create(&o) == SEGRT_OK);
    CHECK(o->target_cc == 0);
    static const struct {
        const char *text;
        int cc;
    } ok[] = {{"sm_80", 80}, {"80", 80}, {"8.6", 86}, {"sm_90a", 90}, {"sm_75", 75}, {"120", 120}, {"12.1", 121}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        CHECK_MSG(segrt_build_options_set_target_arch(o, ok[i].text) == SEGRT_OK, "%s: %s", ok[i].text,
                  segrt_last_error());
        CHECK_MSG(o->target_cc == ok[i].cc, "%s: %d", ok[i].text, o->target_cc);
    }
    static const char *const bad[] = {"sm_70", "7.0", "sm_",   "abc", "8.",  "sm_80x", "13.0",
                                      "8.10",  "-80", "sm_80 ", " 80", "+80", "8.-1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_MSG(segrt_build_options_set_target_arch(o, bad[i]) == SEGRT_ERROR_INVALID_ARGUMENT, "%s", bad[i]);
        CHECK_MSG(strstr(segrt_last_error(), bad[i]) && strstr(segrt_last_error(), "sm_75"), "%s",
                  segrt_last_error());
        CHECK(o->target_cc == 121);
    }
    CHECK(segrt_build_options_set_target_arch(o, NULL) == SEGRT_OK && o->target_cc == 0);
    CHECK(segrt_build_options_set_target_arch(o, "sm_80") == SEGRT_OK && o->target_cc == 80);
    CHECK(segrt_build_options_set_target_arch(o, "") == SEGRT_OK && o->target_cc == 0);
    CHECK(segrt_build_options_set_target_arch(NULL, "sm_80") == SEGRT_ERROR_INVALID_ARGUMENT);
    segrt_build_options_destroy(o);
}

/* Which of a fat binary's codes the CUDA runtime runs on a capability: the
 * same major's highest machine code at or below it (sm_XYa on X.Y only),
 * else the highest PTX at or below it, else none. */
static void test_cuda_code(void)
{
    const char *fat = "sm_75,sm_80,sm_86,sm_89,sm_90a,sm_100,sm_120,compute_120";
    const struct {
        const char *list;
        int cc, code;
        bool a;
    } cases[] = {
        {fat, 75, 75, false},  {fat, 80, 80, false},  {fat, 86, 86, false},   {fat, 87, 86, false},
        {fat, 89, 89, false},  {fat, 90, 90, true},   {fat, 100, 100, false}, {fat, 103, 100, false},
        {fat, 120, 120, false}, {fat, 121, 120, false}, {fat, 130, 120, false}, /* the PTX, compiled at load */
        {fat, 110, 0, false},  /* 11.x: no machine code of its major, PTX only for later GPUs */
        {"sm_90a", 90, 90, true}, {"sm_90a", 80, 0, false}, {"sm_90a", 100, 0, false},
        {"sm_90a,compute_90", 100, 90, false}, {"sm_80,compute_80", 90, 80, false}, {"sm_80", 86, 80, false},
        {"sm_86", 80, 0, false}, {"compute_80", 75, 0, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int code = -1;
        bool a = true;
        bool found = sg_cuda_code_in(cases[i].list, cases[i].cc, &code, &a);
        CHECK_MSG(found == (cases[i].code != 0) && code == cases[i].code && a == cases[i].a,
                  "%s on %d: %d%s (want %d%s)", cases[i].list, cases[i].cc, code, a ? "a" : "", cases[i].code,
                  cases[i].a ? "a" : "");
    }
}

static void *thread_error(void *arg)
{
    (void)arg;
    segrt_model *m;
    segrt_model_load("/thread/two.onnx", &m);
    return strstr(segrt_last_error(), "/thread/two.onnx") ? (void *)1 : NULL;
}

static void test_errors_are_per_thread(void)
{
    segrt_model *m;
    segrt_model_load("/thread/one.onnx", &m);
    pthread_t t;
    void *ok = NULL;
    CHECK(pthread_create(&t, NULL, thread_error, NULL) == 0);
    pthread_join(t, &ok);
    CHECK(ok != NULL);
    CHECK(strstr(segrt_last_error(), "/thread/one.onnx") != NULL);
}

static uint8_t *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static double rel_l2(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

static void test_tiny_model(void)
{
    size_t size = 0;
    uint8_t *bytes = read_file(sg_test_model("basicunet2d_tiny.onnx"), &size);
    CHECK_MSG(bytes != NULL, "cannot read %s", sg_test_model("basicunet2d_tiny.onnx"));
    if (!bytes)
        return;
    segrt_model *m = NULL;
    CHECK_MSG(segrt_model_load_from_memory(bytes, size, NULL, "tiny.onnx", &m) == SEGRT_OK, "%s",
              segrt_last_error());
    free(bytes); /* the model keeps no reference to the bytes */
    if (!m)
        return;
    CHECK(segrt_model_input_count(m) == 1 && segrt_model_output_count(m) == 1);
    segrt_tensor_desc in;
    CHECK(segrt_model_input(m, 0, &in) == SEGRT_OK);
    CHECK(strcmp(in.name, "image") == 0 && in.rank == 4 && in.dims[1] == 1 && in.dims[0] == -1);
    CHECK(in.dim_names[0] && strcmp(in.dim_names[0], "s77") == 0);
    CHECK(segrt_model_input(m, 1, &in) == SEGRT_ERROR_INVALID_ARGUMENT);
    segrt_model_meta meta;
    CHECK(segrt_model_metadata(m, &meta) == SEGRT_OK && meta.opset == 20 && meta.parameter_count > 0);
    double flops;
    CHECK(segrt_model_flops(m, &flops) == SEGRT_ERROR_SHAPE); /* shapes unbound */

    sg_tensor x, want;
    CHECK(sg_npy_read(sg_test_model("basicunet2d_tiny.in.npy"), &x) == SEGRT_OK);
    CHECK(sg_npy_read(sg_test_model("basicunet2d_tiny.out.npy"), &want) == SEGRT_OK);
    segrt_build_options *opts;
    segrt_build_options_create(&opts);
    segrt_build_options_set_shape(opts, "image", x.rank, x.dims);
    segrt_engine *e = NULL;
    CHECK_MSG(segrt_engine_build(m, opts, &e) == SEGRT_OK, "%s", segrt_last_error());
    segrt_build_options_destroy(opts);
    segrt_model_destroy(m); /* the engine outlives the model */
    if (!e) {
        free(x.data);
        free(want.data);
        return;
    }
    segrt_context *ctx;
    CHECK(segrt_context_create(e, &ctx) == SEGRT_OK);
    segrt_tensor input = {x.dtype, x.rank, {0}, x.data, SEGRT_MEMORY_HOST, 0};
    memcpy(input.dims, x.dims, sizeof input.dims);
    segrt_tensor out[2];
    memset(out, 0, sizeof out);
    CHECK(segrt_engine_output_shapes(e, 1, &input, 1, out) == SEGRT_OK);
    CHECK(out[0].rank == 4 && out[0].dims[1] == 2 && out[0].dtype == SEGRT_DTYPE_FLOAT32);
    size_t n = (size_t)(out[0].dims[0] * out[0].dims[1] * out[0].dims[2] * out[0].dims[3]);
    float *y1 = malloc(n * 4), *y2 = malloc(n * 4);
    out[0].data = y1;
    CHECK_MSG(segrt_context_run(ctx, 1, &input, 1, out) == SEGRT_OK, "%s", segrt_last_error());
    CHECK(rel_l2(y1, want.data, n) <= 1e-5);
    out[0].data = y2;
    CHECK(segrt_context_run(ctx, 1, &input, 1, out) == SEGRT_OK);
    CHECK(memcmp(y1, y2, n * 4) == 0); /* repeated runs are bit-identical */

    /* Wrong inputs are refused with the input named. */
    segrt_tensor bad = input;
    bad.dims[1] = 3;
    CHECK(segrt_context_run(ctx, 1, &bad, 1, out) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(segrt_last_error(), "image") != NULL);
    bad = input;
    bad.dtype = SEGRT_DTYPE_FLOAT64;
    CHECK(segrt_context_run(ctx, 1, &bad, 1, out) == SEGRT_ERROR_INVALID_ARGUMENT);
    bad = input;
    bad.memory = SEGRT_MEMORY_DEVICE;
    CHECK(segrt_context_run(ctx, 1, &bad, 1, out) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_context_run(ctx, 0, NULL, 1, out) == SEGRT_ERROR_INVALID_ARGUMENT);
    out[0].dims[2] = 1;
    CHECK(segrt_context_run(ctx, 1, &input, 1, out) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(segrt_last_error(), "logits") != NULL);

    segrt_context_destroy(ctx);
    segrt_engine_destroy(e);
    free(y1);
    free(y2);
    free(x.data);
    free(want.data);
}

int main(void)
{
    test_cuda_prepare(); /* first: before anything else brings CUDA up */
    test_null_arguments();
    test_errors_are_per_thread();
    test_disabled_kernels();
    test_target_arch();
    test_cuda_code();
    test_tiny_model();
    CHECK(strlen(segrt_version()) >= 5);
    return sg_test_finish("test_api");
}
