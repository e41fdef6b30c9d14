#!/usr/bin/env python3
"""segrt's sliding-window job timed alone, back to back, and right after a
burst of other GPU work: where a side-by-side run that alternates the
sides puts its short runs (bench/sw_vs_monai.py).

    python3 bench/sw_interference.py [--job 2d|3d] [--sw-batch 16] [--runs 12]
        [--burst-ms 40] [--models-dir DIR] [--small] [--device cuda|cpu]
        [--out FILE.json]

The engine and image are sw_vs_monai.py's (SegrtSide, make_image; a batch
range 1..sw_batch on cuda). --runs runs back to back, then --runs runs each
after --burst-ms of PyTorch float16 8192^2 matrix products on the same GPU
(synchronized before segrt starts; 0: no burst, and no PyTorch needed).
Every run prints its wall time and segrt_window_run_timed's split (setup,
run, uploading, waiting for the GPU, downloading), and the medians of both
groups close the output. Timing only: a diagnostic, not a target.
"""
import argparse
import json
import os
import pathlib
import statistics
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import sw_vs_monai as swm  # noqa: E402 - after the path

SPLIT = ("setup", "run", "uploading", "waiting", "downloading")


def gpu_burst(ms):
    """A function that keeps the GPU on float16 matrix products for about
    ms milliseconds and waits for them (None for ms <= 0). One product
    (4096^2, about 0.2 ms on an H100) is in flight at a time: enqueued
    freely, products pile up far beyond ms (a first version's "40 ms"
    kept the GPU busy for about a second)."""
    if ms <= 0:
        return None
    import torch
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)

    def burst():
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < ms / 1e3:
            a @ a
            torch.cuda.synchronize()
    return burst


def one_run(side):
    t0 = time.perf_counter()
    with side.run() as r:
        ms = (time.perf_counter() - t0) * 1e3
        stats = r.stats or {}
    split = {k: stats.get(f"seconds_{k}", float("nan")) * 1e3 for k in SPLIT}
    return ms, split


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", default="2d", choices=("2d", "3d"))
    ap.add_argument("--sw-batch", type=int, default=16)
    ap.add_argument("--runs", type=int, default=12, help="runs per group (default 12)")
    ap.add_argument("--burst-ms", type=float, default=40.0)
    ap.add_argument("--models-dir", default=os.environ.get("SEGRT_MODELS", str(ROOT.parent / "shared" / "models")))
    ap.add_argument("--small", action="store_true", help="sw_vs_monai.py's tiny images, for smoke tests")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    if a.runs < 1 or a.sw_batch < 1:
        ap.error("--runs and --sw-batch must be at least 1")
    job = (swm.SMALL_JOBS if a.small else swm.JOBS)[a.job]
    image = swm.make_image(job.image, 0)
    side = swm.SegrtSide(str(pathlib.Path(a.models_dir) / f"{job.model}.onnx"), image, job, a.sw_batch, "gaussian",
                         a.device, precision="fp16" if a.device == "cuda" else None)
    burst = gpu_burst(a.burst_ms if a.device == "cuda" else 0)
    groups = {"alone": [], "after_burst": []}
    try:
        one_run(side)  # the short batch's plan, the caches
        for name in groups if burst else ("alone",):
            for i in range(a.runs):
                if name == "after_burst":
                    burst()
                ms, split = one_run(side)
                groups[name].append({"ms": ms, **split})
                swm.log(f"{name} {i + 1}: {ms:.2f} ms (" + ", ".join(f"{k} {v:.2f}" for k, v in split.items()) + ")")
    finally:
        side.close()
    summary = {name: {k: statistics.median(r[k] for r in runs) for k in ("ms",) + SPLIT}
               for name, runs in groups.items() if runs}
    for name, s in summary.items():
        print(f"{name}: median {s['ms']:.2f} ms (" + ", ".join(f"{k} {s[k]:.2f}" for k in SPLIT) + ")")
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps({
            "benchmark": "sw_interference", "job": a.job, "sw_batch": a.sw_batch, "burst_ms": a.burst_ms,
            "device": a.device, "small": a.small, "runs": groups, "median": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
