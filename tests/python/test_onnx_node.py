"""The ONNX backend node tests of segrt's operators, one test per case, and
the committed table docs/onnx_node_tests.md checked against the run.

The cases run in parallel inside tests/onnx_node/run_node_tests.py, once per
session (only those selected); each test then reports its case's result.
"""
import pathlib
import sys

import onnx
import pytest

from conftest import SEGRT

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "onnx_node"))
import run_node_tests as rnt  # noqa: E402

SOURCE = rnt.find_source()
if SOURCE.skip_reason:
    pytest.skip(SOURCE.skip_reason, allow_module_level=True)
CASES = {c.name: c for c in rnt.load_cases(SOURCE)}
NAMES = sorted(CASES)


def _selected_names(session, module) -> list[str]:
    """The cases this session runs: those of the selected test_node items, or
    all of them when the table test is selected (the table needs every one)."""
    names = set()
    for item in session.items:
        if getattr(item, "module", None) is not module:
            continue
        if item.originalname == "test_table_is_up_to_date":
            return NAMES
        callspec = getattr(item, "callspec", None)
        if callspec and "name" in callspec.params:
            names.add(callspec.params["name"])
    return sorted(names)


@pytest.fixture(scope="module")
def results(request):
    cases = [CASES[n] for n in _selected_names(request.session, request.module)]
    return {r.name: r for r in rnt.run_cases(cases, SEGRT)}


@pytest.mark.parametrize("name", NAMES)
def test_node(name, results):
    r = results[name]
    if r.status == rnt.SKIPPED:
        pytest.skip(r.message)
    if r.status == rnt.KNOWN:
        # Strict: a listed case that passes comes back FAILED from the runner.
        pytest.xfail(r.message)
    if r.status == rnt.FAILED:
        pytest.fail(r.message, pytrace=False)
    assert r.status == rnt.PASSED


def test_table_is_up_to_date(results):
    committed = rnt.TABLE.read_text() if rnt.TABLE.exists() else ""
    version = rnt.table_source_version(committed)
    # The table records one onnx version's shipped data; other data (another
    # version's, or generated) has other cases.
    if not SOURCE.shipped or (version and version != onnx.__version__):
        pytest.skip(f"{rnt.TABLE.name} is made from the node test data shipped with onnx "
                    f"{version or '(unknown)'}; this run uses the {SOURCE.description}")
    expected = rnt.render_table([results[n] for n in NAMES], SOURCE)
    if committed != expected:
        old, new = committed.splitlines(), expected.splitlines()
        first = next((i for i in range(min(len(old), len(new))) if old[i] != new[i]), min(len(old), len(new)))
        got = old[first] if first < len(old) else "(end of file)"
        want = new[first] if first < len(new) else "(end of file)"
        pytest.fail(f"docs/onnx_node_tests.md is out of date (line {first + 1}: {got!r}, the run gives "
                    f"{want!r}); regenerate it from the repository root with:\n    {rnt.REGENERATE}",
                    pytrace=False)
