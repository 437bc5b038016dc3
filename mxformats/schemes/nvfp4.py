"""NVFP4: E2M1 elements, an E4M3 scale per 16 elements, one float32 global scale per tensor.

"NVFP4" is not one function. The two producers that write the Kimi NVFP4 checkpoints store the
global scale in inverse forms, compute in different types and treat zero blocks differently;
each is one :class:`NVFP4Producer` record in ``PRODUCERS``, and each reader one
:class:`NVFP4Consumer` in ``CONSUMERS``. Spec: ``spec/nvfp4.md`` and
``spec/vectors/nvfp4/<profile>.json``.

Producers (``quantize_nvfp4(x, profile=...)``), with ``amax = max|x|`` over the tensor (or
``global_amax``), ``b`` the maximum of ``|x|`` over one block of 16, ``M = 448``:

- ``modelopt`` (nvidia-modelopt 0.47.0, ``modelopt/torch/quantization/qtensor/nvfp4_tensor.py``
  ``NVFP4QTensor.get_weights_scaling_factor_2``, ``get_weights_scaling_factor`` and
  ``quantize``; what ``export_hf_checkpoint`` writes): stores ``weight_scale_2 =
  f32(amax) / 2688`` (float32, shape ``[]``); block scale ``s = e4m3(clamp(f32(b) / f32(6 *
  weight_scale_2), 2**-9, 448))`` where a quotient of 0 is replaced by 1.0 before the clamp;
  element ``x / f32(s * weight_scale_2)`` in float32.
- ``compressed-tensors`` (compressed-tensors 0.19/0.20.1 ``generate_gparam``,
  ``calculate_qparams`` and ``NVFP4PackedCompressor.compress``, as llm-compressor's
  ``oneshot`` writes ``nvfp4-pack-quantized``): stores ``weight_global_scale = 2688 / amax``
  computed in the **input dtype** as torch evaluates ``2688 / t``, a reciprocal and then a
  multiply, each rounded (float32, shape ``[1]``); a non-finite result (all-zero tensor) is
  1.0. Block scale ``s = e4m3(clamp(f32(dtype(b / 6)) * global, ±448))``, a result of 0 being
  replaced by 0.125 after the cast; element ``x / f32(s / global)`` in float32.

Both round elements to nearest, ties to the even code, saturating at ±6, with the sign bit set
iff the float32 quotient is < 0 (``-0.0`` is code 0; a small negative that rounds to zero is
code 8), and pack element 2k in the low nibble (:func:`mxformats.packing.pack_fp4`).

ModelOpt 0.47.0 also has a "Four Over Six" variant (``NVFP4_FOUR_OVER_SIX_CFG``;
``weight_scale_2 = amax / 1536``, 256 instead of 448, ``utils/numeric_utils.py``
``fp8_max_for_normalization``). Its per-block choice of the amax multiplier 1.0 or 1.5 is a
weight-only MSE calibration, but it runs only as a Triton kernel on CUDA (``mtq.quantize``
raises on the CPU) with a non-IEEE float32 division, so no CPU run can be bit-identical to it:
no profile here (``spec/nvfp4.md``, "ModelOpt Four Over Six").

Special inputs, decided once for every profile (the spec lists each):

- NaN or ±Inf anywhere in the tensor: ValueError. Both producers turn them into NaN scales
  or 1.0 fallbacks that poison whole tensors (implementation-defined).
- an all-zero tensor: as each producer writes it. ``modelopt``: ``weight_scale_2 = 0``, every
  block scale NaN (byte 0xFF, the x86 default NaN of 0/0) and every code 7 (NaN quotients):
  a tensor that decodes to NaN. ``compressed-tensors``: global 1.0, scales 0.125 (0x20),
  codes 0.
- a length along ``axis`` that is 0 or not a multiple of 16: ValueError (ModelOpt's
  ``get_weights_scaling_factor`` asserts it, compressed-tensors' ``_process_group`` raises, and
  vLLM refuses such weights).
- float64 input: ValueError (both producers quantize float16, bfloat16 or float32 weights).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import ml_dtypes
import numpy as np

from mxformats.arith import (
    BF16,
    as_float_array,
    canonical_nan,
    check_axis,
    divide_in,
    round_once,
)
from mxformats.containers import containers
from mxformats.formats import E2M1, E4M3FN
from mxformats.packing import pack_fp4, unpack_fp4
from mxformats.pairing import scheme_defaults
from mxformats.records import ConsumerRecord, ProducerRecord, lookup
from mxformats.registry import Scheme, register
from mxformats.schemes.int4 import check_group_scales

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike, NDArray

__all__ = [
    "CONSUMERS",
    "PRODUCERS",
    "NVFP4Array",
    "NVFP4Consumer",
    "NVFP4Producer",
    "NVFP4Scales",
    "dequantize_nvfp4",
    "e4m3_scale_codes",
    "nvfp4_scales",
    "quantize_nvfp4",
]

#: Elements per E4M3 scale along the quantized axis.
BLOCK = 16
#: The largest E2M1 magnitude.
E2M1_MAX = 6.0
#: The byte written for a NaN block scale: x86's default NaN (0/0) has its sign set.
NAN_SCALE_BYTE = 0xFF

F32 = np.dtype(np.float32)
_INPUT_DTYPES = (np.dtype(np.float16), BF16, F32)

#: What the checkpoint stores as the global scale, ``scale_2 = amax / (6 M)``, a multiplier
#: (ModelOpt ``weight_scale_2``), or ``inverse = 6 M / amax``, a divisor (compressed-tensors
#: ``weight_global_scale``).
GlobalForm = Literal["scale_2", "inverse"]
#: The type the global scale and ``block_amax / 6`` are computed in: ``float32`` (ModelOpt
#: calls ``.float()`` first) or ``input`` (compressed-tensors keeps torch's scalar arithmetic
#: in the weight's dtype, bfloat16 for a BF16 checkpoint).
Arithmetic = Literal["float32", "input"]


@dataclass(frozen=True)
class NVFP4Producer(ProducerRecord):
    """One NVFP4 producer (module docstring for the formulas).

    Attributes:
        name, library, version, function, description: the registry entry
            (:class:`~mxformats.records.Record`).
        global_form: what the stored global scale is (:data:`GlobalForm`).
        global_names: the checkpoint's tensor names for the packed codes, block scales and
            global scale.
        global_shape: the stored global scale's shape (``()`` ModelOpt, ``(1,)``
            compressed-tensors).
        arithmetic: the type of the global scale and of ``block_amax / 6``.
        scale_max: the E4M3 maximum M in the global scale (448).
        scale_floor: block scales are clamped below to this before the E4M3 cast (ModelOpt
            2**-9, the smallest E4M3 subnormal; 0: no floor).
        zero_block_scale: the block scale written where the computed one is 0.
        zero_after_cast: the zero test is on the E4M3 value (an underflowing block counts),
            not on the float32 quotient before the cast.
        nonfinite_global: the stored global scale where the formula gives a non-finite value
            (compressed-tensors' ``nan_to_num(..., 1.0)``; None: kept, as ModelOpt does).
        special_cases: (input class, what the producer writes) for the spec.
    """

    global_form: GlobalForm
    global_names: tuple[str, str, str]
    global_shape: tuple[int, ...]
    arithmetic: Arithmetic
    scale_max: float = 448.0
    scale_floor: float = 0.0
    zero_block_scale: float = 1.0
    zero_after_cast: bool = False
    nonfinite_global: float | None = None
    special_cases: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    scheme: ClassVar[Scheme] = "nvfp4"

    def arithmetic_dtype(self, dtype: np.dtype[Any]) -> np.dtype[Any]:
        return F32 if self.arithmetic == "float32" else dtype


@dataclass(frozen=True)
class NVFP4Consumer(ConsumerRecord):
    """One reader of NVFP4 weights: how it applies the global scale.

    ``global_op``: ``multiply`` (``e2m1 × s × scale_2``, rounded once to float32: vLLM's
    ModelOpt ``alpha = input_scale * weight_scale_2``), ``reciprocal`` (``e2m1 × s ×
    f32(1 / global)``: vLLM's compressed-tensors ``alpha = 1 / (input_global_scale *
    weight_global_scale)`` with the weight's factor taken alone) or ``divide`` (``e2m1 ×
    f32(s / global)``: vLLM's compressed-tensors emulation ``dequantize_to_dtype``).
    """

    global_form: GlobalForm
    global_op: Literal["multiply", "reciprocal", "divide"]

    scheme: ClassVar[Scheme] = "nvfp4"


_FINITE = "every finite tensor whose length along axis is a multiple of 16"
_REFUSED = "NaN or ±Inf in the tensor: ValueError (implementation-defined)"
_LENGTH = "a length along axis that is 0 or not a multiple of 16: ValueError"

#: Every NVFP4 producer profile by name (``quantize_nvfp4(x, profile=name)``).
PRODUCERS: dict[str, NVFP4Producer] = {
    p.name: p
    for p in (
        NVFP4Producer(
            name="modelopt",
            library="nvidia-modelopt",
            version="0.47.0",
            function="modelopt.torch.quantization.qtensor.nvfp4_tensor.NVFP4QTensor."
            "quantize (get_weights_scaling_factor_2, get_weights_scaling_factor, _cast_fp4)",
            description="weight_scale_2 = f32(amax)/2688; s = e4m3(clamp(b / f32(6 "
            "weight_scale_2), 2^-9, 448)), 0 -> 1.0; element x / f32(s weight_scale_2)",
            global_form="scale_2",
            global_names=("weight", "weight_scale", "weight_scale_2"),
            global_shape=(),
            arithmetic="float32",
            scale_floor=2.0**-9,
            zero_block_scale=1.0,
            special_cases=(
                ("defined", _FINITE + " (executed; reproduces kimi-k2-nvfp4-modelopt)"),
                ("all-zero block", "scale 1.0 (0x38), codes 0"),
                ("tiny block", "b / (6 weight_scale_2) < 2^-9: scale clamped to 2^-9 (0x01); "
                 "elements quantized against it"),
                ("all-zero tensor", "weight_scale_2 0.0; scales 0xFF (0/0 = NaN); codes 7: "
                 "decodes to NaN"),
                ("-0.0", "code 0; a negative quotient that rounds to 0: code 8"),
                ("NaN / ±Inf", _REFUSED),
                ("length", _LENGTH),
            ),
        ),
        NVFP4Producer(
            name="compressed-tensors",
            library="compressed-tensors",
            version="0.19-0.20.1",
            function="quantization.utils.helpers.generate_gparam + calculate_qparams + "
            "compressors.nvfp4.NVFP4PackedCompressor.compress (nvfp4-pack-quantized)",
            description="weight_global_scale = dtype(dtype(1/amax) * 2688); s = "
            "e4m3(clamp(f32(dtype(b/6)) * global, ±448)), 0 -> 0.125; element x / f32(s / "
            "global)",
            global_form="inverse",
            global_names=("weight_packed", "weight_scale", "weight_global_scale"),
            global_shape=(1,),
            arithmetic="input",
            zero_block_scale=0.125,
            zero_after_cast=True,
            nonfinite_global=1.0,
            special_cases=(
                ("defined", _FINITE + " (executed; reproduces "
                 "kimi-k2-nvfp4-compressed-tensors)"),
                ("all-zero block", "scale 0.125 (0x20), codes 0"),
                ("tiny block", "the E4M3 scale underflows to 0: scale 0.125 (0x20); its "
                 "elements round to 0"),
                ("all-zero tensor", "weight_global_scale 1.0 (2688 / tiny overflows, "
                 "nan_to_num); scales 0x20; codes 0"),
                ("-0.0", "code 0; a negative quotient that rounds to 0: code 8"),
                ("NaN / ±Inf", _REFUSED),
                ("length", _LENGTH),
            ),
        ),
    )
}

#: Every NVFP4 consumer profile by name (``dequantize_nvfp4(..., profile=name)``).
CONSUMERS: dict[str, NVFP4Consumer] = {
    c.name: c
    for c in (
        NVFP4Consumer(
            name="vllm-modelopt",
            library="vllm",
            version="c9a5990",
            function="model_executor/layers/quantization/modelopt.py "
            "ModelOptNvFp4LinearMethod.process_weights_after_loading (alpha = input_scale * "
            "weight_scale_2)",
            description="e2m1 × s × weight_scale_2, rounded once to float32",
            global_form="scale_2",
            global_op="multiply",
        ),
        NVFP4Consumer(
            name="vllm-compressed-tensors",
            library="vllm",
            version="85f1f91",
            function="model_executor/layers/quantization/compressed_tensors/schemes/"
            "compressed_tensors_w4a4_nvfp4.py CompressedTensorsW4A4Fp4."
            "process_weights_after_loading (alpha = 1 / (input_global_scale * "
            "weight_global_scale))",
            description="e2m1 × s × f32(1 / weight_global_scale), rounded once to float32",
            global_form="inverse",
            global_op="reciprocal",
        ),
        NVFP4Consumer(
            name="vllm-compressed-tensors-emulation",
            library="vllm",
            version="6110ea2",
            function="model_executor/layers/quantization/utils/nvfp4_emulation_utils.py "
            "dequantize_to_dtype (VLLM_USE_NVFP4_CT_EMULATIONS)",
            description="e2m1 × f32(s / weight_global_scale), rounded to float32",
            global_form="inverse",
            global_op="divide",
        ),
    )
}

#: The consumer that reads each producer's checkpoints by default: NVFP4's rows of the one
#: pairing table (:data:`mxformats.pairing.DEFAULT_CONSUMERS`).
DEFAULT_CONSUMER = scheme_defaults("nvfp4")


def get_producer(name: str) -> NVFP4Producer:
    """The producer profile ``name`` (the registry's ValueError lists the valid ones)."""
    return lookup(PRODUCERS, "nvfp4", "producer", name)


def get_consumer(name: str) -> NVFP4Consumer:
    """The consumer profile ``name`` (the registry's ValueError lists the valid ones)."""
    return lookup(CONSUMERS, "nvfp4", "consumer", name)


@dataclass(frozen=True, eq=False)
class NVFP4Array:
    """The result of :func:`quantize_nvfp4`.

    ``codes``: uint8, one E2M1 code per element (``x``'s shape); :meth:`packed` gives the two
    per byte a checkpoint stores. ``scales``: uint8 E4M3FN bytes, ``x.shape`` with ``axis``
    divided by 16. ``global_scale``: float32, exactly the tensor the profile's checkpoint
    stores (ModelOpt ``weight_scale_2``, shape ``()``; compressed-tensors
    ``weight_global_scale``, shape ``(1,)``). ``axis`` is non-negative.
    """

    codes: NDArray[np.uint8]
    scales: NDArray[np.uint8]
    global_scale: NDArray[np.float32]
    profile: str
    axis: int

    def packed(self) -> NDArray[np.uint8]:
        """The codes two per byte along ``axis``, element 2k in the low nibble."""
        return pack_fp4(self.codes, axis=self.axis)

    def __iter__(self) -> Iterator[NDArray[Any]]:
        yield self.codes
        yield self.scales
        yield self.global_scale


# -- quantize ---------------------------------------------------------------------------------


def _blocks(x: NDArray[Any], axis: int) -> NDArray[Any]:
    """``x`` with ``axis`` moved last and cut into ``(..., n / 16, 16)``."""
    moved = np.moveaxis(x, axis, -1)
    n = moved.shape[-1]
    if n == 0 or n % BLOCK:
        raise ValueError(
            f"the quantized axis has length {n}, not a positive multiple of {BLOCK}: no NVFP4 "
            "producer defines it (ModelOpt get_weights_scaling_factor asserts, "
            "compressed-tensors _process_group raises, vLLM refuses such weights)"
        )
    return moved.reshape(*moved.shape[:-1], n // BLOCK, BLOCK)


def _global_scale(producer: NVFP4Producer, amax: np.generic, dtype: np.dtype[Any]) -> np.float32:
    """The stored global scale for tensor maximum ``amax`` (a value of ``dtype``)."""
    op = producer.arithmetic_dtype(dtype)
    six_m = E2M1_MAX * producer.scale_max
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        if producer.global_form == "scale_2":
            value = divide_in(amax, six_m, op)
        else:
            # torch's ``2688 / t`` is ``t.reciprocal() * 2688``: two roundings in t's dtype;
            # generate_gparam clamps amax to finfo(dtype).tiny first.
            floored = np.maximum(amax, ml_dtypes.finfo(op).tiny).astype(op)
            reciprocal = divide_in(1.0, floored, op)
            value = (reciprocal.astype(np.float64) * six_m).astype(F32).astype(op)
    stored: np.float32 = np.float32(value)
    if producer.nonfinite_global is not None and not np.isfinite(stored):
        stored = np.float32(producer.nonfinite_global)
    return stored


def e4m3_scale_codes(values: NDArray[np.float64]) -> NDArray[np.uint8]:
    """The E4M3FN codes of clamped block scales: nearest-even (the producers' ``.to(
    torch.float8_e4m3fn)``)."""
    return E4M3FN.encode(values)


def _block_scales(
    producer: NVFP4Producer, block_amax: NDArray[Any], stored: np.float32,
    e4m3: Callable[[NDArray[np.float64]], NDArray[np.uint8]],
) -> NDArray[np.float64]:
    """The E4M3 block scales as exact values (NaN where 0/0 made one); ``e4m3`` encodes them
    (:func:`e4m3_scale_codes`' bytes)."""
    op = producer.arithmetic_dtype(block_amax.dtype)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if producer.global_form == "scale_2":
            scale = block_amax.astype(F32) / (np.float32(E2M1_MAX) * stored)
        else:
            scale = divide_in(block_amax, E2M1_MAX, op).astype(F32) * stored
    if not producer.zero_after_cast:
        scale = np.where(scale == 0, np.float32(producer.zero_block_scale), scale)
    clamped = np.clip(scale.astype(np.float64), producer.scale_floor, E4M3FN.max)
    nan = np.isnan(clamped)
    value = E4M3FN.decode(e4m3(np.where(nan, 0.0, clamped)), np.float64)
    if producer.zero_after_cast:
        value = np.where(value == 0, producer.zero_block_scale, value)
    return np.where(nan, np.nan, value)


def e2m1_codes(q: NDArray[Any]) -> NDArray[np.uint8]:
    """Nearest E2M1 code of float32 quotients, ties to even, saturating at 6; a NaN quotient
    is 7 (ModelOpt's searchsorted); the sign bit iff ``q < 0``."""
    magnitude = E2M1.encode(np.abs(q).astype(np.float64), nan_code=7)
    return (magnitude | np.where(q < 0, 8, 0)).astype(np.uint8)


@containers()
def quantize_nvfp4(
    x: object, *, axis: int = -1, profile: str = "modelopt", global_amax: float | None = None
) -> NVFP4Array:
    """Quantize ``x`` to NVFP4 along ``axis`` exactly as the producer ``profile`` does.

    ``x``: float16, bfloat16 (``ml_dtypes`` or torch) or float32 data, at least one dimension;
    blocks are 16 consecutive elements along ``axis``. Pass a BF16 checkpoint's weights as
    bfloat16: compressed-tensors computes in the input's dtype. ``global_amax``: the tensor
    maximum the global scale is computed from (default ``max|x|``), for tensors that share one
    global scale: both producers give an expert's gate_proj and up_proj the larger of their two
    maxima (ModelOpt ``sync_moe_gate_up_amax``; llm-compressor's fused-layer global scale, the
    smaller of the two ``2688 / amax``). It is rounded to ``x``'s dtype, as a maximum of ``x``'s
    values always is. Returns :class:`NVFP4Array`; the special inputs are in the module
    docstring. Spec: ``spec/nvfp4.md``.
    """
    return quantize_nvfp4_with(e2m1_codes, x, axis=axis, profile=profile,
                               global_amax=global_amax)


def quantize_nvfp4_with(
    encode: Callable[[NDArray[Any]], NDArray[np.uint8]],
    x: object,
    *,
    axis: int = -1,
    profile: str = "modelopt",
    global_amax: float | None = None,
) -> NVFP4Array:
    """:func:`quantize_nvfp4` with the last step, the E2M1 codes of the float32 quotients
    (``(..., n / 16, 16)``), done by ``encode``. It must return :func:`e2m1_codes`' bytes:
    :func:`mxformats.fast.quantize_nvfp4` passes a table lookup."""
    producer = get_producer(profile)
    data = as_float_array(x)
    if data.dtype not in _INPUT_DTYPES:
        raise ValueError(
            f"profile {profile!r} takes float16, bfloat16 or float32 weights, got {data.dtype}"
        )
    if data.ndim == 0:
        raise ValueError("quantize_nvfp4 needs at least one dimension")
    ax = check_axis(data.ndim, axis)
    blocks = _blocks(data, ax)
    if not np.all(np.isfinite(blocks.astype(F32))):
        raise ValueError(
            f"quantize_nvfp4(profile={profile!r}): the input holds NaN or ±Inf, which both "
            "producers turn into NaN scales or fallbacks (implementation-defined); refused"
        )
    scales = nvfp4_scales(producer, np.max(np.abs(blocks), axis=-1), global_amax)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        quotient = blocks.astype(F32) / scales.divisor[..., None]
    codes = encode(quotient).reshape(*blocks.shape[:-2], -1)
    return scales.array(codes, ax)


@dataclass(frozen=True)
class NVFP4Scales:
    """What :func:`nvfp4_scales` computes from the block maxima: the E4M3 ``scale_bytes`` and
    the float32 ``divisor`` of each block (``blocks × 16`` quotients are ``x / divisor``), the
    stored global scale and the producer."""

    producer: NVFP4Producer
    scale_bytes: NDArray[np.uint8]
    divisor: NDArray[np.float32]
    stored: np.float32

    def array(self, codes: NDArray[np.uint8], axis: int) -> NVFP4Array:
        """The :class:`NVFP4Array` of ``codes`` (the quotients' E2M1 codes, quantized axis
        last) quantized along ``axis``."""
        return NVFP4Array(
            codes=np.ascontiguousarray(np.moveaxis(codes, -1, axis)),
            scales=np.ascontiguousarray(np.moveaxis(self.scale_bytes, -1, axis)),
            global_scale=np.full(self.producer.global_shape, self.stored, dtype=F32),
            profile=self.producer.name,
            axis=axis,
        )


def nvfp4_scales(
    producer: NVFP4Producer, block_amax: NDArray[Any], global_amax: float | None,
    e4m3: Callable[[NDArray[np.float64]], NDArray[np.uint8]] = e4m3_scale_codes,
) -> NVFP4Scales:
    """The global and block scales of finite blocks whose largest magnitudes are
    ``block_amax`` (in the input dtype), the tensor maximum ``global_amax`` (default: the
    largest block maximum); ``e4m3`` encodes the block scales (:func:`e4m3_scale_codes`'
    bytes: :func:`mxformats.fast.quantize_nvfp4` passes a table lookup)."""
    dtype = block_amax.dtype
    amax = np.max(block_amax) if global_amax is None else dtype.type(global_amax)
    if not (np.isfinite(np.float32(amax)) and np.float32(amax) >= 0):
        raise ValueError(f"global_amax must be finite and >= 0, got {global_amax!r}")
    stored = _global_scale(producer, amax, dtype)
    scale = _block_scales(producer, block_amax, stored, e4m3)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        scale32 = scale.astype(F32)
        divisor = scale32 * stored if producer.global_form == "scale_2" else scale32 / stored
    scale_bytes = np.where(np.isnan(scale), NAN_SCALE_BYTE, e4m3(np.nan_to_num(scale)))
    return NVFP4Scales(producer, scale_bytes.astype(np.uint8), divisor.astype(F32), stored)


# -- dequantize -------------------------------------------------------------------------------


@containers(codes={"scales": E4M3FN})
def dequantize_nvfp4(
    codes: ArrayLike | NVFP4Array,
    scales: ArrayLike | None = None,
    global_scale: ArrayLike | None = None,
    *,
    axis: int = -1,
    profile: str | None = None,
    packed: bool = False,
    dtype: DTypeLike = np.float32,
) -> NDArray[Any]:
    """Decode NVFP4 weights exactly as the consumer ``profile`` does, then round to ``dtype``.

    ``codes``: one E2M1 code per byte, or two per byte (element 2k low) with ``packed=True``,
    or an :class:`NVFP4Array` (its producer's default consumer unless ``profile`` is given:
    ``vllm-modelopt`` for ``modelopt``, ``vllm-compressed-tensors`` for
    ``compressed-tensors``). ``scales``: E4M3FN bytes, one per 16 along ``axis``.
    ``global_scale``: the stored float32 global scale (one value). The consumer computes in
    float32 (:class:`NVFP4Consumer`); the result is rounded once to ``dtype``. A consumer
    reads only its own global form: ValueError for an array of the other producer (reading
    ``2688 / amax`` as ``amax / 2688`` is off by ``amax**2 / 2688**2``). Every NaN output is
    the canonical quiet NaN of ``dtype``, sign clear (:func:`mxformats.arith.canonical_nan`).
    Spec: ``spec/nvfp4.md``, "Consumers".
    """
    if isinstance(codes, NVFP4Array):
        if scales is not None or global_scale is not None:
            raise ValueError("pass either an NVFP4Array or codes, scales and global_scale")
        array = codes
        codes, scales, global_scale, axis = (
            array.codes, array.scales, array.global_scale, array.axis
        )
        if profile is None:
            profile = DEFAULT_CONSUMER[array.profile]
        if get_consumer(profile).global_form != PRODUCERS[array.profile].global_form:
            raise ValueError(
                f"consumer {profile!r} reads the {get_consumer(profile).global_form} global "
                f"form; profile {array.profile!r} stores {PRODUCERS[array.profile].global_form}"
            )
    if scales is None or global_scale is None:
        raise ValueError("dequantize_nvfp4 needs scales and global_scale (or an NVFP4Array)")
    if profile is None:
        raise ValueError(f"pass a consumer profile; valid: {', '.join(sorted(CONSUMERS))}")
    consumer = get_consumer(profile)
    c = np.asarray(codes)
    ax = check_axis(c.ndim, axis)
    c = unpack_fp4(c, axis=ax) if packed else c
    if c.dtype.kind not in "iu" or (c.size and (int(c.min()) < 0 or int(c.max()) > 0xF)):
        raise ValueError("codes must be 4-bit E2M1 codes (0..15)")
    s = np.asarray(scales)
    if s.dtype != np.uint8:
        raise TypeError(f"scales must be E4M3FN bytes (uint8), got {s.dtype}")
    check_group_scales(c.shape, s.shape, BLOCK, ax)
    g = np.asarray(global_scale, dtype=F32)
    if g.size != 1:
        raise ValueError(f"global_scale must hold one value, got shape {g.shape}")
    stored = np.float64(g.reshape(()))
    elements = E2M1.values[c.astype(np.int64)]
    block = np.repeat(E4M3FN.decode(s, np.float64), BLOCK, axis=ax)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if consumer.global_op == "multiply":
            # e2m1 × e4m3 is exact (at most 6 significant bits); one rounding to float32.
            value = (elements * block * stored).astype(F32)
        elif consumer.global_op == "reciprocal":
            value = (elements * block * np.float64(np.float32(1) / np.float32(stored))).astype(F32)
        else:
            factor = (block.astype(F32) / np.float32(stored)).astype(np.float64)
            value = (elements * factor).astype(F32)
    return canonical_nan(round_once(value.astype(np.float64), dtype))


# -- registry ---------------------------------------------------------------------------------

for _r in (*PRODUCERS.values(), *CONSUMERS.values()):
    register(_r.info)
