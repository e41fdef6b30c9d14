"""The hostile-input suite: segrt run as a careless or a hostile user would.

Every case runs the segrt command in a sandbox folder holding everything
the run reads, and asserts three things:
  - the exit code (2 for bad usage or input, 1 for a runtime failure);
  - the message: one line on stderr, "segrt: ...", naming the file or the
    option concerned and the problem;
  - that no file changed but the run's declared outputs: every file in the
    sandbox (and any outside file a case names as a victim) has the same
    kind, bytes and mode afterwards, nothing new appeared, and no
    temporary ".NAME.segrt-*" file was left.

tests/python's fixtures (the segrt binary, the test models) are shared, as
tests/cli does."""
import dataclasses
import hashlib
import importlib.util
import os
import pathlib
import stat
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
PY_TESTS = HERE.parent / "python"
if str(PY_TESTS) not in sys.path:
    sys.path.insert(0, str(PY_TESTS))

_spec = importlib.util.spec_from_file_location("segrt_python_conftest", PY_TESTS / "conftest.py")
_py_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_py_conftest)
SEGRT = _py_conftest.SEGRT
MODELS = _py_conftest.MODELS
SANITIZED = _py_conftest.SANITIZED
run_segrt = _py_conftest.run_segrt
models = _py_conftest.models


def entry(path):
    """What a name is: kind, mode and content (or link target)."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return ("link", os.readlink(path))
    if stat.S_ISREG(st.st_mode):
        return ("file", stat.S_IMODE(st.st_mode), hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest())
    return ("other", stat.S_IFMT(st.st_mode))


def snapshot(root, extra=()):
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            out[p] = entry(p)
    for p in extra:
        out[str(p)] = entry(p) if os.path.lexists(p) else None
    return out


@dataclasses.dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    @property
    def message(self):
        return self.stderr.strip()


class Sandbox:
    """A folder for one case's files, and the segrt command run in it."""

    def __init__(self, root: pathlib.Path):
        self.root = root

    def path(self, name):
        return self.root / name

    def write(self, name, data: bytes):
        p = self.root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        return p

    def run(self, *args, timeout=600, env=None, preexec_fn=None):
        e = dict(os.environ)
        e.update(env or {})
        p = subprocess.run([SEGRT, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                           cwd=self.root, env=e, preexec_fn=preexec_fn)
        return Result(p.returncode, p.stdout, p.stderr)

    def refused(self, args, code, *words, outside=(), **kw):
        """Runs segrt, which must fail with `code` and one line holding
        every word (case-insensitive), changing no file at all."""
        before = snapshot(self.root, outside)
        r = self.run(*args, **kw)
        lines = r.stderr.strip().splitlines()
        assert r.code == code, f"exit {r.code}, want {code}: {r.stderr}{r.stdout}"
        assert len(lines) == 1, f"want one line on stderr, got: {r.stderr!r}"
        assert lines[0].startswith("segrt: "), lines[0]
        for w in words:
            assert str(w).lower() in lines[0].lower(), f"{w!r} not in {lines[0]!r}"
        after = snapshot(self.root, outside)
        assert after == before, f"files changed: {changes(before, after)}"
        return r

    def succeeds(self, args, outputs, outside=(), **kw):
        """Runs segrt, which must succeed changing only `outputs` (names in
        the sandbox) and leaving no temporary file."""
        before = snapshot(self.root, outside)
        planted = temporaries(self.root)
        r = self.run(*args, **kw)
        assert r.code == 0, f"exit {r.code}: {r.stderr}"
        after = snapshot(self.root, outside)
        allowed = {str(self.root / o) for o in outputs}
        diff = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
        assert diff <= allowed, f"changed besides the outputs: {sorted(diff - allowed)}"
        assert temporaries(self.root) == planted, temporaries(self.root)
        return r


def changes(before, after):
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def temporaries(root):
    return sorted(str(p) for p in pathlib.Path(root).rglob(".*.segrt-*"))


@pytest.fixture
def box(tmp_path):
    return Sandbox(tmp_path)
