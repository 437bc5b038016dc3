"""Run the check modules over a checkpoint and collect a :class:`Report`.

The check modules are :data:`CHECK_MODULES`, in run order. Any exception a check raises
becomes an ``INTERNAL_ERROR`` finding (:mod:`~mxformats.validate.parallel`): the validator
never ends in a traceback. :class:`Report` lives with its renderings in
:mod:`~mxformats.validate.report`.

:attr:`Report.modules_run` names only the modules whose checks really ran under the options
(``reproduce`` needs ``--source``, ``manifest`` ``--manifest``, ``deployment`` a target or a
parallel size, ``numbers`` a verified format at level ``scales`` or above), so a report never
counts a check that was not run as passed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType

from . import coverage, deployment, files, layout, manifest, numbers, reproduce
from .findings import Finding, Level
from .model import Checkpoint, CheckpointFormat, Options
from .parallel import INTERNAL_ERROR, for_each_module, internal
from .report import Report, exit_code

__all__ = ["CHECK_MODULES", "INTERNAL_ERROR", "Report", "exit_code", "for_each_module", "validate"]

#: The check modules in run order, by name (``files`` loads; the others expose ``run``).
CHECK_MODULES: dict[str, ModuleType] = {
    "files": files, "coverage": coverage, "layout": layout, "numbers": numbers,
    "reproduce": reproduce, "manifest": manifest, "deployment": deployment,
}


def _applies(module: str, ckpt: Checkpoint, opts: Options) -> bool:
    """Whether ``module``'s checks run under ``opts`` (each module's ``run`` returns at once
    otherwise)."""
    if module == "reproduce":
        return opts.source is not None
    if module == "manifest":
        return opts.manifest is not None
    if module == "deployment":
        return opts.target is not None or opts.tp is not None or opts.ep is not None
    if module == "numbers":
        return ckpt.numeric and opts.at_least(Level.SCALES)
    return True

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


def validate(
    root: str | os.PathLike[str], opts: Options, on_read: Callable[[int], None] | None = None
) -> Report:
    """Validate the checkpoint folder ``root``."""
    start = time.perf_counter()
    try:
        loaded = files.load(root, opts)
    except Exception as exc:
        report = Report(os.fspath(root), "unknown", "", [internal("loading", exc)],
                        level=opts.level)
        report.seconds = time.perf_counter() - start
        return report
    ckpt = loaded.ckpt
    report = Report(
        os.fspath(root),
        ckpt.format.value if ckpt else "unknown",
        ckpt.format_detail if ckpt else "",
        list(loaded.findings),
        loaded.fatal,
        ckpt=ckpt,
        level=opts.level,
    )
    report.modules_run.append("files")
    if ckpt is None or loaded.fatal is not None or ckpt.format == CheckpointFormat.UNSUPPORTED:
        report.seconds = time.perf_counter() - start
        return report
    ckpt.on_read = on_read
    for name, module in list(CHECK_MODULES.items())[1:]:
        if _applies(name, ckpt, opts):
            report.modules_run.append(name)
        try:
            produced = module.run(ckpt, opts)
        except Exception as exc:
            report.findings.append(internal(f"check module {name}", exc))
            continue
        report.findings.extend(_guarded(name, produced or ()))
    for f in report.findings:
        block = f.extra.get("reproduction")
        if isinstance(block, dict):
            report.reproduction = block
            break
    report.seconds = time.perf_counter() - start
    return report
