"""Bad model files and NPY inputs never crash: one line on stderr naming
the file and the problem, exit code 2, no file changed (the sandbox's
check). Each case writes its files into the case's sandbox."""
import os
import random

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from conftest import run_segrt
from onnx_util import init, save_model, tensor_input

BOX = None


@pytest.fixture(autouse=True)
def sandbox(box):
    """expect_bad runs in the case's sandbox, whose folder is tmp_path."""
    global BOX
    BOX = box
    yield box
    BOX = None


def expect_bad(args, file_name, *words):
    r = BOX.refused(args, 2, os.path.basename(str(file_name)), *words)
    return r.message


@pytest.fixture
def tiny(models):
    return models / "basicunet2d_tiny.onnx"


def test_truncated_model(tmp_path, tiny):
    data = tiny.read_bytes()
    for cut in [len(data) // 2, len(data) - 3, 17]:
        bad = tmp_path / f"truncated_{cut}.onnx"
        bad.write_bytes(data[:cut])
        expect_bad(["info", bad], bad)


def test_random_bytes(tmp_path):
    rng = random.Random(1234)
    for i in range(5):
        bad = tmp_path / f"random_{i}.onnx"
        bad.write_bytes(bytes(rng.randrange(256) for _ in range(4096)))
        expect_bad(["info", bad], bad)


def test_empty_and_missing_files(tmp_path):
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    expect_bad(["info", empty], empty, "empty")
    expect_bad(["info", tmp_path / "missing.onnx"], "missing.onnx", "cannot open")
    expect_bad(["info", tmp_path], tmp_path.name, "not a regular file")


def test_protobuf_that_is_not_a_model(tmp_path):
    bad = tmp_path / "tensor.onnx"
    bad.write_bytes(helper.make_tensor("t", TensorProto.FLOAT, [2], [1.0, 2.0]).SerializeToString())
    expect_bad(["info", bad], bad, "not a valid ONNX model")


def test_deeply_nested_protobuf(tmp_path):
    # graph (7) -> node (1) -> attribute (5) -> g (6) -> node -> ... 2000 levels.
    inner = b""
    for _ in range(2000):
        inner = b"\x32" + _varint(len(inner)) + inner      # AttributeProto.g
        inner = b"\x2a" + _varint(len(inner)) + inner      # NodeProto.attribute
        inner = b"\x0a" + _varint(len(inner)) + inner      # GraphProto.node
    model = b"\x08\x08" + b"\x3a" + _varint(len(inner)) + inner
    bad = tmp_path / "nested.onnx"
    bad.write_bytes(model)
    expect_bad(["info", bad], bad, "nest deeper")


def _varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def test_unsupported_operator(tmp_path):
    bad = tmp_path / "custom_op.onnx"
    node = helper.make_node("FancyNorm", ["x"], ["y"], name="my_fancy_node", domain="com.example")
    graph = helper.make_graph([node], "g", [tensor_input("x", [1, 4])], [tensor_input("y", [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    onnx.save(model, str(bad))
    expect_bad(["info", bad], bad, "FancyNorm", "com.example", "my_fancy_node")
    bad2 = tmp_path / "unknown_default_op.onnx"
    node = helper.make_node("NonMaxSuppression", ["x"], ["y"], name="nms")
    save_model(bad2, [node], [tensor_input("x", [1, 4])], [tensor_input("y", [1, 4])], check=False)
    expect_bad(["info", bad2], bad2, "NonMaxSuppression", "nms")


def test_opset_too_new(tmp_path):
    bad = tmp_path / "opset24.onnx"
    save_model(bad, [helper.make_node("Relu", ["x"], ["y"])], [tensor_input("x", [2])], [tensor_input("y", [2])],
               opset=24, ir_version=11, check=False)
    expect_bad(["info", bad], bad, "opset 24", "newer")


def test_contradictory_shapes(tmp_path):
    bad = tmp_path / "contradiction.onnx"
    save_model(bad, [helper.make_node("Add", ["a", "b"], ["y"], name="the_add")],
               [tensor_input("a", [1, 3]), tensor_input("b", [1, 4])], [tensor_input("y", [1, 3])], check=False)
    expect_bad(["info", bad], bad, "the_add", "broadcast")
    bad2 = tmp_path / "conv_channels.onnx"
    w = np.zeros((8, 5, 3, 3), np.float32)
    save_model(bad2, [helper.make_node("Conv", ["x", "w"], ["y"], name="conv_a")],
               [tensor_input("x", [1, 4, 16, 16])], [tensor_input("y", None)], [init("w", w)], check=False)
    expect_bad(["info", bad2], bad2, "conv_a")
    bad3 = tmp_path / "declared_output.onnx"
    save_model(bad3, [helper.make_node("Relu", ["x"], ["y"], name="r")],
               [tensor_input("x", [2, 3])], [tensor_input("y", [2, 5])], check=False)
    expect_bad(["info", bad3], bad3, "declared")


def _empty_tensor(name, dims):
    """A TensorProto with dims and no data (helper.make_tensor insists on data)."""
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend(dims)
    return t


def _external_model(path, location, length=None, offset=None, dims=(4,)):
    t = _empty_tensor("w", dims)
    t.data_location = TensorProto.EXTERNAL
    entries = {"location": location}
    if length is not None:
        entries["length"] = str(length)
    if offset is not None:
        entries["offset"] = str(offset)
    for k, v in entries.items():
        e = t.external_data.add()
        e.key, e.value = k, v
    save_model(path, [helper.make_node("Add", ["x", "w"], ["y"])], [tensor_input("x", list(dims))],
               [tensor_input("y", list(dims))], [t], check=False)


def test_external_data_escaping_the_folder(tmp_path):
    sub = tmp_path / "model"
    sub.mkdir()
    (tmp_path / "outside.bin").write_bytes(np.ones(4, np.float32).tobytes())
    for i, loc in enumerate(["../outside.bin", "/etc/hostname", "a/../../outside.bin"]):
        bad = sub / f"escape_{i}.onnx"
        _external_model(bad, loc)
        expect_bad(["info", bad], bad, "inside the model's folder")
    os.symlink(tmp_path / "outside.bin", sub / "link.bin")
    bad = sub / "symlink.onnx"
    _external_model(bad, "link.bin")
    expect_bad(["info", bad], bad, "outside the model's folder")


def test_external_data_shorter_than_declared(tmp_path):
    (tmp_path / "w.bin").write_bytes(np.ones(3, np.float32).tobytes())
    bad = tmp_path / "short.onnx"
    _external_model(bad, "w.bin")
    expect_bad(["info", bad], bad, "shorter than declared")
    bad2 = tmp_path / "offset.onnx"
    (tmp_path / "w4.bin").write_bytes(np.ones(4, np.float32).tobytes())
    _external_model(bad2, "w4.bin", offset=8)
    expect_bad(["info", bad2], bad2, "shorter than declared")
    bad3 = tmp_path / "length.onnx"
    _external_model(bad3, "w4.bin", length=12)
    expect_bad(["info", bad3], bad3, "length")


def test_dims_that_overflow(tmp_path):
    t = _empty_tensor("w", [1 << 31, 1 << 31, 1 << 31])
    bad = tmp_path / "overflow.onnx"
    save_model(bad, [helper.make_node("Relu", ["w"], ["y"])], [], [tensor_input("y", None)], [t], check=False)
    expect_bad(["info", bad], bad, "overflow")
    bad2 = tmp_path / "huge_raw.onnx"
    t = _empty_tensor("w", [1 << 20, 1 << 20])
    t.raw_data = b"\0" * 16
    save_model(bad2, [helper.make_node("Relu", ["w"], ["y"])], [], [tensor_input("y", None)], [t], check=False)
    expect_bad(["info", bad2], bad2, "raw_data")
    ok = tmp_path / "relu.onnx"
    save_model(ok, [helper.make_node("Relu", ["x"], ["y"])], [tensor_input("x", ["n", 4])], [tensor_input("y", ["n", 4])])
    expect_bad(["info", ok, "--shape", "x=4294967296x4294967296"], "x", "64 bits")


def test_npy_problems(tmp_path, tiny):
    good = np.zeros((2, 1, 96, 128), np.float32)
    out = tmp_path / "out.npy"
    cases = {
        "bad_magic.npy": b"NOTNUMPY" + b"\0" * 100,
        "bad_header.npy": b"\x93NUMPY\x01\x00\x10\x00{'descr': 'garbage" + b"\0" * 64,
        "long_header.npy": b"\x93NUMPY\x01\x00\xff\xff{}",
        "truncated.npy": _npy_bytes(good)[:-100],
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        expect_bad(["run", tiny, "--input", tmp_path / name, "--output", out], name)
    np.save(tmp_path / "fortran.npy", np.asfortranarray(np.zeros((2, 3, 4, 5), np.float32)))
    expect_bad(["run", tiny, "--input", tmp_path / "fortran.npy", "--output", out], "fortran.npy", "Fortran")
    np.save(tmp_path / "f64.npy", good.astype(np.float64))
    expect_bad(["run", tiny, "--input", tmp_path / "f64.npy", "--output", out], "basicunet2d_tiny", "image", "float32", "float64")
    np.save(tmp_path / "rank3.npy", good[0])
    expect_bad(["run", tiny, "--input", tmp_path / "rank3.npy", "--output", out], "basicunet2d_tiny", "image", "rank 4", "1x96x128")
    np.save(tmp_path / "channels.npy", np.zeros((2, 3, 96, 128), np.float32))
    expect_bad(["run", tiny, "--input", tmp_path / "channels.npy", "--output", out], "basicunet2d_tiny", "image", "2x3x96x128")
    assert not out.exists()


def _npy_bytes(a):
    import io
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def test_usage_errors(tiny, tmp_path):
    assert run_segrt("info").returncode == 2
    assert run_segrt("info", tiny, "--shape", "image").returncode == 2
    assert run_segrt("info", tiny, "--shape", "nosuch=1x2").returncode == 2
    assert run_segrt("info", tiny, "--bogus").returncode == 2
    assert run_segrt("run", tiny).returncode == 2
    assert run_segrt("run", tiny, "--input", "x.npy").returncode == 2


def _model(path, nodes, inputs, outputs):
    save_model(path, nodes, [tensor_input(n, [2]) for n in inputs], [tensor_input(n, [2]) for n in outputs],
               check=False)


def test_malformed_graphs(tmp_path):
    bad = tmp_path / "cyclic.onnx"
    _model(bad, [helper.make_node("Relu", ["b"], ["a"], name="n1"), helper.make_node("Relu", ["a"], ["b"], name="n2"),
                 helper.make_node("Add", ["x", "a"], ["y"], name="n3")], ["x"], ["y"])
    expect_bad(["info", bad], bad, "cycle")
    bad = tmp_path / "self_loop.onnx"
    _model(bad, [helper.make_node("Relu", ["z"], ["z"], name="loop")], ["x"], ["z"])
    expect_bad(["info", bad], bad, "loop", "cycle")
    bad = tmp_path / "two_producers.onnx"
    _model(bad, [helper.make_node("Relu", ["x"], ["y"], name="p1"), helper.make_node("Neg", ["x"], ["y"], name="p2")],
           ["x"], ["y"])
    expect_bad(["info", bad], bad, "p2", "already defined")
    bad = tmp_path / "unproduced_output.onnx"
    _model(bad, [helper.make_node("Relu", ["x"], ["y"], name="r")], ["x"], ["w"])
    expect_bad(["info", bad], bad, "`w`", "not computed")
    bad = tmp_path / "undefined_input.onnx"
    _model(bad, [helper.make_node("Add", ["x", "ghost"], ["y"], name="add")], ["x"], ["y"])
    expect_bad(["info", bad], bad, "ghost")


def test_model_paths_that_are_not_files(tmp_path):
    os.symlink("loop_b.onnx", tmp_path / "loop_a.onnx")
    os.symlink("loop_a.onnx", tmp_path / "loop_b.onnx")
    expect_bad(["info", tmp_path / "loop_a.onnx"], "loop_a.onnx", "cannot open")
    os.mkfifo(tmp_path / "fifo.onnx")  # a reader that opened it would wait for a writer forever
    expect_bad(["info", tmp_path / "fifo.onnx"], "fifo.onnx", "not a regular file")
    expect_bad(["run", tmp_path / "fifo.onnx", "--input", "x.npy", "--output", "y.npy"], "fifo.onnx")
    expect_bad(["info", "/dev/zero"], "/dev/zero", "not a regular file")


def test_every_command_on_a_random_model(tmp_path):
    bad = tmp_path / "noise.onnx"
    bad.write_bytes(random.Random(7).randbytes(2048))
    np.save(tmp_path / "x.npy", np.zeros((1, 1, 32, 32), np.float32))
    expect_bad(["run", bad, "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy"], bad)
    expect_bad(["run", bad, tmp_path / "x.npy", "--roi", "16,16", "-o", tmp_path / "y.npy"], bad)
    expect_bad(["bench", bad, "--shape", "x=1x1x32x32"], bad)
    expect_bad(["build", bad, "-o", tmp_path / "m.plan"], bad)
