"""Quark W4A8 (ProgressiveSpec FP8 -> INT4): the vectors of spec/vectors/w4a8/quantize.json, the
double rounding through bfloat16, a torch emulation of Quark's export, dequantization as vLLM
folds it, padding and refusals. The byte-for-byte reproduction of the producer checkpoint is
tests/test_producers_int4.py."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from conftest import requires

from mxformats import E4M3FN, W4A8Array, dequantize_w4a8, quantize_fp8, quantize_w4a8, unpack_int4
from mxformats.arith import divide_in
from mxformats.codec import tensor_to_numpy
from mxformats.specgen import SCHEMA_VERSION

SPEC = Path(__file__).resolve().parent.parent / "spec"
BF16 = np.dtype(ml_dtypes.bfloat16)


def _cases() -> list[dict]:
    data = json.loads((SPEC / "vectors" / "w4a8" / "quantize.json").read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    return data["cases"]


def _weight(case: dict) -> np.ndarray:
    values = np.array([float.fromhex(v) for v in case["input"]], np.float32)
    return values.astype(BF16).reshape(case["shape"])


def test_w4a8_vectors() -> None:
    """Each vector equals Quark's arithmetic written with torch ops (``_quark_in_torch``, the
    independent oracle) and mxformats' result."""
    torch = requires("torch")
    cases = _cases()
    assert len(cases) >= 3
    for case in cases:
        assert case["target"] == {"profile": "quark", "scheme": "w4a8"}
        w = _weight(case)
        t = torch.from_numpy(w.view(np.int16).copy()).view(torch.bfloat16)
        w1, packed, s1, s2 = _quark_in_torch(torch, t)
        assert [f"0x{int(c):02X}" for c in w1.reshape(-1)] == case["w1_codes"], case["id"]
        assert [f"0x{int(v) & 0xFFFFFFFF:08X}" for v in packed.reshape(-1)] == case["weight"]
        assert float(s1) == float.fromhex(case["weight_scale"]), case["id"]
        assert s2.tolist() == [float.fromhex(v) for v in case["weight_scale_2"]], case["id"]
        result = quantize_w4a8(w)
        codes, _ = quantize_fp8(w, E4M3FN, profile="static")
        assert [f"0x{int(c):02X}" for c in codes.reshape(-1)] == case["w1_codes"], case["id"]
        words = [f"0x{int(v) & 0xFFFFFFFF:08X}" for v in result.weight.reshape(-1)]
        assert words == case["weight"], case["id"]
        assert float(result.weight_scale) == float.fromhex(case["weight_scale"])
        want_s2 = [float.fromhex(v) for v in case["weight_scale_2"]]
        assert result.weight_scale_2.tolist() == want_s2, case["id"]


def test_double_rounding_vector() -> None:
    """The FP8 code of the example differs from the exact quotient's: the bfloat16 step."""
    case = next(c for c in _cases() if c["id"] == "double-rounding")
    w = _weight(case)
    s1 = np.float32(float.fromhex(case["weight_scale"]))
    once = E4M3FN.encode(w.astype(np.float64) / np.float64(s1)).reshape(-1)
    twice = E4M3FN.encode(divide_in(w, s1, BF16).astype(np.float64)).reshape(-1)
    assert [f"0x{int(c):02X}" for c in twice] == case["w1_codes"]
    assert not np.array_equal(once, twice)


def _quark_in_torch(
    torch: object, w: object
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Quark 0.13 file2file _progressive_quantize_weight's arithmetic with torch ops: the FP8
    codes of the first step, the packed words, weight_scale and weight_scale_2. A row that is
    not a whole number of words is padded with 0 nibbles (spec/int4-layouts.md, "Padding")."""
    t = torch  # type: ignore[assignment]
    s1 = w.abs().max().to(t.float32) / 448.0  # type: ignore[attr-defined]
    s1 = s1 if s1 != 0 else t.tensor(2.0**-23)
    fp8 = t.clamp(w / s1, -448, 448).to(t.float8_e4m3fn)  # type: ignore[attr-defined]
    w1 = fp8.float()
    s2 = t.clamp(w1.abs().amax(dim=1) / 7.5, min=2.0**-23)
    q = t.round(w1 * (1.0 / s2)[:, None]).clamp(-8, 7).to(t.int64)
    order = [0, 2, 4, 6, 1, 3, 5, 7]
    o, i = q.shape
    q = t.nn.functional.pad(q, (0, -i % 8))  # type: ignore[attr-defined]
    nib = (q & 0xF).reshape(o, -1, 8)[..., order]
    words = sum(nib[..., k] << (4 * k) for k in range(8)).to(t.int64)
    packed = (words & 0xFFFFFFFF).numpy().astype(np.uint32).view(np.int32)
    codes = fp8.view(t.uint8).numpy()  # type: ignore[attr-defined]
    return codes, packed, s1.numpy().astype(np.float32), s2.numpy().astype(np.float32)


def test_torch_emulation_of_quark() -> None:
    torch = requires("torch")
    rng = np.random.default_rng(12)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for k in range(8):
            w = torch.from_numpy(rng.standard_normal((6, 32)).astype(np.float32) * 0.02)
            if k == 0:
                w[2] = 0
            w = w.to(dtype)
            _, packed, s1, s2 = _quark_in_torch(torch, w)
            result = quantize_w4a8(w)
            assert tensor_to_numpy(result.weight).tobytes() == packed.tobytes()
            assert tensor_to_numpy(result.weight_scale).tobytes() == s1.tobytes()
            assert tensor_to_numpy(result.weight_scale_2).tobytes() == s2.tobytes()


def test_zero_weight() -> None:
    result = quantize_w4a8(np.zeros((2, 16), BF16))
    assert float(result.weight_scale) == 2.0**-23
    assert result.weight_scale_2.tolist() == [2.0**-23] * 2 and not result.weight.any()


def test_padding_to_whole_words() -> None:
    case = next(c for c in _cases() if c["id"] == "ramp-padded")
    w = _weight(case)
    result = quantize_w4a8(w)
    assert result.weight.shape == (2, 2)
    q = unpack_int4(result.weight, layout="quark", size=12)
    assert q.shape == (2, 12)
    padding = unpack_int4(result.weight, layout="quark")[:, 12:]
    assert not padding.any()


def test_dequantize_as_vllm_folds() -> None:
    rng = np.random.default_rng(13)
    w = (rng.standard_normal((4, 64)) * 0.02).astype(np.float32).astype(BF16)
    result = quantize_w4a8(w)
    weight, s1, s2 = result
    q = unpack_int4(weight, layout="quark").astype(np.float32)
    folded = s2 * s1
    want = q * folded[:, None]
    got = dequantize_w4a8(result)
    assert got.dtype == np.float32 and np.array_equal(got, want)
    assert np.array_equal(dequantize_w4a8(weight, s1, s2), got)
    assert dequantize_w4a8(result, dtype=BF16).dtype == BF16
    error = np.abs(got - w.astype(np.float32))
    # 0.5 step of the INT4 grid plus half an FP8 ulp (2^-4 relative) of up to 7.5 steps
    assert np.all(error <= np.repeat(folded[:, None], 64, axis=1))


def test_w4a8_unpacks_and_refuses() -> None:
    result = quantize_w4a8(np.ones((1, 8), np.float32))
    assert isinstance(result, W4A8Array) and len(list(result)) == 3
    with pytest.raises(ValueError, match="2-D"):
        quantize_w4a8(np.ones(8, np.float32))
    with pytest.raises(ValueError, match="unknown w4a8"):
        quantize_w4a8(np.ones((1, 8), np.float32), profile="vllm")
    with pytest.raises(ValueError, match="implementation-defined"):
        quantize_w4a8(np.array([[np.nan] * 8], np.float32))
    with pytest.raises(TypeError, match="needs"):
        dequantize_w4a8(result.weight)
    with pytest.raises(ValueError, match="scalar"):
        dequantize_w4a8(result.weight, np.ones(2, np.float32), result.weight_scale_2)


def test_w4a8_dequantize_vectors_for_the_vllm_consumer() -> None:
    """spec/vectors/w4a8/dequantize.json, recomputed here without mxformats' unpacker: the quark
    nibble order written out, then float32(q × float32(s2 × s1)) as vLLM folds the scales."""
    data = json.loads((SPEC / "vectors" / "w4a8" / "dequantize.json").read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    order = [0, 2, 4, 6, 1, 3, 5, 7]  # nibble i holds column 8c + order[i]
    assert len(data["cases"]) >= 3
    for case in data["cases"]:
        assert case["target"] == {"profile": "vllm", "scheme": "w4a8", "kind": "consumer"}
        words = np.array([int(w, 16) for w in case["weight"]], np.uint32)
        rows = len(case["weight_scale_2"])
        words = words.reshape(rows, -1)
        q = np.zeros((rows, words.shape[1] * 8), np.int64)
        for i, column in enumerate(order):
            nibble = (words >> (4 * i)) & 0xF
            q[:, column::8] = np.where(nibble >= 8, nibble.astype(np.int64) - 16, nibble)
        s1 = np.float32(float.fromhex(case["weight_scale"]))
        s2 = np.array([float.fromhex(v) for v in case["weight_scale_2"]], np.float32)
        expected = q.astype(np.float32) * (s2 * s1)[:, None]
        want = np.array([float.fromhex(v) for v in case["dequantized"]], np.float32)
        assert np.array_equal(expected.reshape(-1).view(np.uint32), want.view(np.uint32))
        got = dequantize_w4a8(words.view(np.int32), np.float32(s1), s2)
        assert np.array_equal(got.reshape(-1).view(np.uint32), want.view(np.uint32)), case["id"]
