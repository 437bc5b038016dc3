"""dequantize_mx for every consumer profile, exhaustively over E2M1 codes x E8M0 bytes (and a
sample of FP8 codes), against scalar oracles transliterated from each reader's source."""

from __future__ import annotations

import math
import struct

import ml_dtypes
import numpy as np
import pytest

from mxformats import E2M1, E4M3FN, E5M2, Format
from mxformats.schemes.mx import dequantize_mx, pack_fp4
from mxformats.schemes.mx.consumers import CONSUMERS

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def bits(v: float, dtype: np.dtype) -> int:
    """Raw bits of ``v`` rounded once to ``dtype``; NaN as the canonical quiet NaN (+)."""
    if math.isnan(v):
        return {F16: 0x7E00, BF16: 0x7FC0, F32: 0x7FC00000, F64: 0x7FF8 << 48}[dtype]
    if dtype == F64:
        return struct.unpack("<Q", struct.pack("<d", v))[0]
    with np.errstate(over="ignore"):
        if dtype == BF16:
            return int(np.array([v], dtype=np.float32).astype(BF16).view(np.uint16)[0])
        if dtype == F16:
            return int(np.array([v]).astype(np.float16).view(np.uint16)[0])
        return struct.unpack("<I", struct.pack("<f", v))[0] if abs(v) < 2.0**128 else (
            0x7F800000 | (0x80000000 if v < 0 else 0))


def rounded(v: float, dtype: np.dtype) -> float:
    """``v`` rounded into ``dtype`` (nearest-even), as a Python float."""
    with np.errstate(over="ignore"):
        if dtype == BF16:
            return float(np.float32(v).astype(BF16))
        return float(np.array([v]).astype(dtype)[0])


def e8m0_to_half(byte: int) -> float:
    """Quark low_precision_intrinsics.cuh e8m0_to_half<__half, uint8_t>, line by line."""
    scale_exp = byte - 127
    scale_biased = scale_exp + 15
    scale_bits = (scale_exp > 15) * 0x7800
    scale_bits += (scale_biased << 10) * (scale_biased > 0 and scale_exp <= 15)
    if scale_biased <= 0 and scale_biased >= 1 - 10:
        scale_bits += 1 << (10 + scale_biased - 1)
    return float(np.array([scale_bits], dtype=np.uint16).view(np.float16)[0])


def oracle(profile: str, value: float, byte: int, dtype: np.dtype) -> int:
    """The output bits of one element ``value`` (exact) with scale ``byte``."""
    nan = math.nan
    exact = 2.0 ** (byte - 127)
    if profile == "ocp":
        return bits(nan if byte == 0xFF else value * exact, dtype)
    if profile == "quark-hip-fp16":
        return bits(value * e8m0_to_half(byte), dtype)
    if profile in ("quark-hip-bf16", "compressed-tensors", "quark-hip-qdq"):
        scale = math.inf if byte == 0xFF else rounded(exact, dtype)  # powf(2, 128) = inf
        if value == 0 and math.isinf(scale):
            return bits(nan, dtype)
        return bits(value * scale, dtype)
    if profile == "vllm-e8m0-to-f32":
        scale = math.inf if byte == 0xFF else exact
        if scale == 128.0:
            return bits(nan, dtype)  # the bug: byte 134
        if value == 0 and math.isinf(scale):
            return bits(nan, dtype)
        return bits(value * scale, dtype)
    if byte == 0xFF:  # triton, quark-triton: the kernel writes NaN
        return bits(nan, dtype)
    if profile == "quark-triton":  # scale bits b << 7 (bf16) / b << 23 (fp16 through float32)
        scale = 0.0 if byte == 0 else rounded(exact, dtype)
        return bits(value * scale, dtype)
    if profile == "triton":  # max(b << 23, 0x00400000), max(b << 7, 0x0040); fp16 without
        scale = 0.0 if (byte == 0 and dtype == F16) else rounded(exact, dtype)
        product = rounded(value * scale, dtype)  # 0 x Inf: NaN meets tl.clamp, we keep NaN
        limit = float(ml_dtypes.finfo(dtype).max)
        return bits(product if math.isnan(product) else max(-limit, min(limit, product)), dtype)
    raise AssertionError(profile)


CASES = [(p, d) for p, c in CONSUMERS.items() for d in c.dtypes]


@pytest.mark.parametrize(("profile", "dtype"), CASES, ids=[f"{p}-{d.name}" for p, d in CASES])
def test_every_e2m1_code_with_every_byte(profile: str, dtype: np.dtype) -> None:
    codes = np.tile(np.arange(16, dtype=np.uint8), (256, 2))  # block b: codes 0..15, twice
    scales = np.arange(256, dtype=np.uint8)[:, None]
    out = dequantize_mx(pack_fp4(codes), scales, profile=profile, dtype=dtype)
    got = out.view(UINT[dtype.itemsize])
    for byte in range(256):
        expected = [oracle(profile, float(E2M1.values[c]), byte, dtype) for c in range(16)]
        assert got[byte, :16].tolist() == expected, (profile, dtype.name, hex(byte))


FP8 = [(p, f, d) for p in ("ocp", "triton") for f in (E4M3FN, E5M2) for d in CONSUMERS[p].dtypes]
BYTES = [0, 1, 2, 100, 110, 120, 126, 127, 128, 140, 143, 144, 200, 253, 254, 255]


@pytest.mark.parametrize(("profile", "fmt", "dtype"), FP8,
                         ids=[f"{p}-{f.name}-{d.name}" for p, f, d in FP8])
def test_fp8_elements(profile: str, fmt: Format, dtype: np.dtype) -> None:
    codes = np.tile(np.arange(256, dtype=np.uint8), (len(BYTES), 1))
    scales = np.repeat(np.array(BYTES, dtype=np.uint8)[:, None], 8, axis=1)
    out = dequantize_mx(codes, scales, fmt, profile=profile, dtype=dtype)
    got = out.view(UINT[dtype.itemsize])
    for row, byte in enumerate(BYTES):
        for code in range(256):
            value = float(fmt.values[code])
            if math.isnan(value):  # NaN elements: NaN (implementation-defined under tl.clamp)
                assert got[row, code] == bits(math.nan, dtype)
                continue
            # an E5M2 Inf: the triton kernel clamps it to the largest finite value (its FIXME)
            assert got[row, code] == oracle(profile, value, byte, dtype), (hex(byte), hex(code))


def test_ocp_widening_is_exact_and_float64_keeps_range() -> None:
    codes = np.full((1, 32), 0x7B, dtype=np.uint8)  # E5M2 57344
    out = dequantize_mx(codes, np.array([[0xFE]], dtype=np.uint8), E5M2, dtype=np.float64)
    assert out[0, 0] == 57344 * 2.0**127  # beyond float32, exact in float64
    f32 = dequantize_mx(codes, np.array([[0xFE]], dtype=np.uint8), E5M2, dtype=np.float32)
    assert np.isinf(f32[0, 0])
