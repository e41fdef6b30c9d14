"""The CUDA backend's volume preprocessing operations (backend_volume.h)
against the CPU backend's, through the C tool test_gpu_volume_ops (built
with the CUDA tree from tests/gpu/test_gpu_volume_ops.c: the operations
are internal, out of the C API's and Python's reach). The tool draws its
cases from a seed, prints one line per case with the largest difference
and its tolerance, checks that every CUDA result repeats bit for bit, and
exits 1 when a case fails; here it runs at two seeds, and once more under
compute-sanitizer's memcheck and racecheck on its smaller cases, where
the sanitizer is installed.

The tool is looked for in $SEGRT_GPU_VOLUME_OPS, then beside the segrt
binary ($SEGRT: scripts/gpu-carry.sh's archive, given it in
GPU_CARRY_TESTS), then in the build tree's tests/ beside it. A GPU machine
without it fails, naming the places looked at: a skip would hide that the
operations went untested."""
import os
import pathlib
import subprocess

import pytest

from conftest import SEGRT
from gpu_util import report
from test_gpu_sanitizer import sanitizer

TOOL = "test_gpu_volume_ops"


def tool_path():
    places = []
    if os.environ.get("SEGRT_GPU_VOLUME_OPS"):
        places.append(pathlib.Path(os.environ["SEGRT_GPU_VOLUME_OPS"]))
    here = pathlib.Path(SEGRT).resolve().parent
    places += [here / TOOL, here / "tests" / TOOL]
    for p in places:
        if p.is_file() and os.access(p, os.X_OK):
            return p
    pytest.fail(f"{TOOL} not found (looked at {', '.join(map(str, places))}); build the CUDA tree, and carry it with "
                f"GPU_CARRY_TESTS=\"... {TOOL}\" scripts/gpu-carry.sh")


def run_tool(cmd, timeout):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    text = p.stdout + p.stderr
    lines = text.splitlines()
    failed = [line for line in lines if line.startswith("FAIL")]
    return p.returncode, text, lines, failed


@pytest.mark.parametrize("seed", [1, 2])
def test_volume_ops_match_cpu(gpu, seed):
    rc, text, lines, failed = run_tool([str(tool_path()), "--seed", str(seed)], timeout=540)
    print(f"\n{TOOL} --seed {seed}: exit {rc}\n" + "\n".join(failed[:40] + lines[-3:]))
    cases = sum(1 for line in lines if line.startswith(("ok", "FAIL")))
    report({"test": "volume_ops", "seed": seed, "cases": cases, "failed": len(failed), "exit": rc})
    # The tool counts every case; an early exit would print fewer.
    assert cases >= 300, f"{TOOL} ran {cases} cases (exit {rc}):\n" + "\n".join(lines[-20:])
    assert rc == 0 and not failed, f"{TOOL} --seed {seed}: exit {rc}, {len(failed)} cases failed:\n" + "\n".join(
        failed[:40] or lines[-20:])


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_volume_ops_sanitized(gpu, tool):
    cs = sanitizer()
    if cs is None:
        pytest.skip("compute-sanitizer not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
    cmd = [cs, "--tool", tool, "--error-exitcode", "9", str(tool_path()), "--small"]
    rc, text, lines, failed = run_tool(cmd, timeout=540)
    tail = "\n".join(lines[-30:])
    print(f"\ncompute-sanitizer --tool {tool} {TOOL} --small: exit {rc}\n{tail}")
    assert rc == 0 and not failed, f"{tool}: exit {rc}\n{tail}"
    clean = "ERROR SUMMARY: 0 errors" if tool == "memcheck" else "RACECHECK SUMMARY: 0 hazards displayed (0 errors"
    assert clean in text, f"{tool}: no clean summary\n{tail}"
