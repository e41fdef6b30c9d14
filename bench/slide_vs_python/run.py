#!/usr/bin/env python3
"""bench/slide_vs_python: a synthetic 50,000 x 50,000 SVS slide on disk ->
a pyramidal mask at 0.5 um/px on disk, 512^2 patches through a ResNet-34
UNet (24.4 M parameters) in FP16: segrt against the loop users run today
(openslide-python, PyTorch AMP, numpy stitching) and the same loop with
cuCIM reading (issue 40, Speed).

    python3 run.py [--segrt BUILD_DIR] [--contenders torch_openslide,torch_cucim,segrt] [--runs N] [--warmup N]
        [--small | --size N] [--device cuda|cpu] [--work DIR] [--remake] [--steps N] [--loader-workers N]
        [--budget S] [--report-only] [--out FILE.json]

Steps: make_slide.py and make_model.py (skipped where WORK holds a slide and
model of this size, unless --remake; neither is timed), then each contender
in its own process (contenders.py), its process tree watched for memory
(host: the sum of the processes' proportional set sizes, PSS, so that the
DataLoader workers' shared pages count once; device: nvidia-smi's
per-process used memory), then the comparison: the masks' level 0 (0.5
um/px) read with tifffile and compared pixel by pixel inside the patches
torch_openslide processed, with per-class Dice. Patches per second are the
tissue patches processed (torch_openslide's count where a contender does not
say) over the median wall time. The JSON goes to
bench/results/slide_vs_python-<device>-<date>[-small].json and a table is
printed.
"""
import argparse
import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/: harness
import config  # noqa: E402
from harness import log, device_name, slug, dice, summary, write_json  # noqa: E402

T0 = time.perf_counter()
TARGET_PATCHES_PER_S = 2000.0
TARGET_SPEEDUP = 10.0
TARGET_HOST_BYTES = 4 * 2**30
REFERENCE = "torch_openslide"
DEFAULT_CONTENDERS = ["torch_openslide", "torch_cucim", "segrt"]
HERE = pathlib.Path(__file__).resolve().parent


# ---------------------------------------------------------------------------
# Memory of a process tree


def gpu_used_by(pids):
    """Bytes of device memory nvidia-smi lists for these pids (None where
    nvidia-smi is missing or lists no process: in a container it may see
    none)."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    total, seen = 0, False
    for line in r.stdout.splitlines():
        try:
            pid, mib = (int(x.strip()) for x in line.split(",")[:2])
        except ValueError:
            continue
        if pid in pids:
            total, seen = total + mib * 2**20, True
    return total if seen else None


class Watch:
    """Polls a process and its descendants: peak summed PSS (RSS where PSS
    cannot be read), peak summed RSS, and peak device memory, every
    `interval` seconds (nvidia-smi every 0.5 s)."""

    def __init__(self, pid, device, interval=0.05):
        self.pid, self.device, self.interval = pid, device, interval
        self.peak = {"host_pss_bytes": 0, "host_rss_bytes": 0, "device_bytes": None, "processes": 0}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        try:
            import psutil
        except ImportError:
            self.peak["error"] = "no psutil: memory not measured"
            return
        last_gpu = 0.0
        while not self.stop.is_set():
            try:
                root = psutil.Process(self.pid)
                procs = [root] + root.children(recursive=True)
            except psutil.Error:
                break
            pss = rss = 0
            for p in procs:
                try:
                    m = p.memory_full_info()  # reads smaps: may be refused or missing (gVisor)
                    rss += m.rss
                    pss += m.pss
                except Exception:  # noqa: BLE001 - any failure falls back to RSS, counted as such
                    try:
                        r = p.memory_info().rss
                    except psutil.Error:
                        continue
                    rss += r
                    pss += r
                    self.peak["pss_fell_back_to_rss"] = True
            pk = self.peak
            pk["host_pss_bytes"] = max(pk["host_pss_bytes"], pss)
            pk["host_rss_bytes"] = max(pk["host_rss_bytes"], rss)
            pk["processes"] = max(pk["processes"], len(procs))
            now = time.perf_counter()
            if self.device.startswith("cuda") and now - last_gpu >= 0.5:
                last_gpu = now
                g = gpu_used_by({p.pid for p in procs})
                if g is not None:
                    pk["device_bytes"] = max(pk["device_bytes"] or 0, g)
            self.stop.wait(self.interval)

    def finish(self):
        self.stop.set()
        self.thread.join()
        return self.peak


# ---------------------------------------------------------------------------
# Masks


def read_mask(path):
    import tifffile
    with tifffile.TiffFile(str(path)) as tf:
        return tf.pages[0].asarray()


def compare(a_path, b_path, classes, patches=None):
    """Pixel agreement and per-class Dice of mask A against mask B (their
    level 0), inside the given grid patches (all pixels where None)."""
    import numpy as np
    a, b = read_mask(a_path), read_mask(b_path)
    out = {"a": str(a_path), "b": str(b_path), "shape_a": list(a.shape), "shape_b": list(b.shape)}
    if a.shape != b.shape:
        out["error"] = f"shapes differ: {a.shape} vs {b.shape}"
        return out
    out["agreement_all"] = float(np.count_nonzero(a == b)) / a.size
    if patches is not None:
        sel = np.zeros(a.shape, bool)
        n = config.ROI
        for r, c in patches:
            sel[r * n:(r + 1) * n, c * n:(c + 1) * n] = True
        a, b = a[sel], b[sel]
    out["pixels_compared"] = int(a.size)
    out["agreement"] = float(np.count_nonzero(a == b)) / max(a.size, 1)
    out["dice"] = dice(a, b, classes)
    return out


# ---------------------------------------------------------------------------



def build_report(a, paths, contenders, mem):
    slide = json.loads(paths.slide_json.read_text())
    model = json.loads(paths.model_json.read_text())
    name, driver = device_name(a.device)
    res = {"benchmark": "slide_vs_python", "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "host": platform.node(), "device": {"name": name, "driver": driver},
           "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
           "settings": {"device": a.device, "runs": a.runs, "warmup": a.warmup, "batch": a.batch,
                        "loader_workers": a.loader_workers, "roi": config.ROI, "overlap": config.OVERLAP,
                        "mpp": config.MPP, "precision": "fp16" if a.device.startswith("cuda") else "fp32 (cpu)",
                        "tissue": f"Otsu on HSV saturation at the lowest level of downsample <= "
                                  f"{config.TISSUE_MAX_DOWNSAMPLE}; a patch where "
                                  + ("any footprint pixel is tissue" if config.TISSUE_MIN_SHARE <= 0 else
                                     f"> {config.TISSUE_MIN_SHARE:g} of its footprint is tissue"),
                        "timing": "wall clock, slide on disk to mask on disk, model load included; Python "
                                  "contenders' runs in one process (imports and CUDA context outside), segrt a "
                                  "new process a run",
                        "memory": "host: peak of the summed PSS of the contender's process tree (the harness' "
                                  "own Python process included, ~30 MB); device: nvidia-smi's per-process "
                                  "memory, polled every 0.5 s",
                        "not_timed": "making the slide and the model",
                        "targets": {"patches_per_s": TARGET_PATCHES_PER_S, "speedup": TARGET_SPEEDUP,
                                    "host_bytes": TARGET_HOST_BYTES}},
           "slide": slide, "model": {k: model.get(k) for k in ("parameters", "classes", "roi", "mpp", "overlap",
                                                                "onnx_bytes", "metadata", "training",
                                                                "decisiveness")},
           "contenders": {}, "comparisons": {}, "speedups": {}}
    ref_patches = None
    for c in contenders:
        f = paths.worker_json(c)
        if not f.exists():
            res["contenders"][c] = {"error": "not run"}
            continue
        w = json.loads(f.read_text())
        entry = {k: w.get(k) for k in ("error", "process_init_s", "versions", "batch", "mask_file",
                                       "stopped_by_max_seconds")}
        entry["first_run"] = w.get("first_run")
        entry["summary"] = summary(w)
        entry["memory"] = mem.get(c)
        if w.get("runs"):
            last = w["runs"][-1]
            for k in ("patches", "grid", "mask_shape", "tissue", "torch_max_memory_allocated"):
                if k in last:
                    entry[k] = last[k]
        res["contenders"][c] = {k: v for k, v in entry.items() if v is not None}
    ok = {c for c, e in res["contenders"].items() if e.get("summary") and "error" not in e}
    n_ref = res["contenders"].get(REFERENCE, {}).get("patches")
    for c in ok:
        e = res["contenders"][c]
        n = e.get("patches", n_ref)
        if n:
            e["patches_per_s"] = n / e["summary"]["median_s"]
            e["patches_counted_by"] = c if "patches" in e else REFERENCE
    if REFERENCE in ok and paths.patches_file(REFERENCE).exists():
        import numpy as np
        ref_patches = np.load(paths.patches_file(REFERENCE)).tolist()
    for c in contenders:
        if c != REFERENCE and c in ok and REFERENCE in ok:
            key = f"{c}_vs_{REFERENCE}"
            try:
                res["comparisons"][key] = compare(paths.mask_file(c), paths.mask_file(REFERENCE),
                                                  model["classes"], ref_patches)
            except Exception as e:  # noqa: BLE001
                res["comparisons"][key] = {"error": f"{type(e).__name__}: {e}"}
    if "segrt" in ok:
        e = res["contenders"]["segrt"]
        sv = e["summary"]["median_s"]
        host = (e.get("memory") or {}).get("host_pss_bytes")
        e["targets_met"] = {"patches_per_s": e.get("patches_per_s", 0) >= TARGET_PATCHES_PER_S,
                            "host_bytes": None if host is None else host <= TARGET_HOST_BYTES}
        for other in contenders:
            if other == "segrt" or other not in ok:
                continue
            sp = res["contenders"][other]["summary"]["median_s"] / sv
            entry = {"speedup": sp, "target_met": sp >= TARGET_SPEEDUP}
            cmp_ = res["comparisons"].get("segrt_vs_" + other) or res["comparisons"].get(f"{other}_vs_segrt")
            if cmp_ and "agreement" in cmp_:
                entry["agreement"] = cmp_["agreement"]
            res["speedups"][f"segrt_vs_{other}"] = entry
    return res


def gib(b):
    return "" if b is None else f"{b / 2**30:.2f}"


def table(res):
    sl, m = res["slide"], res["model"]
    lines = [f"slide_vs_python on {res['device']['name']} ({res['date']}): slide {sl['size']}x{sl['size']} at "
             f"{sl['mpp']} um/px ({sl['bytes'] / 2**20:.0f} MiB, tissue {100 * sl['tissue_share_field']:.0f} %), "
             f"patches {m['roi']}^2 at {m['mpp']} um/px, overlap {m['overlap']:g}, UNet/ResNet-34 "
             f"{m['parameters'] / 1e6:.1f} M parameters, {m['classes']} classes, batch {res['settings']['batch']}, "
             f"{res['settings']['precision']}"]
    lines.append("")
    lines.append("| contender | median s | min-max s | patches | patches/s | host GiB (PSS) | device GiB | "
                 "where the time goes (median s) |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---|")
    for c, e in res["contenders"].items():
        sm = e.get("summary")
        if not sm or "error" in e:
            err = [x for x in str(e.get("error", "no runs")).splitlines() if x.strip()] or ["?"]
            lines.append(f"| {c} | failed: {' / '.join(err[-2:])[:160]} | | | | | | |")
            continue
        mem = e.get("memory") or {}
        dev = mem.get("device_bytes")
        if dev is None:
            dev = e.get("torch_max_memory_allocated")
        parts = ", ".join(f"{k} {v:.2f}" for k, v in sm["parts_median_s"].items())
        lines.append(f"| {c} | {sm['median_s']:.2f} | {sm['min_s']:.2f}-{sm['max_s']:.2f} | {e.get('patches', '')} | "
                     f"{e.get('patches_per_s', 0):.0f} | {gib(mem.get('host_pss_bytes'))} | {gib(dev)} | {parts} |")
    if res["speedups"]:
        lines.append("")
        lines.append(f"| segrt vs | speed-up (target {TARGET_SPEEDUP:g}x) | mask agreement |")
        lines.append("|---|---:|---:|")
        for k, e in res["speedups"].items():
            ag = f"{100 * e['agreement']:.3f} %" if "agreement" in e else ""
            lines.append(f"| {k.replace('segrt_vs_', '')} | {e['speedup']:.2f}x {'ok' if e['target_met'] else 'MISSED'}"
                         f" | {ag} |")
    for k, c in res["comparisons"].items():
        if "error" in c:
            lines.append(f"{k}: {c['error'].splitlines()[0]}")
        else:
            worst = sorted(c["dice"].items(), key=lambda kv: kv[1])[:3]
            lines.append(f"{k}: agreement {100 * c['agreement']:.3f} % of {c['pixels_compared']} pixels in the "
                         f"reference's patches ({100 * c['agreement_all']:.3f} % of the whole mask), lowest Dice "
                         + ", ".join(f"class {cl} {d:.4f}" for cl, d in worst))
    seg = res["contenders"].get("segrt", {})
    if "targets_met" in seg:
        t = seg["targets_met"]
        lines.append(f"segrt targets: >= {TARGET_PATCHES_PER_S:g} patches/s "
                     f"{'ok' if t['patches_per_s'] else 'MISSED'}; host <= {TARGET_HOST_BYTES / 2**30:g} GiB "
                     f"{'?' if t['host_bytes'] is None else ('ok' if t['host_bytes'] else 'MISSED')}")
    return "\n".join(lines)


def inputs_match(paths, size):
    try:
        slide = json.loads(paths.slide_json.read_text())
        model = json.loads(paths.model_json.read_text())
    except (OSError, ValueError):
        return False
    return (slide.get("size") == size and model.get("slide_size") == size and paths.slide.exists()
            and paths.onnx.exists() and paths.torch_weights.exists())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--contenders", default=",".join(DEFAULT_CONTENDERS))
    ap.add_argument("--segrt", default=str(config.ROOT / "build"), help="segrt's build folder or binary")
    ap.add_argument("--segrt-cache", default=None, help="XDG_CACHE_HOME for segrt's plan cache")
    ap.add_argument("--small", action="store_true", help=f"a {config.SIZE_SMALL}^2 slide, for a CPU")
    ap.add_argument("--size", type=int, default=None, help=f"the slide's side in pixels (default {config.SIZE})")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--batch", type=int, default=config.BATCH)
    ap.add_argument("--loader-workers", type=int, default=config.LOADER_WORKERS)
    ap.add_argument("--precision", default="fp16", help="segrt's --precision on CUDA")
    ap.add_argument("--steps", type=int, default=None,
                    help=f"make_model's training steps (default {config.TRAIN_STEPS}; 2 with --device cpu)")
    ap.add_argument("--work", default=None)
    ap.add_argument("--remake", action="store_true")
    ap.add_argument("--python", default=sys.executable, help="interpreter of the Python contenders")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds this call may take: each contender gets an even share of what is left")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    size = a.size or (config.SIZE_SMALL if a.small else config.SIZE)
    contenders = [c for c in a.contenders.split(",") if c]
    import contenders as cmod
    bad = [c for c in contenders if c not in cmod.ALL]
    if bad:
        ap.error(f"unknown contenders {bad}; known: {', '.join(cmod.ALL)}")
    paths = config.Paths(config.default_work_dir(size != config.SIZE) if a.work is None else pathlib.Path(a.work))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    mem_file = paths.work / "out" / "memory.json"
    mem = json.loads(mem_file.read_text()) if mem_file.exists() else {}
    if not a.report_only:
        if a.remake or not inputs_match(paths, size):
            import make_model
            import make_slide
            paths.work.mkdir(parents=True, exist_ok=True)
            info = make_slide.write_slide(paths.slide, size, config.SEED, log=log)
            paths.slide_json.write_text(json.dumps(info, indent=1) + "\n")
            steps = a.steps
            if steps is None and not a.device.startswith("cuda"):
                # A training step of batch 16 takes ~15 s on a small CPU: a smoke test trains for show only.
                steps = 2
            make_model.make(info, paths, steps, device=None if a.device.startswith("cuda") else "cpu", log=log)
        else:
            log(f"slide and model in {paths.work} reused (--remake to make them again)")
        for i, c in enumerate(contenders):
            paths.worker_json(c).unlink(missing_ok=True)
            share = None
            if a.budget is not None:
                share = max((a.budget - (time.perf_counter() - T0) - 20) / (len(contenders) - i), 1.0)
            argv_c = [a.python if c in cmod.PYTHON_CONTENDERS else sys.executable, str(HERE / "contenders.py"), c,
                      "--work", str(paths.work), "--device", a.device, "--runs", str(a.runs),
                      "--warmup", str(a.warmup), "--segrt", a.segrt, "--precision", a.precision,
                      "--batch", str(a.batch), "--loader-workers", str(a.loader_workers)] \
                + (["--segrt-cache", a.segrt_cache] if a.segrt_cache else []) \
                + (["--max-seconds", f"{share:.0f}"] if share is not None else [])
            log(f"== {c}" + ("" if share is None else f" (at most {share:.0f} s)"))
            p = subprocess.Popen(argv_c, env=env)
            w = Watch(p.pid, a.device)
            p.wait()
            mem[c] = w.finish()
            mem_file.parent.mkdir(parents=True, exist_ok=True)
            mem_file.write_text(json.dumps(mem, indent=1) + "\n")
    res = build_report(a, paths, contenders, mem)
    if a.out is None:
        a.out = str(config.ROOT / "bench" / "results" / (f"slide_vs_python-{slug(res['device']['name'])}-"
                                                         f"{datetime.date.today().isoformat()}"
                                                         + ("" if size == config.SIZE else f"-{size}") + ".json"))
    out = pathlib.Path(a.out)
    write_json(out, res)
    print(table(res), flush=True)
    log(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
