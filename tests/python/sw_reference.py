"""MONAI's sliding_window_inference in numpy, the oracle for
test_sliding_window.py; nnU-Net v2's evenly spread grid as an option.

Follows ../shared/notes/sliding_window.md step by step: pad only the axes
smaller than the window (diff // 2 in front, the rest behind), lay out the
windows, run them through a predictor in batches of sw_batch (taken in
MONAI's order: each image's windows in turn, the last spatial axis
fastest, a batch may span two images), accumulate out += pred * w and
count += w in float32 in that order, divide, crop the padding back.

With mirroring (tta_axes) and ensembles (a list of predictors), each
batch of windows is predicted as nnU-Net does it: per model, the plain
result plus every non-empty combination of the axes flipped in and
flipped back (fewer axes first, itertools order), divided by their count;
then the models' results summed in the order given and divided by their
count; all in float32.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

NUMPY_PAD = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}


def monai_starts(size, roi, overlap):
    """MONAI's window starts along one (padded) axis of `size` voxels."""
    interval = roi if roi == size else int(roi * (1 - overlap))
    interval = max(interval, 1)
    starts = []
    for d in itertools.count():
        s = d * interval
        last = s + roi >= size
        starts.append(s - max(s + roi - size, 0))
        if last:
            return starts


def nnunet_starts(size, roi, overlap):
    """nnU-Net v2's compute_steps_for_sliding_window, step = 1 - overlap."""
    step = roi * (1 - overlap)
    n = int(math.ceil((size - roi) / step)) + 1
    actual = (size - roi) / (n - 1) if n > 1 else 0.0
    return [int(np.round(actual * i)) for i in range(n)]


def importance_map(roi, blend, sigma_scale=0.125):
    """MONAI's compute_importance_map in float32: per axis
    exp(x^2 / (-2 sigma^2)), sigma = roi * sigma_scale, outer product,
    clamped below at max(min, 1e-3); constant: ones."""
    roi = tuple(int(r) for r in roi)
    if blend == "constant":
        return np.ones(roi, np.float32)
    if blend == "gaussian-nnunet":
        return nnunet_importance_map(roi, sigma_scale)
    assert blend == "gaussian", blend
    w = None
    for n in roi:
        sigma = n * sigma_scale
        x = np.arange(-(n - 1) / 2.0, (n - 1) / 2.0 + 1, dtype=np.float32)[:n]
        g = np.exp(x * x / np.float32(-2 * sigma ** 2)).astype(np.float32)
        w = g if w is None else (w[..., None] * g).astype(np.float32)
    floor = max(float(w.min()), 1e-3)
    return np.maximum(w, np.float32(floor)).astype(np.float32)


def nnunet_importance_map(roi, sigma_scale=0.125):
    """nnU-Net's compute_gaussian as nnunetv2 writes it: scipy's
    gaussian_filter of an impulse at roi // 2 (mode constant), divided by
    its max over 10, as float16 (through float32, as torch converts a
    float64 tensor), zeros raised to the least non-zero value."""
    from scipy.ndimage import gaussian_filter
    roi = tuple(int(r) for r in roi)
    tmp = np.zeros(roi)
    tmp[tuple(r // 2 for r in roi)] = 1
    g = gaussian_filter(tmp, [r * sigma_scale for r in roi], 0, mode="constant", cval=0)
    g = g / (g.max() / 10)
    h = g.astype(np.float32).astype(np.float16)
    h[h == 0] = h[h != 0].min()
    return h.astype(np.float32)


def resolve_roi(roi, spatial):
    """roi components <= 0 stand for the whole axis (MONAI's fall-back)."""
    return tuple(int(r) if r > 0 else int(s) for r, s in zip(roi, spatial))


def pad_image(image, roi, mode="constant", value=0.0):
    """Pads the spatial axes smaller than roi, symmetric as MONAI; returns
    the padded image and the (begin, end) pads per spatial axis."""
    spatial = image.shape[2:]
    pads = []
    for s, r in zip(spatial, roi):
        diff = max(r - s, 0)
        pads.append((diff // 2, diff - diff // 2))
    width = [(0, 0), (0, 0)] + pads
    if mode == "constant":
        out = np.pad(image, width, mode="constant", constant_values=np.float32(value))
    else:
        out = np.pad(image, width, mode=NUMPY_PAD[mode])
    return out.astype(np.float32), pads


def window_starts(padded, roi, overlap, grid="monai"):
    """All window starts over one padded image, the last axis fastest."""
    fn = monai_starts if grid == "monai" else nnunet_starts
    per_axis = [fn(s, r, o) for s, r, o in zip(padded, roi, overlap)]
    return list(itertools.product(*per_axis))


def mirror_combinations(axes):
    """nnU-Net's mirroring order: every non-empty combination of the
    (sorted, distinct) spatial axes, fewer axes first."""
    axes = sorted(set(axes))
    return [c for i in range(len(axes)) for c in itertools.combinations(axes, i + 1)]


def mirrored(predictor, windows, tta_axes):
    """One model's result for a batch of windows with mirroring: the plain
    prediction plus each flipped one flipped back, over their count."""
    p = np.array(predictor(windows), np.float32, copy=True)
    combos = mirror_combinations(tta_axes or ())
    for c in combos:
        dims = tuple(a + 2 for a in c)  # spatial axis a is array axis a + 2 (after N and C)
        q = np.asarray(predictor(np.ascontiguousarray(np.flip(windows, dims))), np.float32)
        p += np.flip(q, dims)
    if combos:
        p /= np.float32(len(combos) + 1)
    return p


def ensemble(predictors, windows, tta_axes):
    """The models' mirrored results summed in order, over their count."""
    p = None
    for predictor in predictors:
        q = mirrored(predictor, windows, tta_axes)
        p = q if p is None else p + q
    if len(predictors) > 1:
        p /= np.float32(len(predictors))
    return p


def window_box(start, pads, roi, spatial):
    """A window's part of the image (start and size per axis) from its
    start in the padded image: what a window filter is asked about."""
    lo = [max(s - b, 0) for s, (b, _) in zip(start, pads)]
    hi = [min(s - b + r, n) for s, (b, _), r, n in zip(start, pads, roi, spatial)]
    return tuple(lo), tuple(h - a for a, h in zip(lo, hi))


def sliding_window(image, roi, predictor, overlap=0.25, sw_batch=1, blend="constant", sigma_scale=0.125,
                   pad="constant", pad_value=0.0, grid="monai", tta_axes=None, keep=None, covered=None):
    """The blended float32 logits, N x K x spatial, for image N x C x spatial.
    predictor (or a list of them, an ensemble) maps a float32 [b, C, roi...]
    batch (b <= sw_batch) to [b, K, roi...]. tta_axes: spatial axes
    (0-based) to mirror along; None or empty: no mirroring. keep(start,
    size) -> bool, asked with each window's part of the image
    (window_box), leaves out the windows it refuses: only the others run,
    in the same order, and voxels none of them covers are 0. covered: a
    list that receives, per image, a bool array of the voxels some window
    that ran covers."""
    predictors = list(predictor) if isinstance(predictor, (list, tuple)) else [predictor]
    image = np.asarray(image, np.float32)
    n_img, nd = image.shape[0], image.ndim - 2
    roi = resolve_roi(roi, image.shape[2:])
    overlap = tuple(overlap) if isinstance(overlap, (tuple, list)) else (overlap,) * nd
    padded, pads = pad_image(image, roi, pad, pad_value)
    starts = window_starts(padded.shape[2:], roi, overlap, grid)
    if keep is not None:
        starts = [s for s in starts if keep(*window_box(s, pads, roi, image.shape[2:]))]
    w = importance_map(roi, blend, sigma_scale)
    jobs = [(b, s) for b in range(n_img) for s in starts]
    out = count = None
    for i in range(0, len(jobs), sw_batch):
        chunk = jobs[i:i + sw_batch]
        windows = np.stack([padded[b][(slice(None),) + tuple(slice(a, a + r) for a, r in zip(s, roi))]
                            for b, s in chunk]).astype(np.float32)
        pred = ensemble(predictors, windows, tta_axes)
        assert pred.shape[0] == len(chunk) and pred.shape[2:] == roi, pred.shape
        if out is None:
            out = np.zeros((n_img, pred.shape[1]) + padded.shape[2:], np.float32)
            count = np.zeros((n_img, 1) + padded.shape[2:], np.float32)
        for (b, s), p in zip(chunk, pred):
            sl = tuple(slice(a, a + r) for a, r in zip(s, roi))
            out[(b, slice(None)) + sl] += p * w
            count[(b, slice(None)) + sl] += w
    if out is None:  # no window ran: the classes are the predictor's on one
        k = ensemble(predictors, np.zeros((1, image.shape[1]) + roi, np.float32), None).shape[1]
        out = np.zeros((n_img, k) + padded.shape[2:], np.float32)
        count = np.zeros((n_img, 1) + padded.shape[2:], np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        res = np.where(count > 0, out / count, np.float32(0)).astype(np.float32)
    crop = tuple(slice(lo, lo + n) for (lo, _), n in zip(pads, image.shape[2:]))
    if covered is not None:
        covered.extend(count[(b, 0) + crop] > 0 for b in range(n_img))
    return np.ascontiguousarray(res[(slice(None), slice(None)) + crop])


def ort_predictor(path, threads=1):
    """onnxruntime on the model's first input and output. A fixed batch
    dim gets a short last batch padded by repeating its last window; the
    extra results are dropped."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    fixed = inp.shape[0] if isinstance(inp.shape[0], int) else None

    def predict(windows):
        b = windows.shape[0]
        if fixed is not None and b < fixed:
            windows = np.concatenate([windows, np.repeat(windows[-1:], fixed - b, axis=0)])
        return sess.run(None, {inp.name: windows})[0][:b]
    return predict


def activate(logits, activation):
    """probabilities in float64 over the channel axis."""
    x = np.asarray(logits, np.float64)
    if activation == "softmax":
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if activation == "sigmoid":
        return 1.0 / (1.0 + np.exp(-x))
    assert activation == "none", activation
    return x


def postprocess(logits, kind, activation=None, threshold=0.5):
    """What `segrt run --output-kind kind` writes, from the blended logits."""
    if kind == "logits":
        return logits
    act = activation or "softmax"
    if kind == "probs":
        return activate(logits, act).astype(np.float32)
    assert kind == "labels", kind
    if act == "sigmoid":
        return (activate(logits, act) > threshold).astype(np.uint8)
    dtype = np.uint8 if logits.shape[1] <= 255 else np.uint16
    return np.argmax(activate(logits, act), axis=1)[:, None].astype(dtype)


def ambiguous_labels(logits, activation=None, threshold=0.5, tol=1e-5):
    """Where a label may fairly go either way: softmax/none, the top two
    probabilities (values) within tol, N x 1 x spatial; sigmoid, the
    probability within tol of the threshold, N x K x spatial."""
    act = activation or "softmax"
    p = activate(logits, act)
    if act == "sigmoid":
        return np.abs(p - threshold) <= tol
    if p.shape[1] < 2:
        return np.zeros((p.shape[0], 1) + p.shape[2:], bool)
    top2 = np.sort(p, axis=1)[:, -2:]
    return (top2[:, 1] - top2[:, 0] <= tol)[:, None]
