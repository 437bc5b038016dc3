"""The device's moments (:mod:`mxformats.kernels.triton.moments`) have the bits of
:meth:`mxformats.fast.moments.Moments.of`: every sum, over sizes on both sides of a lane
group and of a piece, for each source dtype, on data whose centred sums nearly cancel, with
negative zeros, and None wherever a value is not finite (the numpy path then decides).

Compared by the bits of every field (a float ``==`` would let -0.0 equal +0.0)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from conftest import requires

from mxformats.fast.moments import LANES, PIECE, Moments

torch = requires("torch")
requires("triton")
device_moments = requires("mxformats.kernels.triton.moments")

_TORCH = {np.dtype(ml_dtypes.bfloat16): "bfloat16", np.dtype(np.float16): "float16",
          np.dtype(np.float32): "float32"}


def _bits(m: Moments | None) -> Any:
    if m is None:
        return None
    return {k: (np.float64(v).tobytes() if isinstance(v, float) else v)
            for k, v in vars(m).items()}


def _on(device: str, a: np.ndarray) -> Any:
    name = _TORCH[a.dtype]
    t = torch.from_numpy(a.view(np.uint16) if name == "bfloat16" else a)
    return t.view(getattr(torch, name)).to(device)


def _check(device: str, d: np.ndarray, x: np.ndarray) -> Moments | None:
    found = device_moments.moments(_on(device, d), _on(device, x))
    assert _bits(found) == _bits(Moments.of(d, x))
    return found


@pytest.mark.parametrize("n", [0, 1, LANES - 1, LANES, LANES + 1, 3 * LANES + 5, 1000])
@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16, np.float32])
def test_small_sizes_every_source_dtype(device: str, n: int, dtype: Any) -> None:
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 3).astype(dtype)
    d = (x.astype(np.float32) + rng.standard_normal(n).astype(np.float32) / 64)
    _check(device, d.astype(np.float32), x)


@pytest.mark.parametrize("n", [PIECE + 1, 2 * PIECE + 17])
def test_pieces_are_added_in_order(device: str, n: int) -> None:
    """Past one piece: each lane's piece sums added in piece order (one element into the
    second piece, and three pieces). Values near 1e3 with a tiny spread: the lane sums carry
    rounding that any other order changes."""
    rng = np.random.default_rng(n)
    x = (1000 + rng.standard_normal(n)).astype(ml_dtypes.bfloat16)
    d = (x.astype(np.float32) * np.float32(1.0009765625)).astype(np.float32)
    m = _check(device, d, x)
    assert m is not None and m.source_varies and m.weight_varies


def test_piece_order_decides_a_lane_sum(device: str) -> None:
    """Lane sums of ``(d-x)**2`` that only the definition's piece order gives: per lane 2**60
    in piece 0 (4096 errors of 2**24), 96 in piece 1 (six errors of 4), 64 in piece 2 (one of
    8). In order, 2**60 + 96 and then + 64 each round back to 2**60 (below half its ulp,
    128); last piece first, 64 + 96 = 160 is above it and the lane ends at 2**60 + 256."""
    n = 2 * PIECE + LANES
    x = np.zeros(n, dtype=ml_dtypes.bfloat16)
    d = np.zeros(n, dtype=np.float32)
    d[:PIECE] = 2.0**24
    d[PIECE:PIECE + 6 * LANES] = 4.0
    d[2 * PIECE:] = 8.0
    m = _check(device, d, x)
    assert m is not None and m.error_squares == LANES * 2.0**60


def test_constant_and_signed_zeros(device: str) -> None:
    x = np.array([-0.0, 0.0, -0.0] * 11, dtype=ml_dtypes.bfloat16)
    d = np.array([0.0, -0.0, -0.0] * 11, dtype=np.float32)
    m = _check(device, d, x)
    assert m is not None and not m.source_varies and not m.weight_varies
    assert np.float64(m.error_squares).tobytes() == np.float64(0.0).tobytes()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", ["d", "x"])
def test_not_finite_is_none(device: str, bad: float, where: str) -> None:
    x = np.linspace(-1, 1, 40).astype(ml_dtypes.bfloat16)
    d = x.astype(np.float32)
    (d if where == "d" else x)[17] = bad
    assert device_moments.moments(_on(device, d), _on(device, x)) is None


def test_other_dtypes_and_sizes_are_declined(device: str) -> None:
    x = _on(device, np.ones(8, np.float32))
    assert device_moments.moments(x.to(torch.float16), x) is None  # d not float32
    assert device_moments.moments(x, x[:7]) is None
