"""The HIP kernels on ROCm PyTorch, as a backend of their own: the same functions as
:mod:`mxformats.kernels.hip`, which runs CUDA tensors on the ROCm build when
``torch.version.hip`` is set (built with ``torch.utils.cpp_extension``, hipcc, on first use:
``_build.rocm_library``, loaded by ``_launch``; called through ``mxf_run`` with device
pointers). ``library`` is that build. Not run in this project's CI: it needs an AMD GPU and
ROCm >= 6 for gfx942/gfx950.

``SUPPORTED`` is the HIP backend's; ``tests/kernels/backends.py`` lists this module as the
``hip-rocm`` backend on ``--device cuda`` only when ``torch.version.hip`` is set.
"""

from __future__ import annotations

from . import (
    SUPPORTED,
    dequantize_int4,
    dequantize_mx,
    dequantize_w4a8,
    e4m3fn_to_fnuz,
    quantize_fp8,
    quantize_mx,
)
from ._launch import rocm_library as library

__all__ = [
    "SUPPORTED",
    "dequantize_int4",
    "dequantize_mx",
    "dequantize_w4a8",
    "e4m3fn_to_fnuz",
    "library",
    "quantize_fp8",
    "quantize_mx",
]
