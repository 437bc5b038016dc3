"""FP8 per-tensor quantization: the first stage of Quark's W4A8 and vLLM's dynamic casts.

Spec: ``spec/w4a8.md``, "FP8 per tensor". The W4A8 progressive scheme built on the
``static`` profile is :mod:`mxformats.schemes.w4a8`.

FP8 per-tensor profiles (``quantize_fp8(x, fmt, profile=...)``):

- ``static`` (producer; AMD Quark 0.13 ``FP8E4M3PerTensorSpec(is_dynamic=False)``, scale_type
  float32, ``PerTensorMinMaxObserver`` + ``real_quantize_fp8_per_tensor_with_scale``):
  ``s = float32(amax) / fmt.max`` in float32 (448 for E4M3FN, 240 for E4M3FNUZ, 57344 for
  E5M2; a zero amax gives 2^-23), then ``codes = fmt(clamp(dtype(x / s), ±fmt.max))``: the
  quotient is rounded to the **input dtype** first, so a bfloat16 input is rounded twice
  (to bfloat16, then to FP8). That double rounding is what Quark's checkpoints hold.
- ``vllm-fnuz`` (producer; vLLM ``scaled_fp8_quant`` quantizing a weight on MI300): the
  dynamic kernel below with E4M3FNUZ and max 224 (vLLM's ROCm ``quant_type_max_v``).
- ``dynamic-fn`` / ``dynamic-fnuz`` (activation; vLLM ``dynamic_scaled_fp8_quant``,
  ``csrc/quantization/w8a8/fp8/common.cu``): ``s = float32(amax) / M`` in float32 (M = 448
  for E4M3FN, 224 for E4M3FNUZ), ``codes = fmt(fmaxf(-M, fminf(float32(x) * (1 / s), M)))``:
  a reciprocal multiply in float32. ``fminf``/``fmaxf`` drop NaN, so a NaN product (an all-zero
  tensor has s = 0 and 0 × Inf = NaN; NaN inputs) becomes +M. Read from the CUDA source, not
  executed on a GPU.

NaN and ±Inf inputs to the producer profiles are implementation-defined and raise ValueError.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from mxformats.arith import as_float_array, divide_in, multiply_in, require_finite, round_once
from mxformats.containers import containers
from mxformats.formats import E4M3FN, E4M3FNUZ, E5M2, Format
from mxformats.records import DeprecatedAliases, ProducerRecord
from mxformats.registry import Kind, Scheme, register

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike, NDArray

__all__ = [
    "PRODUCERS",
    "Fp8Activation",
    "Fp8Producer",
    "dequantize_fp8",
    "get_producer",
    "per_tensor_codes",
    "per_tensor_scale",
    "quantize_fp8",
]

#: vLLM's FP8 range on MI300 (``quant_type_max_v<c10::Float8_e4m3fnuz>``), not 240.
VLLM_FNUZ_MAX = 224.0


@dataclass(frozen=True)
class Fp8Producer(ProducerRecord):
    """One per-tensor FP8 quantizer as data (spec: ``w4a8.md``, "FP8 per-tensor");
    :func:`quantize_fp8` and the kernels (``mxformats.kernels.fp8_plan``) read nothing
    else.

    FP8 has no consumer profiles: ``dequantize_fp8`` (``code × scale``) is exact, so
    :attr:`~mxformats.records.ProducerRecord.default_consumer` is None. A dynamic activation
    quantizer is the same record registered as an ``activation`` (:class:`Fp8Activation`).

    Attributes:
        name, library, version, function, description: the registry entry
            (:class:`~mxformats.records.Record`).
        formats: the element formats it writes.
        limit: M, the divisor of the scale ``s = float32(amax) / M`` and the clamp ``±M``;
            None is the format's own maximum.
        reciprocal: ``x * float32(1 / s)`` (a multiply by the reciprocal) instead of ``x / s``.
        quotient_dtype: the dtype the quotient is computed and rounded in before the FP8 cast:
            ``"input"`` (the input dtype: bfloat16 input is rounded twice) or ``"float32"``.
        zero_scale: the scale of an all-zero tensor (Quark's observer eps), or None for
            ``amax / M`` itself (0: every product is then ``0 × Inf``, NaN).
        non_finite: ``"refuse"``: NaN and ±Inf inputs raise ValueError (implementation-defined
            for the producer); ``"clamp"``: NaN is ignored by the maximum and a NaN product
            becomes ``+M`` (CUDA ``fmaxf``/``fminf``).
    """

    formats: tuple[Format, ...]
    limit: float | None
    reciprocal: bool
    quotient_dtype: Literal["input", "float32"]
    zero_scale: float | None
    non_finite: Literal["refuse", "clamp"]

    scheme: ClassVar[Scheme] = "fp8"

    def limit_for(self, fmt: Format) -> float:
        """M for ``fmt``: :attr:`limit`, or the format's maximum."""
        return fmt.max if self.limit is None else self.limit


@dataclass(frozen=True)
class Fp8Activation(Fp8Producer):
    """A dynamic activation quantizer (registry kind ``activation``): an :class:`Fp8Producer`
    that runs at inference time instead of writing checkpoints."""

    kind: ClassVar[Kind] = "activation"


def _vllm_dynamic(record: type[Fp8Producer], name: str, fmt: Format, limit: float,
                  function: str, description: str) -> Fp8Producer:
    """vLLM ``dynamic_scaled_fp8_quant`` at limit M (module docstring)."""
    return record(
        name=name, library="vllm", version="0.33", function=function, description=description,
        formats=(fmt,),
        limit=limit,
        reciprocal=True,
        quotient_dtype="float32",
        zero_scale=None,
        non_finite="clamp",
    )


#: FP8 per-tensor profiles by name.
PRODUCERS: dict[str, Fp8Producer] = {
    "static": Fp8Producer(
        name="static",
        library="amd-quark",
        version="0.13",
        function="PerTensorMinMaxObserver + real_quantize_fp8_per_tensor_with_scale",
        description="s = amax/fmt.max in float32; codes = fmt(clamp(dtype(x/s))): the "
        "quotient rounded to the input dtype first (448 E4M3FN, 240 FNUZ, 57344 E5M2)",
        formats=(E4M3FN, E4M3FNUZ, E5M2),
        limit=None,
        reciprocal=False,
        quotient_dtype="input",
        zero_scale=float(np.finfo(np.float32).eps),  # torch.finfo(torch.float32).eps
        non_finite="refuse",
    ),
    "vllm-fnuz": _vllm_dynamic(
        Fp8Producer, "vllm-fnuz", E4M3FNUZ, VLLM_FNUZ_MAX,
        "_custom_ops.scaled_fp8_quant (dynamic_scaled_fp8_quant, ROCm gfx94x)",
        "E4M3FNUZ at ±224: s = amax/224, codes = fnuz(clamp(x * (1/s), ±224))",
    ),
    **{
        name: _vllm_dynamic(
            Fp8Activation, name, fmt, limit,
            "csrc/quantization/w8a8/fp8/common.cu dynamic_scaled_fp8_quant",
            f"dynamic per-tensor {fmt.name.upper()}: s = amax/{limit:g}, x * (1/s) clamped to "
            f"±{limit:g} in float32; NaN products become +{limit:g}",
        )
        for name, fmt, limit in (("dynamic-fn", E4M3FN, 448.0),
                                 ("dynamic-fnuz", E4M3FNUZ, VLLM_FNUZ_MAX))
    },
}
for _record in PRODUCERS.values():
    register(_record.info)


def get_producer(profile: str) -> Fp8Producer:
    """The record of ``profile``; ValueError listing the valid names otherwise."""
    if profile not in PRODUCERS:
        raise ValueError(f"unknown fp8 profile {profile!r}; valid: {', '.join(PRODUCERS)}")
    return PRODUCERS[profile]


#: The names before the one vocabulary, importable with a DeprecationWarning.
__getattr__ = DeprecatedAliases(__name__, {"Fp8Profile": "Fp8Producer",
                                            "FP8_PROFILES": "PRODUCERS",
                                            "get_fp8_profile": "get_producer"}, globals())


def check_fp8_format(record: Fp8Producer, fmt: Format) -> None:
    """ValueError unless ``record`` writes ``fmt``."""
    if fmt not in record.formats:
        raise ValueError(
            f"fp8 profile {record.name!r} takes "
            f"{', '.join(f.name for f in record.formats)}, not {fmt.name}"
        )


def _scalar_f32(v: ArrayLike) -> NDArray[np.float32]:
    return np.asarray(v, dtype=np.float32).reshape(())


def _quantize_per_tensor(
    x: NDArray[Any], fmt: Format, record: Fp8Producer
) -> tuple[NDArray[np.uint8], NDArray[np.float32]]:
    """``(codes, scale)`` with ``record``'s arithmetic (module docstring).

    Quark ``static``: ``x / s`` with ``s`` a float32 0-d tensor keeps ``x``'s dtype (a 0-d
    tensor does not promote) and is computed in its arithmetic dtype with the full float32
    ``s``. vLLM: ``float32(x) * (1 / s)`` in float32.
    """
    if record.non_finite == "refuse":
        require_finite(x, f"quantize_fp8(profile={record.name!r})")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        magnitudes = np.abs(x.astype(np.float32))
        amax = np.max(np.where(np.isnan(magnitudes), 0, magnitudes)) if x.size else 0  # fmaxf
        scale = per_tensor_scale(np.float32(amax), fmt, record)
        work = x.dtype if record.quotient_dtype == "input" else np.dtype(np.float32)
        if record.reciprocal:
            quotient = multiply_in(x, divide_in(1, scale, work), work)
        else:
            quotient = divide_in(x, scale, work)
    return per_tensor_codes(quotient, fmt, record, x.dtype), _scalar_f32(scale)


def per_tensor_scale(amax: np.float32, fmt: Format, record: Fp8Producer) -> np.float32:
    """The scale of a tensor whose largest float32 magnitude is ``amax``: ``amax / M`` in
    float32, or ``record.zero_scale`` where that is 0."""
    scale: np.float32 = np.float32(amax / np.float32(record.limit_for(fmt)))
    if record.zero_scale is not None and scale == 0:
        scale = np.float32(record.zero_scale)
    return scale


def per_tensor_codes(quotient: NDArray[Any], fmt: Format, record: Fp8Producer,
                     dtype: np.dtype[Any]) -> NDArray[np.uint8]:
    """The ``fmt`` codes of quotients already rounded to ``record``'s quotient dtype (input
    ``dtype``): clamped to ``±M`` (a NaN to ``+M`` for ``clamp`` profiles), then cast."""
    limit = record.limit_for(fmt)
    with np.errstate(invalid="ignore"):
        clamped = np.clip(quotient.astype(np.float64), -limit, limit)
    if record.non_finite == "clamp":  # fminf/fmaxf drop NaN
        clamped = np.where(np.isnan(quotient), limit, clamped)
    if dtype == np.float64:  # torch's double -> float8 cast goes through float
        clamped = clamped.astype(np.float32)
    return fmt.encode(clamped)


@containers()
def quantize_fp8(
    x: object, fmt: Format = E4M3FN, *, profile: str = "static"
) -> tuple[NDArray[np.uint8], NDArray[np.float32]]:
    """Per-tensor FP8: returns (codes, scale) with ``x ≈ decode(codes) × scale``.

    ``x``: float16, bfloat16, float32 or float64 (numpy, ``ml_dtypes.bfloat16``, torch).
    ``profile``: ``static`` (E4M3FN, E4M3FNUZ or E5M2), ``vllm-fnuz`` (E4M3FNUZ),
    ``dynamic-fn`` (E4M3FN) or ``dynamic-fnuz`` (E4M3FNUZ); see the module docstring for the
    arithmetic of each. ``codes``: uint8 of ``x``'s shape; ``scale``: float32, shape ``()``.
    Raises ValueError for an unknown profile or a format it does not take, and for NaN/±Inf
    with ``static`` (implementation-defined). Spec: ``w4a8.md``, "FP8 per-tensor".
    """
    record = get_producer(profile)
    check_fp8_format(record, fmt)
    return _quantize_per_tensor(as_float_array(x), fmt, record)


@containers(codes={"codes": "fmt"})
def dequantize_fp8(
    codes: ArrayLike, scale: ArrayLike, fmt: Format = E4M3FN, *, dtype: DTypeLike = np.float32
) -> NDArray[np.generic]:
    """``decode(codes) × scale`` rounded once to ``dtype``.

    ``scale`` is a float32 scalar (or broadcastable array). The product is exact in float64
    (4 + 24 significant bits) and rounded once (nearest-even) to ``dtype``; NaN codes give NaN.
    """
    values = fmt.decode(codes, np.float64).astype(np.float64)
    s = np.asarray(scale, dtype=np.float32).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return round_once(values * s, dtype)
