#!/usr/bin/env python3
"""An nnU-Net-sized 3d_fullres network, seeded and trained briefly on the
case, in the three forms the contenders load:

  * an nnU-Net results folder, $nnUNet_results/Dataset999_Bench/
    nnUNetTrainer__nnUNetPlans__3d_fullres/ with plans.json, dataset.json
    and fold_0/checkpoint_final.pth, as nnunetv2's
    nnUNetPredictor.initialize_from_trained_model_folder loads it;
  * net_torch.pt: the architecture's arguments and the state dict, which the
    MONAI side builds into the same torch module (dynamic_network_architectures'
    PlainConvUNet);
  * net.onnx: the same weights, opset 17, batch dynamic ("input" N x 1 x
    patch -> "logits" N x classes x patch), for segrt.

    python3 make_model.py [--small] [--work DIR] [--seed N] [--steps N] [--no-check]

The network is PlainConvUNet as nnU-Net's default planner writes it for a
CT: 6 stages of 32, 64, 128, 256, 320, 320 features, 3x3x3 kernels, strides
1, 2, 2, 2, 2, 2, two convolutions per stage (with bias), InstanceNorm3d
(affine, eps 1e-5), LeakyReLU (0.01), deep supervision off; patch
128x128x128 (chosen, see config.py), 14 classes. Weights: seeded random
channel mixes over fixed smooth kernels (randomise() says why), random norm
scales and shifts and conv biases, then train(): a few hundred steps on the
case's noise-free structures grouped into tissue classes (TISSUE_CLASSES),
so that the labels are a clear function of the anatomy and float16 against
float32 flips almost none of them (a random network's logits are near ties
on many voxels). decisiveness() measures that and model.json keeps it.

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
    # nnU-Net wants label 0 named background: here the air (and the lungs).
    names = ["background"] + [n for n, _ in tissue_classes(s.classes)[1:]]
    names += [f"unused_{i}" for i in range(len(names), s.classes)]
    return {"channel_names": {"0": "CT"}, "labels": {n: i for i, n in enumerate(names)}, "numTraining": 1,
            "file_ending": ".nii.gz", "name": "Bench",
            "description": "segrt bench/volume_vs_monai, a network fit to one synthetic case"}


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


# The classes the network is trained to: make_case's structures grouped by
# what the CT window lets a network tell apart at a glance. The lungs (-850
# HU) clip to the window's floor as air does, the organs (10-60 HU) differ
# from the body's soft tissue (5-65 HU) by less than its noise: either
# would be a class decided by faint context, its labels flipping under any
# change of arithmetic. Where there are fewer classes than groups (--small),
# the disc and the aorta share one. Classes past the groups are trained to
# lose everywhere (the head keeps its size and FLOPs).
TISSUE_CLASSES = [("air", ["air", "lung_right", "lung_left"]),
                  ("soft_tissue", ["body", "liver", "spleen", "kidney_right", "kidney_left", "bladder"]),
                  ("bone", ["vertebra", "femur_right", "femur_left"]),
                  ("aorta", ["aorta"]),
                  ("disc", ["disc"])]


def tissue_classes(classes):
    """[(name, [structure, ...]), ...], at most `classes` of them."""
    if classes >= len(TISSUE_CLASSES):
        return TISSUE_CLASSES
    if classes < 3:
        raise ValueError(f"make_model: {classes} classes; the network needs at least 3 (air, soft tissue, bone)")
    out = TISSUE_CLASSES[:classes - 1]
    return out + [("_".join(n for n, _ in TISSUE_CLASSES[classes - 1:]),
                   [m for _, ms in TISSUE_CLASSES[classes - 1:] for m in ms])]


def class_of_structure(structures, classes):
    """The class each make_case structure (in make_case.STRUCTURES order)
    is trained to."""
    of = {m: c for c, (_, ms) in enumerate(tissue_classes(classes)) for m in ms}
    return [of[n] for n in structures]


def monai_inputs(paths, s, window, with_labels=True):
    """The case as the monai contender feeds it to the network (the NIfTI,
    which holds the DICOM series' voxels and geometry: RAS, the plans'
    spacing, the CT window), and the structures on the same grid (nearest)."""
    from monai.transforms import Compose, EnsureChannelFirstd, LoadImaged, Orientationd, ScaleIntensityRanged, Spacingd
    keys = ["image", "label"] if with_labels else ["image"]
    tr = Compose([LoadImaged(keys=keys), EnsureChannelFirstd(keys=keys), Orientationd(keys=keys, axcodes="RAS"),
                  Spacingd(keys=keys, pixdim=tuple(s.target_spacing_zyx[::-1]),
                           mode=("bilinear", "nearest")[:len(keys)]),
                  ScaleIntensityRanged(keys="image", a_min=window[0], a_max=window[1], b_min=window[2],
                                       b_max=window[3], clip=True)])
    d = tr({"image": str(paths.nifti_case), "label": str(paths.structures)} if with_labels else
           {"image": str(paths.nifti_case)})
    import torch
    img = d["image"].as_tensor().float().contiguous()  # plain tensors, not MetaTensors
    lab = d["label"].as_tensor().long()[0].contiguous() if with_labels else None
    return img, lab


def train(net, paths, s, window, seed, steps, device, log=print):
    """Fits the randomised network to the case's structures (make_case's
    STRUCTURES, grouped by class_of_structure): `steps` Adam steps on random
    patch-sized crops (batch 2, cross entropy, bfloat16 autocast on CUDA),
    seeded crops and deterministic algorithms. A network whose labels are a
    clear function of the anatomy leads by a wide logit margin almost
    everywhere, so that FP16 against FP32 flips few voxels; a random one
    (randomise alone) has near-ties everywhere."""
    import math

    import torch
    case = json.loads(paths.case_json.read_text())
    cmap = torch.tensor(class_of_structure(case["structures"], s.classes))
    img, lab = monai_inputs(paths, s, window)
    target = cmap[lab]
    dev = torch.device(device)
    torch.use_deterministic_algorithms(True, warn_only=True)
    g = torch.Generator().manual_seed(seed + 2)
    net.to(dev).train()
    opt = torch.optim.Adam(net.parameters(), lr=config.TRAIN_LR)
    # Cosine to zero: the last steps settle the margins instead of jumping about.
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 0.5 * (1 + math.cos(math.pi * i / steps)))
    pz = [min(p, n) for p, n in zip(s.patch_zyx[::-1], img.shape[1:])]  # RAS (x, y, z), cube
    img_d, tgt_d = img.to(dev), target.to(dev)
    # Rare classes (the aorta, the discs: a few voxels in a thousand) weigh
    # more, or cross entropy leaves them to their neighbours.
    count = torch.bincount(target.ravel(), minlength=s.classes).float()
    weight = torch.where(count > 0, (count.sum() / count.clamp(min=1)) ** 0.25, torch.zeros(()))
    weight = (weight / weight[count > 0].mean()).to(dev)
    amp = dev.type == "cuda"
    t0 = time.perf_counter()
    losses = []
    for step in range(steps):
        xs, ys = [], []
        for _ in range(2):
            o = [int(torch.randint(0, n - p + 1, (1,), generator=g)) for n, p in zip(img.shape[1:], pz)]
            sl = tuple(slice(a, a + p) for a, p in zip(o, pz))
            xc, yc = img_d[(slice(None),) + sl], tgt_d[sl]
            # Random flips and axis orders: nnU-Net feeds the array as stored, (z, y, x) with two axes
            # flipped against MONAI's RAS (x, y, z); labels that follow the anatomy must not depend on them.
            perm = torch.randperm(3, generator=g).tolist() if len(set(pz)) == 1 else [0, 1, 2]
            flip = [i for i in range(3) if int(torch.randint(0, 2, (1,), generator=g))]
            if not config.TRAIN_AUGMENT:
                perm, flip = [0, 1, 2], []
            xc, yc = xc.permute([0] + [p + 1 for p in perm]), yc.permute(perm)
            if flip:
                xc, yc = xc.flip([i + 1 for i in flip]), yc.flip(flip)
            xs.append(xc)
            ys.append(yc)
        x, y = torch.stack(xs), torch.stack(ys)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
            loss = torch.nn.functional.cross_entropy(net(x).float(), y, weight=weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if step % max(1, steps // 10) == 0 or step == steps - 1:
            log(f"train: step {step + 1}/{steps} loss {losses[-1]:.4f} ({time.perf_counter() - t0:.0f} s)")
    net.eval().to("cpu")
    torch.use_deterministic_algorithms(False)
    return {"steps": steps, "device": str(dev), "seconds": time.perf_counter() - t0, "loss_first": losses[0],
            "loss_last": losses[-1], "loss_last10": sum(losses[-10:]) / len(losses[-10:]),
            "class_of_structure": dict(zip(case["structures"], cmap.tolist()))}


def decisiveness(net, paths, s, window, device, sw_batch=None, log=print):
    """MONAI's sliding window (the contender's settings) over the case in
    float32 and under autocast (float16 on CUDA, bfloat16 on a CPU), on the
    resampled grid: the share of voxels whose labels agree, the share whose
    top-2 float32 logit gap is below a few thresholds, and the accuracy
    against the structures. The precision floor the benchmark's agreement
    target needs (run.py --floor measures it end to end)."""
    import torch
    from monai.inferers import sliding_window_inference
    case = json.loads(paths.case_json.read_text())
    cmap = torch.tensor(class_of_structure(case["structures"], s.classes))
    img, lab = monai_inputs(paths, s, window)
    dev = torch.device(device)
    net = net.to(dev).eval()
    x = img[None].to(dev)
    # The float32 reference without TF32, as contenders.py's monai_fp32.
    tf32 = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    roi = tuple(s.patch_zyx[::-1])

    def infer():
        return sliding_window_inference(x, roi, sw_batch or s.sw_batch, net, overlap=config.OVERLAP, mode="gaussian",
                                        sigma_scale=config.SIGMA_SCALE)[0].float()

    out = {"agreement_autocast_vs_fp32": {}}
    with torch.no_grad():
        ref = infer()
        lab_ref = ref.argmax(0)
        for dt in (torch.float16, torch.bfloat16):
            with torch.autocast(dev.type, dtype=dt):
                low = infer()
            out["agreement_autocast_vs_fp32"][str(dt).replace("torch.", "")] = \
                float((low.argmax(0) == lab_ref).float().mean())
            del low
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = tf32
    net.to("cpu")
    top2 = ref.topk(2, dim=0).values
    gap = (top2[0] - top2[1]).cpu()
    lab_ref = lab_ref.cpu()
    out["gap_below"] = {str(t): float((gap < t).float().mean()) for t in (0.01, 0.05, 0.1, 0.5, 1.0)}
    out["gap_median"] = float(gap.median())
    out["logit_abs_max"] = float(ref.abs().max())
    out["accuracy_vs_structures"] = float((lab_ref == cmap[lab]).float().mean())
    out["voxels_per_class"] = torch.bincount(lab_ref.ravel(), minlength=s.classes).tolist()
    ag = out["agreement_autocast_vs_fp32"]
    log(f"decisiveness: autocast vs float32 labels agree on {100 * ag['float16']:.4f} % (float16), "
        f"{100 * ag['bfloat16']:.4f} % (bfloat16) of {gap.numel()} voxels; top-2 gap < 0.05 on "
        f"{100 * out['gap_below']['0.05']:.4f} %, < 0.5 on {100 * out['gap_below']['0.5']:.4f} %; "
        f"labels match the structures on {100 * out['accuracy_vs_structures']:.2f} %")
    return out


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


def make(paths, s, seed=config.SEED, log=print, steps=None, check=True):
    import torch
    t0 = time.perf_counter()
    case = json.loads(paths.case_json.read_text())
    window = ct_window(case["foreground_intensity_properties"])
    arch = arch_kwargs(s)
    net = build_network(arch, 1, s.classes).eval()
    randomise(net, seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    steps = s.train_steps if steps is None else steps
    training = train(net, paths, s, window, seed, steps, device, log) if steps > 0 else {"steps": 0}
    t_train = time.perf_counter()
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
            "classes": s.classes, "arch": arch, "ct_window": window, "foreground_intensity_properties": fg,
            "onnx_bytes": os.path.getsize(paths.onnx), "torch_version": torch.__version__, "training": training,
            "seconds": {"train": t_train - t0, "build_and_save": t1 - t_train, "onnx_export": t2 - t1}}
    if check:
        info["decisiveness"] = decisiveness(net, paths, s, window, device, log=log)
        info["seconds"]["decisiveness"] = time.perf_counter() - t2
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
    ap.add_argument("--steps", type=int, default=None,
                    help="training steps on the case (default: the setup's train_steps; 0: random weights only)")
    ap.add_argument("--no-check", action="store_true", help="do not measure the float32 vs autocast label floor")
    a = ap.parse_args(argv)
    paths = config.Paths(config.default_work_dir(a.small) if a.work is None else pathlib.Path(a.work))
    make(paths, config.setup(a.small), a.seed, steps=a.steps, check=not a.no_check)


if __name__ == "__main__":
    main()
