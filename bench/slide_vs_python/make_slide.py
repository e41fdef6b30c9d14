#!/usr/bin/env python3
"""A synthetic H&E-like whole-slide image as an Aperio SVS, generated tile by
tile so that a 50,000 x 50,000 slide never exists in memory as one array:

    python3 make_slide.py OUT.svs [--size 50000] [--seed 0] [--quality 80] [--workers N]   (and OUT.json)

Layout (as Aperio's scanners write it and OpenSlide's aperio driver reads it;
tests/slide/slide_synth.py writes the same on a small scale):

    page 0      level 0, 256 x 256 JPEG tiles, "Aperio Image Library ...|AppMag = 40|MPP = 0.25"
    page 1      the thumbnail (level 3's pixels), stripped
    pages 2-4   levels at downsample 4, 16, 64, tiled

The picture is a function of level-0 coordinates (render()): a smooth random
tissue field thresholded so that about 60 % of the area is tissue, pink
stroma with a fibre texture over it, purple nuclei (discs on a jittered
grid, from an integer hash of the grid cell, so that a nucleus across a tile
edge is drawn the same in both tiles), a near-white background, pixel noise
(a hash of the pixel's coordinates).
render() also gives each pixel's class (0 background, 1 stroma, 2 nucleus):
make_model.py trains the network on it.

Level 0's tiles are rendered by a pool of processes (the fields are shared
by fork) and JPEG-compressed by tifffile's threads; each worker also returns
its tile reduced 4 x 4 (block means), from which level 1 is assembled in
memory (size^2 / 16 x 3 bytes: 470 MB for 50,000) and levels 2 and 3 are
reduced in turn. Memory stays below about 1 GB at the full size.
"""
import argparse
import json
import multiprocessing as mp
import os
import pathlib
import time

import numpy as np

APERIO = "Aperio Image Library v12.0.15"
TILE = 256
FACTORS = (4, 16, 64)  # the reduced levels' downsamples
MPP = 0.25
APP_MAG = 40
TISSUE_SHARE = 0.60
TISSUE_DS = 64  # the tissue field's grid, in level-0 pixels
TEXTURE_DS = 16  # the stroma texture's grid
NUCLEUS_CELL = 40  # one nucleus at most per cell of this many level-0 pixels
NUCLEUS_SHARE = 0.55  # of the cells in tissue
EDGE = 40.0  # the tissue's opacity per unit of the field past its threshold

BACKGROUND = np.array([243.0, 241.0, 245.0], np.float32)
STROMA = np.array([232.0, 150.0, 196.0], np.float32)  # eosin
STROMA_DARK = np.array([196.0, 96.0, 160.0], np.float32)
NUCLEUS = np.array([92.0, 52.0, 140.0], np.float32)  # haematoxylin

_FIELDS = None  # set in the parent before the pool forks


class Fields:
    """The slide's low-resolution random fields: everything render() needs
    besides the coordinates."""

    def __init__(self, size, seed):
        from scipy import ndimage
        self.size, self.seed = size, seed
        rng = np.random.default_rng(seed)
        n = size // TISSUE_DS + 3
        # Blobs about a millimetre across: white noise smoothed with sigma 375 um (23 grid cells; a small
        # slide is one or two blobs), thresholded at the quantile that leaves TISSUE_SHARE as tissue.
        sigma = max(1500.0 / (MPP * TISSUE_DS) / 4, 2.5)
        t = ndimage.gaussian_filter(rng.standard_normal((n, n)).astype(np.float32), sigma, mode="wrap")
        t /= t.std()
        inner = t[: size // TISSUE_DS + 1, : size // TISSUE_DS + 1]
        self.tissue = t - np.quantile(inner, 1 - TISSUE_SHARE)
        m = size // TEXTURE_DS + 3
        u = ndimage.gaussian_filter(rng.standard_normal((m, m)).astype(np.float32), 3.0, mode="wrap")
        self.texture = (u / u.std()).astype(np.float32)
        self.angle = ndimage.gaussian_filter(rng.standard_normal((m, m)).astype(np.float32), 12.0, mode="wrap")
        self.angle = (self.angle / self.angle.std()).astype(np.float32)


def sample(lo, f, y0, x0, h, w):
    """lo (a grid of f x f level-0 pixels a cell) bilinearly interpolated at
    the centres of the level-0 pixels [y0, y0 + h) x [x0, x0 + w)."""
    def axis(a0, n, size):
        c = (np.arange(a0, a0 + n) + 0.5) / f - 0.5
        i = np.clip(np.floor(c).astype(np.int64), 0, size - 2)
        return i, np.clip(c - i, 0.0, 1.0).astype(np.float32)

    iy, wy = axis(y0, h, lo.shape[0])
    ix, wx = axis(x0, w, lo.shape[1])
    top = lo[np.ix_(iy, ix)] * (1 - wx) + lo[np.ix_(iy, ix + 1)] * wx
    bot = lo[np.ix_(iy + 1, ix)] * (1 - wx) + lo[np.ix_(iy + 1, ix + 1)] * wx
    return top * (1 - wy)[:, None] + bot * wy[:, None]


def cell_hash(seed, cy, cx):
    """A 64-bit hash of (seed, cell row, cell column) (splitmix64's finaliser):
    the same cell gives the same nucleus whichever tile draws it."""
    with np.errstate(over="ignore"):
        v = (np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + cy.astype(np.uint64) * np.uint64(0xBF58476D1CE4E5B9)
             + cx.astype(np.uint64) * np.uint64(0x94D049BB133111EB))
        v ^= v >> np.uint64(30)
        v *= np.uint64(0xBF58476D1CE4E5B9)
        v ^= v >> np.uint64(27)
        v *= np.uint64(0x94D049BB133111EB)
        v ^= v >> np.uint64(31)
    return v


def pixel_noise(seed, y0, x0, h, w):
    """Uniform noise in [-7, 7) (sigma 4) per pixel and channel, from a hash
    of the pixel's level-0 coordinates: the same whichever region draws it."""
    yy = np.arange(y0, y0 + h, dtype=np.int64)[:, None]
    xx = np.arange(x0, x0 + w, dtype=np.int64)[None, :]
    v = cell_hash(seed ^ 0x5BD1E995, yy, xx)
    bits = np.stack([(v >> np.uint64(s)) & np.uint64(0xFFFFF) for s in (0, 20, 40)], -1)
    return (bits.astype(np.float32) * (14.0 / 2**20) - 7.0).astype(np.float32)


def render(y0, x0, h, w, fields=None):
    """(RGB uint8 (h, w, 3), classes uint8 (h, w)) of the level-0 region at
    (y0, x0); pixels past the slide's edge are drawn as if it went on. Every
    pixel is a function of its coordinates alone: a region drawn in pieces
    is the region drawn at once."""
    fl = fields or _FIELDS
    t = sample(fl.tissue, TISSUE_DS, y0, x0, h, w)
    # An edge some ten pixels wide (the field's slope near its threshold is ~0.002 a level-0 pixel).
    alpha = np.clip(t * EDGE + 0.5, 0.0, 1.0)[..., None]
    tex = sample(fl.texture, TEXTURE_DS, y0, x0, h, w)
    ang = sample(fl.angle, TEXTURE_DS, y0, x0, h, w)
    yy = np.arange(y0, y0 + h, dtype=np.float32)[:, None]
    xx = np.arange(x0, x0 + w, dtype=np.float32)[None, :]
    # Fibres: stripes ~14 px apart whose direction wanders with a smooth field.
    fib = np.sin((xx * np.cos(ang) + yy * np.sin(ang)) * 0.45 + 2.0 * tex)
    mix = np.clip(0.35 + 0.18 * tex + 0.22 * fib, 0.0, 1.0)[..., None]
    stroma = STROMA * (1 - mix) + STROMA_DARK * mix
    img = BACKGROUND * (1 - alpha) + stroma * alpha
    cls = (alpha[..., 0] >= 0.5).astype(np.uint8)
    # Nuclei: cells overlapping the region (and a margin for the discs' radius).
    r_max = 11
    c0y, c1y = (y0 - r_max) // NUCLEUS_CELL, (y0 + h + r_max) // NUCLEUS_CELL
    c0x, c1x = (x0 - r_max) // NUCLEUS_CELL, (x0 + w + r_max) // NUCLEUS_CELL
    cy, cx = np.meshgrid(np.arange(c0y, c1y + 1), np.arange(c0x, c1x + 1), indexing="ij")
    hv = cell_hash(fl.seed, cy.ravel(), cx.ravel())
    present = (hv & np.uint64(0xFF)) < np.uint64(int(NUCLEUS_SHARE * 256))
    for k in np.flatnonzero(present):
        v = int(hv[k])
        ny = int(cy.ravel()[k]) * NUCLEUS_CELL + (v >> 8) % NUCLEUS_CELL
        nx = int(cx.ravel()[k]) * NUCLEUS_CELL + (v >> 16) % NUCLEUS_CELL
        ry = 5 + (v >> 24) % 6
        rx = ry * (0.7 + ((v >> 32) % 7) / 10.0)
        ay, by = max(ny - ry, y0), min(ny + ry + 1, y0 + h)
        ax, bx = max(int(nx - rx), x0), min(int(nx + rx) + 1, x0 + w)
        if ay >= by or ax >= bx:
            continue
        # Only in tissue: the field at the nucleus' centre decides (a nucleus is not cut by the edge).
        if float(sample(fl.tissue, TISSUE_DS, ny, nx, 1, 1)[0, 0]) * EDGE + 0.5 < 0.9:
            continue
        gy = np.arange(ay, by, dtype=np.float32)[:, None] - ny
        gx = np.arange(ax, bx, dtype=np.float32)[None, :] - nx
        inside = (gy / ry) ** 2 + (gx / rx) ** 2 <= 1.0
        sub = img[ay - y0:by - y0, ax - x0:bx - x0]
        shade = 0.85 + 0.3 * ((v >> 40) % 16) / 15.0
        sub[inside] = NUCLEUS * shade
        cls[ay - y0:by - y0, ax - x0:bx - x0][inside] = 2
    img += pixel_noise(fl.seed, y0, x0, h, w)
    return np.clip(img + 0.5, 0, 255).astype(np.uint8), cls


def reduce(img, f):
    """img shrunk f times by means of f x f blocks (a partial edge block
    dropped), as a scanner's reduced level."""
    h, w = img.shape[0] // f, img.shape[1] // f
    return (img[: h * f, : w * f].reshape(h, f, w, f, -1).mean(axis=(1, 3)) + 0.5).astype(np.uint8)


def _tile(index):
    ty, tx = index
    img, _ = render(ty * TILE, tx * TILE, TILE, TILE)
    return img, reduce(img, FACTORS[0])


def _init_worker():
    # The parent's threads (BLAS) are not ours to multiply.
    os.environ["OMP_NUM_THREADS"] = "1"


def write_slide(path, size=50000, seed=0, quality=80, workers=None, log=print):
    """Writes the SVS; returns its description (geometry, pages, timings)."""
    import tifffile
    global _FIELDS
    t0 = time.perf_counter()
    _FIELDS = Fields(size, seed)
    width = height = size
    ny, nx = -(-height // TILE), -(-width // TILE)
    workers = workers or os.cpu_count() or 1
    f1 = FACTORS[0]
    lvl1 = np.zeros((ny * TILE // f1, nx * TILE // f1, 3), np.uint8)
    props = f"|AppMag = {APP_MAG}|MPP = {MPP}|Filename = slide_vs_python"
    head = f"{APERIO}\r\n{width}x{height} [0,0 {width}x{height}] ({TILE}x{TILE}) JPEG/RGB Q={quality}"
    opts = dict(photometric="rgb", metadata=None, compression="jpeg", compressionargs={"level": quality})
    bigtiff = size > 16384  # a full-size slide's JPEG passes 4 GB at high quality
    path = pathlib.Path(path)
    tmp = path.with_name(path.name + ".tmp")
    indices = [(ty, tx) for ty in range(ny) for tx in range(nx)]
    t_render = 0.0
    with mp.get_context("fork").Pool(workers, initializer=_init_worker) as pool:
        def tiles():
            for (ty, tx), (img, small) in zip(indices, pool.imap(_tile, indices, chunksize=8)):
                s = TILE // f1
                lvl1[ty * s:(ty + 1) * s, tx * s:(tx + 1) * s] = small
                yield img

        with tifffile.TiffWriter(tmp, bigtiff=bigtiff) as tw:
            tw.write(tiles(), shape=(height, width, 3), dtype=np.uint8, tile=(TILE, TILE),
                     description=head + props, maxworkers=workers, **opts)
            t_render = time.perf_counter() - t0
            levels = [lvl1[: height // f1, : width // f1]]
            for f_prev, f in zip(FACTORS, FACTORS[1:]):
                levels.append(reduce(levels[-1], f // f_prev))
            thumb = levels[-1]
            tw.write(thumb, description=f"{APERIO}\r\n{width}x{height} -> {thumb.shape[1]}x{thumb.shape[0]} - "
                     + props, rowsperstrip=16, **opts)
            for f, lvl in zip(FACTORS, levels):
                tw.write(lvl, tile=(TILE, TILE), subfiletype=0, maxworkers=workers,
                         description=f"{APERIO}\r\n{width}x{height} [0,0 {width}x{height}] ({TILE}x{TILE}) -> "
                         f"{lvl.shape[1]}x{lvl.shape[0]} JPEG/RGB Q={quality}" + props, **opts)
    os.replace(tmp, path)
    t1 = time.perf_counter()
    inner = _FIELDS.tissue[: size // TISSUE_DS, : size // TISSUE_DS]
    info = {"path": str(path), "size": size, "seed": seed, "mpp": MPP, "app_mag": APP_MAG, "tile": TILE,
            "quality": quality, "bigtiff": bigtiff, "levels": [[width, height]] + [[lv.shape[1], lv.shape[0]]
                                                                                  for lv in levels],
            "downsamples": [1] + list(FACTORS), "tissue_share_field": float((inner > 0).mean()),
            "bytes": path.stat().st_size, "workers": workers,
            "seconds": {"level0": t_render, "total": t1 - t0}}
    log(f"slide: {width}x{height} at {MPP} um/px, levels {info['levels']}, tissue {100 * info['tissue_share_field']:.1f}"
        f" % of the area, {info['bytes'] / 2**20:.0f} MiB, {t1 - t0:.1f} s ({workers} workers)")
    return info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--size", type=int, default=50000, help="width = height of level 0 in pixels")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quality", type=int, default=80, help="JPEG quality")
    ap.add_argument("--workers", type=int, default=None, help="rendering processes (default: all cores)")
    a = ap.parse_args(argv)
    info = write_slide(a.out, a.size, a.seed, a.quality, a.workers)
    pathlib.Path(a.out).with_suffix(".json").write_text(json.dumps(info, indent=1) + "\n")


if __name__ == "__main__":
    main()
