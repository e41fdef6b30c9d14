"""Fixtures of the Python package's tests: the package staged by the build
(PYTHONPATH=${build}/python, set by ctest), the segrt command to compare
with ($SEGRT) and the test models ($SEGRT_MODELS), as tests/python has
them; and a tiny model made here for tests of many calls."""
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEGRT = os.environ.get("SEGRT", str(ROOT / "build" / "segrt"))
MODELS = pathlib.Path(os.environ.get("SEGRT_MODELS") or ROOT / "build" / "test-models")
SANITIZED = os.environ.get("SEGRT_SANITIZED") == "1"
if not os.environ.get("PYTHONPATH"):  # run by hand: the default build's staged package
    sys.path.insert(0, str(ROOT / "build" / "python"))

import segrt  # noqa: E402


def run_segrt(*args, check=0):
    p = subprocess.run([SEGRT, *map(str, args)], capture_output=True, text=True, timeout=900)
    if check is not None:
        assert p.returncode == check, f"exit {p.returncode}: {p.stderr}"
    return p


@pytest.fixture(scope="session")
def models():
    if not (MODELS / "basicunet2d_tiny.onnx").is_file():
        pytest.fail(f"no test models in {MODELS}: run tests/models/make_models.py {MODELS} or set SEGRT_MODELS")
    return MODELS


def make_tiny(path):
    """y = relu(2 x + 1) over x: float32 [batch, 4]; a model whose run takes
    microseconds, for tests of many calls."""
    import onnx
    from onnx import TensorProto, helper
    two = helper.make_tensor("two", TensorProto.FLOAT, [1], [2.0])
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    g = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["m"]), helper.make_node("Add", ["m", "one"], ["a"]),
         helper.make_node("Relu", ["a"], ["y"])],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [two, one])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    return make_tiny(tmp_path_factory.mktemp("tiny") / "tiny.onnx")


@pytest.fixture(scope="session")
def tiny_engine(models):
    with segrt.Engine(models / "basicunet2d_tiny.onnx") as e:
        yield e


def tiny_input(seed=0, shape=(1, 1, 32, 48)):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
