"""The validator's corruption corpus (issue 4, item 6): ≥ 30 declarative cases, each built from a
generated clean twin (the injectors of tests/validate_corpus.py), each asserting its exit code and
the exact set of findings ``(check ID, severity, tensor)`` that differ from the twin's."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from validate_corpus import (
    BASES,
    EXPERT,
    INDEX,
    MIXED,
    MODELOPT_FP8,
    MODELOPT_MIXED,
    PRODUCER,
    Case,
    Tensors,
    add_raw_tensor,
    by_offset,
    calibrated_apart,
    case,
    config,
    copy_tree,
    directory_shard,
    dot_slash_entries,
    drop_tensor,
    edit,
    extra_entry_key,
    fifo,
    find,
    index,
    index_metadata,
    json_file,
    link_escape,
    make_mixed_ct,
    make_modelopt_fp8_block,
    make_modelopt_mixed,
    nibble_swap,
    raw_header,
    set_tensor,
    shards,
    socket_shard,
    source_weight,
    write_index,
    write_raw,
)

from mxformats.tensorfile import read_safetensors
from mxformats.testing.checkpoints import make_kimi_checkpoint
from mxformats.validate.catalogue import load_all
from mxformats.validate.findings import CHECKS, Level
from mxformats.validate.model import Options
from mxformats.validate.runner import Report, exit_code, validate

E, W, INFO = "error", "warning", "info"
SC = Level.SCALES
BIAS = "model.layers.1.mlp.gate.e_score_correction_bias"


# -- injectors -----------------------------------------------------------------------------------


def drop(*names: str) -> Any:
    def run(p: Path) -> None:
        def fn(d: Tensors) -> None:
            for n in names:
                del d[find(d, n)][n]
        edit(p, fn)
    return run


def add(name: str, value: Any, near: str) -> Any:
    def run(p: Path) -> None:
        edit(p, lambda d: d[find(d, near)].__setitem__(name, value))
    return run


def poke(name: str, where: tuple[int, ...], value: Any) -> Any:
    def fn(a: Any) -> Any:
        a[where] = value
        return a
    return set_tensor(name, fn)


def truncate(p: Path) -> None:
    s = p / shards(p)[-1]
    s.write_bytes(s.read_bytes()[:-1])


def absurd_length(p: Path) -> None:
    s = p / shards(p)[0]
    raw = bytearray(s.read_bytes())
    raw[:8] = struct.pack("<Q", 1 << 62)
    s.write_bytes(bytes(raw))


def header_bytes(text: bytes) -> Any:
    """Replace the first shard's header by ``text`` (padded), keeping its data."""
    def run(p: Path) -> None:
        s = p / shards(p)[0]
        _, data = raw_header(s)
        body = text + b" " * (-len(text) % 8)
        s.write_bytes(struct.pack("<Q", len(body)) + body + data)
    return run


def overlap(p: Path) -> None:
    # the last tensor (in file order) starts 8 bytes early: it overlaps its predecessor
    s = p / shards(p)[-1]
    header, data = raw_header(s)
    last = by_offset(header)[-1]
    b, e = header[last]["data_offsets"]
    header[last]["data_offsets"] = [b - 8, e - 8]
    write_raw(s, header, data[:-8])


def hole(p: Path) -> None:
    # 8 unreferenced bytes after the first tensor
    s = p / shards(p)[-1]
    header, data = raw_header(s)
    order = by_offset(header)
    cut = header[order[0]]["data_offsets"][1]
    for n in order[1:]:
        header[n]["data_offsets"] = [o + 8 for o in header[n]["data_offsets"]]
    write_raw(s, header, data[:cut] + b"\0" * 8 + data[cut:])


def two_shards(p: Path) -> None:
    name = "model.norm.weight"

    def fn(d: Tensors) -> None:
        other = next(s for s in d if s != find(d, name))
        d[other][name] = d[find(d, name)][name].copy()
    before = index(p)["weight_map"][name]
    edit(p, fn)
    idx = index(p)
    idx["weight_map"][name] = before
    write_index(p, idx)


def index_entry(tensor: str, target: str) -> Any:
    def run(p: Path) -> None:
        idx = index(p)
        idx["weight_map"][tensor] = target
        write_index(p, idx)
    return run


def stray(p: Path) -> None:
    shutil.copy(p / shards(p)[0], p / "extra.safetensors")


def total_size(p: Path) -> None:
    idx = index(p)
    idx["metadata"]["total_size"] += 1
    write_index(p, idx)


def quantize_mx(prefix: str = "") -> Any:
    """Replace a BF16 ``prefix.weight`` by an MXFP4 pair (U8 codes, U8 E8M0 scales)."""
    def run(p: Path) -> None:
        def fn(d: Tensors) -> None:
            s = find(d, f"{prefix}.weight")
            o, i = d[s][f"{prefix}.weight"].shape
            rng = np.random.default_rng(1)
            d[s][f"{prefix}.weight"] = rng.integers(0, 256, (o, i // 2), dtype=np.uint8)
            d[s][f"{prefix}.weight_scale"] = np.full((o, i // 32), 120, np.uint8)
        edit(p, fn)
    return run


def quantize_ct(prefix: str) -> Any:
    def run(p: Path) -> None:
        def fn(d: Tensors) -> None:
            s = find(d, f"{prefix}.weight")
            w = d[s].pop(f"{prefix}.weight")
            o, i = w.shape
            d[s][f"{prefix}.weight_packed"] = np.full((o, i // 8), 0x7654321, np.int32)
            d[s][f"{prefix}.weight_scale"] = w[:, : i // 32].copy()
            d[s][f"{prefix}.weight_shape"] = np.array([o, i], np.int32)
        edit(p, fn)
    return run


def move(name: str) -> Any:
    def run(p: Path) -> None:
        def fn(d: Tensors) -> None:
            src = find(d, name)
            d[next(s for s in d if s != src)][name] = d[src].pop(name)
        edit(p, fn)
    return run


def extra_layer(p: Path) -> None:
    def fn(d: Tensors) -> None:
        src = "model.layers.2.input_layernorm.weight"
        d[find(d, src)]["model.layers.3.input_layernorm.weight"] = d[find(d, src)][src].copy()
    edit(p, fn)


def expert_gap(p: Path) -> None:
    def fn(d: Tensors) -> None:
        for t in d.values():
            for n in [n for n in t if n.startswith("model.layers.2.mlp.experts.2.")]:
                del t[n]
    edit(p, fn)


def all_tensors(suffix: str, fn: Any) -> Any:
    def run(p: Path) -> None:
        def inner(d: Tensors) -> None:
            for t in d.values():
                for n in [n for n in t if n.endswith(suffix)]:
                    t[n] = fn(t[n])
        edit(p, inner)
    return run


def to_bf16(a: Any) -> Any:
    import ml_dtypes
    return a.astype(ml_dtypes.bfloat16)


TWINS: dict[str, Path] = {}


def replace_with_bf16_source(p: Path) -> None:
    src = TWINS["bf16"]
    for f in list(p.iterdir()):
        f.unlink()
    for f in src.iterdir():
        shutil.copy(f, p / f.name)


def nvfp4(c: dict[str, Any]) -> None:
    c["quantization_config"]["global_quant_config"]["weight"].update(
        group_size=16, scale_format="fp8_e4m3")


def w4a8_stage2(c: dict[str, Any]) -> None:
    c["quantization_config"]["global_quant_config"]["weight"][1]["symmetric"] = False


def ct_weights(**kw: Any) -> Any:
    return config(lambda c: c["quantization_config"]["config_groups"]["group_0"]["weights"]
                  .update(**kw))


def mm_conflict(c: dict[str, Any]) -> None:
    # same meaning, one extra key: still two configs that differ
    c["quantization_config"] = dict(c["text_config"]["quantization_config"], version="0.0.1")


def exclude_add(name: str) -> Any:
    return config(lambda c: c["quantization_config"]["exclude"].append(name))


SCALE = f"{EXPERT}.weight_scale"
O_PROJ = "model.layers.1.self_attn.o_proj"

#: The routed experts' Linears of the generated and NVFP4 producer twins, in the order the layout
#: checks visit them.
EXPERT_LINEARS = [f"model.layers.{layer}.mlp.experts.{e}.{proj}" for layer in (1, 2)
                  for e in range(4) for proj in ("gate_proj", "up_proj", "down_proj")]
LISTED = 10  # findings.MAX_LISTED: the rest of a check's findings are counted in one


def first_listed(check: str, suffix: str) -> set[tuple[str, str, str | None]]:
    """One root cause in every routed expert: the first LISTED findings of ``check`` and the
    one that counts the rest."""
    return {(check, E, f"{m}{suffix}") for m in EXPERT_LINEARS[:LISTED]} | {(check, E, None)}


G_IDX = first_listed("QUANT_TENSOR_MISSING", ".weight_g_idx")
#: CONFIG_QUANT, then a QUANT_SHAPE per routed expert scale (listed up to LISTED): a config group
#: size that is not the tensors' (the compressed-tensors INT4 and ModelOpt NVFP4 twins)
CT_G128 = {("CONFIG_QUANT", E, None)} | first_listed("QUANT_SHAPE", ".weight_scale")

G128_DOWN = "model.layers.0.mlp.down_proj"
#: compressed-tensors INT4 at group 128 and per channel (tests/data/int4-groups, llm-compressor
#: 0.14.0.1): vLLM loads 32, 64, 128 and per channel (marlin_utils.py
#: MARLIN_SUPPORTED_GROUP_SIZES = [-1, 32, 64, 128], check_moe_marlin_supports_layer), and
#: compressed-tensors' QuantizationArgs refuses a group_size with strategy "channel"
INT4_GROUP_CASES = [
    case("ct-g128-clean-full-source", "ct-g128", lambda p: None, 0, set(), level=Level.FULL, source=True),
    case("ct-channel-clean-full-source", "ct-channel", lambda p: None, 0, set(), level=Level.FULL, source=True),
    # scales of 64-element groups under a group-128 config: [128, 4], vLLM allocates [128, 2]
    case("ct-g128-scales-of-group-64", "ct-g128", set_tensor(f"{G128_DOWN}.weight_scale", lambda a: np.repeat(a, 2, axis=1)), 1, {("QUANT_SHAPE", E, f"{G128_DOWN}.weight_scale")}),
    # per-channel scales are [O, 1] (num_groups_w2 = num_groups_w13 = 1 for strategy channel)
    case("ct-channel-scales-of-group-32", "ct-channel", set_tensor(f"{EXPERT}.weight_scale", lambda a: np.repeat(a, 4, axis=1)), 1, {("QUANT_SHAPE", E, f"{EXPERT}.weight_scale")}),
    # group 256: no Marlin or Machete kernel takes it (MARLIN_SUPPORTED_GROUP_SIZES): one
    # config finding, the tensors checked against the declared group (gate/up: 128 columns,
    # one ceil group, as the 128 ones; down_proj's 256 columns: one group, not two)
    case("ct-g128-config-group-size-256", "ct-g128", ct_weights(group_size=256), 1, {("CONFIG_QUANT", E, None), ("QUANT_SHAPE", E, f"{G128_DOWN}.weight_scale")}),
    # strategy channel with a group size: compressed-tensors' QuantizationArgs raises
    # ("group_size requires strategy to be set to 'group'"), so vLLM cannot parse the config
    case("ct-channel-config-with-group-size", "ct-channel", ct_weights(group_size=128), 1, {("CONFIG_QUANT", E, None)}),
    # a group-32 config over per-channel tensors: every expert scale has the wrong shape
    case("ct-channel-config-says-group-32", "ct-channel", ct_weights(strategy="group", group_size=32), 1, first_listed("QUANT_SHAPE", ".weight_scale")),
]

CASES: list[Case] = [
    # -- files and index: shard spans, headers, the index's weight_map and total_size --
    case("truncated-shard", "mxfp4", truncate, 1, {("TENSOR_SPAN", E, "model.layers.2.mlp.experts.3.up_proj.weight_scale")}),
    case("header-length-absurd", "mxfp4", absurd_length, 1, {("HEADER_LENGTH", E, None)}),
    case("header-not-utf8", "ct", header_bytes(b'{"a\xff":1}'), 1, {("HEADER_INVALID", E, None)}),
    case("header-deeply-nested-json", "mxfp4", header_bytes(b"[" * 100_000), 1, {("HEADER_INVALID", E, None)}),
    case("header-huge-integer", "w4a8", header_bytes(b'{"a":{"dtype":"U8","shape":[' + b"9" * 5000 + b'],"data_offsets":[0,1]}}'), 1, {("HEADER_INVALID", E, None)}),
    case("config-deeply-nested-json", "ct", lambda p: (p / "config.json").write_bytes(b"[" * 100_000), 1, {("CONFIG_PARSE", E, None)}),
    case("index-deeply-nested-json", "w4a8", lambda p: (p / INDEX).write_bytes(b'{"weight_map":' * 50_000), 1, {("INDEX_PARSE", E, None)}),
    case("overlapping-spans", "mxfp4", overlap, 1, {("TENSOR_SPAN", E, "model.layers.2.mlp.experts.3.up_proj.weight_scale")}),
    case("hole-between-tensors", "w4a8", hole, 1, {("TENSOR_SPAN", E, "model.layers.1.mlp.experts.2.gate_proj.weight_scale_2")}),
    case("tensor-in-two-shards", "ct", two_shards, 1, {("TENSOR_IN_TWO_SHARDS", E, "model.norm.weight"), ("SHARD_TENSOR_NOT_IN_INDEX", E, "model.norm.weight")}),
    case("index-points-to-missing-shard", "mxfp4", index_entry("model.norm.weight", "model-00009-of-00009.safetensors"), 1, {("SHARD_MISSING", E, None), ("SHARD_TENSOR_NOT_IN_INDEX", E, "model.norm.weight")}),
    case("stray-shard", "w4a8", stray, 0, {("SHARD_STRAY", W, None)}),
    case("index-absolute-path", "mxfp4", index_entry("model.norm.weight", "/etc/passwd"), 1, {("INDEX_UNSAFE_PATH", E, None), ("SHARD_TENSOR_NOT_IN_INDEX", E, "model.norm.weight")}),
    case("index-dotdot-path", "ct", index_entry("model.norm.weight", "../outside.safetensors"), 1, {("INDEX_UNSAFE_PATH", E, None), ("SHARD_TENSOR_NOT_IN_INDEX", E, "model.norm.weight")}),
    case("symlink-escape", "mxfp4", link_escape, 1, {("SYMLINK_ESCAPE", E, None)}),
    case("bad-total-size", "ct", total_size, 0, {("TOTAL_SIZE_MISMATCH", W, None)}),
    # -- coverage --
    case("missing-weight-scale", "mxfp4", drop(SCALE), 1, {("QUANT_TENSOR_MISSING", E, SCALE)}),
    case("missing-weight-scale-2", "w4a8", drop(f"{EXPERT}.weight_scale_2"), 1, {("QUANT_TENSOR_MISSING", E, f"{EXPERT}.weight_scale_2")}),
    case("expert-gap", "ct", expert_gap, 1, {("EXPERT_GAP", E, "model.layers.2.mlp.experts.2")}),
    case("layer-beyond-config", "mxfp4", extra_layer, 1, {("LAYER_UNEXPECTED", E, "model.layers.3.input_layernorm.weight")}),
    case("mtp-declared-absent", "w4a8", config(lambda c: c.update(num_nextn_predict_layers=1)), 0, {("MTP_ABSENT", INFO, None)}),
    case("module-split-across-shards", "mxfp4", move(SCALE), 0, {("MODULE_SPLIT", W, f"{EXPERT}.weight")}),
    case("input-scale-dynamic", "w4a8", add(f"{EXPERT}.input_scale", np.ones((), np.float32), f"{EXPERT}.weight"), 1, {("QUANT_TENSOR_UNEXPECTED", E, f"{EXPERT}.input_scale")}),
    # -- layout --
    case("wrong-group-size-scale-shape", "mxfp4", set_tensor(SCALE, lambda a: np.repeat(a, 2, axis=1)), 1, {("QUANT_SHAPE", E, SCALE)}),
    case("quantized-router", "mxfp4", quantize_mx("model.layers.1.mlp.gate"), 1, {("UNQUANTIZABLE_QUANTIZED", E, "model.layers.1.mlp.gate.weight")}),
    case("quantized-lm-head-multimodal", "mxfp4-mm", quantize_mx("language_model.lm_head"), 1, {("UNQUANTIZABLE_QUANTIZED", E, "language_model.lm_head.weight")}),
    case("quantized-vision-linear", "ct-mm", quantize_ct("vision_tower.encoder.blocks.0.wo"), 1, {("UNQUANTIZABLE_QUANTIZED", E, "vision_tower.encoder.blocks.0.wo.weight_packed")}),
    case("excluded-module-with-scale", "mxfp4", add(f"{O_PROJ}.weight_scale", np.full((128, 4), 120, np.uint8), f"{O_PROJ}.weight"), 1, {("EXCLUDED_QUANTIZED", E, f"{O_PROJ}.weight")}),
    case("excluded-but-quantized-config", "ct", config(lambda c: c["quantization_config"]["ignore"].append(EXPERT)), 1, {("EXCLUDED_QUANTIZED", E, f"{EXPERT}.weight_packed")}),
    case("nested-quant-config-conflict", "ct-mm", config(mm_conflict), 1, {("CONFIG_QUANT_CONFLICT", E, None)}),
    case("w4a8-stage2-asymmetric", "w4a8", config(w4a8_stage2), 1, {("CONFIG_QUANT", E, None)}),
    case("w4a8-pack-method-linear-warning-only", "w4a8", config(lambda c: c["quantization_config"]["export"].update(pack_method="order")), 0, {("PACK_METHOD", W, None)}),
    case("ct-actorder-group-no-g-idx", "ct", ct_weights(actorder="group"), 1, G_IDX),
    # -- numbers --
    case("e8m0-nan-byte-0xff", "mxfp4", poke(SCALE, (0, 0), 0xFF), 1, {("E8M0_NAN", E, SCALE)}, level=SC),
    case("e8m0-zero-byte-warning-only", "mxfp4", poke(SCALE, (0, 0), 0), 0, {("E8M0_ZERO", W, SCALE)}, level=SC),
    case("router-bias-bf16", "mxfp4", set_tensor(BIAS, to_bf16), 0, {("ROUTER_BIAS_DTYPE", W, BIAS)}, level=SC),
    case("router-bias-nan", "w4a8", poke(BIAS, (0,), np.nan), 1, {("ROUTER_BIAS_NONFINITE", E, BIAS)}, level=SC),
    case("bf16-tensor-inf", "ct", poke("model.norm.weight", (3,), np.inf), 1, {("TENSOR_NONFINITE", E, "model.norm.weight")}, level=SC),
    case("w4a8-scale-2-max-off-warning-only", "w4a8", set_tensor(f"{EXPERT}.weight_scale_2", lambda a: a * np.float32(0.5)), 0, {("W4A8_SCALE2_MAX", W, f"{EXPERT}.weight_scale_2")}, level=SC),
    case("w4a8-scale-2-above-bound", "w4a8", poke(f"{EXPERT}.weight_scale_2", (0,), 70.0), 1, {("W4A8_SCALE2_MAX", E, f"{EXPERT}.weight_scale_2")}, level=SC),
    case("w4a8-weight-scale-zero", "w4a8", set_tensor(f"{EXPERT}.weight_scale", lambda a: a * 0), 1, {("SCALE_ZERO", E, f"{EXPERT}.weight_scale")}, level=SC),
    case("ct-scale-negative", "ct", poke(SCALE, (0, 0), -0.5), 1, {("SCALE_NEGATIVE", E, SCALE)}, level=SC),
    case("ct-scale-nan", "ct", poke(SCALE, (1, 1), np.nan), 1, {("SCALE_NONFINITE", E, SCALE)}, level=SC),
    case("swapped-nibble-order", "mxfp4", set_tensor(f"{EXPERT}.weight", nibble_swap), 1, {("REPRO_MISMATCH", E, f"{EXPERT}.weight"), ("REPRO_UNCORRELATED", E, f"{EXPERT}.weight")}, source=True),
    case("ct-weight-shape-value-mismatch", "ct", poke(f"{EXPERT}.weight_shape", (1,), 64), 1, {("QUANT_SHAPE", E, f"{EXPERT}.weight_shape")}, level=SC),
    case("ct-scale-zero-nonzero-codes", "ct", poke(SCALE, (0, 0), 0.0), 0, {("SCALE_ZERO", W, SCALE)}, level=SC),
    # vLLM allocates the scales from the config's group (compressed_tensors_moe_wna16_marlin.py
    # create_weights: num_groups_w13 = hidden_size // group_size) and the weight loader's copy
    # of a group-32 tensor into it fails: each scale's shape, the config itself is loadable
    case("ct-config-group-size-128", "ct", ct_weights(group_size=128), 1, first_listed("QUANT_SHAPE", ".weight_scale")),
    *INT4_GROUP_CASES,
    case("ream-config-experts-vs-tensors", "w4a8", config(lambda c: c.update(n_routed_experts=6)), 1, {("EXPERT_GAP", E, "model.layers.1.mlp.experts.4"), ("EXPERT_GAP", E, "model.layers.1.mlp.experts.5"), ("EXPERT_GAP", E, "model.layers.2.mlp.experts.4"), ("EXPERT_GAP", E, "model.layers.2.mlp.experts.5"), ("SHAPE_MISMATCH", E, "model.layers.1.mlp.gate.weight"), ("SHAPE_MISMATCH", E, BIAS), ("SHAPE_MISMATCH", E, "model.layers.2.mlp.gate.weight"), ("SHAPE_MISMATCH", E, "model.layers.2.mlp.gate.e_score_correction_bias")}),
    case("mxfp4-quantized-vision-linear", "mxfp4-mm", quantize_mx("vision_tower.encoder.blocks.0.mlp.fc0"), 1, {("UNQUANTIZABLE_QUANTIZED", E, "vision_tower.encoder.blocks.0.mlp.fc0.weight")}),
    # -- formats --
    case("nvfp4-config-exit-2", "mxfp4", config(nvfp4), 2, {("FORMAT_UNSUPPORTED", E, None)}),
    case("plain-bf16", "mxfp4", replace_with_bf16_source, 0, {("FORMAT_NOT_NUMERIC", INFO, None)}),
    # vLLM Fp8Config builds every Linear FP8 with a weight_scale_inv it never loads (filled with float32's
    # minimum, create_fp8_scale_parameter), casts the BF16 weights in and, the model being quantized, skips
    # DefaultModelLoader's missing-weights check: it loads and decodes wrong (DeepSeekFP8Block.all_bf16_why)
    case("fp8-block-config", "bf16", config(lambda c: c.update(quantization_config={"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]})), 1, {("NOTHING_QUANTIZED", E, None)}, removed=frozenset({("FORMAT_NOT_NUMERIC", INFO, None)})),
    # -- must pass --
    case("must-pass-w4a8-weight-scale-shape-1", "w4a8", all_tensors(".weight_scale", lambda a: a.reshape(1)), 0, set(), level=SC),
    case("must-pass-ct-weight-shape-i64", "ct", all_tensors(".weight_shape", lambda a: a.astype(np.int64)), 0, set(), level=SC),
    case("must-pass-multimodal-ct-clean-copy", "ct-mm", lambda p: None, 0, set(), level=SC),
    # -- issue 12 (files): non-regular files are reported, never opened (a FIFO blocked forever)
    case("config-json-is-a-fifo", "mxfp4", fifo("config.json"), 1, {("FILE_NOT_REGULAR", E, None)}),
    case("index-is-a-fifo", "w4a8", fifo(INDEX), 1, {("FILE_NOT_REGULAR", E, None)}),
    case("shard-is-a-fifo", "ct", fifo("shard"), 1, {("FILE_NOT_REGULAR", E, None)}),
    case("shard-is-a-socket", "mxfp4", socket_shard, 1, {("FILE_NOT_REGULAR", E, None)}),
    case("shard-is-a-directory", "ct", directory_shard, 1, {("FILE_NOT_REGULAR", E, None)}),
    # -- issue 12 (files): as lenient as the loaders, as strict as vLLM
    case("must-pass-index-without-total-size", "ct", index_metadata(lambda d: d["metadata"].pop("total_size")), 0, set()),
    case("index-without-metadata-warning-only", "mxfp4", index_metadata(lambda d: d.pop("metadata")), 0, {("INDEX_PARSE", W, None)}),
    case("index-total-size-string-warning-only", "mxfp4", index_metadata(lambda d: d["metadata"].update(total_size="12")), 0, {("TOTAL_SIZE_MISMATCH", W, None)}),
    case("index-dot-slash-entries", "w4a8", dot_slash_entries, 1, {("INDEX_PATH_NOT_PLAIN", E, None)}),
    case("must-pass-header-entry-extra-key", "ct", extra_entry_key, 0, set()),
    case("index-missing-shards-checked", "ct", lambda p: (p / INDEX).unlink(), 1, {("INDEX_MISSING", E, None)}),
    case("f4-tensor-is-read-not-the-shard-refused", "mxfp4", add_raw_tensor("model.layers.1.mlp.gate.packed_f4", "F4", [2, 8], 8), 1, {("TENSOR_UNEXPECTED", E, "model.layers.1.mlp.gate.packed_f4")}, level=Level.FULL),
    case("index-names-a-tensor-no-shard-holds", "bf16", index_metadata(lambda d: d["weight_map"].update({f"{BIAS}.ghost": sorted(d["weight_map"].values())[0]})), 1, {("INDEX_TENSOR_NOT_IN_SHARD", E, f"{BIAS}.ghost")}),
]


# -- issue 12 items 2-5 and 9 (configs, exclude entries, loader defaults) -------------------------
# Each case below failed on main at 4521362 (a cascade, a hang, a wrong exit) unless it is marked
# "fires" (a check no test fired before) or "must pass".


def both(*injectors: Any) -> Any:
    def run(p: Path) -> None:
        for inject in injectors:
            inject(p)
    return run


def vision_drop(*keys: str) -> Any:
    return config(lambda c: [c["vision_config"].pop(k) for k in keys])


POS_EMB = "vision_tower.patch_embed.pos_emb.weight"
LM_O_PROJ = "language_model.model.layers.1.self_attn.o_proj"
Q_A = "model.layers.1.self_attn.q_a_proj"


def k25_exclude_without_prefix(c: dict[str, Any]) -> None:
    # the classic K2.5/K2.6 mistake: K2 names in a checkpoint whose modules are language_model.*
    q = c["quantization_config"]
    q["exclude"] = [e.removeprefix("language_model.") for e in q["exclude"]]


def ignore_map(fn: Any) -> Any:
    def edit_ignore(c: dict[str, Any]) -> None:
        q = c["quantization_config"]
        q["ignore"] = fn(q["ignore"])
    return config(edit_ignore)


def attention_as(entry: str) -> Any:
    """The exact self_attn ignore names replaced by one regex entry."""
    return ignore_map(lambda ig: [e for e in ig if ".self_attn." not in e] + [entry])


def exclude_drop(name: str) -> Any:
    return config(lambda c: c["quantization_config"]["exclude"].remove(name))


ARCH_SKIPPED = {("CONFIG_ARCH", E, None), ("COVERAGE_SKIPPED", INFO, None)}

CASES += [
    # item 2: loader defaults (vLLM KimiK25VisionConfig: init_pos_emb_height/width = 64)
    case("vision-pos-emb-defaults-match-tensor", "ct-mm", both(vision_drop("init_pos_emb_height", "init_pos_emb_width"), set_tensor(POS_EMB, lambda a: np.zeros((64, 64, a.shape[-1]), a.dtype))), 0, set()),
    case("vision-pos-emb-defaults-mismatch-tensor", "mxfp4-mm", vision_drop("init_pos_emb_height", "init_pos_emb_width"), 1, {("SHAPE_MISMATCH", E, POS_EMB)}),
    case("vision-config-absent-defaults-contradict", "ct-mm", config(lambda c: c.pop("vision_config")), 1, ARCH_SKIPPED),
    case("text-hidden-size-absent-default-contradicts", "mxfp4-mm", config(lambda c: c["text_config"].pop("hidden_size")), 1, ARCH_SKIPPED),
    case("quantized-embedding-is-not-a-hidden-size-problem", "mxfp4", quantize_mx("model.embed_tokens"), 1, {("UNQUANTIZABLE_QUANTIZED", E, "model.embed_tokens.weight")}),
    case("first-k-dense-absent-default-3", "mxfp4", config(lambda c: c.pop("first_k_dense_replace")), 1, {("MLP_KIND_MISMATCH", E, None)}),
    # item 3: one root cause, one finding (plus one summary)
    case("text-hidden-size-not-integer", "ct", config(lambda c: c.update(hidden_size="128")), 1, ARCH_SKIPPED),
    case("vision-hidden-size-not-integer", "ct-mm", config(lambda c: c["vision_config"].update(hidden_size="x")), 1, ARCH_SKIPPED),
    case("layer-declared-absent", "mxfp4", config(lambda c: c.update(num_hidden_layers=4)), 1, {("TENSOR_MISSING", E, "model.layers.3")}),
    # item 5: lying counts are bounded by the headers before the inventory is built
    case("num-hidden-layers-1e8", "mxfp4", config(lambda c: c.update(num_hidden_layers=100_000_000)), 1, ARCH_SKIPPED),
    case("n-routed-experts-1e7", "w4a8", config(lambda c: c.update(n_routed_experts=10**7)), 1, ARCH_SKIPPED),
    case("mtp-layers-1e8", "ct", config(lambda c: c.update(num_nextn_predict_layers=10**8)), 1, ARCH_SKIPPED),
    case("vision-blocks-1e8", "mxfp4-mm", config(lambda c: c["vision_config"].update(num_hidden_layers=10**8)), 1, ARCH_SKIPPED),
    # item 9
    case("rms-norm-eps-nan", "ct", config(lambda c: c.update(rms_norm_eps=float("nan"))), 1, {("CONFIG_ARCH", E, None)}),
    # item 4: exclude/ignore entries (near misses, invalid regexes, re.match anchoring)
    case("k25-exclude-without-language-model-prefix", "mxfp4-mm", config(k25_exclude_without_prefix), 1, {("EXCLUDE_UNMATCHED", E, None)}),
    case("ignore-invalid-regex", "ct", ignore_map(lambda ig: [*ig, "re:(unclosed"]), 1, {("EXCLUDE_INVALID", E, None)}),
    case("ignore-regex-anchored-by-match", "ct", attention_as(r"re:self_attn\."), 1, {("EXCLUDE_UNMATCHED", E, None)}),
    case("ignore-typo-warning-only", "ct", ignore_map(lambda ig: [*ig, "model.layers.1.self_attn.o_prj"]), 0, {("EXCLUDE_UNMATCHED", W, None)}),
    case("must-pass-ignore-regex-with-leading-dot-star", "ct", attention_as(r"re:.*self_attn\."), 0, set()),
    # checks no test fired before
    case("fires-tensor-missing", "mxfp4", drop("model.norm.weight"), 1, {("TENSOR_MISSING", E, "model.norm.weight")}),
    case("fires-unquant-dtype-f32", "mxfp4", set_tensor(f"{O_PROJ}.weight", lambda a: a.astype(np.float32)), 0, {("UNQUANT_DTYPE", W, f"{O_PROJ}.weight")}),
    case("fires-quant-dtype-unusual-f16", "ct", set_tensor(SCALE, lambda a: a.astype(np.float16)), 0, {("QUANT_DTYPE_UNUSUAL", W, SCALE)}),
    case("fires-quant-dtype", "mxfp4", set_tensor(SCALE, lambda a: a.astype(np.int8)), 1, {("QUANT_DTYPE", E, SCALE)}),
    case("fires-tensor-unexpected", "mxfp4", add(f"{O_PROJ}.extra", np.ones(4, np.float32), f"{O_PROJ}.weight"), 1, {("TENSOR_UNEXPECTED", E, f"{O_PROJ}.extra")}),
    case("fires-exclude-glob", "mxfp4", exclude_add("*self_attn*"), 0, {("EXCLUDE_GLOB", W, None)}),
    case("fires-not-excluded-unquantized", "mxfp4", exclude_drop(O_PROJ), 1, {("NOT_EXCLUDED_UNQUANTIZED", E, f"{O_PROJ}.weight")}),
    case("fires-expert-extra", "ct", config(lambda c: c.update(n_routed_experts=3)), 1, {("EXPERT_EXTRA", E, "model.layers.1.mlp.experts.3.down_proj.weight_shape"), ("EXPERT_EXTRA", E, "model.layers.2.mlp.experts.3.down_proj.weight_shape"), ("SHAPE_MISMATCH", E, "model.layers.1.mlp.gate.weight"), ("SHAPE_MISMATCH", E, BIAS), ("SHAPE_MISMATCH", E, "model.layers.2.mlp.gate.weight"), ("SHAPE_MISMATCH", E, "model.layers.2.mlp.gate.e_score_correction_bias")}),
    case("fires-fused-pair-mismatch", "mxfp4", both(exclude_drop(Q_A), quantize_mx(Q_A)), 1, {("FUSED_PAIR_MISMATCH", E, f"{Q_A}.weight")}),
]


# -- --source verdicts (issue 12, item 1): a claimed profile whose bytes differ is an error, and a
# run that verified nothing is never OK. Each case exits 0 on the validator of 4521362. --------

PROJECTIONS = ("down_proj", "gate_proj", "up_proj")
#: The quantized modules of the generated MXFP4 twin, in the order --source visits them.
MX_MODULES = sorted([f"model.layers.0.mlp.{p}" for p in PROJECTIONS] + [
    f"model.layers.{layer}.mlp.experts.{e}.{p}"
    for layer in (1, 2) for e in range(4) for p in PROJECTIONS])


def listed(check: str, severity: str, suffix: str) -> set[tuple[str, str, str | None]]:
    """The first LISTED per-module findings of ``check`` over every MXFP4 module, and the one
    that counts the rest."""
    return {(check, severity, f"{m}{suffix}") for m in MX_MODULES[:LISTED]} | {
        (check, severity, None)}


def scales_from(other: str, name: str, rows: int) -> Any:
    """The first ``rows`` rows of scale tensor ``name`` replaced by those of ``other``."""
    def run(p: Path) -> None:
        def fn(d: Tensors) -> None:
            d[find(d, name)][name][:rows] = d[find(d, other)][other][:rows]
        edit(p, fn)
    return run


def relabel(name: str, dtype: str) -> Any:
    """Change the header dtype of ``name`` keeping its bytes (BF16 read as F16)."""
    def run(p: Path) -> None:
        shard = p / index(p)["weight_map"][name]
        header, data = raw_header(shard)
        header[name]["dtype"] = dtype
        write_raw(shard, header, data)
    return run


def zero_expert(prefix: str) -> Any:
    def run(p: Path) -> None:
        def fn(d: Tensors) -> None:
            for proj in PROJECTIONS:
                n = f"{prefix}.{proj}.weight"
                d[find(d, n)][n] = np.zeros_like(d[find(d, n)][n])
        edit(p, fn)
    return run


def double_row(a: Any, row: int = 3) -> Any:
    a[row] *= 2
    return a


def scale_mode(mode: str) -> Any:
    return config(lambda c: c["quantization_config"]["global_quant_config"]["weight"].update(
        scale_calculation_mode=mode))


def floor_mode_scales_plus_one(p: Path) -> None:
    scale_mode("floor")(p)
    all_tensors(".weight_scale", lambda a: a + 1)(p)


L2 = "model.layers.2.mlp.experts.1.gate_proj"
ZEROED = "model.layers.1.mlp.experts.2"
CASES += [
    case("repro-e8m0-scales-all-plus-one", "mxfp4", all_tensors(".weight_scale", lambda a: a + 1), 1, listed("REPRO_MISMATCH", E, ".weight_scale") | listed("REPRO_ERROR_HIGH", E, ".weight"), source=True),
    case("repro-scales-swapped-in-from-another-layer", "mxfp4", scales_from(f"{L2}.weight_scale", SCALE, 32), 1, {("REPRO_MISMATCH", E, SCALE), ("REPRO_ERROR_HIGH", W, f"{EXPERT}.weight")}, source=True),
    case("repro-w4a8-weight-scale-doubled", "w4a8", set_tensor(f"{EXPERT}.weight_scale", lambda a: a * 2), 1, {("REPRO_MISMATCH", E, f"{EXPERT}.weight_scale"), ("REPRO_ERROR_HIGH", E, f"{EXPERT}.weight")}, source=True),
    case("repro-w4a8-one-weight-scale-2-row-doubled", "w4a8", set_tensor(f"{EXPERT}.weight_scale_2", double_row), 1, {("REPRO_MISMATCH", E, f"{EXPERT}.weight_scale_2")}, source=True),
    case("repro-ct-bf16-scale-relabelled-f16", "ct", relabel(SCALE, "F16"), 1, {("QUANT_DTYPE_UNUSUAL", W, SCALE), ("REPRO_MISMATCH", E, SCALE), ("REPRO_ERROR_HIGH", E, f"{EXPERT}.weight_packed")}, source=True),
    case("repro-zeroed-expert", "mxfp4", zero_expert(ZEROED), 1, {(c, E, f"{ZEROED}.{p}.weight") for c in ("REPRO_MISMATCH", "REPRO_UNCORRELATED") for p in PROJECTIONS}, source=True),
    case("repro-source-holds-none-of-the-modules", "mxfp4-mm", lambda p: None, 1, {("REPRO_NOTHING_VERIFIED", E, None)}, source="mxfp4"),
    # no profile reproduces Quark's "floor" rule: one warning, and the numbers alone are judged
    case("repro-quark-floor-mode-bytes-unverified-warning-only", "mxfp4", scale_mode("floor"), 0, {("REPRO_MISMATCH", W, None)}, source=True),
    case("repro-quark-floor-mode-scales-all-plus-one", "mxfp4", floor_mode_scales_plus_one, 1, {("REPRO_MISMATCH", W, None)} | listed("REPRO_ERROR_HIGH", E, ".weight"), source=True),
]


# -- issue 14: the FP8 block and NVFP4 descriptors -------------------------------------------------

MO_EXPERT = "model.layers.2.mlp.experts.1"
DENSE_GATE = "model.layers.0.mlp.gate_proj"  # [256, 128]: a 2x1 scale grid
FP8_W = f"{EXPERT}.weight"


def _fp8_pow2_but(keep: str, declare: bool = True) -> Callable[[Path], None]:
    """Declare ue8m0 scales (unless not ``declare``) and round every weight_scale_inv up to a
    power of two, but ``keep``'s."""
    def run(path: Path) -> None:
        if declare:
            config(lambda c: c["quantization_config"].update(scale_fmt="ue8m0"))(path)

        def inner(data: Tensors) -> None:
            for tensors in data.values():
                for name, a in tensors.items():
                    if name.endswith(".weight_scale_inv") and name != keep:
                        tensors[name] = np.exp2(np.ceil(np.log2(a))).astype(np.float32)
        edit(path, inner)
    return run


#: DeepGEMM per_block_cast_to_fp8's scale for an all-zero tile: float32(max(0, 1e-4)) / 448
DEEPGEMM_ZERO = float(np.float32(1e-4) / np.float32(448.0))


def _fill(value: float) -> Callable[[Any], Any]:
    """Every element of a tensor set to ``value`` (in its own dtype)."""
    return lambda a: np.full(a.shape, value, a.dtype)


def _fp8_bytes(value: int) -> Callable[[Any], Any]:
    """Every code of an FP8 weight set to the byte ``value``."""
    return lambda a: np.full(a.shape, value, np.uint8).view(a.dtype)


def _four_over_six(scale_byte: int, first_block: int | None = None) -> Callable[[Path], None]:
    """MO_EXPERT's down_proj as ModelOpt's Four-Over-Six export writes an all-"M=4" tensor: every
    code 4 (0x66), every block scale the E4M3 byte ``scale_byte``; ``first_block``: the byte of
    every code pair of block [0, 0] instead."""
    def codes(a: Any) -> Any:
        out = np.full_like(a, 0x66)
        if first_block is not None:
            out[0, :8] = first_block
        return out
    return both(set_tensor(f"{MO_EXPERT}.down_proj.weight", codes),
                set_tensor(f"{MO_EXPERT}.down_proj.weight_scale", _fp8_bytes(scale_byte)))


def _four_over_six_from_source(path: Path) -> None:
    """MO_EXPERT's down_proj re-quantized from its BF16 source (tests/data/producers/src-bf16)
    as ModelOpt's Four-Over-Six export writes a tensor whose every block took the amax
    multiplier 1.5 (spec/nvfp4.md, "ModelOpt Four Over Six"): ``weight_scale_2 = f32(G)/1536``,
    block scale ``e4m3(f32(f32(1.5 b / 6) * 256) / f32(G / 6))``, codes of ``x / (s *
    weight_scale_2)``. A valid 4/6 tensor; not a claim about which blocks MSE picks."""
    from mxformats.schemes.mx import pack_fp4
    from mxformats.schemes.nvfp4 import e2m1_codes

    name = f"{MO_EXPERT}.down_proj"
    w = source_weight(name)
    f32 = np.float32
    blocks = np.asarray(w, f32).reshape(w.shape[0], -1, 16)
    b = np.abs(blocks).max(axis=-1)
    g = f32(b.max())
    s = (b * f32(1.5) / f32(6)).astype(f32)
    s = np.where(s == 0, f32(1), s)
    scales = np.clip(s * f32(256) / (g / f32(6)), 2.0**-9, 448.0).astype(f32).astype(
        ml_dtypes.float8_e4m3fn)
    scale_2 = f32(g / f32(1536))
    codes = e2m1_codes(blocks / (scales.astype(f32)[..., None] * scale_2)).reshape(w.shape)

    def inner(data: Tensors) -> None:
        for param, value in (("weight", pack_fp4(codes)), ("weight_scale", scales),
                             ("weight_scale_2", np.asarray(scale_2))):
            data[find(data, f"{name}.{param}")][f"{name}.{param}"] = value
    edit(path, inner)


def _up_scale_off_by(param: str, tolerances: float) -> Callable[[Path], None]:
    """MO_EXPERT's up_proj global scale set to gate's plus ``tolerances`` times vLLM's
    ``torch.allclose(gate, up)`` tolerance, ``1e-08 + 1e-05 * |gate|`` (its defaults; the
    exact float32 edge is tests/test_validate_fused_scales.py's, against torch itself): 0.5
    inside it, 2 outside, so the atol that decides at ModelOpt's magnitudes and the rtol that
    decides at compressed-tensors' are both held from both sides."""
    def inner(data: Tensors) -> None:
        gate, up = (f"{MO_EXPERT}.{p}.{param}" for p in ("gate_proj", "up_proj"))
        a = float(data[find(data, gate)][gate].reshape(-1)[0])
        shard = find(data, up)
        data[shard][up] = np.full_like(data[shard][up], a + tolerances * (1e-08 + 1e-05 * a))
    return lambda path: edit(path, inner)


def _first_code_flipped(a: Any) -> Any:
    """The lowest mantissa bit of element [0, 0] flipped (never a NaN: 0x7E is not touched)."""
    codes = a.view(np.uint8).copy()
    codes[0, 0] ^= 1 if codes[0, 0] & 0x7F != 0x7E else 2
    return codes.view(a.dtype)


def _modelopt_exclude(old: str, new: str) -> Callable[[Path], None]:
    """Replace exclude entry ``old`` by ``new`` in both ModelOpt config forms."""
    def swap(entries: list[str]) -> None:
        entries[entries.index(old)] = new

    def run(path: Path) -> None:
        config(lambda c: swap(c["quantization_config"]["ignore"]))(path)
        json_file("hf_quant_config.json", lambda d: swap(d["quantization"]["exclude_modules"]))(path)
    return run


def _never_minus_8(path: Path) -> None:
    """Every INT4 code -8 (compressed-tensors nibble 0, stored q+8) turned into -7, in every
    weight_packed: what a QAT checkpoint that never uses -8 looks like (groups stay tight)."""
    def inner(data: Tensors) -> None:
        for tensors in data.values():
            for name in [n for n in tensors if n.endswith(".weight_packed")]:
                b = tensors[name].view(np.uint8).copy()
                b = np.where(b & 0x0F == 0, b | 0x01, b)
                b = np.where(b & 0xF0 == 0, b | 0x10, b)
                tensors[name] = b.view(np.int32).reshape(tensors[name].shape)
    edit(path, inner)


def _mixed_table(fn: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    """Edit the quantized_layers table of both ModelOpt config forms alike."""
    def run(path: Path) -> None:
        config(lambda c: fn(c["quantization_config"]["quantized_layers"]))(path)
        json_file("hf_quant_config.json", lambda d: fn(d["quantization"]["quantized_layers"]))(path)
    return run


#: NVFP4 tensors in a MIXED_PRECISION routed-expert layer the table calls FP8_PB_WO: the layout
#: errors, and the config error (vLLM 0.33.0 builds FP8_PB_WO experts with Fp8MoEMethod, whose
#: weight_scale_inv a ModelOpt weight_scale does not load into)
PB_WO_LAYER = {("CONFIG_QUANT", E, None), ("QUANT_DTYPE", E, f"{MO_EXPERT}.down_proj.weight"),
               ("QUANT_SHAPE", E, f"{MO_EXPERT}.down_proj.weight"),
               ("QUANT_DTYPE", E, f"{MO_EXPERT}.down_proj.weight_scale"),
               ("QUANT_SHAPE", E, f"{MO_EXPERT}.down_proj.weight_scale"),
               ("QUANT_TENSOR_UNEXPECTED", E, f"{MO_EXPERT}.down_proj.weight_scale_2"),
               ("QUANT_TENSOR_UNEXPECTED", E, f"{MO_EXPERT}.down_proj.input_scale")}


def _mixed_algo(layer: str, algo: str) -> Callable[[Path], None]:
    return _mixed_table(lambda t: t[layer].update(quant_algo=algo))


def _fp8_block_module(name: str) -> Callable[[Path], None]:
    """Module ``name`` (ModelOpt NVFP4) rewritten as a well-formed FP8 block module: E4M3
    codes of 1.0 at its logical shape and float32 scales of 0.01 per 128 x 128 tile."""
    def fn(data: Tensors) -> None:
        shard = find(data, f"{name}.weight")
        out, packed = data[shard][f"{name}.weight"].shape
        for tensor in [t for t in data[shard] if t.startswith(f"{name}.")]:
            del data[shard][tensor]
        data[shard][f"{name}.weight"] = np.full((out, 2 * packed), 0x38, np.uint8).view(
            ml_dtypes.float8_e4m3fn)
        data[shard][f"{name}.weight_scale"] = np.full((-(-out // 128), -(-2 * packed // 128)),
                                                      0.01, np.float32)
    return lambda path: edit(path, fn)


def _drop_every(suffix: str) -> Callable[[Path], None]:
    """Delete every tensor whose name ends with ``suffix`` (a converter that never writes it)."""
    def run(path: Path) -> None:
        def fn(data: Tensors) -> None:
            for tensors in data.values():
                for name in [n for n in tensors if n.endswith(suffix)]:
                    del tensors[name]
        edit(path, fn)
    return run


def _ct_groups(**weights: Any) -> Callable[[Path], None]:
    """Update the weights scheme of every compressed-tensors config group."""
    return config(lambda c: [g["weights"].update(**weights)
                             for g in c["quantization_config"]["config_groups"].values()])


def _hf_quant(fn: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    return json_file("hf_quant_config.json", lambda d: fn(d["quantization"]))


def _nvfp4_lm_head_scales(path: Path) -> None:
    def inner(data: Tensors) -> None:
        data[find(data, "lm_head.weight")]["lm_head.weight_scale"] = \
            np.full((640, 8), 0x38, np.uint8).view(ml_dtypes.float8_e4m3fn)
    edit(path, inner)


def _scales_as(suffix: str, dtype: Any) -> Callable[[Path], None]:
    """Every scale tensor whose name ends with ``suffix`` stored as ``dtype`` (a converter
    that casts the scales)."""
    def run(path: Path) -> None:
        def inner(data: Tensors) -> None:
            for tensors in data.values():
                for name in [n for n in tensors if n.endswith(suffix)]:
                    tensors[name] = tensors[name].astype(dtype)
        edit(path, inner)
    return run


def _ue8m0_requantized(declare: bool, nudge: str = "", from_source: bool = False
                       ) -> Callable[[Path], None]:
    """Every weight of a DeepSeek-layout file re-quantized with power-of-two scales: from its
    own decoded weights, as vLLM's ``requant_weight_ue8m0_inplace`` does for DeepGEMM's UE8M0
    kernels (``vllm/model_executor/layers/quantization/utils/fp8_utils.py``:
    ``per_block_cast_to_fp8(w_dq, use_ue8m0=True)``), or, ``from_source``, from its BF16
    source (the fixtures' src-bf16: the bytes ``--source`` reproduces with the ``ue8m0``
    profile); ``scale_fmt: ue8m0`` declared only when ``declare``; ``nudge``: a scale tensor
    whose last scale is then moved one float32 ulp off its power of two."""
    from mxformats import fast

    source = Path(__file__).resolve().parent / "data" / "producers" / "src-bf16"
    weights = {n: a for shard in shards(source) for n, a in
               read_safetensors(source / shard).items()} if from_source else {}

    def run(path: Path) -> None:
        if declare:
            config(lambda c: c["quantization_config"].update(scale_fmt="ue8m0"))(path)

        def inner(data: Tensors) -> None:
            for tensors in data.values():
                for name in [n for n in tensors if n.endswith(".weight_scale_inv")]:
                    w = name.removesuffix("_scale_inv")
                    x = weights[w] if from_source else np.asarray(fast.dequantize_fp8_block(
                        np.ascontiguousarray(tensors[w]).view(np.uint8), tensors[name],
                        block=(128, 128), profile="deepseek"), np.float32)
                    q = fast.quantize_fp8_block(x, block=(128, 128), profile="ue8m0")
                    tensors[w] = q.codes.view(ml_dtypes.float8_e4m3fn)
                    tensors[name] = q.scales.copy()
                    if name == nudge:
                        tensors[name][-1, -1] = np.nextafter(q.scales[-1, -1], np.float32(1))
        edit(path, inner)
    return run


#: in the DeepSeek fixture re-quantized to UE8M0, the weight with a tile whose largest |code|
#: lands in [224, 256): judged with the ue8m0 bound only where its scales are powers of two
UE8M0_LOOSE = "model.layers.0.self_attn.kv_b_proj"
#: the loaders' scale parameters are float32 and their weight_loader casts what the file holds
#: (FP8BlockDescriptor.loader_scale_source: vLLM fp8_utils.create_fp8_scale_parameter,
#: parameter.BasevLLMParameter._assert_and_load's Tensor.copy_, commit 1436674b)
_VLLM_SCALE_CAST = "vLLM create_fp8_scale_parameter float32 + weight_loader copy_"

CASES += [
    # issue 26 §2, on the producer fixtures: what the loaders cast, we accept (_VLLM_SCALE_CAST)
    case("producer-ct-fp8-block-scales-f32-load", "ct-fp8-prod", _scales_as(".weight_scale", np.float32), 0, set(), level=Level.FULL),
    case("producer-fp8-block-scale-inv-bf16-loads-warning", "fp8-prod", set_tensor(f"{EXPERT}.weight_scale_inv", lambda a: a.astype(ml_dtypes.bfloat16)), 0, {("QUANT_DTYPE_UNUSUAL", W, f"{EXPERT}.weight_scale_inv")}, level=Level.FULL),
    case("producer-fp8-block-scale-inv-f16-loads-warning", "fp8-prod", set_tensor(f"{EXPERT}.weight_scale_inv", lambda a: a.astype(np.float16)), 0, {("QUANT_DTYPE_UNUSUAL", W, f"{EXPERT}.weight_scale_inv")}, level=Level.FULL),
    # a zero tile's DeepGEMM fingerprint 1e-4/448 rounded with the rest to BF16 is still DeepGEMM's
    case("producer-fp8-block-scale-inv-bf16-zero-tile", "fp8-prod", both(set_tensor(FP8_W, _fp8_bytes(0)), set_tensor(f"{EXPERT}.weight_scale_inv", lambda a: np.full(a.shape, DEEPGEMM_ZERO, ml_dtypes.bfloat16))), 0, {("QUANT_DTYPE_UNUSUAL", W, f"{EXPERT}.weight_scale_inv")}, level=Level.FULL),
    # the BF16 producer source declaring DeepSeek FP8: loads in vLLM and decodes wrong (see fp8-block-config)
    case("producer-bf16-declares-deepseek-fp8-block", "bf16-prod", config(lambda c: c.update(quantization_config={"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]})), 1, {("NOTHING_QUANTIZED", E, None)}, removed=frozenset({("FORMAT_NOT_NUMERIC", INFO, None)})),
    # an empty weight_map: vLLM's filter_duplicate_safetensors_files keeps only the shards an index names,
    # then DefaultModelLoader._prepare_weights raises "Cannot find any model weights": one root cause, one
    # finding (not one per unmatched exclude entry and per stray shard)
    case("producer-index-empty-weight-map-one-finding", "mxfp4-prod", index_metadata(lambda d: d.update(weight_map={})), 1, {("INDEX_PARSE", E, None)}),
    case("producer-fp8-index-empty-weight-map-one-finding", "fp8-prod", index_metadata(lambda d: d.update(weight_map={})), 1, {("INDEX_PARSE", E, None)}, level=Level.FULL),
    # F64 is not held exactly by the float32 parameter: copy_ would round it
    case("producer-fp8-block-scale-inv-f64-rejected", "fp8-prod", set_tensor(f"{EXPERT}.weight_scale_inv", lambda a: a.astype(np.float64)), 1, {("QUANT_DTYPE", E, f"{EXPERT}.weight_scale_inv")}),
    # a module's tensor in a dtype or shape its format does not accept is that module's one
    # finding, at every level and with --source: its bytes are not decoded as the format's
    # (no scale, magnitude or reproduction finding follows; a scale of one element no longer
    # crashes the E8M0 statistics)
    *(case(f"one-finding-{base}-{role}-relabelled-{dtype.lower()}", base, relabel(f"{EXPERT}.{role}", dtype), 1, {("QUANT_DTYPE", E, f"{EXPERT}.{role}")}, level=Level.FULL, source=True)
      for base, role, dtype in (("mxfp4-prod", "weight_scale", "I8"), ("w4a8-prod", "weight_scale", "U32"),
                                ("w4a8-prod", "weight_scale_2", "U32"), ("ct-prod", "weight_scale", "I16"),
                                ("nvfp4-mo", "weight_scale", "U8"), ("nvfp4-mo", "weight_scale_2", "U32"),
                                ("nvfp4-ct", "weight_global_scale", "U32"), ("fp8-prod", "weight_scale_inv", "U32"),
                                ("ct-fp8-prod", "weight_scale", "I16"))),
    # the same with a scale a row short (QUANT_SHAPE), and scales replaced by one F32 value
    *(case(f"one-finding-{base}-{role}-row-dropped", base, set_tensor(f"{EXPERT}.{role}", lambda a: a[:-1]), 1, {("QUANT_SHAPE", E, f"{EXPERT}.{role}")}, level=Level.FULL, source=True)
      for base, role in (("mxfp4-prod", "weight_scale"), ("w4a8-prod", "weight_scale_2"), ("ct-prod", "weight_scale"),
                         ("nvfp4-mo", "weight_scale"), ("nvfp4-ct", "weight_scale"), ("fp8-prod", "weight_scale_inv"),
                         ("ct-fp8-prod", "weight_scale"))),
    case("one-finding-mxfp4-expert-scale-one-f32", "mxfp4-prod", set_tensor(f"{EXPERT}.weight_scale", lambda a: np.ones(1, np.float32)), 1, {("QUANT_DTYPE", E, f"{EXPERT}.weight_scale"), ("QUANT_SHAPE", E, f"{EXPERT}.weight_scale")}, level=Level.FULL, source=True),
    case("one-finding-fp8-expert-scale-one-f32", "fp8-prod", set_tensor(f"{EXPERT}.weight_scale_inv", lambda a: np.ones(1, np.float32)), 1, {("QUANT_SHAPE", E, f"{EXPERT}.weight_scale_inv")}, level=Level.FULL, source=True),
    case("one-finding-mxfp4-scale-flattened", "mxfp4-prod", set_tensor(f"{EXPERT}.weight_scale", lambda a: a.reshape(-1)), 1, {("QUANT_SHAPE", E, f"{EXPERT}.weight_scale")}, level=Level.FULL, source=True),
    case("one-finding-mxfp4-lm-head-f32-scale", "mxfp4-prod", add("lm_head.weight_scale", np.ones([1], np.float32), "lm_head.weight"), 1, {("UNQUANTIZABLE_QUANTIZED", E, "lm_head.weight")}, level=Level.SCALES),
    # UE8M0 scales without scale_fmt (vLLM's requant_weight_ue8m0_inplace recipe): recognised
    # from the data, judged with the ue8m0 bound; one module off its powers of two is judged
    # with the 256 bound and the fingerprint goes with it
    case("producer-fp8-block-ue8m0-undeclared-loads", "fp8-prod", _ue8m0_requantized(False), 0, {("FINGERPRINT", INFO, None)}, level=Level.FULL),
    case("producer-fp8-block-ue8m0-declared-loads", "fp8-prod", _ue8m0_requantized(True), 0, set(), level=Level.FULL),
    # --source reproduces undeclared UE8M0 bytes with the ue8m0 profile, as declared ones
    case("producer-fp8-block-ue8m0-undeclared-reproduced", "fp8-prod", _ue8m0_requantized(False, from_source=True), 0, {("FINGERPRINT", INFO, None)}, level=Level.FULL, source=True),
    case("producer-fp8-block-ue8m0-declared-reproduced", "fp8-prod", _ue8m0_requantized(True, from_source=True), 0, set(), level=Level.FULL, source=True),
    case("producer-fp8-block-ue8m0-undeclared-one-module-not-pow2", "fp8-prod", _ue8m0_requantized(False, f"{UE8M0_LOOSE}.weight_scale_inv"), 1, {("FP8_TILE_NOT_TIGHT", E, f"{UE8M0_LOOSE}.weight")}, level=Level.FULL),
    case("producer-fp8-block-ue8m0-undeclared-zero-tile", "fp8-prod", both(_ue8m0_requantized(False), set_tensor(FP8_W, _fp8_bytes(0)), set_tensor(f"{EXPERT}.weight_scale_inv", _fill(2.0**-22))), 0, {("FINGERPRINT", INFO, None)}, level=Level.FULL),
]

CASES += [
    # DeepSeek FP8 block (K2-Instruct layout)
    case("fp8-block-clean-full-source", "fp8", lambda p: None, 0, set(), level=Level.FULL, source=True),
    case("fp8-block-scale-inv-missing-fp8-cast-bf16", "fp8", drop_tensor(f"{EXPERT}.weight_scale_inv"), 1, {("QUANT_TENSOR_MISSING", E, f"{EXPERT}.weight_scale_inv")}),
    case("fp8-block-scale-inv-nan", "fp8", set_tensor(f"{EXPERT}.weight_scale_inv", lambda a: np.full_like(a, np.nan)), 1, {("SCALE_NONFINITE", E, f"{EXPERT}.weight_scale_inv")}, level=Level.SCALES),
    case("fp8-block-scale-inv-negative", "fp8", set_tensor(f"{EXPERT}.weight_scale_inv", lambda a: -a), 1, {("SCALE_NEGATIVE", E, f"{EXPERT}.weight_scale_inv")}, level=Level.SCALES),
    case("fp8-block-tile-not-tight", "fp8", set_tensor(FP8_W, _fp8_bytes(0x38)), 1, {("FP8_TILE_NOT_TIGHT", E, FP8_W)}, level=Level.FULL),
    case("fp8-block-zero-tile-foreign-scale", "fp8", set_tensor(FP8_W, _fp8_bytes(0)), 0, {("FP8_ZERO_TILE_SCALE", W, f"{EXPERT}.weight_scale_inv")}, level=Level.FULL),
    case("fp8-block-pow2-scales-undeclared-fingerprint", "fp8", _fp8_pow2_but("", declare=False), 0, {("FINGERPRINT", INFO, None)}, level=Level.SCALES),
    case("fp8-block-ue8m0-declared-pow2-clean", "fp8", _fp8_pow2_but(""), 0, set(), level=Level.SCALES),
    case("fp8-block-one-scale-not-pow2-no-fingerprint", "fp8", _fp8_pow2_but(f"{EXPERT}.weight_scale_inv", declare=False), 0, set(), level=Level.SCALES),
    case("fp8-block-ue8m0-not-power-of-two", "fp8", _fp8_pow2_but(f"{EXPERT}.weight_scale_inv"), 1, {("FP8_SCALE_NOT_POW2", E, f"{EXPERT}.weight_scale_inv")}, level=Level.SCALES),
    case("fp8-block-code-flipped-source", "fp8", set_tensor(FP8_W, _first_code_flipped), 1, {("REPRO_MISMATCH", E, FP8_W)}, source=True),
    case("fp8-block-size-64", "fp8", config(lambda c: c["quantization_config"].update(fmt="e5m2")), 1, {("CONFIG_QUANT", E, None)}),
    # compressed-tensors FP8_BLOCK (model_free_ptq)
    case("ct-fp8-block-clean-full-source", "ct-fp8", lambda p: None, 0, set(), level=Level.FULL, source=True),
    case("ct-fp8-block-scale-f32-loads", "ct-fp8", set_tensor(f"{EXPERT}.weight_scale", lambda a: a.astype(np.float32)), 0, set()),
    case("ct-fp8-block-zero-tile-foreign-scale", "ct-fp8", set_tensor(FP8_W, _fp8_bytes(0)), 0, {("FP8_ZERO_TILE_SCALE", W, f"{EXPERT}.weight_scale")}, level=Level.FULL),
    # the producer of all-zero tiles, from their scale: DeepGEMM's 1e-4/448 (no warning in a DeepSeek file),
    # a UE8M0 writer's 2^-22 in a compressed-tensors file (named, and warned: not the claimed producer's 2^-7)
    case("fp8-block-zero-tile-deepgemm-fingerprint", "fp8", both(set_tensor(FP8_W, _fp8_bytes(0)), set_tensor(f"{EXPERT}.weight_scale_inv", _fill(DEEPGEMM_ZERO))), 0, {("FINGERPRINT", INFO, None)}, level=Level.FULL),
    case("ct-fp8-block-zero-tile-ue8m0-fingerprint", "ct-fp8", both(set_tensor(FP8_W, _fp8_bytes(0)), set_tensor(f"{EXPERT}.weight_scale", _fill(2.0**-22))), 0, {("FP8_ZERO_TILE_SCALE", W, f"{EXPERT}.weight_scale"), ("FINGERPRINT", INFO, None)}, level=Level.FULL),
    case("ct-fp8-block-tile-just-below-256", "ct-fp8", set_tensor(FP8_W, _fp8_bytes(0x77)), 1, {("FP8_TILE_NOT_TIGHT", E, FP8_W)}, level=Level.FULL),
    case("ct-fp8-block-scale-missing", "ct-fp8", drop_tensor(f"{EXPERT}.weight_scale"), 1, {("QUANT_TENSOR_MISSING", E, f"{EXPERT}.weight_scale")}),
    case("ct-fp8-block-k25-clean-full-source", "ct-fp8-mm", lambda p: None, 0, set(), level=Level.FULL, source=True),
    # NVFP4, ModelOpt: both config forms, and what contradicts
    case("nvfp4-modelopt-clean-full-source", "nvfp4-mo", lambda p: None, 0, set(), level=Level.FULL, source=True),
    case("nvfp4-modelopt-scale-byte-changed-source", "nvfp4-mo", set_tensor(f"{MO_EXPERT}.down_proj.weight_scale", lambda a: _first_code_flipped(a)), 1, {("REPRO_MISMATCH", E, f"{MO_EXPERT}.down_proj.weight_scale")}, source=True),
    case("nvfp4-modelopt-hf-quant-config-only", "nvfp4-mo", config(lambda c: c.pop("quantization_config")), 0, set(), level=Level.FULL),
    case("nvfp4-modelopt-flat-config-only", "nvfp4-mo", lambda p: (p / "hf_quant_config.json").unlink(), 0, set(), level=Level.FULL),
    # vLLM reads the flat form's group_size from its first config group: 32 there fails to load
    case("nvfp4-modelopt-flat-config-group-size-32", "nvfp4-mo", config(lambda c: c["quantization_config"]["config_groups"]["group_0"]["weights"].update(group_size=32)), 1, CT_G128 | {("CONFIG_QUANT_CONTRADICTION", E, None)}),
    case("nvfp4-modelopt-group-size-contradiction", "nvfp4-mo", _hf_quant(lambda q: q.update(group_size=32)), 1, {("CONFIG_QUANT_CONTRADICTION", E, None)}),
    case("nvfp4-modelopt-algo-contradiction", "nvfp4-mo", _hf_quant(lambda q: q.update(quant_algo="FP8")), 1, {("CONFIG_QUANT_CONTRADICTION", E, None)}),
    case("nvfp4-modelopt-exclude-contradiction", "nvfp4-mo", _hf_quant(lambda q: q["exclude_modules"].remove("lm_head")), 1, {("CONFIG_QUANT_CONTRADICTION", E, None)}),
    case("nvfp4-modelopt-block-scale-nan", "nvfp4-mo", set_tensor(f"{MO_EXPERT}.down_proj.weight_scale", lambda a: np.full(a.shape, 0x7F, np.uint8).view(a.dtype)), 1, {("NVFP4_BLOCK_SCALE", E, f"{MO_EXPERT}.down_proj.weight_scale")}, level=Level.SCALES),
    case("nvfp4-modelopt-global-in-ct-convention", "nvfp4-mo", set_tensor(f"{MO_EXPERT}.down_proj.weight_scale_2", lambda a: (1 / a).astype(np.float32)), 1, {("NVFP4_GLOBAL_CONVENTION", E, f"{MO_EXPERT}.down_proj.weight_scale_2")}, level=Level.SCALES),
    # a zero per-tensor scale: an error where vLLM divides by it (Inf), a warning where it multiplies (zeroed)
    case("nvfp4-modelopt-input-scale-zero", "nvfp4-mo", set_tensor(f"{MO_EXPERT}.down_proj.input_scale", lambda a: a * 0), 1, {("SCALE_ZERO", E, f"{MO_EXPERT}.down_proj.input_scale")}, level=Level.SCALES),
    case("nvfp4-modelopt-weight-scale-2-zero-warns", "nvfp4-mo", set_tensor(f"{MO_EXPERT}.down_proj.weight_scale_2", lambda a: a * 0), 0, {("SCALE_ZERO", W, f"{MO_EXPERT}.down_proj.weight_scale_2")}, level=Level.SCALES),
    case("nvfp4-ct-global-scale-zero", "nvfp4-ct", set_tensor(f"{MO_EXPERT}.down_proj.weight_global_scale", lambda a: a * 0), 1, {("SCALE_ZERO", E, f"{MO_EXPERT}.down_proj.weight_global_scale")}, level=Level.SCALES),
    case("nvfp4-ct-input-global-scale-zero", "nvfp4-ct", set_tensor(f"{MO_EXPERT}.down_proj.input_global_scale", lambda a: a * 0), 1, {("SCALE_ZERO", E, f"{MO_EXPERT}.down_proj.input_global_scale")}, level=Level.SCALES),
    # one root cause, one finding: a NaN or empty gate scale is not also a gate/up difference (nor a crash)
    case("nvfp4-modelopt-gate-scale-2-nan", "nvfp4-mo", set_tensor(f"{MO_EXPERT}.gate_proj.weight_scale_2", lambda a: np.full_like(a, np.nan)), 1, {("SCALE_NONFINITE", E, f"{MO_EXPERT}.gate_proj.weight_scale_2")}, level=Level.SCALES),
    case("nvfp4-modelopt-gate-scale-2-empty", "nvfp4-mo", set_tensor(f"{MO_EXPERT}.gate_proj.weight_scale_2", lambda a: np.zeros((0,), np.float32)), 1, {("QUANT_SHAPE", E, f"{MO_EXPERT}.gate_proj.weight_scale_2")}, level=Level.SCALES),
    # vLLM decodes an expert's fused w13 with gate's global scale (ModelOptNvFp4FusedMoE.process_weights_after_loading,
    # modelopt.py @ 00155cd: w13_weight_scale_2[:, 0]): up is decoded off by their ratio, an error
    case("nvfp4-modelopt-gate-up-scale-2-differ", "nvfp4-mo", set_tensor(f"{MO_EXPERT}.up_proj.weight_scale_2", lambda a: (a * 2).astype(np.float32)), 1, {("NVFP4_GATE_UP_SCALE", E, f"{MO_EXPERT}.up_proj.weight_scale_2")}, level=Level.SCALES),
    case("nvfp4-modelopt-gate-up-calibrated-apart", "nvfp4-mo", calibrated_apart("modelopt-nvfp4", MO_EXPERT), 1, {("NVFP4_GATE_UP_SCALE", E, f"{MO_EXPERT}.up_proj.weight_scale_2")}, level=Level.SCALES),
    # the bytes are the producer's (each module alone): no REPRO_MISMATCH; the block gives up's error as vLLM decodes it
    case("nvfp4-modelopt-gate-up-calibrated-apart-source", "nvfp4-mo", calibrated_apart("modelopt-nvfp4", MO_EXPERT), 1, {("NVFP4_GATE_UP_SCALE", E, f"{MO_EXPERT}.up_proj.weight_scale_2")}, level=Level.FULL, source=True),
    # within vLLM's torch.allclose (rtol 1e-05, atol 1e-08) vLLM does not warn and the decode moves by < 1e-5: nothing
    case("must-pass-nvfp4-modelopt-up-scale-2-within-allclose", "nvfp4-mo", _up_scale_off_by("weight_scale_2", 0.5), 0, set(), level=Level.FULL),
    case("nvfp4-modelopt-up-scale-2-beyond-allclose", "nvfp4-mo", _up_scale_off_by("weight_scale_2", 2), 1, {("NVFP4_GATE_UP_SCALE", E, f"{MO_EXPERT}.up_proj.weight_scale_2")}, level=Level.SCALES),
    case("nvfp4-modelopt-fused-input-scale-differ", "nvfp4-mo", set_tensor(f"{MO_EXPERT}.up_proj.input_scale", lambda a: (a * 2).astype(np.float32)), 0, {("NVFP4_FUSED_INPUT_SCALE", W, f"{MO_EXPERT}.up_proj.input_scale")}, level=Level.SCALES),
    case("nvfp4-modelopt-block-not-tight", "nvfp4-mo", set_tensor(f"{MO_EXPERT}.down_proj.weight", lambda a: np.full_like(a, 0x11)), 1, {("NVFP4_BLOCK_NOT_TIGHT", E, f"{MO_EXPERT}.down_proj.weight")}, level=Level.FULL),
    # ModelOpt's Four-Over-Six recipe: blocks whose amax maps to 4, no non-zero scale above 384
    case("must-pass-nvfp4-modelopt-four-over-six-tensor", "nvfp4-mo", _four_over_six(0x7C), 0, set(), level=Level.FULL),
    case("nvfp4-modelopt-four-over-six-block-below-4", "nvfp4-mo", _four_over_six(0x7C, first_block=0x55), 1, {("NVFP4_BLOCK_NOT_TIGHT", E, f"{MO_EXPERT}.down_proj.weight")}, level=Level.FULL),
    case("nvfp4-modelopt-code-4-with-scale-above-384", "nvfp4-mo", _four_over_six(0x7D), 1, {("NVFP4_BLOCK_NOT_TIGHT", E, f"{MO_EXPERT}.down_proj.weight")}, level=Level.FULL),
    case("nvfp4-modelopt-four-over-six-source-bytes-unverified-warning-only", "nvfp4-mo", _four_over_six_from_source, 0, {("REPRO_MISMATCH", W, None)}, level=Level.FULL, source=True),
    case("nvfp4-modelopt-four-over-six-source-nibbles-swapped", "nvfp4-mo", both(_four_over_six_from_source, set_tensor(f"{MO_EXPERT}.down_proj.weight", nibble_swap)), 1, {("REPRO_MISMATCH", W, None), ("REPRO_UNCORRELATED", E, f"{MO_EXPERT}.down_proj.weight")}, level=Level.FULL, source=True),
    case("nvfp4-modelopt-scale-2-missing", "nvfp4-mo", drop_tensor(f"{MO_EXPERT}.down_proj.weight_scale_2"), 1, {("QUANT_TENSOR_MISSING", E, f"{MO_EXPERT}.down_proj.weight_scale_2")}),
    # one root cause in every expert: the first findings and one summary, never one per module
    case("nvfp4-modelopt-scale-2-missing-everywhere", "nvfp4-mo", _drop_every(".weight_scale_2"), 1, first_listed("QUANT_TENSOR_MISSING", ".weight_scale_2")),
    case("nvfp4-ct-global-scale-missing-everywhere", "nvfp4-ct", _drop_every(".weight_global_scale"), 1, first_listed("QUANT_TENSOR_MISSING", ".weight_global_scale")),
    case("nvfp4-modelopt-excluded-lm-head-with-scales", "nvfp4-mo", _nvfp4_lm_head_scales, 1, {("UNQUANTIZABLE_QUANTIZED", E, "lm_head.weight")}),
    case("nvfp4-modelopt-k25-clean-full-source", "nvfp4-mo-mm", lambda p: None, 0, set(), level=Level.FULL, source=True),
    # the K2 exclude prefix in a K2.5 checkpoint: the dense layer's BF16 MLP is built NVFP4
    case("nvfp4-modelopt-k25-exclude-without-model-prefix", "nvfp4-mo-mm", _modelopt_exclude("language_model.model.layers.0.mlp*", "language_model.layers.0.mlp*"), 1,
         {("EXCLUDE_UNMATCHED", W, None)} | {("NOT_EXCLUDED_UNQUANTIZED", E, f"language_model.model.layers.0.mlp.{p}.weight") for p in ("gate_proj", "up_proj", "down_proj")}),
    # NVFP4, compressed-tensors
    case("nvfp4-ct-k25-clean-full-source", "nvfp4-ct-mm", lambda p: None, 0, set(), level=Level.FULL, source=True),
    case("plain-bf16-with-a-quantized-module", "bf16", quantize_mx(EXPERT), 1, {("UNQUANTIZABLE_QUANTIZED", E, FP8_W)}),
    # ModelOpt FP8_PB_WO: the 4-D weight_scale, or a 2-D one
    case("modelopt-fp8-block-clean-full", "mo-fp8", lambda p: None, 0, set(), level=Level.FULL),
    case("modelopt-fp8-block-2d-scale", "mo-fp8", set_tensor(f"{EXPERT}.weight_scale", lambda a: a.reshape(a.shape[0], a.shape[2])), 0, set(), level=Level.FULL),
    case("modelopt-fp8-block-scale-transposed-4d", "mo-fp8", set_tensor(f"{DENSE_GATE}.weight_scale", lambda a: a.reshape(1, a.shape[0], 1, a.shape[2])), 1, {("QUANT_SHAPE", E, f"{DENSE_GATE}.weight_scale")}),
    case("modelopt-fp8-block-scales-algo-not-in-vllm", "mo-fp8", config(lambda c: c["quantization_config"].update(quant_algo="FP8_BLOCK_SCALES")), 1, {("CONFIG_QUANT", E, None)}),
    case("modelopt-fp8-block-tile-not-tight", "mo-fp8", set_tensor(FP8_W, _fp8_bytes(0x38)), 1, {("FP8_TILE_NOT_TIGHT", E, FP8_W)}, level=Level.FULL),
    case("ct-int4-never-minus-8-qat-fingerprint", "ct", _never_minus_8, 0, {("FINGERPRINT", INFO, None)}, level=Level.FULL),
    # ModelOpt MIXED_PRECISION: a quant_algo per layer
    case("modelopt-mixed-clean-full-source", "mo-mixed", lambda p: None, 0, set(), level=Level.FULL, source=True),
    case("modelopt-mixed-pb-wo-expert-layer", "mo-mixed", _mixed_algo(f"{MO_EXPERT}.down_proj", "FP8_PB_WO"), 1, PB_WO_LAYER),
    # --source: the layout refuses the FP8_PB_WO layer's NVFP4 tensors, so they are not decoded:
    # its layout findings alone (no "no profile" warning, no "source missing")
    case("modelopt-mixed-pb-wo-expert-layer-source", "mo-mixed", _mixed_algo(f"{MO_EXPERT}.down_proj", "FP8_PB_WO"), 1, PB_WO_LAYER, source=True),
    # the same layer holding well-formed FP8 block tensors: no producer profile reproduces
    # ModelOpt FP8 block, so --source says so once (a warning), the other modules compared
    case("modelopt-mixed-pb-wo-fp8-layer-source", "mo-mixed", both(_mixed_algo(f"{MO_EXPERT}.down_proj", "FP8_PB_WO"), _fp8_block_module(f"{MO_EXPERT}.down_proj")), 1, {("CONFIG_QUANT", E, None), ("REPRO_MISMATCH", W, None)}, source=True),
    # an algorithm vLLM 0.33.0's mixed config does not dispatch: built unquantized
    case("modelopt-mixed-layer-algo-not-dispatched", "mo-mixed", _mixed_algo(f"{MO_EXPERT}.down_proj", "W4A8_AWQ"), 1, {("CONFIG_QUANT", E, None)}),
    # per-tensor FP8 layers (no descriptor here): said to be unchecked, nothing to reproduce,
    # never an internal error
    case("modelopt-mixed-layer-algo-fp8-unverified", "mo-mixed", _mixed_algo(f"{MO_EXPERT}.down_proj", "FP8"), 0, {("CONFIG_QUANT", W, None)}),
    case("modelopt-mixed-layer-algo-mxfp8-unverified", "mo-mixed", _mixed_algo(f"{MO_EXPERT}.down_proj", "MXFP8"), 0, {("CONFIG_QUANT", W, None)}),
    case("modelopt-mixed-all-fp8-source-nothing-verified", "mo-mixed", _mixed_table(lambda t: [v.update(quant_algo="FP8") for v in t.values()]), 1, {("CONFIG_QUANT", W, None), ("REPRO_NOTHING_VERIFIED", E, None)}, source=True),
    case("modelopt-mixed-empty-table", "mo-mixed", _mixed_table(lambda t: t.clear()), 1, {("CONFIG_QUANT", E, None)}),
    # mixed precision: each module against its own group's scheme
    case("ct-mixed-clean-full-source", "ct-mixed", lambda p: None, 0, set(), level=Level.FULL, source=True),
    case("ct-mixed-int4-module-named-by-the-nvfp4-group", "ct-mixed", config(lambda c: c["quantization_config"]["config_groups"]["group_1"]["targets"].insert(0, EXPERT)), 1,
         {("QUANT_DTYPE", E, f"{EXPERT}.weight_packed"), ("QUANT_SHAPE", E, f"{EXPERT}.weight_packed"), ("QUANT_SHAPE", E, f"{EXPERT}.weight_scale"), ("QUANT_DTYPE", E, f"{EXPERT}.weight_scale"),
          ("QUANT_TENSOR_MISSING", E, f"{EXPERT}.weight_global_scale"), ("QUANT_TENSOR_MISSING", E, f"{EXPERT}.input_global_scale"), ("QUANT_TENSOR_UNEXPECTED", E, f"{EXPERT}.weight_shape"),
          ("FUSED_PAIR_MISMATCH", E, f"{EXPERT}.weight_packed")}),
    case("ct-mixed-group-scheme-unverified", "ct-mixed", config(lambda c: c["quantization_config"]["config_groups"]["group_1"]["weights"].update(num_bits=8, type="int")), 2, {("FORMAT_UNSUPPORTED", E, None)}),
    case("nvfp4-ct-clean-full-source", "nvfp4-ct", lambda p: None, 0, set(), level=Level.FULL, source=True),
    case("nvfp4-ct-global-changed-source", "nvfp4-ct", set_tensor(f"{MO_EXPERT}.down_proj.weight_global_scale", lambda a: np.nextafter(a, np.float32(np.inf))), 1, {("REPRO_MISMATCH", E, f"{MO_EXPERT}.down_proj.weight_global_scale")}, source=True),
    # each compressed-tensors scheme's weight requirements (CompressedTensorsDescriptor.weight_requirements)
    case("nvfp4-ct-strategy-group", "nvfp4-ct", _ct_groups(strategy="group"), 1, {("CONFIG_QUANT", E, None)}),
    case("ct-fp8-block-asymmetric", "ct-fp8", _ct_groups(symmetric=False), 1, {("CONFIG_QUANT", E, None)}),
    case("nvfp4-ct-global-in-modelopt-convention", "nvfp4-ct", set_tensor(f"{MO_EXPERT}.down_proj.weight_global_scale", lambda a: (1 / a).astype(np.float32)), 1, {("NVFP4_GLOBAL_CONVENTION", E, f"{MO_EXPERT}.down_proj.weight_global_scale")}, level=Level.SCALES),
    # vLLM: CompressedTensorsW4A4Nvfp4MoEMethod.process_weights_after_loading (compressed_tensors_moe_w4a4_nvfp4.py @ 08f95fe)
    # decodes w13 with w13_weight_global_scale[:, 0], gate's: a model_free_ptq export's up is decoded off, an error
    case("nvfp4-ct-gate-up-global-differ", "nvfp4-ct", set_tensor(f"{MO_EXPERT}.up_proj.weight_global_scale", lambda a: (a * 2).astype(np.float32)), 1, {("NVFP4_GATE_UP_SCALE", E, f"{MO_EXPERT}.up_proj.weight_global_scale")}, level=Level.SCALES),
    case("nvfp4-ct-gate-up-calibrated-apart", "nvfp4-ct", calibrated_apart("compressed-tensors-nvfp4", MO_EXPERT), 1, {("NVFP4_GATE_UP_SCALE", E, f"{MO_EXPERT}.up_proj.weight_global_scale")}, level=Level.SCALES),
    case("nvfp4-ct-gate-up-calibrated-apart-source", "nvfp4-ct", calibrated_apart("compressed-tensors-nvfp4", MO_EXPERT), 1, {("NVFP4_GATE_UP_SCALE", E, f"{MO_EXPERT}.up_proj.weight_global_scale")}, level=Level.FULL, source=True),
    case("must-pass-nvfp4-ct-up-global-within-allclose", "nvfp4-ct", _up_scale_off_by("weight_global_scale", 0.5), 0, set(), level=Level.FULL),
    case("nvfp4-ct-up-global-beyond-allclose", "nvfp4-ct", _up_scale_off_by("weight_global_scale", 2), 1, {("NVFP4_GATE_UP_SCALE", E, f"{MO_EXPERT}.up_proj.weight_global_scale")}, level=Level.SCALES),
    case("nvfp4-ct-fused-input-global-scale-differ", "nvfp4-ct", set_tensor(f"{MO_EXPERT}.up_proj.input_global_scale", lambda a: (a * 2).astype(np.float32)), 0, {("NVFP4_FUSED_INPUT_SCALE", W, f"{MO_EXPERT}.up_proj.input_global_scale")}, level=Level.SCALES),
    case("nvfp4-ct-block-scale-zero", "nvfp4-ct", set_tensor(f"{MO_EXPERT}.down_proj.weight_scale", lambda a: np.zeros(a.shape, np.uint8).view(a.dtype)), 1, {("NVFP4_BLOCK_SCALE", E, f"{MO_EXPERT}.down_proj.weight_scale")}, level=Level.SCALES),
    case("nvfp4-ct-input-global-scale-missing", "nvfp4-ct", drop_tensor(f"{MO_EXPERT}.down_proj.input_global_scale"), 1, {("QUANT_TENSOR_MISSING", E, f"{MO_EXPERT}.down_proj.input_global_scale")}),
    case("nvfp4-ct-block-not-tight", "nvfp4-ct", set_tensor(f"{MO_EXPERT}.down_proj.weight_packed", lambda a: np.full_like(a, 0x22)), 1, {("NVFP4_BLOCK_NOT_TIGHT", E, f"{MO_EXPERT}.down_proj.weight_packed")}, level=Level.FULL),
]


# -- one root cause in every module: the first LISTED findings of each check, then one summary ----


def _first_byte(value: Any) -> Callable[[Any], Any]:
    def fn(a: Any) -> Any:
        a.reshape(-1)[0] = value
        return a
    return fn


def _scales_in_another_shard(path: Path) -> None:
    """Every weight_scale written into a shard other than its weight's (MODULE_SPLIT each)."""
    def fn(data: Tensors) -> None:
        for name in [n for t in data.values() for n in t if n.endswith(".weight_scale")]:
            src = find(data, name)
            data[next(s for s in data if s != src)][name] = data[src].pop(name)
    edit(path, fn)


def _index_names_prefixed(prefix: str) -> Callable[[Path], None]:
    """Every index entry renamed ``prefix + name`` (a K2.5 index beside K2 shards)."""
    def run(path: Path) -> None:
        idx = index(path)
        idx["weight_map"] = {prefix + n: s for n, s in idx["weight_map"].items()}
        write_index(path, idx)
    return run


def _named(check: str, names: Iterable[str]) -> set[tuple[str, str, str | None]]:
    """Error ``check`` on each of ``names`` (the first LISTED, in report order) and the one that
    counts the rest."""
    return {(check, E, n) for n in names} | {(check, E, None)}


#: The first LISTED routed experts' Linears of the NVFP4 producer fixture, in module order.
NV_LISTED = [m for m in MX_MODULES if ".experts." in m][:LISTED]
#: The first LISTED tensors of the generated MXFP4 twin: in its first shard's header order, and in
#: its index's (name) order.
MX_FIRST_IN_SHARD = ["lm_head.weight", "model.embed_tokens.weight"] + [
    f"model.layers.0.{n}.weight" for n in (
        "input_layernorm", "post_attention_layernorm", "self_attn.kv_a_layernorm",
        "self_attn.kv_a_proj_with_mqa", "self_attn.kv_b_proj", "self_attn.o_proj",
        "self_attn.q_a_layernorm", "self_attn.q_a_proj")]
MX_FIRST_IN_INDEX = ["lm_head.weight", "model.embed_tokens.weight",
                     "model.layers.0.input_layernorm.weight"] + [
    f"model.layers.0.mlp.{p}.{t}" for p in PROJECTIONS for t in ("weight", "weight_scale")] + [
    "model.layers.0.post_attention_layernorm.weight"]
CASES += [
    case("every-module-e8m0-nan", "mxfp4", all_tensors(".weight_scale", _first_byte(0xFF)), 1, listed("E8M0_NAN", E, ".weight_scale"), level=SC),
    case("every-nvfp4-block-scale-zero", "nvfp4-ct", all_tensors(".weight_scale", lambda a: np.zeros(a.shape, np.uint8).view(a.dtype)), 1, _named("NVFP4_BLOCK_SCALE", (f"{m}.weight_scale" for m in NV_LISTED)), level=SC),
    # a REAP-pruned checkpoint (4 experts a layer kept) whose config still declares 12
    case("reap-pruned-experts-config-declares-all", "w4a8", config(lambda c: c.update(n_routed_experts=12)), 1,
         _named("EXPERT_GAP", [f"model.layers.1.mlp.experts.{e}" for e in range(4, 12)] + [f"model.layers.2.mlp.experts.{e}" for e in (4, 5)])
         | {("SHAPE_MISMATCH", E, f"model.layers.{n}.mlp.gate.{t}") for n in (1, 2) for t in ("weight", "e_score_correction_bias")}),
    case("every-scale-in-another-shard-warning-only", "mxfp4", _scales_in_another_shard, 0, listed("MODULE_SPLIT", W, ".weight")),
    case("index-of-k25-names-beside-k2-shards", "mxfp4", _index_names_prefixed("language_model."), 1,
         _named("SHARD_TENSOR_NOT_IN_INDEX", MX_FIRST_IN_SHARD) | _named("INDEX_TENSOR_NOT_IN_SHARD", (f"language_model.{n}" for n in MX_FIRST_IN_INDEX))),
]


# -- issue 26, item 3: decoded magnitudes (DECODED_MAGNITUDE) on the producers' own fixtures. Each
# error case exited 0 before: every scale is finite and positive and the codes are tight. The
# verdicts follow how the loader applies the scale, a multiplier in each: vLLM's FP8 block GEMM
# multiplies a tile's codes by its weight_scale_inv / weight_scale (Fp8LinearMethod, fp8.py @
# 1436674; scaled_dequantize), CompressedTensorsWNA16 multiplies an INT4 group by its
# weight_scale, Quark's MXFP4 emulation by 2^(byte-127), QuarkW4A8Fp8MoEMethod folds
# weight_scale x weight_scale_2 per row (quark_moe.py:1507 @ vllm==0.33.0), ModelOpt NVFP4 by
# weight_scale x weight_scale_2 (alpha, modelopt.py @ 00155cd). -----------------------------------

_PRODUCERS = Path(__file__).resolve().parent / "data" / "producers"


def _quantized(fixture: str, param: str) -> list[str]:
    """The modules of producer fixture ``fixture`` holding ``param``, in module order."""
    names = json.loads((_PRODUCERS / fixture / INDEX).read_text())["weight_map"]
    return sorted(n.removesuffix(f".{param}") for n in names if n.endswith(f".{param}"))


def _magnitudes(fixture: str, scale: str, weight: str = "weight") -> set[Key]:
    """DECODED_MAGNITUDE on the weight of the first LISTED modules of ``fixture`` that carry
    ``scale``, and the summary counting the rest."""
    return _named("DECODED_MAGNITUDE", (f"{m}.{weight}" for m in
                                        _quantized(fixture, scale)[:LISTED]))


def _times(factor: float) -> Callable[[Any], Any]:
    """A float scale multiplied by ``factor`` (a power of two: exact in BF16 and F32)."""
    return lambda a: (np.asarray(a, np.float32) * np.float32(factor)).astype(a.dtype)


def _inverse(a: Any) -> Any:
    """A float scale replaced by its reciprocal: 448/amax where amax/448 was."""
    return (1 / np.asarray(a, np.float32)).astype(a.dtype)


def _e8m0_plus(n: int) -> Callable[[Any], Any]:
    """Every E8M0 byte raised by ``n``: the block's scale times 2^n."""
    return lambda a: (a.view(np.uint8) + np.uint8(n)).view(a.dtype)


MAG = "DECODED_MAGNITUDE"
CASES += [
    # an inverted DeepSeek scale: 448/amax decodes every weight ~10^6 too large (the case)
    case("fp8-deepseek-producer-every-scale-inverted", "fp8-prod", all_tensors(".weight_scale_inv", _inverse), 1,
         _magnitudes("kimi-k2-fp8-block-deepseek", "weight_scale_inv"), level=SC),
    case("fp8-deepseek-producer-one-expert-scale-inverted", "fp8-prod", set_tensor(f"{EXPERT}.weight_scale_inv", _inverse), 1, {(MAG, E, FP8_W)}, level=SC),
    case("fp8-deepseek-producer-one-expert-scale-inverted-full", "fp8-prod", set_tensor(f"{EXPERT}.weight_scale_inv", _inverse), 1, {(MAG, E, FP8_W)}, level=Level.FULL),
    case("ct-fp8-producer-one-expert-scale-inverted", "ct-fp8-prod", set_tensor(f"{EXPERT}.weight_scale", _inverse), 1, {(MAG, E, FP8_W)}, level=SC),
    # the range [1e-5, 1e3] from both sides, every module moved alike (no sibling stands out)
    case("int4-producer-scales-x16384-above-1e3", "ct-prod", all_tensors(".weight_scale", _times(2.0**14)), 1,
         _magnitudes("kimi-k2-int4-compressed-tensors", "weight_scale", "weight_packed"), level=SC),
    case("int4-producer-scales-x4096-within-1e3", "ct-prod", all_tensors(".weight_scale", _times(2.0**12)), 0, set(), level=SC),
    case("nvfp4-modelopt-producer-scale2-over-16384-below-1e-5", "nvfp4-mo", all_tensors(".weight_scale_2", _times(2.0**-14)), 1,
         _magnitudes("kimi-k2-nvfp4-modelopt", "weight_scale_2"), level=SC),
    case("nvfp4-modelopt-producer-scale2-over-4096-within-1e-5", "nvfp4-mo", all_tensors(".weight_scale_2", _times(2.0**-12)), 0, set(), level=SC),
    # compressed-tensors' weight_global_scale is a divisor (CompressedTensorsW4A4Fp4 hands the
    # kernels 1 / weight_global_scale, compressed_tensors_w4a4_nvfp4.py:111 @ vllm==0.33.0): a
    # smaller one decodes larger, still on its convention's side of 1 (no NVFP4_GLOBAL_CONVENTION)
    case("nvfp4-ct-producer-global-over-16384-above-1e3", "nvfp4-ct", all_tensors(".weight_global_scale", _times(2.0**-14)), 1,
         _magnitudes("kimi-k2-nvfp4-compressed-tensors", "weight_global_scale", "weight_packed"), level=SC),
    case("w4a8-producer-fp8-stage-scale-inverted", "w4a8-prod", all_tensors(".weight_scale", _inverse), 1,
         _magnitudes("kimi-k2-w4a8-quark", "weight_scale_2"), level=SC),
    # one expert against the same projection of its layer's three others: 128x is an error, and
    # its EXPERT_RMS_OUTLIER warning is left out (one cause, one finding); 64x is that warning alone
    case("mxfp4-producer-one-expert-scales-x128-siblings", "mxfp4-prod", set_tensor(f"{EXPERT}.weight_scale", _e8m0_plus(7)), 1, {(MAG, E, FP8_W)}, level=Level.FULL),
    case("mxfp4-producer-one-expert-scales-x64-rms-outlier-only", "mxfp4-prod", set_tensor(f"{EXPERT}.weight_scale", _e8m0_plus(6)), 0,
         {("EXPERT_RMS_OUTLIER", W, FP8_W)}, level=Level.FULL),
    case("mxfp4-producer-one-expert-scales-x64-scales", "mxfp4-prod", set_tensor(f"{EXPERT}.weight_scale", _e8m0_plus(6)), 0, set(), level=SC),
]
# every producer fixture passes at every level, with and without --source (the NVFP4 ones at
# full with --source are the cases nvfp4-modelopt-clean-full-source and nvfp4-ct-clean-full-source)
CASES += [case(f"{base}-clean-{level.value}{'-source' if source else ''}", base, lambda p: None, 0, set(), level=level, source=source)
          for base in ("fp8-prod", "ct-fp8-prod", "ct-prod", "mxfp4-prod", "w4a8-prod", "nvfp4-mo", "nvfp4-ct")
          for level, source in ((SC, False), (Level.FULL, False), (SC, True), (Level.FULL, True))
          if not (base.startswith("nvfp4") and level is Level.FULL and source)]

# -- running -------------------------------------------------------------------------------------


Key = tuple[str, str, "str | None"]


def tuples(report: Report) -> set[Key]:
    return {(f.check.id, f.effective_severity.value, f.tensor) for f in report.findings}


def source_of(base: str) -> Path:
    twin = TWINS[base]
    return twin.parent / f"{twin.name}-bf16"


def options(c: Case, *, twin: bool = False) -> Options:
    """The case's options; ``twin``: those of its clean twin (on the twin's own source)."""
    base = c.source if isinstance(c.source, str) and not twin else c.base
    return Options(level=c.level, workers=1, source=source_of(base) if c.source else None)


def ensure_twins(root: Path, names: Iterable[str]) -> dict[str, Path]:
    """The clean twins ``names`` in the session cache :data:`TWINS`, each generated under
    ``root`` unless an earlier module of the session already did (test_validate_hub shares
    them)."""
    for name in sorted(names):
        if name not in TWINS or not TWINS[name].exists():
            fmt, kw = BASES[name]
            built = {MIXED: make_mixed_ct, MODELOPT_FP8: make_modelopt_fp8_block,
                     MODELOPT_MIXED: make_modelopt_mixed}
            if fmt in built:
                TWINS[name] = built[fmt](root / name)
                continue
            if fmt.startswith(PRODUCER):
                fixtures = Path(__file__).resolve().parent / "data" / "producers"
                TWINS[name] = copy_tree(fixtures / fmt.removeprefix(PRODUCER), root / name)
                copy_tree(fixtures / "src-bf16", root / f"{name}-bf16")
                continue
            TWINS[name] = make_kimi_checkpoint(root / name, fmt, **kw)
    return TWINS


@pytest.fixture(scope="session")
def twins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One clean twin per base, generated once per session (with its BF16 source)."""
    return ensure_twins(tmp_path_factory.mktemp("twins"), {c.base for c in CASES} | {"bf16"})


_CLEAN: dict[tuple[str, Level, bool], tuple[int, set[Key]]] = {}


def clean(c: Case) -> tuple[int, set[Key]]:
    key = (c.base, c.level, bool(c.source))
    if key not in _CLEAN:
        report = validate(TWINS[c.base], options(c, twin=True))
        _CLEAN[key] = (exit_code(report), tuples(report))
    return _CLEAN[key]


def build(c: Case, tmp: Path) -> Path:
    p = copy_tree(TWINS[c.base], tmp / c.base)
    c.corrupt(p)
    return p


def _param(c: Case) -> Any:
    marks = [pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else []
    return pytest.param(c, id=c.name, marks=marks)


def _catalogue() -> dict[str, Any]:
    """The full catalogue: checks are declared when their module is imported."""
    return load_all()


def test_corpus_is_large_and_unique() -> None:
    _catalogue()
    assert len(CASES) >= 30
    assert len({c.name for c in CASES}) == len(CASES)
    for c in CASES:
        for cid, sev, _ in c.findings | c.removed:
            assert cid in CHECKS, (c.name, cid)
            assert sev in (E, W, INFO)


@pytest.mark.parametrize("c", [_param(c) for c in CASES])
def test_corpus_case(c: Case, twins: dict[str, Path], tmp_path: Path) -> None:
    twin_exit, twin = clean(c)
    assert twin_exit == 0, (c.base, sorted(twin, key=str))
    p = build(c, tmp_path)
    report = validate(p, options(c))
    got = tuples(report)
    for cid, _, _ in got:
        assert cid in CHECKS and cid != "INTERNAL_ERROR", [f.to_json() for f in report.findings]
    added, removed = got - twin, twin - got
    assert (added, removed) == (set(c.findings), set(c.removed)), [
        f.to_json() for f in report.findings]
    assert exit_code(report) == c.exit
    if c.exit == 0 and any(sev == W for _, sev, _ in c.findings):  # warning-only: --strict fails
        assert exit_code(report, strict=True) == 1


CLI_CASES = ["header-length-absurd", "header-deeply-nested-json", "overlapping-spans", "symlink-escape", "index-dotdot-path",
             "nvfp4-config-exit-2", "e8m0-nan-byte-0xff", "plain-bf16"]


@pytest.mark.parametrize("name", CLI_CASES)
def test_cli_subprocess_no_traceback(name: str, twins: dict[str, Path], tmp_path: Path) -> None:
    c = next(c for c in CASES if c.name == name)
    p = build(c, tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from mxformats.cli import main; sys.exit(main())",
         "validate", str(p), "--level", c.level.value,
         "--json", "-", "--workers", "1"],
        capture_output=True, text=True, timeout=60, check=False)
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert proc.returncode == c.exit, proc.stderr
    if proc.returncode != 2 or proc.stdout.strip():
        data = json.loads(proc.stdout)
        assert {f["check"] for f in data["findings"]} <= set(_catalogue())


@pytest.mark.parametrize("c", [pytest.param(c, id=c.name) for c in CASES[:16]])
def test_cli_in_process_matches_api(c: Case, twins: dict[str, Path], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    from mxformats.cli import main

    p = build(c, tmp_path)
    capsys.readouterr()
    rc = main(["validate", str(p), "--level", c.level.value, "--json", "-", "--workers", "1",
               "--quiet"])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    assert rc == c.exit
    if out.out.strip():
        data = json.loads(out.out)
        got = {(f["check"], f["severity"], f["tensor"]) for f in data["findings"]}
        assert got == tuples(validate(p, options(c)))


def test_index_unsafe_paths_never_opened(twins: dict[str, Path], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    real_open = open

    def spy(file: Any, *a: Any, **kw: Any) -> Any:
        if isinstance(file, (str, os.PathLike)):
            opened.append(os.fspath(file))
        return real_open(file, *a, **kw)

    for name in ("index-absolute-path", "index-dotdot-path"):
        c = next(c for c in CASES if c.name == name)
        p = build(c, tmp_path / name)
        opened.clear()
        monkeypatch.setattr("builtins.open", spy)
        try:
            validate(p, options(c))
        finally:
            monkeypatch.setattr("builtins.open", real_open)
        assert all(Path(o).resolve().is_relative_to(p.resolve()) for o in opened
                   if o.endswith(".safetensors") or "passwd" in o), opened
        assert any(o.endswith(".safetensors") for o in opened)  # the spy saw the shards


# -- issue 12 (files, output) ---------------------------------------------------------------------

#: Cases whose corruption once made the validator block forever (a FIFO opened for reading).
NEVER_BLOCK = {"config-json-is-a-fifo", "index-is-a-fifo", "shard-is-a-fifo"}


@pytest.fixture(autouse=True)
def _fail_instead_of_blocking(request: pytest.FixtureRequest) -> Any:
    """A case of :data:`NEVER_BLOCK` fails after 60 s instead of hanging the suite."""
    from conftest import fails_if_blocked

    callspec = getattr(request.node, "callspec", None)
    case_id = callspec.id if callspec is not None else ""
    if case_id not in NEVER_BLOCK:
        yield
        return
    with fails_if_blocked(60, f"{case_id}: the validator blocked on a special file"):
        yield


#: files and runner checks a test outside the corpus fires.
FIRED_OUTSIDE_THE_CORPUS = {
    "INTERNAL_ERROR": "tests/test_validate_core.py::test_check_exception_becomes_a_finding",
    "HUB_RANGE_IGNORED": "tests/test_validate_hub.py::test_bad_answers_are_findings",
    "HUB_READ_FAILED": "tests/test_validate_hub.py::test_bad_answers_are_findings",
    "TASK_FAILED": "tests/test_validate_tasks.py::test_a_task_that_raises_is_a_finding",
    "RESUME_UNUSABLE": "tests/test_validate_tasks.py::"
    "test_an_unusable_resume_file_is_a_warning_and_everything_runs",
}


def test_every_files_and_runner_check_is_fired() -> None:
    """Each check of the files group and the runner is declared by a corpus case (whose test
    asserts it fires) or named in :data:`FIRED_OUTSIDE_THE_CORPUS`, a test that exists."""
    catalogue = _catalogue()
    declared = {c.id for c in catalogue.values() if c.group in ("files", "internal")}
    fired = {cid for c in CASES if c.xfail is None for cid, _, _ in c.findings}
    assert declared - fired == set(FIRED_OUTSIDE_THE_CORPUS)
    root = Path(__file__).resolve().parent.parent
    for node in FIRED_OUTSIDE_THE_CORPUS.values():
        path, name = node.split("::")
        assert f"def {name}(" in (root / path).read_text(), node


# -- issue 12: every check of the coverage and layout groups (and CONFIG_ARCH) fires ------------


def test_every_coverage_and_layout_check_fires_in_the_corpus() -> None:
    """Each check these groups declare is raised by some corpus case (whose exact findings
    test_corpus_case asserts), so a check that can no longer fire turns a case red."""
    checks = _catalogue()
    fired = {cid for c in CASES for cid, _, _ in c.findings}
    declared = {cid for cid, check in checks.items() if check.group in ("coverage", "layout")}
    assert declared | {"CONFIG_ARCH"} <= fired, sorted((declared | {"CONFIG_ARCH"}) - fired)
