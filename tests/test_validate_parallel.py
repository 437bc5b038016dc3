"""``mxformats.validate.parallel``: a per-module check over worker threads keeps module order,
and an exception in one module becomes that module's INTERNAL_ERROR while the others run."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import pytest

from mxformats.testing.checkpoints import make_kimi_checkpoint
from mxformats.validate.files import load
from mxformats.validate.findings import Finding
from mxformats.validate.model import Checkpoint, Module, Options
from mxformats.validate.parallel import INTERNAL_ERROR, for_each_module


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Checkpoint:
    folder = make_kimi_checkpoint(tmp_path_factory.mktemp("parallel") / "ckpt", "bf16")
    loaded = load(folder, Options()).ckpt
    assert loaded is not None and len(loaded.modules) > 4
    return loaded


def _name_or_crash(crash: str) -> Callable[[Module], Iterable[Finding]]:
    def fn(mod: Module) -> Iterator[Finding]:
        if mod.name == crash:
            raise RuntimeError(f"crash in {mod.name}")
        yield Finding(INTERNAL_ERROR, "seen", tensor=mod.name)
    return fn


@pytest.mark.parametrize("workers", [1, 4])
def test_findings_in_module_order_and_one_crash_isolated(ckpt: Checkpoint, workers: int) -> None:
    names = list(ckpt.modules)
    crash = names[len(names) // 2]
    found = list(for_each_module(ckpt, Options(workers=workers), _name_or_crash(crash)))
    assert [f.tensor for f in found] == names  # every module, in order, the crash in its place
    failed = [f for f in found if f.message != "seen"]
    assert len(failed) == 1 and failed[0].check is INTERNAL_ERROR
    assert failed[0].tensor == crash and f"RuntimeError: crash in {crash}" in failed[0].message
