"""The E4M3FN encoder of the Triton FP8 quantizers (``fp8._encode_float32``) in both of its
forms: the integer encoder (the interpreter, GPUs before sm_89) and the hardware conversion
``cvt.rn.satfinite.e4m3x2.f32`` (:func:`mxformats.kernels.triton.int4.hardware_e4m3`).

Oracle: ml_dtypes' float32 -> float8_e4m3fn cast (nearest even, subnormals kept) of the value
clamped to ±448, as the kernels clamp before they encode (beyond ±448, ±Inf included, both
forms saturate). Compared by bytes. On ``--device cpu`` the interpreter runs the integer
encoder over every bfloat16 value; on ``--device cuda`` both forms run over every float32 of
the binades E4M3FN can round into (and the values around them), and must give equal bytes.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
from conftest import requires

from mxformats.formats import E4M3FN, E4M3FNUZ, E5M2
from mxformats.kernels.mx_plan import FloatLayout

from .elementwise import map_to_bytes

torch = requires("torch")
triton = requires("triton")
tl = requires("triton.language")
fp8 = requires("mxformats.kernels.triton.fp8")
int4 = requires("mxformats.kernels.triton.int4")

BLOCK = 1024


@triton.jit
def _e4m3fn(v: Any, HARDWARE: tl.constexpr) -> Any:
    return fp8._encode_float32(v, 3, 7, 0x80, 0x7E, True, HARDWARE)


def _encode(values: Any, hardware: bool) -> np.ndarray:
    return map_to_bytes(_e4m3fn, hardware, values, BLOCK)


def _expected(values: np.ndarray) -> np.ndarray:
    clamped = np.clip(values, -448.0, 448.0)
    return clamped.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def _every_bfloat16() -> np.ndarray:
    bits = np.arange(1 << 16, dtype=np.uint32) << 16
    values = bits.view(np.float32)
    return values[~np.isnan(values)]


def test_hardware_e4m3_only_for_e4m3fn_on_sm89_cuda(device: str) -> None:
    """The interpreter never takes the hardware conversion; a CUDA device takes it from
    compute capability 8.9, for E4M3FN alone (E4M3FNUZ and E5M2 keep the integer encoder)."""
    t = torch.zeros(1, device=device)
    layouts = {fmt.name: FloatLayout.of_format(fmt) for fmt in (E4M3FN, E4M3FNUZ, E5M2)}
    expected = device == "cuda" and torch.version.hip is None \
        and torch.cuda.get_device_capability() >= (8, 9)
    assert int4.hardware_e4m3(t, layouts["e4m3fn"]) is expected
    assert not int4.hardware_e4m3(t, layouts["e4m3fnuz"])
    assert not int4.hardware_e4m3(t, layouts["e5m2"])


def test_integer_encoder_every_bfloat16(device: str) -> None:
    """Every bfloat16 value (NaN aside: the callers set a NaN's code), ±Inf and beyond ±448
    saturating, through the integer encoder on this device."""
    values = _every_bfloat16()
    got = _encode(torch.from_numpy(values).to(device), hardware=False)
    np.testing.assert_array_equal(got, _expected(values))


def _float32_sweep(exponent: int) -> np.ndarray:
    """Every float32 of one binade (both signs)."""
    bits = (np.uint32(exponent) << np.uint32(23)) | np.arange(1 << 23, dtype=np.uint32)
    return np.concatenate([bits, bits | np.uint32(0x80000000)]).view(np.float32)


def test_hardware_conversion_equals_integer_encoder(device: str) -> None:
    """On a GPU with the conversion: every float32 of the binades from 2**-12 (all rounding to
    ±0 or the smallest subnormal, 2**-9) to 2**9 (saturating beyond 448), float32 zeros and
    subnormals (exponent field 0) and ±Inf (field 255; a NaN's code is the caller's), through
    both forms, one binade at a time: equal bytes, and ml_dtypes' bytes."""
    layout = FloatLayout.of_format(E4M3FN)
    if not int4.hardware_e4m3(torch.zeros(1, device=device), layout):
        assert device == "cpu" or torch.cuda.get_device_capability() < (8, 9)
        return  # the interpreter's form is test_integer_encoder_every_bfloat16's
    for exponent in (0, *range(127 - 12, 127 + 10), 255):
        values = _float32_sweep(exponent)
        if exponent == 255:
            values = values[np.isinf(values)]
        t = torch.from_numpy(values).to(device)
        hardware, integer = _encode(t, hardware=True), _encode(t, hardware=False)
        np.testing.assert_array_equal(hardware, integer, err_msg=f"exponent field {exponent}")
        np.testing.assert_array_equal(hardware, _expected(values),
                                      err_msg=f"exponent field {exponent}")
