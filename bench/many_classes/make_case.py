#!/usr/bin/env python3
"""A synthetic CT-like image as float32 .npy, 1 x 1 x D x H x W (full: 400 x
512 x 512, 420 MB), deterministic for a seed.

    python3 make_case.py [--tiny] [--work DIR] [--seed N]

Intensities are what a network sees after nnU-Net's CT normalisation,
(clip(HU, -1000, 1500) - 100) / 400: air outside an ellipsoidal body;
inside it, regions of six tissue levels (lung -850, fat -80, soft tissue 40,
organ 60, contrast 180, bone 700 HU) cut from a smooth random field, so that
the regions are blobs with sharp edges some tens of voxels across; a second
smooth field varies each level by +-15 HU, and noise of 10 HU (5 in the air)
is added. The fields are random values on a coarse 10 x 12 x 12 grid
spread over the whole image by Gaussian weights, so the tiny image holds
the same anatomy as the full one. The random network's labels then follow
the regions and their edges instead of being one class everywhere.
"""
import argparse
import json
import os
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

COARSE = (10, 12, 12)
# (HU, fraction of the body's voxels): cut points at the cumulative
# fractions of the first field's values inside the body.
LEVELS = [(-850.0, 0.18), (-80.0, 0.12), (40.0, 0.30), (60.0, 0.22), (180.0, 0.08), (700.0, 0.10)]
BODY_SEMI_AXES = (0.92, 0.80, 0.88)  # fractions of the half field of view (z, y, x)


def spread(n, coarse, width=0.7):
    """n x coarse weights placing `coarse` random values evenly over n
    voxels, each a Gaussian of `width` coarse steps, rows summing to 1."""
    pos = (np.arange(n) + 0.5) / n * coarse - 0.5
    w = np.exp(-0.5 * ((pos[:, None] - np.arange(coarse)[None, :]) / width) ** 2)
    return (w / w.sum(axis=1, keepdims=True)).astype(np.float32)


def smooth_field(rng, shape, z0, z1):
    """Slices z0..z1 of a smooth random field with zero mean and about unit
    spread, the same values whatever the slab (the coarse values come first
    from rng)."""
    c = rng.standard_normal(COARSE).astype(np.float32)
    wz, wy, wx = (spread(n, k) for n, k in zip(shape, COARSE))
    f = np.einsum("zc,cde,yd,xe->zyx", wz[z0:z1], c, wy, wx, optimize=True)
    return f * np.float32(2.0)  # Gaussian weights average the coarse values down: back to about unit spread


def make_volume(s, seed):
    """float32 (D, H, W), normalised CT intensities."""
    nz, ny, nx = s.shape_zyx
    rng = np.random.default_rng(seed)
    shape = s.shape_zyx
    # The fields' coarse values are drawn once for the whole volume; the
    # noise slab by slab, in order, so the result does not depend on memory.
    coarse_rng = [np.random.default_rng(rng.integers(2**63)) for _ in range(2)]
    states = [r.bit_generator.state for r in coarse_rng]

    def field(i, z0, z1):
        r = np.random.default_rng()
        r.bit_generator.state = states[i]
        return smooth_field(r, shape, z0, z1)

    # Level cut points from the first field's values inside the body, on a
    # whole-volume sample (every 4th slice), so that slabs agree.
    zs = np.arange(0, nz, 4)
    sample = np.concatenate([field(0, z, z + 1)[body_mask(s, z, z + 1)] for z in zs])
    cum = np.cumsum([f for _, f in LEVELS])[:-1] / sum(f for _, f in LEVELS)
    cuts = np.quantile(sample, cum).astype(np.float32)
    hus = np.array([h for h, _ in LEVELS], np.float32)
    vol = np.empty(shape, np.float32)
    slab = max(1, min(nz, 2**24 // (ny * nx)))
    for z0 in range(0, nz, slab):
        z1 = min(nz, z0 + slab)
        f0, f1 = field(0, z0, z1), field(1, z0, z1)
        body = body_mask(s, z0, z1)
        hu = np.where(body, hus[np.searchsorted(cuts, f0)] + 15.0 * np.tanh(f1), np.float32(-1000.0))
        hu += rng.standard_normal(hu.shape, dtype=np.float32) * np.where(body, np.float32(10.0), np.float32(5.0))
        vol[z0:z1] = (np.clip(hu, -1000.0, 1500.0) - 100.0) / 400.0
    return vol


def body_mask(s, z0, z1):
    nz, ny, nx = s.shape_zyx
    u = [((np.arange(n) + 0.5) / n * 2.0 - 1.0) / a for n, a in zip(s.shape_zyx, BODY_SEMI_AXES)]
    uz = u[0][z0:z1]
    return uz[:, None, None] ** 2 + u[1][None, :, None] ** 2 + u[2][None, None, :] ** 2 <= 1.0


def make(paths, s, seed=common.SEED, log=print):
    t0 = time.perf_counter()
    vol = make_volume(s, seed)
    t1 = time.perf_counter()
    paths.image.parent.mkdir(parents=True, exist_ok=True)
    tmp = paths.image.with_name(paths.image.name + ".tmp.npy")
    np.save(tmp, vol.reshape((1, 1) + vol.shape))
    os.replace(tmp, paths.image)
    t2 = time.perf_counter()
    info = {"setup": s.name, "seed": seed, "shape": [1, 1] + list(s.shape_zyx), "dtype": "float32",
            "bytes": os.path.getsize(paths.image), "min": float(vol.min()), "max": float(vol.max()),
            "mean": float(vol.mean()), "levels_hu": [h for h, _ in LEVELS],
            "normalisation": "(clip(HU, -1000, 1500) - 100) / 400",
            "seconds": {"volume": t1 - t0, "write": t2 - t1}}
    paths.case_json.write_text(json.dumps(info, indent=1) + "\n")
    log(f"case: {'x'.join(map(str, info['shape']))} float32, {info['bytes'] / 2**20:.0f} MiB, values "
        f"{info['min']:.2f}..{info['max']:.2f}: made in {t1 - t0:.1f} s, written in {t2 - t1:.1f} s")
    return info


def matches(paths, s, seed):
    try:
        info = json.loads(paths.case_json.read_text())
    except (OSError, ValueError):
        return False
    return info.get("shape") == [1, 1] + list(s.shape_zyx) and info.get("seed") == seed and paths.image.is_file()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help=f"{'x'.join(map(str, common.TINY.shape_zyx))}")
    ap.add_argument("--work", default=None, help="work folder (default $MCBENCH_WORK or /tmp/many_classes[-tiny])")
    ap.add_argument("--seed", type=int, default=common.SEED)
    a = ap.parse_args(argv)
    paths = common.Paths(common.default_work_dir(a.tiny) if a.work is None else pathlib.Path(a.work))
    make(paths, common.setup(a.tiny), a.seed)


if __name__ == "__main__":
    main()
