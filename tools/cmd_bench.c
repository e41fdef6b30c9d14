/* segrt bench: latency, throughput, memory and GFLOP/s of a model on
 * random inputs of the bound shapes, at one batch size or a sweep of them.
 *
 * (About 1,000 lines as one file: the command's options, its runs, the
 * sweep and the text and JSON reports share one state and are used by no
 * other command.) */
#include "cli_engine.h"
#include "json_out.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static const char bench_usage[] =
    "usage: segrt bench MODEL|PLAN --shape NAME=DIMS... [--device cpu|cuda|cuda:N] [--precision P]\n"
    "                   [--iters N] [--warmup N] [--threads N] [--seed N] [--io host|device]\n"
    "                   [--batch-sweep 1,2,4,8,16] [--json] [--profile] [engine options]\n"
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
    "  peak memory     the peak resident set of the whole process (getrusage); on a\n"
    "                  GPU also the device memory the engine and context hold\n"
    "                  (weights, activations, workspace: segrt_engine_get_info) plus\n"
    "                  bench's I/O buffers, and the measured drop in the device's free\n"
    "                  memory from before the build to after the timed runs\n"
    "  threads         --threads, or the number of online CPUs when it is 0 (default)\n"
    "PLAN is a file from `segrt build`; it runs on the GPU with the profile it was built\n"
    "with (a shape outside it is an error that gives the range).\n"
    "--io device       (the default with --device cuda) the inputs are copied to device\n"
    "                  memory once and the outputs stay there, so the timed runs are\n"
    "                  device-resident, as a PyTorch benchmark of CUDA tensors is\n"
    "--io host         every timed run also copies its inputs from and its outputs to\n"
    "                  host memory (the only choice on the CPU)\n"
    "--batch-sweep L   times each batch size of the comma-separated list L in turn:\n"
    "                  dim 0 of every input whose dim 0 is not fixed by the model takes\n"
    "                  the value, the other dims come from --shape (or the model). On a\n"
    "                  GPU one engine serves the sweep (a profile from the smallest to\n"
    "                  the largest batch; each size compiles on its first warm-up run);\n"
    "                  on the CPU each size gets its own engine. Warm-up runs are per\n"
    "                  batch. One row per batch: p50, p90, p99 ms, samples/s, ms/sample,\n"
    "                  TFLOP/s at the median, and memory (GPU: the drop in free device\n"
    "                  memory since before the build; CPU: the peak resident set)\n"
    "--json            one JSON object instead, with keys model, segrt_version, device,\n"
    "                  precision, io, threads, shapes (name -> dims), iters, warmup,\n"
    "                  seed, batch, median_ms, p50_ms, p90_ms, p99_ms, min_ms, max_ms,\n"
    "                  mean_ms, times_ms, throughput_per_s, ms_per_sample, peak_bytes,\n"
    "                  gflop, gflops_per_s, tflops_per_s, and on a GPU\n"
    "                  device_free_drop_bytes and device_memory (weight_bytes,\n"
    "                  arena_bytes, workspace_bytes, io_buffer_bytes, held_bytes,\n"
    "                  free_drop_bytes); with --batch-sweep the per-batch keys (batch,\n"
    "                  shapes, the times, throughput, FLOPs, memory) move into an array\n"
    "                  \"rows\", one object per batch, next to \"batch_sweep\"; a number\n"
    "                  JSON cannot hold is the string \"inf\" or \"nan\", an unknown one null.\n"
    "--profile         after the timed runs, --iters more runs with every step of the\n"
    "                  plan timed: a table of steps, slowest first, with the kernel\n"
    "                  that ran each (oneDNN's implementation, or segrt's); with\n"
    "                  --batch-sweep, of the last batch\n"
    "engine options as for segrt run: --fp32-ops, --allow-cpu-fallback, --workspace,\n"
    "--autotune, --disable-kernels, --target-arch, --no-cache, --cache-dir.\n";

#define MAX_IO 64
#define MAX_SWEEP 64

typedef struct shape_arg {
    const char *name;
    int32_t rank;
    int64_t dims[SEGRT_MAX_RANK];
} shape_arg;

typedef enum bench_io { BENCH_IO_DEFAULT, BENCH_IO_HOST, BENCH_IO_DEVICE } bench_io;

typedef struct bench_args {
    const char *path;
    shape_arg shapes[MAX_IO];
    int n_shapes;
    cli_engine_opts eo;     /* --device, --precision and the other engine options */
    int64_t threads, iters, warmup, seed;
    int64_t sweep[MAX_SWEEP];
    int n_sweep;            /* 0: no --batch-sweep */
    bench_io io;
    bool json;
    bool profile;
} bench_args;

/* One batch size's measurements. */
typedef struct bench_row {
    int64_t batch;
    double median, p90, p99, min, max, mean; /* seconds */
    double flops;                            /* of one run; NaN when unknown */
    int64_t peak_bytes;                      /* the process's peak resident set so far */
    int64_t device_drop;                     /* drop in free device memory since before the build; -1: unknown */
    double *times;                           /* seconds of each timed run, in the order they ran */
} bench_row;

/* A tensor's memory: host, and device with --io device. Both only grow. */
typedef struct io_buf {
    void *host, *dev;
    size_t host_cap, dev_cap;
} io_buf;

typedef struct bench_state {
    bool plan;                        /* MODEL is a plan file */
    segrt_model *model;               /* NULL for a plan */
    segrt_engine *engine;
    segrt_context *ctx;
    segrt_engine_info info;
    int32_t device;                   /* the CUDA device, or -1 on the CPU */
    bool device_io;                   /* --io device */
    int64_t free_before;              /* the device's free memory before the build; -1: unknown */
    int64_t threads;
    size_t n_in, n_out;
    const char *input_names[MAX_IO]; /* owned by the model or the engine */
    segrt_tensor tmpl[MAX_IO];        /* each input's dtype and dims (dim 0 of a batched one per row) */
    bool batched[MAX_IO];             /* dim 0 follows --batch-sweep */
    segrt_tensor inputs[MAX_IO], outputs[MAX_IO];
    io_buf in_buf[MAX_IO], out_buf[MAX_IO];
    bench_row rows[MAX_SWEEP];
    int n_rows;
} bench_state;

static void bench_state_free(bench_state *st)
{
    for (size_t i = 0; i < MAX_IO; i++) {
        free(st->in_buf[i].host);
        free(st->out_buf[i].host);
        segrt_device_free(st->in_buf[i].dev);
        segrt_device_free(st->out_buf[i].dev);
    }
    for (int r = 0; r < st->n_rows; r++)
        free(st->rows[r].times);
    segrt_context_destroy(st->ctx);
    segrt_engine_destroy(st->engine);
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

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* float16 and bfloat16 of f, rounded to nearest even as IEEE conversion
 * does (random inputs need no more than that, and no library call). */
static uint16_t to_half(float f)
{
    uint32_t u = float_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t abs = u & 0x7fffffffu;
    if (abs >= 0x7f800000u) /* inf or nan */
        return sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0);
    if (abs >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return sign | 0x7c00;
    if (abs < 0x38800000u) { /* below the smallest normal half: subnormal */
        float v;
        memcpy(&v, &abs, 4);
        return sign | (uint16_t)lrintf(v * 16777216.0f); /* units of the subnormal step */
    }
    abs += 0xfff + ((abs >> 13) & 1);
    return sign | (uint16_t)((abs - 0x38000000u) >> 13);
}

static uint16_t to_bf16(float f)
{
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* quiet nan */
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* Element i of data, of dtype t, set to v (integers: v is small, >= 0). */
static void store_value(segrt_dtype t, void *data, int64_t i, double v)
{
    switch (t) {
    case SEGRT_DTYPE_FLOAT32:
        ((float *)data)[i] = (float)v;
        break;
    case SEGRT_DTYPE_FLOAT64:
        ((double *)data)[i] = v;
        break;
    case SEGRT_DTYPE_FLOAT16:
        ((uint16_t *)data)[i] = to_half((float)v);
        break;
    case SEGRT_DTYPE_BFLOAT16:
        ((uint16_t *)data)[i] = to_bf16((float)v);
        break;
    case SEGRT_DTYPE_BOOL:
        ((uint8_t *)data)[i] = v != 0;
        break;
    case SEGRT_DTYPE_UINT8:
        ((uint8_t *)data)[i] = (uint8_t)v;
        break;
    case SEGRT_DTYPE_INT8:
        ((int8_t *)data)[i] = (int8_t)v;
        break;
    case SEGRT_DTYPE_UINT16:
        ((uint16_t *)data)[i] = (uint16_t)v;
        break;
    case SEGRT_DTYPE_INT16:
        ((int16_t *)data)[i] = (int16_t)v;
        break;
    case SEGRT_DTYPE_INT32:
        ((int32_t *)data)[i] = (int32_t)v;
        break;
    case SEGRT_DTYPE_INT64:
        ((int64_t *)data)[i] = (int64_t)v;
        break;
    case SEGRT_DTYPE_UNDEFINED:
        break;
    }
}

static void fill_random(segrt_tensor *t, int64_t numel, uint64_t *state)
{
    bool is_float = t->dtype == SEGRT_DTYPE_FLOAT32 || t->dtype == SEGRT_DTYPE_FLOAT16 ||
                    t->dtype == SEGRT_DTYPE_BFLOAT16 || t->dtype == SEGRT_DTYPE_FLOAT64;
    for (int64_t i = 0; i < numel; i++) {
        double v;
        if (is_float)
            v = normal01(state);
        else if (t->dtype == SEGRT_DTYPE_BOOL)
            v = (double)(next_random(state) & 1);
        else
            v = (double)(next_random(state) & 3); /* small and non-negative: safe as indices too */
        store_value(t->dtype, t->data, i, v);
    }
}

/* The tensor's bytes, and (numel not NULL) its elements. */
static size_t tensor_bytes(const segrt_tensor *t, int64_t *numel)
{
    int64_t n = 1;
    for (int32_t d = 0; d < t->rank; d++)
        n *= t->dims[d];
    if (numel)
        *numel = n;
    return (size_t)n * segrt_dtype_size(t->dtype);
}

static int grow_host(io_buf *b, size_t bytes, const char *what)
{
    if (bytes <= b->host_cap && b->host)
        return CLI_OK;
    void *p = realloc(b->host, bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "segrt: out of memory for %zu bytes of %s\n", bytes, what);
        return CLI_RUNTIME;
    }
    b->host = p;
    b->host_cap = bytes;
    return CLI_OK;
}

static int grow_device(io_buf *b, size_t bytes, int32_t device)
{
    if (bytes <= b->dev_cap && b->dev)
        return CLI_OK;
    segrt_device_free(b->dev);
    b->dev = NULL;
    b->dev_cap = 0;
    segrt_status s = segrt_device_alloc(device, bytes, &b->dev);
    if (s != SEGRT_OK)
        return cli_fail(s);
    b->dev_cap = bytes;
    return CLI_OK;
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

static segrt_status input_desc(const bench_state *st, size_t i, segrt_tensor_desc *d)
{
    return st->plan ? segrt_engine_input(st->engine, i, d) : segrt_model_input(st->model, i, d);
}

/* The device's free memory now, or -1 when it cannot be read. */
static int64_t device_free_bytes(int32_t device)
{
    segrt_device_info di;
    if (device < 0 || segrt_cuda_device_info(device, &di) != SEGRT_OK)
        return -1;
    return (int64_t)di.free_memory_bytes;
}

/* Loads the model, or the plan (after the free-memory reading, so that the
 * plan's weights count in the drop). */
static int open_model(const bench_args *args, bench_state *st)
{
    st->plan = cli_is_plan_file(args->path);
    st->device = st->plan || args->eo.device == SEGRT_DEVICE_CUDA ? args->eo.device_index : -1;
    if (args->io == BENCH_IO_DEVICE && st->device < 0)
        return cli_usage_error("--io device needs --device cuda: a CPU engine reads and writes host memory");
    st->device_io = st->device >= 0 && args->io != BENCH_IO_HOST;
    /* The first CUDA call creates the process's CUDA context; reading
     * the free memory here keeps the context itself out of the drop. */
    st->free_before = device_free_bytes(st->device);
    if (st->plan) {
        int rc = cli_plan_load(args->path, &args->eo, &st->engine);
        segrt_engine_info info;
        if (rc == CLI_OK && segrt_engine_get_info(st->engine, &info) == SEGRT_OK && info.device == SEGRT_DEVICE_CPU) {
            /* A CPU plan: host memory, whatever the machine's GPUs. */
            if (args->io == BENCH_IO_DEVICE)
                return cli_usage_error("--io device needs a CUDA plan: a CPU engine reads and writes host memory");
            st->device = -1;
            st->device_io = false;
            st->free_before = -1;
        }
        return rc;
    }
    int rc = cli_engine_check_cpu(&args->eo);
    if (rc != CLI_OK)
        return rc;
    segrt_status s = segrt_model_load(args->path, &st->model);
    return s == SEGRT_OK ? CLI_OK : cli_fail(s);
}

/* Each input's dtype and dims, from --shape or the declared ones; with
 * --batch-sweep, which inputs take the batch. */
static int resolve_inputs(const bench_args *args, bench_state *st)
{
    segrt_status s;
    st->n_in = st->plan ? segrt_engine_input_count(st->engine) : segrt_model_input_count(st->model);
    st->n_out = st->plan ? segrt_engine_output_count(st->engine) : segrt_model_output_count(st->model);
    if (st->n_in > MAX_IO || st->n_out > MAX_IO)
        return cli_usage_error("%s: more than %d inputs or outputs", args->path, MAX_IO);
    for (int k = 0; k < args->n_shapes; k++) {
        bool found = false;
        for (size_t i = 0; i < st->n_in && !found; i++) {
            segrt_tensor_desc d;
            found = input_desc(st, i, &d) == SEGRT_OK && strcmp(d.name, args->shapes[k].name) == 0;
        }
        if (!found)
            return cli_usage_error("%s: --shape names `%s`, which is not an input of the model", args->path,
                                   args->shapes[k].name);
    }
    bool any_batched = false;
    for (size_t i = 0; i < st->n_in; i++) {
        segrt_tensor_desc d;
        if ((s = input_desc(st, i, &d)) != SEGRT_OK)
            return cli_fail(s);
        segrt_tensor *t = &st->tmpl[i];
        st->input_names[i] = d.name;
        t->dtype = d.dtype;
        /* The model leaves dim 0 open: the batch. */
        st->batched[i] = args->n_sweep > 0 && d.rank >= 1 && d.dims[0] < 0;
        any_batched |= st->batched[i];
        const shape_arg *sh = find_shape(args, d.name);
        if (sh) {
            t->rank = sh->rank;
            memcpy(t->dims, sh->dims, sizeof t->dims);
            continue;
        }
        bool fixed = d.rank >= 0;
        for (int32_t k = st->batched[i] ? 1 : 0; k < d.rank; k++)
            fixed = fixed && d.dims[k] >= 0;
        if (!fixed) {
            char dims[512];
            return cli_usage_error("%s: input `%s` has dims %s, not all fixed: give them with --shape %s=DIMS",
                                   args->path, d.name, cli_format_dims(&d, dims, sizeof dims), d.name);
        }
        t->rank = d.rank;
        memcpy(t->dims, d.dims, sizeof t->dims);
    }
    if (args->n_sweep && !any_batched)
        return cli_usage_error("%s: --batch-sweep needs an input whose dim 0 (the batch) the %s leaves open; "
                               "every input's dims are fixed",
                               args->path, st->plan ? "plan's profile" : "model");
    return CLI_OK;
}

static int64_t sweep_min(const bench_args *args)
{
    int64_t m = args->sweep[0];
    for (int k = 1; k < args->n_sweep; k++)
        m = args->sweep[k] < m ? args->sweep[k] : m;
    return m;
}

static int64_t sweep_max(const bench_args *args)
{
    int64_t m = args->sweep[0];
    for (int k = 1; k < args->n_sweep; k++)
        m = args->sweep[k] > m ? args->sweep[k] : m;
    return m;
}

/* Binds every input: fixed at its template, except that dim 0 of a batched
 * one ranges over [lo, hi], compiled for hi (a profile when lo < hi). */
static int bind_shapes(const bench_state *st, segrt_build_options *opts, int64_t lo, int64_t hi)
{
    for (size_t i = 0; i < st->n_in; i++) {
        const segrt_tensor *t = &st->tmpl[i];
        int64_t mn[SEGRT_MAX_RANK], mx[SEGRT_MAX_RANK];
        memcpy(mn, t->dims, sizeof mn);
        memcpy(mx, t->dims, sizeof mx);
        if (st->batched[i]) {
            mn[0] = lo;
            mx[0] = hi;
        }
        segrt_status s = lo == hi || !st->batched[i]
                             ? segrt_build_options_set_shape(opts, st->input_names[i], t->rank, mx)
                             : segrt_build_options_set_shape_range(opts, st->input_names[i], t->rank, mn, mx, mx);
        if (s != SEGRT_OK)
            return cli_fail(s);
    }
    return CLI_OK;
}

/* (Re)builds the engine from the model, batched inputs over [lo, hi], and
 * its context. */
static int build_engine(const bench_args *args, bench_state *st, int64_t lo, int64_t hi)
{
    segrt_context_destroy(st->ctx);
    segrt_engine_destroy(st->engine);
    st->ctx = NULL;
    st->engine = NULL;
    segrt_build_options *opts;
    int rc = cli_engine_options(&args->eo, &opts);
    if (rc != CLI_OK)
        return rc;
    segrt_status s = segrt_build_options_set_threads(opts, (int32_t)args->threads);
    rc = s == SEGRT_OK ? bind_shapes(st, opts, lo, hi) : cli_fail(s);
    if (rc == CLI_OK)
        rc = cli_engine_build(st->model, opts, &args->eo, &st->engine, NULL);
    segrt_build_options_destroy(opts);
    return rc;
}

static int make_context(bench_state *st)
{
    segrt_status s;
    if (!st->ctx && (s = segrt_context_create(st->engine, &st->ctx)) != SEGRT_OK)
        return cli_fail(s);
    if ((s = segrt_engine_get_info(st->engine, &st->info)) != SEGRT_OK)
        return cli_fail(s);
    return CLI_OK;
}

/* Inputs of this batch (seeded random, the same for the same seed and
 * dims), uploaded once with --io device, and output buffers. */
static int prepare_row(const bench_args *args, bench_state *st, int64_t batch)
{
    uint64_t rng = (uint64_t)args->seed;
    segrt_status s;
    int rc;
    for (size_t i = 0; i < st->n_in; i++) {
        segrt_tensor *t = &st->inputs[i];
        *t = st->tmpl[i];
        if (st->batched[i])
            t->dims[0] = batch;
        int64_t numel;
        size_t bytes = tensor_bytes(t, &numel);
        io_buf *b = &st->in_buf[i];
        if ((rc = grow_host(b, bytes, "an input")) != CLI_OK)
            return rc;
        t->data = b->host;
        t->memory = SEGRT_MEMORY_HOST;
        fill_random(t, numel, &rng);
        if (!st->device_io)
            continue;
        if ((rc = grow_device(b, bytes, st->device)) != CLI_OK)
            return rc;
        if ((s = segrt_device_copy(b->dev, SEGRT_MEMORY_DEVICE, b->host, SEGRT_MEMORY_HOST, bytes, st->device)) !=
            SEGRT_OK)
            return cli_fail(s);
        t->data = b->dev;
        t->memory = SEGRT_MEMORY_DEVICE;
        t->device = st->device;
    }
    if ((s = segrt_engine_output_shapes(st->engine, st->n_in, st->inputs, st->n_out, st->outputs)) != SEGRT_OK)
        return cli_fail(s);
    for (size_t j = 0; j < st->n_out; j++) {
        segrt_tensor *t = &st->outputs[j];
        size_t bytes = tensor_bytes(t, NULL);
        io_buf *b = &st->out_buf[j];
        rc = st->device_io ? grow_device(b, bytes, st->device) : grow_host(b, bytes, "an output");
        if (rc != CLI_OK)
            return rc;
        t->data = st->device_io ? b->dev : b->host;
        t->memory = st->device_io ? SEGRT_MEMORY_DEVICE : SEGRT_MEMORY_HOST;
        t->device = st->device_io ? st->device : 0;
    }
    return CLI_OK;
}

/* FLOPs of one run at this row's dims, from the model optimized for them
 * (for a plan, from the graph the plan file carries); NaN when unknown. */
static double row_flops(const bench_state *st)
{
    double flops = NAN;
    if (!st->model) {
        if (segrt_engine_flops(st->engine, st->n_in, st->inputs, &flops) != SEGRT_OK)
            flops = NAN;
        return flops;
    }
    segrt_build_options *o = NULL;
    segrt_model *opt = NULL;
    segrt_status s = segrt_build_options_create(&o);
    for (size_t i = 0; s == SEGRT_OK && i < st->n_in; i++)
        s = segrt_build_options_set_shape(o, st->input_names[i], st->inputs[i].rank, st->inputs[i].dims);
    if (s == SEGRT_OK)
        s = segrt_model_optimize(st->model, o, &opt);
    if (s == SEGRT_OK && segrt_model_flops(opt, &flops) != SEGRT_OK)
        flops = NAN;
    segrt_model_destroy(opt);
    segrt_build_options_destroy(o);
    return flops;
}

static int summarize(const bench_args *args, bench_row *r)
{
    int64_t n = args->iters;
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += r->times[i];
    r->mean = sum / (double)n;
    /* Sort a copy: times_ms in the JSON keeps the order the runs came in. */
    double *sorted = malloc((size_t)n * sizeof *sorted);
    if (!sorted) {
        fprintf(stderr, "segrt: out of memory for %lld timings\n", (long long)n);
        return CLI_RUNTIME;
    }
    memcpy(sorted, r->times, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_double);
    r->median = percentile(sorted, n, 50);
    r->p90 = percentile(sorted, n, 90);
    r->p99 = percentile(sorted, n, 99);
    r->min = sorted[0];
    r->max = sorted[n - 1];
    free(sorted);
    return CLI_OK;
}

/* Warm-up runs (the first run of new dims compiles them), timed runs, and
 * what the row reports. */
static int measure(const bench_args *args, bench_state *st, bench_row *r)
{
    segrt_status s;
    for (int64_t i = 0; i < args->warmup; i++)
        if ((s = segrt_context_run(st->ctx, st->n_in, st->inputs, st->n_out, st->outputs)) != SEGRT_OK)
            return cli_fail(s);
    r->times = malloc((size_t)args->iters * sizeof *r->times);
    if (!r->times) {
        fprintf(stderr, "segrt: out of memory for %lld timings\n", (long long)args->iters);
        return CLI_RUNTIME;
    }
    for (int64_t i = 0; i < args->iters; i++) {
        double t0 = now_s();
        s = segrt_context_run(st->ctx, st->n_in, st->inputs, st->n_out, st->outputs);
        double t1 = now_s();
        if (s != SEGRT_OK)
            return cli_fail(s);
        r->times[i] = t1 - t0;
    }
    int rc = summarize(args, r);
    if (rc != CLI_OK)
        return rc;
    r->flops = row_flops(st);
    struct rusage ru;
    /* Linux reports ru_maxrss in KiB. */
    r->peak_bytes = getrusage(RUSAGE_SELF, &ru) == 0 ? (int64_t)ru.ru_maxrss * 1024 : -1;
    int64_t free_now = device_free_bytes(st->device);
    r->device_drop = st->free_before >= 0 && free_now >= 0 ? st->free_before - free_now : -1;
    return CLI_OK;
}

/* One row per batch size (one row of the --shape dims without a sweep). */
static int run_rows(const bench_args *args, bench_state *st)
{
    int rc;
    int n = args->n_sweep ? args->n_sweep : 1;
    /* The CPU engine binds its shapes at build, so a CPU sweep builds one
     * engine per batch; a CUDA engine (or plan) serves all of them. */
    bool engine_per_row = args->n_sweep && !st->plan && st->device < 0;
    if (!st->plan && !engine_per_row) {
        int64_t lo = args->n_sweep ? sweep_min(args) : 0, hi = args->n_sweep ? sweep_max(args) : 0;
        if ((rc = build_engine(args, st, lo, hi)) != CLI_OK)
            return rc;
    }
    for (int k = 0; k < n; k++) {
        int64_t batch = args->n_sweep ? args->sweep[k] : 0;
        if (engine_per_row && (rc = build_engine(args, st, batch, batch)) != CLI_OK)
            return rc;
        if ((rc = make_context(st)) != CLI_OK || (rc = prepare_row(args, st, batch)) != CLI_OK)
            return rc;
        bench_row *r = &st->rows[st->n_rows++];
        memset(r, 0, sizeof *r);
        r->batch = args->n_sweep ? batch : (st->n_in && st->inputs[0].rank > 0 ? st->inputs[0].dims[0] : 1);
        if ((rc = measure(args, st, r)) != CLI_OK)
            return rc;
    }
    /* Plans compiled during the sweep may have raised the high-water marks. */
    return make_context(st);
}

/* Separate runs, so that the step clocks do not touch the timed ones. */
static int profile(const bench_args *args, bench_state *st)
{
    segrt_status s = segrt_context_profile(st->ctx, 1);
    for (int64_t i = 0; s == SEGRT_OK && i < args->iters; i++)
        s = segrt_context_run(st->ctx, st->n_in, st->inputs, st->n_out, st->outputs);
    if (s != SEGRT_OK)
        return cli_fail(s);
    FILE *f = args->json ? stderr : stdout;
    if (args->n_sweep)
        fprintf(f, "\nprofile (batch %lld, %lld runs):\n", (long long)st->rows[st->n_rows - 1].batch,
                (long long)args->iters);
    else
        fprintf(f, "\nprofile (%lld runs):\n", (long long)args->iters);
    segrt_context_profile_print(st->ctx, f);
    return CLI_OK;
}

/* --- output -------------------------------------------------------------- */

static const char *device_label(const bench_state *st, char *buf, size_t cap)
{
    if (st->info.device != SEGRT_DEVICE_CUDA)
        return "cpu";
    snprintf(buf, cap, "cuda:%d", (int)st->info.device_index);
    return buf;
}

static uint64_t io_buffer_bytes(const bench_state *st)
{
    uint64_t b = 0;
    for (size_t i = 0; i < MAX_IO; i++)
        b += st->in_buf[i].dev_cap + st->out_buf[i].dev_cap;
    return b;
}

static uint64_t held_bytes(const bench_state *st)
{
    return st->info.weight_bytes + st->info.arena_bytes + st->info.workspace_bytes + io_buffer_bytes(st);
}

static const char *io_text(const bench_state *st)
{
    return st->device_io ? "device (inputs copied to the GPU once, outputs left there: runs are device-resident)"
                         : "host (each run copies its inputs from and its outputs to host memory)";
}

static double gflop_per_s(const bench_row *r) { return r->flops / 1e9 / r->median; }

static void print_device_memory_text(const bench_state *st, const bench_row *last)
{
    const double mib = 1048576.0;
    printf("device memory held: %.1f MiB = weights %.1f + activations %.1f + workspace %.1f MiB "
           "(segrt_engine_get_info) + bench I/O buffers %.1f MiB\n",
           held_bytes(st) / mib, st->info.weight_bytes / mib, st->info.arena_bytes / mib,
           st->info.workspace_bytes / mib, io_buffer_bytes(st) / mib);
    if (last->device_drop >= 0)
        printf("device free memory: %.1f MiB less after the timed runs than before the build (also counts "
               "kernel scratch, I/O staging, cuDNN/cuBLAS handles and loaded kernels)\n",
               last->device_drop / mib);
    else
        printf("device free memory: unknown\n");
}

static void print_text(const bench_args *args, const bench_state *st)
{
    const bench_row *r = &st->rows[0];
    char dims[256], dev[32];
    printf("model: %s\n", args->path);
    printf("shapes:");
    for (size_t i = 0; i < st->n_in; i++)
        printf(" %s=%s", st->input_names[i], cli_dims(st->inputs[i].dims, st->inputs[i].rank, dims, sizeof dims));
    printf("\n");
    if (st->info.device == SEGRT_DEVICE_CUDA)
        printf("device: %s, precision: %s, threads: %lld\n", device_label(st, dev, sizeof dev),
               segrt_precision_name(st->info.precision), (long long)st->threads);
    else
        printf("device: cpu, threads: %lld\n", (long long)st->threads);
    printf("io: %s\n", io_text(st));
    printf("runs: %lld warmup, %lld timed\n", (long long)args->warmup, (long long)args->iters);
    printf("latency (ms): p50 %.3f  p90 %.3f  p99 %.3f  min %.3f  mean %.3f\n", r->median * 1e3,
           r->p90 * 1e3, r->p99 * 1e3, r->min * 1e3, r->mean * 1e3);
    printf("throughput: %.2f samples/s (batch %lld at the median)\n", (double)r->batch / r->median,
           (long long)r->batch);
    if (isnan(r->flops))
        printf("GFLOP per run: unknown\n");
    else
        printf("GFLOP per run: %.4f, %.2f GFLOP/s at the median\n", r->flops / 1e9, gflop_per_s(r));
    printf("peak memory: %.1f MB (%lld bytes) of host memory (the process's peak resident set)\n",
           (double)r->peak_bytes / 1e6, (long long)r->peak_bytes);
    if (st->info.device == SEGRT_DEVICE_CUDA)
        print_device_memory_text(st, r);
}

/* "image=Bx3x512x512" for a batched input. */
static void print_template(const bench_state *st, size_t i)
{
    char dims[256];
    const segrt_tensor *t = &st->tmpl[i];
    if (!st->batched[i]) {
        printf(" %s=%s", st->input_names[i], cli_dims(t->dims, t->rank, dims, sizeof dims));
        return;
    }
    printf(" %s=B", st->input_names[i]);
    if (t->rank > 1)
        printf("x%s", cli_dims(t->dims + 1, t->rank - 1, dims, sizeof dims));
}

static void print_sweep_text(const bench_args *args, const bench_state *st)
{
    char dev[32];
    bool cuda = st->info.device == SEGRT_DEVICE_CUDA;
    printf("model: %s\n", args->path);
    printf("shapes:");
    for (size_t i = 0; i < st->n_in; i++)
        print_template(st, i);
    printf(", B from --batch-sweep\n");
    if (cuda)
        printf("device: %s, precision: %s, threads: %lld\n", device_label(st, dev, sizeof dev),
               segrt_precision_name(st->info.precision), (long long)st->threads);
    else
        printf("device: cpu, threads: %lld\n", (long long)st->threads);
    printf("io: %s\n", io_text(st));
    printf("runs per batch: %lld warmup, %lld timed\n", (long long)args->warmup, (long long)args->iters);
    printf("%6s %10s %10s %10s %12s %10s %9s %10s\n", "batch", "p50 ms", "p90 ms", "p99 ms", "samples/s",
           "ms/sample", "TFLOP/s", cuda ? "dev MiB" : "RSS MiB");
    for (int k = 0; k < st->n_rows; k++) {
        const bench_row *r = &st->rows[k];
        int64_t mem = cuda ? r->device_drop : r->peak_bytes;
        printf("%6lld %10.3f %10.3f %10.3f %12.2f %10.4f ", (long long)r->batch, r->median * 1e3, r->p90 * 1e3,
               r->p99 * 1e3, (double)r->batch / r->median, r->median * 1e3 / (double)r->batch);
        if (isnan(r->flops))
            printf("%9s ", "?");
        else
            printf("%9.3f ", gflop_per_s(r) / 1e3);
        if (mem >= 0)
            printf("%10.1f\n", (double)mem / 1048576.0);
        else
            printf("%10s\n", "?");
    }
    printf(cuda ? "dev MiB: the drop in the device's free memory from before the build to after the batch's runs\n"
                : "RSS MiB: the process's peak resident set after the batch's runs\n");
    if (cuda)
        print_device_memory_text(st, &st->rows[st->n_rows - 1]);
}

static void json_shapes(json_out *j, const bench_state *st, int64_t batch, bool use_batch)
{
    json_begin_object(j);
    for (size_t i = 0; i < st->n_in; i++) {
        json_key(j, st->input_names[i]);
        json_begin_array(j);
        for (int32_t d = 0; d < st->tmpl[i].rank; d++)
            json_int(j, d == 0 && use_batch && st->batched[i] ? batch : st->inputs[i].dims[d]);
        json_end_array(j);
    }
    json_end_object(j);
}

static void json_key_int_or_null(json_out *j, const char *key, int64_t v)
{
    json_key(j, key);
    if (v >= 0)
        json_int(j, v);
    else
        json_null(j);
}

/* The keys of one row; inside an object the caller opened. */
static void json_row(json_out *j, const bench_args *args, const bench_state *st, const bench_row *r)
{
    json_key(j, "batch");
    json_int(j, r->batch);
    json_key(j, "shapes");
    json_shapes(j, st, r->batch, args->n_sweep > 0);
    const char *ms_keys[] = {"median_ms", "p50_ms", "p90_ms", "p99_ms", "min_ms", "max_ms", "mean_ms"};
    const double ms[] = {r->median, r->median, r->p90, r->p99, r->min, r->max, r->mean};
    for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) {
        json_key(j, ms_keys[k]);
        json_double(j, ms[k] * 1e3);
    }
    json_key(j, "times_ms");
    json_begin_array(j);
    for (int64_t i = 0; i < args->iters; i++)
        json_double(j, r->times[i] * 1e3);
    json_end_array(j);
    json_key(j, "throughput_per_s");
    json_double(j, (double)r->batch / r->median);
    json_key(j, "ms_per_sample");
    json_double(j, r->median * 1e3 / (double)r->batch);
    json_key(j, "peak_bytes");
    json_int(j, r->peak_bytes);
    json_key(j, "gflop");
    json_double(j, r->flops / 1e9);
    json_key(j, "gflops_per_s");
    json_double(j, gflop_per_s(r));
    json_key(j, "tflops_per_s");
    json_double(j, gflop_per_s(r) / 1e3);
    if (st->info.device == SEGRT_DEVICE_CUDA)
        json_key_int_or_null(j, "device_free_drop_bytes", r->device_drop);
}

static void json_device_memory(json_out *j, const bench_state *st)
{
    json_key(j, "device_memory");
    json_begin_object(j);
    json_key(j, "weight_bytes");
    json_int(j, (int64_t)st->info.weight_bytes);
    json_key(j, "arena_bytes");
    json_int(j, (int64_t)st->info.arena_bytes);
    json_key(j, "workspace_bytes");
    json_int(j, (int64_t)st->info.workspace_bytes);
    json_key(j, "io_buffer_bytes");
    json_int(j, (int64_t)io_buffer_bytes(st));
    json_key(j, "held_bytes");
    json_int(j, (int64_t)held_bytes(st));
    json_key_int_or_null(j, "free_drop_bytes", st->rows[st->n_rows - 1].device_drop);
    json_end_object(j);
}

static void print_json(const bench_args *args, const bench_state *st)
{
    char dev[32];
    json_out j;
    json_init(&j, stdout);
    json_begin_object(&j);
    json_key(&j, "model");
    json_string(&j, args->path);
    json_key(&j, "segrt_version");
    json_string(&j, segrt_version());
    json_key(&j, "device");
    json_string(&j, device_label(st, dev, sizeof dev));
    json_key(&j, "precision");
    json_string(&j, segrt_precision_name(st->info.precision));
    json_key(&j, "io");
    json_string(&j, st->device_io ? "device" : "host");
    json_key(&j, "threads");
    json_int(&j, st->threads);
    json_key(&j, "iters");
    json_int(&j, args->iters);
    json_key(&j, "warmup");
    json_int(&j, args->warmup);
    json_key(&j, "seed");
    json_int(&j, args->seed);
    if (args->n_sweep) {
        json_key(&j, "batch_sweep");
        json_begin_array(&j);
        for (int k = 0; k < args->n_sweep; k++)
            json_int(&j, args->sweep[k]);
        json_end_array(&j);
        json_key(&j, "rows");
        json_begin_array(&j);
        for (int k = 0; k < st->n_rows; k++) {
            json_begin_object(&j);
            json_row(&j, args, st, &st->rows[k]);
            json_end_object(&j);
        }
        json_end_array(&j);
    } else {
        json_row(&j, args, st, &st->rows[0]);
    }
    if (st->info.device == SEGRT_DEVICE_CUDA)
        json_device_memory(&j, st);
    json_end_object(&j);
}

/* --- arguments ------------------------------------------------------------- */

/* "1,2,4,8,16": batch sizes of 1 or more. */
static bool parse_sweep(const char *v, bench_args *args)
{
    char buf[1024];
    if (!v || strlen(v) >= sizeof buf)
        return false;
    snprintf(buf, sizeof buf, "%s", v);
    args->n_sweep = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int64_t b;
        if (args->n_sweep == MAX_SWEEP || !cli_parse_int(tok, &b) || b < 1 || b > (1 << 20))
            return false;
        args->sweep[args->n_sweep++] = b;
    }
    return args->n_sweep > 0 && v[strlen(v) - 1] != ',' && v[0] != ',' && !strstr(v, ",,");
}

static int parse_args(int argc, char **argv, bench_args *args)
{
    memset(args, 0, sizeof *args);
    cli_engine_opts_init(&args->eo);
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
        } else if (strcmp(a, "--io") == 0) {
            const char *v = has_value ? argv[++i] : "";
            if (strcmp(v, "host") == 0)
                args->io = BENCH_IO_HOST;
            else if (strcmp(v, "device") == 0)
                args->io = BENCH_IO_DEVICE;
            else
                return cli_usage_error("--io wants host or device, not `%s`", v);
        } else if (strcmp(a, "--batch-sweep") == 0) {
            if (!parse_sweep(has_value ? argv[++i] : NULL, args))
                return cli_usage_error("--batch-sweep wants batch sizes like 1,2,4,8,16 (at most %d, each 1 or more)",
                                       MAX_SWEEP);
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

static int bench(const bench_args *args, bench_state *st)
{
    int rc = open_model(args, st);
    if (rc == CLI_OK)
        rc = resolve_inputs(args, st);
    if (rc != CLI_OK)
        return rc;
    st->threads = args->threads;
    if (st->threads == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        st->threads = cpus > 0 ? cpus : 1;
    }
    if ((rc = run_rows(args, st)) != CLI_OK)
        return rc;
    if (args->json)
        print_json(args, st);
    else if (args->n_sweep)
        print_sweep_text(args, st);
    else
        print_text(args, st);
    return args->profile ? profile(args, st) : CLI_OK;
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
    if (rc < 0)
        rc = CLI_OK; /* --help */
    else if (rc == CLI_OK)
        rc = bench(args, st);
    bench_state_free(st);
    free(st);
    free(args);
    return rc;
}
