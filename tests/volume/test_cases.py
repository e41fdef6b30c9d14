"""`segrt run MODEL -i IN_DIR -o OUT_DIR`: every case of a folder (NIfTI
files, nnU-Net's CASE_XXXX channel files, subfolders of DICOM series)
through one window job. Each result is checked against the single-case
job on the same input (`segrt run MODEL CASE -o OUT`, itself tested
against NPY, nibabel and SimpleITK in test_window_volume.py); a broken
case fails alone; summary.json is read back; --continue and prefetch are
checked by their effects on the files."""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

from conftest import HAVE_DICOM, HAVE_NIFTI, ROOT

if not HAVE_NIFTI:
    pytest.skip("a build without NIfTI (test_volume_builds.py checks it refuses)", allow_module_level=True)
nib = pytest.importorskip("nibabel")

SEGRT = os.environ.get("SEGRT", str(ROOT / "build" / "segrt"))
MODELS = pathlib.Path(os.environ.get("SEGRT_MODELS") or ROOT / "build" / "test-models")
MODEL = MODELS / "unet3d_spleen.onnx"
WINDOW = ["--roi", "16,16,16", "--overlap", "0.25"]


def segrt(*args, check=0):
    p = subprocess.run([SEGRT, *map(str, args)], capture_output=True, text=True, timeout=600)
    if check is not None:
        assert p.returncode == check, f"exit {p.returncode}: {p.stderr}{p.stdout}"
    return p


def folder_job(model, in_dir, out_dir, *more, check=0):
    return segrt("run", model, "-i", in_dir, "-o", out_dir, *WINDOW, *more, check=check)


def single_job(model, image, out, *more):
    return segrt("run", model, image, "-o", out, *WINDOW, "--output", "labels", *more)


def save_nifti(path, data, affine, sform=2, qform=1):
    img = nib.Nifti1Image(np.asarray(data, np.float32), affine)
    img.set_sform(affine, code=sform)
    img.set_qform(affine, code=qform)
    nib.save(img, path)


def affine_of(seed):
    rng = np.random.default_rng(seed)
    a = np.diag([0.8, 0.9, 2.5, 1.0])
    a[:3, :3] += rng.normal(0, 0.05, (3, 3))
    a[:3, 3] = rng.normal(0, 20, 3)
    return a


def summary(out_dir):
    return json.loads((pathlib.Path(out_dir) / "summary.json").read_text())


def leftovers(folder):
    """Temporary files of outputs (".NAME.segrt-...") left in folder."""
    return [p.name for p in pathlib.Path(folder).iterdir() if ".segrt-" in p.name]


def truncated_copy(src, dst):
    data = pathlib.Path(src).read_bytes()
    pathlib.Path(dst).write_bytes(data[: len(data) // 2])


def test_nifti_cases_equal_single_runs_and_a_broken_one_fails_alone(tmp_path):
    rng = np.random.default_rng(3)
    cases = tmp_path / "in"
    cases.mkdir()
    shapes = {"liver_001": (20, 18, 10), "liver_002": (24, 17, 12), "zz_last": (16, 20, 9)}
    for k, (name, shape) in enumerate(shapes.items()):
        save_nifti(cases / f"{name}.nii.gz", rng.normal(0, 1, shape), affine_of(k))
    truncated_copy(cases / "liver_001.nii.gz", cases / "broken.nii.gz")
    (cases / "notes.txt").write_text("not a case")
    (cases / "empty_folder").mkdir()  # no DICOM in it: not a case
    out = tmp_path / "out"

    p = folder_job(MODEL, cases, out, check=1)
    assert "broken" in p.stderr and "1 of 4 cases failed" in p.stderr, p.stderr
    assert sorted(x.name for x in out.iterdir()) == sorted([f"{n}.nii.gz" for n in shapes] + ["summary.json"])
    for name in shapes:
        single_job(MODEL, cases / f"{name}.nii.gz", tmp_path / f"{name}.single.nii.gz")
        assert (out / f"{name}.nii.gz").read_bytes() == (tmp_path / f"{name}.single.nii.gz").read_bytes(), name

    s = summary(out)
    assert [c["name"] for c in s["cases"]] == ["broken", "liver_001", "liver_002", "zz_last"]  # byte order of names
    by = {c["name"]: c for c in s["cases"]}
    assert by["broken"]["status"] == "failed" and "broken.nii.gz" in by["broken"]["error"]
    assert by["broken"]["shape"] is None and by["broken"]["output"].endswith("broken.nii.gz")
    assert not (out / "broken.nii.gz").exists()
    for k, (name, shape) in enumerate(shapes.items()):
        c = by[name]
        ref = nib.load(cases / f"{name}.nii.gz")
        assert c["status"] == "done" and c["error"] is None
        assert c["inputs"] == [str(cases / f"{name}.nii.gz")] and c["output"] == str(out / f"{name}.nii.gz")
        assert c["shape"]["dims"] == list(shape[::-1]) and c["shape"]["channels"] == 1
        np.testing.assert_allclose(c["shape"]["spacing"], np.asarray(ref.header.get_zooms())[::-1], rtol=1e-5)
        t = c["seconds"]
        assert all(t[k] >= 0 for k in ("read", "wait", "run", "windows", "write", "total"))
        assert t["total"] >= t["run"] >= t["windows"] > 0
    assert s["totals"] == {**s["totals"], "cases": 4, "done": 3, "skipped": 0, "failed": 1, "pending": 0}
    assert leftovers(out) == [] and leftovers(cases) == []


def test_continue_skips_finished_cases_and_redoes_missing_ones(tmp_path):
    rng = np.random.default_rng(4)
    cases = tmp_path / "in"
    cases.mkdir()
    for k in range(3):
        save_nifti(cases / f"c{k}.nii.gz", rng.normal(0, 1, (18, 16, 9)), affine_of(k))
    out = tmp_path / "out"
    folder_job(MODEL, cases, out)
    first = {k: (out / f"c{k}.nii.gz").read_bytes() for k in range(3)}
    os.utime(out / "c0.nii.gz", ns=(10**18, 10**18))  # a mark a rewrite would lose
    os.utime(out / "c2.nii.gz", ns=(10**18, 10**18))
    (out / "c1.nii.gz").unlink()

    p = folder_job(MODEL, cases, out, "--continue")
    assert "skipped" in p.stdout
    for k in (0, 2):
        assert (out / f"c{k}.nii.gz").stat().st_mtime_ns == 10**18
    assert (out / "c1.nii.gz").read_bytes() == first[1]
    s = summary(out)
    assert [c["status"] for c in s["cases"]] == ["skipped", "done", "skipped"]
    assert s["totals"]["skipped"] == 2 and s["totals"]["done"] == 1

    # Without --continue every case is run again and rewritten.
    folder_job(MODEL, cases, out)
    assert (out / "c0.nii.gz").stat().st_mtime_ns != 10**18
    assert leftovers(out) == []


def test_prefetch_and_no_prefetch_give_the_same_files(tmp_path):
    rng = np.random.default_rng(5)
    cases = tmp_path / "in"
    cases.mkdir()
    for k, shape in enumerate([(20, 18, 10), (16, 16, 16), (30, 12, 8), (17, 19, 11)]):
        save_nifti(cases / f"p{k}.nii.gz", rng.normal(0, 1, shape), affine_of(k))
    truncated_copy(cases / "p1.nii.gz", cases / "p2b.nii.gz")  # a failure between two cases read ahead
    a, b = tmp_path / "a", tmp_path / "b"
    folder_job(MODEL, cases, a, check=1)
    folder_job(MODEL, cases, b, "--no-prefetch", check=1)
    names = sorted(x.name for x in a.iterdir() if x.name != "summary.json")
    assert names == [f"p{k}.nii.gz" for k in range(4)]
    assert names == sorted(x.name for x in b.iterdir() if x.name != "summary.json")
    for n in names:
        assert (a / n).read_bytes() == (b / n).read_bytes(), n
    sa, sb = summary(a), summary(b)
    assert [(c["name"], c["status"], c["error"], c["shape"]) for c in sa["cases"]] == \
        [(c["name"], c["status"], c["error"], c["shape"]) for c in sb["cases"]]


def two_channel_model(path):
    """A 3-D convolution from 2 channels to 3 classes, random weights."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(11)
    w = numpy_helper.from_array(rng.normal(0, 0.5, (3, 2, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.normal(0, 0.1, 3).astype(np.float32), "b")
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1] * 6, kernel_shape=[3, 3, 3])
    g = helper.make_graph([node], "two_channels",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, "D", "H", "W"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, "D", "H", "W"])], [w, b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def test_nnunet_channel_files_are_stacked_and_gaps_or_mismatches_fail_their_case(tmp_path):
    model = two_channel_model(tmp_path / "two.onnx")
    rng = np.random.default_rng(6)
    cases = tmp_path / "in"
    cases.mkdir()
    vols = {}
    for k, name in enumerate(["BraTS_001", "BraTS_002"]):
        shape = (20 + k, 18, 11)
        vols[name] = [rng.normal(0, 1, shape) for _ in range(2)]
        for ch, v in enumerate(vols[name]):
            save_nifti(cases / f"{name}_{ch:04d}.nii.gz", v, affine_of(k))
    save_nifti(cases / "gap_0000.nii.gz", rng.normal(0, 1, (16, 16, 8)), affine_of(0))
    save_nifti(cases / "gap_0002.nii.gz", rng.normal(0, 1, (16, 16, 8)), affine_of(0))
    save_nifti(cases / "moved_0000.nii.gz", rng.normal(0, 1, (16, 16, 8)), affine_of(0))
    save_nifti(cases / "moved_0001.nii.gz", rng.normal(0, 1, (16, 16, 8)), affine_of(1))  # another grid
    save_nifti(cases / "sized_0000.nii.gz", rng.normal(0, 1, (16, 16, 8)), affine_of(0))
    save_nifti(cases / "sized_0001.nii.gz", rng.normal(0, 1, (16, 16, 9)), affine_of(0))
    out = tmp_path / "out"
    p = folder_job(model, cases, out, check=1)
    for name in ("gap", "moved", "sized"):
        assert name in p.stderr.splitlines()[-1], p.stderr
    by = {c["name"]: c for c in summary(out)["cases"]}
    assert "gap_0001" in by["gap"]["error"] and "gap_0002" in by["gap"]["error"]
    assert "moved_0001" in by["moved"]["error"] and "sized_0001" in by["sized"]["error"]
    assert not any((out / f"{n}.nii.gz").exists() for n in ("gap", "moved", "sized"))

    for k, (name, chans) in enumerate(vols.items()):
        assert by[name]["status"] == "done" and by[name]["shape"]["channels"] == 2
        assert by[name]["inputs"] == [str(cases / f"{name}_{c:04d}.nii.gz") for c in range(2)]
        # The same channels as one 4-D NIfTI (a volume per channel) through the single-case job.
        ref = tmp_path / f"{name}.4d.nii.gz"
        save_nifti(ref, np.stack(chans, axis=-1), affine_of(k))
        single_job(model, ref, tmp_path / f"{name}.single.nii.gz")
        got, want = nib.load(out / f"{name}.nii.gz"), nib.load(tmp_path / f"{name}.single.nii.gz")
        assert np.array_equal(np.asarray(got.dataobj), np.asarray(want.dataobj))
        assert np.allclose(got.affine, affine_of(k), atol=1e-5) and got.shape == chans[0].shape
        # And by hand: argmax of the convolution over the stacked channels differs from either channel alone.
        assert len(np.unique(np.asarray(got.dataobj))) > 1


def test_a_name_claimed_twice_fails_its_case(tmp_path):
    rng = np.random.default_rng(7)
    cases = tmp_path / "in"
    cases.mkdir()
    save_nifti(cases / "twice.nii.gz", rng.normal(0, 1, (16, 16, 8)), affine_of(0))
    save_nifti(cases / "twice.nii", rng.normal(0, 1, (16, 16, 8)), affine_of(0))
    save_nifti(cases / "once.nii", rng.normal(0, 1, (16, 16, 8)), affine_of(0))
    out = tmp_path / "out"
    p = folder_job(MODEL, cases, out, "--ext", ".nii", check=1)
    assert "twice" in p.stderr.splitlines()[-1]
    by = {c["name"]: c for c in summary(out)["cases"]}
    assert by["once"]["status"] == "done" and (out / "once.nii").exists()
    assert "claimed by both" in by["twice"]["error"]


@pytest.mark.skipif(not HAVE_DICOM, reason="a build without DICOM")
def test_dicom_subfolders_are_cases(tmp_path):
    from dicom_synth import write_series
    cases = tmp_path / "in"
    cases.mkdir()
    iop = [0.96, 0.28, 0.0, -0.28, 0.96, 0.0]
    write_series(cases / "patient_a" / "ct", n=14, rows=20, cols=18, iop=iop, order="shuffled")
    write_series(cases / "patient_b", n=12, rows=17, cols=21, seed=2)
    save_nifti(cases / "patient_c.nii.gz", np.random.default_rng(8).normal(0, 1, (18, 16, 9)), affine_of(2))
    out = tmp_path / "out"
    folder_job(MODEL, cases, out)
    by = {c["name"]: c for c in summary(out)["cases"]}
    assert [by[n]["status"] for n in ("patient_a", "patient_b", "patient_c")] == ["done"] * 3
    assert by["patient_a"]["kind"] == "dicom" and by["patient_a"]["inputs"] == [str(cases / "patient_a")]
    assert by["patient_a"]["shape"]["dims"] == [14, 20, 18]
    for n in ("patient_a", "patient_b"):
        single_job(MODEL, cases / n, tmp_path / f"{n}.single.nii.gz")
        assert (out / f"{n}.nii.gz").read_bytes() == (tmp_path / f"{n}.single.nii.gz").read_bytes(), n


def test_bad_command_lines_exit_2(tmp_path):
    cases = tmp_path / "in"
    cases.mkdir()
    p = folder_job(MODEL, cases, tmp_path / "out", check=2)
    assert "no cases" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    save_nifti(cases / "a.nii.gz", np.zeros((16, 16, 8)), np.eye(4))
    p = folder_job(MODEL, cases, cases, check=2)
    assert "folder of cases" in p.stderr
    p = segrt("run", MODELS / "missing.onnx", "-i", cases, "-o", tmp_path / "out", *WINDOW, check=2)
    p = folder_job(MODEL, cases, tmp_path / "o2", "--ext", ".npy", check=2)
    assert "--ext" in p.stderr
    # A mistyped extension is not taken for a folder to create.
    p = folder_job(MODEL, cases, tmp_path / "labels.txt", check=2)
    assert "labels.txt" in p.stderr and not (tmp_path / "labels.txt").exists()
    folder_job(MODEL, cases, str(tmp_path / "made") + "/")
    assert (tmp_path / "made" / "a.nii.gz").exists()
    h = segrt("run", "--help")
    assert "-i IN_DIR -o OUT_DIR" in h.stdout and "--continue" in h.stdout and "--no-prefetch" in h.stdout


def test_the_case_read_ahead_counts_in_the_host_memory_check(tmp_path):
    import re
    rng = np.random.default_rng(9)
    cases = tmp_path / "in"
    cases.mkdir()
    for k in range(2):
        save_nifti(cases / f"m{k}.nii.gz", rng.normal(0, 1, (20, 18, 10)), affine_of(k))
    # What one case needs alone, from the check's own message.
    p = folder_job(MODEL, cases, tmp_path / "tiny", "--max-host-memory", "40K", "--no-prefetch", check=1)
    need_kib = int(re.search(r"the job needs (\d+) KiB", p.stderr).group(1))
    ahead = 20 * 18 * 10 * 4 * 2  # m1 as float32 and as stored (float32)
    # Enough for a case alone, not with the next one read ahead beside it:
    # the first runs alone, saying so, and the next is read after it.
    limit = need_kib * 1024 + ahead // 3
    p = folder_job(MODEL, cases, tmp_path / "tight", "--max-host-memory", limit)
    assert "case m0 runs alone" in p.stderr and "m1 runs alone" not in p.stderr, p.stderr
    folder_job(MODEL, cases, tmp_path / "plain", "--max-host-memory", limit, "--no-prefetch")
    for k in range(2):
        assert (tmp_path / "tight" / f"m{k}.nii.gz").read_bytes() == (tmp_path / "plain" / f"m{k}.nii.gz").read_bytes()
    p = folder_job(MODEL, cases, tmp_path / "roomy", "--max-host-memory", limit + 2 * ahead)
    assert "runs alone" not in p.stderr
    # Reading a case alone past the limit fails that case, naming the limit.
    p = folder_job(MODEL, cases, tmp_path / "none", "--max-host-memory", "1K", check=1)
    assert "--max-host-memory" in p.stderr and "2 of 2 cases failed" in p.stderr


@pytest.mark.skipif(not HAVE_DICOM, reason="a build without DICOM")
def test_a_dicom_case_with_a_missing_slice_fails_unless_allow_uneven(tmp_path):
    from dicom_synth import write_series
    cases = tmp_path / "in"
    cases.mkdir()
    write_series(cases / "gapped", n=14, rows=18, cols=16, skip=(5,))
    write_series(cases / "whole", n=12, rows=17, cols=16, seed=3)
    p = folder_job(MODEL, cases, tmp_path / "strict", check=1)
    assert "1 of 2 cases failed: gapped" in p.stderr, p.stderr
    by = {c["name"]: c for c in summary(tmp_path / "strict")["cases"]}
    assert by["whole"]["status"] == "done" and "--allow-uneven" in by["gapped"]["error"]
    # Resampled to even spacing, the reader's notice on stderr (read by the
    # prefetch thread, told on the calling thread), as the single-case job.
    p = folder_job(MODEL, cases, tmp_path / "even", "--allow-uneven")
    assert "resampled" in p.stderr, p.stderr
    single_job(MODEL, cases / "gapped", tmp_path / "gapped.single.nii.gz", "--allow-uneven")
    assert (tmp_path / "even" / "gapped.nii.gz").read_bytes() == (tmp_path / "gapped.single.nii.gz").read_bytes()
