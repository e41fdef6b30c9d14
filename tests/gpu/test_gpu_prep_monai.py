"""Preprocessing on the GPU machine (src/pipeline/vol_prep.c through
segrt_prep, tests/volume/segrt_prep.c):

- against MONAI itself (monai and torch must be importable: these tests
  fail, never skip, without them): Orientation("RAS") + Spacing (bilinear,
  border) + ScaleIntensityRange, then Invertd of the class scores back to
  the input's grid and their argmax, on the host (device -1) and on CUDA
  device 0;
- the CUDA backend's volume operations against the host's: the same plans
  with --device 0 and --device -1 (nnU-Net's cubic separate-z resampling,
  crops, every intensity scheme, scores back).

segrt's arrays are (depth, height, width) = (k, j, i); MONAI's (i, j, k),
which `--axes whd` gives the networks: then the image is MONAI's and the
scores go back as MONAI's network gives them, no transposes.

Environment: SEGRT_PREP (the driver; default tests/segrt_prep beside the
segrt binary of SEGRT)."""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest
from scipy import ndimage as ndi

from conftest import SEGRT

PREP = os.environ.get("SEGRT_PREP") or str(pathlib.Path(SEGRT).resolve().parent / "tests" / "segrt_prep")
LPS = np.diag([-1.0, -1.0, 1.0])


def run(tmp_path, x, *args, scores=None, device=-1):
    out = tmp_path / f"out{abs(hash((args, device, scores is None))) % 10**8}"
    out.mkdir(exist_ok=True)
    np.save(out / "in.npy", np.ascontiguousarray(x, np.float32))
    argv = [PREP, out / "in.npy", out, *args, "--device", device]
    if scores is not None:
        np.save(out / "scores.npy", np.ascontiguousarray(scores, np.float32))
        argv += ["--scores", out / "scores.npy"]
    p = subprocess.run(list(map(str, argv)), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"exit {p.returncode}: {p.stderr}"
    grid = json.loads((out / "grid.json").read_text())
    labels = np.load(out / "labels.npy") if scores is not None else None
    return np.load(out / "image.npy"), grid, labels


def geometry_args(spacing, origin, direction):
    return ["--geometry", *map(repr, map(float, spacing)), *map(repr, map(float, origin)),
            *map(repr, np.asarray(direction, float).reshape(-1).tolist())]


def affine_of(spacing, origin, direction):
    a = np.eye(4)
    d = np.asarray(direction, float)
    for c in range(3):
        a[:3, c] = LPS @ d[:, c] * spacing[2 - c]
    a[:3, 3] = LPS @ np.asarray(origin, float)
    return a


def grid_affine(grid):
    return affine_of(grid["spacing"], grid["origin"], grid["direction"])


def rotation(a, b, c):
    rx = np.array([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]])
    ry = np.array([[np.cos(b), 0, np.sin(b)], [0, 1, 0], [-np.sin(b), 0, np.cos(b)]])
    rz = np.array([[np.cos(c), -np.sin(c), 0], [np.sin(c), np.cos(c), 0], [0, 0, 1]])
    return rx @ ry @ rz


def ct_volume(rng, dims):
    """A smooth CT-like volume in HU: soft tissue, a brighter organ, air."""
    x = ndi.gaussian_filter(rng.normal(0, 1, size=dims), 2) * 400
    x[dims[0] // 4:dims[0] // 2, dims[1] // 3:2 * dims[1] // 3, 5:dims[2] - 5] += 150
    x[:, :3, :] = -1000
    return x.astype(np.float32)


def smooth_scores(rng, k, dims):
    return np.stack([ndi.gaussian_filter(rng.normal(size=dims), 2) for _ in range(k)]).astype(np.float32) * 10


# ---- MONAI -------------------------------------------------------------------

# Spacings whose ratios put no output voxel exactly halfway between two
# input voxels: there torch's nearest rounds half to even and segrt (as
# scipy) up, so a tie could differ without either being wrong.
CASE = dict(dims=(40, 48, 36), spacing=(2.5, 0.8, 0.9), origin=(-120.0, 80.0, 30.0),
            perm=[1, 0, 2], flips=[1, -1, -1], angles=(0.1, -0.05, 0.2), pixdim_ijk=(1.37, 1.13, 1.91))


def monai_case(rng):
    c = CASE
    direction = rotation(*c["angles"]) @ (np.eye(3)[:, c["perm"]] * np.array(c["flips"]))
    x = ct_volume(rng, c["dims"])
    return x, direction


@pytest.mark.parametrize("axes", ["dhw", "whd"])
@pytest.mark.parametrize("device", [-1, 0])
def test_monai_orientation_spacing_range(tmp_path, gpu, device, axes):
    import torch
    from monai.data import MetaTensor
    from monai.transforms import Compose, Orientationd, ScaleIntensityRanged, Spacingd

    rng = np.random.default_rng(1)
    x, direction = monai_case(rng)
    c = CASE
    aff = affine_of(c["spacing"], c["origin"], direction)
    pre = Compose([Orientationd(keys="image", axcodes="RAS"),
                   Spacingd(keys="image", pixdim=c["pixdim_ijk"], mode="bilinear"),
                   ScaleIntensityRanged(keys="image", a_min=-57, a_max=164, b_min=0.0, b_max=1.0, clip=True)])
    out = pre({"image": MetaTensor(torch.as_tensor(x.T[None].copy()), affine=torch.as_tensor(aff))})
    ref = out["image"].cpu().numpy()[0]
    # the spacing in segrt's array order after the orientation: (k, j, i)
    img, grid, _ = run(tmp_path, x[None], *geometry_args(c["spacing"], c["origin"], direction),
                       "--orientation", "RAS", "--grid", "monai", "--interp", "linear",
                       "--spacing", *c["pixdim_ijk"][::-1], "--intensity", "range:-57:164:0:1:clip",
                       "--axes", axes, device=device)
    got = img[0] if axes == "whd" else img[0].T  # whd: the image as MONAI's network sees it
    assert got.shape == ref.shape
    if axes == "dhw":
        np.testing.assert_allclose(grid_affine(grid), np.asarray(out["image"].affine, float), atol=1e-5)
    else:
        assert tuple(grid["dims"]) == ref.shape
    np.testing.assert_allclose(got, ref, atol=1e-5)


@pytest.mark.parametrize("axes", ["dhw", "whd"])
@pytest.mark.parametrize("device", [-1, 0])
@pytest.mark.parametrize("nearest", [False, True])
def test_monai_invertd_scores_back(tmp_path, gpu, device, nearest, axes):
    import torch
    from monai.data import MetaTensor
    from monai.transforms import AsDiscreted, Compose, Invertd, Orientationd, Spacingd

    rng = np.random.default_rng(2)
    x, direction = monai_case(rng)
    c = CASE
    aff = affine_of(c["spacing"], c["origin"], direction)
    pre = Compose([Orientationd(keys="image", axcodes="RAS"),
                   Spacingd(keys="image", pixdim=c["pixdim_ijk"], mode="bilinear")])
    data = pre({"image": MetaTensor(torch.as_tensor(x.T[None].copy()), affine=torch.as_tensor(aff))})
    model_ijk = tuple(data["image"].shape[1:])
    scores = smooth_scores(rng, 5, model_ijk)
    # a MetaTensor, as sliding_window_inference returns one: Invertd takes
    # the image's transforms only for those
    data["pred"] = MetaTensor(torch.as_tensor(scores), affine=data["image"].affine)
    if nearest:  # labels first, then back by nearest neighbour
        post = Compose([AsDiscreted(keys="pred", argmax=True),
                        Invertd(keys="pred", transform=pre, orig_keys="image", nearest_interp=True)])
    else:  # scores back bilinearly, then the argmax
        post = Compose([Invertd(keys="pred", transform=pre, orig_keys="image", nearest_interp=False),
                        AsDiscreted(keys="pred", argmax=True)])
    ref = np.asarray(post(data)["pred"].cpu().numpy()[0]).round().astype(int)
    # whd: the scores as MONAI's network gives them, (i, j, k)
    seg_scores = scores if axes == "whd" else np.ascontiguousarray(scores.transpose(0, 3, 2, 1))
    _, grid, labels = run(tmp_path, x[None], *geometry_args(c["spacing"], c["origin"], direction),
                          "--orientation", "RAS", "--grid", "monai", "--spacing", *c["pixdim_ijk"][::-1],
                          "--result-interp", "nearest" if nearest else "linear", "--axes", axes, scores=seg_scores,
                          device=device)
    assert tuple(grid["dims"] if axes == "whd" else grid["dims"][::-1]) == model_ijk
    assert labels.T.shape == ref.shape
    agree = (labels.T == ref).mean()
    assert agree >= 0.999, f"agreement {agree:.5f}"


# ---- the device's operations against the host's ------------------------------

PLANS = {
    "nnunet_cubic_separate_z": ["--transpose", 0, 2, 1, "--crop", "nonzero", "--intensity", "ct:-200:300:40:120",
                                "--intensity-first", "--spacing", 1.6, 0.7, 0.7, "--interp", "cubic",
                                "--interp-z", "nearest", "--anisotropy", 3, "--result-interp", "linear",
                                "--result-interp-z", "nearest"],
    "nnunet_cubic_zscore_masked": ["--crop", "nonzero", "--intensity", "zscore-masked", "--intensity-first",
                                   "--spacing", 1.1, 0.6, 0.75, "--interp", "cubic"],
    "monai_ras_linear": ["--orientation", "RAS", "--crop", "threshold", "--crop-threshold", -500, "--margin", 2, 2, 2,
                         "--grid", "monai", "--spacing", 1.5, 1.0, 1.25, "--intensity", "range:-57:164:0:1:clip"],
    "rescale_nearest_back": ["--orientation", "PLI", "--spacing", 2.0, 1.0, 0.5, "--intensity", "rescale01",
                             "--interp", "nearest", "--result-interp", "nearest"],
    "zscore_no_resampling": ["--transpose", 2, 1, 0, "--intensity", "zscore"],
    "monai_ras_linear_whd": ["--orientation", "RAS", "--grid", "monai", "--spacing", 1.5, 1.0, 1.25, "--intensity",
                             "range:-57:164:0:1:clip", "--axes", "whd"],
}


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_device_matches_host(tmp_path, gpu, plan):
    rng = np.random.default_rng(3)
    dims = (24, 40, 36)
    x = ct_volume(rng, dims)
    x[:, :, :4] = 0  # background for the nonzero crop
    direction = rotation(0.05, 0.02, -0.1) @ np.eye(3)[:, [2, 0, 1]]
    args = [*geometry_args((3.0, 0.8, 0.8), (1.0, 2.0, 3.0), direction), *PLANS[plan]]
    host, grid_h, _ = run(tmp_path, x[None], *args, device=-1)
    dev, grid_d, _ = run(tmp_path, x[None], *args, device=0)
    for key in ("dims", "spacing", "origin", "direction", "identity"):
        assert grid_h[key] == grid_d[key], key
    scale = max(1.0, float(np.abs(host).max()))
    np.testing.assert_allclose(dev, host, atol=1e-5 * scale, rtol=0)
    scores = smooth_scores(rng, 3, grid_h["dims"])
    _, _, lh = run(tmp_path, x[None], *args, scores=scores, device=-1)
    _, _, ld = run(tmp_path, x[None], *args, scores=scores, device=0)
    assert lh.shape == ld.shape == dims
    agree = (lh == ld).mean()
    assert agree >= 0.9999, f"labels agree at {agree:.6f}"
