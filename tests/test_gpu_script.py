"""``benchmarks/gpu.py --dry-run`` works end to end on the CPU and writes its report.

The dry run is the GPU script's own code path on the Triton interpreter at small sizes: the
kernel-test subprocess (a small selection), the copy bandwidth and every Triton kernel
variant, then ``results.json`` and ``results.md``; and its plan: the GPU-sized test selection,
collected for ``--device cuda``, must fit the 420 s budget by the per-test estimates. The peers (torchao, Quark) are left out here: their
imports alone take about 10 s; ``python benchmarks/gpu.py --dry-run`` runs them too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import requires

ROOT = Path(__file__).resolve().parent.parent


def test_dry_run_writes_json_and_markdown(tmp_path: Path) -> None:
    requires("torch")
    requires("triton")
    import mxformats.kernels.triton as triton_kernels

    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/gpu.py"), "--dry-run", "--budget-s", "420",
         "--backends", "triton", "--no-peers", "--out", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    report = json.loads((out / "results.json").read_text())
    plan = report["plan"]
    assert plan["fits"] and 0 < plan["seconds"] <= 420 and plan["tests"] > 0, plan
    assert report["dry_run"] is True and report["device"] == "cpu"
    assert report["versions"]["torch"] and report["versions"]["triton"]
    assert report["tests"]["status"] == "passed" and report["tests"]["tests"] > 0
    assert report["checks"] and all(check["ok"] for check in report["checks"])
    assert [c["shape"] for c in report["copy"]] == [[64, 256]]
    assert all(c["gbps"] > 0 for c in report["copy"])
    triton_rows = [k for k in report["kernels"] if k["backend"] == "triton"]
    claims = {f"{function} {fmt} {profile}"
              for function, pairs in triton_kernels.SUPPORTED.items() for fmt, profile in pairs}
    for shape in ([64, 256],):
        timed = {k["name"] for k in triton_rows if k["shape"] == shape and k.get("gbps", 0) > 0}
        assert timed == claims, f"{shape}: not timed: {sorted(claims - timed)}"
    assert all(k["pct_copy"] > 0 and k["bytes"] > 0 for k in triton_rows)

    formats = [r["format"] for r in report["reproduction"]]
    assert len(formats) == 7 and len(set(formats)) == 7
    assert all(r["answered"] and r["gbps"] > 0 and r["of_host_to_device"] > 0
               and r["of_device_copy"] > 0 for r in report["reproduction"]), report["reproduction"]
    assert [h["shape"] for h in report["host_copy"]] == [[64, 256]]

    markdown = (out / "results.md").read_text()
    for heading in ("## Checks", "## Plan (estimates)", "## Kernel tests", "## Copy bandwidth",
                    "## Kernels", "## Reproduction on the device"):
        assert heading in markdown
    rows = [line for line in markdown.splitlines() if line.startswith("| triton | ") and "×" in line]
    assert len(rows) == len(triton_rows)
    assert (out / "kernel-tests.xml").exists()


def test_dry_run_over_budget_fails(tmp_path: Path) -> None:
    """A plan that does not fit the budget makes the dry run exit 1, naming the plan (and
    nothing else: the tests are skipped, the timing left out for the spent budget)."""
    requires("torch")
    requires("triton")
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/gpu.py"), "--dry-run", "--budget-s", "1",
         "--backends", "triton", "--no-peers", "--skip-tests", "--out", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    plan = json.loads((out / "results.json").read_text())["plan"]
    assert not plan["fits"] and plan["seconds"] > plan["budget_s"] == 1, plan
    failures = [line for line in done.stdout.splitlines() if line.startswith("FAILED: ")]
    assert failures == [f"FAILED: plan: {plan['seconds']} s estimated for a budget of 1.0 s"]
