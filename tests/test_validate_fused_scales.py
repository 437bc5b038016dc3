"""NVFP4 fused modules decoded with one global scale (issue 26, item 1): the tolerance is
vLLM's own ``torch.allclose``, the module decoded wrong and its ratio follow the loader
(:mod:`mxformats.validate.descriptors.nvfp4_fused`), and ``--source`` reports that module's
error as vLLM decodes it beside the file's own."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from validate_corpus import calibrated_apart, source_weight

from mxformats.validate.descriptors import by_format
from mxformats.validate.descriptors.nvfp4_fused import fused_decode, vllm_allclose
from mxformats.validate.findings import Level
from mxformats.validate.model import Options
from mxformats.validate.runner import validate

PRODUCERS = Path(__file__).resolve().parent / "data" / "producers"
EXPERT = "model.layers.2.mlp.experts.1"


def _edge(a: np.float32, direction: float) -> np.float32:
    """The last float32 from ``a`` towards ``direction`` that :func:`vllm_allclose` accepts."""
    b = a
    while vllm_allclose(a, np.nextafter(b, np.float32(direction))):
        b = np.nextafter(b, np.float32(direction))
    return b


@pytest.mark.parametrize("value", [3.251575253671035e-05, 35840.0, 1.0, 2.0**-20],
                         ids=["modelopt-scale-2", "ct-global", "one", "tiny"])
def test_the_tolerance_is_torch_allclose_on_both_sides(value: float) -> None:
    """vLLM's w13 test is ``torch.allclose(gate, up)`` with the defaults (rtol 1e-05, atol
    1e-08): :func:`vllm_allclose` agrees with torch at the last float32 it accepts and the
    first it rejects, above and below, at ModelOpt's and compressed-tensors' magnitudes
    (where atol, resp. rtol, decides)."""
    torch = pytest.importorskip("torch")
    a = np.float32(value)
    for direction in (math.inf, -math.inf):
        inside = _edge(a, direction)
        outside = np.nextafter(inside, np.float32(direction))
        assert inside != a
        for b, close in ((inside, True), (outside, False)):
            assert vllm_allclose(a, b) is close
            assert bool(torch.allclose(torch.tensor([a]), torch.tensor([b]))) is close


# (pair, scales, global scale name, divisor) -> (module decoded wrong, ratio)
_UP, _GATE = f"{EXPERT}.up_proj", f"{EXPERT}.gate_proj"
_QA, _KVA = "model.layers.0.self_attn.q_a_proj", "model.layers.0.self_attn.kv_a_proj_with_mqa"
_DECODES = [
    # experts: w13 keeps gate's (index 0) whichever is larger
    ((_GATE, _UP), (1.0, 4.0), "weight_scale_2", False, _UP, 0.25),
    ((_GATE, _UP), (4.0, 1.0), "weight_scale_2", False, _UP, 4.0),
    ((_GATE, _UP), (1.0, 4.0), "weight_global_scale", True, _UP, 4.0),
    ((_GATE, _UP), (4.0, 1.0), "weight_global_scale", True, _UP, 0.25),
    # linears: the largest stored value is kept, the other module decoded with it
    ((_QA, _KVA), (1.0, 4.0), "weight_scale_2", False, _QA, 4.0),
    ((_QA, _KVA), (4.0, 1.0), "weight_scale_2", False, _KVA, 4.0),
    ((_QA, _KVA), (1.0, 4.0), "weight_global_scale", True, _QA, 0.25),
    ((_QA, _KVA), (4.0, 1.0), "weight_global_scale", True, _KVA, 0.25),
]


@pytest.mark.parametrize(("pair", "scales", "name", "divisor", "wrong", "ratio"), _DECODES)
def test_the_module_decoded_wrong_and_its_ratio(pair: tuple[str, str],
                                                scales: tuple[float, float], name: str,
                                                divisor: bool, wrong: str, ratio: float) -> None:
    """Which module vLLM decodes with the other's global scale, and by how much each of its
    weights is off: an expert's up (w13_…[:, 0]), a linear's smaller-stored module
    (``.max()``); a multiplier (ModelOpt) gives kept/own, a divisor (compressed-tensors)
    own/kept. The loader line is named."""
    decode = fused_decode(*pair, scales, name, divisor)
    assert decode is not None
    assert (decode.wrong, decode.ratio) == (wrong, ratio)
    assert decode.partner == (set(pair) - {wrong}).pop()
    kept = "[:, 0]" if ".experts." in wrong else ".max()"
    source = "compressed_tensors" if divisor else "modelopt.py"
    assert f"{name}{kept}" in decode.loader and source in decode.loader


def _apart(tmp_path: Path, fixture: str, fmt: str) -> Path:
    folder = tmp_path / fixture
    shutil.copytree(PRODUCERS / fixture, folder)
    calibrated_apart(fmt, EXPERT)(folder)
    return folder


@pytest.mark.parametrize(("fixture", "fmt"), [
    ("kimi-k2-nvfp4-modelopt", "modelopt-nvfp4"),
    ("kimi-k2-nvfp4-compressed-tensors", "compressed-tensors-nvfp4")])
def test_source_reports_the_error_vllm_decodes(tmp_path: Path, fixture: str, fmt: str) -> None:
    """An expert calibrated apart (llm-compressor ``model_free_ptq``): its bytes are the
    producer's, but vLLM decodes up with gate's global scale. ``--source`` gives up's error
    as vLLM decodes it (the file's own decode times the ratio, measured here from the
    arrays) beside the file's own, in the block and the summary line; gate, decoded with its
    own scale, and every module of the untouched fixture have none."""
    folder = _apart(tmp_path, fixture, fmt)
    report = validate(folder, Options(level=Level.SCALES, source=PRODUCERS / "src-bf16"))
    assert report.reproduction is not None
    seen = [m for m in report.reproduction["per_module"] if "engine_decode" in m]
    assert [m["module"] for m in seen] == [_UP]
    [gate_up] = [f for f in report.findings if f.check.id == "NVFP4_GATE_UP_SCALE"]
    ratio = gate_up.extra["ratio"]
    assert isinstance(ratio, float) and abs(ratio - 1) > 1e-3
    desc = by_format(fmt)
    w = source_weight(_UP).astype(np.float64)
    own = desc.produce(source_weight(_UP))
    d = np.asarray(desc.dequantize(own, w.shape[-1]), np.float64)
    expected = float(np.linalg.norm(d * ratio - w) / np.linalg.norm(w))
    assert seen[0]["engine_rel_error"] == pytest.approx(expected, rel=1e-6)
    assert seen[0]["engine_rel_error"] > seen[0]["rel_error"]
    summary = next(f for f in report.findings if f.check.id == "REPRO_SUMMARY")
    assert f"as vLLM decodes them, 1 module(s) with another module's scale (e.g. {_UP}" \
        in summary.message
    clean = validate(PRODUCERS / fixture, Options(level=Level.SCALES,
                                                  source=PRODUCERS / "src-bf16"))
    assert clean.reproduction is not None
    assert not any("engine_decode" in m for m in clean.reproduction["per_module"])
    assert all("as vLLM decodes" not in f.message for f in clean.findings)


def test_the_summary_gives_the_spread_of_ratios() -> None:
    """Past :data:`MAX_LISTED` pairs, the one summary also says of how many fused pairs how
    many are decoded with the partner's scale and the median and largest |ratio - 1|, as the
    public measurements of such exports do."""
    from types import SimpleNamespace

    from mxformats.validate.model import TensorRef

    desc = by_format("modelopt-nvfp4")
    arrays: dict[str, Any] = {}
    tensors = {}
    for e in range(13):
        for proj, value in (("gate_proj", 1.0), ("up_proj", 1.0 + e / 10)):
            module = f"model.layers.1.mlp.experts.{e}.{proj}"
            arrays[module] = {"weight_scale_2": np.array(value, np.float32)}
            name = f"{module}.weight_scale_2"
            tensors[name] = TensorRef(name, "m.safetensors", "F32", (), 0, 4)
    ckpt: Any = SimpleNamespace(tensors=tensors, quant_config={})
    found = list(desc.layer_findings(ckpt, arrays))
    assert [f.message for f in found if f.tensor is None] == [
        "2 more like the above, not listed (of 13 fused pair(s), 12 decoded with the partner's "
        "global scale: |ratio - 1| median 39.34%, max 54.55%)"]


@pytest.mark.parametrize("error", [0.1588888958100919, math.inf])
def test_the_engine_error_survives_resume(error: float) -> None:
    """``--resume`` reads a task's results back from JSON: a module's error as vLLM decodes
    it comes back with it (before: dropped, so a resumed report lost it)."""
    import json

    from mxformats.validate import reproduce, resume, tasks

    result = reproduce.ModuleResult(_UP, {"weight": True}, {}, 0.0963, 20.3, 0.99,
                                    "decoded with gate_proj's weight_scale_2 (x0.8)",
                                    error, -math.inf if math.isinf(error) else 15.97)
    record = tasks.TaskResult(0, {"numbers": [], "reproduction": [
        reproduce.ModuleReproduction(_UP, result=result)]})
    text = json.dumps(resume.result_to_json(record), allow_nan=False)
    back = resume.result_from_json(json.loads(text), 0).outcomes["reproduction"][0].result
    assert back == result
