"""The MX consumer profiles: how each reader turns codes and E8M0 bytes into values.

A consumer is four choices (spec/mx.md, "Consumers"): how it decodes the scale byte into its
arithmetic type, the arithmetic type itself (the product ``element * scale`` is rounded once
into it), whether it clamps the result to the type's largest finite value, and whether byte 0xFF
forces NaN. The table :data:`CONSUMERS` of :class:`MXConsumer` records (on the one record base,
:mod:`mxformats.records`) is the single source of truth for :mod:`mxformats.schemes.mx` and the
spec; this module registers it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import ml_dtypes
import numpy as np

from mxformats.arith import BF16, canonical_nan, round_to
from mxformats.formats import E2M1, E2M3, E3M2, E4M3FN, E5M2, Format
from mxformats.records import ConsumerRecord, DeprecatedAliases, lookup
from mxformats.registry import Scheme, register

if TYPE_CHECKING:
    from numpy.typing import NDArray

F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)

ScaleDecoder = Callable[["NDArray[np.int64]", np.dtype[np.generic]], "NDArray[np.float64]"]


def _pow2(byte: NDArray[np.int64]) -> NDArray[np.float64]:
    return np.ldexp(1.0, (byte - 127).astype(np.int32))


def exact_scale(byte: NDArray[np.int64], dtype: np.dtype[np.generic]) -> NDArray[np.float64]:
    """OCP: 2**(b - 127) exactly; 0xFF is NaN (the block is NaN)."""
    return np.where(byte == 0xFF, np.nan, _pow2(byte))


def powf_scale(byte: NDArray[np.int64], dtype: np.dtype[np.generic]) -> NDArray[np.float64]:
    """``2 ** (b - 127)`` computed in float32 or wider and rounded into ``dtype``: 0xFF is
    2**128 = +Inf (Quark HIP bf16 ``powf``, compressed-tensors ``2.0 ** e``, vLLM's
    ``e8m0_to_f32``); in float16 scales below 2**-24 round to 0 and above 2**15 to Inf."""
    return round_to(_pow2(byte), dtype)


def hip_fp16_scale(byte: NDArray[np.int64], dtype: np.dtype[np.generic]) -> NDArray[np.float64]:
    """Quark ``e8m0_to_half<__half, uint8_t>`` (low_precision_intrinsics.cuh L160-L185): every
    scale above 2**15 becomes 2**15 (0xFF included), below 2**-24 becomes 0."""
    e = byte - 127
    return np.where(e > 15, 2.0**15, np.where(e < -24, 0.0, _pow2(byte)))


def e8m0_to_f32_bug(byte: NDArray[np.int64], dtype: np.dtype[np.generic]) -> NDArray[np.float64]:
    """vLLM/sglang ``e8m0_to_f32``: ``x_f32 = 2 ** (x - 127)`` then ``x_f32[x_f32 == 128] =
    nan``. Meant to catch byte 255 (2**128), it tests the value 128 = 2**7: byte 134 becomes
    NaN and byte 255 +Inf (sglang PR #25519)."""
    scale = powf_scale(byte, F32)
    return np.where(scale == 128.0, np.nan, scale)


def shift_scale(byte: NDArray[np.int64], dtype: np.dtype[np.generic]) -> NDArray[np.float64]:
    """Quark Triton ``_upcast_from_mxfp`` (quark/torch/kernel/mx/triton.py L284: bf16 bits
    ``b << 7``; L287: fp16 via float32 bits ``b << 23``): byte 0x00 is +0.0 (not 2**-127) and
    0xFF +Inf; L333 then forces NaN where the byte is 0xFF."""
    scale = np.where(byte == 0, 0.0, np.where(byte == 0xFF, np.inf, _pow2(byte)))
    return round_to(scale, dtype)


def triton_scale(byte: NDArray[np.int64], dtype: np.dtype[np.generic]) -> NDArray[np.float64]:
    """triton_kernels ``upcast_ue8m0_scale`` (_upcast_from_mxfp.py@01757dc): float32 and
    bfloat16 bits ``max(b << 23, 0x00400000)`` / ``max(b << 7, 0x0040)`` (0x00 is 2**-127),
    float16 via float32 bits ``b << 23`` without that floor (0x00 is 0); 0xFF is +Inf."""
    scale = np.where(byte == 0xFF, np.inf, _pow2(byte))
    if dtype == F16:
        scale = np.where(byte == 0, 0.0, scale)
    return round_to(scale, dtype)


@dataclass(frozen=True)
class MXConsumer(ConsumerRecord):
    """One reader of MX blocks.

    Attributes:
        name, library, version, function, description: the registry entry
            (:class:`~mxformats.records.Record`).
        elements: element formats it decodes.
        dtypes: its arithmetic (output) types; ``dequantize_mx`` may widen the result exactly
            to a wider ``dtype`` on request.
        scale: the byte decoder into the arithmetic type.
        clamp: clamp the product to +-(largest finite) of the type (triton).
        nan_on_ff: force NaN wherever the byte is 0xFF.

    Every NaN output is the canonical quiet NaN, sign clear. What the real readers write there
    depends on the device and the kernel path (torch's x86 vectorized bfloat16 multiply gives
    0xFFFF for 0 * Inf, its scalar tail 0x7FC0, NVIDIA GPUs 0x7FFF): implementation-defined.
    """

    elements: tuple[Format, ...]
    dtypes: tuple[np.dtype[np.generic], ...]
    scale: ScaleDecoder
    clamp: bool = False
    nan_on_ff: bool = False
    notes: tuple[str, ...] = ()

    scheme: ClassVar[Scheme] = "mx"


CONSUMERS: dict[str, MXConsumer] = {
    c.name: c
    for c in (
        MXConsumer(
            name="ocp",
            library="OCP MX",
            version="v1.0",
            function="OCP Microscaling Formats (MX) v1.0 §6 (V_i = X * P_i)",
            description="The exact value 2**(b-127) * element rounded once into the output "
            "type; 0x00 is 2**-127, 0xFF a NaN block.",
            elements=(E2M1, E2M3, E3M2, E4M3FN, E5M2),
            dtypes=(F32, F64, F16, BF16),
            scale=exact_scale,
        ),
        MXConsumer(
            name="quark-hip-fp16",
            library="amd-quark",
            version="0.13",
            function="quark.torch.kernel.mx.hip.dq_mxfp4_hip -> dq_uint8_mxfp4_to_half_kernel"
            "<__half>",
            description="Quark HIP dequant to float16: scales above 2**15 (0xFF included) "
            "clamp to 2**15, below 2**-24 flush to 0; __hmul.",
            elements=(E2M1,),
            dtypes=(F16,),
            scale=hip_fp16_scale,
            notes=("GPU only; derived from source (sources.md §3.6(d)), not executed.",),
        ),
        MXConsumer(
            name="quark-hip-bf16",
            library="amd-quark",
            version="0.13",
            function="quark.torch.kernel.mx.hip.dq_mxfp4_hip -> dq_uint8_mxfp4_to_half_kernel"
            "<__nv_bfloat16>",
            description="Quark HIP dequant to bfloat16: bf16(powf(2, b-127)), so 0xFF is "
            "+Inf (zero elements give NaN); __hmul.",
            elements=(E2M1,),
            dtypes=(BF16,),
            scale=powf_scale,
            notes=("GPU only; derived from source, not executed.",),
        ),
        MXConsumer(
            name="compressed-tensors",
            library="compressed-tensors",
            version="0.20.1",
            function="MXFP4PackedCompressor.decompress (decompress_mx_scale, "
            "unpack_fp4_from_uint8, dequantize)",
            description="compressed-tensors decompress in bfloat16: 2.0 ** (b-127) in bf16, "
            "0xFF is +Inf, zero elements of a 0xFF block NaN.",
            elements=(E2M1,),
            dtypes=(BF16,),
            scale=powf_scale,
        ),
        MXConsumer(
            name="vllm-e8m0-to-f32",
            library="vllm / sglang",
            version="vllm 0.33.0 (sglang before PR #25519)",
            function="vllm.model_executor.layers.quantization.quark.utils.e8m0_to_f32 "
            "(quark_post_load_weights, MLA kv_b_proj)",
            description="The byte-134 bug: the decoder NaNs the value 128.0 (byte 134) instead "
            "of byte 255, which becomes +Inf.",
            elements=(E2M1,),
            dtypes=(F32,),
            scale=e8m0_to_f32_bug,
        ),
        MXConsumer(
            name="triton",
            library="triton_kernels (triton-lang/triton)",
            version="_upcast_from_mxfp.py@01757dc",
            function="triton_kernels.numerics_details.mxfp.upcast_from_mxfp",
            description="triton_kernels upcast: 0x00 is 2**-127 (not in float16), the product "
            "clamps to the output's largest finite value, 0xFF forces NaN.",
            elements=(E2M1, E4M3FN, E5M2),
            dtypes=(F32, F16, BF16),
            scale=triton_scale,
            clamp=True,
            nan_on_ff=True,
            notes=(
                "An E5M2 Inf element clamps to the largest finite value (the kernel's FIXME).",
                "A NaN before the clamp (an E4M3FN/E5M2 NaN code, or 0 x Inf in float16 where "
                "bytes from 0x8F decode to +Inf) meets tl.clamp, whose NaN behaviour is "
                "unspecified: implementation-defined, we return NaN.",
            ),
        ),
        MXConsumer(
            name="quark-triton",
            library="amd-quark",
            version="0.13",
            function="quark.torch.kernel.mx.triton.dq_mxfp4_triton -> upcast_from_mxfp -> "
            "_upcast_from_mxfp (triton.py L211-L334)",
            description="Quark's Triton dequant (vLLM emulation): the scale by bit shift, so "
            "byte 0x00 decodes to 0.0; 0xFF forces NaN.",
            elements=(E2M1,),
            dtypes=(F16, BF16),
            scale=shift_scale,
            nan_on_ff=True,
            notes=(
                "Decided from quark/torch/kernel/mx/triton.py L284 and L287 (kernel) and L861 "
                "(upcast_from_mxfp_torch): 0x00 -> 0.0, as sources.md §C2.5 says; "
                "sources.md §3.9's '2**-127' is wrong for this path.",
            ),
        ),
        MXConsumer(
            name="quark-hip-qdq",
            library="amd-quark",
            version="0.13",
            function="csrc/mxfp4/fake_kernels.cuh qdq_mxfp4_kernel: out = __hmul(elem_fp4, "
            "scale)",
            description="The dequant half of Quark's HIP qdq: half(powf(2, b-127)) times the "
            "element, in the input's fp16/bf16.",
            elements=(E2M1,),
            dtypes=(F16, BF16),
            scale=powf_scale,
            notes=("GPU only; derived from source, not executed.",),
        ),
    )
}
for _record in CONSUMERS.values():
    register(_record.info)


def get_consumer(name: str) -> MXConsumer:
    """The consumer profile ``name`` (the registry's ValueError lists the valid ones)."""
    return lookup(CONSUMERS, "mx", "consumer", name)


#: The names before the one vocabulary, importable with a DeprecationWarning.
__getattr__ = DeprecatedAliases(__name__, {"Consumer": "MXConsumer"}, globals())


def decode_blocks(
    consumer: MXConsumer,
    values: NDArray[np.float64],
    byte: NDArray[np.int64],
    dtype: np.dtype[np.generic],
) -> NDArray[np.generic]:
    """``values`` (exact element values, NaN for NaN codes) times the decoded ``byte`` (same
    shape), as ``consumer`` computes it in ``dtype``."""
    scale = consumer.scale(byte, dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        product = round_to(values * scale, dtype)
    if consumer.clamp:
        limit = float(ml_dtypes.finfo(dtype).max)
        product = np.clip(product, -limit, limit)
    nan = np.isnan(product)
    if consumer.nan_on_ff:
        nan = nan | (byte == 0xFF)
    out = _cast(np.where(nan, 0.0, product), dtype)
    return canonical_nan(out, nan)


def _cast(v: NDArray[np.float64], dtype: np.dtype[np.generic]) -> NDArray[np.generic]:
    """Values already representable in ``dtype`` (or ±Inf), as an array of that type."""
    with np.errstate(over="ignore"):
        if dtype == BF16:
            return v.astype(np.float32).astype(BF16)
        return v.astype(dtype)
