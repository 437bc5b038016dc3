"""The check modules in run order, as records (:class:`.checkmodule.CheckModule`).

``files`` comes first: it loads the checkpoint (:func:`~mxformats.validate.files.load`), which
every other module checks. The runner (:mod:`~mxformats.validate.runner`) and the tasks
(:mod:`~mxformats.validate.tasks`) loop over these records; a new check module is one more
entry here.
"""

from __future__ import annotations

from . import coverage, deployment, files, layout, manifest, numbers, reproduce
from .checkmodule import CheckModule, PerModule

__all__ = ["CHECK_MODULES", "PER_MODULE"]

#: The check modules in run order (``files`` loads; the runner runs the others).
CHECK_MODULES: tuple[CheckModule, ...] = (
    files.CHECK, coverage.CHECK, layout.CHECK, numbers.CHECK, reproduce.CHECK, manifest.CHECK,
    deployment.CHECK,
)
#: The per-module work of the check modules, in run order: what a task runs on each module.
PER_MODULE: tuple[PerModule, ...] = tuple(
    c.per_module for c in CHECK_MODULES if c.per_module is not None)
