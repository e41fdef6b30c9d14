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


def write_svs(path, height=1000, width=1200, tile=240, factors=(4, 16), bigtiff=False, mpp=0.25, mag=40,
              seed=0, label=True, macro=True, quality=90, label_size=(120, 100), macro_size=(90, 240), base=None,
              compression="jpeg"):
    """An Aperio-style SVS at path; returns the level-0 RGB array (base,
    when given: height x width x 3 uint8, else picture's). compression
    "zlib" (deflate, lossless) needs no imagecodecs: the GPU machine's
    tifffile writes it alone."""
    base = picture(height, width, seed) if base is None else base
    head = f"{APERIO}\r\n{width}x{height} [0,0 {width}x{height}] ({tile}x{tile}) JPEG/RGB Q={quality}"
    props = f"|AppMag = {mag}|MPP = {mpp}|Filename = synth" if mpp else f"|AppMag = {mag}|Filename = synth"
    opts = dict(photometric="rgb", metadata=None, compression=compression,
                compressionargs={"level": quality} if compression == "jpeg" else None)
    with tifffile.TiffWriter(path, bigtiff=bigtiff) as tw:
        tw.write(base, tile=(tile, tile), description=head + props, **opts)
        thumb = reduce(base, 8)
        tw.write(thumb, description=f"{APERIO}\r\n{width}x{height} -> {thumb.shape[1]}x{thumb.shape[0]} - "
                 + props, rowsperstrip=16, **opts)
        for f in factors:
            lvl = reduce(base, f)
            tw.write(lvl, tile=(tile, tile), subfiletype=0,
                     description=f"{APERIO}\r\n{width}x{height} [0,0 {width}x{height}] ({tile}x{tile}) -> "
                     f"{lvl.shape[1]}x{lvl.shape[0]} JPEG/RGB Q={quality}" + props, **opts)
        if label:
            lab = picture(*label_size, seed + 1)
            tw.write(lab, description=f"{APERIO}\nlabel {lab.shape[1]}x{lab.shape[0]}", subfiletype=1,
                     photometric="rgb", metadata=None, compression="lzw", rowsperstrip=32)
        if macro:
            mac = picture(*macro_size, seed + 2)
            tw.write(mac, description=f"{APERIO}\nmacro {mac.shape[1]}x{mac.shape[0]}", subfiletype=9,
                     rowsperstrip=16, **opts)
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


if __name__ == "__main__":
    import sys

    write_svs(sys.argv[1])
