"""Attention on the GPU: segrt's ScaledDotProductAttention (domain
ai.segrt, the node graph/pass_attention.c makes of MatMul, Softmax, MatMul
chains) on its flash-style kernels (src/backend/cuda/k_attention.cu):
"segrt attention mma" (tensor cores, float16/bfloat16, head dims up to
128) and "segrt attention" (float32 math, any size; float64 in float64).

  - the operator itself over a grid of sizes: one key or row, sizes that
    are no multiple of the kernels' tiles, Swin's window (343 tokens, head
    dim 16 or 32), UNETR's (216 tokens, 64), SegFormer's long queries over
    reduced keys, head dims 96/80 and 128 (the widest tensor-core tile),
    160/200 (past it: head dims in chunks, two value chunks), K given as K
    or K^T, no mask, one broadcast mask, a relative position bias and a
    shifted window's mask together, a row masked to -inf everywhere (NaN,
    as the reference's softmax), Q and V read through a Transpose (strided
    views: element loads instead of 16-byte ones), float64 inputs;
    against numpy in float64: fp32 relative L2 <= 1e-5, fp16 and bf16 PSNR
    >= 45 dB, NaN at the same places; at fp16 and bf16 the tensor-core
    kernel also against the float32-math one (--disable-kernels
    mma-attention), both against numpy;
  - the chains of test_fused_attention.py (SegFormer, Swin and its
    shifted window, MONAI's SABlock Einsums) and a Swin block of real
    size, fused and with --disable-kernels fused-attention, against the
    CPU engine;
  - profiles: the kernel each case should take is the one that ran; a
    model whose batch dim is symbolic is fused when the plan binds it (the
    CUDA engine's own specialization runs the pass)."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import segrt_capi as sc
import test_fused_attention as tfa
from gpu_judge import bench_profile, run_engine
from gpu_util import fmt_db, need_bf16, psnr, special_mismatch
from onnx_util import rel_l2

FP32_L2 = 1e-5
HALF_PSNR_DB = 45.0
RNG = np.random.default_rng(23)


def sdpa_model(q, k, v, masks, scale, kt, q_perm=None, v_perm=None, symbolic=False):
    """ScaledDotProductAttention on graph inputs q, k, v and the masks
    (initializers); q_perm / v_perm: the input is given permuted and a
    Transpose brings it to [batch..., S, D] (a strided view on the GPU)."""
    elem = helper.np_dtype_to_tensor_dtype(q.dtype)
    nodes, ins, feeds = [], [], {}
    names = []
    for name, x, perm in (("q", q, q_perm), ("k", k, None), ("v", v, v_perm)):
        if perm is None:
            feeds[name] = x
            names.append(name)
        else:
            inv = list(np.argsort(perm))
            feeds[name] = np.ascontiguousarray(np.transpose(x, inv))
            nodes.append(helper.make_node("Transpose", [name], [name + "_t"], perm=list(perm)))
            names.append(name + "_t")
    inits = []
    for i, m in enumerate(masks):
        inits.append(numpy_helper.from_array(m, f"m{i}"))
        names.append(f"m{i}")
    attrs = {"scale": float(scale), "k_transposed": int(kt)}
    nodes.append(helper.make_node("ScaledDotProductAttention", names, ["y"], domain="ai.segrt", **attrs))
    for name, x in feeds.items():
        shape = list(x.shape)
        if symbolic:
            shape[0] = "batch"
        ins.append(helper.make_tensor_value_info(name, elem, shape))
    out = helper.make_tensor_value_info("y", elem, None)
    g = helper.make_graph(nodes, "sdpa", ins, [out], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.segrt", 1)])
    m.ir_version = 8
    return m, feeds


def reference(q, k, v, masks, scale, kt):
    return tfa.sdpa_numpy(q, k, v, masks, scale, kt)


def case(batch, S, L, D, Dv, masks="none", kt=False, dtype=np.float32, strided=False, dead_row=False):
    """Inputs, masks and attributes of one case (batch: the batch dims)."""
    b = list(batch)
    q = RNG.standard_normal(b + [S, D]).astype(dtype)
    k = RNG.standard_normal(b + ([D, L] if kt else [L, D])).astype(dtype)
    # V positive: the weighted sums do not cancel (test_diff_ops' reason).
    v = RNG.uniform(0.5, 1.5, b + [L, Dv]).astype(dtype)
    ms = []
    if masks == "one":
        ms.append(RNG.standard_normal([S, L]).astype(dtype))
    elif masks == "swin":  # a bias per head, a window's mask per window
        assert len(b) == 2
        ms.append(RNG.standard_normal([1, b[1], S, L]).astype(dtype))
        ms.append(np.where(RNG.random([b[0], 1, S, L]) < 0.3, -100.0, 0.0).astype(dtype))
    if dead_row:
        m = np.zeros([S, L], dtype)
        m[S // 2, :] = -np.inf
        ms.append(m)
    scale = 1.0 / np.sqrt(D)
    return dict(q=q, k=k, v=v, masks=ms, scale=scale, kt=kt, strided=strided)


OP_CASES = {
    "one-row-one-key": case([1], 1, 1, 1, 1),
    "odd-sizes": case([3], 70, 45, 20, 12, masks="one"),
    "swin-window": case([4, 3], 343, 343, 16, 16, masks="swin"),
    "swin-window-d32": case([2, 2], 343, 343, 32, 32, masks="swin", strided=True),
    "unetr": case([2, 12], 216, 216, 64, 64),
    "segformer-reduced-keys": case([2, 1], 1024, 64, 32, 32),
    "kt-given": case([5], 100, 130, 40, 24, kt=True, masks="one"),
    "head-96-80": case([2], 90, 77, 96, 80),
    "head-128": case([2], 130, 129, 128, 128, masks="one"),
    "head-160-200": case([2], 40, 50, 160, 200),
    "no-batch": case([], 33, 65, 8, 8),
    "dead-row": case([2], 17, 40, 16, 16, dead_row=True),
    "float64": case([2], 50, 70, 24, 24, masks="one", dtype=np.float64),
}


def op_model(c, symbolic=False):
    q_perm = v_perm = None
    if c["strided"]:  # q and v given as [b0, S, b1, D] and transposed back
        q_perm = v_perm = [0, 2, 1, 3]
    return sdpa_model(c["q"], c["k"], c["v"], c["masks"], c["scale"], c["kt"], q_perm, v_perm, symbolic)


def expect_kernel(c, precision):
    D, Dv = c["q"].shape[-1], c["v"].shape[-1]
    half = precision in ("fp16", "bf16") and c["q"].dtype == np.float32
    return "segrt attention mma" if half and max(D, Dv) <= 128 else "segrt attention"


def judge(name, got, want, precision):
    bad = special_mismatch(got, want)
    assert bad is None, f"{name} {precision}: {bad}"
    fin = np.isfinite(want)
    if precision == "fp32" or got.dtype == np.float64:
        err = rel_l2(got[fin], want[fin])
        print(f"\n{name} {precision}: rel L2 {err:.2e}")
        assert err <= FP32_L2, f"{name} {precision}: rel L2 {err:.2e} > {FP32_L2}"
    else:
        db = psnr(got, want)
        print(f"\n{name} {precision}: PSNR {fmt_db(db)}")
        assert db >= HALF_PSNR_DB, f"{name} {precision}: PSNR {fmt_db(db)} < {HALF_PSNR_DB}"


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("name", list(OP_CASES))
def test_sdpa_op(name, precision):
    need_bf16(precision)
    c = OP_CASES[name]
    m, feeds = op_model(c)
    want = reference(c["q"], c["k"], c["v"], c["masks"], c["scale"], c["kt"])
    model = sc.Model.from_bytes(m, name=f"{name}.onnx")
    got = run_engine(model, feeds, "cuda", precision)[0]
    assert got.shape == want.shape
    judge(name, np.asarray(got), want, precision)
    if expect_kernel(c, precision).endswith("mma"):
        other = run_engine(model, feeds, "cuda", precision, disabled="mma-attention")[0]
        judge(name + " (float32 math)", np.asarray(other), want, precision)


@pytest.mark.parametrize("name", ["odd-sizes", "head-128", "head-160-200", "float64"])
def test_sdpa_kernel_taken(tmp_path, name):
    c = OP_CASES[name]
    m, feeds = op_model(c)
    for precision in ("fp32", "fp16"):
        prof = bench_profile(m, feeds, tmp_path, precision)
        want = expect_kernel(c, precision)
        assert want in prof, prof
        if not want.endswith("mma"):
            assert "segrt attention mma" not in prof, prof


def test_symbolic_batch_fused_at_plan(tmp_path):
    """The engine cannot fuse a chain whose batch dim is symbolic; the CUDA
    engine's specialization, with the dim bound, does."""
    nodes, feeds, inits = tfa.segformer()
    elem = TensorProto.FLOAT
    ins = [helper.make_tensor_value_info(k, elem, ["batch"] + list(v.shape[1:])) for k, v in feeds.items()]
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", elem, None)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    prof = bench_profile(m, feeds, tmp_path, "fp32")
    assert "segrt attention" in prof, prof
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    import onnxruntime as ort
    want = ort.InferenceSession(str(path)).run(["y"], feeds)[0]
    got = run_engine(sc.Model.from_bytes(m, name="symbolic.onnx"), feeds, "cuda", "fp32")[0]
    judge("symbolic-batch", np.asarray(got), want, "fp32")


def swin_block(B=2, W=8, H=3, N=343, D=32):
    """A shifted-window attention of real size (MONAI's WindowAttention at
    feature size 96): the bias per head, the window mask at [B, W, H, N, N]."""
    x = {"q": RNG.standard_normal((B * W, H, N, D)).astype(np.float32),
         "k": RNG.standard_normal((B * W, H, N, D)).astype(np.float32),
         "v": RNG.standard_normal((B * W, H, N, D)).astype(np.float32)}
    mask = np.where(RNG.random((1, W, 1, N, N)) < 0.2, -100.0, 0.0).astype(np.float32)
    c = tfa.const
    inits = [c("scale", np.float32(D ** -0.5)), c("bias", RNG.standard_normal((1, H, N, N)).astype(np.float32)),
             c("mask", mask), tfa.ints("s5", [B, W, H, N, N]), tfa.ints("s4", [B * W, H, N, N])]
    nodes = [helper.make_node("Mul", ["q", "scale"], ["qs"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["qs", "kt"], ["s"]),
             helper.make_node("Add", ["s", "bias"], ["sb"]),
             helper.make_node("Reshape", ["sb", "s5"], ["r5"]),
             helper.make_node("Add", ["r5", "mask"], ["m5"]),
             helper.make_node("Reshape", ["m5", "s4"], ["sm"]),
             helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["a"]),
             helper.make_node("Transpose", ["a"], ["y"], perm=[0, 2, 1, 3])]
    return nodes, x, inits


CHAINS = {name: spec[0] for name, spec in tfa.CASES.items() if spec[1]}
CHAINS["swin-block-343"] = swin_block


def chain_model(build):
    nodes, feeds, inits = build()
    elem = TensorProto.FLOAT
    ins = [helper.make_tensor_value_info(k, elem, list(v.shape)) for k, v in feeds.items()]
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", elem, None)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, feeds


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("name", list(CHAINS))
def test_chain_fused_and_not(name, precision):
    need_bf16(precision)
    m, feeds = chain_model(CHAINS[name])
    model = sc.Model.from_bytes(m, name=f"{name}.onnx")
    want = run_engine(model, feeds, "cpu")[0]
    for disabled in (None, "fused-attention"):
        got = np.asarray(run_engine(model, feeds, "cuda", precision, disabled=disabled)[0])
        judge(f"{name} ({'unfused' if disabled else 'fused'})", got, want, precision)


def test_chain_profile(tmp_path):
    m, feeds = chain_model(swin_block)
    assert "segrt attention mma" in bench_profile(m, feeds, tmp_path, "fp16")
    off = bench_profile(m, feeds, tmp_path, "fp16", disabled="fused-attention")
    assert "segrt attention" not in off, off
