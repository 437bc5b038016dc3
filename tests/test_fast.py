"""The fast CPU paths (mxformats.fast) return the reference's bytes.

Through the harness (spec vectors, every bfloat16/float16 pattern, boundary tables, Hypothesis),
exhaustively over the classes the lookup tables are built on (every scaled float32 class below
8, every E8M0 byte, every amax exponent, every bfloat16/float16 pattern for FP8, every INT4
scale pattern), and on inputs spanning several chunks and threads with NaN/Inf blocks on the
chunk edges. Bit-exact means equal bytes; NaN is compared by its bits.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from conftest import requires
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mxformats import codec, fast
from mxformats.fast import chunks, fallback
from mxformats.fast import codec as fast_codec
from mxformats.fast import mx as fast_mx
from mxformats.fast import nvfp4 as fast_nvfp4
from mxformats.formats import E2M1, E4M3FN, E4M3FNUZ, E5M2, E8M0, Format
from mxformats.schemes import fp8, fp8_block, int4, mx, nvfp4, w4a8
from mxformats.testing import check_dequantizer, check_int4_quantizer, check_quantizer

BF16 = np.dtype(ml_dtypes.bfloat16)
FLOAT_INPUTS = (np.dtype(np.float32), BF16, np.dtype(np.float16))
PROFILES = fast.QUANTIZE_PROFILES
#: Blocks of the chunk tests (5 × 827): with ``small_chunks``, 65 chunks, the last one short.
BLOCKS = 4135


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 64 blocks, tasks of 2 chunks: test-sized inputs span dozens of chunks and
    tasks, so chunk edges and the hand-out of tasks to threads are exercised."""
    patch_everywhere(monkeypatch, "CHUNK_BLOCKS", 64)
    patch_everywhere(monkeypatch, "CHUNK_ELEMENTS", 64 * chunks.BLOCK)
    patch_everywhere(monkeypatch, "TASK_CHUNKS", 2)


def patch_everywhere(monkeypatch: pytest.MonkeyPatch, name: str, value: object) -> None:
    """Set ``name`` in every module of :mod:`mxformats.fast` that holds it (each imports the
    shared chunk sizes from ``chunks`` by name)."""
    for info in pkgutil.iter_modules(fast.__path__):
        module = importlib.import_module(f"{fast.__name__}.{info.name}")
        if hasattr(module, name):
            monkeypatch.setattr(module, name, value)


def bits(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Raw bits of an array, for comparing floats (NaN included) byte for byte."""
    view = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    return np.ascontiguousarray(a).view(view)


def assert_same_mx(got: mx.MXArray, want: mx.MXArray) -> None:
    assert got.codes.shape == want.codes.shape and got.scales.shape == want.scales.shape
    assert np.array_equal(got.scales, want.scales), np.flatnonzero(got.scales != want.scales)[:5]
    assert np.array_equal(got.codes, want.codes), np.flatnonzero(got.codes != want.codes)[:5]


def float32_from_bits(b: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.asarray(b, dtype=np.uint32).view(np.float32)


def blocks_with_specials(rng: np.random.Generator, count: int) -> np.ndarray[Any, Any]:
    """``count`` float32 blocks of 32 with magnitudes over the whole float32 range, and NaN,
    ±Inf, all-zero, -0 and subnormal blocks at the chunk edges and at both ends."""
    exponents = rng.integers(-149, 128, size=(count, 1))
    with np.errstate(over="ignore", invalid="ignore"):
        x = (rng.standard_normal((count, 32)) * np.exp2(exponents)).astype(np.float32)
    x[np.isinf(x)] = 1.0
    chunk = chunks.CHUNK_BLOCKS
    specials = {0: (3, np.nan), 1: (31, -np.inf), chunk - 1: (0, np.inf), chunk: (7, -np.nan),
                count - 1: (30, np.nan)}
    for block, (element, value) in specials.items():
        x[block % count, element] = value
    x[(chunk + 1) % count] = -0.0
    x[5] = 0.0
    x[6] = float32_from_bits(rng.integers(0, 1 << 23, 32, dtype=np.uint32))  # subnormal
    return x


# -- MXFP4 quantize --------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", PROFILES)
def test_quantize_harness(profile: str) -> None:
    check_quantizer(fast.quantize_mx, profile=profile,
                    dtypes=("float32", "bfloat16", "float16")).raise_if_failed()


@pytest.mark.parametrize("profile", PROFILES)
def test_quantize_harness_axis0(profile: str) -> None:
    check_quantizer(fast.quantize_mx, profile=profile, axis=0,
                    sources=("boundary", "hypothesis")).raise_if_failed()


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("anchor", [4.0, -6.0])
def test_quantize_every_element_class(profile: str, anchor: float) -> None:
    """Every float32 class the E2M1 table distinguishes below 8 (sign, exponent, 3 mantissa
    bits), each with several low-bit patterns (zero, the lowest bit, all ones, the top one, a
    random one), in blocks whose maximum ``anchor`` makes the multiplier 1 (both profiles)."""
    rng = np.random.default_rng(7)
    top = np.arange(1 << 12, dtype=np.uint32) << 20
    top = top[(top & 0x7FFFFFFF) < 0x41000000]  # |q| < 8
    lows = [0, 1, 0x7FFFF, 0x80000, 0xFFFFF, *rng.integers(1, 1 << 20, 3)]
    values = float32_from_bits((top[:, None] | np.asarray(lows, dtype=np.uint32)).ravel())
    values = np.concatenate([values, np.zeros(-values.size % 31, dtype=np.float32)])
    x = np.concatenate([np.full((values.size // 31, 1), anchor, dtype=np.float32),
                        values.reshape(-1, 31)], axis=1)
    assert_same_mx(fast.quantize_mx(x, profile=profile), mx.quantize_mx(x, profile=profile))


@pytest.mark.parametrize("profile", PROFILES)
def test_quantize_every_amax_exponent(profile: str) -> None:
    """Every float32 exponent field (subnormal to NaN) of the block maximum, with the mantissas
    where the FLOOR and EVEN rules change their mind, and the elements below it."""
    mantissas = np.asarray([0, 1, 0x1FFFFF, 0x200000, 0x3FFFFF, 0x5FFFFF, 0x600000, 0x7FFFFF],
                           dtype=np.uint32)
    amax_bits = ((np.arange(256, dtype=np.uint32) << 23)[:, None] | mantissas).ravel()
    amax = float32_from_bits(amax_bits)
    with np.errstate(invalid="ignore", over="ignore"):
        ladder = amax[:, None] * np.float32(-0.75) ** np.arange(32, dtype=np.float32)
    x = np.where(np.isnan(ladder), amax[:, None], ladder).astype(np.float32)
    for dtype in FLOAT_INPUTS:
        with np.errstate(over="ignore", invalid="ignore"):
            xd = x.astype(dtype)
        assert_same_mx(fast.quantize_mx(xd, profile=profile), mx.quantize_mx(xd, profile=profile))


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_quantize_chunks_and_threads(profile: str, threads: int) -> None:
    x = blocks_with_specials(np.random.default_rng(threads), BLOCKS).reshape(-1, 32 * 5)
    got = fast.quantize_mx(x, profile=profile, threads=threads)
    assert_same_mx(got, mx.quantize_mx(x, profile=profile))


@pytest.mark.parametrize("dtype", FLOAT_INPUTS, ids=str)
def test_quantize_other_axis_and_dtype(dtype: np.dtype[Any]) -> None:
    x = blocks_with_specials(np.random.default_rng(3), 96).reshape(4, 24, 32).transpose(2, 0, 1)
    with np.errstate(over="ignore", invalid="ignore"):
        xd = x.astype(dtype)
    for profile in PROFILES:
        got = fast.quantize_mx(xd, profile=profile, axis=0, threads=2)
        assert_same_mx(got, mx.quantize_mx(xd, profile=profile, axis=0))


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((np.ones((2, 32)),), {}),  # float64: the reference's exact path
        ((np.ones((2, 32), dtype=np.float32),), {"profile": "torchao-floor"}),
        ((np.ones((2, 64), dtype=np.float32),), {"block_size": 64}),
        (([1.0] * 32,), {}),
    ],
)
def test_quantize_outside_the_fast_path_is_the_reference(args: tuple[Any, ...],
                                                         kwargs: dict[str, Any]) -> None:
    assert_same_mx(fast.quantize_mx(*args, **kwargs), mx.quantize_mx(*args, **kwargs))


@pytest.mark.parametrize("x", [np.ones(32), np.ones(31, dtype=np.float32)])
def test_quantize_refuses_what_the_reference_refuses(x: np.ndarray[Any, Any]) -> None:
    with pytest.raises(ValueError) as want:
        mx.quantize_mx(x, profile="quark")
    with pytest.raises(ValueError, match=str(want.value)[:40]):
        fast.quantize_mx(x, profile="quark")


# -- MXFP4 dequantize ------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [-1, 0])
def test_dequantize_harness(axis: int) -> None:
    check_dequantizer(fast.dequantize_mx, profile="ocp", axis=axis, level=2).raise_if_failed()


#: Consumers on the fast path (and ``quark``, a producer read by its default consumer) and
#: some that are not (clamped; a saturating scale; ``powf_scale`` in float16; the byte-134
#: bug), each against the reference.
MX_CONSUMERS = ("ocp", "quark-hip-bf16", "compressed-tensors", "quark", "triton",
                "quark-hip-fp16", "quark-hip-qdq", "vllm-e8m0-to-f32")


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("consumer", MX_CONSUMERS)
def test_dequantize_every_byte_and_scale_over_chunks(threads: int, consumer: str) -> None:
    """Every packed byte under every scale byte (0x00 subnormal, 0xFE overflow, 0xFF NaN or
    Inf), laid out over several chunks and stripes."""
    rng = np.random.default_rng(threads)
    codes = np.tile(np.arange(256, dtype=np.uint8), BLOCKS * 16 // 256 + 1)[:BLOCKS * 16]
    rng.shuffle(codes)
    scales = np.tile(np.arange(256, dtype=np.uint8), BLOCKS // 256 + 1)[:BLOCKS]
    codes, scales = codes.reshape(-1, 16 * 5), scales.reshape(-1, 5)
    with np.errstate(over="ignore", invalid="ignore"):
        want = mx.dequantize_mx(codes, scales, profile=consumer)
        got = fast.dequantize_mx(codes, scales, profile=consumer, threads=threads)
    assert np.array_equal(bits(got), bits(want))


def test_exact_consumers_take_the_fast_path() -> None:
    assert [c for c in MX_CONSUMERS if fast_mx._exact_mx_consumer(c)] == [
        "ocp", "quark-hip-bf16", "compressed-tensors", "quark"]
    assert fast_mx._exact_mx_consumer(None) == "ocp"
    assert fast_mx._exact_mx_consumer("no-such-consumer") is None


def test_dequantize_mxarray_and_fallbacks() -> None:
    x = blocks_with_specials(np.random.default_rng(5), 64).reshape(8, 256)
    q = mx.quantize_mx(x)
    assert np.array_equal(bits(fast.dequantize_mx(q)), bits(mx.dequantize_mx(q)))
    for kwargs in ({"dtype": np.float16}, {"dtype": BF16}, {"profile": "quark-hip-bf16",
                                                             "dtype": BF16}):
        with np.errstate(over="ignore", invalid="ignore"):
            want = mx.dequantize_mx(q.codes, q.scales, **kwargs)
        assert np.array_equal(bits(fast.dequantize_mx(q.codes, q.scales, **kwargs)), bits(want))
    with pytest.raises(ValueError, match="scales have shape"):
        fast.dequantize_mx(q.codes, q.scales[:, :1])


# -- FP8 encode and decode -------------------------------------------------------------------------

FP8 = (E4M3FN, E4M3FNUZ, E5M2)


def every_16_bit_pattern(dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype)


@pytest.mark.parametrize("fmt", FP8, ids=lambda f: f.name)
def test_encode_every_16_bit_input_every_mode(fmt: Format) -> None:
    for dtype in (BF16, np.dtype(np.float16)):
        x = every_16_bit_pattern(dtype)
        for rounding in fmt.roundings:
            for overflow in fmt.overflows:
                got = fast.encode(fmt, x, rounding=rounding, overflow=overflow)
                want = fmt.encode(x, rounding=rounding, overflow=overflow)
                assert np.array_equal(got, want), (dtype, rounding, overflow)


@pytest.mark.parametrize("fmt", FP8, ids=lambda f: f.name)
def test_encode_every_float32_class(fmt: Format) -> None:
    """Every float32 class of the FP8 table (sign, exponent, mbits + 2 mantissa bits) with its
    lowest, highest and a middle low-bit pattern, in every mode."""
    low = 23 - (fmt.mbits + 2)
    top = np.arange(1 << (32 - low), dtype=np.uint32) << low
    patterns = np.asarray([0, 1, 1 << (low - 1), (1 << low) - 1], dtype=np.uint32)
    x = float32_from_bits((top[:, None] | patterns).ravel())
    for rounding in fmt.roundings:
        for overflow in fmt.overflows:
            got = fast.encode(fmt, x, rounding=rounding, overflow=overflow, threads=2)
            assert np.array_equal(got, fmt.encode(x, rounding=rounding, overflow=overflow))


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_encode_chunks_and_threads(threads: int) -> None:
    rng = np.random.default_rng(threads)
    size = 7 * (3 * chunks.CHUNK_ELEMENTS * chunks.TASK_CHUNKS // 7 + 5)
    x = float32_from_bits(rng.integers(0, 1 << 32, size, dtype=np.uint32)).reshape(-1, 7)
    assert np.array_equal(fast.encode(E4M3FN, x, threads=threads), E4M3FN.encode(x))


def test_encode_outside_the_fast_path_is_the_reference() -> None:
    x = np.asarray([0.1, 1e6, -3.5, np.nan])
    assert np.array_equal(fast.encode(E4M3FN, x), E4M3FN.encode(x))
    assert np.array_equal(fast.encode(E4M3FN, [0.3, 500.0]), E4M3FN.encode([0.3, 500.0]))
    with pytest.raises(ValueError, match="overflow"):
        fast.encode(E4M3FN, np.ones(3, dtype=np.float32), overflow="wrap")


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("fmt", [*FP8, E8M0], ids=lambda f: f.name)
@pytest.mark.parametrize("threads", [1, 3])
def test_decode_every_code_every_type(fmt: Format, threads: int) -> None:
    codes = np.tile(np.arange(256, dtype=np.uint8), 5 * (chunks.CHUNK_ELEMENTS // 256 + 1))
    codes = np.random.default_rng(threads).permutation(codes).reshape(-1, 5)
    for dtype in (np.float32, np.float64, np.float16, BF16):
        got = fast.decode(fmt, codes, dtype, threads=threads)
        assert np.array_equal(bits(got), bits(fmt.decode(codes, dtype))), dtype


def test_decode_outside_the_fast_path_is_the_reference() -> None:
    assert np.array_equal(bits(fast.decode(E2M1, np.arange(16, dtype=np.uint8))),
                          bits(E2M1.decode(np.arange(16, dtype=np.uint8))))
    assert np.array_equal(bits(fast.decode(E4M3FN, [1, 2, 255])), bits(E4M3FN.decode([1, 2, 255])))
    with pytest.raises(ValueError, match="4-bit"):
        fast.decode(E2M1, np.asarray([16], dtype=np.uint8))
    with pytest.raises(TypeError, match="decode produces"):
        fast.decode(E4M3FN, np.zeros(3, dtype=np.uint8), np.int32)


# -- INT4 ------------------------------------------------------------------------------------------

LAYOUTS = ("compressed-tensors", "quark")


def every_value_at_every_position(repeats: int = 3) -> np.ndarray[Any, Any]:
    """Rows of 8-value groups holding each of -8..7 at each of the 8 positions."""
    values = np.arange(-8, 8, dtype=np.int8)
    grid = (values[:, None] + np.arange(8)) % 16 - 8  # row v: v, v+1, ... at positions 0..7
    return np.tile(grid.astype(np.int8), (1, repeats))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_pack_unpack_every_value_at_every_position(layout: str) -> None:
    q = every_value_at_every_position()
    words = fast.pack_int4(q, layout=layout)
    assert np.array_equal(words, int4.pack_int4(q, layout=layout))
    assert np.array_equal(fast.unpack_int4(words, layout=layout), q)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_unpack_random_words_and_axes(layout: str) -> None:
    rng = np.random.default_rng(11)
    words = rng.integers(-(1 << 31), 1 << 31, size=(6, 5, 4), dtype=np.int64).astype(np.int32)
    for axis in (-1, 0, 1):
        want = int4.unpack_int4(words, layout=layout, axis=axis)
        assert np.array_equal(fast.unpack_int4(words, layout=layout, axis=axis), want)
        assert np.array_equal(fast.pack_int4(want, layout=layout, axis=axis),
                              int4.pack_int4(want, layout=layout, axis=axis))
    unsigned = words.view(np.uint32)
    assert np.array_equal(fast.unpack_int4(unsigned, layout=layout),
                          int4.unpack_int4(unsigned, layout=layout))


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("threads", [1, 3])
def test_unpack_over_chunks_and_threads(layout: str, threads: int) -> None:
    rng = np.random.default_rng(threads)
    words = rng.integers(0, 1 << 32, size=(3, 5 * chunks.CHUNK_ELEMENTS + 3), dtype=np.uint32)
    got = fast.unpack_int4(words, layout=layout, threads=threads)
    assert np.array_equal(got, int4.unpack_int4(words, layout=layout))


@pytest.mark.parametrize(
    ("q", "kwargs"),
    [
        (np.zeros((2, 12), dtype=np.int8), {}),  # padded words
        (np.zeros((2, 8), dtype=np.int16), {}),
        (np.zeros((2, 8), dtype=np.int8), {"layout": "linear"}),
        (np.full((1, 8), 8, dtype=np.int8), {}),  # out of range: both raise
    ],
)
def test_pack_outside_the_fast_path_is_the_reference(q: np.ndarray[Any, Any],
                                                     kwargs: dict[str, Any]) -> None:
    try:
        want = int4.pack_int4(q, **kwargs)
    except ValueError as err:
        with pytest.raises(ValueError, match=str(err)[:30]):
            fast.pack_int4(q, **kwargs)
        return
    assert np.array_equal(fast.pack_int4(q, **kwargs), want)
    assert np.array_equal(fast.unpack_int4(want, size=q.shape[-1], **kwargs),
                          int4.unpack_int4(want, size=q.shape[-1], **kwargs))


@pytest.mark.parametrize("profile", int4.PROFILES)
def test_int4_packing_round_trip_harness(profile: str) -> None:
    """The reference quantizer's integers, packed and unpacked by the fast paths, pass the
    INT4 harness unchanged (every bfloat16/float16 pattern in groups, boundary groups,
    Hypothesis) in both layouts."""

    def quantize_through_fast_packing(x: Any, **kwargs: Any) -> tuple[Any, Any]:
        q, scales = int4.quantize_int4(x, **kwargs)
        for layout in LAYOUTS:
            q = fast.unpack_int4(fast.pack_int4(q, layout=layout), layout=layout)
        return q, scales

    check_int4_quantizer(quantize_through_fast_packing, profile=profile,
                         max_examples=25).raise_if_failed()


def int4_dequantize_cases(scale_dtype: np.dtype[Any]) -> tuple[np.ndarray[Any, Any],
                                                               np.ndarray[Any, Any]]:
    """Every q in -8..7 against every finite scale pattern (16-bit types) or 2**16 float32
    patterns over every exponent; groups of 32 (16 values twice)."""
    if scale_dtype.itemsize == 2:
        scales = every_16_bit_pattern(scale_dtype)
    else:
        rng = np.random.default_rng(13)
        scales = float32_from_bits(rng.integers(0, 1 << 32, 1 << 16, dtype=np.uint32))
    scales = scales[np.isfinite(scales.astype(np.float32))]
    q = np.tile(np.arange(-8, 8, dtype=np.int8), (scales.size, 2))
    return q, scales.reshape(-1, 1)


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize(
    ("profile", "scale_dtype"),
    [("compressed-tensors", np.dtype(np.float32)), ("compressed-tensors", BF16),
     ("compressed-tensors", np.dtype(np.float16)), ("quark", np.dtype(np.float32))],
    ids=str,
)
def test_dequantize_int4_every_scale_pattern(profile: str, scale_dtype: np.dtype[Any]) -> None:
    q, scales = int4_dequantize_cases(scale_dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        want = int4.dequantize_int4(q, scales, profile=profile)
    for threads in (1, 2, 3):
        got = fast.dequantize_int4(q, scales, profile=profile, threads=threads)
        assert np.array_equal(bits(got), bits(want)), threads


def test_dequantize_int4_axis_result_and_fallbacks() -> None:
    rng = np.random.default_rng(17)
    x = rng.standard_normal((64, 96)).astype(np.float32)
    for profile in int4.PROFILES:
        result = int4.quantize_int4(x, axis=0, profile=profile)
        assert np.array_equal(bits(fast.dequantize_int4(result)),
                              bits(int4.dequantize_int4(result)))
    q, scales = int4.quantize_int4(x)
    for kwargs in ({"dtype": BF16}, {"group_size": None}, {"profile": "quark"}):
        s = scales if "group_size" not in kwargs else np.ones((64, 1), dtype=np.float32)
        assert np.array_equal(bits(fast.dequantize_int4(q, s, **kwargs)),
                              bits(int4.dequantize_int4(q, s, **kwargs)))
    with pytest.raises(ValueError, match="q must hold"):
        fast.dequantize_int4(q.astype(np.int16) * 3, scales)


def test_torch_tensors_take_the_fast_path() -> None:
    torch = requires("torch")
    x = blocks_with_specials(np.random.default_rng(19), 64).reshape(16, 128)
    t = torch.from_numpy(x).to(torch.bfloat16)
    for profile in PROFILES:
        assert_same_mx(fast.quantize_mx(t, profile=profile), mx.quantize_mx(t, profile=profile))
    clipped = torch.from_numpy(np.nan_to_num(x, posinf=1e6, neginf=-1e6))
    assert np.array_equal(fast.encode(E4M3FN, clipped), E4M3FN.encode(clipped))


EMPTY_CALLS = {
    "quantize_mx": ((np.zeros((3, 0), dtype=np.float32),), {}),
    "dequantize_mx": ((np.zeros((0, 16), dtype=np.uint8), np.zeros((0, 1), dtype=np.uint8)), {}),
    "encode": ((E4M3FN, np.zeros((0, 3), dtype=np.float32)), {}),
    "decode": ((E4M3FN, np.zeros((0, 3), dtype=np.uint8)), {}),
    "pack_int4": ((np.zeros((0, 8), dtype=np.int8),), {}),
    "unpack_int4": ((np.zeros((0, 1), dtype=np.int32),), {}),
    "dequantize_int4": ((np.zeros((0, 32), dtype=np.int8), np.zeros((0, 1), dtype=np.float32)),
                        {}),
    "dequantize_nvfp4": ((np.zeros((0, 16), dtype=np.uint8), np.zeros((0, 1), dtype=np.uint8),
                          np.float32(1)), {"profile": "vllm-modelopt"}),
    "dequantize_fp8_block": ((np.zeros((0, 3), dtype=np.uint8),
                              np.zeros((0, 1), dtype=np.float32)), {}),
    "dequantize_w4a8": ((np.zeros((0, 2), dtype=np.int32), np.float32(1),
                         np.zeros(0, dtype=np.float32)), {}),
}


SIGNATURES_FROM_THE_REFERENCE = {
    "dequantize_mx": mx.dequantize_mx, "unpack_int4": int4.unpack_int4,
    "dequantize_int4": int4.dequantize_int4, "dequantize_nvfp4": nvfp4.dequantize_nvfp4,
    "dequantize_fp8_block": fp8_block.dequantize_fp8_block, "encode": codec.encode,
    "pack_int4": int4.pack_int4, "quantize_int4": int4.quantize_int4,
    "quantize_fp8": fp8.quantize_fp8, "dequantize_w4a8": w4a8.dequantize_w4a8,
    "quantize_mx": mx.quantize_mx, "quantize_nvfp4": nvfp4.quantize_nvfp4,
    "decode": codec.decode, "quantize_fp8_block": fp8_block.quantize_fp8_block,
}


@pytest.mark.parametrize("name", SIGNATURES_FROM_THE_REFERENCE)
def test_signature_is_the_references_plus_threads(name: str) -> None:
    assert fast.REFERENCES[getattr(fast, name)] is SIGNATURES_FROM_THE_REFERENCE[name]
    *params, threads = inspect.signature(getattr(fast, name)).parameters.values()
    assert params == list(inspect.signature(SIGNATURES_FROM_THE_REFERENCE[name])
                          .parameters.values())
    keyword_only = any(p.kind is p.KEYWORD_ONLY for p in params)
    assert threads.name == "threads" and threads.default is None
    assert threads.kind is (threads.KEYWORD_ONLY if keyword_only else threads.POSITIONAL_OR_KEYWORD)


def test_decode_takes_threads_by_position() -> None:
    """``decode``'s reference has no keyword-only parameter: ``threads`` may come fourth, as
    it always could."""
    codes = np.arange(256, dtype=np.uint8)
    assert np.array_equal(bits(fast.decode(E4M3FN, codes, np.float32, 1)),
                          bits(codec.decode(E4M3FN, codes)))


def test_arrays_are_read_with_their_producers_consumer() -> None:
    """An MXArray or Int4Array with no profile is read by its producer's default consumer,
    and a profile given with one wins, as in the reference (every E8M0 byte: Quark's consumer
    turns 0xFF into ±Inf, not NaN)."""
    rng = np.random.default_rng(37)
    codes = rng.integers(0, 256, (256, 16), dtype=np.uint8)
    scales = np.arange(256, dtype=np.uint8)[:, None]
    for producer in ("ocp", "quark", "torchao-floor"):
        array = mx.MXArray(codes, scales, E2M1, 32, 1, producer)
        for profile in (None, "ocp"):
            want = quiet(mx.dequantize_mx, array, profile=profile)
            got = quiet(fast.dequantize_mx, array, profile=profile)
            assert got.dtype == want.dtype and np.array_equal(bits(got), bits(want))
    with pytest.raises(ValueError, match="cannot produce"):
        fast.dequantize_mx(mx.MXArray(codes, scales, E2M1, 32, 1, "quark"), dtype=np.float16)
    x = rng.standard_normal((8, 64)).astype(BF16)
    result = int4.quantize_int4(x, profile="compressed-tensors")
    for profile in (None, "quark"):
        with np.errstate(over="ignore"):
            want = int4.dequantize_int4(result, profile=profile)
        got = fast.dequantize_int4(result, profile=profile)
        assert np.array_equal(bits(got), bits(want))


def small_calls() -> dict[str, tuple[tuple[Any, ...], dict[str, Any]]]:
    """A call on the fast path of every fast path (a few blocks of each)."""
    rng = np.random.default_rng(53)
    x = rng.standard_normal((4, 128)).astype(np.float32)
    codes = rng.integers(0, 256, (4, 64), dtype=np.uint8)
    q = rng.integers(-8, 8, (4, 128), dtype=np.int8)
    words = rng.integers(0, 1 << 32, (4, 16), dtype=np.uint32).view(np.int32)
    return {
        "quantize_mx": ((x,), {}),
        "dequantize_mx": ((codes, codes[:, ::16] & 0x7F), {}),
        "quantize_nvfp4": ((x,), {}),
        "dequantize_nvfp4": ((codes, codes[:, ::8] & 0x7F, np.float32(0.5)),
                             {"profile": "vllm-modelopt", "packed": True}),
        "encode": ((E4M3FN, x), {}),
        "decode": ((E4M3FN, codes), {}),
        "pack_int4": ((q,), {}),
        "unpack_int4": ((words,), {}),
        "quantize_int4": ((x,), {"group_size": 32}),
        "dequantize_int4": ((q, np.ones((4, 4), dtype=np.float32)), {"group_size": 32}),
        "quantize_fp8": ((x, E4M3FN), {"profile": "static"}),
        "quantize_w4a8": ((x,), {}),
        "dequantize_w4a8": ((words, np.array(0.5, dtype=np.float32), np.ones(4, dtype=np.float32)),
                            {}),
        "quantize_fp8_block": ((x,), {"block": (2, 32)}),
        "dequantize_fp8_block": ((codes, np.ones((2, 2), dtype=np.float32)),
                                 {"block": (2, 32)}),
    }


def test_every_fast_path_has_a_small_call() -> None:
    assert {fast.REFERENCES[getattr(fast, name)] for name in small_calls()} == set(
        fast.REFERENCES.values())


def same_result(got: Any, want: Any) -> bool:
    """Equal bytes, field by field for a result record or tuple."""
    if dataclasses.is_dataclass(got) or isinstance(got, tuple):
        parts = (dataclasses.astuple(r) if dataclasses.is_dataclass(r) else r
                 for r in (got, want))
        return all(same_result(g, w) for g, w in zip(*parts, strict=True))
    if isinstance(got, np.ndarray):
        return got.dtype == want.dtype and np.array_equal(bits(got), bits(want))
    return bool(got == want)


@pytest.mark.parametrize("name", list(small_calls()))
def test_big_endian_calls_the_reference(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a big-endian machine (the byte views read little-endian words) no fast path runs its
    own chunks: the decorator hands every call to the reference. On this machine the same
    call runs the fast path (it fails when its chunks are refused)."""
    args, kwargs = small_calls()[name]
    function = getattr(fast, name)

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the fast path ran its chunks")

    with monkeypatch.context() as patch:
        patch_everywhere(patch, "_parallel", refuse)
        with pytest.raises(AssertionError, match="ran its chunks"):
            function(*args, **kwargs)
        patch.setattr(fallback, "_LITTLE_ENDIAN", False)
        got = function(*args, **kwargs)
    assert same_result(got, fast.REFERENCES[function](*args, **kwargs))


def test_fast_path_falls_back_with_the_callers_arguments() -> None:
    """An implementation's FALLBACK gives the reference's result for the caller's arguments,
    defaults applied and ``threads`` dropped; any other result is the call's."""
    calls: list[tuple[Any, ...]] = []

    def reference(x: int, y: int = 2, *, z: str = "z") -> tuple[int, int, str]:
        calls.append((x, y, z))
        return x, y, z

    @fallback.fast_path(reference)
    def implementation(x: int, y: int, *, z: str, threads: int | None) -> Any:
        return fallback.FALLBACK if x < 0 else ("fast", x, y, z, threads)

    assert implementation(1, threads=3) == ("fast", 1, 2, "z", 3)
    assert calls == []
    assert implementation(-1, 5, threads=3) == (-1, 5, "z")
    assert calls == [(-1, 5, "z")]
    assert list(inspect.signature(implementation).parameters) == ["x", "y", "z", "threads"]


@pytest.mark.parametrize("name", EMPTY_CALLS)
def test_empty_inputs(name: str) -> None:
    args, kwargs = EMPTY_CALLS[name]
    function = getattr(fast, name)
    got, want = function(*args, **kwargs), fast.REFERENCES[function](*args, **kwargs)
    for g, w in zip(*(r if isinstance(r, mx.MXArray) else (r,) for r in (got, want)),
                    strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype


def test_core_import_stays_without_torch() -> None:
    code = "import sys, mxformats.fast; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# -- FP8 block quantize -----------------------------------------------------------------------


def _fp8_block_input(dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """A 300 × 200 weight (ragged in 128-tiles): rows at exponents from 2^-40 to 2^40, NaN,
    ±Inf and -0.0 sprinkled, and for 16-bit types some rows of random bit patterns."""
    rng = np.random.default_rng(31)
    x = rng.standard_normal((300, 200)) * np.exp2(rng.integers(-40, 40, (300, 1)))
    pick = rng.random(x.shape)
    x = np.where(pick < 0.001, np.nan, np.where(pick < 0.002, np.inf, x))
    x = np.where(pick > 0.999, -np.inf, np.where(pick > 0.995, -0.0, x))
    with np.errstate(over="ignore", invalid="ignore"):
        a = x.astype(dtype)
        if dtype.itemsize == 2:
            a[::37] = rng.integers(0, 1 << 16, a[::37].shape, dtype=np.uint16).view(dtype)
    return a


@pytest.mark.parametrize("dtype", FLOAT_INPUTS, ids=str)
@pytest.mark.parametrize("profile", sorted(fp8_block.PRODUCERS))
def test_fp8_block_quantize_is_the_reference(profile: str, dtype: np.dtype[Any],
                                             small_chunks: None) -> None:
    x = _fp8_block_input(dtype)
    for block in ((128, 128), (7, 5)):
        got = fast.quantize_fp8_block(x, block=block, profile=profile, threads=2)
        want = fp8_block.quantize_fp8_block(x, block=block, profile=profile)
        assert got.codes.tobytes() == want.codes.tobytes(), (profile, block)
        assert got.scales.dtype == want.scales.dtype and got.scales.shape == want.scales.shape
        assert got.scales.tobytes() == want.scales.tobytes(), (profile, block)
        assert (got.block, got.profile) == (want.block, want.profile)


def test_fp8_block_quantize_refuses_what_the_reference_refuses() -> None:
    for bad in (np.zeros(8, dtype=np.float32), np.zeros((2, 2), dtype=np.float64)):
        with pytest.raises(ValueError):
            fast.quantize_fp8_block(bad)


# -- NVFP4 ------------------------------------------------------------------------------------


def test_nvfp4_codes_of_every_bfloat16_pattern_and_float32_class() -> None:
    """The lookup against the reference's E2M1 rounding on every bfloat16 bit pattern (NaN,
    ±Inf, ±0, subnormals, values past 6) and one member of every float32 class the table is
    built on, as float32 quotients."""
    patterns = np.arange(1 << 16, dtype=np.uint32) << 16
    members = np.arange(1 << (32 - chunks._E2M1_LOW_BITS), dtype=np.uint32) << chunks._E2M1_LOW_BITS
    q = np.concatenate([patterns, members]).view(np.float32)
    with np.errstate(invalid="ignore"):  # widening the signalling NaN patterns
        want = nvfp4.e2m1_codes(q)
    got = np.empty(q.shape, dtype=np.uint8)
    fast_nvfp4._e2m1_lookup(q.view(np.uint32).copy(), np.empty(q.shape, dtype=np.uint32), got)
    assert got.tobytes() == want.tobytes()


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("dtype", FLOAT_INPUTS, ids=str)
@pytest.mark.parametrize("profile", sorted(nvfp4.PRODUCERS))
def test_fast_quantize_nvfp4_is_the_reference(profile: str, dtype: np.dtype) -> None:
    rng = np.random.default_rng(7)
    scale = np.exp2(rng.integers(-30, 10, size=(64, 1)))
    x = (rng.standard_normal((64, 512)) * scale).astype(dtype)
    x[3, :16] = 0
    x[5, 16:32] = -0.0
    for data, amax in ((x, None), (x, float(np.abs(x.astype(np.float32)).max()) * 3),
                       (np.zeros((4, 32), dtype), None), (x.T.copy(), None)):
        axis = 0 if data.shape == x.T.shape else -1
        want = nvfp4.quantize_nvfp4(data, axis=axis, profile=profile, global_amax=amax)
        got = fast.quantize_nvfp4(data, axis=axis, profile=profile, global_amax=amax, threads=3)
        assert got.codes.tobytes() == want.codes.tobytes()
        assert got.scales.tobytes() == want.scales.tobytes()
        assert got.global_scale.tobytes() == want.global_scale.tobytes()
    x[7, 9] = np.nan
    with pytest.raises(ValueError, match="NaN or ±Inf"):
        fast.quantize_nvfp4(x, profile=profile)


# -- NVFP4 dequantize -------------------------------------------------------------------------

#: Global scales for every consumer: ordinary ModelOpt and compressed-tensors values, ones whose
#: products underflow to float32 subnormals or overflow, and 0, ±Inf, NaN, negative (the
#: reference defines them all; the fast path sends some blocks or calls to it).
NVFP4_GLOBALS = (1.0, 3.7 / 2688, 2688 / 3.7, 2.0**-140, 2.0**-149, 1e38, -1.5, 0.0, np.inf,
                 np.nan)


def refuse_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on the fast dequantizers may not call their reference: the test is on the
    fast path."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the fast path called the reference")

    monkeypatch.setattr(nvfp4, "dequantize_nvfp4", refuse)
    monkeypatch.setattr(fp8_block, "dequantize_fp8_block", refuse)
    monkeypatch.setattr(w4a8, "dequantize_w4a8", refuse)


@pytest.fixture
def reference_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_reference(monkeypatch)


def every_code_under_every_scale_byte(seed: int) -> tuple[np.ndarray[Any, Any],
                                                           np.ndarray[Any, Any]]:
    """:data:`BLOCKS` NVFP4 blocks, each holding the 16 E2M1 codes in a shuffled order, under
    the 256 E4M3 scale bytes in turn (subnormals, 448 = 0x7E, the NaNs 0x7F and 0xFF), 5
    blocks a row."""
    rng = np.random.default_rng(seed)
    codes = rng.permuted(np.tile(np.arange(16, dtype=np.uint8), (BLOCKS, 1)), axis=1)
    scales = np.resize(np.arange(256, dtype=np.uint8), BLOCKS)
    return codes.reshape(-1, 16 * 5), scales.reshape(-1, 5)


def quiet(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` without numpy's floating-point warnings: Inf and NaN are
    specified results, and the reference warns where its float64 casts overflow."""
    with np.errstate(all="ignore"):
        return fn(*args, **kwargs)


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("profile", sorted(nvfp4.CONSUMERS))
@pytest.mark.parametrize("threads", [1, 3])
def test_dequantize_nvfp4_every_code_under_every_scale_byte(profile: str, threads: int) -> None:
    codes, scales = every_code_under_every_scale_byte(threads)
    packed = mx.pack_fp4(codes)
    for value in NVFP4_GLOBALS:
        stored = np.float32(value)
        want = bits(quiet(nvfp4.dequantize_nvfp4, codes, scales, stored, profile=profile))
        got = quiet(fast.dequantize_nvfp4, codes, scales, stored, profile=profile, threads=threads)
        assert np.array_equal(bits(got), want), value
        got = quiet(fast.dequantize_nvfp4, packed, scales, np.asarray([stored]), profile=profile,
                                    packed=True, threads=threads)
        assert np.array_equal(bits(got), want), value


@pytest.mark.usefixtures("reference_refused")
@pytest.mark.parametrize("profile", sorted(nvfp4.CONSUMERS))
def test_dequantize_nvfp4_finite_scales_stay_on_the_fast_path(profile: str) -> None:
    """Every code under every finite scale byte with a finite global: no call to the
    reference (the previous test compares the bytes)."""
    codes, scales = every_code_under_every_scale_byte(0)
    scales = np.where((scales & 0x7F) == 0x7F, np.uint8(0x7E), scales)
    for value in (1.0, 3.7 / 2688, 2688 / 3.7, 2.0**-110, 1e38):
        quiet(fast.dequantize_nvfp4, codes, scales, np.float32(value), profile=profile)


@st.composite
def nvfp4_arguments(draw: st.DrawFn) -> tuple[Any, ...]:
    """1-D to 3-D codes (one a byte or packed) along any axis, random scale bytes, any float32
    global scale, any consumer."""
    ndim = draw(st.integers(1, 3))
    axis = draw(st.integers(-ndim, ndim - 1))
    packed = draw(st.booleans())
    shape = [draw(st.integers(1, 4)) for _ in range(ndim)]
    elements = 16 * draw(st.integers(1, 4))
    shape[axis] = elements // 2 if packed else elements
    scale_shape = list(shape)
    scale_shape[axis] = elements // 16
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    codes = rng.integers(0, 256 if packed else 16, shape, dtype=np.uint8)
    scales = rng.integers(0, 256, scale_shape, dtype=np.uint8)
    stored = np.float32(draw(st.floats(width=32)))
    profile = draw(st.sampled_from(sorted(nvfp4.CONSUMERS)))
    return codes, scales, stored, axis, packed, profile


@pytest.mark.usefixtures("small_chunks")
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(nvfp4_arguments())
def test_dequantize_nvfp4_shapes_and_axes(arguments: tuple[Any, ...]) -> None:
    codes, scales, stored, axis, packed, profile = arguments
    want = quiet(nvfp4.dequantize_nvfp4, codes, scales, stored, axis=axis, profile=profile, packed=packed)
    got = quiet(fast.dequantize_nvfp4, codes, scales, stored, axis=axis, profile=profile,
                                packed=packed, threads=2)
    assert got.shape == want.shape and np.array_equal(bits(got), bits(want))


def test_dequantize_nvfp4_arrays_and_fallbacks() -> None:
    rng = np.random.default_rng(23)
    x = (rng.standard_normal((32, 64)) * np.exp2(rng.integers(-20, 20, (32, 1)))).astype(BF16)
    for producer in sorted(nvfp4.PRODUCERS):
        result = nvfp4.quantize_nvfp4(x, axis=0, profile=producer)
        for consumer in (None, *sorted(nvfp4.CONSUMERS)):
            try:
                want = quiet(nvfp4.dequantize_nvfp4, result, profile=consumer)
            except ValueError as err:  # the other producer's global form
                with pytest.raises(ValueError, match=re.escape(str(err))):
                    quiet(fast.dequantize_nvfp4, result, profile=consumer)
                continue
            assert np.array_equal(bits(quiet(fast.dequantize_nvfp4, result, profile=consumer)),
                                  bits(want))
        q = nvfp4.quantize_nvfp4(x, profile=producer)
        consumer = nvfp4.DEFAULT_CONSUMER[producer]
        for kwargs in ({"dtype": BF16}, {"dtype": np.float16}):
            want = quiet(nvfp4.dequantize_nvfp4, q.codes, q.scales, q.global_scale, profile=consumer, **kwargs)
            got = quiet(fast.dequantize_nvfp4, q.codes, q.scales, q.global_scale, profile=consumer,
                                        **kwargs)
            assert got.dtype == want.dtype and np.array_equal(bits(got), bits(want))
    bad_calls = [
        ((q.codes, q.scales[:, :1], q.global_scale), {"profile": "vllm-modelopt"}),
        ((q.codes + 16, q.scales, q.global_scale), {"profile": "vllm-modelopt"}),
        ((q.codes, q.scales, q.global_scale), {}),
        ((q.codes, q.scales, np.ones(2, np.float32)), {"profile": "vllm-modelopt"}),
        ((q.codes, q.scales, q.global_scale), {"profile": "vllm-modelopt", "axis": 2}),
    ]
    for args, kwargs in bad_calls:
        with pytest.raises(ValueError) as err:
            nvfp4.dequantize_nvfp4(*args, **kwargs)
        with pytest.raises(ValueError, match=re.escape(str(err.value))):
            quiet(fast.dequantize_nvfp4, *args, **kwargs)


# -- FP8 block dequantize ---------------------------------------------------------------------

#: Scales at the edges of every scale dtype (each cast to it): ±0, the float32, bfloat16 and
#: float16 subnormals and smallest normals, DeepSeek's zero-tile scale, UE8M0's, 448, the
#: largest finite values, values that overflow to Inf, ±Inf.
FP8_BLOCK_EDGE_SCALES = (0.0, -0.0, 2.0**-149, 2.0**-133, 2.0**-126, 2.0**-24, 2.0**-14,
                         1e-4 / 448, 2.0**-22, 2.0**-7, 0.5, 1.0, -1.5, 448.0, 65504.0, 2.0**127,
                         3.4028234663852886e38, 1e300, np.inf, -np.inf)
SCALE_DTYPES = (np.dtype(np.float32), BF16, np.dtype(np.float16), np.dtype(np.float64))
FP8_BLOCK = (3, 100)


def every_code_under_edge_scales(dtype: np.dtype[Any], seed: int) -> tuple[np.ndarray[Any, Any],
                                                                           np.ndarray[Any, Any]]:
    """Codes ``[3 × edges + 1, 256]``, every row a shuffle of the 256 bytes, in tiles of
    :data:`FP8_BLOCK` (ragged both ways), each tile row under one edge scale."""
    rng = np.random.default_rng(seed)
    rows = FP8_BLOCK[0] * len(FP8_BLOCK_EDGE_SCALES) + 1
    codes = rng.permuted(np.tile(np.arange(256, dtype=np.uint8), (rows, 1)), axis=1)
    with np.errstate(over="ignore"):
        edges = np.asarray(FP8_BLOCK_EDGE_SCALES).astype(dtype)
    grid = fp8_block.scale_grid(codes.shape, FP8_BLOCK)
    scales = np.repeat(np.resize(edges, grid[0])[:, None], grid[1], axis=1)
    return codes, scales


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("dtype", SCALE_DTYPES, ids=str)
@pytest.mark.parametrize("profile", sorted(fp8_block.PRODUCERS))
@pytest.mark.parametrize("threads", [1, 3])
def test_dequantize_fp8_block_every_code_under_edge_scales(profile: str, dtype: np.dtype[Any],
                                                           threads: int) -> None:
    codes, scales = every_code_under_edge_scales(dtype, threads)
    want = quiet(fp8_block.dequantize_fp8_block, codes, scales, block=FP8_BLOCK, profile=profile)
    got = quiet(fast.dequantize_fp8_block, codes, scales, block=FP8_BLOCK, profile=profile,
                                    threads=threads)
    assert np.array_equal(bits(got), bits(want))


@pytest.mark.usefixtures("reference_refused")
def test_dequantize_fp8_block_edge_scales_stay_on_the_fast_path() -> None:
    for profile in sorted(fp8_block.PRODUCERS):
        for dtype in SCALE_DTYPES:
            codes, scales = every_code_under_edge_scales(dtype, 0)
            quiet(fast.dequantize_fp8_block, codes, scales, block=FP8_BLOCK, profile=profile)


@pytest.mark.parametrize("profile", ["deepseek", "deepseek-fnuz"])
def test_dequantize_fp8_block_nan_scales(profile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A NaN scale with a payload and its sign set, over every code (the NaN codes too: NaN
    times NaN) and ±Inf scales over 0 stay on the fast path and give the reference's bytes:
    every NaN the canonical quiet NaN, wherever it sits in numpy's loop."""
    codes, scales = every_code_under_edge_scales(np.dtype(np.float32), 5)
    scales[1::2] = float32_from_bits([0xFFC12345])  # NaN with a payload, sign set
    want = quiet(fp8_block.dequantize_fp8_block, codes, scales, block=FP8_BLOCK, profile=profile)
    refuse_reference(monkeypatch)
    got = quiet(fast.dequantize_fp8_block, codes, scales, block=FP8_BLOCK, profile=profile)
    assert np.array_equal(bits(got), bits(want))
    assert set(bits(got)[np.isnan(got)].tolist()) == {0x7FC00000}


@st.composite
def fp8_block_arguments(draw: st.DrawFn) -> tuple[Any, ...]:
    """Codes of any 2-D shape in tiles of any size (partial edge tiles, tiles larger than the
    matrix), scales of random bit patterns (NaN, ±Inf, subnormals) in any scale dtype."""
    shape = (draw(st.integers(1, 160)), draw(st.integers(1, 160)))
    block = (draw(st.integers(1, 200)), draw(st.integers(1, 200)))
    dtype = draw(st.sampled_from(SCALE_DTYPES))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    codes = rng.integers(0, 256, shape, dtype=np.uint8)
    grid = fp8_block.scale_grid(shape, block)
    patterns = rng.integers(0, 1 << (8 * dtype.itemsize), grid, dtype=np.uint64)
    scales = patterns.astype(f"u{dtype.itemsize}").view(dtype)
    return codes, scales, block, draw(st.sampled_from(sorted(fp8_block.PRODUCERS)))


@pytest.mark.usefixtures("small_chunks")  # several chunks a call, edges inside tile rows
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fp8_block_arguments())
def test_dequantize_fp8_block_shapes_and_tiles(arguments: tuple[Any, ...]) -> None:
    codes, scales, block, profile = arguments
    want = quiet(fp8_block.dequantize_fp8_block, codes, scales, block=block, profile=profile)
    got = quiet(fast.dequantize_fp8_block, codes, scales, block=block, profile=profile, threads=2)
    assert np.array_equal(bits(got), bits(want))


def test_dequantize_fp8_block_arrays_and_fallbacks() -> None:
    rng = np.random.default_rng(29)
    x = (rng.standard_normal((200, 300)) * np.exp2(rng.integers(-20, 20, (200, 1)))).astype(BF16)
    for profile in sorted(fp8_block.PRODUCERS):
        result = fp8_block.quantize_fp8_block(x, profile=profile)
        assert np.array_equal(bits(quiet(fast.dequantize_fp8_block, result)),
                              bits(fp8_block.dequantize_fp8_block(result)))
        for dtype in (BF16, np.float16, np.float64):
            want = quiet(fp8_block.dequantize_fp8_block, result, dtype=dtype)
            got = quiet(fast.dequantize_fp8_block, result, dtype=dtype)
            assert got.dtype == want.dtype and np.array_equal(bits(got), bits(want))
    codes, scales = result
    for args, kwargs in [((codes, scales[:, :1]), {}), ((codes, scales), {"block": (0, 128)}),
                         ((codes, scales), {"profile": "nope"}), ((codes[0], scales), {}),
                         ((result, scales), {})]:
        with pytest.raises(ValueError) as err:
            fp8_block.dequantize_fp8_block(*args, **kwargs)
        with pytest.raises(ValueError, match=re.escape(str(err.value))):
            quiet(fast.dequantize_fp8_block, *args, **kwargs)


# -- INT4 quantize (compressed-tensors, Quark), FP8 per tensor, W4A8 --------------------------

QUOTIENT_INPUTS = (np.dtype(np.float32), BF16)


def assert_same_int4(got: int4.Int4Array, want: int4.Int4Array) -> None:
    assert got.q.shape == want.q.shape and got.q.tobytes() == want.q.tobytes()
    assert got.scales.dtype == want.scales.dtype and got.scales.shape == want.scales.shape
    assert got.scales.tobytes() == want.scales.tobytes()
    assert (got.group_size, got.axis, got.profile) == (want.group_size, want.axis, want.profile)


@pytest.mark.parametrize("profile", int4.PROFILES)
def test_quantize_int4_harness(profile: str) -> None:
    check_int4_quantizer(fast.quantize_int4, profile=profile, max_examples=25,
                         seed=5).raise_if_failed()


@pytest.mark.parametrize("profile", int4.PROFILES)
def test_quantize_int4_harness_axis0(profile: str) -> None:
    check_int4_quantizer(fast.quantize_int4, profile=profile, axis=0, max_examples=10,
                         sources=("boundary", "hypothesis")).raise_if_failed()


def finite_bfloat16_values() -> np.ndarray[Any, Any]:
    """Every finite bfloat16 value (both zeros, the subnormals, the largest), as bfloat16."""
    values = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(BF16)
    return values[np.isfinite(values.astype(np.float32))]


#: Group maxima that set the scale: 7.5 (scale 1), a scale that is not a power of two, a
#: subnormal maximum (compressed-tensors' scale underflows to eps) and the largest bfloat16.
INT4_ANCHORS = (7.5, 3.0, 2.0**-130, float(ml_dtypes.finfo(BF16).max))


@pytest.mark.parametrize("profile", int4.PROFILES)
@pytest.mark.parametrize("anchor", INT4_ANCHORS)
def test_quantize_int4_every_bfloat16_value(profile: str, anchor: float) -> None:
    """Every finite bfloat16 value not above ``anchor`` in groups of 32 whose first element is
    ``anchor``: each value's quotient under one scale, its rounding to bfloat16 and to an
    integer (ties and both sides of them), against the reference."""
    values = finite_bfloat16_values()
    values = values[np.abs(values.astype(np.float32)) <= anchor]
    values = np.concatenate([values, np.zeros(-values.size % 31, dtype=BF16)]).reshape(-1, 31)
    x = np.concatenate([np.full((values.shape[0], 1), anchor, dtype=BF16), values], axis=1)
    assert_same_int4(fast.quantize_int4(x, profile=profile), int4.quantize_int4(x, profile=profile))


@pytest.mark.parametrize("profile", int4.PROFILES)
def test_quantize_int4_every_float32_quotient_class(profile: str) -> None:
    """One float32 member of every quotient class below 8 (sign, exponent, 9 mantissa bits),
    each with its low bits zero, the lowest set, all set and the top one set, in groups whose
    maximum 7.5 makes the scale 1: every entry of the table the lookup reads."""
    low = fast_codec._QUOTIENT_LOW_BITS
    top = np.arange(1 << (32 - low), dtype=np.uint32) << low
    top = top[(top & 0x7FFFFFFF) < 0x40F00000]  # |q| < 7.5
    lows = np.asarray([0, 1, (1 << low) - 1, 1 << (low - 1)], dtype=np.uint32)
    values = float32_from_bits((top[:, None] | lows).ravel())
    values = np.concatenate([values, np.zeros(-values.size % 31, dtype=np.float32)])
    x = np.concatenate([np.full((values.size // 31, 1), 7.5, dtype=np.float32),
                        values.reshape(-1, 31)], axis=1)
    assert_same_int4(fast.quantize_int4(x, profile=profile), int4.quantize_int4(x, profile=profile))


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("dtype", QUOTIENT_INPUTS, ids=str)
@pytest.mark.parametrize("threads", [1, 3])
def test_quantize_int4_chunks_threads_axes(dtype: np.dtype[Any], threads: int) -> None:
    """Groups over dozens of chunks and tasks, rows at exponents across the range and all-zero
    groups, per group of 32 and 128 and per channel, along both axes; a NaN or ±Inf in the
    last group or on a chunk edge is refused as the reference refuses it."""
    rng = np.random.default_rng(threads)
    x = rng.standard_normal((BLOCKS // 5, 160)) * np.exp2(rng.integers(-60, 60, (BLOCKS // 5, 1)))
    x = x.astype(dtype)
    x[5], x[9, 32:64] = 0, -0.0
    for profile in int4.PROFILES:
        for group_size, axis in ((32, -1), (None, -1), (None, 0), (32, 0)):
            data = x if axis == -1 else x[:160]
            got = fast.quantize_int4(data, group_size=group_size, axis=axis, profile=profile,
                                     threads=threads)
            assert_same_int4(got, int4.quantize_int4(data, group_size=group_size, axis=axis,
                                                     profile=profile))
    for where, value in (((-1, -1), np.nan), ((chunks.CHUNK_BLOCKS, 0), np.inf)):
        bad = x.copy()
        bad[where] = value
        with pytest.raises(ValueError, match="NaN"):
            fast.quantize_int4(bad, threads=threads)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((np.ones((2, 32), dtype=np.float16),), {}),  # float16: the reference
        ((np.ones((2, 32)),), {}),  # float64
        ((np.ones((2, 32), dtype=np.float32),), {"group_size": True}),
        (([[1.0] * 32],), {}),
        ((np.ones((2, 48), dtype=np.float32),), {}),  # not a multiple of the group: raises
        ((np.ones((2, 32), dtype=np.float32),), {"profile": "linear"}),  # unknown: raises
    ],
)
def test_quantize_int4_outside_the_fast_path_is_the_reference(args: tuple[Any, ...],
                                                              kwargs: dict[str, Any]) -> None:
    try:
        want = int4.quantize_int4(*args, **kwargs)
    except (TypeError, ValueError) as err:
        with pytest.raises(type(err), match=re.escape(str(err)[:40])):
            fast.quantize_int4(*args, **kwargs)
        return
    assert_same_int4(fast.quantize_int4(*args, **kwargs), want)


@pytest.mark.parametrize("fmt", [E4M3FN, E4M3FNUZ, E5M2], ids=lambda f: f.name)
@pytest.mark.parametrize("dtype", QUOTIENT_INPUTS, ids=str)
def test_quantize_fp8_static_every_value(fmt: Format, dtype: np.dtype[Any]) -> None:
    """Quark's per-tensor stage on every finite bfloat16 value (the tensor's amax the largest
    one), on a tensor of the values below 1 (another scale), and on float32 members of every
    quotient class (amax 448: the scale 1 for E4M3FN) with their low bits set and clear."""
    every = finite_bfloat16_values().astype(dtype)
    below_one = every[np.abs(every.astype(np.float32)) < 1]
    low = fast_codec._QUOTIENT_LOW_BITS
    classes = float32_from_bits(
        ((np.arange(1 << (32 - low), dtype=np.uint32) << low)[:, None]
         | np.asarray([0, 1, (1 << low) - 1], dtype=np.uint32)).ravel())
    classes = classes[np.abs(classes) <= 448].astype(dtype)
    for x in (every, below_one.reshape(-1, 2), classes, np.zeros(7, dtype), every[:1]):
        got = fast.quantize_fp8(x, fmt, profile="static", threads=2)
        want = fp8.quantize_fp8(x, fmt, profile="static")
        assert got[0].shape == want[0].shape and got[0].tobytes() == want[0].tobytes()
        assert got[1].shape == want[1].shape and got[1].tobytes() == want[1].tobytes()


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("threads", [1, 3])
def test_quantize_fp8_static_chunks_and_threads(threads: int) -> None:
    """A tensor over dozens of chunks whose largest magnitude sits in its last element (or on a
    chunk edge): every chunk's maximum counts; a NaN or ±Inf anywhere is refused."""
    rng = np.random.default_rng(threads)
    x = rng.standard_normal((97, 333)).astype(BF16)
    for where in (-1, chunks.CHUNK_ELEMENTS):
        y = x.copy().reshape(-1)
        y[where] = -60
        y = y.reshape(x.shape)
        got = fast.quantize_fp8(y, E4M3FN, threads=threads)
        want = fp8.quantize_fp8(y, E4M3FN)
        assert got[0].tobytes() == want[0].tobytes() and got[1].tobytes() == want[1].tobytes()
    x[-1, -1] = np.inf
    with pytest.raises(ValueError, match="NaN"):
        fast.quantize_fp8(x, E4M3FN, threads=threads)


def test_quantize_fp8_outside_the_fast_path_is_the_reference() -> None:
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    for args, kwargs in (((x, E4M3FN), {"profile": "dynamic-fn"}),
                         ((x.astype(np.float16), E4M3FN), {}),
                         ((x, E4M3FNUZ), {"profile": "vllm-fnuz"})):
        got, want = fast.quantize_fp8(*args, **kwargs), fp8.quantize_fp8(*args, **kwargs)
        assert got[0].tobytes() == want[0].tobytes() and got[1].tobytes() == want[1].tobytes()
    for bad in (np.array([1.0, np.inf], dtype=np.float32), np.zeros(0, dtype=np.float32)):
        try:
            want = fp8.quantize_fp8(bad, E4M3FN)
        except ValueError as err:
            with pytest.raises(ValueError, match=re.escape(str(err)[:30])):
                fast.quantize_fp8(bad, E4M3FN)
            continue
        assert fast.quantize_fp8(bad, E4M3FN)[0].tobytes() == want[0].tobytes()
    with pytest.raises(ValueError, match="takes"):
        fast.quantize_fp8(x, E4M3FN, profile="vllm-fnuz")


@pytest.mark.parametrize("dtype", QUOTIENT_INPUTS, ids=str)
def test_quantize_w4a8_is_the_reference(dtype: np.dtype[Any]) -> None:
    """Every finite bfloat16 value in one weight (rows of 256: the FP8 stage's one scale, each
    row's INT4 scale), a weight of rows at different exponents with an all-zero row, and one
    whose length is not a multiple of 8 (padded words)."""
    rng = np.random.default_rng(41)
    every = finite_bfloat16_values()
    every = np.concatenate([every, np.zeros(-every.size % 256, dtype=BF16)]).reshape(-1, 256)
    rows = rng.standard_normal((40, 96)) * np.exp2(rng.integers(-12, 12, (40, 1)))
    rows[7] = 0
    for w in (every.astype(dtype), rows.astype(dtype), rows[:, :13].astype(dtype)):
        got, want = fast.quantize_w4a8(w), w4a8.quantize_w4a8(w)
        for g, e in zip(got, want, strict=True):
            assert g.dtype == e.dtype and g.shape == e.shape and g.tobytes() == e.tobytes()
    with pytest.raises(ValueError, match="2-D"):
        fast.quantize_w4a8(rows[0])


def w4a8_every_code_under_edge_scales() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Words holding each INT4 code at every nibble position (two words a row: all 16 codes),
    one row per ``weight_scale_2``: every float32 exponent (subnormals included) with the
    smallest, largest and a middle mantissa, both signs, and ±0."""
    exponents = np.arange(0, 255, dtype=np.uint32) << 23
    mantissas = np.array([0, 1, 0x400001, 0x7FFFFF], dtype=np.uint32)
    patterns = (exponents[:, None] | mantissas).reshape(-1)
    s2 = float32_from_bits(np.concatenate([patterns, patterns | 0x80000000]))
    codes = np.tile(np.arange(-8, 8, dtype=np.int8), (s2.size, 1))
    return int4.pack_int4(codes, layout=w4a8.CONSUMERS["vllm"].layout, axis=1), s2


#: Scalar weight scales: exact, inexact, tiny (products underflow) and large (folded products
#: or their multiples by the codes overflow to ±Inf).
W4A8_WEIGHT_SCALES = (1.0, 3.0, 0.1, 2.0**-126, 2.0**-149, 2.0**100, -0.75)


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("threads", [1, 3])
def test_dequantize_w4a8_every_code_under_edge_scales(threads: int,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Bit for bit the reference's, on the fast path wherever the folded scales are finite."""
    words, s2 = w4a8_every_code_under_edge_scales()
    for value in W4A8_WEIGHT_SCALES:
        s1 = np.asarray([value], dtype=np.float32)
        folded = quiet(np.multiply, s2, s1[0])
        finite = np.isfinite(folded)
        want = quiet(w4a8.dequantize_w4a8, words[finite], s1, s2[finite])
        with monkeypatch.context() as patched:
            refuse_reference(patched)
            got = quiet(fast.dequantize_w4a8, words[finite], s1, s2[finite], threads=threads)
        assert got.dtype == want.dtype and np.array_equal(bits(got), bits(want)), value
        # a call with an infinite folded scale is the reference's, whole
        want = quiet(w4a8.dequantize_w4a8, words, s1, s2)
        got = quiet(fast.dequantize_w4a8, words, s1, s2, threads=threads)
        assert np.array_equal(bits(got), bits(want)), value


def test_dequantize_w4a8_results_and_fallbacks() -> None:
    rng = np.random.default_rng(43)
    w = (rng.standard_normal((40, 96)) * np.exp2(rng.integers(-12, 12, (40, 1)))).astype(BF16)
    result = w4a8.quantize_w4a8(w)
    want = w4a8.dequantize_w4a8(result)
    assert np.array_equal(bits(fast.dequantize_w4a8(result)), bits(want))
    words, s1, s2 = result
    assert np.array_equal(bits(fast.dequantize_w4a8(words, s1, s2, threads=2)), bits(want))
    for dtype in (BF16, np.float16, np.float64):  # other outputs: the reference's rounding
        assert np.array_equal(bits(fast.dequantize_w4a8(result, dtype=dtype)),
                              bits(w4a8.dequantize_w4a8(result, dtype=dtype)))
    for bad in (np.float32(np.nan), np.float32(np.inf)):
        s2_bad = s2.copy()
        s2_bad[3] = bad
        assert np.array_equal(bits(quiet(fast.dequantize_w4a8, words, s1, s2_bad)),
                              bits(quiet(w4a8.dequantize_w4a8, words, s1, s2_bad)))
    for args, error in (((words, s1, s2[:-1]), ValueError), ((words, None, s2), TypeError),
                        ((words, np.ones(2, np.float32), s2), ValueError)):
        for function in (fast.dequantize_w4a8, w4a8.dequantize_w4a8):
            with pytest.raises(error):
                function(*args)


@pytest.mark.usefixtures("small_chunks")
@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 70), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_dequantize_w4a8_random_words_and_scales(rows: int, words: int, seed: int) -> None:
    """Random words and random finite float32 scale bits, over several row chunks."""
    rng = np.random.default_rng(seed)
    packed = rng.integers(-2**31, 2**31, (rows, words), dtype=np.int64).astype(np.int32)
    s2 = float32_from_bits(rng.integers(0, 0xFF000000, rows, dtype=np.uint32))
    s2 = np.where(np.isfinite(s2), s2, np.float32(1))
    s1 = np.asarray([rng.choice(W4A8_WEIGHT_SCALES)], dtype=np.float32)
    want = quiet(w4a8.dequantize_w4a8, packed, s1, s2)
    got = quiet(fast.dequantize_w4a8, packed, s1, s2, threads=3)
    assert np.array_equal(bits(got), bits(want))


# -- MXFP4 quantize: Quark's short last block ------------------------------------------------


@pytest.mark.parametrize("length", [2, 30])
def test_quantize_quark_short_last_block_harness(length: int) -> None:
    """The harness's blocks cut to their first ``length`` elements: every block is then a
    short last block (Quark pads it with zeros), compared with the reference cut alike."""

    def cut(quantize: Any) -> Any:
        def call(x: Any, *args: Any, **kwargs: Any) -> Any:
            return quantize(np.ascontiguousarray(x[:, :length]), *args, **kwargs)
        return call

    check_quantizer(cut(fast.quantize_mx), reference=cut(mx.quantize_mx), profile="quark",
                    dtypes=("float32", "bfloat16", "float16"),
                    sources=("sweep", "boundary", "hypothesis"),
                    max_examples=25).raise_if_failed()


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("short", [2, 30])
@pytest.mark.parametrize("threads", [1, 2])
def test_quantize_quark_short_last_block_rows(short: int, threads: int) -> None:
    """Rows of 5 full blocks and a short one over many chunks, NaN/Inf blocks included (the
    short block holding one too), along both axes."""
    x = blocks_with_specials(np.random.default_rng(short), BLOCKS).reshape(-1, 32 * 5)
    x = np.concatenate([x, x[:, :short]], axis=1)
    x[-1, -1] = np.nan
    got = fast.quantize_mx(x, profile="quark", threads=threads)
    assert_same_mx(got, mx.quantize_mx(x, profile="quark"))
    assert_same_mx(fast.quantize_mx(x.T, profile="quark", axis=0, threads=threads),
                   mx.quantize_mx(x.T, profile="quark", axis=0))


@pytest.mark.parametrize("length", [1, 31, 33, 63])
def test_quantize_quark_odd_short_block_refused_as_the_reference(length: int) -> None:
    """A short last block of 1 or 31 elements (an odd length) cannot pack two codes a byte:
    both refuse it; ``ocp`` defines no short block at all."""
    x = np.ones((2, length), dtype=np.float32)
    with pytest.raises(ValueError) as want:
        mx.quantize_mx(x, profile="quark")
    with pytest.raises(ValueError, match=re.escape(str(want.value)[:40])):
        fast.quantize_mx(x, profile="quark")
    with pytest.raises(ValueError, match="short last block"):
        fast.quantize_mx(np.ones((2, 34), dtype=np.float32), profile="ocp")


# -- threads and the descriptors ----------------------------------------------------------------


def test_workers_honours_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(fast.THREADS_VARIABLE, raising=False)
    cores = fast.workers()
    assert cores >= 1
    monkeypatch.setenv(fast.THREADS_VARIABLE, "1")
    assert fast.workers() == 1
    monkeypatch.setenv(fast.THREADS_VARIABLE, str(cores + 3))
    assert fast.workers() == cores + 3
    for bad in ("0", "-2", "two", ""):
        monkeypatch.setenv(fast.THREADS_VARIABLE, bad)
        with pytest.raises(ValueError, match=fast.THREADS_VARIABLE):
            fast.workers()


def test_one_thread_when_the_environment_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pinned to 1, a call with no ``threads`` starts no thread pool."""
    monkeypatch.setenv(fast.THREADS_VARIABLE, "1")

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a thread pool was started")

    monkeypatch.setattr(chunks, "ThreadPoolExecutor", refuse)
    patch_everywhere(monkeypatch, "CHUNK_ELEMENTS", 64)
    x = np.random.default_rng(2).standard_normal((64, 256)).astype(BF16)
    fast.pack_int4(fast.quantize_int4(x).q)
    fast.quantize_w4a8(x)


def test_descriptors_produce_with_the_fast_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every descriptor with a producer profile quantizes with a fast path, and its produce
    gives the bytes it gives with the reference swapped in (bfloat16 weights, a short last
    MX block)."""
    from mxformats.validate.descriptors import DESCRIPTORS
    from mxformats.validate.descriptors.base import MixedDescriptor

    references = fast.REFERENCES
    rng = np.random.default_rng(43)
    weight = (rng.standard_normal((96, 418)) * 0.02).astype(BF16)
    checked = []
    for descriptor in DESCRIPTORS:
        if descriptor.profile is None or isinstance(descriptor, MixedDescriptor):
            continue  # a mixed format's modules are produced by its member descriptors
        assert descriptor.quantizer in references, descriptor.format
        for w in (weight[:, :416], weight):
            with monkeypatch.context() as patch:
                for name in ("quantizer", "packer"):
                    function = getattr(type(descriptor), name, None)
                    if function is not None:
                        patch.setattr(type(descriptor), name, staticmethod(references[function]))
                try:
                    want = descriptor.produce(w)
                except ValueError as err:  # the width is not the format's: both refuse it
                    with pytest.raises(ValueError, match=re.escape(str(err)[:40])):
                        descriptor.produce(w)
                    continue
            got = descriptor.produce(w)
            assert got.keys() == want.keys()
            for key, array in got.items():
                assert array.dtype == want[key].dtype and array.shape == want[key].shape, key
                assert array.tobytes() == want[key].tobytes(), (descriptor.format, key)
            checked.append((descriptor.format.value, w.shape[1]))
    assert len(checked) >= 8, checked
    assert ("quark-mxfp4", 418) in checked, checked
