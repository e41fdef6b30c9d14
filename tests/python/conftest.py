"""Shared fixtures: where the segrt binary and the shared models are."""
import os
import pathlib
import subprocess

import pytest

SEGRT = os.environ.get("SEGRT", str(pathlib.Path(__file__).resolve().parents[2] / "build" / "segrt"))
MODELS = pathlib.Path(os.environ.get("SEGRT_MODELS",
                                     pathlib.Path(__file__).resolve().parents[3] / "shared" / "models"))
# Set by the sanitizer build: the same tests, on smaller work where a test
# allows it, because instrumented code runs several times slower.
SANITIZED = os.environ.get("SEGRT_SANITIZED") == "1"


def run_segrt(*args, check=None, timeout=900):
    """Runs the segrt command; returns the CompletedProcess."""
    p = subprocess.run([SEGRT, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if check is not None:
        assert p.returncode == check, f"exit {p.returncode}, stderr: {p.stderr}\nstdout: {p.stdout}"
    return p


@pytest.fixture
def segrt():
    return run_segrt


@pytest.fixture
def models():
    if not MODELS.is_dir():
        pytest.fail(f"shared models not found at {MODELS}")
    return MODELS
