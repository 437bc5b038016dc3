"""The :class:`Report` of a run and its renderings: console, JSON (versioned), JUnit XML,
GitHub Actions annotations.

Names and paths come from the checkpoint, which may be hostile: every text taken from it is
printed through :func:`printable`, so a tensor name holding an escape sequence, an OSC title,
a newline or rich markup (``[bold]``, ``[/]``, ``:emoji:``) is shown, never interpreted, and
the JUnit XML stays well-formed whatever the name holds (NUL and lone surrogates included).
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import IO, TYPE_CHECKING, Any

from mxformats._version import __version__
from mxformats.output import (
    SEVERITY_STYLES,
    check_url,
    github_annotation,
    make_console,
    printable,
)

from .findings import CHECKS, LEVELS, Check, Finding, Level, Severity
from .readers import HUB_PREFIX

if TYPE_CHECKING:
    from rich.console import Console

    from .model import Checkpoint

# printable is defined in mxformats.output (the ground floor); it stays a name of this
# documented module, where it was defined until the import graph was layered (issue 25).
__all__ = ["SCHEMA_VERSION", "Report", "exit_code", "print_report", "printable", "to_github",
           "to_json", "to_junit"]

#: Bumped when a key of the JSON report changes meaning or disappears. 2 — the reproduction
#: block's ``per_tensor`` is ``per_module`` (it always held one entry per module).
SCHEMA_VERSION = 3

#: The check group each module declares, where the two names differ.
_MODULE_OF_GROUP = {"reproduction": "reproduce"}


def _now() -> str:
    """The current UTC time as JUnit's ``timestamp`` wants it (ISO 8601, no zone)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


@dataclass
class Report:
    """The outcome of one run.

    ``modules_run``: the check modules whose checks ran (see the module docstring);
    ``level``: the ``--level`` of the run; ``started``: UTC start time (ISO 8601);
    ``excluded``: the check IDs ``--select``/``--ignore`` left out (:meth:`restrict`);
    ``strict``: ``--strict``, under which a warning fails the run as an error does (the
    verdict, ``ok`` and the exit code agree)."""

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
    #: the run was interrupted: only some tasks finished (``fatal`` says so)
    incomplete: bool = False
    #: each finished task's record (:func:`mxformats.validate.resume.record`): what
    #: ``--resume`` reuses
    tasks: list[dict[str, Any]] = field(default_factory=list)
    strict: bool = False

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
        ``ignore`` (``--select``/``--ignore``); a check left out no longer counts as run. When
        they leave no check of the checkpoint that this run ran, the run checked nothing: it
        becomes ``fatal`` (exit 2, never OK)."""
        self.excluded = frozenset(
            cid for cid in CHECKS if (select and cid not in select) or cid in ignore)
        self.findings = [f for f in self.findings if f.check.id not in self.excluded]
        if (select or ignore) and self.fatal is None and not self.checked_anything():
            self.fatal = (f"nothing was checked: none of the checks --select/--ignore keep runs "
                          f"at --level {self.level.value} with these options (the checks of "
                          "--source, --manifest and --target/--tp/--ep run only with them)")

    def checked_anything(self) -> bool:
        """Whether a check of the checkpoint ran (:meth:`ran`); the ``internal`` checks
        (the validator's own failures) check nothing of it. A run that checked nothing is
        never OK."""
        return any(self.ran(c) for c in CHECKS.values() if c.group != "internal")

    def count(self, severity: Severity) -> int:
        return sum(f.effective_severity == severity for f in self.findings)

    @property
    def failing(self) -> tuple[Severity, ...]:
        """The severities that fail the run: errors, and warnings under ``strict``."""
        return (Severity.ERROR, Severity.WARNING) if self.strict else (Severity.ERROR,)

    @property
    def ok(self) -> bool:
        """The run passed: it could run, found no error, and no warning under ``strict``."""
        return self.fatal is None and not any(self.count(s) for s in self.failing)


def exit_code(report: Report, strict: bool = False) -> int:
    """0: no errors (warnings allowed unless ``strict`` or ``report.strict``); 1: errors
    found; 2: could not run."""
    if report.fatal is not None:
        return 2
    if not report.ok or (strict and report.count(Severity.WARNING)):
        return 1
    return 0


_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def _remote(report: Report) -> str | None:
    """``hf://ORG/NAME@SHA`` when the report is of a Hub repo (its findings' files are named
    under it), else None (a local finding names the file relative to the folder)."""
    return report.root if report.root.startswith(HUB_PREFIX) else None


def _where(f: Finding, remote: str | None = None) -> str:
    file = f"{remote}/{f.file}" if remote and f.file else f.file
    parts = [p for p in (file, f.tensor) if p]
    if f.offset is not None:
        parts.append(f"byte {f.offset}")
    return printable(", ".join(parts))


def _line(f: Finding, remote: str | None = None) -> str:
    """One finding on one line: ``where: message``, escaped."""
    where = _where(f, remote)
    return f"{where + ': ' if where else ''}{printable(f.message)}"


def to_json(report: Report) -> dict[str, Any]:
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool_version": __version__,
        "checkpoint": report.root,
        "ok": report.ok,
        "format": report.format,
        "format_detail": report.format_detail,
        "fatal": report.fatal,
        "summary": {s.value: report.count(s) for s in Severity},
        "findings": [f.to_json() for f in report.findings],
    }
    if report.reproduction is not None:
        out["reproduction"] = report.reproduction
    if report.incomplete:
        out["incomplete"] = True
    if report.tasks:
        out["tasks"] = report.tasks
    return out


def to_junit(report: Report) -> str:
    """JUnit XML: one testcase per catalogued check the run really ran
    (:meth:`Report.ran`), failing when it produced a finding that fails the run
    (:attr:`Report.failing`: an error, or under ``--strict`` a warning, a failure with type
    ``warning``), so the suite fails exactly when the exit code does; the other findings are
    the testcase's ``system-out`` (warnings prefixed ``warning:``). A run that could not go on
    (``fatal``) lists only the checks that found something and a ``RUN`` testcase in error:
    nothing else ran, so nothing else passed. Every text is escaped (:func:`printable`);
    ``timestamp`` is the UTC start."""
    by_check: dict[str, list[Finding]] = defaultdict(list)
    for f in report.findings:
        by_check[f.check.id].append(f)
    suite = ET.Element(
        "testsuite",
        name="mxformats validate",
        timestamp=report.started,
        time=f"{report.seconds:.3f}",
    )
    failures = 0
    cases = 0
    remote = _remote(report)
    for check in CHECKS.values():
        found = by_check.get(check.id, [])
        if not found and (report.fatal is not None or not report.ran(check)):
            continue
        cases += 1
        case = ET.SubElement(suite, "testcase", classname=f"validate.{check.group}", name=check.id)
        bad = [f for f in found if f.effective_severity in report.failing]
        if bad:
            failures += 1
            sev = min((f.effective_severity for f in bad), key=_ORDER.__getitem__)
            el = ET.SubElement(
                case, "failure", type=sev.value, message=f"{len(bad)} finding(s): {check.meaning}"
            )
            el.text = "\n".join(f"{f.effective_severity.value}: {_line(f, remote)}"
                                for f in bad)
        passing = [f for f in found if f.effective_severity not in report.failing]
        if passing:
            out = ET.SubElement(case, "system-out")
            out.text = "\n".join(
                ("warning: " if f.effective_severity is Severity.WARNING else "")
                + _line(f, remote) for f in passing)
    if report.fatal is not None:
        cases += 1
        case = ET.SubElement(suite, "testcase", classname="validate", name="RUN")
        ET.SubElement(case, "error", message=printable(report.fatal))
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    suite.set("errors", "1" if report.fatal else "0")
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)


def to_github(report: Report) -> str:
    """GitHub Actions annotations: one per error and warning (``file`` is the shard's path,
    ``title`` the check ID), infos as one notice per check, then a notice with the verdict."""
    lines = []
    infos: dict[str, int] = defaultdict(int)
    for f in report.findings:
        sev = f.effective_severity
        if sev == Severity.INFO:
            infos[f.check.id] += 1
            continue
        path = os.path.join(report.root, f.file) if f.file else None
        lines.append(github_annotation(
            sev.value, f"{_line(f, _remote(report))} (fix: {f.check.fix})", title=f.check.id,
            file=printable(path) if path else None))
    lines += [github_annotation("notice", f"{n} finding(s): {CHECKS[cid].meaning}", title=cid)
              for cid, n in infos.items()]
    lines.append(github_annotation("error" if not report.ok else "notice", _verdict(report)[1],
                                   title="mxformats validate"))
    return "\n".join(lines) + "\n"


def _verdict(report: Report) -> tuple[str, str]:
    """The verdict word and the one-line summary after it."""
    e, w, i = (report.count(s) for s in Severity)
    root = printable(report.root)
    if report.fatal:
        return "FAILED", f"{root}: cannot validate: {printable(report.fatal)}"
    return ("OK" if report.ok else "FAILED",
            f"{root}: {report.format}, {e} error(s), {w} warning(s), {i} info, "
            f"{report.seconds:.2f} s")


def print_report(report: Report, file: IO[str], *, quiet: bool = False,
                 console: Console | None = None) -> None:
    """Findings grouped by check, then a summary table and the verdict line. ``quiet``, or a
    run with no error and no warning: the verdict line alone (the infos are in the JSON).

    ``console`` (default: one on ``file`` coloured when it is a terminal) must interpret no
    markup and no emoji codes (:func:`mxformats.output.make_console`); styles come from rich
    ``Text`` spans around our own words only: errors red, warnings yellow."""
    from rich.table import Table
    from rich.text import Text

    console = console or make_console(file)
    root = printable(report.root)
    if report.fatal:
        console.print(Text.assemble(("cannot validate", "bold red"),
                                    f" {root}: {printable(report.fatal)}"))
        return
    head = f"{root}: {report.format}"
    if report.format_detail:
        head += f" ({printable(report.format_detail)})"
    by_check: dict[str, list[Finding]] = defaultdict(list)
    for f in report.findings:
        by_check[f.check.id].append(f)
    ordered = sorted(
        by_check.items(), key=lambda kv: (min(_ORDER[f.effective_severity] for f in kv[1]), kv[0])
    )
    bad = report.count(Severity.ERROR) + report.count(Severity.WARNING)
    if not quiet and bad:
        console.print(head)
        for cid, found in ordered:
            check = CHECKS[cid]
            title = f" ({check.group}, {len(found)}): {check.meaning}"
            console.print(Text.assemble("\n", (cid, "bold"), title))
            for f in found[:20]:
                sev = f.effective_severity.value
                console.print(Text.assemble("  ", (f"{sev:7}", SEVERITY_STYLES[sev]),
                                            f" {_line(f, _remote(report))}"))
            if len(found) > 20:
                console.print(f"  ... {len(found) - 20} more (see --format json)")
            if check.fix:
                console.print(f"  fix: {check.fix}")
            console.print(f"  docs: {check_url(cid)}")
        table = Table(title="summary")
        for col in ("check", "group", "severity", "count"):
            table.add_column(col)
        for cid, found in ordered:
            sev = min((f.effective_severity for f in found), key=_ORDER.__getitem__)
            table.add_row(cid, CHECKS[cid].group, Text(sev.value, SEVERITY_STYLES[sev.value]),
                          str(len(found)))
        console.print(table)
    word, summary = _verdict(report)
    console.print(Text.assemble((word, "bold green" if report.ok else "bold red"),
                                f" {summary}"))


def dump_json(report: Report, fp: IO[str]) -> None:
    json.dump(to_json(report), fp, indent=2)
    fp.write("\n")
