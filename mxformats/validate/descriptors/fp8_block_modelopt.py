"""ModelOpt FP8 block, weight only (``quant_algo: FP8_PB_WO``): ``weight`` F8_E4M3 ``[O, I]``
and ``weight_scale`` F32 ``[O/128, 1, I/128, 1]`` as ModelOpt exports it (a 2-D
``[O/128, I/128]`` is accepted too), value = code × scale; no activation scale (dynamic
per-token). vLLM ``ModelOptFp8PbWoLinearMethod`` (``modelopt.py``, commit
00155cdecca722d98e34234c3d172725b7720b7d) requires both dimensions to be multiples of 128 and
squeezes the 4-D scale to 2-D. ``FP8_BLOCK_SCALES`` (another spelling some exports use) is
recognised, but vLLM's ``QUANT_ALGOS`` does not list it: its config raises.

Standalone, vLLM 0.33.0 runs only the dense layers: its ``ModelOptFp8Config`` builds routed
experts with the per-tensor ``ModelOptFp8MoEMethod`` (block-FP8 experts load only inside
MIXED_PRECISION), so a checkpoint with quantized experts fails to load (:attr:`engine_paths`).

No reference profile reproduces ModelOpt's FP8 bytes yet: structure and numbers only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ..model import CheckpointFormat
from .base import EnginePath
from .fp8_block import FP8BlockDescriptor
from .modelopt import ModelOptDescriptor, modelopt_view

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from ..findings import Finding
    from ..model import Checkpoint, CodeStats, Module
    from .base import TensorSpec

__all__ = ["DESCRIPTOR"]

#: SGLang maps a ModelOpt ``quant_algo`` other than MIXED_PRECISION, FP8, MXFP8 and the FP4
#: ones to its generic ``modelopt`` method, ModelOptFp8Config, whose from_config raises
#: "ModelOptFp8Config only supports regular FP8 quantization" (block FP8 is dispatched only
#: inside MIXED_PRECISION)
_SGLANG = ("sgl-project/sglang python/sglang/srt/layers/quantization/modelopt_quant.py:510 "
           "(ModelOptFp8Config.from_config) @ sglang==0.5.23")
_VLLM_QUANT = "vllm-project/vllm vllm/model_executor/layers/quantization/"
#: vLLM: FP8_PB_WO linears run ModelOptLinearMethod with a 128x128 block weight and a dynamic
#: per-block activation (W8A8); the block kernels exist on CUDA and ROCm
_VLLM_DENSE = (f"{_VLLM_QUANT}modelopt.py:2733 (resolve), vllm-project/vllm "
               "vllm/model_executor/kernels/linear/__init__.py:494 (_POSSIBLE_FP8_BLOCK_KERNELS) "
               "@ vllm==0.33.0")
#: vLLM: ModelOptFp8Config's routed experts are ModelOptFp8MoEMethod (per-tensor scales); the
#: experts' weight loader reduces each weight_scale to a scalar, which raises for a block grid
_VLLM_EXPERTS = (f"{_VLLM_QUANT}modelopt.py:257, modelopt.py:725 (ModelOptFp8MoEMethod), "
                 "vllm-project/vllm vllm/model_executor/layers/fused_moe/routed_experts.py:335 "
                 "(_to_scalar) @ vllm==0.33.0")


class ModelOptFP8Block(ModelOptDescriptor, FP8BlockDescriptor):
    format = CheckpointFormat.MODELOPT_FP8_BLOCK
    detail = "NVIDIA ModelOpt FP8 block weight-only (128x128 weight_scale)"
    algos = ("FP8_PB_WO", "FP8_BLOCK_SCALES")
    scale_name = "weight_scale"
    scale_params = ("weight_scale",)
    scale_dtype = "F32"
    #: vLLM ModelOptFp8PbWoLinearMethod.create_weights: BlockQuantScaleParameter float32
    loader_scale_dtype = "F32"
    loader_scale_source = _VLLM_DENSE + " (ModelOptFp8PbWoLinearMethod.create_weights: float32)"
    profile = None
    engine_paths = (
        EnginePath("vllm", "native", "FP8 block on {target}: block-scaled W8A8 FP8 GEMMs "
                   "(ModelOptLinearMethod: DeepGEMM / CUTLASS / Triton on CUDA, AITER / Triton "
                   "on ROCm); no routed expert is quantized", _VLLM_DENSE, requires="dense-only"),
        EnginePath("vllm", "unsupported", "vLLM builds a standalone FP8_PB_WO checkpoint's "
                   "routed experts with the per-tensor ModelOptFp8MoEMethod: loading their "
                   "128x128 weight_scale into its per-expert scalar raises (block-FP8 experts "
                   "load only in MIXED_PRECISION)", _VLLM_EXPERTS),
        EnginePath("sglang", "unsupported", "SGLang loads a standalone ModelOpt FP8_PB_WO "
                   "checkpoint with ModelOptFp8Config, which refuses any quant_algo but FP8",
                   _SGLANG),
    )

    def path_problems(self, ckpt: Checkpoint, requires: str) -> list[str]:
        """``dense-only``: no routed expert is quantized, since vLLM builds a standalone
        checkpoint's experts per-tensor (source: ``engine_paths``)."""
        experts = sorted(n for n, m in ckpt.modules.items() if m.quantized and ".experts." in n)
        if not experts:
            return []
        return [f"{len(experts)} routed expert modules are quantized (e.g. {experts[0]})"]

    def config_problems(self, ckpt: Checkpoint) -> list[str]:
        view = modelopt_view(ckpt.quant_config)
        if view is not None and view[0] == "FP8_BLOCK_SCALES":
            return ["quant_algo 'FP8_BLOCK_SCALES' is not in vLLM's ModelOpt QUANT_ALGOS "
                    "(from_config raises); vLLM reads this layout as 'FP8_PB_WO'"]
        return []

    def expected_tensors(self, ckpt: Checkpoint, out: int, inp: int) -> TensorSpec:
        spec = super().expected_tensors(ckpt, out, inp)
        dtypes, (grid,) = spec[self.scale_name]
        spec[self.scale_name] = (dtypes, ((grid[0], 1, grid[1], 1), grid))
        return spec

    def _grid(self, arrays: dict[str, NDArray[Any]]) -> dict[str, NDArray[Any]]:
        """The arrays with the scale squeezed to ``[O/128, I/128]``, as vLLM does."""
        s = np.asarray(arrays[self.scale_name])
        return {**arrays, self.scale_name: s.reshape(s.shape[0], s.shape[2]) if s.ndim == 4
                else s}

    def code_findings(self, ckpt: Checkpoint, module: Module, arrays: dict[str, NDArray[Any]],
                      stats: CodeStats) -> Iterator[Finding]:
        return super().code_findings(ckpt, module, self._grid(arrays), stats)

    def fingerprint(self) -> float | None:
        return None


DESCRIPTOR = ModelOptFP8Block()
