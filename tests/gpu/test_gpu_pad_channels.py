"""Convolutions over 2 to 7 input channels on the GPU at fp16 and bf16:
the plan copies the input into 8 channels (the rest zero; "segrt pad
channels" in profiles) and pads the weights with zeros, so that cuDNN's
tensor-core kernels take the layer (src/backend/cuda/cudnn_conv.c); a
3x3(x3) stride-1 layer of 8, 16 or 32 outputs (16 in 3-D: rgb2d-3to32,
c7-3d-to16, c3-2d-residual) goes to segrt's tensor-core kernel from a
copy padded to 16 (cuda_conv_mma.c). On Hopper (compute capability 9.0)
a 2-D one of up to 8 input channels whose results it stages (no residual)
reads the input where it lies instead, converting each value as its halo
lands: no padded copy (chain_model: where the layer's result is the
network's float32 output, it reads the padded copy).

(With 4 input channels or fewer and at most 16 outputs, a layer the
tensor-core kernel does not take goes to the direct kernel instead,
test_gpu_small_conv.py; the cases here have more of either.)

Generated single layers and short chains (test_gpu_small_conv.py's Net),
each run on the CPU engine and on the CUDA engine at fp32 (no padding
there), fp16 and bf16:

  - 1-D, 2-D and 3-D; 2, 3, 5 and 7 input channels; strides 1 and 2,
    dilation, asymmetric and SAME_UPPER pads; with and without bias;
    followed by an activation and a residual Add (the fused epilogues);
  - inputs read from the graph input (float32, plain) and from an Add's
    output (the plan's dtype and layout), and a layer whose input another
    layer reads as well.

Bounds are test_gpu_small_conv.py's: fp32 relative L2 to the CPU engine
<= 1e-5; fp16 and bf16 PSNR against CUDA fp32 >= 45 dB. Each fp16 case is
also built with --disable-kernels pad-channels (cuDNN on the unpadded layer):
the sums are the same, so the two agree to fp16 rounding (>= 60 dB), and
so does each fp16 and bf16 case with --disable-kernels mma-small-input (the
padded copy in place of reading the input as it is). Profiles show which
step is taken. wide_model gives the kernel that reads the input as it is
ten tiles a warpgroup, from the float32 input and from a 16-bit tensor,
with and without per-tile statistics, against the padded copy too."""

import numpy as np
import pytest

import segrt_capi as sc
from gpu_judge import bench_profile, run_engine, run_engine_without
from gpu_util import fmt_db, need_bf16, psnr
from test_gpu_small_conv import LAYER_PSNR_DB, Net, judge

AB_PSNR_DB = 60.0

# (id, N, C, spatial, K, conv keywords, activation, input, residual)
CASES = [
    ("rgb2d-3to32", 2, 3, [33, 40], 32, dict(kernel=[3, 3], pads=[1, 1, 1, 1]), "LeakyRelu", "x", False),
    ("rgb2d-3to24-s2-asym", 1, 3, [31, 26], 24, dict(kernel=[3, 3], strides=[2, 2], pads=[1, 0, 0, 1]), "Relu",
     "add", False),
    ("c2-2d-same-nobias", 3, 2, [17, 21], 24, dict(kernel=[5, 5], strides=[2, 1], auto_pad="SAME_UPPER",
                                                   bias=False), None, "x", False),
    ("c7-3d-to16", 1, 7, [9, 10, 11], 16, dict(kernel=[3, 3, 3], pads=[1] * 6), "PRelu", "add", False),
    ("c5-1d-dil2", 2, 5, [50], 24, dict(kernel=[3], dil=[2], pads=[2, 2]), None, "x", False),
    ("c3-2d-residual", 2, 3, [20, 24], 8, dict(kernel=[3, 3], pads=[1, 1, 1, 1]), "Relu", "x", True),
]


def case_model(spec, seed):
    name, n, c, sp, k, kw, act, source, residual = spec
    net = Net(seed, [n, c] + sp)
    x = "x"
    if source == "add":
        x = net.node("Add", [x, net.const([0.5])], net.shape[x])
    # The residual first (a 1x1 layer on the same input: with 8 outputs,
    # the direct kernel's, see above), so that the Add can join the main
    # layer's epilogue.
    z = net.conv("x", k, [1] * len(sp)) if residual else None
    y = net.act(net.conv(x, k, **kw), act)
    if residual:
        y = net.node("Add", [y, z], net.shape[y])
    return net.model([y]), {"x": net.x}


@pytest.mark.parametrize("spec", CASES, ids=[c[0] for c in CASES])
def test_padded_layer(gpu, spec):
    m, feeds = case_model(spec, seed=CASES.index(spec) + 11)
    judge(spec[0], m, feeds, LAYER_PSNR_DB)


@pytest.mark.parametrize("spec", CASES, ids=[c[0] for c in CASES])
def test_padding_agrees_with_unpadded(gpu, spec):
    m, feeds = case_model(spec, seed=CASES.index(spec) + 11)
    agrees(m, feeds, spec[0], "fp16", "pad-channels", "padded vs unpadded")


def agrees(m, feeds, label, precision, disabled, what):
    """Model m's outputs against the plan built with the kernels named in
    `disabled` turned off: PSNR >=
    AB_PSNR_DB."""
    model = sc.Model.from_bytes(m, name=f"{label}.onnx")
    mine = run_engine(model, feeds, "cuda", precision)
    other = run_engine_without(model, feeds, "cuda", precision, disabled)
    for a, b in zip(mine, other):
        v = psnr(a, b)
        print(f"\n{label}: {what} at {precision}: PSNR {fmt_db(v)}")
        assert v >= AB_PSNR_DB, f"{what} at {precision}: PSNR {fmt_db(v)} (bound {AB_PSNR_DB} dB)"


def chain_model(seed):
    """rgb2d-3to32 followed by a 1x1 layer: the first layer's result stays
    inside the plan, 16-bit and channels-last, as the kernel stages it
    (where the result is the network's float32 output it is not staged,
    and the layer reads the padded copy)."""
    net = Net(seed, [2, 3, 33, 40])
    y = net.act(net.conv("x", 32, [3, 3], pads=[1, 1, 1, 1]), "LeakyRelu")
    return net.model([net.conv(y, 8, [1, 1])]), {"x": net.x}


def small_input_cases():
    return [(c[0], lambda c=c: case_model(c, seed=CASES.index(c) + 11)) for c in CASES] + [
        ("rgb2d-3to32-then-1x1", lambda: chain_model(5))]


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("label,make", small_input_cases(), ids=[c[0] for c in small_input_cases()])
def test_small_input_agrees_with_padded(gpu, label, make, precision):
    need_bf16(precision)
    m, feeds = make()
    agrees(m, feeds, label, precision, "mma-small-input", "input as it is vs padded copy")


def wide_model(seed, source, norm):
    """rgb2d-3to32-then-1x1 over 4 x 3 x 389 x 505: 6272 tiles of 8 x 16,
    about ten for each of the kernel's warpgroups on an H100, so that its
    ring of halos in flight (CM_XS_RING) wraps round many times, with
    edge tiles along both dims. source "add": the layer reads the plan's
    16-bit channels-last tensor (converted as it is read), not the float32
    input (copied as it is). norm: an InstanceNormalization between, so
    that the layer writes per-tile statistics."""
    net = Net(seed, [4, 3, 389, 505])
    x = "x"
    if source == "add":
        x = net.node("Add", [x, net.const([0.5])], net.shape[x])
    y = net.conv(x, 32, [3, 3], pads=[1, 1, 1, 1])
    if norm:
        y = net.node("InstanceNormalization", [y, net.const(np.linspace(0.5, 1.5, 32)),
                                               net.const(np.linspace(-0.2, 0.2, 32))], net.shape[y], epsilon=1e-5)
    y = net.act(y, "LeakyRelu")
    return net.model([net.conv(y, 8, [1, 1])]), {"x": net.x}


@pytest.mark.parametrize("norm", [False, True], ids=["act", "norm"])
@pytest.mark.parametrize("source", ["x", "add"])
def test_small_input_many_tiles_agrees_with_padded(gpu, source, norm, tmp_path):
    if (gpu["compute_major"], gpu["compute_minor"]) != (9, 0):
        pytest.skip("the wgmma kernel reads small inputs: compute capability 9.0 only")
    m, feeds = wide_model(21, source, norm)
    rows = profile_rows(bench_profile(m, feeds, tmp_path))
    assert not any(r[1:4] == ["segrt", "pad", "channels"] for r in rows), rows
    assert any(r[1:3] == ["segrt", "mma"] for r in rows), rows
    agrees(m, feeds, f"wide-{source}-{'norm' if norm else 'act'}", "fp16", "mma-small-input",
           "input as it is vs padded copy")


def profile_rows(out):
    return [line.split() for line in out.splitlines()]


def test_padding_step_taken(gpu, tmp_path):
    m, feeds = case_model(CASES[0], seed=11)
    out = bench_profile(m, feeds, tmp_path, disabled="mma-small-input")
    rows = profile_rows(out)
    assert any(r[:4] == ["x", "segrt", "pad", "channels"] for r in rows), out
    # The padded copy replaces the input's conversion: no other copy of x.
    assert not any(r[:3] == ["x", "segrt", "copy"] for r in rows), out


def test_small_input_read_as_it_is(gpu, tmp_path):
    """On Hopper, chain_model's first layer reads the float32 input itself:
    no padded copy, no conversion, the layer on segrt's kernel; its
    results match the CPU engine's (judge)."""
    if (gpu["compute_major"], gpu["compute_minor"]) != (9, 0):
        pytest.skip("the wgmma kernel reads small inputs: compute capability 9.0 only")
    m, feeds = chain_model(5)
    out = bench_profile(m, feeds, tmp_path)
    rows = profile_rows(out)
    assert not any(r[:1] == ["x"] for r in rows), out
    assert any(r[1:3] == ["segrt", "mma"] for r in rows), out
    judge("rgb2d-3to32-then-1x1", m, feeds, LAYER_PSNR_DB)
