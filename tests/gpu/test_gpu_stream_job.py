"""`segrt run --device cuda` streams its image (src/pipeline/job_window.c,
open_stream): a float32 NPY (memory-mapped) and a one-level 8/16-bit TIFF
(stripped or tiled) are read by rows as the windows reach them, never held
whole, so the host memory the job counts leaves the image out.

- An NPY larger than --max-host-memory runs on the device and gives labels
  bit-identical to the in-memory device run of the same float32 values (a
  16-bit TIFF of them with --raw-input and --overlay: an overlay needs the
  whole image, so that job reads it whole); the host path (--host-blend)
  and the overlay job are refused under the same limit (exit 2, naming
  --max-host-memory), and the host path's labels agree with the streamed
  ones within rounding.
- A TIFF (strips, then tiles) streamed with the model's normalisation
  (scale, mean, std in its metadata, applied row by row) gives labels
  bit-identical to the whole read of the same file (the overlay job), and
  runs under a limit the whole read is refused under.
"""
import struct

import numpy as np
import onnx
from PIL import Image

from conftest import run_segrt
from test_sliding_window import make_convnet

H, W = 4096, 4096  # 64 MiB of float32; the labels 16 MiB, the pinned staging 16 MiB
ROI = ["--roi", "128,128", "--overlap", "0.25", "--sw-batch", "8"]
GPU = ["--device", "cuda", "--precision", "fp32", "--autotune", "0", "--no-cache", "-q"]


def write_tiff(path, img, rows_per_strip=None, tile=None):
    """A baseline grey TIFF (uint8 or uint16, uncompressed): strips of
    rows_per_strip rows, or tiles of tile x tile pixels (edges padded)."""
    h, w = img.shape
    bits = img.dtype.itemsize * 8
    le = img.astype(img.dtype.newbyteorder("<"))
    blocks = []
    if tile:
        for y in range(0, h, tile):
            for x in range(0, w, tile):
                t = np.zeros((tile, tile), le.dtype)
                part = le[y:y + tile, x:x + tile]
                t[:part.shape[0], :part.shape[1]] = part
                blocks.append(t.tobytes())
    else:
        for y in range(0, h, rows_per_strip):
            blocks.append(le[y:y + rows_per_strip].tobytes())
    data_at = 8
    offsets, at = [], data_at
    for b in blocks:
        offsets.append(at)
        at += len(b)
    arrays_at = at
    n = len(blocks)
    assert n > 1, "offsets and counts are written as arrays"
    off_at, cnt_at = arrays_at, arrays_at + 4 * n
    ifd_at = cnt_at + 4 * n
    tags = [(256, 4, 1, w), (257, 4, 1, h), (258, 3, 1, bits), (259, 3, 1, 1), (262, 3, 1, 1), (277, 3, 1, 1),
            (284, 3, 1, 1)]
    if tile:
        tags += [(322, 4, 1, tile), (323, 4, 1, tile), (324, 4, n, off_at), (325, 4, n, cnt_at)]
    else:
        tags += [(273, 4, n, off_at), (278, 4, 1, rows_per_strip), (279, 4, n, cnt_at)]
    tags.sort()
    out = bytearray(b"II*\0" + struct.pack("<I", ifd_at))
    for b in blocks:
        out += b
    out += struct.pack(f"<{n}I", *offsets) + struct.pack(f"<{n}I", *[len(b) for b in blocks])
    out += struct.pack("<H", len(tags))
    for t, ty, c, v in tags:
        out += struct.pack("<HHII", t, ty, c, v) if ty == 4 else struct.pack("<HHIHH", t, ty, c, v, 0)
    out += struct.pack("<I", 0)
    path.write_bytes(bytes(out))


def model_with_metadata(path, **metadata):
    make_convnet(path, 2, 1, 3, seed=7)
    m = onnx.load(str(path))
    for k, v in metadata.items():
        e = m.metadata_props.add()
        e.key, e.value = k, v
    onnx.save(m, str(path))
    return path


def refused(*args):
    p = run_segrt(*args, check=2, timeout=300)
    assert "--max-host-memory" in p.stderr, p.stderr
    return p


def test_npy_larger_than_the_limit_streams(tmp_path, gpu):
    model = make_convnet(tmp_path / "m.onnx", 2, 1, 3, seed=7)
    values = np.random.default_rng(11).integers(0, 65536, (H, W), dtype=np.uint16)
    np.save(tmp_path / "x.npy", values.astype(np.float32)[None, None])
    limit = ["--max-host-memory", "48M"]  # the image alone is 64 MiB
    run_segrt("run", model, tmp_path / "x.npy", "-o", tmp_path / "s.npy", "--output", "labels", *ROI, *GPU, *limit,
              check=0, timeout=300)
    got = np.load(tmp_path / "s.npy")
    assert got.shape == (1, 1, H, W) and got.dtype == np.uint8
    # The same float32 values in memory on the device path: a 16-bit TIFF
    # of them, raw, with an overlay (which reads the image whole).
    write_tiff(tmp_path / "x.tif", values, rows_per_strip=16)
    whole = ["run", model, tmp_path / "x.tif", "-o", tmp_path / "w.png", "--overlay", tmp_path / "ov.png",
             "--raw-input", *ROI, *GPU]
    refused(*whole, *limit)
    run_segrt(*whole, check=0, timeout=300)
    want = np.array(Image.open(tmp_path / "w.png"))
    assert np.array_equal(got[0, 0], want), f"{int((got[0, 0] != want).sum())} labels differ"
    # The host path holds the image and its accumulators: refused under the
    # limit, and without it the same labels within rounding.
    host = ["run", model, tmp_path / "x.npy", "-o", tmp_path / "h.npy", "--output", "labels", "--host-blend", *ROI,
            *GPU]
    refused(*host, *limit)
    run_segrt(*host, check=0, timeout=600)
    assert (np.load(tmp_path / "h.npy") == got).mean() >= 0.999


def test_tiff_streams_normalised(tmp_path, gpu):
    model = model_with_metadata(tmp_path / "m.onnx", **{"segrt.input.scale": "0.00390625", "segrt.input.mean": "0.45",
                                                        "segrt.input.std": "0.225"})
    values = np.random.default_rng(12).integers(0, 256, (H, W), dtype=np.uint8)
    limit = ["--max-host-memory", "56M"]  # the whole read holds 16 MiB of pixels and 64 MiB of float32
    for name, kw in (("strips", {"rows_per_strip": 7}), ("tiles", {"tile": 256})):
        path = tmp_path / f"{name}.tif"
        write_tiff(path, values, **kw)
        run_segrt("run", model, path, "-o", tmp_path / f"{name}-s.png", *ROI, *GPU, *limit, check=0, timeout=300)
        whole = ["run", model, path, "-o", tmp_path / f"{name}-w.png", "--overlay", tmp_path / f"{name}-ov.png",
                 *ROI, *GPU]
        refused(*whole, *limit)
        run_segrt(*whole, check=0, timeout=300)
        got = np.array(Image.open(tmp_path / f"{name}-s.png"))
        want = np.array(Image.open(tmp_path / f"{name}-w.png"))
        assert got.shape == (H, W)
        assert np.array_equal(got, want), f"{name}: {int((got != want).sum())} labels differ"
