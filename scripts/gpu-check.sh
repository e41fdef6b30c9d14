#!/usr/bin/env bash
# Runs on the GPU machine (through the device tool) over a build made on the
# development machine and carried in .carry/ (see scripts/gpu-carry.sh):
# the CUDA queries, the GPU test suite (ops against the CPU engine in every
# precision, models against their reference pairs, plan files, races,
# compute-sanitizer), a CUDA benchmark per model, and, with `all`, the CPU
# suite and benchmark as well. Logs go to $OUT; a short table last.
#   usage: scripts/gpu-check.sh [gpu|all] [extra pytest args for tests/gpu]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
what=${1:-gpu}
shift || true
carry=/tmp/segrt-carry
mkdir -p "$carry" && tar -C "$carry" -xJf "$root/.carry/segrt-carry.tar.xz"
out=${OUT:-/tmp/segrt-gpu-check}
mkdir -p "$out"
cudnn_new=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib
# cuDNN before 9.15 has wrong-result bugs in FP16/BF16 3D convolutions.
export LD_LIBRARY_PATH=$carry/lib:$cudnn_new:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export SEGRT=$carry/segrt SEGRT_LIB=$carry/lib/libsegrt.so.0 SEGRT_MODELS=$carry/models
export SEGRT_GPU_REPORT=$out/gpu_report.jsonl
export PATH=/usr/local/cuda/bin:$PATH
export XDG_CACHE_HOME=$out/cache
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
step gpu-race "$carry/test_gpu_race" "$SEGRT_MODELS/basicunet2d_tiny.onnx"
step gpu-pytest python3 -m pytest -q -s -rs -p no:cacheprovider "$root/tests/gpu" "$@"
bench() { # model shape
    for p in fp32 fp16; do
        echo "== $1 $p"
        "$SEGRT" bench "$SEGRT_MODELS/$1" --shape "$2" --device cuda --precision "$p" --iters 50 --warmup 5 --no-cache
    done
}
step gpu-bench bash -c "$(declare -f bench); bench basicunet2d.onnx image=1x3x512x512; bench unet3d_spleen.onnx image=1x1x96x96x96; bench basicunet2d_tiny.onnx image=1x1x256x256"
if [ "$what" = all ]; then
    step cpu-pytest python3 -m pytest -q -p no:cacheprovider "$root/tests/python"
    step cpu-bench python3 "$root/bench/cpu_vs_onnxruntime.py" --segrt "$SEGRT" --models "$SEGRT_MODELS" \
        --threads "$(nproc)" --out "$out/cpu_vs_onnxruntime.json"
fi
cat "$out/version.log" "$out/info-devices.log"
tail -n 4 "$out/gpu-race.log"
grep -E "passed|failed|error" "$out/gpu-pytest.log" | tail -n 3
grep -E "^== |p50|median|GFLOP" "$out/gpu-bench.log" | head -n 40
echo "---- $(cat "$out/gpu.txt")"
printf '%s\n' "${rows[@]}"
