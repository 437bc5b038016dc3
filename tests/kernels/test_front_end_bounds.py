"""The kernel front ends' range checks, from both sides of each bound (every backend on
``--device``): integer tensors wider than the kernels' bytes are checked before the cast, so a
value one past a bound is refused as the reference refuses it and the value at the bound is
accepted and computed as the reference computes it.

- INT4 values (``pack_int4``, ``dequantize_int4``): -9 and 8 refused, -8 and 7 accepted, for
  int8 and for wider integers.
- MX codes and E8M0 scales (``dequantize_mx``, every claimed consumer) held in int16/int32:
  256 refused, 255 accepted.
- NVFP4 codes (``dequantize_nvfp4``) held in int16/int32: one code per element 16 and -1
  refused, 15 and 0 accepted; two per byte 256 and -1 refused, 255 and 0 accepted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conftest import requires

import mxformats
from mxformats.schemes import mx as mx_reference
from mxformats.schemes import nvfp4 as nvfp4_reference

from .backends import Backend

torch = requires("torch")

WIDE = ("int16", "int32")


def _function(backend: Backend, name: str) -> Callable[..., Any]:
    for module in backend.requires:
        requires(module)
    return getattr(backend.load(), name)  # type: ignore[no-any-return]


def _on(a: np.ndarray, device: str) -> Any:
    return torch.from_numpy(np.ascontiguousarray(a)).to(device)


def _bytes(t: Any) -> bytes:
    return bytes(t.cpu().contiguous().view(torch.uint8).numpy().tobytes())


@pytest.mark.kernel("pack_int4")
@pytest.mark.parametrize("dtype", ["int8", *WIDE])
def test_pack_int4_bounds(
    backend: Backend, fmt: str, profile: str, device: str, dtype: str
) -> None:
    pack = _function(backend, "pack_int4")
    layout = profile
    inside = np.array([-8, 7, 0, -1, 1, 6, -7, 7], dtype)
    words = pack(_on(inside, device), layout=layout)
    assert _bytes(words) == mxformats.pack_int4(inside, layout=layout).tobytes()
    for outside in (-9, 8):
        bad = inside.copy()
        bad[3] = outside
        with pytest.raises(ValueError, match=r"\[-8, 7\]"):
            mxformats.pack_int4(bad, layout=layout)
        with pytest.raises(ValueError, match=r"\[-8, 7\]"):
            pack(_on(bad, device), layout=layout)


@pytest.mark.kernel("dequantize_int4")
@pytest.mark.parametrize("dtype", ["int8", *WIDE])
def test_dequantize_int4_bounds(
    backend: Backend, fmt: str, profile: str, device: str, dtype: str
) -> None:
    dequantize = _function(backend, "dequantize_int4")
    q = np.zeros((1, 32), dtype)
    q[0, :2] = -8, 7
    scales = np.full((1, 1), 0.5, np.float32)
    got = dequantize(_on(q, device), _on(scales, device), group_size=32, profile=profile)
    want = mxformats.dequantize_int4(q, scales, group_size=32, profile=profile)
    assert _bytes(got) == want.tobytes()
    for outside in (-9, 8):
        q[0, 5] = outside
        with pytest.raises(ValueError, match=r"\[-8, 7\]"):
            mxformats.dequantize_int4(q, scales, group_size=32, profile=profile)
        with pytest.raises(ValueError, match=r"\[-8, 7\]"):
            dequantize(_on(q, device), _on(scales, device), group_size=32, profile=profile)


@pytest.mark.kernel("dequantize_mx")
@pytest.mark.parametrize("dtype", WIDE)
def test_dequantize_mx_wide_codes_and_scales(
    backend: Backend, fmt: str, profile: str, device: str, dtype: str
) -> None:
    """A packed E2M1 byte or an E4M3FN code, and an E8M0 scale, are bytes: 255 is read (the
    same output as the uint8 byte), 256 is refused (the reference refuses it too)."""
    dequantize = _function(backend, "dequantize_mx")
    elem = fmt
    width = 16 if elem == "e2m1" else 32  # one block of 32 elements
    codes = (np.arange(width, dtype=dtype) * 7 % 200).reshape(1, width)
    codes[0, 3] = 255
    for scale in (130, 255):
        scales = np.array([[scale]], dtype)
        want = mx_reference.dequantize_mx(
            codes.astype(np.uint8), scales.astype(np.uint8), elem, profile=profile
        )
        got = dequantize(
            _on(codes, device), _on(scales, device), elem, profile=profile, dtype=torch.float32
        )
        got = got.cpu().numpy()
        assert np.array_equal(np.isnan(got), np.isnan(want)), (scale, got, want)
        finite = ~np.isnan(want)
        assert np.array_equal(got[finite].view(np.uint32), want[finite].view(np.uint32)), scale
    for code, scale in ((256, 130), (255, 256)):
        codes[0, 3] = code
        scales = np.array([[scale]], dtype)
        with pytest.raises(ValueError):
            mx_reference.dequantize_mx(codes, scales, elem, profile=profile)
        with pytest.raises(ValueError, match=r"bytes|bit"):
            dequantize(
                _on(codes, device), _on(scales, device), elem, profile=profile, dtype=torch.float32
            )


@pytest.mark.kernel("dequantize_nvfp4")
@pytest.mark.parametrize("dtype", WIDE)
@pytest.mark.parametrize("packed", [False, True])
def test_dequantize_nvfp4_wide_codes(
    backend: Backend, fmt: str, profile: str, device: str, dtype: str, packed: bool
) -> None:
    """E2M1 codes in a wider integer tensor: the largest code (15, or the byte 255 packed) and 0
    are read as the uint8 ones are; one past either end (16 or 256 packed, and -1) is refused
    as the reference refuses it."""
    dequantize = _function(backend, "dequantize_nvfp4")
    top = 0xFF if packed else 0xF
    codes = np.zeros((1, 8 if packed else 16), dtype)
    codes[0, :2] = top, 0
    scales = np.array([[0x38]], np.uint8)  # 1.0
    stored = np.array([1.5], np.float32)
    want = nvfp4_reference.dequantize_nvfp4(codes, scales, stored, profile=profile,
                                            packed=packed)
    got = dequantize(_on(codes, device), _on(scales, device), _on(stored, device),
                     profile=profile, packed=packed)
    assert _bytes(got) == want.tobytes()
    for outside in (top + 1, -1):
        codes[0, 1] = outside
        with pytest.raises(ValueError):
            nvfp4_reference.dequantize_nvfp4(codes, scales, stored, profile=profile,
                                             packed=packed)
        with pytest.raises(ValueError):
            dequantize(_on(codes, device), _on(scales, device), _on(stored, device),
                       profile=profile, packed=packed)
