"""Differential tests of small generated networks: chains and DAGs of 3 to
8 blocks (Conv, normalizations, activations, pooling, ConvTranspose,
Resize, Concat and Add skips, Pad/Slice, Split/Concat, transposes and
reshapes around elementwise ops, squeeze-and-excitation) on 1-, 2- and 3-D
inputs, with shapes tracked so that each graph is valid. segrt's passes
(folding, BatchNorm folding, no-op removal) run on every one; an
intermediate output, when there is one, must survive them. The "fusion"
cases aim at the CPU plan: a convolution, then activations, PRelu and
residual Adds that it fuses, on wide channels, with intermediate outputs
and second readers that must stop the fusion, sometimes NaN inputs. The
"shape_arith" cases chain the shape arithmetic exporters leave around
layers, on inputs with symbolic dims.

Rerun one case: SEGRT_DIFF_SEED=<seed> pytest test_diff_graphs.py."""
import pytest

import opgen

CASES = opgen.case_ids(["graph", "fusion", "shape_arith"])


@pytest.mark.parametrize("family,seed", CASES, ids=[f"{f}-{s}" for f, s in CASES])
def test_graph(tmp_path, family, seed):
    case = opgen.make_case(family, seed)
    opgen.check_case(case, tmp_path, f"{family}-{seed}",
                     f"SEGRT_DIFF_SEED={seed} pytest test_diff_graphs.py")
