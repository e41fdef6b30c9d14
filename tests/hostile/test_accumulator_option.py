"""segrt run --accumulator fp32|fp16|bf16 (the CUDA path's window sums,
issue 39 item 5): another value, a missing value and any value on the CPU
are usage errors (exit 2, one line naming the option) before any work."""
import pytest

from hostile_util import convnet, image_npy


@pytest.fixture
def job(box):
    convnet(box.path("model.onnx"))
    image_npy(box.path("x.npy"))
    return box


SW = ["run", "model.onnx", "x.npy", "--roi", "16,16", "-o", "out.npy"]


@pytest.mark.parametrize("value", ["fp8", "FP16", "float16", "", "fp16,bf16"])
def test_other_values(job, value):
    job.refused(SW + ["--accumulator", value], 2, "--accumulator", "fp16")


def test_missing_value(job):
    job.refused(SW + ["--accumulator"], 2, "--accumulator")


@pytest.mark.parametrize("value", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("device", [[], ["--device", "cpu"]], ids=["default", "cpu"])
def test_cuda_only(job, value, device):
    job.refused(SW + ["--accumulator", value] + device, 2, "--accumulator", "applies to CUDA devices")


def test_without_it_the_run_succeeds(job):
    job.succeeds(SW, ["out.npy"])
