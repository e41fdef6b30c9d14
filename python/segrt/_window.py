"""segrt.sliding_window: an image larger than the network's window, tiled,
run in batches of windows, blended and reduced (MONAI's
sliding_window_inference, nnU-Net's grid and mirroring, ensembles)."""
from __future__ import annotations

import sys
import time
from typing import Any, Callable, Iterable, Optional, Sequence, Tuple, Union

import numpy as np

from . import _segrt
from ._engine import Engine, engines_of
from ._errors import OutOfMemoryError

_BLENDS = {"constant": 0, "gaussian": 1, "gaussian_nnunet": 2}
_PADS = {"constant": 0, "reflect": 1, "replicate": 2}
_GRIDS = {"monai": 0, "nnunet": 1}
_OUTPUTS = {"logits": 0, "probs": 1, "labels": 2}
_ACTIVATIONS = {None: 0, "none": 1, "softmax": 2, "sigmoid": 3}
_ACCUMULATORS = {"fp32": 1, "fp16": 10, "bf16": 16}  # SEGRT_DTYPE_FLOAT32, FLOAT16, BFLOAT16
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

Progress = Union[bool, None, Callable[[int, int], Any]]


_AUTO = 2**64 - 1  # segrt.h's SEGRT_MAX_MEMORY_AUTO


def _bytes(v: Union[int, str, None], what: str) -> int:
    if v is None:
        return 0
    if what == "max_memory" and isinstance(v, str) and v.strip().lower() == "auto":
        return _AUTO
    if isinstance(v, bool):
        raise TypeError(f"{what}: want bytes (an int, or a size such as '2G'), not {v!r}")
    if isinstance(v, int):
        if v < 0:
            raise ValueError(f"{what}: want bytes >= 0, not {v}")
        return v
    if isinstance(v, str):
        s = v.strip().upper().rstrip("B").rstrip("I")
        unit = s[-1:] if s[-1:] in _UNITS else ""
        try:
            return int(float(s[:len(s) - len(unit)]) * _UNITS[unit])
        except ValueError:
            pass
    raise ValueError(f"{what}: want bytes (an int, or a size such as '2G'), not {v!r}")


class _Bar:
    """A progress line on stderr: windows done, windows/s and time left."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        dt = time.monotonic() - self.t0
        rate = done / dt if dt > 0 else 0.0
        left = (total - done) / rate if rate > 0 else 0.0
        k = 30 * done // max(total, 1)
        sys.stderr.write(f"\rsegrt: [{'#' * k}{'.' * (30 - k)}] {done}/{total} windows, {rate:.1f}/s, "
                         f"{left:.0f} s left ")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _progress_fn(progress: Progress) -> Optional[Callable[[int, int], Any]]:
    if callable(progress):
        return progress
    if progress is True:
        isatty = getattr(sys.stderr, "isatty", None)
        return _Bar() if isatty is not None and isatty() else None
    if progress in (False, None):
        return None
    raise TypeError(f"progress: want True, False or a callable(done, total), not {progress!r}")


def _shape_of(image: Any) -> Tuple[int, ...]:
    shape = getattr(image, "shape", None)
    if shape is None:
        raise TypeError("image: want a numpy array or a tensor with __dlpack__ and .shape (torch, cupy, jax)")
    return tuple(int(d) for d in shape)


def _mirror_axes(tta: Any, n: int) -> int:
    if tta is None or tta is False:
        return 0
    if tta is True or tta == "mirror":
        return (1 << n) - 1
    if isinstance(tta, str) and tta.startswith("mirror="):
        tta = [int(a) for a in tta[7:].split(",") if a]
    try:
        axes = [int(a) for a in tta]
    except (TypeError, ValueError):
        raise ValueError(f"tta: want None, 'mirror' (every spatial axis) or the spatial axes to mirror, "
                         f"not {tta!r}") from None
    bits = 0
    for a in axes:
        if not 0 <= a < n:
            raise ValueError(f"tta: spatial axis {a} of {n}")
        bits |= 1 << a
    return bits


def sliding_window(engine_or_engines: Union[Engine, Iterable[Engine]], image: Any, roi: Union[int, Sequence[int]],
                   overlap: Union[float, Sequence[float]] = 0.25, sw_batch: Union[int, str] = "auto",
                   blend: str = "gaussian", output: str = "labels", tta: Any = None,
                   max_memory: Union[int, str, None] = None, progress: Progress = True, *,
                   sigma_scale: float = 0.125, padding: str = "constant", pad_value: float = 0.0,
                   grid: str = "monai", activation: Optional[str] = None, threshold: float = 0.5,
                   max_host_memory: Union[int, str, None] = None, accumulator: str = "fp32",
                   return_stats: bool = False) -> Any:
    """Runs `image` (float32 N x C x spatial, 2-D or 3-D) through the
    engine (or an ensemble, averaged per window) window by window, as
    MONAI's sliding_window_inference does, and returns the blended result:

    - ``output="labels"``: uint8 N x 1 x spatial, the argmax over classes
      (uint16 past 256 classes; with ``activation="sigmoid"`` a uint8 mask
      per class, above `threshold`);
    - ``"probs"``: float32 N x K x spatial, softmax (or sigmoid) of the
      blend; ``"logits"``: the blend itself.

    `roi` is the window (an int for every axis, or one per spatial axis;
    <= 0 takes the whole axis); `overlap` per axis in [0, 1); `blend`
    ``"gaussian"`` (sigma = `sigma_scale` x window) or ``"constant"``;
    `padding` (``"constant"`` with `pad_value`, ``"reflect"``,
    ``"replicate"``) for axes smaller than the window; `grid` ``"monai"``
    or ``"nnunet"``; `tta` ``"mirror"`` (nnU-Net's mirroring over every
    spatial axis) or the spatial axes to mirror.

    `sw_batch`: windows per run of the network, or ``"auto"``: on CUDA the
    largest batch that fits the device's free memory or `max_memory`
    (bytes, or ``"2G"``, or ``"auto"``: what the device has free less room
    for its other users, 5 % of it and at least 256 MiB), halved and
    retried while a run runs out of memory; 1 on the CPU. `accumulator`: the element type of the CUDA
    path's blended sums, ``"fp32"``, ``"fp16"`` or ``"bf16"``: half the
    accumulators' memory (many classes under `max_memory`) at 11 (8) bits
    a sum, so labels may change where two classes nearly tie; the CPU
    always sums in float32. The engine is rebuilt for the window's input
    shape where it was not built for it (kept with the engine until it
    closes; plan files must have been built for it).

    Input and result: a numpy image (C-contiguous, or copied) gives a
    numpy result. A CUDA tensor (torch, cupy: ``__dlpack__``) with CUDA
    engines is read where it lies and gives a :class:`DeviceArray`; the
    device is synchronized before the windows read it (the job runs on
    streams of its own), so the producer's pending work is done first.
    With CPU engines a CUDA image is refused.

    `progress`: True draws a progress line on stderr when stderr is a
    terminal; a callable ``fn(done, total)`` is called from this thread
    after each batch of windows; False: nothing. An exception the callable
    raises is raised when the windows finish (they are not stopped).

    `return_stats`: also return a dict of what the run did (windows, runs,
    passes, on_device, batch, memory)."""
    engines = engines_of(engine_or_engines)
    shape = _shape_of(image)
    if len(shape) not in (3, 4, 5):
        raise ValueError(f"image: want N x C x spatial (1 to 3 spatial dims), not shape {shape}")
    n = len(shape) - 2
    rois = (roi,) * n if isinstance(roi, (int, np.integer)) else tuple(roi)
    if len(rois) != n or not all(isinstance(r, (int, np.integer)) for r in rois):
        raise ValueError(f"roi: want {n} ints for an image of {n} spatial dims, not {roi!r}")
    overlaps = (overlap,) * n if isinstance(overlap, (int, float)) else tuple(overlap)
    if len(overlaps) != n:
        raise ValueError(f"overlap: want one value or {n}, not {overlap!r}")
    for name, value, table in (("blend", blend, _BLENDS), ("padding", padding, _PADS), ("grid", grid, _GRIDS),
                               ("output", output, _OUTPUTS), ("activation", activation, _ACTIVATIONS),
                               ("accumulator", accumulator, _ACCUMULATORS)):
        if value not in table:
            raise ValueError(f"{name}: want one of {', '.join(str(k) for k in table)}, not {value!r}")
    auto = sw_batch == "auto"
    if not auto and (isinstance(sw_batch, bool) or not isinstance(sw_batch, (int, np.integer)) or sw_batch < 1):
        raise ValueError(f"sw_batch: want a number of windows >= 1 or 'auto', not {sw_batch!r}")
    mirror = _mirror_axes(tta, n)
    mem, host_mem = _bytes(max_memory, "max_memory"), _bytes(max_host_memory, "max_host_memory")
    fn = _progress_fn(progress)
    if type(image) is np.ndarray and not image.flags.c_contiguous:
        image = np.ascontiguousarray(image)

    def cfg(b: int) -> tuple:
        return (tuple(int(r) for r in rois), tuple(float(o) for o in overlaps), b, _BLENDS[blend],
                float(sigma_scale), _PADS[padding], float(pad_value), _GRIDS[grid], _OUTPUTS[output],
                _ACTIVATIONS[activation], float(threshold), mirror, mem, host_mem, _ACCUMULATORS[accumulator])

    batch = 1 if auto else int(sw_batch)
    if auto and any(e.device != "cpu" for e in engines):
        dims = _segrt.window_input_dims(cfg(1), shape)
        one = tuple(e._for_input(dims)._c for e in engines)
        batch = _segrt.window_auto_batch(one, cfg(1), shape)
    while True:
        dims = _segrt.window_input_dims(cfg(batch), shape)
        members = tuple(e._for_input(dims)._c for e in engines)
        try:
            result, stats = _segrt.window_run(members, image, cfg(batch), fn)
        except OutOfMemoryError:
            if not auto or batch == 1:
                raise
            batch //= 2
            continue
        break
    if isinstance(result, _segrt.HostBuffer):
        result = np.asarray(result)
    return (result, stats) if return_stats else result
