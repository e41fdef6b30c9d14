#!/usr/bin/env bash
# Runs on the GPU machine (through the device tool) over a build made on the
# development machine and carried in .carry/ (see scripts/gpu-carry.sh):
# the CUDA queries, the GPU test suite (ops against the CPU engine in every
# precision, models against their reference pairs, plan files, races,
# compute-sanitizer), a CUDA benchmark per model, and, with `all`, the CPU
# suite and benchmark as well. `torch MODEL BATCHES` runs only
# bench/gpu_vs_pytorch.py (segrt and PyTorch side by side; one model per
# call keeps torch.compile's minutes under the device tool's limit);
# `bench` only the CUDA benchmarks; `sw` only the sliding-window GPU tests
# (which `tests` leaves out: together they pass the tool's 10 minutes);
# `swbench JOBS BATCHES` bench/sw_vs_monai.py; `python` the Python
# package's GPU tests (tests/gpu/test_gpu_python.py, torch CUDA tensors)
# and bench/python_overhead.py; `train` the demo model
# (demo/train.py); `profile` only the per-step profiles of the two
# benchmark models at their batch sizes (about a minute, where `bench`
# builds eleven plans). The tests run on the test models, generated here
# by tests/models/make_models.py into /tmp/segrt-test-models ($SEGRT_MODELS);
# the benchmarks on the carried ../shared/models ($BENCH_MODELS). Logs go to
# $OUT; a short table last.
#   usage: scripts/gpu-check.sh [gpu|all|tests|bench|sw|profile|python] [extra pytest args for tests/gpu]
#          scripts/gpu-check.sh tests tests/gpu/test_gpu_models.py ... [extra pytest args]
#          scripts/gpu-check.sh torch basicunet2d 1,16
#          scripts/gpu-check.sh corpus [NET,NET...]   (bench/corpus_vs_pytorch: check.py --device cuda, run.py)
#          scripts/gpu-check.sh layers NET [fp16,tf32,fp32 [layers.py flags]]   (where a network's numbers depart)
#          scripts/gpu-check.sh corpus-build [NET,NET...]   (bench/corpus_vs_pytorch/build_time.py: fresh builds,
#                                                            where their time goes)
#          scripts/gpu-check.sh swbench 2d,3d 4 [extra flags]
#          scripts/gpu-check.sh ab [ROUNDS]   (old build vs this one; GPU_CARRY_OLD for gpu-carry.sh)
#          scripts/gpu-check.sh steps        (the old build's plans vs this one's, step by step)
#          scripts/gpu-check.sh train [extra flags]
#          scripts/gpu-check.sh volume [extra pytest args]   (GPU_CARRY_TESTS="test_gpu_volume_ops segrt_prep")
#          scripts/gpu-check.sh fuzz [RUNS_PER_JOB [SECONDS]]   (after scripts/fuzz-carry.sh)
#          scripts/gpu-check.sh archs [TARGETS]   (the benchmark models planned natively and with
#                                                  --target-arch each of TARGETS, default sm_80,sm_75)
#          SEGRT_TEST_TARGET_ARCH=sm_80 scripts/gpu-check.sh tests ...   (the suite as an A100 plans it)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
what=${1:-gpu}
shift || true
if [ "$what" = fuzz ]; then
    # The CPU fuzz targets carried by scripts/fuzz-carry.sh, 4 jobs of each
    # of the four at once, RUNS inputs a job (or SECONDS a target).
    runs=${1:-260000} secs=${2:-480} fz=/tmp/segrt-fuzz out=${OUT:-/tmp/segrt-gpu-check}
    mkdir -p "$fz" "$out" && tar -C "$fz" -xJf "$root/.carry/segrt-fuzz.tar.xz"
    export LD_LIBRARY_PATH=$fz/lib:${LD_LIBRARY_PATH:-}
    python3 "$root/tests/models/make_models.py" /tmp/segrt-test-models >"$out/make-models.log" 2>&1 || exit 1
    cd "$root" && FUZZ_JOBS=4 FUZZ_PARALLEL=1 FUZZ_RUNS=$runs bash tests/fuzz/run.sh "$fz" "$secs" \
        /tmp/segrt-test-models 2>&1 | tee "$out/fuzz.log" | tail -n 80
    rc=${PIPESTATUS[0]}
    cp -r "$fz/fuzz-artifacts" "$out/" 2>/dev/null
    exit "$rc"
fi
carry=/tmp/segrt-carry
mkdir -p "$carry" && tar -C "$carry" -xJf "$root/.carry/segrt-carry.tar.xz"
out=${OUT:-/tmp/segrt-gpu-check}
mkdir -p "$out"
cudnn_new=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib
# cuDNN before 9.15 has wrong-result bugs in FP16/BF16 3D convolutions.
export LD_LIBRARY_PATH=$carry/lib:$cudnn_new:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export SEGRT=$carry/segrt SEGRT_LIB=$carry/lib/libsegrt.so.0
export SEGRT_MODELS=/tmp/segrt-test-models BENCH_MODELS=$carry/models
export SEGRT_GPU_REPORT=$out/gpu_report.jsonl
export PATH=/usr/local/cuda/bin:$PATH
export XDG_CACHE_HOME=/tmp/segrt-gpu-cache  # plans are large: not under $OUT
declare -a rows
step() { # name command...
    local name=$1; shift
    local t0=$(date +%s.%N)
    if "$@" >"$out/$name.log" 2>&1; then r=pass; else r=FAIL; fi
    rows+=("$(printf '%-28s %-5s %6.1fs' "$name" "$r" "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{print b-a}')")")
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1
if [ "$what" = torch ]; then
    model=${1:-basicunet2d} batches=${2:-1,16}
    python3 -m pip install -q --no-deps --target /tmp/segrt-o2t "$carry"/wheels/onnx2torch-*.whl >/dev/null 2>&1
    step "torch-$model" python3 "$root/bench/gpu_vs_pytorch.py" --pythonpath /tmp/segrt-o2t --models "$BENCH_MODELS" \
        --models-list "$model" --batches "$batches" --out "$out/gpu_vs_pytorch-$model.json"
    tail -n 30 "$out/torch-$model.log"
    printf '%s\n' "${rows[@]}"
    exit 0
fi
if [ "$what" = layers ]; then
    # bench/corpus_vs_pytorch/layers.py: a corpus network's intermediate
    # values, segrt CUDA at each precision against onnxruntime FP32.
    site=$root/bench/volume_vs_monai/.env/site
    python3 -m pip install -q --no-deps --target "$site" "$root"/.carry/wheels-corpus/*.whl >/dev/null 2>&1
    export PYTHONPATH=$site:${PYTHONPATH:-}
    step "layers-$1" python3 "$root/bench/corpus_vs_pytorch/layers.py" --net "$1" --precision "${2:-fp16,tf32,fp32}" "${@:3}"
    grep -v -i warning "$out/layers-$1.log" | tail -n 150
    printf '%s\n' "${rows[@]}"
    exit 0
fi
if [ "$what" = corpus ] || [ "$what" = corpus-build ]; then
    # bench/corpus_vs_pytorch: FP32 numbers against PyTorch on the GPU
    # (check.py, the bench shapes), then the benchmark (run.py). monai and
    # dynamic_network_architectures come from bench/volume_vs_monai's
    # carried set b (carry.sh install b first, in the same lease).
    # Or wheels carried in .carry/wheels-corpus (pip download --no-deps
    # monai dynamic-network-architectures). CORPUS_CHECK=0 skips check.py, CORPUS_BENCH=0 run.py;
    # CORPUS_MODES (run.py --modes, e.g. half_cl,amp,segrt,segrt:fused-attention)
    # and CORPUS_ITERS narrow the benchmark; CORPUS_PRECISION (bf16) is segrt's precision there.
    nets=${1:-}
    site=$root/bench/volume_vs_monai/.env/site
    if ls "$root"/.carry/wheels-corpus/*.whl >/dev/null 2>&1; then
        python3 -m pip install -q --no-deps --target "$site" "$root"/.carry/wheels-corpus/*.whl >/dev/null 2>&1
    fi
    export PYTHONPATH=$site:${PYTHONPATH:-}
    if [ "$what" = corpus-build ]; then
        # CORPUS_BUILD_OFF=SWITCH[,SWITCH]: each network built with them disabled too (A/B).
        step corpus-build python3 "$root/bench/corpus_vs_pytorch/build_time.py" --segrt "$SEGRT" \
            --json "$out/corpus_build_time.json" ${nets:+--nets "$nets"} \
            ${CORPUS_BUILD_OFF:+--disable-kernels "" --disable-kernels "$CORPUS_BUILD_OFF"}
        tail -n 40 "$out/corpus-build.log"
        printf '%s\n' "${rows[@]}"
        exit 0
    fi
    [ "${CORPUS_CHECK:-1}" = 0 ] || step corpus-check python3 "$root/bench/corpus_vs_pytorch/check.py" \
        --segrt "$SEGRT" --device cuda --exporters torchscript --json "$out/corpus_check.json" ${nets:+--nets "$nets"}
    [ "${CORPUS_BENCH:-1}" = 0 ] || step corpus-bench python3 "$root/bench/corpus_vs_pytorch/run.py" \
        --out "$out/corpus_vs_pytorch.json" ${nets:+--nets "$nets"} ${CORPUS_MODES:+--modes "$CORPUS_MODES"} \
        ${CORPUS_ITERS:+--iters "$CORPUS_ITERS"} ${CORPUS_PRECISION:+--precision "$CORPUS_PRECISION"}
    [ "${CORPUS_BENCH:-1}" = 0 ] && tail -n 25 "$out/corpus-check.log" || tail -n 40 "$out/corpus-bench.log"
    printf '%s\n' "${rows[@]}"
    exit 0
fi
if [ "$what" = ab ]; then
    # The build carried with GPU_CARRY_OLD against this one, alternating
    # round by round (bench/old_vs_new.py): ROUNDS (default 7).
    mkdir -p "$carry/old" && tar -C "$carry/old" -xJf "$root/.carry/segrt-old.tar.xz" || exit 1
    ln -sfn "$carry/lib" "$carry/old/lib"
    python3 "$root/bench/old_vs_new.py" --a "$carry/old" --b "$carry" --models "$BENCH_MODELS" \
        --rounds "${1:-7}" --out "$out/old_vs_new.json" 2>&1 | tee "$out/old_vs_new.log"
    exit "${PIPESTATUS[0]}"
fi
if [ "$what" = steps ]; then
    # Whether the build carried with GPU_CARRY_OLD and this one compile the
    # same plans: the multiset of (step, kernel) of each benchmark model's
    # plan at two shapes and three precisions, old against new. A refactor
    # of the builders must leave every line the same.
    mkdir -p "$carry/old" && tar -C "$carry/old" -xJf "$root/.carry/segrt-old.tar.xz" || exit 1
    ln -sfn "$carry/lib" "$carry/old/lib"
    differ=0
    for spec in basicunet2d:16x3x512x512 basicunet2d:1x3x256x256 basicunet2d_tiny:2x1x96x128 \
        unet3d_spleen:4x1x96x96x96 unet3d_spleen:1x1x64x64x64; do
        model=${spec%%:*} shape=${spec#*:}
        for prec in fp16 bf16 fp32; do
            for side in old new; do
                bin=$SEGRT
                [ "$side" = old ] && bin=$carry/old/segrt
                "$bin" bench "$BENCH_MODELS/$model.onnx" --shape "image=$shape" --device cuda --precision "$prec" \
                    --iters 1 --warmup 0 --profile --no-cache 2>&1 |
                    awk '/^step /{on=1; next} /^total \(sum/{on=0} on{print substr($0, 1, 67)}' |
                    sort >"$out/steps-$model-${shape%%x*}-$prec.$side"
            done
            n=$(wc -l <"$out/steps-$model-${shape%%x*}-$prec.new")
            if [ "$n" -gt 0 ] && cmp -s "$out/steps-$model-${shape%%x*}-$prec".{old,new}; then
                echo "same  $model $shape $prec: $n steps"
            else
                echo "DIFF  $model $shape $prec ($n steps)"
                diff "$out/steps-$model-${shape%%x*}-$prec".{old,new} | head -20
                differ=1
            fi
        done
    done
    exit "$differ"
fi
if [ "$what" = swbench ]; then
    jobs=${1:-2d,3d} batches=${2:-4}
    shift 2 || shift $#
    python3 -m pip install -q --no-deps --target /tmp/segrt-o2t "$carry"/wheels/onnx2torch-*.whl >/dev/null 2>&1
    step "sw-${jobs//,/-}" python3 "$root/bench/sw_vs_monai.py" --pythonpath /tmp/segrt-o2t \
        --models-dir "$BENCH_MODELS" --jobs "$jobs" --sw-batch "$batches" \
        --out "$out/sw_vs_monai-${jobs//,/-}.json" "$@"
    tail -n 20 "$out/sw-${jobs//,/-}.log"
    printf '%s\n' "${rows[@]}"
    exit 0
fi
if [ "$what" = train ]; then
    mkdir -p "$out/demo"
    step demo-train python3 "$root/demo/train.py" --out-dir "$out/demo" "$@"
    tail -n 25 "$out/demo-train.log"
    printf '%s\n' "${rows[@]}"
    exit 0
fi
if [ "$what" = archs ]; then
    # What a user of an older GPU loses to the kernels it lacks: each
    # benchmark model at its batch, fp16, planned for this GPU and as each
    # target would plan it (--target-arch; cuDNN still picks engines for
    # this GPU), in one call, rounds alternating so that clocks drift alike.
    IFS=, read -r -a targets <<<"${1:-sm_80,sm_75}"
    for spec in basicunet2d:16x3x512x512 unet3d_spleen:4x1x96x96x96; do
        model=${spec%%:*} shape=${spec#*:}
        for round in 1 2; do
            for t in native "${targets[@]}"; do
                extra=()
                [ "$t" = native ] || extra=(--target-arch "$t")
                log="$out/archs-$model-$t-$round.log"
                "$SEGRT" bench "$BENCH_MODELS/$model.onnx" --shape "image=$shape" --device cuda --precision fp16 \
                    --iters 30 --warmup 5 --no-cache "${extra[@]}" >"$log" 2>&1 || echo "FAIL $model $t" >>"$log"
                printf '%-14s %-8s round %d  %s\n' "$model" "$t" "$round" "$(grep -E '^latency|FAIL' "$log" | head -1)"
            done
        done
    done | tee "$out/archs.txt"
    grep -q FAIL "$out/archs.txt" && exit 1
    exit 0
fi
if [ "$what" = profile ]; then
    for spec in basicunet2d:16x3x512x512 basicunet2d:1x3x512x512 unet3d_spleen:4x1x96x96x96 \
        unet3d_spleen:1x1x96x96x96; do
        model=${spec%%:*} shape=${spec#*:}
        step "profile-$model-${shape%%x*}" "$SEGRT" bench "$BENCH_MODELS/$model.onnx" --shape "image=$shape" \
            --device cuda --precision fp16 --iters 30 --warmup 5 --profile
        grep -E "^latency" "$out/profile-$model-${shape%%x*}.log"
        grep -A10 "^step" "$out/profile-$model-${shape%%x*}.log"
    done
    printf '%s\n' "${rows[@]}"
    exit 0
fi
# Everything below runs tests (bench aside), on models generated here.
[ "$what" = bench ] || step make-models python3 "$root/tests/models/make_models.py" "$SEGRT_MODELS"
if [ "$what" = python ]; then
    # The Python package (carried by gpu-carry.sh from a build with
    # SEGRT_PYTHON) with torch CUDA tensors, then its per-call overhead.
    export PYTHONPATH=$carry/python${PYTHONPATH:+:$PYTHONPATH}
    step gpu-python python3 -m pytest -q -s -rs -p no:cacheprovider "$root/tests/gpu/test_gpu_python.py" "$@"
    step python-overhead python3 "$root/bench/python_overhead.py" --models "$SEGRT_MODELS" --device cuda \
        --out "$out/python_overhead.json"
    grep -E "passed|failed|error|skipped" "$out/gpu-python.log" | tail -n 5
    tail -n 8 "$out/python-overhead.log"
    printf '%s\n' "${rows[@]}"
    exit 0
fi
if [ "$what" = volume ]; then
    # Volume preprocessing on the device: the CUDA volume operations against
    # the host's (test_gpu_volume_ops, carried with GPU_CARRY_TESTS), the
    # plan against MONAI's transforms and the job's device path against the
    # CPU's (segrt_prep carried the same way; monai, nibabel and pydicom as
    # wheels in .whl, installed into /tmp/site), and nnU-Net's Gaussian on
    # the device path of the window job.
    if ls "$root"/.whl/*.whl >/dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            "$root"/.whl/*.whl >"$out/wheels.log" 2>&1
        export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    fi
    export SEGRT_PREP=$carry/segrt_prep SEGRT_GPU_VOLUME_OPS=$carry/test_gpu_volume_ops
    # `volume FILE...`: those test files only (the tools are too large to
    # carry together: one call carries the archive, a later one adds to it).
    files=()
    while [ $# -gt 0 ] && [ -f "$1" ]; do files+=("$1"); shift; done
    [ ${#files[@]} -gt 0 ] || files=("$root/tests/gpu/test_gpu_volume_ops.py" "$root/tests/gpu/test_gpu_prep_monai.py"
        "$root/tests/gpu/test_gpu_prep_job.py" "$root/tests/gpu/test_gpu_sliding_window.py")
    step gpu-volume python3 -m pytest -q -s -rs -p no:cacheprovider --durations=5 "${files[@]}" -k \
        "not test_gpu_sliding_window or nnunet" "$@"
    grep -E "passed|failed|error" "$out/gpu-volume.log" | tail -n 6
    printf '%s\n' "${rows[@]}"
    exit 0
fi
if [ "$what" = sw ]; then
    step gpu-sw python3 -m pytest -q -s -rs -p no:cacheprovider "$root/tests/gpu/test_gpu_sliding_window.py" "$@"
    grep -E "^segrt:|passed|failed|error" "$out/gpu-sw.log" | tail -n 12
    printf '%s\n' "${rows[@]}"
    exit 0
fi
step version "$SEGRT" --version
step info-devices "$SEGRT" info --devices
# `tests FILE...`: only those test files (on an H100 the whole suite
# builds plans for longer than the device tool's 10 minutes a call).
files=()
while [ "$what" = tests ] && [ $# -gt 0 ] && [ -f "$1" ]; do files+=("$1"); shift; done
if [ "$what" != bench ] && [ ${#files[@]} -gt 0 ]; then
    step gpu-pytest python3 -m pytest -q -s -rs -p no:cacheprovider --durations=5 "${files[@]}" "$@"
elif [ "$what" != bench ]; then  # gpu, all, tests
    step gpu-race "$carry/test_gpu_race" "$SEGRT_MODELS/basicunet2d_tiny.onnx"
    step gpu-device-memory "$carry/test_device_memory"
    [ -x "$carry/test_gpu_sw_stream" ] && step gpu-sw-stream "$carry/test_gpu_sw_stream" "$SEGRT_MODELS/basicunet2d_tiny.onnx"
    step gpu-pytest python3 -m pytest -q -s -rs -p no:cacheprovider "$root/tests/gpu" \
        --ignore "$root/tests/gpu/test_gpu_sliding_window.py" "$@"
fi
bench() { # model shape [precisions]
    for p in ${3:-fp32 fp16}; do
        echo "== $1 $2 $p"
        "$SEGRT" bench "$BENCH_MODELS/$1" --shape "$2" --device cuda --precision "$p" --iters 50 --warmup 5
    done
}
if [ "$what" = tests ]; then
    grep -E "passed|failed|error" "$out/gpu-pytest.log" | tail -n 3
    printf '%s\n' "${rows[@]}"
    exit 0
fi
# Inputs and outputs stay on the device (bench's default, as PyTorch users
# time it); one host-to-host run shows what the copies add.
step gpu-bench bash -c "$(declare -f bench); bench basicunet2d.onnx image=1x3x512x512; bench unet3d_spleen.onnx image=1x1x96x96x96;
    bench basicunet2d.onnx image=16x3x512x512 fp16; bench unet3d_spleen.onnx image=4x1x96x96x96 fp16;
    bench basicunet2d_tiny.onnx image=1x1x256x256
    echo '== basicunet2d image=16x3x512x512 fp16 host io'
    \"\$SEGRT\" bench \"\$BENCH_MODELS/basicunet2d.onnx\" --shape image=16x3x512x512 --device cuda --precision fp16 --io host --iters 20"
step gpu-bench-sweep "$SEGRT" bench "$BENCH_MODELS/basicunet2d.onnx" --shape image=1x3x512x512 --device cuda \
    --precision fp16 --batch-sweep 1,2,4,8,16 --iters 30 --warmup 5
step gpu-profile bash -c "\"\$SEGRT\" bench \"\$BENCH_MODELS/basicunet2d.onnx\" --shape image=16x3x512x512 --device cuda --precision fp16 --iters 20 --profile;
    \"\$SEGRT\" bench \"\$BENCH_MODELS/unet3d_spleen.onnx\" --shape image=4x1x96x96x96 --device cuda --precision fp16 --iters 20 --profile"
if [ "$what" = all ]; then
    step cpu-pytest python3 -m pytest -q -p no:cacheprovider "$root/tests/python"
    step cpu-bench python3 "$root/bench/cpu_vs_onnxruntime.py" --segrt "$SEGRT" --models "$BENCH_MODELS" \
        --threads "$(nproc)" --out "$out/cpu_vs_onnxruntime.json"
fi
cat "$out/version.log" "$out/info-devices.log"
tail -n 4 "$out/gpu-race.log"
grep -E "passed|failed|error" "$out/gpu-pytest.log" | tail -n 3
grep -E "^== |p50|median|GFLOP" "$out/gpu-bench.log" | head -n 40
grep -E "^ *[0-9]+ " "$out/gpu-bench-sweep.log" | head -n 8
echo "---- $(cat "$out/gpu.txt")"
printf '%s\n' "${rows[@]}"
