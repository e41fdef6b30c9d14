"""What the end-to-end benchmarks (bench/volume_vs_monai, bench/slide_vs_python)
share: a contender per process, from files on disk to files on disk, its
runs logged and its result written as JSON; the device named in the
result's file name; label maps compared by agreement and Dice. Each
benchmark's own run.py and contenders.py put this folder on sys.path."""
import importlib.metadata
import json
import pathlib
import platform
import re
import shutil
import statistics
import subprocess
import time

import numpy as np


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def device_name(device):
    """(name, driver) of CUDA device 0 as nvidia-smi says, or the CPU's."""
    if not device.startswith("cuda"):
        return f"cpu-{platform.machine()}", None
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader", "-i", "0"],
                           capture_output=True, text=True, timeout=30)
        name, driver = [x.strip() for x in r.stdout.strip().split(",")[:2]]
        return name, driver
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return "cuda", None


def slug(name):
    """A device name for a file name: "NVIDIA H200" -> "h200"."""
    s = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return re.sub(r"^nvidia-", "", s) or "gpu"


def versions(mods):
    out = {"python": platform.python_version()}
    for m in mods:
        try:
            out[m] = importlib.metadata.version(m)
        except importlib.metadata.PackageNotFoundError:
            out[m] = None
    return out


def fresh_dir(d):
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)


def find_segrt(arg):
    """The segrt binary: arg itself, or arg/segrt for a build folder."""
    p = pathlib.Path(arg)
    if p.is_dir():
        p = p / "segrt"
    if not p.is_file():
        raise SystemExit(f"contenders: no segrt binary at {p}")
    return p.resolve()


def dice(a, b, classes):
    """Dice per class present in either label map (str(class) -> value)."""
    out = {}
    for c in range(classes):
        ma, mb = a == c, b == c
        na, nb = int(np.count_nonzero(ma)), int(np.count_nonzero(mb))
        if na + nb:
            out[str(c)] = 2.0 * int(np.count_nonzero(ma & mb)) / (na + nb)
    return out


def summary(worker):
    """A contender's timed runs: median, min, max of the walls, the median of
    each part, the first run's wall; None without a timed run."""
    walls = [r["wall_s"] for r in worker.get("runs", [])]
    if not walls:
        return None
    out = {"median_s": statistics.median(walls), "min_s": min(walls), "max_s": max(walls), "n": len(walls),
           "walls_s": walls}
    parts = {}
    for r in worker["runs"]:
        for k, v in r.get("parts_s", {}).items():
            parts.setdefault(k, []).append(v)
    out["parts_median_s"] = {k: statistics.median(v) for k, v in parts.items()}
    if "first_run" in worker:
        out["first_run_s"] = worker["first_run"]["wall_s"]
    return out


def write_json(path, obj):
    """obj as JSON at path, written to a temporary file and renamed."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    tmp.replace(path)
