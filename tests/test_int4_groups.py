"""compressed-tensors INT4 at every group size vLLM loads (32, 64, 128, per channel): the
config check, the scale shapes, the admissible TP, ``--source`` reproduction and the code
checks, on the group-128 and per-channel checkpoints llm-compressor wrote
(tests/data/int4-groups, see its README.md)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from mxformats.cli import main
from mxformats.fast import jit
from mxformats.schemes.int4 import pack_int4, unpack_int4
from mxformats.tensorfile import read_checkpoint_tensor, read_index
from mxformats.validate import deployment, reproduce
from mxformats.validate.descriptors import ct_int4, ct_mixed
from mxformats.validate.descriptors.base import Configs
from mxformats.validate.files import load
from mxformats.validate.findings import Level, Severity
from mxformats.validate.model import Checkpoint, Options
from mxformats.validate.report import exit_code
from mxformats.validate.runner import validate
from mxformats.validate.stats import module_stats

DATA = Path(__file__).resolve().parent / "data"
SRC = DATA / "producers" / "src-bf16"
G32 = DATA / "producers" / "kimi-k2-int4-compressed-tensors"
G128 = DATA / "int4-groups" / "kimi-k2-int4-g128-compressed-tensors"
CHANNEL = DATA / "int4-groups" / "kimi-k2-int4-channel-compressed-tensors"
DOWN = "model.layers.0.mlp.down_proj"  # [128, 256]: two groups of 128 per row
EXPERT_DOWN = "model.layers.2.mlp.experts.2.down_proj"  # [128, 96]
#: Kimi-K2's sizes: 384 experts of moe_intermediate 2048, dense 18432, 64 heads
KIMI = dict(experts=384, moe_intermediate=2048, intermediate=18432, heads=64)


def _load(folder: Path) -> Checkpoint:
    result = load(str(folder), Options(level=Level.STRUCTURE))
    assert result.ckpt is not None, result.fatal
    return result.ckpt


def test_fixture_checksums() -> None:
    """Every file of tests/data/int4-groups is the one README.md describes."""
    root = G128.parent
    listed = dict(reversed(line.split("  ", 1)) for line in
                  (root / "SHA256SUMS").read_text().splitlines())
    present = {p.relative_to(root).as_posix() for p in root.rglob("*")
               if p.is_file() and p.name != "SHA256SUMS"}
    assert set(listed) == present
    for name, digest in listed.items():
        assert hashlib.sha256((root / name).read_bytes()).hexdigest() == digest, name


@pytest.mark.parametrize("folder", [G128, CHANNEL], ids=["g128", "channel"])
def test_unquantized_tensors_are_the_sources(folder: Path) -> None:
    """The producer read ``src-bf16``: what it left unquantized is the source's, bytes and
    all (the experts too: transformers fused and split them back unchanged)."""
    index, source = read_index(folder), read_index(SRC)
    kept = sorted(set(index) & set(source))
    assert len(kept) > 40
    for name in kept:
        a, b = read_checkpoint_tensor(folder, name), read_checkpoint_tensor(SRC, name)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name


@pytest.mark.parametrize("folder", [G128, CHANNEL], ids=["g128", "channel"])
@pytest.mark.parametrize("level", list(Level), ids=lambda lv: lv.value)
@pytest.mark.parametrize("source", [False, True], ids=["alone", "source"])
def test_the_producers_checkpoints_pass_at_every_level(folder: Path, level: Level,
                                                       source: bool) -> None:
    """What vLLM loads passes: no error at any level, with and without ``--source`` (the
    per-channel one has a module split across shards: a warning, as the group-32 fixture)."""
    report = validate(folder, Options(level=level, workers=1, source=SRC if source else None))
    errors = [f.to_json() for f in report.findings if f.severity is Severity.ERROR]
    assert errors == [] and exit_code(report) == 0


def test_the_fixtures_hold_the_scale_shapes_of_their_group() -> None:
    """group 128: a scale per 128 columns, two in down_proj's 256 (a dimension with several
    groups); per channel: one per row. The descriptor variant follows the config."""
    assert read_checkpoint_tensor(G128, f"{DOWN}.weight_scale").shape == (128, 2)
    assert read_checkpoint_tensor(G128, "model.layers.0.mlp.gate_proj.weight_scale").shape == (
        256, 1)
    assert read_checkpoint_tensor(CHANNEL, f"{EXPERT_DOWN}.weight_scale").shape == (128, 1)
    for folder, group in ((G32, 32), (G128, 128), (CHANNEL, None)):
        desc = _load(folder).descriptor
        assert isinstance(desc, ct_int4.CompressedTensorsInt4) and desc.group == group


@pytest.fixture(params=["compiled", "numpy"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The compiled passes (where numba is installed) or the numpy paths
    (``MXFORMATS_NUMBA=0``)."""
    monkeypatch.setenv(jit.NUMBA_VARIABLE, "1" if request.param == "compiled" else "0")
    jit._load.cache_clear()
    yield request.param
    jit._load.cache_clear()  # decided again, with the environment restored


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize(("folder", "modules"), [(G128, 3), (CHANNEL, 24)],
                         ids=["g128", "channel"])
def test_every_quantized_tensor_is_reproduced_at_its_group(folder: Path, modules: int) -> None:
    """``--source`` quantizes at the config's group (``quantize_int4(group_size=128 / None)``):
    every tensor byte-identical, the decoded error that of 4-bit weights; by the compiled
    pass (where numba is installed) and by the descriptor's ``produce`` and ``dequantize``
    (``MXFORMATS_NUMBA=0``)."""
    ckpt = load(str(folder), Options()).ckpt
    assert ckpt is not None
    findings = list(reproduce.run(ckpt, Options(source=SRC)))
    assert [f.check.id for f in findings] == ["REPRO_SUMMARY"]
    block = findings[0].extra["reproduction"]
    assert isinstance(block, dict)
    assert block["modules_checked"] == block["modules_reproduced"] == modules
    assert block["tensors"] == block["identical"] == 3 * modules
    assert all(0.03 < m["rel_error"] < 0.2 for m in block["per_module"])


@pytest.mark.parametrize(("folder", "module", "group"),
                         [(G128, DOWN, 128), (CHANNEL, EXPERT_DOWN, 96)],
                         ids=["g128", "channel"])
def test_an_int4_source_decodes_at_its_own_group(folder: Path, module: str, group: int) -> None:
    """An INT4 ``--source`` is decompressed as compressed-tensors does, ``q.to(bf16) *
    scale`` with each scale over its group (the columns per scale of ``weight_scale``)."""
    source = reproduce.Source(folder)
    w = source.weight(module)
    cols = int(read_checkpoint_tensor(folder, f"{module}.weight_shape")[-1])
    q = unpack_int4(read_checkpoint_tensor(folder, f"{module}.weight_packed"),
                    layout="compressed-tensors", size=cols).astype(np.float32)
    s = read_checkpoint_tensor(folder, f"{module}.weight_scale").astype(np.float32)
    assert w is not None and w.dtype == ml_dtypes.bfloat16
    assert np.array_equal(w.view(np.uint16), (q * np.repeat(s, group, 1)).astype(
        ml_dtypes.bfloat16).view(np.uint16))


def test_the_admissible_tp_follows_the_group() -> None:
    """A TP shard holds whole groups (``compressed_tensors_moe_wna16.py`` sizes w2's scales
    ``intermediate_size_per_partition // group_size``; ``verify_marlin_supports_shape``):
    Kimi's 2048 / TP must stay a multiple of the group, so 64 admits TP 32 and not 64, 128
    TP 16 and not 32. Per-channel experts have Marlin only (the fallback asserts strategy
    group), which needs a multiple of 64: TP 32, not 64."""
    def tp(group: int | None) -> list[int]:
        return deployment.admissible_tp(ct_int4.VARIANTS[group], **KIMI)

    assert tp(32) == [1, 2, 4, 8, 16, 32, 64]
    assert tp(64) == [1, 2, 4, 8, 16, 32]
    assert tp(128) == [1, 2, 4, 8, 16]
    assert tp(None) == [1, 2, 4, 8, 16, 32]


def test_the_checkpoints_admissible_tp() -> None:
    """On the fixtures (moe_intermediate 96, dense 256, 4 heads): group 32 experts admit TP 1
    (48 is not a multiple of 32); group 128 quantizes the dense MLP only, so 256 / TP must be
    a multiple of 128 (TP 1, 2) and the unquantized experts constrain nothing; per-channel
    experts need 96 / TP a multiple of 64: no TP at all (vLLM's Marlin MoE refuses 96 and the
    Triton fallback asserts strategy group)."""
    assert deployment.checkpoint_tp(_load(G32), ct_int4.VARIANTS[32]) == [1]
    g128 = _load(G128)
    assert g128.descriptor is not None
    assert deployment.checkpoint_tp(g128, g128.descriptor) == [1, 2]
    channel = _load(CHANNEL)
    assert channel.descriptor is not None
    assert deployment.checkpoint_tp(channel, channel.descriptor) == []


@pytest.mark.parametrize(("tp", "found"), [
    (2, []),
    (4, [("DEPLOY_TP_DIVISIBILITY", "intermediate_size/TP = 64 is not a multiple of 128 "
          "(quantized dense MLP)")]),
])
def test_validate_tp_on_group_128(tp: int, found: list[tuple[str, str]]) -> None:
    ckpt = _load(G128)
    assert ckpt.descriptor is not None and ckpt.arch is not None
    a = ckpt.arch
    assert deployment.deployment_problems(
        ckpt.descriptor, None, tp, 1, experts=a.experts, moe_intermediate=a.moe_intermediate,
        intermediate=a.intermediate, heads=a.heads,
        dense_quantized=deployment.dense_quantized(ckpt), ckpt=ckpt) == found


@pytest.mark.parametrize(("weights", "problem"), [
    ({"strategy": "group", "group_size": 32}, None),
    ({"strategy": "group", "group_size": 64}, None),
    ({"strategy": "group", "group_size": 128}, None),
    ({"strategy": "channel", "group_size": None}, None),
    ({"strategy": "channel", "group_size": -1}, None),
    ({"strategy": "group", "group_size": 16}, "group_size is 16; vLLM's WNA16 kernels load"),
    ({"strategy": "group", "group_size": 256}, "group_size is 256; vLLM's WNA16 kernels load"),
    ({"strategy": "group", "group_size": None}, "group_size is None; vLLM's WNA16 kernels"),
    ({"strategy": "group", "group_size": True}, "group_size is True; vLLM's WNA16 kernels"),
    ({"strategy": "channel", "group_size": 128}, "group_size is 128; strategy 'channel' takes"),
    ({"strategy": "tensor"}, "strategy is 'tensor', the format needs 'group' or 'channel'"),
])
def test_group_size_problem(weights: dict[str, Any], problem: str | None) -> None:
    """The group sizes vLLM loads pass (``MARLIN_SUPPORTED_GROUP_SIZES = [-1, 32, 64,
    128]``); the next ones out on either side (16, 256) and malformed ones do not."""
    got = ct_int4.group_size_problem("w", weights)
    assert got == problem if problem is None else got is not None and problem in got


def _packed(q: np.ndarray, scales: np.ndarray) -> dict[str, Any]:
    return {"weight_packed": pack_int4(q, layout="compressed-tensors"),
            "weight_scale": scales.astype(ml_dtypes.bfloat16),
            "weight_shape": np.array(q.shape, np.int64)}


@pytest.mark.parametrize(("cols", "group"), [(256, 128), (40, None)],
                         ids=["group-128-words", "channel-bytes"])
def test_tightness_is_judged_per_group_of_the_config(cols: int, group: int | None) -> None:
    """The largest code of a group reaches 7 somewhere in the group, not in each 32 of it:
    a row whose only 7 sits in its first 32 columns is tight, a row whose largest code is 6
    is not (the 64-bit word path for group 128, the byte path for 40 columns per channel)."""
    size = group or cols
    q = np.zeros((2, cols), np.int8)
    q[:, 1::3] = 3
    q[:, ::size] = 7  # each group's 7 in its first 32 columns only: tight
    q[1, 0] = 6  # row 1's first group: its largest code is 6
    per_row = cols // size
    stats = module_stats("int4-group", _packed(q, np.full((2, per_row), 0.01)), group=group)
    tight = stats[1]
    assert (tight.n, tight.first) == (1, per_row)


def _int4(**weights: Any) -> dict[str, Any]:
    return {"targets": ["Linear"], "format": "pack-quantized",
            "weights": {"type": "int", "num_bits": 4, "symmetric": True, "dynamic": False,
                        **weights}}


def test_a_config_group_is_checked_at_its_own_group_size() -> None:
    """Each config group gets the variant of its group (a mixed-precision checkpoint's INT4
    group too); two INT4 groups that differ only in group size are one format, not a mix."""
    g128 = _int4(strategy="group", group_size=128)
    member = ct_mixed.member_for(g128["weights"])
    assert isinstance(member, ct_int4.CompressedTensorsInt4) and member.group == 128
    channel = ct_mixed.member_for(_int4(strategy="channel")["weights"])
    assert isinstance(channel, ct_int4.CompressedTensorsInt4) and channel.group is None
    two = {"quant_method": "compressed-tensors", "format": "pack-quantized",
           "config_groups": {"a": _int4(strategy="group", group_size=32), "b": g128}}
    assert ct_mixed.DESCRIPTOR.detect(Configs(two)) is None
    found = ct_int4.DESCRIPTOR.for_configs(Configs(two))
    assert found is ct_int4.VARIANTS[32]
    assert found.group_problems("b", g128) == [
        "b.weights: group 128, another group declares 32 (mxformats checks one group size)"]
    assert found.group_problems("a", two["config_groups"]["a"]) == []


@pytest.mark.parametrize(("folder", "target", "kind"), [
    (G32, "mi300x", "DEPLOY_SLOW_PATH"),
    (G128, "mi300x", "DEPLOY_SLOW_PATH"),
    (CHANNEL, "mi300x", "DEPLOY_UNSUPPORTED"),
    (CHANNEL, "h200", "DEPLOY_NOTE"),
], ids=["g32-rocm", "g128-rocm", "channel-rocm", "channel-cuda"])
def test_per_channel_experts_have_no_rocm_kernel(folder: Path, target: str, kind: str) -> None:
    """vLLM on ROCm runs every WNA16 MoE layer with ``CompressedTensorsWNA16MoEMethod``
    (no Marlin there), whose ``__init__`` asserts strategy ``group``: per-channel experts do
    not load; grouped ones run the fallback (slow). On CUDA per-channel experts run Marlin."""
    ckpt = _load(folder)
    assert ckpt.descriptor is not None and ckpt.arch is not None
    a = ckpt.arch
    found = deployment.deployment_problems(
        ckpt.descriptor, target, 1, 1, experts=a.experts, moe_intermediate=a.moe_intermediate,
        intermediate=a.intermediate, heads=a.heads, ckpt=ckpt)
    assert [c for c, _ in found if c != "DEPLOY_TP_DIVISIBILITY"] == [kind]


def test_inspect_names_the_checkpoints_own_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    """``inspect``'s ``vllm_kernels`` follow the checkpoint (its per-channel experts), as
    ``validate --target`` does, not the format's first path alone."""
    def kernels(folder: Path) -> dict[str, str]:
        assert main(["inspect", "--json", str(folder)]) == 0
        found: dict[str, str] = json.loads(capsys.readouterr().out)["vllm_kernels"]
        return found

    assert kernels(G32)["mi300x"] == "emulated"
    assert kernels(CHANNEL)["mi300x"] == "unsupported"
