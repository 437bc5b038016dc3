"""What the two AMD Quark formats share: the ``quant_method: quark`` config, its ``exclude``
list and the config keys vLLM's ``QuarkConfig`` rejects.

Source: vLLM ``vllm/model_executor/layers/quantization/quark/quark.py`` (``QuarkConfig``,
``from_config``) and ``quark/utils.py`` ``_is_equal_or_regex_match`` (commit
0a6c8da27be32d22a467948731b4ceda02264b80): exclude entries are exact names or ``re:`` regexes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .base import Configs, Descriptor

if TYPE_CHECKING:
    from ..model import Checkpoint

__all__ = ["QuarkDescriptor", "global_spec", "weight_spec"]


def global_spec(qc: Mapping[str, Any] | None, key: str) -> Any:
    """``global_quant_config[key]`` of a Quark config (None when absent)."""
    g = qc.get("global_quant_config") if qc else None
    return g.get(key) if isinstance(g, dict) else None


def weight_spec(configs: Configs) -> Any:
    """The Quark weight spec (a dict, or a list for two-stage schemes), None when not Quark."""
    qc = configs.quant_config
    if qc is None or qc.get("quant_method") != "quark":
        return None
    return global_spec(qc, "weight")


def want(out: list[str], obj: Any, key: str, value: object, where: str) -> None:
    """Append a problem when ``obj[key]`` is not ``value``."""
    got = obj.get(key) if isinstance(obj, dict) else None
    if got != value:
        out.append(f"{where}.{key} is {got!r}, the format needs {value!r}")


class QuarkDescriptor(Descriptor):
    """The Quark formats' detection, common config checks and ``exclude`` list; subclasses
    say which weight spec is theirs and what it must hold."""

    def matches_weight(self, weight: Any) -> bool:
        """Whether ``global_quant_config.weight`` is this format's."""
        raise NotImplementedError

    def weight_problems(self, qc: Mapping[str, Any]) -> list[str]:
        """Problems of the weight and input specs."""
        return []

    def detect(self, configs: Configs) -> str | None:
        return self.detail if self.matches_weight(weight_spec(configs)) else None

    def exclude_list(self, configs: Configs) -> list[str]:
        entries = (configs.quant_config or {}).get("exclude")
        return [str(e) for e in entries] if isinstance(entries, list) else []

    def config_problems(self, ckpt: Checkpoint) -> list[str]:
        qc = ckpt.quant_config or {}
        out: list[str] = []
        export = qc.get("export")
        if not isinstance(export, dict):
            out.append("export block is missing: vLLM's QuarkConfig raises")
        elif not isinstance(export.get("kv_cache_group", []), list):
            out.append("export.kv_cache_group must be a list")
        for key in ("output_tensors", "bias"):
            if global_spec(qc, key) is not None:
                out.append(f"global_quant_config.{key} must be null (vLLM: NotImplementedError)")
        return out + self.weight_problems(qc)
