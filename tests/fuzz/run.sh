#!/usr/bin/env bash
# Runs the fuzz targets for a bounded time on corpora seeded with the test
# models and their inputs (MODELS_DIR: what tests/models/make_models.py
# writes). Usage: run.sh BUILD_DIR SECONDS MODELS_DIR
# A crashing input is kept in BUILD_DIR/fuzz-artifacts/ for reproduction.
# For long runs on a machine with many cores (scripts/fuzz-carry.sh):
# FUZZ_JOBS=N runs N libFuzzer jobs per target and FUZZ_RUNS=R stops each
# job after R inputs; FUZZ_PARALLEL=1 runs the targets at once.
set -euo pipefail
build=$(cd "$1" && pwd) seconds=$2 models=$3
# -max_total_time=0 would mean no limit.
[ "$seconds" -ge 1 ] || { echo "run.sh: SECONDS must be at least 1" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/onnx" "$work/npy" "$work/image" "$work/engine" "$work/volume" "$work/prep" "$work/slide" "$work/geojson" \
    "$build/fuzz-artifacts"
cp "$models"/*.onnx "$work/onnx/"
cp "$models"/*.in.npy "$work/npy/"
# Tiny PNG, JPEG and TIFF files of each kind the readers take (written by
# tests/unit/test_image_io --seeds).
cp tests/fuzz/seeds/image/* "$work/image/"
# Tiny NIfTI and DICOM files (tests/fuzz/make_volume_seeds.py).
cp tests/fuzz/seeds/volume/* "$work/volume/"
# Tiny Aperio-style SVS files and a generic tiled TIFF
# (tests/fuzz/make_slide_seeds.py).
cp tests/fuzz/seeds/slide/* "$work/slide/"
# Label maps with their options (tests/fuzz/fuzz_geojson.c says how the
# bytes are read): a pocket, nested squares, a checkerboard.
cp tests/fuzz/seeds/geojson/* "$work/geojson/"
# nnU-Net plans (and a dataset.json after a 0x1e byte) and KEY=VALUE
# preprocessing settings (tests/fuzz/fuzz_prep.c).
cp tests/fuzz/seeds/prep/* "$work/prep/"
# Small models over many operators (tests/fuzz/make_engine_seeds.py), and
# the test models small enough to run whole at every step.
cp tests/fuzz/seeds/engine/* "$work/engine/"
find "$models" -maxdepth 1 -name '*.onnx' -size -1024k -exec cp {} "$work/engine/" \;
# Inputs that once crashed a target run first, every time.
cp tests/fuzz/regressions/onnx/* "$work/onnx/" 2>/dev/null || true
cp tests/fuzz/regressions/engine/* "$work/engine/" 2>/dev/null || true
cp tests/fuzz/regressions/volume/* "$work/volume/" 2>/dev/null || true
cp tests/fuzz/regressions/image/* "$work/image/" 2>/dev/null || true
cp tests/fuzz/regressions/slide/* "$work/slide/" 2>/dev/null || true
cp tests/fuzz/regressions/geojson/* "$work/geojson/" 2>/dev/null || true
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
# GDCM's own leaks on corrupt JPEG-LS (tests/fuzz/lsan.supp says which).
export LSAN_OPTIONS="suppressions=$(pwd)/tests/fuzz/lsan.supp"
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

jobs=${FUZZ_JOBS:-1} runs=${FUZZ_RUNS:--1} parallel=()
[ "$jobs" -le 1 ] || parallel=(-jobs="$jobs" -workers="$jobs")

fuzz() { # name seconds max_len corpus [libFuzzer flags...]
    local name=$1 secs=$2 max_len=$3 corpus=$4 logs="$work/logs-$1"
    shift 4
    echo "fuzz: $name for ${secs}s"
    mkdir -p "$logs"
    # Large seeds are cut to max_len when mutated; 1 MiB keeps each run
    # fast while the tiny model still fits whole. With -jobs, libFuzzer
    # writes each job's log as fuzz-N.log in the folder it runs in.
    if ! (cd "$logs" && "$build/tests/fuzz/$name" -max_total_time="$secs" -max_len="$max_len" -rss_limit_mb=4096 \
        -timeout=30 -runs="$runs" "${parallel[@]}" -print_final_stats=1 "$@" \
        -artifact_prefix="$build/fuzz-artifacts/" "$corpus" >"$logs/main.log" 2>&1) ||
        grep -qsE '==ERROR|SUMMARY: |deadly signal' "$logs"/fuzz-*.log; then
        tail -n 60 "$logs"/*.log
        echo "fuzz: $name FAILED; the input is in $build/fuzz-artifacts/"
        return 1
    fi
    # main.log repeats each job's log as the job ends; count the jobs' own.
    local total=0 n counted=("$logs/main.log")
    [ "$jobs" -le 1 ] || counted=("$logs"/fuzz-*.log)
    for n in $(cat "${counted[@]}" | grep -E '^stat::number_of_executed_units' | awk '{print $2}'); do
        total=$((total + n))
    done
    echo "fuzz: $name ran $total inputs in $jobs job(s)"
}
targets=(
    "fuzz_onnx $seconds 1048576 $work/onnx"
    "fuzz_npy $(((seconds + 2) / 3)) 4096 $work/npy"
    "fuzz_image $(((seconds + 1) / 2)) 16384 $work/image"
    "fuzz_engine $seconds 1048576 $work/engine"
    "fuzz_volume $(((seconds + 1) / 2)) 16384 $work/volume"
    "fuzz_prep $(((seconds + 2) / 3)) 16384 $work/prep"
    "fuzz_slide $(((seconds + 1) / 2)) 65536 $work/slide"
    "fuzz_geojson $(((seconds + 2) / 3)) 8192 $work/geojson"
)
failed=0
if [ "${FUZZ_PARALLEL:-0}" = 1 ]; then
    pids=()
    for t in "${targets[@]}"; do
        # shellcheck disable=SC2086
        fuzz $t &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || failed=1; done
else
    for t in "${targets[@]}"; do
        # shellcheck disable=SC2086
        fuzz $t || failed=1
    done
fi
[ $failed = 0 ] || exit 1
echo "fuzz: no crash, leak or sanitizer report"
