"""segrt.read_volume / save_volume / dicom_series / run_volume: a NIfTI file
and a DICOM series read with their geometry (against nibabel and
SimpleITK), labels written back in it, and a volume run through a model
with its labels equal to the CLI's (`segrt run MODEL VOLUME -o
LABELS.nii.gz`, tests/volume)."""
import pathlib
import sys

import numpy as np
import pytest

import segrt
from conftest import run_segrt

nib = pytest.importorskip("nibabel")
VOLUME_TESTS = pathlib.Path(__file__).resolve().parents[1] / "volume"


def oblique_nifti(path, seed=0, shape=(20, 18, 12)):
    rng = np.random.default_rng(seed)
    data = rng.integers(-1000, 2000, shape).astype(np.int16)  # i, j, k
    affine = np.array([[0.8, 0.1, 0.0, -20], [0.0, -0.9, 0.2, 30], [0.05, 0.0, 2.5, -100], [0, 0, 0, 1]])
    img = nib.Nifti1Image(data, affine)
    img.set_sform(affine, code=2)
    img.set_qform(affine, code=1)
    nib.save(img, path)
    return data, affine


def test_read_and_save_a_nifti_volume(tmp_path):
    data, affine = oblique_nifti(tmp_path / "ct.nii.gz")
    vol, geo = segrt.read_volume(tmp_path / "ct.nii.gz")
    assert vol.dtype == np.int16 and vol.shape == data.shape[::-1]
    assert np.array_equal(vol, data.transpose(2, 1, 0))
    assert geo.known and (geo.qform_code, geo.sform_code) == (1, 2)
    assert np.allclose(geo.affine_ras(), affine, atol=1e-6)
    labels = (vol > 0).astype(np.uint8)
    segrt.save_volume(tmp_path / "labels.nii.gz", labels, geo)
    back = nib.load(tmp_path / "labels.nii.gz")
    assert np.allclose(back.affine, affine, atol=1e-5) and int(back.header["sform_code"]) == 2
    assert np.array_equal(np.asarray(back.dataobj), labels.transpose(2, 1, 0))


def test_dicom_series_geometry_against_simpleitk(tmp_path):
    sitk = pytest.importorskip("SimpleITK")
    pytest.importorskip("pydicom")
    sys.path.insert(0, str(VOLUME_TESTS))
    try:
        from dicom_synth import write_series
    finally:
        sys.path.pop(0)
    folder = tmp_path / "series"
    uid, _, _ = write_series(folder, n=7, rows=12, cols=10, iop=[0.96, 0.28, 0.0, -0.28, 0.96, 0.0])
    [s] = segrt.dicom_series(folder)
    assert s["uid"] == uid and s["slices"] == 7 and (s["rows"], s["columns"]) == (12, 10)
    vol, geo = segrt.read_volume(folder)
    reader = sitk.ImageSeriesReader()
    ref = sitk.ReadImage(reader.GetGDCMSeriesFileNames(str(folder)))
    assert np.array_equal(vol, sitk.GetArrayFromImage(ref))
    assert np.allclose(geo.origin, ref.GetOrigin()) and np.allclose(geo.spacing[::-1], ref.GetSpacing())
    assert np.allclose(geo.direction, np.array(ref.GetDirection()).reshape(3, 3))


def test_errors_name_the_file(tmp_path):
    with pytest.raises(segrt.FileError, match="missing.nii"):
        segrt.read_volume(tmp_path / "missing.nii")
    bad = tmp_path / "bad.nii.gz"
    bad.write_bytes(b"\x1f\x8b" + b"not a nifti" * 10)
    with pytest.raises(segrt.Error, match="bad.nii.gz"):
        segrt.read_volume(bad)
    with pytest.raises(segrt.InvalidArgumentError, match="x.npy"):
        segrt.save_volume(tmp_path / "x.npy", np.zeros((2, 3, 4), np.uint8))


def test_run_volume_gives_the_clis_labels(tmp_path, models):
    oblique_nifti(tmp_path / "ct.nii.gz", seed=3, shape=(36, 32, 20))
    model = models / "unet3d_spleen.onnx"
    with segrt.Engine(model) as engine:
        labels, geo = segrt.run_volume(engine, tmp_path / "ct.nii.gz", (16, 16, 16), overlap=0.25, sw_batch=1,
                                       progress=False, out=tmp_path / "py.nii.gz")
    run_segrt("run", model, tmp_path / "ct.nii.gz", "-o", tmp_path / "cli.nii.gz", "--roi", "16,16,16",
              "--overlap", "0.25", "--output", "labels", "--blend", "gaussian")
    py, cli = nib.load(tmp_path / "py.nii.gz"), nib.load(tmp_path / "cli.nii.gz")
    assert np.array_equal(np.asarray(py.dataobj), np.asarray(cli.dataobj))
    assert np.allclose(py.affine, cli.affine) and labels.shape == (1, 1, 20, 32, 36)
