"""pytest plugin of ``tests/mutants/run.py``: one pytest run checks many baseline selections.

``run.py`` loads it (``-p mutant_batch_plugin``, from the copy's shim folder) with
``--mutant-batch=SPEC``, SPEC a JSON file ``{"selections": [{"args": [...], "keyword": ...}],
"results": PATH}``, and passes the test files those selections name as the only positional
arguments. After collection, each test is matched against each selection the way pytest itself
would select it (``--mutant-batch`` replaces neither): a positional argument by
``_pytest.main.resolve_collection_argument`` and the node-name walk of
``Session._collect_one_arg`` (pytest 9.2: the file, then each ``::`` part by name, the last one
also matching every parametrization when it names none), and ``-k`` by pytest's own
``Expression`` and ``KeywordMatcher`` (``_pytest.mark.deselect_by_keyword``). Tests no
selection claims are deselected.

PATH gets JSON lines: first ``{"claims": [[nodeid, ...] per selection]}``, then one
``{"nodeid", "when", "outcome", "wasxfail"}`` per test report, each flushed as written, so a
run cut short (timeout, crash) still shows what it finished. ``run.py`` decides from them which
selections passed; the plugin judges nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

import pytest
from _pytest.main import resolve_collection_argument
from _pytest.mark import KeywordMatcher
from _pytest.mark.expression import Expression


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--mutant-batch",
        metavar="SPEC",
        help="tests/mutants/run.py: the JSON file naming the selections this run stands for",
    )


def pytest_configure(config: pytest.Config) -> None:
    spec = config.getoption("--mutant-batch")
    if spec:
        config.pluginmanager.register(BatchRecorder(config, Path(spec)), "mutant-batch-recorder")


class Selection:
    """One ``# must-fail:`` selection: its positional arguments, and its ``-k`` or None."""

    def __init__(self, config: pytest.Config, args: list[str], keyword: str | None) -> None:
        here = config.invocation_params.dir
        self.valid = True  # False: alone, pytest refuses it (a usage error); it claims nothing
        try:
            self.targets = [resolve_collection_argument(here, arg, i) for i, arg in enumerate(args)]
        except pytest.UsageError:
            self.targets, self.valid = [], False
        keyword = (keyword or "").lstrip()  # as deselect_by_keyword reads -k
        self.keyword: Expression | None = None
        if keyword:
            try:
                self.keyword = Expression.compile(keyword)
            except SyntaxError:  # what _pytest.mark._parse_expression turns into a UsageError
                self.valid = False

    def claims(self, item: pytest.Item) -> bool:
        if not self.valid or not any(_selects(t, item) for t in self.targets):
            return False
        return self.keyword is None or self.keyword.evaluate(KeywordMatcher.from_item(item))


def _selects(target: Any, item: pytest.Item) -> bool:
    """Whether the collection argument ``target`` (a ``CollectionArgument`` naming a file)
    selects ``item``, as ``Session._collect_one_arg`` matches nodes level by level."""
    chain = item.listchain()
    start = next((i for i, node in enumerate(chain) if node.path == target.path), None)
    if start is None or not isinstance(chain[start], pytest.File):
        return False
    below, parts = chain[start + 1 :], target.parts
    if len(below) < len(parts):
        return False
    if not parts:
        return True  # a file alone selects everything in it
    *inner, last = parts
    if any(node.name != part for node, part in zip(below, inner, strict=False)):
        return False
    name = below[len(parts) - 1].name
    if target.parametrization is not None:  # a parametrized argument must match exactly
        return bool(name == last + target.parametrization)
    return bool(name.split("[")[0] == last)  # else every parametrization matches


class BatchRecorder:
    """Deselects what no selection claims; writes the claims and every test report."""

    def __init__(self, config: pytest.Config, spec_path: Path) -> None:
        spec = json.loads(spec_path.read_text(encoding="utf-8"))
        self.selections = [Selection(config, s["args"], s["keyword"]) for s in spec["selections"]]
        self.out: IO[str] = open(spec["results"], "w", encoding="utf-8")  # noqa: SIM115

    def _write(self, record: dict[str, Any]) -> None:
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        claims: list[list[str]] = [[] for _ in self.selections]
        kept: list[pytest.Item] = []
        deselected: list[pytest.Item] = []
        for item in items:
            claimed = False
            for nodeids, selection in zip(claims, self.selections, strict=True):
                if selection.claims(item):
                    nodeids.append(item.nodeid)
                    claimed = True
            (kept if claimed else deselected).append(item)
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = kept
        self._write({"claims": claims})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._write(
            {
                "nodeid": report.nodeid,
                "when": report.when,
                "outcome": report.outcome,
                "wasxfail": hasattr(report, "wasxfail"),
            }
        )

    def pytest_unconfigure(self) -> None:
        self.out.close()
