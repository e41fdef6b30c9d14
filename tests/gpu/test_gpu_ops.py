"""Single operators on the GPU: every generated case of tests/python's
differential families (opgen.py, the same list as test_diff_ops.py) runs on
the CPU engine and on the CUDA engine at fp32, tf32, fp16 and bf16, all in
this process through segrt_capi (CUDA initialisation costs about a second
per process, so the CLI is never spawned per case).

What is compared with what:
  - integer and bool outputs: exactly equal to the CPU engine's, at every
    precision;
  - float outputs, fp32: relative L2 to the CPU engine's <= 1e-5 (float32
    outputs; float16/float64 outputs at opgen's bound for their dtype; a
    case that states its own, looser bound for its conditioning keeps it);
  - tf32: relative L2 to the CPU engine's <= 5e-3;
  - fp16 and bf16: PSNR against the CUDA fp32 output >= 45 dB, peak
    max |ref| (gpu_util.psnr);
  - NaN and infinities: at the same positions, at every precision.
A reduced precision changes float32 internals only (inputs and outputs keep
their dtypes), so a case none of whose inputs is float32 is compared at the
fp32 bound at every precision. Build errors are failures, UNSUPPORTED ones
included: every operator the CPU engine runs must run on the GPU.

Cases: at most 12 per family (SEGRT_GPU_SCALE multiplies), a deterministic
spread over opgen.case_ids; SEGRT_DIFF_SEED=<seed> reruns chosen ones, as in
tests/python. A summary of the worst margins per precision is printed at the
end (pytest -s), and every case's figures go to $SEGRT_GPU_REPORT."""
import re

import numpy as np
import pytest

import opgen
import segrt_capi as sc
from gpu_judge import Tally, judge, pick_cases
from test_diff_ops import FAMILIES

PRECISIONS = ["fp32", "tf32", "fp16", "bf16"]
HALF_PSNR_DB = {"fp16": 45.0, "bf16": 45.0}
PER_FAMILY = 12

CASES = pick_cases(FAMILIES, PER_FAMILY)
TALLY = Tally()


@pytest.fixture(scope="module", autouse=True)
def summary():
    yield
    TALLY.print_summary("GPU op cases", PRECISIONS)


# Families a CUDA build must refuse by name, or (where the build folds the
# operator away, its inputs constant) pass the comparisons as any case
# does: NonZero's shapes depend on its input's values, which no CUDA plan
# compiles (--allow-cpu-fallback interprets). (QuantizeLinear,
# DequantizeLinear, RMSNormalization and Attention run lowered,
# graph/pass_lower.c; TopK and GridSample have kernels, k_index.cu.)
CUDA_PENDING = {
    "nonzero": "depend on input values",
}


def refused_on_cuda(case, label, head, names):
    """True when the CUDA build refuses the case naming what it lacks;
    False when it runs it (the caller judges the outputs)."""
    feeds = {k: np.asarray(v) for k, v in case.feeds.items()}
    model = sc.Model.from_bytes(case.model, name=f"{label}.onnx")
    try:
        with sc.BuildOptions(shapes={k: v.shape for k, v in feeds.items()}, device="cuda") as o, \
                sc.Engine.build(model, o) as e, e.context() as ctx:
            ctx.run(feeds)
    except sc.SegrtError as err:
        assert err.unsupported and re.search(names, err.message), f"{head}\n{err}"
        return True
    return False


@pytest.mark.parametrize("family,seed", CASES, ids=[f"{f}-{s}" for f, s in CASES])
def test_gpu_op(family, seed):
    label = f"{family}-{seed}"
    case = opgen.make_case(family, seed)
    if family in CUDA_PENDING and refused_on_cuda(case, label, f"{label}: {family} is CUDA_PENDING",
                                                  CUDA_PENDING[family]):
        return
    head = (f"{label} (opset {case.model.opset_import[0].version}); rerun with "
            f"SEGRT_DIFF_SEED={seed} pytest tests/gpu/test_gpu_ops.py\n{opgen.describe(case.model, case.feeds)}")
    judge(case, label, head, PRECISIONS, HALF_PSNR_DB, TALLY, "gpu_op", "test_diff_ops.py")
