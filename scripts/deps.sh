#!/usr/bin/env bash
# Installs what building and testing segrt needs, idempotently: Debian
# packages through apt-get (only those missing), and the Python test packages
# into the project's virtual environment .venv (only when the requirements
# changed). Quick once everything is there.
#   scripts/deps.sh          build and test dependencies
#   scripts/deps.sh --build  only what building needs (no Python)
set -euo pipefail
cd "$(dirname "$0")/.."

build_pkgs=(build-essential cmake pkg-config protobuf-c-compiler libprotobuf-c-dev libonnx-dev libdnnl-dev
            libpng-dev libjpeg-dev libtiff-dev libnifti2-dev zlib1g-dev libgdcm-dev libcjson-dev
            libopenslide-dev)
# The Python package (python/, SEGRT_PYTHON): Python's headers and DLPack's.
build_pkgs+=(python3-dev libdlpack-dev)
test_pkgs=(python3 python3-venv clang libclang-rt-14-dev)

pkgs=("${build_pkgs[@]}")
[[ "${1:-}" == "--build" ]] || pkgs+=("${test_pkgs[@]}")

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "deps: installing ${missing[*]}"
    sudo=""
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null || { echo "deps: need root (or sudo) to install ${missing[*]}" >&2; exit 1; }
        sudo=sudo
    fi
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[[ "${1:-}" == "--build" ]] && exit 0

req=tests/requirements.txt
stamp=.venv/.requirements.stamp
if [[ ! -x .venv/bin/python ]]; then
    echo "deps: creating .venv"
    python3 -m venv .venv
fi
if [[ ! -f $stamp ]] || ! cmp -s "$req" "$stamp"; then
    echo "deps: installing Python test packages into .venv"
    .venv/bin/python -m pip install -q --disable-pip-version-check -r "$req"
    cp "$req" "$stamp"
fi
