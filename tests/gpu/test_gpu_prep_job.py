"""`segrt run --device cuda MODEL CT.nii.gz -o LABELS.nii.gz` with
preprocessing (src/pipeline/job_window.c: prep_forward on the models'
device, the windows' scores kept there, prep_back): the same labels as the
CPU job (tests/volume/test_prep_volume.py checks those against numpy in
world coordinates), on the device path and on the host path (--host-blend:
the plan on the host), from the model's metadata and from an nnU-Net
folder. The CT's intensities are 40 + 10 d HU, d the distance in mm to a
plane; a 1x1x1 convolution gives class 1 where the normalised intensity is
> 0, i.e. d > 0. Voxels with |d| under half the largest spacing may differ
by float rounding at the boundary; the rest must be identical."""
import json

import numpy as np
import pytest

from conftest import run_segrt

nib = pytest.importorskip("nibabel")
onnx = pytest.importorskip("onnx")
GPU = ["--device", "cuda", "--precision", "fp32", "--autotune", "0", "--no-cache", "-q"]
SPACING = np.array([0.8, 1.1, 2.5])


def conv_model(path, meta=None):
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.array([-1.0, 1.0], np.float32).reshape(2, 1, 1, 1, 1), "w")
    x = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, "D", "H", "W"])
    y = helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 2, "D", "H", "W"])
    g = helper.make_graph([helper.make_node("Conv", ["image", "w"], ["scores"])], "conv", [x], [y], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    if meta:
        helper.set_model_props(m, meta)
    onnx.save(m, path)
    return path


def write_ct(path, shape=(160, 144, 60)):
    c, s = np.cos(0.3), np.sin(0.3)
    affine = np.eye(4)
    affine[:3, :3] = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]]) @ np.diag([-1.0, 1.0, -1.0]) @ np.diag(SPACING)
    affine[:3, 3] = [30, -20, 15]
    ijk = np.stack(np.meshgrid(*[np.arange(n) for n in shape], indexing="ij"), -1).astype(np.float32)
    ras = ijk @ affine[:3, :3].T.astype(np.float32) + affine[:3, 3].astype(np.float32)
    normal = np.array([0.5, -0.6, 0.62]) / np.linalg.norm([0.5, -0.6, 0.62])
    d = (ras - ras.reshape(-1, 3).mean(0)) @ normal.astype(np.float32)
    img = nib.Nifti1Image((40 + 10 * d).astype(np.float32), affine)
    img.set_sform(affine, code=1)
    img.set_qform(affine, code=1)
    nib.save(img, path)
    return d


def labels(path):
    return np.asarray(nib.load(path).dataobj)


@pytest.mark.parametrize("interp", ["linear", "cubic"])
def test_device_job_gives_the_cpu_labels(tmp_path, interp):
    d = write_ct(tmp_path / "ct.nii.gz")
    meta = {"segrt.preprocess.orientation": "RAS", "segrt.preprocess.spacing": "2,1.5,1.5",
            "segrt.preprocess.intensity": "ct:-10000,10000,40,10", "segrt.preprocess.image_interp": interp,
            "segrt.preprocess.crop": "0", "segrt.roi": "64,64,64"}
    model = conv_model(tmp_path / "m.onnx", meta)
    runs = {"cpu": [], "cuda": GPU + ["--sw-batch", "4"], "host": GPU + ["--host-blend"]}
    got = {}
    for name, args in runs.items():
        out = tmp_path / f"{name}.nii.gz"
        run_segrt("run", model, tmp_path / "ct.nii.gz", "-o", out, *args, check=0)
        got[name] = labels(out)
    band = np.abs(d) < SPACING.max() / 2
    for name in ("cuda", "host"):
        differ = got[name] != got["cpu"]
        assert not (differ & ~band).any(), f"{name}: {int((differ & ~band).sum())} voxels differ outside the band"
        assert differ.mean() < 1e-3, f"{name}: {differ.mean():.2%} of the voxels differ"
    assert not ((got["cuda"] > 0) != (d > 0))[~band].any()


def test_device_job_with_nnunet_plans(tmp_path):
    d = write_ct(tmp_path / "ct.nii.gz")
    kw = {"is_seg": False, "order": 3, "order_z": 0, "force_separate_z": None}
    plans = {"image_reader_writer": "SimpleITKIO", "transpose_forward": [0, 1, 2],
             "configurations": {"3d_fullres": {
                 "patch_size": [48, 64, 64], "spacing": [2.0, 1.5, 1.5], "normalization_schemes": ["CTNormalization"],
                 "use_mask_for_norm": [False], "resampling_fn_data_kwargs": kw,
                 "resampling_fn_probabilities_kwargs": dict(kw, order=1)}},
             "foreground_intensity_properties_per_channel": {"0": {
                 "mean": 40.0, "std": 10.0, "percentile_00_5": -10000.0, "percentile_99_5": 10000.0}}}
    nn = tmp_path / "nn"
    nn.mkdir()
    (nn / "plans.json").write_text(json.dumps(plans))
    (nn / "dataset.json").write_text(json.dumps({"channel_names": {"0": "CT"}, "labels": {"background": 0, "a": 1}}))
    model = conv_model(tmp_path / "plain.onnx")
    for name, args in {"cpu": ["--tta", "none"], "cuda": GPU + ["--tta", "none", "--sw-batch", "auto"]}.items():
        run_segrt("run", model, tmp_path / "ct.nii.gz", "-o", tmp_path / f"{name}.nii.gz", "--nnunet-plans", nn,
                  "3d_fullres", *args, check=0)
    a, b = labels(tmp_path / "cpu.nii.gz"), labels(tmp_path / "cuda.nii.gz")
    band = np.abs(d) < SPACING.max() / 2
    assert not ((a != b) & ~band).any()
    assert not ((b > 0) != (d > 0))[~band].any()
