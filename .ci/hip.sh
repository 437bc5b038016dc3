#!/usr/bin/env bash
# Compile every HIP kernel for AMD gfx90a (MI200) and gfx940 (MI300 early silicon) with
# Debian's hipcc: compile only, there is no AMD GPU in CI. Installs nothing: the apt step of
# .ci/run installs hipcc, libamdhip64-dev and g++.
#
# Debian's clang 15 rejects gfx942 (MI300X) and gfx950 (MI355X). With ROCm >= 6 (gfx942) or
# ROCm >= 6.4 (gfx950) the same command builds them:
#   HIP_PLATFORM=amd hipcc --offload-arch=gfx942 -std=c++17 -ffp-contract=off \
#     -fno-strict-aliasing -O3 -c kernels/hip/mx_quantize.hip -o mx_quantize.o
# (python3 kernels/hip/_build.py amd gfx942 gfx950 runs it for every kernel.)
set -euo pipefail
cd "$(dirname "$0")/.."

export HIP_PLATFORM=amd  # hipcc would pick the NVIDIA platform wherever nvcc is installed
command -v hipcc >/dev/null || { echo "hip.sh: hipcc not found (apt-get install hipcc libamdhip64-dev)" >&2; exit 1; }
echo "hip.sh: $(hipcc --version 2>/dev/null | grep -m1 -i 'clang version' || echo 'hipcc')"
python3 kernels/hip/_build.py amd gfx90a gfx940  # stdlib only: no install needed
