"""ConvTranspose with kernel == stride on the GPU: segrt's per-phase product
kernel (src/backend/cuda/k_conv_upsample.cu, "segrt upsample conv" in
profiles) takes these layers (up to 64 input channels, more than the
few-channel kernel's 4 outputs) instead of cuDNN's strided dgrad.
Generated models, each run on the CPU engine and on the CUDA engine at
fp32 (CUDA-core path), fp16 and bf16 (tensor-core path):

  - single layers, 1-D to 3-D, kernels 2x2, 2x2x2, 3 (1-D), 2x1: input
    channels 5 (padded to 16 for the tensor cores), 16, 32, 64; output
    channels 6, 8, 24 (a partial 16-channel fragment), 32 and 80 (two
    channel chunks); several tiles of 64 positions and a partial last
    one; with and without bias; followed by LeakyRelu, scalar PRelu, Relu
    or nothing; some read the graph input (plain float32 at every
    precision: the CUDA-core path, writing the graph's output in its own
    float32), some an Add's output (plain, element-strided loads);
  - the graph input through the layer into an Add (the CUDA-core path
    writing the plan's float16 or bfloat16);
  - a UNet stage, 2-D and 3-D: Conv -> InstanceNorm -> LeakyRelu (the
    skip), MaxPool, Conv -> LeakyRelu, the upsampling ConvTranspose,
    Concat with the skip, Conv. The upsampling reads a channels-last
    tensor (16-byte loads) and writes its slice of the concatenation.

What is compared with what (test_gpu_small_conv.py's rules): fp32 relative
L2 to the CPU engine's <= 1e-5; fp16 and bf16 PSNR against the CUDA fp32
output (>= 45 dB single layers; chains >= 45 dB fp16, >= 35 dB bf16).

Also: the UNet stage's profile shows the layer on "segrt upsample conv"
and no "segrt concat" step (both inputs of the Concat written in place);
and --disable-kernels upsample-conv (cuDNN) agrees at fp32."""
import numpy as np
import pytest

import segrt_capi as sc
from gpu_judge import bench_profile, run_engine, run_engine_without
from gpu_util import rel_l2
from test_gpu_small_conv import CHAIN_PSNR_DB, FP32_L2, LAYER_PSNR_DB, Net, judge, layer_model

# mma.sync kernels: compute capability 8.0 and later (conftest.py).
pytestmark = pytest.mark.usefixtures("mma_sync")
IMPL = "segrt upsample conv"

K2 = dict(kernel=[2, 2], strides=[2, 2])
K222 = dict(kernel=[2, 2, 2], strides=[2, 2, 2])
# (id, transposed, N, C, spatial, K, layer keywords, activation, input), as test_gpu_small_conv.py's LAYERS.
LAYERS = [
    ("up2d-32to32", True, 2, 32, [9, 13], 32, K2, None, "add"),
    ("up2d-32to32-x", True, 1, 32, [11, 10], 32, K2, "LeakyRelu", "x"),
    ("up3d-16to8", True, 1, 16, [3, 5, 7], 8, K222, "LeakyRelu", "add"),
    ("up2d-64to24", True, 2, 64, [6, 7], 24, dict(K2, bias=False), "Relu", "add"),
    ("up1d-5to6-k3", True, 3, 5, [29], 6, dict(kernel=[3], strides=[3]), "PRelu", "add"),
    ("up2d-8to80", True, 1, 8, [12, 9], 80, K2, None, "x"),
    ("up2d-16to16-k2x1", True, 2, 16, [10, 12], 16, dict(kernel=[2, 1], strides=[2, 1]), "PRelu", "add"),
    ("up2d-32to16-tiles", True, 2, 32, [20, 24], 16, K2, None, "add"),
    ("up3d-32to32-tiles", True, 2, 32, [4, 6, 10], 32, K222, "Relu", "add"),
]


class UNetNet(Net):
    def instance_norm(self, x):
        c = self.shape[x][1]
        scale = self.const(1.0 + 0.2 * self.rng.standard_normal([c]))
        bias = self.const(0.1 * self.rng.standard_normal([c]))
        return self.node("InstanceNormalization", [x, scale, bias], self.shape[x], epsilon=1e-5)

    def max_pool(self, x):
        n, c, *sp = self.shape[x]
        nsp = len(sp)
        return self.node("MaxPool", [x], [n, c] + [s // 2 for s in sp], kernel_shape=[2] * nsp, strides=[2] * nsp)

    def concat(self, a, b):
        shape = list(self.shape[a])
        shape[1] += self.shape[b][1]
        return self.node("Concat", [a, b], shape, axis=1)


def unet_stage(seed, nsp=2):
    """One UNet level as MONAI's BasicUNet builds it, at a small size."""
    shape = [2, 3, 16, 20] if nsp == 2 else [1, 2, 8, 10, 12]
    net = UNetNet(seed, shape)
    k3, p1 = [3] * nsp, [1] * 2 * nsp
    skip = net.act(net.instance_norm(net.conv("x", 32, k3, pads=p1)), "LeakyRelu")
    deep = net.act(net.conv(net.max_pool(skip), 32, k3, pads=p1), "LeakyRelu")
    up = net.conv(deep, 32, [2] * nsp, strides=[2] * nsp, transposed=True)
    y = net.conv(net.concat(skip, up), 8, k3, pads=p1)
    return net.model([y]), {"x": net.x}


def from_input(seed):
    """The graph input (float32 at every precision) through the layer into
    an Add: the layer's output is stored in the plan's dtype."""
    net = UNetNet(seed, [2, 8, 9, 11])
    up = net.act(net.conv("x", 24, [2, 2], strides=[2, 2], transposed=True), "LeakyRelu")
    return net.model([net.node("Add", [up, net.const([0.5])], net.shape[up])]), {"x": net.x}


CONCAT_CHAINS = [
    ("unet-stage-2d", unet_stage),
    ("unet-stage-3d", lambda seed: unet_stage(seed, nsp=3)),
]
CHAINS = CONCAT_CHAINS + [("from-input-2d", from_input)]


@pytest.mark.parametrize("spec", LAYERS, ids=[s[0] for s in LAYERS])
def test_upsample_layer(gpu, spec):
    m, feeds = layer_model(spec, seed=300 + LAYERS.index(spec))
    judge(spec[0], m, feeds, LAYER_PSNR_DB)


@pytest.mark.parametrize("label,make", CHAINS, ids=[c[0] for c in CHAINS])
def test_upsample_chain(gpu, label, make):
    m, feeds = make(400 + [c[0] for c in CHAINS].index(label))
    judge(label, m, feeds, CHAIN_PSNR_DB)


def steps_on(out, impl):
    return [line for line in out.splitlines() if impl in line]


@pytest.mark.parametrize("spec", LAYERS, ids=[s[0] for s in LAYERS])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_upsample_path_taken(gpu, spec, precision, tmp_path):
    m, feeds = layer_model(spec, seed=300 + LAYERS.index(spec))
    out = bench_profile(m, feeds, tmp_path, precision)
    assert len(steps_on(out, IMPL)) == 1, f"expected the layer on `{IMPL}`:\n{out}"
    off = bench_profile(m, feeds, tmp_path, precision, "upsample-conv")
    assert not steps_on(off, IMPL), f"--disable-kernels upsample-conv should leave the layer to cuDNN:\n{off}"


@pytest.mark.parametrize("label,make", CONCAT_CHAINS, ids=[c[0] for c in CONCAT_CHAINS])
def test_upsample_writes_into_the_concat_and_agrees_with_cudnn(gpu, label, make, tmp_path):
    m, feeds = make(400 + [c[0] for c in CHAINS].index(label))
    out = bench_profile(m, feeds, tmp_path, "fp16")
    assert len(steps_on(out, IMPL)) == 1, f"expected the ConvTranspose on `{IMPL}`:\n{out}"
    assert not steps_on(out, "segrt concat"), f"both Concat inputs should be written in place:\n{out}"

    model = sc.Model.from_bytes(m, name=f"{label}.onnx")
    mine = run_engine(model, feeds, "cuda", "fp32")
    cudnn = run_engine_without(model, feeds, "cuda", "fp32", "upsample-conv")
    e = rel_l2(mine[0], cudnn[0])
    print(f"\n{label}: upsample kernel vs cuDNN at fp32: rel L2 {e:.3g}")
    assert e <= FP32_L2, f"the upsample kernel and cuDNN differ at fp32: rel L2 {e:.3g}"
    assert np.isfinite(mine[0]).all()
