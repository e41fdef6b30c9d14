"""segrt's errors: one class per status of the C API (include/segrt.h's
segrt_status), each carrying the library's message (segrt_last_error:
the file, node and tensor involved). Classes that mean a bad argument also
derive from ValueError, file errors from OSError, running out of memory
from MemoryError, so that code catching those catches segrt's too."""
from __future__ import annotations


class Error(Exception):
    """Base of every error segrt raises for a failed C call. `status` is
    the C status (an int of segrt_status) and `status_name` its name."""

    status: int = 0
    status_name: str = "SEGRT_OK"


class InvalidArgumentError(Error, ValueError):
    """SEGRT_ERROR_INVALID_ARGUMENT: a bad argument (a dtype, dims or
    option that does not fit, a name the model lacks)."""

    status, status_name = 1, "SEGRT_ERROR_INVALID_ARGUMENT"


class FileError(Error, OSError):
    """SEGRT_ERROR_IO: a file could not be opened, read or written."""

    status, status_name = 2, "SEGRT_ERROR_IO"


class InvalidModelError(Error):
    """SEGRT_ERROR_INVALID_MODEL: the model, plan or data file is malformed."""

    status, status_name = 3, "SEGRT_ERROR_INVALID_MODEL"


class UnsupportedError(Error):
    """SEGRT_ERROR_UNSUPPORTED: well-formed, but uses what segrt lacks (an
    operator, an opset, a device this build has no backend for)."""

    status, status_name = 4, "SEGRT_ERROR_UNSUPPORTED"


class ShapeError(Error, ValueError):
    """SEGRT_ERROR_SHAPE: shapes or dtypes contradict each other."""

    status, status_name = 5, "SEGRT_ERROR_SHAPE"


class OutOfMemoryError(Error, MemoryError):
    """SEGRT_ERROR_OUT_OF_MEMORY: host or device memory ran out."""

    status, status_name = 6, "SEGRT_ERROR_OUT_OF_MEMORY"


class DeviceError(Error):
    """SEGRT_ERROR_DEVICE: the GPU, its driver or a GPU library failed."""

    status, status_name = 7, "SEGRT_ERROR_DEVICE"


class InternalError(Error):
    """SEGRT_ERROR_INTERNAL: a bug in segrt; please report it."""

    status, status_name = 8, "SEGRT_ERROR_INTERNAL"


class CasesFailedError(Error):
    """SEGRT_ERROR_CASES_FAILED: a job over a folder of cases ran, but some
    cases failed (the message names them; the others ran)."""

    status, status_name = 9, "SEGRT_ERROR_CASES_FAILED"


# By status, as the extension raises them (index 0, SEGRT_OK, unused).
BY_STATUS = (Error, InvalidArgumentError, FileError, InvalidModelError, UnsupportedError, ShapeError,
             OutOfMemoryError, DeviceError, InternalError, CasesFailedError)
