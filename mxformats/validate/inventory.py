"""What a task's worker knows of the checkpoint: the spans of the tensors it reads, parsed once.

The driver loads every shard header (the checks that run there need them all: about 1.5 s and
240 MB for the 139,098 tensors of a full-size Kimi-K2.6); a task's worker needs only the
tensors of the modules it checks. :func:`inventory` cuts one :class:`Inventory` out of the
loaded :class:`~.model.Checkpoint` for a group of modules:

- the checkpoint's :class:`Facts`: its quantization config, format and descriptor,
  architecture and the names of its shards (what a descriptor decides a module's role, its
  member format and its expected tensors from; the same for every task of a run). Not
  config.json itself: no per-module check reads it, and a hostile one may nest too deep to
  pickle; a worker's checkpoint has an empty ``config`` and ``text_config``;
- the span of each tensor of those modules and of their siblings (:class:`~.model.TensorRef`:
  file, absolute offsets, dtype, shape): the modules under the same parent, which the
  per-module checks read beside a module (the reproduction of a module calibrated with its
  fused siblings reads their source weights; the NVFP4 engine decode reads its fused
  partner's global scale, ``nvfp4_fused.partner``);
- the modules the config implies for them (:class:`~.model.ExpectedModule`: the source
  weight's shape a reproduction expects);
- per per-module check, the modules of the group it checks (the driver decides that over the
  whole checkpoint: ``--sample`` picks from every quantized module).

:meth:`Inventory.checkpoint` makes a :class:`~.model.Checkpoint` of exactly that, reading
through the worker's reader: no shard header is opened, parsed or held there. The spans are
the driver's view of the files, as the checks that run in the driver read them; ``--resume``
reruns a task whose files changed since (:func:`~.tasks.task_key` covers their stamp).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .model import (
    Architecture,
    Checkpoint,
    CheckpointFormat,
    ExpectedModule,
    TensorRef,
    modules_of,
)

if TYPE_CHECKING:
    from .descriptors.base import Descriptor
    from .readers import Reader

__all__ = ["Facts", "Inventory", "families", "inventory"]


@dataclass(frozen=True)
class Facts:
    """A checkpoint's small facts, as the loader found them (the fields of
    :class:`~.model.Checkpoint` of the same names), and ``digest``: sha256 of the stamps of
    the files a worker prepares its states from (``stamps``: config.json's and the
    ``--source`` files': name, size and modification time; a Hub checkpoint's root names
    its commit), so that a worker that serves run after run tells a run whose reader and
    states it holds from another."""

    root: Path
    format: CheckpointFormat
    format_detail: str
    descriptor: Descriptor | None
    quant_config: dict[str, Any] | None
    exclude: tuple[str, ...]
    arch: Architecture | None
    arch_problem: str | None
    shards: tuple[str, ...]
    unreadable: frozenset[str]
    allowed_roots: tuple[Path, ...]
    digest: str = ""

    @classmethod
    def of(cls, ckpt: Checkpoint, stamps: Sequence[Sequence[Any]] = ()) -> Facts:
        """The facts of ``ckpt``, with the digest of ``stamps``."""
        return cls(ckpt.root, ckpt.format, ckpt.format_detail, ckpt.descriptor,
                   ckpt.quant_config, tuple(ckpt.exclude), ckpt.arch, ckpt.arch_problem,
                   tuple(ckpt.shards), frozenset(ckpt.unreadable), ckpt.allowed_roots,
                   hashlib.sha256(json.dumps([str(ckpt.root), *stamps]).encode()).hexdigest())


@dataclass(frozen=True)
class Inventory:
    """What one task's worker knows of the checkpoint (the module docstring): the ``facts``,
    the spans of the ``tensors`` it may read, the ``expected`` modules of those, and
    ``checked``: per per-module check (in :data:`~.checks.PER_MODULE` order), the task's
    modules it checks, in task order."""

    facts: Facts
    tensors: tuple[TensorRef, ...]
    expected: tuple[ExpectedModule, ...]
    checked: tuple[tuple[str, ...], ...]

    def checkpoint(self, reader: Reader | None) -> Checkpoint:
        """A :class:`~.model.Checkpoint` of this inventory read through ``reader`` (None: a
        local reader of the root, made on the first read): its modules and tensors are the
        inventory's, nothing else; no file is opened."""
        f = self.facts
        ckpt = Checkpoint(
            root=f.root, config={}, text_config={}, format=f.format,
            format_detail=f.format_detail, descriptor=f.descriptor,
            quant_config=f.quant_config, exclude=list(f.exclude), arch=f.arch,
            arch_problem=f.arch_problem, shards=list(f.shards), unreadable=set(f.unreadable),
            allowed_roots=f.allowed_roots, reader=reader)
        ckpt.tensors = {t.name: t for t in self.tensors}
        ckpt.modules = modules_of(ckpt.tensors.items())
        ckpt.expected = {e.name: e for e in self.expected}
        return ckpt


def families(names: Iterable[str]) -> dict[str, list[str]]:
    """Module names by their parent (``...experts.3`` of ``...experts.3.down_proj``), each
    family in the order ``names`` gives."""
    out: dict[str, list[str]] = {}
    for name in names:
        out.setdefault(name.rpartition(".")[0], []).append(name)
    return out


def inventory(ckpt: Checkpoint, facts: Facts, family: Mapping[str, Sequence[str]],
              modules: Sequence[str], checked: Sequence[frozenset[str]]) -> Inventory:
    """The inventory of a task of ``modules`` (``family``: :func:`families` of every module
    of ``ckpt``; ``checked``: per per-module check, the modules it checks in the whole
    run): the spans of the tensors of ``modules`` and their siblings, in name order."""
    near = sorted({n for m in modules for n in family.get(m.rpartition(".")[0], (m,))})
    held = [ckpt.modules[n] for n in near if n in ckpt.modules]
    return Inventory(
        facts,
        tuple(t for module in held for t in module.tensors.values()),
        tuple(ckpt.expected[n] for n in near if n in ckpt.expected),
        tuple(tuple(m for m in modules if m in names) for names in checked),
    )
