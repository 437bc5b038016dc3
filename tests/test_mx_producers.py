"""Per-profile properties of quantize_mx, with Hypothesis, against scalar oracles written
independently of mxformats (struct bit arithmetic and Fractions, one block at a time, from each
producer's source as cited in spec/mx.md), and the input classification: every *defined*,
*pinned* and *implementation-defined* class of every producer is exercised here.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from conftest import requires
from hypothesis import given, settings
from hypothesis import strategies as st

from mxformats import E2M1, E2M3, E3M2, E4M3FN, E5M2, Format
from mxformats.schemes.mx import quantize_mx, unpack_fp4
from mxformats.schemes.mx.producers import PRODUCERS

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
SPEC = Path(__file__).resolve().parent.parent / "spec" / "mx.md"

# -- scalar oracles ----------------------------------------------------------------------------


def bits32(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


def from_bits32(b: int) -> float:
    return struct.unpack("<f", struct.pack("<I", b & 0xFFFFFFFF))[0]


def bits16(v: float) -> int:
    """bfloat16 bits of a value exact in bfloat16."""
    return bits32(v) >> 16


def floor_log2(v: float) -> int:
    return math.frexp(v)[1] - 1


def f32(v: float) -> float:
    return float(np.float32(v))


def log2f(v: float) -> float:
    """log2 rounded to float32 (torch's float32 log2 agrees near integers)."""
    return f32(math.log2(v)) if v > 0 else -math.inf


def even_exponent(amax: float, emax: int = 2, mbits: int = 1) -> float:
    """Quark even_round / vLLM: add half the element ulp to amax's float32 bits, floor."""
    p = from_bits32((bits32(amax) + (1 << (22 - mbits))) & 0xFF800000)
    if p == 0:
        return -127
    if not math.isfinite(p):  # log2(inf) - emax clamps to 127
        return 127
    return max(-127, min(127, floor_log2(p) - emax))


def scale_oracle(profile: str, amax: float, fmt: Format) -> tuple[int, float]:
    """(byte written, factor applied to the elements) for a finite block maximum ``amax``."""
    emax = fmt.emax
    assert emax is not None
    if profile == "ocp":
        e = -127 if amax == 0 else max(-127, min(127, floor_log2(amax) - emax))
        return e + 127, 2.0**-e
    if profile.startswith("torchao-") and profile != "torchao-rceil":
        b = bits32(amax)
        if profile == "torchao-even":
            b = (b + (1 << (22 - fmt.mbits))) & 0xFF800000
        unbiased = ((b >> 23) & 0xFF) - 127 - emax
        if profile == "torchao-ceil" and bits32(amax) & 0x7FFFFF:
            unbiased += 1
        byte = max(-127, min(128, unbiased)) + 127
        return byte, 2.0 ** -(max(byte, 1) - 127)
    if profile == "torchao-rceil":
        d = f32(np.float32(amax) / np.float32(fmt.max))
        e = -127 if d == 0 else max(-127, min(127, math.ceil(log2f(d))))
        return e + 127, 1.0 if e == -127 else 2.0**-e
    if profile.startswith("triton-"):
        if profile == "triton-round-up":
            b = (bits32(f32(np.float32(amax) / np.float32(fmt.max))) + 0x7FFFFF) & 0x7F800000
        else:
            b = bits32(f32(np.float32(amax) / np.float32(2.0**emax))) & 0x7F800000
        return b >> 23, 0.0 if b == 0 else 1 / from_bits32(b)
    if profile in ("quark", "quark-triton", "vllm"):
        e = even_exponent(amax, emax, fmt.mbits)
        return (max(e, -126) if profile == "quark" else e) + 127, 2.0**-e
    if profile == "compressed-tensors":  # float32 input here; see the bf16 tests below
        p = from_bits32((bits32(amax) + (1 << 21)) & 0xFF800000)
        raw = 0 if p == 0 else min(255, max(0, 127 + (floor_log2(p) if math.isfinite(p) else 999)
                                            - emax))
        return (0x7F, 0.0) if raw == 255 else (raw, 2.0 ** (127 - raw))
    if profile == "microxcaling":
        e = max(-127, math.floor(log2f(amax if amax else 2.0**-126)) - emax)
        return e + 127, 2.0**-e
    if profile == "quark-hip-qdq":  # bfloat16 input
        p16 = ((bits16(amax) + 0x20) & 0xFFFF) & 0xFF80
        p = from_bits32(p16 << 16)
        if p == 0:
            return 0, 2.0**127
        byte = 254 if not math.isfinite(p) else max(0, min(254, 127 + floor_log2(p) - emax))
        return byte, 2.0 ** (127 - byte)
    raise AssertionError(profile)


def magnitudes(fmt: Format) -> list[Fraction]:
    values = fmt.values[np.isfinite(fmt.values) & (fmt.values >= 0) & ~np.signbit(fmt.values)]
    return sorted(Fraction(float(v)) for v in values)


def element_oracle(fmt: Format, q: float, ties: str, zero_sign: str, quirk: bool) -> int:
    """The code of a finite scaled value ``q``: nearest magnitude, ties to even (code LSB 0) or
    away, saturating at max; the zero sign by the profile's rule."""
    table = magnitudes(fmt)
    a = Fraction(abs(q))
    if a >= table[-1]:
        index = len(table) - 1
    else:
        index = next(i for i, m in enumerate(table) if m >= a)
        if index and a - table[index - 1] < table[index] - a:
            index -= 1
        elif index and a - table[index - 1] == table[index] - a:
            lower = index - 1
            index = index if ties == "away" else (lower if lower % 2 == 0 else index)
    if quirk and a == table[1] / 2 * (1 - Fraction(1, 2**24)):
        index = 1
    magnitude = int(np.flatnonzero(fmt.values == float(table[index]))[0])
    sign = 1 << (fmt.bits - 1)
    if zero_sign == "keep":
        negative = math.copysign(1.0, q) < 0
    elif zero_sign == "positive":
        negative = q < 0 and magnitude != 0
    else:
        negative = q < 0
    return magnitude | (sign if negative else 0)


ELEMENT_STYLE = {  # profile -> (ties, zero sign, float32 quotient)
    "ocp": ("even", "keep", False),
    "torchao-floor": ("even", "keep", True),
    "torchao-ceil": ("even", "keep", True),
    "torchao-even": ("even", "keep", True),
    "torchao-rceil": ("even", "keep", True),
    "triton-round-up": ("even", "keep", True),
    "triton-round-down": ("even", "keep", True),
    "quark": ("even", "positive", True),
    "quark-triton": ("away", "keep", True),
    "compressed-tensors": ("even", "sign-function", True),
    "microxcaling": ("away", "sign-function", True),
    "vllm": ("even", "keep", True),
    "quark-hip-qdq": ("even", "keep", False),
}


def block_oracle(profile: str, block: list[float], fmt: Format) -> tuple[int, list[int]]:
    amax = max(abs(v) for v in block)
    byte, mult = scale_oracle(profile, amax, fmt)
    ties, zero_sign, float32 = ELEMENT_STYLE[profile]
    codes = []
    for v in block:
        q = f32(np.float32(v) * np.float32(mult)) if float32 else v * mult
        codes.append(element_oracle(fmt, q, ties, zero_sign, profile == "microxcaling"))
    return byte, codes


# -- strategies --------------------------------------------------------------------------------

TIES = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 7.0, 0.5, 1.5, 3.0, 4.0, 0.1, 17.0, 464.0]


@st.composite
def finite_blocks(draw: st.DrawFn, dtype: np.dtype) -> list[float]:
    """32 finite values of ``dtype``: a block exponent, values near it (ties of the E2M1 and
    E4M3 grids, random significands), zeros of both signs, subnormals, huge and tiny values."""
    k = draw(st.integers(-140, 125))
    near = st.builds(
        lambda t, s, j: s * t * 2.0 ** (k + j),
        st.sampled_from(TIES), st.sampled_from([1.0, -1.0]), st.integers(-4, 1),
    )
    random = st.floats(width=32, allow_nan=False, allow_infinity=False)
    special = st.sampled_from([0.0, -0.0, 2.0**-149, -(2.0**-149), 2.0**-127, -(2.0**-126),
                               float(np.finfo(np.float32).max), 3e38, 1e-38, -5e-39])
    values = draw(st.lists(st.one_of(near, near, random, special), min_size=32, max_size=32))
    with np.errstate(over="ignore"):
        cast = np.array(values).astype(np.float32).astype(dtype).astype(np.float64)
    cast[~np.isfinite(cast)] = 0.0
    return [float(v) for v in cast]


def _run(profile: str, block: list[float], dtype: np.dtype, fmt: Format = E2M1
         ) -> tuple[int, list[int]]:
    codes, scales = quantize_mx(np.array(block).astype(np.float32).astype(dtype), fmt,
                                profile=profile)
    logical = unpack_fp4(codes) if fmt is E2M1 else codes
    return int(scales[0]), [int(c) for c in logical]


FLOAT32_PROFILES = sorted(p for p in PRODUCERS if F32 in PRODUCERS[p].dtypes)
BF16_ONLY = sorted(p for p in PRODUCERS if F32 not in PRODUCERS[p].dtypes)


@pytest.mark.parametrize("profile", FLOAT32_PROFILES)
@settings(max_examples=40, deadline=None)
@given(block=finite_blocks(F32))
def test_finite_blocks_match_the_oracle_float32(profile: str, block: list[float]) -> None:
    assert _run(profile, block, F32) == block_oracle(profile, block, E2M1)


@pytest.mark.parametrize("profile", BF16_ONLY)
@settings(max_examples=40, deadline=None)
@given(block=finite_blocks(BF16))
def test_finite_blocks_match_the_oracle_bfloat16(profile: str, block: list[float]) -> None:
    if profile == "quark-hip-qdq" and max(abs(v) for v in block) < 0.75 * 2.0**-126:
        return  # a rounded maximum of 0: implementation-defined (tested below)
    assert _run(profile, block, BF16) == block_oracle(profile, block, E2M1)


WIDE = [(p, f) for p in ("ocp", "torchao-floor", "torchao-ceil", "torchao-even",
                         "torchao-rceil", "microxcaling") for f in (E4M3FN, E5M2, E2M3, E3M2)]
WIDE += [(p, f) for p in ("triton-round-up", "triton-round-down") for f in (E4M3FN, E5M2)]


@pytest.mark.parametrize(("profile", "fmt"), WIDE, ids=[f"{p}-{f.name}" for p, f in WIDE])
@settings(max_examples=15, deadline=None)
@given(block=finite_blocks(F32))
def test_wide_elements_match_the_oracle(profile: str, fmt: Format, block: list[float]) -> None:
    assert _run(profile, block, F32, fmt) == block_oracle(profile, block, fmt)


@pytest.mark.parametrize("profile", ["torchao-floor", "torchao-even", "triton-round-up", "quark",
                                     "quark-triton"])
@settings(max_examples=40, deadline=None)
@given(block=finite_blocks(BF16))
def test_float32_arithmetic_profiles_give_bf16_and_f32_the_same_bytes(
    profile: str, block: list[float]
) -> None:
    assert _run(profile, block, BF16) == _run(profile, block, F32)


def test_compressed_tensors_bfloat16_scale_uses_bf16_bits() -> None:
    # bf16 amax 0x3FE0 = 1.75: + (1 << 5) carries into the exponent -> 2.0 -> byte 127 + 1 - 2
    block = [1.75] + [0.0] * 31
    assert _run("compressed-tensors", block, BF16)[0] == 0x7E
    assert _run("compressed-tensors", [1.7421875] + [0.0] * 31, BF16)[0] == 0x7D


# -- the log2 that microxcaling and torchao RCEIL inherit from torch -----------------------------


def test_float32_log2_near_powers_of_two_matches_torch() -> None:
    torch = requires("torch")
    k = np.arange(-126, 128)
    j = np.arange(-64, 65)
    with np.errstate(over="ignore"):
        v = (np.exp2(k)[:, None] * (1 + j[None, :] * 2.0**-24)).astype(np.float32).ravel()
    v = v[np.isfinite(v) & (v > 0)]
    theirs = torch.log2(torch.from_numpy(v)).numpy().astype(np.float64)
    ours = np.log2(v.astype(np.float64)).astype(np.float32).astype(np.float64)
    assert np.array_equal(np.floor(theirs), np.floor(ours))
    assert np.array_equal(np.ceil(theirs), np.ceil(ours))


def test_microxcaling_floor_uses_float32_log2() -> None:
    just_below = float(np.nextafter(np.float32(2.0**20), np.float32(0)))  # log2f rounds to 20
    assert _run("microxcaling", [just_below] + [0.0] * 31, F32)[0] == 127 + 20 - 2
    assert _run("ocp", [just_below] + [0.0] * 31, F32)[0] == 127 + 19 - 2


def test_microxcaling_half_up_float32_quirk() -> None:
    quirk = 0.25 * (1 - 2.0**-24)  # 0.5 - 2**-25 after scaling by 2: v + 0.5 rounds to 1.0
    scale, codes = _run("microxcaling", [4.0, quirk, -quirk] + [0.0] * 29, F32)
    assert (scale, codes[:3]) == (0x7F, [6, 1, 9])
    assert _run("ocp", [4.0, quirk] + [0.0] * 30, F32)[1][:2] == [6, 0]


# -- the classification: pinned and implementation-defined classes --------------------------------

NAN, INF = float("nan"), float("inf")


def _special(profile: str, values: list[float], dtype: np.dtype = F32) -> tuple[int, list[int]]:
    block = np.zeros(32)
    block[: len(values)] = values
    scale, codes = _run(profile, [float(v) for v in block], dtype)
    return scale, codes[: len(values)]


def test_ocp_nan_and_inf_blocks_are_nan_blocks() -> None:  # implementation-defined (our choice)
    for values in ([NAN, 1.0], [1.0, -INF], [INF, NAN, -2.0], [-NAN]):
        assert _special("ocp", values) == (0xFF, [0] * len(values))
    for elem in (E4M3FN, E5M2):
        codes, scales = quantize_mx(np.array([INF] + [1.0] * 31), elem)
        assert scales.tolist() == [0xFF] and not codes.any()


def test_ocp_zero_tiny_and_float64_overflow_blocks() -> None:  # implementation-defined
    assert _special("ocp", [0.0, -0.0, -(2.0**-149)]) == (0x00, [0, 8, 8])
    assert _special("ocp", [2.0**-127, -(2.0**-128)]) == (0x00, [2, 9])  # against 2^-127 itself
    codes, scales = quantize_mx(np.array([2.0**200, 2.0**130, -(2.0**126)] + [0.0] * 29))
    assert scales.tolist() == [0xFE] and unpack_fp4(codes)[:3].tolist() == [7, 7, 9]


def test_torchao_special_values() -> None:  # defined and pinned
    for mode in ("floor", "ceil", "even"):
        assert _special(f"torchao-{mode}", [NAN, -1.0, -NAN]) == (0xFF, [0x3, 0x8, 0xB])
        # an Inf in a NaN block: Inf / Inf is the x86 negative NaN (pinned)
        assert _special(f"torchao-{mode}", [NAN, INF]) == (0xFF, [0x3, 0xB])
        assert _special(f"torchao-{mode}", [-INF, 1.0]) == (0xFD, [0xF, 0x0])
    codes, scales = quantize_mx(np.array([NAN, -NAN] + [0.0] * 30, dtype=np.float32), E2M3,
                                profile="torchao-floor")
    assert scales.tolist() == [0xFF] and codes[:2].tolist() == [0x0C, 0x2C]
    codes, _ = quantize_mx(np.array([NAN] + [0.0] * 31, dtype=np.float32), E3M2,
                           profile="torchao-floor")
    assert codes[0] == 0x0E
    codes, _ = quantize_mx(np.array([NAN, -NAN] + [0.0] * 30, dtype=np.float32), E4M3FN,
                           profile="torchao-floor")
    assert codes[:2].tolist() == [0x7F, 0xFF]


def test_non_canonical_nan_payloads_are_treated_as_canonical() -> None:  # implementation-defined
    payload = np.array([0x7FC00001, 0x7F800001], dtype=np.uint32).view(np.float32)
    block = np.zeros(32, dtype=np.float32)
    block[:2] = payload
    codes, scales = quantize_mx(block, profile="torchao-floor")
    assert scales.tolist() == [0xFF] and unpack_fp4(codes)[:2].tolist() == [0x3, 0x3]


def test_triton_special_values() -> None:  # defined (torch reference) and pinned (x86 NaN sign)
    assert _special("triton-round-up", [NAN, -1.0, -NAN]) == (0x00, [0x7, 0x8, 0xF])
    assert _special("triton-round-down", [NAN, 1.0]) == (0xFF, [0x7, 0x0])
    assert _special("triton-round-up", [-INF, 2.0]) == (0xFF, [0xF, 0x0])
    assert _special("triton-round-down", [2.0**-125, 2.0**-127]) == (0x00, [0, 0])


def test_quark_special_values() -> None:  # defined and pinned
    assert _special("quark", [INF, -INF, 1.0]) == (0xFE, [0x6, 0xE, 0x0])
    scale, codes = _special("quark", [NAN, -1.0, -NAN, 0.0])
    assert (scale, codes) == (0x7F, [0x7, 0x7, 0xF, 0x7])  # x / NaN-scale: every element NaN
    assert _special("quark", [-0.0, -0.2, 4.0]) == (0x7F, [0, 0, 6])


def test_compressed_tensors_exponent_255_blocks_are_written_0x7f() -> None:  # pinned
    for dtype, nan_code in ((F32, 0x0), (BF16, 0x8)):
        assert _special("compressed-tensors", [NAN, -1.0, -NAN], dtype) == (0x7F, [nan_code, 0, nan_code])
        assert _special("compressed-tensors", [INF, 2.0], dtype) == (0x7F, [nan_code, 0])
        assert _special("compressed-tensors", [3.39e38, -1.0], dtype) == (0x7F, [0, 0])


def test_vllm_and_quark_triton_nan_blocks() -> None:  # implementation-defined / defined
    assert _special("vllm", [NAN, -1.0, -NAN], BF16) == (0xFE, [0x7, 0x8, 0xF])
    assert _special("quark-triton", [NAN, -1.0]) == (0xFF, [0x7, 0x7])


def test_microxcaling_nan_blocks_and_zero_signs() -> None:  # implementation-defined
    assert _special("microxcaling", [INF, 1.0]) == (0xFF, [0, 0])
    assert _special("microxcaling", [4.0, -0.0, -0.2]) == (0x7F, [6, 0, 8])


def test_quark_hip_qdq_classes() -> None:
    # defined: even rule on the bf16 max, RNE
    assert _special("quark-hip-qdq", [7.0, 2.5], BF16) == (0x80, [6, 2])
    # implementation-defined: a rounded max of 0 (INT_MIN - 2 in the source): byte 0x00
    assert _special("quark-hip-qdq", [0.0, -0.0], BF16) == (0x00, [0, 8])
    assert _special("quark-hip-qdq", [2.0**-128, -(2.0**-133)], BF16) == (0x00, [1, 8])
    tiny = np.full(32, 2.0**-16, dtype=np.float16)  # a float16 subnormal max rounds to 0
    codes, scales = quantize_mx(tiny, profile="quark-hip-qdq")
    assert scales.tolist() == [0x00] and unpack_fp4(codes)[0] == 7  # 2^-16 * 2^127 saturates
    # implementation-defined: NaN is skipped by __hmax; an infinite max gives 0xFE
    assert _special("quark-hip-qdq", [NAN, 1.0], BF16) == (0x7D, [0x7, 0x6])
    assert _special("quark-hip-qdq", [INF, 1.0], BF16) == (0xFE, [0x7, 0x0])
    big = np.zeros(32, dtype=np.float16)
    big[:3] = [60000.0, -1.0, np.inf]  # the max rounds to +Inf in float16: byte 0xFE and a
    codes, scales = quantize_mx(big, profile="quark-hip-qdq")  # float16 scale of +Inf
    assert scales.tolist() == [0xFE] and unpack_fp4(codes)[:3].tolist() == [0x0, 0x8, 0x7]


def test_every_class_is_documented() -> None:
    page = SPEC.read_text()
    for producer in PRODUCERS.values():
        assert producer.defined, producer.name
        section = page[page.index(f"### `{producer.name}` ({producer.kind})"):]
        for item in (*producer.defined, *producer.pinned, *producer.implementation_defined):
            assert item in section, (producer.name, item)
    for heading in ("**Defined**", "**Pinned**", "**Implementation-defined**"):
        assert page.count(heading) == len(PRODUCERS)


# -- blocks holding NaN and Inf (Hypothesis) ----------------------------------------------------

#: profile -> (scale byte of an E2M1 block holding NaN, of one holding ±Inf but no NaN)
SPECIAL_SCALE = {
    "ocp": (0xFF, 0xFF), "microxcaling": (0xFF, 0xFF),
    "torchao-floor": (0xFF, 0xFD), "torchao-ceil": (0xFF, 0xFD), "torchao-even": (0xFF, 0xFD),
    "torchao-rceil": (0xFF, 0xFE), "triton-round-up": (0x00, 0xFF),
    "triton-round-down": (0xFF, 0xFF), "quark": (0x7F, 0xFE), "quark-triton": (0xFF, 0xFE),
    "compressed-tensors": (0x7F, 0x7F), "vllm": (0xFE, 0xFE),
}


@st.composite
def special_blocks(draw: st.DrawFn) -> list[float]:
    block = draw(finite_blocks(BF16))
    for _ in range(draw(st.integers(1, 4))):
        block[draw(st.integers(0, 31))] = draw(st.sampled_from([NAN, -NAN, INF, -INF]))
    return block


@pytest.mark.parametrize("profile", sorted(SPECIAL_SCALE))
@settings(max_examples=40, deadline=None)
@given(block=special_blocks())
def test_blocks_with_nan_or_inf(profile: str, block: list[float]) -> None:
    dtype = F32 if F32 in PRODUCERS[profile].dtypes else BF16
    scale, codes = _run(profile, block, dtype)
    has_nan = any(math.isnan(v) for v in block)
    assert scale == SPECIAL_SCALE[profile][0 if has_nan else 1]
    if profile in ("ocp", "microxcaling"):
        assert codes == [0] * 32
    finite = [c for v, c in zip(block, codes, strict=True) if math.isfinite(v)]
    if (scale == 0xFF and profile in ("torchao-floor", "torchao-ceil", "torchao-even")) or (
        scale in (0xFF, 0x00) and profile.startswith("triton")
    ):
        assert all(c & 7 == 0 for c in finite)  # divided by +Inf (torchao), times 0 (triton)
    if profile == "torchao-rceil" and has_nan:
        assert all(c & 7 == 3 for c in codes)  # times the NaN descale: every element NaN


@pytest.mark.parametrize("profile", sorted(PRODUCERS))
@settings(max_examples=15, deadline=None)
@given(blocks=st.lists(st.one_of(special_blocks(), finite_blocks(BF16)), min_size=2, max_size=5))
def test_blocks_are_quantized_independently(profile: str, blocks: list[list[float]]) -> None:
    dtype = F32 if F32 in PRODUCERS[profile].dtypes else BF16
    x = np.array(blocks).astype(np.float32).astype(dtype)
    together = quantize_mx(x.reshape(1, -1), profile=profile)
    for i, block in enumerate(blocks):
        scale, codes = _run(profile, block, dtype)
        assert int(together.scales[0, i]) == scale
        assert unpack_fp4(together.codes)[0, 32 * i: 32 * (i + 1)].tolist() == codes


def _fp16_to_fp4_simulate(val: int, mbits: int, bias: int) -> int:
    """Quark csrc/mxfp4/fake_kernels.cuh ``fp16_to_fp4_simulate`` (L26-L147), line by line, on
    the 16 bits of an fp16 (mbits 10, bias 15) or bf16 (mbits 7, bias 127) value."""
    ebits = 15 - mbits
    exp = (val >> mbits) & ((1 << ebits) - 1)
    sign = (val >> 15) & 1
    mantissa_last = (val >> (mbits - 1)) & 1
    new_exp = exp - bias + 1
    exp_shift = (new_exp <= 0) * (1 - new_exp)
    tail_bits = min(16, mbits - 1 + exp_shift)
    mantissa_plus_one = val & ((1 << (mbits + 1)) - 1)
    half = 1 << (tail_bits - 1)
    tail = mantissa_plus_one & ((1 << tail_bits) - 1)
    close, away, tie = tail < half, tail > half, tail == half
    mantissa_close = (new_exp > 0) * mantissa_last
    mantissa_away = int(new_exp > 0 and mantissa_last == 0)
    exp_away = exp + int(new_exp <= 0 or mantissa_last == 1)
    tie_to_zero, top = bias - 2, bias + 2
    exp_tie = (exp > tie_to_zero) * (exp + (mantissa_last == 1))
    new_exp = away * exp_away + close * exp + tie * exp_tie
    new_mantissa = away * mantissa_away + close * mantissa_close
    new_mantissa += (new_exp > top) * (new_mantissa == 0)
    new_exp = (new_exp >= tie_to_zero) * max(tie_to_zero, min(new_exp, top))
    return (sign << 15) + (new_exp << mbits) + (new_mantissa << (mbits - 1))


@pytest.mark.parametrize(("dtype", "mbits", "bias"), [(np.dtype(np.float16), 10, 15),
                                                      (BF16, 7, 127)])
def test_quark_hip_element_rounding_is_round_to_nearest_even(
    dtype: np.dtype, mbits: int, bias: int
) -> None:
    """The source's fp4 simulation equals the codec's RNE, saturating, for every finite 16-bit
    value (the basis of the quark-hip-qdq profile; the kernel itself was not executed)."""
    patterns = np.arange(1 << 16, dtype=np.uint16)
    with np.errstate(invalid="ignore"):  # signalling NaN patterns
        values = patterns.view(dtype).astype(np.float64)
    keep = ~np.isnan(values)
    kernel = np.array([_fp16_to_fp4_simulate(int(b), mbits, bias) for b in patterns[keep]],
                      dtype=np.uint16).view(dtype).astype(np.float64)
    ours = E2M1.decode(E2M1.encode(values[keep]), np.float64)
    assert np.array_equal(np.signbit(kernel), np.signbit(ours))
    assert np.array_equal(kernel, ours)
