"""segrt.save_dicom_seg, read_volume(allow_uneven=True) and run_volume(out=
"....dcm"): the Python side of DICOM SEG output and of resampling uneven
series, against highdicom's reading and the C driver's (tests/volume)."""
import pathlib
import sys

import numpy as np
import pytest

import segrt
from conftest import run_segrt

pydicom = pytest.importorskip("pydicom")
hd = pytest.importorskip("highdicom")
VOLUME_TESTS = pathlib.Path(__file__).resolve().parents[1] / "volume"
sys.path.insert(0, str(VOLUME_TESTS))
try:
    from dicom_synth import write_series
finally:
    sys.path.pop(0)


def by_position(folder):
    dss = [pydicom.dcmread(p) for p in sorted(pathlib.Path(folder).iterdir())]
    return sorted(dss, key=lambda d: float(d.ImagePositionPatient[2]))


def seg_labels(path, uids):
    seg = hd.seg.segread(path)
    values = [int(seg.get_segment_description(n).SegmentDescription.split()[-1])
              for n in range(1, seg.number_of_segments + 1)]
    got = np.asarray(seg.get_pixels_by_source_instance(source_sop_instance_uids=uids, combine_segments=True,
                                                       assert_missing_frames_are_empty=True,
                                                       ignore_spatial_locations=True))
    return np.array([0] + values)[got], seg


def test_save_dicom_seg(tmp_path):
    folder = tmp_path / "series"
    write_series(folder, n=5, rows=8, cols=6, attrs={"FrameOfReferenceUID": "1.2.3.9"})
    vol, _ = segrt.read_volume(folder)
    labels = np.zeros(vol.shape, np.uint8)
    labels[1:4, 2:6, 1:4] = 2
    labels[3, 0, 0] = 5
    segrt.save_dicom_seg(tmp_path / "s.dcm", labels, folder, names=["bg", "a", "spleen"])
    got, seg = seg_labels(tmp_path / "s.dcm", [d.SOPInstanceUID for d in by_position(folder)])
    assert np.array_equal(got, labels)
    assert [seg.get_segment_description(n).segment_label for n in (1, 2)] == ["spleen", "Segment 5"]
    assert seg.FrameOfReferenceUID == "1.2.3.9"
    with pytest.raises(segrt.InvalidArgumentError, match="no voxel above 0"):
        segrt.save_dicom_seg(tmp_path / "e.dcm", np.zeros(vol.shape, np.uint8), folder)
    assert not (tmp_path / "e.dcm").exists()


def test_read_volume_allow_uneven(tmp_path):
    folder = tmp_path / "series"
    _, v, _ = write_series(folder, n=8, rows=6, cols=5, step=2.0, skip=(3,))
    with pytest.raises(segrt.Error, match="allow-uneven"):
        segrt.read_volume(folder)
    with pytest.warns(UserWarning, match="resampled from 7 slices to 8"):
        got, geo = segrt.read_volume(folder, allow_uneven=True)
    want = v.astype(np.float64)
    want[3] = (want[2] + want[4]) / 2
    assert got.dtype == np.float32 and np.allclose(got, want) and geo.spacing[0] == pytest.approx(2.0)


def test_run_volume_writes_a_seg(tmp_path, models):
    folder = tmp_path / "series"
    write_series(folder, n=16, rows=20, cols=18, step=2.0, attrs={"FrameOfReferenceUID": "1.2.3.9"})
    model = models / "unet3d_spleen.onnx"
    with segrt.Engine(model) as engine:
        labels, _ = segrt.run_volume(engine, folder, (16, 16, 16), overlap=0.25, sw_batch=1, progress=False,
                                     out=tmp_path / "py.dcm")
    assert labels.max() > 0
    got, _ = seg_labels(tmp_path / "py.dcm", [d.SOPInstanceUID for d in by_position(folder)])
    assert np.array_equal(got, np.asarray(labels)[0, 0])
    # The command line's SEG of the same run holds the same labels.
    run_segrt("run", model, folder, "-o", tmp_path / "cli.dcm", "--roi", "16,16,16", "--overlap", "0.25",
              "--blend", "gaussian")
    cli, _ = seg_labels(tmp_path / "cli.dcm", [d.SOPInstanceUID for d in by_position(folder)])
    assert np.array_equal(cli, got)
