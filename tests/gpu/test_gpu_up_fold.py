"""The decoder's upsampling computed in the next layer's halo: where a
UNet level ends in Concat(skip, ConvTranspose 2x2 of the deeper level)
and a 64 -> 32 layer of segrt's tensor-core kernel reads it (normalising
the skip as it loads it, writing its own norm's statistics), that layer
computes the upsampled half of each tile's halo from the upsampling's
input ("segrt mma conv+up+stats" in profiles, k_conv_mma.h's p->up) and
the upsampling's own step, which wrote the largest tensor of the
decoder, does not run.

Generated models, BasicUNet's last level at small sizes: the image (3
channels) -> Conv -> InstanceNorm -> LeakyRelu (the skip), MaxPool ->
Conv -> InstanceNorm -> LeakyRelu (the deeper level, normalised by the
upsampling as it reads it) -> ConvTranspose 32 -> 32, Concat with the
skip, Conv 64 -> 32 -> InstanceNorm -> LeakyRelu -> Conv 1x1 to 2
outputs. Sizes with whole tiles (8 x 16) and with partial ones, batch 2
and 3, with and without the upsampling's bias, and one of 4 x 256^2,
where each warpgroup walks several tiles of several samples; also a
deeper level of 64 channels (BasicUNet's second last: its layer runs on
cuDNN and its norm has its own pass, so the folded upsampling, 64 -> 32,
reads a normalised tensor).

Checks: test_gpu_small_conv.py's judge (fp32 against the CPU engine, fp16
and bf16 PSNR against CUDA fp32); the profile at fp16 and bf16 shows the
folded layer and no "segrt upsample conv" step; --disable-kernels up-fold
gives the upsampling its step back; and the two paths agree (PSNR >= 60
dB at fp16, 45 at bf16): the same normalised inputs and products, summed
in another order before the upsampled values are rounded."""
import pytest

from gpu_judge import bench_profile, paths_agree
from gpu_util import half
from test_gpu_conv_stats import model
from test_gpu_small_conv import CHAIN_PSNR_DB, judge
from test_gpu_upsample_conv import UNetNet, steps_on

FOLDED = "segrt mma conv+up+stats"
UP = "segrt upsample conv"
OFF = "up-fold"
AGREE_DB = {"fp16": 60.0, "bf16": 45.0}


def decoder(seed, shape, up_bias=True, deep_c=32):
    net = UNetNet(seed, shape)
    k3, p1 = [3, 3], [1] * 4
    skip = net.act(net.instance_norm(net.conv("x", 32, k3, pads=p1)), "LeakyRelu")
    deep = net.act(net.instance_norm(net.conv(net.max_pool(skip), deep_c, k3, pads=p1)), "LeakyRelu")
    up = net.conv(deep, 32, [2, 2], strides=[2, 2], transposed=True, bias=up_bias)
    y = net.act(net.instance_norm(net.conv(net.concat(skip, up), 32, k3, pads=p1)), "LeakyRelu")
    return model(net, [net.conv(y, 2, [1, 1])], 17), {"x": net.x}


CASES = [("whole-tiles-40x48", lambda seed: decoder(seed, [2, 3, 40, 48])),
         ("partial-tiles-36x52", lambda seed: decoder(seed, [2, 3, 36, 52])),
         ("no-bias-20x34", lambda seed: decoder(seed, [3, 3, 20, 34], up_bias=False)),
         ("up-64-channels-24x40", lambda seed: decoder(seed, [2, 3, 24, 40], deep_c=64))]
BIG = ("many-tiles-4x256x256", lambda seed: decoder(seed, [4, 3, 256, 256]))
IDS = [c[0] for c in CASES]
ALL = CASES + [BIG]


def case(label):
    i = [c[0] for c in ALL].index(label)
    return ALL[i][1](1200 + i)


@pytest.mark.parametrize("label", IDS)
def test_up_fold_accuracy(gpu, label):
    m, feeds = case(label)
    judge(label, m, feeds, CHAIN_PSNR_DB)


@pytest.mark.parametrize("label", [c[0] for c in ALL])
def test_up_fold_path_taken_and_agrees(gpu, label, tmp_path):
    m, feeds = case(label)
    for prec in half():
        out = bench_profile(m, feeds, tmp_path, prec)
        assert len(steps_on(out, FOLDED)) == 1 and not steps_on(out, UP), \
            f"expected the upsampling folded into `{FOLDED}` at {prec}:\n{out}"
    off = bench_profile(m, feeds, tmp_path, "fp16", OFF)
    assert not steps_on(off, FOLDED) and len(steps_on(off, UP)) == 1, \
        f"{OFF} should give the upsampling its step back:\n{off}"
    paths_agree(m, feeds, label, OFF, "folded vs the upsampling's own step", AGREE_DB)
