"""Convolutions with few output channels on the GPU: segrt's direct kernel
(src/backend/cuda/k_conv_small.cu, "segrt small conv" in profiles) takes
Conv and ConvTranspose layers with 1 to 4 output channels instead of
cuDNN, and an image's first layers (a forward Conv over 1 to 4 input
channels with up to 16 outputs) that segrt's tensor-core kernel does not
take. Generated models, each run on the CPU engine and on the CUDA engine
at fp32, fp16 and bf16:

  - single layers: Conv and ConvTranspose, K in {1, 2, 3, 4} output and
    C in {1, 2, 5, 32} input channels, 1-D, 2-D and 3-D, strides 1 and 2,
    explicit, asymmetric and SAME_UPPER pads, dilation 2, output_padding,
    with and without bias, followed by LeakyRelu, scalar PRelu, Relu or
    nothing (fused into the store); some read the graph input (plain
    layout, float32 at every precision), some an Add's output (plain, in
    the plan's activation dtype);
  - first layers: 3-D 1 -> 16 stride 2 (unet3d_spleen's), 2-D 3 -> 16
    stride 2 with asymmetric pads, 2-D 4 -> 12 5x5, 1-D 2 -> 8 stride 2,
    2-D 1 -> 16 stride 2 and 1 -> 12 dilation 2 (the one-channel 3x3(x3)
    loop; 12 outputs stored one at a time, 16 as vectors),
    and the spleen's first residual unit (two such layers reading the
    image, a 16 -> 16 layer, the residual Add);
  - chains where a cuDNN convolution runs first, so the small layer reads
    a channels-last input (16-byte and 4-byte vector loads, and the
    strided path for 5 channels): UNet3D spleen's tail (Conv -> PRelu ->
    ConvTranspose 32->2 stride 2 -> PRelu -> Conv 2->2 -> residual Add),
    a Conv(1->16) -> LeakyRelu -> Conv(16->3), Conv(1->12) -> Relu ->
    Conv(12->2), and Conv(1->5) -> Relu -> ConvTranspose(5->2);
  - residual Adds after a small layer, which its store takes: a residual
    in the plan's channels-last layout or plain (from the graph input),
    after an activation, with the sum a graph output or read on, and an
    Add that broadcasts (not a residual: it stays a step of its own).

What is compared with what (test_gpu_ops.py's rules): fp32 relative L2 to
the CPU engine's <= 1e-5; fp16 and bf16 PSNR against the CUDA fp32 output
>= 45 dB for single layers; chains (several roundings to the activation
dtype) >= 45 dB at fp16 and >= 35 dB at bf16, as test_gpu_graphs.py holds
its blocks. No step may fall back to the CPU.

Also: a profile of the spleen tail (with --disable-kernels up-k3: at fp16 its
ConvTranspose is the tensor-core kernel's) shows both small layers on "segrt small
conv" -- the ConvTranspose on the phase-tiled variant ("... up"), the Conv
on the tiled one -- so the paths are taken, not only correct; the same
model built with --disable-kernels small-conv (cuDNN for every layer) agrees at
fp32; and the tiled and phase-tiled variants agree with the general kernel
(--disable-kernels tiled-conv, or up-conv). A profile of the
spleen head at fp16 and fp32 shows both image layers on the kernel with
no copy of the image before them, and they agree with cuDNN's
(--disable-kernels small-conv: fp32 rel L2 <= 1e-5, fp16 >= 60 dB)."""
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import segrt_capi as sc
from gpu_judge import bench_profile, run_engine, run_engine_without
from gpu_util import half, fmt_db, psnr, rel_l2, special_mismatch

FP32_L2 = 1e-5
LAYER_PSNR_DB = {"fp16": 45.0, "bf16": 45.0}
CHAIN_PSNR_DB = {"fp16": 45.0, "bf16": 35.0}
IMPL = "segrt small conv"


# ---------------------------------------------------------------------------
# model generation


def conv_out(n, k, s, p0, p1, d):
    return (n + p0 + p1 - ((k - 1) * d + 1)) // s + 1


def convt_out(n, k, s, p0, p1, d, op):
    return s * (n - 1) + op + (k - 1) * d + 1 - p0 - p1


class Net:
    """A chain of layers on one input, built with onnx.helper."""

    def __init__(self, seed, x_shape):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.x = self.rng.standard_normal(x_shape).astype(np.float32)
        self.shape = {"x": list(x_shape)}
        self.n = 0

    def name(self, what):
        self.n += 1
        return f"{what}_{self.n}"

    def const(self, array):
        name = self.name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(array, np.float32), name))
        return name

    def node(self, op, ins, shape, **attrs):
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, ins, [out], name=f"node_{out}", **attrs))
        self.shape[out] = list(shape)
        return out

    def conv(self, x, k_out, kernel, strides=None, pads=None, dil=None, bias=True, transposed=False,
             opad=None, auto_pad=None):
        n, c, *sp = self.shape[x]
        nsp = len(sp)
        strides = strides or [1] * nsp
        pads = pads or [0] * (2 * nsp)
        dil = dil or [1] * nsp
        opad = opad or [0] * nsp
        wshape = ([c, k_out] if transposed else [k_out, c]) + list(kernel)
        fan_in = c * int(np.prod(kernel))
        w = self.const(self.rng.standard_normal(wshape) / math.sqrt(fan_in))
        ins = [x, w] + ([self.const(0.3 * self.rng.standard_normal([k_out]))] if bias else [])
        attrs = dict(kernel_shape=list(kernel), strides=strides, dilations=dil)
        if auto_pad:
            attrs["auto_pad"] = auto_pad
            out = [-(-i // s) for i, s in zip(sp, strides)]
        else:
            attrs["pads"] = pads
            if transposed:
                out = [convt_out(i, k, s, pads[j], pads[nsp + j], d, op)
                       for j, (i, k, s, d, op) in enumerate(zip(sp, kernel, strides, dil, opad))]
            else:
                out = [conv_out(i, k, s, pads[j], pads[nsp + j], d)
                       for j, (i, k, s, d) in enumerate(zip(sp, kernel, strides, dil))]
        if transposed and any(opad):
            attrs["output_padding"] = opad
        return self.node("ConvTranspose" if transposed else "Conv", ins, [n, k_out] + out, **attrs)

    def act(self, x, kind):
        if kind is None:
            return x
        if kind == "LeakyRelu":
            return self.node("LeakyRelu", [x], self.shape[x], alpha=0.1)
        if kind == "PRelu":
            return self.node("PRelu", [x, self.const([0.25])], self.shape[x])
        return self.node(kind, [x], self.shape[x])

    def model(self, outputs):
        graph = helper.make_graph(
            self.nodes, "small_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, self.shape["x"])],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, self.shape[o]) for o in outputs], self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="segrt-tests")
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


# Single layers: (id, transposed, N, C, spatial, K, layer keywords, activation, input).
# input: "x" reads the graph input, "add" an Add's output (the plan's dtype).
LAYERS = [
    ("conv3d-2to2-spleen", False, 2, 2, [7, 6, 5], 2, dict(kernel=[3, 3, 3], pads=[1] * 6), None, "add"),
    ("convt3d-32to2-spleen", True, 1, 32, [4, 5, 3], 2,
     dict(kernel=[3, 3, 3], strides=[2, 2, 2], pads=[1] * 6, opad=[1, 1, 1]), "PRelu", "add"),
    ("conv2d-1to1", False, 3, 1, [9, 11], 1, dict(kernel=[3, 3], pads=[1, 1, 1, 1], bias=False), "LeakyRelu", "x"),
    ("conv2d-5to3-s2", False, 2, 5, [10, 9], 3, dict(kernel=[3, 3], strides=[2, 2], pads=[1, 0, 1, 1]), "Relu",
     "add"),
    ("conv1d-32to4-dil2", False, 2, 32, [23], 4, dict(kernel=[5], pads=[4, 3], dil=[2]), None, "x"),
    ("convt1d-5to1-s2", True, 2, 5, [13], 1, dict(kernel=[4], strides=[2], pads=[1, 2], opad=[1]), None, "add"),
    ("convt2d-2to4-s2", True, 1, 2, [6, 7], 4, dict(kernel=[3, 3], strides=[2, 2], opad=[1, 0], bias=False),
     "LeakyRelu", "x"),
    ("convt2d-1to3-dil2", True, 2, 1, [8, 5], 3, dict(kernel=[3, 3], pads=[1, 1, 2, 0], dil=[2, 2]), "PRelu",
     "add"),
    ("conv3d-5to4-mixed", False, 1, 5, [6, 9, 7], 4,
     dict(kernel=[3, 1, 3], strides=[1, 2, 1], pads=[2, 0, 1, 2, 0, 1], dil=[2, 1, 1], bias=False), "PRelu", "x"),
    ("convt3d-2to1-k2s2", True, 2, 2, [3, 4, 5], 1, dict(kernel=[2, 2, 2], strides=[2, 2, 2]), None, "add"),
    ("conv2d-32to2-1x1", False, 2, 32, [12, 10], 2, dict(kernel=[1, 1]), "LeakyRelu", "add"),
    ("convt2d-32to3-mixed", True, 1, 32, [5, 6], 3,
     dict(kernel=[3, 3], strides=[2, 1], dil=[1, 2], pads=[1, 0, 0, 1], opad=[1, 0]), None, "x"),
    ("conv2d-2to2-same", False, 2, 2, [9, 8], 2, dict(kernel=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"), "PRelu",
     "add"),
    ("convt1d-1to2-dil2", True, 3, 1, [9], 2, dict(kernel=[3], strides=[2], dil=[2], pads=[2, 1], opad=[1]),
     "LeakyRelu", "x"),
    ("conv1d-2to3-s2", False, 2, 2, [17], 3, dict(kernel=[4], strides=[2], pads=[1, 2]), None, "add"),
    ("convt3d-5to4", True, 1, 5, [3, 4, 3], 4, dict(kernel=[3, 3, 3], strides=[1, 1, 1], pads=[1] * 6), "Relu",
     "x"),
    # Stride 1, dilation 1: the tiled variant, over more than one tile and
    # partial tiles (tiles are 4 x 8 x 32 deep at most), and too many
    # channels for any tile (the general kernel).
    ("conv3d-2to2-tiles", False, 2, 2, [9, 19, 70], 2, dict(kernel=[3, 3, 3], pads=[1] * 6), "PRelu", "add"),
    ("conv3d-3to1-k5-asym", False, 1, 3, [6, 10, 40], 1, dict(kernel=[5, 3, 3], pads=[2, 0, 1, 1, 2, 1]), None,
     "x"),
    ("conv2d-16to4-tiles", False, 2, 16, [21, 75], 4, dict(kernel=[3, 3], pads=[1, 1, 1, 1]), "LeakyRelu", "add"),
    ("conv2d-1to2-k7-nopad", False, 3, 1, [30, 45], 2, dict(kernel=[7, 7], bias=False), None, "x"),
    ("conv3d-40to3-wide", False, 1, 40, [5, 9, 33], 3, dict(kernel=[3, 3, 3], pads=[1] * 6), "Relu", "add"),
    ("conv1d-4to2-k3", False, 2, 4, [100], 2, dict(kernel=[3], pads=[1, 1]), None, "x"),
    # Stride-2 upsampling (kernel 3 pad 1, kernel 2 pad 0) with channels in
    # whole 16-byte runs: the phase-tiled variant, over several blocks and
    # partial ones, odd and even output extents, plain and channels-last
    # inputs (the chains). The 32-channel ones read an Add: a 32-channel
    # float32 tile (the graph input, read as it is) is past the variant's
    # 48 KiB of shared memory, and such a layer runs on the general kernel.
    ("convt2d-16to2-k2s2", True, 2, 16, [9, 37], 2, dict(kernel=[2, 2], strides=[2, 2]), "Relu", "add"),
    ("convt3d-8to3-k2s2-opad", True, 1, 8, [3, 5, 20], 3, dict(kernel=[2, 2, 2], strides=[2, 2, 2], opad=[1, 0, 1]),
     None, "x"),
    ("convt2d-24to4-k3s2", True, 1, 24, [7, 18], 4, dict(kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
     "LeakyRelu", "add"),
    ("convt3d-32to1-k3s2-opad", True, 2, 32, [5, 6, 19], 1,
     dict(kernel=[3, 3, 3], strides=[2, 2, 2], pads=[1] * 6, opad=[1, 1, 0]), "PRelu", "add"),
    # An image's first layers: 1 to 4 input channels, 5 to 16 outputs
    # (the general kernel with 16 accumulators a thread, written
    # channels-last): unet3d_spleen's stride-2 1 -> 16 pair, stride 2 with
    # asymmetric pads, a 5x5 layer of 12 outputs (16 accumulators, the
    # last four unused), 8 outputs in 1-D.
    ("conv3d-1to16-s2-first", False, 2, 1, [9, 10, 7], 16,
     dict(kernel=[3, 3, 3], strides=[2, 2, 2], pads=[1] * 6), "PRelu", "x"),
    ("conv2d-3to16-s2-first", False, 2, 3, [13, 18], 16,
     dict(kernel=[3, 3], strides=[2, 2], pads=[1, 0, 0, 1]), "LeakyRelu", "add"),
    ("conv2d-4to12-k5-first", False, 1, 4, [11, 14], 12, dict(kernel=[5, 5], pads=[2, 2, 2, 2], bias=False), None,
     "x"),
    ("conv1d-2to8-s2-first", False, 3, 2, [40], 8, dict(kernel=[3], strides=[2], pads=[1, 1]), "Relu", "add"),
    ("conv2d-1to16-s2-first", False, 2, 1, [15, 22], 16, dict(kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
     "Relu", "x"),
    ("conv2d-1to12-dil2-first", False, 1, 1, [17, 19], 12, dict(kernel=[3, 3], pads=[2, 2, 2, 2], dil=[2, 2]),
     "LeakyRelu", "add"),
]
# The layers the phase-tiled variant takes (and the spleen layer), for the
# A/B against the general kernel.
UP = [s for s in LAYERS if s[0] in ("convt3d-32to2-spleen", "convt2d-16to2-k2s2", "convt3d-8to3-k2s2-opad",
                                    "convt2d-24to4-k3s2", "convt3d-32to1-k3s2-opad")]
# The layers the tiled variant takes, for the A/B against the general kernel.
TILED = [s for s in LAYERS if not s[1] and s[0] in (
    "conv3d-2to2-spleen", "conv2d-1to1", "conv3d-2to2-tiles", "conv3d-3to1-k5-asym",
    "conv2d-16to4-tiles", "conv2d-1to2-k7-nopad", "conv1d-4to2-k3")]


def layer_model(spec, seed):
    name, transposed, n, c, sp, k, kw, act, source = spec
    net = Net(seed, [n, c] + sp)
    x = "x"
    if source == "add":
        x = net.node("Add", [x, net.const([0.5])], net.shape[x])
    y = net.act(net.conv(x, k, transposed=transposed, **kw), act)
    return net.model([y]), {"x": net.x}


def chain_spleen(seed, n=2, c0=4, side=6, nsp=3):
    """UNet3D spleen's last layers, at a small size (side: one extent or one per dim)."""
    net = Net(seed, [n, c0] + (list(side) if isinstance(side, tuple) else [side] * nsp))
    h = net.act(net.conv("x", 32, [3] * nsp, pads=[1] * 2 * nsp), "PRelu")
    up = net.act(net.conv(h, 2, [3] * nsp, strides=[2] * nsp, pads=[1] * 2 * nsp, transposed=True,
                          opad=[1] * nsp), "PRelu")
    y = net.conv(up, 2, [3] * nsp, pads=[1] * 2 * nsp)
    out = net.node("Add", [y, up], net.shape[y])
    return net.model([out]), {"x": net.x}


def chain_conv16(seed):
    """Conv(1->16) first: the small Conv(16->3) reads a channels-last input."""
    net = Net(seed, [2, 1, 9, 11])
    h = net.act(net.conv("x", 16, [3, 3], pads=[1, 1, 1, 1]), "LeakyRelu")
    y = net.conv(h, 3, [3, 3], pads=[1, 1, 1, 1])
    return net.model([y]), {"x": net.x}


def chain_conv12(seed):
    """Twelve channels-last float16 channels: 4-byte vector loads."""
    net = Net(seed, [2, 1, 10, 12])
    h = net.act(net.conv("x", 12, [3, 3], pads=[1, 1, 1, 1]), "Relu")
    y = net.conv(h, 2, [3, 3], pads=[1, 1, 1, 1])
    return net.model([y]), {"x": net.x}


def chain_conv5(seed):
    """Five channels-last channels: no vector load fits, the strided path."""
    net = Net(seed, [2, 1, 8, 10])
    h = net.act(net.conv("x", 5, [3, 3], pads=[1, 1, 1, 1]), "Relu")
    y = net.act(net.conv(h, 2, [2, 2], strides=[2, 2], transposed=True), "PRelu")
    return net.model([y, h]), {"x": net.x}


def chain_residual(seed, kind):
    """A small Conv(16->3), its activation, and an Add of a tensor made
    earlier: a channels-last one (`cl`), the graph input's plain layout
    (`plain`, 3-D), one read on after the sum (`reused`), or one that
    broadcasts (`broadcast`: not fusable)."""
    shape = [2, 3, 5, 6, 7] if kind == "plain" else [2, 3, 9, 11]
    nsp = len(shape) - 2
    net = Net(seed, shape)
    h = net.act(net.conv("x", 16, [3] * nsp, pads=[1] * 2 * nsp), "LeakyRelu")
    y = net.act(net.conv(h, 3, [3] * nsp, pads=[1] * 2 * nsp), "Relu" if kind != "reused" else None)
    if kind == "plain":
        z = net.node("Mul", ["x", net.const([0.5])], net.shape["x"])
    elif kind == "broadcast":
        z = net.const(net.rng.standard_normal([1, 3] + [1] * nsp))
    else:
        z = net.conv(h, 3, [1] * nsp)  # another small layer, channels-last
    out = net.node("Add", [z, y] if kind == "cl" else [y, z], net.shape[y])
    if kind == "reused":
        last = net.node("Mul", [out, z], net.shape[y])
        return net.model([last, out]), {"x": net.x}
    return net.model([out]), {"x": net.x}


def chain_spleen_head(seed, n=2, side=(10, 12, 9)):
    """UNet3D spleen's first residual unit: two stride-2 1 -> 16 layers read
    the image (the unit's conv and its residual path), then a 16 -> 16
    layer whose sum with the residual is the unit's output."""
    net = Net(seed, [n, 1] + list(side))
    s2 = dict(strides=[2] * 3, pads=[1] * 6)
    h = net.act(net.conv("x", 16, [3] * 3, **s2), "PRelu")
    r = net.conv("x", 16, [3] * 3, **s2)
    y = net.act(net.conv(h, 16, [3] * 3, pads=[1] * 6), "PRelu")
    out = net.node("Add", [y, r], net.shape[y])
    return net.model([out]), {"x": net.x}


CHAINS = [
    ("chain-spleen-head", chain_spleen_head),
    ("chain-residual-cl", lambda seed: chain_residual(seed, "cl")),
    ("chain-residual-plain-3d", lambda seed: chain_residual(seed, "plain")),
    ("chain-residual-reused", lambda seed: chain_residual(seed, "reused")),
    ("chain-residual-broadcast", lambda seed: chain_residual(seed, "broadcast")),
    ("chain-spleen-3d", chain_spleen),
    # The 2 -> 2 layer over several tiles along each dim (4 x 8 x 32),
    # partial at the far ends: its tile staged a whole position a load.
    ("chain-spleen-3d-tiles", lambda seed: chain_spleen(seed, n=1, c0=2, side=(5, 9, 19))),
    ("chain-spleen-2d", lambda seed: chain_spleen(seed, n=3, c0=3, side=9, nsp=2)),
    ("chain-conv16", chain_conv16),
    ("chain-conv12", chain_conv12),
    ("chain-conv5", chain_conv5),
]


# ---------------------------------------------------------------------------
# running and judging


def cpu_outputs(model, feeds):
    try:
        return run_engine(model, feeds, "cpu")
    except sc.SegrtError as err:
        if err.unsupported:
            pytest.skip(f"the CPU engine does not run this case: {err.message}")
        raise


def judge(label, onnx_model, feeds, half_bounds):
    model = sc.Model.from_bytes(onnx_model, name=f"{label}.onnx")
    names = [o.name for o in onnx_model.graph.output]
    cpu = cpu_outputs(model, feeds)
    gpu = {prec: run_engine(model, feeds, "cuda", prec) for prec in ("fp32", *half())}
    failures, lines = [], []
    for name, got, want in zip(names, gpu["fp32"], cpu):
        assert got.shape == want.shape and got.dtype == want.dtype, (name, got.shape, want.shape)
        bad = special_mismatch(got, want)
        e = rel_l2(got, want)
        lines.append(f"fp32 {name}: rel L2 {e:.3g}")
        if bad or not e <= FP32_L2:
            failures.append(f"fp32 {name}: rel L2 {e:.3g} (bound {FP32_L2:g}){'; ' + bad if bad else ''}")
    for prec in half():
        for name, got, want in zip(names, gpu[prec], gpu["fp32"]):
            v = psnr(got, want)
            lines.append(f"{prec} {name}: PSNR {fmt_db(v)}")
            if not v >= half_bounds[prec]:
                failures.append(f"{prec} {name}: PSNR {fmt_db(v)} against CUDA fp32 (bound {half_bounds[prec]} dB)")
    print(f"\n{label}: " + "; ".join(lines))
    assert not failures, f"{label}:\n" + "\n".join(failures)


@pytest.mark.parametrize("spec", LAYERS, ids=[s[0] for s in LAYERS])
def test_small_layer(gpu, spec):
    m, feeds = layer_model(spec, seed=LAYERS.index(spec) + 1)
    judge(spec[0], m, feeds, LAYER_PSNR_DB)


@pytest.mark.parametrize("label,make", CHAINS, ids=[c[0] for c in CHAINS])
def test_small_chain(gpu, label, make):
    m, feeds = make(101 + [c[0] for c in CHAINS].index(label))
    judge(label, m, feeds, CHAIN_PSNR_DB)


# At fp16 and bf16 a kernel-3 stride-2 ConvTranspose reading a channels-last
# input goes to the tensor-core kernel (test_gpu_up_k3.py); these tests
# turn that path off to hold the direct kernel's own variants.
NO_K3 = "up-k3"


def test_small_path_taken_and_agrees_with_cudnn(gpu, tmp_path):
    m, feeds = chain_spleen(7)
    out = bench_profile(m, feeds, tmp_path, disabled=NO_K3)
    rows = [line for line in out.splitlines() if IMPL in line]
    assert len(rows) == 2, f"expected the ConvTranspose and the last Conv on `{IMPL}`:\n{out}"
    assert any(IMPL + " up" in r for r in rows), f"the ConvTranspose should run on the phase-tiled variant:\n{out}"
    assert any(IMPL + " tiled" in r for r in rows), f"the last Conv should run on the tiled variant:\n{out}"
    adds = [line for line in out.splitlines() if line.startswith("node_add")]
    assert not adds, f"the residual Add should join the last Conv's store:\n{out}"

    model = sc.Model.from_bytes(m, name="spleen_tail.onnx")
    small = run_engine(model, feeds, "cuda", "fp32")
    cudnn = run_engine_without(model, feeds, "cuda", "fp32", "small-conv")
    e = rel_l2(small[0], cudnn[0])
    print(f"\nsmall conv vs cuDNN at fp32: rel L2 {e:.3g}")
    assert e <= FP32_L2, f"the direct kernel and cuDNN differ at fp32: rel L2 {e:.3g}"


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_first_layers_taken_and_agree_with_cudnn(gpu, tmp_path, precision):
    """The spleen head's two image layers run on the direct kernel, reading
    the float32 graph input as it is (no padded or converted copy of x),
    and agree with cuDNN (--disable-kernels small-conv)."""
    m, feeds = chain_spleen_head(11)
    out = bench_profile(m, feeds, tmp_path, precision)
    rows = [line for line in out.splitlines() if IMPL in line]
    assert len(rows) == 2, f"expected both 1 -> 16 layers on `{IMPL}`:\n{out}"
    firsts = [line.split()[:2] for line in out.splitlines() if line.split()[:1] == ["x"]]
    assert not firsts, f"the image should be read as it is, with no step of its own:\n{out}"
    model = sc.Model.from_bytes(m, name="spleen_head.onnx")
    small = run_engine(model, feeds, "cuda", precision)
    cudnn = run_engine_without(model, feeds, "cuda", precision, "small-conv")
    if precision == "fp32":
        e = rel_l2(small[0], cudnn[0])
        print(f"\nspleen head, small conv vs cuDNN at fp32: rel L2 {e:.3g}")
        assert e <= FP32_L2, f"the direct kernel and cuDNN differ at fp32: rel L2 {e:.3g}"
    else:
        v = psnr(small[0], cudnn[0])
        print(f"\nspleen head, small conv vs cuDNN at fp16: PSNR {fmt_db(v)}")
        assert v >= 60.0, f"the direct kernel and cuDNN differ at fp16: PSNR {fmt_db(v)}"


def small_conv_impls(onnx_model, feeds, tmp_path, precision, disabled=None):
    """The kernel names `segrt bench --profile` gives the direct kernel's
    steps: which variant each small layer runs on."""
    out = bench_profile(onnx_model, feeds, tmp_path, precision, disabled)
    rows = [line for line in out.splitlines() if IMPL in line]
    assert rows, f"no step on `{IMPL}`:\n{out}"
    return [IMPL + r.split(IMPL, 1)[1].split("  ", 1)[0] for r in rows]


@pytest.mark.parametrize("spec", TILED, ids=[s[0] for s in TILED])
def test_tiled_agrees_with_general_kernel(gpu, spec, tmp_path):
    """--disable-kernels tiled-conv runs the same layers on the general direct
    kernel: the two sum in other orders, so they agree to rounding."""
    m, feeds = layer_model(spec, seed=LAYERS.index(spec) + 1)
    assert small_conv_impls(m, feeds, tmp_path, "fp32") == [IMPL + " tiled"]
    assert small_conv_impls(m, feeds, tmp_path, "fp32", "tiled-conv") == [IMPL]
    model = sc.Model.from_bytes(m, name=f"{spec[0]}.onnx")
    tiled = run_engine(model, feeds, "cuda", "fp32")
    general = run_engine_without(model, feeds, "cuda", "fp32", "tiled-conv")
    for a, b in zip(tiled, general):
        assert rel_l2(a, b) <= 1e-6, f"tiled vs general: rel L2 {rel_l2(a, b):.3g}"


@pytest.mark.parametrize("spec", UP, ids=[s[0] for s in UP])
def test_up_variant_agrees_with_general_kernel(gpu, spec, tmp_path):
    """--disable-kernels up-conv runs stride-2 upsampling layers on the general
    direct kernel: the two sum in other orders, so they agree to rounding."""
    m, feeds = layer_model(spec, seed=LAYERS.index(spec) + 1)
    model = sc.Model.from_bytes(m, name=f"{spec[0]}.onnx")
    # At fp16 every one of these layers' tiles fits in shared memory, so
    # the variant must be taken; at fp32 (twice the bytes) some do not, and
    # the comparison there holds whichever kernel the plan chose.
    general = NO_K3 + ",up-conv"
    assert small_conv_impls(m, feeds, tmp_path, "fp16", NO_K3) == [IMPL + " up"]
    assert small_conv_impls(m, feeds, tmp_path, "fp16", general) == [IMPL]
    for prec in ("fp32", "fp16"):
        up = run_engine_without(model, feeds, "cuda", prec, NO_K3)
        plain = run_engine_without(model, feeds, "cuda", prec, general)
        for a, b in zip(up, plain):
            if prec == "fp32":
                assert rel_l2(a, b) <= 1e-6, f"fp32 up vs general: rel L2 {rel_l2(a, b):.3g}"
            else:
                assert psnr(a, b) >= 60.0, f"fp16 up vs general: PSNR {fmt_db(psnr(a, b))}"
