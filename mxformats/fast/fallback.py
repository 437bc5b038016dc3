"""How a fast path is called, and when it hands the call to its reference.

:func:`fast_path` is the one place the fallback lives: it gives an implementation its
reference's signature plus keyword ``threads``, and calls the reference with the caller's own
arguments on a big-endian machine (the fast paths' byte views read little-endian words) or when
the implementation returns :data:`FALLBACK` (an input it does not compute). Every call is then
defined exactly as the reference defines it, errors included.
"""

from __future__ import annotations

import enum
import inspect
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

__all__ = ["FALLBACK", "Fallback", "fast_path"]

R = TypeVar("R")

#: The byte views of the fast paths (pairs of codes as uint16, words as bytes) read
#: little-endian words; elsewhere every call goes to the reference.
_LITTLE_ENDIAN = sys.byteorder == "little"


class Fallback(enum.Enum):
    """The type of :data:`FALLBACK`."""

    FALLBACK = "fallback"


#: What an implementation returns for an input outside its fast path: :func:`fast_path` then
#: returns the reference's result for the caller's arguments.
FALLBACK = Fallback.FALLBACK


def fast_path(reference: Callable[..., Any]) -> Callable[[Callable[..., R | Fallback]],
                                                          Callable[..., R]]:
    """Make an implementation the fast path of ``reference``.

    The public function has ``reference``'s signature plus ``threads`` (default None), last:
    keyword-only where the reference has keyword-only parameters, else also positional (as
    ``mxformats.fast.decode`` has always taken it). The caller's arguments are bound to that
    signature with the reference's defaults applied (so both take the same calls, and a
    default is written once, in the reference) and passed to the implementation by name, with
    ``threads``; the implementation declares the same names, without defaults. It returns its
    result, or :data:`FALLBACK` for an input it does not compute (after any amount of work: a
    non-finite value found in a pass). Then, and on a big-endian machine without calling it,
    the reference is called with the caller's arguments (defaults applied, ``threads``
    dropped) and its result or error is the call's.
    """
    parameters = [*inspect.signature(reference).parameters.values()]
    positional = all(p.kind is p.POSITIONAL_OR_KEYWORD for p in parameters)
    threads = inspect.Parameter(
        "threads", (inspect.Parameter.POSITIONAL_OR_KEYWORD if positional
                    else inspect.Parameter.KEYWORD_ONLY), default=None, annotation="int | None")
    public = inspect.signature(reference).replace(parameters=[*parameters, threads])

    def decorate(implementation: Callable[..., R | Fallback]) -> Callable[..., R]:
        @wraps(implementation)
        def bound(*args: Any, **kwargs: Any) -> R:
            arguments = public.bind(*args, **kwargs)
            arguments.apply_defaults()
            threads = arguments.arguments.pop("threads")
            if _LITTLE_ENDIAN:
                result = implementation(**arguments.arguments, threads=threads)
                if not isinstance(result, Fallback):
                    return result
            fallback: R = reference(*arguments.args, **arguments.kwargs)
            return fallback

        bound.__signature__ = public  # type: ignore[attr-defined]
        return bound

    return decorate
