#!/usr/bin/env bash
# Prepares .carry/ for scripts/gpu-check.sh: the segrt binary built here with
# CUDA, the non-system libraries it needs (the GPU machine has no Debian
# package registry) and the shared models, as one archive that gpu-check.sh
# unpacks. .carry/ is git-ignored and named in the device tool's carry list.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
models=${2:-../shared/models}
rm -rf .carry
mkdir -p .carry/lib .carry/models
cp "$build/segrt" .carry/
for lib in libprotobuf-c.so.1 libdnnl.so.2 libgomp.so.1; do
    cp -L "$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')" .carry/lib/
done
cp "$models"/*.onnx "$models"/*.npy .carry/models/
# One xz archive: oneDNN alone is larger than the device tool carries raw.
tar -C .carry -cJf /tmp/segrt-carry.tar.xz segrt lib models
rm -rf .carry && mkdir .carry && mv /tmp/segrt-carry.tar.xz .carry/
du -sh .carry
