"""Where a build's time went (segrt_engine_build_report), as `segrt build`
prints it after the plan's line: the whole, the graph passes and the
plans (which cannot take longer than the whole), and the nodes slowest to
build, slowest first, each a node of the model with its operator. The
seconds themselves are wall time and never judged; their order and sums
are."""
import re

import onnx
import pytest

from conftest import run_segrt

REPORT = re.compile(r"^build ([0-9.]+) s: graph passes ([0-9.]+) s, plans ([0-9.]+) s$")
NODE = re.compile(r"^(.+) \(([A-Za-z]+)\) ([0-9.]+) s$")


@pytest.fixture
def tiny(models):
    return models / "basicunet2d_tiny.onnx"


def test_build_prints_where_the_time_went(tiny, tmp_path):
    p = run_segrt("build", tiny, "-o", tmp_path / "t.plan", "--device", "cpu", "--shape", "image=1x1x64x64", check=0)
    lines = p.stdout.splitlines()
    heads = [REPORT.match(line) for line in lines]
    assert sum(m is not None for m in heads) == 1, p.stdout
    total, graph, plans = (float(x) for x in next(m for m in heads if m).groups())
    # Printed with two decimals each: a part may round above the whole by 0.01.
    assert graph <= total + 0.011 and plans <= total + 0.011 and graph + plans <= total + 0.021, p.stdout

    slow = [line for line in lines if line.startswith("  slowest to build:")]
    assert len(slow) == 1, p.stdout
    entries = [NODE.match(e.strip()) for e in slow[0].split(":", 1)[1].split(", ")]
    assert entries and all(entries), slow[0]
    model = onnx.load(str(tiny))
    ops = {n.name: n.op_type for n in model.graph.node}
    seconds = [float(m.group(3)) for m in entries]
    assert seconds == sorted(seconds, reverse=True), slow[0]
    assert sum(seconds) <= plans + 0.001 * len(seconds) + 0.011, p.stdout
    for m in entries:
        # Nodes the passes made have names of their own; the rest are the model's, with its operator.
        if m.group(1) in ops:
            assert m.group(2) == ops[m.group(1)], m.group(0)
    assert any(m.group(1) in ops for m in entries), slow[0]
    assert not any("cuDNN" in line for line in lines), "a CPU build has no cuDNN searches"


def test_quiet_build_prints_nothing(tiny, tmp_path):
    p = run_segrt("build", tiny, "-o", tmp_path / "t.plan", "--device", "cpu", "--shape", "image=1x1x64x64", "-q",
                  check=0)
    assert p.stdout == "", p.stdout
