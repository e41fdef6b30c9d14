"""bench/corpus_vs_pytorch/cpu.py: corpus networks on the CPU, FP32, at
their check shapes, segrt beside PyTorch eager in one run on the same
threads: what the graph's fusions (attention as one node, GELU, and the
CPU's own kernels for them and for LayerNorm) are worth where there is no
GPU. Each segrt configuration is `segrt bench` (median of --iters runs
after --warmup, the model's GFLOP as segrt counts them); PyTorch is the
network's forward under torch.no_grad, timed the same way.

    python bench/corpus_vs_pytorch/cpu.py --segrt build-cpu/segrt
        [--nets swin_unetr_3d,unetr_3d,segformer_b0_2d] [--threads 2]
        [--iters 10] [--warmup 2] [--config NAME=SEGRT[:ARGS]]... [--json FILE]

--config adds a segrt binary or switch set to compare (NAME=PATH, or
NAME=PATH:--disable-kernels fused-attention); the default compares the
given segrt with and without fused-attention. Needs torch, monai and
dynamic_network_architectures (as check.py)."""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import corpus  # noqa: E402

TRANSFORMERS = "swin_unetr_3d,unetr_3d,segformer_b0_2d"


def torch_ms(model, x, iters, warmup):
    import torch
    with torch.no_grad():
        for _ in range(warmup):
            model(x)
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            model(x)
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def segrt_bench(binary, args, onnx_path, shape, iters, warmup, threads):
    cmd = [binary, "bench", str(onnx_path), "--shape", "x=" + "x".join(map(str, shape)), "--iters", str(iters),
           "--warmup", str(warmup), "--threads", str(threads), "--json", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout).strip().splitlines()[-1][:300]}
    d = json.loads(p.stdout)
    return {"median_ms": d["median_ms"], "gflop": d["gflop"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--segrt", required=True)
    ap.add_argument("--nets", default=TRANSFORMERS)
    ap.add_argument("--threads", type=int, default=0, help="0: every core")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--config", action="append", default=[])
    ap.add_argument("--work", default="/tmp/segrt-corpus-cpu")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import os

    import torch
    threads = args.threads or os.cpu_count()
    torch.set_num_threads(threads)
    configs = [("segrt", args.segrt, []),
               ("segrt, fused-attention off", args.segrt, ["--disable-kernels", "fused-attention"])]
    for c in args.config:
        name, rest = c.split("=", 1)
        binary, _, extra = rest.partition(":")
        configs.append((name, binary, extra.split()))
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.nets.split(","):
        net = corpus.NETWORKS[name]
        model = corpus.make(name, seed=0).eval()
        x = torch.randn(net.check_shape, generator=torch.Generator().manual_seed(1))
        path = work / f"{name}.onnx"
        if not path.exists():
            torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["y"], opset_version=17,
                              dynamo=False)
        row = {"net": name, "shape": list(net.check_shape), "threads": threads,
               "torch_ms": torch_ms(model, x, args.iters, args.warmup)}
        for cname, binary, extra in configs:
            row[cname] = segrt_bench(binary, extra, path, net.check_shape, args.iters, args.warmup, threads)
        rows.append(row)
        print(json.dumps(row), flush=True)
    names = [c[0] for c in configs]
    print("\n| network | shape | PyTorch eager ms | " + " | ".join(f"{n} ms (x PyTorch)" for n in names) + " |")
    print("|---|---|---:|" + "---:|" * len(names))
    for r in rows:
        cells = []
        for n in names:
            c = r[n]
            cells.append(f"{c['median_ms']:.1f} ({r['torch_ms'] / c['median_ms']:.2f}x)" if "median_ms" in c
                         else c["error"][:60])
        print(f"| {r['net']} | {'x'.join(map(str, r['shape']))} | {r['torch_ms']:.1f} | " + " | ".join(cells) + " |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
