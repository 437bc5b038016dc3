"""What the ModelOpt formats share: two config forms and wildcard exclude entries.

Both forms are read by vLLM ``ModelOptQuantConfigBase.from_config``
(``vllm/model_executor/layers/quantization/modelopt.py``, commit
00155cdecca722d98e34234c3d172725b7720b7d): ``hf_quant_config.json`` ``{"quantization":
{"quant_algo": ..., "group_size": ..., "exclude_modules": [...]}}``, and a flat
``quantization_config`` in config.json ``{"quant_method": "modelopt", "quant_algo": ...,
"ignore": [...]}``. The exclude entries are ModelOpt wildcards (:class:`ModelOptMatcher`).
vLLM reads config.json's ``quantization_config`` when it has one and hf_quant_config.json only
otherwise, so the two must agree (``CONFIG_QUANT_CONTRADICTION``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..excludes import ExcludeMatcher
from .base import Configs, Descriptor, ModelOptMatcher

__all__ = ["ModelOptDescriptor", "modelopt_view"]


def modelopt_view(cfg: Mapping[str, Any] | None) -> tuple[str, list[str], Any] | None:
    """``(quant_algo upper-cased, exclude entries, group_size)`` of a ModelOpt config in either
    form, as vLLM's ``from_config`` reads it; None when ``cfg`` is not ModelOpt."""
    if not isinstance(cfg, Mapping):
        return None
    nested = cfg.get("quantization")
    if isinstance(nested, Mapping):
        entries = nested.get("exclude_modules", [])
        return (str(nested.get("quant_algo", "")).upper(),
                [str(e) for e in entries] if isinstance(entries, list) else [],
                nested.get("group_size"))
    if not str(cfg.get("quant_method", "")).lower().startswith("modelopt"):
        return None
    entries = cfg.get("ignore", [])
    return (str(cfg.get("quant_algo", "")).upper(),
            [str(e) for e in entries] if isinstance(entries, list) else [], _flat_group_size(cfg))


def _flat_group_size(cfg: Mapping[str, Any]) -> Any:
    """The flat form's ``group_size`` as vLLM reads it: the top-level key, else the first
    config group's ``weights.group_size`` (``ModelOptQuantConfigBase.from_config``, commit
    00155cdecca722d98e34234c3d172725b7720b7d: "If group_size is not at top level, try to
    extract from config_groups")."""
    if cfg.get("group_size") is not None:
        return cfg["group_size"]
    groups = cfg.get("config_groups")
    first = next(iter(groups.values()), None) if isinstance(groups, Mapping) else None
    weights = first.get("weights") if isinstance(first, Mapping) else None
    return weights.get("group_size") if isinstance(weights, Mapping) else None


class ModelOptDescriptor(Descriptor):
    """Detection by ``quant_algo`` (one of :attr:`algos`) in either config form, and the
    wildcard exclude list."""

    algos: tuple[str, ...] = ()

    def _view(self, configs: Configs) -> tuple[str, list[str], Any] | None:
        return modelopt_view(configs.quant_config) if configs.quant_config is not None \
            else modelopt_view(configs.hf_quant_config)

    def detect(self, configs: Configs) -> str | None:
        view = self._view(configs)
        if view is not None and view[0] in self.algos:
            return f"{self.detail}, quant_algo {view[0]}"
        return None

    def exclude_list(self, configs: Configs) -> list[str]:
        view = self._view(configs)
        return view[1] if view is not None else []

    def matcher(self, entries: list[str]) -> ExcludeMatcher:
        return ModelOptMatcher(entries)
