/* Engine options shared by `run`, `bench` and `build`. */
#ifndef SEGRT_CLI_ENGINE_H
#define SEGRT_CLI_ENGINE_H

#include "cli.h"

#include <stddef.h>

#define CLI_MAX_SHAPES 64

typedef struct cli_engine_opts {
    segrt_device_kind device;
    int32_t device_index;
    bool explicit_cpu;      /* --device cpu was given */
    segrt_precision precision;
    bool precision_set;
    const char *fp32_ops;
    bool allow_cpu_fallback;
    size_t workspace;       /* 0: the library's default */
    int64_t autotune;       /* cuDNN configurations timed per convolution; -1: the library's default */
    const char *disabled_kernels; /* --disable-kernels, as given; NULL: none */
    const char *target_arch;      /* --target-arch, as given; NULL: the GPU's own */
    bool no_cache;
    const char *cache_dir;
    int64_t threads;
    const char *shapes[CLI_MAX_SHAPES]; /* NAME=DIMS as given */
    int n_shapes;
} cli_engine_opts;

#define CLI_ENGINE_USAGE                                                                          \
    "engine options:\n"                                                                           \
    "  --device cpu|cuda|cuda:N  where to run (default cpu)\n"                                   \
    "  --precision P             CUDA arithmetic: fp32 (TF32 off), tf32, fp16, bf16 (default fp32)\n" \
    "  --shape NAME=DIMS         bind an input: 1x3x512x512, or MIN:OPT:MAX per dim (a profile)\n" \
    "  --fp32-ops LIST           op types or node names kept in float32 (comma-separated)\n"     \
    "  --allow-cpu-fallback      run nodes the GPU cannot on the CPU instead of failing\n"        \
    "  --workspace SIZE          cuDNN/cuBLASLt workspace per layer (e.g. 4G; default 1G)\n"      \
    "  --autotune N              time N cuDNN configurations per convolution, keep the fastest\n" \
    "                            (default 8; 0: cuDNN's first choice, same plan every build)\n"  \
    "  --disable-kernels LIST    kernels and fusions not to use, for comparisons (CUDA's;\n"     \
    "                            composite-ops, fused-attention on the CPU too; comma-\n"      \
    "                            separated: wgmma,up-fold,graphs...; see the README)\n"         \
    "  --target-arch sm_XY       plan as for an older GPU (sm_80, sm_75...): its kernels only\n"  \
    "  --no-cache                do not use the plan cache ($XDG_CACHE_HOME/segrt)\n"             \
    "  --cache-dir DIR           keep cached plans in DIR\n"                                      \
    "  --threads N               CPU threads (0: all cores)\n"

void cli_engine_opts_init(cli_engine_opts *o);
/* Consumes the engine option at argv[*i] (and its value): 1 if it was one,
 * 0 if not, -1 after reporting a usage error. */
int cli_engine_option(cli_engine_opts *o, int argc, char **argv, int *i);
/* Build options from the parsed options; returns an exit code. */
int cli_engine_options(const cli_engine_opts *o, segrt_build_options **out);
/* On the CPU (not a plan file), options that only CUDA plans take are
 * usage errors: --precision other than fp32, --fp32-ops,
 * --allow-cpu-fallback, --workspace, --autotune, --disable-kernels,
 * --no-cache, --cache-dir.
 * Returns an exit code. */
int cli_engine_check_cpu(const cli_engine_opts *o);
/* Whether the file starts like a segrt plan. */
bool cli_is_plan_file(const char *path);
/* Builds the engine (through the plan cache for CUDA unless --no-cache). */
int cli_engine_build(const segrt_model *model, const segrt_build_options *opts, const cli_engine_opts *o,
                     segrt_engine **out, bool *cache_hit);
/* Loads a plan file onto the options' CUDA device. */
int cli_plan_load(const char *path, const cli_engine_opts *o, segrt_engine **out);
/* Where the engine's build went (segrt_engine_build_report), in two or
 * three lines on f: the parts, cuDNN's searches, the slowest nodes. */
void cli_print_build_report(FILE *f, const segrt_engine *engine);

#endif
