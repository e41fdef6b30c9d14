#!/usr/bin/env python3
"""Writes the volume fuzzer's seeds (tests/fuzz/seeds/volume): tiny NIfTI
files nibabel writes (NIfTI-1 and -2, .nii and .nii.gz, 3-D and 4-D,
scaled, big-endian, RGB) and small DICOM files pydicom writes (plain,
RLE, enhanced multi-frame) or bundles. Run with the project's .venv:
    .venv/bin/python tests/fuzz/make_volume_seeds.py"""
import pathlib
import shutil
import sys

import nibabel as nib
import numpy as np
import pydicom

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "volume"))
from test_dicom import enhanced_ct, slice_ds  # noqa: E402

out = HERE / "seeds" / "volume"
shutil.rmtree(out, ignore_errors=True)
out.mkdir(parents=True)
aff = np.array([[0, -2, 0.3, 10], [1.5, 0, 0, -20], [0, 0.1, 3, 5], [0, 0, 0, 1.0]])
rng = np.random.default_rng(0)
for cls, tag in ((nib.Nifti1Image, "n1"), (nib.Nifti2Image, "n2")):
    for shape, dt in (((5, 4, 3), "i2"), ((4, 3, 2, 2), "f4"), ((6, 5, 2), "u1")):
        img = cls(rng.integers(0, 100, size=shape).astype(dt), aff, dtype=np.dtype(dt))
        for ext in (".nii", ".nii.gz"):
            nib.save(img, str(out / f"{tag}_{dt}_{len(shape)}d{ext}"))
img = nib.Nifti1Image(rng.integers(0, 100, size=(4, 3, 2)).astype("i2"), aff, dtype=np.int16)
img.header.set_slope_inter(0.5, -3)
nib.save(img, str(out / "scaled.nii.gz"))
img = nib.Nifti1Image(rng.integers(0, 100, size=(4, 3, 2)).astype(">i2"), aff,
                      header=nib.Nifti1Header(endianness=">"), dtype=np.dtype(">i2"))
nib.save(img, str(out / "big_endian.nii"))
rgb = np.zeros((3, 3, 2), dtype=[("R", "u1"), ("G", "u1"), ("B", "u1")])
nib.save(nib.Nifti1Image(rgb, aff), str(out / "rgb.nii"))
px = rng.integers(0, 4000, size=(6, 5)).astype(np.uint16)
ds = slice_ds(px, [1, 0, 0, 0, 1, 0], [1, 2, 3], (0.5, 0.5), "1.2.3.4.5", slope=1, inter=-1024, bits=12)
ds.save_as(out / "ct.dcm", enforce_file_format=True)
ds.compress(pydicom.uid.RLELossless)
ds.save_as(out / "ct_rle.dcm", enforce_file_format=True)
enhanced_ct(out / "enhanced.dcm", n=3, rows=4, cols=3)
bundled = pathlib.Path(pydicom.__file__).parent / "data" / "test_files"
for name in ("MR_small_jpeg_ls_lossless.dcm", "JPEGLSNearLossless_08.dcm", "rtdose_rle.dcm",
             "SC_rgb_small_odd_jpeg.dcm", "SC_rgb_jpeg_gdcm.dcm", "MR_small_expb.dcm"):
    shutil.copy(bundled / name, out / name)
print(f"{len(list(out.iterdir()))} seeds in {out}")
