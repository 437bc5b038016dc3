"""The backend-neutral front end of the INT4 and W4A8 kernels: argument checks, the kernel
plans read from the INT4 records, and the small conversions every backend does before its
launch code.

The Triton (:mod:`mxformats.kernels.triton`) and HIP (:mod:`mxformats.kernels.hip`) front ends of
``quantize_int4``, ``pack_int4``, ``unpack_int4``, ``dequantize_int4`` and ``dequantize_w4a8``
call these with the reference's arguments and get back either the exception the reference
raises for the same bad input (:mod:`mxformats.schemes.int4` and :mod:`mxformats.schemes.w4a8`'s
own messages), ``NotImplementedError`` for what the backend does not claim or compute (float64
data, an unclaimed profile), ``TypeError`` for a non-tensor, or the checked arguments. Shared
checks: :mod:`mxformats.kernels.calls`.

torch only: nothing here imports a backend.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import torch

from mxformats.schemes import int4 as int4_reference

from .calls import unclaimed
from .mx_plan import require_tensor

__all__ = [
    "Int4DequantizePlan",
    "Int4QuantizePlan",
    "as_int8",
    "check_axis",
    "check_group_scales",
    "check_int4_call",
    "check_w4a8_args",
    "dequantize_claims",
    "dequantize_plan",
    "quantize_claims",
    "quantize_plan",
    "require_int32_words",
]

#: The reference's axis check (ValueError ``axis ... is out of range for a N-d array``).
check_axis = int4_reference.check_axis


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


def quantize_claims(record: int4_reference.Int4Producer) -> bool:
    """Whether the kernels compute ``record``: its floor, scale dtype and quotient dtype are
    one of the two kernel shapes (:class:`Int4QuantizePlan`)."""
    shape = (record.floor, record.scale_dtype, record.quotient_dtype)
    return shape == _INT4_KERNEL_SHAPES[record.reciprocal]


def quantize_plan(profile: str, kernels: str) -> Int4QuantizePlan:
    """The kernel plan of the INT4 producer ``profile`` (checked by :func:`check_int4_call`);
    NotImplementedError for a record whose arithmetic the kernels do not implement."""
    producer = int4_reference.get_producer(profile)
    if not quantize_claims(producer):
        raise unclaimed("quantize_int4", "int4", profile, kernels)
    return Int4QuantizePlan(reciprocal=producer.reciprocal, eps=producer.eps)


@dataclass(frozen=True)
class Int4DequantizePlan:
    """What an INT4 dequantize kernel takes from a consumer record
    (:class:`mxformats.schemes.int4.Int4Consumer`): ``float32_product``, whether it multiplies
    in float32 (else in the scale's dtype, rounding the product to it)."""

    float32_product: bool


#: The product dtypes the dequantize kernels implement.
_INT4_PRODUCT_DTYPES = ("float32", "scale")


def dequantize_claims(record: int4_reference.Int4Consumer) -> bool:
    """Whether the kernels compute ``record``: its product dtype is one they implement."""
    return record.product_dtype in _INT4_PRODUCT_DTYPES


def dequantize_plan(profile: str) -> Int4DequantizePlan:
    """The kernel plan of the INT4 consumer ``profile`` (checked by :func:`check_int4_call`)."""
    return Int4DequantizePlan(
        float32_product=int4_reference.get_consumer(profile).product_dtype == "float32")


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

