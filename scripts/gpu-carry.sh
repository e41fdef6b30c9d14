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
# The race, device-memory and streamed-window tests (statically linked, a
# third of the archive): GPU_CARRY_RACE=0 leaves them out where a run does
# not need them and the models would not fit beside them.
# GPU_CARRY_TESTS="test_gpu_race ..." carries only those of them.
bins="segrt"
if [ "${GPU_CARRY_RACE:-1}" != 0 ]; then
    for t in ${GPU_CARRY_TESTS:-test_gpu_race test_device_memory test_gpu_sw_stream}; do
        cp "$build/tests/$t" $stage/ 2>/dev/null || cp "$build/$t" $stage/
        bins="$bins $t"
    done
fi
# onnx2torch (pure Python, from PyPI) builds the PyTorch side of bench/gpu_vs_pytorch.py
# from the same ONNX files; the GPU machine has no package index.
mkdir -p $stage/wheels
python3 -m pip download --no-deps -q -d $stage/wheels onnx2torch==1.5.15 2>/dev/null ||
    cp /tmp/wheels/onnx2torch-*.whl $stage/wheels/ 2>/dev/null || echo "gpu-carry: no onnx2torch wheel (bench/gpu_vs_pytorch.py will not run)" >&2
# GPU_CARRY_CLI_ONLY=1: the segrt command alone (it links libsegrt
# statically), without libsegrt.so and the Python package, which the tests
# need and the benchmarks of `gpu-check.sh bench|archs|profile` do not: room
# for the benchmark models within the device tool's 64 MiB.
[ "${GPU_CARRY_CLI_ONLY:-0}" = 1 ] || cp -L "$build/libsegrt.so.0" $stage/lib/
# The Python package staged by the build (SEGRT_PYTHON), for `gpu-check.sh
# python`: its extension finds libsegrt.so.0 in lib/ through LD_LIBRARY_PATH.
if [ -d "$build/python/segrt" ] && [ "${GPU_CARRY_CLI_ONLY:-0}" != 1 ]; then
    mkdir -p $stage/python/segrt
    cp "$build"/python/segrt/*.py "$build"/python/segrt/*.pyi "$build"/python/segrt/py.typed \
        "$build"/python/segrt/_segrt.abi3.so $stage/python/segrt/
fi
# Every library the binary and libsegrt load, except the C runtime, the
# compression libraries and the CUDA libraries the GPU machine has.
system='^(linux-vdso|ld-linux|(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libz|libzstd|liblzma|libOpenCL)[.]|libcud|libcublas|libnv)'
ldd "$build/segrt" "$build/libsegrt.so.0" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
    while read -r name path; do
        [[ $name =~ $system ]] || cp -L "$path" $stage/lib/
    done
# GPU_CARRY_MODELS="basicunet2d unet3d_spleen" carries only those models,
# "none" none (the tests make their own): the device tool carries 64 MiB.
if [ -z "${GPU_CARRY_MODELS:-}" ]; then
    cp "$models"/*.onnx "$models"/*.npy $stage/models/
elif [ "$GPU_CARRY_MODELS" != none ]; then
    for m in $GPU_CARRY_MODELS; do cp "$models/$m".* $stage/models/; done
fi
# GPU_CARRY_STRIP=1 drops symbol tables (a few MiB a binary) where the
# archive would not fit the device tool's 64 MiB beside the tree.
if [ "${GPU_CARRY_STRIP:-0}" = 1 ]; then
    { [ ! -f $stage/lib/libsegrt.so.0 ] || strip --strip-unneeded $stage/lib/libsegrt.so.0; } &&
        for b in $bins; do strip $stage/$b; done
fi
# One xz archive: oneDNN alone is larger than the device tool carries raw.
mkdir -p .carry
tar -C $stage -cJf .carry/segrt-carry.tar.xz $bins lib models wheels $(cd $stage && ls -d python 2>/dev/null)
rm -rf $stage
# GPU_CARRY_OLD=DIR (a `segrt` built from an earlier commit; it links
# libsegrt statically and takes the other libraries from this build's lib/):
# carried beside as segrt-old.tar.xz for `gpu-check.sh ab`, old and new in one run.
if [ -n "${GPU_CARRY_OLD:-}" ]; then
    tar -C "$GPU_CARRY_OLD" -cJf .carry/segrt-old.tar.xz segrt
fi
du -sh .carry
