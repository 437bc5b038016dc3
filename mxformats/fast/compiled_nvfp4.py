"""The compiled NVFP4 passes (numba; imported only through
:func:`mxformats.fast.jit.compiled` ``("compiled_nvfp4")``).

Every function is ``@njit(cache=True, error_model="numpy")`` without ``fastmath``: IEEE
division as numpy's (no Python ZeroDivisionError check, whose branch also stops LLVM from
vectorising), and each float32 operation the one :func:`mxformats.schemes.nvfp4.nvfp4_scales`
and :func:`~mxformats.schemes.nvfp4.dequantize_nvfp4` write, in their order, so the bytes are
the reference's (checked by ``tests/test_fast_compiled_nvfp4.py`` under the harness). Which
operations a producer or a consumer runs is not decided here:
:mod:`mxformats.fast.reproduce_nvfp4` derives a *plan* from their records
(:class:`~mxformats.schemes.nvfp4.NVFP4Producer`, :class:`~mxformats.schemes.nvfp4.NVFP4Consumer`),
a tuple of scalars every block runs the same arithmetic with:

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
  float32 division, nearest-even in 32-bit integer arithmetic (``_e2m1_code``, no
  table, no branch: the loop vectorises);
- consumer plan ``(divides, post)``: each element decodes to ``f32(f32(e2m1 * f) * post)``
  with ``f`` the block scale (``multiply``: ``post = global``; ``reciprocal``: ``post =
  f32(1 / global)``) or ``f32(s / global)`` (``divide``: ``post = 1``, exact). E2M1 × E4M3 is
  exact in float32, so the one rounding is the reference's. E2M1 and E4M3 values come from
  their codes' bits (``_e2m1_value``, ``_e4m3_value``), not from tables.

- :func:`magnitude_max_bf16`: the largest BF16 magnitude's float32 bits (the global amax).
- :func:`quantize_nvfp4_bf16`: NVFP4 codes and E4M3 block scales from BF16 bits, given the
  stored global scale.
- :func:`reproduce_nvfp4_bf16`: the whole ``--source`` step for one NVFP4 module in one pass
  over rows: quantize the BF16 source with the checkpoint's global scale, compare with the
  checkpoint's codes and block scales, decode them as the consumer does (from our own codes,
  contiguous, which are the checkpoint's wherever the sums are used), accumulate the
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
_MAGNITUDE = 0x7FFFFFFF
#: float32 bits of +Inf: a magnitude at or above it is Inf or NaN
_INFINITY = 0x7F800000
_TERMS = len(TERMS)
#: E4M3: float32 mantissa bits dropped (23 - 3), the exponent rebias ((127 - 7) << 3), the
#: smallest normal, and 2**14 (its float32 ulp is the subnormal step 2**-9) with its bits
_E4M3_DROP = 20
_E4M3_REBIAS = (127 - 7) << 3
_E4M3_MIN_NORMAL_BITS = (127 - 6) << 23
_SUBNORMAL_ROUNDER = 2.0**14
_SUBNORMAL_ROUNDER_BITS = (127 + 14) << 23
_E4M3_STEP = 2.0**-9
#: E2M1 from a float32 magnitude: mantissa bits dropped (23 - 1), the exponent rebias
#: ((127 - 1) << 1), the bits of 1.0 (the smallest normal), and 2**22 (its float32 ulp is the
#: subnormal step 0.5) with its bits; 7 the largest magnitude code (6.0, also NaN's), 8 the
#: sign
_E2M1_DROP = 22
_E2M1_REBIAS = (127 - 1) << 1
_ONE_BITS = 127 << 23
_HALF_ROUNDER = 2.0**22
_HALF_ROUNDER_BITS = (127 + 22) << 23
_E2M1_LARGEST = 7
_E2M1_SIGN = 8  # the sign bit, 1 << 3
#: the bits of 0.5, E2M1's one subnormal value
_HALF_BITS = 126 << 23
#: bfloat16 keeps the top 16 float32 bits
_BF16_DROP = 16
_BF16_KEEP = 0xFFFF0000


@njit(cache=True, inline="always", error_model="numpy")
def _bits(value: np.float32) -> np.uint32:
    """The bits of float32 ``value``."""
    word: np.uint32 = np.float32(value).view(np.uint32)
    return word


@njit(cache=True, inline="always", error_model="numpy")
def _round_to(a: np.uint32, drop: int, rebias: int, min_normal: int, rounder: float,
              rounder_bits: int) -> np.uint32:
    """The code of a float format with ``23 - drop`` mantissa bits for the float32 magnitude
    with bits ``a``, nearest-even, in 32-bit integer arithmetic (no table, no branch): a
    normal one (``a >= min_normal``) by an integer carry into the exponent less ``rebias``, a
    subnormal one by the float32 addition of ``rounder``, whose ulp is the format's subnormal
    step (``rounder_bits``: its bits). No saturation: callers clamp."""
    one = np.uint32(1)
    normal = ((a + ((one << np.uint32(drop - 1)) - one) + ((a >> np.uint32(drop)) & one))
              >> np.uint32(drop)) - np.uint32(rebias)
    subnormal = _bits(_float32(a) + np.float32(rounder)) - np.uint32(rounder_bits)
    code: np.uint32 = normal if a >= np.uint32(min_normal) else subnormal
    return code


@njit(cache=True, inline="always", error_model="numpy")
def _e4m3_code(value: np.float32) -> np.uint8:
    """The E4M3FN code of finite ``value`` in ``[+0, 448]`` (never -0.0: a block maximum over
    a positive divisor), nearest-even (the reference's
    :func:`~mxformats.schemes.nvfp4.e4m3_scale_codes`)."""
    code: np.uint8 = np.uint8(_round_to(_bits(value), _E4M3_DROP, _E4M3_REBIAS,
                                        _E4M3_MIN_NORMAL_BITS, _SUBNORMAL_ROUNDER,
                                        _SUBNORMAL_ROUNDER_BITS))
    return code


@njit(cache=True, inline="always", error_model="numpy")
def _e2m1_code(q: np.float32) -> np.uint8:
    """The E2M1 code of float32 quotient ``q`` as :func:`~mxformats.schemes.nvfp4.e2m1_codes`
    gives it, in arithmetic (:func:`_round_to`): the magnitude nearest-even, saturating at 7
    (6.0; ±Inf and NaN too), the sign bit iff ``q < 0`` (not for -0.0 or NaN)."""
    w = _bits(q)
    a = w & np.uint32(_MAGNITUDE)
    magnitude = min(_round_to(a, _E2M1_DROP, _E2M1_REBIAS, _ONE_BITS, _HALF_ROUNDER,
                              _HALF_ROUNDER_BITS), np.uint32(_E2M1_LARGEST))
    negative = (w >> np.uint32(31)) & np.uint32(a != np.uint32(0)) \
        & np.uint32(a <= np.uint32(_INFINITY))
    code: np.uint8 = np.uint8(magnitude | (negative << np.uint32(3)))
    return code


@njit(cache=True, inline="always", error_model="numpy")
def _e2m1_value(code: np.uint8) -> np.float32:
    """The float32 value of E2M1 ``code`` (:data:`mxformats.formats.E2M1`'s), from its bits:
    0 and 0.5 below code 2, ``2**(e-1) * (1 + m/2)`` from code 2, the sign bit from code 8."""
    c = np.uint32(code)
    m = c & np.uint32(_E2M1_LARGEST)
    normal = (((m >> np.uint32(1)) + np.uint32(126)) << np.uint32(23)) \
        | ((m & np.uint32(1)) << np.uint32(22))
    magnitude = normal if m >= np.uint32(2) else m * np.uint32(_HALF_BITS)
    value: np.float32 = _float32(magnitude | ((c & np.uint32(_E2M1_SIGN)) << np.uint32(28)))
    return value


@njit(cache=True, inline="always", error_model="numpy")
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


@njit(cache=True, inline="always", error_model="numpy")
def _e4m3_value(code: np.uint8) -> np.float32:
    """The float32 value of E4M3FN ``code`` 0x00..0x7E from its bits: ``m * 2**-9`` below
    code 8 (exact), ``2**(e-7) * (1 + m/8)`` from code 8 (other bytes: a value of no use, each
    caller compares them first)."""
    c = np.uint32(code) & np.uint32(0x7F)
    m = c & np.uint32(7)
    normal = _float32((((c >> np.uint32(3)) + np.uint32(120)) << np.uint32(23))
                      | (m << np.uint32(20)))
    subnormal = np.float32(m) * np.float32(_E4M3_STEP)
    value: np.float32 = normal if c >= np.uint32(8) else subnormal
    return value


@njit(cache=True, error_model="numpy")
def _quantize_row(src: np.ndarray, plan: Any, bits: np.ndarray, amaxes: np.ndarray,
                  scales: np.ndarray, divisors: np.ndarray, codes: np.ndarray) -> np.uint32:
    """Quantize one row of BF16 bits ``src`` (length a multiple of 16) into ``codes`` (one
    E2M1 code a byte) and ``scales`` (one E4M3 byte a block); ``bits`` receives the row as
    float32 bits, ``amaxes`` each block's largest magnitude (bits), ``divisors`` each block's
    float32 divisor. Returns the row's largest magnitude (float32 bits); one at or above
    ``_INFINITY`` (a NaN or Inf) leaves the outputs meaningless. Each step is one loop over
    the row or its blocks without branches, which LLVM vectorises."""
    stored, divisor_divides = plan[9], plan[10]
    cols = src.shape[0]
    nblocks = cols // _BLOCK
    for c in range(cols):
        bits[c] = np.uint32(src[c]) << np.uint32(16)
    for blk in range(nblocks):
        amax = np.uint32(0)
        for k in range(blk * _BLOCK, blk * _BLOCK + _BLOCK):
            amax = max(amax, bits[k] & np.uint32(_MAGNITUDE))
        amaxes[blk] = amax
    row_max = np.uint32(0)
    for blk in range(nblocks):
        row_max = max(row_max, amaxes[blk])
    if row_max >= np.uint32(_INFINITY):
        return row_max  # type: ignore[no-any-return]
    for blk in range(nblocks):
        code = _block_scale(amaxes[blk], plan)
        scales[blk] = code
        value = _e4m3_value(code)
        divisors[blk] = value / stored if divisor_divides else value * stored
    source = bits.view(np.float32)
    for blk in range(nblocks):
        divisor = divisors[blk]
        for k in range(blk * _BLOCK, blk * _BLOCK + _BLOCK):
            # one float32 division, as the reference's
            codes[k] = _e2m1_code(source[k] / divisor)
    return row_max  # type: ignore[no-any-return]


@njit(cache=True, error_model="numpy")
def magnitude_max_bf16(src: np.ndarray) -> np.uint32:
    """The largest magnitude of BF16 bits ``src`` (uint16 ``[R, C]``) as float32 bits (at or
    above ``0x7F800000``: the rows hold a NaN or an Inf)."""
    rows, cols = src.shape
    largest = np.uint16(0)
    for r in range(rows):
        for c in range(cols):
            largest = max(largest, src[r, c] & np.uint16(0x7FFF))
    return np.uint32(largest) << np.uint32(16)  # type: ignore[no-any-return]


@njit(cache=True, error_model="numpy")
def quantize_nvfp4_bf16(src: np.ndarray, plan: Any, codes: np.ndarray,
                        scales: np.ndarray) -> bool:
    """Rows of BF16 bits ``src`` (uint16 ``[R, C]``, C a multiple of 16) to E2M1 ``codes``
    (uint8 ``[R, C]``, one a byte) and E4M3 ``scales`` (``[R, C/16]``) under producer
    ``plan``; False (outputs partial) when a row holds NaN or Inf."""
    rows, cols = src.shape
    bits = np.empty(cols, dtype=np.uint32)
    amaxes = np.empty(cols // _BLOCK, dtype=np.uint32)
    divisors = np.empty(cols // _BLOCK, dtype=np.float32)
    for r in range(rows):
        if _quantize_row(src[r], plan, bits, amaxes, scales[r], divisors,
                         codes[r]) >= np.uint32(_INFINITY):
            return False
    return True


@njit(cache=True, inline="always", error_model="numpy")
def _decode(element: np.float32, factor: np.float32, post: np.float32) -> np.float32:
    """One element as the consumer decodes it: ``f32(f32(element * factor) * post)``."""
    value: np.float32 = np.float32(element * factor) * post
    return value


@njit(cache=True, error_model="numpy")
def reproduce_nvfp4_bf16(src: np.ndarray, packed: np.ndarray, scales: np.ndarray, plan: Any,
                         consumer: Any, totals: np.ndarray
                         ) -> tuple[int, bool, bool, np.uint32]:
    """One pass over an NVFP4 module: BF16 source bits ``src`` (uint16 ``[R, C]``, C a
    multiple of 16) quantized under producer ``plan`` (with the checkpoint's global scale)
    against the checkpoint's ``packed`` codes (uint8 ``[R, C/2]``, element 2j low) and E4M3
    ``scales`` (uint8 ``[R, C/16]``), decoded under ``consumer`` plan ``(divides, post)``.
    Fills ``totals`` (``len(TERMS)`` × LANES, zeros on entry) with the moments' lane totals of the
    decoded checkpoint against the source; returns (:data:`OK` or :data:`OTHER`, source
    varies, weight varies, the module's largest magnitude as float32 bits)."""
    divides, post = consumer
    stored = plan[9]
    rows, cols = src.shape
    nblocks = cols // _BLOCK
    bits = np.empty(cols, dtype=np.uint32)
    ours = np.empty(cols, dtype=np.uint8)
    our_scales = np.empty(nblocks, dtype=np.uint8)
    amaxes = np.empty(nblocks, dtype=np.uint32)
    divisors = np.empty(nblocks, dtype=np.float32)
    factors = np.empty(nblocks, dtype=np.float32)
    source = bits.view(np.float32)
    ds = np.empty(cols, dtype=np.float32)
    local = np.zeros((_TERMS, LANES), dtype=np.float64)
    if rows == 0 or cols == 0:
        return OK, False, False, np.uint32(0)
    first = _e4m3_value(scales[0, 0])
    kx = np.float64(_float32(np.uint32(src[0, 0]) << np.uint32(16)))
    kd = np.float64(_decode(_e2m1_value(packed[0, 0] & np.uint8(0xF)),
                            first / stored if divides else first, post))
    module_max = np.uint32(0)
    for r in range(rows):
        row_max = _quantize_row(src[r], plan, bits, amaxes, our_scales, divisors, ours)
        if row_max >= np.uint32(_INFINITY):
            return OTHER, False, False, row_max
        module_max = max(module_max, row_max)
        mismatch = 0
        for blk in range(nblocks):
            mismatch |= our_scales[blk] != scales[r, blk]
        row = packed[r]
        for j in range(cols // 2):
            mismatch |= row[j] != (ours[2 * j] | (ours[2 * j + 1] << np.uint8(4)))
        # Every byte equal (else the caller discards the sums): the checkpoint's codes and
        # scales are ours, decoded from our contiguous codes
        for blk in range(nblocks):
            s = _e4m3_value(our_scales[blk])
            factors[blk] = s / stored if divides else s
        for blk in range(nblocks):
            factor = factors[blk]
            for k in range(blk * _BLOCK, blk * _BLOCK + _BLOCK):
                ds[k] = _decode(_e2m1_value(ours[k]), factor, post)
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
