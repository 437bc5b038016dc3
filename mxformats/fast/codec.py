"""Element codec fast paths and the tables over float32 classes they share.

:func:`encode` (:func:`mxformats.codec.encode`) and :func:`decode`
(:func:`mxformats.codec.decode`) for 8-bit formats; the class index of a float32 value
(``_class_index``), the tables built on its classes (:func:`code_table`, the quotient tables of
the INT4 and FP8 producers), and the E2M1 / FP8 value tables the dequantizers look up.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from mxformats import codec as reference_codec
from mxformats.arith import BF16
from mxformats.containers import containers
from mxformats.fast.chunks import (
    _F16,
    _F32,
    CHUNK_BLOCKS,
    CHUNK_ELEMENTS,
    _float32_bits,
    _float_input,
    _parallel,
)
from mxformats.fast.fallback import FALLBACK, Fallback, fast_path
from mxformats.formats import E2M1, Format

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike, NDArray

__all__ = ["code_table", "decode", "encode"]

# -- tables over float32 classes ------------------------------------------------------------


def _class_members(low_bits: int) -> NDArray[np.float64]:
    """One float32 value per class of ``_class_index`` (its low ``low_bits`` bits zero),
    widened to float64; entry ``i`` is the member of class ``i``."""
    index = np.arange(1 << (32 - low_bits), dtype=np.uint32)
    with np.errstate(invalid="ignore"):  # the NaN classes widen with a warning
        return (index << low_bits).view(np.float32).astype(np.float64)


def _class_index(bits: NDArray[np.uint32], low_bits: int, scratch: NDArray[np.uint32]) -> None:
    """In place: float32 ``bits`` become their class, ``bits >> low_bits`` with the lowest kept
    bit ORed with "any of the low bits set" (adding the low mask carries into it exactly then).

    That is rounding to odd at ``32 - low_bits`` bits; a value so rounded to ``mbits + 2``
    mantissa bits or more rounds to ``mbits`` bits (nearest-even, nearest-away or toward zero)
    as the exact value does, so every member of a class has the code of the class member.
    """
    mask = np.uint32((1 << low_bits) - 1)
    np.bitwise_and(bits, mask, out=scratch)
    scratch += mask
    bits |= scratch
    bits >>= np.uint32(low_bits)


@cache
def _e2m1_pair_table() -> NDArray[np.uint64]:
    """For each packed byte, the float32 values of its low and high nibble side by side (one
    uint64: the low nibble first in memory, as the unpacked order has it)."""
    nibble = E2M1.values.astype(np.float32)
    byte = np.arange(256)
    pairs = np.stack([nibble[byte & 0xF], nibble[byte >> 4]], axis=-1)
    table = np.ascontiguousarray(pairs).view(np.uint64)[:, 0]
    table.flags.writeable = False
    return table


@cache
def _e2m1_value_table() -> NDArray[np.uint32]:
    """The float32 bits of each E2M1 code's value (one code a byte)."""
    table = E2M1.values.astype(np.float32).view(np.uint32)
    table.flags.writeable = False
    return table


def _scale_rows(
    codes: NDArray[np.uint8], factor: NDArray[np.float32], table: NDArray[np.uint64 | np.uint32],
    out: NDArray[np.float32], lo: int, hi: int, then: np.float32 | None = None,
) -> None:
    """``out[lo:hi] = values(codes[lo:hi]) * factor[lo:hi]``, then ``* then`` when given (a
    second float32 multiply, rounded on its own), by chunks. A row is one block with its
    float32 factor: packed bytes and :func:`_e2m1_pair_table` (two values a byte), or one code
    a byte and :func:`_e2m1_value_table`."""
    index = np.empty((min(CHUNK_BLOCKS, hi - lo), codes.shape[1]), dtype=np.intp)
    for start in range(lo, hi, CHUNK_BLOCKS):
        stop = min(start + CHUNK_BLOCKS, hi)
        n = stop - start
        np.copyto(index[:n], codes[start:stop])
        np.take(table, index[:n], out=out[start:stop].view(table.dtype), mode="clip")
        out[start:stop] *= factor[start:stop, None]
        if then is not None:
            out[start:stop] *= then


@cache
def _fp8_values(fmt: Format) -> NDArray[np.float32]:
    """The float32 value of every byte of ``fmt``, decoded as the reference decodes codes."""
    table = fmt.decode(np.arange(256, dtype=np.uint8), np.float32).astype(_F32)
    table.flags.writeable = False
    return table


# -- FP8 encode and decode ------------------------------------------------------------------


@cache
def code_table(fmt: Format, rounding: str, overflow: str) -> NDArray[np.uint8]:
    """The ``fmt`` code of every float32 class (``fmt.mbits + 2`` mantissa bits kept): the
    reference codec (:func:`mxformats.codec.encode`) on the class members, NaN and ±Inf
    classes included."""
    members = _class_members(_low_bits(fmt))
    table = reference_codec.encode(fmt, members, rounding=rounding, overflow=overflow)
    table.flags.writeable = False
    return table


def _low_bits(fmt: Format) -> int:
    return 23 - (fmt.mbits + 2)


def _encode_chunks(
    flat: NDArray[Any], out: NDArray[np.uint8], table: NDArray[np.uint8], low_bits: int,
    lo: int, hi: int,
) -> None:
    size = min(CHUNK_ELEMENTS, hi - lo)
    wide = np.empty(size, dtype=np.uint32)
    index = np.empty(size, dtype=np.uint32)
    scratch = np.empty(size, dtype=np.uint32)
    for start in range(lo, hi, CHUNK_ELEMENTS):
        stop = min(start + CHUNK_ELEMENTS, hi)
        n = stop - start
        np.copyto(index[:n], _float32_bits(flat[start:stop], wide[:n]))
        _class_index(index[:n], low_bits, scratch[:n])
        np.take(table, index[:n], out=out[start:stop], mode="clip")


@containers()
@fast_path(reference_codec.encode)
def encode(
    fmt: Format, x: object, *, rounding: str, overflow: str | None, nan_code: int | None,
    threads: int | None,
) -> NDArray[np.uint8] | Fallback:
    """:func:`mxformats.codec.encode` (``Format.encode``), the same codes, fast for FP8.

    Fast path: an 8-bit float ``fmt`` with a NaN (E4M3FN, E4M3FNUZ, E5M2), float32, bfloat16
    or float16 numpy input (or torch tensor; float64 whose values are all float32 values, no
    NaN, is read as the float32 it narrows to exactly), a rounding and overflow mode the
    format takes, no ``nan_code``. One table lookup per value (:func:`code_table`). Spec:
    spec/README.md, "Encoding".
    """
    data = _float_input(x)
    if data is not None and data.dtype == np.float64:
        with np.errstate(over="ignore", invalid="ignore"):
            narrowed = data.astype(_F32)
        if np.array_equal(narrowed, data):  # float32 values only (NaN never compares equal)
            data = narrowed
    if (
        data is None
        or fmt.kind != "float"
        or fmt.bits != 8
        or not fmt.nan_codes
        or nan_code is not None
        or rounding not in fmt.roundings
        or (overflow is not None and overflow not in fmt.overflows)
        or data.dtype not in (_F32, BF16, _F16)
    ):
        return FALLBACK
    table = code_table(fmt, rounding, fmt.default_overflow if overflow is None else overflow)
    flat = np.ascontiguousarray(data).reshape(-1)
    out = np.empty(flat.shape, dtype=np.uint8)

    def work(lo: int, hi: int) -> None:
        _encode_chunks(flat, out, table, _low_bits(fmt), lo, hi)

    _parallel(flat.size, work, threads, CHUNK_ELEMENTS)
    codes: NDArray[np.uint8] = out.reshape(data.shape)
    return codes


def _decode_chunks(codes: NDArray[np.uint8], table: NDArray[Any], out: NDArray[Any],
                   lo: int, hi: int) -> None:
    index = np.empty(min(CHUNK_ELEMENTS, hi - lo), dtype=np.intp)
    for start in range(lo, hi, CHUNK_ELEMENTS):
        stop = min(start + CHUNK_ELEMENTS, hi)
        n = stop - start
        np.copyto(index[:n], codes[start:stop])
        np.take(table, index[:n], out=out[start:stop], mode="clip")


@containers(codes={"codes": "fmt"}, unpack_x2=True)
@fast_path(reference_codec.decode)
def decode(fmt: Format, codes: ArrayLike, dtype: DTypeLike,
           threads: int | None) -> NDArray[np.generic] | Fallback:
    """:func:`mxformats.codec.decode` (``Format.decode``), the same values, fast for 8-bit
    formats: uint8 codes are all valid, so decoding is one lookup in the reference's own value
    table, by chunks and threads. Other inputs go to the reference. Spec: spec/README.md,
    "Decoding"."""
    c = codes if isinstance(codes, np.ndarray) else None
    if c is None or c.dtype != np.uint8 or fmt.bits != 8:
        return FALLBACK
    table = reference_codec.decode(fmt, np.arange(256, dtype=np.uint8), dtype)  # validates dtype
    flat = np.ascontiguousarray(c).reshape(-1)
    out = np.empty(flat.shape, dtype=table.dtype)
    _parallel(flat.size, lambda lo, hi: _decode_chunks(flat, table, out, lo, hi), threads,
              CHUNK_ELEMENTS)
    values: NDArray[np.generic] = out.reshape(c.shape)
    return values


#: float32 bits below the 9 mantissa bits the quotient tables keep (2**18 classes): enough for
#: a rounding to bfloat16 (7 bits) followed by one to an integer or an FP8 code (3 bits), and
#: for those roundings from float32 directly.
_QUOTIENT_LOW_BITS = 14
#: Input types whose quotients the tables encode: their quotient dtype is float32 or bfloat16.
_QUOTIENT_INPUTS = (_F32, BF16)


def _quotient_table(encode: Callable[[NDArray[np.float32]], NDArray[Any]]) -> NDArray[Any]:
    """``encode`` (a reference's last step) on one member of every float32 quotient class; the
    NaN classes, which no finite input reaches, get the code of 0."""
    members = _class_members(_QUOTIENT_LOW_BITS)
    with np.errstate(invalid="ignore", over="ignore"):
        table = encode(np.where(np.isnan(members), 0, members).astype(_F32))
    table.flags.writeable = False
    return table


def _quotient_codes(values: NDArray[np.float32], operand: NDArray[np.float32] | np.float32,
                    reciprocal: bool, table: NDArray[Any], out: NDArray[Any],
                    work: NDArray[np.uint32], scratch: NDArray[np.uint32]) -> None:
    """``out = table[class(values ÷ operand)]``, ``operand`` one float32 per row (or one for
    all): a true division, or a multiply for ``reciprocal`` producers, one float32 operation
    as the producers compute it. ``work`` and ``scratch``: uint32 of ``values``' shape
    (``work`` may be ``values``' own bits)."""
    quotient = work.view(np.float32)
    with np.errstate(over="ignore", under="ignore"):
        if reciprocal:
            np.multiply(values, operand, out=quotient)
        else:
            np.divide(values, operand, out=quotient)
    _class_index(work, _QUOTIENT_LOW_BITS, scratch)
    np.take(table, work, out=out, mode="clip")


