"""The reference codec: encode and decode for every :class:`~mxformats.formats.Format`.

Clarity first. Every input is widened exactly to float64 (float16, bfloat16 and float32 values
are all float64 values), and then rounded **once** to the target: a magnitude ``|x|`` is
rescaled by a power of two (exact) so that one unit of the result is one integer, and the
integer part is kept or incremented according to the rounding mode. The rules are stated in
``spec/README.md``; the names here follow its sections.

:func:`encode` and :func:`decode` take and return the caller's containers (torch in, torch
out; native float8/float4/e8m0 codes as they are): :func:`mxformats.containers.containers`.
:func:`tensor_to_numpy` lives in :mod:`mxformats.containers` and is re-exported here.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

import ml_dtypes
import numpy as np

from mxformats.containers import containers, tensor_to_numpy

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike, NDArray

    from mxformats.formats import Format

__all__ = ["as_float64", "bfloat16_bits_to_float32", "decode", "encode", "tensor_to_numpy"]

# sqrt(2) is irrational, so no double equals it, and float64(sqrt(2)) lies just above it: for a
# double s, s > sqrt(2) exactly when s >= float64(sqrt(2)) (checked in tests with Fractions).
_SQRT2_ABOVE = float(np.sqrt(2.0))


# -- inputs ----------------------------------------------------------------------------------


@containers()
def bfloat16_bits_to_float32(bits: ArrayLike) -> NDArray[np.float32]:
    """Raw bfloat16 bit patterns (uint16) to float32 values, exactly (``bits << 16``).

    For callers holding bfloat16 data as uint16 (e.g. read from a safetensors ``BF16`` buffer)
    without ml_dtypes. A torch ``uint16`` tensor gives a torch float32 tensor.
    """
    b = np.asarray(bits)
    if b.dtype != np.uint16:
        raise TypeError(f"bfloat16 bits must be uint16, got {b.dtype}")
    return (b.astype(np.uint32) << 16).view(np.float32)


def as_float64(x: object) -> NDArray[np.float64]:
    """``x`` as a float64 array holding exactly the same values.

    Accepts numpy floating arrays of at most 64 bits (float16, float32, float64 and the
    ml_dtypes types such as bfloat16), torch tensors, Python floats and sequences of them.
    Integer arrays are refused (int64 does not widen exactly; use ``from_integers`` for INT4).
    """
    arr = tensor_to_numpy(x)
    if arr is None:
        arr = np.asarray(x)
    is_float = arr.dtype.kind == "f" or _is_ml_dtypes_float(arr.dtype)
    if not is_float or arr.dtype.itemsize > 8:
        raise TypeError(
            f"encode takes float16, bfloat16, float32 or float64 values, got dtype {arr.dtype}"
        )
    with np.errstate(invalid="ignore"):  # ml_dtypes warns when it widens a NaN
        return arr.astype(np.float64)


def _is_ml_dtypes_float(dtype: np.dtype[np.generic]) -> bool:
    # ml_dtypes' floating types (bfloat16, float8_*, ...) are numpy "V" kind extension dtypes.
    return dtype.kind == "V" and dtype.names is None and dtype.name.startswith(
        ("bfloat16", "float8", "float6", "float4")
    )


# -- rounding ---------------------------------------------------------------------------------


def _round_to_integer(q: NDArray[np.float64], rounding: str) -> NDArray[np.float64]:
    """Round non-negative ``q`` to an integer. ``q - floor(q)`` is exact, so is the decision.

    Spec: "Rounding". (``floor(q + 0.5)`` would be wrong: the sum itself can round up.)
    """
    whole = np.floor(q)
    fraction = q - whole
    if rounding == "nearest-even":
        up = (fraction > 0.5) | ((fraction == 0.5) & (np.fmod(whole, 2) == 1))
    elif rounding == "nearest-away":
        up = fraction >= 0.5
    else:  # toward-zero
        up = np.zeros(q.shape, dtype=bool)
    result: NDArray[np.float64] = whole + up
    return result


def _check_modes(fmt: Format, rounding: str, overflow: str | None) -> str:
    if rounding not in fmt.roundings:
        raise ValueError(
            f"{fmt.name} does not take rounding={rounding!r}; valid: {', '.join(fmt.roundings)}"
        )
    overflow = fmt.default_overflow if overflow is None else overflow
    if overflow not in fmt.overflows:
        raise ValueError(
            f"{fmt.name} does not take overflow={overflow!r}; valid: {', '.join(fmt.overflows)}"
        )
    return overflow


# -- encode -----------------------------------------------------------------------------------


@containers()
def encode(
    fmt: Format,
    x: object,
    *,
    rounding: str = "nearest-even",
    overflow: str | None = None,
    nan_code: int | None = None,
) -> NDArray[np.uint8]:
    """Encode ``x`` to ``fmt`` codes. See :meth:`mxformats.formats.Format.encode`."""
    overflow = _check_modes(fmt, rounding, overflow)
    has_nan = bool(fmt.nan_codes)
    if nan_code is not None:
        if has_nan:
            raise ValueError(f"{fmt.name} has a NaN encoding; nan_code is only for formats without")
        if not 0 <= nan_code < (1 << fmt.bits):
            raise ValueError(f"nan_code {nan_code:#x} is not a {fmt.bits}-bit code")
    exact = as_float64(x)
    nan = np.isnan(exact)
    if not has_nan and nan_code is None and np.any(nan):
        where = tuple(int(i) for i in np.unravel_index(int(np.argmax(nan)), nan.shape))
        raise ValueError(
            f"{fmt.name} has no NaN; the input holds NaN at index {where}: "
            "clean the input or pass nan_code= to choose its code"
        )
    v = np.where(nan, 0.0, exact)  # NaN lanes are overwritten below; keep the arithmetic quiet
    if fmt.kind == "exponent":
        codes = _encode_e8m0(fmt, v, rounding)
    elif fmt.kind == "int":
        codes = _encode_int(fmt, v, rounding)
    else:
        codes = _encode_float(fmt, v, rounding, overflow)
    if np.any(nan):
        codes = np.where(nan, _nan_code(fmt, exact, nan_code), codes)
    return codes.astype(np.uint8)


def _nan_code(fmt: Format, v: NDArray[np.float64], nan_code: int | None) -> NDArray[np.int64]:
    """The code of each NaN input: the format's quiet NaN, with the NaN's sign where NaN is signed.

    Spec: "Special values".
    """
    if nan_code is not None:
        return np.full(v.shape, nan_code, dtype=np.int64)
    sign_bit = 1 << (fmt.bits - 1)
    if fmt.specials == "fn":  # S.1111.111
        positive_nan = sign_bit - 1
    elif fmt.specials == "ieee":  # S.11111.10: the quiet NaN, mantissa MSB set
        positive_nan = ((1 << fmt.ebits) - 1) << fmt.mbits | 1 << (fmt.mbits - 1)
    else:  # fnuz 0x80 and e8m0 0xFF have one NaN, unsigned
        return np.full(v.shape, fmt.nan_codes[0], dtype=np.int64)
    return np.where(np.signbit(v), positive_nan | sign_bit, positive_nan)


def _encode_float(
    fmt: Format, v: NDArray[np.float64], rounding: str, overflow: str
) -> NDArray[np.int64]:
    """Sign-magnitude floats (E2M1, E2M3, E3M2, E4M3FN, E4M3FNUZ, E5M2); NaN lanes are ignored.

    Spec: "Encoding floats".
    """
    negative = np.signbit(v)
    magnitude = np.abs(v)
    infinite = np.isinf(magnitude)
    magnitude = np.where(infinite, 0.0, magnitude)

    # The exponent of each value, no lower than the smallest normal exponent: below it the
    # quantum stays 2**(1 - bias - mbits) and the result is subnormal.
    _, frexp_exponent = np.frexp(magnitude)  # magnitude = f * 2**e, 0.5 <= f < 1
    exponent = np.maximum(frexp_exponent - 1, 1 - fmt.bias)
    quantum_exponent = exponent - fmt.mbits
    significand = _round_to_integer(np.ldexp(magnitude, -quantum_exponent), rounding)

    # A significand of 2**(mbits+1) has carried into the next binade.
    carried = significand == 1 << (fmt.mbits + 1)
    exponent = exponent + carried
    significand = np.where(carried, 1 << fmt.mbits, significand)
    with np.errstate(over="ignore"):  # beyond float64's range is beyond max all the same
        rounded = np.ldexp(significand, exponent - fmt.mbits)  # exact, unbounded exponent

    is_normal = significand >= 1 << fmt.mbits
    exponent_field = np.where(is_normal, exponent + fmt.bias, 0).astype(np.int64)
    mantissa_field = (significand - np.where(is_normal, 1 << fmt.mbits, 0)).astype(np.int64)
    magnitude_code = exponent_field << fmt.mbits | mantissa_field

    # Overflow (spec: "Overflow"): the rounded magnitude exceeds max. toward-zero never
    # overflows a finite input (IEEE 754 §7.4: the result is the largest finite value).
    overflowed = rounded > fmt.max
    clamped = overflowed & ((overflow == "saturate") | (rounding == "toward-zero"))
    beyond = (overflowed & ~clamped) | infinite  # becomes Inf, NaN, or max for a saturated Inf
    inf_magnitude = ((1 << fmt.ebits) - 1) << fmt.mbits
    magnitude_code = np.where(clamped, fmt.max_code, magnitude_code)
    if fmt.specials == "ieee":
        magnitude_code = np.where(beyond, inf_magnitude, magnitude_code)
    elif overflow == "saturate":
        magnitude_code = np.where(beyond, fmt.max_code, magnitude_code)
    to_nan = beyond & (fmt.specials != "ieee") & (overflow == "nonsaturating")

    sign = np.where(negative, 1 << (fmt.bits - 1), 0)
    if not fmt.signed_zero:  # FNUZ: 0x80 is the NaN, so zero is always +0
        sign = np.where(magnitude_code == 0, 0, sign)
    codes = magnitude_code | sign
    return np.where(to_nan, _nan_code(fmt, v, None), codes) if np.any(to_nan) else codes


def _encode_int(fmt: Format, v: NDArray[np.float64], rounding: str) -> NDArray[np.int64]:
    """INT4 / UINT4: round to an integer, saturate to [min, max]. Spec: "Encoding integers"."""
    clipped = np.clip(v, fmt.min - 1, fmt.max + 1)  # keep ±Inf and huge values finite
    magnitude = _round_to_integer(np.abs(clipped), rounding)
    integer = np.clip(np.where(clipped < 0, -magnitude, magnitude), fmt.min, fmt.max)
    return integer.astype(np.int64) & ((1 << fmt.bits) - 1)


def _encode_e8m0(fmt: Format, v: NDArray[np.float64], rounding: str) -> NDArray[np.int64]:
    """E8M0: the power of two chosen by the rounding mode, clamped to [0x00, 0xFE].

    ±0 gives 0x00, +Inf 0xFE; negative values raise. Spec: "Encoding E8M0".
    """
    negative = (v < 0) & ~np.isnan(v)
    if np.any(negative):
        raise ValueError(
            f"e8m0 has no sign; the input holds the negative value {v[negative].flat[0]!r} "
            "(pass the magnitude if that is what is meant)"
        )
    infinite = np.isinf(v)
    positive = np.where(infinite | (v == 0), 1.0, v)
    fraction, frexp_exponent = np.frexp(positive)  # v = fraction * 2**e, 0.5 <= fraction < 1
    k = frexp_exponent - 1  # v = significand * 2**k
    significand = 2 * fraction  # 1 <= significand < 2, exact
    if rounding == "floor":
        up = np.zeros(v.shape, dtype=bool)
    elif rounding == "ceil":
        up = significand > 1
    elif rounding == "nearest-linear":
        up = significand >= 1.5
    elif rounding == "nearest-even":
        up = (significand > 1.5) | ((significand == 1.5) & ((k + fmt.bias) % 2 == 1))
    else:  # nearest-log: the midpoint in log space is sqrt(2) * 2**k
        up = significand >= _SQRT2_ABOVE
    code = np.clip(k + up + fmt.bias, 0, (1 << fmt.bits) - 2)
    code = np.where(v == 0, 0, code)
    return np.where(infinite, (1 << fmt.bits) - 2, code).astype(np.int64)


# -- decode -----------------------------------------------------------------------------------

_BITS_VIEW = {2: np.uint16, 4: np.uint32, 8: np.uint64}


@cache
def _decode_table(fmt: Format, dtype: np.dtype[np.generic]) -> NDArray[np.generic]:
    """The value of every code in ``dtype``; NaN entries hold the canonical quiet NaN."""
    with np.errstate(over="ignore", invalid="ignore"):  # E8M0 overflows float16: it becomes Inf
        table = fmt.values.astype(np.float32).astype(dtype)  # float32 holds every value exactly
    # Canonical quiet NaN: sign clear, exponent all ones, only the top mantissa bit set
    # (float32 0x7FC00000, float16 0x7E00, bfloat16 0x7FC0, float64 0x7FF8000000000000).
    all_ones = (1 << (8 * dtype.itemsize - 1)) - 1
    canonical_nan = all_ones ^ ((1 << (int(ml_dtypes.finfo(dtype).nmant) - 1)) - 1)
    table.view(_BITS_VIEW[dtype.itemsize])[np.isnan(fmt.values)] = canonical_nan
    table.flags.writeable = False
    return table


@containers(codes={"codes": "fmt"}, unpack_x2=True)
def decode(fmt: Format, codes: ArrayLike, dtype: DTypeLike = np.float32) -> NDArray[np.generic]:
    """Decode ``fmt`` codes to ``dtype`` values. See :meth:`mxformats.formats.Format.decode`."""
    c = np.asarray(codes)
    if c.dtype.kind not in "iu":
        raise TypeError(f"{fmt.name} codes must be integers (uint8), got dtype {c.dtype}")
    out_of_range = (c < 0) | (c >= 1 << fmt.bits)
    if np.any(out_of_range):
        raise ValueError(
            f"{fmt.name} codes are {fmt.bits}-bit (0..{(1 << fmt.bits) - 1}); "
            f"got {int(c[out_of_range].flat[0])}"
        )
    out = np.dtype(dtype)
    if out.itemsize not in _BITS_VIEW or not (out.kind == "f" or _is_ml_dtypes_float(out)):
        raise TypeError(f"decode produces float16, bfloat16, float32 or float64, not {out}")
    result: NDArray[np.generic] = _decode_table(fmt, out)[c]
    return result
