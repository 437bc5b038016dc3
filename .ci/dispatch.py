"""The spec drift check and the fast-path tests once per numpy CPU dispatch level of this host.

numpy compiles some loops several times, one per SIMD level, and picks at import the best one
the CPU has ("dispatch"; numpy 2.4 names the x86 levels ``X86_V3`` (AVX2), ``X86_V4``
(AVX-512), ``AVX512_ICL`` and ``AVX512_SPR`` above the ``X86_V2`` baseline). The results are not
always the same bits: which of two equal keys a sort keeps (-0.0 and +0.0, NaN payloads, the
order ``argsort`` gives ties), ``exp``/``log``/``sin``... So a spec generator or a fast path
that leans on one of them writes different bytes on different CPUs (issue 26 §6: the E4M3FN
encode vectors differed on an AVX2 host). ``NPY_DISABLE_CPU_FEATURES`` holds numpy back from
a level, so one host runs what the hosts below it run: this script runs every command once
per level, from the host's own down to the baseline (the levels above each one disabled),
checks in each run that numpy really left those levels off (it ignores a name it does not
know), and fails if any command fails at any level.

    python .ci/dispatch.py          # every level: specgen --check, tests/test_fast.py
    python .ci/dispatch.py --list   # the levels and what each disables, nothing run

Run from the repository root with the test venv active (``.ci/run`` does).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

#: What runs at every level: the spec must come out byte for byte as committed, and every
#: fast path must give the reference's bytes (tests/test_fast.py runs the harness,
#: mxformats/testing/harness.py, on each of them).
COMMANDS: tuple[tuple[str, ...], ...] = (
    ("-m", "mxformats.specgen", "--check"),
    ("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_fast.py"),
)

#: Prints the dispatch targets numpy enabled, in numpy's order, low to high.
_ENABLED = (
    "from numpy._core._multiarray_umath import __cpu_dispatch__ as d, __cpu_features__ as f; "
    "print(' '.join(x for x in d if f.get(x)))"
)


@dataclass(frozen=True)
class Level:
    """One dispatch level: its name, the features disabled to reach it, those left on."""

    name: str
    disabled: tuple[str, ...]
    enabled: tuple[str, ...]

    @property
    def environment(self) -> str:
        """The value of ``NPY_DISABLE_CPU_FEATURES`` for this level ("" for the host's own)."""
        return ",".join(self.disabled)


def levels(found: Sequence[str], baseline: Sequence[str]) -> list[Level]:
    """The levels of a host whose CPU has the dispatch targets ``found`` (numpy's order, low
    to high) above ``baseline``: the highest first, each next one with one more target off,
    the baseline last."""
    out = []
    for top in range(len(found), -1, -1):
        name = found[top - 1] if top else f"baseline ({' '.join(baseline) or 'none'})"
        out.append(Level(name, tuple(found[top:]), tuple(found[:top])))
    return out


def enabled(disable: str) -> tuple[str, ...]:
    """The dispatch targets numpy enables in a fresh process under
    ``NPY_DISABLE_CPU_FEATURES=disable``."""
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": disable}
    out = subprocess.run([sys.executable, "-c", _ENABLED], env=env, check=True,
                         capture_output=True, text=True).stdout
    return tuple(out.split())


def host_levels() -> list[Level]:
    """This host's levels (numpy's own view, with no feature disabled)."""
    from numpy._core._multiarray_umath import __cpu_baseline__

    return levels(enabled(""), list(__cpu_baseline__))


def check_level(level: Level) -> None:
    """RuntimeError unless numpy, told to disable ``level.disabled``, enables exactly
    ``level.enabled`` (a name numpy does not know is ignored silently)."""
    got = enabled(level.environment)
    if got != level.enabled:
        raise RuntimeError(
            f"NPY_DISABLE_CPU_FEATURES={level.environment!r} leaves numpy with "
            f"{' '.join(got) or 'nothing'} enabled, not {' '.join(level.enabled) or 'nothing'}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python .ci/dispatch.py", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--list", action="store_true", help="list the levels, run nothing")
    args = parser.parse_args(argv)
    found = host_levels()
    for level in found:
        print(f"level {level.name}: NPY_DISABLE_CPU_FEATURES={level.environment!r}")
    if args.list:
        return 0
    failed: list[str] = []
    for level in found:
        check_level(level)
        env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": level.environment}
        for command in COMMANDS:
            line = " ".join(("python", *command))
            print(f"\n==> [{level.name}] {line}", flush=True)
            start = time.monotonic()
            rc = subprocess.run([sys.executable, *command], env=env, check=False).returncode
            print(f"--> [{level.name}] exit {rc} in {time.monotonic() - start:.0f}s", flush=True)
            if rc != 0:
                failed.append(f"{level.name}: {line} (exit {rc})")
    names = ", ".join(level.name for level in found)
    if failed:
        print(f"\nFAILED at some dispatch levels (of {names}):\n  " + "\n  ".join(failed))
        return 1
    print(f"\nevery command passed at each of the {len(found)} dispatch levels: {names}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
