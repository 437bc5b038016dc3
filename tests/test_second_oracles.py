"""ml_dtypes and torch casts as second oracles.

Where a library's semantics match one of our modes, its codes must equal ours on all 65,536
bfloat16 and float16 bit patterns. Every known disagreement is asserted explicitly, keyed to
the library version that has it (``tests/peers.py`` for ml_dtypes; torch is pinned at 2.13.0):
for a version that has it the disagreement is asserted, for one that does not, agreement. A
release that changes behaviour again makes a test fail naming the version, instead of
silently shifting a mismatch count. ``.ci/run`` runs this file against the newest releases.
"""

from __future__ import annotations

import functools
import math
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from conftest import requires
from peers import (
    MD,
    MD_E8M0_CHARACTERISED,
    MD_E8M0_LOW_ROUNDS_UP,
    MD_FLOAT64_VIA_FLOAT32,
    MD_INT4_WRAPS,
)

from mxformats import E2M1, E2M3, E3M2, E4M3FN, E8M0, get_format

SOURCES = ["bfloat16", "float16"]

_UINT_OF_SIZE = {2: np.uint16, 4: np.uint32, 8: np.uint64}

# ------------------------------------------------------------------------------------------
# Inputs and helpers
# ------------------------------------------------------------------------------------------


@functools.cache
def patterns(src: str) -> np.ndarray:
    """All 65,536 bit patterns of ``src`` as that numpy dtype."""
    bits = np.arange(65536, dtype=np.uint16)
    return bits.view(ml_dtypes.bfloat16 if src == "bfloat16" else np.float16)


@functools.cache
def as_f64(src: str) -> np.ndarray:
    """The patterns as float64 (exact; NaN signs kept)."""
    with np.errstate(invalid="ignore"):
        return patterns(src).astype(np.float64)


@functools.cache
def ours(fmt: str, rounding: str, overflow: str, src: str) -> np.ndarray:
    """mxformats codes for every pattern; NaN without a NaN code gets nan_code 0xFF (marked)."""
    f = get_format(fmt)
    x = patterns(src)
    kw: dict[str, Any] = {"rounding": rounding, "overflow": overflow}
    if fmt == "e8m0":
        x = np.where(np.signbit(as_f64(src)) & ~np.isnan(as_f64(src)), 0.0, as_f64(src))
    elif not f.nan_codes:
        kw["nan_code"] = (1 << f.bits) - 1
    return f.encode(x, **kw)


def md_cast(x: np.ndarray, type_name: str) -> np.ndarray:
    """ml_dtypes cast, returned as uint8 codes."""
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(getattr(ml_dtypes, type_name)).view(np.uint8)


@pytest.fixture(scope="module")
def torch() -> ModuleType:
    """torch, or skip (fail under CI=true) when it is not installed."""
    return requires("torch")


def torch_patterns(torch: ModuleType, src: str) -> Any:
    """All patterns of ``src`` as a torch tensor of the same dtype."""
    bits = np.arange(65536, dtype=np.uint16).view(np.int16)
    t = torch.from_numpy(bits.copy())
    return t.view(torch.bfloat16 if src == "bfloat16" else torch.float16)


def torch_cast(torch: ModuleType, t: Any, type_name: str) -> np.ndarray:
    """torch cast to one of its 8-bit float dtypes, returned as uint8 codes."""
    return t.to(getattr(torch, type_name)).view(torch.uint8).numpy()


def assert_equal_where(
    got: np.ndarray, expected: np.ndarray, mask: np.ndarray, x: np.ndarray
) -> None:
    """Bit-exact equality of uint8 codes on ``mask`` (and the mask must not be empty)."""
    assert mask.any()
    g, e = got[mask], expected[mask]
    if not np.array_equal(g, e):
        bad = np.nonzero(g != e)[0]
        xs = x[mask]
        rows = [f"x={xs[i]!r}: library {int(g[i]):#04x} ours {int(e[i]):#04x}" for i in bad[:10]]
        raise AssertionError(f"{bad.size} mismatches:\n  " + "\n  ".join(rows))


def codes_of(values: list[float], lib: np.ndarray, x: np.ndarray) -> list[int]:
    """The library's codes for the given (exactly present) input values."""
    out = []
    for v in values:
        idx = np.nonzero((x == v) & (np.signbit(x) == (math.copysign(1.0, v) < 0)))[0]
        assert idx.size, v
        out.append(int(lib[idx[0]]))
    return out


# ------------------------------------------------------------------------------------------
# ml_dtypes: element formats
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("src", SOURCES)
@pytest.mark.parametrize(
    ("fmt", "type_name"),
    [("e4m3fn", "float8_e4m3fn"), ("e4m3fnuz", "float8_e4m3fnuz"), ("e5m2", "float8_e5m2")],
)
def test_ml_dtypes_fp8_is_our_nonsaturating_mode(fmt: str, type_name: str, src: str) -> None:
    """ml_dtypes FP8 casts (RNE, non-saturating) equal our nonsaturating mode on every input,
    NaN and Inf included (e4m3fn NaN 0x7F/0xFF, e5m2 NaN 0x7E/0xFE, fnuz 0x80)."""
    x = as_f64(src)
    lib = md_cast(patterns(src), type_name)
    assert_equal_where(
        lib, ours(fmt, "nearest-even", "nonsaturating", src), np.ones(x.shape, bool), x
    )
    # ... and therefore differs from our default (saturate) exactly on overflow and Inf.
    sat = ours(fmt, "nearest-even", "saturate", src)
    differs = lib != sat
    a = np.abs(x)
    overflow = {
        "e4m3fn": a > 464.0,  # 464 is the tie between 448 (even) and 480: stays 448
        "e4m3fnuz": a >= 248.0,  # 248 ties between 240 (odd) and 256: overflows
        "e5m2": (a >= 61440.0) & np.isfinite(a),  # Inf -> Inf in both of our modes
    }[fmt]
    assert np.array_equal(differs, overflow & ~np.isnan(x))


def test_ml_dtypes_e4m3fn_known_values() -> None:
    """ml_dtypes e4m3fn: 464 (tie) -> 0x7E, 470 -> NaN, Inf -> NaN (non-saturating)."""
    x = np.array([464.0, 470.0, np.inf, -np.inf, np.nan, -np.nan, 248.0, -0.0], np.float32)
    assert md_cast(x, "float8_e4m3fn").tolist() == [0x7E, 0x7F, 0x7F, 0xFF, 0x7F, 0xFF, 0x78, 0x80]
    assert E4M3FN.encode(x).tolist() == [0x7E, 0x7E, 0x7E, 0xFE, 0x7F, 0xFF, 0x78, 0x80]


@pytest.mark.parametrize("src", SOURCES)
@pytest.mark.parametrize(
    ("fmt", "type_name"),
    [("e2m1", "float4_e2m1fn"), ("e2m3", "float6_e2m3fn"), ("e3m2", "float6_e3m2fn")],
)
def test_ml_dtypes_fp4_fp6_saturate_and_nan_to_zero(fmt: str, type_name: str, src: str) -> None:
    """ml_dtypes FP4/FP6 casts saturate (== our default) but map +NaN to -0 and -NaN to +0."""
    x = as_f64(src)
    nan = np.isnan(x)
    lib = md_cast(patterns(src), type_name)
    assert_equal_where(lib, ours(fmt, "nearest-even", "saturate", src), ~nan, x)
    neg_zero = {"e2m1": 0x8, "e2m3": 0x20, "e3m2": 0x20}[fmt]
    assert np.all(lib[nan & ~np.signbit(x)] == neg_zero)
    assert np.all(lib[nan & np.signbit(x)] == 0x00)
    # Ours: NaN raises unless nan_code is given.
    with pytest.raises(ValueError):
        get_format(fmt).encode(patterns(src)[nan][:3])


def test_ml_dtypes_fp4_known_values() -> None:
    """Spot values: overflow and Inf saturate in ml_dtypes exactly as in ours."""
    x = np.array([7.0, 1e9, np.inf, -np.inf, 5.0, 0.25, -0.25], np.float32)
    assert md_cast(x, "float4_e2m1fn").tolist() == [0x7, 0x7, 0x7, 0xF, 0x6, 0x0, 0x8]
    assert E2M1.encode(x).tolist() == [0x7, 0x7, 0x7, 0xF, 0x6, 0x0, 0x8]
    big = x[1:4]
    assert md_cast(big, "float6_e2m3fn").tolist() == E2M3.encode(big).tolist() == [31, 31, 63]
    assert md_cast(big, "float6_e3m2fn").tolist() == E3M2.encode(big).tolist() == [31, 31, 63]


# ------------------------------------------------------------------------------------------
# E8M0 (both libraries)
# ------------------------------------------------------------------------------------------

_TINY = 2.0**-127
_HUGE_TIE = 1.5 * 2.0**127


def _e8m0_masks(x: np.ndarray) -> dict[str, np.ndarray]:
    pos = (x > 0) & np.isfinite(x)
    return {
        "low_round_up": pos & (x > _TINY) & (x < 1.5 * _TINY),
        "huge": pos & (x >= _HUGE_TIE),
        "agree": pos & ~((x > _TINY) & (x < 1.5 * _TINY)) & (x < _HUGE_TIE),
    }


def _check_e8m0_library(lib: np.ndarray, x: np.ndarray, src: str, *, low_rounds_up: bool) -> None:
    """The behaviour both libraries share on positive finite inputs (``low_rounds_up``: the
    version-dependent part)."""
    m = _e8m0_masks(x)
    # Ties round up: equal to our "nearest-linear" on positive normal inputs ...
    assert_equal_where(lib, ours("e8m0", "nearest-linear", "saturate", src), m["agree"], x)
    # ... but values in (2^-127, 1.5*2^-127) round up to 0x01 (ours: 0x00, the nearer one).
    if m["low_round_up"].any():
        assert np.all(lib[m["low_round_up"]] == (0x01 if low_rounds_up else 0x00))
        assert np.all(ours("e8m0", "nearest-linear", "saturate", src)[m["low_round_up"]] == 0x00)
    # ... and >= 1.5*2^127 becomes NaN 0xFF (ours saturates to 0xFE).
    if m["huge"].any():
        assert np.all(lib[m["huge"]] == 0xFF)
        assert np.all(ours("e8m0", "nearest-linear", "saturate", src)[m["huge"]] == 0xFE)
    assert np.all(lib[np.isnan(x)] == 0xFF)
    assert np.all(lib[x == np.inf] == 0xFF)  # ours: +Inf -> 0xFE
    assert int(E8M0.encode(np.array([np.inf]))[0]) == 0xFE


@pytest.mark.parametrize("src", SOURCES)
def test_ml_dtypes_e8m0(src: str) -> None:
    """ml_dtypes e8m0: ties up; 0 and negatives -> NaN 0xFF (ours: 0x00 / ValueError)."""
    if not MD_E8M0_CHARACTERISED:
        pytest.skip(f"{MD}: E8M0 casts not characterised (tests/peers.py)")
    x = as_f64(src)
    lib = md_cast(patterns(src), "float8_e8m0fnu")
    _check_e8m0_library(lib, x, src, low_rounds_up=MD_E8M0_LOW_ROUNDS_UP)
    assert np.all(lib[x == 0] == 0xFF)  # +0 and -0
    assert np.all(lib[x < 0] == 0xFF)  # negatives, -Inf included
    assert E8M0.encode(np.array([0.0, -0.0])).tolist() == [0x00, 0x00]
    with pytest.raises(ValueError):
        E8M0.encode(np.array([-1.0]))


def test_e8m0_known_values_both_libraries(torch: ModuleType) -> None:
    """The E8M0 table of sources.md §6.4, against both libraries and our modes."""
    x = np.array(
        [0.0, -1.0, 3.0, 0.75, _HUGE_TIE, 2.0**-128, np.inf, np.nan, 1.5, 1.25 * _TINY],
        dtype=np.float32,
    )
    t = torch_cast(torch, torch.from_numpy(x), "float8_e8m0fnu").tolist()
    m = md_cast(x, "float8_e8m0fnu").tolist()
    assert t == [0x00, 0x7F, 0x81, 0x7F, 0xFF, 0x00, 0xFF, 0xFF, 0x80, 0x01]
    if MD_E8M0_CHARACTERISED:
        low = 0x01 if MD_E8M0_LOW_ROUNDS_UP else 0x00
        assert m == [0xFF, 0xFF, 0x81, 0x7F, 0xFF, 0x00, 0xFF, 0xFF, 0x80, low], MD
    pos = np.abs(x[[2, 3, 4, 5, 6, 7, 8, 9]])
    assert E8M0.encode(pos, rounding="nearest-linear").tolist() == [
        0x81,
        0x7F,
        0xFE,
        0x00,
        0xFE,
        0xFF,
        0x80,
        0x00,
    ]
    assert E8M0.encode(pos, rounding="nearest-even").tolist() == [
        0x80,
        0x7E,
        0xFE,
        0x00,
        0xFE,
        0xFF,
        0x80,
        0x00,
    ]


@pytest.mark.parametrize("src", SOURCES)
def test_torch_e8m0(torch: ModuleType, src: str) -> None:
    """torch e8m0: ties up; 0 -> 0x00 (like ours); the sign is ignored (-x -> code of x)."""
    x = as_f64(src)
    lib = torch_cast(torch, torch_patterns(torch, src), "float8_e8m0fnu")
    _check_e8m0_library(lib, x, src, low_rounds_up=True)
    assert np.all(lib[x == 0] == 0x00)
    # Sign ignored: each negative pattern gets the code of its magnitude (bit 15 cleared).
    neg = np.nonzero(np.signbit(x))[0]
    assert np.array_equal(lib[neg], lib[neg & 0x7FFF])
    assert np.all(lib[x == -np.inf] == 0xFF)


# ------------------------------------------------------------------------------------------
# torch FP8
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("src", SOURCES)
def test_torch_e4m3fn_is_our_saturate_mode(torch: ModuleType, src: str) -> None:
    """torch 2.13 e4m3fn saturates finite overflow and Inf to +-448: our default mode,
    NaN included (sign kept: 0x7F / 0xFF)."""
    x = as_f64(src)
    lib = torch_cast(torch, torch_patterns(torch, src), "float8_e4m3fn")
    assert_equal_where(
        lib, ours("e4m3fn", "nearest-even", "saturate", src), np.ones(x.shape, bool), x
    )
    assert codes_of([np.inf, -np.inf], lib, x) == [0x7E, 0xFE]


@pytest.mark.parametrize("src", SOURCES)
def test_torch_e4m3fnuz_is_our_nonsaturating_mode(torch: ModuleType, src: str) -> None:
    """torch e4m3fnuz: non-saturating, NaN/Inf/overflow -> 0x80, -0 -> 0x00."""
    x = as_f64(src)
    lib = torch_cast(torch, torch_patterns(torch, src), "float8_e4m3fnuz")
    expected = ours("e4m3fnuz", "nearest-even", "nonsaturating", src)
    assert_equal_where(lib, expected, np.ones(x.shape, bool), x)


@pytest.mark.parametrize("src", SOURCES)
def test_torch_e5m2_nonsaturating_but_nan_0x7f(torch: ModuleType, src: str) -> None:
    """torch e5m2 equals our nonsaturating mode except NaN: torch 0x7F/0xFF, ours 0x7E/0xFE."""
    x = as_f64(src)
    nan = np.isnan(x)
    lib = torch_cast(torch, torch_patterns(torch, src), "float8_e5m2")
    expected = ours("e5m2", "nearest-even", "nonsaturating", src)
    assert_equal_where(lib, expected, ~nan, x)
    assert np.all(lib[nan & ~np.signbit(x)] == 0x7F)
    assert np.all(lib[nan & np.signbit(x)] == 0xFF)
    assert np.all(expected[nan & ~np.signbit(x)] == 0x7E)
    assert np.all(expected[nan & np.signbit(x)] == 0xFE)


# ------------------------------------------------------------------------------------------
# float64 inputs: torch (and ml_dtypes before 0.7.0) round through float32 (double
# rounding); we do not
# ------------------------------------------------------------------------------------------

# (ml_dtypes type, torch type or None, value, code after float32 double rounding, ours)
_DOUBLE_ROUNDING = [
    ("float8_e4m3fn", "float8_e4m3fn", float(np.nextafter(1.0625, 2.0)), 0x38, 0x39),
    ("float8_e5m2", "float8_e5m2", float(np.nextafter(1.125, 2.0)), 0x3C, 0x3D),
    ("float4_e2m1fn", None, float(np.nextafter(0.25, 1.0)), 0x0, 0x1),
    ("float6_e2m3fn", None, float(np.nextafter(1.0625, 2.0)), 0x08, 0x09),
    ("float8_e8m0fnu", "float8_e8m0fnu", float(np.nextafter(1.5, 0.0)), 0x80, 0x7F),
]
_OURS_FMT = {
    "float8_e4m3fn": ("e4m3fn", "nearest-even"),
    "float8_e5m2": ("e5m2", "nearest-even"),
    "float4_e2m1fn": ("e2m1", "nearest-even"),
    "float6_e2m3fn": ("e2m3", "nearest-even"),
    "float8_e8m0fnu": ("e8m0", "nearest-linear"),
}


@pytest.mark.parametrize(
    ("md_type", "torch_type", "value", "lib_code", "our_code"), _DOUBLE_ROUNDING
)
def test_float64_input_double_rounding(
    md_type: str, torch_type: str | None, value: float, lib_code: int, our_code: int
) -> None:
    """A float64 value 1 ulp off a midpoint: libraries tie (via float32), ours rounds once.
    ml_dtypes 0.7.0 rounds float64 once, as we do."""
    x = np.array([value], dtype=np.float64)
    assert float(np.float32(value)) != value  # the float32 intermediate loses the offset
    assert int(md_cast(x, md_type)[0]) == (lib_code if MD_FLOAT64_VIA_FLOAT32 else our_code), MD
    assert int(md_cast(x.astype(np.float32), md_type)[0]) == lib_code
    fmt, rounding = _OURS_FMT[md_type]
    assert int(get_format(fmt).encode(x, rounding=rounding)[0]) == our_code
    if torch_type is not None:
        torch = requires("torch")
        assert int(torch_cast(torch, torch.from_numpy(x), torch_type)[0]) == lib_code


# ------------------------------------------------------------------------------------------
# INT4 / UINT4: ml_dtypes truncates and wraps
# ------------------------------------------------------------------------------------------


def test_ml_dtypes_int4_truncates_and_wraps() -> None:
    """ml_dtypes int4/uint4 casts truncate toward zero and wrap (0.7.0: out of range gives 0
    and an "invalid value" warning); ours saturates."""
    x = np.array([9.0, 8.0, 7.5, 2.5, -2.5, 100.0, -9.0, -8.5, 15.5, 16.0, -1.0, -0.5], np.float32)
    with np.errstate(invalid="ignore"):
        int4 = x.astype(ml_dtypes.int4).astype(np.int64).tolist()
        uint4 = x.astype(ml_dtypes.uint4).astype(np.int64).tolist()
    if MD_INT4_WRAPS:
        assert int4 == [-7, -8, 7, 2, -2, 4, 7, -8, -1, 0, -1, 0], MD
        assert uint4 == [9, 8, 7, 2, 14, 4, 7, 8, 15, 0, 15, 0], MD
    else:
        assert int4 == [0, 0, 7, 2, -2, 0, 0, -8, 0, 0, -1, 0], MD
        assert uint4 == [9, 8, 7, 2, 0, 0, 0, 0, 15, 0, 0, 0], MD
        with pytest.warns(RuntimeWarning, match="invalid value"):
            np.array([9.0], np.float32).astype(ml_dtypes.int4)
    ours_int4 = get_format("int4").to_integers(get_format("int4").encode(x, rounding="toward-zero"))
    ours_uint4 = get_format("uint4").encode(x, rounding="toward-zero")
    assert ours_int4.tolist() == [7, 7, 7, 2, -2, 7, -8, -8, 7, 7, -1, 0]
    assert ours_uint4.tolist() == [9, 8, 7, 2, 0, 15, 0, 0, 15, 15, 0, 0]


@pytest.mark.parametrize("src", SOURCES)
def test_ml_dtypes_int4_in_range_is_our_toward_zero(src: str) -> None:
    """Inside the representable range, ml_dtypes' truncation equals our toward-zero mode."""
    x = as_f64(src)
    with np.errstate(invalid="ignore"):
        x32 = patterns(src).astype(np.float32)
    for fmt, type_name, lo, hi in (("int4", "int4", -9.0, 8.0), ("uint4", "uint4", -1.0, 16.0)):
        mask = (x > lo) & (x < hi)
        lib = x32[mask].astype(getattr(ml_dtypes, type_name)).astype(np.int64) & 0xF
        got = get_format(fmt).encode(x[mask], rounding="toward-zero").astype(np.int64)
        assert np.array_equal(lib, got), fmt


# ------------------------------------------------------------------------------------------
# Decoding
# ------------------------------------------------------------------------------------------

_MD_DECODE = {
    "e2m1": "float4_e2m1fn",
    "e2m3": "float6_e2m3fn",
    "e3m2": "float6_e3m2fn",
    "e4m3fn": "float8_e4m3fn",
    "e4m3fnuz": "float8_e4m3fnuz",
    "e5m2": "float8_e5m2",
    "e8m0": "float8_e8m0fnu",
}
_TORCH_DECODE = {
    "e4m3fn": "float8_e4m3fn",
    "e4m3fnuz": "float8_e4m3fnuz",
    "e5m2": "float8_e5m2",
    "e8m0": "float8_e8m0fnu",
}
# float32 bits of each library's decode of our NaN codes (ours: always 0x7FC00000).
_MD_NAN_BITS = {
    "e4m3fn": {0x7F: 0x7FC00000, 0xFF: 0xFFC00000},
    "e4m3fnuz": {0x80: 0xFFC00000},
    "e5m2": {
        c: 0x7FC00000 if c < 0x80 else 0xFFC00000 for c in (0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF)
    },
    "e8m0": {0xFF: 0x7FC00000},
}
_TORCH_NAN_BITS = {
    "e4m3fn": {0x7F: 0x7FF00000, 0xFF: 0xFFF00000},
    "e4m3fnuz": {0x80: 0x7F800001},
    "e5m2": {
        0x7D: 0x7FE00000,
        0x7E: 0x7FC00000,
        0x7F: 0x7FE00000,
        0xFD: 0xFFE00000,
        0xFE: 0xFFC00000,
        0xFF: 0xFFE00000,
    },
    "e8m0": {0xFF: 0x7F800001},
}
_OUT_DTYPES = ["float32", "float64", "float16", "bfloat16"]
_NP_OUT = {
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
}


def _bits(a: np.ndarray) -> np.ndarray:
    """Raw bits of a float array as unsigned integers."""
    a = np.ascontiguousarray(a)
    return a.view(_UINT_OF_SIZE[a.dtype.itemsize])


def _compare_decode(fmt: str, lib: np.ndarray, out: str, nan_bits: dict[int, int]) -> None:
    """Library decode == ours on non-NaN codes; NaN codes decode to NaN with ``nan_bits``."""
    f = get_format(fmt)
    n = 1 << f.bits
    mine = f.decode(np.arange(n, dtype=np.uint8), dtype=_NP_OUT[out])
    finite = np.array([c not in f.nan_codes for c in range(n)])
    assert np.array_equal(_bits(lib)[finite], _bits(mine)[finite]), out
    with np.errstate(invalid="ignore"):
        assert np.all(np.isnan(lib[~finite].astype(np.float64)))
    if out == "float32":
        assert {c: int(_bits(lib)[c]) for c in f.nan_codes} == nan_bits
        assert all(int(b) == 0x7FC00000 for b in _bits(mine)[~finite])


@pytest.mark.parametrize("out", _OUT_DTYPES)
@pytest.mark.parametrize("fmt", list(_MD_DECODE))
def test_ml_dtypes_decode(fmt: str, out: str) -> None:
    """ml_dtypes decodes every code to our bits; only NaN bits differ (theirs keep a sign)."""
    n = 1 << get_format(fmt).bits
    with np.errstate(over="ignore", under="ignore"):
        lib = (
            np.arange(n, dtype=np.uint8)
            .view(getattr(ml_dtypes, _MD_DECODE[fmt]))
            .astype(_NP_OUT[out])
        )
    _compare_decode(fmt, lib, out, _MD_NAN_BITS.get(fmt, {}))


@pytest.mark.parametrize("out", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("fmt", list(_TORCH_DECODE))
def test_torch_decode(torch: ModuleType, fmt: str, out: str) -> None:
    """torch decodes every code to our bits; NaN bits are not canonical (e.g. 0x7FF00000)."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    t = codes.view(getattr(torch, _TORCH_DECODE[fmt])).to(getattr(torch, out))
    int_view = {"float32": torch.int32, "float64": torch.int64}.get(out, torch.int16)
    raw = t.view(int_view).numpy()
    lib = raw.view(_NP_OUT[out])
    _compare_decode(fmt, lib, out, _TORCH_NAN_BITS[fmt])


# ------------------------------------------------------------------------------------------
# torch tensors as encode input
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("src", SOURCES)
def test_encode_accepts_torch_tensors(torch: ModuleType, src: str) -> None:
    """encode(torch tensor) equals encode(numpy array) of the same values."""
    t = torch_patterns(torch, src)
    for fmt in ("e4m3fn", "e5m2", "e2m1", "int4"):
        f = get_format(fmt)
        kw: dict[str, Any] = {} if f.nan_codes else {"nan_code": 0}
        want = f.encode(patterns(src), **kw)
        assert np.array_equal(f.encode(t, **kw), want), fmt
        assert np.array_equal(f.encode(t.float(), **kw), want), fmt
