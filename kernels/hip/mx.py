"""HIP MX kernels: :func:`quantize_mx` and :func:`dequantize_mx` (spec/mx.md); the argument
checks, layout and per-profile constants come from :mod:`mxformats.kernels.mx_plan`."""

from __future__ import annotations

from typing import Any

import torch

from mxformats.formats import E2M1, Format
from mxformats.schemes.mx import MXArray
from mxformats.schemes.mx.consumers import CONSUMERS
from mxformats.schemes.mx.producers import PRODUCERS

from .. import mx_plan as plans
from ..mx_plan import KERNEL_ELEMENTS
from ._launch import (
    E2M1_ADDITION,
    _executor,
    _half_factors_on,
    _table_on,
)

#: ``(format, profile)`` pairs per function, as ``tests/kernels/backends.py`` describes.
SUPPORTED: dict[str, tuple[tuple[str, str], ...]] = {
    "quantize_mx": tuple((fmt.name, name) for name, producer in PRODUCERS.items()
                         for fmt in KERNEL_ELEMENTS if plans.quantize_claims(producer, fmt)),
    "dequantize_mx": tuple((fmt.name, name) for name in CONSUMERS for fmt in KERNEL_ELEMENTS
                           if plans.dequantize_claims(name, fmt)),
}

#: The largest MX block the quantize kernel reduces inside one wave (32 lanes x 8 elements).
MAX_BLOCK_SIZE = 256


# -- MX ---------------------------------------------------------------------------------------


def _layout_dtype_id(layout: plans.FloatLayout) -> int:
    """The kernels' dtype number of a plan's float32 / bfloat16 / float16 layout."""
    return {23: 0, 7: 1, 10: 2}[layout.mbits]


def _quantize_rules(plan: plans.QuantizePlan) -> list[int]:
    """The plan's fields in the order of ``rules`` in mx_quantize.hip."""
    return [plan.elem.bits, plan.elem.mbits, plan.elem.bias, plan.elem.max_code,
            int(plan.nan_ignoring_max), int(plan.round_away), plan.zero_sign,
            plan.arith_zero_exp, *plan.inf_codes, *plan.nan_codes,
            int(plan.generated_nan_negative), int(plan.factor_nan_wins), plans.FAST_K_MIN,
            plan.fast_k_limit, *E2M1_ADDITION]


def quantize_mx(x: torch.Tensor, elem: Format | str = E2M1, *, block_size: int = 32,
                axis: int = -1, profile: str = "ocp") -> MXArray:
    """Quantize ``x`` to MX blocks along ``axis`` exactly as ``mxformats.quantize_mx`` with
    the same profile does (spec/mx.md).

    ``x``: a float32, bfloat16 or float16 tensor, any shape and strides. Profiles:
    :data:`SUPPORTED` ``["quantize_mx"]``; another registered profile, float64 input or a block
    over 256 elements raises ``NotImplementedError``. Returns the reference's
    :class:`~mxformats.schemes.mx.MXArray` (unpacks as ``codes, scales``), its uint8 tensors on
    ``x``'s device laid out as the reference's.
    """
    call = plans.prepare_quantize(x, elem, block_size=block_size, axis=axis, profile=profile,
                                  claims=SUPPORTED["quantize_mx"])
    if block_size > MAX_BLOCK_SIZE:
        raise NotImplementedError(f"the HIP MX kernels take blocks of at most {MAX_BLOCK_SIZE} "
                                  f"elements, not {block_size}")
    rows, n = call.source.shape
    if rows and n:
        plan = call.plan
        device = call.source.device
        _executor(device).run(
            "quantize_mx",
            [_layout_dtype_id(plan.source), rows, n, block_size, *_quantize_rules(plan)],
            [call.source, _table_on(plan, device)], [call.codes, call.scales])
    return call.finish()


def dequantize_mx(codes: torch.Tensor, scales: torch.Tensor | None = None,
                  elem: Format | str = E2M1, *, block_size: int = 32, axis: int = -1,
                  profile: str = "ocp", dtype: Any = torch.float32) -> torch.Tensor:
    """Decode MX blocks exactly as ``mxformats.dequantize_mx`` with the same consumer
    profile does (spec/mx.md, "Consumers").

    ``codes``/``scales``: uint8 tensors as :func:`quantize_mx` returns them. ``dtype``: torch
    float32, bfloat16 or float16 (the consumer's own type or an exactly wider one). Profiles:
    :data:`SUPPORTED` ``["dequantize_mx"]``. Returns a tensor of ``dtype`` on the codes' device.
    """
    call = plans.prepare_dequantize(codes, scales, elem, block_size=block_size, axis=axis,
                                    profile=profile, dtype=dtype,
                                    claims=SUPPORTED["dequantize_mx"])
    rows, n = call.out.shape
    if rows and n:
        plan = call.plan
        rules = [plan.elem.bits, plan.elem.ebits, plan.elem.mbits, plan.elem.bias,
                 plan.elem.specials, _layout_dtype_id(plan.own), _layout_dtype_id(plan.out),
                 int(plan.clamp), int(plan.nan_on_ff), int(plan.product)]
        device = call.out.device
        _executor(device).run("dequantize_mx", [rows, n, block_size, *rules],
                              [call.codes, call.scales, _table_on(plan, device),
                               _half_factors_on(plan, device)], [call.out])
    return call.finish()


