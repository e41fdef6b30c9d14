"""segrt.sliding_window against `segrt run --roi` (the C API's window job)
on the same model, image and options: bit for bit on the CPU, for labels,
probabilities and logits, Gaussian and constant blending, mirroring and
ensembles; progress callbacks; argument checks."""
import numpy as np
import pytest

import segrt
from conftest import SANITIZED, run_segrt


def cli_windows(models, tmp_path, img, *flags, extra_models=()):
    np.save(tmp_path / "img.npy", img)
    args = ["run", models / "basicunet2d_tiny.onnx", tmp_path / "img.npy", "-o", tmp_path / "res.npy", *flags]
    for m in extra_models:
        args += ["--model", m]
    run_segrt(*args)
    return np.load(tmp_path / "res.npy")


CASES = [
    dict(roi=(32, 32), overlap=0.25, output="labels", blend="gaussian"),
    dict(roi=(32, 48), overlap=(0.5, 0.25), output="probs", blend="constant", sw_batch=3),
    dict(roi=(48, 32), overlap=0.5, output="logits", blend="gaussian", tta="mirror", sw_batch=2),
]


@pytest.mark.parametrize("case", CASES[:1] if SANITIZED else CASES)
def test_sliding_window_is_the_cli(models, tiny_engine, tmp_path, case):
    img = np.random.default_rng(1).standard_normal((1, 1, 83, 70)).astype(np.float32)
    flags = ["--roi", ",".join(map(str, case["roi"])), "--output", case["output"], "--blend", case["blend"]]
    ov = case["overlap"]
    flags += ["--overlap", ",".join(map(str, ov)) if isinstance(ov, tuple) else str(ov)]
    if "sw_batch" in case:
        flags += ["--sw-batch", str(case["sw_batch"])]
    if "tta" in case:
        flags += ["--tta", "mirror"]
    want = cli_windows(models, tmp_path, img, *flags)
    got, stats = segrt.sliding_window(tiny_engine, img, progress=False, return_stats=True, **case)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want)
    assert stats["on_device"] is False and stats["batch"] == case.get("sw_batch", 1)


def test_ensemble_is_the_cli(models, tiny_engine, tmp_path):
    img = np.random.default_rng(2).standard_normal((1, 1, 64, 50)).astype(np.float32)
    other = models / "basicunet2d_tiny.onnx"
    want = cli_windows(models, tmp_path, img, "--roi", "32,32", "--output", "probs", "--blend", "gaussian",
                       extra_models=[other])
    with segrt.Engine(other) as second:
        got = segrt.sliding_window([tiny_engine, second], img, (32, 32), output="probs", progress=False)
    assert np.array_equal(got, want)


def test_progress_and_results(tiny_engine):
    img = np.random.default_rng(3).standard_normal((2, 1, 70, 53)).astype(np.float32)
    calls = []
    labels = segrt.sliding_window(tiny_engine, img, 32, sw_batch=3, progress=lambda d, t: calls.append((d, t)))
    assert labels.dtype == np.uint8 and labels.shape == (2, 1, 70, 53)
    total = calls[-1][1]
    assert calls[-1][0] == total and all(t == total for _, t in calls)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls) and len(calls) == -(-total // 3)
    probs = segrt.sliding_window(tiny_engine, img, 32, sw_batch=3, output="probs", progress=False)
    assert np.allclose(probs.sum(axis=1), 1, atol=1e-5)
    assert np.array_equal(probs.argmax(axis=1)[:, None].astype(np.uint8), labels)
    assert probs.base is not None  # segrt's own result, not a copy

    def boom(done, total):
        raise KeyError("stop")

    with pytest.raises(KeyError, match="stop"):
        segrt.sliding_window(tiny_engine, img, 32, progress=boom)


def test_bad_window_arguments(tiny_engine):
    img = np.zeros((1, 1, 40, 40), np.float32)
    with pytest.raises(ValueError, match="roi: want 2 ints"):
        segrt.sliding_window(tiny_engine, img, (32, 32, 32))
    with pytest.raises(ValueError, match="output: want one of"):
        segrt.sliding_window(tiny_engine, img, 32, output="masks")
    with pytest.raises(ValueError, match="sw_batch"):
        segrt.sliding_window(tiny_engine, img, 32, sw_batch=0)
    with pytest.raises(segrt.InvalidArgumentError, match="overlap"):
        segrt.sliding_window(tiny_engine, img, 32, overlap=1.5, progress=False)
    with pytest.raises(ValueError, match="image: want N x C x spatial"):
        segrt.sliding_window(tiny_engine, img[0, 0, 0], 32)
    with pytest.raises(segrt.InvalidArgumentError, match="float32"):
        segrt.sliding_window(tiny_engine, img.astype(np.float64), 32, progress=False)
    with pytest.raises(ValueError, match="tta"):
        segrt.sliding_window(tiny_engine, img, 32, tta=[5])
