#!/usr/bin/env python3
"""Per-call overhead of the Python package over the C API (issue 38): a
tiny model (y = relu(2x + 1) over float32 [1, 4], a run of a few
microseconds), `engine(x)` from Python against the same engine's
`_c_loop`, which times n bare segrt_context_run calls on the same context
and buffers in C. The overhead is the difference per call: the Python
layer, input and output conversion (buffer protocol or DLPack), the
output's allocation, the context's checkout and the GIL's release. Host
tensors (numpy), and with --device cuda also CUDA tensors (torch, when it
is there: the input through DLPack, a DeviceArray out). Median of
--repeats rounds of --calls calls. A benchmark, not a test.

    PYTHONPATH=build/python python3 bench/python_overhead.py [--device cuda] [--out FILE.json]
"""
import argparse
import datetime
import json
import pathlib
import platform
import statistics
import sys
import tempfile
import time


def tiny_model(path):
    import onnx
    from onnx import TensorProto, helper
    g = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["m"]), helper.make_node("Add", ["m", "one"], ["a"]),
         helper.make_node("Relu", ["a"], ["y"])],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor("two", TensorProto.FLOAT, [1], [2.0]),
         helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def measure(engine, x, calls, repeats):
    """(python µs/call, C µs/call) medians over repeats, alternating."""
    from segrt._engine import _alloc_host
    py, c = [], []
    for _ in range(3):
        engine(x)
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            engine(x)
        py.append((time.perf_counter() - t0) / calls * 1e6)
        c.append(engine._c._c_loop((x,), _alloc_host, calls) / calls * 1e6)
    return statistics.median(py), statistics.median(c)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda (cuda also times host tensors on the GPU engine)")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--models", help="unused; accepted for scripts/gpu-check.sh")
    ap.add_argument("--out", help="write the figures as JSON here")
    args = ap.parse_args()
    import numpy as np
    import segrt
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model = tiny_model(pathlib.Path(tmp) / "tiny.onnx")
        kw = {"device": args.device}
        if args.device != "cpu":
            kw["cache_dir"] = False
        with segrt.Engine(model, threads=1 if args.device == "cpu" else None, **kw) as e:
            x = np.arange(4, dtype=np.float32).reshape(1, 4)
            py, c = measure(e, x, args.calls, args.repeats)
            rows.append({"engine": e.device, "tensors": "numpy (host)", "python_us": py, "c_us": c})
            if args.device != "cpu":
                try:
                    import torch
                except ImportError:
                    torch = None
                if torch is not None and torch.cuda.is_available():
                    xt = torch.from_numpy(x).cuda()
                    py, c = measure(e, xt, args.calls, args.repeats)
                    rows.append({"engine": e.device, "tensors": "torch CUDA (DLPack in, DeviceArray out)",
                                 "python_us": py, "c_us": c})
                    # Where the time goes: torch's own export of the input
                    # on another stream (an event recorded and waited for,
                    # in Python), which any DLPack consumer pays; and a run
                    # into a caller's CUDA tensor (out=), which allocates
                    # nothing.
                    s = torch.cuda.Stream()
                    producer = []
                    for _ in range(args.repeats):
                        t0 = time.perf_counter()
                        for _ in range(args.calls):
                            del_cap = xt.__dlpack__(stream=s.cuda_stream)
                            del del_cap
                        producer.append((time.perf_counter() - t0) / args.calls * 1e6)
                    out = torch.empty_like(xt)
                    e(xt, out=out)
                    into = []
                    for _ in range(args.repeats):
                        t0 = time.perf_counter()
                        for _ in range(args.calls):
                            e(xt, out=out)
                        into.append((time.perf_counter() - t0) / args.calls * 1e6)
                    breakdown = {"torch_dlpack_export_us": statistics.median(producer),
                                 "engine_out_into_torch_us": statistics.median(into)}
                    rows[-1].update(breakdown)
    for r in rows:
        r["overhead_us"] = r["python_us"] - r["c_us"]
        print(f"{r['engine']:7} {r['tensors']:42} engine(x) {r['python_us']:8.2f} us/call   C API "
              f"{r['c_us']:8.2f} us/call   overhead {r['overhead_us']:7.2f} us")
        if "torch_dlpack_export_us" in r:
            print(f"        of which torch's x.__dlpack__(stream=S) alone {r['torch_dlpack_export_us']:.2f} us/call; "
                  f"engine(x, out=torch tensor) {r['engine_out_into_torch_us']:.2f} us/call")
    result = {"date": datetime.date.today().isoformat(), "machine": platform.node(), "cpu": platform.processor(),
              "python": sys.version.split()[0], "segrt": segrt.__version__, "calls": args.calls,
              "repeats": args.repeats, "rows": rows}
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
