/* The engine options run, bench and build share, and opening a model or a
 * plan file as an engine. */
#include "cli_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

void cli_engine_opts_init(cli_engine_opts *o)
{
    memset(o, 0, sizeof *o);
    o->device = SEGRT_DEVICE_CPU;
    o->precision = SEGRT_PRECISION_FP32;
    o->autotune = -1;
}

/* "cpu", "cuda", "gpu", "cuda:N" or "N" (a CUDA device index). */
static bool parse_device(const char *d, cli_engine_opts *o)
{
    int64_t idx = 0;
    if (strcmp(d, "cpu") == 0) {
        o->device = SEGRT_DEVICE_CPU;
        o->explicit_cpu = true;
        return true;
    }
    if (strcmp(d, "cuda") == 0 || strcmp(d, "gpu") == 0) {
        o->device = SEGRT_DEVICE_CUDA;
    } else {
        if (strncmp(d, "cuda:", 5) == 0)
            d += 5;
        if (!cli_parse_int(d, &idx) || idx > 1 << 20)
            return false;
        o->device = SEGRT_DEVICE_CUDA;
        o->device_index = (int32_t)idx;
    }
    /* CUDA comes up while the model is parsed. */
    segrt_cuda_prepare(o->device_index);
    return true;
}

int cli_engine_option(cli_engine_opts *o, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    bool has_value = *i + 1 < argc;
    if (strcmp(a, "--device") == 0) {
        const char *d = has_value ? argv[++*i] : "";
        if (!parse_device(d, o)) {
            cli_usage_error("--device wants cpu, cuda or cuda:N, not `%s`", d);
            return -1;
        }
    } else if (strcmp(a, "--precision") == 0) {
        const char *p = has_value ? argv[++*i] : "";
        bool ok = false;
        for (int k = 0; k < 4 && !ok; k++)
            if (strcmp(p, segrt_precision_name((segrt_precision)k)) == 0) {
                o->precision = (segrt_precision)k;
                ok = true;
            }
        if (!ok) {
            cli_usage_error("--precision wants fp32, tf32, fp16 or bf16, not `%s`", p);
            return -1;
        }
        o->precision_set = true;
    } else if (strcmp(a, "--shape") == 0) {
        if (!has_value || o->n_shapes == CLI_MAX_SHAPES) {
            cli_usage_error("--shape wants NAME=DIMS (1x3x512x512, or MIN:OPT:MAX per dim)");
            return -1;
        }
        o->shapes[o->n_shapes++] = argv[++*i];
    } else if (strcmp(a, "--fp32-ops") == 0) {
        if (!has_value) {
            cli_usage_error("--fp32-ops wants a list of op types or node names");
            return -1;
        }
        o->fp32_ops = argv[++*i];
    } else if (strcmp(a, "--allow-cpu-fallback") == 0) {
        o->allow_cpu_fallback = true;
    } else if (strcmp(a, "--workspace") == 0) {
        const char *v = has_value ? argv[++*i] : "";
        if (!cli_parse_size(v, &o->workspace)) {
            cli_usage_error("--workspace wants a size such as 4G or 512M, not `%s`", v);
            return -1;
        }
    } else if (strcmp(a, "--autotune") == 0) {
        if (!has_value || !cli_parse_int(argv[++*i], &o->autotune) || o->autotune > 16) {
            cli_usage_error("--autotune wants 0 to 16 configurations per convolution");
            return -1;
        }
    } else if (strcmp(a, "--disable-kernels") == 0) {
        if (!has_value) {
            cli_usage_error("--disable-kernels wants a comma-separated list of kernel names");
            return -1;
        }
        o->disabled_kernels = argv[++*i];
    } else if (strcmp(a, "--target-arch") == 0) {
        if (!has_value) {
            cli_usage_error("--target-arch wants a compute capability (sm_80, sm_75, 8.6...)");
            return -1;
        }
        o->target_arch = argv[++*i];
    } else if (strcmp(a, "--no-cache") == 0) {
        o->no_cache = true;
    } else if (strcmp(a, "--cache-dir") == 0) {
        if (!has_value) {
            cli_usage_error("--cache-dir wants a folder");
            return -1;
        }
        o->cache_dir = argv[++*i];
    } else if (strcmp(a, "--threads") == 0) {
        if (!has_value || !cli_parse_int(argv[++*i], &o->threads) || o->threads > 4096) {
            cli_usage_error("--threads wants a number of threads (0: all cores)");
            return -1;
        }
    } else {
        return 0;
    }
    return 1;
}

int cli_engine_options(const cli_engine_opts *o, segrt_build_options **out)
{
    segrt_build_options *opts;
    segrt_status s;
    if ((s = segrt_build_options_create(&opts)) != SEGRT_OK)
        return cli_fail(s);
    if ((s = segrt_build_options_set_device(opts, o->device, o->device_index)) != SEGRT_OK ||
        (s = segrt_build_options_set_threads(opts, (int32_t)o->threads)) != SEGRT_OK ||
        (s = segrt_build_options_set_precision(opts, o->precision)) != SEGRT_OK ||
        (s = segrt_build_options_set_fp32_ops(opts, o->fp32_ops)) != SEGRT_OK ||
        (s = segrt_build_options_set_allow_cpu_fallback(opts, o->allow_cpu_fallback)) != SEGRT_OK ||
        (o->workspace && (s = segrt_build_options_set_workspace(opts, o->workspace)) != SEGRT_OK) ||
        (o->autotune >= 0 && (s = segrt_build_options_set_autotune(opts, (int32_t)o->autotune)) != SEGRT_OK) ||
        (s = segrt_build_options_set_disabled_kernels(opts, o->disabled_kernels)) != SEGRT_OK ||
        (s = segrt_build_options_set_target_arch(opts, o->target_arch)) != SEGRT_OK) {
        segrt_build_options_destroy(opts);
        return cli_fail(s);
    }
    for (int i = 0; i < o->n_shapes; i++) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", o->shapes[i]);
        const char *name;
        int32_t rank;
        int64_t mn[SEGRT_MAX_RANK], op[SEGRT_MAX_RANK], mx[SEGRT_MAX_RANK];
        if (!cli_parse_shape_range(buf, &name, &rank, mn, op, mx)) {
            segrt_build_options_destroy(opts);
            return cli_usage_error("--shape `%s`: want NAME=DIMS, e.g. image=1x3x512x512 or image=1:8:16x3x512x512",
                                   o->shapes[i]);
        }
        if ((s = segrt_build_options_set_shape_range(opts, name, rank, mn, op, mx)) != SEGRT_OK) {
            segrt_build_options_destroy(opts);
            return cli_fail(s);
        }
    }
    *out = opts;
    return CLI_OK;
}

int cli_engine_check_cpu(const cli_engine_opts *o)
{
    if (o->device != SEGRT_DEVICE_CPU)
        return CLI_OK;
    if (o->precision_set && o->precision != SEGRT_PRECISION_FP32)
        return cli_usage_error("--precision %s applies to CUDA devices; the CPU computes in fp32 (add --device cuda)",
                               segrt_precision_name(o->precision));
    /* Options of CUDA plans, each with the name the user typed; of the
     * kernel switches, the graph's (composite-ops, fused-attention) apply
     * to every backend. */
    static const char *const every_backend[] = {"composite-ops", "fused-attention"};
    bool cuda_switch = false;
    for (const char *k = o->disabled_kernels; k && *k;) {
        size_t len = strcspn(k, ",");
        bool graph_switch = false;
        for (size_t j = 0; j < sizeof every_backend / sizeof every_backend[0]; j++)
            graph_switch |= len == strlen(every_backend[j]) && strncmp(k, every_backend[j], len) == 0;
        cuda_switch |= len > 0 && !graph_switch;
        k += len + (k[len] == ',');
    }
    const char *cuda_only = o->fp32_ops ? "--fp32-ops"
                            : o->allow_cpu_fallback ? "--allow-cpu-fallback"
                            : o->workspace ? "--workspace"
                            : o->autotune >= 0 ? "--autotune"
                            : cuda_switch ? "--disable-kernels (but composite-ops, fused-attention)"
                            : o->target_arch ? "--target-arch"
                            : o->no_cache ? "--no-cache"
                            : o->cache_dir ? "--cache-dir"
                                           : NULL;
    if (cuda_only)
        return cli_usage_error("%s applies to CUDA devices, not the CPU (add --device cuda)", cuda_only);
    return CLI_OK;
}

bool cli_is_plan_file(const char *path)
{
    /* O_NONBLOCK: a FIFO given as the model must not be waited on (it is
     * refused as not a regular file when the model is loaded). */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        return false;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return false;
    }
    char magic[8];
    bool yes = fread(magic, 1, 8, f) == 8 && memcmp(magic, "SEGRTPLN", 8) == 0;
    fclose(f);
    return yes;
}

int cli_engine_build(const segrt_model *model, const segrt_build_options *opts, const cli_engine_opts *o,
                     segrt_engine **out, bool *cache_hit)
{
    segrt_status s;
    int hit = 0;
    if (o->device == SEGRT_DEVICE_CUDA && !o->no_cache)
        s = segrt_engine_build_cached(model, opts, o->cache_dir, &hit, out);
    else
        s = segrt_engine_build(model, opts, out);
    if (cache_hit)
        *cache_hit = hit != 0;
    return s == SEGRT_OK ? CLI_OK : cli_fail(s);
}

int cli_plan_load(const char *path, const cli_engine_opts *o, segrt_engine **out)
{
    if (o->precision_set || o->n_shapes || o->fp32_ops || o->allow_cpu_fallback || o->workspace ||
        o->autotune >= 0 || o->disabled_kernels || o->target_arch)
        return cli_usage_error("%s: a plan file keeps the options it was built with; "
                               "--precision, --shape, --fp32-ops, --allow-cpu-fallback, --workspace, "
                               "--autotune, --disable-kernels and --target-arch apply to `segrt build`",
                               path);
    segrt_status s = segrt_engine_load(path, o->device_index, out);
    if (s != SEGRT_OK)
        return cli_fail(s);
    /* A plan runs where it was built for: a --device given must agree. */
    segrt_engine_info info;
    bool other = segrt_engine_get_info(*out, &info) == SEGRT_OK &&
                 ((o->explicit_cpu && info.device != SEGRT_DEVICE_CPU) ||
                  (o->device == SEGRT_DEVICE_CUDA && info.device != SEGRT_DEVICE_CUDA));
    if (other) {
        segrt_engine_destroy(*out);
        *out = NULL;
        return cli_usage_error("%s: the plan was built for the %s, not the %s", path,
                               info.device == SEGRT_DEVICE_CPU ? "CPU" : "GPU",
                               info.device == SEGRT_DEVICE_CPU ? "GPU" : "CPU");
    }
    return CLI_OK;
}

void cli_print_build_report(FILE *f, const segrt_engine *engine)
{
    segrt_build_report r;
    if (segrt_engine_build_report(engine, &r) != SEGRT_OK)
        return;
    fprintf(f, "build %.2f s: graph passes %.2f s, plans %.2f s\n", r.total_seconds, r.graph_seconds,
            r.backend_seconds);
    if (r.cudnn_searches || r.cudnn_reused)
        fprintf(f, "  cuDNN: %d convolution graphs searched in %.2f s (%d candidate plans finalized), %d "
                   "convolutions took an identical earlier one's choice\n",
                r.cudnn_searches, r.cudnn_seconds, r.cudnn_finalized, r.cudnn_reused);
    if (r.n_slowest > 0) {
        fprintf(f, "  slowest to build:");
        for (int32_t i = 0; i < r.n_slowest && i < 5; i++)
            fprintf(f, "%s %s (%s) %.3f s", i ? "," : "", r.slowest[i].node, r.slowest[i].op, r.slowest[i].seconds);
        fputc('\n', f);
    }
}
