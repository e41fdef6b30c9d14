#!/usr/bin/env bash
# The main job on the shipped default: segrt's own nuclei model
# (demo/model.onnx, trained by demo/train.py; demo/README.md says how) over
# a real immunohistochemistry image (demo/sample.png, 512x512) larger than
# its 256x256 window, so the run tiles it into 9 sliding windows and blends
# them. On the GPU (FP16) when there is one, else on the CPU.
# Writes out/demo/labels.png (0 background, 1 nuclei) and
# out/demo/overlay.png (the image with the nuclei tinted and outlined).
# Usage: scripts/demo.sh BUILD_DIR
set -euo pipefail
build=${1:-build}
segrt="$build/segrt"
out_dir=out/demo
mkdir -p "$out_dir"
args=(--device cpu)
if "$segrt" info --devices 2>/dev/null | grep -q '^cuda:0 '; then
    args=(--device cuda --precision fp16)
fi
# The window (segrt.roi), overlap and input normalisation come from the
# model's metadata; segrt prints one summary line.
"$segrt" run demo/model.onnx demo/sample.png -o "$out_dir/labels.png" --overlay "$out_dir/overlay.png" "${args[@]}"
echo "demo: look at $(realpath "$out_dir/overlay.png"): segrt's nuclei, tinted red and outlined; labels in $out_dir/labels.png"
