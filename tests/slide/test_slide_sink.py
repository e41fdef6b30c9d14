"""The pyramidal tiled TIFF sink (src/io/sink_slide.c) through its driver
(segrt_slidesink.c): label maps and multi-channel images of odd sizes,
written in slabs, read back with tifffile (every level against the 2x2
mode or mean computed here in numpy, level 0 pixel for pixel, the tags)
and with OpenSlide (levels, dims, downsamples, mpp, pixels); a 20,000 x
20,000 mask with its peak memory bounded; and failures (bad options, a
discard, a write that fails midway) leaving nothing behind with a one-line
error naming the file."""
import os
import pathlib
import resource
import signal
import subprocess

import numpy as np
import pytest
import tifffile

openslide = pytest.importorskip("openslide")

ROOT = pathlib.Path(__file__).resolve().parents[2]
DRIVER = os.environ.get("SEGRT_SLIDESINK", str(ROOT / "build" / "tests" / "segrt_slidesink"))
SANITIZED = os.environ.get("SEGRT_SANITIZED", "0") == "1"


def run(out, shape, slab, tile=(0, 0), mpp=(0.0, 0.0), source=None, discard=False, preexec=None):
    """Writes through the driver; shape is (C, H, W) with bits from source's dtype or 8/16 for gen."""
    c, h, w, bits = shape
    args = [DRIVER, out, c, bits, h, w, slab, tile[0], tile[1], mpp[0], mpp[1], source]
    if discard:
        args.append("discard")
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600,
                          preexec_fn=preexec)


def write(tmp_path, planar, slab, tile=(0, 0), mpp=(0.0, 0.0), name="m.tif", classes=False):
    """Writes planar (C, H, W) samples (classes: as probabilities, sink.h's
    desc.classes); returns the file's path."""
    raw = tmp_path / "in.raw"
    planar.tofile(raw)
    out = tmp_path / name
    c, h, w = planar.shape
    p = run(out, (f"{c}c" if classes else c, h, w, planar.dtype.itemsize * 8), slab, tile, mpp, raw)
    assert p.returncode == 0, p.stderr
    raw.unlink()
    return out


def reduce_labels(a, labels=None):
    """2x2 mode of a label map, ties to the smallest label; a block on an
    odd edge has 2 or 1 labels. Counted label by label (the maps here have
    a few: labels, or those it holds)."""
    h, w = a.shape
    labels = np.unique(a) if labels is None else labels
    p = np.full((h + h % 2, w + w % 2), -1, np.int32)
    p[:h, :w] = a
    quads = (p[0::2, 0::2], p[1::2, 0::2], p[0::2, 1::2], p[1::2, 1::2])
    counts = np.zeros((len(labels),) + quads[0].shape, np.uint8)
    for i, v in enumerate(labels):
        for q in quads:
            counts[i] += q == v
    return labels[counts.argmax(0)]  # argmax takes the first, the smallest label, of equal counts


def reduce_mean(a):
    """2x2 mean of each channel (a: H, W, C), rounded half up over the
    pixels a block has."""
    h, w, c = a.shape
    p = np.zeros((h + h % 2, w + w % 2, c), np.int64)
    n = np.zeros((h + h % 2, w + w % 2, 1), np.int64)
    p[:h, :w] = a
    n[:h, :w] = 1
    s = p[0::2, 0::2] + p[1::2, 0::2] + p[0::2, 1::2] + p[1::2, 1::2]
    k = n[0::2, 0::2] + n[1::2, 0::2] + n[0::2, 1::2] + n[1::2, 1::2]
    return ((s + k // 2) // k).astype(a.dtype)


def pyramid(level0, tile, mean=False):
    """Every level's expected pixels (as tifffile gives them: H, W or H, W,
    C): a label map's modes, or (several channels, or mean) the means."""
    levels = [level0]
    if level0.ndim == 2 and mean:
        return [lv[..., 0] for lv in pyramid(level0[..., None], tile)]
    reduce = reduce_labels if level0.ndim == 2 else reduce_mean
    while levels[-1].shape[0] > tile[0] or levels[-1].shape[1] > tile[1]:
        levels.append(reduce(levels[-1]))
    return levels


def check_tiff(path, levels, tile, mpp):
    with tifffile.TiffFile(path) as t:
        assert t.is_bigtiff
        assert len(t.pages) == len(levels)
        for k, (page, want) in enumerate(zip(t.pages, levels)):
            assert page.is_tiled and page.tile == tuple(tile)
            assert page.is_reduced == (k > 0)
            assert page.compression == tifffile.COMPRESSION.ADOBE_DEFLATE
            assert page.predictor == tifffile.PREDICTOR.HORIZONTAL
            got = page.asarray()
            assert got.dtype == want.dtype and got.shape == want.shape, (k, got.shape, want.shape)
            np.testing.assert_array_equal(got, want, err_msg=f"level {k}")
            tags = page.tags
            if mpp[0]:
                assert tags["ResolutionUnit"].value == 3  # centimetre
                for tag, m in (("XResolution", mpp[1]), ("YResolution", mpp[0])):
                    num, den = tags[tag].value
                    assert num / den == pytest.approx(1e4 / (m * 2**k), rel=1e-6)
            else:
                assert "XResolution" not in tags and "YResolution" not in tags


def check_openslide(path, levels, mpp, pixels=True):
    s = openslide.OpenSlide(str(path))
    try:
        assert s.properties["openslide.vendor"] == "generic-tiff"
        assert s.level_count == len(levels)
        dims = [(lv.shape[1], lv.shape[0]) for lv in levels]
        assert s.level_dimensions == tuple(dims)
        for k, d in enumerate(dims):
            # OpenSlide's downsample: the mean of the two axes' ratios.
            want = (dims[0][0] / d[0] + dims[0][1] / d[1]) / 2
            assert s.level_downsamples[k] == pytest.approx(want)
        if mpp[0]:
            assert float(s.properties["openslide.mpp-x"]) == pytest.approx(mpp[1], rel=1e-6)
            assert float(s.properties["openslide.mpp-y"]) == pytest.approx(mpp[0], rel=1e-6)
        else:
            assert "openslide.mpp-x" not in s.properties
        if pixels:
            for k in (0, len(levels) - 1):
                lv = levels[k]
                h, w = min(lv.shape[0], 300), min(lv.shape[1], 300)
                got = np.asarray(s.read_region((0, 0), k, (w, h)))
                want = lv[:h, :w]
                if want.ndim == 2:  # grey is read as R = G = B
                    want = np.repeat(want[..., None], 3, -1)
                np.testing.assert_array_equal(got[..., :3], want[..., :3], err_msg=f"level {k}")
    finally:
        s.close()


def labels(rng, h, w, n, dtype):
    """Blobs of a few labels with noise: 2x2 blocks with ties and without."""
    yy, xx = np.mgrid[:h, :w]
    a = ((xx // 9 + 2 * (yy // 7)) % n).astype(dtype)
    noise = rng.random((h, w)) < 0.3
    a[noise] = rng.integers(0, n, noise.sum())
    return a


@pytest.mark.parametrize(
    "h,w,dtype,tile,slab,mpp",
    [
        (1001, 1333, np.uint8, (256, 256), 100, (0.25, 0.25)),
        (777, 515, np.uint16, (128, 64), 1, (0.5, 0.2527)),
        (513, 257, np.uint8, (16, 32), 513, (0.0, 0.0)),
        (10, 7, np.uint8, (0, 0), 3, (1.0, 1.0)),  # one tile: one level
        (1, 1025, np.uint8, (0, 0), 1, (0.0, 0.0)),
    ],
)
def test_labels(tmp_path, h, w, dtype, tile, slab, mpp):
    rng = np.random.default_rng(h * w)
    a = labels(rng, h, w, 5, dtype)
    if dtype == np.uint16:
        a = (a.astype(np.uint32) * 13000 + 7).astype(np.uint16)
    path = write(tmp_path, a[None], slab, tile, mpp)
    tile = tuple(t or 512 for t in tile)
    levels = pyramid(a, tile)
    check_tiff(path, levels, tile, mpp)
    check_openslide(path, levels, mpp, pixels=dtype == np.uint8)
    assert sorted(os.listdir(tmp_path)) == ["m.tif"]


@pytest.mark.parametrize(
    "h,w,c,tile,slab",
    [(515, 999, 3, (128, 128), 77), (301, 203, 4, (64, 48), 1), (123, 321, 2, (32, 64), 50)],
)
def test_channels(tmp_path, h, w, c, tile, slab):
    rng = np.random.default_rng(c)
    planar = rng.integers(0, 256, (c, h, w), dtype=np.uint8)
    planar[:, : h // 2] //= 3  # some smooth and some noisy content
    path = write(tmp_path, planar, slab, tile, (0.2, 0.2))
    levels = pyramid(np.moveaxis(planar, 0, -1), tile)
    check_tiff(path, levels, tile, (0.2, 0.2))
    if c in (3, 4):
        check_openslide(path, levels, (0.2, 0.2), pixels=c == 3)


@pytest.mark.parametrize("c,slab", [(1, 33), (2, 100), (3, 1), (7, 64)])
def test_classes(tmp_path, c, slab):
    """Class probabilities (desc.classes): grey samples, one a class, the
    ones after the first unspecified extra samples (not RGB, not alpha),
    every level the 2x2 means, even of one class."""
    h, w = 389, 611
    rng = np.random.default_rng(c)
    planar = rng.integers(0, 256, (c, h, w), dtype=np.uint8)
    planar[:, :, : w // 3] = planar[:, :, : w // 3] // 64 * 64  # runs of equal values and noise
    path = write(tmp_path, planar, slab, (64, 128), (0.5, 0.5), classes=True)
    levels = pyramid(planar[0] if c == 1 else np.moveaxis(planar, 0, -1), (64, 128), mean=True)
    check_tiff(path, levels, (64, 128), (0.5, 0.5))
    with tifffile.TiffFile(path) as t:
        for page in t.pages:
            assert page.photometric == tifffile.PHOTOMETRIC.MINISBLACK and page.samplesperpixel == c
            assert tuple(page.extrasamples) == (tifffile.EXTRASAMPLE.UNSPECIFIED,) * (c - 1)
    # Past 4 channels only as classes.
    p = run(tmp_path / "x.tif", (5, 8, 8, 8), 8, source="gen:3")
    assert p.returncode != 0 and "1 to 4" in p.stderr and not (tmp_path / "x.tif").exists()


def gen(y0, y1, x0, x1, k):
    """The driver's gen:K labels, rows y0 to y1, columns x0 to x1."""
    y, x = np.arange(y0, y1, dtype=np.int32)[:, None], np.arange(x0, x1, dtype=np.int32)[None, :]
    hit = ((7 * x) % 29 + (13 * y) % 29) % 29 == 0  # (7x + 13y) % 29 == 0, by parts
    return ((x // 61 + 3 * (y // 47) + hit) % k).astype(np.uint8)


def test_large_bounded_memory(tmp_path):
    """A 20,000 x 20,000 label map in slabs of 256 rows: peak RSS under
    200 MiB (the image is 381 MiB), every level checked."""
    n = 6000 if SANITIZED else 20000
    out = tmp_path / "big.tif"
    p = run(out, (1, n, n, 8), 256, (512, 512), (0.5, 0.5), "gen:5")
    assert p.returncode == 0, p.stderr
    rss_mib = int(p.stdout.split()[1]) / 1024
    if not SANITIZED:
        assert rss_mib < 200, f"peak RSS {rss_mib:.0f} MiB"
    with tifffile.TiffFile(out) as t:
        # Level 0 tile by tile, without holding it whole.
        page = t.pages[0]
        for data, (_, _, y, x, _), _shape in page.segments(maxworkers=1):
            tile = data[0, :, :, 0]
            hh, ww = min(512, n - y), min(512, n - x)
            np.testing.assert_array_equal(tile[:hh, :ww], gen(y, y + hh, x, x + ww, 5))
        # Reduced levels from slabs of 128 rows (2^7: every level's blocks
        # fall inside a slab), against the whole level read back.
        parts = [[] for _ in t.pages]
        for y in range(0, n, 128):
            lv = gen(y, min(y + 128, n), 0, n, 5)
            for k in range(1, len(t.pages)):
                lv = reduce_labels(lv, np.arange(5, dtype=np.uint8))
                parts[k].append(lv)
        assert len(t.pages) == (5 if n == 6000 else 7)  # down to the first level within one 512 tile
        for k in range(1, len(t.pages)):
            want = np.concatenate(parts[k])
            parts[k] = None
            assert np.array_equal(t.pages[k].asarray(), want), f"level {k}"
            del want
    s = openslide.OpenSlide(str(out))
    assert s.level_dimensions[0] == (n, n) and s.level_count == len(parts)
    assert float(s.properties["openslide.mpp-x"]) == pytest.approx(0.5)
    s.close()


def one_line_error(p, path):
    assert p.returncode == 1, p.stdout + p.stderr
    err = p.stderr.strip()
    assert "\n" not in err and str(path) in err, err
    return err


def test_discard_leaves_nothing(tmp_path):
    p = run(tmp_path / "d.tif", (1, 3000, 2000, 8), 128, (256, 256), (0.5, 0.5), "gen:4", discard=True)
    assert p.returncode == 0, p.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "name,tile,mpp,what",
    [
        ("t.tif", (100, 512), (0, 0), "multiples of 16"),
        ("t.tif", (0, 8192), (0, 0), "multiples of 16"),
        ("t.tif", (0, 0), (0.5, 0), "both"),
        ("t.tif", (0, 0), (-0.5, -0.5), "both"),
        ("t.tif", (0, 0), ("nan", "nan"), "both"),
        ("t.png", (0, 0), (0, 0), "as a TIFF"),
        ("t.npy", (0, 0), (0, 0), "as a TIFF"),
    ],
)
def test_bad_options(tmp_path, name, tile, mpp, what):
    p = run(tmp_path / name, (1, 40, 40, 8), 8, tile, mpp, "gen:3")
    assert what in one_line_error(p, tmp_path / name)
    assert os.listdir(tmp_path) == []


def test_bad_description(tmp_path):
    p = run(tmp_path / "t.tif", (5, 40, 40, 8), 8, (0, 0), (0, 0), "gen:3")
    assert "channels" in one_line_error(p, tmp_path / "t.tif")
    assert os.listdir(tmp_path) == []


def test_missing_folder(tmp_path):
    out = tmp_path / "no" / "t.tif"
    one_line_error(run(out, (1, 40, 40, 8), 8, (0, 0), (0, 0), "gen:3"), out)
    assert os.listdir(tmp_path) == []


def test_write_failure(tmp_path):
    """Files capped at 256 KiB (RLIMIT_FSIZE; EFBIG instead of SIGXFSZ):
    the write fails midway, with one line naming the file, and neither the
    file nor a scratch level is left."""

    def cap():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))

    rng = np.random.default_rng(1)
    raw = tmp_path / "in.raw"
    rng.integers(0, 256, (1, 2000, 2000), dtype=np.uint8).tofile(raw)
    out = tmp_path / "f.tif"
    p = run(out, (1, 2000, 2000, 8), 64, (256, 256), (0.5, 0.5), raw, preexec=cap)
    assert "cannot write" in one_line_error(p, out)
    assert os.listdir(tmp_path) == ["in.raw"]
