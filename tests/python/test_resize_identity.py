"""A Resize to its input's own dims at scale 1 is the
identity in every mode but tf_crop_and_resize, and the no-op pass
(graph/pass_simplify.c) removes it: SegFormer's head resizes its first
stage's features to their own size, a pass over the largest tensor of the
head for nothing. Each case runs against the ONNX spec's reference
implementation (onnx.reference; onnxruntime recomputes the scale from the
dims where they stay the same, so it disagrees with the spec on the near
miss of scale 1.05) and the optimized
graph (segrt info --optimized) says whether the Resize is still there;
near misses stay: a scale of 1.05 that leaves the dims unchanged, a
tf_crop_and_resize over part of the input, a resize that changes a dim."""
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from conftest import SEGRT

RNG = np.random.default_rng(3)
SHAPE = [2, 3, 5, 7]


def model(path, mode, coord, scales=None, sizes=None, roi=None):
    inits = []
    ins = ["x", "roi" if roi is not None else "", "scales" if scales is not None else ""]
    if roi is not None:
        inits.append(numpy_helper.from_array(np.asarray(roi, np.float32), "roi"))
    if scales is not None:
        inits.append(numpy_helper.from_array(np.asarray(scales, np.float32), "scales"))
    if sizes is not None:
        inits.append(numpy_helper.from_array(np.asarray(sizes, np.int64), "sizes"))
        ins.append("sizes")
    node = helper.make_node("Resize", ins, ["r"], mode=mode, coordinate_transformation_mode=coord)
    nodes = [node, helper.make_node("Relu", ["r"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.save(m, path)


ONE = [1.0, 1.0, 1.0, 1.0]
CASES = {  # name: (kwargs, removed)
    "linear-scales-1": (dict(mode="linear", coord="half_pixel", scales=ONE), True),
    "linear-sizes-same": (dict(mode="linear", coord="align_corners", sizes=SHAPE), True),
    "cubic-sizes-same": (dict(mode="cubic", coord="pytorch_half_pixel", sizes=SHAPE), True),
    "nearest-asymmetric": (dict(mode="nearest", coord="asymmetric", scales=ONE), True),
    "half-pixel-symmetric": (dict(mode="linear", coord="half_pixel_symmetric", scales=ONE), True),
    "scale-1.05-same-dims": (dict(mode="linear", coord="half_pixel", scales=[1, 1, 1.05, 1.05]), False),
    "crop-part": (dict(mode="linear", coord="tf_crop_and_resize", sizes=SHAPE,
                       roi=[0, 0, 0.1, 0.2, 1, 1, 0.9, 0.8]), False),
    "changes-a-dim": (dict(mode="linear", coord="half_pixel", sizes=[2, 3, 10, 7]), False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_identity_resize(tmp_path, name):
    kw, removed = CASES[name]
    path = tmp_path / "m.onnx"
    model(str(path), **kw)
    x = RNG.standard_normal(SHAPE).astype(np.float32)
    want = ReferenceEvaluator(str(path)).run(["y"], {"x": x})[0]
    np.save(tmp_path / "x.npy", x)
    p = subprocess.run([SEGRT, "run", str(path), "--quiet", "--input", f"x={tmp_path / 'x.npy'}", "--output",
                        f"y={tmp_path / 'y.npy'}"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    got = np.load(tmp_path / "y.npy")
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    if removed:
        np.testing.assert_array_equal(got, np.maximum(x, 0))
    info = subprocess.run([SEGRT, "info", str(path), "--optimized"], capture_output=True, text=True, timeout=60)
    assert info.returncode == 0, info.stderr
    after = info.stdout.split("after optimization", 1)[-1]
    assert ("Resize" not in after) == removed, info.stdout
