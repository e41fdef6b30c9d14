"""Folders of whole slides (`segrt run MODEL -i IN_DIR -o OUT_DIR`,
src/pipeline/job_cases.c): each slide of the folder is a case named by its
file, its mask OUT_DIR/NAME.tif equal to the single-slide job's (itself
checked against openslide-python in test_slide_job.py); a broken slide
fails alone and is named; files that are no slide are not cases;
summary.json says what ran; --continue skips the slides done; per-slide
side outputs are refused in a folder run.

SEGRT_DEVICE picks where the windows run, as in test_slide_job.py."""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest
import tifffile

import slide_synth

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEGRT = os.environ.get("SEGRT", str(ROOT / "build" / "segrt"))
DEVICE = os.environ.get("SEGRT_DEVICE", "cpu")
HAVE_OPENSLIDE = os.environ.get("SEGRT_HAVE_OPENSLIDE", "1") == "1"

pytestmark = pytest.mark.skipif(not HAVE_OPENSLIDE, reason="segrt built without OpenSlide")

COMMON = ["--mpp", "0.5", "--tissue", "none", "--device", DEVICE]


def segrt(*args, check=0):
    p = subprocess.run([SEGRT, "run", *map(str, args), *COMMON], capture_output=True, text=True, timeout=600)
    assert p.returncode >= 0, f"killed by signal {-p.returncode}: {p.stderr}"
    if check is not None:
        assert p.returncode == check, f"exit {p.returncode}: {p.stderr}{p.stdout}"
    return p


def mask(path):
    with tifffile.TiffFile(path) as t:
        return t.series[0].levels[0].asarray()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("slides")
    slide_synth.write_svs(str(d / "a.svs"), height=900, width=700, tile=256, factors=(4,), label=False,
                          macro=False, compression="zlib", seed=1)
    slide_synth.write_svs(str(d / "b.svs"), height=600, width=1000, tile=128, factors=(4,), label=False,
                          macro=False, compression="pil", seed=2)
    good = (d / "a.svs").read_bytes()
    (d / "c_broken.svs").write_bytes(good[: len(good) // 3])  # the tiles' data cut off
    (d / "notes.txt").write_text("not a slide\n")
    return d


def test_folder_of_slides_equals_single_jobs(folder, tmp_path):
    model = slide_synth.threshold_model(tmp_path / "m.onnx", roi=128, overlap=0.25)
    out = tmp_path / "out"
    out.mkdir()
    p = segrt(model, "-i", folder, "-o", out, check=1)
    assert "c_broken" in p.stderr, p.stderr
    s = json.loads((out / "summary.json").read_text())
    by = {c["name"]: c for c in s["cases"]}
    assert set(by) == {"a", "b", "c_broken"}  # notes.txt is no case
    assert all(c["kind"] == "slide" for c in s["cases"])
    assert by["a"]["status"] == by["b"]["status"] == "done" and by["c_broken"]["status"] == "failed"
    assert "c_broken.svs" in by["c_broken"]["error"]
    assert by["a"]["output"] == str(out / "a.tif") and not (out / "c_broken.tif").exists()
    assert by["a"]["shape"]["dims"] == [1, 450, 350] and by["a"]["shape"]["channels"] == 3
    assert s["totals"] == {**s["totals"], "cases": 3, "done": 2, "failed": 1}
    for name in ("a", "b"):
        single = tmp_path / f"{name}.single.tif"
        segrt(model, folder / f"{name}.svs", "-o", single)
        got, want = mask(out / f"{name}.tif"), mask(single)
        np.testing.assert_array_equal(got, want)
        assert (got == 1).any() and (got == 0).any()


def test_continue_skips_slides_done(folder, tmp_path):
    model = slide_synth.threshold_model(tmp_path / "m.onnx", roi=128, overlap=0.0)
    out = tmp_path / "out"
    out.mkdir()
    segrt(model, "-i", folder, "-o", out, check=1)
    before = {n: (out / f"{n}.tif").stat().st_mtime_ns for n in ("a", "b")}
    segrt(model, "-i", folder, "-o", out, "--continue", check=1)  # the broken one fails again
    s = json.loads((out / "summary.json").read_text())
    assert {c["name"]: c["status"] for c in s["cases"]} == {"a": "skipped", "b": "skipped", "c_broken": "failed"}
    assert before == {n: (out / f"{n}.tif").stat().st_mtime_ns for n in ("a", "b")}


def test_side_outputs_refused_for_a_folder(folder, tmp_path):
    model = slide_synth.threshold_model(tmp_path / "m.onnx", roi=128)
    out = tmp_path / "out"
    out.mkdir()
    p = segrt(model, "-i", folder, "-o", out, "--geojson", tmp_path / "x.geojson", check=2)
    assert "folder of slides" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not list(out.glob("*.tif"))
