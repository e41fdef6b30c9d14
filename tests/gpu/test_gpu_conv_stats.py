"""Normalisation statistics made by the convolution that produces the
tensor: where a layer on segrt's tensor-core kernel (k_conv_mma*.cu) feeds
only an InstanceNormalization or GroupNormalization, its epilogue writes
each tile's per-channel mean and M2 of its results ("segrt mma
conv+stats" in profiles) and the norm only combines them and applies
("segrt norm from stats"), instead of reading the tensor once more for
them.

Generated models, at sizes that leave partial tiles (8x16 in 2-D, 4x4x8
in 3-D), so the epilogue must leave positions outside the image out of
its counts:

  - 2-D 32 -> 32, InstanceNorm, LeakyRelu (BasicUNet's full-resolution
    layers);
  - 3-D 16 -> 16, InstanceNorm, single-slope PRelu (MONAI's UNet);
  - 2-D 16 -> 8, GroupNormalization of 2 groups (opset 21), Relu, the
    layer's outputs about 3 apart around means of about 12: the
    statistics are sums of deviations, not of squares.

Checks: test_gpu_small_conv.py's judge (fp32 against the CPU engine,
fp16 and bf16 PSNR against CUDA fp32); the profile at fp16 shows both
steps on the path; --disable-kernels conv-stats gives the norm its own pass
back, and the two paths agree at fp16 and bf16 (PSNR >= 60 dB): they
normalise the same stored values, with statistics of the results before
and after their rounding to the plan's dtype."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import segrt_capi as sc
from gpu_judge import bench_profile, run_engine, run_engine_without
from gpu_util import half, psnr
from test_gpu_small_conv import CHAIN_PSNR_DB, judge
from test_gpu_upsample_conv import UNetNet, steps_on

CONV = "segrt mma conv+stats"
NORM = "segrt norm from stats"
OFF = "conv-stats"


def first(net, c, nsp):
    return net.act(net.conv("x", c, [3] * nsp, pads=[1] * 2 * nsp), "LeakyRelu")


def model(net, outputs, opset):
    graph = helper.make_graph(
        net.nodes, "conv_stats", [helper.make_tensor_value_info("x", TensorProto.FLOAT, net.shape["x"])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, net.shape[o]) for o in outputs], net.inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="segrt-tests")
    m.ir_version = 10 if opset >= 21 else 8
    onnx.checker.check_model(m)
    return m


def in_2d(seed):
    net = UNetNet(seed, [2, 3, 20, 37])
    h = first(net, 32, 2)
    y = net.act(net.instance_norm(net.conv(h, 32, [3, 3], pads=[1] * 4)), "LeakyRelu")
    return model(net, [net.conv(y, 2, [1, 1])], 17), {"x": net.x}


def in_3d(seed):
    net = UNetNet(seed, [2, 1, 7, 9, 13])
    h = first(net, 16, 3)
    y = net.act(net.instance_norm(net.conv(h, 16, [3] * 3, pads=[1] * 6)), "PRelu")
    return model(net, [net.conv(y, 2, [1] * 3)], 17), {"x": net.x}


def gn_offset_2d(seed):
    net = UNetNet(seed, [3, 3, 19, 33])
    h = first(net, 16, 2)
    y = net.conv(h, 8, [3, 3], pads=[1] * 4)
    # The conv's initializers are its last two: deviations of about 3
    # around means of about 12 (float16 and bfloat16 still hold them to
    # the judge's bounds).
    b, w = net.inits.pop(), net.inits.pop()
    net.inits.append(numpy_helper.from_array(4.0 * numpy_helper.to_array(w), w.name))
    net.inits.append(numpy_helper.from_array(12.0 + numpy_helper.to_array(b), b.name))
    scale = net.const(1.0 + 0.2 * net.rng.standard_normal([8]))
    bias = net.const(0.1 * net.rng.standard_normal([8]))
    y = net.node("GroupNormalization", [y, scale, bias], net.shape[y], num_groups=2, epsilon=1e-5)
    y = net.act(y, "Relu")
    return model(net, [net.conv(y, 2, [1, 1])], 21), {"x": net.x}


CASES = [("2d-32to32-instance-norm", in_2d), ("3d-16to16-instance-norm-prelu", in_3d),
         ("2d-16to8-group-norm-offset", gn_offset_2d)]
IDS = [c[0] for c in CASES]


def case(label):
    i = IDS.index(label)
    return CASES[i][1](700 + i)


@pytest.mark.parametrize("label", IDS)
def test_conv_stats_accuracy(gpu, label):
    m, feeds = case(label)
    judge(label, m, feeds, CHAIN_PSNR_DB)


@pytest.mark.parametrize("label", IDS)
def test_conv_stats_path_taken_and_agrees(gpu, label, tmp_path):
    m, feeds = case(label)
    out = bench_profile(m, feeds, tmp_path, "fp16")
    assert len(steps_on(out, CONV)) == 1, f"expected the layer on `{CONV}`:\n{out}"
    # (Its normalisation may be left to the 1x1 layer that reads it:
    # test_gpu_mma_conv.py's prologue tests.)
    assert len(steps_on(out, NORM)) + len(steps_on(out, "segrt norm stats only")) == 1, \
        f"expected the norm on `{NORM}` or left to the next layer:\n{out}"
    off = bench_profile(m, feeds, tmp_path, "fp16", OFF)
    assert not steps_on(off, CONV) and not steps_on(off, NORM) and not steps_on(off, "segrt norm stats only"), \
        f"{OFF} should leave the norm its pass:\n{off}"
    model_ = sc.Model.from_bytes(m, name=f"{label}.onnx")
    for prec in half():
        mine = run_engine(model_, feeds, "cuda", prec)
        own = run_engine_without(model_, feeds, "cuda", prec, OFF)
        v = psnr(mine[0], own[0])
        print(f"\n{label} {prec}: statistics from the conv vs the norm's own pass: PSNR {v:.1f} dB")
        assert v >= 60.0 and np.isfinite(mine[0]).all()
