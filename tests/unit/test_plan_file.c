/* Plan files and the plan cache for CPU engines (issue 37: the plan file is
 * a generic container around a backend's payload): a saved and loaded CPU
 * engine gives the same bits as the engine built, with shapes bound and
 * with symbolic shapes; the cache misses, then hits, then misses again
 * after an option changes; truncated, corrupt and foreign plan files are
 * refused with the file named. */
#include "io/npy.h"
#include "segrt.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static uint8_t *read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static void write_all(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, n, f) == n);
    if (f)
        fclose(f);
}

static segrt_model *model;
static sg_tensor x;

/* The model's output for x through engine e, malloc'ed (NULL on failure). */
static float *run(const segrt_engine *e, size_t *n)
{
    segrt_context *ctx = NULL;
    CHECK_MSG(segrt_context_create(e, &ctx) == SEGRT_OK, "%s", segrt_last_error());
    if (!ctx)
        return NULL;
    segrt_tensor in = {x.dtype, x.rank, {0}, x.data, SEGRT_MEMORY_HOST, 0};
    memcpy(in.dims, x.dims, sizeof in.dims);
    segrt_tensor out;
    memset(&out, 0, sizeof out);
    CHECK(segrt_engine_output_shapes(e, 1, &in, 1, &out) == SEGRT_OK);
    *n = 1;
    for (int32_t d = 0; d < out.rank; d++)
        *n *= (size_t)out.dims[d];
    float *y = malloc(*n * sizeof *y);
    out.data = y;
    CHECK_MSG(segrt_context_run(ctx, 1, &in, 1, &out) == SEGRT_OK, "%s", segrt_last_error());
    segrt_context_destroy(ctx);
    return y;
}

static segrt_build_options *options(bool bind, int32_t threads)
{
    segrt_build_options *o = NULL;
    CHECK(segrt_build_options_create(&o) == SEGRT_OK);
    if (bind)
        segrt_build_options_set_shape(o, "image", x.rank, x.dims);
    segrt_build_options_set_threads(o, threads);
    return o;
}

/* Built, saved, loaded: the same bits and the same plan. */
static void test_save_load(bool bind, const char *name)
{
    segrt_build_options *o = options(bind, 0);
    segrt_engine *e = NULL;
    CHECK_MSG(segrt_engine_build(model, o, &e) == SEGRT_OK, "%s", segrt_last_error());
    segrt_build_options_destroy(o);
    if (!e)
        return;
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CHECK_MSG(segrt_engine_save(e, path) == SEGRT_OK, "%s", segrt_last_error());
    segrt_engine *l = NULL;
    CHECK_MSG(segrt_engine_load(path, 0, &l) == SEGRT_OK, "%s", segrt_last_error());
    if (l) {
        size_t n1 = 0, n2 = 0;
        float *y1 = run(e, &n1), *y2 = run(l, &n2);
        CHECK(y1 && y2 && n1 == n2 && memcmp(y1, y2, n1 * sizeof *y1) == 0);
        free(y1);
        free(y2);
        segrt_engine_info a, b;
        CHECK(segrt_engine_get_info(e, &a) == SEGRT_OK && segrt_engine_get_info(l, &b) == SEGRT_OK);
        CHECK(a.device == SEGRT_DEVICE_CPU && b.device == SEGRT_DEVICE_CPU);
        CHECK(a.steps == b.steps && a.arena_bytes == b.arena_bytes);
        CHECK(bind ? a.steps > 0 : a.steps == 0); /* unbound: plans are made per run */
        CHECK(segrt_engine_input_count(l) == 1 && segrt_engine_output_count(l) == 1);
    }
    segrt_engine_destroy(l);
    segrt_engine_destroy(e);
}

static segrt_engine *cached(const char *cache, int32_t threads, int *hit)
{
    segrt_build_options *o = options(true, threads);
    segrt_engine *e = NULL;
    *hit = -1;
    CHECK_MSG(segrt_engine_build_cached(model, o, cache, hit, &e) == SEGRT_OK, "%s", segrt_last_error());
    segrt_build_options_destroy(o);
    return e;
}

static int plans_in(const char *cache)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls %s/*.plan 2>/dev/null | wc -l", cache);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p) {
        if (fscanf(p, "%d", &n) != 1)
            n = -1;
        pclose(p);
    }
    return n;
}

static void test_cache(void)
{
    char cache[128];
    snprintf(cache, sizeof cache, "%s/cache", dir);
    int hit;
    segrt_engine *a = cached(cache, 1, &hit);
    CHECK(hit == 0 && plans_in(cache) == 1);
    segrt_engine *b = cached(cache, 1, &hit);
    CHECK(hit == 1 && plans_in(cache) == 1);
    size_t n1 = 0, n2 = 0;
    float *y1 = a ? run(a, &n1) : NULL, *y2 = b ? run(b, &n2) : NULL;
    CHECK(y1 && y2 && n1 == n2 && memcmp(y1, y2, n1 * sizeof *y1) == 0);
    free(y1);
    free(y2);
    segrt_engine_destroy(a);
    segrt_engine_destroy(b);
    /* Another option: another key, a miss, and a plan of its own. */
    a = cached(cache, 2, &hit);
    CHECK(hit == 0 && plans_in(cache) == 2);
    segrt_engine_destroy(a);
    a = cached(cache, 2, &hit);
    CHECK(hit == 1);
    segrt_engine_destroy(a);
}

/* path refused by segrt_engine_load with the file named and status want
 * (0: any error). */
static void refused(const char *path, segrt_status want, const char *what)
{
    segrt_engine *e = NULL;
    segrt_status s = segrt_engine_load(path, 0, &e);
    CHECK_MSG(s != SEGRT_OK && (want == 0 || s == want), "%s: status %d", what, (int)s);
    CHECK_MSG(e == NULL, "%s", what);
    CHECK_MSG(strstr(segrt_last_error(), path) != NULL, "%s: %s", what, segrt_last_error());
    segrt_engine_destroy(e);
}

static void test_bad_files(void)
{
    char good[128], bad[128];
    snprintf(good, sizeof good, "%s/bound.plan", dir);
    snprintf(bad, sizeof bad, "%s/bad.plan", dir);
    size_t n = 0;
    uint8_t *data = read_all(good, &n);
    CHECK(data != NULL && n > 64);
    if (!data)
        return;
    const size_t cuts[] = {0, 1, 8, 12, 16, 64, 256, n / 2, n - 64, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        write_all(bad, data, cuts[i]);
        char what[64];
        snprintf(what, sizeof what, "cut at %zu", cuts[i]);
        refused(bad, 0, what);
    }
    /* A byte of the payload changed: the checksum. */
    data[n - 100] ^= 0x5A;
    write_all(bad, data, n);
    refused(bad, SEGRT_ERROR_INVALID_MODEL, "payload byte changed");
    CHECK(strstr(segrt_last_error(), "checksum") != NULL);
    data[n - 100] ^= 0x5A;
    /* Bytes after the payload. */
    uint8_t *more = malloc(n + 8);
    memcpy(more, data, n);
    memset(more + n, 0, 8);
    write_all(bad, more, n + 8);
    refused(bad, SEGRT_ERROR_INVALID_MODEL, "padded");
    free(more);
    /* The key: a backend this segrt has not, another segrt version. */
    uint8_t *b = memmem(data, n, "backend=cpu", 11);
    CHECK(b != NULL);
    if (b) {
        memcpy(b, "backend=xyz", 11);
        write_all(bad, data, n);
        refused(bad, SEGRT_ERROR_UNSUPPORTED, "backend xyz");
        CHECK(strstr(segrt_last_error(), "xyz") != NULL);
        memcpy(b, "backend=cpu", 11);
    }
    uint8_t *v = memmem(data, n, "segrt=", 6);
    CHECK(v != NULL);
    if (v) {
        v[6] = v[6] == '9' ? '8' : '9';
        write_all(bad, data, n);
        refused(bad, SEGRT_ERROR_UNSUPPORTED, "segrt version");
        CHECK(strstr(segrt_last_error(), "segrt version") != NULL);
        /* ... and says what to do about it. */
        CHECK(strstr(segrt_last_error(), "segrt build MODEL.onnx -o PLAN") != NULL);
    }
    free(data);
    write_all(bad, "SEGRTPLN", 8);
    refused(bad, SEGRT_ERROR_INVALID_MODEL, "magic only");
    write_all(bad, "not a plan at all, just text", 28);
    refused(bad, SEGRT_ERROR_INVALID_MODEL, "text");
    snprintf(bad, sizeof bad, "%s/missing.plan", dir);
    refused(bad, SEGRT_ERROR_IO, "missing");
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/segrt-test-plan-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    CHECK(segrt_model_load(sg_test_model("basicunet2d_tiny.onnx"), &model) == SEGRT_OK);
    CHECK(sg_npy_read(sg_test_model("basicunet2d_tiny.in.npy"), &x) == SEGRT_OK);
    if (model && x.data) {
        test_save_load(true, "bound.plan");
        test_save_load(false, "unbound.plan");
        test_cache();
        test_bad_files();
    }
    segrt_model_destroy(model);
    free(x.data);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return sg_test_finish("test_plan_file");
}
