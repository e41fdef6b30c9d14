"""Synthetic whole-slide images for the slide tests and the fuzz seeds,
written with tifffile (JPEG tiles through imagecodecs) as Aperio's
scanners lay out an SVS, which OpenSlide reads by its ImageDescription:

    page 0      level 0, tiled JPEG, "Aperio Image Library ...|AppMag = 40|MPP = 0.25"
    page 1      the thumbnail, stripped (OpenSlide: the second page, untiled)
    pages 2...  the reduced levels, tiled JPEG
    then        the label (LZW) and the macro (JPEG), stripped, named by the
                first word of their description's second line

The pixels are smooth gradients with some texture, so that JPEG keeps them
close and a misplaced tile or channel shows.
"""
import numpy as np
import tifffile

APERIO = "Aperio Image Library v12.0.15"


def picture(h, w, seed):
    """An RGB image (h, w, 3) uint8: gradients, a grid and noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    r = (x * 255 // max(w - 1, 1))
    g = (y * 255 // max(h - 1, 1))
    b = ((x // 16 + y // 16) % 2) * 160 + 40
    img = np.stack([r, g, b], axis=-1).astype(np.int32)
    img += rng.integers(-12, 13, size=img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def reduce(img, f):
    """img shrunk f times by means of f x f blocks (the edge's partial block
    dropped), as a scanner's reduced level."""
    h, w = img.shape[0] // f, img.shape[1] // f
    return img[: h * f, : w * f].reshape(h, f, w, f, 3).mean(axis=(1, 3)).round().astype(np.uint8)


def split_tables(jpeg):
    """A complete JPEG stream as (tables, tile): the quantisation and
    Huffman tables as a tables-only stream (SOI, DQT/DHT, EOI) and the rest
    as an abbreviated stream, as Aperio's scanners store them (the tables
    once in JPEGTables, each tile without them)."""
    tables, rest, i = [b"\xff\xd8"], [b"\xff\xd8"], 2
    while i < len(jpeg):
        assert jpeg[i] == 0xFF, "a marker"
        m = jpeg[i + 1]
        if m == 0xDA:  # the scan and its data to the end
            rest.append(jpeg[i:])
            break
        n = int.from_bytes(jpeg[i + 2:i + 4], "big")
        (tables if m in (0xDB, 0xC4) else rest).append(jpeg[i:i + 2 + n])
        i += 2 + n
    return b"".join(tables) + b"\xff\xd9", b"".join(rest)


def pil_tiles(img, tile, quality, rgb):
    """img's tiles (row by row, edge tiles padded with black) as JPEG
    streams encoded by Pillow: YCbCr 4:2:0 as most scanners write, or
    (rgb) the components kept as R, G, B, none subsampled."""
    import io

    from PIL import Image

    for y in range(0, img.shape[0], tile):
        for x in range(0, img.shape[1], tile):
            t = np.zeros((tile, tile, 3), np.uint8)
            p = img[y:y + tile, x:x + tile]
            t[:p.shape[0], :p.shape[1]] = p
            b = io.BytesIO()
            Image.fromarray(t).save(b, format="JPEG", quality=quality,
                                    **(dict(keep_rgb=True, subsampling=0) if rgb else dict(subsampling=2)))
            yield b.getvalue()


def _write_tiled(tw, img, tile, quality, compression, opts, **kw):
    """One tiled page: through tifffile's codecs, or (compression "pil",
    "pil-rgb", "pil-tables") Pillow's JPEG streams written as they are,
    "pil-tables" with their tables in JPEGTables. tifffile looks its JPEG
    encoder up even for streams it need not encode (and has none without
    imagecodecs), so those pages are written as deflated and their
    Compression and PhotometricInterpretation set by _mark_jpeg after."""
    if not compression.startswith("pil"):
        tw.write(img, tile=(tile, tile), **opts, **kw)
        return
    streams = list(pil_tiles(img, tile, quality, compression == "pil-rgb"))
    extratags = [] if compression == "pil-rgb" else [(530, "H", 2, (2, 2), True)]  # YCbCrSubSampling 4:2:0
    if compression == "pil-tables":
        split = [split_tables(s) for s in streams]
        assert len({t for t, _ in split}) == 1, "one set of tables"
        streams = [r for _, r in split]
        extratags.append((347, 7, len(split[0][0]), split[0][0], True))
    tw.write(iter(streams), shape=img.shape, dtype=np.uint8, tile=(tile, tile), compression="zlib",
             photometric="rgb", metadata=None, extratags=extratags, **kw)


def _mark_jpeg(path, rgb):
    """The tiled pages _write_tiled wrote: Compression JPEG (7),
    PhotometricInterpretation YCbCr (6) or, for RGB-coded tiles, RGB (2)."""
    import struct

    with tifffile.TiffFile(path) as t:
        fmt = t.byteorder + "H"
        spots = [(p.tags["Compression"].valueoffset, p.tags["PhotometricInterpretation"].valueoffset)
                 for p in t.pages if p.is_tiled]
    with open(path, "r+b") as f:
        for comp, phot in spots:
            f.seek(comp)
            f.write(struct.pack(fmt, 7))
            f.seek(phot)
            f.write(struct.pack(fmt, 2 if rgb else 6))


def write_svs(path, height=1000, width=1200, tile=240, factors=(4, 16), bigtiff=False, mpp=0.25, mag=40,
              seed=0, label=True, macro=True, quality=90, label_size=(120, 100), macro_size=(90, 240), base=None,
              compression="jpeg"):
    """An Aperio-style SVS at path; returns the level-0 RGB array (base,
    when given: height x width x 3 uint8, else picture's). compression
    "zlib" (deflate, lossless) needs no imagecodecs: the GPU machine's
    tifffile writes it alone; so do "pil" (Pillow's YCbCr JPEG tiles),
    "pil-tables" (the same, their tables in JPEGTables) and "pil-rgb"
    (RGB-coded JPEG tiles, PhotometricInterpretation RGB), whose other
    pages are deflated."""
    base = picture(height, width, seed) if base is None else base
    head = f"{APERIO}\r\n{width}x{height} [0,0 {width}x{height}] ({tile}x{tile}) JPEG/RGB Q={quality}"
    props = f"|AppMag = {mag}|MPP = {mpp}|Filename = synth" if mpp else f"|AppMag = {mag}|Filename = synth"
    strip = "zlib" if compression.startswith("pil") else compression
    opts = dict(photometric="rgb", metadata=None, compression=strip,
                compressionargs={"level": quality} if strip == "jpeg" else None)
    with tifffile.TiffWriter(path, bigtiff=bigtiff) as tw:
        _write_tiled(tw, base, tile, quality, compression, opts, description=head + props)
        thumb = reduce(base, 8)
        tw.write(thumb, description=f"{APERIO}\r\n{width}x{height} -> {thumb.shape[1]}x{thumb.shape[0]} - "
                 + props, rowsperstrip=16, **opts)
        for f in factors:
            lvl = reduce(base, f)
            _write_tiled(tw, lvl, tile, quality, compression, opts, subfiletype=0,
                         description=f"{APERIO}\r\n{width}x{height} [0,0 {width}x{height}] ({tile}x{tile}) -> "
                         f"{lvl.shape[1]}x{lvl.shape[0]} JPEG/RGB Q={quality}" + props)
        if label:
            lab = picture(*label_size, seed + 1)
            tw.write(lab, description=f"{APERIO}\nlabel {lab.shape[1]}x{lab.shape[0]}", subfiletype=1,
                     photometric="rgb", metadata=None, compression="lzw", rowsperstrip=32)
        if macro:
            mac = picture(*macro_size, seed + 2)
            tw.write(mac, description=f"{APERIO}\nmacro {mac.shape[1]}x{mac.shape[0]}", subfiletype=9,
                     rowsperstrip=16, **opts)
    if compression.startswith("pil"):
        _mark_jpeg(path, compression == "pil-rgb")
    return base


# Stains as RGB: eosin's pink and haematoxylin's purple (the colours of an
# H&E section at low magnification).
EOSIN = (226, 150, 196)
HAEMATOXYLIN = (150, 96, 176)


def tissue_picture(h, w, seed, blobs=(), holes=(), specks=(), dark_border=0, white=False, glass=242, noise=4,
                   checkers=()):
    """An RGB image (h, w, 3) uint8 of stained tissue on glass, of known
    geometry: glass near white (242 +- 4); each blob (cy, cx, ry, rx, stain)
    an ellipse of that stain with texture; each hole (cy, cx, r) a disk of
    glass cut back out; each speck (cy, cx, r) a small disk of stain (dust,
    debris); dark_border columns at the left near black (a scanner's edge,
    with noise); each checker (y0, x0, size, cell, stain) a size x size
    square of cell x cell squares of stain and glass alternating, whose
    stain is one piece only through corners and whose glass squares are
    holes only without them. white: glass only (glass +- noise; noise 0:
    flat)."""
    rng = np.random.default_rng(seed)
    img = np.full((h, w, 3), glass, np.int32) + rng.integers(-noise, noise + 1, size=(h, w, 3))
    if not white:
        y, x = np.mgrid[0:h, 0:w]
        tex = rng.integers(-18, 19, size=(h, w, 1))
        for cy, cx, ry, rx, stain in blobs:
            inside = ((y - cy) / ry) ** 2 + ((x - cx) / rx) ** 2 <= 1
            img[inside] = np.asarray(stain, np.int32) + tex[inside]
        for cy, cx, r, *stain in specks:
            inside = (y - cy) ** 2 + (x - cx) ** 2 <= r * r
            img[inside] = np.asarray(stain[0] if stain else HAEMATOXYLIN, np.int32)
        for cy, cx, r in holes:
            inside = (y - cy) ** 2 + (x - cx) ** 2 <= r * r
            img[inside] = glass + rng.integers(-noise, noise + 1, size=(int(inside.sum()), 3))
        for y0, x0, size, cell, stain in checkers:
            cy, cx = np.mgrid[0:size, 0:size] // cell
            patch = img[y0:y0 + size, x0:x0 + size]
            patch[(cy + cx) % 2 == 0] = stain
        if dark_border:
            img[:, :dark_border] = rng.integers(0, 14, size=(h, dark_border, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def write_tissue_svs(path, height=3000, width=4000, tile=256, factors=(4, 16), mpp=0.25, seed=0, **picture):
    """An Aperio-style SVS (as write_svs) whose level 0 is tissue_picture(
    height, width, seed, **picture); returns it."""
    return write_svs(path, height, width, tile, factors, mpp=mpp, seed=seed, label=False, macro=False,
                     base=tissue_picture(height, width, seed, **picture))


def write_generic_tiff(path, height=500, width=600, tile=128):
    """A plain tiled TIFF (OpenSlide's generic-tiff): one level."""
    img = picture(height, width, 7)
    tifffile.imwrite(path, img, tile=(tile, tile), photometric="rgb", metadata=None, compression="jpeg", compressionargs={"level": 90})
    return img


def threshold_model(path, roi=128, overlap=0.0, mpp=None):
    """A model whose label is known per pixel: class 0 = 0.5, class 1 = red
    / 255 (segrt.input.scale 1/255: segrt computes (x * scale - mean) /
    std), so the label is red > 127.5."""
    import onnx
    from onnx import TensorProto, helper

    w = np.zeros((2, 3, 1, 1), np.float32)
    w[1, 0, 0, 0] = 1.0
    b = np.array([0.5, 0.0], np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[1, 1])], "threshold",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, roi, roi])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2, roi, roi])],
        [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel()),
         helper.make_tensor("b", TensorProto.FLOAT, b.shape, b)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    meta = {"segrt.roi": f"{roi},{roi}", "segrt.overlap": str(overlap), "segrt.input.scale": repr(1 / 255)}
    if mpp:
        meta["segrt.mpp"] = str(mpp)
    for k, v in meta.items():
        e = m.metadata_props.add()
        e.key, e.value = k, v
    onnx.save(m, path)
    return path


def value_model(path, channel=0, roi=128, overlap=0.0):
    """A model whose label is the value of one input channel, rounded: 256
    classes, logit k = 2 k x - k^2 (= x^2 - (x - k)^2, largest at the k
    nearest x), on the raw 0..255 samples (run it with --raw-input). It
    shows the pixels segrt read, as uint8 labels."""
    import onnx
    from onnx import TensorProto, helper

    k = np.arange(256, dtype=np.float32)
    w = np.zeros((256, 3, 1, 1), np.float32)
    w[:, channel, 0, 0] = 2 * k
    b = -k * k
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[1, 1])], "value",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, roi, roi])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 256, roi, roi])],
        [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel()),
         helper.make_tensor("b", TensorProto.FLOAT, b.shape, b)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for key, v in {"segrt.roi": f"{roi},{roi}", "segrt.overlap": str(overlap)}.items():
        e = m.metadata_props.add()
        e.key, e.value = key, v
    onnx.save(m, path)
    return path


if __name__ == "__main__":
    import sys

    write_svs(sys.argv[1])
