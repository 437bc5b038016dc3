"""Independent, slow, exact oracle for the mxformats element formats.

This module must never import ``mxformats``. Every format parameter is typed by hand in
``PARAMS``; the representable values are enumerated from those parameters as exact
``Fraction`` objects, and rounding is done with rational arithmetic on a sorted value list
(``bisect``), following the semantics written down in ``spec/README.md``.

Public API:

* ``oracle_encode(fmt, value, rounding, overflow) -> int | type[ValueError]``
* ``oracle_decode(fmt, code) -> Fraction | "nan" | "+inf" | "-inf" | "-0"``
* ``ORACLE_MODES[fmt] -> list[(rounding, overflow)]``: every valid combination.
* ``classify`` / ``decide``: the two halves of ``oracle_encode`` (mode-independent
  neighbour search, then the mode-specific choice), exposed so that bulk tests can cache the
  expensive half once per input value.
* ``fraction_to_ieee_bits``: exact value -> IEEE binary bit pattern with round-to-nearest-even.
"""

from __future__ import annotations

import math
import struct
from bisect import bisect_left
from dataclasses import dataclass
from fractions import Fraction
from functools import cache, lru_cache
from typing import Literal, NamedTuple

import numpy as np

DecodedValue = Fraction | Literal["nan", "+inf", "-inf", "-0"]
EncodeResult = int | type[ValueError]


@dataclass(frozen=True)
class Params:
    """Hand-typed parameters of one element format."""

    name: str
    kind: Literal["float", "e8m0", "int", "uint"]
    bits: int
    ebits: int
    mbits: int
    bias: int
    max: Fraction
    min_normal: Fraction | None
    min_subnormal: Fraction | None
    nan_codes: tuple[int, ...]
    inf_codes: tuple[int, ...]
    signed: bool
    neg_zero_code: int | None  # None: no negative zero (or no sign at all)
    nonsat_nan_pos: int | None = None  # NaN code used for positive overflow (nonsaturating)
    nonsat_nan_neg: int | None = None  # NaN code used for negative overflow (nonsaturating)
    nan_pos: int | None = None  # code for a positive NaN input
    nan_neg: int | None = None  # code for a negative NaN input


F = Fraction

# Everything in this table is typed by hand (OCP MX v1.0 / OFP8 / FNUZ definitions), not derived.
PARAMS: dict[str, Params] = {
    "e2m1": Params("e2m1", "float", 4, 2, 1, 1, F(6), F(1), F(1, 2), (), (), True, 0x8),
    "e8m0": Params(
        "e8m0",
        "e8m0",
        8,
        8,
        0,
        127,
        F(2) ** 127,
        F(1, 2**127),
        F(1, 2**127),
        (0xFF,),
        (),
        False,
        None,
        nan_pos=0xFF,
        nan_neg=0xFF,
    ),
    "e4m3fn": Params(
        "e4m3fn",
        "float",
        8,
        4,
        3,
        7,
        F(448),
        F(1, 64),
        F(1, 512),
        (0x7F, 0xFF),
        (),
        True,
        0x80,
        nonsat_nan_pos=0x7F,
        nonsat_nan_neg=0xFF,
        nan_pos=0x7F,
        nan_neg=0xFF,
    ),
    "e4m3fnuz": Params(
        "e4m3fnuz",
        "float",
        8,
        4,
        3,
        8,
        F(240),
        F(1, 128),
        F(1, 1024),
        (0x80,),
        (),
        True,
        None,
        nonsat_nan_pos=0x80,
        nonsat_nan_neg=0x80,
        nan_pos=0x80,
        nan_neg=0x80,
    ),
    "e5m2": Params(
        "e5m2",
        "float",
        8,
        5,
        2,
        15,
        F(57344),
        F(1, 2**14),
        F(1, 2**16),
        (0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF),
        (0x7C, 0xFC),
        True,
        0x80,
        nonsat_nan_pos=None,
        nonsat_nan_neg=None,
        nan_pos=0x7E,
        nan_neg=0xFE,
    ),
    "e2m3": Params("e2m3", "float", 6, 2, 3, 1, F(15, 2), F(1), F(1, 8), (), (), True, 0x20),
    "e3m2": Params("e3m2", "float", 6, 3, 2, 3, F(28), F(1, 4), F(1, 16), (), (), True, 0x20),
    "int4": Params("int4", "int", 4, 0, 0, 0, F(7), None, None, (), (), True, None),
    "uint4": Params("uint4", "uint", 4, 0, 0, 0, F(15), None, None, (), (), False, None),
}

FORMAT_NAMES: tuple[str, ...] = tuple(PARAMS)

_FLOAT_ROUNDINGS = ["nearest-even", "nearest-away", "toward-zero"]
_E8M0_ROUNDINGS = ["nearest-even", "nearest-linear", "nearest-log", "floor", "ceil"]

# Every valid (rounding, overflow) combination, typed by hand.
ORACLE_MODES: dict[str, list[tuple[str, str]]] = {
    "e2m1": [(r, "saturate") for r in _FLOAT_ROUNDINGS],
    "e8m0": [(r, "saturate") for r in _E8M0_ROUNDINGS],
    "e4m3fn": [(r, o) for r in _FLOAT_ROUNDINGS for o in ("saturate", "nonsaturating")],
    "e4m3fnuz": [(r, o) for r in _FLOAT_ROUNDINGS for o in ("saturate", "nonsaturating")],
    "e5m2": [(r, o) for r in _FLOAT_ROUNDINGS for o in ("saturate", "nonsaturating")],
    "e2m3": [(r, "saturate") for r in _FLOAT_ROUNDINGS],
    "e3m2": [(r, "saturate") for r in _FLOAT_ROUNDINGS],
    "int4": [(r, "saturate") for r in _FLOAT_ROUNDINGS],
    "uint4": [(r, "saturate") for r in _FLOAT_ROUNDINGS],
}


def sign_bit(fmt: str) -> int:
    """Mask of the sign bit (0 for unsigned formats)."""
    p = PARAMS[fmt]
    if p.kind in ("e8m0", "uint"):
        return 0
    return 1 << (p.bits - 1)


# --------------------------------------------------------------------------------------------
# Value enumeration and decoding
# --------------------------------------------------------------------------------------------


def _float_code_magnitude(p: Params, code: int) -> Fraction:
    """Magnitude of a (non-special) float-format code, from ebits/mbits/bias."""
    mant_mask = (1 << p.mbits) - 1
    m = code & mant_mask
    e = (code >> p.mbits) & ((1 << p.ebits) - 1)
    if e == 0:
        return Fraction(m, 1 << p.mbits) * Fraction(2) ** (1 - p.bias)
    return (1 + Fraction(m, 1 << p.mbits)) * Fraction(2) ** (e - p.bias)


@cache
def oracle_decode(fmt: str, code: int) -> DecodedValue:
    """Exact value of ``code`` in ``fmt`` ("-0" for negative zero)."""
    p = PARAMS[fmt]
    if not 0 <= code < (1 << p.bits):
        raise ValueError(f"code {code} out of range for {fmt}")
    if code in p.nan_codes:
        return "nan"
    if code in p.inf_codes:
        return "-inf" if code & sign_bit(fmt) else "+inf"
    if p.kind == "e8m0":
        return Fraction(2) ** (code - p.bias)
    if p.kind == "uint":
        return Fraction(code)
    if p.kind == "int":
        return Fraction(code - 16 if code >= 8 else code)
    sb = sign_bit(fmt)
    mag = _float_code_magnitude(p, code & ~sb)
    if code & sb:
        return "-0" if mag == 0 else -mag
    return mag


@cache
def positive_values(fmt: str) -> tuple[tuple[Fraction, int], ...]:
    """Sorted (value, code) for every non-negative finite non-NaN code (sign bit clear)."""
    p = PARAMS[fmt]
    sb = sign_bit(fmt)
    out = []
    for code in range(1 << p.bits):
        if code & sb:
            continue
        v = oracle_decode(fmt, code)
        if isinstance(v, Fraction) and v >= 0:
            out.append((v, code))
    out.sort()
    values = [v for v, _ in out]
    if len(set(values)) != len(values):
        raise AssertionError(f"{fmt}: duplicate values")
    return tuple(out)


def _check_table() -> None:
    """Self-check: enumerated values agree with the hand-typed max / min_normal / min_sub."""
    for name, p in PARAMS.items():
        vals = [v for v, _ in positive_values(name)]
        assert vals[-1] == p.max, (name, vals[-1], p.max)
        if p.kind == "float":
            assert vals[0] == 0 and vals[1] == p.min_subnormal, name
            assert p.min_normal == Fraction(2) ** (1 - p.bias), name
        n_special = len(p.nan_codes) + len(p.inf_codes)
        n_neg = (1 << (p.bits - 1)) if p.kind in ("float", "int") else 0
        n_neg_finite = n_neg - sum(1 for c in p.nan_codes + p.inf_codes if c & sign_bit(name))
        assert len(vals) + n_neg_finite + n_special == (1 << p.bits), name


_check_table()


# --------------------------------------------------------------------------------------------
# Exact IEEE conversion helpers (used by tests for expected decode bit patterns)
# --------------------------------------------------------------------------------------------


def floor_log2(a: Fraction) -> int:
    """Exact floor(log2(a)) for a positive Fraction."""
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    assert Fraction(2) ** e <= a < Fraction(2) ** (e + 1)
    return e


def round_nearest_even(value: Fraction, precision: int, emin: int) -> Fraction:
    """``value`` rounded to nearest, ties to even, into a binary format with ``precision``
    significant bits and smallest normal exponent ``emin`` (subnormals below it); no overflow
    (the caller keeps ``value`` in range)."""
    if value == 0:
        return Fraction(0)
    a = abs(value)
    quantum = Fraction(2) ** (max(floor_log2(a), emin) - precision + 1)
    n, rest = divmod(a / quantum, 1)
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2):
        n += 1
    return (1 if value > 0 else -1) * n * quantum


def fraction_to_ieee_bits(value: DecodedValue, ebits: int, mbits: int) -> int:
    """Bit pattern of ``value`` in an IEEE binary format, round-to-nearest-even.

    NaN gives the canonical positive quiet NaN (top mantissa bit set only).
    """
    exp_all = (1 << ebits) - 1
    bias = (1 << (ebits - 1)) - 1
    sign_shift = ebits + mbits
    if value == "nan":
        return (exp_all << mbits) | (1 << (mbits - 1))
    if value == "+inf":
        return exp_all << mbits
    if value == "-inf":
        return (1 << sign_shift) | (exp_all << mbits)
    if value == "-0":
        return 1 << sign_shift
    assert isinstance(value, Fraction)
    sign = 1 if value < 0 else 0
    a = abs(value)
    if a == 0:
        return 0
    # Scale so that the quantum is 1: find exponent e with 2^e <= a < 2^(e+1).
    e = max(floor_log2(a), 1 - bias)  # subnormal range shares the minimum exponent
    quantum = Fraction(2) ** (e - mbits)
    q = a / quantum
    n = q.numerator // q.denominator
    rem = q - n
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2 == 1):
        n += 1
    # n in [0, 2^(mbits+1)]; renormalise.
    if n >= (1 << (mbits + 1)):
        n >>= 1
        e += 1
    if n < (1 << mbits):  # subnormal (or zero)
        biased = 0
    else:
        biased = e + bias
        n -= 1 << mbits
    if biased >= exp_all:
        return (sign << sign_shift) | (exp_all << mbits)
    return (sign << sign_shift) | (biased << mbits) | n


IEEE_LAYOUT: dict[str, tuple[int, int]] = {
    "float64": (11, 52),
    "float32": (8, 23),
    "float16": (5, 10),
    "bfloat16": (8, 7),
}


def float_bits(x: float) -> int:
    """Raw float64 bits of a Python float."""
    return struct.unpack("<Q", struct.pack("<d", x))[0]


# --------------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------------


class Cls(NamedTuple):
    """Mode-independent classification of one input value for one format.

    kind: "nan", "inf", "zero", "exact", "between", "beyond" (above every candidate, even
    the one beyond max), "below" (e8m0: below 2^-127), "int".
    For "between": lo/hi are codes (hi may be ``BEYOND``), cmp = sign(a - linear midpoint),
    cmp_log = sign(a - geometric midpoint) (e8m0 only, else 0), hi_even = low code bit of hi
    is 0. For "int": lo is floor(x) clamped to a small window, cmp = sign(x - lo - 1/2),
    hi_even unused, exact = x is an integer (encoded in cmp_log: 1 if exact).
    """

    kind: str
    neg: bool
    lo: int = 0
    hi: int = 0
    cmp: int = 0
    cmp_log: int = 0
    hi_even: bool = False


BEYOND = -1  # pseudo-code: max + ulp(max), i.e. the first value past max (overflow)


def _sgn(f: Fraction) -> int:
    return (f > 0) - (f < 0)


def _beyond_max(p: Params) -> tuple[Fraction, bool]:
    """(value, is_even) of the next value above max with an unbounded exponent.

    max + ulp(max); its would-be code is max_code + 1, so its evenness is the opposite of
    max_code's low bit.
    """
    vals = positive_values(p.name)
    max_v, max_code = vals[-1]
    e = floor_log2(max_v)
    ulp = Fraction(2) ** (e - p.mbits)
    return max_v + ulp, (max_code + 1) % 2 == 0


@cache
def _beyond_cached(fmt: str) -> tuple[Fraction, bool]:
    return _beyond_max(PARAMS[fmt])


@cache
def _sorted_vals(fmt: str) -> tuple[list[Fraction], list[int]]:
    pv = positive_values(fmt)
    return [v for v, _ in pv], [c for _, c in pv]


def classify(fmt: str, x: float) -> Cls:
    """Mode-independent part of the encode oracle (neighbour search on exact values)."""
    p = PARAMS[fmt]
    neg = math.copysign(1.0, x) < 0
    if math.isnan(x):
        return Cls("nan", neg)
    if math.isinf(x):
        return Cls("inf", neg)
    a = abs(Fraction(x))
    if p.kind in ("int", "uint"):
        v = Fraction(x)
        fl = v.numerator // v.denominator
        if fl >= 16:
            return Cls("int", neg, 16, 0, -1, 1)
        if fl <= -10:
            return Cls("int", neg, -10, 0, -1, 1)
        return Cls("int", neg, fl, 0, _sgn(v - fl - Fraction(1, 2)), int(v == fl))
    if a == 0:
        return Cls("zero", neg)
    vals, codes = _sorted_vals(fmt)
    if p.kind == "e8m0":
        if a < vals[0]:
            return Cls("below", neg)
        if a > vals[-1]:
            return Cls("beyond", neg)
    i = bisect_left(vals, a)
    if i < len(vals) and vals[i] == a:
        return Cls("exact", neg, codes[i])
    if i < len(vals):
        lo_v, hi_v = vals[i - 1], vals[i]
        lo, hi = codes[i - 1], codes[i]
        hi_even = hi % 2 == 0
    else:
        beyond_v, hi_even = _beyond_cached(fmt)
        if a >= beyond_v:
            return Cls("beyond", neg)
        lo_v, hi_v = vals[-1], beyond_v
        lo, hi = codes[-1], BEYOND
    cmp = _sgn(2 * a - lo_v - hi_v)
    cmp_log = _sgn(a * a - 2 * lo_v * lo_v) if p.kind == "e8m0" else 0
    return Cls("between", neg, lo, hi, cmp, cmp_log, hi_even)


def _pick_nearest(c: Cls, rounding: str) -> str:
    """'lo' or 'hi' for a 'between' classification under a float-format rounding."""
    if rounding == "toward-zero":
        return "lo"
    if c.cmp < 0:
        return "lo"
    if c.cmp > 0:
        return "hi"
    if rounding == "nearest-even":
        return "hi" if c.hi_even else "lo"
    if rounding == "nearest-away":
        return "hi"
    raise ValueError(rounding)


def _decide_int(p: Params, c: Cls, rounding: str) -> EncodeResult:
    fl, cmp, exact = c.lo, c.cmp, bool(c.cmp_log)
    if exact:
        n = fl
    elif rounding == "toward-zero":
        n = fl if fl >= 0 else fl + 1
    elif cmp < 0:
        n = fl
    elif cmp > 0:
        n = fl + 1
    elif rounding == "nearest-even":
        n = fl if fl % 2 == 0 else fl + 1
    elif rounding == "nearest-away":
        n = fl + 1 if fl >= 0 else fl
    else:
        raise ValueError(rounding)
    if p.kind == "int":
        n = min(max(n, -8), 7)
        return n & 0xF
    return min(max(n, 0), 15)


def _decide_e8m0(p: Params, c: Cls, rounding: str) -> EncodeResult:
    if c.kind == "nan":
        return 0xFF
    if c.neg and c.kind != "zero":
        return ValueError
    if c.kind == "zero" or c.kind == "below":
        return 0x00
    if c.kind in ("inf", "beyond"):
        return 0xFE
    if c.kind == "exact":
        return c.lo
    assert c.kind == "between"
    if rounding == "floor":
        choice = "lo"
    elif rounding == "ceil":
        choice = "hi"
    elif rounding == "nearest-log":
        assert c.cmp_log != 0
        choice = "lo" if c.cmp_log < 0 else "hi"
    elif rounding == "nearest-linear":
        choice = "lo" if c.cmp < 0 else "hi"
    elif rounding == "nearest-even":
        choice = _pick_nearest(c, "nearest-even")
    else:
        raise ValueError(rounding)
    code = c.lo if choice == "lo" else c.hi
    if code == BEYOND:
        return 0xFE
    return code


@cache
def decide(fmt: str, c: Cls, rounding: str, overflow: str) -> EncodeResult:
    """Mode-dependent part of the encode oracle."""
    p = PARAMS[fmt]
    if (rounding, overflow) not in ORACLE_MODES[fmt]:
        raise ValueError(f"invalid mode {(rounding, overflow)} for {fmt}")
    if p.kind == "e8m0":
        return _decide_e8m0(p, c, rounding)
    if c.kind == "nan":
        if p.nan_pos is None:
            return ValueError
        return p.nan_neg if c.neg else p.nan_pos
    sb = sign_bit(fmt)
    if p.kind in ("int", "uint"):
        if c.kind == "inf":
            if p.kind == "uint":
                return 0 if c.neg else 15
            return 0x8 if c.neg else 0x7
        return _decide_int(p, c, rounding)
    max_code = positive_values(fmt)[-1][1]

    def overflowed() -> int:
        if overflow == "saturate":
            return max_code | (sb if c.neg else 0)
        if p.inf_codes:  # e5m2
            return p.inf_codes[1] if c.neg else p.inf_codes[0]
        assert p.nonsat_nan_pos is not None and p.nonsat_nan_neg is not None
        return p.nonsat_nan_neg if c.neg else p.nonsat_nan_pos

    if c.kind == "inf":
        if p.inf_codes:
            return p.inf_codes[1] if c.neg else p.inf_codes[0]
        return overflowed()
    if c.kind == "beyond":
        if rounding == "toward-zero":
            return max_code | (sb if c.neg else 0)
        return overflowed()
    if c.kind == "zero":
        mag = 0
    elif c.kind == "exact":
        mag = c.lo
    else:
        assert c.kind == "between"
        mag = c.lo if _pick_nearest(c, rounding) == "lo" else c.hi
        if mag == BEYOND:
            return overflowed()
    if mag == 0:
        if c.neg and p.neg_zero_code is not None:
            return p.neg_zero_code
        return 0
    return mag | (sb if c.neg else 0)


@lru_cache(maxsize=1 << 16)
def _encode_cached(fmt: str, rounding: str, overflow: str, bits64: int) -> EncodeResult:
    x = struct.unpack("<d", struct.pack("<Q", bits64))[0]
    return decide(fmt, classify(fmt, x), rounding, overflow)


def oracle_encode(fmt: str, value: float, rounding: str, overflow: str) -> EncodeResult:
    """Expected code for ``value`` (exact float64 value), or ``ValueError`` if it must raise."""
    return _encode_cached(fmt, rounding, overflow, float_bits(float(value)))


# --------------------------------------------------------------------------------------------
# Bulk helpers (for exhaustive sweeps: classify each input once, decide once per class)
# --------------------------------------------------------------------------------------------

RAISES = -1  # marker in integer result arrays: the oracle says ValueError


def classify_array(fmt: str, x: np.ndarray) -> tuple[np.ndarray, list[Cls]]:
    """Classify every element of ``x`` (converted exactly to float64).

    Returns (ids, classes): ``classes[ids[i]]`` is ``classify(fmt, x[i])``.
    """
    x64 = np.asarray(x).astype(np.float64).ravel()
    index: dict[Cls, int] = {}
    ids = np.empty(x64.shape, dtype=np.int64)
    for i, v in enumerate(x64.tolist()):
        ids[i] = index.setdefault(classify(fmt, v), len(index))
    return ids, list(index)


def decide_array(
    fmt: str, ids: np.ndarray, classes: list[Cls], rounding: str, overflow: str
) -> np.ndarray:
    """Oracle codes (int64, ``RAISES`` where ValueError is expected) from ``classify_array``."""
    table = np.array(
        [RAISES if (r := decide(fmt, c, rounding, overflow)) is ValueError else r for c in classes],
        dtype=np.int64,
    )
    return table[ids]


def oracle_encode_array(fmt: str, x: np.ndarray, rounding: str, overflow: str) -> np.ndarray:
    """Vector form of ``oracle_encode`` (int64 codes, ``RAISES`` for ValueError)."""
    ids, classes = classify_array(fmt, x)
    return decide_array(fmt, ids, classes, rounding, overflow).reshape(np.shape(x))
