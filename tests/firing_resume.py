"""The firing matrix's cases (``tests/test_check_firing.py``) for RESUME_UNUSABLE
(``--resume REPORT``, mxformats/validate/resume.py): each condition is the report the planted
run is given to resume from, written from a run of the same checkpoint and then changed, or
written from scratch."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from firing_mutation import Mutation

from mxformats.validate.findings import Level
from mxformats.validate.model import Options
from mxformats.validate.report import dump_json
from mxformats.validate.runner import validate

Record = dict[str, Any]
_RECORDS = ("a malformed task record", "a record of other modules")


def _records(checkpoint: Path, level: Level) -> list[Record]:
    """The task records of a run of ``checkpoint`` at ``level`` (at ``scales`` where
    ``level`` runs no task)."""
    at = Level.SCALES if level is Level.STRUCTURE else level
    out = io.StringIO()
    dump_json(validate(checkpoint, Options(level=at, workers=1)), out)
    records: list[Record] = json.loads(out.getvalue())["tasks"]
    assert records, f"a run of {checkpoint} at {at.value} made no task"
    return records


def _report(change: Callable[[Record], None]) -> Callable[[Path, Path, Level], None]:
    """The report of the checkpoint's own run, its first task record after ``change``."""
    def write(checkpoint: Path, path: Path, level: Level) -> None:
        records = _records(checkpoint, level)
        change(records[0])
        path.write_text(json.dumps({"tasks": records}), encoding="utf-8")
    return write


def _text(text: str) -> Callable[[Path, Path, Level], None]:
    def write(checkpoint: Path, path: Path, level: Level) -> None:
        path.write_text(text, encoding="utf-8")
    return write


def _malformed(record: Record) -> None:
    record["result"] = "not a task result"


def _module_dropped(record: Record) -> None:
    numbers = record["result"]["numbers"]
    assert len(numbers) > 1, "the task checks one module: none can be dropped"
    del numbers[-1]


def _case(file_edit: Callable[[Path, Path, Level], None]) -> Mutation:
    return Mutation(None, anywhere=True, file_option=("resume", "report.json"),
                    file_edit=file_edit)


#: (check, condition) -> how it is planted.
MUTATIONS: dict[tuple[str, str], Mutation] = {
    ("RESUME_UNUSABLE", "not JSON"): _case(_text('{"tasks": [')),
    ("RESUME_UNUSABLE", "no task records"): _case(_text(json.dumps({"verdict": "ok"}))),
    ("RESUME_UNUSABLE", "a malformed task record"): _case(_report(_malformed)),
    ("RESUME_UNUSABLE", "a record of other modules"): _case(_report(_module_dropped)),
    ("RESUME_UNUSABLE", "no record of this run"): _case(
        _text(json.dumps({"tasks": [{"key": "0" * 64, "result": {}}]}))),
}

#: (check, condition, format) no fixture can carry -> the reason.
NOT_PLANTED: dict[tuple[str, str, str], str] = {
    ("RESUME_UNUSABLE", condition, "bf16"): (
        "a BF16 checkpoint is not quantized: its runs make no task, so no record of one can "
        "be changed")
    for condition in _RECORDS}
