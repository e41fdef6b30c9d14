"""The whole-slide job on the device path (src/pipeline/job_slide.c,
sw_device.c's row sink): the slide's rows streamed in by its reader
threads, the labels streamed out of a ring on the device into the
pyramidal TIFF as they finish, never whole in host memory. Its masks must
equal the host path's (--device cpu, which tests/slide/test_slide_job.py
checks against openslide-python pixel for pixel) on slides tall enough for
the ring of result rows to wrap many times:

- the threshold model (label = red > 127.5, a 1x1 convolution) at a level
  read as it is and at a level shrunk by area: equal everywhere;
- a small trained-free convnet with overlapping Gaussian-blended windows
  (the device path's sums are the host path's within rounding): labels
  equal on at least 99.99 % of pixels;
- the threshold model's probabilities (uint8, a class a sample) within
  one step of the host path's.

The slides are deflate-compressed SVS (slide_synth.py, compression="zlib"):
the GPU machine's tifffile writes them without imagecodecs."""
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tifffile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "slide"))
import slide_synth  # noqa: E402
threshold_model = slide_synth.threshold_model
from test_sliding_window import make_convnet  # noqa: E402

from conftest import SEGRT  # noqa: E402

GPU = ["--device", "cuda", "--precision", "fp32", "--autotune", "0", "--no-cache"]


def run(*args, check=0):
    p = subprocess.run([SEGRT, "run", *map(str, args)], capture_output=True, text=True, timeout=900)
    assert p.returncode >= 0, f"killed by signal {-p.returncode}: {p.stderr}"
    if check is not None:
        assert p.returncode == check, f"exit {p.returncode}: {p.stderr}{p.stdout}"
    return p


def mask(path):
    with tifffile.TiffFile(path) as t:
        return [lv.asarray() for lv in t.series[0].levels]


@pytest.fixture(scope="module")
def tall(tmp_path_factory):
    p = tmp_path_factory.mktemp("slide") / "tall.svs"
    slide_synth.write_svs(str(p), height=6000, width=1700, tile=256, factors=(4,), mpp=0.25, label=False,
                          macro=False, compression="zlib")
    return p


@pytest.mark.parametrize("mpp", ["0.25", "0.5", "1.0"])
def test_threshold_device_equals_host(tall, tmp_path, mpp):
    model = threshold_model(tmp_path / "m.onnx", roi=256, overlap=0.0)
    a, b = tmp_path / "gpu.tif", tmp_path / "cpu.tif"
    p = run(model, tall, "-o", a, "--mpp", mpp, "--tissue", "none", "--sw-batch", "8", *GPU)
    assert "on the GPU" in p.stdout, p.stdout
    run(model, tall, "-o", b, "--mpp", mpp, "--tissue", "none", "--device", "cpu")
    ma, mb = mask(a), mask(b)
    assert len(ma) == len(mb)
    for la, lb in zip(ma, mb):
        np.testing.assert_array_equal(la, lb)


def test_convnet_blended_device_equals_host(tall, tmp_path):
    model = tmp_path / "c.onnx"
    make_convnet(model, 2, 3, 4, hidden=4, seed=3)
    a, b = tmp_path / "gpu.tif", tmp_path / "cpu.tif"
    common = ["--mpp", "0.5", "--tissue", "none", "--roi", "192,192", "--overlap", "0.25", "--blend", "gaussian",
              "--raw-input"]
    run(model, tall, "-o", a, *common, "--sw-batch", "4", *GPU)
    run(model, tall, "-o", b, *common, "--device", "cpu")
    la, lb = mask(a)[0], mask(b)[0]
    assert la.shape == lb.shape == (3000, 850)
    assert (la == lb).mean() >= 0.9999, (la == lb).mean()
    assert len(np.unique(la)) > 1


@pytest.fixture(scope="module")
def tissue_slide(tmp_path_factory):
    """A 4000 x 1500 slide, tissue in two blobs over glass, and the
    threshold model with overlapping windows."""
    d = tmp_path_factory.mktemp("tissue")
    E, H = slide_synth.EOSIN, slide_synth.HAEMATOXYLIN
    path = d / "t.svs"
    base = slide_synth.tissue_picture(4000, 1500, 5, blobs=[(800, 500, 500, 400, E), (3000, 1000, 600, 400, H)])
    slide_synth.write_svs(str(path), 4000, 1500, 256, (4,), mpp=0.25, label=False, macro=False, base=base,
                          compression="zlib")
    return path, threshold_model(d / "m.onnx", roi=128, overlap=0.25)


def test_tissue_skipping_device_equals_host(tmp_path, tissue_slide):
    """Windows skipped over glass on the device path as on the host path:
    the same windows run (the report's count), the same labels, 0 where
    no window ran."""
    path, model = tissue_slide
    a, b = tmp_path / "gpu.tif", tmp_path / "cpu.tif"
    pa = run(model, path, "-o", a, "--mpp", "0.5", "--sw-batch", "8", *GPU)
    pb = run(model, path, "-o", b, "--mpp", "0.5", "--device", "cpu")
    la, lb = mask(a)[0], mask(b)[0]
    np.testing.assert_array_equal(la, lb)
    assert (la == 0).mean() > 0.3 and (la == 1).any()
    assert "on the GPU" in pa.stdout and pa.returncode == pb.returncode == 0


@pytest.mark.parametrize("accumulator", ["fp32", "fp16"])
def test_probabilities_device_equal_host(tmp_path, tissue_slide, accumulator):
    """--output probs on the device path (the finalisation writes uint8
    probabilities into the ring, the row sink packs the class planes for
    the pyramid): the host path's values within one step of 255 (expf on
    two processors; float16 sums round the logits), 0 for every class
    where tissue detection skipped the windows, a pixel's classes summing
    to 255 within rounding."""
    path, model = tissue_slide
    a, b = tmp_path / "gpu.tif", tmp_path / "cpu.tif"
    common = ["--mpp", "0.5", "--output", "probs", "--blend", "gaussian"]
    run(model, path, "-o", a, *common, "--sw-batch", "8", "--accumulator", accumulator, *GPU)
    run(model, path, "-o", b, *common, "--device", "cpu")
    ma, mb = mask(a), mask(b)
    assert len(ma) == len(mb) and ma[0].shape == mb[0].shape == (2000, 750, 2) and ma[0].dtype == np.uint8
    for la, lb in zip(ma, mb):
        assert np.abs(la.astype(int) - lb).max() <= (1 if accumulator == "fp32" else 2)
    bare = (mb[0] == 0).all(-1)
    assert 0.3 < bare.mean() < 0.9 and (ma[0][bare] == 0).all()
    total = ma[0][~bare].astype(int).sum(-1)
    assert total.min() >= 254 and total.max() <= 256


# --- JPEG tiles decoded on the device (slide_gpu.c, nvJPEG) ------------------
#
# Slides whose level is JPEG tiles are read on the device path by decoding
# the tiles there. The value model's labels are the pixels segrt read (one
# channel, rounded), so the device's decoding and area resampling are
# compared with OpenSlide's pixels through the host path and with what was
# encoded.


@pytest.fixture(scope="module", params=["pil", "pil-tables", "pil-rgb"])
def jpeg_slide(request, tmp_path_factory):
    p = tmp_path_factory.mktemp("jpeg") / f"{request.param}.svs"
    base = slide_synth.write_svs(str(p), height=3000, width=1300, tile=256, factors=(4,), mpp=0.25, label=False,
                                 macro=False, compression=request.param)
    return p, base


@pytest.mark.parametrize("mpp,f", [("0.25", 1), ("0.5", 2), ("1.0", 4)])
def test_jpeg_tiles_decoded_on_device_match_openslide(jpeg_slide, tmp_path, mpp, f):
    """RGB-coded tiles: the device's pixels are OpenSlide's exactly (the
    inverse transforms agree). YCbCr 4:2:0 tiles: the two decoders
    upsample chroma and convert to RGB differently, and OpenSlide's pixels
    are the further from what was encoded (on the H200, 2026-11-29, mean
    errors of the blue channel 6.6 on the device against OpenSlide's 13.2
    at the level as it is, 4.3 against 32.5 at level 1): the device's must
    be at least as close as OpenSlide's, and close."""
    path, base = jpeg_slide
    ref = slide_synth.reduce(base, f).astype(int) if f > 1 else base.astype(int)
    for channel in (0, 2):
        model = slide_synth.value_model(tmp_path / f"v{channel}.onnx", channel, roi=256)
        a, b = tmp_path / f"gpu{channel}.tif", tmp_path / f"cpu{channel}.tif"
        common = ["--mpp", mpp, "--tissue", "none", "--raw-input"]
        pa = run(model, path, "-o", a, *common, "--sw-batch", "8", *GPU)
        assert "JPEG tiles decoded on the device by nvJPEG" in pa.stdout + pa.stderr, pa.stdout + pa.stderr
        run(model, path, "-o", b, *common, "--device", "cpu")
        va, vb = mask(a)[0].astype(int), mask(b)[0].astype(int)
        assert va.shape == vb.shape == ref.shape[:2]
        d = np.abs(va - vb)
        e_dev, e_os = np.abs(va - ref[..., channel]).mean(), np.abs(vb - ref[..., channel]).mean()
        print(path.name, mpp, channel, "device-openslide mean", d.mean(), "max", d.max(), "error device", e_dev,
              "openslide", e_os)
        if path.name == "pil-rgb.svs":
            assert d.max() == 0
        else:
            assert e_dev <= e_os + 0.5 and e_dev < 8, (d.mean(), e_dev, e_os)


def test_jpeg_tile_with_a_wrong_frame_is_refused(tmp_path):
    """A tile whose frame header claims more rows than the tile has is
    refused before it reaches the decoder (which would write past the
    tile's place): one line naming the file and the tile, exit 2."""
    path = tmp_path / "bad.svs"
    slide_synth.write_svs(str(path), 1000, 700, 256, (4,), label=False, macro=False, compression="pil")
    with tifffile.TiffFile(path) as t:
        off, n = t.pages[0].dataoffsets[3], t.pages[0].databytecounts[3]
    data = bytearray(path.read_bytes())
    sof = data.find(b"\xff\xc0", off, off + n)
    assert sof > 0
    data[sof + 5:sof + 7] = (4096).to_bytes(2, "big")
    path.write_bytes(bytes(data))
    model = slide_synth.value_model(tmp_path / "v.onnx", 0, roi=256)
    p = run(model, path, "-o", tmp_path / "o.tif", "--tissue", "none", "--raw-input", *GPU, check=2)
    assert "bad.svs" in p.stderr and "tile" in p.stderr, p.stderr
    assert not (tmp_path / "o.tif").exists()
