"""The GPU tests: the CUDA engine against the CPU engine, the CLI at every
precision on the test models, plan files and the plan cache, and the
CUDA sanitizers. Run as a pytest session of its own (tests/python has a
conftest.py of the same module name):

    python tests/models/make_models.py build/test-models
    SEGRT=build/segrt SEGRT_MODELS=build/test-models python -m pytest -q -s tests/gpu

Everything is skipped (reported as skipped, never passed) where the library
has no CUDA backend or sees no CUDA device. With SEGRT_GPU_SKIP_EXIT=77 (as
ctest sets it) a session skipped for that reason exits 77, so that ctest
reports it skipped too.

Environment: SEGRT (the binary), SEGRT_LIB (libsegrt.so; default next to
the binary), SEGRT_MODELS (the folder of the test models that
tests/models/make_models.py writes; default build/test-models),
SEGRT_GPU_SCALE (multiplies the op cases per family), SEGRT_GPU_REPORT (a
file the measured figures are appended to as JSON lines), SEGRT_DIFF_SEED
(rerun chosen op cases, as in tests/python)."""
import importlib.util
import os
import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
PY_TESTS = HERE.parent / "python"
if str(PY_TESTS) not in sys.path:
    sys.path.insert(0, str(PY_TESTS))

# tests/python/conftest.py, loaded under another name; its names are
# re-exported here, because modules there (opgen) do `from conftest import
# ...` and find this file as `conftest` in this session.
_spec = importlib.util.spec_from_file_location("segrt_python_conftest", PY_TESTS / "conftest.py")
_py_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_py_conftest)
SEGRT = _py_conftest.SEGRT
MODELS = _py_conftest.MODELS
SANITIZED = _py_conftest.SANITIZED
run_segrt = _py_conftest.run_segrt
segrt = _py_conftest.segrt
models = _py_conftest.models
require_models = _py_conftest.require_models

import gpu_util  # noqa: E402 - after the sys.path change
import segrt_capi  # noqa: E402


def _gpu_state():
    """(available, reason, fatal). fatal: a GPU is there but the library
    cannot be used, which must fail rather than skip."""
    if SANITIZED:
        # An AddressSanitizer build's library aborts the interpreter when
        # dlopen'ed (ASan must be the first library loaded). The GPU suite
        # runs against the release build (scripts/gpu-check.sh); under the
        # sanitizers the C race test still runs.
        return False, "the sanitizer build's libsegrt cannot be loaded into Python", False
    try:
        ok, why = segrt_capi.cuda_available()
    except OSError as e:
        if segrt_capi.gpu_visible_to_driver():
            return False, f"nvidia-smi lists a GPU but libsegrt cannot be loaded: {e}", True
        return False, f"no GPU, and libsegrt cannot be loaded: {e}", False
    except segrt_capi.SegrtError as e:
        return False, f"querying CUDA failed: {e}", True
    return ok, why, False


GPU_OK, GPU_WHY, GPU_FATAL = _gpu_state()


def pytest_report_header(config):
    if GPU_OK:
        d = segrt_capi.cuda_device_info(0)
        v = segrt_capi.cuda_versions()
        return (f"segrt GPU tests: {segrt_capi.library_path()}, {d['name']} (compute {d['compute_major']}."
                f"{d['compute_minor']}), CUDA runtime {v['runtime_version']}, cuDNN {v['cudnn_version']}")
    return f"segrt GPU tests: {'FAILING' if GPU_FATAL else 'skipped'}: {GPU_WHY}"


def pytest_collection_modifyitems(config, items):
    if GPU_OK:
        return
    if GPU_FATAL:
        return  # _gpu_setup_broken fails every test, naming the cause
    skip = pytest.mark.skip(reason=f"GPU tests: {GPU_WHY}")
    for item in items:
        item.add_marker(skip)


@pytest.fixture(autouse=True)
def _gpu_setup_broken():
    if GPU_FATAL:
        pytest.fail(GPU_WHY)


def pytest_sessionfinish(session, exitstatus):
    code = os.environ.get("SEGRT_GPU_SKIP_EXIT")
    if code and not GPU_OK and not GPU_FATAL and exitstatus in (0, 5):
        session.exitstatus = int(code)


@pytest.fixture(scope="session")
def gpu():
    """Device 0's description; the tests that need the GPU take it. Run
    with SEGRT_TEST_TARGET_ARCH (the suite planned as an older GPU would
    plan it), its compute capability is the target's, so that the tests of
    kernels such a GPU lacks skip as they would there."""
    d = segrt_capi.cuda_device_info(0)
    if _py_conftest.TARGET_ARCH:
        major, minor = gpu_util.target_cc(_py_conftest.TARGET_ARCH)
        d = dict(d, compute_major=major, compute_minor=minor)
    return d


@pytest.fixture
def mma_sync(gpu):
    """The tests of segrt's mma.sync kernels (m16n8k16 products, cp.async):
    compute capability 8.0 and later; an older GPU plans cuDNN instead."""
    if (gpu["compute_major"], gpu["compute_minor"]) < (8, 0):
        pytest.skip("segrt's mma.sync kernels need compute capability 8.0; "
                    f"this run plans for {gpu['compute_major']}.{gpu['compute_minor']}")
