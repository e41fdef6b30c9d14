"""Attention chains as one node (graph/pass_attention.c, segrt's
ScaledDotProductAttention in domain ai.segrt): the MatMul, scale, mask,
Softmax, MatMul chains that exporters write for SegFormer, Swin (with the
shifted window's Reshape around its mask) and MONAI's SABlock (Einsums),
each run fused and with `--disable-kernels fused-attention`, both against
onnxruntime; the plan's steps say whether the chain was fused (the fused
node is named after the last MatMul, `.../fused_K`). Chains outside the
pattern (a scale after a mask, a Softmax that is also an output, a Softmax
over another axis, broadcasting batch dims) stay as they are and keep
their numbers. The operator itself is also taken from a model (domain
ai.segrt) and checked against numpy, masks broadcast and K given either
way, and it survives a CPU plan file."""
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import opgen
from conftest import SEGRT

RNG = np.random.default_rng(11)


def const(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def ints(name, v):
    return const(name, np.array(v, dtype=np.int64))


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def save(path, nodes, inputs, inits, outputs=("y",), domains=()):
    def elem(a):
        return helper.np_dtype_to_tensor_dtype(a.dtype)
    ins = [helper.make_tensor_value_info(k, elem(v), list(v.shape)) for k, v in inputs.items()]
    outs = [helper.make_tensor_value_info(o, elem(next(iter(inputs.values()))), None) for o in outputs]
    g = helper.make_graph(nodes, "g", ins, outs, initializer=inits)
    opsets = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, 1) for d in domains]
    m = helper.make_model(g, opset_imports=opsets)
    m.ir_version = 8
    onnx.save(m, path)


def segformer():
    """q k^T / c, Softmax, times v (4-D, K transposed by the graph)."""
    x = {"q": f32(2, 2, 6, 4), "k": f32(2, 2, 5, 4), "v": f32(2, 2, 5, 3)}
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Div", ["s", "c"], ["s2"]),
             helper.make_node("Softmax", ["s2"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    return nodes, x, [const("c", np.float32(2.0))]


def swin(shifted):
    """MONAI's WindowAttention: q * scale, q k^T, + the relative position
    bias [1, heads, N, N]; a shifted window's mask [windows, N, N] added at
    [B, windows, heads, N, N] between two Reshapes; then Softmax, times v,
    heads back beside the tokens."""
    B, W, H, N, D = 2, 3, 2, 5, 4
    x = {"q": f32(B * W, H, N, D), "k": f32(B * W, H, N, D), "v": f32(B * W, H, N, D)}
    mask = np.where(RNG.random((1, W, 1, N, N)) < 0.3, -100.0, 0.0).astype(np.float32)
    inits = [const("scale", np.float32(D ** -0.5)), const("bias", f32(1, H, N, N)), const("mask", mask),
             ints("s5", [B, W, H, N, N]), ints("s4", [B * W, H, N, N])]
    nodes = [helper.make_node("Mul", ["q", "scale"], ["qs"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["qs", "kt"], ["s"]),
             helper.make_node("Add", ["s", "bias"], ["sb"])]
    last = "sb"
    if shifted:
        nodes += [helper.make_node("Reshape", ["sb", "s5"], ["r5"]),
                  helper.make_node("Add", ["r5", "mask"], ["m5"]),
                  helper.make_node("Reshape", ["m5", "s4"], ["sm"])]
        last = "sm"
    nodes += [helper.make_node("Softmax", [last], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["a"]),
              helper.make_node("Transpose", ["a"], ["y"], perm=[0, 2, 1, 3])]
    return nodes, x, inits


def sablock():
    """MONAI's SABlock: Einsums for q k^T and for the product with v (the
    Einsum rewrite makes them MatMuls between batch-merging Reshapes)."""
    x = {"q": f32(2, 3, 6, 4), "k": f32(2, 3, 6, 4), "v": f32(2, 3, 6, 4)}
    nodes = [helper.make_node("Einsum", ["q", "k"], ["s"], equation="blxd,blyd->blxy"),
             helper.make_node("Mul", ["s", "c"], ["s2"]),
             helper.make_node("Softmax", ["s2"], ["p"], axis=-1),
             helper.make_node("Einsum", ["p", "v"], ["y"], equation="bhxy,bhyd->bhxd")]
    return nodes, x, [const("c", np.float32(0.5))]


def kt_given(rank):
    """K^T as the model's input (no Transpose to undo): 3-D, or 2-D."""
    b = (6,) if rank == 3 else ()
    x = {"q": f32(*b, 5, 4), "kt": f32(*b, 4, 7), "v": f32(*b, 7, 3)}
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    return nodes, x, []


def scale_after_mask():
    nodes, x, inits = kt_given(3)
    nodes = [nodes[0], helper.make_node("Add", ["s", "m"], ["sm"]), helper.make_node("Mul", ["sm", "c"], ["s2"]),
             helper.make_node("Softmax", ["s2"], ["p"], axis=-1), nodes[2]]
    return nodes, x, [const("m", f32(1, 5, 7)), const("c", np.float32(0.7))]


def softmax_read_twice():
    nodes, x, inits = kt_given(3)
    return nodes + [helper.make_node("Identity", ["p"], ["p_out"])], x, inits


def softmax_other_axis():
    x = {"q": f32(3, 5, 4), "kt": f32(3, 4, 5), "v": f32(3, 5, 3)}
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    return nodes, x, []


def broadcast_batch():
    x = {"q": f32(1, 2, 5, 4), "kt": f32(3, 2, 4, 6), "v": f32(3, 2, 6, 3)}
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    return nodes, x, []


CASES = {  # name: (builder, fused, outputs)
    "segformer": (segformer, True, ("y",)),
    "swin": (lambda: swin(False), True, ("y",)),
    "swin-shifted": (lambda: swin(True), True, ("y",)),
    "sablock-einsum": (sablock, True, ("y",)),
    "kt-given-3d": (lambda: kt_given(3), True, ("y",)),
    "no-batch-2d": (lambda: kt_given(2), True, ("y",)),
    "scale-after-mask": (scale_after_mask, False, ("y",)),
    "softmax-read-twice": (softmax_read_twice, False, ("y", "p_out")),
    "softmax-other-axis": (softmax_other_axis, False, ("y",)),
    "broadcast-batch": (broadcast_batch, False, ("y",)),
}


def run_segrt(tmp_path, path, feeds, outputs, extra=()):
    args = [SEGRT, "run", str(path), "--quiet", *extra]
    for k, v in feeds.items():
        np.save(tmp_path / f"{k}.npy", v)
        args += ["--input", f"{k}={tmp_path / f'{k}.npy'}"]
    for o in outputs:
        args += ["--output", f"{o}={tmp_path / (o + '.out.npy')}"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return [np.load(tmp_path / (o + ".out.npy")) for o in outputs]


def profile(path, feeds, extra=()):
    shape_args = []
    for k, v in feeds.items():
        shape_args += ["--shape", f"{k}={'x'.join(map(str, v.shape))}"]
    p = subprocess.run([SEGRT, "bench", str(path), *shape_args, "--iters", "1", "--warmup", "0", "--profile", *extra],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.mark.parametrize("name", list(CASES))
def test_chain(tmp_path, name):
    build, fused, outputs = CASES[name]
    nodes, feeds, inits = build()
    path = tmp_path / "m.onnx"
    save(path, nodes, feeds, inits, outputs)
    want = ort.InferenceSession(str(path)).run(list(outputs), feeds)
    off = ["--disable-kernels", "fused-attention"]
    for extra in ((), off):
        got = run_segrt(tmp_path, path, feeds, outputs, extra)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    assert ("/fused_" in profile(path, feeds)) == fused
    assert "/fused_" not in profile(path, feeds, off)


def sdpa_numpy(q, k, v, masks, scale, kt):
    kk = k if kt else np.swapaxes(k, -1, -2)
    s = (q.astype(np.float64) @ kk.astype(np.float64)) * scale
    for m in masks:
        s = s + m
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    return (s / s.sum(axis=-1, keepdims=True)) @ v.astype(np.float64)


@pytest.mark.parametrize("kt", [0, 1])
@pytest.mark.parametrize("scale", [None, 0.3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_operator(tmp_path, kt, scale, dtype):
    """The operator from a model of domain ai.segrt: masks of lower rank and
    with broadcast dims, K as [L, D] or [D, L], the default scale
    1/sqrt(D); float32 on the CPU's kernel, float64 on the reference one;
    and as a CPU plan file (the graph goes through ONNX again)."""
    q, v = f32(2, 3, 5, 8).astype(dtype), f32(2, 3, 7, 6).astype(dtype)
    k = (f32(2, 3, 8, 7) if kt else f32(2, 3, 7, 8)).astype(dtype)
    m0, m1 = f32(3, 1, 7).astype(dtype), f32(2, 1, 5, 7).astype(dtype)
    attrs = {"k_transposed": kt}
    if scale is not None:
        attrs["scale"] = scale
    node = helper.make_node("ScaledDotProductAttention", ["q", "k", "v", "m0", "m1"], ["y"], domain="ai.segrt",
                            **attrs)
    feeds = {"q": q, "k": k, "v": v, "m0": m0, "m1": m1}
    path = tmp_path / "m.onnx"
    save(path, [node], feeds, [], domains=("ai.segrt",))
    want = sdpa_numpy(q, k, v, [m0, m1], 8 ** -0.5 if scale is None else scale, kt)
    got = run_segrt(tmp_path, path, feeds, ["y"])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    plan = tmp_path / "m.plan"
    shape_args = []
    for k_, v_ in feeds.items():
        shape_args += ["--shape", f"{k_}={'x'.join(map(str, v_.shape))}"]
    p = subprocess.run([SEGRT, "build", str(path), "--device", "cpu", "-o", str(plan), *shape_args],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    np.testing.assert_allclose(run_segrt(tmp_path, plan, feeds, ["y"])[0], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("domain,ok", [("", False), ("ai.segrt", True), ("com.example", False)])
def test_operator_domain(tmp_path, domain, ok):
    """segrt's operator only under its own domain (and ONNX's never
    under segrt's)."""
    feeds = {"q": f32(2, 5, 4), "k": f32(2, 6, 4), "v": f32(2, 6, 3)}
    node = helper.make_node("ScaledDotProductAttention", ["q", "k", "v"], ["y"], domain=domain)
    path = tmp_path / "m.onnx"
    save(path, [node], feeds, [], domains=(domain,) if domain else ())
    args = [SEGRT, "run", str(path), "--quiet", "--output", f"y={tmp_path / 'y.npy'}"]
    for k, v in feeds.items():
        np.save(tmp_path / f"{k}.npy", v)
        args += ["--input", f"{k}={tmp_path / f'{k}.npy'}"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert (p.returncode == 0) == ok, p.stderr
    if not ok:
        assert p.returncode == 2 and "does not support" in p.stderr
    relu = helper.make_node("Relu", ["q"], ["y"], domain="ai.segrt")
    save(path, [relu], {"q": feeds["q"]}, [], domains=("ai.segrt",))
    p = subprocess.run([SEGRT, "run", str(path), "--quiet", "--input", f"q={tmp_path / 'q.npy'}", "--output",
                        f"y={tmp_path / 'y.npy'}"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "does not support" in p.stderr


@pytest.mark.parametrize("bad", ["rank", "dims", "mask", "kt"])
def test_operator_refuses(tmp_path, bad):
    """Shapes that do not fit: a one-line error, exit 2."""
    q, k, v = f32(2, 5, 4), f32(2, 6, 4), f32(2, 6, 3)
    inputs, attrs = ["q", "k", "v"], {}
    feeds = {"q": q, "k": k, "v": v}
    if bad == "rank":
        feeds["k"] = f32(1, 2, 6, 4)
    elif bad == "dims":
        feeds["v"] = f32(2, 5, 3)
    elif bad == "mask":
        feeds["m"] = f32(2, 5, 5)
        inputs.append("m")
    else:
        attrs["k_transposed"] = 2
    node = helper.make_node("ScaledDotProductAttention", inputs, ["y"], domain="ai.segrt", **attrs)
    path = tmp_path / "m.onnx"
    save(path, [node], feeds, [], domains=("ai.segrt",))
    args = [SEGRT, "run", str(path), "--quiet", "--output", f"y={tmp_path / 'y.npy'}"]
    for k_, v_ in feeds.items():
        np.save(tmp_path / f"{k_}.npy", v_)
        args += ["--input", f"{k_}={tmp_path / f'{k_}.npy'}"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "ScaledDotProductAttention" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


GENERATED = opgen.case_ids(["attention_chain"])


@pytest.mark.parametrize("family,seed", GENERATED, ids=[f"{f}-{s}" for f, s in GENERATED])
def test_generated_chains_unfused(tmp_path, family, seed):
    """test_diff_ops.py's attention_chain cases (fused there where they fit)
    with the fusion off: the chains as they are."""
    case = opgen.make_case(family, seed)
    opgen.check_case(case, tmp_path, f"{family}-{seed}",
                     f"SEGRT_DIFF_SEED={seed} pytest test_fused_attention.py",
                     extra=["--disable-kernels", "fused-attention"])
