"""Exact-arithmetic helpers for the INT4/FP8/W4A8 tests: rounding with Fractions, written
independently of mxformats (no float32 intermediate, no numpy casts)."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np

BF16_BITS, F16_BITS, F32_BITS = 8, 11, 24


def round_fraction(value: Fraction, bits: int) -> Fraction:
    """``value`` rounded to ``bits`` significant bits, nearest-even, unbounded exponent
    (the tests keep values in the normal range of the target)."""
    if value == 0:
        return Fraction(0)
    sign = -1 if value < 0 else 1
    a = abs(value)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    quantum = Fraction(2) ** (e - bits + 1)
    scaled = a / quantum
    n = scaled.numerator // scaled.denominator
    rest = scaled - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2 == 1):
        n += 1
    return sign * n * quantum


def round_half_even_int(value: Fraction) -> int:
    n = value.numerator // value.denominator
    rest = value - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2 == 1):
        n += 1
    return n


def fractions(x: np.ndarray) -> list[Fraction]:
    return [Fraction(float(v)) for v in np.asarray(x, dtype=np.float64).reshape(-1)]


def bits_of(dtype: np.dtype) -> int:
    return {
        np.dtype(ml_dtypes.bfloat16): BF16_BITS,
        np.dtype(np.float16): F16_BITS,
        np.dtype(np.float32): F32_BITS,
    }[np.dtype(dtype)]


# The oracle's own checks (this module is also a test module, so pytest collects them).


def test_round_fraction_agrees_with_float32_and_bfloat16() -> None:
    rng = np.random.default_rng(0)
    for v in rng.standard_normal(300) * 2.0 ** rng.integers(-30, 30, 300):
        assert round_fraction(Fraction(float(v)), F32_BITS) == Fraction(float(np.float32(v)))
        as_bf16 = float(np.float32(v).astype(ml_dtypes.bfloat16))  # float32 -> bf16 is exact RNE
        assert round_fraction(Fraction(float(np.float32(v))), BF16_BITS) == Fraction(as_bf16)


def test_round_half_even_int() -> None:
    cases = {Fraction(5, 2): 2, Fraction(7, 2): 4, Fraction(-5, 2): -2, Fraction(-7, 2): -4}
    assert all(round_half_even_int(k) == v for k, v in cases.items())
    assert round_half_even_int(Fraction(-15, 2)) == -8
