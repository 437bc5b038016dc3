"""Exhaustive checks of mxformats against the independent oracle in ``oracle.py``.

* every code of every format decodes to the oracle's exact value, bit for bit, in float32,
  float64, float16 and bfloat16;
* all 65,536 bfloat16 and all 65,536 float16 bit patterns encode, in every valid
  (rounding, overflow) mode of every format, to exactly the oracle's codes.
"""

from __future__ import annotations

import ast
import functools
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from oracle import (
    FORMAT_NAMES,
    IEEE_LAYOUT,
    ORACLE_MODES,
    PARAMS,
    RAISES,
    Cls,
    classify_array,
    decide_array,
    floor_log2,
    fraction_to_ieee_bits,
    oracle_decode,
    positive_values,
)

import mxformats
from mxformats import get_format

# ------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------

_UINT_OF_SIZE = {2: np.uint16, 4: np.uint32, 8: np.uint64}
_DECODE_DTYPES: dict[str, object] = {
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
}
_ALL_ROUNDINGS = sorted({r for modes in ORACLE_MODES.values() for r, _ in modes} | {"bogus"})
_ALL_OVERFLOWS = ["saturate", "nonsaturating", "bogus"]


def raw_bits(a: np.ndarray) -> np.ndarray:
    """The raw bit patterns of a float array as an unsigned integer array."""
    a = np.ascontiguousarray(a)
    return a.view(_UINT_OF_SIZE[a.dtype.itemsize])


def assert_codes_equal(got: np.ndarray, expected: np.ndarray, x: np.ndarray, what: str) -> None:
    """Bit-exact comparison of uint8 codes, with a readable report of the first mismatches."""
    assert isinstance(got, np.ndarray), f"{what}: encode returned {type(got)}"
    assert got.dtype == np.uint8, f"{what}: dtype {got.dtype}"
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    exp8 = expected.astype(np.uint8)
    if not np.array_equal(got, exp8):
        bad = np.nonzero(got != exp8)[0]
        x64 = np.asarray(x).astype(np.float64)
        rows = [
            f"x={x64[i]!r} (bits {int(raw_bits(np.asarray(x)[i : i + 1])[0]):#x}) "
            f"expected {int(exp8[i]):#04x} got {int(got[i]):#04x}"
            for i in bad[:12]
        ]
        raise AssertionError(f"{what}: {bad.size} mismatches, e.g.\n  " + "\n  ".join(rows))


@functools.cache
def all_patterns(src: str) -> np.ndarray:
    """All 65,536 bit patterns of bfloat16 or float16, as that dtype."""
    bits = np.arange(65536, dtype=np.uint16)
    if src == "bfloat16":
        return bits.view(ml_dtypes.bfloat16)
    return bits.view(np.float16)


@functools.cache
def classified(fmt: str, src: str) -> tuple[np.ndarray, list[Cls]]:
    """Oracle classification of every pattern (computed once per worker and format)."""
    with np.errstate(invalid="ignore"):
        x64 = all_patterns(src).astype(np.float64)
    # The float64 conversion must keep the sign of every value, including NaNs.
    sign16 = (np.arange(65536, dtype=np.uint32) >> 15).astype(bool)
    assert np.array_equal(np.signbit(x64), sign16)
    return classify_array(fmt, x64)


def encode_params() -> list[object]:
    """(format, rounding, overflow, src) for every valid mode and both 16-bit sources."""
    out = []
    for fmt in FORMAT_NAMES:
        for rounding, overflow in ORACLE_MODES[fmt]:
            for src in ("bfloat16", "float16"):
                out.append(
                    pytest.param(
                        fmt, rounding, overflow, src, id=f"{fmt}-{rounding}-{overflow}-{src}"
                    )
                )
    return out


# ------------------------------------------------------------------------------------------
# The oracle's own parameters
# ------------------------------------------------------------------------------------------

_ML_DTYPES = {
    "e2m1": "float4_e2m1fn",
    "e4m3fn": "float8_e4m3fn",
    "e4m3fnuz": "float8_e4m3fnuz",
    "e5m2": "float8_e5m2",
    "e2m3": "float6_e2m3fn",
    "e3m2": "float6_e3m2fn",
    "e8m0": "float8_e8m0fnu",
}


@pytest.mark.parametrize("fmt", list(_ML_DTYPES))
def test_oracle_params_match_ml_dtypes_finfo(fmt: str) -> None:
    """The hand-typed table agrees with ml_dtypes.finfo (max, min normal/subnormal, bits)."""
    p = PARAMS[fmt]
    fi = ml_dtypes.finfo(getattr(ml_dtypes, _ML_DTYPES[fmt]))
    assert fi.bits == p.bits
    assert Fraction(float(fi.max)) == p.max
    assert Fraction(float(fi.smallest_normal)) == p.min_normal
    assert Fraction(float(fi.smallest_subnormal)) == p.min_subnormal
    # The enumerated value list ends at max and starts at the smallest nonzero value.
    vals = [v for v, _ in positive_values(fmt) if v > 0]
    assert vals[-1] == p.max
    assert vals[0] == p.min_subnormal


@pytest.mark.parametrize("fmt", list(_ML_DTYPES))
def test_oracle_decode_matches_ml_dtypes(fmt: str) -> None:
    """Every non-NaN oracle value equals ml_dtypes' decode of the same code (sanity check)."""
    t = getattr(ml_dtypes, _ML_DTYPES[fmt])
    n = 1 << PARAMS[fmt].bits
    lib = np.arange(n, dtype=np.uint8).view(t).astype(np.float64)
    for code in range(n):
        v = oracle_decode(fmt, code)
        if v == "nan":
            assert np.isnan(lib[code])
            continue
        assert fraction_to_ieee_bits(v, 11, 52) == int(raw_bits(lib[code : code + 1])[0]), code


def test_oracle_table_matches_implementation_attributes() -> None:
    """Implementation metadata equals the oracle's hand-typed table."""
    assert list(mxformats.FORMATS) == list(FORMAT_NAMES)
    for name in FORMAT_NAMES:
        p, f = PARAMS[name], get_format(name)
        assert f is mxformats.FORMATS[name]
        assert f.name == name
        assert (f.bits, f.ebits, f.mbits, f.bias) == (p.bits, p.ebits, p.mbits, p.bias), name
        assert Fraction(f.max) == p.max, name
        assert tuple(f.nan_codes) == p.nan_codes, name
        assert tuple(f.inf_codes) == p.inf_codes, name
        assert f.signed_zero == (p.neg_zero_code is not None), name
        assert set(f.roundings) == {r for r, _ in ORACLE_MODES[name]}, name
        assert set(f.overflows) == {o for _, o in ORACLE_MODES[name]}, name
        assert f.default_overflow == "saturate", name
        if p.kind == "float":
            assert Fraction(f.min_normal) == p.min_normal, name
            assert Fraction(f.min_subnormal) == p.min_subnormal, name
            assert f.emax == floor_log2(p.max), name  # OCP emax_elem: exponent of max
        elif p.kind == "e8m0":
            assert Fraction(f.min_normal) == p.min_normal, name
        else:
            assert f.min_normal is None and f.min_subnormal is None and f.emax is None, name
    with pytest.raises(ValueError):
        get_format("e4m3")


# ------------------------------------------------------------------------------------------
# Decode: every code, every output dtype
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype_name", list(_DECODE_DTYPES))
@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_decode_every_code(fmt: str, dtype_name: str) -> None:
    """decode(code) has exactly the bits of the oracle's value rounded (RNE) into the dtype."""
    f = get_format(fmt)
    n = 1 << PARAMS[fmt].bits
    codes = np.arange(n, dtype=np.uint8)
    out = f.decode(codes, dtype=_DECODE_DTYPES[dtype_name])
    assert out.dtype == np.dtype(_DECODE_DTYPES[dtype_name])
    assert out.shape == (n,)
    ebits, mbits = IEEE_LAYOUT[dtype_name]
    expected = np.array(
        [fraction_to_ieee_bits(oracle_decode(fmt, c), ebits, mbits) for c in range(n)],
        dtype=_UINT_OF_SIZE[out.dtype.itemsize],
    )
    got = raw_bits(out)
    bad = np.nonzero(got != expected)[0]
    assert bad.size == 0, [(hex(c), hex(int(got[c])), hex(int(expected[c]))) for c in bad[:12]]


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_decode_default_dtype_and_special_bits(fmt: str) -> None:
    """Default output is float32; NaN is 0x7FC00000, -0 is 0x80000000, E8M0 0x00 is 2^-127."""
    f = get_format(fmt)
    p = PARAMS[fmt]
    n = 1 << p.bits
    for int_dtype in (np.uint8, np.int64, np.int32):
        out = f.decode(np.arange(n, dtype=int_dtype))
        assert out.dtype == np.float32
        bits = raw_bits(out)
        for c in p.nan_codes:
            assert int(bits[c]) == 0x7FC00000, hex(c)
        if p.neg_zero_code is not None:
            assert int(bits[p.neg_zero_code]) == 0x80000000
        if fmt == "e8m0":
            assert int(bits[0]) == 0x00400000
            assert int(bits[0xFE]) == 0x7F000000
    # Canonical NaN in every output dtype.
    canonical = {"float64": 0x7FF8000000000000, "float16": 0x7E00, "bfloat16": 0x7FC0}
    for name, nan_bits in canonical.items():
        out = f.decode(np.array(p.nan_codes, dtype=np.uint8), dtype=_DECODE_DTYPES[name])
        assert all(int(b) == nan_bits for b in raw_bits(out)), name


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_decode_rejects_out_of_range_codes(fmt: str) -> None:
    """Codes >= 2**bits and negative codes raise ValueError."""
    f = get_format(fmt)
    n = 1 << PARAMS[fmt].bits
    with pytest.raises(ValueError):
        f.decode(np.array([0, n], dtype=np.int64))
    with pytest.raises(ValueError):
        f.decode(np.array([0, -1], dtype=np.int64))
    if n < 256:
        with pytest.raises(ValueError):
            f.decode(np.array([n], dtype=np.uint8))


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_decode_rejects_non_integer_codes(fmt: str) -> None:
    """Codes must be an integer array: a float array is the wrong type (TypeError)."""
    with pytest.raises(TypeError):
        get_format(fmt).decode(np.array([0.0, 1.0]))


# ------------------------------------------------------------------------------------------
# Encode: every bfloat16 / float16 pattern, every mode
# ------------------------------------------------------------------------------------------


def _variants(src: str) -> list[tuple[str, np.ndarray]]:
    """The same 65,536 values in several input representations."""
    x = all_patterns(src)
    if src == "bfloat16":
        via = mxformats.bfloat16_bits_to_float32(x.view(np.uint16))
        assert via.dtype == np.float32
        with np.errstate(invalid="ignore"):
            ref = x.astype(np.float32)
        # Same values, same NaN signs (payloads may differ).
        assert np.array_equal(np.signbit(via), np.signbit(ref))
        assert np.array_equal(np.isnan(via), np.isnan(ref))
        finite = ~np.isnan(ref)
        assert np.array_equal(raw_bits(via)[finite], raw_bits(ref)[finite])
        return [("bfloat16", x), ("bfloat16_bits_to_float32", via)]
    with np.errstate(invalid="ignore"):
        return [
            ("float16", x),
            ("float32", x.astype(np.float32)),
            ("float64", x.astype(np.float64)),
        ]


@pytest.mark.parametrize(("fmt", "rounding", "overflow", "src"), encode_params())
def test_encode_all_16bit_patterns(fmt: str, rounding: str, overflow: str, src: str) -> None:
    """encode() of every bf16/fp16 pattern equals the oracle bit for bit."""
    f = get_format(fmt)
    p = PARAMS[fmt]
    ids, classes = classified(fmt, src)
    expected = decide_array(fmt, ids, classes, rounding, overflow)
    raises = expected == RAISES
    nan = np.array([c.kind == "nan" for c in classes])[ids]
    kw = {"rounding": rounding, "overflow": overflow}
    for name, x in _variants(src):
        what = f"{fmt} {rounding}/{overflow} input {name}"
        if p.kind == "e8m0":
            ok = ~raises
            assert_codes_equal(f.encode(x[ok], **kw), expected[ok], x[ok], what)
            with pytest.raises(ValueError):
                f.encode(x[:4], nan_code=0, **kw)  # E8M0 has a NaN: nan_code is refused
            neg = np.nonzero(raises)[0]
            assert neg.size > 0
            with pytest.raises(ValueError):
                f.encode(x[neg], **kw)
            for i in [*neg[:: max(1, neg.size // 64)].tolist(), int(neg[-1])]:
                with pytest.raises(ValueError):
                    f.encode(x[i : i + 1], **kw)
                mixed = x[[0, 0x3F80 if src == "bfloat16" else 0x3C00, i]]
                with pytest.raises(ValueError):
                    f.encode(mixed, **kw)
        elif p.nan_codes:
            assert not raises.any()
            assert_codes_equal(f.encode(x, **kw), expected, x, what)
            with pytest.raises(ValueError):
                f.encode(x[:4], nan_code=0, **kw)
        else:
            assert np.array_equal(raises, nan)
            with pytest.raises(ValueError):
                f.encode(x[nan], **kw)
            with pytest.raises(ValueError):
                f.encode(x[[0x3C00 if src == "float16" else 0x3F80, int(np.argmax(nan))]], **kw)
            assert_codes_equal(f.encode(x[~nan], **kw), expected[~nan], x[~nan], what)
            nan_code = (1 << p.bits) - 1
            with_nan = np.where(nan, nan_code, expected)
            got = f.encode(x, nan_code=nan_code, **kw)
            assert_codes_equal(got, with_nan, x, what + f" nan_code={nan_code}")


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_encode_mode_validation(fmt: str) -> None:
    """Exactly the oracle's (rounding, overflow) pairs are accepted; overflow=None = saturate."""
    f = get_format(fmt)
    x = np.array([0.0, 0.3, 1.0, 2.5], dtype=np.float32)
    for rounding in _ALL_ROUNDINGS:
        for overflow in _ALL_OVERFLOWS:
            if (rounding, overflow) in ORACLE_MODES[fmt]:
                f.encode(x, rounding=rounding, overflow=overflow)
            else:
                with pytest.raises(ValueError):
                    f.encode(x, rounding=rounding, overflow=overflow)
        if (rounding, "saturate") in ORACLE_MODES[fmt]:
            assert np.array_equal(
                f.encode(x, rounding=rounding),
                f.encode(x, rounding=rounding, overflow="saturate"),
            )
            assert np.array_equal(
                f.encode(x, rounding=rounding, overflow=None),
                f.encode(x, rounding=rounding, overflow="saturate"),
            )
    assert np.array_equal(f.encode(x), f.encode(x, rounding="nearest-even"))


def test_oracle_is_independent_of_mxformats() -> None:
    """The oracle module must not import the implementation."""
    import oracle

    with open(oracle.__file__, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert all(not a.name.startswith("mxformats") for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert not (node.module or "").startswith("mxformats")
    for value in vars(oracle).values():
        assert not getattr(value, "__module__", "").startswith("mxformats"), value
        assert not getattr(value, "__name__", "").startswith("mxformats"), value
