"""What the compressed-tensors formats share: ``quant_method: compressed-tensors``, its
``config_groups`` (each a weight scheme and a storage ``format``), the ``ignore`` list (exact
names or ``re:`` regexes, compressed-tensors 0.20.1 ``utils/match.py`` ``match_name``) and the
keys vLLM's ``CompressedTensorsConfig`` reads (vLLM
``vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors.py``, commit
be696453ee1bf3b7a2f652cc457b340d5a20c88c).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from .base import Configs, Descriptor
from .quark import want

if TYPE_CHECKING:
    from ..model import Checkpoint

__all__ = ["CompressedTensorsDescriptor", "groups", "weight_schemes"]


def groups(qc: Mapping[str, Any] | None) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(name, group)`` of every well-formed config group."""
    found = qc.get("config_groups") if qc else None
    for name, group in found.items() if isinstance(found, dict) else ():
        if isinstance(group, dict):
            yield str(name), group


def weight_schemes(configs: Configs) -> list[tuple[str | None, dict[str, Any]]]:
    """``(storage format, weights scheme)`` per group of a compressed-tensors config (a group's
    own ``format`` wins over the top-level one); empty when not compressed-tensors."""
    qc = configs.quant_config
    if qc is None or qc.get("quant_method") != "compressed-tensors":
        return []
    top = qc.get("format")
    out: list[tuple[str | None, dict[str, Any]]] = []
    for _, group in groups(qc):
        w = group.get("weights")
        if isinstance(w, dict):
            fmt = group.get("format") or top
            out.append((str(fmt) if fmt is not None else None, w))
    return out


class CompressedTensorsDescriptor(Descriptor):
    """Common detection and config checks. ``storage``: the ``format`` value(s) the scheme is
    stored as; :meth:`matches_scheme` says whether a group's weights are this format's."""

    storage: tuple[str, ...] = ()
    #: ``(key, value)`` pairs each config group's ``weights`` must hold (CONFIG_QUANT otherwise)
    weight_requirements: tuple[tuple[str, object], ...] = ()

    def matches_scheme(self, weights: Mapping[str, Any]) -> bool:
        raise NotImplementedError

    def for_scheme(self, weights: Mapping[str, Any]) -> CompressedTensorsDescriptor:
        """The descriptor that checks a config group whose ``weights`` :meth:`matches_scheme`:
        this one, or its variant for what the scheme declares (the INT4 group size)."""
        return self

    def detect(self, configs: Configs) -> str | None:
        schemes = weight_schemes(configs)
        if schemes and all(self.matches_scheme(w) for _, w in schemes):
            return self.detail
        return None

    def config_problems(self, ckpt: Checkpoint) -> list[str]:
        qc = ckpt.quant_config or {}
        out: list[str] = []
        want(out, qc, "format", self.storage[0], "quantization_config")
        want(out, qc, "quantization_status", "compressed", "quantization_config")
        if qc.get("kv_cache_scheme") is not None:
            out.append("kv_cache_scheme must be null (k/v scale tensors are not handled)")
        for gname, group in groups(qc):
            where = f"config_groups.{gname}"
            member = self.group_member(group)
            if member is None:
                out.append(f"{where}: its weights scheme is not one mxformats verifies")
                continue
            fmt = group.get("format")
            if fmt is not None and fmt not in member.storage:
                out.append(f"{where}.format is {fmt!r}, not {member.storage[0]!r}")
            out += member.group_problems(where, group)
        return out

    def group_member(self, group: Mapping[str, Any]) -> CompressedTensorsDescriptor | None:
        """The descriptor a config group's scheme is checked against (this one, except in a
        mixed-precision checkpoint)."""
        return self

    def group_problems(self, where: str, group: Mapping[str, Any]) -> list[str]:
        """Problems of one config group's scheme: each :attr:`weight_requirements` pair its
        ``weights`` do not hold."""
        out: list[str] = []
        for key, value in self.weight_requirements:
            want(out, group.get("weights"), key, value, f"{where}.weights")
        return out
