#!/usr/bin/env python3
"""One contender of bench/slide_vs_python in its own process: --warmup
untimed runs, then --runs timed runs, each from the slide file on disk to a
pyramidal mask TIFF on disk, model load included (run.py starts it, watches
its memory and compares the masks).

    python3 contenders.py torch_openslide|torch_cucim|segrt --work DIR [--device cuda] [--runs N] [--warmup N]
        [--segrt PATH] [--batch 16] [--loader-workers N]

torch_openslide / torch_cucim: the loop users run today, as a careful user
writes it (README.md, "The contenders"): tissue by Otsu on the saturation of
a low level, the 512^2 grid at 0.5 um/px, each patch read at level 0 as
1024^2 and reduced 2 x 2 by block means, in a torch DataLoader (worker
processes, each with its own slide handle; pinned memory) in batches of 16,
normalised on the GPU, the network under torch.autocast(float16),
channels_last, argmax, the labels copied back and stitched into a numpy
uint8 mask, written as a pyramidal tiled TIFF (SubIFDs, deflate) by
tifffile. segrt: its CLI, a new process a run.
"""
import argparse
import json
import math
import os
import pathlib
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/: harness
import config  # noqa: E402
from harness import log, versions, fresh_dir, find_segrt, write_json  # noqa: E402

PYTHON_CONTENDERS = ("torch_openslide", "torch_cucim")
ALL = PYTHON_CONTENDERS + ("segrt",)


# ---------------------------------------------------------------------------
# Readers: one slide handle per process (DataLoader workers open their own).


class OpenSlideReader:
    def __init__(self, path):
        import openslide
        self.s = openslide.OpenSlide(str(path))
        self.dimensions = self.s.dimensions
        self.level_downsamples = list(self.s.level_downsamples)
        self.level_dimensions = list(self.s.level_dimensions)

    def read(self, x, y, w, h, level=0):
        """RGB uint8 (h, w, 3); read_region's transparent pixels past the
        slide's edge (RGBA 0) become white, as the slide's background."""
        a = np.asarray(self.s.read_region((x, y), level, (w, h)))
        rgb = a[..., :3].copy()
        rgb[a[..., 3] == 0] = 255
        return rgb


class CuCimReader:
    def __init__(self, path):
        from cucim import CuImage
        self.s = CuImage(str(path))
        res = self.s.resolutions
        self.dimensions = tuple(self.s.size("XY"))
        self.level_downsamples = list(res["level_downsamples"])
        self.level_dimensions = [tuple(d) for d in res["level_dimensions"]]

    def read(self, x, y, w, h, level=0):
        a = np.asarray(self.s.read_region(location=(x, y), size=(w, h), level=level))[..., :3].copy()
        # Past the edge: white, as OpenSlideReader (cuCIM's fill there is not the background's).
        ds = self.level_downsamples[level]
        lw, lh = self.level_dimensions[level]
        vx, vy = max(0, min(w, lw - int(x / ds))), max(0, min(h, lh - int(y / ds)))
        a[vy:, :] = 255
        a[:, vx:] = 255
        return a


READERS = {"torch_openslide": OpenSlideReader, "torch_cucim": CuCimReader}


def tissue_grid(reader, log_fn=None):
    """(tissue mask at the chosen level, its downsample, Otsu threshold, the
    grid's rows and columns, the processed patches as (row, column) pairs)."""
    from skimage.color import rgb2hsv
    from skimage.filters import threshold_otsu
    level = max(i for i, d in enumerate(reader.level_downsamples) if d <= config.TISSUE_MAX_DOWNSAMPLE + 1e-6)
    lw, lh = reader.level_dimensions[level]
    ds = reader.level_downsamples[level]
    low = reader.read(0, 0, lw, lh, level)
    sat = rgb2hsv(low)[..., 1]
    thr = float(threshold_otsu(sat))
    tissue = sat > thr
    W, H = reader.dimensions
    f = config.LEVEL0_PER_PIXEL
    gw, gh = math.ceil(W / f), math.ceil(H / f)  # the mask at 0.5 um/px
    rows, cols = math.ceil(gh / config.ROI), math.ceil(gw / config.ROI)
    span = config.ROI * f / ds  # a patch's side at the tissue level
    keep = []
    for r in range(rows):
        y0, y1 = int(r * span), max(int(math.ceil((r + 1) * span)), int(r * span) + 1)
        for c in range(cols):
            x0, x1 = int(c * span), max(int(math.ceil((c + 1) * span)), int(c * span) + 1)
            fp = tissue[y0:y1, x0:x1]
            if fp.size and fp.mean() > config.TISSUE_MIN_SHARE if config.TISSUE_MIN_SHARE > 0 else fp.any():
                keep.append((r, c))
    return {"level": level, "downsample": ds, "otsu": thr, "tissue_share": float(tissue.mean()), "rows": rows,
            "cols": cols, "mask_shape": [gh, gw], "patches": keep}


class PatchSet:
    """torch Dataset of the grid's tissue patches: 1024^2 at level 0 -> 512^2."""

    def __init__(self, kind, path, patches):
        self.kind, self.path, self.patches = kind, path, patches
        self.reader = None

    def __len__(self):
        return len(self.patches)

    def __getitem__(self, i):
        if self.reader is None:
            self.reader = READERS[self.kind](self.path)
        r, c = self.patches[i]
        f, n = config.LEVEL0_PER_PIXEL, config.ROI
        a = self.reader.read(c * n * f, r * n * f, n * f, n * f, 0)
        a = a.reshape(n, f, n, f, 3).mean(axis=(1, 3), dtype=np.float32)
        return np.ascontiguousarray((a + 0.5).astype(np.uint8)), i


def write_mask(path, mask, mpp):
    """A pyramidal tiled TIFF: level 0 and SubIFDs at 1/4, 1/16... (nearest),
    deflate, the resolution in pixels per centimetre; written to a temporary
    name and renamed."""
    import tifffile
    levels = [mask]
    while max(levels[-1].shape) > 4 * config.MASK_TILE:
        levels.append(levels[-1][::4, ::4])
    tmp = path.with_name(path.name + ".tmp")
    res = 1e4 / mpp
    with tifffile.TiffWriter(tmp, bigtiff=mask.size > 2**31) as tw:
        opts = dict(tile=(config.MASK_TILE, config.MASK_TILE), compression="zlib", photometric="minisblack",
                    metadata=None, resolutionunit="CENTIMETER")
        tw.write(levels[0], subifds=len(levels) - 1, resolution=(res, res), **opts)
        for i, lv in enumerate(levels[1:], 1):
            r = res / 4**i
            tw.write(lv, subfiletype=1, resolution=(r, r), **opts)
    os.replace(tmp, path)


class Torch:
    def __init__(self, name, a, paths):
        import torch
        import make_model
        self.torch, self.make_model = torch, make_model
        self.name, self.a, self.paths = name, a, paths
        READERS[name](paths.slide)  # fails here (not in a run) without the reader's package
        self.device = torch.device(a.device)
        self.amp = self.device.type == "cuda"
        if self.amp:
            torch.backends.cudnn.benchmark = True
            torch.cuda.reset_peak_memory_stats(self.device)

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def run(self, out_dir):
        torch, dev, mm = self.torch, self.device, self.make_model
        t = {}
        t0 = time.perf_counter()
        ck = torch.load(self.paths.torch_weights, map_location="cpu", weights_only=True)
        net = mm.build_network(ck["classes"])
        net.load_state_dict(ck["state_dict"])
        net = net.to(dev).eval().to(memory_format=torch.channels_last)
        self.sync()
        t1 = time.perf_counter()
        t["load"] = t1 - t0
        reader = READERS[self.name](self.paths.slide)
        g = tissue_grid(reader)
        t2 = time.perf_counter()
        t["tissue"] = t2 - t1
        gh, gw = g["mask_shape"]
        mask = np.zeros((gh, gw), np.uint8)
        ds = PatchSet(self.name, self.paths.slide, g["patches"])
        loader = torch.utils.data.DataLoader(ds, batch_size=self.a.batch, shuffle=False,
                                             num_workers=self.a.loader_workers, pin_memory=self.amp,
                                             prefetch_factor=4 if self.a.loader_workers else None)
        n = config.ROI
        wait = infer = stitch = 0.0
        tw = time.perf_counter()
        with torch.no_grad():
            for imgs, idx in loader:
                ta = time.perf_counter()
                wait += ta - tw
                x = mm.normalise(torch, imgs, dev)
                with torch.autocast(dev.type, dtype=torch.float16, enabled=self.amp):
                    lab = net(x).argmax(1).to(torch.uint8)
                lab = lab.cpu().numpy()
                tb = time.perf_counter()
                infer += tb - ta
                for k, i in enumerate(idx.tolist()):
                    r, c = g["patches"][i]
                    h, w = min(n, gh - r * n), min(n, gw - c * n)
                    mask[r * n:r * n + h, c * n:c * n + w] = lab[k, :h, :w]
                tw = time.perf_counter()
                stitch += tw - tb
        del loader
        t3 = time.perf_counter()
        t["read_wait"], t["infer"], t["stitch"] = wait, infer, stitch
        write_mask(self.paths.mask_file(self.name), mask, config.MPP)
        np.save(self.paths.patches_file(self.name), np.asarray(g["patches"], np.int32).reshape(-1, 2))
        t4 = time.perf_counter()
        t["write"] = t4 - t3
        extra = {"patches": len(g["patches"]), "grid": [g["rows"], g["cols"]], "mask_shape": [gh, gw],
                 "tissue": {k: g[k] for k in ("level", "downsample", "otsu", "tissue_share")},
                 "classes_pixels": np.bincount(mask.ravel(), minlength=ck["classes"]).tolist()}
        if self.amp:
            extra["torch_max_memory_allocated"] = torch.cuda.max_memory_allocated(dev)
        del net, mask
        return t4 - t0, t, extra

    def versions(self):
        v = versions(["torch", "numpy", "scikit-image", "tifffile", "openslide-python", "openslide-bin",
                      "cucim-cu12", "cucim"])
        v["torch_cuda"] = self.torch.version.cuda
        v["loader_workers"] = self.a.loader_workers
        return v


# ---------------------------------------------------------------------------


def parse_segrt_summary(text):
    """(windows, {part: seconds}) from segrt run's summary lines:
    "...: 16 windows (16 a run), cuda fp16, 0.5 s" and "segrt: time: loading
    the model 0.229 s, reading the image 0.534 s, ..."; None and {} where
    they are missing."""
    import re
    m = re.search(r"(\d+) windows? \(", text)
    windows = int(m.group(1)) if m else None
    parts = {}
    t = re.search(r"^segrt: time: (.*)$", text, re.M)
    if t:
        for name, sec in re.findall(r"([a-z][a-z ]*?) ([0-9.]+) s(?:,|$)", t.group(1)):
            parts[name.strip().replace(" ", "_")] = float(sec)
    return windows, parts


class Segrt:
    def __init__(self, a, paths):
        self.a, self.paths = a, paths
        self.segrt = find_segrt(a.segrt)
        self.env = dict(os.environ)
        if a.segrt_cache:
            self.env["XDG_CACHE_HOME"] = a.segrt_cache

    def run(self, out_dir):
        argv = config.segrt_command(self.segrt, self.paths, self.a.device, self.a.precision, self.a.batch)
        t0 = time.perf_counter()
        r = subprocess.run(argv, env=self.env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            raise RuntimeError(f"exit {r.returncode}: {' '.join(argv)}\n{(r.stdout + r.stderr)[-3000:]}")
        windows, parts = parse_segrt_summary(r.stdout + r.stderr)
        extra = {"stdout_tail": (r.stdout + r.stderr)[-1200:], "argv": argv}
        if windows is not None:
            extra["patches"] = windows
        return wall, {"process": wall, **{f"segrt_{k}": v for k, v in parts.items()}}, extra

    def versions(self):
        r = subprocess.run([str(self.segrt), "--version"], capture_output=True, text=True, env=self.env)
        return {"segrt": (r.stdout + r.stderr).strip(), "segrt_binary": str(self.segrt)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("contender", choices=ALL)
    ap.add_argument("--work", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--batch", type=int, default=config.BATCH)
    ap.add_argument("--loader-workers", type=int, default=config.LOADER_WORKERS)
    ap.add_argument("--segrt", default=str(config.ROOT / "build"))
    ap.add_argument("--segrt-cache", default=None)
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="start no timed run that would end past this many seconds from the start (judged by the "
                         "last run), after at least one")
    a = ap.parse_args(argv)
    paths = config.Paths(pathlib.Path(a.work))
    t_start = time.perf_counter()
    res = {"contender": a.contender, "device": a.device, "runs": [], "warmup": a.warmup, "batch": a.batch}
    out_json = paths.worker_json(a.contender)
    out_dir = paths.out_dir(a.contender)
    try:
        if a.contender == "torch_cucim":
            # Before torch: cuCIM 26.10 spins forever when imported, or its first slide opened, after torch
            # is imported (seen on a CPU); once a slide is open, later opens (forked workers too) work.
            from cucim import CuImage
            CuImage(str(paths.slide))
        c = Segrt(a, paths) if a.contender == "segrt" else Torch(a.contender, a, paths)
    except (ImportError, OSError) as e:
        res["error"] = f"skipped: {type(e).__name__}: {e}"
        log(f"{a.contender}: {res['error']}")
        out_json.parent.mkdir(parents=True, exist_ok=True)
        out_json.write_text(json.dumps(res, indent=1) + "\n")
        return 1
    if isinstance(c, Torch) and c.device.type == "cuda":
        c.torch.zeros(1, device=c.device)  # the CUDA context, outside the runs
        c.sync()
    res["process_init_s"] = time.perf_counter() - t_start
    res["versions"] = c.versions()
    log(f"{a.contender}: imports and start {res['process_init_s']:.1f} s; {a.warmup} warm-up + {a.runs} timed runs")
    wall = 0.0
    try:
        for i in range(a.warmup + a.runs):
            elapsed = time.perf_counter() - t_start
            if a.max_seconds is not None and res["runs"] and elapsed + wall > a.max_seconds:
                log(f"{a.contender}: stopping after {len(res['runs'])} timed runs (--max-seconds {a.max_seconds:.0f})")
                res["stopped_by_max_seconds"] = True
                break
            fresh_dir(out_dir)
            wall, parts, extra = c.run(out_dir)
            run = {"wall_s": wall, "parts_s": parts, **extra}
            if i == 0:
                res["first_run"] = run
            if i >= a.warmup:
                res["runs"].append(run)
            log(f"{a.contender}: {'warm-up' if i < a.warmup else 'run'} {i + 1}: {wall:.2f} s ("
                + ", ".join(f"{k} {v:.2f}" for k, v in parts.items()) + ")"
                + (f", {extra['patches']} patches" if "patches" in extra else ""))
        if not paths.mask_file(a.contender).exists():
            raise RuntimeError(f"no {paths.mask_file(a.contender)}")
        res["mask_file"] = str(paths.mask_file(a.contender))
    except Exception as e:  # noqa: BLE001 - the harness reports it beside the others
        res["error"] = f"{type(e).__name__}: {e}"
        log(f"{a.contender}: FAILED {res['error']}")
    write_json(out_json, res)
    return 1 if "error" in res else 0


if __name__ == "__main__":
    sys.exit(main())
