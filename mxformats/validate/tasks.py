"""Tasks: the per-module numbers and reproduction work, cut into units that run anywhere.

A :class:`Task` names a checkpoint (a folder path or ``hf://`` location, as a string), the
run's :class:`~mxformats.validate.model.Options`, and a group of quantized modules; the
module-level :func:`run_task` opens the checkpoint itself (headers only, cached per process),
runs ``numbers.module_numbers`` and
``reproduce.module_reproduction`` on each module, one module at a
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

The report combines the outcomes in module order (``numbers.combine``,
``reproduce.combine``), whatever order the tasks finished in.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from mxformats._version import __version__
from mxformats.tensorfile import read_json

from . import numbers, reproduce
from .findings import CHECKS, MAX_LISTED, Finding, Level, Listing, Severity, declare
from .model import Checkpoint, Options, TensorRef
from .readers import LocalReader, ReadFailed

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["RESUME_MAX_BYTES", "RESUME_UNUSABLE", "TASK_BYTES", "TASK_FAILED", "TASK_MODULES",
           "Task", "TaskResult", "failure_findings", "plan", "record", "remembered",
           "result_from_json", "result_to_json", "resumable", "run_task", "task_key"]

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
    the run's ``options``, the quantized ``modules`` to check (in read order), the task's
    ``index`` in the plan, and the ``stamp`` of the files its result depends on, as the plan
    saw them (``_files_stamp``: size and modification time)."""

    root: str
    options: Options
    modules: tuple[str, ...]
    index: int
    stamp: str = ""


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
    Finding or None where reproduction does not run), the modules it compares, and the
    stamps of its files when it was loaded."""

    ckpt: Checkpoint
    claim: reproduce.Claim | Finding | None
    chosen: frozenset[str]
    stamp: _Stamper


#: Checkpoints this process holds, by :func:`_load_key`: the run's own while it runs
#: (:func:`remembered`), and in a worker the one its last task loaded (:func:`_loaded`).
_LOADED: dict[tuple[str, ...], _Loaded] = {}
#: The key :func:`_loaded` filled, which the next checkpoint a worker loads replaces.
_LAST_LOADED: list[tuple[str, ...]] = []


def _load_key(root: str, opts: Options) -> tuple[str, ...]:
    """What loading depends on: the root, the symlink roots (``files.load`` reads no other
    option) and, for the reproduction claim, ``--source`` and ``--sample``."""
    return (root, *map(str, opts.allow_symlink_root), f"source={opts.source}",
            f"sample={opts.sample}")


@contextmanager
def remembered(root: str, opts: Options, ckpt: Checkpoint) -> Iterator[None]:
    """Let the tasks of ``root`` that run in this process use the already loaded ``ckpt``
    while the block runs, and forget it after: a process that validates checkpoint after
    checkpoint holds none of them once its run is over (and a process that exits has no
    ~450,000 header objects of a full-size checkpoint left for its final collection)."""
    key = _load_key(root, opts)
    entry = _LOADED[key] = _prepared(ckpt, opts)
    try:
        yield
    finally:
        if _LOADED.get(key) is entry:
            del _LOADED[key]


def _prepared(ckpt: Checkpoint, opts: Options) -> _Loaded:
    claim = reproduce.prepare(ckpt, opts)
    chosen = frozenset(reproduce.chosen_modules(ckpt, opts)) if isinstance(
        claim, reproduce.Claim) else frozenset()
    return _Loaded(ckpt, claim, chosen, _Stamper(ckpt, claim))


def _loaded(task: Task) -> _Loaded:
    """The checkpoint of ``task`` as this process holds it, loading its headers when it does
    not, or when the files the task reads are not as they were when this process loaded
    them (a shard written again since: its offsets may have moved). Compared with this
    process's own view of the files, not the plan's: the nodes of a cluster may each hold
    a copy of the checkpoint, with modification times of their own. A worker holds one
    checkpoint it loaded itself at a time: a long-lived one (a Ray worker serves run after
    run) drops the previous one first."""
    root, opts = task.root, task.options
    key = _load_key(root, opts)
    found = _LOADED.get(key)
    if found is None or found.stamp(task.modules) != found.stamp.now(task.modules):
        from .files import load

        while _LAST_LOADED:
            _LOADED.pop(_LAST_LOADED.pop(), None)
        # a pool process's reader gets its share of the run's --hub-connections
        share = max(1, opts.hub_connections // max(1, opts.workers))
        result = load(root, replace(opts, hub_connections=share))
        if result.ckpt is None or result.fatal is not None:
            raise RuntimeError(f"cannot load {root}: {result.fatal or 'nothing readable'}")
        found = _LOADED[key] = _prepared(result.ckpt, opts)
        _LAST_LOADED.append(key)
    return found


def _entry(root: str, ckpt: Checkpoint, opts: Options) -> _Loaded:
    """``ckpt`` prepared: the entry :func:`remembered` made for it, or a new one (never
    another process's or run's entry for the same root, whose files may have changed)."""
    found = _LOADED.get(_load_key(root, opts))
    return found if found is not None and found.ckpt is ckpt else _prepared(ckpt, opts)


def run_task(task: Task) -> TaskResult:
    """Run ``task`` here: load its checkpoint's headers (once per process), then check its
    modules one at a time. Picklable in and out; exceptions of a module's checks are that
    module's INTERNAL_ERROR findings, an exception here (a checkpoint that no longer loads)
    is the task's."""
    start = time.perf_counter()
    loaded = _loaded(task)
    ckpt, opts = loaded.ckpt, task.options
    out = TaskResult(task.index)
    counted = [0]

    def count(n: int) -> None:
        counted[0] += n

    previous, failures_before = ckpt.on_read, len(ckpt.read_failures)
    ckpt.on_read = count
    try:
        with ckpt.reading_ahead(_numbers_reads(ckpt, opts, task.modules)):
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


def _numbers_reads(ckpt: Checkpoint, opts: Options, modules: Sequence[str]
                   ) -> Iterator[TensorRef]:
    """The tensors the numbers checks of ``modules`` read, in the order they read them
    (none where they do not run): what :func:`run_task` asks ahead."""
    if not numbers.applies(ckpt, opts):
        return
    for name in modules:
        module = ckpt.modules[name]
        tensors = module.tensors
        yield from (tensors[p] for p in numbers.module_params(ckpt, opts, module)
                    if p in tensors)


def read_failures(result: TaskResult) -> Iterator[ReadFailed]:
    """The failed reads of ``result`` as the reader raised them."""
    for check, file, reason, follow_on in result.read_failures:
        yield ReadFailed(check, file, reason, follow_on=follow_on)


def plan(root: str, ckpt: Checkpoint, opts: Options) -> list[Task]:
    """The tasks of a run: the modules the numbers checks or ``--source`` look at, grouped by
    the shard holding their weight (shards in the checkpoint's order), sorted by offset
    within it, cut at :data:`TASK_BYTES` / :data:`TASK_MODULES`. Empty when neither runs."""
    loaded = _entry(root, ckpt, opts)
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

    def cut(group: list[str]) -> None:
        tasks.append(Task(root, opts, tuple(group), len(tasks), loaded.stamp(group)))

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
    modules' tensors, and with ``--source`` of the source's ``config.json`` and the source
    shards the task's modules can read (:func:`_source_family`): as they were when the
    stamper was made (once per loaded checkpoint; :meth:`__call__`), or as they are now
    (:meth:`now`: a few ``stat`` calls per task, not one per source shard, which on a
    network file system is what a run of thousands of tasks would wait on). A Hub
    checkpoint is pinned to a commit, so only a local folder's files are stamped."""

    def __init__(self, ckpt: Checkpoint, claim: reproduce.Claim | Finding | None) -> None:
        self.ckpt = ckpt
        self.local = ckpt.reader is None or isinstance(ckpt.reader, LocalReader)
        self.source_folder: Path | None = None
        self.source_shards: dict[str, set[str]] = {}  # family -> its source shards
        self.source: dict[str, list[Any]] = {}
        if isinstance(claim, reproduce.Claim):
            self.source_folder = claim.source.folder
            for tensor, shard in claim.source.index.items():
                family = _source_family(tensor.rpartition(".")[0])
                self.source_shards.setdefault(family, set()).add(shard)
            self.source = {row[0]: row for row in _files_stamp(
                self.source_folder, ["config.json", *claim.source.index.values()])}
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

    def now(self, modules: Sequence[str]) -> str:
        """The stamp of ``modules`` from the files as they are now (a few ``stat`` calls)."""
        config = _files_stamp(self.ckpt.root, ["config.json"]) if self.local else []
        source = [] if self.source_folder is None else _files_stamp(
            self.source_folder, self._source_files(modules))
        return self._digest(config, _files_stamp(self.ckpt.root, self._files(modules)), source)


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


# -- results as JSON (the report's task records, --resume) ----------------------------------------

#: ``--resume`` reads a report of at most this many bytes (a Kimi-size run writes tens of MB).
RESUME_MAX_BYTES = 512 << 20
#: An array in a task record holds at most this many elements (the arrays a task returns are
#: scale tensors of at most ``numbers.SMALL_ELEMENTS`` elements and 16-bin histograms).
MAX_ARRAY_ELEMENTS = 1 << 16

#: The finding quotes this much of the first malformed record's problem (it may repeat a
#: value of any size from the file).
PROBLEM_CHARS = 200

RESUME_UNUSABLE = declare(
    "RESUME_UNUSABLE", Severity.WARNING, Level.STRUCTURE, "internal",
    "--resume named a report this run cannot reuse (unreadable, not a JSON report, a "
    "malformed task record, or tasks of another checkpoint, version or options): the tasks it "
    "does not supply ran again.",
    "Pass the JSON report (-o) of an interrupted run of the same checkpoint and options.")


def _array_to_json(a: NDArray[Any]) -> dict[str, Any]:
    a = np.ascontiguousarray(a)
    return {"dtype": a.dtype.name, "shape": list(a.shape),
            "data": base64.b64encode(a.tobytes()).decode("ascii")}


def _dtype(name: object) -> np.dtype[Any]:
    """A numeric numpy or ml_dtypes dtype by name; ValueError for anything else (an object
    dtype would let a record build arbitrary Python objects)."""
    if not isinstance(name, str):
        raise ValueError(f"dtype {name!r} is not a name")
    found = getattr(ml_dtypes, name, None)
    dtype = np.dtype(found) if found is not None else np.dtype(name)
    if dtype.kind not in "biufV" or dtype.hasobject or dtype.fields is not None:
        raise ValueError(f"dtype {name!r} is not numeric")
    return dtype


def _array_from_json(data: object) -> NDArray[Any]:
    if not isinstance(data, dict):
        raise ValueError("an array record is not an object")
    dtype = _dtype(data.get("dtype"))
    shape = data.get("shape")
    if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise ValueError(f"array shape {shape!r} is not a list of sizes")
    count = math.prod(shape)
    if count > MAX_ARRAY_ELEMENTS:
        raise ValueError(f"array of {count} elements, over {MAX_ARRAY_ELEMENTS}")
    raw = base64.b64decode(str(data.get("data", "")), validate=True)
    if len(raw) != count * dtype.itemsize:
        raise ValueError(f"array data of {len(raw)} bytes for {count} {dtype.name}")
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def _histogram_from_json(data: object) -> NDArray[Any]:
    """A code histogram: 16 non-negative int64 counts, as ``numbers`` adds them up (another
    shape would broadcast into the sum, another dtype turn it to float)."""
    counts = _array_from_json(data)
    if counts.dtype != np.int64 or counts.shape != (16,) or bool((counts < 0).any()):
        raise ValueError(f"a histogram of {counts.dtype.name} {list(counts.shape)}, not 16 "
                         "counts")
    return counts


def _finding_to_json(f: Finding) -> dict[str, Any]:
    return {"check": f.check.id, "message": f.message, "file": f.file, "tensor": f.tensor,
            "offset": f.offset, "severity": None if f.severity is None else f.severity.value,
            "extra": f.extra}


def _finding_from_json(data: object) -> Finding:
    if not isinstance(data, dict) or data.get("check") not in CHECKS:
        raise ValueError("a finding record names no catalogued check")
    severity = data.get("severity")
    offset = data.get("offset")
    extra = data.get("extra") or {}
    if not (isinstance(offset, int) or offset is None) or not isinstance(extra, dict):
        raise ValueError("a finding record's offset or extra is malformed")
    return Finding(CHECKS[data["check"]], _text(data.get("message")), _optional(data.get("file")),
                   _optional(data.get("tensor")), offset,
                   None if severity is None else Severity(severity), extra)


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string")
    return value


def _optional(value: object) -> str | None:
    return None if value is None else _text(value)


def _number(value: object) -> float:
    """A number of a record: a JSON number, or the string of a NaN or an infinity
    (:data:`reproduce.NONFINITE_JSON`, as :func:`reproduce.json_float` writes them)."""
    if isinstance(value, str) and value in reproduce.NONFINITE_JSON:
        return reproduce.NONFINITE_JSON[value]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{value!r} is not a number")
    try:
        return float(value)
    except OverflowError:  # a JSON integer of up to 4,300 digits parses
        raise ValueError(f"{value!r:.40} is too large for a float") from None


def _numbers_to_json(o: numbers.ModuleNumbers) -> dict[str, Any]:
    return {"module": o.module, "findings": [_finding_to_json(f) for f in o.findings],
            "small": None if o.small is None else {
                p: _array_to_json(a) for p, a in o.small.items()},
            "hist": {k: _array_to_json(a) for k, a in o.hist.items()},
            "zero_blocks": o.zero_blocks,
            "expert": None if o.expert is None else [o.expert[0].hex(),
                                                     reproduce.json_float(o.expert[1]),
                                                     o.expert[2]]}


def _numbers_from_json(data: dict[str, Any]) -> numbers.ModuleNumbers:
    small, expert = data.get("small"), data.get("expert")
    zero_blocks = data.get("zero_blocks") or {}
    if not isinstance(zero_blocks, dict) or not all(
            isinstance(n, int) for n in zero_blocks.values()):
        raise ValueError("zero_blocks is not a table of counts")
    if expert is not None and not (isinstance(expert, list) and len(expert) == 3
                                   and isinstance(expert[2], bool)):
        raise ValueError("expert is not [checksum, rms, all zero]")
    return numbers.ModuleNumbers(
        _text(data.get("module")), [_finding_from_json(f) for f in data.get("findings", [])],
        None if small is None else {_text(p): _array_from_json(a) for p, a in small.items()},
        {_text(k): _histogram_from_json(a) for k, a in (data.get("hist") or {}).items()},
        {_text(k): n for k, n in zero_blocks.items()},
        None if expert is None else (bytes.fromhex(_text(expert[0])), _number(expert[1]),
                                     expert[2]))


def _reproduction_to_json(o: reproduce.ModuleReproduction) -> dict[str, Any]:
    r = o.result
    return {"module": o.module, "findings": [_finding_to_json(f) for f in o.findings],
            "result": None if r is None else {
                "module": r.module, "identical": r.identical,
                "first_mismatch": r.first_mismatch,
                "rel_error": reproduce.json_float(r.rel_error),
                "sqnr_db": reproduce.json_float(r.sqnr_db),
                "correlation": reproduce.json_float(r.correlation)},
            "missing": None if o.missing is None else _finding_to_json(o.missing),
            "unprofiled": o.unprofiled, "unrecognised": o.unrecognised}


def _reproduction_from_json(data: dict[str, Any]) -> reproduce.ModuleReproduction:
    r, missing = data.get("result"), data.get("missing")
    result = None
    if r is not None:
        identical, first = r.get("identical"), r.get("first_mismatch")
        if not isinstance(identical, dict) or not all(
                isinstance(v, bool) for v in identical.values()) or not isinstance(first, dict):
            raise ValueError("a reproduction result is malformed")
        result = reproduce.ModuleResult(
            _text(r.get("module")), {_text(k): v for k, v in identical.items()},
            {_text(k): _text(v) for k, v in first.items()}, _number(r.get("rel_error")),
            _number(r.get("sqnr_db")), _number(r.get("correlation")))
    return reproduce.ModuleReproduction(
        _text(data.get("module")), [_finding_from_json(f) for f in data.get("findings", [])],
        result, None if missing is None else _finding_from_json(missing),
        _optional(data.get("unprofiled")), _optional(data.get("unrecognised")))


def result_to_json(result: TaskResult) -> dict[str, Any]:
    """``result`` as JSON data (no pickle: a report is untrusted input to ``--resume``);
    arrays as dtype, shape and base64 bytes."""
    return {"numbers": [_numbers_to_json(o) for o in result.numbers],
            "reproduction": [_reproduction_to_json(o) for o in result.reproduction],
            "bytes_read": result.bytes_read,
            "read_failures": [list(f) for f in result.read_failures]}


def result_from_json(data: object, index: int) -> TaskResult:
    """The :class:`TaskResult` of task ``index`` that :func:`result_to_json` wrote.
    ValueError (or KeyError, TypeError) for anything else: only numbers, strings, numeric
    arrays and catalogued checks are built, never code."""
    if not isinstance(data, dict):
        raise ValueError("a task result is not an object")
    failures = []
    for f in data.get("read_failures", []):
        if not (isinstance(f, list) and len(f) == 4 and isinstance(f[3], bool)):
            raise ValueError("a read failure record is malformed")
        failures.append((_text(f[0]), _text(f[1]), _text(f[2]), f[3]))
    bytes_read = data.get("bytes_read", 0)
    if not isinstance(bytes_read, int):
        raise ValueError("bytes_read is not an integer")
    return TaskResult(index, [_numbers_from_json(o) for o in data.get("numbers", [])],
                      [_reproduction_from_json(o) for o in data.get("reproduction", [])],
                      bytes_read, failures)


def record(task: Task, result: TaskResult) -> dict[str, Any]:
    """The report's record of a finished task: its :func:`task_key`, index, module count and
    wall time (the one field that differs between runs), and its result."""
    return {"key": task_key(task), "index": task.index, "modules": len(task.modules),
            "seconds": round(result.seconds, 3), "result": result_to_json(result)}


def _modules_checked(loaded: _Loaded, task: Task) -> tuple[list[str], list[str]]:
    """The modules :func:`run_task` gives numbers and reproduction outcomes for, in order."""
    counted = list(task.modules) if numbers.applies(loaded.ckpt, task.options) else []
    compared = [m for m in task.modules if m in loaded.chosen] if isinstance(
        loaded.claim, reproduce.Claim) else []
    return counted, compared


def resumable(path: Path, plan: Sequence[Task],
              ckpt: Checkpoint) -> tuple[dict[int, TaskResult], Finding | None]:
    """The results in the report at ``path`` of the tasks of ``plan`` (by index), matched by
    :func:`task_key` and holding the outcomes of exactly the modules the task checks (a
    record short of some would leave them unchecked), and a RESUME_UNUSABLE warning when the
    file cannot be used or supplies none of them. Never raises for the file's sake."""
    try:
        data = read_json(path, RESUME_MAX_BYTES)
        records = data.get("tasks") if isinstance(data, dict) else None
        if not isinstance(records, list):
            raise ValueError("not a JSON report of mxformats validate with task records")
    except (OSError, ValueError, RecursionError) as exc:
        return {}, Finding(RESUME_UNUSABLE, f"--resume {path}: {exc}")
    by_key = {task_key(t): t for t in plan}
    loaded = _entry(plan[0].root, ckpt, plan[0].options) if plan else None
    found: dict[int, TaskResult] = {}
    bad, problem = 0, ""
    for rec in records:
        task = by_key.get(str(rec.get("key"))) if isinstance(rec, dict) else None
        if task is None or loaded is None:
            continue
        try:
            result = result_from_json(rec.get("result"), task.index)
            if ([o.module for o in result.numbers],
                    [o.module for o in result.reproduction]) != _modules_checked(loaded, task):
                raise ValueError(f"task {task.index}'s record is not of its modules")
            found[task.index] = result
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
            bad += 1
            problem = problem or f"{type(exc).__name__}: {exc}"[:PROBLEM_CHARS]
    if bad:
        return found, Finding(RESUME_UNUSABLE, f"--resume {path}: {bad} task record(s) "
                              f"malformed and run again (first: {problem})")
    if records and not found:
        return found, Finding(RESUME_UNUSABLE, f"--resume {path}: none of its {len(records)} "
                              "task records is of this run (another checkpoint, version or "
                              "options, or its files changed since)")
    return found, None
