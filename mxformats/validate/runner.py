"""Run the check modules over a checkpoint and collect a :class:`Report`.

The check modules are :data:`CHECK_MODULES`, in run order: records
(:class:`~mxformats.validate.checkmodule.CheckModule`) that the runner loops over. Any
exception a check raises becomes an ``INTERNAL_ERROR`` finding
(:mod:`~mxformats.validate.parallel`): the validator never ends in a traceback.
:class:`Report` lives with its renderings in :mod:`~mxformats.validate.report`.

:attr:`Report.modules_run` names only the modules whose checks really ran under the options
(each record's ``applies``: ``reproduce`` needs ``--source``, ``manifest`` ``--manifest``,
``deployment`` a target or a parallel size, ``numbers`` a verified format at level ``scales``
or above), so a report never counts a check that was not run as passed.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from . import checks, files, resume, tasks  # checks first: the order of CHECKS
from .checkmodule import CheckModule
from .executors import Executor, executor_for
from .findings import Finding, Level, listed
from .model import Checkpoint, CheckpointFormat, Options
from .parallel import INTERNAL_ERROR, internal
from .readers import NotAFolder, ReadFailed, open_reader
from .report import Report, exit_code

__all__ = [
    "CHECK_MODULES",
    "CONFIRM_BYTES",
    "INTERNAL_ERROR",
    "Report",
    "exit_code",
    "planned_bytes",
    "validate",
]


#: The check modules in run order (:data:`.checks.CHECK_MODULES`).
CHECK_MODULES = checks.CHECK_MODULES


def _guarded(name: str, findings: Iterable[Finding]) -> Iterator[Finding]:
    it = iter(findings)
    while True:
        try:
            f = next(it)
        except StopIteration:
            return
        except Exception as exc:
            yield internal(f"check module {name}", exc)
            return
        yield f


#: ``--level full`` on a remote checkpoint reads more than this only with ``--yes``.
CONFIRM_BYTES = 10 * 10**9


def planned_bytes(ckpt: Checkpoint, opts: Options) -> int:
    """The tensor bytes the run's level reads: ``full`` every tensor, ``scales`` the scale
    tensors of the quantized modules, ``structure`` none (headers only)."""
    if not ckpt.numeric or not opts.at_least(Level.SCALES):
        return 0
    if opts.at_least(Level.FULL):
        return sum(t.nbytes for t in ckpt.tensors.values())
    scales = ckpt.descriptor.scale_params if ckpt.descriptor is not None else ()
    return sum(t.nbytes for m in ckpt.modules.values() if m.quantized
               for p, t in m.tensors.items() if p in scales)


def _read_failures(ckpt: Checkpoint) -> Iterator[Finding]:
    """One finding per file whose tensor reads failed (the first failure, and how many
    more; the run lists the first few files, :func:`~.findings.listed`); reads not even
    attempted because the server had stopped answering are counted in the finding of the
    failure that stopped it."""
    from .loader import read_failed

    by_file: dict[str, list[ReadFailed]] = {}
    for exc in ckpt.read_failures:
        if not exc.follow_on:
            by_file.setdefault(exc.file, []).append(exc)
    skipped = sum(exc.follow_on for exc in ckpt.read_failures)
    for i, found in enumerate(by_file.values()):
        f = read_failed(found[0])
        more = [f"{len(found) - 1} more failed read(s) of this file"] if len(found) > 1 else []
        if skipped and i == len(by_file) - 1:
            more.append(f"{skipped} later read(s) not made: the server stopped answering")
        if more:
            f = replace(f, message=f"{f.message} ({'; '.join(more)})")
        yield f


@contextmanager
def _loaded_graph_frozen() -> Iterator[None]:
    """Keep the cyclic garbage collector off the loaded checkpoint while the checks run.

    The checkpoint holds several objects per tensor (139,098 tensors for Kimi-K2.6), alive
    for the whole run and in no cycle; the collections the checks' allocations trigger would
    walk them again and again. ``gc.freeze`` moves every object tracked now into the
    permanent generation, which collections skip; the checks' own garbage is still
    collected, and ``gc.unfreeze`` hands the frozen objects back afterwards. A process that
    froze objects itself (a pre-fork server) is left alone: unfreezing would undo its
    freeze."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class _TaskRun:
    """The numbers and reproduction work of one run as tasks (:mod:`.tasks`): planned from
    the loaded ``ckpt``, run on an executor, and combined per check module."""

    def __init__(self, root: str, ckpt: Checkpoint, opts: Options) -> None:
        self.ckpt, self.opts = ckpt, opts
        self.plan = tasks.plan(root, ckpt, opts)
        self.results: dict[int, tasks.TaskResult] = {}
        self.errors: dict[int, str] = {}
        self.resume_problem: Finding | None = None
        if opts.resume is not None:
            self.results, self.resume_problem = resume.resumable(opts.resume, self.plan)

    def run(self, executor: Executor | None, on_read: Callable[[int], None] | None) -> None:
        """Run the tasks not yet finished on ``executor`` (None: :func:`executor_for` the
        options, made only when there is a task: joining a Ray cluster costs seconds); each
        result's bytes advance ``on_read``. Once all have run, the failed reads of every
        result, those ``--resume`` supplied included, join the checkpoint's in task order
        (never in the order the tasks finished). KeyboardInterrupt leaves the finished ones
        in :attr:`results`."""
        todo = [t for t in self.plan if t.index not in self.results]
        if todo:
            for outcome in (executor or executor_for(self.opts)).map(tasks.run_task, todo):
                task = todo[outcome.index]
                if outcome.value is None:
                    self.errors[task.index] = outcome.error or "no result"
                    continue
                self.results[task.index] = outcome.value
                if on_read is not None and outcome.value.bytes_read:
                    on_read(outcome.value.bytes_read)
            for task in todo:  # an executor that broke its contract: never counted as checked
                if task.index not in self.results and task.index not in self.errors:
                    self.errors[task.index] = "the executor gave no outcome for it"
        for index in sorted(self.results):
            self.ckpt.read_failures.extend(tasks.read_failures(self.results[index]))

    def failures(self) -> Iterator[Finding]:
        """RESUME_UNUSABLE where ``--resume`` named a report it could not use, and
        TASK_FAILED findings for the tasks that failed."""
        if self.resume_problem is not None:
            yield self.resume_problem
        yield from tasks.failure_findings(self.plan, self.errors)

    def records(self) -> list[dict[str, Any]]:
        """The report's record of every finished task, in task order (``--resume`` input)."""
        return [resume.record(self.plan[i], self.results[i]) for i in sorted(self.results)]

    def check(self, module: CheckModule) -> Iterable[Finding]:
        """The findings of check ``module``: one with per-module work combines the tasks'
        outcomes (in task order; each combines in module order), the others run here."""
        work = module.per_module
        if work is None:
            return module.run(self.ckpt, self.opts)
        ordered = [self.results[i] for i in sorted(self.results)]
        return work.combine(self.ckpt, self.opts,
                            [o for r in ordered for o in r.outcomes[work.outcomes]])


def validate(
    root: str | os.PathLike[str],
    opts: Options,
    on_read: Callable[[int], None] | None = None,
    on_plan: Callable[[int], None] | None = None,
    executor: Executor | None = None,
) -> Report:
    """Validate the checkpoint ``root``: a folder or ``hf://ORG/NAME[@REVISION]``.

    ``on_plan`` is called once the headers are read with the tensor bytes the level will
    read (:func:`planned_bytes`), ``on_read`` with the byte count of every read (of the
    tasks' reads, once per finished task). A remote ``--level full`` of more than
    :data:`CONFIRM_BYTES` stops (exit 2) unless ``opts.yes``.

    The per-module numbers and reproduction work runs as tasks on ``executor`` (default:
    :func:`~mxformats.validate.executors.executor_for` ``opts``); the report does not depend
    on which, nor on the number of workers. A KeyboardInterrupt while the tasks run gives a
    report marked ``incomplete`` (``fatal`` says how far it got), and so does one in the checks
    that run after them (``--manifest`` hashes every shard): the finished tasks are kept.

    ``--source`` and the symlink roots are made absolute first: a task opens them wherever
    it runs (a pool process, a Ray worker on another node, in its own working directory),
    and its :func:`~mxformats.validate.tasks.task_key` names them."""
    start = time.perf_counter()
    opts = replace(opts, source=None if opts.source is None else Path(opts.source).absolute(),
                   allow_symlink_root=tuple(Path(p).absolute() for p in opts.allow_symlink_root))
    try:
        reader = open_reader(root, opts.allow_symlink_root, opts.hub_connections)
        loaded = files.load(reader, opts)
    except NotAFolder as exc:
        report = Report(os.fspath(root), "unknown", "", fatal=str(exc), level=opts.level)
        report.seconds = time.perf_counter() - start
        return report
    except Exception as exc:
        report = Report(os.fspath(root), "unknown", "", [internal("loading", exc)],
                        level=opts.level)
        report.seconds = time.perf_counter() - start
        return report
    ckpt = loaded.ckpt
    report = Report(
        reader.name if reader.remote else os.fspath(root),
        ckpt.format.value if ckpt else "unknown",
        ckpt.format_detail if ckpt else "",
        list(loaded.findings),
        loaded.fatal,
        ckpt=ckpt,
        level=opts.level,
        strict=opts.strict,
    )
    report.modules_run.append("files")
    if ckpt is None or loaded.fatal is not None or ckpt.format == CheckpointFormat.UNSUPPORTED:
        report.seconds = time.perf_counter() - start
        return report
    ckpt.on_read = on_read
    need = planned_bytes(ckpt, opts)
    if on_plan is not None:
        on_plan(need)
    if reader.remote and opts.at_least(Level.FULL) and need > CONFIRM_BYTES and not opts.yes:
        report.fatal = (f"--level full reads {need:,} bytes ({need / 1e9:.1f} GB) from "
                        f"{reader.name}; pass --yes to read them")
    else:
        report.fatal = next((why for module in CHECK_MODULES
                             if (why := module.usage_error(ckpt, opts)) is not None), None)
    if report.fatal is not None:
        report.seconds = time.perf_counter() - start
        return report
    key = reader.name if reader.remote else str(ckpt.root)
    # tasks run in this process reuse the loaded headers, for this run only
    with _loaded_graph_frozen(), tasks.remembered(key, opts, ckpt):
        done = _TaskRun(key, ckpt, opts)
        try:
            done.run(executor, on_read)
            report.tasks = done.records()
            failures_said = False
            for module in CHECK_MODULES[1:]:  # files: loaded above
                if module.applies(ckpt, opts):
                    report.modules_run.append(module.name)
                if module.per_module is not None and not failures_said:
                    # the tasks' failures, before the findings of the first module they serve
                    report.findings.extend(done.failures())
                    failures_said = True
                try:
                    produced = done.check(module)
                except Exception as exc:
                    report.findings.append(internal(f"check module {module.name}", exc))
                    continue
                report.findings.extend(_guarded(module.name, produced))
        except KeyboardInterrupt:  # in the tasks, or in a check after them (--manifest hashes)
            report.fatal = (f"interrupted: {len(done.results)} of {len(done.plan)} tasks "
                            "finished; --resume this report to run only the others")
            report.incomplete = True
            report.tasks = done.records()
            report.seconds = time.perf_counter() - start
            return report
    report.findings.extend(listed(_read_failures(ckpt)))
    for f in report.findings:
        block = f.extra.get("reproduction")
        if isinstance(block, dict):
            report.reproduction = block
            break
    report.seconds = time.perf_counter() - start
    return report
