"""The error statistics of a dequantized weight against its source, with defined bits.

:class:`Moments` holds the sums behind a module's relative error, SQNR and Pearson correlation
(``mxformats validate --source``). Their bits are defined here, so that every executor, worker
count, CPU (with or without AVX-512) and path (the compiled pass of
:mod:`mxformats.fast.compiled`, or :func:`lane_sums` in numpy) gives the same ones:

1. The module's ``n`` elements are taken in C order, ``x`` the source and ``d`` the dequantized
   weight, each widened exactly to float64. ``Kx = x[0]`` and ``Kd = d[0]`` (shifted data: a
   value of the module itself, so the centred sums do not cancel on a nearly constant weight).
2. Seven terms per element, in this order (:data:`TERMS`): ``x*x``, ``(d-x)**2``, ``x-Kx``,
   ``d-Kd``, ``(x-Kx)**2``, ``(d-Kd)**2``, ``(x-Kx)*(d-Kd)``; each one float64 operation per
   written operator (``(a)**2`` is ``a*a``).
3. Element ``i`` belongs to piece ``i // PIECE`` and lane ``i % LANES``. Within a piece each lane
   sums its terms in increasing ``i``, from +0.0; each lane's total adds its piece sums in piece
   order, from +0.0; a term's module sum adds the :data:`LANES` totals in lane order, from +0.0.
   (Fixed-width partial sums: a loop over the lanes is one SIMD add on any vector width, and
   nothing is reassociated.)
4. ``weight_spread = S5 - S3*S3/n``, ``source_spread = S4 - S2*S2/n`` (each at least 0.0),
   ``cross = S6 - S2*S3/n``; ``source_varies``: some ``x != Kx``; ``weight_varies``: some
   ``d != Kd``.

A non-finite ``d`` gives no statistic (None); a non-finite ``x`` gives no sums
(``source_finite`` False). Never BLAS: its thread count would change the last bits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["LANES", "PIECE", "TERMS", "Moments", "lane_sums"]

#: Lanes of the fixed-width partial sums (two AVX-512 or four AVX2 float64 vectors).
LANES = 16
#: Elements per piece (64 Ki): a piece's lane sums are added to the totals in piece order.
PIECE = 1 << 16
#: The terms summed, in the order of :func:`lane_sums`' rows.
TERMS = ("x*x", "(d-x)**2", "x-Kx", "d-Kd", "(x-Kx)**2", "(d-Kd)**2", "(x-Kx)*(d-Kd)")


@dataclass
class Moments:
    """The sums of a module's dequantized weight against its source (the module docstring
    defines their bits)."""

    error_squares: float = 0.0  # sum of (d - x)^2
    source_squares: float = 0.0  # sum of x^2
    cross: float = 0.0  # sum of (d - mean d)(x - mean x)
    weight_spread: float = 0.0  # sum of (d - mean d)^2
    source_spread: float = 0.0  # sum of (x - mean x)^2
    source_varies: bool = False
    weight_varies: bool = False
    #: False (and no sums) when ``x`` holds a NaN or an infinity: no statistic of it exists
    source_finite: bool = True

    @property
    def correlation(self) -> float:
        return self.cross / math.sqrt(self.weight_spread * self.source_spread)

    @classmethod
    def from_lanes(cls, totals: NDArray[np.float64], n: int, source_varies: bool,
                   weight_varies: bool) -> Moments:
        """The moments from the per-lane totals (``len(TERMS)`` rows of :data:`LANES`) of
        ``n`` elements: step 3's lane order and step 4 of the definition."""
        s = [0.0] * len(TERMS)
        for k in range(len(TERMS)):
            for lane in range(LANES):
                s[k] += float(totals[k, lane])
        count = max(n, 1)
        return cls(error_squares=s[1], source_squares=s[0],
                   cross=s[6] - s[2] * s[3] / count,
                   weight_spread=max(s[5] - s[3] * s[3] / count, 0.0),
                   source_spread=max(s[4] - s[2] * s[2] / count, 0.0),
                   source_varies=source_varies, weight_varies=weight_varies)

    @classmethod
    def of(cls, d: NDArray[Any], x: NDArray[Any]) -> Moments | None:
        """The moments of ``d`` against ``x`` (same shape, any float dtypes) in numpy; None when
        ``d`` holds a NaN or an infinity, no sums (``source_finite`` False) when ``x`` does."""
        flat_d, flat_x = d.reshape(-1), x.reshape(-1)
        if not all(np.isfinite(flat_d[lo:lo + PIECE]).all()
                   for lo in range(0, flat_d.size, PIECE)):
            return None
        if not all(np.isfinite(flat_x[lo:lo + PIECE]).all()
                   for lo in range(0, flat_x.size, PIECE)):
            return cls(source_finite=False)
        totals, source_varies, weight_varies = lane_sums(flat_d, flat_x)
        return cls.from_lanes(totals, flat_d.size, source_varies, weight_varies)


def lane_sums(d: NDArray[Any], x: NDArray[Any]) -> tuple[NDArray[np.float64], bool, bool]:
    """Steps 1-3 of the definition in numpy, for finite 1-D ``d`` and ``x``: the per-lane
    totals (``len(TERMS)`` × :data:`LANES` float64), whether ``x`` varies, whether ``d`` does.

    Within a piece the terms are written, one float64 operation each, into rows of
    :data:`LANES` (the last row completed with +0.0, which leaves a sum from +0.0 unchanged),
    and ``np.add.reduce`` over the rows sums each lane: numpy reduces an axis that is not the
    innermost by adding whole rows elementwise in order (the pairwise summation it uses along
    a contiguous axis does not apply), which is step 3's order; ``tests/test_moments.py``
    checks the bits against a plain Python sum. ``0.0 +`` turns the -0.0 of a lane of -0.0
    terms into the +0.0 a sum from +0.0 gives."""
    totals = np.zeros((len(TERMS), LANES), dtype=np.float64)
    if d.size == 0:
        return totals, False, False
    kx, kd = np.float64(x[0]), np.float64(d[0])
    source_varies = weight_varies = False
    buffer = np.empty((len(TERMS), PIECE), dtype=np.float64)
    for lo in range(0, d.size, PIECE):
        px = x[lo:lo + PIECE].astype(np.float64)
        pd = d[lo:lo + PIECE].astype(np.float64)
        m = px.size
        source_varies = source_varies or bool((px != kx).any())
        weight_varies = weight_varies or bool((pd != kd).any())
        terms = buffer[:, :-(-m // LANES) * LANES]
        terms[:, m:] = 0.0
        xx, error, cx, cd, cxx, cdd, cxd = (row[:m] for row in terms)
        np.multiply(px, px, out=xx)
        np.subtract(pd, px, out=error)
        np.multiply(error, error, out=error)
        np.subtract(px, kx, out=cx)
        np.subtract(pd, kd, out=cd)
        np.multiply(cx, cx, out=cxx)
        np.multiply(cd, cd, out=cdd)
        np.multiply(cx, cd, out=cxd)
        totals += 0.0 + np.add.reduce(terms.reshape(len(TERMS), -1, LANES), axis=1)
    return totals, source_varies, weight_varies
