#!/usr/bin/env python3
"""The benchmark's network as ONNX: a TotalSegmentator-class 3-D U-Net with
101 outputs (background + 100 classes) and seeded random weights.

    python3 make_model.py [--tiny] [--work DIR] [--seed N]

Full: nnU-Net's 3d_fullres PlainConvUNet for a CT (6 stages of 32, 64, 128,
256, 320, 320 features, strides 1-2-2-2-2-2, two 3x3x3 convolutions per
stage, InstanceNorm, LeakyReLU; patch 128^3), built, randomised and exported
by bench/volume_vs_monai/make_model.py (smooth random weights, opset 17,
batch dynamic, "input" N x 1 x 128^3 -> "logits" N x 101 x 128^3), with
torch and dynamic_network_architectures (carry.sh brings the latter to the
GPU machine). About 31 M parameters, 120 MB.

--tiny: a network for the CPU dry run, built with onnx.helper (no torch):
a 3x3x3 convolution of 1 -> 8 channels (a random mix over a binomial blur,
as the full network's weights), LeakyReLU, a 2x2x2 stride-2 convolution to
16 channels, ReLU, a 2x2x2 stride-2 transposed convolution back to 8, the
skip added, ReLU, and a 1x1x1 head to 101 classes; window 32^3, the same
input and output names and layout.
"""
import argparse
import contextlib
import importlib.util
import json
import math
import os
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

OPSET = 17  # as bench/volume_vs_monai exports


@contextlib.contextmanager
def _path_kept():
    saved = list(sys.path)
    try:
        yield
    finally:
        sys.path[:] = saved


def volume_bench_make_model():
    """bench/volume_vs_monai/make_model.py as a module of its own name (both
    benchmarks have a make_model.py; it imports its own config.py)."""
    name = "volume_vs_monai_make_model"
    if name in sys.modules:
        return sys.modules[name]
    with _path_kept():
        spec = importlib.util.spec_from_file_location(name, common.VOLUME_BENCH / "make_model.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    sys.modules[name] = mod
    return mod


def make_full(paths, s, seed, log):
    try:
        import dynamic_network_architectures  # noqa: F401
        import torch
    except ImportError as e:
        raise SystemExit(f"make_model: {e.name} is not importable: the full network needs torch and "
                         f"dynamic_network_architectures (bench/many_classes/carry.sh brings the latter)")
    vmm = volume_bench_make_model()
    vs = vmm.config.Setup(name="many_classes", shape_zyx=s.shape_zyx, spacing_zyx=(1.0, 1.0, 1.0),
                          target_spacing_zyx=(1.0, 1.0, 1.0), patch_zyx=s.roi_zyx, features=s.features,
                          strides=s.strides, n_conv=s.n_conv, classes=s.classes, sw_batch=s.sw_batch, runs=s.runs)
    arch = vmm.arch_kwargs(vs)
    net = vmm.build_network(arch, 1, s.classes).eval()
    vmm.randomise(net, seed)
    params = sum(p.numel() for p in net.parameters())
    vmm.export_onnx(net, vs, paths.onnx)
    return {"kind": "PlainConvUNet (dynamic_network_architectures), bench/volume_vs_monai/make_model.py's "
                    "randomise and export", "parameters": params, "arch": arch, "torch_version": torch.__version__}


def tiny_graph(s, seed):
    """The --tiny network as an onnx ModelProto."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    c1, c2 = s.features
    k = s.classes
    b = np.array([1.0, 2.0, 1.0]) / 4
    blur = b[:, None, None] * b[None, :, None] * b[None, None, :]

    def init(name, a):
        return numpy_helper.from_array(np.asarray(a, np.float32), name)

    inits = [
        init("w1", rng.standard_normal((c1, 1))[:, :, None, None, None] * math.sqrt(2.0) * blur),
        init("b1", rng.normal(0.0, 0.05, c1)),
        init("w2", rng.standard_normal((c2, c1, 2, 2, 2)) * math.sqrt(2.0 / (c1 * 8))),
        init("b2", rng.normal(0.0, 0.05, c2)),
        init("w3", np.broadcast_to(rng.standard_normal((c2, c1))[:, :, None, None, None] * math.sqrt(1.0 / c2),
                                   (c2, c1, 2, 2, 2))),
        init("b3", rng.normal(0.0, 0.05, c1)),
        init("w4", rng.standard_normal((k, c1, 1, 1, 1)) * math.sqrt(2.0 / c1)),
        init("b4", rng.normal(0.0, 0.5, k)),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], kernel_shape=[3, 3, 3], pads=[1] * 6),
        helper.make_node("LeakyRelu", ["c1"], ["a1"], alpha=0.01),
        helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], kernel_shape=[2, 2, 2], strides=[2, 2, 2]),
        helper.make_node("Relu", ["c2"], ["a2"]),
        helper.make_node("ConvTranspose", ["a2", "w3", "b3"], ["u3"], kernel_shape=[2, 2, 2], strides=[2, 2, 2]),
        helper.make_node("Add", ["u3", "a1"], ["s3"]),
        helper.make_node("Relu", ["s3"], ["a3"]),
        helper.make_node("Conv", ["a3", "w4", "b4"], ["logits"], kernel_shape=[1, 1, 1]),
    ]
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 1] + list(s.roi_zyx))
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", k] + list(s.roi_zyx))
    g = helper.make_graph(nodes, "many_classes_tiny", [x], [y], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="bench/many_classes")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def make_tiny(paths, s, seed, log):
    import onnx
    m = tiny_graph(s, seed)
    tmp = str(paths.onnx) + ".tmp"
    onnx.save(m, tmp)
    os.replace(tmp, paths.onnx)
    params = sum(int(np.prod(t.dims)) for t in m.graph.initializer)
    return {"kind": "tiny (onnx.helper)", "parameters": params}


def make(paths, s, seed=common.SEED, log=print):
    t0 = time.perf_counter()
    paths.onnx.parent.mkdir(parents=True, exist_ok=True)
    info = (make_tiny if s.name == "tiny" else make_full)(paths, s, seed, log)
    info.update({"setup": s.name, "seed": seed, "classes": s.classes, "roi_zyx": list(s.roi_zyx),
                 "features": list(s.features), "opset": OPSET, "onnx_bytes": os.path.getsize(paths.onnx),
                 "seconds": time.perf_counter() - t0})
    paths.model_json.write_text(json.dumps(info, indent=1) + "\n")
    log(f"model: {info['kind']}, {len(s.features)} stages {list(s.features)}, {info['parameters'] / 1e6:.2f} M "
        f"parameters, window {'x'.join(map(str, s.roi_zyx))}, {s.classes} classes, ONNX "
        f"{info['onnx_bytes'] / 2**20:.1f} MiB in {info['seconds']:.1f} s")
    return info


def matches(paths, s, seed):
    try:
        info = json.loads(paths.model_json.read_text())
    except (OSError, ValueError):
        return False
    return (info.get("setup") == s.name and info.get("seed") == seed and info.get("classes") == s.classes
            and info.get("roi_zyx") == list(s.roi_zyx) and paths.onnx.is_file())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="the CPU dry run's network (onnx.helper, no torch)")
    ap.add_argument("--work", default=None, help="work folder (default $MCBENCH_WORK or /tmp/many_classes[-tiny])")
    ap.add_argument("--seed", type=int, default=common.SEED)
    a = ap.parse_args(argv)
    paths = common.Paths(common.default_work_dir(a.tiny) if a.work is None else pathlib.Path(a.work))
    make(paths, common.setup(a.tiny), a.seed)


if __name__ == "__main__":
    main()
