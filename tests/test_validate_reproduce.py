"""``--source`` reproduction: every quantized tensor of the three producer fixtures is reproduced
from ``src-bf16``; planted differences are reported with their first differing element."""

from __future__ import annotations

import itertools
import json
import math
import re
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from numpy.typing import NDArray

from mxformats.fast import jit
from mxformats.schemes.int4 import unpack_int4
from mxformats.tensorfile import read_checkpoint_tensor
from mxformats.validate import reproduce
from mxformats.validate.descriptors import DESCRIPTORS, Descriptor, quark_mxfp4
from mxformats.validate.descriptors.base import MixedDescriptor
from mxformats.validate.files import load
from mxformats.validate.findings import Finding, Listing, Severity
from mxformats.validate.model import Checkpoint, Options

PRODUCERS = Path(__file__).resolve().parent / "data" / "producers"
SRC = PRODUCERS / "src-bf16"
#: fixture -> (quantized modules, quantized tensors, relative error range of the format)
FIXTURES = {"kimi-k2-mxfp4-quark": (27, 54, (0.05, 0.15)),
            "kimi-k2-w4a8-quark": (24, 72, (0.05, 0.15)),
            "kimi-k2-int4-compressed-tensors": (24, 72, (0.05, 0.15)),
            "kimi-k2-fp8-block-deepseek": (48, 96, (0.01, 0.05)),
            "kimi-k2-fp8-block-compressed-tensors": (42, 84, (0.01, 0.05)),
            "kimi-k2-nvfp4-modelopt": (24, 72, (0.05, 0.15)),
            "kimi-k2-nvfp4-compressed-tensors": (24, 72, (0.05, 0.15))}


def _load(folder: Path) -> Checkpoint:
    result = load(folder, Options())
    assert result.ckpt is not None, result.fatal
    return result.ckpt


def _run(folder: Path, source: Path = SRC, **kw: Any) -> list[Finding]:
    return list(reproduce.run(_load(folder), Options(source=source, **kw)))


def _block(findings: list[Finding]) -> dict[str, Any]:
    summary = [f for f in findings if f.check.id == "REPRO_SUMMARY"]
    assert len(summary) == 1
    block = summary[0].extra["reproduction"]
    assert isinstance(block, dict)
    return block


@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_every_quantized_tensor_of_the_producers_is_reproduced(fixture: str) -> None:
    findings = _run(PRODUCERS / fixture)
    assert [f.check.id for f in findings] == ["REPRO_SUMMARY"]
    block = _block(findings)
    modules, tensors, (low, high) = FIXTURES[fixture]
    assert block["modules_checked"] == block["modules_reproduced"] == modules
    assert block["tensors"] == block["identical"] == tensors
    assert block["first_mismatches"] == []
    errs = [t["rel_error"] for t in block["per_module"]]
    assert all(low < e < high for e in errs)  # 4-bit or FP8 error on N(0, 0.02) weights
    json.dumps(block, allow_nan=False)  # the report can carry it, as strict JSON


def test_sample_is_deterministic_and_per_layer() -> None:
    folder = PRODUCERS / "kimi-k2-mxfp4-quark"
    a = _block(_run(folder, sample=2))
    b = _block(_run(folder, sample=2))
    assert a == b and a["modules_checked"] == 6  # layers 0, 1, 2
    names = [t["module"] for t in a["per_module"]]
    assert sorted({n.split(".")[2] for n in names}) == ["0", "1", "2"]
    assert reproduce.sample_modules(["x.layers.1.a", "x.layers.1.b"], 0) == []


def _planted(tmp_path: Path, fixture: str, name: str, edit: Any) -> Path:
    folder = tmp_path / fixture
    shutil.copytree(PRODUCERS / fixture, folder)
    _planted_in_place(folder, _load(folder), name, edit)
    return folder


def _planted_in_place(folder: Path, ckpt: Checkpoint, name: str, edit: Any) -> None:
    """Rewrite tensor ``name`` of ``folder`` with ``edit(array)`` (same dtype and shape)."""
    ref = ckpt.tensors[name]
    array = ckpt.read(name).copy()
    array = np.asarray(edit(array), dtype=array.dtype).reshape(array.shape)
    with open(folder / ref.file, "r+b") as f:
        f.seek(ref.begin)
        f.write(array.tobytes())


def test_a_changed_byte_is_a_mismatch_naming_the_first_element(tmp_path: Path) -> None:
    name = "model.layers.2.mlp.experts.1.up_proj.weight"
    folder = _planted(tmp_path, "kimi-k2-w4a8-quark", name,
                      lambda a: np.where(np.arange(a.size).reshape(a.shape) == 21, a ^ 0x10, a))
    findings = _run(folder)
    mism = [f for f in findings if f.check.id == "REPRO_MISMATCH"]
    assert [f.tensor for f in mism] == [name]
    assert "element [1, 5]" in mism[0].message  # 16 words per row: flat 21 = [1, 5]
    block = _block(findings)
    assert block["identical"] == 71 and block["modules_reproduced"] == 23


def test_wrong_scales_give_high_error_and_scrambled_codes_no_correlation(tmp_path: Path) -> None:
    scale = "model.layers.1.mlp.experts.0.down_proj.weight_scale"
    folder = _planted(tmp_path, "kimi-k2-mxfp4-quark", scale, lambda a: a + 1)
    ids = {(f.check.id, f.tensor) for f in _run(folder)}
    weight = scale.removesuffix("_scale")
    assert ("REPRO_ERROR_HIGH", weight) in ids and ("REPRO_MISMATCH", scale) in ids
    packed = "model.layers.2.mlp.experts.3.gate_proj.weight_packed"
    rng = np.random.default_rng(0)
    folder = _planted(tmp_path / "ct", "kimi-k2-int4-compressed-tensors", packed,
                      lambda a: rng.permutation(a.reshape(-1)))
    ids = {(f.check.id, f.tensor) for f in _run(folder)}
    assert ("REPRO_UNCORRELATED", packed) in ids


def test_source_problems(tmp_path: Path) -> None:
    fixture = PRODUCERS / "kimi-k2-mxfp4-quark"
    # the source lacks a module
    src = tmp_path / "src"
    shutil.copytree(SRC, src)
    index = json.loads((src / "model.safetensors.index.json").read_text())
    gone = "model.layers.1.mlp.experts.2.gate_proj"
    del index["weight_map"][f"{gone}.weight"]
    (src / "model.safetensors.index.json").write_text(json.dumps(index))
    found = [(f.check.id, f.tensor) for f in _run(fixture, src)]
    assert ("REPRO_SOURCE_MISSING", f"{gone}.weight") in found
    assert _block(_run(fixture, src))["modules_checked"] == 26
    # a source in a form this tool does not decompress (AWQ) is recognised and refused
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "awq", "bits": 4}
    (src / "config.json").write_text(json.dumps(config))
    assert [f.check.id for f in _run(fixture, src)] == ["REPRO_SOURCE_UNSUPPORTED"]
    assert [f.check.id for f in _run(fixture, tmp_path / "absent")] == [
        "REPRO_SOURCE_UNSUPPORTED"]
    # a BF16 checkpoint has nothing to reproduce: --source verified nothing, an error
    assert [(f.check.id, f.effective_severity) for f in _run(SRC)] == [
        ("REPRO_NOTHING_VERIFIED", Severity.ERROR)]


def test_compressed_tensors_source_is_decompressed_as_the_producer_does() -> None:
    ct = PRODUCERS / "kimi-k2-int4-compressed-tensors"
    source = reproduce.Source(ct)
    assert source.kind == "compressed-tensors-int4" and source.supported
    module = "model.layers.2.mlp.experts.2.down_proj"  # split across shards
    w = source.weight(module)
    assert w is not None and w.dtype == ml_dtypes.bfloat16 and w.shape == (128, 96)
    q = unpack_int4(read_checkpoint_tensor(ct, f"{module}.weight_packed"),
                    layout="compressed-tensors", size=96).astype(np.float32)
    s = np.repeat(read_checkpoint_tensor(ct, f"{module}.weight_scale").astype(np.float32), 32, 1)
    assert np.array_equal(w, (q * s).astype(ml_dtypes.bfloat16))  # q.to(bf16) * scale
    # BF16 modules of a compressed-tensors source are read as they are
    assert source.weight("model.layers.0.mlp.gate_proj") is not None
    # what Quark makes of the decompressed weight round-trips through the comparison
    res = reproduce.reproduce_module(quark_mxfp4.DESCRIPTOR, module, w,
                                     quark_mxfp4.DESCRIPTOR.produce(w))
    assert all(res.identical.values()) and res.rel_error < 0.15


def test_fp8_block_source_decompresses_as_deepseek_weight_dequant(tmp_path: Path) -> None:
    """The FP8-block source path equals torch's float32 multiply then bfloat16 store (the
    DeepSeek ``weight_dequant`` kernel's arithmetic), bit for bit, ragged blocks included."""
    import json as _json

    from conftest import requires

    from mxformats.tensorfile import write_safetensors
    from mxformats.validate.reproduce import Source, dequantize_fp8_block

    torch = requires("torch")
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 256, size=(130, 200), dtype=np.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0x3C  # no NaN codes in a real weight
    scale_inv = rng.uniform(1e-4, 1e-2, size=(2, 2)).astype(np.float32)
    t = torch.from_numpy(codes.copy()).view(torch.float8_e4m3fn).float()
    s = torch.from_numpy(scale_inv).repeat_interleave(128, 0).repeat_interleave(128, 1)
    expected = (t * s[:130, :200]).to(torch.bfloat16).view(torch.int16).numpy()
    got = dequantize_fp8_block(codes, scale_inv)
    assert np.array_equal(got.view(np.int16), expected)
    with pytest.raises(ValueError, match="does not tile"):
        dequantize_fp8_block(codes, scale_inv[:1])

    name = "model.layers.1.mlp.experts.0.down_proj"
    fp8 = codes.view(ml_dtypes.float8_e4m3fn)
    write_safetensors(tmp_path / "model.safetensors",
                      {f"{name}.weight": fp8, f"{name}.weight_scale_inv": scale_inv})
    (tmp_path / "config.json").write_text(_json.dumps({"quantization_config": {
        "quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128],
        "activation_scheme": "dynamic"}}))
    source = Source(tmp_path)
    assert source.kind == "fp8-block" and source.supported
    weight = source.weight(name)
    assert weight is not None and np.array_equal(weight.view(np.int16), expected)


# -- verdicts: a claimed profile whose bytes differ fails; nothing verified is never OK -------


def test_mismatch_messages_print_raw_bits(tmp_path: Path) -> None:
    scale = "model.layers.1.mlp.experts.0.down_proj.weight_scale"
    folder = _planted(tmp_path, "kimi-k2-mxfp4-quark", scale, lambda a: a + 1)
    msg = next(f.message for f in _run(folder) if f.tensor == scale)
    m = re.search(r"element \[0, 0\]: expected 0x([0-9a-f]{2}), found 0x([0-9a-f]{2}) "
                  r"\((\d+) of (\d+) elements differ\)$", msg)
    assert m is not None, msg
    assert int(m[2], 16) == int(m[1], 16) + 1 and m[3] == m[4]
    assert "np." not in msg
    # a float scale: its bits, then its value
    w4a8 = "model.layers.1.mlp.experts.0.gate_proj.weight_scale"
    folder = _planted(tmp_path / "w", "kimi-k2-w4a8-quark", w4a8, lambda a: a * 2)
    msg = next(f.message for f in _run(folder) if f.tensor == w4a8)
    m = re.search(r"element \[\]: expected 0x([0-9a-f]{8}) \((.+)\), found 0x([0-9a-f]{8}) "
                  r"\((.+)\) \(1 of 1 elements differ\)", msg)
    assert m is not None, msg
    expected = np.frombuffer(int(m[1], 16).to_bytes(4, "little"), np.float32)[0]
    assert float(m[2]) == float(expected) and float(m[4]) == 2 * float(expected)
    assert int(m[3], 16) == int(m[1], 16) + (1 << 23)  # x2: the exponent field + 1


def test_bits_of_every_element_dtype() -> None:
    one = np.array([1.0], ml_dtypes.bfloat16)
    assert reproduce._bits(one) == "0x3f80 (1.0)"
    assert reproduce._bits(np.array([120], np.uint8)) == "0x78"
    assert reproduce._bits(np.array([-1], np.int32)) == "0xffffffff"
    assert reproduce._bits(np.array([2], np.int64)) == "0x0000000000000002"
    assert reproduce._bits(np.array([-0.0], np.float32)) == "0x80000000 (-0.0)"


def _result(rel_error: float, correlation: float = 0.99, reproduced: bool = False
            ) -> reproduce.ModuleResult:
    return reproduce.ModuleResult("m", identical={"weight": reproduced, "weight_scale": True},
                                  rel_error=rel_error, sqnr_db=0.0, correlation=correlation)


@pytest.mark.parametrize("fmt", [d for d in DESCRIPTORS if d.profile is not None],
                         ids=lambda d: d.format.value)
def test_numeric_verdict_on_both_sides_of_each_bound(fmt: Descriptor) -> None:
    """Below the family threshold nothing; above it a warning up to ERROR_LIMIT and an error
    beyond (or not finite); info where the profile reproduced the bytes; correlation 0.9."""
    def verdict(r: reproduce.ModuleResult) -> tuple[str, Severity] | None:
        v = reproduce._numeric_verdict(fmt, r)
        return None if v is None else (v[0].id, v[1])

    t, limit = fmt.error_threshold, reproduce.ERROR_LIMIT
    high = "REPRO_ERROR_HIGH"
    assert verdict(_result(t)) is None
    assert verdict(_result(np.nextafter(t, 1.0))) == (high, Severity.WARNING)
    assert verdict(_result(limit)) == (high, Severity.WARNING)
    assert verdict(_result(np.nextafter(limit, 1.0))) == (high, Severity.ERROR)
    assert verdict(_result(math.inf)) == (high, Severity.ERROR)
    assert verdict(_result(math.nan)) is None  # not decoded: the mismatch error says why
    assert verdict(_result(1.0, reproduced=True)) == (high, Severity.INFO)
    assert verdict(_result(t / 2, correlation=0.9)) is None
    low = verdict(_result(t / 2, correlation=float(np.nextafter(0.9, 0.0))))
    assert low == ("REPRO_UNCORRELATED", Severity.ERROR)
    assert verdict(_result(t / 2, correlation=math.nan)) is None  # a constant source
    # the producer's own bytes: info, whatever the correlation; an error where not claimed
    assert verdict(_result(t / 2, correlation=0.0, reproduced=True)) == (
        "REPRO_UNCORRELATED", Severity.INFO)
    v = reproduce._numeric_verdict(fmt, _result(t / 2, correlation=0.0, reproduced=True),
                                   claimed=False)
    assert v is not None and (v[0].id, v[1]) == ("REPRO_UNCORRELATED", Severity.ERROR)


@pytest.mark.parametrize("fmt", [d for d in DESCRIPTORS if d.profile is not None
                                 and not isinstance(d, MixedDescriptor)],
                         ids=lambda d: d.format.value)
def test_a_near_constant_source_reproduced_is_no_error(fmt: Descriptor) -> None:
    """A source whose every block varies by less than a quantization step (1 or 1 + 2^-7)
    quantizes to a constant weight: correlation 0 with the source, from a right producer.
    Where the profile writes exactly these bytes it is info (before: REPRO_UNCORRELATED,
    an error, on the producer's own output, in every format); a checkpoint whose bytes differ
    stays an error."""
    w = (1.0 + np.random.default_rng(0).integers(0, 2, (64, 128)) * 2.0 ** -7).astype(
        ml_dtypes.bfloat16)
    r = reproduce.reproduce_module(fmt, "m", w, fmt.produce(w))
    assert all(r.identical.values()) and r.correlation == 0.0 and r.rel_error < 0.1
    v = reproduce._numeric_verdict(fmt, r)
    assert v is not None and (v[0].id, v[1]) == ("REPRO_UNCORRELATED", Severity.INFO)
    r.identical[fmt.weight_param] = False
    v = reproduce._numeric_verdict(fmt, r)
    assert v is not None and (v[0].id, v[1]) == ("REPRO_UNCORRELATED", Severity.ERROR)


def test_a_zeroed_module_is_uncorrelated_not_nan() -> None:
    """np.corrcoef of a constant is NaN, and NaN < 0.9 is false: a zeroed expert passed."""
    w = np.random.default_rng(0).standard_normal((64, 64)).astype(ml_dtypes.bfloat16)
    fmt = quark_mxfp4.DESCRIPTOR
    arrays = fmt.produce(w)
    arrays["weight"] = np.zeros_like(arrays["weight"])
    r = reproduce.reproduce_module(fmt, "m", w, arrays)
    assert r.correlation == 0.0 and not r.identical["weight"]
    assert reproduce._numeric_verdict(fmt, r) is not None
    # NaN decoded (scale 0xFF): no statistic, an error
    arrays = fmt.produce(w)
    arrays["weight_scale"] = np.full_like(arrays["weight_scale"], 0xFF)
    r = reproduce.reproduce_module(fmt, "m", w, arrays)
    assert r.rel_error == math.inf
    v = reproduce._numeric_verdict(fmt, r)
    assert v is not None and v[1] is Severity.ERROR
    # a zero source: no correlation to judge, the error decides
    zero = np.zeros((32, 64), ml_dtypes.bfloat16)
    r = reproduce.reproduce_module(fmt, "m", zero, fmt.produce(zero))
    assert math.isnan(r.correlation) and r.rel_error == 0.0


def test_every_module_wrong_lists_the_first_and_counts_the_rest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reproduce, "MAX_LISTED", 2)
    folder = tmp_path / "mx"
    shutil.copytree(PRODUCERS / "kimi-k2-mxfp4-quark", folder)
    ckpt = _load(folder)
    for name in [n for n in ckpt.tensors if n.endswith(".weight_scale")]:
        _planted_in_place(folder, ckpt, name, lambda a: a + 1)
    findings = _run(folder)
    for check in ("REPRO_MISMATCH", "REPRO_ERROR_HIGH"):
        mine = [f for f in findings if f.check.id == check]
        assert [f.tensor is None for f in mine] == [False, False, True], check
        assert all(f.effective_severity is Severity.ERROR for f in mine)
        assert mine[-1].message.startswith("25 more like the above")
        unlisted = mine[-1].extra["unlisted"]  # nothing lost: the JSON report has each
        assert len(unlisted) == 25 and all(u["tensor"] and u["message"] for u in unlisted)
        assert unlisted[0]["severity"] == "error"
    assert _block(findings)["modules_reproduced"] == 0


@pytest.mark.parametrize("extra", [0, 1])
def test_listing_cap_both_sides(extra: int) -> None:
    """MAX_LISTED findings of a check are all listed with no summary; one more is counted in
    one summary finding carrying the worst severity of those it stands for."""
    listing = Listing(reproduce.MAX_LISTED)
    n = reproduce.MAX_LISTED + extra
    severities = [Severity.WARNING] * (n - 1) + [Severity.ERROR]
    listed = [f for i, sev in enumerate(severities) for f in listing.add(
        Finding(reproduce.REPRO_ERROR_HIGH, f"m{i}", tensor=f"m{i}", severity=sev))]
    rest = list(listing.rest())
    assert [f.tensor for f in listed] == [f"m{i}" for i in range(reproduce.MAX_LISTED)]
    assert len(rest) == extra
    if extra:
        assert rest[0].message.startswith("1 more like the above")
        assert rest[0].effective_severity is Severity.ERROR and rest[0].tensor is None


def test_a_source_holding_none_of_the_modules_fails_once(tmp_path: Path) -> None:
    """K2.5-style names (language_model.model.layers...) against a K2 source: one error, not
    one REPRO_SOURCE_MISSING per module, and never OK."""
    src = tmp_path / "src"
    shutil.copytree(SRC, src)
    index_path = src / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"] = {f"language_model.{k}": v for k, v in index["weight_map"].items()}
    index_path.write_text(json.dumps(index))
    found = _run(PRODUCERS / "kimi-k2-mxfp4-quark", src)
    assert [(f.check.id, f.effective_severity) for f in found] == [
        ("REPRO_NOTHING_VERIFIED", Severity.ERROR), ("REPRO_SUMMARY", Severity.INFO)]
    assert found[0].message.endswith(
        "the source holds no usable weight of this checkpoint's modules (27 looked for; first "
        "model.layers.0.mlp.down_proj: no weight in the source)")
    assert _block(found)["modules_checked"] == 0
    # one module present is enough to verify something: the others are listed as missing
    index["weight_map"]["model.layers.0.mlp.up_proj.weight"] = index["weight_map"][
        "language_model.model.layers.0.mlp.up_proj.weight"]
    index_path.write_text(json.dumps(index))
    ids = Counter(f.check.id for f in _run(PRODUCERS / "kimi-k2-mxfp4-quark", src))
    assert ids == Counter({"REPRO_SOURCE_MISSING": 11, "REPRO_SUMMARY": 1})


@pytest.mark.parametrize(("mode", "claimed"), [
    (None, True), ("even", True), ("floor", False), ("ceil", False)])
def test_only_the_recipes_a_profile_reproduces_are_claimed(mode: str | None,
                                                           claimed: bool) -> None:
    """Quark 0.13's PerBlockMXObserver: None and "even" are even_round (the quark profile);
    "floor" and "ceil" are other rules, whose bytes no profile here can claim."""
    ckpt = _load(PRODUCERS / "kimi-k2-mxfp4-quark")
    assert ckpt.quant_config is not None
    weight = ckpt.quant_config["global_quant_config"]["weight"]
    weight["scale_calculation_mode"] = mode
    profile, why = reproduce.claimed_profile(ckpt)
    assert profile == "quark" and (why == "") is claimed
    assert claimed or (f"{mode!r} is not reproduced" in why)
    for fixture in ("kimi-k2-w4a8-quark", "kimi-k2-int4-compressed-tensors"):
        assert reproduce.claimed_profile(_load(PRODUCERS / fixture))[1] == ""


def test_four_over_six_needs_scales_the_plain_recipe_did_not_write() -> None:
    """A plain ModelOpt tensor whose global amax comes from a 4x larger sibling has every
    block scale under the 4/6 bound (384): with its own scale bytes, a flipped code is the
    profile's mismatch (claimed, ""); with a scale byte the plain recipe did not write, the
    tensor reads as Four-Over-Six (unclaimed)."""
    from mxformats.schemes.nvfp4 import quantize_nvfp4
    from mxformats.validate.descriptors.nvfp4_modelopt import ModelOptNVFP4

    w = np.random.default_rng(0).standard_normal((32, 64)).astype(np.float32)
    r = quantize_nvfp4(w, profile="modelopt", global_amax=4 * float(np.abs(w).max()))
    produced = {"weight": r.packed(), "weight_scale": r.scales.view(ml_dtypes.float8_e4m3fn),
                "weight_scale_2": r.global_scale}
    assert 0 < float(np.asarray(produced["weight_scale"], np.float64).max()) <= 384
    flipped = produced["weight"].copy()
    flipped[0, 0] ^= 1
    stored = {**produced, "weight": flipped}
    descriptor = ModelOptNVFP4()
    assert descriptor.unclaimed_tensors(stored, produced) == ""
    other_scales = r.scales.copy()
    other_scales[0, 0] -= 1
    stored["weight_scale"] = other_scales.view(ml_dtypes.float8_e4m3fn)
    assert "Four-Over-Six" in descriptor.unclaimed_tensors(stored, produced)


# -- the source folder is untrusted input too ------------------------------------------------


def _source_copy(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(SRC, src)
    return src


@pytest.mark.parametrize(("config", "kind"), [
    ([1, 2], "bf16"),  # config.json not an object: read as no config
    ({"text_config": [1]}, "bf16"),
    ({"text_config": {"quantization_config": {"quant_method": "compressed-tensors",
                                              "format": "pack-quantized"}}},
     "compressed-tensors-int4"),  # the well-formed text_config still counts
    ({"quantization_config": {"quant_method": ["fp8"]}}, "quant_method ['fp8']"),
    ({"quantization_config": {"quant_method": {"x": 1}}}, "quant_method {'x': 1}"),
    ({"quantization_config": {"quant_method": 8}}, "quant_method 8"),
])
def test_a_source_config_of_any_shape_never_crashes(tmp_path: Path, config: object,
                                                    kind: str) -> None:
    """A source ``config.json`` that is not an object, or whose ``text_config`` is not one, is
    read as no config (a BF16 source, as an unreadable one is); a ``quant_method`` that is not
    a string names no form this tool decompresses (REPRO_SOURCE_UNSUPPORTED). Before: an
    AttributeError or TypeError traceback."""
    src = _source_copy(tmp_path)
    (src / "config.json").write_text(json.dumps(config))
    assert reproduce.Source(src).kind == kind
    found = _run(PRODUCERS / "kimi-k2-mxfp4-quark", src)
    if kind == "bf16":
        assert [f.check.id for f in found] == ["REPRO_SUMMARY"]
        assert _block(found)["identical"] == 54
    elif kind.startswith("quant_method"):
        assert [(f.check.id, f.message) for f in found] == [
            ("REPRO_SOURCE_UNSUPPORTED", f"--source {src} is {kind}")]


def _moved_out(src: Path, name: str, outside: Path) -> None:
    """Move file ``name`` of ``src`` to ``outside`` and leave a symlink to it in its place."""
    outside.mkdir(exist_ok=True)
    shutil.move(src / name, outside / name)
    (src / name).symlink_to(outside / name)


def test_a_source_file_resolving_outside_the_source_is_not_read(tmp_path: Path) -> None:
    """A source shard or config that is a symlink out of ``--source`` is not read, as the
    checkpoint's are not (SYMLINK_ESCAPE): a shard's modules are REPRO_SOURCE_MISSING, a
    config or index stops reproduction (REPRO_SOURCE_UNSUPPORTED). ``--allow-symlink-root``
    lets both be read; a symlink that stays inside the folder always is. Before: read."""
    fixture = PRODUCERS / "kimi-k2-mxfp4-quark"
    src, outside = _source_copy(tmp_path), tmp_path / "outside"
    shard = "model-00002-of-00002.safetensors"
    _moved_out(src, shard, outside)
    found = _run(fixture, src)
    missing = [f for f in found if f.check.id == "REPRO_SOURCE_MISSING" and f.tensor]
    assert missing and all(f"{shard} resolves outside --source ({outside / shard})" in f.message
                           for f in missing)
    assert not any(f.check.id == "REPRO_MISMATCH" for f in found)
    block = _block(found)
    assert 0 < block["modules_checked"] < 27 and block["identical"] == block["tensors"]
    assert _block(_run(fixture, src, allow_symlink_root=(outside,)))["identical"] == 54
    # inside the folder: read
    (src / shard).unlink()
    (src / "elsewhere.safetensors").symlink_to(outside / shard)
    (src / shard).symlink_to(src / "elsewhere.safetensors")
    with pytest.raises(OSError, match="resolves outside"):
        reproduce.Source(src).weight("model.layers.2.mlp.experts.0.up_proj")
    (src / "elsewhere.safetensors").unlink()
    shutil.move(outside / shard, src / "elsewhere.safetensors")
    assert _block(_run(fixture, src))["identical"] == 54
    # every shard out: one REPRO_NOTHING_VERIFIED saying why (before: "holds none")
    _moved_out(src, "model-00001-of-00002.safetensors", outside)
    (src / shard).unlink()
    shutil.move(src / "elsewhere.safetensors", outside / shard)
    (src / shard).symlink_to(outside / shard)
    found = _run(fixture, src)
    assert [f.check.id for f in found] == ["REPRO_NOTHING_VERIFIED", "REPRO_SUMMARY"]
    assert "resolves outside --source" in found[0].message
    for name in ("config.json", "model.safetensors.index.json"):
        src = _source_copy(tmp_path / name)
        _moved_out(src, name, tmp_path / name / "outside")
        found = _run(fixture, src)
        assert [f.check.id for f in found] == ["REPRO_SOURCE_UNSUPPORTED"]
        assert f"{name} resolves outside --source" in found[0].message


def _source_edited(tmp_path: Path, edits: dict[str, Any], base: Path = SRC) -> Path:
    """A copy of ``base`` (``src-bf16``) with each tensor ``name`` of ``edits`` replaced by
    ``edit(array)`` (any shape or dtype; None drops it from the index)."""
    from mxformats.tensorfile import read_safetensors, write_safetensors

    src = tmp_path / "src"
    shutil.copytree(base, src)
    index_path = src / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    for name, edit in edits.items():
        if edit is None:
            del index["weight_map"][name]
            continue
        shard = src / index["weight_map"][name]
        tensors = dict(read_safetensors(shard))
        tensors[name] = edit(tensors[name])
        shard.unlink()
        write_safetensors(shard, tensors)
    index_path.write_text(json.dumps(index))
    return src


DOWN = "model.layers.1.mlp.experts.0.down_proj"


@pytest.mark.parametrize(("edit", "shape"), [
    (lambda a: np.ascontiguousarray(a.T), [96, 128]),  # transposed
    (lambda a: a[:-1].copy(), [127, 96]),  # one row short
    (lambda a: a[:, :-1].copy(), [128, 95]),  # one column short
    (lambda a: np.concatenate([a, a[:1]]), [129, 96]),  # one row long
])
def test_a_source_weight_of_another_shape_is_missing_not_a_mismatch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: Any, shape: list[int]) -> None:
    """A source weight whose shape is not the ``[out, in]`` the config implies (128 × 96 for a
    routed expert's down_proj here) is not what the producer read: REPRO_SOURCE_MISSING (a
    warning) names both shapes, and the module is not compared. Before: REPRO_MISMATCH errors
    ("expected uint8[127, 48], found uint8[128, 48]") on a checkpoint the producer wrote
    right. The same weight in its own shape reproduces (the fixture test), and a checkpoint
    whose module has another shape still mismatches (its bytes are compared with what the
    source's right shape gives: test_a_changed_byte_is_a_mismatch_naming_the_first_element).
    Its header says so: the weight is not read at all (it could be far larger than the
    module)."""
    src = _source_edited(tmp_path, {f"{DOWN}.weight": edit})
    read: list[str] = []
    real = reproduce.Source._read

    def spy(self: reproduce.Source, name: str) -> NDArray[Any]:
        read.append(name)
        return real(self, name)

    monkeypatch.setattr(reproduce.Source, "_read", spy)
    found = _run(PRODUCERS / "kimi-k2-mxfp4-quark", src)
    assert f"{DOWN}.weight" not in read and f"{DOWN.replace('down', 'up')}.weight" in read
    assert [(f.check.id, f.tensor, f.message) for f in found[:-1]] == [
        ("REPRO_SOURCE_MISSING", f"{DOWN}.weight", f"{DOWN}: the source weight is bfloat16"
         f"{shape}, the config implies [128, 96] for this module")]
    block = _block(found)
    assert block["modules_checked"] == block["modules_reproduced"] == 26
    assert block["tensors"] == block["identical"] == 52


#: a routed expert beyond the config's n_routed_experts once it says 3 (the fixtures hold 4)
EXTRA_DOWN = "model.layers.1.mlp.experts.3.down_proj"


@pytest.mark.parametrize("fixture", ["kimi-k2-mxfp4-quark", "kimi-k2-fp8-block-deepseek",
                                     "kimi-k2-int4-compressed-tensors"])
def test_a_module_the_config_does_not_describe_gets_the_source_shape_check(
        tmp_path: Path, fixture: str) -> None:
    """A module present in the checkpoint and the source but not in the config (an expert
    past ``n_routed_experts``) has its source weight's shape checked against the shape its
    own tensors are stored for: transposed, it is REPRO_SOURCE_MISSING naming the stored
    tensor, not a REPRO_MISMATCH on a checkpoint the producer wrote right. Before, only the
    modules the config describes were checked. The other side: the right shape reproduces."""
    folder = shutil.copytree(PRODUCERS / fixture, tmp_path / "ckpt")
    config = json.loads((folder / "config.json").read_text())
    config["n_routed_experts"] = 3
    (folder / "config.json").write_text(json.dumps(config))
    assert EXTRA_DOWN not in _load(folder).expected and EXTRA_DOWN in _load(folder).modules
    src = _source_edited(tmp_path, {f"{EXTRA_DOWN}.weight": lambda a: np.ascontiguousarray(
        a.T)})
    found = [f for f in _run(folder, src) if f.tensor is not None and EXTRA_DOWN in f.tensor]
    assert [f.check.id for f in found] == ["REPRO_SOURCE_MISSING"], [
        f.message for f in found]
    assert "bfloat16[96, 128]" in found[0].message
    assert "the config does not describe this module" in found[0].message
    block = _block(_run(folder, SRC))
    assert block["identical"] == block["tensors"] == FIXTURES[fixture][1]


GATE, UP = "model.layers.1.mlp.experts.0.gate_proj", "model.layers.1.mlp.experts.0.up_proj"


@pytest.mark.parametrize("fixture", ["kimi-k2-nvfp4-modelopt",
                                     "kimi-k2-nvfp4-compressed-tensors"])
@pytest.mark.parametrize("edit", [None, lambda a: a[:-1].copy()])
def test_a_fused_module_whose_sibling_the_source_lacks_is_missing_not_a_mismatch(
        tmp_path: Path, fixture: str, edit: Any) -> None:
    """NVFP4 producers give an expert's gate and up one global amax, the larger of the two
    (ModelOpt 0.47.0 ``modelopt/torch/export/layer_utils.py`` ``sync_moe_gate_up_amax``;
    llm-compressor ``update_fused_layer_weight_global_scales``). Layer 1 expert 0's gate has
    the larger amax: a source without it (or with it in another shape) cannot give its up's
    bytes, so up is REPRO_SOURCE_MISSING naming the sibling, as gate itself is. Before: up was
    quantized from its own amax alone, three false REPRO_MISMATCH errors (exit 1) on a
    checkpoint the producer wrote right."""
    src = _source_edited(tmp_path, {f"{GATE}.weight": edit})
    found = _run(PRODUCERS / fixture, src)
    assert [(f.check.id, str(f.tensor).rpartition(".")[0]) for f in found[:-1]] == [
        ("REPRO_SOURCE_MISSING", GATE), ("REPRO_SOURCE_MISSING", UP)]
    assert f"{UP}: its fused sibling {GATE}, whose weight the producer calibrates it " \
        "with: " in found[1].message
    block = _block(found)
    assert block["modules_checked"] == block["modules_reproduced"] == 22
    assert block["tensors"] == block["identical"] == 66


@pytest.fixture(params=["compiled", "numpy"])
def either_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
                ) -> Iterator[None]:
    """Once with the compiled passes (where numba imports; a module they answer for never
    reaches the numpy path) and once with the numpy path alone (``MXFORMATS_NUMBA=0``)."""
    monkeypatch.setenv(jit.NUMBA_VARIABLE, "1" if request.param == "compiled" else "0")
    jit._load.cache_clear()
    yield
    jit._load.cache_clear()  # decided again, with the environment restored


@pytest.mark.usefixtures("either_path")
def test_a_module_calibrated_alone_is_reproduced_and_a_sibling_matters_only_quantized(
        tmp_path: Path) -> None:
    """NVFP4 gate and up calibrated apart (llm-compressor ``model_free_ptq`` does not fuse
    routed experts; ModelOpt files with two ``weight_scale_2`` exist, vLLM warns of them) are
    the producer's bytes too: layer 1 expert 1's gate, written from its own amax while its up
    has the larger one, is reproduced (before: three REPRO_MISMATCH errors on every such
    expert of a ``model_free_ptq`` export). A changed byte in it: with up quantized and absent
    from the source, the pair's amax cannot be known (REPRO_SOURCE_MISSING); with up not
    quantized (BF16 here: its scales dropped from the loaded checkpoint) the producer
    calibrated gate alone (ModelOpt's ``sync_moe_gate_up_amax`` skips a quantizer without
    amax, ``modelopt/torch/export/layer_utils.py`` 0.47.0), so its bytes are a REPRO_MISMATCH
    error even though the source lacks up. With and without the compiled pass (which claims the
    module calibrated alone itself)."""
    from mxformats.tensorfile import read_checkpoint_tensor

    fixture = "kimi-k2-nvfp4-modelopt"
    gate, up = GATE.replace("experts.0", "experts.1"), UP.replace("experts.0", "experts.1")
    own = reproduce.Source(SRC).weight(gate)
    assert own is not None
    amax = [float(np.abs(read_checkpoint_tensor(SRC, f"{m}.weight").astype(np.float32)).max())
            for m in (gate, up)]
    assert amax[0] < amax[1]
    ckpt = _load(PRODUCERS / fixture)
    assert ckpt.descriptor is not None
    alone = ckpt.descriptor.produce(own)
    folder = tmp_path / fixture
    shutil.copytree(PRODUCERS / fixture, folder)
    ckpt = _load(folder)
    assert ckpt.read(f"{gate}.weight_scale_2").tobytes() != alone["weight_scale_2"].tobytes()
    for param, array in alone.items():
        _planted_in_place(folder, ckpt, f"{gate}.{param}", lambda a, new=array: new)
    claim = reproduce.prepare(ckpt, Options(source=SRC))
    assert isinstance(claim, reproduce.Claim)
    out = reproduce.module_reproduction(ckpt, claim, ckpt.modules[gate])
    assert out.result is not None and all(out.result.identical.values()) and not out.findings
    _planted_in_place(folder, ckpt, f"{gate}.weight", lambda a: a ^ (np.arange(a.size).reshape(
        a.shape) == 7))
    without_up = reproduce.prepare(ckpt, Options(source=_source_edited(tmp_path, {
        f"{up}.weight": None})))
    assert isinstance(without_up, reproduce.Claim)
    out = reproduce.module_reproduction(ckpt, without_up, ckpt.modules[gate])
    assert out.result is None and out.missing is not None
    assert f"its fused sibling {up}" in out.missing.message
    for param in ("weight_scale", "weight_scale_2", "input_scale"):
        del ckpt.modules[up].tensors[param]
    out = reproduce.module_reproduction(ckpt, without_up, ckpt.modules[gate])
    assert out.missing is None and out.result is not None
    assert [(f.check.id, f.tensor) for f in out.findings] == [("REPRO_MISMATCH", f"{gate}.weight")]


def _with_nonfinite(values: list[float]) -> Any:
    """An edit setting the first elements of a weight's first row to ``values``."""
    def edit(a: NDArray[Any]) -> NDArray[Any]:
        a = a.copy()
        a[0, :len(values)] = values
        return a
    return edit


@pytest.mark.parametrize("values", [[math.nan], [math.inf], [-math.inf], [math.inf, -math.inf]])
def test_an_unclaimed_module_with_no_error_statistic_is_not_verified(
        tmp_path: Path, values: list[float]) -> None:
    """Where the bytes are not claimed (Quark ``scale_calculation_mode: floor``), a module is
    judged by its error and correlation against the source; a NaN or Inf in its source
    weight leaves neither (NaN), and the module was counted as checked, judged by nothing.
    Now it is REPRO_SOURCE_MISSING ("not judged"), and not in the block; an Inf no longer
    warns from numpy (an INTERNAL_ERROR under ``-W error``). The other side: its scrambled
    codes against a finite source are REPRO_UNCORRELATED."""
    folder = _planted(tmp_path, "kimi-k2-mxfp4-quark", f"{DOWN}.weight",
                      lambda a: np.random.default_rng(0).permutation(a.reshape(-1)))

    def run(checkpoint: Path, source: Path) -> list[Finding]:
        ckpt = _load(checkpoint)
        assert ckpt.quant_config is not None
        ckpt.quant_config["global_quant_config"]["weight"]["scale_calculation_mode"] = "floor"
        return list(reproduce.run(ckpt, Options(source=source)))

    src = _source_edited(tmp_path / "nonfinite", {f"{DOWN}.weight": _with_nonfinite(values)})
    found = run(folder, src)
    assert [(f.check.id, f.tensor, f.effective_severity) for f in found] == [
        ("REPRO_SOURCE_MISSING", f"{DOWN}.weight", Severity.WARNING),
        ("REPRO_MISMATCH", None, Severity.WARNING), ("REPRO_SUMMARY", None, Severity.INFO)]
    assert "not judged: its bytes are not claimed (scale_calculation_mode 'floor'" in \
        found[0].message and "the source weight holds NaN or Inf" in found[0].message
    assert DOWN not in [m["module"] for m in _block(found)["per_module"]]
    assert ("REPRO_UNCORRELATED", Severity.ERROR) in [
        (f.check.id, f.effective_severity) for f in run(folder, SRC)]


def _down_reproduced_from(source: Path) -> reproduce.ModuleReproduction:
    """The reproduction of the MXFP4 fixture's :data:`DOWN` from ``source``."""
    ckpt = _load(PRODUCERS / "kimi-k2-mxfp4-quark")
    claim = reproduce.prepare(ckpt, Options(source=source))
    assert isinstance(claim, reproduce.Claim)
    return reproduce.module_reproduction(ckpt, claim, ckpt.modules[DOWN])


@pytest.mark.parametrize(("param", "value", "why"), [
    ("weight_shape", np.array([], np.int64), "weight_shape int64[0] is not an integer shape"),
    ("weight_shape", np.array([128.0, math.nan], np.float32),
     "weight_shape float32[2] is not an integer shape"),
    ("weight_shape", np.array([128.0, math.inf], np.float32),
     "weight_shape float32[2] is not an integer shape"),
    ("weight_shape", np.array([128, 1 << 62], np.int64), "does not fit 12 words of 8 nibbles"),
    ("weight_shape", np.array([128, 96], np.int32), None),  # I32, as the layout accepts: read
    ("weight_scale", np.ones((128, 3), np.int16), "scales: dtype int16 is not one of"),
    ("weight_scale", np.ones((128, 3), np.float32), None),  # a float scale: read
    ("weight_packed", np.ones((128, 12), np.uint8), "unpack_int4 takes int32 words"),
])
def test_a_compressed_tensors_source_module_of_any_content(
        tmp_path: Path, param: str, value: NDArray[Any], why: str | None) -> None:
    """A compressed-tensors INT4 source module is untrusted: a ``weight_shape`` that is empty
    or not integer (compressed-tensors writes ``torch.tensor(weight.shape)``, int64) or that
    the packed words cannot hold, a scale or packed tensor of a dtype the decompression does
    not take makes the module REPRO_SOURCE_MISSING, never an INTERNAL_ERROR (before:
    IndexError, ValueError of NaN, OverflowError of Inf, TypeError)."""
    out = _down_reproduced_from(_source_edited(tmp_path, {f"{DOWN}.{param}": lambda a: value},
                                               PRODUCERS / "kimi-k2-int4-compressed-tensors"))
    if why is None:
        assert out.missing is None and out.result is not None
        return
    assert out.findings == [] and out.result is None and out.missing is not None
    assert out.missing.check.id == "REPRO_SOURCE_MISSING" and why in out.missing.message


def test_a_checkpoint_is_not_its_own_source(tmp_path: Path) -> None:
    """An FP8-block checkpoint passed as its own ``--source`` is decompressed and re-quantized
    to its very bytes (the block amax maps to 448 again): "96 of 96 identical", exit 0, with
    nothing verified. It is REPRO_NOTHING_VERIFIED, an error, also through a symlink to the
    folder; its BF16 source still reproduces it."""
    fixture = PRODUCERS / "kimi-k2-fp8-block-deepseek"
    link = tmp_path / "link"
    link.symlink_to(fixture)
    for source in (fixture, link):
        found = _run(fixture, source)
        assert [(f.check.id, f.effective_severity) for f in found] == [
            ("REPRO_NOTHING_VERIFIED", Severity.ERROR)]
        assert "is the checkpoint itself" in found[0].message
    assert _block(_run(fixture, SRC))["identical"] == 96


@pytest.mark.parametrize("fixture", ["kimi-k2-fp8-block-deepseek",
                                     "kimi-k2-int4-compressed-tensors"])
def test_a_quantized_source_of_the_checkpoints_own_format_is_a_usage_error(
        fixture: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A copy of a quantized checkpoint in another folder, given as its ``--source``,
    re-quantizes to its own bytes ("N of N identical") and verifies nothing: exit 2 with
    the reason, wherever the copy lives (the folder itself too), before any task runs. The
    other side: the BF16 source, and a quantized source of another format (the FP8 release
    an INT4 export may be made from), still run."""
    from mxformats.cli import main
    from mxformats.validate.runner import exit_code, validate

    folder = PRODUCERS / fixture
    copy = shutil.copytree(folder, tmp_path / "copy")
    for source in (copy, folder):
        report = validate(folder, Options(source=source, workers=1))
        assert exit_code(report) == 2 and report.fatal is not None
        assert "verifies nothing" in report.fatal and not report.findings
        capsys.readouterr()
        assert main(["validate", str(folder), "--source", str(source), "--quiet"]) == 2
        assert "verifies nothing" in capsys.readouterr().err
    assert exit_code(validate(folder, Options(source=SRC, workers=1))) == 0
    other = PRODUCERS / ("kimi-k2-int4-compressed-tensors" if "fp8" in fixture
                         else "kimi-k2-fp8-block-deepseek")
    assert validate(folder, Options(source=other, workers=1)).fatal is None


def test_a_hugging_face_cache_source_is_read_through_its_blob_links(tmp_path: Path) -> None:
    """A source in the Hugging Face cache (``models--ORG--NAME/snapshots/REV/``, every file a
    symlink to ``../../blobs/``) resolves inside its cache repo: read, as a checkpoint there
    is. The other side of test_a_source_file_resolving_outside_the_source_is_not_read."""
    repo = tmp_path / "models--org--src"
    snapshot, blobs = repo / "snapshots" / "abc123", repo / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for i, file in enumerate(sorted(SRC.iterdir())):
        shutil.copy(file, blobs / f"blob{i}")
        (snapshot / file.name).symlink_to(Path("..", "..", "blobs", f"blob{i}"))
    block = _block(_run(PRODUCERS / "kimi-k2-mxfp4-quark", snapshot))
    assert block["identical"] == block["tensors"] == 54


@pytest.mark.parametrize("fixture", ["kimi-k2-nvfp4-modelopt",
                                     "kimi-k2-nvfp4-compressed-tensors"])
def test_nvfp4_mla_pair_shares_one_amax(fixture: str) -> None:
    """``q_a_proj`` and ``kv_a_proj_with_mqa`` read one input and vLLM fuses them
    (``fused_qkv_a_proj``): ModelOpt fuses every group of linears sharing an input and
    llm-compressor fuses the MLA pair (``get_fused_attention_linears``), so each is written
    from the larger amax of the two, as gate and up are. Before, each was produced from its
    own amax: REPRO_MISMATCH errors on the one with the smaller amax, whose bytes differ
    from its own amax's (checked here; a file calibrating them apart is still reproduced:
    test_a_module_calibrated_alone_is_reproduced_and_a_sibling_matters_only_quantized)."""
    from mxformats.schemes.nvfp4 import quantize_nvfp4

    ckpt = _load(PRODUCERS / fixture)
    desc = ckpt.descriptor
    assert desc is not None and desc.profile is not None
    source = reproduce.Source(SRC)
    attn = "model.layers.1.self_attn"
    q, kv = source.weight(f"{attn}.q_a_proj"), source.weight(f"{attn}.kv_a_proj_with_mqa")
    assert q is not None and kv is not None
    amax = [float(np.abs(np.asarray(a, np.float32)).max()) for a in (q, kv)]
    assert amax[0] != amax[1]
    siblings = {f"{attn}.q_a_proj": q, f"{attn}.kv_a_proj_with_mqa": kv}
    for name, w in siblings.items():
        produced = desc.produce_module(name, w, siblings.get)
        shared = quantize_nvfp4(w, profile=desc.profile, global_amax=max(amax))
        assert produced[desc.global_name].tobytes() == shared.global_scale.tobytes()
        assert produced[desc.weight_param].tobytes() == shared.packed().tobytes()
    smaller = [f"{attn}.q_a_proj", f"{attn}.kv_a_proj_with_mqa"][int(amax[1] < amax[0])]
    alone = desc.produce_module(smaller, siblings[smaller], lambda name: None)
    assert alone[desc.global_name].tobytes() != desc.produce_module(
        smaller, siblings[smaller], siblings.get)[desc.global_name].tobytes()


def test_a_block_with_nonfinite_figures_is_strict_json(tmp_path: Path) -> None:
    """A module the profile reproduces from a source holding a NaN has no error statistic
    (NaN): the block writes it as "NaN" (protobuf's JSON mapping), not as bare NaN, which is
    not JSON. Before: the report could not be read by JSON.parse, and jq read it as null."""
    src = _source_edited(tmp_path / "nan", {f"{DOWN}.weight": _with_nonfinite([math.nan])})
    w = reproduce.Source(src).weight(DOWN)
    assert w is not None
    produced = quark_mxfp4.DESCRIPTOR.produce(w)
    folder = _planted(tmp_path, "kimi-k2-mxfp4-quark", f"{DOWN}.weight",
                      lambda a: produced["weight"])
    _planted_in_place(folder, _load(folder), f"{DOWN}.weight_scale",
                      lambda a: produced["weight_scale"])
    found = _run(folder, src)
    assert [f.check.id for f in found] == ["REPRO_SUMMARY"]  # identical: reproduced
    block = _block(found)
    row = next(m for m in block["per_module"] if m["module"] == DOWN)
    assert row == {"module": DOWN, "identical": True, "rel_error": "NaN", "sqnr_db": "NaN"}
    json.dumps(block, allow_nan=False)
    assert [reproduce.json_float(x) for x in (math.inf, -math.inf, 1.5)] == [
        "Infinity", "-Infinity", 1.5]


def test_a_source_shard_header_is_parsed_once_per_run_of_reads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a source tensor parsed its shard's whole header each time (once per module
    and per fused sibling: 11 ms for a 3,000-tensor header, seconds for the 100 MB a header
    may hold, so a hostile source could stall a run for hours). A shard's header is parsed
    again only after another shard's was read."""
    from mxformats.validate.readers import LocalReader

    parsed: list[str] = []
    real = LocalReader.header_table

    def spy(self: LocalReader, name: str) -> Any:
        parsed.append(name)
        return real(self, name)

    monkeypatch.setattr(LocalReader, "header_table", spy)
    ckpt = _load(PRODUCERS / "kimi-k2-nvfp4-modelopt")
    parsed.clear()
    assert _block(list(reproduce.run(ckpt, Options(source=SRC))))["identical"] == 72
    assert parsed and all(a != b for a, b in itertools.pairwise(parsed))
    assert len(parsed) < 24  # 24 modules, each reading its sibling too


def test_a_compressed_tensors_source_module_of_another_shape_is_missing(
        tmp_path: Path) -> None:
    """A compressed-tensors INT4 source module has no ``weight`` whose header shape could be
    checked: the shape it decompresses to is (the routed expert's down_proj, written as the
    INT4 of its transpose, decompresses to 96 × 128, not 128 × 96)."""
    from mxformats.validate.descriptors import ct_int4

    w = reproduce.Source(SRC).weight(DOWN)
    assert w is not None
    transposed = ct_int4.DESCRIPTOR.produce(np.ascontiguousarray(w.T))
    out = _down_reproduced_from(_source_edited(
        tmp_path, {f"{DOWN}.{param}": lambda a, new=array: new
                   for param, array in transposed.items()},
        PRODUCERS / "kimi-k2-int4-compressed-tensors"))
    assert out.result is None and out.missing is not None
    assert out.missing.message == (f"{DOWN}: the source weight is bfloat16[96, 128], the "
                                   "config implies [128, 96] for this module")
