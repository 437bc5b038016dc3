"""``mxformats validate --source --device``: the Triton path of reproduction
(:mod:`mxformats.kernels.triton.reproduce`) gives the report of the compiled CPU path.

Every producer fixture is validated twice with ``--source``, once on the CPU passes and once
on the device that pytest's ``--device`` names (``cpu``: Triton's interpreter, as CI runs it;
``cuda`` on a lent GPU), and the JSON reports must be equal but for the task timings. A spy on
:class:`~mxformats.kernels.triton.reproduce.DevicePasses` asserts that the device answered
every compared module itself (a None would hand the module to the numpy path and prove
nothing). The interpreter takes about 4 s per 64 Ki elements of a module, so these runs
compare one module per layer (``--sample 1``); ``tests/kernels/test_triton_moments.py``
checks the statistics over the pieces and sizes the sample skips.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import requires

from mxformats.fast import jit
from mxformats.fast.passes import COMPILED
from mxformats.validate import device as device_module
from mxformats.validate.findings import Level
from mxformats.validate.model import Options
from mxformats.validate.report import dump_json
from mxformats.validate.runner import validate

requires("torch")
requires("triton")
reproduce = requires("mxformats.kernels.triton.reproduce")
device_scan = requires("mxformats.kernels.triton.scan")

PRODUCERS = Path(__file__).resolve().parent / "data" / "producers"
SOURCE = PRODUCERS / "src-bf16"
FIXTURES = sorted(p.name for p in PRODUCERS.glob("kimi-k2-*"))
#: Modules per layer compared: the first of an NVFP4 layer is a fused gate or up, which both
#: paths hand to the numpy path (its sibling's source decides), so NVFP4 compares three.
SAMPLE = {"kimi-k2-nvfp4-compressed-tensors": 3, "kimi-k2-nvfp4-modelopt": 3}
PASSES = ("reproduce_mxfp4", "reproduce_nvfp4", "reproduce_fp8_block", "reproduce_int4",
          "reproduce_w4a8")


def _json(root: Path, sample: int = 1, **options: Any) -> dict[str, Any]:
    options.setdefault("source", SOURCE)
    out = io.StringIO()
    dump_json(validate(root, Options(sample=sample if options["source"] else None, workers=1,
                                     **options)), out)
    data: dict[str, Any] = json.loads(out.getvalue())
    for record in data.get("tasks", []):
        record.pop("seconds")
    return data


@pytest.fixture
def with_numba() -> None:
    """The compiled CPU passes run (the decisions compared): numba importable (locally a skip
    without it; under CI=true a failure)."""
    requires("numba")
    assert jit.compiled() is not None, jit.status()


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool, bool]]:
    """(pass, the device answered, the compiled CPU pass answered) for every call of a device
    pass in the test."""
    seen: list[tuple[str, bool, bool]] = []
    for name in PASSES:
        original = getattr(reproduce.DevicePasses, name)

        def spy(self: Any, *args: Any, _name: str = name, _original: Any = original) -> Any:
            found = _original(self, *args)
            compiled = getattr(COMPILED, _name)(*args)
            seen.append((_name, found is not None, compiled is not None))
            return found

        monkeypatch.setattr(reproduce.DevicePasses, name, spy)
    return seen


def test_every_producer_fixture_is_found_in_the_list() -> None:
    assert len(FIXTURES) == 7, FIXTURES


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("fixture", FIXTURES)
def test_device_report_is_the_cpu_report(fixture: str, request: pytest.FixtureRequest,
                                         answers: list[tuple[str, bool, bool]]) -> None:
    """The same JSON; the device answers exactly where the compiled pass does (NVFP4's gate
    and up, calibrated with their fused sibling, go to the numpy path from both), and for
    some module of every fixture."""
    device = request.config.getoption("--device")
    on_cpu = _json(PRODUCERS / fixture, sample=SAMPLE.get(fixture, 1))
    assert not answers
    on_device = _json(PRODUCERS / fixture, sample=SAMPLE.get(fixture, 1), device=device)
    assert on_device["ok"] and on_device["reproduction"]["modules_checked"] > 0
    assert on_device == on_cpu
    assert all(device == compiled for _, device, compiled in answers), answers
    assert any(device for _, device, _ in answers), answers


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("fixture", FIXTURES)
def test_device_full_scan_is_the_cpu_full_scan(fixture: str, request: pytest.FixtureRequest,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``--level full --device``: the scan's pass (unit peaks, uniform codes, byte counts,
    checksums) runs on the device for every module, and the report is the CPU's."""
    calls: list[str] = []
    for name in ("nibble_peaks", "tile_peaks", "checksum_words", "count_words"):
        original = getattr(device_scan.DeviceScan, name)

        def spy(self: Any, *args: Any, _name: str = name, _original: Any = original) -> Any:
            calls.append(_name)
            return _original(self, *args)

        monkeypatch.setattr(device_scan.DeviceScan, name, spy)
    on_cpu = _json(PRODUCERS / fixture, source=None, level=Level.FULL)
    assert not calls
    on_device = _json(PRODUCERS / fixture, source=None, level=Level.FULL,
                      device=request.config.getoption("--device"))
    assert on_device["ok"] and on_device == on_cpu
    assert calls


@pytest.mark.parametrize(("fixture", "param"), [("kimi-k2-mxfp4-quark", "weight"),
                                              ("kimi-k2-nvfp4-modelopt", "weight_scale_2")])
def test_a_module_whose_bytes_differ_goes_to_the_numpy_path(
        fixture: str, param: str, request: pytest.FixtureRequest,
        answers: list[tuple[str, bool, bool]], tmp_path: Path) -> None:
    """One flipped bit (a code byte; the last bit of an NVFP4 global scale, which leaves
    every code and block scale as they were): the device declines the module (None), and the
    numpy path names the tensor, in the same report as the CPU run's."""
    import shutil

    from mxformats.tensorfile import read_header

    ckpt = tmp_path / "ckpt"
    shutil.copytree(PRODUCERS / fixture, ckpt)
    sample = SAMPLE.get(fixture, 1)
    # NVFP4: a module calibrated alone (a fused gate or up goes to the numpy path anyway)
    modules = [m["module"] for m in _json(ckpt, sample)["reproduction"]["per_module"]
               if "nvfp4" not in fixture or "down_proj" in m["module"]]
    name = f"{modules[0]}.{param}"
    shard = next(p for p in sorted(ckpt.glob("*.safetensors")) if name in read_header(p)[0])
    header, start = read_header(shard)
    offset = start + header[name]["data_offsets"][0]
    data = bytearray(shard.read_bytes())
    data[offset] ^= 0x01
    shard.write_bytes(bytes(data))
    on_cpu = _json(ckpt, sample)
    answers.clear()
    on_device = _json(ckpt, sample, device=request.config.getoption("--device"))
    assert not on_device["ok"] and on_device == on_cpu
    assert any(f["tensor"] == name and f["check"] == "REPRO_MISMATCH"
               for f in on_device["findings"]), on_device["findings"]
    assert all(device == compiled for _, device, compiled in answers), answers


@pytest.mark.parametrize(("device", "environment", "problem"), [
    ("gpu", {}, "--device takes cuda, cuda:N or cpu, not 'gpu'"),
    ("cuda:", {}, "--device takes cuda, cuda:N or cpu"),
    ("cpu", {"TRITON_INTERPRET": "0"}, "set TRITON_INTERPRET=1"),
    ("cuda:4096", {}, "this machine has"),
])
def test_a_device_that_cannot_run_is_exit_2_at_startup(
        device: str, environment: dict[str, str], problem: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    found = device_module.device_problem(device)
    assert found is not None and problem in found


def test_the_interpreter_device_is_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # another test's ptx_cost may have dropped it
    assert device_module.device_problem("cpu") is None
    assert device_module.device_problem(None) is None


def test_the_cli_refuses_device_without_source_and_a_bad_device(tmp_path: Path) -> None:
    fixture = str(PRODUCERS / "kimi-k2-mxfp4-quark")
    run = [sys.executable, "-m", "mxformats", "validate", fixture]
    alone = subprocess.run([*run, "--device", "cpu"], capture_output=True, text=True,
                           check=False)
    assert alone.returncode == 2 and "give one of them too" in alone.stderr
    bad = subprocess.run([*run, "--source", str(SOURCE), "--device", "tpu"],
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "--device takes cuda" in bad.stderr


def test_the_passes_are_made_once_per_process_and_device() -> None:
    assert device_module.passes_for(None) is device_module.passes_for(None)
    assert device_module.passes_for("cpu") is device_module.passes_for("cpu")
    assert isinstance(device_module.passes_for("cpu"), reproduce.DevicePasses)
    assert not device_module.gpu_device("cpu") and device_module.gpu_device("cuda:1")
