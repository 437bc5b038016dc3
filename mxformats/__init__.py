"""mxformats: bit-exact reference codecs and a spec for low-precision MoE checkpoint formats.

Each element format is one frozen :class:`~mxformats.formats.Format` (``E2M1``, ``E8M0``, ...)
with ``encode`` and ``decode``. The normative text is in ``spec/``; kernels in
``mxformats.kernels`` must equal this reference bit for bit.

>>> from mxformats import E2M1, E8M0
>>> E2M1.encode([0.25, 0.75, 5.0, -7.0]).tolist()
[0, 2, 6, 15]
>>> float(E8M0.decode(0)) == 2.0**-127
True
"""

from mxformats._version import __version__
from mxformats.checkpoint import read_tensor
from mxformats.codec import bfloat16_bits_to_float32
from mxformats.compare import compare_profiles
from mxformats.conversions import e4m3fn_to_fnuz, e4m3fn_to_fnuz_exact
from mxformats.formats import (
    E2M1,
    E2M3,
    E3M2,
    E4M3FN,
    E4M3FNUZ,
    E5M2,
    E8M0,
    FORMATS,
    INT4,
    OVERFLOWS,
    ROUNDINGS,
    UINT4,
    Format,
    get_format,
)
from mxformats.records import DeprecatedAliases
from mxformats.registry import ProfileInfo, profiles
from mxformats.schemes.fp8 import dequantize_fp8, quantize_fp8
from mxformats.schemes.fp8_block import FP8BlockArray, dequantize_fp8_block, quantize_fp8_block
from mxformats.schemes.int4 import Int4Array, dequantize_int4, pack_int4, quantize_int4, unpack_int4
from mxformats.schemes.mx import MXArray, dequantize_mx, pack_fp4, quantize_mx, unpack_fp4
from mxformats.schemes.nvfp4 import NVFP4Array, dequantize_nvfp4, quantize_nvfp4
from mxformats.schemes.w4a8 import W4A8Array, dequantize_w4a8, quantize_w4a8
from mxformats.validate.descriptors import profile_for

__all__ = [
    "E2M1",
    "E2M3",
    "E3M2",
    "E4M3FN",
    "E4M3FNUZ",
    "E5M2",
    "E8M0",
    "FORMATS",
    "INT4",
    "OVERFLOWS",
    "ROUNDINGS",
    "UINT4",
    "FP8BlockArray",
    "Format",
    "Int4Array",
    "MXArray",
    "NVFP4Array",
    "ProfileInfo",
    "W4A8Array",
    "__version__",
    "bfloat16_bits_to_float32",
    "compare_profiles",
    "dequantize_fp8",
    "dequantize_fp8_block",
    "dequantize_int4",
    "dequantize_mx",
    "dequantize_nvfp4",
    "dequantize_w4a8",
    "e4m3fn_to_fnuz",
    "e4m3fn_to_fnuz_exact",
    "get_format",
    "pack_fp4",
    "pack_int4",
    "profile_for",
    "profiles",
    "quantize_fp8",
    "quantize_fp8_block",
    "quantize_int4",
    "quantize_mx",
    "quantize_nvfp4",
    "quantize_w4a8",
    "read_tensor",
    "unpack_fp4",
    "unpack_int4",
]

#: The names before the one vocabulary, importable with a DeprecationWarning.
__getattr__ = DeprecatedAliases(__name__, {"W4A8": "W4A8Array"}, globals())
