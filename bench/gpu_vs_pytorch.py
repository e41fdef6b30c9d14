#!/usr/bin/env python3
"""segrt's CUDA engine beside PyTorch on the GPU, in one process run, on the
same network with the same weights and the same device input.

    python3 bench/gpu_vs_pytorch.py --models DIR [--models-list basicunet2d,unet3d_spleen]
        [--batches 1,16] [--modes eager32,half_cl,amp,compile,segrt] [--out FILE.json]

The PyTorch side is the ONNX file turned into a torch.fx module by onnx2torch
(`--pythonpath DIR` adds the folder it was installed into with `pip install
--no-deps --target DIR`), so both sides compute the same graph. Modes:

  eager32  FP32, NCHW, TF32 off (cuDNN and cuBLAS)
  tf32     FP32 weights and input, TF32 on (not run unless asked for)
  half_cl  the module and input in FP16, channels-last
  amp      FP32 module and input in channels-last, under torch.autocast FP16
  compile  half_cl through torch.compile(mode="max-autotune", dynamic=False),
           compiled once per (model, batch); its first call is timed apart
           as compile_s. Run only at --compile-batches (default 4,16).
  compile_default  the same with torch.compile's default mode (not run
           unless asked for)
  segrt    segrt's engine (FP16 by default) through ctypes, fed the same
           FP32 NCHW device tensor, writing an FP32 NCHW device tensor

cudnn.benchmark is on. PyTorch calls are timed by CUDA events around each
call followed by a synchronize; segrt's by the host clock around
segrt_context_run, which returns once its own stream is done (torch's stream
is synchronized before). Inputs of the PyTorch modes are converted (dtype,
layout) before timing, which favours PyTorch: segrt's time includes its
conversions. Medians over --iters runs after --warmup untimed ones.

Per (model, batch, mode) the JSON keeps median/p10/p90 ms, TFLOP/s, percent of
the FP16 matrix ceiling measured in the same run, peak device memory, compile
or build seconds, the output's agreement with FP32 eager (PSNR, argmax
agreement) and segrt's speed-up over each mode. It is rewritten after every
mode, so a run cut short keeps what finished. bench/report.py turns the latest
result into the README's table.
"""
import argparse
import contextlib
import copy
import datetime
import gc
import importlib.metadata
import json
import math
import os
import pathlib
import platform
import re
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))  # segrt_capi
sys.path.insert(0, str(ROOT / "bench"))  # report

import report  # noqa: E402 - after the path

# Input of each shared model without the batch dim: the sizes of the issue's
# targets (../shared/notes/targets.md).
MODELS = {
    "basicunet2d": (3, 512, 512),
    "unet3d_spleen": (1, 96, 96, 96),
    "basicunet2d_tiny": (1, 256, 256),
}
DEFAULT_BATCHES = {"basicunet2d": (1, 16), "unet3d_spleen": (1, 4), "basicunet2d_tiny": (1, 16)}
ALL_MODES = ("eager32", "tf32", "half_cl", "amp", "compile", "compile_default", "segrt")
COMPILE_MODES = ("compile", "compile_default")
DEFAULT_MODES = ("eager32", "half_cl", "amp", "compile", "segrt")
FLOP_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------
# FLOPs from the ONNX graph (pure: onnx and numpy only)


def _dims_of(value_info):
    t = value_info.type.tensor_type
    if not t.HasField("shape"):
        return None
    dims = []
    for d in t.shape.dim:
        if not d.HasField("dim_value"):
            return None
        dims.append(int(d.dim_value))
    return dims


def with_fixed_inputs(model, input_dims):
    """A copy of the ModelProto with the named inputs' dims fixed, its stale
    value_info dropped and shapes inferred again (data propagation on)."""
    import onnx
    m = copy.deepcopy(model)
    for inp in m.graph.input:
        if inp.name in input_dims:
            shape = inp.type.tensor_type.shape
            dims = [int(d) for d in input_dims[inp.name]]
            if len(shape.dim) != len(dims):
                raise ValueError(f"input {inp.name} has rank {len(shape.dim)}, dims {dims} given")
            for d, v in zip(shape.dim, dims):
                d.Clear()
                d.dim_value = v
    del m.graph.value_info[:]
    return onnx.shape_inference.infer_shapes(m, data_prop=True)


def graph_flops(model, input_dims):
    """FLOPs (2 x multiply-adds) of Conv, ConvTranspose, MatMul and Gemm for
    these input dims: {"total": n, "by_op": {op: n}}. Bias additions and
    every other operator are not counted (they are memory-bound)."""
    m = with_fixed_inputs(model, input_dims)
    g = m.graph
    shapes = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        d = _dims_of(vi)
        if d is not None:
            shapes[vi.name] = d
    for t in g.initializer:
        shapes[t.name] = [int(x) for x in t.dims]
    by_op = {}
    for node in g.node:
        if node.op_type not in FLOP_OPS:
            continue
        macs = _node_macs(node, shapes)
        by_op[node.op_type] = by_op.get(node.op_type, 0) + 2 * macs
    return {"total": sum(by_op.values()), "by_op": by_op}


def _shape(shapes, name, node):
    if name not in shapes:
        raise ValueError(f"no inferred shape for {name!r} (input of node {node.name or node.op_type})")
    return shapes[name]


def _node_macs(node, shapes):
    attrs = {a.name: a for a in node.attribute}
    if node.op_type == "Conv":
        w = _shape(shapes, node.input[1], node)
        y = _shape(shapes, node.output[0], node)
        # Each output element: (Cin / group) x kernel products.
        return math.prod(y) * math.prod(w[1:])
    if node.op_type == "ConvTranspose":
        x = _shape(shapes, node.input[0], node)
        w = _shape(shapes, node.input[1], node)
        # Each input element is scattered through (Cout / group) x kernel weights.
        return math.prod(x) * math.prod(w[1:])
    if node.op_type == "MatMul":
        a = _shape(shapes, node.input[0], node)
        y = _shape(shapes, node.output[0], node)
        return math.prod(y) * a[-1]
    # Gemm: A is M x K, or K x M when transA.
    a = _shape(shapes, node.input[0], node)
    y = _shape(shapes, node.output[0], node)
    trans_a = attrs["transA"].i if "transA" in attrs else 0
    return math.prod(y) * (a[0] if trans_a else a[1])


# ---------------------------------------------------------------------------
# statistics and accuracy (pure)


def summarize_times(times_ms):
    t = np.asarray(times_ms, dtype=np.float64)
    return {"median_ms": float(np.median(t)), "p10_ms": float(np.percentile(t, 10)),
            "p90_ms": float(np.percentile(t, 90)), "min_ms": float(t.min()), "mean_ms": float(t.mean()),
            "runs": int(t.size)}


def rate_fields(median_ms, gflop, ceiling_tflops):
    tflops = gflop / median_ms if median_ms > 0 else None  # GFLOP / ms = TFLOP/s
    pct = 100.0 * tflops / ceiling_tflops if tflops is not None and ceiling_tflops else None
    return {"tflops": tflops, "pct_fp16_ceiling": pct}


def json_safe(v):
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, (np.floating, np.integer)):
        return json_safe(v.item())
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    return v


def device_slug(name):
    s = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return re.sub(r"^nvidia-", "", s) or "gpu"


def parse_int_list(text):
    return [int(x) for x in text.split(",") if x.strip()]


def parse_modes(text):
    """Comma-separated modes; `segrt:SWITCH+SWITCH` is segrt with those
    kernel switches off (--disable-kernels), an A/B beside the others."""
    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in ALL_MODES and not (m.startswith("segrt:") and len(m) > 6)]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown modes {bad}; known: {', '.join(ALL_MODES)}")
    return modes


# ---------------------------------------------------------------------------
# the GPU side (torch imported late so that --help and the pure functions
# work without it)


def accuracy(torch, got, ref):
    """got against ref (FP32 eager), on the device: PSNR (peak = max |ref|,
    as tests/gpu/gpu_util.py), relative L2, max abs error, argmax agreement
    over the channel axis."""
    g = got.detach().to(torch.float64).contiguous()
    r = ref.detach().to(torch.float64).contiguous()
    if g.shape != r.shape:
        return {"error": f"shape {tuple(g.shape)} against {tuple(r.shape)}"}
    finite = bool(torch.isfinite(g).all())
    diff = g - r
    mse = float((diff * diff).mean())
    peak = float(r.abs().max())
    if mse == 0.0:
        psnr = math.inf
    elif not finite or peak == 0.0:
        psnr = -math.inf
    else:
        psnr = 10.0 * math.log10(peak * peak / mse)
    rn = float(torch.linalg.vector_norm(r))
    agree = float((g.argmax(dim=1) == r.argmax(dim=1)).to(torch.float64).mean()) if g.dim() > 1 else 1.0
    return {"psnr_db": psnr, "rel_l2": float(torch.linalg.vector_norm(diff)) / rn if rn else None,
            "max_abs": float(diff.abs().max()), "argmax_agreement": agree, "finite": finite}


def first_output(y):
    if isinstance(y, (list, tuple)):
        return y[0]
    if isinstance(y, dict):
        return next(iter(y.values()))
    return y


def time_cuda(torch, fn, iters, warmup, before=None):
    """fn() timed by CUDA events on the current stream, one synchronize per
    call: [ms]."""
    for _ in range(warmup):
        if before:
            before()
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(iters):
        if before:
            before()
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end))
    return out


def time_host(torch, fn, iters, warmup):
    """fn() timed by the host clock: for calls that return when their own
    stream is done (segrt). torch's stream is idle before each call."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def measure_ceilings(torch, iters):
    """FP16 matrix product 8192^3 (TFLOP/s) and 1 GiB device-to-device copy
    (GB/s, read + write), medians."""
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    c = torch.empty(n, n, device="cuda", dtype=torch.float16)
    mm = np.median(time_cuda(torch, lambda: torch.matmul(a, b, out=c), iters, 5))
    del a, b, c
    nbytes = 1 << 30
    src = torch.empty(nbytes, device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    cp = np.median(time_cuda(torch, lambda: dst.copy_(src), iters, 3))
    del src, dst
    torch.cuda.empty_cache()
    return {"fp16_matmul_n": n, "fp16_matmul_ms": float(mm), "fp16_matmul_tflops": 2 * n ** 3 / (mm * 1e-3) / 1e12,
            "d2d_copy_bytes": nbytes, "d2d_copy_ms": float(cp), "d2d_copy_gbps": 2 * nbytes / (cp * 1e-3) / 1e9}


def install_pad_converters():
    """onnx2torch's Pad (opsets 11 and 13) reads the pads tensor back to the
    host on every call, a device synchronize that would slow PyTorch down
    and split torch.compile's graph, and the wheel has no converter for Pad
    18 and 19 (the dynamo exporter's). With constant pads (every shared
    model) this converter makes a static F.pad, as the MONAI network itself
    calls; anything else goes to the library's converter."""
    from onnx2torch.node_converters import registry
    from onnx2torch.node_converters.pad import OnnxPadStatic
    from onnx2torch.utils.common import OnnxMapping, OperationConverterResult

    key = registry.OperationDescription
    fallback = registry._CONVERTER_REGISTRY.get(key(domain="", operation_type="Pad", version=13))

    def convert(node, graph):
        ins = list(node.input_values)
        const = [n for n in ins[1:3] if n]
        axes_given = len(ins) > 3 and ins[3]
        if not axes_given and all(n in graph.initializers for n in const):
            pads = [int(p) for p in graph.initializers[ins[1]].to_numpy().ravel()]
            value = float(graph.initializers[ins[2]].to_numpy().ravel()[0]) if len(ins) > 2 and ins[2] else 0.0
            module = OnnxPadStatic.create_from_onnx_params(
                onnx_pads=pads, onnx_mode=node.attributes.get("mode", "constant"), constant_value=value)
            return OperationConverterResult(torch_module=module,
                                            onnx_mapping=OnnxMapping(inputs=(ins[0],), outputs=node.output_values))
        if fallback is None or axes_given:
            raise NotImplementedError(f"Pad node {node.name}: only constant pads without axes are converted")
        return fallback(node, graph)

    for v in (11, 13, 18, 19):
        registry._CONVERTER_REGISTRY[key(domain="", operation_type="Pad", version=v)] = convert


def torch_module(onnx_model):
    """The ONNX model as a torch.fx module on the CPU, FP32, in eval mode."""
    import onnx2torch
    install_pad_converters()
    return onnx2torch.convert(onnx_model).eval()


def nbytes(t):
    return t.numel() * t.element_size()


class Bench:
    def __init__(self, args):
        import torch
        self.torch = torch
        self.a = args
        torch.backends.cudnn.benchmark = True
        self.result = None

    # -- bookkeeping -------------------------------------------------------
    def write(self):
        for case in self.result["cases"]:
            case["segrt_speedup"] = report.speedups(case)
        self.result["targets"] = report.target_checks(self.result)
        out = pathlib.Path(self.a.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(out.suffix + ".tmp")
        tmp.write_text(json.dumps(json_safe(self.result), indent=1) + "\n")
        tmp.replace(out)

    def header(self):
        torch = self.torch
        props = torch.cuda.get_device_properties(0)
        dev = {"name": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0)),
               "multiprocessors": props.multi_processor_count, "total_memory_bytes": props.total_memory}
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit",
                                  "--format=csv,noheader", "-i", "0"], capture_output=True, text=True, timeout=30)
            dev["nvidia_smi"] = smi.stdout.strip()
            dev["driver"] = smi.stdout.split(",")[0].strip() if smi.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired):
            dev["driver"] = None
        versions = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
                    "torch_cudnn": torch.backends.cudnn.version(), "numpy": np.__version__}
        for mod in ("onnx", "onnx2torch", "torchvision"):
            try:
                versions[mod] = importlib.metadata.version(mod)
            except importlib.metadata.PackageNotFoundError:
                versions[mod] = getattr(sys.modules.get(mod), "__version__", "unknown")
        try:
            import segrt_capi as sc
            versions["segrt"] = sc.version()
            versions["segrt_library"] = str(sc.library_path())
            versions["segrt_cuda"] = sc.cuda_versions()
        except Exception as e:  # noqa: BLE001
            versions["segrt"] = f"unavailable: {e}"
        return dev, versions

    def start(self):
        a = self.a
        dev, versions = self.header()
        log(f"{dev['name']} (driver {dev.get('driver')}), torch {versions['torch']} CUDA {versions['torch_cuda']} "
            f"cuDNN {versions['torch_cudnn']}, segrt {versions.get('segrt')}")
        ceil = measure_ceilings(self.torch, 20)
        log(f"ceilings: FP16 matmul {ceil['fp16_matmul_tflops']:.0f} TFLOP/s, "
            f"device copy {ceil['d2d_copy_gbps']:.0f} GB/s")
        self.result = {
            "benchmark": "gpu_vs_pytorch", "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "host": platform.node(), "device": dev, "versions": versions, "ceilings": ceil,
            "settings": {"iters": a.iters, "warmup": a.warmup, "modes": a.modes, "compile_batches": a.compile_batches,
                         "segrt_precision": a.segrt_precision, "cudnn_benchmark": True, "seed": a.seed,
                         "torch_timing": "CUDA events around each call, then synchronize",
                         "segrt_timing": "host clock around segrt_context_run (returns when its stream is done)",
                         "torch_inputs": "converted to the mode's dtype and layout before timing",
                         "percentiles": "numpy linear interpolation"},
            "cases": [], "complete": False}
        self.write()

    # -- one (model, batch) ------------------------------------------------
    def run_case(self, name, onnx_model, cpu_module, batch):
        torch = self.torch
        shape = (batch,) + MODELS[name]
        in_name = onnx_model.graph.input[0].name
        try:
            flops = graph_flops(onnx_model, {in_name: shape})
        except ValueError as e:
            # ONNX's shape inference cannot follow some exporters' shape
            # arithmetic (SegFormer's reshapes): count on the PyTorch module.
            if cpu_module is None:
                raise
            flops = self.torch_flops(cpu_module, shape)
            flops["note"] = f"counted by torch's FlopCounterMode: {e}"
        gflop = flops["total"] / 1e9
        case = {"model": name, "batch": batch, "input_name": in_name, "input_shape": list(shape), "gflop": gflop,
                "gflop_per_sample": gflop / batch, "flops_by_op": flops["by_op"], "results": {}}
        self.result["cases"].append(case)
        log(f"== {name} batch {batch}: input {'x'.join(map(str, shape))}, {gflop / batch:.2f} GFLOP/sample")
        gen = torch.Generator(device="cuda").manual_seed(self.a.seed)
        x32 = torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32)
        ref = None
        try:
            ref = self.reference(cpu_module, x32)
        except Exception as e:  # noqa: BLE001 - segrt still runs, without an accuracy check
            case["reference_error"] = f"{type(e).__name__}: {e}"
            log(f"{name} b{batch}: FP32 reference FAILED {case['reference_error']}")
        for mode in self.a.modes:
            if mode in COMPILE_MODES and self.a.compile_batches and batch not in self.a.compile_batches:
                case["results"][mode] = {"status": "skipped", "why": f"batch {batch} not in --compile-batches"}
                continue
            is_segrt = mode == "segrt" or mode.startswith("segrt:")
            if not is_segrt and (cpu_module is None or ref is None):
                case["results"][mode] = {"status": "skipped", "why": "no PyTorch module or FP32 reference"}
                continue
            log(f"{name} b{batch} {mode} ...")
            gc.collect()
            torch.cuda.empty_cache()
            try:
                r = (self.run_segrt(name, x32, ref, mode.partition(":")[2].replace("+", ",") or None) if is_segrt
                     else self.run_torch(mode, cpu_module, x32, ref))
                r["status"] = "ok"
                r.update(rate_fields(r["median_ms"], gflop, self.result["ceilings"]["fp16_matmul_tflops"]))
                acc = r.get("accuracy", {})
                log(f"{name} b{batch} {mode}: median {r['median_ms']:.3f} ms (p10 {r['p10_ms']:.3f}, "
                    f"p90 {r['p90_ms']:.3f}), {r['tflops']:.1f} TFLOP/s, peak {r['peak_bytes'] / 2**20:.0f} MiB, "
                    f"PSNR {acc.get('psnr_db', float('nan')):.1f} dB, argmax {acc.get('argmax_agreement', 0):.5f}"
                    + (f", compile {r['compile_s']:.1f} s" if "compile_s" in r else "")
                    + (f", build {r['build_s']:.1f} s" if "build_s" in r else ""))
            except Exception as e:  # noqa: BLE001 - one failing mode must not lose the others
                r = {"status": "error", "error": f"{type(e).__name__}: {e}"}
                log(f"{name} b{batch} {mode}: FAILED {r['error']}")
            finally:
                if mode in COMPILE_MODES:
                    torch._dynamo.reset()
            case["results"][mode] = r
            self.write()
        del x32, ref

    def torch_flops(self, cpu_module, shape):
        """FLOPs of cpu_module at shape as torch's FlopCounterMode counts
        them (2 x multiply-adds of its convolutions and matrix products),
        one FP32 run on the device."""
        from torch.utils.flop_counter import FlopCounterMode
        torch = self.torch
        m = copy.deepcopy(cpu_module).cuda()
        with torch.no_grad(), FlopCounterMode(display=False) as fc:
            m(torch.zeros(shape, device="cuda"))
        by_op = {str(k).split(".")[-1]: int(v) for k, v in fc.get_flop_counts().get("Global", {}).items()}
        del m
        return {"total": int(fc.get_total_flops()), "by_op": by_op}

    def reference(self, cpu_module, x32):
        """FP32 eager output, TF32 off: the accuracy reference of every mode."""
        torch = self.torch
        with self.tf32(False), torch.no_grad():
            m = copy.deepcopy(cpu_module).cuda()
            y = first_output(m(x32)).float().contiguous()
        del m
        return y

    @contextlib.contextmanager
    def tf32(self, on):
        """TF32 in cuBLAS and cuDNN on or off for the block."""
        be = self.torch.backends
        old = (be.cuda.matmul.allow_tf32, be.cudnn.allow_tf32)
        be.cuda.matmul.allow_tf32 = be.cudnn.allow_tf32 = on
        try:
            yield
        finally:
            be.cuda.matmul.allow_tf32, be.cudnn.allow_tf32 = old

    def run_torch(self, mode, cpu_module, x32, ref):
        torch = self.torch
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        cl = torch.channels_last if x32.dim() == 4 else torch.channels_last_3d
        m = copy.deepcopy(cpu_module).cuda()
        autocast = contextlib.nullcontext()
        if mode in ("eager32", "tf32"):
            x = x32.clone()
        elif mode == "amp":
            m = m.to(memory_format=cl)
            x = x32.contiguous(memory_format=cl)
            autocast = torch.autocast("cuda", dtype=torch.float16)
        else:  # half_cl, compile
            m = m.half().to(memory_format=cl)
            x = x32.half().contiguous(memory_format=cl)
        f, before = m, None
        if mode in COMPILE_MODES:
            f = torch.compile(m, mode="max-autotune" if mode == "compile" else "default", dynamic=False)
            # CUDA-graph trees: each call starts a new step, so an output
            # still referenced is never reused under us.
            before = getattr(torch.compiler, "cudagraph_mark_step_begin", None)
        out = {}
        with self.tf32(mode == "tf32"), torch.no_grad(), autocast:
            if before:
                before()
            t0 = time.perf_counter()
            y = first_output(f(x))
            torch.cuda.synchronize()
            out["compile_s" if mode in COMPILE_MODES else "first_call_s"] = time.perf_counter() - t0
            # Cloned at once: a CUDA-graph output is overwritten by the next replay.
            y = y.float().contiguous()
            out["accuracy"] = accuracy(torch, y, ref)
            del y
            # The first call's peak holds cuDNN's algorithm trials and
            # inductor's autotuning: reported apart from the steady state.
            out["first_call_peak_bytes"] = torch.cuda.max_memory_allocated() - base
            torch.cuda.reset_peak_memory_stats()
            times = time_cuda(torch, lambda: f(x), self.a.iters, self.a.warmup, before)
        torch.cuda.synchronize()
        out.update(summarize_times(times))
        out["times_ms"] = times
        out["peak_bytes"] = torch.cuda.max_memory_allocated() - base
        out["peak_bytes_note"] = ("torch allocator peak over the timed runs, less what was allocated before "
                                  "the mode (so: weights, input, activations, output)")
        del f, m, x
        return out

    def run_segrt(self, name, x32, ref, disabled=None):
        import segrt_capi as sc
        torch = self.torch
        torch.cuda.synchronize()
        # torch's own reservations (the output) are taken out of the drop.
        free0, reserved0 = torch.cuda.mem_get_info()[0], torch.cuda.memory_reserved()
        model_path = pathlib.Path(self.a.models) / f"{name}.onnx"
        out = {}
        t0 = time.perf_counter()
        with sc.Model.load(model_path) as model:
            in_name = model.inputs()[0]["name"]
            with sc.BuildOptions(shapes={in_name: tuple(x32.shape)}, device="cuda",
                                 precision=self.a.segrt_precision, disabled_kernels=disabled) as opts:
                engine = sc.Engine.build(model, opts)
        out["build_s"] = time.perf_counter() - t0
        with engine, engine.context() as ctx:
            xin = sc.DeviceTensor.from_torch(x32)
            (odt, oshape), = engine.output_shapes([xin])
            y = torch.empty(oshape, device="cuda", dtype=torch.float32)
            yout = sc.DeviceTensor.from_torch(y)
            if np.dtype(odt) != np.float32 or (ref is not None and tuple(oshape) != tuple(ref.shape)):
                want = "?" if ref is None else tuple(ref.shape)
                raise ValueError(f"segrt output {np.dtype(odt)} {tuple(oshape)}, PyTorch's float32 {want}")
            run = ctx.bind([xin], [yout])
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            run()
            out["first_call_s"] = time.perf_counter() - t0
            if ref is not None:
                out["accuracy"] = accuracy(torch, y, ref)
            times = time_host(torch, run, self.a.iters, self.a.warmup)
            free1, reserved1 = torch.cuda.mem_get_info()[0], torch.cuda.memory_reserved()
            info = engine.info()
        torch.cuda.synchronize()
        free2, _ = torch.cuda.mem_get_info()
        engine_bytes = info["weight_bytes"] + info["arena_bytes"] + info["workspace_bytes"]
        io = nbytes(x32) + nbytes(y)
        out.update(summarize_times(times))
        out.update({"times_ms": times, "engine_info": info, "engine_bytes": engine_bytes, "io_bytes": io,
                    "peak_bytes": engine_bytes + io,
                    "peak_bytes_note": "engine weights + one context's arena and workspace + input and output",
                    "device_free_drop_bytes": free0 - free1 - (reserved1 - reserved0),
                    "device_freed_after_destroy_bytes": free2 - free1})
        del y
        return out


def run(args):
    import onnx
    b = Bench(args)
    b.start()
    for name in args.models_list:
        path = pathlib.Path(args.models) / f"{name}.onnx"
        log(f"converting {path} with onnx2torch")
        onnx_model = onnx.load(str(path))
        cpu_module = None  # the FP32 reference needs it, whatever the modes
        try:
            cpu_module = torch_module(onnx_model)
        except Exception as e:  # noqa: BLE001 - segrt still runs
            log(f"onnx2torch could not convert {path}: {type(e).__name__}: {e}")
        batches = args.batches or DEFAULT_BATCHES.get(name, (1,))
        for batch in batches:
            b.run_case(name, onnx_model, cpu_module, batch)
    b.result["complete"] = True
    b.write()
    print(report.markdown(b.result), flush=True)
    log(f"written to {args.out}")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=os.environ.get("SEGRT_MODELS", str(ROOT.parent / "shared" / "models")),
                    help="folder of the ONNX files (default $SEGRT_MODELS or ../shared/models)")
    ap.add_argument("--models-list", default="basicunet2d,unet3d_spleen",
                    type=lambda s: [x for x in s.split(",") if x],
                    help=f"models to run, of {', '.join(MODELS)} (default basicunet2d,unet3d_spleen)")
    ap.add_argument("--batches", type=parse_int_list, default=None,
                    help="batch sizes for every model (default: basicunet2d 1,16; unet3d_spleen 1,4)")
    ap.add_argument("--modes", type=parse_modes, default=list(DEFAULT_MODES),
                    help=f"comma list of {', '.join(ALL_MODES)} (default {','.join(DEFAULT_MODES)}); "
                    "segrt:SWITCH+SWITCH: segrt with those kernel switches off")
    ap.add_argument("--compile-batches", type=lambda s: [] if s == "all" else parse_int_list(s), default=[4, 16],
                    help="batches at which the compile mode runs, or 'all' (default 4,16)")
    ap.add_argument("--iters", type=int, default=50, help="timed runs per mode (at least 20)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed runs first")
    ap.add_argument("--segrt-precision", default="fp16", choices=("fp32", "tf32", "fp16", "bf16"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pythonpath", action="append", default=[],
                    help="folder to put first on sys.path (onnx2torch installed with pip --target)")
    ap.add_argument("--out", default=None,
                    help="JSON file (default bench/results/gpu_vs_pytorch-<device>-<date>.json)")
    a = ap.parse_args(argv)
    unknown = [m for m in a.models_list if m not in MODELS]
    if unknown:
        ap.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    if a.iters < 20:
        ap.error("--iters must be at least 20")
    return a


def main(argv=None):
    a = parse_args(argv)
    for p in reversed(a.pythonpath):
        sys.path.insert(0, p)
    import torch
    if not torch.cuda.is_available():
        sys.exit("gpu_vs_pytorch: torch sees no CUDA device")
    if a.out is None:
        a.out = str(ROOT / "bench" / "results" / (
            f"gpu_vs_pytorch-{device_slug(torch.cuda.get_device_name(0))}-{datetime.date.today().isoformat()}.json"))
    run(a)


if __name__ == "__main__":
    main()
