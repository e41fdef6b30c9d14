#!/usr/bin/env python3
"""Turns the latest bench/results/gpu_vs_pytorch-*.json into a markdown table
and writes it into README.md between the markers

    <!-- gpu-bench:begin -->  and  <!-- gpu-bench:end -->

    python3 bench/report.py [--file RESULT.json]... [--write-merged JSON] [--readme README.md] [--print-only]

"Latest" is the newest `date` recorded in the files (a result cut short by a
time-out counts too; its table says which modes are missing). Several --file
results of one device (a benchmark split to fit a time limit) are merged,
a later run's mode replacing an earlier one's; --write-merged keeps the
merged JSON (for bench/results/). gpu_vs_pytorch.py
imports markdown() and target_checks() to print the same table at the end of
a run and to store the target verdicts in its JSON.

With --sw it does the same for bench/sw_vs_monai.py's results
(sw_vs_monai-*.json, --small runs left out) between

    <!-- sw-bench:begin -->  and  <!-- sw-bench:end -->

several --file results (jobs run in separate calls) merged case by case.
"""
import argparse
import json
import math
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- gpu-bench:begin -->", "<!-- gpu-bench:end -->"
SW_BEGIN, SW_END = "<!-- sw-bench:begin -->", "<!-- sw-bench:end -->"

MODE_NAMES = {
    "eager32": "PyTorch eager FP32",
    "tf32": "PyTorch eager TF32",
    "half_cl": "PyTorch eager FP16 channels-last",
    "amp": "PyTorch AMP FP16 channels-last",
    "compile": "torch.compile max-autotune FP16",
    "compile_default": "torch.compile default FP16",
    "segrt": "segrt",
}
EAGER = ("eager32", "tf32", "half_cl", "amp")

# The issue's targets: (model, batch, against, at least x). against "eager"
# is the fastest eager PyTorch mode that ran (the strictest reading).
TARGETS = [
    ("basicunet2d", 16, "compile", 2.0),
    ("basicunet2d", 16, "half_cl", 5.0),
    ("unet3d_spleen", 4, "compile", 2.0),
    ("basicunet2d", 1, "eager", 3.0),
    ("unet3d_spleen", 1, "eager", 3.0),
]


def _ok(r):
    return isinstance(r, dict) and r.get("status") == "ok"


def target_checks(result):
    """[{model, batch, against, need, got, met}] for the targets whose case
    ran; got is None (met None) when a side is missing."""
    out = []
    for model, batch, against, need in TARGETS:
        case = next((c for c in result.get("cases", []) if c["model"] == model and c["batch"] == batch), None)
        if case is None:
            continue
        res = case.get("results", {})
        seg = res.get("segrt")
        if against == "eager":
            eager = [(m, res[m]) for m in EAGER if _ok(res.get(m))]
            mode, other = min(eager, key=lambda mr: mr[1]["median_ms"]) if eager else (None, None)
        else:
            mode, other = against, res.get(against)
        got = other["median_ms"] / seg["median_ms"] if _ok(seg) and _ok(other) else None
        out.append({"model": model, "batch": batch, "against": against, "against_mode": mode, "need": need,
                    "got": got, "met": None if got is None else got >= need})
    return out


def _f(v, fmt):
    """v formatted; "–" for None; inf, -inf and nan (floats or the JSON's
    strings) as they are."""
    if v is None:
        return "–"
    if isinstance(v, str) or not math.isfinite(v):
        return str(v)
    return format(v, fmt)


def _mib(b):
    return _f(None if b is None else b / 2 ** 20, ",.0f")


def _row(mode, r, seg_speedup):
    name = MODE_NAMES.get(mode, mode)
    if not _ok(r):
        r = r if isinstance(r, dict) else {}
        why = (r.get("why") or r.get("error") or "")[:80]
        return f"| {name} | {r.get('status', 'not run')}: {why} | | | | | | | |"
    acc = r.get("accuracy", {})
    extra = []
    if "compile_s" in r:
        extra.append(f"compile {r['compile_s']:.0f} s")
    if "build_s" in r:
        extra.append(f"build {r['build_s']:.1f} s")
    psnr = acc.get("psnr_db")
    psnr_txt = "ref" if mode == "eager32" else _f(psnr, ".1f")
    agree = acc.get("argmax_agreement")
    agree_txt = "ref" if mode == "eager32" else _f(None if agree is None else 100 * agree, ".3f")
    if mode == "segrt":
        faster = ""
    else:
        faster = "–" if seg_speedup is None else f"{seg_speedup:.2f}×"
    return (f"| {name} | {r['median_ms']:.2f} ({r['p10_ms']:.2f}–{r['p90_ms']:.2f}) | "
            f"{_f(r.get('tflops'), '.1f')} | {_f(r.get('pct_fp16_ceiling'), '.1f')} | {_mib(r.get('peak_bytes'))} | "
            f"{faster} | {psnr_txt} | {agree_txt} | {', '.join(extra)} |")


def markdown(result):
    """The result as markdown: a line of context, one table per model and
    batch, then the targets."""
    dev = result.get("device", {})
    v = result.get("versions", {})
    ceil = result.get("ceilings", {})
    s = result.get("settings", {})
    lines = [
        f"{dev.get('name', '?')} (driver {dev.get('driver', '?')}), {result.get('date', '?')}: "
        f"segrt {v.get('segrt', '?')}, PyTorch {v.get('torch', '?')} (CUDA {v.get('torch_cuda', '?')}, "
        f"cuDNN {v.get('torch_cudnn', '?')}), onnx2torch {v.get('onnx2torch', '?')}. "
        f"Median of {s.get('iters', '?')} runs after {s.get('warmup', '?')} warm-up (p10–p90), "
        f"FP32 input and output on the device for segrt ({s.get('segrt_precision', '?')} inside). "
        f"Measured ceilings: FP16 matrix product {_f(ceil.get('fp16_matmul_tflops'), '.0f')} TFLOP/s, "
        f"device copy {_f(ceil.get('d2d_copy_gbps'), ',.0f')} GB/s."
        + ("" if result.get("complete", True) else " **Run cut short: cases or modes are missing.**"),
        "",
    ]
    for case in result.get("cases", []):
        dims = "×".join(map(str, case["input_shape"][1:]))
        lines += [f"**{case['model']}, batch {case['batch']} × {dims}** "
                  f"({case['gflop_per_sample']:.1f} GFLOP/sample, {case['gflop']:.0f} GFLOP a run)", "",
                  "| mode | ms (p10–p90) | TFLOP/s | % FP16 peak | peak MiB | segrt faster by | PSNR dB vs FP32 "
                  "| argmax agree % | |",
                  "|---|---|---|---|---|---|---|---|---|"]
        sp = speedups(case)
        for mode, r in case.get("results", {}).items():
            lines.append(_row(mode, r, sp.get(mode)))
        lines.append("")
    checks = target_checks(result)
    if checks:
        lines.append("Targets (segrt FP16 against PyTorch, same run):")
        lines.append("")
        for t in checks:
            what = t["against"] if t["against"] != "eager" else f"fastest eager ({t.get('against_mode') or '–'})"
            verdict = "not measured" if t["met"] is None else ("met" if t["met"] else "**not met**")
            got = "–" if t["got"] is None else f"{t['got']:.2f}×"
            lines.append(f"- {t['model']} batch {t['batch']}: ≥ {t['need']:g}× faster than {what}: {got} — {verdict}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def latest_result(results_dir, pattern="gpu_vs_pytorch-*.json"):
    """(path, dict) of the result matching pattern with the newest date, or
    (None, None). Smoke-test runs (settings.small) do not count."""
    best = (None, None)
    for p in sorted(pathlib.Path(results_dir).glob(pattern)):
        try:
            r = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if r.get("settings", {}).get("small"):
            continue
        if best[1] is None or r.get("date", "") >= best[1].get("date", ""):
            best = (p, r)
    return best


def replace_section(text, body, begin=BEGIN, end=END):
    """text with what lies between the markers replaced by body; ValueError
    when the markers are missing or out of order."""
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < 0 or j < i:
        raise ValueError(f"markers {begin} ... {end} not found in order")
    return text[:i + len(begin)] + "\n" + body.rstrip() + "\n" + text[j:]


def _merged_header(results, detail):
    """The header of a result merged from several runs on one device: the
    first run's, with every run's date, versions and `detail` listed, the
    latest date, and complete only if every run was."""
    names = {r.get("device", {}).get("name") for r in results}
    if len(names) > 1:
        raise ValueError(f"results from different devices: {sorted(map(str, names))}")
    out = dict(results[0])
    out["merged_from"] = [{"date": r.get("date"), "versions": r.get("versions"), detail: r.get(detail)}
                          for r in results]
    out["date"] = max(r.get("date", "") for r in results)
    out["complete"] = all(r.get("complete", True) for r in results)
    return out


def merge(results):
    """One result from several runs on one device (a long benchmark split
    by models, batches or modes to fit a time limit): the first run's header,
    every case, a later run's mode replacing an earlier one's; each mode
    keeps the date of its run, and speed-ups and targets are recomputed."""
    if len(results) == 1:
        return results[0]
    out = _merged_header(results, "ceilings")
    cases = {}
    for r in results:
        for c in r.get("cases", []):
            key = (c["model"], c["batch"])
            if key not in cases:
                cases[key] = dict(c, results={})
            for mode, res in c.get("results", {}).items():
                if isinstance(res, dict) and (_ok(res) or mode not in cases[key]["results"]):
                    cases[key]["results"][mode] = dict(res, run_date=r.get("date"))
    out["cases"] = list(cases.values())
    for c in out["cases"]:
        c["segrt_speedup"] = speedups(c)
    out["targets"] = target_checks(out)
    return out


def speedups(case):
    """segrt's speed-up over every other mode that finished:
    {mode: mode_median / segrt_median}."""
    res = case.get("results", {})
    if not _ok(res.get("segrt")):
        return {}
    seg = res["segrt"]["median_ms"]
    return {mode: r["median_ms"] / seg for mode, r in res.items() if mode != "segrt" and _ok(r)}


# ---------------------------------------------------------------------------
# bench/sw_vs_monai.py: sliding-window jobs, segrt against MONAI's algorithm
# in PyTorch AMP, host image to host labels


def _sw_key(case):
    return (case.get("job"), case.get("sw_batch"), case.get("blend"))


def sw_merge(results):
    """One sw_vs_monai result from several runs on one device (jobs or
    sw_batch values run in separate calls): the first run's header, a later
    run's case replacing an earlier one with the same job, sw_batch and
    blend; each case keeps the date of its run."""
    if len(results) == 1:
        return results[0]
    out = _merged_header(results, "settings")
    cases = {}
    for r in results:
        for c in r.get("cases", []):
            if "error" not in c or _sw_key(c) not in cases:
                cases[_sw_key(c)] = dict(c, run_date=r.get("date"))
    out["cases"] = list(cases.values())
    return out


def _pair(seg, torch, fmt):
    return f"{_f(seg, fmt)} · {_f(torch, fmt)}"


def _batches(case):
    """Windows per call: one figure when both sides use it, else segrt · torch
    (segrt's as 1–N where its engine takes a range of batches)."""
    sb, tb = case.get("sw_batch"), case.get("torch_sw_batch")
    seg = f"1–{sb}" if case.get("segrt_batch_range") else f"{sb}"
    return seg if tb in (None, sb) and not case.get("segrt_batch_range") else f"{seg} · {tb}"


def _sw_row(case):
    dims = "×".join(map(str, case.get("image_shape", [])[1:]))
    roi = "×".join(map(str, case.get("roi", [])))
    head = (f"| {case.get('job')}: {case.get('model')}, {dims}, window {roi}, overlap {case.get('overlap')} "
            f"| {case.get('windows')} ({_batches(case)}) ")
    seg, tor = case.get("segrt") or {}, case.get("torch") or {}
    if "error" in case or not seg:
        why = case.get("error") or "segrt did not run"
        return head + f"| {why[:100]} | | | | | | | |"

    def ms(r):
        return f"{r['median_ms']:,.1f} ({r['p10_ms']:,.1f}–{r['p90_ms']:,.1f})" if r else "–"

    sp = case.get("speedup")
    agree = case.get("labels_agreement")
    where = {0: " (host blend)", 1: " (GPU blend)"}.get((case.get("segrt_stats") or {}).get("on_device"), "")
    verdict = "–" if sp is None else ("met" if sp >= case.get("target_speedup", 5.0) else "**not met**")
    return (head + f"| {ms(seg)}{where} | {ms(tor)} | {_f(sp, '.2f')}{'×' if sp is not None else ''} | "
            f"{_pair(seg.get('windows_per_s'), tor.get('windows_per_s'), ',.0f')} | "
            f"{_pair(seg.get('tflops'), tor.get('tflops'), '.3g')} | "
            f"{_mib(seg.get('peak_bytes_sampled'))} · {_mib(tor.get('peak_bytes'))} | "
            f"{_f(None if agree is None else 100 * agree, '.3f')} | {verdict} |")


def _sw_host_times(case):
    """segrt's seconds_* stats of one run as a phrase, or None."""
    st = case.get("segrt_stats") or {}
    if "seconds_run" not in st:
        return None
    ms = {k: 1e3 * st.get("seconds_" + k, 0.0) for k in ("setup", "run", "uploading", "waiting", "downloading")}
    return (f"{case.get('job')}: setup {ms['setup']:.1f} ms, windows {ms['run']:.1f} ms (copying image rows "
            f"{ms['uploading']:.1f}, waiting for the GPU {ms['waiting']:.1f}, result out {ms['downloading']:.1f})")


def sw_markdown(result):
    """The sliding-window result as markdown: a line of context, one row
    per job and sw_batch, then what was measured how."""
    dev = result.get("device", {})
    v = result.get("versions", {})
    s = result.get("settings", {})
    target = s.get("target_speedup", 5.0)
    runs = sorted({c[side]["runs"] for c in result.get("cases", []) for side in ("segrt", "torch")
                   if isinstance(c.get(side), dict) and "runs" in c[side]})
    torch_col = "PyTorch AMP ms" if str(s.get("torch_mode", "AMP")).startswith("AMP") else "PyTorch ms"
    driver = f" (driver {dev['driver']})" if dev.get("driver") else ""
    lines = [
        f"{dev.get('name', '?')}{driver}, {result.get('date', '?')}: "
        f"segrt {v.get('segrt', '?')} ({s.get('segrt_precision') or 'default precision'}), "
        f"PyTorch {v.get('torch', '?')} (CUDA {v.get('torch_cuda', '?')}, cuDNN {v.get('torch_cudnn', '?')}) "
        f"running MONAI's sliding_window_inference algorithm, {s.get('torch_mode', '?')}, onnx2torch "
        f"{v.get('onnx2torch', '?')}. End to end from a float32 image in host memory to uint8 labels in host "
        f"memory, {s.get('blend', '?')} blending, sides alternating"
        f"{'' if s.get('block', 1) == 1 else ' in blocks of ' + str(s['block']) + ' runs'}; median (p10–p90) of "
        f"{'/'.join(map(str, runs)) or '?'} runs after {s.get('warmup', '?')} warm-up."
        + (" **Smoke test (--small).**" if s.get("small") else "")
        + ("" if result.get("complete", True) else " **Run cut short: cases are missing.**"),
        "",
        f"| job | windows (per call) | segrt ms | {torch_col} | segrt faster by | windows/s segrt · torch "
        f"| TFLOP/s segrt · torch | peak MiB segrt (sampled) · torch | labels agree % | ≥ {target:g}× |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [_sw_row(dict(c, target_speedup=target)) for c in result.get("cases", [])]
    times = [_sw_host_times(c) for c in result.get("cases", [])]
    if any(times):
        lines += ["", "Where segrt's host time went in one run (segrt_window_run_timed): "
                  + "; ".join(t for t in times if t) + "."]
    lines += ["", "PyTorch's peak is its allocator's maximum over the timed runs; segrt's is sampled: the drop "
                  "in free device memory, read every 2 ms during one run, from before its engine was built. "
                  "TFLOP/s counts the network's convolutions over the windows."]
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", action="append", default=[],
                    help="a result JSON (default: the latest in --results); more than one are merged")
    ap.add_argument("--results", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--readme", default=str(ROOT / "README.md"))
    ap.add_argument("--write-merged", metavar="JSON", help="also write the merged result to this file")
    ap.add_argument("--print-only", action="store_true", help="print the table, leave the README")
    ap.add_argument("--sw", action="store_true",
                    help="bench/sw_vs_monai.py's results (sw_vs_monai-*.json) and the sw-bench markers")
    a = ap.parse_args(argv)
    pattern, merge_fn, table = "gpu_vs_pytorch-*.json", merge, markdown
    markers = (BEGIN, END)
    if a.sw:
        pattern, merge_fn, table = "sw_vs_monai-*.json", sw_merge, sw_markdown
        markers = (SW_BEGIN, SW_END)
    if a.file:
        paths = [pathlib.Path(f) for f in a.file]
        try:
            result = merge_fn([json.loads(p.read_text()) for p in paths])
        except (OSError, json.JSONDecodeError, ValueError) as e:
            sys.exit(f"report: {e}")
    else:
        path, result = latest_result(a.results, pattern)
        if result is None:
            sys.exit(f"report: no {pattern} in {a.results}")
        paths = [path]
    if a.write_merged:
        pathlib.Path(a.write_merged).write_text(json.dumps(result, indent=1) + "\n")
    source = pathlib.Path(a.write_merged).name if a.write_merged else ", ".join(p.name for p in paths)
    body = f"Latest (`bench/results/{source}`):\n\n{table(result)}"
    if a.print_only:
        print(body, end="")
        return
    readme = pathlib.Path(a.readme)
    try:
        readme.write_text(replace_section(readme.read_text(), body, *markers))
    except (OSError, ValueError) as e:
        sys.exit(f"report: {readme}: {e}")
    print(f"report: {readme} updated from {source}")


if __name__ == "__main__":
    main()
