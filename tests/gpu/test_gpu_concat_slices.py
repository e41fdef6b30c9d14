"""Concatenations of cuDNN convolutions' results, written in place: where
cuDNN takes a convolution's output, input or residual with the strides of
its slice of the concatenated buffer (cudnn_conv.c, conv_restride), the
convolution writes or reads the slice itself and no "segrt concat" step
runs. MONAI's UNet (unet3d_spleen) concatenates two such results at every
level of its decoder.

A finalized plan is not enough: on an H200 with cuDNN 9.19, 2-D and 1-D
fused convolutions whose plans finalized over a slice wrote it as if it
were dense (relative L2 0.5-0.9 at fp32 here). So the build runs each
restrided plan against the dense one on random data and keeps the slice
only where the results are bit for bit the same (cudnn_verify.c); the
fp32 comparisons below are what caught it.

Generated models, as that UNet builds a level, at small sizes:

    h     = PRelu(Conv3(x))
    skip  = PRelu(Conv3(h)) + Conv1(x)        cuDNN: conv -> bias -> PReLU -> residual add
    down  = PRelu(Conv3 stride 2(skip))       reads skip (built before the Concat)
    deep  = PRelu(Conv3(down)) + down
    up    = PRelu(ConvTranspose3 stride 2(deep))
    upres = PRelu(Conv3(up)) + up
    y     = Conv3(Concat(skip, upres))

in 1-D, 2-D and 3-D; with the skip's channels a multiple of 8 (the
second slice starts 16-byte aligned) and one with 12 skip channels (at
float16 the second slice starts 24 bytes in: it cannot be described to
cuDNN's 16-byte aligned kernels and must be copied).

Compared as test_gpu_small_conv.py does: fp32 relative L2 to the CPU
engine's <= 1e-5; fp16 and bf16 PSNR against the CUDA fp32 output
(>= 45 dB fp16, >= 35 dB bf16). The profile shows no "segrt concat" step
for the aligned cases at fp16, one with --disable-kernels concat-slices, and
both builds agree at fp32."""
import numpy as np
import pytest

import segrt_capi as sc
from gpu_judge import bench_profile, run_engine, run_engine_without
from gpu_util import rel_l2
from test_gpu_small_conv import CHAIN_PSNR_DB, FP32_L2, judge
from test_gpu_upsample_conv import UNetNet, steps_on

CONCAT = "segrt concat"


def unet_level(seed, nsp, n, spatial, skip_ch, deep_ch, up_ch):
    net = UNetNet(seed, [n, 1] + spatial)
    k3, p1 = [3] * nsp, [1] * 2 * nsp
    h = net.act(net.conv("x", skip_ch, k3, pads=p1), "PRelu")
    skip = net.node("Add", [net.act(net.conv(h, skip_ch, k3, pads=p1), "PRelu"), net.conv("x", skip_ch, [1] * nsp)],
                    net.shape[h])
    down = net.act(net.conv(skip, deep_ch, k3, strides=[2] * nsp, pads=p1), "PRelu")
    deep = net.node("Add", [net.act(net.conv(down, deep_ch, k3, pads=p1), "PRelu"), down], net.shape[down])
    up = net.act(net.conv(deep, up_ch, k3, strides=[2] * nsp, pads=p1, transposed=True, opad=[1] * nsp), "PRelu")
    upres = net.node("Add", [net.act(net.conv(up, up_ch, k3, pads=p1), "PRelu"), up], net.shape[up])
    y = net.conv(net.concat(skip, upres), 8, k3, pads=p1)
    return net.model([y]), {"x": net.x}


# (id, make, whether both Concat inputs can be slices at fp16)
CASES = [
    ("3d-16+16", lambda seed: unet_level(seed, 3, 2, [8, 10, 12], 16, 32, 16), True),
    ("2d-16+24", lambda seed: unet_level(seed, 2, 2, [18, 22], 16, 32, 24), True),
    ("1d-32+16", lambda seed: unet_level(seed, 1, 3, [40], 32, 16, 16), True),
    ("2d-12+16-misaligned", lambda seed: unet_level(seed, 2, 2, [14, 16], 12, 16, 16), False),
]
IDS = [c[0] for c in CASES]


def case(label):
    i = IDS.index(label)
    return CASES[i][1](500 + i)


@pytest.mark.parametrize("label", IDS)
def test_concat_of_convolutions(gpu, label):
    m, feeds = case(label)
    judge(label, m, feeds, CHAIN_PSNR_DB)


@pytest.mark.parametrize("label", [c[0] for c in CASES if c[2]])
def test_convolutions_write_their_slices(gpu, label, tmp_path):
    m, feeds = case(label)
    out = bench_profile(m, feeds, tmp_path, "fp16")
    assert not steps_on(out, CONCAT), f"both Concat inputs should be written in place:\n{out}"
    off = bench_profile(m, feeds, tmp_path, "fp16", "concat-slices")
    assert len(steps_on(off, CONCAT)) == 1, f"--disable-kernels concat-slices should copy:\n{off}"

    model = sc.Model.from_bytes(m, name=f"{label}.onnx")
    placed = run_engine(model, feeds, "cuda", "fp32")
    copied = run_engine_without(model, feeds, "cuda", "fp32", "concat-slices")
    e = rel_l2(placed[0], copied[0])
    print(f"\n{label}: slices vs copy at fp32: rel L2 {e:.3g}")
    assert e <= FP32_L2 and np.isfinite(placed[0]).all()


def test_misaligned_slice_is_copied(gpu, tmp_path):
    m, feeds = case("2d-12+16-misaligned")
    out = bench_profile(m, feeds, tmp_path, "fp16")
    assert len(steps_on(out, CONCAT)) == 1, f"a slice 24 bytes in cannot go to cuDNN:\n{out}"
