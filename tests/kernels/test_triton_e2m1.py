"""The E2M1 encoder of the Triton NVFP4 quantizer (``nvfp4._e2m1_code``: one float32 addition
rounds, the sum's bits give the code) against the reference's
:func:`~mxformats.schemes.nvfp4.e2m1_codes`, by bytes.

On ``--device cpu`` the interpreter runs it over every float32 sign/exponent/top-mantissa class
with its low bits at the rounding edges (every tie of every binade and its neighbours, ±0,
subnormals, ±Inf, NaN, values past 6), every bfloat16 and a million seeded random float32
patterns; on ``--device cuda`` over every float32 of the binades that hold a rounding decision
(exponent fields 0 to 1 and 2**-5 to 2**3: below, everything rounds to ±0; above, saturates)
and of the two largest, a binade at a time.
"""

from __future__ import annotations

import numpy as np
from conftest import requires
from test_fast_compiled_nvfp4 import _float32_classes

from mxformats.schemes import nvfp4 as reference

from .elementwise import map_to_bytes

torch = requires("torch")
nvfp4 = requires("mxformats.kernels.triton.nvfp4")

BLOCK = 1 << 14


def _codes(bits: np.ndarray, device: str, nan_code: int = 7) -> np.ndarray:
    q = torch.from_numpy(bits.view(np.float32)).to(device)
    return map_to_bytes(nvfp4._e2m1_code, nan_code, q, BLOCK)


def _expected(bits: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return reference.e2m1_codes(bits.view(np.float32))


def test_e2m1_code_every_rounding_class(device: str) -> None:
    """Every class of :func:`_float32_classes`, through the kernel on this device; on a GPU
    also every float32 of the module docstring's binades (both signs), one at a time."""
    bits = _float32_classes()
    np.testing.assert_array_equal(_codes(bits, device), _expected(bits))
    if device != "cuda":
        return
    low = np.arange(1 << 23, dtype=np.uint32)
    for field in (0, 1, *range(127 - 5, 127 + 4), 254, 255):
        binade = (np.uint32(field) << np.uint32(23)) | low
        binade = np.concatenate([binade, binade | np.uint32(0x80000000)])
        np.testing.assert_array_equal(_codes(binade, device), _expected(binade),
                                      err_msg=f"exponent field {field}")


def test_another_nan_code_is_set_by_the_select(device: str) -> None:
    """A NaN code other than 6.0's (7) takes the select the clamp makes needless for 7: NaNs
    of both signs get it, nothing else changes."""
    bits = _float32_classes()
    q = bits.view(np.float32)
    want = np.where(np.isnan(q), 0xF, _expected(bits)).astype(np.uint8)
    np.testing.assert_array_equal(_codes(bits, device, nan_code=0xF), want)
