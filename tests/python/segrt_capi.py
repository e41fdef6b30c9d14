"""A small ctypes binding over libsegrt.so, for tests that must run many
engines in one process (the GPU tests: CUDA initialisation costs about a
second per process, so they cannot spawn the CLI per case).

Where the library is: $SEGRT_LIB, else next to the segrt binary ($SEGRT, or
build/segrt as conftest.py finds it): libsegrt.so.0, libsegrt.so, or the
same in a lib/ folder beside it (scripts/gpu-carry.sh's layout).

Every call that returns a status other than SEGRT_OK raises SegrtError,
which carries the status and segrt_last_error(). Functions are bound on
first use, so a library built before a function existed still loads and
only that call fails (with SegrtError naming the missing symbol).

    import segrt_capi as sc
    with sc.Model.load("net.onnx") as m, \\
         sc.BuildOptions(shapes={"image": x.shape}, device="cuda", precision="fp16") as o, \\
         sc.Engine.build(m, o) as e, e.context() as ctx:
        (y,) = ctx.run([x])

The structs below mirror include/segrt.h exactly (C enums are int; dims are
SEGRT_MAX_RANK int64s); test_struct_layout-style checks can compare
ctypes.sizeof with the C compiler's sizeof.
"""
from __future__ import annotations

import ctypes
import os
import pathlib
import subprocess

import numpy as np

MAX_RANK = 8

# segrt_status
OK = 0
STATUS_NAMES = ["SEGRT_OK", "SEGRT_ERROR_INVALID_ARGUMENT", "SEGRT_ERROR_IO", "SEGRT_ERROR_INVALID_MODEL",
                "SEGRT_ERROR_UNSUPPORTED", "SEGRT_ERROR_SHAPE", "SEGRT_ERROR_OUT_OF_MEMORY",
                "SEGRT_ERROR_DEVICE", "SEGRT_ERROR_INTERNAL", "SEGRT_ERROR_CASES_FAILED"]
ERROR_INVALID_ARGUMENT, ERROR_IO, ERROR_INVALID_MODEL, ERROR_UNSUPPORTED = 1, 2, 3, 4
ERROR_SHAPE, ERROR_OUT_OF_MEMORY, ERROR_DEVICE, ERROR_INTERNAL = 5, 6, 7, 8
# Not a segrt status: the library lacks the function (SegrtError.status).
MISSING_SYMBOL = -1

# segrt_device_kind, segrt_memory_kind, segrt_precision
DEVICE_CPU, DEVICE_CUDA = 0, 1
MEMORY_HOST, MEMORY_DEVICE = 0, 1
PRECISIONS = {"fp32": 0, "tf32": 1, "fp16": 2, "bf16": 3}
PRECISION_NAMES = {v: k for k, v in PRECISIONS.items()}

# segrt_dtype (ONNX TensorProto numbers) <-> numpy. bfloat16 has no numpy
# type: such tensors are handed over as uint16 bit patterns.
DTYPE_BFLOAT16 = 16
_NP_TO_SEGRT = {
    np.dtype(np.float32): 1, np.dtype(np.uint8): 2, np.dtype(np.int8): 3, np.dtype(np.uint16): 4,
    np.dtype(np.int16): 5, np.dtype(np.int32): 6, np.dtype(np.int64): 7, np.dtype(np.bool_): 9,
    np.dtype(np.float16): 10, np.dtype(np.float64): 11,
}
_SEGRT_TO_NP = {v: k for k, v in _NP_TO_SEGRT.items()}
_SEGRT_TO_NP[DTYPE_BFLOAT16] = np.dtype(np.uint16)


def dtype_code(dtype):
    """segrt_dtype of a numpy dtype."""
    dt = np.dtype(dtype)
    if dt not in _NP_TO_SEGRT:
        raise TypeError(f"segrt has no dtype for numpy {dt}")
    return _NP_TO_SEGRT[dt]


def numpy_dtype(code):
    """numpy dtype of a segrt_dtype (uint16 for bfloat16)."""
    if code not in _SEGRT_TO_NP:
        raise TypeError(f"no numpy dtype for segrt dtype {code}")
    return _SEGRT_TO_NP[code]


# ---------------------------------------------------------------------------
# structs: as in include/segrt.h


class TensorDesc(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int32),
                ("dims", ctypes.c_int64 * MAX_RANK), ("dim_names", ctypes.c_char_p * MAX_RANK)]

    def to_dict(self):
        rank = self.rank
        return {"name": self.name.decode() if self.name else None, "dtype": self.dtype, "rank": rank,
                "dims": list(self.dims[:rank]) if rank >= 0 else None,
                "dim_names": [n.decode() if n else None for n in self.dim_names[:max(rank, 0)]]}


class Tensor(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("rank", ctypes.c_int32), ("dims", ctypes.c_int64 * MAX_RANK),
                ("data", ctypes.c_void_p), ("memory", ctypes.c_int), ("device", ctypes.c_int32)]

    @property
    def shape(self):
        return tuple(int(d) for d in self.dims[:self.rank])


class EngineInfo(ctypes.Structure):
    _fields_ = [("device", ctypes.c_int), ("device_index", ctypes.c_int32), ("precision", ctypes.c_int),
                ("weight_bytes", ctypes.c_uint64), ("arena_bytes", ctypes.c_uint64),
                ("workspace_bytes", ctypes.c_uint64), ("steps", ctypes.c_int32),
                ("fallback_steps", ctypes.c_int32), ("plans", ctypes.c_int32)]


class DeviceInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 256), ("index", ctypes.c_int32), ("compute_major", ctypes.c_int32),
                ("compute_minor", ctypes.c_int32), ("multiprocessors", ctypes.c_int32),
                ("total_memory_bytes", ctypes.c_uint64), ("free_memory_bytes", ctypes.c_uint64)]


class CudaVersions(ctypes.Structure):
    _fields_ = [("built_with_cuda", ctypes.c_int32), ("driver_version", ctypes.c_int32),
                ("runtime_version", ctypes.c_int32), ("cudnn_version", ctypes.c_int32)]


def _struct_dict(s):
    out = {}
    for name, _ in s._fields_:
        v = getattr(s, name)
        out[name] = v.decode(errors="replace") if isinstance(v, bytes) else v
    return out


# ---------------------------------------------------------------------------
# the library

_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)
_S = ctypes.c_int  # segrt_status
_STR = ctypes.c_char_p
_I32 = ctypes.c_int32
_SZ = ctypes.c_size_t
_I64P = ctypes.POINTER(ctypes.c_int64)
_TP = ctypes.POINTER(Tensor)

# name: (restype, argtypes)
_SIGNATURES = {
    "segrt_version": (_STR, []),
    "segrt_last_error": (_STR, []),
    "segrt_status_name": (_STR, [ctypes.c_int]),
    "segrt_dtype_name": (_STR, [ctypes.c_int]),
    "segrt_model_load": (_S, [_STR, _PP]),
    "segrt_model_load_from_memory": (_S, [ctypes.c_char_p, _SZ, _STR, _STR, _PP]),
    "segrt_model_destroy": (None, [_P]),
    "segrt_model_input_count": (_SZ, [_P]),
    "segrt_model_output_count": (_SZ, [_P]),
    "segrt_model_input": (_S, [_P, _SZ, ctypes.POINTER(TensorDesc)]),
    "segrt_model_output": (_S, [_P, _SZ, ctypes.POINTER(TensorDesc)]),
    "segrt_build_options_create": (_S, [_PP]),
    "segrt_build_options_destroy": (None, [_P]),
    "segrt_build_options_set_shape": (_S, [_P, _STR, _I32, _I64P]),
    "segrt_build_options_set_shape_range": (_S, [_P, _STR, _I32, _I64P, _I64P, _I64P]),
    "segrt_build_options_set_threads": (_S, [_P, _I32]),
    "segrt_build_options_set_device": (_S, [_P, ctypes.c_int, _I32]),
    "segrt_build_options_set_precision": (_S, [_P, ctypes.c_int]),
    "segrt_precision_name": (_STR, [ctypes.c_int]),
    "segrt_build_options_set_fp32_ops": (_S, [_P, _STR]),
    "segrt_build_options_set_allow_cpu_fallback": (_S, [_P, ctypes.c_int]),
    "segrt_build_options_set_workspace": (_S, [_P, _SZ]),
    "segrt_build_options_set_autotune": (_S, [_P, _I32]),
    "segrt_build_options_set_disabled_kernels": (_S, [_P, _STR]),
    "segrt_build_options_set_target_arch": (_S, [_P, _STR]),
    "segrt_engine_build": (_S, [_P, _P, _PP]),
    "segrt_engine_destroy": (None, [_P]),
    "segrt_engine_input_count": (_SZ, [_P]),
    "segrt_engine_output_count": (_SZ, [_P]),
    "segrt_engine_input": (_S, [_P, _SZ, ctypes.POINTER(TensorDesc)]),
    "segrt_engine_output": (_S, [_P, _SZ, ctypes.POINTER(TensorDesc)]),
    "segrt_engine_output_shapes": (_S, [_P, _SZ, _TP, _SZ, _TP]),
    "segrt_engine_get_info": (_S, [_P, ctypes.POINTER(EngineInfo)]),
    "segrt_engine_save": (_S, [_P, _STR]),
    "segrt_engine_load": (_S, [_STR, _I32, _PP]),
    "segrt_engine_build_cached": (_S, [_P, _P, _STR, ctypes.POINTER(ctypes.c_int), _PP]),
    "segrt_context_create": (_S, [_P, _PP]),
    "segrt_context_destroy": (None, [_P]),
    "segrt_context_run": (_S, [_P, _SZ, _TP, _SZ, _TP]),
    "segrt_context_pool_create": (_S, [_P, _SZ, _PP]),
    "segrt_context_pool_destroy": (None, [_P]),
    "segrt_context_pool_run": (_S, [_P, _SZ, _TP, _SZ, _TP]),
    "segrt_cuda_device_count": (_S, [ctypes.POINTER(ctypes.c_int32)]),
    "segrt_cuda_device_info": (_S, [_I32, ctypes.POINTER(DeviceInfo)]),
    "segrt_cuda_versions_get": (_S, [ctypes.POINTER(CudaVersions)]),
}


class SegrtError(RuntimeError):
    """A segrt call returned a status other than SEGRT_OK."""

    def __init__(self, func, status, message):
        self.func = func
        self.status = status
        if status == MISSING_SYMBOL:
            self.status_name = "missing symbol"
        else:
            self.status_name = STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else f"status {status}"
        self.message = message
        super().__init__(f"{func}: {self.status_name}: {message}")

    @property
    def unsupported(self):
        return self.status == ERROR_UNSUPPORTED


def segrt_binary():
    """The segrt binary, as conftest.py finds it."""
    return os.environ.get("SEGRT", str(pathlib.Path(__file__).resolve().parents[2] / "build" / "segrt"))


def library_candidates():
    env = os.environ.get("SEGRT_LIB")
    if env:
        return [pathlib.Path(env)]
    folder = pathlib.Path(segrt_binary()).resolve().parent
    return [folder / d / n for d in (".", "lib") for n in ("libsegrt.so.0", "libsegrt.so")]


_lib = None
_lib_path = None


def library():
    """The loaded ctypes.CDLL; raises OSError naming the places tried."""
    global _lib, _lib_path
    if _lib is None:
        tried = []
        for p in library_candidates():
            if p.exists():
                _lib = ctypes.CDLL(str(p))
                _lib_path = p
                break
            tried.append(str(p))
        else:
            raise OSError("libsegrt not found (set SEGRT_LIB); tried " + ", ".join(tried))
    return _lib


def library_path():
    library()
    return _lib_path


_bound = {}


def fn(name):
    """The C function `name` with its signature set."""
    f = _bound.get(name)
    if f is None:
        try:
            f = getattr(library(), name)
        except AttributeError:
            raise SegrtError(name, MISSING_SYMBOL,
                             f"{library_path()} has no symbol {name} (built before it existed?)") from None
        f.restype, f.argtypes = _SIGNATURES[name]
        _bound[name] = f
    return f


def last_error():
    msg = fn("segrt_last_error")()
    return msg.decode(errors="replace") if msg else ""


def call(name, *args):
    """Calls a status-returning function; raises SegrtError unless SEGRT_OK."""
    status = fn(name)(*args)
    if status != OK:
        raise SegrtError(name, status, last_error())


def version():
    return fn("segrt_version")().decode()


def status_name(status):
    return fn("segrt_status_name")(status).decode()


def cuda_device_count():
    n = ctypes.c_int32(0)
    call("segrt_cuda_device_count", ctypes.byref(n))
    return n.value


def cuda_versions():
    v = CudaVersions()
    call("segrt_cuda_versions_get", ctypes.byref(v))
    return _struct_dict(v)


def cuda_device_info(index=0):
    d = DeviceInfo()
    call("segrt_cuda_device_info", index, ctypes.byref(d))
    return _struct_dict(d)


def cuda_available():
    """(True, "") when the library has its CUDA backend and sees a device;
    else (False, why). Raises OSError when the library cannot be loaded."""
    library()
    if not cuda_versions()["built_with_cuda"]:
        return False, f"{library_path()} was built without CUDA"
    n = cuda_device_count()
    if n == 0:
        return False, "no CUDA device (segrt_cuda_device_count() == 0)"
    return True, ""


def gpu_visible_to_driver():
    """Whether nvidia-smi lists a GPU: to tell a machine without one from a
    broken setup when the library cannot be loaded."""
    try:
        p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0 and "GPU" in p.stdout


# ---------------------------------------------------------------------------
# objects


class _Handle:
    """An owned C object, released by close() (or the with block, or GC)."""
    _destroy = None

    def __init__(self, ptr):
        self._ptr = ptr

    @property
    def ptr(self):
        if not self._ptr:
            raise ValueError(f"{type(self).__name__} is closed")
        return self._ptr

    def close(self):
        if self._ptr and self._destroy:
            fn(self._destroy)(self._ptr)
        self._ptr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _descs(obj_ptr, count_fn, get_fn):
    out = []
    for i in range(fn(count_fn)(obj_ptr)):
        d = TensorDesc()
        call(get_fn, obj_ptr, i, ctypes.byref(d))
        out.append(d.to_dict())
    return out


class Model(_Handle):
    _destroy = "segrt_model_destroy"

    @classmethod
    def load(cls, path):
        p = ctypes.c_void_p()
        call("segrt_model_load", str(path).encode(), ctypes.byref(p))
        return cls(p.value)

    @classmethod
    def from_bytes(cls, data, name=None, base_dir=None):
        """From serialized ONNX bytes (or an onnx.ModelProto)."""
        if hasattr(data, "SerializeToString"):
            data = data.SerializeToString()
        p = ctypes.c_void_p()
        call("segrt_model_load_from_memory", data, len(data),
             str(base_dir).encode() if base_dir else None, name.encode() if name else None, ctypes.byref(p))
        return cls(p.value)

    def inputs(self):
        return _descs(self.ptr, "segrt_model_input_count", "segrt_model_input")

    def outputs(self):
        return _descs(self.ptr, "segrt_model_output_count", "segrt_model_output")


def _dims(seq):
    seq = [int(d) for d in seq]
    if len(seq) > MAX_RANK:
        raise ValueError(f"rank {len(seq)} is over SEGRT_MAX_RANK")
    return len(seq), (ctypes.c_int64 * MAX_RANK)(*seq)


def parse_device(device):
    """"cpu", "cuda", "cuda:N", (kind, index) -> (kind, index)."""
    if isinstance(device, tuple):
        return device
    if device == "cpu":
        return DEVICE_CPU, 0
    if device == "cuda":
        return DEVICE_CUDA, 0
    if isinstance(device, str) and device.startswith("cuda:"):
        return DEVICE_CUDA, int(device[5:])
    raise ValueError(f"unknown device {device!r}")


class BuildOptions(_Handle):
    """segrt_build_options; keyword arguments call the setters:
    shapes={name: dims}, ranges={name: (min, opt, max)}, device="cuda:0",
    precision="fp16", fp32_ops="Softmax,Conv_3", allow_cpu_fallback=True,
    threads=N, workspace=bytes, autotune=N, disabled_kernels="wgmma,up-fold",
    target_arch="sm_80" (default: $SEGRT_TEST_TARGET_ARCH, with which the GPU
    suite runs as an older GPU would plan it; see tests/gpu/conftest.py)."""
    _destroy = "segrt_build_options_destroy"

    def __init__(self, shapes=None, ranges=None, device=None, precision=None, fp32_ops=None,
                 allow_cpu_fallback=None, threads=None, workspace=None, autotune=None, disabled_kernels=None,
                 target_arch=None):
        p = ctypes.c_void_p()
        call("segrt_build_options_create", ctypes.byref(p))
        super().__init__(p.value)
        for name, dims in (shapes or {}).items():
            self.set_shape(name, dims)
        for name, (lo, opt, hi) in (ranges or {}).items():
            self.set_shape_range(name, lo, opt, hi)
        if device is not None:
            self.set_device(device)
        if precision is not None:
            self.set_precision(precision)
        if fp32_ops is not None:
            self.set_fp32_ops(fp32_ops)
        if allow_cpu_fallback is not None:
            self.set_allow_cpu_fallback(allow_cpu_fallback)
        if threads is not None:
            self.set_threads(threads)
        if workspace is not None:
            self.set_workspace(workspace)
        if autotune is not None:  # cuDNN configurations timed per convolution; 0: untimed, the same every build
            call("segrt_build_options_set_autotune", self.ptr, int(autotune))
        if disabled_kernels:  # kernels and fusions not used, for A/B comparisons ("": none)
            call("segrt_build_options_set_disabled_kernels", self.ptr, disabled_kernels.encode())
        if target_arch is None:
            target_arch = os.environ.get("SEGRT_TEST_TARGET_ARCH") or None
        if target_arch:
            call("segrt_build_options_set_target_arch", self.ptr, target_arch.encode())

    def set_shape(self, name, dims):
        rank, d = _dims(dims)
        call("segrt_build_options_set_shape", self.ptr, name.encode(), rank, d)

    def set_shape_range(self, name, lo, opt, hi):
        if not len(lo) == len(opt) == len(hi):
            raise ValueError("min, opt and max differ in rank")
        rank, a = _dims(lo)
        _, b = _dims(opt)
        _, c = _dims(hi)
        call("segrt_build_options_set_shape_range", self.ptr, name.encode(), rank, a, b, c)

    def set_device(self, device, index=None):
        kind, idx = parse_device(device)
        call("segrt_build_options_set_device", self.ptr, kind, idx if index is None else index)

    def set_precision(self, precision):
        p = PRECISIONS[precision] if isinstance(precision, str) else int(precision)
        call("segrt_build_options_set_precision", self.ptr, p)

    def set_fp32_ops(self, ops):
        if isinstance(ops, (list, tuple)):
            ops = ",".join(ops)
        call("segrt_build_options_set_fp32_ops", self.ptr, ops.encode() if ops is not None else None)

    def set_allow_cpu_fallback(self, allow=True):
        call("segrt_build_options_set_allow_cpu_fallback", self.ptr, 1 if allow else 0)

    def set_threads(self, threads):
        call("segrt_build_options_set_threads", self.ptr, int(threads))

    def set_workspace(self, nbytes):
        call("segrt_build_options_set_workspace", self.ptr, int(nbytes))


class DeviceTensor:
    """A tensor in device memory the caller owns: a raw pointer (for
    instance torch_tensor.data_ptr()), dtype and shape, dense C order."""

    def __init__(self, ptr, dtype, shape, device=0):
        self.ptr = int(ptr)
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(d) for d in shape)
        self.device = int(device)

    @classmethod
    def from_torch(cls, t):
        import torch
        if not t.is_cuda or not t.is_contiguous():
            raise ValueError("a contiguous CUDA tensor is needed")
        dt = {torch.float32: np.float32, torch.float16: np.float16, torch.float64: np.float64,
              torch.int64: np.int64, torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8,
              torch.uint8: np.uint8, torch.bool: np.bool_}[t.dtype]
        return cls(t.data_ptr(), dt, t.shape, t.device.index or 0)


def _tensor(x):
    """(segrt_tensor, keep-alive) for a numpy array (host) or DeviceTensor."""
    t = Tensor()
    if isinstance(x, DeviceTensor):
        t.dtype = dtype_code(x.dtype)
        t.rank, t.dims = _dims(x.shape)
        t.data = x.ptr
        t.memory = MEMORY_DEVICE
        t.device = x.device
        return t, x
    # Not np.ascontiguousarray: it turns 0-d arrays into 1-d ones.
    a = np.asarray(x)
    if not a.flags.c_contiguous:
        a = a.copy(order="C")
    t.dtype = dtype_code(a.dtype)
    t.rank, t.dims = _dims(a.shape)
    t.data = a.ctypes.data
    t.memory = MEMORY_HOST
    t.device = 0
    return t, a


def _tensor_array(items):
    arr = (Tensor * max(1, len(items)))()
    keep = []
    for i, x in enumerate(items):
        arr[i], k = _tensor(x)
        keep.append(k)
    return arr, keep


class Engine(_Handle):
    _destroy = "segrt_engine_destroy"

    @classmethod
    def build(cls, model, opts=None):
        p = ctypes.c_void_p()
        call("segrt_engine_build", model.ptr, opts.ptr if opts is not None else None, ctypes.byref(p))
        return cls(p.value)

    @classmethod
    def build_cached(cls, model, opts, cache_dir=None):
        """(engine, hit)."""
        p = ctypes.c_void_p()
        hit = ctypes.c_int(0)
        call("segrt_engine_build_cached", model.ptr, opts.ptr if opts is not None else None,
             str(cache_dir).encode() if cache_dir else None, ctypes.byref(hit), ctypes.byref(p))
        return cls(p.value), bool(hit.value)

    @classmethod
    def load(cls, path, device=0):
        p = ctypes.c_void_p()
        call("segrt_engine_load", str(path).encode(), int(device), ctypes.byref(p))
        return cls(p.value)

    def save(self, path):
        call("segrt_engine_save", self.ptr, str(path).encode())

    def info(self):
        i = EngineInfo()
        call("segrt_engine_get_info", self.ptr, ctypes.byref(i))
        d = _struct_dict(i)
        d["precision_name"] = PRECISION_NAMES.get(d["precision"])
        return d

    def inputs(self):
        return _descs(self.ptr, "segrt_engine_input_count", "segrt_engine_input")

    def outputs(self):
        return _descs(self.ptr, "segrt_engine_output_count", "segrt_engine_output")

    def order_inputs(self, inputs):
        """A dict name -> array in the engine's input order, or a list as is."""
        if isinstance(inputs, dict):
            names = [d["name"] for d in self.inputs()]
            missing = set(names) - set(inputs)
            if missing:
                raise KeyError(f"no data for inputs {sorted(missing)}")
            return [inputs[n] for n in names]
        return list(inputs)

    def output_shapes(self, inputs):
        """[(numpy dtype, shape)] of the outputs for these inputs (arrays,
        DeviceTensors, or anything with .dtype and .shape)."""
        items = self.order_inputs(inputs)
        arr = (Tensor * max(1, len(items)))()
        for i, x in enumerate(items):
            arr[i].dtype = dtype_code(x.dtype)
            arr[i].rank, arr[i].dims = _dims(x.shape)
        n_out = fn("segrt_engine_output_count")(self.ptr)
        outs = (Tensor * max(1, n_out))()
        call("segrt_engine_output_shapes", self.ptr, len(items), arr, n_out, outs)
        return [(numpy_dtype(outs[j].dtype), outs[j].shape) for j in range(n_out)]

    def context(self):
        return Context(self)

    def pool(self, size):
        return ContextPool(self, size)


def _run(func, ptr, engine, inputs, outputs):
    items = engine.order_inputs(inputs)
    if outputs is None:
        outputs = [np.empty(shape, dtype) for dtype, shape in engine.output_shapes(items)]
    for o in outputs:
        if isinstance(o, np.ndarray) and not (o.flags.c_contiguous and o.flags.writeable):
            raise ValueError("host outputs must be writeable C-contiguous arrays")
    ins, keep_in = _tensor_array(items)
    outs, keep_out = _tensor_array(outputs)
    call(func, ptr, len(items), ins, len(outputs), outs)
    del keep_in, keep_out
    return outputs


class Context(_Handle):
    _destroy = "segrt_context_destroy"

    def __init__(self, engine):
        p = ctypes.c_void_p()
        call("segrt_context_create", engine.ptr, ctypes.byref(p))
        super().__init__(p.value)
        self.engine = engine  # keeps it alive

    def run(self, inputs, outputs=None):
        """Runs the engine. inputs: a list in the engine's order, or a dict
        by name, of numpy arrays (host memory) and DeviceTensors. outputs:
        None (numpy arrays are allocated and returned) or a list of
        writeable C-contiguous numpy arrays and DeviceTensors, filled in
        place and returned."""
        return _run("segrt_context_run", self.ptr, self.engine, inputs, outputs)

    def bind(self, inputs, outputs):
        """A function of no arguments that runs the engine on these inputs
        and outputs (as run() takes them; outputs are required), with the
        segrt_tensor arrays made once: for timing loops, where run()'s
        per-call conversions would be counted. The arrays and buffers stay
        referenced by the function; it raises SegrtError as call() does."""
        items = self.engine.order_inputs(inputs)
        outputs = list(outputs)
        for o in outputs:
            if isinstance(o, np.ndarray) and not (o.flags.c_contiguous and o.flags.writeable):
                raise ValueError("host outputs must be writeable C-contiguous arrays")
        ins, keep_in = _tensor_array(items)
        outs, keep_out = _tensor_array(outputs)
        c_run, ptr, n_in, n_out = fn("segrt_context_run"), self.ptr, len(items), len(outputs)

        def run():
            status = c_run(ptr, n_in, ins, n_out, outs)
            if status != OK:
                raise SegrtError("segrt_context_run", status, last_error())
            return keep_out

        run.keep = (self, keep_in, keep_out)
        return run


class ContextPool(_Handle):
    _destroy = "segrt_context_pool_destroy"

    def __init__(self, engine, size):
        p = ctypes.c_void_p()
        call("segrt_context_pool_create", engine.ptr, int(size), ctypes.byref(p))
        super().__init__(p.value)
        self.engine = engine

    def run(self, inputs, outputs=None):
        return _run("segrt_context_pool_run", self.ptr, self.engine, inputs, outputs)


def run_once(model, inputs, **build_kw):
    """Builds an engine for these inputs' shapes (shapes= defaults to the
    dims of every input) and runs it once: the outputs as numpy arrays."""
    m = model if isinstance(model, Model) else (Model.load(model) if isinstance(model, (str, os.PathLike))
                                                 else Model.from_bytes(model))
    if isinstance(inputs, dict):
        build_kw.setdefault("shapes", {k: np.shape(v) for k, v in inputs.items()})
    with BuildOptions(**build_kw) as o, Engine.build(m, o) as e, e.context() as ctx:
        return ctx.run(inputs)


# ---------------------------------------------------------------------------
# device memory: segrt_device_alloc, _free, _copy and _synchronize

_SIGNATURES.update({
    "segrt_device_alloc": (_S, [_I32, _SZ, _PP]),
    "segrt_device_free": (_S, [_P]),
    "segrt_device_copy": (_S, [_P, ctypes.c_int, _P, ctypes.c_int, _SZ, _I32]),
    "segrt_device_synchronize": (_S, [_I32]),
})


def device_synchronize(device=0):
    call("segrt_device_synchronize", int(device))


class DeviceBuffer:
    """Device memory from segrt_device_alloc holding one dense array (dtype
    and shape): upload numpy arrays into it, download them back, pass
    .tensor() to a run as an input or output. Freed by close() or `with`."""

    def __init__(self, dtype, shape, device=0):
        self.ptr = None
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(d) for d in shape)
        self.device = int(device)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        p = ctypes.c_void_p()
        call("segrt_device_alloc", self.device, self.nbytes, ctypes.byref(p))
        self.ptr = p.value

    @classmethod
    def from_array(cls, a, device=0):
        a = np.asarray(a)
        b = cls(a.dtype, a.shape, device)
        b.upload(a)
        return b

    def upload(self, a):
        a = np.ascontiguousarray(a, dtype=self.dtype)
        if a.shape != self.shape:
            raise ValueError(f"array of shape {a.shape} for a buffer of shape {self.shape}")
        call("segrt_device_copy", self.ptr, MEMORY_DEVICE, a.ctypes.data, MEMORY_HOST, self.nbytes, self.device)

    def download(self):
        a = np.empty(self.shape, self.dtype)
        call("segrt_device_copy", a.ctypes.data, MEMORY_HOST, self.ptr, MEMORY_DEVICE, self.nbytes, self.device)
        return a

    def copy_from(self, other):
        """Device to device, from another buffer of the same byte size."""
        if other.nbytes != self.nbytes:
            raise ValueError(f"{other.nbytes} bytes into a buffer of {self.nbytes}")
        call("segrt_device_copy", self.ptr, MEMORY_DEVICE, other.ptr, MEMORY_DEVICE, self.nbytes, self.device)

    def tensor(self):
        return DeviceTensor(self.ptr, self.dtype, self.shape, self.device)

    def close(self):
        if self.ptr:
            call("segrt_device_free", self.ptr)
            self.ptr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# ---------------------------------------------------------------------------
# sliding windows: segrt_window_options, segrt_window_input_dims,
# segrt_window_run and segrt_window_result_free (segrt.h "Sliding windows")

_SIGNATURES.update({
    "segrt_window_options_create": (_S, [_I32, _I64P, _PP]),
    "segrt_window_options_destroy": (None, [_P]),
    "segrt_window_options_set_overlap": (_S, [_P, ctypes.POINTER(ctypes.c_double)]),
    "segrt_window_options_set_batch": (_S, [_P, _I32]),
    "segrt_window_options_set_blend": (_S, [_P, ctypes.c_int, ctypes.c_double]),
    "segrt_window_options_set_padding": (_S, [_P, ctypes.c_int, ctypes.c_float]),
    "segrt_window_options_set_grid": (_S, [_P, ctypes.c_int]),
    "segrt_window_options_set_output": (_S, [_P, ctypes.c_int, ctypes.c_int, ctypes.c_float]),
    "segrt_window_options_set_mirroring": (_S, [_P, ctypes.c_uint32]),
    "segrt_window_options_set_max_memory": (_S, [_P, ctypes.c_uint64]),
    "segrt_window_options_set_accumulator": (_S, [_P, ctypes.c_int]),
    "segrt_window_options_set_result_memory": (_S, [_P, ctypes.c_int]),
    "segrt_window_input_dims": (_S, [_P, _TP, _I64P]),
    "segrt_window_run": (_S, [_PP, _SZ, _P, _TP, _TP]),
    "segrt_window_result_free": (None, [_TP]),
})


class WindowStats(ctypes.Structure):
    """segrt_window_stats: what a windowed run did."""
    _fields_ = [("windows", ctypes.c_int64), ("runs", ctypes.c_int64), ("passes", ctypes.c_int32),
                ("on_device", ctypes.c_int32), ("slab_rows", ctypes.c_int64), ("pipeline_bytes", ctypes.c_uint64),
                ("context_bytes", ctypes.c_uint64)]


class WindowTimes(ctypes.Structure):
    """segrt_window_times: where the calling thread's time went (seconds)."""
    _fields_ = [("setup", ctypes.c_double), ("run", ctypes.c_double), ("uploading", ctypes.c_double),
                ("waiting", ctypes.c_double), ("downloading", ctypes.c_double)]


_SIGNATURES["segrt_window_run_with_stats"] = (_S, [_PP, _SZ, _P, _TP, _TP, ctypes.POINTER(WindowStats)])
_SIGNATURES["segrt_window_run_timed"] = (_S, [_PP, _SZ, _P, _TP, _TP, ctypes.POINTER(WindowStats),
                                              ctypes.POINTER(WindowTimes)])
_SIGNATURES.update({
    "segrt_window_session_create": (_S, [_PP, _SZ, _P, _PP]),
    "segrt_window_session_run": (_S, [_P, _TP, _TP, ctypes.POINTER(WindowStats)]),
    "segrt_window_session_run_timed": (_S, [_P, _TP, _TP, ctypes.POINTER(WindowStats), ctypes.POINTER(WindowTimes)]),
    "segrt_window_session_destroy": (None, [_P]),
})


def has_symbol(name):
    """Whether the library has the C function `name` (older builds lack
    newer entry points)."""
    try:
        fn(name)
    except SegrtError as e:
        if e.status != MISSING_SYMBOL:
            raise
        return False
    return True

# The window enums of segrt.h, by the names the CLI uses.
WINDOW_BLENDS = {"constant": 0, "gaussian": 1}
WINDOW_PADS = {"constant": 0, "reflect": 1, "replicate": 2}
WINDOW_GRIDS = {"monai": 0, "nnunet": 1}
WINDOW_OUTPUTS = {"logits": 0, "probs": 1, "labels": 2}
WINDOW_ACTIVATIONS = {"default": 0, "none": 1, "softmax": 2, "sigmoid": 3}
WINDOW_ACCUMULATORS = {"fp32": 1, "fp16": 10, "bf16": 16}  # segrt_dtype: FLOAT32, FLOAT16, BFLOAT16


def _lookup(table, value, what):
    if isinstance(value, int):
        return value
    if value not in table:
        raise ValueError(f"unknown {what} {value!r}; known: {', '.join(table)}")
    return table[value]


class WindowResult:
    """The host tensor segrt_window_run allocated: .array is a numpy view
    of it (no copy), valid until close(); numpy() copies it out. .stats:
    the run's segrt_window_stats as a dict (with segrt_window_times' fields
    as seconds_setup, seconds_run, ... where the library has them), or
    None."""

    def __init__(self, tensor, stats=None):
        self._t = tensor
        self.stats = stats
        self.on_device = tensor.memory == MEMORY_DEVICE
        n = int(np.prod(tensor.shape, dtype=np.int64))
        dt = numpy_dtype(tensor.dtype)
        if self.on_device:  # .array stays None: numpy() downloads
            self.array = None
            self._nbytes = n * dt.itemsize
            self._dtype = dt
            return
        buf = (ctypes.c_uint8 * (n * dt.itemsize)).from_address(tensor.data) if n else bytearray()
        self.array = np.frombuffer(buf, dtype=dt, count=n).reshape(tensor.shape)

    def numpy(self):
        if self.on_device:
            a = np.empty(self._t.shape, self._dtype)
            call("segrt_device_copy", a.ctypes.data, MEMORY_HOST, self._t.data, MEMORY_DEVICE, self._nbytes,
                 self._t.device)
            return a
        return self.array.copy()

    def close(self):
        if self._t is not None and self._t.data:
            self.array = None
            fn("segrt_window_result_free")(ctypes.byref(self._t))
        self._t = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class WindowOptions(_Handle):
    """segrt_window_options for windows of `roi` (one value per spatial
    dim; <= 0 is the whole axis). Keyword arguments call the setters:
    overlap (one value or one per dim), batch, blend ("constant",
    "gaussian") with sigma_scale, pad ("constant", "reflect", "replicate")
    with pad_value, grid ("monai", "nnunet"), output ("logits", "probs",
    "labels") with activation ("default", "none", "softmax", "sigmoid") and
    threshold, mirroring (a bit mask of spatial axes), max_memory,
    accumulator ("fp32", "fp16", "bf16", or a segrt_dtype number)."""
    _destroy = "segrt_window_options_destroy"

    def __init__(self, roi, overlap=None, batch=None, blend=None, sigma_scale=0.125, pad=None, pad_value=0.0,
                 grid=None, output=None, activation="default", threshold=0.5, mirroring=None, max_memory=None,
                 result_memory=None, accumulator=None):
        self._ptr = None
        roi = [int(r) for r in roi]
        self.n_dims = len(roi)
        p = ctypes.c_void_p()
        call("segrt_window_options_create", self.n_dims, (ctypes.c_int64 * max(1, self.n_dims))(*roi),
             ctypes.byref(p))
        super().__init__(p.value)
        if overlap is not None:
            self.set_overlap(overlap)
        if batch is not None:
            call("segrt_window_options_set_batch", self.ptr, int(batch))
        if blend is not None:
            call("segrt_window_options_set_blend", self.ptr, _lookup(WINDOW_BLENDS, blend, "blend"),
                 float(sigma_scale))
        if pad is not None:
            call("segrt_window_options_set_padding", self.ptr, _lookup(WINDOW_PADS, pad, "padding"),
                 float(pad_value))
        if grid is not None:
            call("segrt_window_options_set_grid", self.ptr, _lookup(WINDOW_GRIDS, grid, "grid"))
        if output is not None:
            call("segrt_window_options_set_output", self.ptr, _lookup(WINDOW_OUTPUTS, output, "output"),
                 _lookup(WINDOW_ACTIVATIONS, activation, "activation"), float(threshold))
        if mirroring is not None:
            call("segrt_window_options_set_mirroring", self.ptr, int(mirroring))
        if max_memory is not None:
            call("segrt_window_options_set_max_memory", self.ptr, int(max_memory))
        if accumulator is not None:
            call("segrt_window_options_set_accumulator", self.ptr,
                 _lookup(WINDOW_ACCUMULATORS, accumulator, "accumulator"))
        if result_memory is not None:
            call("segrt_window_options_set_result_memory", self.ptr,
                 {"host": MEMORY_HOST, "device": MEMORY_DEVICE}[result_memory])

    def set_overlap(self, overlap):
        ov = list(overlap) if isinstance(overlap, (list, tuple)) else [overlap] * self.n_dims
        call("segrt_window_options_set_overlap", self.ptr, (ctypes.c_double * max(1, len(ov)))(*map(float, ov)))

    def input_dims(self, image):
        """The dims every engine of the run must be built for, as a tuple:
        [windows per run, C, window...]. image: an array, DeviceTensor or
        anything with .dtype and .shape."""
        t = Tensor()
        t.dtype = dtype_code(image.dtype)
        t.rank, t.dims = _dims(image.shape)
        out = (ctypes.c_int64 * MAX_RANK)()
        call("segrt_window_input_dims", self.ptr, ctypes.byref(t), out)
        return tuple(int(d) for d in out[:t.rank])

    def bind(self, contexts, image, with_stats=False, session=True):
        """A function of no arguments running these options' job on these
        contexts (a Context or a list: an ensemble) and this image (a numpy
        array in host memory or a DeviceTensor), returning a WindowResult;
        the argument structs are made once, for timing loops. Through a
        window session (one for the function's life, so that repeated runs
        reuse the GPU path's buffers and streams) where the library has
        sessions and session is true, else segrt_window_run. with_stats:
        with the run's stats (and times) where the library has them."""
        if session and has_symbol("segrt_window_session_create"):
            return WindowSession(self, contexts).bind(image, with_stats=with_stats)
        ctxs = list(contexts) if isinstance(contexts, (list, tuple)) else [contexts]
        arr = (ctypes.c_void_p * len(ctxs))(*[c.ptr for c in ctxs])
        img, keep = _tensor(image)
        ptr, n = self.ptr, len(ctxs)
        stats = times = None
        name = "segrt_window_run"
        if with_stats:
            # The newest entry point the library has: with the host-time
            # breakdown, else the stats alone, else none.
            for candidate in ("segrt_window_run_timed", "segrt_window_run_with_stats"):
                try:
                    c_stats = fn(candidate)
                except SegrtError as e:
                    if e.status != MISSING_SYMBOL:
                        raise
                    continue
                name, stats = candidate, WindowStats()
                times = WindowTimes() if candidate == "segrt_window_run_timed" else None
                break
        c_run = fn("segrt_window_run")

        def run():
            out = Tensor()
            if stats is None:
                status = c_run(arr, n, ptr, ctypes.byref(img), ctypes.byref(out))
            elif times is None:
                status = c_stats(arr, n, ptr, ctypes.byref(img), ctypes.byref(out), ctypes.byref(stats))
            else:
                status = c_stats(arr, n, ptr, ctypes.byref(img), ctypes.byref(out), ctypes.byref(stats),
                                 ctypes.byref(times))
            if status != OK:
                raise SegrtError(name, status, last_error())
            if stats is None:
                return WindowResult(out, None)
            d = _struct_dict(stats)
            if times is not None:
                d.update({"seconds_" + k: v for k, v in _struct_dict(times).items()})
            return WindowResult(out, d)

        run.keep = (self, ctxs, keep)
        return run

    def run(self, contexts, image):
        """segrt_window_run once: the result as a numpy array (a copy; the
        segrt allocation is freed)."""
        with self.bind(contexts, image, session=False)() as r:
            return r.numpy()


class WindowSession(_Handle):
    """segrt_window_session: the job of `opts` (WindowOptions, copied by
    the library) on `contexts` (a Context or a list: an ensemble), run over
    images one after another; the GPU path keeps its buffers, streams and
    pinned memory from one run to the next. Holds the options and contexts
    alive while it lives, and is destroyed before them."""
    _destroy = "segrt_window_session_destroy"

    def __init__(self, opts, contexts):
        self._ptr = None
        ctxs = list(contexts) if isinstance(contexts, (list, tuple)) else [contexts]
        arr = (ctypes.c_void_p * len(ctxs))(*[c.ptr for c in ctxs])
        p = ctypes.c_void_p()
        call("segrt_window_session_create", arr, len(ctxs), opts.ptr, ctypes.byref(p))
        super().__init__(p.value)
        self._keep = (opts, ctxs)

    def bind(self, image, with_stats=False):
        """A function of no arguments running the session over this image,
        returning a WindowResult (with .stats when with_stats)."""
        img, keep = _tensor(image)
        stats = WindowStats() if with_stats else None
        times = WindowTimes() if with_stats else None
        c_run = fn("segrt_window_session_run_timed")
        ptr = self.ptr

        def run():
            out = Tensor()
            status = c_run(ptr, ctypes.byref(img), ctypes.byref(out),
                           ctypes.byref(stats) if stats is not None else None,
                           ctypes.byref(times) if times is not None else None)
            if status != OK:
                raise SegrtError("segrt_window_session_run", status, last_error())
            if stats is None:
                return WindowResult(out, None)
            d = _struct_dict(stats)
            d.update({"seconds_" + k: v for k, v in _struct_dict(times).items()})
            return WindowResult(out, d)

        run.keep = (self, keep)
        return run

    def run(self, image, with_stats=False):
        """One run: the result as a numpy array (a copy), or with
        with_stats (array, stats)."""
        with self.bind(image, with_stats=with_stats)() as r:
            return (r.numpy(), r.stats) if with_stats else r.numpy()
