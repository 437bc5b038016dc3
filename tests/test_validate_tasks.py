"""Tasks and executors (issue 18): the numbers and reproduction work as tasks that run
anywhere, the local process pool, failures as findings, and a report that does not depend on
the executor or the number of workers."""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import requires
from test_validate_corpus import CASES, build, ensure_twins, options
from validate_corpus import Case

from mxformats.cli import main
from mxformats.fast import THREADS_VARIABLE
from mxformats.validate import files, loader, reproduce, resume, runner, tasks
from mxformats.validate.executors import ExecutorUnavailable, Outcome, executor_for
from mxformats.validate.executors.local import LocalExecutor
from mxformats.validate.files import load
from mxformats.validate.findings import MAX_LISTED, Level, Severity
from mxformats.validate.model import Options
from mxformats.validate.readers import interface, local
from mxformats.validate.report import dump_json
from mxformats.validate.runner import Report, exit_code, validate

PRODUCERS = Path(__file__).resolve().parent / "data" / "producers"
SRC = PRODUCERS / "src-bf16"
FIXTURES = sorted(p.name for p in PRODUCERS.iterdir()
                  if p.is_dir() and p.name.startswith("kimi-k2-"))


def _json(report: Report) -> str:
    out = io.StringIO()
    dump_json(report, out)
    return out.getvalue()


def _without_timings(text: str) -> str:
    """The JSON report without its one timing, each task record's ``seconds``."""
    data = json.loads(text)
    for rec in data.get("tasks", []):
        rec.pop("seconds")
    return json.dumps(data, indent=2)


def _without_tasks(text: str) -> str:
    """The JSON report without its task records (how the work was cut)."""
    data = json.loads(text)
    data.pop("tasks", None)
    return json.dumps(data, indent=2)


@pytest.fixture
def small_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut the fixtures into several tasks per shard (they are a few MB each)."""
    monkeypatch.setattr(tasks, "TASK_BYTES", 1 << 16)


# -- the plan -----------------------------------------------------------------------------------


def test_plan_reads_each_shard_front_to_back_in_bounded_tasks(small_tasks: None) -> None:
    ckpt = load(PRODUCERS / "kimi-k2-mxfp4-quark", Options()).ckpt
    assert ckpt is not None and ckpt.descriptor is not None
    opts = Options(level=Level.FULL)
    plan = tasks.plan("root", ckpt, opts)
    assert [t.index for t in plan] == list(range(len(plan))) and len(plan) > 2
    seen: list[str] = []
    for task in plan:
        weights = [ckpt.modules[m].tensors[ckpt.descriptor.weight_param] for m in task.modules]
        assert len({w.file for w in weights}) == 1  # one shard per task
        assert [w.begin for w in weights] == sorted(w.begin for w in weights)  # in file order
        size = sum(t.nbytes for m in task.modules for t in ckpt.modules[m].tensors.values())
        assert len(task.modules) == 1 or size <= tasks.TASK_BYTES
        seen += task.modules
    assert sorted(seen) == sorted(m.name for m in ckpt.modules.values()
                                  if ckpt.descriptor.quantized(m))
    # the plan depends on the checkpoint and options only, never on the workers
    assert tasks.plan("root", ckpt, Options(level=Level.FULL, workers=7)) == [
        replace(t, options=Options(level=Level.FULL, workers=7)) for t in plan]
    assert tasks.plan("root", ckpt, Options(level=Level.STRUCTURE)) == []
    # offsets, not names, give the order: a shard written back to front is read front to back
    wp = ckpt.descriptor.weight_param
    for module in ckpt.modules.values():
        if wp in module.tensors:
            ref = module.tensors[wp]
            module.tensors[wp] = ref._replace(begin=10**12 - ref.begin)
    backwards = tasks.plan("root", ckpt, opts)
    assert [m for t in backwards for m in t.modules] != seen
    for task in backwards:
        begins = [ckpt.modules[m].tensors[wp].begin for m in task.modules]
        assert begins == sorted(begins)


def test_tasks_are_cut_by_the_bytes_they_read(small_tasks: None) -> None:
    """At ``--level scales`` a module reads its scales, not its packed weight: a task holds
    as many modules as fit :data:`~tasks.TASK_BYTES` of scales (on the Hub its window of reads
    in flight fills once, not every few modules); at ``full`` and with ``--source`` every
    byte of each module counts. Both sides of the bound: a task one module longer would pass
    it."""
    ckpt = load(PRODUCERS / "kimi-k2-mxfp4-quark", Options()).ckpt
    assert ckpt is not None and ckpt.descriptor is not None
    wp = ckpt.descriptor.weight_param

    def read(module: str, opts: Options) -> int:
        tensors = ckpt.modules[module].tensors
        every = opts.level is Level.FULL or opts.source is not None
        return sum(t.nbytes for p, t in tensors.items() if every or p != wp)

    for opts in (Options(level=Level.SCALES), Options(level=Level.FULL),
                 Options(level=Level.SCALES, source=SRC)):
        plan = tasks.plan("root", ckpt, opts)
        by_shard: dict[str, list[tasks.Task]] = {}
        for task in plan:
            by_shard.setdefault(ckpt.modules[task.modules[0]].tensors[wp].file, []).append(task)
            assert sum(read(m, opts) for m in task.modules) <= tasks.TASK_BYTES
        for group in by_shard.values():
            for task, after in pairwise(group):
                longer = sum(read(m, opts) for m in (*task.modules, after.modules[0]))
                assert longer > tasks.TASK_BYTES or len(task.modules) == tasks.TASK_MODULES
    assert len(tasks.plan("root", ckpt, Options(level=Level.SCALES))) < len(
        tasks.plan("root", ckpt, Options(level=Level.FULL)))


def test_task_key_changes_with_what_the_result_depends_on() -> None:
    base = tasks.Task("/ckpt", Options(level=Level.FULL, workers=1), ("a", "b"), 0)
    same = tasks.Task("/ckpt", Options(level=Level.FULL, workers=4, strict=True), ("a", "b"), 3)
    assert tasks.task_key(base) == tasks.task_key(same)  # workers, index, strict: no effect
    for other in (tasks.Task("/other", base.options, base.modules, 0),
                  tasks.Task("/ckpt", base.options, ("a",), 0),
                  tasks.Task("/ckpt", Options(level=Level.SCALES), base.modules, 0),
                  tasks.Task("/ckpt", Options(level=Level.FULL, source=SRC), base.modules, 0),
                  tasks.Task("/ckpt", Options(level=Level.FULL, source=SRC, sample=1),
                             base.modules, 0),
                  replace(base, stamp="0" * 64)):
        assert tasks.task_key(other) != tasks.task_key(base)


class FreshWorkers:
    """An executor that runs each task as a new worker process would, in this process:
    nothing the driver holds is lent to it (no reader, no prepared ``--source``), and every
    read of a checkpoint's shard header is counted while a task runs (``headers``: what was
    called, on which reader or file); the driver's own loading is not counted, nor the
    ``--source`` headers a reproduction reads (``source``: that folder)."""

    #: What reads a safetensors header: a reader's methods, the local one-open read, the
    #: loader.
    READERS = ((interface.Reader, "header_tables"), (interface.Reader, "header_table"),
               (interface.Reader, "header"), (local.LocalReader, "header_tables"),
               (local.LocalReader, "header_table"), (local, "read_header_table"),
               (files, "load"), (loader, "read"))

    def __init__(self, monkeypatch: pytest.MonkeyPatch, source: Path | None = None) -> None:
        self.headers: list[tuple[str, str]] = []
        self.source = None if source is None else str(source.resolve())
        self.ran = 0
        self.running = False
        for owner, name in self.READERS:
            monkeypatch.setattr(owner, name, self._counted(name, getattr(owner, name)))

    def _counted(self, name: str, real: Any) -> Any:
        def counted(*args: Any, **kw: Any) -> Any:
            first = args[0] if args else ""
            where = os.fspath(first) if isinstance(first, str | os.PathLike) else str(
                getattr(first, "name", first))  # a path, or a reader's name
            if self.running and not (self.source and where.startswith(self.source)):
                self.headers.append((name, where))
            return real(*args, **kw)
        return counted

    def map(self, fn: Any, items: list[tasks.Task]) -> Any:
        for i, task in enumerate(items):
            lent = dict(tasks._HELD)
            tasks._HELD.clear()
            self.running = True
            try:
                yield Outcome(i, fn(task))
            finally:
                self.running = False
                self.ran += 1
                tasks._HELD.clear()
                tasks._HELD.update(lent)


def test_run_task_reads_no_header(monkeypatch: pytest.MonkeyPatch) -> None:
    """A task carries its inventory: a process that never saw the checkpoint runs it without
    reading or parsing a shard header."""
    opts = Options(level=Level.FULL, source=SRC)
    folder = str((PRODUCERS / "kimi-k2-int4-compressed-tensors").resolve())
    ckpt = load(folder, opts).ckpt
    assert ckpt is not None
    plan = tasks.plan(folder, ckpt, opts)
    worker = FreshWorkers(monkeypatch, source=SRC)
    [outcome] = worker.map(tasks.run_task, plan[:1])
    result = outcome.value
    assert worker.headers == [] and worker.ran == 1
    assert result is not None and result.index == 0 and result.seconds >= 0
    assert result.bytes_read > 0
    assert [o.module for o in result.outcomes["numbers"]] == list(plan[0].modules)
    assert [o.module for o in result.outcomes["reproduction"]] == list(plan[0].modules)
    assert all(o.result is not None and all(o.result.identical.values())
               for o in result.outcomes["reproduction"])


# -- the report does not depend on the executor --------------------------------------------------


@pytest.mark.parametrize("fixture", FIXTURES)
@pytest.mark.parametrize("source", [False, True], ids=["alone", "source"])
def test_producer_reports_identical_over_workers(fixture: str, source: bool,
                                                 small_tasks: None) -> None:
    opts = {"level": Level.FULL, "source": SRC if source else None}
    one = validate(PRODUCERS / fixture, Options(workers=1, **opts))
    two = validate(PRODUCERS / fixture, Options(workers=2, **opts))
    assert _without_timings(_json(one)) == _without_timings(_json(two))
    assert exit_code(one) == 0 and (one.reproduction is not None) == source


@pytest.mark.parametrize("fixture", FIXTURES)
def test_fresh_workers_read_no_header_and_give_the_report(
        fixture: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every task in a worker that holds nothing of the driver's, one module per task (its
    fused siblings in other tasks): no worker reads a shard header, and the report but its
    task records is that of one task per shard run in the driver's process."""
    opts = Options(level=Level.FULL, source=SRC, workers=1)
    whole = validate(PRODUCERS / fixture, opts)
    monkeypatch.setattr(tasks, "TASK_BYTES", 1)
    worker = FreshWorkers(monkeypatch, source=SRC)
    cut = validate(PRODUCERS / fixture, opts, executor=worker)
    assert worker.ran == len(cut.tasks) > len(whole.tasks) and worker.headers == []
    assert _without_tasks(_json(cut)) == _without_tasks(_json(whole))
    assert exit_code(whole) == 0 and whole.reproduction is not None


def test_fresh_workers_sample_the_driver_s_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--sample`` picks from every quantized module of the checkpoint: the driver picks,
    and a worker, which knows only its task's modules, reproduces just those it was given."""
    opts = Options(level=Level.SCALES, source=SRC, sample=1, workers=1)
    folder = PRODUCERS / "kimi-k2-mxfp4-quark"
    ckpt = load(folder, opts).ckpt
    assert ckpt is not None
    chosen = reproduce.chosen_modules(ckpt, opts)
    monkeypatch.setattr(tasks, "TASK_BYTES", 1)
    worker = FreshWorkers(monkeypatch, source=SRC)
    report = validate(folder, opts, executor=worker)
    assert report.reproduction is not None and worker.headers == []
    assert report.reproduction["modules_checked"] == len(chosen) < len(report.tasks)
    assert sorted(o["module"] for rec in report.tasks
                  for o in rec["result"]["reproduction"]) == chosen


def test_a_config_nested_deep_is_not_carried_to_the_workers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A config.json that parses but nests deeper than pickle can follow (untrusted input)
    runs its tasks like any other: no task carries config.json, which no per-module check
    reads."""
    folder = tmp_path / "deep"
    shutil.copytree(PRODUCERS / "kimi-k2-mxfp4-quark", folder)
    config = json.loads((folder / "config.json").read_text())
    config["deep"] = json.loads("[" * 900 + "]" * 900)
    (folder / "config.json").write_text(json.dumps(config))
    opts = Options(level=Level.FULL, workers=1)
    here = validate(folder, opts)
    assert here.fatal is None and here.tasks and "numbers" in here.modules_run
    worker = FreshWorkers(monkeypatch)
    there = validate(folder, opts, executor=worker)
    assert worker.ran and worker.headers == []
    assert _without_timings(_json(there)) == _without_timings(_json(here))


#: Corpus cases whose numbers or reproduction change: every level-full or --source case.
NUMERIC_CASES = [c for c in CASES if (c.level is Level.FULL or c.source) and not c.xfail]


@pytest.mark.parametrize("c", NUMERIC_CASES[::6], ids=lambda c: c.name)
def test_corpus_reports_identical_over_workers(c: Case, tmp_path_factory: pytest.TempPathFactory,
                                               tmp_path: Path, small_tasks: None) -> None:
    bases = {c.base} | ({c.source} if isinstance(c.source, str) else set())
    ensure_twins(tmp_path_factory.getbasetemp() / "twins-tasks", bases)
    p = build(c, tmp_path)
    opts = options(c)
    one = validate(p, opts)
    opts.workers = 2
    assert _without_timings(_json(validate(p, opts))) == _without_timings(_json(one))


# -- failures are findings ----------------------------------------------------------------------


def test_a_task_that_raises_is_a_finding(monkeypatch: pytest.MonkeyPatch,
                                         small_tasks: None) -> None:
    real = tasks.run_task

    def flaky(task: tasks.Task) -> tasks.TaskResult:
        if task.index == 1:
            raise MemoryError("planted")
        return real(task)

    monkeypatch.setattr(tasks, "run_task", flaky)
    report = validate(PRODUCERS / "kimi-k2-mxfp4-quark", Options(level=Level.FULL, workers=1))
    failed = [f for f in report.findings if f.check.id == "TASK_FAILED"]
    assert len(failed) == 1 and "task 1 (" in failed[0].message
    assert "MemoryError: planted" in failed[0].message and failed[0].tensor
    assert exit_code(report) == 1


def test_a_task_the_executor_gave_no_outcome_for_is_a_finding(small_tasks: None) -> None:
    """An executor that ends early (against its contract) leaves modules unchecked: an error,
    never an OK run."""

    class LosesTheLast:
        def map(self, fn: Any, items: list[tasks.Task]) -> Any:
            for i, task in enumerate(items[:-1]):
                yield Outcome(i, fn(task))

    report = validate(PRODUCERS / "kimi-k2-mxfp4-quark", Options(level=Level.FULL, workers=1),
                      executor=LosesTheLast())
    failed = [f for f in report.findings if f.check.id == "TASK_FAILED"]
    assert len(failed) == 1 and "no outcome" in failed[0].message and exit_code(report) == 1


def test_many_failed_tasks_are_listed_then_counted() -> None:
    plan = [tasks.Task("r", Options(), (f"m{i}", f"n{i}"), i) for i in range(13)]
    found = list(tasks.failure_findings(plan, {i: "OSError: gone" for i in range(13)}))
    assert [f.check.id for f in found] == ["TASK_FAILED"] * 11
    assert "m0 and 1 more" in found[0].message and "3 more like the above" in found[-1].message


def _square(x: int) -> int:
    return x * x


def _die_once(marker: str) -> str:
    """Kill the worker on the first attempt only (the marker file remembers it)."""
    if not os.path.exists(marker):
        Path(marker).write_text("died")
        os.kill(os.getpid(), signal.SIGKILL)
    return "survived"


def _always_die(x: int) -> int:
    if x == 2:
        os._exit(3)
    return x


def _raise(x: int) -> int:
    if x == 1:
        raise ValueError("bad item")
    return x


def _threads(_: int) -> tuple[str | None, int]:
    from mxformats import fast

    return os.environ.get(THREADS_VARIABLE), fast.workers()


def _outcomes(it: Any) -> dict[int, Outcome[Any]]:
    got = list(it)
    by_index = {o.index: o for o in got}
    assert len(by_index) == len(got)  # one outcome per item
    return by_index


def test_pool_runs_every_item_and_one_thread_per_worker() -> None:
    pool = LocalExecutor(workers=2)
    got = _outcomes(pool.map(_square, list(range(6))))
    assert [got[i].value for i in range(6)] == [i * i for i in range(6)]
    threads = _outcomes(pool.map(_threads, [0, 1]))
    assert {o.value for o in threads.values()} == {("1", 1)}  # no oversubscription


def _visible_devices(_: int) -> str | None:
    time.sleep(0.3)  # long enough that both pool processes start
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def test_each_pool_process_takes_its_own_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--device cuda`` with several GPUs: pool processes take them in turn (the variable is
    set before a task runs, so its ``cuda`` is its own GPU); ``cuda:N`` and one GPU leave
    every process what the driver sees."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3, 5")
    pool = executor_for(Options(workers=2, device="cuda"))
    assert isinstance(pool, LocalExecutor) and pool.devices == ("3", "5")
    got = _outcomes(pool.map(_visible_devices, [0, 1, 2, 3]))
    assert {o.value for o in got.values()} == {"3", "5"}
    for device, visible in (("cuda:1", "3,5"), ("cuda", "7")):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        one = executor_for(Options(workers=2, device=device))
        assert isinstance(one, LocalExecutor) and one.devices == ()


def _run_counting_headers(task: tasks.Task) -> tuple[dict[str, Any], list[str]]:
    """Run ``task`` in a pool process, every header read of :attr:`FreshWorkers.READERS`
    recorded (the process is the pool's: the patches end with it); its result as the JSON
    report records it, but its timing."""
    seen: list[str] = []

    def recorder(name: str, real: Any) -> Any:
        def recorded(*args: Any, **kw: Any) -> Any:
            seen.append(name)
            return real(*args, **kw)
        return recorded

    for owner, name in FreshWorkers.READERS:
        setattr(owner, name, recorder(name, getattr(owner, name)))
    return resume.result_to_json(tasks.run_task(task)), seen


def test_pool_workers_read_no_header() -> None:
    """Pool processes (``--workers 2``) get their tasks' spans: none reads a shard header,
    and each task's result is the one it gives in the driver's process."""
    opts = Options(level=Level.FULL, workers=2)
    folder = str((PRODUCERS / "kimi-k2-nvfp4-modelopt").resolve())
    ckpt = load(folder, opts).ckpt
    assert ckpt is not None
    with tasks.remembered(folder, opts, ckpt):
        plan = tasks.plan(folder, ckpt, opts)
        here = [resume.result_to_json(tasks.run_task(t)) for t in plan]
    got = _outcomes(LocalExecutor(workers=2).map(_run_counting_headers, plan))
    assert len(got) == len(plan) > 1
    assert all(got[i].value is not None for i in got), [got[i].error for i in got]
    assert [got[i].value[1] for i in range(len(plan))] == [[]] * len(plan)
    assert [got[i].value[0] for i in range(len(plan))] == here


def test_a_killed_worker_is_retried(tmp_path: Path) -> None:
    markers = [str(tmp_path / f"m{i}") for i in range(3)]
    got = _outcomes(LocalExecutor(workers=2).map(_die_once, markers))
    assert all(o.value == "survived" and o.error is None for o in got.values())
    # each died once and ran again; a task in flight when another's death broke the pool
    # counts that attempt too (Python cannot tell which task killed it), so 2 or 3
    assert all(2 <= o.attempts <= 3 for o in got.values()), [o.attempts for o in got.values()]


def test_a_worker_that_always_dies_becomes_an_error_after_max_attempts() -> None:
    got = _outcomes(LocalExecutor(workers=2, max_attempts=2).map(_always_die, [0, 1, 2, 3]))
    assert got[2].value is None and got[2].attempts == 2
    assert got[2].error is not None and got[2].error.startswith("BrokenProcessPool")
    assert [got[i].value for i in (0, 1, 3)] == [0, 1, 3]  # the others were not charged out


@pytest.mark.parametrize("workers", [1, 2])
def test_an_exception_is_the_outcome_not_retried(workers: int) -> None:
    got = _outcomes(LocalExecutor(workers=workers).map(_raise, [0, 1, 2]))
    assert got[1].error == "ValueError: bad item" and got[1].attempts == 1
    assert got[0].value == 0 and got[2].value == 2


_PROBE = """
import sys

def loaded(name):
    return name in sys.modules
"""

_PROBE_RUN = """
import json
import sys
sys.path.insert(0, sys.argv[1])
from probe import loaded
from mxformats.fast import jit
from mxformats.validate.executors.local import LocalExecutor

if __name__ == "__main__":
    names = ["numba", *(f"mxformats.fast.{name}" for name in jit.COMPILED_MODULES)]
    outcomes = sorted(LocalExecutor(workers=2).map(loaded, names), key=lambda o: o.index)
    print(json.dumps({name: o.value for name, o in zip(names, outcomes)}))
"""


def test_pool_workers_start_with_the_compiled_passes_imported(tmp_path: Path) -> None:
    """The forkserver preloads :mod:`mxformats.fast.preload`: every worker is forked with
    numba and the compiled modules imported (a fresh process: the forkserver is started once
    per process, with the environment of its first pool)."""
    requires("numba")
    (tmp_path / "probe.py").write_text(_PROBE)
    env = {k: v for k, v in os.environ.items() if k != "MXFORMATS_NUMBA"}
    out = subprocess.run([sys.executable, "-c", _PROBE_RUN, str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=300, check=True)
    got = json.loads(out.stdout)
    assert got and all(got.values()), got


# -- choosing the executor ----------------------------------------------------------------------


def test_executor_for_local_and_missing_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    local = executor_for(Options(workers=3))
    assert isinstance(local, LocalExecutor) and local.workers == 3 and local.name == "local"
    monkeypatch.setitem(sys.modules, "ray", None)  # an environment without Ray
    monkeypatch.setitem(sys.modules, "mxformats.validate.executors.ray", None)
    with pytest.raises(ExecutorUnavailable, match=r"pip install mxformats\[ray\]"):
        executor_for(Options(executor="ray"))


def test_cli_executor_ray_without_ray_exits_2(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.setitem(sys.modules, "mxformats.validate.executors.ray", None)
    rc = main(["validate", str(PRODUCERS / "kimi-k2-mxfp4-quark"), "--executor", "ray"])
    assert rc == 2 and "pip install mxformats[ray]" in capsys.readouterr().err


@pytest.mark.parametrize("executor", [[], ["--executor", "local"]])
def test_cli_ray_address_without_executor_ray_exits_2(
        executor: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """A cluster address with the local executor would run on this machine alone."""
    rc = main(["validate", str(PRODUCERS / "kimi-k2-mxfp4-quark"), *executor,
               "--ray-address", "auto"])
    assert rc == 2 and "give --executor ray too" in capsys.readouterr().err


def test_cli_workers_are_processes(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["validate", str(PRODUCERS / "kimi-k2-w4a8-quark"), "--level", "full",
               "--workers", "2", "--json", "-"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["ok"] is True


# -- resume ---------------------------------------------------------------------------------------


def _interrupt_after(monkeypatch: pytest.MonkeyPatch, k: int) -> list[int]:
    """Make the (k+1)-th task raise KeyboardInterrupt; returns the indexes of the tasks run."""
    real, ran = tasks.run_task, []

    def hooked(task: tasks.Task) -> tasks.TaskResult:
        if len(ran) == k:
            raise KeyboardInterrupt
        ran.append(task.index)
        return real(task)

    monkeypatch.setattr(tasks, "run_task", hooked)
    return ran


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    real, ran = tasks.run_task, []

    def counted(task: tasks.Task) -> tasks.TaskResult:
        ran.append(task.index)
        return real(task)

    monkeypatch.setattr(tasks, "run_task", counted)
    return ran


RESUMED = PRODUCERS / "kimi-k2-nvfp4-modelopt"


def test_an_interrupted_run_resumes_with_only_the_other_tasks(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, small_tasks: None) -> None:
    opts = {"level": Level.FULL, "source": SRC, "workers": 1}
    full = validate(RESUMED, Options(**opts))
    n = len(full.tasks)
    assert n > 3 and exit_code(full) == 0
    ran = _interrupt_after(monkeypatch, 2)
    partial = validate(RESUMED, Options(**opts))
    assert partial.incomplete and ran == [0, 1] and len(partial.tasks) == 2
    assert partial.fatal is not None and f"2 of {n} tasks" in partial.fatal
    saved = tmp_path / "partial.json"
    saved.write_text(_json(partial))
    assert json.loads(saved.read_text())["incomplete"] is True
    monkeypatch.undo()
    monkeypatch.setattr(tasks, "TASK_BYTES", 1 << 16)
    ran = _counting(monkeypatch)
    resumed = validate(RESUMED, Options(**opts, resume=saved))
    assert ran == list(range(2, n))  # only the tasks the interrupted run had not finished
    assert _without_timings(_json(resumed)) == _without_timings(_json(full))


def test_cli_interrupt_writes_an_incomplete_report_and_exits_130(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, small_tasks: None) -> None:
    out = tmp_path / "report.json"
    args = ["validate", str(RESUMED), "--level", "full", "--workers", "1", "--json", str(out)]
    _interrupt_after(monkeypatch, 1)
    assert main(args) == 130
    data = json.loads(out.read_text())
    assert data["incomplete"] is True and data["ok"] is False and len(data["tasks"]) == 1
    monkeypatch.undo()
    monkeypatch.setattr(tasks, "TASK_BYTES", 1 << 16)
    ran = _counting(monkeypatch)
    assert main([*args, "--resume", str(out)]) == 0
    assert 0 not in ran and ran


@pytest.mark.parametrize("content", [
    "not json", "[]", json.dumps({"tasks": "x"}), json.dumps({"no": "tasks"}),
    "OTHER",  # a record of another run: no key matches
    "OBJECT_DTYPE", "TEXT_DTYPE", "HUGE_ARRAY", "UNKNOWN_CHECK",
    "HUGE_NUMBER",  # a JSON integer too large for a float
    "MODULE_DROPPED",  # a record short of one of its task's modules
    "SHORT_HISTOGRAM",  # would broadcast into the 16-bin sum
    "SCALE_BIN_256", "NEGATIVE_SCALE_COUNT", "UNKNOWN_SCALE_BINS",  # bins 0..255, counts
    "LONG_VALUE",  # quoted in the warning, which must stay short
])
def test_an_unusable_resume_file_is_a_warning_and_everything_runs(
        content: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opts = Options(level=Level.FULL, workers=1)
    folder = PRODUCERS / "kimi-k2-mxfp4-quark"
    full = validate(folder, opts)
    rec = json.loads(_json(full))["tasks"][0]
    result = rec["result"]
    if content == "OTHER":
        rec["key"] = "0" * 64
    elif content == "OBJECT_DTYPE":
        result["numbers"][0]["small"] = {
            "weight_scale": {"dtype": "object", "shape": [1], "data": ""}}
    elif content == "TEXT_DTYPE":  # numpy reads it from the bytes, but it is no number
        result["numbers"][0]["small"] = {
            "weight_scale": {"dtype": "<U1", "shape": [1], "data": "QQAAAA=="}}
    elif content == "HUGE_ARRAY":
        result["numbers"][0]["small"] = {
            "weight_scale": {"dtype": "uint8", "shape": [1 << 40], "data": ""}}
    elif content == "UNKNOWN_CHECK":
        result["numbers"][0]["findings"] = [{"check": "NO_SUCH_CHECK", "message": "x"}]
    elif content == "HUGE_NUMBER":
        result["numbers"][0]["expert"] = ["00", 10**4000, False]
    elif content == "SHORT_HISTOGRAM":
        result["numbers"][0]["hist"] = {"int4": {"dtype": "int64", "shape": [1],
                                                 "data": "AQAAAAAAAAA="}}
    elif content in ("SCALE_BIN_256", "NEGATIVE_SCALE_COUNT", "UNKNOWN_SCALE_BINS"):
        hist = result["numbers"][0]["scale_hist"]["weight_scale"]
        if content == "UNKNOWN_SCALE_BINS":
            hist["bins"] = "value"
        elif content == "SCALE_BIN_256":  # 255 is the last (test_scale_histogram_edges_...)
            hist["counts"]["256"] = 1
        else:
            hist["counts"][next(iter(hist["counts"]))] = -1
    elif content == "LONG_VALUE":
        result["numbers"][0]["module"] = ["x" * 100_000]
    elif content == "MODULE_DROPPED":
        assert len(result["numbers"]) > 1
        del result["numbers"][-1]
    path = tmp_path / "resume.json"
    path.write_text(json.dumps({"tasks": [rec]}) if content.isupper() else content)
    ran = _counting(monkeypatch)
    report = validate(folder, Options(level=Level.FULL, workers=1, resume=path))
    assert ran == [t["index"] for t in json.loads(_json(full))["tasks"]]  # all ran again
    warned = [f for f in report.findings if f.check.id == "RESUME_UNUSABLE"]
    assert len(warned) == 1 and str(path) in warned[0].message
    assert len(warned[0].message) < len(str(path)) + 400
    assert [f for f in report.findings if f.check.id != "RESUME_UNUSABLE"] == full.findings


def test_results_round_trip_through_json() -> None:
    opts = Options(level=Level.FULL, source=SRC)
    folder = str((PRODUCERS / "kimi-k2-w4a8-quark").resolve())
    ckpt = load(folder, opts).ckpt
    assert ckpt is not None
    with tasks.remembered(folder, opts, ckpt):
        for task in tasks.plan(folder, ckpt, opts):
            result = tasks.run_task(task)
            back = resume.result_from_json(json.loads(json.dumps(resume.result_to_json(result))),
                                          task.index)
            assert resume.result_to_json(back) == resume.result_to_json(result)
            assert ([o.findings for o in back.outcomes["numbers"]]
                    == [o.findings for o in result.outcomes["numbers"]])
            for o, b in zip(result.outcomes["numbers"], back.outcomes["numbers"], strict=True):
                assert set(o.scale_hist) == {"weight_scale", "weight_scale_2"}
                assert {p: (k, c.tolist()) for p, (k, c) in b.scale_hist.items()} == {
                    p: (k, c.tolist()) for p, (k, c) in o.scale_hist.items()}


def test_scale_histogram_edges_round_trip_through_json() -> None:
    """A scale histogram's first and last bins, and a count past 2^32, survive the --resume
    JSON, which holds only the bins with a count."""
    from mxformats.validate import numbers

    counts = np.zeros(numbers.SCALE_BINS, np.int64)
    counts[[0, 1, 254, 255]] = [3, 1, 1 << 40, 2]
    o = numbers.ModuleNumbers("m", scale_hist={"weight_scale": ("byte", counts),
                                               "weight_scale_2": ("exponent", counts[::-1])})
    data = json.loads(json.dumps(resume._numbers_to_json(o)))
    assert data["scale_hist"]["weight_scale"] == {
        "bins": "byte", "counts": {"0": 3, "1": 1, "254": 1 << 40, "255": 2}}
    back = resume._numbers_from_json(data).scale_hist
    assert {p: (b, c.dtype, c.tolist()) for p, (b, c) in back.items()} == {
        p: (b, np.dtype(np.int64), c.tolist()) for p, (b, c) in o.scale_hist.items()}


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 0.25])
def test_nonfinite_figures_are_strict_json_and_round_trip(value: float) -> None:
    """A module's NaN or infinite figures (no statistic, NaN decoded, an exact SQNR) are
    written as protobuf's JSON mapping writes them ("NaN", "Infinity", "-Infinity"), so a
    record is strict JSON (before: bare NaN, which JSON.parse rejects and jq reads as null),
    and --resume reads them back to the same floats; a finite one stays a number."""
    result = reproduce.ModuleResult("m", {"weight": True}, {}, value, value, value)
    record = tasks.TaskResult(0, {"numbers": [], "reproduction": [
        reproduce.ModuleReproduction("m", result=result)]})
    text = json.dumps(resume.result_to_json(record), allow_nan=False)
    assert ('"rel_error": 0.25' in text) is math.isfinite(value)
    back = resume.result_from_json(json.loads(text), 0).outcomes["reproduction"][0].result
    assert back is not None
    for got in (back.rel_error, back.sqnr_db, back.correlation):
        assert math.isnan(got) if math.isnan(value) else got == value
    with pytest.raises(ValueError, match="is not a number"):
        resume._number("nan")  # only the three strings of the mapping


def test_a_run_forgets_its_checkpoint() -> None:
    """validate() lends its loaded headers to the tasks it runs in this process, and takes
    them back: a process validating checkpoint after checkpoint does not keep them all."""
    opts = Options(level=Level.FULL, source=SRC)
    folder = PRODUCERS / "kimi-k2-int4-compressed-tensors"
    tasks._LOADED.clear()
    seen: list[int] = []

    class InProcess:
        def map(self, fn: Any, items: list[tasks.Task]) -> Any:
            for i, task in enumerate(items):
                seen.append(len(tasks._LOADED))  # the run's checkpoint, lent
                yield Outcome(i, fn(task), None)

    report = validate(folder, opts, executor=InProcess())
    assert seen and set(seen) == {1} and report.reproduction is not None
    assert tasks._LOADED == {} and tasks._HELD == {}


def test_a_worker_holds_one_run_it_served() -> None:
    """A long-lived worker (Ray reuses its workers across runs) drops the reader and states
    of the run its previous task served when a task of another one comes, and keeps them for
    the next task of the same run."""
    opts = Options(level=Level.FULL)
    tasks._HELD.clear()
    first, second = (str((PRODUCERS / name).resolve()) for name in
                     ("kimi-k2-int4-compressed-tensors", "kimi-k2-w4a8-quark"))
    held = []
    for folder in (first, second, second):
        ckpt = load(folder, opts).ckpt
        assert ckpt is not None
        for task in tasks.plan(folder, ckpt, opts)[:2]:
            tasks.run_task(task)
            assert [key[0] for key in tasks._HELD] == [folder]
            held.append(next(iter(tasks._HELD.values())))
    assert held[0] is held[1] and held[1] is not held[2]
    assert held[2] is held[3] is held[4] is held[5]  # the same checkpoint and files: one run
    tasks._HELD.clear()


def _failing_reads(monkeypatch: pytest.MonkeyPatch, where: dict[int, str]) -> None:
    """Give task ``i``'s result a failed read of file ``where[i]`` (as a Hub read that broke
    off would), on top of what the task really found."""
    real = tasks.run_task

    def broken(task: tasks.Task) -> tasks.TaskResult:
        result = real(task)
        if task.index in where:
            result.read_failures.append(("HUB_READ_FAILED", where[task.index],
                                         f"read of task {task.index} failed", False))
        return result

    monkeypatch.setattr(tasks, "run_task", broken)


def test_a_resumed_run_keeps_the_failed_reads_of_the_tasks_it_reuses(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, small_tasks: None) -> None:
    opts = {"level": Level.FULL, "workers": 1}
    _failing_reads(monkeypatch, {0: "model-00001-of-00002.safetensors"})
    full = validate(RESUMED, Options(**opts))
    assert [f.message for f in full.findings if f.check.id == "HUB_READ_FAILED"] == [
        "read of task 0 failed"] and exit_code(full) == 1
    ran = _interrupt_after(monkeypatch, 2)
    partial = validate(RESUMED, Options(**opts))
    assert partial.incomplete and ran == [0, 1]
    saved = tmp_path / "partial.json"
    saved.write_text(_json(partial))
    monkeypatch.undo()  # task 0, the one whose read failed, is not run again
    monkeypatch.setattr(tasks, "TASK_BYTES", 1 << 16)
    resumed = validate(RESUMED, Options(**opts, resume=saved))
    assert _without_timings(_json(resumed)) == _without_timings(_json(full))


def test_failed_reads_of_many_files_are_listed_then_counted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that fails the reads of every file gives the first MAX_LISTED files and one
    summary (an error: the run fails) whose extras name each of the rest."""
    monkeypatch.setattr(tasks, "TASK_BYTES", 1 << 12)
    opts = Options(level=Level.FULL, workers=1)
    ckpt = load(RESUMED, opts).ckpt
    assert ckpt is not None
    count = len(tasks.plan(str(RESUMED), ckpt, opts))
    assert count > MAX_LISTED
    names = {i: f"shard-{i:03d}.safetensors" for i in range(count)}
    _failing_reads(monkeypatch, names)
    found = [f for f in validate(RESUMED, opts).findings if f.check.id == "HUB_READ_FAILED"]
    assert [f.file for f in found[:-1]] == [names[i] for i in range(MAX_LISTED)]
    assert found[-1].effective_severity is Severity.ERROR
    assert [u["file"] for u in found[-1].extra["unlisted"]] == [
        names[i] for i in range(MAX_LISTED, count)]


def test_failed_reads_are_reported_in_task_order_whatever_order_tasks_finish(
        monkeypatch: pytest.MonkeyPatch, small_tasks: None) -> None:
    class Reversed:
        """Runs every task here, and hands the outcomes back last first."""

        def map(self, fn: Any, items: list[tasks.Task]) -> Any:
            done = [Outcome(i, fn(task)) for i, task in enumerate(items)]
            return reversed(done)

    _failing_reads(monkeypatch, {0: "model-00001-of-00002.safetensors",
                                 2: "model-00002-of-00002.safetensors"})
    opts = Options(level=Level.FULL, workers=1)
    in_order = validate(RESUMED, opts)
    assert len([f for f in in_order.findings if f.check.id == "HUB_READ_FAILED"]) == 2
    backwards = validate(RESUMED, opts, executor=Reversed())
    assert _without_timings(_json(backwards)) == _without_timings(_json(in_order))


def test_resume_reruns_the_tasks_whose_files_changed(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, small_tasks: None) -> None:
    """A task's result is reused only while the files it read are as they were (size and
    modification time): the tasks of a shard written again run again, the others do not;
    a source shard written again runs the tasks whose modules can read it (not all); a
    source config written again runs every task that compared modules with it."""
    folder, source = tmp_path / "ckpt", tmp_path / "src"
    shutil.copytree(RESUMED, folder)
    shutil.copytree(SRC, source)
    opts = Options(level=Level.FULL, source=source, workers=1)
    first = validate(folder, opts)
    saved = tmp_path / "first.json"
    saved.write_text(_json(first))
    ckpt = load(folder, opts).ckpt
    assert ckpt is not None
    plan = tasks.plan(str(folder.resolve()), ckpt, opts)
    shard = "model-00002-of-00002.safetensors"
    touched = [t.index for t in plan if any(
        ref.file == shard for m in t.modules for ref in ckpt.modules[m].tensors.values())]
    assert 0 < len(touched) < len(plan)

    def resume() -> tuple[list[int], Report]:
        ran = _counting(monkeypatch)
        report = validate(folder, replace(opts, resume=saved))
        monkeypatch.undo()
        monkeypatch.setattr(tasks, "TASK_BYTES", 1 << 16)
        return ran, report

    ran, report = resume()
    assert ran == [] and _without_keys(report) == _without_keys(first)  # all reused
    _rewrite(folder / shard)
    ran, report = resume()
    assert ran == touched and _without_keys(report) == _without_keys(first)
    index = json.loads((source / "model.safetensors.index.json").read_text())["weight_map"]
    reads = {t.index for t in plan if any(index.get(f"{m}.weight") == shard for m in t.modules)}
    _rewrite(source / shard)  # a source shard: the tasks that can read it, not every task
    ran, report = resume()
    assert reads <= set(ran) and len(ran) < len(plan), (sorted(reads), ran)
    assert _without_keys(report) == _without_keys(first)
    _rewrite(source / "config.json")
    ran, report = resume()
    assert ran == [t.index for t in plan]
    assert [f.check.id for f in report.findings if f not in first.findings] == [
        "RESUME_UNUSABLE"]


def _without_keys(report: Report) -> str:
    """The JSON report without timings and task keys (they hash the files' mtimes)."""
    data = json.loads(_without_timings(_json(report)))
    for rec in data.get("tasks", []):
        rec.pop("key")
    return json.dumps(data, indent=2)


def _rewrite(path: Path) -> None:
    """Write ``path`` again with the same bytes, as a re-download would: a new mtime."""
    st = path.stat()
    path.write_bytes(path.read_bytes())
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def test_a_relative_source_is_the_one_the_driver_meant_wherever_a_task_runs(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, small_tasks: None) -> None:
    """A worker (a Ray worker on another node) runs in a working directory of its own: the
    tasks name ``--source`` as the driver resolved it."""
    elsewhere = tmp_path / "worker-cwd"
    elsewhere.mkdir()

    class Elsewhere:
        """Runs each task as a fresh worker would: no loaded checkpoint, another cwd."""

        def map(self, fn: Any, items: list[tasks.Task]) -> Any:
            for i, task in enumerate(items):
                lent = dict(tasks._HELD)
                tasks._HELD.clear()
                monkeypatch.chdir(elsewhere)
                try:
                    yield Outcome(i, fn(task))
                finally:
                    monkeypatch.chdir(SRC.parent)
                    tasks._HELD.clear()
                    tasks._HELD.update(lent)

    monkeypatch.chdir(SRC.parent)
    opts = Options(level=Level.FULL, source=Path(SRC.name), workers=1)
    here = validate(RESUMED, opts)
    assert here.reproduction is not None and exit_code(here) == 0
    there = validate(RESUMED, opts, executor=Elsewhere())
    assert _without_timings(_json(there)) == _without_timings(_json(here))


def test_a_worker_prepares_again_when_the_run_s_files_changed(tmp_path: Path) -> None:
    """A long-lived worker keeps the reader and the prepared ``--source`` of a run for the
    next run of the same folder only while the files it prepared them from are as the driver
    saw them: a config.json or a source written again is prepared again."""
    folder, source = tmp_path / "ckpt", tmp_path / "src"
    shutil.copytree(RESUMED, folder)
    shutil.copytree(SRC, source)
    root, opts = str(folder.resolve()), Options(level=Level.FULL, source=source)
    tasks._HELD.clear()

    def serve() -> object:
        """A run: the driver plans, the worker (this process, nothing lent) runs task 0."""
        ckpt = load(root, opts).ckpt
        assert ckpt is not None
        tasks.run_task(tasks.plan(root, ckpt, opts)[0])
        [held] = tasks._HELD.values()
        return held

    first = serve()
    assert serve() is first  # unchanged: the worker's reader and source serve the next run
    for changed in (folder / "config.json", source / "config.json"):
        _rewrite(changed)
        assert serve() is not first
        first = serve()
    tasks._HELD.clear()


def test_a_plan_is_of_the_checkpoint_it_is_given(tmp_path: Path) -> None:
    """The plan stamps its tasks and cuts their inventories from the checkpoint it is given,
    never from another entry this process holds for the same root (a run whose shards were
    written again since)."""
    folder = tmp_path / "ckpt"
    shutil.copytree(RESUMED, folder)
    root, opts = str(folder.resolve()), Options(level=Level.FULL)
    old = load(root, opts).ckpt
    assert old is not None
    before = tasks._Stamper(old, None)
    with tasks.remembered(root, opts, old):
        for shard in folder.glob("*.safetensors"):
            _rewrite(shard)
        new = load(root, opts).ckpt
        assert new is not None
        [task, *_] = tasks.plan(root, new, opts)
    assert task.stamp == tasks._Stamper(new, None)(task.modules) != before(task.modules)
    assert task.inventory is not None
    assert all(ref == new.tensors[ref.name] for ref in task.inventory.tensors)


def test_an_interrupt_in_the_checks_after_the_tasks_keeps_them_for_resume(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, small_tasks: None) -> None:
    """The checks that run after the tasks can take long (``--manifest`` hashes every
    shard): an interrupt there still gives a report whose tasks a resumed run reuses."""
    from mxformats.validate import deployment

    opts = {"level": Level.FULL, "workers": 1}
    full = validate(RESUMED, Options(**opts))

    def interrupted(*args: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "CHECK_MODULES", tuple(  # the runner runs the records
        replace(c, run=interrupted) if c is deployment.CHECK else c
        for c in runner.CHECK_MODULES))
    try:
        partial = validate(RESUMED, Options(**opts))
    except KeyboardInterrupt:  # would end pytest itself, not fail this test
        pytest.fail("the interrupt left validate() without a report")
    assert partial.incomplete and partial.fatal is not None and exit_code(partial) == 2
    assert len(partial.tasks) == len(full.tasks) > 1
    saved = tmp_path / "partial.json"
    saved.write_text(_json(partial))
    monkeypatch.undo()
    monkeypatch.setattr(tasks, "TASK_BYTES", 1 << 16)
    ran = _counting(monkeypatch)
    resumed = validate(RESUMED, Options(**opts, resume=saved))
    assert ran == [] and _without_timings(_json(resumed)) == _without_timings(_json(full))
