"""FP8 per-tensor profiles (static = Quark; vllm-fnuz, dynamic-fn, dynamic-fnuz = vLLM's
kernel), their vectors (spec/vectors/w4a8/fp8_per_tensor.json), an exact oracle, torch
emulations and the input classes."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from conftest import requires
from hypothesis import given, settings
from hypothesis import strategies as st
from test_int4_oracle import fractions, round_fraction

from mxformats import E4M3FN, E4M3FNUZ, E5M2, FORMATS, dequantize_fp8, quantize_fp8
from mxformats.codec import tensor_to_numpy
from mxformats.schemes.fp8 import VLLM_FNUZ_MAX
from mxformats.specgen import SCHEMA_VERSION

SPEC = Path(__file__).resolve().parent.parent / "spec"
BF16 = np.dtype(ml_dtypes.bfloat16)


def test_fp8_vectors() -> None:
    data = json.loads((SPEC / "vectors" / "w4a8" / "fp8_per_tensor.json").read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    profiles_seen = set()
    for case in data["cases"]:
        fmt = FORMATS[case["format"]]
        x = np.array([float.fromhex(v) for v in case["input"]], dtype=np.float32)
        codes, scale = quantize_fp8(x, fmt, profile=case["target"]["profile"])
        assert [f"0x{int(c):02X}" for c in codes] == case["codes"], case["id"]
        assert float(scale) == float.fromhex(case["scale"]), case["id"]
        profiles_seen.add(case["target"]["profile"])
    assert profiles_seen == {"static", "vllm-fnuz", "dynamic-fn", "dynamic-fnuz"}


def test_vectors_35_36_as_elements() -> None:
    """sources.md §6.5 #35 (-0.0) and #36 (2^-10) inside tensors whose scale is 1."""
    for fmt, neg_zero, tiny in ((E4M3FN, 0x80, 0x00), (E4M3FNUZ, 0x00, 0x01)):
        x = np.array([fmt.max, -0.0, 2.0**-10], np.float32)
        codes, scale = quantize_fp8(x, fmt, profile="static")
        assert float(scale) == 1.0 and codes.tolist() == [fmt.max_code, neg_zero, tiny]


def _static_oracle(x: np.ndarray, fmt: object) -> tuple[list[int], float]:
    """Quark static, with exact arithmetic: s = f32(amax / M); W1 = fmt(clamp(dtype(f32(x / s))))
    (torch divides in float32, then rounds to the input dtype)."""
    bits = {BF16: 8, np.dtype(np.float32): 24}[x.dtype]
    values = fractions(x)
    amax = max(abs(v) for v in values)
    s = round_fraction(amax / Fraction(fmt.max), 24) or Fraction(2) ** -23  # type: ignore[attr-defined]
    quotients = [round_fraction(round_fraction(v / s, 24), bits) for v in values]
    clamped = [max(-fmt.max, min(fmt.max, float(v))) for v in quotients]  # type: ignore[attr-defined]
    negative = np.signbit(x.astype(np.float32))
    signed = [-abs(c) if n else abs(c) for c, n in zip(clamped, negative, strict=True)]
    return fmt.encode(np.array(signed)).tolist(), float(s)  # type: ignore[attr-defined]


@settings(max_examples=80, deadline=None)
@given(
    dtype=st.sampled_from([BF16, np.dtype(np.float32)]),  # float16: test_static_torch_emulation
    fmt=st.sampled_from([E4M3FN, E4M3FNUZ, E5M2]),
    values=st.lists(st.floats(-1, 1, width=32, allow_subnormal=False), min_size=1, max_size=24),
    magnitude=st.sampled_from([2.0**-10, 0.02, 1.0, 300.0]),
)
def test_static_matches_the_exact_oracle(
    dtype: np.dtype, fmt: object, values: list[float], magnitude: float
) -> None:
    x = np.array(values, np.float32)
    x = (np.where(np.abs(x) < 2.0**-60, 0, x) * np.float32(magnitude)).astype(dtype)  # normal s
    codes, scale = quantize_fp8(x, fmt, profile="static")  # type: ignore[arg-type]
    want_codes, want_scale = _static_oracle(x, fmt)
    assert codes.tolist() == want_codes and float(scale) == want_scale


def test_static_torch_emulation() -> None:
    """Quark's real_quantize_fp8_per_tensor_with_scale written with torch ops."""
    torch = requires("torch")
    rng = np.random.default_rng(9)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for _ in range(10):
            x = torch.from_numpy(rng.standard_normal((5, 33)).astype(np.float32) * 0.05).to(dtype)
            s = x.abs().max().to(torch.float32) / 448.0
            w1 = torch.clamp(x / s, -448, 448).to(torch.float8_e4m3fn)
            codes, scale = quantize_fp8(x, E4M3FN, profile="static")
            assert torch.equal(codes, w1.view(torch.uint8))
            assert tensor_to_numpy(scale).tobytes() == s.numpy().tobytes()


def test_vllm_dynamic_torch_emulation() -> None:
    """vLLM's kernel (float32; reciprocal multiply; clamp to ±M) with torch ops."""
    torch = requires("torch")
    rng = np.random.default_rng(10)
    for fmt, profile, limit, tdtype in (
        (E4M3FN, "dynamic-fn", 448.0, torch.float8_e4m3fn),
        (E4M3FNUZ, "dynamic-fnuz", VLLM_FNUZ_MAX, torch.float8_e4m3fnuz),
        (E4M3FNUZ, "vllm-fnuz", VLLM_FNUZ_MAX, torch.float8_e4m3fnuz),
    ):
        for _ in range(10):
            x = torch.from_numpy(rng.standard_normal((4, 40)).astype(np.float32)).to(torch.bfloat16)
            s = x.float().abs().max() / limit
            q = torch.clamp(x.float() * (1.0 / s), -limit, limit).to(tdtype)
            codes, scale = quantize_fp8(x, fmt, profile=profile)
            assert torch.equal(codes, q.view(torch.uint8))
            assert tensor_to_numpy(scale).tobytes() == s.numpy().tobytes()


def test_fnuz_profiles_use_their_own_range() -> None:
    x = np.array([1.0, 0.5], np.float32)
    static, s_static = quantize_fp8(x, E4M3FNUZ, profile="static")
    vllm, s_vllm = quantize_fp8(x, E4M3FNUZ, profile="vllm-fnuz")
    assert E4M3FNUZ.decode(static)[0] == 240 and float(s_static) == np.float32(1) / np.float32(240)
    assert E4M3FNUZ.decode(vllm)[0] == 224 and float(s_vllm) == np.float32(1) / np.float32(224)


def test_input_classes() -> None:
    zeros = np.zeros(5, np.float32)
    codes, scale = quantize_fp8(zeros, E4M3FN, profile="static")
    assert not codes.any() and float(scale) == 2.0**-23
    codes, scale = quantize_fp8(zeros, E4M3FN, profile="dynamic-fn")  # 0 * (1/0) -> +max
    assert float(scale) == 0 and codes.tolist() == [0x7E] * 5
    for bad in (np.nan, np.inf):
        with pytest.raises(ValueError, match="implementation-defined"):
            quantize_fp8(np.array([1.0, bad], np.float32), E4M3FN, profile="static")
    codes, scale = quantize_fp8(np.array([np.nan, 2.0], np.float32), E4M3FN, profile="dynamic-fn")
    assert float(scale) == np.float32(2) / np.float32(448) and codes.tolist() == [0x7E, 0x7E]
    codes, _ = quantize_fp8(np.array([np.inf, -2.0], np.float32), E4M3FN, profile="dynamic-fn")
    assert codes.tolist() == [0x7E, 0x80]  # Inf * 0 = NaN -> +max; -2 * 0 = -0
    neg_zero, _ = quantize_fp8(np.array([-0.0, 1.0], np.float32), E4M3FNUZ, profile="dynamic-fnuz")
    assert neg_zero.tolist()[0] == 0x00


def test_refusals() -> None:
    x = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="unknown fp8 profile"):
        quantize_fp8(x, profile="nope")
    with pytest.raises(ValueError, match="takes e4m3fnuz"):
        quantize_fp8(x, E4M3FN, profile="vllm-fnuz")
    with pytest.raises(ValueError, match="takes e4m3fn,"):
        quantize_fp8(x, FORMATS["e2m1"], profile="static")
    with pytest.raises(TypeError):
        quantize_fp8(np.ones(3, np.int32))


def test_dequantize_fp8_rounds_once() -> None:
    rng = np.random.default_rng(11)
    codes = rng.integers(0, 256, 500).astype(np.uint8)
    codes = codes[(codes & 0x7F) != 0x7F]  # no NaN
    scale = np.float32(rng.standard_normal() * 0.01 + 0.05)
    for dtype, bits in ((BF16, 8), (np.float16, 11), (np.float32, 24)):
        out = dequantize_fp8(codes, scale, E4M3FN, dtype=dtype)
        assert out.dtype == np.dtype(dtype)
        want = [
            round_fraction(Fraction(float(v)) * Fraction(float(scale)), bits)
            for v in E4M3FN.decode(codes, np.float64)
        ]
        got = [Fraction(float(v)) for v in out.astype(np.float64)]
        assert got == want
    nan = dequantize_fp8(np.array([0x7F], np.uint8), np.float32(1.0))
    assert np.isnan(nan[0])


@settings(max_examples=40, deadline=None)
@given(values=st.lists(st.floats(-100, 100, width=32), min_size=1, max_size=16))
def test_quantize_dequantize_error_is_bounded(values: list[float]) -> None:
    x = np.array(values, np.float32)
    codes, scale = quantize_fp8(x, E4M3FN, profile="static")
    back = dequantize_fp8(codes, scale, E4M3FN).astype(np.float64)
    amax = float(np.max(np.abs(x)))
    # half an E4M3 ulp at the value's binade (relative 2^-4), or the subnormal step
    bound = np.maximum(np.abs(x) * 2.0**-4, float(scale) * 2.0**-10) * 1.0001
    assert np.all(np.abs(back - x) <= bound + 1e-30) or amax == 0
