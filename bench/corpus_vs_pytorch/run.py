"""bench/corpus_vs_pytorch (issue 41): every corpus network (corpus.py) at
its realistic batch, segrt FP16 beside PyTorch eager FP16 channels-last,
AMP, and torch.compile (default and max-autotune), the same weights and
device input, in one process on the GPU machine:

    python3 bench/corpus_vs_pytorch/run.py [--nets a,b] [--modes ...] [--out FILE.json]
        [--iters 30] [--warmup 5] [--work DIR]

Each network is exported once with the TorchScript exporter (opset 17,
batch dynamic) into --work as NAME.onnx; the timing, FLOP counting
(Conv, ConvTranspose, MatMul, Gemm from the ONNX graph), FP16 ceiling,
accuracy against FP32 eager (PSNR, argmax agreement) and segrt's run
through its C API are bench/gpu_vs_pytorch.py's (its Bench), so the two
benchmarks' figures read the same. The targets printed at the end: segrt
faster than the best PyTorch mode on every network, at least 1.5x
torch.compile max-autotune on the geometric mean, SwinUNETR at least 2x
AMP. Needs torch, monai, dynamic_network_architectures (pure-Python
wheels the GPU machine lacks: carry them as bench/volume_vs_monai/carry.sh
does) and SEGRT_LIB pointing at libsegrt (scripts/gpu-check.sh sets it)."""
from __future__ import annotations

import argparse
import math
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "bench"))
import corpus  # noqa: E402
import gpu_vs_pytorch as gvp  # noqa: E402

MODES = "half_cl,amp,compile_default,compile,segrt"
TORCH_MODES = ("half_cl", "amp", "compile_default", "compile")


def export_all(names, work):
    import torch
    for name in names:
        path = work / f"{name}.onnx"
        if path.exists():
            continue
        net = corpus.NETWORKS[name]
        # At the bench batch: the TorchScript exporter traces some shape
        # arithmetic into constants (the ResNet-34 encoder's zero-padded
        # shortcut, at batch 1, would not concatenate at batch 16).
        x = torch.randn(tuple(net.bench_shape))
        gvp.log(f"exporting {name}")
        torch.onnx.export(corpus.make(name), (x,), str(path), input_names=["x"], output_names=["y"],
                          opset_version=17, dynamic_axes={"x": {0: "n"}, "y": {0: "n"}}, dynamo=False)


def verdicts(result):
    """The issue's targets from the cases' medians."""
    lines, ratios_compile, all_fastest = [], [], True
    for case in result["cases"]:
        res = case["results"]
        seg = res.get("segrt", {})
        if seg.get("status") != "ok":
            lines.append(f"{case['model']}: segrt did not run ({seg.get('error', seg.get('why', ''))})")
            all_fastest = False
            continue
        torch_ms = {m: res[m]["median_ms"] for m in TORCH_MODES if res.get(m, {}).get("status") == "ok"}
        best = min(torch_ms.items(), key=lambda kv: kv[1]) if torch_ms else None
        if best:
            x = best[1] / seg["median_ms"]
            all_fastest &= x > 1.0
            lines.append(f"{case['model']}: {x:.2f}x the best PyTorch mode ({best[0]})")
        if "compile" in torch_ms:
            ratios_compile.append(torch_ms["compile"] / seg["median_ms"])
        if case["model"] == "swin_unetr_3d" and "amp" in torch_ms:
            lines.append(f"swin_unetr_3d: {torch_ms['amp'] / seg['median_ms']:.2f}x AMP (target 2x)")
    if ratios_compile:
        geo = math.exp(sum(math.log(r) for r in ratios_compile) / len(ratios_compile))
        lines.append(f"geometric mean over {len(ratios_compile)} networks: {geo:.2f}x torch.compile max-autotune "
                     f"(target 1.5x)")
    lines.append(f"faster than the best PyTorch mode on every network: {'yes' if all_fastest else 'no'}")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nets", default=",".join(corpus.NETWORKS))
    ap.add_argument("--modes", default=MODES)
    ap.add_argument("--work", default="/tmp/segrt-corpus-bench")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "corpus_vs_pytorch.json"))
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--precision", default="fp16")
    a = ap.parse_args()
    names = a.nets.split(",")
    work = pathlib.Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    export_all(names, work)
    for name in names:
        gvp.MODELS[name] = tuple(corpus.NETWORKS[name].bench_shape[1:])
    args = gvp.parse_args(["--models", str(work), "--models-list", ",".join(names), "--modes", a.modes,
                           "--out", a.out, "--iters", str(a.iters), "--warmup", str(a.warmup),
                           "--compile-batches", "all", "--segrt-precision", a.precision])
    import onnx
    b = gvp.Bench(args)
    b.start()
    b.result["benchmark"] = "corpus_vs_pytorch"
    for name in names:
        b.run_case(name, onnx.load(str(work / f"{name}.onnx")), corpus.make(name),
                   corpus.NETWORKS[name].bench_shape[0])
    b.result["complete"] = True
    b.result["corpus_verdicts"] = verdicts(b.result)
    b.write()
    for line in b.result["corpus_verdicts"]:
        print(line)


if __name__ == "__main__":
    main()
