#!/usr/bin/env python3
"""bench/many_classes: 101 classes over a 400 x 512 x 512 image with a
TotalSegmentator-class 3-D network, segrt without a device budget and under
--max-memory 4G, with float32 and float16 accumulators (issue 39, item 5:
the budgeted job at most 1.5x the time of the same job without a budget).

    python3 run.py --segrt BUILD_DIR|BINARY [--configs 1,2,3,4] [--runs K] [--warmup N] [--warmup-each]
        [--tiny] [--device cuda|cpu] [--sw-batch B] [--max-memory 4G] [--extra "ARGS"]
        [--work DIR] [--cache-dir DIR] [--remake] [--budget SECONDS] [--no-smi]
        [--out FILE.json] [--report-only [FILE.json]]

Steps: make_case.py and make_model.py (skipped where WORK already holds
them for this setup and seed, unless --remake; not timed), then each
configuration in turn, a new `segrt run` process a run: --warmup untimed runs
of the first configuration (default 1: it builds the plan into --cache-dir,
which every later run loads; --warmup-each: of every configuration), then
--runs timed ones of each (default 5), wall clock from the process's start to
its exit, and the summary segrt prints (its job time, windows, passes,
device memory; a field segrt does not print is null). The labels of each
configuration's last run are compared voxel by voxel with the reference's
(configuration 1). FLOPs: Conv and ConvTranspose of one window counted from
the ONNX graph (bench/gpu_vs_pytorch.py's counter) times the windows segrt
reports, over the median times, against the H200's dense FP16 peak (989.5
TFLOP/s). The JSON goes to bench/results/many_classes-<device>-<date>[-tiny].json
(or --out) and a table is printed.

Configurations (common: --device cuda --precision fp16 --roi 128,128,128
--overlap 0.5 --blend gaussian --output labels --sw-batch B --cache-dir DIR):
  1 nobudget_fp32     (the reference)
  2 nobudget_fp16acc  --accumulator fp16
  3 budget_fp16acc    --max-memory 4G --accumulator fp16
  4 budget_fp32       --max-memory 4G
On a CPU (--tiny's dry run) the CUDA-only flags are left out.

--report-only rebuilds the JSON and table from the per-configuration records
in WORK/out (a run split over several calls: --configs 1,2 in one, 3,4 in the
next); --report-only FILE.json only prints FILE's table.
"""
import argparse
import datetime
import json
import math
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import make_case  # noqa: E402
import make_model  # noqa: E402

T0 = time.perf_counter()
REPORT_RESERVE_S = 20.0  # of --budget, kept for the comparison and the report


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------
# segrt's summary lines, e.g. (tools/cli_sw.c's print_summary)
#   segrt: IN 1x1x400x512x512 -> OUT uint8 1x1x400x512x512: 294 windows (2 a run), cuda:0 fp16, 4.321 s,
#          blended on the GPU in 1 pass, device memory 3900.00 MiB (networks 1200.00 + windows 2700.00),
#          4 strips (shared sums: 812.00 MiB of host memory)
#   segrt: host time: setup 0.100 s, windows 3.900 s (copying image rows 0.2, waiting for the GPU 3.1, result out 0.4)
# (strips only where there are more than one, since main's 040f701). Each
# field is looked for on its own, among alternatives, so that a field segrt
# does not print (strips, "held") is null, not an error.

_N = r"([0-9]+(?:\.[0-9]*)?)"
SUMMARY_FIELDS = {
    "windows": [r"\b(\d+) windows \("],
    "batch": [r"\((\d+) a run\)"],
    "job_s": [r" a run\), [^,\n]*, " + _N + r" s\b"],
    "passes": [r"\bin (\d+) pass(?:es)?\b", r"\bpasses:? (\d+)\b"],
    "strips": [r"\b(\d+) strips?\b", r"\bstrips:? (\d+)\b"],
    "held_mib": [r"\bheld:? " + _N + r" ?(MiB|GiB)\b"],
    "device_mib": [r"\bdevice memory:? " + _N + r" ?(MiB|GiB)\b"],
    "networks_mib": [r"\(networks " + _N],
    "shared_host_mib": [r"\bshared sums:? " + _N + r" ?(MiB|GiB)\b"],
    "accumulators_mib": [r"\baccumulators:? " + _N + r" ?(MiB|GiB)\b", r"\baccumulators " + _N + r"\b"],
    "host_setup_s": [r"\bsetup " + _N + r" s\b"],
    "host_windows_s": [r"\bsetup [0-9.]+ s, windows " + _N + r" s\b"],
    "host_upload_s": [r"\bcopying image rows " + _N],
    "host_wait_s": [r"\bwaiting for the GPU " + _N],
    "host_download_s": [r"\bresult out " + _N],
}
INT_FIELDS = {"windows", "batch", "passes", "strips"}


def parse_summary(text):
    """The fields of segrt's summary lines (those starting "segrt:") in
    `text`; None for each one not found; the lines themselves as
    summary_lines. Sizes in GiB are given in MiB."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip().startswith("segrt:")]
    joined = "\n".join(lines)
    out = {}
    for key, patterns in SUMMARY_FIELDS.items():
        value = None
        for rx in patterns:
            m = re.search(rx, joined)
            if m:
                try:
                    value = float(m.group(1))
                except ValueError:
                    continue
                if key in INT_FIELDS:
                    value = int(value)
                elif m.lastindex and m.lastindex > 1 and m.group(2) == "GiB":
                    value *= 1024.0
                break
        out[key] = value
    out["summary_lines"] = lines
    return out


# ---------------------------------------------------------------------------
# Device memory as nvidia-smi sees it: the GPU's used memory sampled every
# 100 ms while a run lasts, less what was used before it started. It counts
# what segrt's own figure does not (the CUDA context, cuDNN's and the
# driver's allocations), so it is the budget as the GPU sees it.


def smi_used_mib(index):
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i",
                            str(index)], capture_output=True, text=True, timeout=20)
        return float(r.stdout.strip().splitlines()[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


class SmiPeak:
    def __init__(self, index):
        self.index, self.peak, self.proc, self.thread = index, None, None, None

    def __enter__(self):
        try:
            self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                                          "-i", str(self.index), "-lms", "100"], stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.proc = None
            return self
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        return self

    def _read(self):
        for line in self.proc.stdout:
            try:
                v = float(line.strip())
            except ValueError:
                continue
            self.peak = v if self.peak is None else max(self.peak, v)

    def __exit__(self, *exc):
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.thread.join(timeout=5)
        return False


# ---------------------------------------------------------------------------
# Runs


def find_segrt(arg):
    p = pathlib.Path(arg)
    if p.is_dir():
        p = p / "segrt"
    if not p.is_file():
        raise SystemExit(f"run.py: no segrt binary at {p}")
    return p.resolve()


def cuda_index(device):
    if not device.startswith("cuda"):
        return None
    return int(device.split(":", 1)[1]) if ":" in device else 0


def run_once(argv, timeout, smi_index):
    """One segrt process: wall seconds, exit code, its summary's fields, the
    nvidia-smi peak above the memory used before it (smi_index not None)."""
    base = smi_used_mib(smi_index) if smi_index is not None else None
    smi = SmiPeak(smi_index) if base is not None else None
    rec = {}
    if smi:
        smi.__enter__()
    t0 = time.perf_counter()
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        rec["wall_s"] = time.perf_counter() - t0
        rec["rc"] = r.returncode
        rec.update(parse_summary(r.stdout))
        if r.returncode != 0:
            rec["error"] = f"exit {r.returncode}: " + ((r.stderr or "") + (r.stdout or "")).strip()[-1500:]
    except subprocess.TimeoutExpired:
        rec["wall_s"] = time.perf_counter() - t0
        rec["error"] = f"killed after {timeout:.0f} s (the --budget's time ran out)"
    finally:
        if smi:
            smi.__exit__(None, None, None)
    if smi and smi.peak is not None:
        rec["smi_before_mib"] = base
        rec["smi_peak_mib"] = smi.peak - base
    return rec


def write_json(path, obj):
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    tmp.replace(path)


def run_config(config, a, paths, s, left, deadline, warmup, prev_wall=0.0):
    """`warmup` then --runs runs of one configuration; its record (also
    written to WORK/out/CONFIG.json after each run, so that a call cut short
    leaves what it measured). With a deadline (--budget), the timed runs get
    an even share of the time left after the warm-ups among the `left`
    configurations still to run (this one included), so that the first
    warm-up's plan build is not charged to the reference alone: they stop
    where the next would pass it (after one at least), and every run at the
    deadline."""
    argv = common.segrt_command(config, a.segrt, paths, s, a.device, a.precision, a.sw_batch, a.cache_dir,
                                a.max_memory) + a.extra
    rec = {"config": config, "argv": [str(x) for x in argv], "warmup": [], "runs": []}
    paths.labels(config).unlink(missing_ok=True)
    t_start = share = None
    for i in range(warmup + a.runs):
        warm = i < warmup
        now = time.perf_counter()
        if not warm and t_start is None:
            t_start = now
            if deadline is not None:
                share = max((deadline - now) / left, 1.0)
                rec["share_s"] = share
        last = (rec["runs"] or rec["warmup"] or [{"wall_s": prev_wall}])[-1].get("wall_s", 0.0)
        if not warm and rec["runs"] and share is not None and now - t_start + last > share:
            rec["stopped"] = f"after {len(rec['runs'])} timed runs: its share of --budget ({share:.0f} s)"
            break
        timeout = None if deadline is None else deadline - now
        if timeout is not None and timeout < max(1.0, last):  # it would be killed before its end
            rec["stopped"] = "the --budget's time ran out"
            break
        r = run_once(argv, timeout, a.smi_index)
        (rec["warmup"] if warm else rec["runs"]).append(r)
        write_json(paths.record(config), rec)
        what = "warm-up" if warm else f"run {len(rec['runs'])}/{a.runs}"
        if "error" in r:
            log(f"{config} {what}: FAILED after {r['wall_s']:.1f} s: {r['error'].splitlines()[-1][:300]}")
            rec["error"] = r["error"]
            break
        log(f"{config} {what}: {r['wall_s']:.2f} s wall, job {fmt(r.get('job_s'), '.2f')} s, "
            f"passes {fmt(r.get('passes'))}, strips {fmt(r.get('strips'))}, device "
            f"{fmt(r.get('held_mib') if r.get('held_mib') is not None else r.get('device_mib'), '.0f')} MiB"
            + ("" if r.get("smi_peak_mib") is None else f" (nvidia-smi {r['smi_peak_mib']:.0f} MiB)"))
    write_json(paths.record(config), rec)
    return rec


# ---------------------------------------------------------------------------
# Labels, windows, FLOPs


def agreement(ref_path, path, chunk=1 << 24):
    """Fraction of voxels whose labels are equal in two .npy label maps (None
    where either is missing or the shapes differ, with the reason)."""
    import numpy as np
    try:
        ref = np.load(ref_path, mmap_mode="r")
        out = np.load(path, mmap_mode="r")
    except (OSError, ValueError) as e:
        return None, f"{type(e).__name__}: {e}"
    if ref.shape != out.shape:
        return None, f"shapes differ: {ref.shape} vs {out.shape}"
    r, o = ref.reshape(-1), out.reshape(-1)
    equal = 0
    for i in range(0, r.size, chunk):
        equal += int(np.count_nonzero(r[i:i + chunk] == o[i:i + chunk]))
    return equal / max(r.size, 1), None


def label_census(path, classes):
    """How many classes the labels use and the largest one's share: a
    benchmark whose labels were one class would compare nothing."""
    import numpy as np
    try:
        lab = np.load(path, mmap_mode="r").reshape(-1)
    except (OSError, ValueError):
        return None
    counts = np.zeros(classes, np.int64)
    for i in range(0, lab.size, 1 << 24):
        counts += np.bincount(np.asarray(lab[i:i + (1 << 24)], np.int64), minlength=classes)[:classes]
    return {"classes_present": int(np.count_nonzero(counts)), "largest_class": int(counts.argmax()),
            "largest_class_share": float(counts.max() / max(lab.size, 1))}


def monai_grid_windows(shape, roi, overlap):
    """Windows of segrt's default (MONAI's) grid: steps of int(roi * (1 -
    overlap)), the last window pulled back inside."""
    n = 1
    for size, r in zip(shape, roi):
        step = max(int(r * (1 - overlap)), 1)
        n *= 1 if size <= r else math.ceil((size - r) / step) + 1
    return n


def flops_per_window(onnx_path, roi):
    """Conv and ConvTranspose FLOPs (2 x multiply-adds) of one window:
    (total, by op), or (None, reason)."""
    try:
        import onnx
        sys.path.insert(0, str(common.ROOT / "bench"))
        import gpu_vs_pytorch as gvp
        m = onnx.load(str(onnx_path))
        f = gvp.graph_flops(m, {m.graph.input[0].name: (1, 1) + tuple(roi)})
        return f["total"], f["by_op"]
    except Exception as e:  # noqa: BLE001 - the times still count
        return None, f"{type(e).__name__}: {e}"


def device_name(device):
    if not device.startswith("cuda"):
        return f"cpu-{platform.machine()}", None
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader", "-i",
                            str(cuda_index(device))], capture_output=True, text=True, timeout=30)
        name, driver = [x.strip() for x in r.stdout.strip().splitlines()[0].split(",")[:2]]
        return name, driver
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return "cuda", None


def slug(name):
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "device"


def fmt(v, spec=""):
    return "null" if v is None else format(v, spec)


# ---------------------------------------------------------------------------
# The report


def median_of(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def max_of(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return max(vals) if vals else None


def last_of(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return vals[-1] if vals else None


def summarise(rec):
    runs = [r for r in rec.get("runs", []) if "error" not in r]
    out = {"argv": rec.get("argv"), "timed_runs": len(runs)}
    for k in ("error", "stopped"):
        if rec.get(k):
            out[k] = rec[k]
    if rec.get("warmup"):
        out["first_run_s"] = rec["warmup"][0].get("wall_s")
    if not runs:
        return out
    walls = [r["wall_s"] for r in runs]
    out.update({"walls_s": walls, "median_wall_s": statistics.median(walls), "min_wall_s": min(walls),
                "job_s": [r.get("job_s") for r in runs], "median_job_s": median_of(runs, "job_s"),
                "min_job_s": min([r["job_s"] for r in runs if r.get("job_s") is not None], default=None)})
    held = max_of(runs, "held_mib")
    out["held_mib"] = held if held is not None else max_of(runs, "device_mib")
    out["held_mib_from"] = "held" if held is not None else ("device memory" if out["held_mib"] is not None
                                                             else None)
    for k in ("device_mib", "networks_mib", "accumulators_mib", "shared_host_mib", "smi_peak_mib"):
        out[k] = max_of(runs, k)
    for k in ("windows", "batch", "passes", "strips"):
        out[k] = last_of(runs, k)
    for k in ("host_setup_s", "host_windows_s", "host_upload_s", "host_wait_s", "host_download_s"):
        out[k + "_median"] = median_of(runs, k)
    out["summary_lines"] = runs[-1].get("summary_lines")
    return out


def build_report(a, paths, s, configs):
    case = json.loads(paths.case_json.read_text()) if paths.case_json.is_file() else None
    model = json.loads(paths.model_json.read_text()) if paths.model_json.is_file() else None
    fpw, by_op = flops_per_window(paths.onnx, s.roi_zyx)
    expected = monai_grid_windows(s.shape_zyx, s.roi_zyx, common.OVERLAP)
    name, driver = device_name(a.device)
    cuda = a.device.startswith("cuda")
    res = {"benchmark": "many_classes", "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "host": platform.node(), "device": {"name": name, "driver": driver},
           "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
           "settings": {"setup": s.name, "device": a.device, "precision": a.precision if cuda else "fp32 (cpu)",
                        "roi_zyx": list(s.roi_zyx), "overlap": common.OVERLAP, "blend": "gaussian",
                        "output": "labels", "sw_batch": a.sw_batch, "max_memory": a.max_memory, "extra": a.extra,
                        "runs": a.runs, "warmup": a.warmup, "warmup_each": bool(getattr(a, "warmup_each", False)),
                        "budget_s": a.budget, "cache_dir": str(a.cache_dir),
                        "timing": "wall clock of a new `segrt run` process a run (start-up, plan load from the "
                                  "cache, reading the .npy, the windows, writing the labels); job_s is the time "
                                  "segrt's summary line reports for the job",
                        "reference": common.REFERENCE, "target_ratio": common.TARGET_RATIO,
                        "fp16_dense_ceiling_tflops": common.H200_FP16_DENSE_TFLOPS if cuda else None},
           "case": case, "model": model,
           "flops": {"per_window": fpw if isinstance(fpw, (int, float)) else None,
                     "by_op": by_op if isinstance(by_op, dict) else None,
                     **({} if fpw is not None else {"error": by_op}),
                     "windows_expected": expected,
                     "per_window_from_architecture": None if s.name == "tiny" else common.plain_unet_flops(s)},
           "configs": {}}
    refpath = paths.labels(common.REFERENCE)
    res["reference_labels"] = label_census(refpath, s.classes)
    ref = None
    for c in configs:
        f = paths.record(c)
        if not f.is_file():
            res["configs"][c] = {"error": "not run"}
            continue
        e = summarise(json.loads(f.read_text()))
        e["flags"] = " ".join(common.CONFIGS[c]).format(max_memory=a.max_memory) or "(none)"
        if not cuda and common.CONFIGS[c]:
            e["flags"] += " (left out on a CPU)"
        if c == common.REFERENCE:
            ref = e
        windows = e.get("windows") or expected
        if fpw and e.get("median_wall_s"):
            e["flops_total"] = fpw * windows
            e["tflops_wall"] = e["flops_total"] / e["median_wall_s"] / 1e12
            if e.get("median_job_s"):
                e["tflops_job"] = e["flops_total"] / e["median_job_s"] / 1e12
            if cuda:
                e["share_of_fp16_ceiling_wall"] = e["tflops_wall"] / common.H200_FP16_DENSE_TFLOPS
                if e.get("tflops_job"):
                    e["share_of_fp16_ceiling_job"] = e["tflops_job"] / common.H200_FP16_DENSE_TFLOPS
        if e.get("median_wall_s"):
            ag, why = agreement(refpath, paths.labels(c))
            e["agreement"] = ag
            if why:
                e["agreement_error"] = why
        res["configs"][c] = e
    for c, e in res["configs"].items():
        if ref and ref.get("median_wall_s") and e.get("median_wall_s"):
            e["ratio_wall"] = e["median_wall_s"] / ref["median_wall_s"]
            if ref.get("median_job_s") and e.get("median_job_s"):
                e["ratio_job"] = e["median_job_s"] / ref["median_job_s"]
            if "--max-memory" in common.CONFIGS[c] and cuda:
                e["target_met"] = e["ratio_wall"] <= common.TARGET_RATIO
        # The same accumulators without the budget: the budget's own cost.
        same = {"budget_fp16acc": "nobudget_fp16acc", "budget_fp32": "nobudget_fp32"}.get(c)
        other = res["configs"].get(same, {})
        if other.get("median_wall_s") and e.get("median_wall_s"):
            e["ratio_wall_same_accumulator"] = e["median_wall_s"] / other["median_wall_s"]
    return res


def table(res):
    st = res["settings"]
    fl = res.get("flops") or {}
    case = res.get("case") or {}
    model = res.get("model") or {}
    lines = [f"many_classes on {res['device']['name']} ({res['date']}), setup {st['setup']}: image "
             f"{'x'.join(map(str, case.get('shape', [])))}, {model.get('classes')} classes, "
             f"{(model.get('parameters') or 0) / 1e6:.1f} M parameters, window {'x'.join(map(str, st['roi_zyx']))}, "
             f"overlap {st['overlap']:g}, {st['precision']}, --sw-batch {st['sw_batch']}"
             + (f", extra {' '.join(st['extra'])}" if st.get("extra") else "")]
    if fl.get("per_window"):
        lines.append(f"network: {fl['per_window'] / 1e9:.4g} GFLOP a window x {fl['windows_expected']} windows "
                     f"(MONAI grid) = {fl['per_window'] * fl['windows_expected'] / 1e12:.4g} TFLOP"
                     + (f"; FP16 dense ceiling {st['fp16_dense_ceiling_tflops']:g} TFLOP/s"
                        if st.get("fp16_dense_ceiling_tflops") else ""))
    rl = res.get("reference_labels")
    if rl:
        lines.append(f"reference labels: {rl['classes_present']} classes present, the largest (class "
                     f"{rl['largest_class']}) {100 * rl['largest_class_share']:.1f} % of voxels")
    lines += ["", "| # | configuration | flags | median wall s | min wall s | median job s | ratio to 1 (wall, job) "
                  "| held MiB | nvidia-smi MiB | passes / strips | agreement with 1 | TFLOP/s (job) "
                  "| % FP16 ceiling (job) |",
              "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    names = list(common.CONFIGS)
    for c, e in res["configs"].items():
        num = names.index(c) + 1 if c in names else "?"
        if not e.get("median_wall_s"):
            err = [x for x in str(e.get("error", "no timed run")).splitlines() if x.strip()] or ["?"]
            lines.append(f"| {num} | {c} | {e.get('flags', '')} | failed: {err[-1][:120]} | | | | | | | | | |")
            continue
        ratio = f"{e['ratio_wall']:.2f}x" if e.get("ratio_wall") is not None else ""
        if e.get("ratio_job") is not None:
            ratio += f", {e['ratio_job']:.2f}x"
        if "target_met" in e:
            ratio += " ok" if e["target_met"] else " MISSED"
        share = e.get("share_of_fp16_ceiling_job")
        ag = "null" if e.get("agreement") is None else f"{100 * e['agreement']:.4f} %"
        lines.append(
            f"| {num} | {c} | {e['flags']} | {e['median_wall_s']:.2f} | {e['min_wall_s']:.2f} | "
            f"{fmt(e.get('median_job_s'), '.2f')} | {ratio} | {fmt(e.get('held_mib'), '.0f')} | "
            f"{fmt(e.get('smi_peak_mib'), '.0f')} | {fmt(e.get('passes'))} / {fmt(e.get('strips'))} | "
            f"{ag} | "
            f"{fmt(e.get('tflops_job'), '.3g')} | {'' if share is None else f'{100 * share:.1f}'} |")
    for c, e in res["configs"].items():
        if e.get("error") and e.get("median_wall_s"):
            lines.append(f"{c}: a later run failed: {str(e['error']).splitlines()[-1][:200]}")
        if e.get("agreement_error"):
            lines.append(f"{c}: labels not compared: {e['agreement_error']}")
        if e.get("stopped"):
            lines.append(f"{c}: stopped {e['stopped']}")
    lines.append(f"target: configurations with --max-memory at most {common.TARGET_RATIO:g}x configuration 1's "
                 f"median wall time")
    return "\n".join(lines)


def setup_matches(paths, s, seed):
    return make_case.matches(paths, s, seed) and make_model.matches(paths, s, seed)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--segrt", default=str(common.ROOT / "build"), help="segrt's build folder or binary")
    ap.add_argument("--configs", default=",".join(common.CONFIGS),
                    help="comma list of configuration numbers (1-4) or names (default all)")
    ap.add_argument("--tiny", action="store_true", help="the CPU dry run: 40x64x64, window 32^3, a tiny network")
    ap.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default cuda; --tiny: cpu)")
    ap.add_argument("--precision", default="fp16", help="segrt's --precision on CUDA (default fp16)")
    ap.add_argument("--runs", type=int, default=None, help="timed runs per configuration (default 5; --tiny 1)")
    ap.add_argument("--warmup", type=int, default=1,
                    help="untimed runs of the first configuration, which build the plan (default 1)")
    ap.add_argument("--warmup-each", action="store_true", help="--warmup untimed runs of every configuration")
    ap.add_argument("--sw-batch", type=int, default=None, help="windows per network call (default 1)")
    ap.add_argument("--max-memory", default=common.MAX_MEMORY, help="the budget of configurations 3 and 4 (4G)")
    ap.add_argument("--extra", default="", help="more segrt flags for every configuration, one string")
    ap.add_argument("--work", default=None, help="work folder (default $MCBENCH_WORK or /tmp/many_classes[-tiny])")
    ap.add_argument("--cache-dir", default=str(common.HERE / ".cache"),
                    help="segrt's plan cache (default bench/many_classes/.cache)")
    ap.add_argument("--seed", type=int, default=common.SEED)
    ap.add_argument("--remake", action="store_true", help="make the case and model even where they exist")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds this whole call may take (e.g. 540 under the device tool's 600): each "
                         "configuration gets an even share of what is left, one timed run at least")
    ap.add_argument("--no-smi", action="store_true", help="do not sample nvidia-smi's used memory during runs")
    ap.add_argument("--out", default=None, help="JSON file (default bench/results/many_classes-<device>-<date>"
                                                "[-tiny].json)")
    ap.add_argument("--report-only", nargs="?", const="", default=None, metavar="FILE.json",
                    help="rebuild the report from WORK's records without running; with FILE, print its table")
    a = ap.parse_args(argv)
    if a.report_only:
        print(table(json.loads(pathlib.Path(a.report_only).read_text())), flush=True)
        return 0
    s = common.setup(a.tiny)
    a.device = a.device or ("cpu" if a.tiny else "cuda")
    a.runs = s.runs if a.runs is None else a.runs
    a.sw_batch = a.sw_batch or s.sw_batch
    a.extra = a.extra.split()
    a.cache_dir = pathlib.Path(a.cache_dir)
    a.smi_index = None if a.no_smi else cuda_index(a.device)
    try:
        configs = common.resolve_configs(a.configs)
    except ValueError as e:
        ap.error(str(e))
    paths = common.Paths(common.default_work_dir(a.tiny) if a.work is None else pathlib.Path(a.work))
    if a.report_only is None:
        a.segrt = find_segrt(a.segrt)
        if a.remake or not setup_matches(paths, s, a.seed):
            make_case.make(paths, s, a.seed, log=log)
            make_model.make(paths, s, a.seed, log=log)
        else:
            log(f"case and model in {paths.work} reused (--remake to make them again)")
        if a.device.startswith("cuda"):
            a.cache_dir.mkdir(parents=True, exist_ok=True)
        paths.labels(configs[0]).parent.mkdir(parents=True, exist_ok=True)
        deadline = None if a.budget is None else T0 + a.budget - REPORT_RESERVE_S
        prev_wall = 0.0
        for i, c in enumerate(configs):
            paths.record(c).unlink(missing_ok=True)
            log(f"== {c}: {' '.join(common.CONFIGS[c]).format(max_memory=a.max_memory) or '(no flags)'}"
                + ("" if deadline is None else f" ({deadline - time.perf_counter():.0f} s left for "
                                                f"{len(configs) - i} configurations)"))
            rec = run_config(c, a, paths, s, len(configs) - i, deadline,
                             a.warmup if i == 0 or a.warmup_each else 0, prev_wall)
            prev_wall = max([r.get("wall_s", 0.0) for r in rec["runs"]] or [prev_wall])
    res = build_report(a, paths, s, configs)
    if a.out is None:
        a.out = str(common.ROOT / "bench" / "results" / (f"many_classes-{slug(res['device']['name'])}-"
                                                         f"{datetime.date.today().isoformat()}"
                                                         + ("-tiny" if a.tiny else "") + ".json"))
    write_json(a.out, res)
    print(table(res), flush=True)
    log(f"written to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
