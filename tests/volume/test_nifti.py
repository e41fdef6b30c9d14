"""The NIfTI reader and writer against nibabel (values, affines) and
SimpleITK (geometry), on files nibabel writes here and on those its wheel
bundles; region reads against the whole read."""
import numpy as np
import pytest

from conftest import (assert_geometry, fails, geometry_of_affine, geometry_of_sitk, info, nibabel_files, read,
                      vol)

nib = pytest.importorskip("nibabel")
sitk = pytest.importorskip("SimpleITK")

OBLIQUE = np.array([[0.0, -2.0, 0.3, 10.0], [1.5, 0.0, 0.0, -20.0], [0.0, 0.1, 3.0, 5.0], [0, 0, 0, 1.0]])
# A rotation (the qform's kind of affine) with spacing 1.5, 2, 3.
ROT = np.eye(4)
ROT[:3, :3] = np.linalg.qr(OBLIQUE[:3, :3])[0] @ np.diag([1.5, 2.0, 3.0])
ROT[:3, 3] = [10, -20, 5]
RAS = np.array([[1.2, 0, 0, -30.0], [0, 0.8, 0, 40.0], [0, 0, 2.5, -7.0], [0, 0, 0, 1.0]])


def volume(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return (rng.standard_normal(shape) * 100).astype(dt)
    info_ = np.iinfo(dt)
    return rng.integers(max(info_.min, -30000), min(info_.max, 60000), size=shape, endpoint=True).astype(dt)


def save(tmp_path, name, data, affine, qcode=1, scode=1, cls=None, endian=None, **hdr):
    cls = cls or nib.Nifti1Image
    header = (cls.header_class)(endianness=endian) if endian else None
    img = cls(data, None, header=header, dtype=data.dtype)
    h = img.header
    # pixdim as the affine's column lengths, which ITK takes for spacing
    h.set_zooms(tuple(np.linalg.norm(np.asarray(affine)[:3, :3], axis=0)) + h.get_zooms()[3:])
    h.set_data_dtype(data.dtype)
    if qcode is not None:
        h.set_qform(affine, qcode)
    else:
        h.set_qform(None, 0)
    if scode is not None:
        h.set_sform(affine, scode)
    else:
        h.set_sform(None, 0)
    for k, v in hdr.items():
        h[k] = v
    path = tmp_path / name
    nib.save(img, str(path))
    return path


def as_segrt(a):
    """nibabel's (x, y, z[, t]) array as segrt's C x D x H x W."""
    a = np.asarray(a)
    if a.ndim == 3:
        a = a[..., None]
    return np.transpose(a, (3, 2, 1, 0))


def check_against_nibabel(path, tmp_path, dtype=None):
    img = nib.load(str(path))
    got = info(path)
    sp, org, dirs = geometry_of_affine(img.affine)
    assert got["known"] == 1
    assert_geometry(got, sp, org, dirs)
    data = read(path, tmp_path)
    want = as_segrt(np.asanyarray(img.dataobj))
    if dtype:
        assert data.dtype == np.dtype(dtype)
    np.testing.assert_allclose(data.astype(np.float64), want.astype(np.float64), rtol=1e-6, atol=1e-6)
    return got, data


@pytest.mark.parametrize("ext", [".nii", ".nii.gz"])
@pytest.mark.parametrize("dtype,want", [("u1", "uint8"), ("i1", "int8"), ("i2", "int16"), ("u2", "uint16"),
                                        ("i4", "int32"), ("u4", "int64"), ("i8", "int64"), ("f4", "float32"),
                                        ("f8", "float64")])
def test_each_dtype(tmp_path, ext, dtype, want):
    data = volume((7, 5, 4), dtype, seed=len(dtype))
    path = save(tmp_path, "v" + ext, data, OBLIQUE)
    got, arr = check_against_nibabel(path, tmp_path, want)
    assert (got["depth"], got["height"], got["width"], got["channels"]) == (4, 5, 7, 1)
    np.testing.assert_array_equal(arr[0], data.transpose(2, 1, 0).astype(want))


def test_geometry_matches_simpleitk(tmp_path):
    for name, aff, q, s in [("q.nii", OBLIQUE, 1, None), ("s.nii", RAS, None, 2), ("both.nii.gz", RAS, 1, 1)]:
        if name == "q.nii":
            aff = ROT  # a qform is a rotation
        path = save(tmp_path, name, volume((6, 5, 4), "i2"), aff, q, s)
        got = info(path)
        sp, org, dirs = geometry_of_sitk(sitk.ReadImage(str(path)))
        assert_geometry(got, sp, org, dirs)
        assert (got["qform_code"], got["sform_code"]) == (q or 0, s or 0)


def test_sform_preferred_when_both_disagree(tmp_path):
    data = volume((6, 5, 4), "i2")
    img = nib.Nifti1Image(data, None)
    img.header.set_qform(RAS, 1)
    img.header.set_sform(OBLIQUE, 2)
    path = tmp_path / "disagree.nii.gz"
    nib.save(img, str(path))
    got = info(path)
    sp, org, dirs = geometry_of_affine(nib.load(str(path)).affine)  # nibabel's best affine: the sform
    assert_geometry(got, sp, org, dirs)
    sp_q, org_q, _ = geometry_of_affine(RAS)
    assert not np.allclose(got["origin"], org_q)


def test_no_codes_means_no_geometry(tmp_path):
    path = save(tmp_path, "plain.nii", volume((6, 5, 4), "u1"), RAS, None, None)
    got = info(path)
    assert got["known"] == 0
    assert got["origin"] == [0, 0, 0]
    assert got["direction"] == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]


@pytest.mark.parametrize("dtype,want", [("i2", "float32"), ("u1", "float32"), ("i4", "float64"), ("f4", "float32")])
def test_scaling_applied(tmp_path, dtype, want):
    data = volume((6, 5, 4), dtype)
    img = nib.Nifti1Image(data, RAS, dtype=np.dtype(dtype))
    img.header.set_slope_inter(0.25, -100.0)
    path = tmp_path / "scaled.nii.gz"
    nib.save(img, str(path))
    got = info(path)
    assert got["dtype"] == want
    arr = read(path, tmp_path)
    want_vals = as_segrt(nib.load(str(path)).get_fdata())
    np.testing.assert_allclose(arr, want_vals, rtol=1e-6, atol=1e-4)


def test_identity_scaling_keeps_the_type(tmp_path):
    path = save(tmp_path, "id.nii", volume((6, 5, 4), "i2"), RAS, scl_slope=1.0, scl_inter=0.0)
    assert info(path)["dtype"] == "int16"


def test_4d_is_channels(tmp_path):
    data = volume((6, 5, 4, 3), "f4")
    for ext in (".nii", ".nii.gz"):
        path = save(tmp_path, "four" + ext, data, RAS)
        got, arr = check_against_nibabel(path, tmp_path, "float32")
        assert got["channels"] == 3
        assert vol("regions", path, 40, 3).returncode == 0


def test_nifti2(tmp_path):
    data = volume((6, 5, 4), "i2")
    path = save(tmp_path, "two.nii.gz", data, OBLIQUE, cls=nib.Nifti2Image)
    assert open(path, "rb").read(2) == b"\x1f\x8b"
    check_against_nibabel(path, tmp_path, "int16")
    path = save(tmp_path, "two.nii", data, OBLIQUE, cls=nib.Nifti2Image)
    check_against_nibabel(path, tmp_path, "int16")


def test_big_endian(tmp_path):
    data = volume((6, 5, 4), ">i2")
    path = save(tmp_path, "be.nii", data, RAS, endian=">")
    hdr = open(path, "rb").read(4)
    assert hdr == b"\x00\x00\x01\x5c"
    check_against_nibabel(path, tmp_path, "int16")
    path = save(tmp_path, "be.nii.gz", data.astype(">f4"), RAS, endian=">")
    check_against_nibabel(path, tmp_path, "float32")


def test_rgb24(tmp_path):
    rgb = np.zeros((6, 5, 4), dtype=[("R", "u1"), ("G", "u1"), ("B", "u1")])
    rng = np.random.default_rng(1)
    for c in "RGB":
        rgb[c] = rng.integers(0, 255, size=rgb.shape)
    img = nib.Nifti1Image(rgb, RAS)
    path = tmp_path / "rgb.nii.gz"
    nib.save(img, str(path))
    got = info(path)
    assert (got["channels"], got["dtype"]) == (3, "uint8")
    arr = read(path, tmp_path)
    for k, c in enumerate("RGB"):
        np.testing.assert_array_equal(arr[k], rgb[c].transpose(2, 1, 0))


@pytest.mark.parametrize("ext", [".nii", ".nii.gz"])
def test_random_boxes_equal_the_whole_read(tmp_path, ext):
    path = save(tmp_path, "big" + ext, volume((23, 17, 11), "i2"), RAS)
    p = vol("regions", path, 60, 11)
    assert "match the whole read" in p.stdout
    whole = read(path, tmp_path)
    box = read(path, tmp_path, box=(2, 3, 4, 5, 6, 7))
    np.testing.assert_array_equal(box, whole[:, 2:7, 3:9, 4:11])


def test_bundled_files(tmp_path):
    """nibabel's wheel: every .nii/.nii.gz it ships that holds an image
    segrt reads, values and affine against nibabel."""
    checked = []
    for path in sorted(nibabel_files().glob("*.nii*")):
        img = nib.load(str(path))
        if not isinstance(img, (nib.Nifti1Image, nib.Nifti2Image)) or "dconn" in path.name:
            continue
        check_against_nibabel(path, tmp_path)
        checked.append(path.name)
    assert {"anatomical.nii", "example4d.nii.gz", "example_nifti2.nii.gz"} <= set(checked)


@pytest.mark.parametrize("affine", ["rotation", "sheared"])
def test_writer_round_trip_keeps_the_geometry(tmp_path, affine):
    aff = ROT if affine == "rotation" else OBLIQUE
    src = save(tmp_path, "img.nii.gz", volume((6, 5, 4), "i2"), aff, 1, 2)
    labels = (np.arange(4 * 5 * 6) % 7).astype(np.uint8).reshape(4, 5, 6)  # D, H, W
    lab = tmp_path / "labels.npy"
    np.save(lab, labels)
    for ext in (".nii.gz", ".nii"):
        out = tmp_path / ("out" + ext)
        vol("save", lab, out, src)
        back = nib.load(str(out))
        np.testing.assert_allclose(back.affine, nib.load(str(src)).affine, atol=1e-4)
        assert (int(back.header["qform_code"]), int(back.header["sform_code"])) == (1, 2)
        if affine == "rotation":  # the qform holds a rotation only: the same affine then
            np.testing.assert_allclose(back.get_qform(), back.get_sform(), atol=1e-3)
        np.testing.assert_array_equal(np.asanyarray(back.dataobj), labels.transpose(2, 1, 0))
        assert back.get_data_dtype() == np.uint8
        assert not list(tmp_path.glob(".out*segrt-*"))


@pytest.mark.parametrize("dtype", ["u2", "i2", "f4"])
def test_writer_dtypes(tmp_path, dtype):
    labels = volume((3, 4, 5), dtype)
    lab = tmp_path / "l.npy"
    np.save(lab, labels)
    out = tmp_path / "l.nii.gz"
    vol("save", lab, out)
    back = nib.load(str(out))
    assert back.get_data_dtype() == np.dtype(dtype)
    np.testing.assert_array_equal(np.asanyarray(back.dataobj), labels.transpose(2, 1, 0))
    assert int(back.header["qform_code"]) == 0 and int(back.header["sform_code"]) == 0


def test_writer_large_gz_is_one_member(tmp_path):
    """A label map of several deflate blocks (1 MiB each) and so several
    threads: nibabel and Python's zlib read back the data, and the file is
    one gzip member ending at its last byte (some readers stop after the
    first member)."""
    import gzip
    import zlib

    rng = np.random.default_rng(7)
    d, h, w = 96, 256, 256  # 6 MiB: the writer's threshold for threads is 4 blocks
    zz, yy, xx = np.meshgrid(np.arange(d), np.arange(h), np.arange(w), indexing="ij")
    labels = ((zz // 9 + yy // 40 + xx // 50) % 5).astype(np.uint8)  # smooth regions
    noise = rng.random(labels.shape) < 0.01
    labels[noise] = rng.integers(0, 5, int(noise.sum()))
    lab = tmp_path / "big.npy"
    np.save(lab, labels)
    out = tmp_path / "big.nii.gz"
    vol("save", lab, out)
    raw = out.read_bytes()
    z = zlib.decompressobj(16 + 15)
    body = z.decompress(raw) + z.flush()
    assert z.eof and z.unused_data == b"" and not z.unconsumed_tail
    assert body == gzip.decompress(raw)
    assert len(body) == 352 + labels.size
    assert body[352:] == labels.tobytes()  # D, H, W in C order is NIfTI's x fastest
    back = nib.load(str(out))
    assert back.shape == (w, h, d) and back.get_data_dtype() == np.uint8
    np.testing.assert_array_equal(np.asanyarray(back.dataobj), labels.transpose(2, 1, 0))
    assert len(raw) < labels.size / 5


def test_bad_files_fail_in_one_line(tmp_path):
    good = save(tmp_path, "g.nii.gz", volume((6, 5, 4), "i2"), RAS)
    raw = open(good, "rb").read()
    (tmp_path / "trunc.nii.gz").write_bytes(raw[: len(raw) // 2])
    fails(["read", tmp_path / "trunc.nii.gz", tmp_path / "x.npy"], "trunc.nii.gz")
    plain = save(tmp_path, "p.nii", volume((6, 5, 4), "i2"), RAS)
    b = bytearray(open(plain, "rb").read())
    (tmp_path / "short.nii").write_bytes(bytes(b[:-10]))
    fails(["info", tmp_path / "short.nii"], "short.nii", "more than")
    big = bytearray(b)
    big[42:44] = (30000).to_bytes(2, "little")  # dim[1]
    (tmp_path / "claims.nii").write_bytes(bytes(big))
    fails(["info", tmp_path / "claims.nii"], "claims.nii", "more than")
    pair = bytearray(b)
    pair[344:348] = b"ni1\0"
    (tmp_path / "pair.nii").write_bytes(bytes(pair))
    fails(["info", tmp_path / "pair.nii"], "pair.nii", ".hdr/.img")
    cplx = bytearray(b)
    cplx[70:72] = (32).to_bytes(2, "little")  # complex64
    (tmp_path / "complex.nii").write_bytes(bytes(cplx))
    fails(["info", tmp_path / "complex.nii"], "complex.nii", "datatype 32")
    (tmp_path / "junk.nii.gz").write_bytes(b"\x1f\x8b" + b"\0" * 100)
    fails(["info", tmp_path / "junk.nii.gz"], "junk.nii.gz")
    fails(["save", tmp_path / "nope.npy", tmp_path / "o.txt"], "nope.npy")
