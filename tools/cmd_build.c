/* segrt build: an ONNX model compiled for this machine's GPU (or its CPU) into a plan file. */
#include "cli_engine.h"
#include "cli_files.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static const char build_usage[] =
    "usage: segrt build MODEL.onnx -o OUT.plan [engine options]\n"
    "Compiles the model for a CUDA device (--device N, default 0) with the options' precision and\n"
    "shape profile, and writes the plan: the optimized graph, the weights in the plan's layout and\n"
    "precision, and every per-layer choice, keyed to this GPU, CUDA, cuDNN and segrt.\n"
    "With --device cpu the plan is the optimized graph and the options, for the CPU.\n" CLI_ENGINE_USAGE;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int cmd_build(int argc, char **argv)
{
    const char *path = NULL, *out = NULL;
    cli_engine_opts eo;
    cli_engine_opts_init(&eo);
    eo.device = SEGRT_DEVICE_CUDA;
    bool quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int taken = cli_engine_option(&eo, argc, argv, &i);
        if (taken < 0)
            return CLI_BAD_INPUT;
        if (taken)
            continue;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(build_usage, stdout);
            return CLI_OK;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            if (i + 1 >= argc)
                return cli_usage_error("%s wants a file", a);
            out = argv[++i];
        } else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            quiet = true;
        } else if (a[0] == '-') {
            return cli_usage_error("build: unknown option `%s`", a);
        } else if (!path) {
            path = a;
        } else {
            return cli_usage_error("build: unexpected argument `%s`", a);
        }
    }
    if (!path || !out)
        return cli_usage_error("build: give a model and -o OUT.plan\n%s", build_usage);
    /* segrt_engine_save writes the plan whole or not at all; its name is
     * checked now, before a build of a minute. */
    cli_files files;
    memset(&files, 0, sizeof files);
    cli_files_input(&files, path, "the model");
    cli_files_output(&files, out, "-o", CLI_PLAN);
    int rc = cli_files_check(&files, false);
    if (rc != CLI_OK)
        return rc;
    double t0 = now_s();
    segrt_model *model = NULL;
    segrt_build_options *opts = NULL;
    segrt_engine *engine = NULL;
    segrt_status s = segrt_model_load(path, &model);
    rc = s == SEGRT_OK ? cli_engine_options(&eo, &opts) : cli_fail(s);
    if (rc == CLI_OK && (s = segrt_engine_build(model, opts, &engine)) != SEGRT_OK)
        rc = cli_fail(s);
    /* The name was checked: a write that fails now is a runtime failure. */
    if (rc == CLI_OK && (s = segrt_engine_save(engine, out)) != SEGRT_OK)
        rc = s == SEGRT_ERROR_IO ? (fprintf(stderr, "segrt: %s\n", segrt_last_error()), CLI_RUNTIME) : cli_fail(s);
    if (rc == CLI_OK && !quiet) {
        segrt_engine_info info;
        segrt_engine_get_info(engine, &info);
        segrt_device_info dev;
        char where[300];
        if (info.device == SEGRT_DEVICE_CUDA && segrt_cuda_device_info(info.device_index, &dev) == SEGRT_OK)
            snprintf(where, sizeof where, "%s (cuda:%d)", dev.name, info.device_index);
        else
            snprintf(where, sizeof where, "cpu");
        printf("built %s: %s, %s, %d steps (%d on the CPU), weights %.1f MiB, activations %.1f MiB, "
               "workspace %.1f MiB, %.2f s\n",
               out, where, segrt_precision_name(info.precision), info.steps,
               info.fallback_steps, info.weight_bytes / 1048576.0, info.arena_bytes / 1048576.0,
               info.workspace_bytes / 1048576.0, now_s() - t0);
        cli_print_build_report(stdout, engine);
    }
    segrt_engine_destroy(engine);
    segrt_build_options_destroy(opts);
    segrt_model_destroy(model);
    return rc;
}
