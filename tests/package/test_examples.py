"""The README's examples (python/examples), run as a user runs them, on the
CPU at small sizes: a CT volume through a 3-D model with sliding windows,
a batch of slide patches through a 2-D model. (torch_cuda.py, and the other
two on a GPU, run in tests/gpu/test_gpu_python.py.)"""
import os
import pathlib
import subprocess
import sys

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "python" / "examples"


def run_example(name, *args):
    p = subprocess.run([sys.executable, str(EXAMPLES / name), *map(str, args)], capture_output=True, text=True,
                       timeout=600, env=os.environ)
    assert p.returncode == 0, p.stderr + p.stdout
    return p.stdout


def test_ct_volume(models):
    out = run_example("ct_volume.py", models / "unet3d_spleen.onnx", "--device", "cpu", "--size", 100, 128, 120)
    assert "-> labels (100, 128, 120) uint8" in out


def test_slide_patches(models):
    out = run_example("slide_patches.py", models / "basicunet2d.onnx", "--device", "cpu", "--patch", 128,
                      "--batch", 4)
    assert "masks (4, 128, 128)" in out
