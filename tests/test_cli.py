"""The command line: help, version, the code table, and its exit codes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mxformats import FORMATS, __version__
from mxformats.cli import main


@pytest.mark.parametrize("name", list(FORMATS))
def test_spec_prints_every_code(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    fmt = FORMATS[name]
    assert main(["spec", name]) == 0
    out = capsys.readouterr().out
    width = (fmt.bits + 3) // 4
    for code in range(1 << fmt.bits):
        assert f"0x{code:0{width}X}" in out
    assert f"spec/{name}.md" in out


def test_spec_lists_formats(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in FORMATS)


def test_unknown_format_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "fp4"]) == 2
    assert "known formats: e2m1" in capsys.readouterr().err


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: mxformats" in capsys.readouterr().out


def test_version_and_help_from_the_installed_script() -> None:
    run = [sys.executable, "-m", "mxformats.cli"]
    out = subprocess.run([*run, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"mxformats {__version__}"
    out = subprocess.run([*run, "--help"], capture_output=True, text=True, check=True)
    assert "spec" in out.stdout and "Exit codes" in out.stdout
