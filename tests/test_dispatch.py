"""The same bytes on every CPU (issue 26 §6): numpy picks a SIMD path per CPU ("dispatch"), and
some give other bits (which of -0.0/+0.0 a sort keeps, the last bit of log2/exp2). Every
generator, fast-path plan and verdict that claims bits is run here under another CPU's numpy
(:mod:`other_cpu`) and must not move; ``.ci/dispatch.py``, the CI step that runs the spec check
and the fast paths at every real dispatch level of the host, is tested at the end."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from other_cpu import VARIANTS, emulate

from mxformats.formats import E2M1, E4M3FN
from mxformats.kernels import mx_plan
from mxformats.specgen import mx as spec_mx
from mxformats.validate import numbers
from mxformats.validate.descriptors.fp8_block import FP8BlockDescriptor
from mxformats.validate.model import CodeStats

ROOT = Path(__file__).resolve().parents[1]


def _plan_bytes(plan: Any) -> list[tuple[str, bytes | object]]:
    return [(f.name, np.asarray(v).tobytes() if isinstance(v, np.ndarray) else v)
            for f in dataclasses.fields(plan) for v in [getattr(plan, f.name)]]


@pytest.mark.parametrize(("zero", "toward"), VARIANTS)
@pytest.mark.parametrize(("profile", "elem", "dtype"), [
    ("microxcaling", E2M1, "float32"), ("quark", E2M1, "bfloat16"), ("ocp", E4M3FN, "float16"),
])
def test_kernel_plans_are_the_same_on_another_cpu(
    profile: str, elem: Any, dtype: str, zero: float, toward: float,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The MX kernel plan (the tables every backend compiles) from exact powers of two."""
    build = mx_plan.quantize_plan.__wrapped__  # type: ignore[attr-defined]
    here = _plan_bytes(build(profile, elem, dtype, 32))
    emulate(monkeypatch, zero=zero, toward=toward)
    assert _plan_bytes(build(profile, elem, dtype, 32)) == here


@pytest.mark.parametrize(("zero", "toward"), VARIANTS)
def test_spec_page_numbers_are_the_same_on_another_cpu(
    zero: float, toward: float, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """mx.md's short numbers: powers of two as ``2^k``."""
    values = [2.0**-20, 2.0**21, 2.0**-149, 2.0**127, 3 * 2.0**-20, 1e-30, 0.5, -0.0]
    here = [spec_mx._short(v) for v in values]
    assert here[:4] == ["2^-20", "2^21", "2^-149", "2^127"]
    emulate(monkeypatch, zero=zero, toward=toward)
    assert [spec_mx._short(v) for v in values] == here


@pytest.mark.parametrize(("zero", "toward"), VARIANTS)
def test_expert_outlier_verdict_at_the_threshold_is_the_same_on_another_cpu(
    zero: float, toward: float, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RMS exactly ``ratio`` (4x) off the median with MAD 0: an outlier, on every CPU."""
    rms = {0: 1.0, 1: 1.0, 2: 1.0, 3: 4.0}
    assert numbers.expert_rms_outliers(rms) == [(3, 4.0)]
    emulate(monkeypatch, zero=zero, toward=toward)
    assert numbers.expert_rms_outliers(rms) == [(3, 4.0)]


@pytest.mark.parametrize(("zero", "toward"), VARIANTS)
def test_power_of_two_scale_fingerprint_is_the_same_on_another_cpu(
    zero: float, toward: float, monkeypatch: pytest.MonkeyPatch,
) -> None:
    powers = {"m": {"weight_scale_inv": np.array([2.0**-22, 2.0**-149, 0.5, 2.0**100],
                                                 np.float32)}}
    other = {"m": {"weight_scale_inv": np.array([2.0**-22, 0.75], np.float32)}}
    for _ in range(2):
        assert len(list(FP8BlockDescriptor().fingerprints(None, powers))) == 1  # type: ignore[arg-type]
        assert list(FP8BlockDescriptor().fingerprints(None, other)) == []  # type: ignore[arg-type]
        emulate(monkeypatch, zero=zero, toward=toward)


@pytest.mark.parametrize(("zero", "toward"), VARIANTS)
@pytest.mark.parametrize("order", [[0.0, -0.0, -0.0], [-0.0, 0.0, 0.0]], ids=["+0 first", "-0 first"])
def test_zero_block_message_is_the_same_on_another_cpu(
    order: list[float], zero: float, toward: float, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A file's -0.0 and +0.0 block scales count together as the zero the producer writes."""
    emulate(monkeypatch, zero=zero, toward=toward)
    stats = CodeStats()
    stats.count_zero_blocks(np.array([*order, 1.0]), {0.0: "P", 1.0: "Q"}, "blocks")
    assert stats.zero_blocks == {"blocks with scale 0: P": 3, "blocks with scale 1: Q": 1}


# -- .ci/dispatch.py -------------------------------------------------------------------------


def _ci_dispatch() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ci_dispatch", ROOT / ".ci" / "dispatch.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


def test_levels_go_from_the_host_down_to_the_baseline() -> None:
    ci = _ci_dispatch()
    found = ["X86_V3", "X86_V4", "AVX512_ICL", "AVX512_SPR"]
    got = [(lv.name, lv.environment, lv.enabled) for lv in ci.levels(found, ["X86_V2"])]
    assert got == [
        ("AVX512_SPR", "", tuple(found)),
        ("AVX512_ICL", "AVX512_SPR", tuple(found[:3])),
        ("X86_V4", "AVX512_ICL,AVX512_SPR", tuple(found[:2])),
        ("X86_V3", "X86_V4,AVX512_ICL,AVX512_SPR", ("X86_V3",)),
        ("baseline (X86_V2)", "X86_V3,X86_V4,AVX512_ICL,AVX512_SPR", ()),
    ]
    assert [(lv.name, lv.environment) for lv in ci.levels([], ["ASIMD"])] == [
        ("baseline (ASIMD)", "")]


def test_each_level_of_this_host_is_what_numpy_runs() -> None:
    ci = _ci_dispatch()
    found = ci.host_levels()
    assert found[-1].enabled == () and found[0].environment == ""
    for level in (found[0], found[-1]):  # the host's own, the baseline
        ci.check_level(level)


def test_a_level_numpy_ignores_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """numpy ignores a name it does not know: the run would be the host's own level."""
    ci = _ci_dispatch()
    monkeypatch.delenv("NPY_DISABLE_CPU_FEATURES", raising=False)
    host = ci.host_levels()[0]
    bogus = ci.Level("bogus", ("NOT_A_FEATURE",), ())
    if host.enabled:  # numpy leaves the host's targets on
        with pytest.raises(RuntimeError, match="NOT_A_FEATURE"):
            ci.check_level(bogus)
    assert os.environ.get("NPY_DISABLE_CPU_FEATURES") is None
