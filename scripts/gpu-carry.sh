#!/usr/bin/env bash
# Prepares .carry/ for scripts/gpu-check.sh: the segrt binary and library
# built here with CUDA, the GPU race test, the non-system libraries they
# need (the GPU machine has no Debian package registry) and the shared
# models, as one archive that gpu-check.sh unpacks. .carry/ is git-ignored
# and named in the device tool's carry list.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
models=${2:-../shared/models}
rm -rf .carry /tmp/segrt-carry-stage
stage=/tmp/segrt-carry-stage
mkdir -p $stage/lib $stage/models
cp "$build/segrt" $stage/
cp "$build/tests/test_gpu_race" $stage/ 2>/dev/null || cp "$build"/test_gpu_race $stage/
cp -L "$build/libsegrt.so.0" $stage/lib/
for lib in libprotobuf-c.so.1 libdnnl.so.2 libgomp.so.1; do
    cp -L "$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')" $stage/lib/
done
cp "$models"/*.onnx "$models"/*.npy $stage/models/
# One xz archive: oneDNN alone is larger than the device tool carries raw.
mkdir -p .carry
tar -C $stage -cJf .carry/segrt-carry.tar.xz segrt test_gpu_race lib models
rm -rf $stage
du -sh .carry
