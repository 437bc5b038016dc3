"""The full scan per tensor (issue 27): ``--level full``'s numbers checks of one Kimi-K2-size
routed expert projection (2048 × 7168) per format, beside a copy and a plain page-cache read of
the same bytes, in the same test, so that the ratio is one run's.

What is timed is :func:`mxformats.validate.numbers.module_numbers` with the module's tensors
already in memory (its read replaced by the arrays): every per-module check of the level, the
scale checks, histograms and magnitude included, and the compiled pass of
:mod:`mxformats.fast.scan` where numba runs (``MXFORMATS_NUMBA=0`` times the numpy code). The
copy is ``np.copyto`` of every tensor of the module into buffers allocated once; the read is a
1 MiB ``readinto`` of a file holding the same bytes, from the page cache. The compiled kernels
are compiled (or loaded from numba's cache) before anything is timed.

Run: ``pytest benchmarks/test_scan_bench.py --benchmark-only``; ``extra_info`` holds the
ratios (``ratio_to_copy``, ``ratio_to_read``), the module's bytes and ``compiled`` (which path
ran).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from test_cpu_bench import _best_of, avx512

from mxformats.fast import jit
from mxformats.validate import numbers
from mxformats.validate.files import load
from mxformats.validate.findings import Level
from mxformats.validate.model import Options

PRODUCERS = Path(__file__).resolve().parent.parent / "tests" / "data" / "producers"
#: A routed expert projection at Kimi-K2's sizes (down_proj: 7168 outputs of 2048 inputs is
#: the same bytes; this is gate/up's shape).
SHAPE = (2048, 7168)
FIXTURES = ["kimi-k2-mxfp4-quark", "kimi-k2-w4a8-quark", "kimi-k2-int4-compressed-tensors",
            "kimi-k2-nvfp4-modelopt", "kimi-k2-nvfp4-compressed-tensors",
            "kimi-k2-fp8-block-deepseek", "kimi-k2-fp8-block-compressed-tensors"]
_EXPERT = "model.layers.1.mlp.experts.0.gate_proj"


@pytest.mark.parametrize("fixture", FIXTURES)
def test_full_scan_per_tensor(benchmark: Any, fixture: str, tmp_path: Path) -> None:
    """One expert projection's full-level numbers checks beside a copy and a plain read."""
    opts = Options(level=Level.FULL, workers=1)
    ckpt = load(PRODUCERS / fixture, opts).ckpt
    assert ckpt is not None and ckpt.descriptor is not None
    module = ckpt.modules[_EXPERT]
    own = ckpt.descriptor.for_module(ckpt, module.name)
    params = numbers.module_params(ckpt, opts, module)
    small = numbers.read_module(ckpt, module, params)
    assert small is not None
    w = (np.random.default_rng(0).standard_normal(SHAPE) * 0.02).astype(ml_dtypes.bfloat16)
    produced = own.produce(w)
    arrays = {p: np.asarray(produced.get(p, small[p])) for p in params}
    nbytes = sum(a.nbytes for a in arrays.values())
    buffers = {p: np.empty_like(a) for p, a in arrays.items()}
    path = tmp_path / "module.bin"
    with path.open("wb") as f:
        for a in arrays.values():
            f.write(np.ascontiguousarray(a).tobytes())
    chunk = bytearray(1 << 20)

    def read() -> None:
        with path.open("rb", buffering=0) as f:
            while f.readinto(chunk):
                pass

    def copy() -> None:
        for p, a in arrays.items():
            np.copyto(buffers[p], a)

    def scan() -> numbers.ModuleNumbers:
        return numbers.module_numbers(ckpt, opts, module)

    real_read = numbers.read_module
    numbers.read_module = lambda *args: arrays  # type: ignore[assignment]
    try:
        warm = scan()  # compiles (or loads numba's cache) before anything is timed
        assert not [f for f in warm.findings if f.check.id == "INTERNAL_ERROR"], warm.findings
        read_s, copy_s = _best_of(read, 15), _best_of(copy, 15)
        benchmark.pedantic(scan, rounds=15, iterations=1, warmup_rounds=1)
    finally:
        numbers.read_module = real_read  # type: ignore[assignment]
    seconds = float(benchmark.stats.stats.min)
    benchmark.extra_info.update(
        fixture=fixture, shape=list(SHAPE), bytes=nbytes, compiled=jit.status(), avx512=avx512(),
        scan_ms=seconds * 1e3, copy_ms=copy_s * 1e3, read_ms=read_s * 1e3,
        ratio_to_copy=seconds / copy_s, ratio_to_read=seconds / read_s,
        scan_gb_per_s=nbytes / seconds / 1e9)
