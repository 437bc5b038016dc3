"""Triton kernels, byte-identical to the numpy reference (same names and arguments, torch
tensors in and out). ``SUPPORTED`` merges the ``(format, profile)`` pairs each module claims,
per function (``tests/kernels/backends.py``)."""

from .fp8 import SUPPORTED as _FP8_SUPPORTED
from .fp8 import dequantize_w4a8, e4m3fn_to_fnuz, quantize_fp8
from .fp8_block import SUPPORTED as _FP8_BLOCK_SUPPORTED
from .fp8_block import dequantize_fp8_block, quantize_fp8_block
from .int4 import SUPPORTED as _INT4_SUPPORTED
from .int4 import dequantize_int4, pack_int4, quantize_int4, unpack_int4
from .mx import SUPPORTED as _MX_SUPPORTED
from .mx import dequantize_mx, quantize_mx
from .nvfp4 import SUPPORTED as _NVFP4_SUPPORTED
from .nvfp4 import dequantize_nvfp4, quantize_nvfp4

SUPPORTED: dict[str, tuple[tuple[str, str], ...]] = {
    **_MX_SUPPORTED, **_INT4_SUPPORTED, **_FP8_SUPPORTED, **_FP8_BLOCK_SUPPORTED,
    **_NVFP4_SUPPORTED,
}

__all__ = [
    "SUPPORTED",
    "dequantize_fp8_block",
    "dequantize_int4",
    "dequantize_mx",
    "dequantize_nvfp4",
    "dequantize_w4a8",
    "e4m3fn_to_fnuz",
    "pack_int4",
    "quantize_fp8",
    "quantize_fp8_block",
    "quantize_int4",
    "quantize_mx",
    "quantize_nvfp4",
    "unpack_int4",
]
