/* The public API a client of files needs (segrt.h): output files, file
 * identities, NPY arrays and images probed, loaded and saved, compare,
 * profiles, an engine's FLOPs and the sliding-window file job, each with
 * its refusals, on basicunet2d_tiny where a model is needed. */
#include "segrt.h"
#include "testlib.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static const char *in_dir(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static segrt_tensor host_tensor(segrt_dtype dtype, int32_t rank, const int64_t *dims, void *data)
{
    segrt_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dtype;
    t.rank = rank;
    memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
    t.data = data;
    t.memory = SEGRT_MEMORY_HOST;
    return t;
}

static void test_outputs(void)
{
    const char *p = in_dir("out.bin");
    segrt_output *o = NULL;
    CHECK(segrt_output_check(NULL) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_output_open(p, NULL) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_output_commit(NULL) == SEGRT_ERROR_INVALID_ARGUMENT);
    segrt_output_discard(NULL);
    CHECK(segrt_output_check("/no/such/folder/x.npy") == SEGRT_ERROR_IO);
    CHECK(strstr(segrt_last_error(), "/no/such/folder/x.npy") != NULL);
    CHECK(segrt_output_check(dir) == SEGRT_ERROR_INVALID_ARGUMENT); /* a folder is not a file */
    CHECK(segrt_output_check(p) == SEGRT_OK);
    CHECK(!exists(p)); /* the check creates nothing */
    /* Discarded: nothing is left. */
    CHECK(segrt_output_open(p, &o) == SEGRT_OK && o);
    CHECK(strcmp(segrt_output_path(o), p) == 0);
    segrt_output_discard(o);
    CHECK(!exists(p));
    /* An array written into an output appears only at commit. */
    float v[3] = {1, 2, 3};
    int64_t d[1] = {3};
    segrt_tensor t = host_tensor(SEGRT_DTYPE_FLOAT32, 1, d, v);
    CHECK(segrt_output_open(p, &o) == SEGRT_OK);
    CHECK(segrt_array_write(o, &t) == SEGRT_OK);
    CHECK(!exists(p));
    CHECK(segrt_output_commit(o) == SEGRT_OK);
    CHECK(exists(p));
    CHECK(segrt_array_write(NULL, &t) == SEGRT_ERROR_INVALID_ARGUMENT);
}

static void test_identities(void)
{
    segrt_file_id a, b, c;
    const char *p = in_dir("id.npy");
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    if (f)
        fclose(f);
    char other[600];
    snprintf(other, sizeof other, "%s/./id.npy", dir);
    CHECK(segrt_file_identity(p, &a) == SEGRT_OK && a.exists);
    CHECK(segrt_file_identity(other, &b) == SEGRT_OK);
    CHECK(segrt_file_id_equal(&a, &b));
    CHECK(segrt_file_identity(in_dir("not-there.npy"), &c) == SEGRT_OK && !c.exists);
    CHECK(!segrt_file_id_equal(&a, &c));
    CHECK(strcmp(c.name, "not-there.npy") == 0);
    /* A name that does not exist yet equals itself however spelled. */
    snprintf(other, sizeof other, "%s/./not-there.npy", dir);
    CHECK(segrt_file_identity(other, &b) == SEGRT_OK && segrt_file_id_equal(&b, &c));
    CHECK(segrt_file_identity("/no/such/folder/x", &c) == SEGRT_ERROR_IO);
    CHECK(segrt_file_identity(NULL, &c) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(!segrt_file_id_equal(NULL, &a));
}

static void test_arrays(void)
{
    int16_t v[6] = {1, -2, 3, -4, 5, -6};
    int64_t d[2] = {2, 3};
    segrt_tensor t = host_tensor(SEGRT_DTYPE_INT16, 2, d, v), u, w;
    const char *p = in_dir("a.npy");
    CHECK(segrt_array_save(p, &t) == SEGRT_OK);
    CHECK(segrt_array_probe(p, &u) == SEGRT_OK);
    CHECK(u.dtype == SEGRT_DTYPE_INT16 && u.rank == 2 && u.dims[0] == 2 && u.dims[1] == 3 && !u.data);
    CHECK(segrt_array_load(p, &w) == SEGRT_OK);
    CHECK(w.memory == SEGRT_MEMORY_HOST && w.data && memcmp(w.data, v, sizeof v) == 0);
    segrt_tensor_free(&w);
    CHECK(w.data == NULL);
    segrt_tensor_free(&w); /* again: a no-op */
    segrt_tensor_free(NULL);
    CHECK(segrt_file_format_of_name(p) == SEGRT_FILE_NPY);
    CHECK(segrt_file_format_of_file(p) == SEGRT_FILE_NPY);
    /* Refusals. */
    CHECK(segrt_array_load(in_dir("missing.npy"), &w) == SEGRT_ERROR_IO);
    CHECK(strstr(segrt_last_error(), "missing.npy") != NULL);
    /* The format probes leave the thread's error as it was. */
    CHECK(segrt_file_format_of_file(in_dir("missing.npy")) == SEGRT_FILE_UNKNOWN);
    CHECK(strstr(segrt_last_error(), "missing.npy") != NULL);
    const char *bad = in_dir("bad.npy");
    FILE *f = fopen(bad, "w");
    if (f) {
        fputs("\x93NUMPY garbage", f);
        fclose(f);
    }
    /* " g" read as format version 32 */
    CHECK_MSG(segrt_array_probe(bad, &u) == SEGRT_ERROR_UNSUPPORTED, "%s", segrt_last_error());
    CHECK(strstr(segrt_last_error(), "bad.npy") != NULL);
    CHECK(segrt_array_load(NULL, &w) == SEGRT_ERROR_INVALID_ARGUMENT);
    segrt_tensor dev = t;
    dev.memory = SEGRT_MEMORY_DEVICE;
    CHECK(segrt_array_save(p, &dev) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_array_save(dir, &t) == SEGRT_ERROR_INVALID_ARGUMENT); /* a folder */
}

static void test_images(void)
{
    uint8_t rgb[4 * 5 * 3];
    for (size_t i = 0; i < sizeof rgb; i++)
        rgb[i] = (uint8_t)(i * 7);
    int64_t d3[3] = {4, 5, 3};
    segrt_tensor t = host_tensor(SEGRT_DTYPE_UINT8, 3, d3, rgb), u;
    const char *png = in_dir("i.png");
    CHECK(segrt_image_save(png, &t) == SEGRT_OK);
    segrt_image_info info;
    CHECK(segrt_image_probe(png, &info) == SEGRT_OK);
    CHECK(info.format == SEGRT_FILE_PNG && info.width == 5 && info.height == 4 && info.depth == 1 &&
          info.channels == 3 && info.bits == 8 && info.pixel_bytes == sizeof rgb);
    CHECK(segrt_image_load(png, &u) == SEGRT_OK);
    CHECK(u.dtype == SEGRT_DTYPE_UINT8 && u.rank == 3 && u.dims[0] == 4 && u.dims[1] == 5 && u.dims[2] == 3);
    CHECK(u.data && memcmp(u.data, rgb, sizeof rgb) == 0);
    segrt_tensor_free(&u);
    CHECK(segrt_file_format_of_file(png) == SEGRT_FILE_PNG);
    CHECK(segrt_file_format_of_name("x.JPEG") == SEGRT_FILE_JPEG);
    CHECK(segrt_file_format_of_name("x.tif") == SEGRT_FILE_TIFF);
    CHECK(segrt_file_format_of_name("x.txt") == SEGRT_FILE_UNKNOWN);
    CHECK(segrt_file_format_of_name(NULL) == SEGRT_FILE_UNKNOWN);
    /* 16-bit grey pages as a TIFF. */
    uint16_t grey[2 * 3 * 4];
    for (size_t i = 0; i < sizeof grey / 2; i++)
        grey[i] = (uint16_t)(i * 1000);
    int64_t d4[4] = {2, 3, 4, 1};
    segrt_tensor g = host_tensor(SEGRT_DTYPE_UINT16, 4, d4, grey);
    const char *tif = in_dir("g.tif");
    CHECK(segrt_image_save(tif, &g) == SEGRT_OK);
    CHECK(segrt_image_load(tif, &u) == SEGRT_OK);
    CHECK(u.dtype == SEGRT_DTYPE_UINT16 && u.rank == 4 && u.dims[0] == 2 && u.dims[1] == 3 && u.dims[2] == 4 &&
          u.dims[3] == 1);
    CHECK(u.data && memcmp(u.data, grey, sizeof grey) == 0);
    segrt_tensor_free(&u);
    /* Refusals. */
    CHECK(segrt_image_save(in_dir("i.jpg"), &t) == SEGRT_ERROR_UNSUPPORTED);
    CHECK(segrt_image_save(in_dir("i.bmp"), &t) == SEGRT_ERROR_INVALID_ARGUMENT);
    float f[4] = {0};
    int64_t d2[2] = {2, 2};
    segrt_tensor ft = host_tensor(SEGRT_DTYPE_FLOAT32, 2, d2, f);
    CHECK(segrt_image_save(png, &ft) == SEGRT_ERROR_INVALID_ARGUMENT);
    int64_t d1[1] = {4};
    segrt_tensor r1 = host_tensor(SEGRT_DTYPE_UINT8, 1, d1, rgb);
    CHECK(segrt_image_save(png, &r1) == SEGRT_ERROR_INVALID_ARGUMENT);
    int64_t d5[3] = {2, 2, 5};
    segrt_tensor c5 = host_tensor(SEGRT_DTYPE_UINT8, 3, d5, rgb);
    CHECK(segrt_image_save(png, &c5) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_image_probe(in_dir("a.npy"), &info) == SEGRT_ERROR_UNSUPPORTED); /* not an image */
    CHECK(segrt_image_load(NULL, &u) == SEGRT_ERROR_INVALID_ARGUMENT);
}

static void test_compare(void)
{
    float a[6] = {0, 1, 2, 3, 4, 5}, b[6] = {0, 1, 2, 3, 4, 6};
    int64_t d[2] = {2, 3}, d2[2] = {3, 2};
    segrt_tensor ta = host_tensor(SEGRT_DTYPE_FLOAT32, 2, d, a), tb = host_tensor(SEGRT_DTYPE_FLOAT32, 2, d, b);
    segrt_compare_stats st;
    CHECK(segrt_compare(&ta, &ta, &st) == SEGRT_OK && st.count == 6 && st.max_abs == 0 && isinf(st.psnr_db));
    CHECK(segrt_compare(&ta, &tb, &st) == SEGRT_OK && st.max_abs == 1 && fabs(st.mae - 1.0 / 6) < 1e-12 &&
          st.range == 6);
    /* Classes along axis 1: rows [0 1 2] and [3 4 5] vs [3 4 6] agree (argmax 2). */
    segrt_class_stats cs;
    CHECK(segrt_compare_classes(&ta, &tb, -1, &cs) == SEGRT_OK);
    CHECK(cs.axis == 1 && cs.n_classes == 3 && cs.positions == 2 && cs.agree == 2 && cs.argmax_agreement == 1);
    CHECK(cs.dice && cs.dice[2] == 1 && cs.count_a[2] == 2 && cs.n_present == 1);
    segrt_class_stats_free(&cs);
    CHECK(cs.dice == NULL && cs.inter == NULL);
    segrt_class_stats_free(NULL);
    /* Refusals. */
    segrt_tensor tc = host_tensor(SEGRT_DTYPE_FLOAT32, 2, d2, b);
    CHECK(segrt_compare(&ta, &tc, &st) == SEGRT_ERROR_SHAPE);
    CHECK(strstr(segrt_last_error(), "2x3") != NULL);
    CHECK(segrt_compare(NULL, &tb, &st) == SEGRT_ERROR_INVALID_ARGUMENT);
    segrt_tensor dev = ta;
    dev.memory = SEGRT_MEMORY_DEVICE;
    CHECK(segrt_compare(&dev, &tb, &st) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_compare_classes(&ta, &tb, 2, &cs) == SEGRT_ERROR_INVALID_ARGUMENT);
}

/* basicunet2d_tiny built for one of its 2 x 1 x 96 x 128 images. */
static bool tiny_engine(segrt_model **m, segrt_engine **e, segrt_context **c)
{
    segrt_build_options *b = NULL;
    int64_t dims[4] = {1, 1, 96, 128};
    bool ok = segrt_model_load(sg_test_model("basicunet2d_tiny.onnx"), m) == SEGRT_OK &&
              segrt_build_options_create(&b) == SEGRT_OK &&
              segrt_build_options_set_shape(b, "image", 4, dims) == SEGRT_OK &&
              segrt_engine_build(*m, b, e) == SEGRT_OK && segrt_context_create(*e, c) == SEGRT_OK;
    CHECK_MSG(ok, "%s", segrt_last_error());
    segrt_build_options_destroy(b);
    return ok;
}

static void test_profile_and_flops(void)
{
    segrt_model *m = NULL;
    segrt_engine *e = NULL;
    segrt_context *c = NULL;
    if (!tiny_engine(&m, &e, &c))
        return;
    static float x[96 * 128], y[2 * 96 * 128];
    int64_t dx[4] = {1, 1, 96, 128}, dy[4] = {1, 2, 96, 128};
    segrt_tensor in = host_tensor(SEGRT_DTYPE_FLOAT32, 4, dx, x), out = host_tensor(SEGRT_DTYPE_FLOAT32, 4, dy, y);
    CHECK(segrt_context_profile(c, 1) == SEGRT_OK);
    CHECK(segrt_context_run(c, 1, &in, 1, &out) == SEGRT_OK);
    size_t needed = 0;
    CHECK(segrt_context_profile_text(c, NULL, 0, &needed) == SEGRT_OK && needed > 0);
    char *text = malloc(needed + 1);
    size_t again = 0;
    CHECK(text && segrt_context_profile_text(c, text, needed + 1, &again) == SEGRT_OK && again == needed);
    CHECK_MSG(text && strlen(text) == needed && strstr(text, "ms/run") != NULL && strstr(text, "node_conv") != NULL, "%s", text ? text : "");
    char small[8];
    CHECK(segrt_context_profile_text(c, small, sizeof small, NULL) == SEGRT_OK && strlen(small) == 7);
    CHECK(text && strncmp(small, text, 7) == 0);
    FILE *f = tmpfile();
    CHECK(f && segrt_context_profile_print(c, f) == SEGRT_OK && ftell(f) == (long)needed);
    if (f)
        fclose(f);
    free(text);
    CHECK(segrt_context_profile(c, 0) == SEGRT_OK);
    CHECK(segrt_context_profile(NULL, 1) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_context_profile_print(c, NULL) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_context_profile_text(c, NULL, 4, NULL) == SEGRT_ERROR_INVALID_ARGUMENT);
    /* The engine's FLOPs equal the model's at the same dims. */
    double fe = 0, fm = -1;
    segrt_build_options *b = NULL;
    segrt_model *opt = NULL;
    CHECK(segrt_engine_flops(e, 1, &in, &fe) == SEGRT_OK && fe > 0);
    CHECK(segrt_build_options_create(&b) == SEGRT_OK && segrt_build_options_set_shape(b, "image", 4, dx) == SEGRT_OK &&
          segrt_model_optimize(m, b, &opt) == SEGRT_OK && segrt_model_flops(opt, &fm) == SEGRT_OK);
    CHECK(fe == fm);
    CHECK(segrt_engine_flops(e, 2, &in, &fe) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_engine_flops(NULL, 1, &in, &fe) == SEGRT_ERROR_INVALID_ARGUMENT);
    segrt_model_destroy(opt);
    segrt_build_options_destroy(b);
    segrt_context_destroy(c);
    segrt_engine_destroy(e);
    segrt_model_destroy(m);
}

/* Progress calls seen: the first and last done, and how many. */
typedef struct seen {
    int64_t first, last, total;
    int calls;
} seen;

static void record_progress(void *user, int64_t done, int64_t total)
{
    seen *p = user;
    if (p->calls++ == 0)
        p->first = done;
    p->last = done;
    p->total = total;
}

/* A job over the tiny model's own input, one window as large as the
 * image: the logits are its reference output within float rounding. */
static void test_window_job_npy(void)
{
    /* sg_test_model's string is static: each path is kept in its own. */
    char model_path_buf[512], image[512], reference[512];
    snprintf(model_path_buf, sizeof model_path_buf, "%s", sg_test_model("basicunet2d_tiny.onnx"));
    snprintf(image, sizeof image, "%s", sg_test_model("basicunet2d_tiny.in.npy"));
    snprintf(reference, sizeof reference, "%s", sg_test_model("basicunet2d_tiny.out.npy"));
    const char *model_path = model_path_buf;
    segrt_model *m = NULL;
    CHECK(segrt_model_load(model_path, &m) == SEGRT_OK);
    segrt_tensor shape;
    uint64_t extra = 1;
    CHECK(segrt_window_job_probe(image, &shape, &extra) == SEGRT_OK);
    CHECK(shape.rank == 4 && shape.dims[0] == 2 && shape.dims[3] == 128 && extra == 0 && !shape.data);
    segrt_window_job_options o;
    segrt_window_job_options_init(&o, 2);
    CHECK(o.batch == 1 && o.overlap[0] == 0.25 && o.sigma_scale == 0.125 && o.threshold == 0.5f && !o.build);
    o.roi[0] = 96;
    o.roi[1] = 128;
    const char *out_path = in_dir("logits.npy");
    segrt_output *out = NULL;
    segrt_window_job_report r;
    CHECK(segrt_output_open(out_path, &out) == SEGRT_OK);
    seen progress = {-1, -1, -1, 0};
    o.progress = record_progress;
    o.progress_user = &progress;
    segrt_status s = segrt_window_job_run(&o, &m, &model_path, 1, image, out, NULL, &r);
    CHECK_MSG(s == SEGRT_OK, "%s", segrt_last_error());
    CHECK(segrt_output_commit(out) == SEGRT_OK);
    CHECK(progress.calls >= 2 && progress.first == 0 && progress.last == 2 && progress.total == 2);
    o.progress = NULL;
    CHECK(r.windows == 2 && r.batch == 1 && !r.stats.on_device && !r.write_failed);
    CHECK(r.result.dtype == SEGRT_DTYPE_FLOAT32 && r.result.rank == 4 && r.result.dims[1] == 2);
    /* Where the time went: the windows' are the report's seconds, engines
     * were built, the result written; nothing was preprocessed. */
    CHECK(r.parts.windows == r.seconds && r.parts.build > 0 && r.parts.write > 0 && r.parts.read >= 0);
    CHECK(r.parts.prep == 0 && r.parts.back == 0);
    segrt_tensor got, want;
    segrt_compare_stats st;
    CHECK(segrt_array_load(out_path, &got) == SEGRT_OK);
    CHECK(segrt_array_load(reference, &want) == SEGRT_OK);
    CHECK(segrt_compare(&got, &want, &st) == SEGRT_OK && st.max_abs < 1e-3);
    segrt_tensor_free(&got);
    segrt_tensor_free(&want);
    /* Refusals, each before anything is written. */
    CHECK(segrt_output_open(in_dir("labels.png"), &out) == SEGRT_OK);
    CHECK(segrt_window_job_run(&o, &m, NULL, 1, image, out, NULL, &r) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(segrt_last_error(), "label map") != NULL && !r.write_failed);
    o.output = SEGRT_WINDOW_OUTPUT_LABELS;
    CHECK(segrt_window_job_run(&o, &m, NULL, 1, image, out, NULL, &r) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(segrt_last_error(), "one image") != NULL); /* 2 images, one label picture */
    segrt_output_discard(out);
    CHECK(segrt_output_open(in_dir("x.npy"), &out) == SEGRT_OK);
    segrt_window_job_options bad = o;
    bad.spatial_dims = 3;
    CHECK(segrt_window_job_run(&bad, &m, NULL, 1, image, out, NULL, &r) == SEGRT_ERROR_INVALID_ARGUMENT);
    bad = o;
    bad.overlap[1] = 1.0;
    CHECK(segrt_window_job_run(&bad, &m, NULL, 1, image, out, NULL, &r) == SEGRT_ERROR_INVALID_ARGUMENT);
    bad = o;
    bad.spatial_dims = 0;
    CHECK(segrt_window_job_run(&bad, &m, NULL, 1, image, out, NULL, &r) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_window_job_run(&o, &m, NULL, 0, image, out, NULL, &r) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_window_job_run(&o, &m, NULL, 1, NULL, out, NULL, &r) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(segrt_window_job_run(&o, &m, NULL, 1, in_dir("missing.npy"), out, NULL, &r) == SEGRT_ERROR_IO);
    o.max_host_memory = 1024; /* far below the image */
    o.max_host_memory_name = "--the-limit";
    CHECK(segrt_window_job_run(&o, &m, NULL, 1, image, out, NULL, &r) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(segrt_last_error(), "--the-limit") != NULL);
    CHECK(segrt_window_job_probe(NULL, &shape, NULL) == SEGRT_ERROR_INVALID_ARGUMENT);
    segrt_output_discard(out);
    segrt_model_destroy(m);
}

/* A grey picture in, labels and an overlay out, through a builder. */
static int builds;

static segrt_status count_builds(void *user, const segrt_model *model, const char *input, int32_t rank,
                                 const int64_t *dims, segrt_engine **out)
{
    (void)user;
    builds++;
    segrt_build_options *b = NULL;
    segrt_status s = segrt_build_options_create(&b);
    if (s == SEGRT_OK)
        s = segrt_build_options_set_shape(b, input, rank, dims);
    if (s == SEGRT_OK)
        s = segrt_engine_build(model, b, out);
    segrt_build_options_destroy(b);
    return s;
}

static void test_window_job_picture(void)
{
    const char *model_path = sg_test_model("basicunet2d_tiny.onnx");
    segrt_model *m = NULL;
    CHECK(segrt_model_load(model_path, &m) == SEGRT_OK);
    static uint8_t px[96 * 128];
    for (int i = 0; i < 96 * 128; i++)
        px[i] = (uint8_t)((i % 128) * 2);
    int64_t d[2] = {96, 128};
    segrt_tensor t = host_tensor(SEGRT_DTYPE_UINT8, 2, d, px);
    const char *png = in_dir("grey.png");
    CHECK(segrt_image_save(png, &t) == SEGRT_OK);
    segrt_tensor shape;
    uint64_t extra = 0;
    CHECK(segrt_window_job_probe(png, &shape, &extra) == SEGRT_OK);
    CHECK(shape.dtype == SEGRT_DTYPE_FLOAT32 && shape.rank == 4 && shape.dims[0] == 1 && shape.dims[1] == 1 &&
          shape.dims[2] == 96 && shape.dims[3] == 128 && extra >= sizeof px);
    segrt_window_job_options o;
    segrt_window_job_options_init(&o, 2);
    o.roi[0] = 64;
    o.roi[1] = 64;
    o.output = SEGRT_WINDOW_OUTPUT_LABELS;
    o.build = count_builds;
    segrt_output *labels = NULL, *overlay = NULL;
    CHECK(segrt_output_open(in_dir("labels.png"), &labels) == SEGRT_OK);
    CHECK(segrt_output_open(in_dir("overlay.png"), &overlay) == SEGRT_OK);
    segrt_window_job_report r;
    segrt_status s = segrt_window_job_run(&o, &m, NULL, 1, png, labels, overlay, &r);
    CHECK_MSG(s == SEGRT_OK, "%s", segrt_last_error());
    CHECK(builds == 1 && r.windows > 1);
    CHECK(segrt_output_commit(labels) == SEGRT_OK && segrt_output_commit(overlay) == SEGRT_OK);
    segrt_tensor u;
    CHECK(segrt_image_load(in_dir("labels.png"), &u) == SEGRT_OK);
    CHECK(u.dtype == SEGRT_DTYPE_UINT8 && u.dims[0] == 96 && u.dims[1] == 128 && u.dims[2] == 1);
    bool binary = u.data != NULL;
    for (int i = 0; binary && i < 96 * 128; i++)
        binary = ((uint8_t *)u.data)[i] <= 1;
    CHECK(binary);
    segrt_tensor_free(&u);
    CHECK(segrt_image_load(in_dir("overlay.png"), &u) == SEGRT_OK);
    CHECK(u.dims[0] == 96 && u.dims[1] == 128 && u.dims[2] == 3);
    segrt_tensor_free(&u);
    /* An overlay over an array is refused. */
    CHECK(segrt_output_open(in_dir("labels2.png"), &labels) == SEGRT_OK);
    CHECK(segrt_output_open(in_dir("overlay2.png"), &overlay) == SEGRT_OK);
    o.build = NULL;
    CHECK(segrt_window_job_run(&o, &m, NULL, 1, sg_test_model("basicunet2d_tiny.in.npy"), labels, overlay, &r) ==
          SEGRT_ERROR_INVALID_ARGUMENT);
    segrt_output_discard(labels);
    segrt_output_discard(overlay);
    segrt_model_destroy(m);
}

static void remove_dir(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/segrt-api-files-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_outputs();
    test_identities();
    test_arrays();
    test_images();
    test_compare();
    test_profile_and_flops();
    test_window_job_npy();
    test_window_job_picture();
    remove_dir();
    return sg_test_finish("test_api_files");
}
