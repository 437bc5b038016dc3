"""The element stage of MX quantization: scaled values to element codes, per producer.

One path for every producer: the exact quotient ``q = x * mult`` is rounded by the reference
codec (:func:`mxformats.codec.encode`, saturating) and then the producer's special-value rules
are applied: how a zero's sign is written, what an infinite and a NaN quotient become, and
microxcaling's one float32 rounding quirk. Spec: ``spec/mx.md``, "Element rules".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from mxformats.formats import Format

Rounding = Literal["nearest-even", "nearest-away", "microxcaling"]
#: ``keep``: IEEE, the sign of q (-0.0 stays -0); ``positive``: every zero result is +0
#: (Quark's C++ ``fake_quantize_element``); ``sign-function``: ``sign(q) * |rounded|`` with
#: ``torch.sign(±0) = +0`` (-0.0 gives +0, a negative value that rounds to zero gives -0;
#: compressed-tensors' ``cast_to_fp4``, microxcaling's ``_round_mantissa``).
ZeroSign = Literal["keep", "positive", "sign-function"]
#: ``all-ones``: every magnitude bit set, with the NaN's sign (a torch float8 cast: 0x7F/0xFF;
#: the E2M1 bit tricks of triton, Quark and vLLM: 0x7/0xF); ``torchao``: what torchao's
#: magic-adder FP4/FP6 cast makes of the canonical NaN (E2M1 0x3, E2M3 0x0C, E3M2 0x0E, plus the
#: sign; float8 elements go through a torch cast: all-ones); ``zero``: 0x0, ``minus-zero``: the
#: -0 code (compressed-tensors' packer on x86, float32 and bfloat16 inputs respectively).
NanCode = Literal["all-ones", "torchao", "zero", "minus-zero"]
#: ``saturate``: ±max; ``quark-pack``: Quark's ``Pack_fp4`` bit extraction, +Inf -> 0x6 (4.0).
InfCode = Literal["saturate", "quark-pack"]


@dataclass(frozen=True)
class ElementRules:
    """How one producer turns a scaled value into a code (see the Literal types above).

    ``generated_nan_negative``: the sign of a NaN that arithmetic creates (Inf * 0, Inf / Inf):
    set on x86 CPUs (the "indefinite" NaN 0xFFC00000; pinned for CPU producers), clear on GPUs.
    A NaN operand propagates with its own sign. ``factor_nan_wins``: when the element and the
    factor are both NaN, the result is the factor's NaN (torch's ``x * r`` with a broadcast NaN
    ``r``, as executed: torchao RCEIL, Quark Triton); a division ``x / s`` keeps x's NaN.
    """

    rounding: Rounding = "nearest-even"
    zero_sign: ZeroSign = "keep"
    nan_code: NanCode = "all-ones"
    inf_code: InfCode = "saturate"
    generated_nan_negative: bool = True
    factor_nan_wins: bool = False


def scaled(
    x: NDArray[np.float64], mult: NDArray[np.float64], rules: ElementRules
) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """``q = x * mult`` (exact in float64) and, for NaN lanes, whether the NaN is negative."""
    with np.errstate(invalid="ignore"):
        q = x * mult
    x_wins = np.isnan(x) & ~(rules.factor_nan_wins & np.isnan(mult))
    nan_negative = np.where(
        x_wins,
        np.signbit(x),
        np.where(np.isnan(mult), np.signbit(mult), rules.generated_nan_negative),
    )
    return q, np.isnan(q) & nan_negative


def _torchao_nan_magnitude(elem: Format) -> int:
    """torchao ``_f32_to_floatx_unpacked`` on the canonical NaN 0x7FC00000: NaN fails both the
    saturate and the denormal comparisons and takes the normal branch (custom_fp_utils.py)."""
    bits = 0x7FC00000
    exp_bias = (1 << (elem.ebits - 1)) - 1
    magic_adder = (1 << (23 - elem.mbits - 1)) - 1
    mant_odd = (bits >> (23 - elem.mbits)) & 1
    normal = bits + ((exp_bias - 127) << 23) + magic_adder + mant_odd
    return (normal >> (23 - elem.mbits)) & 0xFF & ((1 << (elem.bits - 1)) - 1)


def nan_codes(elem: Format, negative: NDArray[np.bool_], rule: NanCode) -> NDArray[np.int64]:
    sign_bit = 1 << (elem.bits - 1)
    signs = np.where(negative, sign_bit, 0)
    if rule == "zero":
        return np.zeros(negative.shape, dtype=np.int64)
    if rule == "minus-zero":
        return np.full(negative.shape, sign_bit, dtype=np.int64)
    if rule == "torchao" and elem.bits < 8:
        return _torchao_nan_magnitude(elem) | signs
    return (sign_bit - 1) | signs


def _microxcaling_quirk(elem: Format, magnitude: NDArray[np.float64]) -> NDArray[np.bool_]:
    """microxcaling rounds ``floor(v + 0.5)`` in float32: for v = 0.5 - 2**-25 the sum rounds to
    1.0, so half the smallest subnormal times (1 - 2**-24) rounds up to it (the only value where
    that float32 addition changes the result; spec/mx.md)."""
    assert elem.min_subnormal is not None
    quirk: NDArray[np.bool_] = magnitude == elem.min_subnormal / 2 * (1 - 2.0**-24)
    return quirk


def encode_elements(
    q: NDArray[np.float64], nan_negative: NDArray[np.bool_], elem: Format, rules: ElementRules
) -> NDArray[np.uint8]:
    """Codes of the scaled values ``q`` under the producer's ``rules`` (saturating)."""
    nan = np.isnan(q)
    infinite = np.isinf(q)
    finite = np.where(nan | infinite, 0.0, q)
    rounding = "nearest-even" if rules.rounding == "nearest-even" else "nearest-away"
    codes = elem.encode(finite, rounding=rounding, overflow="saturate").astype(np.int64)
    sign_bit = 1 << (elem.bits - 1)
    magnitude = codes & (sign_bit - 1)
    if rules.rounding == "microxcaling":
        quirk = _microxcaling_quirk(elem, np.abs(finite))
        magnitude = np.where(quirk, 1, magnitude)
    if rules.zero_sign == "keep":
        negative = np.signbit(finite)
    elif rules.zero_sign == "positive":
        negative = np.signbit(finite) & (magnitude != 0)
    else:  # sign-function
        negative = finite < 0
    codes = magnitude | np.where(negative, sign_bit, 0)
    inf_magnitude = elem.max_code
    if rules.inf_code == "quark-pack":  # bits(Inf / 2**126) >> 22 & 7: the code of 4.0
        inf_magnitude = int(np.flatnonzero(elem.values == 4.0)[0])
    codes = np.where(infinite, inf_magnitude | np.where(q < 0, sign_bit, 0), codes)
    codes = np.where(nan, nan_codes(elem, nan_negative, rules.nan_code), codes)
    return codes.astype(np.uint8)
