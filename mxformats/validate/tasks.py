"""Tasks: the per-module numbers and reproduction work, cut into units that run anywhere.

A :class:`Task` names a checkpoint (a folder path or ``hf://`` location, as a string), the
run's :class:`~mxformats.validate.model.Options`, and a group of quantized modules; the
module-level :func:`run_task` opens the checkpoint itself (headers only, cached per process),
runs :func:`~mxformats.validate.numbers.module_numbers` and
:func:`~mxformats.validate.reproduce.module_reproduction` on each module, one module at a
time (memory per task is bounded by the largest module, not by the shard), and returns a
picklable :class:`TaskResult`. So a task runs in this process, in a pool process, or on
another machine (:mod:`~mxformats.validate.executors`).

:func:`plan` groups the modules by the shard that holds their weight and orders each group
by offset, so a task reads its shard front to back (sequential reads: the page cache's
read-ahead and a disk's or an object store's best pattern); groups are cut into tasks of at
most :data:`TASK_BYTES` and :data:`TASK_MODULES` so that a large checkpoint gives many more
tasks than workers. The plan depends only on the checkpoint and the options, never on the
number of workers or the executor: every run cuts the same tasks, which makes the report
byte-identical across executors and lets ``--resume`` match tasks by :func:`task_key`.

The report combines the outcomes in module order (:func:`~mxformats.validate.numbers.combine`,
:func:`~mxformats.validate.reproduce.combine`), whatever order the tasks finished in.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from mxformats._version import __version__

from . import numbers, reproduce
from .findings import MAX_LISTED, Finding, Level, Listing, Severity, declare
from .model import Checkpoint, Options
from .reader import ReadFailed

__all__ = ["TASK_BYTES", "TASK_FAILED", "TASK_MODULES", "Task", "TaskResult", "failure_findings",
           "plan", "remember", "run_task", "task_key"]

TASK_FAILED = declare(
    "TASK_FAILED", Severity.ERROR, Level.STRUCTURE, "internal",
    "A task of the numbers or reproduction checks failed: it raised, or its worker process "
    "died (killed, out of memory) on every attempt; its modules were not checked.",
    "Re-run (with --resume to keep the finished tasks); if it fails again, report it with the "
    "message, and check the machine's memory against the largest module.")

#: A task reads at most about this many tensor bytes (one module more when a single module is
#: larger): 64 shards of a 550 GB Kimi release give about 2,000 tasks.
TASK_BYTES = 256 << 20
#: ... and holds at most this many modules (level ``scales`` reads little per module).
TASK_MODULES = 512


@dataclass(frozen=True)
class Task:
    """One unit of work: the checkpoint ``root`` (a folder path or ``hf://ORG/NAME[@REV]``),
    the run's ``options``, the quantized ``modules`` to check (in read order), and the task's
    ``index`` in the plan."""

    root: str
    options: Options
    modules: tuple[str, ...]
    index: int


@dataclass
class TaskResult:
    """What a task gave: per module its numbers and reproduction outcomes (each only where
    that check runs), the tensor bytes it read (the progress bar), the reads that failed
    (``(check, file, reason, follow_on)``, reported once per file by the runner) and its
    wall time."""

    index: int
    numbers: list[numbers.ModuleNumbers] = field(default_factory=list)
    reproduction: list[reproduce.ModuleReproduction] = field(default_factory=list)
    bytes_read: int = 0
    read_failures: list[tuple[str, str, str, bool]] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class _Loaded:
    """A checkpoint as one process sees it: the loaded headers, the reproduction claim (a
    Finding or None where reproduction does not run) and the modules it compares."""

    ckpt: Checkpoint
    claim: reproduce.Claim | Finding | None
    chosen: frozenset[str]


#: Checkpoints loaded in this process, by :func:`_load_key`.
_LOADED: dict[tuple[str, ...], _Loaded] = {}


def _load_key(root: str, opts: Options) -> tuple[str, ...]:
    """What loading depends on: the root, the symlink roots (``files.load`` reads no other
    option) and, for the reproduction claim, ``--source`` and ``--sample``."""
    return (root, *map(str, opts.allow_symlink_root), f"source={opts.source}",
            f"sample={opts.sample}")


def remember(root: str, opts: Options, ckpt: Checkpoint) -> None:
    """Let tasks of ``root`` that run in this process use the already loaded ``ckpt``."""
    _LOADED[_load_key(root, opts)] = _prepared(ckpt, opts)


def _prepared(ckpt: Checkpoint, opts: Options) -> _Loaded:
    claim = reproduce.prepare(ckpt, opts)
    chosen = frozenset(reproduce.chosen_modules(ckpt, opts)) if isinstance(
        claim, reproduce.Claim) else frozenset()
    return _Loaded(ckpt, claim, chosen)


def _loaded(root: str, opts: Options) -> _Loaded:
    key = _load_key(root, opts)
    found = _LOADED.get(key)
    if found is None:
        from .files import load

        result = load(root, opts)
        if result.ckpt is None or result.fatal is not None:
            raise RuntimeError(f"cannot load {root}: {result.fatal or 'nothing readable'}")
        found = _LOADED[key] = _prepared(result.ckpt, opts)
    return found


def run_task(task: Task) -> TaskResult:
    """Run ``task`` here: load its checkpoint's headers (once per process), then check its
    modules one at a time. Picklable in and out; exceptions of a module's checks are that
    module's INTERNAL_ERROR findings, an exception here (a checkpoint that no longer loads)
    is the task's."""
    start = time.perf_counter()
    loaded = _loaded(task.root, task.options)
    ckpt, opts = loaded.ckpt, task.options
    out = TaskResult(task.index)
    counted = [0]

    def count(n: int) -> None:
        counted[0] += n

    previous, failures_before = ckpt.on_read, len(ckpt.read_failures)
    ckpt.on_read = count
    try:
        for name in task.modules:
            module = ckpt.modules[name]
            if numbers.applies(ckpt, opts):
                out.numbers.append(numbers.module_numbers(ckpt, opts, module))
            if isinstance(loaded.claim, reproduce.Claim) and name in loaded.chosen:
                out.reproduction.append(reproduce.module_reproduction(ckpt, loaded.claim,
                                                                      module))
    finally:
        ckpt.on_read = previous
        failed = ckpt.read_failures[failures_before:]
        del ckpt.read_failures[failures_before:]  # the runner adds them back from the result
    out.read_failures = [(f.check, f.file, f.reason, f.follow_on) for f in failed]
    out.bytes_read = counted[0]
    out.seconds = time.perf_counter() - start
    return out


def read_failures(result: TaskResult) -> Iterator[ReadFailed]:
    """The failed reads of ``result`` as the reader raised them."""
    for check, file, reason, follow_on in result.read_failures:
        yield ReadFailed(check, file, reason, follow_on=follow_on)


def plan(root: str, ckpt: Checkpoint, opts: Options) -> list[Task]:
    """The tasks of a run: the modules the numbers checks or ``--source`` look at, grouped by
    the shard holding their weight (shards in the checkpoint's order), sorted by offset
    within it, cut at :data:`TASK_BYTES` / :data:`TASK_MODULES`. Empty when neither runs."""
    loaded = _prepared(ckpt, opts)
    desc = ckpt.descriptor
    if desc is None:
        return []
    if numbers.applies(ckpt, opts):
        names = [m.name for m in numbers.quantized_modules(ckpt)]
    else:
        names = sorted(loaded.chosen)
    by_file: dict[str, list[tuple[int, str, int]]] = {}
    for name in names:
        module = ckpt.modules[name]
        weight = module.tensors.get(desc.for_module(ckpt, name).weight_param) or min(
            module.tensors.values(), key=lambda t: (t.file, t.begin))
        size = sum(t.nbytes for t in module.tensors.values())
        by_file.setdefault(weight.file, []).append((weight.begin, name, size))
    order = {f: i for i, f in enumerate(ckpt.shards)}
    tasks: list[Task] = []
    for file in sorted(by_file, key=lambda f: (order.get(f, len(order)), f)):
        group: list[str] = []
        size = 0
        for _, name, nbytes in sorted(by_file[file]):
            if group and (size + nbytes > TASK_BYTES or len(group) >= TASK_MODULES):
                tasks.append(Task(root, opts, tuple(group), len(tasks)))
                group, size = [], 0
            group.append(name)
            size += nbytes
        if group:
            tasks.append(Task(root, opts, tuple(group), len(tasks)))
    return tasks


def task_key(task: Task) -> str:
    """sha256 of what a task's result depends on: the tool version, the root, the modules and
    the options that change what is read or checked (``--level``, ``--source``, ``--sample``,
    the symlink roots). ``--resume`` reuses a result only under the same key."""
    opts = task.options
    what = [__version__, task.root, list(task.modules), opts.level.value,
            None if opts.source is None else os.fspath(opts.source), opts.sample,
            [os.fspath(p) for p in opts.allow_symlink_root]]
    return hashlib.sha256(json.dumps(what).encode()).hexdigest()


def failure_findings(tasks: Sequence[Task], errors: dict[int, str]) -> Iterator[Finding]:
    """One TASK_FAILED per failed task (``errors``: task index -> what happened), the first
    :data:`MAX_LISTED` listed and the rest counted in one finding."""
    listed = Listing(MAX_LISTED)
    for index, error in sorted(errors.items()):
        modules = tasks[index].modules
        more = f" and {len(modules) - 1} more" if len(modules) > 1 else ""
        yield from listed.add(Finding(TASK_FAILED, f"task {index} ({modules[0]}{more}): {error}",
                                      tensor=modules[0]))
    yield from listed.rest()
