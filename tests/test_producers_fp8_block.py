"""Acceptance: re-quantizing tests/data/producers/src-bf16 reproduces, byte for byte, every
quantized tensor of the two FP8 block checkpoints (tests/data/producers/PROVENANCE.md):
``kimi-k2-fp8-block-deepseek`` (the DeepGEMM ``per_block_cast_to_fp8`` formula, profile
``deepseek``) and ``kimi-k2-fp8-block-compressed-tensors`` (llm-compressor ``model_free_ptq``
``FP8_BLOCK``, profile ``compressed-tensors``). Read with mxformats' own strict reader."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from producer_fixtures import checkpoint

from mxformats import quantize_fp8_block

SRC = "src-bf16"
#: checkpoint -> (profile, scale tensor suffix, quantized module count)
CHECKPOINTS = {
    "kimi-k2-fp8-block-deepseek": ("deepseek", ".weight_scale_inv", 48),
    "kimi-k2-fp8-block-compressed-tensors": ("compressed-tensors", ".weight_scale", 42),
}


@pytest.mark.parametrize("name", sorted(CHECKPOINTS))
def test_fp8_block_checkpoint_reproduced(name: str) -> None:
    profile, suffix, count = CHECKPOINTS[name]
    src, out = checkpoint(SRC), checkpoint(name)
    modules = sorted(k[: -len(suffix)] for k in out if k.endswith(suffix))
    assert len(modules) == count
    produced: set[str] = set()
    partial = 0
    for module in modules:
        weight = src[f"{module}.weight"]
        assert weight.dtype == ml_dtypes.bfloat16  # the producer saw BF16
        codes, scales = quantize_fp8_block(weight, block=(128, 128), profile=profile)
        theirs_codes, theirs_scales = out[f"{module}.weight"], out[f"{module}{suffix}"]
        assert theirs_codes.dtype == ml_dtypes.float8_e4m3fn, module
        assert codes.shape == theirs_codes.shape, module
        assert codes.tobytes() == theirs_codes.view(np.uint8).tobytes(), module
        assert scales.dtype == theirs_scales.dtype and scales.shape == theirs_scales.shape, module
        assert scales.tobytes() == theirs_scales.tobytes(), module
        partial += weight.shape[0] % 128 != 0 or weight.shape[1] % 128 != 0
        produced |= {f"{module}.weight", f"{module}{suffix}"}
    assert partial > 0  # the fixture exercises partial edge tiles (96-column experts)
    # Every other tensor is the source's, unchanged.
    assert set(out) - set(src) == {n for n in produced if n.endswith(suffix)}
    for tensor in set(out) - produced:
        assert out[tensor].tobytes() == src[tensor].tobytes(), tensor


def test_fixture_holds_negative_zero_codes() -> None:
    """Both producers keep the sign of a zero (code 0x80): compressed-tensors passes no zero
    point to ``quantize``, so nothing adds +0 to -0."""
    for name in CHECKPOINTS:
        codes = [v.view(np.uint8) for v in checkpoint(name).values()
                 if v.dtype == ml_dtypes.float8_e4m3fn]
        assert any(np.any(c == 0x80) for c in codes), name
