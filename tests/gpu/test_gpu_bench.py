"""segrt bench on the GPU, on basicunet2d_tiny at fp16:

  - --io device (the default with --device cuda) and --io host, said in
    the output; with device I/O bench's own device buffers hold at least
    the inputs and outputs, with host I/O none;
  - the device memory figures: what the engine holds (weights, activations,
    workspace) plus bench's buffers add up to held_bytes, and the measured
    drop in free device memory covers them;
  - --batch-sweep 1,2,4 through one engine: a row per batch with its dims,
    the memory drop per row, and the text table's columns;
  - a plan file keeps its profile: a sweep inside it runs (with FLOPs from
    the plan's graph), a batch outside it is refused with the range.
"""
import json
import os
import subprocess

import pytest

from conftest import MODELS, SEGRT

TINY = MODELS / "basicunet2d_tiny.onnx"
C, H, W = 1, 96, 128
GPU = ("--device", "cuda", "--precision", "fp16", "--autotune", "0", "--no-cache")


def bench(*args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([SEGRT, "bench", *map(str, args)], capture_output=True, text=True, timeout=600, env=e)


def ok_json(p, what):
    assert p.returncode == 0, f"{what}: exit {p.returncode}: {p.stderr.strip()}\n{p.stdout}"
    return json.loads(p.stdout)


def fp32_bytes(*dims):
    n = 4
    for d in dims:
        n *= d
    return n


def check_memory(r, io_at_least):
    m = r["device_memory"]
    assert m["weight_bytes"] > 0 and m["arena_bytes"] > 0, m
    assert m["held_bytes"] == m["weight_bytes"] + m["arena_bytes"] + m["workspace_bytes"] + m["io_buffer_bytes"]
    assert m["io_buffer_bytes"] >= io_at_least, m
    if io_at_least == 0:
        assert m["io_buffer_bytes"] == 0, m
    # The drop counts at least what segrt says it holds (cudaMalloc rounds
    # up; the drop adds handles and kernels); 10 % slack for other users.
    assert m["free_drop_bytes"] is not None and m["free_drop_bytes"] >= 0.9 * m["held_bytes"], m


def test_single_batch_device_and_host_io(gpu):
    shape = f"image=2x{C}x{H}x{W}"
    io_bytes = fp32_bytes(2, C, H, W) + fp32_bytes(2, 2, H, W)  # input, and 2-class logits
    r = ok_json(bench(TINY, "--shape", shape, *GPU, "--iters", "5", "--warmup", "2", "--json"), "--io device")
    assert r["device"] == "cuda:0" and r["io"] == "device" and r["precision"] == "fp16", r
    assert r["batch"] == 2 and r["gflop"] > 0 and r["tflops_per_s"] > 0
    check_memory(r, io_bytes)
    print(f"\nbench --io device: p50 {r['p50_ms']:.3f} ms")
    h = ok_json(bench(TINY, "--shape", shape, *GPU, "--iters", "5", "--warmup", "2", "--io", "host", "--json"),
                "--io host")
    assert h["io"] == "host"
    check_memory(h, 0)
    print(f"bench --io host: p50 {h['p50_ms']:.3f} ms")
    p = bench(TINY, "--shape", shape, *GPU, "--iters", "3", "--warmup", "1", "--profile")
    assert p.returncode == 0, p.stderr
    for words in ("io: device", "precision: fp16", "device memory held", "device free memory", "profile"):
        assert words in p.stdout, words


def test_sweep(gpu):
    r = ok_json(bench(TINY, "--shape", f"image=1x{C}x{H}x{W}", *GPU, "--batch-sweep", "1,2,4", "--iters", "3",
                      "--warmup", "2", "--json"), "--batch-sweep 1,2,4")
    assert r["io"] == "device" and r["batch_sweep"] == [1, 2, 4]
    rows = r["rows"]
    assert [row["batch"] for row in rows] == [1, 2, 4]
    for row in rows:
        b = row["batch"]
        assert row["shapes"] == {"image": [b, C, H, W]}
        assert row["p50_ms"] <= row["p90_ms"] <= row["p99_ms"]
        assert row["throughput_per_s"] == pytest.approx(b / (row["p50_ms"] / 1e3))
        assert row["device_free_drop_bytes"] is not None and row["device_free_drop_bytes"] > 0
        print(f"\nbatch {b}: p50 {row['p50_ms']:.3f} ms, {row['throughput_per_s']:.1f} samples/s, "
              f"{row['tflops_per_s']:.2f} TFLOP/s, drop {row['device_free_drop_bytes'] / 2**20:.1f} MiB")
    assert rows[2]["gflop"] == pytest.approx(4 * rows[0]["gflop"], rel=1e-6)
    # Bench's buffers are sized for the largest batch, and reused below it.
    check_memory(r, fp32_bytes(4, C, H, W) + fp32_bytes(4, 2, H, W))
    assert r["device_memory"]["free_drop_bytes"] == rows[-1]["device_free_drop_bytes"]
    t = bench(TINY, "--shape", f"image=1x{C}x{H}x{W}", *GPU, "--batch-sweep", "1,2", "--iters", "2",
              "--warmup", "1")
    assert t.returncode == 0, t.stderr
    for words in ("dev MiB", "TFLOP/s", "ms/sample", "device memory held", f"image=Bx{C}x{H}x{W}"):
        assert words in t.stdout, words


def test_plan_keeps_its_profile(gpu, tmp_path):
    plan = tmp_path / "tiny_1_2.plan"
    p = subprocess.run([SEGRT, "build", str(TINY), "-o", str(plan), "--precision", "fp16", "--autotune", "0",
                        "--shape", f"image=1:2:2x{C}x{H}x{W}"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    r = ok_json(bench(plan, "--shape", f"image=1x{C}x{H}x{W}", "--batch-sweep", "1,2", "--iters", "2",
                      "--warmup", "1", "--json"), "a plan's sweep inside its profile")
    assert r["device"] == "cuda:0" and [row["batch"] for row in r["rows"]] == [1, 2]
    assert all(row["gflop"] > 0 for row in r["rows"]), "no FLOPs from the plan's graph"
    p = bench(plan, "--shape", f"image=1x{C}x{H}x{W}", "--batch-sweep", "1,4", "--iters", "2", "--warmup", "1")
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert f"1x{C}x{H}x{W}" in lines[0] and f"2x{C}x{H}x{W}" in lines[0], lines[0]
    # A plan keeps its build options: --precision is refused, naming it.
    p = bench(plan, "--shape", f"image=1x{C}x{H}x{W}", "--precision", "fp32")
    assert p.returncode == 2 and "--precision" in p.stderr, p.stderr
