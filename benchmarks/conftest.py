"""Checkpoints for the validator benchmarks (issue 4, item 5 "Scale and speed").

Not part of the default test run (``testpaths`` is ``tests``); run with
``pytest benchmarks --benchmark-only`` (see README.md). Both checkpoints are session-scoped, so
writing them is never part of a measurement.

- :func:`full_size_layout`: the full-size Kimi-K2.6 MXFP4 layout (61 layers × 384 routed
  experts, 64 shards, about 139k tensors, about 590 GB declared) with real safetensors headers
  and **sparse** data: every shard is truncated to its declared size, so it costs no disk and
  only ``--level structure`` (which reads headers, never data) makes sense on it.
- :func:`scan_checkpoint`: real, valid Quark MXFP4 checkpoints of about 200 MB written by
  :func:`mxformats.testing.make_kimi_checkpoint` with larger dims (:data:`SCANS`), for the
  ``full`` scan.
"""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mxformats.validate.arch import architecture, expected_modules

#: Kimi-K2.6's text config (the fields the validator reads).
KIMI_K26_TEXT: dict[str, Any] = {
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "first_k_dense_replace": 1,
    "n_routed_experts": 384,
    "n_shared_experts": 1,
    "num_nextn_predict_layers": 0,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "vocab_size": 163840,
    "num_attention_heads": 64,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "model_type": "kimi_k2",
}
FULL_SIZE_SHARDS = 64

#: make_kimi_checkpoint arguments of the scan checkpoints. ``many-tensors``: small modules
#: (1024 × 1024 experts, 0.5 MB packed each; ~212 MB of shards, ~35 s to write), so per-tensor
#: overheads show. ``kimi-dims``: Kimi-K2.6's expert and hidden sizes (7168 × 2048 experts,
#: 7.3 MB packed each; ~232 MB, ~47 s and ~2.7 GB of RAM to write), the real tensor sizes.
SCANS: dict[str, dict[str, Any]] = {
    "many-tensors": {
        "layers": 4, "experts": 32, "hidden": 1024, "moe_intermediate": 1024, "q_lora": 256,
        "kv_lora": 256, "heads": 8, "qk_nope": 64, "qk_rope": 32, "v_head": 64, "vocab": 4096,
        "shards": 4,
    },
    "kimi-dims": {
        "layers": 2, "experts": 4, "hidden": 7168, "moe_intermediate": 2048,
        "intermediate": 2048, "vocab": 640, "shards": 2,
    },
}

_ITEMSIZE = {"BF16": 2, "F32": 4, "U8": 1}


def write_sparse_safetensors(path: Path, tensors: list[tuple[str, str, tuple[int, ...]]]) -> int:
    """Write a safetensors file whose header is real and whose data is a hole (``truncate``).
    Returns the file's size."""
    header: dict[str, Any] = {}
    offset = 0
    for name, dtype, shape in tensors:
        nbytes = _ITEMSIZE[dtype]
        for d in shape:
            nbytes *= d
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        f.truncate(8 + len(raw) + offset)
    return 8 + len(raw) + offset


def write_full_size_layout(out: Path, shards: int = FULL_SIZE_SHARDS) -> dict[str, Any]:
    """The full-size Kimi-K2.6 Quark MXFP4 layout as sparse shards; returns a summary."""
    out.mkdir(parents=True, exist_ok=True)
    cfg: dict[str, Any] = {"architectures": ["DeepseekV3ForCausalLM"], **KIMI_K26_TEXT}
    modules = expected_modules(architecture(cfg))
    exclude = sorted(m.name for m in modules.values()
                     if m.linear and m.kind not in ("expert", "dense_mlp"))
    cfg["quantization_config"] = {
        "quant_method": "quark",
        "export": {"kv_cache_group": [], "pack_method": "reorder"},
        "global_quant_config": {
            "weight": {"dtype": "fp4", "qscheme": "per_group", "group_size": 32,
                       "scale_format": "e8m0", "is_dynamic": False},
            "input_tensors": {"dtype": "fp4", "is_dynamic": True},
            "output_tensors": None,
            "bias": None,
        },
        "exclude": exclude,
    }
    tensors: list[tuple[str, str, tuple[int, ...]]] = []
    for m in modules.values():
        if m.kind in ("expert", "dense_mlp"):
            rows, cols = m.shape
            tensors.append((f"{m.name}.weight", "U8", (rows, cols // 2)))
            tensors.append((f"{m.name}.weight_scale", "U8", (rows, cols // 32)))
        else:
            for param, shape in m.params:
                dtype = "F32" if param == "e_score_correction_bias" else "BF16"
                tensors.append((f"{m.name}.{param}", dtype, tuple(shape)))
    per = -(-len(tensors) // shards)
    weight_map: dict[str, str] = {}
    total = 0
    for k in range(shards):
        chunk = tensors[k * per:(k + 1) * per]
        name = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        total += write_sparse_safetensors(out / name, chunk)
        weight_map.update((t[0], name) for t in chunk)
    (out / "config.json").write_text(json.dumps(cfg))
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index))
    return {"path": out, "tensors": len(tensors), "shards": shards, "declared_bytes": total}


@pytest.fixture(scope="session")
def full_size_layout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return write_full_size_layout(tmp_path_factory.mktemp("kimi-k26-sparse"))


@pytest.fixture(scope="session", params=list(SCANS))
def scan_checkpoint(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    from mxformats.testing import bf16_twin_path, make_kimi_checkpoint

    root = tmp_path_factory.mktemp(f"scan-{request.param}")
    path = make_kimi_checkpoint(root / "kimi-mxfp4", "quark-mxfp4", **SCANS[request.param])
    shutil.rmtree(bf16_twin_path(path))  # the BF16 source is not scanned
    nbytes = sum(p.stat().st_size for p in path.glob("*.safetensors"))
    yield {"name": request.param, "path": path, "bytes": nbytes}
    shutil.rmtree(root)
