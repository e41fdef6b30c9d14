"""GELU written out (x * 0.5 * (1 + Erf(x / sqrt 2))) becomes one Gelu node
in every optimization (graph/pass_gelu.c): the generated gelu_chain cases
of test_diff_ops.py (which check the numbers against onnxruntime) are here
checked for what the optimized graph holds: a Gelu and no Erf where the
pattern is whole, the Erf kept where it is not (another constant, an
intermediate that is also an output)."""
import subprocess

import numpy as np
import onnx
import pytest

import opgen
from conftest import SEGRT

GENERATED = opgen.case_ids(["gelu_chain"])


def optimized_ops(path, feeds):
    args = [SEGRT, "info", str(path), "--optimized"]
    for k, v in feeds.items():
        args += ["--shape", f"{k}={'x'.join(map(str, v.shape))}"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("operators")][-1]
    return dict((w.split()[0], int(w.split()[1])) for w in line.split(":", 1)[1].split(","))


def whole(model):
    """Whether the case's pattern is whole: sqrt 2 (or its inverse), 1 and
    0.5 as written, and the sum read by the pattern only."""
    consts = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant":
            consts[n.output[0]] = onnx.numpy_helper.to_array(n.attribute[0].t)
    div = [n for n in model.graph.node if n.op_type == "Div"]
    if div and abs(float(consts[div[0].input[1]]) - np.sqrt(2.0)) > 1e-2:
        return False
    add = [n for n in model.graph.node if n.op_type == "Add"][0]
    return add.output[0] not in {o.name for o in model.graph.output}


@pytest.mark.parametrize("family,seed", GENERATED, ids=[f"{f}-{s}" for f, s in GENERATED])
def test_gelu_written_out(tmp_path, family, seed):
    case = opgen.make_case(family, seed)
    path = tmp_path / "m.onnx"
    onnx.save(case.model, path)
    ops = optimized_ops(path, case.feeds)
    if whole(case.model):
        assert ops.get("Gelu") == 1 and "Erf" not in ops, ops
    else:
        assert "Gelu" not in ops and ops.get("Erf") == 1, ops
    opgen.check_case(case, tmp_path, f"{family}-{seed}", f"SEGRT_DIFF_SEED={seed} pytest test_fuse_gelu.py")
