"""The compiled ``--source`` step of packed INT4 and Quark W4A8 modules
(:mod:`mxformats.fast.compiled_int4`), and the compiled quantizers it runs, in the fast paths'
calling conventions.

:func:`reproduce_int4` (compressed-tensors ``pack-quantized``, every group size and per
channel) and :func:`reproduce_w4a8` answer for one module in one pass over its source: every
checkpoint byte equal to what the producer profile writes, and the
:class:`~mxformats.fast.moments.Moments` of the consumer's decode of the checkpoint against
the source. They answer None wherever that pass does not apply or the answer is not "all
equal and finite" (no numba, another dtype or shape, a byte that differs, NaN/Inf): the
caller then runs the numpy fast paths, which give the same bytes, the same moments bits and
the messages that say where.

The kernels are told what to compute by plans read from the records
(:func:`int4_plan`: ``Int4Producer``'s scale floor, rounding
dtypes, division or reciprocal, and the layout's nibble order and offset;
:func:`fp8_plan`: the FP8 stage's format and limit); nothing here names a profile.

:func:`quantize_int4` and :func:`quantize_w4a8` are :func:`mxformats.fast.quantize_int4` and
:func:`mxformats.fast.quantize_w4a8` with the compiled row quantizers for the inputs they take
(``tests/test_fast_compiled_int4.py`` checks them with the harness); without numba, and for
every other input, they are the numpy fast paths.
"""

from __future__ import annotations

import sys
from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from mxformats.arith import BF16
from mxformats.fast import int4 as fast_int4
from mxformats.fast import jit
from mxformats.fast import w4a8 as fast_w4a8
from mxformats.fast.moments import LANES, TERMS, Moments
from mxformats.pairing import consumer_for
from mxformats.schemes import fp8 as reference_fp8
from mxformats.schemes import int4 as reference_int4
from mxformats.schemes import w4a8 as reference_w4a8
from mxformats.schemes.int4 import Int4Array
from mxformats.schemes.w4a8 import W4A8Array

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["fp8_plan", "int4_plan", "quantize_int4", "quantize_w4a8", "reproduce_int4",
           "reproduce_w4a8"]

_F32 = np.dtype(np.float32)
#: The source dtypes the passes read, and the shift that widens their bits to float32's.
_SHIFTS = {BF16: 16, _F32: 0}
_BITS = {BF16: np.uint16, _F32: np.uint32}
_LITTLE_ENDIAN = sys.byteorder == "little"


def _kernels() -> ModuleType | None:
    """:mod:`mxformats.fast.compiled_int4`, or None (no numba, or a big-endian host)."""
    return jit.compiled("compiled_int4") if _LITTLE_ENDIAN else None


@cache
def int4_plan(profile: str, dtype: np.dtype[Any], layout: str
              ) -> tuple[NDArray[np.int64], NDArray[np.float32], np.dtype[Any]]:
    """The kernels' plan (:data:`mxformats.fast.compiled_int4.INT4_PLAN`) of INT4 producer
    ``profile`` for input ``dtype`` (bfloat16 or float32) packed in ``layout``, and the dtype
    of the scales it stores; read from the producer record as
    ``mxformats.schemes.int4.group_scales`` and ``quotient_operand``
    read it."""
    producer = reference_int4.get_producer(profile)
    eps = ml_dtypes.finfo(dtype).eps if producer.eps is None else producer.eps
    order = reference_int4.NIBBLE_ORDER[layout]
    shifts = [0] * 8
    for nibble, element in enumerate(order):
        shifts[element] = 4 * nibble
    iplan = np.array([dtype == BF16, reference_int4.quotient_dtype(producer, dtype) == BF16,
                      producer.reciprocal, producer.floor == "maximum",
                      reference_int4.NIBBLE_OFFSET[layout], *shifts], dtype=np.int64)
    fplan = np.array([(reference_int4.QMAX - reference_int4.QMIN) / 2,
                      np.asarray(eps, dtype).astype(np.float32), reference_int4.QMIN,
                      reference_int4.QMAX], dtype=np.float32)
    stored = dtype if producer.scale_dtype == "input" else _F32
    return iplan, fplan, np.dtype(stored)


@cache
def fp8_plan(profile: str) -> tuple[NDArray[np.float64], reference_fp8.Fp8Producer]:
    """The FP8 stage of W4A8 producer ``profile`` for the kernels: its format's limit,
    smallest normal, subnormal rounder (``smallest subnormal * 2**23``) and dropped float32
    mantissa bits; and the FP8 record (None-free: a producer whose stage divides and rounds
    the quotient to the input dtype, the only kind the kernels compute)."""
    producer = reference_w4a8.get_producer(profile)
    record = reference_fp8.get_producer(producer.fp8_profile)
    fmt = producer.fp8_format
    assert fmt.min_normal is not None and fmt.min_subnormal is not None  # a float format
    plan = np.array([record.limit_for(fmt), fmt.min_normal, fmt.min_subnormal * 2.0**23,
                     23 - fmt.mbits], dtype=np.float64)
    return plan, record


def _computed(record: reference_fp8.Fp8Producer) -> bool:
    """Whether the kernels compute this FP8 stage: a true division, the quotient rounded to
    the input dtype, non-finite input refused (the ``static`` kind)."""
    return (not record.reciprocal and record.quotient_dtype == "input"
            and record.non_finite == "refuse")


def _rows(w: NDArray[Any]) -> NDArray[Any]:
    return np.ascontiguousarray(w).view(_BITS[w.dtype])


def _moments(kernel_result: tuple[Any, ...], kernels: ModuleType, totals: NDArray[np.float64],
             n: int) -> Moments | None:
    status, source_varies, weight_varies = kernel_result[:3]
    if status != kernels.OK:
        return None
    return Moments.from_lanes(totals, n, bool(source_varies), bool(weight_varies))


def reproduce_int4(w: NDArray[Any], packed: NDArray[Any], scales: NDArray[Any],
                   group: int | None, profile: str, consumer: str | None) -> Moments | None:
    """The moments of packed INT4 ``packed`` (int32 ``[O, I/8]``, the producer's layout) and
    ``scales`` (``[O, I/group]``, ``[O, 1]`` per channel, ``group`` None), decoded by
    ``consumer``, against source ``w`` (``[O, I]``), when every word and scale is what INT4
    producer ``profile`` writes from ``w`` and every value is finite; else None (as when numba
    is absent or the input is outside the pass: the caller computes it in numpy).

    The pass applies to a 2-D bfloat16 or float32 ``w`` with ``I`` a multiple of 8 and of the
    group, int32 words and scales of the dtype the producer stores, and a consumer whose
    product is float32 (rounded once to a bfloat16 scale's dtype where it computes in the
    scale's dtype)."""
    kernels = _kernels()
    producer = reference_int4.PRODUCERS.get(profile)
    if kernels is None or producer is None or w.dtype not in _SHIFTS or w.ndim != 2:
        return None
    rows, cols = w.shape
    size = cols if group is None else group
    iplan, fplan, stored = int4_plan(profile, w.dtype, producer.layout)
    own = reference_int4.get_consumer(consumer_for("int4", consumer or profile))
    product = stored if own.product_dtype == "scale" else _F32
    if (size <= 0 or cols == 0 or cols % 8 or cols % size or product not in _SHIFTS
            or packed.dtype != np.int32 or packed.shape != (rows, cols // 8)
            or scales.dtype != stored or scales.shape != (rows, cols // size)):
        return None
    totals = np.zeros((len(TERMS), LANES), dtype=np.float64)
    result = kernels.reproduce_int4(
        _rows(w), _SHIFTS[w.dtype], np.ascontiguousarray(packed).view(np.uint32),
        _rows(scales), _SHIFTS[stored], size, iplan, fplan, product == BF16, totals)
    return _moments(result, kernels, totals, w.size)


def _s1(weight_scale: NDArray[Any]) -> np.float32 | None:
    """The per-tensor scale as a float32 the pass can run with (float32 of shape ``()``, as
    the producer writes it; finite, positive), else None."""
    if weight_scale.dtype != _F32 or weight_scale.shape != ():
        return None
    s1 = np.float32(weight_scale.reshape(-1)[0])
    return s1 if np.isfinite(s1) and s1 > 0 else None


def reproduce_w4a8(w: NDArray[Any], weight: NDArray[Any], weight_scale: NDArray[Any],
                   weight_scale_2: NDArray[Any], profile: str,
                   consumer: str | None) -> Moments | None:
    """The moments of Quark W4A8 ``weight`` (int32 ``[O, I/8]``), ``weight_scale`` (float32,
    shape ``()``) and ``weight_scale_2`` (float32 ``[O]``), decoded by W4A8 ``consumer`` (the scales
    folded, ``q * float32(s2 * s1)``: :func:`mxformats.schemes.w4a8.dequantize_w4a8`), against
    source ``w`` (``[O, I]``), when every byte is what W4A8 producer ``profile`` writes from
    ``w`` and every value is finite; else None, as :func:`reproduce_int4`. The FP8 stage runs
    with the checkpoint's ``weight_scale``, which is then checked against the producer's scale
    of the tensor's largest magnitude (:func:`mxformats.schemes.fp8.per_tensor_scale`)."""
    kernels = _kernels()
    producer = reference_w4a8.PRODUCERS.get(profile)
    reader = reference_w4a8.CONSUMERS.get(consumer) if consumer is not None else None
    if (kernels is None or producer is None or reader is None or reader.layout != producer.layout
            or w.dtype not in _SHIFTS or w.ndim != 2):
        return None
    rows, cols = w.shape
    plan, record = fp8_plan(profile)
    s1 = _s1(weight_scale)
    if (s1 is None or not _computed(record) or cols == 0 or cols % 8
            or weight.dtype != np.int32 or weight.shape != (rows, cols // 8)
            or weight_scale_2.dtype != _F32 or weight_scale_2.shape != (rows,)):
        return None
    iplan, fplan, stored = int4_plan(producer.int4_profile, _F32, producer.layout)
    if stored != _F32:
        return None
    totals = np.zeros((len(TERMS), LANES), dtype=np.float64)
    result = kernels.reproduce_w4a8(
        _rows(w), w.dtype == BF16, s1, np.ascontiguousarray(weight).view(np.uint32),
        np.ascontiguousarray(weight_scale_2).view(np.uint32), plan, iplan, fplan, totals)
    amax = np.array([result[3]], dtype=np.uint32).view(_F32)[0]
    if reference_fp8.per_tensor_scale(amax, producer.fp8_format, record) != s1:
        return None
    return _moments(result, kernels, totals, w.size)


def quantize_int4(x: object, *, group_size: int | None = 32, axis: int = -1,
                  profile: str = "compressed-tensors", threads: int | None = None) -> Int4Array:
    """:func:`mxformats.fast.quantize_int4` (the same bytes), with 2-D bfloat16 or float32
    input along the last axis quantized by the compiled row quantizer :func:`reproduce_int4`
    runs. Everything else, and every call without numba, is the numpy fast path's."""
    kernels = _kernels()
    producer = reference_int4.PRODUCERS.get(profile) if isinstance(profile, str) else None
    data = x if isinstance(x, np.ndarray) else None
    if (kernels is None or producer is None or data is None or data.dtype not in _SHIFTS
            or data.ndim != 2 or axis not in (-1, 1) or data.size == 0
            or not (group_size is None or (type(group_size) is int and group_size > 0))
            or data.shape[1] % (group_size or data.shape[1])):
        return fast_int4.quantize_int4(x, group_size=group_size, axis=axis, profile=profile,
                                       threads=threads)
    size = group_size or data.shape[1]
    iplan, fplan, stored = int4_plan(profile, data.dtype, producer.layout)
    q = np.empty(data.shape, dtype=np.int8)
    scales = np.empty((data.shape[0], data.shape[1] // size), dtype=np.float32)
    if not kernels.quantize_int4_rows(_rows(data), _SHIFTS[data.dtype], size, iplan, fplan, q,
                                      scales):  # NaN/Inf: the reference refuses it
        return fast_int4.quantize_int4(x, group_size=group_size, axis=axis, profile=profile,
                                       threads=threads)
    return Int4Array(q=q, scales=scales.astype(stored), group_size=group_size, axis=1,
                     profile=profile)


def quantize_w4a8(w: object, *, profile: str = "quark") -> W4A8Array:
    """:func:`mxformats.fast.quantize_w4a8` (the same bytes), with 2-D bfloat16 or float32
    input whose row length is a multiple of 8 quantized by the compiled rows
    :func:`reproduce_w4a8` runs (the per-tensor scale from the reference's
    :func:`~mxformats.schemes.fp8.per_tensor_scale`). Everything else, and every call without
    numba, is the numpy fast path's."""
    kernels = _kernels()
    producer = reference_w4a8.PRODUCERS.get(profile) if isinstance(profile, str) else None
    data = w if isinstance(w, np.ndarray) else None
    if (kernels is None or producer is None or data is None or data.dtype not in _SHIFTS
            or data.ndim != 2 or data.size == 0 or data.shape[1] % 8
            or not _computed(fp8_plan(profile)[1])):
        return fast_w4a8.quantize_w4a8(w, profile=profile)
    plan, record = fp8_plan(profile)
    iplan, fplan, stored = int4_plan(producer.int4_profile, _F32, producer.layout)
    rows = _rows(data)
    amax = np.array([(rows.astype(np.uint32) << _SHIFTS[data.dtype] & 0x7FFFFFFF).max()],
                    dtype=np.uint32).view(_F32)[0]
    if not np.isfinite(amax) or stored != _F32:
        return fast_w4a8.quantize_w4a8(w, profile=profile)
    s1 = reference_fp8.per_tensor_scale(amax, producer.fp8_format, record)
    words = np.empty((data.shape[0], data.shape[1] // 8), dtype=np.uint32)
    s2 = np.empty(data.shape[0], dtype=np.float32)
    kernels.quantize_w4a8_rows(rows, data.dtype == BF16, s1, plan, iplan, fplan, words, s2)
    return W4A8Array(weight=words.view(np.int32), weight_scale=np.asarray(s1, _F32).reshape(()),
                weight_scale_2=s2)

