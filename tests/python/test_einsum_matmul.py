"""Two-operand Einsums written as one batched MatMul between Transposes
and Reshapes (graph/pass_lower.c, sg_pass_einsum_matmul, part of every
optimization): the attention products of MONAI's SABlock and other
transformer blocks, matrix and batched products, outer products, dot
products. Each against onnxruntime, and the plan's steps say whether the
Einsum was rewritten (those of a rewritten one are named EINSUM/lowered_K);
equations outside the pattern (a diagonal, a letter summed over one
operand, broadcasting) keep the Einsum kernel and their numbers."""
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import SEGRT

CASES = [  # equation, shapes, rewritten
    ("blxd,blyd->blxy", [(2, 3, 5, 4), (2, 3, 6, 4)], True),  # MONAI SABlock: q k^T
    ("bhxy,bhyd->bhxd", [(2, 3, 5, 6), (2, 3, 6, 4)], True),  # MONAI SABlock: attention times v
    ("ij,jk->ik", [(5, 7), (7, 3)], True),
    ("bij,bjk->bik", [(4, 5, 7), (4, 7, 3)], True),
    ("ij,kj->ki", [(5, 7), (3, 7)], True),  # transposed output
    ("bnd,md->bnm", [(2, 5, 8), (6, 8)], True),  # a shared operand
    ("ij,kl->ijkl", [(2, 3), (4, 5)], True),  # outer product
    ("i,i->", [(7,), (7,)], True),  # dot product
    ("abcd,cdbe->aeb", [(2, 3, 4, 5), (4, 5, 3, 6)], True),  # several letters of each kind
    ("ii,ij->j", [(4, 4), (4, 3)], False),  # a diagonal
    ("ij,jk->i", [(5, 7), (7, 3)], False),  # a letter summed over one operand
    ("bij,jk->bik", [(1, 5, 7), (7, 3)], True),
    ("bij,bjk->bik", [(1, 5, 7), (4, 7, 3)], False),  # batch broadcast
]


def model(path, equation, shapes):
    ins = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, list(s)) for i, s in enumerate(shapes)]
    g = helper.make_graph([helper.make_node("Einsum", [i.name for i in ins], ["y"], equation=equation)], "g", ins,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def run(tmp_path, path, feeds):
    """segrt's output y of the model at path on feeds."""
    args = [SEGRT, "run", str(path), "--output", f"y={tmp_path / 'y.npy'}", "--quiet"]
    for k, v in feeds.items():
        np.save(tmp_path / f"{k}.npy", v)
        args += ["--input", f"{k}={tmp_path / f'{k}.npy'}"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return np.load(tmp_path / "y.npy")


@pytest.mark.parametrize("equation,shapes,rewritten", CASES, ids=[c[0] for c in CASES])
def test_einsum_as_matmul(tmp_path, equation, shapes, rewritten):
    path = tmp_path / "m.onnx"
    model(path, equation, shapes)
    rng = np.random.default_rng(4)
    feeds = {f"x{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    want = ort.InferenceSession(str(path)).run(None, feeds)[0]
    got = run(tmp_path, path, feeds)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    shape_args = []
    for k, v in feeds.items():
        shape_args += ["--shape", f"{k}={'x'.join(map(str, v.shape))}"]
    p = subprocess.run([SEGRT, "bench", str(path), *shape_args, "--iters", "1", "--warmup", "0", "--profile"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert ("/lowered_" in p.stdout) == rewritten, p.stdout


def test_einsum_inside_the_graph(tmp_path):
    """A rewritten Einsum whose result other nodes read (MONAI's SABlock:
    q k^T, then a scale and a Softmax): its new nodes, added after those
    readers, must survive the dead-node pass (they did not, and UNETR
    failed to build)."""
    path = tmp_path / "m.onnx"
    shapes = [(2, 3, 5, 4), (2, 3, 6, 4)]
    ins = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, list(s)) for i, s in enumerate(shapes)]
    nodes = [helper.make_node("Einsum", ["x0", "x1"], ["s"], equation="blxd,blyd->blxy"),
             helper.make_node("Relu", ["s"], ["r"]), helper.make_node("Softmax", ["r"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    rng = np.random.default_rng(5)
    feeds = {f"x{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    want = ort.InferenceSession(str(path)).run(None, feeds)[0]
    np.testing.assert_allclose(run(tmp_path, path, feeds), want, rtol=1e-5, atol=1e-6)
