"""FP8 block scaling (mxformats.schemes.fp8_block) against an independent oracle.

The oracle here is written from the producers' formulas with exact rationals
(``fractions.Fraction``): every float32/bfloat16 rounding the producer performs is an explicit
round-to-nearest-even of an exact value, and E4M3 codes are looked up in ml_dtypes' own code
table. Nothing of mxformats' codec is used by the oracle.

- Exhaustive: every bfloat16 input through each profile's element rounding, for fixed tile
  maxima (ordinary, non-power-of-two, below DeepGEMM's 1e-4 floor); every E4M3FN and E4M3FNUZ
  code through the consumer, for float32, bfloat16 and power-of-two scales.
- Hypothesis: finite ragged matrices in ragged tiles (ties, huge, tiny, zeros), every profile.
- Special tiles (zero, -0, tiny, NaN, ±Inf) asserted byte by byte for every profile.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from fractions import Fraction
from functools import cache
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from oracle import round_nearest_even

from mxformats import FP8BlockArray, dequantize_fp8_block, quantize_fp8_block
from mxformats.schemes.fp8_block import PRODUCERS, ceil_to_ue8m0

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
Q = Fraction
FN_PROFILES = ("deepseek", "deepgemm", "ue8m0", "compressed-tensors")


# -- the oracle ---------------------------------------------------------------------------------


def f32(q: Fraction) -> Fraction:
    return round_nearest_even(q, 24, -126)


def bf16(q: Fraction) -> Fraction:
    return round_nearest_even(q, 8, -126)


@cache
def e4m3_codes(fnuz: bool = False) -> dict[Fraction, int]:
    """Non-negative E4M3 value -> code, from ml_dtypes' own decoding of every byte."""
    dtype = ml_dtypes.float8_e4m3fnuz if fnuz else ml_dtypes.float8_e4m3fn
    values = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float64)
    return {Q(float(v)): c for c, v in enumerate(values) if np.isfinite(v) and c < 0x80}


def e4m3fn_code(v: Fraction, negative: bool) -> int:
    """E4M3FN code of ``v``: nearest-even on 4 significant bits, emin -6, saturating at 448;
    the sign bit from ``negative`` (a zero keeps its sign)."""
    magnitude = min(round_nearest_even(abs(v), 4, -6), Q(448))
    return e4m3_codes()[magnitude] | (0x80 if negative else 0)


def oracle_scale(profile: str, amax: Fraction) -> Fraction:
    """The stored scale of a finite tile with maximum ``amax`` (before any FNUZ doubling)."""
    if profile == "compressed-tensors":
        scale = bf16(amax / 448)
        return scale if scale else Q(1, 128)  # torch.finfo(bfloat16).eps
    scale = f32(max(amax, f32(Q(1, 10_000))) / 448)
    if profile == "ue8m0":
        power = Q(2) ** -126
        while power < scale:
            power *= 2
        return power
    return scale


@cache
def oracle_element(profile: str, amax: Fraction) -> Callable[[float], int]:
    """The code of an element of a finite tile with maximum ``amax``, as a function."""
    scale = oracle_scale(profile, amax)
    if profile == "compressed-tensors":

        def divided(x: float) -> int:
            quotient = bf16(Q(x) / scale)
            return e4m3fn_code(max(min(quotient, Q(448)), Q(-448)), bool(np.signbit(x)))

        return divided
    if profile == "deepseek":
        floored = max(amax, f32(Q(1, 10_000)))
        multiplier = f32(f32(1 / floored) * 448)  # torch: 448.0 / t is t.reciprocal() * 448
    else:
        multiplier = f32(1 / scale)

    def multiplied(x: float) -> int:
        return e4m3fn_code(f32(Q(x) * multiplier), bool(np.signbit(x)))

    return multiplied


def oracle_quantize(profile: str, x: np.ndarray, block: tuple[int, int]) -> tuple[list, list]:
    """Codes and scales of a finite matrix, tile by tile, with the oracle."""
    bm, bn = block
    rows, cols = -(-x.shape[0] // bm), -(-x.shape[1] // bn)
    codes = [[0] * x.shape[1] for _ in range(x.shape[0])]
    scales = [[Q(0)] * cols for _ in range(rows)]
    for r in range(rows):
        for c in range(cols):
            tile = x[r * bm:(r + 1) * bm, c * bn:(c + 1) * bn]
            amax = max(abs(Q(float(v))) for v in tile.flat)
            scales[r][c] = oracle_scale(profile, amax)
            for (i, j), v in np.ndenumerate(tile):
                codes[r * bm + i][c * bn + j] = oracle_element(profile, amax)(float(v))
    return codes, scales


def every_bf16(limit: float) -> np.ndarray:
    """Every finite bfloat16 value of magnitude at most ``limit``, both signs."""
    values = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(BF16)
    with np.errstate(invalid="ignore"):  # signalling NaN patterns
        wide = values.astype(np.float64)
    return values[np.isfinite(wide) & (np.abs(wide) <= limit)]


# -- exhaustive: every bfloat16 input, fixed tile maxima ---------------------------------------

#: Tile maxima: a non-power-of-two (1/3 is inexact), one below the
#: 1e-4 floor of the DeepGEMM profiles, and one whose bfloat16 scale is subnormal.
ANCHORS = (3.0, 2.0**-15 * 1.5, 2.0**-130)


@pytest.mark.parametrize("anchor", ANCHORS)
@pytest.mark.parametrize("profile", FN_PROFILES)
def test_every_bf16_input_for_a_fixed_tile_maximum(profile: str, anchor: float) -> None:
    x = every_bf16(anchor)
    tiles = np.stack([np.full(x.shape, anchor, dtype=BF16), x], axis=1)  # each row one tile
    codes, scales = quantize_fp8_block(tiles, block=(1, 2), profile=profile)
    amax = Q(anchor)
    expected_scale = oracle_scale(profile, amax)
    assert {Q(float(s)) for s in scales.astype(np.float64).flat} == {expected_scale}
    # The oracle per magnitude (the sign only sets the sign bit).
    element = oracle_element(profile, amax)
    magnitude_code = {float(v): element(float(v)) for v in np.unique(np.abs(x.astype(float)))}
    sign = np.signbit(x.astype(np.float64))
    expected = np.array([magnitude_code[abs(float(v))] for v in x.astype(np.float64)])
    expected = expected | np.where(sign, 0x80, 0)
    mismatch = np.flatnonzero(codes[:, 1] != expected)
    assert mismatch.size == 0, [(float(x[i]), hex(codes[i, 1]), hex(expected[i]))
                                for i in mismatch[:5]]


# -- exhaustive: every code through the consumer ------------------------------------------------


def _consumer_oracle(code_values: np.ndarray, scale: float, dtype: np.dtype) -> list[Fraction]:
    """vLLM ``scaled_dequantize``: float32(code) * float32(scale) rounded to float32, then
    to ``dtype`` (a second rounding for bfloat16)."""
    out = []
    for v in code_values:
        product = f32(Q(float(v)) * Q(scale))
        out.append(bf16(product) if dtype == BF16 else product)
    return out


@pytest.mark.parametrize("profile", ["deepseek", "compressed-tensors", "ue8m0", "deepseek-fnuz"])
@pytest.mark.parametrize("dtype", [F32, BF16], ids=["float32", "bfloat16"])
def test_every_code_dequantizes_as_vllm(profile: str, dtype: np.dtype) -> None:
    fnuz = PRODUCERS[profile].fnuz
    fp8 = ml_dtypes.float8_e4m3fnuz if fnuz else ml_dtypes.float8_e4m3fn
    scale_dtype = BF16 if profile == "compressed-tensors" else F32
    scales = np.array([[1.0, 0.000123456789, 2.0**-20, 3.0e30, 0.0, 2.0**-130]])
    if profile == "ue8m0":
        scales = ceil_to_ue8m0(scales.astype(F32)).astype(np.float64)
    scales = scales.astype(scale_dtype)
    codes = np.tile(np.arange(256, dtype=np.uint8)[:, None], (1, scales.shape[1]))
    out = dequantize_fp8_block(codes, scales, block=(256, 1), profile=profile, dtype=dtype)
    assert out.dtype == dtype
    code_values = np.arange(256, dtype=np.uint8).view(fp8).astype(np.float64)
    nan_codes = np.isnan(code_values)
    for col, scale in enumerate(scales.astype(np.float64)[0]):
        got = out[:, col].astype(np.float64)
        assert np.array_equal(np.isnan(got), nan_codes)
        expected = _consumer_oracle(code_values[~nan_codes], float(scale), dtype)
        assert [Q(float(g)) for g in got[~nan_codes]] == expected, (profile, scale)
        assert np.array_equal(np.signbit(got[~nan_codes]), np.signbit(code_values[~nan_codes]))


def test_dequantize_uses_the_tile_of_each_element() -> None:
    """Partial edge tiles: element (i, j) takes scales[i // bm, j // bn]."""
    codes = np.full((5, 7), 0x38, dtype=np.uint8)  # 1.0
    scales = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    out = dequantize_fp8_block(codes, scales, block=(4, 3))
    rows, cols = np.indices(codes.shape)
    assert np.array_equal(out, scales[rows // 4, cols // 3])


# -- Hypothesis: ragged matrices in ragged tiles ------------------------------------------------

_FINITE_BF16 = st.one_of(
    st.floats(-(2.0**127), 2.0**127, width=32),
    st.floats(-(2.0**-10), 2.0**-10, width=32),
    st.sampled_from([0.0, -0.0, 448.0, 464.0, 2.0**-9, -(2.0**-10), 1e-40, 2.0**-133]),
)


@st.composite
def ragged(draw: st.DrawFn) -> tuple[np.ndarray, tuple[int, int]]:
    shape = (draw(st.integers(1, 9)), draw(st.integers(1, 11)))
    block = (draw(st.integers(1, 4)), draw(st.integers(1, 5)))
    values = draw(hnp.arrays(np.float64, shape, elements=_FINITE_BF16))
    tie_scale = draw(st.sampled_from([None, 2.0**-3, 2.0**20]))
    x = values.astype(BF16)
    if tie_scale is not None:  # amax 448 · 2^k and elements on E4M3 midpoints: exact ties
        mids = [2.0**-10 * (2 * k + 1) for k in range(4)] + [0.5625, 3.25, 13.0, 416.0, 448.0]
        picks = draw(hnp.arrays(np.int64, shape, elements=st.integers(0, len(mids) - 1)))
        x = (np.array(mids)[picks] * tie_scale).astype(BF16)
    return x, block


@settings(max_examples=60, deadline=None, derandomize=True)
@given(case=ragged(), profile=st.sampled_from(FN_PROFILES))
def test_ragged_tiles_match_the_oracle(case: tuple[np.ndarray, tuple[int, int]],
                                       profile: str) -> None:
    x, block = case
    codes, scales = quantize_fp8_block(x, block=block, profile=profile)
    expected_codes, expected_scales = oracle_quantize(profile, x, block)
    assert codes.tolist() == expected_codes
    assert [[Q(float(s)) for s in row] for row in scales.astype(np.float64)] == expected_scales


# -- special tiles, byte by byte -----------------------------------------------------------------

NAN32, INF32 = np.float32(np.nan), np.float32(np.inf)


def _one_tile(values: list[float], profile: str) -> FP8BlockArray:
    return quantize_fp8_block(np.array([values], dtype=BF16), block=(1, 4), profile=profile)


def _scale_bits(blocks: FP8BlockArray) -> int:
    s = blocks.scales.reshape(-1)[0]
    return int(np.asarray(s).view(np.uint16 if s.dtype == BF16 else np.uint32))


# profile -> (zero-tile scale bits, NaN-tile scale bits, Inf-tile scale bits)
SPECIAL_SCALES = {
    "deepseek": (0x346FACAD, 0x7FC00000, 0x7F800000),  # float32(1e-4)/448 = 2.2321e-07
    "deepgemm": (0x346FACAD, 0x7FC00000, 0x7F800000),
    "ue8m0": (0x34800000, 0x7F000000, 0x7F000000),  # 2^-22; 2^127 for NaN and Inf
    "deepseek-fnuz": (0x34EFACAD, 0x7FC00000, 0x7F800000),  # doubled
    "compressed-tensors": (0x3C00, 0x7FC0, 0x7F80),  # bfloat16 eps 2^-7
}


@pytest.mark.parametrize("profile", sorted(PRODUCERS))
def test_special_tiles(profile: str) -> None:
    zero_scale, nan_scale, inf_scale = SPECIAL_SCALES[profile]
    fnuz = PRODUCERS[profile].fnuz
    minus_zero = 0x00 if fnuz else 0x80  # vLLM's FNUZ conversion clears FN's -0
    zero = _one_tile([0.0, -0.0, 0.0, -0.0], profile)
    assert zero.codes.tolist() == [[0x00, minus_zero, 0x00, minus_zero]]
    assert _scale_bits(zero) == zero_scale

    nan = _one_tile([1.0, float("nan"), -2.0, -0.0], profile)
    assert _scale_bits(nan) == nan_scale
    if profile == "ue8m0":  # scale 2^127: the finite elements flush to ±0, the NaN stays
        assert nan.codes.tolist() == [[0x00, 0x7F, 0x80, 0x80]]
    else:
        assert nan.codes.tolist() == [[0x7F] * 4]

    inf = _one_tile([1.0, float("inf"), -2.0, float("-inf")], profile)
    assert _scale_bits(inf) == inf_scale
    if profile == "ue8m0":  # Inf · 2^-127 = Inf saturates to ±448
        assert inf.codes.tolist() == [[0x00, 0x7E, 0x80, 0xFE]]
    else:  # x / Inf = ±0, Inf / Inf (or Inf · 0) = NaN
        assert inf.codes.tolist() == [[0x00, 0x7F, minus_zero, 0x7F]]


def test_tiny_tiles_and_the_deepgemm_floor() -> None:
    """Below amax 1e-4 DeepGEMM's floor flattens a tile to zeros; compressed-tensors scales it
    to its own maximum (bfloat16 scales reach 2^-133 · 2^-8.8)."""
    tiny = [1e-30, -1e-30, 0.0, 5e-31]
    assert _one_tile(tiny, "deepseek").codes.tolist() == [[0x00, 0x80, 0x00, 0x00]]
    assert _one_tile(tiny, "compressed-tensors").codes.tolist() == [[0x7E, 0xFE, 0x00, 0x76]]
    huge = [3.0e38, -1.0e38, 1.0, 0.0]
    for profile in ("deepseek", "deepgemm", "compressed-tensors"):
        assert _one_tile(huge, profile).codes.tolist() == [[0x7E, 0xF1, 0x00, 0x00]], profile
    # ue8m0 rounds the scale up to 2^121: the maximum lands below 448
    assert _one_tile(huge, "ue8m0").codes.tolist() == [[0x76, 0xE9, 0x00, 0x00]]


#: The bfloat16 neighbours of DeepGEMM's floor float32(1e-4) = 0x1.a36e2ep-14.
BELOW_FLOOR, ABOVE_FLOOR = float.fromhex("0x1.a2p-14"), float.fromhex("0x1.a4p-14")


@pytest.mark.parametrize("profile", ["deepseek", "deepgemm"])
@pytest.mark.parametrize("anchor", [BELOW_FLOOR, ABOVE_FLOOR], ids=["below", "above"])
def test_the_deepgemm_floor_from_both_sides(profile: str, anchor: float) -> None:
    """A tile maximum one bfloat16 step below the 1e-4 floor is raised to it; one step above
    is its own: scale and codes are the oracle's on both sides (ue8m0 rounds both sides to
    the same power of two, so only these profiles can show the step)."""
    assert oracle_scale(profile, Q(BELOW_FLOOR)) != oracle_scale(profile, Q(ABOVE_FLOOR))
    tile = np.array([anchor, -anchor / 3, anchor / 7, 2.0**-20], dtype=BF16)
    blocks = _one_tile(tile.astype(np.float64).tolist(), profile)
    amax = Q(anchor)
    assert _scale_bits(blocks) == int(np.float32(oracle_scale(profile, amax)).view(np.uint32))
    element = oracle_element(profile, amax)
    assert blocks.codes.tolist() == [[element(float(v)) | (0x80 if v < 0 else 0) for v in tile]]


def test_fnuz_is_vllms_conversion_of_deepseek() -> None:
    """vLLM normalize_e4m3fn_to_e4m3fnuz: same bytes, 0x80 -> 0x00, float32 scales doubled;
    the decoded values are unchanged."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((37, 29)) * 0.02).astype(BF16)
    x[3, 4] = -0.0
    fn = quantize_fp8_block(x, block=(16, 8), profile="deepseek")
    fnuz = quantize_fp8_block(x, block=(16, 8), profile="deepseek-fnuz")
    assert np.array_equal(fnuz.codes, np.where(fn.codes == 0x80, 0, fn.codes))
    assert np.array_equal(fnuz.scales, fn.scales * np.float32(2))
    # The same bytes decoded, but for -0 (0x80), which FNUZ stores as +0.
    fn_values = dequantize_fp8_block(fn)
    plus_zero = np.where(fn.codes == 0x80, fn_values.dtype.type(0), fn_values)
    assert dequantize_fp8_block(fnuz).tobytes() == plus_zero.tobytes()


def test_fnuz_special_tiles_read_back() -> None:
    """spec/fp8-block.md §4: after the FNUZ conversion 0x7F is the finite 240, so an Inf tile
    reads back as +Inf where either infinity was and NaN (0 · Inf) elsewhere; a NaN tile stays
    all NaN. The FN profile reads the same Inf tile as all NaN."""
    inf = [1.0, float("inf"), -2.0, float("-inf")]
    fnuz = dequantize_fp8_block(_one_tile(inf, "deepseek-fnuz"))
    assert np.isnan(fnuz[0, [0, 2]]).all() and np.isposinf(fnuz[0, [1, 3]]).all()
    assert np.isnan(dequantize_fp8_block(_one_tile(inf, "deepseek"))).all()
    nan = _one_tile([1.0, float("nan"), -2.0, -0.0], "deepseek-fnuz")
    assert np.isnan(dequantize_fp8_block(nan)).all()


def test_multiply_differs_from_dividing_by_the_scale() -> None:
    """The measured DeepSeek divergence: 448/amax (a reciprocal, then a multiply) against the
    rounded scale's reciprocal. In a tile of maximum 0.08984375, -0.0005264282 is 2.625·s
    after one rounding and lands on a tie (0xC2) or just above it (0xC3)."""
    x = np.array([[0.08984375, -0.0005264282]], dtype=BF16)
    assert quantize_fp8_block(x, block=(1, 2), profile="deepseek").codes[0, 1] == 0xC3
    assert quantize_fp8_block(x, block=(1, 2), profile="deepgemm").codes[0, 1] == 0xC2


def test_ue8m0_scales_are_powers_of_two_at_least_the_exact_scale() -> None:
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((64, 96)) * np.exp2(rng.integers(-20, 20, (64, 1)))).astype(BF16)
    exact = quantize_fp8_block(x, block=(8, 32), profile="deepgemm").scales.astype(np.float64)
    power = quantize_fp8_block(x, block=(8, 32), profile="ue8m0").scales.astype(F32)
    mantissa = power.view(np.uint32) & 0x7FFFFF
    assert np.all(mantissa == 0) and np.all(power >= exact) and np.all(power < 2 * exact)


# -- inputs -------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(8,), (2, 3, 4), (0, 4), (4, 0)])
def test_only_non_empty_2d_weights(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="2-D weight"):
        quantize_fp8_block(np.zeros(shape, dtype=np.float32))


def test_rejected_arguments() -> None:
    x = np.ones((4, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="not float64"):
        quantize_fp8_block(x.astype(np.float64))
    with pytest.raises(ValueError, match="unknown fp8-block profile 'nope'"):
        quantize_fp8_block(x, profile="nope")
    for block in [(0, 128), (128,), (1.5, 2), "128", (True, 2)]:
        with pytest.raises(ValueError, match="block must be"):
            quantize_fp8_block(x, block=block)  # type: ignore[arg-type]
    blocks = quantize_fp8_block(x, block=(3, 3))
    with pytest.raises(ValueError, match=r"needs \(2, 2\)"):
        dequantize_fp8_block(blocks.codes, blocks.scales[:1], block=(3, 3))
    with pytest.raises(ValueError, match="not both"):
        dequantize_fp8_block(blocks, blocks.scales)
    with pytest.raises(ValueError, match="2-D uint8"):
        dequantize_fp8_block(blocks.codes.astype(np.int16), blocks.scales, block=(3, 3))


def test_dtypes_of_the_stored_scales() -> None:
    x = np.ones((3, 3), dtype=np.float16)
    assert quantize_fp8_block(x, profile="deepseek").scales.dtype == F32
    assert quantize_fp8_block(x, profile="compressed-tensors").scales.dtype == np.float16
    assert quantize_fp8_block(x.astype(BF16), profile="compressed-tensors").scales.dtype == BF16


# -- the spec's vectors --------------------------------------------------------------------------

VECTORS = Path(__file__).resolve().parent.parent / "spec" / "vectors" / "fp8-block"


def _vector_cases(op: str) -> list[dict]:
    data = json.loads((VECTORS / f"{op}.json").read_text(encoding="utf-8"))
    assert data["scheme"] == "fp8-block" and data["op"] == op
    return data["cases"]


def test_quantize_vectors_match_the_reference_and_the_oracle() -> None:
    cases = _vector_cases("quantize")
    assert {c["profile"] for c in cases} == set(PRODUCERS)
    checked_by_oracle = 0
    for case in cases:
        shape, block = tuple(case["shape"]), tuple(case["block"])
        x = np.array([float.fromhex(v) for v in case["input"]]).reshape(shape).astype(BF16)
        blocks = quantize_fp8_block(x, block=block, profile=case["profile"])
        assert [f"0x{c:02X}" for c in blocks.codes.reshape(-1)] == case["codes"], case["id"]
        assert blocks.scales.dtype.name == case["scale_dtype"], case["id"]
        got_scales = [float(s).hex() for s in blocks.scales.astype(np.float64).reshape(-1)]
        assert got_scales == case["scales"], case["id"]
        if not np.isfinite(x.astype(np.float64)).all():
            continue  # NaN/Inf tiles: test_special_tiles asserts their bytes
        record = PRODUCERS[case["profile"]]
        codes, scales = oracle_quantize("deepseek" if record.fnuz else record.name, x, block)
        flat_codes = [c for row in codes for c in row]
        if record.fnuz:  # vLLM's conversion: 0x80 -> 0x00, scales doubled
            flat_codes = [0 if c == 0x80 else c for c in flat_codes]
            scales = [[2 * s for s in row] for row in scales]
        assert [int(c, 16) for c in case["codes"]] == flat_codes, case["id"]
        assert [Q(float.fromhex(s)) for s in case["scales"]] == [s for r in scales for s in r]
        checked_by_oracle += 1
    assert checked_by_oracle >= 30


def test_dequantize_vectors_match_the_oracle() -> None:
    for case in _vector_cases("dequantize"):
        profile = case["profile"]
        fp8 = ml_dtypes.float8_e4m3fnuz if PRODUCERS[profile].fnuz else ml_dtypes.float8_e4m3fn
        values = np.arange(256, dtype=np.uint8).view(fp8).astype(np.float64)
        finite = ~np.isnan(values)
        scale = float.fromhex(case["scale"])
        for out, dtype in (("float32", F32), ("bfloat16", BF16)):
            got = [float.fromhex(v) for v in case[out]]
            assert np.array_equal(np.isnan(got), ~finite), case["id"]
            expected = _consumer_oracle(values[finite], scale, dtype)
            assert [Q(v) for v, ok in zip(got, finite, strict=True) if ok] == expected


@pytest.mark.parametrize("profile", sorted(PRODUCERS))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
@pytest.mark.parametrize("scale_bits", [0xFFC00000, 0x7FC00001, 0x7F800000, 0xFF800000])
def test_dequantize_nan_is_canonical_at_every_position(profile: str, dtype: str,
                                                       scale_bits: int) -> None:
    """A NaN code (each of the format's) under a NaN tile scale of either sign and payload, and
    ``Inf · 0`` (code 0 under ±Inf), at every offset 0..70 of a row: every NaN output is the
    canonical quiet NaN of the dtype, sign clear, whatever its place in numpy's vector loop
    or its scalar tail."""
    out = np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    uint = np.dtype(f"u{out.itemsize}")
    canonical = {2: 0x7FC0 if dtype == "bfloat16" else 0x7E00, 4: 0x7FC00000,
                 8: 0x7FF8000000000000}[out.itemsize]
    scales = np.array([[scale_bits]], np.uint32).view(np.float32)
    code_format = PRODUCERS[profile].code_format
    for nan_code in code_format.nan_codes:
        for offset in range(71):
            codes = np.full((1, 71), code_format.encode(np.float64(1.0)), np.uint8)
            codes[0, offset] = nan_code
            codes[0, (offset + 35) % 71] = 0  # Inf · 0 under an infinite scale
            got = dequantize_fp8_block(codes, scales, block=(128, 128), profile=profile,
                                       dtype=out)
            bits = got.view(uint)[np.isnan(got.astype(np.float64))]
            assert bits.size, f"code {nan_code:#x} at {offset}: no NaN output"
            assert set(bits.tolist()) == {canonical}, \
                f"code {nan_code:#x} at {offset}: NaN bits {sorted(hex(b) for b in set(bits.tolist()))}"
