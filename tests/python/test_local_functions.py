"""Model-local functions (ModelProto.functions, as the dynamo exporter
writes them) are inlined at import (src/onnx/onnx_import.c): a function
called twice, one calling another, attribute references resolved from the
call (and left unset where the call sets none), optional inputs omitted by
the call, and values of the same name inside and outside a body. Each
model runs in segrt against onnxruntime, which runs local functions
itself; a reference to an attribute outside any function is refused."""
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import opgen
from conftest import SEGRT

OPSET = [helper.make_opsetid("", 18), helper.make_opsetid("local", 1)]


def ref_attr(name, ref, kind):
    a = helper.make_attribute(name, 0.0 if kind == "f" else 0)
    a.ClearField("f")
    a.ClearField("i")
    a.ref_attr_name = ref
    a.type = onnx.AttributeProto.FLOAT if kind == "f" else onnx.AttributeProto.INT
    return a


def make_model(nodes, functions, inputs, outputs):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    m = helper.make_model(graph, opset_imports=OPSET, functions=functions)
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def scaled_act():
    """local.ScaledAct(x, s) = LeakyRelu(x * s, alpha=@alpha); the product
    is named `t`, as a value of the main graph is too."""
    lr = helper.make_node("LeakyRelu", ["t"], ["y"])
    lr.attribute.append(ref_attr("alpha", "alpha", "f"))
    return helper.make_function("local", "ScaledAct", ["x", "s"], ["y"],
                                [helper.make_node("Mul", ["x", "s"], ["t"]), lr], OPSET, ["alpha"])


def block():
    """local.Block(x, s) = ScaledAct(ScaledAct(x, s, alpha=@a), s) + x: a
    function calling another, passing its own attribute on and leaving
    the second call's unset (LeakyRelu's default)."""
    c1 = helper.make_node("ScaledAct", ["x", "s"], ["u"], domain="local")
    c1.attribute.append(ref_attr("alpha", "a", "f"))
    c2 = helper.make_node("ScaledAct", ["u", "s"], ["v"], domain="local")
    return helper.make_function("local", "Block", ["x", "s"], ["y"],
                                [c1, c2, helper.make_node("Add", ["v", "x"], ["y"])], OPSET, ["a"])


def test_functions_inlined_match_onnxruntime(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    s = np.array(1.5, np.float32)
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["t"]),  # `t` outside the bodies too
        helper.make_node("Block", ["t", "s"], ["b1"], domain="local", name="first", a=0.2),
        helper.make_node("Block", ["b1", "s"], ["b2"], domain="local", a=0.05),
        helper.make_node("ScaledAct", ["b2", "s"], ["y"], domain="local", alpha=0.3),
        helper.make_node("Add", ["y", "t"], ["z"]),
    ]
    m = make_model(nodes, [scaled_act(), block()],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
                    helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
                   [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3, 4])])
    opgen.check_case(opgen.Case(m, {"x": x, "s": s}), tmp_path, "local-functions", "pytest test_local_functions.py")


def test_optional_input_left_out_by_the_call(tmp_path):
    """local.ClipTo(x, lo, hi) = Clip(x, lo, hi), called without hi."""
    fn = helper.make_function("local", "ClipTo", ["x", "lo", "hi"], ["y"],
                              [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], OPSET, [])
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
    lo = helper.make_tensor("lo", TensorProto.FLOAT, [], [-1.0])
    graph = helper.make_graph([helper.make_node("ClipTo", ["x", "lo"], ["y"], domain="local")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])], [lo])
    m = helper.make_model(graph, opset_imports=OPSET, functions=[fn])
    m.ir_version = 8
    opgen.check_case(opgen.Case(m, {"x": x}), tmp_path, "local-optional", "pytest test_local_functions.py")


def test_attribute_reference_outside_a_function_is_refused(tmp_path):
    node = helper.make_node("LeakyRelu", ["x"], ["y"])
    node.attribute.append(ref_attr("alpha", "alpha", "f"))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(graph, opset_imports=OPSET[:1])
    m.ir_version = 8
    path = tmp_path / "bad.onnx"
    onnx.save(m, str(path))
    p = subprocess.run([SEGRT, "info", str(path)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "outside a function" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p


def test_a_function_calling_itself_is_refused(tmp_path):
    fn = helper.make_function("local", "Loop", ["x"], ["y"],
                              [helper.make_node("Loop", ["x"], ["y"], domain="local")], OPSET, [])
    graph = helper.make_graph([helper.make_node("Loop", ["x"], ["y"], domain="local")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(graph, opset_imports=OPSET, functions=[fn])
    m.ir_version = 8
    path = tmp_path / "loop.onnx"
    onnx.save(m, str(path))
    p = subprocess.run([SEGRT, "info", str(path)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "deep" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p


@pytest.fixture(autouse=True)
def _segrt():
    assert SEGRT
