"""NVIDIA ModelOpt NVFP4 (``mtq.quantize`` + ``export_hf_checkpoint``; NVIDIA's and community
Kimi NVFP4 releases): ``weight`` U8 ``[O, I/2]``, ``weight_scale`` F8_E4M3 ``[O, I/16]``,
``weight_scale_2`` F32 ``[]`` = amax/2688, ``input_scale`` F32 ``[]`` (W4A4; W4A16_NVFP4 has
none).

ModelOpt's Four-Over-Six recipe (``NVFP4_FOUR_OVER_SIX_CFG``) exports the same config
(``quant_algo: NVFP4``) with ``weight_scale_2 = amax/1536`` and every non-zero block scale at most
``256 * 1.5 = 384`` (``qtensor/nvfp4_tensor.py`` ``_cast_per_block_scale_to_fp8`` with
``fp8_max_for_normalization`` 256): such tensors are recognised by their scales
(:meth:`NVFP4Descriptor.is_four_over_six`). No producer profile reproduces them.

Both ModelOpt config forms are read (:mod:`.modelopt`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model import CheckpointFormat
from .modelopt import ModelOptDescriptor, modelopt_view
from .nvfp4 import VLLM_RELEASE, NVFP4Descriptor

if TYPE_CHECKING:
    from ..model import Checkpoint

__all__ = ["DESCRIPTOR"]

#: The quant_algo values whose tensors this descriptor describes.
ALGOS = ("NVFP4", "W4A16_NVFP4")


class ModelOptNVFP4(ModelOptDescriptor, NVFP4Descriptor):
    format = CheckpointFormat.MODELOPT_NVFP4
    algos = ALGOS
    detail = "NVIDIA ModelOpt NVFP4 (E4M3 block scales, weight_scale_2 = amax/2688)"
    scale_params = ("weight_scale", "weight_scale_2")
    small_params = ("input_scale",)
    global_name = "weight_scale_2"
    input_name = "input_scale"
    global_is_divisor = False
    #: ModelOpt clamps block scales to [2^-9, 448]
    clamped_scales = (2.0**-9, 448.0)
    #: the 4/6 export's largest non-zero block scale: 256 * 1.5 (the "M=4" multiplier)
    four_over_six_scale_max = 384.0
    profile = "modelopt"
    fused_input_loader = ("vLLM quantizes their one input with the larger, a coarser grid "
                          "for the other's activations (input_scale.max(), modelopt.py "
                          "@00155cd; an expert's w13: a13_scale.max(dim=1), "
                          f"flashinfer_fp4_moe.py:397 @ {VLLM_RELEASE})")

    def group_size(self, ckpt: Checkpoint) -> int:
        view = modelopt_view(ckpt.quant_config)
        gs = view[2] if view is not None else None
        return gs if isinstance(gs, int) and not isinstance(gs, bool) and gs > 0 else 16

    def __init__(self, weight_only: bool | None = None) -> None:
        #: W4A16 (no input_scale); None: as the config's quant_algo says
        self.weight_only = weight_only

    def has_input_scale(self, ckpt: Checkpoint) -> bool:
        if self.weight_only is not None:
            return not self.weight_only
        view = modelopt_view(ckpt.quant_config)
        return view is None or view[0] != "W4A16_NVFP4"

    def config_problems(self, ckpt: Checkpoint) -> list[str]:
        view = modelopt_view(ckpt.quant_config)
        gs = view[2] if view is not None else None
        if gs not in (None, 16):
            return [f"group_size is {gs!r}; NVFP4 blocks are 16 elements (the kernels take 16)"]
        return []


DESCRIPTOR = ModelOptNVFP4()
