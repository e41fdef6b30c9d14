#!/usr/bin/env python3
"""segrt's sliding-window inference beside MONAI's algorithm in PyTorch AMP,
in one process run, end to end from a host image to host labels, on the
same network from the same ONNX file with the same weights (issue 6, Speed).

    python3 bench/sw_vs_monai.py [--models-dir DIR] [--jobs 2d,3d] [--sw-batch 4|2,4,8]
        [--blend gaussian|constant] [--iters N] [--warmup N] [--out FILE.json]
        [--device cuda|cpu] [--small] [--pythonpath DIR]

Jobs (../shared/notes/targets.md), each with MONAI's constant padding (0):

  2d  basicunet2d on a 1x3x2048x2048 image, window 512x512, overlap 0.25
  3d  unet3d_spleen on a 1x1x512x512x256 volume, window 96^3, overlap 0.5

--small swaps in tiny images (2d: 1x3x300x280, window 128; 3d: 1x1x70x64x50,
window 32) for smoke tests, with --device cpu on a machine without a GPU.
The image is seeded smooth noise (a coarse random grid, linearly
interpolated, plus a little white noise), float32 in host memory.

One run of either side goes from that numpy array to uint8 labels (argmax
over the classes, N x 1 x spatial) in a numpy array:

  torch  the array uploaded to the device (timed), then
         monai_sliding_window(): MONAI's sliding_window_inference written
         out in torch (pad the axes smaller than the window, MONAI's window
         grid and order, its Gaussian importance map, sw_batch windows a
         call, the product and the count accumulated in float32 on the
         input's device, divide, crop), argmax, .cpu(). The network is the
         ONNX file through onnx2torch (bench/gpu_vs_pytorch.py's
         torch_module), channels-last, called under torch.autocast(float16)
         (on the CPU: float32, no autocast).
  segrt  a window session (segrt_window_session_run, or segrt_window_run
         where the library predates sessions) through ctypes
         (tests/python/segrt_capi.py) on one context of an engine built
         once for [sw_batch, C, window...]
         (FP16 on cuda, autotuning at its default), labels output. The
         engine's batch is a range, 1 to sw_batch (--fixed-batch: exactly
         sw_batch), so a job's short last batch runs at its own size, as
         PyTorch's does: its plan is compiled on the first run (a warm-up
         run, not timed) and kept by the engine.

Per repetition the sides alternate (segrt, torch, segrt, torch, ...); the
first --warmup repetitions are not timed (the first call of each is
reported apart), then the median of --iters wall-clock runs (default 10 for
2d, 5 for 3d). With --block K each side runs K times in a row per
repetition (all timed: iters x K runs a side), so that each side runs in
its own steady state: on the H100, segrt's 2-D job right after 40 ms of
PyTorch's tensor-core work waited about 0.8 ms longer for the GPU (6.4
instead of 5.6 ms, bench/sw_interference.py) than right after its own
run. torch's device is synchronized before and after its runs.
Peak device memory: torch's allocator peak over the timed runs
(max_memory_allocated after reset_peak_memory_stats: weights, image,
accumulators, activations); segrt's is sampled: a thread reads the free
device memory (cudaMemGetInfo) every 2 ms during one more untimed run, with
torch's cache emptied, and reports the drop from the free memory before the
engine was built (weights, arena, workspace and whatever the run
allocates; a peak shorter than 2 ms may be missed).

The JSON (bench/results/sw_vs_monai-<device>-<date>.json) keeps the times,
windows/s, FLOPs of the network per window (Conv and ConvTranspose from the
ONNX graph) and the achieved TFLOP/s of each side, peak memory, the share of
voxels whose labels agree (FP16 on both sides: not all do), and segrt's
speed-up (torch ms / segrt ms) against the issue's 5x target. It is
rewritten after every case. `python3 bench/report.py --sw` puts the table
into README.md between <!-- sw-bench:begin --> and <!-- sw-bench:end -->.
"""
import argparse
import dataclasses
import datetime
import gc
import importlib.metadata
import itertools
import json
import math
import os
import pathlib
import platform
import subprocess
import sys
import threading
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))  # segrt_capi
sys.path.insert(0, str(ROOT / "bench"))  # gpu_vs_pytorch, report

import gpu_vs_pytorch as gvp  # noqa: E402 - after the path
import report  # noqa: E402

TARGET_SPEEDUP = 5.0  # issue 6: at least 5x faster than the PyTorch AMP path


@dataclasses.dataclass(frozen=True)
class Job:
    name: str
    model: str
    image: tuple  # N, C, spatial...
    roi: tuple
    overlap: float
    iters: int  # default timed runs


JOBS = {
    "2d": Job("2d", "basicunet2d", (1, 3, 2048, 2048), (512, 512), 0.25, 10),
    "3d": Job("3d", "unet3d_spleen", (1, 1, 512, 512, 256), (96, 96, 96), 0.5, 5),
}
SMALL_JOBS = {
    "2d": Job("2d", "basicunet2d", (1, 3, 300, 280), (128, 128), 0.25, 3),
    "3d": Job("3d", "unet3d_spleen", (1, 1, 70, 64, 50), (32, 32, 32), 0.5, 3),
}


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------
# MONAI's window geometry (pure Python; ../shared/notes/sliding_window.md)


def monai_pads(spatial, roi):
    """(front, back) padding per spatial axis: only where the image is
    smaller than the window, diff // 2 in front."""
    return [(max(r - s, 0) // 2, max(r - s, 0) - max(r - s, 0) // 2) for s, r in zip(spatial, roi)]


def monai_axis_starts(size, roi, overlap):
    """Window starts along one padded axis: steps of int(roi * (1 - overlap))
    (at least 1; the whole axis when the window spans it) until a window
    reaches the end, each start pulled back so that none runs past it."""
    step = roi if roi == size else max(int(roi * (1 - overlap)), 1)
    starts = []
    for d in itertools.count():
        starts.append(d * step - max(d * step + roi - size, 0))
        if d * step + roi >= size:
            return starts


def monai_window_slices(padded, roi, overlap):
    """Every window of one padded image as a tuple of spatial slices, the
    last axis fastest (MONAI's order)."""
    per_axis = [monai_axis_starts(s, r, overlap) for s, r in zip(padded, roi)]
    return [tuple(slice(a, a + r) for a, r in zip(start, roi)) for start in itertools.product(*per_axis)]


def window_count(image_shape, roi, overlap):
    spatial = image_shape[2:]
    padded = [s + lo + hi for s, (lo, hi) in zip(spatial, monai_pads(spatial, roi))]
    return image_shape[0] * len(monai_window_slices(padded, roi, overlap))


def make_image(shape, seed, cell=32):
    """Seeded smooth noise, float32: a coarse standard-normal grid (one
    point every `cell` voxels) linearly interpolated, one axis at a time,
    plus white noise of a tenth of its scale."""
    rng = np.random.default_rng(seed)
    spatial = shape[2:]
    x = rng.standard_normal(tuple(shape[:2]) + tuple(s // cell + 2 for s in spatial)).astype(np.float32)
    for axis, n in enumerate(spatial, start=2):
        pos = np.arange(n, dtype=np.float32) / np.float32(cell)
        i0 = np.floor(pos).astype(np.int64)
        frac = (pos - i0).reshape([n if a == axis else 1 for a in range(x.ndim)])
        a = np.take(x, i0, axis=axis)
        x = a + (np.take(x, i0 + 1, axis=axis) - a) * frac
    x += np.float32(0.1) * rng.standard_normal(x.shape, dtype=np.float32)
    return np.ascontiguousarray(x, dtype=np.float32)


def label_agreement(a, b):
    """Share of voxels with equal labels; None when the shapes differ."""
    if a is None or b is None or a.shape != b.shape:
        return None
    return float(np.count_nonzero(a == b)) / a.size


# ---------------------------------------------------------------------------
# MONAI's sliding_window_inference in torch


def monai_importance_map(roi, mode, sigma_scale, device):
    """MONAI's compute_importance_map, float32: ones, or per axis
    exp(x^2 / (-2 sigma^2)) with x = -(n-1)/2 ... (n-1)/2 and sigma = n *
    sigma_scale, multiplied out (peak 1 on odd sides, not normalised); then
    clamped below at max(min, 1e-3) as sliding_window_inference does."""
    import torch
    roi = tuple(int(r) for r in roi)
    if mode == "constant":
        w = torch.ones(roi, dtype=torch.float32, device=device)
    elif mode == "gaussian":
        w = None
        for i, n in enumerate(roi):
            sigma = n * sigma_scale
            x = torch.arange(-(n - 1) / 2.0, (n - 1) / 2.0 + 1, dtype=torch.float32, device=device)[:n]
            g = torch.exp(x ** 2 / (-2 * sigma ** 2))
            w = g if w is None else w.unsqueeze(-1) * g[(None,) * i]
    else:
        raise ValueError(f"unknown blend mode {mode!r}")
    floor = max(w.min().item(), 1e-3)
    return torch.clamp(w, min=floor)


def monai_sliding_window(inputs, roi_size, sw_batch_size, predictor, overlap=0.25, mode="constant",
                         sigma_scale=0.125, cval=0.0):
    """MONAI's sliding_window_inference (constant padding, outputs at the
    input's resolution) for a float32 N x C x spatial tensor: the blended
    network output N x K x spatial, float32, on the input's device.

    predictor maps a [b, C, roi...] batch (b <= sw_batch_size) to [b, K,
    roi...] (a tuple or dict: its first entry). As MONAI: axes smaller than
    the window are padded with cval; windows are taken image by image, the
    last axis fastest, sw_batch_size a call (a batch may span two images);
    each prediction is multiplied by the importance map in place (in its
    own dtype: float16 under autocast) and added into the float32 output,
    the count map is the map summed over the window positions; then divide
    and crop the padding off."""
    import torch
    import torch.nn.functional as F
    n_img = inputs.shape[0]
    spatial = tuple(inputs.shape[2:])
    roi = tuple(int(r) if r > 0 else s for r, s in zip(roi_size, spatial))
    pads = monai_pads(spatial, roi)
    if any(lo or hi for lo, hi in pads):
        inputs = F.pad(inputs, [p for lo_hi in reversed(pads) for p in lo_hi], mode="constant", value=cval)
    padded = tuple(inputs.shape[2:])
    windows = monai_window_slices(padded, roi, overlap)
    w = monai_importance_map(roi, mode, sigma_scale, inputs.device).to(inputs.dtype)[None, None]
    jobs = [(b, sl) for b in range(n_img) for sl in windows]
    out = count = None
    for first in range(0, len(jobs), sw_batch_size):
        chunk = jobs[first:first + sw_batch_size]
        batch = torch.cat([inputs[(slice(b, b + 1), slice(None)) + sl] for b, sl in chunk])
        pred = gvp.first_output(predictor(batch))
        if out is None:
            out = torch.zeros((n_img, pred.shape[1]) + padded, dtype=inputs.dtype, device=inputs.device)
            count = torch.zeros((1, 1) + padded, dtype=inputs.dtype, device=inputs.device)
            for sl in windows:
                count[(slice(None), slice(None)) + sl] += w
        pred *= w
        for (b, sl), p in zip(chunk, pred):
            out[(slice(b, b + 1), slice(None)) + sl] += p
    out /= count
    crop = tuple(slice(lo, lo + n) for (lo, _), n in zip(pads, spatial))
    return out[(slice(None), slice(None)) + crop]


def torch_predictor(module, device, amp):
    """The network as MONAI's predictor: channels-last input on cuda, under
    torch.autocast(float16) when amp."""
    import torch
    cl = None
    if device.type == "cuda":
        cl = {4: torch.channels_last, 5: torch.channels_last_3d}

    def predict(x):
        if cl and x.dim() in cl:
            x = x.contiguous(memory_format=cl[x.dim()])
        if amp:
            with torch.autocast(device.type, dtype=torch.float16):
                return module(x)
        return module(x)
    return predict


def torch_labels(image, device, predictor, job, sw_batch, blend):
    """One end-to-end run of the PyTorch side: host float32 array ->
    device -> monai_sliding_window -> argmax -> host uint8 N x 1 x spatial."""
    import torch
    with torch.inference_mode():
        x = torch.from_numpy(image).to(device)
        logits = monai_sliding_window(x, job.roi, sw_batch, predictor, overlap=job.overlap, mode=blend)
        return logits.argmax(dim=1, keepdim=True).to(torch.uint8).cpu().numpy()


# ---------------------------------------------------------------------------
# the segrt side


class SegrtSide:
    """An engine built once for the windows of `image` and one context:
    run() is a window session's run over the host image, returning a
    segrt_capi.WindowResult (host memory, freed by its close())."""

    def __init__(self, model_path, image, job, sw_batch, blend, device, precision=None, output="labels",
                 batch_range=True):
        self.closers = []
        try:
            self._make(model_path, image, job, sw_batch, blend, device, precision, output, batch_range)
        except BaseException:
            self.close()
            raise

    def _make(self, model_path, image, job, sw_batch, blend, device, precision, output, batch_range):
        import segrt_capi as sc
        t0 = time.perf_counter()
        model = self._own(sc.Model.load(model_path))
        self.opts = self._own(sc.WindowOptions(job.roi, overlap=job.overlap, batch=sw_batch, blend=blend,
                                               pad="constant", pad_value=0.0, output=output))
        self.input_dims = self.opts.input_dims(image)
        name = model.inputs()[0]["name"]
        dims = tuple(self.input_dims)
        # (A batch range on the GPU, where the runner uses it.)
        ranged = batch_range and str(device).startswith("cuda")
        shape = {"ranges": {name: ((1,) + dims[1:], dims, dims)}} if ranged else {"shapes": {name: dims}}
        with sc.BuildOptions(**shape, device=device, precision=precision) as b:
            self.engine = self._own(sc.Engine.build(model, b))
        self.ctx = self._own(self.engine.context())
        self.build_s = time.perf_counter() - t0
        self.run = self.opts.bind(self.ctx, image, with_stats=True)

    def _own(self, obj):
        self.closers.append(obj)
        return obj

    def info(self):
        return self.engine.info()

    def close(self):
        self.run = None
        for obj in reversed(self.closers):
            obj.close()
        self.closers = []


# ---------------------------------------------------------------------------
# device memory


class FreeMemorySampler:
    """A thread reading the device's free memory every `period` seconds
    while the with block runs: .min_free is the lowest reading."""

    def __init__(self, torch, period=0.002):
        self.torch, self.period = torch, period
        self.min_free, self.samples = None, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _read(self):
        free = self.torch.cuda.mem_get_info()[0]
        self.min_free = free if self.min_free is None else min(self.min_free, free)
        self.samples += 1

    def _loop(self):
        while not self._stop.is_set():
            self._read()
            time.sleep(self.period)

    def __enter__(self):
        self._read()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._read()


# ---------------------------------------------------------------------------
# the benchmark


def side_summary(times_ms, windows, gflop_total):
    s = gvp.summarize_times(times_ms)
    s["times_ms"] = list(times_ms)
    s["windows_per_s"] = windows / (s["median_ms"] * 1e-3) if s["median_ms"] > 0 else None
    s["tflops"] = gflop_total / s["median_ms"] if s["median_ms"] > 0 else None  # GFLOP / ms = TFLOP/s
    return s


class Bench:
    def __init__(self, args):
        import torch
        self.torch = torch
        self.a = args
        self.device = torch.device(args.device)
        self.cuda = self.device.type == "cuda"
        if self.cuda:
            torch.backends.cudnn.benchmark = True
        self.result = None
        self.segrt_stats = None
        self.segrt_stats_runs = []

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def write(self):
        out = pathlib.Path(self.a.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(out.suffix + ".tmp")
        tmp.write_text(json.dumps(gvp.json_safe(self.result), indent=1) + "\n")
        tmp.replace(out)

    def header(self):
        torch = self.torch
        if self.cuda:
            props = torch.cuda.get_device_properties(self.device)
            dev = {"name": torch.cuda.get_device_name(self.device), "capability": list(
                torch.cuda.get_device_capability(self.device)), "multiprocessors": props.multi_processor_count,
                "total_memory_bytes": props.total_memory, "driver": None}
            try:
                smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i",
                                      "0"], capture_output=True, text=True, timeout=30)
                dev["driver"] = smi.stdout.strip() if smi.returncode == 0 else None
            except (OSError, subprocess.TimeoutExpired):
                pass
        else:
            dev = {"name": f"CPU {platform.processor() or platform.machine()}", "cpus": os.cpu_count()}
        versions = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
                    "torch_cudnn": torch.backends.cudnn.version() if self.cuda else None, "numpy": np.__version__}
        for mod in ("onnx", "onnx2torch"):
            try:
                versions[mod] = importlib.metadata.version(mod)
            except importlib.metadata.PackageNotFoundError:
                versions[mod] = getattr(sys.modules.get(mod), "__version__", "unknown")
        try:
            import segrt_capi as sc
            versions["segrt"] = sc.version()
            versions["segrt_library"] = str(sc.library_path())
            versions["segrt_cuda"] = sc.cuda_versions()
        except Exception as e:  # noqa: BLE001 - the torch side still runs
            versions["segrt"] = f"unavailable: {e}"
        return dev, versions

    def start(self):
        a = self.a
        dev, versions = self.header()
        log(f"{dev['name']}: torch {versions['torch']} (CUDA {versions['torch_cuda']}, cuDNN "
            f"{versions['torch_cudnn']}), segrt {versions.get('segrt')}")
        self.result = {
            "benchmark": "sw_vs_monai", "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "host": platform.node(), "device": dev, "versions": versions,
            "settings": {"device": a.device, "small": a.small, "warmup": a.warmup, "iters": a.iters, "block": a.block,
                         "blend": a.blend, "sigma_scale": 0.125, "padding": "constant 0", "seed": a.seed,
                         "segrt_precision": a.precision, "segrt_output": "labels (uint8 argmax)",
                         "torch_mode": "AMP float16 (torch.autocast), channels-last" if self.cuda
                         else "float32 (CPU)",
                         "torch_algorithm": "monai_sliding_window (MONAI's sliding_window_inference in torch)",
                         "timing": "wall clock per end-to-end run (host float32 image -> host uint8 labels), "
                                   f"sides alternating{'' if a.block == 1 else f' in blocks of {a.block} runs'}; "
                                   "torch synchronized before and after",
                         "torch_peak": "max_memory_allocated over the timed runs (stats reset after the warm-up)",
                         "segrt_peak": "sampled: free device memory before the engine build less its minimum "
                                       "during one more run (every 2 ms), torch's cache emptied, less torch's "
                                       "own reservations",
                         "target_speedup": TARGET_SPEEDUP},
            "cases": [], "complete": False}
        self.write()

    def run_job(self, job):
        import onnx
        torch = self.torch
        path = pathlib.Path(self.a.models_dir) / f"{job.model}.onnx"
        log(f"== {job.name}: {job.model}, image {'x'.join(map(str, job.image))}, window "
            f"{'x'.join(map(str, job.roi))}, overlap {job.overlap}")
        onnx_model = onnx.load(str(path))
        in_name = onnx_model.graph.input[0].name
        gflop_window = gvp.graph_flops(onnx_model, {in_name: (1, job.image[1]) + tuple(job.roi)})["total"] / 1e9
        windows = window_count(job.image, job.roi, job.overlap)
        t0 = time.perf_counter()
        image = make_image(job.image, self.a.seed)
        log(f"image made in {time.perf_counter() - t0:.1f} s; {windows} windows, {gflop_window:.2f} GFLOP each")
        module = None
        try:
            module = gvp.torch_module(onnx_model).to(self.device)
            if self.cuda:
                module = module.to(memory_format=torch.channels_last if len(job.roi) == 2
                                   else torch.channels_last_3d)
        except Exception as e:  # noqa: BLE001 - segrt still runs
            log(f"onnx2torch could not convert {path}: {type(e).__name__}: {e}")
        predictor = torch_predictor(module, self.device, amp=self.cuda) if module is not None else None
        for sw_batch in self.a.sw_batch:
            case = {"job": job.name, "model": job.model, "image_shape": list(job.image), "roi": list(job.roi),
                    "overlap": job.overlap, "sw_batch": sw_batch,
                    "torch_sw_batch": self.a.torch_sw_batch or sw_batch, "blend": self.a.blend, "windows": windows,
                    "gflop_per_window": gflop_window, "gflop_total": gflop_window * windows}
            self.result["cases"].append(case)
            try:
                self.run_case(case, job, path, image, predictor)
            except Exception as e:  # noqa: BLE001 - one failing case must not lose the others
                case["error"] = f"{type(e).__name__}: {e}"
                log(f"{job.name} sw_batch {sw_batch}: FAILED {case['error']}")
            self.write()
        del module, predictor, image
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()

    def free_now(self):
        """(free device bytes, torch's reserved bytes), torch's cache emptied."""
        torch = self.torch
        self.sync()
        gc.collect()
        torch.cuda.empty_cache()
        return torch.cuda.mem_get_info(self.device)[0], torch.cuda.memory_reserved(self.device)

    def run_case(self, case, job, path, image, predictor):
        torch = self.torch
        a = self.a
        iters = a.iters or job.iters
        sw_batch = case["sw_batch"]
        tag = f"{job.name} sw_batch {sw_batch}"
        case.update(iters=iters, warmup=a.warmup, segrt_batch_range=not a.fixed_batch and self.cuda)
        self.segrt_stats = None
        self.segrt_stats_runs = []
        free0 = self.free_now() if self.cuda else None
        log(f"{tag}: building segrt's engine ...")
        seg = SegrtSide(path, image, job, sw_batch, a.blend, a.device, a.precision,
                        batch_range=not a.fixed_batch)
        try:
            info = seg.info()
            plans0 = info.get("plans")
            case["segrt_build"] = {"build_s": seg.build_s, "input_dims": list(seg.input_dims), "engine_info": info,
                                   "engine_bytes": info["weight_bytes"] + info["arena_bytes"]
                                   + info["workspace_bytes"]}
            log(f"{tag}: engine for {'x'.join(map(str, seg.input_dims))} built in {seg.build_s:.1f} s")
            sides = {"segrt": self.segrt_call(seg)}
            if predictor is not None:
                sides["torch"] = self.torch_call(image, predictor, job, case["torch_sw_batch"])
            else:
                case["torch_error"] = "no PyTorch module (onnx2torch failed)"
            times = {k: [] for k in sides}
            labels, last = {}, {}
            for rep in range(a.warmup + iters):
                if rep == a.warmup and self.cuda:
                    # After the warm-up: cuDNN's algorithm trials are not the steady state.
                    torch.cuda.reset_peak_memory_stats(self.device)
                for side, call in sides.items():
                    for k in range(a.block):
                        last[side], labels[side] = call()
                        if rep == 0 and k == 0:
                            case[f"{side}_first_call_ms"] = last[side]
                        if rep >= a.warmup:
                            times[side].append(last[side])
                log(f"{tag}: {'warm-up' if rep < a.warmup else 'run'} {rep + 1}: "
                    + ", ".join(f"{s} {ms:.1f} ms" for s, ms in last.items()))
            for side in sides:
                case[side] = side_summary(times[side], case["windows"], case["gflop_total"])
            if self.cuda and "torch" in sides:
                case["torch"]["peak_bytes"] = torch.cuda.max_memory_allocated(self.device)
                case["torch"]["reserved_peak_bytes"] = torch.cuda.max_memory_reserved(self.device)
            case["labels_agreement"] = label_agreement(labels.get("segrt"), labels.get("torch"))
            # Plans the engine compiled during the runs: the short last batch's (a batch range).
            case["segrt_plans_compiled_in_runs"] = (seg.info().get("plans") or 0) - (plans0 or 0)
            # segrt_window_stats of the last run (on_device: blended on the GPU), where the library has them.
            case["segrt_stats"] = self.segrt_stats
            # ... and where each timed run's host time went, to tell a slow
            # run's cause (copies, the GPU, the result) from the others'.
            runs = self.segrt_stats_runs[a.warmup * a.block:]
            if runs and all(runs):
                keys = ("seconds_setup", "seconds_uploading", "seconds_waiting", "seconds_downloading",
                        "seconds_run")
                case["segrt_stats_runs"] = {k.replace("seconds_", "") + "_ms": [r[k] * 1e3 for r in runs]
                                            for k in keys if k in runs[0]}
            labels.clear()
            if self.cuda:
                case["segrt"].update(self.segrt_sampled_peak(seg, free0))
        finally:
            seg.close()
        if "torch" in case and "segrt" in case:
            case["speedup"] = case["torch"]["median_ms"] / case["segrt"]["median_ms"]
            case["time_ratio_segrt_over_torch"] = 1.0 / case["speedup"]
            case["target_met"] = case["speedup"] >= TARGET_SPEEDUP
        self.log_case(tag, case)

    def segrt_call(self, seg):
        def call():
            self.sync()  # torch's work done: segrt starts on an idle device
            t0 = time.perf_counter()
            res = seg.run()
            ms = (time.perf_counter() - t0) * 1e3
            with res:
                self.segrt_stats = res.stats
                self.segrt_stats_runs.append(res.stats)
                return ms, res.numpy()  # the copy is not timed
        return call

    def torch_call(self, image, predictor, job, sw_batch):
        def call():
            self.sync()
            t0 = time.perf_counter()
            labels = torch_labels(image, self.device, predictor, job, sw_batch, self.a.blend)
            self.sync()
            return (time.perf_counter() - t0) * 1e3, labels
        return call

    def segrt_sampled_peak(self, seg, free0):
        """One more segrt run, sampled: the drop of free device memory from
        before the engine build to its lowest point."""
        base_free, base_reserved = free0
        _, reserved = self.free_now()
        with FreeMemorySampler(self.torch) as s:
            with seg.run():
                pass
        drop = base_free - s.min_free - (reserved - base_reserved)
        return {"peak_bytes_sampled": drop, "memory_samples": s.samples}

    def log_case(self, tag, case):
        parts = []
        for side in ("segrt", "torch"):
            r = case.get(side)
            if r:
                peak = r.get("peak_bytes", r.get("peak_bytes_sampled"))
                parts.append(f"{side} {r['median_ms']:.1f} ms ({r['windows_per_s']:.0f} windows/s, "
                             f"{r['tflops']:.2f} TFLOP/s" + ("" if peak is None else f", {peak / 2**20:.0f} MiB")
                             + ")")
        if "speedup" in case:
            parts.append(f"segrt faster by {case['speedup']:.2f}x")
        if case.get("labels_agreement") is not None:
            parts.append(f"labels agree {100 * case['labels_agreement']:.3f} %")
        log(f"{tag}: " + "; ".join(parts))


def run(args):
    b = Bench(args)
    b.start()
    jobs = SMALL_JOBS if args.small else JOBS
    for name in args.jobs:
        b.run_job(jobs[name])
    b.result["complete"] = True
    b.write()
    print(report.sw_markdown(b.result), flush=True)
    log(f"written to {args.out}")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-dir", default=os.environ.get("SEGRT_MODELS", str(ROOT.parent / "shared" / "models")),
                    help="folder of the ONNX files (default $SEGRT_MODELS or ../shared/models)")
    ap.add_argument("--jobs", default=["2d", "3d"], type=lambda s: [x for x in s.split(",") if x],
                    help="comma list of 2d, 3d (default both)")
    ap.add_argument("--sw-batch", default=[4], type=gvp.parse_int_list,
                    help="windows per network call on both sides; a comma list sweeps (default 4)")
    ap.add_argument("--torch-sw-batch", type=int, default=None,
                    help="windows per call on the PyTorch side only (default: --sw-batch's), so each side runs at "
                         "its own best batch (MONAI's documented 2D job uses 8)")
    ap.add_argument("--blend", default="gaussian", choices=("gaussian", "constant"))
    ap.add_argument("--fixed-batch", action="store_true",
                    help="build segrt's engine for exactly --sw-batch windows (a short last batch is padded)")
    ap.add_argument("--iters", type=int, default=None, help="timed runs per side (default 10 for 2d, 5 for 3d)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed runs per side first (at least 1)")
    ap.add_argument("--block", type=int, default=1,
                    help="runs of one side in a row per repetition (default 1: the sides alternate every run)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--small", action="store_true", help="tiny images and windows, for smoke tests")
    ap.add_argument("--precision", default=None, choices=("fp32", "tf32", "fp16", "bf16"),
                    help="segrt's engine precision (default fp16 on cuda, the engine's own on cpu)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pythonpath", action="append", default=[],
                    help="folder to put first on sys.path (onnx2torch installed with pip --target)")
    ap.add_argument("--out", default=None,
                    help="JSON file (default bench/results/sw_vs_monai-<device>-<date>[-small].json)")
    a = ap.parse_args(argv)
    bad = [j for j in a.jobs if j not in JOBS]
    if bad or not a.jobs:
        ap.error(f"unknown jobs {bad}; known: {', '.join(JOBS)}")
    if not a.sw_batch or min(a.sw_batch) < 1 or (a.torch_sw_batch is not None and a.torch_sw_batch < 1):
        ap.error("--sw-batch and --torch-sw-batch need values >= 1")
    if a.warmup < 1 or a.block < 1 or (a.iters is not None and a.iters < 1):
        ap.error("--warmup, --block and --iters must be at least 1")
    if a.precision is None and a.device == "cuda":
        a.precision = "fp16"
    return a


def main(argv=None):
    a = parse_args(argv)
    for p in reversed(a.pythonpath):
        sys.path.insert(0, p)
    import torch
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("sw_vs_monai: torch sees no CUDA device (--device cpu --small for a smoke test)")
    if a.out is None:
        name = torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu"
        a.out = str(ROOT / "bench" / "results" / (f"sw_vs_monai-{gvp.device_slug(name)}-"
                                                 f"{datetime.date.today().isoformat()}"
                                                 + ("-small" if a.small else "") + ".json"))
    run(a)


if __name__ == "__main__":
    main()
