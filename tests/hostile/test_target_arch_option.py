"""segrt build|run|bench --target-arch (plans as an older GPU would make
them, issue 42 item 5): a value that is not a compute capability segrt
supports, a missing value and the option on the CPU are usage errors
(exit 2, one line naming the option or the value) before any work. The
GPU suite checks what the option does (SEGRT_TEST_TARGET_ARCH)."""
import pytest

from hostile_util import convnet


@pytest.fixture
def job(box):
    convnet(box.path("model.onnx"))
    return box


BUILD = ["build", "model.onnx", "-o", "model.plan"]


@pytest.mark.parametrize("value", ["sm_70", "7.0", "sm_", "ampere", "8.", "sm_80x", "13.0", "8.10", " 80", "-80"])
def test_not_a_capability(job, value):
    job.refused(BUILD + ["--target-arch", value], 2, "target_arch", value.strip() or value, "sm_75")


def test_missing_value(job):
    job.refused(BUILD + ["--target-arch"], 2, "--target-arch")


@pytest.mark.parametrize("cmd", [["run", "model.onnx", "--input", "x.npy", "--output", "y.npy"],
                                 ["bench", "model.onnx"]], ids=["run", "bench"])
def test_cuda_only(job, cmd):
    job.refused(cmd + ["--target-arch", "sm_80"], 2, "--target-arch", "applies to CUDA devices")
