"""``mxformats validate`` core: loading, files / coverage / layout checks, path safety, runner,
reports, CLI and demo.

Corruptions run at ``--level structure`` and compare the exact set of finding IDs of the
core groups (files, coverage, layout, internal) with the expected one, so checks of the other
groups (numbers, deployment, ...) landing later cannot break them.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mxformats.cli import main
from mxformats.tensorfile import read_header, read_safetensors, write_safetensors
from mxformats.testing.checkpoints import make_kimi_checkpoint
from mxformats.validate import coverage, runner
from mxformats.validate.commands import demo, inspect_data
from mxformats.validate.files import load
from mxformats.validate.findings import CHECKS, Level, Severity
from mxformats.validate.model import CheckpointFormat, Options
from mxformats.validate.runner import Report, exit_code, validate

PRODUCERS = Path(__file__).resolve().parent / "data" / "producers"
PRODUCER_DIRS = sorted(p.name for p in PRODUCERS.iterdir() if p.is_dir())
CORE = {"files", "coverage", "layout", "internal"}
INDEX = "model.safetensors.index.json"


# -- helpers ------------------------------------------------------------------------------------


def _run(path: Path, level: Level = Level.STRUCTURE, **kw: Any) -> Report:
    return validate(path, Options(level=level, workers=1, **kw))


def _ids(report: Report) -> set[str]:
    return {f.check.id for f in report.findings if f.check.group in CORE}


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _index(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((path / INDEX).read_text())
    return data


def _write_index(path: Path, index: dict[str, Any]) -> None:
    (path / INDEX).write_text(json.dumps(index, indent=2))


def _sizes(path: Path, shards: set[str]) -> tuple[int, int]:
    tensor = file = 0
    for s in shards:
        header, _ = read_header(path / s)
        tensor += sum(e["data_offsets"][1] - e["data_offsets"][0]
                      for k, e in header.items() if k != "__metadata__")
        file += (path / s).stat().st_size
    return tensor, file


def _edit(path: Path, fn: Callable[[dict[str, dict[str, Any]]], None]) -> None:
    """Rewrite the shards after ``fn(shards)`` edits {shard: {name: array}}; the index follows
    the shards and keeps its total_size convention."""
    index = _index(path)
    shards = sorted(set(index["weight_map"].values()))
    tensor_before, _ = _sizes(path, set(shards))
    quark_convention = index["metadata"]["total_size"] != tensor_before
    data = {s: read_safetensors(path / s) for s in shards}
    fn(data)
    weight_map = {}
    for s, tensors in data.items():
        write_safetensors(path / s, tensors)
        weight_map.update({t: s for t in tensors})
    index["weight_map"] = dict(sorted(weight_map.items()))
    tensor, file = _sizes(path, set(shards))
    index["metadata"]["total_size"] = file if quark_convention else tensor
    _write_index(path, index)


def _find(data: dict[str, dict[str, Any]], name: str) -> str:
    return next(s for s, tensors in data.items() if name in tensors)


def _config(path: Path, fn: Callable[[dict[str, Any]], None]) -> None:
    cfg = json.loads((path / "config.json").read_text())
    fn(cfg)
    (path / "config.json").write_text(json.dumps(cfg, indent=2))


@pytest.fixture(scope="module")
def gen(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """make_kimi_checkpoint, cached per argument set for the module."""
    base = tmp_path_factory.mktemp("gen")
    cache: dict[str, Path] = {}

    def make(fmt: str, **kw: Any) -> Path:
        key = fmt + "".join(f"-{k}={v}" for k, v in sorted(kw.items())).replace("*", "x")
        key = key.replace("/", "_").replace(" ", "").replace("'", "").replace(",", "_")
        if key not in cache:
            cache[key] = make_kimi_checkpoint(base / key, fmt, **kw)
        return cache[key]

    return make


MX = PRODUCERS / "kimi-k2-mxfp4-quark"
W4A8 = PRODUCERS / "kimi-k2-w4a8-quark"
CT = PRODUCERS / "kimi-k2-int4-compressed-tensors"
BF16 = PRODUCERS / "src-bf16"
EXPERT = "model.layers.1.mlp.experts.1.gate_proj"


# -- clean checkpoints ---------------------------------------------------------------------------


@pytest.mark.parametrize("level", list(Level), ids=[lv.value for lv in Level])
@pytest.mark.parametrize("name", PRODUCER_DIRS)
def test_producer_checkpoints_pass(name: str, level: Level) -> None:
    report = _run(PRODUCERS / name, level)
    assert exit_code(report) == 0, [f.to_json() for f in report.findings]
    assert not [f for f in report.findings if f.check.id == "INTERNAL_ERROR"]


def test_producer_formats_detected() -> None:
    want = {MX: CheckpointFormat.QUARK_MXFP4, W4A8: CheckpointFormat.QUARK_W4A8,
            CT: CheckpointFormat.CT_INT4, BF16: CheckpointFormat.BF16,
            PRODUCERS / "kimi-k2-nvfp4-modelopt": CheckpointFormat.MODELOPT_NVFP4,
            PRODUCERS / "kimi-k2-nvfp4-compressed-tensors": CheckpointFormat.CT_NVFP4,
            PRODUCERS / "kimi-k2-fp8-block-compressed-tensors": CheckpointFormat.CT_FP8_BLOCK,
            PRODUCERS / "kimi-k2-fp8-block-deepseek": CheckpointFormat.FP8_BLOCK}
    for path, fmt in want.items():
        loaded = load(path, Options())
        assert loaded.ckpt is not None and loaded.ckpt.format == fmt
    bf16 = _run(BF16)
    assert "FORMAT_NOT_NUMERIC" in _ids(bf16)
    # the compressed-tensors re-shard puts one module across two files: a warning, exit 0
    assert _ids(_run(CT)) == {"MODULE_SPLIT"}
    assert exit_code(_run(CT), strict=True) == 1


@pytest.mark.parametrize("kw", [
    {"fmt": "quark-mxfp4", "multimodal": True},
    {"fmt": "quark-w4a8", "multimodal": True},
    {"fmt": "compressed-tensors-int4", "multimodal": True},
    {"fmt": "quark-mxfp4", "experts": 6, "layers": 4, "first_dense": 2},
    {"fmt": "compressed-tensors-int4", "experts": 3, "shared_experts": 0, "hidden": 64},
    {"fmt": "quark-w4a8", "experts": 5, "shards": 3},
    {"fmt": "compressed-tensors-int4", "shards": 1},  # one model.safetensors, no index
    # MTP layer: its shared_head.head is an LM head, which vLLM never quantizes
    {"fmt": "quark-mxfp4", "nextn": 1, "exclude": ["lm_head", "*self_attn*", "*.gate",
                                                   "*shared_experts*", "*embed*", "*norm*",
                                                   "*shared_head.head"]},
    {"fmt": "bf16", "multimodal": True},
], ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items() if k != "exclude"))
def test_generated_checkpoints_pass(gen: Callable[..., Path], kw: dict[str, Any]) -> None:
    kw = dict(kw)
    path = gen(kw.pop("fmt"), **kw)
    report = _run(path, Level.SCALES)
    assert exit_code(report) == 0, [f.to_json() for f in report.findings]
    ckpt = report.ckpt
    assert ckpt is not None and ckpt.arch is not None
    assert ckpt.arch.experts == kw.get("experts", 4)
    assert ckpt.arch.multimodal == kw.get("multimodal", False)


def test_layout_facts_from_config(gen: Callable[..., Path]) -> None:
    ckpt = load(gen("compressed-tensors-int4", multimodal=True), Options()).ckpt
    assert ckpt is not None and ckpt.arch is not None
    assert ckpt.arch.prefix == "language_model.model."
    assert ckpt.arch.lm_head == "language_model.lm_head"
    assert ckpt.text_config is ckpt.config["text_config"]
    assert any(n.startswith("vision_tower.") for n in ckpt.expected)
    mod = ckpt.modules["language_model.model.layers.1.mlp.experts.0.down_proj"]
    assert mod.quantized and set(mod.tensors) == {"weight_packed", "weight_scale", "weight_shape"}
    assert not ckpt.modules["language_model.lm_head"].quantized
    ref = mod.tensors["weight_packed"]
    assert ref.begin >= 8 and ref.nbytes == int(np.prod(ref.shape)) * 4


# -- corruptions: files --------------------------------------------------------------------------


def _drop_from_index(p: Path) -> None:
    index = _index(p)
    del index["weight_map"][f"{EXPERT}.weight_scale"]
    _write_index(p, index)


def _stray(p: Path) -> None:
    shutil.copy(p / "model-00001-of-00002.safetensors", p / "extra.safetensors")


def _index_ghost(p: Path) -> None:
    index = _index(p)
    index["weight_map"]["model.layers.1.mlp.gate.ghost"] = "model-00001-of-00002.safetensors"
    _write_index(p, index)


def _total_size(p: Path) -> None:
    index = _index(p)
    index["metadata"]["total_size"] += 1
    _write_index(p, index)


def _absurd_header(p: Path) -> None:
    shard = p / "model-00002-of-00002.safetensors"
    raw = bytearray(shard.read_bytes())
    raw[:8] = struct.pack("<Q", 1 << 62)
    shard.write_bytes(bytes(raw))


def _bad_json(p: Path) -> None:
    shard = p / "model-00002-of-00002.safetensors"
    raw = bytearray(shard.read_bytes())
    raw[8] = ord("[")
    shard.write_bytes(bytes(raw))


def _truncate(p: Path) -> None:
    shard = p / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-1])


def _two_shards(p: Path) -> None:
    def fn(data: dict[str, dict[str, Any]]) -> None:
        name = "model.norm.weight"
        src = _find(data, name)
        other = next(s for s in data if s != src)
        data[other][name] = data[src][name].copy()
    index_before = _index(p)["weight_map"]["model.norm.weight"]
    _edit(p, fn)
    index = _index(p)
    index["weight_map"]["model.norm.weight"] = index_before
    _write_index(p, index)


def _missing_shard(p: Path) -> None:
    (p / "model-00002-of-00002.safetensors").unlink()


FILES_CASES: dict[str, tuple[Callable[[Path], None], set[str]]] = {
    "tensor-not-in-index": (_drop_from_index, {"SHARD_TENSOR_NOT_IN_INDEX"}),
    "stray-shard": (_stray, {"SHARD_STRAY"}),
    "index-names-absent-tensor": (_index_ghost, {"INDEX_TENSOR_NOT_IN_SHARD"}),
    "total-size": (_total_size, {"TOTAL_SIZE_MISMATCH"}),
    "absurd-header-length": (_absurd_header, {"HEADER_LENGTH"}),
    "header-not-json": (_bad_json, {"HEADER_INVALID"}),
    "truncated-by-one-byte": (_truncate, {"TENSOR_SPAN"}),
    "tensor-in-two-shards": (_two_shards, {"TENSOR_IN_TWO_SHARDS", "SHARD_TENSOR_NOT_IN_INDEX"}),
    "missing-shard": (_missing_shard, {"SHARD_MISSING"}),
}


@pytest.mark.parametrize("case", list(FILES_CASES))
def test_files_corruptions(tmp_path: Path, case: str) -> None:
    fn, want = FILES_CASES[case]
    p = _copy(MX, tmp_path / "ckpt")
    fn(p)
    report = _run(p)
    assert _ids(report) == want, [f.to_json() for f in report.findings]
    assert exit_code(report) == (0 if all(CHECKS[i].severity != Severity.ERROR for i in want)
                                 else 1)
    for f in report.findings:
        if f.check.id in want and f.check.id not in ("TOTAL_SIZE_MISMATCH",):
            assert f.file is not None


def test_header_offsets_are_absolute(tmp_path: Path) -> None:
    p = _copy(MX, tmp_path / "ckpt")
    _truncate(p)
    f = next(f for f in _run(p).findings if f.check.id == "TENSOR_SPAN")
    size = (p / "model-00002-of-00002.safetensors").stat().st_size
    assert f.offset is not None and 8 <= f.offset <= size and f.tensor


def test_config_and_index_unparseable(tmp_path: Path) -> None:
    p = _copy(MX, tmp_path / "a")
    (p / "config.json").write_text("[1, 2")
    report = _run(p)
    assert "CONFIG_PARSE" in _ids(report) and exit_code(report) == 1
    q = _copy(MX, tmp_path / "b")
    (q / INDEX).write_text('{"weight_map": 3}')
    report = _run(q)
    assert "INDEX_PARSE" in _ids(report) and exit_code(report) == 1


def test_config_arch_fires(tmp_path: Path) -> None:
    """A shape key of the wrong type: no loader can build the model from it."""
    p = _copy(MX, tmp_path / "ckpt")
    _config(p, lambda c: c.update(hidden_size="7168"))
    report = _run(p)
    assert "CONFIG_ARCH" in _ids(report) and exit_code(report) == 1


# -- corruptions: coverage -----------------------------------------------------------------------


def _drop_expert(p: Path) -> None:
    def fn(data: dict[str, dict[str, Any]]) -> None:
        for tensors in data.values():
            for n in [n for n in tensors if n.startswith("model.layers.2.mlp.experts.2.")]:
                del tensors[n]
    _edit(p, fn)


def _extra_layer(p: Path) -> None:
    def fn(data: dict[str, dict[str, Any]]) -> None:
        s = _find(data, "model.layers.2.input_layernorm.weight")
        data[s]["model.layers.3.input_layernorm.weight"] = data[s][
            "model.layers.2.input_layernorm.weight"].copy()
    _edit(p, fn)


def _extra_expert(p: Path) -> None:
    def fn(data: dict[str, dict[str, Any]]) -> None:
        for tensors in data.values():
            for n in [n for n in tensors if n.startswith("model.layers.2.mlp.experts.3.")]:
                tensors[n.replace("experts.3.", "experts.4.")] = tensors[n].copy()
    _edit(p, fn)


def _norm_shape(p: Path) -> None:
    def fn(data: dict[str, dict[str, Any]]) -> None:
        s = _find(data, "model.norm.weight")
        data[s]["model.norm.weight"] = data[s]["model.norm.weight"][:-1].copy()
    _edit(p, fn)


def _stray_tensor(p: Path) -> None:
    def fn(data: dict[str, dict[str, Any]]) -> None:
        s = _find(data, "model.layers.1.mlp.gate.weight")
        data[s]["model.layers.1.mlp.gate.weight_scale_inv"] = np.ones(1, np.float32)
        s = _find(data, "model.norm.weight")
        data[s]["model.norm.bias"] = np.zeros(3, np.float32)
    _edit(p, fn)


def _split_module(p: Path) -> None:
    def fn(data: dict[str, dict[str, Any]]) -> None:
        name = f"{EXPERT}.weight_scale"
        src = _find(data, name)
        other = next(s for s in data if s != src)
        data[other][name] = data[src].pop(name)
    _edit(p, fn)


def _mtp_declared(p: Path) -> None:
    _config(p, lambda c: c.update(num_nextn_predict_layers=1))


def _more_experts_in_config(p: Path) -> None:
    _config(p, lambda c: c.update(n_routed_experts=5))


COVERAGE_CASES: dict[str, tuple[Callable[[Path], None], set[str]]] = {
    "expert-gap": (_drop_expert, {"EXPERT_GAP"}),
    "layer-beyond-config": (_extra_layer, {"LAYER_UNEXPECTED"}),
    "expert-beyond-config": (_extra_expert, {"EXPERT_EXTRA"}),
    "norm-shape": (_norm_shape, {"SHAPE_MISMATCH"}),
    "unexpected-tensors": (_stray_tensor, {"TENSOR_UNEXPECTED", "UNQUANTIZABLE_QUANTIZED"}),
    "module-split": (_split_module, {"MODULE_SPLIT"}),
    "mtp-declared-absent": (_mtp_declared, {"MTP_ABSENT"}),
    "config-experts-5-tensors-4": (_more_experts_in_config, {"EXPERT_GAP", "SHAPE_MISMATCH"}),
}


@pytest.mark.parametrize("case", list(COVERAGE_CASES))
def test_coverage_corruptions(tmp_path: Path, case: str) -> None:
    fn, want = COVERAGE_CASES[case]
    p = _copy(MX, tmp_path / "ckpt")
    fn(p)
    report = _run(p)
    assert _ids(report) == want, [f.to_json() for f in report.findings]


def test_expert_gap_names_the_expert(tmp_path: Path) -> None:
    p = _copy(MX, tmp_path / "ckpt")
    _drop_expert(p)
    gaps = [f for f in _run(p).findings if f.check.id == "EXPERT_GAP"]
    assert [f.tensor for f in gaps] == ["model.layers.2.mlp.experts.2"]


# -- corruptions: layout -------------------------------------------------------------------------


def _drop_scale(p: Path) -> None:
    def fn(data: dict[str, dict[str, Any]]) -> None:
        del data[_find(data, f"{EXPERT}.weight_scale")][f"{EXPERT}.weight_scale"]
    _edit(p, fn)


def _input_scale(p: Path) -> None:
    def fn(data: dict[str, dict[str, Any]]) -> None:
        data[_find(data, f"{EXPERT}.weight")][f"{EXPERT}.input_scale"] = np.ones((), np.float32)
    _edit(p, fn)


def _e8m0_dtype(p: Path) -> None:
    import ml_dtypes

    def fn(data: dict[str, dict[str, Any]]) -> None:
        s = _find(data, f"{EXPERT}.weight_scale")
        data[s][f"{EXPERT}.weight_scale"] = data[s][f"{EXPERT}.weight_scale"].view(
            ml_dtypes.float8_e8m0fnu)
    _edit(p, fn)


def _unpacked(p: Path) -> None:
    def fn(data: dict[str, dict[str, Any]]) -> None:
        s = _find(data, f"{EXPERT}.weight")
        w = data[s][f"{EXPERT}.weight"]
        data[s][f"{EXPERT}.weight"] = np.repeat(w, 2, axis=1)
    _edit(p, fn)


def _glob_exclude(p: Path) -> None:
    def fn(c: dict[str, Any]) -> None:
        ex = c["quantization_config"]["exclude"]
        c["quantization_config"]["exclude"] = [e for e in ex if "self_attn" not in e] + [
            "*self_attn*"]
    _config(p, fn)


def _exclude_expert(p: Path) -> None:
    _config(p, lambda c: c["quantization_config"]["exclude"].append(EXPERT))


def _no_export(p: Path) -> None:
    _config(p, lambda c: c["quantization_config"].pop("export"))


def _static_input(p: Path) -> None:
    _config(p, lambda c: c["quantization_config"]["global_quant_config"]["input_tensors"].update(
        is_dynamic=False))


LAYOUT_CASES: dict[str, tuple[Path, Callable[[Path], None], set[str]]] = {
    "missing-weight-scale": (MX, _drop_scale, {"QUANT_TENSOR_MISSING"}),
    "input-scale-dynamic": (MX, _input_scale, {"QUANT_TENSOR_UNEXPECTED"}),
    "scale-f8-e8m0": (MX, _e8m0_dtype, {"QUANT_DTYPE"}),
    "weight-unpacked": (MX, _unpacked, {"QUANT_SHAPE"}),
    "exclude-glob": (MX, _glob_exclude, {"EXCLUDE_GLOB", "NOT_EXCLUDED_UNQUANTIZED"}),
    "excluded-but-quantized": (MX, _exclude_expert, {"EXCLUDED_QUANTIZED"}),
    "no-export-block": (MX, _no_export, {"CONFIG_QUANT"}),
    "static-mxfp4-input": (MX, _static_input, {"CONFIG_QUANT"}),
    "w4a8-missing-scale-2": (W4A8, lambda p: _edit(p, lambda d: d[_find(
        d, f"{EXPERT}.weight_scale_2")].pop(f"{EXPERT}.weight_scale_2")),
        {"QUANT_TENSOR_MISSING"}),
    "ct-leftover-weight": (CT, lambda p: _edit(p, lambda d: d[_find(
        d, f"{EXPERT}.weight_packed")].__setitem__(f"{EXPERT}.weight",
                                                   np.zeros((2, 2), np.float32))),
        {"QUANT_TENSOR_UNEXPECTED", "MODULE_SPLIT"}),
}


@pytest.mark.parametrize("case", list(LAYOUT_CASES))
def test_layout_corruptions(tmp_path: Path, case: str) -> None:
    src, fn, want = LAYOUT_CASES[case]
    p = _copy(src, tmp_path / "ckpt")
    fn(p)
    report = _run(p)
    assert _ids(report) == want, [f.to_json() for f in report.findings]
    assert exit_code(report) == 1


#: Every Linear but routed expert 0's down_proj of layer 2 (fnmatch, as Quark's exclude).
_ALL_BUT_ONE = ["lm_head", "model.layers.[01].*", "model.layers.2.[!m]*",
                "model.layers.2.mlp.[!e]*", "model.layers.2.mlp.experts.[!0]*",
                "model.layers.2.mlp.experts.0.[!d]*"]


@pytest.mark.parametrize(("exclude", "fired"), [(["*"], True), (_ALL_BUT_ONE, False)])
def test_a_checkpoint_with_nothing_quantized_is_not_silently_ok(
        exclude: list[str], fired: bool, gen: Callable[..., Path]) -> None:
    """A quantization config whose exclude list names every Linear: vLLM loads it all BF16,
    so the verdict must not be a silent OK for "quark-mxfp4" (a warning: --strict fails it);
    one module left quantized is a quantized checkpoint."""
    report = _run(gen("quark-mxfp4", exclude=exclude), Level.FULL)
    assert _ids(report) == ({"NOTHING_QUANTIZED"} if fired else set()), [
        f.to_json() for f in report.findings]
    assert exit_code(report) == 0
    assert exit_code(report, strict=True) == int(fired)


def test_must_pass_variants(tmp_path: Path) -> None:
    # W4A8 weight_scale of shape [1] (Quark < 1.0) and compressed-tensors weight_shape I64
    p = _copy(W4A8, tmp_path / "w4a8")

    def scale_1(data: dict[str, dict[str, Any]]) -> None:
        for tensors in data.values():
            for n in [n for n in tensors if n.endswith(".weight_scale")]:
                tensors[n] = tensors[n].reshape(1)
    _edit(p, scale_1)
    assert exit_code(_run(p, Level.SCALES)) == 0
    q = _copy(CT, tmp_path / "ct")

    def shape_i64(data: dict[str, dict[str, Any]]) -> None:
        for tensors in data.values():
            for n in [n for n in tensors if n.endswith(".weight_shape")]:
                tensors[n] = tensors[n].astype(np.int64)
    _edit(q, shape_i64)
    report = _run(q, Level.SCALES)
    assert exit_code(report) == 0 and _ids(report) == {"MODULE_SPLIT"}


def test_weight_shape_value(tmp_path: Path) -> None:
    p = _copy(CT, tmp_path / "ct")

    def fn(data: dict[str, dict[str, Any]]) -> None:
        s = _find(data, f"{EXPERT}.weight_shape")
        data[s][f"{EXPERT}.weight_shape"] = np.array([96, 64], np.int32)
    _edit(p, fn)
    assert _ids(_run(p)) == {"MODULE_SPLIT"}  # structure level reads no data
    found = [f for f in _run(p, Level.SCALES).findings if f.check.id == "QUANT_SHAPE"]
    assert [f.tensor for f in found] == [f"{EXPERT}.weight_shape"]


@pytest.mark.parametrize(("fmt", "kw", "tensor"), [
    # Quark's bare "lm_head" does not match language_model.lm_head; vision not excluded
    ("quark-mxfp4", {"multimodal": True, "exclude": [
        "lm_head", "*self_attn*", "*.gate", "*shared_experts*", "*embed*", "*norm*",
        "*mm_projector*"]}, "language_model.lm_head.weight"),
    # router quantized (no "*.gate")
    ("quark-mxfp4", {"exclude": ["lm_head", "*self_attn*", "*shared_experts*", "*embed*",
                                 "*norm*"]}, "model.layers.1.mlp.gate.weight"),
    # W4A8 shared experts quantized: no Linear scheme
    ("quark-w4a8", {"exclude": ["*self_attn*", "*mlp.gate", "*lm_head", "*mlp.gate_proj",
                                "*mlp.up_proj", "*mlp.down_proj"]},
     "model.layers.1.mlp.shared_experts.down_proj.weight"),
    # compressed-tensors vision tower quantized (ignore misses it)
    ("compressed-tensors-int4", {"multimodal": True, "exclude": [
        "re:.*lm_head", "re:.*self_attn.*", "re:.*mlp.gate$", "re:.*shared_experts.*",
        "re:language_model.model.layers.0.mlp.*", "re:mm_projector.*"]},
     "vision_tower.encoder.blocks.0.wo.weight_packed"),
], ids=["bare-lm-head-multimodal", "router", "w4a8-shared-expert", "ct-vision"])
def test_modules_vllm_builds_unquantized(gen: Callable[..., Path], fmt: str, kw: dict[str, Any],
                                         tensor: str) -> None:
    report = _run(gen(fmt, **kw))
    bad = [f for f in report.findings if f.check.id == "UNQUANTIZABLE_QUANTIZED"]
    assert tensor in {f.tensor for f in bad}, [f.to_json() for f in report.findings]
    assert all("will not load" in f.message for f in bad)
    assert _ids(report) <= {"UNQUANTIZABLE_QUANTIZED", "MODULE_SPLIT"}
    assert exit_code(report) == 1


def test_fused_pair_mismatch(gen: Callable[..., Path]) -> None:
    p = gen("quark-mxfp4", exclude=["lm_head", "*kv_a_proj_with_mqa", "*q_b_proj", "*kv_b_proj",
                                     "*o_proj", "*.gate", "*shared_experts*", "*embed*",
                                     "*norm*"])
    assert _ids(_run(p)) == {"FUSED_PAIR_MISMATCH"}


# -- formats -------------------------------------------------------------------------------------


def _nvfp4(c: dict[str, Any]) -> None:
    w = c["quantization_config"]["global_quant_config"]["weight"]
    w.update(group_size=16, scale_format="fp8_e4m3")


def _ct_int8(c: dict[str, Any]) -> None:
    qc = c["quantization_config"]
    qc["format"] = "int-quantized"
    qc["config_groups"]["group_0"]["weights"].update(num_bits=8, strategy="channel")


@pytest.mark.parametrize(("src", "fn"), [(MX, _nvfp4), (CT, _ct_int8)], ids=["quark", "ct"])
def test_unverified_format_exits_2(tmp_path: Path, src: Path, fn: Callable[..., None],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    p = _copy(src, tmp_path / "ckpt")
    _config(p, fn)
    report = _run(p)
    assert exit_code(report) == 2 and report.fatal and "not verified" in report.fatal
    assert main(["validate", str(p), "--quiet"]) == 2
    assert "not verified" in capsys.readouterr().err


#: the DeepSeek FP8 block config (official DeepSeek-V3 / Kimi-K2 releases)
_DEEPSEEK_FP8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                 "weight_block_size": [128, 128]}


def test_fp8_block_recognised(tmp_path: Path) -> None:
    """The BF16 producer source declaring DeepSeek FP8: vLLM's Fp8Config builds every Linear
    with an FP8 weight and a weight_scale_inv it never loads (filled with float32's minimum),
    casts the BF16 weights in unscaled and skips its missing-weights check for a quantized
    model (DeepSeekFP8Block.all_bf16_why): it loads and decodes wrong, an error."""
    p = _copy(BF16, tmp_path / "fp8")
    _config(p, lambda c: c.update(quantization_config=dict(_DEEPSEEK_FP8)))
    report = _run(p)
    assert report.format == "fp8-block" and exit_code(report) == 1
    # verified numbers now: no FORMAT_NOT_NUMERIC; every module is still BF16
    assert _ids(report) == {"NOTHING_QUANTIZED"}
    (f,) = report.findings
    assert f.effective_severity is Severity.ERROR and "create_fp8_scale_parameter" in f.message


def test_fp8_block_every_linear_excluded_is_a_warning(tmp_path: Path) -> None:
    """The other side: modules_to_not_convert names every Linear, so vLLM builds them all
    BF16 and the checkpoint loads as BF16: NOTHING_QUANTIZED stays a warning."""
    p = _copy(BF16, tmp_path / "fp8")
    names = sorted(n.removesuffix(".weight") for n in _index(p)["weight_map"]
                   if n.endswith("proj.weight") or n.endswith("mqa.weight"))
    _config(p, lambda c: c.update(quantization_config={**_DEEPSEEK_FP8,
                                                       "modules_to_not_convert": names}))
    report = _run(p)
    assert _ids(report) == {"NOTHING_QUANTIZED"}, [f.to_json() for f in report.findings]
    assert exit_code(report) == 0 and exit_code(report, strict=True) == 1
    # one Linear left to the scheme: vLLM builds it FP8, the error again
    _config(p, lambda c: c["quantization_config"].update(modules_to_not_convert=names[1:]))
    report = _run(p)
    assert exit_code(report) == 1 and names[0] in report.findings[0].message


# -- path safety ---------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ["/etc/passwd", "../outside.safetensors", "a/../../x"])
def test_unsafe_index_entries_never_opened(tmp_path: Path, entry: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    p = _copy(MX, tmp_path / "ckpt")
    index = _index(p)
    index["weight_map"]["model.layers.1.mlp.gate.weight"] = entry
    _write_index(p, index)
    opened: list[str] = []
    import mxformats.validate.readers.local as reader_mod

    real = reader_mod.read_header_table

    def spy(path: Any) -> Any:
        opened.append(os.fspath(path))
        return real(path)

    monkeypatch.setattr(reader_mod, "read_header_table", spy)
    report = _run(p)
    assert "INDEX_UNSAFE_PATH" in _ids(report)
    assert all(Path(o).resolve().is_relative_to(p.resolve()) for o in opened)
    assert exit_code(report) == 1


def test_symlink_escape(tmp_path: Path) -> None:
    p = _copy(MX, tmp_path / "ckpt")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shard = "model-00002-of-00002.safetensors"
    (p / shard).rename(outside / shard)
    (p / shard).symlink_to(outside / shard)
    report = _run(p)
    assert _ids(report) == {"SYMLINK_ESCAPE"} and exit_code(report) == 1
    ok = _run(p, allow_symlink_root=(outside,))
    assert exit_code(ok) == 0, [f.to_json() for f in ok.findings]


def test_symlink_inside_and_hf_cache(tmp_path: Path) -> None:
    repo = tmp_path / "hub" / "models--moonshotai--Kimi-K2"
    snap = repo / "snapshots" / "0123abcd"
    blobs = repo / "blobs"
    snap.mkdir(parents=True)
    blobs.mkdir()
    for f in MX.iterdir():
        blob = blobs / f"sha-{f.name}"
        shutil.copy(f, blob)
        (snap / f.name).symlink_to(Path("../..") / "blobs" / blob.name)
    report = _run(snap)
    assert exit_code(report) == 0, [f.to_json() for f in report.findings]
    # a snapshot link into another repo's blobs escapes
    other = tmp_path / "hub" / "models--evil--x" / "blobs"
    other.mkdir(parents=True)
    name = "model-00001-of-00002.safetensors"
    shutil.copy(snap / name, other / name)
    (snap / name).unlink()
    (snap / name).symlink_to(other / name)
    assert "SYMLINK_ESCAPE" in _ids(_run(snap))


# -- runner, reports, CLI ------------------------------------------------------------------------


def test_check_exception_becomes_a_finding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(ckpt: Any, opts: Any) -> Any:
        yield from ()
        raise RuntimeError("kaboom")

    monkeypatch.setattr(runner, "CHECK_MODULES", tuple(  # the runner runs the records
        replace(c, run=boom) if c is coverage.CHECK else c for c in runner.CHECK_MODULES))
    report = _run(MX)
    internal = [f for f in report.findings if f.check.id == "INTERNAL_ERROR"]
    assert len(internal) == 1 and "kaboom" in internal[0].message
    assert exit_code(report) == 1


def test_garbage_never_tracebacks(tmp_path: Path) -> None:
    p = _copy(MX, tmp_path / "ckpt")
    (p / "config.json").write_text('{"text_config": 7, "quantization_config": []}')
    (p / INDEX).write_text('{"metadata": {"total_size": "x"}, "weight_map": {"a": "b"}}')
    report = _run(p, Level.FULL)
    assert exit_code(report) == 1
    assert "INTERNAL_ERROR" not in _ids(report)


def test_cli_json_junit_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, junit = tmp_path / "r.json", tmp_path / "r.xml"
    assert main(["validate", str(MX), "--json", str(out), "--junit", str(junit)]) == 0
    data = json.loads(out.read_text())
    assert data["schema_version"] == 3 and data["ok"] is True and data["format"] == "quark-mxfp4"
    assert isinstance(data["tool_version"], str) and isinstance(data["findings"], list)
    suite = ET.parse(junit).getroot()
    names = [c.get("name") for c in suite.iter("testcase")]
    assert len(names) == len(set(names)) and "EXPERT_GAP" in names and "HEADER_LENGTH" in names
    assert suite.get("failures") == "0"
    capsys.readouterr()
    # a broken checkpoint: exit 1, JSON on stdout, findings with every field
    p = _copy(MX, tmp_path / "broken")
    _drop_scale(p)
    assert main(["validate", str(p), "--json", "-", "--level", "structure"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False
    f = next(f for f in data["findings"] if f["check"] == "QUANT_TENSOR_MISSING")
    assert set(f) == {"check", "severity", "file", "tensor", "offset", "message", "url",
                      "meaning", "fix"}
    assert f["severity"] == "error" and f["tensor"] == f"{EXPERT}.weight_scale"
    assert main(["validate", str(p), "--junit", str(junit), "--quiet"]) == 1
    failed = [c for c in ET.parse(junit).getroot().iter("testcase") if c.find("failure") is not None]
    assert [c.get("name") for c in failed] == ["QUANT_TENSOR_MISSING"]
    quiet = capsys.readouterr().out
    assert "FAILED" in quiet and "QUANT_TENSOR_MISSING" not in quiet
    # warnings: 0, or 1 with --strict; bad usage and unreadable folder: 2
    assert main(["validate", str(CT), "--level", "structure", "--quiet"]) == 0
    assert main(["validate", str(CT), "--level", "structure", "--quiet", "--strict"]) == 1
    assert main(["validate", str(tmp_path / "nope")]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["validate", str(MX), "--tp", "0"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["validate", str(MX), "--level", "everything"])
    assert exc.value.code == 2


def test_inspect(capsys: pytest.CaptureFixture[str], gen: Callable[..., Path]) -> None:
    data = inspect_data(str(MX))
    assert data["format"] == "quark-mxfp4" and data["layers"] == 3 and data["experts"] == 4
    assert data["quantized_by_kind"] == {"dense_mlp": 3, "expert": 24}
    assert data["excluded_modules"] > 0 and data["bytes_per_dtype"]["U8"] > 0
    assert data["producer"] and "quark" in data["producer"]
    mm = inspect_data(str(gen("compressed-tensors-int4", multimodal=True)))
    assert mm["layout"].startswith("multimodal") and mm["prefix"] == "language_model.model."
    assert main(["inspect", str(W4A8)]) == 0
    assert "quark-w4a8" in capsys.readouterr().out
    assert main(["inspect", str(CT), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["format"] == "compressed-tensors-int4"


def test_inspect_empty_folder_is_a_usage_error(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """An empty folder holds no checkpoint: exit 2 naming it, for every output format;
    a folder with only a config.json is a checkpoint with problems (the other side)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    for extra in ([], ["--json"], ["--quiet"]):
        assert main(["inspect", *extra, str(empty)]) == 2
        out = capsys.readouterr()
        assert "no checkpoint here" in out.err and not out.out
    shutil.copy(MX / "config.json", empty / "config.json")
    assert main(["inspect", "--quiet", str(empty)]) == 0
    assert "quark-mxfp4" in capsys.readouterr().out


@pytest.mark.parametrize(("architectures", "shown"), [
    (["DeepseekV3ForCausalLM"], "DeepseekV3ForCausalLM"),
    (3.5, None), ("DeepseekV3ForCausalLM", None), ([], None), ([7], None), ({"a": 1}, None),
])
def test_inspect_hostile_architectures(architectures: Any, shown: str | None, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """``architectures`` is a list of class names (transformers' ``PretrainedConfig``); any
    other value is shown as unknown, never a TypeError out of ``inspect``."""
    p = _copy(MX, tmp_path / "c")
    _config(p, lambda c: c.update(architectures=architectures))
    assert main(["inspect", "--json", str(p)]) == 0
    assert json.loads(capsys.readouterr().out)["architecture"] == shown
    assert main(["inspect", str(p)]) == 0 and "quark-mxfp4" in capsys.readouterr().out


def test_demo(tmp_path: Path) -> None:
    import io

    buf = io.StringIO()
    assert demo(tmp_path, buf) == 0
    text = buf.getvalue()
    assert "UNQUANTIZABLE_QUANTIZED" in text and "demo passed" in text


def test_catalogue_is_complete() -> None:
    from mxformats.validate.catalogue import load_all

    load_all()
    for check in CHECKS.values():
        assert check.id.isupper() and check.meaning and check.fix
    core = {c.id for c in CHECKS.values() if c.group in CORE}
    assert {"HEADER_LENGTH", "TENSOR_SPAN", "EXPERT_GAP", "UNQUANTIZABLE_QUANTIZED",
            "SYMLINK_ESCAPE", "INTERNAL_ERROR"} <= core


def test_catalogue_renders_every_check() -> None:
    from mxformats.validate.catalogue import render_markdown

    page = render_markdown()
    for cid in CHECKS:
        assert f"| <a id=\"{cid}\" href=\"#{cid}\"><code>{cid}</code></a> |" in page
    doc = (Path(__file__).resolve().parent.parent / "docs" / "validate-checks.md").read_text()
    assert doc == page, "stale: run python -m mxformats.validate.catalogue"


def test_nested_quantization_config(tmp_path: Path, gen: Callable[..., Path]) -> None:
    src = gen("compressed-tensors-int4", multimodal=True)
    cfg = json.loads((src / "config.json").read_text())
    assert "quantization_config" not in cfg and "quantization_config" in cfg["text_config"]
    p = _copy(src, tmp_path / "mm")

    def conflict(c: dict[str, Any]) -> None:
        c["quantization_config"] = dict(c["text_config"]["quantization_config"], ignore=[])
    _config(p, conflict)
    ids = _ids(_run(p))
    assert "CONFIG_QUANT_CONFLICT" in ids and "EXCLUDED_QUANTIZED" not in ids


# -- the garbage collector pause of files.load ---------------------------------------------------


@pytest.mark.parametrize("was_enabled", [True, False])
@pytest.mark.parametrize("fails", [False, True])
def test_load_restores_the_garbage_collector(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             was_enabled: bool, fails: bool) -> None:
    """``files.load`` pauses the cyclic collector and leaves it as it found it, whether the
    load returns or raises (a check module that crashes mid-load must not leave the process
    without garbage collection)."""
    import gc

    from mxformats.validate import files

    folder = make_kimi_checkpoint(tmp_path / "ckpt", "bf16")
    seen: list[bool] = []
    real = files._load

    def spy(root: Any, opts: Options) -> Any:
        seen.append(gc.isenabled())
        if fails:
            raise RuntimeError("a crash inside the load")
        return real(root, opts)

    monkeypatch.setattr(files, "_load", spy)
    (gc.enable if was_enabled else gc.disable)()
    try:
        if fails:
            with pytest.raises(RuntimeError):
                load(folder, Options())
        else:
            assert load(folder, Options()).ckpt is not None
        assert seen == [False]  # paused during the load
        assert gc.isenabled() is was_enabled  # restored (or left off) after it
    finally:
        gc.enable()
