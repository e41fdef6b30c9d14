#!/usr/bin/env bash
# Runs the fuzz targets for a bounded time on corpora seeded with the test
# models and their inputs (MODELS_DIR: what tests/models/make_models.py
# writes). Usage: run.sh BUILD_DIR SECONDS MODELS_DIR
# A crashing input is kept in BUILD_DIR/fuzz-artifacts/ for reproduction.
set -euo pipefail
build=$1 seconds=$2 models=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/onnx" "$work/npy" "$work/image" "$work/engine" "$build/fuzz-artifacts"
cp "$models"/*.onnx "$work/onnx/"
cp "$models"/*.in.npy "$work/npy/"
# Tiny PNG, JPEG and TIFF files of each kind the readers take (written by
# tests/unit/test_image_io --seeds).
cp tests/fuzz/seeds/image/* "$work/image/"
# Small models over many operators (tests/fuzz/make_engine_seeds.py), and
# the test models small enough to run whole at every step.
cp tests/fuzz/seeds/engine/* "$work/engine/"
find "$models" -maxdepth 1 -name '*.onnx' -size -1024k -exec cp {} "$work/engine/" \;
# Inputs that once crashed a target run first, every time.
cp tests/fuzz/regressions/onnx/* "$work/onnx/" 2>/dev/null || true
cp tests/fuzz/regressions/engine/* "$work/engine/" 2>/dev/null || true
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

fuzz() { # name seconds max_len corpus
    local name=$1 secs=$2 max_len=$3 corpus=$4
    echo "fuzz: $name for ${secs}s"
    # Large seeds are cut to max_len when mutated; 1 MiB keeps each run
    # fast while the tiny model still fits whole.
    if ! "$build/tests/fuzz/$name" -max_total_time="$secs" -max_len="$max_len" -rss_limit_mb=4096 \
        -timeout=30 -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/" \
        "$corpus" >"$work/$name.log" 2>&1; then
        tail -n 60 "$work/$name.log"
        echo "fuzz: $name FAILED; the input is in $build/fuzz-artifacts/"
        return 1
    fi
    grep -E 'stat::number_of_executed_runs|Done [0-9]+ runs' "$work/$name.log" | tail -n 2
}
fuzz fuzz_onnx "$seconds" 1048576 "$work/onnx"
fuzz fuzz_npy $((seconds / 3)) 4096 "$work/npy"
fuzz fuzz_image $((seconds / 2)) 16384 "$work/image"
fuzz fuzz_engine "$seconds" 1048576 "$work/engine"
echo "fuzz: no crash, leak or sanitizer report"
