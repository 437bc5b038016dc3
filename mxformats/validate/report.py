"""Render a :class:`~mxformats.validate.runner.Report`: console, JSON (versioned), JUnit XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import defaultdict
from typing import IO, Any

from mxformats._version import __version__

from .findings import CHECKS, Finding, Severity
from .runner import Report

__all__ = ["SCHEMA_VERSION", "print_report", "to_json", "to_junit"]

#: Bumped when a key of the JSON report changes meaning or disappears.
SCHEMA_VERSION = 1

_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def _where(f: Finding) -> str:
    parts = [p for p in (f.file, f.tensor) if p]
    if f.offset is not None:
        parts.append(f"byte {f.offset}")
    return ", ".join(parts)


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
    return out


def to_junit(report: Report) -> str:
    """One testcase per catalogued check (those of the modules that ran), failing when it
    produced an error (or a warning: reported as failure with type ``warning``)."""
    by_check: dict[str, list[Finding]] = defaultdict(list)
    for f in report.findings:
        by_check[f.check.id].append(f)
    suite = ET.Element(
        "testsuite", name="mxformats validate", timestamp="", time=f"{report.seconds:.3f}"
    )
    failures = 0
    ran = set(report.modules_run) | {"internal"}
    group_module = {
        "numbers": "numbers",
        "reproduction": "reproduce",
        "manifest": "manifest",
        "deployment": "deployment",
    }
    cases = 0
    for check in CHECKS.values():
        module_ran = group_module.get(check.group, check.group) in ran
        if not module_ran and check.id not in by_check and check.group != "internal":
            continue
        cases += 1
        case = ET.SubElement(suite, "testcase", classname=f"validate.{check.group}", name=check.id)
        found = by_check.get(check.id, [])
        bad = [f for f in found if f.effective_severity in (Severity.ERROR, Severity.WARNING)]
        if bad:
            failures += 1
            sev = min((f.effective_severity for f in bad), key=_ORDER.__getitem__)
            el = ET.SubElement(
                case, "failure", type=sev.value, message=f"{len(bad)} finding(s): {check.meaning}"
            )
            el.text = "\n".join(
                f"{f.effective_severity.value}: {_where(f)}: {f.message}" for f in bad
            )
        infos = [f for f in found if f.effective_severity == Severity.INFO]
        if infos:
            out = ET.SubElement(case, "system-out")
            out.text = "\n".join(f"{_where(f)}: {f.message}" for f in infos)
    if report.fatal is not None:
        cases += 1
        case = ET.SubElement(suite, "testcase", classname="validate", name="RUN")
        ET.SubElement(case, "error", message=report.fatal)
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    suite.set("errors", "1" if report.fatal else "0")
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)


def print_report(report: Report, file: IO[str], *, quiet: bool = False) -> None:
    """Findings grouped by check, then a summary table (``quiet``: the summary line only)."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file, highlight=False, soft_wrap=True)
    head = f"{report.root}: {report.format}"
    if report.format_detail:
        head += f" ({report.format_detail})"
    if report.fatal:
        console.print(f"[bold red]cannot validate[/] {report.root}: {report.fatal}")
        return
    by_check: dict[str, list[Finding]] = defaultdict(list)
    for f in report.findings:
        by_check[f.check.id].append(f)
    ordered = sorted(
        by_check.items(), key=lambda kv: (min(_ORDER[f.effective_severity] for f in kv[1]), kv[0])
    )
    if not quiet:
        console.print(head, markup=False)
        for cid, found in ordered:
            check = CHECKS[cid]
            console.print(f"\n[bold]{cid}[/] ({check.group}, {len(found)}): {check.meaning}")
            for f in found[:20]:
                where = _where(f)
                console.print(
                    f"  {f.effective_severity.value:7} {where + ': ' if where else ''}{f.message}",
                    markup=False,
                )
            if len(found) > 20:
                console.print(f"  ... {len(found) - 20} more (see --json)")
            console.print(f"  fix: {check.fix}", markup=False)
        if ordered:
            table = Table(title="summary")
            for col in ("check", "group", "severity", "count"):
                table.add_column(col)
            for cid, found in ordered:
                sev = min((f.effective_severity for f in found), key=_ORDER.__getitem__)
                table.add_row(cid, CHECKS[cid].group, sev.value, str(len(found)))
            console.print(table)
    e, w, i = (report.count(s) for s in Severity)
    verdict = "[bold green]OK[/]" if report.ok else "[bold red]FAILED[/]"
    console.print(
        f"{verdict} {report.root}: {report.format}, {e} error(s), {w} warning(s), "
        f"{i} info, {report.seconds:.2f} s"
    )


def dump_json(report: Report, fp: IO[str]) -> None:
    json.dump(to_json(report), fp, indent=2)
    fp.write("\n")
