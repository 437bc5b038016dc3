"""HIP INT4 kernels: :func:`dequantize_int4` (spec/int4-schemes.md); the argument checks from
:mod:`mxformats.kernels.int4_plan`."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mxformats.schemes import int4 as int4_reference

from .. import calls, int4_plan
from ._launch import (
    _DTYPE_IDS,
    KERNELS,
    _executor,
)

#: ``(format, profile)`` pairs per function, as ``tests/kernels/backends.py`` describes.
SUPPORTED: dict[str, tuple[tuple[str, str], ...]] = {
    "dequantize_int4": tuple(("int4", name) for name, record in int4_reference.CONSUMERS.items()
                             if int4_plan.dequantize_claims(record)),
}

# -- INT4 and W4A8 ----------------------------------------------------------------------------


def dequantize_int4(q: torch.Tensor, scales: torch.Tensor, *, group_size: int | None = 32,
                    axis: int = -1, profile: str = "compressed-tensors",
                    dtype: Any = np.float32) -> torch.Tensor:
    """``q × scale`` as ``mxformats.dequantize_int4`` computes it: rounded once into the
    consumer's type (compressed-tensors: the scale's dtype; quark: float32, the scale first
    cast to float32), then into ``dtype`` (spec/int4-schemes.md, "Dequantization").

    ``q``: an integer tensor of values in [-8, 7]; ``scales``: a float tensor (float64
    included), ``q``'s shape with ``axis`` divided by ``group_size`` (1 for None, per channel).
    """
    int4_plan.check_int4_call("dequantize_int4", profile, group_size, SUPPORTED["dequantize_int4"],
                         KERNELS)
    values = int4_plan.as_int8(q, "dequantize_int4", ValueError, KERNELS, check_int8=True)
    s = calls.require_tensor(scales, "scales", KERNELS)
    calls.require_kernel_float(s.dtype, "dequantize_int4 scales", _DTYPE_IDS, KERNELS)
    out_dtype = calls.as_torch_dtype(dtype, KERNELS)
    ax, n, size = int4_plan.check_group_scales(values, s, group_size, axis)
    if int4_plan.dequantize_plan(profile).float32_product:  # Quark: float32 × the float32 scale
        s = s.to(torch.float32)
    moved = values.movedim(ax, -1)
    lead = tuple(moved.shape[:-1])
    q2d = moved.contiguous().reshape(-1, n)
    s2d = s.movedim(ax, -1).contiguous().reshape(q2d.shape[0], -1)
    out = torch.empty((q2d.shape[0], n), dtype=out_dtype, device=values.device)
    if out.numel():
        _executor(values.device).run("dequantize_int4",
                                     [_DTYPE_IDS[s.dtype], _DTYPE_IDS[out_dtype], q2d.shape[0],
                                      n, size],
                                     [q2d, s2d], [out])
    result: torch.Tensor = out.reshape(*lead, n).movedim(-1, ax).contiguous()
    return result


