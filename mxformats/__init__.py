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
from mxformats.codec import bfloat16_bits_to_float32
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
    "Format",
    "__version__",
    "bfloat16_bits_to_float32",
    "e4m3fn_to_fnuz",
    "e4m3fn_to_fnuz_exact",
    "get_format",
]
