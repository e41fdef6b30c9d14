"""Label regions as GeoJSON polygons (src/pipeline/geojson.c) through its
driver (segrt_geojson.c), against scipy and shapely: on label maps made
here (blobs of smoothed noise with holes and islands, independent random
pixels, nested squares, checkerboards of diagonal-only contacts, pockets
that meet the outside at a corner, chains of holes meeting at corners,
regions on every border, single pixels, strips) and several scales and
offsets, every pixel centre is tested against the polygons (shapely), and
each feature must cover exactly one of scipy.ndimage.label's 4-connected
regions of its label, each region exactly one feature; every polygon valid
(shapely), exterior counter-clockwise and holes clockwise, rings closed,
on the pixel grid, without collinear vertices; the properties QuPath's
import reads; a 6000 x 6000 map of thousands of regions with its peak
memory bounded; and refusals (bad scale, offset, dims, names, paths) that
name the file and leave nothing behind."""
import json
import math
import os
import pathlib
import resource
import signal
import subprocess

import numpy as np
import pytest
import scipy.ndimage as ndi
import shapely

ROOT = pathlib.Path(__file__).resolve().parents[2]
DRIVER = os.environ.get("SEGRT_GEOJSON", str(ROOT / "build" / "tests" / "segrt_geojson"))
SANITIZED = os.environ.get("SEGRT_SANITIZED", "0") == "1"
FOUR = ndi.generate_binary_structure(2, 1)  # the writer's connectivity


def run(tmp_path, labels, scale=(1.0, 1.0), offset=(0.0, 0.0), extra=(), name="out.geojson", preexec=None):
    """Writes labels through the driver; returns (process, output path)."""
    src = tmp_path / "labels.npy"
    np.save(src, np.ascontiguousarray(labels, np.uint8))
    out = tmp_path / name
    args = [DRIVER, str(src), str(out)] + [repr(float(v)) if not isinstance(v, str) else v
                                           for v in (*scale, *offset)]
    p = subprocess.run(args + [a if isinstance(a, bytes) else str(a) for a in extra], capture_output=True,
                       timeout=600, preexec_fn=preexec)
    p.stdout, p.stderr = p.stdout.decode(), p.stderr.decode(errors="replace")
    return p, out


def write(tmp_path, labels, scale=(1.0, 1.0), offset=(0.0, 0.0), extra=()):
    p, out = run(tmp_path, labels, scale, offset, extra)
    assert p.returncode == 0, p.stderr
    with open(out, encoding="utf-8") as f:
        return json.load(f, parse_constant=lambda c: pytest.fail(f"non-JSON number {c}"))


def on_grid(v, scale, offset):
    """The grid index whose corner coordinate is v (index * scale + offset,
    as the writer computes it, to 2 ulps); fails when v is none."""
    i = np.rint((v - offset) / scale)
    want = i * scale + offset
    assert np.all(np.abs(v - want) <= 2 * np.spacing(np.maximum(np.abs(want), np.abs(v)))), (v, want)
    return i.astype(np.int64)


def check_ring(ring, scale, offset, shape):
    """A ring closed, along pixel edges inside the map, corners only."""
    a = np.asarray(ring, np.float64)
    assert a.ndim == 2 and a.shape[1] == 2 and len(a) >= 5, ring
    assert tuple(a[0]) == tuple(a[-1]), "ring not closed"
    col, row = on_grid(a[:, 0], scale[1], offset[1]), on_grid(a[:, 1], scale[0], offset[0])
    assert col.min() >= 0 and row.min() >= 0 and col.max() <= shape[1] and row.max() <= shape[0]
    # Axis-parallel edges that alternate between horizontal and vertical,
    # the closing corner included: then no corner is collinear or repeated.
    dx, dy = np.diff(col), np.diff(row)
    assert np.all((dx == 0) != (dy == 0)), "an edge not along the grid, or a repeated vertex"
    horizontal = dy == 0
    assert np.all(horizontal[1:] != horizontal[:-1]) and horizontal[0] != horizontal[-1], "collinear vertices"


def default_color_ok(colors):
    """The default palette: an RGB triple of bytes per label, the same for
    every feature of a label, different for labels 1..16."""
    for c in colors.values():
        assert len(c) == 3 and all(isinstance(v, int) and 0 <= v <= 255 for v in c), c
    small = [tuple(c) for label, c in colors.items() if label <= 16]
    assert len(set(small)) == len(small), colors


def check(labels, geo, scale=(1.0, 1.0), offset=(0.0, 0.0), names=None, colors=None, sample=None):
    """Every check of a written map against scipy's regions. names and
    colors: what the driver was given ({label: ...}); labels not in names
    are "class L", not in colors the default palette. sample: test that
    many random pixel centres instead of all of them."""
    names, colors = names or {}, colors or {}
    h, w = labels.shape
    assert geo["type"] == "FeatureCollection" and set(geo) == {"type", "features"}
    feats = geo["features"]
    assert isinstance(feats, list)
    polys, feat_label, default_colors = [], [], {}
    for f in feats:
        assert set(f) == {"type", "geometry", "properties"} and f["type"] == "Feature"
        g = f["geometry"]
        assert set(g) == {"type", "coordinates"} and g["type"] == "Polygon" and len(g["coordinates"]) >= 1
        for ring in g["coordinates"]:
            check_ring(ring, scale, offset, labels.shape)
        poly = shapely.Polygon(g["coordinates"][0], g["coordinates"][1:])
        assert shapely.is_valid(poly), shapely.is_valid_reason(poly)
        assert shapely.is_ccw(poly.exterior), "exterior ring not counter-clockwise"
        for hole in poly.interiors:
            assert not shapely.is_ccw(hole), "hole not clockwise"
        props = f["properties"]
        assert set(props) == {"objectType", "classification"} and props["objectType"] == "annotation"
        cls = props["classification"]
        assert set(cls) == {"name", "color"} and isinstance(cls["name"], str)
        polys.append(poly)
        feat_label.append(cls)

    # Each pixel centre against every polygon (through an STR tree; centres
    # never lie on an edge, so intersecting is containing).
    if sample is None:
        rows, cols = np.divmod(np.arange(h * w), w)
    else:
        rng = np.random.default_rng(sample)
        rows, cols = rng.integers(0, h, sample), rng.integers(0, w, sample)
    cx, cy = (cols + 0.5) * scale[1] + offset[1], (rows + 0.5) * scale[0] + offset[0]
    tree = shapely.STRtree(polys)
    pt, fi = tree.query(shapely.points(cx, cy), predicate="intersects")
    hits = np.bincount(pt, minlength=len(rows))
    lab = labels[rows, cols]
    assert np.all(hits[lab == 0] == 0), "a polygon covers a pixel of label 0"
    assert np.all(hits[lab != 0] == 1), "a labelled pixel in no polygon, or in two"

    # Which region of scipy's each feature covers: one, whole (by area), of
    # the label its properties name; and every region covered once.
    region = np.zeros(labels.shape, np.int64)
    n_regions = 0
    for v in np.unique(labels[labels != 0]):
        comp, n = ndi.label(labels == v, structure=FOUR)
        region[comp > 0] = comp[comp > 0] + n_regions
        n_regions += n
    sizes = np.bincount(region.ravel(), minlength=n_regions + 1)
    _, first = np.unique(region.ravel(), return_index=True)  # each region's first pixel, raster order
    first = first[1:] if labels.size and region.ravel()[first[0]] == 0 else first
    region_label = labels.ravel()[first]
    assert len(feats) == n_regions, f"{len(feats)} features, {n_regions} regions"
    owner = np.full(n_regions + 1, -1, np.int64)
    for k, p in zip(fi, pt):
        r = region[rows[p], cols[p]]
        assert owner[r] in (-1, k), f"region {r} in features {owner[r]} and {k}"
        owner[r] = k
    feat_region = {int(k): r for r, k in enumerate(owner) if k >= 0}
    assert len(feat_region) == np.count_nonzero(owner >= 0), "a feature covers two regions"
    if sample is None:
        assert len(feat_region) == len(feats), "a feature covers no pixel centre"
    for k, r in feat_region.items():
        v = int(region_label[r - 1])
        assert math.isclose(polys[k].area, sizes[r] * scale[0] * scale[1], rel_tol=1e-9), (polys[k].area, sizes[r])
        cls = feat_label[k]
        assert cls["name"] == names.get(v, f"class {v}"), (cls["name"], v)
        if v in colors:
            assert cls["color"] == list(colors[v]), (cls["color"], v)
        else:
            assert default_colors.setdefault(v, cls["color"]) == cls["color"], "two colours for one label"
    default_color_ok(default_colors)
    # Features come in the order of their regions' first pixels.
    order = [first[r - 1] for k, r in sorted(feat_region.items())]
    assert order == sorted(order), "features out of raster order"
    # Every feature, sampled or not: its area is that of a region of the
    # label it names (as multisets per label).
    name_of = {v: names.get(v, f"class {v}") for v in np.unique(labels[labels != 0]).tolist()}
    for v, nm in name_of.items():
        got = sorted(round(p.area / (scale[0] * scale[1])) for p, c in zip(polys, feat_label) if c["name"] == nm)
        want = sorted(sizes[1:][region_label == v].tolist())
        if list(name_of.values()).count(nm) == 1:
            assert got == want, (v, got[:10], want[:10])
    return polys


# ---- maps with the cases that matter, each made here ----

def pocket():
    """A region that meets itself at a corner around a pixel that meets the
    outside only at that corner: a hole touching the exterior."""
    return np.array([[1, 1, 1, 0], [1, 0, 1, 0], [0, 1, 1, 2], [2, 0, 2, 2]], np.uint8)


def nested():
    """Squares in squares: a region with a hole holding an island of the
    same label (another region) holding a hole holding a pixel of another
    label, and an island of another label touching the first region."""
    a = np.zeros((15, 17), np.uint8)
    a[1:14, 1:16] = 1
    a[3:12, 3:14] = 0
    a[5:10, 5:12] = 1
    a[7, 8] = 0
    a[7, 9] = 2
    a[3:6, 12:14] = 3  # in the first hole, touching the outer ring
    return a


def checkerboards():
    """Pixels meeting only at corners: of one label (each its own region)
    and of two (all touching)."""
    y, x = np.mgrid[0:9, 0:11]
    return [((x + y) % 2).astype(np.uint8), ((x + y) % 2 + 1).astype(np.uint8)]


def diagonal_holes():
    """Holes meeting each other and the exterior at corners: a chain of
    holes inside a square, and a diagonal line of 0 that cuts a square into
    two regions touching at corners."""
    a = np.ones((9, 9), np.uint8)
    for i in range(2, 7):
        a[i, i] = 0
    b = np.full((8, 8), 4, np.uint8)
    for i in range(8):
        b[i, i] = 0
    c = np.ones((7, 7), np.uint8)
    c[1, 1] = c[2, 2] = 0  # a hole touching the corner of another
    c[5, 5] = 0
    c[6, 6] = 0  # a pixel of 0 on the corner, meeting the hole at (5, 5)
    return [a, b, c]


def spiral(n=21):
    """A long region winding inwards, a second label in its gaps."""
    a = np.full((n, n), 2, np.uint8)
    y0, x0, y1, x1 = 0, 0, n - 1, n - 1
    while y0 <= y1 and x0 <= x1:
        a[y0, x0:x1 + 1] = 1
        a[y0:y1 + 1, x1] = 1
        if y1 - y0 >= 2:
            a[y1, x0:x1 + 1] = 1
        if x1 - x0 >= 2:
            a[y0 + 2:y1 + 1, x0] = 1
        y0, x0, y1, x1 = y0 + 2, x0 + 2, y1 - 2, x1 - 2
        if y0 <= y1:
            a[y0 - 1, x0 - 1] = 1  # the turn inwards
    return a


def blobs(rng, shape, k, sigma, salt=0.02):
    """Smoothed noise cut into k labels (0..k-1): blobs with holes and
    islands, with some single pixels of random labels sprinkled on."""
    f = ndi.gaussian_filter(rng.standard_normal(shape), sigma)
    cuts = np.quantile(f, np.linspace(0, 1, k + 1)[1:-1])
    a = np.digitize(f, cuts).astype(np.uint8)
    s = rng.random(shape) < salt
    a[s] = rng.integers(0, k, int(s.sum()))
    return a


def small_maps():
    out = [("pocket", pocket()), ("nested", nested()), ("spiral", spiral())]
    out += [(f"checker{i}", a) for i, a in enumerate(checkerboards())]
    out += [(f"diagonal{i}", a) for i, a in enumerate(diagonal_holes())]
    out += [("full", np.full((5, 7), 3, np.uint8)), ("zeros", np.zeros((4, 6), np.uint8)),
            ("one", np.full((1, 1), 9, np.uint8)), ("one0", np.zeros((1, 1), np.uint8)),
            ("row", np.array([[1, 1, 0, 2, 2, 2, 0, 1]], np.uint8)),
            ("column", np.array([[1], [1], [0], [255], [254], [254]], np.uint8)),
            ("high", np.array([[255, 254, 255], [254, 255, 254], [255, 254, 255]], np.uint8))]
    return out


SCALES = [((1.0, 1.0), (0.0, 0.0)), ((16.0, 16.0), (0.0, 0.0)), ((0.25, 3.5), (-7.5, 1e6)),
          ((0.1, 0.3), (0.7, -0.2)), ((2.0 ** -10, 1e3), (123456789.125, -5.0))]


@pytest.mark.parametrize("name,labels", small_maps(), ids=[n for n, _ in small_maps()])
def test_made_maps(tmp_path, name, labels):
    for scale, offset in (SCALES[0], SCALES[2]):
        check(labels, write(tmp_path, labels, scale, offset), scale, offset)


def test_cases_are_what_they_claim():
    """The made maps hold what they are made for: regions that 8-connectivity
    would join (so 4-connectivity is what is tested), holes, and a pocket
    that meets the outside only at a corner."""
    eight = np.ones((3, 3))
    for a, v in [(checkerboards()[0], 1), (checkerboards()[1], 2), (diagonal_holes()[1], 4)]:
        assert ndi.label(a == v, FOUR)[1] > ndi.label(a == v, eight)[1]
    # The pocket at (1, 1): alone in 4-connectivity, with the border pixel
    # (2, 0) in 8.
    p = pocket() != 1
    c4, c8 = ndi.label(p, FOUR)[0], ndi.label(p, eight)[0]
    assert (c4 == c4[1, 1]).sum() == 1 and c8[1, 1] == c8[2, 0]
    assert ndi.label(nested() == 1, FOUR)[1] == 2
    # Holes meeting at corners: 5 apart in 4-connectivity, one chain in 8;
    # in the third map, a hole at (1, 1) and one at (2, 2) meet, and (5, 5)
    # meets the outside only at its corner.
    h = diagonal_holes()[0] == 0
    assert ndi.label(h, FOUR)[1] == 5 and ndi.label(h, eight)[1] == 1
    h = diagonal_holes()[2] != 1
    assert ndi.label(h, FOUR)[1] == 4 and ndi.label(h, eight)[1] == 2


@pytest.mark.parametrize("seed", range(6))
def test_blobs(tmp_path, seed):
    rng = np.random.default_rng(seed)
    shape = (int(rng.integers(40, 130)), int(rng.integers(40, 130)))
    labels = blobs(rng, shape, int(rng.integers(2, 7)), float(rng.uniform(1.5, 5)))
    scale, offset = SCALES[seed % len(SCALES)]
    polys = check(labels, write(tmp_path, labels, scale, offset), scale, offset)
    assert any(len(p.interiors) for p in polys), "no holes: the map misses its point"


@pytest.mark.parametrize("seed,p0", [(0, 0.2), (1, 0.5), (2, 0.8), (3, 0.35)])
def test_random_pixels(tmp_path, seed, p0):
    """Independent pixels: every kind of corner, in numbers."""
    rng = np.random.default_rng(100 + seed)
    shape = (int(rng.integers(20, 70)), int(rng.integers(20, 70)))
    labels = np.where(rng.random(shape) < p0, 0, rng.integers(1, 4, shape)).astype(np.uint8)
    for scale, offset in SCALES[seed % 2::2]:
        check(labels, write(tmp_path, labels, scale, offset), scale, offset)


def test_scales_and_offsets(tmp_path):
    labels = blobs(np.random.default_rng(7), (50, 70), 4, 2.5)
    for scale, offset in SCALES:
        check(labels, write(tmp_path, labels, scale, offset), scale, offset)


def test_null_scale_and_offset_mean_one_and_zero(tmp_path):
    labels = nested()
    p, out = run(tmp_path, labels, ("-", "-"), ("-", "-"), name="null.geojson")
    assert p.returncode == 0, p.stderr
    q, ref = run(tmp_path, labels, name="ref.geojson")
    assert q.returncode == 0, q.stderr
    assert out.read_bytes() == ref.read_bytes()


def test_names_and_colors(tmp_path):
    labels = blobs(np.random.default_rng(3), (40, 60), 6, 2.0)
    names = {1: 'tumour "core"', 2: "stroma\\nerve\n\ttab", 4: "épithélium 上皮 🔬", 5: ""}
    colors = {2: (1, 2, 3), 3: (255, 0, 128)}
    extra = []
    for label, text in names.items():
        extra += ["--name", label, text]
    for label, rgb in colors.items():
        extra += ["--color", label, *rgb]
    geo = write(tmp_path, labels, extra=extra)
    # Colours up to the largest given label come from the array: 1 is black.
    check(labels, geo, names=names, colors={1: (0, 0, 0), **colors})
    assert {f["properties"]["classification"]["name"] for f in geo["features"]} >= set(names.values())


def test_empty_maps(tmp_path):
    for shape in [(0, 5), (4, 0), (3, 3)]:
        geo = write(tmp_path, np.zeros(shape, np.uint8))
        assert geo == {"type": "FeatureCollection", "features": []}


def test_large_map_bounded_memory(tmp_path):
    """6000 x 6000 with thousands of regions: peak RSS within the map
    (1 byte a pixel), the region numbers (4), the taken bits, 4 bytes a
    region and 8 a ring, plus 48 MiB for the process and the flood fill's
    stack; regions, areas and validity of all features, pixel centres
    sampled."""
    rng = np.random.default_rng(11)
    n = 6000
    labels = blobs(rng, (n // 4, n // 4), 5, 3.0, salt=0.0)
    labels = np.kron(labels, np.ones((4, 4), np.uint8))  # 4x4 blocks keep the smoothing cheap
    s = rng.random(labels.shape) < 0.0005
    labels[s] = rng.integers(0, 5, int(s.sum()))
    p, out = run(tmp_path, labels, (16.0, 16.0), (0.0, 0.0))
    assert p.returncode == 0, p.stderr
    fields = p.stdout.split()
    rss = int(fields[1]) * 1024
    geo = json.loads(out.read_text())
    n_rings = sum(len(f["geometry"]["coordinates"]) for f in geo["features"])
    assert len(geo["features"]) > 2000
    if not SANITIZED:
        bound = labels.size * (1 + 4 + 1 / 8) + 4 * len(geo["features"]) + 8 * n_rings + (48 << 20)
        assert rss < bound, f"peak RSS {rss >> 20} MiB, bound {int(bound) >> 20} MiB"
    check(labels, geo, (16.0, 16.0), (0.0, 0.0), sample=200_000)


# ---- refusals ----

def refused(tmp_path, p, out, *words):
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert str(out) in lines[0], p.stderr
    for word in words:
        assert word in lines[0], p.stderr
    assert not out.exists() or out.is_dir()
    folder = out.parent if out.parent.is_dir() else tmp_path
    assert not [f for f in folder.iterdir() if ".segrt-" in f.name], "a temporary file left behind"


@pytest.mark.parametrize("scale,offset", [((0.0, 1.0), (0.0, 0.0)), ((1.0, -2.0), (0.0, 0.0)),
                                          ((float("nan"), 1.0), (0.0, 0.0)), ((1.0, float("inf")), (0.0, 0.0)),
                                          ((1.0, 1.0), (float("nan"), 0.0)), ((1.0, 1.0), (0.0, float("-inf"))),
                                          ((2e307, 1.0), (0.0, 0.0)), ((1.0, 1e305), (0.0, 1.797e308))])
def test_bad_scale_or_offset(tmp_path, scale, offset):
    """The last two: far edges past the largest double (15 x 2e307, and
    1.797e308 + 17 x 1e305)."""
    p, out = run(tmp_path, nested(), scale, offset)
    refused(tmp_path, p, out, "INVALID_ARGUMENT", "scale")


@pytest.mark.parametrize("dims", [(-1, 5), (5, -3), (65536, 65536), (1, 1 << 32), (3, (1 << 32) // 3)])
def test_bad_dims(tmp_path, dims):
    p, out = run(tmp_path, nested(), extra=["--dims", *dims])
    refused(tmp_path, p, out, "INVALID_ARGUMENT", "label map")


def test_null_labels(tmp_path):
    p, out = run(tmp_path, nested(), extra=["--null-labels"])
    refused(tmp_path, p, out, "INVALID_ARGUMENT", "NULL")


@pytest.mark.parametrize("bad", [b"\xff", b"caf\xe9", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"ab\xe2\x82"])
def test_name_not_utf8(tmp_path, bad):
    p, out = run(tmp_path, nested(), extra=["--name", "2", bad])
    refused(tmp_path, p, out, "INVALID_ARGUMENT", "label 2", "UTF-8")


def test_bad_paths(tmp_path):
    p, out = run(tmp_path, nested(), name="no/such/folder/out.geojson")
    refused(tmp_path, p, out, "IO")
    (tmp_path / "adir").mkdir()
    p, out = run(tmp_path, nested(), name="adir")
    refused(tmp_path, p, out, "INVALID_ARGUMENT")


def test_write_failure(tmp_path):
    """Files capped at 64 KiB (RLIMIT_FSIZE; EFBIG instead of SIGXFSZ): the
    write fails midway, with one line naming the file, and nothing is left
    but the input."""

    def cap():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))

    labels = np.random.default_rng(5).integers(0, 3, (300, 300)).astype(np.uint8)
    p, out = run(tmp_path, labels, preexec=cap)
    refused(tmp_path, p, out, "IO", "write")
    assert sorted(os.listdir(tmp_path)) == ["labels.npy"]


def test_replaces_existing_file(tmp_path):
    (tmp_path / "out.geojson").write_text("old")
    check(nested(), write(tmp_path, nested()))
