"""The DICOM series reader against pydicom (values, sorted by position
with numpy) and SimpleITK (geometry), on series written here with pydicom
(known answers) and on the files pydicom's wheel bundles; the NIfTI
writer's affine for DICOM input against SimpleITK's."""
import json
import os
import pathlib
import shutil

import numpy as np
import pytest

from conftest import assert_geometry, fails, geometry_of_sitk, info, pydicom_files, read, vol
from dicom_synth import slice_ds, write_series

pydicom = pytest.importorskip("pydicom")
sitk = pytest.importorskip("SimpleITK")
nib = pytest.importorskip("nibabel")
from pydicom.dataset import Dataset, FileMetaDataset  # noqa: E402
from pydicom.uid import (CTImageStorage, ExplicitVRLittleEndian, JPEG2000Lossless, JPEGLSLossless,  # noqa: E402
                         RLELossless, generate_uid)

OBLIQUE_IOP = None


def oblique_iop():
    a, b = np.radians(20), np.radians(-35)
    rz = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])
    rx = np.array([[1, 0, 0], [0, np.cos(b), -np.sin(b)], [0, np.sin(b), np.cos(b)]])
    r = rz @ rx
    return list(r[:, 0]) + list(r[:, 1])


def expected_by_pydicom(folder):
    """pydicom's pixels with the modality LUT, sorted by IPP . normal."""
    from pydicom.pixels import apply_modality_lut
    slices = []
    for name in os.listdir(folder):
        p = os.path.join(folder, name)
        try:
            ds = pydicom.dcmread(p)
        except Exception:
            continue
        if "PixelData" not in ds:
            continue
        iop = np.array(ds.ImageOrientationPatient, float)
        n = np.cross(iop[:3], iop[3:])
        slices.append((float(np.dot(np.array(ds.ImagePositionPatient, float), n)),
                       apply_modality_lut(ds.pixel_array, ds)))
    slices.sort(key=lambda s: s[0])
    return np.stack([s[1] for s in slices])


def sitk_series(folder):
    r = sitk.ImageSeriesReader()
    r.SetFileNames(r.GetGDCMSeriesFileNames(str(folder)))
    return r.Execute()


def check_series(folder, tmp_path, dtype=None, series=None, with_sitk=True):
    got = info(folder, series)
    arr = read(folder, tmp_path, series)
    want = expected_by_pydicom(folder)
    if dtype:
        assert got["dtype"] == dtype
    np.testing.assert_allclose(arr[0].astype(np.float64), want.astype(np.float64), rtol=1e-6, atol=1e-4)
    assert got["known"] == 1
    if not with_sitk:
        return got, arr
    img = sitk_series(folder)
    assert_geometry(got, *geometry_of_sitk(img))
    np.testing.assert_allclose(arr[0].astype(np.float64), sitk.GetArrayFromImage(img).astype(np.float64),
                               rtol=1e-5, atol=1e-3)
    return got, arr


def test_axial_shuffled_series(tmp_path):
    folder = tmp_path / "ct"
    write_series(folder, order="shuffled")
    got, arr = check_series(folder, tmp_path, "int16")
    assert (got["depth"], got["height"], got["width"]) == (6, 9, 7)
    assert got["spacing"] == pytest.approx([2.5, 0.7, 0.9])  # SliceThickness 9.9 is not the spacing


@pytest.mark.parametrize("order", ["reversed", "shuffled"])
def test_oblique_series(tmp_path, order):
    folder = tmp_path / "obl"
    uid, vol_, _ = write_series(folder, n=7, iop=oblique_iop(), step=1.75, spacing=(0.5, 1.25), order=order)
    got, arr = check_series(folder, tmp_path, "int16")
    np.testing.assert_array_equal(arr[0], vol_)
    iop = np.array(oblique_iop())
    np.testing.assert_allclose(np.array(got["direction"])[:, 0], iop[:3], atol=1e-6)
    np.testing.assert_allclose(np.array(got["direction"])[:, 1], iop[3:], atol=1e-6)


def test_rescale_rules(tmp_path):
    a = tmp_path / "hu"
    write_series(a, dtype=np.uint16, slope=1, inter=-1024)
    check_series(a, tmp_path, "float32")  # 16 stored bits less 1024 do not all fit int16
    b = tmp_path / "hu12"
    write_series(b, dtype=np.uint16, slope=1, inter=-1024, bits=12)
    check_series(b, tmp_path, "int16")  # a CT's 12 bits in HU do
    s16 = tmp_path / "signed12"
    write_series(s16, dtype=np.int16, slope=1, inter=-1024, bits=12)
    check_series(s16, tmp_path, "int16")
    c = tmp_path / "frac"
    write_series(c, dtype=np.int16, slope=0.5, inter=3.25)
    check_series(c, tmp_path, "float32")


def test_missing_slice(tmp_path):
    folder = tmp_path / "gap"
    uid, _, _ = write_series(folder, n=8, skip=(4,))
    fails(["info", folder], "missing slice", uid)


def test_uneven_spacing_and_duplicates(tmp_path):
    folder = tmp_path / "uneven"
    uid, _, _ = write_series(folder, n=6)
    f = sorted(folder.iterdir())[0]
    ds = pydicom.dcmread(f)
    ds.ImagePositionPatient[2] = str(float(ds.ImagePositionPatient[2]) + 0.4)
    ds.save_as(f)
    fails(["info", folder], uid)
    dup = tmp_path / "dup"
    uid2, _, _ = write_series(dup, n=4)
    g = sorted(dup.iterdir())
    ds = pydicom.dcmread(g[0])
    ds.ImagePositionPatient = pydicom.dcmread(g[1]).ImagePositionPatient
    ds.save_as(g[0])
    fails(["info", dup], uid2, "one position")


def test_mixed_orientation_and_size(tmp_path):
    folder = tmp_path / "mixed"
    uid, _, _ = write_series(folder, n=5)
    f = sorted(folder.iterdir())[2]
    ds = pydicom.dcmread(f)
    ds.ImageOrientationPatient = [f"{v:.10f}" for v in oblique_iop()]
    ds.save_as(f)
    fails(["info", folder], uid, "mixed orientations")
    size = tmp_path / "size"
    uid, _, _ = write_series(size, n=5, seed=3)
    f = sorted(size.iterdir())[1]
    ds = pydicom.dcmread(f)
    ds.Rows = 3
    ds.PixelData = ds.PixelData[: 3 * 7 * 2]
    ds.save_as(f)
    fails(["info", size], uid, "different sizes")


def test_two_series_and_stray_files(tmp_path):
    folder = tmp_path / "two"
    u1, v1, _ = write_series(folder / "a", n=5, desc="first", seed=1)
    u2, v2, _ = write_series(folder / "b" / "deeper", n=4, desc="second", seed=2, modality="MR")
    (folder / "notes.txt").write_text("not DICOM\n")
    shutil.copy(pydicom_files() / "dicomdirtests" / "DICOMDIR", folder / "DICOMDIR")
    line = fails(["info", folder], "2 DICOM series", u1, u2, "first", "second", "MR")
    assert "5 slices" in line and "4 slices" in line
    listed = json.loads(vol("list", folder).stdout)
    assert {(s["uid"], s["slices"], s["modality"]) for s in listed} == {(u1, 5, "CT"), (u2, 4, "MR")}
    np.testing.assert_array_equal(read(folder, tmp_path, u1)[0], v1)
    np.testing.assert_array_equal(read(folder, tmp_path, u2)[0], v2)
    fails(["info", folder, "--series", "1.2.3"], "no series 1.2.3", u1)
    files = [str(p) for p in sorted((folder / "a").iterdir())]
    out = tmp_path / "f.npy"
    vol("files", out, "-", *files)
    np.testing.assert_array_equal(np.load(out)[0], v1)
    fails(["files", out, "-", *files, folder / "notes.txt"], "notes.txt", "not a DICOM file")


@pytest.mark.parametrize("syntax", [RLELossless, JPEGLSLossless, JPEG2000Lossless])
def test_compressed_series(tmp_path, syntax):
    folder = tmp_path / "c"
    # OpenJPEG's encoder wants sides of at least 32 (5 resolution levels)
    uid, v, _ = write_series(folder, n=5, rows=40, cols=36, syntax=syntax, dtype=np.uint16, bits=12)
    # SimpleITK's GDCM refuses pydicom's RLE; positions are the uncompressed path's anyway
    got, arr = check_series(folder, tmp_path, "uint16", with_sitk=False)
    np.testing.assert_array_equal(arr[0], v)
    assert vol("regions", folder, 30, 5).returncode == 0


def test_random_boxes_equal_the_whole_read(tmp_path):
    folder = tmp_path / "boxes"
    write_series(folder, n=12, rows=13, cols=11, iop=oblique_iop())
    assert "match the whole read" in vol("regions", folder, 80, 9).stdout


# Series of over a million voxels are read by several threads, a range of
# slices each (two on CI's two cores): the same values as one thread gives.
@pytest.mark.parametrize("kind", ["hu12", "uint16-float", "frac", "rle"])
def test_series_read_by_threads_equals_pydicom(tmp_path, kind):
    folder = tmp_path / kind
    kw = {"hu12": dict(dtype=np.int16, slope=1, inter=-1024, bits=12),
          "uint16-float": dict(dtype=np.uint16, slope=1, inter=-1024),
          "frac": dict(dtype=np.int16, slope=0.5, inter=3.25),
          "rle": dict(dtype=np.uint16, bits=12, syntax=RLELossless)}[kind]
    uid, v, _ = write_series(folder, n=20, rows=256, cols=232, iop=oblique_iop(), **kw)
    want = {"hu12": "int16", "uint16-float": "float32", "frac": "float32", "rle": "uint16"}[kind]
    got, arr = check_series(folder, tmp_path, want, with_sitk=False)
    assert arr.shape == (1, 20, 256, 232)
    if kind == "rle":
        np.testing.assert_array_equal(arr[0], v)
    # Boxes, large (threaded) and small, read what the whole read gives.
    assert "match the whole read" in vol("regions", folder, 12, 3).stdout
    whole = read(folder, tmp_path)
    np.testing.assert_array_equal(read(folder, tmp_path, box=[2, 5, 7, 16, 200, 201])[0],
                                  whole[0][2:18, 5:205, 7:208])


def test_a_threaded_read_names_the_file_it_fails_on(tmp_path):
    folder = tmp_path / "bad"
    write_series(folder, n=16, rows=260, cols=256, dtype=np.uint16, bits=12, syntax=RLELossless, names="plain")
    # One file's RLE segment offsets past its fragment: GDCM's decoder
    # refuses it in its child, in whichever thread reads that slice.
    victim = sorted(folder.iterdir())[9]
    ds = pydicom.dcmread(victim)
    frag = bytearray(ds.PixelData)
    # The Basic Offset Table item is empty (8 bytes), then the fragment's
    # item header (8 bytes), then the RLE header: a count and 15 offsets.
    frag[16:20] = (200).to_bytes(4, "little")
    frag[24:28] = (0x7FFFFFF0).to_bytes(4, "little")
    ds.PixelData = bytes(frag)
    ds.save_as(victim, enforce_file_format=True)
    p = vol("read", folder, tmp_path / "x.npy", check=2)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and victim.name in lines[0], p.stderr
    assert not (tmp_path / "x.npy").exists()


def enhanced_ct(path, n=5, rows=8, cols=6, shuffle=True, seed=0):
    """An enhanced CT (multi-frame, functional groups) with frames stored
    out of position order and a per-frame rescale; returns the expected
    volume in position order and the geometry's pieces."""
    rng = np.random.default_rng(seed)
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.2.1"
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = meta.MediaStorageSOPClassUID
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.SeriesInstanceUID = generate_uid()
    ds.Modality = "CT"
    ds.Rows, ds.Columns = rows, cols
    ds.NumberOfFrames = n
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.BitsAllocated = 16
    ds.BitsStored = 12
    ds.HighBit = 11
    ds.PixelRepresentation = 1
    iop = oblique_iop()
    normal = np.cross(iop[:3], iop[3:])
    shared = Dataset()
    pm = Dataset()
    pm.PixelSpacing = ["0.8", "0.6"]
    pm.SliceThickness = "3"
    shared.PixelMeasuresSequence = [pm]
    po = Dataset()
    po.ImageOrientationPatient = [f"{v:.10f}" for v in iop]
    shared.PlaneOrientationSequence = [po]
    ds.SharedFunctionalGroupsSequence = [shared]
    order = list(rng.permutation(n)) if shuffle else list(range(n))
    frames = rng.integers(-500, 1500, size=(n, rows, cols)).astype(np.int16)
    per = []
    want = np.zeros((n, rows, cols), np.float64)
    for f, k in enumerate(order):
        g = Dataset()
        pp = Dataset()
        pp.ImagePositionPatient = [f"{v:.6f}" for v in np.array([5.0, -7.0, 11.0]) + k * 1.5 * normal]
        g.PlanePositionSequence = [pp]
        pv = Dataset()
        pv.RescaleSlope = "2"
        pv.RescaleIntercept = str(-1000 + k)
        g.PixelValueTransformationSequence = [pv]
        per.append(g)
        want[k] = frames[f] * 2.0 + (-1000 + k)
    ds.PerFrameFunctionalGroupsSequence = per
    ds.PixelData = frames.tobytes()
    ds.save_as(path, enforce_file_format=True)
    return want, iop, normal


def test_enhanced_multiframe(tmp_path):
    folder = tmp_path / "enh"
    folder.mkdir()
    want, iop, normal = enhanced_ct(folder / "enhanced.dcm")
    got = info(folder)
    arr = read(folder, tmp_path)
    assert got["dtype"] == "int16"  # whole slopes and intercepts, 12 bits: within int16
    np.testing.assert_array_equal(arr[0], want)
    assert got["spacing"] == pytest.approx([1.5, 0.8, 0.6])
    np.testing.assert_allclose(got["origin"], [5.0, -7.0, 11.0], atol=1e-5)
    np.testing.assert_allclose(np.array(got["direction"])[:, 2], normal, atol=1e-6)
    assert "match the whole read" in vol("regions", folder / "enhanced.dcm", 20, 4).stdout


# Bundled files: (name, lossy): every transfer syntax the wheel covers.
BUNDLED = [("CT_small.dcm", False), ("MR_small.dcm", False), ("MR_small_implicit.dcm", False),
           ("MR_small_bigendian.dcm", False), ("MR_small_expb.dcm", False), ("MR_small_RLE.dcm", False),
           ("MR_small_jp2klossless.dcm", False), ("MR_small_jpeg_ls_lossless.dcm", False),
           ("MR_small_padded.dcm", False), ("JPEG2000.dcm", False), ("693_J2KI.dcm", False),
           ("JPEGLSNearLossless_16.dcm", False), ("JPEGLSNearLossless_08.dcm", False), ("JPGExtended.dcm", True),
           ("SC_rgb_jpeg_gdcm.dcm", False), ("SC_rgb_rle.dcm", False), ("SC_rgb_rle_2frame.dcm", False),
           ("SC_rgb_small_odd.dcm", False), ("SC_rgb_dcmtk_+eb+cr.dcm", True), ("SC_rgb_jpeg_dcmtk.dcm", True),
           ("SC_rgb_gdcm_KY.dcm", False), ("image_dfl.dcm", False), ("rtdose.dcm", False), ("rtdose_rle.dcm", False),
           ("SC_rgb_rle_16bit.dcm", None), ("examples_palette.dcm", None)]


@pytest.mark.parametrize("name,lossy", BUNDLED)
def test_bundled_file(tmp_path, name, lossy):
    from pydicom.pixels import apply_modality_lut
    path = pydicom_files() / name
    ds = pydicom.dcmread(path)
    if lossy is None:  # refused by design: 16-bit colour, palettes
        fails(["info", path], name)
        return
    got = info(path)
    arr = read(path, tmp_path)
    px = ds.pixel_array
    frames = int(getattr(ds, "NumberOfFrames", 1) or 1)
    spp = int(ds.SamplesPerPixel)
    if frames == 1:
        px = px[None]
    if spp == 1:
        px = apply_modality_lut(px, ds) if "RescaleSlope" in ds else px
        want = px[None]
    else:
        want = np.moveaxis(px, -1, 0)
    if name.startswith("rtdose"):  # frames in GridFrameOffsetVector order (increasing here)
        assert list(ds.GridFrameOffsetVector) == sorted(ds.GridFrameOffsetVector)
    assert arr.shape == want.shape
    diff = np.abs(arr.astype(np.float64) - want.astype(np.float64))
    assert diff.max() <= (8 if lossy else 1e-4), f"{name}: max difference {diff.max()}"
    if "ImagePositionPatient" in ds and frames == 1:
        # one slice: in-plane spacing, origin and direction as SimpleITK; the
        # depth spacing is segrt's rule (SpacingBetweenSlices, SliceThickness, 1)
        sp, org, dirs = geometry_of_sitk(sitk.ReadImage(str(path)))
        assert_geometry(got, [got["spacing"][0], *sp[1:]], org, dirs)
    assert got["known"] == int("ImagePositionPatient" in ds and "ImageOrientationPatient" in ds)


def test_bundled_series_folders(tmp_path):
    base = pydicom_files() / "dicomdirtests"
    # 5 CT slices of one series: contiguous; their folder also holds a
    # DICOMDIR-free second series, so choose it
    ct = base / "98892001" / "CT5N"
    got, arr = check_series(ct, tmp_path, "float32")  # 16 stored bits less 1024: float32 by the rule
    assert got["depth"] == 5
    # 4 slices picked from a longer series: a gap, named
    fails(["info", base / "77654033" / "CT2"], "missing slice")
    # the whole tree holds a DICOMDIR with a wrong meta group length: named
    fails(["list", base], "DICOMDIR-nooffset", "malformed")
    # without it: the other DICOMDIRs and READMEs skipped, the series listed
    tree = tmp_path / "tree"
    shutil.copytree(base, tree, ignore=shutil.ignore_patterns("DICOMDIR-nooffset"))
    listed = json.loads(vol("list", tree).stdout)
    assert len(listed) >= 6 and all(s["slices"] >= 1 for s in listed)
    fails(["info", tree], "DICOM series; choose one")
    one = next(s for s in listed if s["slices"] == 5)
    assert info(tree, one["uid"])["depth"] == 5


def test_nifti_from_dicom_has_simpleitks_affine(tmp_path):
    folder = tmp_path / "s"
    write_series(folder, n=6, iop=oblique_iop(), step=2.0, spacing=(0.75, 0.5))
    img = sitk_series(folder)
    d = np.array(img.GetDirection()).reshape(3, 3)
    lps = np.eye(4)
    lps[:3, :3] = d * np.array(img.GetSpacing())
    lps[:3, 3] = img.GetOrigin()
    want = np.diag([-1.0, -1, 1, 1]) @ lps  # dcm2niix's and SimpleITK's NIfTI affine
    g = info(folder)
    labels = np.zeros((g["depth"], g["height"], g["width"]), np.uint8)
    labels[2, 3, 4] = 5
    np.save(tmp_path / "l.npy", labels)
    out = tmp_path / "labels.nii.gz"
    vol("save", tmp_path / "l.npy", out, folder)
    back = nib.load(str(out))
    np.testing.assert_allclose(back.affine, want, atol=1e-4)
    np.testing.assert_allclose(back.get_qform(), want, atol=1e-4)
    assert (int(back.header["qform_code"]), int(back.header["sform_code"])) == (1, 1)
    # the labelled voxel lies where SimpleITK puts index (4, 3, 2)
    ras = back.affine @ np.array([4, 3, 2, 1.0])
    lps_pt = np.array(img.TransformIndexToPhysicalPoint((4, 3, 2)))
    np.testing.assert_allclose(ras[:3] * [-1, -1, 1], lps_pt, atol=1e-4)
    assert np.asanyarray(back.dataobj)[4, 3, 2] == 5
    back_sitk = sitk.ReadImage(str(out))
    assert_geometry(info(out), *geometry_of_sitk(back_sitk))
    assert_geometry(info(out), *geometry_of_sitk(img))


def test_bad_files(tmp_path):
    folder = tmp_path / "t"
    write_series(folder, n=3)
    f = sorted(folder.iterdir())[0]
    raw = f.read_bytes()
    f.write_bytes(raw[: len(raw) - 50])  # truncated pixel data
    fails(["info", folder], f.name)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "a.txt").write_text("hello")
    fails(["info", empty], "no DICOM image")
    trunc = pydicom_files() / "MR_truncated.dcm"
    fails(["info", trunc], "MR_truncated.dcm")


def test_fuzz_regressions_are_refused_by_name():
    """The files fuzz_volume found GDCM asserting on or allocating
    gigabytes for (tests/fuzz/regressions/volume): reading each is refused
    in one line naming it, and nothing crashes."""
    regressions = pathlib.Path(__file__).resolve().parents[1] / "fuzz" / "regressions" / "volume"
    files = sorted(regressions.iterdir())
    assert files
    for f in files:
        # The header may be sound (then info answers); reading the pixels is refused.
        p = vol("info", f, check=None)
        assert p.returncode == 0 or (p.returncode == 2 and f.name in p.stderr and
                                     len(p.stderr.strip().splitlines()) == 1), p
        p = vol("load", f, "/dev/null", check=None)
        assert p.returncode == 2 and f.name in p.stderr and len(p.stderr.strip().splitlines()) == 1, p
