"""Reproduction on real output: re-quantizing the BF16 source with profile ``quark`` gives every
``weight`` and ``weight_scale`` byte of the Quark 0.13 MXFP4 checkpoint (tests/data/producers/,
see its PROVENANCE.md and README.md)."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from mxformats.schemes.mx import dequantize_mx, quantize_mx, unpack_fp4
from mxformats.tensorfile import read_checkpoint_tensor, read_index

DATA = Path(__file__).resolve().parent / "data" / "producers"
SOURCE = DATA / "src-bf16"
QUARK = DATA / "kimi-k2-mxfp4-quark"


def _quantized_modules() -> list[str]:
    return sorted(n.removesuffix(".weight_scale") for n in read_index(QUARK)
                  if n.endswith(".weight_scale"))


def test_the_fixture_quantizes_the_modules_the_readme_says() -> None:
    modules = _quantized_modules()
    assert len(modules) == 27  # layer-0 dense MLP (3) + 2 MoE layers x 4 experts x 3
    assert all(".self_attn." not in m and ".shared_experts." not in m for m in modules)


@pytest.mark.parametrize("module", _quantized_modules())
def test_quark_mxfp4_checkpoint_is_reproduced_byte_for_byte(module: str) -> None:
    source = read_checkpoint_tensor(SOURCE, f"{module}.weight")
    weight = read_checkpoint_tensor(QUARK, f"{module}.weight")
    scale = read_checkpoint_tensor(QUARK, f"{module}.weight_scale")
    assert source.dtype == np.dtype(ml_dtypes.bfloat16)
    assert weight.dtype == scale.dtype == np.uint8
    codes, scales = quantize_mx(source, profile="quark")
    assert codes.shape == weight.shape and scales.shape == scale.shape
    assert np.array_equal(codes, weight), f"{module}.weight: {int((codes != weight).sum())} bytes"
    assert np.array_equal(scales, scale), f"{module}.weight_scale: {int((scales != scale).sum())}"


def test_what_the_fixture_exercises() -> None:
    """The fixture is not trivial: ties, negative values rounding to +0, and tiny scales occur."""
    ties = zeros_from_negatives = 0
    for module in _quantized_modules():
        source = read_checkpoint_tensor(SOURCE, f"{module}.weight").astype(np.float64)
        codes, scales = quantize_mx(source.astype(np.float32), profile="quark")
        scaled = source / np.repeat(np.exp2(scales.astype(np.float64) - 127), 32, axis=-1)
        ties += int(np.isin(np.abs(scaled), [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]).sum())
        zeros_from_negatives += int(((source < 0) & (unpack_fp4(codes) == 0)).sum())
        # bfloat16 and float32 give the same bytes: Quark quantizes in float32
        assert np.array_equal(codes, quantize_mx(source.astype(np.float32).astype(
            ml_dtypes.bfloat16), profile="quark").codes)
    assert ties > 100 and zeros_from_negatives > 100


def test_ocp_decoding_of_the_checkpoint_is_close_to_the_source() -> None:
    module = _quantized_modules()[0]
    source = read_checkpoint_tensor(SOURCE, f"{module}.weight").astype(np.float32)
    weight = read_checkpoint_tensor(QUARK, f"{module}.weight")
    scale = read_checkpoint_tensor(QUARK, f"{module}.weight_scale")
    decoded = dequantize_mx(weight, scale, profile="ocp")
    block_max = np.repeat(np.abs(source).reshape(source.shape[0], -1, 32).max(-1), 32, axis=-1)
    assert np.all(np.abs(decoded - source) <= block_max / 4 + 1e-30)
