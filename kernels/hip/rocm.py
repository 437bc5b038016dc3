"""The HIP kernels on ROCm PyTorch: built with ``torch.utils.cpp_extension`` (hipcc) on first
use and called through ``mxf_run`` with device pointers, behind the same functions as
:mod:`mxformats.kernels.hip` (which uses this module for CUDA tensors when ``torch.version.hip``
is set). Not run in this project's CI: it needs an AMD GPU and ROCm >= 6 for gfx942/gfx950.

``SUPPORTED`` is the HIP backend's; ``tests/kernels/backends.py`` lists this module as the
``hip-rocm`` backend on ``--device cuda`` only when ``torch.version.hip`` is set.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from . import (
    SUPPORTED,
    dequantize_int4,
    dequantize_mx,
    dequantize_w4a8,
    e4m3fn_to_fnuz,
    quantize_fp8,
    quantize_mx,
)
from ._build import DISPATCH, HIPCC_FLAGS, KERNELS, SOURCE_DIR, cache_dir
from ._device import SharedLibrary

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


@functools.cache
def library() -> SharedLibrary:
    """The kernels built for this machine's AMD GPU by cpp_extension (cached by torch)."""
    if not torch.version.hip:
        raise RuntimeError("mxformats.kernels.hip.rocm needs a ROCm build of PyTorch")
    from torch.utils import cpp_extension

    build = cache_dir() / "rocm"
    build.mkdir(parents=True, exist_ok=True)
    sources = [str(SOURCE_DIR / name) for name in (*KERNELS, DISPATCH)]
    # is_python_module=False: a plain shared library (mxf_run is extern "C", no pybind).
    # dispatch.cpp goes to the host compiler: it must see the HIP runtime, not hip_cpu.h.
    cpp_extension.load(name="mxf_hip_rocm", sources=sources,
                       extra_cflags=[*HIPCC_FLAGS, "-D__HIP_PLATFORM_AMD__=1"],
                       extra_cuda_cflags=list(HIPCC_FLAGS),
                       extra_include_paths=[str(SOURCE_DIR)], build_directory=str(build),
                       is_python_module=False)
    return SharedLibrary(Path(build) / "mxf_hip_rocm.so")
