"""The tissue mask (src/pipeline/tissue.c, through segrt_slide's `tissue`)
against numpy and skimage on slides of known geometry that the test writes
(slide_synth.write_tissue_svs: stained blobs with holes, specks of debris,
a black border, on glass).

The reference reads the level segrt chose with openslide-python (equal
pixels: the levels' downsamples are whole numbers, see test_slide.py),
computes the saturation bins q = round(255 (max - min) / max) in integers
(each f x f block averaged first where segrt reduces the coarsest level),
leaves out pixels darker than SG_TISSUE_DARK, and takes
skimage.filters.threshold_otsu of the rest: segrt's threshold must be
within one bin of it. Given segrt's threshold, the mask must equal
skimage's remove_small_objects (connectivity 2) then remove_small_holes
(connectivity 1) of the thresholded bins exactly, with the sizes that the
slide's mpp gives for the options. sg_tissue_box is checked against the
footprint test done pixel by pixel on many random boxes."""
import inspect
import json
import os
import pathlib
import re
import subprocess

import numpy as np
import pytest

import slide_synth

ROOT = pathlib.Path(__file__).resolve().parents[2]
SLIDE = os.environ.get("SEGRT_SLIDE", str(ROOT / "build-cpu" / "tests" / "segrt_slide"))
HAVE_OPENSLIDE = os.environ.get("SEGRT_HAVE_OPENSLIDE", "1") == "1"

openslide = pytest.importorskip("openslide")
skf = pytest.importorskip("skimage.filters")
skm = pytest.importorskip("skimage.morphology")
Image = pytest.importorskip("PIL.Image")

pytestmark = pytest.mark.skipif(not HAVE_OPENSLIDE, reason="segrt built without OpenSlide")


def header_value(name):
    """A #define of src/pipeline/tissue.h (the reference uses the same constants)."""
    text = (ROOT / "src" / "pipeline" / "tissue.h").read_text()
    return float(re.search(rf"#define {name} (\S+)", text).group(1))


DARK = int(header_value("SG_TISSUE_DARK"))
MIN_BIN = int(header_value("SG_TISSUE_MIN_BIN"))
DEFAULT_PIXELS = header_value("SG_TISSUE_DEFAULT_PIXELS")
DEFAULT_UM2 = header_value("SG_TISSUE_DEFAULT_UM2")
DEFAULT_PX = header_value("SG_TISSUE_DEFAULT_PX")

E, H = slide_synth.EOSIN, slide_synth.HAEMATOXYLIN
# Level 0 is 3000 x 4000 (mpp 0.25); levels 1 and 2 are 4 and 16 times
# smaller. Blobs of tissue with holes small and large, specks of several
# sizes (kept or dropped by the size options), one blob touching the edge.
GEOMETRY = dict(
    blobs=[(900, 1100, 600, 800, E), (2200, 2900, 500, 700, H), (2700, 700, 400, 300, E), (300, 3700, 500, 500, H)],
    holes=[(900, 1100, 40), (950, 700, 16), (2200, 2900, 260), (2150, 3300, 24), (2700, 700, 120)],
    specks=[(2000, 500, 12), (1800, 1800, 30), (400, 2400, 60), (2900, 3900, 90), (150, 300, 6, E)],
    dark_border=40,
    # Cells of 8 level-0 pixels: 2 x 2 pixels of level 1, one piece of tissue
    # only 8-connected, its glass cells holes only 4-connected.
    checkers=[(1600, 1600, 256, 8, H)],
)


def run(*args, check=0):
    p = subprocess.run([SLIDE, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert p.returncode >= 0, f"killed by signal {-p.returncode}: {p.stderr}"
    if check is not None:
        assert p.returncode == check, f"exit {p.returncode}: {p.stderr}{p.stdout}"
    return p


def tissue(path, tmp_path, max_px=0, min_obj=0, min_hole=0, boxes=None):
    """segrt's mask, its JSON and (with boxes) sg_tissue_box's answers."""
    out, png = tmp_path / "mask.npy", tmp_path / "mask.png"
    args = [path, "tissue", out, max_px, min_obj, min_hole, png]
    if boxes is not None:
        np.save(tmp_path / "boxes.npy", np.asarray(boxes, np.float64))
        args += [tmp_path / "boxes.npy", tmp_path / "hits.npy"]
    p = run(*args)
    got = json.loads(p.stdout)
    mask = np.load(out)
    assert mask.dtype == np.uint8 and mask.shape == (got["height"], got["width"])
    png_mask = np.asarray(Image.open(png))
    assert png_mask.dtype == np.uint8 and np.array_equal(png_mask, mask * 255)
    hits = np.load(tmp_path / "hits.npy") if boxes is not None else None
    return got, mask, hits


def level_choice(osl, max_px):
    """The level and reduction tissue.h describes."""
    for lvl, (w, h) in enumerate(osl.level_dimensions):
        if w * h <= max_px:
            return lvl, 1
    lvl = osl.level_count - 1
    w, h = osl.level_dimensions[lvl]
    f = max(2, int(np.ceil(np.sqrt(w * h / max_px))))
    while -(-h // f) * -(-w // f) > max_px:
        f += 1
    return lvl, f


def level_rgb(osl, lvl, f):
    """The level as openslide-python reads it, int64 (h, w, 3); each f x f
    block (partial at the edges) averaged, rounded half up, where f > 1."""
    w, h = osl.level_dimensions[lvl]
    a = np.asarray(osl.read_region((0, 0), lvl, (w, h)))
    rgb = a[..., :3].astype(np.int64)
    rgb[a[..., 3] == 0] = 255
    if f == 1:
        return rgb
    H, W = -(-h // f), -(-w // f)
    pad = np.zeros((H * f, W * f, 3), np.int64)
    cnt = np.zeros((H * f, W * f, 1), np.int64)
    pad[:h, :w] = rgb
    cnt[:h, :w] = 1
    s = pad.reshape(H, f, W, f, 3).sum(axis=(1, 3))
    n = cnt.reshape(H, f, W, f, 1).sum(axis=(1, 3))
    return (s + n // 2) // n


def saturation_bins(rgb):
    mx, mn = rgb.max(axis=-1), rgb.min(axis=-1)
    q = np.where(mx > 0, (255 * (mx - mn) + mx // 2) // np.maximum(mx, 1), 0)
    return q.astype(np.uint8), mx >= DARK


def skimage_clean(raw, min_object_px, min_hole_px):
    """remove_small_objects (8-connected) then remove_small_holes
    (4-connected), removing components of fewer than the given pixels."""
    def below(px):
        return max(int(np.ceil(px)) - 1, 0)  # the largest whole size removed
    new_api = "max_size" in inspect.signature(skm.remove_small_objects).parameters
    if new_api:
        m = skm.remove_small_objects(raw, max_size=below(min_object_px), connectivity=2)
        return skm.remove_small_holes(m, max_size=below(min_hole_px), connectivity=1)
    m = skm.remove_small_objects(raw, min_size=below(min_object_px) + 1, connectivity=2)
    return skm.remove_small_holes(m, area_threshold=below(min_hole_px) + 1, connectivity=1)


def expected_px(osl, size, default, scale):
    """A size option in mask pixels: um^2 through mpp (pixels without)."""
    mpp_x = float(osl.properties.get("openslide.mpp-x", 0) or 0)
    mpp_y = float(osl.properties.get("openslide.mpp-y", 0) or 0)
    area = scale * scale * mpp_x * mpp_y if mpp_x > 0 and mpp_y > 0 else 0
    if size < 0:
        return 0.0
    if size == 0:
        return DEFAULT_UM2 / area if area else DEFAULT_PX
    return size / area if area else float(size)


def check_against_reference(path, got, mask, max_px, min_obj, min_hole):
    osl = openslide.OpenSlide(str(path))
    lvl, f = level_choice(osl, max_px or DEFAULT_PIXELS)
    assert (got["level"], got["reduce"]) == (lvl, f)
    scale = osl.level_downsamples[lvl] * f
    assert got["scale"] == pytest.approx([scale, scale], rel=1e-12)
    assert got["min_object_px"] == pytest.approx(expected_px(osl, min_obj, DEFAULT_UM2, scale), rel=1e-12)
    assert got["min_hole_px"] == pytest.approx(expected_px(osl, min_hole, DEFAULT_UM2, scale), rel=1e-12)
    q, bright = saturation_bins(level_rgb(osl, lvl, f))
    assert mask.shape == q.shape
    t = int(round(got["threshold"] * 255))
    vals = q[bright]
    if len(np.unique(vals)) > 1:
        want = float(skf.threshold_otsu(vals))
        assert abs(t - want) <= 1, (t, want)
        raw = bright & (q > max(t, MIN_BIN))
    else:
        raw = np.zeros_like(bright)
    ref = skimage_clean(raw, got["min_object_px"], got["min_hole_px"])
    diff = np.argwhere(ref != mask.astype(bool))
    assert len(diff) == 0, f"{len(diff)} pixels differ, first at {diff[:5].tolist()}"
    return raw, ref


@pytest.fixture(scope="module")
def slides(tmp_path_factory):
    d = tmp_path_factory.mktemp("tissue")
    out = {}
    out["tissue"] = d / "tissue.svs"
    slide_synth.write_tissue_svs(str(out["tissue"]), **GEOMETRY)
    out["no_mpp"] = d / "no_mpp.svs"
    slide_synth.write_tissue_svs(str(out["no_mpp"]), height=1200, width=1600, factors=(4,), mpp=0, seed=4,
                                 blobs=[(600, 800, 400, 600, H)], holes=[(600, 800, 50), (500, 500, 12)],
                                 specks=[(100, 100, 10), (1100, 1500, 30)])
    out["glass"] = d / "glass.svs"
    slide_synth.write_tissue_svs(str(out["glass"]), height=1000, width=1200, factors=(4,), seed=5, white=True)
    out["white"] = d / "white.svs"
    slide_synth.write_tissue_svs(str(out["white"]), height=1000, width=1200, factors=(4,), seed=6, white=True,
                                 glass=255, noise=0)
    return out


# (max_mask_pixels, min_object_um2, min_hole_um2): the defaults (level 1),
# a coarser level, the coarsest reduced, sizes given and sizes off.
CASES = {
    "defaults": (0, 0, 0),
    "level1-sizes": (0, 500, 500),
    "level2-sizes": (60000, 2000, 30000),
    "reduced-coarsest": (12000, 0, 0),
    "reduced-odd": (5000, 50000, 5000),
    "no-cleaning": (0, -1, -1),
}


@pytest.mark.parametrize("case", list(CASES))
def test_mask_matches_skimage(slides, tmp_path, case):
    max_px, min_obj, min_hole = CASES[case]
    got, mask, _ = tissue(slides["tissue"], tmp_path, max_px, min_obj, min_hole)
    raw, ref = check_against_reference(slides["tissue"], got, mask, max_px, min_obj, min_hole)
    # The slide's tissue is found and the case exercises what it is for.
    assert 0.05 < mask.mean() < 0.6
    if case == "defaults":
        assert (raw & ~ref).any() and (ref & ~raw).any()  # specks dropped, holes filled
        # The black border is never tissue; its saturation would be.
        cols = int(np.ceil(GEOMETRY["dark_border"] / got["scale"][1]))
        assert not mask[:, : cols - 1].any()
    if case == "level1-sizes":
        # The checker is one piece (8-connected) with its glass filled
        # (4-connected holes): solid but at its edge, where JPEG blurs.
        y0, x0, size = (v // 4 for v in GEOMETRY["checkers"][0][:3])
        assert mask[y0 + 2: y0 + size - 2, x0 + 2: x0 + size - 2].all()
    if case == "no-cleaning":
        assert np.array_equal(raw, ref)


def test_no_mpp_sizes_in_pixels(slides, tmp_path):
    for sizes in ((0, 0), (150, 40)):
        got, mask, _ = tissue(slides["no_mpp"], tmp_path, 0, *sizes)
        check_against_reference(slides["no_mpp"], got, mask, 0, *sizes)
        assert mask.any()


@pytest.mark.parametrize("name", ["glass", "white"])
def test_background_only_is_empty(slides, tmp_path, name):
    got, mask, _ = tissue(slides[name], tmp_path, 0, -1, -1)
    check_against_reference(slides[name], got, mask, 0, -1, -1)
    assert not mask.any()


def footprint_hits(mask, scale, boxes):
    """The box test pixel by pixel: a mask pixel counts when
    [i s, (i+1) s) overlaps [y0, y0 + h) (and the same along x)."""
    H, W = mask.shape
    iy, ix = np.arange(H, dtype=np.float64), np.arange(W, dtype=np.float64)
    out = []
    for y0, x0, h, w in boxes:
        ry = (iy * scale[0] < y0 + h) & ((iy + 1) * scale[0] > y0)
        rx = (ix * scale[1] < x0 + w) & ((ix + 1) * scale[1] > x0)
        out.append(bool(h > 0 and w > 0 and mask[np.ix_(ry, rx)].any()))
    return np.array(out)


@pytest.mark.parametrize("case", ["defaults", "reduced-odd"])
def test_box_queries(slides, tmp_path, case):
    max_px, min_obj, min_hole = CASES[case]
    got, _, _ = tissue(slides["tissue"], tmp_path, max_px, min_obj, min_hole)
    s = got["scale"][0]
    rng = np.random.default_rng(7)
    n = 4000
    H0, W0 = 3000, 4000
    boxes = np.stack([rng.uniform(-300, H0 + 100, n), rng.uniform(-300, W0 + 100, n),
                      rng.uniform(-5, 700, n), rng.uniform(-5, 700, n)], axis=1)
    # Windows of a slide job: whole numbers; small boxes; boxes on the
    # footprints' edges exactly (start or end at i * scale) and one pixel off.
    boxes[: n // 4] = np.round(boxes[: n // 4])
    boxes[n // 4: n // 2, 2:] = rng.uniform(0, 2 * s, (n // 4, 2))
    k = rng.integers(0, 200, (n // 4, 2)) * s
    boxes[n // 2: 3 * n // 4, :2] = k + rng.choice([-1.0, 0.0, 1.0, 0.5], (n // 4, 2)) * rng.choice([0, 1e-9, 1], (n // 4, 1))
    boxes[3 * n // 4:, :2] = rng.integers(0, 200, (n // 4, 2)) * s - boxes[3 * n // 4:, 2:]
    got, mask, hits = tissue(slides["tissue"], tmp_path, max_px, min_obj, min_hole, boxes)
    want = footprint_hits(mask, got["scale"], boxes)
    bad = np.flatnonzero(hits.astype(bool) != want)
    assert len(bad) == 0, boxes[bad[:5]].tolist()
    assert 0.1 < want.mean() < 0.9  # both answers are exercised
    # The whole slide touches tissue; a box of glass does not.
    _, _, hits = tissue(slides["tissue"], tmp_path, max_px, min_obj, min_hole, [[0, 0, H0, W0], [1500, 2000, 1, 1]])
    assert hits.tolist() == [1, bool(mask[int(1500 // s), int(2000 // s)])]


def one_line_naming(p, path):
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0], p.stderr
    return lines[0]


def test_corrupt_slides(slides, tmp_path):
    data = slides["tissue"].read_bytes()
    cases = {
        "nosoi.svs": data.replace(b"\xff\xd8\xff", b"\x00\xd8\xff"),  # no tile decodes
        "cut.svs": data[: len(data) // 2],
        "empty.svs": b"",
        "text.svs": b"not a slide at all\n" * 10,
    }
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        p = run(path, "tissue", tmp_path / "m.npy", 0, 0, 0, check=None)
        assert p.returncode == 2, (name, p.returncode, p.stderr)
        one_line_naming(p, path)
        assert not (tmp_path / "m.npy").exists()


def test_not_rgb(tmp_path):
    """A source that is not 2-D RGB uint8 (a grey PNG) is refused by name."""
    path = tmp_path / "grey.png"
    Image.fromarray(np.zeros((20, 30), np.uint8)).save(path)
    p = run(path, "tissue", tmp_path / "m.npy", 0, 0, 0, check=2)
    assert "INVALID_ARGUMENT" in one_line_naming(p, path)


def test_bad_options(slides, tmp_path):
    """max_mask_pixels below 0 or past 2^31 - 1, or a size that is not a
    number: refused by name before anything is read."""
    for opts in ((-5, 0, 0), (1e12, 0, 0), (0, "nan", 0), (0, 0, "nan")):
        p = run(slides["tissue"], "tissue", tmp_path / "m.npy", *opts, check=2)
        assert "INVALID_ARGUMENT" in one_line_naming(p, slides["tissue"])
        assert not (tmp_path / "m.npy").exists()
