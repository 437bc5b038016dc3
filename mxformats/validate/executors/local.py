"""The ``local`` executor: a process pool on this machine (``--executor local``, the default).

Processes, not threads: the checks are numpy and Python in about equal parts, and threads
share one interpreter lock (``--workers`` over threads gave nothing past the first). Each pool
process runs one task at a time with the fast paths on one thread
(:data:`mxformats.fast.chunks.THREADS_VARIABLE` set to 1), so ``workers`` processes use
``workers`` cores.

Pool processes are started by the ``forkserver`` method: a fresh server process imports the
task code and the compiled passes (:mod:`mxformats.fast.preload`) once and forks each worker
from it, so a worker never inherits the driver's threads (the progress bar's) or locks, which
``fork`` from a threaded process may deadlock on
(https://docs.python.org/3/library/multiprocessing.html#contexts-and-start-methods).

A worker that dies (``BrokenProcessPool``: killed, out of memory) breaks the whole pool, and
Python cannot tell which task killed it; every task then in flight counts one attempt and is
retried alone, one at a time in a fresh one-process pool, so that a task that kills its
worker again is known for sure and the others go on; after ``max_attempts`` attempts its
outcome is an error. ``workers == 1`` runs every task in this process, without a pool.

With ``devices`` (``--device cuda`` on a machine with several GPUs), each pool process sees
one of them, in turn: its ``CUDA_VISIBLE_DEVICES`` (which ROCm's HIP honours too) is set
before it runs a task, so its ``cuda`` is that device.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from mxformats.fast import THREADS_VARIABLE

from .base import DEFAULT_MAX_ATTEMPTS, Outcome

__all__ = ["LocalExecutor"]

#: Imported once by the forkserver, so every worker starts with numba's passes imported.
PRELOAD = "mxformats.fast.preload"

T = TypeVar("T")
R = TypeVar("R")

#: The variable that gives a pool process its one GPU (CUDA's, which ROCm's HIP reads too).
VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


def _init_worker(devices: tuple[str, ...] = (), started: Any = None) -> None:
    """Pool process setup: one thread for the fast paths; SIGINT ignored (the driver, which
    the terminal also interrupts, ends the pool and writes the partial report); with
    ``devices``, the next of them in turn (``started``: a shared count of pool processes)."""
    os.environ[THREADS_VARIABLE] = "1"
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if devices:
        with started.get_lock():
            turn = started.value
            started.value += 1
        os.environ[VISIBLE_DEVICES] = devices[turn % len(devices)]


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _end(pool: ProcessPoolExecutor) -> None:
    """Stop ``pool`` without waiting for its running tasks (an interrupt, or tasks no longer
    wanted): cancel the queued ones and terminate the processes. ``_processes`` is the
    executor's own table of them (Python 3.14 adds ``terminate_workers`` for this)."""
    pool.shutdown(wait=False, cancel_futures=True)
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        if process.is_alive():
            process.terminate()


class LocalExecutor:
    """Runs tasks over ``workers`` processes of this machine (see the module docstring)."""

    name = "local"

    def __init__(self, workers: int | None = None,
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                 devices: tuple[str, ...] = ()) -> None:
        self.workers = max(1, workers if workers is not None else os.cpu_count() or 1)
        self.max_attempts = max(1, max_attempts)
        #: the GPU ids the pool processes take in turn (none: they see what this one sees)
        self.devices = devices

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[Outcome[R]]:
        """Run ``fn`` on each item; yield each item's :class:`Outcome` as it finishes."""
        if self.workers == 1:
            for index, item in enumerate(items):
                try:
                    yield Outcome(index, value=fn(item))
                except Exception as exc:
                    yield Outcome(index, error=_describe(exc))
            return
        attempts = [0] * len(items)
        todo: deque[int] = deque(range(len(items)))
        suspects: deque[int] = deque()
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([getattr(fn, "__module__", "__main__"), PRELOAD])
        started = context.Value("i", 0)
        while todo or suspects:
            alone = bool(suspects)
            queue = suspects if alone else todo
            width = 1 if alone else min(self.workers, len(queue))
            pool = ProcessPoolExecutor(width, mp_context=context, initializer=_init_worker,
                                       initargs=(self.devices, started))
            running: dict[Future[R], int] = {}
            died: list[int] = []
            try:
                while (queue or running) and not died:
                    while queue and len(running) < width:
                        index = queue.popleft()
                        attempts[index] += 1
                        running[pool.submit(fn, items[index])] = index
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in done:
                        index = running.pop(future)
                        try:
                            value = future.result()
                        except BrokenProcessPool:
                            died.append(index)
                        except Exception as exc:
                            yield Outcome(index, error=_describe(exc), attempts=attempts[index])
                        else:
                            yield Outcome(index, value=value, attempts=attempts[index])
                for future, index in running.items():  # the pool broke: what ran with it
                    if future.done() and not future.cancelled() and future.exception() is None:
                        yield Outcome(index, value=future.result(), attempts=attempts[index])
                    else:
                        died.append(index)
                for index in sorted(died):
                    if attempts[index] >= self.max_attempts:
                        yield Outcome(index, error=f"BrokenProcessPool: its worker process "
                                      f"died (killed or out of memory) on each of "
                                      f"{attempts[index]} attempts", attempts=attempts[index])
                    else:
                        suspects.append(index)
            finally:
                _end(pool)
