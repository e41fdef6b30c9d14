"""Shared helpers of the volume tests: the segrt_vol driver (tests/volume/
segrt_vol.c, built beside the tests), the reference readers' answers in
segrt's geometry model (LPS; direction columns i, j, k; spacing in array
order depth, height, width), and where the wheels' bundled files are."""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
VOL = os.environ.get("SEGRT_VOL", str(ROOT / "build" / "tests" / "segrt_vol"))
HAVE_NIFTI = os.environ.get("SEGRT_HAVE_NIFTI", "1") == "1"
HAVE_DICOM = os.environ.get("SEGRT_HAVE_DICOM", "1") == "1"
LPS = np.diag([-1.0, -1.0, 1.0])


def vol(*args, check=0):
    """Runs segrt_vol; with check, asserts its exit code."""
    p = subprocess.run([VOL, *map(str, args)], capture_output=True, text=True, timeout=600)
    if check is not None:
        assert p.returncode == check, f"exit {p.returncode}: {p.stderr}{p.stdout}"
    return p


def info(path, series=None):
    args = ["info", path] + (["--series", series] if series else [])
    return json.loads(vol(*args).stdout)


def read(path, tmp_path, series=None, box=None):
    """The volume (or a box of it) as segrt reads it: C x D x H x W."""
    out = tmp_path / f"read-{abs(hash((str(path), series, str(box))))}.npy"
    args = ["read", path, out] + (["--series", series] if series else []) + (["--box", *box] if box else [])
    vol(*args)
    return np.load(out)


def fails(args, *words):
    """segrt_vol fails with exit 2 and one line naming each of words."""
    p = vol(*args, check=2)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    for w in words:
        assert str(w) in lines[0], lines[0]
    return lines[0]


def geometry_of_affine(affine):
    """segrt's geometry from a RAS affine (nibabel's): spacing (d, h, w),
    origin and direction in LPS."""
    m = LPS @ np.asarray(affine, float)[:3]
    cols = m[:, :3]
    sp = np.linalg.norm(cols, axis=0)
    return sp[::-1], m[:, 3], cols / sp


def geometry_of_sitk(img):
    """segrt's geometry from a SimpleITK image (LPS already)."""
    d = np.array(img.GetDirection(), float).reshape(3, 3)
    return np.array(img.GetSpacing(), float)[::-1], np.array(img.GetOrigin(), float), d


def assert_geometry(got, spacing, origin, direction, tol=1e-4):
    np.testing.assert_allclose(got["spacing"], spacing, rtol=tol, atol=tol)
    np.testing.assert_allclose(got["origin"], origin, rtol=tol, atol=tol)
    np.testing.assert_allclose(got["direction"], direction, atol=tol)


def pydicom_files():
    import pydicom
    return pathlib.Path(pydicom.__file__).parent / "data" / "test_files"


def nibabel_files():
    import nibabel
    return pathlib.Path(nibabel.__file__).parent / "tests" / "data"
