#!/usr/bin/env bash
# The main job on the shipped default. Until segrt ships its own trained
# model and sample image, it shows what segrt does with one of the shared
# MONAI networks: describe it, then run it on its reference input.
# Usage: scripts/demo.sh BUILD_DIR MODELS_DIR
set -euo pipefail
build=${1:-build} models=${2:-../shared/models}
segrt="$build/segrt"
model="$models/basicunet2d_tiny.onnx"
input="$models/basicunet2d_tiny.in.npy"
out_dir=out/demo
mkdir -p "$out_dir"
out="$out_dir/basicunet2d_tiny.logits.npy"

echo "== segrt info $model --shape image=2x1x96x128"
"$segrt" info "$model" --shape image=2x1x96x128
echo
echo "== segrt run $model --input $input --output $out"
start=$(date +%s.%N)
"$segrt" run "$model" --input "$input" --output "$out"
end=$(date +%s.%N)
echo
secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
echo "demo: ran $(basename "$model") on the CPU in ${secs} s; the result is in $(realpath "$out")"
