#!/usr/bin/env python3
"""Trains segrt's default model: a small 2D UNet that segments nuclei in
scikit-image's bundled immunohistochemistry image, and exports it to ONNX
with the input normalisation segrt applies itself.

    python3 demo/train.py                      # the committed model (GPU: a few minutes)
    python3 demo/train.py --steps 30 --batch 4 --device cpu --out-dir /tmp/x   # smoke test

Steps (each is a function below):
  1. Data: skimage.data.immunohistochemistry() (512x512 RGB, shipped inside
     the scikit-image wheel: nothing is downloaded). Labels come from a
     classical pipeline on the haematoxylin channel of a stain separation;
     see nuclei_mask() and demo/README.md.
  2. Split: columns x >= --holdout-x are held out; training draws random
     crops, flipped and rotated by multiples of 90 degrees, from the rest.
  3. Model: a UNet of conv3x3-BatchNorm-LeakyReLU blocks, MaxPool down,
     ConvTranspose up, 3 input channels, 2 output logits.
  4. Export: ONNX opset 17, input "image" N x 3 x 256 x 256 (batch dynamic),
     already normalised; BatchNorm is folded into the convolutions. The
     normalisation and the window settings go into metadata_props.
  5. Evaluation: sliding windows of 256x256 at overlap 0.25 over the whole
     image (MONAI's grid, constant blending of logits, as segrt does by
     default), Dice of the argmax against the classical mask on the held-out
     columns and on the whole image.
  6. Outputs: the ONNX model, the image as an 8-bit RGB PNG, the classical
     mask (0/255), the model's own prediction (0/255) and a model card JSON.

Reproducible: one seed drives numpy and torch, deterministic algorithms are
requested, and the loss avoids the gather/scatter kernels that CUDA has no
deterministic version of.
"""
import os

# cuBLAS needs this set before CUDA starts to be deterministic.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import argparse  # noqa: E402 - after the environment
import datetime  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import pathlib  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import skimage  # noqa: E402
import torch  # noqa: E402
from skimage import color, data, filters, io, measure, morphology, segmentation  # noqa: E402
from torch import nn  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
SCALE = 1.0 / 255.0
CLASSES = ("background", "nuclei")
DESCRIPTION = ("2D UNet: nuclei (haematoxylin-stained) against background in RGB "
               "brightfield immunohistochemistry images of colon tissue, 256x256 windows")
ALLOWED_OPS = {"Conv", "ConvTranspose", "Relu", "LeakyRelu", "MaxPool", "Concat", "Add",
               "Resize", "InstanceNormalization", "BatchNormalization"}

# The classical labelling, fixed here so that the committed mask can be
# re-made; chosen by eye on overlays (demo/README.md says why).
LABEL = {
    "smooth_sigma": 1.5,          # Gaussian on the haematoxylin channel, pixels
    "local_block": 61,            # odd window of the local (mean) threshold, pixels
    "otsu_factor": 0.8,           # floor: a nucleus is also above 0.8 x Otsu
    "open_radius": 1,             # binary opening, disk radius
    "min_object": 48,             # connected components smaller than this go, pixels
    "max_hole": 64,               # holes up to this size are filled, pixels
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=3000, help="optimiser steps (default 3000)")
    p.add_argument("--batch", type=int, default=16, help="crops per step (default 16)")
    p.add_argument("--crop", type=int, default=192, help="training crop side, pixels (default 192)")
    p.add_argument("--lr", type=float, default=2e-3, help="peak AdamW learning rate (default 2e-3)")
    p.add_argument("--warmup", type=int, default=100, help="linear warm-up steps (default 100)")
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--channels", default="16,32,64,128",
                   help="UNet channels per level, full resolution first (default 16,32,64,128)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", help="auto (cuda if available), cuda or cpu")
    p.add_argument("--holdout-x", type=int, default=384,
                   help="columns x >= this are held out for evaluation (default 384)")
    p.add_argument("--roi", type=int, default=256, help="window side for export and evaluation")
    p.add_argument("--overlap", type=float, default=0.25, help="sliding-window overlap")
    p.add_argument("--log-every", type=int, default=250, help="steps between progress lines")
    p.add_argument("--out-dir", type=pathlib.Path, default=HERE,
                   help="folder of the default output paths (default: demo/)")
    p.add_argument("--model", type=pathlib.Path, help="ONNX path (default OUT_DIR/model.onnx)")
    p.add_argument("--image", type=pathlib.Path, help="sample PNG (default OUT_DIR/sample.png)")
    p.add_argument("--mask", type=pathlib.Path,
                   help="classical mask PNG (default OUT_DIR/sample_mask.png)")
    p.add_argument("--pred", type=pathlib.Path,
                   help="the trained model's mask PNG (default OUT_DIR/sample_pred.png)")
    p.add_argument("--card", type=pathlib.Path, help="model card JSON (default OUT_DIR/model_card.json)")
    p.add_argument("--label-overlay", type=pathlib.Path,
                   help="also write the image with the classical mask tinted, to look at")
    p.add_argument("--verify", action="store_true",
                   help="train nothing: check the existing --model, --mask and --pred with "
                        "onnxruntime (re-made mask, metadata, Dice) and exit")
    args = p.parse_args(argv)
    defaults = {"model": "model.onnx", "image": "sample.png", "mask": "sample_mask.png",
                "pred": "sample_pred.png", "card": "model_card.json"}
    for key, name in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, args.out_dir / name)
    args.channels = tuple(int(c) for c in args.channels.split(","))
    if args.roi % (2 ** (len(args.channels) - 1)):
        p.error("--roi must be divisible by 2^(levels-1)")
    if args.crop % (2 ** (len(args.channels) - 1)):
        p.error("--crop must be divisible by 2^(levels-1)")
    return args


def seed_everything(seed):
    """Seeds every generator and asks for deterministic kernels. warn_only:
    an op without a deterministic kernel warns rather than ending a run on
    the GPU machine; none used here is known to lack one."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    # Plain FP32 everywhere: the same numbers on any GPU generation.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def pick_device(name):
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        sys.exit("train.py: --device cuda but torch sees no CUDA device")
    return torch.device(name)


# ---------------------------------------------------------------- data

def load_image():
    """The IHC image from the copy bundled in the scikit-image wheel."""
    img = np.ascontiguousarray(data.immunohistochemistry())
    if img.shape != (512, 512, 3) or img.dtype != np.uint8:
        sys.exit(f"train.py: unexpected sample image {img.shape} {img.dtype}")
    return img


def nuclei_mask(img, p=LABEL):
    """Nuclei by stain separation. The haematoxylin channel of rgb2hed
    (Ruifrok and Johnston's colour deconvolution) is smoothed; a pixel is
    nucleus where it is above both the Gaussian-weighted mean of its
    neighbourhood (which splits the nuclei packed in the glands, whose
    brown DAB background raises the channel as a whole) and a global floor
    of Otsu's threshold (which keeps faint stroma out). Opening, small objects and
    small holes clean the result."""
    h = color.rgb2hed(img)[..., 0]
    hs = filters.gaussian(h, sigma=p["smooth_sigma"])
    otsu = filters.threshold_otsu(hs)
    local = filters.threshold_local(hs, p["local_block"], method="gaussian", offset=0.0)
    m = (hs > local) & (hs > p["otsu_factor"] * otsu)
    m = morphology.opening(m, morphology.disk(p["open_radius"]))
    m = drop_small_components(m, p["min_object"])
    m = ~drop_small_components(~m, p["max_hole"])
    return m.astype(bool), float(otsu)


def drop_small_components(m, min_size):
    """Keeps the 4-connected components of m with at least min_size pixels.
    The same as remove_small_objects(m, min_size), whose arguments
    scikit-image is renaming with a changed bound: written out, the mask does
    not depend on the installed version."""
    lab = measure.label(m, connectivity=1)
    keep = np.bincount(lab.ravel()) >= min_size
    keep[0] = False
    return keep[lab]


def channel_stats(img, holdout_x):
    """Mean and std of pixel/255 per channel over the training columns,
    rounded to the 8 digits the metadata carries so that training,
    evaluation and segrt all use the same numbers."""
    x = img[:, :holdout_x].reshape(-1, 3).astype(np.float64) * SCALE
    return tuple(np.array([float(f"{v:.8g}") for v in s]) for s in (x.mean(0), x.std(0)))


def normalise(img, mean, std):
    """uint8 HWC -> float32 1x3xHxW, as segrt does from the metadata."""
    x = (img.astype(np.float32) * np.float32(SCALE) - mean.astype(np.float32)) / std.astype(np.float32)
    return torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1)))[None]


class CropSampler:
    """Random crops from columns [0, holdout_x), each flipped and rotated by
    a multiple of 90 degrees; all draws come from one seeded numpy stream."""

    def __init__(self, x, y, holdout_x, crop, seed):
        self.x, self.y, self.crop = x, y, crop
        self.max_y = x.shape[2] - crop
        self.max_x = holdout_x - crop
        if self.max_x < 0 or self.max_y < 0:
            sys.exit("train.py: --crop is larger than the training region")
        self.rng = np.random.default_rng(seed)

    def batch(self, n):
        xs, ys = [], []
        for _ in range(n):
            y0 = int(self.rng.integers(0, self.max_y + 1))
            x0 = int(self.rng.integers(0, self.max_x + 1))
            k = int(self.rng.integers(0, 4))
            flip = bool(self.rng.integers(0, 2))
            xi = self.x[0, :, y0:y0 + self.crop, x0:x0 + self.crop]
            yi = self.y[0, y0:y0 + self.crop, x0:x0 + self.crop]
            if flip:
                xi, yi = xi.flip(-1), yi.flip(-1)
            xs.append(torch.rot90(xi, k, (1, 2)))
            ys.append(torch.rot90(yi, k, (0, 1)))
        return torch.stack(xs), torch.stack(ys)


# ---------------------------------------------------------------- model

def conv_block(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.LeakyReLU(0.01),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.LeakyReLU(0.01))


class UNet(nn.Module):
    def __init__(self, in_ch=3, out_ch=2, channels=(16, 32, 64, 128)):
        super().__init__()
        self.down = nn.ModuleList()
        c_prev = in_ch
        for c in channels:
            self.down.append(conv_block(c_prev, c))
            c_prev = c
        self.pool = nn.MaxPool2d(2)
        self.up = nn.ModuleList()
        self.dec = nn.ModuleList()
        for c in reversed(channels[:-1]):
            self.up.append(nn.ConvTranspose2d(c_prev, c, 2, stride=2))
            self.dec.append(conv_block(2 * c, c))
            c_prev = c
        self.head = nn.Conv2d(c_prev, out_ch, 1)

    def forward(self, x):
        skips = []
        for i, block in enumerate(self.down):
            x = block(x if i == 0 else self.pool(x))
            skips.append(x)
        x = skips.pop()
        for up, dec in zip(self.up, self.dec):
            x = dec(torch.cat([up(x), skips.pop()], dim=1))
        return self.head(x)


def seg_loss(logits, target):
    """Cross-entropy plus soft Dice of the nuclei class. Written with a
    one-hot product instead of nll_loss: its CUDA kernel for 2D targets is
    not deterministic."""
    logp = torch.log_softmax(logits, dim=1)
    onehot = torch.stack([1.0 - target, target], dim=1)
    ce = -(onehot * logp).sum(1).mean()
    p1 = logp[:, 1].exp()
    inter = (p1 * target).sum()
    dice = (2.0 * inter + 1.0) / (p1.sum() + target.sum() + 1.0)
    return ce + (1.0 - dice)


def lr_factor(step, warmup, steps):
    if step < warmup:
        return (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, t)))


# ---------------------------------------------------------------- evaluation

def window_starts(size, roi, overlap):
    """MONAI's grid along one axis: interval int(roi*(1-overlap)), the last
    window moved back to end at the edge."""
    if size <= roi:
        return [0]
    interval = max(1, int(roi * (1.0 - overlap)))
    n = math.ceil((size - roi) / interval) + 1
    return sorted({min(i * interval, size - roi) for i in range(n)})


@torch.no_grad()
def sliding_logits(run, x, roi, overlap):
    """Whole-image logits from windows of roi x roi, blended with constant
    weights (segrt's and MONAI's default). run maps N x 3 x roi x roi to
    N x 2 x roi x roi; x is 1 x 3 x H x W on the device run expects."""
    _, _, hgt, wid = x.shape
    starts = [(y0, x0) for y0 in window_starts(hgt, roi, overlap)
              for x0 in window_starts(wid, roi, overlap)]
    wins = torch.cat([x[:, :, y0:y0 + roi, x0:x0 + roi] for y0, x0 in starts])
    out = run(wins)
    acc = torch.zeros((1, out.shape[1], hgt, wid), dtype=out.dtype, device=out.device)
    cnt = torch.zeros((1, 1, hgt, wid), dtype=out.dtype, device=out.device)
    for i, (y0, x0) in enumerate(starts):
        acc[:, :, y0:y0 + roi, x0:x0 + roi] += out[i:i + 1]
        cnt[:, :, y0:y0 + roi, x0:x0 + roi] += 1
    return acc / cnt, len(starts)


def dice(pred, ref):
    pred, ref = pred.astype(bool), ref.astype(bool)
    denom = pred.sum() + ref.sum()
    return 1.0 if denom == 0 else float(2.0 * np.logical_and(pred, ref).sum() / denom)


def evaluate(model, x, mask, holdout_x, roi, overlap):
    model.eval()
    logits, n = sliding_logits(model, x, roi, overlap)
    pred = logits.argmax(1)[0].cpu().numpy().astype(bool)
    return pred, n, {
        "dice_heldout": dice(pred[:, holdout_x:], mask[:, holdout_x:]),
        "dice_train_region": dice(pred[:, :holdout_x], mask[:, :holdout_x]),
        "dice_whole": dice(pred, mask),
    }


# ---------------------------------------------------------------- export

def export_onnx(model, path, roi, overlap, mean, std, channels):
    """Legacy (TorchScript) exporter: it needs no onnxscript, which the GPU
    machine lacks, and in eval mode folds BatchNorm into the convolutions."""
    model = model.to("cpu").eval()
    dummy = torch.zeros(1, 3, roi, roi)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(model, (dummy,), str(path), dynamo=False, opset_version=17,
                          input_names=["image"], output_names=["logits"],
                          dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}},
                          do_constant_folding=True)
    m = onnx.load(str(path))
    meta = {
        "segrt.input.scale": repr(SCALE),
        "segrt.input.mean": ",".join(f"{v:.8g}" for v in mean),
        "segrt.input.std": ",".join(f"{v:.8g}" for v in std),
        "segrt.roi": f"{roi},{roi}",
        "segrt.overlap": f"{overlap:g}",
        "segrt.classes": ",".join(CLASSES),
        "segrt.description": DESCRIPTION,
    }
    del m.metadata_props[:]
    for k, v in meta.items():
        m.metadata_props.add(key=k, value=v)
    m.doc_string = f"segrt default model: UNet {'-'.join(map(str, channels))}, see demo/README.md"
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(path))
    ops = sorted({n.op_type for n in m.graph.node})
    bad = [o for o in ops if o not in ALLOWED_OPS]
    if bad:
        sys.exit(f"train.py: the export uses ops outside the allowed set: {bad}")
    size = path.stat().st_size
    if size > 10 * 1024 * 1024:
        sys.exit(f"train.py: {path} is {size} bytes, over 10 MB")
    return m, meta, ops, size


def check_onnx(path, model, x, roi, overlap, mask, holdout_x):
    """onnxruntime against torch, when onnxruntime is installed: a batch of
    3 windows (the batch axis is dynamic) and the whole sliding-window mask."""
    try:
        import onnxruntime as ort
    except ImportError:
        return {"onnxruntime": None}
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def run(w):
        return torch.from_numpy(sess.run(None, {"image": w.numpy()})[0])

    wins = torch.cat([x[:, :, 0:roi, 0:roi], x[:, :, 100:100 + roi, 50:50 + roi],
                      x[:, :, -roi:, -roi:]])
    with torch.no_grad():
        ref = model(wins)
    got = run(wins)
    logits, _ = sliding_logits(run, x, roi, overlap)
    pred = logits.argmax(1)[0].numpy().astype(bool)
    return {
        "onnxruntime": ort.__version__,
        "max_abs_diff_3_windows": float((ref - got).abs().max()),
        "argmax_agreement_3_windows": float((ref.argmax(1) == got.argmax(1)).float().mean()),
        "dice_whole": dice(pred, mask),
        "dice_heldout": dice(pred[:, holdout_x:], mask[:, holdout_x:]),
    }


# ---------------------------------------------------------------- outputs

def save_png(path, arr):
    path.parent.mkdir(parents=True, exist_ok=True)
    io.imsave(str(path), arr, check_contrast=False)


def save_overlay(path, img, mask):
    o = img.astype(np.float32)
    o[mask] = 0.55 * o[mask] + 0.45 * np.array([0, 255, 0], np.float32)
    o = segmentation.mark_boundaries(o.astype(np.uint8), mask, color=(0, 0.6, 0))
    save_png(path, (o * 255).round().astype(np.uint8))


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def versions():
    out = {"python": platform.python_version(), "torch": torch.__version__,
           "numpy": np.__version__, "scikit-image": skimage.__version__, "onnx": onnx.__version__}
    if torch.version.cuda:
        out["cuda"] = torch.version.cuda
        out["cudnn"] = torch.backends.cudnn.version()
    return out


def device_name(dev):
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


# ---------------------------------------------------------------- main

def train(model, sampler, args, dev, x_full, mask):
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, args.warmup, args.steps))
    history = []
    t0 = time.perf_counter()
    loss_sum, loss_n = 0.0, 0
    for step in range(args.steps):
        model.train()
        xb, yb = sampler.batch(args.batch)
        loss = seg_loss(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        loss_sum += float(loss.detach())
        loss_n += 1
        last = step + 1 == args.steps
        if (step + 1) % args.log_every == 0 or last:
            _, _, d = evaluate(model, x_full, mask, args.holdout_x, args.roi, args.overlap)
            sync(dev)
            row = {"step": step + 1, "loss": loss_sum / loss_n, "seconds": time.perf_counter() - t0, **d}
            history.append(row)
            print(f"step {row['step']:5d}  loss {row['loss']:.4f}  dice held-out {d['dice_heldout']:.4f}"
                  f"  whole {d['dice_whole']:.4f}  {row['seconds']:.1f} s", flush=True)
            loss_sum, loss_n = 0.0, 0
    sync(dev)
    return history, time.perf_counter() - t0


def verify(args):
    """Checks committed artefacts on a machine with onnxruntime: the mask is
    re-made bit for bit, the metadata normalisation is applied as segrt
    would, and the ONNX model's sliding-window Dice is reported."""
    try:
        import onnxruntime as ort
    except ImportError:
        sys.exit("train.py --verify needs onnxruntime (pip install onnxruntime)")
    img = load_image()
    mask, _ = nuclei_mask(img)
    ok = True
    for name, path, ref in (("mask", args.mask, mask), ("image", args.image, img)):
        got = io.imread(str(path))
        same = got.shape == ref.shape and bool(np.all((got > 127) == ref if name == "mask" else got == ref))
        ok &= same
        print(f"{name}: {path} {'matches' if same else 'DIFFERS from'} the one made here")
    m = onnx.load(str(args.model))
    onnx.checker.check_model(m, full_check=True)
    meta = {p.key: p.value for p in m.metadata_props}
    mean = np.array([float(v) for v in meta["segrt.input.mean"].split(",")])
    std = np.array([float(v) for v in meta["segrt.input.std"].split(",")])
    roi = int(meta["segrt.roi"].split(",")[0])
    sess = ort.InferenceSession(str(args.model), providers=["CPUExecutionProvider"])

    def run(w):
        return torch.from_numpy(sess.run(None, {"image": w.numpy()})[0])

    logits, n = sliding_logits(run, normalise(img, mean, std), roi, float(meta["segrt.overlap"]))
    pred = logits.argmax(1)[0].numpy().astype(bool)
    print(f"onnxruntime {ort.__version__}, {n} windows: dice held-out"
          f" {dice(pred[:, args.holdout_x:], mask[:, args.holdout_x:]):.4f}, whole {dice(pred, mask):.4f}")
    if args.pred.exists():
        ref = io.imread(str(args.pred)) > 127
        agree = float((ref == pred).mean())
        print(f"pred: {args.pred} agrees with onnxruntime on {agree:.5f} of the pixels")
        ok &= agree > 0.999
    print(f"ops {sorted({n.op_type for n in m.graph.node})}, {args.model.stat().st_size} bytes")
    return 0 if ok else 1


def main(argv=None):
    args = parse_args(argv)
    if args.verify:
        return verify(args)
    seed_everything(args.seed)
    dev = pick_device(args.device)
    timings = {}
    print(f"train.py: device {device_name(dev)}, torch {torch.__version__}, seed {args.seed}", flush=True)

    t = time.perf_counter()
    img = load_image()
    mask, otsu = nuclei_mask(img)
    mean, std = channel_stats(img, args.holdout_x)
    fg = float(mask.mean())
    timings["labels_s"] = time.perf_counter() - t
    print(f"labels: nuclei {fg:.3f} of the image (held-out {mask[:, args.holdout_x:].mean():.3f}),"
          f" Otsu {otsu:.5f}; mean {np.round(mean, 4).tolist()} std {np.round(std, 4).tolist()}", flush=True)
    save_png(args.image, img)
    save_png(args.mask, (mask * 255).astype(np.uint8))
    if args.label_overlay:
        save_overlay(args.label_overlay, img, mask)

    x_full = normalise(img, mean, std).to(dev)
    y_full = torch.from_numpy(mask.astype(np.float32))[None].to(dev)
    sampler = CropSampler(x_full, y_full, args.holdout_x, args.crop, args.seed)
    model = UNet(3, len(CLASSES), args.channels).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: UNet {args.channels}, {n_params} parameters; {args.steps} steps of"
          f" {args.batch} x {args.crop}x{args.crop} crops", flush=True)

    history, timings["train_s"] = train(model, sampler, args, dev, x_full, mask)

    t = time.perf_counter()
    pred, n_windows, scores = evaluate(model, x_full, mask, args.holdout_x, args.roi, args.overlap)
    sync(dev)
    timings["eval_s"] = time.perf_counter() - t
    save_png(args.pred, (pred * 255).astype(np.uint8))
    print(f"dice (torch, {n_windows} windows): held-out {scores['dice_heldout']:.4f},"
          f" train region {scores['dice_train_region']:.4f}, whole {scores['dice_whole']:.4f}", flush=True)

    t = time.perf_counter()
    _, meta, ops, size = export_onnx(model, args.model, args.roi, args.overlap, mean, std, args.channels)
    timings["export_s"] = time.perf_counter() - t
    print(f"onnx: {args.model} {size} bytes, ops {ops}", flush=True)
    onnx_check = check_onnx(args.model, model, x_full.cpu(), args.roi, args.overlap, mask, args.holdout_x)
    if onnx_check["onnxruntime"]:
        print(f"onnxruntime {onnx_check['onnxruntime']}: max |onnx - torch| "
              f"{onnx_check['max_abs_diff_3_windows']:.2e} on 3 windows, dice whole"
              f" {onnx_check['dice_whole']:.4f}", flush=True)
    else:
        print("onnxruntime not installed: the export was checked with onnx.checker only", flush=True)

    card = {
        "model": args.model.name,
        "description": DESCRIPTION,
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "data": {
            "image": "skimage.data.immunohistochemistry() (ihc.png, bundled in scikit-image)",
            "size": list(img.shape),
            "labels": {"method": "rgb2hed haematoxylin, Gaussian, local mean threshold above "
                                 "otsu_factor x Otsu, opening, small objects and holes removed",
                       **LABEL, "otsu": otsu, "foreground_fraction": fg,
                       "mask_sha256": hashlib.sha256(np.packbits(mask)).hexdigest()},
            "split": {"train": f"x < {args.holdout_x}", "heldout": f"x >= {args.holdout_x}"},
        },
        "input": {"scale": SCALE, "mean": mean.tolist(), "std": std.tolist(), "layout": "N x 3 x H x W RGB"},
        "model_arch": {"type": "UNet", "channels": list(args.channels), "block": "2 x (conv3x3, BatchNorm, "
                       "LeakyReLU 0.01)", "down": "MaxPool 2", "up": "ConvTranspose 2x2 s2",
                       "parameters": n_params},
        "training": {"seed": args.seed, "steps": args.steps, "batch": args.batch, "crop": args.crop,
                     "optimizer": "AdamW", "lr": args.lr, "weight_decay": args.weight_decay,
                     "schedule": f"linear warm-up {args.warmup} steps, cosine to 0",
                     "loss": "cross-entropy + soft Dice (nuclei)",
                     "augmentation": "random flips, rot90", "precision": "fp32 (TF32 off)",
                     "deterministic": "torch.use_deterministic_algorithms(True, warn_only=True)",
                     "device": device_name(dev), "history": history},
        "evaluation": {"method": f"sliding windows {args.roi}x{args.roi}, overlap {args.overlap}, "
                                 f"{n_windows} windows, constant blending, argmax vs classical mask",
                       "torch": scores, "onnx": onnx_check},
        "onnx": {"opset": 17, "ops": ops, "bytes": size, "sha256": sha256(args.model),
                 "metadata": meta, "input": "image: N x 3 x 256 x 256 float32 (normalised)",
                 "output": "logits: N x 2 x 256 x 256 float32"},
        "timings_s": {k: round(v, 3) for k, v in timings.items()},
        "versions": versions(),
        "command": " ".join([pathlib.Path(sys.argv[0]).name] + (sys.argv[1:] if argv is None else list(argv))),
    }
    args.card.parent.mkdir(parents=True, exist_ok=True)
    args.card.write_text(json.dumps(card, indent=2) + "\n")
    print(f"wrote {args.model}, {args.image}, {args.mask}, {args.pred}, {args.card}", flush=True)
    print(f"timings: {card['timings_s']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
