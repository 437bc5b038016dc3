"""Executors: where the validator's tasks run.

A task is a picklable item handed to a picklable, module-level function; an executor runs the
function on every item and yields one :class:`Outcome` per item, in completion order (the caller
orders them by :attr:`Outcome.index`, so the report never depends on the executor).

Contract every executor keeps:

- an exception the function raises is the task's outcome (``error``), not retried: the tasks
  are deterministic, a second attempt would raise again;
- a worker that dies (killed, out of memory) is retried, up to ``max_attempts`` attempts in
  all; after that the task's outcome is an ``error`` saying so;
- ``map`` never raises for a task's sake; it returns after every item has an outcome.

Implementations: ``local`` (a process pool on this machine, :mod:`.local`) and ``ray`` (Ray
tasks on a cluster, :mod:`.ray`, the ``mxformats[ray]`` extra).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

__all__ = ["DEFAULT_MAX_ATTEMPTS", "Executor", "Outcome"]

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
