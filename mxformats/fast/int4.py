"""INT4 fast paths: :func:`pack_int4`, :func:`unpack_int4`, :func:`quantize_int4` and
:func:`dequantize_int4` (:mod:`mxformats.schemes.int4`). Spec: int4-layouts.md,
int4-schemes.md.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from mxformats.arith import BF16
from mxformats.containers import containers
from mxformats.fast.chunks import (
    _EXPONENT_SHIFT,
    _F16,
    _F32,
    _MAGNITUDE,
    _NONFINITE_EXPONENT,
    CHUNK_ELEMENTS,
    _along_axis,
    _float32_bits,
    _parallel,
    _row_maxima,
)
from mxformats.fast.codec import (
    _QUOTIENT_INPUTS,
    _quotient_codes,
    _quotient_table,
)
from mxformats.fast.fallback import FALLBACK, Fallback, fast_path
from mxformats.schemes import int4 as reference_int4
from mxformats.schemes.int4 import Int4Array

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike, NDArray

__all__ = ["dequantize_int4", "int4_table", "pack_int4", "quantize_int4", "unpack_int4"]

# -- INT4 -----------------------------------------------------------------------------------

#: The INT4 layouts with a fast path (``linear`` goes to the reference).
_LAYOUTS = ("compressed-tensors", "quark")


@containers()
@fast_path(reference_int4.pack_int4)
def pack_int4(
    q: ArrayLike, *, layout: str, axis: int, threads: int | None,
) -> NDArray[np.int32] | Fallback:
    """:func:`mxformats.pack_int4`, the same words, fast for int8 input.

    Fast path: int8 values, ``layout`` ``compressed-tensors`` or ``quark``, a length along
    ``axis`` that is a multiple of 8 (no padding). Nibbles are made per byte (``(q + offset) &
    0xF``), put in the layout's nibble order and joined two per byte, by chunks on up to
    ``threads`` threads. Spec: int4-layouts.md.
    """
    values = q if isinstance(q, np.ndarray) else None
    if (
        values is None
        or values.dtype != np.int8
        or values.ndim == 0
        or not -values.ndim <= axis < values.ndim
        or layout not in _LAYOUTS
        or values.shape[axis] % 8
        or values.size == 0
        or values.min() < reference_int4.QMIN
        or values.max() > reference_int4.QMAX
    ):
        return FALLBACK
    ax = axis % values.ndim
    moved = np.moveaxis(values, ax, -1)
    groups = np.ascontiguousarray(moved).reshape(-1, 8)
    out = np.empty((groups.shape[0], 4), dtype=np.uint8)
    chunk = CHUNK_ELEMENTS // 8
    _parallel(groups.shape[0], lambda lo, hi: _pack_groups(groups, layout, out, lo, hi, chunk),
              threads, chunk)
    words = out.view(np.int32).reshape(*moved.shape[:-1], -1)
    return np.moveaxis(words, -1, ax)


def _pack_groups(groups: NDArray[np.int8], layout: str, out: NDArray[np.uint8], lo: int,
                 hi: int, chunk: int) -> None:
    """Groups ``lo:hi`` of 8 int8 values into the 4 bytes of their words, by chunks."""
    order = reference_int4.NIBBLE_ORDER[layout]
    offset = np.uint8(reference_int4.NIBBLE_OFFSET[layout])
    for start in range(lo, hi, chunk):
        stop = min(start + chunk, hi)
        part = groups[start:stop]
        if order != tuple(range(8)):
            part = part.take(order, axis=1)
        nibbles = part.view(np.uint8) + offset
        nibbles &= np.uint8(0xF)
        pairs = nibbles.view(np.uint16)
        pairs |= pairs >> 4
        np.copyto(out[start:stop], pairs, casting="unsafe")


@cache
def _half_word_tables(layout: str) -> NDArray[np.uint64]:
    """``tables[k][h]``: the int8 values of the 4 nibbles of ``h``, taken as the 16-bit half
    ``k`` of a word (nibbles ``4k .. 4k + 3``), each at the byte of the 8 unpacked values where
    ``layout`` puts its element; 0 elsewhere. A word unpacks to ``tables[0][low half] |
    tables[1][high half]``, read as 8 int8 bytes."""
    order = reference_int4.NIBBLE_ORDER[layout]
    nibbles = (np.arange(1 << 16)[:, None] >> (4 * np.arange(4))) & 0xF
    signed = ((nibbles - reference_int4.NIBBLE_OFFSET[layout]) & 0xF ^ 8) - 8  # two's complement
    tables = np.zeros((2, 1 << 16, 8), dtype=np.int8)
    for half in range(2):
        for j in range(4):
            tables[half, :, order[4 * half + j]] = signed[:, j]
    result = tables.view(np.uint64)[..., 0]
    result.flags.writeable = False
    return result


def _unpack_words(
    halves: NDArray[np.uint16], tables: NDArray[np.uint64], out: NDArray[np.uint64],
    lo: int, hi: int,
) -> None:
    """Words ``lo:hi`` (rows of two half-words) into ``out`` (one uint64 of 8 values each)."""
    index = np.empty(min(CHUNK_ELEMENTS, hi - lo), dtype=np.intp)
    for start in range(lo, hi, CHUNK_ELEMENTS):
        stop = min(start + CHUNK_ELEMENTS, hi)
        n = stop - start
        np.copyto(index[:n], halves[start:stop, 0])
        np.take(tables[0], index[:n], out=out[start:stop], mode="clip")
        np.copyto(index[:n], halves[start:stop, 1])
        out[start:stop] |= np.take(tables[1], index[:n], mode="clip")


@containers()
@fast_path(reference_int4.unpack_int4)
def unpack_int4(
    packed: ArrayLike, *, layout: str, axis: int, size: int | None, threads: int | None,
) -> NDArray[np.int8] | Fallback:
    """:func:`mxformats.unpack_int4`, the same values, fast for whole words.

    Fast path: int32/uint32 words, ``layout`` ``compressed-tensors`` or ``quark``, ``size``
    None or ``8 × words``. Each 16-bit half of a word gives its 4 values, already at their
    places, by a 65536-entry table (``_half_word_tables``). Spec: int4-layouts.md.
    """
    words = packed if isinstance(packed, np.ndarray) else None
    if (
        words is None
        or words.dtype not in (np.dtype(np.int32), np.dtype(np.uint32))
        or words.size == 0
        or layout not in _LAYOUTS
        or not -words.ndim <= axis < words.ndim
        or (size is not None and size != 8 * words.shape[axis])
    ):
        return FALLBACK
    ax = axis % words.ndim
    moved = np.ascontiguousarray(np.moveaxis(words, ax, -1))
    halves = moved.view(np.uint16).reshape(-1, 2)  # little-endian: the low half first
    out = np.empty(halves.shape[0], dtype=np.uint64)
    tables = _half_word_tables(layout)
    _parallel(out.size, lambda lo, hi: _unpack_words(halves, tables, out, lo, hi), threads,
              CHUNK_ELEMENTS)
    values = out.view(np.int8).reshape(*moved.shape[:-1], -1)
    return np.moveaxis(values, -1, ax)


@containers()
@fast_path(reference_int4.dequantize_int4)
def dequantize_int4(
    q: ArrayLike | Int4Array, scales: ArrayLike | None, *, group_size: int | None, axis: int,
    profile: str | None, dtype: DTypeLike, threads: int | None,
) -> NDArray[np.generic] | Fallback:
    """:func:`mxformats.dequantize_int4`, the same bytes, fast to float32.

    Fast path: int8 ``q`` in [-8, 7], finite scales (float32 for ``quark``; float32, bfloat16
    or float16 for ``compressed-tensors``) of the matching shape, an int ``group_size``,
    ``dtype`` float32. ``q × scale`` is one float32 multiply, then (compressed-tensors with a
    16-bit scale) one rounding to the scale's type: the reference's arithmetic. Spec:
    int4-schemes.md, "Dequantization".
    """
    if isinstance(q, Int4Array):
        if scales is not None:
            return FALLBACK
        given = q
        q, scales, group_size, axis = given.q, given.scales, given.group_size, given.axis
        profile = given.profile if profile is None else profile
    values = q if isinstance(q, np.ndarray) else None
    s = scales if isinstance(scales, np.ndarray) else None
    consumer = reference_int4.CONSUMERS.get(profile or reference_int4.DEFAULT_CONSUMER)
    float32_product = consumer is not None and consumer.product_dtype == "float32"
    scale_types = (_F32,) if float32_product else (_F32, BF16, _F16)
    if (
        values is None
        or s is None
        or values.dtype != np.int8
        or s.dtype not in scale_types
        or consumer is None
        or np.dtype(dtype) != _F32
        or not isinstance(group_size, int)
        or group_size <= 0
        or values.ndim == 0
        or values.ndim != s.ndim
        or not -values.ndim <= axis < values.ndim
        or values.shape[axis] % group_size
        or s.shape != (*values.shape[:axis % values.ndim], values.shape[axis] // group_size,
                       *values.shape[axis % values.ndim + 1:])
        or values.size == 0
        or values.min() < reference_int4.QMIN
        or values.max() > reference_int4.QMAX
        or not np.isfinite(s.astype(np.float32)).all()
    ):
        return FALLBACK
    ax = axis % values.ndim
    rows = np.ascontiguousarray(np.moveaxis(values, ax, -1)).reshape(-1, group_size)
    factor = np.ascontiguousarray(np.moveaxis(s, ax, -1)).reshape(-1).astype(np.float32)
    out = np.empty(rows.shape, dtype=np.float32)

    chunk = max(1, CHUNK_ELEMENTS // group_size)

    def work(lo: int, hi: int) -> None:
        scratch = np.empty((min(chunk, hi - lo), group_size), dtype=np.uint32)
        for start in range(lo, hi, chunk):
            part = slice(start, min(start + chunk, hi))
            product = out[part]
            np.copyto(product, rows[part])  # int8 -> float32, then a same-type multiply
            with np.errstate(over="ignore"):  # overflow to Inf is the specified result
                product *= factor[part, None]
                if s.dtype != _F32:  # compressed-tensors rounds the product to the scale's type
                    _round_through(product, s.dtype, scratch[: product.shape[0]])

    _parallel(rows.shape[0], work, threads, chunk)
    shape = np.moveaxis(values, ax, -1).shape
    return np.ascontiguousarray(np.moveaxis(out.reshape(shape), -1, ax))


def _round_through(v: NDArray[np.float32], dtype: np.dtype[Any],
                   scratch: NDArray[np.uint32]) -> None:
    """Round float32 values (finite or infinite) in place to ``dtype``, nearest-even, and back;
    ``scratch``: uint32 of ``v``'s shape."""
    if dtype == _F16:
        np.copyto(v, v.astype(np.float16))
        return
    bits = v.view(np.uint32)  # bfloat16: round the top 16 bits to nearest-even
    odd = np.right_shift(bits, 16, out=scratch)
    odd &= np.uint32(1)
    odd += np.uint32(0x7FFF)
    bits += odd
    bits &= np.uint32(0xFFFF0000)


@cache
def int4_table(profile: str, dtype: np.dtype[Any]) -> NDArray[np.int8]:
    """The INT4 value of every class of float32 quotients under INT4 producer ``profile`` for
    input ``dtype``: the quotient rounded to the producer's quotient dtype, then
    ``mxformats.schemes.int4.round_to_int4``."""
    producer = reference_int4.get_producer(profile)
    work = reference_int4.quotient_dtype(producer, np.dtype(dtype))
    return _quotient_table(lambda q: reference_int4.round_to_int4(q.astype(work)))


@containers()
@fast_path(reference_int4.quantize_int4)
def quantize_int4(
    x: object, *, group_size: int | None, axis: int, profile: str, threads: int | None,
) -> Int4Array | Fallback:
    """:func:`mxformats.quantize_int4`, the same bytes, fast for float32 and bfloat16 input.

    Fast path: float32 or bfloat16 numpy data (or torch tensor) of finite values, any INT4
    producer ``profile``, an int ``group_size`` dividing the length along ``axis`` (or None:
    one group per slice). Per group the reference's own ``group_scales``
    gives the scale; each quotient ``x / s`` (or ``x * (1 / s)``) is one float32
    operation, as the producer's, and its rounding to the quotient dtype and to an integer is
    one lookup in :func:`int4_table`. A non-finite input sends the call to the reference, which
    refuses it; so does every other input. Spec: int4-schemes.md.
    """
    found = _along_axis(x, _QUOTIENT_INPUTS, axis)
    producer = reference_int4.PRODUCERS.get(profile) if isinstance(profile, str) else None
    if (
        found is None
        or producer is None
        or not (group_size is None or (type(group_size) is int and group_size > 0))
        or found[0].shape[axis] % (group_size or found[0].shape[axis])
    ):
        return FALLBACK
    data, ax = found
    moved = np.ascontiguousarray(np.moveaxis(data, ax, -1))
    size = group_size or moved.shape[-1]
    groups = moved.reshape(-1, size)
    q = np.empty(groups.shape, dtype=np.int8)
    scale_dtype = data.dtype if producer.scale_dtype == "input" else _F32
    scales = np.empty(groups.shape[0], dtype=scale_dtype)
    table = int4_table(profile, data.dtype)
    chunk = max(1, CHUNK_ELEMENTS // size)
    nonfinite: list[bool] = []

    def work(lo: int, hi: int) -> None:
        rows = min(chunk, hi - lo)
        wide = np.empty((rows, size), dtype=np.uint32)
        scratch = np.empty((rows, size), dtype=np.uint32)
        for start in range(lo, hi, chunk):
            stop = min(start + chunk, hi)
            n = stop - start
            bits = _float32_bits(groups[start:stop], wide[:n])
            amax = _row_maxima(np.bitwise_and(bits, _MAGNITUDE, out=scratch[:n]))
            if (amax >> _EXPONENT_SHIFT == _NONFINITE_EXPONENT).any():
                nonfinite.append(True)
                return
            stored = reference_int4.group_scales(amax.view(_F32).astype(data.dtype), producer)
            scales[start:stop] = stored
            operand = reference_int4.quotient_operand(stored, producer, data.dtype)
            _quotient_codes(bits.view(_F32), operand.astype(_F32)[:, None],
                            producer.reciprocal, table, q[start:stop], wide[:n], scratch[:n])

    _parallel(groups.shape[0], work, threads, chunk)
    if nonfinite:
        return FALLBACK
    shape = moved.shape
    return Int4Array(
        q=np.moveaxis(q.reshape(shape), -1, ax),
        scales=np.moveaxis(scales.reshape(*shape[:-1], shape[-1] // size), -1, ax),
        group_size=group_size, axis=ax, profile=profile)


