/* segrt_cases_run through the public API: which files make which cases,
 * the engines built once for cases that share the window's input dims and
 * again after a case that needed others, a failing case (a bad file, a
 * channel count the model does not take) recorded while the later ones
 * run, the callback's sequence, the report, summary.json's place, and
 * skip_existing. Results against the single-case job: tests/volume/
 * test_cases.py. */
#include "segrt.h"
#include "testlib.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[256];

static const char *at(const char *name)
{
    static char buf[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", root, name);
    return buf[k];
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* A float32 volume of d x h x w with a ramp, as NIfTI. */
static void save_volume(const char *path, int64_t d, int64_t h, int64_t w, float scale)
{
    float *v = malloc(sizeof(float) * (size_t)(d * h * w));
    for (int64_t i = 0; i < d * h * w; i++)
        v[i] = scale * (float)(i % 97) / 97.0f - 0.5f;
    segrt_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = SEGRT_DTYPE_FLOAT32;
    t.rank = 3;
    t.dims[0] = d;
    t.dims[1] = h;
    t.dims[2] = w;
    t.data = v;
    t.memory = SEGRT_MEMORY_HOST;
    CHECK_MSG(segrt_volume_save(path, &t, NULL) == SEGRT_OK, "%s", segrt_last_error());
    free(v);
}

typedef struct builds {
    int calls;
    int64_t last[SEGRT_MAX_RANK];
} builds;

static segrt_status count_builds(void *user, const segrt_model *model, const char *input, int32_t rank,
                                 const int64_t *dims, segrt_engine **out)
{
    builds *b = user;
    b->calls++;
    memcpy(b->last, dims, sizeof(int64_t) * (size_t)rank);
    segrt_build_options *opts = NULL;
    segrt_status s = segrt_build_options_create(&opts);
    if (s == SEGRT_OK)
        s = segrt_build_options_set_shape(opts, input, rank, dims);
    if (s == SEGRT_OK)
        s = segrt_engine_build(model, opts, out);
    segrt_build_options_destroy(opts);
    return s;
}

typedef struct events {
    char log[2048]; /* "S:name D:name F:name K:name ..." */
    size_t last_index, count;
} events;

static void on_case(void *user, const segrt_case_info *c)
{
    events *e = user;
    static const char code[] = "SDKF";
    size_t n = strlen(e->log);
    snprintf(e->log + n, sizeof e->log - n, "%c:%s ", code[c->state], c->name);
    e->last_index = c->index;
    e->count = c->count;
    if (c->state == SEGRT_CASE_FAILED)
        CHECK(c->error && c->error[0]);
    if (c->state == SEGRT_CASE_DONE)
        CHECK(c->channels == 1 && c->dims[0] > 0 && c->seconds_total >= c->seconds_run && c->n_inputs >= 1);
}

static void run_folder(bool prefetch)
{
    const char *model_path = sg_test_model("unet3d_spleen.onnx");
    segrt_model *m = NULL;
    CHECK(segrt_model_load(model_path, &m) == SEGRT_OK);
    segrt_window_job_options o;
    segrt_window_job_options_init(&o, 3);
    o.roi[0] = o.roi[1] = o.roi[2] = 16;
    o.output = SEGRT_WINDOW_OUTPUT_LABELS;
    builds b = {0, {0}};
    o.build = count_builds;
    o.build_user = &b;
    char out[512];
    snprintf(out, sizeof out, "%s", at(prefetch ? "out_prefetch" : "out_plain"));
    mkdir(out, 0777);
    segrt_cases_options c;
    segrt_cases_options_init(&c);
    c.in_dir = at("in");
    c.out_dir = out;
    c.no_prefetch = !prefetch;
    events e;
    memset(&e, 0, sizeof e);
    c.on_case = on_case;
    c.on_case_user = &e;
    segrt_cases_report r;
    segrt_status s = segrt_cases_run(&o, &m, &model_path, 1, &c, &r);
    CHECK_MSG(s == SEGRT_ERROR_CASES_FAILED, "%s", segrt_last_error());
    CHECK(strstr(segrt_last_error(), "2 of 5 cases failed: b, bad") != NULL);
    CHECK(r.cases == 5 && r.done == 3 && r.skipped == 0 && r.failed == 2);
    CHECK(r.failed_names && strcmp(r.failed_names[0], "b") == 0 && strcmp(r.failed_names[1], "bad") == 0);
    CHECK_MSG(strcmp(e.log, "S:a D:a S:b F:b F:bad S:c D:c S:d D:d ") == 0, "%s", e.log);
    CHECK(e.count == 5 && e.last_index == 4);
    /* a, c and d share the window's input dims (1 x 1 x 16^3) whatever
     * their sizes: one build; b (two channels) needs 1 x 2 x 16^3, which
     * the model refuses; c builds again. */
    CHECK_MSG(b.calls == 3, "%d builds", b.calls);
    CHECK(b.last[1] == 1 && b.last[2] == 16);
    char p[600];
    snprintf(p, sizeof p, "%s/summary.json", out);
    CHECK(exists(p));
    snprintf(p, sizeof p, "%s/c.nii.gz", out);
    CHECK(exists(p));
    snprintf(p, sizeof p, "%s/b.nii.gz", out);
    CHECK(!exists(p));
    segrt_cases_report_free(&r);
    CHECK(r.failed == 0 && !r.failed_names);

    /* skip_existing, summary elsewhere: a, c, d skipped, no build. */
    b.calls = 0;
    memset(&e, 0, sizeof e);
    c.skip_existing = 1;
    c.summary_path = at(prefetch ? "s1.json" : "s2.json");
    s = segrt_cases_run(&o, &m, &model_path, 1, &c, &r);
    CHECK(s == SEGRT_ERROR_CASES_FAILED && r.skipped == 3 && r.done == 0 && r.failed == 2);
    CHECK_MSG(strcmp(e.log, "K:a S:b F:b F:bad K:c K:d ") == 0, "%s", e.log);
    CHECK(exists(c.summary_path) && b.calls == 1); /* b's attempt alone */
    segrt_cases_report_free(&r);

    /* No summary at all. */
    c.summary_path = "";
    c.skip_existing = 1;
    snprintf(p, sizeof p, "%s/summary.json", out);
    unlink(p);
    s = segrt_cases_run(&o, &m, &model_path, 1, &c, &r);
    CHECK(s == SEGRT_ERROR_CASES_FAILED && !exists(p));
    segrt_cases_report_free(&r);
    segrt_model_destroy(m);
}

static void refusals(void)
{
    const char *model_path = sg_test_model("unet3d_spleen.onnx");
    segrt_model *m = NULL;
    CHECK(segrt_model_load(model_path, &m) == SEGRT_OK);
    segrt_window_job_options o;
    segrt_window_job_options_init(&o, 3);
    o.roi[0] = o.roi[1] = o.roi[2] = 16;
    segrt_cases_options c;
    segrt_cases_options_init(&c);
    segrt_cases_report r;
    CHECK(segrt_cases_run(&o, &m, NULL, 1, &c, &r) == SEGRT_ERROR_INVALID_ARGUMENT && r.cases == 0);
    CHECK(segrt_cases_run(NULL, &m, NULL, 1, &c, &r) == SEGRT_ERROR_INVALID_ARGUMENT);
    c.in_dir = at("in");
    c.out_dir = at("in");
    CHECK(segrt_cases_run(&o, &m, NULL, 1, &c, &r) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(segrt_last_error(), "folder of cases") != NULL);
    c.out_dir = at("nowhere");
    CHECK(segrt_cases_run(&o, &m, NULL, 1, &c, &r) == SEGRT_ERROR_INVALID_ARGUMENT);
    mkdir(at("empty"), 0777);
    c.in_dir = at("empty");
    c.out_dir = at("out_plain");
    CHECK(segrt_cases_run(&o, &m, NULL, 1, &c, &r) == SEGRT_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(segrt_last_error(), "no cases") != NULL);
    c.in_dir = at("in");
    c.extension = ".npy";
    CHECK(segrt_cases_run(&o, &m, NULL, 1, &c, &r) == SEGRT_ERROR_INVALID_ARGUMENT);
    c.extension = NULL;
    CHECK(segrt_cases_run(&o, &m, NULL, 0, &c, &r) == SEGRT_ERROR_INVALID_ARGUMENT);
    segrt_cases_report_free(&r);
    segrt_cases_report_free(NULL);
    segrt_model_destroy(m);
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/segrt-cases-XXXXXX");
    if (!mkdtemp(root))
        return 1;
    mkdir(at("in"), 0777);
    save_volume(at("in/a.nii.gz"), 10, 18, 20, 1.0f);
    save_volume(at("in/b_0000.nii.gz"), 9, 16, 16, 1.0f);
    save_volume(at("in/b_0001.nii.gz"), 9, 16, 16, 2.0f);
    save_volume(at("in/c.nii"), 12, 17, 24, 3.0f);
    save_volume(at("in/d.nii.gz"), 20, 16, 16, 0.5f);
    FILE *f = fopen(at("in/bad.nii.gz"), "wb");
    fputs("\x1f\x8b not really gzip", f);
    fclose(f);
    run_folder(true);
    run_folder(false);
    refusals();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", root);
    return sg_test_finish("test_cases_api");
}
