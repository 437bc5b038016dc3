"""Checks and findings: the catalogue is data (ID, severity, level, meaning, fix, and what a
check fires on: its conditions, the formats, tensor roles and dtypes it applies to).

Every check the validator can report is declared once with :func:`declare` in the module that
runs it; :data:`CHECKS` is the catalogue the docs render and the firing matrix of the tests
(``tests/test_check_firing.py``) enumerates: one case per (check, condition, format, role).
A :class:`Finding` is one occurrence, naming the file, the tensor and the byte offset where
that makes sense.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum

from mxformats.output import check_url

__all__ = ["CHECKS", "LEVELS", "MAX_LISTED", "Check", "Finding", "Level", "Listing", "Severity",
           "declare", "listed"]


class Severity(str, Enum):
    """How bad a finding is: errors fail the run (exit 1), warnings only with ``--strict``."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Level(str, Enum):
    """How much of a checkpoint is read: headers and configs, also scales, or every byte."""

    STRUCTURE = "structure"
    SCALES = "scales"
    FULL = "full"


LEVELS: tuple[Level, ...] = (Level.STRUCTURE, Level.SCALES, Level.FULL)


@dataclass(frozen=True)
class Check:
    """One entry of the catalogue.

    Attributes:
        id: stable upper-case identifier, e.g. ``INDEX_MISSING_SHARD``; never reused.
        severity: the default severity of its findings.
        level: the lowest ``--level`` at which it runs.
        group: files, coverage, layout, numbers, deployment, reproduction or manifest.
        meaning: one sentence: what it found.
        fix: one sentence: what to do about it.
        conditions: each distinct thing it fires on, in words (``"NaN"``, ``"zero"``,
            ``"above the window"``...): every one has a case of its own in the firing matrix.
            Empty: one condition, the check's meaning.
        formats: the :class:`~mxformats.validate.model.CheckpointFormat` values it applies
            to; empty: it does not depend on the format.
        roles: the tensor roles (parameter names: ``weight_scale``, ``input_scale``...) it
            reads; empty: it reads no tensor's values.
        dtypes: the dtypes of those tensors it reads (empty: any); a format's tensor of a
            listed role in another dtype is not this check's (an NVFP4 E4M3 ``weight_scale``
            is not a float scale).
        only: the conditions that occur in some of its formats alone, each with those
            formats (``(("+0 and -0 mixed", ("quark-mxfp4",)),)``: a condition of one
            element encoding); every other condition applies to every format
            (:meth:`formats_of`).
    """

    id: str
    severity: Severity
    level: Level
    group: str
    meaning: str
    fix: str
    conditions: tuple[str, ...] = ()
    formats: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()
    only: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def formats_of(self, condition: str) -> tuple[str, ...]:
        """The declared formats ``condition`` applies to: those :attr:`only` names for it,
        else all of :attr:`formats` (empty: it does not depend on the format)."""
        return dict(self.only).get(condition, self.formats)

    @property
    def levels(self) -> tuple[Level, ...]:
        """The ``--level`` values it runs at: its own and every level above."""
        return LEVELS[LEVELS.index(self.level):]

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        """Unpickle as the catalogue's own entry (checks are compared by identity, and a
        finding computed in another process comes back pickled)."""
        return _catalogued, (self.id, self.severity, self.level, self.group, self.meaning,
                             self.fix, self.conditions, self.formats, self.roles, self.dtypes,
                             self.only)


#: Every check, by ID, in declaration order.
CHECKS: dict[str, Check] = {}


def _catalogued(id: str, severity: Severity, level: Level, group: str, meaning: str,
                fix: str, conditions: tuple[str, ...] = (), formats: tuple[str, ...] = (),
                roles: tuple[str, ...] = (), dtypes: tuple[str, ...] = (),
                only: tuple[tuple[str, tuple[str, ...]], ...] = ()) -> Check:
    """The declared check equal to these fields, or a new one when none is (unpickling)."""
    check = Check(id, severity, level, group, meaning, fix, conditions, formats, roles, dtypes,
                  only)
    return CHECKS.get(id, check) if CHECKS.get(id) == check else check


def declare(
    id: str, *, severity: Severity, level: Level, group: str, meaning: str, fix: str,
    conditions: tuple[str, ...] = (), formats: tuple[str, ...] = (),
    roles: tuple[str, ...] = (), dtypes: tuple[str, ...] = (),
    only: dict[str, tuple[str, ...]] | None = None,
) -> Check:
    """Declare a check (module level, once); returns it for use in :class:`Finding`. Every
    field but the ID by keyword, so a declaration reads the same in every module; what it
    fires on and applies to (``conditions``, ``formats``, ``roles``, ``dtypes``, ``only``: a
    condition -> the formats it occurs in, a part of ``formats`` where the check declares
    some) as :class:`Check` describes them. ValueError for an ``only`` of an undeclared
    condition, or of a format outside the declared ones."""
    scoped = tuple((cond, tuple(fmts)) for cond, fmts in (only or {}).items())
    for cond, fmts in scoped:
        if cond not in conditions or not fmts or (formats and not set(fmts) <= set(formats)):
            raise ValueError(f"check {id}: condition {cond!r} is scoped to {fmts}, not to a "
                             f"part of its declared formats {formats}")
    check = Check(id, severity, level, group, meaning, fix, conditions, formats, roles, dtypes,
                  scoped)
    if id in CHECKS and CHECKS[id] != check:
        raise ValueError(f"check {id} declared twice with different text")
    CHECKS[id] = check
    return check


@dataclass(frozen=True)
class Finding:
    """One occurrence of a check.

    ``file`` is relative to the checkpoint folder; ``offset`` an absolute byte offset in it.
    ``severity`` defaults to the check's.
    """

    check: Check
    message: str
    file: str | None = None
    tensor: str | None = None
    offset: int | None = None
    severity: Severity | None = None
    extra: dict[str, object] = field(default_factory=dict, compare=False)

    @property
    def effective_severity(self) -> Severity:
        return self.severity or self.check.severity

    def to_json(self) -> dict[str, object]:
        """The JSON report's finding, with its check's catalogue ``url``, ``meaning`` and
        ``fix``; ``extras`` (the machine-readable numbers a check promises,
        e.g. CODE_HISTOGRAM's counts) only when the finding carries any."""
        out: dict[str, object] = {
            "check": self.check.id,
            "severity": self.effective_severity.value,
            "file": self.file,
            "tensor": self.tensor,
            "offset": self.offset,
            "message": self.message,
            "url": check_url(self.check.id),
            "meaning": self.check.meaning,
            "fix": self.check.fix,
        }
        if self.extra:
            out["extras"] = self.extra
        return out


#: Findings of one check listed before the rest are counted in one summary (:class:`Listing`).
MAX_LISTED = 10
#: Severities, worst first.
_RANK = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


class Listing:
    """Passes on the first ``limit`` findings of each check and counts the rest, so that one
    root cause repeated in every module gives a few findings and one summary per check
    (:meth:`rest`: ``N more like the above, not listed`` and ``note``, with the worst
    severity of the findings it stands for), never one finding per module. Nothing is lost:
    the summary's ``extra["unlisted"]`` (the JSON report's ``extras``) holds the place,
    severity and message of each finding it counts, in order."""

    def __init__(self, limit: int, note: str = "") -> None:
        self.limit = limit
        self.note = note
        self.count: dict[str, int] = defaultdict(int)
        self.rest_of: dict[str, tuple[Check, Severity]] = {}
        self.unlisted: dict[str, list[dict[str, object]]] = defaultdict(list)

    def add(self, finding: Finding) -> Iterator[Finding]:
        """``finding`` while its check has had fewer than ``limit``, else nothing (counted)."""
        cid = finding.check.id
        self.count[cid] += 1
        if self.count[cid] <= self.limit:
            yield finding
            return
        sev = finding.effective_severity
        _, prev = self.rest_of.get(cid, (finding.check, sev))
        self.rest_of[cid] = (finding.check, min(prev, sev, key=_RANK.__getitem__))
        self.unlisted[cid].append({"file": finding.file, "tensor": finding.tensor,
                                   "offset": finding.offset, "severity": sev.value,
                                   "message": finding.message})

    def rest(self) -> Iterator[Finding]:
        """One summary finding per check that went over ``limit``."""
        for cid, (check, severity) in self.rest_of.items():
            n = self.count[cid] - self.limit
            yield Finding(check, f"{n} more like the above, not listed{self.note}",
                          severity=severity, extra={"unlisted": self.unlisted[cid]})


def listed(findings: Iterable[Finding], note: str = "") -> Iterator[Finding]:
    """``findings`` through one :class:`Listing` of :data:`MAX_LISTED`: the first of each
    check as they come, then one summary per check that had more (``note`` appended to it:
    where the full detail is, when somewhere is)."""
    listing = Listing(MAX_LISTED, note)
    for finding in findings:
        yield from listing.add(finding)
    yield from listing.rest()
