"""A batch of patches from a whole slide through a 2-D model: the patches
as openslide-python's read_region gives them (RGBA, height x width x 4),
stacked, as channels-first float32 in [0, 1].

    python slide_patches.py MODEL.onnx [--device cuda|cpu] [--patch 512] [--batch 16]

Cuts the patches from a synthetic RGBA slide (a numpy array standing for
openslide.OpenSlide(path).read_region) so that it needs no slide file."""
import argparse
import time

import numpy as np

import segrt


class SyntheticSlide:
    """What the example needs of openslide.OpenSlide: read_region at level 0."""

    def __init__(self, height, width, seed=0):
        rng = np.random.default_rng(seed)
        self.pixels = rng.integers(0, 256, (height, width, 4), dtype=np.uint8)
        self.pixels[..., 3] = 255

    def read_region(self, location, level, size):
        x, y = location
        w, h = size
        return self.pixels[y:y + h, x:x + w]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--patch", type=int, default=512)
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args()
    p, n = args.patch, args.batch
    slide = SyntheticSlide(p * 4, p * 4)
    coords = [(p * (i % 4), p * (i // 4 % 4)) for i in range(n)]
    precision = "fp16" if args.device != "cpu" else "fp32"

    # The lines a user writes:
    patches = np.stack([np.asarray(slide.read_region((x, y), 0, (p, p)))[..., :3] for x, y in coords])
    batch = np.ascontiguousarray(patches.transpose(0, 3, 1, 2), dtype=np.float32) / 255
    with segrt.Engine(args.model, device=args.device, precision=precision,
                      shapes={"image": ((1, 3, p, p), (n, 3, p, p), (2 * n, 3, p, p))}) as engine:
        t0 = time.perf_counter()
        masks = engine(batch).argmax(axis=1)
        seconds = time.perf_counter() - t0

    assert masks.shape == (n, p, p), masks.shape
    print(f"slide_patches: {n} patches of {p}x{p} -> masks {masks.shape} in {seconds * 1e3:.1f} ms on {args.device}")


if __name__ == "__main__":
    main()
