"""Exports the corpus (corpus.py) to ONNX with both of torch's exporters
and checks segrt's FP32 numbers against PyTorch's, network by network:

    python3 bench/corpus_vs_pytorch/check.py --segrt build/segrt [--device cpu|cuda]
        [--nets a,b,...] [--exporters torchscript,dynamo] [--work DIR] [--json OUT.json]

For each network and exporter: the ONNX file (opset 17 for TorchScript's,
18 for dynamo's; the batch dim dynamic),
one seeded input at the network's check shape (the bench shape on CUDA;
another one is what the exporter traces),
PyTorch's FP32 output (TF32 off) and `segrt run`'s on the same device, and
their relative L2 error ||segrt - torch|| / ||torch|| (issue 41: at most
1e-5). An export that fails, a model segrt refuses and a run that fails
are recorded with their first line; the table at the end says which. The
weights are corpus.randomise's, the same seed for every exporter."""
from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import time

import numpy as np
import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import corpus  # noqa: E402

TOLERANCE = 1e-5


def dynamic_axes(net):
    """The batch dim (a benchmark and a sliding window set it)."""
    return {"x": {0: "n"}, "y": {0: "n"}}


def export(model, net, x, path, exporter):
    if exporter == "torchscript":
        torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["y"], opset_version=17,
                          dynamic_axes=dynamic_axes(net), dynamo=False)
    else:
        batch = torch.export.Dim("n", min=1, max=64)
        try:
            torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["y"], opset_version=18,
                              dynamic_shapes={"x": {0: batch}}, dynamo=True, external_data=False)
        except Exception as e:  # noqa: BLE001 - torch.export often cannot keep the batch dynamic
            torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["y"], opset_version=18,
                              dynamo=True, external_data=False)
            return f"static batch ({why(e)})"
    return None


def why(e):
    """An exception's type and the first line of its message that says
    something (the dynamo exporter's last line only points above)."""
    lines = [ln.strip() for ln in str(e).splitlines()
             if ln.strip() and not ln.strip().startswith(("(Refer", "Failed to export the model with torch.export"))]
    return f"{type(e).__name__}: {lines[0][:400] if lines else ''}"


def first_line(text):
    lines = [ln for ln in str(text).strip().splitlines() if ln.strip()]
    return lines[-1][:400] if lines else ""


def check_one(name, exporter, args, work):
    net = corpus.NETWORKS[name]
    shape = net.bench_shape if args.device == "cuda" else net.check_shape
    rec = {"net": name, "exporter": exporter, "shape": list(shape), "what": net.what}
    try:
        model = corpus.make(name, seed=args.seed)
    except Exception as e:  # noqa: BLE001 - a network this torch or monai cannot build is a result here
        rec.update(status="build failed", error=why(e))
        return rec
    rec["params"] = corpus.count_params(model)
    # The comparison's input is not the one the exporter traced: a graph
    # that recorded a tensor of its trace as a constant (MONAI's ResNet
    # shortcut did, corpus._shortcut_a) is right only at that input.
    g = torch.Generator().manual_seed(args.seed + 1)
    x_trace = torch.randn(shape, generator=g)
    x = torch.randn(shape, generator=g)
    path = work / f"{name}.{exporter}.onnx"
    t0 = time.time()
    try:
        note = export(model, net, x_trace, path, exporter)
        if note:
            rec["export_note"] = note
    except Exception as e:  # noqa: BLE001 - an exporter's failure is a result here
        rec.update(status="export failed", error=why(e))
        return rec
    rec["export_s"] = round(time.time() - t0, 1)
    rec["onnx_mb"] = round(path.stat().st_size / 2**20, 1)
    dev = torch.device(args.device)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    with torch.no_grad():
        want = model.to(dev)(x.to(dev)).float().cpu().numpy()
    xin, yout = work / f"{name}.x.npy", work / f"{name}.{exporter}.y.npy"
    np.save(xin, x.numpy())
    cmd = [args.segrt, "run", str(path), "--input", f"x={xin}", "--output", f"y={yout}", "--device", args.device]
    if args.device == "cuda":
        cmd += ["--precision", "fp32"]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    rec["segrt_s"] = round(time.time() - t0, 1)
    if p.returncode != 0:
        rec.update(status="segrt failed", error=first_line(p.stderr or p.stdout), exit=p.returncode)
        return rec
    got = np.load(yout)
    if got.shape != want.shape:
        rec.update(status="wrong shape", error=f"segrt {got.shape}, torch {want.shape}")
        return rec
    err = float(np.linalg.norm((got.astype(np.float64) - want)) / max(np.linalg.norm(want.astype(np.float64)), 1e-30))
    rec["rel_l2"] = err
    rec["argmax_agree"] = float((got.argmax(1) == want.argmax(1)).mean()) if want.shape[1] > 1 else None
    rec["status"] = "ok" if err <= TOLERANCE else "too far"
    return rec


def table(records):
    rows = ["| network | exporter | params (M) | shape | status | rel. L2 | argmax agree |",
            "|---|---|---:|---|---|---:|---:|"]
    for r in records:
        err = f"{r['rel_l2']:.1e}" if "rel_l2" in r else ""
        agree = f"{100 * r['argmax_agree']:.3f} %" if r.get("argmax_agree") is not None else ""
        status = r["status"] + (f": {r['error']}" if r.get("error") else "")
        rows.append(f"| {r['net']} | {r['exporter']} | {r.get('params', 0) / 1e6:.1f} | "
                    f"{'x'.join(map(str, r['shape']))} | {status} | {err} | {agree} |")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--segrt", required=True)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--nets", default=",".join(corpus.NETWORKS))
    ap.add_argument("--exporters", default="torchscript,dynamo")
    ap.add_argument("--work", default="/tmp/segrt-corpus")
    ap.add_argument("--json", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=int, default=1800)
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    records = []
    for name in args.nets.split(","):
        for exporter in args.exporters.split(","):
            rec = check_one(name, exporter, args, work)
            records.append(rec)
            print(json.dumps(rec), flush=True)
    print(table(records))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"device": args.device, "records": records}, indent=1))
    return 0 if all(r["status"] == "ok" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
