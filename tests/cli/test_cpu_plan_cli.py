"""CPU plans through the command line (issue 37: plan files are a generic
container, so CPU engines save, load and cache as CUDA engines do):

  - `segrt build --device cpu` writes a plan whose `segrt run` gives the
    bits of a run of the .onnx with the same shape;
  - `--device cpu` runs it; `--device cuda` is refused, saying the plan is
    for the CPU; a plan keeps its options (--shape is refused);
  - a truncated CPU plan is refused with exit 2 and one line naming it.
"""
import numpy as np
import pytest

from conftest import run_segrt


@pytest.fixture
def tiny(models):
    return models / "basicunet2d_tiny.onnx"


def one_line_error(p):
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, f"exit {p.returncode}: {p.stderr}"
    assert len(lines) == 1 and lines[0].startswith("segrt: "), p.stderr
    return lines[0]


def test_cpu_plan_round_trip(tiny, tmp_path):
    x = np.random.default_rng(3).random((1, 1, 64, 64), dtype=np.float32)
    src = tmp_path / "x.npy"
    np.save(src, x)
    plan = tmp_path / "tiny.plan"
    p = run_segrt("build", tiny, "-o", plan, "--device", "cpu", "--shape", "image=1x1x64x64", check=0)
    assert plan.is_file() and "cpu" in p.stdout, p.stdout
    run_segrt("run", tiny, "--shape", "image=1x1x64x64", "--input", src, "--output", tmp_path / "a.npy", check=0)
    run_segrt("run", plan, "--input", src, "--output", tmp_path / "b.npy", check=0)
    run_segrt("run", plan, "--device", "cpu", "--input", src, "--output", tmp_path / "c.npy", check=0)
    a, b, c = (np.load(tmp_path / f"{n}.npy") for n in "abc")
    assert a.shape == (1, 2, 64, 64)
    assert np.array_equal(a, b) and np.array_equal(a, c), "the plan's run differs from the model's"

    err = one_line_error(run_segrt("run", plan, "--device", "cuda", "--input", src, "--output", tmp_path / "d.npy"))
    assert "CPU" in err and plan.name in err, err
    err = one_line_error(run_segrt("run", plan, "--shape", "image=1x1x64x64", "--input", src,
                                   "--output", tmp_path / "d.npy"))
    assert "--shape" in err, err
    assert not (tmp_path / "d.npy").exists()

    data = plan.read_bytes()
    for cut in (0, 12, 100, len(data) // 2, len(data) - 1):
        bad = tmp_path / f"cut_{cut}.plan"
        bad.write_bytes(data[:cut])
        err = one_line_error(run_segrt("run", bad, "--input", src, "--output", tmp_path / "d.npy"))
        assert bad.name in err, f"cut at {cut}: {err}"
    assert not (tmp_path / "d.npy").exists()
