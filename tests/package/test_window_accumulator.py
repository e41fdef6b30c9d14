"""The `accumulator` keyword ("fp32", "fp16", "bf16": the CUDA path's
window sums, issue 39 item 5) of sliding_window, run_volume (with and
without preprocessing) and run_cases: another value raises ValueError
naming it before any work; on the CPU, whose host path always sums in
float32, each value gives fp32's result bit for bit, so the keyword reaches
the C API without changing anything else. The half-size sums themselves
are tests/gpu/test_gpu_sliding_window.py's."""
import numpy as np
import pytest

import segrt

nib = pytest.importorskip("nibabel")

BAD = ["fp8", "FP16", "float16", "half", "", None, 16]
TYPES = ["fp32", "fp16", "bf16"]


def volume(path, shape=(24, 20, 18), seed=4):
    rng = np.random.default_rng(seed)
    nib.save(nib.Nifti1Image(rng.normal(0, 1, shape).astype(np.float32), np.diag([0.9, 0.8, 2.0, 1.0])), path)
    return path


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_sliding_window_refuses_other_values(tiny_engine, bad):
    img = np.zeros((1, 1, 32, 32), np.float32)
    with pytest.raises(ValueError, match="accumulator"):
        segrt.sliding_window(tiny_engine, img, 32, accumulator=bad, progress=False)


@pytest.mark.parametrize("output", ["logits", "probs", "labels"])
def test_sliding_window_on_the_cpu_ignores_the_type(tiny_engine, output):
    img = np.random.default_rng(5).standard_normal((1, 1, 70, 53)).astype(np.float32)
    kw = dict(overlap=0.5, sw_batch=2, blend="gaussian", tta="mirror", output=output, progress=False)
    want = segrt.sliding_window(tiny_engine, img, 32, accumulator="fp32", **kw)
    assert np.array_equal(want, segrt.sliding_window(tiny_engine, img, 32, **kw))
    for t in TYPES[1:]:
        got = segrt.sliding_window(tiny_engine, img, 32, accumulator=t, **kw)
        assert got.dtype == want.dtype and np.array_equal(got, want), t


def test_run_volume(tmp_path, models):
    path = volume(tmp_path / "v.nii.gz")
    with segrt.Engine(models / "unet3d_spleen.onnx") as engine:
        for pre in (None, "none"):
            want, _ = segrt.run_volume(engine, path, 16, overlap=0.5, sw_batch=1, preprocess=pre, progress=False)
            for t in TYPES[1:]:
                got, _ = segrt.run_volume(engine, path, 16, overlap=0.5, sw_batch=1, preprocess=pre,
                                          progress=False, accumulator=t)
                assert np.array_equal(got, want), (pre, t)
            with pytest.raises(ValueError, match="accumulator"):
                segrt.run_volume(engine, path, 16, preprocess=pre, progress=False, accumulator="fp8")


def test_run_cases(tmp_path, models):
    model = models / "unet3d_spleen.onnx"
    (tmp_path / "in").mkdir()
    volume(tmp_path / "in" / "c0.nii.gz")
    for t in TYPES:
        r = segrt.run_cases(model, tmp_path / "in", tmp_path / t, roi=16, sw_batch=1, accumulator=t)
        assert r["done"] == 1 and r["failed"] == 0, r["message"]
        assert (tmp_path / t / "c0.nii.gz").read_bytes() == (tmp_path / "fp32" / "c0.nii.gz").read_bytes(), t
    for bad in BAD:
        with pytest.raises(ValueError, match="accumulator"):
            segrt.run_cases(model, tmp_path / "in", tmp_path / "bad", roi=16, accumulator=bad)
    assert not (tmp_path / "bad").exists()
