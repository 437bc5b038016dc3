"""The contract of :mod:`mxformats.validate.executors` as types: :class:`Outcome`,
:class:`Executor`, :data:`DEFAULT_MAX_ATTEMPTS` and :class:`ExecutorUnavailable`. The package
picks an executor (``executor_for``); each implementation (``local``, ``ray``) imports
only this module, so the package and its implementations form no circle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

__all__ = ["DEFAULT_MAX_ATTEMPTS", "Executor", "ExecutorUnavailable", "Outcome"]

T = TypeVar("T")
R = TypeVar("R")

#: Attempts per task when its worker dies, the first included.
DEFAULT_MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class Outcome(Generic[R]):
    """What running one task gave: its ``value``, or ``error`` (``"TypeName: message"``) when
    the function raised or its worker died ``attempts`` times."""

    index: int  # the item's position in the sequence given to ``map``
    value: R | None = None
    error: str | None = None
    attempts: int = 1


class Executor(Protocol):
    """Runs a function over items somewhere; see the module docstring for the contract."""

    name: str
    workers: int  # how many tasks may run at once

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[Outcome[R]]:
        """Run ``fn`` on each item; yield each item's :class:`Outcome` as it finishes."""
        ...


class ExecutorUnavailable(RuntimeError):
    """The executor asked for cannot run here (its package is not installed, its cluster does
    not answer)."""
