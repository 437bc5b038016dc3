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

from ..model import CheckpointFormat
from .base import EnginePath
from .compressed_tensors import CompressedTensorsDescriptor, groups
from .nvfp4 import VLLM_RELEASE, NVFP4Descriptor

if TYPE_CHECKING:
    from ..model import Checkpoint

__all__ = ["DESCRIPTOR"]

_VLLM_CT = "vllm-project/vllm vllm/model_executor/layers/quantization/compressed_tensors/"
#: vLLM: CompressedTensorsW4A4Fp4 (get_min_capability 75) picks its GEMM with
#: ``init_nvfp4_linear_kernel``, the MoE method with ``select_nvfp4_moe_backend``: FP4 tensor
#: cores on sm100, a Marlin or emulation backend elsewhere
_VLLM = (f"{_VLLM_CT}schemes/compressed_tensors_w4a4_nvfp4.py:31 (init_nvfp4_linear_kernel), "
         "compressed_tensors_moe/compressed_tensors_moe_w4a4_nvfp4.py:63 "
         f"(select_nvfp4_moe_backend) @ {VLLM_RELEASE}")
_SGLANG_CT = "sgl-project/sglang python/sglang/srt/layers/quantization/compressed_tensors/"
#: SGLang: CompressedTensorsW4A4Fp4 and CompressedTensorsW4A4Nvfp4MoE when the device has
#: compute capability 100 (``_check_scheme_supported``)
_SGLANG_W4A4 = (f"{_SGLANG_CT}compressed_tensors.py:767, compressed_tensors.py:967 "
                "(get_min_capability 100) @ sglang==0.5.23")
#: below it SGLang serves the file weight-only through FP4 Marlin (activation quantization
#: ignored, a warning), whose kernels it imports only on CUDA (``if _is_cuda``)
_SGLANG_MARLIN = (f"{_SGLANG_CT}compressed_tensors.py:783, compressed_tensors.py:975 "
                  "(CompressedTensorsW4A16Fp4 / W4A16Nvfp4MoE) @ sglang==0.5.23")
_SGLANG_NO_ROCM = (f"{_SGLANG_CT}compressed_tensors.py:783, "
                   "sgl-project/sglang python/sglang/srt/layers/quantization/"
                   "marlin_utils_fp4.py:21 @ sglang==0.5.23")


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
    fused_input_loader = ("vLLM quantizes their one input with one of them: a linear with "
                          "the larger input_global_scale (the smaller amax; the other's "
                          "activations above it saturate: compressed_tensors_w4a4_nvfp4.py:124), "
                          "an expert's w13 with the smaller (a coarser grid for the other's: "
                          "1 / input_global_scale, then .max(dim=1), "
                          f"flashinfer_fp4_moe.py:397), @ {VLLM_RELEASE}")

    engine_paths = (
        EnginePath("vllm", "native", "NVFP4 on {target} runs native FP4 tensor-core GEMMs "
                   "and MoE (CUTLASS / FlashInfer)", _VLLM, archs=("sm100",)),
        EnginePath("vllm", "emulated", "NVFP4 on {target} ({arch}) has no FP4 tensor cores: "
                   "vLLM picks a Marlin or emulation backend", _VLLM),
        EnginePath("sglang", "native", "NVFP4 W4A4 on {target}: FP4 tensor-core GEMMs and MoE "
                   "(FlashInfer / CUTLASS)", _SGLANG_W4A4, archs=("sm100",)),
        EnginePath("sglang", "emulated", "NVFP4 on {target} ({arch}): SGLang serves it "
                   "weight-only through FP4 Marlin; the activation quantization "
                   "(input_global_scale) is ignored", _SGLANG_MARLIN, archs=("cuda",)),
        EnginePath("sglang", "unsupported", "NVFP4 below compute capability 100 falls back to "
                   "FP4 Marlin, which SGLang builds only for CUDA: no path on {target}",
                   _SGLANG_NO_ROCM, archs=("rocm",)),
    )

    def matches_scheme(self, weights: Mapping[str, Any]) -> bool:
        return (weights.get("type") == "float" and weights.get("num_bits") == 4
                and weights.get("group_size") == 16)

    def has_input_scale(self, ckpt: Checkpoint) -> bool:
        return any(isinstance(g.get("input_activations"), dict)
                   for _, g in groups(ckpt.quant_config))


DESCRIPTOR = CompressedTensorsNVFP4()
