"""Importing this module imports numba and every compiled pass
(:data:`mxformats.fast.jit.COMPILED_MODULES`) through :func:`mxformats.fast.jit.compiled`, and
never raises (where numba is absent or turned off it does nothing).

The local executor's forkserver preloads it (``multiprocessing``'s
``set_forkserver_preload``), so that each pool worker is forked with them imported: importing
numba took a worker about 0.5-1 s, which a `--workers 2` run of a 3 GB checkpoint paid in every
pool it started (docs/benchmarks.md).
"""

from __future__ import annotations

from mxformats.fast import jit

__all__: list[str] = []

for _name in jit.COMPILED_MODULES:
    jit.compiled(_name)
