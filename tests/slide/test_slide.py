"""The slide source (src/io/source_slide.c) against openslide-python (the
openslide-bin wheel's OpenSlide) on slides the tests write with tifffile
(slide_synth.py): every level whole and boxes at its edges, pixel for
pixel; the info (levels, downsamples, mpp, tile); associated images and
properties; and corrupt and truncated slides, which must fail with one
line naming the file, never crash.

segrt links Debian's OpenSlide (3.4.1, libjpeg-turbo 2.1) and the wheel
bundles its own (4.x, its own libjpeg-turbo); both decode the baseline JPEG
tiles with libjpeg's default integer IDCT, so the pixels must be equal:
the tolerance is 0, except at levels whose downsample is not a whole
number (TOL says why)."""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

import slide_synth

ROOT = pathlib.Path(__file__).resolve().parents[2]
SLIDE = os.environ.get("SEGRT_SLIDE", str(ROOT / "build-cpu" / "tests" / "segrt_slide"))
HAVE_OPENSLIDE = os.environ.get("SEGRT_HAVE_OPENSLIDE", "1") == "1"

openslide = pytest.importorskip("openslide")

needs_openslide = pytest.mark.skipif(not HAVE_OPENSLIDE, reason="segrt built without OpenSlide")


def run(*args, check=0):
    p = subprocess.run([SLIDE, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert p.returncode >= 0, f"killed by signal {-p.returncode}: {p.stderr}"
    if check is not None:
        assert p.returncode == check, f"exit {p.returncode}: {p.stderr}{p.stdout}"
    return p


def info(path, *props, slide=False):
    return json.loads(run(*(["--slide"] if slide else []), path, "info", *props).stdout)


def regions(path, tmp_path, boxes, slide=False):
    """segrt's boxes (level, y, x, h, w) of path, each 3 x h x w."""
    out = tmp_path / "r.npy"
    flat = [v for b in boxes for v in b]
    run(*(["--slide"] if slide else []), path, "region", out, *flat)
    return [np.load(out if i == 0 else tmp_path / f"r.{i}.npy") for i in range(len(boxes))]


def rgb_planes(rgba):
    """openslide-python's RGBA (un-premultiplied) as segrt gives it: planar
    RGB, transparent pixels white."""
    a = np.asarray(rgba)
    rgb = a[..., :3].copy()
    rgb[a[..., 3] == 0] = 255
    return rgb.transpose(2, 0, 1)


def reference(osl, level, y, x, h, w):
    """openslide-python's box of level at the level-0 coordinates segrt
    reads it from (round(x * downsample))."""
    ds = osl.level_downsamples[level]
    return rgb_planes(osl.read_region((round(x * ds), round(y * ds)), level, (w, h)))


def TOL(osl, level):
    """0 where the level's downsample is a whole number. Elsewhere (a level
    that does not divide level 0 exactly: 16.06, 4.005...) a box away from
    the origin starts at a fraction of a pixel in OpenSlide's grid, which
    cairo then resamples bilinearly; Debian's cairo and pixman and the
    wheel's round those blends differently by 1 (measured: at most 1, in
    a few percent of a box's samples)."""
    ds = osl.level_downsamples[level]
    return 0 if ds == round(ds) else 1


def edge_boxes(h, w, tile):
    """Boxes at a level's corners and edges, across tile seams, and whole."""
    boxes = [(0, 0, h, w), (0, 0, 1, 1), (h - 1, w - 1, 1, 1), (h - 1, 0, 1, w), (0, w - 1, h, 1)]
    boxes.append((max(h - 37, 0), max(w - 53, 0), min(h, 37), min(w, 53)))
    if h > tile and w > tile:
        boxes.append((tile - 3, tile - 5, min(7, h - tile + 3), min(11, w - tile + 5)))
    boxes.append((h // 3, w // 5, h // 2 + 1, w // 2 + 1))
    return boxes


SLIDES = {
    # name: write_svs arguments
    "svs": dict(),
    "bigtiff": dict(bigtiff=True, seed=3),
    "tile256_uneven": dict(height=777, width=1001, tile=256, factors=(4,), seed=5),
    "tile240_uneven": dict(height=613, width=905, tile=240, factors=(2, 8), seed=9),
    "no_mpp": dict(height=300, width=400, tile=128, factors=(2,), mpp=0, label=False, macro=False),
}


@pytest.fixture(scope="module")
def slides(tmp_path_factory):
    d = tmp_path_factory.mktemp("slides")
    out = {}
    for name, kw in SLIDES.items():
        path = d / f"{name}.svs"
        slide_synth.write_svs(str(path), **kw)
        out[name] = path
    return out


@needs_openslide
@pytest.mark.parametrize("name", list(SLIDES))
def test_info_matches_openslide(slides, name):
    path = slides[name]
    osl = openslide.OpenSlide(str(path))
    got = info(path, "openslide.objective-power", "openslide.vendor", "openslide.mpp-x", "aperio.AppMag", "nothing")
    assert got["format"] == "slide" and got["vendor"] == "aperio"
    assert got["dtype"] == "uint8" and got["n_dims"] == 2 and got["channels"] == 3
    assert [tuple(lv["dims"]) for lv in got["levels"]] == [(1, h, w) for w, h in osl.level_dimensions]
    # Debian's OpenSlide and the wheel's compute the same downsample (the
    # mean of the two ratios) for these levels.
    np.testing.assert_allclose([lv["downsample"] for lv in got["levels"]], osl.level_downsamples, rtol=1e-12)
    assert got["levels"][0]["downsample"] == 1
    mpp = SLIDES[name].get("mpp", 0.25)
    np.testing.assert_allclose(got["spacing"], [0, mpp / 1000, mpp / 1000], rtol=1e-12)
    tile = SLIDES[name].get("tile", 240)
    assert got["tile"] == [1, tile, tile]
    props = got["properties"]
    assert props["openslide.objective-power"] == osl.properties["openslide.objective-power"] == "40"
    assert props["openslide.vendor"] == "aperio"
    assert props["openslide.mpp-x"] == osl.properties.get("openslide.mpp-x")
    assert props["aperio.AppMag"] == "40" and props["nothing"] is None


@needs_openslide
@pytest.mark.parametrize("name", list(SLIDES))
def test_levels_match_openslide(slides, name, tmp_path):
    path = slides[name]
    osl = openslide.OpenSlide(str(path))
    tile = SLIDES[name].get("tile", 240)
    boxes = []
    for level, (w, h) in enumerate(osl.level_dimensions):
        boxes += [(level, *b) for b in edge_boxes(h, w, tile)]
    got = regions(path, tmp_path, boxes)
    for box, g in zip(boxes, got):
        ref = reference(osl, *box)
        assert g.shape == ref.shape == (3, box[3], box[4]), box
        diff = np.abs(g.astype(int) - ref)
        assert diff.max() <= TOL(osl, box[0]), f"{name} box {box}: {np.count_nonzero(diff)} samples differ, by up to {diff.max()}"


@needs_openslide
@pytest.mark.parametrize("name", ["svs", "tile240_uneven"])
def test_levels_match_tifffile(slides, name, tmp_path):
    """Beside OpenSlide, a reader that shares none of its code: tifffile
    (imagecodecs' libjpeg-turbo) decodes each level's page to the same
    pixels, so that a mix-up common to both OpenSlides would show."""
    import tifffile

    with tifffile.TiffFile(slides[name]) as tf:
        pages = [tf.pages[0]] + [p for p in tf.pages[2:] if p.is_tiled]
        want = [p.asarray() for p in pages]
    got = regions(slides[name], tmp_path, [(lv, 0, 0, *w.shape[:2]) for lv, w in enumerate(want)])
    assert len(got) == len(info(slides[name])["levels"])
    for lv, (g, w) in enumerate(zip(got, want)):
        assert np.array_equal(g.transpose(1, 2, 0), w), f"level {lv}"


@needs_openslide
def test_large_box_in_pieces(tmp_path):
    """A box of more than one piece (4 Mi pixels) equals OpenSlide's."""
    path = tmp_path / "big.svs"
    slide_synth.write_svs(str(path), height=2304, width=2050, tile=256, factors=(4,), label=False, macro=False)
    osl = openslide.OpenSlide(str(path))
    box = (0, 3, 1, 2300, 2049)
    (g,) = regions(path, tmp_path, [box])
    assert np.array_equal(g, reference(osl, *box))


@needs_openslide
def test_associated_images(slides, tmp_path):
    path = slides["svs"]
    osl = openslide.OpenSlide(str(path))
    got = info(path)["associated"]
    assert sorted(got) == sorted(osl.associated_images) == ["label", "macro", "thumbnail"]
    for name, im in osl.associated_images.items():
        assert got[name] == [im.size[1], im.size[0]]
        out = tmp_path / f"{name}.npy"
        run(path, "assoc", out, name)
        assert np.array_equal(np.load(out), rgb_planes(im)), name
    # The label was written losslessly (LZW): exactly the picture.
    label = np.load(tmp_path / "label.npy").transpose(1, 2, 0)
    assert np.array_equal(label, slide_synth.picture(120, 100, 1))
    p = run(path, "assoc", tmp_path / "x.npy", "barcode", check=1)
    assert "INVALID_ARGUMENT" in p.stderr and "barcode" in p.stderr and str(path) in p.stderr


@needs_openslide
def test_generic_tiff_stays_tiff_unless_asked(tmp_path):
    path = tmp_path / "generic.tif"
    slide_synth.write_generic_tiff(str(path))
    assert openslide.OpenSlide.detect_format(str(path)) == "generic-tiff"
    assert info(path)["format"] == "tiff"
    got = info(path, slide=True)
    assert got["format"] == "slide" and got["vendor"] == "generic-tiff"
    osl = openslide.OpenSlide(str(path))
    boxes = [(0, *b) for b in edge_boxes(500, 600, 128)]
    for box, g in zip(boxes, regions(path, tmp_path, boxes, slide=True)):
        assert np.array_equal(g, reference(osl, *box)), box


@needs_openslide
def test_not_a_slide(tmp_path):
    path = tmp_path / "a.npy"
    np.save(path, np.zeros((4, 5), np.uint8))
    assert info(path)["format"] == "npy"
    p = run("--slide", path, "info", check=1)
    assert p.stderr.startswith("SEGRT_ERROR_UNSUPPORTED") and str(path) in p.stderr


@needs_openslide
def test_box_outside_level(slides, tmp_path):
    path = slides["svs"]
    for box in [(1, 0, 0, 251, 300), (1, 250, 0, 1, 1), (0, 0, -1, 2, 2), (3, 0, 0, 1, 1), (0, 0, 0, 0, 5)]:
        p = run(path, "region", tmp_path / "o.npy", *box, check=1)
        assert p.stderr.startswith("SEGRT_ERROR_INVALID_ARGUMENT") and str(path) in p.stderr, (box, p.stderr)


def one_line_naming(p, path):
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0], p.stderr
    status = lines[0].split(":")[0]
    assert status in ("SEGRT_ERROR_INVALID_MODEL", "SEGRT_ERROR_IO", "SEGRT_ERROR_UNSUPPORTED"), lines[0]
    return lines[0]


def read_everything(path, tmp_path):
    """Opens path and reads each level whole and the associated images,
    through the slide opener; the first failure (or None)."""
    p = run("--slide", path, "info", check=None)
    if p.returncode != 0:
        return p
    got = json.loads(p.stdout)
    boxes = [v for i, lv in enumerate(got["levels"]) for v in (i, 0, 0, lv["dims"][1], lv["dims"][2])]
    p = run("--slide", path, "region", tmp_path / "c.npy", *boxes, check=None)
    if p.returncode != 0:
        return p
    for name in got["associated"]:
        p = run("--slide", path, "assoc", tmp_path / "a.npy", name, check=None)
        if p.returncode != 0:
            return p
    return None


@needs_openslide
def test_truncated_slides(slides, tmp_path):
    data = slides["svs"].read_bytes()
    failed = 0
    for frac in (0.0, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.999):
        path = tmp_path / f"cut{frac}.svs"
        path.write_bytes(data[: int(len(data) * frac)])
        p = read_everything(path, tmp_path)
        if p is not None:
            assert p.returncode == 1, p.stderr
            one_line_naming(p, path)
            failed += 1
    # Every cut loses tiles (the levels are written last to first page
    # order, the tiles before the directories that follow them).
    assert failed == 8


@needs_openslide
def test_flipped_bytes(slides, tmp_path):
    """Bytes flipped in tiles and headers: each read either succeeds or
    fails with one line naming the file; a JPEG's markers broken makes it
    fail."""
    data = bytearray(slides["svs"].read_bytes())
    rng = np.random.default_rng(1)
    for i in range(24):
        bad = bytearray(data)
        for at in rng.integers(8, len(bad), size=1 + i % 4):
            bad[at] ^= 0xFF
        path = tmp_path / f"flip{i}.svs"
        path.write_bytes(bytes(bad))
        p = read_everything(path, tmp_path)
        if p is not None:
            assert p.returncode == 1
            one_line_naming(p, path)
    # Every JPEG start-of-image marker of the file broken: no tile decodes.
    bad = bytes(data).replace(b"\xff\xd8\xff", b"\x00\xd8\xff")
    path = tmp_path / "nosoi.svs"
    path.write_bytes(bad)
    p = read_everything(path, tmp_path)
    assert p is not None and "INVALID_MODEL" in one_line_naming(p, path)


@pytest.mark.skipif(HAVE_OPENSLIDE, reason="segrt built with OpenSlide")
def test_without_openslide(slides, tmp_path):
    """A build without OpenSlide refuses the slide opener by name and reads
    an SVS through the TIFF source."""
    path = slides["svs"]
    p = run("--slide", path, "info", check=1)
    assert "UNSUPPORTED" in p.stderr and "without OpenSlide" in p.stderr and str(path) in p.stderr
    assert info(path)["format"] == "tiff"


def test_other_formats_downsample(tmp_path):
    """Formats without a downsample of their own get the exact ratio of
    level 0's width to the level's (source.c)."""
    import tifffile

    path = tmp_path / "pyramid.tif"
    img = slide_synth.picture(200, 600, 4)
    with tifffile.TiffWriter(path) as tw:
        tw.write(img, tile=(64, 64), photometric="rgb", metadata=None)
        for f in (4, 16):
            tw.write(slide_synth.reduce(img, f), tile=(16, 16), photometric="rgb", metadata=None, subfiletype=1)
    got = info(path)
    assert got["format"] == "tiff" and got["vendor"] is None
    assert [lv["downsample"] for lv in got["levels"]] == [1, 600 / 150, 600 / 37]
    npy = tmp_path / "a.npy"
    np.save(npy, np.zeros((1, 3, 4, 5), np.float32))
    assert [lv["downsample"] for lv in info(npy)["levels"]] == [1]


@needs_openslide
def test_huge_tile_refused_before_openslide(slides, tmp_path):
    """A header whose tile would decode to gigabytes is refused by segrt's
    own check: OpenSlide would ask g_malloc for it, which aborts."""
    import tifffile

    data = bytearray(slides["svs"].read_bytes())
    with tifffile.TiffFile(slides["svs"]) as tf:
        tags = tf.pages[0].tags
        at = [(tags[t].valueoffset, tags[t].dtype) for t in (322, 323)]
    for off, dtype in at:
        size = 2 if int(dtype) == 3 else 4
        data[off : off + size] = (32768).to_bytes(size, "little")
    path = tmp_path / "hugetile.svs"
    path.write_bytes(bytes(data))
    for args in ([path, "info"], ["--slide", path, "info"]):
        p = run(*args, check=1)
        line = one_line_naming(p, path)
        assert line.startswith("SEGRT_ERROR_INVALID_MODEL") and "32768 x 32768" in line, line


@needs_openslide
def test_huge_tag_count_refused_before_openslide(slides, tmp_path):
    """A tag whose count would take more than the file (found by
    fuzz_slide) is refused: OpenSlide's own TIFF parser allocates the count
    before it reads, gigabytes here."""
    import tifffile

    data = bytearray(slides["svs"].read_bytes())
    with tifffile.TiffFile(slides["svs"]) as tf:
        tag = tf.pages[0].tags[282]  # XResolution, RATIONAL: 8 bytes a value
        # the entry's count follows its 2-byte code and 2-byte type
        at = tag.offset + 4
    data[at : at + 4] = (3_000_000_000).to_bytes(4, "little")
    path = tmp_path / "hugecount.svs"
    path.write_bytes(bytes(data))
    line = one_line_naming(run("--slide", path, "info", check=1), path)
    assert "tag 282 has 3000000000 values, more than the file holds" in line, line


@needs_openslide
def test_aperio_level_larger_than_level0_refused(slides, tmp_path):
    """An Aperio level more than twice as wide as page 0 makes OpenSlide
    3.4 divide by zero (SIGFPE, found by fuzz_slide): refused first."""
    import tifffile

    data = bytearray(slides["svs"].read_bytes())
    with tifffile.TiffFile(slides["svs"]) as tf:
        tag = tf.pages[2].tags[256]  # ImageWidth of the first reduced level
        off, size = tag.valueoffset, 2 if int(tag.dtype) == 3 else 4
    data[off : off + size] = (3 * 1200).to_bytes(size, "little")
    path = tmp_path / "wide.svs"
    path.write_bytes(bytes(data))
    for args in ([path, "info"], ["--slide", path, "info"]):
        line = one_line_naming(run(*args, check=1), path)
        assert "bad Aperio slide: a level of 3600 x 250 after one of 1200 x 1000" in line, line


# --- a level's JPEG tiles for the device's decoder (io/slide_tiles.c) --------


@needs_openslide
@pytest.mark.parametrize("compression", ["jpeg", "pil", "pil-tables", "pil-rgb"])
def test_jpeg_tiles_as_complete_streams(tmp_path, compression):
    """Each tile's stream as segrt hands it to the GPU's decoder (the
    level's JPEGTables spliced in where the file keeps the tables there)
    decodes, through Pillow's libjpeg, to the tile tifffile decodes from the
    file: the splice loses and adds nothing."""
    import tifffile
    from PIL import Image

    path = tmp_path / "s.svs"
    slide_synth.write_svs(str(path), height=600, width=520, tile=128, factors=(4,), label=False, macro=False,
                          compression=compression)
    out = tmp_path / "tiles"
    out.mkdir()
    picks = [(0, 0), (1, 2), (4, 4), (4, 0)]
    p = run("--slide", path, "tiles", 0, out, *[v for rc in picks for v in rc])
    ti = json.loads(p.stdout)
    assert (ti["tile_w"], ti["tile_h"], ti["across"], ti["down"]) == (128, 128, 5, 5)
    assert ti["ycbcr"] == (compression != "pil-rgb")
    with tifffile.TiffFile(path) as t:
        assert ("JPEGTables" in t.pages[0].tags) == (compression == "pil-tables")
        level = t.pages[0].asarray()
    for r, c in picks:
        got = np.asarray(Image.open(out / f"{r}_{c}.jpg").convert("RGB")).astype(int)
        want = level[r * 128:(r + 1) * 128, c * 128:(c + 1) * 128].astype(int)
        d = np.abs(got[:want.shape[0], :want.shape[1]] - want)
        assert got.shape == (128, 128, 3) and d.max() <= 1, (r, c, d.max())


@needs_openslide
@pytest.mark.parametrize("compression,factor", [("pil", 1), ("pil-tables", 2), ("pil-rgb", 1)])
def test_device_reader_ring(tmp_path, compression, factor):
    """The device reader's decoder thread, ring and steps (pipeline/
    slide_gpu.c) on a host stand-in for the device (segrt_slide's ring):
    rows asked in pieces, forwards in order, then backwards and past what is
    decoded (each a restart of the thread), then all at once, equal the rows
    made from the tiles directly; a pass in order decodes each tile once."""
    path = tmp_path / "s.svs"
    slide_synth.write_svs(str(path), height=1000, width=1200, tile=112, factors=(4,), label=False, macro=False,
                          compression=compression)
    n = (1000 + factor - 1) // factor
    once = run("--slide", path, "ring", 0, factor, f"0:{n // 3}", f"{n // 3}:{n // 3 + 1}", f"{n // 3 + 1}:{n}")
    r = json.loads(once.stdout)
    assert r == {"rows": n, "tiles": 9 * 11, "engine": "the host stand-in"}, r
    jumps = ["0:40", f"{n - 30}:{n}", "10:20", f"{n // 2}:{n // 2 + 7}", "5:6", f"0:{n}"]
    r = json.loads(run("--slide", path, "ring", 0, factor, *jumps).stdout)
    assert r["rows"] == 40 + 30 + 10 + 7 + 1 + n and r["tiles"] > 9 * 11, r


def test_jpeg_tiles_of_other_levels_are_refused(tmp_path):
    """A level of deflated tiles is not the JPEG decoder's: UNSUPPORTED with
    the reason (the job then reads it through OpenSlide); a tile whose frame
    header is not the tile's size is refused by name."""
    path = tmp_path / "z.svs"
    slide_synth.write_svs(str(path), height=300, width=260, tile=128, factors=(4,), label=False, macro=False,
                          compression="zlib")
    p = run("--slide", path, "tiles", 0, tmp_path, 0, 0)
    assert "tiles not JPEG" in json.loads(p.stdout)["unsupported"]
    bad = tmp_path / "bad.svs"
    slide_synth.write_svs(str(bad), height=300, width=260, tile=128, factors=(4,), label=False, macro=False,
                          compression="pil")
    import tifffile

    with tifffile.TiffFile(bad) as t:
        off, n = t.pages[0].dataoffsets[1], t.pages[0].databytecounts[1]
    data = bytearray(bad.read_bytes())
    sof = data.find(b"\xff\xc0", off, off + n)
    data[sof + 7:sof + 9] = (4096).to_bytes(2, "big")  # the frame's width
    bad.write_bytes(bytes(data))
    run("--slide", bad, "tiles", 0, tmp_path, 0, 0)  # tile (0, 0) is whole
    p = run("--slide", bad, "tiles", 0, tmp_path, 0, 1, check=1)
    assert "INVALID_MODEL" in p.stderr and "tile (0, 1)" in p.stderr and str(bad) in p.stderr
