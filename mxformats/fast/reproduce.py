"""The compiled ``--source`` step per module (numba, :mod:`mxformats.fast.compiled`), and the
compiled MXFP4 block quantizer it runs, in the fast paths' calling conventions.

:func:`reproduce_mxfp4` answers for one MXFP4 module in one pass over the BF16 source: every
checkpoint byte equal to what the producer profile writes, and the :class:`~.moments.Moments`
of the dequantized checkpoint against the source. It answers None wherever that pass does not
apply or the answer is not "all equal and finite" (no numba, another dtype or shape, a byte
that differs, NaN/Inf): the caller then runs the numpy fast paths, which give the same bytes,
the same moments bits (:mod:`mxformats.fast.moments`) and the messages that say where.

:func:`quantize_mx` is :func:`mxformats.fast.quantize_mx` with the compiled block quantizer for
BF16 input (profiles ``ocp`` and ``quark``): ``tests/test_fast_compiled.py`` checks it with the
harness as the numpy fast paths are checked; without numba it is the numpy fast path.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from mxformats.arith import BF16
from mxformats.fast import jit
from mxformats.fast import mx as fast_mx
from mxformats.fast.chunks import BLOCK, _float_input
from mxformats.fast.moments import LANES, TERMS, Moments
from mxformats.fast.mx import _exact_mx_consumer, element_table
from mxformats.formats import E2M1, Format
from mxformats.schemes.mx import MXArray
from mxformats.schemes.mx.producers import get_producer

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["PROFILES", "quantize_mx", "reproduce_mxfp4"]

#: The MXFP4 producer profiles the compiled block quantizer computes.
PROFILES = ("ocp", "quark")
_LITTLE_ENDIAN = sys.byteorder == "little"


def _e2m1_values() -> NDArray[np.float32]:
    return E2M1.values.astype(np.float32)


def reproduce_mxfp4(w: NDArray[Any], codes: NDArray[Any], scales: NDArray[Any], profile: str,
                    consumer: str | None) -> Moments | None:
    """The moments of MXFP4 ``codes``/``scales`` (packed E2M1 ``[O, I/2]``, E8M0 ``[O,
    ceil(I/32)]``), dequantized by ``consumer``, against BF16 source ``w`` (``[O, I]``), when
    every byte is what ``profile`` writes from ``w`` and every value is finite; else None (as
    when numba is absent or the input is outside the pass: the caller computes it in numpy).

    The pass applies to a 2-D BF16 ``w`` with an even ``I`` (a multiple of 32 for ``ocp``),
    uint8 ``codes`` and ``scales`` of those shapes, a profile in :data:`PROFILES` and a
    consumer whose result is the float32 product ``element * 2**(b - 127)``
    (``mxformats.fast.mx._exact_mx_consumer``)."""
    kernels = jit.compiled()
    if kernels is None or not _LITTLE_ENDIAN or profile not in PROFILES:
        return None
    if w.dtype != BF16 or w.ndim != 2 or _exact_mx_consumer(consumer) is None:
        return None
    rows, cols = w.shape
    if (cols % 2 or (cols % BLOCK and not get_producer(profile).partial_blocks)
            or codes.dtype != np.uint8 or scales.dtype != np.uint8
            or codes.shape != (rows, cols // 2) or scales.shape != (rows, -(-cols // BLOCK))):
        return None
    totals = np.zeros((len(TERMS), LANES), dtype=np.float64)
    status, source_varies, weight_varies = kernels.reproduce_mxfp4_bf16(
        np.ascontiguousarray(w).view(np.uint16), np.ascontiguousarray(codes),
        np.ascontiguousarray(scales), profile == "quark", element_table(profile),
        _e2m1_values(), totals)
    if status != kernels.OK:
        return None
    return Moments.from_lanes(totals, w.size, source_varies, weight_varies)


def quantize_mx(x: object, elem: Format = E2M1, *, block_size: int = 32, axis: int = -1,
                profile: str = "ocp", threads: int | None = None) -> MXArray:
    """:func:`mxformats.fast.quantize_mx` (the same bytes), with BF16 input of MXFP4 profile
    ``ocp`` or ``quark`` quantized by the compiled block quantizer :func:`reproduce_mxfp4`
    runs. Everything else, and every call without numba, is the numpy fast path's."""
    kernels = jit.compiled()
    data = _float_input(x)
    if (kernels is None or not _LITTLE_ENDIAN or data is None or data.dtype != BF16
            or elem is not E2M1 or block_size != BLOCK or profile not in PROFILES
            or data.ndim == 0 or not -data.ndim <= axis < data.ndim):
        return fast_mx.quantize_mx(x, elem, block_size=block_size, axis=axis, profile=profile,
                                   threads=threads)
    ax = axis % data.ndim
    moved = np.ascontiguousarray(np.moveaxis(data, ax, -1))
    n = moved.shape[-1]
    if n % 2 or (n % BLOCK and not get_producer(profile).partial_blocks) or moved.size == 0:
        return fast_mx.quantize_mx(x, elem, block_size=block_size, axis=axis, profile=profile,
                                   threads=threads)
    rows = moved.reshape(-1, n).view(np.uint16)
    packed = np.empty((rows.shape[0], n // 2), dtype=np.uint8)
    scales = np.empty((rows.shape[0], -(-n // BLOCK)), dtype=np.uint8)
    if not kernels.quantize_mx_bf16(rows, profile == "quark", element_table(profile), packed,
                                    scales):  # NaN/Inf: each profile's own rule
        return fast_mx.quantize_mx(x, elem, block_size=block_size, axis=axis, profile=profile,
                                   threads=threads)
    codes = np.moveaxis(packed.reshape(*moved.shape[:-1], -1), -1, ax)
    block_scales = np.moveaxis(scales.reshape(*moved.shape[:-1], -1), -1, ax)
    return MXArray(np.ascontiguousarray(codes), np.ascontiguousarray(block_scales), E2M1, BLOCK,
                   ax, profile)
