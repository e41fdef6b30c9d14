"""segrt.Engine: a model compiled for a device, run from any number of
threads on numpy arrays and DLPack tensors."""
from __future__ import annotations

import os
import threading
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from . import _segrt

PathLike = Union[str, "os.PathLike[str]"]
#: A shape: ``(1, 3, 512, 512)``; a range of shapes: ``((1, 3, 256, 256), (4, 3, 512, 512), (8, 3, 1024, 1024))``
#: (min, opt, max per dim, as TensorRT's optimization profiles).
ShapeSpec = Union[Sequence[int], Tuple[Sequence[int], Sequence[int], Sequence[int]]]

# segrt_dtype numbers (ONNX's TensorProto) <-> numpy. numpy has no
# bfloat16: such tensors come out as uint16 bit patterns.
_NP_OF_CODE = {1: np.dtype(np.float32), 2: np.dtype(np.uint8), 3: np.dtype(np.int8), 4: np.dtype(np.uint16),
               5: np.dtype(np.int16), 6: np.dtype(np.int32), 7: np.dtype(np.int64), 9: np.dtype(np.bool_),
               10: np.dtype(np.float16), 11: np.dtype(np.float64), 16: np.dtype(np.uint16)}
_CODE_OF_NP = {v: k for k, v in _NP_OF_CODE.items() if k != 16}
_PRECISIONS = {"fp32": 0, "tf32": 1, "fp16": 2, "bf16": 3}
_PLAN_MAGIC = b"SEGRTPLN"  # the first bytes of a plan file (segrt build)


def _alloc_host(shape: Tuple[int, ...], code: int) -> np.ndarray:
    return np.empty(shape, _NP_OF_CODE[code])


class TensorInfo(NamedTuple):
    """An input or output of an engine. `shape` holds an int per known dim
    and, for a dynamic dim, its symbolic name (``"batch"``) where the model
    gives one, else -1. `dtype` is the dtype's name (``"float32"``)."""

    name: str
    dtype: str
    shape: Tuple[Union[int, str], ...]


def parse_device(device: Union[str, int]) -> Tuple[int, int]:
    """``"cpu"``, ``"cuda"``, ``"cuda:N"`` or an int N (a CUDA device) as
    (segrt_device_kind, index)."""
    if isinstance(device, bool) or not isinstance(device, (str, int)):
        raise TypeError(f"device: want 'cpu', 'cuda' or 'cuda:N', not {device!r}")
    if isinstance(device, int):
        if device < 0:
            raise ValueError(f"device: a CUDA device index is >= 0, not {device}")
        return 1, device
    d = device.strip().lower()
    if d == "cpu":
        return 0, 0
    if d in ("cuda", "gpu"):
        return 1, 0
    if d.startswith("cuda:") and d[5:].isdigit():
        return 1, int(d[5:])
    raise ValueError(f"device: want 'cpu', 'cuda' or 'cuda:N', not {device!r}")


def _shape_specs(shapes: Optional[Mapping[str, ShapeSpec]]) -> List[Tuple[str, tuple, tuple, tuple]]:
    if shapes is None:
        return []
    if not isinstance(shapes, Mapping):
        raise TypeError("shapes: want a dict {input name: dims} or {input name: (min, opt, max)}")
    out = []
    for name, spec in shapes.items():
        if not isinstance(name, str):
            raise TypeError(f"shapes: input names are str, not {name!r}")
        try:
            seq = list(spec)
        except TypeError:
            raise TypeError(f"shapes[{name!r}]: want dims or (min, opt, max), not {spec!r}") from None
        if len(seq) == 3 and all(isinstance(s, (list, tuple)) for s in seq):
            mn, op, mx = (tuple(int(v) for v in s) for s in seq)
        elif all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in seq):
            mn = op = mx = tuple(int(v) for v in seq)
        else:
            raise TypeError(f"shapes[{name!r}]: want dims (ints) or (min, opt, max), not {spec!r}")
        out.append((name, mn, op, mx))
    return out


def _is_plan(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(_PLAN_MAGIC)) == _PLAN_MAGIC
    except OSError:
        return False  # segrt says what is wrong with the file


def _prepare(x: Any) -> Any:
    """An input as the extension takes it: numpy arrays C-contiguous (a
    copy where they are not), other buffers and DLPack tensors as they
    are (a strided host DLPack tensor is copied by the extension; a
    strided CUDA tensor is refused)."""
    if type(x) is np.ndarray:
        return x if x.flags.c_contiguous else np.ascontiguousarray(x)
    if isinstance(x, np.ndarray) or isinstance(x, (list, tuple, int, float, np.generic)):
        return np.ascontiguousarray(x)
    return x


class Engine:
    """A model compiled for a device: immutable, shared by every thread.

    ``segrt.Engine(model, device="cpu", precision="fp32", shapes=None,
    cache_dir=None, threads=None)``

    - `model`: an ONNX file, or a plan file written by :meth:`build`,
      :meth:`save` or ``segrt build`` (told by its first bytes; a plan
      keeps the shapes and precision it was built with).
    - `device`: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``; None (the default):
      the CPU for a model, the device a plan was built for (on GPU 0).
    - `precision`: ``"fp32"``, ``"tf32"``, ``"fp16"`` or ``"bf16"`` (CUDA;
      inputs and outputs stay float32; the CPU computes in fp32).
    - `shapes`: ``{input name: dims}`` binds inputs to a shape, ``{input
      name: (min, opt, max)}`` to a range of shapes (compiled for opt,
      memory sized for max). Unbound dynamic dims stay dynamic: the CPU
      specializes per shape, CUDA compiles a plan per new shape.
    - `cache_dir`: the plan cache's folder. None: the default cache
      (``$XDG_CACHE_HOME/segrt``) for CUDA engines and none for the CPU;
      False: no cache.
    - `threads`: CPU worker threads (None or 0: every core).

    Calling: ``y = engine(x)`` runs the inputs in the model's order and
    returns the output (a tuple when the model has several);
    ``engine.run({"image": x})`` takes and returns dicts by name. Inputs
    are numpy arrays (C-contiguous ones are read in place; others are
    copied first) or any tensor with ``__dlpack__`` (torch, cupy, jax),
    host or CUDA. Host inputs give numpy outputs; when an input is in CUDA
    memory the outputs stay on the device as :class:`DeviceArray`
    (``torch.from_dlpack(y)`` takes it without a copy). ``out=`` writes
    into the caller's arrays or tensors instead (host or device, dense,
    the output's dtype and dims).

    CUDA streams: a run queues its work on its context's own stream; a
    CUDA input is taken with ``__dlpack__(stream=<that stream>)``, so the
    producer's pending work on it (PyTorch's current stream, say) is
    ordered before the run reads it; the outputs are complete when the
    call returns, on every stream.

    Threads: any number of threads may call one engine at once. Each call
    takes a context of its own (contexts are made as concurrent callers
    need them and kept for later calls; :meth:`pool` bounds them), and the
    GIL is released while segrt runs. Close the engine with :meth:`close`
    or a ``with`` block; a closed engine refuses calls.

    Errors of the C library are raised as :class:`segrt.Error` subclasses
    carrying its message; wrong argument types raise TypeError or
    ValueError naming the argument."""

    def __init__(self, model: PathLike, device: Union[str, int, None] = None, precision: str = "fp32",
                 shapes: Optional[Mapping[str, ShapeSpec]] = None, cache_dir: Union[PathLike, None, bool] = None,
                 threads: Optional[int] = None) -> None:
        self._c = None
        self.path = os.fsdecode(os.fspath(model)) if isinstance(model, (str, bytes, os.PathLike)) else repr(model)
        self._derived: Dict[Tuple[int, ...], "Engine"] = {}
        self._derived_lock = threading.Lock()
        path = os.fspath(model)
        if not isinstance(path, str):
            path = os.fsdecode(path)
        kind, index = parse_device("cpu" if device is None else device)
        if not isinstance(precision, str) or precision not in _PRECISIONS:
            raise ValueError(f"precision: want one of {', '.join(_PRECISIONS)}, not {precision!r}")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 0):
            raise ValueError(f"threads: want a number of threads >= 0 (0: every core), not {threads!r}")
        if kind == 0 and precision != "fp32":
            raise ValueError(f"precision {precision!r} applies to CUDA devices; the CPU computes in fp32 "
                             "(use device='cuda')")
        specs = _shape_specs(shapes)
        self.cache_hit = False
        if _is_plan(path):
            if specs or precision != "fp32" or threads is not None or cache_dir not in (None, False):
                raise ValueError(f"{path}: a plan file keeps the shapes, precision and options it was built with; "
                                 "shapes, precision, threads and cache_dir apply to ONNX models")
            self._c = _segrt.load(path, index)
            self._source: Optional[Tuple[Any, ...]] = None
            built = self._c._info()["device"]
            if device is not None and (built == "cpu") != (kind == 0):
                self._c.close()
                raise ValueError(f"{path}: the plan was built for the {'CPU' if built == 'cpu' else 'GPU'}, "
                                 f"not the {'CPU' if kind == 0 else 'GPU'}")
        else:
            use_cache = cache_dir is not False and (kind == 1 or cache_dir is not None)
            cdir = None if cache_dir in (None, False, True) else os.fspath(cache_dir)  # type: ignore[arg-type]
            self._c, self.cache_hit = _segrt.build(path, kind, index, _PRECISIONS[precision], specs, cdir, use_cache,
                                                   threads or 0)
            self._source = (path, device, precision, cache_dir, threads)
        self.path = path
        # The dims each input was bound to (a fixed shape), for sliding
        # windows: the engine's descriptors keep the model's declared dims.
        bound = {name: mn for name, mn, op, mx in specs if mn == op == mx}
        ins, outs = self._c._io()
        self.inputs: List[TensorInfo] = [self._info_of(t) for t in ins]
        self.outputs: List[TensorInfo] = [self._info_of(t) for t in outs]
        self._in_names = [t.name for t in self.inputs]
        self._out_names = [t.name for t in self.outputs]
        self._in_index = {n: i for i, n in enumerate(self._in_names)}
        self._fixed = tuple(bound.get(t[0]) or (tuple(t[2]) if t[2] is not None and all(d >= 0 for d in t[2])
                                                else None) for t in ins)
        info = self._c._info()
        self.device: str = "cpu" if info["device"] == "cpu" else f"cuda:{info['device_index']}"
        self.precision: str = info["precision"]

    @staticmethod
    def _info_of(t: Tuple[str, str, Optional[Tuple[int, ...]], Tuple[Optional[str], ...]]) -> TensorInfo:
        name, dtype, dims, names = t
        if dims is None:
            return TensorInfo(name, dtype, ())
        return TensorInfo(name, dtype, tuple(n if d < 0 and n else d for d, n in zip(dims, names)))

    # --- building and saving ------------------------------------------------

    @classmethod
    def build(cls, model: PathLike, plan: PathLike, device: Union[str, int] = "cpu", precision: str = "fp32",
              shapes: Optional[Mapping[str, ShapeSpec]] = None, threads: Optional[int] = None) -> "Engine":
        """Builds an engine for the model (as the constructor, without the
        plan cache) and writes its plan file to `plan`, whole or not at
        all; returns the engine. ``segrt.Engine(plan)`` loads the file
        (on a machine with the same GPU, CUDA, cuDNN and segrt)."""
        e = cls(model, device=device, precision=precision, shapes=shapes, cache_dir=False, threads=threads)
        try:
            e.save(plan)
        except BaseException:
            e.close()
            raise
        return e

    def save(self, path: PathLike) -> None:
        """Writes the engine's plan file (through a temporary file renamed
        when complete)."""
        self._c.save(os.fspath(path))

    @property
    def info(self) -> Dict[str, Any]:
        """What the engine was built as: device, device_index, precision,
        weight_bytes, arena_bytes, workspace_bytes, steps, fallback_steps,
        plans (segrt_engine_info)."""
        return self._c._info()

    @property
    def build_report(self) -> Dict[str, Any]:
        """Where the build (or plan load) went, in wall seconds that vary
        from build to build: total_seconds, graph_seconds (the graph
        passes), backend_seconds (the plans, CUDA's later shapes
        included), slowest (up to 8 (node, op, seconds), slowest first),
        and for CUDA cudnn_searches, cudnn_reused, cudnn_finalized and
        cudnn_seconds (segrt_engine_build_report)."""
        return self._c._build_report()

    # --- running -------------------------------------------------------------

    def __call__(self, *inputs: Any, out: Any = None) -> Any:
        """``engine(x)`` or ``engine(x1, x2, ...)`` (the model's input
        order): the output, or a tuple of them when the model has several.
        `out`: an array or tensor to write the output into (a sequence of
        them for several outputs; None entries are allocated)."""
        if out is not None and len(self._out_names) == 1 and not isinstance(out, (list, tuple)):
            out = (out,)
        elif out is not None:
            out = tuple(out)
        res = self._c._run(tuple(map(_prepare, inputs)), out, _alloc_host)
        return res[0] if len(res) == 1 else res

    def run(self, inputs: Union[Mapping[str, Any], Sequence[Any]], out: Optional[Mapping[str, Any]] = None
            ) -> Dict[str, Any]:
        """Runs a dict ``{input name: array}`` (or a sequence in the
        model's order) and returns a dict ``{output name: array}``, always
        (a dict also for one output). `out`: ``{output name: array}`` to
        write into; the others are allocated."""
        if isinstance(inputs, Mapping):
            unknown = [k for k in inputs if k not in self._in_index]
            if unknown:
                raise ValueError(f"inputs: the model has no input {unknown[0]!r} (its inputs: "
                                 f"{', '.join(self._in_names)})")
            missing = [n for n in self._in_names if n not in inputs]
            if missing:
                raise ValueError(f"inputs: input {missing[0]!r} is missing")
            seq = tuple(_prepare(inputs[n]) for n in self._in_names)
        elif isinstance(inputs, (list, tuple)):
            seq = tuple(map(_prepare, inputs))
        else:
            raise TypeError("inputs: want a dict {input name: array} or a sequence in the model's input order")
        outs = None
        if out is not None:
            if not isinstance(out, Mapping):
                raise TypeError("out: want a dict {output name: array}")
            for k in out:
                if k not in self._out_names:
                    raise ValueError(f"out: the model has no output {k!r} (its outputs: "
                                     f"{', '.join(self._out_names)})")
            outs = tuple(out.get(n) for n in self._out_names)
        res = self._c._run(seq, outs, _alloc_host)
        return dict(zip(self._out_names, res))

    def output_shapes(self, *shapes: Sequence[int], dtypes: Optional[Sequence[Any]] = None
                      ) -> List[Tuple[int, ...]]:
        """The dims of the outputs for inputs of these dims (float32, or
        `dtypes`), as segrt_engine_output_shapes gives them."""
        if dtypes is None:
            dtypes = [t.dtype for t in self.inputs]
        codes = [_CODE_OF_NP[np.dtype(d)] for d in dtypes]
        r = self._c._output_shapes(tuple((c, tuple(s)) for c, s in zip(codes, shapes)))
        return [tuple(d) for _, d in r]

    # --- threads and lifetime -------------------------------------------------

    def pool(self, n: int) -> "Engine":
        """Makes n contexts now and never more than n: a call beyond n
        concurrent ones waits for a context to be free (bounding the
        memory of many threads). Without it, contexts are made as
        concurrent callers need them. Returns the engine."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"pool: want a number of contexts >= 1, not {n!r}")
        self._c._pool(n)
        return self

    def close(self) -> None:
        """Waits for runs in progress, then frees the contexts and the
        engine (and the engines sliding_window built from it). Idempotent;
        the engine refuses calls afterwards."""
        with self._derived_lock:
            derived, self._derived = list(self._derived.values()), {}
        for d in derived:
            d.close()
        if self._c is not None:
            self._c.close()

    @property
    def closed(self) -> bool:
        return self._c is None or self._c.closed

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._c is None:
            return f"segrt.Engine({self.path!r}, not built)"
        state = "closed" if self.closed else f"{self.device}, {self.precision}"
        return f"segrt.Engine({self.path!r}, {state})"

    # --- sliding windows ------------------------------------------------------

    def _for_input(self, dims: Tuple[int, ...]) -> "Engine":
        """An engine of this model for one input of these dims: this one
        where it was built for them, or (CPU, plan profiles) takes them;
        else one built for them, kept until close. CUDA engines are built
        for the exact dims, which their memory estimates need."""
        if len(self.inputs) != 1:
            raise ValueError(f"{self.path}: sliding windows feed models of one input; this one has "
                             f"{len(self.inputs)}")
        if self._fixed[0] == dims:
            return self
        cuda = self.device != "cpu"
        if not (cuda and self._source is not None):
            try:
                self._c._output_shapes(((1, dims),))
                return self
            except _segrt_errors():
                if self._source is None:
                    raise
        with self._derived_lock:
            e = self._derived.get(dims)
        if e is None:
            path, device, precision, cache_dir, threads = self._source  # type: ignore[misc]
            e = Engine(path, device=device, precision=precision, shapes={self._in_names[0]: dims},
                       cache_dir=cache_dir, threads=threads)
            with self._derived_lock:
                old = self._derived.setdefault(dims, e)
            if old is not e:
                e.close()
                e = old
        return e


def _segrt_errors() -> Tuple[type, ...]:
    from ._errors import Error
    return (Error,)


def engines_of(engine_or_engines: Union[Engine, Iterable[Engine]]) -> List[Engine]:
    if isinstance(engine_or_engines, Engine):
        return [engine_or_engines]
    try:
        engines = list(engine_or_engines)
    except TypeError:
        raise TypeError("engine_or_engines: want a segrt.Engine or a list of them") from None
    if not engines or not all(isinstance(e, Engine) for e in engines):
        raise TypeError("engine_or_engines: want a segrt.Engine or a non-empty list of them")
    return engines
