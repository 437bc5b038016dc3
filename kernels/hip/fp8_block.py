"""HIP FP8 block kernels: :func:`quantize_fp8_block`, :func:`dequantize_fp8_block`
(spec/fp8-block.md); the plan from :mod:`mxformats.kernels.fp8_block_plan`."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mxformats.schemes import fp8_block as fp8_block_reference

from .. import calls
from .. import fp8_block_plan as block_plans
from ._launch import (
    _DTYPE_IDS,
    _INPUT_IDS,
    _NUMPY_DTYPE_IDS,
    KERNELS,
    _executor,
    _f32_bits,
    _numpy_dtype,
)

#: ``(format, profile)`` pairs per function, as ``tests/kernels/backends.py`` describes.
SUPPORTED: dict[str, tuple[tuple[str, str], ...]] = {
    "quantize_fp8_block": tuple((record.code_format.name, name)
                                for name, record in fp8_block_reference.PRODUCERS.items()
                                if block_plans.quantize_claims(record)),
    "dequantize_fp8_block": tuple((record.code_format.name, name)
                                  for name, record in fp8_block_reference.PRODUCERS.items()),
}

# -- FP8 block scaling ------------------------------------------------------------------------


def _block_rules(plan: block_plans.FP8BlockPlan) -> list[int]:
    """The plan's fields in the order of ``rules`` in fp8_block.hip."""
    scale = plan.scale_dtype
    zero_scale = plan.zero_scale or 0.0
    zero_bits = int(np.asarray(zero_scale, scale).view(f"u{scale.itemsize}"))
    element = plan.element
    return [_NUMPY_DTYPE_IDS[scale.name], _NUMPY_DTYPE_IDS[plan.quotient_dtype.name],
            _f32_bits(plan.fmt_max), int(plan.has_floor), _f32_bits(plan.amax_floor),
            _f32_bits(plan.max_over_amax_floor), int(plan.power_of_two_scale),
            int(plan.zero_scale is not None), zero_bits, plan.multiplier,
            int(plan.clamp_to_max), element.ebits, element.mbits, element.bias,
            element.max_code, fp8_block_reference.NAN_CODE, int(plan.fnuz)]



def quantize_fp8_block(x: torch.Tensor, *, block: tuple[int, int] = (128, 128),
                       profile: str = "deepseek") -> fp8_block_reference.FP8BlockArray:
    """Quantize a 2-D weight to FP8 with one scale per ``block`` tile exactly as
    ``mxformats.schemes.fp8_block.quantize_fp8_block`` with the same profile does
    (spec/fp8-block.md; the profile's choices come from its record through
    :func:`mxformats.kernels.fp8_block_plan.quantize_plan`).

    ``x``: a float16, bfloat16 or float32 ``[M, N]`` tensor, any strides (read contiguous).
    Returns the reference's :class:`~mxformats.schemes.fp8_block.FP8BlockArray` (unpacks as
    ``codes, scales``): uint8 ``[M, N]`` and ``[ceil(M / bm), ceil(N / bn)]`` in the
    profile's scale dtype, on ``x``'s device. Raises what the reference raises for bad
    arguments."""
    t = calls.require_tensor(x, "quantize_fp8_block", KERNELS)
    dtype = _numpy_dtype(t.dtype)
    bm, bn = block_plans.check_quantize_args(tuple(t.shape), dtype, block, profile)
    plan = block_plans.quantize_plan(profile, dtype)
    rows, cols = t.shape
    codes = torch.empty((rows, cols), dtype=torch.uint8, device=t.device)
    scales = torch.empty(fp8_block_reference.scale_grid((rows, cols), (bm, bn)),
                         dtype=getattr(torch, plan.scale_dtype.name), device=t.device)
    _executor(t.device).run("quantize_fp8_block",
                            [_DTYPE_IDS[t.dtype], rows, cols, bm, bn, *_block_rules(plan)],
                            [t.contiguous()], [codes, scales])
    return calls.as_record(fp8_block_reference.FP8BlockArray, codes, scales, (bm, bn), plan.profile)


def dequantize_fp8_block(codes: torch.Tensor, scales: torch.Tensor, *,
                         block: tuple[int, int] = (128, 128), profile: str = "deepseek",
                         dtype: Any = torch.float32) -> torch.Tensor:
    """The bytes of ``mxformats.schemes.fp8_block.dequantize_fp8_block`` (vLLM's
    ``scaled_dequantize``: each code times its tile's scale, both as float32, one float32
    rounding, then one rounding to ``dtype``: float32, bfloat16, float16 or float64, torch or
    numpy). ``codes``: a uint8 ``[M, N]`` tensor; ``scales``: float32, bfloat16 or float16,
    one per tile (``[ceil(M / bm), ceil(N / bn)]``). The profile picks the code format."""
    c = calls.require_tensor(codes, "dequantize_fp8_block", KERNELS)
    s = calls.require_tensor(scales, "dequantize_fp8_block", KERNELS)
    layout, (bm, bn), _ = block_plans.check_dequantize_args(
        tuple(c.shape), str(c.dtype).removeprefix("torch."), tuple(s.shape), block, profile)
    scale_id = calls.require_kernel_float(s.dtype, "dequantize_fp8_block scales", _INPUT_IDS,
                                         KERNELS)
    out_dtype = calls.as_torch_dtype(dtype, KERNELS)
    out = torch.empty(tuple(c.shape), dtype=out_dtype, device=c.device)
    if out.numel():
        _executor(c.device).run(
            "dequantize_fp8_block",
            [scale_id, _DTYPE_IDS[out_dtype], *c.shape, bm, bn, layout.ebits, layout.mbits,
             layout.bias, layout.specials],
            [c, s], [out])
    return out


