#!/usr/bin/env bash
# The Python packages bench/volume_vs_monai needs on the GPU machine (which
# has torch, numpy, scipy, scikit-image, pandas, onnx... but no registry and
# none of these), as wheels the device tool carries, in two sets that each
# fit its 64 MiB beside the working tree (~9 MiB) and what else a call carries:
#   a  SimpleITK (~50 MiB; nnU-Net's SimpleITKIO imports it) and pydicom
#   b  everything else (~18 MiB, beside segrt's ~35 MiB): monai, nibabel,
#      dynamic_network_architectures, nnunetv2 and what its predictor
#      imports (acvl_utils, batchgenerators, batchgeneratorsv2, blosc2,
#      ndindex, numexpr, connected-components-3d)
# Versions are pinned to a set tested together on a CPU (python 3.11, torch
# 2.15); imagecodecs, which nnunetv2 requires but only tifffile imports (and
# only if present), is left out (26 MiB).
#
#   here:        bench/volume_vs_monai/carry.sh download   -> bench/volume_vs_monai/.carry/{a,b}/*.whl
#   GPU machine: bench/volume_vs_monai/carry.sh install a|b -> bench/volume_vs_monai/.env/site
#                (then PYTHONPATH=$PWD/bench/volume_vs_monai/.env/site)
# .carry/ and .env/ are ignored (bench/volume_vs_monai/.gitignore); .env/
# stays on the machine between calls while it is warm (30 s), so set a's
# call must be followed at once by set b's (README.md, "On the GPU machine").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
what=${1:-}

WHEELS_A=(simpleitk==2.5.7 pydicom==3.0.2)
WHEELS_B=(monai==1.6.1 nibabel==5.4.2 dynamic_network_architectures==0.4.4 nnunetv2==2.8.1
          batchgenerators==0.25.5 batchgeneratorsv2==0.3.6 blosc2==4.14.1 ndindex==1.10.1 numexpr==2.14.2
          connected-components-3d==4.1.1)
# acvl-utils has no wheel on PyPI (an sdist of pure Python): built here.
SDIST_B=(acvl-utils==0.2.6)

# shellcheck source=../carry_sets.sh
. "$here/../carry_sets.sh"

case "$what" in
download)
    carry_download a "${WHEELS_A[@]}"
    carry_download b "${WHEELS_B[@]}"
    python3 -m pip wheel -q --no-deps -w "$here/.carry/b" "${SDIST_B[@]}"
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
