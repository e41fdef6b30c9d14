"""segrt.run_cases: a folder of cases through segrt_cases_run from Python,
its results byte for byte the CLI's folder job's (`segrt run MODEL -i
IN_DIR -o OUT_DIR`, tests/volume/test_cases.py), its report naming a
broken case while the others run."""
import json

import numpy as np
import pytest

import segrt
from conftest import run_segrt

nib = pytest.importorskip("nibabel")


def write_cases(folder):
    rng = np.random.default_rng(2)
    folder.mkdir()
    for k, shape in enumerate([(20, 18, 10), (17, 21, 12)]):
        affine = np.diag([0.8, 0.9, 2.5, 1.0])
        affine[:3, 3] = (k, -k, 10 * k)
        nib.save(nib.Nifti1Image(rng.normal(0, 1, shape).astype(np.float32), affine), folder / f"c{k}.nii.gz")
    data = (folder / "c0.nii.gz").read_bytes()
    (folder / "broken.nii.gz").write_bytes(data[: len(data) // 2])


def test_run_cases_equals_the_cli_and_reports_the_broken_case(tmp_path, models):
    model = models / "unet3d_spleen.onnx"
    write_cases(tmp_path / "in")
    r = segrt.run_cases(model, tmp_path / "in", tmp_path / "py", roi=16, sw_batch=1, blend="constant")
    assert (r["cases"], r["done"], r["skipped"], r["failed"]) == (3, 2, 0, 1)
    assert r["failed_names"] == ["broken"] and "broken" in r["message"] and r["seconds"] > 0
    run_segrt("run", model, "-i", tmp_path / "in", "-o", tmp_path / "cli", "--roi", "16,16,16", check=1)
    for k in range(2):
        assert (tmp_path / "py" / f"c{k}.nii.gz").read_bytes() == (tmp_path / "cli" / f"c{k}.nii.gz").read_bytes()
    summary = json.loads((tmp_path / "py" / "summary.json").read_text())
    assert [c["status"] for c in summary["cases"]] == ["failed", "done", "done"]

    again = segrt.run_cases(model, tmp_path / "in", tmp_path / "py", roi=16, sw_batch=1, blend="constant",
                            skip_existing=True, prefetch=False)
    assert (again["done"], again["skipped"], again["failed"]) == (0, 2, 1)


def test_run_cases_refusals(tmp_path, models):
    model = models / "unet3d_spleen.onnx"
    (tmp_path / "empty").mkdir()
    with pytest.raises(segrt.InvalidArgumentError, match="no cases"):
        segrt.run_cases(model, tmp_path / "empty", tmp_path / "out", roi=16)
    with pytest.raises(segrt.FileError):
        segrt.run_cases(tmp_path / "missing.onnx", tmp_path / "empty", tmp_path / "out", roi=16)
    with pytest.raises(ValueError, match="blend"):
        segrt.run_cases(model, tmp_path / "empty", tmp_path / "out", roi=16, blend="nope")
    assert issubclass(segrt.CasesFailedError, segrt.Error) and segrt.CasesFailedError.status == 9
