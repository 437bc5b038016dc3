"""Another CPU's numpy, in this process: what its SIMD paths (numpy's CPU dispatch) may do
differently from this host's, for tests that the bytes we claim do not depend on it (issue 26
§6; ``.ci/dispatch.py`` runs the spec check and the fast paths at every real level of the CI
host, these tests cover any host).

Measured on numpy 2.4.6 across ``X86_V2`` .. ``AVX512_SPR`` (one host, NPY_DISABLE_CPU_FEATURES):
``np.unique``/``np.sort``/``np.argsort`` keep a different one of equal keys (-0.0 and +0.0, NaN
payloads, the order of ties), and ``log``/``log2``/``exp``/``exp2`` (float64 and float32) round
some results to a neighbouring float. Sums, ``max``/``min`` (NaN and zeros included), ``sqrt``,
``rint``, ``frexp``/``ldexp`` and the casts gave the same bits at every level.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

#: The float functions whose last bit differed between dispatch levels.
ROUNDED = ("log", "log2", "exp", "exp2")


def _zero(result: Any, zero: float) -> Any:
    """``result`` (an array, or a tuple whose first item is one) with every zero of a float
    array replaced by ``zero``."""
    if isinstance(result, tuple):
        return (_zero(result[0], zero), *result[1:])
    if isinstance(result, np.ndarray) and result.dtype.kind == "f":
        return np.where(result == 0, result.dtype.type(zero), result)
    return result


def _unique_keeping(zero: float) -> Any:
    """``np.unique`` keeping ``zero`` of -0.0 and +0.0 where the input holds both, as a CPU's
    sort may (a sort can only keep a zero the input holds)."""
    real = np.unique

    def unique(a: Any, *args: Any, **kwargs: Any) -> Any:
        result = real(a, *args, **kwargs)
        x = np.asarray(a)
        if x.dtype.kind == "f" and np.any((x == 0) & (np.signbit(x) == np.signbit(zero))):
            return _zero(result, zero)
        return result

    return unique


def emulate(monkeypatch: pytest.MonkeyPatch, *, zero: float, toward: float) -> None:
    """Make ``np.unique`` keep ``zero`` (0.0 or -0.0) of the two zeros, and :data:`ROUNDED`
    return the neighbouring float of their result ``toward`` (inf or -inf), as another CPU's
    SIMD path may (more often than any real one: every result moves). The package sorts no
    floats with ``np.sort``/``argsort`` (the sorts it has are over integer keys)."""
    monkeypatch.setattr(np, "unique", _unique_keeping(zero))
    for name in ROUNDED:
        real = getattr(np, name)

        def nudged(*a: Any, _real: Any = real, **k: Any) -> Any:
            out = np.asarray(_real(*a, **k))
            return np.nextafter(out, out.dtype.type(toward))

        monkeypatch.setattr(np, name, nudged)


#: The variants a test runs under: each zero, each direction.
VARIANTS = [pytest.param(0.0, np.inf, id="+0,up"), pytest.param(-0.0, -np.inf, id="-0,down")]
