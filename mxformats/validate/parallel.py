"""Running check code safely: an exception becomes an ``INTERNAL_ERROR`` finding, and
:func:`for_each_module` spreads a per-module check over ``opts.workers`` threads.

Kept apart from :mod:`~mxformats.validate.runner` so that the check modules can use it while
the runner imports them.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

from .findings import Finding, Level, Severity, declare
from .model import Checkpoint, Module, Options

__all__ = ["INTERNAL_ERROR", "for_each_module", "internal"]

INTERNAL_ERROR = declare(
    "INTERNAL_ERROR",
    Severity.ERROR,
    Level.STRUCTURE,
    "internal",
    "A check raised an unexpected exception (the checkpoint may be malformed in a way it did not "
    "anticipate); the other checks still ran.",
    "Report it with the message; inspect the named tensor by hand.",
)


def internal(where: str, exc: BaseException, tensor: str | None = None) -> Finding:
    """An INTERNAL_ERROR finding for an exception raised at ``where`` (file and line of the
    innermost frame)."""
    tb = traceback.extract_tb(exc.__traceback__)
    at = f" at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno}" if tb else ""
    return Finding(INTERNAL_ERROR, f"{where}: {type(exc).__name__}: {exc}{at}", tensor=tensor)


def for_each_module(
    ckpt: Checkpoint,
    opts: Options,
    fn: Callable[[Module], Iterable[Finding]],
    modules: Iterable[Module] | None = None,
) -> Iterator[Finding]:
    """Run ``fn`` on each module (default: all), over ``opts.workers`` threads; findings come
    back in module order. An exception in ``fn`` becomes an INTERNAL_ERROR for that module."""
    mods = list(ckpt.modules.values() if modules is None else modules)

    def one(mod: Module) -> list[Finding]:
        try:
            return list(fn(mod))
        except Exception as exc:
            return [internal(f"module {mod.name}", exc, tensor=mod.name)]

    if opts.workers <= 1 or len(mods) < 2:
        for mod in mods:
            yield from one(mod)
        return
    with ThreadPoolExecutor(max_workers=opts.workers) as pool:
        for found in pool.map(one, mods):
            yield from found
