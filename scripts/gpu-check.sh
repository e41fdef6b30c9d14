#!/usr/bin/env bash
# Runs on the GPU machine (through the device tool) over a build made on the
# development machine and carried in .carry/ (see scripts/gpu-carry.sh):
# the CUDA queries, then the whole Python test suite against the GPU
# machine's own numpy/onnx/onnxruntime. Logs go to $OUT; a short table last.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
carry=/tmp/segrt-carry
mkdir -p "$carry" && tar -C "$carry" -xJf "$root/.carry/segrt-carry.tar.xz"
out=${OUT:-/tmp/segrt-gpu-check}
mkdir -p "$out"
cudnn_new=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib
# cuDNN before 9.15 has wrong-result bugs in FP16/BF16 3D convolutions.
export LD_LIBRARY_PATH=$carry/lib:$cudnn_new:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export SEGRT=$carry/segrt SEGRT_MODELS=$carry/models
declare -a rows
step() { # name command...
    local name=$1; shift
    local t0=$(date +%s.%N)
    if "$@" >"$out/$name.log" 2>&1; then r=pass; else r=FAIL; fi
    rows+=("$(printf '%-28s %-5s %6.1fs' "$name" "$r" "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{print b-a}')")")
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1
step version "$SEGRT" --version
step info-devices "$SEGRT" info --devices
step pytest python3 -m pytest -q -p no:cacheprovider "$root/tests/python"
# The CPU engine beside onnxruntime with every core of this machine.
step cpu-bench python3 "$root/bench/cpu_vs_onnxruntime.py" --segrt "$SEGRT" --models "$SEGRT_MODELS" \
    --threads "$(nproc)" --out "$out/cpu_vs_onnxruntime.json"
cat "$out/version.log" "$out/info-devices.log"
tail -n 3 "$out/pytest.log"
tail -n 6 "$out/cpu-bench.log"
echo "---- $(cat "$out/gpu.txt")"
printf '%s\n' "${rows[@]}"
