"""Numeric, deployment and manifest checks of ``mxformats validate``: each fires on a planted
problem and stays silent on the producer fixtures and on generated checkpoints."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from conftest import requires

from mxformats.fast import jit
from mxformats.schemes.int4 import pack_int4, quantize_int4, unpack_int4
from mxformats.schemes.mx import quantize_mx
from mxformats.schemes.w4a8 import quantize_w4a8
from mxformats.tensorfile import DTYPES
from mxformats.testing.checkpoints import make_kimi_checkpoint
from mxformats.validate import deployment, manifest, numbers, stats
from mxformats.validate.descriptors import (
    bf16,
    ct_int4,
    fp8_block_deepseek,
    nvfp4_ct,
    nvfp4_modelopt,
)
from mxformats.validate.files import load
from mxformats.validate.findings import MAX_LISTED, Finding, Level, Severity
from mxformats.validate.model import Checkpoint, CheckpointFormat, Options

CT_INT4 = CheckpointFormat.CT_INT4
#: The packed layout of each 4-bit format.
PACKING: dict[CheckpointFormat, stats.Packing] = {
    CheckpointFormat.QUARK_MXFP4: "mx-fp4", CheckpointFormat.QUARK_W4A8: "int4-row",
    CT_INT4: "int4-group"}

PRODUCERS = Path(__file__).resolve().parent / "data" / "producers"
MXFP4, W4A8, CT = "kimi-k2-mxfp4-quark", "kimi-k2-w4a8-quark", "kimi-k2-int4-compressed-tensors"
FULL = Options(level=Level.FULL)
EXPERT = "model.layers.1.mlp.experts.{}.{}"


@pytest.fixture(params=["compiled", "numpy"])
def scan_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
              ) -> Iterator[str]:
    """The full scan's per-tensor statistics by the compiled pass (numba) and by numpy
    (``MXFORMATS_NUMBA=0``): a test of them runs on both."""
    if request.param == "compiled":
        requires("numba")
    monkeypatch.setenv(jit.NUMBA_VARIABLE, "1" if request.param == "compiled" else "0")
    jit._load.cache_clear()
    assert (jit.compiled() is not None) == (request.param == "compiled"), jit.status()
    yield request.param
    monkeypatch.undo()
    jit._load.cache_clear()


def _load(folder: Path) -> Checkpoint:
    result = load(folder, Options())
    assert result.ckpt is not None and result.fatal is None, result.fatal
    return result.ckpt


def _ids(findings: list[Finding]) -> Counter[str]:
    return Counter(f.check.id for f in findings)


def _numbers(folder: Path, opts: Options = FULL) -> list[Finding]:
    return list(numbers.run(_load(folder), opts))


def _problems(findings: list[Finding]) -> set[tuple[str, str | None]]:
    return {(f.check.id, f.tensor) for f in findings
            if f.check.id not in ("CODE_HISTOGRAM", "FINGERPRINT")}


def _prints(findings: list[Finding]) -> list[str]:
    """The FINGERPRINT sentences (its JSON extras)."""
    return [p for f in findings if f.check.id == "FINGERPRINT" for p in f.extra["fingerprints"]]


def _plant(tmp_path: Path, fixture: str, edits: dict[str, Callable[[np.ndarray], Any]]) -> Path:
    """A copy of a producer fixture with tensors rewritten in place (same dtype and shape)."""
    folder = tmp_path / fixture
    shutil.copytree(PRODUCERS / fixture, folder)
    return _plant_into(folder, edits)


def _plant_into(folder: Path, edits: dict[str, Callable[[np.ndarray], Any]]) -> Path:
    """``edits`` written over ``folder``'s tensors in place (same dtype and shape)."""
    ckpt = _load(folder)
    for name, edit in edits.items():
        ref = ckpt.tensors[name]
        array = ckpt.read(name).copy()
        out = edit(array)
        array = array if out is None else np.asarray(out, dtype=array.dtype).reshape(array.shape)
        with open(folder / ref.file, "r+b") as f:
            f.seek(ref.begin)
            f.write(np.ascontiguousarray(array).tobytes())
    return folder


# -- the invariants, measured ----------------------------------------------------------------


def _awkward(seed: int, rows: int = 48, cols: int = 256) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)) * np.exp(rng.uniform(-30, 30, (rows, 1)))
    x *= rng.random((rows, cols)) > 0.1
    x[:, :32] *= 1e-30  # blocks at the exponent clamp
    x[0] = 0
    return x.astype(np.float32)


@pytest.mark.parametrize(("profile", "bound"), [
    ("quark", 4.0), ("ocp", 4.0), ("vllm", 4.0), ("compressed-tensors", 4.0),
    ("torchao-floor", 4.0), ("torchao-even", 4.0), ("quark-triton", 4.0),
    ("triton-round-down", 4.0), ("triton-round-up", 3.0), ("torchao-rceil", 3.0),
    ("torchao-ceil", 2.0),
])
def test_mx_tightness_holds_for_every_producer_profile(profile: str, bound: float) -> None:
    def quantize(x: np.ndarray) -> Any:
        try:
            return quantize_mx(x, profile=profile)
        except ValueError:  # the producer takes bfloat16 only
            return quantize_mx(x.astype(ml_dtypes.bfloat16), profile=profile)

    for seed in range(4):
        a = quantize(_awkward(seed))
        assert stats.mx_tightness(a.codes, a.scales, bound).n == 0, (profile, seed)
    # and the bound is sharp: the next code up fails somewhere
    a = quantize(_awkward(0))
    assert stats.mx_tightness(a.codes, a.scales, bound + 1.0).n > 0


def test_int4_and_w4a8_tightness_hold_for_the_producers() -> None:
    for seed in range(4):
        x = _awkward(seed).astype(ml_dtypes.bfloat16)
        r = quantize_int4(x, group_size=32, profile="compressed-tensors")
        assert stats.int4_group_tightness(r.q, r.scales).n == 0
        rq = quantize_int4(x.astype(np.float32), group_size=32, profile="quark")
        assert stats.int4_group_tightness(rq.q, rq.scales).n == 0
        w = quantize_w4a8(x)
        q = unpack_int4(w.weight, layout="quark")
        assert stats.w4a8_row_tightness(q, w.weight_scale_2).n == 0


@pytest.mark.usefixtures("scan_path")
def test_tightness_holds_on_the_producer_fixtures() -> None:
    for fixture in (MXFP4, W4A8, CT):
        assert not _problems(_numbers(PRODUCERS / fixture)), fixture


def test_tightness_catches_wrong_group_size_and_axis() -> None:
    x = np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32) * 0.02
    wide = quantize_mx(x, block_size=64, profile="ocp")
    scales32 = np.repeat(wide.scales, 2, axis=-1)
    assert stats.mx_tightness(wide.codes, scales32).n > 0
    g64 = quantize_int4(x, group_size=64)
    assert stats.int4_group_tightness(g64.q).n > 0
    per_col = quantize_int4(x.T.copy(), group_size=32).q.T  # groups along the output axis
    assert stats.int4_group_tightness(per_col).n > 0
    rows = quantize_int4(x, group_size=None, profile="quark").q  # per-row scale, read as g32
    assert stats.int4_group_tightness(rows).n > 0


def test_pure_scale_statistics() -> None:
    st = stats.e8m0_stats(np.array([[1, 120, 0xFF], [0, 200, 40]], np.uint8))
    assert (st["nan"].n, st["nan"].first, st["zero"].n, st["zero"].first) == (1, 2, 1, 3)
    assert (st["range"].n, st["range"].first) == (2, 4)
    sv = stats.scale_value_stats(np.array([1.0, np.nan, -2.0, 0.0, np.inf], np.float32))
    assert (sv["nonfinite"].n, sv["negative"].first, sv["zero"].first) == (2, 2, 3)
    assert stats.nonfinite_count(np.array([1, np.nan], ml_dtypes.bfloat16)).n == 1
    assert stats.expert_rms_outliers({0: 1.0, 1: 1.1, 2: 0.95, 3: 20.0}) == [(3, pytest.approx(20.0 / np.sqrt(1.1)))]
    assert stats.expert_rms_outliers({0: 1.0, 1: 1.5, 2: 0.7, 3: 1.2}) == []
    h = stats.code_histogram(np.array([0x21, 0xFF], np.uint8), "fp4")
    assert h[1] == h[2] == 1 and h[15] == 2


# -- silent on real and generated checkpoints ----------------------------------------------


@pytest.mark.parametrize(("fmt", "multimodal"), [
    ("quark-mxfp4", False), ("quark-w4a8", False), ("compressed-tensors-int4", False),
    ("quark-mxfp4", True), ("compressed-tensors-int4", True),
])
def test_silent_on_generated_checkpoints(tmp_path: Path, fmt: str, multimodal: bool) -> None:
    folder = make_kimi_checkpoint(tmp_path / "q", fmt, multimodal=multimodal, seed=3)
    findings = _numbers(folder)
    assert not _problems(findings)
    # the quark profile writes every E2M1 zero as +0, as Quark does: its provenance shows
    quark = fmt == "quark-mxfp4"
    assert _ids(findings) == Counter({"CODE_HISTOGRAM": 1, "FINGERPRINT": int(quark)})
    assert [p.startswith("no E2M1 -0 (code 8)") for p in _prints(findings)] == [True] * quark


def test_nothing_runs_at_structure_level_or_on_bf16() -> None:
    assert _numbers(PRODUCERS / MXFP4, Options(level=Level.STRUCTURE)) == []
    assert _numbers(PRODUCERS / "src-bf16") == []


# -- each check fires on a planted problem ---------------------------------------------------


def _set(index: tuple[Any, ...], value: float) -> Callable[[np.ndarray], None]:
    def edit(a: np.ndarray) -> None:
        a[index] = value
    return edit


def test_e8m0_bytes(tmp_path: Path) -> None:
    s = EXPERT.format(0, "gate_proj") + ".weight_scale"
    folder = _plant(tmp_path, MXFP4, {s: lambda a: np.where(
        np.arange(a.size).reshape(a.shape) == 5, 0xFF,
        np.where(np.arange(a.size).reshape(a.shape) == 7, 0,
                 np.where(np.arange(a.size).reshape(a.shape) == 9, 200, a)))})
    findings = _numbers(folder, Options(level=Level.SCALES))
    assert _problems(findings) == {("E8M0_NAN", s), ("E8M0_ZERO", s), ("E8M0_RANGE", s)}
    ref = _load(folder).tensors[s]
    nan = next(f for f in findings if f.check.id == "E8M0_NAN")
    assert nan.offset == ref.begin + 5 and nan.file == ref.file


def test_int4_and_fp8_scales(tmp_path: Path) -> None:
    s1 = EXPERT.format(0, "up_proj") + ".weight_scale"
    s2 = EXPERT.format(1, "up_proj") + ".weight_scale_2"
    s3 = EXPERT.format(2, "up_proj") + ".weight_scale_2"
    folder = _plant(tmp_path, W4A8, {
        s1: lambda a: np.float32(np.nan), s2: _set((3,), -1.0),
        s3: lambda a: a * np.float32(0.5)})
    assert _problems(_numbers(folder, Options(level=Level.SCALES))) == {
        ("SCALE_NONFINITE", s1), ("SCALE_NEGATIVE", s2), ("W4A8_SCALE2_MAX", s3)}
    cs = EXPERT.format(3, "down_proj") + ".weight_scale"
    folder = _plant(tmp_path / "ct", CT, {cs: _set((2, 1), 0.0)})
    assert _problems(_numbers(folder, Options(level=Level.SCALES))) == {("SCALE_ZERO", cs)}


def test_router_bias_and_bf16_nonfinite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                        ) -> None:
    monkeypatch.setattr(numbers, "SMALL_BYTES", 100_000)  # the tiny embedding counts as big
    bias = "model.layers.2.mlp.gate.e_score_correction_bias"
    norm = "model.layers.1.input_layernorm.weight"
    big = "model.embed_tokens.weight"
    folder = _plant(tmp_path, CT, {bias: _set((1,), np.inf), norm: _set((4,), np.nan),
                                   big: _set((600, 3), np.nan)})
    # level scales reads the small tensors only
    assert _problems(_numbers(folder, Options(level=Level.SCALES))) == {
        ("ROUTER_BIAS_NONFINITE", bias), ("TENSOR_NONFINITE", norm)}
    full = _numbers(folder)
    assert _problems(full) == {("ROUTER_BIAS_NONFINITE", bias), ("TENSOR_NONFINITE", norm),
                               ("TENSOR_NONFINITE", big)}
    ref = _load(folder).tensors[big]
    hit = next(f for f in full if f.tensor == big)
    assert hit.offset == ref.begin + (600 * ref.shape[1] + 3) * 2


@pytest.mark.usefixtures("scan_path")
def test_scale_not_tight_on_planted_codes(tmp_path: Path) -> None:
    w = EXPERT.format(2, "down_proj") + ".weight"
    def at_most_three(a: np.ndarray) -> np.ndarray:  # codes 4.0 and 6.0 become 3.0
        nib = np.stack([a & 0xF, a >> 4])
        nib = np.where((nib & 7) >= 6, (nib & 8) | 5, nib)
        return nib[0] | (nib[1] << 4)

    folder = _plant(tmp_path, MXFP4, {w: at_most_three})
    assert ("SCALE_NOT_TIGHT", w) in _problems(_numbers(folder))
    wp = EXPERT.format(2, "down_proj") + ".weight_packed"
    folder = _plant(tmp_path / "ct", CT, {wp: lambda a: pack_int4(
        unpack_int4(a, layout="compressed-tensors") // 2, layout="compressed-tensors")})
    assert ("SCALE_NOT_TIGHT", wp) in _problems(_numbers(folder))


def test_zero_rows_single_code_and_all_zero_expert(tmp_path: Path) -> None:
    row = EXPERT.format(0, "gate_proj") + ".weight"
    projs = [EXPERT.format(3, p) + ".weight" for p in ("gate_proj", "up_proj", "down_proj")]
    edits: dict[str, Callable[[np.ndarray], Any]] = {row: _set((5,), 0)}
    edits.update({p: (lambda a: np.zeros_like(a)) for p in projs})
    found = _problems(_numbers(_plant(tmp_path, W4A8, edits)))
    assert ("ROW_ALL_ZERO", row) in found
    assert {("TENSOR_SINGLE_CODE", p) for p in projs} <= found
    assert ("EXPERT_ALL_ZERO", projs[2]) in found  # named by its first projection, down_proj


def test_duplicate_experts_and_rms_outlier(tmp_path: Path) -> None:
    ckpt = _load(PRODUCERS / MXFP4)
    def take(name: str) -> Callable[[np.ndarray], Any]:
        return lambda a: ckpt.read(name)

    copy = {f"{EXPERT.format(0, p)}.{t}": take(f"{EXPERT.format(1, p)}.{t}")
            for p in ("gate_proj", "up_proj", "down_proj") for t in ("weight", "weight_scale")}
    loud = EXPERT.format(2, "up_proj") + ".weight_scale"
    copy[loud] = lambda a: a + 4
    found = _problems(_numbers(_plant(tmp_path, MXFP4, copy)))
    assert ("EXPERT_DUPLICATE", EXPERT.format(1, "down_proj") + ".weight") in found
    assert ("EXPERT_RMS_OUTLIER", EXPERT.format(2, "up_proj") + ".weight") in found


# -- deployment --------------------------------------------------------------------------------


def _deploy(fixture: str, **kw: Any) -> set[str]:
    return {f.check.id for f in deployment.run(_load(PRODUCERS / fixture), Options(**kw))}


def test_deployment_targets() -> None:
    assert _deploy(MXFP4) == set()
    assert _deploy(W4A8, target="h200") == {"DEPLOY_UNSUPPORTED"}
    assert _deploy(W4A8, target="mi300x") == {"DEPLOY_NOTE"}
    assert _deploy(MXFP4, target="mi300x") == {"DEPLOY_SLOW_PATH"}
    assert _deploy(MXFP4, target="mi355x") == {"DEPLOY_NOTE"}
    assert _deploy(CT, target="h200", tp=1) == {"DEPLOY_NOTE"}  # Marlin
    # moe_intermediate 96: TP 2 leaves 48, not a multiple of 32; 4 heads do not split by 3
    assert _deploy(CT, tp=2) == {"DEPLOY_TP_DIVISIBILITY"}
    assert _deploy(CT, tp=3) == {"DEPLOY_TP_DIVISIBILITY"}
    assert _deploy(CT, tp=2, ep=4) == set()
    assert _deploy(MXFP4, tp=2, target="mi355x") == {"DEPLOY_TP_DIVISIBILITY", "DEPLOY_NOTE"}
    assert _deploy(MXFP4, tp=2, ep=2, target="mi355x") == {"DEPLOY_NOTE"}
    assert _deploy(CT, ep=3) == {"DEPLOY_EP_DIVISIBILITY"}
    assert _deploy(W4A8, target="tpu") == {"DEPLOY_UNSUPPORTED"}


def test_deployment_pure_core_uses_config_dims() -> None:
    ok = deployment.deployment_problems(ct_int4.DESCRIPTOR, "h200", 8, 1, experts=288,
                                        moe_intermediate=2048, intermediate=18432, heads=64)
    assert [c for c, _ in ok] == ["DEPLOY_NOTE"]
    bad = deployment.deployment_problems(ct_int4.DESCRIPTOR, None, 128, 1, experts=288,
                                         moe_intermediate=2048, intermediate=18432, heads=64)
    assert [c for c, _ in bad] == ["DEPLOY_TP_DIVISIBILITY"] * 2
    assert deployment.deployment_problems(ct_int4.DESCRIPTOR, None, 1, 32, experts=288,
                                          moe_intermediate=2048, intermediate=18432,
                                          heads=64) == []
    assert deployment.deployment_problems(ct_int4.DESCRIPTOR, None, 1, 7, experts=288,
                                          moe_intermediate=2048, intermediate=18432,
                                          heads=64)[0][0] == "DEPLOY_EP_DIVISIBILITY"


@pytest.mark.parametrize(("desc", "widest"), [(fp8_block_deepseek.DESCRIPTOR, 16),
                                              (nvfp4_modelopt.DESCRIPTOR, 128)],
                         ids=["fp8-block", "nvfp4"])
def test_block_formats_admit_tp_up_to_their_block(desc: Any, widest: int) -> None:
    """Kimi's 2048-wide experts: FP8 128-blocks admit TP <= 16 (2048/16 = 128), NVFP4's
    16-element blocks TP <= 128; one step further, each partition cuts a block."""
    def problems(tp: int) -> list[str]:
        return [c for c, _ in deployment.deployment_problems(
            desc, None, tp, 1, experts=384, moe_intermediate=2048, intermediate=18432,
            heads=1024)]
    assert problems(widest) == []
    assert problems(2 * widest) == ["DEPLOY_TP_DIVISIBILITY"]


def test_preflight_admissible_tp_and_kernels() -> None:
    """Kimi-K2's sizes (384 experts of 2048, dense 18432, 64 heads): FP8 block admits TP up to
    16, NVFP4 and INT4 g32 up to 64 (heads stop there); the kernel table per target."""
    kimi = dict(experts=384, moe_intermediate=2048, intermediate=18432, heads=64)
    assert deployment.admissible_tp(fp8_block_deepseek.DESCRIPTOR, **kimi) == [1, 2, 4, 8, 16]
    assert deployment.admissible_tp(nvfp4_ct.DESCRIPTOR, **kimi) == list(deployment.TP_SIZES)
    assert deployment.admissible_tp(ct_int4.DESCRIPTOR, **kimi) == list(deployment.TP_SIZES)
    assert deployment.kernel_table(nvfp4_modelopt.DESCRIPTOR) == {
        "mi300x": "emulated", "mi355x": "emulated", "h200": "emulated", "b200": "native"}
    assert deployment.kernel_table(fp8_block_deepseek.DESCRIPTOR)["h200"] == "native"
    assert deployment.kernel_table(bf16.DESCRIPTOR)["h200"] == "-"


def test_nvfp4_kernels_only_on_sm100() -> None:
    def kinds(target: str) -> list[str]:
        return [c for c, _ in deployment.deployment_problems(
            nvfp4_ct.DESCRIPTOR, target, 1, 1, experts=4, moe_intermediate=2048,
            intermediate=4096, heads=8)]
    assert kinds("b200") == ["DEPLOY_NOTE"]
    assert kinds("h200") == kinds("mi300x") == ["DEPLOY_SLOW_PATH"]


def test_fnuz_scales_must_survive_doubling(tmp_path: Path) -> None:
    s1 = EXPERT.format(1, "gate_proj") + ".weight_scale"
    folder = _plant(tmp_path, W4A8, {s1: lambda a: np.float32(3e38)})
    ckpt = _load(folder)
    found = {(f.check.id, f.tensor) for f in deployment.run(ckpt, Options(target="mi300x"))}
    assert ("DEPLOY_FNUZ_SCALE", s1) in found
    assert "DEPLOY_FNUZ_SCALE" not in {f.check.id for f in deployment.run(
        ckpt, Options(target="mi355x"))}


def test_fnuz_overflow_in_every_module_is_listed_then_counted(tmp_path: Path) -> None:
    """A scale convention that overflows e4m3fnuz's doubling does so in every module: the
    first MAX_LISTED DEPLOY_FNUZ_SCALE findings (name order) and one that counts the rest."""

    scales = sorted(n for n in _load(PRODUCERS / W4A8).tensors if n.endswith(".weight_scale"))
    assert len(scales) > MAX_LISTED
    folder = _plant(tmp_path, W4A8, {n: lambda a: np.float32(3e38) for n in scales})
    found = [f for f in deployment.run(_load(folder), Options(target="mi300x"))
             if f.check.id == "DEPLOY_FNUZ_SCALE"]
    assert [f.tensor for f in found] == [*scales[:MAX_LISTED], None]
    assert found[-1].message == f"{len(scales) - MAX_LISTED} more like the above, not listed"


# -- manifest -------------------------------------------------------------------------------


def test_manifest_written_then_verified(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    shutil.copytree(PRODUCERS / CT, folder)
    path = tmp_path / "manifest.json"
    opts = Options(manifest=path)
    assert _ids(list(manifest.run(_load(folder), opts))) == Counter({"MANIFEST_WRITTEN": 1})
    assert list(manifest.run(_load(folder), opts)) == []
    shard = "model-00002-of-00002.safetensors"
    with open(folder / shard, "r+b") as f:  # one flipped bit deep in the data
        f.seek(-100, 2)
        byte = f.read(1)
        f.seek(-100, 2)
        f.write(bytes([byte[0] ^ 0x10]))
    bad = list(manifest.run(_load(folder), opts))
    assert [(f.check.id, f.file) for f in bad] == [("MANIFEST_MISMATCH", shard)]
    path.write_text("{}")
    assert _ids(list(manifest.run(_load(folder), opts))) == Counter({"MANIFEST_UNREADABLE": 1})


def test_manifest_lists_new_and_missing_shards(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    shutil.copytree(PRODUCERS / MXFP4, folder)
    path = tmp_path / "m.json"
    files = manifest.compute(_load(folder))
    files["model-00003-of-00002.safetensors"] = {"size": 1, "sha256": "0" * 64}
    del files["config.json"]
    manifest.write_manifest(path, files)
    found = {(f.check.id, f.file) for f in manifest.run(_load(folder), Options(manifest=path))}
    assert found == {("MANIFEST_MISSING_FILE", "model-00003-of-00002.safetensors"),
                     ("MANIFEST_NEW_FILE", "config.json")}


def test_a_manifest_of_other_files_is_listed_then_counted(tmp_path: Path) -> None:
    """A manifest naming files this folder lacks (another release's) gives the first
    MAX_LISTED missing files and one ERROR summary whose extras hold each of the rest."""
    folder = tmp_path / "ckpt"
    shutil.copytree(PRODUCERS / MXFP4, folder)
    path = tmp_path / "m.json"
    files = manifest.compute(_load(folder))
    extra = [f"model-{i:05d}-of-00099.safetensors" for i in range(MAX_LISTED + 4)]
    files.update({name: {"size": 1, "sha256": "0" * 64} for name in extra})
    manifest.write_manifest(path, files)
    found = list(manifest.run(_load(folder), Options(manifest=path)))
    assert [f.file for f in found[:-1]] == extra[:MAX_LISTED]
    rest = found[-1]
    assert (rest.check.id, rest.effective_severity, rest.message) == (
        "MANIFEST_MISSING_FILE", Severity.ERROR, "4 more like the above, not listed")
    assert [u["file"] for u in rest.extra["unlisted"]] == extra[MAX_LISTED:]


@pytest.mark.parametrize("fixture", [MXFP4, W4A8, CT])
def test_word_path_agrees_with_the_byte_table_path(fixture: str) -> None:
    """The SWAR path (whole 64-bit words) and the byte-table fallback (odd row lengths) give
    the same verdicts on every module, planted problems included."""
    ckpt = _load(PRODUCERS / fixture)
    rng = np.random.default_rng(0)
    for module in numbers.quantized_modules(ckpt):
        arrays = numbers.read_module(ckpt, module, tuple(module.tensors))
        assert arrays is not None
        wp = "weight_packed" if ckpt.format is CT_INT4 else "weight"
        for variant in range(3):
            a = dict(arrays)
            if variant == 1:  # shrink a random subset of rows' codes towards zero
                w = a[wp].copy().view(np.uint8)
                rows = rng.random(w.shape[0]) < 0.3
                if ckpt.format is CT_INT4:  # offset binary: keep q in [-4, 3]
                    w[rows] = (w[rows] & 0x33) | 0x44
                else:
                    w[rows] &= 0x33
                a[wp] = w.view(a[wp].dtype)
            if variant == 2:
                a[wp] = np.zeros_like(a[wp])
            packing = PACKING[ckpt.format]
            fast = stats.module_stats(packing, a)
            slow = stats._module_stats_slow(packing, a, 4.0)
            _, f_bad, f_sq, f_n, f_zero, f_single, _ = fast
            _, s_bad, s_sq, s_n, s_zero, s_single, _ = slow
            assert (f_bad, f_zero, f_single, f_n) == (s_bad, s_zero, s_single, s_n), module.name
            assert f_sq == pytest.approx(s_sq, rel=1e-12)
            assert np.array_equal(fast[0].hist, slow[0].hist)
            if variant == 1:
                assert f_bad.n > 0


# -- both-sided boundaries: every tightness bound, both code paths, an independent decoder ------


def _e2m1_magnitude(codes: np.ndarray) -> np.ndarray:
    """|value| of E2M1 codes 0..15, decoded by ml_dtypes (not the validator's table)."""
    return np.abs(np.asarray(codes, np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64))


def _mx_blocks() -> tuple[np.ndarray, np.ndarray]:
    """Every (largest code, sign, position) in a block of 32: one block each, the other codes
    0.5 (code 1) or zero. Returns packed ``[rows, 64]`` bytes (4 blocks a row) and the code
    array ``[rows, 128]``."""
    blocks = []
    for top in range(8):
        for sign in (0, 8):
            for pos in range(32):
                block = np.where(np.arange(32) % 3 == 0, 0, min(top, 1)).astype(np.uint8)
                block[pos] = top | sign
                blocks.append(block)
    codes = np.concatenate(blocks).reshape(-1, 128)
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8), codes


def _both_paths(fmt: stats.Packing, arrays: dict[str, Any], bound: float = 4.0
                ) -> tuple[stats.Count, stats.Count]:
    return (stats.module_stats(fmt, arrays, bound)[1],
            stats._module_stats_slow(fmt, arrays, bound)[1])


@pytest.mark.usefixtures("scan_path")
@pytest.mark.parametrize("bound", sorted(set(stats.MX_TIGHT.values())))
def test_mx_tightness_one_code_below_each_bound_on_both_paths(bound: float) -> None:
    """A block whose largest |code| is one E2M1 step below the bound is flagged, at the bound it
    is not; the SWAR words and the byte table agree on every block."""
    packed, codes = _mx_blocks()
    scales = np.full((packed.shape[0], 4), 127, np.uint8)
    block_max = _e2m1_magnitude(codes).reshape(-1, 32).max(axis=1)
    expected = (block_max > 0) & (block_max < bound)
    below = float(np.max(block_max[block_max < bound]))  # one code below the bound
    assert below < bound and bound in block_max and np.any(block_max == below)
    fast, slow = _both_paths("mx-fp4", {"weight": packed, "weight_scale": scales}, bound)
    want = stats.Count.of(expected)
    assert fast == slow == want, (bound, fast, slow, want)
    # the exponent clamp: bytes 1 and 254 exempt, 2 and 253 checked (both sides)
    for byte, exempt in ((1, True), (2, False), (253, False), (254, True)):
        clamp = np.full_like(scales, byte)
        fast, slow = _both_paths("mx-fp4", {"weight": packed, "weight_scale": clamp},
                                 bound)
        assert fast == slow == (stats.Count(0) if exempt else want), (bound, byte)


def _int4_rows() -> np.ndarray:
    """Every (largest |q|, sign, position) in a group of 32, one group each, four a row."""
    groups = []
    for top in range(9):
        for sign in (1, -1):
            if top == 8 and sign == 1:
                continue  # +8 is not an INT4 value
            for pos in range(32):
                g = np.where(np.arange(32) % 3 == 0, 0, min(top, 1)).astype(np.int8)
                g[pos] = sign * top
                groups.append(g)
    groups += [np.zeros(32, np.int8)] * (-len(groups) % 4)
    return np.concatenate(groups).reshape(-1, 128)


@pytest.mark.usefixtures("scan_path")
def test_int4_tightness_at_six_seven_and_minus_eight_on_both_paths() -> None:
    q = _int4_rows()
    top = np.abs(q.astype(np.int16)).reshape(-1, 32).max(axis=1)
    want = stats.Count.of((top > 0) & (top < 7))
    scales = np.full((q.shape[0], 4), 0.01, np.float32)
    arrays = {"weight_packed": pack_int4(q, layout="compressed-tensors"),
              "weight_scale": scales, "weight_shape": np.array(q.shape, np.int64)}
    fast, slow = _both_paths("int4-group", arrays)
    assert fast == slow == want and want.n > 0
    # groups whose scale sits at Quark's float32-eps floor are exempt; just above, checked
    eps = np.float32(np.finfo(np.float32).eps)
    for s, exempt in ((eps, True), (np.nextafter(eps, np.float32(1)), False)):
        arrays["weight_scale"] = np.full_like(scales, s)
        fast, slow = _both_paths("int4-group", arrays)
        assert fast == slow == (stats.Count(0) if exempt else want), s


@pytest.mark.usefixtures("scan_path")
def test_w4a8_row_tightness_at_six_seven_and_minus_eight_on_both_paths() -> None:
    q = _int4_rows().reshape(-1, 32)  # one group per row: a W4A8 row
    q = np.concatenate([q, q], axis=1)  # rows of 64 codes: whole 64-bit words
    top = np.abs(q.astype(np.int16)).max(axis=1)
    want = stats.Count.of((top > 0) & (top < 7))
    arrays = {"weight": pack_int4(q, layout="quark"), "weight_scale": np.float32(1e-3),
              "weight_scale_2": np.full(q.shape[0], 10.0, np.float32)}
    fast, slow = _both_paths("int4-row", arrays)
    assert fast == slow == want and want.n > 0
    assert stats.w4a8_row_tightness(q, arrays["weight_scale_2"]) == want
    floor = np.float32(np.finfo(np.float32).eps)
    for s, exempt in ((floor, True), (np.float32(floor * (1 + 1e-5)), False)):
        arrays["weight_scale_2"] = np.full(q.shape[0], s, np.float32)
        fast, slow = _both_paths("int4-row", arrays)
        assert fast == slow == (stats.Count(0) if exempt else want), s


@pytest.mark.parametrize(("factor", "verdict"), [
    (1 + 2e-3, "error"), (1 + 0.5e-3, None), (1.0, None), (1 - 0.5e-3, None),
    (1 - 2e-3, "warning"),
    (7 / 7.5, "warning"),  # x7/7.5: below, no row reaches FP8 448 (a warning)
    (7.5 / 7, "error"),  # INT4 stage amax/7, not /7.5: above, no row maps to 448
])
def test_w4a8_scale_2_max_on_both_sides_of_each_boundary(factor: float,
                                                         verdict: str | None) -> None:
    top = float(np.float32(stats.W4A8_SCALE2_MAX * factor))
    got = stats.w4a8_scale2_severity(top)
    assert (None if got is None else got.value) == verdict


def test_w4a8_scale_2_max_is_wired_to_the_checkpoint(tmp_path: Path) -> None:
    s2 = EXPERT.format(0, "down_proj") + ".weight_scale_2"
    for factor, severity in ((1 + 2e-3, "error"), (1 - 2e-3, "warning"), (1 + 0.5e-3, None)):
        folder = _plant(tmp_path / str(factor), W4A8, {
            s2: lambda a, f=factor: a * np.float32(stats.W4A8_SCALE2_MAX * f / a.max())})
        found = [f for f in _numbers(folder, Options(level=Level.SCALES))
                 if f.check.id == "W4A8_SCALE2_MAX"]
        assert [f.effective_severity.value for f in found] == (
            [] if severity is None else [severity]), factor


def test_code_histogram_counts_are_in_the_json_extras(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The catalogue promises the counts in the JSON finding's extras: 16 per kind, summing to
    every code of the (small, so unsampled) fixture weights, equal to an independent count."""
    import json

    from mxformats.cli import main

    assert main(["validate", str(PRODUCERS / MXFP4), "--level", "full", "--json", "-",
                 "--quiet"]) == 0
    data = json.loads(capsys.readouterr().out)
    (hist,) = [f for f in data["findings"] if f["check"] == "CODE_HISTOGRAM"]
    ckpt = _load(PRODUCERS / MXFP4)
    weights = [ckpt.read(m.tensors["weight"].name) for m in numbers.quantized_modules(ckpt)]
    nibbles = np.concatenate([np.concatenate([w.reshape(-1) & 0xF, w.reshape(-1) >> 4])
                              for w in weights])
    assert hist["extras"] == {"fp4": np.bincount(nibbles, minlength=16).tolist()}
    assert sum(hist["extras"]["fp4"]) == 2 * sum(w.size for w in weights)


# -- fingerprints: the producer the numbers point to -----------------------------------------

#: layer 0's dense down_proj is [128, 256]: two FP8 tiles side by side; zeroing the second
#: leaves every row non-zero
DOWN0 = "model.layers.0.mlp.down_proj"
#: DeepGEMM per_block_cast_to_fp8: float32(max(amax, 1e-4)) / 448 for an all-zero tile
DEEPGEMM_ZERO = float(np.float32(1e-4) / np.float32(448.0))


def _zero_tile(tmp_path: Path, fixture: str, scale_param: str, scale: float) -> list[Finding]:
    def codes(a: np.ndarray) -> None:
        a[:, 128:] = 0

    folder = _plant(tmp_path, fixture, {f"{DOWN0}.weight": codes,
                                        f"{DOWN0}.{scale_param}": _set((0, 1), scale)})
    return _numbers(folder)


@pytest.mark.parametrize(("fixture", "param", "scale", "producers", "warned"), [
    ("kimi-k2-fp8-block-deepseek", "weight_scale_inv", DEEPGEMM_ZERO, ("deepseek", "deepgemm"),
     False),
    ("kimi-k2-fp8-block-compressed-tensors", "weight_scale", 2.0**-7, ("compressed-tensors",),
     False),
    # a UE8M0 writer's zero tile (2^-22) in a compressed-tensors file: named, and warned
    ("kimi-k2-fp8-block-compressed-tensors", "weight_scale", 2.0**-22, ("ue8m0",), True),
], ids=["deepgemm", "llm-compressor", "ue8m0-in-ct"])
def test_zero_fp8_tile_names_its_producer(tmp_path: Path, fixture: str, param: str,
                                          scale: float, producers: tuple[str, ...],
                                          warned: bool) -> None:
    findings = _zero_tile(tmp_path, fixture, param, scale)
    [mark] = [p for p in _prints(findings) if "all-zero FP8 tiles" in p]
    head, _, who = mark.partition(": ")
    assert head == f"1 all-zero FP8 tiles with scale {scale:.8g}"
    assert [name.split(" (")[0] for name in who.split("; ")] == list(producers)
    assert (("FP8_ZERO_TILE_SCALE", f"{DOWN0}.{param}") in _problems(findings)) is warned


def test_zero_fp8_tile_of_no_known_producer_is_no_fingerprint(tmp_path: Path) -> None:
    """The other side: the fixtures have no zero tile, and a zero tile whose scale no producer
    writes is the FP8_ZERO_TILE_SCALE warning alone."""
    assert _prints(_numbers(PRODUCERS / "kimi-k2-fp8-block-deepseek")) == []
    findings = _zero_tile(tmp_path, "kimi-k2-fp8-block-deepseek", "weight_scale_inv", 0.5)
    assert not [p for p in _prints(findings) if "all-zero" in p]
    assert ("FP8_ZERO_TILE_SCALE", f"{DOWN0}.weight_scale_inv") in _problems(findings)


@pytest.mark.parametrize(("scale", "producer"), [(1.0, "modelopt"), (0.125, "compressed-tensors"),
                                                 (2.0, None)])
def test_zero_nvfp4_block_names_its_producer(tmp_path: Path, scale: float,
                                             producer: str | None) -> None:
    """ModelOpt writes 1.0 for an all-zero block, compressed-tensors 0.125; another value
    names nobody."""
    gate = EXPERT.format(0, "gate_proj")

    def codes(a: np.ndarray) -> None:
        a[0, :8] = 0  # block (0, 0): 16 E2M1 codes, 8 bytes

    folder = _plant(tmp_path, "kimi-k2-nvfp4-modelopt", {f"{gate}.weight": codes,
                                                           f"{gate}.weight_scale": _set((0, 0), scale)})
    marks = [p for p in _prints(_numbers(folder)) if "all-zero NVFP4 blocks" in p]
    if producer is None:
        assert marks == []
    else:
        assert len(marks) == 1
        assert marks[0].startswith(f"1 all-zero NVFP4 blocks with scale {scale:.8g}: {producer} (")


def test_negative_zero_fingerprint_both_sides() -> None:
    """E2M1 -0 shows the producer keeps the sign of a value rounding to zero (both NVFP4
    producers), its absence among zeros and negatives that it writes +0 (Quark MXFP4)."""
    nvfp4 = _prints(_numbers(PRODUCERS / "kimi-k2-nvfp4-modelopt"))
    assert sum(p.startswith("E2M1 -0 (code 8) in ") for p in nvfp4) == 1
    quark = _prints(_numbers(PRODUCERS / MXFP4))
    assert next(p for p in quark if "-0" in p).startswith("no E2M1 -0 (code 8) among ")
    hist = np.zeros(16, np.int64)
    assert numbers.negative_zero_fingerprint(None) == []
    assert numbers.negative_zero_fingerprint(hist) == []
    hist[1] = 5  # positive codes only: nothing tells
    assert numbers.negative_zero_fingerprint(hist) == []
    hist[0] = 3
    assert numbers.negative_zero_fingerprint(hist) == []  # zeros, but no negative value
    hist[9] = 2
    assert numbers.negative_zero_fingerprint(hist)[0].startswith("no E2M1 -0")
    hist[8] = 1
    assert numbers.negative_zero_fingerprint(hist)[0].startswith("E2M1 -0 (code 8) in 1 of 11 ")


# -- FP8 block with declared ue8m0 scales (DeepSeek-V3.1 style) --------------------------------

#: from src-bf16, its first tile's ue8m0 amax maps to 224 or 240 (< 256)
KV_B0 = "model.layers.0.self_attn.kv_b_proj"


def _ue8m0_checkpoint(tmp_path: Path, edits: dict[str, Callable[[np.ndarray], Any]] | None = None
                      ) -> Path:
    """The DeepSeek FP8 fixture re-quantized from its BF16 twin as DeepGEMM's UE8M0 path
    writes it (the reference ``ue8m0`` profile), ``scale_fmt: ue8m0`` declared; then
    ``edits`` applied."""
    from mxformats.schemes.fp8_block import quantize_fp8_block

    folder = tmp_path / "ue8m0"
    shutil.copytree(PRODUCERS / "kimi-k2-fp8-block-deepseek", folder)
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"]["scale_fmt"] = "ue8m0"
    (folder / "config.json").write_text(json.dumps(config))
    ckpt, src = _load(folder), _load(PRODUCERS / "src-bf16")
    requantized: dict[str, Callable[[np.ndarray], Any]] = {}
    for name in [n for n in ckpt.tensors if n.endswith(".weight_scale_inv")]:
        module = name.removesuffix(".weight_scale_inv")
        codes, scales = quantize_fp8_block(src.read(f"{module}.weight"), profile="ue8m0")
        requantized[f"{module}.weight"] = lambda a, c=codes: c.view(a.dtype)
        requantized[name] = lambda a, s=scales: s
    _plant_into(folder, requantized)
    return _plant_into(folder, edits or {})


def test_ue8m0_checkpoint_is_tight_at_224(tmp_path: Path) -> None:
    """A power-of-two scale maps a tile's amax into (224, 448], so a valid ue8m0 file holds
    tiles whose largest |code| is 224 or 240: no FP8_TILE_NOT_TIGHT (the fixture's kv_b_proj
    is one); the same file without the ue8m0 declaration is recognised from its scales (all
    powers of two: the fingerprint says so) and judged with the same bound; with one scale of
    the module off its power of two the tile is held to the top binade."""
    folder = _ue8m0_checkpoint(tmp_path)
    codes = _load(folder).read(f"{KV_B0}.weight").view(np.uint8)
    assert int((codes[:128, :128] & 0x7F).max()) in (0x76, 0x77)  # the case under test
    assert _problems(_numbers(folder)) == set()
    config = json.loads((folder / "config.json").read_text())
    del config["quantization_config"]["scale_fmt"]
    (folder / "config.json").write_text(json.dumps(config))
    found = _numbers(folder)
    assert _problems(found) == set()
    assert any("exact powers of two" in p for p in _prints(found))
    _plant_into(folder, {f"{KV_B0}.weight_scale_inv": lambda a: np.concatenate(
        [a.reshape(-1)[:-1], np.nextafter(a.reshape(-1)[-1:], np.float32(np.inf))]
    ).reshape(a.shape).astype(a.dtype)})
    found = _numbers(folder)
    assert _problems(found) == {("FP8_TILE_NOT_TIGHT", f"{KV_B0}.weight")}
    assert not any("exact powers of two" in p for p in _prints(found))


def test_ue8m0_tile_below_224_fires(tmp_path: Path) -> None:
    """The other side: a ue8m0 tile whose largest |code| is 208 (0x75) is not tight."""
    def cap(a: np.ndarray) -> np.ndarray:
        b = a.view(np.uint8)
        return np.where((b & 0x7F) > 0x75, (b & 0x80) | 0x75, b).astype(np.uint8).view(a.dtype)

    folder = _ue8m0_checkpoint(tmp_path, {f"{KV_B0}.weight": cap})
    assert _problems(_numbers(folder)) == {("FP8_TILE_NOT_TIGHT", f"{KV_B0}.weight")}


@pytest.mark.parametrize(("scale", "problems"), [
    (2.0**-22, set()),  # DeepGEMM's ue8m0 floor scale: exempt, and its zero-tile fingerprint
    (2.0**-21, {("FP8_TILE_NOT_TIGHT", f"{DOWN0}.weight")}),
], ids=["at-floor", "above-floor"])
def test_ue8m0_floor_and_zero_tile(tmp_path: Path, scale: float,
                                   problems: set[tuple[str, str]]) -> None:
    """A ue8m0 tile at DeepGEMM's amax floor (scale 2^-22: 1e-4/448 rounded up) is exempt
    from tightness, one a binade above is not; an all-zero tile with 2^-22 is the ue8m0
    producer's fingerprint, never FP8_ZERO_TILE_SCALE."""
    def small(a: np.ndarray) -> np.ndarray:
        b = a.view(np.uint8).copy()
        b[:, :128] = 0x30  # 1.0: a tiny tile
        b[:, 128:] = 0  # an all-zero tile
        return b.view(a.dtype)

    def scales(a: np.ndarray) -> None:
        a[0, 0], a[0, 1] = scale, 2.0**-22

    folder = _ue8m0_checkpoint(tmp_path, {f"{DOWN0}.weight": small,
                                          f"{DOWN0}.weight_scale_inv": scales})
    findings = _numbers(folder)
    assert _problems(findings) == problems
    assert any("2.3841858e-07: ue8m0" in p for p in _prints(findings))


@pytest.mark.usefixtures("scan_path")
def test_tile_flags_block_larger_than_the_array() -> None:
    """A tile larger than the array is one tile of the whole array, with no padding beyond
    it (a hostile weight_block_size must not allocate its square); both sides of an edge."""
    from mxformats.validate.descriptors.fp8_block import tile_flags

    codes = np.zeros((3, 5), np.uint8)
    codes[2, 4] = 0xF8  # -256: in the top binade
    for block in ((1 << 30, 1 << 30), (3, 5), (1 << 30, 5)):
        nonzero, top = tile_flags(codes, block)
        assert nonzero.tolist() == [[True]] and top.tolist() == [[True]]
    nonzero, top = tile_flags(codes, (2, 1 << 30))  # rows 0-1 zero, row 2 not
    assert nonzero.tolist() == [[False], [True]] and top.tolist() == [[False], [True]]


@pytest.mark.usefixtures("scan_path")
def test_hostile_block_size_is_no_internal_error(tmp_path: Path) -> None:
    """weight_block_size [2^30, 2^30] (a CONFIG_QUANT error at structure level) leaves the
    numbers checks bounded: no module allocates the tile's square and fails."""
    folder = tmp_path / "fp8"
    shutil.copytree(PRODUCERS / "kimi-k2-fp8-block-deepseek", folder)
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"]["weight_block_size"] = [1 << 30, 1 << 30]
    (folder / "config.json").write_text(json.dumps(config))
    assert "INTERNAL_ERROR" not in _ids(_numbers(folder))


def _global_scales(desc: Any, scales: dict[str, float], param: str | None = None
                   ) -> list[Finding]:
    """``desc.layer_findings`` over modules whose per-tensor scale ``param`` (default: the
    global scale) is ``scales[module]``."""
    from types import SimpleNamespace

    from mxformats.validate.model import TensorRef

    param = param or desc.global_name
    arrays, tensors = {}, {}
    for module, value in scales.items():
        arrays[module] = {param: np.array([value], np.float32)}
        name = f"{module}.{param}"
        tensors[name] = TensorRef(name, "m.safetensors", "F32", (1,), 0, 4)
    # W4A4 to both descriptors: a compressed-tensors group with input_activations
    config = {"config_groups": {"group_0": {"input_activations": {"num_bits": 4}}}}
    ckpt: Any = SimpleNamespace(tensors=tensors, quant_config=config)
    return list(desc.layer_findings(ckpt, arrays))


@pytest.mark.parametrize("experts", [10, 11, 400], ids=["at-limit", "one-over", "kimi-size"])
def test_gate_up_scale_is_listed_then_summed(experts: int) -> None:
    """A producer that calibrates gate and up apart does it in every expert: the first
    MAX_LISTED experts are listed, the rest counted in one summary (none at the limit)."""

    found = _global_scales(nvfp4_ct.DESCRIPTOR, {
        f"model.layers.1.mlp.experts.{e}.{proj}": value
        for e in range(experts) for proj, value in (("gate_proj", 1.0), ("up_proj", 2.0))})
    assert all(f.check.id == "NVFP4_GATE_UP_SCALE" for f in found)
    listed = [f for f in found if f.tensor is not None]
    assert len(listed) == min(experts, MAX_LISTED)
    rest = [f for f in found if f.tensor is None]
    assert [f.message for f in rest] == ([
        f"{experts - MAX_LISTED} more like the above, not listed (of {experts} fused pair(s), "
        f"{experts} decoded with the partner's global scale: |ratio - 1| median 100.00%, max "
        "100.00%)"] if experts > MAX_LISTED else [])


_FUSED = [
    ("model.layers.0.self_attn.q_a_proj", "model.layers.0.self_attn.kv_a_proj_with_mqa"),
    ("model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj"),
    ("model.layers.1.mlp.shared_experts.gate_proj", "model.layers.1.mlp.shared_experts.up_proj"),
    ("model.layers.1.mlp.experts.7.gate_proj", "model.layers.1.mlp.experts.7.up_proj"),
]


@pytest.mark.parametrize("desc", [nvfp4_modelopt.DESCRIPTOR, nvfp4_ct.DESCRIPTOR],
                         ids=["modelopt", "compressed-tensors"])
@pytest.mark.parametrize(("first", "second"), _FUSED,
                         ids=["fused-qkv-a", "dense-gate-up", "shared-gate-up", "expert-w13"])
def test_fused_input_scales_differ(desc: Any, first: str, second: str) -> None:
    """vLLM quantizes a fused GEMM's one input with one activation scale (the max): two fused
    modules whose input scales differ by one float32 ulp are a warning on the second, for
    both producers (neither writes them apart); equal ones, a pair vLLM does not fuse, and a
    zero, negative or NaN scale (SCALE_ZERO's, SCALE_NEGATIVE's, SCALE_NONFINITE's finding)
    are nothing."""
    value = 0.0025 if desc is nvfp4_modelopt.DESCRIPTOR else 400.0
    ulp = float(np.nextafter(np.float32(value), np.float32(np.inf)))
    param = desc.input_name
    [found] = _global_scales(desc, {first: value, second: ulp}, param)
    assert (found.check.id, found.tensor) == ("NVFP4_FUSED_INPUT_SCALE", f"{second}.{param}")
    assert found.effective_severity.value == "warning" and "vLLM quantizes" in found.message
    assert _global_scales(desc, {first: value, second: value}, param) == []
    unfused = first.replace("q_a_proj", "kv_b_proj").replace("gate_proj", "down_proj")
    assert _global_scales(desc, {unfused: value, second: ulp}, param) == []
    for bad in (0.0, -value, float("nan")):
        assert _global_scales(desc, {first: bad, second: value}, param) == []


def test_fused_input_scales_listed_then_summed() -> None:
    """One producer that calibrates every expert's gate and up inputs apart: MAX_LISTED
    findings and one summary; the global-scale check, on its own count, is not mixed in."""

    desc = nvfp4_modelopt.DESCRIPTOR
    found = _global_scales(desc, {
        f"model.layers.1.mlp.experts.{e}.{proj}": value
        for e in range(MAX_LISTED + 5) for proj, value in (("gate_proj", 1.0), ("up_proj", 2.0))},
        desc.input_name)
    assert {f.check.id for f in found} == {"NVFP4_FUSED_INPUT_SCALE"}
    assert sum(f.tensor is not None for f in found) == MAX_LISTED
    assert [f.message for f in found if f.tensor is None] == ["5 more like the above, not listed"]


def test_fused_input_scales_of_weight_only_modelopt_unchecked() -> None:
    """A W4A16 ModelOpt checkpoint runs no activation quantization (vLLM drops a stray
    input_scale), so its fused modules' input scales are not compared."""
    from mxformats.validate.descriptors.nvfp4_modelopt import ModelOptNVFP4

    first, second = _FUSED[1]
    assert _global_scales(ModelOptNVFP4(weight_only=True), {first: 1.0, second: 2.0},
                          "input_scale") == []


def test_ue8m0_checkpoint_reproduces_with_the_ue8m0_profile(tmp_path: Path) -> None:
    """``scale_fmt: ue8m0`` selects the ``ue8m0`` producer profile: ``--source`` reproduces
    every tensor of a DeepGEMM UE8M0 export byte for byte (the plain ``deepseek`` profile
    mismatches every scale), and ``profile_for`` names it; without the key, ``deepseek``."""
    from mxformats.validate.descriptors import profile_for
    from mxformats.validate.runner import validate

    folder = _ue8m0_checkpoint(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    assert profile_for(config)["producer_profile"] == "ue8m0"
    report = validate(folder, Options(level=Level.SCALES, source=PRODUCERS / "src-bf16"))
    assert report.reproduction is not None and report.reproduction["profile"] == "ue8m0"
    assert {f.check.id for f in report.findings} == {"REPRO_SUMMARY"}
    del config["quantization_config"]["scale_fmt"]
    assert profile_for(config)["producer_profile"] == "deepseek"


@pytest.mark.parametrize(("first", "second"), [
    ("model.layers.0.self_attn.q_a_proj", "model.layers.0.self_attn.kv_a_proj_with_mqa"),
    ("model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj"),
    ("model.layers.1.mlp.shared_experts.gate_proj", "model.layers.1.mlp.shared_experts.up_proj"),
], ids=["fused-qkv-a", "dense-gate-up", "shared-gate-up"])
def test_fused_linear_global_scales_differ(first: str, second: str) -> None:
    """vLLM's NVFP4 linear methods keep one global scale for a fused linear (the shards'
    max): two fused linears with different scales are an error on the one decoded with the
    other's (ModelOpt: the smaller multiplier), naming what vLLM does; equal ones, or a pair
    vLLM does not fuse (q_a with kv_b), are nothing."""
    desc = nvfp4_modelopt.DESCRIPTOR
    [found] = _global_scales(desc, {first: 0.001, second: 0.002})
    assert (found.check.id, found.tensor) == ("NVFP4_GATE_UP_SCALE",
                                              f"{first}.weight_scale_2")
    assert "weight_scale_2.max()" in found.message and found.effective_severity.value == "error"
    assert _global_scales(desc, {first: 0.002, second: 0.002}) == []
    unfused = first.replace("q_a_proj", "kv_b_proj").replace("gate_proj", "down_proj")
    assert _global_scales(desc, {unfused: 0.001, second: 0.002}) == []


# -- one root cause in every module: listed, then counted -----------------------------------------


def test_one_scale_defect_in_every_module_is_listed_then_counted(tmp_path: Path) -> None:
    """A 0xFF E8M0 scale byte in every quantized module (27 in the MXFP4 fixture) gives the
    first MAX_LISTED modules' E8M0_NAN findings in module order and one error that counts the
    rest, never one per module; the run fails, and the JSON report's task records, which the
    summary points to, still hold every module's finding."""
    from mxformats.validate.report import exit_code, to_json
    from mxformats.validate.runner import validate

    def first_byte_nan(a: np.ndarray) -> None:
        a.reshape(-1)[0] = 0xFF

    modules = [m.name for m in numbers.quantized_modules(_load(PRODUCERS / MXFP4))]
    assert len(modules) > MAX_LISTED + 1
    folder = _plant(tmp_path, MXFP4, {f"{m}.weight_scale": first_byte_nan for m in modules})
    report = validate(folder, Options(level=Level.SCALES, workers=1))
    nan = [f for f in report.findings if f.check.id == "E8M0_NAN"]
    assert [f.tensor for f in nan] == [f"{m}.weight_scale" for m in modules[:MAX_LISTED]] + [
        None]
    rest = nan[-1]
    assert rest.message == (f"{len(modules) - MAX_LISTED} more like the above, not listed "
                            "(the JSON report's task records hold every module's findings)")
    assert rest.effective_severity is Severity.ERROR and exit_code(report) == 1
    recorded = [f for t in to_json(report)["tasks"] for o in t["result"]["numbers"]
                for f in o["findings"] if f["check"] == "E8M0_NAN"]
    assert sorted(f["tensor"] for f in recorded) == sorted(f"{m}.weight_scale" for m in modules)


@pytest.mark.parametrize("errors_at", [None, "last"], ids=["warnings-only", "error-beyond-cap"])
def test_an_error_beyond_the_listed_ones_still_fails_the_run(errors_at: str | None) -> None:
    """The summary carries the worst severity of the findings it stands for: SCALE_ZERO
    warnings in every module exit 0, and the same with one error past the first MAX_LISTED
    (a module whose zero scale vLLM divides by) exit 1, whatever order the modules' outcomes
    come in."""
    from mxformats.validate.report import Report, exit_code

    ckpt = _load(PRODUCERS / MXFP4)
    modules = [m.name for m in numbers.quantized_modules(ckpt)]
    last = len(modules) - 1
    outcomes = [numbers.ModuleNumbers(m, [Finding(
        stats.SCALE_ZERO, "zero", tensor=m,
        severity=Severity.ERROR if errors_at and i == last else Severity.WARNING)])
        for i, m in enumerate(modules)]
    found = list(numbers.run(ckpt, Options(level=Level.SCALES), outcomes[::-1]))
    zero = [f for f in found if f.check.id == "SCALE_ZERO"]
    assert [f.tensor for f in zero] == [*modules[:MAX_LISTED], None]
    assert {f.effective_severity for f in zero[:-1]} == {Severity.WARNING}
    expected = Severity.ERROR if errors_at else Severity.WARNING
    assert zero[-1].effective_severity is expected
    assert exit_code(Report("x", "mxfp4", "", found)) == (1 if errors_at else 0)


def test_a_nan_in_every_norm_is_listed_then_counted(tmp_path: Path) -> None:
    """The float-tensor checks across modules list the same way: a NaN in each of the
    fixture's 13 norm weights gives the first MAX_LISTED TENSOR_NONFINITE errors in name order
    and one error that counts the rest (these tensors are in no task record: no note)."""

    norms = sorted(n for n in _load(PRODUCERS / MXFP4).tensors if n.endswith("norm.weight"))
    assert len(norms) > MAX_LISTED
    folder = _plant(tmp_path, MXFP4, {n: _set((0,), np.nan) for n in norms})
    found = [f for f in _numbers(folder, Options(level=Level.SCALES))
             if f.check.id == "TENSOR_NONFINITE"]
    assert [f.tensor for f in found] == [*norms[:MAX_LISTED], None]
    assert found[-1].message == f"{len(norms) - MAX_LISTED} more like the above, not listed"
    assert found[-1].effective_severity is Severity.ERROR


@pytest.mark.usefixtures("scan_path")
def test_scale_histogram_bins_bytes_and_exponents_at_their_edges() -> None:
    """1-byte scales: one bin per raw byte, 0x00 and 0xFF included; float scales: one bin per
    np.frexp exponent, -128 and 127 the last bins inside, beyond them clipped into them;
    integer scales: no histogram."""
    e8m0 = np.array([0, 1, 127, 254, 255, 255], np.uint8)
    bins, counts = numbers.scale_histogram(e8m0) or ("", np.zeros(0))
    assert bins == "byte" and counts.dtype == np.int64 and counts.shape == (256,)
    assert {i: int(n) for i, n in enumerate(counts) if n} == {0: 1, 1: 1, 127: 1, 254: 1,
                                                              255: 2}
    e4m3 = np.array([0.5, -448.0, 2.0**-9], ml_dtypes.float8_e4m3fn)
    bins, counts = numbers.scale_histogram(e4m3) or ("", np.zeros(0))
    assert bins == "byte"
    assert {i: int(n) for i, n in enumerate(counts) if n} == {0x30: 1, 0xFE: 1, 0x01: 1}
    # frexp: 2^k = 0.5 * 2^(k+1), so 2^-129 is the exponent -128 (bin 0), 2^126 is 127
    # (bin 255); 2^-130 and 2^127 are beyond, clipped into those bins
    floats = np.array([2.0**-130, 2.0**-129, 2.0**-128, 0.75, 2.0**125, 2.0**126, 2.0**127,
                       0.0], np.float64)
    bins, counts = numbers.scale_histogram(floats.astype(np.float32)) or ("", np.zeros(0))
    assert bins == "exponent" and counts.shape == (256,)
    assert {i: int(n) for i, n in enumerate(counts) if n} == {
        0: 2, 1: 1, 128: 2, 254: 1, 255: 2}  # 0.75 and 0.0 at exponent 0
    bf16 = numbers.scale_histogram(np.array([3.0], ml_dtypes.bfloat16))
    assert bf16 is not None and bf16[0] == "exponent" and int(bf16[1][128 + 2]) == 1
    assert numbers.scale_histogram(np.array([1, 2], np.int32)) is None


@pytest.mark.parametrize("fixture", ["kimi-k2-mxfp4-quark", "kimi-k2-nvfp4-modelopt"])
def test_a_scale_tensor_is_counted_once_per_module(monkeypatch: pytest.MonkeyPatch,
                                                   fixture: str) -> None:
    """At ``scales`` the E8M0 / E4M3 checks, the decoded magnitude and the report's histogram
    all read a 1-byte scale tensor's byte counts: each module counts each of its 1-byte
    scale tensors once (``--level scales`` on the Hub is 5.6 % of a Kimi repository)."""
    from mxformats.fast import histogram

    counted: list[int] = []

    def count_bytes(data: np.ndarray, counts: np.ndarray) -> None:
        counted.append(data.size)
        counts += np.bincount(data, minlength=256)

    monkeypatch.setattr(histogram.jit, "compiled", lambda name="compiled": type(
        "Kernels", (), {"count_bytes": staticmethod(count_bytes)}))
    opts = Options(level=Level.SCALES)
    ckpt = load(PRODUCERS / fixture, opts).ckpt
    assert ckpt is not None and ckpt.descriptor is not None
    one_byte = []
    for module in ckpt.modules.values():
        if not ckpt.descriptor.quantized(module):
            continue
        numbers.module_numbers(ckpt, opts, module)
        one_byte += [module.tensors[p].nbytes for p in numbers.module_params(ckpt, opts, module)
                     if p in module.tensors and DTYPES[module.tensors[p].dtype].itemsize == 1
                     and p != ckpt.descriptor.for_module(ckpt, module.name).weight_param]
    assert one_byte and sorted(counted) == sorted(one_byte)
