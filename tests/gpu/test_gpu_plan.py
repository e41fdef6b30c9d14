"""Plan files, the plan cache and the CUDA engine's input checks, on
basicunet2d_tiny at fp16:

  - `segrt build` writes a plan whose run is bit-identical to a run of the
    .onnx (--no-cache), and --no-cache writes nothing to the cache;
  - without --no-cache a run stores a plan in $XDG_CACHE_HOME/segrt (or in
    --cache-dir), and the next run uses it (the file is left as it is) with
    bit-identical output;
  - a truncated plan (several cut points) is refused with exit 2 and one
    line on stderr naming the file;
  - a plan whose key names another GPU (one character of the GPU name in
    the header changed) is refused with exit 2, the message saying that the
    GPU differs;
  - a shape outside the plan's profile is refused with exit 2 and the
    allowed range in the message; shapes inside it run;
  - --device cuda:99 is refused with exit 2 naming the device;
  - through the C API: inputs and outputs in device memory (torch tensors,
    and buffers from segrt_device_alloc) give the same bits as host memory; segrt_engine_save/_load and
    segrt_engine_build_cached give the same bits as the engine built.
"""
import os
import re
import subprocess

import numpy as np
import pytest

import segrt_capi as sc
from conftest import SEGRT, require_models
from gpu_util import psnr

NAME = "basicunet2d_tiny"
INPUT = "image"
PRECISION = "fp16"


def cli(*args, env=None, timeout=600):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([SEGRT, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=e)


def ok(p, what):
    assert p.returncode == 0, f"{what}: exit {p.returncode}: {p.stderr.strip()}\n{p.stdout}"
    return p


def one_line_error(p, what, code=2):
    """The stderr line of a run that must fail with `code`."""
    err = p.stderr.strip()
    assert p.returncode == code, f"{what}: exit {p.returncode}, expected {code}; stderr: {err}"
    assert err and len(err.splitlines()) == 1, f"{what}: stderr is not one line: {p.stderr!r}"
    return err


def same_bits(got, want, what):
    assert got.shape == want.shape and got.dtype == want.dtype, \
        f"{what}: {got.dtype} {got.shape}, expected {want.dtype} {want.shape}"
    if got.tobytes() != want.tobytes():
        g = np.ascontiguousarray(got).reshape(-1).view(np.uint8).reshape(got.size, got.itemsize)
        w = np.ascontiguousarray(want).reshape(-1).view(np.uint8).reshape(want.size, want.itemsize)
        differ = int(np.sum((g != w).any(axis=1)))
        raise AssertionError(f"{what}: not bit-identical: {differ} of {got.size} elements differ, max |diff| "
                             f"{float(np.nanmax(np.abs(got.astype(np.float64) - want))):.3g}, "
                             f"PSNR {psnr(got, want):.1f} dB")


# Separate builds give the same bits only when they choose the same cuDNN
# engines: timed choices (autotuning, the default) may differ between two
# builds, so the tests that compare separate builds bit for bit build
# untimed. A timed plan is checked on its own below.
UNTIMED = ("--autotune", "0")


def dims(shape):
    return "x".join(str(d) for d in shape)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Paths, the reference input, and the fp16 output of the .onnx run
    through the CLI with --no-cache (its cache dir must stay empty)."""
    d = tmp_path_factory.mktemp("plan")
    models = require_models()
    onnx_path = models / f"{NAME}.onnx"
    src = models / f"{NAME}.in.npy"
    x = np.load(src)
    empty_cache = d / "no-cache-xdg"
    empty_cache.mkdir()
    out = d / "onnx_out.npy"
    ok(cli("run", onnx_path, "--input", f"{INPUT}={src}", "--output", out, "--device", "cuda",
           "--precision", PRECISION, *UNTIMED, "--no-cache", "-q", env={"XDG_CACHE_HOME": str(empty_cache)}),
       "run of the .onnx with --no-cache")
    assert not any(empty_cache.rglob("*")), \
        f"--no-cache wrote to the cache: {sorted(map(str, empty_cache.rglob('*')))}"
    return {"dir": d, "onnx": onnx_path, "src": src, "x": x, "onnx_out": np.load(out),
            "ref": np.load(models / f"{NAME}.out.npy"), "xdg": empty_cache}


def build_plan(tiny, path, shape_arg, *extra, env=None):
    ok(cli("build", tiny["onnx"], "-o", path, "--precision", PRECISION, *UNTIMED, "--shape", f"{INPUT}={shape_arg}",
           *extra,
           env={"XDG_CACHE_HOME": str(tiny["xdg"]), **(env or {})}), f"segrt build --shape {INPUT}={shape_arg}")
    assert path.is_file() and path.stat().st_size > 0, f"segrt build wrote no plan at {path}"
    return path


def run_plan(tiny, plan, src, out, *extra, env=None):
    return cli("run", plan, "--input", f"{INPUT}={src}", "--output", out, "--device", "cuda", "-q", *extra,
               env={"XDG_CACHE_HOME": str(tiny["xdg"]), **(env or {})})


@pytest.fixture(scope="module")
def plan(tiny):
    return build_plan(tiny, tiny["dir"] / "tiny.plan", dims(tiny["x"].shape))


def test_plan_run_is_bit_identical_to_onnx_run(tiny, plan):
    out = tiny["dir"] / "plan_out.npy"
    ok(run_plan(tiny, plan, tiny["src"], out), "run of the plan")
    same_bits(np.load(out), tiny["onnx_out"], "the plan's output against the .onnx run's")
    # And the output is right, not only reproducible (test_gpu_models.py's fp16 bound).
    assert psnr(tiny["onnx_out"], tiny["ref"]) >= 50.0


def test_serialized_cudnn_plans_give_the_same_bits(tiny, plan, tmp_path):
    """The build serializes each cuDNN execution plan into the plan file
    and contexts restore it instead of finalizing it from the recorded
    engine configuration (a runtime compilation per fused convolution):
    the same bits as a plan built without them (--disable-kernels
    cudnn-plan-json, which the plan file keeps for its loads), whose file
    is smaller by the serialized plans."""
    bare = build_plan(tiny, tmp_path / "bare.plan", dims(tiny["x"].shape), "--disable-kernels", "cudnn-plan-json")
    a, b = tmp_path / "restored.npy", tmp_path / "finalized.npy"
    ok(run_plan(tiny, plan, tiny["src"], a), "run of the plan with serialized cuDNN plans")
    ok(run_plan(tiny, bare, tiny["src"], b), "run of the plan without")
    same_bits(np.load(a), np.load(b), "restored cuDNN plans against finalized ones")
    print(f"\nplan file: {plan.stat().st_size} bytes with serialized cuDNN plans, {bare.stat().st_size} without")
    assert plan.stat().st_size > bare.stat().st_size, "the plan file holds no serialized cuDNN plan"


def test_timed_plan_round_trip(tiny, tmp_path):
    """A plan built with autotuning (the default) keeps its timed choices:
    two runs of the file give the same bits, within the fp16 bound of the
    reference."""
    path = tmp_path / "timed.plan"
    ok(cli("build", tiny["onnx"], "-o", path, "--precision", PRECISION, "--autotune", "4", "--shape",
           f"{INPUT}={dims(tiny['x'].shape)}", env={"XDG_CACHE_HOME": str(tiny["xdg"])}), "segrt build --autotune 4")
    outs = []
    for i in range(2):
        out = tmp_path / f"timed{i}.npy"
        ok(run_plan(tiny, path, tiny["src"], out), f"run {i} of the timed plan")
        outs.append(np.load(out))
    same_bits(outs[1], outs[0], "the timed plan's second run against its first")
    assert psnr(outs[0], tiny["ref"]) >= 50.0


def cache_files(root):
    return {str(p.relative_to(root)): (p.stat().st_ino, p.stat().st_mtime_ns, p.stat().st_size)
            for p in root.rglob("*") if p.is_file()}


def test_plan_cache_is_written_then_used(tiny, tmp_path):
    xdg = tmp_path / "xdg"
    xdg.mkdir()
    env = {"XDG_CACHE_HOME": str(xdg)}

    def run(i):
        out = tmp_path / f"out{i}.npy"
        ok(cli("run", tiny["onnx"], "--input", f"{INPUT}={tiny['src']}", "--output", out, "--device", "cuda",
               "--precision", PRECISION, *UNTIMED, "-q", env=env), f"run {i} through the cache")
        return np.load(out)

    first = run(1)
    stored = cache_files(xdg / "segrt") if (xdg / "segrt").is_dir() else {}
    assert stored, f"no plan was stored under {xdg / 'segrt'}; the cache holds {sorted(cache_files(xdg))}"
    assert not set(cache_files(xdg)) - {f"segrt/{k}" for k in stored}, \
        f"files outside $XDG_CACHE_HOME/segrt: {sorted(cache_files(xdg))}"
    same_bits(first, tiny["onnx_out"], "the run that stored the plan, against the --no-cache run")
    second = run(2)
    assert cache_files(xdg / "segrt") == stored, \
        f"the second run did not use the stored plan as it was: before {stored}, after {cache_files(xdg / 'segrt')}"
    same_bits(second, first, "the run served by the cache, against the run that stored it")


def test_cache_dir_option(tiny, tmp_path):
    xdg, cache = tmp_path / "xdg", tmp_path / "chosen"
    xdg.mkdir()
    out = tmp_path / "out.npy"
    ok(cli("run", tiny["onnx"], "--input", f"{INPUT}={tiny['src']}", "--output", out, "--device", "cuda",
           "--precision", PRECISION, *UNTIMED, "--cache-dir", cache, "-q", env={"XDG_CACHE_HOME": str(xdg)}),
       "run with --cache-dir")
    assert cache.is_dir() and cache_files(cache), f"--cache-dir {cache}: no plan stored there"
    assert not cache_files(xdg), f"--cache-dir given, yet $XDG_CACHE_HOME got {sorted(cache_files(xdg))}"
    same_bits(np.load(out), tiny["onnx_out"], "the run with --cache-dir, against the --no-cache run")


def cut_points(size):
    return sorted({c for c in (0, 1, 8, 16, 64, 256, 1024, 4096, size // 2, size - 64, size - 1) if 0 <= c < size})


def test_truncated_plan_is_refused(tiny, plan, tmp_path):
    data = plan.read_bytes()
    for cut in cut_points(len(data)):
        bad = tmp_path / f"cut_at_{cut}.plan"
        bad.write_bytes(data[:cut])
        err = one_line_error(run_plan(tiny, bad, tiny["src"], tmp_path / "out.npy"), f"plan cut at byte {cut}")
        assert bad.name in err, f"plan cut at byte {cut}: the message does not name the file: {err}"
        with pytest.raises(sc.SegrtError) as exc:
            sc.Engine.load(bad, 0).close()
        assert bad.name in exc.value.message, f"segrt_engine_load on the plan cut at {cut}: {exc.value}"
    assert not (tmp_path / "out.npy").exists(), "a refused plan wrote an output"


def gpu_names():
    """The GPU's name as the CUDA runtime and nvidia-smi give it."""
    names = [sc.cuda_device_info(0)["name"]]
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                           capture_output=True, text=True, timeout=60)
        if p.returncode == 0 and p.stdout.strip():
            names.append(p.stdout.strip().splitlines()[0].strip())
    except (OSError, subprocess.TimeoutExpired):
        pass
    return [n for n in dict.fromkeys(names) if n]


def gpu_name_in_header(data):
    """(offset, name) of the GPU name in the plan's key. The layout is
    src/engine/plan_file.c's: "SEGRTPLN", u32 format, u32 header_bytes, then
    the header text of "key=value" lines, the GPU in "gpu=NAME". Should that
    layout change, the device's name is searched for in the first 4 KiB."""
    if data[:8] == b"SEGRTPLN" and len(data) >= 16:
        n = int.from_bytes(data[12:16], "little")
        m = re.search(rb"^gpu=(.+)$", data[16:16 + n], re.M)
        if m:
            return 16 + m.start(1), m.group(1).decode(errors="replace")
    head = bytes(data[:4096])
    for name in gpu_names():
        at = head.find(name.encode())
        if at >= 0:
            return at, name
    return None


def test_plan_for_another_gpu_is_refused(tiny, plan, tmp_path):
    data = bytearray(plan.read_bytes())
    found = gpu_name_in_header(data)
    assert found, (f"neither a gpu= line in the header nor any of the GPU names {gpu_names()} in the first "
                   f"4 KiB of {plan}: update this test to the plan header's format")
    at, name = found
    # Change one letter or digit of the name: the key of another GPU.
    k = next(i for i, ch in enumerate(name) if ch.isalnum())
    data[at + k] = ord("X") if data[at + k] != ord("X") else ord("Y")
    bad = tmp_path / "other_gpu.plan"
    bad.write_bytes(bytes(data))
    err = one_line_error(run_plan(tiny, bad, tiny["src"], tmp_path / "out.npy"),
                         f"plan with GPU name {name!r} changed at byte {at + k}")
    assert "GPU" in err, f"the message does not say that the GPU differs: {err}"
    assert bad.name in err, f"the message does not name the file: {err}"


def test_shape_outside_the_profile_is_refused(tiny, tmp_path):
    x = tiny["x"]
    plan = build_plan(tiny, tmp_path / "batch_1_to_2.plan", "1:1:2x" + dims(x.shape[1:]))
    # Inside the profile: batch 1 (opt) and 2 (max) run, and right.
    for batch in (1, 2):
        src, out = tmp_path / f"in{batch}.npy", tmp_path / f"out{batch}.npy"
        np.save(src, np.ascontiguousarray(x[:batch]))
        ok(run_plan(tiny, plan, src, out), f"batch {batch} inside the profile 1:1:2")
        value = psnr(np.load(out), tiny["ref"][:batch])
        assert value >= 50.0, f"batch {batch} inside the profile: PSNR {value:.1f} dB against PyTorch's output"
    src = tmp_path / "in3.npy"
    np.save(src, np.concatenate([x, x[:1]]))
    err = one_line_error(run_plan(tiny, plan, src, tmp_path / "out3.npy"), "batch 3 outside the profile 1:1:2")
    assert INPUT in err and "3" in err, f"the message does not name the input and the batch given: {err}"
    lo, hi = "1x" + dims(x.shape[1:]), "2x" + dims(x.shape[1:])
    assert (lo in err and hi in err) or re.search(r"\b1\s*(\.\.\.?|:|-|–|to|and|,)\s*2\b", err), \
        f"the message does not give the allowed range, {lo} to {hi}: {err}"


def test_missing_device_is_refused(tiny, tmp_path):
    err = one_line_error(cli("run", tiny["onnx"], "--input", f"{INPUT}={tiny['src']}", "--output",
                             tmp_path / "out.npy", "--device", "cuda:99", "--precision", PRECISION, "--no-cache",
                             env={"XDG_CACHE_HOME": str(tiny["xdg"])}), "run --device cuda:99")
    assert "99" in err, f"the message does not name device 99: {err}"
    err = one_line_error(cli("build", tiny["onnx"], "-o", tmp_path / "x.plan", "--precision", PRECISION,
                             "--shape", f"{INPUT}={dims(tiny['x'].shape)}", "--device", "99"),
                         "build --device 99")
    assert "99" in err, f"the message does not name device 99: {err}"
    assert not (tmp_path / "x.plan").exists()


def test_model_too_large_for_the_gpu(tiny, tmp_path):
    """A profile whose largest shape no GPU could hold: a batch of 4,000,000
    makes tensors of 2^31 elements and more, past what cuDNN indexes, so the
    build refuses it (exit 2) naming the node, the tensor and the limit, and
    writes nothing. (Every tensor below that limit, a model needs dozens of
    them live at once to pass the device's memory; that out-of-memory path
    is the budget tests' in test_gpu_sliding_window.py.)"""
    n, c, h, w = tiny["x"].shape
    out = tmp_path / "out.npy"
    p = cli("run", tiny["onnx"], "--input", f"{INPUT}={tiny['src']}", "--output", out, "--device", "cuda",
            "--precision", PRECISION, "--no-cache", "--shape", f"{INPUT}={n}:{n}:4000000x{c}x{h}x{w}")
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert p.returncode == 2, f"exit {p.returncode}: {p.stderr}"
    assert len(lines) == 1 and "node `" in lines[0] and "2^31" in lines[0] and "4000000x" in lines[0], p.stderr
    assert not out.exists()


@pytest.fixture(scope="module")
def engine(tiny):
    # Untimed: the builds these runs are compared with bit for bit must
    # pick the same cuDNN configurations, which timing does not promise.
    with sc.Model.load(tiny["onnx"]) as m, \
            sc.BuildOptions(shapes={INPUT: tiny["x"].shape}, device="cuda", precision=PRECISION, autotune=0) as o:
        e = sc.Engine.build(m, o)
    yield e
    e.close()


def test_engine_info(engine):
    info = engine.info()
    assert info["device"] == sc.DEVICE_CUDA and info["device_index"] == 0
    assert info["precision_name"] == PRECISION
    assert info["steps"] > 0 and info["fallback_steps"] == 0, info
    assert info["weight_bytes"] > 0 and info["arena_bytes"] > 0, info


def test_device_memory_gives_the_host_memory_bits(tiny, engine):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    x = np.ascontiguousarray(tiny["x"])
    with engine.context() as ctx:
        (host,) = ctx.run([x])
        (dtype, shape), = engine.output_shapes([x])
        assert dtype == np.float32 and shape == host.shape
        x_dev = torch.from_numpy(x).cuda()

        def device_out():
            return torch.full(shape, float("nan"), dtype=torch.float32, device="cuda")  # poison

        combos = [("device in, device out", True, True), ("device in, host out", True, False),
                  ("host in, device out", False, True)]
        for what, dev_in, dev_out in combos:
            y_dev = device_out() if dev_out else None
            torch.cuda.synchronize()  # segrt runs on its own stream
            ins = [sc.DeviceTensor.from_torch(x_dev) if dev_in else x]
            outs = [sc.DeviceTensor.from_torch(y_dev) if dev_out else np.full(shape, np.nan, np.float32)]
            (res,) = ctx.run(ins, outs)
            got = y_dev.cpu().numpy() if dev_out else res
            same_bits(got, host, what)
        # The input was only read.
        assert np.array_equal(x_dev.cpu().numpy(), x)


def test_saved_and_cached_engines_give_the_same_bits(tiny, engine, tmp_path):
    x = tiny["x"]
    with engine.context() as ctx:
        (want,) = ctx.run([x])
    path = tmp_path / "capi.plan"
    engine.save(path)
    with sc.Engine.load(path, 0) as loaded, loaded.context() as ctx:
        assert loaded.info()["precision_name"] == PRECISION
        (got,) = ctx.run([x])
    same_bits(got, want, "an engine loaded with segrt_engine_load")
    cache = tmp_path / "cache"
    with sc.Model.load(tiny["onnx"]) as m, \
            sc.BuildOptions(shapes={INPUT: x.shape}, device="cuda", precision=PRECISION, autotune=0) as o:
        for i, expect_hit in ((1, False), (2, True)):
            e, hit = sc.Engine.build_cached(m, o, cache)
            with e, e.context() as ctx:
                (got,) = ctx.run([x])
            assert hit == expect_hit, f"segrt_engine_build_cached call {i}: hit {hit}, expected {expect_hit}"
            same_bits(got, want, f"segrt_engine_build_cached call {i}")


def test_segrt_device_memory_gives_the_host_memory_bits(tiny, engine):
    """The same through segrt's own device-memory API (segrt_device_alloc,
    _copy, _free, _synchronize), without PyTorch: device in and out give the
    host run's bits, the input is only read, a device-to-device copy keeps
    them, and misuse fails with one clear status."""
    x = np.ascontiguousarray(tiny["x"])
    with engine.context() as ctx:
        (host,) = ctx.run([x])
        with sc.DeviceBuffer.from_array(x) as xd, sc.DeviceBuffer(np.float32, host.shape) as yd, \
                sc.DeviceBuffer(np.float32, host.shape) as zd:
            yd.upload(np.full(host.shape, np.nan, np.float32))  # poison
            ctx.run([xd.tensor()], [yd.tensor()])
            same_bits(yd.download(), host, "segrt_device_alloc buffers in and out")
            assert np.array_equal(xd.download(), x), "the device input was written to"
            zd.copy_from(yd)
            sc.device_synchronize(0)
            same_bits(zd.download(), host, "a device-to-device segrt_device_copy")
            # Device input, host output, into the same context again.
            (res,) = ctx.run([xd.tensor()])
            same_bits(res, host, "device in, host out")
    with pytest.raises(sc.SegrtError) as e:
        sc.call("segrt_device_free", x.ctypes.data)
    assert e.value.status == sc.ERROR_INVALID_ARGUMENT and "not CUDA device memory" in e.value.message, e.value
    n = sc.cuda_device_count()
    with pytest.raises(sc.SegrtError) as e:
        sc.DeviceBuffer(np.float32, (4,), device=n)
    assert e.value.status == sc.ERROR_INVALID_ARGUMENT and "does not exist" in e.value.message, e.value
    with pytest.raises(sc.SegrtError) as e:
        sc.DeviceBuffer(np.uint8, (1 << 60,))
    assert e.value.status == sc.ERROR_OUT_OF_MEMORY and "cudaMalloc" in e.value.message, e.value
    # The failures left nothing behind: the next allocation works.
    with sc.DeviceBuffer(np.float32, (16,)) as b:
        b.upload(np.arange(16, dtype=np.float32))
        assert np.array_equal(b.download(), np.arange(16, dtype=np.float32))


def test_graph_replays_follow_new_buffers(tiny, engine):
    """A context captures a CUDA graph on the second run with the same
    buffers and updates it in place when the buffers change: runs that
    alternate between two buffer sets (captured, updated, updated back),
    with different inputs, each give the eager bits in their own output."""
    x = np.ascontiguousarray(tiny["x"])
    x2 = np.ascontiguousarray(x[::-1] * np.float32(0.5))
    with engine.context() as ctx:
        (want1,) = ctx.run([x])
        (want2,) = ctx.run([x2])
        with sc.DeviceBuffer.from_array(x) as a_in, sc.DeviceBuffer(np.float32, want1.shape) as a_out, \
                sc.DeviceBuffer.from_array(x2) as b_in, sc.DeviceBuffer(np.float32, want1.shape) as b_out:
            for rnd in range(3):
                for (xin, yout, want, name) in ((a_in, a_out, want1, "A"), (b_in, b_out, want2, "B")):
                    for rep in range(3):  # eager, then captured or updated, then replayed
                        yout.upload(np.full(want.shape, np.nan, np.float32))
                        ctx.run([xin.tensor()], [yout.tensor()])
                        same_bits(yout.download(), want, f"round {rnd}, buffers {name}, run {rep}")
