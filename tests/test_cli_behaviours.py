"""Each documented command-line behaviour not tested elsewhere, one row each: ``-o -`` and
``-o FILE`` on every reporting command, ``--format`` values and the ``--json`` alias where
no other test runs them, bad choices, ``--select``/``--ignore`` repeated, comma-separated,
spaced and in any case, ``--target`` repeated (the last counts), ``--allow-symlink-root``
repeated, format and dtype names in any case, values separated by commas.

The behaviours tested elsewhere (by name): no command and ``--version``
(``test_cli.py``); ``--format`` of validate, inspect, diff, check and preflight, ``--json
FILE|-``, ``--junit FILE``, two reports on stdout, ``-q``, ``--color``/``NO_COLOR``, a
report that cannot be written, a closed stdout, ``python -m mxformats``, the ``--json``
contradiction (``test_cli_output.py``); every usage error and the smallest valid values,
``--strict`` (``test_cli_validate.py``); diff's and check's inputs and exit codes
(``test_cli_check_diff.py``); compare's exit codes (``test_compare_checkpoints.py``); 130 on
an interrupt (``test_validate_tasks.py``).
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from mxformats.cli import main

MX = Path(__file__).resolve().parent / "data" / "producers" / "kimi-k2-mxfp4-quark"
INDEX = "model.safetensors.index.json"
SHARD = "model-00002-of-00002.safetensors"
#: the two findings of the broken checkpoint: an error and a warning
MISSING, TOTAL = "SHARD_TENSOR_NOT_IN_INDEX", "TOTAL_SIZE_MISMATCH"


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str
    cwd: Path


def _ids(ran: Ran) -> list[str]:
    """The check IDs of the JSON report on stdout, sorted."""
    return sorted(f["check"] for f in json.loads(ran.out)["findings"])


def _json(ran: Ran) -> bool:
    return isinstance(json.loads(ran.out), dict)


def _junit(ran: Ran) -> bool:
    return ET.fromstring(ran.out.encode()).tag == "testsuite"


def _github(ran: Ran) -> bool:
    lines = ran.out.splitlines()
    return bool(lines) and all(line.startswith("::") for line in lines)


def _stdout_only(check: Callable[[Ran], bool]) -> Callable[[Ran], bool]:
    """``check`` of stdout, and no file written in the working folder (``-o -`` is no file
    named ``-``)."""
    return lambda ran: check(ran) and not list(ran.cwd.iterdir())


def _file(name: str, check: Callable[[Ran], bool]) -> Callable[[Ran], bool]:
    """Nothing on stdout; ``check`` of the file ``name`` of the working folder."""
    return lambda ran: ran.out == "" and check(Ran(ran.code, (ran.cwd / name).read_text(),
                                                   ran.err, ran.cwd))


def _one_line(ran: Ran) -> bool:
    return len(ran.out.splitlines()) == 1


def _ids_are(*ids: str) -> Callable[[Ran], bool]:
    return lambda ran: _ids(ran) == sorted(ids)


def _err_has(text: str) -> Callable[[Ran], bool]:
    return lambda ran: text in ran.err


@dataclass(frozen=True)
class Row:
    """A documented behaviour: ``argv`` ({MX}: the good fixture, {BROKEN}: one with an
    error and a warning, {LINKED}: one with two files symlinked to two roots, {R1} and
    {R2}), the exit code, and what must hold of what it printed or wrote."""

    behaviour: str
    argv: list[str]
    code: int
    holds: Callable[[Ran], bool]


ROWS = [
    # -o -: stdout, on every reporting command; -o FILE: the file, nothing on stdout
    Row("validate -o - is stdout", ["validate", "{MX}", "--level", "structure",
                                    "--format", "json", "-o", "-"], 0, _stdout_only(_json)),
    Row("inspect -o - is stdout", ["inspect", "{MX}", "--json", "-o", "-"], 0,
        _stdout_only(_json)),
    Row("preflight -o - is stdout", ["preflight", "{MX}", "--format", "junit", "-o", "-"], 0,
        _stdout_only(_junit)),
    Row("compare -o - is stdout", ["compare", "{MX}", "{MX}", "--json", "-o", "-"], 0,
        _stdout_only(_json)),
    Row("diff -o - is stdout", ["diff", "6", "5", "--format", "github", "-o", "-"], 0,
        _stdout_only(_github)),
    Row("inspect -o FILE", ["inspect", "{MX}", "-q", "-o", "r.txt"], 0,
        _file("r.txt", _one_line)),
    Row("preflight -o FILE", ["preflight", "{MX}", "--json", "-o", "r.json"], 0,
        _file("r.json", _json)),
    Row("diff -o FILE", ["diff", "6", "5", "--format", "junit", "-o", "r.xml"], 0,
        _file("r.xml", _junit)),
    # --format values and the --json alias where no other test runs them
    Row("compare --format junit", ["compare", "{MX}", "{MX}", "--format", "junit"], 0, _junit),
    Row("compare --format github", ["compare", "{MX}", "{MX}", "--format", "github"], 0,
        _github),
    Row("compare -q", ["compare", "{MX}", "{MX}", "-q"], 0, _one_line),
    Row("preflight --json", ["preflight", "{MX}", "--json"], 0, _json),
    Row("inspect --json contradicts --format",
        ["inspect", "{MX}", "--json", "--format", "github"], 2,
        _err_has("--json contradicts --format github")),
    Row("compare --json contradicts --format",
        ["compare", "{MX}", "{MX}", "--json", "--format", "text"], 2,
        _err_has("--json contradicts --format text")),
    Row("--format only its values", ["validate", "{MX}", "--format", "JSON"], 2,
        _err_has("invalid choice: 'JSON'")),
    Row("--color only its values", ["inspect", "{MX}", "--color", "sometimes"], 2,
        _err_has("invalid choice: 'sometimes'")),
    # --select/--ignore: comma-separated, spaced, any case, repeated (every one counts)
    Row("--select one ID", ["validate", "{BROKEN}", "--level", "structure", "--json", "-",
                            "--select", TOTAL], 0, _ids_are(TOTAL)),
    Row("--select in lower case", ["validate", "{BROKEN}", "--level", "structure", "--json",
                                   "-", "--select", MISSING.lower()], 1, _ids_are(MISSING)),
    Row("--select comma-separated, spaced, mixed case",
        ["validate", "{BROKEN}", "--level", "structure", "--json", "-",
         "--select", f" {TOTAL.title()} , ,{MISSING}"], 1, _ids_are(MISSING, TOTAL)),
    Row("--select repeated", ["validate", "{BROKEN}", "--level", "structure", "--json", "-",
                              "--select", MISSING, "--select", TOTAL], 1,
        _ids_are(MISSING, TOTAL)),
    Row("--ignore repeated", ["validate", "{BROKEN}", "--level", "structure", "--json", "-",
                              "--ignore", MISSING, "--ignore", TOTAL.lower()], 0, _ids_are()),
    Row("--ignore one ID", ["validate", "{BROKEN}", "--level", "structure", "--json", "-",
                            "--ignore", TOTAL], 1, _ids_are(MISSING)),
    Row("--select and --ignore repeated", ["validate", "{BROKEN}", "--level", "structure",
                                           "--json", "-", "--select", MISSING, "--select",
                                           TOTAL, "--ignore", MISSING], 0, _ids_are(TOTAL)),
    Row("--select an unknown ID among known ones",
        ["validate", "{BROKEN}", "--select", MISSING, "--select", "NO_SUCH"], 2,
        _err_has("unknown check ID(s): NO_SUCH")),
    # an option of one value given twice: the last one counts (a wrapper's default overridden)
    Row("--target given twice: the last", ["validate", "{MX}", "--level", "structure",
                                           "--json", "-", "--tp", "1", "--target", "mi300x",
                                           "--target", "h200"], 0,
        lambda r: [f["message"].split(" is ")[0] for f in json.loads(r.out)["findings"]]
        == ["MXFP4 on h200 (sm90)"]),
    # --allow-symlink-root: repeatable, every root counts
    Row("--allow-symlink-root repeated",
        ["validate", "{LINKED}", "--level", "structure", "--json", "-",
         "--allow-symlink-root", "{R1}", "--allow-symlink-root", "{R2}"], 0, _ids_are()),
    Row("--allow-symlink-root: the other root's link escapes",
        ["validate", "{LINKED}", "--level", "structure", "--json", "-",
         "--allow-symlink-root", "{R2}"], 1, _ids_are("SYMLINK_ESCAPE")),
    # names in any case, values separated by commas
    Row("spec FORMAT in any case", ["spec", "E4m3FN"], 0, lambda r: "0x7E" in r.out),
    Row("diff --dtype in any case", ["diff", "6", "5", "--dtype", "BF16", "--json"], 0,
        lambda r: json.loads(r.out)["dtype"] == "bfloat16"),
    Row("diff --elem in any case", ["diff", "6", "5", "--elem", "E4M3FN", "--json"], 0,
        lambda r: json.loads(r.out)["elem"] == "e4m3fn"),
    Row("diff values separated by commas", ["diff", "6,5", "0.25,0.75", "--json"], 0,
        lambda r: [float.fromhex(v) for v in json.loads(r.out)["input"][:5]]
        == [6.0, 5.0, 0.25, 0.75, 0.0]),
]


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, Path]:
    """{MX}, {BROKEN} (a tensor missing from the index: an error; total_size 1: a warning)
    and {LINKED} (config.json a link into {R1}, a shard a link into {R2})."""
    broken = shutil.copytree(MX, tmp_path / "broken")
    index = json.loads((broken / INDEX).read_text())
    del index["weight_map"][sorted(index["weight_map"])[0]]
    index["metadata"] = {"total_size": 1}
    (broken / INDEX).write_text(json.dumps(index))
    linked = shutil.copytree(MX, tmp_path / "linked")
    roots = {}
    for root, name in (("R1", "config.json"), ("R2", SHARD)):
        roots[root] = tmp_path / root.lower()
        roots[root].mkdir()
        shutil.move(linked / name, roots[root] / name)
        (linked / name).symlink_to(roots[root] / name)
    return {"MX": MX, "BROKEN": broken, "LINKED": linked, **roots}


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.behaviour)
def test_cli_behaviour(row: Row, folders: dict[str, Path], tmp_path: Path,
                       monkeypatch: pytest.MonkeyPatch,
                       capsys: pytest.CaptureFixture[str]) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    argv = [a.format(**{k: str(v) for k, v in folders.items()}) for a in row.argv]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    ran = Ran(code, captured.out, captured.err, cwd)
    assert code == row.code, (captured.out[-2000:], captured.err[-2000:])
    assert row.holds(ran), (captured.out[-2000:], captured.err[-2000:])
