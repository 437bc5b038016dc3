#!/usr/bin/env python3
"""Check that planted bugs (``tests/mutants/*.patch``) are caught by the tests they name.

For each patch:

1. baseline: in a pristine copy of the repository, the patch's ``must-fail`` tests pass;
2. mutant: in a fresh copy with the patch applied (``git apply``), they fail.

A copy holds the files git sees (``git ls-files -co --exclude-standard``). pytest runs with
the copy as working directory and first on ``PYTHONPATH``, and a ``sitecustomize`` shim
maps ``mxformats`` and ``mxformats.kernels`` to the copy, ahead of any installed (editable)
mxformats. A sanity step checks that the copy's files are the ones imported.

Runs go to ``--jobs`` worker processes at once (default: the usable cores): the baselines,
and every mutant in its own copy. The distinct baseline selections are checked in ``--jobs``
batches, one pytest run each (``batch_plugin.py`` matches each test to the selections that
would pick it, as pytest would, and records every test's outcome): a selection is green when
the batch collected at least one of its tests and each passed. Any other selection (a red or
skipped test, nothing collected, a batch that crashed, timed out or failed to collect) then runs
alone, as it did before batching, and that run decides: so a red baseline is reported with its
own exit code and log, and one that selects nothing stays an error. Each pytest run gets its
own ``--basetemp`` and the Hypothesis profile ``mutants`` (``tests/conftest.py``:
derandomized, no shrinking), so a mutant is killed by the same examples on every run. The
summary counts distinct patches caught (every selection red) and (patch, selection) pairs.

Usage: ``python tests/mutants/run.py [--list] [--jobs N] [NAME ...]`` (NAME: patch file stem).
Exit status: 0 all caught; 1 a mutant survived, a patch did not apply, a baseline was not
green or a pytest run errored; 2 usage error.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

#: Imports mxformats (and mxformats.kernels) from $MXFORMATS_ROOT: the copy's sitecustomize.py.
CHECKOUT_IMPORTS = (ROOT / "tests" / "checkout_imports.py").read_text()
#: The pytest plugin of a baseline batch, written into each copy's shim folder as this module.
BATCH_PLUGIN = "mutant_batch_plugin"
BATCH_PLUGIN_TEXT = (HERE / "batch_plugin.py").read_text()

# PASS: exit 0. Caught: exit 1 (tests failed). Anything else is an error, never "caught".
PYTEST_OK, PYTEST_FAILED = 0, 1
PYTEST_EXIT = {
    1: "tests failed",
    2: "interrupted/collection error",
    3: "internal error",
    4: "usage error",
    5: "no tests collected",
}


@dataclass
class Mutant:
    path: Path
    description: str
    must_fail: list[list[str]]  # one pytest argument list per "# must-fail:" line

    @property
    def name(self) -> str:
        return self.path.stem


@dataclass
class Row:
    mutant: str
    test: str
    caught: str
    ok: bool
    notes: list[str] = field(default_factory=list)


def parse_patch(path: Path) -> Mutant:
    description = ""
    must_fail: list[list[str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        key, _, value = line[1:].partition(":")
        key, value = key.strip(), value.strip()
        if key == "mutant":
            description = value
        elif key == "must-fail":
            must_fail.append(shlex.split(value))
    if not description:
        raise ValueError(f"{path.name}: missing '# mutant: <description>' header")
    if not must_fail or not all(must_fail):
        raise ValueError(f"{path.name}: missing '# must-fail: <pytest selection>' header")
    return Mutant(path, description, must_fail)


def discover() -> list[Mutant]:
    """Every patch here, its ``must-fail`` test files followed along the recorded moves."""
    moves = load_moves()
    mutants = [parse_patch(p) for p in sorted(HERE.glob("*.patch"))]
    for m in mutants:
        m.must_fail = [follow_selection(sel, moves, ROOT) for sel in m.must_fail]
    return mutants


def copy_repo(dest: Path) -> None:
    out = subprocess.run(
        ["git", "ls-files", "-z", "-co", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    for rel in filter(None, out.decode().split("\0")):
        src = ROOT / rel
        if not src.is_file():  # deleted but still tracked, or a submodule
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
    write_shim(dest)


def write_shim(dest: Path) -> None:
    """The folder ``env_for(dest)`` puts first on ``PYTHONPATH``: the ``sitecustomize.py``
    that maps mxformats to ``dest``, and the batch plugin."""
    shim_dir = dest / ".mutant-shim"
    shim_dir.mkdir()
    (shim_dir / "sitecustomize.py").write_text(CHECKOUT_IMPORTS)
    (shim_dir / f"{BATCH_PLUGIN}.py").write_text(BATCH_PLUGIN_TEXT)


def env_for(copy: Path) -> dict[str, str]:
    env = dict(os.environ)
    extra = [str(copy / ".mutant-shim"), str(copy)]
    if env.get("PYTHONPATH"):
        extra.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(extra)
    env["MXFORMATS_ROOT"] = str(copy)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # numba keeps each copy's compiled passes beside their source (``__pycache__``), where
    # :func:`share_compiled_cache` finds the pristine copy's; NUMBA_CACHE_DIR would key them by
    # the copy's absolute path, so every copy would compile them again.
    env.pop("NUMBA_CACHE_DIR", None)
    env["HYPOTHESIS_PROFILE"] = "mutants"
    return env


def check_imports(copy: Path) -> None:
    """Fail loudly unless the copy's mxformats (and kernels) are the ones imported."""
    code = (
        "import mxformats, mxformats.kernels\n"
        "print(mxformats.__file__)\n"
        "print(mxformats.kernels.__file__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=copy,
        env=env_for(copy),
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise SystemExit(f"sanity: cannot import mxformats from {copy}:\n{out.stderr}")
    for line in out.stdout.split():
        if not Path(line).resolve().is_relative_to(copy.resolve()):
            raise SystemExit(f"sanity: imported {line}, not the copy under {copy}")


def prime_rewrite_cache(pristine: Path) -> None:
    """Have pytest write its assertion-rewritten bytecode of the plugins' packages once.

    pytest rewrites every module of a distribution that declares a pytest plugin (all of
    Hypothesis's, about 80) and caches the result beside the module, unless bytecode writing
    is off, as it is in every copy's runs (:func:`env_for`, so the copies stay clean): then
    each of the thousand pytest runs here rewrote them again, a second each. One collection
    with writing on (in the pristine copy, so the repository is untouched) leaves those caches
    in the environment's ``site-packages``, where every later run reads them."""
    env = dict(env_for(pristine))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPYCACHEPREFIX", None)
    subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                    "no:cacheprovider", "tests/test_spec.py"], cwd=pristine, env=env,
                   capture_output=True, check=False)


MOVES_FILE = HERE / "moves.txt"


def load_moves(path: Path = MOVES_FILE) -> dict[str, list[str]]:
    """The recorded moves (``moves.txt``): old path -> the paths its lines may now be in.

    One move a line, ``OLD -> NEW [NEW ...]`` (paths from the repository root; several NEW
    when a file was split); ``#`` starts a comment. A NEW may itself have moved later: the
    runner follows the chain (:func:`move_targets`)."""
    moves: dict[str, list[str]] = {}
    if not path.is_file():
        return moves
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.partition("#")[0].strip()
        if not line:
            continue
        old, arrow, new = line.partition("->")
        targets = new.split()
        if not arrow or len(old.split()) != 1 or not targets:
            raise ValueError(f"{path.name}:{number}: expected 'OLD -> NEW [NEW ...]': {raw!r}")
        moves.setdefault(old.strip(), []).extend(targets)
    return moves


def move_targets(path: str, moves: dict[str, list[str]], root: Path) -> list[str]:
    """The existing files under ``root`` that ``path`` moved to, following chains of moves in
    the order recorded; ``[path]`` when it still exists, ``[]`` when it is gone unrecorded."""
    found: list[str] = []
    pending, seen = [path], set()
    while pending:
        current = pending.pop(0)
        if current in seen:
            continue
        seen.add(current)
        if (root / current).is_file():
            found.append(current)
        pending.extend(moves.get(current, []))
    return found


def _file_sections(patch_text: str) -> tuple[str, list[tuple[str, str]]]:
    """The patch's header lines, then one ``(path, text)`` per file it changes (its path
    from the ``--- a/PATH`` line)."""
    lines = patch_text.splitlines(keepends=True)
    starts = [
        i
        for i, line in enumerate(lines)
        if line.startswith("--- a/") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")
    ]
    # A `diff --git` line just above a section belongs to it.
    starts = [i - 1 if i and lines[i - 1].startswith("diff --git ") else i for i in starts]
    if not starts:
        return patch_text, []
    sections = []
    for begin, end in zip(starts, [*starts[1:], len(lines)], strict=True):
        text = "".join(lines[begin:end])
        path = next(ln for ln in lines[begin:end] if ln.startswith("--- a/"))[6:].strip()
        sections.append((path, text))
    return "".join(lines[: starts[0]]), sections


def _retarget(section: str, old: str, new: str) -> str:
    return "".join(
        line.replace(f"a/{old}", f"a/{new}").replace(f"b/{old}", f"b/{new}")
        if line.startswith(("--- ", "+++ ", "diff --git "))
        else line
        for line in section.splitlines(keepends=True)
    )


def _git_apply(copy: Path, patch: Path, check: bool) -> str | None:
    out = subprocess.run(
        ["git", "apply", "--verbose", *(["--check"] if check else []), str(patch)],
        cwd=copy,
        capture_output=True,
        text=True,
    )
    return None if out.returncode == 0 else (out.stderr or out.stdout).strip()


def follow_moves(copy: Path, patch_text: str, moves: dict[str, list[str]]) -> str:
    """``patch_text`` with each file that moved re-targeted to the first file it moved to
    (:func:`move_targets`) where that file's hunks apply: a file that still exists (the part
    of a split that kept the old path) is tried first, so a patch whose hunks still apply
    there is left as it was. A section that applies nowhere is left as it was, so ``git
    apply`` names it."""
    header, sections = _file_sections(patch_text)
    out = [header]
    for path, text in sections:
        if path not in moves:
            out.append(text)
            continue
        for target in move_targets(path, moves, copy):
            candidate = text if target == path else _retarget(text, path, target)
            probe = scratch_path(copy, ".patch")
            probe.write_text(candidate, encoding="utf-8")
            if _git_apply(copy, probe, check=True) is None:
                text = candidate
                break
        out.append(text)
    return "".join(out)


def apply_patch(copy: Path, patch: Path, moves: dict[str, list[str]] | None = None) -> str | None:
    """Apply ``patch`` in ``copy``, its files re-targeted along the recorded moves
    (:func:`follow_moves`); return an error message, or None when it applied."""
    text = follow_moves(copy, patch.read_text(encoding="utf-8"), load_moves() if moves is None else moves)
    moved = scratch_path(copy, ".patch")
    moved.write_text(text, encoding="utf-8")
    for check in (True, False):
        error = _git_apply(copy, moved, check)
        if error is not None:
            return error
    return None


def follow_selection(selection: list[str], moves: dict[str, list[str]], root: Path) -> list[str]:
    """A ``must-fail`` selection with each test file that moved (to exactly one existing
    file) named by its new path."""
    out = []
    for arg in selection:
        path = file_of(arg)
        if not arg.startswith("-") and not (root / path).is_file():
            targets = move_targets(path, moves, root)
            if len(targets) == 1:
                arg = targets[0] + arg[len(path):]
        out.append(arg)
    return out


_run_ids = itertools.count()
_run_ids_lock = threading.Lock()


def scratch_path(copy: Path, suffix: str = "") -> Path:
    """A fresh name under ``copy``'s sibling ``_tmp`` folder (which this makes)."""
    with _run_ids_lock:
        path = copy.parent / "_tmp" / f"{next(_run_ids)}{suffix}"
    path.parent.mkdir(exist_ok=True)
    return path


def run_pytest(
    copy: Path, selection: list[str], timeout: float, *, stop_at_first_failure: bool = True
) -> tuple[int, str]:
    """Run one selection in ``copy`` (with ``-x`` unless told otherwise); its own
    ``--basetemp``, so concurrent runs never share (or clean up) each other's temporary
    folders. A test still running at 80% of ``timeout`` has its stack dumped (pytest's
    ``faulthandler_timeout``), and a run that times out reports the output it had, so a hang
    names the line it hung on."""
    basetemp = scratch_path(copy)  # pytest makes basetemp itself, not its parents
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *(["-x"] if stop_at_first_failure else []),
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        f"faulthandler_timeout={max(1, int(timeout * 0.8))}",
        f"--basetemp={basetemp}",
        *selection,
    ]
    try:
        out = subprocess.run(
            cmd,
            cwd=copy,
            env=env_for(copy),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as expired:
        partial = "".join(
            part.decode(errors="replace") if isinstance(part, bytes) else part
            for part in (expired.stdout, expired.stderr) if part)
        return -1, f"timed out after {timeout:.0f}s\n{innermost_frames(partial)}"
    return out.returncode, out.stdout + out.stderr


def innermost_frames(output: str, frames: int = 12) -> str:
    """The first ``frames`` lines of the last faulthandler dump in a pytest run's output (the
    innermost frames come first), or the output's last lines when it has none."""
    lines = output.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Timeout (")]
    if not starts:
        return "\n".join(lines[-frames:])
    return "\n".join(lines[starts[-1]:starts[-1] + frames])


def show(selection: list[str]) -> str:
    """The selection as typed: quotes only around parts with spaces."""
    return " ".join(shlex.quote(a) if any(c.isspace() for c in a) else a for a in selection)


def tail(text: str, n: int = 15) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines()[-n:])


def describe(rc: int) -> str:
    return PYTEST_EXIT.get(rc, "timeout" if rc == -1 else f"exit {rc}")


def batchable(selection: list[str], copy: Path) -> tuple[list[str], str | None] | None:
    """The selection's positional arguments and its ``-k`` expression (or None), when a batch
    can stand for it: positional arguments that name existing ``.py`` files in ``copy`` (with
    or without ``::`` parts) plus at most one ``-k``. None for anything else (another option,
    a folder, a missing file): such a selection runs alone."""
    args: list[str] = []
    keyword: str | None = None
    rest = iter(selection)
    for arg in rest:
        if arg.startswith("-k"):
            value = arg[2:] or next(rest, None)
            if keyword is not None or value is None or value.startswith("-"):
                return None
            keyword = value
        elif arg.startswith("-"):
            return None
        else:
            args.append(arg)
    if not args or not all(
        (copy / file_of(arg)).is_file() and file_of(arg).endswith(".py") for arg in args
    ):
        return None
    return args, keyword


def file_of(arg: str) -> str:
    """The path part of a pytest positional argument (``path::name[param]``)."""
    return arg.partition("[")[0].split("::")[0]


def plan_baselines(
    selections: dict[str, list[str]], copy: Path, batches: int
) -> tuple[list[dict[str, list[str]]], list[str]]:
    """Split the selections (label -> arguments) into at most ``batches`` batches of about the
    same number of selections, the selections of one file always in the same batch (the file
    is collected once), and the labels of those that run alone (see :func:`batchable`)."""
    by_files: dict[tuple[str, ...], dict[str, list[str]]] = {}
    alone: list[str] = []
    for label, selection in selections.items():
        parsed = batchable(selection, copy)
        if parsed is None:
            alone.append(label)
        else:
            files = tuple(sorted({file_of(arg) for arg in parsed[0]}))
            by_files.setdefault(files, {})[label] = selection
    planned: list[dict[str, list[str]]] = [{} for _ in range(batches)]
    # The files with most selections first, each to the batch with fewest so far.
    for files in sorted(by_files, key=lambda files: (-len(by_files[files]), files)):
        min(planned, key=len).update(by_files[files])
    return [batch for batch in planned if batch], alone


def batch_verdicts(results: Path, rc: int, count: int) -> list[bool]:
    """Per selection of a batch, whether the batch showed it green: it claimed at least one
    test and each of those passed its setup, call and teardown (an xfail, xpass or skip is not
    a pass here). All False unless pytest ended with exit 0 or 1 (a collection error, crash,
    timeout or usage error leaves nothing attributable) and the plugin wrote its claims."""
    if rc not in (PYTEST_OK, PYTEST_FAILED) or not results.is_file():
        return [False] * count
    claims: list[list[str]] | None = None
    reports: dict[str, list[tuple[str, str, bool]]] = {}
    for line in results.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if "claims" in record:
            claims = record["claims"]
        else:
            reports.setdefault(record["nodeid"], []).append(
                (record["when"], record["outcome"], record["wasxfail"])
            )
    if claims is None or len(claims) != count:
        return [False] * count

    def passed(nodeid: str) -> bool:
        seen = reports.get(nodeid, [])
        return {when for when, _, _ in seen} == {"setup", "call", "teardown"} and all(
            outcome == "passed" and not wasxfail for _, outcome, wasxfail in seen
        )

    return [bool(nodeids) and all(map(passed, nodeids)) for nodeids in claims]


@dataclass
class BatchOutcome:
    """The baselines of one batch (label -> exit code and log, as a run alone gives them)
    and how they were reached."""

    baselines: dict[str, tuple[int, str]]
    green_in_batch: int
    run_alone: list[str]
    batch_rc: int
    batch_log: str
    batch_seconds: float


def run_batch(copy: Path, batch: dict[str, list[str]], timeout: float) -> BatchOutcome:
    """One pytest run (no ``-x``) for every selection of ``batch`` (label -> arguments, each
    :func:`batchable`), then each selection it did not show green run alone, as before
    batching: so a red baseline's exit code and log are its own, and a selection that
    collects nothing gets pytest's own exit 4 or 5."""
    labels = list(batch)
    parsed = []
    for label in labels:
        args_and_keyword = batchable(batch[label], copy)
        if args_and_keyword is None:
            raise ValueError(f"not a batchable selection: {label}")
        parsed.append(args_and_keyword)
    spec, results = scratch_path(copy, ".json"), scratch_path(copy, ".jsonl")
    spec.write_text(
        json.dumps(
            {
                "selections": [{"args": args, "keyword": keyword} for args, keyword in parsed],
                "results": str(results),
            }
        ),
        encoding="utf-8",
    )
    files = list(dict.fromkeys(file_of(arg) for args, _ in parsed for arg in args))
    began = time.monotonic()
    rc, log = run_pytest(
        copy,
        ["-p", BATCH_PLUGIN, f"--mutant-batch={spec}", *files],
        timeout,
        stop_at_first_failure=False,
    )
    seconds = time.monotonic() - began
    green = batch_verdicts(results, rc, len(labels))
    baselines = {label: (PYTEST_OK, "") for label, ok in zip(labels, green, strict=True) if ok}
    alone = [label for label in labels if label not in baselines]
    for label in alone:
        baselines[label] = run_pytest(copy, batch[label], timeout)
    return BatchOutcome(baselines, len(labels) - len(alone), alone, rc, log, seconds)


#: The package whose modules numba compiles (``mxformats.fast.jit``): a patch of a file in it
#: (or of a file that moved there) gets no shared compiled code.
COMPILED_PACKAGE = "mxformats/fast"


def share_compiled_cache(pristine: Path, copy: Path, patch: Path) -> int:
    """Copy the numba cache the pristine copy's runs have written so far (``*.nbi``/``*.nbc``
    in ``__pycache__`` of :data:`COMPILED_PACKAGE`) into ``copy``, unless ``patch`` touches
    that package: numba checks a cached function against its source file's size and mtime
    (``copy2`` keeps both) and its bytecode, but not against the functions it calls from other
    files, so a patched compiled module must compile afresh. Returns the files copied. A
    copy without them compiles what it uses (seconds per mutant, not a wrong answer)."""
    _, sections = _file_sections(patch.read_text(encoding="utf-8"))
    moves = load_moves()
    paths = {p for path, _ in sections for p in (path, *moves.get(path, []))}
    if any(p.startswith(COMPILED_PACKAGE) for p in paths):
        return 0
    copied = 0
    for cached in (pristine / COMPILED_PACKAGE / "__pycache__").glob("*.nb[ic]"):
        target = copy / cached.relative_to(pristine)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(cached, target)
        copied += 1
    return copied


def run_mutant(
    mutant: Mutant, work: Path, timeout: float, keep: bool
) -> str | list[tuple[int, str]]:
    """Apply the patch in a fresh copy (with the pristine copy's compiled code where the patch
    allows, :func:`share_compiled_cache`) and run each selection there: the patch error, or
    one ``(exit code, log)`` per selection. The copy is removed afterwards unless ``keep``."""
    copy = work / mutant.name
    copy_repo(copy)
    share_compiled_cache(work / "_pristine", copy, mutant.path)
    try:
        error = apply_patch(copy, mutant.path)
        if error is not None:
            return error
        return [run_pytest(copy, selection, timeout) for selection in mutant.must_fail]
    finally:
        if not keep:
            shutil.rmtree(copy, ignore_errors=True)


def judge(
    mutant: Mutant,
    runs: str | list[tuple[int, str]],
    baselines: dict[str, tuple[int, str]],
) -> list[Row]:
    """One row per selection: caught only when its baseline is green and the mutant red."""
    if isinstance(runs, str):
        return [Row(mutant.name, "-", "PATCH FAILED", False, [runs])]
    rows = []
    for selection, (rc, log) in zip(mutant.must_fail, runs, strict=True):
        label = show(selection)
        base_rc, base_log = baselines[label]
        if base_rc != PYTEST_OK:
            rows.append(
                Row(
                    mutant.name,
                    label,
                    "BASELINE RED",
                    False,
                    [f"unpatched run: {describe(base_rc)}", tail(base_log)],
                )
            )
        elif rc == PYTEST_FAILED:
            rows.append(Row(mutant.name, label, "yes", True))
        elif rc == PYTEST_OK:
            rows.append(Row(mutant.name, label, "NO (survived)", False))
        else:
            rows.append(
                Row(mutant.name, label, "ERROR", False, [f"mutant run: {describe(rc)}", tail(log)])
            )
    return rows


def check_all(
    mutants: list[Mutant], pristine: Path, work: Path, timeout: float, jobs: int, keep: bool
) -> list[Row]:
    """Every distinct baseline selection once and every mutant, ``jobs`` pytest runs at once.

    The baselines go first: ``jobs`` batches (:func:`run_batch`, each followed by its selections
    to run alone) and the selections no batch can stand for (:func:`batchable`), so a mutant's
    verdict never waits on a baseline that has not started; a mutant's runs do not wait for its
    baselines at all (they are judged together at the end). Progress lines are printed as
    batches and mutants finish."""
    selections = {show(sel): sel for m in mutants for sel in m.must_fail}
    batches, alone = plan_baselines(selections, pristine, jobs)
    start = time.monotonic()

    def batch_task(number: int, batch: dict[str, list[str]]) -> dict[str, tuple[int, str]]:
        outcome = run_batch(pristine, batch, timeout)
        print(
            f"[{time.monotonic() - start:6.0f}s] baseline batch {number}/{len(batches)}: "
            f"{len(batch)} selections in one pytest run ({describe(outcome.batch_rc)}, "
            f"{outcome.batch_seconds:.0f}s), {outcome.green_in_batch} green there"
            + (f"; run alone: {', '.join(outcome.run_alone)}" if outcome.run_alone else ""),
            flush=True,
        )
        if outcome.batch_rc not in (PYTEST_OK, PYTEST_FAILED):  # it told nothing: say why
            print(tail(outcome.batch_log), flush=True)
        for label in outcome.run_alone:
            if outcome.baselines[label][0] == PYTEST_OK:
                print(f"    note: {label} passed alone, not in its batch", flush=True)
        return outcome.baselines

    def mutant_task(mutant: Mutant) -> str | list[tuple[int, str]]:
        began = time.monotonic()
        runs = run_mutant(mutant, work, timeout, keep)
        verdicts = (
            "PATCH FAILED"
            if isinstance(runs, str)
            else ", ".join(
                {PYTEST_FAILED: "red", PYTEST_OK: "green"}.get(rc, describe(rc)) for rc, _ in runs
            )
        )
        print(
            f"[{time.monotonic() - start:6.0f}s] {mutant.name}: {mutant.description} "
            f"[mutant runs: {verdicts}] ({time.monotonic() - began:.1f}s)",
            flush=True,
        )
        return runs

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        batch_futures = [
            pool.submit(batch_task, number, batch) for number, batch in enumerate(batches, 1)
        ]
        alone_futures = {
            label: pool.submit(run_pytest, pristine, selections[label], timeout) for label in alone
        }
        mutant_futures = [(m, pool.submit(mutant_task, m)) for m in mutants]
        baselines: dict[str, tuple[int, str]] = {}
        for batch_future in batch_futures:
            baselines.update(batch_future.result())
        baselines.update({label: f.result() for label, f in alone_futures.items()})
        red = [label for label, (rc, _) in baselines.items() if rc != PYTEST_OK]
        print(
            f"[{time.monotonic() - start:6.0f}s] baselines: "
            f"{len(baselines) - len(red)}/{len(baselines)} distinct selections green "
            f"({len(selections) - len(alone)} in {len(batches)} batch(es), {len(alone)} alone)",
            flush=True,
        )
        rows: list[Row] = []
        for m, f in mutant_futures:
            rows += judge(m, f.result(), baselines)
    return rows


def print_table(rows: list[Row]) -> None:
    headers = ("mutant", "test", "caught")
    cells = [headers, *((r.mutant, r.test, r.caught) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(3)]
    line = "  ".join("-" * w for w in widths)
    print(line)
    for i, c in enumerate(cells):
        print("  ".join(x.ljust(w) for x, w in zip(c, widths, strict=True)).rstrip())
        if i == 0:
            print(line)
    print(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help="patch file stems to run")
    parser.add_argument("--list", action="store_true", help="list mutants and exit")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per pytest run")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copies")
    parser.add_argument(
        "--jobs",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="pytest runs at once (default: the usable cores)",
    )
    args = parser.parse_args(argv)

    try:
        mutants = discover()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.list:
        for m in mutants:
            print(f"{m.name}: {m.description}")
            for sel in m.must_fail:
                print(f"    must-fail: {show(sel)}")
        return 0
    if args.names:
        known = {m.name: m for m in mutants}
        unknown = [n for n in args.names if n not in known]
        if unknown:
            print(f"error: unknown mutant(s): {', '.join(unknown)}; try --list", file=sys.stderr)
            return 2
        mutants = [known[n] for n in args.names]
    if not mutants:
        print(f"no mutants (*.patch) in {HERE.relative_to(ROOT)}: nothing to check")
        return 0

    work = Path(tempfile.mkdtemp(prefix="mxformats-mutants-"))
    try:
        pristine = work / "_pristine"
        copy_repo(pristine)
        check_imports(pristine)
        print(f"sanity: mxformats and mxformats.kernels import from the copy under {work}")
        prime_rewrite_cache(pristine)
        start = time.monotonic()
        rows = check_all(mutants, pristine, work, args.timeout, max(1, args.jobs), args.keep)
        elapsed = time.monotonic() - start
    finally:
        if args.keep:
            print(f"kept copies under {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    print()
    print_table(rows)
    for r in rows:
        if r.notes:
            print(f"\n{r.mutant} | {r.test} | {r.caught}")
            for note in r.notes:
                print(note)
    bad = [r for r in rows if not r.ok]
    caught = {m.name for m in mutants} - {r.mutant for r in bad}
    print(
        f"\n{len(caught)}/{len(mutants)} distinct patches caught (every selection red)"
        + (f", {len(mutants) - len(caught)} not" if bad else "")
        + f"; {len(rows) - len(bad)}/{len(rows)} (patch, selection) pairs"
        + f"; {elapsed:.0f}s with --jobs {max(1, args.jobs)}"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
