"""FP8 per-tensor fast path: :func:`quantize_fp8`
(:func:`mxformats.schemes.fp8.quantize_fp8`, the producer profile ``static``). Spec: w4a8.md,
"FP8 per tensor".
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from mxformats.arith import divide_in
from mxformats.containers import containers
from mxformats.fast.chunks import (
    _EXPONENT_SHIFT,
    _F32,
    _MAGNITUDE,
    _NONFINITE_EXPONENT,
    CHUNK_ELEMENTS,
    _float32_bits,
    _float_input,
    _parallel,
)
from mxformats.fast.codec import (
    _QUOTIENT_INPUTS,
    _quotient_codes,
    _quotient_table,
)
from mxformats.fast.fallback import FALLBACK, Fallback, fast_path
from mxformats.formats import Format
from mxformats.schemes import fp8 as reference_fp8

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["fp8_table", "quantize_fp8"]


@cache
def fp8_table(profile: str, fmt: Format, dtype: np.dtype[Any]) -> NDArray[np.uint8]:
    """The ``fmt`` code of every class of float32 quotients under FP8 per-tensor ``profile``
    for input ``dtype``: the quotient rounded to the profile's quotient dtype, then
    :func:`mxformats.schemes.fp8.per_tensor_codes`."""
    record = reference_fp8.get_producer(profile)
    work = np.dtype(dtype) if record.quotient_dtype == "input" else _F32
    return _quotient_table(
        lambda q: reference_fp8.per_tensor_codes(q.astype(work), fmt, record, np.dtype(dtype)))


@containers()
@fast_path(reference_fp8.quantize_fp8)
def quantize_fp8(
    x: object, fmt: Format, *, profile: str, threads: int | None,
) -> tuple[NDArray[np.uint8], NDArray[np.float32]] | Fallback:
    """:func:`mxformats.schemes.fp8.quantize_fp8`, the same bytes, fast for the producer
    profile ``static`` (Quark) from float32 and bfloat16 input.

    Fast path: a profile that refuses non-finite input (``static``), a format it writes,
    float32 or bfloat16 numpy data (or torch tensor) of finite values, not empty. Two passes
    by chunks: the tensor's largest magnitude (the reference's
    :func:`~mxformats.schemes.fp8.per_tensor_scale` turns it into the scale), then each
    quotient ``x / s``, one float32 operation as the producer's, whose rounding to the quotient
    dtype, clamp and cast are one lookup in :func:`fp8_table`. A non-finite input goes to the
    reference, which refuses it; so does every other input. Spec: w4a8.md, "FP8 per tensor".
    """
    data = _float_input(x)
    record = reference_fp8.PRODUCERS.get(profile) if isinstance(profile, str) else None
    if (
        data is None
        or record is None
        or record.non_finite != "refuse"
        or fmt not in record.formats
        or data.dtype not in _QUOTIENT_INPUTS
        or data.size == 0
    ):
        return FALLBACK
    flat = np.ascontiguousarray(data).reshape(-1)
    maxima: list[int] = []

    def largest(lo: int, hi: int) -> None:
        wide = np.empty(min(CHUNK_ELEMENTS, hi - lo), dtype=np.uint32)
        for start in range(lo, hi, CHUNK_ELEMENTS):
            stop = min(start + CHUNK_ELEMENTS, hi)
            bits = _float32_bits(flat[start:stop], wide[: stop - start])
            maxima.append(int(np.bitwise_and(bits, _MAGNITUDE).max()))

    _parallel(flat.size, largest, threads, CHUNK_ELEMENTS)
    amax_bits = max(maxima)
    if amax_bits >> _EXPONENT_SHIFT == _NONFINITE_EXPONENT:
        return FALLBACK
    amax = np.float32(np.array([amax_bits], dtype=np.uint32).view(_F32)[0])
    scale = reference_fp8.per_tensor_scale(amax, fmt, record)
    work = data.dtype if record.quotient_dtype == "input" else _F32
    operand = np.float32(divide_in(1, scale, work)) if record.reciprocal else scale
    table = fp8_table(profile, fmt, data.dtype)
    codes = np.empty(flat.size, dtype=np.uint8)

    def encode_chunks(lo: int, hi: int) -> None:
        wide = np.empty(min(CHUNK_ELEMENTS, hi - lo), dtype=np.uint32)
        scratch = np.empty_like(wide)
        for start in range(lo, hi, CHUNK_ELEMENTS):
            n = min(start + CHUNK_ELEMENTS, hi) - start
            bits = _float32_bits(flat[start:start + n], wide[:n])
            _quotient_codes(bits.view(_F32), operand, record.reciprocal, table,
                            codes[start:start + n], wide[:n], scratch[:n])

    _parallel(flat.size, encode_chunks, threads, CHUNK_ELEMENTS)
    return codes.reshape(data.shape), np.asarray(scale, dtype=_F32).reshape(())


