"""`segrt run MODEL VOLUME -o LABELS.nii.gz`: a NIfTI file or a DICOM series
(a folder) through a 3-D model with sliding windows, the labels written as
NIfTI in the input's own grid. Checked against the same model run on the
same voxels from an NPY file (the job's other input, already tested against
MONAI), and the written affine against nibabel's (NIfTI input) and
SimpleITK's (DICOM input)."""
import os
import pathlib
import subprocess

import numpy as np
import pytest

from conftest import HAVE_DICOM, HAVE_NIFTI, ROOT

if not HAVE_NIFTI:
    pytest.skip("a build without NIfTI (test_volume_builds.py checks it refuses)", allow_module_level=True)
nib = pytest.importorskip("nibabel")

SEGRT = os.environ.get("SEGRT", str(ROOT / "build" / "segrt"))
MODELS = pathlib.Path(os.environ.get("SEGRT_MODELS") or ROOT / "build" / "test-models")
MODEL = MODELS / "unet3d_spleen.onnx"


def run(*args, check=0):
    p = subprocess.run([SEGRT, "run", str(MODEL), *map(str, args)], capture_output=True, text=True, timeout=600)
    if check is not None:
        assert p.returncode == check, p.stderr + p.stdout
    return p


def window_job(image, out, kind="labels", *more, check=0):
    return run(image, "-o", out, "--roi", "16,16,16", "--overlap", "0.25", "--output", kind, *more, check=check)


def npy_reference(tmp_path, dhw, kind="labels"):
    """The job on the same voxels (D x H x W) from an NPY file."""
    src, out = tmp_path / f"ref-{kind}.npy", tmp_path / f"ref-{kind}-out.npy"
    np.save(src, np.ascontiguousarray(dhw, dtype=np.float32)[None, None])
    window_job(src, out, kind)
    return np.load(out)


def test_nifti_in_nifti_labels_out_in_its_grid(tmp_path):
    rng = np.random.default_rng(1)
    data = rng.normal(0, 1, (40, 36, 20)).astype(np.float32)  # i, j, k
    affine = np.array([[0.8, 0.1, 0.0, -20], [0.0, -0.9, 0.2, 30], [0.05, 0.0, 2.5, -100], [0, 0, 0, 1]])
    img = nib.Nifti1Image(data, affine)
    img.set_sform(affine, code=2)
    img.set_qform(affine, code=1)
    src = tmp_path / "ct.nii.gz"
    nib.save(img, src)
    dhw = data.transpose(2, 1, 0)  # the job's array: depth (k), height (j), width (i)

    window_job(src, tmp_path / "labels.nii.gz")
    got = nib.load(tmp_path / "labels.nii.gz")
    assert got.shape == data.shape and got.get_data_dtype() == np.uint8
    assert np.allclose(got.affine, affine, atol=1e-5)
    assert int(got.header["sform_code"]) == 2 and int(got.header["qform_code"]) == 1
    want = npy_reference(tmp_path, dhw)
    assert np.array_equal(np.asarray(got.dataobj).transpose(2, 1, 0), want[0, 0])

    # Probabilities, one volume per class (a 4-D .nii): the same numbers.
    window_job(src, tmp_path / "probs.nii", "probs")
    probs = nib.load(tmp_path / "probs.nii")
    want = npy_reference(tmp_path, dhw, "probs")
    assert probs.shape == data.shape + (want.shape[1],)
    assert np.array_equal(np.asarray(probs.dataobj).transpose(3, 2, 1, 0), want[0])
    assert np.allclose(probs.affine, affine, atol=1e-5)


@pytest.mark.skipif(not HAVE_DICOM, reason="a build without DICOM")
def test_dicom_series_in_nifti_labels_out_in_its_grid(tmp_path):
    sitk = pytest.importorskip("SimpleITK")
    from dicom_synth import write_series
    iop = [0.96, 0.28, 0.0, -0.28, 0.96, 0.0]
    folder = tmp_path / "series"
    write_series(folder, n=18, rows=22, cols=20, spacing=(0.7, 0.9), step=2.0, iop=iop, order="shuffled")
    p = window_job(folder, tmp_path / "labels.nii.gz")
    # Where the time went, each part named (the series read while the
    # engines were built).
    line = next(x for x in p.stdout.splitlines() if x.startswith("segrt: time:"))
    for part in ("loading the model", "reading the image", "engines", "windows", "writing"):
        assert part in line, line
    got = nib.load(tmp_path / "labels.nii.gz")

    reader = sitk.ImageSeriesReader()
    ref = sitk.ReadImage(reader.GetGDCMSeriesFileNames(str(folder)), sitk.sitkFloat32)
    dhw = sitk.GetArrayFromImage(ref)  # k, j, i
    d = np.array(ref.GetDirection()).reshape(3, 3) * np.array(ref.GetSpacing())
    lps = np.eye(4)
    lps[:3, :3], lps[:3, 3] = d, ref.GetOrigin()
    ras = np.diag([-1.0, -1.0, 1.0, 1.0]) @ lps  # what dcm2niix and SimpleITK's NIfTI writer give
    assert np.allclose(got.affine, ras, atol=1e-4), (got.affine, ras)
    assert got.shape == dhw.shape[::-1]
    want = npy_reference(tmp_path, dhw)
    assert np.array_equal(np.asarray(got.dataobj).transpose(2, 1, 0), want[0, 0])


@pytest.mark.skipif(not HAVE_DICOM, reason="a build without DICOM")
def test_two_series_are_refused_naming_them_and_chosen_by_uid(tmp_path):
    from dicom_synth import write_series
    folder = tmp_path / "two"
    a, _, _ = write_series(folder, n=4, desc="first")
    b, _, _ = write_series(folder, n=3, desc="second", seed=1)
    p = window_job(folder, tmp_path / "labels.nii.gz", check=None)
    assert p.returncode == 2 and a in p.stderr and b in p.stderr and "--series" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and not (tmp_path / "labels.nii.gz").exists()
    # --series picks one: its 3 slices.
    window_job(folder, tmp_path / "second.nii.gz", "labels", "--series", b)
    assert nib.load(tmp_path / "second.nii.gz").shape[2] == 3
    p = window_job(folder, tmp_path / "none.nii.gz", "labels", "--series", "1.2.3", check=None)
    assert p.returncode == 2 and "1.2.3" in p.stderr, p.stderr


@pytest.mark.skipif(not HAVE_DICOM, reason="a build without DICOM")
def test_a_series_failing_while_the_engines_are_built_names_its_file(tmp_path):
    """The series is read on a thread of its own while the engines are
    built: a slice that fails to decode there is still the job's one-line
    error naming the file, and nothing is written."""
    import pydicom
    from dicom_synth import write_series
    from pydicom.uid import RLELossless
    folder = tmp_path / "series"
    write_series(folder, n=12, rows=20, cols=18, dtype=np.uint16, bits=12, syntax=RLELossless, names="plain")
    victim = sorted(folder.iterdir())[5]
    ds = pydicom.dcmread(victim)
    frag = bytearray(ds.PixelData)
    frag[16:20] = (200).to_bytes(4, "little")  # the RLE header's segment count, then an offset past the end
    frag[24:28] = (0x7FFFFFF0).to_bytes(4, "little")
    ds.PixelData = bytes(frag)
    ds.save_as(victim, enforce_file_format=True)
    p = window_job(folder, tmp_path / "labels.nii.gz", check=2)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and victim.name in lines[0], p.stderr
    assert not (tmp_path / "labels.nii.gz").exists()
