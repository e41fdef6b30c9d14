"""The test models on the GPU through the command line, at every
precision: `segrt run MODEL.onnx --device cuda --precision P --no-cache` on
each reference pair (NAME.in.npy -> NAME.out.npy, onnxruntime's float32 CPU
output; tests/models/make_models.py), compared with the reference in numpy:

  fp32   relative L2 <= 1e-5
  tf32   relative L2 <= 5e-3
  fp16   PSNR >= 50 dB and argmax over the class axis agreeing at >= 99.9 %
  bf16   PSNR >= 35 dB and argmax agreeing at >= 99 %
         (the bf16 bounds are ours: the issue gives none for bf16; its 8-bit
         mantissa loses about 3 bits, some 18 dB, to fp16's 11)

PSNR's peak is max |reference| (gpu_util.psnr). Every measured figure is
printed (pytest -s) and appended to $SEGRT_GPU_REPORT as a JSON line.

Each run builds with `--autotune 2`: timing two cuDNN configurations per
layer exercises the tuned path while keeping sixteen builds short (a
default build of basicunet2d times eight and takes 10-20 s)."""
import time

import numpy as np
import pytest

from conftest import run_segrt
from gpu_util import argmax_agreement, fmt_db, need_bf16, psnr, rel_l2, report, special_mismatch
from test_models import MODEL_NAMES

PRECISIONS = ["fp32", "tf32", "fp16", "bf16"]
# precision: (max relative L2, min PSNR dB, min argmax agreement); None: not bounded.
BOUNDS = {
    "fp32": (1e-5, None, None),
    "tf32": (5e-3, None, None),
    "fp16": (None, 50.0, 0.999),
    "bf16": (None, 35.0, 0.99),  # ours: the issue gives no bf16 bound
}
CLASS_AXIS = 1


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_model_at_precision(models, tmp_path, name, precision):
    need_bf16(precision)
    src, ref_path = models / f"{name}.in.npy", models / f"{name}.out.npy"
    if not (src.exists() and ref_path.exists()):
        pytest.fail(f"{name}: the reference pair {src.name}, {ref_path.name} is missing from {models}")
    out = tmp_path / "out.npy"
    t0 = time.perf_counter()
    p = run_segrt("run", models / f"{name}.onnx", "--input", src, "--output", out, "--device", "cuda",
                  "--precision", precision, "--autotune", "2", "--no-cache", "-q", timeout=600)
    wall = time.perf_counter() - t0
    assert p.returncode == 0, f"{name} at {precision}: exit {p.returncode}: {p.stderr.strip()}"
    got, ref = np.load(out), np.load(ref_path)
    assert got.shape == ref.shape and got.dtype == ref.dtype, \
        f"{name} at {precision}: {got.dtype} {got.shape}, expected {ref.dtype} {ref.shape}"
    special = special_mismatch(got, ref)
    figures = {
        "test": "gpu_model", "model": name, "precision": precision, "wall_s": round(wall, 3),
        "rel_l2": rel_l2(got, ref), "psnr_db": psnr(got, ref),
        "argmax_agreement": argmax_agreement(got, ref, CLASS_AXIS),
        "max_abs": float(np.max(np.abs(got.astype(np.float64) - ref))) if got.size else 0.0,
        "nan_inf_mismatch": special,
    }
    report(figures)
    print(f"\n{name} at {precision}: relative L2 {figures['rel_l2']:.3g}, PSNR {fmt_db(figures['psnr_db'])}, "
          f"argmax agreement {100 * figures['argmax_agreement']:.4f} %, max |diff| {figures['max_abs']:.3g}, "
          f"{wall:.1f} s (the whole process)")
    assert special is None, f"{name} at {precision}: {special}"
    max_l2, min_psnr, min_agree = BOUNDS[precision]
    problems = []
    if max_l2 is not None and not figures["rel_l2"] <= max_l2:
        problems.append(f"relative L2 {figures['rel_l2']:.3g} > {max_l2:g}")
    if min_psnr is not None and not figures["psnr_db"] >= min_psnr:
        problems.append(f"PSNR {fmt_db(figures['psnr_db'])} < {min_psnr:g} dB")
    if min_agree is not None and not figures["argmax_agreement"] >= min_agree:
        problems.append(f"argmax agreement {100 * figures['argmax_agreement']:.4f} % < {100 * min_agree:g} %")
    assert not problems, f"{name} at {precision} against PyTorch's output: " + "; ".join(problems)
