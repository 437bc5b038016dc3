"""The backend-neutral front end of the NVFP4 kernels (``quantize_nvfp4`` and
``dequantize_nvfp4``, :mod:`mxformats.schemes.nvfp4`, spec/nvfp4.md).

It checks arguments exactly as the reference does (same exception classes for the same bad
input, in the reference's order) and derives a frozen *plan* of plain numbers from the
producer's :class:`~mxformats.schemes.nvfp4.NVFP4Producer` or the consumer's
:class:`~mxformats.schemes.nvfp4.NVFP4Consumer` record, field by field (no branch on a
profile's name), which a kernel takes as compile-time constants. A new record is claimed as
soon as its fields are ones the plan can say. A quantize kernel computes, with ``amax`` the
tensor maximum (a value of the input dtype) and ``b`` a block's maximum:

1. the stored global scale ``g``: ``amax / six_m`` rounded to ``arithmetic`` (``inverse_global``
   False), or ``1 / max(amax, amax_floor)`` rounded to ``arithmetic``, times ``six_m``,
   rounded to float32 and to ``arithmetic`` (True: torch's ``2688 / t`` is a reciprocal and a
   multiply, each rounded); a non-finite ``g`` becomes ``nonfinite_global`` where
   ``has_nonfinite_global``;
2. the block scale: ``float32(b) / float32(6 g)`` (``inverse_global`` False) or
   ``float32(arithmetic(b / 6)) * g`` (True), a zero replaced by ``zero_block_scale`` before
   the clamp unless ``zero_after_cast``, clamped to ``[scale_floor, scale_clamp]`` (NaN
   passes), rounded to E4M3FN (nearest even), a zero replaced by ``zero_block_scale`` after the
   cast where ``zero_after_cast``; a NaN scale is the byte ``nan_scale_byte``;
3. the element ``float32(x) / float32(s * g)`` (``inverse_global`` False) or ``float32(x) /
   float32(s / g)`` (True), every float32 operation rounded once (divisions correctly rounded,
   no contraction), then the E2M1 code: nearest, ties to even, saturating at 6, the sign bit iff
   the quotient is < 0, code ``element_nan_code`` for a NaN quotient.

A dequantize kernel computes ``e2m1 × s × g`` rounded once to float32 (``global_op``
``multiply``), ``e2m1 × s × float32(1 / g)`` (``reciprocal``) or ``e2m1 × float32(s / g)``
(``divide``), then rounds once to the output dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from mxformats.arith import FLOAT_DTYPES, check_axis
from mxformats.formats import E2M1, E4M3FN
from mxformats.schemes import nvfp4 as reference
from mxformats.schemes.int4 import check_group_scales

from .mx_plan import FloatLayout

__all__ = [
    "GLOBAL_OP_IDS",
    "NVFP4DequantizePlan",
    "NVFP4QuantizePlan",
    "check_dequantize_args",
    "check_global_amax",
    "check_quantize_args",
    "dequantize_claims",
    "dequantize_plan",
    "quantize_claims",
    "quantize_plan",
]

#: How a consumer applies the global scale (NVFP4Consumer.global_op), as kernel constants.
GLOBAL_OP_IDS = {"multiply": 0, "reciprocal": 1, "divide": 2}
#: The global forms the quantize kernels compute: ``False`` for a multiplier ``amax / 6M``,
#: ``True`` for its inverse ``6M / amax`` (a divisor).
_INVERSE = {"scale_2": False, "inverse": True}
_F32 = np.dtype(np.float32)


@dataclass(frozen=True)
class NVFP4QuantizePlan:
    """Everything an NVFP4 quantize kernel needs, for one (producer, input dtype); the module
    docstring says how each field is used. ``arithmetic``: the dtype of the global scale and
    of ``b / 6`` (float32, or the input dtype). ``global_shape``: the stored global scale's
    shape. ``element`` / ``scale``: the E2M1 and E4M3FN layouts."""

    profile: str
    input_dtype: np.dtype[Any]
    arithmetic: np.dtype[Any]
    inverse_global: bool
    six_m: float
    amax_floor: float
    has_nonfinite_global: bool
    nonfinite_global: float
    scale_floor: float
    scale_clamp: float
    zero_block_scale: float
    zero_after_cast: bool
    nan_scale_byte: int
    element_nan_code: int
    global_shape: tuple[int, ...]
    element: FloatLayout
    scale: FloatLayout


@dataclass(frozen=True)
class NVFP4DequantizePlan:
    """Everything an NVFP4 dequantize kernel needs for one consumer: ``global_op``
    (:data:`GLOBAL_OP_IDS`), and the E2M1 and E4M3FN layouts it decodes."""

    profile: str
    global_op: int
    element: FloatLayout
    scale: FloatLayout


def quantize_claims(record: reference.NVFP4Producer) -> bool:
    """Whether the kernels compute producer ``record``: its global form is one they know."""
    return record.global_form in _INVERSE and record.arithmetic in ("float32", "input")


def dequantize_claims(record: reference.NVFP4Consumer) -> bool:
    """Whether the kernels compute consumer ``record``: its global operation is one they know."""
    return record.global_op in GLOBAL_OP_IDS


def quantize_plan(profile: str, dtype: np.dtype[Any]) -> NVFP4QuantizePlan:
    """The plan of producer ``profile`` (a key of ``PRODUCERS``) for input of ``dtype``
    (float16, bfloat16 or float32)."""
    record = reference.get_producer(profile)
    arithmetic = record.arithmetic_dtype(dtype)
    inverse = _INVERSE[record.global_form]
    return NVFP4QuantizePlan(
        profile=record.name, input_dtype=dtype, arithmetic=arithmetic, inverse_global=inverse,
        six_m=reference.E2M1_MAX * record.scale_max,
        # generate_gparam floors the amax at finfo(dtype).tiny before its reciprocal
        amax_floor=float(ml_dtypes.finfo(arithmetic).tiny) if inverse else 0.0,
        has_nonfinite_global=record.nonfinite_global is not None,
        nonfinite_global=record.nonfinite_global or 0.0,
        scale_floor=record.scale_floor, scale_clamp=float(E4M3FN.max),
        zero_block_scale=record.zero_block_scale, zero_after_cast=record.zero_after_cast,
        nan_scale_byte=reference.NAN_SCALE_BYTE,
        element_nan_code=int(E2M1.encode(np.array([np.nan]), nan_code=7)[0]),
        global_shape=record.global_shape, element=FloatLayout.of_format(E2M1),
        scale=FloatLayout.of_format(E4M3FN))


def dequantize_plan(profile: str) -> NVFP4DequantizePlan:
    """The plan of consumer ``profile`` (a key of ``CONSUMERS``)."""
    record = reference.get_consumer(profile)
    return NVFP4DequantizePlan(profile=record.name, global_op=GLOBAL_OP_IDS[record.global_op],
                               element=FloatLayout.of_format(E2M1),
                               scale=FloatLayout.of_format(E4M3FN))


def check_quantize_args(shape: tuple[int, ...], dtype: np.dtype[Any], axis: int,
                        profile: str) -> int:
    """The reference's argument checks, in its order, for a tensor of ``shape`` and ``dtype``:
    ValueError for an unknown profile, a dtype other than float16/bfloat16/float32 (TypeError
    for a non-float dtype), a 0-d tensor, an axis out of range, or a length along ``axis`` that
    is not a positive multiple of 16. Returns the axis in ``[0, ndim)``. (The reference's
    NaN/±Inf refusal needs the data: the kernel's.)"""
    reference.get_producer(profile)
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"input: dtype {dtype} is not one of float16, bfloat16, float32, "
                        "float64")
    if dtype == np.float64:
        raise ValueError(f"profile {profile!r} takes float16, bfloat16 or float32 weights, got "
                         f"{dtype}")
    if not shape:
        raise ValueError("quantize_nvfp4 needs at least one dimension")
    ax = check_axis(len(shape), axis)
    if shape[ax] == 0 or shape[ax] % reference.BLOCK:
        raise ValueError(
            f"the quantized axis has length {shape[ax]}, not a positive multiple of "
            f"{reference.BLOCK}: no NVFP4 producer defines it")
    return ax


def check_global_amax(global_amax: float | None, dtype: np.dtype[Any]) -> float | None:
    """``global_amax`` rounded to ``dtype`` as the reference rounds it (exact as a float32),
    None for None; ValueError unless it is finite and >= 0 there."""
    if global_amax is None:
        return None
    with np.errstate(over="ignore"):
        amax = np.float32(dtype.type(global_amax))
    if not (np.isfinite(amax) and amax >= 0):
        raise ValueError(f"global_amax must be finite and >= 0, got {global_amax!r}")
    return float(amax)


def check_dequantize_args(codes_shape: tuple[int, ...], codes_dtype: np.dtype[Any],
                          scales_shape: tuple[int, ...], scales_dtype: np.dtype[Any],
                          global_size: int, *, axis: int, profile: str | None,
                          packed: bool) -> tuple[int, NVFP4DequantizePlan]:
    """The reference's argument checks of ``dequantize_nvfp4`` that need no data, in its
    order: ValueError for a missing or unknown consumer or an axis out of range; non-integer
    codes (TypeError packed, ValueError unpacked); TypeError for scales that are not uint8;
    ValueError for scales that are not one per 16 along ``axis`` of the unpacked codes, or a
    global scale that is not one value. The value checks (codes in 0..15, packed bytes in
    0..255) are the caller's. Returns ``(axis, plan)``."""
    if profile is None:
        raise ValueError("pass a consumer profile; valid: "
                         f"{', '.join(sorted(reference.CONSUMERS))}")
    plan = dequantize_plan(profile)
    ax = check_axis(len(codes_shape), axis)
    if codes_dtype.kind not in "iu":
        if packed:
            raise TypeError(f"packed codes must be integers (uint8), got {codes_dtype}")
        raise ValueError("codes must be 4-bit E2M1 codes (0..15)")
    if scales_dtype != np.uint8:
        raise TypeError(f"scales must be E4M3FN bytes (uint8), got {scales_dtype}")
    unpacked = list(codes_shape)
    unpacked[ax] *= 2 if packed else 1
    check_group_scales(tuple(unpacked), scales_shape, reference.BLOCK, ax)
    if global_size != 1:
        raise ValueError(f"global_scale must hold one value, got {global_size}")
    return ax, plan
