"""Differential tests of single operators: generated one-node graphs with
random shapes, attributes, broadcasting and dtypes, run in segrt (with the
inputs fed, and folded in as constants so that the reference backend
computes them) and in onnxruntime (or, where it has no kernel or departs
from the ONNX spec, the oracle the case names), compared by dtype:
integers and bools exactly, floats by relative L2 and elementwise, NaN and
infinities by position. Generators and oracles are in opgen.py.

Rerun one case: SEGRT_DIFF_SEED=<seed> pytest test_diff_ops.py (the seed
is in the test id and in every failure message). More cases:
SEGRT_DIFF_SCALE=4."""
import pytest

import opgen

FAMILIES = [
    "unary", "binary", "variadic", "prelu", "where", "nan_inf",
    "conv", "conv_transpose", "pool", "global_pool",
    "batch_norm", "instance_norm", "group_norm", "layer_norm", "rms_norm", "softmax",
    "concat", "split", "slice", "pad", "reshape", "transpose", "flatten", "squeeze",
    "unsqueeze", "expand", "tile", "gather", "depth_space", "scatter_nd",
    "cast", "cast_like", "shape_ops", "reduce", "reduce_empty", "argmax", "matmul", "gemm", "einsum", "resize",
    "gather_elements", "scatter_elements", "gather_nd", "cumsum", "trilu", "onehot", "topk", "nonzero", "quant", "grid_sample",
    "attention", "attention_chain", "gelu_chain",
]
CASES = opgen.case_ids(FAMILIES)


@pytest.mark.parametrize("family,seed", CASES, ids=[f"{f}-{s}" for f, s in CASES])
def test_op(tmp_path, family, seed):
    case = opgen.make_case(family, seed)
    opgen.check_case(case, tmp_path, f"{family}-{seed}",
                     f"SEGRT_DIFF_SEED={seed} pytest test_diff_ops.py")
