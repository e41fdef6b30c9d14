"""ONNX backend node tests against segrt.

The `onnx` package ships per-operator conformance cases under
onnx/backend/test/data/node/<test_name>/ (model.onnx and
test_data_set_N/{input_K,output_K}.pb). This module finds the cases whose
operator segrt implements (the "OnnxName" strings of src/graph/ops.def), plus
the function expansions of other operators that consist only of segrt's
operators, decides which of them segrt can run at all (and why not), runs the
rest through `segrt run` with NPY files, compares every output, and renders a
table of the results.

Where the installed onnx has no data directory (onnx 1.20+ dropped it), the
cases are generated with onnx's own generator
(onnx.backend.test.case.node.collect_testcases) into a temporary directory in
the same layout and read from there the same way.

CLI:
    python tests/onnx_node/run_node_tests.py --segrt build/segrt --table docs/onnx_node_tests.md
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import functools
import os
import pathlib
import re
import shutil
import shlex
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

REPO = pathlib.Path(__file__).resolve().parents[2]
OPS_DEF = REPO / "src" / "graph" / "ops.def"
KNOWN_FAILURES = pathlib.Path(__file__).resolve().parent / "known_failures.txt"
TABLE = REPO / "docs" / "onnx_node_tests.md"
REGENERATE = ".venv/bin/python tests/onnx_node/run_node_tests.py --segrt build/segrt --table docs/onnx_node_tests.md"

# The default-domain opsets segrt imports (SG_ONNX_OPSET_MIN/MAX).
OPSET_MIN, OPSET_MAX = 13, 23

# ONNX element types segrt has (TensorProto enum values).
SUPPORTED_DTYPES = {
    TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE,
    TensorProto.INT64, TensorProto.INT32, TensorProto.INT16, TensorProto.UINT16,
    TensorProto.INT8, TensorProto.UINT8, TensorProto.BOOL,
}

# Tolerances for float outputs: an output passes when it is within either
# set (segrt's own bound, or the onnx backend test default).
TOLERANCES = [(1e-5, 1e-6), (1e-3, 1e-7)]

# Generous bound for one `segrt run`; only there so that a hang cannot stall
# the suite forever, never reached by a working build, sanitized or not.
RUN_TIMEOUT_S = 900

PASSED, FAILED, SKIPPED, KNOWN = "passed", "failed", "skipped", "known failure"

# Cases segrt turns down on purpose: it is an inference engine, and
# training-mode Dropout with a ratio above 0 is random (the expected outputs
# come from numpy's generator, which no engine reproduces). Each must still
# be rejected cleanly (exit 2, "... not supported"); one that runs instead
# fails, so a silently wrong answer cannot hide behind this list.
_TRAINING_DROPOUT = "Dropout with training_mode=true and ratio > 0: random output, and segrt is inference-only"
_TRAINING_BATCHNORM = "BatchNormalization with training_mode=1: segrt is inference-only"
REJECTED_BY_DESIGN = {
    "test_batchnorm_epsilon_training_mode": _TRAINING_BATCHNORM,
    "test_batchnorm_example_training_mode": _TRAINING_BATCHNORM,
    "test_training_dropout": _TRAINING_DROPOUT,
    "test_training_dropout_default": _TRAINING_DROPOUT,
    "test_training_dropout_default_mask": _TRAINING_DROPOUT,
    "test_training_dropout_mask": _TRAINING_DROPOUT,
}


# --------------------------------------------------------------------------
# Operators and known failures

@functools.cache
def segrt_ops() -> frozenset[str]:
    """The ONNX operator names in src/graph/ops.def (lines, not comments;
    segrt's own operators, which ONNX does not define, left out)."""
    text = OPS_DEF.read_text()
    names = re.findall(r'^SG_OP\(\s*\w+\s*,\s*"(\w+)"', text, re.M)
    return frozenset(n for n in names if onnx.defs.has(n))


def read_known_failures(path: pathlib.Path = KNOWN_FAILURES) -> dict[str, str]:
    """test name -> reason, from `name  reason` lines; '#' starts a comment line."""
    known = {}
    if not path.exists():
        return known
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition(" ")
        known[name] = reason.strip() or "(no reason given)"
    return known


# --------------------------------------------------------------------------
# Finding the cases

@dataclasses.dataclass
class Case:
    name: str
    op: str                 # the operator under test
    expansion: bool         # a function expansion (test name ..._expanded)
    dir: pathlib.Path
    model: onnx.ModelProto

    def data_sets(self) -> list[tuple[list[pathlib.Path], list[pathlib.Path]]]:
        sets = []
        for d in sorted(self.dir.glob("test_data_set_*"), key=lambda p: int(p.name.rsplit("_", 1)[1])):
            def files(prefix):
                return sorted(d.glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))
            sets.append((files("input"), files("output")))
        return sets


@dataclasses.dataclass
class Source:
    """Where the cases came from: the data directory and a line saying what it is."""
    node_dir: pathlib.Path | None
    description: str
    shipped: bool           # onnx's own shipped data (not generated here)
    skip_reason: str = ""   # set when there are no cases to run
    _tmp: tempfile.TemporaryDirectory | None = None


def shipped_node_dir() -> pathlib.Path:
    return pathlib.Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "node"


def _tensor_bytes(value, name: str) -> bytes:
    if isinstance(value, TensorProto):
        return value.SerializeToString()
    return numpy_helper.from_array(np.asarray(value), name).SerializeToString()


def write_generated_case(case, root: pathlib.Path) -> None:
    """Writes one generated case in the shipped layout: model.onnx and
    test_data_set_N/{input,output}_K.pb. Values of non-tensor inputs and
    outputs (sequences, optionals, maps) are left out: such cases are skipped
    before their data is read. A value that cannot be stored is recorded in
    data_error.txt, and the case is skipped with that reason."""
    d = root / case.name
    d.mkdir(parents=True, exist_ok=True)
    (d / "model.onnx").write_bytes(case.model.SerializeToString())
    g = case.model.graph
    try:
        for i, (inputs, outputs) in enumerate(case.data_sets):
            ds = d / f"test_data_set_{i}"
            ds.mkdir(exist_ok=True)
            for prefix, values, infos in (("input", inputs, g.input), ("output", outputs, g.output)):
                for k, (value, vi) in enumerate(zip(values, infos)):
                    if vi.type.HasField("tensor_type"):
                        (ds / f"{prefix}_{k}.pb").write_bytes(_tensor_bytes(value, vi.name))
    except Exception as e:  # noqa: BLE001 - reported as the case's skip reason
        (d / "data_error.txt").write_text(f"{type(e).__name__}: {e}")


def generate_node_dir(tmp: pathlib.Path) -> pathlib.Path:
    """Generates the node cases with onnx's own generator
    (onnx.backend.test.case.node, what `backend-test-tools generate-data` wrote
    before onnx 1.20) into tmp/node."""
    import warnings

    from onnx.backend.test.case import node as node_cases

    root = tmp / "node"
    root.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        # The generator computes expected outputs with numpy, on purpose
        # through divisions by zero and logs of zero.
        warnings.simplefilter("ignore")
        cases = node_cases.collect_testcases(None)
    for case in cases:
        write_generated_case(case, root)
    return root


def find_source(data_dir: str | os.PathLike | None = None) -> Source:
    """The node test data: a given directory, onnx's shipped one, or generated."""
    if data_dir:
        return Source(pathlib.Path(data_dir), f"node test data from {data_dir}", shipped=False)
    shipped = shipped_node_dir()
    if shipped.is_dir() and any(shipped.iterdir()):
        return Source(shipped, f"node test data shipped with onnx {onnx.__version__}", shipped=True)
    tmp = tempfile.TemporaryDirectory(prefix="segrt-onnx-node-")
    try:
        node_dir = generate_node_dir(pathlib.Path(tmp.name))
    except Exception as e:  # noqa: BLE001 - any generator failure means: nothing to run
        tmp.cleanup()
        return Source(None, "", shipped=False,
                      skip_reason=f"onnx {onnx.__version__} ships no node test data ({shipped}) and "
                                  f"generating it failed: {type(e).__name__}: {e}")
    return Source(node_dir, f"node test data generated by onnx {onnx.__version__}'s test case generator",
                  shipped=False, _tmp=tmp)


_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")


def load_cases(source: Source) -> list[Case]:
    """Cases of segrt's operators, and expansions of others made only of segrt's operators.

    A plain node test's graph is the one node under test; an expansion
    `<base>_expanded[_verN]` tests the operator of `<base>`.
    """
    if source.node_dir is None:
        return []
    ops = segrt_ops()
    models = {}
    for d in sorted(p for p in source.node_dir.iterdir() if (p / "model.onnx").is_file()):
        models[d.name] = (d, onnx.load(str(d / "model.onnx"), load_external_data=False))
    cases = []
    for name, (d, model) in sorted(models.items()):
        expansion = bool(_EXPANDED.search(name))
        base = models.get(_EXPANDED.sub("", name)) if expansion else (d, model)
        if base is None or len(base[1].graph.node) != 1:
            continue  # not a per-operator case
        op = base[1].graph.node[0].op_type
        if op not in ops and not (expansion and {n.op_type for n in model.graph.node} <= ops):
            continue
        cases.append(Case(name, op, expansion, d, model))
    return cases


# --------------------------------------------------------------------------
# Deciding what segrt can run

def default_opset(model: onnx.ModelProto) -> int | None:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return None


def _type_kind(tp: onnx.TypeProto) -> str:
    return tp.WhichOneof("value") or "unknown"


def _attr_graphs(model: onnx.ModelProto):
    for n in model.graph.node:
        for a in n.attribute:
            if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                yield n.op_type


def _dtype_name(elem: int) -> str:
    return TensorProto.DataType.Name(elem)


def _model_dtypes(model: onnx.ModelProto) -> list[tuple[str, int]]:
    """(where, elem type) of every tensor the graph declares or makes, after shape inference."""
    found = []
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - inference is only a source of extra types here
        inferred = model
    g = inferred.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            found.append((f"`{vi.name}`", vi.type.tensor_type.elem_type))
    for t in g.initializer:
        found.append((f"initializer `{t.name}`", t.data_type))
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                found.append((f"{n.op_type} attribute {a.name}", a.t.data_type))
            elif n.op_type == "Cast" and a.name == "to":
                found.append(("Cast to", a.i))
    return found


def structure_skip(model: onnx.ModelProto) -> str | None:
    """Functions, subgraphs, sequences, optionals and maps: segrt has none of them."""
    if model.functions:
        return "uses model-local functions"
    sub = sorted(set(_attr_graphs(model)))
    inputs = {i.name for i in model.graph.input}
    if sub == ["If"] and all(n.input[0] in inputs for n in model.graph.node if n.op_type == "If"):
        # segrt folds an If whose condition is a constant once the dims are
        # bound (tests/python/test_if.py); these take it from a graph input.
        return "If's condition is a graph input (segrt runs an If whose condition folds when the plan is built)"
    if sub:
        return f"uses subgraphs ({', '.join(sub)})"
    g = model.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        kind = _type_kind(vi.type)
        if kind != "tensor_type":
            kind = kind.replace("_type", "")
            return f"`{vi.name}` is {'an' if kind[0] in 'aeiou' else 'a'} {kind}, not a tensor"
    seq = sorted({n.op_type for n in g.node if n.op_type.startswith(("Sequence", "Optional"))
                  or n.op_type in ("SplitToSequence", "ConcatFromSequence")})
    if seq:
        return f"uses sequences or optionals ({', '.join(seq)})"
    return None


def operator_skip(model: onnx.ModelProto) -> str | None:
    ops = segrt_ops()
    missing = sorted({n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
                      for n in model.graph.node
                      if n.domain not in ("", "ai.onnx") or n.op_type not in ops})
    if missing:
        return f"operator{'s' if len(missing) > 1 else ''} {', '.join(missing)} not supported"
    return None


def dtype_skip(model: onnx.ModelProto) -> str | None:
    g = model.graph
    for vi in list(g.input) + list(g.output):
        if vi.type.tensor_type.elem_type == TensorProto.BFLOAT16:
            return f"NPY cannot carry bfloat16 (`{vi.name}`)"
    for where, elem in _model_dtypes(model):
        if elem not in SUPPORTED_DTYPES:
            return f"dtype {_dtype_name(elem)} not supported ({where})"
    return None


def _first_line(text: str, limit: int = 160) -> str:
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def at_supported_opset(model: onnx.ModelProto) -> tuple[onnx.ModelProto | None, str | None]:
    """The model at an opset segrt imports, or (None, why not).

    A model stamped above OPSET_MAX runs at OPSET_MAX when every node's operator has a
    schema there and the checker (with shape inference) accepts the model
    there; models below OPSET_MIN are out of range.
    """
    v = default_opset(model)
    if v is None:
        return None, "imports no default-domain opset"
    if v < OPSET_MIN:
        return None, f"opset {v} is below {OPSET_MIN}"
    if v <= OPSET_MAX:
        return model, None
    for n in model.graph.node:
        try:
            onnx.defs.get_schema(n.op_type, OPSET_MAX, "")
        except onnx.defs.SchemaError:
            return None, f"needs opset {v}: {n.op_type} is not defined at opset {OPSET_MAX}"
    lowered = onnx.ModelProto()
    lowered.CopyFrom(model)
    for o in lowered.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = OPSET_MAX
    try:
        onnx.checker.check_model(lowered, full_check=True)
    except Exception as e:  # noqa: BLE001 - checker and inference raise several types
        return None, f"needs opset {v}: invalid at opset {OPSET_MAX}: {_first_line(e)}"
    return lowered, None


def prepare(case: Case) -> tuple[onnx.ModelProto | None, str | None]:
    """The model to run, or (None, the reason to skip)."""
    for check in (structure_skip, operator_skip):
        reason = check(case.model)
        if reason:
            return None, reason
    # An old opset is the first thing to say about a case, before its dtypes.
    v = default_opset(case.model)
    if v is not None and v < OPSET_MIN:
        return None, f"opset {v} is below {OPSET_MIN}"
    reason = dtype_skip(case.model)
    if reason:
        return None, reason
    return at_supported_opset(case.model)


# --------------------------------------------------------------------------
# Running and comparing

@dataclasses.dataclass
class Result:
    name: str
    op: str
    expansion: bool
    status: str             # PASSED, FAILED, SKIPPED or KNOWN
    message: str = ""       # skip reason, failure, or known-failure reason


def read_tensor(path: pathlib.Path) -> np.ndarray:
    t = TensorProto()
    t.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(t)


def compare(name: str, expected: np.ndarray, got: np.ndarray) -> str | None:
    """None when got matches expected, else what differs."""
    if got.dtype != expected.dtype:
        return f"output `{name}`: dtype {got.dtype}, expected {expected.dtype}"
    if got.shape != expected.shape:
        return f"output `{name}`: shape {got.shape}, expected {expected.shape}"
    if expected.dtype.kind in "biu":
        bad = np.argwhere(got != expected)
        if bad.size == 0:
            return None
        i = tuple(int(k) for k in bad[0])
        return (f"output `{name}`: {len(bad)} of {expected.size} values differ; at {list(i)} "
                f"got {got[i].item()!r}, expected {expected[i].item()!r}")
    e, g = expected.astype(np.float64), got.astype(np.float64)
    errors = []
    for rtol, atol in TOLERANCES:
        try:
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
            return None
        except AssertionError as err:
            errors.append(err)
    diff = np.abs(g - e)
    with np.errstate(invalid="ignore"):
        tol = TOLERANCES[0][1] + TOLERANCES[1][0] * np.abs(e)
        bad = np.argwhere(~((diff <= tol) | (np.isnan(g) & np.isnan(e)) | (g == e)))
    if bad.size == 0:
        return f"output `{name}`: " + _first_line(" ".join(str(errors[-1]).split()), 300)
    i = tuple(int(k) for k in bad[0])
    return (f"output `{name}`: {len(bad)} of {expected.size} values differ; at {list(i)} "
            f"got {g[i].item()!r}, expected {e[i].item()!r} (max abs diff {np.nanmax(diff):.3g})")


def _what_segrt_said(text: str) -> str:
    """segrt's one-line message, or the line naming a sanitizer's finding
    (whose report starts with a rule of '=')."""
    lines = [l.strip() for l in text.splitlines() if l.strip() and not set(l.strip()) <= {"="}]
    for line in lines:
        if re.search(r"ERROR: \w*Sanitizer|runtime error:", line):
            return _first_line(line, 400)
    return _first_line(lines[0], 400) if lines else ""


class Rejected(Exception):
    """segrt turned the model down as unsupported (exit 2)."""


def run_data_set(segrt: str, model_path: pathlib.Path, model: onnx.ModelProto, work: pathlib.Path,
                 inputs: list[pathlib.Path], outputs: list[pathlib.Path], extra: tuple[str, ...] = ()) -> str | None:
    """Runs one data set; None when every output matches, else the failure.

    Raises Rejected when segrt exits 2 saying the model is not supported.
    """
    g = model.graph
    if len(inputs) != len(g.input) or len(outputs) != len(g.output):
        return f"data set has {len(inputs)} inputs and {len(outputs)} outputs, the model {len(g.input)} and {len(g.output)}"
    args = [segrt, "run", str(model_path), "--quiet", *extra]
    for k, (vi, path) in enumerate(zip(g.input, inputs)):
        npy = work / f"in{k}.npy"
        # np.ascontiguousarray would turn a 0-d array into shape (1,).
        np.save(npy, np.array(read_tensor(path), order="C"), allow_pickle=False)
        args += ["--input", f"{vi.name}={npy}"]
    out_paths = []
    for k, vi in enumerate(g.output):
        out_paths.append(work / f"out{k}.npy")
        args += ["--output", f"{vi.name}={out_paths[-1]}"]
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"segrt run did not finish in {RUN_TIMEOUT_S} s"
    # Messages name the model by its temporary path: keep them reproducible.
    said = _what_segrt_said(p.stderr or p.stdout).replace(f"{work}{os.sep}", "")
    if p.returncode == 2 and "not supported" in said:
        raise Rejected(f"segrt run exited 2: {said}")
    if p.returncode != 0:
        return f"segrt run exited {p.returncode}: {said}"
    for vi, path, expected_path in zip(g.output, out_paths, outputs):
        got = np.load(path, allow_pickle=False)
        err = compare(vi.name, read_tensor(expected_path), got)
        if err:
            return err
    return None


def run_case(case: Case, segrt: str, work_root: pathlib.Path, known: dict[str, str],
             extra: tuple[str, ...] = ()) -> Result:
    def result(status, message=""):
        return Result(case.name, case.op, case.expansion, status, message)

    model, skip = prepare(case)
    error_file = case.dir / "data_error.txt"
    if not skip and error_file.exists():
        skip = f"onnx's generator gave data that cannot be stored as TensorProto: {_first_line(error_file.read_text())}"
    if skip:
        # Also for a listed known failure: the list may name cases that run
        # only with another onnx version's data (stamped with another opset).
        return result(SKIPPED, skip)
    work = work_root / case.name
    work.mkdir(parents=True, exist_ok=True)
    model_path = work / "model.onnx"
    model_path.write_bytes(model.SerializeToString())
    failure, rejected = None, None
    sets = case.data_sets()
    if not sets:
        failure = "the case has no data sets"
    for k, (inputs, outputs) in enumerate(sets):
        try:
            failure = run_data_set(segrt, model_path, model, work, inputs, outputs, extra)
        except Rejected as e:
            failure = rejected = str(e)
        except Exception as e:  # noqa: BLE001 - e.g. an output file segrt did not write
            failure = f"{type(e).__name__}: {_first_line(e, 300)}"
        if failure:
            failure = f"data set {k}: {failure}" if len(sets) > 1 else failure
            break
    shutil.rmtree(work, ignore_errors=True)
    if case.name in REJECTED_BY_DESIGN:
        why = REJECTED_BY_DESIGN[case.name]
        if rejected and case.name in known:
            return result(FAILED, "rejected as designed now: remove it from known_failures.txt")
        if rejected:
            return result(SKIPPED, f"rejected by design: {why}")
        failure = f"expected segrt to reject it as unsupported ({why}), but: {failure or 'it ran'}"
    if case.name in known:
        if failure:
            return result(KNOWN, known[case.name])
        return result(FAILED, "listed in known_failures.txt but passes: remove it from the list")
    return result(FAILED, failure) if failure else result(PASSED)


def run_cases(cases: list[Case], segrt: str, known: dict[str, str] | None = None,
              jobs: int | None = None, extra: tuple[str, ...] = ()) -> list[Result]:
    """Runs cases in parallel (each is a process launch); results in case order.
    extra: more `segrt run` arguments (build options) for every case."""
    known = read_known_failures() if known is None else known
    jobs = jobs or os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="segrt-node-run-") as tmp, \
            concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_case, c, segrt, pathlib.Path(tmp), known, extra) for c in cases]
        return [f.result() for f in futures]


# --------------------------------------------------------------------------
# The table

def summary_counts(results: list[Result]) -> dict[str, int]:
    return {s: sum(r.status == s for r in results) for s in (PASSED, FAILED, SKIPPED, KNOWN)}


def summary_line(results: list[Result]) -> str:
    c = summary_counts(results)
    return f"{c[PASSED]} passed, {c[FAILED]} failed, {c[SKIPPED]} skipped, {c[KNOWN]} known failures"


def _op_rows(results: list[Result], ops: list[str]) -> list[str]:
    rows = ["| operator | cases | run | passed | failed | known failures | skipped |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for op in ops:
        rs = [r for r in results if r.op == op]
        c = summary_counts(rs)
        run = len(rs) - c[SKIPPED]
        rows.append(f"| {op} | {len(rs)} | {run} | {c[PASSED]} | {c[FAILED]} | {c[KNOWN]} | {c[SKIPPED]} |")
    c = summary_counts(results)
    rows.append(f"| **total** | {len(results)} | {len(results) - c[SKIPPED]} | {c[PASSED]} | {c[FAILED]} "
                f"| {c[KNOWN]} | {c[SKIPPED]} |")
    return rows


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def render_table(results: list[Result], source: Source) -> str:
    ours = [r for r in results if r.op in segrt_ops()]
    others = [r for r in results if r.op not in segrt_ops()]
    lines = [
        "# ONNX backend node tests",
        "",
        f"Generated from the {source.description} by `tests/onnx_node/run_node_tests.py`; "
        f"regenerate with `{REGENERATE}`.",
        "",
        "Each case is the operator's node test (`onnx/backend/test/data/node/<case>`) run with "
        "`segrt run` and compared with the expected outputs. Cases stamped with an opset above "
        f"{OPSET_MAX} run at opset {OPSET_MAX} when the operator has a schema there and the "
        "checker accepts the model at it. Known failures are listed in "
        "`tests/onnx_node/known_failures.txt`.",
        "",
        f"Summary: {len(results)} cases, {summary_line(results)}.",
        "",
        "## segrt's operators",
        "",
        *_op_rows(ours, sorted(segrt_ops())),
        "",
        "## Function expansions of other operators",
        "",
        "The `_expanded` cases of operators segrt lacks whose function body uses only segrt's operators.",
        "",
        *_op_rows(others, sorted({r.op for r in others})),
        "",
        "## Known failures",
        "",
    ]
    known = [r for r in results if r.status == KNOWN]
    lines += [f"- `{r.name}` ({r.op}): {r.message}" for r in known] or ["None."]
    elsewhere = sorted(set(read_known_failures()) - {r.name for r in results})
    if elsewhere:
        lines += ["", "Listed in `known_failures.txt` but not among these cases (they come with other "
                      "onnx versions' data): " + ", ".join(f"`{n}`" for n in elsewhere) + "."]
    failed = [r for r in results if r.status == FAILED]
    if failed:
        lines += ["", "## Failures", ""]
        lines += [f"- `{r.name}` ({r.op}): {r.message}" for r in failed]
    lines += ["", "## Skipped cases", "", "| case | operator | reason |", "|---|---|---|"]
    lines += [f"| `{r.name}` | {r.op} | {_escape(r.message)} |" for r in results if r.status == SKIPPED]
    return "\n".join(lines) + "\n"


def table_source_version(text: str) -> str | None:
    """The onnx version a rendered table says its data came from."""
    m = re.search(r"shipped with onnx (\S+)", text)
    return m.group(1) if m else None


# --------------------------------------------------------------------------
# CLI

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--segrt", default=os.environ.get("SEGRT", str(REPO / "build" / "segrt")))
    ap.add_argument("--table", help="write the markdown table here")
    ap.add_argument("--data", help="node test data directory (default: the onnx package's, or generated)")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("-k", dest="pattern", help="only cases whose name matches this regular expression")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case's result")
    ap.add_argument("--segrt-args", default="", help="more `segrt run` arguments for every case, e.g. "
                    "'--disable-kernels composite-ops' (the table is not written then)")
    args = ap.parse_args(argv)

    source = find_source(args.data)
    if source.skip_reason:
        # Nothing ran: say so, and never count it as passed.
        print(f"skipped: {source.skip_reason}")
        print(summary_line([]))
        return 0
    cases = load_cases(source)
    if args.pattern:
        cases = [c for c in cases if re.search(args.pattern, c.name)]
    extra = tuple(shlex.split(args.segrt_args))
    results = run_cases(cases, args.segrt, jobs=args.jobs, extra=extra)
    for r in results:
        if args.verbose or r.status == FAILED:
            print(f"{r.status.upper():8} {r.name}: {r.message}" if r.message else f"{r.status.upper():8} {r.name}")
    if args.table:
        if args.pattern or extra:
            print("not writing the table for a subset of the cases or other options", file=sys.stderr)
        else:
            pathlib.Path(args.table).write_text(render_table(results, source))
    print(summary_line(results))
    return 1 if any(r.status == FAILED for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
