"""The report's task records as JSON, and ``--resume``: a finished task's result written
into the JSON report (:func:`record`) and read back from it (:func:`resumable`), so an
interrupted run runs only the tasks it has not finished (:mod:`~mxformats.validate.tasks`).
A report is untrusted input: no pickle; only numbers, strings, numeric arrays and catalogued
checks are built from it.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from mxformats.tensorfile import read_json

from . import numbers, plausibility, reproduce
from .checks import PER_MODULE
from .findings import CHECKS, Finding, Level, Severity, declare
from .tasks import Task, TaskResult, task_key

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["CODECS", "RESUME_MAX_BYTES", "RESUME_UNUSABLE", "record", "result_from_json",
           "result_to_json", "resumable"]


#: ``--resume`` reads a report of at most this many bytes (a Kimi-size run writes tens of MB).
RESUME_MAX_BYTES = 512 << 20
#: An array in a task record holds at most this many elements (the arrays a task returns are
#: scale tensors of at most ``numbers.SMALL_ELEMENTS`` elements and 16-bin histograms).
MAX_ARRAY_ELEMENTS = 1 << 16

#: The finding quotes this much of the first malformed record's problem (it may repeat a
#: value of any size from the file).
PROBLEM_CHARS = 200

RESUME_UNUSABLE = declare(
    "RESUME_UNUSABLE", severity=Severity.WARNING, level=Level.STRUCTURE, group="internal",
    meaning="--resume named a report this run cannot reuse (unreadable, not a JSON report, a "
            "malformed task record, or tasks of another checkpoint, version or options): the "
            "tasks it does not supply ran again.",
    fix="Pass the JSON report (-o) of an interrupted run of the same checkpoint and options.",
    conditions=("not JSON", "no task records", "a malformed task record",
                "a record of other modules", "no record of this run"))


def _array_to_json(a: NDArray[Any]) -> dict[str, Any]:
    a = np.ascontiguousarray(a)
    return {"dtype": a.dtype.name, "shape": list(a.shape),
            "data": base64.b64encode(a.tobytes()).decode("ascii")}


def _dtype(name: object) -> np.dtype[Any]:
    """A numeric numpy or ml_dtypes dtype by name; ValueError for anything else (an object
    dtype would let a record build arbitrary Python objects)."""
    if not isinstance(name, str):
        raise ValueError(f"dtype {name!r} is not a name")
    found = getattr(ml_dtypes, name, None)
    dtype = np.dtype(found) if found is not None else np.dtype(name)
    if dtype.kind not in "biufV" or dtype.hasobject or dtype.fields is not None:
        raise ValueError(f"dtype {name!r} is not numeric")
    return dtype


def _array_from_json(data: object) -> NDArray[Any]:
    if not isinstance(data, dict):
        raise ValueError("an array record is not an object")
    dtype = _dtype(data.get("dtype"))
    shape = data.get("shape")
    if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise ValueError(f"array shape {shape!r} is not a list of sizes")
    count = math.prod(shape)
    if count > MAX_ARRAY_ELEMENTS:
        raise ValueError(f"array of {count} elements, over {MAX_ARRAY_ELEMENTS}")
    raw = base64.b64decode(str(data.get("data", "")), validate=True)
    if len(raw) != count * dtype.itemsize:
        raise ValueError(f"array data of {len(raw)} bytes for {count} {dtype.name}")
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def _histogram_from_json(data: object) -> NDArray[Any]:
    """A code histogram: 16 non-negative int64 counts, as ``numbers`` adds them up (another
    shape would broadcast into the sum, another dtype turn it to float)."""
    counts = _array_from_json(data)
    if counts.dtype != np.int64 or counts.shape != (16,) or bool((counts < 0).any()):
        raise ValueError(f"a histogram of {counts.dtype.name} {list(counts.shape)}, not 16 "
                         "counts")
    return counts


def _scale_hist_to_json(hist: dict[str, tuple[str, NDArray[Any]]]) -> dict[str, Any]:
    """``ModuleNumbers.scale_hist`` as ``{param: {"bins": "byte"|"exponent", "counts": {bin:
    count}}}``, the bins with a count only: a module's block scales use a few tens of the 256
    bins, so a Kimi-size report stays a few hundred bytes a module and scale tensor."""
    return {p: {"bins": bins, "counts": {str(i): int(n) for i, n in enumerate(a) if n}}
            for p, (bins, a) in hist.items()}


def _scale_hist_from_json(data: object) -> dict[str, tuple[str, NDArray[Any]]]:
    """:func:`_scale_hist_to_json` read back: each a :data:`numbers.SCALE_BINS` int64 array;
    absent (a record written before it existed) is empty; a bin outside the array, a count
    that is not a non-negative integer or another binning is a ValueError."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError("scale_hist is not a table of binned histograms")
    out: dict[str, tuple[str, NDArray[Any]]] = {}
    for p, v in data.items():
        counts = v.get("counts") if isinstance(v, dict) else None
        if not isinstance(v, dict) or v.get("bins") not in ("byte", "exponent") or not (
                isinstance(counts, dict)):
            raise ValueError(f"scale_hist {_text(p)!r} is not a binned histogram")
        a = np.zeros(numbers.SCALE_BINS, np.int64)
        for k, n in counts.items():
            if not (k.isdigit() and int(k) < numbers.SCALE_BINS) or isinstance(n, bool) or not (
                    isinstance(n, int) and 0 <= n < 1 << 63):
                raise ValueError(f"scale_hist {_text(p)!r}: bin {k!r:.20} count {n!r:.20}")
            a[int(k)] = n
        out[_text(p)] = (v["bins"], a)
    return out


def _finding_to_json(f: Finding) -> dict[str, Any]:
    return {"check": f.check.id, "message": f.message, "file": f.file, "tensor": f.tensor,
            "offset": f.offset, "severity": None if f.severity is None else f.severity.value,
            "extra": f.extra}


def _finding_from_json(data: object) -> Finding:
    if not isinstance(data, dict) or data.get("check") not in CHECKS:
        raise ValueError("a finding record names no catalogued check")
    severity = data.get("severity")
    offset = data.get("offset")
    extra = data.get("extra") or {}
    if not (isinstance(offset, int) or offset is None) or not isinstance(extra, dict):
        raise ValueError("a finding record's offset or extra is malformed")
    return Finding(CHECKS[data["check"]], _text(data.get("message")), _optional(data.get("file")),
                   _optional(data.get("tensor")), offset,
                   None if severity is None else Severity(severity), extra)


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string")
    return value


def _optional(value: object) -> str | None:
    return None if value is None else _text(value)


def _number(value: object) -> float:
    """A number of a record: a JSON number, or the string of a NaN or an infinity
    (:data:`reproduce.NONFINITE_JSON`, as :func:`reproduce.json_float` writes them)."""
    if isinstance(value, str) and value in reproduce.NONFINITE_JSON:
        return reproduce.NONFINITE_JSON[value]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{value!r} is not a number")
    try:
        return float(value)
    except OverflowError:  # a JSON integer of up to 4,300 digits parses
        raise ValueError(f"{value!r:.40} is too large for a float") from None


def _numbers_to_json(o: numbers.ModuleNumbers) -> dict[str, Any]:
    return {"module": o.module, "findings": [_finding_to_json(f) for f in o.findings],
            "small": None if o.small is None else {
                p: _array_to_json(a) for p, a in o.small.items()},
            "hist": {k: _array_to_json(a) for k, a in o.hist.items()},
            "zero_blocks": o.zero_blocks,
            "scale_hist": _scale_hist_to_json(o.scale_hist),
            "expert": None if o.expert is None else [o.expert[0].hex(),
                                                     reproduce.json_float(o.expert[1]),
                                                     o.expert[2]],
            "magnitude": plausibility.magnitude_to_json(o.magnitude)}


def _numbers_from_json(data: dict[str, Any]) -> numbers.ModuleNumbers:
    small, expert = data.get("small"), data.get("expert")
    zero_blocks = data.get("zero_blocks") or {}
    if not isinstance(zero_blocks, dict) or not all(
            isinstance(n, int) for n in zero_blocks.values()):
        raise ValueError("zero_blocks is not a table of counts")
    if expert is not None and not (isinstance(expert, list) and len(expert) == 3
                                   and isinstance(expert[2], bool)):
        raise ValueError("expert is not [checksum, rms, all zero]")
    return numbers.ModuleNumbers(
        _text(data.get("module")), [_finding_from_json(f) for f in data.get("findings", [])],
        None if small is None else {_text(p): _array_from_json(a) for p, a in small.items()},
        {_text(k): _histogram_from_json(a) for k, a in (data.get("hist") or {}).items()},
        {_text(k): n for k, n in zero_blocks.items()},
        _scale_hist_from_json(data.get("scale_hist")),
        None if expert is None else (bytes.fromhex(_text(expert[0])), _number(expert[1]),
                                     expert[2]),
        plausibility.magnitude_from_json(data.get("magnitude")))


def _reproduction_to_json(o: reproduce.ModuleReproduction) -> dict[str, Any]:
    r = o.result
    return {"module": o.module, "findings": [_finding_to_json(f) for f in o.findings],
            "result": None if r is None else {
                "module": r.module, "identical": r.identical,
                "first_mismatch": r.first_mismatch,
                "rel_error": reproduce.json_float(r.rel_error),
                "sqnr_db": reproduce.json_float(r.sqnr_db),
                "correlation": reproduce.json_float(r.correlation),
                "engine_decode": r.engine_decode,
                "engine_rel_error": reproduce.json_float(r.engine_rel_error),
                "engine_sqnr_db": reproduce.json_float(r.engine_sqnr_db)},
            "missing": None if o.missing is None else _finding_to_json(o.missing),
            "unprofiled": o.unprofiled, "unrecognised": o.unrecognised}


def _reproduction_from_json(data: dict[str, Any]) -> reproduce.ModuleReproduction:
    r, missing = data.get("result"), data.get("missing")
    result = None
    if r is not None:
        identical, first = r.get("identical"), r.get("first_mismatch")
        if not isinstance(identical, dict) or not all(
                isinstance(v, bool) for v in identical.values()) or not isinstance(first, dict):
            raise ValueError("a reproduction result is malformed")
        result = reproduce.ModuleResult(
            _text(r.get("module")), {_text(k): v for k, v in identical.items()},
            {_text(k): _text(v) for k, v in first.items()}, _number(r.get("rel_error")),
            _number(r.get("sqnr_db")), _number(r.get("correlation")),
            _text(r.get("engine_decode", "")), _number(r.get("engine_rel_error", "NaN")),
            _number(r.get("engine_sqnr_db", "NaN")))
    return reproduce.ModuleReproduction(
        _text(data.get("module")), [_finding_from_json(f) for f in data.get("findings", [])],
        result, None if missing is None else _finding_from_json(missing),
        _optional(data.get("unprofiled")), _optional(data.get("unrecognised")))


#: Per :attr:`PerModule.outcomes <.checkmodule.PerModule.outcomes>` of a check module, its
#: outcome as JSON data and back.
CODECS: dict[str, tuple[Callable[[Any], dict[str, Any]], Callable[[dict[str, Any]], Any]]] = {
    "numbers": (_numbers_to_json, _numbers_from_json),
    "reproduction": (_reproduction_to_json, _reproduction_from_json),
}


def result_to_json(result: TaskResult) -> dict[str, Any]:
    """``result`` as JSON data (no pickle: a report is untrusted input to ``--resume``);
    arrays as dtype, shape and base64 bytes."""
    return {**{pm.outcomes: [CODECS[pm.outcomes][0](o) for o in result.outcomes[pm.outcomes]]
               for pm in PER_MODULE},
            "bytes_read": result.bytes_read,
            "read_failures": [list(f) for f in result.read_failures]}


def result_from_json(data: object, index: int) -> TaskResult:
    """The :class:`TaskResult` of task ``index`` that :func:`result_to_json` wrote.
    ValueError (or KeyError, TypeError) for anything else: only numbers, strings, numeric
    arrays and catalogued checks are built, never code."""
    if not isinstance(data, dict):
        raise ValueError("a task result is not an object")
    failures = []
    for f in data.get("read_failures", []):
        if not (isinstance(f, list) and len(f) == 4 and isinstance(f[3], bool)):
            raise ValueError("a read failure record is malformed")
        failures.append((_text(f[0]), _text(f[1]), _text(f[2]), f[3]))
    bytes_read = data.get("bytes_read", 0)
    if not isinstance(bytes_read, int):
        raise ValueError("bytes_read is not an integer")
    return TaskResult(index, {pm.outcomes: [CODECS[pm.outcomes][1](o)
                                            for o in data.get(pm.outcomes, [])]
                              for pm in PER_MODULE}, bytes_read, failures)


def record(task: Task, result: TaskResult) -> dict[str, Any]:
    """The report's record of a finished task: its :func:`task_key`, index, module count and
    wall time (the one field that differs between runs), and its result."""
    return {"key": task_key(task), "index": task.index, "modules": len(task.modules),
            "seconds": round(result.seconds, 3), "result": result_to_json(result)}


def resumable(path: Path, plan: Sequence[Task]) -> tuple[dict[int, TaskResult], Finding | None]:
    """The results in the report at ``path`` of the tasks of ``plan`` (by index), matched by
    :func:`task_key` and holding the outcomes of exactly the modules the task checks (a
    record short of some would leave them unchecked), and a RESUME_UNUSABLE warning when the
    file cannot be used or supplies none of them. Never raises for the file's sake."""
    try:
        data = read_json(path, RESUME_MAX_BYTES)
        records = data.get("tasks") if isinstance(data, dict) else None
        if not isinstance(records, list):
            raise ValueError("not a JSON report of mxformats validate with task records")
    except (OSError, ValueError, RecursionError) as exc:
        return {}, Finding(RESUME_UNUSABLE, f"--resume {path}: {exc}")
    by_key = {task_key(t): t for t in plan}
    found: dict[int, TaskResult] = {}
    bad, problem = 0, ""
    for rec in records:
        task = by_key.get(str(rec.get("key"))) if isinstance(rec, dict) else None
        if task is None:
            continue
        try:
            result = result_from_json(rec.get("result"), task.index)
            if [[o.module for o in result.outcomes[pm.outcomes]] for pm in PER_MODULE
                    ] != task.modules_checked():
                raise ValueError(f"task {task.index}'s record is not of its modules")
            found[task.index] = result
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
            bad += 1
            problem = problem or f"{type(exc).__name__}: {exc}"[:PROBLEM_CHARS]
    if bad:
        return found, Finding(RESUME_UNUSABLE, f"--resume {path}: {bad} task record(s) "
                              f"malformed and run again (first: {problem})")
    if records and not found:
        return found, Finding(RESUME_UNUSABLE, f"--resume {path}: none of its {len(records)} "
                              "task records is of this run (another checkpoint, version or "
                              "options, or its files changed since)")
    return found, None
