"""Random ONNX graphs for the differential tests (test_diff_*.py): a small
graph builder, one generator per operator family, and the runner that
executes a case in segrt and in an oracle and compares the outputs.

Every case is a pure function of (family, seed): a generator receives
numpy's default_rng(seed) and draws shapes, attributes and data from it
alone, so a failing id such as `conv-70764007` can be rerun with

    SEGRT_DIFF_SEED=70764007 pytest test_diff_ops.py

Seeds are family_base(family) + i, so the seed alone names its family.
SEGRT_DIFF_SEED also takes `family:seed` (any seed, to explore) and a
comma-separated list; SEGRT_DIFF_SCALE multiplies every family's count.

segrt runs each case twice: with the inputs fed (the engine's CPU plan)
and with them folded in as initializers (constant folding, that is the
reference backend). The oracle is onnxruntime's CPU provider, except where
it has no kernel or departs from the ONNX spec: then onnx.reference, or
onnxruntime on an equivalent model (explicit pads for auto_pad), or numpy
following the spec; the case says which and why, and so do failures.
"""
from __future__ import annotations

import dataclasses
import os
import zlib
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from conftest import SANITIZED, run_segrt
from onnx_util import ort_run, rel_l2

# ---------------------------------------------------------------------------
# dtypes

NP_OF = {
    TP.FLOAT: np.float32, TP.DOUBLE: np.float64, TP.FLOAT16: np.float16,
    TP.INT64: np.int64, TP.INT32: np.int32, TP.INT16: np.int16, TP.UINT16: np.uint16,
    TP.INT8: np.int8, TP.UINT8: np.uint8, TP.BOOL: np.bool_,
}
ELEM_OF = {np.dtype(v): k for k, v in NP_OF.items()}
FLOATS = (np.float32, np.float64, np.float16)
INTS = (np.int64, np.int32, np.int16, np.uint16, np.int8, np.uint8)
ALL_DTYPES = (np.float32, np.float64, np.float16, np.int64, np.int32, np.int16, np.uint16,
              np.int8, np.uint8, np.bool_)

# ---------------------------------------------------------------------------
# cases and families


@dataclasses.dataclass
class Case:
    """One generated model with its inputs and how to judge the result."""
    model: onnx.ModelProto
    feeds: dict
    # What computes the expected outputs: "ort" (onnxruntime), or
    # "reference" (onnx.reference) where onnxruntime has no kernel; run on
    # alt_model where given, a model the spec says computes the same
    # (explicit pads for auto_pad, say) for a form that the oracle lacks or
    # gets wrong. `why` says which and why.
    oracle: str = "ort"
    why: str = ""
    alt_model: onnx.ModelProto | None = None
    # oracle "numpy": the expected outputs, computed here from the spec.
    expected: list | None = None
    # False: relative L2 only (whole networks, where the elementwise bound
    # means little after dozens of layers).
    elementwise: bool = True
    # segrt run --threads, when set (the CPU plan may split work).
    threads: int | None = None
    l2: float | None = None      # relative L2 bound; None: by dtype
    rtol: float | None = None    # elementwise; None: by dtype
    atol: float | None = None    # elementwise, times max(1, rms of the expected)


@dataclasses.dataclass
class Family:
    name: str
    gen: Callable[[np.random.Generator], Case]
    count: int


FAMILIES: dict[str, Family] = {}


def family(name, count):
    """Registers a generator of `count` cases per run."""
    def deco(fn):
        assert name not in FAMILIES, name
        FAMILIES[name] = Family(name, fn, count)
        return fn
    return deco


def family_base(name):
    """First seed of a family: stable across runs, edits and reorderings."""
    return (zlib.crc32(name.encode()) % 90000 + 10000) * 1000


def family_of_seed(seed):
    for f in FAMILIES.values():
        if family_base(f.name) == seed - seed % 1000:
            return f.name
    return None


def register_fixed(name, count):
    """A family whose cases are not generated graphs (the test models):
    only its seed range, so that SEGRT_DIFF_SEED finds it."""
    if name not in FAMILIES:
        FAMILIES[name] = Family(name, None, count)


def case_ids(names):
    """The (family, seed) pairs to run for the given families, honouring
    SEGRT_DIFF_SEED, SEGRT_DIFF_SCALE and the sanitizer build."""
    bases = [family_base(n) for n in FAMILIES]
    assert len(set(bases)) == len(bases), "two families share a seed range; rename one"
    only = os.environ.get("SEGRT_DIFF_SEED", "").strip()
    if only:
        picked = []
        for tok in only.split(","):
            tok = tok.strip()
            if ":" in tok:
                fam, s = tok.split(":", 1)
                seed = int(s)
            else:
                seed = int(tok)
                fam = family_of_seed(seed)
            if fam in names:
                picked.append((fam, seed))
        return picked
    # Sanitized builds run about a quarter: everything there is slower.
    scale = float(os.environ.get("SEGRT_DIFF_SCALE", "1")) * (0.25 if SANITIZED else 1.0)
    out = []
    for n in names:
        count = max(1, round(FAMILIES[n].count * scale))
        out += [(n, family_base(n) + i) for i in range(count)]
    return out


def make_case(fam, seed):
    return FAMILIES[fam].gen(np.random.default_rng(seed))


# ---------------------------------------------------------------------------
# the graph builder


class Graph:
    """Collects nodes, inputs (with their data), initializers and outputs,
    and builds a checked model."""

    def __init__(self, rng, opset=17):
        self.rng = rng
        self.opset = opset
        self.nodes, self.inputs, self.inits, self.outputs = [], [], [], []
        self.feeds = {}
        self.n = 0
        # Whether outputs declare their inferred dims: None is at random.
        self.declare_dims = None
        # Output types for what onnx's shape inference leaves out (it does
        # not infer through function ops such as GroupNormalization).
        self.known_types = {}

    def fresh(self, prefix):
        self.n += 1
        return f"{prefix}{self.n}"

    def input(self, arr, prefix="x", sym=None):
        """A graph input fed with arr. sym: a dim -> name map of symbolic
        dims to declare (segrt binds them from the data)."""
        arr = np.asarray(arr)
        name = self.fresh(prefix)
        dims = [(sym or {}).get(i, d) for i, d in enumerate(arr.shape)]
        self.inputs.append(helper.make_tensor_value_info(name, ELEM_OF[arr.dtype], dims))
        self.feeds[name] = arr
        return name

    def const(self, arr, prefix="c", node=None):
        """A constant: an initializer, or (a quarter of the time, or when
        node is True) a Constant node, the two ways exporters write them."""
        arr = np.asarray(arr)
        name = self.fresh(prefix)
        t = numpy_helper.from_array(arr, name)
        if node is None:
            node = self.rng.random() < 0.25
        if node:
            self.nodes.append(helper.make_node("Constant", [], [name], value=t))
        else:
            self.inits.append(t)
        return name

    def param(self, arr, prefix="w", p_input=0.2):
        """Weights and similar: usually constant, sometimes a graph input."""
        if self.rng.random() < p_input:
            return self.input(arr, prefix)
        return self.const(arr, prefix)

    def op(self, op_type, inputs, n_out=1, **attrs):
        attrs = {k: _attr(v) for k, v in attrs.items() if v is not None}
        outs = [self.fresh(op_type.lower()) for _ in range(n_out)]
        node = helper.make_node(op_type, list(inputs), outs,
                                **{k: v for k, v in attrs.items() if v != []})
        # An empty list (Transpose's perm of a scalar) has no type to infer.
        node.attribute.extend(helper.make_attribute(k, [], attr_type=onnx.AttributeProto.INTS)
                              for k, v in attrs.items() if v == [])
        self.nodes.append(node)
        return outs[0] if n_out == 1 else outs

    def output(self, *names):
        self.outputs += names

    def build(self, shapes=None):
        """The model, checked with onnx's full check (strict shape
        inference). Outputs get their inferred dtype and rank and, at random
        (or as shapes says), their inferred dims: segrt checks those."""
        opsets = [helper.make_opsetid("", self.opset)]
        ir = max(7, helper.find_min_ir_version_for(opsets))
        probe = helper.make_model(helper.make_graph(self.nodes, "g", self.inputs, [],
                                                    initializer=self.inits),
                                  opset_imports=opsets)
        probe.ir_version = ir
        inferred = onnx.shape_inference.infer_shapes(probe, check_type=True, strict_mode=True)
        known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.input)}
        for name, (dtype, shape) in self.known_types.items():
            if name not in known or not known[name].type.tensor_type.HasField("shape"):
                known[name] = helper.make_tensor_value_info(name, ELEM_OF[np.dtype(dtype)], shape)
        outs = []
        for name in self.outputs:
            vi = onnx.ValueInfoProto()
            vi.CopyFrom(known[name])
            keep = shapes if shapes is not None else self.declare_dims
            if keep is None:
                keep = self.rng.random() < 0.5
            if not keep:
                # The checker wants a shape; dims without value or name
                # declare the rank only.
                for d in vi.type.tensor_type.shape.dim:
                    d.Clear()
            outs.append(vi)
        graph = helper.make_graph(self.nodes, "g", self.inputs, outs, initializer=self.inits)
        model = helper.make_model(graph, opset_imports=opsets, producer_name="segrt-diff")
        model.ir_version = ir
        onnx.checker.check_model(model, full_check=True)
        return model

    def case(self, **kw):
        return Case(self.build(kw.pop("shapes", None)), self.feeds, **kw)

    def alt(self, why, oracle="ort", **attrs):
        """The case, with the last node's attributes replaced by attrs (None
        removes one) in the oracle's copy: how a case whose form the
        oracle lacks is checked against the equivalent form it has."""
        model = self.build()
        alt = onnx.ModelProto()
        alt.CopyFrom(model)
        node = alt.graph.node[-1]
        kept = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        for k, v in attrs.items():
            kept.pop(k, None)
            if v is not None:
                kept[k] = _attr(v)
        node.ClearField("attribute")
        node.attribute.extend(helper.make_attribute(k, v) for k, v in kept.items())
        for o in alt.graph.output:  # as inferred for the original form
            for d in o.type.tensor_type.shape.dim:
                d.Clear()
        onnx.checker.check_model(alt, full_check=True)
        return Case(model, self.feeds, oracle=oracle, why=why, alt_model=alt)


def upcast_f16(model):
    """model computed in float32: float16 inputs cast up on entry, float16
    constants stored as float32, outputs cast back to float16. The oracle
    for float16 cases onnxruntime has no float16 kernel for; the spec does
    not fix a float16 op's internal precision, and segrt's reference
    kernels widen to float32 too."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    F16, F32 = TP.FLOAT16, TP.FLOAT
    rename = {}
    head = []
    for i in g.input:
        if i.type.tensor_type.elem_type == F16:
            rename[i.name] = i.name + "_f32"
            head.append(helper.make_node("Cast", [i.name], [rename[i.name]], to=F32))
    for t in g.initializer:
        if t.data_type == F16:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
    tail = []
    for o in g.output:
        if o.type.tensor_type.elem_type == F16:
            rename[o.name] = o.name + "_f32"
            tail.append(helper.make_node("Cast", [rename[o.name]], [o.name], to=F16))
    for n in g.node:
        n.input[:] = [rename.get(v, v) for v in n.input]
        n.output[:] = [rename.get(v, v) for v in n.output]
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == F16:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float32)))
            if a.name == "to" and a.i == F16:
                a.i = F32
    nodes = head + list(g.node) + tail
    del g.node[:]
    g.node.extend(nodes)
    for o in g.output:
        for d in o.type.tensor_type.shape.dim:
            d.Clear()
    onnx.checker.check_model(m, full_check=True)
    return m


def _attr(v):
    """Plain Python values for helper.make_attribute."""
    if isinstance(v, (list, tuple)):
        return [_attr(x) for x in v]
    if isinstance(v, (np.integer, bool)):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


# ---------------------------------------------------------------------------
# random pieces


def pick(rng, seq, p=None):
    """One element of seq (rng.choice would turn tuples into arrays)."""
    return seq[int(rng.choice(len(seq), p=p))]


def dims(rng, rank, lo=1, hi=5, max_numel=720, empty=0.0):
    """rank dims in [lo, hi], shrunk until the product fits max_numel; with
    probability `empty`, one of them 0 (an empty tensor)."""
    d = [int(x) for x in rng.integers(lo, hi + 1, size=rank)]
    while int(np.prod(d, dtype=np.int64)) > max_numel:
        i = int(np.argmax(d))
        d[i] = max(lo, d[i] // 2) if lo > 0 else d[i] // 2
    if empty and rank and rng.random() < empty:
        d[int(rng.integers(0, rank))] = 0
    return d


def values(rng, shape, dtype, lo=None, hi=None, scale=1.0):
    """Random data: normal floats (or uniform in [lo, hi)), integers in a
    small range that no op here overflows, booleans half true."""
    dtype = np.dtype(dtype)
    shape = tuple(shape)
    # np.asarray: numpy gives scalars, not 0-d arrays, for shape ().
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.kind == "f":
        if lo is not None:
            return np.asarray(rng.uniform(lo, hi, shape)).astype(dtype)
        return np.asarray(rng.standard_normal(shape) * scale).astype(dtype)
    info = np.iinfo(dtype)
    lo = max(info.min, -20) if lo is None else lo
    hi = min(info.max, 20) if hi is None else hi
    return np.asarray(rng.integers(lo, hi + 1, shape)).astype(dtype)


def bcast_shapes(rng, n, max_rank=5, max_numel=720, empty=0.0):
    """n shapes that broadcast together (numpy rules): suffixes of one
    output shape, with random dims set to 1 and random ranks dropped;
    now and then up to rank 7, or empty."""
    if max_rank >= 5 and rng.random() < 0.08:
        out_rank = int(rng.integers(6, 8))
        out = dims(rng, out_rank, 1, 3, max_numel)
    else:
        out_rank = int(rng.integers(0, max_rank + 1))
        out = dims(rng, out_rank, 1, 5, max_numel, empty=empty)
    shapes = []
    for _ in range(n):
        r = out_rank if rng.random() < 0.5 else int(rng.integers(0, out_rank + 1))
        s = out[out_rank - r:]
        shapes.append([1 if rng.random() < 0.3 else d for d in s])
    return shapes


def axis_form(rng, axis, rank):
    """axis or its negative equivalent."""
    return axis - rank if rng.random() < 0.4 else axis


def spatial_rank(rng):
    return int(pick(rng, [1, 2, 2, 3]))


# ---------------------------------------------------------------------------
# running and comparing


def segrt_outputs(model_path, feeds, out_names, tmp_path, threads=None, extra=()):
    """Runs segrt on the saved model (extra: more `segrt run` arguments);
    (CompletedProcess, outputs or None)."""
    args = ["run", model_path] + (["--threads", threads] if threads else []) + list(extra)
    for name, arr in feeds.items():
        p = tmp_path / f"in_{name}.npy"
        np.save(p, arr)
        args += ["--input", f"{name}={p}"]
    paths = []
    for i, name in enumerate(out_names):
        p = tmp_path / f"out_{i}.npy"
        args += ["--output", f"{name}={p}"]
        paths.append(p)
    proc = run_segrt(*args, timeout=300)
    if proc.returncode != 0:
        return proc, None
    return proc, [np.load(p) for p in paths]


def reference_outputs(model, feeds):
    from onnx.reference import ReferenceEvaluator
    with np.errstate(all="ignore"):  # NaN and infinity cases warn
        return [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feeds)]


def tolerances(case, dtype):
    if dtype == np.float16:
        l2, rtol, atol = 2e-3, 4e-3, 2e-3
    elif dtype == np.float64:
        l2, rtol, atol = 1e-10, 1e-9, 1e-10
    else:
        l2, rtol, atol = 1e-5, 1e-4, 1e-5
    return (case.l2 if case.l2 is not None else l2,
            case.rtol if case.rtol is not None else rtol,
            case.atol if case.atol is not None else atol)


def compare(got, want, case):
    """None when got matches want, else what differs. Integers and bools
    exactly; floats: same NaN positions, same infinities, then relative
    L2 and an elementwise rtol/atol on the finite rest."""
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if got.dtype.kind != "f":
        bad = np.flatnonzero(got.ravel() != want.ravel())
        if bad.size:
            i = bad[0]
            return (f"{bad.size} of {got.size} elements differ; first at flat index {i}: "
                    f"got {got.ravel()[i]}, expected {want.ravel()[i]}")
        return None
    g = got.astype(np.float64).ravel()
    w = want.astype(np.float64).ravel()
    for what, fn in (("NaN", np.isnan), ("+Inf", np.isposinf), ("-Inf", np.isneginf)):
        diff = np.flatnonzero(fn(g) != fn(w))
        if diff.size:
            i = diff[0]
            return (f"{what} positions differ at {diff.size} elements; first at flat index {i}: "
                    f"got {g[i]}, expected {w[i]}")
    fin = np.isfinite(w)
    g, w = g[fin], w[fin]
    if g.size == 0:
        return None
    l2, rtol, atol = tolerances(case, got.dtype)
    err = rel_l2(g, w)
    atol *= max(1.0, float(np.sqrt(np.mean(w * w))))
    close = np.abs(g - w) <= atol + rtol * np.abs(w)
    if not case.elementwise:
        close[:] = True
    if err > l2 or not close.all():
        i = int(np.argmin(close)) if not close.all() else int(np.argmax(np.abs(g - w)))
        return (f"relative L2 {err:.3g} (bound {l2:g}); {int((~close).sum())} of {g.size} finite "
                f"elements outside rtol {rtol:g} atol {atol:.3g}; worst-first at finite index {i}: "
                f"got {g[i]!r}, expected {w[i]!r}")
    return None


def describe(model, feeds):
    """One line per node and input, for failure messages."""
    if len(model.graph.node) > 20:
        ops = {}
        for n in model.graph.node:
            ops[n.op_type] = ops.get(n.op_type, 0) + 1
        return "\n".join([f"  input {k}: {v.dtype} {list(v.shape)}" for k, v in feeds.items()]
                         + [f"  {len(model.graph.node)} nodes: "
                            + ", ".join(f"{k} {v}" for k, v in ops.items())])
    lines = []
    for name, arr in feeds.items():
        lines.append(f"  input {name}: {arr.dtype} {list(arr.shape)}")
    for t in model.graph.initializer:
        a = numpy_helper.to_array(t)
        v = f" = {a.tolist()}" if a.size <= 12 else ""
        lines.append(f"  const {t.name}: {a.dtype} {list(a.shape)}{v}")
    for n in model.graph.node:
        attrs = []
        for a in n.attribute:
            v = helper.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode()
            if isinstance(v, onnx.TensorProto):
                arr = numpy_helper.to_array(v)
                v = arr.tolist() if arr.size <= 12 else f"<{arr.dtype} {list(arr.shape)}>"
            attrs.append(f"{a.name}={v}")
        lines.append(f"  {n.op_type}({', '.join(n.input)}) -> {', '.join(n.output)}"
                     + (f"  [{', '.join(attrs)}]" if attrs else ""))
    return "\n".join(lines)


def check_case(case, tmp_path, label, rerun, extra=()):
    """Runs the case in segrt (extra: more `segrt run` arguments) and in
    the oracle, asserts they agree."""
    path = tmp_path / "model.onnx"
    onnx.save(case.model, str(path))
    out_names = [o.name for o in case.model.graph.output]
    threads = f", --threads {case.threads}" if case.threads else ""
    head = (f"{label} (opset {case.model.opset_import[0].version}{threads}); rerun with {rerun}\n"
            f"model and inputs: {tmp_path}\n{describe(case.model, case.feeds)}")
    oracle_model = case.model
    if case.alt_model is not None:
        oracle_model = case.alt_model
        path = tmp_path / "oracle.onnx"
        onnx.save(case.alt_model, str(path))
    if case.oracle == "ort":
        try:
            want = ort_run(path, case.feeds)
        except Exception as e:  # noqa: BLE001 - any other rejection is a generator bug
            # onnxruntime builds differ in the dtypes they implement (1.30
            # has no int8 Where, 1.31 does): there the spec's reference
            # implementation is the oracle.
            if "NOT_IMPLEMENTED" not in str(e):
                raise AssertionError(f"{head}\nonnxruntime rejects the generated case "
                                     f"(a generator bug): {e}") from None
            case.oracle = "reference"
            want = reference_outputs(oracle_model, case.feeds)
    elif case.oracle == "numpy":
        want = case.expected
    else:
        want = reference_outputs(oracle_model, case.feeds)
    # Twice: with the inputs fed, as users run models (the engine's CPU
    # plan), and with them baked in as initializers, which constant folding
    # evaluates with the reference backend, the oracle of the other
    # backends.
    folded = tmp_path / "folded.onnx"
    onnx.save(folded_model(case.model, case.feeds), str(folded))
    oracle = {"ort": "onnxruntime", "reference": "onnx.reference",
              "numpy": "numpy, from the spec"}[case.oracle]
    if case.alt_model is not None:
        oracle += " on the equivalent oracle.onnx"
    if case.why:
        oracle += f" ({case.why})"
    failures = []
    for mode, model_path, feeds in (("inputs fed", tmp_path / "model.onnx", case.feeds),
                                    ("inputs folded in (folded.onnx)", folded, {})):
        sub = tmp_path / ("run" if feeds else "fold")
        sub.mkdir(exist_ok=True)
        proc, got = segrt_outputs(model_path, feeds, out_names, sub, case.threads, extra)
        if got is None:
            failures.append(f"segrt, {mode}: exit {proc.returncode}: {proc.stderr.strip()}")
            continue
        problems = []
        for name, g, w in zip(out_names, got, want):
            msg = compare(g, np.asarray(w), case)
            if msg:
                problems.append(f"output {name}: {msg}")
        if problems:
            failures.append(f"segrt, {mode}, disagrees with {oracle}:\n  " + "\n  ".join(problems)
                            + third_opinion(case, got, want))
    if failures:
        raise AssertionError(head + "\n" + "\n".join(failures))


def folded_model(model, feeds):
    """model with its inputs turned into initializers holding feeds."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.initializer.extend(numpy_helper.from_array(np.asarray(a), n) for n, a in feeds.items())
    keep = [i for i in m.graph.input if i.name not in feeds]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    return m


def third_opinion(case, got, want):
    """Which side onnx.reference agrees with, to speed up triage (not for
    whole networks: the Python reference would take minutes)."""
    if case.oracle != "ort" or len(case.model.graph.node) > 40:
        return ""
    try:
        ref = reference_outputs(case.alt_model or case.model, case.feeds)
    except Exception as e:  # noqa: BLE001 - only advice
        return f"\nonnx.reference could not run it: {str(e).splitlines()[0][:200]}"
    verdict = []
    for g, w, r in zip(got, want, ref):
        r = np.asarray(r).astype(np.asarray(w).dtype, copy=False) if r.shape == np.shape(w) else r
        vs_segrt = compare(g, r, case) if r.shape == g.shape else "shape"
        vs_ort = compare(np.asarray(w), r, case) if r.shape == np.shape(w) else "shape"
        verdict.append(f"segrt {'==' if vs_segrt is None else '!='} ref, "
                       f"onnxruntime {'==' if vs_ort is None else '!='} ref")
    return "\nonnx.reference: " + "; ".join(verdict)


# ---------------------------------------------------------------------------
# elementwise unary

# op: (data range, dtypes onnxruntime's CPU provider has a kernel for)
F3 = (np.float32, np.float32, np.float32, np.float64, np.float16)
F2 = (np.float32, np.float32, np.float32, np.float16)
UNARY = {
    "Relu": ("normal", F3 + (np.int32, np.int8)),
    "Sigmoid": ("normal", F3),
    "Tanh": ("normal", F3),
    "Sqrt": ("positive", F3),
    "Exp": ("normal", F3),
    "Log": ("positive", F3),
    "Neg": ("normal", F3 + (np.int64, np.int32, np.int16, np.int8)),
    "Abs": ("normal", F3 + INTS),
    "Reciprocal": ("nonzero", F3),
    "Floor": ("wide", F3),
    "Ceil": ("wide", F3),
    "Erf": ("normal", F2),
    "Softplus": ("wide", F2),
    "LeakyRelu": ("normal", F2),
    "Elu": ("normal", F2),
    "Selu": ("normal", F2),
    "HardSigmoid": ("wide", F2),
    "HardSwish": ("wide", F2),
    "Gelu": ("normal", F2),
    "Clip": ("normal", F3 + (np.int64, np.int32, np.int8, np.uint8)),
    "Not": ("bool", (np.bool_,)),
    "Sin": ("wide", (np.float32, np.float32, np.float64)),
    "Cos": ("wide", (np.float32, np.float32, np.float64)),
    "Sign": ("normal", (np.float32, np.float32, np.float64, np.int64, np.int32, np.int8)),
    "Round": ("halves", (np.float32, np.float32, np.float64, np.float16)),
    "Mish": ("wide", (np.float32, np.float32, np.float64)),
    "Softsign": ("wide", (np.float32, np.float32, np.float64)),
}


def unary_data(rng, shape, dtype, domain):
    """Inputs where the op is well conditioned: logs and roots of values
    away from 0, reciprocals of values away from 0."""
    if np.dtype(dtype).kind != "f":
        return values(rng, shape, dtype)
    if domain == "halves":  # Round: exact halves (to even) among the others
        v = values(rng, shape, np.float64, scale=4.0)
        return np.where(rng.random(shape) < 0.4, np.round(v * 2) / 2, v).astype(dtype)
    if domain == "positive":
        return values(rng, shape, dtype, 0.05, 8.0)
    if domain == "nonzero":
        v = rng.uniform(0.1, 5.0, shape) * np.where(rng.random(shape) < 0.5, -1, 1)
        return v.astype(dtype)
    if domain == "wide":
        return values(rng, shape, dtype, scale=4.0)
    return values(rng, shape, dtype, scale=2.0)


def unary_attrs(rng, op):
    """Random attributes, each left at its default part of the time."""
    r = lambda: rng.random() < 0.6  # noqa: E731
    u = lambda a, b: float(np.float32(rng.uniform(a, b)))  # noqa: E731
    if op == "LeakyRelu":
        return {"alpha": u(0.001, 0.5) if r() else None}
    if op == "Elu":
        return {"alpha": u(0.1, 2.0) if r() else None}
    if op == "Selu":
        return {"alpha": u(1.0, 2.0) if r() else None, "gamma": u(0.5, 1.5) if r() else None}
    if op == "HardSigmoid":
        return {"alpha": u(0.05, 0.5) if r() else None, "beta": u(0.2, 0.8) if r() else None}
    if op == "Gelu":
        return {"approximate": pick(rng, ["none", "tanh"]) if r() else None}
    return {}


@family("unary", 70)
def gen_unary(rng):
    op = pick(rng, list(UNARY))
    domain, dtypes = UNARY[op]
    dtype = pick(rng, dtypes)
    opset = int(pick(rng, [13, 17, 17, 18, 21]))
    # First opsets: Gelu 20, HardSwish 14, integer Relu 14, Mish 18.
    opset = max(opset, {"Gelu": 20, "HardSwish": 14, "Mish": 18}.get(op, 13))
    if op == "Relu" and np.dtype(dtype).kind == "i":
        opset = max(opset, 14)
    g = Graph(rng, opset)
    shape = dims(rng, int(rng.integers(0, 7)), empty=0.05)
    x = g.input(unary_data(rng, shape, dtype, domain))
    if op == "Clip":
        # Optional min and max inputs (scalars), either left out with "".
        ins = [x]
        lo, hi = sorted(values(rng, [2], dtype, scale=1.0).tolist())
        if rng.random() < 0.1:
            lo, hi = hi, lo  # min > max: every output is max
        for v in (lo, hi):
            ins.append(g.const(np.array(v, dtype)) if rng.random() < 0.7 else "")
        while ins[-1] == "":
            ins.pop()
        y = g.op("Clip", ins)
    else:
        y = g.op(op, [x], **unary_attrs(rng, op))
    g.output(y)
    return g.case()


# ---------------------------------------------------------------------------
# elementwise binary, variadic, PRelu and Where, with numpy broadcasting

ARITH_INTS = (np.int64, np.int32, np.int16, np.uint16, np.int8, np.uint8)
BINARY = {
    "Add": (F3 + ARITH_INTS),
    "Sub": (F3 + ARITH_INTS),
    "Mul": (F3 + ARITH_INTS),
    "Div": (F3 + ARITH_INTS),
    "Pow": (np.float32, np.float32, np.float64, np.int64, np.int32),
    "Equal": (np.float32, np.int64, np.int32, np.int8, np.uint8, np.bool_, np.float64),
    "Less": (np.float32, np.int64, np.int32, np.int16, np.uint16, np.float64, np.float16),
    "Greater": (np.float32, np.int64, np.int32, np.int16, np.uint8, np.float64, np.float16),
    "And": (np.bool_,),
    "Or": (np.bool_,),
    "Xor": (np.bool_,),
    "LessOrEqual": (np.float32, np.int64, np.int32, np.float64),
    "GreaterOrEqual": (np.float32, np.int64, np.int32, np.float64),
    "Mod": (np.float32, np.float64, np.int64, np.int32, np.int16, np.int8, np.uint8),
    "BitShift": (np.uint8, np.uint16),
}


def small_ints(rng, shape, dtype, lo, hi):
    return rng.integers(lo, hi + 1, tuple(shape)).astype(dtype)


def binary_operands(rng, op, dtype, sa, sb):
    """Operand data for which every dtype stays in range and the result
    is well conditioned."""
    kind = np.dtype(dtype).kind
    if op == "BitShift":  # shifts past the width give 0
        bits = np.dtype(dtype).itemsize * 8
        return small_ints(rng, sa, dtype, 0, 255), small_ints(rng, sb, dtype, 0, bits + 1)
    if op == "Mod":  # divisors away from 0, both signs
        if kind in "iu":
            lo = 0 if kind == "u" else -20
            a = small_ints(rng, sa, dtype, lo, 20)
            b = small_ints(rng, sb, dtype, 1, 7)
            if kind == "i":
                b = (b * np.where(rng.random(sb) < 0.5, -1, 1)).astype(dtype)
            return a, b
        b = rng.uniform(0.3, 3.0, sb) * np.where(rng.random(sb) < 0.5, -1, 1)
        return values(rng, sa, dtype, scale=5.0), b.astype(dtype)
    if op in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual") and kind == "f":
        # Few distinct values, so that equal pairs occur.
        return (small_ints(rng, sa, np.int8, -3, 3).astype(dtype) / 2,
                small_ints(rng, sb, np.int8, -3, 3).astype(dtype) / 2)
    if kind in "iu":
        lo = 0 if kind == "u" else -10
        a = small_ints(rng, sa, dtype, lo, 10)
        b = small_ints(rng, sb, dtype, lo, 10)
        if op == "Sub" and kind == "u":
            a = a + np.asarray(10, dtype)  # no wrap below zero
        if op == "Div":
            b = np.where(b == 0, np.asarray(3, dtype), b).astype(dtype)
        if op == "Pow":
            a = small_ints(rng, sa, dtype, -4, 4)
            b = small_ints(rng, sb, dtype, 0, 5)
        return a, b
    if op == "Pow":
        if rng.random() < 0.5:
            return values(rng, sa, dtype, 0.2, 3.0), values(rng, sb, dtype, scale=1.5)
        # Negative bases with integral exponents are exact in the spec.
        return (values(rng, sa, dtype, scale=2.0),
                small_ints(rng, sb, np.int8, -3, 4).astype(dtype))
    if op == "Div":
        b = rng.uniform(0.2, 3.0, sb) * np.where(rng.random(sb) < 0.5, -1, 1)
        return values(rng, sa, dtype), b.astype(dtype)
    return values(rng, sa, dtype), values(rng, sb, dtype)


@family("binary", 90)
def gen_binary(rng):
    op = pick(rng, list(BINARY))
    dtype = pick(rng, BINARY[op])
    opset = int(pick(rng, [13, 14, 17, 18, 21]))
    if op in ("Add", "Sub", "Mul", "Div") and np.dtype(dtype).itemsize < 4:
        opset = max(opset, 14)  # 8- and 16-bit integers since opset 14
    g = Graph(rng, opset)
    sa, sb = bcast_shapes(rng, 2, empty=0.05)
    a, b = binary_operands(rng, op, dtype, sa, sb)
    if op == "Pow" and np.dtype(dtype).kind == "f" and rng.random() < 0.3:
        # The exponent may have its own type (opset 12+): an integer.
        b = np.round(b).astype(pick(rng, [np.int64, np.int32]))
    # Either operand may be a constant (a bias, a scale), or both inputs.
    r = rng.random()
    ia = g.const(a, "a") if r < 0.15 else g.input(a, "a")
    ib = g.const(b, "b") if 0.15 <= r < 0.4 else g.input(b, "b")
    attrs = {}
    if op == "Mod":  # floats take fmod=1 only; integers either rule
        attrs["fmod"] = 1 if np.dtype(dtype).kind == "f" else pick(rng, [None, 0, 1])
    if op == "BitShift":
        attrs["direction"] = pick(rng, ["LEFT", "RIGHT"])
    g.output(g.op(op, [ia, ib], **attrs))
    return g.case()


VARIADIC = {
    "Min": (np.float32, np.float32, np.float64, np.float16, np.int64, np.int32, np.int8, np.uint8),
    "Max": (np.float32, np.float32, np.float64, np.float16, np.int64, np.int32, np.int8, np.uint8),
    "Sum": (np.float32, np.float32, np.float64, np.float16),
    "Mean": (np.float32, np.float32, np.float16),
}


@family("variadic", 30)
def gen_variadic(rng):
    op = pick(rng, list(VARIADIC))
    dtype = pick(rng, VARIADIC[op])
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    shapes = bcast_shapes(rng, int(rng.integers(1, 5)))
    g.output(g.op(op, [g.input(values(rng, s, dtype)) for s in shapes]))
    return g.case()


@family("prelu", 20)
def gen_prelu(rng):
    """PRelu's slope broadcasts to X one way: per channel ([C, 1, 1] for
    NCHW), a scalar, a trailing suffix, or X's own shape."""
    dtype = pick(rng, (np.float32, np.float32, np.float16, np.float64, np.int32))
    # Integer slopes since opset 16 (onnxruntime: int32 only).
    g = Graph(rng, int(pick(rng, [16, 17, 21] if dtype == np.int32 else [13, 16, 17, 21])))
    rank = int(rng.integers(1, 6))
    xs = dims(rng, rank)
    form = pick(rng, ["channel", "scalar", "one", "suffix", "full", "ones"])
    if form == "channel" and rank >= 2:
        ss = [xs[1]] + [1] * (rank - 2)
    elif form == "scalar":
        ss = []
    elif form == "one":
        ss = [1]
    elif form == "suffix":
        ss = xs[int(rng.integers(0, rank + 1)):]
    elif form == "ones":
        ss = [1 if rng.random() < 0.5 else d for d in xs]
    else:
        ss = list(xs)
    x = values(rng, xs, dtype, scale=2.0)
    slope = values(rng, ss, dtype, scale=0.5) if np.dtype(dtype).kind == "f" else \
        small_ints(rng, ss, dtype, -3, 3)
    g.output(g.op("PRelu", [g.input(x), g.param(slope, "slope")]))
    if dtype in (np.float64, np.int32):
        return g.case(oracle="reference", why="onnxruntime has no float64 or int32 PRelu")
    return g.case()


@family("where", 20)
def gen_where(rng):
    dtype = pick(rng, ALL_DTYPES)
    g = Graph(rng, int(pick(rng, [13, 16, 17, 21])))
    sc, sx, sy = bcast_shapes(rng, 3)
    c = g.input(values(rng, sc, np.bool_), "cond")
    x = g.input(values(rng, sx, dtype), "x")
    y = g.param(values(rng, sy, dtype), "y", p_input=0.7)
    g.output(g.op("Where", [c, x, y]))
    if dtype in (np.bool_, np.int16, np.uint16):
        return g.case(oracle="reference", why="onnxruntime has no bool, int16 or uint16 Where")
    return g.case()


# ---------------------------------------------------------------------------
# convolutions


def maybe(rng, attr, default, p=0.5):
    """attr, or None (left out) when it equals its default part of the time."""
    return None if list(attr) == list(default) and rng.random() < p else list(attr)


@family("conv", 60)
def gen_conv(rng):
    nsp = spatial_rank(rng)
    group = int(pick(rng, [1, 1, 1, 2, 3, 4]))
    cin, cout = group * int(rng.integers(1, 4)), group * int(rng.integers(1, 4))
    kmax = 3 if nsp == 3 else 5
    k = [int(rng.integers(1, kmax + 1)) for _ in range(nsp)]
    if nsp == 1 and rng.random() < 0.1:
        k = [int(rng.integers(60, 80))]  # wider than the kernels' stack buffers
    s = [int(rng.integers(1, 4)) for _ in range(nsp)]
    d = [int(pick(rng, [1, 1, 2, 3])) for _ in range(nsp)]
    ext = [(ki - 1) * di + 1 for ki, di in zip(k, d)]
    auto_pad = pick(rng, ["NOTSET"] * 5 + ["SAME_UPPER", "SAME_LOWER", "VALID"])
    pads = [int(rng.integers(0, 3)) for _ in range(2 * nsp)] if auto_pad == "NOTSET" else [0] * 2 * nsp
    # Inputs just large enough for a window, up to a few windows more.
    grow = 4 if nsp == 3 else 9
    size = [max(1, e - pads[i] - pads[nsp + i]) + int(rng.integers(0, grow)) for i, e in enumerate(ext)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        size = [int(rng.integers(1, e + grow)) for e in ext]
    n = int(rng.integers(1, 3))
    dtype = pick(rng, [np.float32] * 5 + [np.float64, np.float16])
    g = Graph(rng, int(pick(rng, [13, 17, 17, 21])))
    x = g.input(values(rng, [n, cin] + size, dtype), sym={0: "N"} if rng.random() < 0.3 else None)
    w = g.param(values(rng, [cout, cin // group] + k, dtype, scale=0.5))
    ins = [x, w]
    if rng.random() < 0.6:
        ins.append(g.param(values(rng, [cout], dtype), "b"))
    y = g.op("Conv", ins, group=group if group > 1 or rng.random() < 0.3 else None,
             kernel_shape=k if rng.random() < 0.5 else None,
             strides=maybe(rng, s, [1] * nsp), dilations=maybe(rng, d, [1] * nsp),
             pads=maybe(rng, pads, [0] * 2 * nsp) if auto_pad == "NOTSET" else None,
             auto_pad=None if auto_pad == "NOTSET" and rng.random() < 0.7 else auto_pad)
    g.output(y)
    if dtype == np.float64:
        # onnx.reference gets auto_pad wrong (VALID, SAME with dilations):
        # it gets the spec's explicit pads instead.
        pads = same_pads(size, s, ext, auto_pad) if auto_pad.startswith("SAME") else pads
        return g.alt("onnxruntime has no float64 Conv", oracle="reference", auto_pad=None,
                     pads=pads)
    if auto_pad.startswith("SAME") and max(d) > 1:
        case = g.alt("onnxruntime lacks SAME auto_pad with dilations; oracle has the spec's pads",
                     auto_pad=None, pads=same_pads(size, s, ext, auto_pad))
    else:
        case = g.case()
    return f16_oracle(case) if dtype == np.float16 else case


def f16_oracle(case):
    """A float16 case checked against onnxruntime in float32 (it has no
    float16 kernel for the op), rounded back to float16."""
    case.alt_model = upcast_f16(case.alt_model or case.model)
    case.why = ((case.why + "; ") if case.why else "") + "float16 computed in float32"
    return case


def same_pads(size, strides, ext, auto_pad):
    """The spec's SAME pads (begins then ends): output ceil(in / stride),
    the odd one at the end for SAME_UPPER, at the start for SAME_LOWER."""
    begin, end = [], []
    for n, s, e in zip(size, strides, ext):
        total = max(0, (-(-n // s) - 1) * s + e - n)
        small = total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else total - small)
        end.append(total - begin[-1])
    return begin + end


@family("conv_transpose", 45)
def gen_conv_transpose(rng):
    nsp = spatial_rank(rng)
    group = int(pick(rng, [1, 1, 1, 2, 3]))
    cin, cout = group * int(rng.integers(1, 4)), group * int(rng.integers(1, 4))
    k = [int(rng.integers(1, 4 if nsp == 3 else 5)) for _ in range(nsp)]
    s = [int(rng.integers(1, 4)) for _ in range(nsp)]
    d = [int(pick(rng, [1, 1, 2])) for _ in range(nsp)]
    ext = [(ki - 1) * di + 1 for ki, di in zip(k, d)]
    size = [int(rng.integers(1, 4 if nsp == 3 else 7)) for _ in range(nsp)]
    # output_padding below the stride (the spec allows below the dilation
    # too; onnxruntime does not).
    opad = [int(rng.integers(0, si)) for si in s]
    full = [si * (n - 1) + op + e for si, n, op, e in zip(s, size, opad, ext)]
    mode = pick(rng, ["pads"] * 5 + ["SAME_UPPER", "SAME_LOWER", "VALID", "output_shape"])
    if mode.startswith("SAME") and any(f < n * si for f, n, si in zip(full, size, s)):
        # The spec does not say what a negative total padding means.
        mode = "pads"
    attrs = {"group": group if group > 1 else None, "strides": maybe(rng, s, [1] * nsp),
             "dilations": maybe(rng, d, [1] * nsp),
             "kernel_shape": k if rng.random() < 0.4 else None,
             "output_padding": maybe(rng, opad, [0] * nsp)}
    want = None  # the output size where the spec derives the pads from it
    if mode == "pads":
        pads = [0] * (2 * nsp)
        for i in range(nsp):
            pads[i] = int(rng.integers(0, min(3, full[i])))
            pads[nsp + i] = int(rng.integers(0, min(3, full[i] - pads[i])))
        attrs["pads"] = maybe(rng, pads, [0] * 2 * nsp)
    elif mode == "output_shape":
        # onnx's shape inference gives up on output sizes below the input's.
        lo = [max(n, f - 3) for n, f in zip(size, full)]
        if any(a > f for a, f in zip(lo, full)):
            mode = "pads"
        else:
            want = [int(rng.integers(a, f + 1)) for a, f in zip(lo, full)]
            attrs["output_shape"] = want
    else:
        attrs["auto_pad"] = mode
        if mode != "VALID":
            want = [n * si for n, si in zip(size, s)]
    n = int(rng.integers(1, 3))
    # No float64: onnxruntime has no float64 ConvTranspose and
    # onnx.reference's is wrong for groups and dilations.
    dtype = pick(rng, [np.float32] * 6 + [np.float16])
    g = Graph(rng, int(pick(rng, [13, 17, 17, 21])))
    x = g.input(values(rng, [n, cin] + size, dtype))
    w = g.param(values(rng, [cin, cout // group] + k, dtype, scale=0.5))
    ins = [x, w]
    if rng.random() < 0.6:
        ins.append(g.param(values(rng, [cout], dtype), "b"))
    g.output(g.op("ConvTranspose", ins, **attrs))
    if mode.startswith("SAME") and max(opad) > 0:
        # onnx's shape inference adds output_padding to SAME's
        # input * stride, which the spec, onnxruntime and segrt do not:
        # declare the rank only.
        g.declare_dims = False
    if want is not None and any((f - o) % 2 for f, o in zip(full, want)):
        pads = [transpose_pads(f - o, mode) for f, o in zip(full, want)]
        case = g.alt("onnxruntime splits an odd total padding of ConvTranspose the other way "
                     "round from the spec; the oracle has the spec's explicit pads",
                     auto_pad=None, output_shape=None,
                     pads=[p[0] for p in pads] + [p[1] for p in pads], output_padding=opad)
    else:
        case = g.case()
    return f16_oracle(case) if dtype == np.float16 else case


def transpose_pads(total, auto_pad):
    """ConvTranspose's begin and end pads from a total, as the spec says:
    SAME_UPPER puts the odd one at the end, everything else at the start."""
    if auto_pad == "SAME_UPPER":
        return total // 2, total - total // 2
    return total - total // 2, total // 2


# ---------------------------------------------------------------------------
# pooling


@family("pool", 60)
def gen_pool(rng):
    op = pick(rng, ["MaxPool", "AveragePool"])
    nsp = spatial_rank(rng)
    k = [int(rng.integers(1, 4 if nsp == 3 else 5)) for _ in range(nsp)]
    s = [int(rng.integers(1, 4)) for _ in range(nsp)]
    d = [int(pick(rng, [1, 1, 2])) for _ in range(nsp)]
    ext = [(ki - 1) * di + 1 for ki, di in zip(k, d)]
    auto_pad = pick(rng, ["NOTSET"] * 6 + ["SAME_UPPER", "SAME_LOWER", "VALID"])
    ceil_mode = int(rng.random() < 0.4) if auto_pad == "NOTSET" else 0
    # onnxruntime wants pads below the kernel size.
    pads = [int(rng.integers(0, min(3, ki))) for ki in k + k] if auto_pad == "NOTSET" else [0] * 2 * nsp
    grow = 4 if nsp == 3 else 8
    size = [max(1, e - pads[i] - pads[nsp + i]) + int(rng.integers(0, grow)) for i, e in enumerate(ext)]
    if auto_pad.startswith("SAME"):
        # The spec's SAME pads are (out - 1) * stride + extent - in; keep them
        # >= 0 (onnxruntime refuses negative ones, the spec says nothing).
        size = [int(rng.integers(1, e + grow)) for e in ext]
        size = [n if (-(-n // si) - 1) * si + e >= n else e for n, si, e in zip(size, s, ext)]
    spec_pads = same_pads(size, s, ext, auto_pad) if auto_pad.startswith("SAME") else pads
    if not all(windows_touch_input(*a, ceil_mode) for a in
               zip(size, k, s, d, spec_pads[:nsp], spec_pads[nsp:])):
        # A window of padding alone has no maximum or mean: the spec leaves
        # it open (onnxruntime gives the lowest float, onnx.reference NaN).
        pads = [0] * 2 * nsp
        size = [max(n, e) for n, e in zip(size, ext)]
        auto_pad = "VALID" if auto_pad != "NOTSET" else "NOTSET"
    if op == "MaxPool":
        dtype = pick(rng, [np.float32] * 4 + [np.float64, np.float16, np.int8, np.uint8])
    else:
        dtype = pick(rng, [np.float32] * 4 + [np.float16])  # no float64 in onnxruntime
    # AveragePool has dilations since opset 19.
    use_dil = max(d) > 1 or rng.random() < 0.2
    opset = int(pick(rng, [19, 21])) if op == "AveragePool" and use_dil else int(pick(rng, [13, 17, 18, 19, 21]))
    g = Graph(rng, opset)
    x = g.input(values(rng, [int(rng.integers(1, 3)), int(rng.integers(1, 4))] + size, dtype,
                       scale=2.0))
    attrs = {"kernel_shape": k, "strides": maybe(rng, s, [1] * nsp),
             "dilations": maybe(rng, d, [1] * nsp) if use_dil else None,
             "pads": maybe(rng, pads, [0] * 2 * nsp) if auto_pad == "NOTSET" else None,
             "auto_pad": None if auto_pad == "NOTSET" and rng.random() < 0.7 else auto_pad,
             "ceil_mode": ceil_mode if ceil_mode or rng.random() < 0.3 else None}
    n_out = 1
    if op == "AveragePool":
        attrs["count_include_pad"] = int(rng.integers(0, 2)) if rng.random() < 0.7 else None
    elif rng.random() < 0.3 and np.dtype(dtype).kind == "f":
        n_out = 2  # with Indices
        attrs["storage_order"] = int(rng.integers(0, 2)) if rng.random() < 0.5 else None
    y = g.op(op, [x], n_out=n_out, **attrs)
    g.output(*(y if n_out == 2 else [y]))
    if ceil_mode:
        # onnx's shape inference keeps a last window that starts in the end
        # padding, which the spec (since onnx 1.16), onnxruntime and segrt
        # drop: declare the rank only.
        g.declare_dims = False
    if auto_pad.startswith("SAME") and max(d) > 1:
        return g.alt("onnxruntime sizes SAME pools with dilations wrongly; the oracle has the "
                     "spec's explicit pads", auto_pad=None, pads=same_pads(size, s, ext, auto_pad))
    return g.case()


def windows_touch_input(n, k, s, d, pb, pe, ceil_mode):
    """Whether every window along one dim has a tap inside the input."""
    span = n + pb + pe - (k - 1) * d - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= n + pb:
        out -= 1
    return all(any(0 <= o * s - pb + j * d < n for j in range(k)) for o in range(out))


@family("global_pool", 12)
def gen_global_pool(rng):
    op = pick(rng, ["GlobalAveragePool", "GlobalMaxPool"])
    dtype = pick(rng, [np.float32, np.float32, np.float64, np.float16])
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    data = values(rng, dims(rng, int(rng.integers(3, 6)), 1, 6), dtype, scale=2.0)
    g.output(g.op(op, [g.input(data)]))
    if dtype == np.float64:
        # onnx.reference's GlobalMaxPool drops dims: numpy instead.
        fn = np.max if op == "GlobalMaxPool" else np.mean
        want = fn(data, axis=tuple(range(2, data.ndim)), keepdims=True)
        return g.case(oracle="numpy", why="onnxruntime has no float64 global pools",
                      expected=[want])
    return g.case()


# ---------------------------------------------------------------------------
# normalization


@family("batch_norm", 15)
def gen_batch_norm(rng):
    dtype = pick(rng, [np.float32, np.float32, np.float64, np.float16])
    g = Graph(rng, int(pick(rng, [13, 15, 17, 21])))
    xs = dims(rng, int(rng.integers(2, 6)), 1, 6)
    c = xs[1]
    x = g.input(values(rng, xs, dtype, scale=2.0))
    # The mean and variance are the model's running statistics.
    params = [values(rng, [c], dtype), values(rng, [c], dtype),
              values(rng, [c], dtype), values(rng, [c], dtype, 0.2, 2.0)]
    ins = [x] + [g.param(p, n) for p, n in zip(params, ["scale", "bias", "mean", "var"])]
    eps = float(np.float32(rng.uniform(1e-6, 1e-2))) if rng.random() < 0.5 else None
    g.output(g.op("BatchNormalization", ins, epsilon=eps,
                  momentum=0.9 if rng.random() < 0.2 else None))
    return g.case()


@family("instance_norm", 15)
def gen_instance_norm(rng):
    dtype = pick(rng, [np.float32, np.float32, np.float64, np.float16])
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    xs = dims(rng, int(rng.integers(3, 6)), 1, 7, max_numel=1500)
    # A plane of one element has variance 0: its output, the bias, comes
    # from (x - mean) / sqrt(epsilon), which is ill-conditioned.
    if int(np.prod(xs[2:])) < 4:
        xs[2] += 3
    # An offset far from zero tests that the variance is taken stably.
    offset = float(rng.choice([0.0, 0.0, 5.0, -20.0]))
    x = values(rng, xs, dtype, scale=2.0) + np.asarray(offset, dtype)
    c = xs[1]
    ins = [g.input(x), g.param(values(rng, [c], dtype), "scale"), g.param(values(rng, [c], dtype), "bias")]
    eps = float(np.float32(rng.uniform(1e-6, 1e-2))) if rng.random() < 0.5 else None
    g.output(g.op("InstanceNormalization", ins, epsilon=eps))
    if dtype == np.float64:
        return g.case(oracle="reference", why="onnxruntime has no float64 InstanceNormalization")
    if dtype == np.float16 and offset:
        # float16 keeps 11 bits: an offset of 20 leaves the deviations few.
        return g.case(l2=5e-3, rtol=1e-2, atol=5e-3)
    return g.case()


@family("group_norm", 15)
def gen_group_norm(rng):
    """Opset 21's GroupNormalization: scale and bias per channel."""
    dtype = pick(rng, [np.float32, np.float32, np.float16])
    g = Graph(rng, 21)
    groups = int(rng.integers(1, 5))
    c = groups * int(rng.integers(1, 4))
    xs = [int(rng.integers(1, 3)), c] + dims(rng, int(rng.integers(0, 4)), 1, 6, max_numel=150)
    # Groups of a few elements with close values have a tiny variance, and
    # onnxruntime's E[x^2] - E[x]^2 loses it: at least 6 per group.
    while int(np.prod(xs[2:])) * (c // groups) < 6:
        xs.append(2)
    x = values(rng, xs, dtype, scale=2.0)
    ins = [g.input(x), g.param(values(rng, [c], dtype), "scale"), g.param(values(rng, [c], dtype), "bias")]
    eps = float(np.float32(rng.uniform(1e-6, 1e-2))) if rng.random() < 0.5 else None
    y = g.op("GroupNormalization", ins, num_groups=groups, epsilon=eps)
    g.known_types[y] = (dtype, xs)
    g.output(y)
    return g.case()


@family("layer_norm", 25)
def gen_layer_norm(rng):
    dtype = pick(rng, [np.float32, np.float32, np.float64, np.float16])
    g = Graph(rng, int(pick(rng, [17, 18, 21])))
    rank = int(rng.integers(1, 6))
    xs = dims(rng, rank, 1, 6, max_numel=1000)
    axis = int(rng.integers(0, rank))
    norm = xs[axis:]
    # Scale and bias broadcast to the normalized dims.
    sshape = [1 if rng.random() < 0.25 else d for d in norm][int(rng.integers(0, len(norm) + 1))
                                                                if rng.random() < 0.3 else 0:]
    x = values(rng, xs, dtype, scale=2.0) + np.asarray(float(rng.choice([0.0, 3.0])), dtype)
    ins = [g.input(x), g.param(values(rng, sshape, dtype), "scale")]
    if rng.random() < 0.6:
        ins.append(g.param(values(rng, [1 if rng.random() < 0.25 else d for d in norm], dtype), "bias"))
    n_out = int(pick(rng, [1, 1, 1, 2, 3]))
    eps = float(np.float32(rng.uniform(1e-6, 1e-2))) if rng.random() < 0.5 else None
    outs = g.op("LayerNormalization", ins, n_out=n_out, axis=axis_form(rng, axis, rank),
                epsilon=eps)
    g.output(*(outs if n_out > 1 else [outs]))
    return g.case()


@family("rms_norm", 20)
def gen_rms_norm(rng):
    """RMSNormalization (opset 23): the axes from `axis` on, a scale that
    broadcasts to them, activations large enough that their squares pass
    float16's range (the CUDA backend computes the lowered form in
    float32)."""
    dtype = pick(rng, [np.float32, np.float32, np.float16])
    g = Graph(rng, 23)
    rank = int(rng.integers(1, 5))
    xs = dims(rng, rank, 1, 6, max_numel=1000)
    axis = int(rng.integers(0, rank))
    norm = xs[axis:]
    sshape = [1 if rng.random() < 0.25 else d for d in norm][int(rng.integers(0, len(norm) + 1))
                                                            if rng.random() < 0.3 else 0:]
    big = float(rng.choice([2.0, 2.0, 300.0])) if dtype == np.float32 else 2.0
    x = values(rng, xs, dtype, scale=big)
    eps = float(np.float32(rng.uniform(1e-6, 1e-2))) if rng.random() < 0.5 else None
    g.output(g.op("RMSNormalization", [g.input(x), g.param(values(rng, sshape, dtype), "scale")],
                  axis=axis_form(rng, axis, rank), epsilon=eps))
    return g.case()


# ---------------------------------------------------------------------------
# softmax


@family("softmax", 25)
def gen_softmax(rng):
    op = pick(rng, ["Softmax", "LogSoftmax"])
    dtype = pick(rng, [np.float32, np.float32, np.float64, np.float16])
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    rank = int(rng.integers(1, 6))
    xs = dims(rng, rank, 1, 7)
    axis = int(rng.integers(0, rank))
    x = g.input(values(rng, xs, dtype, scale=3.0))
    attr = axis_form(rng, axis, rank) if axis != rank - 1 or rng.random() < 0.5 else None
    g.output(g.op(op, [x], axis=attr))
    return g.case()


# ---------------------------------------------------------------------------
# layout: every dtype, compared exactly

# onnxruntime's CPU kernels for data movement cover all of segrt's dtypes.
MOVE_DTYPES = ALL_DTYPES + (np.float32,) * 4


@family("concat", 20)
def gen_concat(rng):
    dtype = pick(rng, MOVE_DTYPES)
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    rank = int(rng.integers(1, 6))
    base = dims(rng, rank, 1, 4)
    axis = int(rng.integers(0, rank))
    ins = []
    for _ in range(int(rng.integers(1, 5))):
        s = list(base)
        s[axis] = int(rng.integers(0 if rng.random() < 0.15 else 1, 5))  # empty parts too
        ins.append(g.param(values(rng, s, dtype), "x", p_input=0.7))
    if all(i not in g.feeds for i in ins):
        ins[0] = g.input(values(rng, base, dtype))
    g.output(g.op("Concat", ins, axis=axis_form(rng, axis, rank)))
    return g.case()


@family("split", 20)
def gen_split(rng):
    dtype = pick(rng, MOVE_DTYPES)
    opset = int(pick(rng, [13, 17, 18, 21]))
    g = Graph(rng, opset)
    rank = int(rng.integers(1, 5))
    xs = dims(rng, rank, 1, 6)
    axis = int(rng.integers(0, rank))
    n_out = int(rng.integers(1, 5))
    x = g.input(values(rng, xs, dtype))
    attrs = {"axis": axis_form(rng, axis, rank) if axis or rng.random() < 0.5 else None}
    ins = [x]
    form = pick(rng, ["sizes", "equal"])
    if form == "sizes":
        # Random sizes (zeros too) summing to the dim.
        cuts = np.sort(rng.integers(0, xs[axis] + 1, n_out - 1))
        sizes = np.diff(np.concatenate([[0], cuts, [xs[axis]]])).astype(np.int64)
        ins.append(g.const(sizes, "split"))
    elif opset >= 18:
        # num_outputs: the last part smaller when the dim does not divide.
        n_out = min(n_out, xs[axis])
        if -(-xs[axis] // n_out) * (n_out - 1) >= xs[axis]:
            n_out = 1 if xs[axis] < 2 else 2
        attrs["num_outputs"] = n_out
    else:
        n_out = int(pick(rng, [d for d in range(1, 5) if xs[axis] % d == 0]))
    outs = g.op("Split", ins, n_out=n_out, **attrs)
    g.output(*(outs if n_out > 1 else [outs]))
    return g.case()


def slice_bounds(rng, dim):
    """start, end, step for one axis: in range, past either end, or the
    extreme int64 values exporters write for 'to the end'."""
    step = int(pick(rng, [1, 1, 1, 2, 3, -1, -1, -2, -3]))
    big = np.iinfo(np.int64)
    def bound():
        r = rng.random()
        if r < 0.1:
            return int(pick(rng, [big.max, big.min, -big.max]))
        return int(rng.integers(-dim - 3, dim + 4))
    return bound(), bound(), step


@family("slice", 40)
def gen_slice(rng):
    dtype = pick(rng, MOVE_DTYPES)
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    rank = int(rng.integers(1, 6))
    xs = dims(rng, rank, 1, 6)
    n_axes = int(rng.integers(1, rank + 1))
    axes = [int(a) for a in rng.permutation(rank)[:n_axes]]
    if rng.random() < 0.3:
        axes = list(range(n_axes))  # then axes may be left out
    starts, ends, steps = zip(*(slice_bounds(rng, xs[a]) for a in axes))
    itype = pick(rng, [np.int64, np.int64, np.int32])
    if itype == np.int32:
        clip = lambda v: [int(np.clip(x, -2**31, 2**31 - 1)) for x in v]  # noqa: E731
        starts, ends = clip(starts), clip(ends)
    ins = [g.input(values(rng, xs, dtype)), g.const(np.array(starts, itype), "starts"),
           g.const(np.array(ends, itype), "ends")]
    omit_axes = axes == list(range(n_axes)) and rng.random() < 0.5
    omit_steps = all(s == 1 for s in steps) and rng.random() < 0.5
    if not (omit_axes and omit_steps):
        ins.append("" if omit_axes else g.const(np.array([axis_form(rng, a, rank) for a in axes],
                                                         itype), "axes"))
    if not omit_steps:
        ins.append(g.const(np.array(steps, itype), "steps"))
    g.output(g.op("Slice", ins))
    if any(s < 0 and e >= np.iinfo(itype).max for s, e in zip(steps, ends)):
        return g.case(oracle="reference",
                      why="onnxruntime reads an end of INT_MAX with a negative step as 'through "
                          "the first element'; the spec clamps it to dim - 1 first")
    return g.case()


@family("pad", 35)
def gen_pad(rng):
    mode = pick(rng, ["constant", "constant", "reflect", "edge", "wrap"])
    opset = int(pick(rng, [13, 17, 18, 19, 21]))
    if mode == "wrap":
        opset = max(opset, 19)
    dtype = pick(rng, (np.float32, np.float32, np.float64, np.int64, np.int32, np.uint8,
                       np.int8, np.bool_))
    g = Graph(rng, opset)
    rank = int(rng.integers(1, 6))
    xs = dims(rng, rank, 1, 5)
    axes = list(range(rank))
    if opset >= 18 and rng.random() < 0.4:
        axes = sorted(int(a) for a in rng.permutation(rank)[:int(rng.integers(1, rank + 1))])
    pads = []
    for _ in range(2):
        for a in axes:
            if mode == "constant":
                pads.append(int(rng.integers(-xs[a] // 2 if rng.random() < 0.3 else 0, 4)))
            elif mode == "reflect":
                pads.append(int(rng.integers(0, xs[a])))  # below the dim
            else:
                pads.append(int(rng.integers(0, min(xs[a], 3) + 1)))
    x = g.input(values(rng, xs, dtype))
    ins = [x, g.const(np.array(pads, np.int64), "pads")]
    if mode == "constant" and rng.random() < 0.6:
        ins.append(g.const(values(rng, [], dtype, scale=3.0), "value"))
    if len(axes) != rank or (opset >= 18 and rng.random() < 0.2):
        while len(ins) < 3:
            ins.append("")
        ins.append(g.const(np.array([axis_form(rng, a, rank) for a in axes], np.int64), "axes"))
    g.output(g.op("Pad", ins, mode=mode if mode != "constant" or rng.random() < 0.5 else None))
    return g.case()


def factor(rng, n, k):
    """n split into k factors, at random."""
    out = [1] * k
    p, m = 2, n
    while m > 1:
        while m % p == 0:
            out[int(rng.integers(0, k))] *= p
            m //= p
        p += 1
    return out


@family("reshape", 20)
def gen_reshape(rng):
    dtype = pick(rng, MOVE_DTYPES)
    g = Graph(rng, int(pick(rng, [13, 14, 17, 21])))
    xs = dims(rng, int(rng.integers(0, 6)), 1, 6)
    n = int(np.prod(xs))
    shape = factor(rng, n, int(rng.integers(0, 6)) if n == 1 else int(rng.integers(1, 6)))
    shape = [int(v) for v in shape]
    # 0 copies the input's dim at that index; one -1 is inferred.
    for i in range(min(len(shape), len(xs))):
        if shape[i] == xs[i] and rng.random() < 0.3:
            shape[i] = 0
    if shape and rng.random() < 0.5:
        shape[int(rng.integers(0, len(shape)))] = -1
    x = g.input(values(rng, xs, dtype))
    g.output(g.op("Reshape", [x, g.const(np.array(shape, np.int64), "shape")]))
    return g.case()


@family("transpose", 20)
def gen_transpose(rng):
    dtype = pick(rng, MOVE_DTYPES)
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    rank = int(rng.integers(0, 8))
    xs = dims(rng, rank, 1, 4, empty=0.05)
    perm = [int(p) for p in rng.permutation(rank)] if rng.random() < 0.8 else None
    g.output(g.op("Transpose", [g.input(values(rng, xs, dtype))], perm=perm))
    return g.case()


@family("flatten", 12)
def gen_flatten(rng):
    dtype = pick(rng, MOVE_DTYPES)
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    rank = int(rng.integers(1, 6))
    xs = dims(rng, rank, 1, 5)
    axis = int(rng.integers(0, rank + 1))
    attr = axis_form(rng, axis, rank) if axis != 1 or rng.random() < 0.5 else None
    g.output(g.op("Flatten", [g.input(values(rng, xs, dtype))], axis=attr))
    return g.case()


@family("squeeze", 15)
def gen_squeeze(rng):
    dtype = pick(rng, MOVE_DTYPES)
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    rank = int(rng.integers(1, 6))
    xs = [1 if rng.random() < 0.5 else d for d in dims(rng, rank, 1, 5)]
    ones = [i for i, d in enumerate(xs) if d == 1]
    ins = [g.input(values(rng, xs, dtype))]
    if ones and rng.random() < 0.7:
        axes = [axis_form(rng, int(a), rank) for a in rng.permutation(ones)[:int(rng.integers(1, len(ones) + 1))]]
        ins.append(g.const(np.array(axes, np.int64), "axes"))
    g.output(g.op("Squeeze", ins))
    return g.case()


@family("unsqueeze", 15)
def gen_unsqueeze(rng):
    dtype = pick(rng, MOVE_DTYPES)
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    xs = dims(rng, int(rng.integers(0, 5)), 1, 5)
    k = int(rng.integers(1, 4))
    out_rank = len(xs) + k
    axes = [axis_form(rng, int(a), out_rank) for a in rng.permutation(out_rank)[:k]]
    g.output(g.op("Unsqueeze", [g.input(values(rng, xs, dtype)), g.const(np.array(axes, np.int64), "axes")]))
    return g.case()


@family("expand", 20)
def gen_expand(rng):
    dtype = pick(rng, MOVE_DTYPES)
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    rank = int(rng.integers(0, 5))
    xs = [1 if rng.random() < 0.5 else d for d in dims(rng, rank, 1, 4)]
    # The target broadcasts with the input: 1s stretch either side, and it
    # may have more dims or fewer.
    shape = [int(rng.integers(1, 4)) if d == 1 else (d if rng.random() < 0.7 else 1) for d in xs]
    shape = [int(v) for v in rng.integers(1, 4, int(rng.integers(0, 3)))] + shape
    if rng.random() < 0.2 and shape:
        shape = shape[int(rng.integers(0, len(shape))):]
    g.output(g.op("Expand", [g.input(values(rng, xs, dtype)),
                             g.const(np.array(shape, np.int64), "shape")]))
    return g.case()


@family("tile", 15)
def gen_tile(rng):
    dtype = pick(rng, MOVE_DTYPES)
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    rank = int(rng.integers(1, 5))
    xs = dims(rng, rank, 1, 4)
    reps = [int(rng.integers(0 if rng.random() < 0.1 else 1, 4)) for _ in range(rank)]
    g.output(g.op("Tile", [g.input(values(rng, xs, dtype)), g.const(np.array(reps, np.int64), "repeats")]))
    return g.case()


@family("gather", 25)
def gen_gather(rng):
    dtype = pick(rng, MOVE_DTYPES)
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    rank = int(rng.integers(1, 5))
    xs = dims(rng, rank, 1, 5)
    axis = int(rng.integers(0, rank))
    ishape = dims(rng, int(rng.integers(0, 4)), 1, 4)
    idx = rng.integers(-xs[axis], xs[axis], ishape).astype(pick(rng, [np.int64, np.int32]))
    ind = g.const(idx, "indices") if rng.random() < 0.5 else g.input(idx, "indices")
    g.output(g.op("Gather", [g.input(values(rng, xs, dtype)), ind],
                  axis=axis_form(rng, axis, rank) if axis or rng.random() < 0.5 else None))
    return g.case()


@family("depth_space", 15)
def gen_depth_space(rng):
    op = pick(rng, ["DepthToSpace", "SpaceToDepth"])
    dtype = pick(rng, MOVE_DTYPES)
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    b = int(rng.integers(1, 4))
    n, h, w = int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(1, 4))
    if op == "DepthToSpace":
        xs = [n, b * b * int(rng.integers(1, 4)), h, w]
        attrs = {"mode": pick(rng, ["DCR", "CRD"]) if rng.random() < 0.7 else None}
    else:
        xs = [n, int(rng.integers(1, 4)), h * b, w * b]
        attrs = {}
    g.output(g.op(op, [g.input(values(rng, xs, dtype))], blocksize=b, **attrs))
    if dtype in (np.bool_, np.int16, np.uint16, np.int32, np.int64):
        return g.case(oracle="reference", why=f"onnxruntime has no {np.dtype(dtype)} {op}")
    return g.case()


# ---------------------------------------------------------------------------
# Cast


def cast_data(rng, shape, src, dst):
    """Data for Cast that every destination can hold (float to integer
    truncates toward zero and is undefined out of range), with exact
    zeros for bool and large values for float narrowing."""
    src, dst = np.dtype(src), np.dtype(dst)
    if src == np.bool_:
        return values(rng, shape, src)
    if src.kind == "f":
        if dst.kind in "iu":
            lim = {1: 120, 2: 30000, 4: 1e6, 8: 1e9}[dst.itemsize]
            if src == np.float16:
                lim = min(lim, 60000)
            lo = 0 if dst.kind == "u" else -lim
            return np.asarray(rng.uniform(lo, lim, shape)).astype(src)
        v = values(rng, shape, src, scale=float(pick(rng, [1.0, 100.0, 1e4])))
        if dst == np.bool_:
            v[rng.random(shape) < 0.3] = 0
        if dst == np.float16 and src != np.float16 and rng.random() < 0.3:
            v = v * np.asarray(1e5, src)  # past float16's range: infinities
        return v
    info = np.iinfo(src)
    if dst.kind in "iu" and rng.random() < 0.7:
        # Within the destination too (narrowing wraps, which the spec does
        # not define, so mostly avoided).
        dinfo = np.iinfo(dst)
        lo, hi = max(info.min, dinfo.min), min(info.max, dinfo.max)
    else:
        lo, hi = info.min, info.max
    v = np.asarray(rng.integers(lo, hi, shape, dtype=src, endpoint=True))
    if dst == np.bool_:
        v[rng.random(shape) < 0.3] = 0
    return v


@family("cast", 40)
def gen_cast(rng):
    src, dst = pick(rng, ALL_DTYPES), pick(rng, ALL_DTYPES)
    g = Graph(rng, int(pick(rng, [13, 17, 19, 21])))
    xs = dims(rng, int(rng.integers(0, 5)), 1, 6)
    g.output(g.op("Cast", [g.input(cast_data(rng, xs, src, dst))], to=ELEM_OF[np.dtype(dst)]))
    return g.case()


@family("cast_like", 20)
def gen_cast_like(rng):
    """CastLike of a computed value (segrt's simplify pass makes it a Cast
    to the target's dtype): the target a graph input or a constant, of any
    shape (its values are never read)."""
    src, dst = pick(rng, ALL_DTYPES), pick(rng, ALL_DTYPES)
    g = Graph(rng, int(pick(rng, [15, 17, 19, 21])))
    xs = dims(rng, int(rng.integers(0, 5)), 1, 6)
    x = g.op("Identity", [g.input(cast_data(rng, xs, src, dst))])
    like = values(rng, dims(rng, int(rng.integers(0, 3)), 1, 3), dst)
    g.output(g.op("CastLike", [x, g.param(like, "like", p_input=0.5)]))
    return g.case()


# ---------------------------------------------------------------------------
# reductions

REDUCE_DTYPES = {
    "ReduceSum": (np.float32, np.float32, np.float64, np.int64, np.int32, np.float16),
    "ReduceMean": (np.float32, np.float32, np.float64, np.int64, np.int32, np.float16),
    "ReduceMax": (np.float32, np.float32, np.float64, np.int64, np.int32, np.int8, np.uint8, np.float16),
    "ReduceMin": (np.float32, np.float32, np.float64, np.int64, np.int32, np.int8, np.uint8, np.float16),
    "ReduceProd": (np.float32, np.float64, np.int64, np.int32),
    "ReduceL1": (np.float32, np.float64, np.int64, np.int32),
    "ReduceL2": (np.float32, np.float64),
    "ReduceSumSquare": (np.float32, np.float64, np.int64, np.int32),
    "ReduceLogSumExp": (np.float32, np.float64),
}


@family("reduce", 50)
def gen_reduce(rng):
    op = pick(rng, list(REDUCE_DTYPES))
    dtype = pick(rng, REDUCE_DTYPES[op])
    opset = int(pick(rng, [13, 17, 18, 18, 21]))
    g = Graph(rng, opset)
    rank = int(rng.integers(1, 6))
    xs = dims(rng, rank, 1, 6, empty=0.1)
    data = values(rng, xs, dtype, scale=2.0)
    if op not in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin") and data.size == 0:
        return gen_reduce(rng)  # the empty-set rules are checked for Sum, Max and Min below
    if op == "ReduceProd":  # products of few factors near 1 stay in range
        data = (values(rng, xs, np.float64, 0.5, 1.5) if np.dtype(dtype).kind == "f"
                else small_ints(rng, xs, dtype, -2, 2)).astype(dtype)
    x = g.input(data)
    axes = [int(a) for a in rng.permutation(rank)[:int(rng.integers(0, rank + 1))]]
    axes = [axis_form(rng, a, rank) for a in axes]
    attrs = {"keepdims": int(rng.integers(0, 2)) if rng.random() < 0.7 else None}
    ins = [x]
    # Axes are an input for ReduceSum since opset 13, for the others since 18.
    as_input = op == "ReduceSum" or opset >= 18
    if not axes and rng.random() < 0.5:
        attrs["noop_with_empty_axes"] = int(rng.integers(0, 2)) if as_input else None
    if axes or (as_input and rng.random() < 0.3):
        if as_input:
            ins.append(g.const(np.array(axes, np.int64), "axes"))
        elif axes:
            attrs["axes"] = axes
    g.output(g.op(op, ins, **attrs))
    if data.size == 0:
        # Reductions of empty tensors as the spec says (onnxruntime gets
        # their shapes wrong): a sum over nothing is 0, a max the lowest
        # value, a min the highest; a mean of nothing is undefined.
        keep = attrs["keepdims"] if attrs["keepdims"] is not None else 1
        noop = attrs.get("noop_with_empty_axes") or 0
        red = tuple(a % rank for a in axes) if axes else (() if noop else tuple(range(rank)))
        empty_set = any(xs[a] == 0 for a in red)
        if empty_set and (op == "ReduceMean" or (op != "ReduceSum" and opset < 18)):
            return gen_reduce(rng)  # undefined (max and min defined since opset 18)
        return g.case(oracle="numpy", why="onnxruntime sizes reductions of empty tensors wrongly",
                      expected=[np_reduce(op, data, red, keep)])
    return g.case()


def np_reduce(op, x, axes, keepdims):
    """ReduceSum/Mean/Max/Min over axes (a tuple; empty: a copy)."""
    if not axes:
        return x.copy()
    if op == "ReduceSum":
        return np.sum(x, axis=axes, keepdims=bool(keepdims), dtype=x.dtype)
    if op == "ReduceMean":
        return np.mean(x, axis=axes, keepdims=bool(keepdims)).astype(x.dtype)
    lowest = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    highest = np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).max
    fn, init = (np.max, lowest) if op == "ReduceMax" else (np.min, highest)
    return fn(x, axis=axes, keepdims=bool(keepdims), initial=init)


@family("reduce_empty", 15)
def gen_reduce_empty(rng):
    """ReduceSum, ReduceMax and ReduceMin over empty tensors (opset 18
    defines them: 0, the lowest value, the highest), against numpy."""
    op = pick(rng, ["ReduceSum", "ReduceMax", "ReduceMin"])
    dtype = pick(rng, (np.float32, np.float64, np.int64, np.int32, np.int8, np.uint8)
                 if op != "ReduceSum" else (np.float32, np.float64, np.int64, np.int32))
    g = Graph(rng, int(pick(rng, [18, 21])))
    rank = int(rng.integers(1, 5))
    xs = dims(rng, rank, 1, 4)
    zero = int(rng.integers(0, rank))
    xs[zero] = 0
    data = values(rng, xs, dtype)
    axes = sorted({zero} | {int(a) for a in rng.permutation(rank)[:int(rng.integers(0, rank))]})
    keep = int(rng.integers(0, 2))
    ins = [g.input(data)]
    if len(axes) < rank or rng.random() < 0.5:
        ins.append(g.const(np.array([axis_form(rng, a, rank) for a in axes], np.int64), "axes"))
    g.output(g.op(op, ins, keepdims=keep))
    return g.case(oracle="numpy", why="onnxruntime sizes reductions of empty tensors wrongly",
                  expected=[np_reduce(op, data, tuple(axes), keep)])


@family("argmax", 30)
def gen_argmax(rng):
    dtype = pick(rng, (np.float32, np.float32, np.float64, np.float16, np.int64, np.int32,
                       np.int8, np.uint8))
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    rank = int(rng.integers(1, 6))
    xs = dims(rng, rank, 1, 6)
    # Few distinct values, so that ties (select_last_index) occur.
    x = rng.integers(0, 4, xs).astype(dtype)
    axis = int(rng.integers(0, rank))
    g.output(g.op(pick(rng, ["ArgMax", "ArgMin"]), [g.input(x)],
                  axis=axis_form(rng, axis, rank) if axis or rng.random() < 0.5 else None,
                  keepdims=int(rng.integers(0, 2)) if rng.random() < 0.7 else None,
                  select_last_index=int(rng.integers(0, 2)) if rng.random() < 0.7 else None))
    return g.case()


# ---------------------------------------------------------------------------
# matrix products


@family("matmul", 40)
def gen_matmul(rng):
    dtype = pick(rng, (np.float32, np.float32, np.float32, np.float64, np.float16, np.int32, np.int64))
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    m, k, n = (int(v) for v in rng.integers(1, 9, 3))
    if rng.random() < 0.05:
        k = 0  # an empty contraction: zeros
    form = pick(rng, ["1x1", "1xN", "Nx1", "NxN", "NxN", "NxN"])
    if k == 0 and form == "1x1":
        form = "NxN"  # a scalar from nothing
    batch = bcast_shapes(rng, 2, max_rank=3, max_numel=24)
    if form == "1x1":
        sa, sb = [k], [k]
    elif form == "1xN":
        sa, sb = [k], batch[1] + [k, n]
    elif form == "Nx1":
        sa, sb = batch[0] + [m, k], [k]
    else:
        sa, sb = batch[0] + [m, k], batch[1] + [k, n]
    scale = 1.0 if np.dtype(dtype).kind == "f" else None
    a = values(rng, sa, dtype, scale=scale) if scale else small_ints(rng, sa, dtype, -5, 5)
    b = values(rng, sb, dtype, scale=scale) if scale else small_ints(rng, sb, dtype, -5, 5)
    g.output(g.op("MatMul", [g.input(a, "a"), g.param(b, "b", p_input=0.5)]))
    if k == 0:
        return g.case(oracle="numpy", why="onnxruntime leaves an empty contraction's output "
                      "uninitialized and mis-broadcasts its batch dims", expected=[np.matmul(a, b)])
    return f16_oracle(g.case()) if dtype == np.float16 else g.case()


@family("gemm", 30)
def gen_gemm(rng):
    dtype = pick(rng, (np.float32, np.float32, np.float64, np.float16))
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    m, k, n = (int(v) for v in rng.integers(1, 9, 3))
    ta, tb = int(rng.integers(0, 2)), int(rng.integers(0, 2))
    a = values(rng, [k, m] if ta else [m, k], dtype)
    b = values(rng, [n, k] if tb else [k, n], dtype)
    ins = [g.input(a, "a"), g.param(b, "b", p_input=0.4)]
    cshape = pick(rng, [None, [], [1], [n], [1, n], [m, 1], [m, n], [1, 1]])
    if cshape is not None:
        ins.append(g.param(values(rng, cshape, dtype), "c", p_input=0.3))
    u = lambda: float(np.float32(rng.uniform(-2, 2)))  # noqa: E731
    g.output(g.op("Gemm", ins, transA=ta if ta or rng.random() < 0.3 else None,
                  transB=tb if tb or rng.random() < 0.3 else None,
                  alpha=u() if rng.random() < 0.5 else None,
                  beta=u() if cshape is not None and rng.random() < 0.5 else None))
    return g.case()


# Einsum equations and the rank of each operand's labels: attention,
# transposes, diagonals, broadcasting, reductions, outer products.
EINSUM = [
    "bij,bjk->bik", "bhqd,bhkd->bhqk", "bhqk,bhkd->bhqd", "ij->ji", "ij,jk", "ij,jk->ik",
    "i,i->", "i,j->ij", "ij->", "ij->i", "ii->i", "bii->bi", "...ij,...jk->...ik",
    "bij,bkj->bik", "nchw,kc->nkhw", "ij,ij->ij", "abc->cba", "ab,bc,cd->ad", "i->i",
    "...i->...", "b...c,cd->b...d", "ii", "ij,kj", "bnc,nc->bn",
]


@family("einsum", 50)
def gen_einsum(rng):
    eq = pick(rng, EINSUM)
    dtype = pick(rng, (np.float32, np.float32, np.float64, np.int32, np.int64))
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    size = {c: int(rng.integers(1, 5)) for c in "abcdhijknqw"}
    ell = dims(rng, int(rng.integers(0, 3)), 1, 3)
    lhs = eq.split("->")[0].split(",")
    ins = []
    for term in lhs:
        shape = []
        for part in term.replace("...", "@"):
            if part == "@":
                # Broadcast dims: any operand may have 1 in place of a size.
                shape += [1 if rng.random() < 0.3 else e for e in ell]
            else:
                shape.append(size[part])
        v = values(rng, shape, dtype) if np.dtype(dtype).kind == "f" else small_ints(rng, shape, dtype, -4, 4)
        ins.append(g.input(v))
    g.output(g.op("Einsum", ins, equation=eq))
    return g.case()


# ---------------------------------------------------------------------------
# Resize

SCALES = [0.5, 0.6, 0.75, 1.0, 1.25, 1.5, 1.7, 2.0, 2.5, 3.0]


@family("resize", 80)
def gen_resize(rng):
    mode = pick(rng, ["nearest", "nearest", "linear", "linear", "cubic"])
    opset = int(pick(rng, [13, 17, 18, 19, 21]))
    coords = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
              "tf_crop_and_resize"] + (["half_pixel_symmetric"] if opset >= 19 else [])
    coord = pick(rng, coords)
    # onnxruntime resizes nearest over any dims, linear over the last 1-3
    # (N and C kept, or a plain 2-D or 3-D input), cubic over the last 2.
    if mode == "nearest":
        rank = int(rng.integers(1, 6))
        resized = sorted(int(a) for a in rng.permutation(rank)[:int(rng.integers(1, rank + 1))])
    elif mode == "linear":
        lead = 2 if rng.random() < 0.7 else 0
        nsp = int(rng.integers(1, 4)) if lead else int(rng.integers(2, 4))
        rank = nsp + lead
        resized = list(range(lead, rank))
    else:
        lead = 2 if rng.random() < 0.7 else 0
        rank = lead + 2
        resized = [lead, lead + 1]
    xs = dims(rng, rank, 1, 5, max_numel=200)
    for a in resized:
        xs[a] = int(rng.integers(1 if mode == "nearest" else 2, 7))
    dtype = np.float32 if mode != "nearest" else pick(rng, [np.float32, np.float32, np.int32, np.uint8])
    # Data for cubic stays smooth-ish: its taps reach past the edges.
    x = values(rng, xs, dtype) if dtype == np.float32 else values(rng, xs, dtype, 0, 50)
    g = Graph(rng, opset)
    attrs = {"mode": mode if mode != "nearest" or rng.random() < 0.5 else None,
             "coordinate_transformation_mode": coord if coord != "half_pixel" or rng.random() < 0.5 else None}
    if mode == "nearest":
        attrs["nearest_mode"] = pick(rng, ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
    if mode == "cubic":
        attrs["cubic_coeff_a"] = pick(rng, [None, -0.5, -0.75])
        attrs["exclude_outside"] = int(rng.integers(0, 2)) if rng.random() < 0.6 else None
    # opset 18: axes lists the resized dims; scales, sizes and roi then
    # cover just those.
    use_axes = opset >= 18 and rng.random() < 0.4
    listed = resized if use_axes else list(range(rank))
    if use_axes:
        attrs["axes"] = [axis_form(rng, a, rank) for a in resized]
    ins = [g.input(x), "", "", ""]
    if coord == "tf_crop_and_resize":
        lo = rng.uniform(-0.2, 0.5, len(listed))
        hi = lo + rng.uniform(0.3, 1.0, len(listed))

        keep = [a not in resized for a in listed]
        lo[keep], hi[keep] = 0.0, 1.0
        ins[1] = g.const(np.concatenate([lo, hi]).astype(np.float32), "roi")
        attrs["extrapolation_value"] = float(np.float32(rng.uniform(-2, 2))) if rng.random() < 0.5 else None
    if rng.random() < 0.5:
        scales = [float(pick(rng, SCALES)) if a in resized else 1.0 for a in listed]
        ins[2] = g.const(np.array(scales, np.float32), "scales")
    else:
        sizes = [int(rng.integers(1, 2 * xs[a] + 3)) if a in resized else xs[a] for a in listed]
        ins[3] = g.const(np.array(sizes, np.int64), "sizes")
        if opset >= 18 and rng.random() < 0.3 and use_axes:
            attrs["keep_aspect_ratio_policy"] = pick(rng, ["stretch", "not_larger", "not_smaller"])
    while ins[-1] == "":
        ins.pop()
    if opset < 18 and len(ins) < 3:
        ins.append("")  # opset 13: roi and scales are named, even if empty
    g.output(g.op("Resize", ins, **attrs))
    # Where onnxruntime departs from the spec, the spec computed in numpy.
    def const_of(name):
        return numpy_helper.to_array(next(
            (t for t in g.inits if t.name == name), None) or next(
            helper.get_attribute_value(n.attribute[0]) for n in g.nodes if n.output[0] == name))
    roi = const_of(ins[1]) if len(ins) > 1 and ins[1] else None
    scales = const_of(ins[2]) if len(ins) > 2 and ins[2] else None
    sizes = const_of(ins[3]) if len(ins) > 3 and ins[3] else None
    policy = attrs.get("keep_aspect_ratio_policy") or "stretch"
    info = {}
    want = np_resize(x, roi, scales, sizes, attrs.get("axes"), mode, coord,
                     attrs.get("nearest_mode") or "round_prefer_floor",
                     attrs.get("cubic_coeff_a") or -0.75, attrs.get("exclude_outside") or 0,
                     attrs.get("extrapolation_value") or 0.0, policy, info)
    why = None
    if policy != "stretch" and min(attrs["axes"]) < 0:
        why = "onnxruntime ignores negative axes under keep_aspect_ratio_policy"
    elif info["same_size_moved"]:
        why = ("onnxruntime passes a dim whose size does not change through unchanged, "
               "although its scale or roi moves the samples")
    if why:
        return g.case(oracle="numpy", why=why, expected=[want])
    return g.case()


def np_resize(x, roi, scales, sizes, axes=None, mode="nearest", coord="half_pixel",
              nearest_mode="round_prefer_floor", cubic_a=-0.75, exclude_outside=0,
              extrapolation=0.0, policy="stretch", info=None):
    """Resize as the spec (opset 19) defines it, one dim at a time, for the
    forms onnxruntime gets wrong. Coordinates are computed in float32, as
    segrt and onnxruntime do, so that nearest picks the same side of a
    tie; interpolation sums in float64. info (a dict) gets `same_size_moved`:
    whether a dim keeps its size but not its coordinates."""
    f = np.float32
    rank = x.ndim
    axes = list(range(rank)) if axes is None else [a % rank for a in axes]
    scale = [f(1)] * rank
    out = list(x.shape)
    start, end = [f(0)] * rank, [f(1)] * rank
    if roi is not None and len(roi):
        m = len(roi) // 2
        for i in range(m):
            d = axes[i] if m == len(axes) else i
            start[d], end[d] = f(roi[i]), f(roi[m + i])
    if scales is not None and len(scales):
        for i, d in enumerate(axes):
            scale[d] = f(scales[i])
            out[d] = int(np.floor(f(x.shape[d]) * scale[d]))
    else:
        ratio = [f(sizes[i]) / f(x.shape[d]) for i, d in enumerate(axes)]
        if policy == "stretch":
            for i, d in enumerate(axes):
                scale[d], out[d] = ratio[i], int(sizes[i])
        else:
            common = min(ratio) if policy == "not_larger" else max(ratio)
            for d in axes:
                scale[d] = common
                out[d] = int(np.floor(common * f(x.shape[d]) + f(0.5)))  # round half up
    y = x.astype(np.float64)
    outside = np.zeros(out, bool)
    moved = False
    for d in range(rank):
        n_in, n_out = x.shape[d], out[d]
        w = np.zeros((n_out, n_in))
        ext = np.zeros(n_out, bool)
        coords = []
        for o in range(n_out):
            xo = f(o)
            s = scale[d]
            if coord == "half_pixel":
                c = (xo + f(0.5)) / s - f(0.5)
            elif coord == "half_pixel_symmetric":
                adj = f(n_out) / (s * f(n_in))
                center = f(n_in) / f(2)
                offset = center * (f(1) - adj)
                c = f(float(offset) + (float(xo) + 0.5) / float(s) - 0.5)
            elif coord == "pytorch_half_pixel":
                c = (xo + f(0.5)) / s - f(0.5) if n_out > 1 else f(0)
            elif coord == "align_corners":
                c = f(0) if n_out == 1 else xo * f(n_in - 1) / f(n_out - 1)
            elif coord == "asymmetric":
                c = xo / s
            else:  # tf_crop_and_resize
                a, b = start[d], end[d]
                if n_out > 1:
                    c = a * f(n_in - 1) + (xo * (b - a) * f(n_in - 1)) / f(n_out - 1)
                else:
                    c = f(0.5 * float(a + b) * (n_in - 1))
                if c < 0 or c > n_in - 1:
                    ext[o] = True
                    coords.append(None)
                    continue
            c = float(c)
            coords.append(c)
            fl = np.floor(c)
            r = c - fl
            clampi = lambda i: int(min(max(i, 0), n_in - 1))  # noqa: E731
            if mode == "nearest":
                if nearest_mode == "round_prefer_floor":
                    i = fl if r <= 0.5 else fl + 1
                elif nearest_mode == "round_prefer_ceil":
                    i = fl if r < 0.5 else fl + 1
                elif nearest_mode == "floor":
                    i = fl
                else:
                    i = np.ceil(c)
                w[o, clampi(i)] = 1
            elif mode == "linear":
                w[o, clampi(fl)] += 1 - r
                w[o, clampi(fl + 1)] += r
            else:
                A = cubic_a
                t = [r + 1, r, 1 - r, 2 - r]
                cw = [((A * v - 5 * A) * v + 8 * A) * v - 4 * A if v > 1 else
                      ((A + 2) * v - (A + 3)) * v * v + 1 for v in t]
                taps = [fl - 1, fl, fl + 1, fl + 2]
                if exclude_outside:
                    cw = [c_ if 0 <= p <= n_in - 1 else 0.0 for c_, p in zip(cw, taps)]
                    tot = sum(cw)
                    cw = [c_ / tot for c_ in cw]
                for c_, p in zip(cw, taps):
                    w[o, clampi(p)] += c_
        moved |= n_in == n_out and coords != list(range(n_in))
        y = np.moveaxis(np.tensordot(w, np.moveaxis(y, d, 0), axes=(1, 0)), 0, d)
        shape = [1] * rank
        shape[d] = n_out
        outside |= ext.reshape(shape)
    if info is not None:
        info["same_size_moved"] = moved
    if x.dtype.kind in "iu":
        # Integer data: nearest only, so the weights pick one element; the
        # extrapolation value converts as a C cast does, toward zero.
        return np.where(outside, np.trunc(extrapolation), np.round(y)).astype(x.dtype)
    return np.where(outside, extrapolation, y).astype(x.dtype)


# ---------------------------------------------------------------------------
# shapes, constants and the rest of ops.def


@family("shape_ops", 30)
def gen_shape_ops(rng):
    """Shape (with start/end since opset 15), Size, ConstantOfShape, Range,
    Identity and Dropout (inference: a copy and an all-true mask)."""
    op = pick(rng, ["Shape", "Size", "ConstantOfShape", "Range", "Identity", "Dropout"])
    opset = int(pick(rng, [13, 15, 17, 21]))
    g = Graph(rng, opset)
    dtype = pick(rng, MOVE_DTYPES)
    xs = dims(rng, int(rng.integers(0, 5)), 1, 5)
    if op == "Shape":
        rank = len(xs)
        attrs = {}
        if opset >= 15 and rng.random() < 0.6:
            attrs = {"start": int(rng.integers(-rank - 2, rank + 2)),
                     "end": int(rng.integers(-rank - 2, rank + 2)) if rng.random() < 0.6 else None}
        g.output(g.op("Shape", [g.input(values(rng, xs, dtype))], **attrs))
    elif op == "Size":
        g.output(g.op("Size", [g.input(values(rng, xs, dtype))]))
    elif op == "ConstantOfShape":
        # The shape from a Shape of a graph input: known once its dims are.
        x = g.input(values(rng, xs, np.float32))
        vt = pick(rng, [None, np.float32, np.int64, np.int32, np.bool_, np.float16, np.uint8])
        value = None if vt is None else numpy_helper.from_array(values(rng, [1], vt, scale=3.0))
        g.output(g.op("ConstantOfShape", [g.op("Shape", [x])], value=value))
    elif op == "Range":
        rt = pick(rng, [np.float32, np.float64, np.int64, np.int32, np.int16])
        start = values(rng, [], rt, scale=3.0) if rt in FLOATS else small_ints(rng, [], rt, -10, 10)
        delta = np.asarray(pick(rng, [-3, -2, -1, 1, 2, 3]) * (rng.uniform(0.5, 1.5) if rt in FLOATS else 1), rt)
        limit = np.asarray(start + delta * rng.integers(-2, 12) + (delta * 0.5 if rt in FLOATS else 0), rt)
        # Constants: a length that depends on input data is not something
        # segrt's engines take (they refuse it, by design).
        r = g.op("Range", [g.const(start, "start"), g.const(limit, "limit"), g.const(delta, "delta")])
        if rt == np.int16:
            g.opset = max(g.opset, 14)  # int16 Add
        g.output(g.op("Add", [r, g.input(values(rng, [], rt, scale=3.0), "x")]))
    elif op == "Identity":
        g.output(g.op("Identity", [g.input(values(rng, xs, dtype))]))
    else:
        ft = pick(rng, [np.float32, np.float64, np.float16])
        ins = [g.input(values(rng, xs, ft))]
        if rng.random() < 0.5:
            ins.append(g.const(np.asarray(rng.uniform(0, 0.9), ft), "ratio"))
            if rng.random() < 0.5:
                ins.append(g.const(np.asarray(False), "training_mode"))
        n_out = int(rng.integers(1, 3))
        outs = g.op("Dropout", ins, n_out=n_out)
        g.output(*(outs if n_out > 1 else [outs]))
    return g.case()


@family("scatter_nd", 15)
def gen_scatter_nd(rng):
    reduction = pick(rng, [None, "none", "add", "mul", "max", "min"])
    opset = 18 if reduction in ("max", "min") else int(pick(rng, [13, 16, 18, 21]))
    if reduction and opset < 16:
        opset = 16
    dtype = pick(rng, (np.float32, np.float32, np.float64, np.int64, np.int32))
    g = Graph(rng, opset)
    xs = dims(rng, int(rng.integers(1, 5)), 1, 5)
    k = int(rng.integers(1, len(xs) + 1))
    # Distinct index tuples: with duplicates the order of updates is open.
    total = int(np.prod(xs[:k]))
    n = int(rng.integers(1, min(total, 6) + 1))
    flat = rng.permutation(total)[:n]
    idx = np.stack(np.unravel_index(flat, xs[:k]), axis=-1).astype(np.int64)
    idx = np.where(rng.random(idx.shape) < 0.3, idx - np.array(xs[:k]), idx)  # negative too
    upd = values(rng, [n] + xs[k:], dtype, scale=2.0)
    ins = [g.input(values(rng, xs, dtype, scale=2.0)), g.const(idx, "indices"), g.input(upd, "updates")]
    g.output(g.op("ScatterND", ins, reduction=reduction))
    return g.case()


# ---------------------------------------------------------------------------
# element-wise gathers and scatters, tuple gathers, running sums, triangles,
# one-hot and top-k


@family("gather_elements", 20)
def gen_gather_elements(rng):
    dtype = pick(rng, MOVE_DTYPES)
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    rank = int(rng.integers(1, 5))
    xs = dims(rng, rank, 1, 5)
    axis = int(rng.integers(0, rank))
    ishape = [int(rng.integers(1, xs[d] + 1)) if d != axis else int(rng.integers(1, 5)) for d in range(rank)]
    idx = rng.integers(-xs[axis], xs[axis], ishape).astype(pick(rng, [np.int64, np.int32]))
    ind = g.const(idx, "indices") if rng.random() < 0.5 else g.input(idx, "indices")
    g.output(g.op("GatherElements", [g.input(values(rng, xs, dtype)), ind],
                  axis=axis_form(rng, axis, rank) if axis or rng.random() < 0.5 else None))
    return g.case()


@family("scatter_elements", 20)
def gen_scatter_elements(rng):
    reduction = pick(rng, [None, "none", "add", "mul", "max", "min"])
    opset = 18 if reduction in ("max", "min") else int(pick(rng, [16, 18, 21]))
    dtype = pick(rng, (np.float32, np.float32, np.float64, np.int64, np.int32))
    g = Graph(rng, opset)
    rank = int(rng.integers(1, 4))
    xs = dims(rng, rank, 1, 5)
    axis = int(rng.integers(0, rank))
    # Distinct targets along the axis for each position: with duplicates
    # the order of updates is open (reductions too, for floats).
    n = int(rng.integers(1, xs[axis] + 1))
    ishape = [n if d == axis else int(rng.integers(1, xs[d] + 1)) for d in range(rank)]
    idx = np.empty(ishape, np.int64)
    moved = np.moveaxis(idx, axis, -1)
    for pos in np.ndindex(*moved.shape[:-1]):
        moved[pos] = rng.permutation(xs[axis])[:n]
    idx = np.where(rng.random(idx.shape) < 0.3, idx - xs[axis], idx)
    ins = [g.input(values(rng, xs, dtype, scale=2.0)), g.const(idx, "indices"),
           g.input(values(rng, ishape, dtype, scale=2.0), "updates")]
    g.output(g.op("ScatterElements", ins, axis=axis_form(rng, axis, rank), reduction=reduction))
    return g.case()


@family("gather_nd", 20)
def gen_gather_nd(rng):
    dtype = pick(rng, MOVE_DTYPES)
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    rank = int(rng.integers(1, 5))
    xs = dims(rng, rank, 1, 4)
    b = int(rng.integers(0, rank)) if rng.random() < 0.4 else 0
    k = int(rng.integers(1, rank - b + 1))
    mid = dims(rng, int(rng.integers(0, 3)), 1, 3)
    ishape = xs[:b] + mid + [k]
    idx = np.stack([rng.integers(-xs[b + j], xs[b + j], ishape[:-1]) for j in range(k)], axis=-1).astype(np.int64)
    ind = g.const(idx, "indices") if rng.random() < 0.5 else g.input(idx, "indices")
    y = g.op("GatherND", [g.input(values(rng, xs, dtype)), ind], batch_dims=b if b or rng.random() < 0.5 else None)
    g.known_types[y] = (dtype, ishape[:-1] + xs[b + k:])  # onnx infers no shape with batch dims
    g.output(y)
    return g.case()


@family("cumsum", 15)
def gen_cumsum(rng):
    dtype = pick(rng, (np.float32, np.float32, np.float64, np.int64, np.int32))
    g = Graph(rng, int(pick(rng, [14, 17, 21])))
    rank = int(rng.integers(1, 5))
    xs = dims(rng, rank, 1, 6)
    axis = int(rng.integers(-rank, rank))
    ax = np.array(axis, pick(rng, [np.int64, np.int32]))
    g.output(g.op("CumSum", [g.input(values(rng, xs, dtype, scale=2.0)), g.const(ax, "axis")],
                  exclusive=pick(rng, [None, 0, 1]), reverse=pick(rng, [None, 0, 1])))
    return g.case()


@family("trilu", 15)
def gen_trilu(rng):
    dtype = pick(rng, MOVE_DTYPES)
    g = Graph(rng, int(pick(rng, [14, 17, 21])))
    xs = dims(rng, int(rng.integers(2, 5)), 1, 6)
    ins = [g.input(values(rng, xs, dtype))]
    if rng.random() < 0.7:
        ins.append(g.const(np.array(int(rng.integers(-4, 5)), np.int64), "k"))
    g.output(g.op("Trilu", ins, upper=pick(rng, [None, 0, 1])))
    return g.case()


@family("nonzero", 12)
def gen_nonzero(rng):
    """The count depends on the input's values: from a model input the CPU
    engine interprets the graph; from a constant it folds at build."""
    dtype = pick(rng, (np.float32, np.float64, np.int64, np.int32, np.uint8))
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    xs = dims(rng, int(rng.integers(1, 5)), 1, 5)  # (numpy 2 refuses a scalar's nonzero)
    x = (values(rng, xs, dtype) * (rng.random(xs) < 0.5)).astype(dtype)
    if rng.random() < 0.3:
        x.reshape(-1)[:] = 0  # none at all: a 0-wide output
    src = g.const(x, "x") if rng.random() < 0.3 else g.input(x, "x")
    y = g.op("NonZero", [src])
    g.known_types[y] = (np.int64, [x.ndim, int(np.count_nonzero(x))])
    g.output(y)
    return g.case()


@family("onehot", 15)
def gen_onehot(rng):
    """Against numpy: onnxruntime has OneHot kernels for a few type
    combinations only, and onnx's reference none for a rank-1 depth."""
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    depth = int(rng.integers(1, 7))
    ishape = dims(rng, int(rng.integers(1, 4)), 1, 4)
    # Indices in [-depth, depth), some outside (all off values).
    idx = rng.integers(-depth - 1, depth + 1, ishape).astype(pick(rng, [np.int64, np.int32, np.float32]))
    vdtype = pick(rng, (np.float32, np.int64, np.int32))
    vals = values(rng, [2], vdtype)
    rank = len(ishape) + 1
    axis = int(rng.integers(-rank, rank))
    dform = np.array(depth if rng.random() < 0.5 else [depth], pick(rng, [np.int64, np.float32]))
    ins = [g.input(idx, "indices"), g.const(dform, "depth"), g.const(vals, "values")]
    g.output(g.op("OneHot", ins, axis=axis if axis != -1 or rng.random() < 0.5 else None))
    i = np.trunc(idx).astype(np.int64)
    i = np.where(i < 0, i + depth, i)
    hot = np.arange(depth) == i[..., None]
    want = np.moveaxis(np.where(hot, vals[1], vals[0]).astype(vdtype), -1, axis % rank)
    return g.case(oracle="numpy", why="onnxruntime lacks most OneHot type combinations", expected=[want])


@family("topk", 20)
def gen_topk(rng):
    dtype = pick(rng, (np.float32, np.float32, np.float64, np.int64, np.int32))
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    rank = int(rng.integers(1, 4))
    xs = dims(rng, rank, 1, 7)
    axis = int(rng.integers(-rank, rank))
    # Distinct values along the axis: ties leave the order of equal values
    # to the implementation in onnxruntime's kernel.
    n = int(np.prod(xs))
    x = (rng.permutation(n * 3)[:n].reshape(xs) - n).astype(dtype)
    k = int(rng.integers(0, xs[axis] + 1))
    outs = g.op("TopK", [g.input(x), g.const(np.array([k], np.int64), "k")], n_out=2, axis=axis,
                largest=pick(rng, [None, 0, 1]), sorted=pick(rng, [None, 1]))
    g.output(*outs)
    return g.case()


@family("grid_sample", 30)
def gen_grid_sample(rng):
    """2-D at opset 16 (bilinear, bicubic) and 2-D or 3-D at opset 20
    (linear, cubic), every padding, both align_corners; grids reaching
    past the borders so that the padding shows."""
    nd = 2 if rng.random() < 0.6 else 3
    opset = 16 if nd == 2 and rng.random() < 0.4 else int(pick(rng, [20, 21]))
    modes = ["bilinear", "nearest", "bicubic"] if opset < 20 else (
        ["linear", "nearest", "cubic"] if nd == 2 else ["linear", "nearest"])
    # onnxruntime has no float64 kernel at opset 16.
    dtype = np.float32 if opset < 20 else pick(rng, (np.float32, np.float32, np.float64))
    g = Graph(rng, opset)
    xs = [int(rng.integers(1, 3)), int(rng.integers(1, 4))] + [int(rng.integers(1, 6)) for _ in range(nd)]
    outs = [int(rng.integers(1, 5)) for _ in range(nd)]
    grid = rng.uniform(-1.3, 1.3, [xs[0]] + outs + [nd]).astype(dtype)
    mode, padding = pick(rng, modes + [None]), pick(rng, ["zeros", "border", "reflection", None])
    g.output(g.op("GridSample", [g.input(values(rng, xs, dtype)), g.input(grid, "grid")], mode=mode,
                  padding_mode=padding, align_corners=pick(rng, [0, 1, None])))
    if mode in ("cubic", "bicubic") and padding in ("border", "reflection"):
        # The spec's reference clamps or reflects the location, then each
        # tap; onnxruntime's cubic kernel pads its taps otherwise. The
        # reference knows the opset-20 names only.
        return g.alt("onnxruntime's cubic GridSample pads the taps unlike the spec's reference",
                     oracle="reference", mode="cubic")
    return g.case()


@family("attention", 30)
def gen_attention(rng):
    """Attention (opset 23): 3-D or 4-D, as many or fewer key/value heads,
    a boolean or additive mask or a causal one, a cache, softcap, scale."""
    g = Graph(rng, 23)
    three = rng.random() < 0.4
    B, Sq, Skv, D = int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(1, 6)), int(rng.integers(1, 5))
    hkv = int(rng.integers(1, 3))
    hq = hkv * int(rng.integers(1, 3))
    dv = int(rng.integers(1, 5))
    if three:
        q = values(rng, [B, Sq, hq * D], np.float32)
        k = values(rng, [B, Skv, hkv * D], np.float32)
        v = values(rng, [B, Skv, hkv * dv], np.float32)
    else:
        q = values(rng, [B, hq, Sq, D], np.float32)
        k = values(rng, [B, hkv, Skv, D], np.float32)
        v = values(rng, [B, hkv, Skv, dv], np.float32)
    ins = [g.input(q, "q"), g.input(k, "k"), g.input(v, "v")]
    past = int(rng.integers(1, 4)) if rng.random() < 0.3 else 0
    T = Skv + past
    causal = rng.random() < 0.3
    if rng.random() < 0.4 and not causal:
        shape = [Sq, T] if rng.random() < 0.5 else [1, hq if rng.random() < 0.5 else 1, Sq, T]
        if rng.random() < 0.5:
            m = rng.random(shape) < 0.8
            m[..., 0] = True  # no row wholly masked
        else:
            m = values(rng, shape, np.float32)
        ins.append(g.input(m, "mask"))
    elif past:
        ins.append("")
    if past:
        ins.append(g.input(values(rng, [B, hkv, past, D], np.float32), "past_key"))
        ins.append(g.input(values(rng, [B, hkv, past, dv], np.float32), "past_value"))
    attrs = dict(is_causal=1 if causal else None,
                 scale=float(np.float32(rng.uniform(0.2, 1.0))) if rng.random() < 0.3 else None,
                 softcap=float(np.float32(rng.uniform(1.0, 5.0))) if rng.random() < 0.3 else None)
    if three:
        attrs.update(q_num_heads=hq, kv_num_heads=hkv)
    outs = g.op("Attention", ins, n_out=3 if past else 1, **attrs)
    g.output(*(outs if past else [outs]))
    # onnxruntime 1.32 departs from the spec's reference here (grouped
    # heads: the reference tiles the key/value heads, query head h reading
    # h mod kv_num_heads; its softcap and masks): judged by the reference.
    return g.case(oracle="reference", why="onnxruntime's Attention departs from the spec's reference")


@family("gelu_chain", 30)
def gen_gelu_chain(rng):
    """GELU as exporters write it before opset 20, x * 0.5 * (1 + erf(x /
    sqrt 2)), its Muls in each order, which segrt turns into one Gelu
    (graph/pass_gelu.c); and near misses it must leave alone (another
    constant, an intermediate read twice). No float64: onnxruntime has no
    Erf for it and onnx.reference's is float32's."""
    dtype = pick(rng, [np.float32, np.float32, np.float16])
    g = Graph(rng, int(pick(rng, [13, 17, 18])))
    x = g.input(values(rng, dims(rng, int(rng.integers(1, 5)), 1, 6), dtype, scale=2.0))
    c = lambda v: g.const(np.asarray(v, dtype))  # noqa: E731
    miss = rng.random() < 0.2
    if rng.random() < 0.5:
        t = g.op("Div", [x, c(np.sqrt(2.0) if not miss else 1.3)])
    else:
        t = g.op("Mul", [x, c(np.sqrt(0.5))] if rng.random() < 0.5 else [c(np.sqrt(0.5)), x])
    e = g.op("Erf", [t])
    a = g.op("Add", [e, c(1.0)] if rng.random() < 0.5 else [c(1.0), e])
    form = int(rng.integers(0, 3))
    if form == 0:
        y = g.op("Mul", [g.op("Mul", [x, a]), c(0.5)])
    elif form == 1:
        y = g.op("Mul", [g.op("Mul", [a, c(0.5)]), x])
    else:
        y = g.op("Mul", [a, g.op("Mul", [x, c(0.5)])])
    g.output(g.op("Relu", [y]) if rng.random() < 0.3 else y)
    if rng.random() < 0.1:
        g.output(a)
    return g.case()


@family("attention_chain", 40)
def gen_attention_chain(rng):
    """Attention as exporters write it, which segrt fuses into one node
    (graph/pass_attention.c): MatMul(Q, K^T) with K^T from a Transpose or
    given, scalar scales on Q or on the scores, additive masks that
    broadcast, a Reshape that splits a batch dim around a mask (Swin's
    shifted windows), Softmax, MatMul with V; and near misses the pass must
    leave alone (a scale after a mask, a Softmax over another axis or read
    twice)."""
    dtype = pick(rng, [np.float32, np.float32, np.float32, np.float64])
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    nb = int(rng.integers(0, 4))
    batch = dims(rng, nb, 1, 3)
    split = nb >= 1 and rng.random() < 0.3
    if split:
        batch[0] = 2 * int(rng.integers(1, 3))
    S, L, D, Dv = (int(rng.integers(1, 7)) for _ in range(4))
    q = g.input(values(rng, batch + [S, D], dtype), "q")
    if rng.random() < 0.3:
        q = g.op("Mul", [q, g.const(np.asarray(rng.uniform(0.2, 1.5), dtype))])
    if rng.random() < 0.6:
        kt = g.op("Transpose", [g.input(values(rng, batch + [L, D], dtype), "k")],
                  perm=list(range(nb)) + [nb + 1, nb])
    else:
        kt = g.input(values(rng, batch + [D, L], dtype), "kt")
    s = g.op("MatMul", [q, kt])
    full = batch + [S, L]

    def mask(shape):
        rank = int(rng.integers(1, len(shape) + 1))
        m = [d if rng.random() < 0.6 else 1 for d in shape[len(shape) - rank:]]
        return g.param(values(rng, m, dtype, scale=2.0), "m", p_input=0.3)

    if rng.random() < 0.5:
        s = g.op(pick(rng, ["Mul", "Div"]), [s, g.const(np.asarray(rng.uniform(0.3, 2.0), dtype))])
    if rng.random() < 0.5:
        s = g.op("Add", [s, mask(full)] if rng.random() < 0.7 else [mask(full), s])
    if split:
        fine = [2, batch[0] // 2] + full[1:]
        s = g.op("Reshape", [s, g.const(np.array(fine, np.int64))])
        s = g.op("Add", [s, mask(fine)])
        s = g.op("Reshape", [s, g.const(np.array(full, np.int64))])
    if rng.random() < 0.15:  # a scale after the masks: not fused
        s = g.op("Mul", [s, g.const(np.asarray(0.5, dtype))])
    axis = -1 if rng.random() < 0.85 else int(rng.integers(0, nb + 2))
    p = g.op("Softmax", [s], axis=axis)
    # V positive: the weighted sums do not cancel (a sum of terms near 1
    # that cancels to 0.006 loses float32's digits in any order).
    y = g.op("MatMul", [p, g.input(values(rng, batch + [L, Dv], dtype, lo=0.5, hi=1.5), "v")])
    g.output(g.op("Relu", [y]) if rng.random() < 0.3 else y)
    if rng.random() < 0.1:
        g.output(p)
    return g.case()


@family("quant", 20)
def gen_quant(rng):
    """QuantizeLinear and DequantizeLinear, a scale per tensor or per axis."""
    op = pick(rng, ["QuantizeLinear", "DequantizeLinear"])
    g = Graph(rng, int(pick(rng, [13, 19, 21])))
    rank = int(rng.integers(1, 5))
    xs = dims(rng, rank, 1, 5)
    axis = int(rng.integers(-rank, rank))
    per_axis = rng.random() < 0.5
    n = xs[axis] if per_axis else 1
    scale = rng.uniform(0.01, 0.5, n).astype(np.float32)
    qtype = pick(rng, [np.uint8, np.int8])
    lo, hi = (0, 255) if qtype == np.uint8 else (-128, 127)
    zp = rng.integers(lo // 2, hi // 2 + 1, n).astype(qtype)
    shape = [n] if per_axis else []
    ins = []
    if op == "QuantizeLinear":
        x = values(rng, xs, np.float32, scale=40.0)
        ins = [g.input(x), g.const(scale.reshape(shape), "scale")]
    else:
        x = rng.integers(lo, hi + 1, xs).astype(qtype)
        ins = [g.input(x), g.const(scale.reshape(shape), "scale")]
    if rng.random() < 0.8 or op == "DequantizeLinear" and qtype == np.int8:
        ins.append(g.const(zp.reshape(shape), "zero_point"))
    elif op == "QuantizeLinear" and qtype == np.int8:
        qtype = np.uint8  # no zero point: uint8
    g.output(g.op(op, ins, axis=axis if per_axis else None))
    return g.case()


# ---------------------------------------------------------------------------
# NaN and infinity: IEEE flow-through, compared by position

NAN_OPS = ["Add", "Sub", "Mul", "Div", "Max", "Min", "Relu", "LeakyRelu", "Sqrt", "Exp", "Abs",
           "Neg", "Sigmoid", "Tanh", "Log", "Reciprocal", "Floor", "Ceil", "MaxPool", "Softmax",
           "Conv", "Clip", "IsNaN", "IsInf", "Sign", "Round"]


def with_specials(rng, shape, dtype=np.float32, p=0.2):
    """Normal data with NaN, +Inf, -Inf (and zeros, for Log, Div and
    Reciprocal) at random places."""
    x = values(rng, shape, dtype, scale=2.0)
    kinds = rng.choice(5, size=x.shape, p=[1 - p, p / 4, p / 4, p / 4, p / 4])
    x = np.where(kinds == 1, np.nan, x)
    x = np.where(kinds == 2, np.inf, x)
    x = np.where(kinds == 3, -np.inf, x)
    x = np.where(kinds == 4, 0.0, x)
    return x.astype(dtype)


def np_max_pool(x, k, s):
    """MaxPool without padding, NaN propagating as np.max does."""
    nsp = len(k)
    out = [(n - kk) // ss + 1 for n, kk, ss in zip(x.shape[2:], k, s)]
    y = np.empty(list(x.shape[:2]) + out, x.dtype)
    for o in np.ndindex(*out):
        win = tuple(slice(oi * si, oi * si + ki) for oi, si, ki in zip(o, s, k))
        y[(slice(None), slice(None)) + o] = np.max(x[(slice(None), slice(None)) + win],
                                                    axis=tuple(range(2, 2 + nsp)))
    return y


@family("nan_inf", 200)
def gen_nan_inf(rng):
    op = pick(rng, NAN_OPS)
    g = Graph(rng, int(pick(rng, [13, 17, 21])))
    if op in ("Add", "Sub", "Mul", "Div", "Max", "Min"):
        sa, sb = bcast_shapes(rng, 2)
        g.output(g.op(op, [g.input(with_specials(rng, sa)), g.input(with_specials(rng, sb))]))
    elif op in ("MaxPool", "Conv"):
        nsp = int(rng.integers(1, 3))
        c = int(rng.integers(1, 4))
        x = g.input(with_specials(rng, [int(rng.integers(1, 3)), c] + [int(rng.integers(3, 8)) for _ in range(nsp)], p=0.08))
        k = [int(rng.integers(1, 4)) for _ in range(nsp)]
        s = [int(rng.integers(1, 3)) for _ in range(nsp)]
        if op == "MaxPool":
            g.output(g.op("MaxPool", [x], kernel_shape=k, strides=s))
            # onnxruntime's MaxPool drops NaN in some windows and keeps it
            # in others (its kernels differ): IEEE flow-through, from numpy.
            return g.case(oracle="numpy", why="onnxruntime's MaxPool does not propagate NaN "
                          "consistently", expected=[np_max_pool(g.feeds[x], k, s)])
        else:
            w = g.const(values(rng, [int(rng.integers(1, 4)), c] + k, np.float32, scale=0.5))
            g.output(g.op("Conv", [x, w], strides=s, pads=[int(v) for v in rng.integers(0, 2, 2 * nsp)]))
    elif op == "Softmax":
        rank = int(rng.integers(1, 4))
        g.output(g.op("Softmax", [g.input(with_specials(rng, dims(rng, rank, 1, 6), p=0.1))],
                      axis=int(rng.integers(-rank, rank))))
    elif op == "Clip":
        lo, hi = sorted(values(rng, [2], np.float32).tolist())
        g.output(g.op("Clip", [g.input(with_specials(rng, dims(rng, int(rng.integers(0, 4))))),
                               g.const(np.array(lo, np.float32)), g.const(np.array(hi, np.float32))]))
    else:
        g.output(g.op(op, [g.input(with_specials(rng, dims(rng, int(rng.integers(0, 4)))))]))
    return g.case()


# ---------------------------------------------------------------------------
# small networks: random chains and DAGs of the ops segmentation models use


class Net:
    """A graph under construction whose tensors are all [N, C, *spatial]
    float32, with shapes tracked so that every op drawn fits."""

    def __init__(self, rng, opset):
        self.g = Graph(rng, opset)
        self.rng = rng
        self.shapes = {}  # tensor -> shape
        self.order = []  # tensors in creation order
        self.nodes = 0

    def add(self, name, shape):
        self.shapes[name] = list(shape)
        self.order.append(name)
        # onnx's inference stops at function ops (GroupNormalization): the
        # tracked shapes fill in.
        self.g.known_types[name] = (np.float32, list(shape))
        return name

    def w(self, shape, scale=None):
        fan_in = int(np.prod(shape[1:])) or 1
        s = scale if scale is not None else 1.0 / np.sqrt(fan_in)
        return self.g.param(values(self.rng, shape, np.float32, scale=s), "w", p_input=0.1)

    def partner(self, x, same_shape=True):
        """An earlier tensor that can be combined with x (same N and spatial
        dims, and same channels when same_shape), or None."""
        sx = self.shapes[x]
        cands = [t for t in self.order if t != x and self.shapes[t][0] == sx[0]
                 and self.shapes[t][2:] == sx[2:] and (not same_shape or self.shapes[t][1] == sx[1])]
        return pick(self.rng, cands) if cands else None


def net_step(net, x):
    """Appends one block after x (sometimes also reading an earlier
    tensor); returns its output."""
    rng, g = net.rng, net.g
    n, c, *sp = net.shapes[x]
    nsp = len(sp)
    choices = ["conv", "conv", "norm", "act", "act", "pool", "up", "concat", "add", "mul_c",
               "resize", "pad_slice", "softmax", "split_concat", "transpose_pair", "se",
               "reshape_pair", "identity", "clip", "prelu"]
    op = pick(rng, choices)
    if op == "conv":
        # Now and then wide enough for oneDNN's blocked layouts.
        cout = int(rng.integers(2, 9)) if rng.random() < 0.75 else int(pick(rng, [16, 24, 32]))
        k = int(pick(rng, [1, 3, 3]))
        stride = 2 if min(sp) >= 4 and rng.random() < 0.25 else 1
        group = 1
        if rng.random() < 0.2 and c % 2 == 0 and cout % 2 == 0:
            group = 2
        w = net.w([cout, c // group] + [k] * nsp)
        b = g.param(values(rng, [cout], np.float32, scale=0.1), "b", p_input=0.1)
        if rng.random() < 0.3 and k == 3:
            y = g.op("Conv", [x, w, b], auto_pad="SAME_UPPER", strides=[stride] * nsp, group=group)
        else:
            y = g.op("Conv", [x, w, b], pads=[k // 2] * 2 * nsp, strides=[stride] * nsp,
                     kernel_shape=[k] * nsp, group=group)
        out = [-(-s // stride) for s in sp]
        net.nodes += 1
        return net.add(y, [n, cout] + out)
    if op == "norm":
        kind = pick(rng, ["InstanceNormalization", "BatchNormalization", "GroupNormalization"])
        if kind == "GroupNormalization" and (g.opset < 21 or c % 2):
            kind = "InstanceNormalization"
        if kind == "BatchNormalization":
            ps = [values(rng, [c], np.float32), values(rng, [c], np.float32, scale=0.3),
                  values(rng, [c], np.float32, scale=0.3), values(rng, [c], np.float32, 0.5, 2.0)]
            y = g.op(kind, [x] + [g.const(p) for p in ps])
        elif kind == "GroupNormalization":
            y = g.op(kind, [x, g.const(values(rng, [c], np.float32)), g.const(values(rng, [c], np.float32))],
                     num_groups=int(pick(rng, [1, 2])) if c % 2 == 0 else 1)
            g.known_types[y] = (np.float32, [n, c] + sp)
        else:
            y = g.op(kind, [x, g.const(values(rng, [c], np.float32)), g.const(values(rng, [c], np.float32))])
        net.nodes += 1
        return net.add(y, [n, c] + sp)
    if op == "act":
        kind = pick(rng, ["LeakyRelu", "Relu", "Sigmoid", "Tanh", "Elu", "HardSwish", "Gelu", "Softplus"])
        if (kind == "Gelu" and g.opset < 20) or (kind == "HardSwish" and g.opset < 14):
            kind = "LeakyRelu"
        attrs = {"alpha": 0.01 if rng.random() < 0.5 else 0.2} if kind == "LeakyRelu" else {}
        net.nodes += 1
        return net.add(g.op(kind, [x], **attrs), [n, c] + sp)
    if op == "clip":
        net.nodes += 1
        return net.add(g.op("Clip", [x, g.const(np.array(-1.0, np.float32)), g.const(np.array(1.5, np.float32))]), [n, c] + sp)
    if op == "prelu":
        slope = g.const(values(rng, [c] + [1] * nsp, np.float32, scale=0.3))
        net.nodes += 1
        return net.add(g.op("PRelu", [x, slope]), [n, c] + sp)
    if op == "pool":
        if min(sp) >= 2 and rng.random() < 0.6:
            kind = pick(rng, ["MaxPool", "AveragePool"])
            y = g.op(kind, [x], kernel_shape=[2] * nsp, strides=[2] * nsp)
            out = [s // 2 for s in sp]
        else:
            kind = pick(rng, ["MaxPool", "AveragePool"])
            y = g.op(kind, [x], kernel_shape=[3] * nsp, pads=[1] * 2 * nsp, strides=[1] * nsp)
            out = sp
        net.nodes += 1
        return net.add(y, [n, c] + out)
    if op == "up":
        cout = int(rng.integers(2, 9)) if rng.random() < 0.75 else 16
        w = net.w([c, cout] + [2] * nsp)
        y = g.op("ConvTranspose", [x, w], kernel_shape=[2] * nsp, strides=[2] * nsp)
        net.nodes += 1
        return net.add(y, [n, cout] + [2 * s for s in sp])
    if op == "resize":
        mode = pick(rng, ["nearest", "linear"])
        scales = g.const(np.array([1, 1] + [2.0] * nsp, np.float32), "scales")
        y = g.op("Resize", [x, "", scales], mode=mode,
                 coordinate_transformation_mode=pick(rng, ["asymmetric", "half_pixel", "align_corners"])
                 if mode == "linear" else "asymmetric", nearest_mode="floor" if mode == "nearest" else None)
        net.nodes += 1
        return net.add(y, [n, c] + [2 * s for s in sp])
    if op in ("concat", "add"):
        other = net.partner(x, same_shape=op == "add")
        if other is None:
            return net_step(net, x)
        if op == "concat":
            y = g.op("Concat", [other, x] if rng.random() < 0.5 else [x, other], axis=1)
            net.nodes += 1
            return net.add(y, [n, c + net.shapes[other][1]] + sp)
        net.nodes += 1
        return net.add(g.op(pick(rng, ["Add", "Mul", "Sub"]), [x, other]), [n, c] + sp)
    if op == "mul_c":
        # A per-channel constant, broadcast over N and the spatial dims.
        cst = g.const(values(rng, [c] + [1] * nsp, np.float32))
        net.nodes += 1
        return net.add(g.op(pick(rng, ["Mul", "Add"]), [x, cst]), [n, c] + sp)
    if op == "pad_slice":
        # Pad one spatial dim, then crop it back somewhere else.
        d = int(rng.integers(0, nsp))
        pads = [0] * (2 * (nsp + 2))
        pads[2 + d] = 1
        pads[nsp + 4 + d] = int(rng.integers(0, 2))
        mode = pick(rng, ["constant", "reflect", "edge"]) if sp[d] >= 2 else "constant"
        y = g.op("Pad", [x, g.const(np.array(pads, np.int64))], mode=mode)
        grown = sp[d] + 1 + pads[nsp + 4 + d]
        start = int(rng.integers(0, grown - sp[d] + 1))
        z = g.op("Slice", [y, g.const(np.array([start], np.int64)), g.const(np.array([start + sp[d]], np.int64)),
                           g.const(np.array([2 + d], np.int64))])
        net.nodes += 2
        return net.add(z, [n, c] + sp)
    if op == "softmax":
        net.nodes += 1
        return net.add(g.op("Softmax", [x], axis=1), [n, c] + sp)
    if op == "split_concat" and c >= 2:
        a = int(rng.integers(1, c))
        p, q = g.op("Split", [x, g.const(np.array([a, c - a], np.int64))], n_out=2, axis=1)
        net.nodes += 2
        return net.add(g.op("Concat", [q, p], axis=1), [n, c] + sp)
    if op == "transpose_pair":
        # Channels last and back, with an elementwise op in between.
        perm = [0] + list(range(2, nsp + 2)) + [1]
        inv = [int(i) for i in np.argsort(perm)]
        t = g.op("Transpose", [x], perm=perm)
        t = g.op("Sigmoid", [t])
        net.nodes += 3
        return net.add(g.op("Transpose", [t], perm=inv), [n, c] + sp)
    if op == "se":
        # Squeeze and excitation: GlobalAveragePool, 1x1 conv, Sigmoid, Mul.
        p = g.op("GlobalAveragePool", [x])
        s = g.op("Conv", [p, net.w([c, c] + [1] * nsp)])
        s = g.op("Sigmoid", [s])
        net.nodes += 4
        return net.add(g.op("Mul", [x, s]), [n, c] + sp)
    if op == "reshape_pair":
        # Flatten the spatial dims, normalize over them, restore.
        flat = g.op("Reshape", [x, g.const(np.array([n, c, -1], np.int64))])
        flat = g.op("Softmax", [flat], axis=-1) if rng.random() < 0.5 or g.opset < 17 else g.op(
            "LayerNormalization", [flat, g.const(values(rng, [int(np.prod(sp))], np.float32))], axis=-1)
        net.nodes += 3
        return net.add(g.op("Reshape", [flat, g.const(np.array([0, 0] + sp, np.int64))]), [n, c] + sp)
    if op == "identity":
        net.nodes += 1
        return net.add(g.op(pick(rng, ["Identity", "Dropout"]), [x]), [n, c] + sp)
    return net_step(net, x)


@family("graph", 120)
def gen_graph(rng):
    """A random network of 3 to 8 nodes (a block may add a few more) on a
    small 1-, 2- or 3-D input, with skip connections to earlier tensors."""
    opset = int(pick(rng, [13, 17, 17, 18, 21]))
    net = Net(rng, opset)
    nsp = int(pick(rng, [1, 2, 2, 2, 3]))
    side = {1: [8, 12, 16, 24], 2: [4, 8, 12], 3: [4, 8]}[nsp]
    shape = [int(rng.integers(1, 3)), int(rng.integers(1, 5))] + [int(pick(rng, side)) for _ in range(nsp)]
    x = net.add(net.g.input(values(rng, shape, np.float32), "image",
                            sym={0: "N"} if rng.random() < 0.3 else None), shape)
    target = int(rng.integers(3, 9))
    cur = x
    while net.nodes < target:
        # Mostly a chain, sometimes a branch from an earlier tensor.
        src = cur if rng.random() < 0.8 else pick(rng, net.order)
        # Keep the tensors small: the reference backend is plain C.
        if int(np.prod(net.shapes[src])) > 12000:
            src = cur
        cur = net_step(net, src)
        while int(np.prod(net.shapes[cur])) > 20000:
            n, c, *sp = net.shapes[cur]
            cur = net.add(net.g.op("MaxPool", [cur], kernel_shape=[2] * len(sp), strides=[2] * len(sp)),
                          [n, c] + [s // 2 for s in sp])
    net.g.output(cur)
    extra = [t for t in net.order[1:] if t != cur]
    if extra and rng.random() < 0.3:
        net.g.output(pick(rng, extra))  # an intermediate, which passes must keep
    net.g.threads = int(pick(rng, [0, 0, 1, 2])) or None
    # The L2 bound stays; elementwise, chains compound rounding, and a
    # normalization after a near-constant tensor (a softmax over many
    # elements, a saturated sigmoid) magnifies it where values are small.
    return net.g.case(rtol=1e-3, atol=1e-4, threads=net.g.threads)


# Activations a convolution's output may flow through, each drawn as the
# next link of a chain that segrt's CPU plan fuses into the convolution.
FUSABLE = ["Relu", "LeakyRelu", "Sigmoid", "Tanh", "Elu", "Abs", "Neg", "HardSwish", "Gelu",
           "Clip", "PRelu", "Add", "Add", "Exp"]


@family("fusion", 180)
def gen_fusion(rng):
    """A convolution (or ConvTranspose) followed by a chain of activations,
    PRelu and residual Adds, on channel counts wide enough for oneDNN's
    blocked layouts; parts of the chain may also be graph outputs or have
    a second reader (either stops fusion there), and the input may carry
    NaN and infinities."""
    opset = int(pick(rng, [17, 20, 21]))
    g = Graph(rng, opset)
    nsp = int(pick(rng, [1, 2, 2, 2, 3]))
    side = {1: (6, 24), 2: (4, 12), 3: (3, 6)}[nsp]
    n = int(rng.integers(1, 3))
    c = int(pick(rng, [1, 3, 8, 16, 24, 32]))
    sp = [int(rng.integers(*side)) for _ in range(nsp)]
    specials = rng.random() < 0.15
    data = with_specials(rng, [n, c] + sp, p=0.05) if specials else values(rng, [n, c] + sp, np.float32)
    x = g.input(data, "x")
    k = int(pick(rng, [4, 8, 16, 32]))
    transposed = rng.random() < 0.2
    group = 1
    if not transposed and rng.random() < 0.2 and c % 2 == 0 and k % 2 == 0:
        group = int(pick(rng, [2, c] if c == k else [2]))
    scale = 0.5 / np.sqrt(c * 3 ** nsp)
    if transposed:
        w = g.const(values(rng, [c, k // group] + [2] * nsp, np.float32, scale=scale))
        y = g.op("ConvTranspose", [x, w], strides=[2] * nsp)
        out_sp = [2 * s for s in sp]
    else:
        ks = int(pick(rng, [1, 3, 3]))
        w = g.const(values(rng, [k, c // group] + [ks] * nsp, np.float32, scale=scale))
        ins = [x, w] + ([g.const(values(rng, [k], np.float32, scale=0.2))] if rng.random() < 0.7 else [])
        y = g.op("Conv", ins, pads=[ks // 2] * 2 * nsp, group=group, kernel_shape=[ks] * nsp)
        out_sp = sp
    shape = [n, k] + out_sp
    # Residual candidates: values of the conv output's shape computed before
    # it, in the plain layout (a graph input, a non-conv op's output), or a
    # second convolution's (blocked) output.
    residuals = []
    if rng.random() < 0.5:
        residuals.append(g.input(values(rng, shape, np.float32), "r"))
    if c == k and not transposed and rng.random() < 0.5:
        residuals.append(g.op("Sigmoid", [x]))
    if rng.random() < 0.4:
        w2 = g.const(values(rng, [k, c] + [1] * nsp, np.float32, scale=scale))
        residuals.append(g.op("Conv", [x, w2]) if not transposed else
                         g.op("ConvTranspose", [x, g.const(values(rng, [c, k] + [2] * nsp, np.float32, scale=scale))],
                              strides=[2] * nsp))
    chain = [y]
    for _ in range(int(rng.integers(1, 5))):
        op = pick(rng, FUSABLE)
        cur = chain[-1]
        if op == "Add":
            other = pick(rng, residuals) if residuals else cur
            if other == cur and rng.random() < 0.5:
                other = g.const(values(rng, [k] + [1] * nsp, np.float32))  # a bias, broadcast
            nxt = g.op("Add", [cur, other] if rng.random() < 0.5 else [other, cur])
        elif op == "PRelu":
            sshape = pick(rng, [[k] + [1] * nsp, [1], [], shape[1:]])
            nxt = g.op("PRelu", [cur, g.const(values(rng, sshape, np.float32, scale=0.3))])
        elif op == "Clip":
            lo, hi = sorted(float(v) for v in rng.uniform(-2, 2, 2))
            if rng.random() < 0.15:
                lo, hi = hi, lo  # min > max
            nxt = g.op("Clip", [cur, g.const(np.array(lo, np.float32)), g.const(np.array(hi, np.float32))]
                       if rng.random() < 0.8 else [cur, "", g.const(np.array(hi, np.float32))])
        elif op == "Gelu" and opset < 20:
            nxt = g.op("Tanh", [cur])
        elif op == "Exp":
            nxt = g.op("Exp", [g.op("Tanh", [cur])])  # bounded: no overflow
        else:
            attrs = {}
            if op == "LeakyRelu":
                attrs["alpha"] = float(pick(rng, [0.01, 0.2, 1.5]))
            if op == "Elu":
                attrs["alpha"] = float(pick(rng, [1.0, 0.5]))
            if op == "Gelu":
                attrs["approximate"] = pick(rng, ["none", "tanh"])
            nxt = g.op(op, [cur], **attrs)
        chain.append(nxt)
    g.output(chain[-1])
    for v in chain[:-1]:
        r = rng.random()
        if r < 0.15:
            g.output(v)  # an intermediate output: fusion must keep it
        elif r < 0.25:
            g.output(g.op("Mul", [v, v]))  # a second reader
    case = g.case(threads=int(pick(rng, [1, 2, 2, 0])) or None)
    return case


# ---------------------------------------------------------------------------
# shape arithmetic: what exporters write around the layers, computed from
# Shape of tensors whose dims are symbolic in the model


def i64(v):
    return np.array(v, np.int64)


def shape_block(g, rng, x, shape):
    """One block of shape arithmetic over x (dims `shape`, rank 4 or 3);
    returns (output, its shape)."""
    rank = len(shape)
    kind = pick(rng, ["flatten_softmax", "merge_dims", "expand", "const_of_shape", "resize_sizes",
                      "size_norm", "range_add", "slice_end", "pad_to", "split_half"])
    s = g.op("Shape", [x])
    if kind == "flatten_softmax":
        nc = g.op("Slice", [s, g.const(i64([0])), g.const(i64([2]))])
        flat = g.op("Reshape", [x, g.op("Concat", [nc, g.const(i64([-1]))], axis=0)])
        sm = g.op("Softmax", [flat], axis=-1)
        return g.op("Reshape", [sm, s]), shape
    if kind == "merge_dims":
        # [N, C, H*W...] from gathered dims, then back through Shape(x).
        dims_ = [g.op("Gather", [s, g.const(i64(d))], axis=0) for d in range(rank)]
        tail = dims_[2]
        for d in dims_[3:]:
            tail = g.op("Mul", [tail, d])
        new = g.op("Concat", [g.op("Unsqueeze", [v, g.const(i64([0]))]) for v in dims_[:2] + [tail]], axis=0)
        t = g.op("Transpose", [g.op("Reshape", [x, new])], perm=[0, 2, 1])
        t = g.op("Tanh", [t])
        t = g.op("Transpose", [t], perm=[0, 2, 1])
        return g.op("Reshape", [t, s]), shape
    if kind == "expand":
        bias = g.const(values(rng, [1, shape[1]] + [1] * (rank - 2), np.float32))
        return g.op("Add", [x, g.op("Expand", [bias, s])]), shape
    if kind == "const_of_shape":
        one = numpy_helper.from_array(np.array([0.5], np.float32))
        return g.op("Mul", [x, g.op("ConstantOfShape", [s], value=one)]), shape
    if kind == "resize_sizes":
        nc = g.op("Slice", [s, g.const(i64([0])), g.const(i64([2]))])
        sp = g.op("Slice", [s, g.const(i64([2])), g.const(i64([rank]))])
        sizes = g.op("Concat", [nc, g.op("Mul", [sp, g.const(i64([2]))])], axis=0)
        y = g.op("Resize", [x, "", "", sizes], mode="nearest",
                 coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        return y, shape[:2] + [2 * d for d in shape[2:]]
    if kind == "size_norm":
        n = g.op("Cast", [g.op("Size", [x])], to=TP.FLOAT)
        return g.op("Div", [g.op("Mul", [x, g.const(np.array(100.0, np.float32))]), n]), shape
    if kind == "range_add":
        last = g.op("Gather", [s, g.const(i64(rank - 1))], axis=0)
        r = g.op("Range", [g.const(i64(0)), last, g.const(i64(1))])
        return g.op("Add", [x, g.op("Cast", [r], to=TP.FLOAT)]), shape
    if kind == "slice_end" and shape[-1] >= 2:
        last = g.op("Gather", [s, g.const(i64([rank - 1]))], axis=0)
        end = g.op("Sub", [last, g.const(i64([1]))])
        return g.op("Slice", [x, g.const(i64([0])), end, g.const(i64([rank - 1]))]), shape[:-1] + [shape[-1] - 1]
    if kind == "pad_to":
        # Pad the last dim up to a multiple of 4, as UNet exports do: the
        # amount is (W + 3) / 4 * 4 - W.
        last = g.op("Gather", [s, g.const(i64([rank - 1]))], axis=0)
        four = g.const(i64([4]))
        up = g.op("Mul", [g.op("Div", [g.op("Add", [last, g.const(i64([3]))]), four]), four])
        amount = g.op("Sub", [up, last])
        zeros = g.const(i64([0] * (2 * rank - 1)))
        pads = g.op("Concat", [zeros, amount], axis=0)
        return g.op("Pad", [x, pads]), shape[:-1] + [-(-shape[-1] // 4) * 4]
    if kind == "split_half" and shape[1] % 2 == 0:
        c = g.op("Gather", [s, g.const(i64([1]))], axis=0)
        half = g.op("Div", [c, g.const(i64([2]))])
        a, b = g.op("Split", [x, g.op("Concat", [half, half], axis=0)], n_out=2, axis=1)
        return g.op("Concat", [b, g.op("Sigmoid", [a])], axis=1), shape
    return g.op("Relu", [x]), shape


@family("shape_arith", 40)
def gen_shape_arith(rng):
    """Chains of shape arithmetic (Shape, Gather, Slice, Concat, Reshape,
    Expand, ConstantOfShape, Size, Range, Pad amounts, Split sizes) on an
    input whose dims the model leaves symbolic, as TorchScript exports
    have them: segrt must work the values out once the dims are bound."""
    g = Graph(rng, int(pick(rng, [13, 17, 18, 21])))
    rank = int(pick(rng, [3, 4, 4]))
    shape = [int(rng.integers(1, 3)), int(pick(rng, [2, 3, 4]))] + [int(rng.integers(2, 7)) for _ in range(rank - 2)]
    sym = {i: f"d{i}" for i in range(rank) if i != 1 and rng.random() < 0.8}
    x = g.input(values(rng, shape, np.float32), "x", sym=sym)
    for _ in range(int(rng.integers(1, 4))):
        x, shape = shape_block(g, rng, x, shape)
    g.output(x)
    # onnx's inference loses shapes computed from symbolic dims.
    g.known_types[x] = (np.float32, shape)
    return g.case()
