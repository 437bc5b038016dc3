"""quantize_nvfp4 / dequantize_nvfp4 against an exact oracle written here with Fractions.

The oracle restates each producer's formula (mxformats/schemes/nvfp4.py's module docstring,
measured against the real producers in tests/interop/test_nvfp4_interop.py) with one exact rounding per
torch operation: to float32 or to the input's type with subnormals, E4M3 and E2M1 through
tests/oracle.py (formats typed by hand). Exhaustive over every positive bfloat16 block maximum
(the E4M3 scale) and every bfloat16 element of a block (the E2M1 code); Hypothesis over
tensors of boundary blocks (zeros, ties, subnormal scales, huge and tiny values).
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import oracle_decode, oracle_encode, round_nearest_even

from mxformats import E2M1, NVFP4Array, dequantize_nvfp4, quantize_nvfp4
from mxformats.schemes.nvfp4 import CONSUMERS, PRODUCERS
from mxformats.testing.cases import blocks_strategy

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
#: (significand bits, smallest normal exponent, largest exponent) of each input type.
IEEE = {"float32": (24, -126, 127), "bfloat16": (8, -126, 127), "float16": (11, -14, 15)}
PROFILES = sorted(PRODUCERS)
VECTORS = Path(__file__).resolve().parents[1] / "spec" / "vectors" / "nvfp4"
#: Every NaN the decoder returns: the canonical quiet NaN, sign clear (x86 would give 0 × Inf
#: the negative default NaN 0xFFC00000; spec/nvfp4.md, "Consumers").
CANONICAL_NAN = np.uint32(0x7FC00000).view(np.float32)


def round_ieee(value: Fraction, dtype: str) -> Fraction:
    """``value`` rounded to nearest-even in ``dtype`` with subnormals (no overflow: the tests
    stay in range)."""
    bits, emin, _ = IEEE[dtype]
    return round_nearest_even(value, bits, emin)


def e4m3(value: Fraction) -> tuple[int, Fraction]:
    code = oracle_encode("e4m3fn", float(value), "nearest-even", "saturate")
    assert isinstance(code, int)
    decoded = oracle_decode("e4m3fn", code)
    return code, decoded if isinstance(decoded, Fraction) else Fraction(0)


def overflows(value: Fraction, dtype: str) -> bool:
    """``value`` rounds to ±Inf in ``dtype``: at or past the midpoint above the maximum."""
    bits, _, emax = IEEE[dtype]
    return abs(value) >= (2 - Fraction(1, 2**bits)) * Fraction(2) ** emax


def e2m1(q: Fraction | None, negative: bool = False) -> int:
    """E2M1 code of a float32 quotient; None stands for x / 0 (±Inf, or NaN for 0 / 0: code 7,
    the sign bit iff ``negative``)."""
    if q is None:
        return 7 | (8 if negative else 0)
    code = oracle_encode("e2m1", float(abs(q)), "nearest-even", "saturate")
    assert isinstance(code, int)
    return code | (8 if q < 0 else 0)


def oracle_global(profile: str, amax: Fraction, dtype: str) -> Fraction:
    """The stored global scale (ModelOpt: amax > 0)."""
    if profile == "modelopt":
        return round_ieee(amax / 2688, "float32")
    tiny = Fraction(2) ** IEEE[dtype][1]  # generate_gparam clamps amax to finfo.tiny
    reciprocal = round_ieee(1 / max(amax, tiny), dtype)  # 2688 / t = t.reciprocal() * 2688
    product = reciprocal * 2688
    return Fraction(1) if overflows(product, dtype) else round_ieee(product, dtype)


def oracle_block(profile: str, block: list[Fraction], g: Fraction, dtype: str
                 ) -> tuple[int, list[int]]:
    """(scale byte, codes) of one block of exact input values under stored global ``g``."""
    b = max(abs(v) for v in block)
    if profile == "modelopt":
        s = round_ieee(b / round_ieee(6 * g, "float32"), "float32")
        s = min(max(s if s != 0 else Fraction(1), Fraction(1, 512)), Fraction(448))
        byte, scale = e4m3(s)
        divisor = round_ieee(scale * g, "float32")
    else:
        s = min(round_ieee(round_ieee(b / 6, dtype) * g, "float32"), Fraction(448))
        byte, scale = e4m3(s)
        if scale == 0:
            byte, scale = 0x20, Fraction(1, 8)
        divisor = round_ieee(scale / g, "float32")
    if divisor == 0:
        return byte, [e2m1(None, v < 0) for v in block]
    return byte, [e2m1(round_ieee(v / divisor, "float32")) for v in block]


def _fractions(x: np.ndarray) -> list[Fraction]:
    return [Fraction(float(v)) for v in x.astype(np.float64).reshape(-1)]


def _check_against_oracle(x: np.ndarray, profile: str, global_amax: float | None = None) -> None:
    dtype = x.dtype.name
    result = quantize_nvfp4(x, profile=profile, global_amax=global_amax)
    values = _fractions(x)
    amax = Fraction(global_amax) if global_amax is not None else max(abs(v) for v in values)
    g = oracle_global(profile, amax, dtype)
    assert Fraction(float(result.global_scale.reshape(()))) == g
    blocks = [values[i:i + 16] for i in range(0, len(values), 16)]
    expected = [oracle_block(profile, block, g, dtype) for block in blocks]
    assert result.scales.reshape(-1).tolist() == [byte for byte, _ in expected]
    assert result.codes.reshape(-1).tolist() == [c for _, codes in expected for c in codes]


def _all_positive_bf16() -> np.ndarray:
    bits = np.arange(0x0001, 0x7F80, dtype=np.uint16)
    return bits.view(BF16)


# -- exhaustive -------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("global_amax", [0.01226806640625, 2.0**-60])
def test_block_scale_of_every_bfloat16_block_maximum(profile: str, global_amax: float) -> None:
    """Every positive bfloat16 value as a block's maximum (the rest of the block zero) under a
    fixed global amax: subnormal, clamped (above the global amax) and underflowing scales."""
    b = _all_positive_bf16()
    x = np.zeros((b.size, 16), dtype=BF16)
    x[:, 0] = b
    result = quantize_nvfp4(x, profile=profile, global_amax=global_amax)
    g = oracle_global(profile, Fraction(global_amax), "bfloat16")
    for i, value in enumerate(_fractions(b)):
        byte, codes = oracle_block(profile, [value], g, "bfloat16")  # the zeros: code 0
        assert (int(result.scales[i, 0]), int(result.codes[i, 0])) == (byte, codes[0]), (
            hex(int(b[i:i + 1].view(np.uint16)[0])))


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("block_amax", [1.0, 3.0517578125e-05, 0.5625])
def test_element_code_of_every_bfloat16_in_a_block(profile: str, block_amax: float) -> None:
    """Every bfloat16 value of magnitude <= the block maximum (and its negation), each in a block
    led by that maximum: every E2M1 tie, the rounding to zero and its sign."""
    positive = _all_positive_bf16()
    elements = positive[positive.astype(np.float64) <= block_amax]
    elements = np.concatenate([elements, -elements, np.array([0.0, -0.0], dtype=BF16)])
    pad = -elements.size % 15
    elements = np.concatenate([elements, np.zeros(pad, dtype=BF16)]).reshape(-1, 15)
    x = np.concatenate([np.full((len(elements), 1), block_amax, dtype=BF16), elements], axis=1)
    result = quantize_nvfp4(x, profile=profile)
    g = oracle_global(profile, Fraction(block_amax), "bfloat16")
    byte, _ = oracle_block(profile, [Fraction(block_amax)], g, "bfloat16")
    assert np.all(result.scales == byte)
    expected = [oracle_block(profile, row, g, "bfloat16")[1] for row in
                (_fractions(r) for r in x)]
    assert result.codes.tolist() == expected


# -- Hypothesis -------------------------------------------------------------------------------


def _finite_tensor(dtype: str) -> st.SearchStrategy[np.ndarray]:
    block = blocks_strategy(E2M1, block_size=16, dtype=dtype)
    tensor = st.lists(block, min_size=1, max_size=4).map(lambda bs: np.stack(bs).reshape(2, -1)
                                                        if len(bs) % 2 == 0 else np.stack(bs))
    return tensor.map(lambda x: np.where(np.isfinite(x.astype(np.float32)), x,
                                         np.zeros_like(x)))


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float16"])
@pytest.mark.parametrize("profile", PROFILES)
def test_boundary_tensors_against_the_oracle(profile: str, dtype: str) -> None:
    @settings(max_examples=150, deadline=None, derandomize=True)
    @given(_finite_tensor(dtype))
    def check(x: np.ndarray) -> None:
        amax = max(abs(v) for v in _fractions(x))
        if profile == "modelopt" and oracle_global(profile, amax, dtype) == 0:
            return  # weight_scale_2 0: the all-zero test below and tests/interop/test_nvfp4_interop.py
        _check_against_oracle(x, profile)

    check()


# -- special cases ----------------------------------------------------------------------------


def test_all_zero_tensor_as_each_producer_writes_it() -> None:
    x = np.zeros((2, 32), dtype=BF16)
    modelopt = quantize_nvfp4(x, profile="modelopt")
    assert modelopt.global_scale.tobytes() == np.float32(0).tobytes()
    assert np.all(modelopt.scales == 0xFF) and np.all(modelopt.codes == 7)
    assert np.all(np.isnan(dequantize_nvfp4(modelopt)))
    ct = quantize_nvfp4(x, profile="compressed-tensors")
    assert ct.global_scale.tolist() == [1.0]
    assert np.all(ct.scales == 0x20) and np.all(ct.codes == 0)
    assert dequantize_nvfp4(ct).tobytes() == np.zeros((2, 32), np.float32).tobytes()


@pytest.mark.parametrize("profile", PROFILES)
def test_zero_block_and_negative_zero(profile: str) -> None:
    """A zero block beside a non-zero one: scale 1.0 (0x38, ModelOpt) or 0.125 (0x20,
    compressed-tensors), codes 0 for +0 and -0; a negative value rounding to 0 is code 8."""
    x = np.zeros((1, 32), dtype=BF16)
    x[0, 16:18] = [6.0, -0.0625]
    x[0, 1] = -0.0
    result = quantize_nvfp4(x, profile=profile)
    assert int(result.scales[0, 0]) == {"modelopt": 0x38, "compressed-tensors": 0x20}[profile]
    assert result.codes[0, :16].tolist() == [0] * 16
    assert result.codes[0, 16:18].tolist() == [7, 8]


@pytest.mark.parametrize("profile", PROFILES)
def test_tiny_block(profile: str) -> None:
    """A block 2**-20 below the tensor's maximum: ModelOpt clamps its scale to 2**-9 (0x01),
    compressed-tensors' underflows to 0 and becomes 0.125 (0x20)."""
    x = np.zeros((1, 32), dtype=BF16)
    x[0, 0], x[0, 16] = 1.0, 2.0**-20
    assert int(quantize_nvfp4(x, profile=profile).scales[0, 1]) == {
        "modelopt": 0x01, "compressed-tensors": 0x20}[profile]
    _check_against_oracle(x, profile)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("special", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_are_refused(profile: str, special: float) -> None:
    x = np.ones(16, dtype=np.float32)
    x[3] = special
    with pytest.raises(ValueError, match="NaN or ±Inf"):
        quantize_nvfp4(x, profile=profile)


@pytest.mark.parametrize("length", [0, 8, 24, 33])
def test_length_not_a_multiple_of_16_is_refused(length: int) -> None:
    with pytest.raises(ValueError, match="multiple of 16"):
        quantize_nvfp4(np.ones((2, length), dtype=np.float32))


def test_16_and_32_are_accepted_and_float64_refused() -> None:
    for length in (16, 32):
        assert quantize_nvfp4(np.ones((2, length), dtype=np.float32)).scales.shape == (
            2, length // 16)
    with pytest.raises(ValueError, match="float64"):
        quantize_nvfp4(np.ones(16))
    with pytest.raises(ValueError, match="unknown nvfp4 producer"):
        quantize_nvfp4(np.ones(16, np.float32), profile="nvidia")


@pytest.mark.parametrize("profile", PROFILES)
def test_axis_is_the_block_axis(profile: str) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 3)).astype(np.float32)
    along0 = quantize_nvfp4(x, axis=0, profile=profile)
    last = quantize_nvfp4(np.ascontiguousarray(x.T), profile=profile)
    assert along0.codes.T.tobytes() == last.codes.tobytes()
    assert along0.scales.T.tobytes() == last.scales.tobytes()
    assert along0.packed().shape == (16, 3)


@pytest.mark.parametrize("axis", [-3, 2])
def test_axis_out_of_range_is_refused_both_ways(axis: int) -> None:
    # -2 and 1 are the edges of a 2-d array's axes; one step beyond either side is refused.
    x = np.ones((16, 16), dtype=np.float32)
    for inside in (-2, 1):
        assert quantize_nvfp4(x, axis=inside).codes.shape == (16, 16)
    with pytest.raises(ValueError, match=f"axis {axis} is out of range for a 2-d array"):
        quantize_nvfp4(x, axis=axis)
    codes, scales = np.zeros((16, 16), np.uint8), np.zeros((16, 1), np.uint8)
    with pytest.raises(ValueError, match=f"axis {axis} is out of range for a 2-d array"):
        dequantize_nvfp4(codes, scales, np.float32(1.0), axis=axis, profile="vllm-modelopt")


def test_global_amax_is_shared_and_recorded() -> None:
    x = np.full((1, 16), 0.5, dtype=BF16)
    modelopt = quantize_nvfp4(x, profile="modelopt", global_amax=2.0)
    assert modelopt.global_scale.tobytes() == np.float32(np.float32(2.0) / 2688).tobytes()
    _check_against_oracle(x, "modelopt", 2.0)
    _check_against_oracle(x, "compressed-tensors", 2.0)
    with pytest.raises(ValueError, match="global_amax"):
        quantize_nvfp4(x, global_amax=-1.0)


# -- consumers --------------------------------------------------------------------------------


def _float32(value: Fraction) -> float:
    """One rounding to float32, overflowing to ±Inf."""
    if overflows(value, "float32"):
        return float("inf") if value > 0 else float("-inf")
    return float(round_ieee(value, "float32"))


def _oracle_dequantize(consumer: str, code: int, byte: int, g: float) -> float:
    element = Fraction(float(E2M1.values[code]))  # the E2M1 table is checked in test_formats
    decoded = oracle_decode("e4m3fn", byte)
    assert isinstance(decoded, Fraction)
    op = CONSUMERS[consumer].global_op
    if op == "multiply":
        return _float32(element * decoded * Fraction(g))
    if op == "reciprocal":
        return _float32(element * decoded * round_ieee(1 / Fraction(g), "float32"))
    factor = _float32(decoded / Fraction(g))
    if math.isinf(factor):  # 0 × Inf is NaN
        return float(element) * factor
    return _float32(element * Fraction(factor))


@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
@pytest.mark.parametrize("g", [3.0517578125e-05, 1.0, 37.5, 5.877471754111438e-39])
def test_every_code_and_scale_byte_decodes_as_the_consumer(consumer: str, g: float) -> None:
    codes = np.tile(np.arange(16, dtype=np.uint8), 127)
    finite_bytes = np.repeat(np.arange(0x7F, dtype=np.uint8), 16)  # 0x7F: NaN, not written
    got = dequantize_nvfp4(codes.reshape(1, -1), finite_bytes.reshape(1, -1)[:, ::16],
                           np.float32(g), profile=consumer)
    for i, (c, byte) in enumerate(zip(codes.tolist(), finite_bytes.tolist(), strict=True)):
        value = _oracle_dequantize(consumer, c, byte, g)
        want = (CANONICAL_NAN if math.isnan(value)
                else np.float32(math.copysign(value, 1 - (c & 8))))
        assert got[0, i].tobytes() == want.tobytes(), (c, byte)


def test_dequantize_reads_packed_codes_and_refuses_the_other_global_form() -> None:
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((4, 32)) * 0.02).astype(BF16)
    result = quantize_nvfp4(x, profile="compressed-tensors")
    from_packed = dequantize_nvfp4(result.packed(), result.scales, result.global_scale,
                                   packed=True, profile="vllm-compressed-tensors")
    assert from_packed.tobytes() == dequantize_nvfp4(result).tobytes()
    with pytest.raises(ValueError, match="global form"):
        dequantize_nvfp4(result, profile="vllm-modelopt")
    bf16 = dequantize_nvfp4(result, dtype=BF16)
    assert bf16.tobytes() == dequantize_nvfp4(result).astype(BF16).tobytes()
    assert isinstance(result, NVFP4Array) and len(list(result)) == 3


# -- the spec's vectors -----------------------------------------------------------------------


def _vector_input(case: dict) -> np.ndarray:
    values = np.array([float.fromhex(v) for v in case["input"]], dtype=np.float64)
    return values.astype(np.dtype(case["dtype"])).reshape(case["shape"])


@pytest.mark.parametrize("profile", PROFILES)
def test_quantize_vectors_are_the_oracle(profile: str) -> None:
    """Every quantize vector of spec/vectors/nvfp4/<profile>.json, recomputed by the oracle
    (not by the code that wrote it); the all-zero ModelOpt tensor by its stated rule."""
    data = json.loads((VECTORS / f"{profile}.json").read_text(encoding="utf-8"))
    assert data["profile"] == profile and data["cases"]
    for case in data["cases"]:
        x = _vector_input(case)
        values = _fractions(x)
        amax = (Fraction(float.fromhex(case["global_amax"])) if case["global_amax"]
                else max(abs(v) for v in values))
        packed = [int(b, 16) for b in case["packed"]]
        codes = [c for b in packed for c in (b & 0xF, b >> 4)]
        scales = [int(b, 16) for b in case["scales"]]
        if profile == "modelopt" and amax == 0:
            assert (codes, set(scales), case["global_scale"]) == (
                [7] * len(values), {0xFF}, "0x0.0p+0"), case["vector"]
            continue
        g = oracle_global(profile, amax, x.dtype.name)
        assert Fraction(float.fromhex(case["global_scale"])) == g, case["vector"]
        blocks = [oracle_block(profile, values[i:i + 16], g, x.dtype.name)
                  for i in range(0, len(values), 16)]
        assert scales == [byte for byte, _ in blocks], case["vector"]
        assert codes == [c for _, block in blocks for c in block], case["vector"]


@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
def test_dequantize_vectors_are_the_oracle(consumer: str) -> None:
    data = json.loads((VECTORS / f"{consumer}.json").read_text(encoding="utf-8"))
    assert data["profile"] == consumer and data["cases"]
    for case in data["cases"]:
        g = float.fromhex(case["global_scale"])
        codes = [c for b in case["packed"] for c in (int(b, 16) & 0xF, int(b, 16) >> 4)]
        scales = [int(b, 16) for b in case["scales"]]
        for i, (code, text) in enumerate(zip(codes, case["expected"], strict=True)):
            byte = scales[i // 16]
            if byte == 0xFF or g == 0:  # ModelOpt's all-zero tensor: NaN scales
                assert math.isnan(float.fromhex(text)), case["vector"]
                continue
            value = _oracle_dequantize(consumer, code, byte, g)
            assert float.fromhex(text) == math.copysign(value, 1 - (code & 8)), case["vector"]


@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
@pytest.mark.parametrize("global_bits", [0xFFC00000, 0x7FC00001, 0x7F800000, 0x00000000])
def test_dequantize_nan_is_canonical_at_every_position(consumer: str, dtype: str,
                                                       global_bits: int) -> None:
    """A NaN block scale (0xFF, 0x7F) meeting a NaN global scale of either sign and payload,
    and ``Inf · 0`` (+Inf global, or 0: the divide consumer's ``s / 0``), at every offset
    0..70 of a five-block row (the last one in numpy's vector loop or its scalar tail): every
    NaN output is the canonical quiet NaN of the dtype, sign clear, whatever its position."""
    out = np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    uint = np.dtype(f"u{out.itemsize}")
    canonical = {2: 0x7FC0 if dtype == "bfloat16" else 0x7E00, 4: 0x7FC00000,
                 8: 0x7FF8000000000000}[out.itemsize]
    stored = np.array([global_bits], np.uint32).view(np.float32)
    for offset in range(71):
        codes = np.full((1, 80), 2, np.uint8)  # 1.0
        codes[0, offset] = 0  # +0: Inf · 0
        scales = np.full((1, 5), 0x38, np.uint8)  # 1.0
        scales[0, offset // 16] = 0xFF if offset % 2 else 0x7F
        got = dequantize_nvfp4(codes, scales, stored, profile=consumer, dtype=out)
        bits = got.view(uint)[np.isnan(got.astype(np.float64))]
        assert bits.size, f"offset {offset}: no NaN output"
        assert set(bits.tolist()) == {canonical}, \
            f"offset {offset}: NaN bits {sorted(hex(b) for b in set(bits.tolist()))}"
