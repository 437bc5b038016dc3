"""``mxformats diff`` and ``mxformats check``: output, JSON and exit codes (0, 1, 2)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from mxformats.cli import main

# -- diff ---------------------------------------------------------------------------------------


def test_diff_prints_every_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", "6", "5", "0.25", "0.75"]) == 0
    out = capsys.readouterr().out
    for name in ("ocp", "torchao-ceil", "quark", "compressed-tensors"):
        assert name in out
    assert "0x7F" in out and "0x80" in out and "2^1" in out
    flat = " ".join(out.split())
    assert "3 of 11 profiles write other bytes than 'ocp': microxcaling, quark-triton, " \
        "torchao-ceil" in flat and "refused" not in flat
    # The README's headline example: vLLM's bf16-only kernel is given bfloat16, and says so.
    assert "vllm was given bfloat16 input (it does not take float32)" in flat


def test_diff_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", "--json", "--profiles", "torchao-ceil", "6,5,0.25,0.75"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema_version"] == 1 and data["elem"] == "e2m1"
    assert [p["profile"] for p in data["profiles"]] == ["ocp", "torchao-ceil"]
    ocp, ceil = data["profiles"]
    assert ocp["scales"] == ["0x7F"] and ocp["codes"][:4] == ["0x7", "0x6", "0x0", "0x2"]
    assert ceil["scales"] == ["0x80"] and ceil["differs_from_baseline"] is True
    assert data["input"][:4] == ["0x1.8000000000000p+2", "0x1.4000000000000p+2",
                                 "0x1.0000000000000p-2", "0x1.8000000000000p-1"]


def test_diff_reads_npy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "block.npy"
    np.save(path, np.array([7.0, 1.0, 0.3, -2.9], dtype=np.float32))
    assert main(["diff", "--npy", str(path), "--json", "--profiles", "quark"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["profiles"][1]["scales"] == ["0x80"]  # EVEN rounds 7.0 up a scale step


def test_diff_hex_negative_and_special_values(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", "--json", "--profiles", "ocp", "--", "-inf", "0x1p-1", "-0.25",
                 "nan"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["input"][:4] == ["-inf", "0x1.0000000000000p-1", "-0x1.0000000000000p-2", "nan"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["diff", "6", "abc"], "'abc' is not a number"),
        (["diff"], "give the values of a block, or --npy FILE"),
        (["diff", "--npy", "x.npy", "1.0"], "not both"),
        (["diff", "--npy", "/nonexistent/x.npy"], "no such file"),
        (["diff", "--profiles", "nope", "1"], "unknown mx producer profile 'nope'"),
        (["diff", "--elem", "int4", "1"], "not an MX element format"),
        (["diff", "--elem", "fp4", "1"], "unknown format 'fp4'"),
    ],
)
def test_diff_bad_input_exits_2(argv: list[str], message: str,
                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_diff_bad_npy_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "text.npy"
    path.write_text("not an array")
    assert main(["diff", "--npy", str(path)]) == 2
    assert "cannot read" in capsys.readouterr().err


# -- check --------------------------------------------------------------------------------------

MODULE = '''
import numpy as np
from mxformats.schemes.mx import dequantize_mx, quantize_mx


def good(x, elem, **kw):
    return quantize_mx(x, elem, **kw)


def swapped(x, elem, **kw):
    codes, scales = quantize_mx(x, elem, **kw)
    return ((codes & 0xF) << 4) | (codes >> 4), scales


def decode(codes, scales, elem, **kw):
    return dequantize_mx(codes, scales, elem, **kw)


NOT_A_FUNCTION = 3
'''

FAST = ["--dtypes", "bfloat16", "--max-examples", "5"]


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "user_kernels.py").write_text(textwrap.dedent(MODULE))
    (tmp_path / "broken_kernels.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "user_kernels"


def test_check_identical_exits_0(user_module: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", f"{user_module}:good", "--profile", "quark", *FAST]) == 0
    out = capsys.readouterr().out
    assert "check_quantizer(user_kernels.good, profile='quark'" in out and ": OK" in out


def test_check_difference_exits_1(user_module: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", f"{user_module}:swapped", *FAST]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "FIRST DIFFERENCE (codes differ" in out
    assert "expected scale" in out and "got      scale" in out


def test_check_a_file_path_and_a_dequantizer(user_module: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "user_kernels.py"
    assert main(["check", f"{path}:decode", "--kind", "dequantizer", "--max-examples", "5"]) == 0
    assert "check_dequantizer(" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("target", "extra", "message"),
    [
        ("no_such_module:fn", [], "cannot import no_such_module:fn: ModuleNotFoundError"),
        ("user_kernels:missing", [], "has no attribute 'missing'"),
        ("user_kernels:NOT_A_FUNCTION", [], "is not callable: it is a int"),
        ("user_kernels", [], "expected MODULE:FUNCTION"),
        ("broken_kernels:fn", [], "RuntimeError: boom at import"),
        ("user_kernels:good", ["--profile", "nope"], "unknown mx producer profile 'nope'"),
        ("user_kernels:good", ["--dtypes", "float8"], "unknown dtype 'float8'"),
    ],
)
def test_check_usage_and_import_errors_exit_2(
    user_module: str, target: str, extra: list[str], message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["check", target, *extra]) == 2
    assert message in capsys.readouterr().err


def test_help_texts() -> None:
    run = [sys.executable, "-m", "mxformats.cli"]
    out = subprocess.run([*run, "--help"], capture_output=True, text=True, check=True).stdout
    assert "diff" in out and "check" in out
    out = subprocess.run([*run, "check", "--help"], capture_output=True, text=True,
                         check=True).stdout
    assert "this runs its code" in " ".join(out.split())
    assert "Exit codes: 0 identical" in " ".join(out.split())
    out = subprocess.run([*run, "diff", "--help"], capture_output=True, text=True,
                         check=True).stdout
    assert "which MXFP4 is golden?" in " ".join(out.split())
