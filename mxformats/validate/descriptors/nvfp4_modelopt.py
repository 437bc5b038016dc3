"""NVIDIA ModelOpt NVFP4 (``mtq.quantize`` + ``export_hf_checkpoint``; NVIDIA's and community
Kimi NVFP4 releases): ``weight`` U8 ``[O, I/2]``, ``weight_scale`` F8_E4M3 ``[O, I/16]``,
``weight_scale_2`` F32 ``[]`` = amax/2688, ``input_scale`` F32 ``[]`` (W4A4; W4A16_NVFP4 has
none).

Two config forms, both read by vLLM ``ModelOptQuantConfigBase.from_config``
(``vllm/model_executor/layers/quantization/modelopt.py``, commit
00155cdecca722d98e34234c3d172725b7720b7d): ``hf_quant_config.json`` ``{"quantization":
{"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": [...]}}``, and a flat
``quantization_config`` in config.json ``{"quant_method": "modelopt", "quant_algo": "NVFP4",
"ignore": [...]}``. The exclude entries are ModelOpt wildcards (:class:`ModelOptMatcher`).
vLLM reads config.json's ``quantization_config`` when it has one and hf_quant_config.json only
otherwise, so the two must agree (``CONFIG_QUANT_CONTRADICTION``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..findings import Severity
from ..model import CheckpointFormat, ExcludeMatcher
from .base import Configs, ModelOptMatcher
from .nvfp4 import NVFP4Descriptor

if TYPE_CHECKING:
    from ..model import Checkpoint

__all__ = ["DESCRIPTOR", "modelopt_view"]

#: The quant_algo values whose tensors this descriptor describes.
ALGOS = ("NVFP4", "W4A16_NVFP4")


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
            [str(e) for e in entries] if isinstance(entries, list) else [], cfg.get("group_size"))


class ModelOptNVFP4(NVFP4Descriptor):
    format = CheckpointFormat.MODELOPT_NVFP4
    detail = "NVIDIA ModelOpt NVFP4 (E4M3 block scales, weight_scale_2 = amax/2688)"
    scale_params = ("weight_scale", "weight_scale_2")
    global_name = "weight_scale_2"
    input_name = "input_scale"
    global_is_divisor = False
    #: ModelOpt clamps block scales to [2^-9, 448]
    clamped_scales = (2.0**-9, 448.0)
    profile = "modelopt"
    gate_up_severity = Severity.WARNING
    gate_up_loader = ("vLLM ModelOptNvFp4FusedMoE.process_weights_after_loading warns and uses "
                      "gate's for both (modelopt.py @00155cd)")

    def _view(self, configs: Configs) -> tuple[str, list[str], Any] | None:
        return modelopt_view(configs.quant_config) if configs.quant_config is not None \
            else modelopt_view(configs.hf_quant_config)

    def detect(self, configs: Configs) -> str | None:
        view = self._view(configs)
        if view is not None and view[0] in ALGOS:
            return f"{self.detail}, quant_algo {view[0]}"
        return None

    def exclude_list(self, configs: Configs) -> list[str]:
        view = self._view(configs)
        return view[1] if view is not None else []

    def matcher(self, entries: list[str]) -> ExcludeMatcher:
        return ModelOptMatcher(entries)

    def group_size(self, ckpt: Checkpoint) -> int:
        view = modelopt_view(ckpt.quant_config)
        gs = view[2] if view is not None else None
        return gs if isinstance(gs, int) and not isinstance(gs, bool) and gs > 0 else 16

    def has_input_scale(self, ckpt: Checkpoint) -> bool:
        view = modelopt_view(ckpt.quant_config)
        return view is None or view[0] != "W4A16_NVFP4"

    def config_problems(self, ckpt: Checkpoint) -> list[str]:
        view = modelopt_view(ckpt.quant_config)
        gs = view[2] if view is not None else None
        if gs not in (None, 16):
            return [f"group_size is {gs!r}; NVFP4 blocks are 16 elements (the kernels take 16)"]
        return []


DESCRIPTOR = ModelOptNVFP4()
