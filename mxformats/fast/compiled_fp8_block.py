"""The compiled FP8 block passes (numba; imported only through
:func:`mxformats.fast.jit.compiled`): E4M3 codes with one scale per ``bm × bn`` tile, from
BF16 bits, for every producer record of :mod:`mxformats.schemes.fp8_block`.

A producer is a :class:`Plan`, built from its record by
:func:`mxformats.fast.reproduce_fp8_block.plan` (never from its name): how the tile maximum
becomes the scale (floor, ``/ fmt_max`` in float32, rounded to the scale dtype, rounded up to
a power of two, zero replaced by eps), how the scaled element is formed (a float32 multiply
by ``fmt_max / amax`` or ``1 / scale``, or a division by the scale rounded to the quotient
dtype), the clamp, and the FNUZ conversion. Every operation is the reference's float32 (or
bfloat16-rounded) operation in the reference's order, without ``fastmath``; the E4M3 code
comes from the float32 bits (nearest-even, saturating, no table), so the loops over a tile's
columns are branch-free and LLVM vectorises them.

A tile's scale needs the maximum over its ``bm`` rows, so the unit of work is a **band** of
``bm`` rows: one pass over the band's BF16 bits takes every tile's maximum (the band, 1.8 MiB
for a 7168-wide module, stays in cache), a second quantizes it row by row. Rows are visited in
order, so the moments' terms reach their lanes and pieces in increasing element index (C
order over the whole module, :mod:`mxformats.fast.moments`).

- :func:`quantize_fp8_block_bf16`: the quantizer (codes and scale bits of every tile).
- :func:`reproduce_fp8_block_bf16`: the whole ``--source`` step for one module in one pass
  over bands: quantize, compare every code and scale with the checkpoint's, dequantize the
  checkpoint's codes as vLLM's ``scaled_dequantize`` (``float32(code) × float32(scale)``) and
  accumulate the moments' lane sums; no temporary larger than a row.

Both refuse (False / :data:`OTHER`) a tile holding NaN or Inf: the numpy paths compute it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from mxformats.fast.compiled import OK, OTHER, _accumulate, finish
from mxformats.fast.moments import LANES

__all__ = ["OK", "OTHER", "Plan", "quantize_fp8_block_bf16", "reproduce_fp8_block_bf16"]

#: How the scaled element is formed (:data:`mxformats.schemes.fp8_block.Multiplier`).
MAX_OVER_AMAX, RECIPROCAL_OF_SCALE, DIVIDE_BY_SCALE = 0, 1, 2

_TERMS = 7
_BF16_MAGNITUDE = 0x7FFF
_BF16_INF = 0x7F80
_MAGNITUDE = 0x7FFFFFFF
_F32_INF = 0x7F800000
_E4M3_MAX_CODE = 0x7E  # 448
_E4M3_NAN_CODE = 0x7F  # the code torch writes for every NaN (fp8_block.NAN_CODE)
_MIN_NORMAL = 0x3C800000  # 2**-6, E4M3's least normal, as float32 bits
_SUBNORMAL_GRID = 0x46800000  # 2**14: float32 values there are spaced 2**-9, E4M3's quantum
_EXPONENT_REBIAS = (127 - 7) << 3  # float32 exponent and 3 mantissa bits -> E4M3 code
_U32 = np.uint32


class Plan(NamedTuple):
    """One producer record as the kernels read it (float32 constants, flags)."""

    #: the scale is rounded to bfloat16 (its dtype is bfloat16), else it stays float32
    scale_bf16: bool
    #: the tile maximum's floor in the scale dtype (0: none)
    scale_floor: np.float32
    #: ``max`` in ``scale = amax / max``, float32
    fmt_max: np.float32
    #: the scale is rounded up to a power of two (DeepGEMM ``ceil_to_ue8m0``)
    power_of_two: bool
    #: a zero scale becomes this value (0: stays zero, the same bits)
    zero_scale: np.float32
    #: ``MAX_OVER_AMAX``, ``RECIPROCAL_OF_SCALE`` or ``DIVIDE_BY_SCALE``
    multiplier: int
    #: the floor of the tile maximum in ``fmt_max / amax`` (float32; 0: none)
    multiplier_floor: np.float32
    #: the quotient ``x / scale`` is rounded to bfloat16
    quotient_bf16: bool
    #: the scaled element is clamped to ``±clamp`` (+Inf: not clamped)
    clamp: np.float32
    #: the code written for -0 (0x80; 0x00 where the codes are E4M3FNUZ, whose 0x80 is NaN)
    negative_zero: np.uint8
    #: the stored scale is the computed one times this (2 for E4M3FNUZ: vLLM's conversion)
    stored_factor: np.float32
    #: a code's value is its E4M3FN value times this (0.5 for E4M3FNUZ, the same bits)
    code_factor: np.float32
    #: the two codes that decode to NaN (E4M3FN 0x7F and 0xFF; E4M3FNUZ 0x80 twice)
    nan_codes: tuple[np.uint8, np.uint8]


@njit(cache=True, error_model="numpy", inline="always")
def _f32(word: np.uint32) -> np.float32:
    """The float32 whose bits are ``word``."""
    value: np.float32 = np.uint32(word).view(np.float32)
    return value


@njit(cache=True, error_model="numpy", inline="always")
def _bits(value: np.float32) -> np.uint32:
    """The bits of float32 ``value``."""
    word: np.uint32 = np.float32(value).view(np.uint32)
    return word


@njit(cache=True, error_model="numpy", inline="always")
def _round_bf16(value: np.float32) -> np.float32:
    """``value`` rounded to bfloat16 (nearest-even, as ml_dtypes' cast), as float32; NaN kept.
    (Every integer step is cut back to uint32, here and below: numba widens integer arithmetic
    to 64 bits, which would halve the vector lanes.)"""
    word = _bits(value)
    lsb = _U32(_U32(word >> _U32(16)) & _U32(1))
    rounded = _U32(_U32(_U32(word + _U32(0x7FFF)) + lsb) & _U32(0xFFFF0000))
    nan = _U32(word & _U32(_MAGNITUDE)) > _U32(_F32_INF)
    return _f32(word if nan else rounded)  # type: ignore[no-any-return]


@njit(cache=True, error_model="numpy", inline="always")
def _e4m3(value: np.float32) -> np.uint8:
    """The E4M3FN code of float32 ``value``: nearest-even, saturating to ±448, NaN 0x7F.
    Normal range: the float32 exponent and mantissa rounded to 3 bits (the carry steps the
    exponent); below 2**-6 one float32 addition of 2**14 rounds to E4M3's subnormal quantum."""
    word = _bits(value)
    sign = _U32(_U32(word >> _U32(24)) & _U32(0x80))
    magnitude = _U32(word & _U32(_MAGNITUDE))
    lsb = _U32(_U32(magnitude >> _U32(20)) & _U32(1))
    rounded = _U32(_U32(_U32(magnitude + _U32(0x7FFFF)) + lsb) >> _U32(20))
    normal = min(_U32(rounded - _U32(_EXPONENT_REBIAS)), _U32(_E4M3_MAX_CODE))
    subnormal = _U32(_bits(_f32(magnitude) + _f32(_U32(_SUBNORMAL_GRID))) - _U32(_SUBNORMAL_GRID))
    code = _U32((subnormal if magnitude < _U32(_MIN_NORMAL) else normal) | sign)
    return np.uint8(_E4M3_NAN_CODE if magnitude > _U32(_F32_INF) else code)  # type: ignore[no-any-return]


@njit(cache=True, error_model="numpy", inline="always")
def _value(code: np.uint8, plan: Plan) -> np.float32:
    """The float32 value of ``code`` as ``plan``'s codes are read (E4M3FN, or E4M3FNUZ: half
    the FN value, 0x80 NaN, 0x7F/0xFF finite), from its bits."""
    magnitude = _U32(_U32(code) & _U32(0x7F))
    sign = _U32(_U32(_U32(code) & _U32(0x80)) << _U32(24))
    normal = _U32(_U32(magnitude << _U32(20)) + _U32(_EXPONENT_REBIAS << 20))
    subnormal = _bits(np.float32(np.int32(magnitude)) * _f32(_U32(0x3B000000)))  # m/2**9
    value = _f32(_U32((subnormal if magnitude < _U32(8) else normal) | sign)) * plan.code_factor
    nan = (code == plan.nan_codes[0]) | (code == plan.nan_codes[1])
    return _f32(_U32(0x7FC00000)) if nan else value  # type: ignore[no-any-return]


@njit(cache=True, error_model="numpy", inline="always")
def _code(scaled: np.float32, plan: Plan) -> np.uint8:
    """The code ``plan``'s producer writes for a scaled element (its quotient rounding, clamp
    and E4M3 cast; -0 as the code format keeps it)."""
    q = _round_bf16(scaled) if plan.quotient_bf16 else scaled
    q = plan.clamp if q > plan.clamp else q  # NaN passes, as torch.clamp
    q = -plan.clamp if q < -plan.clamp else q
    code = _e4m3(q)
    return plan.negative_zero if code == np.uint8(0x80) else code


@njit(cache=True, error_model="numpy")
def _band_maxima(src: np.ndarray, lo: int, hi: int, bn: int, maxima: np.ndarray) -> bool:
    """``maxima[t]``: the largest BF16 magnitude bits of tile column ``t`` over rows
    ``lo .. hi`` (magnitude bits order as the magnitudes do); False when one is NaN or Inf."""
    cols = src.shape[1]
    maxima[:] = 0
    for r in range(lo, hi):
        row = src[r]
        for t in range(maxima.shape[0]):
            tile = row[t * bn:min(t * bn + bn, cols)]
            largest = np.uint16(0)
            for c in range(tile.shape[0]):
                largest = max(largest, tile[c] & np.uint16(_BF16_MAGNITUDE))
            maxima[t] = max(maxima[t], largest)
    return maxima.max() < _BF16_INF  # type: ignore[no-any-return]


@njit(cache=True, error_model="numpy")
def _tile_scales(maxima: np.ndarray, plan: Plan, stored: np.ndarray,
                 operands: np.ndarray) -> None:
    """Per tile of a band, from its finite maximum (BF16 magnitude bits): ``stored``, the
    bits of the scale as the checkpoint stores it (float32 bits; a bfloat16 scale widened),
    and ``operands``, what each element is multiplied by or divided by
    (``mxformats.schemes.fp8_block._scales``, ``_scaled``, in their order)."""
    for t in range(maxima.shape[0]):
        amax = _f32(np.uint32(maxima[t]) << np.uint32(16))
        scale = np.float32(max(amax, plan.scale_floor)) / plan.fmt_max
        if plan.scale_bf16:
            scale = _round_bf16(scale)
        if plan.power_of_two:  # ceil_to_ue8m0: the exponent, plus one for any mantissa bit
            word = _bits(scale) & np.uint32(_MAGNITUDE)
            exponent = (word >> np.uint32(23)) + ((word & np.uint32(0x7FFFFF)) != 0)
            scale = _f32(np.uint32(min(max(exponent, 1), 254)) << np.uint32(23))
        if scale == 0:
            scale = plan.zero_scale
        if plan.multiplier == MAX_OVER_AMAX:  # torch's fmt_max / amax: reciprocal, multiply
            operands[t] = (np.float32(1.0) / np.float32(max(amax, plan.multiplier_floor))) \
                * plan.fmt_max
        elif plan.multiplier == RECIPROCAL_OF_SCALE:
            operands[t] = np.float32(1.0) / scale
        else:
            operands[t] = scale
        stored[t] = _bits(scale * plan.stored_factor)


@njit(cache=True, error_model="numpy")
def _row(row: np.ndarray, bn: int, plan: Plan, operands: np.ndarray, scales: np.ndarray,
         xs: np.ndarray, codes: np.ndarray, ds: np.ndarray) -> None:
    """One row of BF16 bits ``row`` quantized, tile by tile: ``xs`` its float32 values,
    ``codes`` its codes, ``ds`` their values times the tiles' stored ``scales`` (float32),
    as the consumer computes them. One loop per tile, branch-free in its elements."""
    cols = row.shape[0]
    for t in range(operands.shape[0]):
        operand, scale = operands[t], scales[t]
        lo, hi = t * bn, min(t * bn + bn, cols)
        # slices indexed from 0: no negative-index wraparound, so the loops vectorise
        src, x_out, c_out, d_out = row[lo:hi], xs[lo:hi], codes[lo:hi], ds[lo:hi]
        if plan.multiplier == DIVIDE_BY_SCALE:
            for c in range(hi - lo):
                x = _f32(np.uint32(src[c]) << np.uint32(16))
                code = _code(x / operand, plan)
                x_out[c], c_out[c], d_out[c] = x, code, _value(code, plan) * scale
        else:
            for c in range(hi - lo):
                x = _f32(np.uint32(src[c]) << np.uint32(16))
                code = _code(x * operand, plan)
                x_out[c], c_out[c], d_out[c] = x, code, _value(code, plan) * scale


@njit(cache=True, error_model="numpy")
def quantize_fp8_block_bf16(src: np.ndarray, bm: int, bn: int, plan: Plan, codes: np.ndarray,
                            stored: np.ndarray) -> bool:
    """BF16 bits ``src`` (uint16 ``[R, C]``) to E4M3 ``codes`` (uint8 ``[R, C]``) and the
    bits of the stored scales (uint32 ``[ceil(R/bm), ceil(C/bn)]``, float32 bits) in tiles
    of ``bm × bn``, as ``plan``'s producer writes them; False (outputs partial) when a tile
    holds NaN or Inf."""
    rows, cols = src.shape
    tiles = stored.shape[1]
    maxima = np.empty(tiles, dtype=np.uint16)
    operands = np.empty(tiles, dtype=np.float32)
    xs = np.empty(cols, dtype=np.float32)
    ds = np.empty(cols, dtype=np.float32)
    for band in range(stored.shape[0]):
        lo, hi = band * bm, min(band * bm + bm, rows)
        if not _band_maxima(src, lo, hi, bn, maxima):
            return False
        _tile_scales(maxima, plan, stored[band], operands)
        for r in range(lo, hi):
            _row(src[r], bn, plan, operands, stored[band].view(np.float32), xs, codes[r], ds)
    return True


@njit(cache=True, error_model="numpy")
def reproduce_fp8_block_bf16(src: np.ndarray, codes: np.ndarray, scales: np.ndarray, bm: int,
                             bn: int, plan: Plan, totals: np.ndarray) -> tuple[int, bool, bool]:
    """One pass over an FP8 block module: BF16 source bits ``src`` (uint16 ``[R, C]``) against
    the checkpoint's ``codes`` (uint8 ``[R, C]``) and the bits of its scales ``scales``
    (uint32 ``[ceil(R/bm), ceil(C/bn)]``, float32 bits; a bfloat16 scale widened). Fills
    ``totals`` (``len(TERMS)`` × LANES, zeros on entry) with the moments' lane totals of the
    dequantized checkpoint against the source; returns (:data:`OK` or :data:`OTHER`, source
    varies, weight varies). Each row's codes are compared before its values are summed: the
    values of ours are the values of theirs."""
    rows, cols = src.shape
    tiles = scales.shape[1]
    maxima = np.empty(tiles, dtype=np.uint16)
    operands = np.empty(tiles, dtype=np.float32)
    ours = np.empty(tiles, dtype=np.uint32)
    xs = np.empty(cols, dtype=np.float32)
    mine = np.empty(cols, dtype=np.uint8)
    ds = np.empty(cols, dtype=np.float32)
    local = np.zeros((_TERMS, LANES), dtype=np.float64)
    if rows == 0 or cols == 0:
        return OK, False, False
    kx = np.float64(_f32(np.uint32(src[0, 0]) << np.uint32(16)))
    kd = np.float64(np.float32(_value(codes[0, 0], plan) * _f32(scales[0, 0])))
    for band in range(scales.shape[0]):
        lo, hi = band * bm, min(band * bm + bm, rows)
        if not _band_maxima(src, lo, hi, bn, maxima):
            return OTHER, False, False
        _tile_scales(maxima, plan, ours, operands)
        for t in range(tiles):
            if ours[t] != scales[band, t]:
                return OTHER, False, False
        for r in range(lo, hi):
            _row(src[r], bn, plan, operands, ours.view(np.float32), xs, mine, ds)
            theirs = codes[r]
            mismatch = False
            for c in range(cols):  # from 0: vectorised
                mismatch |= mine[c] != theirs[c]
            if mismatch:
                return OTHER, False, False
            _accumulate(xs, ds, r * cols, kx, kd, local, totals)
    return finish(local, totals)  # type: ignore[no-any-return]
