"""``benchmarks/hip_cost.py``: the HIP kernels' instructions per element, counted by valgrind
on the unsanitised CPU driver (valgrind comes from .ci/run's apt step: under ``CI=true`` a
missing one fails here, locally it skips)."""

from __future__ import annotations

import shutil
from types import ModuleType

import pytest
from conftest import IN_CI, requires

from .benchmark_scripts import load_benchmark

requires("torch")


def _hip_cost() -> ModuleType:
    if not shutil.which("valgrind"):
        reason = "valgrind is not installed (apt-get install valgrind)"
        if IN_CI:
            pytest.fail(f"{reason} (CI=true: a missing dependency is a failure)", pytrace=False)
        pytest.skip(reason)
    return load_benchmark("hip_cost")


def test_one_case_is_counted_in_the_kernels_only() -> None:
    """A case gives one row, its operation named and a positive count per element; an empty
    run counts no kernel instruction and says so rather than reporting 0."""
    hip_cost = _hip_cost()
    costs = hip_cost.measure("dequantize_w4a8")
    assert [(c.name, c.ops) for c in costs] == [("dequantize_w4a8 vllm to float32",
                                                  "dequantize_w4a8")]
    assert costs[0].per_element > 0
    assert "| dequantize_w4a8 vllm to float32 | `dequantize_w4a8` |" in hip_cost.table(costs)
    from mxformats.kernels.hip._build import cpu_driver

    with pytest.raises(RuntimeError, match="no instruction in the kernels"):
        hip_cost.instructions(cpu_driver(sanitized=False), [])


def test_no_case_measured_is_a_failure(capsys: pytest.CaptureFixture[str]) -> None:
    assert _hip_cost().main(["--only", "no such case"]) == 1
    assert "no case measured" in capsys.readouterr().err
