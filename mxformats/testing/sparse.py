"""Sparse checkpoints: the real safetensors headers of a full-size layout, data as holes.

:func:`write_full_size_layout` writes the Quark MXFP4 layout of a Kimi-K2-class text config
(default: Kimi-K2.6, 61 layers × 384 routed experts, 64 shards, 562 GB declared) with every
header real and every shard truncated to its declared size, so it costs no disk. Only reads
that do not need real values make sense on it: ``--level structure`` (the benchmarks), and
counting the bytes each level reads (``docs/hub.md``, ``tests/test_validate_hub.py``).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mxformats.validate.arch import architecture, expected_modules

__all__ = ["FULL_SIZE_SHARDS", "KIMI_K26_TEXT", "write_full_size_layout",
           "write_sparse_safetensors"]

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


def write_full_size_layout(out: Path, shards: int = FULL_SIZE_SHARDS,
                           text: Mapping[str, Any] = KIMI_K26_TEXT) -> dict[str, Any]:
    """The Quark MXFP4 layout of the text config ``text`` (default: full-size Kimi-K2.6) as
    ``shards`` sparse shards; returns ``{"path", "tensors", "shards", "declared_bytes"}``."""
    out.mkdir(parents=True, exist_ok=True)
    cfg: dict[str, Any] = {"architectures": ["DeepseekV3ForCausalLM"], **text}
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
        if m.kind in ("expert", "dense_mlp") and m.shape is not None:
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
