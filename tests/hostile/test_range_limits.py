"""Sizes past what a kernel indexes are clean errors, never a crash (issue
36, item 6). Every dim and element count that reaches 32-bit indexing
(oneDNN's primitives, segrt's kernels, the sliding window's arithmetic) is
checked before it gets there: the run exits 2 with one line naming the
file, the node or input and the limit.

Each case is self-contained: it builds its model in tmp_path and runs the
segrt command on it. None depends on the machine's memory: every size here
is refused before anything of that size is allocated. The same cases run
under the sanitizer build (SEGRT_SANITIZED=1), where an overflow or a
division by zero would stop the process."""
import os

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

import conftest
from conftest import SANITIZED, changes, snapshot
from onnx_util import init, save_model, tensor_input

ROOT = None


@pytest.fixture(autouse=True)
def sandbox(tmp_path):
    """Every run of a case happens in its tmp_path, where a refused run
    must change nothing (the suite's rule)."""
    global ROOT
    ROOT = tmp_path
    yield
    ROOT = None


def run_segrt(*args, **kw):
    before = snapshot(ROOT) if ROOT else None
    p = conftest.run_segrt(*args, **kw)
    if before is not None and p.returncode != 0:
        after = snapshot(ROOT)
        assert after == before, f"a refused run changed files: {changes(before, after)}"
    return p

# What the sanitizers, the C library, a trapping division or a failing
# library call (oneDNN's "oneDNN ... failed: runtime error") print.
CRASH_WORDS = ("AddressSanitizer", "UndefinedBehaviorSanitizer", "runtime error", "internal error",
               "Floating point exception", "Segmentation fault", " failed: ")


def expect_limit(p, file_name, *words):
    """exit 2, one line on stderr starting with `segrt: `, naming the file
    and each of words (case-insensitive), and no sign of a crash."""
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, f"exit {p.returncode}: {p.stderr}"
    assert len(lines) == 1, f"want one line, got: {p.stderr!r}"
    msg = lines[0]
    assert msg.startswith("segrt: "), msg
    assert os.path.basename(str(file_name)) in msg, msg
    for w in words:
        assert w.lower() in msg.lower(), f"{w!r} not in {msg!r}"
    for w in CRASH_WORDS:
        assert w not in p.stderr, f"{w!r} in {p.stderr!r}"
    return msg


def image(tmp_path, shape=(1, 1, 64, 64)):
    path = tmp_path / "img.npy"
    np.save(path, np.random.default_rng(0).random(shape, dtype=np.float32))
    return path


# --- sliding windows larger than 32-bit indexing -----------------------------
# MONAI's semantics: a window larger than the image pads the image up to the
# window, so each of these asks for an enormous tensor.

@pytest.mark.parametrize("roi,words", [
    ("2147483648,64", ("image", "2147483648", "2^31", "32 bits")),
    ("4294967296,64", ("image", "4294967296", "2^31", "32 bits")),
    ("64,2147483648", ("image", "2147483648", "2^31", "32 bits")),
    ("65536,65536", ("image", "GiB", "32 bits")),
    ("100000,100000", ("image", "GiB", "32 bits")),
])
def test_huge_window_cpu(tmp_path, models, roi, words):
    tiny = models / "basicunet2d_tiny.onnx"
    p = run_segrt("run", tiny, image(tmp_path), "-o", tmp_path / "out.npy", "--roi", roi)
    expect_limit(p, tiny, *words)
    assert not (tmp_path / "out.npy").exists()


def test_window_past_2_40(tmp_path, models):
    """Past any int64 product of voxels, batch and channels: refused before
    the pipeline multiplies anything."""
    tiny = models / "basicunet2d_tiny.onnx"
    p = run_segrt("run", tiny, image(tmp_path), "-o", tmp_path / "out.npy", "--roi", "1099511627777,1")
    expect_limit(p, tiny, "1099511627777")


def test_windows_whose_product_overflows(tmp_path, models):
    """Each side within 2^40, the window's voxels past it (2^60)."""
    tiny = models / "basicunet2d_tiny.onnx"
    p = run_segrt("run", tiny, image(tmp_path), "-o", tmp_path / "out.npy", "--roi", "1073741824,1073741824")
    expect_limit(p, tiny)


# --- shapes computed inside the model -------------------------------------------

def resize_then_conv(path, scales):
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["r"], mode="nearest", name="resize"),
             helper.make_node("Conv", ["r", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv")]
    save_model(path, nodes, [tensor_input("x", [1, 1, 2, 2])], [tensor_input("y", None)],
               [init("scales", np.array(scales, np.float32)), init("w", np.ones((4, 1, 3, 3), np.float32))],
               check=False)


def test_resize_to_2_31_rows_before_conv(tmp_path):
    """Issue 36's SIGFPE: 2 rows resized by 2^30 make 2^31 rows, which
    oneDNN's convolution would take in 32-bit ints."""
    model = tmp_path / "resize_rows.onnx"
    resize_then_conv(model, [1, 1, 2.0 ** 30, 1])
    np.save(tmp_path / "x.npy", np.ones((1, 1, 2, 2), np.float32))
    p = run_segrt("run", model, "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy")
    expect_limit(p, model, "resize", "2147483648", "2^31", "32 bits")


def test_resize_to_4_gib_before_conv(tmp_path):
    """Each dim well below 2^31, the tensor 16 GiB: over what oneDNN's
    kernels index in bytes."""
    model = tmp_path / "resize_bytes.onnx"
    resize_then_conv(model, [1, 1, 32768, 32768])
    np.save(tmp_path / "x.npy", np.ones((1, 1, 2, 2), np.float32))
    p = run_segrt("run", model, "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy")
    expect_limit(p, model, "resize", "GiB", "32 bits")


def conv_model(path, x_shape, w_shape, **attrs):
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)]
    save_model(path, nodes, [tensor_input("x", x_shape)], [tensor_input("y", None)],
               [init("w", np.ones(w_shape, np.float32))], check=False)


@pytest.mark.parametrize("attrs,words", [
    # 2^31 zeros on each side: a 2^32 + 1-row output.
    (dict(pads=[2 ** 31, 0, 2 ** 31, 0]), ("conv", "2^31", "32 bits")),
    # 2^20 on each side of both axes: 1 TiB of output, each dim below 2^31.
    (dict(pads=[2 ** 20] * 4), ("conv", "GiB", "32 bits")),
    # A dilation that stretches a 2-tap kernel over 2^31 rows, padded to fit.
    (dict(kernel_shape=[2, 1], dilations=[2 ** 31, 1], pads=[2 ** 31, 0, 2 ** 31, 0]), ("conv", "2^31")),
])
def test_huge_conv_pads_and_dilations(tmp_path, attrs, words):
    model = tmp_path / "conv_pads.onnx"
    w_shape = (1, 1, 2, 1) if "kernel_shape" in attrs else (1, 1, 1, 1)
    conv_model(model, [1, 1, 4, 4], w_shape, **attrs)
    np.save(tmp_path / "x.npy", np.ones((1, 1, 4, 4), np.float32))
    p = run_segrt("run", model, "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy")
    expect_limit(p, model, *words)


@pytest.mark.parametrize("attrs", [
    dict(pads=[2 ** 62, 0, 2 ** 62, 0]),                    # pads whose sum overflows int64
    dict(strides=[2 ** 62, 1]),                             # a stride past any dim
    dict(dilations=[2 ** 62, 1], kernel_shape=[2, 1]),      # an extent that overflows
    dict(pads=[-(2 ** 62), 0, 0, 0]),                       # negative pads
    dict(strides=[0, 1]),                                   # a stride of 0 (divides)
    dict(dilations=[0, 1]),
    dict(group=0),                                          # channels divided by 0 groups
])
def test_conv_attributes_that_overflow_or_divide(tmp_path, attrs):
    model = tmp_path / "conv_attr.onnx"
    w_shape = (1, 1, 2, 1) if "kernel_shape" in attrs else (1, 1, 1, 1)
    conv_model(model, [1, 1, 4, 4], w_shape, **attrs)
    np.save(tmp_path / "x.npy", np.ones((1, 1, 4, 4), np.float32))
    p = run_segrt("run", model, "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy")
    expect_limit(p, model, "conv")


# --- dims of 0 where something divides by them ------------------------------------

def run_one(tmp_path, name, nodes, x_shape, inits=(), x_dtype=TP.FLOAT, out_dtype=TP.FLOAT):
    model = tmp_path / f"{name}.onnx"
    save_model(model, nodes, [tensor_input("x", x_shape, x_dtype)], [tensor_input("y", None, out_dtype)],
               list(inits), check=False)
    np_dtype = {TP.FLOAT: np.float32, TP.INT64: np.int64}[x_dtype]
    np.save(tmp_path / "x.npy", np.ones(x_shape, np_dtype))
    return model, run_segrt("run", model, "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy")


EMPTY_CASES = {
    # name: (nodes, input shape, initializers)
    "conv_zero_channels": ([helper.make_node("Conv", ["x", "w"], ["y"], name="n")], [1, 0, 4, 4],
                           [init("w", np.ones((2, 0, 1, 1), np.float32))]),
    "conv_zero_rows": ([helper.make_node("Conv", ["x", "w"], ["y"], name="n")], [1, 1, 0, 4],
                       [init("w", np.ones((2, 1, 1, 1), np.float32))]),
    "conv_zero_batch": ([helper.make_node("Conv", ["x", "w"], ["y"], name="n", pads=[1, 1, 1, 1])], [0, 1, 4, 4],
                        [init("w", np.ones((2, 1, 3, 3), np.float32))]),
    "conv_transpose_zero_rows": ([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="n", strides=[2, 2])],
                                 [1, 1, 0, 4], [init("w", np.ones((1, 2, 2, 2), np.float32))]),
    "instance_norm_zero_spatial": ([helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], name="n")],
                                   [1, 2, 0, 3], [init("s", np.ones(2, np.float32)),
                                                  init("b", np.zeros(2, np.float32))]),
    "group_norm_zero_groups": ([helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], name="n",
                                                 num_groups=0)],
                               [1, 2, 3, 3], [init("s", np.ones(2, np.float32)), init("b", np.zeros(2, np.float32))]),
    "max_pool_zero_rows": ([helper.make_node("MaxPool", ["x"], ["y"], name="n", kernel_shape=[1, 1])], [1, 2, 0, 3],
                           []),
    "avg_pool_zero_batch": ([helper.make_node("AveragePool", ["x"], ["y"], name="n", kernel_shape=[2, 2])],
                            [0, 2, 4, 4], []),
    "global_pool_zero_spatial": ([helper.make_node("GlobalAveragePool", ["x"], ["y"], name="n")], [1, 2, 0, 3], []),
    "resize_empty": ([helper.make_node("Resize", ["x", "", "sc"], ["y"], name="n", mode="linear")], [1, 1, 0, 4],
                     [init("sc", np.array([1, 1, 2, 2], np.float32))]),
    "softmax_zero_axis": ([helper.make_node("Softmax", ["x"], ["y"], name="n", axis=1)], [2, 0, 3], []),
    "reshape_infer_from_zero": ([helper.make_node("Reshape", ["x", "s"], ["y"], name="n")], [2, 0, 3],
                                [init("s", np.array([-1, 0], np.int64))]),
    "depth_to_space_zero_block": ([helper.make_node("DepthToSpace", ["x"], ["y"], name="n", blocksize=0)],
                                  [1, 4, 2, 2], []),
    "space_to_depth_zero_block": ([helper.make_node("SpaceToDepth", ["x"], ["y"], name="n", blocksize=0)],
                                  [1, 1, 4, 4], []),
    "split_zero_outputs": ([helper.make_node("Split", ["x"], ["y"], name="n", axis=1, num_outputs=1)], [1, 0, 3],
                           []),
    "tile_by_zero": ([helper.make_node("Tile", ["x", "r"], ["y"], name="n")], [1, 2, 3],
                     [init("r", np.array([0, 2, 1], np.int64))]),
    "matmul_zero_inner": ([helper.make_node("MatMul", ["x", "w"], ["y"], name="n")], [2, 0],
                          [init("w", np.ones((0, 3), np.float32))]),
    "layer_norm_zero_axis": ([helper.make_node("LayerNormalization", ["x", "s"], ["y"], name="n", axis=-1)],
                             [2, 0], [init("s", np.ones(0, np.float32))]),
    "reduce_mean_empty": ([helper.make_node("ReduceMean", ["x"], ["y"], name="n", keepdims=1)], [2, 0, 3], []),
}


@pytest.mark.parametrize("name", sorted(EMPTY_CASES))
def test_zero_dims_never_trap(tmp_path, name):
    """A dim of 0 is either computed (an empty result, or the op's value
    over nothing) or refused with a message; it never divides by zero."""
    nodes, shape, inits = EMPTY_CASES[name]
    opset = 21 if name.startswith("group_norm") else 18
    model = tmp_path / f"{name}.onnx"
    save_model(model, nodes, [tensor_input("x", shape)], [tensor_input("y", None)], list(inits), opset=opset,
               check=False)
    np.save(tmp_path / "x.npy", np.ones(shape, np.float32))
    p = run_segrt("run", model, "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy")
    for w in CRASH_WORDS:
        assert w not in p.stderr, f"{w!r} in {p.stderr!r}"
    if p.returncode == 0:
        assert (tmp_path / "y.npy").exists()
    else:
        expect_limit(p, model)


# --- the library's sliding-window API, without the command line ------------------
# Through ctypes: a sanitized libsegrt cannot be loaded into an uninstrumented
# Python, so under the sanitizer build tests/unit/test_range_limits.c covers
# the same calls.
API = pytest.mark.skipif(SANITIZED, reason="the sanitized library does not load into Python; "
                         "tests/unit/test_range_limits.c covers the API there")

class _Shape:
    """An image described by dtype and dims alone (segrt_window_input_dims
    reads no data)."""

    def __init__(self, shape):
        self.dtype = np.dtype(np.float32)
        self.shape = shape


def identity_engine(tmp_path, sc):
    """A CPU engine for 1x1x4x4 windows that returns them."""
    path = tmp_path / "id.onnx"
    save_model(path, [helper.make_node("Identity", ["x"], ["y"])], [tensor_input("x", ["n", 1, "h", "w"])],
               [tensor_input("y", ["n", 1, "h", "w"])])
    with sc.Model.load(str(path)) as m, sc.BuildOptions(shapes={"x": (1, 1, 4, 4)}) as bo:
        return sc.Engine.build(m, bo)


@API
@pytest.mark.parametrize("roi", [(2 ** 30, 2 ** 30), (2 ** 40, 2), (2 ** 21, 2 ** 20)])
def test_window_api_run_refuses_huge_windows(tmp_path, roi):
    """segrt_window_run refuses a window (or the image padded to it) past
    2^40 voxels before multiplying anything, whoever calls it: the engine's
    shapes are not even asked for."""
    import segrt_capi as sc
    with identity_engine(tmp_path, sc) as eng, eng.context() as ctx, sc.WindowOptions(roi) as o:
        with pytest.raises(sc.SegrtError) as e:
            o.run(ctx, np.ones((1, 1, 4, 4), np.float32))
    assert e.value.status == sc.ERROR_INVALID_ARGUMENT, str(e.value)
    assert "2^40" in str(e.value), str(e.value)


@API
def test_window_api_options_refuse_a_side_past_2_40():
    import segrt_capi as sc
    with pytest.raises(sc.SegrtError) as e:
        sc.WindowOptions((2 ** 41, 1))
    assert e.value.status == sc.ERROR_INVALID_ARGUMENT, str(e.value)
    assert "2^40" in str(e.value), str(e.value)


@API
def test_window_api_input_dims_refuses_overflowing_images():
    """An image whose dims multiply past 64-bit byte counts (described, not
    allocated: segrt_window_input_dims reads no data)."""
    import segrt_capi as sc
    with sc.WindowOptions((4, 4)) as o:
        with pytest.raises(sc.SegrtError) as e:
            o.input_dims(_Shape((2 ** 31, 2 ** 31, 2 ** 31, 2 ** 31)))
    assert e.value.status == sc.ERROR_INVALID_ARGUMENT, str(e.value)
    assert "64-bit" in str(e.value), str(e.value)


# --- constant folding from a tiny file ---------------------------------------------

def test_folding_a_tiny_file_stays_small(tmp_path):
    """A 1 KB model chaining 40 Adds over a 64 MiB ConstantOfShape: each
    fold is under the per-node limit, and before the fold budget the chain
    held 2.5 GB while `segrt info --optimized` ran. Now folding stops at the
    budget (the rest is left to run time) and the command's peak memory
    stays a fraction of that."""
    import subprocess
    import sys
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["c0"],
                              value=helper.make_tensor("v", TP.FLOAT, [1], [1.0]))]
    for i in range(40):
        nodes.append(helper.make_node("Add", [f"c{i}", f"c{i}"], [f"c{i + 1}"]))
    nodes += [helper.make_node("ReduceSum", ["c40"], ["r"], keepdims=0),
              helper.make_node("Add", ["x", "r"], ["y"])]
    model = tmp_path / "fold_chain.onnx"
    save_model(model, nodes, [tensor_input("x", [1])], [tensor_input("y", [1])],
               [init("shape", np.array([16 << 20], np.int64))])
    assert model.stat().st_size < 2048
    # The peak resident memory of segrt alone, measured by a child Python.
    probe = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
             "sys.stderr.write(p.stderr)")
    from conftest import SEGRT
    p = subprocess.run([sys.executable, "-c", probe, SEGRT, "info", str(model), "--optimized"],
                       capture_output=True, text=True, timeout=600)
    rc, peak_kb = map(int, p.stdout.split())
    assert rc == 0, p.stderr
    assert peak_kb < 1024 * 1024, f"segrt info --optimized peaked at {peak_kb / 1024:.0f} MiB"
