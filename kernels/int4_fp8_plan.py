"""The backend-neutral front end of the INT4, W4A8 and FP8 kernels: argument checks and the small
conversions every backend does before its launch code.

The Triton (:mod:`mxformats.kernels.triton`) and HIP (:mod:`mxformats.kernels.hip`) front ends of
``quantize_int4``, ``pack_int4``, ``unpack_int4``, ``dequantize_int4``, ``dequantize_w4a8``,
``quantize_fp8`` and ``e4m3fn_to_fnuz`` call these with the reference's arguments and get back
either the exception the reference raises for the same bad input (:mod:`mxformats.schemes.int4`,
:mod:`mxformats.schemes.w4a8` and :mod:`mxformats.schemes.fp8`'s own messages),
``NotImplementedError`` for what the backend does not
claim or compute (float64 data, an unclaimed profile), ``TypeError`` for a non-tensor, or the
checked arguments. ``kernels`` names the backend (``"Triton"``, ``"HIP"``) in messages that are
the backend's own. The MX counterpart is :mod:`mxformats.kernels.mx_plan`, whose
:func:`~mxformats.kernels.mx_plan.require_tensor` and dtype naming this module reuses.

torch only: nothing here imports a backend.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import torch

from mxformats.formats import Format, get_format
from mxformats.schemes import fp8 as fp8_reference
from mxformats.schemes import int4 as int4_reference

from .mx_plan import float_dtype_name, require_tensor

__all__ = [
    "OUTPUT_DTYPES",
    "Fp8Plan",
    "Int4QuantizePlan",
    "as_int8",
    "as_torch_dtype",
    "check_axis",
    "check_fnuz_args",
    "check_fp8_args",
    "check_group_scales",
    "check_int4_call",
    "check_w4a8_args",
    "fp8_plan",
    "int4_dequantize_float32",
    "int4_quantize_plan",
    "require_int32_words",
    "require_kernel_float",
    "require_tensor",
    "unclaimed",
]

#: The output dtypes of the dequantizers, by name: the kernels' inputs plus float64.
OUTPUT_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
    "float64": torch.float64,
}
#: Float dtypes in the order the messages list them.
_FLOAT_ORDER = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

#: The reference's axis check (ValueError ``axis ... is out of range for a N-d array``).
check_axis = int4_reference.check_axis


def unclaimed(function: str, fmt: str, profile: str, kernels: str) -> NotImplementedError:
    """The error for a registered profile the backend ``kernels`` does not claim."""
    return NotImplementedError(f"{function}: profile {profile!r} ({fmt}) is not implemented by "
                               f"the {kernels} kernels")


def as_torch_dtype(dtype: object, kernels: str) -> torch.dtype:
    """A torch dtype from a torch dtype (returned as is), a numpy dtype-like
    (``ml_dtypes.bfloat16`` included) or a name of :data:`OUTPUT_DTYPES`; TypeError for
    anything else."""
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        name = float_dtype_name(dtype)
    except TypeError as err:
        raise TypeError(f"not a float dtype: {dtype!r}") from err
    if name not in OUTPUT_DTYPES:
        raise TypeError(f"the {kernels} kernels write {', '.join(OUTPUT_DTYPES)}, not {name}")
    return OUTPUT_DTYPES[name]


def require_kernel_float(dtype: torch.dtype, what: str, kinds: Mapping[torch.dtype, int],
                         kernels: str) -> int:
    """The kernel's code (``kinds[dtype]``) for a float input dtype. float64 outside ``kinds``
    is NotImplementedError (the reference takes it, the kernels do not); any other dtype outside
    ``kinds`` TypeError (the reference's error for non-float input)."""
    if dtype in kinds:
        return kinds[dtype]
    if dtype == torch.float64:
        raise NotImplementedError(f"{what}: the {kernels} kernels take float32, bfloat16 or "
                                  "float16, not float64 (use the numpy reference)")
    names = ", ".join(str(d).removeprefix("torch.") for d in _FLOAT_ORDER if d in kinds)
    raise TypeError(f"{what}: dtype {dtype} is not one of {names}")


# -- INT4 -------------------------------------------------------------------------------------


def check_int4_call(function: str, profile: str, group_size: int | None,
                    claims: Collection[tuple[str, str]], kernels: str) -> None:
    """``quantize_int4`` / ``dequantize_int4``'s first checks, in the reference's order: the
    profile (ValueError naming the valid ones; NotImplementedError outside ``claims``), then
    ``group_size`` (ValueError unless a positive int or None)."""
    role = "producer" if function.startswith("quantize") else "consumer"
    if profile not in int4_reference.PROFILES:
        raise ValueError(f"unknown int4 {role} profile {profile!r}; valid: "
                         f"{', '.join(int4_reference.PROFILES)}")
    if ("int4", profile) not in claims:
        raise unclaimed(function, "int4", profile, kernels)
    int4_reference.check_group_size(group_size)


@dataclass(frozen=True)
class Int4QuantizePlan:
    """What an INT4 quantize kernel takes from a producer record
    (:class:`mxformats.schemes.int4.Int4Producer`).

    The kernels implement the two shapes the records take. ``reciprocal``: the scale is
    ``max(s, eps)`` stored as float32 and ``q = round(float32(x) * (1 / s))`` in float32;
    otherwise a zero scale becomes ``eps``, the scale stays in the input dtype and
    ``q = round(dtype(x / s))``. ``eps``: the floor, None for the input dtype's machine
    epsilon.
    """

    reciprocal: bool
    eps: float | None


#: (floor, scale dtype, quotient dtype) of each kernel shape, keyed by ``reciprocal``.
_INT4_KERNEL_SHAPES = {True: ("maximum", "float32", "float32"), False: ("zero", "input", "input")}


def int4_quantize_plan(profile: str, kernels: str) -> Int4QuantizePlan:
    """The kernel plan of the INT4 producer ``profile`` (checked by :func:`check_int4_call`);
    NotImplementedError for a record whose arithmetic the kernels do not implement."""
    producer = int4_reference.get_producer(profile)
    shape = (producer.floor, producer.scale_dtype, producer.quotient_dtype)
    if shape != _INT4_KERNEL_SHAPES[producer.reciprocal]:
        raise unclaimed("quantize_int4", "int4", profile, kernels)
    return Int4QuantizePlan(reciprocal=producer.reciprocal, eps=producer.eps)


def int4_dequantize_float32(profile: str) -> bool:
    """Whether the INT4 consumer ``profile`` multiplies in float32 (else in the scale's
    dtype), from its record (:class:`mxformats.schemes.int4.Int4Consumer`)."""
    return int4_reference.get_consumer(profile).product_dtype == "float32"


def as_int8(q: object, what: str, error: type[Exception], kernels: str, *,
            check_int8: bool = False) -> torch.Tensor:
    """``q`` as an int8 tensor. Non-integer dtypes raise ``error`` (the reference's error for
    them); wider integers are range-checked here (ValueError), int8 only with ``check_int8``
    (otherwise the kernel checks it)."""
    t = require_tensor(q, what, kernels)
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise error(f"{what} takes integers in [-8, 7], got dtype {t.dtype}")
    if t.dtype != torch.int8 or check_int8:
        if t.numel() and bool(((t < int4_reference.QMIN) | (t > int4_reference.QMAX)).any()):
            raise ValueError(f"{what}: values must lie in [-8, 7]")
        t = t.to(torch.int8)
    return t


def check_group_scales(values: torch.Tensor, scales: torch.Tensor, group_size: int | None,
                       axis: int) -> tuple[int, int, int]:
    """``dequantize_int4``'s scale shape, checked by the reference's own
    :func:`mxformats.schemes.int4.check_group_scales`: ``(axis, n, group)``, or its ValueError."""
    return int4_reference.check_group_scales(tuple(values.shape), tuple(scales.shape),
                                             group_size, axis)


def require_int32_words(packed: object, what: str, kernels: str) -> torch.Tensor:
    """``packed`` as a tensor of int32 (or uint32) words; TypeError otherwise."""
    t = require_tensor(packed, what, kernels)
    if t.dtype not in (torch.int32, torch.uint32):
        raise TypeError(f"unpack_int4 takes int32 words, got dtype {t.dtype}")
    return t


def check_w4a8_args(weight: object, weight_scale: object, weight_scale_2: object,
                    kernels: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``dequantize_w4a8``'s arguments: ``weight`` int32 ``[O, W]``, ``weight_scale`` one
    value, ``weight_scale_2`` ``[O]``. Returns ``(weight, s1, s2)`` with both scales as float32
    (on their own device); TypeError or ValueError as the reference otherwise."""
    w = require_int32_words(weight, "weight", kernels)
    if w.ndim != 2:
        raise ValueError(f"dequantize_w4a8 takes a 2-D weight [O, W], got {tuple(w.shape)}")
    s1 = require_tensor(weight_scale, "weight_scale", kernels).to(torch.float32)
    s2 = require_tensor(weight_scale_2, "weight_scale_2", kernels).to(torch.float32)
    rows = w.shape[0]
    if s1.numel() != 1 or tuple(s2.shape) != (rows,):
        raise ValueError(f"weight_scale must be a scalar and weight_scale_2 [{rows}]; got "
                         f"{tuple(s1.shape)} and {tuple(s2.shape)}")
    return w, s1, s2


# -- FP8 --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fp8Plan:
    """What a per-tensor FP8 kernel takes from a record
    (:class:`mxformats.schemes.fp8.Fp8Profile`) and a format.

    The kernels implement the two shapes the records take. ``reciprocal``: vLLM's
    ``float32(x) * (1 / s)`` clamped to ±``limit``, NaN ignored by the maximum and a NaN
    product ``+limit``; otherwise Quark's ``dtype(x / s)`` clamped, NaN and ±Inf refused.
    ``zero_scale``: the scale of an all-zero tensor (0.0: ``amax / limit`` itself).
    """

    limit: float
    zero_scale: float
    reciprocal: bool
    refuse_non_finite: bool


#: (quotient dtype, non-finite rule) of each kernel shape, keyed by ``reciprocal``.
_FP8_KERNEL_SHAPES = {True: ("float32", "clamp"), False: ("input", "refuse")}


def fp8_plan(record: fp8_reference.Fp8Profile, element: Format, kernels: str) -> Fp8Plan:
    """The kernel plan of ``record`` writing ``element``; NotImplementedError for a record
    whose arithmetic the kernels do not implement."""
    if (record.quotient_dtype, record.non_finite) != _FP8_KERNEL_SHAPES[record.reciprocal]:
        raise unclaimed("quantize_fp8", element.name, record.info.name, kernels)
    return Fp8Plan(limit=record.limit_for(element),
                   zero_scale=0.0 if record.zero_scale is None else record.zero_scale,
                   reciprocal=record.reciprocal,
                   refuse_non_finite=record.non_finite == "refuse")


def check_fp8_args(fmt: Format | str, profile: str, claims: Collection[tuple[str, str]],
                   kernels: str) -> tuple[Format, Fp8Plan]:
    """``quantize_fp8``'s profile and format, checked as :func:`mxformats.quantize_fp8` does
    (ValueError for an unknown profile or a format it does not take), then against the
    backend's ``claims`` (NotImplementedError). Returns the format and its plan."""
    record = fp8_reference.get_fp8_profile(profile)
    element = get_format(fmt)
    fp8_reference.check_fp8_format(record, element)
    if (element.name, profile) not in claims:
        raise unclaimed("quantize_fp8", element.name, profile, kernels)
    return element, fp8_plan(record, element, kernels)


def check_fnuz_args(codes: object, scale: object,
                    kernels: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``e4m3fn_to_fnuz``'s arguments: uint8 codes and a float32 scale (TypeError otherwise)."""
    c = require_tensor(codes, "e4m3fn codes", kernels)
    s = require_tensor(scale, "scale", kernels)
    if c.dtype != torch.uint8:
        raise TypeError(f"e4m3fn codes must be uint8, got {c.dtype}")
    if s.dtype != torch.float32:
        raise TypeError(f"the scale must be float32, got {s.dtype}")
    return c, s
