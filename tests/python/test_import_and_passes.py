"""ONNX import (dtypes, raw and typed initializers, external data) and the
graph passes, each checked by running segrt beside onnxruntime."""
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import run_segrt
from onnx_util import init, ort_run, rel_l2, save_model, tensor_input

RNG = np.random.default_rng(20261121)


def segrt_run(tmp_path, model, feeds):
    """Runs model on feeds (name -> array) through the CLI; returns outputs."""
    args = ["run", model]
    for name, arr in feeds.items():
        p = tmp_path / f"in_{name}.npy"
        np.save(p, arr)
        args += ["--input", f"{name}={p}"]
    m = onnx.load(str(model), load_external_data=False)
    outs = []
    for i, o in enumerate(m.graph.output):
        p = tmp_path / f"out_{i}.npy"
        args += ["--output", f"{o.name}={p}"]
        outs.append(p)
    run_segrt(*args, check=0)
    return [np.load(p) for p in outs]


def optimized_ops(model, *shape_args):
    out = run_segrt("info", model, *shape_args, "--optimized", check=0).stdout
    hists = re.findall(r"operators \(\d+ nodes\):(.*)", out)
    return {p.split()[0]: int(p.split()[1]) for p in hists[-1].split(",") if p.strip()}


# ONNX element type, numpy dtype, values
DTYPE_CASES = [
    (TensorProto.FLOAT16, np.float16, [1.5, -2.25, 65504.0, 0.0]),
    (TensorProto.BFLOAT16, None, [1.5, -2.0, 3.0e10, 0.0]),
    (TensorProto.DOUBLE, np.float64, [1.5, -2.25, 1e300, 0.0]),
    (TensorProto.INT64, np.int64, [1, -2, 1 << 40, 0]),
    (TensorProto.INT32, np.int32, [1, -2, 1 << 30, 0]),
    (TensorProto.INT8, np.int8, [1, -2, 127, -128]),
    (TensorProto.UINT8, np.uint8, [1, 2, 255, 0]),
    (TensorProto.BOOL, np.bool_, [True, False, True, False]),
]


@pytest.mark.parametrize("elem,npdt,vals", DTYPE_CASES)
@pytest.mark.parametrize("raw", [True, False])
def test_initializer_dtypes(tmp_path, elem, npdt, vals, raw):
    c = helper.make_tensor("c", elem, [4], vals, raw=False)
    if raw:
        # Re-encode through numpy where numpy has the type; bfloat16 has no
        # numpy type, so encode its bits by hand.
        if npdt is not None:
            c = numpy_helper.from_array(np.array(vals, dtype=npdt), "c")
        else:
            bits = (np.array(vals, np.float32).view(np.uint32) >> 16).astype(np.uint16)
            c = helper.make_tensor("c", elem, [4], bits.tobytes(), raw=True)
    nodes = [helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["x", "cf"], ["y"])]
    model = tmp_path / "dtype.onnx"
    save_model(model, nodes, [tensor_input("x", [4])], [tensor_input("y", [4])], [c])
    x = RNG.standard_normal(4).astype(np.float32)
    # What the file holds, decoded by the onnx package (bfloat16 included).
    stored = numpy_helper.to_array(c).astype(np.float32)
    (got,) = segrt_run(tmp_path, model, {"x": x})
    np.testing.assert_array_equal(got, x + stored)
    if elem != TensorProto.BFLOAT16:
        (ref,) = ort_run(model, {"x": x})
        np.testing.assert_array_equal(got, ref)


def _small_conv_model(path, with_external=False):
    w = RNG.standard_normal((6, 3, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "g", [tensor_input("x", ["n", 3, "h", "w"])],
                              [tensor_input("y", ["n", 6, "h", "w"])], [init("w", w), init("b", b)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if with_external:
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location="weights.bin", size_threshold=0)
    else:
        onnx.save(model, str(path))


def test_external_data_loads_and_runs(tmp_path):
    sub = tmp_path / "m"
    sub.mkdir()
    model = sub / "conv.onnx"
    _small_conv_model(model, with_external=True)
    assert (sub / "weights.bin").stat().st_size > 0
    x = RNG.standard_normal((2, 3, 9, 7)).astype(np.float32)
    (got,) = segrt_run(tmp_path, model, {"x": x})
    (ref,) = ort_run(model, {"x": x})
    assert rel_l2(got, ref) <= 1e-6


def _bn(prefix, c):
    return [init(f"{prefix}_s", RNG.uniform(0.5, 2, c).astype(np.float32)),
            init(f"{prefix}_b", RNG.standard_normal(c).astype(np.float32)),
            init(f"{prefix}_m", RNG.standard_normal(c).astype(np.float32)),
            init(f"{prefix}_v", RNG.uniform(0.1, 3, c).astype(np.float32))]


def test_batchnorm_folds_into_conv_and_convtranspose(tmp_path):
    inits = [init("w1", RNG.standard_normal((8, 2, 3, 3)).astype(np.float32)),
             init("w2", RNG.standard_normal((8, 3, 2, 2)).astype(np.float32)),
             init("b2", RNG.standard_normal(6).astype(np.float32))]
    inits += _bn("bn1", 8) + _bn("bn2", 6)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], group=2),
        helper.make_node("BatchNormalization", ["c1", "bn1_s", "bn1_b", "bn1_m", "bn1_v"], ["n1"], epsilon=1e-3),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("ConvTranspose", ["r1", "w2", "b2"], ["c2"], strides=[2, 2], group=2),
        helper.make_node("BatchNormalization", ["c2", "bn2_s", "bn2_b", "bn2_m", "bn2_v"], ["y"]),
    ]
    model = tmp_path / "bn.onnx"
    save_model(model, nodes, [tensor_input("x", [1, 4, 10, 12])], [tensor_input("y", [1, 6, 20, 24])], inits)
    ops = optimized_ops(model)
    assert "BatchNormalization" not in ops and ops["Conv"] == 1 and ops["ConvTranspose"] == 1
    x = RNG.standard_normal((1, 4, 10, 12)).astype(np.float32)
    (got,) = segrt_run(tmp_path, model, {"x": x})
    (ref,) = ort_run(model, {"x": x})
    assert rel_l2(got, ref) <= 1e-5


def test_identity_dropout_and_dead_nodes_go(tmp_path):
    nodes = [
        helper.make_node("Identity", ["x"], ["i1"]),
        helper.make_node("Dropout", ["i1"], ["d1"]),
        helper.make_node("Relu", ["d1"], ["r"]),
        helper.make_node("Sigmoid", ["x"], ["unused"]),
        helper.make_node("Identity", ["r"], ["y"]),
    ]
    model = tmp_path / "ident.onnx"
    save_model(model, nodes, [tensor_input("x", [3, 5])], [tensor_input("y", [3, 5])])
    assert optimized_ops(model) == {"Relu": 1}
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    (got,) = segrt_run(tmp_path, model, {"x": x})
    np.testing.assert_array_equal(got, np.maximum(x, 0))


def test_shape_arithmetic_folds_once_shapes_are_bound(tmp_path):
    """Flatten the spatial dims via Shape/Gather/Concat/Reshape, the way
    exporters write x.view(x.size(0), x.size(1), -1)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
        helper.make_node("Gather", ["s", "i1"], ["c"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
        helper.make_node("Unsqueeze", ["c", "ax0"], ["c1"]),
        helper.make_node("Concat", ["n1", "c1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["flat"]),
        helper.make_node("Softmax", ["flat"], ["y"], axis=-1),
    ]
    inits = [init("i0", np.array(0, np.int64)), init("i1", np.array(1, np.int64)),
             init("ax0", np.array([0], np.int64)), init("minus1", np.array([-1], np.int64))]
    model = tmp_path / "shape.onnx"
    save_model(model, nodes, [tensor_input("x", ["n", "c", "h", "w"])], [tensor_input("y", None)], inits,
               check=False)
    unbound = optimized_ops(model)
    assert "Shape" in unbound  # h and w unknown: nothing to fold yet
    bound = optimized_ops(model, "--shape", "x=2x3x4x5")
    assert bound == {"Reshape": 1, "Softmax": 1}, bound
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    (ref,) = ort_run(model, {"x": x})
    if "Softmax" in unbound and "Softmax" not in str(run_segrt("info", model).stdout):
        pytest.fail("histogram lost Softmax")
    # Running needs a Softmax kernel in the reference backend.
    (got,) = segrt_run(tmp_path, model, {"x": x})
    assert rel_l2(got, ref) <= 1e-6


def test_metadata_and_multiple_io(tmp_path):
    nodes = [helper.make_node("Add", ["a", "b"], ["sum"]), helper.make_node("Mul", ["a", "b"], ["prod"])]
    graph = helper.make_graph(nodes, "g", [tensor_input("a", [2, 3]), tensor_input("b", [3])],
                              [tensor_input("sum", [2, 3]), tensor_input("prod", [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.helper.set_model_props(model, {"segrt.normalize": "zscore"})
    path = tmp_path / "multi.onnx"
    onnx.save(model, str(path))
    a = RNG.standard_normal((2, 3)).astype(np.float32)
    b = RNG.standard_normal(3).astype(np.float32)
    s, p = segrt_run(tmp_path, path, {"b": b, "a": a})
    np.testing.assert_array_equal(s, a + b)
    np.testing.assert_array_equal(p, a * b)
