"""bench/corpus_vs_pytorch/layers.py widens a network's outputs to find
where its numbers depart: with_outputs() on a test model adds every LeakyRelu's
output (once, in graph order, after the model's own), and the widened
model runs on segrt's CPU engine with each added value equal to
onnxruntime's and the original output unchanged, so the tool's
comparison on the GPU machine reads what it says it reads."""

import numpy as np
import onnx
import onnxruntime as ort

from conftest import load_bench, run_segrt


def test_with_outputs_adds_each_value_once_and_runs(models, tmp_path):
    lay = load_bench("corpus_vs_pytorch/layers.py")
    src = models / "basicunet2d_tiny.onnx"
    g = onnx.load(str(src))
    relus = [n.output[0] for n in g.graph.node if n.op_type == "LeakyRelu"]
    assert relus, "the test model has LeakyRelu nodes"
    own = [o.name for o in g.graph.output]
    wide = tmp_path / "wide.onnx"
    names = lay.with_outputs(src, wide, {"LeakyRelu", "NoSuchOp"})
    assert names == own + [r for r in relus if r not in own]
    lay.with_outputs(wide, tmp_path / "again.onnx", {"LeakyRelu"})  # already outputs: not added twice
    assert [o.name for o in onnx.load(str(tmp_path / "again.onnx")).graph.output] == names
    in_name = g.graph.input[0].name
    x = np.load(models / "basicunet2d_tiny.in.npy").astype(np.float32)
    ref = dict(zip(names, ort.InferenceSession(str(wide)).run(names, {in_name: x})))
    np.save(tmp_path / "x.npy", x)
    # segrt's CPU engine on the widened model, through the command line (a
    # sanitized build's library does not load into a plain Python)
    args = ["run", wide, "--input", f"{in_name}={tmp_path / 'x.npy'}", "--device", "cpu"]
    for i, name in enumerate(names):
        args += ["--output", f"{name}={tmp_path / f'y{i}.npy'}"]
    run_segrt(*args, check=0)
    for i, name in enumerate(names):
        assert lay.rel_l2(np.load(tmp_path / f"y{i}.npy"), ref[name]) < 1e-5, name
    assert lay.rel_l2(np.load(tmp_path / "y0.npy"), np.load(models / "basicunet2d_tiny.out.npy")) < 1e-5
    assert lay.rel_l2(ref[relus[0]] + 1.0, ref[relus[0]]) > 0  # the measure sees a difference
