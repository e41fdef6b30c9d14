/* segrt info: what a model is, or which devices there are. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char info_usage[] =
    "usage: segrt info MODEL [--shape NAME=DIMS]... [--optimized]\n"
    "       segrt info --devices\n";

typedef struct op_count {
    const char *op;
    int count;
    int first; /* order of first appearance, to break ties */
} op_count;

static int cmp_count(const void *a, const void *b)
{
    const op_count *x = a, *y = b;
    if (x->count != y->count)
        return y->count - x->count;
    return x->first - y->first;
}

static void print_histogram(const char *title, const segrt_model *m)
{
    size_t n = segrt_model_node_count(m);
    op_count *c = calloc(n + 1, sizeof *c);
    int kinds = 0;
    if (!c)
        return;
    for (size_t i = 0; i < n; i++) {
        segrt_node_desc d;
        if (segrt_model_node(m, i, &d) != SEGRT_OK)
            continue;
        int k = 0;
        while (k < kinds && strcmp(c[k].op, d.op_type) != 0)
            k++;
        if (k == kinds) {
            c[k].op = d.op_type;
            c[k].first = kinds++;
        }
        c[k].count++;
    }
    qsort(c, (size_t)kinds, sizeof *c, cmp_count);
    printf("%s (%zu nodes):", title, n);
    for (int k = 0; k < kinds; k++)
        printf("%s %s %d", k ? "," : "", c[k].op, c[k].count);
    printf("\n");
    free(c);
}

static void print_tensors(const segrt_model *m)
{
    char dims[512];
    for (size_t i = 0; i < segrt_model_input_count(m); i++) {
        segrt_tensor_desc d;
        if (segrt_model_input(m, i, &d) == SEGRT_OK)
            printf("  input   %-20s %-8s %s\n", d.name, segrt_dtype_name(d.dtype),
                   cli_format_dims(&d, dims, sizeof dims));
    }
    for (size_t i = 0; i < segrt_model_output_count(m); i++) {
        segrt_tensor_desc d;
        if (segrt_model_output(m, i, &d) == SEGRT_OK)
            printf("  output  %-20s %-8s %s\n", d.name, segrt_dtype_name(d.dtype),
                   cli_format_dims(&d, dims, sizeof dims));
    }
}

static void print_params(const segrt_model *m)
{
    segrt_model_meta meta;
    if (segrt_model_metadata(m, &meta) != SEGRT_OK)
        return;
    printf("parameters: %lld (%.2f MB)\n", (long long)meta.parameter_count,
           (double)meta.parameter_bytes / 1e6);
}

static int info_devices(void)
{
    segrt_cuda_versions v;
    segrt_cuda_versions_get(&v);
    int32_t n = 0;
    segrt_cuda_device_count(&n);
    if (!v.built_with_cuda) {
        printf("no GPU: this segrt was built without CUDA; models run on the CPU\n");
        return CLI_OK;
    }
    printf("CUDA driver %d.%d, runtime %d.%d, cuDNN %d.%d.%d\n", v.driver_version / 1000,
           (v.driver_version % 1000) / 10, v.runtime_version / 1000, (v.runtime_version % 1000) / 10,
           v.cudnn_version / 10000, (v.cudnn_version / 100) % 100, v.cudnn_version % 100);
    if (n == 0) {
        printf("no GPU found%s; models run on the CPU\n",
               v.driver_version ? "" : " (no NVIDIA driver is loaded)");
        return CLI_OK;
    }
    for (int32_t i = 0; i < n; i++) {
        segrt_device_info d;
        segrt_status s = segrt_cuda_device_info(i, &d);
        if (s != SEGRT_OK)
            return cli_fail(s);
        printf("cuda:%d  %s  compute %d.%d  %d SMs  %.1f GiB (%.1f GiB free)\n", i, d.name,
               d.compute_major, d.compute_minor, d.multiprocessors,
               (double)d.total_memory_bytes / (1 << 30), (double)d.free_memory_bytes / (1 << 30));
    }
    return CLI_OK;
}

int cmd_info(int argc, char **argv)
{
    const char *path = NULL;
    bool optimized = false;
    segrt_build_options *opts = NULL;
    segrt_status s = segrt_build_options_create(&opts);
    if (s != SEGRT_OK)
        return cli_fail(s);
    int n_shapes = 0, rc = CLI_OK;
    for (int i = 1; i < argc && rc == CLI_OK; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(info_usage, stdout);
            segrt_build_options_destroy(opts);
            return CLI_OK;
        } else if (strcmp(a, "--devices") == 0) {
            segrt_build_options_destroy(opts);
            return info_devices();
        } else if (strcmp(a, "--optimized") == 0) {
            optimized = true;
        } else if (strcmp(a, "--shape") == 0 || strncmp(a, "--shape=", 8) == 0) {
            char *v = a[7] == '=' ? argv[i] + 8 : (i + 1 < argc ? argv[++i] : NULL);
            const char *name;
            int32_t rank;
            int64_t dims[SEGRT_MAX_RANK];
            if (!v || !cli_parse_shape(v, &name, &rank, dims))
                rc = cli_usage_error("--shape wants NAME=DIMS, like image=1x3x512x512");
            else if ((s = segrt_build_options_set_shape(opts, name, rank, dims)) != SEGRT_OK)
                rc = cli_fail(s);
            n_shapes++;
        } else if (a[0] == '-') {
            rc = cli_usage_error("info: unknown option `%s`", a);
        } else if (!path) {
            path = a;
        } else {
            rc = cli_usage_error("info: more than one model given (`%s`, `%s`)", path, a);
        }
    }
    if (rc == CLI_OK && !path)
        rc = cli_usage_error("info: no model given\n%s", info_usage);
    segrt_model *m = NULL, *opt = NULL;
    if (rc == CLI_OK && (s = segrt_model_load(path, &m)) != SEGRT_OK)
        rc = cli_fail(s);
    if (rc == CLI_OK && (optimized || n_shapes) && (s = segrt_model_optimize(m, opts, &opt)) != SEGRT_OK)
        rc = cli_fail(s);
    if (rc == CLI_OK) {
        segrt_model_meta meta;
        segrt_model_metadata(m, &meta);
        printf("model: %s\n", path);
        printf("producer: %s %s, IR version %lld, opset %lld\n",
               meta.producer_name[0] ? meta.producer_name : "(unknown)", meta.producer_version,
               (long long)meta.ir_version, (long long)meta.opset);
        print_tensors(m);
        print_params(m);
        print_histogram("operators", m);
        if (opt) {
            if (optimized) {
                printf("after optimization%s:\n", n_shapes ? " for the bound shapes" : "");
                print_tensors(opt);
                print_params(opt);
                print_histogram("operators", opt);
            }
            double flops;
            if (segrt_model_flops(opt, &flops) == SEGRT_OK)
                printf("GFLOP: %.2f\n", flops / 1e9);
            else
                printf("GFLOP: unknown (%s)\n", segrt_last_error());
        }
    }
    segrt_model_destroy(opt);
    segrt_model_destroy(m);
    segrt_build_options_destroy(opts);
    return rc;
}
