"""Options that do not apply, malformed or negative values: usage errors
(exit 2) naming the option, before any work (issue 36, item 9)."""
import pytest

from hostile_util import convnet, grey_png, image_npy


@pytest.fixture
def job(box):
    convnet(box.path("model.onnx"))
    image_npy(box.path("x.npy"))
    return box


SW = ["run", "model.onnx", "x.npy", "--roi", "16,16", "-o", "out.npy"]
PLAIN = ["run", "model.onnx", "--input", "x.npy", "--output", "out.npy"]
BENCH = ["bench", "model.onnx", "--shape", "x=1x1x32x32", "--iters", "1", "--warmup", "0"]

CUDA_ENGINE_OPTIONS = [
    (["--precision", "fp16"], "--precision fp16"),
    (["--precision", "tf32"], "--precision tf32"),
    (["--precision", "bf16"], "--precision bf16"),
    (["--fp32-ops", "Conv"], "--fp32-ops"),
    (["--allow-cpu-fallback"], "--allow-cpu-fallback"),
    (["--workspace", "1G"], "--workspace"),
    (["--autotune", "2"], "--autotune"),
    (["--disable-kernels", "wgmma"], "--disable-kernels"),
    (["--no-cache"], "--no-cache"),
    (["--cache-dir", "cache"], "--cache-dir"),
]


@pytest.mark.parametrize("cmd", [SW, PLAIN, BENCH], ids=["window", "plain", "bench"])
@pytest.mark.parametrize("opt,name", CUDA_ENGINE_OPTIONS, ids=[n for _, n in CUDA_ENGINE_OPTIONS])
def test_cuda_engine_options_on_the_cpu(job, cmd, opt, name):
    job.refused(cmd + opt, 2, name, "CUDA")
    # Said with --device cpu, the same.
    job.refused(cmd + opt + ["--device", "cpu"], 2, name, "CUDA")


def test_composite_ops_switch_is_the_cpus_too(job):
    """composite-ops lowers composite operators on any backend (the CPU's
    tests use it); with a CUDA switch beside it the list is refused."""
    job.succeeds(PLAIN + ["--disable-kernels", "composite-ops"], ["out.npy"])
    job.refused(PLAIN + ["--disable-kernels", "composite-ops,wgmma"], 2, "--disable-kernels", "CUDA")


def test_fp32_is_what_the_cpu_does(job):
    job.succeeds(SW + ["--precision", "fp32"], ["out.npy"])


@pytest.mark.parametrize("opt,name", [(["--max-memory", "1G"], "--max-memory"),
                                      (["--max-memory", "auto"], "--max-memory"),
                                      (["--accumulate", "whole"], "--accumulate"),
                                      (["--accumulate", "slabs"], "--accumulate"),
                                      (["--host-blend"], "--host-blend")])
def test_cuda_window_options_on_the_cpu(job, opt, name):
    job.refused(SW + opt, 2, name, "CUDA")


MOOT = [
    (["--sigma-scale", "0.2"], "--sigma-scale", "gaussian"),
    (["--blend", "constant", "--sigma-scale", "0.2"], "--sigma-scale", "gaussian"),
    (["--pad", "reflect", "--pad-value", "1"], "--pad-value", "constant"),
    (["--activation", "softmax"], "--activation", "logits"),
    (["--output", "probs", "--threshold", "0.3"], "--threshold", "sigmoid"),
    (["--output", "labels", "--threshold", "0.3"], "--threshold", "sigmoid"),
    (["--raw-input"], "--raw-input", "image files"),
]


@pytest.mark.parametrize("opt,name,why", MOOT, ids=[" ".join(o) for o, _, _ in MOOT])
def test_options_another_makes_moot(job, opt, name, why):
    job.refused(SW + opt, 2, name, why)


def test_overlay_needs_an_image_file_and_labels(job):
    job.refused(SW[:-1] + ["labels.png", "--overlay", "o.png"], 2, "--overlay", "image file")
    grey_png(job.path("img.png"))
    job.refused(["run", "model.onnx", "img.png", "--roi", "16,16", "-o", "l.npy", "--overlay", "o.png"], 2,
                "--overlay", "labels")
    job.refused(["run", "model.onnx", "img.png", "--roi", "16,16", "-o", "l.png", "--output", "probs"], 2,
                "l.png", "label map")


BAD_VALUES = [
    (SW, ["--max-memory", "-1"], "--max-memory"),
    (SW, ["--max-memory", "0"], "--max-memory"),
    (SW, ["--max-memory", "1X"], "--max-memory"),
    (SW, ["--max-memory", "99999999999999999999"], "--max-memory"),
    (SW, ["--max-memory", "99999999999T"], "--max-memory"),
    (SW, ["--max-host-memory", "-1G"], "--max-host-memory"),
    (SW, ["--max-host-memory", "1GiBs"], "--max-host-memory"),
    (SW, ["--workspace", "-5"], "--workspace"),
    (SW, ["--sw-batch", "-1"], "--sw-batch"),
    (SW, ["--sw-batch", "0"], "--sw-batch"),
    (SW, ["--sw-batch", "99999999999"], "--sw-batch"),
    (SW, ["--threads", "-1"], "--threads"),
    (SW, ["--threads", "1e3"], "--threads"),
    (SW, ["--overlap", "-0.1"], "--overlap"),
    (SW, ["--overlap", "1"], "--overlap"),
    (SW, ["--overlap", "nan"], "--overlap"),
    (SW, ["--overlap", "0.5,0.5,0.5"], "--overlap"),
    (SW, ["--blend", "gaussian", "--sigma-scale", "-1"], "--sigma-scale"),
    (SW, ["--blend", "gaussian", "--sigma-scale", "inf"], "--sigma-scale"),
    (SW, ["--pad-value", "nan"], "--pad-value"),
    (SW, ["--output", "probs", "--activation", "relu"], "--activation"),
    (SW, ["--tta", "mirror=5"], "mirror=5"),
    (SW, ["--tta", "flip"], "--tta"),
    (SW, ["--grid", "square"], "--grid"),
    (SW, ["--roi", "a,b"], "--roi"),
    (SW, ["--roi", "16,16,16,16,16"], "--roi"),
    (SW, ["--device", "tpu"], "--device"),
    (SW, ["--device", "cuda:-1"], "--device"),
    (BENCH, ["--iters", "-1"], "--iters"),
    (BENCH, ["--iters", "0"], "--iters"),
    (BENCH, ["--warmup", "-3"], "--warmup"),
    (BENCH, ["--batch-sweep", "1,-2"], "--batch-sweep"),
    (BENCH, ["--io", "device"], "--io device"),
]


@pytest.mark.parametrize("cmd,opt,name", BAD_VALUES, ids=[" ".join(o) for _, o, _ in BAD_VALUES])
def test_malformed_and_negative_values(job, cmd, opt, name):
    job.refused(cmd + opt, 2, name)


@pytest.mark.parametrize("cmd", [SW, PLAIN, BENCH, ["build", "model.onnx", "-o", "m.plan"],
                                 ["info", "model.onnx"], ["compare", "x.npy", "x.npy"]],
                         ids=["window", "plain", "bench", "build", "info", "compare"])
def test_unknown_options_and_missing_values(job, cmd):
    job.refused(cmd + ["--frobnicate"], 2, "--frobnicate")
    last = {"run": "--sw-batch", "bench": "--iters", "build": "--workspace", "info": "--shape",
            "compare": "--max-rel-l2"}[cmd[0]]
    job.refused(cmd + [last], 2, last)
