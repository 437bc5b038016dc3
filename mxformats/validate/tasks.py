"""Tasks: the per-module numbers and reproduction work, cut into units that run anywhere.

A :class:`Task` names a checkpoint (a folder path or ``hf://`` location, as a string), the
run's :class:`~mxformats.validate.model.Options`, a group of quantized modules and their
inventory (:mod:`~mxformats.validate.inventory`: the spans of the tensors the task reads, cut
from the headers the driver loaded once); the module-level :func:`run_task` opens the
checkpoint's reader (once per process and run) and reads no header, runs the per-module
work of the check modules (:data:`~mxformats.validate.checks.PER_MODULE`:
``numbers.module_numbers`` and ``reproduce.module_reproduction``) on each module, one module at
a time (memory per task is bounded by the largest module, not by the shard), and returns a
picklable :class:`TaskResult`. So a task runs in this process, in a pool process, or on
another machine (:mod:`~mxformats.validate.executors`).

:func:`plan` groups the modules by the shard that holds their weight and orders each group
by offset, so a task reads its shard front to back (sequential reads: the page cache's
read-ahead and a disk's or an object store's best pattern); groups are cut into tasks of at
most :data:`TASK_BYTES` and :data:`TASK_MODULES` so that a large checkpoint gives many more
tasks than workers. The plan depends only on the checkpoint and the options, never on the
number of workers or the executor: every run cuts the same tasks, which makes the report
byte-identical across executors and lets ``--resume`` match tasks by :func:`task_key`.

The report combines the outcomes in module order (each record's ``combine``: ``numbers.run``,
``reproduce.run``), whatever order the tasks finished in.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

from mxformats._version import __version__

from .checkmodule import PerModule, asks_nothing_ahead
from .checks import PER_MODULE
from .findings import MAX_LISTED, Finding, Level, Listing, Severity, declare
from .inventory import Facts, Inventory, families, inventory
from .model import Checkpoint, Options
from .readers import LocalReader, Reader, ReadFailed, open_reader

__all__ = ["TASK_BYTES", "TASK_FAILED", "TASK_MODULES", "Task", "TaskResult", "failure_findings",
           "plan", "remembered", "run_task", "task_key"]

TASK_FAILED = declare(
    "TASK_FAILED", severity=Severity.ERROR, level=Level.STRUCTURE, group="internal",
    meaning="A task of the numbers or reproduction checks failed: it raised, or its worker "
            "process died (killed, out of memory) on every attempt; its modules were not checked.",
    fix="Re-run (with --resume to keep the finished tasks); if it fails again, report it with the "
        "message, and check the machine's memory against the largest module.")

#: A task reads at most about this many tensor bytes (one module more when a single module is
#: larger): 64 shards of a 550 GB Kimi release give about 2,000 tasks.
TASK_BYTES = 256 << 20
#: ... and holds at most this many modules (level ``scales`` reads little per module).
TASK_MODULES = 512


@dataclass(frozen=True)
class Task:
    """One unit of work: the checkpoint ``root`` (a folder path or ``hf://ORG/NAME[@REV]``),
    the run's ``options``, the quantized ``modules`` to check (in read order), the task's
    ``index`` in the plan, the ``stamp`` of the files its result depends on, as the plan
    saw them (``_files_stamp``: size and modification time), and its ``inventory``: the
    spans of the tensors it reads and the checkpoint's facts
    (:mod:`~mxformats.validate.inventory`), which :func:`plan` cuts from the driver's loaded
    headers, so that no worker reads a header."""

    root: str
    options: Options
    modules: tuple[str, ...]
    index: int
    stamp: str = ""
    inventory: Inventory | None = field(default=None, repr=False)

    def modules_checked(self) -> list[list[str]]:
        """The modules of this task that :func:`run_task` gives outcomes for, per per-module
        check (in :data:`~mxformats.validate.checks.PER_MODULE` order), in task order."""
        if self.inventory is None:
            return [[] for _ in PER_MODULE]
        return [list(names) for names in self.inventory.checked]


@dataclass
class TaskResult:
    """What a task gave: per module the outcome of each per-module check that runs on it
    (``outcomes``, by :attr:`PerModule.outcomes <.checkmodule.PerModule.outcomes>`: the
    numbers and reproduction outcomes, in module order), the tensor bytes it read (the
    progress bar), the reads that failed (``(check, file, reason, follow_on)``, reported once
    per file by the runner) and its wall time."""

    index: int
    outcomes: dict[str, list[Any]] = field(default_factory=lambda: {
        pm.outcomes: [] for pm in PER_MODULE})
    bytes_read: int = 0
    read_failures: list[tuple[str, str, str, bool]] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class _Prepared:
    """A loaded checkpoint as the driver prepared it for its tasks: per per-module check (by
    its ``outcomes`` key) the state it prepared (the reproduction claim) and the modules it
    checks under it, the stamps of its files when it was prepared, and its facts (what every
    task's inventory carries)."""

    ckpt: Checkpoint
    states: dict[str, Any]
    checked: dict[str, frozenset[str]]
    stamp: _Stamper
    facts: Facts


@dataclass
class _Held:
    """What a process holds for the tasks of one run: the ``reader`` its tasks read through
    and the ``states`` of the per-module checks (by ``outcomes`` key; the open ``--source``)."""

    reader: Reader
    states: dict[str, Any]


#: The driver's prepared checkpoints, by :func:`_load_key`, while its run lasts
#: (:func:`remembered`): what :func:`plan` and ``--resume`` use.
_LOADED: dict[tuple[str, ...], _Prepared] = {}
#: What this process holds for the runs whose tasks it runs, by :func:`_run_key`: the
#: driver's, lent for its run (:func:`remembered`), and in a worker the one its last task
#: made (:func:`_held`).
_HELD: dict[tuple[str, ...], _Held] = {}
#: The key :func:`_held` filled, which the next run a worker serves replaces.
_LAST_HELD: list[tuple[str, ...]] = []


def _load_key(root: str, opts: Options) -> tuple[str, ...]:
    """What preparing depends on: the root, the symlink roots (``files.load`` reads no other
    option) and, for the reproduction claim, ``--source`` and ``--sample``."""
    return (root, *map(str, opts.allow_symlink_root), f"source={opts.source}",
            f"sample={opts.sample}")


def _share(opts: Options) -> int:
    """A pool process's share of the run's ``--hub-connections``."""
    return max(1, opts.hub_connections // max(1, opts.workers))


def _run_key(root: str, opts: Options, facts: Facts) -> tuple[str, ...]:
    """What a process's reader and states for a task depend on: :func:`_load_key`, the
    reader's connections and the checkpoint's facts (their digest covers the stamps of
    config.json and the ``--source`` files)."""
    return (*_load_key(root, opts), f"connections={_share(opts)}", facts.digest)


@contextmanager
def remembered(root: str, opts: Options, ckpt: Checkpoint) -> Iterator[None]:
    """Let :func:`plan` and ``--resume`` use ``ckpt`` prepared, and the tasks of ``root``
    that run in this process use its reader and states (the open ``--source``), while the
    block runs, and forget them after: a process that validates checkpoint after checkpoint
    holds none of them once its run is over."""
    key = _load_key(root, opts)
    entry = _LOADED[key] = _prepared(ckpt, opts)
    run = _run_key(root, opts, entry.facts)
    lent = _HELD[run] = _Held(ckpt.reader or LocalReader(ckpt.root, ckpt.allowed_roots),
                              entry.states)
    try:
        yield
    finally:
        if _LOADED.get(key) is entry:
            del _LOADED[key]
        if _HELD.get(run) is lent:
            del _HELD[run]


def _prepared(ckpt: Checkpoint, opts: Options) -> _Prepared:
    states = {pm.outcomes: pm.prepare(ckpt, opts) for pm in PER_MODULE}
    checked = {pm.outcomes: frozenset(pm.modules(ckpt, opts, states[pm.outcomes]))
               for pm in PER_MODULE}
    outside = (pm.reads(states[pm.outcomes]) for pm in PER_MODULE)
    stamp = _Stamper(ckpt, next((r for r in outside if r is not None), None))
    return _Prepared(ckpt, states, checked, stamp,
                     Facts.of(ckpt, [*stamp.config, *sorted(stamp.source.values())]))


def _held(task: Task, inventory: Inventory) -> _Held:
    """The reader and states ``task`` runs with in this process: those lent for its run, or
    this process's own, made on the first task of a run from the task's inventory (a reader
    of the root, with its share of ``--hub-connections``; the states each per-module check
    prepares, from the configs: no header is read). A worker holds one run's at a time: a
    long-lived one (a Ray worker serves run after run) drops the previous first."""
    opts = task.options
    key = _run_key(task.root, opts, inventory.facts)
    found = _HELD.get(key)
    if found is None:
        while _LAST_HELD:
            _HELD.pop(_LAST_HELD.pop(), None)
        reader = open_reader(task.root, opts.allow_symlink_root, _share(opts))
        ckpt = inventory.checkpoint(reader)
        found = _HELD[key] = _Held(reader, {pm.outcomes: pm.prepare(ckpt, opts)
                                            for pm in PER_MODULE})
        _LAST_HELD.append(key)
    return found


def _entry(root: str, ckpt: Checkpoint, opts: Options) -> _Prepared:
    """``ckpt`` prepared: the entry :func:`remembered` made for it, or a new one (never
    another process's or run's entry for the same root, whose files may have changed)."""
    found = _LOADED.get(_load_key(root, opts))
    return found if found is not None and found.ckpt is ckpt else _prepared(ckpt, opts)


def run_task(task: Task) -> TaskResult:
    """Run ``task`` here: make the checkpoint of its inventory (the spans of the tensors
    it reads: no header is opened or parsed), then check its modules one at a time.
    Picklable in and out; exceptions of a module's checks are that module's INTERNAL_ERROR
    findings, an exception here (a root that no longer opens) is the task's."""
    start = time.perf_counter()
    inventory = task.inventory
    if inventory is None:
        raise ValueError(f"task {task.index} carries no inventory (tasks.plan makes one)")
    held = _held(task, inventory)
    ckpt, opts = inventory.checkpoint(held.reader), task.options
    checked = {pm.outcomes: frozenset(names)
               for pm, names in zip(PER_MODULE, inventory.checked, strict=True)}
    out = TaskResult(task.index)
    counted = [0]

    def count(n: int) -> None:
        counted[0] += n

    ckpt.on_read = count
    ahead = chain.from_iterable(pm.ahead(ckpt, opts, list(names))
                                for pm, names in zip(PER_MODULE, inventory.checked, strict=True))
    with ckpt.reading_ahead(ahead):
        for name in task.modules:
            module = ckpt.modules[name]
            for pm in PER_MODULE:
                if name in checked[pm.outcomes]:
                    out.outcomes[pm.outcomes].append(
                        pm.check(ckpt, opts, held.states[pm.outcomes], module))
    out.read_failures = [(f.check, f.file, f.reason, f.follow_on) for f in ckpt.read_failures]
    out.bytes_read = counted[0]
    out.seconds = time.perf_counter() - start
    return out


def read_failures(result: TaskResult) -> Iterator[ReadFailed]:
    """The failed reads of ``result`` as the reader raised them."""
    for check, file, reason, follow_on in result.read_failures:
        yield ReadFailed(check, file, reason, follow_on=follow_on)


def plan(root: str, ckpt: Checkpoint, opts: Options) -> list[Task]:
    """The tasks of a run: the modules the per-module checks look at (the numbers checks,
    ``--source``), grouped by the shard holding their weight (shards in the checkpoint's
    order), sorted by offset within it, cut at :data:`TASK_BYTES` / :data:`TASK_MODULES`.
    Empty when none runs. Each task carries its inventory (:func:`.inventory.inventory`)."""
    loaded = _entry(root, ckpt, opts)
    desc = ckpt.descriptor
    if desc is None:
        return []
    names = sorted(frozenset().union(*loaded.checked.values()))
    by_file: dict[str, list[tuple[int, str, int]]] = {}
    for name in names:
        module = ckpt.modules[name]
        weight = module.tensors.get(desc.for_module(ckpt, name).weight_param) or min(
            module.tensors.values(), key=lambda t: (t.file, t.begin))
        work = [pm for pm in PER_MODULE if name in loaded.checked[pm.outcomes]]
        by_file.setdefault(weight.file, []).append(
            (weight.begin, name, _bytes_read(ckpt, opts, name, work)))
    order = {f: i for i, f in enumerate(ckpt.shards)}
    tasks: list[Task] = []
    family = families(ckpt.modules) if names else {}
    checked = [loaded.checked[pm.outcomes] for pm in PER_MODULE]

    def cut(group: list[str]) -> None:
        tasks.append(Task(root, opts, tuple(group), len(tasks), loaded.stamp(group),
                          inventory(ckpt, loaded.facts, family, group, checked)))

    for file in sorted(by_file, key=lambda f: (order.get(f, len(order)), f)):
        group: list[str] = []
        size = 0
        for _, name, nbytes in sorted(by_file[file]):
            if group and (size + nbytes > TASK_BYTES or len(group) >= TASK_MODULES):
                cut(group)
                group, size = [], 0
            group.append(name)
            size += nbytes
        if group:
            cut(group)
    return tasks


def _bytes_read(ckpt: Checkpoint, opts: Options, name: str, work: Sequence[PerModule]) -> int:
    """The tensor bytes of module ``name`` that ``work`` reads: those it asks ahead, or the
    whole module's when some of it asks nothing ahead (it reads as it goes). At ``--level
    scales`` a module reads its scales, not its packed weight: sized by the whole module, a
    task held about 35 Kimi experts, and on the Hub each task's window of reads in flight
    filled and drained every 35 reads."""
    tensors = ckpt.modules[name].tensors.values()
    if any(pm.ahead is asks_nothing_ahead for pm in work):
        return sum(t.nbytes for t in tensors)
    spans = {(ref.file, ref.begin): ref.nbytes
             for pm in work for ref in pm.ahead(ckpt, opts, [name])}
    return sum(spans.values())


def _files_stamp(folder: Path, names: Iterable[str]) -> list[list[Any]]:
    """``[name, size, mtime_ns]`` of each file ``names`` gives under ``folder`` (symlinks
    followed: a Hugging Face cache's re-download points at a new blob), in name order;
    ``[name]`` alone for one that cannot be stat'ed. Size and modification time are the
    quick check ``make`` and ``rsync`` use to tell a changed file without reading it."""
    out: list[list[Any]] = []
    for name in sorted(set(names)):
        try:
            st = os.stat(folder / name)
        except OSError:
            out.append([name])
        else:
            out.append([name, st.st_size, st.st_mtime_ns])
    return out


class _Stamper:
    """The stamp of a task's files: sha256 of :func:`_files_stamp` of the checkpoint's
    ``config.json`` (it decides the format descriptor) and the shards holding the task's
    modules' tensors, and with ``--source`` (``outside``: the folder a per-module check
    reads, :attr:`.checkmodule.PerModule.reads`) of the source's ``config.json`` and the source
    shards the task's modules can read (:func:`_source_family`; not every source shard, so
    that a source shard written again reruns only the tasks that read it), as they were when
    the stamper was made (once per prepared checkpoint; :meth:`__call__`). A Hub checkpoint
    is pinned to a commit, so only a local folder's files are stamped."""

    def __init__(self, ckpt: Checkpoint,
                 outside: tuple[Path, Mapping[str, str]] | None) -> None:
        self.ckpt = ckpt
        self.local = ckpt.reader is None or isinstance(ckpt.reader, LocalReader)
        self.source_folder: Path | None = None
        self.source_shards: dict[str, set[str]] = {}  # family -> its source shards
        self.source: dict[str, list[Any]] = {}
        if outside is not None:
            self.source_folder, index = outside
            for tensor, shard in index.items():
                family = _source_family(tensor.rpartition(".")[0])
                self.source_shards.setdefault(family, set()).add(shard)
            self.source = {row[0]: row for row in _files_stamp(
                self.source_folder, ["config.json", *index.values()])}
        self.config = _files_stamp(ckpt.root, ["config.json"]) if self.local else []
        self.shards = {row[0]: row for row in _files_stamp(ckpt.root, ckpt.shards)} \
            if self.local else {}

    def _files(self, modules: Sequence[str]) -> list[str]:
        """The shards the tensors of ``modules`` sit in (none of a Hub checkpoint)."""
        if not self.local:
            return []
        modules_tensors = (self.ckpt.modules[name].tensors.values() for name in modules)
        return sorted({t.file for tensors in modules_tensors for t in tensors})

    def _source_files(self, modules: Sequence[str]) -> list[str]:
        """The source's ``config.json`` and the shards ``modules`` can read (none without
        ``--source``)."""
        if self.source_folder is None:
            return []
        shards = (self.source_shards.get(_source_family(m), set()) for m in modules)
        return sorted({"config.json"}.union(*shards))

    @staticmethod
    def _digest(config: list[list[Any]], mine: list[list[Any]],
                source: list[list[Any]]) -> str:
        return hashlib.sha256(json.dumps([config, mine, source]).encode()).hexdigest()

    def __call__(self, modules: Sequence[str]) -> str:
        mine = [self.shards.get(f) or _files_stamp(self.ckpt.root, [f])[0]
                for f in self._files(modules)]
        return self._digest(self.config, mine,
                            [self.source[f] for f in self._source_files(modules)])


def _source_family(module: str) -> str:
    """The part of a module's name its source reads share: its parent (``...experts.3`` of
    ``...experts.3.down_proj``). Reproducing a module reads its own source tensors and, for
    a producer that shares a scale across fused linears (gate and up, ``q_a`` and ``kv_a``),
    its siblings', which sit under the same parent."""
    return module.rpartition(".")[0]


def task_key(task: Task) -> str:
    """sha256 of what a task's result depends on: the tool version, the root, the modules,
    the options that change what is read or checked (``--level``, ``--source``, ``--sample``,
    the symlink roots) and the stamp of the files it reads. ``--resume`` reuses a result only
    under the same key."""
    opts = task.options
    what = [__version__, task.root, list(task.modules), opts.level.value,
            None if opts.source is None else os.fspath(opts.source), opts.sample,
            [os.fspath(p) for p in opts.allow_symlink_root], task.stamp]
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
