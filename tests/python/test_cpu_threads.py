"""The CPU backend's threaded paths, on tensors large enough to be split
among threads (the small generated cases of test_diff_* run on one): each
operator that runs over chunks of axis 0 beside onnxruntime, and operators
acting along axis 0, which must not be split."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from conftest import run_segrt
from onnx_util import init, ort_run, save_model, tensor_input

RNG = np.random.default_rng(77)
X = RNG.standard_normal((4, 16, 48, 40)).astype(np.float32)  # 123K elements, 4 rows


def i64(vals):
    return np.array(vals, np.int64)


# name: (nodes, extra initializers, output dtype)
CASES = {
    "pad_reflect_spatial": ([helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")],
                            [init("pads", i64([0, 0, 2, 3, 0, 0, 1, 4]))], TensorProto.FLOAT),
    "pad_axis0_not_split": ([helper.make_node("Pad", ["x", "pads"], ["y"], mode="edge")],
                            [init("pads", i64([1, 0, 0, 0, 2, 0, 0, 0]))], TensorProto.FLOAT),
    "slice_spatial": ([helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])],
                      [init("st", i64([1, -5])), init("en", i64([40, 2])), init("ax", i64([2, 3])),
                       init("sp", i64([2, -1]))], TensorProto.FLOAT),
    "slice_axis0_reversed": ([helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])],
                             [init("st", i64([-1])), init("en", i64([-5])), init("ax", i64([0])),
                              init("sp", i64([-1]))], TensorProto.FLOAT),
    "gather_axis1": ([helper.make_node("Gather", ["x", "idx"], ["y"], axis=1)],
                     [init("idx", i64([[3, 0], [15, 7]]))], TensorProto.FLOAT),
    "gather_axis0": ([helper.make_node("Gather", ["x", "idx"], ["y"], axis=0)],
                     [init("idx", i64([3, 0, 2, 1]))], TensorProto.FLOAT),
    "where_broadcast": ([helper.make_node("Greater", ["x", "zero"], ["c"]),
                         helper.make_node("Where", ["c", "x", "alt"], ["y"])],
                        [init("zero", np.float32(0)), init("alt", RNG.standard_normal((1, 16, 1, 40)).astype(np.float32))],
                        TensorProto.FLOAT),
    "reduce_spatial": ([helper.make_node("ReduceMean", ["x", "ax"], ["y"], keepdims=1)],
                       [init("ax", i64([2, 3]))], TensorProto.FLOAT),
    "reduce_axis0": ([helper.make_node("ReduceSum", ["x", "ax"], ["y"], keepdims=1)],
                     [init("ax", i64([0]))], TensorProto.FLOAT),
    "argmax_channels": ([helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=1)], [], TensorProto.INT64),
    "softmax_channels": ([helper.make_node("Softmax", ["x"], ["y"], axis=1)], [], TensorProto.FLOAT),
    "softmax_axis0": ([helper.make_node("Softmax", ["x"], ["y"], axis=0)], [], TensorProto.FLOAT),
    "layernorm_last": ([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1)],
                       [init("g", RNG.random(40).astype(np.float32)), init("b", RNG.random(40).astype(np.float32))],
                       TensorProto.FLOAT),
    "tile": ([helper.make_node("Tile", ["x", "rep"], ["y"])], [init("rep", i64([1, 2, 1, 1]))], TensorProto.FLOAT),
    "depth_to_space": ([helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode="CRD")], [],
                       TensorProto.FLOAT),
    "cast_transpose_int": ([helper.make_node("Cast", ["x"], ["c"], to=TensorProto.INT32),
                            helper.make_node("Transpose", ["c"], ["y"], perm=[0, 3, 1, 2])], [], TensorProto.INT32),
    "max_variadic": ([helper.make_node("Max", ["x", "m1", "m2"], ["y"])],
                     [init("m1", RNG.standard_normal((1, 16, 1, 1)).astype(np.float32)),
                      init("m2", RNG.standard_normal((40,)).astype(np.float32))], TensorProto.FLOAT),
    "batchnorm": ([helper.make_node("BatchNormalization", ["x", "s", "bb", "m", "v"], ["y"])],
                  [init("s", RNG.random(16).astype(np.float32)), init("bb", RNG.random(16).astype(np.float32)),
                   init("m", RNG.random(16).astype(np.float32)), init("v", RNG.random(16).astype(np.float32) + 0.5)],
                  TensorProto.FLOAT),
    "pow": ([helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Pow", ["a", "e"], ["y"])],
            [init("e", np.float32(1.7))], TensorProto.FLOAT),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_threaded_against_onnxruntime(tmp_path, name):
    nodes, inits, out_type = CASES[name]
    model = tmp_path / f"{name}.onnx"
    save_model(model, nodes, [tensor_input("x", list(X.shape))],
               [helper.make_tensor_value_info("y", out_type, None)], inits, opset=18, check=False)
    (want,) = ort_run(model, {"x": X})
    np.save(tmp_path / "x.npy", X)
    out = tmp_path / "y.npy"
    run_segrt("run", model, "--input", f"x={tmp_path / 'x.npy'}", "--output", f"y={out}", "--threads", 2, check=0)
    got = np.load(out)
    assert got.shape == want.shape and got.dtype == want.dtype
    if np.issubdtype(want.dtype, np.floating):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, want)


def test_profile_shows_the_threaded_paths(tmp_path):
    """The cases above must not all have fallen to the whole-tensor path."""
    nodes, inits, _ = CASES["reduce_spatial"]
    model = tmp_path / "m.onnx"
    save_model(model, nodes, [tensor_input("x", list(X.shape))],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits, opset=18, check=False)
    out = run_segrt("bench", model, "--shape", "x=4x16x48x40", "--iters", 1, "--warmup", 0, "--profile", check=0).stdout
    assert "segrt:reference" in out and "ReduceMean" in out
