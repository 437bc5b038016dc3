"""The oracle peers' behaviours that changed between the releases ``pyproject.toml`` allows,
keyed to the version that has them, so a test asserts the disagreement where the installed
peer has it and agreement where it does not.

Measured on the ml_dtypes wheels 0.5.0, 0.5.1, 0.5.3, 0.5.4, 0.6.0 and 0.7.0 (the pinned
version is in ``constraints.txt``; ``.ci/run`` also runs the oracle tests against the newest
releases). torch is not keyed: the suite runs with the local torch 2.13.0 only.
"""

from __future__ import annotations

import ml_dtypes
from packaging.version import Version

MD_VERSION = Version(ml_dtypes.__version__)
#: "ml_dtypes X.Y.Z", for assertion messages.
MD = f"ml_dtypes {ml_dtypes.__version__}"
#: E8M0 casts of 0.5.0 differ again (ties to the even exponent, 1.5*2^127 -> 0xFE, and
#: 1.5*2^-127 -> 0x01); not characterised, so the tests of its E8M0 cast skip before 0.5.1.
MD_E8M0_CHARACTERISED = MD_VERSION >= Version("0.5.1")
#: float64 inputs are cast through float32 first, a double rounding (0.7.0 rounds once).
MD_FLOAT64_VIA_FLOAT32 = MD_VERSION < Version("0.7.0")
#: E8M0 inputs in (2^-127, 1.5*2^-127) round up to 0x01, not to the nearer 0x00 (until 0.7.0).
MD_E8M0_LOW_ROUNDS_UP = MD_VERSION < Version("0.7.0")
#: int4/uint4 casts of out-of-range values wrap modulo 16; 0.7.0 gives 0 and numpy's
#: "invalid value encountered in cast" warning.
MD_INT4_WRAPS = MD_VERSION < Version("0.7.0")
