"""What the two NVFP4 formats share: E2M1 codes two per byte (element 2j in the low nibble)
``[O, I/2]``, one E4M3 block scale per 16 elements ``[O, I/16]``, and one float32 global scale
per tensor, whose convention differs: ModelOpt stores ``weight_scale_2 = amax / 2688`` (a
multiplier), compressed-tensors ``weight_global_scale = 2688 / amax`` (a divisor). Value =
``e2m1 × block_scale × weight_scale_2`` = ``e2m1 × block_scale / weight_global_scale``.

Numeric invariants, measured on both producers (tests/data/producers/README.md): every
non-zero block's largest |code| is 6 (the block scale maps its amax to 6 within E4M3 rounding),
except where the block scale was clamped (ModelOpt: 2^-9 or 448; compressed-tensors: 448).
ModelOpt's Four-Over-Six recipe (``NVFP4_FOUR_OVER_SIX_CFG``) writes the same config and maps
some blocks' amax to 4 instead: a tensor none of whose non-zero blocks has a scale above
``four_over_six_scale_max`` (384) is read as one, and a largest |code| of 4 is tight there
(``spec/nvfp4.md``, "ModelOpt Four Over Six").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from mxformats import fast
from mxformats.fast.passes import COMPILED, OnePass
from mxformats.formats import E2M1
from mxformats.schemes.nvfp4 import PRODUCERS

from ..findings import MAX_LISTED, Level, Listing, Severity, declare
from ..stats import Count, byte_stats, finding, fp4_peaks, scale_findings, where
from .base import Descriptor, EnginePath, TensorSpec, cdiv
from .nvfp4_fused import FusedDecode, fused_decode, partner

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from mxformats.fast.moments import Moments

    from ..findings import Finding
    from ..model import Checkpoint, CodeStats, Module

#: vLLM's NVFP4 paths: ModelOptNvFp4LinearMethod / ModelOptNvFp4FusedMoE (Marlin fallback below
#: sm100)
_VLLM_MODELOPT = ("vllm-project/vllm vllm/model_executor/layers/quantization/modelopt.py @ "
                  "00155cdecca722d98e34234c3d172725b7720b7d")
_SGLANG_QUANT = "sgl-project/sglang python/sglang/srt/layers/quantization/"
#: SGLang: ModelOptFp4Config (get_min_capability 80) with the auto backends: FlashInfer FP4
#: GEMMs (``initialize_fp4_gemm_config``) and the FlashInfer TRT-LLM MoE on sm100
_SGLANG_MODELOPT = (f"{_SGLANG_QUANT}modelopt_quant.py:1549, fp4_utils.py:156, "
                    "modelopt_quant.py:3123 @ sglang==0.5.23")
#: from sm80 to below sm100 the auto backends are FP4 Marlin, weight only (W4A16): the dense
#: GEMM (``initialize_fp4_gemm_config``) and the MoE (``ModelOptNvFp4FusedMoEMethod``)
_SGLANG_MODELOPT_MARLIN = (f"{_SGLANG_QUANT}fp4_utils.py:158, modelopt_quant.py:1919, "
                           "modelopt_quant.py:2379, modelopt_quant.py:3119 @ sglang==0.5.23")
#: off CUDA no FP4 backend: ModelOptFp4LinearMethod raises "native dense GEMM backends require
#: SM100+", ModelOptNvFp4FusedMoEMethod "Current platform does not support NVFP4"
_SGLANG_MODELOPT_REFUSED = (f"{_SGLANG_QUANT}modelopt_quant.py:1931, modelopt_quant.py:2382 "
                            "@ sglang==0.5.23")

__all__ = ["NVFP4Descriptor"]

#: The NVFP4 formats: their E4M3 block scales and F32 global and activation scales.
_NVFP4_FORMATS = ("compressed-tensors-nvfp4", "compressed-tensors-mixed", "modelopt-nvfp4",
                  "modelopt-mixed")
_GLOBAL_ROLES = ("weight_scale_2", "weight_global_scale")
_INPUT_ROLES = ("input_scale", "input_global_scale")
NVFP4_BLOCK_SCALE = declare(
    "NVFP4_BLOCK_SCALE", severity=Severity.ERROR, level=Level.SCALES, group="numbers",
    conditions=("NaN (0x7F)", "negative NaN (0xFF)", "zero", "negative zero", "negative"),
    formats=_NVFP4_FORMATS, roles=("weight_scale",), dtypes=("F8_E4M3",),
    meaning="An NVFP4 E4M3 block scale is NaN, zero or negative: the block decodes to NaN or zero "
            "(ModelOpt 0.47 exports an all-zero weight with NaN block scales, 0xFF).",
    fix="Re-quantize the module; exclude weights that are all zero.")
NVFP4_GLOBAL_CONVENTION = declare(
    "NVFP4_GLOBAL_CONVENTION", severity=Severity.ERROR, level=Level.SCALES, group="numbers",
    conditions=("the other producer's side of 1",), formats=_NVFP4_FORMATS, roles=_GLOBAL_ROLES,
    dtypes=("F32",),
    meaning="An NVFP4 global scale in the other producer's convention: a ModelOpt weight_scale_2 "
            "is amax/2688 (far below 1), a compressed-tensors weight_global_scale 2688/amax (far "
            "above 1). A value on the wrong side of 1 is the reciprocal: every weight is off by "
            "amax²/2688².",
    fix="Store the global scale in the convention of the config's quant_method.")
NVFP4_BLOCK_NOT_TIGHT = declare(
    "NVFP4_BLOCK_NOT_TIGHT", severity=Severity.ERROR, level=Level.FULL, group="numbers",
    conditions=("largest |code| below 4", "largest |code| 4 and a block scale above 384"),
    formats=_NVFP4_FORMATS, roles=("weight", "weight_packed"), dtypes=("U8",),
    meaning="NVFP4 blocks of 16 whose largest |code| is not 6: both producers map a block's amax "
            "to 6, so a wrong block size, nibble order or scale from another tensor shows here "
            "(blocks with a clamped scale exempt; 4 is tight too in a ModelOpt tensor with no "
            "non-zero block scale above 384, which ModelOpt's Four-Over-Six recipe writes).",
    fix="Re-quantize with 16-element blocks along the input dimension.")
NVFP4_GATE_UP_SCALE = declare(
    "NVFP4_GATE_UP_SCALE", severity=Severity.ERROR, level=Level.SCALES, group="numbers",
    conditions=("an expert's up_proj differs", "an expert's gate_proj differs"),
    formats=_NVFP4_FORMATS, roles=_GLOBAL_ROLES, dtypes=("F32",),
    meaning="Two modules vLLM fuses into one GEMM with one global scale have global scales that "
            "differ beyond vLLM's own torch.allclose (rtol 1e-05, atol 1e-08): an expert's "
            "gate_proj and up_proj (w13: vLLM logs 'w1_weight_scale_2 must match "
            "w3_weight_scale_2' and decodes both with gate's), a dense or shared-expert gate_proj "
            "and up_proj, or q_a_proj and kv_a_proj_with_mqa (vLLM's NVFP4 linears keep the "
            "largest stored value). The other module is decoded with its partner's scale: every "
            "weight off by their ratio, on every backend and target, for both producers "
            "(llm-compressor model_free_ptq writes such files). The finding names the ratio, the "
            "module decoded wrong and the loader line; with --source the reproduction block gives "
            "that module's error as vLLM decodes it.",
    fix="Calibrate the fused modules with one amax (ModelOpt export and llm-compressor oneshot "
        "do), or rescale the block scales of the module decoded wrong onto its partner's global "
        "scale.")
NVFP4_FUSED_INPUT_SCALE = declare(
    "NVFP4_FUSED_INPUT_SCALE", severity=Severity.WARNING, level=Level.SCALES, group="numbers",
    conditions=("an expert's up_proj differs", "an expert's gate_proj differs"),
    formats=_NVFP4_FORMATS, roles=_INPUT_ROLES, dtypes=("F32",),
    meaning="Two modules vLLM fuses into one GEMM have different activation scales (input_scale, "
            "input_global_scale): gate_proj and up_proj (dense, shared expert, or an expert's "
            "w13), or q_a_proj and kv_a_proj_with_mqa. The GEMM quantizes their one input with "
            "one of the two (vLLM takes the max: a logged warning in its linears, silently in its "
            "MoE), so one module's activations are not quantized as calibrated: on a coarser "
            "grid, or clipped at the other's amax (compressed-tensors linears). Both producers "
            "write equal values.",
    fix="Calibrate the fused modules' activations together (ModelOpt and llm-compressor oneshot "
        "do).")

#: The block scale each NVFP4 producer writes for an all-zero block (its zero scale replaced:
#: ModelOpt 1.0, compressed-tensors 0.125; measured on the producer fixtures) -> the producer.
ZERO_BLOCK_PRODUCERS = {p.zero_block_scale: f"{p.name} ({p.library} {p.version})"
                        for p in PRODUCERS.values()}

#: E4M3FN magnitude bits; a byte with all of them set is NaN.
_E4M3_MAG = 0x7F
#: E2M1 magnitude index of 6.0
_SIX = 7
#: packed bytes per block of 16 E2M1 codes
BLOCK_BYTES = 8
#: E2M1 magnitude index of 4.0, the largest code of a Four-Over-Six "M=4" block
_FOUR = 6
#: The most bytes a per-tensor scale can take (a float64 ``[1]``): larger is the layout
#: checks' finding, never read here
_SCALAR_BYTES = 8
#: The vLLM release whose compressed-tensors and MoE sources are cited here (the PyPI wheel;
#: its ``vllm/_version.py`` names commit 4ba787ec9)
VLLM_RELEASE = "vllm==0.33.0 (commit 4ba787ec9)"


class NVFP4Descriptor(Descriptor):
    """An NVFP4 format. Subclasses name the global scale (``global_name``), its convention
    (``global_is_divisor``) and the activation scale."""

    numeric = True
    quantizer = staticmethod(fast.quantize_nvfp4)
    scheme = "nvfp4"
    error_threshold = 0.15
    tp_multiple = 16
    global_name = "weight_scale_2"
    input_name = "input_scale"
    global_is_divisor = False
    global_shapes: tuple[tuple[int, ...], ...] = ((), (1,))
    #: block scales at which the producer clamped (decoded values): exempt from tightness
    clamped_scales: tuple[float, ...] = (448.0,)
    #: the largest non-zero block scale (decoded) of a tensor written by the producer's
    #: Four-Over-Six recipe, where a block's amax may map to 4 rather than 6; None: the producer
    #: has no such recipe
    four_over_six_scale_max: float | None = None
    #: what vLLM does with a fused pair's two activation scales (NVFP4_FUSED_INPUT_SCALE)
    fused_input_loader = ""

    engine_paths: tuple[EnginePath, ...] = (
        EnginePath("vllm", "native", "NVFP4 on {target} runs native FP4 tensor-core GEMMs "
                   "(CUTLASS / FlashInfer)", _VLLM_MODELOPT, archs=("sm100",)),
        EnginePath("vllm", "emulated", "NVFP4 on {target} ({arch}) has no FP4 tensor cores: "
                   "vLLM runs it weight-only through Marlin (CUDA) or dequantizing emulation",
                   _VLLM_MODELOPT),
        EnginePath("sglang", "native", "NVFP4 on {target}: FP4 tensor-core GEMMs and MoE "
                   "(FlashInfer CuTe DSL / TRT-LLM)", _SGLANG_MODELOPT, archs=("sm100",)),
        EnginePath("sglang", "emulated", "NVFP4 on {target} ({arch}) has no FP4 tensor cores: "
                   "SGLang's auto backends run it weight-only through FP4 Marlin (dense and "
                   "MoE); the activation scales (input_scale) are not applied",
                   _SGLANG_MODELOPT_MARLIN, archs=("cuda",)),
        EnginePath("sglang", "unsupported", "SGLang has no NVFP4 backend on {target}: the "
                   "ModelOpt FP4 linear and MoE methods need sm100, or FP4 Marlin (CUDA sm80+); "
                   "they raise at load", _SGLANG_MODELOPT_REFUSED, archs=("rocm",)),
    )

    def group_size(self, ckpt: Checkpoint) -> int:
        return 16

    def has_input_scale(self, ckpt: Checkpoint) -> bool:
        """W4A4 (an activation scale per module) rather than W4A16."""
        return True

    def expected_tensors(self, ckpt: Checkpoint, out: int, inp: int) -> TensorSpec:
        spec: TensorSpec = {
            self.weight_param: (("U8",), ((out, cdiv(inp, 2)),)),
            "weight_scale": (("F8_E4M3",), ((out, cdiv(inp, self.group_size(ckpt))),)),
            self.global_name: (("F32",), self.global_shapes),
        }
        if self.has_input_scale(ckpt):
            spec[self.input_name] = (("F32",), self.global_shapes)
        return spec

    def scale_findings(self, ckpt: Checkpoint, module: Module,
                       arrays: dict[str, NDArray[Any]]) -> Iterator[Finding]:
        ref = module.tensors["weight_scale"]
        b = np.ascontiguousarray(arrays["weight_scale"]).view(np.uint8)
        bad = Count.of(((b & _E4M3_MAG) == _E4M3_MAG) | ((b & _E4M3_MAG) == 0) | (b >= 0x80))
        if bad.n:
            yield finding(NVFP4_BLOCK_SCALE, ref, f"{bad.n} block scale(s) NaN, zero or "
                          f"negative, first byte 0x{int(b.reshape(-1)[bad.first]):02x} at "
                          f"{where(b.shape, bad.first)}", bad.first)
        for p in (self.global_name, self.input_name):
            if p in arrays:
                yield from scale_findings(module.tensors[p], arrays[p],
                                          zero_severity=self.zero_scale_severity(p))
        g = np.asarray(arrays[self.global_name], dtype=np.float64).reshape(-1)
        if g.size and np.isfinite(g[0]) and g[0] > 0 and (g[0] < 1) == self.global_is_divisor:
            other = "ModelOpt weight_scale_2 (amax/2688)" if self.global_is_divisor else \
                "compressed-tensors weight_global_scale (2688/amax)"
            yield finding(NVFP4_GLOBAL_CONVENTION, module.tensors[self.global_name],
                          f"{g[0]!r} looks like a {other}")

    def zero_scale_severity(self, param: str) -> Severity | None:
        """SCALE_ZERO's severity for per-tensor scale ``param``: an error where vLLM divides by
        it, so that a zero gives Inf (the activation scale of both conventions, and the
        compressed-tensors weight global scale), None (SCALE_ZERO's warning: the weight is
        zeroed) for a ModelOpt ``weight_scale_2``, which vLLM multiplies by.

        ModelOpt: ``ModelOptNvFp4LinearMethod.process_weights_after_loading`` sets
        ``input_global_scale = input_scale.max()``, ``alpha = input_global_scale *
        weight_scale_2.max()`` and ``input_global_scale_inv = 1.0 / input_global_scale``
        (vllm-project/vllm ``vllm/model_executor/layers/quantization/modelopt.py`` @
        00155cdecca722d98e34234c3d172725b7720b7d). compressed-tensors:
        ``CompressedTensorsW4A4Fp4.process_weights_after_loading`` replaces
        ``weight_global_scale`` by ``1.0 / weight_global_scale.max()`` and
        ``input_global_scale`` by ``1.0 / input_global_scale.max()``, ``alpha`` being their
        product (``vllm/model_executor/layers/quantization/compressed_tensors/schemes/
        compressed_tensors_w4a4_nvfp4.py:111-135``), and the experts' method hands
        ``1.0 / w13_weight_global_scale`` and ``1.0 / w13_input_global_scale`` to the kernels
        (``compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_w4a4_nvfp4.py:
        248-253``), both @ vllm==0.33.0 (commit 4ba787ec9)."""
        divides = param == self.input_name or self.global_is_divisor
        return Severity.ERROR if divides else None

    def code_findings(self, ckpt: Checkpoint, module: Module, arrays: dict[str, NDArray[Any]],
                      stats: CodeStats) -> Iterator[Finding]:
        ref = module.tensors[self.weight_param]
        gs = self.group_size(ckpt)
        gmax, hist = fp4_peaks(arrays[self.weight_param], gs // 2)
        scales = np.asarray(arrays["weight_scale"]).astype(np.float64)
        if gmax.shape != scales.shape:
            return  # the layout checks report the shapes
        stats.hist["fp4"] = stats.hist.get("fp4", np.zeros(16, np.int64)) + hist
        stats.count_zero_blocks(scales[gmax == 0], ZERO_BLOCK_PRODUCERS,
                                "all-zero NVFP4 blocks")
        clamped = np.isin(scales, self.clamped_scales)
        tight = gmax == _SIX
        if self.is_four_over_six(gmax, scales):
            tight |= gmax == _FOUR
        loose = Count.of((gmax > 0) & ~tight & ~clamped)
        if loose.n:
            row, blk = divmod(loose.first, scales.shape[1])
            yield finding(NVFP4_BLOCK_NOT_TIGHT, ref, f"{loose.n} non-zero block(s) whose "
                          f"largest |code| is below 6 (first: row {row}, block {blk})",
                          row * (scales.shape[1] * gs // 2) + blk * gs // 2, 1)

    def is_four_over_six(self, gmax: NDArray[Any], scales: NDArray[np.float64]) -> bool:
        """Whether a tensor (``gmax``: the largest E2M1 magnitude index per block; ``scales``:
        its decoded block scales) was written by the producer's Four-Over-Six recipe: it has
        one, the tensor has a non-zero block, and no non-zero block's scale exceeds
        :attr:`four_over_six_scale_max`. The plain recipe maps the tensor's largest block to
        scale 448, so it never passes; zero blocks are left out because the 4/6 export clamps
        their scale, ``1.0 * 256 / (amax / 6)``, to 448."""
        if self.four_over_six_scale_max is None:
            return False
        nonzero = gmax > 0
        return bool(nonzero.any()) and float(scales[nonzero].max()) <= self.four_over_six_scale_max

    def unclaimed_tensors(self, arrays: dict[str, NDArray[Any]],
                          produced: dict[str, NDArray[Any]]) -> str:
        """Four-Over-Six block scales (:meth:`is_four_over_six`) that are not the plain
        recipe's: 4/6 normalises by 256 instead of 448, so its scales never equal the plain
        ones, while a plain tensor whose global scale it shares with a larger sibling (gate
        and up) can have every scale under the 4/6 bound; its other bytes are then claimed."""
        if self.four_over_six_scale_max is None:
            return ""
        st = byte_stats(arrays[self.weight_param], "fp4", BLOCK_BYTES)
        stored = np.asarray(arrays["weight_scale"])
        scales = stored.astype(np.float64)
        if st.gmax.shape != scales.shape or not self.is_four_over_six(st.gmax, scales):
            return ""
        plain = np.asarray(produced["weight_scale"])
        if plain.shape == stored.shape and np.array_equal(plain.view(np.uint8),
                                                          stored.view(np.uint8)):
            return ""
        return (f"ModelOpt Four-Over-Six block scales (no non-zero block above "
                f"{self.four_over_six_scale_max:g}), a recipe no producer profile reproduces")

    def produce_module(self, module: str, w: NDArray[Any],
                       sibling: Callable[[str], NDArray[Any] | None]) -> dict[str, NDArray[Any]]:
        amax = None
        fused = partner(module)
        if fused is not None:
            other = sibling(fused[0])
            if other is not None:
                amax = max(float(np.max(np.abs(np.asarray(a, np.float32)))) for a in (w, other))
        r = self.quantizer(w, profile=self.profile or "", global_amax=amax)
        return {self.weight_param: r.packed(),
                "weight_scale": r.scales.view(ml_dtypes.float8_e4m3fn),
                self.global_name: r.global_scale}

    def produce(self, w: NDArray[Any]) -> dict[str, NDArray[Any]]:
        return self.produce_module("", w, lambda name: None)

    def produced_params(self) -> tuple[str, ...]:
        return (self.weight_param, "weight_scale", self.global_name)

    def reproduce_in_one_pass(self, module: str, w: NDArray[Any],
                              arrays: dict[str, NDArray[Any]], passes: OnePass = COMPILED
                              ) -> Moments | None:
        """The compiled NVFP4 pass (:func:`mxformats.fast.reproduce_nvfp4.reproduce_nvfp4`):
        the checkpoint's own global scale, checked to be the one the producer writes from this
        module alone. A module calibrated with its fused sibling's larger amax (ModelOpt
        ``sync_moe_gate_up_amax``, llm-compressor's fused global scale) is left to
        :meth:`produce_module`, which reads the sibling's source."""
        packed, scales, stored = self.produced_params()
        if self.profile is None or not all(p in arrays for p in (packed, scales, stored)):
            return None
        return passes.reproduce_nvfp4(w, arrays[packed], arrays[scales], arrays[stored],
                                      self.profile, self.consumer)

    def block_scales(self, arrays: dict[str, NDArray[Any]]) -> tuple[NDArray[Any], float] | None:
        """The E4M3 block scales and 6 (E2M1's largest value) times the ``weight_scale_2``
        multiplier (ModelOpt) or divided by the ``weight_global_scale`` divisor
        (compressed-tensors), as the value formula of this module's docstring; None without a
        global scale (the layout checks report it)."""
        g = np.asarray(arrays[self.global_name], np.float64).reshape(-1)
        if not g.size:
            return None
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            factor = E2M1.max / g[0] if self.global_is_divisor else E2M1.max * g[0]
        return np.asarray(arrays["weight_scale"]), float(factor)

    def dequantize(self, arrays: dict[str, NDArray[Any]], cols: int) -> NDArray[Any]:
        codes = np.ascontiguousarray(arrays[self.weight_param]).view(np.uint8)
        scales = np.ascontiguousarray(arrays["weight_scale"]).view(np.uint8)
        d = fast.dequantize_nvfp4(codes, scales, arrays[self.global_name], packed=True,
                                  profile=self.consumer)
        return d[..., :cols]

    def fingerprints(self, ckpt: Checkpoint, arrays: dict[str, dict[str, NDArray[Any]]]
                     ) -> Iterator[str]:
        values: dict[tuple[str, str], set[bytes]] = {}
        counts: dict[tuple[str, str], int] = {}
        for name, found in arrays.items():
            layer, sep, rest = name.partition(".mlp.experts.")
            if sep and self.input_name in found:
                key = (layer, rest.rpartition(".")[2])
                values.setdefault(key, set()).add(found[self.input_name].tobytes())
                counts[key] = counts.get(key, 0) + 1
        shared = sorted(key for key, v in values.items() if len(v) == 1 and counts[key] > 1)
        if shared:
            layer, projection = shared[0]
            yield (f"{self.input_name} is one value for all experts in {len(shared)} of "
                   f"{len(values)} (layer, projection) pairs (e.g. {layer} {projection}): "
                   "one calibration value per layer, or experts never routed during "
                   "calibration")
        pairs = [(found, arrays.get(name[: -len("gate_proj")] + "up_proj"))
                 for name, found in arrays.items()
                 if name.endswith(".gate_proj") and ".experts." in name]
        same = [g[self.global_name].tobytes() == u[self.global_name].tobytes()
                for g, u in pairs if u is not None and self.global_name in g
                and self.global_name in u]
        if same and all(same):
            yield (f"gate_proj and up_proj share one {self.global_name} in all {len(same)} "
                   "experts (ModelOpt sync_moe_gate_up_amax; llm-compressor oneshot's fused "
                   "global scale)")

    def layer_findings(self, ckpt: Checkpoint, arrays: dict[str, dict[str, NDArray[Any]]]
                       ) -> Iterator[Finding]:
        """Per pair of modules vLLM fuses (:data:`~.nvfp4_fused.FUSED_PAIRS`: an expert's gate
        and up, a dense or shared-expert gate and up, q_a_proj and kv_a_proj_with_mqa):
        NVFP4_GATE_UP_SCALE, an error, on the module vLLM decodes with its partner's global
        scale where their global scales differ beyond vLLM's ``torch.allclose``
        (:func:`~.nvfp4_fused.fused_decode`, whose docstring cites the loaders),
        NVFP4_FUSED_INPUT_SCALE where their activation scales differ. The first
        :data:`MAX_LISTED` of each check are listed, the rest counted in one summary (a
        producer that calibrates them apart does so in every layer: one cause, thousands of
        experts), which for NVFP4_GATE_UP_SCALE also says how many pairs of how many differ
        and the spread of their ratios.

        NVFP4_FUSED_INPUT_SCALE is a warning, not an error: vLLM quantizes the fused GEMM's
        one input with one of the two scales and folds that same scale into ``alpha``, so the
        output stays in scale; what changes is the quantization grid of one module's
        activations. ModelOpt linears: ``input_scale.max()`` after a ``warning_once``
        (``ModelOptNvFp4LinearMethod.process_weights_after_loading``, ``modelopt.py`` @
        00155cd), the larger amax: a coarser grid for the other. compressed-tensors linears:
        ``input_global_scale.max()`` after a ``warning_once``, a divisor, so the smaller amax:
        the other's activations above it saturate (``compressed_tensors_w4a4_nvfp4.py:115-128``
        @ vllm==0.33.0). The experts' w13, both producers: ``a13_scale.max(dim=1)`` of the
        multipliers per expert, silently, or one value for all experts on the FlashInfer
        backends (``amax_for_moe_activation_quant``; ``utils/flashinfer_fp4_moe.py:386-397``
        @ vllm==0.33.0)."""
        scales, listed = Listing(MAX_LISTED), Listing(MAX_LISTED)
        inputs = self.has_input_scale(ckpt)
        ratios: list[float] = []
        pairs = 0
        for name in sorted(arrays):
            fused = partner(name)
            other = None if fused is None or fused[1] else arrays.get(fused[0])
            if fused is None or other is None:
                continue
            second = fused[0]
            pairs += 1
            decode = self.fused_decode(name, second, arrays[name], other)
            if decode is not None:
                ratios.append(decode.ratio)
                yield from scales.add(self._decode_finding(ckpt, decode))
            differ = _differing(arrays[name], other, self.input_name) if inputs else None
            if differ is not None:
                yield from listed.add(finding(
                    NVFP4_FUSED_INPUT_SCALE, ckpt.tensors[f"{second}.{self.input_name}"],
                    f"{self.input_name} {differ[1]!r}, {name.rpartition('.')[2]} has "
                    f"{differ[0]!r}: {self.fused_input_loader}"))
        if ratios:
            off = np.abs(np.asarray(ratios) - 1)
            scales.note = (f" (of {pairs} fused pair(s), {len(ratios)} decoded with the "
                           f"partner's global scale: |ratio - 1| median "
                           f"{float(np.median(off)):.2%}, max {float(off.max()):.2%})")
        yield from scales.rest()
        yield from listed.rest()

    def fused_decode(self, first: str, second: str, a: dict[str, NDArray[Any]],
                     b: dict[str, NDArray[Any]]) -> FusedDecode | None:
        """How vLLM decodes fused modules ``first`` and ``second`` (their arrays ``a`` and
        ``b``, in pair order), or None where both global scales are not positive finite
        values (other checks' findings) or agree (:func:`~.nvfp4_fused.fused_decode`)."""
        differ = _differing(a, b, self.global_name)
        if differ is None:
            return None
        return fused_decode(first, second, differ, self.global_name, self.global_is_divisor)

    def _decode_finding(self, ckpt: Checkpoint, decode: FusedDecode) -> Finding:
        """NVFP4_GATE_UP_SCALE on the global scale of the module decoded wrong."""
        mine, theirs = (n.rpartition(".")[2] for n in (decode.wrong, decode.partner))
        return finding(
            NVFP4_GATE_UP_SCALE, ckpt.tensors[f"{decode.wrong}.{self.global_name}"],
            f"{decode.own_scale!r}, but vLLM decodes {mine} with {theirs}'s "
            f"{self.global_name} {decode.engine_scale!r}: every weight of {mine} x"
            f"{decode.ratio:.6g} ({decode.ratio - 1:+.2%}) [{decode.loader}]",
            ratio=decode.ratio, module=decode.wrong, partner=decode.partner,
            loader=decode.loader)

    def engine_arrays(self, ckpt: Checkpoint, module: str, arrays: dict[str, NDArray[Any]]
                      ) -> tuple[dict[str, NDArray[Any]], str] | None:
        """``arrays`` with the global scale vLLM decodes ``module`` with where that is its
        fused partner's (:meth:`fused_decode`), and what vLLM does in words; None where vLLM
        decodes the module with its own."""
        fused = partner(module)
        ref = None if fused is None else ckpt.tensors.get(f"{fused[0]}.{self.global_name}")
        if fused is None or ref is None or self.global_name not in arrays:
            return None
        try:
            theirs = {self.global_name: ckpt.read(ref.name, max_bytes=_SCALAR_BYTES)}
        except (ValueError, OSError):
            return None  # the files or layout checks report it
        mine = {self.global_name: arrays[self.global_name]}
        pair = ((module, fused[0], mine, theirs) if fused[1] == 0
                else (fused[0], module, theirs, mine))
        decode = self.fused_decode(*pair)
        if decode is None or decode.wrong != module:
            return None
        own = np.asarray(arrays[self.global_name])
        engine = dict(arrays)
        engine[self.global_name] = np.full(own.shape, decode.engine_scale, own.dtype)
        said = (f"decoded with {decode.partner.rpartition('.')[2]}'s {self.global_name} "
                f"(x{decode.ratio:.6g})")
        return engine, said


def _differing(first: dict[str, NDArray[Any]], second: dict[str, NDArray[Any]], param: str
               ) -> tuple[float, float] | None:
    """The per-tensor scale ``param`` of two fused modules when both hold a positive finite
    one and they differ, else None: a NaN, Inf, zero or negative one is SCALE_NONFINITE's,
    SCALE_ZERO's or SCALE_NEGATIVE's finding, never a second one here. An empty scale, or
    one of another shape, never reaches here: the layout refuses its module
    (:func:`~mxformats.validate.layout.decodable`), so each holds one value."""
    if param not in first or param not in second:
        return None
    a = np.asarray(first[param], np.float64).reshape(-1)
    b = np.asarray(second[param], np.float64).reshape(-1)
    x, y = float(a[0]), float(b[0])
    ok = all(math.isfinite(v) and v > 0 for v in (x, y))
    return (x, y) if ok and x != y else None
