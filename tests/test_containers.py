"""torch and ml_dtypes as first-class containers, native dtypes, and profiles that round-trip
(issue 17, items 1 and 2): torch in, torch out with the numpy path's bytes; dtype= in every
spelling; native float8/float4/e8m0 codes decoded as they are; the producer's default consumer;
mxformats.read_tensor on the real producers' fixtures."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from conftest import requires

import mxformats
from mxformats import (
    E2M1,
    E4M3FN,
    E8M0,
    FORMATS,
    dequantize_int4,
    dequantize_mx,
    get_format,
    pack_fp4,
    profiles,
    quantize_int4,
    quantize_mx,
    read_tensor,
)
from mxformats.codec import tensor_to_numpy
from mxformats.containers import native_codes, numpy_dtype
from mxformats.pairing import DEFAULT_CONSUMERS, consumer_for, default_consumer
from mxformats.tensorfile import read_tensor as read_raw_tensor

torch = requires("torch")

BF16 = np.dtype(ml_dtypes.bfloat16)
PRODUCERS = Path(__file__).resolve().parent / "data" / "producers"
MX_PRODUCERS = [p.name for p in profiles() if p.scheme == "mx" and p.kind == "producer"]


def _bits(a: Any) -> bytes:
    """Raw bytes of an array or tensor (bit-exact comparison, NaN by bits)."""
    return np.ascontiguousarray(tensor_to_numpy(a) if isinstance(a, torch.Tensor) else a) \
        .tobytes()


def _weights(dtype: Any) -> tuple[Any, np.ndarray]:
    """A torch tensor of ``dtype`` and its numpy twin (same bytes)."""
    x = torch.from_numpy(np.random.default_rng(17).standard_normal((4, 64)).astype(np.float32))
    t = x.to(dtype)
    return t, tensor_to_numpy(t)


# -- item 1: torch in, torch out -----------------------------------------------------------------


@pytest.mark.parametrize("profile", MX_PRODUCERS)
def test_mx_torch_in_torch_out_equals_numpy(profile: str) -> None:
    t, n = _weights(torch.bfloat16)
    try:
        want = quantize_mx(n, profile=profile)
    except ValueError:  # a float32-only producer (microxcaling): its own dtype
        t, n = _weights(torch.float32)
        want = quantize_mx(n, profile=profile)
    got = quantize_mx(t, profile=profile)
    assert isinstance(got.codes, torch.Tensor) and isinstance(got.scales, torch.Tensor)
    assert got.codes.device == t.device and got.profile == profile
    assert _bits(got.codes) == _bits(want.codes) and _bits(got.scales) == _bits(want.scales)
    decoded = dequantize_mx(got)
    assert isinstance(decoded, torch.Tensor) and _bits(decoded) == _bits(dequantize_mx(want))
    assert isinstance(quantize_mx(n, profile=profile).codes, np.ndarray)  # numpy in, numpy out


@pytest.mark.parametrize("profile", ["compressed-tensors", "quark"])
def test_int4_torch_in_torch_out_equals_numpy(profile: str) -> None:
    t, n = _weights(torch.bfloat16)
    got, want = quantize_int4(t, profile=profile), quantize_int4(n, profile=profile)
    assert isinstance(got.q, torch.Tensor) and got.q.dtype == torch.int8
    assert _bits(got.q) == _bits(want.q) and _bits(got.scales) == _bits(want.scales)
    decoded = dequantize_int4(got, dtype=torch.bfloat16)
    assert decoded.dtype == torch.bfloat16
    assert _bits(decoded) == _bits(dequantize_int4(want, dtype=ml_dtypes.bfloat16))


def test_fast_paths_return_the_container_given() -> None:
    from mxformats import fast

    t, n = _weights(torch.float32)
    got = fast.quantize_mx(t)
    assert isinstance(got.codes, torch.Tensor) and _bits(got.codes) == _bits(quantize_mx(n).codes)
    assert isinstance(fast.dequantize_mx(got), torch.Tensor)
    assert isinstance(fast.encode(E4M3FN, t), torch.Tensor)


def test_codec_functions_take_torch_and_ml_dtypes() -> None:
    """mxformats.codec's module-level encode and decode take the containers Format's methods
    take (the codec imports the containers module; no cycle)."""
    from mxformats import codec

    t, n = _weights(torch.bfloat16)
    encoded = codec.encode(E4M3FN, t)
    assert isinstance(encoded, torch.Tensor) and encoded.device == t.device
    assert _bits(encoded) == _bits(codec.encode(E4M3FN, n))
    codes = np.arange(256, dtype=np.uint8)
    tensor = torch.from_numpy(codes).view(torch.float8_e4m3fn)
    decoded = codec.decode(E4M3FN, tensor, dtype=torch.bfloat16)
    assert isinstance(decoded, torch.Tensor) and decoded.dtype == torch.bfloat16
    assert _bits(decoded) == _bits(codec.decode(E4M3FN, codes, ml_dtypes.bfloat16))
    native = codec.decode(E4M3FN, codes.view(ml_dtypes.float8_e4m3fn))
    assert isinstance(native, np.ndarray) and _bits(native) == _bits(codec.decode(E4M3FN, codes))
    x2 = torch.from_numpy(pack_fp4(codes[:16])).view(torch.float4_e2m1fn_x2)
    assert _bits(codec.decode(E2M1, x2)) == _bits(codec.decode(E2M1, codes[:16]))
    with pytest.raises(TypeError, match="not e4m3fn codes"):
        codec.decode(E4M3FN, tensor.view(torch.float8_e5m2))
    bits = torch.tensor([0x3F80, 0xC040, 0x7FC0], dtype=torch.uint16)
    widened = codec.bfloat16_bits_to_float32(bits)
    assert isinstance(widened, torch.Tensor) and widened.dtype == torch.float32
    assert _bits(widened) == _bits(codec.bfloat16_bits_to_float32(bits.numpy()))


@pytest.mark.parametrize("spelling", [torch.bfloat16, ml_dtypes.bfloat16, "bfloat16",
                                      "torch.bfloat16", np.dtype(ml_dtypes.bfloat16)])
def test_dtype_takes_numpy_ml_dtypes_and_torch(spelling: Any) -> None:
    codes, scales = quantize_mx(np.float32([6, 5, 0.25, 0.75] + [0] * 28))
    out = dequantize_mx(codes, scales, dtype=spelling)
    assert out.dtype == BF16
    assert E2M1.decode(np.arange(16, dtype=np.uint8), dtype=spelling).dtype == BF16
    assert numpy_dtype(spelling) == BF16
    with pytest.raises(TypeError, match="not a dtype"):
        numpy_dtype("float7")


# -- item 1: native dtypes into decoders ----------------------------------------------------------


@pytest.mark.parametrize("name", [n for n, f in FORMATS.items() if f.ml_dtype is not None])
def test_ml_dtypes_arrays_decode_as_their_codes(name: str) -> None:
    """Every code of the format, as the ml_dtypes array holding it: the same decoded bits."""
    fmt = FORMATS[name]
    codes = np.arange(1 << fmt.bits, dtype=np.uint8)
    native = codes.view(fmt.ml_dtype)
    assert _bits(fmt.decode(native)) == _bits(fmt.decode(codes))


@pytest.mark.parametrize("name", ["e4m3fn", "e4m3fnuz", "e5m2", "e8m0"])
def test_torch_float8_tensors_decode_as_their_codes(name: str) -> None:
    fmt = FORMATS[name]
    codes = np.arange(256, dtype=np.uint8)
    tensor = torch.from_numpy(codes).view(fmt.torch_dtype)
    got = fmt.decode(tensor)
    assert isinstance(got, torch.Tensor) and _bits(got) == _bits(fmt.decode(codes))


def test_float4_x2_codes_and_e8m0_scales_dequantize() -> None:
    """The acceptance case: a float4_e2m1fn_x2 tensor with float8_e8m0fnu scales."""
    x = np.random.default_rng(3).standard_normal((2, 64)).astype(np.float32)
    codes, scales = quantize_mx(x)
    t_codes = torch.from_numpy(codes).view(torch.float4_e2m1fn_x2)
    t_scales = torch.from_numpy(scales).view(torch.float8_e8m0fnu)
    got = dequantize_mx(t_codes, t_scales)
    assert isinstance(got, torch.Tensor) and _bits(got) == _bits(dequantize_mx(codes, scales))
    # Format.decode of the packed tensor: two codes a byte, in pack_fp4's order.
    unpacked = E2M1.decode(t_codes)
    assert unpacked.shape == (2, 64)
    assert _bits(pack_fp4(E2M1.encode(unpacked.numpy()))) == _bits(codes)
    # E8M0 from the strict reader: an F8_E8M0 tensor comes back as ml_dtypes float8_e8m0fnu.
    assert _bits(E8M0.decode(scales.view(ml_dtypes.float8_e8m0fnu))) == _bits(E8M0.decode(scales))


def test_a_native_dtype_of_another_format_is_refused() -> None:
    e5m2 = torch.zeros(4).to(torch.float8_e5m2)
    with pytest.raises(TypeError, match=r"float8_e5m2 \(e5m2\), not e4m3fn codes"):
        E4M3FN.decode(e5m2)
    with pytest.raises(TypeError, match="not e8m0 codes"):
        dequantize_mx(np.zeros((1, 16), np.uint8), e5m2[:1].reshape(1, 1))
    assert native_codes([1, 2]) == [1, 2]  # not a native dtype: unchanged


def test_a_format_given_by_name_is_read_with_the_formats_lookup(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``elem="e4m3fn"``, a name, is read by the ``get_format`` that :mod:`mxformats.formats`
    hands containers' decorator: e5m2 codes are refused as for ``E4M3FN`` itself. Without the
    formats handed down the decorator says so (it never imports formats, which sits above it)."""
    e5m2 = torch.zeros((1, 32)).to(torch.float8_e5m2)
    with pytest.raises(TypeError, match=r"float8_e5m2 \(e5m2\), not e4m3fn codes"):
        dequantize_mx(e5m2, np.full((1, 1), 127, np.uint8), "e4m3fn")
    monkeypatch.setattr("mxformats.containers._formats", [])
    with pytest.raises(RuntimeError, match=r"mxformats\.formats has not installed its formats"):
        E4M3FN.decode(np.zeros(2, np.uint8))


def test_format_native_dtypes_and_aliases() -> None:
    assert E4M3FN.torch_dtype is torch.float8_e4m3fn and E2M1.torch_dtype is torch.float4_e2m1fn_x2
    assert FORMATS["e2m3"].torch_dtype is None and FORMATS["int4"].torch_dtype is None
    assert E8M0.ml_dtype == np.dtype(ml_dtypes.float8_e8m0fnu)
    assert E4M3FN.safetensors_dtype == "F8_E4M3" and E2M1.safetensors_dtype == "F4"
    assert FORMATS["int4"].safetensors_dtype is None
    for alias in ("E2M1", "float4_e2m1fn_x2", "F4", "FLOAT4_E2M1FN", "e2m1"):
        assert get_format(alias) is E2M1
    for alias in ("float8_e4m3fn", "torch.float8_e4m3fn", "F8_E4M3", "f8_e4m3", "E4M3FN",
                  torch.float8_e4m3fn, np.dtype(ml_dtypes.float8_e4m3fn)):
        assert get_format(alias) is E4M3FN
    assert get_format(ml_dtypes.float8_e8m0fnu) is E8M0
    with pytest.raises(ValueError, match="unknown format 'fp4'"):
        get_format("fp4")


def test_the_core_import_stays_torch_free() -> None:
    code = ("import sys, numpy as np, mxformats, mxformats.fast, mxformats.containers;"
            "mxformats.dequantize_mx(*mxformats.quantize_mx(np.zeros(32, np.float32)));"
            "mxformats.E4M3FN.decode(np.zeros(2, np.uint8), dtype='bfloat16');"
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- item 2: profiles round-trip -----------------------------------------------------------------


@pytest.mark.parametrize("profile", MX_PRODUCERS)
def test_mx_round_trip_decodes_with_the_default_consumer(profile: str) -> None:
    x = np.float32([6, 5, 0.25, 0.75, 0, 1e-39] + [0] * 26)
    try:
        mx = quantize_mx(x, profile=profile)
    except ValueError:
        mx = quantize_mx(x.astype(BF16), profile=profile)
    consumer = default_consumer("mx", profile)
    want = _bits(dequantize_mx(*mx, profile=consumer))
    assert _bits(dequantize_mx(mx)) == want  # the MXArray's own profile
    assert _bits(dequantize_mx(*mx, profile=profile)) == want  # a producer name
    assert consumer_for("mx", consumer) == consumer


def test_quark_reads_back_with_quark_and_a_named_consumer_wins() -> None:
    block = np.zeros(32, np.float32)  # a zero block: Quark writes scale 0x01 ...
    mx = quantize_mx(block, profile="quark")
    assert dequantize_mx(mx, profile="quark").tolist() == dequantize_mx(
        *mx, profile="quark-hip-bf16").tolist()
    assert default_consumer("mx", "quark") == "quark-hip-bf16"
    assert DEFAULT_CONSUMERS[("mx", "quark-triton")] == "quark-triton"
    # ... and a named consumer overrides the array's profile.
    ocp = dequantize_mx(quantize_mx(np.float32([1] * 32), profile="quark"), profile="ocp")
    assert ocp.tolist() == [1.0] * 32
    with pytest.raises(ValueError, match="unknown mx profile 'nope'"):
        dequantize_mx(mx, profile="nope")


def test_int4_array_carries_its_profile() -> None:
    x = np.random.default_rng(5).standard_normal((2, 64)).astype(BF16)
    q = quantize_int4(x, profile="quark")
    assert _bits(dequantize_int4(q)) == _bits(dequantize_int4(q.q, q.scales, profile="quark"))
    ct = quantize_int4(x, profile="compressed-tensors")
    assert _bits(dequantize_int4(ct)) == _bits(
        dequantize_int4(ct.q, ct.scales, profile="compressed-tensors"))
    # A named consumer overrides the array's (compressed-tensors rounds to bfloat16 first).
    assert _bits(dequantize_int4(ct, profile="quark")) == _bits(
        dequantize_int4(ct.q, ct.scales, profile="quark"))


def test_nvfp4_and_fp8_block_arrays_carry_their_profile() -> None:
    from mxformats.schemes.fp8_block import dequantize_fp8_block, quantize_fp8_block
    from mxformats.schemes.nvfp4 import dequantize_nvfp4, quantize_nvfp4

    x = np.random.default_rng(6).standard_normal((128, 128)).astype(np.float32)
    nv = quantize_nvfp4(x, profile="modelopt")
    assert nv.profile == "modelopt"
    assert _bits(dequantize_nvfp4(nv)) == _bits(dequantize_nvfp4(nv, profile="vllm-modelopt"))
    fb = quantize_fp8_block(x, profile="deepseek-fnuz")
    assert fb.profile == "deepseek-fnuz"
    assert _bits(dequantize_fp8_block(fb)) == _bits(
        dequantize_fp8_block(fb.codes, fb.scales, profile="deepseek-fnuz"))


# -- item 2: read_tensor -------------------------------------------------------------------------


def _first_expert(folder: Path) -> tuple[str, dict[str, str]]:
    index = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    name = sorted(n for n in index if ".experts.0.down_proj." in n)[0]
    return name.rsplit(".", 1)[0], index


def test_read_tensor_decodes_quark_mxfp4() -> None:
    folder = PRODUCERS / "kimi-k2-mxfp4-quark"
    module, index = _first_expert(folder)
    raw = {p: read_raw_tensor(folder / index[f"{module}.{p}"], f"{module}.{p}")
           for p in ("weight", "weight_scale")}
    assert default_consumer("mx", "quark") == "quark-hip-bf16"  # spec/profiles.md
    want = dequantize_mx(raw["weight"], raw["weight_scale"], profile="quark-hip-bf16")
    assert _bits(read_tensor(folder, f"{module}.weight")) == _bits(want)
    assert _bits(read_tensor(folder, module)) == _bits(want)
    shard = folder / index[f"{module}.weight"]
    assert _bits(read_tensor(shard, f"{module}.weight")) == _bits(want)  # a file, not the folder
    got = read_tensor(folder, module, dtype=torch.bfloat16)
    assert got.dtype == BF16
    # A scale, or a tensor that is not quantized, comes back as stored.
    assert _bits(read_tensor(folder, f"{module}.weight_scale")) == _bits(raw["weight_scale"])


def test_read_tensor_follows_the_pairing_table(tmp_path: Path) -> None:
    """The Quark fixture with one scale byte set to 0xFF, where the consumers part: the paired
    ``quark-hip-bf16`` decodes the block as +-Inf (NaN for zero codes), ``ocp`` as NaN. The
    validator's ``--source`` figures, ``inspect`` and read_tensor name the same consumer."""
    from mxformats.tensorfile import read_header
    from mxformats.validate.descriptors import by_format
    from mxformats.validate.identify import profiles_of
    from mxformats.validate.model import CheckpointFormat

    folder = tmp_path / "quark"
    shutil.copytree(PRODUCERS / "kimi-k2-mxfp4-quark", folder)
    module, index = _first_expert(folder)
    shard = folder / index[f"{module}.weight_scale"]
    header, data_offset = read_header(shard)
    with shard.open("r+b") as f:  # the first block's scale byte, in place
        f.seek(data_offset + header[f"{module}.weight_scale"]["data_offsets"][0])
        f.write(b"\xff")
    codes = read_raw_tensor(folder / index[f"{module}.weight"], f"{module}.weight")
    scales = read_raw_tensor(shard, f"{module}.weight_scale")
    assert scales[0, 0] == 0xFF
    got = read_tensor(folder, module)
    assert _bits(got) == _bits(dequantize_mx(codes, scales, profile="quark-hip-bf16"))
    assert _bits(got) != _bits(dequantize_mx(codes, scales, profile="ocp"))
    assert np.isinf(got[0, :32]).any()
    descriptor = by_format(CheckpointFormat.QUARK_MXFP4.value)
    assert descriptor.consumer == default_consumer("mx", "quark")
    assert profiles_of(CheckpointFormat.QUARK_MXFP4)["consumer_profile"] == "mx:quark-hip-bf16"


def test_every_decoding_descriptor_names_a_paired_consumer() -> None:
    """Each descriptor with a producer profile decodes with that producer's default consumer;
    W4A8 and FP8 block have one consumer each (vLLM's), which the table must name."""
    from mxformats.validate.descriptors import DESCRIPTORS

    named = {d.format.value: d.consumer for d in DESCRIPTORS if d.consumer is not None}
    assert named == {
        "quark-mxfp4": "quark-hip-bf16", "quark-w4a8": "vllm",
        "compressed-tensors-int4": "compressed-tensors",
        "compressed-tensors-nvfp4": "vllm-compressed-tensors",
        "modelopt-nvfp4": "vllm-modelopt", "compressed-tensors-fp8-block": "vllm",
        "fp8-block": "vllm"}
    for d in DESCRIPTORS:
        if d.consumer is not None:
            assert d.consumer == default_consumer(str(d.scheme), str(d.profile))


@pytest.mark.parametrize("fixture", ["kimi-k2-int4-compressed-tensors", "kimi-k2-w4a8-quark",
                                     "kimi-k2-fp8-block-deepseek"])
def test_read_tensor_decodes_every_verified_format(fixture: str) -> None:
    from mxformats import dequantize_w4a8, unpack_int4
    from mxformats.schemes.fp8_block import dequantize_fp8_block

    folder = PRODUCERS / fixture
    module, index = _first_expert(folder)

    def raw(p: str) -> np.ndarray:
        return read_raw_tensor(folder / index[f"{module}.{p}"], f"{module}.{p}")

    if fixture.endswith("compressed-tensors"):
        cols = int(raw("weight_shape")[-1])
        q = unpack_int4(raw("weight_packed"), layout="compressed-tensors", size=cols)
        want = dequantize_int4(q, raw("weight_scale"), profile="compressed-tensors")
    elif fixture.endswith("w4a8-quark"):
        want = dequantize_w4a8(raw("weight"), raw("weight_scale"), raw("weight_scale_2"))
    else:
        config = json.loads((folder / "config.json").read_text())["quantization_config"]
        want = dequantize_fp8_block(raw("weight").view(np.uint8), raw("weight_scale_inv"),
                                    block=tuple(config["weight_block_size"]), profile="deepseek")
    got = read_tensor(folder, f"{module}.weight")
    assert got.shape == want.shape and _bits(got) == _bits(want.astype(np.float32))


def test_read_tensor_refusals(tmp_path: Path) -> None:
    folder = PRODUCERS / "kimi-k2-mxfp4-quark"
    with pytest.raises(KeyError, match="not a tensor or module"):
        read_tensor(folder, "model.layers.99.nothing.weight")
    with pytest.raises(ValueError, match="cannot read the checkpoint"):
        read_tensor(tmp_path / "absent", "x")
    assert mxformats.read_tensor is read_tensor
