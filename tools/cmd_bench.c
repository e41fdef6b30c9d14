/* segrt bench: latency, throughput, memory and GFLOP/s of a model on
 * random inputs of the bound shapes. */
#include "cli_engine.h"
#include "json_out.h"

#include "core/dtype.h"
#include "core/tensor.h"
#include "engine/engine_profile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static const char bench_usage[] =
    "usage: segrt bench MODEL --shape NAME=DIMS... [--device cpu|cuda|cuda:N] [--precision P] [--iters N]\n"
    "                   [--warmup N] [--threads N] [--seed N] [--json] [--profile]\n"
    "Builds an engine for the shapes given (every input with symbolic dims needs one),\n"
    "fills the inputs with seeded random data (normal floats, integers 0 to 3, bools\n"
    "0 or 1), runs --warmup untimed runs (default 3), then --iters timed runs (default\n"
    "20), and prints:\n"
    "  latency         p50 (the median), p90, p99, min and mean over the timed runs,\n"
    "                  in ms; percentiles by the nearest-rank method: the p-th is the\n"
    "                  ceil(p/100 * N)-th smallest of the N times\n"
    "  throughput      samples per second: the batch (dim 0 of the first input)\n"
    "                  divided by the median time\n"
    "  GFLOP           of one run (as segrt info --shape counts them), and GFLOP/s\n"
    "                  achieved at the median\n"
    "  peak memory     the peak resident set of the whole process (getrusage)\n"
    "  threads         --threads, or the number of online CPUs when it is 0 (default)\n"
    "--json            one JSON object instead, with keys model, segrt_version, device,\n"
    "                  threads, shapes (name -> dims), iters, warmup, seed, batch,\n"
    "                  median_ms, p50_ms, p90_ms, p99_ms, min_ms, max_ms, mean_ms,\n"
    "                  times_ms, throughput_per_s, peak_bytes, gflop, gflops_per_s;\n"
    "                  a number JSON cannot hold is the string \"inf\" or \"nan\".\n"
    "--profile         after the timed runs, --iters more runs with every step of the\n"
    "                  plan timed: a table of steps, slowest first, with the kernel\n"
    "                  that ran each (oneDNN's implementation, or segrt's)\n";

#define MAX_IO 64

typedef struct shape_arg {
    const char *name;
    int32_t rank;
    int64_t dims[SEGRT_MAX_RANK];
} shape_arg;

typedef struct bench_args {
    const char *path;
    shape_arg shapes[MAX_IO];
    int n_shapes;
    segrt_device_kind device;
    cli_engine_opts eo;     /* --device, --precision and the other engine options */
    char device_label[32];
    int64_t threads, iters, warmup, seed;
    bool json;
    bool profile;
} bench_args;

typedef struct bench_state {
    segrt_model *model, *optimized;
    segrt_build_options *opts;
    segrt_engine *engine;
    segrt_context *ctx;
    size_t n_in, n_out;
    segrt_tensor inputs[MAX_IO], outputs[MAX_IO];
    const char *input_names[MAX_IO]; /* owned by model */
    double *times;                    /* seconds of each timed run */
} bench_state;

typedef struct bench_result {
    double median, p90, p99, min, max, mean; /* seconds */
    double flops;                            /* NaN when unknown */
    int64_t batch, threads, peak_bytes;
} bench_result;

static void bench_state_free(bench_state *st)
{
    for (size_t i = 0; i < MAX_IO; i++) {
        free(st->inputs[i].data);
        free(st->outputs[i].data);
    }
    free(st->times);
    segrt_context_destroy(st->ctx);
    segrt_engine_destroy(st->engine);
    segrt_build_options_destroy(st->opts);
    segrt_model_destroy(st->optimized);
    segrt_model_destroy(st->model);
}

/* splitmix64: a fixed seed gives the same inputs on every machine. */
static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *state) { return (double)(next_random(state) >> 11) * 0x1.0p-53; }

static double normal01(uint64_t *state)
{
    /* Box-Muller; 1 - u keeps the logarithm's argument in (0, 1]. */
    double u1 = 1.0 - uniform01(state), u2 = uniform01(state);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static void fill_random(segrt_tensor *t, int64_t numel, uint64_t *state)
{
    bool is_float = sg_dtype_is_float(t->dtype);
    for (int64_t i = 0; i < numel; i++) {
        double v;
        if (is_float)
            v = normal01(state);
        else if (t->dtype == SEGRT_DTYPE_BOOL)
            v = (double)(next_random(state) & 1);
        else
            v = (double)(next_random(state) & 3); /* small and non-negative: safe as indices too */
        sg_dtype_store_f64(t->dtype, t->data, i, v);
    }
}

/* Allocates t->data for t's dtype and dims. */
static bool alloc_tensor(segrt_tensor *t, int64_t *numel)
{
    sg_tensor v = {t->dtype, t->rank, {0}, NULL};
    memcpy(v.dims, t->dims, sizeof v.dims);
    size_t bytes = sg_tensor_bytes(&v);
    *numel = sg_tensor_numel(&v);
    t->data = malloc(bytes ? bytes : 1);
    t->memory = SEGRT_MEMORY_HOST;
    return t->data != NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest rank: the ceil(p/100 * n)-th smallest, in integers so that
 * 0.9 * 20 is exactly 18. */
static double percentile(const double *sorted, int64_t n, int64_t p)
{
    int64_t rank = (p * n + 99) / 100;
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return sorted[rank - 1];
}

static const shape_arg *find_shape(const bench_args *args, const char *name)
{
    /* The last --shape for a name wins, as segrt_build_options_set_shape does. */
    for (int k = args->n_shapes - 1; k >= 0; k--)
        if (strcmp(args->shapes[k].name, name) == 0)
            return &args->shapes[k];
    return NULL;
}

/* Loads, checks that every input has its dims, builds and allocates. */
static int prepare(const bench_args *args, bench_state *st)
{
    segrt_status s;
    if ((s = segrt_model_load(args->path, &st->model)) != SEGRT_OK)
        return cli_fail(s);
    st->n_in = segrt_model_input_count(st->model);
    st->n_out = segrt_model_output_count(st->model);
    if (st->n_in > MAX_IO || st->n_out > MAX_IO)
        return cli_usage_error("%s: more than %d inputs or outputs", args->path, MAX_IO);
    for (int k = 0; k < args->n_shapes; k++) {
        bool found = false;
        for (size_t i = 0; i < st->n_in && !found; i++) {
            segrt_tensor_desc d;
            found = segrt_model_input(st->model, i, &d) == SEGRT_OK && strcmp(d.name, args->shapes[k].name) == 0;
        }
        if (!found)
            return cli_usage_error("%s: --shape names `%s`, which is not an input of the model", args->path,
                                   args->shapes[k].name);
    }
    /* Each input's dims: from --shape, else the declared ones, which must
     * then all be fixed. */
    for (size_t i = 0; i < st->n_in; i++) {
        segrt_tensor_desc d;
        if ((s = segrt_model_input(st->model, i, &d)) != SEGRT_OK)
            return cli_fail(s);
        segrt_tensor *t = &st->inputs[i];
        st->input_names[i] = d.name;
        t->dtype = d.dtype;
        const shape_arg *sh = find_shape(args, d.name);
        if (sh) {
            t->rank = sh->rank;
            memcpy(t->dims, sh->dims, sizeof t->dims);
            continue;
        }
        bool fixed = d.rank >= 0;
        for (int32_t k = 0; k < d.rank; k++)
            fixed = fixed && d.dims[k] >= 0;
        if (!fixed) {
            char dims[512];
            return cli_usage_error("%s: input `%s` has dims %s, not all fixed: give them with --shape %s=DIMS",
                                   args->path, d.name, cli_format_dims(&d, dims, sizeof dims), d.name);
        }
        t->rank = d.rank;
        memcpy(t->dims, d.dims, sizeof t->dims);
    }
    int rc = cli_engine_options(&args->eo, &st->opts);
    if (rc != CLI_OK)
        return rc;
    if ((s = segrt_build_options_set_threads(st->opts, (int32_t)args->threads)) != SEGRT_OK)
        return cli_fail(s);
    for (size_t i = 0; i < st->n_in; i++)
        if ((s = segrt_build_options_set_shape(st->opts, st->input_names[i], st->inputs[i].rank,
                                               st->inputs[i].dims)) != SEGRT_OK)
            return cli_fail(s);
    /* The engine optimizes on its own; this copy is for counting FLOPs. */
    if ((s = segrt_model_optimize(st->model, st->opts, &st->optimized)) != SEGRT_OK)
        return cli_fail(s);
    if ((rc = cli_engine_build(st->model, st->opts, &args->eo, &st->engine, NULL)) != CLI_OK)
        return rc;
    if ((s = segrt_context_create(st->engine, &st->ctx)) != SEGRT_OK)
        return cli_fail(s);
    uint64_t rng = (uint64_t)args->seed;
    for (size_t i = 0; i < st->n_in; i++) {
        int64_t numel;
        if (!alloc_tensor(&st->inputs[i], &numel)) {
            fprintf(stderr, "segrt: %s: out of memory for input `%s`\n", args->path, st->input_names[i]);
            return CLI_RUNTIME;
        }
        fill_random(&st->inputs[i], numel, &rng);
    }
    if ((s = segrt_engine_output_shapes(st->engine, st->n_in, st->inputs, st->n_out, st->outputs)) != SEGRT_OK)
        return cli_fail(s);
    for (size_t j = 0; j < st->n_out; j++) {
        int64_t numel;
        if (!alloc_tensor(&st->outputs[j], &numel)) {
            fprintf(stderr, "segrt: %s: out of memory for output %zu\n", args->path, j);
            return CLI_RUNTIME;
        }
    }
    return CLI_OK;
}

/* Separate runs, so that the step clocks do not touch the timed ones. */
static int profile(const bench_args *args, bench_state *st)
{
    segrt_status s = sg_context_profile(st->ctx, true);
    for (int64_t i = 0; s == SEGRT_OK && i < args->iters; i++)
        s = segrt_context_run(st->ctx, st->n_in, st->inputs, st->n_out, st->outputs);
    if (s != SEGRT_OK)
        return cli_fail(s);
    FILE *f = args->json ? stderr : stdout;
    fprintf(f, "\nprofile (%lld runs):\n", (long long)args->iters);
    sg_context_profile_print(st->ctx, f);
    return CLI_OK;
}

static int measure(const bench_args *args, bench_state *st, bench_result *r)
{
    segrt_status s;
    for (int64_t i = 0; i < args->warmup; i++)
        if ((s = segrt_context_run(st->ctx, st->n_in, st->inputs, st->n_out, st->outputs)) != SEGRT_OK)
            return cli_fail(s);
    st->times = malloc((size_t)args->iters * sizeof *st->times);
    if (!st->times) {
        fprintf(stderr, "segrt: out of memory for %lld timings\n", (long long)args->iters);
        return CLI_RUNTIME;
    }
    for (int64_t i = 0; i < args->iters; i++) {
        double t0 = now_s();
        s = segrt_context_run(st->ctx, st->n_in, st->inputs, st->n_out, st->outputs);
        double t1 = now_s();
        if (s != SEGRT_OK)
            return cli_fail(s);
        st->times[i] = t1 - t0;
    }

    memset(r, 0, sizeof *r);
    int64_t n = args->iters;
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += st->times[i];
    r->mean = sum / (double)n;
    /* Sort a copy: times_ms in the JSON keeps the order the runs came in. */
    double *sorted = malloc((size_t)n * sizeof *sorted);
    if (!sorted) {
        fprintf(stderr, "segrt: out of memory for %lld timings\n", (long long)n);
        return CLI_RUNTIME;
    }
    memcpy(sorted, st->times, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_double);
    r->median = percentile(sorted, n, 50);
    r->p90 = percentile(sorted, n, 90);
    r->p99 = percentile(sorted, n, 99);
    r->min = sorted[0];
    r->max = sorted[n - 1];
    free(sorted);

    r->batch = st->n_in && st->inputs[0].rank > 0 ? st->inputs[0].dims[0] : 1;
    r->threads = args->threads;
    if (r->threads == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        r->threads = cpus > 0 ? cpus : 1;
    }
    struct rusage ru;
    /* Linux reports ru_maxrss in KiB. */
    r->peak_bytes = getrusage(RUSAGE_SELF, &ru) == 0 ? (int64_t)ru.ru_maxrss * 1024 : -1;
    if (segrt_model_flops(st->optimized, &r->flops) != SEGRT_OK)
        r->flops = NAN;
    return CLI_OK;
}

static const char *device_name(const bench_args *args)
{
    return args->device == SEGRT_DEVICE_CUDA ? args->device_label : "cpu";
}

static void print_text(const bench_args *args, const bench_state *st, const bench_result *r)
{
    char dims[256];
    printf("model: %s\n", args->path);
    printf("shapes:");
    for (size_t i = 0; i < st->n_in; i++)
        printf(" %s=%s", st->input_names[i],
               sg_dims_format(st->inputs[i].dims, st->inputs[i].rank, dims, sizeof dims));
    printf("\n");
    printf("device: %s, threads: %lld\n", device_name(args), (long long)r->threads);
    printf("runs: %lld warmup, %lld timed\n", (long long)args->warmup, (long long)args->iters);
    printf("latency (ms): p50 %.3f  p90 %.3f  p99 %.3f  min %.3f  mean %.3f\n", r->median * 1e3,
           r->p90 * 1e3, r->p99 * 1e3, r->min * 1e3, r->mean * 1e3);
    printf("throughput: %.2f samples/s (batch %lld at the median)\n", (double)r->batch / r->median,
           (long long)r->batch);
    if (isnan(r->flops))
        printf("GFLOP per run: unknown\n");
    else
        printf("GFLOP per run: %.4f, %.2f GFLOP/s at the median\n", r->flops / 1e9,
               r->flops / 1e9 / r->median);
    printf("peak memory: %.1f MB (%lld bytes)\n", (double)r->peak_bytes / 1e6, (long long)r->peak_bytes);
}

static void print_json(const bench_args *args, const bench_state *st, const bench_result *r)
{
    json_out j;
    json_init(&j, stdout);
    json_begin_object(&j);
    json_key(&j, "model");
    json_string(&j, args->path);
    json_key(&j, "segrt_version");
    json_string(&j, segrt_version());
    json_key(&j, "device");
    json_string(&j, device_name(args));
    json_key(&j, "threads");
    json_int(&j, r->threads);
    json_key(&j, "shapes");
    json_begin_object(&j);
    for (size_t i = 0; i < st->n_in; i++) {
        json_key(&j, st->input_names[i]);
        json_begin_array(&j);
        for (int32_t d = 0; d < st->inputs[i].rank; d++)
            json_int(&j, st->inputs[i].dims[d]);
        json_end_array(&j);
    }
    json_end_object(&j);
    json_key(&j, "iters");
    json_int(&j, args->iters);
    json_key(&j, "warmup");
    json_int(&j, args->warmup);
    json_key(&j, "seed");
    json_int(&j, args->seed);
    json_key(&j, "batch");
    json_int(&j, r->batch);
    json_key(&j, "median_ms");
    json_double(&j, r->median * 1e3);
    json_key(&j, "p50_ms");
    json_double(&j, r->median * 1e3);
    json_key(&j, "p90_ms");
    json_double(&j, r->p90 * 1e3);
    json_key(&j, "p99_ms");
    json_double(&j, r->p99 * 1e3);
    json_key(&j, "min_ms");
    json_double(&j, r->min * 1e3);
    json_key(&j, "max_ms");
    json_double(&j, r->max * 1e3);
    json_key(&j, "mean_ms");
    json_double(&j, r->mean * 1e3);
    json_key(&j, "times_ms");
    json_begin_array(&j);
    for (int64_t i = 0; i < args->iters; i++)
        json_double(&j, st->times[i] * 1e3);
    json_end_array(&j);
    json_key(&j, "throughput_per_s");
    json_double(&j, (double)r->batch / r->median);
    json_key(&j, "peak_bytes");
    json_int(&j, r->peak_bytes);
    json_key(&j, "gflop");
    json_double(&j, r->flops / 1e9);
    json_key(&j, "gflops_per_s");
    json_double(&j, r->flops / 1e9 / r->median);
    json_end_object(&j);
}

static int parse_args(int argc, char **argv, bench_args *args)
{
    memset(args, 0, sizeof *args);
    cli_engine_opts_init(&args->eo);
    args->device = SEGRT_DEVICE_CPU;
    args->iters = 20;
    args->warmup = 3;
    args->seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = i + 1 < argc;
        int taken;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(bench_usage, stdout);
            return -1;
        } else if (strcmp(a, "--shape") == 0 || strncmp(a, "--shape=", 8) == 0) {
            char *v = a[7] == '=' ? argv[i] + 8 : (has_value ? argv[++i] : NULL);
            if (args->n_shapes == MAX_IO)
                return cli_usage_error("bench: more than %d --shape options", MAX_IO);
            shape_arg *sh = &args->shapes[args->n_shapes];
            if (!v || !cli_parse_shape(v, &sh->name, &sh->rank, sh->dims))
                return cli_usage_error("--shape wants NAME=DIMS, like image=1x3x512x512");
            args->n_shapes++;
        } else if (strcmp(a, "--threads") != 0 && (taken = cli_engine_option(&args->eo, argc, argv, &i)) != 0) {
            if (taken < 0)
                return CLI_BAD_INPUT;
            args->device = args->eo.device;
            snprintf(args->device_label, sizeof args->device_label, "cuda:%d", (int)args->eo.device_index);
        } else if (strcmp(a, "--iters") == 0) {
            if (!has_value || !cli_parse_int(argv[++i], &args->iters) || args->iters < 1 ||
                args->iters > 10000000)
                return cli_usage_error("--iters wants a number of timed runs, 1 or more");
        } else if (strcmp(a, "--warmup") == 0) {
            if (!has_value || !cli_parse_int(argv[++i], &args->warmup) || args->warmup > 10000000)
                return cli_usage_error("--warmup wants a number of untimed runs, 0 or more");
        } else if (strcmp(a, "--threads") == 0) {
            if (!has_value || !cli_parse_int(argv[++i], &args->threads) || args->threads > 4096)
                return cli_usage_error("--threads wants a number of threads (0: all cores)");
        } else if (strcmp(a, "--seed") == 0) {
            if (!has_value || !cli_parse_int(argv[++i], &args->seed))
                return cli_usage_error("--seed wants a non-negative integer");
        } else if (strcmp(a, "--json") == 0) {
            args->json = true;
        } else if (strcmp(a, "--profile") == 0) {
            args->profile = true;
        } else if (a[0] == '-') {
            return cli_usage_error("bench: unknown option `%s`", a);
        } else if (!args->path) {
            args->path = a;
        } else {
            return cli_usage_error("bench: more than one model given (`%s`, `%s`)", args->path, a);
        }
    }
    if (!args->path)
        return cli_usage_error("bench: no model given (segrt bench --help says how)");
    return CLI_OK;
}

int cmd_bench(int argc, char **argv)
{
    /* bench_args holds MAX_IO shapes: kept off the stack. */
    bench_args *args = calloc(1, sizeof *args);
    bench_state *st = calloc(1, sizeof *st);
    if (!args || !st) {
        free(args);
        free(st);
        fprintf(stderr, "segrt: out of memory\n");
        return CLI_RUNTIME;
    }
    int rc = parse_args(argc, argv, args);
    if (rc < 0) {
        rc = CLI_OK; /* --help */
    } else if (rc == CLI_OK) {
        bench_result r;
        rc = prepare(args, st);
        if (rc == CLI_OK)
            rc = measure(args, st, &r);
        if (rc == CLI_OK) {
            if (args->json)
                print_json(args, st, &r);
            else
                print_text(args, st, &r);
        }
        if (rc == CLI_OK && args->profile)
            rc = profile(args, st);
    }
    bench_state_free(st);
    free(st);
    free(args);
    return rc;
}
