"""The one door to numba (the ``fast`` extra): the compiled passes when numba imports, and why
not when it does not.

Nothing in ``mxformats`` outside :mod:`mxformats.fast` imports numba, and nothing imports it at
``import mxformats``: :func:`compiled` imports it, and the compiled module asked for
(:mod:`mxformats.fast.compiled` by default; ``compiled_int4``, ``compiled_fp8_block``,
``compiled_nvfp4``), on first use. Where numba is absent, refuses to import (numba
checks numpy's version at import and raises ImportError for one newer than it supports), or is
turned off (:data:`NUMBA_VARIABLE` = ``0``), :func:`compiled` returns None and the caller runs
the numpy fast paths, which return the same bytes; :func:`status` says which runs and why.

Compiled functions are ``@njit(cache=True)`` without ``fastmath``: numba keeps each machine's
compiled code on disk (``__pycache__`` beside the module, or ``NUMBA_CACHE_DIR``), so the
compile (a few seconds) is paid once per machine and numba version, never per process.
"""

from __future__ import annotations

import importlib
import os
from functools import cache
from types import ModuleType

__all__ = ["COMPILED_MODULES", "NUMBA_VARIABLE", "compiled", "status"]

#: ``MXFORMATS_NUMBA=0`` turns the compiled passes off (the numpy fast paths run; the tests
#: run every path both ways). Any other value, or none, uses numba when it imports.
NUMBA_VARIABLE = "MXFORMATS_NUMBA"
#: Every compiled module :func:`compiled` loads (``mxformats.fast.<name>``).
COMPILED_MODULES = ("compiled", "compiled_int4", "compiled_nvfp4", "compiled_fp8_block",
                    "compiled_scan")


@cache
def _load(name: str = "compiled") -> tuple[ModuleType | None, str]:
    if os.environ.get(NUMBA_VARIABLE) == "0":
        return None, f"turned off ({NUMBA_VARIABLE}=0)"
    try:
        numba = importlib.import_module("numba")
        module = importlib.import_module(f"mxformats.fast.{name}")
    except Exception as exc:  # absent, refusing this numpy (numba's own check: ImportError),
        # or failing on one it has not met: the numpy fast paths run, never a crash
        return None, f"numba is not importable ({type(exc).__name__}: {exc})"
    return module, f"numba {numba.__version__}"


def compiled(name: str = "compiled") -> ModuleType | None:
    """The compiled module ``mxformats.fast.<name>`` when numba imports and is not turned off,
    else None (the numpy fast paths run). Decided once per process and module."""
    return _load(name)[0]


def status() -> str:
    """One line: which CPU paths run and why, e.g. ``compiled passes: numba 0.68.1`` or
    ``compiled passes off: numba is not importable (...); the numpy fast paths run``."""
    module, why = _load()
    return (f"compiled passes: {why}" if module is not None
            else f"compiled passes off: {why}; the numpy fast paths run")
