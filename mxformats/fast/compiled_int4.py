"""The compiled INT4 and W4A8 passes (numba; imported only through
:func:`mxformats.fast.jit.compiled`).

Every function is ``@njit(cache=True)`` without ``fastmath``: each float32 operation is the one
the reference writes, in its order (a division where the producer divides, a multiply by the
rounded reciprocal where it multiplies), so the bytes are the references'
(:mod:`mxformats.schemes.int4`, :mod:`mxformats.schemes.w4a8`), checked by
``tests/test_fast_compiled_int4.py`` under the same harness as the numpy fast paths. What a
producer does is not named here: :mod:`mxformats.fast.reproduce_int4` reads it from the
producer and consumer records and passes it in as an :data:`INT4_PLAN` and numbers.

Written for LLVM's vectoriser: per row, each stage is one loop over contiguous float32 or
uint32 scratch (a row at most, in L1/L2) with no per-element branch: the clamp is min/max,
round-half-even to an integer is ``(v + 1.5 * 2**23) - 1.5 * 2**23`` on a value already
clamped to [-8, 7] (the float32 sum rounds to an integer, half to even, exactly as
``torch.round``), a rounding to bfloat16 is integer arithmetic on the bits, an FP8 rounding is
a select between the normal (bits) and subnormal (``+ C - C``) roundings. Sums go through
``mxformats.fast.compiled._accumulate`` (the lanes :mod:`mxformats.fast.moments` defines).

- :func:`quantize_int4_rows`: symmetric INT4 groups from BF16 or float32 bits (any INT4
  producer plan), the integers and the float32 scales.
- :func:`reproduce_int4`: the whole ``--source`` step of one packed INT4 module
  (compressed-tensors ``pack-quantized``) in one pass over rows.
- :func:`quantize_w4a8_rows` / :func:`reproduce_w4a8`: the same for Quark W4A8 (FP8 per
  tensor, then INT4 per row on the FP8 values), with the checkpoint's per-tensor scale used
  while the pass runs and the tensor's largest magnitude returned so that the caller checks
  that scale against the one the producer computes from it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from mxformats.fast.compiled import OK, OTHER, _accumulate, finish
from mxformats.fast.moments import LANES, TERMS

__all__ = ["INT4_PLAN", "OK", "OTHER", "quantize_int4_rows", "quantize_w4a8_rows",
           "reproduce_int4", "reproduce_w4a8"]

#: The fields of the float32 INT4 plan ``fplan`` (:mod:`mxformats.fast.reproduce_int4` fills
#: it from the producer record), in order: the divisor of the scale (``(QMAX - QMIN) / 2``),
#: the scale floor (eps, a value of the input dtype), QMIN, QMAX.
INT4_PLAN = ("half_range", "eps", "qmin", "qmax")
#: The integer INT4 plan ``iplan``, in order: the input is bfloat16 (the scale is rounded to
#: it), the quotient is rounded to bfloat16, reciprocal (multiply by ``1 / s``), the floor is
#: ``max(s, eps)`` (else only a zero scale becomes eps), the nibble offset, then the 8 nibble
#: shifts (element ``i`` of a word at bits ``shift[i] .. + 3``).
_NARROW, _QUOTIENT_NARROW, _RECIPROCAL, _FLOOR_MAXIMUM, _OFFSET, _SHIFTS = range(6)

_MAGNITUDE = 0x7FFFFFFF
_NONFINITE = 0x7F800000
#: 1.5 * 2**23: a float32 sum with it rounds |v| <= 2**22 to an integer, half to even
_ROUNDER = 12582912.0
_TERMS = len(TERMS)


@njit(cache=True, inline="always")
def _bits(v: np.float32) -> np.uint32:
    """The bits of float32 ``v``."""
    word: np.uint32 = np.float32(v).view(np.uint32)
    return word


@njit(cache=True, inline="always")
def _value(word: np.uint32) -> np.float32:
    """The float32 whose bits are ``word``."""
    value: np.float32 = np.uint32(word).view(np.float32)
    return value


@njit(cache=True, inline="always")
def _bf16_bits(word: np.uint32) -> np.uint32:
    """Finite float32 bits rounded to bfloat16, nearest-even (as ``float32 -> bfloat16``)."""
    rounded: np.uint32 = (word + np.uint32(0x7FFF) + ((word >> np.uint32(16)) & np.uint32(1))) \
        & np.uint32(0xFFFF0000)
    return rounded


@njit(cache=True)
def _round_to_bf16(words: np.ndarray) -> None:
    """In place: each float32 (bits ``words``, finite) rounded to bfloat16."""
    for k in range(words.shape[0]):
        words[k] = _bf16_bits(words[k])


@njit(cache=True, inline="always")
def _magnitude(word: np.uint32) -> np.int32:
    """The magnitude bits of float32 bits ``word`` as an int32 (a maximum over int32 is one
    vector instruction where LLVM keeps a maximum over uint32 scalar)."""
    return np.int32(word & np.uint32(_MAGNITUDE))  # type: ignore[no-any-return]


@njit(cache=True)
def _widen(src: np.ndarray, shift: int, bits: np.ndarray) -> np.int32:
    """``bits`` = the row ``src`` (bfloat16 bits, ``shift`` 16, or float32 bits, 0) as float32
    bits; returns the largest magnitude's bits."""
    amax = np.int32(0)
    for c in range(src.shape[0]):
        word = np.uint32(src[c]) << np.uint32(shift)
        bits[c] = word
        amax = max(amax, _magnitude(word))
    return amax  # type: ignore[no-any-return]


@njit(cache=True)
def _int4_row(bits: np.ndarray, group: int, iplan: np.ndarray, fplan: np.ndarray,
              scales: np.ndarray, q: np.ndarray, maxima: np.ndarray,
              operands: np.ndarray) -> bool:
    """Quantize one row (float32 ``bits``, length a multiple of ``group``) with the plan:
    ``scales`` (float32, one a group) receives the stored scales, ``q`` (float32, the row's
    length) the integers; ``maxima`` (int32) and ``operands`` (float32), one a group, are
    scratch. False (outputs partial) when a group holds NaN or Inf.

    Per group (``mxformats.schemes.int4.group_scales``): ``s = amax / half_range`` in
    float32, rounded to bfloat16 for bfloat16 input (the producer computes in the input
    dtype), floored at eps; the operand is ``s``, or ``1 / s`` in float32 (rounded to the
    quotient dtype) for a reciprocal producer. Per element: ``x / operand`` (or ``x *
    operand``) in float32, rounded to the quotient dtype, clamped to [QMIN, QMAX], rounded half
    to even (:func:`mxformats.schemes.int4.round_to_int4`). Each step is one loop over the
    groups or the row (the groups' scales too, so that their divisions are vector ones)."""
    half_range = np.float32(fplan[0])
    eps = np.float32(fplan[1])
    qmin = np.float32(fplan[2])
    qmax = np.float32(fplan[3])
    ngroups = bits.shape[0] // group
    largest = np.int32(0)
    for g in range(ngroups):  # a group's loop runs over a slice from 0: the form LLVM vectorises
        words = bits[g * group:(g + 1) * group]
        amax = np.int32(0)
        for k in range(group):
            amax = max(amax, _magnitude(words[k]))
        maxima[g] = amax
        largest = max(largest, amax)
    if largest >= _NONFINITE:
        return False
    amaxes = maxima.view(np.float32)
    for g in range(ngroups):
        scales[g] = amaxes[g] / half_range
    if iplan[_NARROW]:
        _round_to_bf16(scales.view(np.uint32))
    if iplan[_FLOOR_MAXIMUM]:
        for g in range(ngroups):
            scales[g] = max(scales[g], eps)
    else:
        for g in range(ngroups):
            scales[g] = eps if scales[g] == np.float32(0.0) else scales[g]
    if iplan[_RECIPROCAL]:
        for g in range(ngroups):
            operands[g] = np.float32(1.0) / scales[g]
        if iplan[_QUOTIENT_NARROW]:
            _round_to_bf16(operands.view(np.uint32))
    source = bits.view(np.float32)
    for g in range(ngroups):
        x = source[g * group:(g + 1) * group]
        quotients = q[g * group:(g + 1) * group]
        if iplan[_RECIPROCAL]:
            operand = operands[g]
            for k in range(group):
                quotients[k] = x[k] * operand
        else:
            s = scales[g]
            for k in range(group):
                quotients[k] = x[k] / s
    if iplan[_QUOTIENT_NARROW]:
        _round_to_bf16(q.view(np.uint32))
    rounder = np.float32(_ROUNDER)
    for k in range(q.shape[0]):  # clamp, then round: the same integer as round, then clamp
        q[k] = (min(max(q[k], qmin), qmax) + rounder) - rounder
    return True


@njit(cache=True)
def _pack_row(q: np.ndarray, iplan: np.ndarray, words: np.ndarray) -> None:
    """``words[c]``: the integers ``q[8c .. 8c + 7]`` as the layout packs them (element ``i``
    as ``(q + offset) & 0xF`` at bits ``shift[i]``)."""
    offset = np.int32(iplan[_OFFSET])
    for c in range(words.shape[0]):
        word = np.uint32(0)
        for i in range(8):
            nibble = (np.int32(q[8 * c + i]) + offset) & np.int32(0xF)
            word |= np.uint32(nibble) << np.uint32(iplan[_SHIFTS + i])
        words[c] = word


@njit(cache=True)
def quantize_int4_rows(src: np.ndarray, shift: int, group: int, iplan: np.ndarray,
                       fplan: np.ndarray, q: np.ndarray, scales: np.ndarray) -> bool:
    """Rows of bfloat16 (``shift`` 16, uint16) or float32 (``shift`` 0, uint32) bits ``src``
    ``[R, C]`` to INT4 integers ``q`` (int8 ``[R, C]``) and float32 scales ``scales`` ``[R,
    C / group]`` with the plan; False (outputs partial) when a group holds NaN or Inf."""
    rows, cols = src.shape
    bits = np.empty(cols, dtype=np.uint32)
    values = np.empty(cols, dtype=np.float32)
    maxima = np.empty(cols // group, dtype=np.int32)
    operands = np.empty(cols // group, dtype=np.float32)
    for r in range(rows):
        _widen(src[r], shift, bits)
        if not _int4_row(bits, group, iplan, fplan, scales[r], values, maxima, operands):
            return False
        for c in range(cols):
            q[r, c] = np.int8(values[c])
    return True


@njit(cache=True)
def reproduce_int4(src: np.ndarray, shift: int, words: np.ndarray, scales: np.ndarray,
                   scale_shift: int, group: int, iplan: np.ndarray, fplan: np.ndarray,
                   round_product: bool, totals: np.ndarray) -> tuple[int, bool, bool]:
    """One pass over a packed INT4 module: source bits ``src`` (``[R, C]``, bfloat16 ``shift``
    16 or float32 0, C a multiple of 8 and of ``group``) against the checkpoint's ``words``
    (uint32 ``[R, C / 8]``) and ``scales`` (``[R, C / group]``: bfloat16 bits, ``scale_shift``
    16, or float32 bits, 0). Quantizes each row with the plan, compares every word and scale,
    decodes (the consumer: ``q * scale`` in float32, rounded to bfloat16 when
    ``round_product``) and fills ``totals`` (``len(TERMS)`` × LANES, zeros on entry) with the
    moments' lane totals; returns (:data:`OK` or :data:`OTHER`, source varies, weight
    varies). The decoded values are the checkpoint's: its words and scales are ours, or the
    pass answers OTHER."""
    rows, cols = src.shape
    ngroups = scales.shape[1]
    bits = np.empty(cols, dtype=np.uint32)
    q = np.empty(cols, dtype=np.float32)
    ds = np.empty(cols, dtype=np.float32)
    ours = np.empty(cols // 8, dtype=np.uint32)
    row_scales = np.empty(ngroups, dtype=np.float32)
    maxima = np.empty(ngroups, dtype=np.int32)
    operands = np.empty(ngroups, dtype=np.float32)
    local = np.zeros((_TERMS, LANES), dtype=np.float64)
    x = bits.view(np.float32)
    kx = kd = 0.0
    for r in range(rows):
        _widen(src[r], shift, bits)
        if not _int4_row(bits, group, iplan, fplan, row_scales, q, maxima, operands):
            return OTHER, False, False
        _pack_row(q, iplan, ours)
        mismatch = False
        for c in range(cols // 8):
            mismatch |= ours[c] != words[r, c]
        for g in range(ngroups):
            mismatch |= _bits(row_scales[g]) != np.uint32(scales[r, g]) << np.uint32(scale_shift)
        if mismatch:
            return OTHER, False, False
        for g in range(ngroups):
            factor = row_scales[g]
            values, decoded = q[g * group:(g + 1) * group], ds[g * group:(g + 1) * group]
            for k in range(group):
                decoded[k] = values[k] * factor
        if round_product:
            _round_to_bf16(ds.view(np.uint32))
        if r == 0:
            kx, kd = np.float64(x[0]), np.float64(ds[0])
        _accumulate(x, ds, r * cols, kx, kd, local, totals)
    return finish(local, totals)


@njit(cache=True)
def _fp8_row(bits: np.ndarray, s1: np.float32, narrow: bool, limit: np.float32,
             normal: np.float32, subnormal_rounder: np.float32, drop: int,
             w1: np.ndarray) -> None:
    """The FP8 stage of one row (:func:`mxformats.schemes.fp8.quantize_fp8`, a dividing
    producer): ``x / s1`` in float32, rounded to bfloat16 when ``narrow`` (the input dtype),
    clamped to ``±limit`` and rounded to the FP8 format, nearest-even, as its float32 value
    ``w1`` bits: magnitudes from ``normal`` (the smallest normal) up keep the top ``23 - drop``
    mantissa bits, smaller ones the multiples of the smallest subnormal (``+ C - C``,
    ``C = subnormal * 2**23``)."""
    x = bits.view(np.float32)
    value = w1.view(np.float32)
    for c in range(bits.shape[0]):
        value[c] = x[c] / s1
    if narrow:
        _round_to_bf16(w1)
    half = np.uint32((1 << (drop - 1)) - 1)
    keep = ~np.uint32((1 << drop) - 1)
    for c in range(bits.shape[0]):
        word = w1[c]
        sign = word & np.uint32(0x80000000)
        magnitude = min(_value(word & np.uint32(_MAGNITUDE)), limit)
        m = _bits(magnitude)
        rounded_normal = (m + half + ((m >> np.uint32(drop)) & np.uint32(1))) & keep
        rounded_small = _bits((magnitude + subnormal_rounder) - subnormal_rounder)
        w1[c] = sign | (rounded_normal if magnitude >= normal else rounded_small)


@njit(cache=True)
def _w4a8_row(src: np.ndarray, s1: np.float32, narrow: bool, fp8: np.ndarray, iplan: np.ndarray,
              fplan: np.ndarray, bits: np.ndarray, w1: np.ndarray, scale: np.ndarray,
              q: np.ndarray, maximum: np.ndarray, operand: np.ndarray) -> np.int32:
    """One row of Quark W4A8 with per-tensor scale ``s1``: ``bits`` the source row as float32
    bits, ``w1`` its FP8 stage (float32 bits), ``scale[0]`` and ``q`` the INT4 per-row stage
    on it (``maximum`` and ``operand``: its scratch, one element each); returns the source
    row's largest magnitude bits (NaN/Inf: at least 0x7F800000, and then the outputs are not
    computed)."""
    amax = _widen(src, 16 if narrow else 0, bits)
    if amax >= _NONFINITE:
        return amax
    _fp8_row(bits, s1, narrow, np.float32(fp8[0]), np.float32(fp8[1]), np.float32(fp8[2]),
             np.int64(fp8[3]), w1)
    _int4_row(w1, w1.shape[0], iplan, fplan, scale, q, maximum,
              operand)  # FP8 values are finite
    return amax


@njit(cache=True)
def quantize_w4a8_rows(src: np.ndarray, narrow: bool, s1: np.float32, fp8: np.ndarray,
                       iplan: np.ndarray, fplan: np.ndarray, words: np.ndarray,
                       s2: np.ndarray) -> bool:
    """Quark W4A8 of rows of bfloat16 (``narrow``, uint16) or float32 (uint32) bits ``src``
    ``[R, C]`` (C a multiple of 8) with per-tensor scale ``s1``: the packed ``words``
    (uint32 ``[R, C / 8]``) and float32 row scales ``s2`` ``[R]``. ``fp8``: the FP8 stage's
    limit, smallest normal, subnormal rounder and dropped mantissa bits. False on NaN/Inf."""
    rows, cols = src.shape
    bits = np.empty(cols, dtype=np.uint32)
    w1 = np.empty(cols, dtype=np.uint32)
    q = np.empty(cols, dtype=np.float32)
    maximum = np.empty(1, dtype=np.int32)
    operand = np.empty(1, dtype=np.float32)
    for r in range(rows):
        if _w4a8_row(src[r], s1, narrow, fp8, iplan, fplan, bits, w1, s2[r:r + 1], q, maximum,
                     operand) >= _NONFINITE:
            return False
        _pack_row(q, iplan, words[r])
    return True


@njit(cache=True)
def reproduce_w4a8(src: np.ndarray, narrow: bool, s1: np.float32, words: np.ndarray,
                   s2: np.ndarray, fp8: np.ndarray, iplan: np.ndarray, fplan: np.ndarray,
                   totals: np.ndarray) -> tuple[int, bool, bool, np.int32]:
    """One pass over a W4A8 module: source bits ``src`` ``[R, C]`` (as
    :func:`quantize_w4a8_rows`) against the checkpoint's ``words`` (uint32 ``[R, C / 8]``),
    per-tensor scale ``s1`` (used for the FP8 stage while the pass runs) and row scales
    ``s2`` (float32 bits ``[R]``). Decodes as vLLM folds the scales, ``q * float32(s2 *
    s1)``, and fills ``totals`` as :func:`reproduce_int4`; returns (:data:`OK` or
    :data:`OTHER`, source varies, weight varies, the source's largest magnitude bits): the
    caller checks ``s1`` against the scale the producer computes from that magnitude."""
    rows, cols = src.shape
    bits = np.empty(cols, dtype=np.uint32)
    w1 = np.empty(cols, dtype=np.uint32)
    q = np.empty(cols, dtype=np.float32)
    ds = np.empty(cols, dtype=np.float32)
    ours = np.empty(cols // 8, dtype=np.uint32)
    scale = np.empty(1, dtype=np.float32)
    maximum = np.empty(1, dtype=np.int32)
    operand = np.empty(1, dtype=np.float32)
    local = np.zeros((_TERMS, LANES), dtype=np.float64)
    x = bits.view(np.float32)
    amax = np.int32(0)
    kx = kd = 0.0
    for r in range(rows):
        row_max = _w4a8_row(src[r], s1, narrow, fp8, iplan, fplan, bits, w1, scale, q, maximum,
                            operand)
        if row_max >= _NONFINITE:
            return OTHER, False, False, row_max
        amax = max(amax, row_max)
        _pack_row(q, iplan, ours)
        mismatch = _bits(scale[0]) != s2[r]
        for c in range(cols // 8):
            mismatch |= ours[c] != words[r, c]
        if mismatch:
            return OTHER, False, False, amax
        factor = scale[0] * s1
        for c in range(cols):
            ds[c] = q[c] * factor
        if r == 0:
            kx, kd = np.float64(x[0]), np.float64(ds[0])
        _accumulate(x, ds, r * cols, kx, kd, local, totals)
    status, source_varies, weight_varies = finish(local, totals)
    return status, source_varies, weight_varies, amax
