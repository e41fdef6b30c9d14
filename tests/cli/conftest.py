"""The CLI tests share tests/python's fixtures (the segrt binary, the test
models, run_segrt). That file is loaded under another module name, since
this one is `conftest` too, and its names are re-exported here."""
import importlib.util
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
PY_TESTS = HERE.parent / "python"
if str(PY_TESTS) not in sys.path:
    sys.path.insert(0, str(PY_TESTS))

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
