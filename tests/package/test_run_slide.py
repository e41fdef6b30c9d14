"""segrt.run_slide: a whole slide through segrt_window_job_run from
Python, its mask byte for byte the CLI's (`segrt run MODEL SLIDE -o
MASK.tif`, tests/slide/test_slide_job.py, which checks the CLI's masks
against openslide-python), its report the job's, its errors the library's
exceptions naming the file."""
import pathlib
import sys

import numpy as np
import pytest

import segrt
from conftest import run_segrt

tifffile = pytest.importorskip("tifffile")
pytest.importorskip("imagecodecs")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "slide"))
import slide_synth  # noqa: E402


@pytest.fixture(scope="module")
def svs(tmp_path_factory):
    p = tmp_path_factory.mktemp("slide") / "s.svs"
    slide_synth.write_svs(str(p), height=700, width=900, tile=240, factors=(4,), mpp=0.25)
    return p


def test_run_slide_equals_the_cli(svs, tmp_path):
    model = slide_synth.threshold_model(tmp_path / "m.onnx", roi=128)
    r = segrt.run_slide(model, svs, tmp_path / "py.tif", roi=128, mpp=0.5, tissue="none", sw_batch=2,
                        thumbnail=tmp_path / "t.png")
    assert r["shape"] == (350, 450) and r["windows"] == 3 * 4 and r["runs"] == r["windows"]
    assert (tmp_path / "t.png").is_file()
    run_segrt("run", model, svs, "-o", tmp_path / "cli.tif", "--mpp", "0.5", "--tissue", "none", "--sw-batch", "2",
              "--device", "cpu", "-q")
    assert (tmp_path / "py.tif").read_bytes() == (tmp_path / "cli.tif").read_bytes()
    mask = tifffile.imread(tmp_path / "py.tif")
    assert mask.shape == (350, 450) and set(np.unique(mask)) <= {0, 1}


def test_run_slide_probabilities_equal_the_cli(svs, tmp_path):
    model = slide_synth.threshold_model(tmp_path / "m.onnx", roi=128)
    segrt.run_slide(model, svs, tmp_path / "py.tif", roi=128, mpp=1.0, tissue="none", output="probs")
    run_segrt("run", model, svs, "-o", tmp_path / "cli.tif", "--mpp", "1.0", "--tissue", "none", "--output", "probs",
              "--device", "cpu", "-q")
    assert (tmp_path / "py.tif").read_bytes() == (tmp_path / "cli.tif").read_bytes()
    probs = tifffile.imread(tmp_path / "py.tif")
    assert probs.shape == (175, 225, 2) and probs.dtype == np.uint8
    with pytest.raises(ValueError, match="output"):
        segrt.run_slide(model, svs, tmp_path / "m.tif", roi=128, tissue="none", output="logits")


def test_run_slide_errors(svs, tmp_path):
    model = slide_synth.threshold_model(tmp_path / "m.onnx", roi=128)
    with pytest.raises(segrt.InvalidArgumentError, match="pyramidal"):
        segrt.run_slide(model, svs, tmp_path / "m.png", roi=128, tissue="none")
    with pytest.raises(segrt.InvalidArgumentError, match=str(svs)):
        segrt.run_slide(model, svs, tmp_path / "m.tif", roi=128, mpp=1000.0, tissue="none")
    with pytest.raises(ValueError, match="tissue"):
        segrt.run_slide(model, svs, tmp_path / "m.tif", roi=128, tissue="maybe")
    assert not list(tmp_path.glob("m.*tif")) and not list(tmp_path.glob("*.png"))
