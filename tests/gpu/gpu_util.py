"""Measures shared by the GPU tests: PSNR, relative L2, argmax agreement,
NaN/Inf position checks, and the JSON-lines report."""
import json
import math
import os

import numpy as np

from onnx_util import rel_l2  # tests/python, on sys.path through conftest.py

__all__ = ["rel_l2", "psnr", "special_mismatch", "argmax_agreement", "report", "fmt_db", "target_cc", "planned_cc",
           "bf16_ok", "half", "need_bf16"]


def target_cc(text):
    """(major, minor) of a --target-arch spelling: sm_80, 80, 8.6, sm_90a."""
    t = text[3:] if text.startswith("sm_") else text
    t = t.rstrip("a")
    if "." in t:
        major, minor = t.split(".")
        return int(major), int(minor)
    return int(t) // 10, int(t) % 10


_PLANNED = []


def planned_cc():
    """The compute capability the suite's plans are for: the target of
    SEGRT_TEST_TARGET_ARCH (the suite run as an older GPU would plan it),
    else device 0's. Asked by tests as they run, never at import: loading
    libsegrt into Python aborts a sanitizer build (conftest.py)."""
    if not _PLANNED:
        t = os.environ.get("SEGRT_TEST_TARGET_ARCH")
        if t:
            _PLANNED.append(target_cc(t))
        else:
            import segrt_capi
            d = segrt_capi.cuda_device_info(0)
            _PLANNED.append((d["compute_major"], d["compute_minor"]))
    return _PLANNED[0]


def bf16_ok():
    """Whether bfloat16 plans build: compute capability 8.0 and later
    (below it the build refuses them by name)."""
    return planned_cc() >= (8, 0)


def half():
    """The half precisions a test compares where the plans are for."""
    return ("fp16", "bf16") if bf16_ok() else ("fp16",)


def need_bf16(precision):
    """Skips a bf16 case where the plans are for a GPU without bfloat16."""
    import pytest
    if precision == "bf16" and not bf16_ok():
        pytest.skip("bfloat16 needs compute capability 8.0; this run plans for %d.%d" % planned_cc())


def special_mismatch(got, ref):
    """None when NaN, +Inf and -Inf sit at the same positions in both float
    arrays (of one shape), else a message naming the first difference."""
    g = np.asarray(got, dtype=np.float64).ravel()
    r = np.asarray(ref, dtype=np.float64).ravel()
    for what, f in (("NaN", np.isnan), ("+Inf", np.isposinf), ("-Inf", np.isneginf)):
        diff = np.flatnonzero(f(g) != f(r))
        if diff.size:
            i = int(diff[0])
            return (f"{what} positions differ at {diff.size} of {g.size} elements; first at flat index {i}: "
                    f"got {g[i]!r}, expected {r[i]!r}")
    return None


def psnr(got, ref):
    """PSNR of got against ref in dB, with peak = max |ref| over ref's finite
    elements: 10 log10(peak^2 / MSE), MSE over the positions finite in ref
    (NaN/Inf positions are checked separately, by special_mismatch).
    inf when the two agree exactly there (which covers empty tensors and an
    all-zero ref matched exactly); -inf when ref is all zero but got is not,
    or got is not finite where ref is."""
    g = np.asarray(got, dtype=np.float64).ravel()
    r = np.asarray(ref, dtype=np.float64).ravel()
    fin = np.isfinite(r)
    g, r = g[fin], r[fin]
    if r.size == 0:
        return math.inf
    if not np.all(np.isfinite(g)):
        return -math.inf
    mse = float(np.mean((g - r) ** 2))
    if mse == 0.0:
        return math.inf
    peak = float(np.max(np.abs(r)))
    if peak == 0.0:
        return -math.inf
    return 10.0 * math.log10(peak * peak / mse)


def argmax_agreement(got, ref, axis=1):
    """Fraction of positions whose argmax over `axis` agrees."""
    a = np.argmax(np.asarray(got), axis=axis)
    b = np.argmax(np.asarray(ref), axis=axis)
    return float(np.mean(a == b)) if a.size else 1.0


def fmt_db(v):
    return f"{v:.1f} dB" if math.isfinite(v) else f"{v} dB"


def _json_safe(v):
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, (np.floating, np.integer)):
        return _json_safe(v.item())
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v


_GPU_NAME = []


def _gpu_name():
    if not _GPU_NAME:
        try:
            import segrt_capi
            _GPU_NAME.append(segrt_capi.cuda_device_info(0)["name"])
        except Exception:  # noqa: BLE001 - only a label
            _GPU_NAME.append(None)
    return _GPU_NAME[0]


def report(record):
    """Appends record (a dict) as one JSON line to $SEGRT_GPU_REPORT, if set.
    Infinities and NaN become the strings "inf", "-inf", "nan"."""
    path = os.environ.get("SEGRT_GPU_REPORT")
    if not path:
        return
    record = dict(record)
    record.setdefault("gpu", _gpu_name())
    with open(path, "a") as f:
        f.write(json.dumps(_json_safe(record), sort_keys=True) + "\n")
