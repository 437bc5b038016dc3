"""The HIP kernels on the CPU runtime with waves of 32 lanes (RDNA, NVIDIA) instead of CDNA's
64: the ``hip-cpu-wave32`` backend of ``tests/kernels``, so that every shared test runs the
kernels at both wave sizes. Same functions and ``SUPPORTED`` as :mod:`mxformats.kernels.hip`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from . import (
    SUPPORTED,
    dequantize_fp8_block,
    dequantize_int4,
    dequantize_mx,
    dequantize_nvfp4,
    dequantize_w4a8,
    e4m3fn_to_fnuz,
    quantize_fp8,
    quantize_fp8_block,
    quantize_mx,
    quantize_nvfp4,
)
from ._device import wave_size

__all__ = [
    "SUPPORTED",
    "dequantize_fp8_block",
    "dequantize_int4",
    "dequantize_mx",
    "dequantize_nvfp4",
    "dequantize_w4a8",
    "e4m3fn_to_fnuz",
    "quantize_fp8",
    "quantize_fp8_block",
    "quantize_mx",
    "quantize_nvfp4",
]

P = ParamSpec("P")
R = TypeVar("R")
WAVE = 32


def _on_waves_of_32(fn: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(fn)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
        with wave_size(WAVE):
            return fn(*args, **kwargs)

    return wrapped


quantize_mx = _on_waves_of_32(quantize_mx)
dequantize_mx = _on_waves_of_32(dequantize_mx)
dequantize_int4 = _on_waves_of_32(dequantize_int4)
dequantize_w4a8 = _on_waves_of_32(dequantize_w4a8)
quantize_fp8 = _on_waves_of_32(quantize_fp8)
e4m3fn_to_fnuz = _on_waves_of_32(e4m3fn_to_fnuz)
quantize_fp8_block = _on_waves_of_32(quantize_fp8_block)
dequantize_fp8_block = _on_waves_of_32(dequantize_fp8_block)
quantize_nvfp4 = _on_waves_of_32(quantize_nvfp4)
dequantize_nvfp4 = _on_waves_of_32(dequantize_nvfp4)
