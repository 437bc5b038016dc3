"""How the serving engines decode two NVFP4 modules they fuse into one GEMM, whose weights
carry one global scale each in the file but one between them in the engine.

The pairs (:data:`FUSED_PAIRS`): an expert's ``gate_proj`` and ``up_proj`` (vLLM's ``w13``),
a dense or shared expert's ``gate_proj`` and ``up_proj`` (``MergedColumnParallelLinear``
``gate_up_proj``), and ``q_a_proj`` with ``kv_a_proj_with_mqa`` (DeepseekV2's
``fused_qkv_a_proj``). Which one global scale the engine keeps (:func:`fused_decode`):

- **Experts, both producers, every backend** — the gate's. vLLM:
  ``ModelOptNvFp4FusedMoE.process_weights_after_loading`` (``modelopt.py``) and
  ``CompressedTensorsW4A4Nvfp4MoEMethod.process_weights_after_loading``
  (``compressed_tensors_moe_w4a4_nvfp4.py``) test ``torch.allclose(w13_…[:, 0],
  w13_…[:, 1])``, log "w1_weight_scale_2 must match w3_weight_scale_2" (resp.
  "w1_weight_global_scale must match w3_weight_global_scale") "Accuracy may be affected." and
  go on with ``w13_…[:, 0].contiguous()``, the gate's, for the whole ``w13``. That happens
  before ``convert_to_nvfp4_moe_kernel_format`` dispatches to the backend, whose preparation
  (FlashInfer TRT-LLM / CUTLASS / CuTe DSL and vLLM CUTLASS:
  ``prepare_nvfp4_moe_layer_for_fi_or_cutlass``; Marlin:
  ``prepare_nvfp4_moe_layer_for_marlin``) receives only that one ``w13_scale_2`` per expert,
  so every backend decodes the up half with the gate's scale. SGLang:
  ``ModelOptNvFp4FusedMoEMethod.process_weights_after_loading`` (``modelopt_quant.py``), the
  same test and ``w13_weight_scale_2[:, 0]``.
- **Linears, both producers** — the largest stored value: ModelOpt
  ``ModelOptNvFp4LinearMethod.process_weights_after_loading`` takes
  ``weight_scale_2.max()`` (a multiplier: the larger amax), compressed-tensors
  ``CompressedTensorsW4A4Fp4.process_weights_after_loading`` ``weight_global_scale.max()``
  (a divisor: the smaller amax), each after a ``warning_once`` when the shards' values are
  not all equal (``torch.unique``). The weight-only (W4A16, FP4 Marlin) linears do the same:
  ``ModelOptNvFp4W4A16LinearMethod`` ``weight_scale_2.max()``, ``CompressedTensorsW4A16Fp4``
  ``1.0 / weight_global_scale.max()``; so do the W4A16 experts, which go through the same
  two MoE methods (``use_a16``).

So the module whose own scale was not kept is decoded with its partner's: every weight of it
times :attr:`FusedDecode.ratio`, for every token. No engine path at the cited versions
rescales the block scales to compensate (vLLM does for FP8 per-tensor,
``requantize_with_max_scale``, not for NVFP4; the fixes proposed, vllm-project/vllm#55073 and
NVIDIA/TensorRT-LLM#14199, are not merged; vLLM's HUMMING MoE backend comes after MARLIN in
``select_nvfp4_moe_backend``'s order, so it is never the automatic choice where Marlin runs),
and no ``--target`` changes this: the finding is an error on every target.

**Tolerance**: vLLM's own test, ``torch.allclose`` with its defaults ``rtol=1e-05``,
``atol=1e-08``, in float32 (:func:`vllm_allclose`): ``|gate − up| <= 1e-08 + 1e-05·|up|``.
Within it vLLM does not even warn, and the decoded weights move by ``|Δs|/s <= 1e-05 +
1e-08/s``: about 3.2e-4 at the ModelOpt fixture's ``weight_scale_2`` (about 3.3e-5, where atol
decides) and about 1e-5 at compressed-tensors' global scales (about 3.6e4, where rtol does),
far below the E4M3 block scale's resolution (2^-3 relative). The same tolerance holds for
the linears, whose exact ``torch.unique`` test would warn of a difference no decode could
show.

Sources: vllm-project/vllm ``vllm/model_executor/layers/quantization/modelopt.py`` @
00155cdecca722d98e34234c3d172725b7720b7d;
``…/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_w4a4_nvfp4.py`` @
08f95fe5616661c4f8547a46ebdaa1ed22736edb;
``…/compressed_tensors/schemes/compressed_tensors_w4a4_nvfp4.py`` @
0094cb9b1d7bfe2054e733d2cad09b76cf319897; ``…/compressed_tensors/schemes/
compressed_tensors_w4a16_nvfp4.py`` @ 17b6501a6ce929d83d4b5c1d408adf0ae4a610f8;
``vllm/model_executor/layers/fused_moe/oracle/
nvfp4.py`` (``convert_to_nvfp4_moe_kernel_format``, ``select_nvfp4_moe_backend``) @
01362014633dcba269a3f98e8868b093a66df9f1; sgl-project/sglang
``python/sglang/srt/layers/quantization/modelopt_quant.py`` @
faeb96856c4417d55695feec2f4d2463c8adb7fd.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ATOL", "FUSED_PAIRS", "RTOL", "FusedDecode", "fused_decode", "partner",
           "vllm_allclose"]

#: The modules vLLM fuses into one GEMM with one global scale (the first of each pair is the
#: shard whose scale an expert's w13 keeps): DeepseekV2's ``gate_up_proj`` (dense and shared
#: MLP), the experts' ``w13``, and ``fused_qkv_a_proj`` (``q_a_proj`` + ``kv_a_proj_with_mqa``).
#: Both producers give each pair one global scale, the larger amax of the two, when both are
#: quantized: ModelOpt's ``sync_moe_gate_up_amax`` (experts) and ``preprocess_linear_fusion``
#: of every group of linears sharing an input (``_fuse_shared_input_modules``,
#: ``modelopt/torch/export/unified_export_hf.py``, 0.47.0), llm-compressor's
#: ``update_fused_layer_weight_global_scales`` over ``get_fused_mlp_linears`` and the MLA pair
#: of ``get_fused_attention_linears`` (vllm-project/llm-compressor
#: ``src/llmcompressor/modifiers/utils/fused_modules.py`` @ fc5ec42); llm-compressor's
#: ``model_free_ptq`` does not (it calibrates each module alone).
FUSED_PAIRS = (("gate_proj", "up_proj"), ("q_a_proj", "kv_a_proj_with_mqa"))

#: ``torch.allclose``'s default relative and absolute tolerances, which vLLM's w13 test uses
RTOL = 1e-05
ATOL = 1e-08

_VLLM = "vllm-project/vllm vllm/model_executor/layers/quantization/"
#: Where the engine decides, per producer (global scale name) and kind of pair
_MOE_LOADER = {
    "weight_scale_2": (f"{_VLLM}modelopt.py ModelOptNvFp4FusedMoE."
                       "process_weights_after_loading: w13_weight_scale_2[:, 0] @ 00155cd"),
    "weight_global_scale": (f"{_VLLM}compressed_tensors/compressed_tensors_moe/"
                            "compressed_tensors_moe_w4a4_nvfp4.py CompressedTensorsW4A4Nvfp4"
                            "MoEMethod.process_weights_after_loading: "
                            "w13_weight_global_scale[:, 0] @ 08f95fe"),
}
_LINEAR_LOADER = {
    "weight_scale_2": (f"{_VLLM}modelopt.py ModelOptNvFp4LinearMethod."
                       "process_weights_after_loading: weight_scale_2.max() @ 00155cd"),
    "weight_global_scale": (f"{_VLLM}compressed_tensors/schemes/compressed_tensors_w4a4_nvfp4"
                            ".py CompressedTensorsW4A4Fp4.process_weights_after_loading: "
                            "weight_global_scale.max() @ 0094cb9"),
}


@dataclass(frozen=True)
class FusedDecode:
    """One fused pair whose global scales differ beyond :func:`vllm_allclose`: vLLM decodes
    module ``wrong`` with ``engine_scale`` (its ``partner``'s stored value) instead of its own
    ``own_scale``, so each of its weights comes out ``ratio`` times the value the file
    holds; ``loader``: the engine line that decides it."""

    wrong: str
    partner: str
    own_scale: float
    engine_scale: float
    ratio: float
    loader: str


def vllm_allclose(first: float, second: float) -> bool:
    """``torch.allclose(first, second)`` of two float32 values with its default tolerances:
    ``|first − second| <= ATOL + |RTOL · second|``, each step rounded to float32 as torch
    computes ``isclose`` on float32 tensors (the tolerance is relative to ``second``, the
    up half in vLLM's w13 test)."""
    a, b = np.float32(first), np.float32(second)
    with np.errstate(over="ignore", invalid="ignore"):
        error = np.abs(a - b)
        allowed = np.float32(ATOL) + np.abs(np.float32(RTOL) * b)
        return bool(a == b or (np.isfinite(error) and error <= allowed))


def partner(module: str) -> tuple[str, int] | None:
    """The module fused with ``module`` and ``module``'s place in the pair (0: the first,
    whose scale an expert's w13 keeps), or None when vLLM fuses it with nothing."""
    parent, _, projection = module.rpartition(".")
    for pair in FUSED_PAIRS:
        if projection in pair:
            i = pair.index(projection)
            return f"{parent}.{pair[1 - i]}", i
    return None


def fused_decode(first: str, second: str, scales: tuple[float, float], global_name: str,
                 divisor: bool) -> FusedDecode | None:
    """How vLLM decodes the pair ``first``/``second`` (module names, in :data:`FUSED_PAIRS`
    order) whose global scales ``global_name`` are ``scales`` (positive and finite): None
    when they agree within :func:`vllm_allclose`, else the module decoded with the other's
    scale. ``divisor``: the scale divides (compressed-tensors ``weight_global_scale``)
    rather than multiplies (ModelOpt ``weight_scale_2``).

    An expert's pair keeps the first's (gate's) scale; a linear pair the larger stored value
    (see the module docstring)."""
    if vllm_allclose(*scales):
        return None
    expert = ".experts." in first
    kept = 0 if expert else int(scales[1] > scales[0])
    names = (first, second)
    own, engine = scales[1 - kept], scales[kept]
    ratio = own / engine if divisor else engine / own
    loader = (_MOE_LOADER if expert else _LINEAR_LOADER)[global_name]
    return FusedDecode(names[1 - kept], names[kept], own, engine, ratio, loader)
