"""`segrt run --roi` (sliding-window inference) against MONAI's
sliding_window_inference reproduced in numpy (sw_reference.py), with
onnxruntime running the windows, on small random convolutional nets.

Each case is one set of options over one random image; a failing case's
id names it, and the model, image and outputs are left in pytest's
tmp_path. Bad options end with exit code 2 and one line on stderr.
Mirroring (--tta) and ensembles (--model) have their own cases, skipped
while `segrt run --help` does not mention --tta.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
import subprocess

import numpy as np
import pytest
from onnx import helper

from conftest import SEGRT, run_segrt
from onnx_util import init, save_model, tensor_input
import sw_reference as ref

TOL = 1e-5  # logits/probs: max abs diff <= TOL * max(1, max |ref|); labels: tie margin


@functools.lru_cache(maxsize=None)
def _help_text():
    p = run_segrt("run", "--help", timeout=60)
    return p.stdout + p.stderr


@pytest.fixture(autouse=True)
def _needs_sliding_window():
    if "--roi" not in _help_text():
        pytest.skip("`segrt run --help` does not mention --roi: sliding-window mode is not built yet")


@pytest.fixture
def needs_tta():
    if "--tta" not in _help_text():
        pytest.skip("`segrt run --help` does not mention --tta: mirroring and ensembles are not built yet")


# ---------------------------------------------------------------------------
# models


def make_convnet(path, n_dims, channels, classes, hidden=4, seed=0):
    """Conv 3^d pad 1 -> Relu -> Conv 1x1 to `classes`; batch and spatial
    dims symbolic so one model serves every window and sw-batch."""
    rng = np.random.default_rng(seed)
    spatial = ["D", "H", "W"][3 - n_dims:]
    k3 = [3] * n_dims
    w1 = (rng.standard_normal([hidden, channels] + k3) / np.sqrt(channels * 3 ** n_dims)).astype(np.float32)
    b1 = (0.1 * rng.standard_normal(hidden)).astype(np.float32)
    w2 = rng.standard_normal([classes, hidden] + [1] * n_dims).astype(np.float32)
    b2 = (0.1 * rng.standard_normal(classes)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["h"], kernel_shape=k3, pads=[1] * (2 * n_dims)),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Conv", ["r", "w2", "b2"], ["y"], kernel_shape=[1] * n_dims),
    ]
    save_model(path, nodes, [tensor_input("x", ["N", channels] + spatial)],
               [tensor_input("y", ["N", classes] + spatial)],
               [init("w1", w1), init("b1", b1), init("w2", w2), init("b2", b2)])
    return path


# ---------------------------------------------------------------------------
# cases


@dataclasses.dataclass
class SW:
    """One sliding-window run: image N x C x spatial, model to K classes."""
    spatial: tuple
    roi: tuple
    n: int = 1
    c: int = 1
    k: int = 2
    overlap: object = 0.25          # a float, or one per axis
    sw_batch: int = 1
    blend: str = "constant"
    sigma_scale: float | None = None  # None: the default 0.125, not passed
    pad: str = "constant"
    pad_value: float = 0.0
    grid: str = "monai"
    kind: str = "logits"
    activation: str | None = None   # None: not passed (softmax for probs/labels)
    threshold: float | None = None
    seed: int = 0
    tta: object = None              # None: off; "all": --tta mirror; a tuple: --tta mirror=AXES
    models: int = 1                 # ensemble size: MODEL and models - 1 --model others

    def tta_axes(self):
        if self.tta is None:
            return None
        return tuple(range(len(self.spatial))) if self.tta == "all" else tuple(self.tta)

    def args(self):
        a = ["--roi", ",".join(map(str, self.roi)), "--sw-batch", self.sw_batch, "--blend", self.blend,
             "--pad", self.pad, "--grid", self.grid, "--output-kind", self.kind]
        ov = self.overlap if isinstance(self.overlap, (tuple, list)) else (self.overlap,)
        a += ["--overlap", ",".join(map(str, ov))]
        if self.pad_value:
            a += ["--pad-value", self.pad_value]
        if self.sigma_scale is not None:
            a += ["--sigma-scale", self.sigma_scale]
        if self.activation is not None:
            a += ["--activation", self.activation]
        if self.threshold is not None:
            a += ["--threshold", self.threshold]
        if self.tta is not None:
            a += ["--tta", "mirror" if self.tta == "all" else "mirror=" + ",".join(map(str, self.tta))]
        return a


CASES = {
    # 2-D
    "2d-odd-o25-const": SW((37, 53), (16, 16)),
    "2d-n2c2-gauss-o50-sw3-probs": SW((70, 53), (32, 24), n=2, c=2, k=3, overlap=0.5, sw_batch=3,
                                      blend="gaussian", kind="probs", seed=1),
    "2d-o75-gauss-sigma25-sw4-labels": SW((41, 29), (16, 16), k=5, overlap=0.75, sw_batch=4, blend="gaussian",
                                          sigma_scale=0.25, kind="labels", seed=2),
    "2d-o0-k1-sw4": SW((45, 31), (16, 12), k=1, overlap=0.0, sw_batch=4, seed=3),
    "2d-per-axis-overlap": SW((50, 33), (20, 12), k=2, overlap=(0.5, 0.0), sw_batch=3, blend="gaussian", seed=4),
    "2d-roi-whole-axis": SW((23, 61), (-1, 16), n=2, k=3, overlap=0.5, sw_batch=4, seed=5),
    "2d-roi-equals-image": SW((16, 40), (16, 24), k=2, overlap=0.5, blend="gaussian", seed=6),
    "2d-small-pad1.5": SW((10, 40), (16, 16), c=2, k=2, pad_value=1.5, sw_batch=3, seed=7),
    "2d-small-both-pad0": SW((9, 7), (16, 12), n=2, k=3, blend="gaussian", kind="probs", seed=8),
    "2d-small-reflect": SW((9, 30), (16, 8), c=2, k=3, pad="reflect", overlap=0.5, sw_batch=4, seed=9),
    "2d-reflect-past-edge": SW((5, 3), (16, 8), k=2, pad="reflect", seed=10),
    "2d-reflect-size1": SW((1, 20), (6, 8), k=2, pad="reflect", seed=11),
    "2d-small-replicate": SW((5, 30), (12, 12), n=2, k=2, pad="replicate", blend="gaussian", sw_batch=3, seed=12),
    "2d-nnunet-o50-gauss": SW((70, 53), (32, 32), k=3, overlap=0.5, grid="nnunet", blend="gaussian",
                              sw_batch=3, seed=13),
    "2d-nnunet-o50-gauss-nnunet": SW((70, 53), (32, 32), k=3, overlap=0.5, grid="nnunet",
                                     blend="gaussian-nnunet", sw_batch=3, seed=22),
    # sigma 0.05 x 31: 4 sigma is 6 voxels, so the map is 0 past them and
    # the corners' float16 underflow too: both raised to the least weight.
    "2d-nnunet-gauss-nnunet-cut": SW((40, 45), (31, 31), k=2, overlap=0.5, grid="nnunet",
                                     blend="gaussian-nnunet", sigma_scale=0.05, seed=23),
    "2d-nnunet-o25-small": SW((13, 47), (16, 16), n=2, c=2, k=2, grid="nnunet", pad="replicate", seed=14),
    "2d-nnunet-o75-labels": SW((33, 21), (12, 12), k=5, overlap=0.75, grid="nnunet", kind="labels",
                               sw_batch=4, seed=15),
    "2d-sigmoid-probs": SW((29, 31), (16, 16), k=3, overlap=0.5, kind="probs", activation="sigmoid",
                           blend="gaussian", seed=16),
    "2d-sigmoid-labels-t0.3": SW((29, 31), (16, 16), n=2, k=3, overlap=0.5, kind="labels",
                                 activation="sigmoid", threshold=0.3, sw_batch=4, seed=17),
    "2d-k1-sigmoid-labels": SW((27, 19), (12, 12), k=1, kind="labels", activation="sigmoid", seed=18),
    "2d-none-labels": SW((31, 26), (16, 16), k=3, kind="labels", activation="none", sw_batch=3, seed=19),
    "2d-softmax-explicit-probs": SW((20, 44), (16, 16), k=5, kind="probs", activation="softmax", seed=20),
    "2d-probs-none": SW((20, 21), (16, 16), k=2, kind="probs", activation="none", seed=21),
    # 3-D
    "3d-odd-o25-const": SW((20, 17, 19), (8, 8, 8), seed=30),
    "3d-n2c2-gauss-o50-sw4-probs": SW((19, 20, 13), (12, 8, 10), n=2, c=2, k=3, overlap=0.5, sw_batch=4,
                                      blend="gaussian", kind="probs", seed=31),
    "3d-small-reflect-labels": SW((6, 20, 11), (10, 10, 10), k=5, pad="reflect", kind="labels", sw_batch=3,
                                  seed=32),
    "3d-nnunet-replicate-sigmoid-labels": SW((15, 18, 7), (8, 8, 8), k=3, overlap=0.5, grid="nnunet",
                                             pad="replicate", kind="labels", activation="sigmoid",
                                             threshold=0.3, sw_batch=3, blend="gaussian", seed=33),
    "3d-o75-pad1.5": SW((13, 11, 20), (12, 12, 8), k=2, overlap=0.75, pad_value=1.5, sw_batch=4, seed=34),
    "3d-o0-k1-sigmoid-probs": SW((17, 16, 9), (8, 8, 8), n=2, k=1, overlap=0.0, kind="probs",
                                 activation="sigmoid", seed=35),
    "3d-nnunet-gauss-nnunet-probs": SW((20, 19, 16), (10, 9, 12), k=3, overlap=0.5, grid="nnunet",
                                       blend="gaussian-nnunet", kind="probs", sw_batch=2, seed=37),
    "3d-nnunet-o25-gauss-c2": SW((20, 13, 16), (10, 8, 12), c=2, k=2, grid="nnunet", blend="gaussian",
                                 sigma_scale=0.2, sw_batch=4, seed=36),
    # Every window inside the image on rows of 4-voxel multiples: the GPU
    # copies such windows 16 bytes at a time; batches of 7 straddle rows.
    "3d-aligned-n2c2-o50-sw7": SW((20, 24, 32), (8, 8, 16), n=2, c=2, k=3, overlap=0.5, sw_batch=7,
                                  blend="gaussian", seed=39),
    # 1-D (a signal: axis 0 is both the rows and the last axis)
    "1d-c2-gauss-o50-sw3-probs": SW((200,), (32,), c=2, k=3, overlap=0.5, sw_batch=3, blend="gaussian",
                                    kind="probs", seed=37),
    "1d-small-reflect-labels": SW((20,), (32,), n=2, k=4, pad="reflect", kind="labels", seed=38),
}

# Mirroring and ensembles (nnU-Net's): per window and per model, the
# flips' mean; then the models' mean; then blending as above.
TTA_CASES = {
    "2d-tta-all-o50-sw3": SW((37, 29), (16, 16), k=3, overlap=0.5, sw_batch=3, tta="all", seed=40),
    "2d-tta-axis1-gauss-n2-probs": SW((30, 41), (16, 16), n=2, c=2, k=3, blend="gaussian", kind="probs",
                                      tta=(1,), seed=41),
    "2d-tta-1,0-small-replicate": SW((9, 30), (16, 12), k=2, pad="replicate", sw_batch=3, tta=(1, 0), seed=42),
    "3d-tta-all-sw3": SW((13, 11, 10), (8, 8, 8), k=2, sw_batch=3, tta="all", seed=43),
    "3d-tta-0,2-nnunet-gauss-sw5-labels": SW((15, 12, 11), (8, 8, 8), k=4, overlap=0.5, grid="nnunet",
                                             blend="gaussian", kind="labels", sw_batch=5, tta=(0, 2), seed=44),
    "2d-ens2-sw1": SW((37, 29), (16, 16), k=3, overlap=0.5, models=2, seed=45),
    "3d-ens3-sw3-probs": SW((14, 11, 12), (8, 8, 8), c=2, k=3, sw_batch=3, kind="probs", models=3, seed=46),
    "2d-ens3-tta-all-sw3-labels": SW((27, 35), (16, 16), n=2, k=4, overlap=0.5, sw_batch=3, kind="labels",
                                     blend="gaussian", tta="all", models=3, seed=47),
    "3d-ens2-tta-1-sw1-sigmoid-probs": SW((10, 13, 9), (8, 8, 8), k=2, kind="probs", activation="sigmoid",
                                          tta=(1,), models=2, seed=48),
}


def model_paths(tmp_path, case: SW):
    """MODEL then the ensemble's others: the same net shape, other seeds."""
    nd = len(case.spatial)
    return [make_convnet(tmp_path / f"model{m}.onnx", nd, case.c, case.k, seed=case.seed + 1000 * m)
            for m in range(case.models)]


def reference_result(case: SW, image, models):
    """The numpy reference's result for case (onnxruntime as the
    predictor): (want, logits, threshold). The GPU tests use it too."""
    logits = ref.sliding_window(image, case.roi, [ref.ort_predictor(m) for m in models], overlap=case.overlap,
                                sw_batch=case.sw_batch, blend=case.blend,
                                sigma_scale=0.125 if case.sigma_scale is None else case.sigma_scale,
                                pad=case.pad, pad_value=case.pad_value, grid=case.grid,
                                tta_axes=case.tta_axes())
    thr = 0.5 if case.threshold is None else case.threshold
    return ref.postprocess(logits, case.kind, case.activation, thr), logits, thr


def run_case(tmp_path, case: SW, quiet=True, stderr=None):
    """segrt's result and the reference's; stderr: a file for segrt's stderr
    (a terminal, say) instead of a pipe."""
    models = model_paths(tmp_path, case)
    rng = np.random.default_rng(1000 + case.seed)
    image = rng.standard_normal((case.n, case.c) + tuple(case.spatial)).astype(np.float32)
    img_path, out_path = tmp_path / "image.npy", tmp_path / "out.npy"
    np.save(img_path, image)
    others = [a for m in models[1:] for a in ("--model", m)]
    args = ["run", models[0], "--input", img_path, "--output", out_path, "--device", "cpu",
            *(["-q"] if quiet else []), *case.args(), *others]
    if stderr is None:
        p = run_segrt(*args, check=0, timeout=120)
    else:
        p = subprocess.run([SEGRT, *map(str, args)], stdout=subprocess.PIPE, stderr=stderr, text=True,
                           timeout=120)
        assert p.returncode == 0, f"exit {p.returncode}"
    got = np.load(out_path)
    want, logits, thr = reference_result(case, image, models)
    return got, want, logits, thr, p


@pytest.mark.parametrize("name", list(CASES))
def test_matches_monai_reference(tmp_path, name):
    check_case(tmp_path, CASES[name])


@pytest.mark.parametrize("name", list(TTA_CASES))
def test_tta_ensemble_matches_reference(tmp_path, needs_tta, name):
    """Also without -q: with stderr not a terminal, no progress line, so
    stderr stays empty."""
    p = check_case(tmp_path, TTA_CASES[name], quiet=False)
    assert p.stderr == "", f"stderr not empty without a terminal: {p.stderr!r}"


def check_case(tmp_path, case: SW, quiet=True):
    got, want, logits, thr, p = run_case(tmp_path, case, quiet)
    assert got.shape == want.shape, f"shape {got.shape}, want {want.shape}"
    assert got.dtype == want.dtype, f"dtype {got.dtype}, want {want.dtype}"
    if case.kind in ("logits", "probs"):
        scale = max(1.0, float(np.abs(want).max()))
        err = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max())
        where = np.unravel_index(np.argmax(np.abs(got - want)), want.shape)
        assert err <= TOL * scale, f"max abs diff {err:.3g} at {where} (scale {scale:.3g})"
    else:
        ties = ref.ambiguous_labels(logits, case.activation, thr, TOL)
        bad = (got != want) & ~ties
        assert not bad.any(), (f"{int(bad.sum())} labels differ away from ties (first at "
                               f"{tuple(int(i[0]) for i in np.nonzero(bad))}); {int(ties.sum())} ties allowed")
    return p


def test_reference_sanity():
    """The oracle's own conventions, from the notes: grids and weights."""
    assert ref.monai_starts(110, 64, 0.5) == [0, 32, 46]
    assert ref.nnunet_starts(110, 64, 0.5) == [0, 23, 46]
    assert ref.monai_starts(64, 64, 0.5) == [0]
    w = ref.importance_map((9, 7), "gaussian")
    assert w.dtype == np.float32 and w[4, 3] == 1.0 and float(w.min()) >= 1e-3
    # A model that returns its input blends back to the image exactly.
    rng = np.random.default_rng(5)
    img = rng.standard_normal((2, 1, 23, 17)).astype(np.float32)
    for grid in ("monai", "nnunet"):
        out = ref.sliding_window(img, (8, 8), lambda x: x, overlap=0.5, sw_batch=3, blend="gaussian",
                                 grid=grid)
        np.testing.assert_allclose(out, img, rtol=1e-5, atol=1e-6)


def test_reference_tta_sanity():
    """Mirroring and ensembles in the oracle against a direct sum over the
    flips, on one window the size of the image (nothing else to blend)."""
    assert ref.mirror_combinations((2, 0, 1)) == [(0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2)]
    assert ref.mirror_combinations(()) == []
    rng = np.random.default_rng(6)
    img = rng.standard_normal((2, 1, 6, 5, 4)).astype(np.float32)
    # Position-dependent models: flipping in and back changes their result.
    weights = [rng.standard_normal((1, 1, 6, 5, 4)).astype(np.float32) for _ in range(2)]
    models = [lambda x, w=w: x * w for w in weights]
    for axes in ((0, 1, 2), (2,), (0, 2)):
        dims = [tuple(a + 2 for a in c) for c in ref.mirror_combinations(axes)]
        want = np.zeros(img.shape, np.float64)
        for f in models:
            for d in [()] + dims:
                want += np.flip(f(np.flip(img, d)), d) / (len(dims) + 1) / len(models)
        got = ref.sliding_window(img, (6, 5, 4), models, sw_batch=3, tta_axes=axes)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        assert np.abs(got - ref.sliding_window(img, (6, 5, 4), models)).max() > 0.1  # the flips matter
    # A model that returns its input still blends back to the image.
    out = ref.sliding_window(img, (4, 4, 4), [lambda x: x] * 3, overlap=0.5, sw_batch=3, blend="gaussian",
                             tta_axes=(0, 1, 2))
    np.testing.assert_allclose(out, img, rtol=1e-5, atol=1e-6)


def test_progress_on_terminal(tmp_path, needs_tta):
    """With stderr a terminal, a progress line goes there, and the result
    is the same."""
    try:
        master, slave = os.openpty()
    except OSError as e:
        pytest.skip(f"no pseudo-terminal here: {e}")
    try:
        got, want, _, _, _ = run_case(tmp_path, TTA_CASES["2d-tta-all-o50-sw3"], quiet=False, stderr=slave)
        os.close(slave)
        slave = -1
        text = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the other end is closed and everything read
                break
            if not chunk:
                break
            text += chunk
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)
    assert text.strip(), "no progress line on a terminal stderr"
    assert np.abs(got - want).max() <= TOL * max(1.0, float(np.abs(want).max()))


# ---------------------------------------------------------------------------
# bad input


@pytest.fixture
def bad_setup(tmp_path):
    m2 = make_convnet(tmp_path / "m2.onnx", 2, 1, 2)
    m3 = make_convnet(tmp_path / "m3.onnx", 3, 1, 2)
    rng = np.random.default_rng(0)
    img2 = tmp_path / "img2.npy"
    np.save(img2, rng.standard_normal((1, 1, 20, 20)).astype(np.float32))
    img64 = tmp_path / "img64.npy"
    np.save(img64, rng.standard_normal((1, 1, 20, 20)))
    return m2, m3, img2, img64, tmp_path / "out.npy"


def expect_bad(args, *any_of):
    p = run_segrt("run", *args, "--device", "cpu", "-q", timeout=60)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, f"exit {p.returncode}: {p.stderr}"
    assert len(lines) == 1, f"want one line, got: {p.stderr!r}"
    msg = lines[0]
    assert msg.startswith("segrt: "), msg
    assert any(w.lower() in msg.lower() for w in any_of), f"none of {any_of} in {msg!r}"
    return msg


def test_bad_overlap(bad_setup):
    m2, _, img2, _, out = bad_setup
    for ov in ("1.0", "1", "-0.1", "0.5,1.0"):
        expect_bad([m2, "--input", img2, "--output", out, "--roi", "8,8", "--overlap", ov], "overlap")


def test_bad_roi_dims(bad_setup):
    m2, _, img2, _, out = bad_setup
    for roi in ("8,8,8", "8"):
        expect_bad([m2, "--input", img2, "--output", out, "--roi", roi], "roi", "window")


def test_bad_sw_batch(bad_setup):
    m2, _, img2, _, out = bad_setup
    for b in ("0", "-2"):
        expect_bad([m2, "--input", img2, "--output", out, "--roi", "8,8", "--sw-batch", b], "sw-batch", "batch")


def test_2d_image_to_3d_model(bad_setup):
    _, m3, img2, _, out = bad_setup
    expect_bad([m3, "--input", img2, "--output", out, "--roi", "8,8"], "rank", "dims", "3-d", "2-d")


def test_float64_image(bad_setup):
    m2, _, _, img64, out = bad_setup
    expect_bad([m2, "--input", img64, "--output", out, "--roi", "8,8"], "float32", "float64")


def test_bad_tta(bad_setup, needs_tta):
    m2, _, img2, _, out = bad_setup
    for tta in ("mirror=5", "mirror=2", "flip", "mirror=0,x"):
        expect_bad([m2, "--input", img2, "--output", out, "--roi", "8,8", "--tta", tta],
                   "tta", "mirror", "axis", "axes")


def test_bad_ensemble_class_count(bad_setup, needs_tta):
    m2, _, img2, _, out = bad_setup
    k3 = make_convnet(out.parent / "m2k3.onnx", 2, 1, 3, seed=1)
    expect_bad([m2, "--input", img2, "--output", out, "--roi", "8,8", "--model", k3], "class")


def test_bad_ensemble_rank(bad_setup, needs_tta):
    m2, m3, img2, _, out = bad_setup
    expect_bad([m2, "--input", img2, "--output", out, "--roi", "8,8", "--model", m3], "rank", "dims", "3-d", "2-d")


# ---------------------------------------------------------------------------
# window filters (sg_sw_options.keep_window, the host path)

SWFILTER = os.environ.get("SEGRT_SWFILTER", str(pathlib.Path(SEGRT).parent / "tests" / "segrt_swfilter"))

# A case and its mask: "sparse" (a few voxels: most windows left out, some
# voxels covered by no window), "none" (nothing runs), "all" (everything).
FILTER_CASES = {
    "2d-sparse-n2c2-sw3-logits": (SW((70, 53), (16, 16), n=2, c=2, k=3, sw_batch=3, seed=60), "sparse"),
    "2d-sparse-gauss-o50-sw4-probs": (SW((61, 47), (16, 12), k=3, overlap=0.5, blend="gaussian", kind="probs",
                                         sw_batch=4, seed=61), "sparse"),
    "2d-sparse-o0-labels": (SW((64, 50), (16, 16), k=4, overlap=0.0, kind="labels", sw_batch=2, seed=62), "sparse"),
    "2d-sparse-sigmoid-labels-t0.3": (SW((45, 52), (12, 16), n=2, k=3, overlap=0.5, kind="labels",
                                         activation="sigmoid", threshold=0.3, sw_batch=3, seed=63), "sparse"),
    "2d-sparse-nnunet-sigmoid-probs": (SW((50, 41), (16, 16), k=2, overlap=0.5, grid="nnunet", kind="probs",
                                          activation="sigmoid", seed=64), "sparse"),
    "2d-none-probs": (SW((40, 33), (16, 16), n=2, k=3, kind="probs", sw_batch=3, seed=65), "none"),
    "2d-small-padded-none-labels": (SW((9, 7), (16, 12), k=3, kind="labels", seed=66), "none"),
    "2d-all-gauss-probs": (SW((37, 53), (16, 16), k=3, blend="gaussian", kind="probs", sw_batch=3, seed=67), "all"),
    "3d-sparse-n2-sw4-probs": (SW((19, 20, 13), (8, 8, 8), n=2, k=3, overlap=0.5, kind="probs", sw_batch=4,
                                  seed=68), "sparse"),
}


def filter_mask(kind, spatial, seed):
    rng = np.random.default_rng(seed)
    if kind == "none":
        return np.zeros(spatial, np.uint8)
    if kind == "all":
        return np.ones(spatial, np.uint8)
    m = np.zeros(spatial, np.uint8)
    m[tuple(rng.integers(0, n, 3) for n in spatial)] = 1  # three voxels
    return m


@pytest.mark.parametrize("name", list(FILTER_CASES))
def test_window_filter_matches_reference(tmp_path, name):
    """The windows the filter keeps, and only they, blended as MONAI
    blends (the reference skips the others the same way); voxels no kept
    window covers are 0 (every class, every output kind); the filter is
    asked once per window, in MONAI's order, with the window's part of
    the image."""
    case, kind = FILTER_CASES[name]
    model = make_convnet(tmp_path / "model.onnx", len(case.spatial), case.c, case.k, seed=case.seed)
    rng = np.random.default_rng(1000 + case.seed)
    image = rng.standard_normal((case.n, case.c) + tuple(case.spatial)).astype(np.float32)
    mask = filter_mask(kind, case.spatial, case.seed)
    np.save(tmp_path / "image.npy", image)
    np.save(tmp_path / "mask.npy", mask)
    ov = case.overlap if isinstance(case.overlap, (tuple, list)) else (case.overlap,)
    args = [f"roi={','.join(map(str, case.roi))}", f"overlap={','.join(map(str, ov))}", f"batch={case.sw_batch}",
            f"blend={case.blend}", f"grid={case.grid}", f"output={case.kind}"]
    if case.activation:
        args.append(f"activation={case.activation}")
    if case.threshold is not None:
        args.append(f"threshold={case.threshold}")
    p = subprocess.run([SWFILTER, model, tmp_path / "image.npy", tmp_path / "mask.npy", tmp_path / "out.npy",
                        tmp_path / "calls.npy", *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"exit {p.returncode}: {p.stderr}"
    got, calls = np.load(tmp_path / "out.npy"), np.load(tmp_path / "calls.npy")

    asked = []

    def keep(start, size):
        asked.append(start + size)
        return bool(mask[tuple(slice(a, a + n) for a, n in zip(start, size))].any())

    covered = []
    logits = ref.sliding_window(image, case.roi, ref.ort_predictor(model), overlap=case.overlap,
                                sw_batch=case.sw_batch, blend=case.blend, grid=case.grid, keep=keep,
                                covered=covered)
    assert calls.tolist() == [list(a) for a in asked]
    thr = 0.5 if case.threshold is None else case.threshold
    want = ref.postprocess(logits, case.kind, case.activation, thr)
    bare = ~np.stack(covered)[:, None]  # N x 1 x spatial
    want = np.where(bare, np.zeros((), want.dtype), want)
    kept = sum(bool(mask[tuple(slice(a, a + n) for a, n in zip(r[:len(r) // 2], r[len(r) // 2:]))].any())
               for r in asked)
    if kind == "sparse":  # windows of both kinds, and voxels no window covers
        assert 0 < kept < len(asked) and bare.any() and not bare.all()
    assert bare.all() == (kind == "none") and bare.any() == (kind != "all")
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype, want.dtype)
    bare_all = np.broadcast_to(bare, got.shape)
    assert not got[bare_all].any(), "voxels no window covers are not background"
    if case.kind in ("logits", "probs"):
        scale = max(1.0, float(np.abs(want).max()))
        err = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max())
        assert err <= TOL * scale, f"max abs diff {err:.3g} (scale {scale:.3g})"
    else:
        ties = ref.ambiguous_labels(logits, case.activation, thr, TOL) & ~bare
        bad = (got != want) & ~ties
        assert not bad.any(), f"{int(bad.sum())} labels differ away from ties"
