"""INT4: the packings (three layouts), the two producer profiles' quantization against an exact
Fraction oracle, dequantization, input classes, and every vector of spec/vectors/int4."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from conftest import requires
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from peers import MD, MD_INT4_WRAPS
from test_int4_oracle import bits_of, fractions, round_fraction, round_half_even_int

from mxformats import (
    INT4,
    Int4Array,
    dequantize_int4,
    fast,
    pack_int4,
    quantize_int4,
    unpack_int4,
)
from mxformats.arith import round_once
from mxformats.codec import tensor_to_numpy
from mxformats.registry import get_profile_info
from mxformats.schemes.int4 import LAYOUTS, NIBBLE_ORDER
from mxformats.specgen import SCHEMA_VERSION

SPEC = Path(__file__).resolve().parent.parent / "spec"
BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = {"bfloat16": BF16, "float16": np.dtype(np.float16), "float32": np.dtype(np.float32)}


def _vectors(name: str) -> dict:
    data = json.loads((SPEC / "vectors" / name).read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    return data


# -- vectors ------------------------------------------------------------------------------------


def test_every_vector_names_a_target_or_is_documentation_only() -> None:
    files = sorted((SPEC / "vectors").glob("int4/*.json")) + sorted(
        (SPEC / "vectors").glob("w4a8/*.json")
    )
    assert {f.name for f in files} >= {"packing.json", "quantize.json", "fp8_per_tensor.json"}
    ids = []
    for path in files:
        for case in json.loads(path.read_text()).get("cases", []):
            if path.name in ("decode.json", "encode.json"):
                continue  # the element format's own vectors (tests/test_spec.py)
            assert "target" in case or case.get("documentation_only") is True, (path, case)
            target = case.get("target", {})
            if "profile" in target:
                kind = "activation" if target["profile"].startswith("dynamic") else "producer"
                get_profile_info(target["scheme"], target.get("kind", kind), target["profile"])
            ids.append(case.get("id", ""))
    sources = " ".join(ids)
    for number in ("42", "43", "44", "45", "46"):
        assert number in sources, f"vector §6.7 #{number} missing"


#: Written out from the layouts' sources, not taken from mxformats: nibble i (bits 4i..4i+3) of
#: word c holds element 8c + order[i], stored as (value + offset) mod 16; padding nibbles are 0.
#: compressed-tensors 0.20.1 pack_to_int32 (offset 8), amd-quark 0.13 Pack_4_bits.pack with
#: reorder (the quark order) and without (linear).
_NIBBLE_ORDER = {
    "compressed-tensors": (0, 1, 2, 3, 4, 5, 6, 7),
    "linear": (0, 1, 2, 3, 4, 5, 6, 7),
    "quark": (0, 2, 4, 6, 1, 3, 5, 7),
}
_NIBBLE_OFFSET = {"compressed-tensors": 8, "linear": 0, "quark": 0}


def _words_by_hand(values: list[int], layout: str) -> list[str]:
    """The packed words in plain Python (the independent oracle of the packing vectors)."""
    words = []
    for start in range(0, len(values), 8):
        word = 0
        for nibble, element in enumerate(_NIBBLE_ORDER[layout]):
            if start + element < len(values):
                word |= ((values[start + element] + _NIBBLE_OFFSET[layout]) % 16) << (4 * nibble)
        words.append(f"0x{word:08X}")
    return words


def test_packing_vectors() -> None:
    data = _vectors("int4/packing.json")
    assert len(data["cases"]) >= 12
    for case in data["cases"]:
        assert case["words"] == _words_by_hand(case["values"], case["layout"]), case["id"]
        values = np.array(case["values"])
        words = pack_int4(values, layout=case["layout"])
        assert [f"0x{int(w) & 0xFFFFFFFF:08X}" for w in words] == case["words"], case["id"]
        back = unpack_int4(words, layout=case["layout"], size=len(values))
        assert back.tolist() == case["values"]


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int64])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("packer", [pack_int4, fast.pack_int4], ids=["reference", "fast"])
def test_pack_int4_range_from_both_sides(packer: Any, layout: str, dtype: type) -> None:
    """-8 and 7 are packed (int8 in whole words takes the fast path); -9 and 8 are refused."""
    inside = [-8, 7, 0, -1, 1, 6, -7, 7]
    words = packer(np.array(inside, dtype), layout=layout)
    assert [f"0x{int(w) & 0xFFFFFFFF:08X}" for w in words] == _words_by_hand(inside, layout)
    for outside in (-9, 8):
        with pytest.raises(ValueError, match=r"\[-8, 7\]"):
            packer(np.array([*inside[:7], outside], dtype), layout=layout)


def _input(case: dict) -> np.ndarray:
    values = np.array([float.fromhex(v) for v in case["input"]])
    return values.astype(np.float32).astype(DTYPES[case["dtype"]])


def test_quantize_vectors() -> None:
    """Each vector equals mxformats' result and the exact Fraction oracle's (``_oracle``)."""
    data = _vectors("int4/quantize.json")
    for case in data["cases"]:
        x = _input(case)[None, :]
        assert x.shape[1] == case["group_size"], case["id"]  # one group: one scale
        want_q, want_scale = _oracle(x[0], case["target"]["profile"])
        assert case["q"] == want_q, case["id"]
        assert Fraction(float.fromhex(case["scale"])) == want_scale, case["id"]
        q, scales = quantize_int4(
            x, group_size=case["group_size"], profile=case["target"]["profile"]
        )
        assert q.reshape(-1).tolist() == case["q"], case["id"]
        assert str(scales.dtype) == case["scale_dtype"], case["id"]
        assert float(scales.reshape(-1)[0]) == float.fromhex(case["scale"]), case["id"]


def test_vectors_42_and_43_divide_the_profiles() -> None:
    """sources.md §6.7: the true division (compressed-tensors) and the reciprocal (Quark)."""
    cases = {c["id"]: c for c in _vectors("int4/quantize.json")["cases"]}
    executed = {"42": (-8, -7, 0.12111390382051468), "43": (2, 1, 0.1012464091181755)}
    for number, (ct, quark, scale) in executed.items():
        x = _input(cases[f"{number}/quark"])[None, :]
        got_ct = quantize_int4(x, profile="compressed-tensors")
        got_quark = quantize_int4(x, profile="quark")
        assert (int(got_ct.q[0, 1]), int(got_quark.q[0, 1])) == (ct, quark), number
        assert float(got_ct.scales[0, 0]) == float(got_quark.scales[0, 0]) == scale
        assert cases[f"{number}/compressed-tensors"]["q"][1] == ct


def test_ml_dtypes_int4_cast_vector_46() -> None:
    """The recorded casts (ml_dtypes 0.6.0: truncate, then wrap) hold for the installed
    version; from 0.7.0 an out-of-range value casts to 0 (tests/peers.py)."""
    for case in _vectors("int4/ml_dtypes_cast.json")["cases"]:
        x = float.fromhex(case["input"])
        assert case["target"] == {"library": "ml_dtypes", "version": "0.6.0",
                                  "function": "astype(int4)"}
        in_range = -8 <= math.trunc(x) <= 7
        with np.errstate(invalid="ignore"):
            got = int(np.array([x]).astype(ml_dtypes.int4)[0])
        assert got == (case["ml_dtypes_int4"] if MD_INT4_WRAPS or in_range else 0), (MD, x)
        assert in_range or case["ml_dtypes_int4"] == (math.trunc(x) + 8) % 16 - 8  # wrapped
        assert int(INT4.to_integers(INT4.encode(x))) == case["mxformats_int4_encode"]
        assert case["mxformats_int4_encode"] == max(-8, min(7, round(x)))


# -- packing ------------------------------------------------------------------------------------

int4_values = hnp.arrays(
    np.int8,
    hnp.array_shapes(min_dims=1, max_dims=3, max_side=19),
    elements=st.integers(-8, 7),
)


@settings(max_examples=60, deadline=None)
@given(q=int4_values, layout=st.sampled_from(LAYOUTS), data=st.data())
def test_pack_unpack_round_trip(q: np.ndarray, layout: str, data: st.DataObject) -> None:
    axis = data.draw(st.integers(-q.ndim, q.ndim - 1))
    packed = pack_int4(q, layout=layout, axis=axis)
    assert packed.dtype == np.int32
    assert packed.shape[axis] == -(-q.shape[axis] // 8)
    back = unpack_int4(packed, layout=layout, axis=axis, size=q.shape[axis])
    assert back.dtype == np.int8 and np.array_equal(back, q)


@settings(max_examples=40, deadline=None)
@given(
    q=hnp.arrays(np.int8, st.tuples(st.integers(1, 5), st.just(16)), elements=st.integers(-8, 7))
)
def test_layouts_relate_by_xor_and_permutation(q: np.ndarray) -> None:
    linear = pack_int4(q, layout="linear").view(np.uint32)
    ct = pack_int4(q, layout="compressed-tensors").view(np.uint32)
    assert np.array_equal(ct, linear ^ np.uint32(0x88888888))
    words = q.reshape(q.shape[0], -1, 8)
    permuted = words[..., list(NIBBLE_ORDER["quark"])].reshape(q.shape)
    assert np.array_equal(pack_int4(q, layout="quark"), pack_int4(permuted, layout="linear"))


def test_word_bits_by_hand() -> None:
    q = np.array([-1, 0, 0, 0, 0, 0, 0, 3])
    assert pack_int4(q, layout="linear").view(np.uint32)[0] == 0x3000000F
    assert pack_int4(q, layout="quark").view(np.uint32)[0] == 0x3000000F  # e0, e7 stay put
    q2 = np.array([0, 1, 0, 0, 0, 0, 0, 0])
    assert pack_int4(q2, layout="quark").view(np.uint32)[0] == 0x00010000  # e1 in nibble 4
    assert pack_int4(q2, layout="compressed-tensors").view(np.uint32)[0] == 0x88888898


def test_padding_nibbles_are_zero() -> None:
    for layout in LAYOUTS:
        words = pack_int4(np.array([1, 2, 3]), layout=layout).view(np.uint32)
        assert words.shape == (1,)
        for nibble, element in enumerate(NIBBLE_ORDER[layout]):
            if element >= 3:
                assert (int(words[0]) >> (4 * nibble)) & 0xF == 0, (layout, nibble)


def test_pack_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match=r"\[-8, 7\]"):
        pack_int4(np.array([8]))
    with pytest.raises(TypeError, match="integers"):
        pack_int4(np.array([1.0]))
    with pytest.raises(ValueError, match="unknown int4 layout"):
        pack_int4(np.array([1]), layout="awq")
    with pytest.raises(ValueError, match="does not fit"):
        unpack_int4(np.zeros(2, np.int32), size=8)
    with pytest.raises(TypeError, match="int32"):
        unpack_int4(np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="out of range"):
        pack_int4(np.zeros((2, 8), np.int8), axis=2)


# -- quantization against the Fraction oracle -----------------------------------------------------


def _oracle(x: np.ndarray, profile: str) -> tuple[list[int], Fraction]:
    """One group, from the description in spec/int4-schemes.md, with exact arithmetic."""
    bits = bits_of(x.dtype)
    values = fractions(x)
    amax = max(abs(v) for v in values)
    scale = round_fraction(amax / Fraction(15, 2), bits)
    if profile == "compressed-tensors":
        if scale == 0:
            scale = Fraction(float(ml_dtypes.finfo(x.dtype).eps))
        quotients = [round_fraction(v / scale, bits) for v in values]
    else:
        scale = max(scale, Fraction(2) ** -23)
        inverse = round_fraction(1 / scale, 24)
        quotients = [round_fraction(v * inverse, 24) for v in values]
    return [max(-8, min(7, round_half_even_int(v))) for v in quotients], scale


def _finite(dtype: np.dtype, scale: float) -> st.SearchStrategy[float]:
    return st.floats(-1, 1, allow_nan=False, allow_subnormal=False, width=32).map(
        lambda v: float(np.float32(v * scale).astype(dtype))
    )


@settings(max_examples=150, deadline=None)
@given(
    dtype=st.sampled_from(list(DTYPES.values())),
    profile=st.sampled_from(["compressed-tensors", "quark"]),
    data=st.data(),
)
def test_quantize_matches_the_exact_oracle(
    dtype: np.dtype, profile: str, data: st.DataObject
) -> None:
    magnitude = data.draw(st.sampled_from([2.0**-6, 0.02, 1.0, 300.0]))
    values = data.draw(st.lists(_finite(dtype, magnitude), min_size=16, max_size=16))
    if data.draw(st.booleans()):  # exact ties of the grid: multiples of amax / 15
        k = data.draw(st.lists(st.integers(-15, 15), min_size=16, max_size=16))
        values = [float(np.float32(v * magnitude / 16).astype(dtype)) for v in k]
    x = np.array(values, dtype=np.float32).astype(dtype)
    q, scales = quantize_int4(x[None, :], group_size=16, profile=profile)
    want_q, want_scale = _oracle(x, profile)
    assert q.reshape(-1).tolist() == want_q
    assert Fraction(float(scales.reshape(-1)[0])) == want_scale
    assert scales.dtype == (dtype if profile == "compressed-tensors" else np.float32)


def test_zero_groups() -> None:
    for dtype, eps in ((BF16, 2.0**-7), (np.dtype(np.float16), 2.0**-10), (np.float32, 2.0**-23)):
        q, s = quantize_int4(np.zeros((1, 32), dtype), profile="compressed-tensors")
        assert not q.any() and float(s[0, 0]) == eps
        q, s = quantize_int4(np.zeros((1, 32), dtype), profile="quark")
        assert not q.any() and float(s[0, 0]) == 2.0**-23 and s.dtype == np.float32


def test_grid_is_asymmetric() -> None:
    x = np.zeros((1, 32), np.float32)
    x[0, :2] = 1.5, -1.5
    for profile in ("compressed-tensors", "quark"):
        assert quantize_int4(x, profile=profile).q[0, :2].tolist() == [7, -8]


def test_shapes_axes_and_per_channel() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 64, 5)).astype(np.float32)
    result = quantize_int4(x, group_size=32, axis=1, profile="compressed-tensors")
    assert result.q.shape == x.shape and result.scales.shape == (3, 2, 5) and result.axis == 1
    moved = quantize_int4(np.moveaxis(x, 1, -1), group_size=32, profile="compressed-tensors")
    assert np.array_equal(np.moveaxis(moved.q, -1, 1), result.q)
    per_channel = quantize_int4(x[0].T, group_size=None, profile="quark")
    assert per_channel.scales.shape == (5, 1) and per_channel.group_size is None
    assert np.array_equal(per_channel.q, quantize_int4(x[0].T, group_size=64, profile="quark").q)


def test_torch_bfloat16_input_equals_numpy_bfloat16() -> None:
    torch = requires("torch")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    t = torch.from_numpy(x).to(torch.bfloat16)
    for profile in ("compressed-tensors", "quark"):
        a = quantize_int4(t, profile=profile)  # torch in, torch out (issue 17)
        b = quantize_int4(x.astype(BF16), profile=profile)
        assert isinstance(a.q, torch.Tensor) and a.scales.dtype == (
            torch.bfloat16 if profile == "compressed-tensors" else torch.float32)
        assert np.array_equal(tensor_to_numpy(a.q), b.q)
        assert tensor_to_numpy(a.scales).tobytes() == b.scales.tobytes()


def test_torch_emulation_of_compressed_tensors() -> None:
    """compressed-tensors' arithmetic written with torch bfloat16 ops (calculate_qparams,
    _quantize) gives the same q and scales."""
    torch = requires("torch")
    rng = np.random.default_rng(5)
    for _ in range(20):
        w = torch.from_numpy(rng.standard_normal((8, 64)).astype(np.float32)).to(torch.bfloat16)
        g = w.reshape(8, 2, 32)
        scale = g.abs().amax(-1) / (torch.tensor(15.0).to(torch.bfloat16) / 2)
        q = torch.round(torch.clamp(g / scale[..., None], -8, 7)).reshape(8, 64)
        ours = quantize_int4(w, profile="compressed-tensors")
        assert torch.equal(ours.q, q.to(torch.int8))
        assert torch.equal(ours.scales.view(torch.int16), scale.view(torch.int16))


# -- input classes ------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("profile", ["compressed-tensors", "quark"])
def test_non_finite_inputs_are_refused(bad: float, profile: str) -> None:
    x = np.zeros((1, 32), np.float32)
    x[0, 3] = bad
    with pytest.raises(ValueError, match="implementation-defined"):
        quantize_int4(x, profile=profile)


def test_refusals() -> None:
    with pytest.raises(ValueError, match="not a positive multiple"):
        quantize_int4(np.zeros((2, 40), np.float32), profile="compressed-tensors")
    with pytest.raises(ValueError, match="not a positive multiple"):
        quantize_int4(np.zeros((2, 0), np.float32))
    with pytest.raises(ValueError, match="unknown int4 producer profile"):
        quantize_int4(np.zeros((1, 32), np.float32), profile="awq")
    with pytest.raises(ValueError, match="group_size"):
        quantize_int4(np.zeros((1, 32), np.float32), group_size=0)
    with pytest.raises(TypeError, match="float64"):
        quantize_int4(np.zeros((1, 32)), profile="quark")
    with pytest.raises(TypeError, match="dtype int64"):
        quantize_int4(np.zeros((1, 32), np.int64))
    assert quantize_int4(np.zeros((1, 32)), profile="compressed-tensors").scales.dtype == np.float64


def test_bf16_division_vector_needs_the_bfloat16_rounding_step() -> None:
    """Vector bf16-division: round(bf16(x/s)) differs from round(x/s) with the same bfloat16 s.
    (Float32 copies of BF16 weights give other bytes: tests/test_producers_int4.py.)"""
    case = next(
        c for c in _vectors("int4/quantize.json")["cases"] if c["id"].startswith("bf16-division")
    )
    x = Fraction(float.fromhex(case["input"][1]))
    s = Fraction(float.fromhex(case["scale"]))
    assert case["q"][1] == round_half_even_int(round_fraction(x / s, 8))
    assert case["q"][1] != round_half_even_int(x / s)


# -- dequantization -----------------------------------------------------------------------------


def test_dequantize_compressed_tensors_rounds_to_the_scale_dtype() -> None:
    rng = np.random.default_rng(6)
    x = rng.standard_normal((4, 64)).astype(np.float32).astype(BF16)
    result = quantize_int4(x)
    out = dequantize_int4(result, dtype=np.float32)
    want = [
        float(round_fraction(Fraction(int(q)) * Fraction(float(s)), 8))
        for q, s in zip(
            result.q.reshape(-1), np.repeat(result.scales, 32, axis=1).reshape(-1), strict=True
        )
    ]
    assert out.reshape(-1).tolist() == want
    assert dequantize_int4(result, dtype=BF16).dtype == BF16
    explicit = dequantize_int4(result.q, result.scales, group_size=32, profile="compressed-tensors")
    assert np.array_equal(explicit, out)


def test_dequantize_quark_in_float32() -> None:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 32)).astype(np.float32)
    result = quantize_int4(x, group_size=None, profile="quark")
    out = dequantize_int4(result)
    assert np.array_equal(out, result.q.astype(np.float32) * result.scales)


def test_dequantize_refusals() -> None:
    q = np.zeros((2, 64), np.int8)
    with pytest.raises(ValueError, match="needs"):
        dequantize_int4(q, np.ones((2, 3), np.float32))
    with pytest.raises(TypeError, match="needs scales"):
        dequantize_int4(q)
    with pytest.raises(ValueError, match=r"\[-8, 7\]"):
        dequantize_int4(q + 9, np.ones((2, 2), np.float32))
    with pytest.raises(ValueError, match="unknown int4 profile 'x'; consumers: "):
        dequantize_int4(q, np.ones((2, 2), np.float32), profile="x")


def test_int4array_unpacks() -> None:
    result = quantize_int4(np.ones((1, 32), np.float32))
    q, scales = result
    assert isinstance(result, Int4Array) and q is result.q and scales is result.scales


def test_round_once_to_bfloat16_is_not_a_double_rounding() -> None:
    # 1 + 2^-8 is the bfloat16 midpoint between 1 and 1 + 2^-7; a hair above it must go up,
    # although float32 would first round it onto the midpoint (and ties-to-even goes down).
    above = 1 + 2.0**-8 + 2.0**-40
    below = 1 + 2.0**-8 - 2.0**-40
    got = round_once(np.array([above, below, 1 + 2.0**-8, -above]), BF16).astype(np.float64)
    assert got.tolist() == [1 + 2.0**-7, 1.0, 1.0, -(1 + 2.0**-7)]
    rng = np.random.default_rng(8)
    v = rng.standard_normal(2000) * 2.0 ** rng.integers(-20, 20, 2000)
    got = round_once(v, BF16).astype(np.float64)
    assert all(Fraction(g) == round_fraction(Fraction(x), 8) for g, x in zip(got, v, strict=True))


@pytest.mark.parametrize("profile", ["compressed-tensors", "quark"])
def test_dequantize_infinite_scale_times_zero_is_nan_without_a_warning(profile: str) -> None:
    q = np.array([[0, 1, -1, 0]], dtype=np.int8)
    out = dequantize_int4(q, np.array([[np.inf]], dtype=np.float32), group_size=4,
                          profile=profile)
    assert np.isnan(out[0, 0]) and np.isnan(out[0, 3])
    assert out[0, 1] == np.inf and out[0, 2] == -np.inf
