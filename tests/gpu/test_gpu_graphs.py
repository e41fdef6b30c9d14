"""Small networks on the GPU: the CUDA engine against the CPU engine on
chains of layers, where activations are channels-last between
convolutions (single-op cases, test_gpu_ops.py, feed plain NCHW tensors to
every kernel). Two sources of cases:

  - tests/python's generated networks (opgen.py's "graph" and "fusion"
    families, as test_diff_graphs.py runs them): at most PER_FAMILY cases
    each, a deterministic spread, at fp32, tf32, fp16 and bf16;
  - blocks built here (gen_block) that hit the CUDA kernels' fast paths
    for NHWC/NDHWC float16, bfloat16 and float32 activations: Conv ->
    InstanceNormalization or GroupNormalization -> LeakyRelu/Relu ->
    MaxPool/AveragePool (2x2 stride 2, 3x3 stride 1 pad 1, ceil_mode,
    count_include_pad); ConvTranspose (+ bias) -> Concat with a skip;
    PRelu, per-channel Mul/Add, residual Add; 2-D and 3-D, batch 1 to 3,
    odd spatial sizes, channels 8 to 64 and a few odd counts (3, 12) that
    take the general kernels, NaN entering through a residual input. At
    fp32, fp16 and bf16 (tf32 changes only the convolutions).

What is compared with what (test_gpu_ops.py's rules):
  - fp32: relative L2 to the CPU engine's <= 1e-5 (or the case's own,
    looser bound);
  - tf32: relative L2 to the CPU engine's <= 5e-3;
  - fp16: PSNR against the CUDA fp32 output >= 45 dB; bf16: >= 35 dB, the
    bound test_gpu_models.py holds whole networks to (a chain rounds every
    activation to 8 bits; one op gets 45 dB in test_gpu_ops.py); either
    bound drops to 6 dB under what the CPU engine gives on the inputs
    rounded to that precision, when that is lower;
  - NaN and infinities: at the same positions, at every precision.
A CUDA plan must not fall back to the CPU for any step.

Rerun one case: pytest tests/gpu/test_gpu_graphs.py -k <id> (ids such as
graph-62012003, block-7); SEGRT_DIFF_SEED=<seed> selects opgen cases as in
tests/python; SEGRT_GPU_SCALE multiplies the case counts."""
import math
import os

import numpy as np
import pytest

import opgen
from gpu_judge import Tally, judge, pick_cases

FAMILIES = ["graph", "fusion"]
PER_FAMILY = 8
BLOCKS = 24
HALF_PSNR_DB = {"fp16": 45.0, "bf16": 35.0}
FAMILY_PRECISIONS = ["fp32", "tf32", "fp16", "bf16"]
BLOCK_PRECISIONS = ["fp32", "fp16", "bf16"]


def _scale():
    return float(os.environ.get("SEGRT_GPU_SCALE", "1"))


FAMILY_CASES = pick_cases(FAMILIES, PER_FAMILY)
# SEGRT_DIFF_SEED chooses opgen cases only: the blocks stay out of such a run.
BLOCK_SEEDS = [] if os.environ.get("SEGRT_DIFF_SEED", "").strip() else \
    list(range(max(1, round(BLOCKS * _scale()))))

TALLY = Tally()


@pytest.fixture(scope="module", autouse=True)
def summary():
    yield
    TALLY.print_summary("GPU graph cases", FAMILY_PRECISIONS)


# ---------------------------------------------------------------------------
# the blocks

CHANNELS = [8, 16, 24, 32, 64]
ODD_CHANNELS = [3, 12]  # not a whole 16-byte vector in fp16 (12 is one in fp32)
SIDES = {2: [5, 7, 8, 12, 16, 17, 24, 32], 3: [4, 5, 6, 8, 9]}
EVEN_SIDES = {2: [8, 12, 16, 24, 32], 3: [4, 6, 8]}
# Every fifth block: large enough that the kernels split a sample over many
# blocks (normalization statistics in several tiles, merged afterwards).
BIG_SIDES = {2: [128, 160], 3: [24, 32]}
POOLS = [
    # (op, kernel, stride, pad, ceil_mode, count_include_pad)
    ("MaxPool", 2, 2, 0, 0, 0),
    ("AveragePool", 2, 2, 0, 0, 0),
    ("MaxPool", 3, 1, 1, 0, 0),
    ("AveragePool", 3, 1, 1, 0, 0),
    ("AveragePool", 3, 1, 1, 0, 1),
    ("MaxPool", 2, 2, 0, 1, 0),
    ("AveragePool", 3, 2, 1, 1, 0),
    ("MaxPool", 3, 2, 1, 1, 0),
]


class Block:
    """An opgen.Graph with the [N, C, *spatial] shapes of its tensors."""

    def __init__(self, rng, seed, nsp, opset, big):
        self.rng = rng
        self.seed = seed
        self.nsp = nsp
        self.big = big
        self.g = opgen.Graph(rng, opset)
        self.g.declare_dims = False  # rank only: no dims for ceil_mode rules to disagree on
        self.shape = {}

    def add(self, name, shape):
        self.shape[name] = list(shape)
        # onnx's inference stops at function ops (GroupNormalization).
        self.g.known_types[name] = (np.float32, list(shape))
        return name

    def input(self, shape, nan=0.0):
        x = opgen.values(self.rng, shape, np.float32)
        if nan:
            x = np.where(self.rng.random(x.shape) < nan, np.float32(np.nan), x).astype(np.float32)
        return self.add(self.g.input(x, "x"), shape)

    def const(self, shape, scale=1.0, lo=None, hi=None):
        return self.g.const(opgen.values(self.rng, shape, np.float32, lo=lo, hi=hi, scale=scale))

    def conv(self, x, cout, k=3, bias=True):
        n, cin, *sp = self.shape[x]
        w = self.const([cout, cin] + [k] * self.nsp, scale=1.0 / math.sqrt(cin * k ** self.nsp))
        ins = [x, w] + ([self.const([cout], scale=0.1)] if bias else [])
        y = self.g.op("Conv", ins, kernel_shape=[k] * self.nsp, pads=[k // 2] * 2 * self.nsp)
        return self.add(y, [n, cout] + sp)

    def up(self, x, cout, bias):
        """ConvTranspose 2x2 stride 2 (the decoder's upsampling)."""
        n, cin, *sp = self.shape[x]
        w = self.const([cin, cout] + [2] * self.nsp, scale=1.0 / math.sqrt(cin * 2 ** self.nsp))
        ins = [x, w] + ([self.const([cout], scale=0.1)] if bias else [])
        y = self.g.op("ConvTranspose", ins, kernel_shape=[2] * self.nsp, strides=[2] * self.nsp)
        return self.add(y, [n, cout] + [2 * s for s in sp])

    def norm(self, x):
        """InstanceNormalization, or GroupNormalization over a divisor of C."""
        c = self.shape[x][1]
        scale, bias = self.const([c], lo=0.5, hi=1.5), self.const([c], scale=0.2)
        if self.g.opset >= 21 and self.rng.random() < 0.4:
            divisors = [d for d in range(1, c + 1) if c % d == 0]
            y = self.g.op("GroupNormalization", [x, scale, bias], num_groups=int(opgen.pick(self.rng, divisors)))
        else:
            y = self.g.op("InstanceNormalization", [x, scale, bias])
        return self.add(y, self.shape[x])

    def act(self, x, kinds=("LeakyRelu", "Relu")):
        kind = opgen.pick(self.rng, list(kinds))
        attrs = {"alpha": float(opgen.pick(self.rng, [0.01, 0.2]))} if kind == "LeakyRelu" else {}
        return self.add(self.g.op(kind, [x], **attrs), self.shape[x])

    def pool(self, x, spec=None):
        op, k, s, p, ceil, cip = spec or POOLS[int(self.rng.integers(len(POOLS)))]
        n, c, *sp = self.shape[x]
        if any(d + 2 * p < k for d in sp):
            op, k, s, p, ceil, cip = POOLS[2]  # 3x3 stride 1 pad 1 fits any size
        attrs = dict(kernel_shape=[k] * self.nsp, strides=[s] * self.nsp, pads=[p] * 2 * self.nsp)
        if ceil:
            attrs["ceil_mode"] = 1
        if op == "AveragePool" and cip:
            attrs["count_include_pad"] = 1
        out = []
        for d in sp:
            span = d + 2 * p - k
            o = (-(-span // s) if ceil else span // s) + 1
            # ONNX (as PyTorch) drops a last window that starts in the end pad.
            if ceil and (o - 1) * s >= d + p:
                o -= 1
            out.append(o)
        return self.add(self.g.op(op, [x], **attrs), [n, c] + out)

    def per_channel(self, x, op):
        """x op a per-channel constant, broadcast as [C, 1, ...]."""
        c = self.shape[x][1]
        cst = self.const([c] + [1] * self.nsp, lo=0.5, hi=1.5) if op == "Div" else self.const([c] + [1] * self.nsp)
        return self.add(self.g.op(op, [x, cst]), self.shape[x])


def block_channels(rng):
    return int(opgen.pick(rng, ODD_CHANNELS)) if rng.random() < 0.2 else int(opgen.pick(rng, CHANNELS))


def block_spatial(b, even=False):
    sides = (BIG_SIDES if b.big else EVEN_SIDES if even else SIDES)[b.nsp]
    return [int(opgen.pick(b.rng, sides)) for _ in range(b.nsp)]


def block_batch_channels(b):
    """(N, C): smaller for the big blocks (the CPU engine computes them too)."""
    if b.big:
        return int(b.rng.integers(1, 3)), int(opgen.pick(b.rng, [8, 16, 32]))
    return int(b.rng.integers(1, 4)), block_channels(b.rng)


def nan_residual(b, h, p):
    """h + r for a graph input r carrying NaN at about a fraction p of its
    elements: NaN reaches the next kernel at known positions (through a
    convolution it would spread over whole windows)."""
    r = b.input(b.shape[h], nan=p)
    return b.add(b.g.op("Add", [h, r]), b.shape[h])


def block_norm_pool(b):
    """Conv -> InstanceNorm/GroupNorm -> LeakyRelu/Relu -> pooling; the
    normalization's output sometimes an output too (no activation fused).
    In a third of them (one big) the normalization reads the graph input
    itself, which stays plain NCHW (the kernels' spatial-contiguous paths)."""
    rng = b.rng
    n, c = block_batch_channels(b)
    if (b.seed // len(BLOCK_KINDS)) % 3 == 1:
        h = b.input([n, c] + block_spatial(b))
    else:
        h = b.conv(b.input([n, int(rng.integers(1, 5))] + block_spatial(b)), c)
    if rng.random() < 0.25:
        h = nan_residual(b, h, 0.01)
    y = b.norm(h)
    if rng.random() < 0.3:
        b.g.output(y)
    z = b.pool(b.act(y))
    b.g.output(z)
    return f"norm-pool c={c}"


def block_up_concat(b):
    """A UNet level: skip = act(conv(x)); down = pool(skip); conv, norm,
    act; ConvTranspose back up (with or without bias); Concat with the
    skip, either order; then a convolution or a normalization."""
    rng = b.rng
    n, c = block_batch_channels(b)
    x = b.input([n, int(rng.integers(1, 5))] + block_spatial(b, even=True))
    skip = b.act(b.conv(x, c))
    down = b.pool(skip, POOLS[0] if rng.random() < 0.7 else POOLS[1])
    deep = b.act(b.norm(b.conv(down, 2 * c if rng.random() < 0.5 else c)))
    cu = c if rng.random() < 0.7 else block_channels(rng)
    up = b.up(deep, cu, bias=rng.random() < 0.7)
    if rng.random() < 0.3:
        up = b.act(up)
    parts = [skip, up] if rng.random() < 0.5 else [up, skip]
    cat = b.add(b.g.op("Concat", parts, axis=1), [n, c + cu] + b.shape[skip][2:])
    if rng.random() < 0.5:
        y = b.conv(cat, c, k=int(opgen.pick(rng, [1, 3])))
    else:
        y = b.act(b.norm(cat))
    b.g.output(y)
    if rng.random() < 0.3:
        b.g.output(cat)
    return f"up-concat c={c} cu={cu}"


def block_residual(b):
    """UNet3D-style residual unit: conv -> norm -> PRelu -> conv -> norm,
    plus a residual (the input's 1x1 convolution, the first activation or
    a graph input, sometimes with NaN), PRelu or Relu; per-channel
    Mul/Add/Sub/Div constants here and there."""
    rng, nsp = b.rng, b.nsp
    n, c = block_batch_channels(b)
    x = b.input([n, int(rng.integers(1, 5))] + block_spatial(b))
    h = b.conv(x, c)
    if rng.random() < 0.6:
        h = b.norm(h)
    slope = b.const(opgen.pick(rng, [[c] + [1] * nsp, [1]]), scale=0.3)
    a = b.add(b.g.op("PRelu", [h, slope]), b.shape[h])
    if rng.random() < 0.4:
        a = b.per_channel(a, opgen.pick(rng, ["Mul", "Add", "Sub", "Div"]))
    y = b.conv(a, c)
    if rng.random() < 0.5:
        y = b.norm(y)
    kind = opgen.pick(rng, ["conv1x1", "first", "input"])
    if kind == "conv1x1":
        r = b.conv(x, c, k=1, bias=rng.random() < 0.5)
    elif kind == "first":
        r = a
    else:
        r = b.input(b.shape[y], nan=0.01 if rng.random() < 0.3 else 0.0)
    s = b.add(b.g.op("Add", [y, r] if rng.random() < 0.5 else [r, y]), b.shape[y])
    if rng.random() < 0.5:
        s = b.add(b.g.op("PRelu", [s, b.const([c] + [1] * nsp, scale=0.3)]), b.shape[s])
    else:
        s = b.act(s, ("Relu",))
    b.g.output(s)
    return f"residual c={c} r={kind}"


def block_pool_nan(b):
    """1x1 conv, a residual input with NaN, an optional activation, then
    every pooling variant in turn along a chain: NaN propagation (the first
    NaN wins and stays), ceil_mode windows and the average's divisor."""
    rng, nsp = b.rng, b.nsp
    n, c = block_batch_channels(b)
    x = b.input([n, int(rng.integers(1, 5))] + block_spatial(b))
    h = nan_residual(b, b.conv(x, c, k=1), float(opgen.pick(rng, [0.0, 0.02, 0.1])))
    if rng.random() < 0.5:
        h = b.act(h)
    for spec in [POOLS[i] for i in rng.permutation(len(POOLS))[:3]]:
        h = b.pool(h, spec)
        b.g.output(h)
    return f"pool-nan c={c}"


BLOCK_KINDS = [block_norm_pool, block_up_concat, block_residual, block_pool_nan]


def gen_block(seed):
    """Block case `seed`: (opgen.Case, a one-line description)."""
    rng = np.random.default_rng(1_000_003 * (seed + 1))
    kind = BLOCK_KINDS[seed % len(BLOCK_KINDS)]
    nsp = 3 if seed % 3 == 2 else 2  # every kind twice in 3-D
    b = Block(rng, seed, nsp, opset=21, big=seed % 5 == 4)
    what = kind(b)
    # The outputs need not be distinct tensors in kind()'s order: dedupe.
    b.g.outputs = list(dict.fromkeys(b.g.outputs))
    return b.g.case(), f"{what}, {nsp}-D, input {list(next(iter(b.g.feeds.values())).shape)}"


# ---------------------------------------------------------------------------
# running and judging


@pytest.mark.parametrize("family,seed", FAMILY_CASES, ids=[f"{f}-{s}" for f, s in FAMILY_CASES])
def test_gpu_graph(family, seed):
    label = f"{family}-{seed}"
    case = opgen.make_case(family, seed)
    head = (f"{label} (opset {case.model.opset_import[0].version}); rerun with "
            f"SEGRT_DIFF_SEED={seed} pytest tests/gpu/test_gpu_graphs.py\n"
            f"{opgen.describe(case.model, case.feeds)}")
    judge(case, label, head, FAMILY_PRECISIONS, HALF_PSNR_DB, TALLY, "gpu_graph", "test_diff_graphs.py")


@pytest.mark.parametrize("seed", BLOCK_SEEDS, ids=[f"block-{s}" for s in BLOCK_SEEDS])
def test_gpu_block(seed):
    label = f"block-{seed}"
    case, what = gen_block(seed)
    head = (f"{label}: {what}; rerun with pytest tests/gpu/test_gpu_graphs.py -k '{label}'\n"
            f"{opgen.describe(case.model, case.feeds)}")
    judge(case, label, head, BLOCK_PRECISIONS, HALF_PSNR_DB, TALLY, "gpu_graph", "test_diff_graphs.py")
