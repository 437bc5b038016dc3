"""How a fast path is called: the reference's signature, plus keyword ``threads``."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

R = TypeVar("R")


def _with_signature_of(reference: Callable[..., Any]) -> Callable[[Callable[..., R]],
                                                                 Callable[..., R]]:
    """Give a fast path ``reference``'s signature plus keyword ``threads``.

    The caller's arguments are bound to the reference's signature with its defaults applied
    (so both take the same calls, and a default is written once, in the reference) and passed
    to the implementation by name, with ``threads``; the implementation declares the same
    names, without defaults.
    """
    signature = inspect.signature(reference)
    threads = inspect.Parameter("threads", inspect.Parameter.KEYWORD_ONLY, default=None,
                                annotation="int | None")
    public = signature.replace(parameters=[*signature.parameters.values(), threads])

    def decorate(implementation: Callable[..., R]) -> Callable[..., R]:
        @wraps(implementation)
        def bound(*args: Any, threads: int | None = None, **kwargs: Any) -> R:
            arguments = signature.bind(*args, **kwargs)
            arguments.apply_defaults()
            return implementation(**arguments.arguments, threads=threads)

        bound.__signature__ = public  # type: ignore[attr-defined]
        return bound

    return decorate

