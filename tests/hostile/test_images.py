"""Bad image files: truncated, corrupt, disguised, of a kind segrt does not
take, stacks whose pages disagree and pyramids. One line naming the file,
exit 2, no file changed (claims past what a file holds: test_limits.py)."""
import io

import numpy as np
import pytest
from PIL import Image

from hostile_util import convnet


@pytest.fixture
def job(box):
    convnet(box.path("rgb.onnx"), channels=3, metadata={"segrt.roi": "16,16"})
    convnet(box.path("grey.onnx"), channels=1, metadata={"segrt.roi": "16,16"})
    return box


def encoded(fmt, mode="RGB", size=(32, 32), **kw):
    buf = io.BytesIO()
    rng = np.random.default_rng(0)
    a = rng.integers(0, 255, (size[1], size[0], len(mode) if mode != "L" else 1), dtype=np.uint8)
    Image.fromarray(a.squeeze() if mode == "L" else a, mode).save(buf, fmt, **kw)
    return buf.getvalue()


def run(name):
    return ["run", "rgb.onnx", name, "-o", "l.png"]


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "TIFF"])
def test_truncated_and_corrupt(job, fmt):
    # Compressed, so that flipped bits break the data, not only pixels.
    data = encoded(fmt, **({"compression": "tiff_deflate"} if fmt == "TIFF" else {}))
    ext = {"PNG": "png", "JPEG": "jpg", "TIFF": "tif"}[fmt]
    for cut in [len(data) // 2, len(data) * 3 // 4, 9]:
        job.write(f"cut{cut}.{ext}", data[:cut])
        job.refused(run(f"cut{cut}.{ext}"), 2, f"cut{cut}.{ext}")
    bad = bytearray(data)
    for i in range(len(bad) // 3, len(bad) - 4, 7):
        bad[i] ^= 0x5A
    job.write(f"flipped.{ext}", bytes(bad))
    job.refused(run(f"flipped.{ext}"), 2, f"flipped.{ext}")


def test_disguised_and_empty(job):
    job.write("text.png", b"this is not a picture at all, whatever the name says\n")
    job.refused(run("text.png"), 2, "text.png")
    job.write("empty.png", b"")
    job.refused(run("empty.png"), 2, "empty.png")
    job.write("npy-as.png", b"\x93NUMPY\x01\x00" + b"\0" * 100)
    job.refused(run("npy-as.png"), 2, "npy-as.png")


def test_kinds_segrt_does_not_take(job):
    job.write("cmyk.jpg", encoded("JPEG", "CMYK"))
    job.refused(run("cmyk.jpg"), 2, "cmyk.jpg")
    f = np.zeros((32, 32), np.float32)
    Image.fromarray(f, "F").save(job.path("float.tif"))
    job.refused(run("float.tif"), 2, "float.tif")
    # A grey image for a model of three channels: the model and the image named.
    job.write("grey.png", encoded("PNG", "L"))
    job.refused(run("grey.png"), 2, "rgb.onnx")


def test_stacks_that_are_not_volumes(job):
    pages = [Image.fromarray(np.full((30, 26), k, np.uint8)) for k in range(3)]
    pages[0].save(job.path("differ.tif"), save_all=True,
                  append_images=pages[1:] + [Image.fromarray(np.zeros((28, 26), np.uint8))])
    job.refused(["run", "grey.onnx", "differ.tif", "-o", "o.npy", "--roi", "2,16,16"], 2, "differ.tif", "page 3")
    pages[0].save(job.path("pyramid.tif"), save_all=True, append_images=[Image.fromarray(np.zeros((15, 13), np.uint8))])
    job.refused(["run", "grey.onnx", "pyramid.tif", "-o", "o.npy", "--roi", "2,16,16"], 2, "pyramid.tif", "pyramid")
