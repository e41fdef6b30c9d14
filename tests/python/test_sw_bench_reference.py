"""bench/sw_vs_monai.py's two sides against MONAI's sliding_window_inference
reproduced in numpy (sw_reference.py, onnxruntime running the windows), on
the CPU with tiny random convolutional nets, 2D and 3D, odd sizes, images
smaller than the window, both blend modes:

- the window geometry (pure Python): the same windows in the same order;
- monai_sliding_window, the PyTorch side, with the net as torch functions
  and through onnx2torch as the bench converts it: logits within 1e-5
  relative (skipped without torch, or without onnx2torch for the latter);
- SegrtSide, the segrt side through segrt_capi's window bindings: logits
  within 1e-5 relative, and labels equal away from ties (skipped where
  libsegrt cannot be loaded, and in the sanitizer build, whose library
  cannot be loaded into a plain Python).

The bench's table and the merge of split runs in bench/report.py are
checked on made-up results.
"""
from __future__ import annotations

import json
import pathlib
import sys

import numpy as np
import pytest
from onnx import helper

from conftest import SANITIZED
from onnx_util import init, save_model, tensor_input
import sw_reference as ref

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import report  # noqa: E402
import sw_vs_monai as swb  # noqa: E402

TOL = 1e-5  # max abs diff <= TOL * max(1, max |ref|)

# (spatial, roi, overlap, sw_batch, images, channels): odd sizes, windows
# spanning two images, axes smaller than the window (padded), one window
# as large as an axis.
CASES = {
    "2d-odd": ((37, 29), (16, 12), 0.25, 3, 2, 2),
    "2d-pad": ((11, 40), (16, 16), 0.5, 4, 1, 1),
    "2d-whole-axis": ((16, 45), (16, 20), 0.3, 2, 1, 3),
    "3d-odd": ((19, 23, 17), (8, 8, 8), 0.5, 4, 1, 2),
    "3d-pad": ((6, 20, 13), (8, 10, 8), 0.4, 3, 2, 1),
}


def make_net(path, n_dims, channels, classes=3, hidden=4, seed=0):
    """Conv 3^d pad 1 -> LeakyRelu -> Conv 1x1 to `classes`, batch and
    spatial dims symbolic; returns the weights as well."""
    rng = np.random.default_rng(seed)
    spatial = ["D", "H", "W"][3 - n_dims:]
    w = {
        "w1": (rng.standard_normal([hidden, channels] + [3] * n_dims) / np.sqrt(channels * 3 ** n_dims)),
        "b1": 0.1 * rng.standard_normal(hidden),
        "w2": rng.standard_normal([classes, hidden] + [1] * n_dims),
        "b2": 0.1 * rng.standard_normal(classes),
    }
    w = {k: v.astype(np.float32) for k, v in w.items()}
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["h"], kernel_shape=[3] * n_dims, pads=[1] * (2 * n_dims)),
        helper.make_node("LeakyRelu", ["h"], ["r"], alpha=0.1),
        helper.make_node("Conv", ["r", "w2", "b2"], ["y"], kernel_shape=[1] * n_dims),
    ]
    save_model(path, nodes, [tensor_input("x", ["N", channels] + spatial)],
               [tensor_input("y", ["N", classes] + spatial)], [init(k, v) for k, v in w.items()])
    return w


def case_data(tmp_path, name, blend):
    spatial, roi, overlap, sw_batch, n_img, channels = CASES[name]
    path = tmp_path / f"net{len(spatial)}d.onnx"
    weights = make_net(path, len(spatial), channels)
    image = np.random.default_rng(1).standard_normal((n_img, channels) + spatial).astype(np.float32)
    want = ref.sliding_window(image, roi, ref.ort_predictor(path), overlap=overlap, sw_batch=sw_batch, blend=blend)
    job = swb.Job(name, "net", image.shape, roi, overlap, 1)
    return path, weights, image, job, sw_batch, want


def assert_close(got, want):
    got = np.asarray(got)
    assert got.shape == want.shape and got.dtype == np.float32, (got.shape, got.dtype)
    err = float(np.abs(got - want).max())
    assert err <= TOL * max(1.0, float(np.abs(want).max())), f"max abs diff {err}"


# ---------------------------------------------------------------------------
# geometry (no torch needed)


@pytest.mark.parametrize("size, roi, overlap", [
    (s, r, o) for s in (1, 7, 16, 33, 110, 2048) for r in (1, 5, 16, 64, 512) for o in (0.0, 0.25, 0.5, 0.7, 0.95)
    if r <= s])
def test_window_starts_match_the_reference(size, roi, overlap):
    assert swb.monai_axis_starts(size, roi, overlap) == ref.monai_starts(size, roi, overlap)


@pytest.mark.parametrize("name", sorted(CASES))
def test_window_slices_and_pads_match_the_reference(name):
    spatial, roi, overlap, *_ = CASES[name]
    image = np.zeros((1, 1) + spatial, np.float32)
    padded, pads = ref.pad_image(image, roi)
    assert swb.monai_pads(spatial, roi) == pads
    want = ref.window_starts(padded.shape[2:], roi, (overlap,) * len(roi))
    got = [tuple(s.start for s in sl) for sl in swb.monai_window_slices(padded.shape[2:], roi, overlap)]
    assert got == want
    assert swb.window_count((3, 1) + spatial, roi, overlap) == 3 * len(want)


def test_the_jobs_window_counts():
    """The issue's figures: 25 windows in 2D, 500 in 3D."""
    assert swb.window_count(swb.JOBS["2d"].image, swb.JOBS["2d"].roi, swb.JOBS["2d"].overlap) == 25
    assert swb.window_count(swb.JOBS["3d"].image, swb.JOBS["3d"].roi, swb.JOBS["3d"].overlap) == 500


def test_image_is_seeded_and_float32():
    a = swb.make_image((1, 2, 40, 33), seed=3)
    assert a.dtype == np.float32 and a.shape == (1, 2, 40, 33) and a.flags.c_contiguous
    assert np.array_equal(a, swb.make_image((1, 2, 40, 33), seed=3))
    assert not np.array_equal(a, swb.make_image((1, 2, 40, 33), seed=4))
    assert swb.label_agreement(np.zeros((2, 3)), np.array([[0, 1, 0], [0, 0, 0]])) == pytest.approx(5 / 6)


# ---------------------------------------------------------------------------
# the PyTorch side


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def functional_net(torch, weights, n_dims):
    """The ONNX net written with torch.nn.functional, as a predictor."""
    import torch.nn.functional as F
    conv = F.conv2d if n_dims == 2 else F.conv3d
    t = {k: torch.from_numpy(v) for k, v in weights.items()}

    def predict(x):
        h = F.leaky_relu(conv(x, t["w1"], t["b1"], padding=1), 0.1)
        return conv(h, t["w2"], t["b2"])
    return predict


@pytest.mark.parametrize("blend", ["constant", "gaussian"])
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("net", ["functional", "onnx2torch"])
def test_torch_side_matches_the_reference(torch, tmp_path, name, blend, net):
    path, weights, image, job, sw_batch, want = case_data(tmp_path, name, blend)
    if net == "onnx2torch":
        pytest.importorskip("onnx2torch")
        import onnx
        module = swb.gvp.torch_module(onnx.load(str(path)))
        predictor = swb.torch_predictor(module, torch.device("cpu"), amp=False)
    else:
        predictor = functional_net(torch, weights, len(job.roi))
    with torch.inference_mode():
        got = swb.monai_sliding_window(torch.from_numpy(image), job.roi, sw_batch, predictor, overlap=job.overlap,
                                       mode=blend)
    assert_close(got.numpy(), want)
    labels = swb.torch_labels(image, torch.device("cpu"), predictor, job, sw_batch, blend)
    assert labels.dtype == np.uint8 and labels.shape == (image.shape[0], 1) + image.shape[2:]
    tie = ref.ambiguous_labels(want, activation="none")
    assert np.array_equal(labels[~tie], want.argmax(axis=1)[:, None][~tie])


@pytest.mark.parametrize("blend", ["constant", "gaussian"])
def test_importance_map_matches_the_reference(torch, blend):
    for roi in [(7,), (16, 12), (9, 10, 11), (96, 96, 96)]:
        got = swb.monai_importance_map(roi, blend, 0.125, "cpu").numpy()
        want = ref.importance_map(roi, blend)
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=0)


# ---------------------------------------------------------------------------
# the segrt side


@pytest.fixture
def segrt_lib():
    if SANITIZED:
        pytest.skip("the sanitizer build's libsegrt cannot be loaded into a plain Python")
    import segrt_capi as sc
    try:
        sc.library()
        sc.fn("segrt_window_run")
    except (OSError, sc.SegrtError) as e:
        pytest.skip(f"libsegrt with the window API not loadable: {e}")
    return sc


@pytest.mark.parametrize("blend", ["constant", "gaussian"])
@pytest.mark.parametrize("name", ["2d-odd", "2d-pad", "3d-pad"])
def test_segrt_side_matches_the_reference(segrt_lib, tmp_path, name, blend):
    path, _, image, job, sw_batch, want = case_data(tmp_path, name, blend)
    seg = swb.SegrtSide(path, image, job, sw_batch, blend, "cpu", output="logits")
    try:
        assert seg.input_dims == (sw_batch, image.shape[1]) + tuple(job.roi)
        with seg.run() as res:
            assert_close(res.array, want)
    finally:
        seg.close()
    seg = swb.SegrtSide(path, image, job, sw_batch, blend, "cpu")
    try:
        labels = seg.opts.run(seg.ctx, image)
    finally:
        seg.close()
    assert labels.dtype == np.uint8 and labels.shape == (image.shape[0], 1) + image.shape[2:]
    tie = ref.ambiguous_labels(want)
    assert np.array_equal(labels[~tie], want.argmax(axis=1)[:, None][~tie])


def test_window_options_refuse_bad_values(segrt_lib):
    sc = segrt_lib
    with pytest.raises(sc.SegrtError, match="overlap"):
        sc.WindowOptions((8, 8), overlap=1.0)
    with pytest.raises(ValueError, match="blend"):
        sc.WindowOptions((8, 8), blend="cosine")
    with sc.WindowOptions((8, 8), batch=5) as o:
        assert o.input_dims(np.zeros((2, 3, 20, 30), np.float32)) == (5, 3, 8, 8)


# ---------------------------------------------------------------------------
# bench/report.py's table


def _case(job, sw_batch, seg_ms, torch_ms, **kw):
    side = {"median_ms": 0, "p10_ms": 0, "p90_ms": 0, "windows_per_s": 10.0, "tflops": 1.0}
    c = {"job": job, "model": "m", "image_shape": [1, 1, 64, 64], "roi": [32, 32], "overlap": 0.5,
         "sw_batch": sw_batch, "blend": "gaussian", "windows": 9,
         "segrt": dict(side, median_ms=seg_ms, p10_ms=seg_ms, p90_ms=seg_ms, peak_bytes_sampled=3 << 20),
         "torch": dict(side, median_ms=torch_ms, p10_ms=torch_ms, p90_ms=torch_ms, peak_bytes=5 << 20),
         "speedup": torch_ms / seg_ms if seg_ms else None, "labels_agreement": 0.9995}
    c.update(kw)
    return c


def _sw_result(date, cases, small=False):
    return {"benchmark": "sw_vs_monai", "date": date, "device": {"name": "GPU X", "driver": "1"},
            "versions": {"segrt": "0.1", "torch": "2"}, "settings": {"small": small, "target_speedup": 5.0},
            "cases": cases, "complete": True}


def test_sw_table_merge_and_readme(tmp_path):
    a = _sw_result("2026-01-01T10:00:00", [_case("2d", 4, 10.0, 60.0), _case("3d", 4, 0, 0, error="Boom: x")])
    b = _sw_result("2026-01-01T11:00:00", [_case("3d", 4, 100.0, 300.0)])
    m = report.sw_merge([a, b])
    assert [c["job"] for c in m["cases"]] == ["2d", "3d"] and m["date"] == b["date"]
    text = report.sw_markdown(m)
    rows = [line for line in text.splitlines() if line.startswith("| 2d") or line.startswith("| 3d")]
    assert len(rows) == 2
    assert "6.00×" in rows[0] and "| met |" in rows[0]
    assert "3.00×" in rows[1] and "**not met**" in rows[1]
    assert "99.950" in rows[0] and "3 · 5" in rows[0]
    with pytest.raises(ValueError, match="devices"):
        report.sw_merge([a, dict(b, device={"name": "GPU Y"})])
    failed = report.sw_markdown(a).splitlines()
    assert any(line.startswith("| 3d") and "Boom" in line for line in failed)
    # latest: smoke runs do not count; the README section is replaced.
    (tmp_path / "sw_vs_monai-x-1.json").write_text(json.dumps(a))
    (tmp_path / "sw_vs_monai-x-2.json").write_text(json.dumps(_sw_result("2027-01-01", [], small=True)))
    path, r = report.latest_result(tmp_path, "sw_vs_monai-*.json")
    assert path.name == "sw_vs_monai-x-1.json"
    readme = tmp_path / "README.md"
    readme.write_text(f"x\n{report.SW_BEGIN}\nold\n{report.SW_END}\n{report.BEGIN}\nkeep\n{report.END}\n")
    report.main(["--sw", "--results", str(tmp_path), "--readme", str(readme)])
    text = readme.read_text()
    assert "old" not in text and "keep" in text and "| 2d" in text


def test_sw_table_host_times():
    times = {"seconds_setup": 0.009, "seconds_run": 0.0186, "seconds_uploading": 0.0059,
             "seconds_waiting": 0.0, "seconds_downloading": 0.0123}
    with_times = _case("2d", 16, 30.0, 42.0, segrt_stats=dict(times, on_device=1))
    without = _case("3d", 16, 100.0, 300.0, segrt_stats={"on_device": 1})
    text = report.sw_markdown(_sw_result("2026-01-01", [with_times, without]))
    line = next(x for x in text.splitlines() if x.startswith("Where segrt's host time went"))
    assert "2d: setup 9.0 ms, windows 18.6 ms (copying image rows 5.9" in line and "result out 12.3" in line
    assert "3d:" not in line
    # Results from before the timed call have no such line.
    assert "host time" not in report.sw_markdown(_sw_result("2026-01-01", [without]))
