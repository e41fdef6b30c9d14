"""DICOM SEG output (segrt_dicom_seg_save, `segrt run ... -o LABELS.dcm`) and
DICOM series with missing slices or uneven spacing (allow_uneven,
--allow-uneven).

The SEG is read back with highdicom (the oracle: its reader checks the
Segmentation IOD's structure and reassembles frames per source instance) and
pydicom: segments and their labels, the labels voxel for voxel per source
slice, the frames' references and positions against the source files, the
study, patient and frame of reference copied. Resampling is checked against
numpy's linear interpolation along the slice positions."""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

from conftest import HAVE_DICOM, HAVE_NIFTI, ROOT, fails, vol

if not HAVE_DICOM:
    pytest.skip("a build without DICOM (test_volume_builds.py checks it refuses)", allow_module_level=True)
pydicom = pytest.importorskip("pydicom")
hd = pytest.importorskip("highdicom")

from dicom_synth import slice_ds, write_series  # noqa: E402

SEGRT = os.environ.get("SEGRT", str(ROOT / "build" / "segrt"))
MODELS = pathlib.Path(os.environ.get("SEGRT_MODELS") or ROOT / "build" / "test-models")
MODEL = MODELS / "unet3d_spleen.onnx"

ATTRS = dict(FrameOfReferenceUID="1.2.826.0.1.3680043.8.498.77", PatientName="Doe^Jane", PatientID="P-042",
             PatientBirthDate="19700102", PatientSex="F", StudyDate="20240305", StudyTime="101112",
             StudyID="ST7", AccessionNumber="ACC9", ReferringPhysicianName="Who^Doctor")


def sources(folder):
    """The series' files as pydicom data sets, in position order along the normal."""
    dss = [pydicom.dcmread(p) for p in sorted(pathlib.Path(folder).iterdir())]
    normal = np.cross(np.array(dss[0].ImageOrientationPatient[:3], float),
                      np.array(dss[0].ImageOrientationPatient[3:], float))
    return sorted(dss, key=lambda d: float(np.dot(np.array(d.ImagePositionPatient, float), normal)))


def seg_pixels(seg, uids, moved=False):
    """highdicom's reassembly: one plane per source instance, the segment
    numbers of its voxels (0 where none). moved: some frames say their
    spatial locations are not preserved (a resampled series)."""
    return np.asarray(seg.get_pixels_by_source_instance(
        source_sop_instance_uids=uids, combine_segments=True, assert_missing_frames_are_empty=True,
        ignore_spatial_locations=moved))


def check_seg(path, src, labels, names, moved=False):
    """The SEG at path against the source slices src (position order) and
    the labels (D x H x W on those slices)."""
    ds = pydicom.dcmread(path)
    assert ds.SOPClassUID == "1.2.840.10008.5.1.4.1.1.66.4" and ds.Modality == "SEG"
    assert ds.SegmentationType == "BINARY" and ds.BitsAllocated == 1 and ds.SegmentsOverlap == "NO"
    s0 = src[0]
    for k in ATTRS:
        assert str(ds[k].value) == str(s0[k].value), k
    assert ds.StudyInstanceUID == s0.StudyInstanceUID
    assert ds.SeriesInstanceUID != s0.SeriesInstanceUID and ds.SOPInstanceUID.startswith("2.25.")
    ref = ds.ReferencedSeriesSequence[0]
    assert ref.SeriesInstanceUID == s0.SeriesInstanceUID
    assert {i.ReferencedSOPInstanceUID for i in ref.ReferencedInstanceSequence} == {d.SOPInstanceUID for d in src}
    shared = ds.SharedFunctionalGroupsSequence[0]
    np.testing.assert_allclose(shared.PlaneOrientationSequence[0].ImageOrientationPatient,
                               s0.ImageOrientationPatient, atol=1e-6)
    pm = shared.PixelMeasuresSequence[0]
    np.testing.assert_allclose(pm.PixelSpacing, s0.PixelSpacing, rtol=1e-6)
    assert float(pm.SliceThickness) == float(s0.SliceThickness)  # the source's nominal thickness, copied
    # Every frame at the position of the slice it references.
    by_uid = {d.SOPInstanceUID: d for d in src}
    for fg in ds.PerFrameFunctionalGroupsSequence:
        si = fg.DerivationImageSequence[0].SourceImageSequence[0]
        assert si.PurposeOfReferenceCodeSequence[0].CodeValue == "121322"
        assert si.SpatialLocationsPreserved == ("NO" if moved else "YES") or moved
        assert si.ReferencedSOPClassUID == by_uid[si.ReferencedSOPInstanceUID].SOPClassUID
        np.testing.assert_allclose(fg.PlanePositionSequence[0].ImagePositionPatient,
                                   by_uid[si.ReferencedSOPInstanceUID].ImagePositionPatient, atol=1e-4)
        assert fg.FrameContentSequence[0].DimensionIndexValues[0] == \
            fg.SegmentIdentificationSequence[0].ReferencedSegmentNumber
    # Segments: one per value > 0 that occurs, numbered from 1 in order.
    seg = hd.seg.segread(path)
    values = [int(v) for v in np.unique(labels) if v > 0]
    assert seg.number_of_segments == len(values)
    want_names = [names[v] if v < len(names) and names[v] else f"Segment {v}" for v in values]
    for n, (v, name) in enumerate(zip(values, want_names), 1):
        d = seg.get_segment_description(n)
        assert d.segment_label == name and d.algorithm_type.value == "AUTOMATIC"
        assert d.SegmentAlgorithmName == "segrt" and d.algorithm_identification.name == "segrt"
    # The labels, voxel for voxel per source slice (segment numbers mapped back to values).
    got = seg_pixels(seg, [d.SOPInstanceUID for d in src], moved)
    lut = np.zeros(len(values) + 1, np.int64)
    lut[1:] = values
    assert got.shape == labels.shape
    np.testing.assert_array_equal(lut[got], labels)
    return ds, seg


def known_labels(shape, seed):
    """Classes 1, 3 and 4 (2 never occurs), some slices without any."""
    rng = np.random.default_rng(seed)
    lab = np.zeros(shape, np.uint8)
    D, H, W = shape
    lab[1:D - 1, 1:H - 1, 1:W // 2] = 1
    lab[2, H // 2:, W // 2:] = 3
    lab[D - 2] = np.where(rng.random((H, W)) < 0.3, 4, lab[D - 2])
    lab[0] = 0
    return lab


@pytest.mark.parametrize("kind", ["axial-shuffled", "oblique-reversed"])
def test_seg_references_the_series_and_holds_the_labels(tmp_path, kind):
    folder = tmp_path / "series"
    iop = None if kind.startswith("axial") else [0.96, 0.28, 0.0, -0.28, 0.96, 0.0]
    order = "shuffled" if kind.endswith("shuffled") else "reversed"
    write_series(folder, n=7, rows=9, cols=7, iop=iop, order=order, attrs=ATTRS)
    lab = known_labels((7, 9, 7), 3)
    np.save(tmp_path / "labels.npy", lab)
    names = ["background", "liver", "", "kidney"]
    vol("seg", folder, tmp_path / "labels.npy", tmp_path / "seg.dcm", *names)
    ds, seg = check_seg(tmp_path / "seg.dcm", sources(folder), lab, names)
    # 9 x 7 bits a frame: frames are packed without padding between them.
    assert len(ds.PixelData) == ((int(ds.NumberOfFrames) * 63 + 7) // 8 + 1) // 2 * 2
    assert [str(d.segment_label) for d in seg.SegmentSequence] == ["liver", "kidney", "Segment 4"]
    # segrt reads its own labels' series back unchanged, and leaves no temporary file.
    assert sorted(os.listdir(tmp_path)) == ["labels.npy", "seg.dcm", "series"]


def test_seg_refusals(tmp_path):
    folder = tmp_path / "series"
    write_series(folder, n=4, rows=6, cols=5, attrs=ATTRS)
    np.save(tmp_path / "empty.npy", np.zeros((4, 6, 5), np.uint8))
    fails(["seg", folder, tmp_path / "empty.npy", tmp_path / "a.dcm"], "no voxel above 0", "a.dcm")
    np.save(tmp_path / "shape.npy", np.ones((3, 6, 5), np.uint8))
    fails(["seg", folder, tmp_path / "shape.npy", tmp_path / "b.dcm"], "4 x 6 x 5")
    np.save(tmp_path / "float.npy", np.ones((4, 6, 5), np.float32))
    fails(["seg", folder, tmp_path / "float.npy", tmp_path / "c.dcm"], "integers")
    np.save(tmp_path / "neg.npy", -np.ones((4, 6, 5), np.int16))
    fails(["seg", folder, tmp_path / "neg.npy", tmp_path / "d.dcm"], "label -1")
    np.save(tmp_path / "ok.npy", np.ones((4, 6, 5), np.uint8))
    fails(["seg", folder, tmp_path / "ok.npy", tmp_path / "e.nii"], ".dcm")
    if HAVE_NIFTI:
        nib = pytest.importorskip("nibabel")
        nib.save(nib.Nifti1Image(np.zeros((5, 6, 4), np.int16), np.eye(4)), tmp_path / "ct.nii")
        fails(["seg", tmp_path / "ct.nii", tmp_path / "ok.npy", tmp_path / "f.dcm"], "not one")
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".dcm") or "segrt-" in p]


def test_single_frame_sources_are_referenced_without_a_frame_number(tmp_path):
    folder = tmp_path / "series"
    write_series(folder, n=3, rows=4, cols=4, attrs=ATTRS)
    lab = np.zeros((3, 4, 4), np.uint8)
    lab[1, 1:3, 1:3] = 1
    np.save(tmp_path / "l.npy", lab)
    vol("seg", folder, tmp_path / "l.npy", tmp_path / "s.dcm")
    ds = pydicom.dcmread(tmp_path / "s.dcm")
    src = ds.PerFrameFunctionalGroupsSequence[0].DerivationImageSequence[0].SourceImageSequence[0]
    assert "ReferencedFrameNumber" not in src and int(ds.NumberOfFrames) == 1


def test_multiframe_source_is_referenced_frame_by_frame(tmp_path):
    """An enhanced CT (one file, frames out of position order): each SEG
    frame references its source frame by ReferencedFrameNumber, and
    highdicom reassembles the labels by source frame."""
    from test_dicom import enhanced_ct
    folder = tmp_path / "enh"
    folder.mkdir()
    enhanced_ct(folder / "enhanced.dcm", n=6, rows=8, cols=6)
    src = pydicom.dcmread(folder / "enhanced.dcm")
    normal = np.cross(*np.array(src.SharedFunctionalGroupsSequence[0].PlaneOrientationSequence[0]
                                .ImageOrientationPatient, float).reshape(2, 3))
    pos = [np.array(g.PlanePositionSequence[0].ImagePositionPatient, float) for g in
           src.PerFrameFunctionalGroupsSequence]
    order = np.argsort([p @ normal for p in pos])  # file frame of each slice, in position order
    lab = known_labels((6, 8, 6), 5)
    np.save(tmp_path / "l.npy", lab)
    vol("seg", folder, tmp_path / "l.npy", tmp_path / "s.dcm", "bg", "one")
    ds = pydicom.dcmread(tmp_path / "s.dcm")
    assert "FrameOfReferenceUID" not in ds  # the source has none: none is made up
    for fg in ds.PerFrameFunctionalGroupsSequence:
        si = fg.DerivationImageSequence[0].SourceImageSequence[0]
        assert si.ReferencedSOPInstanceUID == src.SOPInstanceUID
        np.testing.assert_allclose(fg.PlanePositionSequence[0].ImagePositionPatient,
                                   pos[int(si.ReferencedFrameNumber) - 1], atol=1e-4)
    seg = hd.seg.segread(tmp_path / "s.dcm")
    values = [int(v) for v in np.unique(lab) if v > 0]
    got = np.asarray(seg.get_pixels_by_source_frame(
        source_sop_instance_uid=src.SOPInstanceUID, source_frame_numbers=[int(f) + 1 for f in order],
        combine_segments=True, assert_missing_frames_are_empty=True))
    lut = np.array([0] + values)
    np.testing.assert_array_equal(lut[got], lab)


# --- the command line ---------------------------------------------------------


def run(*args, check=0):
    p = subprocess.run([SEGRT, "run", str(MODEL), *map(str, args)], capture_output=True, text=True, timeout=600)
    if check is not None:
        assert p.returncode == check, p.stderr + p.stdout
    return p


@pytest.mark.skipif(not HAVE_NIFTI, reason="compared with the NIfTI output")
def test_cli_writes_a_seg_equal_to_its_nifti_labels(tmp_path):
    nib = pytest.importorskip("nibabel")
    folder = tmp_path / "series"
    iop = [0.96, 0.28, 0.0, -0.28, 0.96, 0.0]
    write_series(folder, n=18, rows=22, cols=20, spacing=(0.7, 0.9), step=2.0, iop=iop, order="shuffled",
                 attrs=ATTRS)
    common = ["--roi", "16,16,16", "--overlap", "0.25"]
    run(folder, "-o", tmp_path / "labels.nii.gz", "--output", "labels", *common)
    run(folder, "-o", tmp_path / "labels.dcm", *common)
    want = np.asarray(nib.load(tmp_path / "labels.nii.gz").dataobj).transpose(2, 1, 0)  # D, H, W
    assert want.max() > 0
    check_seg(tmp_path / "labels.dcm", sources(folder), want, [])
    # Refused before anything runs: a SEG over a non-DICOM input, or of probabilities.
    np.save(tmp_path / "img.npy", np.zeros((1, 1, 16, 16, 16), np.float32))
    p = run(tmp_path / "img.npy", "-o", tmp_path / "x.dcm", *common, check=2)
    assert "not one" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    p = run(folder, "-o", tmp_path / "y.dcm", "--output", "probs", *common, check=2)
    assert "label map" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "x.dcm").exists() and not (tmp_path / "y.dcm").exists()


# --- missing slices and uneven spacing -----------------------------------------


def uneven_series(folder, projections, rows=6, cols=5, seed=4, iop=None):
    """Slices at the given offsets along the normal (shuffled); returns the
    volume in position order and the offsets sorted."""
    rng = np.random.default_rng(seed)
    iop = iop or [1, 0, 0, 0, 1, 0]
    normal = np.cross(iop[:3], iop[3:])
    origin = np.array([-10.0, 20.0, 5.0])
    uid = pydicom.uid.generate_uid()
    os.makedirs(folder, exist_ok=True)
    v = rng.integers(-1000, 2000, size=(len(projections), rows, cols)).astype(np.int16)
    for w, k in enumerate(rng.permutation(len(projections))):
        ds = slice_ds(v[k], iop, origin + projections[k] * normal, (0.8, 0.6), uid, slope=1.0, inter=-1024.0,
                      number=w + 1, attrs=ATTRS)
        ds.save_as(os.path.join(folder, f"{rng.integers(1 << 30):010d}.dcm"), enforce_file_format=True)
    return v.astype(np.float64) - 1024.0, np.asarray(projections, float), origin


def numpy_resampled(v, proj):
    """numpy's linear interpolation along the slice positions onto the even
    grid: the median step, from the first slice to the last."""
    step = float(np.median(np.diff(proj)))
    n = int(np.floor((proj[-1] - proj[0]) / step + 0.5)) + 1
    grid = proj[0] + step * np.arange(n)
    flat = v.reshape(len(proj), -1)
    out = np.stack([np.interp(grid, proj, flat[:, i]) for i in range(flat.shape[1])], axis=1)
    return out.reshape((n,) + v.shape[1:]), step, grid


@pytest.mark.parametrize("case", ["missing", "uneven", "oblique-uneven"])
def test_allow_uneven_resamples_as_numpy_interpolates(tmp_path, case):
    proj = {"missing": [0, 2.5, 5, 10, 12.5, 15, 17.5, 25],
            "uneven": [0, 2.5, 5, 8.1, 10.5, 13, 15.5],
            "oblique-uneven": [0, 1.5, 3.2, 4.5, 6, 7.4, 9]}[case]
    iop = [0.96, 0.28, 0.0, -0.28, 0.96, 0.0] if case.startswith("oblique") else None
    folder = tmp_path / "s"
    v, p, origin = uneven_series(folder, proj, iop=iop)
    fails(["info", folder], "--allow-uneven")
    want, step, _ = numpy_resampled(v, p)
    r = vol("info", folder, "--allow-uneven")
    got = json.loads(r.stdout)
    assert "resampled from %d slices to %d" % (len(p), len(want)) in r.stderr, r.stderr
    assert got["depth"] == len(want) and got["dtype"] == "float32"
    np.testing.assert_allclose(got["spacing"][0], step, rtol=1e-9)
    np.testing.assert_allclose(got["origin"], origin + p[0] * np.cross((iop or [1, 0, 0, 0, 1, 0])[:3],
                                                                       (iop or [1, 0, 0, 0, 1, 0])[3:]), atol=1e-5)
    out = tmp_path / "r.npy"
    vol("read", folder, out, "--allow-uneven")
    np.testing.assert_allclose(np.load(out)[0], want, rtol=1e-6, atol=1e-3)
    # A box reads what the whole read gives.
    vol("read", folder, tmp_path / "b.npy", "--allow-uneven", "--box", 1, 1, 1, len(want) - 2, 3, 3)
    np.testing.assert_array_equal(np.load(tmp_path / "b.npy")[0], np.load(out)[0][1:-1, 1:4, 1:4])


def test_allow_uneven_keeps_other_refusals(tmp_path):
    # Two slices at one position stay refused.
    folder = tmp_path / "dup"
    uneven_series(folder, [0, 2.5, 2.5, 5, 10])
    fails(["info", folder, "--allow-uneven"], "two slices at one position")


def test_seg_of_a_resampled_series_references_its_own_slices(tmp_path):
    folder = tmp_path / "s"
    v, p, _ = uneven_series(folder, [0, 2.5, 5, 10, 12.5, 15.5, 17.5])
    _, step, grid = numpy_resampled(v, p)
    rng = np.random.default_rng(9)
    lab = (rng.random((len(grid), 6, 5)) < 0.4).astype(np.uint8) * rng.integers(1, 3, size=(len(grid), 6, 5))
    lab = lab.astype(np.uint8)
    np.save(tmp_path / "l.npy", lab)
    fails(["seg", folder, tmp_path / "l.npy", tmp_path / "x.dcm"], "--allow-uneven")
    vol("seg", folder, tmp_path / "l.npy", tmp_path / "s.dcm", "--allow-uneven")
    # Each source slice carries the labels of the grid slice nearest to it.
    nearest = np.floor((p - p[0]) / step + 0.5).astype(int)
    ds, _ = check_seg(tmp_path / "s.dcm", sources(folder), lab[nearest], [], moved=True)
    # YES exactly on the slices the grid passes through (0, 2.5, 5, 10, 12.5, 17.5), NO at 15.5.
    flags = {}
    for fg in ds.PerFrameFunctionalGroupsSequence:
        si = fg.DerivationImageSequence[0].SourceImageSequence[0]
        flags[round(float(fg.PlanePositionSequence[0].ImagePositionPatient[2]) - 5.0, 3)] = \
            si.SpatialLocationsPreserved
    assert flags == {z: ("NO" if z == 15.5 else "YES") for z in flags} and 15.5 in flags


@pytest.mark.skipif(not HAVE_NIFTI, reason="the labels are compared as NIfTI")
def test_cli_allow_uneven_warns_and_writes_the_grid(tmp_path):
    nib = pytest.importorskip("nibabel")
    folder = tmp_path / "s"
    write_series(folder, n=12, rows=20, cols=18, step=2.0, skip=(4, 5), attrs=ATTRS)
    common = ["--roi", "16,16,16", "--output", "labels"]
    p = run(folder, "-o", tmp_path / "a.nii.gz", *common, check=2)
    assert "missing slice" in p.stderr and "--allow-uneven" in p.stderr, p.stderr
    p = run(folder, "-o", tmp_path / "a.nii.gz", "--allow-uneven", *common)
    assert "resampled from 10 slices to 12" in p.stderr, p.stderr
    img = nib.load(tmp_path / "a.nii.gz")
    assert img.shape == (18, 20, 12)
    np.testing.assert_allclose(img.header.get_zooms(), (0.9, 0.7, 2.0), rtol=1e-6)
    p = run(folder, "-o", tmp_path / "a.dcm", "--allow-uneven", *common[:2])
    want = np.asarray(img.dataobj).transpose(2, 1, 0)
    src = sources(folder)
    assert want.max() > 0
    check_seg(tmp_path / "a.dcm", src, want[[0, 1, 2, 3, 6, 7, 8, 9, 10, 11]], [], moved=True)


def test_fuzz_regressions_still_refused(tmp_path):
    regress = ROOT / "tests" / "fuzz" / "regressions" / "volume"
    for f in sorted(regress.iterdir()):
        for more in ([], ["--allow-uneven"]):
            p = vol("read", f, tmp_path / "x.npy", *more, check=None)
            assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, (f, p.returncode, p.stderr)
