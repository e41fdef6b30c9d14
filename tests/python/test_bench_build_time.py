"""bench/corpus_vs_pytorch/build_time.py reads `segrt build`'s report: its
parse() against what the CLI prints for a CPU build (the parts and the
slowest nodes; a CPU build has no cuDNN line), so a change of the printed
form breaks this test rather than the benchmark on the GPU machine."""
from conftest import load_bench, run_segrt


def test_parse_reads_the_cli_report(models, tmp_path):
    bt = load_bench("corpus_vs_pytorch/build_time.py")
    p = run_segrt("build", models / "basicunet2d_tiny.onnx", "-o", tmp_path / "t.plan", "--device", "cpu",
                  "--shape", "image=1x1x64x64", check=0)
    got = bt.parse(p.stdout)
    assert {"total_s", "graph_s", "plans_s", "slowest"} <= set(got), (got, p.stdout)
    assert got["total_s"] > 0 and got["plans_s"] <= got["total_s"] + 0.011
    assert "(Conv)" in got["slowest"], got["slowest"]
    assert "cudnn_searches" not in got
    line = ("  cuDNN: 22 convolution graphs searched in 25.22 s (120 candidate plans finalized), 27 convolutions "
            "took an identical earlier one's choice")
    assert bt.parse(line) == {"cudnn_searches": 22, "cudnn_s": 25.22, "cudnn_finalized": 120, "cudnn_reused": 27}
