"""Graphs of hundreds of thousands of nodes go through import, inference,
the passes, the CPU plan and a run (issue 36: building a plan is linear in
the node count). The models are made here (chain_model.py) and checked
against numpy. The timeout only guards against a hang: before the fix, a
200,000-node chain took minutes to plan, an out-of-order or no-op-laden
one as long to import or optimize.

Runs use one thread: every step of a chain this size is a tiny tensor,
and waking an OpenMP team per step costs far more than the step (and far
more again on a machine whose cores are busy), which is not what these
tests are about."""
import numpy as np
import onnx
import pytest

from chain_model import chain_reference, make_chain_variant, save_chain
from conftest import SANITIZED, run_segrt

SHAPE = (1, 4, 8, 8)
HANG_GUARD_S = 120


def run_chain(tmp_path, model, n):
    x = np.random.default_rng(n).standard_normal(SHAPE).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    run_segrt("run", model, "--input", tmp_path / "x.npy", "--output", f"y={tmp_path / 'y.npy'}", "--quiet",
              "--threads", 1, check=0, timeout=HANG_GUARD_S)
    y = np.load(tmp_path / "y.npy")
    np.testing.assert_allclose(y, chain_reference(x, n), rtol=1e-4, atol=1e-5)


def test_chain_200k_nodes(tmp_path):
    n = 50_000 if SANITIZED else 200_000
    model = tmp_path / "chain.onnx"
    save_chain(model, n, SHAPE)
    run_chain(tmp_path, model, n)


@pytest.mark.parametrize("variant", ["reversed", "identity"])
def test_chain_variants_50k_nodes(tmp_path, variant):
    # reversed: nodes listed backwards (topological sorting);
    # identity: a no-op after every node (simplification removes them).
    n = 10_000 if SANITIZED else 50_000
    model = tmp_path / f"{variant}.onnx"
    onnx.save(make_chain_variant(n, variant, SHAPE), str(model))
    run_chain(tmp_path, model, n)
    info = run_segrt("info", model, "--optimized", "--shape", "x=" + "x".join(map(str, SHAPE)), check=0,
                     timeout=HANG_GUARD_S).stdout
    # After optimization only the chain's own n nodes are left.
    assert f"({n} nodes)" in info.split("after optimization")[-1], info
