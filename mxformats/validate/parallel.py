"""Running check code safely: an exception becomes an ``INTERNAL_ERROR`` finding
(:func:`internal`), so that the validator never ends in a traceback.

Kept apart from :mod:`~mxformats.validate.runner` so that the check modules can use it while
the runner imports them. Per-module work runs as tasks: :mod:`~mxformats.validate.tasks`.
"""

from __future__ import annotations

import os
import traceback

from .findings import Finding, Level, Severity, declare

__all__ = ["INTERNAL_ERROR", "internal"]

INTERNAL_ERROR = declare(
    "INTERNAL_ERROR", severity=Severity.ERROR, level=Level.STRUCTURE, group="internal",
    meaning="A check raised an unexpected exception (the checkpoint may be malformed in a way it "
            "did not anticipate); the other checks still ran.",
    fix="Report it with the message; inspect the named tensor by hand.")


def internal(where: str, exc: BaseException, tensor: str | None = None) -> Finding:
    """An INTERNAL_ERROR finding for an exception raised at ``where`` (file and line of the
    innermost frame)."""
    tb = traceback.extract_tb(exc.__traceback__)
    at = f" at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno}" if tb else ""
    return Finding(INTERNAL_ERROR, f"{where}: {type(exc).__name__}: {exc}{at}", tensor=tensor)
