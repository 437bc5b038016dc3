"""HIP kernels, byte-identical to the numpy reference: one source, three ways to run it.

Same names and arguments as the reference (``profile=`` included), torch tensors in and out.
CPU tensors run the kernels compiled with g++ against the project's CPU runtime
(``hip_cpu.h``) under AddressSanitizer and UBSan, in a driver subprocess; CUDA tensors run them
compiled by nvcc (NVIDIA, through ``hip_nvidia.h``) or, on ROCm PyTorch, by hipcc
(:mod:`mxformats.kernels.hip.rocm`). The MX argument checks, layout and per-profile constants
come from :mod:`mxformats.kernels.mx_plan`, the INT4, W4A8 and FP8 argument checks from
:mod:`mxformats.kernels.int4_plan` and :mod:`mxformats.kernels.fp8_plan`, all shared with the
Triton backend.

- :func:`quantize_mx`, :func:`dequantize_mx`: every profile the plan describes
  (:data:`SUPPORTED`), E2M1 and E4M3FN elements, power-of-two blocks up to 256 (spec/mx.md);
- :func:`dequantize_int4`: compressed-tensors group scales (spec/int4-schemes.md);
- :func:`dequantize_w4a8`: Quark W4A8 as vLLM folds its scales (spec/w4a8.md);
- :func:`quantize_fp8`: Quark's static per-tensor FP8 and vLLM's dynamic one;
  :func:`e4m3fn_to_fnuz` (spec/e4m3fnuz.md);
- :func:`quantize_fp8_block`, :func:`dequantize_fp8_block`: FP8 block scaling, every profile
  the plan of :mod:`mxformats.kernels.fp8_block_plan` describes (spec/fp8-block.md);
- :func:`quantize_nvfp4`, :func:`dequantize_nvfp4`: NVFP4, every producer and consumer the plan
  of :mod:`mxformats.kernels.nvfp4_plan` describes (spec/nvfp4.md).

Float64 data to quantize raises NotImplementedError (those kernels read at most 32-bit
floats); the dequantizers take float64 scales and write float64 on request.
"""

from ._device import KernelError
from .fp8 import SUPPORTED as _FP8_SUPPORTED
from .fp8 import dequantize_w4a8, e4m3fn_to_fnuz, quantize_fp8
from .fp8_block import SUPPORTED as _FP8_BLOCK_SUPPORTED
from .fp8_block import dequantize_fp8_block, quantize_fp8_block
from .int4 import SUPPORTED as _INT4_SUPPORTED
from .int4 import dequantize_int4
from .mx import SUPPORTED as _MX_SUPPORTED
from .mx import dequantize_mx, quantize_mx
from .nvfp4 import SUPPORTED as _NVFP4_SUPPORTED
from .nvfp4 import dequantize_nvfp4, quantize_nvfp4

__all__ = [
    "SUPPORTED",
    "KernelError",
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

#: ``(format, profile)`` pairs per function, as ``tests/kernels/backends.py`` describes.
SUPPORTED: dict[str, tuple[tuple[str, str], ...]] = {
    **_MX_SUPPORTED, **_INT4_SUPPORTED, **_FP8_SUPPORTED, **_FP8_BLOCK_SUPPORTED,
    **_NVFP4_SUPPORTED,
}
