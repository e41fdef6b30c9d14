"""The 2x2 max pool done by the convolution that produces the tensor:
where a 2-D layer on segrt's tensor-core kernel writes its norm's
statistics (test_gpu_conv_stats.py) and the norm's result goes to a
MaxPool of kernel 2, stride 2 (a UNet's way down), the layer's epilogue
also pools its results ("segrt mma conv+stats+pool" in profiles), each
channel's max, or its min where the norm's constant scale is negative.
The pool's readers then normalise that quarter-size tensor as they load
it, and the pool's own pass over the full-size tensor does not run.

Generated models at sizes that leave partial tiles (8x16), odd and even:

  - a UNet level, BasicUNet's shape: Conv -> InstanceNorm -> LeakyRelu
    (the skip; its scale has negative entries), MaxPool -> Conv ->
    InstanceNorm -> LeakyRelu, and the skip also read by a 3x3 layer; at
    21 x 38 (an odd height: the last row has no window) and 16 x 32;
  - the same with Relu after the norm and a GroupNormalization of 4
    groups (per-group scales, two of them negative);
  - BasicUNet's top level, whose pooled layer is the first (the image
    read as it lies) and whose skip also goes to a Concat with the
    upsampling.

Not pooled there: a pool read by a layer on cuDNN (32 -> 64 channels),
which could not normalise it as it loads it.

Checks: test_gpu_small_conv.py's judge (fp32 against the CPU engine, fp16
and bf16 PSNR against CUDA fp32); the profile at fp16 shows the pooling
layer and no "segrt max pool" step; --disable-kernels conv-pool gives the pool
its pass back, and the two paths agree (PSNR >= 60 dB at fp16, 45 at
bf16): the same pooled values, normalised in 16-bit arithmetic by the
reader's prologue instead of in float32 by the pool, which at bf16's
8-bit mantissa is an ulp of the normalised value here and there (both
paths measured 50-58 dB from CUDA fp32 at bf16, H100)."""
import numpy as np
import pytest

from gpu_judge import bench_profile, paths_agree
from test_gpu_conv_stats import model
from test_gpu_small_conv import CHAIN_PSNR_DB, judge
from test_gpu_upsample_conv import UNetNet, steps_on

CONV = "segrt mma conv+stats+pool"
POOL = "segrt max pool"
OFF = "conv-pool"
AGREE_DB = {"fp16": 60.0, "bf16": 45.0}


def signed(net, n):
    """n scales of both signs, magnitudes 0.5 to 1.5."""
    return np.where(np.arange(n) % 3 == 1, -1.0, 1.0) * (0.5 + net.rng.random(n))


def signed_norm(net, x, groups=None):
    c = net.shape[x][1]
    bias = net.const(0.1 * net.rng.standard_normal([c]))
    if groups is None:
        return net.node("InstanceNormalization", [x, net.const(signed(net, c)), bias], net.shape[x], epsilon=1e-5)
    return net.node("GroupNormalization", [x, net.const(signed(net, groups)), net.const(0.1 * net.rng.standard_normal([groups]))],
                    net.shape[x], num_groups=groups, epsilon=1e-5)


def head(net, x, k_out):
    """x through a 3x3 layer of this kernel (it normalises x as it loads
    it) and a 1x1 one to k_out graph outputs."""
    return net.conv(net.act(net.conv(x, 32, [3, 3], pads=[1] * 4), "LeakyRelu"), k_out, [1, 1])


def level(seed, shape, act="LeakyRelu", groups=None, down=32):
    net = UNetNet(seed, shape)
    k3, p1 = [3, 3], [1] * 4
    h = net.act(net.conv("x", 32, k3, pads=p1), "LeakyRelu")
    skip = net.act(signed_norm(net, net.conv(h, 32, k3, pads=p1), groups), act)
    deep = net.act(net.instance_norm(net.conv(net.max_pool(skip), down, k3, pads=p1)), "LeakyRelu")
    return model(net, [head(net, skip, 8), net.conv(deep, 2, [1, 1])], 21 if groups else 17), {"x": net.x}


def stage(seed):
    """BasicUNet's top level, small: the first layer (the image read as it
    lies) pooled, its skip also going to a Concat with the upsampling."""
    net = UNetNet(seed, [2, 3, 16, 20])
    k3, p1 = [3, 3], [1] * 4
    skip = net.act(signed_norm(net, net.conv("x", 32, k3, pads=p1)), "LeakyRelu")
    deep = net.act(net.instance_norm(net.conv(net.max_pool(skip), 32, k3, pads=p1)), "LeakyRelu")
    up = net.conv(deep, 32, [2, 2], strides=[2, 2], transposed=True)
    return model(net, [head(net, net.concat(skip, up), 8)], 17), {"x": net.x}


CASES = [("level-odd-21x38", lambda seed: level(seed, [2, 3, 21, 38])),
         ("level-16x32", lambda seed: level(seed, [1, 3, 16, 32])),
         ("level-relu-group-norm", lambda seed: level(seed, [2, 3, 18, 22], act="Relu", groups=4)),
         ("stage-first-layer-concat", stage)]
IDS = [c[0] for c in CASES]


def case(label):
    i = IDS.index(label)
    return CASES[i][1](900 + i)


@pytest.mark.parametrize("label", IDS)
def test_conv_pool_accuracy(gpu, label):
    m, feeds = case(label)
    judge(label, m, feeds, CHAIN_PSNR_DB)


@pytest.mark.parametrize("label", IDS)
def test_conv_pool_path_taken_and_agrees(gpu, label, tmp_path):
    m, feeds = case(label)
    out = bench_profile(m, feeds, tmp_path, "fp16")
    assert len(steps_on(out, CONV)) == 1, f"expected the pooling layer on `{CONV}`:\n{out}"
    assert not steps_on(out, POOL), f"the pool should have no pass of its own:\n{out}"
    off = bench_profile(m, feeds, tmp_path, "fp16", OFF)
    assert not steps_on(off, CONV) and len(steps_on(off, POOL)) == 1, \
        f"{OFF} should leave the pool its pass:\n{off}"
    paths_agree(m, feeds, label, OFF, "pooled by the conv vs the pool's own pass", AGREE_DB)


def test_conv_pool_not_for_a_cudnn_reader(gpu, tmp_path):
    """The pool's reader has 64 output channels (cuDNN): the pool keeps its
    pass (normalising as it pools) and the layer does not pool."""
    m, feeds = level(950, [1, 3, 16, 32], down=64)
    out = bench_profile(m, feeds, tmp_path, "fp16")
    assert not steps_on(out, CONV) and len(steps_on(out, POOL)) == 1, out
    judge("level-cudnn-reader", m, feeds, CHAIN_PSNR_DB)
