"""The MX API: packing, shapes, axes, strides, dtypes, errors, and the profile registry."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from conftest import requires

import mxformats
from mxformats import E2M1, E2M3, E4M3FN, E5M2
from mxformats.schemes.mx import MXArray, dequantize_mx, pack_fp4, quantize_mx, unpack_fp4
from mxformats.schemes.mx.consumers import CONSUMERS
from mxformats.schemes.mx.producers import PRODUCERS

BF16 = np.dtype(ml_dtypes.bfloat16)
RNG = np.random.default_rng(20261130)


F32 = np.dtype(np.float32)


def _data(shape: tuple[int, ...], dtype: np.dtype = F32) -> np.ndarray:
    x = RNG.standard_normal(shape) * np.exp2(RNG.integers(-8, 8, shape))
    return x.astype(np.float32).astype(dtype)


def _input_dtype(profile: str) -> np.dtype:
    dtypes = PRODUCERS[profile].dtypes
    return np.dtype(np.float32) if np.dtype(np.float32) in dtypes else dtypes[0]


# -- packing ----------------------------------------------------------------------------------


def test_unpack_pack_every_byte() -> None:
    every = np.arange(256, dtype=np.uint8)
    codes = unpack_fp4(every)
    assert codes.tolist() == [c for b in range(256) for c in (b & 0xF, b >> 4)]
    assert np.array_equal(pack_fp4(codes), every)


def test_pack_every_pair_low_nibble_first() -> None:
    low, high = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
    pairs = np.stack([low.ravel(), high.ravel()], axis=-1).astype(np.uint8)  # (256, 2)
    packed = pack_fp4(pairs)
    assert packed.shape == (256, 1)
    assert packed[:, 0].tolist() == (low.ravel() | high.ravel() << 4).tolist()
    assert np.array_equal(unpack_fp4(packed), pairs)


def test_pack_along_any_axis() -> None:
    codes = RNG.integers(0, 16, (4, 6, 8), dtype=np.uint8)
    for axis in range(3):
        packed = pack_fp4(codes, axis=axis)
        expected_shape = list(codes.shape)
        expected_shape[axis] //= 2
        assert packed.shape == tuple(expected_shape)
        moved = np.moveaxis(codes, axis, -1)
        assert np.array_equal(np.moveaxis(packed, axis, -1), moved[..., ::2] | moved[..., 1::2] << 4)
        assert np.array_equal(unpack_fp4(packed, axis=axis), codes)


@pytest.mark.parametrize(
    ("bad", "error"),
    [([16, 0], ValueError), ([1, 2, 3], ValueError), ([-1, 2], ValueError), ([0.5, 1.0], TypeError)],
)
def test_pack_refuses(bad: list, error: type) -> None:
    with pytest.raises(error):
        pack_fp4(np.array(bad))


# -- shapes, axes, strides ------------------------------------------------------------------------


@pytest.mark.parametrize("profile", sorted(PRODUCERS))
def test_shapes_axes_and_strides(profile: str) -> None:
    dtype = _input_dtype(profile)
    x = _data((3, 64, 5), dtype)
    along1 = quantize_mx(x, axis=1, profile=profile)
    assert along1.codes.shape == (3, 32, 5) and along1.scales.shape == (3, 2, 5)
    assert along1.codes.dtype == np.uint8 and along1.scales.dtype == np.uint8
    assert (along1.elem, along1.block_size, along1.axis, along1.profile) == (E2M1, 32, 1, profile)
    codes, scales = along1  # unpacks as a pair
    moved = quantize_mx(np.ascontiguousarray(np.moveaxis(x, 1, -1)), profile=profile)
    assert np.array_equal(np.moveaxis(codes, 1, -1), moved.codes)
    assert np.array_equal(np.moveaxis(scales, 1, -1), moved.scales)
    negative = quantize_mx(x, axis=-2, profile=profile)
    assert np.array_equal(negative.codes, codes) and negative.axis == 1
    strided = _data((6, 128), dtype)[::2, ::2]  # non-contiguous along both axes
    assert not strided.flags.c_contiguous
    a, b = quantize_mx(strided, profile=profile), quantize_mx(strided.copy(), profile=profile)
    assert np.array_equal(a.codes, b.codes) and np.array_equal(a.scales, b.scales)


@pytest.mark.parametrize("elem", [E4M3FN, E5M2, E2M3])
def test_wide_elements_one_code_per_byte(elem: object) -> None:
    x = _data((2, 64))
    for profile in ("ocp", "torchao-floor"):
        codes, scales = quantize_mx(x, elem, profile=profile)
        assert codes.shape == (2, 64) and scales.shape == (2, 2)
        back = dequantize_mx(codes, scales, elem, dtype=np.float64)
        assert back.shape == (2, 64) and np.all(np.isfinite(back))


def test_short_last_block_where_the_producer_pads() -> None:
    x = _data((2, 48))
    for profile in ("triton-round-up", "quark", "quark-triton", "microxcaling"):
        codes, scales = quantize_mx(x, profile=profile)
        assert codes.shape == (2, 24) and scales.shape == (2, 2)
        tail = quantize_mx(np.ascontiguousarray(x[:, 32:]), profile=profile)
        padded = quantize_mx(np.pad(x[:, 32:], [(0, 0), (0, 16)]), profile=profile)
        assert np.array_equal(scales[:, 1:], tail.scales)
        assert np.array_equal(tail.scales, padded.scales)
        assert np.array_equal(tail.codes, padded.codes[:, :8])
        assert dequantize_mx(codes, scales).shape == (2, 48)


@pytest.mark.parametrize("profile", ["ocp", "torchao-floor", "compressed-tensors"])
def test_short_last_block_refused_where_no_producer_defines_it(profile: str) -> None:
    with pytest.raises(ValueError, match=f"{profile}.*not a multiple of block_size 32"):
        quantize_mx(_data((2, 48)), profile=profile)


def test_block_sizes() -> None:
    x = _data((2, 64))
    assert quantize_mx(x, block_size=16, profile="torchao-floor").scales.shape == (2, 4)
    assert quantize_mx(x, block_size=64, profile="ocp").scales.shape == (2, 1)
    with pytest.raises(ValueError, match="blocks of 32, not 16"):
        quantize_mx(x, block_size=16, profile="quark")
    with pytest.raises(ValueError, match="block_size must be positive"):
        quantize_mx(x, block_size=0)


def test_empty_and_scalar_inputs() -> None:
    codes, scales = quantize_mx(np.zeros((3, 0), dtype=np.float32))
    assert codes.shape == (3, 0) and scales.shape == (3, 0)
    with pytest.raises(ValueError, match="at least one dimension"):
        quantize_mx(np.float32(1.0))


def test_odd_length_e2m1_refused() -> None:
    with pytest.raises(ValueError, match="even length"):
        quantize_mx(_data((31,)), block_size=31, profile="ocp")


# -- dtypes -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("profile", "dtype", "reason"),
    [
        ("vllm", np.float32, "static_assert"),
        ("quark-hip-qdq", np.float32, "__half"),
        ("torchao-floor", np.float16, "bfloat16 or float32"),
        ("torchao-floor", np.float64, "bfloat16 or float32"),
        ("microxcaling", BF16, "float32 input only"),
        ("compressed-tensors", np.float16, "eps"),
        ("quark", np.float64, "float32, bfloat16 or float16"),
    ],
)
def test_dtype_refusals_say_why(profile: str, dtype: object, reason: str) -> None:
    with pytest.raises(ValueError, match=f"{profile}.*{reason}"):
        quantize_mx(np.ones(32, dtype=dtype), profile=profile)


def test_integer_input_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="float16, bfloat16, float32 or float64"):
        quantize_mx(np.ones(32, dtype=np.int32))


def test_python_floats_are_float64() -> None:
    codes, scales = quantize_mx([6.0, 5.0] + [0.0] * 30)
    assert unpack_fp4(codes)[:2].tolist() == [7, 6] and scales.tolist() == [0x7F]
    with pytest.raises(ValueError, match="float64"):
        quantize_mx([1.0] * 32, profile="torchao-floor")


def test_torch_tensors_keep_their_dtype() -> None:
    torch = requires("torch")
    x = _data((4, 64))
    for profile in ("torchao-even", "compressed-tensors", "vllm"):
        as_bf16 = x.astype(BF16)
        tensor = torch.from_numpy(as_bf16.view(np.uint16)).view(torch.bfloat16)
        a, b = quantize_mx(tensor, profile=profile), quantize_mx(as_bf16, profile=profile)
        assert np.array_equal(a.codes, b.codes) and np.array_equal(a.scales, b.scales)
    t32 = torch.from_numpy(x)[:, ::2]  # a strided float32 tensor
    a, b = quantize_mx(t32), quantize_mx(x[:, ::2])
    assert np.array_equal(a.codes, b.codes) and np.array_equal(a.scales, b.scales)


def test_arithmetic_dtype_changes_results_where_the_producer_says() -> None:
    # compressed-tensors divides in the input's type: -2^-140 / 2^120 underflows to -0 in
    # bfloat16 (written +0, torch.sign(-0) = 0) but not in float32 (a negative value, -0: 0x8).
    x = np.zeros(32)
    x[:2] = [2.0**122, -(2.0**-15)]
    in_bf16 = quantize_mx(x.astype(np.float32).astype(BF16), profile="compressed-tensors")
    in_f32 = quantize_mx(x.astype(np.float32), profile="compressed-tensors")
    assert in_bf16.scales.tolist() == in_f32.scales.tolist() == [0xF7]
    assert unpack_fp4(in_bf16.codes)[1] == 0x0 and unpack_fp4(in_f32.codes)[1] == 0x8


# -- dequantize -------------------------------------------------------------------------------


def test_dequantize_takes_an_mxarray() -> None:
    x = _data((2, 3, 64))
    mx = quantize_mx(x, axis=2)
    direct = dequantize_mx(mx.codes, mx.scales, axis=2)
    assert np.array_equal(dequantize_mx(mx), direct)
    along0 = quantize_mx(np.ascontiguousarray(np.moveaxis(x, 2, 0)), axis=0)
    assert np.array_equal(np.moveaxis(dequantize_mx(along0), 0, 2), direct)
    with pytest.raises(ValueError, match="not both"):
        dequantize_mx(mx, mx.scales)
    with pytest.raises(ValueError, match="needs the scales"):
        dequantize_mx(mx.codes)


def test_dequantize_checks_shapes_and_codes() -> None:
    codes, scales = quantize_mx(_data((2, 64)))
    with pytest.raises(ValueError, match="scales have shape"):
        dequantize_mx(codes, scales[:, :1])
    with pytest.raises(ValueError, match="6-bit"):
        dequantize_mx(np.full((1, 32), 64, dtype=np.uint8), np.zeros((1, 1), np.uint8), E2M3)
    with pytest.raises(TypeError, match="integers"):
        dequantize_mx(codes.astype(np.float32), scales)


@pytest.mark.parametrize("profile", sorted(CONSUMERS))
def test_consumer_output_types(profile: str) -> None:
    consumer = CONSUMERS[profile]
    codes, scales = quantize_mx(_data((2, 64)))
    for dtype in consumer.dtypes:
        assert dequantize_mx(codes, scales, profile=profile, dtype=dtype).dtype == dtype
    own = consumer.dtypes[0]
    widened = dequantize_mx(codes, scales, profile=profile, dtype=np.float64)
    narrow = dequantize_mx(codes, scales, profile=profile, dtype=own).astype(np.float64)
    assert np.array_equal(widened, narrow, equal_nan=True)
    narrower = [d for d in (np.dtype(np.float16), BF16) if d not in consumer.dtypes]
    for dtype in narrower if profile != "ocp" else []:
        with pytest.raises(ValueError, match="cannot produce"):
            dequantize_mx(codes, scales, profile=profile, dtype=dtype)


# -- errors and the registry ---------------------------------------------------------------------


def test_unknown_profiles_and_elements() -> None:
    x = _data((1, 32))
    with pytest.raises(ValueError, match=r"unknown mx producer profile 'nope'; valid: .*ocp"):
        quantize_mx(x, profile="nope")
    with pytest.raises(ValueError, match=r"unknown mx profile 'nope'; consumers: .*triton"):
        dequantize_mx(*quantize_mx(x), profile="nope")
    with pytest.raises(ValueError, match="'quark' does not write e4m3fn elements"):
        quantize_mx(x, E4M3FN, profile="quark")
    with pytest.raises(ValueError, match="does not write e4m3fnuz"):
        quantize_mx(x, "e4m3fnuz")
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        quantize_mx(x, axis=2)


def test_every_profile_is_registered() -> None:
    listed = {(p.kind, p.name): p for p in mxformats.profiles() if p.scheme == "mx"}
    for name, producer in PRODUCERS.items():
        info = listed[(producer.kind, name)]
        assert (info.library, info.version, info.function) == (
            producer.library, producer.version, producer.function)
    for name in CONSUMERS:
        assert ("consumer", name) in listed
    assert ("activation", "quark-hip-qdq") in listed
    assert isinstance(quantize_mx(_data((1, 32))), MXArray)


@pytest.mark.parametrize("profile", sorted(p for p, v in PRODUCERS.items() if v.kind == "producer"))
def test_no_blocks_gives_empty_codes_and_scales(profile: str) -> None:
    dtype = np.float32 if np.dtype(np.float32) in PRODUCERS[profile].dtypes else ml_dtypes.bfloat16
    codes, scales = quantize_mx(np.zeros((0, 32), dtype=dtype), profile=profile)
    assert codes.shape == (0, 16) and codes.dtype == np.uint8
    assert scales.shape == (0, 1) and scales.dtype == np.uint8



@pytest.mark.parametrize("width", [2, 32, 64])
def test_nan_ignoring_block_max_skips_nan_beside_inf(width: int) -> None:
    from mxformats.schemes.mx import block_max

    # NaNs with payloads, as float16 signalling NaNs widen (0x7C01...): np.fmax.reduce returns
    # NaN for the first row of width 32.
    payload_nans = np.arange(0x7C01, 0x7C01 + width - 1, dtype=np.uint16).view(np.float16)
    with np.errstate(invalid="ignore"):
        nans = payload_nans.astype(np.float64)
    blocks = np.array([[np.inf, *nans], [np.nan, *nans], [2.0, *nans]])
    got = block_max(blocks, nan_ignoring=True)
    assert got[0] == np.inf and np.isnan(got[1]) and got[2] == 2.0
    assert np.isnan(block_max(blocks, nan_ignoring=False)).all()
