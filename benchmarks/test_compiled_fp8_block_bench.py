"""The compiled FP8 block ``--source`` pass per module (issue 27), beside a copy of the source
bytes and beside the numpy path, as ``test_cpu_bench.py::test_reproduction_module`` measures
Quark MXFP4: ``pytest benchmarks/test_compiled_fp8_block_bench.py --benchmark-only``.

One Kimi-K2 routed expert (2048 × 7168 BF16, fewer rows where ``MXF_BENCH_ELEMENTS`` is
smaller) per producer profile the validator reproduces: DeepSeek's float32 scales, UE8M0's
power-of-two ones, compressed-tensors' bfloat16 ones (its division per element). ``extra_info``:
``ratio_to_copy`` (the copy timed in the same test), ``source_gb_per_s`` (BF16 source bytes
per second on one core), ``avx512``, ``numba``."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from test_cpu_bench import EXPERT_SHAPE, _best_of, avx512, run

from mxformats import fast
from mxformats.fast.moments import Moments

#: profile -> its validator descriptor's module and attribute
PROFILES = {"deepseek": ("fp8_block_deepseek", "DESCRIPTOR"),
            "ue8m0": ("fp8_block_deepseek", "UE8M0"),
            "compressed-tensors": ("fp8_block_ct", "DESCRIPTOR")}


def _descriptor(profile: str) -> Any:
    import importlib

    module, name = PROFILES[profile]
    return getattr(importlib.import_module(f"mxformats.validate.descriptors.{module}"), name)


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("path", ["compiled", "numpy"])
def test_fp8_block_reproduction_module(benchmark: Any, path: str, profile: str) -> None:
    """``validate --source``'s work on one FP8 block module of Kimi-K2 expert size from its
    BF16 source: quantize, compare every code and scale, dequantize the checkpoint's, error
    statistics. ``compiled``: the descriptor's one numba pass
    (:func:`mxformats.fast.reproduce_fp8_block.reproduce_fp8_block`), compiled or loaded from
    numba's cache before timing; ``numpy``: the numpy fast paths (1 thread) and
    :class:`~mxformats.fast.moments.Moments`, as without numba. Both give the same moments
    bits (checked)."""
    from mxformats.fast import jit
    from mxformats.fast.reproduce_fp8_block import KERNELS

    if path == "compiled" and jit.compiled(KERNELS) is None:
        pytest.skip(jit.status())
    desc = _descriptor(profile)
    rng = np.random.default_rng(7)
    w = (rng.standard_normal(EXPERT_SHAPE, dtype=np.float32) * 0.02).astype(ml_dtypes.bfloat16)
    arrays = desc.produce(w)

    def numpy_path() -> Moments | None:
        ours = fast.quantize_fp8_block(w, block=(128, 128), profile=profile, threads=1)
        assert ours.codes.tobytes() == arrays["weight"].tobytes()
        assert ours.scales.tobytes() == arrays[desc.scale_name].tobytes()
        return Moments.of(np.asarray(desc.dequantize(arrays, w.shape[1])), w)

    def compiled_path() -> Moments | None:
        return desc.reproduce_in_one_pass("expert", w, arrays)

    fn = compiled_path if path == "compiled" else numpy_path
    assert fn() is not None  # numba's compile (or cache load) is never timed
    out = np.empty_like(w)
    copy = _best_of(lambda: np.copyto(out, w))
    stats = run(benchmark, fn, f"FP8 block ({profile}) reproduction of one Kimi expert ({path})",
                "validate --source, 1 thread", True, slow=path == "numpy")
    seconds = float(benchmark.stats.stats.min)
    benchmark.extra_info.update(
        profile=profile, bytes=w.nbytes, elements=w.size, copy_seconds=copy,
        ratio_to_copy=seconds / copy, source_gb_per_s=w.nbytes / seconds / 1e9,
        avx512=avx512(), numba=jit.status())
    want = numpy_path()
    assert stats is not None and want is not None
    assert np.array([stats.error_squares, stats.cross]).view(np.uint64).tolist() == \
        np.array([want.error_squares, want.cross]).view(np.uint64).tolist()
