#!/usr/bin/env python3
"""An nnU-Net-sized 3d_fullres network with seeded random weights, in the
three forms the contenders load:

  * an nnU-Net results folder, $nnUNet_results/Dataset999_Bench/
    nnUNetTrainer__nnUNetPlans__3d_fullres/ with plans.json, dataset.json
    and fold_0/checkpoint_final.pth, as nnunetv2's
    nnUNetPredictor.initialize_from_trained_model_folder loads it;
  * net_torch.pt: the architecture's arguments and the state dict, which the
    MONAI side builds into the same torch module (dynamic_network_architectures'
    PlainConvUNet);
  * net.onnx: the same weights, opset 17, batch dynamic ("input" N x 1 x
    patch -> "logits" N x classes x patch), for segrt.

    python3 make_model.py [--small] [--work DIR] [--seed N]

The network is PlainConvUNet as nnU-Net's default planner writes it for a
CT: 6 stages of 32, 64, 128, 256, 320, 320 features, 3x3x3 kernels, strides
1, 2, 2, 2, 2, 2, two convolutions per stage (with bias), InstanceNorm3d
(affine, eps 1e-5), LeakyReLU (0.01), deep supervision off; patch
128x128x128 (chosen, see config.py), 14 classes. Weights: seeded random
channel mixes over fixed smooth kernels (randomise() says why), random norm
scales and shifts and conv biases.

plans.json's CT normalisation (foreground_intensity_properties_per_channel)
holds the statistics make_case.py measured on the body's voxels, so
CTNormalization clips to their 0.5 and 99.5 percentiles and subtracts the
mean and divides by the std. The same map as MONAI's ScaleIntensityRange:
a_min, a_max = p0.5, p99.5; b_min, b_max = (a_min - mean) / std, (a_max -
mean) / std, clip: model.json keeps these as "ct_window".
"""
import argparse
import json
import os
import pathlib
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import config  # noqa: E402

CLASS_NAMES = ["background", "liver", "spleen", "kidney_right", "kidney_left", "bladder", "lung_right", "lung_left",
               "aorta", "femur_right", "femur_left", "vertebrae", "intervertebral_disc", "soft_tissue"]


def arch_kwargs(s):
    """nnU-Net's plans 'architecture' entry: PlainConvUNet's arguments with
    the classes written as import paths."""
    n = len(s.features)
    return {
        "network_class_name": "dynamic_network_architectures.architectures.unet.PlainConvUNet",
        "arch_kwargs": {
            "n_stages": n,
            "features_per_stage": list(s.features),
            "conv_op": "torch.nn.modules.conv.Conv3d",
            "kernel_sizes": [[3, 3, 3]] * n,
            "strides": [[st] * 3 for st in s.strides],
            "n_conv_per_stage": [s.n_conv] * n,
            "n_conv_per_stage_decoder": [s.n_conv] * (n - 1),
            "conv_bias": True,
            "norm_op": "torch.nn.modules.instancenorm.InstanceNorm3d",
            "norm_op_kwargs": {"eps": config.INSTANCE_NORM_EPS, "affine": True},
            "dropout_op": None,
            "dropout_op_kwargs": None,
            "nonlin": "torch.nn.LeakyReLU",
            "nonlin_kwargs": {"inplace": True},
        },
        "_kw_requires_import": ["conv_op", "norm_op", "dropout_op", "nonlin"],
    }


def build_network(arch, in_channels, classes):
    """The module nnU-Net's get_network_from_plans builds (without nnunetv2:
    the MONAI side needs only dynamic_network_architectures)."""
    import pydoc
    kw = dict(arch["arch_kwargs"])
    for k in arch["_kw_requires_import"]:
        if kw[k] is not None:
            kw[k] = pydoc.locate(kw[k])
    cls = pydoc.locate(arch["network_class_name"])
    return cls(input_channels=in_channels, num_classes=classes, deep_supervision=False, **kw)


def ct_window(fg):
    """nnU-Net's CTNormalization as ScaleIntensityRange(a_min, a_max, b_min,
    b_max, clip=True)."""
    a_min, a_max = fg["percentile_00_5"], fg["percentile_99_5"]
    return [a_min, a_max, (a_min - fg["mean"]) / max(fg["std"], 1e-8), (a_max - fg["mean"]) / max(fg["std"], 1e-8)]


def plans_json(s, case, arch):
    shape = [int(round(n * sp / t)) for n, sp, t in zip(case["shape_zyx"], case["spacing_zyx"],
                                                          s.target_spacing_zyx)]
    return {
        "dataset_name": config.DATASET_NAME,
        "plans_name": "nnUNetPlans",
        "original_median_spacing_after_transp": list(s.target_spacing_zyx),
        "original_median_shape_after_transp": list(case["shape_zyx"]),
        "image_reader_writer": "SimpleITKIO",
        "transpose_forward": [0, 1, 2],
        "transpose_backward": [0, 1, 2],
        "configurations": {
            "3d_fullres": {
                "data_identifier": "nnUNetPlans_3d_fullres",
                "preprocessor_name": "DefaultPreprocessor",
                "batch_size": 2,
                "patch_size": list(s.patch_zyx),
                "median_image_size_in_voxels": shape,
                "spacing": list(s.target_spacing_zyx),
                "normalization_schemes": ["CTNormalization"],
                "use_mask_for_norm": [False],
                "resampling_fn_data": "resample_data_or_seg_to_shape",
                "resampling_fn_seg": "resample_data_or_seg_to_shape",
                "resampling_fn_data_kwargs": {"is_seg": False, "order": 3, "order_z": 0, "force_separate_z": None},
                "resampling_fn_seg_kwargs": {"is_seg": True, "order": 1, "order_z": 0, "force_separate_z": None},
                "resampling_fn_probabilities": "resample_data_or_seg_to_shape",
                "resampling_fn_probabilities_kwargs": {"is_seg": False, "order": 1, "order_z": 0,
                                                       "force_separate_z": None},
                "architecture": arch,
                "batch_dice": False,
            }
        },
        "experiment_planner_used": "ExperimentPlanner",
        "label_manager": "LabelManager",
        "foreground_intensity_properties_per_channel": {"0": case["foreground_intensity_properties"]},
    }


def dataset_json(s):
    names = CLASS_NAMES[:s.classes] if s.classes <= len(CLASS_NAMES) else \
        CLASS_NAMES + [f"class_{i}" for i in range(len(CLASS_NAMES), s.classes)]
    return {"channel_names": {"0": "CT"}, "labels": {n: i for i, n in enumerate(names)}, "numTraining": 1,
            "file_ending": ".nii.gz", "name": "Bench", "description": "segrt bench/volume_vs_monai, random weights"}


def randomise(net, seed):
    """Seeded random weights that give labels following the anatomy rather
    than the CT's noise: every 3x3x3 convolution is a random channel mix
    (He's variance, 2 / fan-in) times one fixed binomial blur (1 2 1)^3 / 64,
    every transposed convolution a random channel mix constant over its
    footprint (nearest-neighbour upsampling, no checkerboard); the 1x1x1
    head keeps nnU-Net's He initialisation. With unstructured random kernels
    the labels of a random network are mostly amplified voxel noise, so that
    a resampling that differs by a fraction of a voxel changes half of them
    and agreement would measure nothing. The norms' scales and shifts and
    the convolutions' biases are drawn at random too, so that none of them
    is the identity a converter could skip."""
    import math

    import torch
    torch.manual_seed(seed)
    if hasattr(net, "initialize"):
        net.apply(net.initialize)
    g = torch.Generator().manual_seed(seed + 1)
    b = torch.tensor([1.0, 2.0, 1.0]) / 4
    blur = b[:, None, None] * b[None, :, None] * b[None, None, :]
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.InstanceNorm3d) and m.affine:
                m.weight.copy_(torch.empty_like(m.weight).uniform_(0.5, 1.5, generator=g))
                m.bias.copy_(torch.empty_like(m.bias).normal_(0.0, 0.1, generator=g))
            elif isinstance(m, torch.nn.ConvTranspose3d):
                cin, cout = m.weight.shape[:2]
                mix = torch.randn(cin, cout, generator=g) * math.sqrt(1.0 / cin)
                m.weight.copy_(mix[:, :, None, None, None].expand_as(m.weight))
            elif isinstance(m, torch.nn.Conv3d):
                if tuple(m.kernel_size) == (3, 3, 3):
                    cout, cin = m.weight.shape[:2]
                    mix = torch.randn(cout, cin, generator=g) * math.sqrt(2.0 / cin)
                    m.weight.copy_(mix[:, :, None, None, None] * blur)
                if m.bias is not None:
                    m.bias.copy_(torch.empty_like(m.bias).normal_(0.0, 0.05, generator=g))


def export_onnx(net, s, path):
    import torch
    # The exporter traces one forward pass: on the GPU where there is one
    # (a 128^3 window of this network is ~1 TFLOP).
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    net = net.to(dev)
    x = torch.zeros((1, 1) + tuple(s.patch_zyx), device=dev)
    tmp = str(path) + ".tmp"
    kwargs = dict(input_names=["input"], output_names=["logits"], opset_version=17,
                  dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, do_constant_folding=True)
    try:
        torch.onnx.export(net, x, tmp, dynamo=False, **kwargs)
    except TypeError:  # torch without the dynamo switch
        torch.onnx.export(net, x, tmp, **kwargs)
    net.to("cpu")
    os.replace(tmp, path)


def make(paths, s, seed=config.SEED, log=print):
    import torch
    t0 = time.perf_counter()
    case = json.loads(paths.case_json.read_text())
    arch = arch_kwargs(s)
    net = build_network(arch, 1, s.classes).eval()
    randomise(net, seed)
    params = sum(p.numel() for p in net.parameters())
    folder = paths.model_folder
    (folder / "fold_0").mkdir(parents=True, exist_ok=True)
    plans = plans_json(s, case, arch)
    (folder / "plans.json").write_text(json.dumps(plans, indent=1) + "\n")
    (folder / "dataset.json").write_text(json.dumps(dataset_json(s), indent=1) + "\n")
    # As nnU-Net's trainer saves it: the module registers some layers under
    # two names (and the decoder holds the encoder), and torch.save keeps one
    # copy of each shared tensor where a clone per key would triple the file.
    state = net.state_dict()
    ckpt = {"network_weights": state, "trainer_name": "nnUNetTrainer",
            "init_args": {"plans": plans, "configuration": "3d_fullres", "fold": 0, "dataset_json": dataset_json(s),
                          "device": "cpu"},
            "inference_allowed_mirroring_axes": (0, 1, 2), "current_epoch": 1000, "optimizer_state": None,
            "grad_scaler_state": None, "logging": {}, "_best_ema": None}
    torch.save(ckpt, folder / "fold_0" / "checkpoint_final.pth")
    paths.onnx.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"arch": arch, "in_channels": 1, "classes": s.classes, "state_dict": state}, paths.torch_weights)
    t1 = time.perf_counter()
    export_onnx(net, s, paths.onnx)
    t2 = time.perf_counter()
    fg = case["foreground_intensity_properties"]
    info = {"setup": s.name, "seed": seed, "parameters": params, "patch_zyx": list(s.patch_zyx),
            "classes": s.classes, "arch": arch, "ct_window": ct_window(fg), "foreground_intensity_properties": fg,
            "onnx_bytes": os.path.getsize(paths.onnx), "torch_version": torch.__version__,
            "seconds": {"build_and_save": t1 - t0, "onnx_export": t2 - t1}}
    paths.model_json.write_text(json.dumps(info, indent=1) + "\n")
    log(f"model: PlainConvUNet {len(s.features)} stages {list(s.features)}, {params / 1e6:.1f} M parameters, "
        f"patch {'x'.join(map(str, s.patch_zyx))}, {s.classes} classes; CT window "
        f"{', '.join(f'{v:.4g}' for v in info['ct_window'])}; saved in {t1 - t0:.1f} s, ONNX "
        f"{info['onnx_bytes'] / 2**20:.0f} MiB in {t2 - t1:.1f} s")
    return info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="a tiny network for development on a CPU")
    ap.add_argument("--work", default=None, help="work folder (default $VBENCH_WORK or /tmp/volume_vs_monai[-small])")
    ap.add_argument("--seed", type=int, default=config.SEED)
    a = ap.parse_args(argv)
    paths = config.Paths(config.default_work_dir(a.small) if a.work is None else pathlib.Path(a.work))
    make(paths, config.setup(a.small), a.seed)


if __name__ == "__main__":
    main()
