"""Acceptance: re-quantizing tests/data/producers/src-bf16 reproduces, byte for byte, every
quantized tensor of the NVFP4 checkpoints written by ModelOpt 0.47.0 and by llm-compressor
``oneshot`` + compressed-tensors (tests/data/producers/README.md, "Second set")."""

from __future__ import annotations

from collections.abc import Mapping

import ml_dtypes
import numpy as np
import pytest
from producer_fixtures import checkpoint

from mxformats import quantize_nvfp4
from mxformats.schemes.nvfp4 import PRODUCERS

FIXTURES = {
    "modelopt": "kimi-k2-nvfp4-modelopt",
    "compressed-tensors": "kimi-k2-nvfp4-compressed-tensors",
}
FUSED = ("gate_proj", "up_proj")


def _shared_amax(src: Mapping[str, np.ndarray], module: str) -> np.float32 | None:
    """Both producers give an expert's gate_proj and up_proj one global scale, from the larger
    of their two maxima (ModelOpt ``sync_moe_gate_up_amax``; llm-compressor's fused global
    scale is the smaller 2688 / amax, the same thing)."""
    expert, projection = module.rsplit(".", 1)
    if projection not in FUSED:
        return None
    return max(np.abs(src[f"{expert}.{p}.weight"].astype(np.float32)).max() for p in FUSED)


@pytest.mark.parametrize("profile", sorted(FIXTURES))
def test_nvfp4_checkpoint_reproduced(profile: str) -> None:
    src, out = checkpoint("src-bf16"), checkpoint(FIXTURES[profile])
    packed_name, scale_name, global_name = PRODUCERS[profile].global_names
    modules = sorted(k[: -len(global_name) - 1] for k in out if k.endswith(f".{global_name}"))
    assert len(modules) == 24  # 2 MoE layers x 4 routed experts x gate/up/down
    produced = set()
    for module in modules:
        weight = src[f"{module}.weight"]
        assert weight.dtype == ml_dtypes.bfloat16  # the producer saw BF16
        result = quantize_nvfp4(weight, profile=profile, global_amax=_shared_amax(src, module))
        ours = {packed_name: result.packed(), scale_name: result.scales,
                global_name: result.global_scale}
        for suffix, array in ours.items():
            theirs = out[f"{module}.{suffix}"]
            if suffix == scale_name:  # F8_E4M3 in the file: compare its bytes
                theirs = theirs.view(np.uint8)
            assert array.dtype == theirs.dtype and array.shape == theirs.shape, (module, suffix)
            assert array.tobytes() == theirs.tobytes(), (module, suffix)
            produced.add(f"{module}.{suffix}")
    # The rest the producer added are activation scales; the unquantized tensors are the
    # source's, unchanged (ModelOpt's packed codes keep the name ``weight``).
    added = set(out) - set(src) - produced
    assert added and all(k.endswith(("input_scale", "input_global_scale")) for k in added)
    for name in set(out) & set(src) - produced:
        assert out[name].tobytes() == src[name].tobytes(), name


@pytest.mark.parametrize("profile", sorted(FIXTURES))
def test_without_the_shared_amax_gate_and_up_differ(profile: str) -> None:
    """The fixture pins the fused amax: one expert's own-amax global scales differ from the
    stored ones, so the shared-amax rule above is load-bearing."""
    src, out = checkpoint("src-bf16"), checkpoint(FIXTURES[profile])
    global_name = PRODUCERS[profile].global_names[2]
    own = []
    for projection in FUSED:
        module = f"model.layers.1.mlp.experts.1.{projection}"
        result = quantize_nvfp4(src[f"{module}.weight"], profile=profile)
        own.append(result.global_scale.tobytes() == out[f"{module}.{global_name}"].tobytes())
    assert own.count(False) == 1


def test_float32_copies_of_the_bf16_weights_give_other_compressed_tensors_bytes() -> None:
    """compressed-tensors computes its global scale in the input dtype: the same values widened
    to float32 give another weight_global_scale (ModelOpt computes in float32 and does not)."""
    weight = checkpoint("src-bf16")["model.layers.1.mlp.experts.0.down_proj.weight"]
    wide = weight.astype(np.float32)
    ct = [quantize_nvfp4(w, profile="compressed-tensors").global_scale for w in (weight, wide)]
    assert ct[0].tobytes() != ct[1].tobytes()
    mo = [quantize_nvfp4(w, profile="modelopt").global_scale for w in (weight, wide)]
    assert mo[0].tobytes() == mo[1].tobytes()
