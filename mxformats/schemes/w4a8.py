"""The Quark W4A8 progressive scheme: FP8 per tensor, then INT4 per output channel.

Quark's ``ProgressiveSpec`` (``quantize_w4a8``) is the ``static`` E4M3FN stage of
:mod:`mxformats.schemes.fp8` followed by the ``quark`` INT4 per-channel stage of
:mod:`mxformats.schemes.int4` on the FP8 values widened to float32, packed in the ``quark``
layout: exactly the body of Quark 0.13 ``file2file_quantization._progressive_quantize_weight``.
vLLM reads it by folding the two scales into one float32 factor per output row
(``dequantize_w4a8``). The producer and the consumer are records (``W4A8Producer``,
``W4A8Consumer``) that the reference and the kernels read.

Spec: ``spec/w4a8.md`` (the progressive scheme) and ``spec/int4-schemes.md`` (the INT4 stage).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from mxformats import codec
from mxformats.arith import as_float_array, round_once
from mxformats.containers import containers
from mxformats.formats import E4M3FN, Format
from mxformats.packing import pack_int4, unpack_int4
from mxformats.records import ConsumerRecord, DeprecatedAliases, ProducerRecord, lookup
from mxformats.registry import Scheme, register
from mxformats.schemes.fp8 import quantize_fp8
from mxformats.schemes.int4 import Int4Array, quantize_int4

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike, NDArray

__all__ = [
    "CONSUMERS",
    "PRODUCERS",
    "REFERENCE_STAGES",
    "W4A8Array",
    "W4A8Consumer",
    "W4A8Producer",
    "W4A8Stages",
    "dequantize_w4a8",
    "get_consumer",
    "get_producer",
    "quantize_w4a8",
    "quantize_w4a8_with",
]


@dataclass(frozen=True)
class W4A8Producer(ProducerRecord):
    """The Quark W4A8 ``ProgressiveSpec`` as data: the FP8 stage (a name in
    :data:`mxformats.schemes.fp8.PRODUCERS` and its format), then the INT4 per-channel
    stage (an INT4 producer profile) on the FP8 values widened to float32, packed in
    ``layout``."""

    fp8_profile: str
    fp8_format: Format
    int4_profile: str
    layout: str

    scheme: ClassVar[Scheme] = "w4a8"


@dataclass(frozen=True)
class W4A8Consumer(ConsumerRecord):
    """A W4A8 consumer as data: ``weight`` unpacked from ``layout``, the two scales folded
    into one float32 factor per output row (``float32(s2 × s1)``) before ``q × factor``."""

    layout: str

    scheme: ClassVar[Scheme] = "w4a8"


PRODUCERS: dict[str, W4A8Producer] = {
    "quark": W4A8Producer(
        name="quark",
        library="amd-quark",
        version="0.13",
        function="file2file_quantization._progressive_quantize_weight (ProgressiveSpec: "
        "FP8E4M3PerTensorSpec static -> Int4PerChannelSpec ch_axis 0)",
        description="W1 = e4m3fn(clamp(dtype(W/s1))), s1 = amax/448; q = int4 per row of W1 "
        "by reciprocal multiply; Quark nibble order",
        fp8_profile="static",
        fp8_format=E4M3FN,
        int4_profile="quark",
        layout="quark",
    ),
}
CONSUMERS: dict[str, W4A8Consumer] = {
    "vllm": W4A8Consumer(
        name="vllm",
        library="vllm",
        version="0.33",
        function="quark_moe.QuarkW4A8Fp8MoEMethod.process_weights_after_loading",
        description="W = q × float32(s2 × s1): the two scales folded into one per-row factor",
        layout="quark",
    ),
}
for _record in (*PRODUCERS.values(), *CONSUMERS.values()):
    register(_record.info)


def get_producer(name: str) -> W4A8Producer:
    """The producer profile ``name`` (the registry's ValueError lists the valid ones)."""
    return lookup(PRODUCERS, "w4a8", "producer", name)


def get_consumer(name: str) -> W4A8Consumer:
    """The consumer profile ``name`` (the registry's ValueError lists the valid ones)."""
    return lookup(CONSUMERS, "w4a8", "consumer", name)


#: The names before the one vocabulary, importable with a DeprecationWarning.
__getattr__ = DeprecatedAliases(__name__, {"W4A8_PRODUCERS": "PRODUCERS",
                                            "W4A8_CONSUMERS": "CONSUMERS",
                                            "W4A8": "W4A8Array"}, globals())


@dataclass(frozen=True, eq=False)
class W4A8Array:
    """Quark W4A8 checkpoint tensors; unpacks as ``weight, weight_scale, weight_scale_2``.

    ``weight``: int32 ``[O, ceil(I/8)]`` (Quark nibble order); ``weight_scale``: float32 shape
    ``[]`` (stage-1 FP8 scale); ``weight_scale_2``: float32 ``[O]`` (stage-2 INT4 per-channel
    scale).
    """

    weight: NDArray[np.int32]
    weight_scale: NDArray[np.float32]
    weight_scale_2: NDArray[np.float32]

    def __iter__(self) -> Iterator[NDArray[np.generic]]:
        yield self.weight
        yield self.weight_scale
        yield self.weight_scale_2


@containers()
def quantize_w4a8(w: object, *, profile: str = "quark") -> W4A8Array:
    """The Quark ProgressiveSpec weight tensors for a 2-D weight ``w`` ``[O, I]``.

    Stage 1: ``quantize_fp8(w, E4M3FN, profile="static")`` (``s1 = amax/448`` in float32,
    ``W1 = e4m3fn(clamp(dtype(w / s1), ±448))``: the quotient is rounded to ``w``'s dtype
    first). Stage 2: ``quantize_int4(float32(W1), group_size=None, axis=1, profile="quark")``
    (``s2 = rowmax|W1| / 7.5``, ``q = round_half_even(W1 × (1/s2))``). ``weight`` is q packed
    along I in the ``quark`` layout (``ceil(I/8)`` words, padding nibbles 0). Feed ``w`` in the
    checkpoint's dtype (bfloat16 for BF16 models): a float32 copy of the same values gives
    different bytes. Spec: ``w4a8.md``.
    """
    return quantize_w4a8_with(REFERENCE_STAGES, w, profile=profile)


@dataclass(frozen=True)
class W4A8Stages:
    """The functions :func:`quantize_w4a8_with` composes, each with its reference's signature
    and bytes: the references (:data:`REFERENCE_STAGES`) or :mod:`mxformats.fast`'s paths."""

    quantize_fp8: Callable[..., tuple[NDArray[np.uint8], NDArray[np.float32]]]
    decode: Callable[..., NDArray[Any]]
    quantize_int4: Callable[..., Int4Array]
    pack_int4: Callable[..., NDArray[np.int32]]


#: The reference stages: :func:`mxformats.schemes.fp8.quantize_fp8`,
#: :func:`mxformats.codec.decode`, :func:`mxformats.schemes.int4.quantize_int4` and
#: :func:`~mxformats.packing.pack_int4`.
REFERENCE_STAGES = W4A8Stages(quantize_fp8, codec.decode, quantize_int4, pack_int4)


def quantize_w4a8_with(stages: W4A8Stages, w: object, *, profile: str = "quark") -> W4A8Array:
    """:func:`quantize_w4a8` computed by ``stages`` (the same bytes when each stage returns
    its reference's): :func:`mxformats.fast.quantize_w4a8` passes the fast paths."""
    producer = get_producer(profile)
    arr = as_float_array(w)
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise ValueError(f"quantize_w4a8 takes a 2-D weight [O, I] with I > 0, got {arr.shape}")
    codes, s1 = stages.quantize_fp8(arr, producer.fp8_format, profile=producer.fp8_profile)
    w1 = stages.decode(producer.fp8_format, codes, np.float32)
    q, s2 = stages.quantize_int4(w1, group_size=None, axis=1, profile=producer.int4_profile)
    return W4A8Array(
        weight=stages.pack_int4(q, layout=producer.layout, axis=1),
        weight_scale=s1,
        weight_scale_2=s2.reshape(-1).astype(np.float32),
    )


@containers()
def dequantize_w4a8(
    weight: ArrayLike | W4A8Array,
    weight_scale: ArrayLike | None = None,
    weight_scale_2: ArrayLike | None = None,
    *,
    dtype: DTypeLike = np.float32,
) -> NDArray[np.generic]:
    """``q × s2 × s1`` per output channel, as vLLM folds it.

    vLLM (``QuarkW4A8Fp8MoEMethod.process_weights_after_loading``) first folds the scales,
    ``f = float32(s2 × s1)``, then applies ``f`` per output row after the GEMM: the result
    here is ``float32(q × f)`` rounded to ``dtype``. (Quark's own fake-quant computes
    ``(q × s2) × s1``, which can differ in the last float32 bit.) ``weight`` int32
    ``[O, W]`` unpacks to ``8 W`` columns. Spec: ``w4a8.md``, "Dequantization".
    """
    if isinstance(weight, W4A8Array):
        weight, weight_scale, weight_scale_2 = weight
    if weight_scale is None or weight_scale_2 is None:
        raise TypeError("dequantize_w4a8 needs weight_scale and weight_scale_2 (or a W4A8Array)")
    q = unpack_int4(weight, layout=CONSUMERS["vllm"].layout, axis=-1)
    s1 = np.asarray(weight_scale, dtype=np.float32)
    s2 = np.asarray(weight_scale_2, dtype=np.float32)
    if s1.size != 1 or s2.shape != (q.shape[0],):
        raise ValueError(
            f"weight_scale must be a scalar and weight_scale_2 [{q.shape[0]}]; got "
            f"{s1.shape} and {s2.shape}"
        )
    folded = s2 * s1.reshape(())
    return round_once((q.astype(np.float32) * folded[:, None]).astype(np.float64), dtype)
