/* One engine shared by threads, a context each: every run of every thread
 * gives output bit-identical to a run on one thread. The engine (plan,
 * weights, oneDNN primitives) is immutable; contexts hold all that a run
 * writes. */
#include "io/npy.h"
#include "segrt.h"
#include "testlib.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 4
#define RUNS 8

typedef struct job {
    const segrt_engine *engine;
    segrt_tensor input;
    const float *want;
    size_t n;
    int mismatches, failures;
} job;

static void *worker(void *arg)
{
    job *j = arg;
    segrt_context *ctx = NULL;
    if (segrt_context_create(j->engine, &ctx) != SEGRT_OK) {
        j->failures++;
        return NULL;
    }
    float *y = malloc(j->n * sizeof(float));
    segrt_tensor out;
    memset(&out, 0, sizeof out);
    for (int r = 0; y && r < RUNS; r++) {
        segrt_engine_output_shapes(j->engine, 1, &j->input, 1, &out);
        out.data = y;
        memset(y, 0xff, j->n * sizeof(float)); /* poison: every element must be written */
        if (segrt_context_run(ctx, 1, &j->input, 1, &out) != SEGRT_OK)
            j->failures++;
        else if (memcmp(y, j->want, j->n * sizeof(float)) != 0)
            j->mismatches++;
    }
    free(y);
    segrt_context_destroy(ctx);
    return NULL;
}

int main(void)
{
    const char *path = sg_test_model("basicunet2d_tiny.onnx");
    segrt_model *m = NULL;
    CHECK_MSG(segrt_model_load(path, &m) == SEGRT_OK, "%s", segrt_last_error());
    if (!m)
        return sg_test_finish("test_threads");
    /* Random input with the model's channel count, batch 2, 64x96. */
    int64_t dims[4] = {2, 1, 64, 96};
    size_t in_n = 2 * 64 * 96;
    float *x = malloc(in_n * sizeof(float));
    uint32_t seed = 12345;
    for (size_t i = 0; i < in_n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
    }
    segrt_build_options *opts = NULL;
    segrt_build_options_create(&opts);
    segrt_build_options_set_shape(opts, "image", 4, dims);
    segrt_build_options_set_threads(opts, 2);
    segrt_engine *e = NULL;
    CHECK_MSG(segrt_engine_build(m, opts, &e) == SEGRT_OK, "%s", segrt_last_error());
    segrt_build_options_destroy(opts);
    segrt_model_destroy(m);
    if (!e) {
        free(x);
        return sg_test_finish("test_threads");
    }
    segrt_tensor input = {SEGRT_DTYPE_FLOAT32, 4, {2, 1, 64, 96}, x, SEGRT_MEMORY_HOST, 0};
    segrt_tensor out;
    memset(&out, 0, sizeof out);
    CHECK(segrt_engine_output_shapes(e, 1, &input, 1, &out) == SEGRT_OK);
    size_t n = (size_t)(out.dims[0] * out.dims[1] * out.dims[2] * out.dims[3]);
    float *want = malloc(n * sizeof(float));
    segrt_context *ctx = NULL;
    CHECK(segrt_context_create(e, &ctx) == SEGRT_OK);
    out.data = want;
    CHECK(segrt_context_run(ctx, 1, &input, 1, &out) == SEGRT_OK);
    segrt_context_destroy(ctx);

    job jobs[THREADS];
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++) {
        jobs[t] = (job){e, input, want, n, 0, 0};
        CHECK(pthread_create(&threads[t], NULL, worker, &jobs[t]) == 0);
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(threads[t], NULL);
        CHECK_MSG(jobs[t].failures == 0, "thread %d: %d runs failed", t, jobs[t].failures);
        CHECK_MSG(jobs[t].mismatches == 0, "thread %d: %d of %d runs differ from the single run", t,
                  jobs[t].mismatches, RUNS);
    }
    segrt_engine_destroy(e);
    free(want);
    free(x);
    return sg_test_finish("test_threads");
}
