#!/usr/bin/env python3
"""A synthetic CT written as a DICOM series (one CT Image Storage file per
slice, written with pydicom) and as nnU-Net's input NIfTI
(CASE_0000.nii.gz, the same voxels and geometry, written with nibabel).

    python3 make_case.py [--small] [--work DIR] [--seed N]

The CT (HU): air -1000; a body ellipsoid of soft tissue (about 5-55 HU,
slowly varying) with noise; lungs (-850); liver, spleen, kidneys and a
bladder (10-60 HU); a contrast-filled aorta (180 HU); bright bones: a spine
of vertebral bodies (700 HU) with discs between them, and two femoral heads
(1100 HU). Shapes are placed in fractions of the field of view, so that
--small's 96x128x128 volume holds the same anatomy.

DICOM: 16-bit unsigned, 12 bits stored, RescaleSlope 1 and RescaleIntercept
-1024 (stored value = HU + 1024), PixelSpacing 0.8 x 0.8, slices 1.5 mm
apart (SliceThickness 1.5), ImageOrientationPatient [-1,0,0,0,1,0]: axial,
the normal along -z, so the array's axes are neither LPS's nor RAS's
(direction diag(-1, 1, -1) in LPS, diag(1, -1, -1) in RAS). Files are named
by InstanceNumber, head first.

NIfTI: int16 HU, the affine a converter (dcm2niix, SimpleITK) gives the
series: voxel (i, j, k) = (column, row, slice in position order), RAS
affine diag(0.8, -0.8, -1.5) with the first slice's position. Its
conversion is not part of any contender's timed run: nnU-Net's users
convert their DICOM once, before nnUNetv2_predict.

case/structures.nii.gz (uint8, the NIfTI's grid) names the structure
that painted each voxel, before noise (STRUCTURES): make_model.py fits
the network's head to it.

case.json keeps the geometry and the intensity statistics of the body's
voxels (what nnU-Net's fingerprint would hold for CTNormalization).
"""
import argparse
import json
import os
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import config  # noqa: E402

# Rows run from patient left to right (x reversed), columns to posterior:
# axial, the slice normal along -z (slices in position order go from head
# to feet), a flip of two axes against both LPS and RAS, so that neither
# DICOM's nor NIfTI's world is the array's own order.
IOP = (-1.0, 0.0, 0.0, 0.0, 1.0, 0.0)

# (kind, centre in fractions of the half field of view (x, y, z), semi-axes
# in the same fractions, HU). x: patient left (+), y: posterior (+), z:
# superior (+), LPS as DICOM.
ORGANS = [
    ("ellipsoid", (-0.40, 0.00, 0.05), (0.42, 0.36, 0.28), 60.0),   # liver
    ("ellipsoid", (0.45, 0.15, 0.10), (0.18, 0.20, 0.17), 50.0),    # spleen
    ("ellipsoid", (-0.35, 0.27, -0.20), (0.14, 0.15, 0.18), 35.0),  # right kidney
    ("ellipsoid", (0.35, 0.27, -0.20), (0.14, 0.15, 0.18), 35.0),   # left kidney
    ("ellipsoid", (0.00, -0.15, -0.72), (0.20, 0.18, 0.12), 10.0),  # bladder
    ("ellipsoid", (-0.37, -0.02, 0.55), (0.30, 0.36, 0.40), -850.0),  # right lung
    ("ellipsoid", (0.37, -0.02, 0.55), (0.30, 0.36, 0.40), -850.0),   # left lung
    ("cylinder", (0.08, 0.18, 0.0), (0.06, 0.06, 0.0), 180.0),      # aorta
    ("ellipsoid", (-0.45, 0.05, -0.85), (0.12, 0.12, 0.08), 1100.0),  # right femoral head
    ("ellipsoid", (0.45, 0.05, -0.85), (0.12, 0.12, 0.08), 1100.0),   # left femoral head
]
BODY = ((0.0, 0.05, 0.0), (0.83, 0.56, 1.4))  # centre, semi-axes
SPINE = ((0.0, 0.40), 0.09, 700.0, 100.0)  # centre (x, y), radius, vertebra HU, disc HU


def geometry(s):
    """(origin LPS of the first slice in position order, row direction,
    column direction, normal), the field of view centred on 0."""
    nz, ny, nx = s.shape_zyx
    dz, dy, dx = s.spacing_zyx
    x, y = np.array(IOP[:3]), np.array(IOP[3:])
    n = np.cross(x, y)
    origin = -(x * (nx - 1) * dx + y * (ny - 1) * dy + n * (nz - 1) * dz) / 2
    return origin, x, y, n


def ras_affine(s):
    """NIfTI affine of the (column, row, slice) array in RAS."""
    origin, x, y, n = geometry(s)
    dz, dy, dx = s.spacing_zyx
    lps = np.eye(4)
    lps[:3, 0], lps[:3, 1], lps[:3, 2], lps[:3, 3] = x * dx, y * dy, n * dz, origin
    return np.diag([-1.0, -1.0, 1.0, 1.0]) @ lps


# The structure that paints each voxel (make_volume's `labels`, saved as
# case/structures.nii.gz): 0 air, 1 body (soft tissue), then ORGANS in
# turn (2 liver .. 11 left femoral head), 12 vertebra, 13 disc. Later
# structures paint over earlier ones, as their HU do.
STRUCTURES = ["air", "body", "liver", "spleen", "kidney_right", "kidney_left", "bladder", "lung_right", "lung_left",
              "aorta", "femur_right", "femur_left", "vertebra", "disc"]


def make_volume(s, seed, labels=None):
    """int16 HU, (slices in position order, rows, columns); where `labels`
    is a uint8 array of that shape, the noise-free structure of each voxel
    (STRUCTURES) is written into it."""
    rng = np.random.default_rng(seed)
    nz, ny, nx = s.shape_zyx
    dz, dy, dx = s.spacing_zyx
    half = np.array([nx * dx, ny * dy, nz * dz]) / 2
    origin, x, y, n = geometry(s)
    # World position of each column, row and slice in fractions of the half
    # field of view (the directions are axis-aligned: x, y, z in turn).
    ux = (origin[0] + np.arange(nx) * dx * x[0]) / half[0]
    uy = (origin[1] + np.arange(ny) * dy * y[1]) / half[1]
    uz = (origin[2] + np.arange(nz) * dz * n[2]) / half[2]
    X, Y = ux[None, :], uy[:, None]
    vol = np.empty((nz, ny, nx), np.int16)
    # Slowly varying soft tissue: 30 HU +- 25 over the field of view.
    tissue_xy = 30.0 + 15.0 * np.sin(2.1 * X + 0.7) * np.cos(1.7 * Y)
    (bcx, bcy, bcz), (bax, bay, baz) = BODY
    (scx, scy), sr, vert_hu, disc_hu = SPINE
    disc_period = max(3, int(round(30.0 / dz)))  # a vertebra and its disc every 30 mm
    for k in range(nz):
        z = uz[k]
        hu = np.full((ny, nx), -1000.0)
        lab = np.zeros((ny, nx), np.uint8)
        body = ((X - bcx) / bax) ** 2 + ((Y - bcy) / bay) ** 2 + ((z - bcz) / baz) ** 2 <= 1.0
        hu[body] = (tissue_xy + 10.0 * np.sin(3.0 * z))[body]
        lab[body] = 1
        for i, (kind, (cx, cy, cz), (ax, ay, az), value) in enumerate(ORGANS):
            if kind == "ellipsoid":
                m = ((X - cx) / ax) ** 2 + ((Y - cy) / ay) ** 2 + ((z - cz) / az) ** 2 <= 1.0
            else:
                m = ((X - cx) / ax) ** 2 + ((Y - cy) / ay) ** 2 <= 1.0
            hu[m & body] = value
            lab[m & body] = 2 + i
        spine = ((X - scx) / sr) ** 2 + ((Y - scy) / (sr * half[0] / half[1])) ** 2 <= 1.0
        disc = k % disc_period < max(1, disc_period // 6)
        hu[spine & body] = disc_hu if disc else vert_hu
        lab[spine & body] = 13 if disc else 12
        noise = rng.standard_normal((ny, nx)) * np.where(body, 15.0, 5.0)
        vol[k] = np.clip(np.rint(hu + noise), -1024, 3071).astype(np.int16)
        if labels is not None:
            labels[k] = lab
    return vol


def body_stats(vol, s):
    """nnU-Net's foreground intensity properties of the body's voxels (HU >
    -500 inside the body; every 7th voxel, as nnU-Net samples too)."""
    v = vol.reshape(-1)[::7].astype(np.float64)
    v = v[v > -500]
    p005, p995 = np.percentile(v, [0.5, 99.5])
    return {"max": float(v.max()), "mean": float(v.mean()), "median": float(np.median(v)), "min": float(v.min()),
            "percentile_00_5": float(p005), "percentile_99_5": float(p995), "std": float(v.std())}


def write_dicom(vol, s, folder):
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import CTImageStorage, ExplicitVRLittleEndian, generate_uid

    os.makedirs(folder, exist_ok=True)
    for f in os.listdir(folder):
        os.remove(os.path.join(folder, f))
    nz, ny, nx = s.shape_zyx
    dz, dy, dx = s.spacing_zyx
    origin, _, _, normal = geometry(s)
    study, series, frame = generate_uid(), generate_uid(), generate_uid()
    for k in range(nz):
        number = k + 1  # position order along the normal (-z): head first
        meta = FileMetaDataset()
        meta.MediaStorageSOPClassUID = CTImageStorage
        meta.MediaStorageSOPInstanceUID = generate_uid()
        meta.TransferSyntaxUID = ExplicitVRLittleEndian
        ds = Dataset()
        ds.file_meta = meta
        ds.SOPClassUID = CTImageStorage
        ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
        ds.PatientName = "Bench^Synthetic"
        ds.PatientID = "VBENCH"
        ds.StudyInstanceUID = study
        ds.SeriesInstanceUID = series
        ds.FrameOfReferenceUID = frame
        ds.StudyDate = ds.SeriesDate = "20260101"
        ds.Modality = "CT"
        ds.ImageType = ["ORIGINAL", "PRIMARY", "AXIAL"]
        ds.SeriesDescription = "synthetic CT (segrt bench/volume_vs_monai)"
        ds.SeriesNumber = 1
        ds.InstanceNumber = number
        ds.ImageOrientationPatient = [f"{v:g}" for v in IOP]
        ds.ImagePositionPatient = [f"{v:.4f}" for v in origin + k * dz * normal]
        ds.SliceLocation = f"{(origin + k * dz * normal)[2]:.4f}"
        ds.PixelSpacing = [f"{dy:g}", f"{dx:g}"]  # row spacing, column spacing
        ds.SliceThickness = f"{dz:g}"
        ds.KVP = "120"
        ds.Rows, ds.Columns = ny, nx
        ds.SamplesPerPixel = 1
        ds.PhotometricInterpretation = "MONOCHROME2"
        ds.BitsAllocated = 16
        ds.BitsStored = 12
        ds.HighBit = 11
        ds.PixelRepresentation = 0
        ds.RescaleSlope = "1"
        ds.RescaleIntercept = "-1024"
        ds.RescaleType = "HU"
        ds.WindowCenter, ds.WindowWidth = "40", "400"
        ds.PixelData = (vol[k].astype(np.int32) + 1024).astype("<u2").tobytes()
        ds.save_as(os.path.join(folder, f"IM{number:06d}.dcm"), enforce_file_format=True)


def write_nifti(vol, s, path):
    import nibabel as nib

    os.makedirs(os.path.dirname(path), exist_ok=True)
    img = nib.Nifti1Image(np.ascontiguousarray(vol.transpose(2, 1, 0)), ras_affine(s))
    img.header.set_xyzt_units("mm")
    img.set_qform(ras_affine(s), code=1)
    img.set_sform(ras_affine(s), code=1)
    tmp = path + ".tmp.nii.gz"
    nib.save(img, tmp)
    os.replace(tmp, path)


def check(paths, log=print):
    """The DICOM series and the NIfTI read back with SimpleITK (GDCM for the
    series, as ITK-based tools read them): the same voxels, origin, spacing
    and direction, or an error. Skipped where SimpleITK is missing."""
    try:
        import SimpleITK as sitk
    except ImportError:
        log("case check skipped: no SimpleITK")
        return {"skipped": "no SimpleITK"}
    reader = sitk.ImageSeriesReader()
    reader.SetFileNames(reader.GetGDCMSeriesFileNames(str(paths.dicom_dir)))
    d = reader.Execute()
    n = sitk.ReadImage(str(paths.nifti_case))
    out = {"origin_diff": float(np.abs(np.subtract(d.GetOrigin(), n.GetOrigin())).max()),
           "spacing_diff": float(np.abs(np.subtract(d.GetSpacing(), n.GetSpacing())).max()),
           "direction_diff": float(np.abs(np.subtract(d.GetDirection(), n.GetDirection())).max())}
    same = np.array_equal(sitk.GetArrayViewFromImage(d).astype(np.int32), sitk.GetArrayViewFromImage(n))
    out["voxels_equal"] = bool(same)
    if not same or max(out["origin_diff"], out["spacing_diff"], out["direction_diff"]) > 1e-4:
        raise RuntimeError(f"make_case: the DICOM series and {paths.nifti_case} disagree: {out}")
    log(f"case check: DICOM series and NIfTI read back alike by SimpleITK (direction {d.GetDirection()})")
    return out


def make(paths, s, seed=config.SEED, log=print):
    t0 = time.perf_counter()
    structures = np.zeros(s.shape_zyx, np.uint8)
    vol = make_volume(s, seed, structures)
    t1 = time.perf_counter()
    write_dicom(vol, s, str(paths.dicom_dir))
    t2 = time.perf_counter()
    write_nifti(vol, s, str(paths.nifti_case))
    t3 = time.perf_counter()
    # Not an input of any contender: what make_model.py fits the network's
    # head to (outside the nnU-Net input folder, which must hold images only).
    write_nifti(structures, s, str(paths.structures))
    info = {"setup": s.name, "seed": seed, "shape_zyx": list(s.shape_zyx), "spacing_zyx": list(s.spacing_zyx),
            "iop": list(IOP), "ras_affine": ras_affine(s).tolist(), "files": s.shape_zyx[0],
            "dicom_bytes": sum(os.path.getsize(os.path.join(paths.dicom_dir, f))
                               for f in os.listdir(paths.dicom_dir)),
            "nifti_bytes": os.path.getsize(paths.nifti_case),
            "hu_min": int(vol.min()), "hu_max": int(vol.max()), "structures": STRUCTURES,
            "structure_voxels": np.bincount(structures.ravel(), minlength=len(STRUCTURES)).tolist(),
            "foreground_intensity_properties": body_stats(vol, s),
            "seconds": {"volume": t1 - t0, "dicom": t2 - t1, "nifti": t3 - t2}}
    info["check"] = check(paths, log)
    paths.case_json.write_text(json.dumps(info, indent=1) + "\n")
    log(f"case: {'x'.join(map(str, s.shape_zyx))} (z,y,x) HU {info['hu_min']}..{info['hu_max']}: volume "
        f"{t1 - t0:.1f} s, {s.shape_zyx[0]} DICOM files {info['dicom_bytes'] / 2**20:.0f} MiB in {t2 - t1:.1f} s, "
        f"NIfTI {info['nifti_bytes'] / 2**20:.0f} MiB in {t3 - t2:.1f} s")
    return info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help=f"{'x'.join(map(str, config.SMALL.shape_zyx))} (z,y,x)")
    ap.add_argument("--work", default=None, help="work folder (default $VBENCH_WORK or /tmp/volume_vs_monai[-small])")
    ap.add_argument("--seed", type=int, default=config.SEED)
    a = ap.parse_args(argv)
    paths = config.Paths(config.default_work_dir(a.small) if a.work is None else pathlib.Path(a.work))
    make(paths, config.setup(a.small), a.seed)


if __name__ == "__main__":
    main()
