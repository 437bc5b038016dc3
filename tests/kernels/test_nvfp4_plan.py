"""The NVFP4 kernel plan (``kernels/nvfp4_plan.py``) says everything a kernel needs.

The plan's steps (its module docstring), evaluated here in numpy float32 from the plan's fields
alone, give the reference's bytes for every producer and input dtype: random blocks of every
magnitude, zero and tiny blocks, all-zero tensors, a caller's ``global_amax``. The argument
checks raise what the reference raises. No kernel backend is needed.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from mxformats.formats import E2M1, E4M3FN
from mxformats.kernels import nvfp4_plan as plans
from mxformats.schemes import nvfp4 as reference

DTYPES = (np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16))


def _round(v: Any, dtype: np.dtype[Any]) -> Any:
    """float32 ``v`` rounded once to ``dtype``, back as float32."""
    with np.errstate(over="ignore"):
        return np.asarray(v, np.float32).astype(dtype).astype(np.float32)


def _quantize_by_plan(plan: plans.NVFP4QuantizePlan, x: np.ndarray,
                      amax: np.float32) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The plan's three steps in numpy float32 on ``x`` (blocks along the last axis)."""
    wide = x.astype(np.float32)
    six_m, arithmetic = np.float32(plan.six_m), plan.arithmetic
    if plan.inverse_global:
        floored = np.maximum(amax, np.float32(plan.amax_floor))
        stored = _round(_round(np.float32(1) / floored, arithmetic) * six_m, arithmetic)
    else:
        stored = _round(amax / six_m, arithmetic)
    if plan.has_nonfinite_global and not np.isfinite(stored):
        stored = np.float32(plan.nonfinite_global)
    block_max = np.max(np.abs(wide.reshape(*wide.shape[:-1], -1, 16)), axis=-1)
    if plan.inverse_global:
        scale = _round(block_max / np.float32(6), arithmetic) * stored
    else:
        scale = block_max / (np.float32(6) * stored)
    if not plan.zero_after_cast:
        scale = np.where(scale == 0, np.float32(plan.zero_block_scale), scale)
    clamped = np.clip(scale, np.float32(plan.scale_floor), np.float32(plan.scale_clamp))
    nan = np.isnan(clamped)
    value = E4M3FN.decode(E4M3FN.encode(np.where(nan, 0, clamped).astype(np.float64)),
                          np.float32)
    if plan.zero_after_cast:
        value = np.where(value == 0, np.float32(plan.zero_block_scale), value)
    scale_bytes = np.where(nan, plan.nan_scale_byte, E4M3FN.encode(value.astype(np.float64)))
    value = np.where(nan, np.float32(np.nan), value).astype(np.float32)
    divisor = value / stored if plan.inverse_global else value * stored
    quotient = wide.reshape((*block_max.shape, 16)) / divisor[..., None]
    magnitude = E2M1.encode(np.abs(quotient).astype(np.float64), nan_code=plan.element_nan_code)
    codes = (magnitude | np.where(quotient < 0, 8, 0)).reshape(x.shape)
    return codes.astype(np.uint8), scale_bytes.astype(np.uint8), stored


def _cases(dtype: np.dtype[Any]) -> list[tuple[str, np.ndarray, float | None]]:
    rng = np.random.default_rng(13)
    top = float(ml_dtypes.finfo(dtype).max) / 4
    spread = rng.standard_normal((64, 64)) * np.exp2(rng.integers(-40, 12, (64, 1)))
    with np.errstate(over="ignore"):
        random = np.clip(spread, -top, top).astype(dtype)
    tiny = np.zeros((2, 32), dtype)
    tiny[0, 0], tiny[1, 17] = 1.0, 2.0**-14
    return [("random", random, None), ("zero", np.zeros((3, 16), dtype), None),
            ("tiny blocks", tiny, None), ("shared amax", random, 1000.0),
            ("zero amax", np.zeros((1, 16), dtype), 0.0)]


@pytest.mark.parametrize("profile", sorted(reference.PRODUCERS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_plan_steps_give_the_reference_bytes(profile: str, dtype: np.dtype[Any]) -> None:
    plan = plans.quantize_plan(profile, dtype)
    assert plan.global_shape == reference.PRODUCERS[profile].global_shape
    for name, x, global_amax in _cases(dtype):
        expected = reference.quantize_nvfp4(x, profile=profile, global_amax=global_amax)
        amax = plans.check_global_amax(global_amax, dtype)
        with np.errstate(all="ignore"):
            codes, scales, stored = _quantize_by_plan(
                plan, x, np.float32(np.max(np.abs(x.astype(np.float32))) if amax is None
                                    else amax))
        assert np.array_equal(codes, expected.codes), name
        assert np.array_equal(scales, expected.scales), name
        assert np.float32(stored).tobytes() == expected.global_scale.reshape(()).tobytes(), name


def test_every_record_is_claimed() -> None:
    assert all(map(plans.quantize_claims, reference.PRODUCERS.values()))
    assert all(map(plans.dequantize_claims, reference.CONSUMERS.values()))
    assert {plans.dequantize_plan(name).global_op for name in reference.CONSUMERS} == \
        set(plans.GLOBAL_OP_IDS.values())


def _outcome(call: Any) -> Any:
    try:
        call()
    except Exception as err:  # compared with the reference's
        return type(err)
    return None


QUANTIZE_REFUSALS: dict[str, tuple[Any, dict[str, Any]]] = {
    "unknown profile": (np.ones((2, 16), np.float32), {"profile": "no-such-profile"}),
    "integer data": (np.ones((2, 16), np.int32), {}),
    "float64": (np.ones((2, 16), np.float64), {}),
    "0-d": (np.float32(1.0), {}),
    "axis out of range": (np.ones((2, 16), np.float32), {"axis": 2}),
    "axis below range": (np.ones((2, 16), np.float32), {"axis": -3}),
    "ragged": (np.ones((2, 24), np.float32), {}),
    "empty axis": (np.ones((2, 0), np.float32), {}),
    "negative global_amax": (np.ones((2, 16), np.float32), {"global_amax": -1.0}),
    "NaN global_amax": (np.ones((2, 16), np.float32), {"global_amax": float("nan")}),
    "global_amax beyond float16": (np.ones((2, 16), np.float16), {"global_amax": 1e6}),
}


@pytest.mark.parametrize("case", QUANTIZE_REFUSALS)
def test_quantize_checks_raise_what_the_reference_raises(case: str) -> None:
    values, kwargs = QUANTIZE_REFUSALS[case]
    with np.errstate(over="ignore"):  # float16(1e6) overflows to Inf, then refused
        expected = _outcome(lambda: reference.quantize_nvfp4(values, **kwargs))
    assert expected is not None, "the reference takes it"
    x = np.asarray(values)

    def check() -> None:
        plans.check_quantize_args(x.shape, x.dtype, kwargs.get("axis", -1),
                                  kwargs.get("profile", "modelopt"))
        plans.check_global_amax(kwargs.get("global_amax"), x.dtype)

    assert _outcome(check) is expected


DEQUANTIZE_REFUSALS: dict[str, tuple[Any, Any, Any, dict[str, Any]]] = {
    "no profile": (np.zeros((2, 16), np.uint8), np.zeros((2, 1), np.uint8), 1.0,
                   {"profile": None}),
    "unknown profile": (np.zeros((2, 16), np.uint8), np.zeros((2, 1), np.uint8), 1.0,
                        {"profile": "modelopt"}),
    "axis out of range": (np.zeros((2, 16), np.uint8), np.zeros((2, 1), np.uint8), 1.0,
                          {"axis": 2}),
    "float codes": (np.zeros((2, 16), np.float32), np.zeros((2, 1), np.uint8), 1.0, {}),
    "float packed codes": (np.zeros((2, 8), np.float32), np.zeros((2, 1), np.uint8), 1.0,
                           {"packed": True}),
    "float scales": (np.zeros((2, 16), np.uint8), np.zeros((2, 1), np.float32), 1.0, {}),
    "scales of the wrong shape": (np.zeros((2, 16), np.uint8), np.zeros((2, 2), np.uint8), 1.0,
                                  {}),
    "packed, scales of the unpacked shape": (np.zeros((2, 16), np.uint8),
                                             np.zeros((2, 1), np.uint8), 1.0, {"packed": True}),
    "two global scales": (np.zeros((2, 16), np.uint8), np.zeros((2, 1), np.uint8),
                          np.ones(2, np.float32), {}),
}


@pytest.mark.parametrize("case", DEQUANTIZE_REFUSALS)
def test_dequantize_checks_raise_what_the_reference_raises(case: str) -> None:
    codes, scales, global_scale, overrides = DEQUANTIZE_REFUSALS[case]
    kwargs = {"profile": "vllm-modelopt", **overrides}
    expected = _outcome(lambda: reference.dequantize_nvfp4(codes, scales, global_scale,
                                                           **kwargs))
    assert expected is not None, "the reference takes it"
    got = _outcome(lambda: plans.check_dequantize_args(
        codes.shape, codes.dtype, scales.shape, scales.dtype, np.asarray(global_scale).size,
        axis=kwargs.get("axis", -1), profile=kwargs["profile"],
        packed=kwargs.get("packed", False)))
    assert got is expected
