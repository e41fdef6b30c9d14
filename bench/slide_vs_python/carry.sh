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

# shellcheck source=../carry_sets.sh
. "$here/../carry_sets.sh"

case "$what" in
download)
    carry_download a "${WHEELS_A[@]}"
    carry_download b "${WHEELS_B[@]}"
    carry_sizes
    ;;
install)
    carry_install "${2:-}"
    ;;
*)
    echo "usage: $0 download | install a|b" >&2
    exit 2
    ;;
esac
