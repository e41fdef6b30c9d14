"""The differential judgement the GPU case tests share (test_gpu_ops.py,
test_gpu_graphs.py): one generated case on the CPU engine and on the CUDA
engine at several precisions, compared as test_gpu_ops.py's docstring
says, with the measured figures gathered for a summary and for
$SEGRT_GPU_REPORT."""
import collections
import math
import os
import re
import time

import numpy as np
import pytest

import opgen
import segrt_capi as sc
from gpu_util import fmt_db, psnr, rel_l2, report, special_mismatch
from gpu_util import half as half_precisions

FP32_L2 = 1e-5
TF32_L2 = 5e-3
# Largest magnitude float16 holds is 65504; data beyond 6e4 (inputs or
# outputs) cannot go through fp16 activations.
HALF_RANGE = 6e4
HALF = ("fp16", "bf16")


def pick_cases(families, per_family):
    """opgen's cases of families: at most per_family each (SEGRT_GPU_SCALE
    multiplies), a deterministic spread over the family's range; all of
    them when SEGRT_DIFF_SEED chose them by hand."""
    ids = opgen.case_ids(families)
    if os.environ.get("SEGRT_DIFF_SEED", "").strip():
        return ids
    cap = max(1, round(per_family * float(os.environ.get("SEGRT_GPU_SCALE", "1"))))
    by_family = collections.defaultdict(list)
    for fam, seed in ids:
        by_family[fam].append(seed)
    out = []
    for fam in families:
        seeds = by_family.get(fam, [])
        if len(seeds) > cap:
            # Evenly spread over the family's range: the same cases every run.
            seeds = [seeds[(i * len(seeds)) // cap] for i in range(cap)]
        out += [(fam, s) for s in seeds]
    return out


def round_to(x, prec):
    """float32 data as fp16 or bf16 hold it (round to nearest even), back
    in float32."""
    x = np.asarray(x, np.float32)
    if prec == "fp16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(np.float32)
    b = x.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, r).astype(np.float32)


def run_engine(model, feeds, device, precision="fp32", threads=None, disabled=None):
    shapes = {k: v.shape for k, v in feeds.items()}
    with sc.BuildOptions(shapes=shapes, device=device, precision=precision, threads=threads,
                         disabled_kernels=disabled) as o, \
            sc.Engine.build(model, o) as e, e.context() as ctx:
        outs = ctx.run(feeds)
        if device != "cpu":
            info = e.info()
            assert info["fallback_steps"] == 0, f"{info['fallback_steps']} steps fell back to the CPU"
        return outs


def run_engine_without(model, feeds, device, precision, disabled):
    """run_engine with the kernels and fusions named in `disabled` turned
    off (comma-separated names of segrt_build_options_set_disabled_kernels,
    segrt's A/B switches; "": none)."""
    return run_engine(model, feeds, device, precision, disabled=disabled)


def paths_agree(onnx_model, feeds, label, disabled, what, agree_db):
    """Runs onnx_model at fp16 and bf16 as planned and with the kernels
    named in `disabled` turned off (what: the two paths, for the printout),
    and asserts that every output is finite and within agree_db[precision]
    dB PSNR of the other."""
    model = sc.Model.from_bytes(onnx_model, name=f"{label}.onnx")
    for prec in half_precisions():
        mine = run_engine(model, feeds, "cuda", prec)
        other = run_engine_without(model, feeds, "cuda", prec, disabled)
        for k, (a, b) in enumerate(zip(mine, other)):
            v = psnr(a, b)
            print(f"\n{label} {prec} output {k}: {what}: PSNR {fmt_db(v)}, {100 * float(np.mean(a == b)):.2f} % equal")
            assert np.isfinite(a).all() and v >= agree_db[prec], f"{label} {prec} output {k}: {what}: {fmt_db(v)}"


def bench_profile(onnx_model, feeds, tmp_path, precision="fp16", disabled=None):
    """`segrt bench --profile` of onnx_model at feeds' shapes (no autotune,
    no plan cache), with `--disable-kernels disabled` where given: its
    stdout, one row per step with the kernel's name."""
    import subprocess

    import onnx
    from conftest import SEGRT
    path = tmp_path / "profiled.onnx"
    onnx.save(onnx_model, str(path))
    shapes = [f"{k}=" + "x".join(str(d) for d in v.shape) for k, v in feeds.items()]
    p = subprocess.run([SEGRT, "bench", str(path), *[a for s in shapes for a in ("--shape", s)], "--device", "cuda",
                        "--precision", precision, "--iters", "2", "--warmup", "1", "--profile", "--autotune", "0",
                        "--no-cache", *(("--disable-kernels", disabled) if disabled else ())],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout


def cpu_too(msg):
    """Whether an UNSUPPORTED message says the CPU lacks the variant too."""
    return bool(re.search(r"CPU", msg) and re.search(r"\b(too|either|also|as well)\b", msg))


def max_abs_finite(arrays):
    m = 0.0
    for a in arrays:
        a = np.asarray(a)
        if a.dtype.kind == "f" and a.size:
            fin = np.abs(a[np.isfinite(a)].astype(np.float64))
            if fin.size:
                m = max(m, float(fin.max()))
    return m


def exact_mismatch(got, want):
    bad = np.flatnonzero(got.ravel() != want.ravel())
    if bad.size:
        i = int(bad[0])
        return (f"{bad.size} of {got.size} elements differ; first at flat index {i}: "
                f"got {got.ravel()[i]}, expected {want.ravel()[i]}")
    return None


class Tally:
    """Per precision: (label, what, measured, bound) of every comparison,
    the cases not compared and why, and the seconds spent; printed as the
    worst margin per precision at the end of a module (pytest -s)."""

    def __init__(self):
        self.stats = collections.defaultdict(list)
        self.not_compared = collections.defaultdict(list)
        self.seconds = collections.defaultdict(float)

    def print_summary(self, title, precisions):
        if not self.stats and not self.not_compared:
            return
        lines = ["", f"{title}, worst margin per precision (measured vs bound):"]
        for prec in ["cpu"] + list(precisions):
            rows = self.stats.get(prec, [])
            t = f"{self.seconds[prec]:.1f} s building and running"
            if not rows:
                lines.append(f"  {prec}: {t}")
                continue

            # Margin: how far inside the bound, in the measure's own units.
            def margin(r):
                _, what, v, b = r
                if what == "psnr":
                    return v - b if math.isfinite(v) else math.inf
                return math.log10(b / v) if v > 0 else math.inf
            worst = min(rows, key=margin)
            if margin(worst) == math.inf:
                lines.append(f"  {prec}: {len(rows)} float outputs compared, {t}; every one exact")
            else:
                lines.append(f"  {prec}: {len(rows)} float outputs compared, {t}; worst {worst[0]}: "
                             f"{worst[1]} {worst[2]:.3g} (bound {worst[3]:.3g})")
            skipped = self.not_compared.get(prec, [])
            for label, why in skipped[:5]:
                lines.append(f"    not compared: {label}: {why}")
            if len(skipped) > 5:
                lines.append(f"    ... {len(skipped) - 5} more not compared")
        print("\n".join(lines))


def judge(case, label, head, precisions, half_psnr_db, tally, test, cpu_judged_by):
    """Runs case on the CPU engine and on the CUDA engine at each of
    precisions and asserts the comparisons (half_psnr_db: the PSNR bound of
    fp16 and bf16). test names the report's "test" field; cpu_judged_by the
    CPU suite that judges the CPU engine on such cases."""
    feeds = {k: np.asarray(v) for k, v in case.feeds.items()}
    out_names = [o.name for o in case.model.graph.output]
    model = sc.Model.from_bytes(case.model, name=f"{label}.onnx")

    t0 = time.perf_counter()
    try:
        with sc.BuildOptions(shapes={k: v.shape for k, v in feeds.items()}, device="cpu",
                             threads=case.threads) as o, sc.Engine.build(model, o) as e, e.context() as ctx:
            cpu = ctx.run(feeds)
            # The same CPU plan on the float32 inputs rounded to fp16/bf16,
            # its float32 outputs rounded too: how much the precision of the
            # data alone costs this case.
            rounded = {}
            if any(v.dtype == np.float32 for v in feeds.values()):
                for prec in half_precisions():
                    outs = ctx.run({k: round_to(v, prec) if v.dtype == np.float32 else v
                                    for k, v in feeds.items()})
                    rounded[prec] = [round_to(o, prec) if o.dtype == np.float32 else o for o in outs]
    except sc.SegrtError as err:
        if err.unsupported:
            pytest.skip(f"the CPU engine does not run this case either: {err.message}")
        raise AssertionError(f"{head}\nthe CPU engine fails ({cpu_judged_by} judges it): {err}") from None
    tally.seconds["cpu"] += time.perf_counter() - t0

    f32_case = any(v.dtype == np.float32 for v in feeds.values())
    # Data that fp16 cannot hold. bf16 keeps float32's range but only 8
    # bits: at 6e4 and beyond its steps are hundreds, which casts to
    # integers and comparisons turn into arbitrary differences. Such cases
    # are compared at fp32 and tf32 only; fp16 and bf16 still have to build
    # and run.
    too_wide = f32_case and max_abs_finite(list(feeds.values()) + cpu) > HALF_RANGE

    gpu, failures, notes, record = {}, [], [], {"case": label, "test": test}
    for prec in precisions:
        t0 = time.perf_counter()
        try:
            gpu[prec] = run_engine(model, feeds, "cuda", prec)
        except sc.SegrtError as err:
            if err.unsupported and cpu_too(err.message):
                notes.append(f"{prec}: unsupported on the CPU too: {err.message}")
                tally.not_compared[prec].append((label, "unsupported on the CPU too"))
                continue
            if prec == "bf16" and err.unsupported and "bfloat16 needs compute capability 8.0" in err.message:
                # A Turing card (or --target-arch sm_75) refuses bf16 by name.
                tally.not_compared[prec].append((label, "bf16 before compute capability 8.0"))
                continue
            failures.append(f"{prec}: the CUDA engine fails: {err}")
            continue
        except AssertionError as err:
            failures.append(f"{prec}: {err}")
            continue
        finally:
            tally.seconds[prec] += time.perf_counter() - t0

    for prec, outs in gpu.items():
        reduced = f32_case and prec != "fp32"
        if reduced and too_wide and prec in HALF:
            tally.not_compared[prec].append((label, f"data beyond {HALF_RANGE:g}"))
            notes.append(f"{prec}: not compared, data beyond {HALF_RANGE:g}")
            continue
        half = reduced and prec in HALF
        for j, (name, got, want) in enumerate(zip(out_names, outs, cpu)):
            where = f"{prec}: output {name}"
            if got.shape != want.shape or got.dtype != want.dtype:
                failures.append(f"{where}: {got.dtype} {list(got.shape)}, expected {want.dtype} {list(want.shape)}")
                continue
            if got.dtype.kind != "f":
                msg = exact_mismatch(got, want)
                if msg:
                    if half and rounded and exact_mismatch(got, rounded[prec][j]) is None:
                        msg += (f" (the CPU engine on the inputs rounded to {prec} gives exactly the GPU's "
                                f"values: the difference is the rounding of the float32 inputs)")
                    failures.append(f"{where}: {msg}")
                continue
            ref = gpu.get("fp32", cpu)[j] if half else want
            msg = special_mismatch(got, ref)
            if msg:
                failures.append(f"{where}: {msg}")
                continue
            if half:
                value = psnr(got, ref)
                floor = psnr(rounded[prec][j], want) if rounded else math.inf
                bound = half_psnr_db[prec]
                # A case the precision of its data alone takes below the
                # bound + 6 dB (a normalization of values with a large
                # offset, say) is held to 6 dB under what the rounded data
                # gives on the CPU; one below 26 dB is not comparable at
                # this precision.
                if floor < bound + 6:
                    if floor < 26:
                        tally.not_compared[prec].append((label, f"{name}: rounded data alone {fmt_db(floor)}"))
                        notes.append(f"{where}: not compared, the inputs rounded to {prec} alone give "
                                     f"{fmt_db(floor)} on the CPU")
                        continue
                    bound = floor - 6
                record[f"{prec}_{name}_psnr_db"] = value
                tally.stats[prec].append((label, "psnr", value, bound))
                if not value >= bound:
                    failures.append(f"{where}: PSNR {fmt_db(value)} against the CUDA fp32 output, bound "
                                    f"{bound:.1f} dB (rounded inputs alone on the CPU: {fmt_db(floor)}); "
                                    f"relative L2 {rel_l2(got, ref):.3g}")
            else:
                fin = np.isfinite(want)
                # The fp32 bound is the floor: the GPU computes in
                # float32 where the reference computes float64 (float64
                # tensors' normalisation statistics, say), which opgen's
                # float64 bound (meant for float64 math) does not allow.
                bound = max(opgen.tolerances(case, got.dtype)[0], FP32_L2)
                if reduced and prec == "tf32":
                    bound = max(bound, TF32_L2)
                value = rel_l2(got[fin], want[fin]) if fin.any() else 0.0
                record[f"{prec}_{name}_rel_l2"] = value
                tally.stats[prec].append((label, "rel_l2", value, bound))
                if not value <= bound:
                    with np.errstate(invalid="ignore", over="ignore"):
                        diff = np.where(fin, got.astype(np.float64) - want.astype(np.float64), 0.0)
                    i = int(np.argmax(np.abs(diff).ravel()))
                    failures.append(f"{where}: relative L2 {value:.3g} to the CPU engine, bound {bound:g}; "
                                    f"largest difference at flat index {i}: got {got.ravel()[i]!r}, "
                                    f"expected {want.ravel()[i]!r}")
    record["failures"] = len(failures)
    report(record)
    if failures:
        raise AssertionError(head + "\n" + "\n".join(failures + notes))
    if not gpu and notes:
        pytest.skip("; ".join(notes))
