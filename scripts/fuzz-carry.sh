#!/usr/bin/env bash
# Prepares .carry/segrt-fuzz.tar.xz for `scripts/gpu-check.sh fuzz`: the
# libFuzzer targets built here (make fuzz's configuration, FUZZ_BUILD) and
# the non-system libraries they load, so the GPU machine's sixteen cores can
# fuzz for long where CI's two fuzz for a minute. The GPU is not used.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-fuzz}
stage=/tmp/segrt-fuzz-stage
rm -rf $stage && mkdir -p $stage/tests/fuzz $stage/lib
names="fuzz_onnx fuzz_npy fuzz_image fuzz_engine"
for n in $names; do cp "$build/tests/fuzz/$n" $stage/tests/fuzz/; done
# As scripts/gpu-carry.sh: all but the C runtime and compression libraries.
system='^(linux-vdso|ld-linux|(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libz|libzstd|liblzma|libOpenCL)[.])'
for n in $names; do ldd "$build/tests/fuzz/$n"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
    while read -r name path; do
        [[ $name =~ $system ]] || cp -L "$path" $stage/lib/
    done
mkdir -p .carry
tar -C $stage -cJf .carry/segrt-fuzz.tar.xz tests lib
rm -rf $stage
du -sh .carry/segrt-fuzz.tar.xz
