"""bench/many_classes: the sizes, the work folder's files and segrt's command
lines, in one place (make_case.py, make_model.py and run.py share them).

Axes are numpy's: the image is N x C x D x H x W = 1 x 1 x 400 x 512 x 512
(slices, rows, columns), and --roi D,H,W follows the same order.
"""
import dataclasses
import os
import pathlib

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
VOLUME_BENCH = ROOT / "bench" / "volume_vs_monai"


@dataclasses.dataclass(frozen=True)
class Setup:
    name: str
    shape_zyx: tuple    # the image's D, H, W
    roi_zyx: tuple      # the network's window
    classes: int        # output channels: background + classes
    features: tuple     # per stage (full: nnU-Net's PlainConvUNet; tiny: the onnx.helper network's)
    strides: tuple      # per stage, isotropic
    n_conv: int         # convolutions per stage (encoder and decoder)
    sw_batch: int       # windows per network call
    runs: int           # timed runs per configuration (default)


# TotalSegmentator-class: nnU-Net's 3d_fullres PlainConvUNet for a CT (6
# stages, 32..320 features, patch 128^3) with 101 outputs, over a volume of
# issue 39's size (512 x 512 in plane, 400 slices).
FULL = Setup(name="full", shape_zyx=(400, 512, 512), roi_zyx=(128, 128, 128), classes=101,
             features=(32, 64, 128, 256, 320, 320), strides=(1, 2, 2, 2, 2, 2), n_conv=2, sw_batch=1, runs=5)

# The dry run on a CPU: the same 101 classes, an image of 40 x 64 x 64, a
# window of 32^3 and a network of four convolutions built with onnx.helper
# (no torch needed): 18 windows, a second or two a run.
TINY = Setup(name="tiny", shape_zyx=(40, 64, 64), roi_zyx=(32, 32, 32), classes=101,
             features=(8, 16), strides=(1, 2), n_conv=1, sw_batch=2, runs=1)

SEED = 0
OVERLAP = 0.5
MAX_MEMORY = "4G"
# NVIDIA H200 SXM, dense FP16 tensor-core peak (the data sheet's 1979
# TFLOP/s is with 2:4 sparsity).
H200_FP16_DENSE_TFLOPS = 989.5
# Issue 39 item 5: the budgeted job at most 1.5x the unbudgeted one.
TARGET_RATIO = 1.5

# The configurations, in the order they run; the first is the reference
# every other is timed and compared against. Flags after the common ones;
# CUDA_ONLY flags (and their values) are left out on a CPU, where segrt
# refuses them (no precisions, accumulator types, device budget or plan
# cache there): the dry run's four configurations are then the same job.
CONFIGS = {
    "nobudget_fp32": [],
    "nobudget_fp16acc": ["--accumulator", "fp16"],
    "budget_fp16acc": ["--max-memory", "{max_memory}", "--accumulator", "fp16"],
    "budget_fp32": ["--max-memory", "{max_memory}"],
}
REFERENCE = "nobudget_fp32"
CUDA_ONLY = {"--precision", "--accumulator", "--max-memory", "--cache-dir"}


def setup(tiny):
    return TINY if tiny else FULL


def default_work_dir(tiny):
    return pathlib.Path(os.environ.get("MCBENCH_WORK", f"/tmp/many_classes{'-tiny' if tiny else ''}"))


@dataclasses.dataclass(frozen=True)
class Paths:
    work: pathlib.Path

    @property
    def image(self):
        return self.work / "case" / "image.npy"

    @property
    def case_json(self):
        return self.work / "case" / "case.json"

    @property
    def onnx(self):
        return self.work / "model" / "net.onnx"

    @property
    def model_json(self):
        return self.work / "model" / "model.json"

    def labels(self, config):
        return self.work / "out" / f"{config}.npy"

    def record(self, config):
        return self.work / "out" / f"{config}.json"


def resolve_configs(spec):
    """Configuration names from a comma list of names or 1-based numbers
    (1 = the reference); ValueError on an unknown one."""
    names = list(CONFIGS)
    out = []
    for item in (x.strip() for x in spec.split(",")):
        if not item:
            continue
        if item.isdigit() and 1 <= int(item) <= len(names):
            item = names[int(item) - 1]
        if item not in CONFIGS:
            raise ValueError(f"unknown configuration {item!r}; known: 1-{len(names)} or {', '.join(names)}")
        if item not in out:
            out.append(item)
    return out


def segrt_command(config, segrt, paths, s, device, precision, sw_batch, cache_dir, max_memory=MAX_MEMORY):
    """argv of one run of `config`."""
    argv = [str(segrt), "run", str(paths.onnx), str(paths.image), "-o", str(paths.labels(config)),
            "--device", device, "--precision", precision, "--roi", ",".join(map(str, s.roi_zyx)),
            "--overlap", f"{OVERLAP:g}", "--blend", "gaussian", "--output", "labels", "--sw-batch", str(sw_batch),
            "--cache-dir", str(cache_dir)]
    argv += [a.format(max_memory=max_memory) for a in CONFIGS[config]]
    if device.startswith("cuda"):
        return argv
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in CUDA_ONLY:
            skip = True
        else:
            out.append(a)
    return out


def plain_unet_flops(s, in_channels=1):
    """FLOPs (2 x multiply-adds) of one window of the full network, counted
    from its architecture rather than from the ONNX graph (a cross-check;
    bias additions, norms and activations left out, as in the graph count):
    per stage n_conv 3x3x3 convolutions, the first strided; per decoder
    stage a transposed convolution (kernel = stride) and n_conv
    convolutions, the first over the skip's and the upsampled channels;
    a 1x1x1 head. For volume_vs_monai's 14 classes this gives 956.07 GFLOP,
    the figure torch's counter gave that network."""
    macs, voxels, size, cin = 0, [], list(s.roi_zyx), in_channels
    for f, st in zip(s.features, s.strides):
        size = [n // st for n in size]
        v = size[0] * size[1] * size[2]
        voxels.append(v)
        macs += v * f * 27 * (cin + (s.n_conv - 1) * f)
        cin = f
    for j in range(len(s.features) - 2, -1, -1):
        f, up, st = s.features[j], s.features[j + 1], s.strides[j + 1]
        macs += voxels[j + 1] * up * f * st ** 3
        macs += voxels[j] * f * 27 * (2 * f + (s.n_conv - 1) * f)
    macs += voxels[0] * s.features[0] * s.classes
    return 2 * macs
