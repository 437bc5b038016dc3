"""The MX producer and activation profiles: which scale rule, element rules, input types, block
sizes and element formats each reproduces, and how each classifies its inputs.

The table :data:`PRODUCERS` of :class:`MXProducer` records (on the one record base,
:mod:`mxformats.records`) is the single source of truth: this module registers it,
:mod:`mxformats.schemes.mx` runs it and :mod:`mxformats.specgen.mx` writes ``spec/mx.md`` from
it. Spec: ``spec/mx.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np

from mxformats.arith import BF16
from mxformats.formats import E2M1, E2M3, E3M2, E4M3FN, E5M2, Format
from mxformats.records import DeprecatedAliases, ProducerRecord
from mxformats.registry import Kind, Scheme, register
from mxformats.schemes.mx import scale_rules as rules
from mxformats.schemes.mx.elements import ElementRules

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from mxformats.schemes.mx.scale_rules import Scale

F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)

MX_ELEMENTS = (E2M1, E2M3, E3M2, E4M3FN, E5M2)
FP4_FP8 = (E2M1, E4M3FN, E5M2)

ScaleRule = Callable[["NDArray[np.float64]", Format, np.dtype[np.generic]], "Scale"]
#: The type ``x * mult`` is rounded into before the element rounding: ``exact`` (no rounding),
#: ``float32``, or ``input`` (the input's own type). It only matters where the quotient
#: underflows: a negative value that becomes -0.0 there is +0 under the sign-function rule.
Arithmetic = Literal["exact", "float32", "input"]


def _ignoring_dtype(rule: Callable[[NDArray[np.float64], Format], Scale]) -> ScaleRule:
    def wrapped(amax: NDArray[np.float64], elem: Format, dtype: np.dtype[np.generic]) -> Scale:
        return rule(amax, elem)

    wrapped.__doc__ = rule.func.__doc__ if isinstance(rule, partial) else rule.__doc__
    return wrapped


@dataclass(frozen=True)
class MXProducer(ProducerRecord):
    """One producer of MX blocks (a dynamic activation quantizer is an :class:`MXActivation`).

    Attributes:
        name, library, version, function, description: the registry entry
            (:class:`~mxformats.records.Record`).
        scale_rule: ``(amax, elem, input dtype) -> Scale``
            (:mod:`mxformats.schemes.mx.scale_rules`).
        elements: the element formats the producer writes.
        dtypes: input dtypes it accepts (others raise ``ValueError`` with ``dtype_reason``).
        rules: the element rules by input dtype name (``"*"``: every dtype).
        block_sizes: the block sizes it takes (None: any).
        partial_blocks: a last block shorter than ``block_size`` is quantized on its own
            elements (the producer pads with zeros); otherwise such sizes raise.
        arithmetic: the type the scaled values are computed in (see :data:`Arithmetic`).
        nan_ignoring_max: the block maximum skips NaN (``__hmax``) instead of propagating it.
        defined, pinned, implementation_defined: the input classification (spec/mx.md).
    """

    scale_rule: ScaleRule
    elements: tuple[Format, ...]
    dtypes: tuple[np.dtype[np.generic], ...]
    rules: dict[str, ElementRules]
    dtype_reason: str = ""
    arithmetic: Arithmetic = "float32"
    block_sizes: tuple[int, ...] | None = (32,)
    partial_blocks: bool = False
    nan_ignoring_max: bool = False
    defined: tuple[str, ...] = ()
    pinned: tuple[str, ...] = ()
    implementation_defined: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=(), repr=False)

    scheme: ClassVar[Scheme] = "mx"

    def element_rules(self, dtype: np.dtype[np.generic]) -> ElementRules:
        return self.rules.get(dtype.name, self.rules.get("*", ElementRules()))

    def arithmetic_dtype(self, dtype: np.dtype[np.generic]) -> np.dtype[np.generic] | None:
        """The type ``x * mult`` is rounded into for input ``dtype`` (None: exact)."""
        return {"exact": None, "float32": F32, "input": dtype}[self.arithmetic]


@dataclass(frozen=True)
class MXActivation(MXProducer):
    """A dynamic activation quantizer (registry kind ``activation``): an :class:`MXProducer`
    that runs at inference time instead of writing checkpoints."""

    kind: ClassVar[Kind] = "activation"


_RNE = ElementRules()
_TORCHAO = ElementRules(nan_code="torchao")
_QUARK = ElementRules(zero_sign="positive", inf_code="quark-pack")
_QUARK_TRITON = ElementRules(rounding="nearest-away", factor_nan_wins=True)
_TORCHAO_DTYPES = (F32, BF16)
_TORCHAO_REASON = "torchao to_mx asserts bfloat16 or float32 input"
_TORCH_REFERENCE_DTYPES = (F32, BF16, F16)
_CPU_NAN = (
    "the sign of a NaN made by arithmetic (Inf * 0, Inf / Inf) is set, as x86 makes it "
    "(torch on CPU)"
)
_ALL_FINITE = "every finite input, in the dtypes listed (executed on CPU)"


def _torchao(mode: str, rule: ScaleRule, description: str, notes: tuple[str, ...]) -> MXProducer:
    rceil = mode == "rceil"  # multiplies by its (possibly NaN) reciprocal; the others divide
    return MXProducer(
        name=f"torchao-{mode}",
        library="torchao",
        version="0.18.0",
        function=f"torchao.prototype.mx_formats.mx_tensor.to_mx(scaling_mode={mode.upper()})",
        description=description,
        scale_rule=rule,
        elements=MX_ELEMENTS,
        dtypes=_TORCHAO_DTYPES,
        dtype_reason=_TORCHAO_REASON,
        rules={"*": ElementRules(nan_code="torchao", factor_nan_wins=True) if rceil else _TORCHAO},
        block_sizes=None,
        defined=(
            _ALL_FINITE,
            "NaN in a block: scale 0xFF; +-Inf in a block: a finite scale and +-max codes",
            "a canonical NaN element: E2M1 0x3, E2M3 0x0C, E3M2 0x0E, FP8 0x7F (0xFF negative)"
            + (
                "; a NaN block is multiplied by the (positive) NaN descale, so every element is "
                "that NaN, whatever its sign"
                if rceil
                else "; the other elements of a NaN block are divided by +Inf"
            ),
        ),
        pinned=(_CPU_NAN + ": an Inf element in a NaN block gives the negative NaN's code",),
        implementation_defined=(
            "NaN payloads other than the canonical quiet NaN: treated as the canonical NaN "
            "with the input's sign",
        ),
        notes=notes,
    )


_TORCHAO_FLOOR_NOTES = (
    "Byte 0x00 blocks are quantized against 2**-126 but decode to 2**-127: they come back 2x "
    "too small (pytorch/ao#1104, sources.md §3.3).",
)

PRODUCERS: dict[str, MXProducer] = {
    p.name: p
    for p in (
        MXProducer(
            name="ocp",
            library="OCP MX",
            version="v1.0",
            function="OCP Microscaling Formats (MX) v1.0 §6.3, Algorithm 1",
            description="The spec: FLOOR scale, round-to-nearest-even, saturating; gaps filled "
            "as stated in spec/mx.md.",
            scale_rule=_ignoring_dtype(rules.ocp_floor),
            elements=MX_ELEMENTS,
            dtypes=(F64, F32, BF16, F16),
            rules={"*": _RNE},
            arithmetic="exact",
            block_sizes=None,
            defined=(
                "every finite block: shared exponent floor(log2(amax)) - emax_elem clamped to "
                "[-127, 127]; elements x / 2**e rounded to nearest-even, saturating at +-max",
            ),
            implementation_defined=(
                "a block holding NaN or +-Inf: a NaN block, scale 0xFF and every code 0x00",
                "an all-zero block: scale 0x00 (log2(0) = -inf clamps to -127), zeros keep "
                "their sign (-0.0 is 0x8 in E2M1)",
                "tiny blocks (amax < 2**(emax-126)): scale 0x00 and elements quantized against "
                "2**-127 itself, so they decode exactly",
                "amax >= 2**(128 + emax) (float64 input only): the exponent clamps to 127 "
                "(0xFE) and the elements saturate",
                "a size not divisible by block_size: ValueError (no producer defines it)",
            ),
        ),
        _torchao(
            "floor",
            _ignoring_dtype(partial(rules.torchao_bits, mode="floor")),
            "torchao to_mx FLOOR: the spec's exponent from float32 bits, RNE, saturating; "
            "quantizes with 2**-126 where it writes 0x00.",
            _TORCHAO_FLOOR_NOTES,
        ),
        _torchao(
            "ceil",
            _ignoring_dtype(partial(rules.torchao_bits, mode="ceil")),
            "torchao to_mx CEIL: the exponent is rounded up unless amax is a power of two.",
            _TORCHAO_FLOOR_NOTES,
        ),
        _torchao(
            "even",
            _ignoring_dtype(partial(rules.torchao_bits, mode="even")),
            "torchao to_mx EVEN: amax rounded to a power of two at significand 2 - 2**-mbits "
            "(1.75 for E2M1) before FLOOR.",
            _TORCHAO_FLOOR_NOTES,
        ),
        _torchao(
            "rceil",
            _ignoring_dtype(rules.torchao_rceil),
            "torchao to_mx RCEIL (eager): 2**ceil(log2(amax / max)) in float32; a 0x00 block is "
            "multiplied by 1.0 and flushes to zero.",
            (
                "log2 is torch's float32 log2: a descale just above 2**k (|k| >= 4) can give "
                "ceil = k (reproduced by rounding log2 to float32).",
            ),
        ),
        *(
            MXProducer(
                name=f"triton-round-{direction}",
                    library="triton_kernels (triton-lang/triton)",
                version="mxfp.py@018a674 (after PR #8110)",
                function="triton_kernels.numerics_details.mxfp.downcast_to_mxfp_torch("
                f"DEQUANT_SCALE_ROUNDING_MODE=ROUND_{direction.upper()})",
                description=description,
                scale_rule=_ignoring_dtype(rule),
                elements=FP4_FP8,
                dtypes=_TORCH_REFERENCE_DTYPES,
                dtype_reason="downcast_to_mxfp_torch takes float32, bfloat16 or float16",
                rules={"*": _RNE},
                partial_blocks=True,
                defined=(
                    _ALL_FINITE + " (the torch reference, ported and executed)",
                    "a NaN element: 0x7 / 0xF (E2M1), 0x7F / 0xFF (FP8)",
                    *extra,
                ),
                pinned=(_CPU_NAN + ": +Inf in a block gives 0xF",),
                implementation_defined=(
                    "the GPU kernel's tl.max may skip NaN (sources.md §7.3); the torch "
                    "reference propagates it, and this profile follows the reference",
                ),
            )
            for direction, rule, description, extra in (
                (
                    "up",
                    rules.triton_round_up,
                    "triton_kernels ROUND_UP (default): 2**ceil(log2(amax/max)) by float32 bit "
                    "arithmetic, RNE (PR #8110); a NaN block gets scale 0x00 and loses the NaN.",
                    ("NaN in a block: scale 0x00, elements multiplied by 0 (NaN lost)",),
                ),
                (
                    "down",
                    rules.triton_round_down,
                    "triton_kernels ROUND_DOWN: the spec's FLOOR from float32 bits; amax < "
                    "2**(emax-126) flushes the block to zero.",
                    ("NaN in a block: scale 0xFF, elements multiplied by 0",),
                ),
            )
        ),
        MXProducer(
            name="quark",
            library="amd-quark",
            version="0.13",
            function="quark.torch ModelQuantizer.direct_quantize_checkpoint with OCP_MXFP4Spec "
            "(PerBlockMXObserver, even_round, fake_quantize_to_low_precision_fp, Pack_fp4, "
            "to_e8m0_uint8)",
            description="Quark file-to-file MXFP4 export: EVEN scale, RNE, -0 -> +0, +Inf -> "
            "0x6, writes 0x01 for a 2**-127 scale.",
            scale_rule=_ignoring_dtype(rules.quark_export),
            elements=(E2M1,),
            dtypes=_TORCH_REFERENCE_DTYPES,
            dtype_reason="Quark quantizes float32, bfloat16 or float16 weights",
            rules={"*": _QUARK},
            partial_blocks=True,
            defined=(
                "every finite input (executed; reproduces kimi-k2-mxfp4-quark byte for byte)",
                "a zero result is +0 (code 0x0), never -0",
                "+Inf -> 0x6, -Inf -> 0xE (Pack_fp4 on the infinite bits); a NaN element 0x7",
                "amax < 2**-125 * 1.75: scale written 0x01 while elements use 2**-127 (decodes "
                "2x too large)",
            ),
            pinned=(
                "NaN in a block: the scale is NaN, round(NaN).to(int16) is 0 on x86, byte 0x7F; "
                "every element x / NaN is NaN: 0x7 (0xF for a NaN input with its sign set)",
            ),
            implementation_defined=(
                "NaN payloads other than the canonical quiet NaN (treated as canonical)",
            ),
        ),
        MXProducer(
            name="quark-triton",
            library="amd-quark",
            version="0.13",
            function="quark.torch.kernel.mx.triton.downcast_to_mxfp_torch("
            "DequantScaleRoundingMode.EVEN)",
            description="Quark's Triton path (QUARK_MXFP4_IMPL=triton), torch reference: EVEN "
            "scale, round-half-up (pre-PR #8110 triton code).",
            scale_rule=_ignoring_dtype(rules.quark_triton),
            elements=(E2M1,),
            dtypes=_TORCH_REFERENCE_DTYPES,
            dtype_reason="downcast_to_mxfp_torch takes float32, bfloat16 or float16",
            rules={"*": _QUARK_TRITON},
            partial_blocks=True,
            defined=(
                _ALL_FINITE + " (the torch reference, executed)",
                "ties round away from zero (0.25 -> 0x1, 2.5 -> 0x5, 5 -> 0x7); -0 kept",
                "NaN in a block: scale 0xFF, every element NaN: 0x7",
            ),
            pinned=(_CPU_NAN,),
            implementation_defined=(
                "the Triton kernel (triton.py L75-L86) turns a NaN maximum into +Inf by bit "
                "arithmetic (scale 0xFE) where the torch reference keeps NaN (0xFF); this "
                "profile follows the reference",
            ),
        ),
        MXProducer(
            name="compressed-tensors",
            library="compressed-tensors",
            version="0.20.1",
            function="compressed_tensors calculate_qparams (generate_mx_scales) + "
            "MXFP4PackedCompressor.compress (mxfp4-pack-quantized)",
            description="compressed-tensors mxfp4-pack-quantized: EVEN in the input's dtype "
            "without a 254 clamp, RNE ladder, sign-function zeros.",
            scale_rule=rules.ct_even,
            elements=(E2M1,),
            dtypes=(F32, BF16),
            dtype_reason="reproduced for bfloat16 and float32 weights; in float16 the scale "
            "2**(e-127) underflows and compressed-tensors substitutes eps (not reproduced)",
            rules={
                "bfloat16": ElementRules(zero_sign="sign-function", nan_code="minus-zero"),
                "float32": ElementRules(zero_sign="sign-function", nan_code="zero"),
            },
            arithmetic="input",
            defined=(
                _ALL_FINITE + " below 1.75 * 2**127",
                "-0.0 -> 0x0; a negative value that rounds to zero -> 0x8 (sign(x) * 0)",
            ),
            pinned=(
                "a block whose exponent computes to 255 (+-Inf, or amax >= 1.75 * 2**127): the "
                "scale is +Inf, every finite element x / Inf -> 0x0, and compress_mx_scale "
                "writes 127 + int32(floor(log2(inf))) = 0x7F (x86 int32(inf) = INT_MIN)",
                "+-Inf elements in such a block: 0x0 (float32 input) or 0x8 (bfloat16 input), "
                "the sign torch's x86 kernels leave on the NaN of Inf / Inf",
            ),
            implementation_defined=(
                "NaN in a block: depends on the block's position in the weight. torch's CPU "
                "maximum (calculate_qparams: max(|min|, |max|)) returns the NaN bits "
                "0xFFFFFFFF on its vectorized path (every block but the last n % 16, float32, "
                "or n % 32, bfloat16, of the n scales) and the canonical NaN on its scalar tail; "
                "the first gives byte 0x00 and elements x * 2**127 (saturated), the second the "
                "0x7F path above. We return the 0x7F path (a one-block tensor's result), with "
                "NaN elements 0x0 (float32) or 0x8 (bfloat16)",
                "float16 input: ValueError (eps substitution not reproduced)",
                "a size not divisible by 32: ValueError",
            ),
            notes=(
                "sources.md §6.3 lists 0xFF for NaN, Inf and huge blocks: that is "
                "generate_mx_scales alone; the written byte, after compress_mx_scale, is 0x7F.",
            ),
        ),
        MXProducer(
            name="microxcaling",
            library="microsoft/microxcaling",
            version="7bc4195",
            function="mx.mx_ops._quantize_mx(round='nearest', custom_cuda=False)",
            description="The MX paper's emulator: FLOOR via float32 log2, round-half-away "
            "('nearest'), NaN/Inf blocks all NaN; outputs values, written here as codes.",
            scale_rule=_ignoring_dtype(rules.microxcaling_floor),
            elements=MX_ELEMENTS,
            dtypes=(F32,),
            dtype_reason="microxcaling computes in the input's dtype with torch.log2; it is "
            "reproduced for float32 input only (widen bfloat16 first if that is what you ran)",
            rules={"*": ElementRules(rounding="microxcaling", zero_sign="sign-function")},
            block_sizes=None,
            partial_blocks=True,
            defined=(
                _ALL_FINITE + "; the float values microxcaling returns are exactly the "
                "ocp-consumer decoding of these codes and scales",
                "floor(log2(amax)) uses float32 log2: amax just below 2**k (|k| >= 4) gets "
                "exponent k",
                "0.5 - 2**-25 ulps of the smallest subnormal rounds up (float32 'x + 0.5')",
            ),
            implementation_defined=(
                "a NaN/Inf block is all NaN in microxcaling; written as scale 0xFF, codes 0x00",
                "-0.0 is written +0 and a negative value rounding to zero -0 (the sign of the "
                "value microxcaling returns)",
            ),
        ),
        MXProducer(
            name="vllm",
            library="vllm",
            version="0.33.0",
            function="vllm.model_executor.layers.quantization.utils.mxfp4_utils."
            "mxfp4_quantize (portable Triton downcast_to_mxfp)",
            description="vLLM's own MXFP4 quantizer: EVEN scale (Quark Triton formula), RNE "
            "with sticky bit, bf16/fp16 input only.",
            scale_rule=_ignoring_dtype(rules.vllm_even),
            elements=(E2M1,),
            dtypes=(BF16, F16),
            dtype_reason="the kernel static_asserts a bfloat16 or float16 source "
            "(tl.static_assert in _downcast_to_mxfp); float32 input is refused",
            rules={"*": ElementRules(generated_nan_negative=False)},
            partial_blocks=True,
            defined=("every finite bfloat16/float16 input (source, emulated in torch)",),
            implementation_defined=(
                "NaN in a block: depends on tl.max on the GPU; this profile takes a "
                "NaN-propagating max (as the research's emulation): scale 0xFE, NaN -> 0x7",
                "+-Inf in a block: scale 0xFE, Inf -> 0x7/0xF (source)",
            ),
        ),
        MXActivation(
            name="quark-hip-qdq",
            library="amd-quark",
            version="0.13",
            function="quark.torch.kernel.mx.hip.qdq_mxfp4_hip(scale_calculation_mode='even') "
            "-> csrc/mxfp4/fake_kernels.cuh qdq_mxfp4_kernel",
            description="Quark's HIP activation QDQ as vLLM uses it: EVEN of the block max in "
            "the input's fp16/bf16 bits, RNE; qdq output = dequantize_mx(profile="
            "'quark-hip-qdq').",
            scale_rule=rules.hip_qdq_even,
            elements=(E2M1,),
            dtypes=(BF16, F16),
            dtype_reason="the kernel is templated on __half and __nv_bfloat16 only",
            rules={"*": ElementRules(generated_nan_negative=False)},
            arithmetic="input",
            nan_ignoring_max=True,
            defined=(
                "every finite block whose rounded max is a normal number (source, not executed)",
            ),
            implementation_defined=(
                "a rounded block max of 0 (all-zero blocks; float16 max < 0.75 * 2**-14; bfloat16 "
                "max < 0.75 * 2**-126): INT_MIN - 2 in the source; we write 0x00 and quantize "
                "against 2**-127 exactly, the kernel's arithmetic if the overflow saturates (in "
                "float16 its scale then flushes to 0, so its zero elements become 0/0 = NaN -> "
                "0x7 where we write 0x0/0x8; the qdq output is +-0 either way); if it wraps, "
                "the kernel writes 0xFE and outputs zeros (bfloat16) or NaN (float16)",
                "an infinite rounded max (+-Inf, float16 max >= 57344): byte 0xFE; in float16 the "
                "scale is then +Inf and the qdq output NaN",
                "NaN inputs: skipped by __hmax; the NaN element becomes +-6 (0x7/0xF)",
            ),
        ),
    )
}
for _record in PRODUCERS.values():
    register(_record.info)


def get_producer(name: str) -> MXProducer:
    """The producer or activation profile ``name`` (ValueError lists the valid ones)."""
    try:
        return PRODUCERS[name]
    except KeyError:
        raise ValueError(
            f"unknown mx producer profile {name!r}; valid: {', '.join(sorted(PRODUCERS))}"
        ) from None


#: The names before the one vocabulary, importable with a DeprecationWarning.
__getattr__ = DeprecatedAliases(__name__, {"Producer": "MXProducer"}, globals())
