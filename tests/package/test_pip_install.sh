#!/usr/bin/env bash
# `pip install` of the Python package from a clean copy of the tree (the
# files git tracks, not a build folder), offline: a throwaway virtual
# environment that sees the project's .venv packages (numpy,
# scikit-build-core) through a .pth file, pip install --no-build-isolation
# without CUDA (a CUDA build takes half an hour on two cores; the GPU
# machine tests the CUDA package from the carried build), then the
# README's three lines on a test model against its reference pair, from
# the installed package (libsegrt.so.0 inside it, found through $ORIGIN).
#   usage: test_pip_install.sh ROOT MODELS VENV_PYTHON
set -euo pipefail
root=$1 models=$2 venv_py=$3
work=$(mktemp -d /tmp/segrt-pip-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir "$work/src"
git -C "$root" ls-files -z | (cd "$root" && xargs -0 cp --parents -t "$work/src" 2>/dev/null || true)
[ -f "$work/src/pyproject.toml" ] || { echo "no pyproject.toml in the copy"; exit 1; }
base=$("$venv_py" -c 'import sys; print(sys._base_executable)')
"$base" -m venv "$work/venv"
site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$venv_py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' >"$site/project-venv.pth"
defines=(-C cmake.define.SEGRT_CUDA=OFF)
command -v ccache >/dev/null && defines+=(-C cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache)
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps --no-index \
    "${defines[@]}" "$work/src"
cd "$work"
"$work/venv/bin/python" - "$models" <<'PY'
import pathlib, sys
import numpy as np
models = pathlib.Path(sys.argv[1])

import segrt
with segrt.Engine(models / "basicunet2d_tiny.onnx") as engine:
    y = engine(np.load(models / "basicunet2d_tiny.in.npy"))

pkg = pathlib.Path(segrt.__file__).parent
assert "site-packages" in str(pkg), pkg
assert (pkg / "libsegrt.so.0").is_file() and list(pkg.glob("_segrt.abi3.so")), sorted(pkg.iterdir())
m = segrt.compare(y, np.load(models / "basicunet2d_tiny.out.npy"))
assert m["rel_l2"] < 1e-5, m
print(f"installed segrt {segrt.__version__} in {pkg}: rel_l2 {m['rel_l2']:.3g} against the reference")
PY
readelf -d "$("$work/venv/bin/python" -c 'import segrt, pathlib; print(next(pathlib.Path(segrt.__file__).parent.glob("_segrt*.so")))')" \
    | grep -q 'R.*PATH.*\$ORIGIN' || { echo "the extension has no \$ORIGIN RPATH"; exit 1; }
echo "1 passed, 0 failed"
