"""The format definitions, their mode table, input handling and error contract."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import mxformats
from mxformats import (
    E2M1,
    E4M3FN,
    E4M3FNUZ,
    E5M2,
    E8M0,
    FORMATS,
    INT4,
    OVERFLOWS,
    ROUNDINGS,
    UINT4,
    get_format,
)
from mxformats.codec import _SQRT2_ABOVE

ALL = list(FORMATS.values())
IDS = [f.name for f in ALL]


def test_names_and_lookup() -> None:
    assert list(FORMATS) == [
        "e2m1",
        "e8m0",
        "e4m3fn",
        "e4m3fnuz",
        "e5m2",
        "e2m3",
        "e3m2",
        "int4",
        "uint4",
    ]
    for name, fmt in FORMATS.items():
        assert fmt.name == name
        assert get_format(name) is fmt
        assert get_format(fmt) is fmt
        assert getattr(mxformats, name.upper()) is fmt
    with pytest.raises(ValueError, match="unknown format 'fp4'"):
        get_format("fp4")


def test_formats_are_frozen() -> None:
    with pytest.raises(AttributeError):
        E2M1.bias = 2  # type: ignore[misc]


@pytest.mark.parametrize("fmt", ALL, ids=IDS)
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("overflow", OVERFLOWS)
def test_mode_table_is_enforced(fmt: mxformats.Format, rounding: str, overflow: str) -> None:
    """Every combination either encodes or raises ValueError, exactly as the table says."""
    x = np.array([1.0, 3.0])
    valid = rounding in fmt.roundings and overflow in fmt.overflows
    if valid:
        assert fmt.encode(x, rounding=rounding, overflow=overflow).dtype == np.uint8
    else:
        with pytest.raises(ValueError, match="does not take"):
            fmt.encode(x, rounding=rounding, overflow=overflow)


def test_mode_table_contents() -> None:
    """nonsaturating exists only where NaN or Inf can stand for an overflow; E8M0 has its own
    roundings. Checked against the code tables, not against the implementation's own list."""
    for fmt in ALL:
        can_overflow_to_special = fmt.kind == "float" and bool(fmt.nan_codes or fmt.inf_codes)
        assert ("nonsaturating" in fmt.overflows) == can_overflow_to_special, fmt.name
        assert fmt.default_overflow == "saturate"
        assert ("floor" in fmt.roundings) == (fmt.name == "e8m0")
        assert "nearest-even" in fmt.roundings
    assert E8M0.roundings == ("nearest-even", "nearest-linear", "nearest-log", "floor", "ceil")


def test_metadata_of_the_headline_formats() -> None:
    """Typed from the standards (sources.md §1.2-1.4 and §2.2), independent of the value tables."""
    expected = {
        # name: (max, min_normal, min_subnormal, nan codes, inf codes, signed zero, emax)
        "e2m1": (6.0, 1.0, 0.5, (), (), True, 2),
        "e2m3": (7.5, 1.0, 0.125, (), (), True, 2),
        "e3m2": (28.0, 0.25, 0.0625, (), (), True, 4),
        "e4m3fn": (448.0, 2.0**-6, 2.0**-9, (0x7F, 0xFF), (), True, 8),
        "e4m3fnuz": (240.0, 2.0**-7, 2.0**-10, (0x80,), (), False, 7),
        "e5m2": (
            57344.0,
            2.0**-14,
            2.0**-16,
            (0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF),
            (0x7C, 0xFC),
            True,
            15,
        ),
        "e8m0": (2.0**127, 2.0**-127, None, (0xFF,), (), False, None),
        "int4": (7.0, None, None, (), (), False, None),
        "uint4": (15.0, None, None, (), (), False, None),
    }
    for name, (mx, mn, ms, nans, infs, sz, emax) in expected.items():
        f = FORMATS[name]
        assert (f.max, f.min_normal, f.min_subnormal) == (mx, mn, ms), name
        assert (f.nan_codes, f.inf_codes, f.signed_zero, f.emax) == (nans, infs, sz, emax), name
    assert INT4.min == -8.0 and UINT4.min == 0.0 and E2M1.min == -6.0


def test_sqrt2_threshold_is_exact() -> None:
    """The nearest-log rule relies on float64(sqrt 2) being the smallest double above sqrt 2."""
    above = Fraction(_SQRT2_ABOVE)
    below = Fraction(float(np.nextafter(_SQRT2_ABOVE, 0)))
    assert below * below < 2 < above * above


# -- special inputs: the decisions of spec/README.md --------------------------------------


def _hex(codes: np.ndarray) -> list[str]:
    return [f"{int(c):#04x}" for c in np.ravel(codes)]


def test_nan_into_formats_without_nan_raises_unless_a_code_is_named() -> None:
    for fmt in (E2M1, INT4, UINT4, FORMATS["e2m3"], FORMATS["e3m2"]):
        with pytest.raises(ValueError, match=rf"{fmt.name} has no NaN.*index \(1,\)"):
            fmt.encode([1.0, np.nan])
        assert fmt.encode([np.nan, -np.nan, 1.0], nan_code=0x5).tolist()[:2] == [5, 5]
        with pytest.raises(ValueError, match="not a"):
            fmt.encode([1.0], nan_code=1 << fmt.bits)
    for fmt in (E4M3FN, E5M2, E4M3FNUZ, E8M0):
        with pytest.raises(ValueError, match="has a NaN encoding"):
            fmt.encode([1.0], nan_code=0)


def test_nan_codes_keep_the_sign_where_nan_is_signed() -> None:
    x = np.array([np.nan, -np.nan])
    assert _hex(E4M3FN.encode(x)) == ["0x7f", "0xff"]
    assert _hex(E5M2.encode(x)) == ["0x7e", "0xfe"]
    assert _hex(E4M3FNUZ.encode(x)) == ["0x80", "0x80"]
    assert _hex(E8M0.encode(x)) == ["0xff", "0xff"]


def test_e8m0_zero_inf_negative() -> None:
    for rounding in E8M0.roundings:
        assert _hex(E8M0.encode([0.0, -0.0, np.inf, 2.0**-140, 2.0**200], rounding=rounding)) == [
            "0x00",
            "0x00",
            "0xfe",
            "0x00",
            "0xfe",
        ]
        for negative in (-1.0, -np.inf, -(2.0**-149)):
            with pytest.raises(ValueError, match="e8m0 has no sign"):
                E8M0.encode([1.0, negative], rounding=rounding)


def test_fnuz_has_no_negative_zero() -> None:
    assert _hex(E4M3FNUZ.encode([-0.0, -(2.0**-12), -(2.0**-11)])) == ["0x00", "0x00", "0x00"]
    assert _hex(E4M3FNUZ.encode([-(2.0**-11) * 1.5])) == ["0x81"]  # rounds to -2^-10


def test_negative_zero_is_kept_where_it_exists() -> None:
    assert _hex(E2M1.encode([-0.0, -0.2])) == ["0x08", "0x08"]
    assert _hex(E4M3FN.encode([-0.0])) == ["0x80"]
    assert _hex(INT4.encode([-0.0, -0.4])) == ["0x00", "0x00"]


def test_float32_subnormals_are_not_flushed() -> None:
    """Only E8M0 reaches down to float32 subnormals (2^-127 is one); a flush would give 0x00."""
    sub = np.array([1.5 * 2.0**-127, 1.25 * 2.0**-127, 2.0**-149], dtype=np.float32)
    assert _hex(E8M0.encode(sub, rounding="nearest-linear")) == ["0x01", "0x00", "0x00"]
    assert _hex(E8M0.encode(sub, rounding="ceil")) == ["0x01", "0x01", "0x00"]
    assert _hex(E8M0.encode(sub, rounding="floor")) == ["0x00", "0x00", "0x00"]
    assert _hex(E8M0.encode(sub, rounding="nearest-log")) == ["0x01", "0x00", "0x00"]


# -- inputs ------------------------------------------------------------------------------------


def test_one_rounding_from_float64() -> None:
    """0.25 + 2^-54 is above the E2M1 tie at 0.25; through float32 it becomes the tie."""
    x = 0.25 + 2.0**-54
    assert np.float32(x) == np.float32(0.25)
    assert int(E2M1.encode(np.float64(x))) == 0x1
    assert int(E2M1.encode(np.float32(x))) == 0x0


def test_every_input_dtype_gives_the_same_codes() -> None:
    values = np.array([0.25, 0.75, -5.0, 448.0, 1e-3, -0.0], dtype=np.float16)
    expected = E4M3FN.encode(values.astype(np.float64))
    for dtype in (np.float16, np.float32, np.float64, ml_dtypes.bfloat16):
        exact = values.astype(np.float64).astype(dtype)
        assert np.array_equal(E4M3FN.encode(exact), E4M3FN.encode(exact.astype(np.float64)))
    assert np.array_equal(E4M3FN.encode(values), expected)
    assert np.array_equal(E4M3FN.encode(values.tolist()), expected)


def test_shapes_and_scalars() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)[:, ::2, 1:]  # a non-contiguous view
    codes = E4M3FN.encode(x)
    assert codes.shape == x.shape and codes.dtype == np.uint8
    assert np.array_equal(codes, E4M3FN.encode(np.ascontiguousarray(x)))
    assert np.array_equal(E4M3FN.decode(codes.T), E4M3FN.decode(codes).T)
    assert E2M1.encode(1.0).shape == () and E2M1.decode(np.uint8(2)).shape == ()
    assert E2M1.encode(np.zeros((0, 5))).shape == (0, 5)


def test_bfloat16_bits_helper() -> None:
    bits = np.arange(1 << 16, dtype=np.uint16)
    via_helper = mxformats.bfloat16_bits_to_float32(bits)
    via_ml_dtypes = bits.view(ml_dtypes.bfloat16).astype(np.float32)
    assert np.array_equal(via_helper.view(np.uint32), via_ml_dtypes.view(np.uint32))
    with pytest.raises(TypeError, match="uint16"):
        mxformats.bfloat16_bits_to_float32(bits.astype(np.int32))


def test_refused_inputs() -> None:
    with pytest.raises(TypeError, match="got dtype int64"):
        E2M1.encode(np.array([1, 2]))
    with pytest.raises(TypeError, match="integers"):
        E2M1.decode(np.array([1.0]))
    with pytest.raises(ValueError, match="4-bit"):
        E2M1.decode(np.array([16]))
    with pytest.raises(ValueError, match="got -1"):
        INT4.decode(np.array([-1]))
    with pytest.raises(TypeError, match="decode produces"):
        E2M1.decode(np.array([1]), np.int32)


def test_torch_tensors() -> None:
    from conftest import requires

    torch = requires("torch")
    base = torch.tensor([[0.25, -0.75, 5.0, 470.0], [1e-3, -0.0, 3.5, -6.5]])
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        t = base.to(dtype).t()  # non-contiguous
        reference = t.to(torch.float64).numpy()
        for fmt in (E2M1, E4M3FN, E5M2):
            assert np.array_equal(fmt.encode(t), fmt.encode(reference)), (fmt.name, dtype)


def test_import_does_not_pull_torch() -> None:
    import subprocess
    import sys

    code = "import sys, mxformats; print('torch' in sys.modules or 'matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- integers ----------------------------------------------------------------------------------


def test_int4_codes_and_integers() -> None:
    q = np.arange(-8, 8, dtype=np.int8)
    codes = INT4.from_integers(q)
    assert codes.tolist() == [8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7]
    assert np.array_equal(INT4.to_integers(codes), q)
    assert np.array_equal(UINT4.to_integers(np.arange(16)), np.arange(16))
    with pytest.raises(ValueError, match="outside"):
        INT4.from_integers(np.array([8]))
    with pytest.raises(TypeError, match="not an integer format"):
        E2M1.to_integers(np.array([1]))


def test_int4_rounding_and_saturation() -> None:
    x = np.array([-8.5, -7.5, 7.5, 2.5, -2.5, 100.0, -np.inf, np.inf])
    assert INT4.to_integers(INT4.encode(x)).tolist() == [-8, -8, 7, 2, -2, 7, -8, 7]
    away = INT4.encode(x, rounding="nearest-away")
    assert INT4.to_integers(away).tolist() == [-8, -8, 7, 3, -3, 7, -8, 7]
    zero = INT4.encode(x, rounding="toward-zero")
    assert INT4.to_integers(zero).tolist() == [-8, -7, 7, 2, -2, 7, -8, 7]
    assert UINT4.encode([-3.0, 15.6, 2.5, -np.inf]).tolist() == [0, 15, 2, 0]


# -- MI300: E4M3FN -> FNUZ ---------------------------------------------------------------------


def test_e4m3fn_to_fnuz_over_every_code() -> None:
    codes = np.arange(256, dtype=np.uint8)
    scale = np.float32(0.5)
    fn_values = E4M3FN.decode(codes, np.float64) * float(scale)
    trick, trick_scale = mxformats.e4m3fn_to_fnuz(codes, scale)
    exact, exact_scale = mxformats.e4m3fn_to_fnuz_exact(codes, scale)
    assert trick_scale == exact_scale == np.float32(1.0)
    trick_values = E4M3FNUZ.decode(trick, np.float64) * float(trick_scale)
    exact_values = E4M3FNUZ.decode(exact, np.float64) * float(exact_scale)
    finite = ~np.isnan(fn_values)
    assert np.array_equal(trick_values[finite], fn_values[finite])
    assert np.array_equal(exact_values[finite], fn_values[finite])
    # The caveat: fn NaN becomes ±240 (±480 after the doubled scale) in the bit trick.
    assert trick_values[[0x7F, 0xFF]].tolist() == [240.0, -240.0]
    assert _hex(exact[[0x7F, 0xFF]]) == ["0x80", "0x80"]
    assert int(trick[0x80]) == int(exact[0x80]) == 0
    same = np.ones(256, dtype=bool)
    same[[0x7F, 0xFF]] = False
    assert np.array_equal(trick[same], exact[same])
    with pytest.raises(TypeError, match="float32"):
        mxformats.e4m3fn_to_fnuz(codes, np.float64(1.0))


def test_torch_float8_and_bfloat16_tensors_keep_their_values() -> None:
    """tensor_to_numpy, shared by the codec, quantize_mx, quantize_int4 and the harness."""
    from conftest import requires

    from mxformats.codec import tensor_to_numpy

    torch = requires("torch")
    codes = torch.arange(256, dtype=torch.uint8)
    for name in ("e4m3fn", "e5m2", "e4m3fnuz"):
        fmt = mxformats.get_format(name)
        t = codes.view(getattr(torch, f"float8_{name}"))
        finite = ~np.isnan(fmt.values)
        assert np.array_equal(fmt.encode(t[torch.from_numpy(finite)]), np.flatnonzero(finite))
    bf16 = torch.tensor([1.0, -0.0, 3.0e38], dtype=torch.bfloat16)
    out = tensor_to_numpy(bf16)
    assert out is not None and out.dtype == ml_dtypes.bfloat16
    assert np.array_equal(out.view(np.int16), bf16.view(torch.int16).numpy())
    assert tensor_to_numpy(np.zeros(2)) is None
