"""The ``ray`` executor: the validator's tasks as Ray tasks on a cluster (``mxformats[ray]``).

:class:`RayExecutor` keeps the contract of :mod:`mxformats.validate.executors`; Ray does the
scheduling, the retries and the bookkeeping, this module only maps Ray's answers onto
:class:`~mxformats.validate.executors.Outcome`:

- every item runs as one Ray task of the wrapper ``_run_attempt`` (the function goes into
  the object store once, each task gets a reference to it), one CPU each, placed by Ray,
  with :data:`~mxformats.fast.chunks.THREADS_VARIABLE` set to 1 in its environment (as in the
  local pool's processes): its fast paths use its one CPU, where they would otherwise start
  a thread per CPU of the node in each of the node's workers;
- a worker process that dies (killed, out of memory, its node lost) is retried by Ray:
  ``max_retries=max_attempts - 1`` ("Maximum number of times to rerun the function when the
  worker crashes unexpectedly"). When Ray gives up, ``ray.get`` raises
  ``ray.exceptions.WorkerCrashedError`` (``OutOfMemoryError``, ``NodeDiedError`` for an
  out-of-memory kill or a lost node): the outcome is an ``error`` naming it and saying the
  worker died on each of ``max_attempts`` attempts, ``attempts=max_attempts``. Any other
  ``RayError`` (e.g. ``TaskUnschedulableError``, which Ray does not retry) is the error as
  Ray words it, ``attempts=1``;
- an exception the function raises is not retried (``retry_exceptions=False``: the tasks are
  deterministic) and comes back as ``RayTaskError`` whose ``cause`` carries
  ``"TypeName: message"`` and the attempt it happened on;
- at most ``2 * workers`` tasks are in flight; ``ray.wait`` yields each outcome as its task
  finishes, and the next item is submitted then, so memory holds a bounded number of results
  whatever the number of items;
- an item Ray cannot serialise never runs: its outcome is that error, ``attempts=0``;
- the caller orders outcomes by ``index``; this module never sorts.

``attempts``: a task that returned or raised reports the attempt it ran on, read in the worker
from Ray's core worker (``get_current_task_attempt_number``, 0 for the first run; Ray has no
public accessor for it, so this reads a private one, and reports 1 should a Ray release drop
it). A task Ray gave up on reports ``max_attempts``: exact for a dying worker, which Ray retries
exactly ``max_retries`` times; Ray does not report the count it used to the caller, so for a
task its memory monitor killed (retried on a budget of its own, ``RAY_task_oom_retries``) it
is the configured bound, and for other Ray errors the count is not known (reported as 1).

Connecting: ``address`` None or ``"local"`` starts a Ray instance on this machine for the life
of the process (Ray shuts it down at exit); ``"auto"`` joins the cluster this machine belongs
to (``ray start`` or ``RAY_ADDRESS``), ``"HOST:PORT"`` the cluster whose head (GCS) listens
there (checked first: ConnectionError when nothing answers within ``CONNECT_TIMEOUT_S``, where
``ray.init`` would retry for minutes). When Ray is already initialised in this process (a
notebook, a test fixture, a caller that configured it), that connection is used as it is and
``address`` is not consulted.
When this module initialises Ray it logs Ray's own messages from WARNING up and does not
forward the workers' stdout/stderr (``log_to_driver=False``; they stay in the session's
``logs/worker-*.out``); a task's failure still comes back as its outcome, and Ray's progress
views (the dashboard, ``ray status``, ``ray list tasks`` with ``ray[default]``) are untouched.

Ray is imported when a :class:`RayExecutor` is made (ImportError naming ``mxformats[ray]``
when it is missing), never by ``import mxformats`` or by importing this module.

Sources (Ray 2.60.0, the version constraints.txt pins):

- Task fault tolerance, https://docs.ray.io/en/latest/ray-core/fault_tolerance/tasks.html:
  application exceptions become ``RayTaskError`` with the original in ``cause``; worker
  deaths are retried ``max_retries`` times (default 3); ``retry_exceptions`` opts
  application errors into retries (off here).
- ``ray.remote`` options, ``python/ray/_private/worker.py`` (``max_retries``,
  ``retry_exceptions``), and ``ray.wait``,
  https://docs.ray.io/en/latest/ray-core/api/doc/ray.wait.html.
- Exceptions, ``python/ray/exceptions.py``: ``RayTaskError.cause``, ``WorkerCrashedError``,
  ``OutOfMemoryError``, ``NodeDiedError``, ``TaskUnschedulableError``.
"""

from __future__ import annotations

import importlib
import logging
import socket
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any, TypeVar

from mxformats.fast import THREADS_VARIABLE

from .base import DEFAULT_MAX_ATTEMPTS, Outcome

__all__ = ["RayExecutor"]

T = TypeVar("T")
R = TypeVar("R")

#: Tasks submitted per worker before the first finishes: enough to keep every worker busy
#: between a result and the next submission, few enough to bound what the driver holds.
IN_FLIGHT_PER_WORKER = 2

#: What ``ray.get`` raises once Ray has used up ``max_retries`` on a task whose worker died
#: (names in ``ray.exceptions``).
WORKER_DEATHS = ("WorkerCrashedError", "OutOfMemoryError", "NodeDiedError")


def _import_ray() -> ModuleType:
    """``ray``, imported on first use; ImportError naming the extra when it is not installed."""
    try:
        importlib.import_module("ray.exceptions")  # ray.exceptions before its use in _outcome
        return importlib.import_module("ray")
    except ImportError as exc:
        hint = "the ray executor needs Ray: pip install 'mxformats[ray]'"
        raise ImportError(f"{hint} ({exc})") from exc


class TaskRaised(Exception):
    """What the wrapper raises, in the worker, in place of the function's own exception.

    It carries the ``"TypeName: message"`` text and the attempt number across the process
    boundary in a form that always pickles (the function's exception may not)."""

    def __init__(self, error: str, attempt: int) -> None:
        super().__init__(error, attempt)
        self.error = error
        self.attempt = attempt


def _attempt_number() -> int:
    """The attempt the running Ray task is on, 1 for its first run.

    Ray counts attempts in the task spec (``attempt_number``, 0-based) and exposes the running
    task's only through the core worker (``CoreWorker.get_current_task_attempt_number`` in
    ``python/ray/_raylet.pyx``); no public API returns it. 1 if a Ray release drops it.
    """
    try:
        from ray._private.worker import global_worker

        return int(global_worker.core_worker.get_current_task_attempt_number()) + 1
    except (ImportError, AttributeError):
        return 1


def _run_attempt(fn: Callable[[Any], Any], item: Any) -> tuple[int, Any]:
    """Run ``fn(item)`` in a Ray worker; return (attempt, value) or raise :class:`TaskRaised`."""
    attempt = _attempt_number()
    try:
        return attempt, fn(item)
    except Exception as exc:
        raise TaskRaised(f"{type(exc).__name__}: {exc}", attempt) from None


#: Seconds to wait for a TCP connection to an explicit ``HOST:PORT`` before calling it
#: unreachable (``ray.init`` itself retries an unreachable head for minutes, silently).
CONNECT_TIMEOUT_S = 10.0


def _check_reachable(address: str) -> None:
    """ConnectionError unless something accepts a TCP connection at ``HOST:PORT``."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"a Ray address is auto, local or HOST:PORT, not {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise ConnectionError(f"no Ray cluster answers at {address}: {exc}") from exc


def _connect(ray: ModuleType, address: str | None) -> None:
    """Initialise Ray for ``address`` unless this process already is (then reuse it)."""
    if ray.is_initialized():
        return
    if address not in (None, "local", "auto"):
        _check_reachable(address)
    ray.init(
        address=None if address == "local" else address,
        logging_level=logging.WARNING,
        log_to_driver=False,
    )


class RayExecutor:
    """Runs each item as a Ray task; see the module docstring for the mapping onto Outcome.

    ``workers`` defaults to the cluster's CPUs when the executor is made (tasks take one CPU
    each; a cluster that grows later is used by Ray, but the in-flight bound stays).
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        workers: int | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        gpus_per_task: int = 0,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, not {max_attempts}")
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        ray = _import_ray()
        _connect(ray, address)
        if workers is None:
            cpus = int(ray.cluster_resources().get("CPU", 0))
            if cpus < 1:
                raise ValueError("the Ray cluster has no CPU to run tasks on")
            workers = cpus
        self.workers = workers
        self.max_attempts = max_attempts
        #: ``--device cuda``: each task asks Ray for one GPU (Ray then sets the task's
        #: ``CUDA_VISIBLE_DEVICES`` to it, so its ``cuda`` is that device)
        self.gpus_per_task = gpus_per_task
        self._ray = ray
        self._remote = ray.remote(_run_attempt)

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[Outcome[R]]:
        """Run ``fn`` on each item as a Ray task; yield each :class:`Outcome` as it finishes.

        Tasks still running when the caller stops iterating are cancelled.
        """
        task = self._remote.options(
            name=getattr(fn, "__qualname__", "task"),  # what Ray's task views and logs show
            num_cpus=1,
            num_gpus=self.gpus_per_task,
            runtime_env={"env_vars": {THREADS_VARIABLE: "1"}},
            max_retries=self.max_attempts - 1,
            retry_exceptions=False,
        )
        ray = self._ray
        fn_ref = ray.put(fn)
        index_of: dict[Any, int] = {}
        next_index = 0
        try:
            while next_index < len(items) or index_of:
                while next_index < len(items) and len(index_of) < (
                    IN_FLIGHT_PER_WORKER * self.workers
                ):
                    index, next_index = next_index, next_index + 1
                    try:
                        index_of[task.remote(fn_ref, items[index])] = index
                    except Exception as exc:  # the item does not serialise: it never runs
                        reason = str(exc).partition("\n")[0]  # Ray appends a long report
                        error = f"{type(exc).__name__}: {reason}"
                        yield Outcome(index=index, error=error, attempts=0)
                if not index_of:
                    continue
                [done], _ = ray.wait(list(index_of), num_returns=1)
                yield self._outcome(index_of.pop(done), done)
        finally:
            for ref in index_of:
                ray.cancel(ref)

    def _outcome(self, index: int, ref: Any) -> Outcome[R]:
        """The outcome of the finished task ``ref``."""
        errors = self._ray.exceptions
        try:
            attempt, value = self._ray.get(ref)
        except errors.RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, TaskRaised):
                return Outcome(index=index, error=cause.error, attempts=cause.attempt)
            return Outcome(index=index, error=f"{type(cause).__name__}: {cause}")
        except tuple(getattr(errors, name) for name in WORKER_DEATHS) as exc:
            return Outcome(
                index=index,
                error=f"{type(exc).__name__}: the worker died on each of {self.max_attempts} "
                f"attempts; the last: {exc}",
                attempts=self.max_attempts,
            )
        except errors.RayError as exc:  # not retried by Ray (unschedulable, ...)
            return Outcome(index=index, error=f"{type(exc).__name__}: {exc}")
        return Outcome(index=index, value=value, attempts=attempt)
