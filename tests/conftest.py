"""Shared test helpers.

Optional dependencies (torch, triton, ...) are reached through ``requires``::

    from conftest import requires

    torch = requires("torch")  # module level or inside a test

Locally a missing optional module skips the test, with the reason printed by ``-ra``.
In CI (env ``CI=true``) a missing optional dependency is a failure, never a skip, and
any skipped test at all turns the run red (see ``pytest_sessionfinish``).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

IN_CI = os.environ.get("CI") == "true"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--device",
        default="cpu",
        help="device the kernel tests (tests/kernels) run on: cpu (default; Triton runs in its "
        "interpreter, HIP sources compiled for the CPU) or cuda (a GPU; ROCm torch reports "
        "its AMD GPU as cuda too)",
    )


def pytest_configure(config: pytest.Config) -> None:
    # The Triton interpreter is chosen when triton is imported, so it is set before any test
    # module is collected (and in every xdist worker, which runs this hook too).
    if config.getoption("--device") == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")


def requires(name: str) -> ModuleType:
    """Import the optional module ``name`` and return it.

    When the import fails: skip (module or test) locally, fail under ``CI=true``.
    """
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        error = exc
    # Outside the except block, so the report shows the reason, not a chained traceback.
    reason = f"optional dependency {name!r} is not importable: {error}"
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: a missing dependency is a failure)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


# --- CI: no skips ------------------------------------------------------------------------

_skipped: list[str] = []


def _record(report: pytest.TestReport | pytest.CollectReport) -> None:
    # An xfail is reported with outcome "skipped" plus `wasxfail`; it is not a skip.
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append(report.nodeid or "<collection>")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _record(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    _record(report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if IN_CI and _skipped and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if IN_CI and _skipped:
        terminalreporter.section("CI=true: skipped tests fail the run", red=True, bold=True)
        for nodeid in sorted(set(_skipped)):
            terminalreporter.write_line(f"SKIPPED {nodeid}", red=True)
        terminalreporter.write_line(
            f"{len(set(_skipped))} skipped; in CI every test must run (install the missing "
            "dependency or remove the skip).",
            red=True,
            bold=True,
        )


@contextlib.contextmanager
def fails_if_blocked(seconds: int, what: str) -> Iterator[None]:
    """Raise ``TimeoutError`` in the block after ``seconds`` (SIGALRM, main thread): a test
    of code that must never block (a FIFO opened for reading) fails instead of hanging."""

    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"blocked for {seconds} s: {what}")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def no_hang(request: pytest.FixtureRequest) -> Iterator[None]:
    """The test fails after 10 s instead of blocking (see :func:`fails_if_blocked`)."""
    with fails_if_blocked(10, request.node.nodeid):
        yield
