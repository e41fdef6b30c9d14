"""Limits before allocation (issue 36, item 5): a file that claims more
than it can hold is refused before anything that size is allocated, and a
job that would hold more host memory than allowed is refused, naming its
need, before it reads or allocates anything.

The "before allocation" half is made observable: the release build runs
under an address-space limit (RLIMIT_AS) well below the claims, the
sanitizer build with a malloc size cap; a reader that allocated what the
file claims would then fail with an out-of-memory error (exit 1), not the
reader's refusal (exit 2) these cases want."""
import resource
import struct
import zlib

import numpy as np
import pytest

from conftest import SANITIZED
from hostile_util import convnet, image_npy

LIMIT = 1 << 30  # below every claim here (2.7 GB and more)


def small_address_space():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def memory_capped():
    if SANITIZED:
        return {"env": {"ASAN_OPTIONS": "allocator_may_return_null=1:max_allocation_size_mb=1024"}}
    return {"preexec_fn": small_address_space}


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_claiming(width, height, idat=b""):
    """A PNG header (8-bit RGB) claiming width x height, with idat as its data."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + (png_chunk(b"IDAT", idat) if idat else b"") +
            png_chunk(b"IEND", b""))


@pytest.fixture
def job(box):
    convnet(box.path("model.onnx"), channels=3, metadata={"segrt.roi": "16,16"})
    return box


def test_a_png_header_claiming_gigabytes(job):
    data = png_claiming(30000, 30000)
    assert len(data) < 70
    job.write("claim.png", data)
    job.refused(["run", "model.onnx", "claim.png", "-o", "l.png"], 2, "claim.png", **memory_capped())
    # With a little deflate data: far from what 2.7 GB of rows need.
    job.write("claim2.png", png_claiming(30000, 30000, zlib.compress(b"\0" * 100000)))
    job.refused(["run", "model.onnx", "claim2.png", "-o", "l.png"], 2, "claim2.png", "30000", "1032",
                **memory_capped())


def test_a_jpeg_header_claiming_gigabytes(job):
    from PIL import Image
    import io
    buf = io.BytesIO()
    Image.new("RGB", (16, 16)).save(buf, "JPEG")
    data = bytearray(buf.getvalue())
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = struct.pack(">HH", 30000, 30000)  # height, width: 2.7 GB of RGB
    job.write("claim.jpg", bytes(data))
    job.refused(["run", "model.onnx", "claim.jpg", "-o", "l.png"], 2, "claim.jpg", "30000", **memory_capped())


def test_a_tiff_header_claiming_gigabytes(job):
    from PIL import Image
    Image.new("L", (16, 16)).save(job.path("small.tif"), compression="tiff_deflate")
    data = bytearray(job.path("small.tif").read_bytes())
    job.path("small.tif").unlink()
    # ImageWidth (256) and ImageLength (257) entries of the first IFD.
    ifd = struct.unpack_from("<I", data, 4)[0]
    for k in range(struct.unpack_from("<H", data, ifd)[0]):
        at = ifd + 2 + 12 * k
        tag, typ = struct.unpack_from("<HH", data, at)
        if tag in (256, 257, 278):  # ImageWidth, ImageLength, RowsPerStrip: one strip of 40000 rows
            struct.pack_into("<HHII", data, at, tag, 4, 1, 40000)  # LONG: 1.6 GB of grey
    job.write("claim.tif", bytes(data))
    job.refused(["run", "model.onnx", "claim.tif", "-o", "l.png"], 2, "claim.tif", "40000", **memory_capped())


def test_an_npy_header_claiming_terabytes(job):
    # A valid header for 1x1x32768x32768 float32 (4 GiB) followed by 64 bytes.
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 32768, 32768), }"
    header = header + " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    data = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + b"\0" * 64
    job.write("claim.npy", data)
    job.refused(["run", "model.onnx", "claim.npy", "--roi", "16,16", "-o", "o.npy"], 2, "claim.npy",
                "4294967296 bytes", "the file has 64", **memory_capped())
    job.refused(["run", "model.onnx", "--input", "claim.npy", "--output", "o.npy"], 2, "claim.npy",
                **memory_capped())


def test_host_memory_over_the_limit_is_refused_before_reading(box):
    convnet(box.path("model.onnx"))
    image_npy(box.path("x.npy"), (1, 1, 512, 512))
    r = box.refused(["run", "model.onnx", "x.npy", "--roi", "64,64", "-o", "o.npy", "--max-host-memory", "2M"], 2,
                    "x.npy", "needs", "host memory", "image 1.0 MiB", "accumulators 3.0 MiB", "--max-host-memory",
                    "2.0 MiB")
    # Labels instead of logits: a smaller result, the same refusal.
    box.refused(["run", "model.onnx", "x.npy", "--roi", "64,64", "-o", "o.npy", "--output", "labels",
                 "--max-host-memory", "2M"], 2, "needs", "--max-host-memory")
    # Enough: it runs, holding what it said.
    box.succeeds(["run", "model.onnx", "x.npy", "--roi", "64,64", "-o", "o.npy", "--max-host-memory", "64M"],
                 ["o.npy"])
    assert r.code == 2
