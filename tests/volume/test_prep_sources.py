"""Where a volume job's preprocessing comes from: settings as text
(segrt_preprocess_set, the syntax of the metadata keys segrt.preprocess.*
and of `segrt run`'s options), a model's metadata
(segrt_preprocess_from_model) and an nnU-Net v2 model folder's plans.json
and dataset.json (segrt_preprocess_from_nnunet), through the segrt_prepsrc
driver (tests/volume/segrt_prepsrc.c). The nnU-Net files are written here the
way nnU-Net v2's planner writes them (a realistic 3d_fullres with
CTNormalization, a configuration that inherits from it, a cascade stage, a
2-D one); malformed files must be refused naming the file and the key,
and mutilated ones must never crash the reader."""
import copy
import json
import os
import pathlib
import random
import subprocess

import numpy as np
import pytest

from conftest import ROOT

PREP = os.environ.get("SEGRT_PREPSRC", str(ROOT / "build" / "tests" / "segrt_prepsrc"))
onnx = pytest.importorskip("onnx")


def prep(*args, check=0):
    p = subprocess.run([PREP, *map(str, args)], capture_output=True, text=True, timeout=120)
    if check is not None:
        assert p.returncode == check, f"exit {p.returncode}: {p.stderr}{p.stdout}"
    return p


def parsed(*args):
    return json.loads(prep(*args).stdout)


def refused(args, status, *words):
    """segrt_prepsrc exits 2 with one line: the status and each of words."""
    p = prep(*args, check=2)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith(status + ":"), lines[0]
    for w in words:
        assert str(w) in lines[0], lines[0]
    return lines[0]


# --- settings as text -------------------------------------------------------


def test_nothing_set_is_nothing_done():
    p = parsed("set")["preprocess"]
    assert p["transpose"] == [0, 1, 2] and p["orientation"] == "" and p["crop"] == "none"
    assert p["intensity"] == [] and p["spacing"] == [0, 0, 0] and p["intensity_first"] == 0


def test_every_key_parses():
    p = parsed("set", "orientation", "ras", "spacing", "2.5, 0.8,0.8", "transpose", "2,0,1", "crop", "nonzero",
               "crop_margin", "3", "intensity", "ct:-1000,1000,50.5,200; zscore:masked", "intensity_first", "true",
               "image_interp", "cubic", "image_interp_z", "linear", "result_interp", "nearest", "result_interp_z",
               "linear", "result_probs", "1", "grid", "monai", "anisotropy", "3")["preprocess"]
    assert p["orientation"] == "RAS" and p["spacing"] == [2.5, 0.8, 0.8] and p["transpose"] == [2, 0, 1]
    assert p["crop"] == "nonzero" and p["crop_margin"] == [3, 3, 3]
    ct, z = p["intensity"]
    assert (ct["kind"], ct["lo"], ct["hi"], ct["mean"], ct["std"]) == ("ct", -1000, 1000, 50.5, 200)
    assert z["kind"] == "zscore" and z["masked"] == 1
    assert p["intensity_first"] == 1 and p["image_interp"] == "cubic" and p["image_interp_z"] == "linear"
    assert p["result_interp"] == "nearest" and p["result_interp_z"] == "linear" and p["result_probs"] == 1
    assert p["grid"] == "monai" and p["anisotropy"] == 3

    p = parsed("set", "spacing", "1.5", "crop", "-500", "crop_margin", "1,2,3", "intensity",
               "range:-57,164,0,1,clip", "orientation", "LPI")["preprocess"]
    assert p["spacing"] == [1.5, 1.5, 1.5] and p["crop"] == "threshold" and p["crop_threshold"] == -500
    assert p["crop_margin"] == [1, 2, 3] and p["orientation"] == "LPI"
    r, = p["intensity"]
    assert (r["kind"], r["a_min"], r["a_max"], r["b_min"], r["b_max"], r["clip"]) == ("range", -57, 164, 0, 1, 1)
    r, = parsed("set", "intensity", "range:0,255,-1,1")["preprocess"]["intensity"]
    assert r["clip"] == 0 and r["b_min"] == -1
    assert parsed("set", "intensity", "rescale01")["preprocess"]["intensity"][0]["kind"] == "rescale01"
    # Later settings replace earlier ones; none undoes.
    p = parsed("set", "spacing", "2", "spacing", "none", "intensity", "zscore", "intensity", "none",
               "orientation", "RAS", "orientation", "none")["preprocess"]
    assert p["spacing"] == [0, 0, 0] and p["intensity"] == [] and p["orientation"] == ""


@pytest.mark.parametrize("key,value", [
    ("orientation", "RAX"), ("orientation", "RLS"), ("orientation", "RASS"), ("orientation", "RA"),
    ("spacing", "1,2"), ("spacing", "1,0,1"), ("spacing", "-1"), ("spacing", "nan"), ("spacing", "1,,2"),
    ("spacing", "2mm"), ("spacing", "inf"),
    ("transpose", "0,1,1"), ("transpose", "0,1,3"), ("transpose", "0,1"), ("transpose", "0.5,1,2"),
    ("crop", "everything"), ("crop_margin", "-1"), ("crop_margin", "1,2"), ("crop_margin", "1.5"),
    ("intensity", "ct:1,2,3"), ("intensity", "ct:2,1,0,1"), ("intensity", "ct:0,1,0,0"), ("intensity", "zscore:all"),
    ("intensity", "range:1,1,0,1"), ("intensity", "range:0,1,0,1,clamp"), ("intensity", "minmax"),
    ("intensity", ";".join(["zscore"] * 9)), ("intensity", "zscore;"),
    ("intensity_first", "maybe"), ("image_interp", "bicubic"), ("result_interp", "cubic"), ("grid", "itk"),
    ("anisotropy", "0.5"), ("anisotropy", "-3"), ("result_probs", "2"), ("spacng", "2"),
])
def test_malformed_settings_are_refused_naming_key_and_value(key, value):
    refused(["set", key, value], "SEGRT_ERROR_INVALID_ARGUMENT", key, f"`{value}`")


# --- the model's metadata ---------------------------------------------------


def conv_model(path, meta=None):
    """A 1x1x1 convolution giving two classes, -x and x: argmax is class 1
    where x > 0. metadata_props from meta."""
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


def test_model_metadata(tmp_path):
    got = parsed("model", conv_model(tmp_path / "none.onnx", {"segrt.roi": "16,16,16"}))
    assert got["declared"] == 0 and got["preprocess"]["source"] == ""
    meta = {"segrt.preprocess.orientation": "RAS", "segrt.preprocess.spacing": "3,1.5,1.5",
            "segrt.preprocess.intensity": "range:-175,250,0,1,clip", "segrt.preprocess.crop": "-174",
            "segrt.preprocess.crop_margin": "2", "segrt.preprocess.result_probs": "1",
            "segrt.preprocess.grid": "monai", "segrt.preprocess.image_interp": "linear"}
    got = parsed("model", conv_model(tmp_path / "monai.onnx", meta))
    p = got["preprocess"]
    assert got["declared"] == 1 and "metadata" in p["source"]
    assert p["orientation"] == "RAS" and p["spacing"] == [3, 1.5, 1.5] and p["crop"] == "threshold"
    assert p["crop_threshold"] == -174 and p["crop_margin"] == [2, 2, 2] and p["result_probs"] == 1
    assert p["intensity"][0]["kind"] == "range" and p["intensity"][0]["clip"] == 1 and p["intensity_first"] == 0


@pytest.mark.parametrize("key,value", [("spacing", "1,2"), ("orientation", "up"), ("intensity", "ct:1"),
                                       ("transpose", "1,1,1"), ("result_probs", "yes please")])
def test_malformed_metadata_is_an_invalid_model(tmp_path, key, value):
    m = conv_model(tmp_path / "bad.onnx", {f"segrt.preprocess.{key}": value, "segrt.preprocess.grid": "monai"})
    refused(["model", m], "SEGRT_ERROR_INVALID_MODEL", "bad.onnx", f"segrt.preprocess.{key}", f"`{value}`")


# --- nnU-Net v2 plans -------------------------------------------------------


def plans_json():
    """nnU-Net v2's ExperimentPlanner output for a CT dataset, abridged to
    what it writes about preprocessing and inference (a real file's keys and
    layout, e.g. Dataset003_Liver's)."""
    kw = lambda seg, order: {"is_seg": seg, "order": order, "order_z": 0, "force_separate_z": None}  # noqa: E731
    base = {
        "data_identifier": "nnUNetPlans_3d_fullres", "preprocessor_name": "DefaultPreprocessor", "batch_size": 2,
        "patch_size": [128, 128, 128], "median_image_size_in_voxels": [432.0, 512.0, 512.0],
        "spacing": [1.0, 0.767578125, 0.767578125], "normalization_schemes": ["CTNormalization"],
        "use_mask_for_norm": [False], "resampling_fn_data": "resample_data_or_seg_to_shape",
        "resampling_fn_seg": "resample_data_or_seg_to_shape", "resampling_fn_data_kwargs": kw(False, 3),
        "resampling_fn_seg_kwargs": kw(True, 1), "resampling_fn_probabilities": "resample_data_or_seg_to_shape",
        "resampling_fn_probabilities_kwargs": kw(False, 1),
        "architecture": {"network_class_name": "dynamic_network_architectures.architectures.unet.PlainConvUNet",
                         "arch_kwargs": {"n_stages": 6, "features_per_stage": [32, 64, 128, 256, 320, 320]},
                         "_kw_requires_import": ["conv_op", "norm_op"]},
        "batch_dice": False}
    lowres = dict(copy.deepcopy(base), data_identifier="nnUNetPlans_3d_lowres", spacing=[2.5, 1.9, 1.9],
                  patch_size=[128, 128, 128], next_stage="3d_cascade_fullres")
    two_d = dict(copy.deepcopy(base), data_identifier="nnUNetPlans_2d", patch_size=[512, 512],
                 spacing=[0.767578125, 0.767578125], batch_size=12)
    return {
        "dataset_name": "Dataset003_Liver", "plans_name": "nnUNetPlans",
        "original_median_spacing_after_transp": [1.0, 0.767578125, 0.767578125],
        "original_median_shape_after_transp": [432, 512, 512], "image_reader_writer": "SimpleITKIO",
        "transpose_forward": [0, 1, 2], "transpose_backward": [0, 1, 2],
        "configurations": {"2d": two_d, "3d_lowres": lowres, "3d_fullres": base,
                           "3d_cascade_fullres": {"inherits_from": "3d_fullres", "previous_stage": "3d_lowres"},
                           "3d_fullres_big": {"inherits_from": "3d_fullres", "patch_size": [160, 192, 160]}},
        "experiment_planner_used": "ExperimentPlanner", "label_manager": "LabelManager",
        "foreground_intensity_properties_per_channel": {"0": {
            "max": 3071.0, "mean": 99.48007202148438, "median": 101.0, "min": -1024.0,
            "percentile_00_5": -17.0, "percentile_99_5": 201.0, "std": 37.13840103149414}}}


def dataset_json():
    return {"channel_names": {"0": "CT"}, "labels": {"background": 0, "liver": 1, "tumour": 2},
            "numTraining": 131, "file_ending": ".nii.gz", "overwrite_image_reader_writer": "SimpleITKIO"}


def write_model_dir(d, plans=None, dataset=None):
    d.mkdir(parents=True, exist_ok=True)
    (d / "plans.json").write_text(plans if isinstance(plans, str) else json.dumps(plans or plans_json(), indent=4))
    (d / "dataset.json").write_text(dataset if isinstance(dataset, str) else json.dumps(dataset or dataset_json()))
    return d


def test_nnunet_3d_fullres(tmp_path):
    d = write_model_dir(tmp_path / "Dataset003_Liver" / "nnUNetTrainer__nnUNetPlans__3d_fullres")
    got = parsed("nnunet", d, "3d_fullres")
    p, w = got["preprocess"], got["window"]
    assert p["spacing"] == [1.0, 0.767578125, 0.767578125] and p["transpose"] == [0, 1, 2]
    assert p["orientation"] == "" and p["crop"] == "nonzero" and p["intensity_first"] == 1 and p["grid"] == "nnunet"
    ct, = p["intensity"]
    assert ct["kind"] == "ct" and (ct["lo"], ct["hi"]) == (-17.0, 201.0)
    assert ct["mean"] == 99.48007202148438 and ct["std"] == 37.13840103149414
    assert p["image_interp"] == "cubic" and p["image_interp_z"] == "nearest"
    assert p["result_interp"] == "linear" and p["result_interp_z"] == "nearest" and p["result_probs"] == 0
    assert p["anisotropy"] == 3 and "nnU-Net" in p["source"]
    assert w["spatial_dims"] == 3 and w["roi"] == [128, 128, 128] and w["overlap"] == [0.5, 0.5, 0.5]
    assert w["blend"] == 2 and w["sigma_scale"] == 0.125 and w["grid"] == 1 and w["mirror_axes"] == 7
    assert w["output"] == 2 and w["activation"] == 2

    # A configuration that inherits: its own keys win, the rest come from its parent.
    got = parsed("nnunet", str(d) + "/", "3d_fullres_big")
    assert got["window"]["roi"] == [160, 192, 160] and got["preprocess"]["spacing"][0] == 1.0
    got = parsed("nnunet", d, "3d_lowres")
    assert got["preprocess"]["spacing"] == [2.5, 1.9, 1.9]


def test_nnunet_other_schemes_axes_and_orders(tmp_path):
    plans = plans_json()
    plans["transpose_forward"] = [2, 0, 1]
    plans["image_reader_writer"] = "NibabelIOWithReorient"
    c = plans["configurations"]["3d_fullres"]
    c["normalization_schemes"] = ["ZScoreNormalization", "ZScoreNormalization", "RescaleTo01Normalization",
                                  "NoNormalization"]
    c["use_mask_for_norm"] = [True, False, False, False]
    c["resampling_fn_data_kwargs"].update(order=1, order_z=3, force_separate_z=True)
    c["resampling_fn_probabilities_kwargs"].update(order=0, order_z=1)
    ds = dataset_json()
    ds["channel_names"] = {"0": "T1", "1": "T2", "2": "FLAIR", "3": "mask"}
    d = write_model_dir(tmp_path / "m", plans, ds)
    p = parsed("nnunet", d, "3d_fullres")["preprocess"]
    assert p["transpose"] == [2, 0, 1] and p["orientation"] == "RAS"
    assert [i["kind"] for i in p["intensity"]] == ["zscore", "zscore", "rescale01", "none"]
    assert [i["masked"] for i in p["intensity"]] == [1, 0, 0, 0]
    assert p["image_interp"] == "linear" and p["image_interp_z"] == "cubic" and p["anisotropy"] == 1
    assert p["result_interp"] == "nearest" and p["result_interp_z"] == "linear"
    c["resampling_fn_data_kwargs"]["force_separate_z"] = False
    c["normalization_schemes"] = ["NoNormalization"] * 4
    d = write_model_dir(tmp_path / "m2", plans, ds)
    p = parsed("nnunet", d, "3d_fullres")["preprocess"]
    assert p["anisotropy"] == 0 and p["intensity"] == []


def mutate(fn):
    plans, ds = plans_json(), dataset_json()
    fn(plans, ds)
    return plans, ds


@pytest.mark.parametrize("name,change,config,status,words", [
    ("no config", lambda p, d: None, "3d_nope", "INVALID_ARGUMENT", ["plans.json", "3d_nope", "3d_fullres", "2d"]),
    ("2-D", lambda p, d: None, "2d", "UNSUPPORTED", ["plans.json", "configurations.2d.patch_size", "2-D"]),
    ("cascade", lambda p, d: None, "3d_cascade_fullres", "UNSUPPORTED",
     ["configurations.3d_cascade_fullres.previous_stage"]),
    ("parent missing", lambda p, d: p["configurations"]["3d_fullres_big"].update(inherits_from="3d_gone"),
     "3d_fullres_big", "INVALID_MODEL", ["configurations.3d_fullres_big.inherits_from", "3d_gone"]),
    ("loop", lambda p, d: p["configurations"]["3d_fullres"].update(inherits_from="3d_fullres_big"),
     "3d_fullres_big", "INVALID_MODEL", ["inherits_from", "loops"]),
    ("no configurations", lambda p, d: p.pop("configurations"), "3d_fullres", "INVALID_MODEL",
     ["plans.json", "configurations"]),
    ("spacing", lambda p, d: p["configurations"]["3d_fullres"].update(spacing=[1, 0, 1]), "3d_fullres_big",
     "INVALID_MODEL", ["configurations.3d_fullres.spacing"]),
    ("spacing kind", lambda p, d: p["configurations"]["3d_fullres"].update(spacing="1mm"), "3d_fullres",
     "INVALID_MODEL", ["configurations.3d_fullres.spacing"]),
    ("patch", lambda p, d: p["configurations"]["3d_fullres"].update(patch_size=[128, 128.5, 128]), "3d_fullres",
     "INVALID_MODEL", ["configurations.3d_fullres.patch_size", "128.5"]),
    ("no patch", lambda p, d: p["configurations"]["3d_fullres"].pop("patch_size"), "3d_fullres", "INVALID_MODEL",
     ["configurations.3d_fullres.patch_size", "absent"]),
    ("scheme", lambda p, d: p["configurations"]["3d_fullres"].update(normalization_schemes=["MyNormalization"]),
     "3d_fullres", "UNSUPPORTED", ["normalization_schemes", "MyNormalization"]),
    ("ct props", lambda p, d: p["foreground_intensity_properties_per_channel"]["0"].pop("percentile_99_5"),
     "3d_fullres", "INVALID_MODEL", ["foreground_intensity_properties_per_channel.0.percentile_99_5"]),
    ("ct props kind", lambda p, d: p["foreground_intensity_properties_per_channel"]["0"].update(mean="high"),
     "3d_fullres", "INVALID_MODEL", ["foreground_intensity_properties_per_channel.0.mean"]),
    ("mask count", lambda p, d: p["configurations"]["3d_fullres"].update(use_mask_for_norm=[True, False]),
     "3d_fullres", "INVALID_MODEL", ["use_mask_for_norm"]),
    ("channels", lambda p, d: d["channel_names"].update({"1": "PET"}), "3d_fullres", "INVALID_MODEL",
     ["dataset.json", "channel_names"]),
    ("regions", lambda p, d: d.update(labels={"background": 0, "kidney": [1, 2], "tumor": 2},
                                      regions_class_order=[1, 2]), "3d_fullres", "UNSUPPORTED",
     ["dataset.json", "regions_class_order"]),
    ("region label", lambda p, d: d["labels"].update(kidney=[1, 2]), "3d_fullres", "UNSUPPORTED",
     ["dataset.json", "labels", "kidney"]),
    ("order", lambda p, d: p["configurations"]["3d_fullres"]["resampling_fn_data_kwargs"].update(order=5),
     "3d_fullres", "UNSUPPORTED", ["resampling_fn_data_kwargs", "order 5"]),
    ("probs order", lambda p, d: p["configurations"]["3d_fullres"]["resampling_fn_probabilities_kwargs"].update(
        order=3), "3d_fullres", "UNSUPPORTED", ["resampling_fn_probabilities_kwargs", "order 3"]),
    ("force", lambda p, d: p["configurations"]["3d_fullres"]["resampling_fn_data_kwargs"].update(
        force_separate_z="yes"), "3d_fullres", "INVALID_MODEL", ["force_separate_z"]),
    ("resampling fn", lambda p, d: p["configurations"]["3d_fullres"].update(resampling_fn_data="my_resample"),
     "3d_fullres", "UNSUPPORTED", ["configurations.3d_fullres.resampling_fn_data", "my_resample"]),
    ("reader", lambda p, d: p.update(image_reader_writer="Tiff3DIO"), "3d_fullres", "UNSUPPORTED",
     ["image_reader_writer", "Tiff3DIO"]),
    ("transpose", lambda p, d: p.update(transpose_forward=[0, 0, 1]), "3d_fullres", "INVALID_MODEL",
     ["transpose_forward"]),
])
def test_nnunet_refusals_name_file_and_key(tmp_path, name, change, config, status, words):
    d = write_model_dir(tmp_path / "m", *mutate(change))
    refused(["nnunet", d, config], "SEGRT_ERROR_" + status, *words)


def test_nnunet_files_missing_or_not_json(tmp_path):
    d = write_model_dir(tmp_path / "m")
    (d / "dataset.json").unlink()
    refused(["nnunet", d, "3d_fullres"], "SEGRT_ERROR_IO", "dataset.json")
    refused(["nnunet", tmp_path / "nowhere", "3d_fullres"], "SEGRT_ERROR_IO", "plans.json")
    d = write_model_dir(tmp_path / "t", plans='{"configurations": {"3d_fullres": {"spacing": [1, 1,\n 1}}}')
    refused(["nnunet", d, "3d_fullres"], "SEGRT_ERROR_INVALID_MODEL", "plans.json", "not valid JSON", "line 2")
    d = write_model_dir(tmp_path / "a", plans="[1, 2, 3]")
    refused(["nnunet", d, "3d_fullres"], "SEGRT_ERROR_INVALID_MODEL", "plans.json", "not an object")
    d = write_model_dir(tmp_path / "deep", plans="[" * 100000 + "]" * 100000)
    refused(["nnunet", d, "3d_fullres"], "SEGRT_ERROR_INVALID_MODEL", "plans.json")


def test_nnunet_mutilated_files_never_crash(tmp_path):
    """Byte-level damage and type confusion in both files: each run ends with
    success or a one-line refusal naming a file, never a crash."""
    rng = random.Random(39)
    good_plans, good_ds = json.dumps(plans_json()), json.dumps(dataset_json())
    values = [None, True, 0, -1, 1e308, "x", [], {}, [1, 2], [[1]], {"a": 1}]

    def walk(node, path=()):
        yield path
        if isinstance(node, dict):
            for k, v in node.items():
                yield from walk(v, path + (k,))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield from walk(v, path + (i,))

    plans_paths = list(walk(plans_json()))[1:]
    for n in range(120):
        plans, ds = good_plans, good_ds
        kind = n % 3
        if kind == 0:  # a value somewhere replaced by another kind of value
            p = plans_json()
            path = rng.choice(plans_paths)
            node = p
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = rng.choice(values)
            plans = json.dumps(p)
        elif kind == 1:  # bytes cut or flipped
            b = bytearray(plans.encode())
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            plans = bytes(b[:rng.randrange(len(b) + 1)] if rng.random() < 0.3 else b).decode("latin-1")
        else:
            ds = ds[:rng.randrange(len(ds) + 1)]
        d = write_model_dir(tmp_path / f"f{n}", plans, ds)
        p = prep("nnunet", d, rng.choice(["3d_fullres", "3d_fullres_big", "2d"]), check=None)
        assert p.returncode in (0, 2), f"case {n}: exit {p.returncode}: {p.stderr}"
        if p.returncode == 2:
            lines = p.stderr.strip().splitlines()
            assert len(lines) == 1 and ("plans.json" in lines[0] or "dataset.json" in lines[0]), p.stderr
