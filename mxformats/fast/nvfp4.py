"""NVFP4 fast paths: :func:`quantize_nvfp4` (:func:`mxformats.schemes.nvfp4.quantize_nvfp4`)
and :func:`dequantize_nvfp4` (:func:`mxformats.schemes.nvfp4.dequantize_nvfp4`). Spec:
spec/nvfp4.md.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from mxformats.arith import BF16
from mxformats.containers import containers
from mxformats.fast.chunks import (
    _E2M1_LOW_BITS,
    _EXPONENT_SHIFT,
    _F16,
    _F32,
    _MAGNITUDE,
    _NONFINITE_EXPONENT,
    CHUNK_BLOCKS,
    CHUNK_ELEMENTS,
    _along_axis,
    _float32_bits,
    _parallel,
    _row_maxima,
)
from mxformats.fast.codec import (
    _class_index,
    _class_members,
    _e2m1_pair_table,
    _e2m1_value_table,
    _fp8_values,
    _scale_rows,
    encode,
)
from mxformats.fast.fallback import FALLBACK, Fallback, fast_path
from mxformats.formats import E4M3FN
from mxformats.schemes import nvfp4 as reference_nvfp4
from mxformats.schemes.nvfp4 import NVFP4Array

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike, NDArray

__all__ = ["NVFP4_BLOCK", "dequantize_nvfp4", "nvfp4_code_table", "quantize_nvfp4"]

# -- NVFP4 quantize ------------------------------------------------------------------------

#: Elements per NVFP4 block.
NVFP4_BLOCK = 16


@cache
def nvfp4_code_table() -> NDArray[np.uint8]:
    """``mxformats.schemes.nvfp4.e2m1_codes`` of one member of every class of float32
    quotients (sign, exponent, 3 mantissa bits): the NaN classes give 7, ±Inf saturates, and
    only a negative non-zero class has the sign bit (``q < 0``; -0.0 does not)."""
    with np.errstate(invalid="ignore"):  # the NaN classes
        table = reference_nvfp4.e2m1_codes(_class_members(_E2M1_LOW_BITS).astype(_F32))
    table.flags.writeable = False
    return table


def _e2m1_lookup(quotient_bits: NDArray[np.uint32], scratch: NDArray[np.uint32],
                 out: NDArray[np.uint8]) -> None:
    """``out`` = the NVFP4 E2M1 codes of float32 quotients (their bits, overwritten)."""
    _class_index(quotient_bits, _E2M1_LOW_BITS, scratch)
    np.take(nvfp4_code_table(), quotient_bits, out=out, mode="clip")


def _e4m3_scale_codes(threads: int | None) -> Callable[[NDArray[np.float64]], NDArray[np.uint8]]:
    """:func:`mxformats.schemes.nvfp4.e4m3_scale_codes` by :func:`encode`'s table (the clamped
    block scales are float32 values, so the float64 array narrows exactly)."""
    return lambda values: encode(E4M3FN, values, threads=threads)


@containers()
@fast_path(reference_nvfp4.quantize_nvfp4)
def quantize_nvfp4(
    x: object, *, axis: int, profile: str, global_amax: float | None, threads: int | None,
) -> NVFP4Array | Fallback:
    """:func:`mxformats.schemes.nvfp4.quantize_nvfp4`, the same bytes, fast.

    Fast path: float32, bfloat16 or float16 numpy data (or torch tensor) of finite values, a
    producer ``profile``, a length along ``axis`` that is a multiple of 16. Two passes by
    chunks on up to ``threads`` threads: the block maxima (from the float32 bits), from which
    the reference's own :func:`~mxformats.schemes.nvfp4.nvfp4_scales` computes the global and
    block scales (their E4M3 codes by :func:`encode`'s table), then each quotient ``x /
    divisor``, one float32 division as the reference's, and its E2M1 code, one lookup in
    :func:`nvfp4_code_table`. Anything else, a non-finite input included, goes to the
    reference (its checks and errors). Spec: spec/nvfp4.md."""
    found = _along_axis(x, (_F32, BF16, _F16), axis)
    producer = reference_nvfp4.PRODUCERS.get(profile) if isinstance(profile, str) else None
    if found is None or producer is None or found[0].shape[axis] % NVFP4_BLOCK:
        return FALLBACK
    data, ax = found
    moved = np.ascontiguousarray(np.moveaxis(data, ax, -1))
    blocks = moved.reshape(-1, NVFP4_BLOCK)
    count = blocks.shape[0]
    chunk = CHUNK_ELEMENTS // NVFP4_BLOCK
    amax_bits = np.empty(count, dtype=np.uint32)

    def maxima(lo: int, hi: int) -> None:
        wide = np.empty((min(chunk, hi - lo), NVFP4_BLOCK), dtype=np.uint32)
        for start in range(lo, hi, chunk):
            n = min(start + chunk, hi) - start
            bits = _float32_bits(blocks[start:start + n], wide[:n])
            magnitude = np.bitwise_and(bits, _MAGNITUDE, out=wide[:n])
            amax_bits[start:start + n] = _row_maxima(magnitude)

    _parallel(count, maxima, threads, chunk)
    if (amax_bits >> _EXPONENT_SHIFT == _NONFINITE_EXPONENT).any():
        return FALLBACK
    block_amax = amax_bits.view(_F32).astype(data.dtype).reshape(*moved.shape[:-1], -1)
    scales = reference_nvfp4.nvfp4_scales(producer, block_amax, global_amax,
                                          _e4m3_scale_codes(threads))
    divisor = scales.divisor.reshape(-1, 1)
    codes = np.empty(blocks.shape, dtype=np.uint8)

    def quotients(lo: int, hi: int) -> None:
        wide = np.empty((min(chunk, hi - lo), NVFP4_BLOCK), dtype=np.uint32)
        scratch = np.empty_like(wide)
        for start in range(lo, hi, chunk):
            n = min(start + chunk, hi) - start
            bits = _float32_bits(blocks[start:start + n], wide[:n])
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                np.divide(bits.view(_F32), divisor[start:start + n], out=wide[:n].view(_F32))
            _e2m1_lookup(wide[:n], scratch[:n], codes[start:start + n])

    _parallel(count, quotients, threads, chunk)
    return scales.array(codes.reshape(moved.shape), ax)


# -- NVFP4 dequantize -------------------------------------------------------------------------


def _nvfp4_global(global_scale: object) -> np.float32 | None:
    """The float32 global scale, as the reference reads it, when it is one finite value given
    as a float or a float array; None sends the call to the reference."""
    if isinstance(global_scale, np.ndarray) and global_scale.dtype.kind == "f":
        stored = global_scale.astype(_F32)
    elif isinstance(global_scale, float | np.floating):
        stored = np.asarray(global_scale, dtype=_F32)
    else:
        return None
    value = stored.reshape(-1)[0] if stored.size == 1 else None
    return value if value is not None and np.isfinite(value) else None


@containers(codes={"scales": E4M3FN})
@fast_path(reference_nvfp4.dequantize_nvfp4)
def dequantize_nvfp4(
    codes: ArrayLike | NVFP4Array, scales: ArrayLike | None, global_scale: ArrayLike | None, *,
    axis: int, profile: str | None, packed: bool, dtype: DTypeLike, threads: int | None,
) -> NDArray[Any] | Fallback:
    """:func:`mxformats.dequantize_nvfp4`, the same bytes, fast to float32, every consumer.

    Fast path: uint8 codes (one a byte, or two a byte with ``packed``) whose length along
    ``axis`` is a multiple of 16 elements, uint8 scales of the matching shape, a finite global
    scale (one value), a consumer ``profile`` (or an :class:`NVFP4Array` read by its default
    or a matching consumer), ``dtype`` float32. Each element is its E2M1 value (a table
    lookup) times a float32 factor per block:

    - ``multiply`` / ``reciprocal``: the factor is the scale ``s``; E2M1 × E4M3 is exact in
      float32 (at most 6 significant bits, 2**-10 to 2688), so the second multiply, by
      ``global`` or by ``float32(1 / global)``, is the one rounding the reference's float64
      product makes;
    - ``divide``: the factor is the reference's own float32 quotient ``s / global`` and the one
      multiply is the reference's rounding (E2M1 × float32 is exact in float64).

    Blocks whose factor is not finite (a NaN scale byte, an overflowing quotient) go to the
    reference, and so does a call whose global factor is not finite, or any other input.
    Spec: spec/nvfp4.md, "Consumers".
    """
    if isinstance(codes, NVFP4Array):
        array = codes
        producer = reference_nvfp4.PRODUCERS.get(array.profile)
        name = profile if profile is not None else reference_nvfp4.DEFAULT_CONSUMER.get(
            array.profile)
        reader = reference_nvfp4.CONSUMERS.get(name) if isinstance(name, str) else None
        if (scales is None and global_scale is None and not packed and producer is not None
                and reader is not None and reader.global_form == producer.global_form):
            return dequantize_nvfp4(array.codes, array.scales, array.global_scale,
                                    axis=array.axis, profile=name, dtype=dtype, threads=threads)
        return FALLBACK
    c = codes if isinstance(codes, np.ndarray) else None
    s = scales if isinstance(scales, np.ndarray) else None
    consumer = reference_nvfp4.CONSUMERS.get(profile) if isinstance(profile, str) else None
    stored = _nvfp4_global(global_scale)
    per_byte = 2 if packed else 1
    if (
        c is None
        or s is None
        or consumer is None
        or stored is None
        or np.dtype(dtype) != _F32
        or c.dtype != np.uint8
        or s.dtype != np.uint8
        or c.ndim == 0
        or c.size == 0
        or not -c.ndim <= axis < c.ndim
        or c.shape[axis] * per_byte % NVFP4_BLOCK
        or s.shape != (*c.shape[:axis % c.ndim], c.shape[axis] * per_byte // NVFP4_BLOCK,
                       *c.shape[axis % c.ndim + 1:])
        or (not packed and int(c.max()) > 0xF)
    ):
        return FALLBACK
    scale_bytes = np.moveaxis(s, axis, -1).reshape(-1)
    block_scale = _fp8_values(E4M3FN)[scale_bytes]
    factor: NDArray[np.float32] = block_scale
    then: np.float32 | None = stored
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        if consumer.global_op == "divide":
            factor, then = (block_scale / stored).astype(_F32, copy=False), None
        elif consumer.global_op == "reciprocal":
            then = np.float32(1) / stored
    if then is not None and not np.isfinite(then):
        return FALLBACK
    ax = axis % c.ndim
    moved = np.moveaxis(c, ax, -1)
    rows = np.ascontiguousarray(moved).reshape(-1, NVFP4_BLOCK // per_byte)
    table = _e2m1_pair_table() if packed else _e2m1_value_table()
    out = np.empty((rows.shape[0], NVFP4_BLOCK), dtype=np.float32)

    def work(lo: int, hi: int) -> None:
        with np.errstate(over="ignore", invalid="ignore"):  # Inf is specified; NaN redone
            _scale_rows(rows, factor, table, out, lo, hi, then)

    _parallel(rows.shape[0], work, threads, CHUNK_BLOCKS)
    special = np.flatnonzero(~np.isfinite(factor))
    if special.size:
        out[special] = reference_nvfp4.dequantize_nvfp4(
            rows[special], scale_bytes[special, None], stored, profile=profile, packed=packed)
    shape = (*moved.shape[:-1], moved.shape[-1] * per_byte)
    return np.ascontiguousarray(np.moveaxis(out.reshape(shape), -1, ax))


