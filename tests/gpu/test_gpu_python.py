"""The Python package on a GPU with torch CUDA tensors: inputs read where
they lie (the DLPack capsule asked for on the context's stream) and
outputs handed to torch without a copy (data pointers checked), the same
numbers as the C API on the same plan, torch's pending work ordered before
a run, out= into a CUDA tensor, sliding windows over a CUDA tensor, threads,
and no device memory kept over many calls.

Needs the package (PYTHONPATH to a build's python/ folder: scripts/gpu-check.sh
python sets it to the carried one) and torch with CUDA; skipped with the
rest of tests/gpu where there is no GPU."""
import gc
import threading

import numpy as np
import pytest

from conftest import GPU_OK, GPU_WHY, SANITIZED, require_models

if not GPU_OK:
    pytest.skip(GPU_WHY, allow_module_level=True)
torch = pytest.importorskip("torch")
segrt = pytest.importorskip("segrt", reason="the segrt package is not on PYTHONPATH (scripts/gpu-check.sh python)")
import segrt_capi  # noqa: E402 - tests/python, on sys.path through conftest.py

if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)


class Recorder:
    """A torch tensor seen through DLPack only, recording the stream asked for."""

    def __init__(self, t):
        self.t, self.shape, self.streams = t, tuple(t.shape), []

    def __dlpack__(self, stream=None, **kw):
        self.streams.append(stream)
        return self.t.__dlpack__(stream=stream, **kw)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


@pytest.fixture(scope="module")
def tiny_plan(tmp_path_factory):
    models = require_models()  # (conftest's models fixture is per test)
    x = np.load(models / "basicunet2d_tiny.in.npy")
    plan = tmp_path_factory.mktemp("plans") / "tiny.plan"
    segrt.Engine.build(models / "basicunet2d_tiny.onnx", plan, device="cuda", shapes={"image": x.shape}).close()
    return plan, x


@pytest.fixture(scope="module")
def engine(tiny_plan):
    with segrt.Engine(tiny_plan[0], device="cuda") as e:
        yield e


def test_zero_copy_in_and_out_same_numbers_as_the_c_api(engine, tiny_plan):
    plan, x = tiny_plan
    with segrt_capi.Engine.load(str(plan)) as ce, ce.context() as ctx:
        (want,) = ctx.run([x])
    assert np.array_equal(engine(x), want)  # host in, host out
    xt = torch.from_numpy(x).cuda()
    r = Recorder(xt)
    y = engine(r)
    assert isinstance(y, segrt.DeviceArray) and y.shape == want.shape and y.dtype == "float32"
    assert len(r.streams) == 1 and isinstance(r.streams[0], int) and r.streams[0] not in (0, 1, 2, -1)
    t = torch.from_dlpack(y)
    assert t.is_cuda and t.data_ptr() == y.data_ptr
    assert np.array_equal(t.cpu().numpy(), want)
    assert np.array_equal(segrt.to_numpy(y), want)
    del y
    gc.collect()
    assert np.array_equal(t.cpu().numpy(), want)  # torch keeps segrt's memory alive


def test_out_into_a_cuda_tensor(engine, tiny_plan):
    _, x = tiny_plan
    want = engine(x)
    out = torch.full(want.shape, float("nan"), device="cuda")
    ptr = out.data_ptr()
    got = engine(torch.from_numpy(x).cuda(), out=out)
    assert got is out and out.data_ptr() == ptr
    assert np.array_equal(out.cpu().numpy(), want)
    out2 = torch.zeros(want.shape, device="cuda")
    engine(x, out=out2)  # host input, device output
    assert np.array_equal(out2.cpu().numpy(), want)
    with pytest.raises(ValueError, match="not contiguous"):
        engine(torch.from_numpy(x).cuda().transpose(2, 3).contiguous().transpose(2, 3))


def test_pending_work_is_ordered_before_the_run(engine, tiny_plan):
    _, x = tiny_plan
    want = engine(x)
    side = torch.cuda.Stream()
    for _ in range(5):
        with torch.cuda.stream(side):
            big = torch.randn(4096, 4096, device="cuda")
            for _ in range(20):
                big = big @ big / 64  # keep the side stream busy
            xt = torch.zeros(x.shape, device="cuda")
            xt.copy_(torch.from_numpy(x).cuda())
            xt.add_(torch.nan_to_num(big[0, 0] * 0.0, nan=0.0))  # written after the products
            y = engine(xt)  # the capsule is asked for on segrt's stream; torch orders `side` before it
        assert np.array_equal(segrt.to_numpy(y), want)


def test_sliding_window_on_a_cuda_tensor(models):
    img = np.random.default_rng(7).standard_normal((1, 1, 150, 131)).astype(np.float32)
    with segrt.Engine(models / "basicunet2d_tiny.onnx", device="cuda") as e:
        host = segrt.sliding_window(e, img, (64, 64), sw_batch=4, output="probs", progress=False)
        dev, stats = segrt.sliding_window(e, torch.from_numpy(img).cuda(), (64, 64), sw_batch=4, output="probs",
                                          progress=False, return_stats=True)
        assert stats["on_device"] is True and isinstance(dev, segrt.DeviceArray)
        assert np.array_equal(segrt.to_numpy(dev), host)
        labels, st = segrt.sliding_window(e, torch.from_numpy(img).cuda(), (64, 64), progress=False,
                                          return_stats=True)  # sw_batch="auto": another batch, other plans
        assert st["batch"] >= 1 and torch.from_dlpack(labels).dtype == torch.uint8
        agree = np.mean(torch.from_dlpack(labels).cpu().numpy()[:, 0] == host.argmax(axis=1))
        assert agree > 0.999, agree
        cpu_ref = None
        with segrt.Engine(models / "basicunet2d_tiny.onnx") as c:
            cpu_ref = segrt.sliding_window(c, img, (64, 64), sw_batch=4, output="probs", progress=False)
        assert segrt.compare(host, cpu_ref)["rel_l2"] < 1e-4


def test_threads_and_memory(engine, tiny_plan):
    _, x = tiny_plan
    want = engine(x)
    xt = torch.from_numpy(x).cuda()
    bad = []

    def work():
        for i in range(50):
            y = engine(xt) if i % 2 else engine(x)
            if not np.array_equal(segrt.to_numpy(y), want):
                bad.append(i)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not bad
    for _ in range(50):
        engine(xt)
    free0 = segrt.devices()[0]["free_memory"]
    for _ in range(200 if SANITIZED else 1000):
        y = engine(xt)
    del y
    gc.collect()
    assert free0 - segrt.devices()[0]["free_memory"] < 64 << 20


def test_device_array_protocol(engine, tiny_plan):
    _, x = tiny_plan
    y = engine(torch.from_numpy(x).cuda())
    assert y.__dlpack_device__() == (2, 0)
    c = torch.from_dlpack(y.__dlpack__(copy=True))
    assert c.data_ptr() != y.data_ptr and torch.equal(c, torch.from_dlpack(y))
    assert "DeviceArray" in repr(y) and y.nbytes == x.shape[0] * 2 * x.shape[2] * x.shape[3] * 4
    with pytest.raises(BufferError):
        y.__dlpack__(dl_device=(1, 0))


def test_a_reused_result_block_waits_for_its_consumer(engine, tiny_plan):
    """A result handed to torch and dropped while torch still has work on
    it queued on another stream: the block goes back to segrt's cache, and
    the next result of its size must not overwrite it before that work has
    read it."""
    _, x = tiny_plan
    xt = torch.from_numpy(x).cuda()
    want = torch.from_dlpack(engine(xt)).double().sum().item()
    side = torch.cuda.Stream()
    sums = []
    for _ in range(8):
        t = torch.from_dlpack(engine(xt))
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(50_000_000)  # keeps the side stream busy for tens of ms
            sums.append(t.double().sum())
        del t  # the DeviceArray dies with the tensor: its block goes back to the cache
        engine(xt.neg())  # the next result of that size takes the block
    torch.cuda.synchronize()
    assert [s.item() for s in sums] == [want] * len(sums)


def test_readme_examples_on_the_gpu(models):
    """python/examples as the README shows them, on the GPU at their sizes."""
    import os
    import pathlib
    import subprocess
    import sys
    examples = pathlib.Path(__file__).resolve().parents[2] / "python" / "examples"
    for name, model, extra in (("ct_volume.py", "unet3d_spleen.onnx", []),
                               ("slide_patches.py", "basicunet2d.onnx", []),
                               ("torch_cuda.py", "basicunet2d.onnx", [])):
        p = subprocess.run([sys.executable, str(examples / name), str(models / model), *extra], capture_output=True,
                           text=True, timeout=600, env=os.environ)
        assert p.returncode == 0, (name, p.stderr + p.stdout)
        print(p.stdout.strip())
