"""segrt compare against the same metrics computed with numpy, and segrt
bench on the tiny test model."""
import json
import math

import numpy as np
import pytest

from conftest import run_segrt


# --- references ----------------------------------------------------------------

def ref_metrics(a, b):
    """The metrics as segrt compare defines them (see segrt compare --help)."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    an, bn = np.isnan(a), np.isnan(b)
    mismatches = int(np.sum(an != bn))
    ok = ~(an | bn)
    x, y = a[ok], b[ok]
    with np.errstate(invalid="ignore"):
        d = np.where(x == y, 0.0, np.abs(x - y))
    n = a.size
    dsq, bsq = float(np.sum(d * d)), float(np.sum(y * y))
    mse = dsq / n if n else 0.0
    finite = y[np.isfinite(y)]
    rng = float(finite.max() - finite.min()) if finite.size else 0.0
    if dsq == 0:
        rel = 0.0
    else:
        rel = math.sqrt(dsq) / math.sqrt(bsq) if bsq > 0 else math.inf
    if mse == 0:
        psnr = math.inf
    elif rng == 0:
        psnr = -math.inf
    else:
        psnr = 10 * math.log10(rng * rng / mse)
    m = {"count": n, "nan_mismatches": mismatches,
         "max_abs": float(d.max()) if d.size else 0.0,
         "mae": float(d.sum()) / n if n else 0.0, "rel_l2": rel, "psnr_db": psnr}
    if mismatches:
        for k in ("max_abs", "mae", "rel_l2", "psnr_db"):
            m[k] = math.nan
    return m


def ref_classes(a, b, axis):
    la, lb = np.argmax(a, axis=axis), np.argmax(b, axis=axis)
    dice = []
    for c in range(a.shape[axis]):
        ca, cb = int(np.sum(la == c)), int(np.sum(lb == c))
        inter = int(np.sum((la == c) & (lb == c)))
        dice.append(None if ca + cb == 0 else 2 * inter / (ca + cb))
    present = [d for d in dice if d is not None]
    return {"argmax_agreement": float(np.mean(la == lb)), "dice": dice,
            "mean_dice": float(np.mean(present)) if present else math.nan}


def close(got, want, rtol):
    got, want = float(got), float(want)
    if math.isnan(want):
        return math.isnan(got)
    if math.isinf(want):
        return got == want
    return abs(got - want) <= rtol * abs(want) + 1e-300


TEXT_LABELS = {"elements": "count", "max abs error": "max_abs", "mean abs error": "mae",
               "relative L2": "rel_l2", "PSNR": "psnr_db", "NaN mismatches": "nan_mismatches",
               "argmax agreement": "argmax_agreement", "mean dice": "mean_dice"}


def parse_text(out):
    """The text output's numbers under the JSON keys; dice as a list."""
    m = {}
    for line in out.splitlines():
        label, _, value = line.partition(":")
        words = value.split()
        if label == "dice":
            m["dice"] = [None if w == "-" else float(w) for w in words]
        elif label in TEXT_LABELS:
            m[TEXT_LABELS[label]] = float(words[0])
    return m


def json_float(v):
    """JSON numbers, or the strings inf, -inf, nan that segrt writes for them."""
    return float(v)


def compare(tmp_path, a, b, *args, check=0):
    pa, pb = tmp_path / "a.npy", tmp_path / "b.npy"
    np.save(pa, a)
    np.save(pb, b)
    text = run_segrt("compare", pa, pb, *args, check=check)
    js = run_segrt("compare", pa, pb, *args, "--json", check=check)
    return parse_text(text.stdout), json.loads(js.stdout)


def check_against(ref, text, js):
    for k, want in ref.items():
        if k == "dice":
            assert len(js["dice"]) == len(want) and len(text["dice"]) == len(want)
            for g, t, w in zip(js["dice"], text["dice"], want):
                if w is None:
                    assert g is None and t is None
                else:
                    assert close(g, w, 1e-9) and close(t, w, 1e-5), (g, t, w)
            continue
        assert close(json_float(js[k]), want, 1e-9), (k, js[k], want)
        assert close(text[k], want, 1e-5), (k, text[k], want)
        # --json and the text report the same numbers.
        assert close(text[k], json_float(js[k]), 1e-5), (k, text[k], js[k])


# --- compare -------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(7,), (3, 4), (1, 2, 16, 16), (2, 3, 5, 6, 7), (3000,)])
def test_metrics_match_numpy(tmp_path, shape):
    rng = np.random.default_rng(sum(shape))
    b = rng.normal(size=shape).astype(np.float32)
    a = (b + rng.normal(scale=1e-3, size=shape)).astype(np.float32)
    text, js = compare(tmp_path, a, b)
    check_against(ref_metrics(a, b), text, js)
    assert js["shape"] == list(shape)
    assert js["thresholds_met"] is True


def test_identical_arrays(tmp_path):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    text, js = compare(tmp_path, a, a)
    assert js["max_abs"] == 0 and js["mae"] == 0 and js["rel_l2"] == 0
    assert js["psnr_db"] == "inf" and text["psnr_db"] == math.inf
    assert js["count"] == 24 and js["nan_mismatches"] == 0


@pytest.mark.parametrize("shape,axis", [((2, 4, 8, 8), 1), ((2, 4, 8, 8), -1), ((3, 5), -1),
                                        ((1, 3, 4, 5, 6), 1), ((6, 2, 300), -2)])
def test_class_axis_matches_numpy(tmp_path, shape, axis):
    rng = np.random.default_rng(len(shape) * 10 + axis)
    b = rng.normal(size=shape).astype(np.float32)
    a = (b + rng.normal(scale=0.3, size=shape)).astype(np.float32)
    # A class that wins nowhere in either: its Dice is null, and the mean
    # leaves it out.
    absent = [slice(None)] * len(shape)
    absent[axis] = 1
    a[tuple(absent)] = -100
    b[tuple(absent)] = -100
    text, js = compare(tmp_path, a, b, "--class-axis", axis)
    ref = ref_metrics(a, b)
    ref.update(ref_classes(a, b, axis))
    assert ref["dice"][1] is None
    check_against(ref, text, js)
    assert js["n_classes"] == shape[axis]
    assert js["class_axis"] == axis % len(shape)


def test_argmax_ties_and_nan_like_numpy(tmp_path):
    a = np.array([[1, 1, 0], [0, np.nan, 5], [2, 2, 2]], dtype=np.float64)
    b = np.array([[0, 3, 3], [0, 1, 5], [1, 2, 2]], dtype=np.float32)
    _, js = compare(tmp_path, a, b, "--class-axis", "1")
    want = ref_classes(a, b, 1)
    assert close(js["argmax_agreement"], want["argmax_agreement"], 1e-12)
    assert js["dice"] == pytest.approx(want["dice"])


def test_int_and_bool_against_float(tmp_path):
    rng = np.random.default_rng(3)
    b = rng.normal(scale=4, size=(4, 6)).astype(np.float32)
    for a in [np.rint(b).astype(np.int32), np.rint(b).astype(np.int64),
              np.clip(np.rint(b), 0, 255).astype(np.uint8), (b > 0)]:
        text, js = compare(tmp_path, a, b)
        check_against(ref_metrics(a, b), text, js)


def test_nan_mismatches(tmp_path):
    b = np.linspace(0, 1, 10, dtype=np.float32)
    a = b.copy()
    a[2] = np.nan          # in A only
    b[5] = np.nan          # in B only
    a[7] = b[7] = np.nan   # in both: a match
    text, js = compare(tmp_path, a, b, "--max-rel-l2", "1", check=1)
    assert js["nan_mismatches"] == 2 and text["nan_mismatches"] == 2
    for k in ("max_abs", "mae", "rel_l2", "psnr_db"):
        assert js[k] == "nan" and math.isnan(text[k])
    a[2], b[5] = b[2], a[5]
    text, js = compare(tmp_path, a, b, "--max-rel-l2", "0")
    assert js["nan_mismatches"] == 0 and js["max_abs"] == 0


def test_thresholds(tmp_path):
    rng = np.random.default_rng(7)
    b = rng.normal(size=(1, 3, 16, 16)).astype(np.float32)
    a = (b + rng.normal(scale=0.1, size=b.shape)).astype(np.float32)
    pa, pb = tmp_path / "out.npy", tmp_path / "ref.npy"
    np.save(pa, a)
    np.save(pb, b)
    ref = ref_metrics(a, b)
    agree = ref_classes(a, b, 1)["argmax_agreement"]
    assert agree < 1
    passing = [["--max-rel-l2", ref["rel_l2"] * 1.01], ["--min-psnr", ref["psnr_db"] - 0.1],
               ["--class-axis", "1", "--min-argmax-agreement", agree]]
    failing = [(["--max-rel-l2", ref["rel_l2"] * 0.99], "--max-rel-l2"),
               (["--min-psnr", ref["psnr_db"] + 0.1], "--min-psnr"),
               (["--class-axis", "1", "--min-argmax-agreement", "1"], "--min-argmax-agreement")]
    for args in passing:
        p = run_segrt("compare", pa, pb, *args, check=0)
        assert p.stderr == ""
    for args, which in failing:
        for extra in ([], ["--json"]):
            p = run_segrt("compare", pa, pb, *args, *extra, check=1)
            lines = p.stderr.strip().splitlines()
            assert len(lines) == 1 and which in lines[0], p.stderr
            assert "out.npy" in lines[0] and "ref.npy" in lines[0]
            if extra:
                assert json.loads(p.stdout)["thresholds_met"] is False
    # Both failing: still one line, naming both.
    p = run_segrt("compare", pa, pb, "--max-rel-l2", "0", "--min-psnr", "1000", check=1)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "--max-rel-l2" in lines[0] and "--min-psnr" in lines[0]


def expect_bad(args, *names):
    p = run_segrt(*args)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, f"exit {p.returncode}: {p.stderr}"
    assert len(lines) == 1 and lines[0].startswith("segrt: "), p.stderr
    for n in names:
        assert n in lines[0], lines[0]
    return lines[0]


def test_bad_files_and_usage(tmp_path):
    a, b = tmp_path / "left.npy", tmp_path / "right.npy"
    np.save(a, np.zeros((2, 3), np.float32))
    np.save(b, np.zeros((3, 2), np.float32))
    expect_bad(["compare", a, b], "left.npy", "right.npy", "2x3", "3x2")
    expect_bad(["compare", a, tmp_path / "missing.npy"], "missing.npy")
    expect_bad(["compare", tmp_path / "gone.npy", b], "gone.npy")
    junk = tmp_path / "junk.npy"
    junk.write_bytes(b"not an npy file")
    expect_bad(["compare", a, junk], "junk.npy")
    expect_bad(["compare", a])
    expect_bad(["compare", a, a, a])
    expect_bad(["compare", a, a, "--class-axis", "2"], "left.npy")
    expect_bad(["compare", a, a, "--class-axis", "x"], "--class-axis")
    expect_bad(["compare", a, a, "--min-argmax-agreement", "0.9"], "--class-axis")
    expect_bad(["compare", a, a, "--max-rel-l2"], "--max-rel-l2")
    expect_bad(["compare", a, a, "--min-psnr", "nan"], "--min-psnr")
    expect_bad(["compare", a, a, "--bogus"], "--bogus")


def test_help_states_psnr():
    p = run_segrt("compare", "--help", check=0)
    assert "PSNR" in p.stdout and "max(B) - min(B)" in p.stdout and "log10" in p.stdout


# --- bench ---------------------------------------------------------------------

@pytest.fixture
def tiny(models):
    return models / "basicunet2d_tiny.onnx"


def test_bench_json(tiny):
    p = run_segrt("bench", tiny, "--shape", "image=1x1x32x32", "--iters", "3", "--warmup", "1", "--json",
                  check=0)
    r = json.loads(p.stdout)
    for k in ("median_ms", "p90_ms", "p99_ms", "min_ms", "mean_ms", "iters", "warmup", "throughput_per_s",
              "peak_bytes", "gflop", "gflops_per_s", "device", "threads", "model", "shapes", "segrt_version"):
        assert k in r, k
    assert r["median_ms"] > 0
    assert r["min_ms"] <= r["p50_ms"] == r["median_ms"] <= r["p90_ms"] <= r["p99_ms"]
    assert r["min_ms"] <= r["mean_ms"] <= r["p99_ms"]
    assert r["iters"] == 3 and r["warmup"] == 1 and len(r["times_ms"]) == 3
    # Nearest rank over three sorted times: p50 is the 2nd, p90 and p99 the 3rd.
    t = sorted(r["times_ms"])
    assert r["median_ms"] == t[1] and r["p90_ms"] == t[2] and r["p99_ms"] == t[2] and r["min_ms"] == t[0]
    assert r["threads"] >= 1
    assert r["gflop"] > 0
    assert r["gflops_per_s"] == pytest.approx(r["gflop"] / (r["median_ms"] / 1e3))
    assert r["throughput_per_s"] == pytest.approx(1 / (r["median_ms"] / 1e3))
    assert r["peak_bytes"] > 1 << 20
    assert r["device"] == "cpu"
    assert r["shapes"] == {"image": [1, 1, 32, 32]}
    assert r["model"] == str(tiny)
    version = run_segrt("--version", check=0).stdout.split()[1]
    assert r["segrt_version"] == version
    # The GFLOP agree with segrt info for the same shapes.
    info = run_segrt("info", tiny, "--shape", "image=1x1x32x32", check=0).stdout
    gflop = float(info.split("GFLOP: ")[1].split()[0])
    assert r["gflop"] == pytest.approx(gflop, abs=0.006)


def test_bench_text_and_threads(tiny):
    p = run_segrt("bench", tiny, "--shape", "image=2x1x32x32", "--iters", "2", "--warmup", "0",
                  "--threads", "3", check=0)
    out = p.stdout
    assert "threads: 3" in out and "device: cpu" in out and "image=2x1x32x32" in out
    for word in ("p50", "p90", "p99", "min", "mean", "samples/s", "GFLOP", "peak memory"):
        assert word in out, word
    js = json.loads(run_segrt("bench", tiny, "--shape", "image=2x1x32x32", "--iters", "2", "--threads", "3",
                              "--json", check=0).stdout)
    assert js["threads"] == 3
    # Batch 2: two samples per median run.
    assert js["throughput_per_s"] == pytest.approx(2 / (js["median_ms"] / 1e3))


def test_bench_errors(tiny, tmp_path):
    msg = expect_bad(["bench", tiny], "image", tiny.name)
    assert "--shape" in msg
    expect_bad(["bench", tiny, "--shape", "label=1x1x32x32"], "label")
    expect_bad(["bench", tiny, "--shape", "image=1x3x32x32"], "image")
    expect_bad(["bench", tiny, "--shape", "image"], "--shape")
    expect_bad(["bench", tiny, "--shape", "image=1x1x32x32", "--iters", "0"], "--iters")
    expect_bad(["bench", tiny, "--shape", "image=1x1x32x32", "--device", "tpu"], "tpu")
    expect_bad(["bench", tmp_path / "missing.onnx", "--shape", "image=1x1x32x32"], "missing.onnx")
    expect_bad(["bench"])
