"""Each test model at several batch and spatial sizes on random normal
inputs, in segrt (inputs fed, and folded in so that the reference backend
computes the whole network) against onnxruntime: relative L2 <= 1e-5.

BasicUNet wants spatial dims divisible by 16 and so does the 3-D UNet
(four stride-2 stages); the 3-D volumes stay small because the reference
backend is plain single-threaded C. The first size of each model is the
smallest: the sanitizer build runs only that one. Rerun one case with
SEGRT_DIFF_SEED=<seed> pytest test_diff_models.py."""
import numpy as np
import onnx
import pytest

import opgen

SIZES = {
    "basicunet2d": [[1, 3, 32, 32], [1, 3, 64, 96], [2, 3, 48, 80]],
    "basicunet2d_ts": [[2, 3, 32, 32], [1, 3, 48, 80], [1, 3, 64, 96]],
    "basicunet2d_tiny": [[1, 1, 16, 16], [2, 1, 32, 32], [1, 1, 64, 96], [2, 1, 48, 80]],
    "unet3d_spleen": [[1, 1, 16, 16, 16], [1, 1, 16, 32, 16], [2, 1, 32, 16, 16]],
}
for _name, _sizes in SIZES.items():
    opgen.register_fixed(f"model-{_name}", len(_sizes))


def model_cases():
    """(model, seed, input dims); the seed picks the size and the data."""
    out = []
    for fam, seed in opgen.case_ids([f"model-{n}" for n in SIZES]):
        name = fam[len("model-"):]
        sizes = SIZES[name]
        out.append((name, seed, sizes[(seed - opgen.family_base(fam)) % len(sizes)]))
    return out


CASES = model_cases()


@pytest.mark.parametrize("name,seed,shape", CASES,
                         ids=[f"{n}-{'x'.join(map(str, s))}-{seed}" for n, seed, s in CASES])
def test_model(models, tmp_path, name, seed, shape):
    model = onnx.load(str(models / f"{name}.onnx"))
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    case = opgen.Case(model, {model.graph.input[0].name: x}, elementwise=False)
    opgen.check_case(case, tmp_path, f"{name} {'x'.join(map(str, shape))}",
                     f"SEGRT_DIFF_SEED={seed} pytest test_diff_models.py")
