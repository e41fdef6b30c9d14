"""Resize of channels-last activations on the GPU: the vector kernel of
src/backend/cuda/k_resize.cu (resize_vec_kernel: 16-byte vectors of
channels, 1 to 3 resized dims, linear and nearest modes) that takes a
decoder's or a segmentation head's upsampling when the tensor before it
is a convolution's channels-last output. Models Conv 1x1 (C channels, a
multiple of 8 so that vectors fit) -> Resize -> Relu (so the Resize's
output stays an activation, not the float32 graph output), 2-D and 3-D,
up by 2, down by 2, to sizes that are no multiple of the input's, every
coordinate transform but tf_crop_and_resize, nearest with its rounding
modes; run on the CPU engine and on the CUDA engine at fp32, fp16 and
bf16: fp32 relative L2 <= 1e-5, fp16 and bf16 PSNR >= 45 dB against the
CPU (test_gpu_ops.py's bounds), no step on the CPU."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import segrt_capi as sc
from gpu_judge import run_engine
from gpu_util import fmt_db, need_bf16, psnr
from onnx_util import rel_l2

RNG = np.random.default_rng(5)


def model(cin, c, spatial, mode, coord, nearest, scales=None, sizes=None):
    n = 2
    x = RNG.standard_normal((n, cin) + tuple(spatial)).astype(np.float32)
    w = (RNG.standard_normal((c, cin) + (1,) * len(spatial)) / np.sqrt(cin)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.zeros(0, np.float32), "roi")]
    ins = ["h", "roi"]
    if scales is not None:
        inits.append(numpy_helper.from_array(np.array([1, 1] + list(scales), np.float32), "scales"))
        ins.append("scales")
    else:
        inits.append(numpy_helper.from_array(np.zeros(0, np.float32), "scales"))
        inits.append(numpy_helper.from_array(np.array([n, c] + list(sizes), np.int64), "sizes"))
        ins += ["scales", "sizes"]
    attrs = {"mode": mode, "coordinate_transformation_mode": coord}
    if mode == "nearest":
        attrs["nearest_mode"] = nearest
    nodes = [helper.make_node("Conv", ["x", "w"], ["h"]),
             helper.make_node("Resize", ins, ["r"], **attrs),
             helper.make_node("Relu", ["r"], ["y"])]
    g = helper.make_graph(nodes, "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m, {"x": x}


CASES = {
    "2d-up2-half-pixel": (3, 16, (9, 12), "linear", "half_pixel", None, (2.0, 2.0), None),
    "2d-sizes-align-corners": (4, 8, (7, 10), "linear", "align_corners", None, None, (20, 23)),
    "2d-pytorch-half-pixel-64": (8, 64, (16, 16), "linear", "pytorch_half_pixel", None, None, (64, 64)),
    "2d-down2-asymmetric": (3, 24, (16, 14), "linear", "asymmetric", None, (0.5, 0.5), None),
    "2d-one-dim-resized": (3, 16, (6, 10), "linear", "half_pixel", None, (1.0, 3.0), None),
    "2d-half-pixel-symmetric": (3, 16, (5, 6), "linear", "half_pixel_symmetric", None, (2.5, 1.5), None),
    "2d-nearest-floor": (3, 16, (6, 7), "nearest", "asymmetric", "floor", (2.0, 2.0), None),
    "2d-nearest-round-prefer-floor": (3, 8, (5, 9), "nearest", "half_pixel", "round_prefer_floor", None, (11, 13)),
    "3d-trilinear-up2": (2, 16, (5, 6, 7), "linear", "half_pixel", None, (2.0, 2.0, 2.0), None),
    "3d-trilinear-align-corners": (2, 8, (4, 5, 6), "linear", "align_corners", None, None, (9, 11, 13)),
    "3d-nearest-ceil": (2, 16, (4, 4, 5), "nearest", "asymmetric", "ceil", (2.0, 2.0, 2.0), None),
}


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("name", list(CASES))
def test_resize_channels_last(name, precision):
    need_bf16(precision)
    cin, c, spatial, mode, coord, nearest, scales, sizes = CASES[name]
    m, feeds = model(cin, c, spatial, mode, coord, nearest, scales, sizes)
    mod = sc.Model.from_bytes(m, name=f"{name}.onnx")
    want = run_engine(mod, feeds, "cpu")[0]
    got = np.asarray(run_engine(mod, feeds, "cuda", precision)[0])
    assert got.shape == want.shape
    if precision == "fp32":
        err = rel_l2(got, want)
        print(f"\n{name} fp32: rel L2 {err:.2e}")
        assert err <= 1e-5
    else:
        db = psnr(got, want)
        print(f"\n{name} {precision}: PSNR {fmt_db(db)}")
        assert db >= 45.0
