"""The backend-neutral front end of the per-tensor FP8 kernels (``quantize_fp8``,
``e4m3fn_to_fnuz``): argument checks and the kernel plan read from the FP8 records
(:mod:`mxformats.schemes.fp8`), raising the reference's exceptions for the same bad input and
``NotImplementedError`` for what a backend does not claim. Shared checks:
:mod:`mxformats.kernels.calls`.

torch only: nothing here imports a backend.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import torch

from mxformats.formats import Format, get_format
from mxformats.schemes import fp8 as fp8_reference

from .calls import unclaimed
from .mx_plan import require_tensor

__all__ = ["Fp8Plan", "check_fnuz_args", "check_fp8_args", "quantize_claims", "quantize_plan"]

# -- FP8 --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fp8Plan:
    """What a per-tensor FP8 kernel takes from a record
    (:class:`mxformats.schemes.fp8.Fp8Producer`) and a format.

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


def quantize_claims(record: fp8_reference.Fp8Producer) -> bool:
    """Whether the kernels compute ``record``: its quotient dtype and non-finite rule are one
    of the two kernel shapes (:class:`Fp8Plan`)."""
    return (record.quotient_dtype, record.non_finite) == _FP8_KERNEL_SHAPES[record.reciprocal]


def quantize_plan(record: fp8_reference.Fp8Producer, element: Format, kernels: str) -> Fp8Plan:
    """The kernel plan of ``record`` writing ``element``; NotImplementedError for a record
    whose arithmetic the kernels do not implement."""
    if not quantize_claims(record):
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
    record = fp8_reference.get_producer(profile)
    element = get_format(fmt)
    fp8_reference.check_fp8_format(record, element)
    if (element.name, profile) not in claims:
        raise unclaimed("quantize_fp8", element.name, profile, kernels)
    return element, quantize_plan(record, element, kernels)


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
