"""Shared test helpers.

Optional dependencies (torch, triton, ...) are reached through ``requires``::

    from conftest import requires

    torch = requires("torch")  # module level or inside a test

Locally a missing optional module skips the test, with the reason printed by ``-ra``.
In CI (env ``CI=true``) a missing optional dependency is a failure, never a skip, and
any skipped test at all turns the run red (see ``pytest_sessionfinish``).

Hypothesis runs under the profile ``ci`` when ``CI=true`` (or ``HYPOTHESIS_PROFILE=ci``):
derandomized (examples derived from each test's name, not from luck), no example database, no
deadline. A test's own ``@settings(max_examples=...)`` still fixes its count, so a mutant is
killed by the same examples on every run. ``tests/mutants/run.py`` selects ``mutants``: the
same, without shrinking a failure.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
from collections.abc import Generator, Iterator, Sequence
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings

IN_CI = os.environ.get("CI") == "true"

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=100,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
# The mutant runner's: the same examples as "ci", without shrinking (a mutant only has to make
# a test fail; shrinking the failing example is wasted time there).
settings.register_profile(
    "mutants",
    settings.get_profile("ci"),
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target],
)
# Loaded here, before any test module is imported: a test's @settings(...) inherits every
# setting it does not name from the profile active when it is decorated.
_PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if IN_CI else None)
if _PROFILE:
    settings.load_profile(_PROFILE)


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


# --- assertion reports on large operands ----------------------------------------------------

#: Above this length an ``==`` between two sequences is explained by its first difference.
LARGE_OPERAND = 512
#: The variables by which pytest (``_pytest.compat.running_on_ci``) decides not to truncate.
_CI_VARIABLES = ("CI", "BUILD_NUMBER")


def _first_difference(left: Sequence[Any], right: Sequence[Any]) -> list[str]:
    first = next((i for i, (a, b) in enumerate(zip(left, right, strict=False)) if a != b),
                 min(len(left), len(right)))
    start, stop = max(first - 8, 0), first + 8
    return [
        f"{type(left).__name__} of length {len(left)} == {type(right).__name__} of length "
        f"{len(right)}: first difference at index {first}",
        f"  left[{start}:{stop}]  = {left[start:stop]!r}",
        f"  right[{start}:{stop}] = {right[start:stop]!r}",
    ]


@pytest.hookimpl(wrapper=True)
def pytest_assertrepr_compare(
    op: str, left: object, right: object
) -> Generator[None, list[list[str]], list[list[str]]]:
    """A failed ``==`` between two long sequences (a tensor's ``tobytes()``, a long list) is
    explained first by its lengths and first differing index, and pytest's own diff of it is
    truncated as it is off CI.

    Under ``CI=true`` pytest does not truncate, and its difflib diff of megabytes of bytes is
    quadratic: a failing bit-exactness test (a caught mutant) ran past the mutant runner's
    900 s timeout. The CI variables are hidden from pytest for that one explanation only.
    """
    kinds = (bytes, bytearray, str, list, tuple)
    if (op != "==" or not isinstance(left, kinds) or not isinstance(right, kinds)
            or max(len(left), len(right)) <= LARGE_OPERAND):
        return (yield)
    hidden = {name: os.environ.pop(name) for name in _CI_VARIABLES if name in os.environ}
    try:
        explanations = yield
    finally:
        os.environ.update(hidden)
    return [_first_difference(left, right), *explanations]


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
