#!/usr/bin/env bash
# CPU benchmarks smoke run (issue 8): `bash .ci/bench_smoke.sh` from the repository root, with
# the test venv active and the interop peers installed (torchao, compressed-tensors, amd-quark).
# Runs benchmarks/cpu.py on 1M elements: every fast path and every peer once, with their byte
# checks (a wrong byte fails the run); the timings of so small a run mean nothing. The real
# table: `python benchmarks/cpu.py --validator` on a quiet machine (docs/benchmarks.md).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
python -c "import pytest_benchmark" 2>/dev/null || \
    pip install --no-deps -c constraints.txt pytest-benchmark py-cpuinfo2
start=$SECONDS
python benchmarks/cpu.py --elements 1048576
echo "--> CPU benchmarks smoke run in $((SECONDS - start))s"
