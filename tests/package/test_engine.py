"""segrt.Engine against the segrt command on the same models and inputs:
numpy in and out, bit for bit on the CPU; run() and its dicts, out=,
the descriptions of inputs and outputs, shapes and plan files, context
managers and close."""
import numpy as np
import onnx
import pytest

import segrt
from conftest import SANITIZED, run_segrt, tiny_input

MODELS = ["basicunet2d_tiny", "unet3d_spleen"] if SANITIZED else ["basicunet2d_tiny", "basicunet2d_ts",
                                                                   "unet3d_spleen"]


@pytest.mark.parametrize("name", MODELS)
def test_round_trip_is_the_cli_bit_for_bit(models, tmp_path, name):
    x = np.load(models / f"{name}.in.npy")
    run_segrt("run", models / f"{name}.onnx", "--input", models / f"{name}.in.npy", "--output", tmp_path / "y.npy")
    cli = np.load(tmp_path / "y.npy")
    with segrt.Engine(models / f"{name}.onnx") as e:
        y = e(x)
        assert isinstance(y, np.ndarray) and y.dtype == cli.dtype and y.shape == cli.shape
        assert np.array_equal(y, cli), f"max diff {np.abs(y - cli).max()}"
        d = e.run({e.inputs[0].name: x})
        assert list(d) == [t.name for t in e.outputs] and np.array_equal(d[e.outputs[0].name], cli)
    ref = np.load(models / f"{name}.out.npy")
    assert segrt.compare(y, ref)["rel_l2"] < 1e-5


def test_inputs_and_outputs_describe_the_model(models):
    path = models / "basicunet2d_tiny.onnx"
    m = onnx.load(str(path), load_external_data=False)
    with segrt.Engine(path) as e:
        assert [t.name for t in e.inputs] == [v.name for v in m.graph.input]
        assert [t.name for t in e.outputs] == [v.name for v in m.graph.output]
        for t, v in zip(e.inputs + e.outputs, list(m.graph.input) + list(m.graph.output)):
            assert t.dtype == "float32"
            want = tuple(d.dim_param if d.dim_param else d.dim_value for d in v.type.tensor_type.shape.dim)
            assert t.shape == want
        assert e.device == "cpu" and e.precision == "fp32" and e.info["device"] == "cpu"
    with segrt.Engine(path, shapes={"image": (2, 1, 64, 32)}) as e:
        assert e.output_shapes((2, 1, 64, 32)) == [(2, 2, 64, 32)]
        with pytest.raises(segrt.InvalidArgumentError, match="given 1x1x64x32: s77 is 2 here"):
            e.output_shapes((1, 1, 64, 32))


def test_out_writes_into_the_callers_array(models, tiny_engine):
    x = tiny_input(1)
    want = tiny_engine(x)
    out = np.full(want.shape, np.nan, np.float32)
    got = tiny_engine(x, out=out)
    assert got is out and np.array_equal(out, want)
    out2 = np.zeros_like(want)
    d = tiny_engine.run({"image": x}, out={"logits": out2})
    assert d["logits"] is out2 and np.array_equal(out2, want)
    with pytest.raises(ValueError, match=r"out `logits`: the output is float32 \(1, 2, 32, 48\); the array given is "
                                         r"float32 \(1, 2, 32, 47\)"):
        tiny_engine(x, out=np.zeros((1, 2, 32, 47), np.float32))
    with pytest.raises(ValueError, match="out `logits`: the output is float32 .* given is float64"):
        tiny_engine(x, out=np.zeros(want.shape, np.float64))
    with pytest.raises(ValueError, match="read-only"):
        ro = np.zeros(want.shape, np.float32)
        ro.flags.writeable = False
        tiny_engine(x, out=ro)
    with pytest.raises(ValueError, match="not C-contiguous"):
        tiny_engine(x, out=np.zeros(want.shape[::-1], np.float32).T)
    with pytest.raises(ValueError, match="no output 'nope'"):
        tiny_engine.run({"image": x}, out={"nope": out2})


def test_non_contiguous_input_is_copied(tiny_engine):
    x = tiny_input(2, (1, 1, 48, 32))
    xt = np.ascontiguousarray(x.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)  # same values, Fortran-ish strides
    assert not xt.flags.c_contiguous
    assert np.array_equal(tiny_engine(xt), tiny_engine(x))


def test_plan_files(models, tmp_path):
    x = np.load(models / "basicunet2d_tiny.in.npy")
    plan = tmp_path / "tiny.plan"
    with segrt.Engine.build(models / "basicunet2d_tiny.onnx", plan, shapes={"image": x.shape}) as built:
        want = built(x)
    assert plan.read_bytes()[:8] == b"SEGRTPLN"
    with segrt.Engine(plan) as loaded:
        assert loaded.output_shapes(x.shape) == [(2, 2, 96, 128)]
        assert np.array_equal(loaded(x), want)
        loaded.save(tmp_path / "again.plan")
    with segrt.Engine(tmp_path / "again.plan") as again:
        assert np.array_equal(again(x), want)
    with pytest.raises(ValueError, match="a plan file keeps"):
        segrt.Engine(plan, shapes={"image": x.shape})
    with pytest.raises(ValueError, match="the plan was built for the CPU, not the GPU"):
        segrt.Engine(plan, device="cuda")
    with segrt.Engine(plan, device="cpu") as explicit:
        assert explicit.device == "cpu"
    with pytest.raises(segrt.InvalidArgumentError, match=r"given 1x1x96x128: s77 is 2 here"):
        with segrt.Engine(plan) as loaded:
            loaded(x[:1])


def test_build_report(models, tmp_path):
    """Where a build (or a plan load) went: parts no longer than the whole,
    the slowest nodes the model's (or the passes') in order, no cuDNN on
    the CPU. Seconds are wall time: their order and sums are judged, never
    their size."""
    path = models / "basicunet2d_tiny.onnx"
    x = np.load(models / "basicunet2d_tiny.in.npy")
    plan = tmp_path / "tiny.plan"
    ops = {n.name: n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node}
    with segrt.Engine.build(path, plan, shapes={"image": x.shape}) as e:
        r = e.build_report
    assert set(r) == {"total_seconds", "graph_seconds", "backend_seconds", "slowest", "cudnn_searches",
                      "cudnn_reused", "cudnn_finalized", "cudnn_seconds"}
    assert r["total_seconds"] > 0 and 0 <= r["graph_seconds"] and 0 < r["backend_seconds"]
    assert r["graph_seconds"] + r["backend_seconds"] <= r["total_seconds"]
    slow = r["slowest"]
    assert 1 <= len(slow) <= 8
    assert [s for _, _, s in slow] == sorted((s for _, _, s in slow), reverse=True)
    assert sum(s for _, _, s in slow) <= r["backend_seconds"]
    assert all(ops[n] == op for n, op, _ in slow if n in ops) and any(n in ops for n, _, _ in slow)
    assert (r["cudnn_searches"], r["cudnn_reused"], r["cudnn_finalized"], r["cudnn_seconds"]) == (0, 0, 0, 0)
    with segrt.Engine(plan) as loaded:
        lr = loaded.build_report
    # A CPU plan is its graph: loading it builds the plan again, without the passes.
    assert lr["graph_seconds"] == 0 and 0 < lr["backend_seconds"] <= lr["total_seconds"]
    assert lr["slowest"] and [s for _, _, s in lr["slowest"]] == sorted((s for _, _, s in lr["slowest"]), reverse=True)


def test_shape_ranges(models):
    path = models / "basicunet2d_tiny.onnx"
    # The CPU binds a range at its opt dims (CUDA compiles a plan per shape
    # in the range: tests/gpu).
    with segrt.Engine(path, shapes={"image": ((1, 1, 32, 32), (2, 1, 64, 64), (4, 1, 64, 64))}) as e:
        x = tiny_input(3, (2, 1, 64, 64))
        with segrt.Engine(path) as free:
            assert np.array_equal(e(x), free(x))


def test_context_manager_and_close(tiny_engine, models):
    x = tiny_input(4)
    with segrt.Engine(models / "basicunet2d_tiny.onnx") as e:
        y = e(x)
        assert not e.closed
        made, idle, limit = e._c._contexts()
        assert (made, idle, limit) == (1, 1, 0)
    assert e.closed
    assert e._c._contexts() == (0, 0, 0)
    with pytest.raises(ValueError, match="closed"):
        e(x)
    e.close()  # idempotent
    assert np.array_equal(y, tiny_engine(x))
    assert "closed" in repr(e)


def test_pool_makes_and_bounds_contexts(models):
    with segrt.Engine(models / "basicunet2d_tiny.onnx") as e:
        assert e.pool(3) is e
        assert e._c._contexts() == (3, 3, 3)
        e.pool(1)
        assert e._c._contexts() == (1, 1, 1)
        e(tiny_input(5))
        assert e._c._contexts() == (1, 1, 1)
        for bad in (0, -1, 1.5, True):
            with pytest.raises(ValueError, match="pool"):
                e.pool(bad)


def test_library_facts():
    assert segrt.__version__.count(".") == 2
    v = segrt.cuda_versions()
    assert set(v) == {"built_with_cuda", "driver", "runtime", "cudnn"}
    devs = segrt.devices()
    assert isinstance(devs, list)
    for d in devs:
        assert set(d) == {"index", "name", "compute_capability", "multiprocessors", "total_memory", "free_memory"}
