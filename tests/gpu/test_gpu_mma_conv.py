"""3x3 and 3x3x3 convolutions with few output channels on segrt's
tensor-core kernel (src/backend/cuda/k_conv_mma*.cu, "segrt mma conv" in
profiles) instead of cuDNN: float16 and bfloat16 plans, input channels a
multiple of 16, 8, 16 or 32 output channels (16 in 3-D), stride 1,
padding 1.

Generated models; each feeds the layer from a first convolution (1 or 3
channels -> C, so the layer reads a channels-last 16-bit tensor as in a
real network), at sizes that leave partial tiles (4x4x8 in 3-D, 8x16 in
2-D). Where C is 8, 16 or 32 (16 in 3-D), that first layer runs on the
kernel too, from a copy of the input padded to 16 channels (as an image's
first layer does), and counts in the expected steps:

  - 3-D 16 -> 16 with bias, single-slope PRelu and a residual Add (MONAI's
    residual unit, unet3d_spleen's Conv_132 and Conv_146);
  - 3-D 32 -> 8, no bias, LeakyRelu; 3-D 16 -> 16 whose output is the
    graph's float32 output;
  - 2-D 16 -> 16 Relu; 2-D 48 -> 16 (three 16-channel steps), no
    activation;
  - a UNet level's decoder end: the layer's result and a skip tensor
    (Conv -> InstanceNorm -> LeakyRelu) concatenated, both written in
    place, then a 3x3 conv;
  - 2-D 32 -> 32 before an InstanceNorm (BasicUNet's full-resolution
    layers: four n8 blocks, results staged through shared memory) and
    2-D 64 -> 32 Relu (four 16-channel steps);
  - BasicUNet's TwoConv with its norms left to the next layers, and a
    UNet level whose skip norm is read by a max pool and a Concat (left to
    both: the pool and the decoder layer normalise as they read); a norm
    left to a max pool alone, and one left to the upsampling ConvTranspose
    (both equal, bit for bit, to the plan that runs the norm's pass).

On Hopper (compute capability 9.0) the 2-D layers run on the kernel's
warpgroup (wgmma) form; --disable-kernels wgmma keeps them on its mma.sync
form, and the two agree at fp16 and bf16 (PSNR >= 60 dB: the products'
order differs, the float32 sums do not).
--disable-kernels wgmma-issue-late moves each tile's next loads back in front
of its products: the outputs are equal bit for bit.

Compared as test_gpu_small_conv.py does: fp32 (cuDNN) relative L2 to the
CPU engine's <= 1e-5; fp16 and bf16 PSNR against the CUDA fp32 output
(>= 45 dB fp16, >= 35 dB bf16). The profile at fp16 shows the layers on
the kernel, --disable-kernels mma-conv puts them back on cuDNN, and the two
agree at fp16 (PSNR >= 60 dB)."""
import numpy as np
import pytest

import segrt_capi as sc
from gpu_judge import bench_profile, run_engine, run_engine_without
from gpu_util import psnr
from test_gpu_small_conv import CHAIN_PSNR_DB, judge
from test_gpu_upsample_conv import UNetNet, steps_on

# mma.sync kernels: compute capability 8.0 and later (conftest.py).
pytestmark = pytest.mark.usefixtures("mma_sync")
IMPL = "segrt mma conv"


def first(net, c, nsp):
    return net.act(net.conv("x", c, [3] * nsp, pads=[1] * 2 * nsp), "LeakyRelu")


def residual_3d(seed):
    net = UNetNet(seed, [2, 1, 7, 9, 13])
    h = first(net, 16, 3)
    y = net.node("Add", [net.act(net.conv(h, 16, [3] * 3, pads=[1] * 6), "PRelu"), h], net.shape[h])
    out = net.conv(y, 2, [1] * 3)
    return net.model([out]), {"x": net.x}, 2


def narrow_3d(seed):
    net = UNetNet(seed, [1, 1, 6, 10, 17])
    h = first(net, 32, 3)
    y = net.act(net.conv(h, 8, [3] * 3, pads=[1] * 6, bias=False), "LeakyRelu")
    return net.model([net.conv(y, 2, [1] * 3)]), {"x": net.x}, 1


def output_3d(seed):
    net = UNetNet(seed, [2, 1, 5, 6, 9])
    h = first(net, 16, 3)
    y = net.conv(h, 16, [3] * 3, pads=[1] * 6)
    return net.model([y]), {"x": net.x}, 2


def relu_2d(seed):
    net = UNetNet(seed, [2, 3, 19, 33])
    h = first(net, 16, 2)
    y = net.act(net.conv(h, 16, [3, 3], pads=[1] * 4), "Relu")
    return net.model([net.conv(y, 3, [1, 1])]), {"x": net.x}, 2


def wide_2d(seed):
    net = UNetNet(seed, [1, 3, 12, 40])
    h = first(net, 48, 2)
    y = net.conv(h, 16, [3, 3], pads=[1] * 4)
    return net.model([net.conv(y, 2, [1, 1])]), {"x": net.x}, 1


def concat_2d(seed):
    net = UNetNet(seed, [2, 3, 16, 24])
    # The skip as BasicUNet makes it (segrt's norm kernel writes its slice).
    skip = net.act(net.instance_norm(net.conv("x", 16, [3, 3], pads=[1] * 4)), "LeakyRelu")
    h = net.act(net.conv(skip, 16, [3, 3], pads=[1] * 4), "LeakyRelu")
    y = net.conv(net.concat(skip, h), 8, [3, 3], pads=[1] * 4)  # 32 -> 8: the kernel's too
    return net.model([y]), {"x": net.x}, 3


def norm_2d(seed):
    # BasicUNet's 32 -> 32 layer at full resolution: four n8 blocks.
    net = UNetNet(seed, [2, 3, 20, 37])
    h = first(net, 32, 2)
    y = net.act(net.instance_norm(net.conv(h, 32, [3, 3], pads=[1] * 4)), "LeakyRelu")
    return net.model([net.conv(y, 2, [1, 1])]), {"x": net.x}, 2


def wide32_2d(seed):
    net = UNetNet(seed, [1, 3, 17, 21])
    h = first(net, 64, 2)
    y = net.act(net.conv(h, 32, [3, 3], pads=[1] * 4), "Relu")  # four 16-channel steps
    return net.model([net.conv(y, 2, [1, 1])]), {"x": net.x}, 1


def prologue_2d(seed, shape=(2, 3, 20, 37)):
    # BasicUNet's TwoConv at full resolution: the first norm's LeakyRelu
    # result is read only by the second 32 -> 32 layer, which normalises
    # its input as it reads it (the norm's own pass is not run); the second
    # norm is applied likewise by the last 1x1 layer (the direct kernel).
    net = UNetNet(seed, list(shape))
    h = first(net, 32, 2)
    a = net.act(net.instance_norm(net.conv(h, 32, [3, 3], pads=[1] * 4)), "LeakyRelu")
    b = net.act(net.instance_norm(net.conv(a, 32, [3, 3], pads=[1] * 4)), "LeakyRelu")
    return net.model([net.conv(b, 2, [1, 1])]), {"x": net.x}, 3


def prologue_relu_2d(seed):
    # 16 channels, Relu; then a norm without an activation before a 16 -> 8
    # layer (whose 16-bit result is staged, as the prologue needs).
    net = UNetNet(seed, [1, 3, 17, 21])
    h = first(net, 16, 2)
    a = net.act(net.instance_norm(net.conv(h, 16, [3, 3], pads=[1] * 4)), "Relu")
    b = net.instance_norm(net.conv(a, 16, [3, 3], pads=[1] * 4))
    c = net.conv(b, 8, [3, 3], pads=[1] * 4)
    return net.model([net.conv(c, 2, [1, 1])]), {"x": net.x}, 4


def skip_2d(seed, shape=(2, 3, 20, 36)):
    # A BasicUNet level: the skip's norm (after a 32 -> 32 layer with
    # statistics) is read by a max pool and by the Concat before the
    # decoder's 64 -> 32 layer. The pool normalises as it reads; the
    # layer's prologue normalises the Concat's first 32 channels and takes
    # the upsampled 32 as they are.
    net = UNetNet(seed, list(shape))
    h = first(net, 32, 2)
    skip = net.act(net.instance_norm(net.conv(h, 32, [3, 3], pads=[1] * 4)), "LeakyRelu")
    deep = net.act(net.conv(net.max_pool(skip), 32, [3, 3], pads=[1] * 4), "LeakyRelu")
    up = net.conv(deep, 32, [2, 2], strides=[2, 2], transposed=True)
    y = net.act(net.instance_norm(net.conv(net.concat(skip, up), 32, [3, 3], pads=[1] * 4)), "LeakyRelu")
    return net.model([net.conv(y, 2, [1, 1])]), {"x": net.x}, 4


CASES = [
    ("3d-16to16-prelu-residual", residual_3d),
    ("3d-32to8-leaky", narrow_3d),
    ("3d-16to16-graph-output", output_3d),
    ("2d-16to16-relu", relu_2d),
    ("2d-48to16", wide_2d),
    ("2d-concat-slice", concat_2d),
    ("2d-32to32-instance-norm", norm_2d),
    ("2d-64to32-relu", wide32_2d),
    ("2d-norm-prologue", prologue_2d),
    ("2d-norm-prologue-relu16", prologue_relu_2d),
    ("2d-norm-skip-pool-concat", skip_2d),
]
# Cases whose norms are left to the next layer on Hopper, and how many.
PROLOGUES = {"2d-norm-prologue": 2, "2d-norm-prologue-relu16": 2, "2d-norm-skip-pool-concat": 2}
IDS = [c[0] for c in CASES]


def case(label):
    i = IDS.index(label)
    return CASES[i][1](600 + i)


@pytest.mark.parametrize("label", IDS)
def test_mma_conv(gpu, label):
    m, feeds, _ = case(label)
    judge(label, m, feeds, CHAIN_PSNR_DB)


@pytest.mark.parametrize("label", IDS)
def test_mma_path_taken_and_agrees_with_cudnn(gpu, label, tmp_path):
    m, feeds, count = case(label)
    out = bench_profile(m, feeds, tmp_path, "fp16")
    assert len(steps_on(out, IMPL)) == count, f"expected {count} layer(s) on `{IMPL}`:\n{out}"
    if label == "2d-concat-slice":
        assert not steps_on(out, "segrt concat"), f"the layer should write its slice of the Concat:\n{out}"
    off = bench_profile(m, feeds, tmp_path, "fp16", "mma-conv")
    assert not steps_on(off, IMPL), f"--disable-kernels mma-conv should leave the layer to cuDNN:\n{off}"
    model = sc.Model.from_bytes(m, name=f"{label}.onnx")
    mine = run_engine(model, feeds, "cuda", "fp16")
    cudnn = run_engine_without(model, feeds, "cuda", "fp16", "mma-conv")
    v = psnr(mine[0], cudnn[0])
    print(f"\n{label}: kernel vs cuDNN at fp16: PSNR {v:.1f} dB")
    assert v >= 60.0 and np.isfinite(mine[0]).all()


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("label", [i for i in IDS if i.startswith("2d")])
def test_wgmma_agrees_with_mma_sync(gpu, label, precision):
    m, feeds, _ = case(label)
    model = sc.Model.from_bytes(m, name=f"{label}.onnx")
    # (Norms applied by the next layer are compared in their own test.)
    wg = run_engine_without(model, feeds, "cuda", precision, "norm-prologue")
    sync = run_engine_without(model, feeds, "cuda", precision, "wgmma")
    v = psnr(wg[0], sync[0])
    print(f"\n{label}: wgmma vs mma.sync at {precision}: PSNR {v:.1f} dB")
    assert v >= 60.0 and np.isfinite(wg[0]).all()


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("label", [i for i in IDS if i.startswith("2d")])
def test_wgmma_load_order_changes_no_bit(gpu, label, precision):
    """A warpgroup issues its next tile's loads behind its products
    (--disable-kernels wgmma-issue-late: before them, the earlier order): the
    same products summed in the same order, so the outputs are equal bit
    for bit, normalising prologues and statistics included; a missing
    barrier would show as a differing bit."""
    if (gpu["compute_major"], gpu["compute_minor"]) != (9, 0):
        pytest.skip("the order is conv_wgmma's: compute capability 9.0 only")
    m, feeds, _ = case(label)
    assert load_orders_differ(m, feeds, label, precision) == 0


def load_orders_differ(m, feeds, label, precision):
    """Bytes of the output that differ between the two load orders."""
    model = sc.Model.from_bytes(m, name=f"{label}.onnx")

    def run(disabled):
        # (Untimed cuDNN choices for any other layer: the same in both builds.)
        with sc.BuildOptions(shapes={k: v.shape for k, v in feeds.items()}, device="cuda",
                             precision=precision, autotune=0, disabled_kernels=disabled) as o, \
                sc.Engine.build(model, o) as e, e.context() as ctx:
            return ctx.run(feeds)

    late, early = run(""), run("wgmma-issue-late")
    assert late[0].shape == early[0].shape and np.isfinite(late[0]).all()
    differ = int(np.count_nonzero(late[0].view(np.uint8) != early[0].view(np.uint8)))
    print(f"\n{label}: load orders at {precision}: {differ} differing bytes")
    return differ


MANY_TILES = [("2d-norm-prologue", prologue_2d), ("2d-norm-skip-pool-concat", skip_2d)]


@pytest.mark.parametrize("label,make", MANY_TILES, ids=[c[0] for c in MANY_TILES])
def test_wgmma_many_tiles_a_warpgroup(gpu, label, make):
    """The cases above over 4 x 3 x 256 x 512: 4096 tiles at full
    resolution, six or so for each warpgroup on an H100, so that each
    cycles through its halo buffers and its prologue's (mean, s, b) many
    times, across samples (the small cases give a warpgroup one tile).
    Against the mma.sync kernel (the norms in their passes: agrees_with's
    bounds), and the two load orders bit for bit."""
    if (gpu["compute_major"], gpu["compute_minor"]) != (9, 0):
        pytest.skip("conv_wgmma's buffers: compute capability 9.0 only")
    m, feeds, _ = make(700, shape=(4, 3, 256, 512))
    agrees_with(m, feeds, f"{label} x4096", "wgmma", "wgmma vs mma.sync")
    assert load_orders_differ(m, feeds, f"{label} x4096", "fp16") == 0


@pytest.mark.parametrize("label", list(PROLOGUES))
def test_norm_left_to_the_next_layer(gpu, label, tmp_path):
    """On Hopper an InstanceNorm whose (activated) result only a wgmma
    layer reads is applied by that layer as its halo lands: the profile
    shows the statistics' combination only ("segrt norm stats only"), no
    "norm from stats" pass for it; --disable-kernels norm-prologue runs the pass
    instead, and the two agree (the prologue rounds (x - mean) * s + b in
    16-bit arithmetic, the pass in float32: PSNR >= 50 dB at fp16)."""
    if (gpu["compute_major"], gpu["compute_minor"]) != (9, 0):
        pytest.skip("the prologue runs in the wgmma kernel: compute capability 9.0 only")
    m, feeds, _ = case(label)
    out = bench_profile(m, feeds, tmp_path, "fp16")
    assert len(steps_on(out, "segrt norm stats only")) == PROLOGUES[label], out
    off = bench_profile(m, feeds, tmp_path, "fp16", "norm-prologue")
    assert not steps_on(off, "segrt norm stats only"), off
    agrees_with(m, feeds, label, "norm-prologue", "prologue vs the norm's pass")


def agrees_with(m, feeds, label, disabled, what):
    """Model m's output against the plan built with the kernels named in
    `disabled` turned off, at fp16 and
    bf16: PSNR >= 50 and 40 dB (a norm applied in 16-bit arithmetic by a
    layer's prologue against its float32 pass rounds differently)."""
    model = sc.Model.from_bytes(m, name=f"{label}.onnx")
    for precision, floor in (("fp16", 50.0), ("bf16", 40.0)):
        mine = run_engine(model, feeds, "cuda", precision)
        other = run_engine_without(model, feeds, "cuda", precision, disabled)
        v = psnr(mine[0], other[0])
        print(f"\n{label}: {what} at {precision}: PSNR {v:.1f} dB")
        assert v >= floor and np.isfinite(mine[0]).all()


def test_norm_left_to_a_pool_and_a_concat(gpu, tmp_path):
    """A norm read by a max pool and a Concat (a UNet's skip) is left to
    both: no pass over it, the pool and the decoder layer normalise as they
    read. With --disable-kernels concat-slices the Concat copies its inputs, so
    it cannot leave its slice to the layer: the plan applies the norm
    before the copy ("segrt norm apply"), and both plans agree."""
    if (gpu["compute_major"], gpu["compute_minor"]) != (9, 0):
        pytest.skip("the prologue runs in the wgmma kernel: compute capability 9.0 only")
    m, feeds, _ = case("2d-norm-skip-pool-concat")
    out = bench_profile(m, feeds, tmp_path, "fp16")
    assert not steps_on(out, "segrt norm from stats") and not steps_on(out, "segrt norm apply"), out
    assert not steps_on(out, "segrt concat"), out
    copied = bench_profile(m, feeds, tmp_path, "fp16", "concat-slices")
    assert len(steps_on(copied, "segrt norm apply")) == 1 and len(steps_on(copied, "segrt concat")) == 1, copied
    agrees_with(m, feeds, "skip", "concat-slices",
                "left to the Concat's reader vs applied before the copy")


def norm_pool_2d(seed, act):
    # A norm (scales of both signs) read only by a 3x3 stride-2 max pool
    # with padding (windows partly outside), then a 1x1 layer (a graph
    # output pool would be stored in float32 without the 16-bit rounding
    # the norm's pass gives its values).
    net = UNetNet(seed, [2, 3, 22, 34])
    h = first(net, 32, 2)
    y = net.conv(h, 32, [3, 3], pads=[1] * 4)
    rng = np.random.default_rng(seed)
    scale = net.const(rng.uniform(0.5, 1.5, 32) * rng.choice([-1.0, 1.0], 32))
    normed = net.node("InstanceNormalization", [y, scale, net.const(0.1 * rng.standard_normal(32))], net.shape[y],
                      epsilon=1e-5)
    a = net.act(normed, act)
    pooled = net.node("MaxPool", [a], [2, 32, 11, 17], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    return net.model([net.conv(pooled, 2, [1, 1])]), {"x": net.x}


@pytest.mark.parametrize("act", [None, "Relu", "LeakyRelu"])
def test_max_pool_normalises_as_the_pass_would(gpu, act, tmp_path):
    """A norm left to a max pool: the pool takes the raw values' largest
    (or, for a channel of negative scale, least) and normalises that once;
    the normalisation never decreases (increases) with its input, so the
    result is the same float as the norm's pass then the pool give: equal
    to the --disable-kernels norm-prologue plan's, bit for bit but zeros' signs."""
    if (gpu["compute_major"], gpu["compute_minor"]) != (9, 0):
        pytest.skip("norms are left to other layers on compute capability 9.0 only")
    m, feeds = norm_pool_2d(660, act)
    same_as_the_pass(m, feeds, tmp_path, "norm_pool")


def same_as_the_pass(m, feeds, tmp_path, name, reader=None):
    """The one norm of model m is left to its reader (the profile shows no
    pass over it; `reader`, where given, names the reader's kernel), and
    the output equals the --disable-kernels norm-prologue plan's bit for bit at
    fp16 and bf16."""
    out = bench_profile(m, feeds, tmp_path, "fp16")
    assert len(steps_on(out, "segrt norm stats only")) == 1 and not steps_on(out, "segrt norm from stats"), out
    assert reader is None or len(steps_on(out, reader)) == 1, out
    model = sc.Model.from_bytes(m, name=f"{name}.onnx")
    for precision in ("fp16", "bf16"):
        mine = run_engine(model, feeds, "cuda", precision)[0]
        passes = run_engine_without(model, feeds, "cuda", precision, "norm-prologue")[0]
        assert np.isfinite(mine).all() and np.abs(mine).max() > 0
        np.testing.assert_array_equal(mine, passes)


def norm_upsample_2d(seed, k=16):
    # BasicUNet's decoder: a norm read only by the kernel == stride
    # ConvTranspose (segrt's upsampling kernel) of k outputs, then a 1x1
    # layer. 18 x 26 positions a sample: a 16-position tile spans two samples.
    net = UNetNet(seed, [2, 3, 18, 26])
    h = first(net, 32, 2)
    a = net.act(net.instance_norm(net.conv(h, 32, [3, 3], pads=[1] * 4)), "LeakyRelu")
    up = net.conv(a, k, [2, 2], strides=[2, 2], transposed=True)
    return net.model([net.conv(up, 2, [1, 1])]), {"x": net.x}


# 16 outputs: the kernel's run-time loops; 32: its instantiation for four
# phases of 32 channels (UNet's upsampling).
@pytest.mark.parametrize("k", [16, 32])
def test_upsampling_normalises_as_the_pass_would(gpu, tmp_path, k):
    """A norm left to the upsampling ConvTranspose: the kernel normalises
    each input vector as it stages it, in float32 and rounded to 16 bits as
    the norm's pass stores it, so the products are the pass path's: equal
    to the --disable-kernels norm-prologue plan's, bit for bit."""
    if (gpu["compute_major"], gpu["compute_minor"]) != (9, 0):
        pytest.skip("norms are left to other layers on compute capability 9.0 only")
    m, feeds = norm_upsample_2d(670, k)
    same_as_the_pass(m, feeds, tmp_path, f"norm_upsample{k}", "segrt upsample conv")
