"""bench/many_classes, which otherwise runs only on the GPU machine: its dry
run end to end on the CPU build (--tiny: 101 classes over 40 x 64 x 64,
window 32^3, a network built with onnx.helper), the labels it keeps checked
against MONAI's sliding window in numpy over onnxruntime
(sw_reference.py), its FLOP counts against hand counts, and the pure parts:
parsing segrt's summary lines, the configurations' command lines, the
case's determinism, label agreement."""
import dataclasses
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from conftest import SEGRT
import sw_reference as ref

ROOT = pathlib.Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "many_classes"
sys.path.insert(0, str(BENCH))
import common  # noqa: E402
import make_case  # noqa: E402
import run as mc  # noqa: E402


def tiny_flops():
    """Conv 1->8 3x3x3 at 32^3, conv 8->16 2x2x2 stride 2 (16^3 out),
    transposed conv 16->8 2x2x2 stride 2 (16^3 in), head 8->101 at 32^3."""
    v, h = 32 ** 3, 16 ** 3
    return 2 * (v * 8 * 1 * 27 + h * 16 * 8 * 8 + h * 16 * 8 * 8 + v * 101 * 8)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("many_classes")
    out = work / "result.json"
    p = subprocess.run([sys.executable, str(BENCH / "run.py"), "--tiny", "--segrt", SEGRT, "--work", str(work),
                        "--out", str(out), "--warmup", "0", "--runs", "1"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return work, json.loads(out.read_text()), p.stdout


def test_dry_run_reports_every_configuration(dry_run):
    work, res, stdout = dry_run
    assert list(res["configs"]) == list(common.CONFIGS)
    assert res["flops"]["windows_expected"] == 18  # 2 x 3 x 3 windows of 32 at step 16
    for name, e in res["configs"].items():
        assert "error" not in e, (name, e)
        assert e["timed_runs"] == 1 and e["windows"] == 18 and e["batch"] == 2, (name, e)
        assert 0 < e["median_job_s"] <= e["median_wall_s"], (name, e)
        # On a CPU the four are the same job (the CUDA flags left out) in
        # float32: the same labels.
        assert e["agreement"] == 1.0, (name, e)
        assert "--accumulator" not in e["argv"] and "--max-memory" not in e["argv"], e["argv"]
        assert e["flops_total"] == 18 * tiny_flops()
        # Fields the CPU's summary does not print are null, not errors.
        assert e["passes"] is None and e["strips"] is None and e["held_mib"] is None
    assert res["flops"]["per_window"] == tiny_flops()
    assert res["flops"]["by_op"] == {"Conv": 2 * (32 ** 3 * 8 * 27 + 16 ** 3 * 16 * 64 + 32 ** 3 * 101 * 8),
                                     "ConvTranspose": 2 * 16 ** 3 * 16 * 64}
    # The case's regions reach the labels: not one class everywhere.
    census = res["reference_labels"]
    assert census["classes_present"] >= 4 and census["largest_class_share"] < 0.9, census
    for name in common.CONFIGS:
        assert name in stdout


def test_dry_run_labels_are_monai_sliding_window(dry_run):
    """The reference configuration's labels against MONAI's sliding window
    (numpy, Gaussian importance, overlap 0.5, sw_batch 2) over onnxruntime,
    argmax: the benchmark ran the job it says it ran on the image it made."""
    work, res, _ = dry_run
    paths = common.Paths(work)
    image = np.load(paths.image)
    assert image.shape == (1, 1, 40, 64, 64) and image.dtype == np.float32
    logits = ref.sliding_window(image, (32, 32, 32), ref.ort_predictor(str(paths.onnx)), overlap=0.5, sw_batch=2,
                                blend="gaussian")
    expected = logits.argmax(axis=1)[:, None]
    got = np.load(paths.labels(common.REFERENCE))
    assert got.shape == expected.shape
    assert np.count_nonzero(got == expected) / got.size >= 0.9999
    # A network that ignores the image would match nothing in particular:
    # the labels change where the regions do.
    assert len(np.unique(expected)) >= 4


def test_report_only_rebuilds_and_reprints(dry_run, tmp_path):
    work, res, _ = dry_run
    out = tmp_path / "again.json"
    p = subprocess.run([sys.executable, str(BENCH / "run.py"), "--tiny", "--work", str(work), "--out", str(out),
                        "--report-only", "--configs", "1,budget_fp32"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    again = json.loads(out.read_text())
    assert list(again["configs"]) == ["nobudget_fp32", "budget_fp32"]
    assert again["configs"]["budget_fp32"]["walls_s"] == res["configs"]["budget_fp32"]["walls_s"]
    p = subprocess.run([sys.executable, str(BENCH / "run.py"), "--report-only", str(out)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and "| 4 | budget_fp32 |" in p.stdout and "nobudget_fp16acc" not in p.stdout, p.stdout


GPU_SUMMARY = (
    "segrt: /w/case/image.npy 1x1x400x512x512 -> /w/out/x.npy uint8 1x1x400x512x512: 294 windows (2 a run), "
    "cuda:0 fp16, 6.125 s, blended on the GPU in 3 passes, device memory 3890.25 MiB (networks 1200.50 + "
    "windows 2689.75)\n"
    "segrt: host time: setup 0.125 s, windows 5.750 s (copying image rows 0.250, waiting for the GPU 4.500, "
    "result out 0.375)\n")


def test_parse_summary_today_and_tomorrow():
    f = mc.parse_summary("some notice\n" + GPU_SUMMARY)
    assert f["windows"] == 294 and f["batch"] == 2 and f["job_s"] == 6.125 and f["passes"] == 3
    assert f["device_mib"] == 3890.25 and f["networks_mib"] == 1200.5 and f["strips"] is None
    assert f["held_mib"] is None
    assert (f["host_setup_s"], f["host_windows_s"], f["host_upload_s"], f["host_wait_s"], f["host_download_s"]) == \
        (0.125, 5.75, 0.25, 4.5, 0.375)
    assert len(f["summary_lines"]) == 2
    # Fields segrt may add, in other words.
    f = mc.parse_summary(GPU_SUMMARY.replace("in 3 passes", "in 1 pass, 6 strips, held 3950.5 MiB"))
    assert f["passes"] == 1 and f["strips"] == 6 and f["held_mib"] == 3950.5
    assert mc.parse_summary(GPU_SUMMARY.replace("in 3 passes", "held 3.5 GiB"))["held_mib"] == 3584.0
    # main's strips (040f701): printed where there are more than one.
    f = mc.parse_summary(GPU_SUMMARY.replace("2689.75)", "2689.75), 4 strips (shared sums: 812.50 MiB of host "
                                                          "memory)"))
    assert f["strips"] == 4 and f["shared_host_mib"] == 812.5 and f["device_mib"] == 3890.25 and f["passes"] == 3
    f = mc.parse_summary("segrt: x.npy 1x1x4x4 -> y.npy uint8 1x1x4x4: 4 windows (1 a run), cpu fp32, 0.010 s\n")
    assert f["windows"] == 4 and f["job_s"] == 0.01 and f["passes"] is None and f["device_mib"] is None
    for text in ("", None, "segrt: error: out of memory", "segrt: 12 windows (x a run), ?, abc s"):
        f = mc.parse_summary(text)
        assert f["job_s"] is None and f["passes"] is None


def test_configurations_and_command_lines():
    assert common.resolve_configs("1,budget_fp32,1") == ["nobudget_fp32", "budget_fp32"]
    assert common.resolve_configs("3,2") == ["budget_fp16acc", "nobudget_fp16acc"]
    with pytest.raises(ValueError, match="unknown configuration"):
        common.resolve_configs("5")
    paths = common.Paths(pathlib.Path("/w"))
    cuda = common.segrt_command("budget_fp16acc", "segrt", paths, common.FULL, "cuda", "fp16", 2, "/c", "4G")
    assert cuda[:6] == ["segrt", "run", "/w/model/net.onnx", "/w/case/image.npy", "-o", "/w/out/budget_fp16acc.npy"]
    joined = " ".join(cuda)
    for flag in ("--device cuda", "--precision fp16", "--roi 128,128,128", "--overlap 0.5", "--blend gaussian",
                 "--output labels", "--sw-batch 2", "--cache-dir /c", "--max-memory 4G", "--accumulator fp16"):
        assert flag in joined, (flag, joined)
    cpu = common.segrt_command("budget_fp16acc", "segrt", paths, common.TINY, "cpu", "fp16", 2, "/c", "4G")
    assert " ".join(cpu) == ("segrt run /w/model/net.onnx /w/case/image.npy -o /w/out/budget_fp16acc.npy "
                             "--device cpu --roi 32,32,32 --overlap 0.5 --blend gaussian --output labels --sw-batch 2")


def test_windows_and_flops_from_the_architecture():
    assert mc.monai_grid_windows((400, 512, 512), (128, 128, 128), 0.5) == 6 * 7 * 7
    for shape in [(400, 512, 512), (40, 64, 64), (100, 30, 129)]:
        n = 1
        for size, r in zip(shape, (32, 32, 32)):
            n *= len(ref.monai_starts(max(size, r), r, 0.5))
        assert mc.monai_grid_windows(shape, (32, 32, 32), 0.5) == n, shape
    # bench/volume_vs_monai's network (14 classes): 956 GFLOP a window by
    # torch's counter (its README); 101 classes add the head's share.
    fourteen = common.plain_unet_flops(dataclasses.replace(common.FULL, classes=14))
    assert round(fourteen / 1e6) == 956074
    assert common.plain_unet_flops(common.FULL) - fourteen == 2 * 128 ** 3 * 32 * 87


def test_case_is_deterministic_and_structured():
    a = make_case.make_volume(common.TINY, 0)
    assert a.shape == (40, 64, 64) and a.dtype == np.float32
    assert np.array_equal(a, make_case.make_volume(common.TINY, 0))
    assert not np.array_equal(a, make_case.make_volume(common.TINY, 1))
    hu = a * 400.0 + 100.0
    assert hu.min() >= -1000.5 and hu.max() <= 1500.5
    # Air outside the body, and each tissue level inside it in some voxels.
    assert abs(float(hu[0, 0, 0]) + 1000.0) < 40.0
    body = make_case.body_mask(common.TINY, 0, 40)
    for level, _ in make_case.LEVELS:
        assert np.count_nonzero(np.abs(hu[body] - level) < 30.0) > 50, level


def test_agreement(tmp_path):
    a = np.zeros((1, 1, 10, 10, 10), np.uint8)
    b = a.copy()
    b[0, 0, 3, 4, 5] = 7
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    np.save(tmp_path / "c.npy", a[:, :, :9])
    assert mc.agreement(tmp_path / "a.npy", tmp_path / "b.npy", chunk=64) == (0.999, None)
    ag, why = mc.agreement(tmp_path / "a.npy", tmp_path / "c.npy")
    assert ag is None and "shapes differ" in why
    ag, why = mc.agreement(tmp_path / "a.npy", tmp_path / "missing.npy")
    assert ag is None and why


FAKE_SEGRT = """#!{python}
# A stand-in for segrt run: sleeps, writes labels, prints a summary line
# with the fields the budget's strips may add; fails for one configuration.
import sys, time
import numpy as np
out = sys.argv[sys.argv.index("-o") + 1]
if out.endswith("nobudget_fp16acc.npy"):
    print("segrt: out of memory", file=sys.stderr)
    sys.exit(3)
time.sleep(0.2)
np.save(out, np.zeros((1, 1, 40, 64, 64), np.uint8))
print("segrt: in 1x1x40x64x64 -> " + out + " uint8 1x1x40x64x64: 18 windows (2 a run), cuda:0 fp16, 0.150 s, "
      "blended on the GPU in 2 passes, 4 strips, held 100.5 MiB")
"""


def test_budget_shares_and_a_failing_configuration(tmp_path):
    """--budget stops each configuration's timed runs at its share (one run
    at least), a configuration that fails is reported and the others run,
    and fields segrt may print later are read."""
    fake = tmp_path / "segrt"
    fake.write_text(FAKE_SEGRT.format(python=sys.executable))
    fake.chmod(0o755)
    out = tmp_path / "r.json"
    # Budget: the report's 20 s reserve + 10 s for making the tiny case and
    # model and runs of about half a second (a Python start, numpy, 0.2 s).
    p = subprocess.run([sys.executable, str(BENCH / "run.py"), "--tiny", "--segrt", str(fake), "--work",
                        str(tmp_path / "w"), "--out", str(out), "--configs", "1,2,4", "--runs", "100",
                        "--budget", "30"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads(out.read_text())
    for name in ("nobudget_fp32", "budget_fp32"):
        e = res["configs"][name]
        assert 1 <= e["timed_runs"] < 100 and "stopped" in e, e
        assert (e["passes"], e["strips"], e["held_mib"], e["held_mib_from"]) == (2, 4, 100.5, "held")
        assert e["median_job_s"] == 0.15 and e["agreement"] == 1.0
    # One warm-up (the plan's build), for the first configuration only.
    assert "first_run_s" in res["configs"]["nobudget_fp32"] and "first_run_s" not in res["configs"]["budget_fp32"]
    bad = res["configs"]["nobudget_fp16acc"]
    assert "exit 3" in bad["error"] and "out of memory" in bad["error"] and bad["timed_runs"] == 0
    assert "| 2 | nobudget_fp16acc | --accumulator fp16 (left out on a CPU) | failed: " in p.stdout, p.stdout
