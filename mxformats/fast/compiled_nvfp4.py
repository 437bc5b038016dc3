"""The compiled NVFP4 passes (numba; imported only through
:func:`mxformats.fast.jit.compiled` ``("compiled_nvfp4")``).

Every function is ``@njit(cache=True)`` without ``fastmath``: each float32 operation is the
one :func:`mxformats.schemes.nvfp4.nvfp4_scales` and :func:`~mxformats.schemes.nvfp4.
dequantize_nvfp4` write, in their order, so the bytes are the reference's (checked by
``tests/test_fast_compiled_nvfp4.py`` under the harness). Which operations a producer or a
consumer runs is not decided here: :mod:`mxformats.fast.reproduce_nvfp4` derives a *plan*
from their records (:class:`~mxformats.schemes.nvfp4.NVFP4Producer`,
:class:`~mxformats.schemes.nvfp4.NVFP4Consumer`), a tuple of scalars every block runs the
same arithmetic with:

- producer plan ``(divide, multiply, round_bf16, zero_before, zero_value, zero_after,
  zero_code, floor, ceiling, stored, divisor_divides)``: a block maximum ``b`` gets the scale
  ``q = f32(b) / divide``, rounded to bfloat16 when ``round_bf16``, times ``multiply`` (ModelOpt
  ``b / f32(6 * weight_scale_2)`` is ``divide = 6 * weight_scale_2``, ``multiply = 1``;
  compressed-tensors ``f32(bf16(b / 6)) * global`` is ``divide = 6``, ``multiply = global``;
  multiplying by 1 is exact); a zero ``q`` becomes ``zero_value`` (``zero_before``), the clamp
  to ``[floor, ceiling]``, the E4M3 code by round-to-nearest-even (from the float32 bits: the
  normal codes by an integer carry into the exponent, the subnormal ones by a float32 addition
  of ``2**14``, whose ulp is the E4M3 subnormal step ``2**-9``), a code 0 becomes
  ``zero_code`` (``zero_after``); the block's divisor is that scale times or over
  ``stored`` (``divisor_divides``), each element's code the E2M1 code of ``x / divisor``, one
  float32 division, looked up in the reference-built class table
  (:func:`mxformats.fast.nvfp4.nvfp4_code_table`, 4 KiB, in L1);
- consumer plan ``(divides, post)``: each element decodes to ``f32(f32(e2m1 * f) * post)``
  with ``f`` the block scale (``multiply``: ``post = global``; ``reciprocal``: ``post =
  f32(1 / global)``) or ``f32(s / global)`` (``divide``: ``post = 1``, exact). E2M1 × E4M3 is
  exact in float32, so the one rounding is the reference's.

- :func:`magnitude_max_bf16`: the largest BF16 magnitude's float32 bits (the global amax).
- :func:`quantize_nvfp4_bf16`: NVFP4 codes and E4M3 block scales from BF16 bits, given the
  stored global scale.
- :func:`reproduce_nvfp4_bf16`: the whole ``--source`` step for one NVFP4 module in one pass
  over rows: quantize the BF16 source with the checkpoint's global scale, compare with the
  checkpoint's codes and block scales, decode them as the consumer does, accumulate the
  moments' lane sums and the module's largest magnitude (from which the caller checks that
  the producer writes that global scale); no temporary larger than a row.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from mxformats.fast.compiled import OK, OTHER, _accumulate, _float32
from mxformats.fast.moments import LANES, TERMS

__all__ = ["OK", "OTHER", "magnitude_max_bf16", "quantize_nvfp4_bf16", "reproduce_nvfp4_bf16"]

_BLOCK = 16
_LOW_BITS = 20  # float32 bits below the E2M1 class index (mxformats.fast.chunks)
_LOW_MASK = (1 << _LOW_BITS) - 1
_MAGNITUDE = 0x7FFFFFFF
#: float32 bits of +Inf: a magnitude at or above it is Inf or NaN
_INFINITY = 0x7F800000
_TERMS = len(TERMS)
#: E4M3: float32 mantissa bits dropped (23 - 3), the exponent rebias ((127 - 7) << 3), the
#: smallest normal, and 2**14 (its float32 ulp is the subnormal step 2**-9) with its bits
_E4M3_DROP = 20
_E4M3_REBIAS = (127 - 7) << 3
_E4M3_MIN_NORMAL = 2.0**-6
_SUBNORMAL_ROUNDER = 2.0**14
_SUBNORMAL_ROUNDER_BITS = (127 + 14) << 23
#: bfloat16 keeps the top 16 float32 bits
_BF16_DROP = 16
_BF16_KEEP = 0xFFFF0000


@njit(cache=True, inline="always")
def _bits(value: np.float32) -> np.uint32:
    """The bits of float32 ``value``."""
    word: np.uint32 = np.float32(value).view(np.uint32)
    return word


@njit(cache=True, inline="always")
def _e4m3_code(value: np.float32) -> np.uint8:
    """The E4M3FN code of finite ``value`` in ``[0, 448]``, nearest-even (the reference's
    :func:`~mxformats.schemes.nvfp4.e4m3_scale_codes`)."""
    w = np.int64(_bits(value))
    normal = ((w + ((1 << (_E4M3_DROP - 1)) - 1) + ((w >> _E4M3_DROP) & 1)) >> _E4M3_DROP) \
        - _E4M3_REBIAS
    subnormal = (np.int64(_bits(value + np.float32(_SUBNORMAL_ROUNDER)))
                 - _SUBNORMAL_ROUNDER_BITS)
    code: np.uint8 = np.uint8(normal if value >= np.float32(_E4M3_MIN_NORMAL) else subnormal)
    return code


@njit(cache=True, inline="always")
def _block_scale(amax: np.uint32, plan: Any) -> np.uint8:
    """The E4M3 block scale code of a block whose largest magnitude has bits ``amax``
    (producer ``plan``, module docstring)."""
    (divide, multiply, round_bf16, zero_before, zero_value, zero_after, zero_code, floor,
     ceiling, _, _) = plan
    quotient = _float32(amax) / divide
    if round_bf16:  # torch's bfloat16 b / 6: the float32 quotient rounded to nearest-even
        w = _bits(quotient)
        quotient = _float32((w + np.uint32((1 << (_BF16_DROP - 1)) - 1)
                             + ((w >> np.uint32(_BF16_DROP)) & np.uint32(1)))
                            & np.uint32(_BF16_KEEP))
    scale = quotient * multiply
    if zero_before and scale == np.float32(0):
        scale = zero_value
    code: np.uint8 = _e4m3_code(min(max(scale, floor), ceiling))
    if zero_after and code == 0:
        code = zero_code
    return code


@njit(cache=True)
def _quantize_row(src: np.ndarray, plan: Any, table: np.ndarray, e4m3: np.ndarray,
                  bits: np.ndarray, scales: np.ndarray, divisors: np.ndarray,
                  codes: np.ndarray) -> np.uint32:
    """Quantize one row of BF16 bits ``src`` (length a multiple of 16) into ``codes`` (one
    E2M1 code a byte) and ``scales`` (one E4M3 byte a block); ``bits`` receives the row as
    float32 bits, ``divisors`` each block's float32 divisor. Returns the row's largest
    magnitude (float32 bits); one at or above ``_INFINITY`` (a NaN or Inf) leaves the outputs
    meaningless."""
    stored, divisor_divides = plan[9], plan[10]
    cols = src.shape[0]
    for c in range(cols):
        bits[c] = np.uint32(src[c]) << np.uint32(16)
    row_max = np.uint32(0)
    for blk in range(cols // _BLOCK):
        amax = np.uint32(0)
        for k in range(blk * _BLOCK, blk * _BLOCK + _BLOCK):
            amax = max(amax, bits[k] & np.uint32(_MAGNITUDE))
        row_max = max(row_max, amax)
        code = _block_scale(amax, plan)
        scales[blk] = code
        value = e4m3[code]
        divisors[blk] = value / stored if divisor_divides else value * stored
    if row_max >= np.uint32(_INFINITY):
        return row_max  # type: ignore[no-any-return]
    source = bits.view(np.float32)
    for blk in range(cols // _BLOCK):
        divisor = divisors[blk]
        for k in range(blk * _BLOCK, blk * _BLOCK + _BLOCK):
            q = _bits(source[k] / divisor)  # one float32 division, as the reference's
            codes[k] = table[(q | ((q & np.uint32(_LOW_MASK)) + np.uint32(_LOW_MASK)))
                             >> np.uint32(_LOW_BITS)]
    return row_max  # type: ignore[no-any-return]


@njit(cache=True)
def magnitude_max_bf16(src: np.ndarray) -> np.uint32:
    """The largest magnitude of BF16 bits ``src`` (uint16 ``[R, C]``) as float32 bits (at or
    above ``0x7F800000``: the rows hold a NaN or an Inf)."""
    rows, cols = src.shape
    largest = np.uint16(0)
    for r in range(rows):
        for c in range(cols):
            largest = max(largest, src[r, c] & np.uint16(0x7FFF))
    return np.uint32(largest) << np.uint32(16)  # type: ignore[no-any-return]


@njit(cache=True)
def quantize_nvfp4_bf16(src: np.ndarray, plan: Any, table: np.ndarray, e4m3: np.ndarray,
                        codes: np.ndarray, scales: np.ndarray) -> bool:
    """Rows of BF16 bits ``src`` (uint16 ``[R, C]``, C a multiple of 16) to E2M1 ``codes``
    (uint8 ``[R, C]``, one a byte) and E4M3 ``scales`` (``[R, C/16]``) under producer
    ``plan``; False (outputs partial) when a row holds NaN or Inf."""
    rows, cols = src.shape
    bits = np.empty(cols, dtype=np.uint32)
    divisors = np.empty(cols // _BLOCK, dtype=np.float32)
    for r in range(rows):
        if _quantize_row(src[r], plan, table, e4m3, bits, scales[r], divisors,
                         codes[r]) >= np.uint32(_INFINITY):
            return False
    return True


@njit(cache=True, inline="always")
def _decode(element: np.float32, factor: np.float32, post: np.float32) -> np.float32:
    """One element as the consumer decodes it: ``f32(f32(element * factor) * post)``."""
    value: np.float32 = np.float32(element * factor) * post
    return value


@njit(cache=True)
def reproduce_nvfp4_bf16(src: np.ndarray, packed: np.ndarray, scales: np.ndarray, plan: Any,
                         consumer: Any, table: np.ndarray, e4m3: np.ndarray,
                         values: np.ndarray, totals: np.ndarray
                         ) -> tuple[int, bool, bool, np.uint32]:
    """One pass over an NVFP4 module: BF16 source bits ``src`` (uint16 ``[R, C]``, C a
    multiple of 16) quantized under producer ``plan`` (with the checkpoint's global scale)
    against the checkpoint's ``packed`` codes (uint8 ``[R, C/2]``, element 2j low) and E4M3
    ``scales`` (uint8 ``[R, C/16]``), decoded under ``consumer`` plan ``(divides, post)``.
    ``e4m3``: the 256 E4M3FN values as float32; ``values``: the 16 E2M1 values. Fills
    ``totals`` (``len(TERMS)`` × LANES, zeros on entry) with the moments' lane totals of the
    decoded checkpoint against the source; returns (:data:`OK` or :data:`OTHER`, source
    varies, weight varies, the module's largest magnitude as float32 bits)."""
    divides, post = consumer
    stored = plan[9]
    rows, cols = src.shape
    nblocks = cols // _BLOCK
    bits = np.empty(cols, dtype=np.uint32)
    ours = np.empty(cols, dtype=np.uint8)
    our_scales = np.empty(nblocks, dtype=np.uint8)
    divisors = np.empty(nblocks, dtype=np.float32)
    factors = np.empty(nblocks, dtype=np.float32)
    source = bits.view(np.float32)
    ds = np.empty(cols, dtype=np.float32)
    local = np.zeros((_TERMS, LANES), dtype=np.float64)
    if rows == 0 or cols == 0:
        return OK, False, False, np.uint32(0)
    first = e4m3[scales[0, 0]]
    kx = np.float64(_float32(np.uint32(src[0, 0]) << np.uint32(16)))
    kd = np.float64(_decode(values[packed[0, 0] & 0xF],
                            first / stored if divides else first, post))
    module_max = np.uint32(0)
    for r in range(rows):
        row_max = _quantize_row(src[r], plan, table, e4m3, bits, our_scales, divisors, ours)
        if row_max >= np.uint32(_INFINITY):
            return OTHER, False, False, row_max
        module_max = max(module_max, row_max)
        mismatch = 0
        for blk in range(nblocks):
            theirs = scales[r, blk]
            mismatch |= our_scales[blk] != theirs
            s = e4m3[theirs]
            factors[blk] = s / stored if divides else s
        row = packed[r]
        for j in range(cols // 2):
            byte = row[j]
            mismatch |= byte != (ours[2 * j] | (ours[2 * j + 1] << np.uint8(4)))
            factor = factors[j // (_BLOCK // 2)]
            ds[2 * j] = _decode(values[byte & 0xF], factor, post)
            ds[2 * j + 1] = _decode(values[byte >> 4], factor, post)
        if mismatch:
            return OTHER, False, False, module_max
        _accumulate(source, ds, r * cols, kx, kd, local, totals)
    for t in range(_TERMS):
        for lane in range(LANES):
            totals[t, lane] += local[t, lane]
    # As the MX pass reads them (mxformats.fast.compiled.reproduce_mxfp4_bf16): a decoded
    # NaN or Inf makes the sum of (d-x)**2 non-finite, and the sums of the centred squares
    # are positive exactly when some value differs from the first.
    if not np.isfinite(totals[1]).all():
        return OTHER, False, False, module_max
    return OK, totals[4].sum() > 0, totals[5].sum() > 0, module_max
