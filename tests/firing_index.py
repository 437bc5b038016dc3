"""The firing matrix's cases (``tests/test_check_firing.py``) for the checks of config.json,
hf_quant_config.json, the index and the shard set (mxformats/validate/loader.py, files.py,
arch.py): how each declared condition is planted, and the (check, condition, format) no fixture
can carry. Each plant edits the folder; the finding is on a file, not a tensor."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from firing_mutation import Mutation
from validate_corpus import (
    INDEX,
    config,
    index,
    index_metadata,
    raw_header,
    shards,
    write_index,
    write_raw,
)

Config = dict[str, Any]
Index = dict[str, Any]
HF_QUANT = "hf_quant_config.json"


def _plant(edit: Callable[[Path], None], severity: str | None = None) -> Mutation:
    return Mutation(None, edit=edit, anywhere=True, severity=severity)


def _text(name: str, text: str) -> Callable[[Path], None]:
    def run(p: Path) -> None:
        (p / name).write_text(text, encoding="utf-8")
    return run


def _gone(p: Path) -> None:
    (p / "config.json").unlink()


def _text_config(c: Config) -> Config:
    """The language model's keys: ``text_config`` where the config nests them."""
    nested = c.get("text_config")
    return nested if isinstance(nested, dict) else c


def _hidden(value: Any) -> Callable[[Config], None]:
    def change(c: Config) -> None:
        text = _text_config(c)
        text["hidden_size"] = value(text["hidden_size"])
    return change


def _layers(c: Config) -> None:
    _text_config(c)["num_hidden_layers"] = 10**8


def _eps(c: Config) -> None:
    _text_config(c)["rms_norm_eps"] = float("nan")


def _nested_conflict(c: Config) -> None:
    """A text_config whose quantization_config is the top level's with one key more."""
    c["text_config"] = dict(c, quantization_config={**c.get("quantization_config", {}),
                                                    "version": "0.0.1"})


def _unknown_method(c: Config) -> None:
    c["quantization_config"] = {"quant_method": "awq", "bits": 4}


def _no_quant_config(p: Path) -> None:
    """config.json without quantization_config, and no hf_quant_config.json (which vLLM
    reads when config.json has none)."""
    config(lambda c: c.pop("quantization_config", None))(p)
    (p / HF_QUANT).unlink(missing_ok=True)


def _hf_quant(change: Callable[[Config], None]) -> Callable[[Path], None]:
    """hf_quant_config.json after ``change`` of its ``quantization`` object, written from
    config.json's ModelOpt quantization_config where the fixture ships none."""
    def run(p: Path) -> None:
        path = p / HF_QUANT
        if path.exists():
            data = json.loads(path.read_text())
        else:
            qc = json.loads((p / "config.json").read_text())["quantization_config"]
            data = {"producer": qc.get("producer", {"name": "modelopt"}),
                    "quantization": {k: v for k, v in qc.items() if k not in ("producer",
                                                                              "quant_method")}}
        change(data["quantization"])
        path.write_text(json.dumps(data))
    return run


def _other_format(p: Path) -> None:
    """An hf_quant_config.json declaring a format other than config.json's."""
    algo = "FP8" if (p / HF_QUANT).exists() else "NVFP4"
    (p / HF_QUANT).write_text(json.dumps({"producer": {"name": "modelopt"}, "quantization": {
        "quant_algo": algo, "group_size": 16, "exclude_modules": ["lm_head"]}}))


def _set(key: str, value: Any) -> Callable[[Config], None]:
    def change(q: Config) -> None:
        q[key] = value
    return change


#: quant_algo -> another algorithm of the same descriptor (detected as the same format)
_SIBLING_ALGO = {"NVFP4": "W4A16_NVFP4", "W4A16_NVFP4": "NVFP4",
                 "FP8_PB_WO": "FP8_BLOCK_SCALES", "FP8_BLOCK_SCALES": "FP8_PB_WO"}


def _sibling_algo(q: Config) -> None:
    q["quant_algo"] = _SIBLING_ALGO[str(q["quant_algo"]).upper()]


def _exclude_more(q: Config) -> None:
    q["exclude_modules"] = [*q.get("exclude_modules", []), "model.layers.99*"]


def _first_name(data: Index) -> str:
    return sorted(data["weight_map"])[0]


def _name_not_string(data: Index) -> None:
    data["weight_map"][_first_name(data)] = 1


def _unlisted(data: Index) -> None:
    del data["weight_map"][_first_name(data)]


def _remapped(data: Index) -> None:
    """The first tensor's entry names the other shard."""
    name = _first_name(data)
    others = sorted(set(data["weight_map"].values()) - {data["weight_map"][name]})
    data["weight_map"][name] = others[0]


def _phantom(data: Index) -> None:
    data["weight_map"]["model.phantom.weight"] = sorted(set(data["weight_map"].values()))[0]


def _total(value: Callable[[int], Any]) -> Callable[[Path], None]:
    """``metadata.total_size`` set from the tensor bytes of the shards."""
    def run(p: Path) -> None:
        data = index(p)
        size = 0
        for shard in shards(p):
            header, _ = raw_header(p / shard)
            size += sum(e["data_offsets"][1] - e["data_offsets"][0]
                        for k, e in header.items() if k != "__metadata__")
        data["metadata"] = {**data.get("metadata", {}), "total_size": value(size)}
        write_index(p, data)
    return run


def _no_index(p: Path) -> None:
    """The index removed, and a lone model.safetensors renamed as a shard of one."""
    (p / INDEX).unlink(missing_ok=True)
    single = p / "model.safetensors"
    if single.exists():
        single.rename(p / "model-00001-of-00001.safetensors")


def _shard_gone(p: Path) -> None:
    (p / shards(p)[-1]).unlink()


def _stray(sub: str) -> Callable[[Path], None]:
    def run(p: Path) -> None:
        (p / sub).mkdir(exist_ok=True)
        shutil.copyfile(p / shards(p)[0], p / sub / "extra-00001-of-00001.safetensors")
    return run


def _copied_into_other(p: Path) -> None:
    """The first shard's first tensor written again into the last shard (the index kept)."""
    first, last = p / shards(p)[0], p / shards(p)[-1]
    fh, fdata = raw_header(first)
    name = next(k for k in fh if k != "__metadata__")
    begin, end = fh[name]["data_offsets"]
    lh, ldata = raw_header(last)
    lh[name] = {**fh[name], "data_offsets": [len(ldata), len(ldata) + end - begin]}
    write_raw(last, lh, ldata + fdata[begin:end])


#: (check, condition) -> how it is planted.
MUTATIONS: dict[tuple[str, str], Mutation] = {
    ("CONFIG_PARSE", "config.json absent"): _plant(_gone),
    ("CONFIG_PARSE", "not JSON"): _plant(_text("config.json", '{"model_type": ')),
    ("CONFIG_PARSE", "not an object"): _plant(_text("config.json", "[]")),
    ("CONFIG_PARSE", "nested too deeply"): _plant(
        _text("config.json", "[" * 100_000 + "]" * 100_000)),
    ("CONFIG_ARCH", "a size not an integer"): _plant(config(_hidden(lambda v: f"{v}"))),
    ("CONFIG_ARCH", "a hidden size the embedding contradicts"): _plant(
        config(_hidden(lambda v: 2 * v))),
    ("CONFIG_ARCH", "more layers than the shards hold"): _plant(config(_layers)),
    ("CONFIG_ARCH", "rms_norm_eps not finite"): _plant(config(_eps)),
    ("CONFIG_QUANT_CONFLICT", "text_config's quantization_config differs"): _plant(
        config(_nested_conflict)),
    ("CONFIG_QUANT_CONTRADICTION", "another format in hf_quant_config.json"): _plant(
        _other_format),
    ("CONFIG_QUANT_CONTRADICTION", "another quant_algo"): _plant(_hf_quant(_sibling_algo)),
    ("CONFIG_QUANT_CONTRADICTION", "another group_size"): _plant(
        _hf_quant(_set("group_size", 64))),
    ("CONFIG_QUANT_CONTRADICTION", "other exclude_modules"): _plant(_hf_quant(_exclude_more)),
    ("FORMAT_UNSUPPORTED", "a quant_method no descriptor knows"): _plant(
        config(_unknown_method)),
    ("FORMAT_NOT_NUMERIC", "no quantization_config"): _plant(_no_quant_config),
    ("INDEX_PARSE", "not JSON"): _plant(_text(INDEX, '{"weight_map": ')),
    ("INDEX_PARSE", "no weight_map"): _plant(index_metadata(lambda d: d.pop("weight_map"))),
    ("INDEX_PARSE", "a file name not a string"): _plant(index_metadata(_name_not_string)),
    ("INDEX_PARSE", "an empty weight_map"): _plant(
        index_metadata(lambda d: d.update(weight_map={}))),
    ("INDEX_PARSE", "no metadata object"): _plant(
        index_metadata(lambda d: d.pop("metadata", None)), severity="warning"),
    ("INDEX_MISSING", "no index and no model.safetensors"): _plant(_no_index),
    ("SHARD_MISSING", "a listed shard absent"): _plant(_shard_gone),
    ("SHARD_STRAY", "an unlisted shard beside the others"): _plant(_stray(".")),
    ("SHARD_STRAY", "an unlisted shard in a subfolder"): _plant(_stray("old")),
    ("INDEX_TENSOR_NOT_IN_SHARD", "an entry of a tensor no shard holds"): _plant(
        index_metadata(_phantom)),
    ("INDEX_TENSOR_NOT_IN_SHARD", "an entry naming the other shard"): _plant(
        index_metadata(_remapped)),
    ("SHARD_TENSOR_NOT_IN_INDEX", "a tensor the index does not list"): _plant(
        index_metadata(_unlisted)),
    ("SHARD_TENSOR_NOT_IN_INDEX", "a tensor the index maps elsewhere"): _plant(
        index_metadata(_remapped)),
    ("TENSOR_IN_TWO_SHARDS", "a tensor copied into the other shard"): _plant(_copied_into_other),
    ("TOTAL_SIZE_MISMATCH", "one byte more"): _plant(_total(lambda size: size + 1)),
    ("TOTAL_SIZE_MISMATCH", "not an integer"): _plant(_total(str)),
}

_NO_INDEX = "the compressed-tensors-mixed fixture is one model.safetensors with no index"

#: (check, condition, format) no fixture can carry -> the reason.
NOT_PLANTED: dict[tuple[str, str, str], str] = {
    **{(cid, condition, "compressed-tensors-mixed"): _NO_INDEX
       for cid, condition in (
           *(("INDEX_PARSE", c) for c in ("not JSON", "no weight_map", "a file name not a string",
                                          "an empty weight_map", "no metadata object")),
           ("SHARD_MISSING", "a listed shard absent"),
           ("INDEX_TENSOR_NOT_IN_SHARD", "an entry of a tensor no shard holds"),
           ("INDEX_TENSOR_NOT_IN_SHARD", "an entry naming the other shard"),
           ("SHARD_TENSOR_NOT_IN_INDEX", "a tensor the index does not list"),
           ("SHARD_TENSOR_NOT_IN_INDEX", "a tensor the index maps elsewhere"),
           ("TENSOR_IN_TWO_SHARDS", "a tensor copied into the other shard"),
           ("TOTAL_SIZE_MISMATCH", "one byte more"),
           ("TOTAL_SIZE_MISMATCH", "not an integer"))},
    ("CONFIG_QUANT_CONTRADICTION", "another quant_algo", "modelopt-mixed"): (
        "MIXED_PRECISION is ModelOpt's one mixed algorithm: another declares another format "
        "(the condition 'another format in hf_quant_config.json')"),
    ("FORMAT_NOT_NUMERIC", "no quantization_config", "bf16"): (
        "the BF16 fixture has no quantization_config: its clean run is this condition"),
    ("CONFIG_QUANT_CONFLICT", "text_config's quantization_config differs", "bf16"): (
        "a BF16 checkpoint has no top-level quantization_config for a nested one to differ "
        "from (one alone declares a format: FORMAT_UNSUPPORTED)"),
    ("CONFIG_QUANT_CONTRADICTION", "another format in hf_quant_config.json", "bf16"): (
        "a BF16 config.json declares nothing for hf_quant_config.json to contradict: vLLM "
        "then reads hf_quant_config.json's format"),
}
