#!/usr/bin/env bash
# The Python packages bench/slide_vs_python needs on the GPU machine (which
# has python3 3.12 with torch, numpy, scipy, scikit-image, tifffile, onnx,
# onnxruntime, click, lazy-loader, psutil... but no registry and none of
# these), as wheels the device tool carries, in two sets under 50 MiB that
# each fit its 64 MiB beside the working tree (~10 MiB):
#   a  imagecodecs (27 MiB: tifffile's JPEG, to write the slide) and
#      cucim-cu13 (16 MiB: the torch_cucim contender; the machine's CUDA is
#      13; CuImage reads on the CPU and needs no CuPy)
#   b  openslide-python and openslide-bin (which bundles libopenslide), and
#      psutil and click should the machine lack them (~3 MiB), beside
#      segrt's archive (scripts/gpu-carry.sh, ~35 MiB)
#
#   here:        bench/slide_vs_python/carry.sh download   -> bench/slide_vs_python/.carry/{a,b}/*.whl
#   GPU machine: bench/slide_vs_python/carry.sh install a|b -> bench/slide_vs_python/.env/site
#                (then PYTHONPATH=$PWD/bench/slide_vs_python/.env/site)
# .carry/ and .env/ are ignored (bench/slide_vs_python/.gitignore); .env/
# stays on the machine while it is warm (30 s), so set a's call must be
# followed at once by set b's (README.md, "On the GPU machine").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
what=${1:-}

WHEELS_A=(imagecodecs==2026.10.10 cucim-cu13==26.10.0)
WHEELS_B=(openslide-python==1.4.7 openslide-bin==4.0.1.2 psutil==7.2.2 click==8.5.1)

download() {
    local set=$1; shift
    local dir=$here/.carry/$set
    rm -rf "$dir" && mkdir -p "$dir"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64 \
        --platform manylinux2010_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
        -d "$dir" "$@"
}

case "$what" in
download)
    download a "${WHEELS_A[@]}"
    download b "${WHEELS_B[@]}"
    ls -l "$here/.carry/a" "$here/.carry/b"
    # What each call carries against the device tool's 64 MiB: the tracked
    # tree, the set, and for set b segrt's archive (scripts/gpu-carry.sh).
    root=$(cd "$here/../.." && pwd)
    tree=$(cd "$root" && git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s}')
    seg=$(stat -c %s "$root/.carry/segrt-carry.tar.xz" 2>/dev/null || echo 0)
    for set in a b; do
        w=$(cat "$here/.carry/$set"/*.whl | wc -c)
        extra=0
        [ "$set" = b ] && extra=$seg
        total=$((tree + w + extra))
        echo "call $set: tree $tree + wheels $w$([ $set = b ] && echo " + segrt $seg") = $total bytes" \
             "($((total * 100 / 67108864)) % of 64 MiB)"
    done
    [ "$seg" -gt 0 ] || echo "(no .carry/segrt-carry.tar.xz yet: add its size to call b)"
    ;;
install)
    set=${2:?install a or b}
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$here/.env/site" "$here/.carry/$set"/*.whl
    echo "carry: set $set installed into $here/.env/site"
    ;;
*)
    echo "usage: $0 download | install a|b" >&2
    exit 2
    ;;
esac
