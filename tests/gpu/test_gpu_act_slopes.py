"""Activations with any slope, wherever they are fused. A LeakyRelu's
alpha and a scalar PRelu's slope may be negative or above 1 (the
corpus's MONAI UNet has PReLU slopes of 1 +- 0.1, as trained networks
may): fused kernels that compute max(v, alpha v) are right only for
alpha in [0, 1], and a max pool may be moved before an activation only
where it never decreases (alpha >= 0).

Each generated model: a stem convolution, then five branches from it,
each ending in a graph output, so that every fusion applies:

  - Conv -> act
  - Conv -> BatchNormalization (folded into the weights) -> act
  - Conv -> InstanceNormalization -> act -> 1x1 Conv (the act fused into
    the norm, or into the next layer's prologue)
  - Conv -> act -> Add(stem) (a residual after the activation)
  - Conv -> InstanceNormalization -> act -> MaxPool -> 1x1 Conv

2-D with LeakyRelu(alpha) and 3-D with PRelu(one slope), slopes -0.5,
0.5 and 1.5. fp32 against the CPU engine (relative L2 <= 1e-5); fp16,
bf16 and tf32 against CUDA fp32 (PSNR >= 45 dB). A wrong slope costs
some 20 dB."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import segrt_capi as sc
from gpu_judge import run_engine
from gpu_util import fmt_db, half, psnr, rel_l2, special_mismatch
from test_gpu_small_conv import FP32_L2, Net, cpu_outputs

PSNR_DB = 45.0
SLOPES = (-0.5, 0.5, 1.5)
CASES = [(nsp, act, s) for nsp, act in ((2, "LeakyRelu"), (3, "PRelu")) for s in SLOPES]


def act(net, x, kind, slope):
    if kind == "LeakyRelu":
        return net.node("LeakyRelu", [x], net.shape[x], alpha=slope)
    return net.node("PRelu", [x, net.const([slope])], net.shape[x])


def inorm(net, x):
    c = net.shape[x][1]
    return net.node("InstanceNormalization", [x, net.const(1.0 + 0.2 * net.rng.standard_normal([c])),
                                              net.const(0.1 * net.rng.standard_normal([c]))], net.shape[x],
                    epsilon=1e-5)


def bnorm(net, x):
    c = net.shape[x][1]
    prm = [1.0 + 0.2 * net.rng.standard_normal([c]), 0.1 * net.rng.standard_normal([c]),
           0.1 * net.rng.standard_normal([c]), 0.5 + net.rng.random(c)]
    return net.node("BatchNormalization", [x] + [net.const(p) for p in prm], net.shape[x], epsilon=1e-5)


def slope_model(nsp, kind, slope, seed):
    c = 32 if nsp == 2 else 16
    shape = [2, 3, 14, 22] if nsp == 2 else [2, 1, 6, 10, 12]
    net = Net(seed, shape)
    k3, p1, k1 = [3] * nsp, [1] * 2 * nsp, [1] * nsp
    stem = net.conv("x", c, k3, pads=p1)
    outs = [
        act(net, net.conv(stem, c, k3, pads=p1), kind, slope),
        act(net, bnorm(net, net.conv(stem, c, k3, pads=p1)), kind, slope),
        net.conv(act(net, inorm(net, net.conv(stem, c, k3, pads=p1)), kind, slope), 4, k1),
        net.node("Add", [act(net, net.conv(stem, c, k3, pads=p1), kind, slope), stem], net.shape[stem]),
    ]
    pooled = act(net, inorm(net, net.conv(stem, c, k3, pads=p1)), kind, slope)
    n, ch, *sp = net.shape[pooled]
    pooled = net.node("MaxPool", [pooled], [n, ch] + [s // 2 for s in sp], kernel_shape=[2] * nsp,
                      strides=[2] * nsp)
    outs.append(net.conv(pooled, 4, k1))
    graph = helper.make_graph(net.nodes, "act_slopes", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, net.shape[o]) for o in outs],
                              net.inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="segrt-tests")
    m.ir_version = 8
    return m, {"x": net.x}


@pytest.mark.parametrize("nsp,kind,slope", CASES, ids=[f"{n}d-{k}-{s:g}" for n, k, s in CASES])
def test_activation_slope(gpu, nsp, kind, slope):
    onnx_model, feeds = slope_model(nsp, kind, slope, seed=CASES.index((nsp, kind, slope)) + 1)
    label = f"{nsp}d {kind} {slope:g}"
    model = sc.Model.from_bytes(onnx_model, name="act_slopes.onnx")
    names = [o.name for o in onnx_model.graph.output]
    cpu = cpu_outputs(model, feeds)
    fp32 = run_engine(model, feeds, "cuda", "fp32")
    failures, lines = [], []
    for name, got, want in zip(names, fp32, cpu):
        bad = special_mismatch(got, want)
        e = rel_l2(got, want)
        lines.append(f"fp32 {name}: {e:.3g}")
        if bad or not e <= FP32_L2:
            failures.append(f"fp32 {name}: rel L2 {e:.3g} against the CPU engine (bound {FP32_L2:g})")
    for prec in (*half(), "tf32"):
        for name, got, want in zip(names, run_engine(model, feeds, "cuda", prec), fp32):
            v = psnr(got, want)
            lines.append(f"{prec} {name}: {fmt_db(v)}")
            if not v >= PSNR_DB:
                failures.append(f"{prec} {name}: PSNR {fmt_db(v)} against CUDA fp32 (bound {PSNR_DB} dB)")
    print(f"\n{label}: " + "; ".join(lines))
    assert not failures, f"{label}:\n" + "\n".join(failures)
