"""The backend-neutral front end of the FP8 block kernels (``quantize_fp8_block`` and
``dequantize_fp8_block``, :mod:`mxformats.schemes.fp8_block`, spec/fp8-block.md).

It checks arguments exactly as the reference does (same exceptions for the same bad input) and
derives a frozen *plan* of plain numbers from the producer's :class:`FP8BlockProducer` record,
field by field (no branch on a profile's name), which a kernel takes as compile-time
constants. A new record in :data:`~mxformats.schemes.fp8_block.PRODUCERS` is claimed as soon as
its fields are ones the plan can say.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from mxformats.arith import FLOAT_DTYPES
from mxformats.schemes import fp8_block as reference

from .mx_plan import FloatLayout

__all__ = [
    "MULTIPLIER_IDS",
    "FP8BlockPlan",
    "check_dequantize_args",
    "check_quantize_args",
    "quantize_claims",
    "quantize_plan",
]

#: How the scaled element is formed (FP8BlockProducer.multiplier), as kernel constants.
MULTIPLIER_IDS = {"max-over-amax": 0, "reciprocal-of-scale": 1, "divide-by-scale": 2}


@dataclass(frozen=True)
class FP8BlockPlan:
    """Everything an FP8 block quantize kernel needs, for one (profile, input dtype).

    ``amax_floor``: the tile maximum's floor rounded to the scale dtype (0.0 and
    ``has_floor=False``: none); ``max_over_amax_floor``: the same floor in float32, for the
    ``max-over-amax`` multiplier. ``scale_dtype``: the dtype the scale is computed in and
    stored as. ``zero_scale``: what a zero scale becomes (``None``: kept). ``element``: the
    FP8 layout the codes are rounded into. ``fnuz``: vLLM's MI300 conversion afterwards
    (0x80 -> 0x00, scales doubled).
    """

    profile: str
    fmt_max: float
    has_floor: bool
    amax_floor: float
    max_over_amax_floor: float
    scale_dtype: np.dtype[Any]
    power_of_two_scale: bool
    zero_scale: float | None
    multiplier: int
    quotient_dtype: np.dtype[Any]
    clamp_to_max: bool
    element: FloatLayout
    fnuz: bool


def quantize_claims(record: reference.FP8BlockProducer) -> bool:
    """Whether the kernels compute ``record``: its multiplier is one they know."""
    return record.multiplier in MULTIPLIER_IDS


def quantize_plan(profile: str, dtype: np.dtype[Any]) -> FP8BlockPlan:
    """The plan of ``profile`` (a key of ``PRODUCERS``) for input of ``dtype``."""
    record = reference.get_producer(profile)
    own = record.scale_dtype_for(dtype)
    floor = record.amax_floor
    zero = float(own.type(ml_dtypes.finfo(own).eps)) if record.zero_scale_eps else None
    return FP8BlockPlan(
        profile=record.name, fmt_max=float(record.fmt_max), has_floor=floor is not None,
        amax_floor=float(own.type(floor or 0.0)),
        max_over_amax_floor=float(np.float32(floor or 0.0)),
        scale_dtype=own, power_of_two_scale=record.power_of_two_scale, zero_scale=zero,
        multiplier=MULTIPLIER_IDS[record.multiplier],
        quotient_dtype=dtype if record.quotient_dtype == "input" else np.dtype(np.float32),
        clamp_to_max=record.clamp_to_max, element=FloatLayout.of_format(record.element),
        fnuz=record.fnuz,
    )


def check_quantize_args(shape: tuple[int, ...], dtype: np.dtype[Any], block: object,
                        profile: str) -> tuple[int, int]:
    """The reference's argument checks, in its order, for a tensor of ``shape`` and ``dtype``:
    ValueError for an unknown profile, a bad block, a shape that is not a non-empty 2-D
    weight, a dtype other than float16/bfloat16/float32 (TypeError for a non-float dtype).
    Returns ``(bm, bn)``."""
    reference.get_producer(profile)
    bm, bn = reference.check_block(block)
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"input: dtype {dtype} is not one of float16, bfloat16, float32, "
                        "float64")
    if len(shape) != 2 or 0 in shape:
        raise ValueError(
            f"quantize_fp8_block takes a non-empty 2-D weight [M, N], got shape {shape}; "
            "quantize a stack of experts one 2-D tensor at a time")
    if dtype not in reference.INPUT_DTYPES:
        raise ValueError(
            f"quantize_fp8_block takes float16, bfloat16 or float32 weights, not {dtype}")
    return bm, bn


def check_dequantize_args(codes_shape: tuple[int, ...], codes_dtype: str,
                          scales_shape: tuple[int, ...], block: object,
                          profile: str) -> tuple[FloatLayout, tuple[int, int], tuple[int, int]]:
    """The reference's checks of ``dequantize_fp8_block``'s arguments, in its order: ValueError
    for an unknown profile, a bad block, codes that are not a 2-D uint8 array (``codes_dtype``:
    the dtype's name), scales of a shape other than the tile grid of the codes. Returns the
    profile's code layout (E4M3FNUZ after the fnuz conversion), ``(bm, bn)`` and the grid."""
    record = reference.get_producer(profile)
    bm, bn = reference.check_block(block)
    if codes_dtype != "uint8" or len(codes_shape) != 2:
        raise ValueError(f"codes must be a 2-D uint8 array, got {codes_dtype} {codes_shape}")
    grid = reference.scale_grid(codes_shape, (bm, bn))
    if scales_shape != grid:
        raise ValueError(f"scales have shape {scales_shape}; {codes_shape} in tiles of "
                         f"{(bm, bn)} needs {grid}")
    return FloatLayout.of_format(record.code_format), (bm, bn), grid
