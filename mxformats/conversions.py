"""Conversions between formats that the ecosystem performs on stored codes.

Spec: ``spec/e4m3fnuz.md``, "Converting E4M3FN checkpoints".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mxformats.containers import containers
from mxformats.formats import E4M3FN, E4M3FNUZ

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

__all__ = ["e4m3fn_to_fnuz", "e4m3fn_to_fnuz_exact"]


def _codes_and_scale(
    codes: ArrayLike, scale: ArrayLike
) -> tuple[NDArray[np.uint8], NDArray[np.float32]]:
    c = np.asarray(codes)
    if c.dtype != np.uint8:
        raise TypeError(f"e4m3fn codes must be uint8, got {c.dtype}")
    s = np.asarray(scale)
    if s.dtype != np.float32:
        raise TypeError(f"the scale must be float32, got {s.dtype}")
    return c, s


@containers(codes={"codes": E4M3FN})
def e4m3fn_to_fnuz(
    codes: ArrayLike, scale: ArrayLike
) -> tuple[NDArray[np.uint8], NDArray[np.float32]]:
    """vLLM's MI300 normalisation: the same bits read as E4M3FNUZ, with the scale doubled.

    For identical bits an FNUZ value is half the FN value, so ``codes × scale`` is unchanged by
    doubling the (float32) scale. The FN code 0x80 (-0) is the FNUZ NaN, so it becomes 0x00.
    **Caveat:** the FN NaNs 0x7F/0xFF are kept as bits and so become the finite FNUZ values
    ±240 (±480 after the doubled scale): NaN is not preserved. Use
    :func:`e4m3fn_to_fnuz_exact` to keep NaN. Mirrors vLLM ``normalize_e4m3fn_to_e4m3fnuz``.
    """
    c, s = _codes_and_scale(codes, scale)
    return np.where(c == 0x80, np.uint8(0), c).astype(np.uint8), s * np.float32(2)


@containers(codes={"codes": E4M3FN})
def e4m3fn_to_fnuz_exact(
    codes: ArrayLike, scale: ArrayLike
) -> tuple[NDArray[np.uint8], NDArray[np.float32]]:
    """Value-exact E4M3FN → E4M3FNUZ: each value halved and re-encoded, the scale doubled.

    Every finite FN value halves exactly into FNUZ (448/2 = 224 ≤ 240, 2**-9/2 = 2**-10), so
    codes equal :func:`e4m3fn_to_fnuz`'s except that NaN (0x7F, 0xFF) becomes the FNUZ NaN 0x80.
    """
    c, s = _codes_and_scale(codes, scale)
    halved = E4M3FN.decode(c, np.float64).astype(np.float64) / 2
    return E4M3FNUZ.encode(halved), s * np.float32(2)
