"""The pure parts of bench/gpu_vs_pytorch.py and bench/report.py, which
otherwise run only on the GPU machine: FLOP counts from the ONNX graphs
against the figures in shared/notes/targets.md, the table, the targets, the
merging of split runs and the README rewrite."""
import copy
import math
import pathlib
import sys

import onnx
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import gpu_vs_pytorch as gvp  # noqa: E402
import report  # noqa: E402


@pytest.mark.parametrize("name, shape, gflop_per_sample", [
    ("basicunet2d", (16, 3, 512, 512), 39.9),
    ("unet3d_spleen", (4, 1, 96, 96, 96), 10.2),
])
def test_flops_match_the_published_figures(models, name, shape, gflop_per_sample):
    f = gvp.graph_flops(onnx.load(str(models / f"{name}.onnx")), {"image": shape})
    per_sample = f["total"] / 1e9 / shape[0]
    assert abs(per_sample - gflop_per_sample) < 0.05, f
    assert set(f["by_op"]) == {"Conv", "ConvTranspose"}


def test_flops_scale_with_batch_and_check_rank(models):
    m = onnx.load(str(models / "basicunet2d_tiny.onnx"))
    one = gvp.graph_flops(m, {"image": (1, 1, 96, 128)})["total"]
    assert gvp.graph_flops(m, {"image": (3, 1, 96, 128)})["total"] == 3 * one
    with pytest.raises(ValueError, match="rank"):
        gvp.graph_flops(m, {"image": (1, 96, 128)})


def test_stats_and_rates():
    s = gvp.summarize_times([3.0, 1.0, 2.0, 4.0, 5.0])
    assert s["median_ms"] == 3.0 and s["min_ms"] == 1.0 and s["runs"] == 5
    r = gvp.rate_fields(2.0, 100.0, 500.0)  # 100 GFLOP in 2 ms = 50 TFLOP/s
    assert r == {"tflops": 50.0, "pct_fp16_ceiling": 10.0}
    assert gvp.device_slug("NVIDIA H100 80GB HBM3") == "h100-80gb-hbm3"
    assert gvp.json_safe({"a": [math.inf, -math.inf]}) == {"a": ["inf", "-inf"]}


def _res(ms, **kw):
    d = {"status": "ok", "median_ms": ms, "p10_ms": ms, "p90_ms": ms, "tflops": 1.0, "pct_fp16_ceiling": 1.0,
         "peak_bytes": 1 << 20, "accuracy": {"psnr_db": 60.0, "argmax_agreement": 0.9999}}
    d.update(kw)
    return d


def _result(date, cases):
    return {"benchmark": "gpu_vs_pytorch", "date": date, "device": {"name": "GPU X"}, "versions": {},
            "ceilings": {"fp16_matmul_tflops": 700.0, "d2d_copy_gbps": 3000.0}, "settings": {},
            "cases": cases, "complete": True}


def _case(model, batch, results):
    return {"model": model, "batch": batch, "input_shape": [batch, 3, 8, 8], "gflop": 1.0 * batch,
            "gflop_per_sample": 1.0, "results": results}


def test_targets_table_and_merge(tmp_path):
    a = _result("2026-01-01T10:00:00", [
        _case("basicunet2d", 16, {"eager32": _res(50.0), "half_cl": _res(20.0), "compile": _res(7.0, compile_s=150),
                                  "segrt": _res(2.0)}),
        _case("basicunet2d", 1, {"eager32": _res(3.5), "amp": _res(3.0),
                                 "segrt": {"status": "error", "error": "SegrtError: x"}}),
    ])
    checks = {(t["model"], t["batch"], t["against"]): t for t in report.target_checks(a)}
    assert checks[("basicunet2d", 16, "compile")]["got"] == 3.5 and checks[("basicunet2d", 16, "compile")]["met"]
    assert checks[("basicunet2d", 16, "half_cl")]["got"] == 10.0
    assert checks[("basicunet2d", 1, "eager")]["met"] is None  # segrt failed there
    text = report.markdown(a)
    assert "| segrt | 2.00 (2.00–2.00)" in text and "25.00×" in text and "compile 150 s" in text
    assert "error: SegrtError: x" in text

    b = _result("2026-01-01T11:00:00", [
        _case("basicunet2d", 1, {"segrt": _res(1.0)}),
        _case("unet3d_spleen", 4, {"compile": _res(2.2), "segrt": {"status": "error", "error": "late"}}),
    ])
    m = report.merge([copy.deepcopy(a), b])
    assert m["date"] == b["date"] and [(c["model"], c["batch"]) for c in m["cases"]] == [
        ("basicunet2d", 16), ("basicunet2d", 1), ("unet3d_spleen", 4)]
    t1 = next(t for t in m["targets"] if t["batch"] == 1)
    assert t1["against_mode"] == "amp" and t1["got"] == 3.0 and t1["met"]
    with pytest.raises(ValueError, match="different devices"):
        report.merge([a, dict(b, device={"name": "GPU Y"})])


def test_readme_section(tmp_path):
    text = f"top\n{report.BEGIN}\nold\n{report.END}\nbottom\n"
    new = report.replace_section(text, "table\n")
    assert new == f"top\n{report.BEGIN}\ntable\n{report.END}\nbottom\n"
    with pytest.raises(ValueError):
        report.replace_section("no markers", "x")
    assert (report.BEGIN in pathlib.Path(report.ROOT / "README.md").read_text())
    (tmp_path / "gpu_vs_pytorch-x-1.json").write_text('{"date": "2026-01-01", "cases": []}')
    (tmp_path / "gpu_vs_pytorch-x-2.json").write_text('{"date": "2026-02-01", "cases": []}')
    path, r = report.latest_result(tmp_path)
    assert path.name == "gpu_vs_pytorch-x-2.json" and r["date"] == "2026-02-01"
