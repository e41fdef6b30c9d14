#!/usr/bin/env bash
# What make_model.py needs on the GPU machine and the machine lacks (it has
# torch, numpy and onnx, and no package index): dynamic_network_architectures,
# the PlainConvUNet nnU-Net builds, pure Python (54 kB; the version
# bench/volume_vs_monai carries). Only its unet module is imported, which
# needs neither timm nor einops, so they are not carried.
#   here:        bench/many_classes/carry.sh download  -> bench/many_classes/.carry/*.whl
#   GPU machine: bench/many_classes/carry.sh install   -> bench/many_classes/.env/site
#                (then PYTHONPATH=$PWD/bench/many_classes/.env/site)
# .carry/ and .env/ are git-ignored: name bench/many_classes/.carry in the
# device tool's carry list. segrt's own build travels as scripts/gpu-carry.sh's
# .carry/segrt-carry.tar.xz (README.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
WHEELS=(dynamic_network_architectures==0.4.4)

case "${1:-}" in
download)
    rm -rf "$here/.carry" && mkdir -p "$here/.carry"
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$here/.carry" "${WHEELS[@]}"
    ls -l "$here/.carry"
    ;;
install)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$here/.env/site" "$here/.carry"/*.whl
    echo "carry: installed into $here/.env/site"
    ;;
*)
    echo "usage: $0 download | install" >&2
    exit 2
    ;;
esac
