"""``mxformats preflight``: the kernel path per engine and target, kernel-path eligibility,
admissible TP, and its exit codes, on the producer fixtures (tests/data/producers) and copies
of them with one config value changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from mxformats.cli import main
from mxformats.validate.descriptors import ct_int4, fp8_block_deepseek
from mxformats.validate.files import load
from mxformats.validate.findings import Level
from mxformats.validate.model import Checkpoint, Options
from mxformats.validate.preflight import TARGET_NAMES, Row, grid_notes, preflight_rows

PRODUCERS = Path(__file__).resolve().parent / "data" / "producers"
INT4 = PRODUCERS / "kimi-k2-int4-compressed-tensors"
NVFP4 = PRODUCERS / "kimi-k2-nvfp4-modelopt"


def _rows(folder: Path) -> dict[tuple[str, str], Row]:
    ckpt = load(str(folder), Options(level=Level.STRUCTURE)).ckpt
    assert ckpt is not None and ckpt.descriptor is not None
    return {(r.engine, r.target): r for r in preflight_rows(ckpt, ckpt.descriptor)}


def _int4_with(tmp_path: Path, **weights: Any) -> Path:
    """A copy of the INT4 fixture whose config group's ``weights`` get ``weights``."""
    folder = tmp_path / "int4"
    shutil.copytree(INT4, folder)
    cfg = json.loads((folder / "config.json").read_text())
    for group in cfg["quantization_config"]["config_groups"].values():
        group["weights"].update(weights)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def test_every_engine_and_target_has_a_row_citing_its_source() -> None:
    rows = _rows(INT4)
    assert len(rows) == 8
    for row in rows.values():
        if row.path != "undeclared":
            assert " @ " in row.source and row.source.split()[0] in (
                "vllm-project/vllm", "sgl-project/sglang")


def test_int4_mxint4_path_on_b200_when_eligible() -> None:
    rows = _rows(INT4)
    assert rows["sglang", "B200/GB200"].source.split()[1].endswith("w4a4_mxint4_moe.py")
    assert rows["sglang", "B200/GB200"].skipped == []
    assert rows["sglang", "H100/H200"].path == "native"  # Marlin, no mxint4 below sm100
    assert "Marlin" in rows["sglang", "H100/H200"].what
    assert rows["vllm", "MI300X"].path == "emulated"


@pytest.mark.parametrize(("change", "why"), [
    ({"actorder": "group"}, "actorder"),
    ({"symmetric": False}, "weights.symmetric"),
    ({"group_size": 128}, "weights.group_size"),
], ids=["actorder", "asymmetric", "g128"])
def test_int4_ineligible_for_mxint4_falls_back_to_marlin(tmp_path: Path, change: dict[str, Any],
                                                          why: str) -> None:
    row = _rows(_int4_with(tmp_path, **change))["sglang", "B200/GB200"]
    assert row.path == "native" and "Marlin" in row.what
    assert len(row.skipped) == 1 and row.skipped[0].startswith("mxint4 (")
    assert why in row.skipped[0]


def test_mxint4_needs_bf16_scales() -> None:
    ckpt = load(str(INT4), Options(level=Level.STRUCTURE)).ckpt
    assert ckpt is not None
    assert ct_int4.DESCRIPTOR.path_problems(ckpt, "mxint4") == []
    scale = next(n for n in ckpt.tensors if n.endswith(".weight_scale") and ".experts." in n)
    ckpt.tensors[scale] = ckpt.tensors[scale]._replace(dtype="F16")
    assert ct_int4.DESCRIPTOR.path_problems(ckpt, "mxint4") == [
        "expert weight_scale dtype BF16/F16, not BF16"]


def test_nvfp4_modelopt_sglang_marlin_below_sm100_refused_on_rocm() -> None:
    """SGLang 0.5.23 (ModelOptFp4Config.get_min_capability 80): FP4 tensor cores on sm100, the
    auto backends' weight-only FP4 Marlin on sm90, no backend on ROCm (the methods raise)."""
    rows = _rows(NVFP4)
    assert {t: rows["sglang", t].path for t in TARGET_NAMES} == {
        "H100/H200": "emulated", "B200/GB200": "native", "MI300X": "unsupported",
        "MI355X": "unsupported"}
    h200 = rows["sglang", "H100/H200"]
    assert "Marlin" in h200.what and "fp4_utils.py:158" in h200.source
    assert "modelopt_quant.py:1931" in rows["sglang", "MI300X"].source
    assert "faeb968" not in h200.source and "sglang==0.5.23" in h200.source
    for target in ("MI300X", "MI355X"):
        assert rows["sglang", target].tp == []
    assert h200.tp == rows["sglang", "B200/GB200"].tp != []
    assert rows["vllm", "H100/H200"].path == "emulated"
    assert rows["vllm", "B200/GB200"].tp == rows["sglang", "B200/GB200"].tp != []


def test_vllm_rows_are_the_target_check_data() -> None:
    """The vLLM column is what ``validate --target`` reports (Descriptor.kernel)."""
    rows = _rows(PRODUCERS / "kimi-k2-fp8-block-deepseek")
    for target, key in (("H100/H200", "h200"), ("MI300X", "mi300x")):
        said = fp8_block_deepseek.DESCRIPTOR.kernel(key, *_vendor_arch(key))
        assert said is not None
        kind, what = said
        assert rows["vllm", target].path == {"note": "native", "slow": "emulated",
                                             "unsupported": "unsupported"}[kind]
        assert rows["vllm", target].what == what.replace(key, target)


def _vendor_arch(key: str) -> tuple[str, str]:
    from mxformats.validate.targets import TARGETS
    vendor, arch, _ = TARGETS[key]
    return vendor, arch


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["preflight", str(INT4)]) == 0
    assert "mxint4" in capsys.readouterr().out
    assert main(["preflight", str(tmp_path / "absent")]) == 2
    capsys.readouterr()
    assert main(["preflight", "--json", str(NVFP4)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["exit"] == 0 and len(data["rows"]) == 8


def test_kv_a_proj_ceil_grid_note_both_sides() -> None:
    """The fixtures' kv_a_proj_with_mqa has 96 rows: a partial 128-row FP8 block (a note),
    six whole NVFP4 16-row groups (none)."""
    fp8 = load(str(PRODUCERS / "kimi-k2-fp8-block-deepseek"), Options(level=Level.STRUCTURE)).ckpt
    nvfp4 = load(str(NVFP4), Options(level=Level.STRUCTURE)).ckpt
    assert fp8 is not None and fp8.descriptor is not None
    assert nvfp4 is not None and nvfp4.descriptor is not None
    [note] = grid_notes(fp8, fp8.descriptor)
    assert "96 rows" in note and "ceil(96/128) = 1" in note and "deepseek_v2.py @ " in note
    assert grid_notes(nvfp4, nvfp4.descriptor) == []


def test_inspect_names_the_consumer_per_engine(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--json", str(NVFP4)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["engines"]["sglang"].startswith("H100/H200 emulated, B200/GB200 native")


def test_cli_exit_1_on_fused_siblings_with_different_schemes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A mixed-precision checkpoint whose expert gate_proj is named by the NVFP4 group while
    its up_proj stays INT4: the engines cannot fuse them (FUSED_PAIR_MISMATCH, exit 1)."""
    from validate_corpus import EXPERT, make_mixed_ct

    folder = make_mixed_ct(tmp_path / "mixed")
    assert main(["preflight", str(folder)]) == 0
    cfg = json.loads((folder / "config.json").read_text())
    cfg["quantization_config"]["config_groups"]["group_1"]["targets"].insert(0, EXPERT)
    (folder / "config.json").write_text(json.dumps(cfg))
    capsys.readouterr()
    assert main(["preflight", "--json", str(folder)]) == 1
    data = json.loads(capsys.readouterr().out)
    assert "FUSED_PAIR_MISMATCH" in {f["check"] for f in data["findings"]}


# -- SGLang rules (sglang==0.5.23) and the mixed-precision composition ---------------------------

def _sglang(folder: Path) -> dict[str, Row]:
    return {t: r for (e, t), r in _rows(folder).items() if e == "sglang"}


def _cites_a_line(source: str) -> bool:
    """A rule's source names a repository, a file with its line and a release or commit."""
    import re
    return bool(re.search(r"\.py:\d+", source)) and " @ " in source


def test_quark_mxfp4_sglang_needs_aiter() -> None:
    """SGLang's Quark MXFP4 MoE raises without the AITER runner (CUDA), preshuffles for its FP4
    kernels on gfx95 only (MI355X native, MI300X upcast)."""
    rows = _sglang(PRODUCERS / "kimi-k2-mxfp4-quark")
    assert {t: r.path for t, r in rows.items()} == {
        "H100/H200": "unsupported", "B200/GB200": "unsupported", "MI300X": "emulated",
        "MI355X": "native"}
    assert "create_moe_runner" in rows["B200/GB200"].what and rows["B200/GB200"].tp == []
    assert all(_cites_a_line(r.source) for r in rows.values())
    assert "quark_w4a4_mxfp4_moe.py:1062" in rows["H100/H200"].source


def test_quark_w4a8_sglang_has_no_scheme() -> None:
    rows = _sglang(PRODUCERS / "kimi-k2-w4a8-quark")
    assert {r.path for r in rows.values()} == {"unsupported"}
    assert all("quark.py:438" in r.source and r.tp == [] for r in rows.values())


def test_ct_nvfp4_sglang_marlin_below_sm100_and_nothing_on_rocm() -> None:
    rows = _rows(PRODUCERS / "kimi-k2-nvfp4-compressed-tensors")
    assert [rows["sglang", t].path for t in ("B200/GB200", "H100/H200", "MI300X", "MI355X")] == [
        "native", "emulated", "unsupported", "unsupported"]
    assert "Marlin" in rows["sglang", "H100/H200"].what
    assert "input_global_scale" in rows["sglang", "H100/H200"].what
    assert "marlin_utils_fp4.py:21" in rows["sglang", "MI300X"].source
    # vLLM's rows cite its compressed-tensors scheme, not the ModelOpt one
    assert all("compressed_tensors" in rows["vllm", t].source and
               "modelopt" not in rows["vllm", t].source for t in TARGET_NAMES)


def test_fp8_block_ct_runs_everywhere_modelopt_pb_wo_not_in_sglang(tmp_path: Path) -> None:
    from validate_corpus import make_modelopt_fp8_block

    ct = _rows(PRODUCERS / "kimi-k2-fp8-block-compressed-tensors")
    assert {r.path for r in ct.values()} == {"native"}
    modelopt = _sglang(make_modelopt_fp8_block(tmp_path / "pbwo"))
    assert {r.path for r in modelopt.values()} == {"unsupported"}
    assert all("modelopt_quant.py:510" in r.source for r in modelopt.values())


@pytest.fixture(scope="module")
def pb_wo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from validate_corpus import make_modelopt_fp8_block
    return make_modelopt_fp8_block(tmp_path_factory.mktemp("pbwo") / "pbwo")


def _dense_only(folder: Path) -> Checkpoint:
    """``folder`` loaded, its routed experts dropped: what a checkpoint that quantizes only
    the dense layers looks like to the rules."""
    ckpt = load(str(folder), Options(level=Level.STRUCTURE)).ckpt
    assert ckpt is not None
    ckpt.modules = {n: m for n, m in ckpt.modules.items() if ".experts." not in n}
    return ckpt


def test_modelopt_pb_wo_vllm_refuses_quantized_experts_runs_dense_layers(pb_wo: Path) -> None:
    """vLLM 0.33.0 builds a standalone FP8_PB_WO checkpoint's routed experts per-tensor
    (ModelOptFp8MoEMethod): a block weight_scale does not load. Its dense layers run the
    block-FP8 linear method on every target."""
    rows = _rows(pb_wo)
    for target in TARGET_NAMES:
        row = rows["vllm", target]
        assert row.path == "unsupported" and row.tp == []
        assert "routed_experts.py:335" in row.source and "vllm==0.33.0" in row.source
        assert len(row.skipped) == 1 and row.skipped[0].startswith("dense-only (")
        assert "routed expert modules are quantized" in row.skipped[0]
    dense = _dense_only(pb_wo)
    assert dense.descriptor is not None
    rows = {(r.engine, r.target): r for r in preflight_rows(dense, dense.descriptor)}
    for target in TARGET_NAMES:
        assert rows["vllm", target].path == "native" and rows["vllm", target].skipped == []
        assert "modelopt.py:2733" in rows["vllm", target].source
        assert rows["sglang", target].path == "unsupported"  # ModelOptFp8Config refuses it


def test_validate_target_on_modelopt_pb_wo_follows_its_experts(pb_wo: Path) -> None:
    """``validate --target`` (Descriptor.kernel with the checkpoint) meets the path's
    requirement as preflight does: an error with quantized experts, a note without."""
    from mxformats.validate import deployment
    from mxformats.validate.descriptors import fp8_block_modelopt

    desc = fp8_block_modelopt.DESCRIPTOR
    full = load(str(pb_wo), Options(level=Level.STRUCTURE)).ckpt
    for ckpt, check in ((full, "DEPLOY_UNSUPPORTED"), (_dense_only(pb_wo), "DEPLOY_NOTE")):
        found = deployment.deployment_problems(
            desc, "h200", 1, 1, experts=4, moe_intermediate=128, intermediate=256, heads=8,
            ckpt=ckpt)
        assert [c for c, _ in found] == [check]
    assert desc.kernel("h200", "cuda", "sm90") == (  # no checkpoint: the catch-all rule
        "unsupported", desc.engine_paths[1].describe("h200", "sm90"))


@pytest.fixture(scope="module")
def mixed_ct(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from validate_corpus import make_mixed_ct
    return make_mixed_ct(tmp_path_factory.mktemp("ct") / "mixed")


@pytest.fixture(scope="module")
def mixed_modelopt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from validate_corpus import make_modelopt_mixed
    return make_modelopt_mixed(tmp_path_factory.mktemp("mo") / "mixed")


def test_ct_mixed_runs_as_its_worst_member(mixed_ct: Path) -> None:
    """INT4 layers (Marlin on CUDA, Triton on ROCm) with NVFP4 layers (FP4 on sm100, weight-only
    Marlin on sm90, nothing on ROCm): native only where both are."""
    rows = _sglang(mixed_ct)
    assert {t: r.path for t, r in rows.items()} == {
        "H100/H200": "emulated", "B200/GB200": "native", "MI300X": "unsupported",
        "MI355X": "unsupported"}
    b200 = rows["B200/GB200"]
    assert b200.what.startswith("compressed-tensors-int4 layers: ")
    assert "; compressed-tensors-nvfp4 layers: " in b200.what
    assert b200.source.startswith("sgl-project/sglang python/sglang/srt/layers/quantization/"
                                  "compressed_tensors/compressed_tensors.py:377")
    assert rows["MI300X"].tp == [] and b200.tp != []


def test_modelopt_mixed_sglang_dispatch(mixed_modelopt: Path, tmp_path: Path) -> None:
    """All-NVFP4 layers: SGLang's ModelOptMixedPrecisionConfig with the NVFP4 rules. A block-FP8
    layer runs in SGLang's mixed dispatcher (standalone FP8_PB_WO it refuses); with no NVFP4
    layer at all SGLang reads the file as w4afp8: undeclared."""
    rows = _sglang(mixed_modelopt)
    assert rows["B200/GB200"].path == "native"
    assert "modelopt_quant.py:1036" in rows["B200/GB200"].source
    folder = tmp_path / "mixed"
    shutil.copytree(mixed_modelopt, folder)

    def retag(count: int | None) -> dict[str, Row]:
        cfg = json.loads((folder / "config.json").read_text())
        table = cfg["quantization_config"]["quantized_layers"]
        for layer in sorted(table)[:count]:
            table[layer]["quant_algo"] = "FP8_PB_WO"
        (folder / "config.json").write_text(json.dumps(cfg))
        return _sglang(folder)

    one = retag(1)["B200/GB200"]
    assert one.path == "native" and "modelopt-fp8-block layers: FP8 block" in one.what
    assert "modelopt_quant.py:1086" in one.source
    assert {r.path for r in retag(None).values()} == {"undeclared"}


def test_modelopt_mixed_vllm_pb_wo_linears_run_experts_do_not(mixed_modelopt: Path,
                                                               tmp_path: Path) -> None:
    """vLLM 0.33.0's ModelOptMixedPrecisionConfig dispatches FP8_PB_WO: its linears run the
    block-FP8 linear method, its routed experts Fp8MoEMethod, whose weight_scale_inv the
    ModelOpt weight_scale does not load into (a config error too)."""
    from mxformats.validate.descriptors import fp8_block_modelopt, modelopt_mixed

    folder = tmp_path / "mixed"
    shutil.copytree(mixed_modelopt, folder)
    cfg = json.loads((folder / "config.json").read_text())
    table = cfg["quantization_config"]["quantized_layers"]
    expert = sorted(table)[0]
    assert ".experts." in expert
    table[expert]["quant_algo"] = "FP8_PB_WO"
    (folder / "config.json").write_text(json.dumps(cfg))
    ckpt = load(str(folder), Options(level=Level.STRUCTURE)).ckpt
    assert ckpt is not None
    mixed, member = modelopt_mixed.DESCRIPTOR, fp8_block_modelopt.DESCRIPTOR
    rows = {t: r for (e, t), r in _rows(folder).items() if e == "vllm"}
    assert {r.path for r in rows.values()} == {"unsupported"}
    assert all("modelopt.py:1844" in r.source and "fp8.py:637" in r.source
               for r in rows.values())
    [problem] = mixed.config_problems(ckpt)
    assert expert in problem and "weight_scale_inv" in problem
    # the same layer, dense: the linear method runs it
    dense = expert.split(".experts.")[0] + ".shared_experts.down_proj"
    ckpt.quant_config = {**ckpt.quant_config, "quantized_layers": {dense: {
        "quant_algo": "FP8_PB_WO"}}}
    path = mixed.member_path(ckpt, member, "vllm", "cuda", "sm90")
    assert path is not None and path.kind == "native" and "modelopt.py:2733" in path.source
    assert mixed.config_problems(ckpt) == []


def test_validate_target_on_a_mixed_checkpoint_uses_its_members(mixed_ct: Path) -> None:
    """``validate --target`` (vLLM) reads the same composition: MI300X runs the INT4 layers
    through fallback kernels, so the checkpoint is on a slow path there."""
    from mxformats.validate import deployment
    from mxformats.validate.descriptors import ct_mixed

    ckpt = load(str(mixed_ct), Options(level=Level.STRUCTURE)).ckpt
    assert ckpt is not None
    said = ct_mixed.DESCRIPTOR.kernel("mi300x", "rocm", "gfx942", ckpt)
    assert said is not None and said[0] == "slow"
    assert ct_mixed.DESCRIPTOR.kernel("mi300x", "rocm", "gfx942") is None  # no members known
    found = deployment.deployment_problems(
        ct_mixed.DESCRIPTOR, "mi300x", 1, 1, experts=4, moe_intermediate=96, intermediate=256,
        heads=8, ckpt=ckpt)
    assert [c for c, _ in found] == ["DEPLOY_SLOW_PATH"]


def test_mixed_checkpoint_tp_follows_its_members_multiples(
        mixed_ct: Path, mixed_modelopt: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A mixed format has no multiple of its own: each member's loader checks its own layers'
    partitions (``compressed_tensors_moe_wna16.py:244`` for the INT4 g32 experts), so INT4
    beside NVFP4 experts with moe_intermediate 96 admit TP 1 only (96/2 = 48 is not a multiple
    of 32), all-NVFP4 experts TP 1 and 2 (48 = 3 x 16; 24 is not a multiple of 16), and
    ``validate --tp 2`` on the INT4 mix fires DEPLOY_TP_DIVISIBILITY."""
    from mxformats.validate import deployment

    assert {tuple(r.tp) for r in _sglang(mixed_ct).values()} == {(1,), ()}
    assert {tuple(r.tp) for r in _sglang(mixed_modelopt).values()} == {(1, 2), ()}
    ckpt = load(str(mixed_ct), Options(level=Level.STRUCTURE)).ckpt
    assert ckpt is not None and ckpt.descriptor is not None
    found = deployment.deployment_problems(
        ckpt.descriptor, None, 2, 1, experts=4, moe_intermediate=96, intermediate=256,
        heads=4, ckpt=ckpt)
    assert found == [("DEPLOY_TP_DIVISIBILITY", "moe_intermediate_size/TP = 48 is not a "
                      "multiple of 32 (compressed-tensors-mixed groups/packing)")]
    assert main(["inspect", "--json", str(mixed_ct)]) == 0
    assert json.loads(capsys.readouterr().out)["tp_admissible"] == "1"


def test_kv_a_proj_grid_note_in_a_mixed_checkpoint_follows_its_member(
        mixed_modelopt: Path, tmp_path: Path) -> None:
    """In a ModelOpt mixed checkpoint the kv_a_proj_with_mqa the table names FP8_PB_WO is
    stored in 128-row blocks: its 96 rows get the ceil-grid note, as in a plain FP8-block
    file (the mixed format itself has no block)."""
    folder = tmp_path / "mixed"
    shutil.copytree(mixed_modelopt, folder)
    kv = "model.layers.1.self_attn.kv_a_proj_with_mqa"
    cfg = json.loads((folder / "config.json").read_text())
    cfg["quantization_config"]["quantized_layers"][kv] = {"quant_algo": "FP8_PB_WO"}
    (folder / "config.json").write_text(json.dumps(cfg))
    ckpt = load(str(folder), Options(level=Level.STRUCTURE)).ckpt
    assert ckpt is not None and ckpt.descriptor is not None
    assert grid_notes(ckpt, ckpt.descriptor) == []  # not quantized: no grid
    ckpt.modules[kv].quantized = True  # as if its FP8 weight and scale were stored
    [note] = grid_notes(ckpt, ckpt.descriptor)
    assert "96 rows, not a multiple of 128" in note and "ceil(96/128) = 1" in note
