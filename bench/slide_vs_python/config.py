"""The benchmark's sizes, the network's input convention, the file paths,
and segrt's command line: everything the lead may want to adjust is here.

Coordinates: the slide's level 0 is 0.25 um/px; the network sees 0.5 um/px,
LEVEL0_PER_PIXEL = 2 level-0 pixels a side per network pixel. The output
mask is on the 0.5 um/px grid: ceil(size / 2) pixels a side.
"""
import dataclasses
import os
import pathlib

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]

SIZE = 50000  # level-0 width = height
SIZE_SMALL = 4096  # --small: a CPU's smoke test
SEED = 0
MPP = 0.5  # the network's resolution
LEVEL0_PER_PIXEL = 2  # slide level 0 is 0.25 um/px
ROI = 512
# No overlap: the users' loop tiles the slide and stitches; with overlap both
# sides would also have to agree on the blending, which is not what is measured.
OVERLAP = 0.0
BATCH = 16
CLASSES = 3  # background, stroma, nucleus
# segrt normalises an image as (x * segrt.input.scale - mean) / std per
# channel (src/pipeline/job_window.c; tests/slide/slide_synth.py): the
# scale is 1/255, not 255. The PyTorch loops compute the same in float32.
SCALE = 1.0 / 255.0
MEAN = (0.485, 0.456, 0.406)  # ImageNet's
STD = (0.229, 0.224, 0.225)
TRAIN_STEPS = int(os.environ.get("SBENCH_TRAIN_STEPS", "300"))
TRAIN_LR = float(os.environ.get("SBENCH_TRAIN_LR", "1e-3"))
# Tissue detection (the Python contenders): Otsu's threshold on the HSV
# saturation of the lowest level whose downsample is at most this; a patch
# is processed where at least TISSUE_MIN_SHARE of its footprint there is
# tissue (0: any tissue pixel).
TISSUE_MAX_DOWNSAMPLE = 64
TISSUE_MIN_SHARE = 0.0
LOADER_WORKERS = int(os.environ.get("SBENCH_LOADER_WORKERS", "8"))  # DataLoader workers reading patches
MASK_TILE = 256


def onnx_metadata():
    """segrt's metadata_props: the window, its overlap, the resolution and
    the input's normalisation, (x * scale - mean) / std per channel."""
    return {"segrt.roi": f"{ROI},{ROI}", "segrt.overlap": f"{OVERLAP:g}", "segrt.mpp": f"{MPP:g}",
            "segrt.input.scale": repr(SCALE), "segrt.input.mean": ",".join(f"{v:g}" for v in MEAN),
            "segrt.input.std": ",".join(f"{v:g}" for v in STD)}


@dataclasses.dataclass(frozen=True)
class Paths:
    work: pathlib.Path

    @property
    def slide(self):
        return self.work / "slide.svs"

    @property
    def slide_json(self):
        return self.work / "slide.json"

    @property
    def onnx(self):
        return self.work / "model" / "net.onnx"

    @property
    def torch_weights(self):
        return self.work / "model" / "net_torch.pt"

    @property
    def model_json(self):
        return self.work / "model" / "model.json"

    def out_dir(self, contender):
        return self.work / "out" / contender

    def mask_file(self, contender):
        return self.out_dir(contender) / "mask.tif"

    def patches_file(self, contender):  # the Python contenders' processed patches (row, column of the grid)
        return self.out_dir(contender) / "patches.npy"

    def worker_json(self, contender):
        return self.work / "out" / f"{contender}.json"


def default_work_dir(small=False):
    return pathlib.Path(os.environ.get("SBENCH_WORK", f"/tmp/slide_vs_python{'-small' if small else ''}"))


# segrt's command line ({placeholders} filled by segrt_command()). Where the
# CLI lacks a flag segrt fails with its own message and run.py reports that
# beside the other contenders. Not --quiet: its summary lines say how many
# windows ran and where the time went (contenders.parse_segrt_summary).
SEGRT_ARGV = ["{segrt}", "run", "{onnx}", "{slide}", "-o", "{out}", "--mpp", "{mpp}", "--sw-batch", "{batch}",
              "--tissue", "otsu", "--device", "{device}"]


def segrt_command(segrt, paths, device, precision, batch):
    fill = {"segrt": str(segrt), "onnx": str(paths.onnx), "slide": str(paths.slide),
            "out": str(paths.mask_file("segrt")), "mpp": f"{MPP:g}", "batch": str(batch), "device": device}
    argv = [a.format(**fill) for a in SEGRT_ARGV]
    if device.startswith("cuda") and precision:
        argv += ["--precision", precision]
    return argv
