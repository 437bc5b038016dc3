"""Triton helpers that decode and encode binary float formats with integer arithmetic only.

Written once from a format's parameters (exponent and mantissa widths, bias, largest finite
code, NaN/Inf encoding), they serve the element formats (E2M1, E4M3FN, E4M3FNUZ, E5M2, ...)
and the IEEE types (float32, bfloat16, float16) alike. A value is carried as a sign, an integer
significand ``s`` (``0 <= s < 2**25``) and the exponent ``exp`` of its last bit: ``s * 2**exp``.
Scaling by ``2**k`` is ``exp + k``, and rounding to another format is shifting ``s`` with a
round-to-nearest decision on the bits shifted out, so subnormals are kept, there is no float
operation a GPU could flush, fuse or round differently, and the interpreter computes the same
bits (spec/README.md, "Encoding": one rounding from the exact value).

Specials ids (``SPECIALS``): 0 none (E2M1, E2M3, E3M2), 1 IEEE (exponent all ones: Inf, NaN),
2 fn (magnitude all ones is NaN: E4M3FN), 3 fnuz (the code ``1 << (bits - 1)`` is NaN).
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["decode_float", "decode_to_float32", "encode_float", "floor_log2", "round_magnitude"]


@triton.jit
def floor_log2(s: tl.tensor) -> tl.tensor:
    """``floor(log2(s))`` for integers ``1 <= s < 2**25`` (an int32 -> float32 conversion is
    exact there; its exponent field is the answer)."""
    return ((s.to(tl.float32).to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127


@triton.jit
def decode_float(bits: tl.tensor, EBITS: tl.constexpr, MBITS: tl.constexpr,
                 BIAS: tl.constexpr, SPECIALS: tl.constexpr) -> tuple[tl.tensor, ...]:
    """Split codes (int32, the code in the low ``1 + EBITS + MBITS`` bits) into ``(sign, s,
    exp, is_inf, is_nan)``: the value is ``(-1)**sign * s * 2**exp`` unless Inf or NaN."""
    magnitude = bits & ((1 << (EBITS + MBITS)) - 1)
    sign = (bits >> (EBITS + MBITS)) & 1
    field = magnitude >> MBITS
    mantissa = magnitude & ((1 << MBITS) - 1)
    s = tl.where(field > 0, mantissa | (1 << MBITS), mantissa)
    exp = tl.maximum(field, 1) - (BIAS + MBITS)
    all_ones = (1 << EBITS) - 1
    if SPECIALS == 1:
        is_inf = (field == all_ones) & (mantissa == 0)
        is_nan = (field == all_ones) & (mantissa != 0)
    elif SPECIALS == 2:
        is_inf = magnitude < 0
        is_nan = magnitude == (1 << (EBITS + MBITS)) - 1
    elif SPECIALS == 3:
        is_inf = magnitude < 0
        is_nan = (magnitude == 0) & (sign == 1)
    else:
        is_inf = magnitude < 0
        is_nan = magnitude < 0
    return sign, s, exp, is_inf, is_nan


@triton.jit
def round_magnitude(s: tl.tensor, exp: tl.tensor, MBITS: tl.constexpr, BIAS: tl.constexpr,
                    MAX_CODE: tl.constexpr, ROUND_AWAY: tl.constexpr) -> tuple[tl.tensor, ...]:
    """The magnitude code of ``s * 2**exp`` (``0 <= s < 2**25``) rounded to nearest (ties to
    even, or away from zero with ``ROUND_AWAY``) in a format with ``MBITS`` mantissa bits and
    exponent bias ``BIAS``, subnormals included; returns ``(code, overflow)``, ``overflow``
    where the rounded value exceeds the largest finite code ``MAX_CODE`` (``code`` is then
    meaningless: the caller saturates, or writes Inf or NaN)."""
    top = floor_log2(tl.maximum(s, 1)) + exp  # floor(log2(value)) for s > 0
    biased = tl.maximum(top + BIAS, 1)  # 1 for subnormals: their quantum is the normal one
    max_biased = MAX_CODE >> MBITS
    clamped = tl.minimum(biased, max_biased)
    shift = clamped - (BIAS + MBITS) - exp  # bits of s below the quantum
    left = tl.minimum(tl.maximum(-shift, 0), 31)  # at most MBITS unless overflowing
    right = tl.minimum(tl.maximum(shift, 0), 26)  # s < 2**25: 26 leaves 0, below half
    n = (s << left) >> right
    dropped = s & ((1 << right) - 1)
    half = (1 << right) >> 1
    tie_up = (n & 1) == 1
    if ROUND_AWAY:
        tie_up = n >= 0
    up = (half > 0) & ((dropped > half) | ((dropped == half) & tie_up))
    # The carry of n = 2**(MBITS + 1) lands in the exponent field by the addition.
    code = ((clamped - 1) << MBITS) + n + up.to(tl.int32)
    overflow = (biased > max_biased) | (code > MAX_CODE)
    return tl.where(s == 0, 0, code), overflow & (s != 0)


@triton.jit
def encode_float(sign: tl.tensor, s: tl.tensor, exp: tl.tensor, is_inf: tl.tensor,
                 is_nan: tl.tensor, MBITS: tl.constexpr, BIAS: tl.constexpr,
                 SIGN_BIT: tl.constexpr, MAX_CODE: tl.constexpr, SATURATE: tl.constexpr,
                 OVERFLOW_CODE: tl.constexpr, NAN_CODE: tl.constexpr,
                 NEGATIVE_ZERO: tl.constexpr, ROUND_AWAY: tl.constexpr) -> tl.tensor:
    """Encode ``(-1)**sign * s * 2**exp`` (or ±Inf, NaN) to a code, rounding once.

    Overflow and ±Inf give ``MAX_CODE`` with ``SATURATE``, else ``OVERFLOW_CODE`` (the Inf
    code of an IEEE format, the NaN code of fn/fnuz); both with the value's sign. NaN gives
    ``NAN_CODE`` as it is (no sign added). ``NEGATIVE_ZERO``: False for formats without -0
    (fnuz), where a zero result is +0.
    """
    magnitude, overflow = round_magnitude(s, exp, MBITS, BIAS, MAX_CODE, ROUND_AWAY)
    if SATURATE:
        magnitude = tl.where(overflow | is_inf, MAX_CODE, magnitude)
    else:
        magnitude = tl.where(overflow | is_inf, OVERFLOW_CODE, magnitude)
    negative = sign == 1
    if not NEGATIVE_ZERO:
        negative = negative & (magnitude != 0)
    code = magnitude | tl.where(negative, SIGN_BIT, 0)
    return tl.where(is_nan, NAN_CODE, code)


@triton.jit
def decode_to_float32(code: tl.tensor, EBITS: tl.constexpr, MBITS: tl.constexpr,
                      BIAS: tl.constexpr, SPECIALS: tl.constexpr) -> tl.tensor:
    """Codes (int32) of a format without Inf (E2M1, E4M3FN, E4M3FNUZ, ...) and at most as
    wide as float32, as float32 values, exactly; NaN codes give the canonical quiet NaN."""
    sign, s, exp, _, is_nan = decode_float(code, EBITS, MBITS, BIAS, SPECIALS)
    magnitude, _ = round_magnitude(s, exp, 23, 127, 0x7F7FFFFF, False)  # exact: float32 is wider
    bits = tl.where(is_nan, 0x7FC00000, magnitude | (sign << 31))
    return bits.to(tl.float32, bitcast=True)
