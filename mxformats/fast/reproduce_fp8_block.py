"""The compiled ``--source`` step for FP8 block modules (numba,
:mod:`mxformats.fast.compiled_fp8_block`), and the compiled FP8 block quantizer it runs, in
the fast paths' calling conventions.

:func:`reproduce_fp8_block` answers for one FP8 block module in one pass over its BF16 source:
every code and scale equal to what the producer profile writes, and the
:class:`~mxformats.fast.moments.Moments` of the dequantized checkpoint against the source. It
answers None wherever that pass does not apply or the answer is not "all equal and finite"
(no numba, another dtype or shape, a byte that differs, NaN/Inf): the caller then runs the
numpy fast paths, which give the same bytes, the same moments bits and the messages that say
where.

:func:`plan` reads a producer record (:class:`~mxformats.schemes.fp8_block.FP8BlockProducer`)
into the kernels' :class:`~mxformats.fast.compiled_fp8_block.Plan`; every record whose element
is E4M3FN has one, whatever its scale dtype, floor, rounding or multiplier.

:func:`quantize_fp8_block` is :func:`mxformats.fast.quantize_fp8_block` with the compiled
quantizer for 2-D BF16 input: ``tests/test_fast_compiled_fp8_block.py`` checks it with the
harness as the numpy fast paths are checked; without numba it is the numpy fast path.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from mxformats.arith import BF16
from mxformats.fast import fp8_block as fast_fp8_block
from mxformats.fast import jit
from mxformats.fast.chunks import _float_input
from mxformats.fast.moments import LANES, TERMS, Moments
from mxformats.formats import E4M3FN
from mxformats.schemes import fp8_block as reference_fp8_block
from mxformats.schemes.fp8_block import FP8BlockArray, FP8BlockProducer

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["KERNELS", "plan", "quantize_fp8_block", "reproduce_fp8_block"]

#: The compiled module (:func:`mxformats.fast.jit.compiled`).
KERNELS = "compiled_fp8_block"
_F32 = np.dtype(np.float32)
_LITTLE_ENDIAN = sys.byteorder == "little"
_MULTIPLIERS = ("max-over-amax", "reciprocal-of-scale", "divide-by-scale")


def _in(dtype: np.dtype[Any], value: float) -> np.float32:
    """``value`` rounded to ``dtype`` (float32 or bfloat16), as float32."""
    rounded: np.float32 = _F32.type(np.asarray(value, dtype=_F32).astype(dtype).item())
    return rounded  # exact: every bfloat16 and float32 value is a float32


def plan(record: FP8BlockProducer, kernels: Any) -> Any:
    """``record``'s :class:`~mxformats.fast.compiled_fp8_block.Plan` for BF16 input (the
    dtypes of ``mxformats.schemes.fp8_block._scales`` and ``_scaled`` for a bfloat16
    weight), or None for a record the kernels do not compute: an element other than E4M3FN,
    or an FNUZ conversion of bfloat16 scales (which the reference refuses:
    :func:`mxformats.conversions.e4m3fn_to_fnuz` takes float32 scales)."""
    own = _F32 if record.scale_dtype == "float32" else BF16
    if (record.element is not E4M3FN or record.multiplier not in _MULTIPLIERS
            or (record.fnuz and own != _F32)):
        return None
    quotient = BF16 if record.quotient_dtype == "input" else _F32
    divides = record.multiplier == "divide-by-scale"
    floor = record.amax_floor
    return kernels.Plan(
        scale_bf16=own == BF16,
        scale_floor=_in(own, floor) if floor is not None else np.float32(0),
        fmt_max=np.float32(record.fmt_max),
        power_of_two=record.power_of_two_scale,
        zero_scale=(np.float32(ml_dtypes.finfo(own).eps) if record.zero_scale_eps
                    else np.float32(0)),
        multiplier=_MULTIPLIERS.index(record.multiplier),
        multiplier_floor=np.float32(floor or 0),
        quotient_bf16=divides and quotient == BF16,
        clamp=(_in(quotient if divides else _F32, record.fmt_max) if record.clamp_to_max
               else np.float32(np.inf)),
        negative_zero=np.uint8(0x00 if record.fnuz else 0x80),
        stored_factor=np.float32(2.0 if record.fnuz else 1.0),
        code_factor=np.float32(0.5 if record.fnuz else 1.0),
        nan_codes=(np.uint8(0x80), np.uint8(0x80)) if record.fnuz else (np.uint8(0x7F),
                                                                         np.uint8(0xFF)),
    )


def _stored_bits(scales: NDArray[Any]) -> NDArray[np.uint32] | None:
    """The scales' float32 bits (a bfloat16 scale widened, exactly); None for another dtype."""
    s = np.ascontiguousarray(scales)
    if s.dtype == _F32:
        bits: NDArray[np.uint32] = s.view(np.uint32)
        return bits
    if s.dtype == BF16:
        widened: NDArray[np.uint32] = s.view(np.uint16).astype(np.uint32) << np.uint32(16)
        return widened
    return None


def reproduce_fp8_block(w: NDArray[Any], codes: NDArray[Any], scales: NDArray[Any],
                        block: tuple[int, int], profile: str,
                        consumer: str | None) -> Moments | None:
    """The moments of FP8 block ``codes``/``scales`` (E4M3 bytes ``[O, I]``, one scale per
    ``block`` tile on the ceil grid), dequantized by ``consumer``, against BF16 source ``w``
    (``[O, I]``), when every byte is what producer ``profile`` writes from ``w`` and every
    value is finite; else None (as when numba is absent or the input is outside the pass: the
    caller computes it in numpy).

    The pass applies to a 2-D BF16 ``w``, uint8 ``codes`` of its shape, ``scales`` of the
    grid's shape in the dtype the profile stores for BF16 input
    (:meth:`~mxformats.schemes.fp8_block.FP8BlockProducer.scale_dtype_for`), a profile
    :func:`plan` computes and a consumer of :data:`mxformats.schemes.fp8_block.CONSUMERS`
    (each the float32 product ``float32(code) × float32(scale)``)."""
    kernels = jit.compiled(KERNELS)
    record = reference_fp8_block.PRODUCERS.get(profile)
    if (kernels is None or not _LITTLE_ENDIAN or record is None
            or consumer not in reference_fp8_block.CONSUMERS):
        return None
    steps = plan(record, kernels)
    if steps is None or w.dtype != BF16 or w.ndim != 2 or 0 in w.shape:
        return None
    grid = reference_fp8_block.scale_grid(w.shape, block)
    if (codes.dtype != np.uint8 or codes.shape != w.shape or scales.shape != grid
            or scales.dtype != record.scale_dtype_for(BF16)):
        return None
    stored = _stored_bits(scales)
    if stored is None:
        return None
    totals = np.zeros((len(TERMS), LANES), dtype=np.float64)
    status, source_varies, weight_varies = kernels.reproduce_fp8_block_bf16(
        np.ascontiguousarray(w).view(np.uint16), np.ascontiguousarray(codes), stored,
        block[0], block[1], steps, totals)
    if status != kernels.OK:
        return None
    return Moments.from_lanes(totals, w.size, source_varies, weight_varies)


def quantize_fp8_block(x: object, *, block: tuple[int, int] = (128, 128),
                       profile: str = "deepseek", threads: int | None = None) -> FP8BlockArray:
    """:func:`mxformats.fast.quantize_fp8_block` (the same bytes), with 2-D BF16 input of a
    profile :func:`plan` computes quantized by the compiled quantizer
    :func:`reproduce_fp8_block` runs. Everything else (a tile holding NaN or Inf included),
    and every call without numba, is the numpy fast path's."""
    kernels = jit.compiled(KERNELS)
    data = _float_input(x)
    record = reference_fp8_block.PRODUCERS.get(profile) if isinstance(profile, str) else None
    steps = None if kernels is None or record is None else plan(record, kernels)
    try:
        tile = reference_fp8_block.check_block(block)
    except ValueError:
        tile = None
    if (kernels is None or steps is None or record is None or tile is None
            or not _LITTLE_ENDIAN or data is None
            or data.dtype != BF16 or data.ndim != 2 or 0 in data.shape):
        return fast_fp8_block.quantize_fp8_block(x, block=block, profile=profile,
                                                 threads=threads)
    codes = np.empty(data.shape, dtype=np.uint8)
    stored = np.empty(reference_fp8_block.scale_grid(data.shape, tile), dtype=np.uint32)
    if not kernels.quantize_fp8_block_bf16(np.ascontiguousarray(data).view(np.uint16),
                                           tile[0], tile[1], steps, codes, stored):
        return fast_fp8_block.quantize_fp8_block(x, block=block, profile=profile,
                                                 threads=threads)
    scales = stored.view(_F32)
    if record.scale_dtype_for(BF16) == BF16:
        scales = scales.astype(BF16)  # exact: the kernel rounded them to bfloat16
    return FP8BlockArray(codes, scales, tile, record.name)
