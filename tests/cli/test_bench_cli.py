"""segrt bench's --batch-sweep and --io on the CPU (the sweep does not
depend on the device; tests/gpu/test_gpu_bench.py runs it on a GPU):

  - one row per batch size, in the order given, with dim 0 of the batched
    inputs set to it and every other dim from --shape or the model;
  - the row's figures agree with each other (percentiles ordered,
    throughput = batch / p50, ms/sample = p50 / batch, TFLOP/s = GFLOP /
    p50) and the FLOPs with `segrt info` at that shape;
  - an input whose dim 0 the model fixes keeps its dims; a model whose
    inputs are all fixed is refused;
  - the text table, --profile of the last batch, and the errors for bad
    lists and for --io device on the CPU;
  - without --batch-sweep the output says which io was used.
"""
import json

import numpy as np
import pytest
from onnx import helper

from conftest import run_segrt
from onnx_util import init, save_model, tensor_input


@pytest.fixture
def tiny(models):
    return models / "basicunet2d_tiny.onnx"


def bench_json(*args):
    p = run_segrt("bench", *map(str, args), "--json", check=0)
    return json.loads(p.stdout)


def expect_bad(args, *words):
    p = run_segrt(*map(str, args))
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, f"exit {p.returncode}: {p.stderr}"
    assert len(lines) == 1 and lines[0].startswith("segrt: "), p.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def gflop_of(model, shape_arg):
    info = run_segrt("info", model, "--shape", shape_arg, check=0).stdout
    return float(info.split("GFLOP: ")[1].split()[0])


def check_row(row, iters):
    assert row["min_ms"] <= row["p50_ms"] == row["median_ms"] <= row["p90_ms"] <= row["p99_ms"] <= row["max_ms"]
    assert len(row["times_ms"]) == iters
    assert sorted(row["times_ms"])[0] == row["min_ms"]
    b = row["batch"]
    assert row["throughput_per_s"] == pytest.approx(b / (row["median_ms"] / 1e3))
    assert row["ms_per_sample"] == pytest.approx(row["median_ms"] / b)
    assert row["gflops_per_s"] == pytest.approx(row["gflop"] / (row["median_ms"] / 1e3))
    assert row["tflops_per_s"] == pytest.approx(row["gflops_per_s"] / 1e3)
    assert row["peak_bytes"] > 1 << 20
    assert "device_free_drop_bytes" not in row  # a GPU figure


def test_sweep_json(tiny):
    r = bench_json(tiny, "--shape", "image=7x1x32x32", "--batch-sweep", "4,1,2", "--iters", "3", "--warmup", "1")
    assert r["device"] == "cpu" and r["io"] == "host" and r["precision"] == "fp32"
    assert r["batch_sweep"] == [4, 1, 2]
    assert "device_memory" not in r and "median_ms" not in r  # per-row keys live in rows
    assert [row["batch"] for row in r["rows"]] == [4, 1, 2]
    for row in r["rows"]:
        check_row(row, 3)
        # dim 0 of the --shape is the sweep's; the other dims are kept.
        assert row["shapes"] == {"image": [row["batch"], 1, 32, 32]}
    # The FLOPs are those of each batch: segrt info agrees, and they scale.
    by_batch = {row["batch"]: row for row in r["rows"]}
    assert by_batch[1]["gflop"] == pytest.approx(gflop_of(tiny, "image=1x1x32x32"), abs=0.006)
    assert by_batch[4]["gflop"] == pytest.approx(4 * by_batch[1]["gflop"], rel=1e-6)


def test_sweep_text_and_profile(tiny):
    p = run_segrt("bench", tiny, "--shape", "image=1x1x32x32", "--batch-sweep", "1,2", "--iters", "2",
                  "--warmup", "1", "--threads", "2", "--profile", check=0)
    out = p.stdout
    assert "image=Bx1x32x32" in out and "io: host" in out and "threads: 2" in out
    header = next(line for line in out.splitlines() if line.split()[:1] == ["batch"])
    for col in ("p50 ms", "p90 ms", "p99 ms", "samples/s", "ms/sample", "TFLOP/s", "RSS MiB"):
        assert col in header, col
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["1"], ["2"])]
    assert [r[0] for r in rows] == ["1", "2"] and all(len(r) == 8 for r in rows), out
    for r in rows:
        p50, p90, p99, per_s, per_sample = map(float, r[1:6])
        assert 0 < p50 <= p90 <= p99
        assert per_s == pytest.approx(int(r[0]) / (p50 / 1e3), rel=0.01)
        assert per_sample == pytest.approx(p50 / int(r[0]), rel=0.01, abs=1e-4)
    assert "profile (batch 2, 2 runs)" in out


def test_sweep_fills_declared_dims_and_keeps_fixed_inputs(tmp_path):
    """x: N x 4 (N open) plus b: 4 (fixed): the sweep needs no --shape, and
    only x takes the batch."""
    path = tmp_path / "add.onnx"
    save_model(path, [helper.make_node("Add", ["x", "b"], ["y"])],
               [tensor_input("x", ["N", 4]), tensor_input("b", [4])], [tensor_input("y", ["N", 4])])
    r = bench_json(path, "--batch-sweep", "1,3", "--iters", "2", "--warmup", "1")
    assert [row["shapes"] for row in r["rows"]] == [{"x": [1, 4], "b": [4]}, {"x": [3, 4], "b": [4]}]
    for row in r["rows"]:
        check_row(row, 2)


def test_sweep_needs_an_open_batch_dim(tmp_path):
    path = tmp_path / "fixed.onnx"
    save_model(path, [helper.make_node("Relu", ["x"], ["y"])], [tensor_input("x", [1, 3, 8, 8])],
               [tensor_input("y", [1, 3, 8, 8])])
    expect_bad(["bench", path, "--batch-sweep", "1,2"], "--batch-sweep", "dim 0", path.name)
    # Without a sweep the fixed model benches as before.
    r = bench_json(path, "--iters", "2")
    assert r["batch"] == 1 and r["shapes"] == {"x": [1, 3, 8, 8]}


def test_sweep_template_dims_must_be_known(tiny):
    # dim 0 is the sweep's, but the others are open in the model.
    expect_bad(["bench", tiny, "--batch-sweep", "1,2"], "image", "--shape")


@pytest.mark.parametrize("bad", ["0", "1,,2", "2,", ",2", "x", "1;2", ",".join(["1"] * 65)])
def test_bad_sweep_lists(tiny, bad):
    expect_bad(["bench", tiny, "--shape", "image=1x1x32x32", "--batch-sweep", bad], "--batch-sweep")


def test_io_option(tiny):
    expect_bad(["bench", tiny, "--shape", "image=1x1x32x32", "--io", "device"], "--io device", "cuda")
    expect_bad(["bench", tiny, "--shape", "image=1x1x32x32", "--io", "pinned"], "--io", "pinned")
    expect_bad(["bench", tiny, "--shape", "image=1x1x32x32", "--io"], "--io")
    r = bench_json(tiny, "--shape", "image=2x1x32x32", "--iters", "2", "--io", "host")
    assert r["io"] == "host" and r["batch"] == 2 and "device_memory" not in r
    check_row(r, 2)
    out = run_segrt("bench", tiny, "--shape", "image=2x1x32x32", "--iters", "2", check=0).stdout
    assert "io: host" in out and "peak memory" in out and "device memory" not in out


def test_help_describes_the_new_options():
    out = run_segrt("bench", "--help", check=0).stdout
    for word in ("--batch-sweep", "--io device", "--io host", "ms/sample", "TFLOP/s", "device_memory", "rows"):
        assert word in out, word


def test_sweep_in_any_order(tmp_path):
    """Sizes up and down (buffers grow and are reused for smaller batches),
    no warm-up, and the FLOPs of an elementwise model: one per output
    element."""
    path = tmp_path / "scale.onnx"
    save_model(path, [helper.make_node("Mul", ["x", "s"], ["y"])], [tensor_input("x", ["N", 2, 3])],
               [tensor_input("y", ["N", 2, 3])], [init("s", np.float32(2.0))])
    r = bench_json(path, "--batch-sweep", "5,1,8,2", "--iters", "1", "--warmup", "0")
    assert [row["shapes"]["x"][0] for row in r["rows"]] == [5, 1, 8, 2]
    for row in r["rows"]:
        assert row["gflop"] == pytest.approx(row["batch"] * 6 / 1e9)
