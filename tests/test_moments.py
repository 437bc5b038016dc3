"""The error statistics of ``--source`` (:mod:`mxformats.fast.moments`): their bits follow
their definition (an oracle in plain Python floats), they mean what the whole-array formulas
mean, and they are robust on a nearly constant weight."""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from numpy.typing import NDArray

from mxformats.fast import moments
from mxformats.fast.moments import LANES, PIECE, Moments


def _by_definition(d: NDArray[Any], x: NDArray[Any]) -> Moments:
    """The moments as the module docstring defines them, one Python float at a time."""
    fd = [float(v) for v in np.asarray(d, np.float64).reshape(-1)]
    fx = [float(v) for v in np.asarray(x, np.float64).reshape(-1)]
    n = len(fd)
    kx, kd = (fx[0], fd[0]) if n else (0.0, 0.0)
    totals = np.zeros((7, LANES))
    for lo in range(0, n, PIECE):
        local = [[0.0] * LANES for _ in range(7)]
        for i in range(lo, min(lo + PIECE, n)):
            xv, dv = fx[i], fd[i]
            cx, cd, e = xv - kx, dv - kd, dv - xv
            for k, term in enumerate((xv * xv, e * e, cx, cd, cx * cx, cd * cd, cx * cd)):
                local[k][i % LANES] += term
        for k in range(7):
            for lane in range(LANES):
                totals[k, lane] = float(totals[k, lane]) + local[k][lane]
    s = [0.0] * 7
    for k in range(7):
        for lane in range(LANES):
            s[k] += float(totals[k, lane])
    c = max(n, 1)
    return Moments(error_squares=s[1], source_squares=s[0], cross=s[6] - s[2] * s[3] / c,
                   weight_spread=max(s[5] - s[3] * s[3] / c, 0.0),
                   source_spread=max(s[4] - s[2] * s[2] / c, 0.0),
                   source_varies=any(v != kx for v in fx), weight_varies=any(v != kd for v in fd))


def _bits(m: Moments) -> list[Any]:
    sums = (m.error_squares, m.source_squares, m.cross, m.weight_spread, m.source_spread)
    return [*np.array(sums).view(np.uint64).tolist(), m.source_varies, m.weight_varies,
            m.source_finite]


@pytest.mark.parametrize("size", [0, 1, LANES - 1, LANES + 1, PIECE - 1, PIECE, PIECE + 1,
                                  3 * PIECE + 7])
@pytest.mark.parametrize("source_dtype", [ml_dtypes.bfloat16, np.float16, np.float32])
def test_statistics_bits_follow_their_definition(size: int, source_dtype: Any) -> None:
    """Every sum of :class:`Moments` (numpy, :func:`moments.lane_sums`) has the bits of its
    definition (lanes, pieces, shift by the first element), on sizes either side of a lane
    row and of a piece, for bfloat16, float16 and float32 sources and a float32 weight; signed
    zeros among the terms included. A NaN in the source gives no sums, an Inf in the weight no
    statistic."""
    rng = np.random.default_rng(size)
    x = (rng.standard_normal(size) * np.exp2(rng.integers(-20, 4, size)) + 0.5).astype(
        source_dtype)
    d = (x.astype(np.float32) + rng.standard_normal(size).astype(np.float32) * 0.01)
    if size > 3:
        d[1], x[2] = -0.0, d[0]  # a -0.0 weight, a source equal to the shift
    got = Moments.of(d, x)
    assert got is not None
    assert _bits(got) == _bits(_by_definition(d, x))
    if size:
        x[size // 2] = np.nan
        stats = Moments.of(d, x)
        assert stats is not None and not stats.source_finite
        assert stats.source_squares == stats.cross == 0.0  # no sums: none exists
        d[-1] = np.inf
        assert Moments.of(d, x) is None


@pytest.mark.parametrize("size", [PIECE - 1, PIECE, 2 * PIECE + 1])
def test_statistics_agree_with_whole_array_formulas(size: int) -> None:
    """The moments give the whole-array float64 formulas' relative error and correlation
    (np.linalg.norm, np.corrcoef as oracles, to 1e-12), either side of a piece boundary, with
    a mean far from zero so an uncentred correlation would be wrong."""
    rng = np.random.default_rng(size)
    x = (rng.standard_normal(size) + 3.0).astype(ml_dtypes.bfloat16)
    d = (np.asarray(x, np.float32) + rng.standard_normal(size).astype(np.float32) * 0.1)
    stats = Moments.of(d, x)
    assert stats is not None and stats.source_varies and stats.weight_varies
    xd, dd = np.asarray(x, np.float64), np.asarray(d, np.float64)
    assert math.sqrt(stats.error_squares) / math.sqrt(stats.source_squares) == pytest.approx(
        np.linalg.norm(dd - xd) / np.linalg.norm(xd), rel=1e-12)
    assert stats.correlation == pytest.approx(np.corrcoef(dd, xd)[0, 1], rel=1e-12)
    d[-1] = np.nan  # a NaN in the last piece: no statistic
    assert Moments.of(d, x) is None


def test_statistics_robust_on_a_nearly_constant_weight() -> None:
    """A weight of 1e4 varying by 2**-6 (a relative spread of 1e-6, where sums of squares
    about zero lose every digit of the spread): the centred sums are the exact ones to 1e-9."""
    rng = np.random.default_rng(0)
    n = 3 * PIECE
    x = (1e4 + rng.integers(0, 4, n) * 2.0**-6).astype(np.float32)
    d = (x + rng.integers(-1, 2, n) * 2.0**-6).astype(np.float32)
    stats = Moments.of(d, x)
    assert stats is not None
    xd, dd = x.astype(np.float64), d.astype(np.float64)
    assert stats.source_spread == pytest.approx(float(((xd - xd.mean()) ** 2).sum()), rel=1e-9)
    assert stats.correlation == pytest.approx(np.corrcoef(dd, xd)[0, 1], rel=1e-9)


def test_lane_sums_of_nothing_are_zero() -> None:
    totals, source_varies, weight_varies = moments.lane_sums(np.zeros(0), np.zeros(0))
    assert not totals.any() and not source_varies and not weight_varies
