"""bench/corpus_vs_pytorch/build_time.py (issue 41 item 5): how long a plan
for each corpus network takes to build on this GPU, and where the time
goes, as `segrt build` reports it (segrt_engine_build_report): the whole,
the graph passes, the plans, cuDNN's searches (graphs searched, candidate
plans finalized, convolutions that reused an identical one's choice) and
the slowest nodes. Fresh builds (`segrt build` never reads the plan cache),
FP16, at the benchmark's shapes (corpus.py), exported as run.py exports
them:

    python3 bench/corpus_vs_pytorch/build_time.py --segrt SEGRT [--nets a,b]
        [--autotune N] [--work DIR] [--json OUT.json]

The target: every network under 15 s."""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "bench"))

HEAD = re.compile(r"^build ([0-9.]+) s: graph passes ([0-9.]+) s, plans ([0-9.]+) s$")
CUDNN = re.compile(r"cuDNN: (\d+) convolution graphs searched in ([0-9.]+) s \((\d+) candidate plans finalized\), "
                   r"(\d+) convolutions")
TARGET_S = 15.0


def parse(stdout: str) -> dict:
    out = {}
    for line in stdout.splitlines():
        if m := HEAD.match(line):
            out.update(total_s=float(m[1]), graph_s=float(m[2]), plans_s=float(m[3]))
        elif m := CUDNN.search(line):
            out.update(cudnn_searches=int(m[1]), cudnn_s=float(m[2]), cudnn_finalized=int(m[3]),
                       cudnn_reused=int(m[4]))
        elif line.startswith("  slowest to build:"):
            out["slowest"] = line.split(":", 1)[1].strip()
    return out


def main() -> int:
    import corpus  # torch: only where the networks are made (parse() is tested without it)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--segrt", required=True)
    ap.add_argument("--nets", default=",".join(corpus.NETWORKS))
    ap.add_argument("--autotune", type=int, default=None)
    ap.add_argument("--disable-kernels", action="append", default=None, metavar="LIST",
                    help="build each network with `segrt build --disable-kernels LIST` too (repeatable; an empty "
                         "LIST is the default build, which runs first unless only other lists are given)")
    ap.add_argument("--work", default="/tmp/segrt-corpus-bench")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    import run
    work = pathlib.Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    names = a.nets.split(",")
    run.export_all(names, work)
    rows = []
    for name in names:
        shape = "x".join(map(str, corpus.NETWORKS[name].bench_shape))
        for off in a.disable_kernels or [""]:
            cmd = [a.segrt, "build", str(work / f"{name}.onnx"), "-o", str(work / f"{name}.plan"), "--device",
                   "cuda", "--precision", "fp16", "--shape", f"x={shape}"]
            if a.autotune is not None:
                cmd += ["--autotune", str(a.autotune)]
            if off:
                cmd += ["--disable-kernels", off]
            t0 = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True)
            row = {"model": name, "shape": shape, "disabled": off, "wall_s": time.perf_counter() - t0,
                   "rc": p.returncode}
            row.update(parse(p.stdout))
            if p.returncode:
                row["error"] = p.stderr.strip()[-500:]
            rows.append(row)
            print(f"{name} {shape}{' without ' + off if off else ''}: "
                  + (f"build {row['total_s']:.1f} s (process {row['wall_s']:.1f} s), cuDNN "
                     f"{row.get('cudnn_s', 0):.1f} s over {row.get('cudnn_searches', 0)} searches, "
                     f"{row.get('cudnn_finalized', 0)} finalized; slowest: {row.get('slowest', '')}"
                     if "total_s" in row else f"failed: {row.get('error', '')}"), flush=True)
    over = [r["model"] + (f" (without {r['disabled']})" if r["disabled"] else "") for r in rows
            if r.get("total_s", 1e9) > TARGET_S]
    print(f"over {TARGET_S:.0f} s: {', '.join(over) if over else 'none'}")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps({"autotune": a.autotune, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
