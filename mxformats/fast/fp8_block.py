"""FP8 block fast paths: :func:`quantize_fp8_block`
(:func:`mxformats.schemes.fp8_block.quantize_fp8_block`) and :func:`dequantize_fp8_block`
(:func:`mxformats.schemes.fp8_block.dequantize_fp8_block`). Spec: fp8-block.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mxformats.arith import BF16, canonical_nan
from mxformats.containers import containers
from mxformats.fast.chunks import (
    _F16,
    _F32,
    CHUNK_ELEMENTS,
    _float_input,
    _parallel,
)
from mxformats.fast.codec import (
    _fp8_values,
    encode,
)
from mxformats.fast.fallback import FALLBACK, Fallback, fast_path
from mxformats.schemes import fp8_block as reference_fp8_block
from mxformats.schemes.fp8_block import FP8BlockArray

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike, NDArray

__all__ = ["dequantize_fp8_block", "quantize_fp8_block"]

# -- FP8 block quantize ---------------------------------------------------------------------------


@containers()
@fast_path(reference_fp8_block.quantize_fp8_block)
def quantize_fp8_block(
    x: object, *, block: tuple[int, int], profile: str, threads: int | None,
) -> FP8BlockArray:
    """:func:`mxformats.schemes.fp8_block.quantize_fp8_block`, the same bytes, fast.

    The reference computes the scales and the scaled elements with vectorised numpy in the
    producer's own types (float32, or the input dtype); here its element cast is
    :func:`encode`'s table lookup (nearest-even, saturating), which gives the codec's codes for
    every float32, bfloat16 and float16 value, NaN included. Every tile is quantized on its own
    (its scale is its own maximum's), so a 2-D float input is cut into pieces of whole tiles,
    one tile row high and about ``CHUNK_ELEMENTS`` wide, each quantized by the reference
    (:func:`~mxformats.schemes.fp8_block.quantize_fp8_block_with`: a partial edge tile is
    padded there as in one call) in cache, on up to ``threads`` threads. Other inputs go to
    the reference whole. Spec: fp8-block.md.
    """

    def table_encoder(pool: int | None) -> reference_fp8_block.Encoder:
        return lambda fmt, values: encode(fmt, values, overflow="saturate", threads=pool)

    def reference(part: object, pool: int | None) -> FP8BlockArray:
        return reference_fp8_block.quantize_fp8_block_with(table_encoder(pool), part,
                                                           block=block, profile=profile)

    data = _float_input(x)
    try:
        tile = reference_fp8_block.check_block(block)
    except ValueError:
        tile = None
    if (
        data is None
        or tile is None
        or profile not in reference_fp8_block.PRODUCERS
        or data.ndim != 2
        or data.size == 0
        or data.dtype not in reference_fp8_block.INPUT_DTYPES
    ):
        return reference(x, threads)
    (bm, bn), (rows, cols) = tile, reference_fp8_block.scale_grid(data.shape, tile)
    wide = max(1, CHUNK_ELEMENTS // (bm * bn))  # tiles per piece along a tile row
    pieces = [(r, c) for r in range(rows) for c in range(0, cols, wide)]
    codes = np.empty(data.shape, dtype=np.uint8)
    scales = np.empty((rows, cols), dtype=reference(data[:1, :1], 1).scales.dtype)

    def work(lo: int, hi: int) -> None:
        for r, c in pieces[lo:hi]:
            part = np.s_[r * bm:(r + 1) * bm, c * bn:(c + wide) * bn]
            result = reference(data[part], 1)
            codes[part], scales[r, c:c + wide] = result.codes, result.scales[0]

    _parallel(len(pieces), work, threads, 1)
    return FP8BlockArray(codes, scales, tile, reference_fp8_block.PRODUCERS[profile].name)


# -- FP8 block dequantize -------------------------------------------------------------------


def _fp8_block_rows(
    codes: NDArray[np.uint8], table: NDArray[np.float32], column_scales: NDArray[np.float32],
    tile_rows: int, out: NDArray[np.float32], lo: int, hi: int,
) -> None:
    """``out[lo:hi] = table[codes[lo:hi]] * column_scales[row // tile_rows]``, by chunks of
    about ``CHUNK_ELEMENTS``, the multiply once per run of rows that share a tile row."""
    columns = codes.shape[1]
    step = max(1, CHUNK_ELEMENTS // columns)
    index = np.empty((min(step, hi - lo), columns), dtype=np.intp)
    for start in range(lo, hi, step):
        stop = min(start + step, hi)
        np.copyto(index[: stop - start], codes[start:stop])
        np.take(table, index[: stop - start], out=out[start:stop], mode="clip")
        first = start
        while first < stop:
            tile = first // tile_rows
            last = min(stop, (tile + 1) * tile_rows)
            out[first:last] *= column_scales[tile]
            first = last


@containers()
@fast_path(reference_fp8_block.dequantize_fp8_block)
def dequantize_fp8_block(
    codes: ArrayLike | FP8BlockArray, scales: ArrayLike | None, *, block: tuple[int, int],
    profile: str, dtype: DTypeLike, threads: int | None,
) -> NDArray[np.generic] | Fallback:
    """:func:`mxformats.schemes.fp8_block.dequantize_fp8_block`, the same bytes, fast to
    float32.

    Fast path: 2-D uint8 codes (not empty), float16/bfloat16/float32/float64 scales of the
    grid's shape (partial edge tiles included), a valid ``block`` and ``profile``, ``dtype``
    float32. The reference's arithmetic, ``float32(code) × float32(scale)`` rounded once to
    float32 (vLLM ``scaled_dequantize``), with the code's value a lookup in the reference's
    own decode table and each tile row's scales widened across its columns once. Every NaN
    output is the canonical quiet NaN 0x7FC00000, as in the reference: under finite scales a
    NaN comes only from a NaN code, whose table value is that NaN and which the multiply
    returns as it is; a call with a NaN or infinite scale (a negative or payload NaN, a NaN
    code times a NaN scale, ``Inf · 0``) has its NaN outputs rewritten. Every other input
    goes to the reference. Spec: spec/fp8-block.md §6, "Dequantization".
    """
    if isinstance(codes, FP8BlockArray) and scales is None:
        return dequantize_fp8_block(codes.codes, codes.scales, block=codes.block,
                                    profile=codes.profile, dtype=dtype, threads=threads)
    c = codes if isinstance(codes, np.ndarray) else None
    s = scales if isinstance(scales, np.ndarray) else None
    record = reference_fp8_block.PRODUCERS.get(profile) if isinstance(profile, str) else None
    try:
        tile = reference_fp8_block.check_block(block)
    except ValueError:
        tile = None
    if (
        c is None
        or s is None
        or record is None
        or tile is None
        or np.dtype(dtype) != _F32
        or c.dtype != np.uint8
        or c.ndim != 2
        or c.size == 0
        or s.dtype not in (_F32, BF16, _F16, np.dtype(np.float64))
        or s.shape != reference_fp8_block.scale_grid(c.shape, tile)
    ):
        return FALLBACK
    tile_scales = s.astype(_F32)
    table = _fp8_values(record.code_format)
    nonfinite_scales = not np.isfinite(tile_scales).all()
    column_scales = np.repeat(tile_scales, tile[1], axis=1)[:, : c.shape[1]]
    column_scales = np.ascontiguousarray(column_scales)
    rows = np.ascontiguousarray(c)
    out = np.empty(c.shape, dtype=np.float32)

    def work(lo: int, hi: int) -> None:
        with np.errstate(over="ignore", invalid="ignore"):  # as the reference: Inf, NaN
            _fp8_block_rows(rows, table, column_scales, tile[0], out, lo, hi)
        if nonfinite_scales:
            out[lo:hi] = canonical_nan(out[lo:hi])

    _parallel(c.shape[0], work, threads, max(1, CHUNK_ELEMENTS // c.shape[1]))
    return out


