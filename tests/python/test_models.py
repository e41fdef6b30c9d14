"""segrt info and segrt run on the test models (tests/models/make_models.py:
MONAI networks laid out as PyTorch exports them), checked against the onnx
package's view of each file and against the reference pairs, whose outputs
onnxruntime computed when the models were generated."""
import collections
import re

import numpy as np
import onnx
import pytest

from conftest import SANITIZED, run_segrt
from onnx_util import rel_l2

MODEL_NAMES = ["basicunet2d", "basicunet2d_ts", "basicunet2d_tiny", "unet3d_spleen"]


def parse_info(text):
    """Parses `segrt info` output into inputs, outputs and histograms."""
    info = {"inputs": {}, "outputs": {}, "histograms": [], "gflop": None}
    for line in text.splitlines():
        m = re.match(r"\s+(input|output)\s+(\S+)\s+(\S+)\s+(.*)$", line)
        if m:
            dims = [d.strip() for d in m.group(4).split(" x ")]
            info[m.group(1) + "s"][m.group(2)] = (m.group(3), dims)
        m = re.match(r"operators \((\d+) nodes\):(.*)$", line)
        if m:
            hist = {}
            for part in m.group(2).split(","):
                op, n = part.split()
                hist[op] = int(n)
            assert sum(hist.values()) == int(m.group(1))
            info["histograms"].append(hist)
        m = re.match(r"producer: (.*), IR version (\d+), opset (\d+)$", line)
        if m:
            info["producer"], info["ir"], info["opset"] = m.group(1), int(m.group(2)), int(m.group(3))
        m = re.match(r"GFLOP: ([0-9.]+)$", line)
        if m:
            info["gflop"] = float(m.group(1))
    return info


def onnx_dims(vi):
    return [d.dim_param if d.dim_param else str(d.dim_value) for d in vi.type.tensor_type.shape.dim]


DTYPES = {1: "float32", 10: "float16", 7: "int64"}


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_info_matches_the_file(models, name):
    path = models / f"{name}.onnx"
    model = onnx.load(str(path), load_external_data=False)
    info = parse_info(run_segrt("info", path, check=0).stdout)
    inits = {t.name for t in model.graph.initializer}
    inputs = {vi.name: (DTYPES[vi.type.tensor_type.elem_type], onnx_dims(vi))
              for vi in model.graph.input if vi.name not in inits}
    outputs = {vi.name: (DTYPES[vi.type.tensor_type.elem_type], onnx_dims(vi)) for vi in model.graph.output}
    assert info["inputs"] == inputs
    assert info["outputs"] == outputs
    assert info["opset"] == model.opset_import[0].version
    assert info["ir"] == model.ir_version
    assert model.producer_name in info["producer"]
    assert info["histograms"][0] == dict(collections.Counter(n.op_type for n in model.graph.node))


def test_torchscript_shape_arithmetic_folds_away(models):
    """The TorchScript export carries Constant/ConstantOfShape/Reshape/Slice/
    Transpose/Cast/Concat/Identity arithmetic; bound to a shape, its optimized
    graph has the same operators as the dynamo export of the same network."""
    shape = "image=1x3x256x256"
    ts = parse_info(run_segrt("info", models / "basicunet2d_ts.onnx", "--shape", shape, "--optimized", check=0).stdout)
    dyn = parse_info(run_segrt("info", models / "basicunet2d.onnx", "--shape", shape, "--optimized", check=0).stdout)
    assert len(ts["histograms"]) == 2 and len(dyn["histograms"]) == 2
    assert ts["histograms"][1] == dyn["histograms"][1]
    for op in ["Identity", "Constant", "ConstantOfShape", "Reshape", "Slice", "Transpose", "Cast", "Shape", "Gather"]:
        assert op not in ts["histograms"][1]
    assert ts["histograms"][1]["Conv"] == 19
    assert ts["gflop"] == pytest.approx(dyn["gflop"], rel=1e-6)


def test_gflop_of_basicunet2d(models):
    """BasicUNet(2, 3, 2): 39.9 GFLOP per 512x512 sample (multiply-adds
    counted twice), as for the PyTorch export of the same network."""
    info = parse_info(run_segrt("info", models / "basicunet2d.onnx", "--shape", "image=1x3x512x512", check=0).stdout)
    assert info["gflop"] == pytest.approx(39.9, rel=0.02)


def test_symbolic_dims_are_named(models):
    info = parse_info(run_segrt("info", models / "unet3d_spleen.onnx", check=0).stdout)
    assert info["inputs"]["image"] == ("float32", ["s77", "1", "s53", "s0", "s92"])


def test_optimized_output_dims_for_bound_shape(models):
    out = run_segrt("info", models / "unet3d_spleen.onnx", "--shape", "image=2x1x32x48x64", "--optimized", check=0).stdout
    assert re.search(r"output\s+logits\s+float32\s+2 x 2 x 32 x 48 x 64", out), out


# The reference executor is plain C; under the sanitizers only the small
# models run whole, the others are checked by the release build.
RUN_NAMES = ["basicunet2d_tiny"] if SANITIZED else MODEL_NAMES


@pytest.mark.parametrize("name", RUN_NAMES)
def test_run_reproduces_reference_pair(models, tmp_path, name):
    out = tmp_path / "out.npy"
    p = run_segrt("run", models / f"{name}.onnx", "--input", models / f"{name}.in.npy", "--output", out, check=0)
    assert str(out) in p.stdout
    got = np.load(out)
    want = np.load(models / f"{name}.out.npy")
    assert got.shape == want.shape and got.dtype == want.dtype
    assert rel_l2(got, want) <= 1e-5


def test_help_and_version():
    assert "usage: segrt" in run_segrt("--help", check=0).stdout
    assert re.match(r"segrt \d+\.\d+\.\d+", run_segrt("--version", check=0).stdout)
    assert run_segrt(check=2).stderr.startswith("usage:")
    assert "unknown command" in run_segrt("frobnicate", check=2).stderr


def test_info_devices_without_gpu_is_plain():
    p = run_segrt("info", "--devices", check=0)
    assert p.stdout.strip()
    assert "no GPU" in p.stdout or "cuda:0" in p.stdout
