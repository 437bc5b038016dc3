"""HIP per-tensor FP8 kernels: :func:`quantize_fp8`, :func:`e4m3fn_to_fnuz` (spec/w4a8.md,
spec/e4m3fnuz.md), and :func:`dequantize_w4a8` (spec/w4a8.md), as in
:mod:`mxformats.kernels.triton.fp8`; the argument checks from :mod:`mxformats.kernels.fp8_plan`
and :mod:`mxformats.kernels.int4_plan`."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mxformats.arith import require_finite
from mxformats.formats import E4M3FN, Format
from mxformats.schemes import fp8 as fp8_reference
from mxformats.schemes import int4 as int4_reference

from .. import calls, fp8_plan, int4_plan
from ._launch import (
    _DTYPE_IDS,
    _INPUT_IDS,
    KERNELS,
    _executor,
    _f32_bits,
)

#: ``(format, profile)`` pairs per function, as ``tests/kernels/backends.py`` describes.
SUPPORTED: dict[str, tuple[tuple[str, str], ...]] = {
    "dequantize_w4a8": (("w4a8", "vllm"),),
    "quantize_fp8": tuple((fmt.name, name) for name, record in fp8_reference.PRODUCERS.items()
                          if fp8_plan.quantize_claims(record) for fmt in record.formats),
    "e4m3fn_to_fnuz": (("e4m3fn", "vllm"),),
}


def dequantize_w4a8(weight: torch.Tensor, weight_scale: torch.Tensor,
                    weight_scale_2: torch.Tensor, *, dtype: Any = np.float32) -> torch.Tensor:
    """``q × float32(s2 × s1)`` per output row, as ``mxformats.dequantize_w4a8`` (vLLM's
    fold; spec/w4a8.md, "Dequantization").

    ``weight``: int32 ``[O, W]`` in Quark's nibble order (8 W columns out); ``weight_scale``:
    one float32; ``weight_scale_2``: float32 ``[O]``.
    """
    w, s1, s2 = int4_plan.check_w4a8_args(weight, weight_scale, weight_scale_2, KERNELS)
    rows, words = w.shape
    out_dtype = calls.as_torch_dtype(dtype, KERNELS)
    out = torch.empty((rows, 8 * words), dtype=out_dtype, device=w.device)
    if out.numel():
        _executor(w.device).run(
            "dequantize_w4a8",
            [_DTYPE_IDS[out_dtype], rows, words, *int4_reference.NIBBLE_ORDER["quark"],
             int4_reference.NIBBLE_OFFSET["quark"]],
            [w.view(torch.int32), s1.reshape(1), s2], [out])
    return out


# -- FP8 --------------------------------------------------------------------------------------


def _fp8_target(elem: Format, plan: fp8_plan.Fp8Plan) -> list[int]:
    """The fields of mxf::Fp8Target (fp8_cast.hip), from the format's definition and the
    profile's plan (its record in mxformats.schemes.fp8): ``dynamic`` is vLLM's reciprocal
    arithmetic."""
    return [elem.ebits, elem.mbits, elem.bias, elem.max_code, _f32_bits(plan.limit),
            _f32_bits(plan.zero_scale), int(elem.signed_zero), int(plan.reciprocal)]


def quantize_fp8(x: torch.Tensor, fmt: Format | str = E4M3FN, *,
                 profile: str = "static") -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor FP8 as ``mxformats.quantize_fp8`` (spec/w4a8.md, "FP8 per-tensor"):
    Quark ``static`` (``s = amax / fmt.max``, ``codes = fmt(clamp(dtype(x / s)))``) and vLLM's
    ``vllm-fnuz``, ``dynamic-fn``, ``dynamic-fnuz`` (``fmt(clamp(x * (1 / s), ±M))``).

    ``x``: float32, bfloat16 or float16, any shape. Returns ``(codes, scale)``: uint8 of
    ``x``'s shape and a float32 0-d tensor. NaN/±Inf inputs to ``static`` raise ValueError as
    the reference does. Profiles: :data:`SUPPORTED` ``["quantize_fp8"]``.
    """
    elem, plan = fp8_plan.check_fp8_args(fmt, profile, SUPPORTED["quantize_fp8"], KERNELS)
    t = calls.require_tensor(x, "quantize_fp8", KERNELS)
    dtype_id = calls.require_kernel_float(t.dtype, "quantize_fp8", _INPUT_IDS, KERNELS)
    source = t.contiguous().reshape(-1)
    codes = torch.empty(source.shape, dtype=torch.uint8, device=t.device)
    scale = torch.empty((), dtype=torch.float32, device=t.device)
    amax_bits = torch.empty(1, dtype=torch.int32, device=t.device)
    _executor(t.device).run("quantize_fp8", [dtype_id, source.numel(), *_fp8_target(elem, plan)],
                            [source], [codes, scale, amax_bits])
    if plan.refuse_non_finite and int(amax_bits.item()) >= 0x7F800000:  # as the reference
        require_finite(
            source.cpu().float().numpy(), f"quantize_fp8(profile={profile!r})")
    return codes.reshape(t.shape), scale


def e4m3fn_to_fnuz(codes: torch.Tensor,
                   scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's MI300 normalisation, as ``mxformats.conversions.e4m3fn_to_fnuz``: the same bits
    read as E4M3FNUZ (0x80 becomes 0x00) and every float32 scale doubled (spec/e4m3fnuz.md)."""
    c, s = fp8_plan.check_fnuz_args(codes, scale, KERNELS)
    codes_out = torch.empty_like(c, memory_format=torch.contiguous_format)
    scale_out = torch.empty_like(s, memory_format=torch.contiguous_format)
    if c.numel() or s.numel():
        _executor(c.device).run("e4m3fn_to_fnuz", [c.numel(), s.numel()], [c, s],
                                [codes_out, scale_out])
    return codes_out, scale_out


