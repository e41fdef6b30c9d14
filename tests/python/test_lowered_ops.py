"""Composite operators as the primitive ones they are defined by
(src/graph/pass_lower.c): what a backend without their kernels (CUDA
today) runs. On the CPU `--disable-kernels composite-ops` lowers them
too, so the lowered forms are checked here against onnxruntime and
against segrt's own kernels: RMSNormalization, DequantizeLinear and
QuantizeLinear per tensor and per axis, 8- and 16-bit, with and without
zero points, ties, saturation and NaN; the differential suite's cases of
those and of Attention (grouped heads, masks, causal, cache, softcap).
The ONNX node tests of the four operators run lowered as well (the same
cases pass as with the kernels).
Forms the pass leaves alone (blocks, int32 data) must still run."""
import pathlib
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import SEGRT

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "onnx_node"))
import opgen  # noqa: E402
import run_node_tests as rnt  # noqa: E402

LOWER = ["--disable-kernels", "composite-ops"]
NP = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.int8: TensorProto.INT8,
      np.uint8: TensorProto.UINT8, np.int16: TensorProto.INT16, np.uint16: TensorProto.UINT16,
      np.int32: TensorProto.INT32}


def model(path, node, x_dtype, x_shape, inits, y_dtype, opset):
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", NP[x_dtype], list(x_shape))],
                          [helper.make_tensor_value_info("y", NP[y_dtype], None)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    onnx.save(m, path)
    return path


def run(path, x, tmp_path, *extra):
    xin, yout = tmp_path / "x.npy", tmp_path / f"y{len(extra)}.npy"
    np.save(xin, x)
    p = subprocess.run([SEGRT, "run", str(path), "--input", f"x={xin}", "--output", f"y={yout}", "--quiet",
                        *extra], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return np.load(yout)


def lowered(path, x):
    """Whether the CPU plan of the model runs lowered nodes (their steps
    are named NODE/lowered_K). x: the input x, or a dict of inputs."""
    feeds = x if isinstance(x, dict) else {"x": x}
    shapes = []
    for name, a in feeds.items():
        a = np.asarray(a)
        shapes += ["--shape", f"{name}=" + ("x".join(map(str, a.shape)) if a.ndim else "1")]
    p = subprocess.run([SEGRT, "bench", str(path), *shapes, "--iters", "1", "--warmup", "0", "--profile", *LOWER],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return "/lowered_" in p.stdout


def check(path, x, tmp_path, exact):
    want = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    own, low = run(path, x, tmp_path), run(path, x, tmp_path, *LOWER)
    assert low.dtype == want.dtype and low.shape == want.shape
    if exact:
        np.testing.assert_array_equal(low, want)
        np.testing.assert_array_equal(low, own)
    else:
        tol = 2e-3 if want.dtype == np.float16 else 2e-6
        np.testing.assert_allclose(low.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
    assert lowered(path, x)


@pytest.mark.parametrize("shape,axis,dtype,eps", [((2, 3, 4), -1, np.float32, 1e-5), ((2, 3, 4, 5), 1, np.float32, 1e-5),
                                                  ((3, 8), 0, np.float32, 1e-3), ((2, 6, 7), -2, np.float16, 1e-5)])
def test_rms_normalization(tmp_path, shape, axis, dtype, eps):
    rng = np.random.default_rng(1)
    ax = axis % len(shape)
    scale = (rng.random(shape[ax:]) + 0.5).astype(dtype)
    node = helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=axis, epsilon=eps)
    path = model(tmp_path / "m.onnx", node, dtype, shape, {"s": scale}, dtype, 23)
    check(path, (rng.standard_normal(shape) * 3).astype(dtype), tmp_path, exact=False)


DQ = [  # x dtype, shape, axis, scale shape (None: scalar), zero point, output dtype
    (np.int8, (2, 3, 4), 1, None, True, np.float32),
    (np.uint8, (2, 3, 4), 1, (3,), True, np.float32),
    (np.int16, (4, 5), -1, (5,), True, np.float32),
    (np.uint16, (3, 4, 2), 0, (3,), False, np.float32),
    (np.int8, (2, 3), 1, (3,), False, np.float16),
]


@pytest.mark.parametrize("xdt,shape,axis,sshape,zp,ydt", DQ)
def test_dequantize_linear(tmp_path, xdt, shape, axis, sshape, zp, ydt):
    rng = np.random.default_rng(2)
    info = np.iinfo(xdt)
    scale = (rng.random(sshape or ()) * 0.1 + 0.01).astype(ydt)
    inits = {"s": scale}
    inputs = ["x", "s"]
    if zp:
        inits["z"] = rng.integers(info.min // 4, info.max // 4, size=sshape or (), endpoint=True).astype(xdt)
        inputs.append("z")
    node = helper.make_node("DequantizeLinear", inputs, ["y"], axis=axis)
    path = model(tmp_path / "m.onnx", node, xdt, shape, inits, ydt, 21)
    x = rng.integers(info.min, info.max, size=shape, endpoint=True).astype(xdt)
    check(path, x, tmp_path, exact=ydt == np.float32)


Q = [  # output dtype, shape, axis, scale shape (None: scalar), zero point
    (np.uint8, (2, 3, 4), 1, None, True),
    (np.int8, (2, 3, 4), 1, (3,), True),
    (np.int16, (4, 5), -1, (5,), False),
    (np.uint16, (3, 4, 2), 0, (3,), True),
]


@pytest.mark.parametrize("ydt,shape,axis,sshape,zp", Q)
def test_quantize_linear(tmp_path, ydt, shape, axis, sshape, zp):
    rng = np.random.default_rng(3)
    info = np.iinfo(ydt)
    scale = np.full(sshape or (), 0.5, np.float32) if sshape is None else (rng.random(sshape) + 0.25).astype(np.float32)
    inits = {"s": scale}
    inputs = ["x", "s"]
    if zp:
        inits["z"] = rng.integers(info.min // 8, info.max // 8, size=sshape or (), endpoint=True).astype(ydt)
        inputs.append("z")
    extra = {} if zp else {"output_dtype": NP[ydt]}  # without a zero point the type is the attribute's
    node = helper.make_node("QuantizeLinear", inputs, ["y"], axis=axis, **extra)
    path = model(tmp_path / "m.onnx", node, np.float32, shape, inits, ydt, 21)
    x = (rng.standard_normal(shape) * info.max / 4).astype(np.float32)
    # Ties (x / scale exactly k + 0.5, rounded to even) and values past
    # the range at both ends (saturated).
    flat = x.reshape(-1)
    flat[:4] = np.array([0.25, 0.75, -1.25, 1.75], np.float32) * (0.5 if sshape is None else 1.0)
    flat[-2:] = [3.0e9, -3.0e9]
    check(path, x, tmp_path, exact=True)


def test_quantize_nan_and_infinities_as_the_kernel(tmp_path):
    """NaN to 0 (the reference kernel's choice), infinities saturated:
    the lowered form agrees with segrt's own kernel."""
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    path = model(tmp_path / "m.onnx", node, np.float32, (6,), {"s": np.float32(0.5), "z": np.uint8(10)}, np.uint8, 21)
    x = np.array([np.nan, np.inf, -np.inf, 1.0, -100.0, 200.0], np.float32)
    own, low = run(path, x, tmp_path), run(path, x, tmp_path, *LOWER)
    np.testing.assert_array_equal(low, own)
    assert low.tolist() == [0, 255, 0, 12, 0, 255]


def test_forms_left_alone_still_run(tmp_path):
    """int32 data (float32 cannot hold every difference) is not lowered:
    its own kernel runs it, with the switch off or on."""
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"])
    path = model(tmp_path / "m.onnx", node, np.int32, (4,), {"s": np.float32(0.5), "z": np.int32(-7)}, np.float32, 21)
    x = np.array([2**30, -2**30, 16777217, 3], np.int32)
    want = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    np.testing.assert_array_equal(run(path, x, tmp_path, *LOWER), want)
    assert not lowered(path, x)


GENERATED = opgen.case_ids(["attention", "rms_norm", "quant"])


@pytest.mark.parametrize("family,seed", GENERATED, ids=[f"{f}-{s}" for f, s in GENERATED])
def test_generated_cases_lowered(tmp_path, family, seed):
    """test_diff_ops.py's cases of the three families, lowered: the same
    oracles and bounds (onnxruntime, or the spec's reference for
    Attention), and the plan runs the lowered nodes."""
    case = opgen.make_case(family, seed)
    opgen.check_case(case, tmp_path, f"{family}-{seed} lowered",
                     f"SEGRT_DIFF_SEED={seed} pytest test_lowered_ops.py", extra=LOWER)
    assert lowered(tmp_path / "model.onnx", {k: np.asarray(v) for k, v in case.feeds.items()})


OPS = ("RMSNormalization", "QuantizeLinear", "DequantizeLinear", "Attention")


def test_node_cases_lowered():
    """The node test cases of the three operators with their kernels off:
    every case that passes with them passes lowered."""
    source = rnt.find_source()
    if source.skip_reason:
        pytest.skip(source.skip_reason)
    cases = [c for c in rnt.load_cases(source) if c.op in OPS]
    plain = {r.name: r.status for r in rnt.run_cases(cases, SEGRT)}
    low = {r.name: (r.status, r.message) for r in rnt.run_cases(cases, SEGRT, extra=tuple(LOWER))}
    ran = [n for n, s in plain.items() if s == rnt.PASSED]
    assert len(ran) >= 160
    bad = {n: low[n] for n in ran if low[n][0] != rnt.PASSED}
    assert not bad, bad
