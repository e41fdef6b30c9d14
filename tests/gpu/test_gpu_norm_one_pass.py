"""InstanceNormalization over a channels-last tensor as one kernel
(k_norm.cu's gnf_cl): a cooperative grid that sums a block's positions,
keeps them in shared memory, waits for the grid and normalises them, in
place of the three kernels (statistics, combination, application).

Each case is Conv -> InstanceNormalization -> LeakyRelu -> Conv (the
second convolution has more than 32 outputs or a residual-free cuDNN
shape, so the norm runs as a pass of its own, as BasicUNet's below 256^2
do) at N, C and spatial sizes that give one block per sample (N close to
the SM count), many (batch 6: 22 on an H100), and more positions a block than its
shared memory keeps (read twice). (Batch 1 keeps the three kernels:
at more than 32 blocks a sample the one pass is slower.) Checked:

  - against the CPU engine at fp32 and against CUDA fp32 at fp16 and bf16
    (test_gpu_small_conv.judge, with test_gpu_graphs.py's bounds);
  - against the three kernels (--disable-kernels norm-one-pass) at every
    precision: relative L2 <= 1e-5 at fp32, >= 60 dB at fp16 and bf16
    (the statistics are summed in another order, nothing else differs);
  - that the one pass ran: for every case, some output differs in its
    last bits from the three kernels' (a case where both paths gave the
    same bits would not show the path was taken)."""

import numpy as np
import pytest

import segrt_capi as sc
from gpu_judge import run_engine, run_engine_without
from gpu_util import half, fmt_db, psnr
from test_gpu_small_conv import Net, judge

# A chain through a norm: test_gpu_graphs.py's bounds (bf16 rounds every
# activation to 8 bits).
CHAIN_PSNR_DB = {"fp16": 45.0, "bf16": 35.0}
AB_PSNR_DB = 60.0
AB_FP32_L2 = 1e-5

# (id, N, C in, C mid, spatial)
CASES = [
    ("c64-n5-cache-overflow", 5, 3, 64, [256, 256]),
    ("c64-n16-3d", 16, 4, 64, [10, 12, 9]),
    ("c128-n5", 5, 8, 128, [40, 36]),
    ("c256-n16", 16, 16, 256, [12, 12]),
    ("c32-n6", 6, 8, 32, [50, 50]),
]


def case_model(spec, seed):
    name, n, c, k, sp = spec
    net = Net(seed, [n, c] + sp)
    pads = [1] * (2 * len(sp))
    h = net.conv("x", k, [3] * len(sp), pads=pads)
    scale = net.const(1.0 + 0.2 * net.rng.standard_normal(k))
    bias = net.const(0.1 * net.rng.standard_normal(k))
    h = net.node("InstanceNormalization", [h, scale, bias], net.shape[h], epsilon=1e-5)
    h = net.act(h, "LeakyRelu")
    return net.model([net.conv(h, k, [3] * len(sp), pads=pads)]), {"x": net.x}


def rel_l2(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


@pytest.mark.parametrize("spec", CASES, ids=[c[0] for c in CASES])
def test_one_pass_norm(gpu, spec):
    m, feeds = case_model(spec, seed=CASES.index(spec) + 31)
    judge(spec[0], m, feeds, CHAIN_PSNR_DB)


@pytest.mark.parametrize("spec", CASES, ids=[c[0] for c in CASES])
def test_one_pass_agrees_with_three_kernels(gpu, spec):
    m, feeds = case_model(spec, seed=CASES.index(spec) + 31)
    model = sc.Model.from_bytes(m, name=f"{spec[0]}.onnx")
    differs = False
    for prec in ("fp32", *half()):
        one = run_engine(model, feeds, "cuda", prec)
        three = run_engine_without(model, feeds, "cuda", prec, "norm-one-pass")
        for a, b in zip(one, three):
            differs = differs or not np.array_equal(a, b)
            if prec == "fp32":
                e = rel_l2(a, b)
                print(f"\n{spec[0]}: one pass vs three kernels at fp32: rel L2 {e:.3g}")
                assert e <= AB_FP32_L2, f"{spec[0]} fp32: rel L2 {e:.3g} (bound {AB_FP32_L2:g})"
            else:
                v = psnr(a, b)
                print(f"\n{spec[0]}: one pass vs three kernels at {prec}: PSNR {fmt_db(v)}")
                assert v >= AB_PSNR_DB, f"{spec[0]} {prec}: PSNR {fmt_db(v)} (bound {AB_PSNR_DB} dB)"
    assert differs, f"{spec[0]}: the same bits with --disable-kernels norm-one-pass: was the one pass taken?"
