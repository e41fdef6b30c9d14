"""segrt.run_volume(..., preprocess=...) and segrt.preprocess_from_nnunet:
the Python package's way to the volume job's preprocessing, checked against
the segrt command on the same files (tests/volume/test_prep_volume.py checks
the command's labels against numpy in world coordinates) and the nnU-Net
reader against the plans it is given."""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

import segrt

nib = pytest.importorskip("nibabel")
onnx = pytest.importorskip("onnx")
SEGRT = os.environ.get("SEGRT", str(pathlib.Path(__file__).resolve().parents[2] / "build" / "segrt"))


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
    return str(path)


def write_ct(path):
    """An oblique, flipped CT whose intensities are 40 + 10 d, d the distance
    to a plane in mm."""
    affine = np.eye(4)
    c, s = np.cos(0.3), np.sin(0.3)
    affine[:3, :3] = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]]) @ np.diag([-0.8, 1.1, -2.5])
    affine[:3, 3] = [30, -20, 15]
    ijk = np.stack(np.meshgrid(*[np.arange(n) for n in (30, 28, 14)], indexing="ij"), -1).astype(float)
    ras = ijk @ affine[:3, :3].T + affine[:3, 3]
    normal = np.array([0.5, -0.6, 0.62]) / np.linalg.norm([0.5, -0.6, 0.62])
    d = (ras - ras.reshape(-1, 3).mean(0)) @ normal
    img = nib.Nifti1Image((40 + 10 * d).astype(np.float32), affine)
    img.set_sform(affine, code=1)
    img.set_qform(affine, code=1)
    nib.save(img, path)
    return d


def cli_labels(model, image, out, *args):
    p = subprocess.run([SEGRT, "run", model, str(image), "-o", str(out), *map(str, args)], capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return np.asarray(nib.load(out).dataobj).transpose(2, 1, 0)


def test_run_volume_with_settings_gives_the_clis_labels(tmp_path):
    d = write_ct(tmp_path / "ct.nii.gz")
    model = conv_model(tmp_path / "m.onnx")
    want = cli_labels(model, tmp_path / "ct.nii.gz", tmp_path / "cli.nii.gz", "--roi", "16,16,16", "--orientation",
                      "RAS", "--spacing", "2", "--intensity", "ct:-10000,10000,40,10")
    with segrt.Engine(model) as engine:
        labels, geo = segrt.run_volume(engine, tmp_path / "ct.nii.gz", 16, sw_batch=1, blend="constant",
                                       preprocess={"orientation": "RAS", "spacing": (2, 2, 2),
                                                   "intensity": "ct:-10000,10000,40,10"},
                                       out=tmp_path / "py.nii.gz")
    assert labels.shape == (1, 1) + want.shape and labels.dtype == np.uint8
    assert np.array_equal(labels[0, 0], want)
    assert np.array_equal(np.asarray(nib.load(tmp_path / "py.nii.gz").dataobj).transpose(2, 1, 0), want)
    assert np.allclose(geo.affine_ras(), nib.load(tmp_path / "ct.nii.gz").affine, atol=1e-5)
    # Not a copy of the input: the plane at d > 0, not HU > 0 (d > -4).
    agree = labels[0, 0].transpose(2, 1, 0) == (d > 0)
    assert agree[np.abs(d) > 1.25].all()


def test_run_volume_with_the_models_metadata(tmp_path):
    write_ct(tmp_path / "ct.nii.gz")
    meta = {"segrt.preprocess.orientation": "RAS", "segrt.preprocess.spacing": "2",
            "segrt.preprocess.intensity": "ct:-10000,10000,40,10", "segrt.roi": "16,16,16"}
    model = conv_model(tmp_path / "m.onnx", meta)
    want = cli_labels(model, tmp_path / "ct.nii.gz", tmp_path / "cli.nii.gz", "--blend", "gaussian")
    with segrt.Engine(model) as engine:
        labels, _ = segrt.run_volume(engine, tmp_path / "ct.nii.gz", 16, preprocess="model", sw_batch=1)
        assert np.array_equal(labels[0, 0], want)
        # Settings over the metadata: mean 0 moves the plane.
        other, _ = segrt.run_volume(engine, tmp_path / "ct.nii.gz", 16, preprocess={"intensity": "ct:-1e4,1e4,0,10"})
        assert not np.array_equal(other[0, 0], want)
        with pytest.raises(segrt.InvalidArgumentError, match="spacing"):
            segrt.run_volume(engine, tmp_path / "ct.nii.gz", 16, preprocess={"spacing": "1,2"})
        with pytest.raises(ValueError, match="labels"):
            segrt.run_volume(engine, tmp_path / "ct.nii.gz", 16, output="probs", preprocess="model")


def test_preprocess_from_nnunet(tmp_path):
    kw = {"is_seg": False, "order": 3, "order_z": 0, "force_separate_z": None}
    plans = {"image_reader_writer": "SimpleITKIO", "transpose_forward": [0, 1, 2],
             "configurations": {"3d_fullres": {
                 "patch_size": [16, 16, 16], "spacing": [2.0, 2.0, 2.0], "normalization_schemes": ["CTNormalization"],
                 "use_mask_for_norm": [False], "resampling_fn_data_kwargs": kw,
                 "resampling_fn_probabilities_kwargs": dict(kw, order=1)}},
             "foreground_intensity_properties_per_channel": {"0": {
                 "mean": 40.0, "std": 10.0, "percentile_00_5": -10000.0, "percentile_99_5": 10000.0}}}
    nn = tmp_path / "nn"
    nn.mkdir()
    (nn / "plans.json").write_text(json.dumps(plans))
    (nn / "dataset.json").write_text(json.dumps({"channel_names": {"0": "CT"}, "labels": {"background": 0, "a": 1}}))
    settings, window = segrt.preprocess_from_nnunet(nn, "3d_fullres")
    assert settings["intensity"] == "ct:-10000.0,10000.0,40.0,10.0" and settings["crop"] == "nonzero"
    assert settings["spacing"] == "2.0,2.0,2.0" and settings["image_interp"] == "cubic"
    assert settings["intensity_first"] == "1" and settings["orientation"] == "none"
    assert window == {"roi": (16, 16, 16), "overlap": 0.5, "blend": "gaussian_nnunet", "sigma_scale": 0.125,
                      "grid": "nnunet", "tta": "mirror"}
    write_ct(tmp_path / "ct.nii.gz")
    model = conv_model(tmp_path / "m.onnx")
    want = cli_labels(model, tmp_path / "ct.nii.gz", tmp_path / "cli.nii.gz", "--nnunet-plans", nn, "3d_fullres")
    roi = window.pop("roi")
    with segrt.Engine(model) as engine:
        labels, _ = segrt.run_volume(engine, tmp_path / "ct.nii.gz", roi, preprocess=settings, sw_batch=1, **window)
    assert np.array_equal(labels[0, 0], want)
    with pytest.raises(segrt.InvalidArgumentError, match="3d_lowres"):
        segrt.preprocess_from_nnunet(nn, "3d_lowres")


def test_preprocessing_wants_a_volume(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((1, 1, 8, 8, 8), np.float32))
    model = conv_model(tmp_path / "m.onnx")
    with segrt.Engine(model) as engine:
        with pytest.raises(segrt.InvalidArgumentError, match="applies to volumes"):
            segrt.run_volume(engine, tmp_path / "x.npy", 4, preprocess={"spacing": 2})
        # Settings that ask for nothing run it as it is.
        labels, _ = segrt.run_volume(engine, tmp_path / "x.npy", 4, preprocess="none")
        assert labels.shape == (1, 1, 8, 8, 8) and labels.all()
