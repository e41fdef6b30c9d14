"""Synthetic DICOM series with known answers, written with pydicom: the
volume tests (tests/volume) and the Python package's (tests/package) use
them."""
import os

import numpy as np
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.uid import CTImageStorage, ExplicitVRLittleEndian, generate_uid


def slice_ds(pixels, iop, ipp, spacing, uid, slope=1.0, inter=0.0, number=1, modality="CT", desc="synthetic",
             sop_class=CTImageStorage, bits=16, attrs=None):
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = sop_class
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = sop_class
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.SeriesInstanceUID = uid
    ds.StudyInstanceUID = "1.2.3.4"
    ds.Modality = modality
    ds.SeriesDescription = desc
    ds.InstanceNumber = number
    ds.ImageOrientationPatient = [f"{v:.10f}" for v in iop]
    ds.ImagePositionPatient = [f"{v:.6f}" for v in ipp]
    ds.PixelSpacing = [f"{spacing[0]:.6f}", f"{spacing[1]:.6f}"]
    ds.SliceThickness = "9.9"  # not the spacing
    ds.Rows, ds.Columns = pixels.shape
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.BitsAllocated = 16
    ds.BitsStored = bits
    ds.HighBit = bits - 1
    ds.PixelRepresentation = 1 if pixels.dtype == np.int16 else 0
    if slope != 1.0 or inter != 0.0:
        ds.RescaleSlope = f"{slope:g}"
        ds.RescaleIntercept = f"{inter:g}"
    ds.PixelData = pixels.tobytes()
    for k, v in (attrs or {}).items():  # more attributes, e.g. a frame of reference and a patient
        setattr(ds, k, v)
    return ds


def write_series(folder, n=6, rows=9, cols=7, spacing=(0.7, 0.9), step=2.5, iop=None, origin=(-20.0, 30.0, 15.0),
                 slope=1.0, inter=0.0, dtype=np.int16, uid=None, order="shuffled", seed=0, skip=(), syntax=None,
                 names="random", modality="CT", desc="synthetic", bits=16, attrs=None):
    """A series of n slices; returns (uid, the volume D x H x W in position
    order as stored, the positions of the written slices)."""
    rng = np.random.default_rng(seed)
    iop = iop or [1, 0, 0, 0, 1, 0]
    x, y = np.array(iop[:3]), np.array(iop[3:])
    normal = np.cross(x, y)
    uid = uid or generate_uid()
    os.makedirs(folder, exist_ok=True)
    lo, hi = (0, (1 << bits) - 1) if np.dtype(dtype).kind == "u" else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    vol_ = rng.integers(max(lo, -1000), min(hi, 3000), size=(n, rows, cols)).astype(dtype)
    idx = [k for k in range(n) if k not in skip]
    if order == "reversed":
        idx = idx[::-1]
    elif order == "shuffled":
        idx = list(rng.permutation(idx))
    for w, k in enumerate(idx):
        ipp = np.array(origin) + k * step * normal
        # InstanceNumber and file names deliberately disagree with position
        ds = slice_ds(vol_[k], iop, ipp, spacing, uid, slope, inter, number=n - w, modality=modality, desc=desc,
                      bits=bits, attrs=attrs)
        if syntax:
            ds.compress(syntax)
        name = f"{rng.integers(1 << 30):010d}.dcm" if names == "random" else f"IM{w:04d}"
        ds.save_as(os.path.join(folder, name), enforce_file_format=True)
    return uid, vol_, idx
