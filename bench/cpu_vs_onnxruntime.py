#!/usr/bin/env python3
"""segrt's CPU engine beside onnxruntime's CPU provider, in one run, on the
same model, input shape and thread count. Prints the median latencies and
their ratio and writes the figures as JSON to bench/results/.

    .venv/bin/python bench/cpu_vs_onnxruntime.py [--threads N] [--iters 20]

The two sides alternate in --rounds rounds (segrt, then onnxruntime, each
--iters / rounds timed runs after --warmup untimed ones), and the medians are
taken over all timed runs of each side: a shared machine's speed drifts over
a minute, and alternating spreads the drift over both. segrt is timed by
`segrt bench --json` (the same engine the C API gives), onnxruntime in this
process with intra_op_num_threads = N and all graph optimizations on.
"""
import argparse
import datetime
import json
import os
import pathlib
import platform
import subprocess
import time

import numpy as np
import onnxruntime as ort

ROOT = pathlib.Path(__file__).resolve().parents[1]
CASES = [  # model, input shape: issue 3's benchmark set
    ("basicunet2d", (1, 3, 256, 256)),
    ("unet3d_spleen", (1, 1, 64, 64, 64)),
    ("basicunet2d_tiny", (8, 1, 96, 128)),
]


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def bench_segrt(segrt, model, shape, threads, iters, warmup):
    dims = "x".join(map(str, shape))
    out = subprocess.run([segrt, "bench", model, "--shape", f"image={dims}", "--threads", str(threads),
                          "--iters", str(iters), "--warmup", str(warmup), "--json"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


class OrtSide:
    def __init__(self, model, shape, threads):
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
        self.x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        self.name = self.sess.get_inputs()[0].name

    def times(self, iters, warmup):
        for _ in range(warmup):
            self.sess.run(None, {self.name: self.x})
        out = []
        for _ in range(iters):
            t0 = time.perf_counter()
            self.sess.run(None, {self.name: self.x})
            out.append((time.perf_counter() - t0) * 1e3)
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--segrt", default=str(ROOT / "build" / "segrt"))
    ap.add_argument("--models", default=os.environ.get("SEGRT_MODELS", str(ROOT.parent / "shared" / "models")))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5, help="alternations of the two sides")
    ap.add_argument("--out", default=None, help="JSON file (default: bench/results/cpu_<host>_<date>.json)")
    a = ap.parse_args()
    version = subprocess.run([a.segrt, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    rows = []
    per_round = max(1, a.iters // a.rounds)
    for name, shape in CASES:
        model = pathlib.Path(a.models) / f"{name}.onnx"
        ort_side = OrtSide(model, shape, a.threads)
        st, ot, info = [], [], None
        for _ in range(a.rounds):
            info = bench_segrt(a.segrt, str(model), shape, a.threads, per_round, a.warmup)
            st += info["times_ms"]
            ot += ort_side.times(per_round, a.warmup)
        s_med, o_med = float(np.median(st)), float(np.median(ot))
        rows.append({"model": name, "shape": list(shape), "gflop": info["gflop"],
                     "segrt_median_ms": s_med, "segrt_min_ms": float(np.min(st)),
                     "ort_median_ms": o_med, "ort_min_ms": float(np.min(ot)),
                     "speedup_vs_ort": o_med / s_med, "segrt_gflops_per_s": info["gflop"] / (s_med / 1e3),
                     "segrt_peak_bytes": info["peak_bytes"], "timed_runs_each": len(st)})
    result = {"benchmark": "cpu_vs_onnxruntime", "date": datetime.datetime.now().isoformat(timespec="seconds"),
              "host": platform.node(), "cpu": cpu_name(), "cores": os.cpu_count(), "threads": a.threads,
              "iters": a.iters, "rounds": a.rounds, "warmup": a.warmup, "segrt": version, "onnxruntime": ort.__version__,
              "cases": rows}
    out = pathlib.Path(a.out) if a.out else ROOT / "bench" / "results" / (
        f"cpu_{platform.node()}_{datetime.date.today().isoformat()}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{result['cpu']}, {a.threads} threads, median of {per_round * a.rounds} runs each, "
          f"in {a.rounds} alternating rounds")
    print(f"{'model':18} {'input':>16} {'GFLOP':>7} {'segrt ms':>9} {'ORT ms':>9} {'speedup':>8} {'GFLOP/s':>8}")
    for r in rows:
        print(f"{r['model']:18} {'x'.join(map(str, r['shape'])):>16} {r['gflop']:7.2f} {r['segrt_median_ms']:9.2f} "
              f"{r['ort_median_ms']:9.2f} {r['speedup_vs_ort']:7.2f}x {r['segrt_gflops_per_s']:8.1f}")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
