"""Times the segrt command on chains of N elementwise nodes (issue 36, item 7).

For each N the model is generated once (tests/python/chain_model.py), then
each phase runs --repeat times and the median wall time is printed:

  info       segrt info MODEL                      import, inference
  optimized  segrt info MODEL --optimized --shape  + the passes
  run        segrt run MODEL --input --output      + CPU plan, context, one run

    python3 bench/large_graph.py --segrt build/segrt --sizes 10000,25000,50000 --threads 1

With every core, the run phase of a long chain of tiny tensors is mostly
OpenMP teams waking per step (oneDNN's binary primitives take the whole
team whatever the size): --threads 1 shows the engine's own cost.
"""
import argparse
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "python"))
from chain_model import chain_reference, save_chain  # noqa: E402

SHAPE = (1, 4, 8, 8)


def timed(cmd, timeout):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr}")
    return dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--segrt", default="build/segrt")
    ap.add_argument("--sizes", default="10000,25000,50000,100000,200000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--threads", type=int, default=None, help="segrt run --threads (default: every core)")
    ap.add_argument("--workdir", default=None, help="keep models here (default: a temporary folder)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
        np.save(work / "x.npy", x)
        shape = "x=" + "x".join(map(str, SHAPE))
        print(f"{'N':>8} {'info s':>8} {'optimized s':>12} {'run s':>8}")
        for n in map(int, args.sizes.split(",")):
            model = work / f"chain{n}.onnx"
            if not model.exists():
                save_chain(model, n, SHAPE)
            phases = {
                "info": [args.segrt, "info", model],
                "optimized": [args.segrt, "info", model, "--optimized", "--shape", shape],
                "run": [args.segrt, "run", model, "--input", work / "x.npy", "--output", work / "y.npy",
                        "--quiet"] + (["--threads", args.threads] if args.threads is not None else []),
            }
            med = {}
            for name, cmd in phases.items():
                cmd = list(map(str, cmd))
                med[name] = statistics.median(timed(cmd, args.timeout) for _ in range(args.repeat))
            y = np.load(work / "y.npy")
            ok = np.allclose(y, chain_reference(x, n), rtol=1e-4, atol=1e-5)
            print(f"{n:>8} {med['info']:>8.2f} {med['optimized']:>12.2f} {med['run']:>8.2f}"
                  f"{'' if ok else '  (output differs from numpy)'}", flush=True)


if __name__ == "__main__":
    main()
