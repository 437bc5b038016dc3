"""HIP NVFP4 kernels: :func:`quantize_nvfp4`, :func:`dequantize_nvfp4` (spec/nvfp4.md); the
plan from :mod:`mxformats.kernels.nvfp4_plan`."""

from __future__ import annotations

from typing import Any

import torch

from mxformats.schemes import nvfp4 as nvfp4_reference

from .. import calls
from .. import nvfp4_plan as nvfp4_plans
from ._launch import (
    _DTYPE_IDS,
    _NUMPY_DTYPE_IDS,
    E2M1_ADDITION,
    KERNELS,
    _executor,
    _f32_bits,
    _numpy_dtype,
)

#: ``(format, profile)`` pairs per function, as ``tests/kernels/backends.py`` describes.
SUPPORTED: dict[str, tuple[tuple[str, str], ...]] = {
    "quantize_nvfp4": tuple(("e2m1", name) for name, record in nvfp4_reference.PRODUCERS.items()
                            if nvfp4_plans.quantize_claims(record)),
    "dequantize_nvfp4": tuple(("e2m1", name) for name, record in nvfp4_reference.CONSUMERS.items()
                              if nvfp4_plans.dequantize_claims(record)),
}

# -- NVFP4 ------------------------------------------------------------------------------------

#: At most this many work-groups in pass 1 of the NVFP4 tensor maximum (each takes 2048
#: elements per round); the bytes do not depend on it.
AMAX_GROUPS = 1024
_AMAX_GROUP_ELEMENTS = 256 * 8


def _nvfp4_rules(plan: nvfp4_plans.NVFP4QuantizePlan) -> list[int]:
    """The plan's fields in the order of ``rules`` in nvfp4.hip."""
    scale = plan.scale
    return [_NUMPY_DTYPE_IDS[plan.arithmetic.name], int(plan.inverse_global),
            _f32_bits(plan.six_m), _f32_bits(plan.amax_floor), int(plan.has_nonfinite_global),
            _f32_bits(plan.nonfinite_global), _f32_bits(plan.scale_floor),
            _f32_bits(plan.scale_clamp), _f32_bits(plan.zero_block_scale),
            int(plan.zero_after_cast), plan.nan_scale_byte, plan.element_nan_code,
            *E2M1_ADDITION, scale.ebits, scale.mbits, scale.bias, scale.max_code,
            _f32_bits(nvfp4_reference.E2M1_MAX)]


def quantize_nvfp4(x: torch.Tensor, *, axis: int = -1, profile: str = "modelopt",
                   global_amax: float | None = None) -> nvfp4_reference.NVFP4Array:
    """Quantize ``x`` to NVFP4 along ``axis`` exactly as ``mxformats.quantize_nvfp4`` with the
    same producer profile does (spec/nvfp4.md; the profile's choices come from its record
    through :func:`mxformats.kernels.nvfp4_plan.quantize_plan`).

    ``x``: float32, bfloat16 or float16, any shape and strides, a multiple of 16 along
    ``axis``. ``global_amax``: the tensor maximum the global scale is computed from (default
    ``max|x|``, a deterministic two-pass reduction). Returns the reference's
    :class:`~mxformats.schemes.nvfp4.NVFP4Array` (unpacks as ``codes, scales, global_scale``):
    uint8 E2M1 codes of ``x``'s shape (one per byte), uint8 E4M3FN scales (``axis`` divided by
    16), the float32 global scale in the shape the profile's checkpoint stores. Raises what the
    reference raises (ValueError for NaN or ±Inf in ``x``)."""
    t = calls.require_tensor(x, "quantize_nvfp4", KERNELS)
    dtype = _numpy_dtype(t.dtype)
    ax = nvfp4_plans.check_quantize_args(tuple(t.shape), dtype, axis, profile)
    plan = nvfp4_plans.quantize_plan(profile, dtype)
    try:
        amax = nvfp4_plans.check_global_amax(global_amax, dtype)
        refused: ValueError | None = None
    except ValueError as err:  # raised after the data's own check, as the reference orders them
        amax, refused = None, err
    moved = t.movedim(ax, -1)
    source = moved.contiguous().reshape(-1)
    count = source.numel()
    groups = max(1, min(AMAX_GROUPS, -(-count // _AMAX_GROUP_ELEMENTS)))
    device = t.device
    codes = torch.empty(count, dtype=torch.uint8, device=device)
    scales = torch.empty(count // nvfp4_reference.BLOCK, dtype=torch.uint8, device=device)
    global_scale = torch.empty(1, dtype=torch.float32, device=device)
    amax_bits = torch.empty(1, dtype=torch.int32, device=device)
    partials = torch.empty(groups, dtype=torch.int32, device=device)
    if refused is None and amax is None and not count:  # np.max of nothing, as the reference
        raise ValueError("quantize_nvfp4: the maximum of an empty tensor is undefined; pass "
                         "global_amax")
    _executor(device).run(
        "quantize_nvfp4",
        [_DTYPE_IDS[t.dtype], count, groups, int(amax is not None), _f32_bits(amax or 0.0),
         *_nvfp4_rules(plan)],
        [source], [codes, scales, global_scale, amax_bits, partials])
    if int(amax_bits.item()) >= 0x7F800000:  # |x| bits: NaN or ±Inf somewhere
        raise ValueError(f"quantize_nvfp4(profile={profile!r}): the input holds NaN or ±Inf, "
                         "which the reference refuses")
    if refused is not None:
        raise refused
    scale_shape = (*moved.shape[:-1], moved.shape[-1] // nvfp4_reference.BLOCK)
    return calls.as_record(nvfp4_reference.NVFP4Array,
                     codes.reshape(moved.shape).movedim(-1, ax).contiguous(),
                     scales.reshape(scale_shape).movedim(-1, ax).contiguous(),
                     global_scale.reshape(plan.global_shape), plan.profile, ax)


def dequantize_nvfp4(codes: torch.Tensor, scales: torch.Tensor | None = None,
                     global_scale: torch.Tensor | None = None, *, axis: int = -1,
                     profile: str | None = None, packed: bool = False,
                     dtype: Any = torch.float32) -> torch.Tensor:
    """Decode NVFP4 weights exactly as ``mxformats.dequantize_nvfp4`` with the same consumer
    profile does (spec/nvfp4.md, "Consumers"), then round once to ``dtype`` (float32,
    bfloat16, float16, float64).

    ``codes``: one E2M1 code per element, or two per byte (element 2k low) with ``packed``;
    ``scales``: uint8 E4M3FN, one per 16 along ``axis``; ``global_scale``: one stored value."""
    c = calls.require_tensor(codes, "dequantize_nvfp4", KERNELS)
    if scales is None or global_scale is None:
        raise ValueError("dequantize_nvfp4 needs scales and global_scale")
    s = calls.require_tensor(scales, "dequantize_nvfp4 scales", KERNELS)
    g = calls.require_tensor(global_scale, "dequantize_nvfp4 global_scale", KERNELS)
    ax, plan = nvfp4_plans.check_dequantize_args(
        tuple(c.shape), _numpy_dtype(c.dtype), tuple(s.shape), _numpy_dtype(s.dtype),
        g.numel(), axis=axis, profile=profile, packed=packed)
    if c.numel() and (int(c.min()) < 0 or int(c.max()) > (0xFF if packed else 0xF)):
        raise ValueError("packed fp4 codes are bytes (0..255)" if packed
                         else "codes must be 4-bit E2M1 codes (0..15)")
    out_dtype = calls.as_torch_dtype(dtype, KERNELS)
    moved = c.movedim(ax, -1)
    shape = (*moved.shape[:-1], moved.shape[-1] * (2 if packed else 1))
    out = torch.empty(shape, dtype=out_dtype, device=c.device)
    if out.numel():
        element, scale = plan.element, plan.scale
        _executor(c.device).run(
            "dequantize_nvfp4",
            [int(packed), out.numel(), _DTYPE_IDS[out_dtype], plan.global_op, element.ebits,
             element.mbits, element.bias, element.specials, scale.ebits, scale.mbits,
             scale.bias, scale.specials],
            [moved.contiguous().to(torch.uint8), s.movedim(ax, -1).contiguous(),
             g.reshape(1).to(torch.float32)], [out])
    return out.movedim(-1, ax).contiguous()
