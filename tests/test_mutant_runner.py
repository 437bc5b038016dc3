"""The mutant runner's baseline batches (``tests/mutants/run.py``, ``batch_plugin.py``).

One pytest run stands for many ``# must-fail:`` selections on the pristine tree; a selection
counts as green only when the batch shows every test it selects passing, and anything else runs
alone, as before batching. These tests run the runner's own functions on a small throwaway
project (a few pytest processes, no mxformats import).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

RUNNER = Path(__file__).parent / "mutants" / "run.py"


def _load_runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutants_run", RUNNER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


run = _load_runner()

SAMPLE = """
import pytest

def test_green_a():
    pass

def test_green_b():
    pass

def test_red():
    assert False, "planted"

@pytest.mark.parametrize("n", [1, 2, 3])
def test_param(n):
    assert n != 3

class TestGroup:
    def test_inside(self):
        pass

def test_unclaimed_red():
    assert False, "no selection names me"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A pristine copy as the runner makes one: a pytest root with its shim folder."""
    root = tmp_path / "copy"
    (root / "tests").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    (root / "tests" / "test_sample.py").write_text(textwrap.dedent(SAMPLE))
    (root / "tests" / "test_other.py").write_text("def test_other():\n    pass\n")
    (root / "tests" / "test_broken.py").write_text("raise ImportError('planted')\n")
    run.write_shim(root)
    return root


def selections(*lines: str) -> dict[str, list[str]]:
    """label -> arguments, as ``check_all`` builds them from ``# must-fail:`` lines."""
    return {run.show(run.shlex.split(line)): run.shlex.split(line) for line in lines}


def test_batchable_takes_files_node_ids_and_one_k(project: Path) -> None:
    sample = "tests/test_sample.py"
    assert run.batchable([f"{sample}::test_param[2]"], project) == (
        [f"{sample}::test_param[2]"],
        None,
    )
    assert run.batchable([sample, "-k", "green"], project) == ([sample], "green")
    assert run.batchable([sample, "-kgreen"], project) == ([sample], "green")
    for alone in (
        [sample, "-m", "slow"],  # another option
        [sample, "-k", "a", "-k", "b"],  # two -k
        ["-k", "green"],  # no path: pytest would use testpaths
        ["tests"],  # a folder
        ["tests/test_absent.py"],  # pytest's own error, alone
        ["pyproject.toml"],  # not a Python file
    ):
        assert run.batchable(alone, project) is None, alone


def test_plan_keeps_each_file_in_one_batch(project: Path) -> None:
    chosen = selections(
        "tests/test_sample.py::test_green_a",
        "tests/test_sample.py -k green",
        "tests/test_other.py",
        "tests/test_broken.py",
        "tests/test_sample.py -m slow",
    )
    batches, alone = run.plan_baselines(chosen, project, 2)
    assert alone == ["tests/test_sample.py -m slow"]
    assert len(batches) == 2
    assert sorted(label for batch in batches for label in batch) == sorted(set(chosen) - {*alone})
    files = [{run.file_of(sel[0]) for sel in batch.values()} for batch in batches]
    assert not files[0] & files[1]  # no file split over two batches
    assert run.plan_baselines(chosen, project, 1)[0] == [
        {label: sel for label, sel in chosen.items() if label not in alone}
    ]


def test_a_red_test_is_attributed_to_exactly_the_selections_holding_it(project: Path) -> None:
    green = [
        "tests/test_sample.py::test_green_a",
        "tests/test_sample.py -k green",
        "tests/test_sample.py::test_param[2]",
        "tests/test_sample.py::TestGroup",
        "tests/test_other.py",
    ]
    red = [
        "tests/test_sample.py::test_red",
        "tests/test_sample.py -k 'red and not unclaimed or green_a'",
        "tests/test_sample.py::test_param",  # its [3] fails
    ]
    nothing = [
        "tests/test_sample.py::test_absent",  # alone: pytest's "not found" (exit 4)
        "tests/test_sample.py -k no_such_test",  # alone: no tests collected (exit 5)
        "tests/test_sample.py -k 'green and'",  # alone: pytest refuses the -k (exit 4)
        "tests/test_sample.py[1]",  # alone: pytest refuses a path's [] (exit 4)
    ]
    chosen = selections(*green, *red, *nothing)
    outcome = run.run_batch(project, chosen, timeout=120)

    assert outcome.batch_rc == run.PYTEST_FAILED
    assert outcome.green_in_batch == len(green)
    assert sorted(outcome.run_alone) == sorted(run.show(chosen[s]) for s in (*red, *nothing))
    codes = {label: rc for label, (rc, _) in outcome.baselines.items()}
    assert codes == {
        **dict.fromkeys(green, run.PYTEST_OK),
        **dict.fromkeys(red, run.PYTEST_FAILED),
        "tests/test_sample.py::test_absent": 4,
        "tests/test_sample.py -k no_such_test": 5,
        "tests/test_sample.py -k 'green and'": 4,
        "tests/test_sample.py[1]": 4,
    }
    # The log of a red baseline is its own run's: it names its failing test.
    assert "test_red" in outcome.baselines["tests/test_sample.py::test_red"][1]


def test_unclaimed_tests_do_not_run(project: Path) -> None:
    chosen = selections("tests/test_sample.py::test_green_a", "tests/test_sample.py -k green_b")
    outcome = run.run_batch(project, chosen, timeout=120)
    assert (outcome.batch_rc, outcome.run_alone) == (run.PYTEST_OK, [])


def test_an_unattributable_batch_runs_every_selection_alone(project: Path) -> None:
    # A module that does not import interrupts the whole batch (exit 2) before any test runs.
    chosen = selections("tests/test_sample.py::test_green_a", "tests/test_broken.py")
    outcome = run.run_batch(project, chosen, timeout=120)
    assert outcome.batch_rc == 2
    assert "planted" in outcome.batch_log  # the runner prints its tail: why the batch told nothing
    assert outcome.green_in_batch == 0
    assert {label: rc for label, (rc, _) in outcome.baselines.items()} == {
        "tests/test_sample.py::test_green_a": run.PYTEST_OK,
        "tests/test_broken.py": 2,
    }


def _results(tmp_path: Path, *records: dict[str, object]) -> Path:
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _reports(nodeid: str, outcome: str = "passed", *, wasxfail: bool = False) -> list[dict]:
    return [
        {"nodeid": nodeid, "when": when, "outcome": out, "wasxfail": wasxfail}
        for when, out in (("setup", "passed"), ("call", outcome), ("teardown", "passed"))
    ]


def test_batch_verdicts_need_every_claimed_test_passed(tmp_path: Path) -> None:
    results = _results(
        tmp_path,
        {"claims": [["a"], ["a", "b"], [], ["c"], ["d"], ["e"]]},
        *_reports("a"),
        *_reports("b", "failed"),
        *_reports("c", "skipped"),
        *_reports("d", "skipped", wasxfail=True),
        *_reports("e")[:2],  # cut short before its teardown
    )
    assert run.batch_verdicts(results, run.PYTEST_FAILED, 6) == [
        True,
        False,  # holds the failed b
        False,  # claims nothing
        False,  # skipped
        False,  # xfailed
        False,  # unfinished
    ]


@pytest.mark.parametrize("rc", [-1, 2, 3, 4, 5, -11])
def test_batch_verdicts_trust_nothing_unless_pytest_ended_normally(tmp_path: Path, rc: int) -> None:
    results = _results(tmp_path, {"claims": [["a"]]}, *_reports("a"))
    assert run.batch_verdicts(results, rc, 1) == [False]
    assert run.batch_verdicts(results, run.PYTEST_OK, 1) == [True]


def test_batch_verdicts_without_claims_are_all_false(tmp_path: Path) -> None:
    assert run.batch_verdicts(_results(tmp_path, *_reports("a")), run.PYTEST_OK, 2) == [
        False,
        False,
    ]
    assert run.batch_verdicts(tmp_path / "absent.jsonl", run.PYTEST_OK, 1) == [False]


def test_a_red_baseline_row_names_its_selection_and_tail(tmp_path: Path) -> None:
    patch = tmp_path / "some_mutant.patch"
    mutant = run.Mutant(patch, "a planted bug", [["tests/test_sample.py::test_red"]])
    baselines = {"tests/test_sample.py::test_red": (1, "E   AssertionError: planted\n1 failed")}
    (row,) = run.judge(mutant, [(run.PYTEST_FAILED, "")], baselines)
    assert (row.mutant, row.test, row.caught, row.ok) == (
        "some_mutant",
        "tests/test_sample.py::test_red",
        "BASELINE RED",
        False,
    )
    assert "tests failed" in row.notes[0] and "planted" in row.notes[1]


# --- Patches follow recorded moves (moves.txt) ------------------------------------------------

ORIGINAL = "def f():\n    return 1\n\n\ndef g():\n    return 2\n"
PATCH = """# mutant: g returns 3
# must-fail: tests/test_old.py::test_g
--- a/pkg/old.py
+++ b/pkg/old.py
@@ -5,2 +5,2 @@
 def g():
-    return 2
+    return 3
"""


@pytest.fixture
def moved_tree(tmp_path: Path) -> Path:
    """A git work tree where ``pkg/old.py`` was split: ``f`` into ``pkg/a.py``, ``g`` (with
    a line above it) into ``pkg/b.py``."""
    root = tmp_path / "tree"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("def f():\n    return 1\n")
    (root / "pkg" / "b.py").write_text("import os\n\n\ndef g():\n    return 2\n")
    run.subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root


def test_moves_file_parses_splits_and_comments(tmp_path: Path) -> None:
    moves = tmp_path / "moves.txt"
    moves.write_text("# comment\npkg/old.py -> pkg/a.py pkg/b.py  # split\n\nx.py -> y.py\n")
    assert run.load_moves(moves) == {"pkg/old.py": ["pkg/a.py", "pkg/b.py"], "x.py": ["y.py"]}
    assert run.load_moves(tmp_path / "absent.txt") == {}


@pytest.mark.parametrize("line", ["pkg/old.py pkg/a.py", "a.py b.py -> c.py", "a.py ->"])
def test_a_malformed_move_is_an_error_naming_its_line(tmp_path: Path, line: str) -> None:
    moves = tmp_path / "moves.txt"
    moves.write_text(f"ok.py -> new.py\n{line}\n")
    with pytest.raises(ValueError, match=r"moves\.txt:2"):
        run.load_moves(moves)


def test_a_patch_follows_a_split_to_the_part_its_hunks_apply_to(moved_tree: Path) -> None:
    patch = moved_tree.parent / "m.patch"
    patch.write_text(PATCH)
    moves = {"pkg/old.py": ["pkg/a.py", "pkg/b.py"]}
    assert run.apply_patch(moved_tree, patch, moves) is None
    assert (moved_tree / "pkg" / "b.py").read_text().endswith("return 3\n")
    assert (moved_tree / "pkg" / "a.py").read_text() == "def f():\n    return 1\n"


def test_a_patch_follows_a_chain_of_moves(moved_tree: Path) -> None:
    patch = moved_tree.parent / "m.patch"
    patch.write_text(PATCH)
    assert run.apply_patch(moved_tree, patch, {"pkg/old.py": ["pkg/mid.py"],
                                               "pkg/mid.py": ["pkg/b.py"]}) is None
    assert (moved_tree / "pkg" / "b.py").read_text().endswith("return 3\n")


def test_an_unrecorded_move_fails_to_apply(moved_tree: Path) -> None:
    patch = moved_tree.parent / "m.patch"
    patch.write_text(PATCH)
    error = run.apply_patch(moved_tree, patch, {})
    assert error is not None and "pkg/old.py" in error
    error = run.apply_patch(moved_tree, patch, {"pkg/old.py": ["pkg/a.py"]})
    assert error is not None  # moved, but its hunks are not in the recorded target
    assert (moved_tree / "pkg" / "b.py").read_text().endswith("return 2\n")


def test_a_patch_whose_file_exists_is_not_retargeted(moved_tree: Path) -> None:
    (moved_tree / "pkg" / "old.py").write_text(ORIGINAL)
    patch = moved_tree.parent / "m.patch"
    patch.write_text(PATCH)
    assert run.apply_patch(moved_tree, patch, {"pkg/old.py": ["pkg/b.py"]}) is None
    assert (moved_tree / "pkg" / "old.py").read_text().endswith("return 3\n")
    assert (moved_tree / "pkg" / "b.py").read_text().endswith("return 2\n")


def test_a_patch_follows_a_split_that_kept_the_old_path(moved_tree: Path) -> None:
    """A file split into itself and a new part (``old -> old new``): hunks that moved to the
    new part follow them there; the old path no longer holds them."""
    (moved_tree / "pkg" / "old.py").write_text("def f():\n    return 1\n")
    patch = moved_tree.parent / "m.patch"
    patch.write_text(PATCH)
    assert run.apply_patch(moved_tree, patch, {"pkg/old.py": ["pkg/old.py", "pkg/b.py"]}) is None
    assert (moved_tree / "pkg" / "b.py").read_text().endswith("return 3\n")
    assert (moved_tree / "pkg" / "old.py").read_text() == "def f():\n    return 1\n"


def test_a_must_fail_test_file_follows_its_move(moved_tree: Path) -> None:
    (moved_tree / "tests").mkdir()
    (moved_tree / "tests" / "test_new.py").write_text("")
    moves = {"tests/test_old.py": ["tests/test_new.py"]}
    selection = ["tests/test_old.py::test_g[x]", "-k", "g and not f"]
    assert run.follow_selection(selection, moves, moved_tree) == [
        "tests/test_new.py::test_g[x]", "-k", "g and not f"
    ]
    assert run.follow_selection(selection, {}, moved_tree) == selection


def _patch_of(tmp_path: Path, path: str) -> Path:
    patch = tmp_path / "m.patch"
    patch.write_text(f"# mutant: x\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-a\n+b\n")
    return patch


@pytest.mark.parametrize(("patched", "shared"), [
    ("mxformats/validate/reproduce.py", True),
    ("mxformats/fast/compiled.py", False),  # a compiled module: its caller's cache is stale
    ("mxformats/fast/moments.py", False),   # any file of the compiled package
])
def test_a_mutant_copy_gets_the_pristine_compiled_code_unless_it_patches_it(
        tmp_path: Path, patched: str, shared: bool) -> None:
    pristine, copy = tmp_path / "_pristine", tmp_path / "m"
    cache = pristine / run.COMPILED_PACKAGE / "__pycache__"
    cache.mkdir(parents=True)
    for name in ("compiled.f-10.py312.nbi", "compiled.f-10.py312.1.nbc", "compiled.cpython.pyc"):
        (cache / name).write_bytes(b"x")
    copied = run.share_compiled_cache(pristine, copy, _patch_of(tmp_path, patched))
    found = sorted(p.name for p in (copy / run.COMPILED_PACKAGE / "__pycache__").glob("*"))
    assert (copied, found) == ((2, ["compiled.f-10.py312.1.nbc", "compiled.f-10.py312.nbi"])
                               if shared else (0, []))


def test_a_run_past_its_timeout_reports_the_line_it_hung_on(project: Path) -> None:
    (project / "tests" / "test_hangs.py").write_text(textwrap.dedent("""
        import time

        def test_hangs():
            time.sleep(60)  # the line the report names
        """))
    rc, report = run.run_pytest(project, ["tests/test_hangs.py"], timeout=4)
    assert rc == -1
    assert report.startswith("timed out after 4s\nTimeout (")
    assert 'test_hangs.py", line 5 in test_hangs' in report


def test_innermost_frames_without_a_dump_are_the_last_lines() -> None:
    assert run.innermost_frames("a\nb\nc", frames=2) == "b\nc"
    dumps = "out\nTimeout (0:00:01)!\nold\nTimeout (0:00:02)!\n  File x\n  File y\nrest"
    assert run.innermost_frames(dumps, frames=2) == "Timeout (0:00:02)!\n  File x"
