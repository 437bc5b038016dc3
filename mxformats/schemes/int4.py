"""Symmetric INT4 per-group / per-channel quantization and the INT4 packings.

Spec: ``spec/int4-schemes.md`` (the producers' arithmetic, the input classes) and
``spec/int4-layouts.md`` (the word layouts with bit diagrams).

A *profile* names the producer whose bytes are reproduced, including the dtype it computes in:

- ``compressed-tensors`` (compressed-tensors 0.19/0.20 ``calculate_qparams`` + ``quantize`` +
  ``pack_to_int32``; how llm-compressor's ``QuantizationModifier`` writes ``pack-quantized``):
  everything in the **input's dtype**: ``s = dtype(amax / 7.5)`` (an all-zero group gets the
  dtype's machine epsilon), ``q = clamp(round_half_even(dtype(x / s)), -8, 7)``, a true
  division. Scales come back in the input dtype (bfloat16 for a BF16 checkpoint).
- ``quark`` (AMD Quark 0.13 ``Int4PerChannelSpec`` / ``Int4PerGroupSpec``, ``half_even``,
  symmetric, ``scale_type`` float32 as the file-to-file export forces it): the scale is
  ``amax / 7.5`` computed in the input dtype, ``max``-ed with 2^-23, stored as float32; then
  ``q = clamp(round_half_even(float32(x) * float32(1 / s)), -8, 7)``: a multiply by the
  reciprocal, in float32.

Both producers require the length along the quantized axis to be a multiple of ``group_size``
(compressed-tensors 0.20.1 ``_process_group`` and Quark's ``PerGroupMinMaxObserver`` raise
otherwise), so :func:`quantize_int4` raises too. Packing is defined for any length: words are
padded (``ceil(n / 8)``), see :func:`pack_int4`.

Because the arithmetic dtype is part of the profile, **the same values given as bfloat16 and as
float32 may encode differently** (``dtype(x / s)`` rounds to 8 significant bits in bfloat16).
Pass the dtype the producer saw: a BF16 checkpoint's weights as ``ml_dtypes.bfloat16`` (or a
torch bfloat16 tensor), never widened to float32 first.

Inputs containing NaN or ±Inf are *implementation-defined* here: both producers turn them into
NaN scales or undefined float→int casts, so every quantizer in this module raises ValueError.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import ml_dtypes
import numpy as np

from mxformats.arith import (
    as_float_array,
    check_axis,
    divide_in,
    multiply_in,
    require_finite,
    round_half_even,
    round_once,
)
from mxformats.containers import containers
from mxformats.packing import (
    LAYOUTS,
    QMAX,
    QMIN,
    check_layout,
    pack_int4,
    unpack_int4,
)

# The word layouts, named here too: the fast path and the kernel plans read them from the scheme.
from mxformats.packing import NIBBLE_OFFSET as NIBBLE_OFFSET
from mxformats.packing import NIBBLE_ORDER as NIBBLE_ORDER
from mxformats.pairing import consumer_for
from mxformats.records import ConsumerRecord, ProducerRecord
from mxformats.registry import Scheme, register

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike, NDArray

__all__ = [
    "LAYOUTS",
    "Int4Array",
    "check_axis",
    "check_group_scales",
    "check_group_size",
    "check_layout",
    "dequantize_int4",
    "pack_int4",
    "quantize_int4",
    "unpack_int4",
]

#: The consumer :func:`dequantize_int4` reads plain arrays with when no profile is given.
DEFAULT_CONSUMER = "compressed-tensors"

_HALF_RANGE = (QMAX - QMIN) / 2

@dataclass(frozen=True)
class Int4Producer(ProducerRecord):
    """One INT4 producer as data (spec: ``int4-schemes.md``); :func:`quantize_int4` and the
    kernels (:mod:`mxformats.kernels.int4_plan`) read nothing else.

    Both producers compute the scale ``amax / 7.5`` in the input dtype, then:

    Attributes:
        name, library, version, function, description: the registry entry
            (:class:`~mxformats.records.Record`).
        eps: the scale floor; None is the input dtype's machine epsilon
            (``torch.finfo(dtype).eps``).
        floor: ``"zero"``: only a zero scale (an all-zero group) becomes ``eps``;
            ``"maximum"``: ``max(scale, eps)``.
        scale_dtype: the stored scale: ``"input"`` (the input dtype) or ``"float32"``.
        reciprocal: ``q = round(x * (1 / s))`` (a multiply by the reciprocal) instead of
            ``round(x / s)`` (a true division).
        quotient_dtype: the dtype ``x / s`` (or ``x * (1 / s)``) is rounded to before
            ``round_half_even``: ``"input"`` or ``"float32"``.
        float64_refused: why the producer is not defined for float64 input, or None.
        layout: the word layout its checkpoints pack ``q`` in (:data:`LAYOUTS`).
    """

    eps: float | None
    floor: Literal["zero", "maximum"]
    scale_dtype: Literal["input", "float32"]
    reciprocal: bool
    quotient_dtype: Literal["input", "float32"]
    float64_refused: str | None
    layout: str

    scheme: ClassVar[Scheme] = "int4"


@dataclass(frozen=True)
class Int4Consumer(ConsumerRecord):
    """One INT4 consumer as data: ``q × scale`` computed and rounded once in ``product_dtype``
    (``"scale"``: the scale's dtype; ``"float32"``: both operands widened to float32)."""

    product_dtype: Literal["scale", "float32"]

    scheme: ClassVar[Scheme] = "int4"


_CT = ("compressed-tensors", "0.19-0.20.1")
_QUARK = ("amd-quark", "0.13")

#: INT4 producers by profile name.
PRODUCERS: dict[str, Int4Producer] = {
    "compressed-tensors": Int4Producer(
        "compressed-tensors", *_CT,
        function="quantization.utils.helpers.calculate_qparams + lifecycle.forward.quantize "
        "+ compressors.pack_quantized.helpers.pack_to_int32",
        description="s = dtype(amax/7.5), q = round_half_even(dtype(x/s)) in the input dtype; "
        "q+8 nibbles, element 8c+i in nibble i",
        eps=None,
        floor="zero",
        scale_dtype="input",
        reciprocal=False,
        quotient_dtype="input",
        float64_refused=None,
        layout="compressed-tensors",
    ),
    "quark": Int4Producer(
        "quark", *_QUARK,
        function="observer.calculate_int_quant_params + hw_emulation_interface."
        "real_quantize_int_per_channel_affine / _per_group_affine",
        description="s = float32(max(amax/7.5, 2^-23)), q = round_half_even(x * (1/s)) in "
        "float32 (reciprocal multiply)",
        eps=float(np.finfo(np.float32).eps),  # Quark's observer eps, torch.finfo(float32).eps
        floor="maximum",
        scale_dtype="float32",
        reciprocal=True,
        quotient_dtype="float32",
        float64_refused="Quark's observers narrow float64 to float32 in some paths and not in "
        "others",
        layout="quark",
    ),
}
#: INT4 consumers by profile name.
CONSUMERS: dict[str, Int4Consumer] = {
    "compressed-tensors": Int4Consumer(
        "compressed-tensors", *_CT,
        function="lifecycle.forward.dequantize (q.to(scale.dtype) * scale)",
        description="q × scale rounded to the scale dtype (bfloat16 for BF16 checkpoints)",
        product_dtype="scale",
    ),
    "quark": Int4Consumer(
        "quark", *_QUARK,
        function="hw_emulation_interface.dequantize_int_per_channel_affine / _per_group_affine",
        description="q × scale in float32",
        product_dtype="float32",
    ),
}
for _record in (*PRODUCERS.values(), *CONSUMERS.values()):
    register(_record.info)

#: The profile names (each is both a producer and a consumer).
PROFILES = tuple(PRODUCERS)


def get_producer(profile: str) -> Int4Producer:
    """The producer record of ``profile``; ValueError listing the valid names otherwise."""
    if profile not in PRODUCERS:
        raise ValueError(
            f"unknown int4 producer profile {profile!r}; valid: {', '.join(PRODUCERS)}"
        )
    return PRODUCERS[profile]


def get_consumer(profile: str) -> Int4Consumer:
    """The consumer record of ``profile``; ValueError listing the valid names otherwise."""
    if profile not in CONSUMERS:
        raise ValueError(
            f"unknown int4 consumer profile {profile!r}; valid: {', '.join(CONSUMERS)}"
        )
    return CONSUMERS[profile]


# -- groups -----------------------------------------------------------------------------------


def _grouped(x: NDArray[Any], group_size: int | None, axis: int) -> NDArray[Any]:
    """``x`` with ``axis`` moved last and split into ``(..., groups, group_size)``."""
    moved = np.moveaxis(x, axis, -1)
    n = moved.shape[-1]
    size = n if group_size is None else group_size
    if n == 0 or n % size:
        raise ValueError(
            f"the quantized axis has length {n}, not a positive multiple of group_size {size}: "
            "neither producer defines it (compressed-tensors 0.20.1 _process_group and Quark's "
            "PerGroupMinMaxObserver raise)"
        )
    return moved.reshape(*moved.shape[:-1], n // size, size)


def _ungrouped(g: NDArray[Any], axis: int) -> NDArray[Any]:
    return np.moveaxis(g.reshape(*g.shape[:-2], -1), -1, axis)


def check_group_scales(shape: tuple[int, ...], scales_shape: tuple[int, ...],
                       group_size: int | None, axis: int) -> tuple[int, int, int]:
    """The scales of ``shape``-shaped values must have ``shape`` with ``axis`` divided by
    ``group_size`` (None: one group per slice). Returns ``(axis, n, group)``: the axis in
    ``[0, ndim)``, its length and the group size; ValueError otherwise."""
    ax = check_axis(len(shape), axis)
    n = shape[ax]
    size = n if group_size is None else group_size
    expected = list(shape)
    expected[ax] = n // size if size and n % size == 0 else -1
    if list(scales_shape) != expected:
        raise ValueError(
            f"scales have shape {tuple(scales_shape)}; {tuple(shape)} in groups of {size} "
            f"along axis {ax} needs {tuple(expected)}"
        )
    return ax, n, size


def check_group_size(group_size: int | None) -> None:
    """ValueError unless ``group_size`` is a positive int or None (one group per slice)."""
    if group_size is not None and (not isinstance(group_size, int) or group_size <= 0):
        raise ValueError(f"group_size must be a positive int or None, got {group_size!r}")


# -- quantize ---------------------------------------------------------------------------------


def _quantize_groups(
    g: NDArray[Any], producer: Int4Producer
) -> tuple[NDArray[np.int8], NDArray[Any]]:
    """``(q, scales)`` of the groups ``g`` (last axis) with ``producer``'s arithmetic.

    compressed-tensors (``calculate_qparams``: ``max_val_pos / (bit_range / 2)`` in the observed
    dtype, zeros replaced by ``torch.finfo(dtype).eps``; ``_quantize``: ``x / scale`` in the
    dtype, clamp to [-8, 7], ``torch.round``). Quark 0.13 (``calculate_int_quant_params``:
    ``max(amax / 7.5, eps)`` in the observed dtype, ``.to(float32)``;
    ``real_quantize_int_per_channel_affine``: ``round(float32(x) * (1.0 / scale))``).
    """
    stored = group_scales(np.max(np.abs(g), axis=-1), producer)
    work = quotient_dtype(producer, g.dtype)
    operand = quotient_operand(stored, producer, g.dtype)[..., None]
    quotient = multiply_in(g, operand, work) if producer.reciprocal else divide_in(g, operand, work)
    return round_to_int4(quotient), stored


def group_scales(amax: NDArray[Any], producer: Int4Producer) -> NDArray[Any]:
    """The stored scales of groups whose largest magnitudes are ``amax`` (in the input dtype):
    ``amax / 7.5`` in that dtype, floored at ``producer.eps``, in the producer's scale dtype."""
    dtype = amax.dtype
    scale = divide_in(amax, _HALF_RANGE, dtype)
    eps = np.asarray(ml_dtypes.finfo(dtype).eps if producer.eps is None else producer.eps, dtype)
    scale = np.where(scale == 0, eps, scale) if producer.floor == "zero" else np.maximum(scale, eps)
    return scale.astype(dtype if producer.scale_dtype == "input" else np.float32)


def quotient_dtype(producer: Int4Producer, dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype ``x / s`` (or ``x * (1 / s)``) is rounded to for input ``dtype``."""
    return dtype if producer.quotient_dtype == "input" else np.dtype(np.float32)


def quotient_operand(stored: NDArray[Any], producer: Int4Producer,
                     dtype: np.dtype[Any]) -> NDArray[Any]:
    """What ``x`` is divided by (the stored scale) or, for a ``reciprocal`` producer,
    multiplied by (``1 / s`` rounded to the quotient dtype)."""
    if producer.reciprocal:
        work = quotient_dtype(producer, dtype)
        reciprocal: NDArray[Any] = divide_in(1, stored, work)
        return reciprocal
    return stored


def round_to_int4(quotient: NDArray[Any]) -> NDArray[np.int8]:
    """The INT4 values of quotients already rounded to the quotient dtype: ``torch.round``
    (half to even), clamped to [-8, 7]."""
    q: NDArray[np.int8] = np.clip(round_half_even(quotient.astype(np.float64)), QMIN,
                                  QMAX).astype(np.int8)
    return q


@containers()
def quantize_int4(
    x: object, *, group_size: int | None = 32, axis: int = -1, profile: str = "compressed-tensors"
) -> Int4Array:
    """Symmetric INT4 quantization with the producer ``profile``'s arithmetic.

    ``x``: float16, bfloat16, float32 or float64 (numpy, ``ml_dtypes.bfloat16`` or torch); the
    profile computes in the dtype its producer does for that input (module docstring).
    ``group_size``: elements per scale along ``axis``, or None for one scale per slice along
    ``axis`` (per-channel). Returns :class:`Int4Array`: ``q`` int8 in [-8, 7] of ``x``'s shape;
    ``scales`` with ``axis`` of length ``n / group_size`` (1 per channel), bfloat16/
    float16/float32/float64 for compressed-tensors (the input dtype), float32 for Quark.

    Raises ValueError for an unknown profile, NaN/±Inf inputs (implementation-defined), or a
    length along ``axis`` that is 0 or not a multiple of ``group_size`` (no producer defines
    it); TypeError for float64 with ``quark``.
    Spec: ``int4-schemes.md``.
    """
    producer = get_producer(profile)
    check_group_size(group_size)
    arr = as_float_array(x)
    ax = check_axis(max(arr.ndim, 1), axis)
    arr = arr.reshape(1) if arr.ndim == 0 else arr
    require_finite(arr, f"quantize_int4(profile={profile!r})")
    if producer.float64_refused and arr.dtype == np.float64:
        raise TypeError(
            f"the {profile} profile takes float16, bfloat16 or float32: "
            f"{producer.float64_refused}"
        )
    g = _grouped(arr, group_size, ax)
    q, scales = _quantize_groups(g, producer)
    return Int4Array(
        q=_ungrouped(q, ax),
        scales=np.moveaxis(scales, -1, ax),
        group_size=group_size,
        axis=ax,
        profile=profile,
    )


@dataclass(frozen=True, eq=False)
class Int4Array:
    """The result of :func:`quantize_int4`; unpacks as ``q, scales = quantize_int4(...)``.

    ``q``: int8 values in [-8, 7], ``x``'s shape. ``scales``: the producer's scale dtype
    (compressed-tensors: the input dtype, bfloat16 for BF16 weights; Quark: float32),
    ``x.shape`` with ``axis`` divided by ``group_size``, or of size 1 along
    ``axis`` per channel (group_size None). ``axis`` is normalised to be non-negative.
    """

    q: NDArray[np.int8]
    scales: NDArray[np.generic]
    group_size: int | None
    axis: int
    profile: str

    def __iter__(self) -> Iterator[NDArray[np.generic]]:
        yield self.q
        yield self.scales


@containers()
def dequantize_int4(
    q: ArrayLike | Int4Array,
    scales: ArrayLike | None = None,
    *,
    group_size: int | None = 32,
    axis: int = -1,
    profile: str | None = None,
    dtype: DTypeLike = np.float32,
) -> NDArray[np.generic]:
    """``q × scale`` as the consumer of ``profile`` computes it, then cast to ``dtype``.

    ``profile``: a consumer, or a producer (its default consumer, :mod:`mxformats.pairing`);
    None: the Int4Array's own producer's, else ``compressed-tensors``.

    compressed-tensors (``dequantize``: ``q.to(scale.dtype) * scale``): the product is rounded
    to the scale's dtype (bfloat16 for BF16 checkpoints), then to ``dtype``. Quark
    (``dequantize_int_per_*_affine``): the product in float32, then ``dtype``. An
    :class:`Int4Array` supplies ``scales``, ``group_size``, ``axis`` and its profile.
    Spec: ``int4-schemes.md``, "Dequantization".
    """
    if isinstance(q, Int4Array):
        result = q
        q, scales = result.q, result.scales
        group_size, axis = result.group_size, result.axis
        profile = result.profile if profile is None else profile
    if scales is None:
        raise TypeError("dequantize_int4 needs scales (or an Int4Array)")
    consumer = get_consumer(consumer_for("int4", profile or DEFAULT_CONSUMER))
    check_group_size(group_size)
    values = np.asarray(q)
    if values.dtype.kind not in "iu" or np.any((values < QMIN) | (values > QMAX)):
        raise ValueError("q must hold integers in [-8, 7]")
    s = as_float_array(scales, "scales")
    ax, _, size = check_group_scales(values.shape, s.shape, group_size, axis)
    expanded = np.repeat(s, size, axis=ax)
    with np.errstate(invalid="ignore", over="ignore"):  # 0 × Inf is NaN, as in torch
        # int4 × p-bit scale is exact in the arithmetic dtype: one rounding
        own = s.dtype if consumer.product_dtype == "scale" else np.dtype(np.float32)
        product = multiply_in(values, expanded, own)
    return round_once(product.astype(np.float64), dtype)
