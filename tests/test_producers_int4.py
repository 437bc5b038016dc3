"""Acceptance: re-quantizing tests/data/producers/src-bf16 reproduces, byte for byte, every
quantized tensor of the compressed-tensors INT4 and the Quark W4A8 checkpoints (written by the
real producers, see tests/data/producers/PROVENANCE.md)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from producer_fixtures import PRODUCERS, checkpoint

from mxformats import pack_int4, quantize_int4, quantize_w4a8
from mxformats.tensorfile import read_index

SRC, CT, W4A8 = "src-bf16", "kimi-k2-int4-compressed-tensors", "kimi-k2-w4a8-quark"


def _quantized_modules(name: str, suffix: str) -> list[str]:
    return sorted(k[: -len(suffix)] for k in checkpoint(name) if k.endswith(suffix))


def test_split_module_is_read_across_shards() -> None:
    index = read_index(PRODUCERS / CT)
    module = "model.layers.2.mlp.experts.2.down_proj"
    assert index[f"{module}.weight_packed"] != index[f"{module}.weight_scale"]


def test_compressed_tensors_int4_checkpoint_reproduced() -> None:
    src, out = checkpoint(SRC), checkpoint(CT)
    modules = _quantized_modules(CT, ".weight_packed")
    assert len(modules) == 24  # 2 MoE layers x 4 experts x gate/up/down
    produced = set()
    for module in modules:
        weight = src[f"{module}.weight"]
        assert weight.dtype == ml_dtypes.bfloat16  # the producer saw BF16
        q, scales = quantize_int4(weight, group_size=32, profile="compressed-tensors")
        ours = {
            "weight_packed": pack_int4(q, layout="compressed-tensors"),
            "weight_scale": scales,
            "weight_shape": np.array(weight.shape, dtype=np.int64),
        }
        for suffix, array in ours.items():
            theirs = out[f"{module}.{suffix}"]
            assert array.dtype == theirs.dtype and array.shape == theirs.shape, (module, suffix)
            assert array.tobytes() == theirs.tobytes(), (module, suffix)
            produced.add(f"{module}.{suffix}")
    # Every tensor the producer added is one of ours; the rest are the source's, unchanged.
    assert set(out) - set(src) == produced
    for name in set(out) & set(src):
        assert out[name].tobytes() == src[name].tobytes(), name


def test_quark_w4a8_checkpoint_reproduced() -> None:
    src, out = checkpoint(SRC), checkpoint(W4A8)
    modules = _quantized_modules(W4A8, ".weight_scale_2")
    assert len(modules) == 24
    produced = set()
    for module in modules:
        weight = src[f"{module}.weight"]
        result = quantize_w4a8(weight, profile="quark")
        for suffix, array in zip(("", "_scale", "_scale_2"), result, strict=True):
            name = f"{module}.weight{suffix}"
            theirs = out[name]
            assert array.dtype == theirs.dtype and array.shape == theirs.shape, name
            assert array.tobytes() == theirs.tobytes(), name
            produced.add(name)
    assert {k for k in out if k.startswith(tuple(modules))} == produced


@pytest.mark.parametrize("profile", ["compressed-tensors", "w4a8"])
def test_float32_copies_of_the_bf16_weights_give_other_bytes(profile: str) -> None:
    """The arithmetic dtype is part of the profile: widening the BF16 source to float32 first
    (same values) changes the output, which is why the tests feed bfloat16."""
    src = checkpoint(SRC)
    module = "model.layers.1.mlp.experts.0.down_proj"
    weight = src[f"{module}.weight"]
    wide = weight.astype(np.float32)
    if profile == "w4a8":
        assert quantize_w4a8(weight).weight.tobytes() != quantize_w4a8(wide).weight.tobytes()
    else:
        narrow_q = quantize_int4(weight).q
        assert not np.array_equal(narrow_q, quantize_int4(wide).q)
