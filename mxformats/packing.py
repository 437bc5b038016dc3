"""The packings of 4-bit codes: E2M1 two a byte, INT4 eight an int32 word.

The ground floor below the schemes (``docs/architecture.md``): :mod:`mxformats.schemes.mx`,
:mod:`mxformats.schemes.nvfp4` and :mod:`mxformats.schemes.int4` pack with these, and
:mod:`mxformats.containers` unpacks torch ``float4_e2m1fn_x2`` with :func:`unpack_fp4`; it
imports nothing above :mod:`mxformats.formats`.

- :func:`pack_fp4`, :func:`unpack_fp4`: two E2M1 codes a byte, element 2k in the low nibble
  (torch ``float4_e2m1fn_x2``, torchao, triton_kernels, Quark ``Pack_fp4``, compressed-tensors;
  ``spec/mx.md``, vector 47).
- :func:`pack_int4`, :func:`unpack_int4`: int4 values eight an int32 word in one of
  :data:`LAYOUTS` (``spec/int4-layouts.md``, with bit diagrams).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mxformats.arith import check_axis
from mxformats.containers import containers, unpack_nibbles
from mxformats.formats import E2M1

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

__all__ = [
    "LAYOUTS",
    "NIBBLE_OFFSET",
    "NIBBLE_ORDER",
    "QMAX",
    "QMIN",
    "check_layout",
    "integer_codes",
    "pack_fp4",
    "pack_int4",
    "unpack_fp4",
    "unpack_int4",
]

#: INT4 word layouts (8 nibbles per int32 word along ``axis``), specified in ``int4-layouts.md``.
LAYOUTS = ("compressed-tensors", "quark", "linear")

#: For each layout: which element of an 8-group sits in nibble i (bits 4i..4i+3), and the offset
#: added to the value before it is stored (8: "uint4b8"; 0: two's complement).
NIBBLE_ORDER: dict[str, tuple[int, ...]] = {
    "compressed-tensors": (0, 1, 2, 3, 4, 5, 6, 7),
    "quark": (0, 2, 4, 6, 1, 3, 5, 7),
    "linear": (0, 1, 2, 3, 4, 5, 6, 7),
}
NIBBLE_OFFSET: dict[str, int] = {"compressed-tensors": 8, "quark": 0, "linear": 0}
#: The INT4 grid: symmetric scale = amax / ((QMAX - QMIN) / 2) = amax / 7.5.
QMIN, QMAX = -8, 7


def integer_codes(a: ArrayLike, what: str) -> NDArray[np.integer]:
    """``a`` as a numpy array of non-negative integers (TypeError for another dtype,
    ValueError for a negative value; ``what`` names it in the message)."""
    arr = np.asarray(a)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{what} must be integers (uint8), got {arr.dtype}")
    if arr.size and int(arr.min()) < 0:
        raise ValueError(f"{what} must be non-negative")
    return arr


# -- E2M1: two codes a byte ------------------------------------------------------------------


@containers()
def pack_fp4(codes: ArrayLike, axis: int = -1) -> NDArray[np.uint8]:
    """Pack 4-bit codes two per byte along ``axis``, element 2k in the low nibble.

    The layout of torch ``float4_e2m1fn_x2``, torchao, triton_kernels, Quark ``Pack_fp4`` and
    compressed-tensors (sources.md §3.2-§3.8; vector 47: codes [1, 2] pack to 0x21).
    """
    c = integer_codes(codes, "codes")
    if c.size and int(c.max()) > 0xF:
        raise ValueError(f"fp4 codes are 4-bit (0..15); got {int(c.max())}")
    ax = check_axis(c.ndim, axis)
    if c.shape[ax] % 2:
        raise ValueError(f"pack_fp4 needs an even length along axis {ax}, got {c.shape[ax]}")
    moved = np.moveaxis(c.astype(np.uint8), ax, -1)
    packed = moved[..., 0::2] | (moved[..., 1::2] << 4)
    return np.ascontiguousarray(np.moveaxis(packed, -1, ax))


@containers(codes={"packed": E2M1})
def unpack_fp4(packed: ArrayLike, axis: int = -1) -> NDArray[np.uint8]:
    """Inverse of :func:`pack_fp4`: each byte gives its low nibble, then its high nibble."""
    p = integer_codes(packed, "packed codes")
    if p.size and int(p.max()) > 0xFF:
        raise ValueError("packed fp4 codes are bytes (0..255)")
    return unpack_nibbles(p.astype(np.uint8), check_axis(p.ndim, axis))


# -- INT4: eight values an int32 word --------------------------------------------------------


def check_layout(layout: str) -> None:
    """ValueError unless ``layout`` is one of :data:`LAYOUTS`."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown int4 layout {layout!r}; valid: {', '.join(LAYOUTS)}")


@containers()
def pack_int4(
    q: ArrayLike, *, layout: str = "compressed-tensors", axis: int = -1
) -> NDArray[np.int32]:
    """Pack int8 values in [-8, 7] eight per int32 word along ``axis`` in ``layout``.

    Nibble i of a word (bits 4i..4i+3) holds element ``8c + NIBBLE_ORDER[layout][i]`` of word
    c, stored as ``(q + NIBBLE_OFFSET[layout]) & 0xF``. A length that is not a multiple of 8 is
    padded, as all three producers do: the missing nibbles are 0x0 (compressed-tensors pads
    after adding 8, so its padding reads back as -8; Quark skips them). The result has
    ``ceil(n / 8)`` words along ``axis``. Spec: ``int4-layouts.md``.
    """
    check_layout(layout)
    values = np.asarray(q)
    if values.dtype.kind not in "iu":
        raise TypeError(f"pack_int4 takes integers, got dtype {values.dtype}")
    if np.any((values < QMIN) | (values > QMAX)):
        raise ValueError("pack_int4: values must lie in [-8, 7]")
    ax = check_axis(values.ndim, axis)
    moved = np.moveaxis(values.astype(np.int64), ax, -1)
    n = moved.shape[-1]
    words = -(-n // 8)
    nibbles = np.zeros((*moved.shape[:-1], words * 8), dtype=np.uint32)
    nibbles[..., :n] = (moved + NIBBLE_OFFSET[layout]) & 0xF
    nibbles = nibbles.reshape(*moved.shape[:-1], words, 8)
    packed = np.zeros((*moved.shape[:-1], words), dtype=np.uint32)
    for i, element in enumerate(NIBBLE_ORDER[layout]):
        packed |= nibbles[..., element] << np.uint32(4 * i)
    return np.moveaxis(packed.view(np.int32), -1, ax)


@containers()
def unpack_int4(
    packed: ArrayLike,
    *,
    layout: str = "compressed-tensors",
    axis: int = -1,
    size: int | None = None,
) -> NDArray[np.int8]:
    """Inverse of :func:`pack_int4`; ``size`` trims the padding of the last word.

    ``packed``: int32 (or uint32) words. ``size`` (default ``8 × words``) must lie in
    ``(8 × (words - 1), 8 × words]``; padding nibbles are not checked. Spec: ``int4-layouts.md``.
    """
    check_layout(layout)
    words_in = np.asarray(packed)
    if words_in.dtype not in (np.dtype(np.int32), np.dtype(np.uint32)):
        raise TypeError(f"unpack_int4 takes int32 words, got dtype {words_in.dtype}")
    ax = check_axis(words_in.ndim, axis)
    moved = np.moveaxis(words_in.view(np.uint32), ax, -1)
    words = moved.shape[-1]
    n = 8 * words if size is None else size
    if not 8 * (words - 1) < n <= 8 * words and not (words == 0 and n == 0):
        raise ValueError(f"size {n} does not fit {words} words of 8 nibbles")
    out = np.zeros((*moved.shape, 8), dtype=np.int64)
    for i, element in enumerate(NIBBLE_ORDER[layout]):
        out[..., element] = (moved >> np.uint32(4 * i)) & 0xF
    signed = (out - NIBBLE_OFFSET[layout]) & 0xF
    signed = np.where(signed >= 8, signed - 16, signed)
    flat = signed.reshape(*moved.shape[:-1], 8 * words)[..., :n]
    return np.moveaxis(flat.astype(np.int8), -1, ax)
