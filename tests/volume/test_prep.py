"""The preprocessing of a volume (src/pipeline/vol_prep.c over the CPU
backend's volume operations), run by segrt_prep (tests/volume/segrt_prep.c),
against what nnU-Net and MONAI compute, rebuilt from the libraries they
use: skimage's resize and scipy's map_coordinates (nnU-Net's
default_resampling), MONAI's Spacing grid (zoom_affine and
compute_shape_offset) sampled with scipy, nibabel's orientation functions
(MONAI's Orientation), scipy's binary_fill_holes (nnU-Net's nonzero mask).

segrt's arrays are (depth, height, width) = (k, j, i); nibabel's and MONAI's
are (i, j, k): every comparison transposes."""
import json
import os
import pathlib
import subprocess

import nibabel as nib
import numpy as np
import pytest
from scipy import ndimage as ndi
from skimage.transform import resize

ROOT = pathlib.Path(__file__).resolve().parents[2]
PREP = os.environ.get("SEGRT_PREP", str(ROOT / "build-cpu" / "tests" / "segrt_prep"))
LPS = np.diag([-1.0, -1.0, 1.0])


# ---- the driver -------------------------------------------------------------

def geometry_args(spacing, origin=(0, 0, 0), direction=np.eye(3)):
    d = np.asarray(direction, float)
    return ["--geometry", *map(repr, map(float, spacing)), *map(repr, map(float, origin)),
            *map(repr, d.reshape(-1).tolist())]


def run(tmp_path, x, *args, scores=None, check=0):
    """segrt_prep over x (C x D x H x W float32): (image, grid, labels)."""
    out = tmp_path / f"out{abs(hash(args)) % 10**8}"
    out.mkdir(exist_ok=True)
    np.save(out / "in.npy", np.ascontiguousarray(x, np.float32))
    argv = [PREP, out / "in.npy", out, *map(str, args)]
    if scores is not None:
        np.save(out / "scores.npy", np.ascontiguousarray(scores, np.float32))
        argv += ["--scores", out / "scores.npy"]
    p = subprocess.run(list(map(str, argv)), capture_output=True, text=True, timeout=300)
    assert p.returncode == check, f"exit {p.returncode}: {p.stderr}"
    if check:
        return p.stderr
    grid = json.loads((out / "grid.json").read_text())
    labels = np.load(out / "labels.npy") if scores is not None else None
    return np.load(out / "image.npy"), grid, labels


def affine_of(spacing, origin, direction):
    """nibabel's RAS affine of segrt's geometry: column c is index axis
    (i, j, k)[c], whose spacing is spacing[2 - c]."""
    a = np.eye(4)
    d = np.asarray(direction, float)
    for c in range(3):
        a[:3, c] = LPS @ d[:, c] * spacing[2 - c]
    a[:3, 3] = LPS @ np.asarray(origin, float)
    return a


def grid_affine(grid):
    return affine_of(grid["spacing"], grid["origin"], grid["direction"])


def rotation(angles):
    a, b, c = angles
    rx = np.array([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]])
    ry = np.array([[np.cos(b), 0, np.sin(b)], [0, 1, 0], [-np.sin(b), 0, np.cos(b)]])
    rz = np.array([[np.cos(c), -np.sin(c), 0], [np.sin(c), np.cos(c), 0], [0, 0, 1]])
    return rx @ ry @ rz


# ---- nnU-Net's resampling, from skimage and scipy ---------------------------

def nn_new_shape(shape, old_sp, new_sp):
    return np.array([int(round(o / n * s)) for o, n, s in zip(old_sp, new_sp, shape)])


def nn_lowres_axis(first, second, threshold=3.0):
    for sp in (first, second):
        sp = np.asarray(sp, float)
        if np.max(sp) / np.min(sp) > threshold:
            axes = np.where(np.max(sp) / sp == 1)[0]
            return int(axes[0]) if len(axes) == 1 else None
    return None


def nn_resample(data, new_shape, axis, order, order_z):
    """nnU-Net's resample_data_or_seg for data (not segmentations)."""
    shape = np.array(data.shape[1:])
    new_shape = np.asarray(new_shape)
    if np.all(shape == new_shape):
        return data.copy()
    data = data.astype(float)
    kw = dict(mode="edge", anti_aliasing=False)
    out = []
    for c in range(data.shape[0]):
        if axis is None:
            out.append(resize(data[c], new_shape, order, **kw))
            continue
        plane = [s for a, s in enumerate(new_shape) if a != axis]
        sl = [resize(np.take(data[c], t, axis=axis), plane, order, **kw) for t in range(shape[axis])]
        v = np.stack(sl, axis)
        if shape[axis] != new_shape[axis]:
            coords = np.meshgrid(*[(np.arange(n) + 0.5) * (v.shape[a] / n) - 0.5 for a, n in enumerate(new_shape)],
                                 indexing="ij")
            v = ndi.map_coordinates(v, np.array(coords), order=order_z, mode="nearest")
        out.append(v)
    return np.stack(out).astype(np.float32)


# ---- resampling -------------------------------------------------------------

@pytest.mark.parametrize("order,interp", [(0, "nearest"), (1, "linear"), (3, "cubic")])
def test_nnunet_resampling_isotropic(tmp_path, order, interp):
    rng = np.random.default_rng(order)
    x = rng.normal(size=(2, 9, 13, 11)).astype(np.float32) * 100
    sp, target = (1.7, 1.1, 0.9), (1.2, 1.6, 0.7)
    img, grid, _ = run(tmp_path, x, *geometry_args(sp), "--spacing", *target, "--interp", interp,
                       "--anisotropy", 3)
    shape = nn_new_shape(x.shape[1:], sp, target)
    assert list(img.shape[1:]) == list(shape) == grid["dims"]
    ref = nn_resample(x, shape, None, order, 0)
    np.testing.assert_allclose(img, ref, atol=1e-4 * 100, rtol=0)
    # the grid keeps the volume's extent: spacing n * sp / n'
    np.testing.assert_allclose(grid["spacing"], np.array(sp) * np.array(x.shape[1:]) / shape, rtol=1e-12)


@pytest.mark.parametrize("lowres", [0, 2])
def test_nnunet_resampling_separate_z(tmp_path, lowres):
    """An anisotropic volume: cubic in-plane per slice (clipped to each
    slice's range, as skimage clips), nearest along the thick axis."""
    rng = np.random.default_rng(10 + lowres)
    dims = [10, 12, 14]
    sp = [0.8, 0.8, 0.8]
    sp[lowres] = 4.0
    target = [0.6, 0.7, 0.6]
    target[lowres] = 2.5
    x = rng.normal(size=(2, *dims)).astype(np.float32)
    x[0, 3:6, 4:9, 2:7] += 5  # a step edge, where the cubic overshoots and clipping bites
    x[1] *= 3
    img, grid, _ = run(tmp_path, x, *geometry_args(sp), "--spacing", *target, "--interp", "cubic",
                       "--interp-z", "nearest", "--anisotropy", 3)
    shape = nn_new_shape(dims, sp, target)
    axis = nn_lowres_axis(sp, target)
    assert axis == lowres
    ref = nn_resample(x, shape, axis, 3, 0)
    assert img.shape[1:] == tuple(shape)
    np.testing.assert_allclose(img, ref, atol=1e-4, rtol=0)
    # without the anisotropic rule, the same is a 3-D cubic resize: the test can tell them apart
    assert np.abs(nn_resample(x, shape, None, 3, 0) - ref).max() > 1e-2


def test_nearest_at_halfway_positions_as_scipy(tmp_path):
    """A ratio of 4/3 puts output voxels exactly halfway between two input
    voxels; NEAREST picks the one scipy picks (whole slices of labels
    otherwise land on the neighbour)."""
    x = np.arange(32, dtype=np.float32)[None, :, None, None] * np.ones((1, 32, 3, 4), np.float32)
    img, _, _ = run(tmp_path, x, *geometry_args((3, 1, 1)), "--spacing", 4, 1, 1, "--interp", "nearest")
    ref = resize(x[0].astype(np.float64), (24, 3, 4), order=0, mode="edge", anti_aliasing=False)
    np.testing.assert_array_equal(img[0], ref)
    # and back: 24 slices from 32, the anisotropic axis by nearest neighbour
    y = np.ones((1, 24, 20, 18), np.float32)
    args = [*geometry_args((4.0, 0.9, 0.9)), "--spacing", 3.0, 0.7, 0.8, "--anisotropy", 3,
            "--result-interp", "linear", "--result-interp-z", "nearest"]
    _, grid, _ = run(tmp_path, y, *args)
    assert grid["dims"][0] == 32
    rng = np.random.default_rng(16)
    scores = np.stack([ndi.gaussian_filter(rng.normal(size=grid["dims"]), 1.5) for _ in range(3)]).astype(np.float32)
    _, _, labels = run(tmp_path, y, *args, scores=scores)
    back = nn_resample(scores, (24, 20, 18), 0, 1, 0).astype(np.float64)
    top = np.sort(back, 0)
    clear = top[-1] - top[-2] > 1e-5
    assert (labels[clear] == back.argmax(0)[clear]).all()


def test_nnunet_back_resampling_of_scores(tmp_path):
    """Scores back to the volume's grid as nnU-Net's export does it (order 1,
    order_z 0, anisotropic rule on the model's spacing first), then argmax."""
    rng = np.random.default_rng(3)
    dims = (6, 20, 18)
    sp, target = (5.0, 0.9, 0.9), (3.0, 0.7, 0.8)
    x = rng.normal(size=(1, *dims)).astype(np.float32)
    img, grid, _ = run(tmp_path, x, *geometry_args(sp), "--spacing", *target, "--anisotropy", 3)
    m = grid["dims"]
    scores = rng.normal(size=(4, *m)).astype(np.float32)
    _, _, labels = run(tmp_path, x, *geometry_args(sp), "--spacing", *target, "--anisotropy", 3,
                       "--result-interp", "linear", "--result-interp-z", "nearest", scores=scores)
    axis = nn_lowres_axis(target, sp)
    back = nn_resample(scores, dims, axis, 1, 0).astype(np.float64)
    ref = back.argmax(0)
    assert labels.shape == dims and labels.dtype == np.uint8
    top = np.sort(back, 0)
    clear = top[-1] - top[-2] > 1e-4
    assert (labels[clear] == ref[clear]).all()
    assert clear.mean() > 0.99


# ---- MONAI's grid -----------------------------------------------------------

def monai_spacing_grid(shape_ijk, affine, pixdim_ijk):
    """MONAI's Spacing (diagonal False): zoom_affine's new affine and
    compute_shape_offset's shape and offset."""
    rzs = affine[:3, :3]
    zs = np.linalg.cholesky(rzs.T @ rzs).T
    rot = rzs @ np.linalg.inv(zs)
    new = np.eye(4)
    new[:3, :3] = rot @ np.diag(np.sign(np.diag(zs)) * np.abs(pixdim_ijk))
    corners = np.array(np.meshgrid(*[(0.0, n - 1.0) for n in shape_ijk], indexing="ij")).reshape(3, -1)
    corners = np.concatenate([corners, np.ones_like(corners[:1])])
    out = np.linalg.solve(new, affine) @ corners
    dist = out[:-1].copy()
    out_shape = np.round(np.ptp(out[:-1] / out[-1], axis=1) + 1.0).astype(int)
    world = affine @ corners
    offset = None
    for i in range(corners.shape[1]):
        if np.allclose(np.min(dist - dist[:, i:i + 1], 1), 0.0, rtol=1e-3):
            offset = world[:-1, i]
            break
    new[:3, 3] = offset
    return out_shape, new


@pytest.mark.parametrize("oblique", [False, True])
def test_monai_spacing_grid(tmp_path, oblique):
    rng = np.random.default_rng(4)
    dims = (11, 15, 13)
    sp = (2.5, 0.9, 1.1)
    direction = rotation((0.2, -0.1, 0.3)) if oblique else np.eye(3)
    origin = (10.0, -20.0, 5.0)
    x = rng.normal(size=(1, *dims)).astype(np.float32)
    target = (1.5, 1.3, 0.7)
    img, grid, _ = run(tmp_path, x, *geometry_args(sp, origin, direction), "--spacing", *target, "--grid", "monai")
    aff = affine_of(sp, origin, direction)
    shape_ijk, new = monai_spacing_grid(dims[::-1], aff, target[::-1])
    assert grid["dims"] == list(shape_ijk[::-1])
    np.testing.assert_allclose(grid_affine(grid), new, atol=1e-9)
    # each output voxel reads the input where its centre lies, linearly, edges clamped
    o = np.array(np.meshgrid(*[np.arange(n) for n in shape_ijk], indexing="ij")).reshape(3, -1)
    src = np.linalg.solve(aff, new @ np.concatenate([o, np.ones_like(o[:1])]))[:3]
    ref = ndi.map_coordinates(x[0].T.astype(float), src, order=1, mode="nearest").reshape(shape_ijk)
    np.testing.assert_allclose(img[0].T, ref, atol=1e-4)


# ---- orientation, transpose, crop -------------------------------------------

@pytest.mark.parametrize("code", ["RAS", "LPS", "PLI", "SRA"])
def test_orientation_as_nibabel(tmp_path, code):
    rng = np.random.default_rng(5)
    dims = (5, 7, 9)
    sp = (3.0, 1.0, 2.0)
    # a permuted, flipped and slightly rotated direction
    perm = np.eye(3)[:, [1, 2, 0]] * np.array([-1, 1, -1])
    direction = rotation((0.05, 0.1, -0.08)) @ perm
    origin = (3.0, 4.0, -5.0)
    x = rng.normal(size=(2, *dims)).astype(np.float32)
    img, grid, _ = run(tmp_path, x, *geometry_args(sp, origin, direction), "--orientation", code)
    aff = affine_of(sp, origin, direction)
    t = nib.orientations.ornt_transform(nib.orientations.io_orientation(aff),
                                        nib.orientations.axcodes2ornt(code))
    for c in range(2):
        ref = nib.orientations.apply_orientation(x[c].T, t)
        np.testing.assert_array_equal(img[c].T, ref)
    new = aff @ nib.orientations.inv_ornt_aff(t, dims[::-1])
    np.testing.assert_allclose(grid_affine(grid), new, atol=1e-9)
    assert nib.aff2axcodes(grid_affine(grid)) == tuple(code)
    assert grid["identity"] is False


def test_orientation_of_a_sheared_direction(tmp_path):
    """A sheared direction (a tilted gantry's) whose columns' largest
    components are not those of its closest rotation, which nibabel uses."""
    ras = np.array([[0.61367596, 0.40259373, 0.59031093],
                    [0.65573511, 0.91537794, 0.10762131],
                    [-0.43978776, -0.00122989, 0.79996916]])
    ras /= np.linalg.norm(ras, axis=0)
    direction = LPS @ ras
    rng = np.random.default_rng(14)
    dims = (4, 5, 6)
    x = rng.normal(size=(1, *dims)).astype(np.float32)
    aff = affine_of((1, 1, 1), (0, 0, 0), direction)
    ornt = nib.orientations.io_orientation(aff)
    naive = [int(np.argmax(np.abs(ras[:, c]))) for c in range(3)]
    assert naive != list(ornt[:, 0].astype(int))  # the case tells the two apart
    img, grid, _ = run(tmp_path, x, *geometry_args((1, 1, 1), (0, 0, 0), direction), "--orientation", "RAS")
    t = nib.orientations.ornt_transform(ornt, nib.orientations.axcodes2ornt("RAS"))
    np.testing.assert_array_equal(img[0].T, nib.orientations.apply_orientation(x[0].T, t))


def test_orientation_already_there_is_identity(tmp_path):
    x = np.ones((1, 3, 4, 5), np.float32)
    # LPS geometry with identity direction: i points left, j posterior, k superior
    img, grid, _ = run(tmp_path, x, *geometry_args((1, 1, 1)), "--orientation", "LPS")
    assert grid["identity"] is True
    _, grid, _ = run(tmp_path, x, *geometry_args((1, 1, 1)), "--orientation", "RAS")
    assert grid["identity"] is False


def test_transpose(tmp_path):
    rng = np.random.default_rng(6)
    x = rng.normal(size=(1, 4, 5, 6)).astype(np.float32)
    sp, origin = (3.0, 2.0, 1.0), (1.0, 2.0, 3.0)
    img, grid, _ = run(tmp_path, x, *geometry_args(sp, origin), "--transpose", 2, 0, 1)
    np.testing.assert_array_equal(img, x.transpose(0, 3, 1, 2))
    assert grid["spacing"] == [1.0, 3.0, 2.0]
    # every voxel lies where it lay
    a_in, a_out = affine_of(sp, origin, np.eye(3)), grid_affine(grid)
    k, j, i = 2, 3, 4  # input voxel (k, j, i) is output (i, k, j)
    np.testing.assert_allclose(a_out @ [j, k, i, 1], a_in @ [i, j, k, 1])


def test_crop_nonzero_as_nnunet(tmp_path):
    x = np.zeros((2, 12, 14, 16), np.float32)
    x[0, 3:7, 5:9, 2:4] = 1.0
    x[1, 4:9, 6:7, 10:12] = -2.0  # the box spans both channels
    img, grid, _ = run(tmp_path, x, *geometry_args((2, 1, 1), (1, 1, 1)), "--crop", "nonzero")
    w = np.where((x != 0).any(0))
    box = [slice(a.min(), a.max() + 1) for a in w]
    np.testing.assert_array_equal(img, x[(slice(None), *box)])
    np.testing.assert_allclose(grid["origin"], [1 + 2, 1 + 5, 1 + 6])


def test_crop_threshold_margin_as_monai(tmp_path):
    x = np.full((1, 10, 10, 10), -1.0, np.float32)
    x[0, 4:6, 1:3, 7:9] = 5.0
    img, grid, _ = run(tmp_path, x, *geometry_args((1, 1, 1)), "--crop", "threshold", "--crop-threshold", 0.5,
                       "--margin", 1, 2, 3)
    # MONAI's CropForeground: > threshold, box grown by the margin, kept inside the volume
    np.testing.assert_array_equal(img, x[:, 3:7, 0:5, 4:10])


def test_crop_after_orientation_maps_the_box(tmp_path):
    """The crop is found on the oriented volume: flips and permutations move
    the box with the data."""
    rng = np.random.default_rng(7)
    x = np.zeros((1, 8, 9, 10), np.float32)
    x[0, 1:4, 5:8, 2:9] = rng.uniform(1, 2, size=(3, 3, 7))
    direction = np.eye(3)[:, [2, 0, 1]]
    full, _, _ = run(tmp_path, x, *geometry_args((1, 1, 1), (0, 0, 0), direction), "--orientation", "RAS")
    img, _, _ = run(tmp_path, x, *geometry_args((1, 1, 1), (0, 0, 0), direction), "--orientation", "RAS",
                    "--crop", "nonzero")
    w = np.where(full[0] != 0)
    np.testing.assert_array_equal(img[0], full[0][tuple(slice(a.min(), a.max() + 1) for a in w)])


# ---- intensities ------------------------------------------------------------

def test_intensity_ct_and_rescale(tmp_path):
    rng = np.random.default_rng(8)
    x = rng.normal(100, 400, size=(2, 5, 6, 7)).astype(np.float32)
    img, _, _ = run(tmp_path, x, "--intensity", "ct:-200:500:80:150", "--intensity", "rescale01")
    ct = (np.clip(x[0], -200, 500) - 80) / 150
    r = (x[1] - x[1].min()) / (x[1].max() - x[1].min())
    np.testing.assert_allclose(img[0], ct, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(img[1], r, rtol=1e-5, atol=1e-6)


def test_intensity_zscore(tmp_path):
    rng = np.random.default_rng(9)
    x = rng.normal(1000, 30, size=(1, 6, 7, 8)).astype(np.float32)
    img, _, _ = run(tmp_path, x, "--intensity", "zscore")
    np.testing.assert_allclose(img[0], (x[0] - x[0].mean()) / x[0].std(), atol=1e-4)


def test_intensity_zscore_masked_fills_holes(tmp_path):
    """nnU-Net's use_mask_for_norm: statistics over the nonzero mask of all
    channels with its holes filled (a zero inside the foreground counts),
    normalised there, zero outside."""
    rng = np.random.default_rng(10)
    x = np.zeros((2, 10, 10, 10), np.float32)
    x[:, 2:8, 2:8, 2:8] = rng.normal(50, 10, size=(2, 6, 6, 6))
    x[:, 4:6, 4:6, 4:6] = 0.0  # a hole
    x[1, 2, 2, 2] = 0.0  # a zero in one channel, foreground in the other
    img, _, _ = run(tmp_path, x, "--crop", "nonzero", "--intensity", "zscore-masked", "--intensity-first")
    mask = ndi.binary_fill_holes((x != 0).any(0))
    box = tuple(slice(a.min(), a.max() + 1) for a in np.where(mask))
    for c in range(2):
        ref = x[c].copy()
        m, s = ref[mask].mean(), ref[mask].std()
        ref[mask] = (ref[mask] - m) / s
        np.testing.assert_allclose(img[c], ref[box], atol=1e-4)
    assert np.abs(img[0][3, 3, 3]) > 1  # the hole was normalised, not set to 0


@pytest.mark.parametrize("clip", [False, True])
def test_intensity_range_after_resampling(tmp_path, clip):
    """MONAI's order: Spacing, then ScaleIntensityRange."""
    rng = np.random.default_rng(11)
    x = rng.normal(0, 300, size=(1, 7, 8, 9)).astype(np.float32)
    spec = "range:-57:164:0:1" + (":clip" if clip else "")
    base, _, _ = run(tmp_path, x, *geometry_args((2, 1, 1)), "--spacing", 1.5, 1.2, 0.8, "--grid", "monai")
    img, _, _ = run(tmp_path, x, *geometry_args((2, 1, 1)), "--spacing", 1.5, 1.2, 0.8, "--grid", "monai",
                    "--intensity", spec)
    ref = (base - (-57)) / (164 - (-57))
    if clip:
        ref = np.clip(ref, 0, 1)
    np.testing.assert_allclose(img, ref, atol=1e-5)


def test_intensity_before_resampling_differs_from_after(tmp_path):
    """intensity_first puts the clip before the interpolation (nnU-Net);
    the test can tell the two orders apart."""
    rng = np.random.default_rng(12)
    x = rng.normal(0, 300, size=(1, 7, 8, 9)).astype(np.float32)
    args = [*geometry_args((2, 1, 1)), "--spacing", 1.3, 0.7, 0.7, "--intensity", "ct:-100:100:0:50"]
    first, _, _ = run(tmp_path, x, *args, "--intensity-first")
    after, _, _ = run(tmp_path, x, *args)
    shape = nn_new_shape(x.shape[1:], (2, 1, 1), (1.3, 0.7, 0.7))
    ref = nn_resample(np.clip(x, -100, 100) / 50, shape, None, 1, 0)
    np.testing.assert_allclose(first, ref, atol=1e-4)
    assert np.abs(first - after).max() > 0.1


# ---- back(forward(x)) -------------------------------------------------------

@pytest.mark.parametrize("grid,result", [("monai", "nearest"), ("monai", "linear"), ("nnunet", "linear")])
def test_labels_return_to_the_input_grid(tmp_path, grid, result):
    """A label map through every step and back: its one-hot in the networks'
    grid (the forward of the labels, nearest) gives the labels back voxel
    for voxel, the crop's outside class 0."""
    rng = np.random.default_rng(13)
    dims = (9, 11, 10)
    labels = np.zeros(dims, np.float32)
    labels[2:7, 3:9, 2:8] = rng.integers(1, 4, size=(5, 6, 6))
    sp = (2.0, 1.0, 1.5)
    direction = np.eye(3)[:, [1, 0, 2]] * np.array([1, -1, 1])
    geo = geometry_args(sp, (5, 6, 7), direction)
    common = [*geo, "--transpose", 1, 0, 2, "--orientation", "RAS", "--crop", "nonzero", "--margin", 1, 1, 1,
              "--grid", grid, "--interp", "nearest"]
    # halve every spacing (given in the array order of step 5, after the
    # transpose and the orientation): MONAI's grid then lands on the input's
    # voxels, nnU-Net's between pairs of them, both exact for
    # piecewise-constant scores
    _, g0, _ = run(tmp_path, labels[None], *common)
    target = [s / 2 for s in g0["spacing"]]
    img, g, _ = run(tmp_path, labels[None], *common, "--spacing", *target)
    assert g["dims"] == [2 * n for n in g0["dims"]] or grid == "monai"
    model = img[0].astype(int)
    scores = np.stack([(model == k) for k in range(4)]).astype(np.float32)
    _, _, back = run(tmp_path, labels[None], *common, "--spacing", *target, "--result-interp", result, scores=scores)
    np.testing.assert_array_equal(back, labels.astype(np.uint8))


def test_many_classes_give_uint16_labels(tmp_path):
    x = np.ones((1, 3, 4, 5), np.float32)
    labels = np.random.default_rng(15).integers(0, 300, size=(3, 4, 5))
    scores = (np.arange(300)[:, None, None, None] == labels[None]).astype(np.float32)
    _, _, back = run(tmp_path, x, "--transpose", 2, 1, 0, scores=scores.transpose(0, 3, 2, 1))
    assert back.dtype == np.uint16
    np.testing.assert_array_equal(back, labels)


# ---- identity and bad parameters --------------------------------------------

def test_identity_plan(tmp_path):
    x = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    img, grid, _ = run(tmp_path, x)
    assert grid["identity"] is True
    np.testing.assert_array_equal(img, x)
    _, grid, _ = run(tmp_path, x, "--intensity", "zscore")
    assert grid["identity"] is False


@pytest.mark.parametrize("args,words", [
    (["--transpose", 0, 0, 1], ["transpose", "permutation"]),
    (["--orientation", "RXS"], ["orientation", "RXS"]),
    (["--orientation", "RRS"], ["orientation", "RRS"]),
    (["--orientation", "RA"], ["orientation"]),
    (["--intensity", "zscore", "--intensity", "zscore", "--intensity", "zscore"], ["3 intensity", "2 channels"]),
    (["--spacing", 1, 0, 1], ["spacing", "every axis"]),
    (["--spacing", 1, -1, 1], ["spacing", "-1"]),
    (["--result-interp", "cubic"], ["result interpolation"]),
    (["--interp", "7"], ["image interpolation"]),
    (["--crop", "7"], ["crop"]),
    (["--grid", "5"], ["grid"]),
    (["--anisotropy", "-1"], ["anisotropy"]),
    (["--intensity", "ct:5:1:0:1"], ["CT"]),
    (["--intensity", "range:1:1:0:1"], ["RANGE"]),
    (["--intensity", "kind:9"], ["unknown scheme 9"]),
    (["--margin", -1, 0, 0], ["margin"]),
    (["--spacing", 100, 100, 100], ["resampling", "gives 0"]),
])
def test_bad_parameters(tmp_path, args, words):
    x = np.zeros((2, 4, 5, 6), np.float32)
    err = run(tmp_path, x, *geometry_args((1, 1, 1)), *args, "--source", "the test's plans", check=2)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "the test's plans: preprocessing: " in lines[0]
    for w in words:
        assert str(w) in lines[0], lines[0]


def test_geometry_needed(tmp_path):
    x = np.zeros((1, 4, 5, 6), np.float32)
    for args in (["--orientation", "RAS"], ["--spacing", 1, 1, 1]):
        err = run(tmp_path, x, *args, check=2)
        assert "needs the volume's geometry" in err


def test_bad_scores(tmp_path):
    x = np.ones((1, 4, 5, 6), np.float32)
    err = run(tmp_path, x, scores=np.zeros((2, 4, 5, 7), np.float32), check=2)
    assert "class scores must be float32 1 x K x 4 x 5 x 6" in err


# ---- nnunetv2's own functions, where it is installed (it needs torch) --------

@pytest.mark.parametrize("transpose", [(0, 1, 2), (2, 0, 1)])
def test_against_nnunetv2(tmp_path, transpose):
    """nnU-Net's run_case_npy steps (transpose, crop_to_nonzero,
    CTNormalization, resampling with the anisotropic rule) and its export
    (logits back by resample_data_or_seg_to_shape, into the crop's box,
    transposed back), by nnunetv2's own functions."""
    crop = pytest.importorskip("nnunetv2.preprocessing.cropping.cropping")
    norm = pytest.importorskip("nnunetv2.preprocessing.normalization.default_normalization_schemes")
    res = pytest.importorskip("nnunetv2.preprocessing.resampling.default_resampling")
    rng = np.random.default_rng(17)
    spacing = (4.0, 0.75, 0.8) if transpose == (0, 1, 2) else (0.75, 0.8, 4.0)
    target = (3.0, 0.7, 0.7)
    props = dict(mean=30.0, std=180.0, percentile_00_5=-300.0, percentile_99_5=400.0)
    dims = [30, 60, 50]
    x = np.zeros((1, *dims), np.float32)
    x[0, 3:27, 5:55, 4:46] = ndi.gaussian_filter(rng.normal(0, 1, size=(24, 50, 42)), 1.5) * 600 + 40
    x = np.ascontiguousarray(x.transpose(0, *[int(i) + 1 for i in np.argsort(transpose)]))
    data = x.transpose([0, *[i + 1 for i in transpose]]).astype(np.float32)
    sp = [spacing[i] for i in transpose]
    before = data.shape[1:]
    data, seg, bbox = crop.crop_to_nonzero(data, None)
    shape_crop = data.shape[1:]
    data[0] = norm.CTNormalization(use_mask_for_norm=False, intensityproperties=props).run(data[0], seg[0])
    new_shape = res.compute_new_shape(shape_crop, sp, target)
    ref = res.resample_data_or_seg_to_shape(data, new_shape, sp, target, is_seg=False, order=3, order_z=0,
                                            force_separate_z=None)
    args = [*geometry_args(spacing), "--transpose", *transpose, "--crop", "nonzero", "--intensity",
            "ct:-300:400:30:180", "--intensity-first", "--spacing", *target, "--interp", "cubic", "--interp-z",
            "nearest", "--anisotropy", 3, "--result-interp", "linear", "--result-interp-z", "nearest"]
    img, grid, _ = run(tmp_path, x, *args)
    assert img.shape == ref.shape
    np.testing.assert_allclose(img, ref, atol=1e-5)
    logits = np.stack([ndi.gaussian_filter(rng.normal(size=ref.shape[1:]), 1.5) for _ in range(4)]).astype(np.float32)
    back = res.resample_data_or_seg_to_shape(logits, shape_crop, target, sp, is_seg=False, order=1, order_z=0,
                                             force_separate_z=None)
    want = np.zeros(before, np.uint8)
    want[tuple(slice(a, b) for a, b in bbox)] = back.argmax(0)
    want = want.transpose([int(i) for i in np.argsort(transpose)])
    _, _, labels = run(tmp_path, x, *args, scores=logits)
    assert (labels == want).mean() > 0.9999


# ---- the networks' axes (step 7) ----------------------------------------------

def test_axes_whd_are_the_transpose_of_dhw_both_ways(tmp_path):
    """MONAI's networks take (x, y, z): the image of `axes whd` is the
    default image with its spatial axes reversed, and scores given in that
    order come back to the same labels as their transpose does by default."""
    rng = np.random.default_rng(21)
    dims = (9, 12, 7)
    x = rng.normal(size=(2, *dims)).astype(np.float32)
    geo = geometry_args((2.5, 0.9, 1.1), (3.0, -4.0, 5.0), rotation((0.1, 0.2, -0.05)))
    steps = [*geo, "--orientation", "RAS", "--spacing", 1.5, 1.2, 0.8, "--grid", "monai", "--intensity",
             "range:-1:1:0:1:clip"]
    img, grid, _ = run(tmp_path, x, *steps)
    img_w, grid_w, _ = run(tmp_path, x, *steps, "--axes", "whd")
    np.testing.assert_array_equal(img_w, img.transpose(0, 3, 2, 1))
    assert grid_w["dims"] == grid["dims"][::-1] and grid_w["identity"] is False
    K = 3
    scores = rng.normal(size=(K, *img.shape[1:])).astype(np.float32)
    _, _, lab = run(tmp_path, x, *steps, scores=scores)
    _, _, lab_w = run(tmp_path, x, *steps, "--axes", "whd", scores=np.ascontiguousarray(scores.transpose(0, 3, 2, 1)))
    assert lab.shape == dims and lab.dtype == np.uint8
    np.testing.assert_array_equal(lab_w, lab)
    # Scores in the other order are refused, naming the order wanted.
    err = run(tmp_path, x, *steps, "--axes", "whd", scores=scores, check=2)
    assert "class scores" in err and " x ".join(map(str, grid_w["dims"])) in err, err


def test_axes_alone_is_not_identity_and_bad_values_are_refused(tmp_path):
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(1, 2, 3, 4)
    img, grid, _ = run(tmp_path, x, "--axes", "whd")
    assert grid["identity"] is False
    np.testing.assert_array_equal(img, x.transpose(0, 3, 2, 1))
    err = run(tmp_path, x, "--axes", "xyz", check=2)
    assert "axes" in err and "whd" in err, err
