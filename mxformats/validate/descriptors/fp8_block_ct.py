"""compressed-tensors FP8 block (llm-compressor ``FP8_BLOCK``, e.g. upstream
``examples/model_free_ptq/kimi_k2_thinking_fp8_block.py``): ``weight`` F8_E4M3 ``[O, I]``,
``weight_scale`` **BF16** ``[ceil(O/128), ceil(I/128)]`` = ``bf16(tile_amax / 448)``; a zero
tile gets ``2^-7``. Config: a group with ``weights`` ``{type: float, num_bits: 8, strategy:
block, block_structure: [128, 128]}``, ``format: float-quantized``. vLLM scheme:
``CompressedTensorsW8A8Fp8`` with block weights. Reproduced by
``quantize_fp8_block(profile="compressed-tensors")``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..model import CheckpointFormat
from .base import EnginePath
from .compressed_tensors import CompressedTensorsDescriptor, groups
from .fp8_block import FP8BlockDescriptor

if TYPE_CHECKING:
    from ..model import Checkpoint

__all__ = ["DESCRIPTOR"]

#: vLLM: CompressedTensorsW8A8Fp8 with block weights (get_min_capability 89) and
#: CompressedTensorsW8A8Fp8MoEMethod
_VLLM = ("vllm-project/vllm vllm/model_executor/layers/quantization/compressed_tensors/"
         "schemes/compressed_tensors_w8a8_fp8.py:83 (CompressedTensorsW8A8Fp8) @ vllm==0.33.0")
#: SGLang: CompressedTensorsW8A8Fp8 dispatches a block-FP8 GEMM when ``block_structure`` is
#: set (get_min_capability 89), CompressedTensorsW8A8Fp8MoE a block-quantized fused MoE (80)
_SGLANG = ("sgl-project/sglang python/sglang/srt/layers/quantization/compressed_tensors/"
           "schemes/compressed_tensors_w8a8_fp8.py:57, compressed_tensors_w8a8_fp8_moe.py:66 "
           "@ sglang==0.5.23")


class CompressedTensorsFP8Block(FP8BlockDescriptor, CompressedTensorsDescriptor):
    format = CheckpointFormat.CT_FP8_BLOCK
    detail = "compressed-tensors FP8 block 128x128 (llm-compressor FP8_BLOCK)"
    scale_name = "weight_scale"
    scale_params = ("weight_scale",)
    scale_dtype = "BF16"
    #: vLLM CompressedTensorsW8A8Fp8.create_weights: create_fp8_scale_parameter(
    #: STRATEGY_TO_PARAMETER_TYPE["block"]), float32; the MoE method's w13/w2_weight_scale
    #: float32 too: F32 (and F16) scales load as BF16 ones do
    loader_scale_dtype = "F32"
    loader_scale_source = (_VLLM + "; create_weights: create_fp8_scale_parameter (float32), "
                           "loaded with BasevLLMParameter's Tensor.copy_")
    storage = ("float-quantized",)
    profile = "compressed-tensors"
    weight_requirements = (("block_structure", [128, 128]), ("symmetric", True),
                           ("dynamic", False))

    engine_paths = (
        EnginePath("vllm", "native", "FP8 block on {target}: block-scaled FP8 GEMM and MoE "
                   "(compressed-tensors W8A8 FP8, block weights)", _VLLM),
        EnginePath("sglang", "native", "FP8 block on {target}: block-scaled FP8 GEMM and MoE "
                   "(compressed-tensors W8A8 FP8, block weights)", _SGLANG),
    )

    def matches_scheme(self, weights: Mapping[str, Any]) -> bool:
        return (weights.get("type") == "float" and weights.get("num_bits") == 8
                and weights.get("strategy") == "block")

    def block(self, ckpt: Checkpoint) -> tuple[int, int]:
        for _, group in groups(ckpt.quant_config):
            w = group.get("weights")
            b = w.get("block_structure") if isinstance(w, dict) else None
            if isinstance(b, list) and len(b) == 2 and all(
                    isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in b):
                return int(b[0]), int(b[1])
        return (128, 128)


DESCRIPTOR = CompressedTensorsFP8Block()
