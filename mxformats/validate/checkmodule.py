"""A check module as a record: what the runner and the tasks need to know of it.

Each check module (``files``, ``coverage``, ``layout``, ``numbers``, ``reproduce``,
``manifest``, ``deployment``) ends with one :class:`CheckModule`, its ``CHECK``;
:data:`mxformats.validate.checks.CHECK_MODULES` lists them in run order, and the runner
(:mod:`~mxformats.validate.runner`) and the tasks (:mod:`~mxformats.validate.tasks`) loop over
that list: neither names a check module.

A module whose work is per quantized module (``numbers``, ``reproduce``) also has a
:class:`PerModule` record: the tasks run its ``check`` on each module it names, anywhere (this
process, a pool process, a Ray worker), and the runner hands the outcomes, in task order, to
its ``combine``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .findings import Finding
    from .model import Checkpoint, Module, Options, TensorRef

__all__ = ["CheckModule", "PerModule", "always", "reads_nothing"]


def always(ckpt: Checkpoint, opts: Options) -> bool:
    """The ``applies`` of a :class:`CheckModule` whose checks run under every option."""
    return True


def no_usage_error(ckpt: Checkpoint, opts: Options) -> str | None:
    """The default ``usage_error`` of a :class:`CheckModule`: the options always apply."""
    return None


def reads_nothing(state: Any) -> None:
    """The ``reads`` of :class:`PerModule` work that reads only the checkpoint."""


def asks_nothing_ahead(ckpt: Checkpoint, opts: Options, modules: Sequence[str]
                       ) -> Iterator[TensorRef]:
    """The ``ahead`` of :class:`PerModule` work whose reads are not asked ahead."""
    return iter(())


@dataclass(frozen=True)
class PerModule:
    """The per-module work of a check module, run as tasks.

    ``outcomes``: the key of its outcomes in a task's result and in the JSON report's task
    records (``numbers``, ``reproduction``); ``prepare``: the state its ``check`` needs, made
    once per process and checkpoint (``reproduce``: the claim and the open source; it is also
    the place to say that the work does not run); ``modules``: the quantized modules it
    checks under that state, none where it does not run; ``check``: one module's outcome
    (picklable, naming its module in ``module``; an exception of a check is that module's
    INTERNAL_ERROR, inside the outcome);
    ``combine``: the module's findings from the outcomes of every module it checks (in any
    order; the runner gives them in task order); ``reads``: the folder outside the
    checkpoint that ``check`` reads, and which of its files holds each tensor (``--source``),
    so that a task's stamp covers them; None when it reads only the checkpoint; ``ahead``:
    the checkpoint tensors ``check`` will read for the given modules, in the order it reads
    them, which a task asks ahead (many requests in flight on the Hub). The JSON
    form of its outcomes (the report's task records, ``--resume``) is
    :data:`mxformats.validate.resume.CODECS` ``[outcomes]``."""

    outcomes: str
    prepare: Callable[[Checkpoint, Options], Any]
    modules: Callable[[Checkpoint, Options, Any], Sequence[str]]
    check: Callable[[Checkpoint, Options, Any, Module], Any]
    combine: Callable[[Checkpoint, Options, Sequence[Any]], Iterable[Finding]]
    reads: Callable[[Any], tuple[Path, Mapping[str, str]] | None] = reads_nothing
    ahead: Callable[[Checkpoint, Options, Sequence[str]], Iterator[TensorRef]] = (
        asks_nothing_ahead)


@dataclass(frozen=True)
class CheckModule:
    """One check module: its ``name`` (as :attr:`Report.modules_run
    <mxformats.validate.report.Report.modules_run>` lists it), ``run`` (its findings, computed
    here), ``applies`` (whether its checks run under the options: a report never counts a
    check that did not run as passed) and, for a module whose work is per quantized module,
    ``per_module`` (the runner then takes its findings from ``per_module.combine`` of the
    tasks' outcomes instead of ``run``) and ``usage_error`` (a reason the options cannot be
    carried out on this checkpoint at all, e.g. a ``--source`` that is itself quantized in the
    checked format: the run then stops with exit 2 before any task)."""

    name: str
    run: Callable[[Checkpoint, Options], Iterable[Finding]]
    applies: Callable[[Checkpoint, Options], bool] = always
    per_module: PerModule | None = None
    usage_error: Callable[[Checkpoint, Options], str | None] = no_usage_error
