"""ConvTranspose with kernel 3, stride 2, pads 1 (MONAI UNet's upsampling) on
the GPU: segrt's tensor-core kernel (src/backend/cuda/k_conv_up_k3.cu,
"segrt convT k3s2" in profiles) takes these layers at fp16 and bf16 where
their input is channels-last with a multiple of 8 channels (up to 64).
Generated models, each run on the CPU engine and on the CUDA engine at
fp32 (where the other paths run the layer), fp16 and bf16:

  - a 1x1 Conv (cuDNN: a channels-last input) then the ConvTranspose, 2-D
    and 3-D: input channels 8, 16, 24 (staged as 32 with zeros), 32 and
    64; output channels 1 to 5 (columns of several phases, an odd last
    channel), 8, 16, 20 (a partial chunk of 16) and 32 (chunks of 8: 16
    do not fit beside the tiles); output_padding 0 and 1 mixed across
    dims (odd and even output extents); several tiles along each dim
    with partial ones at the far ends; batch 1 to 3; with and without
    bias; LeakyRelu, scalar PRelu, Relu or nothing after it;
  - UNet3D spleen's tail (test_gpu_small_conv.py's chain_spleen), 3-D
    and 2-D.

What is compared with what (test_gpu_small_conv.py's rules): fp32 relative
L2 to the CPU engine's <= 1e-5; fp16 and bf16 PSNR against the CUDA fp32
output (chains of two layers: >= 45 dB fp16, >= 35 dB bf16).

Also: the profile shows the layer on "segrt convT k3s2" at fp16 (so the
path is taken, not only correct); --disable-kernels up-k3 leaves it to the
other paths, and the two agree at fp16 and bf16."""
import pytest

import segrt_capi as sc
from gpu_judge import bench_profile, run_engine_without
from gpu_util import half, fmt_db, psnr
from test_gpu_small_conv import CHAIN_PSNR_DB, Net, chain_spleen, judge
from test_gpu_upsample_conv import steps_on

# mma.sync kernels: compute capability 8.0 and later (conftest.py).
pytestmark = pytest.mark.usefixtures("mma_sync")
IMPL = "segrt convT k3s2"
OFF = "up-k3"

# (id, N, C0, C, spatial, K, output_padding, bias, activation)
LAYERS = [
    ("3d-32to2-spleen", 2, 3, 32, [7, 9, 11], 2, [1, 1, 1], True, "PRelu"),
    ("3d-16to16-opad010", 1, 2, 16, [5, 6, 17], 16, [0, 1, 0], True, "LeakyRelu"),
    ("3d-64to16-chunks", 2, 3, 64, [4, 5, 9], 16, [1, 1, 1], True, None),
    ("3d-24to5-nobias", 1, 4, 24, [3, 7, 10], 5, [1, 0, 1], False, "Relu"),
    ("3d-8to1", 1, 2, 8, [6, 4, 9], 1, [1, 0, 1], True, None),
    ("3d-32to20", 1, 2, 32, [3, 4, 9], 20, [1, 1, 1], True, "PRelu"),
    ("3d-16to4", 3, 1, 16, [5, 5, 5], 4, [0, 0, 0], True, "LeakyRelu"),
    ("3d-64to32", 1, 3, 64, [3, 5, 8], 32, [1, 1, 1], True, "Relu"),
    ("2d-32to2", 3, 3, 32, [13, 35], 2, [1, 1], True, "LeakyRelu"),
    ("2d-16to8-opad0", 2, 2, 16, [9, 20], 8, [0, 0], True, "PRelu"),
    ("2d-64to16", 1, 3, 64, [8, 33], 16, [1, 1], False, None),
    ("2d-8to3", 2, 1, 8, [17, 16], 3, [1, 0], True, "Relu"),
]


def layer_model(spec, seed):
    _, n, c0, c, sp, k, opad, bias, act = spec
    net = Net(seed, [n, c0] + sp)
    nsp = len(sp)
    h = net.conv("x", c, [1] * nsp)
    y = net.conv(h, k, [3] * nsp, strides=[2] * nsp, pads=[1] * 2 * nsp, opad=opad, bias=bias, transposed=True)
    return net.model([net.act(y, act)]), {"x": net.x}


CHAINS = [
    ("chain-spleen-3d", lambda seed: chain_spleen(seed, n=2, c0=3, side=(5, 9, 19))),
    ("chain-spleen-2d", lambda seed: chain_spleen(seed, n=3, c0=3, side=11, nsp=2)),
]


def path_taken_and_agrees(label, m, feeds, tmp_path):
    """The layer runs on the kernel at fp16, not with --disable-kernels up-k3,
    and the two paths agree at fp16 and bf16."""
    on = bench_profile(m, feeds, tmp_path, "fp16")
    assert len(steps_on(on, IMPL)) == 1, f"expected the ConvTranspose on `{IMPL}`:\n{on}"
    off = bench_profile(m, feeds, tmp_path, "fp16", OFF)
    assert not steps_on(off, IMPL), f"--disable-kernels up-k3 should leave the layer to the other paths:\n{off}"
    model = sc.Model.from_bytes(m, name=f"{label}.onnx")
    for prec, bound in (("fp16", 60.0), ("bf16", 45.0))[:len(half())]:
        mine = run_engine_without(model, feeds, "cuda", prec, "")
        other = run_engine_without(model, feeds, "cuda", prec, OFF)
        for a, b in zip(mine, other):
            v = psnr(a, b)
            print(f"\n{label} {prec}: kernel vs other paths PSNR {fmt_db(v)}")
            assert v >= bound, f"{prec}: the kernel and the other paths differ: PSNR {fmt_db(v)} (bound {bound} dB)"


@pytest.mark.parametrize("spec", LAYERS, ids=[s[0] for s in LAYERS])
def test_up_k3_layer(gpu, spec):
    m, feeds = layer_model(spec, seed=500 + LAYERS.index(spec))
    judge(spec[0], m, feeds, CHAIN_PSNR_DB)


@pytest.mark.parametrize("spec", LAYERS, ids=[s[0] for s in LAYERS])
def test_up_k3_path_taken(gpu, spec, tmp_path):
    m, feeds = layer_model(spec, seed=500 + LAYERS.index(spec))
    path_taken_and_agrees(spec[0], m, feeds, tmp_path)


@pytest.mark.parametrize("label,make", CHAINS, ids=[c[0] for c in CHAINS])
def test_up_k3_chain(gpu, label, make, tmp_path):
    m, feeds = make(600 + [c[0] for c in CHAINS].index(label))
    judge(label, m, feeds, CHAIN_PSNR_DB)
    path_taken_and_agrees(label, m, feeds, tmp_path)
