"""FP8 block scaling: E4M3 elements with one float scale per ``bm × bn`` tile (128 × 128).

The layout of DeepSeek-V3, Kimi-K2-Instruct and llm-compressor's ``FP8_BLOCK``: a 2-D weight
``[M, N]`` is cut into tiles of ``block = (bm, bn)``; the last tile row and column may be
partial (Kimi's ``kv_a_proj_with_mqa`` has 576 rows, its experts 96-column slices under
tensor parallelism). Each tile has one scale, so ``scales`` has shape
``[ceil(M / bm), ceil(N / bn)]``, and ``value = decode(code) × scale[i // bm, j // bn]``.

Each producer's variant is one frozen :class:`FP8BlockProducer` record in ``PRODUCERS``;
the quantizer reads the record and never branches on a profile's name. Spec:
``spec/fp8-block.md`` (every field, the special tiles, the divergence matrix) and
``spec/vectors/fp8-block/<profile>.json``.

>>> import numpy as np
>>> blocks = quantize_fp8_block(np.float32([[1.0, -0.5], [0.0, 2.0]]), block=(2, 2))
>>> blocks.codes.tolist(), blocks.scales.tolist()  # 2.0 is the tile's amax: 448 = 0x7E
([[118, 238], [0, 126]], [[0.004464285913854837]])
>>> dequantize_fp8_block(blocks).tolist()
[[1.0, -0.5], [0.0, 2.0]]

Decisions that hold for every profile (spec/fp8-block.md, "Input"):

- The input is a 2-D weight ``[M, N]`` (every producer asserts ``x.dim() == 2``). 1-D and
  3-D inputs raise ValueError: a stack of experts is quantized expert by expert, as the
  checkpoints store one 2-D tensor per expert. ``M = 0`` or ``N = 0`` raises too.
- The input dtypes are float16, bfloat16 and float32 (the weight dtypes the producers run
  on); float64 raises ValueError. Feed a BF16 checkpoint's weights as ``ml_dtypes.bfloat16``:
  compressed-tensors computes in the input dtype.
- Partial tiles are padded with +0.0 before the tile maximum (DeepGEMM ``x_padded``,
  compressed-tensors ``maybe_pad_tensor_for_block_quant``); the padding is cut off again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import ml_dtypes
import numpy as np

from mxformats.arith import BF16, as_float_array, canonical_nan, divide_in, round_to
from mxformats.containers import containers
from mxformats.conversions import e4m3fn_to_fnuz
from mxformats.formats import E4M3FN, E4M3FNUZ, Format
from mxformats.records import ConsumerRecord, DeprecatedAliases, ProducerRecord, lookup
from mxformats.registry import Scheme, register

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike, NDArray

__all__ = [
    "CONSUMERS",
    "PRODUCERS",
    "FP8BlockArray",
    "FP8BlockConsumer",
    "FP8BlockProducer",
    "dequantize_fp8_block",
    "get_consumer",
    "get_producer",
    "quantize_fp8_block",
    "quantize_fp8_block_with",
]

F32 = np.dtype(np.float32)
#: The weight dtypes the producers take.
INPUT_DTYPES = (np.dtype(np.float16), BF16, F32)

#: How the scaled element ``x · m`` is formed before the FP8 cast:
#: ``max-over-amax``: ``m = float32(float32(1 / amax) · max)`` (torch's ``max / amax`` is a
#: reciprocal, then a multiply), ``float32(x) · m`` (DeepSeek-V3 era DeepGEMM);
#: ``reciprocal-of-scale``: ``m = float32(1 / scale)``, ``float32(x) · m`` (DeepGEMM today);
#: ``divide-by-scale``: ``x / scale`` rounded to the quotient dtype (compressed-tensors).
Multiplier = Literal["max-over-amax", "reciprocal-of-scale", "divide-by-scale"]
#: ``float32``, or ``input``: the input's own dtype (bfloat16 for a BF16 checkpoint).
Arithmetic = Literal["float32", "input"]

#: The code torch 2.13 (x86 CPU) writes for every NaN of a NaN tile, whatever its sign.
NAN_CODE = 0x7F


@dataclass(frozen=True)
class FP8BlockProducer(ProducerRecord):
    """One producer of FP8 block-scaled weights: every choice that changes a byte.

    Attributes:
        name, library, version, function, description: the registry entry and the source
            (:class:`~mxformats.records.Record`).
        element: the format the elements are rounded into (E4M3FN for every producer here).
        fmt_max: the ``max`` in ``scale = amax / max`` (448 for E4M3FN).
        amax_floor: the tile maximum is clamped below at this value (DeepGEMM's
            ``.clamp(1e-4)``); None: no floor.
        scale_dtype: the dtype ``amax / max`` is computed in and stored as (float32 for
            DeepSeek's ``weight_scale_inv``; the input dtype, bfloat16, for compressed-tensors'
            ``weight_scale``).
        power_of_two_scale: the scale is then rounded up to a power of two,
            ``2^ceil(log2(scale))`` from its float32 bits (DeepGEMM ``ceil_to_ue8m0``).
        zero_scale_eps: a scale that is 0 becomes ``finfo(scale dtype).eps`` (compressed-tensors
            ``calculate_qparams``: 2^-7 in bfloat16).
        multiplier: how the scaled element is formed (:data:`Multiplier`).
        quotient_dtype: the dtype ``x / scale`` is rounded to (``divide-by-scale`` only).
        clamp_to_max: the scaled element is clamped to ``±fmt_max`` before the cast
            (compressed-tensors ``round_to_quantized_type_args``); the others rely on the
            saturating cast.
        scale_name: the checkpoint's tensor name for the scales.
        fnuz: the E4M3FN result is then converted for AMD MI300 by vLLM's
            ``normalize_e4m3fn_to_e4m3fnuz``: the same bytes read as E4M3FNUZ (0x80 becomes
            0x00), the float32 scales doubled.
    """

    name: str
    library: str
    version: str
    function: str
    description: str
    element: Format
    fmt_max: float
    amax_floor: float | None
    scale_dtype: Arithmetic
    power_of_two_scale: bool
    zero_scale_eps: bool
    multiplier: Multiplier
    quotient_dtype: Arithmetic
    clamp_to_max: bool
    scale_name: str
    fnuz: bool = False

    scheme: ClassVar[Scheme] = "fp8-block"

    @property
    def code_format(self) -> Format:
        """The format the stored codes are read in (E4M3FNUZ after the FNUZ conversion)."""
        return E4M3FNUZ if self.fnuz else self.element

    def scale_dtype_for(self, dtype: np.dtype[Any]) -> np.dtype[Any]:
        """The dtype of the scales for an input of ``dtype``."""
        return F32 if self.scale_dtype == "float32" or self.fnuz else dtype


_DEEPGEMM_OLD = (
    "deepseek-ai/DeepGEMM tests/test_core.py@f0314fa per_block_cast_to_fp8 (as vLLM and "
    "SGLang copied it): x_amax.clamp(1e-4); (x_view * (448.0 / x_amax)).to(float8_e4m3fn); "
    "x_amax / 448.0"
)
_DEEPGEMM_NOW = (
    "deepseek-ai/DeepGEMM deep_gemm/utils/math.py@38939a4 per_block_cast_to_fp8: "
    "sf = x_amax.clamp(1e-4) / 448.0; sf = ceil_to_ue8m0(sf) if use_ue8m0; "
    "(x_view * (1.0 / sf)).to(float8_e4m3fn)"
)
_DEEPSEEK = dict(
    library="DeepGEMM",
    version="f0314fa (tests) / 38939a4 (utils)",
    element=E4M3FN,
    fmt_max=448.0,
    amax_floor=1e-4,
    scale_dtype="float32",
    zero_scale_eps=False,
    quotient_dtype="float32",
    clamp_to_max=False,
    scale_name="weight_scale_inv",
)

#: Every FP8 block producer profile, by name.
PRODUCERS: dict[str, FP8BlockProducer] = {
    p.name: p
    for p in (
        FP8BlockProducer(
            name="deepseek",
            function=_DEEPGEMM_OLD,
            description="weight_scale_inv = float32(max(amax, 1e-4) / 448); "
            "codes = e4m3fn(float32(x) * m), m = float32(float32(1 / amax) * 448) (torch's "
            "448 / amax): a multiply, not x / scale",
            power_of_two_scale=False,
            multiplier="max-over-amax",
            **_DEEPSEEK,  # type: ignore[arg-type]
        ),
        FP8BlockProducer(
            name="deepgemm",
            function=_DEEPGEMM_NOW + " (use_ue8m0=False)",
            description="as deepseek, but the element multiplier is float32(1 / scale) of the "
            "rounded scale: a second rounding that changes some codes",
            power_of_two_scale=False,
            multiplier="reciprocal-of-scale",
            **_DEEPSEEK,  # type: ignore[arg-type]
        ),
        FP8BlockProducer(
            name="ue8m0",
            function=_DEEPGEMM_NOW + " (use_ue8m0=True, the Blackwell SM100 path)",
            description="weight_scale_inv = 2^ceil(log2(float32(max(amax, 1e-4) / 448))) "
            "(float32 bits, exponent clamped to [1, 254]); codes = e4m3fn(x * (1 / scale))",
            power_of_two_scale=True,
            multiplier="reciprocal-of-scale",
            **_DEEPSEEK,  # type: ignore[arg-type]
        ),
        FP8BlockProducer(
            name="deepseek-fnuz",
            function=_DEEPGEMM_OLD + "; then vLLM normalize_e4m3fn_to_e4m3fnuz "
            "(vllm/model_executor/layers/quantization/utils/w8a8_utils.py@646ad5a)",
            description="deepseek converted for MI300 as vLLM's Fp8LinearMethod does on ROCm: "
            "the same bytes read as E4M3FNUZ, 0x80 -> 0x00, weight_scale_inv doubled",
            power_of_two_scale=False,
            multiplier="max-over-amax",
            fnuz=True,
            **_DEEPSEEK,  # type: ignore[arg-type]
        ),
        FP8BlockProducer(
            name="compressed-tensors",
            library="compressed-tensors (llm-compressor FP8_BLOCK)",
            version="0.19.0-0.20.1 (llm-compressor 0.14)",
            function="quantization.utils.helpers.calculate_qparams + "
            "quantization.lifecycle.forward.quantize (_process_block) as "
            "NaiveQuantizationCompressor.compress calls it (zero_point None)",
            description="weight_scale = dtype(amax / 448), a 0 replaced by finfo(dtype).eps "
            "(2^-7 in bfloat16); codes = e4m3fn(clamp(dtype(x / scale), +-448))",
            element=E4M3FN,
            fmt_max=448.0,
            amax_floor=None,
            scale_dtype="input",
            power_of_two_scale=False,
            zero_scale_eps=True,
            multiplier="divide-by-scale",
            quotient_dtype="input",
            clamp_to_max=True,
            scale_name="weight_scale",
        ),
    )
}



@dataclass(frozen=True)
class FP8BlockConsumer(ConsumerRecord):
    """One reader of FP8 block-scaled weights: ``float32(code) × float32(scale)`` rounded to
    float32, then cast to the output dtype (:func:`dequantize_fp8_block`)."""

    scheme: ClassVar[Scheme] = "fp8-block"


#: Every FP8 block consumer profile, by name.
CONSUMERS: dict[str, FP8BlockConsumer] = {
    "vllm": FP8BlockConsumer(
        name="vllm",
        library="vllm",
        version="01693a6",
        function="vllm/model_executor/layers/quantization/utils/quant_utils.py "
        "scaled_dequantize (get_and_maybe_dequant_weights)",
        description="float32(code) * float32(scale) rounded to float32, then cast to the "
        "output dtype; partial edge tiles as DeepSeek-V3 inference/kernel.py weight_dequant",
    ),
}

for _record in (*PRODUCERS.values(), *CONSUMERS.values()):
    register(_record.info)


def get_producer(name: str) -> FP8BlockProducer:
    """The record of producer profile ``name``; ValueError listing the valid names."""
    try:
        return PRODUCERS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown fp8-block profile {name!r}; valid: {', '.join(PRODUCERS)}"
        ) from None


def get_consumer(name: str) -> FP8BlockConsumer:
    """The record of consumer profile ``name`` (the registry's ValueError lists the valid
    ones)."""
    return lookup(CONSUMERS, "fp8-block", "consumer", name)


#: The names before the one vocabulary, importable with a DeprecationWarning.
__getattr__ = DeprecatedAliases(__name__, {"FP8BlockProfile": "FP8BlockProducer",
                                            "PROFILES": "PRODUCERS",
                                            "get_profile": "get_producer"}, globals())


@dataclass(frozen=True, eq=False)
class FP8BlockArray:
    """The result of :func:`quantize_fp8_block`; unpacks as ``codes, scales = ...``.

    ``codes``: uint8 FP8 bytes ``[M, N]`` (E4M3FN; E4M3FNUZ for the ``-fnuz`` profiles).
    ``scales``: ``[ceil(M / bm), ceil(N / bn)]`` as the profile's checkpoint stores them:
    float32 ``weight_scale_inv`` (DeepSeek, DeepGEMM, UE8M0: powers of two), the input dtype
    (bfloat16) ``weight_scale`` for compressed-tensors. ``block``: ``(bm, bn)``.
    """

    codes: NDArray[np.uint8]
    scales: NDArray[np.generic]
    block: tuple[int, int]
    profile: str

    def __iter__(self) -> Iterator[NDArray[np.generic]]:
        yield self.codes
        yield self.scales


# -- tiles ------------------------------------------------------------------------------------


def check_block(block: object) -> tuple[int, int]:
    """``block`` as ``(bm, bn)`` of positive ints; ValueError otherwise."""
    if (
        not isinstance(block, tuple | list)
        or len(block) != 2
        or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)
    ):
        raise ValueError(f"block must be two positive ints (rows, columns), got {block!r}")
    return int(block[0]), int(block[1])


def scale_grid(shape: tuple[int, ...], block: tuple[int, int]) -> tuple[int, int]:
    """``(ceil(M / bm), ceil(N / bn))``: the scale shape of an ``[M, N]`` weight."""
    return -(-shape[0] // block[0]), -(-shape[1] // block[1])


def _tiles(x: NDArray[Any], block: tuple[int, int]) -> NDArray[Any]:
    """``[M, N]`` zero-padded to whole tiles, as ``[rows, bm, cols, bn]``."""
    rows, cols = scale_grid(x.shape, block)
    padded = np.zeros((rows * block[0], cols * block[1]), dtype=x.dtype)
    padded[: x.shape[0], : x.shape[1]] = x
    return padded.reshape(rows, block[0], cols, block[1])


def _untiled(t: NDArray[Any], shape: tuple[int, ...]) -> NDArray[Any]:
    rows, bm, cols, bn = t.shape
    return np.ascontiguousarray(t.reshape(rows * bm, cols * bn)[: shape[0], : shape[1]])


def ceil_to_ue8m0(scale: NDArray[np.float32]) -> NDArray[np.float32]:
    """DeepGEMM ``ceil_to_ue8m0``: the float32 exponent field of ``|scale|``, plus one if any
    mantissa bit is set, clamped to [1, 254], as a power of two. NaN and +Inf give 2^127."""
    bits = np.abs(scale).astype(np.float32).view(np.uint32).astype(np.int64)
    exponent = (bits >> 23 & 0xFF) + (bits & 0x7FFFFF != 0)
    powers: NDArray[np.float32] = (
        np.clip(exponent, 1, 254).astype(np.uint32) << np.uint32(23)
    ).view(np.float32)
    return powers


# -- quantize ---------------------------------------------------------------------------------


def _scales(profile: FP8BlockProducer, amax: NDArray[Any], dtype: np.dtype[Any]) -> NDArray[Any]:
    """The tile scales in the profile's scale dtype, before any FNUZ conversion."""
    own = F32 if profile.scale_dtype == "float32" else dtype
    tile_max = amax.astype(own)  # exact: amax is one of the input's values
    if profile.amax_floor is not None:
        tile_max = np.maximum(tile_max, own.type(profile.amax_floor))  # keeps NaN, like clamp
    scale = divide_in(tile_max, profile.fmt_max, own)
    if profile.power_of_two_scale:
        scale = ceil_to_ue8m0(scale)
    if profile.zero_scale_eps:
        scale = np.where(scale == 0, own.type(ml_dtypes.finfo(own).eps), scale)
    result: NDArray[Any] = scale.astype(own)
    return result


def _scaled(profile: FP8BlockProducer, tiles: NDArray[Any], wide: NDArray[np.float32],
            amax: NDArray[np.float32], scale: NDArray[Any]) -> NDArray[Any]:
    """The tile elements scaled toward ``±fmt_max``, rounded as the producer rounds them, in
    the type they are rounded to (float32, or the input dtype for ``divide-by-scale``).
    ``wide``: the tiles in float32 (exact for every input dtype)."""
    if profile.multiplier == "max-over-amax":
        # ``448.0 / x_amax`` is torch's ``Tensor.__rtruediv__``: ``x_amax.reciprocal() *
        # 448.0`` (torch/_tensor.py), two float32 roundings, not one division.
        floored = np.maximum(amax, F32.type(profile.amax_floor or 0))
        factor = divide_in(1.0, floored, F32) * F32.type(profile.fmt_max)
        values = wide * factor[:, None, :, None]
    elif profile.multiplier == "reciprocal-of-scale":
        values = wide * divide_in(1.0, scale, F32)[:, None, :, None]
    else:
        own = tiles.dtype if profile.quotient_dtype == "input" else F32
        values = divide_in(tiles, scale[:, None, :, None], own)
    if profile.clamp_to_max:  # ±448 is exact in every input dtype; NaN passes, as torch.clamp
        limit = values.dtype.type(profile.fmt_max)
        values = np.clip(values, -limit, limit)
    result: NDArray[Any] = values
    return result


#: ``encode(fmt, values)`` gives the E4M3 codes of float16/bfloat16/float32 values, nearest-even,
#: saturating (``Format.encode(values, overflow="saturate")`` or a byte-identical fast path).
Encoder = Callable[[Format, "NDArray[Any]"], "NDArray[np.uint8]"]


def _reference_encoder(fmt: Format, values: NDArray[Any]) -> NDArray[np.uint8]:
    return fmt.encode(values, overflow="saturate")


@containers()
def quantize_fp8_block(
    x: object, *, block: tuple[int, int] = (128, 128), profile: str = "deepseek"
) -> FP8BlockArray:
    """Quantize a 2-D weight to FP8 with one scale per ``block`` tile, as ``profile`` does.

    ``x``: ``[M, N]`` float16, bfloat16 (``ml_dtypes`` or torch) or float32; other ranks and
    float64 raise ValueError (module docstring). ``block``: ``(bm, bn)``, partial edge tiles
    allowed. ``profile``: a key of ``PRODUCERS``. Returns :class:`FP8BlockArray`.

    Special tiles, for every profile (spec/fp8-block.md gives each profile's bytes):

    - NaN in a tile: the tile maximum is NaN, so is the scale, and every code of the tile is
      0x7F (the canonical NaN; ``ue8m0`` instead stores 2^127 and keeps the other elements,
      scaled by 2^-127). The NaN scale is the canonical quiet NaN, sign clear.
    - ±Inf in a tile (no NaN): the scale is +Inf (``ue8m0``: 2^127); finite elements become
      ±0 (codes 0x00 / 0x80 by sign), the ±Inf elements NaN (0x7F; ``ue8m0``: ±448).
    - An all-zero tile: scale ``1e-4 / 448`` (DeepSeek, DeepGEMM), 2^-22 (``ue8m0``),
      ``finfo(dtype).eps`` (compressed-tensors); codes 0x00, or 0x80 for -0.0.
    - -0.0 is kept: code 0x80 (the ``-fnuz`` profiles turn it into 0x00).
    """
    return quantize_fp8_block_with(_reference_encoder, x, block=block, profile=profile)


def quantize_fp8_block_with(
    encode: Encoder, x: object, *, block: tuple[int, int] = (128, 128), profile: str = "deepseek"
) -> FP8BlockArray:
    """:func:`quantize_fp8_block` with the element cast done by ``encode`` (:data:`Encoder`);
    :func:`mxformats.fast.quantize_fp8_block` passes its table-lookup encoder."""
    record = get_producer(profile)
    bm, bn = check_block(block)
    data = as_float_array(x)
    if data.ndim != 2 or 0 in data.shape:
        raise ValueError(
            f"quantize_fp8_block takes a non-empty 2-D weight [M, N], got shape {data.shape}; "
            "quantize a stack of experts one 2-D tensor at a time"
        )
    if data.dtype not in INPUT_DTYPES:
        raise ValueError(
            f"quantize_fp8_block takes float16, bfloat16 or float32 weights, not {data.dtype}"
        )
    tiles = _tiles(data, (bm, bn))
    # NaN and ±Inf tiles are defined (docstring): their invalid operations are expected.
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        wide = tiles.astype(F32, copy=False)  # exact: float16 and bfloat16 widen exactly
        amax = np.max(np.abs(wide), axis=(1, 3))  # NaN propagates, as torch.amax
        scale = _scales(record, amax.astype(data.dtype), data.dtype)
        values = _scaled(record, tiles, wide, amax, scale)
    codes = encode(record.element, values)
    codes = np.where(np.isnan(values), np.uint8(NAN_CODE), codes).astype(np.uint8)
    scale = np.where(np.isnan(scale), scale.dtype.type(np.nan), scale).astype(scale.dtype)
    codes = _untiled(codes, data.shape)
    if record.fnuz:
        codes, scale = e4m3fn_to_fnuz(codes, scale)
    return FP8BlockArray(codes, scale, (bm, bn), record.name)


# -- dequantize -------------------------------------------------------------------------------


@containers()
def dequantize_fp8_block(
    codes: ArrayLike | FP8BlockArray,
    scales: ArrayLike | None = None,
    *,
    block: tuple[int, int] = (128, 128),
    profile: str = "deepseek",
    dtype: DTypeLike = np.float32,
) -> NDArray[np.generic]:
    """Decode FP8 block codes as vLLM's ``scaled_dequantize`` does, then cast to ``dtype``.

    ``float32(code) × float32(scale)`` rounded to float32, then cast to ``dtype`` (bfloat16,
    float16 or float32; float64 gets the float32 product exactly): vLLM
    ``vllm/model_executor/layers/quantization/utils/quant_utils.py@01693a6``
    ``scaled_dequantize`` (``(x_q.to(float32) * x_s.to(float32)).to(out_dtype)``), used by
    ``get_and_maybe_dequant_weights`` for MLA's ``kv_b_proj``; DeepSeek-V3
    ``inference/kernel.py@d4c8543`` ``weight_dequant`` computes the same (``x * s`` in float32,
    stored as the default dtype) and masks partial edge tiles, which vLLM's function asserts
    away. The scale of element ``(i, j)`` is ``scales[i // bm, j // bn]``. ``profile`` only
    selects the code format (E4M3FNUZ for ``-fnuz``). NaN codes, NaN scales and ``Inf · 0``
    give NaN, always the canonical quiet NaN of ``dtype``, sign clear
    (:func:`mxformats.arith.canonical_nan`; the readers' NaN bits vary with the device).
    """
    if isinstance(codes, FP8BlockArray):
        if scales is not None:
            raise ValueError("pass either an FP8BlockArray or codes and scales, not both")
        array = codes
        codes, scales, block, profile = array.codes, array.scales, array.block, array.profile
    if scales is None:
        raise ValueError("dequantize_fp8_block needs the scales")
    record = get_producer(profile)
    bm, bn = check_block(block)
    c = np.asarray(codes)
    if c.dtype != np.uint8 or c.ndim != 2:
        raise ValueError(f"codes must be a 2-D uint8 array, got {c.dtype} {c.shape}")
    s = as_float_array(scales, "scales")
    grid = scale_grid(c.shape, (bm, bn))
    if s.shape != grid:
        raise ValueError(
            f"scales have shape {s.shape}; {c.shape} in tiles of {(bm, bn)} needs {grid}"
        )
    per_element = np.repeat(np.repeat(s.astype(F32), bm, axis=0), bn, axis=1)
    per_element = per_element[: c.shape[0], : c.shape[1]]
    values = record.code_format.decode(c, np.float32).astype(F32)
    with np.errstate(invalid="ignore", over="ignore"):
        product = (values * per_element).astype(np.float64)
    out = np.dtype(dtype)
    result: NDArray[np.generic] = product if out == np.float64 else round_to(product, out)
    return canonical_nan(result.astype(out))
