#!/usr/bin/env python3
"""The benchmark's network: a 2-D UNet with a ResNet-34 encoder (about 24 M
parameters), trained briefly on the synthetic slide's own classes, as a torch
state dict (the Python contenders) and ONNX (segrt).

    python3 make_model.py SLIDE.svs --work DIR [--steps N] [--classes 3] [--device cuda|cpu] [--no-check]

Architecture, in plain torch (no segmentation_models_pytorch), the layout of
the common "UNet with a ResNet-34 encoder":
  * encoder: 7x7 stride-2 stem (64), 3x3 max pool, four stages of basic
    residual blocks, 3-4-6-3 blocks of 64-128-256-512 channels, BatchNorm;
  * decoder: five blocks of 2x nearest upsampling, concatenation with the
    encoder's feature map of that resolution (stage 3, 2, 1, the stem; none
    for the last), two 3x3 conv + BatchNorm + ReLU, 256-128-64-32-16
    channels; a 3x3 head to the classes.
Input: 3 x 512 x 512 RGB normalised as ImageNet's ((x * (1/255) - mean) / std);
output: logits, classes x 512 x 512. Classes: 0 background, 1 stroma,
2 nucleus (make_slide.render()'s classes); --classes 2 merges 1 and 2.

Weights: trained for config.TRAIN_STEPS (300) Adam steps on 0.5 um/px
patches rendered by make_slide.render() (the noise-free picture, before
JPEG) with their true classes. A random network's logits are near ties on
most pixels, so FP16 against FP32 (or segrt against PyTorch) would flip
labels at random and agreement would measure nothing; a network that has
learnt a colour-and-shape rule leads by a wide margin almost everywhere.
decisiveness() measures that on held-out patches (FP32 against autocast,
the top-2 logit gaps, the accuracy against the true classes) and model.json
keeps it.

ONNX: opset 17, batch dynamic ("input" N x 3 x 512 x 512 -> "logits"),
BatchNorm folded by the exporter, metadata_props for segrt: segrt.roi,
segrt.overlap, segrt.mpp, segrt.input.scale (1/255: segrt multiplies)/mean/std
(config.py).
"""
import argparse
import json
import math
import os
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import config  # noqa: E402
import make_slide  # noqa: E402


def build_network(classes=config.CLASSES):
    import torch
    from torch import nn

    def conv_bn(cin, cout, k=3, stride=1):
        return [nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout)]

    class Basic(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.body = nn.Sequential(*conv_bn(cin, cout, 3, stride), nn.ReLU(inplace=True), *conv_bn(cout, cout))
            self.down = nn.Sequential(*conv_bn(cin, cout, 1, stride)) if stride != 1 or cin != cout else None

        def forward(self, x):
            return torch.relu(self.body(x) + (x if self.down is None else self.down(x)))

    def stage(cin, cout, n, stride):
        return nn.Sequential(Basic(cin, cout, stride), *[Basic(cout, cout, 1) for _ in range(n - 1)])

    class Up(nn.Module):
        def __init__(self, cin, cskip, cout):
            super().__init__()
            self.conv = nn.Sequential(*conv_bn(cin + cskip, cout), nn.ReLU(inplace=True), *conv_bn(cout, cout),
                                      nn.ReLU(inplace=True))

        def forward(self, x, skip=None):
            x = nn.functional.interpolate(x, scale_factor=2.0, mode="nearest")
            return self.conv(x if skip is None else torch.cat([x, skip], 1))

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(*conv_bn(3, 64, 7, 2), nn.ReLU(inplace=True))
            self.pool = nn.MaxPool2d(3, 2, 1)
            self.enc = nn.ModuleList([stage(64, 64, 3, 1), stage(64, 128, 4, 2), stage(128, 256, 6, 2),
                                      stage(256, 512, 3, 2)])
            self.dec = nn.ModuleList([Up(512, 256, 256), Up(256, 128, 128), Up(128, 64, 64), Up(64, 64, 32),
                                      Up(32, 0, 16)])
            self.head = nn.Conv2d(16, classes, 3, 1, 1)

        def forward(self, x):
            s0 = self.stem(x)               # 1/2, 64
            e1 = self.enc[0](self.pool(s0))  # 1/4, 64
            e2 = self.enc[1](e1)            # 1/8, 128
            e3 = self.enc[2](e2)            # 1/16, 256
            e4 = self.enc[3](e3)            # 1/32, 512
            d = self.dec[0](e4, e3)
            d = self.dec[1](d, e2)
            d = self.dec[2](d, e1)
            d = self.dec[3](d, s0)
            d = self.dec[4](d)
            return self.head(d)

    return UNet()


def parameters(net):
    return sum(p.numel() for p in net.parameters())


def normalise(torch, x_uint8_nhwc, device, dtype=None):
    """uint8 N x H x W x 3 (numpy or tensor) -> the network's input, N x 3 x
    H x W channels_last, (x * scale - mean) / std in float32, step by step
    as segrt computes it from the ONNX metadata."""
    x = torch.as_tensor(x_uint8_nhwc).to(device, non_blocking=True)
    x = x.permute(0, 3, 1, 2).float()
    mean = torch.tensor(config.MEAN, dtype=torch.float32, device=device).view(1, 3, 1, 1)
    std = torch.tensor(config.STD, dtype=torch.float32, device=device).view(1, 3, 1, 1)
    x = ((x * torch.tensor(config.SCALE, dtype=torch.float32, device=device) - mean) / std)
    x = x.contiguous(memory_format=torch.channels_last)
    return x if dtype is None else x.to(dtype)


def patches(fields, n, size, seed, classes):
    """n patches of size^2 at 0.5 um/px rendered from the slide's fields
    (2 x 2 level-0 block means, as the contenders read them) and their
    classes (the most frequent of the four level-0 pixels; ties to the higher
    class), half of them centred on tissue."""
    rng = np.random.default_rng(seed)
    f = config.LEVEL0_PER_PIXEL
    imgs, labs = [], []
    span = fields.size - size * f
    while len(imgs) < n:
        y0, x0 = (int(v) for v in rng.integers(0, max(span, 1), 2))
        c = make_slide.sample(fields.tissue, make_slide.TISSUE_DS, y0 + size, x0 + size, 1, 1)[0, 0]
        if len(imgs) % 2 == 0 and c < 0:  # every other patch on tissue
            continue
        img, cls = make_slide.render(y0, x0, size * f, size * f, fields)
        imgs.append(make_slide.reduce(img, f))
        one = np.stack([(cls == k) for k in range(3)], -1).astype(np.float32)
        one = one.reshape(size, f, size, f, 3).sum(axis=(1, 3))
        lab = 2 - np.argmax(one[..., ::-1], -1)
        if classes == 2:
            lab = np.minimum(lab, 1)
        labs.append(lab.astype(np.int64))
    return np.stack(imgs), np.stack(labs)


def train(net, fields, steps, device, classes, seed=0, pool=48, crop=256, batch=16, log=print):
    import torch
    dev = torch.device(device)
    t0 = time.perf_counter()
    imgs, labs = patches(fields, pool, config.ROI, seed + 10, classes)
    log(f"train: {pool} patches rendered in {time.perf_counter() - t0:.1f} s")
    count = np.bincount(labs.ravel(), minlength=classes).astype(np.float64)
    # Nuclei are a few % of the pixels: weigh rare classes up (count^-1/2) so that they are learnt in few steps.
    w = np.where(count > 0, (count.sum() / np.maximum(count, 1)) ** 0.5, 0.0)
    weight = torch.tensor(w / w[count > 0].mean(), dtype=torch.float32, device=dev)
    torch.manual_seed(seed)
    g = np.random.default_rng(seed + 11)
    net.to(dev).train().to(memory_format=torch.channels_last)
    opt = torch.optim.Adam(net.parameters(), lr=config.TRAIN_LR)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 0.5 * (1 + math.cos(math.pi * i / max(steps, 1))))
    amp = dev.type == "cuda"
    losses = []
    t1 = time.perf_counter()
    for step in range(steps):
        xs, ys = [], []
        for _ in range(batch):
            k = int(g.integers(len(imgs)))
            y0, x0 = (int(v) for v in g.integers(0, config.ROI - crop + 1, 2))
            x, y = imgs[k, y0:y0 + crop, x0:x0 + crop], labs[k, y0:y0 + crop, x0:x0 + crop]
            r = int(g.integers(4))
            x, y = np.rot90(x, r), np.rot90(y, r)
            if g.integers(2):
                x, y = x[:, ::-1], y[:, ::-1]
            xs.append(np.ascontiguousarray(x))
            ys.append(np.ascontiguousarray(y))
        x = normalise(torch, np.stack(xs), dev)
        y = torch.as_tensor(np.stack(ys)).to(dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
            loss = torch.nn.functional.cross_entropy(net(x).float(), y, weight=weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if step % max(1, steps // 10) == 0 or step == steps - 1:
            log(f"train: step {step + 1}/{steps} loss {losses[-1]:.4f} ({time.perf_counter() - t1:.0f} s)")
    net.eval().to("cpu")
    return {"steps": steps, "device": str(dev), "pool": pool, "crop": crop, "batch": batch, "lr": config.TRAIN_LR,
            "class_weights": w.tolist(), "seconds": time.perf_counter() - t0,
            "loss_first": losses[0] if losses else None, "loss_last10": float(np.mean(losses[-10:])) if losses else None}


def decisiveness(net, fields, device, classes, n=8, seed=0, log=print):
    """On n held-out 512^2 patches: labels under autocast (float16 on CUDA,
    bfloat16 on a CPU) against float32 (TF32 off), top-2 logit gaps, accuracy
    against the true classes."""
    import torch
    dev = torch.device(device)
    imgs, labs = patches(fields, n, config.ROI, seed + 20, classes)
    net = net.to(dev).eval().to(memory_format=torch.channels_last)
    tf32 = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    low_dtype = torch.float16 if dev.type == "cuda" else torch.bfloat16
    with torch.no_grad():
        x = normalise(torch, imgs, dev)
        ref = torch.cat([net(x[i:i + 4]).float() for i in range(0, n, 4)])
        with torch.autocast(dev.type, dtype=low_dtype):
            low = torch.cat([net(x[i:i + 4]).float() for i in range(0, n, 4)])
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = tf32
    net.to("cpu")
    lab_ref, lab_low = ref.argmax(1).cpu(), low.argmax(1).cpu()
    top2 = ref.topk(2, dim=1).values.cpu()
    gap = top2[:, 0] - top2[:, 1]
    truth = torch.as_tensor(labs)
    out = {"patches": n, "autocast": str(low_dtype).replace("torch.", ""),
           "agreement_autocast_vs_fp32": float((lab_ref == lab_low).float().mean()),
           "gap_below": {str(t): float((gap < t).float().mean()) for t in (0.01, 0.1, 1.0)},
           "accuracy_vs_truth": float((lab_ref == truth).float().mean()),
           "pixels_per_class": torch.bincount(lab_ref.ravel(), minlength=classes).tolist(),
           "truth_per_class": torch.bincount(truth.ravel(), minlength=classes).tolist()}
    log(f"decisiveness: {out['autocast']} vs float32 labels agree on {100 * out['agreement_autocast_vs_fp32']:.4f} %; "
        f"top-2 gap < 0.1 on {100 * out['gap_below']['0.1']:.3f} %; accuracy {100 * out['accuracy_vs_truth']:.2f} %")
    return out


def export_onnx(net, path, classes):
    import onnx
    import torch
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    net = net.to(dev).eval()
    x = torch.zeros((1, 3, config.ROI, config.ROI), device=dev)
    tmp = str(path) + ".tmp"
    kwargs = dict(input_names=["input"], output_names=["logits"], opset_version=17,
                  dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, do_constant_folding=True)
    try:
        torch.onnx.export(net, x, tmp, dynamo=False, **kwargs)
    except TypeError:  # torch without the dynamo switch
        torch.onnx.export(net, x, tmp, **kwargs)
    net.to("cpu")
    m = onnx.load(tmp)
    for k, v in config.onnx_metadata().items():
        p = m.metadata_props.add()
        p.key, p.value = k, v
    onnx.checker.check_model(m)
    onnx.save(m, tmp)
    os.replace(tmp, path)


def make(slide_info, paths, steps=None, classes=config.CLASSES, device=None, check=True, log=print):
    import torch
    t0 = time.perf_counter()
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    fields = make_slide.Fields(slide_info["size"], slide_info["seed"])
    torch.manual_seed(config.SEED)
    net = build_network(classes)
    steps = config.TRAIN_STEPS if steps is None else steps
    training = train(net, fields, steps, device, classes, log=log) if steps > 0 else {"steps": 0}
    n_par = parameters(net)
    paths.onnx.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"classes": classes, "state_dict": net.state_dict()}, paths.torch_weights)
    t1 = time.perf_counter()
    export_onnx(net, paths.onnx, classes)
    t2 = time.perf_counter()
    info = {"parameters": n_par, "classes": classes, "roi": config.ROI, "mpp": config.MPP,
            "overlap": config.OVERLAP, "onnx_bytes": os.path.getsize(paths.onnx), "metadata": config.onnx_metadata(),
            "torch_version": torch.__version__, "training": training, "slide_size": slide_info["size"],
            "seconds": {"train_and_save": t1 - t0, "onnx_export": t2 - t1}}
    if check:
        info["decisiveness"] = decisiveness(net, fields, device, classes, log=log)
    paths.model_json.write_text(json.dumps(info, indent=1) + "\n")
    log(f"model: UNet, ResNet-34 encoder, {n_par / 1e6:.2f} M parameters, {classes} classes; ONNX "
        f"{info['onnx_bytes'] / 2**20:.0f} MiB; {t2 - t0:.1f} s")
    return info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default=None, help="work folder (default $SBENCH_WORK or /tmp/slide_vs_python)")
    ap.add_argument("--size", type=int, default=config.SIZE, help="the slide's size (its fields are rendered again)")
    ap.add_argument("--seed", type=int, default=config.SEED)
    ap.add_argument("--steps", type=int, default=None, help=f"training steps (default {config.TRAIN_STEPS})")
    ap.add_argument("--classes", type=int, default=config.CLASSES, choices=(2, 3))
    ap.add_argument("--device", default=None)
    ap.add_argument("--no-check", action="store_true")
    a = ap.parse_args(argv)
    paths = config.Paths(config.default_work_dir() if a.work is None else pathlib.Path(a.work))
    make({"size": a.size, "seed": a.seed}, paths, a.steps, a.classes, a.device, not a.no_check)


if __name__ == "__main__":
    main()
