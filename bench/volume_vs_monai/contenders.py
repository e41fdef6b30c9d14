#!/usr/bin/env python3
"""One contender of bench/volume_vs_monai in its own process: N runs, each
from the case's files on disk to a label NIfTI on disk, timed by the wall
clock, written to WORK/out/CONTENDER.json.

    python3 contenders.py monai|monai_fp32|nnunet|nnunet_cli|segrt_monai|segrt_nnunet|segrt_plain|ceiling
        [--small] [--work DIR] [--device cuda|cpu] [--runs N] [--warmup N] [--sw-batch N]
        [--segrt BUILD_DIR_OR_BINARY] [--precision fp16]

Each run, Python contenders (in one process, imports and the CUDA context
made once before the first run, not counted):
  monai   build the module (dynamic_network_architectures' PlainConvUNet),
          load its state dict, move it to the device (load); LoadImaged
          (PydicomReader, the DICOM folder) -> EnsureChannelFirstd (read);
          EnsureTyped(device) -> Orientationd(RAS) -> Spacingd(plans'
          spacing, bilinear) -> ScaleIntensityRanged(the plans' CT window,
          clip) on the device (preprocess); sliding_window_inference(roi =
          patch, overlap 0.5, gaussian, sw_batch_size, under
          torch.autocast(float16); bfloat16 on a CPU with --cpu-amp, else
          none) (infer); Invertd(nearest_interp=False) ->
          AsDiscreted(argmax) (post); SaveImaged(uint8 .nii.gz) (write).
  monai_fp32  the same in float32 (no autocast, TF32 off): not a
          contender but the precision floor, the agreement two correct
          pipelines can have when only their arithmetic differs.
  nnunet  nnUNetPredictor(tile_step_size=0.5, use_gaussian=True,
          use_mirroring=False, perform_everything_on_device=True) and
          initialize_from_trained_model_folder(fold 0) (load); then
          predict_from_files(the NIfTI folder, npp=3, nps=3) as
          nnUNetv2_predict calls it, torch set to one thread as the CLI
          does on CUDA (predict).
Each run, CLI contenders (a new process a run, everything counted):
  nnunet_cli   nnUNetv2_predict -i IN -o OUT -d 999 -c 3d_fullres -f 0
               -step_size 0.5 --disable_tta -device cuda (the entry point
               run as `python3 -c`, so that a --target install works).
  segrt_*      config.py's command line; the first (warm-up) run fills
               segrt's plan cache (the engine build), later runs load it.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/: harness
import config  # noqa: E402
from harness import log, versions, fresh_dir, find_segrt, write_json  # noqa: E402

PYTHON_CONTENDERS = ("monai", "monai_fp32", "nnunet")
CLI_CONTENDERS = ("nnunet_cli",) + tuple(config.SEGRT_VARIANTS)
ALL = PYTHON_CONTENDERS + CLI_CONTENDERS


def sync(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---------------------------------------------------------------------------
# MONAI


class Monai:
    def __init__(self, a, paths, s, amp=True):
        import numpy as np
        import torch
        import monai  # noqa: F401 - imported before the runs
        self.np, self.torch = np, torch
        self.a, self.paths, self.s = a, paths, s
        self.device = torch.device(a.device)
        # Autocast: float16 on CUDA; on a CPU only where asked (--cpu-amp, run.py --floor), in bfloat16,
        # the CPU's fast low precision (and a coarser one than float16: a harder floor).
        self.amp = amp and (self.device.type == "cuda" or a.cpu_amp)
        self.amp_dtype = torch.float16 if self.device.type == "cuda" else torch.bfloat16
        self.model_info = json.loads(paths.model_json.read_text())
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True  # as MONAI's tutorials set it
            if not amp:  # the FP32 reference: no TF32 either
                torch.backends.cudnn.allow_tf32 = False
                torch.backends.cuda.matmul.allow_tf32 = False

    def run(self, out_dir):
        import make_model
        from monai.data import PydicomReader
        from monai.inferers import sliding_window_inference
        from monai.transforms import (AsDiscreted, Compose, EnsureChannelFirstd, EnsureTyped, Invertd, LoadImaged,
                                      Orientationd, SaveImaged, ScaleIntensityRanged, Spacingd)
        torch, np, dev, s = self.torch, self.np, self.device, self.s
        t = {}
        t0 = time.perf_counter()
        ck = torch.load(self.paths.torch_weights, map_location="cpu", weights_only=False)
        net = make_model.build_network(ck["arch"], ck["in_channels"], ck["classes"])
        net.load_state_dict(ck["state_dict"])
        net = net.to(dev).eval()
        sync(torch, dev)
        t1 = time.perf_counter()
        t["load"] = t1 - t0
        a_min, a_max, b_min, b_max = self.model_info["ct_window"]
        load = Compose([LoadImaged(keys="image", reader=PydicomReader()), EnsureChannelFirstd(keys="image")])
        prep = Compose([
            EnsureTyped(keys="image", device=dev, track_meta=True),
            Orientationd(keys="image", axcodes="RAS"),
            Spacingd(keys="image", pixdim=tuple(s.target_spacing_zyx[::-1]), mode="bilinear"),
            ScaleIntensityRanged(keys="image", a_min=a_min, a_max=a_max, b_min=b_min, b_max=b_max, clip=True),
        ])
        data = load({"image": str(self.paths.dicom_dir)})
        t2 = time.perf_counter()
        t["read"] = t2 - t1
        data = prep(data)
        sync(torch, dev)
        t3 = time.perf_counter()
        t["preprocess"] = t3 - t2
        roi = tuple(s.patch_zyx[::-1])  # RAS (x, y, z); the patch is a cube in both setups
        with torch.no_grad(), torch.autocast(dev.type, dtype=self.amp_dtype, enabled=self.amp):
            pred = sliding_window_inference(data["image"][None], roi, self.a.sw_batch, net, overlap=config.OVERLAP,
                                            mode="gaussian", sigma_scale=config.SIGMA_SCALE)
        data["pred"] = pred[0]
        sync(torch, dev)
        t4 = time.perf_counter()
        t["infer"] = t4 - t3
        post = Compose([
            # The transforms' inverse: the logits back onto the DICOM grid (Spacing's inverse, bilinear;
            # Orientation's flips), then the labels.
            Invertd(keys="pred", transform=Compose([load, prep]), orig_keys="image", nearest_interp=False,
                    to_tensor=True),
            AsDiscreted(keys="pred", argmax=True),
        ])
        data = post(data)
        sync(torch, dev)
        t5 = time.perf_counter()
        t["post"] = t5 - t4
        save = SaveImaged(keys="pred", output_dir=str(out_dir), output_postfix="", separate_folder=False,
                          resample=False, output_dtype=np.uint8, print_log=False,
                          output_name_formatter=lambda meta, saver: {"subject": config.CASE, "idx": None})
        save(data)
        t6 = time.perf_counter()
        t["write"] = t6 - t5
        shape = list(data["pred"].shape)
        del data, pred, net
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        return t6 - t0, t, {"label_shape": shape}

    def versions(self):
        v = versions(["torch", "monai", "pydicom", "nibabel", "numpy", "dynamic_network_architectures"])
        v["torch_cuda"] = self.torch.version.cuda
        return v


# ---------------------------------------------------------------------------
# nnU-Net


def nnunet_env(paths):
    env = {"nnUNet_results": str(paths.results_root), "nnUNet_raw": str(paths.work / "nnUNet_raw"),
           "nnUNet_preprocessed": str(paths.work / "nnUNet_preprocessed")}
    for k, v in env.items():
        os.environ[k] = v
    return env


class NnUNet:
    def __init__(self, a, paths, s):
        nnunet_env(paths)
        import torch
        from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor  # noqa: F401 - imported before the runs
        self.torch = torch
        self.a, self.paths, self.s = a, paths, s
        self.device = torch.device(a.device)
        if self.device.type == "cuda":
            # As nnUNetv2_predict does on CUDA.
            torch.set_num_threads(1)
            torch.set_num_interop_threads(1)
        else:
            torch.set_num_threads(os.cpu_count())

    def run(self, out_dir):
        from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor
        torch = self.torch
        t = {}
        t0 = time.perf_counter()
        p = nnUNetPredictor(tile_step_size=config.OVERLAP, use_gaussian=True, use_mirroring=False,
                            perform_everything_on_device=self.device.type == "cuda", device=self.device,
                            verbose=False, verbose_preprocessing=False, allow_tqdm=False)
        p.initialize_from_trained_model_folder(str(self.paths.model_folder), use_folds=(0,),
                                               checkpoint_name="checkpoint_final.pth")
        sync(torch, self.device)
        t1 = time.perf_counter()
        t["load"] = t1 - t0
        p.predict_from_files(str(self.paths.nifti_in_dir), str(out_dir), save_probabilities=False, overwrite=True,
                             num_processes_preprocessing=3, num_processes_segmentation_export=3)
        t2 = time.perf_counter()
        t["predict"] = t2 - t1
        del p
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return t2 - t0, t, {}

    def versions(self):
        v = versions(["torch", "nnunetv2", "dynamic_network_architectures", "SimpleITK", "acvl_utils",
                      "batchgenerators", "numpy", "scipy", "scikit-image"])
        v["torch_cuda"] = self.torch.version.cuda
        return v


# ---------------------------------------------------------------------------
# Command lines: nnUNetv2_predict and segrt


class Cli:
    def __init__(self, name, a, paths, s):
        self.name, self.a, self.paths, self.s = name, a, paths, s
        self.env = dict(os.environ)
        if name == "nnunet_cli":
            self.env.update(nnunet_env(paths))
            self.segrt = None
        else:
            self.segrt = find_segrt(a.segrt)
            if a.segrt_cache:
                self.env["XDG_CACHE_HOME"] = a.segrt_cache

    def argv(self, out_dir):
        if self.name == "nnunet_cli":
            code = "import sys; from nnunetv2.inference.predict_from_raw_data import predict_entry_point as m; " \
                   "sys.argv[0] = 'nnUNetv2_predict'; m()"
            return [sys.executable, "-c", code, "-i", str(self.paths.nifti_in_dir), "-o", str(out_dir),
                    "-d", str(config.DATASET_ID), "-c", "3d_fullres", "-f", "0", "-step_size", f"{config.OVERLAP:g}",
                    "--disable_tta", "--disable_progress_bar", "-device", self.a.device.split(":")[0]]
        window = json.loads(self.paths.model_json.read_text())["ct_window"]
        return config.segrt_command(self.name, self.segrt, self.paths, self.s, window, self.a.device,
                                    self.a.precision, self.a.sw_batch)

    def run(self, out_dir):
        argv = self.argv(out_dir)
        t0 = time.perf_counter()
        r = subprocess.run(argv, env=self.env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            raise RuntimeError(f"exit {r.returncode}: {' '.join(argv)}\n{(r.stdout + r.stderr)[-3000:]}")
        return wall, {"process": wall}, {"stdout_tail": (r.stdout + r.stderr)[-600:], "argv": argv}

    def versions(self):
        if self.segrt is None:
            return versions(["torch", "nnunetv2"])
        r = subprocess.run([str(self.segrt), "--version"], capture_output=True, text=True, env=self.env)
        return {"segrt": (r.stdout + r.stderr).strip(), "segrt_binary": str(self.segrt)}


# ---------------------------------------------------------------------------


def ceiling(out_json):
    """The chip's FP16 matrix ceiling (8192^3 cuBLAS product) and copy rate,
    measured in its own process as bench/gpu_vs_pytorch.py does."""
    import torch
    sys.path.insert(0, str(config.ROOT / "bench"))
    import gpu_vs_pytorch as gvp
    res = gvp.measure_ceilings(torch, 20)
    res["device_name"] = torch.cuda.get_device_name(0)
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(res, indent=1) + "\n")
    log(f"ceiling: FP16 matrix product {res['fp16_matmul_tflops']:.0f} TFLOP/s, copy {res['d2d_copy_gbps']:.0f} GB/s")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("contender", choices=ALL + ("ceiling",))
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--work", default=None)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs first (the first run is reported apart)")
    ap.add_argument("--sw-batch", type=int, default=None)
    ap.add_argument("--segrt", default=str(config.ROOT / "build"), help="segrt's build folder or binary")
    ap.add_argument("--segrt-cache", default=None, help="XDG_CACHE_HOME for segrt's plan cache")
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--cpu-amp", action="store_true", help="monai on a CPU: under bfloat16 autocast")
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="start no timed run after the first that would end past this many seconds from the "
                         "process's start (judged by the last run), so that a call fits the device tool's limit")
    a = ap.parse_args(argv)
    s = config.setup(a.small)
    a.runs = a.runs or s.runs
    a.sw_batch = a.sw_batch or s.sw_batch
    paths = config.Paths(config.default_work_dir(a.small) if a.work is None else pathlib.Path(a.work))
    if a.contender == "ceiling":
        return ceiling(paths.worker_json("ceiling"))
    t_start = time.perf_counter()
    if a.contender in ("monai", "monai_fp32"):
        c = Monai(a, paths, s, amp=a.contender == "monai")
    elif a.contender == "nnunet":
        c = NnUNet(a, paths, s)
    else:
        c = Cli(a.contender, a, paths, s)
    init_s = time.perf_counter() - t_start
    if a.contender in PYTHON_CONTENDERS and c.device.type == "cuda":
        t0 = time.perf_counter()
        c.torch.zeros(1, device=c.device)  # the CUDA context, outside the runs
        c.torch.cuda.synchronize(c.device)
        init_s += time.perf_counter() - t0
    res = {"contender": a.contender, "device": a.device, "setup": s.name, "runs": [], "warmup": a.warmup,
           "sw_batch": a.sw_batch, "process_init_s": init_s, "versions": c.versions()}
    if isinstance(c, Monai):
        res["autocast"] = str(c.amp_dtype).replace("torch.", "") if c.amp else None
    out_json = paths.worker_json(a.contender)
    out_dir = paths.out_dir(a.contender)
    log(f"{a.contender}: imports and start {init_s:.1f} s; {a.warmup} warm-up + {a.runs} timed runs")
    wall = 0.0
    try:
        for i in range(a.warmup + a.runs):
            elapsed = time.perf_counter() - t_start
            if (a.max_seconds is not None and res["runs"] and "first_run" in res
                    and elapsed + wall > a.max_seconds):
                log(f"{a.contender}: stopping after {len(res['runs'])} timed runs ({elapsed:.0f} s of "
                    f"--max-seconds {a.max_seconds:.0f})")
                res["stopped_by_max_seconds"] = True
                break
            fresh_dir(out_dir)
            wall, parts, extra = c.run(out_dir)
            run = {"wall_s": wall, "parts_s": parts, **extra}
            if i == 0:
                res["first_run"] = run
            if i >= a.warmup:
                res["runs"].append(run)
            log(f"{a.contender}: {'warm-up' if i < a.warmup else 'run'} {i + 1}: {wall:.2f} s ("
                + ", ".join(f"{k} {v:.2f}" for k, v in parts.items()) + ")")
        label = paths.label_file(a.contender)
        if not label.exists():
            found = sorted(out_dir.glob("*.nii.gz"))
            raise RuntimeError(f"no {label.name} in {out_dir} (found {[f.name for f in found]})")
        res["label_file"] = str(label)
    except Exception as e:  # noqa: BLE001 - the harness reports it beside the others
        res["error"] = f"{type(e).__name__}: {e}"
        log(f"{a.contender}: FAILED {res['error']}")
    write_json(out_json, res)
    return 1 if "error" in res else 0


if __name__ == "__main__":
    sys.exit(main())
