#!/usr/bin/env bash
# Prepares .carry/ for scripts/gpu-check.sh: the segrt binary and library
# built here with CUDA, the GPU race test, the non-system libraries they
# need (the GPU machine has no Debian package registry) and the benchmarks'
# models (../shared/models), as one archive that gpu-check.sh unpacks. The
# tests' models are not carried: gpu-check.sh generates them on the GPU
# machine with tests/models/make_models.py (its python3 has numpy, onnx and
# onnxruntime), as ctest does here. .carry/ is git-ignored and named in the
# device tool's carry list.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
models=${2:-../shared/models}
rm -rf .carry /tmp/segrt-carry-stage
stage=/tmp/segrt-carry-stage
mkdir -p $stage/lib $stage/models
cp "$build/segrt" $stage/
# The race and device-memory tests (the race test is statically linked, a
# third of the archive): GPU_CARRY_RACE=0 leaves them out where a run does
# not need them and the models would not fit beside them.
bins="segrt"
if [ "${GPU_CARRY_RACE:-1}" != 0 ]; then
    cp "$build/tests/test_gpu_race" $stage/ 2>/dev/null || cp "$build"/test_gpu_race $stage/
    cp "$build/tests/test_device_memory" $stage/ 2>/dev/null || cp "$build"/test_device_memory $stage/
    bins="segrt test_gpu_race test_device_memory"
fi
# onnx2torch (pure Python, from PyPI) builds the PyTorch side of bench/gpu_vs_pytorch.py
# from the same ONNX files; the GPU machine has no package index.
mkdir -p $stage/wheels
python3 -m pip download --no-deps -q -d $stage/wheels onnx2torch==1.5.15 2>/dev/null ||
    cp /tmp/wheels/onnx2torch-*.whl $stage/wheels/ 2>/dev/null || echo "gpu-carry: no onnx2torch wheel (bench/gpu_vs_pytorch.py will not run)" >&2
cp -L "$build/libsegrt.so.0" $stage/lib/
# Every library the binary and libsegrt load, except the C runtime, the
# compression libraries and the CUDA libraries the GPU machine has.
system='^(linux-vdso|ld-linux|(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libz|libzstd|liblzma|libOpenCL)[.]|libcud|libcublas|libnv)'
ldd "$build/segrt" "$build/libsegrt.so.0" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
    while read -r name path; do
        [[ $name =~ $system ]] || cp -L "$path" $stage/lib/
    done
cp "$models"/*.onnx "$models"/*.npy $stage/models/
# One xz archive: oneDNN alone is larger than the device tool carries raw.
mkdir -p .carry
tar -C $stage -cJf .carry/segrt-carry.tar.xz $bins lib models wheels
rm -rf $stage
# GPU_CARRY_OLD=DIR (a `segrt` built from an earlier commit, with its lib/):
# carried beside as segrt-old.tar.xz for `gpu-check.sh ab`, old and new in one run.
if [ -n "${GPU_CARRY_OLD:-}" ]; then
    tar -C "$GPU_CARRY_OLD" -cJf .carry/segrt-old.tar.xz segrt lib
fi
du -sh .carry
