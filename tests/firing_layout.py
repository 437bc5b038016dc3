"""The firing matrix's cases (``tests/test_check_firing.py``) for the checks of the
quantization layout (mxformats/validate/layout.py): the exclude/ignore list, the quantization
config each descriptor reads, and the tensors of quantized and unquantized modules. Each plant
edits config.json (and hf_quant_config.json, which ModelOpt writes beside it) or the shards;
the finding may sit on any tensor or on the config."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
from firing_mutation import Mutation
from validate_corpus import INDEX, config, edit

Config = dict[str, Any]
Tensors = dict[str, dict[str, Any]]
EXPERT = "model.layers.1.mlp.experts.0.down_proj"
DENSE_UP = "model.layers.0.mlp.up_proj"
HF_QUANT = "hf_quant_config.json"
SOURCE = Path(__file__).resolve().parent / "data" / "producers" / "src-bf16"
#: where each producer writes its exclude list in quantization_config: Quark's exclude,
#: compressed-tensors' and ModelOpt's ignore, DeepSeek FP8's modules_to_not_convert
_LIST_KEYS = ("exclude", "ignore", "modules_to_not_convert")


def _plant(edit_folder: Callable[[Path], None], severity: str | None = None) -> Mutation:
    return Mutation(None, edit=edit_folder, anywhere=True, severity=severity)


def _quant_config(change: Callable[[Config], None]) -> Callable[[Path], None]:
    return config(lambda c: change(c["quantization_config"]))


def _exclude(change: Callable[[list[str]], list[str]]) -> Callable[[Path], None]:
    """The exclude list after ``change`` (created where the format writes none), in
    config.json and in hf_quant_config.json where ModelOpt wrote one."""
    def run(p: Path) -> None:
        def in_config(qc: Config) -> None:
            key = next((k for k in _LIST_KEYS if k in qc), "modules_to_not_convert")
            qc[key] = change(list(qc.get(key) or []))
        _quant_config(in_config)(p)
        path = p / HF_QUANT
        if path.exists():
            data = json.loads(path.read_text())
            quant = data["quantization"]
            quant["exclude_modules"] = change(list(quant.get("exclude_modules") or []))
            path.write_text(json.dumps(data))
    return run


def _tensors(change: Callable[[Tensors], None]) -> Callable[[Path], None]:
    return lambda path: edit(path, change)


def _find(data: Tensors, prefix: str, roles: tuple[str, ...]) -> tuple[str, str] | None:
    """(shard, name) of ``prefix``'s first tensor of one of ``roles`` (in that order)."""
    for role in roles:
        for shard, tensors in data.items():
            if f"{prefix}.{role}" in tensors:
                return shard, f"{prefix}.{role}"
    return None


def _doubled(roles: tuple[str, ...]) -> Callable[[Tensors], None]:
    """The expert's first tensor of ``roles`` with its first axis doubled (a scalar: two)."""
    def change(data: Tensors) -> None:
        found = _find(data, EXPERT, roles)
        assert found is not None, roles
        shard, name = found
        a = data[shard][name]
        data[shard][name] = np.stack([a, a]) if a.ndim == 0 else np.concatenate([a, a])
    return change


def _as_dtype(roles: tuple[str, ...], dtype: Any, prefix: str = EXPERT
              ) -> Callable[[Tensors], None]:
    def change(data: Tensors) -> None:
        found = _find(data, prefix, roles)
        assert found is not None, (prefix, roles)
        shard, name = found
        data[shard][name] = data[shard][name].astype(dtype)
    return change


def _added(name: str, value: Any, near: str, roles: tuple[str, ...] = ("weight",)
           ) -> Callable[[Tensors], None]:
    """``name`` added to the shard holding module ``near``'s first tensor of ``roles``."""
    def change(data: Tensors) -> None:
        found = _find(data, near, roles)
        assert found is not None, (near, roles)
        data[found[0]][name] = value
    return change


def _half_quantized(p: Path) -> None:
    """Layer 0's dense up_proj made the other kind than its gate_proj: stored BF16 (zeros of
    its logical shape, config.json's intermediate_size x hidden_size) where the format
    quantizes it, else given a scale."""
    text = json.loads((p / "config.json").read_text())
    text = text.get("text_config", text)
    shape = (text["intermediate_size"], text["hidden_size"])

    def change(data: Tensors) -> None:
        mine = [(s, n) for s, tensors in data.items() for n in tensors
                if n.startswith(f"{DENSE_UP}.")]
        if any(n.rsplit(".", 1)[1] != "weight" for _, n in mine):  # quantized
            for shard, name in mine:
                del data[shard][name]
            data[mine[0][0]][f"{DENSE_UP}.weight"] = np.zeros(shape, ml_dtypes.bfloat16)
        else:
            data[mine[0][0]][f"{DENSE_UP}.weight_scale"] = np.ones(1, np.float32)
    edit(p, change)


def _all_bf16(p: Path) -> None:
    """Every shard and the index replaced by the BF16 source's: nothing stored quantized,
    the config kept."""
    for shard in p.glob("*.safetensors"):
        shard.unlink()
    (p / INDEX).unlink(missing_ok=True)
    for file in SOURCE.iterdir():
        if file.name.endswith(".safetensors") or file.name == INDEX:
            shutil.copyfile(file, p / file.name)


_SCALE_ROLES = ("weight_scale_inv", "weight_scale")
_CODE_ROLES = ("weight_packed", "weight")

#: (check, condition) -> how it is planted.
MUTATIONS: dict[tuple[str, str], Mutation] = {
    ("CONFIG_QUANT", "Quark: no export block"): _plant(
        _quant_config(lambda qc: qc.pop("export"))),
    ("CONFIG_QUANT", "compressed-tensors: quantization_status not compressed"): _plant(
        _quant_config(lambda qc: qc.update(quantization_status="frozen"))),
    ("CONFIG_QUANT", "compressed-tensors: a kv_cache_scheme"): _plant(
        _quant_config(lambda qc: qc.update(kv_cache_scheme={"num_bits": 8, "type": "float"}))),
    ("CONFIG_QUANT", "DeepSeek FP8: a block other than 128 x 128"): _plant(
        _quant_config(lambda qc: qc.update(weight_block_size=[64, 64]))),
    ("CONFIG_QUANT", "DeepSeek FP8: static activations"): _plant(
        _quant_config(lambda qc: qc.update(activation_scheme="static"))),
    ("CONFIG_QUANT", "ModelOpt NVFP4: a group size other than 16"): _plant(
        _quant_config(lambda qc: qc["config_groups"]["group_0"]["weights"].update(
            group_size=32))),
    ("CONFIG_QUANT", "ModelOpt FP8: quant_algo FP8_BLOCK_SCALES"): _plant(
        _quant_config(lambda qc: qc.update(quant_algo="FP8_BLOCK_SCALES"))),
    ("CONFIG_QUANT", "ModelOpt mixed: an empty quantized_layers table"): _plant(
        _quant_config(lambda qc: qc.update(quantized_layers={}))),
    ("EXCLUDE_GLOB", "a glob entry"): _plant(_exclude(lambda e: [*e, "*self_attn*"])),
    ("EXCLUDE_INVALID", "a 're:' entry that does not compile"): _plant(
        _exclude(lambda e: [*e, "re:model.layers.(1"])),
    ("EXCLUDE_UNMATCHED", "an entry naming no module"): _plant(
        _exclude(lambda e: [*e, "model.layers.1.mlp.no_such_module"])),
    ("EXCLUDE_UNMATCHED", "a 're:' entry re.match does not anchor"): _plant(
        _exclude(lambda e: [*e, r"re:layers\.1\.mlp\.gate$"])),
    ("NOT_EXCLUDED_UNQUANTIZED", "a BF16 Linear the list does not name"): _plant(
        _exclude(lambda e: ["lm_head"])),
    ("EXCLUDED_QUANTIZED", "a quantized module the list names"): _plant(
        _exclude(lambda e: [*e, EXPERT])),
    ("NOTHING_QUANTIZED", "every module stored BF16"): _plant(_all_bf16),
    ("NOTHING_QUANTIZED", "every module stored BF16, the loader casting them in"): _plant(
        _all_bf16, severity="error"),
    ("QUANT_TENSOR_UNEXPECTED", "a tensor its format does not have"): _plant(
        _tensors(_added(f"{EXPERT}.weight_zero_point", np.zeros(1, np.int8), EXPERT,
                        _CODE_ROLES))),
    ("QUANT_SHAPE", "codes of another shape"): _plant(_tensors(_doubled(_CODE_ROLES))),
    ("QUANT_SHAPE", "scales of another shape"): _plant(_tensors(_doubled(_SCALE_ROLES))),
    ("QUANT_DTYPE_UNUSUAL", "scales stored as F16"): _plant(
        _tensors(_as_dtype(_SCALE_ROLES, np.float16))),
    ("UNQUANTIZABLE_QUANTIZED", "the LM head with a scale"): _plant(_tensors(_added(
        "lm_head.weight_scale", np.ones(1, np.float32), "lm_head"))),
    ("UNQUANTIZABLE_QUANTIZED", "a router with a scale"): _plant(_tensors(_added(
        "model.layers.1.mlp.gate.weight_scale", np.ones(1, np.float32),
        "model.layers.1.mlp.gate"))),
    ("FUSED_PAIR_MISMATCH", "a dense up_proj quantized, its gate_proj not"): _plant(
        _half_quantized),
    ("UNQUANT_DTYPE", "an embedding stored as F32"): _plant(_tensors(_as_dtype(
        ("weight",), np.float32, "model.embed_tokens"))),
    ("UNQUANT_DTYPE", "an embedding stored as F16"): _plant(_tensors(_as_dtype(
        ("weight",), np.float16, "model.embed_tokens"))),
}

#: (check, condition, format) no fixture can carry -> the reason.
NOT_PLANTED: dict[tuple[str, str, str], str] = {}
