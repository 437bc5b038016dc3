"""The suite's own pytest rules (``tests/conftest.py``): how a failed comparison of two long
sequences is reported, under ``CI=true`` as off it."""

from __future__ import annotations

import os

import conftest
import pytest


def _explain(left: object, right: object, pytests: list[str]) -> tuple[list[list[str]], bool]:
    """Drive the ``pytest_assertrepr_compare`` wrapper as pluggy does: returns its explanations
    and whether pytest's own explanation ran with the CI variables hidden."""
    hook = conftest.pytest_assertrepr_compare("==", left, right)
    next(hook)
    hidden = "CI" not in os.environ
    with pytest.raises(StopIteration) as stop:
        hook.send([pytests])
    return stop.value.value, hidden


@pytest.mark.parametrize("kind", [bytes, list])
def test_a_long_comparison_leads_with_its_first_difference(
    monkeypatch: pytest.MonkeyPatch, kind: type) -> None:
    monkeypatch.setenv("CI", "true")
    length = conftest.LARGE_OPERAND + 1
    left, right = kind(bytes(length)), kind(bytes(length - 1) + b"\x01")
    explanations, hidden = _explain(left, right, ["pytest's own"])
    assert hidden and os.environ["CI"] == "true"
    assert explanations[0][0].endswith(f"first difference at index {length - 1}")
    assert explanations[1:] == [["pytest's own"]]


def test_a_prefix_differs_at_the_shorter_length(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    explanations, _ = _explain(bytes(600), bytes(700), [])
    assert explanations[0][0] == (
        "bytes of length 600 == bytes of length 700: first difference at index 600")


@pytest.mark.parametrize("left", [bytes(conftest.LARGE_OPERAND), 3])
def test_a_short_or_scalar_comparison_keeps_pytests_report(
    monkeypatch: pytest.MonkeyPatch, left: object) -> None:
    monkeypatch.setenv("CI", "true")
    explanations, hidden = _explain(left, b"x", ["pytest's own"])
    assert not hidden
    assert explanations == [["pytest's own"]]
