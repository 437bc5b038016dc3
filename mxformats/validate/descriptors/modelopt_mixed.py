"""ModelOpt ``MIXED_PRECISION``: a ``quantized_layers`` table gives each layer its own
``quant_algo``. vLLM ``ModelOptMixedPrecisionConfig`` (``vllm/model_executor/layers/
quantization/modelopt.py:1574``, vllm==0.33.0) looks a layer up by its name (also with
``language_model.model.`` / ``model.language_model.`` swapped) and dispatches ``FP8``,
``NVFP4``, ``W4A16_NVFP4`` and ``FP8_PB_WO`` (among others, ``get_quant_method`` at :1844): a
layer of an algorithm it does not dispatch is built unquantized, and its quantized bytes load
into BF16 parameters with no error. An ``FP8_PB_WO`` linear runs the block-FP8 linear method on
its ModelOpt ``weight_scale``; ``FP8_PB_WO`` routed experts run ``Fp8MoEMethod``, whose block
scales are ``w13/w2_weight_scale_inv`` (``fp8.py:637``), so a ModelOpt expert ``weight_scale``
has no parameter to load into (``KeyError`` in ``deepseek_v2.py:1779``, DeepseekV2Model
.load_weights). (Before 0.33.0, commit 00155cdecca722d98e34234c3d172725b7720b7d, FP8_PB_WO
layers were built unquantized.) An empty table raises. Each module is checked against its own
layer's format.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..model import CheckpointFormat
from . import fp8_block_modelopt, nvfp4_modelopt
from .base import Descriptor, EnginePath, MixedDescriptor
from .fp8_block import FP8BlockDescriptor
from .modelopt import ModelOptDescriptor
from .nvfp4 import NVFP4Descriptor

if TYPE_CHECKING:
    from ..model import Checkpoint

__all__ = ["DESCRIPTOR", "quantized_layers"]

#: The per-layer algorithms vLLM's get_quant_method dispatches, and their descriptors.
DISPATCHED: dict[str, Descriptor] = {
    "NVFP4": nvfp4_modelopt.DESCRIPTOR,
    "W4A16_NVFP4": nvfp4_modelopt.ModelOptNVFP4(weight_only=True),
    "FP8_PB_WO": fp8_block_modelopt.DESCRIPTOR,
}
#: Dispatched by vLLM (linears and routed experts), but with no descriptor here (per-tensor
#: FP8; MXFP8, which vLLM 0.33.0 added: ``modelopt.py:1907``): structure unchecked.
UNVERIFIED = ("FP8", "MXFP8")


_SGLANG_MODELOPT = "sgl-project/sglang python/sglang/srt/layers/quantization/modelopt_quant.py"
#: SGLang's ModelOptMixedPrecisionConfig.get_quant_method dispatches FP8, the block-FP8
#: algorithms (FP8_PB_WO, FP8_BLOCK_SCALES: Fp8LinearMethod / Fp8MoEMethod), MXFP8, NVFP4 and
#: W4A16_NVFP4 per layer
_SGLANG_DISPATCH = f"{_SGLANG_MODELOPT}:1036 (ModelOptMixedPrecisionConfig) @ sglang==0.5.23"
#: ...and only when a layer is NVFP4: without one, ``_parse_modelopt_quant_config`` sends
#: MIXED_PRECISION to the ``w4afp8`` method instead
_SGLANG_ROUTE = ("sgl-project/sglang python/sglang/srt/configs/model_config.py:1855 "
                 "@ sglang==0.5.23")
_VLLM_QUANT = "vllm-project/vllm vllm/model_executor/layers/quantization/"
#: vLLM's ModelOptMixedPrecisionConfig.get_quant_method: a scheme per layer
_VLLM_DISPATCH = f"{_VLLM_QUANT}modelopt.py:1844 (ModelOptMixedPrecisionConfig) @ vllm==0.33.0"
#: its FP8_PB_WO linears: the block-FP8 ModelOptLinearMethod on the ModelOpt weight_scale
_VLLM_BLOCK = EnginePath(
    "vllm", "native", "FP8 block on {target}: block-scaled W8A8 FP8 GEMMs (ModelOptLinearMethod; "
    "no routed expert is FP8_PB_WO)",
    f"{_VLLM_QUANT}modelopt.py:1887, modelopt.py:2733 @ vllm==0.33.0")
#: its FP8_PB_WO routed experts: Fp8MoEMethod, block scales named weight_scale_inv
_VLLM_BLOCK_EXPERTS = EnginePath(
    "vllm", "unsupported", "vLLM builds FP8_PB_WO routed experts with Fp8MoEMethod, whose block "
    "scales are w13/w2_weight_scale_inv: the experts' ModelOpt weight_scale has no parameter "
    "(KeyError at load)",
    f"{_VLLM_QUANT}modelopt.py:1890, fp8.py:637, vllm-project/vllm "
    "vllm/model_executor/models/deepseek_v2.py:1779 @ vllm==0.33.0")
_SGLANG_BLOCK = EnginePath(
    "sglang", "native", "FP8 block on {target}: block-scaled FP8 GEMM and MoE (Fp8LinearMethod "
    "/ Fp8MoEMethod, the block size from the layers' group_size)",
    f"{_SGLANG_MODELOPT}:1055, modelopt_quant.py:1086 @ sglang==0.5.23")


def quantized_layers(cfg: Mapping[str, Any] | None) -> dict[str, str]:
    """layer name -> upper-cased quant_algo, from either ModelOpt config form."""
    if not isinstance(cfg, Mapping):
        return {}
    nested = cfg.get("quantization")
    table = (nested if isinstance(nested, Mapping) else cfg).get("quantized_layers")
    if not isinstance(table, Mapping):
        return {}
    return {str(k): str(v.get("quant_algo", "")).upper() for k, v in table.items()
            if isinstance(v, Mapping)}


def _candidates(name: str) -> tuple[str, ...]:
    """vLLM's ``_quantized_layer_prefix_candidates``."""
    out = [name]
    for a, b in (("language_model.model.", "model.language_model."),
                 ("model.language_model.", "language_model.model.")):
        if name.startswith(a):
            out.append(b + name[len(a):])
    return tuple(out)


class ModelOptMixed(MixedDescriptor, ModelOptDescriptor):
    format = CheckpointFormat.MODELOPT_MIXED
    detail = "NVIDIA ModelOpt MIXED_PRECISION (a quant_algo per layer)"
    algos = ("MIXED_PRECISION",)
    profile = "per layer"

    dispatcher = MappingProxyType({"sglang": _SGLANG_DISPATCH, "vllm": _VLLM_DISPATCH})

    def member_path(self, ckpt: Checkpoint, member: Descriptor, engine: str, vendor: str,
                    arch: str) -> EnginePath | None:
        """SGLang runs the block-FP8 layers of a MIXED_PRECISION file (standalone FP8_PB_WO it
        refuses), and reads the file as ModelOpt mixed only when some layer is NVFP4. vLLM runs
        its FP8_PB_WO linears, and fails to load its FP8_PB_WO routed experts."""
        if engine == "sglang":
            if not any(isinstance(m, NVFP4Descriptor) for m in self.members(ckpt)):
                return None
            if isinstance(member, FP8BlockDescriptor):
                return _SGLANG_BLOCK
        if engine == "vllm" and isinstance(member, FP8BlockDescriptor):
            return _VLLM_BLOCK_EXPERTS if _block_experts(ckpt) else _VLLM_BLOCK
        return super().member_path(ckpt, member, engine, vendor, arch)

    def algo_of(self, ckpt: Checkpoint, module: str) -> str | None:
        table = quantized_layers(ckpt.quant_config)
        return next((table[c] for c in _candidates(module) if c in table), None)

    def for_module(self, ckpt: Checkpoint, module: str) -> Descriptor:
        algo = self.algo_of(ckpt, module)
        if algo is None:
            return self
        return DISPATCHED.get(algo) or self

    def config_warnings(self, ckpt: Checkpoint) -> list[str]:
        """One per :data:`UNVERIFIED` algorithm the table uses: vLLM loads those layers, but no
        descriptor here knows their tensors, so nothing of them is checked (never a silent
        OK)."""
        by_algo: dict[str, list[str]] = {}
        for layer, algo in quantized_layers(ckpt.quant_config).items():
            by_algo.setdefault(algo, []).append(layer)
        out = []
        for algo in UNVERIFIED:
            if algo in by_algo:
                layers = sorted(by_algo[algo])
                out.append(f"{len(layers)} quantized_layers entries (e.g. {layers[0]}) have "
                           f"quant_algo {algo!r}, which vLLM dispatches but mxformats does not "
                           "verify: their tensors' layout and numbers are not checked")
        return out

    def config_problems(self, ckpt: Checkpoint) -> list[str]:
        table = quantized_layers(ckpt.quant_config)
        if not table:
            return ["quant_algo MIXED_PRECISION needs a non-empty quantized_layers table "
                    "(vLLM raises)"]
        out = []
        by_algo: dict[str, list[str]] = {}
        for layer, algo in table.items():
            by_algo.setdefault(algo, []).append(layer)
        for algo, layers in sorted(by_algo.items()):
            if algo not in DISPATCHED and algo not in UNVERIFIED:
                out.append(f"{len(layers)} quantized_layers entries (e.g. {sorted(layers)[0]}) "
                           f"have quant_algo {algo!r}, which vLLM's ModelOptMixedPrecisionConfig "
                           "does not dispatch: it builds those layers unquantized and loads "
                           "their quantized bytes as BF16")
        experts = _block_experts(ckpt)
        if experts:
            out.append(f"{len(experts)} routed-expert quantized_layers entries (e.g. "
                       f"{experts[0]}) have quant_algo 'FP8_PB_WO': vLLM builds them with "
                       "Fp8MoEMethod, whose block scales are w13/w2_weight_scale_inv, so their "
                       "ModelOpt weight_scale has no parameter and loading raises")
        return out


def _block_experts(ckpt: Checkpoint) -> list[str]:
    """The routed-expert layers the table calls ``FP8_PB_WO`` (vLLM cannot load them)."""
    return sorted(layer for layer, algo in quantized_layers(ckpt.quant_config).items()
                  if algo == "FP8_PB_WO" and ".experts." in layer)


DESCRIPTOR = ModelOptMixed()
