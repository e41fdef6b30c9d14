"""Every failed C call is a segrt.Error subclass carrying the library's
message; wrong argument types are TypeError or ValueError naming the
argument. Bad input never crashes."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import segrt
from segrt import _errors, _segrt
from conftest import tiny_input


def test_each_status_has_its_class():
    assert _errors.BY_STATUS[0] is segrt.Error
    for status, cls in enumerate(_errors.BY_STATUS[1:], 1):
        assert issubclass(cls, segrt.Error) and cls.status == status
        assert cls.status_name == _segrt.status_name(status)
    assert issubclass(segrt.InvalidArgumentError, ValueError) and issubclass(segrt.ShapeError, ValueError)
    assert issubclass(segrt.FileError, OSError) and issubclass(segrt.OutOfMemoryError, MemoryError)


def test_bad_files(tmp_path, tiny):
    segrt.Engine.build(tiny, tmp_path / "whole.plan", shapes={"x": (1, 4)}).close()
    whole = (tmp_path / "whole.plan").read_bytes()
    (tmp_path / "cut.plan").write_bytes(whole[:len(whole) // 2])
    with pytest.raises(segrt.InvalidModelError, match="cut.plan"):
        segrt.Engine(tmp_path / "cut.plan")
    with pytest.raises(segrt.FileError, match="nope.onnx"):
        segrt.Engine(tmp_path / "nope.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x08\x07this is not a model" * 10)
    with pytest.raises(segrt.InvalidModelError, match="junk.onnx"):
        segrt.Engine(junk)
    plan = tmp_path / "old.plan"
    plan.write_bytes(b"SEGRTPLN" + b"\0" * 20)
    with pytest.raises(segrt.UnsupportedError, match="old.plan: plan format 0"):
        segrt.Engine(plan)


def _save(tmp_path, name, nodes, inputs, outputs, inits=()):
    m = helper.make_model(helper.make_graph(nodes, name, inputs, outputs, list(inits)),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    p = tmp_path / f"{name}.onnx"
    onnx.save(m, str(p))
    return p


def test_unsupported_and_contradictory_models(tmp_path):
    f = TensorProto.FLOAT
    p = _save(tmp_path, "custom", [helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")],
              [helper.make_tensor_value_info("x", f, [1, 4])], [helper.make_tensor_value_info("y", f, [1, 4])])
    with pytest.raises(segrt.UnsupportedError, match="Frobnicate"):
        segrt.Engine(p)
    p = _save(tmp_path, "contradiction", [helper.make_node("Add", ["a", "b"], ["y"])],
              [helper.make_tensor_value_info("a", f, [2, 3]), helper.make_tensor_value_info("b", f, [4, 5])],
              [helper.make_tensor_value_info("y", f, None)])
    with pytest.raises(segrt.ShapeError, match="Add"):
        segrt.Engine(p)


def test_bad_inputs(tiny_engine, tiny):
    x = tiny_input(20)
    with pytest.raises(segrt.InvalidArgumentError, match="input `image` expects float32, given float64"):
        tiny_engine(x.astype(np.float64))
    with pytest.raises(segrt.InvalidArgumentError, match="input `image`"):
        tiny_engine(x[0])  # rank 3
    with pytest.raises(segrt.Error, match="basicunet2d_tiny.onnx"):
        tiny_engine(tiny_input(21, (1, 3, 32, 48)))  # 3 channels for 1
    with pytest.raises(ValueError, match="the model takes 1 inputs; 2 given"):
        tiny_engine(x, x)
    with pytest.raises(ValueError, match="no input 'img'"):
        tiny_engine.run({"img": x})
    with pytest.raises(ValueError, match="input 'image' is missing"):
        tiny_engine.run({})
    with pytest.raises(segrt.InvalidArgumentError, match="nope"):
        segrt.Engine(tiny, shapes={"nope": (1, 4)})
    with segrt.Engine(tiny, shapes={"x": (2, 4)}) as e:
        with pytest.raises(segrt.InvalidArgumentError, match=r"input `x` expects batchx4, given 3x4: batch is 2 here"):
            e(np.zeros((3, 4), np.float32))


def test_bad_arguments(tiny):
    with pytest.raises(TypeError):
        segrt.Engine(123)
    with pytest.raises(ValueError, match="device: want 'cpu', 'cuda' or 'cuda:N', not 'tpu'"):
        segrt.Engine(tiny, device="tpu")
    with pytest.raises(ValueError, match="precision: want one of fp32, tf32, fp16, bf16, not 'fp8'"):
        segrt.Engine(tiny, precision="fp8")
    with pytest.raises(ValueError, match="applies to CUDA devices"):
        segrt.Engine(tiny, precision="fp16")
    with pytest.raises(ValueError, match="threads"):
        segrt.Engine(tiny, threads=-2)
    with pytest.raises(TypeError, match=r"shapes\['x'\]"):
        segrt.Engine(tiny, shapes={"x": "1x4"})
    with pytest.raises(TypeError, match="shapes: want a dict"):
        segrt.Engine(tiny, shapes=[(1, 4)])
    with pytest.raises(TypeError, match="class_axis"):
        segrt.compare(np.zeros(3), np.zeros(3), class_axis="1")


def test_messages_are_per_thread_and_never_stale(tiny_engine):
    # A failure after a success reports its own message, not an old one.
    x = tiny_input(22)
    tiny_engine(x)
    with pytest.raises(segrt.InvalidArgumentError) as e1:
        tiny_engine(x.astype(np.float16))
    assert "given float16" in str(e1.value)
    with pytest.raises(segrt.InvalidArgumentError) as e2:
        tiny_engine(x.astype(np.int32))
    assert "given int32" in str(e2.value)
