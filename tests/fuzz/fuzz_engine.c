/* libFuzzer target: the whole CPU engine. The input is loaded as an ONNX
 * model (as fuzz_onnx does); every graph input is bound to a small shape
 * (fixed dims as declared, symbolic ones 1 to 4), a CPU engine is built and
 * run once on deterministic inputs (inputs of odd length with the
 * composite-ops switch off: their lowering). Any model may be rejected;
 * none may crash, leak, trip a sanitizer or divide by zero.
 *
 * Caps keep the fuzzer measuring bugs rather than memory exhaustion: a model
 * whose optimized graph holds a large tensor, or whose plan would allocate
 * a large arena or scratch, is skipped (a normal outcome), and the
 * interpreter path (shapes that depend on input values) runs under a byte
 * limit per intermediate. */
#include "segrt.h"

#include "engine/engine_internal.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Largest tensor of the optimized graph, the graph's tensors together,
 * and what a context would allocate (arena and scratch). */
#define FUZZ_MAX_VALUE_BYTES ((int64_t)4 << 20)
#define FUZZ_MAX_GRAPH_BYTES ((int64_t)32 << 20)
#define FUZZ_MAX_CONTEXT_BYTES ((uint64_t)64 << 20)
#define FUZZ_MAX_INPUTS 16

/* A symbolic dim's size: 1 to 4 by its name, so that every use of one
 * symbol gets the same size; 2 for an unnamed one. `large` (a second try
 * for networks whose pooling needs more) makes every one 16. */
static int64_t sym_size(const char *name, bool large)
{
    if (large)
        return 16;
    if (!name)
        return 2;
    uint32_t h = 2166136261u;
    for (const char *c = name; *c; c++)
        h = (h ^ (uint8_t)*c) * 16777619u;
    return 1 + (int64_t)(h % 4);
}

/* Whether every static tensor of g is small enough to run. */
static bool graph_small(const sg_graph *g)
{
    int64_t total = 0;
    for (int32_t v = 0; v < g->n_values; v++) {
        const sg_value *val = &g->values[v];
        int64_t numel;
        if (!sg_shape_numel(&val->shape, &numel))
            continue; /* unknown until run: the interpreter's limit holds it */
        size_t es = segrt_dtype_size(val->dtype);
        if (numel > FUZZ_MAX_VALUE_BYTES / (int64_t)(es ? es : 1))
            return false;
        total += numel * (int64_t)(es ? es : 1);
        if (total > FUZZ_MAX_GRAPH_BYTES)
            return false;
    }
    return true;
}

/* Deterministic data for element i: small values of every sign for
 * floats, 0 to 3 for integers (valid indices of small axes). */
static void fill(segrt_tensor *t, size_t numel)
{
    for (size_t i = 0; i < numel; i++) {
        double f = (double)((int64_t)((i * 7 + 3) % 11) - 5) * 0.25;
        int64_t k = (int64_t)(i % 4);
        switch (t->dtype) {
        case SEGRT_DTYPE_FLOAT32: ((float *)t->data)[i] = (float)f; break;
        case SEGRT_DTYPE_FLOAT64: ((double *)t->data)[i] = f; break;
        case SEGRT_DTYPE_FLOAT16: {
            /* f is a multiple of 0.25 in [-1.25, 1.25]: exact in half. */
            float ff = (float)f;
            uint32_t b;
            memcpy(&b, &ff, 4);
            uint16_t h = (uint16_t)((b >> 16) & 0x8000u);
            if (ff != 0.0f)
                h |= (uint16_t)((((b >> 23) & 0xffu) - 112u) << 10 | ((b >> 13) & 0x3ffu));
            ((uint16_t *)t->data)[i] = h;
            break;
        }
        case SEGRT_DTYPE_BFLOAT16: {
            float ff = (float)f;
            uint32_t b;
            memcpy(&b, &ff, 4);
            ((uint16_t *)t->data)[i] = (uint16_t)(b >> 16);
            break;
        }
        case SEGRT_DTYPE_INT64: ((int64_t *)t->data)[i] = k; break;
        case SEGRT_DTYPE_INT32: ((int32_t *)t->data)[i] = (int32_t)k; break;
        case SEGRT_DTYPE_INT16: ((int16_t *)t->data)[i] = (int16_t)k; break;
        case SEGRT_DTYPE_UINT16: ((uint16_t *)t->data)[i] = (uint16_t)k; break;
        case SEGRT_DTYPE_INT8: ((int8_t *)t->data)[i] = (int8_t)k; break;
        case SEGRT_DTYPE_UINT8: ((uint8_t *)t->data)[i] = (uint8_t)k; break;
        case SEGRT_DTYPE_BOOL: ((uint8_t *)t->data)[i] = (uint8_t)(i & 1); break;
        default: memset(t->data, 0, numel * segrt_dtype_size(t->dtype)); return;
        }
    }
}

/* SEGRT_FUZZ_VERBOSE=1 says how far each input got (run the target on
 * one file to see why a seed stops early). */
static void say(const char *stage, bool ok)
{
    static int verbose = -1;
    if (verbose < 0)
        verbose = getenv("SEGRT_FUZZ_VERBOSE") != NULL;
    if (verbose)
        fprintf(stderr, "fuzz_engine: %s: %s\n", stage, ok ? "ok" : segrt_last_error());
}

static size_t numel_of(const segrt_tensor *t)
{
    size_t n = 1;
    for (int32_t d = 0; d < t->rank; d++)
        n *= (size_t)t->dims[d];
    return n;
}

/* The shapes bound to the model's inputs, in order. */
typedef struct bound_inputs {
    size_t n;
    int32_t rank[FUZZ_MAX_INPUTS];
    int64_t dims[FUZZ_MAX_INPUTS][SEGRT_MAX_RANK];
} bound_inputs;

static void run_engine(const segrt_engine *e, const bound_inputs *b)
{
    size_t n_in = segrt_engine_input_count(e), n_out = segrt_engine_output_count(e);
    if (n_in != b->n || n_out > FUZZ_MAX_INPUTS)
        return;
    segrt_engine_info info;
    if (segrt_engine_get_info(e, &info) != SEGRT_OK ||
        info.arena_bytes + info.workspace_bytes > FUZZ_MAX_CONTEXT_BYTES) {
        say("context too large", true);
        return;
    }
    segrt_tensor in[FUZZ_MAX_INPUTS], out[FUZZ_MAX_INPUTS];
    memset(in, 0, sizeof in);
    memset(out, 0, sizeof out);
    segrt_context *ctx = NULL;
    bool ok = true;
    for (size_t i = 0; i < n_in && ok; i++) {
        segrt_tensor_desc d;
        ok = segrt_engine_input(e, i, &d) == SEGRT_OK && b->rank[i] >= 0;
        if (!ok)
            break;
        in[i].dtype = d.dtype;
        in[i].rank = b->rank[i];
        memcpy(in[i].dims, b->dims[i], sizeof in[i].dims);
        size_t bytes = numel_of(&in[i]) * segrt_dtype_size(d.dtype);
        /* (the graph's tensors, inputs among them, are small: graph_small) */
        ok = (in[i].data = malloc(bytes ? bytes : 1)) != NULL;
        if (ok)
            fill(&in[i], numel_of(&in[i]));
    }
    if (ok)
        say("output shapes", ok = segrt_engine_output_shapes(e, n_in, in, n_out, out) == SEGRT_OK);
    for (size_t j = 0; j < n_out && ok; j++) {
        size_t bytes = numel_of(&out[j]) * segrt_dtype_size(out[j].dtype);
        ok = bytes <= (size_t)FUZZ_MAX_VALUE_BYTES && (out[j].data = malloc(bytes ? bytes : 1)) != NULL;
        out[j].memory = SEGRT_MEMORY_HOST;
    }
    if (ok)
        say("context", ok = segrt_context_create(e, &ctx) == SEGRT_OK);
    if (ok)
        say("run", segrt_context_run(ctx, n_in, in, n_out, out) == SEGRT_OK);
    segrt_context_destroy(ctx);
    for (size_t i = 0; i < FUZZ_MAX_INPUTS; i++) {
        free(in[i].data);
        free(out[i].data);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    segrt_model *m = NULL, *opt = NULL;
    segrt_build_options *opts = NULL;
    segrt_engine *e = NULL;
    if (segrt_model_load_from_memory(data, size, NULL, "fuzz.onnx", &m) != SEGRT_OK) {
        say("load", false);
        return 0;
    }
    if (segrt_build_options_create(&opts) != SEGRT_OK)
        goto done;
    segrt_build_options_set_threads(opts, 1);
    /* Every other input (by its length) with the composite operators
     * lowered (graph/pass_lower.c), as a CUDA build lowers them: the
     * rewrite meets hostile graphs too. */
    if (size & 1)
        segrt_build_options_set_disabled_kernels(opts, "composite-ops");
    bound_inputs b;
    memset(&b, 0, sizeof b);
    b.n = segrt_model_input_count(m);
    if (b.n > FUZZ_MAX_INPUTS)
        goto done;
    bool symbolic = false;
    for (int large = 0; large < 2 && !opt; large++) {
        for (size_t i = 0; i < b.n; i++) {
            segrt_tensor_desc d;
            b.rank[i] = -1;
            if (segrt_model_input(m, i, &d) != SEGRT_OK || d.rank < 0)
                continue; /* unknown rank: the build says what it needs */
            b.rank[i] = d.rank;
            for (int32_t k = 0; k < d.rank; k++) {
                b.dims[i][k] = d.dims[k] >= 0 ? d.dims[k] : sym_size(d.dim_names[k], large);
                symbolic |= d.dims[k] < 0;
            }
            segrt_build_options_set_shape(opts, d.name, d.rank, b.dims[i]);
        }
        /* Optimize first and look at the result: a plan's build allocates
         * in proportion to its tensors (reordered weights, tap tables). */
        if (segrt_model_optimize(m, opts, &opt) != SEGRT_OK) {
            say("optimize", false);
            if (!symbolic)
                goto done;
        }
    }
    if (!opt)
        goto done;
    if (!graph_small(opt->g)) {
        say("graph too large", true);
        goto done;
    }
    if (segrt_engine_build(opt, opts, &e) != SEGRT_OK) {
        say("build", false);
        goto done;
    }
    sg_engine_set_interpret_limit(e, FUZZ_MAX_VALUE_BYTES);
    run_engine(e, &b);
done:
    segrt_engine_destroy(e);
    segrt_build_options_destroy(opts);
    segrt_model_destroy(opt);
    segrt_model_destroy(m);
    return 0;
}
