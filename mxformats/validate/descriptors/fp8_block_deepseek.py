"""DeepSeek/Kimi FP8 block (the official DeepSeek-V3 and Kimi-K2-Instruct/Base releases):
``weight`` F8_E4M3 ``[O, I]``, ``weight_scale_inv`` F32 ``[ceil(O/128), ceil(I/128)]`` =
``clamp(tile_amax, 1e-4) / 448``; config ``{"quant_method": "fp8", "fmt": "e4m3",
"weight_block_size": [128, 128], "activation_scheme": "dynamic"}``, optionally
``"scale_fmt": "ue8m0"`` (DeepSeek-V3.1: power-of-two scales).

Loader: vLLM ``Fp8Config`` (``vllm/model_executor/layers/quantization/fp8.py``): every Linear
but those ``modules_to_not_convert`` names (``ignored_layers``) is built FP8;
``ParallelLMHead``, embeddings and the router stay unquantized. A quantized weight without its
``weight_scale_inv`` is the trace of DeepSeek's ``inference/fp8_cast_bf16.py``, which keeps the
FP8 bytes of a weight whose ``_scale_inv`` it cannot find. Reproduced by
``quantize_fp8_block(profile="deepseek")`` (``ue8m0``: profile ``ue8m0``, :data:`UE8M0`).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from mxformats.schemes.fp8_block import get_producer

from ..model import CheckpointFormat
from .base import Configs, EnginePath
from .fp8_block import FP8BlockDescriptor, all_pow2

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from ..model import Checkpoint

#: vLLM Fp8LinearMethod / Fp8MoEMethod (block quantization; e4m3fnuz on gfx942)
_VLLM_FP8 = ("vllm-project/vllm vllm/model_executor/layers/quantization/fp8.py @ "
             "1436674bcb3f46f4c960d09334cf7dd1534943ca")
#: SGLang Fp8LinearMethod / Fp8MoEMethod (the same block_n divisibility check)
_SGLANG_FP8 = ("sgl-project/sglang python/sglang/srt/layers/quantization/fp8.py @ "
               "d94a1535900da43cb374c2445679375e78935af6")

__all__ = ["DESCRIPTOR"]


class DeepSeekFP8Block(FP8BlockDescriptor):
    format = CheckpointFormat.FP8_BLOCK
    detail = "DeepSeek-style FP8 block (weight_scale_inv)"
    scale_name = "weight_scale_inv"
    scale_params = ("weight_scale_inv",)
    scale_dtype = "F32"
    #: vLLM Fp8LinearMethod.create_weights registers weight_scale_inv from
    #: create_fp8_scale_parameter (float32), Fp8MoEMethod.create_weights w13/w2_weight_scale_inv
    #: float32: BF16 (and F16) scales load, cast by the weight_loader's Tensor.copy_
    loader_scale_dtype = "F32"
    loader_scale_source = (_VLLM_FP8 + " and " + _SGLANG_FP8 + " (Fp8LinearMethod."
                           "create_weights, Fp8MoEMethod.create_weights: float32 "
                           "weight_scale_inv)")
    #: a BF16 Linear here is judged by its own tensors, not the (usually absent) list: the
    #: official releases carry no modules_to_not_convert
    needs_exclude_entries = False
    engine_paths = (
        EnginePath("vllm", "native", "FP8 block on {target}: e4m3fnuz; vLLM doubles the "
                   "weight scales converting e4m3fn (normalize_e4m3fn_to_e4m3fnuz)",
                   _VLLM_FP8, archs=("gfx942",)),
        EnginePath("vllm", "native", "FP8 block on {target}: block-scaled FP8 GEMM and MoE "
                   "(DeepGEMM / CUTLASS / Triton on CUDA, AITER on ROCm)", _VLLM_FP8),
        EnginePath("sglang", "native", "FP8 block on {target}: block-scaled FP8 GEMM and MoE "
                   "(DeepGEMM / Triton on CUDA, AITER on ROCm)", _SGLANG_FP8),
    )
    #: vLLM Fp8Config.from_config marks the checkpoint fp8-serialized ("fp8" in
    #: quant_method); Fp8LinearMethod.create_weights then builds each Linear's weight
    #: float8_e4m3fn and its weight_scale_inv float32 filled with float32's minimum
    #: (create_fp8_scale_parameter), Fp8MoEMethod.create_weights the experts' scales as ones.
    #: The weight_loader's copy_ casts each BF16 weight to FP8 unscaled, no weight_scale_inv
    #: is loaded, and DefaultModelLoader.load_weights leaves out its "weights were not
    #: initialized from checkpoint" check for quantized models (vllm/model_executor/
    #: model_loader/default_loader.py): the checkpoint loads and every Linear decodes wrong
    all_bf16_why = (
        "vLLM's Fp8Config builds every Linear the list leaves with an FP8 weight and a "
        "float32 weight_scale_inv filled with -3.4e38 (Fp8LinearMethod.create_weights, "
        "create_fp8_scale_parameter), casts the BF16 weights into it unscaled and, for a "
        "quantized model, skips its check for weights the checkpoint lacks "
        "(DefaultModelLoader.load_weights): it loads and decodes every such Linear wrong")
    amax_floor = get_producer("deepseek").amax_floor
    ue8m0_variant = "ue8m0"
    missing_hint = MappingProxyType({
        "weight_scale_inv": "DeepSeek's fp8_cast_bf16.py keeps the FP8 bytes of a weight whose "
        "_scale_inv it cannot find (a converter that lost the scale)",
    })

    def __init__(self, profile: str = "deepseek") -> None:
        #: ``deepseek``, or ``ue8m0`` where the config declares ``scale_fmt: ue8m0``
        #: (:meth:`for_configs`): DeepGEMM ``per_block_cast_to_fp8`` with ``use_ue8m0``
        self.profile = profile

    def for_configs(self, configs: Configs) -> DeepSeekFP8Block:
        """:data:`UE8M0` where the config declares ``scale_fmt: ue8m0``, else
        :data:`DESCRIPTOR`: ``--source`` reproduces each with its own profile."""
        declared = (configs.quant_config or {}).get("scale_fmt") == "ue8m0"
        return UE8M0 if declared else DESCRIPTOR

    def detect(self, configs: Configs) -> str | None:
        qc = configs.quant_config
        if qc is not None and qc.get("quant_method") == "fp8" and \
                qc.get("weight_block_size") is not None:
            return self.detail
        return None

    def exclude_list(self, configs: Configs) -> list[str]:
        entries = (configs.quant_config or {}).get("modules_to_not_convert")
        return [str(e) for e in entries] if isinstance(entries, list) else []

    def block(self, ckpt: Checkpoint) -> tuple[int, int]:
        block = (ckpt.quant_config or {}).get("weight_block_size")
        if isinstance(block, list) and len(block) == 2 and all(
                isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block):
            return int(block[0]), int(block[1])
        return (128, 128)

    def config_problems(self, ckpt: Checkpoint) -> list[str]:
        qc = ckpt.quant_config or {}
        out: list[str] = []
        block = qc.get("weight_block_size")
        if block != [128, 128]:
            out.append(f"weight_block_size is {block!r}; the FP8 block kernels (DeepGEMM, "
                       "CUTLASS) take [128, 128]")
        if qc.get("fmt", "e4m3") != "e4m3":
            out.append(f"fmt is {qc.get('fmt')!r}, FP8 block weights are e4m3")
        if qc.get("activation_scheme", "dynamic") != "dynamic":
            out.append("activation_scheme must be 'dynamic' with block-scaled weights (vLLM "
                       "Fp8Config raises on static)")
        return out

    def ue8m0(self, ckpt: Checkpoint) -> bool:
        return (ckpt.quant_config or {}).get("scale_fmt") == "ue8m0"

    def for_arrays(self, arrays: dict[str, NDArray[Any]]) -> DeepSeekFP8Block:
        """:data:`UE8M0` for a module whose every scale is a power of two while the config
        declares no ``scale_fmt`` (:func:`all_pow2`, as the tightness check and the
        fingerprint recognise it): ``--source`` reproduces it with DeepGEMM's UE8M0 profile,
        as it does where ``scale_fmt: ue8m0`` is declared."""
        scales = arrays.get(self.scale_name)
        return UE8M0 if scales is not None and all_pow2(scales) else self


DESCRIPTOR = DeepSeekFP8Block()
#: The same format with power-of-two scales (``scale_fmt: ue8m0``, DeepSeek-V3.1 style).
UE8M0 = DeepSeekFP8Block(profile="ue8m0")
