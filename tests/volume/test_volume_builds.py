"""Both kinds of build: with niftilib and GDCM the files read; without
them (-DSEGRT_NIFTI=OFF, -DSEGRT_DICOM=OFF, as on a machine without the
packages) segrt still builds and refuses such files by name, saying what
the build lacks."""
import numpy as np
import pytest

from conftest import HAVE_DICOM, HAVE_NIFTI, fails, info, vol

nib = pytest.importorskip("nibabel")


def test_nifti_build(tmp_path):
    path = tmp_path / "v.nii.gz"
    nib.save(nib.Nifti1Image(np.zeros((3, 4, 5), np.int16), np.eye(4)), str(path))
    if HAVE_NIFTI:
        assert info(path)["depth"] == 5
        np.save(tmp_path / "l.npy", np.zeros((5, 4, 3), np.uint8))
        vol("save", tmp_path / "l.npy", tmp_path / "out.nii")
    else:
        fails(["info", path], "v.nii.gz", "built without NIfTI support")
        np.save(tmp_path / "l.npy", np.zeros((5, 4, 3), np.uint8))
        fails(["save", tmp_path / "l.npy", tmp_path / "out.nii"], "out.nii", "built without NIfTI support")
        assert not (tmp_path / "out.nii").exists()


def test_dicom_build(tmp_path):
    pydicom = pytest.importorskip("pydicom")
    from test_dicom import write_series
    write_series(tmp_path / "s", n=3)
    one = sorted((tmp_path / "s").iterdir())[0]
    if HAVE_DICOM:
        assert info(tmp_path / "s")["depth"] == 3
        assert info(one)["depth"] == 1
    else:
        fails(["info", tmp_path / "s"], "built without DICOM support")
        fails(["info", one], one.name, "built without DICOM support")
        fails(["list", tmp_path / "s"], "built without DICOM support")
    assert pydicom
