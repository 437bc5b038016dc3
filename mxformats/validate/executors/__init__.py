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

import importlib
from typing import TYPE_CHECKING

from ..device import gpu_device, visible_gpus
from .base import DEFAULT_MAX_ATTEMPTS, Executor, ExecutorUnavailable, Outcome

if TYPE_CHECKING:
    from ..model import Options

__all__ = ["DEFAULT_MAX_ATTEMPTS", "Executor", "ExecutorUnavailable", "Outcome", "executor_for"]


def executor_for(opts: Options) -> Executor:
    """The executor ``opts`` asks for: ``local`` (:class:`.local.LocalExecutor` over
    ``opts.workers`` processes; with ``--device cuda``, each its own GPU in turn) or
    ``ray`` (:class:`.ray.RayExecutor` at ``opts.ray_address``, imported only then; with
    ``--device cuda[:N]``, one GPU per task). :class:`ExecutorUnavailable` when Ray is asked
    for and not installed, or nothing answers at the address (the CLI's exit 2)."""
    if opts.executor == "ray":
        try:  # by name: the module imports Ray, an optional dependency
            ray_module = importlib.import_module(".ray", __name__)
            executor: Executor = ray_module.RayExecutor(
                address=opts.ray_address, workers=opts.workers,
                max_attempts=DEFAULT_MAX_ATTEMPTS, gpus_per_task=int(gpu_device(opts.device)))
        except ImportError as exc:
            raise ExecutorUnavailable(f"--executor ray needs Ray: pip install mxformats[ray] "
                                      f"({exc})") from exc
        except OSError as exc:  # ConnectionError: nothing answers at --ray-address
            raise ExecutorUnavailable(f"--executor ray: {exc}") from exc
        return executor
    if opts.executor != "local":
        raise ExecutorUnavailable(f"unknown executor {opts.executor!r} (local or ray)")
    from .local import LocalExecutor

    return LocalExecutor(workers=opts.workers, max_attempts=DEFAULT_MAX_ATTEMPTS,
                         devices=visible_gpus() if opts.device == "cuda" else ())
