#!/usr/bin/env python3
"""bench/volume_vs_monai: a synthetic CT as a DICOM folder on disk -> labels
on disk with an nnU-Net-sized 3-D network, segrt against MONAI's pipeline
and nnU-Net's predictor, side by side in one run (issue 39, Speed).

    python3 run.py --segrt BUILD_DIR [--contenders monai,nnunet,segrt_monai,segrt_nnunet]
        [--runs N] [--warmup N] [--small] [--device cuda|cpu] [--work DIR] [--remake]
        [--python PY] [--sw-batch N] [--precision fp16] [--no-ceiling] [--report-only] [--out FILE.json]
    python3 run.py --floor [--small] [--device cuda|cpu] [--work DIR] [--remake]

Steps: make_case.py and make_model.py (skipped where WORK already holds a
case and model of this setup, unless --remake; neither is timed), then each
contender in its own process (contenders.py: N timed runs after --warmup
untimed ones, files on disk to labels on disk, model load included and
reported apart), then the FP16 matrix ceiling in its own process (cuda),
then the comparison: every label file is brought into RAS with nibabel
(as_closest_canonical), shapes and affines checked, and the voxelwise
agreement and per-class Dice of each segrt variant against its reference
(config.SEGRT_REFERENCE: segrt_monai -> monai, segrt_nnunet -> nnunet) and
of MONAI against nnU-Net are computed. The JSON goes to
bench/results/volume_vs_monai-<device>-<date>[-small].json and a table is
printed. --floor runs only monai (autocast: float16 on CUDA, bfloat16 on a
CPU) and monai_fp32: the precision floor the agreement target needs. make_model
trains the network (a minute or two on a GPU; model.json's "decisiveness"
has its own float32 vs autocast floor). --report-only redoes the comparison and JSON from the workers'
files in WORK (a run split over several calls).

Timing: Python contenders (monai, nnunet) run N times in one warm process
(imports, the CUDA context and cuDNN's autotuning outside the timed runs
after the first); CLI contenders (segrt_*, nnunet_cli) are a new process a
run, start-up and CUDA context included. segrt's speed-up is the other
contender's median wall time over segrt's.
"""
import argparse
import datetime
import json
import math
import os
import pathlib
import platform
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/: harness
import config  # noqa: E402
from harness import log, device_name, slug, dice, summary, write_json  # noqa: E402

T0 = time.perf_counter()
TARGET_SPEEDUP = 5.0
TARGET_AGREEMENT = 0.999
HERE = pathlib.Path(__file__).resolve().parent
DEFAULT_CONTENDERS = ["monai", "nnunet", "segrt_monai", "segrt_nnunet", "monai_fp32"]
# References for the labels only: one run, no warm-up, no speed-up.
LABELS_ONLY = ("monai_fp32",)


# ---------------------------------------------------------------------------
# Windows and FLOPs


def resampled_shape(s):
    """The shape both pipelines resample to (nnU-Net's rule: round(n *
    spacing / target))."""
    return [int(round(n * sp / t)) for n, sp, t in zip(s.shape_zyx, s.spacing_zyx, s.target_spacing_zyx)]


def monai_windows(shape, roi, overlap):
    """MONAI's sliding_window_inference grid: steps of int(roi * (1 -
    overlap)), the last window pulled back inside (padding where the image is
    smaller than the window)."""
    n = 1
    for size, r in zip(shape, roi):
        size = max(size, r)
        step = r if r == size else max(int(r * (1 - overlap)), 1)
        n *= math.ceil(max(size - r, 0) / step) + 1 if size > r else 1
    return n


def nnunet_windows(shape, patch, step_size):
    """nnU-Net's compute_steps_for_sliding_window: ceil((size - patch) /
    (patch * step_size)) + 1 evenly spread tiles per axis."""
    n = 1
    for size, p in zip(shape, patch):
        size = max(size, p)
        n *= int(math.ceil((size - p) / (p * step_size))) + 1
    return n


def flops_per_window(onnx_path, patch):
    """Conv and ConvTranspose FLOPs (2 x multiply-adds) of one window, from
    the ONNX graph (bench/gpu_vs_pytorch.py's count); None without onnx."""
    try:
        import onnx
        sys.path.insert(0, str(config.ROOT / "bench"))
        import gpu_vs_pytorch as gvp
        m = onnx.load(str(onnx_path))
        return gvp.graph_flops(m, {m.graph.input[0].name: (1, 1) + tuple(patch)})["total"]
    except Exception as e:  # noqa: BLE001 - the timings still count
        log(f"FLOPs not counted: {type(e).__name__}: {e}")
        return None


# ---------------------------------------------------------------------------
# Labels


def load_labels(path):
    """(RAS-canonical uint8 labels, affine) of a label NIfTI."""
    import nibabel as nib
    import numpy as np
    img = nib.as_closest_canonical(nib.load(str(path)))
    data = np.asarray(img.dataobj)
    if data.ndim == 4 and data.shape[3] == 1:
        data = data[..., 0]
    return np.rint(data).astype(np.int32), img.affine


def compare(a_path, b_path, classes):
    """Voxelwise agreement and per-class Dice of A against B, after their
    shapes and affines (in RAS, 1e-3 mm) are checked."""
    import numpy as np
    a, aff_a = load_labels(a_path)
    b, aff_b = load_labels(b_path)
    out = {"a": str(a_path), "b": str(b_path), "shape_a": list(a.shape), "shape_b": list(b.shape),
           "affine_max_abs_diff": float(np.abs(aff_a - aff_b).max())}
    if a.shape != b.shape:
        out["error"] = f"shapes differ: {a.shape} vs {b.shape}"
        return out
    if out["affine_max_abs_diff"] > 1e-3:
        out["error"] = f"affines differ by {out['affine_max_abs_diff']:.3g}:\n{aff_a}\nvs\n{aff_b}"
        return out
    out["agreement"] = float(np.count_nonzero(a == b)) / a.size
    out["dice"] = dice(a, b, classes)
    out["voxels_per_class_a"] = np.bincount(a.ravel(), minlength=classes).tolist()
    out["voxels_per_class_b"] = np.bincount(b.ravel(), minlength=classes).tolist()
    return out


# ---------------------------------------------------------------------------



def build_report(a, paths, s, contenders, ceiling):
    model = json.loads(paths.model_json.read_text())
    case = json.loads(paths.case_json.read_text())
    shape = resampled_shape(s)
    fpw = flops_per_window(paths.onnx, s.patch_zyx)
    windows = {"monai": monai_windows(shape, s.patch_zyx, config.OVERLAP),
               "nnunet": nnunet_windows(shape, s.patch_zyx, config.OVERLAP)}
    name, driver = device_name(a.device)
    res = {"benchmark": "volume_vs_monai", "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "host": platform.node(), "device": {"name": name, "driver": driver, "ceiling": ceiling},
           "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
           "settings": {"setup": s.name, "device": a.device, "runs": a.runs, "warmup": a.warmup, "floor": a.floor,
                        "sw_batch": a.sw_batch or s.sw_batch,
                        "precision": a.precision if a.device.startswith("cuda") else "fp32 (cpu)",
                        "overlap": config.OVERLAP,
                        "blend": "gaussian, sigma = window / 8", "mirroring": False,
                        "timing": "wall clock, files on disk to labels on disk, model load included; Python "
                                  "contenders in one warm process (imports and CUDA context outside), CLI "
                                  "contenders a new process a run",
                        "not_timed": "making the case (DICOM and NIfTI) and the model; nnU-Net's NIfTI "
                                     "conversion of the DICOM series",
                        "target_speedup": TARGET_SPEEDUP, "target_agreement": TARGET_AGREEMENT},
           "case": {k: case[k] for k in ("shape_zyx", "spacing_zyx", "iop", "ras_affine", "files", "dicom_bytes",
                                         "nifti_bytes", "foreground_intensity_properties")},
           "model": {"training": model.get("training"), "decisiveness": model.get("decisiveness"),
                     "parameters": model["parameters"], "patch_zyx": model["patch_zyx"], "classes": model["classes"],
                     "features": list(s.features), "ct_window": model["ct_window"], "onnx_bytes": model["onnx_bytes"],
                     "target_spacing_zyx": list(s.target_spacing_zyx), "resampled_shape_zyx": shape,
                     "flops_per_window": fpw, "windows": windows,
                     "flops_total": {k: (fpw * n if fpw else None) for k, n in windows.items()}},
           "contenders": {}, "comparisons": {}, "speedups": {}}
    for c in contenders:
        f = paths.worker_json(c)
        if not f.exists():
            res["contenders"][c] = {"error": "not run"}
            continue
        w = json.loads(f.read_text())
        entry = {k: w.get(k) for k in ("error", "process_init_s", "versions", "sw_batch", "label_file",
                                       "stopped_by_max_seconds")}
        entry["first_run"] = w.get("first_run")
        entry["summary"] = summary(w)
        grid = "nnunet" if c in ("nnunet", "nnunet_cli", "segrt_nnunet") else "monai"
        total = res["model"]["flops_total"][grid]
        if entry["summary"] and total:
            entry["tflops_end_to_end"] = total / entry["summary"]["median_s"] / 1e12
            if ceiling and ceiling.get("fp16_matmul_tflops"):
                entry["share_of_fp16_ceiling"] = entry["tflops_end_to_end"] / ceiling["fp16_matmul_tflops"]
        res["contenders"][c] = {k: v for k, v in entry.items() if v is not None}
    ok = {c for c, e in res["contenders"].items() if e.get("summary") and "error" not in e}
    pairs = [(v, config.SEGRT_REFERENCE[v]) for v in contenders if v in config.SEGRT_REFERENCE]
    pairs += [("monai", "monai_fp32"), ("segrt_monai", "monai_fp32"), ("monai", "nnunet")]
    for x, ref in pairs:
        if x in ok and ref in ok and f"{x}_vs_{ref}" not in res["comparisons"]:
            key = f"{x}_vs_{ref}"
            try:
                res["comparisons"][key] = compare(paths.label_file(x), paths.label_file(ref), s.classes)
            except Exception as e:  # noqa: BLE001
                res["comparisons"][key] = {"error": f"{type(e).__name__}: {e}"}
    for v in contenders:
        if not v.startswith("segrt") or v not in ok:
            continue
        sv = res["contenders"][v]["summary"]["median_s"]
        for other in contenders:
            if other.startswith("segrt") or other not in ok or other in LABELS_ONLY:
                continue
            sp = res["contenders"][other]["summary"]["median_s"] / sv
            entry = {"speedup": sp, "target_met": sp >= TARGET_SPEEDUP}
            cmp_ = res["comparisons"].get(f"{v}_vs_{other}")
            if cmp_ and "agreement" in cmp_:
                entry["agreement"] = cmp_["agreement"]
                entry["agreement_met"] = cmp_["agreement"] >= TARGET_AGREEMENT
            res["speedups"][f"{v}_vs_{other}"] = entry
    return res


def table(res):
    lines = [f"volume_vs_monai on {res['device']['name']} ({res['date']}), setup {res['settings']['setup']}: "
             f"CT {'x'.join(map(str, res['case']['shape_zyx']))} (z,y,x) -> "
             f"{'x'.join(map(str, res['model']['resampled_shape_zyx']))} at "
             f"{'x'.join(f'{v:g}' for v in res['model']['target_spacing_zyx'])} mm, patch "
             f"{'x'.join(map(str, res['model']['patch_zyx']))}, {res['model']['classes']} classes, "
             f"{res['model']['parameters'] / 1e6:.1f} M parameters"]
    fpw = res["model"]["flops_per_window"]
    if fpw:
        lines.append(f"network: {fpw / 1e9:.4g} GFLOP a window x windows "
                     + ", ".join(f"{k} grid {n}" for k, n in res["model"]["windows"].items())
                     + (f"; FP16 matrix ceiling {res['device']['ceiling']['fp16_matmul_tflops']:.0f} TFLOP/s"
                        if res["device"].get("ceiling") else ""))
    lines.append("")
    lines.append("| contender | median s | min-max s | first run s | load s | TFLOP/s e2e | % ceiling |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for c, e in res["contenders"].items():
        sm = e.get("summary")
        if not sm or "error" in e:
            err = [x for x in str(e.get("error", "no runs")).splitlines() if x.strip()] or ["?"]
            lines.append(f"| {c} | failed: {err[-1][:100]} | | | | | |")
            continue
        load = sm["parts_median_s"].get("load")
        first = sm.get("first_run_s")
        tf, share = e.get("tflops_end_to_end"), e.get("share_of_fp16_ceiling")
        lines.append(f"| {c} | {sm['median_s']:.2f} | {sm['min_s']:.2f}-{sm['max_s']:.2f} | "
                     f"{'' if first is None else f'{first:.2f}'} | {'' if load is None else f'{load:.2f}'} | "
                     f"{'' if tf is None else f'{tf:.3g}'} | {'' if share is None else f'{100 * share:.1f}'} |")
    if res["speedups"]:
        lines.append("")
        lines.append(f"| segrt variant vs | speed-up (target {TARGET_SPEEDUP:g}x) | label agreement "
                     f"(target {100 * TARGET_AGREEMENT:g} %) |")
        lines.append("|---|---:|---:|")
        for k, e in res["speedups"].items():
            ag = f"{100 * e['agreement']:.3f} %" if "agreement" in e else ""
            lines.append(f"| {k.replace('_vs_', ' vs ')} | {e['speedup']:.2f}x {'ok' if e['target_met'] else 'MISSED'}"
                         f" | {ag}{'' if 'agreement_met' not in e else (' ok' if e['agreement_met'] else ' MISSED')} |")
    for k, c in res["comparisons"].items():
        if "error" in c:
            lines.append(f"{k}: {c['error'].splitlines()[0]}")
        else:
            worst = sorted(c["dice"].items(), key=lambda kv: kv[1])[:3]
            lines.append(f"{k}: agreement {100 * c['agreement']:.3f} %, lowest Dice "
                         + ", ".join(f"class {cl} {d:.4f}" for cl, d in worst))
    return "\n".join(lines)


def case_matches(paths, s):
    try:
        case = json.loads(paths.case_json.read_text())
        model = json.loads(paths.model_json.read_text())
    except (OSError, ValueError):
        return False
    # A model of older make_model.py (random weights, no "training") is made again.
    return (case.get("shape_zyx") == list(s.shape_zyx) and model.get("patch_zyx") == list(s.patch_zyx)
            and model.get("training", {}).get("steps") == s.train_steps and paths.structures.exists()
            and paths.onnx.exists() and paths.torch_weights.exists() and paths.nifti_case.exists()
            and (paths.model_folder / "fold_0" / "checkpoint_final.pth").exists())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--contenders", default=",".join(DEFAULT_CONTENDERS),
                    help=f"comma list of {', '.join(config.SEGRT_VARIANTS)}, monai, nnunet, nnunet_cli "
                         f"(default {','.join(DEFAULT_CONTENDERS)})")
    ap.add_argument("--segrt", default=str(config.ROOT / "build"), help="segrt's build folder or binary")
    ap.add_argument("--segrt-cache", default=None, help="XDG_CACHE_HOME for segrt's plan cache")
    ap.add_argument("--small", action="store_true", help="tiny volume and network, for a CPU")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--runs", type=int, default=None, help="timed runs per contender (default 5, --small 1)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed runs first (default 1, --small 0)")
    ap.add_argument("--sw-batch", type=int, default=None, help="windows per network call (MONAI and segrt)")
    ap.add_argument("--precision", default="fp16", help="segrt's --precision on CUDA")
    ap.add_argument("--work", default=None, help="work folder (default $VBENCH_WORK or /tmp/volume_vs_monai[-small])")
    ap.add_argument("--remake", action="store_true", help="make the case and model even where they exist")
    ap.add_argument("--python", default=sys.executable, help="interpreter of the Python contenders")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds this whole call may take: each contender gets an even share of what is left "
                         "(at least one timed run each), e.g. 540 under the device tool's 600")
    ap.add_argument("--no-ceiling", action="store_true", help="do not measure the FP16 matrix ceiling")
    ap.add_argument("--report-only", action="store_true", help="only compare and report the workers' files")
    ap.add_argument("--floor", action="store_true",
                    help="the precision floor only: monai (autocast: float16 on CUDA, bfloat16 on a CPU) against "
                         "monai_fp32, one run each, no ceiling; the JSON's name ends in -floor")
    ap.add_argument("--out", default=None, help="JSON file (default bench/results/volume_vs_monai-<device>-<date>"
                                                "[-small].json)")
    a = ap.parse_args(argv)
    s = config.setup(a.small)
    if a.floor:
        a.contenders, a.runs, a.warmup, a.no_ceiling = "monai,monai_fp32", 1, 0, True
    a.runs = a.runs or s.runs
    if a.warmup is None:
        a.warmup = 0 if a.small else 1
    contenders = [c for c in a.contenders.split(",") if c]
    import contenders as cmod
    bad = [c for c in contenders if c not in cmod.ALL]
    if bad:
        ap.error(f"unknown contenders {bad}; known: {', '.join(cmod.ALL)}")
    paths = config.Paths(config.default_work_dir(a.small) if a.work is None else pathlib.Path(a.work))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if not a.report_only:
        if a.remake or not case_matches(paths, s):
            import make_case
            import make_model
            make_case.make(paths, s, log=log)
            make_model.make(paths, s, log=log)
        else:
            log(f"case and model in {paths.work} reused (--remake to make them again)")
        for i, c in enumerate(contenders):
            paths.worker_json(c).unlink(missing_ok=True)
            share = None
            if a.budget is not None:
                # What is left, less ~30 s for the ceiling and the comparison, shared evenly.
                share = max((a.budget - (time.perf_counter() - T0) - 30) / (len(contenders) - i), 1.0)
            argv_c = [a.python if c in cmod.PYTHON_CONTENDERS or c == "nnunet_cli" else sys.executable,
                      str(HERE / "contenders.py"), c, "--work", str(paths.work), "--device", a.device,
                      "--runs", str(1 if c in LABELS_ONLY else a.runs),
                      "--warmup", str(0 if c in LABELS_ONLY else a.warmup), "--segrt", a.segrt,
                      "--precision", a.precision] + (["--small"] if a.small else []) \
                + (["--sw-batch", str(a.sw_batch)] if a.sw_batch else []) \
                + (["--segrt-cache", a.segrt_cache] if a.segrt_cache else []) \
                + (["--max-seconds", f"{share:.0f}"] if share is not None else []) \
                + (["--cpu-amp"] if a.floor else [])
            log(f"== {c}" + ("" if share is None else f" (at most {share:.0f} s)"))
            subprocess.run(argv_c, env=env)
        if a.device.startswith("cuda") and not a.no_ceiling:
            subprocess.run([a.python, str(HERE / "contenders.py"), "ceiling", "--work", str(paths.work)], env=env)
    ceiling = None
    if a.device.startswith("cuda") and paths.worker_json("ceiling").exists():
        ceiling = json.loads(paths.worker_json("ceiling").read_text())
    res = build_report(a, paths, s, contenders, ceiling)
    if a.out is None:
        a.out = str(config.ROOT / "bench" / "results" / (f"volume_vs_monai-{slug(res['device']['name'])}-"
                                                         f"{datetime.date.today().isoformat()}"
                                                         + ("-small" if a.small else "")
                                                         + ("-floor" if a.floor else "") + ".json"))
    out = pathlib.Path(a.out)
    write_json(out, res)
    print(table(res), flush=True)
    log(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
