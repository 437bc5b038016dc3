"""The validator's corruption corpus (issue 4, item 6): ≥ 30 declarative cases, each built from a
generated clean twin (checkpoints.md §7.3 injectors and more), each asserting its exit code and
the exact set of findings ``(check ID, severity, tensor)`` that differ from the twin's."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from validate_corpus import (
    BASES,
    EXPERT,
    INDEX,
    Case,
    Tensors,
    by_offset,
    case,
    config,
    copy_tree,
    edit,
    find,
    index,
    link_escape,
    nibble_swap,
    raw_header,
    set_tensor,
    shards,
    write_index,
    write_raw,
)

from mxformats.testing.checkpoints import make_kimi_checkpoint
from mxformats.validate.findings import CHECKS, Level
from mxformats.validate.model import Options
from mxformats.validate.runner import CHECK_MODULES, Report, exit_code, validate

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

G_IDX = {("QUANT_TENSOR_MISSING", E, f"model.layers.{layer}.mlp.experts.{e}.{proj}.weight_g_idx")
         for layer in (1, 2) for e in range(4) for proj in ("gate_proj", "up_proj", "down_proj")}
CT_G128 = {("CONFIG_QUANT", E, None)} | {
    ("QUANT_SHAPE", E, f"model.layers.{layer}.mlp.experts.{e}.{proj}.weight_scale")
    for layer in (1, 2) for e in range(4) for proj in ("gate_proj", "up_proj", "down_proj")}

CASES: list[Case] = [
    # -- files and index (checkpoints.md §6.0 1-6) --
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
    case("swapped-nibble-order", "mxfp4", set_tensor(f"{EXPERT}.weight", nibble_swap), 1, {("REPRO_MISMATCH", W, f"{EXPERT}.weight"), ("REPRO_UNCORRELATED", E, f"{EXPERT}.weight")}, source=True),
    case("ct-weight-shape-value-mismatch", "ct", poke(f"{EXPERT}.weight_shape", (1,), 64), 1, {("QUANT_SHAPE", E, f"{EXPERT}.weight_shape")}, level=SC),
    case("ct-scale-zero-nonzero-codes", "ct", poke(SCALE, (0, 0), 0.0), 0, {("SCALE_ZERO", W, SCALE)}, level=SC),
    case("ct-config-group-size-128", "ct", ct_weights(group_size=128), 1, CT_G128),
    case("ream-config-experts-vs-tensors", "w4a8", config(lambda c: c.update(n_routed_experts=6)), 1, {("EXPERT_GAP", E, "model.layers.1.mlp.experts.4"), ("EXPERT_GAP", E, "model.layers.1.mlp.experts.5"), ("EXPERT_GAP", E, "model.layers.2.mlp.experts.4"), ("EXPERT_GAP", E, "model.layers.2.mlp.experts.5"), ("SHAPE_MISMATCH", E, "model.layers.1.mlp.gate.weight"), ("SHAPE_MISMATCH", E, BIAS), ("SHAPE_MISMATCH", E, "model.layers.2.mlp.gate.weight"), ("SHAPE_MISMATCH", E, "model.layers.2.mlp.gate.e_score_correction_bias")}),
    case("mxfp4-quantized-vision-linear", "mxfp4-mm", quantize_mx("vision_tower.encoder.blocks.0.mlp.fc0"), 1, {("UNQUANTIZABLE_QUANTIZED", E, "vision_tower.encoder.blocks.0.mlp.fc0.weight")}),
    # -- formats --
    case("nvfp4-config-exit-2", "mxfp4", config(nvfp4), 2, {("FORMAT_UNSUPPORTED", E, None)}),
    case("plain-bf16", "mxfp4", replace_with_bf16_source, 0, {("FORMAT_NOT_NUMERIC", INFO, None)}),
    case("fp8-block-config", "bf16", config(lambda c: c.update(quantization_config={"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]})), 0, set(), removed=frozenset()),
    # -- must pass --
    case("must-pass-w4a8-weight-scale-shape-1", "w4a8", all_tensors(".weight_scale", lambda a: a.reshape(1)), 0, set(), level=SC),
    case("must-pass-ct-weight-shape-i64", "ct", all_tensors(".weight_shape", lambda a: a.astype(np.int64)), 0, set(), level=SC),
    case("must-pass-multimodal-ct-clean-copy", "ct-mm", lambda p: None, 0, set(), level=SC),
]


# -- running -------------------------------------------------------------------------------------


Key = tuple[str, str, "str | None"]


def tuples(report: Report) -> set[Key]:
    return {(f.check.id, f.effective_severity.value, f.tensor) for f in report.findings}


def source_of(base: str) -> Path:
    twin = TWINS[base]
    return twin.parent / f"{twin.name}-bf16"


def options(c: Case) -> Options:
    return Options(level=c.level, workers=1, source=source_of(c.base) if c.source else None)


@pytest.fixture(scope="session")
def twins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One clean twin per base, generated once per session (with its BF16 source)."""
    root = tmp_path_factory.mktemp("twins")
    for name in sorted({c.base for c in CASES} | {"bf16"}):
        if name not in TWINS or not TWINS[name].exists():
            fmt, kw = BASES[name]
            TWINS[name] = make_kimi_checkpoint(root / name, fmt, **kw)
    return TWINS


_CLEAN: dict[tuple[str, Level, bool], tuple[int, set[Key]]] = {}


def clean(c: Case) -> tuple[int, set[Key]]:
    key = (c.base, c.level, c.source)
    if key not in _CLEAN:
        report = validate(TWINS[c.base], options(c))
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
    import importlib

    for name in CHECK_MODULES:
        importlib.import_module(f"mxformats.validate.{name}")
    return CHECKS


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
