"""segrt from Python: segmentation networks compiled for the CPU or an
NVIDIA GPU, run on numpy arrays and DLPack tensors (torch, cupy, jax)
without copies, from any number of threads.

    import segrt
    with segrt.Engine("unet.onnx", device="cuda", precision="fp16") as engine:
        labels = segrt.sliding_window(engine, volume[None, None], roi=(96, 96, 96))

A thin binding over the C library's public API (include/segrt.h):
:class:`Engine` (models and plan files, runs, threads), :func:`sliding_window`
(windowed jobs over large images), :func:`compare` (the metrics of `segrt
compare`), :func:`devices`, :class:`DeviceArray` (results in CUDA memory)
and :class:`Error` with a subclass per C status."""
from __future__ import annotations

import atexit
import sys
from typing import Any, Dict, List, Optional

import numpy as np

from . import _segrt
from ._engine import Engine, TensorInfo
from ._errors import (CasesFailedError, DeviceError, Error, FileError, InternalError, InvalidArgumentError,
                      InvalidModelError, OutOfMemoryError, ShapeError, UnsupportedError, BY_STATUS)
from ._window import sliding_window
from ._volume import (Geometry, dicom_series, preprocess_from_nnunet, read_volume, run_cases, run_slide,
                      run_volume, save_dicom_seg, save_volume)

_segrt.register_errors(BY_STATUS)


def _torch_current_stream(device: int) -> int:
    # Called by the extension for torch CUDA tensors only, so torch is imported.
    return sys.modules["torch"].cuda.current_stream(device).cuda_stream


_segrt.register_torch_stream(_torch_current_stream)
atexit.register(_segrt.empty_cache)

#: The version of the libsegrt this package loaded ("MAJOR.MINOR.PATCH").
__version__: str = _segrt.version()

#: A result in CUDA memory (see its docstring); ``torch.from_dlpack(y)``
#: shares it, ``to_numpy(y)`` copies it to the host.
DeviceArray = _segrt.DeviceArray

__all__ = ["Engine", "TensorInfo", "DeviceArray", "sliding_window", "compare", "read_volume", "save_volume",
           "save_dicom_seg", "run_volume", "run_cases", "run_slide", "preprocess_from_nnunet", "dicom_series", "Geometry",
           "devices", "cuda_versions",
           "to_numpy", "empty_cache", "Error", "InvalidArgumentError", "FileError", "InvalidModelError", "UnsupportedError",
           "ShapeError", "OutOfMemoryError", "DeviceError", "InternalError", "CasesFailedError",
           "__version__"]


def to_numpy(x: Any) -> np.ndarray:
    """A host numpy array of x: a DeviceArray copied down, anything numpy
    takes as it is."""
    if isinstance(x, _segrt.DeviceArray):
        dt = np.dtype(np.uint16) if x.dtype == "bfloat16" else np.dtype(x.dtype)
        a = np.empty(x.shape, dt)
        x.copy_to(a)
        return a
    return np.asarray(x)


def empty_cache() -> None:
    """Frees the CUDA memory segrt keeps for the next results. A result
    that dies gives its block back to a small cache (at most 16 blocks of
    up to 64 MiB each) so that the next result of its size needs no
    cudaMalloc and cudaFree, which cost more than a small model's run; a
    block that was handed to another library through DLPack waits for the
    device before its reuse, as cudaFree would have."""
    _segrt.empty_cache()


def compare(a: Any, b: Any, class_axis: Optional[int] = None) -> Dict[str, Any]:
    """The metrics of ``segrt compare A B [--class-axis N] --json`` for a
    result `a` against a reference `b` of the same shape (any numeric
    dtypes; host arrays, DeviceArrays copied down): count, max_abs, mae,
    mse, rel_l2, psnr_db (inf when equal), psnr_range, nan_mismatches and
    shape; with `class_axis` (the class axis of logits or probabilities)
    also class_axis, n_classes, positions, agree, argmax_agreement, dice
    (per class, None for a class in neither label map) and mean_dice."""
    if class_axis is not None and (isinstance(class_axis, bool) or not isinstance(class_axis, (int, np.integer))):
        raise TypeError(f"class_axis: want an int or None, not {class_axis!r}")
    a, b = (np.ascontiguousarray(to_numpy(v)) for v in (a, b))
    return _segrt.compare(a, b, None if class_axis is None else int(class_axis))


def devices() -> List[Dict[str, Any]]:
    """The usable CUDA devices: index, name, compute_capability (major,
    minor), multiprocessors, total_memory, free_memory (bytes). Empty
    without a GPU or in a build without CUDA."""
    return _segrt.devices()


def cuda_versions() -> Dict[str, Any]:
    """built_with_cuda, and the CUDA driver, runtime and cuDNN versions
    (0 where absent)."""
    return _segrt.cuda_versions()
