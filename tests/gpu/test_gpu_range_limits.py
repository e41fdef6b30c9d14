"""Sizes past what the CUDA backend indexes are clean errors (issue 36,
item 6), as tests/python/test_range_limits.py checks them on the CPU:
every tensor of a CUDA plan has dims below 2^31 (segrt's kernels keep
per-axis sizes in 32 bits, cuDNN's descriptors too), checked per node
before its builder runs. Each case is refused at plan build, before
anything of its size is allocated, so none depends on the GPU's memory."""
import os

import numpy as np
import pytest
from onnx import helper

from conftest import run_segrt
from onnx_util import init, save_model, tensor_input

CRASH_WORDS = ("AddressSanitizer", "runtime error", "internal error", "Segmentation fault", "illegal",
               "cudaError", "CUDNN_STATUS")


def expect_limit(p, file_name, *words):
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, f"exit {p.returncode}: {p.stderr}"
    assert len(lines) == 1, f"want one line, got: {p.stderr!r}"
    msg = lines[0]
    assert os.path.basename(str(file_name)) in msg, msg
    for w in words:
        assert w.lower() in msg.lower(), f"{w!r} not in {msg!r}"
    for w in CRASH_WORDS:
        assert w not in p.stderr, f"{w!r} in {p.stderr!r}"


@pytest.mark.parametrize("roi", ["2147483648,64", "64,4294967296"])
def test_gpu_huge_window(tmp_path, models, roi):
    tiny = models / "basicunet2d_tiny.onnx"
    np.save(tmp_path / "img.npy", np.zeros((1, 1, 64, 64), np.float32))
    p = run_segrt("run", tiny, tmp_path / "img.npy", "-o", tmp_path / "out.npy", "--roi", roi,
                  "--device", "cuda", "--no-cache")
    expect_limit(p, tiny, "2^31", "32 bits")


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_gpu_resize_to_2_31_rows_before_conv(tmp_path, precision):
    model = tmp_path / "resize_rows.onnx"
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["r"], mode="nearest", name="resize"),
             helper.make_node("Conv", ["r", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv")]
    save_model(model, nodes, [tensor_input("x", [1, 1, 2, 2])], [tensor_input("y", None)],
               [init("scales", np.array([1, 1, 2.0 ** 30, 1], np.float32)),
                init("w", np.ones((4, 1, 3, 3), np.float32))], check=False)
    np.save(tmp_path / "x.npy", np.ones((1, 1, 2, 2), np.float32))
    p = run_segrt("run", model, "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy",
                  "--device", "cuda", "--precision", precision, "--no-cache")
    expect_limit(p, model, "resize", "2147483648", "2^31")
