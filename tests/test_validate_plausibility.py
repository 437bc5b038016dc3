"""DECODED_MAGNITUDE (issue 26, item 3): each format's block bound from its scales, the bounds
of the verdict from both sides, and the magnitudes through the task records (``--resume``).
The verdicts on whole checkpoints are corpus cases (tests/test_validate_corpus.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from mxformats.validate import numbers, plausibility, resume, tasks
from mxformats.validate.descriptors import (
    ct_int4,
    fp8_block_ct,
    fp8_block_deepseek,
    nvfp4_ct,
    nvfp4_modelopt,
    quark_mxfp4,
    quark_w4a8,
)
from mxformats.validate.files import load
from mxformats.validate.findings import MAX_LISTED, Level
from mxformats.validate.model import Options
from mxformats.validate.plausibility import (
    MAGNITUDE_MAX,
    MAGNITUDE_MIN,
    SIBLING_RATIO,
    Magnitude,
    magnitude_from_json,
    magnitude_to_json,
    measure,
)

PRODUCERS = Path(__file__).resolve().parent / "data" / "producers"
FIXTURES = sorted(p.name for p in PRODUCERS.iterdir()
                  if p.is_dir() and p.name.startswith("kimi-k2-"))


def _e4m3(values: list[float]) -> Any:
    return np.array(values, np.float32).astype(ml_dtypes.float8_e4m3fn)


#: Per descriptor: its scale arrays and the largest |value| they let a block decode to
#: (block scale × the element maximum, with the per-tensor scale as the loader applies it).
BOUNDS = [
    (fp8_block_deepseek.DESCRIPTOR, {"weight_scale_inv": np.array([[1e-3, 2e-3]], np.float32)},
     448 * float(np.float32(2e-3))),
    (fp8_block_ct.DESCRIPTOR, {"weight_scale": np.array([[0.5], [0.25]], np.float32)}, 224.0),
    (nvfp4_modelopt.DESCRIPTOR, {"weight_scale": _e4m3([[448.0, 2.0]]),
                                 "weight_scale_2": np.array(1e-4, np.float32)},
     6 * 448 * float(np.float32(1e-4))),
    (nvfp4_ct.DESCRIPTOR, {"weight_scale": _e4m3([[448.0, 2.0]]),
                           "weight_global_scale": np.array([2688.0], np.float32)}, 1.0),
    (quark_mxfp4.DESCRIPTOR, {"weight_scale": np.array([[127, 120]], np.uint8)}, 6.0),
    (quark_w4a8.DESCRIPTOR, {"weight_scale": np.array(0.5, np.float32),
                             "weight_scale_2": np.array([2.0, 4.0], np.float32)}, 16.0),
    (ct_int4.DESCRIPTOR, {"weight_scale": np.array([[0.25, 0.125]], ml_dtypes.bfloat16)}, 2.0),
]


@pytest.mark.parametrize(("desc", "arrays", "amax"), BOUNDS,
                         ids=[d.format.value for d, _, _ in BOUNDS])
def test_block_bound_of_every_format(desc: Any, arrays: dict[str, Any], amax: float) -> None:
    m = measure(desc, arrays)
    assert m is not None and m.amax == pytest.approx(amax, rel=1e-12)
    assert 0 < m.rms <= m.amax and m.blocks == 2


def test_no_bound_without_finite_scales() -> None:
    mx = quark_mxfp4.DESCRIPTOR
    assert measure(mx, {"weight_scale": np.array([[0xFF]], np.uint8)}) is None  # E8M0 NaN
    nan = {"weight_scale_inv": np.array([[math.nan, 1e-3]], np.float32)}
    m = measure(fp8_block_deepseek.DESCRIPTOR, nan)
    assert m is not None and m.blocks == 1  # the NaN block is SCALE_NONFINITE's
    empty = {"weight_scale": _e4m3([[1.0]]), "weight_scale_2": np.zeros(0, np.float32)}
    assert measure(nvfp4_modelopt.DESCRIPTOR, empty) is None


def _judge(measured: dict[str, Magnitude]) -> set[str]:
    ckpt = SimpleNamespace(tensors={})
    found, flagged = plausibility.findings(ckpt, measured, {})  # type: ignore[arg-type]
    assert {f.message.partition(":")[0] for f in found} == flagged
    return flagged


@pytest.mark.parametrize(("amax", "flagged"), [
    (MAGNITUDE_MAX, False), (math.nextafter(MAGNITUDE_MAX, math.inf), True),
    (MAGNITUDE_MIN, False), (math.nextafter(MAGNITUDE_MIN, 0), True), (0.0, False)])
def test_range_from_both_sides(amax: float, flagged: bool) -> None:
    assert _judge({"model.layers.0.mlp.down_proj": Magnitude(amax, amax, 1)}) == (
        {"model.layers.0.mlp.down_proj"} if flagged else set())


def _layer(first: float, others: int = 3) -> dict[str, Magnitude]:
    names = [f"model.layers.1.mlp.experts.{e}.up_proj" for e in range(others + 1)]
    rms = [first] + [1.0] * others
    return {n: Magnitude(r, r, 8) for n, r in zip(names, rms, strict=True)}


@pytest.mark.parametrize(("ratio", "others", "flagged"), [
    (SIBLING_RATIO, 3, True), (math.nextafter(SIBLING_RATIO, 0), 3, False),
    (SIBLING_RATIO, 2, False), (1 / (2 * SIBLING_RATIO), 3, False)])
def test_siblings_from_both_sides(ratio: float, others: int, flagged: bool) -> None:
    got = _judge(_layer(ratio, others))
    assert got == ({"model.layers.1.mlp.experts.0.up_proj"} if flagged else set())


def test_one_finding_per_module_then_one_summary() -> None:
    many = {f"model.layers.{i:02d}.mlp.down_proj": Magnitude(2e3, 2e3, 1) for i in range(12)}
    ckpt = SimpleNamespace(tensors={})
    found, flagged = plausibility.findings(ckpt, many, {})  # type: ignore[arg-type]
    assert len(flagged) == 12 and len(found) == MAX_LISTED + 1
    assert found[-1].message.startswith("2 more like the above")


@pytest.mark.parametrize("data", [[1.0, 2.0], [1.0, 2.0, 3.5], [math.nan, 1.0, 1],
                                  [-1.0, 1.0, 1], [True, 1.0, 1], "x", {"amax": 1}])
def test_a_malformed_record_is_refused(data: object) -> None:
    with pytest.raises(ValueError):
        magnitude_from_json(data)


def test_record_round_trip() -> None:
    m = Magnitude(0.5, 0.25, 3)
    assert magnitude_from_json(json.loads(json.dumps(magnitude_to_json(m)))) == m
    assert magnitude_from_json(magnitude_to_json(None)) is None


@pytest.mark.parametrize("fixture", FIXTURES)
def test_task_records_keep_every_magnitude(fixture: str) -> None:
    """A resumed run judges from the records: each module's magnitude survives them."""
    opts = Options(level=Level.SCALES)
    folder = str((PRODUCERS / fixture).resolve())
    ckpt = load(folder, opts).ckpt
    assert ckpt is not None
    with tasks.remembered(folder, opts, ckpt):
        outcomes = [o for t in tasks.plan(folder, ckpt, opts)
                    for o in resume.result_from_json(json.loads(json.dumps(
                        resume.result_to_json(tasks.run_task(t)))), t.index).outcomes["numbers"]]
    assert len(outcomes) == len(numbers.quantized_modules(ckpt))
    assert all(o.magnitude is not None and 0.05 < o.magnitude.amax < 0.5 for o in outcomes)


def test_rms_counts_every_block() -> None:
    """The RMS weighs each block once: 1-byte scales counted by bit pattern keep the counts."""
    scales = _e4m3([[448.0, 2.0, 2.0, 2.0]])
    m = measure(nvfp4_modelopt.DESCRIPTOR, {"weight_scale": scales,
                                            "weight_scale_2": np.array(0.5, np.float32)})
    assert m is not None and m.blocks == 4
    assert m.rms == pytest.approx(3 * math.sqrt((448.0**2 + 3 * 2.0**2) / 4), rel=1e-12)
