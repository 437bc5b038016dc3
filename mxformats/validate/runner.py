"""Run the check modules over a checkpoint and collect a :class:`Report`.

Check modules are imported by name (:data:`CHECK_MODULES`); the optional ones (``numbers``,
``reproduce``, ``manifest``, ``deployment``) run when present. Any exception a check raises
becomes an ``INTERNAL_ERROR`` finding: the validator never ends in a traceback.

:attr:`Report.modules_run` names only the modules whose checks really ran under the options
(``reproduce`` needs ``--source``, ``manifest`` ``--manifest``, ``deployment`` a target or a
parallel size, ``numbers`` a verified format at level ``scales`` or above), so a report never
counts a check that was not run as passed.
"""

from __future__ import annotations

import importlib
import os
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from .findings import CHECKS, LEVELS, Check, Finding, Level, Severity, declare
from .model import Checkpoint, Format, Module, Options
from .reader import NotAFolder, ReadFailed, open_reader

__all__ = [
    "CHECK_MODULES",
    "CONFIRM_BYTES",
    "INTERNAL_ERROR",
    "Report",
    "exit_code",
    "for_each_module",
    "planned_bytes",
    "validate",
]

CHECK_MODULES = ("files", "coverage", "layout", "numbers", "reproduce", "manifest", "deployment")
_OPTIONAL = {"numbers", "reproduce", "manifest", "deployment"}
#: The check group each module declares, where the two names differ.
_MODULE_OF_GROUP = {"reproduction": "reproduce"}


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

INTERNAL_ERROR = declare(
    "INTERNAL_ERROR",
    Severity.ERROR,
    Level.STRUCTURE,
    "internal",
    "A check raised an unexpected exception (the checkpoint may be malformed in a way it did not "
    "anticipate); the other checks still ran.",
    "Report it with the message; inspect the named tensor by hand.",
)


def _now() -> str:
    """The current UTC time as JUnit's ``timestamp`` wants it (ISO 8601, no zone)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


@dataclass
class Report:
    """The outcome of one run.

    ``modules_run``: the check modules whose checks ran (see the module docstring);
    ``level``: the ``--level`` of the run; ``started``: UTC start time (ISO 8601);
    ``excluded``: the check IDs ``--select``/``--ignore`` left out (:meth:`restrict`)."""

    root: str
    format: str
    format_detail: str
    findings: list[Finding] = field(default_factory=list)
    fatal: str | None = None
    reproduction: dict[str, Any] | None = None
    modules_run: list[str] = field(default_factory=list)
    seconds: float = 0.0
    ckpt: Checkpoint | None = field(default=None, repr=False)
    level: Level = Level.STRUCTURE
    started: str = field(default_factory=_now)
    excluded: frozenset[str] = frozenset()

    def ran(self, check: Check) -> bool:
        """Whether ``check`` was run: its module ran and the run's level reaches its level
        (``internal`` always runs)."""
        if check.id in self.excluded:
            return False
        module = _MODULE_OF_GROUP.get(check.group, check.group)
        return (module == "internal" or module in self.modules_run) and (
            LEVELS.index(check.level) <= LEVELS.index(self.level)
        )

    def restrict(self, select: frozenset[str] = frozenset(),
                 ignore: frozenset[str] = frozenset()) -> None:
        """Keep only the findings of the check IDs in ``select`` (all when it is empty) and not in
        ``ignore`` (``--select``/``--ignore``); a check left out no longer counts as run."""
        self.excluded = frozenset(
            cid for cid in CHECKS if (select and cid not in select) or cid in ignore)
        self.findings = [f for f in self.findings if f.check.id not in self.excluded]

    def count(self, severity: Severity) -> int:
        return sum(f.effective_severity == severity for f in self.findings)

    @property
    def ok(self) -> bool:
        return self.fatal is None and self.count(Severity.ERROR) == 0


def exit_code(report: Report, strict: bool = False) -> int:
    """0: no errors (warnings allowed unless ``strict``); 1: errors found; 2: could not run."""
    if report.fatal is not None:
        return 2
    if report.count(Severity.ERROR) or (strict and report.count(Severity.WARNING)):
        return 1
    return 0


def _internal(where: str, exc: BaseException, tensor: str | None = None) -> Finding:
    tb = traceback.extract_tb(exc.__traceback__)
    at = f" at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno}" if tb else ""
    return Finding(INTERNAL_ERROR, f"{where}: {type(exc).__name__}: {exc}{at}", tensor=tensor)


def _guarded(name: str, findings: Iterable[Finding]) -> Iterator[Finding]:
    it = iter(findings)
    while True:
        try:
            f = next(it)
        except StopIteration:
            return
        except Exception as exc:
            yield _internal(f"check module {name}", exc)
            return
        yield f


def for_each_module(
    ckpt: Checkpoint,
    opts: Options,
    fn: Callable[[Module], Iterable[Finding]],
    modules: Iterable[Module] | None = None,
) -> Iterator[Finding]:
    """Run ``fn`` on each module (default: all), over ``opts.workers`` threads; findings come
    back in module order. An exception in ``fn`` becomes an INTERNAL_ERROR for that module."""
    mods = list(ckpt.modules.values() if modules is None else modules)

    def one(mod: Module) -> list[Finding]:
        try:
            return list(fn(mod))
        except Exception as exc:
            return [_internal(f"module {mod.name}", exc, tensor=mod.name)]

    if opts.workers <= 1 or len(mods) < 2:
        for mod in mods:
            yield from one(mod)
        return
    with ThreadPoolExecutor(max_workers=opts.workers) as pool:
        for found in pool.map(one, mods):
            yield from found


#: ``--level full`` on a remote checkpoint reads more than this only with ``--yes``.
CONFIRM_BYTES = 10 * 10**9


def planned_bytes(ckpt: Checkpoint, opts: Options) -> int:
    """The tensor bytes the run's level reads: ``full`` every tensor, ``scales`` the scale
    tensors of the quantized modules, ``structure`` none (headers only)."""
    if not ckpt.numeric or not opts.at_least(Level.SCALES):
        return 0
    if opts.at_least(Level.FULL):
        return sum(t.nbytes for t in ckpt.tensors.values())
    return sum(t.nbytes for m in ckpt.modules.values() if m.quantized
               for p, t in m.tensors.items() if p.endswith("_scale") or p.endswith("_scale_2"))


def _read_failures(ckpt: Checkpoint) -> Iterator[Finding]:
    """One finding per file whose tensor reads failed (the first failure, and how many
    more); reads not even attempted because the server had stopped answering are counted in
    the finding of the failure that stopped it."""
    from .files import read_failed

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


def validate(
    root: str | os.PathLike[str],
    opts: Options,
    on_read: Callable[[int], None] | None = None,
    on_plan: Callable[[int], None] | None = None,
) -> Report:
    """Validate the checkpoint ``root``: a folder or ``hf://ORG/NAME[@REVISION]``.

    ``on_plan`` is called once the headers are read with the tensor bytes the level will
    read (:func:`planned_bytes`), ``on_read`` with the byte count of every read. A remote
    ``--level full`` of more than :data:`CONFIRM_BYTES` stops (exit 2) unless ``opts.yes``."""
    from . import files

    start = time.perf_counter()
    try:
        reader = open_reader(root, opts.allow_symlink_root)
        loaded = files.load(reader, opts)
    except NotAFolder as exc:
        report = Report(os.fspath(root), "unknown", "", fatal=str(exc), level=opts.level)
        report.seconds = time.perf_counter() - start
        return report
    except Exception as exc:
        report = Report(os.fspath(root), "unknown", "", [_internal("loading", exc)],
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
    )
    report.modules_run.append("files")
    if ckpt is None or loaded.fatal is not None or ckpt.format == Format.UNSUPPORTED:
        report.seconds = time.perf_counter() - start
        return report
    ckpt.on_read = on_read
    need = planned_bytes(ckpt, opts)
    if on_plan is not None:
        on_plan(need)
    if reader.remote and opts.at_least(Level.FULL) and need > CONFIRM_BYTES and not opts.yes:
        report.fatal = (f"--level full reads {need:,} bytes ({need / 1e9:.1f} GB) from "
                        f"{reader.name}; pass --yes to read them")
        report.seconds = time.perf_counter() - start
        return report
    for name in CHECK_MODULES[1:]:
        try:
            module = importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as exc:
            if name in _OPTIONAL and exc.name == f"{__package__}.{name}":
                continue
            report.findings.append(_internal(f"importing check module {name}", exc))
            continue
        except Exception as exc:
            report.findings.append(_internal(f"importing check module {name}", exc))
            continue
        run = getattr(module, "run", None)
        if run is None:
            continue
        if _applies(name, ckpt, opts):
            report.modules_run.append(name)
        try:
            produced = run(ckpt, opts)
        except Exception as exc:
            report.findings.append(_internal(f"check module {name}", exc))
            continue
        report.findings.extend(_guarded(name, produced or ()))
    report.findings.extend(_read_failures(ckpt))
    for f in report.findings:
        block = f.extra.get("reproduction")
        if isinstance(block, dict):
            report.reproduction = block
            break
    report.seconds = time.perf_counter() - start
    return report
