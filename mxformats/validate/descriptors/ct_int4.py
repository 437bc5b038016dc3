"""compressed-tensors INT4 ``pack-quantized`` (llm-compressor; Moonshot's K2-Thinking, K2.5
and K2.6 releases): ``weight_packed`` I32 ``[O, I/8]`` (stored q+8), ``weight_scale`` BF16
``[O, I/32]``, ``weight_shape`` I64 ``[2]``. Reproduced by ``quantize_int4(group_size=32,
profile="compressed-tensors")``. vLLM scheme: ``CompressedTensorsWNA16``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from mxformats import fast
from mxformats.schemes.int4 import PRODUCERS

from ..model import CheckpointFormat
from ..stats import packed_code_findings, scale_findings
from .base import EnginePath, TensorSpec, cdiv
from .compressed_tensors import CompressedTensorsDescriptor, groups

if TYPE_CHECKING:
    from collections.abc import Iterator

    from numpy.typing import NDArray

    from ..findings import Finding
    from ..model import Checkpoint, CodeStats, Module
_VLLM_CT = ("vllm-project/vllm vllm/model_executor/layers/quantization/compressed_tensors/"
            "compressed_tensors_moe/")
_SGLANG_CT = ("sgl-project/sglang python/sglang/srt/layers/quantization/compressed_tensors/"
              "schemes/")

__all__ = ["DESCRIPTOR", "group_size"]


def group_size(ckpt: Checkpoint) -> tuple[int, bool]:
    """The first group's ``(group_size, actorder == "group")`` (32, False when absent)."""
    for _, group in groups(ckpt.quant_config):
        w = group.get("weights")
        if isinstance(w, dict):
            gs = w.get("group_size")
            return (gs if isinstance(gs, int) and gs > 0 else 32), w.get("actorder") == "group"
    return 32, False


class CompressedTensorsInt4(CompressedTensorsDescriptor):
    format = CheckpointFormat.CT_INT4
    detail = "compressed-tensors pack-quantized INT4 (llm-compressor)"
    numeric = True
    weight_param = "weight_packed"
    scale_params = ("weight_scale",)
    small_params = ("weight_shape",)
    storage = ("pack-quantized",)
    profile = "compressed-tensors"
    quantizer = staticmethod(fast.quantize_int4)
    #: packs the quantizer's integers into ``weight_packed`` (the reference: ``int4.pack_int4``)
    packer = staticmethod(fast.pack_int4)
    scheme = "int4"
    weight_requirements = (("num_bits", 4), ("type", "int"), ("symmetric", True),
                           ("strategy", "group"), ("group_size", 32), ("dynamic", False))
    error_threshold = 0.15

    tp_multiple = 32

    engine_paths = (
        EnginePath("vllm", "emulated", "compressed-tensors WNA16 MoE on {target}: no Marlin on "
                   "ROCm; fallback kernels", f"{_VLLM_CT}compressed_tensors_moe_wna16.py "
                   "(CompressedTensorsWNA16MoEMethod) @ b3d71b015da2aa49b57a55e4167518c3bc6eaf8f",
                   archs=("rocm",)),
        EnginePath("vllm", "native", "compressed-tensors WNA16 MoE on {target} runs Marlin "
                   "(CompressedTensorsWNA16MarlinMoEMethod)", f"{_VLLM_CT}"
                   "compressed_tensors_moe_wna16_marlin.py @ "
                   "483186f376deaa4ccb04898c50dff91ab6c980c0", archs=("cuda",)),
        EnginePath("sglang", "native", "the mxint4 path on {target}: FlashInfer TRT-LLM "
                   "trtllm_mxint4_block_scale_moe (needs --moe-runner-backend flashinfer_trtllm)",
                   f"{_SGLANG_CT}compressed_tensors_w4a4_mxint4_moe.py (CompressedTensorsMxInt4MoE;"
                   " get_min_capability 100) @ 0ba3cdd474639a50317df43db246ca3351fbeecf",
                   archs=("sm100",), requires="mxint4"),
        EnginePath("sglang", "native", "compressed-tensors WNA16 MoE on {target} runs Marlin",
                   f"{_SGLANG_CT}compressed_tensors_wNa16_moe.py @ "
                   "b8e5a7c39773b60a4d1f77647b8fda1fee65bba1", archs=("cuda",)),
        EnginePath("sglang", "native", "compressed-tensors WNA16 MoE on {target} runs the "
                   "Triton WNA16 MoE kernel (CompressedTensorsWNA16TritonMoE)",
                   "sgl-project/sglang python/sglang/srt/layers/quantization/compressed_tensors/"
                   "compressed_tensors.py:920 @ sglang==0.5.23", archs=("rocm",)),
    )

    def path_problems(self, ckpt: Checkpoint, requires: str) -> list[str]:
        """``mxint4``: SGLang's ``CompressedTensorsMxInt4MoE.__init__`` asserts group strategy,
        ``group_size`` 32, 4 bits, symmetric, no ``actorder``, ``pack-quantized`` storage, and
        ``create_weights`` builds BF16 scales (source: ``engine_paths``)."""
        out: list[str] = []
        for name, group in groups(ckpt.quant_config):
            found = group.get("weights")
            w: Mapping[str, Any] = found if isinstance(found, dict) else {}
            for key, wanted in (("strategy", "group"), ("group_size", 32), ("num_bits", 4),
                                ("symmetric", True)):
                if w.get(key) != wanted:
                    out.append(f"group {name}: weights.{key} is {w.get(key)!r}, not {wanted!r}")
            if w.get("actorder"):
                out.append(f"group {name}: weights.actorder is {w.get('actorder')!r} (none "
                           "allowed)")
            if group.get("format", (ckpt.quant_config or {}).get("format")) != "pack-quantized":
                out.append(f"group {name}: storage is not pack-quantized")
        scale_dtypes = sorted({ref.dtype for n, ref in ckpt.tensors.items()
                               if n.endswith(".weight_scale") and ".experts." in n})
        if scale_dtypes and scale_dtypes != ["BF16"]:
            out.append(f"expert weight_scale dtype {'/'.join(scale_dtypes)}, not BF16")
        return out

    def matches_scheme(self, weights: Mapping[str, Any]) -> bool:
        return weights.get("type") == "int" and weights.get("num_bits") == 4


    def group_problems(self, where: str, group: Mapping[str, Any]) -> list[str]:
        out: list[str] = []
        if group.get("input_activations") is not None:
            out.append(f"{where}.input_activations must be null (weight-only INT4)")
        out += super().group_problems(where, group)
        w = group.get("weights")
        if isinstance(w, dict) and w.get("actorder") not in (None, "group"):
            out.append(f"{where}.weights.actorder {w.get('actorder')!r} is not supported")
        return out

    def expected_tensors(self, ckpt: Checkpoint, out: int, inp: int) -> TensorSpec:
        gs, actorder = group_size(ckpt)
        spec: TensorSpec = {
            "weight_packed": (("I32",), ((out, cdiv(inp, 8)),)),
            "weight_scale": (("BF16", "F16", "F32"), ((out, cdiv(inp, gs)),)),
            "weight_shape": (("I32", "I64"), ((2,),)),
        }
        if actorder:
            spec["weight_g_idx"] = (("I32", "I64"), ((inp,),))
        return spec

    def unusual_dtype(self, param: str, dtype: str) -> bool:
        return param == "weight_scale"

    def scale_findings(self, ckpt: Checkpoint, module: Module,
                       arrays: dict[str, NDArray[Any]]) -> Iterator[Finding]:
        yield from scale_findings(module.tensors["weight_scale"], arrays["weight_scale"])

    def code_findings(self, ckpt: Checkpoint, module: Module, arrays: dict[str, NDArray[Any]],
                      stats: CodeStats) -> Iterator[Finding]:
        return packed_code_findings(ckpt, module, arrays, stats, "int4-group", self.weight_param)

    def produce(self, w: NDArray[Any]) -> dict[str, NDArray[Any]]:
        q = self.quantizer(w, group_size=32, profile=self.profile)
        return {"weight_packed": self.packer(q.q, layout=PRODUCERS[q.profile].layout),
                "weight_scale": q.scales, "weight_shape": np.array(w.shape, dtype=np.int64)}

    def dequantize(self, arrays: dict[str, NDArray[Any]], cols: int) -> NDArray[Any]:
        q = fast.unpack_int4(arrays["weight_packed"], layout="compressed-tensors", size=cols)
        d = fast.dequantize_int4(q, arrays["weight_scale"], group_size=32,
                                 profile=self.consumer)
        return d


DESCRIPTOR = CompressedTensorsInt4()
