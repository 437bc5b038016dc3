"""The compiled ``--source`` step for one NVFP4 module (numba,
:mod:`mxformats.fast.compiled_nvfp4`), and the compiled NVFP4 quantizer it runs, in the fast
paths' calling conventions.

:func:`reproduce_nvfp4` answers for one NVFP4 module (ModelOpt or compressed-tensors) in one
pass over the BF16 source: every checkpoint byte equal to what the producer profile writes,
and the :class:`~.moments.Moments` of the checkpoint decoded by the consumer against the
source. The pass quantizes with the checkpoint's own global scale and, at its end, checks that
the producer writes exactly that one from this module's largest magnitude (the module
calibrated alone). A module whose stored global scale comes from its fused sibling (ModelOpt
``sync_moe_gate_up_amax``, llm-compressor's fused gate/up global scale: the sibling's amax is
the larger) is declined: the numpy path reads the sibling's source and decides. It answers
None wherever the pass does not apply or the answer is not "all equal and finite" (no numba,
another dtype or shape, a byte that differs, NaN/Inf): the caller then runs the numpy fast
paths, which give the same bytes, the same moments bits (:mod:`mxformats.fast.moments`) and
the messages that say where.

Which float32 operations run is the producer's and consumer's records'
(:func:`producer_plan`, :func:`consumer_plan`), never a profile name.

:func:`quantize_nvfp4` is :func:`mxformats.fast.quantize_nvfp4` with the compiled quantizer
for BF16 input: ``tests/test_fast_compiled_nvfp4.py`` checks it with the harness as the numpy
fast paths are checked; without numba it is the numpy fast path.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from mxformats.arith import BF16
from mxformats.fast import jit
from mxformats.fast import nvfp4 as fast_nvfp4
from mxformats.fast.chunks import _float_input
from mxformats.fast.moments import LANES, TERMS, Moments
from mxformats.fast.nvfp4 import NVFP4_BLOCK
from mxformats.formats import E4M3FN
from mxformats.schemes.nvfp4 import (
    CONSUMERS,
    E2M1_MAX,
    PRODUCERS,
    NVFP4Array,
    NVFP4Producer,
    nvfp4_scales,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["consumer_plan", "producer_plan", "quantize_nvfp4", "reproduce_nvfp4"]

#: The compiled module (:func:`mxformats.fast.jit.compiled`).
KERNELS = "compiled_nvfp4"
_LITTLE_ENDIAN = sys.byteorder == "little"
_F32 = np.dtype(np.float32)
_E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
#: float32 bits of +Inf: a largest magnitude at or above it is Inf or NaN
_INFINITY = 0x7F800000


def producer_plan(producer: NVFP4Producer, stored: np.float32) -> tuple[Any, ...] | None:
    """The producer's block-scale arithmetic on BF16 input with stored global scale
    ``stored``, as :mod:`mxformats.fast.compiled_nvfp4` runs it (its docstring names the
    fields), derived from the record as :func:`~mxformats.schemes.nvfp4.nvfp4_scales` reads
    it: the ``scale_2`` form divides the block maximum by ``f32(6 * stored)`` and multiplies
    the scale by ``stored``; the ``inverse`` form divides it by 6 in the arithmetic dtype
    (bfloat16 for ``arithmetic="input"``: rounded), multiplies by ``stored`` and divides the
    scale by it. None where ``stored`` is not a positive finite float32 or the record's clamp
    is not a float32 value (outside the pass)."""
    value = np.float32(stored)
    if not (np.isfinite(value) and value > 0):
        return None
    floor, ceiling = np.float32(producer.scale_floor), np.float32(E4M3FN.max)
    if float(floor) != producer.scale_floor:
        return None
    six = np.float32(E2M1_MAX)
    with np.errstate(over="ignore"):
        if producer.global_form == "scale_2":
            divide, multiply, divisor_divides, round_bf16 = six * value, np.float32(1), False, False
        else:
            divide, multiply, divisor_divides = six, value, True
            round_bf16 = producer.arithmetic_dtype(BF16) == BF16
    zero = producer.zero_block_scale
    return (np.float32(divide), np.float32(multiply), bool(round_bf16),
            not producer.zero_after_cast, np.float32(zero), bool(producer.zero_after_cast),
            np.uint8(E4M3FN.encode(np.float64(zero))), floor, ceiling, value,
            bool(divisor_divides))


def consumer_plan(name: str, stored: np.float32) -> tuple[bool, np.float32] | None:
    """Consumer ``name``'s decode as ``(divides, post)``
    (:mod:`mxformats.fast.compiled_nvfp4`): ``multiply`` posts ``stored``, ``reciprocal``
    ``f32(1 / stored)``, ``divide`` divides the block scale by ``stored`` and posts 1 (exact).
    None for an unknown consumer."""
    consumer = CONSUMERS.get(name)
    if consumer is None:
        return None
    value = np.float32(stored)
    if consumer.global_op == "multiply":
        return False, value
    if consumer.global_op == "reciprocal":
        return False, np.float32(np.float32(1) / value)
    return True, np.float32(1)


def _produced_global(producer: NVFP4Producer, largest: int,
                     global_amax: float | None = None) -> np.float32:
    """The global scale ``producer`` writes for a BF16 tensor whose largest magnitude has
    float32 bits ``largest`` (or for ``global_amax``): the reference's own
    :func:`nvfp4_scales` (its ValueError for a ``global_amax`` it refuses)."""
    amax = np.asarray([np.uint32(largest)], dtype=np.uint32).view(_F32).astype(BF16)
    return nvfp4_scales(producer, amax, global_amax).stored


def reproduce_nvfp4(w: NDArray[Any], packed: NDArray[Any], scales: NDArray[Any],
                    global_scale: NDArray[Any], profile: str, consumer: str | None
                    ) -> Moments | None:
    """The moments of NVFP4 ``packed`` codes / E4M3 ``scales`` / ``global_scale`` (``[O,
    I/2]`` uint8, ``[O, I/16]`` float8_e4m3fn, float32 of the producer's global shape),
    decoded by ``consumer``, against BF16 source ``w`` (``[O, I]``), when every byte is what
    producer ``profile`` writes from ``w`` calibrated alone and every value is finite; else
    None (as when numba is absent or the input is outside the pass: the caller computes it
    in numpy)."""
    kernels = jit.compiled(KERNELS)
    producer = PRODUCERS.get(profile)
    if kernels is None or not _LITTLE_ENDIAN or producer is None or consumer is None:
        return None
    reader = CONSUMERS.get(consumer)
    if reader is None or reader.global_form != producer.global_form:
        return None
    if w.dtype != BF16 or w.ndim != 2 or w.shape[1] % NVFP4_BLOCK:
        return None
    rows, cols = w.shape
    g = np.asarray(global_scale)
    if (packed.dtype != np.uint8 or scales.dtype != _E4M3 or g.dtype != _F32
            or packed.shape != (rows, cols // 2) or scales.shape != (rows, cols // NVFP4_BLOCK)
            or g.shape != producer.global_shape):
        return None
    stored = np.float32(g.reshape(()))
    plan, decode = producer_plan(producer, stored), consumer_plan(consumer, stored)
    if plan is None or decode is None:
        return None
    totals = np.zeros((len(TERMS), LANES), dtype=np.float64)
    status, source_varies, weight_varies, largest = kernels.reproduce_nvfp4_bf16(
        np.ascontiguousarray(w).view(np.uint16), np.ascontiguousarray(packed),
        np.ascontiguousarray(scales).view(np.uint8), plan, decode, totals)
    if status != kernels.OK or largest >= _INFINITY:
        return None
    if _produced_global(producer, int(largest)).tobytes() != stored.tobytes():
        return None  # not this module's own amax: its fused sibling's (the numpy path reads it)
    return Moments.from_lanes(totals, w.size, source_varies, weight_varies)


def quantize_nvfp4(x: object, *, axis: int = -1, profile: str = "modelopt",
                   global_amax: float | None = None, threads: int | None = None) -> NVFP4Array:
    """:func:`mxformats.fast.quantize_nvfp4` (the same bytes), with finite BF16 input
    quantized by the compiled quantizer :func:`reproduce_nvfp4` runs: the global scale by the
    reference's :func:`nvfp4_scales` from the compiled maximum, the block scales and codes
    compiled. Everything else (another dtype, a length not a multiple of 16, NaN/Inf, a global
    scale outside :func:`producer_plan`: ModelOpt's all-zero tensor), and every call without
    numba, is the numpy fast path's."""
    kernels = jit.compiled(KERNELS)
    data = _float_input(x)
    producer = PRODUCERS.get(profile) if isinstance(profile, str) else None

    def numpy_path() -> NVFP4Array:
        return fast_nvfp4.quantize_nvfp4(x, axis=axis, profile=profile,
                                         global_amax=global_amax, threads=threads)

    if (kernels is None or not _LITTLE_ENDIAN or data is None or data.dtype != BF16
            or producer is None or data.ndim == 0 or not -data.ndim <= axis < data.ndim):
        return numpy_path()
    ax = axis % data.ndim
    moved = np.ascontiguousarray(np.moveaxis(data, ax, -1))
    n = moved.shape[-1]
    if n == 0 or n % NVFP4_BLOCK or moved.size == 0:
        return numpy_path()
    rows = moved.reshape(-1, n).view(np.uint16)
    largest = int(kernels.magnitude_max_bf16(rows))
    if largest >= _INFINITY:
        return numpy_path()
    try:
        stored = _produced_global(producer, largest, global_amax)
    except ValueError:  # a global_amax the reference refuses: its message
        return numpy_path()
    plan = producer_plan(producer, stored)
    if plan is None:
        return numpy_path()
    codes = np.empty(rows.shape, dtype=np.uint8)
    scales = np.empty((rows.shape[0], n // NVFP4_BLOCK), dtype=np.uint8)
    kernels.quantize_nvfp4_bf16(rows, plan, codes, scales)
    return NVFP4Array(
        codes=np.ascontiguousarray(np.moveaxis(codes.reshape(moved.shape), -1, ax)),
        scales=np.ascontiguousarray(np.moveaxis(
            scales.reshape(*moved.shape[:-1], -1), -1, ax)),
        global_scale=np.full(producer.global_shape, stored, dtype=_F32),
        profile=producer.name, axis=ax)
