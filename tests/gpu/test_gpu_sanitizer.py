"""The CUDA engine under NVIDIA's compute-sanitizer: one fp16 run of
basicunet2d_tiny through the CLI under memcheck (out-of-bounds and
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

import pytest

from conftest import SEGRT

NAME = "basicunet2d_tiny"


def sanitizer():
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for d in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if d and (pathlib.Path(d) / "bin" / "compute-sanitizer").is_file():
            return str(pathlib.Path(d) / "bin" / "compute-sanitizer")
    return None


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_compute_sanitizer(models, tmp_path, tool):
    cs = sanitizer()
    if cs is None:
        pytest.skip("compute-sanitizer not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
    out = tmp_path / "out.npy"
    cmd = [cs, "--tool", tool, "--error-exitcode", "9", SEGRT, "run", str(models / f"{NAME}.onnx"),
           "--input", str(models / f"{NAME}.in.npy"), "--output", str(out), "--device", "cuda",
           "--precision", "fp16", "--autotune", "0", "--no-cache", "-q"]
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
