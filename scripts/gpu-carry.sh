#!/usr/bin/env bash
# Prepares .carry/ for scripts/gpu-check.sh: the segrt binary built here with
# CUDA, the non-system libraries it needs (the GPU machine has no Debian
# package registry) and the shared models. .carry/ is git-ignored and named in
# the device tool's carry list.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
models=${2:-../shared/models}
rm -rf .carry
mkdir -p .carry/lib .carry/models
cp "$build/segrt" .carry/
cp -L "$(ldconfig -p | awk '/libprotobuf-c.so.1 /{print $NF; exit}')" .carry/lib/
cp "$models"/*.onnx "$models"/*.npy .carry/models/
du -sh .carry
