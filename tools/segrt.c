/* segrt: the command line. */
#include "cli.h"
#include "cli_files.h"

#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: segrt <command> [options]\n"
    "\n"
    "Inference for segmentation networks over large medical images.\n"
    "\n"
    "commands:\n"
    "  info MODEL [--shape NAME=DIMS]... [--optimized]\n"
    "                      inputs, outputs, opset, parameters and operator counts of an\n"
    "                      ONNX model; with --shape, GFLOP for those input shapes; with\n"
    "                      --optimized, the graph after segrt's passes too\n"
    "  info --devices      the GPUs segrt can use, with CUDA and cuDNN versions\n"
    "  build MODEL.onnx -o OUT.plan [--precision fp16] [--shape NAME=MIN:OPT:MAXx...]\n"
    "          [--device N] [--workspace 4G] [--fp32-ops LIST] [--allow-cpu-fallback]\n"
    "                      compiles the model for a GPU into a plan file\n"
    "  run MODEL|PLAN --input [NAME=]IN.npy... --output [NAME=]OUT.npy...\n"
    "          [--device cpu|cuda|cuda:N] [--precision P] [--no-cache]\n"
    "                      runs the model on NPY inputs and writes NPY outputs\n"
    "  compare A.npy B.npy [--class-axis N] [--json] [--max-rel-l2 X] [--min-psnr DB]\n"
    "          [--min-argmax-agreement F]\n"
    "                      errors of A against the reference B: max abs, mean abs,\n"
    "                      relative L2, PSNR; with --class-axis, argmax agreement and\n"
    "                      Dice per class; exit 1 when a threshold is not met\n"
    "  bench MODEL --shape NAME=DIMS... [--device cpu|cuda] [--precision P] [--iters N] [--warmup N]\n"
    "          [--threads N] [--json]\n"
    "                      latency percentiles, throughput, peak memory and GFLOP/s\n"
    "                      on random inputs\n"
    "\n"
    "options:\n"
    "  -h, --help          this text (also after a command: segrt run --help)\n"
    "  --version           the version of segrt and the libraries it was built with\n"
    "\n"
    "DIMS are written 1x3x512x512. Exit codes: 0 success, 1 runtime failure,\n"
    "2 bad usage or bad input (the message names the file and the problem).\n";

static int print_version(void)
{
    segrt_cuda_versions v;
    segrt_cuda_versions_get(&v);
    printf("segrt %s\n", segrt_version());
    if (v.built_with_cuda)
        printf("built with CUDA runtime %d.%d, cuDNN %d.%d.%d\n", v.runtime_version / 1000,
               (v.runtime_version % 1000) / 10, v.cudnn_version / 10000, (v.cudnn_version / 100) % 100,
               v.cudnn_version % 100);
    else
        printf("built without CUDA\n");
    return CLI_OK;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage, stderr);
        return CLI_BAD_INPUT;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage, stdout);
        return CLI_OK;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0)
        return print_version();
    cli_files_on_signals();
    if (strcmp(cmd, "info") == 0)
        return cmd_info(argc - 1, argv + 1);
    if (strcmp(cmd, "run") == 0)
        return cmd_run(argc - 1, argv + 1);
    if (strcmp(cmd, "compare") == 0)
        return cmd_compare(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0)
        return cmd_bench(argc - 1, argv + 1);
    if (strcmp(argv[1], "build") == 0)
        return cmd_build(argc - 1, argv + 1);
    fprintf(stderr, "segrt: unknown command `%s` (try segrt --help)\n", cmd);
    return CLI_BAD_INPUT;
}
