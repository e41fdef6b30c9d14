/* The CUDA engine under repetition and concurrency: basicunet2d_tiny built
 * for CUDA at fp16, then
 *  (a) one context, 1000 back-to-back runs on one input: every output
 *      bit-identical to the first run's;
 *  (b) a pool of 8 contexts, 8 threads x 500 runs through
 *      segrt_context_pool_run, each thread cycling through 8 distinct seeded
 *      random inputs: every output bit-identical to a reference computed up
 *      front, one run per input, on one context.
 * Outputs are poisoned (all bits set) before every run, so that a run that
 * leaves part of its output unwritten is caught.
 *
 * usage: test_gpu_race [MODEL.onnx | MODELS_DIR]   (default $SEGRT_MODELS, the folder
 * tests/models/make_models.py writes)
 * Exit 0: every output matched; 1: a mismatch (the first one is printed
 * with its call index) or a failed call; 77: skipped, no CUDA device (ctest
 * takes 77 as skipped); 2: bad usage or the model is missing. */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include "segrt.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define BATCH 2
#define HEIGHT 96
#define WIDTH 128
/* The counts (-D overrides them, for a quick look elsewhere). */
#ifndef SERIAL_RUNS
#define SERIAL_RUNS 1000
#endif
#ifndef POOL_SIZE
#define POOL_SIZE 8
#endif
#ifndef THREADS
#define THREADS 8
#endif
#ifndef RUNS_PER_THREAD
#define RUNS_PER_THREAD 500
#endif
#define N_INPUTS 8

typedef struct shared {
    segrt_context_pool *pool;
    segrt_tensor inputs[N_INPUTS];
    const void *want[N_INPUTS]; /* reference output of each input */
    segrt_tensor out_shape;     /* dtype and dims of the output */
    size_t out_bytes;
    atomic_int stop;            /* set at the first failure: the others stop */
} shared;

typedef struct worker_arg {
    shared *sh;
    int thread;
    /* Results: the first problem this thread met, if any. */
    int failed_call;  /* -1: none */
    int failed_input;
    int mismatch;     /* 1: a mismatch, 0: a failed call */
    char error[512];
    long done;
} worker_arg;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* splitmix64, for seeded inputs that are the same on every machine. */
static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int fail_call(const char *what)
{
    fprintf(stderr, "test_gpu_race: %s: %s\n", what, segrt_last_error());
    return 1;
}

/* Counts the elements (4 bytes each) that differ, and the first one. */
static size_t count_differences(const void *a, const void *b, size_t bytes, size_t *first)
{
    const uint32_t *x = a, *y = b;
    size_t n = 0;
    *first = 0;
    for (size_t i = 0; i < bytes / 4; i++)
        if (x[i] != y[i] && n++ == 0)
            *first = i;
    return n;
}

static void *worker(void *p)
{
    worker_arg *a = p;
    shared *sh = a->sh;
    void *y = malloc(sh->out_bytes);
    a->failed_call = -1;
    if (!y) {
        snprintf(a->error, sizeof a->error, "out of memory");
        a->failed_call = 0;
        atomic_store(&sh->stop, 1);
        return NULL;
    }
    for (int i = 0; i < RUNS_PER_THREAD && !atomic_load(&sh->stop); i++) {
        int k = (a->thread + i) % N_INPUTS;
        segrt_tensor out = sh->out_shape;
        out.data = y;
        out.memory = SEGRT_MEMORY_HOST;
        memset(y, 0xff, sh->out_bytes);
        if (segrt_context_pool_run(sh->pool, 1, &sh->inputs[k], 1, &out) != SEGRT_OK) {
            snprintf(a->error, sizeof a->error, "%s", segrt_last_error());
            a->failed_call = i;
            a->failed_input = k;
            a->mismatch = 0;
            atomic_store(&sh->stop, 1);
            break;
        }
        if (memcmp(y, sh->want[k], sh->out_bytes) != 0) {
            size_t first;
            size_t n = count_differences(y, sh->want[k], sh->out_bytes, &first);
            snprintf(a->error, sizeof a->error, "%zu of %zu elements differ, first at flat index %zu", n,
                     sh->out_bytes / 4, first);
            a->failed_call = i;
            a->failed_input = k;
            a->mismatch = 1;
            atomic_store(&sh->stop, 1);
            break;
        }
        a->done++;
    }
    free(y);
    return NULL;
}

static const char *model_path(int argc, char **argv, char *buf, size_t cap)
{
    const char *arg = argc > 1 ? argv[1] : getenv("SEGRT_MODELS");
    if (!arg || !arg[0])
        return NULL;
    struct stat st;
    if (stat(arg, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(buf, cap, "%s/basicunet2d_tiny.onnx", arg);
        return buf;
    }
    return arg;
}

int main(int argc, char **argv)
{
    int32_t n_dev = 0;
    if (segrt_cuda_device_count(&n_dev) != SEGRT_OK)
        return fail_call("segrt_cuda_device_count");
    if (n_dev == 0) {
        printf("skipped: no CUDA device\n");
        return 77;
    }
    char buf[4096];
    const char *path = model_path(argc, argv, buf, sizeof buf);
    if (!path) {
        fprintf(stderr, "usage: test_gpu_race [MODEL.onnx | MODELS_DIR]: no argument and SEGRT_MODELS is not "
                        "set; `python tests/models/make_models.py DIR` writes the test models\n");
        return 2;
    }

    segrt_model *model = NULL;
    segrt_build_options *opts = NULL;
    segrt_engine *engine = NULL;
    segrt_context *ctx = NULL;
    segrt_context_pool *pool = NULL;
    float *x[N_INPUTS] = {0};
    void *want[N_INPUTS] = {0};
    void *y = NULL;
    int rc = 1;

    if (segrt_model_load(path, &model) != SEGRT_OK) {
        fprintf(stderr, "test_gpu_race: %s\n", segrt_last_error());
        return 2;
    }
    segrt_tensor_desc in_desc;
    if (segrt_model_input(model, 0, &in_desc) != SEGRT_OK) {
        rc = fail_call("segrt_model_input");
        goto done;
    }
    int64_t dims[4] = {BATCH, 1, HEIGHT, WIDTH};
    if (segrt_build_options_create(&opts) != SEGRT_OK ||
        segrt_build_options_set_shape(opts, in_desc.name, 4, dims) != SEGRT_OK ||
        segrt_build_options_set_device(opts, SEGRT_DEVICE_CUDA, 0) != SEGRT_OK ||
        segrt_build_options_set_precision(opts, SEGRT_PRECISION_FP16) != SEGRT_OK) {
        rc = fail_call("build options");
        goto done;
    }
    double t0 = now_s();
    if (segrt_engine_build(model, opts, &engine) != SEGRT_OK) {
        rc = fail_call("segrt_engine_build (CUDA, fp16)");
        goto done;
    }
    printf("built %s for CUDA at fp16 in %.2f s\n", path, now_s() - t0);

    /* Eight seeded random inputs, normal-ish in [-2, 2). */
    const size_t in_n = (size_t)BATCH * HEIGHT * WIDTH;
    shared sh;
    memset(&sh, 0, sizeof sh);
    uint64_t seed = 20240611;
    for (int k = 0; k < N_INPUTS; k++) {
        x[k] = malloc(in_n * sizeof(float));
        if (!x[k]) {
            fprintf(stderr, "test_gpu_race: out of memory\n");
            goto done;
        }
        for (size_t i = 0; i < in_n; i++) {
            double s = 0;
            for (int j = 0; j < 4; j++)
                s += (double)(next_random(&seed) >> 11) * 0x1.0p-53;
            x[k][i] = (float)((s - 2.0) * 1.7);
        }
        segrt_tensor in = {SEGRT_DTYPE_FLOAT32, 4, {BATCH, 1, HEIGHT, WIDTH}, x[k], SEGRT_MEMORY_HOST, 0};
        sh.inputs[k] = in;
    }
    if (segrt_engine_output_shapes(engine, 1, &sh.inputs[0], 1, &sh.out_shape) != SEGRT_OK) {
        rc = fail_call("segrt_engine_output_shapes");
        goto done;
    }
    if (sh.out_shape.dtype != SEGRT_DTYPE_FLOAT32) {
        fprintf(stderr, "test_gpu_race: the output is %s, expected float32\n", segrt_dtype_name(sh.out_shape.dtype));
        goto done;
    }
    size_t out_n = 1;
    for (int d = 0; d < sh.out_shape.rank; d++)
        out_n *= (size_t)sh.out_shape.dims[d];
    sh.out_bytes = out_n * sizeof(float);
    y = malloc(sh.out_bytes);
    for (int k = 0; k < N_INPUTS; k++)
        want[k] = malloc(sh.out_bytes);
    for (int k = 0; k < N_INPUTS; k++)
        if (!want[k] || !y) {
            fprintf(stderr, "test_gpu_race: out of memory\n");
            goto done;
        }

    /* The references: one run per input on one context. */
    if (segrt_context_create(engine, &ctx) != SEGRT_OK) {
        rc = fail_call("segrt_context_create");
        goto done;
    }
    for (int k = 0; k < N_INPUTS; k++) {
        segrt_tensor out = sh.out_shape;
        out.data = want[k];
        out.memory = SEGRT_MEMORY_HOST;
        memset(want[k], 0xff, sh.out_bytes);
        if (segrt_context_run(ctx, 1, &sh.inputs[k], 1, &out) != SEGRT_OK) {
            rc = fail_call("reference run");
            goto done;
        }
        sh.want[k] = want[k];
    }
    for (int k = 1; k < N_INPUTS; k++)
        if (memcmp(want[k], want[0], sh.out_bytes) == 0) {
            fprintf(stderr, "test_gpu_race: inputs 0 and %d give the same output: the test cannot tell them apart\n", k);
            goto done;
        }

    /* (a) One context, back to back, one input. */
    t0 = now_s();
    for (int i = 0; i < SERIAL_RUNS; i++) {
        segrt_tensor out = sh.out_shape;
        out.data = y;
        out.memory = SEGRT_MEMORY_HOST;
        memset(y, 0xff, sh.out_bytes);
        if (segrt_context_run(ctx, 1, &sh.inputs[0], 1, &out) != SEGRT_OK) {
            fprintf(stderr, "test_gpu_race: (a) call %d failed: %s\n", i, segrt_last_error());
            goto done;
        }
        if (memcmp(y, want[0], sh.out_bytes) != 0) {
            size_t first;
            size_t n = count_differences(y, want[0], sh.out_bytes, &first);
            fprintf(stderr,
                    "test_gpu_race: (a) call %d of %d on one context: output differs from the first call's: "
                    "%zu of %zu elements, first at flat index %zu\n",
                    i, SERIAL_RUNS, n, out_n, first);
            goto done;
        }
    }
    double ta = now_s() - t0;
    printf("(a) one context: %d calls, every output bit-identical to the first, %.2f s (%.3f ms per call)\n",
           SERIAL_RUNS, ta, 1e3 * ta / SERIAL_RUNS);

    /* (b) A pool of contexts, threads cycling through the inputs. */
    if (segrt_context_pool_create(engine, POOL_SIZE, &pool) != SEGRT_OK) {
        rc = fail_call("segrt_context_pool_create");
        goto done;
    }
    sh.pool = pool;
    atomic_init(&sh.stop, 0);
    worker_arg args[THREADS];
    pthread_t tids[THREADS];
    int started = 0;
    t0 = now_s();
    for (int t = 0; t < THREADS; t++) {
        memset(&args[t], 0, sizeof args[t]);
        args[t].sh = &sh;
        args[t].thread = t;
        if (pthread_create(&tids[t], NULL, worker, &args[t]) != 0) {
            fprintf(stderr, "test_gpu_race: pthread_create failed\n");
            atomic_store(&sh.stop, 1);
            break;
        }
        started++;
    }
    for (int t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    double tb = now_s() - t0;
    long total = 0;
    int bad = 0;
    for (int t = 0; t < started; t++) {
        total += args[t].done;
        if (args[t].failed_call >= 0) {
            bad = 1;
            fprintf(stderr, "test_gpu_race: (b) thread %d, call %d (input %d): %s: %s\n", t, args[t].failed_call,
                    args[t].failed_input, args[t].mismatch ? "output differs from the reference" : "run failed",
                    args[t].error);
        }
    }
    printf("(b) pool of %d contexts, %d threads x %d calls over %d inputs: %ld calls matched, %.2f s "
           "(%.0f calls/s)\n",
           POOL_SIZE, started, RUNS_PER_THREAD, N_INPUTS, total, tb, (double)total / tb);
    if (bad || started != THREADS || total != (long)THREADS * RUNS_PER_THREAD)
        goto done;
    printf("test_gpu_race: ok\n");
    rc = 0;

done:
    segrt_context_pool_destroy(pool);
    segrt_context_destroy(ctx);
    segrt_engine_destroy(engine);
    segrt_build_options_destroy(opts);
    segrt_model_destroy(model);
    for (int k = 0; k < N_INPUTS; k++) {
        free(x[k]);
        free(want[k]);
    }
    free(y);
    return rc;
}
