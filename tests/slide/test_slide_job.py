"""The whole-slide job (`segrt run MODEL SLIDE -o MASK.tif`, src/pipeline/
job_slide.c) end to end on slides the tests write (slide_synth.py), with a
model whose answer is known per pixel: a 1x1 convolution whose class 1 is
the red channel over 255 and class 0 the constant 0.5, so that the label is
red > 127.5 wherever windows ran. The reference pixels are openslide-
python's (the same decoder: test_slide.py shows them equal); where the
job shrinks a level by area, the reference is the same area mean in numpy.
The mask is read back with tifffile (its pyramid and resolution tags) and
OpenSlide.

SEGRT_DEVICE picks where the windows run: cpu (CI: the host path, the
slide read whole) or cuda (the GPU machine: the device path, rows streamed
in and labels streamed out to the pyramid)."""
import os
import pathlib
import subprocess

import numpy as np
import pytest
import tifffile

import slide_synth

openslide = pytest.importorskip("openslide")
threshold_model = slide_synth.threshold_model

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEGRT = os.environ.get("SEGRT", str(ROOT / "build" / "segrt"))
DEVICE = os.environ.get("SEGRT_DEVICE", "cpu")
HAVE_OPENSLIDE = os.environ.get("SEGRT_HAVE_OPENSLIDE", "1") == "1"

pytestmark = pytest.mark.skipif(not HAVE_OPENSLIDE, reason="segrt built without OpenSlide")


def run(*args, check=0):
    p = subprocess.run([SEGRT, "run", *map(str, args), "--device", DEVICE], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode >= 0, f"killed by signal {-p.returncode}: {p.stderr}"
    if check is not None:
        assert p.returncode == check, f"exit {p.returncode}: {p.stderr}{p.stdout}"
    return p


def level_rgb(path, level):
    osl = openslide.OpenSlide(str(path))
    w, h = osl.level_dimensions[level]
    a = np.asarray(osl.read_region((0, 0), level, (w, h)))
    rgb = a[..., :3].astype(np.float64)
    rgb[a[..., 3] == 0] = 255
    osl.close()
    return rgb


def area_shrink(img, f, h, w):
    """img (H x W x C) shrunk by area to h x w, f level pixels a grid pixel,
    the last pixels clipped to the image (job_slide.c's area weights)."""
    def weights(n, length):
        m = np.zeros((n, length))
        for i in range(n):
            lo, hi = i * f, min((i + 1) * f, length)
            if lo > hi - 1e-9:
                lo = hi - 1.0
            for k in range(int(np.floor(lo)), int(np.ceil(hi))):
                m[i, k] = max(0.0, min(hi, k + 1) - max(lo, k))
            m[i] /= m[i].sum()
        return m
    wy, wx = weights(h, img.shape[0]), weights(w, img.shape[1])
    return np.stack([wy @ img[..., c] @ wx.T for c in range(img.shape[2])], axis=-1)


def read_mask(path):
    with tifffile.TiffFile(path) as t:
        levels = [lv.asarray() for lv in t.series[0].levels]
        page = t.pages[0]
        res = page.tags.get("XResolution"), page.tags.get("ResolutionUnit")
        return levels, res


@pytest.fixture(scope="module")
def svs(tmp_path_factory):
    p = tmp_path_factory.mktemp("slide") / "s.svs"
    slide_synth.write_svs(str(p), height=1000, width=1200, tile=240, factors=(4, 16), mpp=0.25)
    return p


def test_labels_at_a_level_that_matches(svs, tmp_path):
    """--mpp 1.0 on a 0.25 um/px slide: level 1 (4x) read as it is."""
    model = threshold_model(tmp_path / "m.onnx")
    out = tmp_path / "mask.tif"
    p = run(model, svs, "-o", out, "--mpp", "1.0", "--tissue", "none")
    assert "level 1" in p.stderr, p.stderr
    levels, (xres, unit) = read_mask(out)
    want = level_rgb(svs, 1)[..., 0] > 127.5
    assert levels[0].dtype == np.uint8 and levels[0].shape == want.shape
    np.testing.assert_array_equal(levels[0], want.astype(np.uint8))
    # The grid's resolution: 1 um/px = 10000 px/cm.
    num, den = xres.value
    assert unit.value == 3 and abs(num / den - 1e4) < 1e-3 * 1e4


def test_labels_of_a_level_shrunk_by_area(svs, tmp_path):
    """--mpp 0.5: no level at 0.5, so level 0 is shrunk by 2 (2 x 2 means)."""
    model = threshold_model(tmp_path / "m.onnx", roi=96, overlap=0.25)
    out = tmp_path / "mask.tif"
    run(model, svs, "-o", out, "--mpp", "0.5", "--tissue", "none")
    levels, _ = read_mask(out)
    red = area_shrink(level_rgb(svs, 0)[..., :1], 2.0, 500, 600)[..., 0]
    assert levels[0].shape == red.shape
    decided = np.abs(red - 127.5) > 1e-3  # a mean of exactly 127.5 is a tie
    assert decided.mean() > 0.95
    np.testing.assert_array_equal(levels[0][decided], (red[decided] > 127.5).astype(np.uint8))


def test_model_mpp_and_an_uneven_factor(svs, tmp_path):
    """The model's segrt.mpp (0.7 um/px) when --mpp is absent: level 0
    shrunk by 2.8, fractional weights at every pixel's edges."""
    model = threshold_model(tmp_path / "m.onnx", mpp=0.7)
    out = tmp_path / "mask.tif"
    run(model, svs, "-o", out, "--tissue", "none")
    levels, _ = read_mask(out)
    h, w = round(1000 / 2.8), round(1200 / 2.8)
    red = area_shrink(level_rgb(svs, 0)[..., :1], 2.8, h, w)[..., 0]
    assert levels[0].shape == (h, w)
    decided = np.abs(red - 127.5) > 1e-2
    np.testing.assert_array_equal(levels[0][decided], (red[decided] > 127.5).astype(np.uint8))


def test_mask_opens_in_openslide_beside_the_slide(svs, tmp_path):
    model = threshold_model(tmp_path / "m.onnx")
    out = tmp_path / "mask.tif"
    run(model, svs, "-o", out, "--mpp", "1.0", "--tissue", "none")
    osl = openslide.OpenSlide(str(out))
    assert osl.dimensions == (300, 250)
    assert float(osl.properties["openslide.mpp-x"]) == pytest.approx(1.0, rel=1e-3)
    osl.close()


def test_thumbnail(svs, tmp_path):
    model = threshold_model(tmp_path / "m.onnx")
    out, thumb = tmp_path / "mask.tif", tmp_path / "thumb.png"
    run(model, svs, "-o", out, "--mpp", "1.0", "--tissue", "none", "--thumbnail", thumb)
    from PIL import Image
    t = np.asarray(Image.open(thumb).convert("RGB")).astype(int)
    levels, _ = read_mask(out)
    assert t.shape[:2] == levels[0].shape  # the grid is under 4096 px: one thumbnail pixel a grid pixel
    base = level_rgb(svs, 1)
    bg = levels[0] == 0
    # Background pixels are the slide's; labelled ones are tinted away from it.
    assert np.abs(t[bg] - base[bg]).max() <= 1
    assert np.abs(t[~bg] - base[~bg]).max(axis=-1).min() > 0


def test_probabilities_as_uint8(svs, tmp_path):
    """--output probs: the classes' softmax probabilities, a uint8 sample a
    class (round(255 p)), level 1 read as it is; the reduced levels the
    2x2 means; the thumbnail tinted by the most probable class."""
    model = threshold_model(tmp_path / "m.onnx")
    out, thumb = tmp_path / "probs.tif", tmp_path / "thumb.png"
    run(model, svs, "-o", out, "--mpp", "1.0", "--tissue", "none", "--output", "probs", "--thumbnail", thumb)
    levels, (xres, _) = read_mask(out)
    red = level_rgb(svs, 1)[..., 0]
    p1 = 1 / (1 + np.exp(0.5 - red / 255))
    want = np.rint(np.stack([1 - p1, p1], -1) * 255)
    got = levels[0]
    assert got.dtype == np.uint8 and got.shape == want.shape
    diff = np.abs(got.astype(int) - want)
    assert diff.max() <= 1 and (diff == 0).mean() > 0.999  # float32's expf against float64 at .5 ties
    with tifffile.TiffFile(out) as t:
        assert t.pages[0].photometric == tifffile.PHOTOMETRIC.MINISBLACK and t.pages[0].samplesperpixel == 2
    for k in range(1, len(levels)):
        a = levels[k - 1].astype(int)
        h, w = a.shape[:2]
        pad = np.zeros((h + h % 2, w + w % 2, 2), int)
        n = np.zeros((h + h % 2, w + w % 2, 1), int)
        pad[:h, :w], n[:h, :w] = a, 1
        s = pad[0::2, 0::2] + pad[1::2, 0::2] + pad[0::2, 1::2] + pad[1::2, 1::2]
        c = n[0::2, 0::2] + n[1::2, 0::2] + n[0::2, 1::2] + n[1::2, 1::2]
        np.testing.assert_array_equal(levels[k], (s + c // 2) // c, err_msg=f"level {k}")
    # The thumbnail: tinted where class 1 is the more probable, as the labels' thumbnail.
    labels_out = tmp_path / "labels.tif"
    run(model, svs, "-o", labels_out, "--mpp", "1.0", "--tissue", "none", "--thumbnail", tmp_path / "lt.png")
    from PIL import Image
    t = np.asarray(Image.open(thumb).convert("RGB"))
    lt = np.asarray(Image.open(tmp_path / "lt.png").convert("RGB"))
    tie = got[..., 0] == got[..., 1]  # the first class wins a tie of the rounded values
    np.testing.assert_array_equal(t[~tie], lt[~tie])
    # Logits are not a slide's output.
    p = run(model, svs, "-o", tmp_path / "l.tif", "--mpp", "1.0", "--output", "logits", check=2)
    assert "logits" in p.stderr and p.stderr.count("\n") == 1 and not (tmp_path / "l.tif").exists()


def test_generic_pyramidal_tiff(tmp_path):
    """A tiled TIFF with a reduced level is a slide too (OpenSlide's generic
    TIFF); it says no um/px, so it runs at level 0."""
    img = slide_synth.picture(700, 900, 3)
    path = tmp_path / "g.tif"
    with tifffile.TiffWriter(path) as tw:
        tw.write(img, tile=(128, 128), photometric="rgb", metadata=None, compression="jpeg",
                 compressionargs={"level": 90}, subifds=0)
        tw.write(slide_synth.reduce(img, 2), tile=(128, 128), photometric="rgb", metadata=None,
                 compression="jpeg", compressionargs={"level": 90}, subfiletype=1)
    model = threshold_model(tmp_path / "m.onnx")
    out = tmp_path / "mask.tif"
    run(model, path, "-o", out, "--tissue", "none")
    levels, _ = read_mask(out)
    np.testing.assert_array_equal(levels[0], (level_rgb(path, 0)[..., 0] > 127.5).astype(np.uint8))
    # An mpp asked of a slide that says none: one line naming the file.
    p = run(model, path, "-o", tmp_path / "m2.tif", "--mpp", "0.5", "--tissue", "none", check=2)
    assert str(path) in p.stderr and "microns per pixel" in p.stderr and p.stderr.count("\n") == 1
    assert not (tmp_path / "m2.tif").exists()


def test_refusals(svs, tmp_path):
    model = threshold_model(tmp_path / "m.onnx")
    p = run(model, svs, "-o", tmp_path / "mask.png", "--mpp", "1.0", check=2)
    assert "pyramidal" in p.stderr and p.stderr.count("\n") == 1
    p = run(model, svs, "-o", tmp_path / "mask.tif", "--mpp", "1000", check=2)
    assert str(svs) in p.stderr and p.stderr.count("\n") == 1
    # Slide outputs asked of an image that is not a slide.
    png = tmp_path / "p.png"
    from PIL import Image
    Image.fromarray(slide_synth.picture(200, 200, 1)).save(png)
    p = run(model, png, "-o", tmp_path / "l.png", "--thumbnail", tmp_path / "t.png", check=2)
    assert "whole-slide" in p.stderr
    assert not list(tmp_path.glob("*.tif")) and not (tmp_path / "t.png").exists()


def monai_starts(size, roi, overlap):
    """MONAI's window starts along an axis (sw_grid.c's default grid)."""
    if size <= roi:
        return [0]
    step = max(int(roi * (1 - overlap)), 1)
    n = -(-(size - roi) // step) + 1
    return [min(i * step, size - roi) for i in range(n)]


def test_windows_only_over_tissue(tmp_path):
    """--tissue otsu (the default): windows whose level-0 box touches no
    tissue pixel of the mask (--tissue-mask, one pixel per level-0 pixel on
    this small slide) do not run and their pixels are 0; the others give
    the threshold. Then the GeoJSON's polygons cover exactly the labels."""
    E, H = slide_synth.EOSIN, slide_synth.HAEMATOXYLIN
    path = tmp_path / "t.svs"
    slide_synth.write_tissue_svs(str(path), height=1600, width=2000, factors=(4,), seed=5,
                                 blobs=[(400, 500, 250, 300, E), (1200, 1500, 300, 350, H)])
    model = threshold_model(tmp_path / "m.onnx", roi=64)
    out, tmask, geo = tmp_path / "mask.tif", tmp_path / "tissue.png", tmp_path / "l.geojson"
    p = run(model, path, "-o", out, "--mpp", "1.0", "--tissue-mask", tmask, "--geojson", geo)
    from PIL import Image
    tissue = np.asarray(Image.open(tmask)) > 0
    assert tissue.shape == (1600, 2000) and 0.1 < tissue.mean() < 0.9
    labels = read_mask(out)[0][0]
    h, w = labels.shape
    covered = np.zeros((h, w), bool)
    kept = total = 0
    for y in monai_starts(h, 64, 0.0):
        for x in monai_starts(w, 64, 0.0):
            total += 1
            if tissue[4 * y:4 * (y + 64), 4 * x:4 * (x + 64)].any():
                covered[y:y + 64, x:x + 64] = True
                kept += 1
    assert 0 < kept < total
    assert f"{kept} of the {total} windows ran" in p.stdout + p.stderr, p.stdout + p.stderr
    want = np.where(covered, level_rgb(path, 1)[..., 0] > 127.5, False).astype(np.uint8)
    np.testing.assert_array_equal(labels, want)
    # The polygons (on the small grid: here the whole grid, 4 level-0 pixels a pixel) cover the labels exactly.
    shapely = pytest.importorskip("shapely")
    import json
    feats = json.loads(geo.read_text())["features"]
    assert feats and all(f["properties"]["classification"]["name"] for f in feats)
    ys, xs = np.mgrid[0:h, 0:w]
    inside = np.zeros(h * w, bool)
    for f in feats:
        inside |= shapely.contains_xy(shapely.geometry.shape(f["geometry"]), (xs.ravel() + 0.5) * 4,
                                      (ys.ravel() + 0.5) * 4)
    np.testing.assert_array_equal(inside.reshape(h, w), labels > 0)
