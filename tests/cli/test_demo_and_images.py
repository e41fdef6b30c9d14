"""`make demo`'s job and image files through `segrt run`.

- The demo on the CPU: segrt's own model (demo/model.onnx) over the shipped
  sample (demo/sample.png) gives labels whose Dice against the expected mask
  (demo/sample_mask.png, the classical stain-separation labels the model was
  trained on) is at least 0.9, and an overlay PNG of the image's size.
- Image inputs: PNG, JPEG and TIFF, 8- and 16-bit, RGB and grey, give the
  labels the same pixels give as a normalised NPY array; label maps written
  as PNG and TIFF read back equal; the model's metadata supplies the
  window, the overlap and the normalisation. A multi-page TIFF (written by
  Pillow) is a volume for a 3-D net, and gives the labels its pages give
  as an NPY volume; a stack whose pages differ, or a pyramid, is refused
  naming the page. A 3-D job's labels go to a multi-page TIFF, a page a
  slice, as Pillow reads it back.
- Bad input: a corrupt image, a grey image for an RGB model, logits into an
  image file, an overlay over an array: one line on stderr, exit 2, and no
  output file left behind.
"""
import json
import pathlib
import re

import numpy as np
import pytest
from PIL import Image

from conftest import run_segrt

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo"
CARD = json.loads((DEMO / "model_card.json").read_text())


def dice(a, b):
    return 2.0 * float((a & b).sum()) / float(a.sum() + b.sum())


def labels_of(path):
    return np.array(Image.open(path))


def test_demo_on_cpu(tmp_path):
    labels, overlay = tmp_path / "labels.png", tmp_path / "overlay.png"
    p = run_segrt("run", DEMO / "model.onnx", DEMO / "sample.png", "-o", labels, "--overlay", overlay,
                  "--device", "cpu", check=0, timeout=600)
    lines = p.stdout.strip().splitlines()
    line = next((x for x in lines if " windows (" in x), p.stdout)
    assert re.search(r"1x3x512x512 .* 9 windows .* cpu fp32, [\d.]+ s", line), line
    # where the time went, last
    assert lines[-1].startswith("segrt: time: loading the model "), lines[-1]
    got = labels_of(labels)
    assert got.shape == (512, 512) and got.dtype == np.uint8 and set(np.unique(got)) <= {0, 1}
    want = labels_of(DEMO / "sample_mask.png") > 0
    d = dice(got > 0, want)
    print(f"demo Dice on the CPU: {d:.4f} (training card: {CARD['evaluation']})")
    assert d >= 0.9
    with Image.open(overlay) as im:
        assert im.format == "PNG" and im.size == (512, 512) and im.mode == "RGB"
        pix = np.array(im)
    base = np.array(Image.open(DEMO / "sample.png").convert("RGB"))
    # Background pixels keep the image; labelled ones are tinted.
    assert np.array_equal(pix[got == 0], base[got == 0])
    assert (pix[got > 0] != base[got > 0]).any(axis=-1).mean() > 0.9


def crop(tmp_path, size=300):
    """A corner of the sample: a smaller job, still more than one window."""
    return np.array(Image.open(DEMO / "sample.png").convert("RGB"))[:size, :size + 20]


def normalised(rgb):
    inp = CARD["input"]
    x = rgb.astype(np.float32).transpose(2, 0, 1)[None]
    mean = np.array(inp["mean"], np.float32)[None, :, None, None]
    std = np.array(inp["std"], np.float32)[None, :, None, None]
    return (x * np.float32(inp["scale"]) - mean) / std


@pytest.fixture(scope="module")
def npy_reference(tmp_path_factory):
    """Labels from the normalised crop as an NPY array, window given."""
    d = tmp_path_factory.mktemp("ref")
    rgb = crop(d)
    np.save(d / "x.npy", normalised(rgb))
    run_segrt("run", DEMO / "model.onnx", d / "x.npy", "-o", d / "y.npy", "--roi", "256,256", "--overlap", "0.25",
              "--output", "labels", "--device", "cpu", "-q", check=0, timeout=600)
    return rgb, np.load(d / "y.npy")[0, 0]


@pytest.mark.parametrize("fmt", ["png", "tif", "jpg"])
def test_image_formats_match_npy(tmp_path, npy_reference, fmt):
    rgb, want = npy_reference
    path = tmp_path / f"in.{fmt}"
    if fmt == "jpg":
        Image.fromarray(rgb).save(path, quality=100, subsampling=0)
    else:
        Image.fromarray(rgb).save(path)
    out = tmp_path / "labels.tif"
    run_segrt("run", DEMO / "model.onnx", path, "-o", out, "--device", "cpu", "-q", check=0, timeout=600)
    got = labels_of(out)
    if fmt == "jpg":  # lossy: nearly the same pixels, nearly the same labels
        assert (got == want).mean() > 0.97
    else:
        assert np.array_equal(got, want)


def test_grey_16bit_tiff_and_png_labels(tmp_path):
    """A one-channel 16-bit image into a one-channel net: the raw values
    (no metadata) reach the model unchanged; labels written as PNG."""
    from onnx import helper
    from onnx_util import init, save_model, tensor_input
    rng = np.random.default_rng(3)
    w = rng.standard_normal((3, 1, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    model = tmp_path / "grey.onnx"
    save_model(model, nodes, [tensor_input("x", ["N", 1, "H", "W"])], [tensor_input("y", ["N", 3, "H", "W"])],
               [init("w", w)])
    img = rng.integers(0, 65535, (70, 90), dtype=np.uint16)
    np.save(tmp_path / "g.npy", img.astype(np.float32)[None, None])
    run_segrt("run", model, tmp_path / "g.npy", "-o", tmp_path / "l.npy", "--roi", "32,32", "--output", "labels",
              "--device", "cpu", "-q", check=0, timeout=300)
    want = np.load(tmp_path / "l.npy")[0, 0]
    for ext in ("png", "tif"):
        Image.fromarray(img).save(tmp_path / f"g.{ext}")
        assert np.array(Image.open(tmp_path / f"g.{ext}")).dtype == np.uint16
        run_segrt("run", model, tmp_path / f"g.{ext}", "-o", tmp_path / f"l.{ext}", "--roi", "32,32", "--device",
                  "cpu", "-q", check=0, timeout=300)
        assert np.array_equal(labels_of(tmp_path / f"l.{ext}"), want), ext


def conv3d_model(tmp_path):
    """A one-channel 3-D net with no metadata: raw values in."""
    from onnx import helper
    from onnx_util import init, save_model, tensor_input
    w = np.random.default_rng(5).standard_normal((3, 1, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3, 3], pads=[1, 1, 1, 1, 1, 1])]
    model = tmp_path / "grey3d.onnx"
    save_model(model, nodes, [tensor_input("x", ["N", 1, "D", "H", "W"])],
               [tensor_input("y", ["N", 3, "D", "H", "W"])], [init("w", w)])
    return model


def save_stack(path, pages, **kw):
    ims = [Image.fromarray(p) for p in pages]
    ims[0].save(path, save_all=True, append_images=ims[1:], **kw)


def test_tiff_stack_is_a_volume(tmp_path):
    model = conv3d_model(tmp_path)
    vol = np.random.default_rng(6).integers(0, 65535, (7, 30, 26), dtype=np.uint16)
    np.save(tmp_path / "v.npy", vol.astype(np.float32)[None, None])
    args = ["--roi", "4,16,16", "--output", "labels", "--device", "cpu", "-q"]
    run_segrt("run", model, tmp_path / "v.npy", "-o", tmp_path / "want.npy", *args, check=0, timeout=300)
    want = np.load(tmp_path / "want.npy")
    assert want.shape == (1, 1, 7, 30, 26)
    for kw in ({}, {"compression": "tiff_deflate"}, {"compression": "tiff_lzw"}):
        save_stack(tmp_path / "v.tif", list(vol), **kw)
        run_segrt("run", model, tmp_path / "v.tif", "-o", tmp_path / "got.npy", *args, check=0, timeout=300)
        assert np.array_equal(np.load(tmp_path / "got.npy"), want), kw
    # The volume's labels as a TIFF: a page a slice, read back by Pillow
    # (the independent reader) and by segrt as the same volume.
    run_segrt("run", model, tmp_path / "v.tif", "-o", tmp_path / "labels.tif", *args, check=0, timeout=300)
    with Image.open(tmp_path / "labels.tif") as im:
        assert im.n_frames == 7
        pages = []
        for z in range(im.n_frames):
            im.seek(z)
            pages.append(np.array(im))
    assert np.array_equal(np.stack(pages), want[0, 0])
    # A PNG holds one picture: refused before the job, nothing written.
    msg = bad(tmp_path, model, tmp_path / "v.tif", "-o", tmp_path / "labels.png", *args)
    assert "labels.png: a PNG holds one 2-D picture" in msg, msg
    assert not (tmp_path / "labels.png").exists()


def test_tiff_stacks_refused(tmp_path):
    model = conv3d_model(tmp_path)
    pages = [np.full((30, 26), k, np.uint8) for k in range(4)]
    args = ["-o", tmp_path / "o.npy", "--roi", "2,16,16", "--device", "cpu"]
    save_stack(tmp_path / "differ.tif", pages[:3] + [np.zeros((28, 26), np.uint8)])
    msg = bad(tmp_path, model, tmp_path / "differ.tif", *args)
    assert "differ.tif: page 3 is 26x28, page 0 is 26x30" in msg, msg
    save_stack(tmp_path / "pyramid.tif", [pages[0], np.zeros((15, 13), np.uint8)])
    msg = bad(tmp_path, model, tmp_path / "pyramid.tif", *args)
    assert "page 1 is 13x15, smaller than page 0 (26x30) both ways: a pyramid" in msg, msg
    assert not (tmp_path / "o.npy").exists()


def bad(tmp_path, *args):
    p = run_segrt("run", *args, timeout=300)
    assert p.returncode == 2, f"exit {p.returncode}: {p.stderr}"
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


def test_bad_image_inputs(tmp_path):
    model = DEMO / "model.onnx"
    corrupt = tmp_path / "corrupt.png"
    corrupt.write_bytes((DEMO / "sample.png").read_bytes()[:3000])
    msg = bad(tmp_path, model, corrupt, "-o", tmp_path / "o.png", "--device", "cpu")
    assert "corrupt.png" in msg
    grey = tmp_path / "grey.png"
    Image.fromarray(np.zeros((300, 300), np.uint8)).save(grey)
    bad(tmp_path, model, grey, "-o", tmp_path / "o.png", "--device", "cpu")
    rgb = tmp_path / "rgb.png"
    Image.fromarray(crop(tmp_path)).save(rgb)
    msg = bad(tmp_path, model, rgb, "-o", tmp_path / "o.png", "--output-kind", "logits", "--device", "cpu")
    assert ".npy" in msg
    np.save(tmp_path / "x.npy", normalised(crop(tmp_path)))
    msg = bad(tmp_path, model, tmp_path / "x.npy", "-o", tmp_path / "o.npy", "--overlay", tmp_path / "ov.png",
              "--roi", "256,256", "--device", "cpu")
    assert "overlay" in msg
    assert not any(p.name.startswith("o.") for p in tmp_path.iterdir())
