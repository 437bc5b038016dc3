"""``mxformats compare A B [--source SRC]`` on the producer fixtures: the per-module figures
against a direct numpy computation from an independent decode (the reference
:func:`mxformats.dequantize_nvfp4`, not the validator's fast path), bit for bit; mismatched
architectures exit 2; text, JSON and ``--html``."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import requires
from producer_fixtures import PRODUCERS, checkpoint
from test_html_report import Page, links_stay_home

from mxformats import dequantize_nvfp4
from mxformats.cli import main
from mxformats.validate.grid import position

MODELOPT, CT = "kimi-k2-nvfp4-modelopt", "kimi-k2-nvfp4-compressed-tensors"
SOURCE = PRODUCERS / "src-bf16"
#: Each side's tensors: (codes, block scales, global scale) and the consumer that reads them.
LAYOUT = {MODELOPT: (("weight", "weight_scale", "weight_scale_2"), "vllm-modelopt"),
          CT: (("weight_packed", "weight_scale", "weight_global_scale"),
               "vllm-compressed-tensors")}


def _decode(name: str, module: str) -> np.ndarray:
    t = checkpoint(name)
    (codes, scales, glob), profile = LAYOUT[name]
    return dequantize_nvfp4(np.asarray(t[f"{module}.{codes}"]).view(np.uint8),
                            np.asarray(t[f"{module}.{scales}"]).view(np.uint8),
                            t[f"{module}.{glob}"], packed=True, profile=profile)


def _lane_sum(values: np.ndarray) -> float:
    """The sum of float64 ``values`` as :mod:`mxformats.fast.moments` defines it, computed
    another way: pieces of 64 Ki, 16 lanes each summed in order by ``np.cumsum``, the piece
    sums per lane in order, then the lanes in order."""
    lanes = [0.0] * 16
    for lo in range(0, values.size, 1 << 16):
        piece = values[lo:lo + (1 << 16)]
        rows = np.zeros(-(-piece.size // 16) * 16)
        rows[:piece.size] = piece
        ends = np.cumsum(rows.reshape(-1, 16), axis=0)[-1]
        lanes = [lane + (0.0 + float(end)) for lane, end in zip(lanes, ends, strict=True)]
    total = 0.0
    for lane in lanes:
        total += lane
    return total


def _figures(d: np.ndarray, x: np.ndarray) -> tuple[float, float]:
    """‖d − x‖ / ‖x‖ and 20·log10(‖x‖ / ‖d − x‖), in float64 sums in 16 lanes."""
    d64, x64 = d.astype(np.float64).reshape(-1), x.astype(np.float64).reshape(-1)
    err = math.sqrt(_lane_sum((d64 - x64) * (d64 - x64)))
    ref = math.sqrt(_lane_sum(x64 * x64))
    return err / ref, 20 * math.log10(ref / err)


def _compare(tmp_path: Path, *argv: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "compare.json"
    code = main(["compare", *argv, "--format", "json", "-o", str(out)])
    return code, json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}


def test_figures_match_numpy_bit_for_bit(tmp_path: Path) -> None:
    code, data = _compare(tmp_path, str(PRODUCERS / MODELOPT), str(PRODUCERS / CT),
                          "--source", str(SOURCE))
    assert code == 0 and data["complete"]
    src = checkpoint("src-bf16")
    expert_modules = sorted(n.removesuffix(".weight_scale_2") for n in checkpoint(MODELOPT)
                            if n.endswith(".weight_scale_2"))
    assert [m["module"] for m in data["modules"]] == expert_modules
    closer = {"A": 0, "B": 0, "tie": 0}
    for m in data["modules"]:
        a, b = _decode(MODELOPT, m["module"]), _decode(CT, m["module"])
        x = src[f"{m['module']}.weight"]
        want = {}
        want["distance"], want["distance_sqnr_db"] = _figures(a, b)
        want["a_error"], want["a_sqnr_db"] = _figures(a, x)
        want["b_error"], want["b_sqnr_db"] = _figures(b, x)
        for key, value in want.items():
            assert float(m[key]).hex() == value.hex(), (m["module"], key)
        side = ("A" if want["a_error"] < want["b_error"] else
                "B" if want["b_error"] < want["a_error"] else "tie")
        assert m["closer"] == side
        closer[side] += 1
    assert 0 < closer["A"] < len(data["modules"])  # both sides win somewhere: a real check
    for proj, row in data["summary"].items():
        ms = [m for m in data["modules"] if position(m["module"])[2] == proj]
        assert row["modules"] == len(ms)
        assert row["a_closer"] == sum(m["closer"] == "A" for m in ms)
        assert row["b_closer"] == sum(m["closer"] == "B" for m in ms)
        assert row["distance_max"] == max(m["distance"] for m in ms)
        assert row["distance_median"] == float(np.median([m["distance"] for m in ms]))


def test_the_same_checkpoint_is_at_distance_zero(tmp_path: Path) -> None:
    code, data = _compare(tmp_path, str(PRODUCERS / CT), str(PRODUCERS / CT), "--source",
                          str(SOURCE))
    assert code == 0
    assert {m["distance"] for m in data["modules"]} == {0.0}
    assert {m["closer"] for m in data["modules"]} == {"tie"}


def _other_model(tmp_path: Path, **change: int) -> Path:
    folder = tmp_path / "other"
    shutil.copytree(PRODUCERS / CT, folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config.update(change)
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


@pytest.mark.parametrize("change", [{"moe_intermediate_size": 64}, {"n_routed_experts": 8}],
                         ids=["shape", "modules"])
def test_mismatched_architectures_exit_2(tmp_path: Path, change: dict[str, int],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    other = _other_model(tmp_path, **change)
    code, data = _compare(tmp_path, str(PRODUCERS / MODELOPT), str(other))
    assert code == 2 and not data
    assert "architectures differ" in capsys.readouterr().err


def test_text_and_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "c.html"
    assert main(["compare", str(PRODUCERS / MODELOPT), str(PRODUCERS / "kimi-k2-mxfp4-quark"),
                 "--source", str(SOURCE), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert "per projection" in out and "closer to the source: A in" in out
    parsed = Page(page.read_text(encoding="utf-8"))
    links_stay_home(parsed)
    cells = {p: [c for c in drawn if c.get("class") == "cell"]
             for p, drawn in parsed.plots.items()}
    assert all(cells.values())
    # every module that either side quantizes: MXFP4 quantizes the dense layer's MLP too
    distance = sum(len(c) for p, c in cells.items() if p.startswith("distance-"))
    closer = sum(len(c) for p, c in cells.items() if p.startswith("closer-"))
    assert distance == closer == 27


def test_a_hub_side_gives_the_local_figures(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """``hf://`` for one side: the same reader interface, the same figures; only the
    quantized modules' tensors and the headers are read (never a whole shard twice)."""
    requires("huggingface_hub")
    from hubserver import HubServer, Repo

    with HubServer({"test/ct": Repo({"main": PRODUCERS / CT})}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.delenv("HF_TOKEN", raising=False)
        code, remote = _compare(tmp_path, str(PRODUCERS / MODELOPT), "hf://test/ct",
                                "--source", str(SOURCE))
        sent = server.bytes_sent()
    assert code == 0
    _, local = _compare(tmp_path, str(PRODUCERS / MODELOPT), str(PRODUCERS / CT), "--source",
                        str(SOURCE))
    assert remote["modules"] == local["modules"] and remote["summary"] == local["summary"]
    assert 0 < sent < sum(p.stat().st_size for p in (PRODUCERS / CT).glob("*.safetensors"))
