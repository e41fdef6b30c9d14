"""Outputs: never redirected, never over an input, checked before the job,
and nothing left behind by an interrupted run (issue 36, items 1 to 4)."""
import os
import pathlib
import signal
import socket
import subprocess
import time

import numpy as np
import pytest

from conftest import MODELS, SEGRT, temporaries
from hostile_util import convnet, grey_png, image_npy


@pytest.fixture
def job(box):
    """A model and an image in the sandbox: `segrt run model.onnx x.npy
    --roi 16,16 -o OUT` makes a 1x2x32x32 float32 result."""
    convnet(box.path("model.onnx"))
    image_npy(box.path("x.npy"))
    return box


def sw(out, *more):
    return ["run", "model.onnx", "x.npy", "--roi", "16,16", "-o", out, *more]


# --- 1. outputs that cannot be redirected ----------------------------------------------------------------------


def test_link_at_the_destination_is_refused(job, tmp_path_factory):
    victim = tmp_path_factory.mktemp("elsewhere") / "victim.npy"
    victim.write_bytes(b"precious")
    os.symlink(victim, job.path("out.npy"))
    job.refused(sw("out.npy"), 2, "out.npy", "symbolic link", outside=[victim])
    os.symlink(victim.parent / "not-yet.npy", job.path("dangling.npy"))
    job.refused(sw("dangling.npy"), 2, "dangling.npy", "symbolic link", outside=[victim.parent / "not-yet.npy"])


def test_non_regular_destinations_are_refused(job):
    os.mkfifo(job.path("fifo.npy"))  # nobody reads it: opening it for writing would block
    job.refused(sw("fifo.npy"), 2, "fifo.npy", "FIFO", timeout=60)
    job.path("dir.npy").mkdir()
    job.refused(sw("dir.npy"), 2, "dir.npy", "folder")
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(job.path("sock.npy")))
    try:
        job.refused(sw("sock.npy"), 2, "sock.npy", "socket")
    finally:
        s.close()
    # /dev/null stays a device: refused, not replaced.
    job.refused(sw("/dev/null"), 2, "/dev/null", "device")
    assert pathlib.Path("/dev/null").is_char_device()


def test_links_planted_at_temporary_names_do_not_redirect(job, tmp_path_factory):
    """Temporary names are unpredictable and created exclusively; links at
    every name an older segrt or a guess would use leave their targets alone."""
    victim = tmp_path_factory.mktemp("elsewhere") / "victim"
    victim.write_bytes(b"precious")
    for name in ["out.npy.tmp", "out.npy.tmp.1", ".out.npy.segrt-0000000000000000", ".out.npy.segrt-",
                 "out.npy~", ".out.npy.swp"]:
        os.symlink(victim, job.path(name))
    job.succeeds(sw("out.npy"), ["out.npy"], outside=[victim])
    assert victim.read_bytes() == b"precious"
    assert np.load(job.path("out.npy")).shape == (1, 2, 32, 32)


def test_output_mode_and_replacement(job):
    """A new output is 0644 less the umask; an existing one is replaced
    whole (a rename), so its other hard links keep the old bytes."""
    old = os.umask(0o027)
    try:
        job.succeeds(sw("out.npy"), ["out.npy"])
    finally:
        os.umask(old)
    assert (job.path("out.npy").stat().st_mode & 0o777) == 0o640
    job.path("old.npy").write_bytes(b"old bytes")
    os.link(job.path("old.npy"), job.path("other-name.npy"))
    job.succeeds(sw("old.npy"), ["old.npy"])
    assert job.path("other-name.npy").read_bytes() == b"old bytes"
    assert np.load(job.path("old.npy")).shape == (1, 2, 32, 32)


# --- 2. never overwrite your own inputs -----------------------------------------------------------------------


def test_output_that_is_an_input_is_refused(job):
    job.refused(sw("x.npy"), 2, "x.npy", "same file", "the image")
    job.refused(sw("./x.npy"), 2, "x.npy", "same file")
    job.path("sub").mkdir()
    job.refused(sw("sub/../x.npy"), 2, "x.npy", "same file")
    os.link(job.path("x.npy"), job.path("hard.npy"))
    job.refused(sw("hard.npy"), 2, "hard.npy", "same file", "x.npy")
    # The model, an ensemble member, a plain run's input.
    convnet(job.path("other.onnx"), seed=1)
    os.link(job.path("model.onnx"), job.path("model-link.npy"))
    job.refused(sw("model-link.npy"), 2, "model-link.npy", "same file", "model")
    os.link(job.path("other.onnx"), job.path("member.npy"))
    job.refused(sw("member.npy", "--model", "other.onnx"), 2, "member.npy", "same file", "other.onnx")
    job.refused(["run", "model.onnx", "--input", "x.npy", "--output", "x.npy"], 2, "x.npy", "same file")


def test_two_outputs_of_one_run_are_refused(job):
    grey_png(job.path("img.png"))
    meta = {"segrt.roi": "16,16"}
    convnet(job.path("m.onnx"), metadata=meta)
    job.refused(["run", "m.onnx", "img.png", "-o", "l.png", "--overlay", "./l.png"], 2, "l.png", "same file")
    job.refused(["run", "model.onnx", "--input", "x.npy", "--output", "y.npy", "--output", "y.npy"], 2,
                "y.npy", "same file")


# --- 3. every output checked before the job -------------------------------------------------------------------


def test_output_problems_are_found_before_any_work(job):
    """The image does not exist: a job that started would fail on it. Each
    of these fails on the output instead, so the output came first."""
    bad_job = ["run", "model.onnx", "missing.npy", "--roi", "16,16", "-o"]
    job.refused(bad_job + ["nodir/out.npy"], 2, "nodir/out.npy", "does not exist")
    job.refused(bad_job + ["out.xyz"], 2, "out.xyz", ".npy", "does not write .xyz")
    job.refused(bad_job + ["out"], 2, "out", "no extension")
    job.refused(bad_job + ["out.npy", "--overlay", "o.jpg"], 2, "o.jpg", ".png")
    job.refused(bad_job + ["x.npy/out.npy"], 2, "x.npy/out.npy", "not a folder")
    job.refused(["run", "model.onnx", "--input", "missing.npy", "--output", "y.txt"], 2, "y.txt", ".npy")
    job.refused(["build", "model.onnx", "-o", "model.engine"], 2, "model.engine", ".plan")
    job.refused(["build", "model.onnx", "-o", "nodir/model.plan"], 2, "nodir/model.plan", "does not exist")


def drop_dac_override():
    """Runs in the child before exec: as root, take CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH out of the capability bounding set, so that the
    exec'd segrt is held to permission bits like any user."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_unwritable_folder_is_found_before_any_work(job):
    ro = job.path("ro")
    ro.mkdir()
    os.chmod(ro, 0o555)
    kw = {"preexec_fn": drop_dac_override} if os.geteuid() == 0 else {}
    job.refused(["run", "model.onnx", "missing.npy", "--roi", "16,16", "-o", "ro/out.npy"], 2, "ro/out.npy",
                "cannot write in the folder", **kw)


# --- 4. interrupted runs leave nothing behind -----------------------------------------------------------------


def long_job(box):
    """A job of several seconds on one thread, writing out.npy."""
    image_npy(box.path("big.npy"), (1, 1, 1024, 1024))
    return [SEGRT, "run", str(MODELS / "basicunet2d_tiny.onnx"), "big.npy", "--roi", "96,96", "--threads", "1",
            "-o", "out.npy"]


def wait_for_temporary(root, proc, seconds=120):
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if temporaries(root):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signal_removes_temporaries_and_keeps_the_previous_file(box, sig):
    cmd = long_job(box)
    box.path("out.npy").write_bytes(b"the previous result")
    proc = subprocess.Popen(cmd, cwd=box.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert wait_for_temporary(box.root, proc), "the run made no temporary file"
        proc.send_signal(sig)
        proc.wait(timeout=120)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == -sig
    assert box.path("out.npy").read_bytes() == b"the previous result"
    assert temporaries(box.root) == []


def test_after_kill_9_a_later_run_ignores_the_stale_temporary(box):
    cmd = long_job(box)
    proc = subprocess.Popen(cmd, cwd=box.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert wait_for_temporary(box.root, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=120)
    finally:
        proc.kill()
        proc.communicate()
    stale = temporaries(box.root)
    assert len(stale) == 1 and not box.path("out.npy").exists()
    stale_bytes = pathlib.Path(stale[0]).read_bytes()
    convnet(box.path("model.onnx"))
    image_npy(box.path("x.npy"))
    r = box.run(*sw("out.npy"))
    assert r.code == 0, r.stderr
    assert np.load(box.path("out.npy")).shape == (1, 2, 32, 32)
    assert temporaries(box.root) == stale and pathlib.Path(stale[0]).read_bytes() == stale_bytes
