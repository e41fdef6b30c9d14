#!/usr/bin/env python3
"""From a plan file to its first result, as a service starting up meets it.

For each model: `segrt build` writes a plan for the benchmark's batch
(timed: the build target), then each of --runs fresh processes loads the
plan (segrt_engine_load), creates a context (segrt_context_create:
device memory and this context's cuDNN execution plans) and runs it once
on host data (upload, run, download), each phase timed with
time.perf_counter. The CUDA runtime's own start (cudaFree(0), before segrt
is called) is timed apart: a process pays it whatever it runs. The same
with a plan built with --disable-kernels cudnn-plan-json, whose contexts finalize
cuDNN's plans from the recorded engine configurations (a runtime
compilation for each fused convolution) instead of restoring the
serialized plans, for comparison. Results (median and range of each
phase) go to --out as JSON.

    python3 bench/plan_load.py --segrt build/segrt --lib build/libsegrt.so.0 \\
        --models ../shared/models --out bench/results/plan_load-DEVICE-DATE.json
"""
import argparse
import ctypes
import datetime
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
CASES = {"basicunet2d": (16, 3, 512, 512), "unet3d_spleen": (4, 1, 96, 96, 96)}


def child(lib, plan, dims):
    """One fresh process: the phases of a plan's first result, as JSON on stdout."""
    import numpy as np
    sys.path.insert(0, str(ROOT / "tests" / "python"))
    os.environ["SEGRT_LIB"] = lib
    import segrt_capi as sc
    x = np.random.default_rng(0).standard_normal(dims).astype(np.float32)
    t = time.perf_counter()
    ctypes.CDLL("libcudart.so").cudaFree(ctypes.c_void_p(0))
    cuda = time.perf_counter() - t
    t = time.perf_counter()
    engine = sc.Engine.load(plan)
    load = time.perf_counter() - t
    t = time.perf_counter()
    ctx = engine.context()
    context = time.perf_counter() - t
    t = time.perf_counter()
    ctx.run({"image": x})
    first = time.perf_counter() - t
    t = time.perf_counter()
    ctx.run({"image": x})
    second = time.perf_counter() - t
    print(json.dumps({"cuda_start_s": cuda, "load_s": load, "context_s": context, "first_run_s": first,
                      "second_run_s": second, "plan_to_first_result_s": load + context + first}))


def summary(runs, key):
    v = [r[key] for r in runs]
    return {"median": statistics.median(v), "min": min(v), "max": max(v)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--segrt", required=True)
    ap.add_argument("--lib", required=True, help="libsegrt.so.0 for the processes' C API calls")
    ap.add_argument("--models", required=True)
    ap.add_argument("--models-list", default=",".join(CASES))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--work", default="/tmp/segrt-plan-load")
    ap.add_argument("--out", required=True)
    ap.add_argument("--child", nargs=2, metavar=("PLAN", "DIMS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.lib, a.child[0], tuple(int(d) for d in a.child[1].split("x")))
        return
    work = pathlib.Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    out = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "runs": a.runs, "cases": []}
    try:
        out["device"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                       capture_output=True, text=True).stdout.strip()
    except OSError:
        out["device"] = "unknown"
    for model in a.models_list.split(","):
        dims = CASES[model]
        shape = "x".join(str(d) for d in dims)
        for serialized in (True, False):
            # The plan file keeps the option, so its loads finalize too.
            off = () if serialized else ("--disable-kernels", "cudnn-plan-json")
            plan = work / f"{model}-{'json' if serialized else 'nojson'}.plan"
            t = time.perf_counter()
            subprocess.run([a.segrt, "build", str(pathlib.Path(a.models) / f"{model}.onnx"), "-o", str(plan),
                            "--device", "cuda", "--precision", "fp16", "--shape", f"image={shape}", "--no-cache",
                            *off], check=True, capture_output=True)
            build = time.perf_counter() - t
            runs = []
            for _ in range(a.runs):
                p = subprocess.run([sys.executable, __file__, "--segrt", a.segrt, "--lib", a.lib, "--models",
                                    a.models, "--out", "-", "--child", str(plan), shape], check=True,
                                   capture_output=True, text=True)
                runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
            case = {"model": model, "batch": dims[0], "serialized_cudnn_plans": serialized, "build_s": build,
                    "plan_mib": plan.stat().st_size / 2**20, "runs": runs}
            for k in ("cuda_start_s", "load_s", "context_s", "first_run_s", "plan_to_first_result_s"):
                case[k] = summary(runs, k)
            out["cases"].append(case)
            f = case["plan_to_first_result_s"]
            print(f"{model} x{dims[0]} ({'serialized cuDNN plans' if serialized else '--disable-kernels cudnn-plan-json'}): "
                  f"build {build:.1f} s, plan {case['plan_mib']:.1f} MiB; load {case['load_s']['median']:.3f} s, "
                  f"context {case['context_s']['median']:.3f}, first run {case['first_run_s']['median']:.3f}: "
                  f"plan to first result {f['median']:.3f} s (median of {a.runs}; {f['min']:.3f}-{f['max']:.3f}); "
                  f"CUDA's own start {case['cuda_start_s']['median']:.3f} s", flush=True)
    pathlib.Path(a.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
