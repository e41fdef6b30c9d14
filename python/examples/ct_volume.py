"""A CT volume (as pydicom or nibabel give it: a numpy array, depth x
height x width) through a 3-D model with sliding windows, labels out.

    python ct_volume.py MODEL.onnx [--device cuda|cpu] [--size D H W]

Runs on a synthetic volume (a bright ellipsoid in noise, in HU) so that it
needs no data; swap in your own array."""
import argparse
import time

import numpy as np

import segrt


def synthetic_ct(d, h, w, seed=0):
    rng = np.random.default_rng(seed)
    z, y, x = np.mgrid[:d, :h, :w].astype(np.float32)
    inside = ((z - d / 2) / (d / 3)) ** 2 + ((y - h / 2) / (h / 4)) ** 2 + ((x - w / 2) / (w / 5)) ** 2 < 1
    return np.where(inside, 60.0, -1000.0).astype(np.float32) + rng.normal(0, 20, (d, h, w)).astype(np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--size", type=int, nargs=3, default=(160, 192, 192), metavar=("D", "H", "W"))
    args = ap.parse_args()
    volume = synthetic_ct(*args.size)
    image = np.clip((volume + 1000.0) / 1400.0, 0.0, 1.0)  # a window of HU scaled to [0, 1]
    precision = "fp16" if args.device != "cpu" else "fp32"

    # The three lines a user writes:
    with segrt.Engine(args.model, device=args.device, precision=precision) as engine:
        t0 = time.perf_counter()
        labels = segrt.sliding_window(engine, image[None, None], roi=(96, 96, 96), overlap=0.5, progress=False)
        seconds = time.perf_counter() - t0

    labels = labels[0, 0]
    assert labels.shape == volume.shape and labels.dtype == np.uint8, (labels.shape, labels.dtype)
    counts = np.bincount(labels.ravel(), minlength=2)
    print(f"ct_volume: {volume.shape} -> labels {labels.shape} {labels.dtype} in {seconds:.2f} s on "
          f"{args.device}; voxels per class {counts.tolist()}")


if __name__ == "__main__":
    main()
