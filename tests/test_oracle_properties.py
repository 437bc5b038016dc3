"""Property tests of mxformats against the independent oracle (``oracle.py``).

* random float32/float64 inputs (Hypothesis) equal the oracle in every (format, mode);
* every rounding midpoint, and the values 1 float64 ulp and 1 float32 ulp either side of it,
  equal the oracle in both input widths (these catch double rounding through float32);
* encode is monotonic, sign-symmetric where the format is signed, and encode(decode(c)) == c.
"""

from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import (
    FORMAT_NAMES,
    ORACLE_MODES,
    PARAMS,
    RAISES,
    floor_log2,
    oracle_decode,
    oracle_encode_array,
    positive_values,
    sign_bit,
)

from mxformats import get_format

SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

MODE_PARAMS = [
    pytest.param(fmt, r, o, id=f"{fmt}-{r}-{o}")
    for fmt in FORMAT_NAMES
    for r, o in ORACLE_MODES[fmt]
]
SIGNED_MODE_PARAMS = [
    pytest.param(fmt, r, o, id=f"{fmt}-{r}-{o}")
    for fmt in FORMAT_NAMES
    if PARAMS[fmt].kind != "e8m0"
    for r, o in ORACLE_MODES[fmt]
]
WIDTHS = [32, 64]
_NP_FLOAT = {32: np.float32, 64: np.float64}


def has_nan(fmt: str) -> bool:
    """Whether NaN inputs encode without nan_code."""
    return bool(PARAMS[fmt].nan_codes)


def unsigned(fmt: str) -> bool:
    """E8M0 rejects negative inputs; it is the only format that does."""
    return PARAMS[fmt].kind == "e8m0"


def assert_matches_oracle(fmt: str, rounding: str, overflow: str, x: np.ndarray) -> None:
    """encode(x) equals the oracle element for element (x must not contain raising values)."""
    expected = oracle_encode_array(fmt, x, rounding, overflow)
    assert not np.any(expected == RAISES)
    got = get_format(fmt).encode(x, rounding=rounding, overflow=overflow)
    assert got.dtype == np.uint8
    if not np.array_equal(got, expected.astype(np.uint8)):
        bad = np.nonzero(got != expected.astype(np.uint8))[0]
        rows = [
            f"x={float(x[i])!r} ({x.dtype}) expected {int(expected[i]):#04x} got {int(got[i]):#04x}"
            for i in bad[:10]
        ]
        raise AssertionError(f"{fmt} {rounding}/{overflow}:\n  " + "\n  ".join(rows))


# ------------------------------------------------------------------------------------------
# Midpoints (exact rationals from the oracle's value list)
# ------------------------------------------------------------------------------------------


def _neighbour_pairs(fmt: str) -> list[tuple[Fraction, Fraction]]:
    """Adjacent candidate magnitudes, including the pair straddling each end of the range."""
    p = PARAMS[fmt]
    vals = [v for v, _ in positive_values(fmt)]
    if p.kind in ("int", "uint"):
        return [(Fraction(n), Fraction(n + 1)) for n in range(-11, 17)]
    if p.kind == "e8m0":
        vals = [vals[0] / 4, vals[0] / 2, *vals, vals[-1] * 2, vals[-1] * 4]
    else:
        top = vals[-1]
        ulp = Fraction(2) ** (floor_log2(top) - p.mbits)
        vals = [*vals, top + ulp, top + 2 * ulp]
    return list(itertools.pairwise(vals))


def _step(x: np.floating, k: int) -> np.floating:
    """``x`` moved ``k`` ulps (of its own dtype)."""
    direction = x.dtype.type(np.inf if k > 0 else -np.inf)
    for _ in range(abs(k)):
        x = np.nextafter(x, direction)
    return x


@functools.cache
def midpoint_candidates(fmt: str, width: int) -> np.ndarray:
    """Every midpoint, and 1 float64 / float32 ulp either side, both signs, in ``width``."""
    p = PARAMS[fmt]
    centres: list[float] = []
    for lo, hi in _neighbour_pairs(fmt):
        centres.append(float((lo + hi) / 2))
        if p.kind == "e8m0" and lo > 0:  # geometric midpoint sqrt(2) * lo (never exact)
            centres.append(math.ldexp(math.sqrt(2), floor_log2(lo)))
        centres.append(float(lo))
    out: list[float] = []
    for c in centres:
        for dt in (np.float64, np.float32):
            with np.errstate(over="ignore"):
                base = dt(c)
            if not np.isfinite(base):
                continue
            out.extend(float(_step(base, k)) for k in (-1, 0, 1))
    arr = np.array(sorted(set(out)), dtype=np.float64)
    arr = np.concatenate([arr, -arr])
    if unsigned(fmt):
        arr = arr[arr >= 0]
    with np.errstate(over="ignore"):
        return np.unique(arr.astype(_NP_FLOAT[width]))


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(("fmt", "rounding", "overflow"), MODE_PARAMS)
def test_midpoints_and_neighbours(fmt: str, rounding: str, overflow: str, width: int) -> None:
    """All midpoints +-1 ulp (float64 and float32 ulps) encode as the oracle says."""
    x = midpoint_candidates(fmt, width)
    assert x.size > 20
    assert_matches_oracle(fmt, rounding, overflow, x)


def test_midpoint_candidates_contain_double_rounding_traps() -> None:
    """Sanity: the float64 list holds values that a float32 intermediate would turn into ties."""
    x = midpoint_candidates("e4m3fn", 64)
    assert np.nextafter(1.0625, 2.0) in x  # rounds to 1.125, but float32(x) == 1.0625 ties down
    assert np.nextafter(np.float64(464.0), 0.0) in x
    e8 = midpoint_candidates("e8m0", 64)
    assert np.nextafter(1.5, 0.0) in e8 and math.sqrt(2) in e8


# ------------------------------------------------------------------------------------------
# Hypothesis strategies
# ------------------------------------------------------------------------------------------


def _exp_range(fmt: str) -> tuple[int, int]:
    p = PARAMS[fmt]
    if p.kind in ("int", "uint"):
        return -3, 5
    vals = [v for v, _ in positive_values(fmt) if v > 0]
    return floor_log2(vals[0]) - 4, floor_log2(vals[-1]) + 3


def values(fmt: str, width: int) -> st.SearchStrategy[float]:
    """A mixture of raw floats, log-uniform values around the format, and near-midpoints."""
    lo, hi = _exp_range(fmt)
    scaled = st.builds(
        lambda m, e, s: s * math.ldexp(m, e),
        st.floats(1.0, 2.0, exclude_max=True, width=width),
        st.integers(lo, hi),
        st.sampled_from([1.0, -1.0]),
    )
    mids = midpoint_candidates(fmt, width)
    near = st.builds(
        lambda i, k: float(_step(mids[i], k)),
        st.integers(0, mids.size - 1),
        st.integers(-3, 3),
    )
    raw = st.floats(width=width, allow_nan=has_nan(fmt), allow_infinity=True)
    strat = st.one_of(raw, scaled, near)
    if unsigned(fmt):
        strat = st.one_of(strat.map(abs), st.just(math.nan), st.just(-0.0))
    return strat


@functools.cache
def value_lists(fmt: str, width: int) -> st.SearchStrategy[list[float]]:
    """Lists of values for one encode call."""
    return st.lists(values(fmt, width), min_size=1, max_size=40)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(("fmt", "rounding", "overflow"), MODE_PARAMS)
@SETTINGS
@given(data=st.data())
def test_random_values_match_oracle(
    fmt: str, rounding: str, overflow: str, width: int, data: st.DataObject
) -> None:
    """Random float32/float64 arrays encode exactly as the oracle says."""
    xs = data.draw(value_lists(fmt, width))
    with np.errstate(over="ignore"):
        x = np.array(xs, dtype=_NP_FLOAT[width])
    assert_matches_oracle(fmt, rounding, overflow, x)


@pytest.mark.parametrize(("fmt", "rounding", "overflow"), MODE_PARAMS)
@SETTINGS
@given(data=st.data())
def test_monotonic(fmt: str, rounding: str, overflow: str, data: st.DataObject) -> None:
    """x <= y implies decode(encode(x)) <= decode(encode(y)) (NaN results ignored)."""
    xs = data.draw(value_lists(fmt, 64))
    x = np.sort(np.array([v for v in xs if not math.isnan(v)], dtype=np.float64))
    if x.size < 2:
        return
    f = get_format(fmt)
    d = f.decode(f.encode(x, rounding=rounding, overflow=overflow), dtype=np.float64)
    d = d[~np.isnan(d)]
    bad = np.nonzero(d[1:] < d[:-1])[0]
    assert bad.size == 0, (x.tolist(), d.tolist())


def _negate(x: np.ndarray) -> np.ndarray:
    """Flip the sign bit of every element (NaN included)."""
    return np.copysign(x, np.where(np.signbit(x), 1.0, -1.0).astype(x.dtype))


@pytest.mark.parametrize(("fmt", "rounding", "overflow"), SIGNED_MODE_PARAMS)
@SETTINGS
@given(data=st.data())
def test_sign_symmetry(fmt: str, rounding: str, overflow: str, data: st.DataObject) -> None:
    """encode(-x) is encode(x) with the sign flipped (modulo zero/FNUZ/integer rules)."""
    p = PARAMS[fmt]
    xs = data.draw(value_lists(fmt, 64))
    x = np.abs(np.array(xs, dtype=np.float64))
    if p.kind == "int":
        x = x[x <= 7]
    f = get_format(fmt)
    kw = {"rounding": rounding, "overflow": overflow}
    pos = f.encode(x, **kw).astype(np.int64)
    neg = f.encode(_negate(x), **kw).astype(np.int64)
    if p.kind == "uint":
        expected = np.zeros_like(pos)
    elif p.kind == "int":
        expected = (-f.to_integers(pos).astype(np.int64)) & 0xF
    elif p.neg_zero_code is None:  # FNUZ: no -0; the single NaN code has no sign either
        expected = np.where((pos == 0) | (pos == 0x80), pos, pos ^ sign_bit(fmt))
    else:
        expected = pos ^ sign_bit(fmt)
    assert np.array_equal(neg, expected), (x.tolist(), pos.tolist(), neg.tolist())


@pytest.mark.parametrize(("fmt", "rounding", "overflow"), MODE_PARAMS)
def test_encode_decode_roundtrip(fmt: str, rounding: str, overflow: str) -> None:
    """encode(decode(c)) == c for every non-NaN code, from float32 and float64, in every mode."""
    p = PARAMS[fmt]
    codes = np.array(
        [c for c in range(1 << p.bits) if oracle_decode(fmt, c) != "nan"], dtype=np.uint8
    )
    f = get_format(fmt)
    for dtype in (np.float32, np.float64):
        back = f.encode(f.decode(codes, dtype=dtype), rounding=rounding, overflow=overflow)
        assert np.array_equal(back, codes), (dtype, codes[back != codes], back[back != codes])
