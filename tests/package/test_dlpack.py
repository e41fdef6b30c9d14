"""Tensors through DLPack: numpy's own __dlpack__ (behind an object that
offers nothing else) gives what the buffer path gives; strided host
tensors are copied; each capsule is consumed and its deleter called once;
CUDA tensors are refused by CPU engines with a message."""
import sys

import numpy as np
import pytest

import segrt
from conftest import tiny_input


class OnlyDLPack:
    """A tensor seen only through the DLPack protocol, as torch's or jax's."""

    def __init__(self, a, device=None):
        self.a, self.device = a, device
        self.shape = a.shape
        self.calls = []

    def __dlpack__(self, **kw):
        self.calls.append(kw)
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.device or self.a.__dlpack_device__()


def test_dlpack_round_trip(tiny_engine):
    x = tiny_input(10)
    want = tiny_engine(x)
    w = OnlyDLPack(x)
    y = tiny_engine(w)
    assert w.calls == [{}]  # a host tensor: no stream asked for
    assert isinstance(y, np.ndarray) and np.array_equal(y, want)
    back = np.from_dlpack(y)  # and out again through numpy's consumer
    assert np.shares_memory(back, y) and np.array_equal(back, want)
    out = np.zeros_like(want)
    assert tiny_engine(x, out=OnlyDLPack(out)) is not None and np.array_equal(out, want)


def test_strided_host_tensors_are_copied(tiny_engine):
    x = tiny_input(11, (1, 1, 48, 32))
    f = np.asfortranarray(x)
    assert np.array_equal(tiny_engine(OnlyDLPack(f)), tiny_engine(x))
    rev = np.ascontiguousarray(x[..., ::-1])[..., ::-1]  # a view with negative strides
    assert np.array_equal(tiny_engine(OnlyDLPack(rev)), tiny_engine(x))
    with pytest.raises(ValueError, match="not contiguous"):
        tiny_engine(x, out=OnlyDLPack(np.zeros((1, 2, 32, 48), np.float32, order="F")))


def test_capsules_are_consumed_and_released(tiny_engine):
    x = tiny_input(12)
    before = sys.getrefcount(x)
    for _ in range(100):
        tiny_engine(OnlyDLPack(x))
    assert sys.getrefcount(x) == before
    with pytest.raises(segrt.InvalidArgumentError):
        tiny_engine(OnlyDLPack(x.astype(np.float64)))
    assert sys.getrefcount(x) == before


def test_cuda_tensors_need_a_cuda_engine(tiny_engine):
    x = tiny_input(13)
    w = OnlyDLPack(x, device=(2, 0))
    with pytest.raises(ValueError, match=r"input `image` is in CUDA memory \(cuda:0\); this engine runs on the CPU"):
        tiny_engine(w)
    assert w.calls == []  # refused before the capsule is asked for
    with pytest.raises(ValueError, match="DLPack device type 7"):
        tiny_engine(OnlyDLPack(x, device=(7, 0)))
    with pytest.raises(TypeError, match="segrt has no dtype for DLPack type"):
        tiny_engine(OnlyDLPack(x.astype(np.complex64)))


def test_other_objects_are_refused(tiny_engine):
    with pytest.raises(TypeError, match="input `image`: segrt takes numpy arrays .* not object"):
        tiny_engine(object())
    with pytest.raises(TypeError, match="no dtype for buffer format"):
        tiny_engine(np.zeros((1, 1, 32, 32), np.uint32))
