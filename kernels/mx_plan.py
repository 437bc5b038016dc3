"""The backend-neutral front end of the MX kernels: argument checks, layout and the **plan**.

Every MX kernel backend (Triton, HIP) calls :func:`prepare_quantize` / :func:`prepare_dequantize`
with the reference's arguments and gets back either the exception the reference raises for the
same bad input (the reference's own checks, reused), ``NotImplementedError`` naming a profile
the backend does not claim, or a call: the input as a contiguous ``(rows, K)`` view of raw bits
(the quantized axis moved last), the outputs allocated on the input's device, and a frozen
:class:`QuantizePlan` / :class:`DequantizePlan` whose plain-integer fields a kernel takes as
compile-time constants. ``finish`` moves the axis back. Spec: ``spec/mx.md``.

Nothing here is keyed by profile name. A plan is derived from the profile's entry in
``PRODUCERS`` / ``CONSUMERS``:

- the **scale rule** becomes a table computed by calling the rule itself: for each float32
  exponent field ``E`` of the block maximum ``amax`` (0..255; 255 is Inf and NaN), the first
  mantissa ``threshold[E]`` at which the rule's result changes and the two results ``below`` and
  ``at_or_above`` it, each a packed :data:`scale entry <SCALE_BYTE_MASK>` (the E8M0 byte, the
  factor ``mult`` the elements are multiplied by as ``2**k``, 0 or NaN, and the NaN-block flag).
  Every scale rule of spec/mx.md changes at most once inside a binade (a floor or ceil of log2,
  a round-to-power-of-two, a division by the element maximum); ``tests/kernels`` checks the
  table against the rule on every 16-bit magnitude and on float32 maxima around every
  threshold. A kernel looks its block's entry up with two loads, no floating point at all;
- the **element rules** become constants: the rounding (even or away), how a zero's sign is
  written, the codes of +-Inf and of positive and negative NaN (taken from the reference
  encoder), the NaN-sign rules, and the exponent below which the producer's arithmetic type
  makes a scaled value zero; and, for each factor ``2**k``, an **element table** found by
  bisection with the reference encoder: the thresholds of ``|x|`` (in the input's bits) at
  which the code steps up, so that a 4-bit code is a count of comparisons;
- a **consumer** becomes a 256-entry table of its decoded scale (``2**k``, 0, +Inf or NaN in its
  arithmetic type, from the consumer's own decoder), plus its clamp and 0xFF rules.

The element arithmetic is integer arithmetic on the bits (:mod:`mxformats.kernels.triton._codec`
for Triton), so a GPU computes exactly what the CPU interpreter computes; the one exception is
E2M1's fast path, whose two float32 operations (a product by ``2**k`` and one addition that
rounds) are each correctly rounded and are checked against the element table for every ``k``
(:func:`addition_code`, :func:`fast_k_limit`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

import ml_dtypes
import numpy as np

from mxformats.arith import BF16, round_to
from mxformats.formats import E2M1, E4M3FN, Format
from mxformats.schemes.mx import MXArray, check_axis, check_elem, check_shape, consumer_dtype
from mxformats.schemes.mx.consumers import CONSUMERS, get_consumer
from mxformats.schemes.mx.elements import ElementRules, encode_elements, nan_codes
from mxformats.schemes.mx.producers import PRODUCERS, MXProducer, get_producer
from mxformats.schemes.mx.scale_rules import Scale

if TYPE_CHECKING:
    import torch
    from numpy.typing import NDArray

__all__ = [
    "KERNEL_ELEMENTS",
    "DequantizeCall",
    "DequantizePlan",
    "FloatLayout",
    "QuantizeCall",
    "QuantizePlan",
    "as_record",
    "dequantize_claims",
    "prepare_dequantize",
    "prepare_quantize",
    "quantize_claims",
    "require_tensor",
]

#: The element formats the kernels write and read.
KERNEL_ELEMENTS: tuple[Format, ...] = (E2M1, E4M3FN)

# -- packed scale entries ---------------------------------------------------------------------
#: A scale entry (int32): bits 0-7 the E8M0 byte, bits 8-15 ``k + 128`` where the factor is
#: ``2**k``, bits 16-17 the factor's kind, bit 18 the NaN-block flag (every code 0x00).
SCALE_BYTE_MASK = 0xFF
SCALE_K_SHIFT = 8
SCALE_K_OFFSET = 128
SCALE_KIND_SHIFT = 16
SCALE_NAN_BLOCK_SHIFT = 18
#: Factor kinds: a power of two, zero, NaN (sign clear), NaN (sign set). Consumers use
#: :data:`KIND_INF` where the quantizer's zero would be (a consumer's scale is never 0 * Inf).
KIND_POW2, KIND_ZERO, KIND_NAN, KIND_NEG_NAN = 0, 1, 2, 3
KIND_INF = KIND_NEG_NAN

#: How a zero result's sign is written (ElementRules.zero_sign), as kernel constants.
ZERO_SIGN_IDS = {"keep": 0, "positive": 1, "sign-function": 2}
#: ``arith_zero_exp`` for exact arithmetic: no scaled value is ever rounded to zero.
EXACT_ZERO_EXP = -(1 << 20)
#: Element NaN/Inf encodings (Format.specials), as kernel constants.
SPECIALS_IDS = {"none": 0, "ieee": 1, "fn": 2, "fnuz": 3}

_F32 = np.dtype(np.float32)


@dataclass(frozen=True)
class FloatLayout:
    """The bit layout of a binary float format, as kernel constants.

    ``specials``: :data:`SPECIALS_IDS`. ``max_code``: the largest finite magnitude's bits.
    ``nan_code``: the canonical quiet NaN (sign clear) where the format has one, else 0.
    """

    bits: int
    ebits: int
    mbits: int
    bias: int
    specials: int
    max_code: int
    inf_code: int
    nan_code: int

    @classmethod
    def of_format(cls, fmt: Format) -> FloatLayout:
        inf = fmt.inf_codes[0] if fmt.inf_codes else 0
        return cls(fmt.bits, fmt.ebits, fmt.mbits, fmt.bias, SPECIALS_IDS[fmt.specials],
                   fmt.max_code, inf, fmt.nan_codes[0] if fmt.nan_codes else 0)

    @classmethod
    def of_dtype(cls, dtype: np.dtype[Any]) -> FloatLayout:
        """float32, bfloat16, float16 (IEEE layouts)."""
        info = ml_dtypes.finfo(dtype)
        bits, mbits = 8 * dtype.itemsize, int(info.nmant)
        ebits = bits - 1 - mbits
        bias = (1 << (ebits - 1)) - 1
        inf = ((1 << ebits) - 1) << mbits
        quiet_nan = inf | (1 << (mbits - 1))
        return cls(bits, ebits, mbits, bias, SPECIALS_IDS["ieee"], inf - 1, inf, quiet_nan)


# -- dtypes -----------------------------------------------------------------------------------

_TORCH_NAMES = ("float32", "bfloat16", "float16")


def _numpy_dtype(torch_dtype: Any) -> np.dtype[Any]:
    name = str(torch_dtype).removeprefix("torch.")
    return BF16 if name == "bfloat16" else np.dtype(name)


def float_dtype_name(dtype: Any) -> str:
    """The name of a torch dtype or a numpy dtype-like (``ml_dtypes.bfloat16`` included)."""
    if str(dtype).startswith("torch."):
        return str(dtype).removeprefix("torch.")
    return str(np.dtype(dtype).name)


R = TypeVar("R")


def as_record(record: Callable[..., R], *fields: object) -> R:
    """The reference's result record (``MXArray``, ``NVFP4Array``, ``FP8BlockArray``,
    ``Int4Array``) of ``fields``, its arrays the kernels' torch tensors: what the reference
    itself returns for torch input (:func:`mxformats.containers.containers`), whose records
    annotate their arrays as numpy."""
    return record(*fields)


def require_tensor(x: object, what: str = "", kernels: str = "MX") -> torch.Tensor:
    """``x`` if it is a torch tensor; TypeError naming the ``kernels`` and ``what`` otherwise
    (every kernel front end's first check of an argument)."""
    import torch

    if not isinstance(x, torch.Tensor):
        raise TypeError(f"the {kernels} kernels take torch tensors, got {type(x).__name__}"
                        + (f" {what}" if what else ""))
    return x


def _bits_view(t: torch.Tensor) -> torch.Tensor:
    """A float tensor's raw bits as a signed integer tensor of the same width (no copy)."""
    import torch

    return t.view(torch.int32 if t.element_size() == 4 else torch.int16)


# -- quantize ---------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class QuantizePlan:
    """Everything an MX quantize kernel needs, for one (profile, element, input dtype, block).

    ``source``/``elem``: the layouts of the input dtype and the element format.
    ``scale_table``: int32 ``(3, 256)``: per float32 exponent field of ``amax``, the mantissa
    threshold and the scale entries below and at-or-above it (see the module docstring).
    ``nan_ignoring_max``: the block maximum skips NaN lanes (no claimed profile has one yet,
    see :func:`quantize_claims`). ``round_away``: ties round away from zero (else to even).
    ``microxcaling_quirk``: the one
    value microxcaling's float32 ``floor(v + 0.5)`` rounds up, half the smallest subnormal
    times ``1 - 2**-24``, codes as the smallest subnormal. ``zero_sign``:
    :data:`ZERO_SIGN_IDS`. ``arith_zero_exp``: a scaled value ``q`` is nonzero in the
    producer's arithmetic type exactly when ``|q| > 2**arith_zero_exp`` (what the
    sign-function rule sees). ``inf_codes``/``nan_codes``: (positive, negative) codes.
    ``generated_nan_negative``/``factor_nan_wins``: the NaN sign rules of ElementRules.
    ``element_table``: int32 ``(256, max_code + 2)``, for each factor ``2**k`` (row
    ``k + SCALE_K_OFFSET``), in magnitude bits of the input type: the thresholds whose count
    at or below ``|x|`` is the element's magnitude code, the smallest ``|x|`` whose scaled
    value is nonzero in the arithmetic type, and the ``|x|`` of the microxcaling quirk (-1:
    none). A kernel may code small formats (E2M1) by comparisons instead of arithmetic.
    ``fast_k_limit``: E2M1 elements of blocks whose factor ``2**k`` has ``FAST_K_MIN <= k``
    below it may be coded by one float32 product and addition instead (:func:`fast_k_limit`).
    """

    profile: str
    elem_name: str
    block_size: int
    source: FloatLayout
    elem: FloatLayout
    nan_ignoring_max: bool
    round_away: bool
    microxcaling_quirk: bool
    zero_sign: int
    arith_zero_exp: int
    inf_codes: tuple[int, int]
    nan_codes: tuple[int, int]
    generated_nan_negative: bool
    factor_nan_wins: bool
    scale_table: NDArray[np.int32] = field(repr=False)
    element_table: NDArray[np.int32] = field(repr=False)
    fast_k_limit: int = -SCALE_K_OFFSET


#: The smallest ``k`` whose factor ``2**k`` is a normal float32: the E2M1 fast path builds
#: it from its bits, ``(k + 127) << 23``.
FAST_K_MIN = -126
#: The float32 bits of +Inf (its exponent field's mask): a magnitude's bits at or above it are
#: Inf or NaN.
F32_INF_BITS = 0x7F800000
#: The float32 bits of 1.0 and 6.0: E2M1's smallest normal value and its largest.
E2M1_ONE_BITS, E2M1_SIX_BITS = 0x3F800000, 0x40C00000
#: The E2M1 rounding addend over the bits of ``max(binade, 1.0)``: ``2**22`` times it, plus 6
#: units in its last place (:func:`addition_code`).
E2M1_ADDEND_OFFSET = (22 << 23) + 6
#: The addend's bits minus these are those of half E2M1's step in the binade (``2**-24``
#: times the addend's power of two).
E2M1_HALF_STEP_BELOW_ADDEND = (24 << 23) + 6


def addition_code(magnitude: NDArray[np.int64], k: NDArray[np.int64], source: FloatLayout,
                  round_away: bool) -> NDArray[np.int64]:
    """The E2M1 magnitude code of ``|x| * 2**k`` (``magnitude``: the bits of a finite ``|x|``
    in the input type ``source``) by the kernels' float32 steps (``_e2m1_fast`` in
    ``kernels/triton/mx.py`` and ``e2m1_magnitude_code`` in ``kernels/triton/_e2m1.py``, the
    same operations; the constants above are theirs): ``|x|`` widened to float32 (exact),
    times the float32 ``2**k`` (one rounding), clamped to 6.0 on the bits, plus ``2**(e + 22)
    + 6 ulp`` (``e`` the binade, 0 below 1; one rounding), the code read off the sum's bits
    ``t`` as ``(t + (t >> 22)) mod 8``, and, where ties round away, one up where the clamped
    ``q`` exceeds the rounded value by exactly half a step (a tie rounded down). ``k`` from
    :data:`FAST_K_MIN`."""
    if source.ebits == 8:  # float32 and bfloat16: the float32 bits are a shift away
        wide = (magnitude.astype(np.uint32) << np.uint32(32 - source.bits)).view(np.float32)
    else:  # float16
        wide = magnitude.astype(np.uint16).view(np.float16).astype(np.float32)
    factor = ((k + 127).astype(np.uint32) << np.uint32(23)).view(np.float32)
    with np.errstate(over="ignore"):  # a product past float32's range is +Inf, clamped
        q = (wide * factor).view(np.int32).astype(np.int64)
    a = np.minimum(q, E2M1_SIX_BITS)
    addend = np.maximum(a & F32_INF_BITS, E2M1_ONE_BITS) + E2M1_ADDEND_OFFSET
    a_value = a.astype(np.uint32).view(np.float32)
    addend_value = addend.astype(np.uint32).view(np.float32)
    total = a_value + addend_value
    bits = total.view(np.int32).astype(np.int64)
    code: NDArray[np.int64] = (bits + (bits >> 22)) & 7
    if round_away:
        half_step = (addend - E2M1_HALF_STEP_BELOW_ADDEND).astype(np.uint32).view(np.float32)
        code += a_value - (total - addend_value) == half_step
    return code


def fast_k_limit(source: FloatLayout, round_away: bool, table: NDArray[np.int32]) -> int:
    """The smallest ``k`` from :data:`FAST_K_MIN` at which :func:`addition_code` may differ
    from the E2M1 element table's thresholds (the reference encoder's); blocks from there,
    and below :data:`FAST_K_MIN`, are coded by the thresholds.

    Each step of :func:`addition_code` is monotone in ``|x|`` (whose bits' order is its
    order), so each row is checked at every threshold from both sides: ``|x|`` at the
    threshold codes at least its level, the ``|x|`` just below codes less. A level no finite
    ``|x|`` reaches has its threshold at Inf's bits (:func:`element_table`): Inf codes 7, and
    the largest finite ``|x|`` is the one checked below it."""
    ks = np.arange(FAST_K_MIN, 256 - SCALE_K_OFFSET, dtype=np.int64)[:, None]
    thresholds = table[ks[:, 0] + SCALE_K_OFFSET, :7].astype(np.int64)
    levels = np.arange(1, 8)[None, :]
    at = addition_code(thresholds, ks, source, round_away)
    below = addition_code(thresholds - 1, ks, source, round_away)
    exact = np.all((at >= levels) & (below < levels), axis=1)
    return int(ks[np.argmin(exact), 0]) if not exact.all() else int(ks[-1, 0]) + 1


def quantize_claims(producer: MXProducer, elem: Format, *, microxcaling: bool = False) -> bool:
    """Whether a kernel that follows the plan computes ``producer`` writing ``elem`` for every
    dtype it takes. ``microxcaling``: the backend implements ``microxcaling_quirk``.

    The kernels round a scaled value once, into the element format; the producer's arithmetic
    type only decides the sign of a zero (``arith_zero_exp``). That is exact when a value that
    overflows the arithmetic type is coded as a saturated one anyway, and when every value that
    type rounds (its subnormals) codes to zero.

    Not claimed: a NaN-ignoring block maximum (Quark's HIP qdq, ``__hmax``;
    :func:`mxformats.schemes.mx.block_max`), which the kernels do not compute.
    """
    if elem not in producer.elements or elem not in KERNEL_ELEMENTS or producer.nan_ignoring_max:
        return False
    if not microxcaling and any(r.rounding == "microxcaling" for r in producer.rules.values()):
        return False
    assert elem.min_subnormal is not None
    f32_max = float(ml_dtypes.finfo(np.float32).max)
    for dtype in producer.dtypes:
        arithmetic = producer.arithmetic_dtype(dtype)
        if dtype.name not in _TORCH_NAMES or arithmetic is None:
            continue
        info = ml_dtypes.finfo(arithmetic)
        overflows = float(info.max) < f32_max
        if overflows and producer.element_rules(dtype).inf_code != "saturate":
            return False
        if elem.min_subnormal / 2 < float(info.smallest_normal):
            return False
    return True


def _pack_scales(scale: Scale) -> NDArray[np.int64]:
    """Scale entries of a :class:`~mxformats.schemes.mx.scale_rules.Scale` (every ``mult``
    must be a power of two, 0 or NaN)."""
    mult = scale.mult
    nan = np.isnan(mult)
    kind = np.where(nan, np.where(np.signbit(mult), KIND_NEG_NAN, KIND_NAN),
                    np.where(mult == 0, KIND_ZERO, KIND_POW2))
    fraction, exponent = np.frexp(np.where(nan | (mult == 0), 1.0, mult))
    k = exponent.astype(np.int64) - 1
    if np.any(fraction != 0.5) or np.any(np.abs(k) > 127):
        raise AssertionError("a scale rule's factor is not 0, NaN or 2**k with |k| <= 127")
    k = np.where(kind == KIND_POW2, k, 0)
    return (scale.byte.astype(np.int64) | ((k + SCALE_K_OFFSET) << SCALE_K_SHIFT)
            | (kind << SCALE_KIND_SHIFT)
            | (scale.nan_block.astype(np.int64) << SCALE_NAN_BLOCK_SHIFT))


def _mantissa_step(dtype: np.dtype[Any], exponent_field: NDArray[np.int64]) -> NDArray[np.int64]:
    """The float32 mantissa step between values of ``dtype`` in each float32 binade (2**23:
    only the binade's first value; binades ``dtype`` cannot hold are never looked up)."""
    info = ml_dtypes.finfo(dtype)
    mbits = int(info.nmant)
    min_exponent = math.frexp(float(info.smallest_normal))[1] - 1  # exact, unlike np.log2
    binade = np.maximum(exponent_field, 1) - 127
    ulp_exponent = np.maximum(binade, min_exponent) - mbits
    step: NDArray[np.int64] = np.left_shift(1, np.clip(ulp_exponent - (binade - 23), 0, 23))
    return step


def scale_table(evaluate: Callable[[NDArray[np.float64]], NDArray[np.int64]],
                dtype: np.dtype[Any]) -> NDArray[np.int32]:
    """The per-binade table of a scale rule ``evaluate`` (amax values -> packed entries) for
    maxima of type ``dtype``: thresholds found by bisection over the binade's values."""
    fields = np.arange(255, dtype=np.int64)
    step = _mantissa_step(dtype, fields)
    count = (1 << 23) // step  # values of `dtype` per binade

    def at(index: NDArray[np.int64]) -> NDArray[np.int64]:
        bits = (fields << 23) | (index * step)
        return evaluate(bits.astype(np.uint32).view(np.float32).astype(np.float64))

    below, top = at(np.zeros_like(fields)), at(count - 1)
    lo, hi = np.zeros_like(fields), count - 1  # invariant: at(lo) == below, at(hi) == top
    changes = below != top
    for _ in range(23):
        mid = (lo + hi) // 2
        same = at(mid) == below
        lo, hi = np.where(same, mid, lo), np.where(same, hi, mid)
    threshold = np.where(changes, hi * step, 1 << 23)
    specials = evaluate(np.array([np.inf, np.nan]))  # exponent field 255: Inf, then NaN
    table = np.stack([
        np.append(threshold, 1),
        np.append(below, specials[0]),
        np.append(top, specials[1]),
    ])
    return table.astype(np.int32)


def element_table(elem: Format, rules: ElementRules, dtype: np.dtype[Any],
                  arithmetic: np.dtype[Any] | None) -> NDArray[np.int32]:
    """:attr:`QuantizePlan.element_table`, by bisection over the input type's magnitudes with
    the reference's own element encoder (rounding once from the exact ``x * 2**k``)."""
    layout = FloatLayout.of_dtype(dtype)
    uint = np.dtype(f"u{dtype.itemsize}")
    ks = np.arange(256, dtype=np.int64) - SCALE_K_OFFSET
    powers = np.ldexp(1.0, ks.astype(np.int32))  # 2**k exactly (np.exp2 is CPU-specific)
    monotone = replace(rules, rounding="nearest-away") if rules.rounding == "microxcaling" \
        else rules

    def values(bits: NDArray[np.int64]) -> NDArray[np.float64]:
        return bits.astype(uint).view(dtype).astype(np.float64)

    def first(predicate: Callable[[NDArray[np.float64]], NDArray[np.bool_]],
              shape: tuple[int, ...]) -> NDArray[np.int64]:
        """The smallest finite magnitude (bits) whose ``x * 2**k`` satisfies the monotone
        ``predicate``, per row k (``layout.inf_code`` where none)."""
        lo = np.full(shape, -1, dtype=np.int64)  # invariant: lo fails, hi satisfies
        hi = np.full(shape, layout.inf_code, dtype=np.int64)
        scale = powers.reshape(-1, *[1] * (len(shape) - 1))
        for _ in range(layout.bits):
            mid = (lo + hi) // 2
            ok = predicate(values(np.maximum(mid, 0)) * scale)
            lo, hi = np.where(ok, lo, mid), np.where(ok, mid, hi)
        return hi

    def magnitude(q: NDArray[np.float64]) -> NDArray[np.int64]:
        rounded = q if arithmetic is None else round_to(q, arithmetic)
        codes = encode_elements(rounded, np.zeros(q.shape, bool), elem, monotone)
        return codes.astype(np.int64) & ((1 << (elem.bits - 1)) - 1)

    count = elem.max_code
    levels = np.arange(1, count + 1)
    with np.errstate(all="ignore"):
        thresholds = first(lambda q: magnitude(q) >= levels, (256, count))
        nonzero = first(lambda q: q != 0 if arithmetic is None else round_to(q, arithmetic) != 0,
                        (256,))
        quirk = np.full(256, -1, dtype=np.int64)
        if rules.rounding == "microxcaling":
            assert elem.min_subnormal is not None
            target = elem.min_subnormal / 2 * (1 - 2.0**-24)
            at = first(lambda q: q >= target, (256,))
            quirk = np.where(values(at) * powers == target, at, -1)
    return np.concatenate([thresholds, nonzero[:, None], quirk[:, None]], axis=1) \
        .astype(np.int32)


@functools.cache
def quantize_plan(profile: str, elem: Format, dtype_name: str, block_size: int) -> QuantizePlan:
    """The plan of ``profile`` writing ``elem`` from ``dtype_name`` input (cached)."""
    producer = PRODUCERS[profile]
    dtype = _numpy_dtype(dtype_name)
    rules = producer.element_rules(dtype)
    arithmetic = producer.arithmetic_dtype(dtype)
    arith_zero_exp = EXACT_ZERO_EXP if arithmetic is None else math.frexp(
        float(ml_dtypes.finfo(arithmetic).smallest_subnormal))[1] - 2  # exact log2, minus 1

    def evaluate(amax: NDArray[np.float64]) -> NDArray[np.int64]:
        # The bisection also visits maxima `dtype` cannot hold (overflowing float16).
        with np.errstate(all="ignore"):
            return _pack_scales(producer.scale_rule(amax, elem, dtype))

    source, layout = FloatLayout.of_dtype(dtype), FloatLayout.of_format(elem)
    round_away = rules.rounding in ("nearest-away", "microxcaling")
    table = element_table(elem, rules, dtype, arithmetic)
    infinities = encode_elements(np.array([np.inf, -np.inf]), np.zeros(2, bool), elem, rules)
    nans = nan_codes(elem, np.array([False, True]), rules.nan_code)
    return QuantizePlan(
        profile=profile, elem_name=elem.name, block_size=block_size,
        source=source, elem=layout,
        nan_ignoring_max=producer.nan_ignoring_max,
        round_away=round_away,
        microxcaling_quirk=rules.rounding == "microxcaling",
        zero_sign=ZERO_SIGN_IDS[rules.zero_sign], arith_zero_exp=arith_zero_exp,
        inf_codes=(int(infinities[0]), int(infinities[1])),
        nan_codes=(int(nans[0]), int(nans[1])),
        generated_nan_negative=rules.generated_nan_negative,
        factor_nan_wins=rules.factor_nan_wins,
        scale_table=scale_table(evaluate, dtype),
        element_table=table,
        fast_k_limit=fast_k_limit(source, round_away, table)
        if elem == E2M1 else -SCALE_K_OFFSET,
    )


@dataclass(frozen=True, eq=False)
class QuantizeCall:
    """One quantize call, ready for a kernel.

    ``source``: the input's bits, a contiguous ``(rows, K)`` int16/int32 tensor (K along the
    quantized axis). ``codes``: uint8 ``(rows, K/2)`` (E2M1) or ``(rows, K)``; ``scales``:
    uint8 ``(rows, ceil(K / block_size))``; both written by the kernel.
    """

    plan: QuantizePlan
    source: torch.Tensor
    codes: torch.Tensor
    scales: torch.Tensor
    lead_shape: tuple[int, ...]
    axis: int
    elem: Format
    block_size: int
    profile: str

    def finish(self) -> MXArray:
        """The reference's record of the outputs (torch tensors on the input's device, as the
        reference returns for torch input), the quantized axis moved back to where it was."""
        def back(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(*self.lead_shape, t.shape[-1]).movedim(-1, self.axis).contiguous()

        return as_record(MXArray, back(self.codes), back(self.scales), self.elem,
                         self.block_size, self.axis, self.profile)


def _check_float_tensor(x: object) -> torch.Tensor:
    import torch

    t = require_tensor(x)
    if t.dtype not in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        raise TypeError(f"quantize_mx takes float16, bfloat16, float32 or float64 data, got "
                        f"{t.dtype}")
    return t


def prepare_quantize(x: object, elem: Format | str, *, block_size: int, axis: int, profile: str,
                     claims: Collection[tuple[str, str]]) -> QuantizeCall:
    """Check a ``quantize_mx`` call as the reference does and lay it out for a kernel.

    ``claims``: the backend's ``(element, profile)`` pairs; a registered profile outside them
    raises ``NotImplementedError`` naming it. Raises what ``mxformats.quantize_mx`` raises
    for the same arguments (ValueError for an unknown profile, an element or dtype the profile
    refuses, a bad axis, a ragged last block the producer does not define, an odd E2M1 length;
    TypeError for non-float data); a float64 tensor the profile takes is NotImplementedError
    (the kernels read at most 32 bits). Block sizes must be powers of two
    (NotImplementedError otherwise).
    """
    import torch

    producer = get_producer(profile)
    fmt = check_elem(elem, producer.elements, f"profile {profile!r}")
    if (fmt.name, profile) not in claims:
        raise NotImplementedError(f"profile {profile!r} writing {fmt.name} is not implemented "
                                  "by this kernel backend")
    t = _check_float_tensor(x)
    dtype = _numpy_dtype(t.dtype)
    if dtype not in producer.dtypes:
        raise ValueError(f"profile {profile!r} does not take {dtype} input: "
                         f"{producer.dtype_reason}")
    if t.dtype == torch.float64:
        raise NotImplementedError("the MX kernels take float32, bfloat16 or float16, not "
                                  "float64 (use the numpy reference)")
    if t.ndim == 0:
        raise ValueError("quantize_mx needs at least one dimension")
    ax = check_axis(t.ndim, axis)
    n = t.shape[ax]
    check_shape(producer, n, fmt, block_size)
    if block_size & (block_size - 1):
        raise NotImplementedError(f"the MX kernels take power-of-two block sizes, not "
                                  f"{block_size}")
    moved = t.movedim(ax, -1)
    lead = tuple(moved.shape[:-1])
    rows = math.prod(lead)
    source = _bits_view(moved.contiguous().reshape(rows, n))
    width = n // 2 if fmt.bits == 4 else n
    codes = torch.empty((rows, width), dtype=torch.uint8, device=t.device)
    scales = torch.empty((rows, -(-n // block_size)), dtype=torch.uint8, device=t.device)
    plan = quantize_plan(profile, fmt, str(t.dtype).removeprefix("torch."), block_size)
    return QuantizeCall(plan, source, codes, scales, lead, ax, fmt, block_size, profile)


# -- dequantize -------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class DequantizePlan:
    """Everything an MX dequantize kernel needs, for one (consumer, element, output dtype).

    ``own``/``out``: the consumer's arithmetic type and the requested output type (``out``
    is ``own`` or an exactly wider type). ``scale_table``: int32 ``(256,)``, the consumer's
    decoded scale of each byte as a packed entry (kind :data:`KIND_POW2`, :data:`KIND_ZERO`,
    :data:`KIND_INF` or :data:`KIND_NAN`). ``clamp``: clamp to ``own``'s largest finite value.
    ``nan_on_ff``: byte 0xFF forces NaN. NaN outputs are ``own``'s canonical quiet NaN.
    """

    profile: str
    elem_name: str
    block_size: int
    elem: FloatLayout
    own: FloatLayout
    out: FloatLayout
    clamp: bool
    nan_on_ff: bool
    scale_table: NDArray[np.int32] = field(repr=False)
    #: Half of each scale byte's decoded scale, as float32 (exact: powers of two at least
    #: 2**-128, zero, Inf or NaN), where ``product`` holds, else None.
    half_factors: NDArray[np.float32] | None = field(default=None, repr=False)

    @property
    def product(self) -> bool:
        """Whether every E2M1 code and scale byte decode as ``round_own(f32(2 |e|) x
        f32(scale / 2))`` with ``e``'s sign, widened to ``out``, NaN ``out``'s canonical one:
        the kernels' fast path (one float32 product). Measured, not assumed:
        :func:`_product_holds` compares it with the reference on all 16 x 256 pairs."""
        return self.half_factors is not None


def _product_holds(profile: str, own: np.dtype[Any], out: np.dtype[Any],
                   half: NDArray[np.float32]) -> bool:
    """Whether the reference consumer ``profile`` decodes every (E2M1 code, scale byte) pair
    into ``out`` as the one float32 product of :attr:`DequantizePlan.product` does."""
    from mxformats.schemes.mx import dequantize_mx

    codes = np.tile(np.arange(16, dtype=np.uint8), (256, 2))  # each block: every code twice
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    scales = np.arange(256, dtype=np.uint8)[:, None]
    try:
        want = np.asarray(dequantize_mx(packed, scales, E2M1, profile=profile, dtype=out))
    except (ValueError, TypeError, NotImplementedError):
        return False
    twice = np.array([0, 1, 2, 3, 4, 6, 8, 12] * 2, dtype=np.float32)[codes]
    with np.errstate(all="ignore"):
        got = np.where(codes >= 8, -1, 1).astype(np.float32) * (twice * half[:, None])
        got = got.astype(own).astype(out)
    nan_want, nan_got = np.isnan(want), np.isnan(got)
    same = want.view(f"u{out.itemsize}") == got.view(f"u{out.itemsize}")
    return bool((nan_want == nan_got).all() and (same | nan_want).all())


def dequantize_claims(consumer_name: str, elem: Format) -> bool:
    """Whether the kernels compute consumer ``consumer_name`` reading ``elem``."""
    return elem in CONSUMERS[consumer_name].elements and elem in KERNEL_ELEMENTS


@functools.cache
def dequantize_plan(profile: str, elem: Format, own_name: str, out_name: str,
                    block_size: int) -> DequantizePlan:
    """The plan of consumer ``profile`` (cached)."""
    consumer = CONSUMERS[profile]
    own = _numpy_dtype(own_name)
    out = _numpy_dtype(out_name)
    decoded = consumer.scale(np.arange(256, dtype=np.int64), own)
    entries = _pack_scales_decoded(decoded)
    with np.errstate(all="ignore"):
        half = (np.asarray(decoded, np.float64) / 2).astype(np.float32)
    exact = bool(np.array_equal(half.astype(np.float64) * 2, decoded, equal_nan=True))
    product = elem is E2M1 and exact and _product_holds(profile, own, out, half)
    return DequantizePlan(
        profile=profile, elem_name=elem.name, block_size=block_size,
        elem=FloatLayout.of_format(elem), own=FloatLayout.of_dtype(own),
        out=FloatLayout.of_dtype(out), clamp=consumer.clamp,
        nan_on_ff=consumer.nan_on_ff, scale_table=entries.astype(np.int32),
        half_factors=half if product else None)


def _pack_scales_decoded(decoded: NDArray[np.float64]) -> NDArray[np.int64]:
    """Scale entries of a consumer's decoded scales: +Inf as :data:`KIND_INF`, NaN as
    :data:`KIND_NAN`, else as the quantizer's factors (no decoder gives a negative scale)."""
    infinite = np.isposinf(decoded)
    finite = Scale(np.zeros(decoded.shape, np.uint8),
                   np.where(infinite, 1.0, np.where(np.isnan(decoded), np.nan, decoded)),
                   np.zeros(decoded.shape, bool))
    entries = _pack_scales(finite)
    kind_bits = 3 << SCALE_KIND_SHIFT
    return np.where(infinite, (entries & ~kind_bits) | (KIND_INF << SCALE_KIND_SHIFT), entries)


@dataclass(frozen=True, eq=False)
class DequantizeCall:
    """One dequantize call, ready for a kernel: ``codes`` uint8 ``(rows, K/2)`` (E2M1) or
    ``(rows, K)``, ``scales`` uint8 ``(rows, ceil(K / block_size))``, both contiguous; ``out``
    the output's bits, int16/int32 ``(rows, K)``, written by the kernel."""

    plan: DequantizePlan
    codes: torch.Tensor
    scales: torch.Tensor
    out: torch.Tensor
    result: torch.Tensor
    lead_shape: tuple[int, ...]
    axis: int

    @property
    def count(self) -> int:
        """Elements per row (K)."""
        return int(self.out.shape[-1])

    def finish(self) -> torch.Tensor:
        """The decoded values, the quantized axis moved back to where it was."""
        return self.result.reshape(*self.lead_shape, self.count).movedim(-1, self.axis) \
            .contiguous()


def _integer_tensor(x: object, what: str) -> torch.Tensor:
    import torch

    t = require_tensor(x, what)
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise TypeError(f"{what} must be integers (uint8), got {t.dtype}")
    if t.dtype != torch.uint8 and t.numel() and int(t.min()) < 0:
        raise ValueError(f"{what} must be non-negative")
    return t


def prepare_dequantize(codes: object, scales: object, elem: Format | str, *, block_size: int,
                       axis: int, profile: str, dtype: Any,
                       claims: Collection[tuple[str, str]]) -> DequantizeCall:
    """Check a ``dequantize_mx`` call as the reference does and lay it out for a kernel.

    ``dtype``: a torch or numpy float dtype; float32, bfloat16 and float16 are computed, float64
    is ``NotImplementedError`` where the consumer takes it. Raises what
    ``mxformats.dequantize_mx`` raises for the same arguments, ``NotImplementedError`` for a
    registered consumer outside ``claims``.
    """
    import torch

    if scales is None:
        raise ValueError("dequantize_mx needs the scales")
    consumer = get_consumer(profile)
    fmt = check_elem(elem, consumer.elements, f"consumer profile {profile!r}")
    if (fmt.name, profile) not in claims:
        raise NotImplementedError(f"consumer profile {profile!r} reading {fmt.name} is not "
                                  "implemented by this kernel backend")
    out_name = float_dtype_name(dtype)
    own = consumer_dtype(consumer, _numpy_dtype(out_name))
    if out_name not in _TORCH_NAMES:
        raise NotImplementedError(f"the MX kernels write float32, bfloat16 or float16, not "
                                  f"{out_name} (use the numpy reference)")
    c = _integer_tensor(codes, "codes")
    s = _integer_tensor(scales, "scales")
    ax = check_axis(c.ndim, axis)
    # Range checks cost a device synchronisation: only for wider integer types than bytes.
    limit = 1 << (8 if fmt.bits == 4 else fmt.bits)  # packed E2M1 bytes hold two codes
    if c.dtype != torch.uint8 and c.numel() and int(c.max()) >= limit:
        raise ValueError(f"{fmt.name} codes are {fmt.bits}-bit; got {int(c.max())}")
    if s.dtype != torch.uint8 and s.numel() and int(s.max()) > 0xFF:
        raise ValueError("E8M0 scales are bytes (0..255)")
    n = c.shape[ax] * (2 if fmt.bits == 4 else 1)
    want = (*c.shape[:ax], -(-n // block_size), *c.shape[ax + 1:])
    if tuple(s.shape) != want:
        raise ValueError(f"scales have shape {tuple(s.shape)}; {n} elements along axis {ax} "
                         f"in blocks of {block_size} need {want}")
    if block_size & (block_size - 1):
        raise NotImplementedError(f"the MX kernels take power-of-two block sizes, not "
                                  f"{block_size}")
    moved_codes = c.movedim(ax, -1)
    lead = tuple(moved_codes.shape[:-1])
    rows = math.prod(lead)
    codes2d = moved_codes.to(torch.uint8).contiguous().reshape(rows, moved_codes.shape[-1])
    scales2d = s.movedim(ax, -1).to(torch.uint8).contiguous().reshape(rows, want[ax])
    result = torch.empty((codes2d.shape[0], n), dtype=getattr(torch, out_name), device=c.device)
    plan = dequantize_plan(profile, fmt, own.name, out_name, block_size)
    return DequantizeCall(plan, codes2d, scales2d, _bits_view(result), result, lead, ax)
