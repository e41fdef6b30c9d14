#!/usr/bin/env python3
"""Two builds of segrt side by side in one run: the same benchmarks through
each build's `segrt` command, the sides alternating round by round so that
clock and thermal drift fall on both alike. For changes that must not move
speed (a restructuring): the table says, per case, each side's median and
the spread of its rounds, and whether the two agree within that spread.

    usage: old_vs_new.py --a DIR --b DIR --models DIR [--rounds N] [--out FILE]

DIR holds `segrt` and `lib/` (the carried layout, scripts/gpu-carry.sh);
each side runs with its own lib/ first on LD_LIBRARY_PATH. Cases:
`segrt bench` (device-resident inputs, fp16) on the two shared models,
and a whole sliding-window job (`segrt run --roi`, float32 NPY image
in host memory, uint8 labels out; the time is the job's own, printed by
segrt, without the engine build), 2-D.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

BENCH = [  # label, model, shape, precision
    ("basicunet2d 16x3x512x512 fp16", "basicunet2d.onnx", "image=16x3x512x512", "fp16"),
    ("unet3d_spleen 4x1x96^3 fp16", "unet3d_spleen.onnx", "image=4x1x96x96x96", "fp16"),
]
JOBS = [  # label, model, image dims, roi, sw batch
    ("window job 2d 3x2048x2048 roi 512", "basicunet2d.onnx", (1, 3, 2048, 2048), "512,512", 16),
]
P50 = re.compile(r"latency \(ms\): p50 ([0-9.]+)")
JOB_S = re.compile(r", ([0-9.]+) s(,|$)", re.M)


def side_env(d):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.join(d, "lib") + ":" + env.get("LD_LIBRARY_PATH", "")
    # Each side its own plan cache: the two builds' plan files need not be
    # each other's (a format change would make them rebuild every call).
    env["XDG_CACHE_HOME"] = os.path.join(d, "plan-cache")
    return env


def run(cmd, env):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p.stdout + p.stderr


def bench_ms(d, models, model, shape, prec, iters):
    out = run([os.path.join(d, "segrt"), "bench", os.path.join(models, model), "--shape", shape, "--device", "cuda",
               "--precision", prec, "--iters", str(iters), "--warmup", "5"], side_env(d))
    m = P50.search(out)
    if not m:
        raise SystemExit(f"no latency line in:\n{out}")
    return float(m.group(1))


def job_ms(d, models, model, image, roi, batch, cache, outdir, tag):
    out_path = os.path.join(outdir, f"labels-{tag}.npy")
    out = run([os.path.join(d, "segrt"), "run", os.path.join(models, model), image, "-o", out_path, "--roi", roi,
               "--sw-batch", str(batch), "--device", "cuda", "--precision", "fp16", "--output", "labels",
               "--cache-dir", cache], side_env(d))
    m = JOB_S.search(out)
    if not m:
        raise SystemExit(f"no job time in:\n{out}")
    return float(m.group(1)) * 1e3, out_path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, help="the old build (segrt, lib/)")
    ap.add_argument("--b", required=True, help="the new build")
    ap.add_argument("--models", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    sides = {"old": args.a, "new": args.b}
    times = {}
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(0)
        images = []
        for i, (_, _, dims, _, _) in enumerate(JOBS):
            path = os.path.join(tmp, f"image{i}.npy")
            np.save(path, rng.standard_normal(dims, dtype=np.float32))
            images.append(path)
        caches = {k: os.path.join(tmp, f"cache-{k}") for k in sides}
        # One untimed pass per side builds and caches every plan first.
        for name, d in sides.items():
            for label, model, shape, prec in BENCH:
                bench_ms(d, args.models, model, shape, prec, 3)
            for (label, model, dims, roi, batch), image in zip(JOBS, images):
                job_ms(d, args.models, model, image, roi, batch, caches[name], tmp, name)
        labels_equal = {}
        for r in range(args.rounds):
            order = list(sides.items()) if r % 2 == 0 else list(sides.items())[::-1]
            for name, d in order:
                for label, model, shape, prec in BENCH:
                    times.setdefault(label, {}).setdefault(name, []).append(
                        bench_ms(d, args.models, model, shape, prec, args.iters))
                for (label, model, dims, roi, batch), image in zip(JOBS, images):
                    ms, path = job_ms(d, args.models, model, image, roi, batch, caches[name], tmp, name)
                    times.setdefault(label, {}).setdefault(name, []).append(ms)
                    os.replace(path, os.path.join(tmp, f"{label}-{name}.npy"))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        for label, *_ in JOBS:
            a = np.load(os.path.join(tmp, f"{label}-old.npy"))
            b = np.load(os.path.join(tmp, f"{label}-new.npy"))
            labels_equal[label] = bool(a.shape == b.shape and np.array_equal(a, b))
    rows = []
    print(f"{'case':40s} {'old ms (p10-p90)':>24s} {'new ms (p10-p90)':>24s} {'new/old':>8s}  within noise")
    for label, by in times.items():
        st = {}
        for name in sides:
            v = sorted(by[name])
            q = statistics.quantiles(v, n=10) if len(v) > 1 else [v[0]] * 9
            st[name] = (statistics.median(v), q[0], q[-1])
        (ma, la, ha), (mb, lb, hb) = st["old"], st["new"]
        # Agree when each median lies inside the other side's p10-p90 band.
        agree = la <= mb <= ha or lb <= ma <= hb
        ratio = mb / ma
        line = (f"{label:40s} {ma:9.3f} ({la:.3f}-{ha:.3f}) {mb:9.3f} ({lb:.3f}-{hb:.3f}) {ratio:8.3f}  "
                f"{'yes' if agree else 'NO'}")
        if label in labels_equal:
            line += f"  labels identical: {'yes' if labels_equal[label] else 'NO'}"
        print(line)
        rows.append({"case": label, "old_ms": by["old"], "new_ms": by["new"], "ratio": ratio, "within_noise": agree,
                     "labels_identical": labels_equal.get(label)})
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "rounds": args.rounds, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
