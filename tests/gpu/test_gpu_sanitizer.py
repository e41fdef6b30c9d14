"""The CUDA engine under NVIDIA's compute-sanitizer: one fp16 run of
basicunet2d_tiny, one of a generated UNet3D spleen tail (its
ConvTranspose on the kernel-3 tensor-core kernel, its last layers on the
few-channel kernel), one of a generated BasicUNet last level whose
upsampling is folded into the next layer's halo (test_gpu_up_fold.py; on
Hopper), and two 3-D sliding-window jobs over a host image
(one whose windows are gathered and accumulated in float4s, one of odd
sizes with padding, element by element), through the CLI under memcheck (out-of-bounds and
misaligned device accesses, API errors) and under racecheck (shared-memory
hazards in segrt's kernels). The build is untimed (--autotune 0): timing
cuDNN's configurations under racecheck, which instruments every one of
their shared-memory accesses, takes longer than the suite allows, and
the tools are here for segrt's kernels. Passes when the tool exits 0 and reports
"ERROR SUMMARY: 0 errors"; skipped, with the reason, where compute-sanitizer
is not installed."""
import os
import pathlib
import shutil
import subprocess

import numpy as np
import onnx
import pytest

from conftest import SEGRT
from test_gpu_small_conv import chain_spleen
from test_gpu_up_fold import decoder
from test_sliding_window import make_convnet

NAMES = ["basicunet2d_tiny", "spleen-tail", "up-fold", "sw-aligned", "sw-odd"]
# Generated models: name -> (the model and its feeds).
GENERATED = {
    "spleen-tail": lambda: chain_spleen(11, n=2, c0=3, side=(5, 9, 19)),
    "up-fold": lambda: decoder(12, [2, 3, 36, 52]),
}
# Sliding-window jobs: image dims (N, C, D, H, W), then `segrt run`'s options.
SW_JOBS = {
    "sw-aligned": ((2, 2, 28, 16, 32), ["--roi", "8,8,16", "--overlap", "0.5", "--sw-batch", "5"]),
    "sw-odd": ((1, 2, 13, 9, 30), ["--roi", "8,12,16", "--overlap", "0.5", "--sw-batch", "3", "--tta", "mirror"]),
}


def model_files(name, models, tmp_path):
    """The model and input files of `name`, shipped or generated here, and
    the run's extra options."""
    if name in SW_JOBS:
        dims, args = SW_JOBS[name]
        model = make_convnet(tmp_path / "convnet.onnx", 3, dims[1], 3, seed=5)
        np.save(tmp_path / "image.npy", np.random.default_rng(5).standard_normal(dims).astype(np.float32))
        return model, tmp_path / "image.npy", args + ["--blend", "gaussian", "--output-kind", "labels"]
    if name not in GENERATED:
        return models / f"{name}.onnx", models / f"{name}.in.npy", []
    m, feeds = GENERATED[name]()
    onnx.save(m, str(tmp_path / f"{name}.onnx"))
    np.save(tmp_path / f"{name}.in.npy", feeds["x"])
    return tmp_path / f"{name}.onnx", tmp_path / f"{name}.in.npy", []


def sanitizer():
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for d in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if d and (pathlib.Path(d) / "bin" / "compute-sanitizer").is_file():
            return str(pathlib.Path(d) / "bin" / "compute-sanitizer")
    return None


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_compute_sanitizer(models, tmp_path, tool, name):
    cs = sanitizer()
    if cs is None:
        pytest.skip("compute-sanitizer not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
    out = tmp_path / "out.npy"
    model, image, extra = model_files(name, models, tmp_path)
    cmd = [cs, "--tool", tool, "--error-exitcode", "9", SEGRT, "run", str(model),
           "--input", str(image), "--output", str(out), "--device", "cuda",
           "--precision", "fp16", "--autotune", "0", "--no-cache", "-q", *extra]
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=540, env=env)
    text = p.stdout + p.stderr
    tail = "\n".join(text.splitlines()[-40:])
    print(f"\ncompute-sanitizer --tool {tool}: exit {p.returncode}\n{tail}")
    assert p.returncode == 0, f"{tool}: exit {p.returncode} ({' '.join(cmd)})\n{tail}"
    # memcheck ends with "ERROR SUMMARY: 0 errors"; racecheck with
    # "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)".
    clean = "ERROR SUMMARY: 0 errors" if tool == "memcheck" else "RACECHECK SUMMARY: 0 hazards displayed (0 errors"
    assert clean in text, f"{tool}: no clean error summary\n{tail}"
    assert out.is_file(), f"{tool}: the run wrote no output"
