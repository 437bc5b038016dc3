"""Which profile is checked against which real code, and that nothing is left out.

Every registered profile is either run here against the installed producer or consumer
(``LIVE``: the test module that does it), or needs code that does not run on this CPU-only
machine (``VECTORS``: why, and the labelled vector file that covers it; those vectors are
asserted against the profile by tests/test_mx_vectors.py and the INT4/W4A8 vector tests). The
installed versions must be the pinned ones, and the live producers must reproduce every
``quantize`` vector of their spec/vectors/mx file: the spec's vectors are checked against the
real code, not only against mxformats.
"""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path

import _producers as P
import numpy as np
import pytest
from conftest import requires

from mxformats.registry import profiles

ROOT = Path(__file__).resolve().parents[2]

LIVE = {
    ("mx", "producer", "ocp"): "test_ml_dtypes (ml_dtypes element casts)",
    ("mx", "producer", "torchao-floor"): "test_torchao",
    ("mx", "producer", "torchao-ceil"): "test_torchao",
    ("mx", "producer", "torchao-even"): "test_torchao",
    ("mx", "producer", "torchao-rceil"): "test_torchao",
    ("mx", "producer", "quark"): "test_quark",
    ("mx", "producer", "quark-triton"): "test_quark (torch reference)",
    ("mx", "producer", "compressed-tensors"): "test_compressed_tensors",
    ("mx", "consumer", "ocp"): "test_ml_dtypes (ml_dtypes decode)",
    ("mx", "consumer", "compressed-tensors"): "test_compressed_tensors (decompress)",
    ("mx", "consumer", "quark-triton"): "test_quark (upcast_from_mxfp_torch)",
    ("int4", "producer", "compressed-tensors"): "test_compressed_tensors",
    ("int4", "producer", "quark"): "test_quark",
    ("int4", "consumer", "compressed-tensors"): "test_compressed_tensors (decompress)",
    ("int4", "consumer", "quark"): "test_quark (dequantize_int_per_*_affine)",
    ("w4a8", "producer", "quark"): "test_quark",
    ("fp8", "producer", "static"): "test_quark (FP8 per-tensor export, E4M3FN and E5M2)",
    ("fp8-block", "producer", "compressed-tensors"): "test_fp8_block_interop (quantize, FP8_BLOCK)",
    # No installable producer writes DeepSeek-style FP8 blocks: DeepGEMM's formula, in torch.
    ("fp8-block", "producer", "deepseek"): "test_fp8_block_interop (per_block_cast_to_fp8, torch)",
    ("fp8-block", "producer", "deepgemm"): "test_fp8_block_interop (per_block_cast_to_fp8, torch)",
    ("fp8-block", "producer", "ue8m0"): "test_fp8_block_interop (per_block_cast_to_fp8, torch)",
    ("fp8-block", "producer", "deepseek-fnuz"): "test_fp8_block_interop (+ vLLM FNUZ normalize, torch)",
    ("fp8-block", "consumer", "vllm"): "test_fp8_block_interop (vLLM scaled_dequantize, torch)",
    ("nvfp4", "producer", "modelopt"): "test_nvfp4_interop",
    ("nvfp4", "producer", "compressed-tensors"): "test_nvfp4_interop",
    ("nvfp4", "consumer", "vllm-compressed-tensors-emulation"): (
        "test_nvfp4_interop (compressed-tensors NVFP4PackedCompressor.decompress: the same division)"),
}

GPU = "a GPU kernel (Triton/HIP/CUDA); not executable on the CPU"
VECTORS = {
    ("mx", "producer", "triton-round-up"): (
        "triton_kernels is not on PyPI (the PyPI name is an unrelated package); its scale "
        "bytes are checked live against Quark's pre-#8110 copy in test_quark",
        "mx/triton-round-up.json"),
    ("mx", "producer", "triton-round-down"): (
        "triton_kernels is not on PyPI (the PyPI name is an unrelated package)",
        "mx/triton-round-down.json"),
    ("mx", "producer", "microxcaling"): ("microsoft/microxcaling is not on PyPI",
                                         "mx/microxcaling.json"),
    ("mx", "producer", "vllm"): ("vLLM mxfp4_quantize: " + GPU, "mx/vllm.json"),
    ("mx", "activation", "quark-hip-qdq"): ("Quark qdq_mxfp4_hip: " + GPU,
                                            "mx/quark-hip-qdq.json"),
    ("mx", "consumer", "quark-hip-qdq"): ("Quark qdq_mxfp4_hip: " + GPU,
                                          "mx/quark-hip-qdq.json"),
    ("mx", "consumer", "quark-hip-fp16"): ("Quark dq_mxfp4_hip: " + GPU,
                                           "mx/quark-hip-fp16.json"),
    ("mx", "consumer", "quark-hip-bf16"): ("Quark dq_mxfp4_hip: " + GPU,
                                           "mx/quark-hip-bf16.json"),
    ("mx", "consumer", "triton"): ("triton_kernels upcast_from_mxfp: " + GPU, "mx/triton.json"),
    ("mx", "consumer", "vllm-e8m0-to-f32"): (
        "vLLM/sglang e8m0_to_f32: vLLM needs CUDA to import", "mx/vllm-e8m0-to-f32.json"),
    ("fp8", "producer", "vllm-fnuz"): ("vLLM scaled_fp8_quant: " + GPU,
                                       "w4a8/fp8_per_tensor.json"),
    ("fp8", "activation", "dynamic-fn"): ("vLLM dynamic_scaled_fp8_quant: " + GPU,
                                          "w4a8/fp8_per_tensor.json"),
    ("fp8", "activation", "dynamic-fnuz"): ("vLLM dynamic_scaled_fp8_quant: " + GPU,
                                            "w4a8/fp8_per_tensor.json"),
    ("w4a8", "consumer", "vllm"): ("vLLM QuarkW4A8Fp8MoEMethod (ROCm AITER): " + GPU,
                                   "w4a8/dequantize.json"),
    ("nvfp4", "consumer", "vllm-modelopt"): ("vLLM ModelOptNvFp4LinearMethod (CUTLASS/FlashInfer "
                                             "alpha): " + GPU, "nvfp4/vllm-modelopt.json"),
    ("nvfp4", "consumer", "vllm-compressed-tensors"): (
        "vLLM CompressedTensorsW4A4Fp4 (CUTLASS/FlashInfer alpha): " + GPU,
        "nvfp4/vllm-compressed-tensors.json"),
}

PINS = {"torchao": "0.18.0", "compressed-tensors": "0.20.1", "amd-quark": "0.13",
        "nvidia-modelopt": "0.47.0"}


def test_every_profile_is_accounted_for() -> None:
    registered = {(p.scheme, p.kind, p.name) for p in profiles()}
    unaccounted = registered - set(LIVE) - set(VECTORS)
    assert not unaccounted, f"profiles with no interop check and no labelled vectors: {unaccounted}"
    stale = (set(LIVE) | set(VECTORS)) - registered
    assert not stale, f"coverage entries for profiles that no longer exist: {stale}"


@pytest.mark.parametrize("key", sorted(VECTORS), ids=["-".join(k) for k in sorted(VECTORS)])
def test_profile_without_live_code_has_targeted_vectors(key: tuple[str, str, str]) -> None:
    reason, path = VECTORS[key]
    data = json.loads((ROOT / "spec" / "vectors" / path).read_text(encoding="utf-8"))
    cases = [c for k in ("quantize", "dequantize", "cases") for c in data.get(k, [])]
    if data.get("profile") != key[2]:  # a shared file: the cases that target this profile
        cases = [c for c in cases if (c.get("target") or {}).get("profile") == key[2]]
    assert cases, f"{key}: no vector in spec/vectors/{path} targets it ({reason})"


def test_pinned_versions_are_installed() -> None:
    """pyproject's interop extra, constraints.txt and the installed producers agree."""
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    extra = re.search(r"^interop = \[(.*)\]$", pyproject, flags=re.MULTILINE)
    assert extra, "pyproject.toml has no one-line interop extra"
    constraints = (ROOT / "constraints.txt").read_text(encoding="utf-8")
    for name, version in PINS.items():
        assert f'"{name}=={version}"' in extra.group(1), name
        assert re.search(rf"^{re.escape(name)}=={re.escape(version)}$", constraints, re.M), name
        requires({"torchao": "torchao", "compressed-tensors": "compressed_tensors",
                  "amd-quark": "quark", "nvidia-modelopt": "modelopt"}[name])
        assert metadata.version(name) == version, (name, metadata.version(name))


def _vector_input(case: dict[str, object]) -> np.ndarray:
    dtype = {"float32": P.F32, "bfloat16": P.BF16, "float16": P.F16}[str(case["dtype"])]
    values = [float.fromhex(v) if "0x" in v else float(v) for v in case["input"]]  # type: ignore[attr-defined]
    return P.cast(np.array([values], dtype=np.float64), dtype)


LIVE_MX = ("torchao-floor", "torchao-ceil", "torchao-even", "torchao-rceil", "quark",
           "quark-triton", "compressed-tensors")


@pytest.mark.parametrize("profile", LIVE_MX)
def test_spec_vectors_are_what_the_real_producer_writes(profile: str) -> None:
    """Every ``quantize`` vector of spec/vectors/mx/<profile>.json, run through the installed
    producer: same scale byte and codes (one block at a time, torch's scalar path)."""
    requires("torch")
    data = json.loads((ROOT / "spec" / "vectors" / "mx" / f"{profile}.json").read_text("utf-8"))
    cases = data["quantize"]
    assert cases
    for case in cases:
        x = _vector_input(case)
        if P.noncanonical_nan(x).any():
            continue  # implementation-defined payloads are asserted in the producer tests
        if profile.startswith("torchao"):
            requires("torchao.prototype.mx_formats.mx_tensor")
            codes, scales = P.torchao_to_mx(x, str(case["elem"]), profile)
        elif profile == "compressed-tensors":
            requires("compressed_tensors")
            codes, scales = P.ct_mxfp4(x)
        else:
            requires("quark.torch")
            codes, scales = (P.quark_mxfp4 if profile == "quark" else P.quark_triton_mxfp4)(x)
        elements = P.unpack_nibbles(codes)[0] if case["elem"] == "e2m1" else codes[0]
        want = [int(c, 16) for c in case["codes"]]  # type: ignore[union-attr]
        got = (int(scales.reshape(-1)[0]), elements.tolist())
        assert got == (int(str(case["scale"]), 16), want), (case["vector"], case.get("title"), got)
