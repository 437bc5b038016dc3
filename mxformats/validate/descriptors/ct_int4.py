"""compressed-tensors INT4 ``pack-quantized`` (llm-compressor; Moonshot's K2-Thinking, K2.5
and K2.6 releases at group 32, llm-compressor's W4A16 presets at group 128):
``weight_packed`` I32 ``[O, I/8]`` (stored q+8), ``weight_scale`` BF16 ``[O, I/G]`` (``[O, 1]``
per channel), ``weight_shape`` I64 ``[2]``. Reproduced by ``quantize_int4(group_size=G,
profile="compressed-tensors")`` (``group_size=None`` per channel). vLLM scheme:
``CompressedTensorsWNA16``.

The group sizes G vLLM loads (:data:`GROUP_SIZES`): 32, 64, 128 and per channel (strategy
``channel``, ``group_size`` null or -1, which ``CompressedTensorsWNA16.__init__`` turns into
-1), the sizes its Marlin kernels take for both the Linear and the MoE layers
(vllm-project/vllm ``vllm/model_executor/layers/quantization/utils/marlin_utils.py``:
``MARLIN_SUPPORTED_GROUP_SIZES = [-1, 32, 64, 128]``, checked by ``verify_marlin_supported``,
@ 6eb287065174504cb862f792c2150c603e225edb; ``check_moe_marlin_supports_layer``:
``group_size in [-1, 32, 64, 128]`` and ``intermediate_size_per_partition % max(64,
group_size) == 0``, main as read 2026-12-03). Each checkpoint is checked against the variant
of its config (:meth:`CompressedTensorsInt4.for_configs`; a mixed-precision group's,
:meth:`CompressedTensorsInt4.for_scheme`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from mxformats import fast
from mxformats.fast.passes import COMPILED, OnePass
from mxformats.schemes.int4 import PRODUCERS, QMIN

from ..model import CheckpointFormat
from ..stats import packed_code_findings, scale_findings
from .base import Configs, EnginePath, TensorSpec, cdiv
from .compressed_tensors import CompressedTensorsDescriptor, groups

if TYPE_CHECKING:
    from collections.abc import Iterator

    from numpy.typing import NDArray

    from mxformats.fast.moments import Moments

    from ..findings import Finding
    from ..model import Checkpoint, CodeStats, Module
_VLLM_CT = ("vllm-project/vllm vllm/model_executor/layers/quantization/compressed_tensors/"
            "compressed_tensors_moe/")
_SGLANG_CT = ("sgl-project/sglang python/sglang/srt/layers/quantization/compressed_tensors/"
              "schemes/")

__all__ = ["DESCRIPTOR", "GROUP_SIZES", "VARIANTS", "CompressedTensorsInt4", "actorder",
           "declared_group", "group_size_problem"]

#: The group sizes vLLM's WNA16 kernels load (module docstring); None: per channel.
GROUP_SIZES: tuple[int | None, ...] = (32, 64, 128, None)


def declared_group(weights: Mapping[str, Any]) -> int | None:
    """The group a config group's ``weights`` declare: None (one group per row) for strategy
    ``channel``, else its ``group_size`` when a positive int, else 32. The tensors are checked
    against it, so a size vLLM does not load is one config finding
    (:func:`group_size_problem`), not one per tensor as well."""
    if weights.get("strategy") == "channel":
        return None
    gs = weights.get("group_size")
    return gs if isinstance(gs, int) and not isinstance(gs, bool) and gs > 0 else 32


def group_size_problem(where: str, weights: Mapping[str, Any]) -> str | None:
    """Why vLLM does not load the group a config group's ``weights`` declare (None: it does):
    strategy ``group`` with a size outside :data:`GROUP_SIZES`, ``channel`` with a size
    (compressed-tensors 0.20.1 ``QuantizationArgs`` takes null or -1 there), or another
    strategy."""
    strategy, gs = weights.get("strategy"), weights.get("group_size")
    sizes = ", ".join(str(g) for g in GROUP_SIZES if g is not None)
    if strategy == "channel":
        return None if gs in (None, -1) else (
            f"{where}.group_size is {gs!r}; strategy 'channel' takes null or -1")
    if strategy != "group":
        return f"{where}.strategy is {strategy!r}, the format needs 'group' or 'channel'"
    if isinstance(gs, bool) or gs not in GROUP_SIZES or gs is None:
        return (f"{where}.group_size is {gs!r}; vLLM's WNA16 kernels load {sizes} or per "
                "channel (marlin_utils.py MARLIN_SUPPORTED_GROUP_SIZES)")
    return None


def actorder(ckpt: Checkpoint) -> bool:
    """Whether the first config group declares ``actorder: group`` (a ``weight_g_idx``)."""
    for _, group in groups(ckpt.quant_config):
        w = group.get("weights")
        if isinstance(w, dict):
            return bool(w.get("actorder") == "group")
    return False


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
                           ("dynamic", False))
    error_threshold = 0.15

    def __init__(self, group: int | None = 32) -> None:
        #: the group size (None: per channel), one of :data:`GROUP_SIZES`
        self.group = group
        #: a TP partition of a quantized input dimension holds whole groups: vLLM's
        #: ``compressed_tensors_moe_wna16.py`` (b3d71b0) sizes ``w2_weight_scale`` as
        #: ``intermediate_size_per_partition // group_size`` and ``verify_marlin_supports_shape``
        #: raises when ``input_size_per_partition % group_size != 0``; per channel, the
        #: 8-element words of ``weight_packed``
        self.tp_multiple = group if group is not None else 8

    def for_configs(self, configs: Configs) -> CompressedTensorsInt4:
        """The variant of the first config group's group size (:data:`VARIANTS`)."""
        for _, group in groups(configs.quant_config):
            w = group.get("weights")
            if isinstance(w, dict):
                return self.for_scheme(w)
        return DESCRIPTOR

    def for_scheme(self, weights: Mapping[str, Any]) -> CompressedTensorsInt4:
        """The variant that checks a config group with these ``weights``."""
        group = declared_group(weights)
        return VARIANTS.get(group) or CompressedTensorsInt4(group)

    def part_multiple(self, experts: bool) -> int | None:
        """:attr:`tp_multiple`, except that experts stored per channel need
        ``moe_intermediate_size / TP`` a multiple of 64: vLLM's only MoE kernel for them is
        Marlin (``CompressedTensorsMoEMethod.get_moe_method`` takes
        ``CompressedTensorsWNA16MoEMethod`` where ``check_moe_marlin_supports_layer`` fails,
        which needs ``intermediate_size_per_partition % max(64, group_size) == 0``, and that
        fallback's ``__init__`` asserts ``strategy == "group"``:
        ``compressed_tensors_moe_wna16.py`` @ b3d71b015da2aa49b57a55e4167518c3bc6eaf8f)."""
        return 64 if experts and self.group is None else self.tp_multiple

    def tp_multiples(self, ckpt: Checkpoint | None) -> tuple[int | None, int | None]:
        """:meth:`part_multiple` per part; no expert constraint where no routed or shared
        expert is quantized (the group-128 recipe that quantizes the dense MLP only)."""
        experts = ckpt is None or any(
            m.quantized and (".experts." in n or ".shared_experts." in n)
            for n, m in ckpt.modules.items())
        return (self.part_multiple(True) if experts else None), self.part_multiple(False)

    engine_paths = (
        EnginePath("vllm", "unsupported", "compressed-tensors WNA16 MoE on {target}: routed "
                   "experts stored per channel have no ROCm kernel (no Marlin on ROCm, and the "
                   "fallback CompressedTensorsWNA16MoEMethod asserts strategy 'group')",
                   f"{_VLLM_CT}compressed_tensors_moe_wna16.py (CompressedTensorsWNA16MoEMethod"
                   ".__init__) @ b3d71b015da2aa49b57a55e4167518c3bc6eaf8f",
                   archs=("rocm",), requires="per-channel-experts"),
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
        """``per-channel-experts``: routed experts are quantized, per channel (vLLM on ROCm
        takes ``CompressedTensorsWNA16MoEMethod`` for every WNA16 MoE layer,
        ``CompressedTensorsMoEMethod.get_moe_method``, and it asserts strategy ``group``).
        ``mxint4``: SGLang's ``CompressedTensorsMxInt4MoE.__init__`` asserts group strategy,
        ``group_size`` 32, 4 bits, symmetric, no ``actorder``, ``pack-quantized`` storage, and
        ``create_weights`` builds BF16 scales (source: ``engine_paths``)."""
        if requires == "per-channel-experts":
            if not any(m.quantized and ".experts." in n for n, m in ckpt.modules.items()):
                return ["no routed expert is quantized"]
            return [] if self.group is None else [f"routed experts are in groups of "
                                                  f"{self.group}, not per channel"]
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
        """The scheme's requirements, a group vLLM loads (:func:`group_size_problem`), and the
        group of this variant: a checkpoint is checked with one group size (the first config
        group's, :meth:`for_configs`)."""
        out: list[str] = []
        if group.get("input_activations") is not None:
            out.append(f"{where}.input_activations must be null (weight-only INT4)")
        out += super().group_problems(where, group)
        found = group.get("weights")
        w: Mapping[str, Any] = found if isinstance(found, dict) else {}
        problem = group_size_problem(f"{where}.weights", w)
        if problem is not None:
            out.append(problem)
        elif declared_group(w) != self.group:
            out.append(f"{where}.weights: group {_name(declared_group(w))}, another group "
                       f"declares {_name(self.group)} (mxformats checks one group size)")
        if w.get("actorder") not in (None, "group"):
            out.append(f"{where}.weights.actorder {w.get('actorder')!r} is not supported")
        return out

    def expected_tensors(self, ckpt: Checkpoint, out: int, inp: int) -> TensorSpec:
        """``weight_scale`` ``[out, inp / group]``, ``[out, 1]`` per channel: the shape
        compressed-tensors writes and vLLM's ``create_weights`` allocates
        (``num_groups_w13 = hidden_size // group_size``, 1 for ``channel``)."""
        groups_per_row = 1 if self.group is None else cdiv(inp, self.group)
        spec: TensorSpec = {
            "weight_packed": (("I32",), ((out, cdiv(inp, 8)),)),
            "weight_scale": (("BF16", "F16", "F32"), ((out, groups_per_row),)),
            "weight_shape": (("I32", "I64"), ((2,),)),
        }
        if actorder(ckpt):
            spec["weight_g_idx"] = (("I32", "I64"), ((inp,),))
        return spec

    def dtype_note(self, param: str, dtype: str) -> str | None:
        return "producers write BF16" if param == "weight_scale" else None

    def scale_findings(self, ckpt: Checkpoint, module: Module,
                       arrays: dict[str, NDArray[Any]]) -> Iterator[Finding]:
        yield from scale_findings(module.tensors["weight_scale"], arrays["weight_scale"])

    def code_findings(self, ckpt: Checkpoint, module: Module, arrays: dict[str, NDArray[Any]],
                      stats: CodeStats) -> Iterator[Finding]:
        return packed_code_findings(ckpt, module, arrays, stats, "int4-group", self.weight_param,
                                    group=self.group)

    def produce(self, w: NDArray[Any]) -> dict[str, NDArray[Any]]:
        q = self.quantizer(w, group_size=self.group, profile=self.profile)
        return {"weight_packed": self.packer(q.q, layout=PRODUCERS[q.profile].layout),
                "weight_scale": q.scales, "weight_shape": np.array(w.shape, dtype=np.int64)}

    def reproduce_in_one_pass(self, module: str, w: NDArray[Any],
                              arrays: dict[str, NDArray[Any]], passes: OnePass = COMPILED
                              ) -> Moments | None:
        """The compiled INT4 pass (:func:`mxformats.fast.reproduce_int4.reproduce_int4`) at
        this variant's group, with ``weight_shape`` the int64 ``[out, in]`` :meth:`produce`
        writes."""
        shape = arrays.get("weight_shape")
        if (self.profile is None or shape is None or shape.dtype != np.int64
                or shape.shape != (w.ndim,)
                or shape.tobytes() != np.array(w.shape, dtype=np.int64).tobytes()
                or not all(p in arrays for p in ("weight_packed", "weight_scale"))):
            return None
        return passes.reproduce_int4(w, arrays["weight_packed"], arrays["weight_scale"],
                                     self.group, self.profile, self.consumer)

    def block_scales(self, arrays: dict[str, NDArray[Any]]) -> tuple[NDArray[Any], float]:
        """The group scales and 8 (the codes span -8..7, stored as q + 8)."""
        return np.asarray(arrays["weight_scale"]), float(-QMIN)

    def dequantize(self, arrays: dict[str, NDArray[Any]], cols: int) -> NDArray[Any]:
        q = fast.unpack_int4(arrays["weight_packed"], layout="compressed-tensors", size=cols)
        d = fast.dequantize_int4(q, arrays["weight_scale"], group_size=self.group,
                                 profile=self.consumer)
        return d


def _name(group: int | None) -> str:
    return "per channel" if group is None else str(group)


#: The descriptor of each group size vLLM loads.
VARIANTS: dict[int | None, CompressedTensorsInt4] = {g: CompressedTensorsInt4(g)
                                                     for g in GROUP_SIZES}
DESCRIPTOR = VARIANTS[32]
