"""`segrt run MODEL CT.nii.gz -o LABELS.nii.gz` with preprocessing: declared
in the model's metadata (segrt.preprocess.*), given on the command line, or
read from an nnU-Net folder (--nnunet-plans). The volume is a synthetic CT
with an oblique, flipped affine and non-unit spacing whose intensities are a
linear function of the world position, 40 + 10 d HU with d the signed
distance in mm to a plane; the model is a 1x1x1 convolution giving the
scores (-x, x), so its labels are 1 exactly where the normalised intensity
is > 0. With CT normalisation (mean 40, std 10) that is d > 0: the labels
must match numpy's d > 0 at each voxel's world position, wherever the
preprocessing reoriented, resampled and cropped in between.

The boundary band: linear interpolation reproduces a linear function
exactly, so forward and back are exact inside the volume; at its faces the
resampling clamps to the edge voxels (as nnU-Net's and scipy's mode
nearest), which moves the plane by at most half an input voxel along the
face normal's component. Voxels with |d| below half the largest spacing
(1.25 mm here) may disagree; all others must agree."""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

from conftest import HAVE_NIFTI, ROOT

if not HAVE_NIFTI:
    pytest.skip("a build without NIfTI (test_volume_builds.py checks it refuses)", allow_module_level=True)
nib = pytest.importorskip("nibabel")
onnx = pytest.importorskip("onnx")

SEGRT = os.environ.get("SEGRT", str(ROOT / "build" / "segrt"))
SPACING = np.array([0.8, 1.1, 2.5])  # i, j, k
BAND = SPACING.max() / 2


def conv_model(path, meta=None):
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.array([-1.0, 1.0], np.float32).reshape(2, 1, 1, 1, 1), "w")
    x = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, "D", "H", "W"])
    y = helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 2, "D", "H", "W"])
    g = helper.make_graph([helper.make_node("Conv", ["image", "w"], ["scores"])], "conv", [x], [y], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    if meta:
        helper.set_model_props(m, meta)
    onnx.save(m, path)
    return path


META = {"segrt.preprocess.orientation": "RAS", "segrt.preprocess.spacing": "2,2,2",
        "segrt.preprocess.intensity": "ct:-10000,10000,40,10", "segrt.roi": "16,16,16"}


@pytest.fixture(scope="module")
def ct(tmp_path_factory):
    """The CT (i, j, k) = (40, 36, 20): rotated 0.3 rad about S, i and k
    flipped, spacing 0.8, 1.1, 2.5 mm; and d, the distance to the plane at
    each voxel's world position."""
    tmp = tmp_path_factory.mktemp("ct")
    th = 0.3
    rot = np.array([[np.cos(th), -np.sin(th), 0], [np.sin(th), np.cos(th), 0], [0, 0, 1.0]])
    affine = np.eye(4)
    affine[:3, :3] = rot @ np.diag([-1.0, 1.0, -1.0]) @ np.diag(SPACING)
    affine[:3, 3] = [30, -20, 15]
    shape = (40, 36, 20)
    ijk = np.stack(np.meshgrid(*[np.arange(n) for n in shape], indexing="ij"), -1).astype(float)
    ras = ijk @ affine[:3, :3].T + affine[:3, 3]
    normal = np.array([0.5, -0.6, 0.62])
    normal /= np.linalg.norm(normal)
    d = (ras - ras.reshape(-1, 3).mean(0)) @ normal
    img = nib.Nifti1Image((40 + 10 * d).astype(np.float32), affine)
    img.set_sform(affine, code=1)
    img.set_qform(affine, code=1)
    path = tmp / "ct.nii.gz"
    nib.save(img, path)
    return {"path": path, "d": d, "affine": affine, "ras": ras, "dir": tmp}


def run(model, image, out, *args, check=0):
    p = subprocess.run([SEGRT, "run", str(model), str(image), "-o", str(out), *map(str, args)], capture_output=True,
                       text=True, timeout=600)
    if check is not None:
        assert p.returncode == check, p.stderr + p.stdout
    return p


def labels_of(path, affine):
    img = nib.load(path)
    assert np.allclose(img.affine, affine, atol=1e-5), "the labels are not in the input's grid"
    assert img.get_data_dtype() == np.uint8
    return np.asarray(img.dataobj)


def assert_world(labels, want, d, band=BAND):
    """labels equal want wherever |d| >= band; some voxels of each class."""
    assert labels.shape == want.shape
    off = (labels != want) & (np.abs(d) >= band)
    assert not off.any(), f"{off.sum()} voxels disagree outside the band, at |d| up to {np.abs(d[off]).max():.2f} mm"
    assert (labels != want).sum() < 0.05 * labels.size
    assert 0.05 < labels.mean() < 0.95


def model_grid(summary):
    """The networks' image dims from segrt run's summary line."""
    return [int(v) for v in summary.split()[2].split("x")][2:]


def test_metadata_reorients_resamples_and_normalises(ct, tmp_path):
    model = conv_model(tmp_path / "m.onnx", META)
    out = tmp_path / "labels.nii.gz"
    p = run(model, ct["path"], out)
    assert_world(labels_of(out, ct["affine"]), ct["d"] > 0, ct["d"])
    # The networks' grid: the volume reoriented to RAS (nibabel's
    # io_orientation), its spacing to 2 mm with nnU-Net's rounding, in
    # array order (k, j, i of the reoriented volume).
    ornt = nib.orientations.io_orientation(ct["affine"])
    n = np.array([40, 36, 20])[ornt[:, 0].astype(int)]
    sp = SPACING[ornt[:, 0].astype(int)]
    assert model_grid(p.stdout) == list(np.round(n * sp / 2).astype(int))[::-1]


def test_command_line_gives_and_overrides_the_settings(ct, tmp_path):
    plain = conv_model(tmp_path / "plain.onnx")
    a, b = tmp_path / "a.nii.gz", tmp_path / "b.nii.gz"
    run(plain, ct["path"], a, "--roi", "16,16,16", "--orientation", "RAS", "--spacing", "2", "--intensity",
        "ct:-10000,10000,40,10")
    run(conv_model(tmp_path / "m.onnx", META), ct["path"], b)
    assert np.array_equal(labels_of(a, ct["affine"]), labels_of(b, ct["affine"]))
    # The command line wins over the metadata: mean 0 puts the plane at d = -4.
    c = tmp_path / "c.nii.gz"
    run(conv_model(tmp_path / "m2.onnx", META), ct["path"], c, "--intensity", "ct:-10000,10000,0,10",
        "--result-interp", "nearest", "--interp", "cubic")
    assert_world(labels_of(c, ct["affine"]), ct["d"] > -4, ct["d"] + 4, band=2.5)
    # --no-preprocess: the volume as read (HU > 0 is d > -4), as with a model that declares nothing.
    e, f = tmp_path / "e.nii.gz", tmp_path / "f.nii.gz"
    run(conv_model(tmp_path / "m3.onnx", META), ct["path"], e, "--no-preprocess", "--output", "labels")
    run(plain, ct["path"], f, "--roi", "16,16,16", "--output", "labels")
    assert np.array_equal(labels_of(e, ct["affine"]), labels_of(f, ct["affine"]))
    assert_world(labels_of(e, ct["affine"]), ct["d"] > -4, ct["d"] + 4, band=1e-3)


def nnunet_dir(path, crop_sphere=False):
    path.mkdir(parents=True, exist_ok=True)
    kw = {"is_seg": False, "order": 1, "order_z": 0, "force_separate_z": None}
    cfg = {"patch_size": [16, 16, 16], "spacing": [2.0, 2.0, 2.0], "normalization_schemes": ["CTNormalization"],
           "use_mask_for_norm": [False], "resampling_fn_data": "resample_data_or_seg_to_shape",
           "resampling_fn_data_kwargs": kw, "resampling_fn_probabilities": "resample_data_or_seg_to_shape",
           "resampling_fn_probabilities_kwargs": dict(kw, order=1)}
    plans = {"dataset_name": "Dataset999_Plane", "image_reader_writer": "SimpleITKIO",
             "transpose_forward": [0, 1, 2], "transpose_backward": [0, 1, 2],
             "configurations": {"3d_fullres": cfg},
             "foreground_intensity_properties_per_channel": {"0": {
                 "mean": 40.0, "std": 10.0, "percentile_00_5": -10000.0, "percentile_99_5": 10000.0}}}
    (path / "plans.json").write_text(json.dumps(plans))
    (path / "dataset.json").write_text(json.dumps({"channel_names": {"0": "CT"},
                                                   "labels": {"background": 0, "above": 1}}))
    return path


def test_nnunet_plans_end_to_end(ct, tmp_path):
    """nnU-Net's preprocessing (no reorientation, crop to non-zero, CT
    normalisation before resampling to 2 mm) and window (its patch, overlap
    0.5, Gaussian blend, mirroring) from the folder alone. The CT's outside
    a sphere is 0 (air as nnU-Net's cropped background): the crop keeps
    the sphere's box, and the labels are d > 0 inside the sphere, 0 outside
    (a band of one model voxel, 2 mm, around the sphere's surface too)."""
    d, ras = ct["d"], ct["ras"]
    r = np.linalg.norm(ras - ras.reshape(-1, 3).mean(0) - [3, -2, 1], axis=-1)
    inside = r < 14
    hu = np.where(inside, 40 + 10 * d, 0).astype(np.float32)
    img = nib.Nifti1Image(hu, ct["affine"])
    img.set_sform(ct["affine"], code=1)
    img.set_qform(ct["affine"], code=1)
    src = tmp_path / "sphere.nii.gz"
    nib.save(img, src)
    out = tmp_path / "labels.nii.gz"
    p = run(conv_model(tmp_path / "plain.onnx"), src, out, "--nnunet-plans", nnunet_dir(tmp_path / "nn"),
            "3d_fullres")
    got = labels_of(out, ct["affine"])
    want = (d > 0) & inside
    near = np.minimum(np.abs(d), np.abs(r - 14))
    assert_world(got, want, near, band=2.0)
    # Cropped: the networks' grid covers the sphere's box (28 mm across at
    # 2 mm: 14 or 15 voxels and a margin of rounding), not the whole volume.
    grid = model_grid(p.stdout)
    whole = np.round(np.array([20, 36, 40]) * SPACING[::-1] / 2)
    assert all(g < w for g, w in zip(grid, whole)), (grid, whole)
    # nnU-Net's window grid over it: patch 16, step 8 (tile_step_size 0.5).
    steps = [int(np.ceil(max(g - 16, 0) / 8)) + 1 for g in grid]
    assert f" {int(np.prod(steps))} windows " in p.stdout, p.stdout
    # The user overrides nnU-Net's window: --tta none, --roi.
    run(conv_model(tmp_path / "plain2.onnx"), src, tmp_path / "o.nii.gz", "--nnunet-plans", tmp_path / "nn",
        "3d_fullres", "--tta", "none", "--roi", "8,8,8", "--blend", "constant", "--overlap", "0.25")
    assert np.array_equal(labels_of(tmp_path / "o.nii.gz", ct["affine"]), got)
    # A window spanning whole axes is the cropped image's (the engines are
    # built again for it once the crop is known): one window.
    p = run(conv_model(tmp_path / "plain3.onnx"), src, tmp_path / "w.nii.gz", "--nnunet-plans", tmp_path / "nn",
            "3d_fullres", "--tta", "none", "--roi", "-1,-1,-1")
    assert " 1 windows " in p.stdout, p.stdout
    assert np.array_equal(labels_of(tmp_path / "w.nii.gz", ct["affine"]), got)


@pytest.mark.parametrize("args,words", [
    (["--output", "logits"], ["logits", "its own grid"]),
    (["--output", "labels", "--activation", "sigmoid"], ["sigmoid"]),
    (["--spacing", "2,2"], ["--spacing", "`2,2`"]),
    (["--orientation", "XYZ"], ["--orientation", "XYZ"]),
    (["--intensity", "ct:1,2"], ["--intensity", "ct:1,2"]),
    (["--intensity", "zscore;zscore"], ["--intensity", "one channel"]),
    (["--intensity", "zscore", "--intensity", "zscore"], ["intensit", "channel"]),
    (["--crop-foreground=none"], ["--crop-foreground"]),
    (["--crop-foreground=lots"], ["--crop-foreground", "lots"]),
    (["--interp", "sinc"], ["--interp", "sinc"]),
    (["--result-interp", "cubic"], ["--result-interp", "cubic"]),
    (["--resample-grid", "itk"], ["--resample-grid", "itk"]),
    (["--no-preprocess", "--spacing", "2"], ["--no-preprocess"]),
    (["--nnunet-plans", "/nonexistent/nn", "3d_fullres"], ["/nonexistent/nn/plans.json"]),
    (["--nnunet-plans"], ["--nnunet-plans"]),
])
def test_refusals(ct, tmp_path, args, words):
    p = run(conv_model(tmp_path / "m.onnx", META), ct["path"], tmp_path / "x.nii.gz", *args, check=2)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert not (tmp_path / "x.nii.gz").exists()


def test_preprocessing_options_want_a_volume(tmp_path):
    npy = tmp_path / "x.npy"
    np.save(npy, np.zeros((1, 1, 8, 8, 8), np.float32))
    p = run(conv_model(tmp_path / "m.onnx"), npy, tmp_path / "y.npy", "--roi", "4,4,4", "--spacing", "2", check=2)
    assert "apply to volumes" in p.stderr
    # A model that declares preprocessing runs an NPY as it is (the metadata is for volumes).
    run(conv_model(tmp_path / "m2.onnx", META), npy, tmp_path / "z.npy", "--roi", "4,4,4")


def test_malformed_metadata_names_key_and_value(ct, tmp_path):
    model = conv_model(tmp_path / "bad.onnx", dict(META, **{"segrt.preprocess.spacing": "2,x,2"}))
    p = run(model, ct["path"], tmp_path / "x.nii.gz", check=2)
    assert "bad.onnx" in p.stderr and "segrt.preprocess.spacing" in p.stderr and "`2,x,2`" in p.stderr


def test_dicom_series_preprocessed_in_world_coordinates(tmp_path):
    """A DICOM series (oblique orientation, slices written shuffled)
    preprocessed from the model's metadata: the labels, written as NIfTI in
    the series' grid, against d > 0 at each voxel's LPS position from
    ImagePositionPatient, ImageOrientationPatient and PixelSpacing."""
    from conftest import HAVE_DICOM
    if not HAVE_DICOM:
        pytest.skip("a build without DICOM")
    pytest.importorskip("pydicom")
    from dicom_synth import slice_ds
    from pydicom.uid import generate_uid
    iop = np.array([0.96, 0.28, 0.0, -0.28, 0.96, 0.0])
    x, y = iop[:3], iop[3:]
    normal = np.cross(x, y)
    rows, cols, n, spacing, step = 30, 26, 14, (0.9, 0.7), 2.0  # PixelSpacing: row spacing, then column
    origin = np.array([-20.0, 30.0, 15.0])
    k, r, c = np.meshgrid(np.arange(n), np.arange(rows), np.arange(cols), indexing="ij")
    lps = origin + (k * step)[..., None] * normal + (c * spacing[1])[..., None] * x + (r * spacing[0])[..., None] * y
    plane = np.array([0.3, 0.5, -0.8]) / np.linalg.norm([0.3, 0.5, -0.8])
    d = (lps - lps.reshape(-1, 3).mean(0)) @ plane
    hu = np.round(40 + 10 * d).astype(np.int16)
    folder = tmp_path / "series"
    folder.mkdir()
    uid = generate_uid()
    for w, kk in enumerate(np.random.default_rng(3).permutation(n)):
        ds = slice_ds(hu[kk], list(iop), origin + kk * step * normal, spacing, uid, number=w + 1)
        ds.save_as(folder / f"{w:03d}.dcm", enforce_file_format=True)
    out = tmp_path / "labels.nii.gz"
    run(conv_model(tmp_path / "m.onnx", META), folder, out)
    got = np.asarray(nib.load(out).dataobj).transpose(2, 1, 0)  # k, row, column
    assert_world(got, d > 0, d, band=max(step, *spacing) / 2 + 0.05)  # + HU rounded to integers: 0.05 mm


def test_help_documents_every_option():
    p = subprocess.run([SEGRT, "run", "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0
    for opt in ("--orientation", "--spacing", "--intensity ", "--intensity-first", "--crop-foreground",
                "--crop-margin", "--interp", "--result-interp", "--result-probs", "--resample-grid",
                "--nnunet-plans DIR CONFIG", "--no-preprocess", "--tta mirror[=AXES]|none", "docs/preprocess.md"):
        assert opt in p.stdout, opt
    section = p.stdout[p.stdout.index("volume preprocessing"):]
    assert max(len(line) for line in section.splitlines()) <= 100


def test_two_channels_with_a_scheme_each(ct, tmp_path):
    """A 4-D NIfTI of two channels (40 + 10 d and 500 + 100 d) through a
    convolution summing them: with a CT scheme per channel (--intensity
    twice) both are d, so the labels are d > 0; with none, the sum
    540 + 110 d puts the plane at d = -540/110."""
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.array([[-1.0, -1.0], [1.0, 1.0]], np.float32).reshape(2, 2, 1, 1, 1), "w")
    x = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 2, "D", "H", "W"])
    y = helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 2, "D", "H", "W"])
    g = helper.make_graph([helper.make_node("Conv", ["image", "w"], ["scores"])], "conv", [x], [y], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), tmp_path / "two.onnx")
    d = ct["d"]
    img = nib.Nifti1Image(np.stack([40 + 10 * d, 500 + 100 * d], -1).astype(np.float32), ct["affine"])
    img.set_sform(ct["affine"], code=1)
    img.set_qform(ct["affine"], code=1)
    nib.save(img, tmp_path / "two.nii.gz")
    common = ["--roi", "16,16,16", "--spacing", "2", "--orientation", "LPS"]
    run(tmp_path / "two.onnx", tmp_path / "two.nii.gz", tmp_path / "a.nii.gz", *common, "--intensity",
        "ct:-1e4,1e4,40,10", "--intensity", "ct:-1e4,1e4,500,100")
    assert_world(labels_of(tmp_path / "a.nii.gz", ct["affine"]), d > 0, d)
    run(tmp_path / "two.onnx", tmp_path / "two.nii.gz", tmp_path / "b.nii.gz", *common, "--output", "labels")
    assert_world(labels_of(tmp_path / "b.nii.gz", ct["affine"]), d > -540 / 110, d + 540 / 110)
    # Three schemes for two channels: refused by the plan, naming the count.
    p = run(tmp_path / "two.onnx", tmp_path / "two.nii.gz", tmp_path / "c.nii.gz", *common, "--intensity", "zscore",
            "--intensity", "zscore", "--intensity", "zscore", check=2)
    assert "3" in p.stderr and "2" in p.stderr, p.stderr


def test_folder_of_cases_preprocessed(ct, tmp_path):
    """segrt run -i IN_DIR -o OUT_DIR with preprocessing options: each case
    (read ahead by the folder job) gives the single job's labels."""
    import shutil
    cases = tmp_path / "cases"
    cases.mkdir()
    for name in ("a_0000.nii.gz", "b_0000.nii.gz"):
        shutil.copy(ct["path"], cases / name)
    plain = conv_model(tmp_path / "plain.onnx")
    args = ["--roi", "16,16,16", "--orientation", "RAS", "--spacing", "2", "--intensity", "ct:-10000,10000,40,10"]
    run(plain, ct["path"], tmp_path / "one.nii.gz", *args)
    p = subprocess.run([SEGRT, "run", str(plain), "-i", str(cases), "-o", str(tmp_path / "out"), *args],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr + p.stdout
    want = labels_of(tmp_path / "one.nii.gz", ct["affine"])
    for name in ("a", "b"):
        assert np.array_equal(labels_of(tmp_path / "out" / f"{name}.nii.gz", ct["affine"]), want)
    assert_world(want, ct["d"] > 0, ct["d"])
