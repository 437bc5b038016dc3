"""W4A8 fast paths: :func:`quantize_w4a8` (:func:`mxformats.schemes.w4a8.quantize_w4a8`, the
reference's stages done by the other fast paths) and :func:`dequantize_w4a8`
(:func:`mxformats.schemes.w4a8.dequantize_w4a8`). Spec: w4a8.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mxformats.containers import containers
from mxformats.fast.chunks import (
    _F32,
    CHUNK_ELEMENTS,
    _parallel,
)
from mxformats.fast.codec import (
    decode,
)
from mxformats.fast.fallback import FALLBACK, Fallback, fast_path
from mxformats.fast.fp8 import quantize_fp8
from mxformats.fast.int4 import pack_int4, quantize_int4, unpack_int4
from mxformats.schemes import w4a8 as reference_w4a8
from mxformats.schemes.w4a8 import W4A8Array, W4A8Stages

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike, NDArray

__all__ = ["dequantize_w4a8", "quantize_w4a8"]

#: The fast paths :func:`quantize_w4a8` composes (each byte-identical to its reference stage).
_W4A8_STAGES = W4A8Stages(quantize_fp8, decode, quantize_int4, pack_int4)


@containers()
def quantize_w4a8(w: object, *, profile: str = "quark") -> W4A8Array:
    """:func:`mxformats.schemes.w4a8.quantize_w4a8`, the same bytes: the reference's two stages
    and packing (:func:`~mxformats.schemes.w4a8.quantize_w4a8_with`) done by
    :func:`quantize_fp8`, :func:`decode`, :func:`quantize_int4` (per channel) and
    :func:`pack_int4`, each on :func:`~mxformats.fast.chunks.workers` threads. Spec: w4a8.md."""
    return reference_w4a8.quantize_w4a8_with(_W4A8_STAGES, w, profile=profile)


@containers()
@fast_path(reference_w4a8.dequantize_w4a8)
def dequantize_w4a8(
    weight: ArrayLike | W4A8Array, weight_scale: ArrayLike | None,
    weight_scale_2: ArrayLike | None, *, dtype: DTypeLike, threads: int | None,
) -> NDArray[np.generic] | Fallback:
    """:func:`mxformats.schemes.w4a8.dequantize_w4a8`, the same bytes, fast to float32.

    Fast path: int32 words ``[O, W]``, a float32 scalar ``weight_scale`` and float32
    ``weight_scale_2 [O]`` whose folded products ``float32(s2 × s1)`` (the reference's) are
    all finite, ``dtype`` float32. The reference multiplies ``float32(q) × f`` in float32 and
    rounds the product to ``dtype`` through float64, which for float32 changes nothing: the
    float32 multiply is the whole result, overflow to ±Inf included, written in cache-sized
    row chunks. The codes come from :func:`unpack_int4`. Spec: w4a8.md, "Dequantization".
    """
    if isinstance(weight, W4A8Array):
        weight, weight_scale, weight_scale_2 = weight
    words = weight if isinstance(weight, np.ndarray) else None
    s1 = weight_scale if isinstance(weight_scale, np.ndarray) else None
    s2 = weight_scale_2 if isinstance(weight_scale_2, np.ndarray) else None
    if (
        words is None or s1 is None or s2 is None
        or words.dtype != np.int32 or words.ndim != 2 or words.size == 0
        or s1.dtype != _F32 or s1.size != 1
        or s2.dtype != _F32 or s2.shape != (words.shape[0],)
        or np.dtype(dtype) != _F32
    ):
        return FALLBACK
    with np.errstate(over="ignore"):  # the reference's folding: Inf where it overflows
        folded = s2 * s1.reshape(())
    if not np.isfinite(folded).all():
        return FALLBACK
    q = unpack_int4(words, layout=reference_w4a8.CONSUMERS["vllm"].layout, axis=-1,
                    threads=threads)
    out = np.empty(q.shape, dtype=np.float32)
    factor = folded[:, None]

    def work(lo: int, hi: int) -> None:
        with np.errstate(over="ignore"):  # overflow to Inf is the specified result
            np.multiply(q[lo:hi], factor[lo:hi], out=out[lo:hi])

    _parallel(q.shape[0], work, threads, max(1, CHUNK_ELEMENTS // q.shape[1]))
    return out


