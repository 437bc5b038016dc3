"""compressed-tensors NVFP4 (llm-compressor ``scheme="NVFP4"``, ``format:
nvfp4-pack-quantized``): ``weight_packed`` U8 ``[O, I/2]``, ``weight_scale`` F8_E4M3
``[O, I/16]``, ``weight_global_scale`` F32 ``[1]`` = 2688/amax, ``input_global_scale`` F32
``[1]`` (W4A4; NVFP4A16 has none). vLLM schemes: ``CompressedTensorsW4A4Fp4`` and, for the
experts, ``CompressedTensorsW4A4Nvfp4MoEMethod``
(``vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/
compressed_tensors_moe_w4a4_nvfp4.py``, commit 08f95fe5616661c4f8547a46ebdaa1ed22736edb).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..findings import Severity
from ..model import CheckpointFormat
from .compressed_tensors import CompressedTensorsDescriptor, groups
from .nvfp4 import NVFP4Descriptor

if TYPE_CHECKING:
    from ..model import Checkpoint

__all__ = ["DESCRIPTOR"]


class CompressedTensorsNVFP4(NVFP4Descriptor, CompressedTensorsDescriptor):
    format = CheckpointFormat.CT_NVFP4
    detail = "compressed-tensors NVFP4 (nvfp4-pack-quantized, llm-compressor)"
    weight_param = "weight_packed"
    scale_params = ("weight_scale", "weight_global_scale")
    small_params = ("input_global_scale",)
    global_name = "weight_global_scale"
    input_name = "input_global_scale"
    global_is_divisor = True
    global_shapes = ((1,), ())
    storage = ("nvfp4-pack-quantized",)
    weight_requirements = (("strategy", "tensor_group"), ("symmetric", True), ("dynamic", False))
    profile = "compressed-tensors"
    gate_up_severity = Severity.INFO
    gate_up_loader = ("llm-compressor model_free_ptq calibrates gate and up separately by "
                      "design; vLLM CompressedTensorsW4A4Nvfp4MoEMethod."
                      "process_weights_after_loading warns and uses gate's "
                      "(w13_weight_global_scale[:, 0], @08f95fe)")

    def matches_scheme(self, weights: Mapping[str, Any]) -> bool:
        return (weights.get("type") == "float" and weights.get("num_bits") == 4
                and weights.get("group_size") == 16)

    def has_input_scale(self, ckpt: Checkpoint) -> bool:
        return any(isinstance(g.get("input_activations"), dict)
                   for _, g in groups(ckpt.quant_config))


DESCRIPTOR = CompressedTensorsNVFP4()
