"""The README must say what CI does and what the code does.

- The two fresh-machine command lines are exactly what ``.ci/run`` executes.
- The usage example runs (doctest).
- The format table agrees with ``mxformats.FORMATS``.
"""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

import mxformats

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
CI_RUN = (ROOT / ".ci" / "run").read_text(encoding="utf-8")

VENV_PREFIX = ["python3 -m venv .venv", ". .venv/bin/activate"]


def _command_line(marker: str) -> list[str]:
    """The README's one-line fresh-machine command that contains ``marker``, split on ``&&``."""
    lines = [
        line.strip()
        for line in README.splitlines()
        if line.startswith("python3 -m venv .venv && ") and marker in line
    ]
    assert len(lines) == 1, f"expected one README command line containing {marker!r}: {lines}"
    parts = [part.strip() for part in lines[0].split("&&")]
    assert parts[:2] == VENV_PREFIX, f"README line must start with a fresh venv: {lines[0]}"
    return parts[2:]


def _ci_runs(command: str) -> bool:
    """True when a line of .ci/run is ``command`` (optionally followed by ``|| ...``)."""
    pattern = rf"^[ \t]*{re.escape(command)}[ \t]*(\|\|.*)?$"
    return re.search(pattern, CI_RUN, flags=re.MULTILINE) is not None


@pytest.mark.parametrize("marker", ["mxformats demo", "pytest"], ids=["main-job", "tests"])
def test_readme_commands_are_what_ci_runs(marker: str) -> None:
    for command in _command_line(marker):
        assert _ci_runs(command), f".ci/run does not run the README command {command!r}"


def test_readme_test_command_is_the_ci_pytest_invocation() -> None:
    pytest_cmd = _command_line("pytest")[-1]
    assert pytest_cmd.startswith("pytest ")
    invocations = [
        line.strip() for line in CI_RUN.splitlines() if re.match(r"^\s*(python -m )?pytest\b", line)
    ]
    assert invocations, ".ci/run runs no pytest"
    assert all(inv.split("||")[0].strip() == pytest_cmd for inv in invocations), invocations


def test_readme_usage_example() -> None:
    parser = doctest.DocTestParser()
    test = parser.get_doctest(README, {}, "README.md", str(ROOT / "README.md"), 0)
    assert test.examples, "README has no >>> example"
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "README usage example failed (output above)"


def _table() -> dict[str, dict[str, str]]:
    section = README.split("## Formats", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    table = {}
    for row in rows[2:]:
        cells = dict(zip(header, (cell.strip() for cell in row.strip("|").split("|")), strict=True))
        table[cells["name"].strip("`")] = cells
    return table


def _number(text: str) -> float:
    if "^" in text:
        base, exp = text.split("^")
        return float(base) ** int(exp)
    return float(text)


def _codes(text: str) -> set[int]:
    if text == "none":
        return set()
    codes: set[int] = set()
    for item in text.split(","):
        lo, _, hi = item.strip().partition("-")
        codes.update(range(int(lo, 16), int(hi or lo, 16) + 1))
    return codes


def test_readme_format_table_matches_formats() -> None:
    table = _table()
    assert list(table) == list(mxformats.FORMATS)
    for name, fmt in mxformats.FORMATS.items():
        row = table[name]
        assert int(row["bits"]) == fmt.bits, name
        assert int(row["bias"]) == fmt.bias, name
        assert _number(row["max"]) == fmt.max, name
        assert _codes(row["NaN"]) == set(fmt.nan_codes), name
        assert _codes(row["Inf"]) == set(fmt.inf_codes), name
        if fmt.ebits:
            assert f"E{fmt.ebits}" in row["layout"], name
        if fmt.mbits:
            assert f"M{fmt.mbits}" in row["layout"], name
