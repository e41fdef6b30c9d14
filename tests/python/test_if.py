"""If whose condition folds when the plan is built (src/graph/pass_if.c):
exporters branch on an input's dims (an odd size padded, a small input
taken whole), and once segrt binds those dims the condition is a constant
and the If is its branch's nodes. Each model runs in segrt against
onnxruntime, which runs the If itself, at input sizes that take every
branch: branches reading values from around them (the main graph's and,
for a nested If, the outer branch's), initializers of their own, a branch
whose output is a value from outside, and an If inside a branch. An If
whose condition is a graph input cannot fold: refused in one line naming
the node."""
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import opgen
from conftest import SEGRT

OPSET = [helper.make_opsetid("", 17)]
F = TensorProto.FLOAT


def const(name, value):
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


def branch(name, nodes, outputs, inits=()):
    return helper.make_graph(nodes, name, [], outputs, list(inits))


def shape_model():
    """out = Relu(If(H > 32, then: If(H < 100, then: x * 2 + one,
    else: x * 2 - one), else: x + bias)), H the input's dim 2: `one` and
    `bias` are the main graph's, 2 the outer then-branch's own constant,
    `y2` the outer branch's value that the inner branches read; the
    branches declare their outputs in the main graph's symbolic dims."""
    y_out = [helper.make_tensor_value_info("z", F, ["n", 3, "h", "w"])]  # the main graph's symbols
    inner_then = branch("inner_then", [helper.make_node("Add", ["y2", "one"], ["z"])], y_out)
    inner_else = branch("inner_else", [helper.make_node("Sub", ["y2", "one"], ["z"])], y_out)
    outer_then = branch("outer_then", [
        helper.make_node("Mul", ["x", "two"], ["y2"]),
        helper.make_node("Less", ["h", "hundred"], ["small"]),
        helper.make_node("If", ["small"], ["z"], then_branch=inner_then, else_branch=inner_else, name="inner"),
    ], y_out, [const("two", 2.0), numpy_helper.from_array(np.array(100, np.int64), "hundred")])
    outer_else = branch("outer_else", [helper.make_node("Add", ["x", "bias"], ["z"])], y_out)
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "two_idx"], ["h"], axis=0),
        helper.make_node("Greater", ["h", "thirty_two"], ["big"]),
        helper.make_node("If", ["big"], ["r"], then_branch=outer_then, else_branch=outer_else, name="outer"),
        helper.make_node("Relu", ["r"], ["out"]),
    ]
    inits = [const("one", 1.0), const("bias", np.array([0.5, -1.0, 2.0], np.float32).reshape(1, 3, 1, 1)),
             numpy_helper.from_array(np.array(2, np.int64), "two_idx"),
             numpy_helper.from_array(np.array(32, np.int64), "thirty_two")]
    graph = helper.make_graph(nodes, "shape_if", [helper.make_tensor_value_info("x", F, ["n", 3, "h", "w"])],
                              [helper.make_tensor_value_info("out", F, None)], inits)
    m = helper.make_model(graph, opset_imports=OPSET)
    m.ir_version = 8
    return m


@pytest.mark.parametrize("h", [16, 64, 128])
def test_shape_condition_every_branch(tmp_path, h):
    x = np.random.default_rng(h).standard_normal((2, 3, h, 8)).astype(np.float32)
    opgen.check_case(opgen.Case(shape_model(), {"x": x}), tmp_path, f"If at H={h}", "pytest test_if.py")


def test_branch_gives_an_outer_value_and_a_constant(tmp_path):
    """then: the graph input through an Identity (onnxruntime refuses an
    outer value given as a branch output as it is); else: a constant of
    the branch's own, no node; the condition from a constant."""
    then = branch("then", [helper.make_node("Identity", ["x"], ["xi"])], [helper.make_tensor_value_info("xi", F, None)])
    other = branch("else", [], [helper.make_tensor_value_info("c", F, None)], [const("c", np.zeros((2, 2)))])
    for flag in (True, False):
        nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other),
                 helper.make_node("Add", ["y", "x"], ["z"])]
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 2])],
                                  [helper.make_tensor_value_info("z", F, [2, 2])],
                                  [numpy_helper.from_array(np.array(flag), "cond")])
        m = helper.make_model(graph, opset_imports=OPSET)
        m.ir_version = 8
        x = np.arange(4, dtype=np.float32).reshape(2, 2)
        (tmp_path / str(flag)).mkdir()
        opgen.check_case(opgen.Case(m, {"x": x}), tmp_path / str(flag), f"If cond={flag}", "pytest test_if.py")


def test_every_input_constant(tmp_path):
    """An If whose condition and every value its branches read are
    constants, its outputs declared: the branch is spliced in (constant
    folding must leave the If to the If pass), then folds."""
    decl = [helper.make_tensor_value_info("z", F, [2, 2])]
    then = branch("then", [helper.make_node("Add", ["c1", "c2"], ["z"])], decl, [const("c2", np.full((2, 2), 3.0))])
    other = branch("else", [helper.make_node("Neg", ["c1"], ["z"])], decl)
    for flag in (True, False):
        nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other),
                 helper.make_node("Add", ["y", "x"], ["out"])]
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 2])],
                                  [helper.make_tensor_value_info("out", F, [2, 2])],
                                  [numpy_helper.from_array(np.array(flag), "cond"),
                                   const("c1", np.arange(4).reshape(2, 2))])
        m = helper.make_model(graph, opset_imports=OPSET)
        m.ir_version = 8
        (tmp_path / str(flag)).mkdir()
        x = np.ones((2, 2), np.float32)
        opgen.check_case(opgen.Case(m, {"x": x}), tmp_path / str(flag), f"constant If {flag}", "pytest test_if.py")


def test_condition_from_an_input_is_refused(tmp_path):
    out = [helper.make_tensor_value_info("y", F, None)]
    nodes = [helper.make_node("If", ["cond"], ["r"], name="choose",
                              then_branch=branch("t", [helper.make_node("Neg", ["x"], ["y"])], out),
                              else_branch=branch("e", [helper.make_node("Abs", ["x"], ["y"])], out))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [4]),
                                           helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("r", F, [4])])
    m = helper.make_model(graph, opset_imports=OPSET)
    m.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    np.save(tmp_path / "x.npy", np.ones(4, np.float32))
    np.save(tmp_path / "c.npy", np.array(True))
    p = subprocess.run([SEGRT, "run", path, "--input", f"x={tmp_path / 'x.npy'}", "--input",
                        f"cond={tmp_path / 'c.npy'}", "--output", f"r={tmp_path / 'r.npy'}"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p
    assert "choose" in p.stderr and "condition" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "r.npy").exists()


def test_loop_body_is_refused(tmp_path):
    """A graph attribute with inputs (a Loop's body, on a node of an
    operator segrt lacks) is refused by name, not crashed on."""
    body = helper.make_graph([helper.make_node("Identity", ["c"], ["c2"])], "body",
                             [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                              helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                             [helper.make_tensor_value_info("c2", TensorProto.BOOL, [])])
    out = [helper.make_tensor_value_info("x", F, None)]
    nodes = [helper.make_node("If", ["cond"], ["y"], name="odd", then_branch=body, else_branch=branch("e", [], out))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2])],
                              [helper.make_tensor_value_info("y", F, [2])],
                              [numpy_helper.from_array(np.array(True), "cond")])
    m = helper.make_model(graph, opset_imports=OPSET)
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    p = subprocess.run([SEGRT, "info", path], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "odd" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p
