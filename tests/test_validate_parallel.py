"""Per-module work (``numbers.module_numbers``, run by the tasks of
:mod:`mxformats.validate.tasks` in any order and on any worker) keeps module order when
combined, and an exception in one module becomes that module's INTERNAL_ERROR
(``mxformats.validate.parallel.internal``) while the others run."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mxformats.testing.checkpoints import make_kimi_checkpoint
from mxformats.validate import numbers
from mxformats.validate.files import load
from mxformats.validate.findings import MAX_LISTED, Finding, Level
from mxformats.validate.model import Checkpoint, Module, Options
from mxformats.validate.parallel import INTERNAL_ERROR

OPTS = Options(level=Level.SCALES, workers=1)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Checkpoint:
    folder = make_kimi_checkpoint(tmp_path_factory.mktemp("parallel") / "ckpt", "quark-mxfp4")
    loaded = load(folder, Options()).ckpt
    assert loaded is not None and len(numbers.quantized_modules(loaded)) > 4
    return loaded


def _name_or_crash(crash: str) -> Callable[..., Iterator[Finding]]:
    def scale_findings(ckpt: Checkpoint, mod: Module, arrays: Any) -> Iterator[Finding]:
        if mod.name == crash:
            raise RuntimeError(f"crash in {mod.name}")
        yield Finding(INTERNAL_ERROR, "seen", tensor=mod.name)
    return scale_findings


@pytest.mark.parametrize("arrival", ["in-order", "reversed"])
def test_findings_in_module_order_and_one_crash_isolated(
        ckpt: Checkpoint, arrival: str, monkeypatch: pytest.MonkeyPatch) -> None:
    names = [m.name for m in numbers.quantized_modules(ckpt)]
    assert len(names) > MAX_LISTED
    crash = names[MAX_LISTED // 2]
    assert ckpt.descriptor is not None
    monkeypatch.setattr(ckpt.descriptor, "scale_findings", _name_or_crash(crash))
    outcomes = [numbers.module_numbers(ckpt, OPTS, ckpt.modules[n]) for n in names]
    if arrival == "reversed":  # tasks finish in any order
        outcomes.reverse()
    found = [f for f in numbers.run(ckpt, OPTS, outcomes) if f.check is INTERNAL_ERROR]
    # the first MAX_LISTED modules in order, the crash in its place, then the rest counted
    assert [f.tensor for f in found] == [*names[:MAX_LISTED], None]
    assert found[-1].message.startswith(f"{len(names) - MAX_LISTED} more like the above")
    failed = [f for f in found[:-1] if f.message != "seen"]
    assert len(failed) == 1 and failed[0].check is INTERNAL_ERROR
    assert failed[0].tensor == crash and f"RuntimeError: crash in {crash}" in failed[0].message
