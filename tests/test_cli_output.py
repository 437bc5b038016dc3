"""One output convention on every reporting command (issue 17, item 3): ``--format``, ``-o``,
the ``--json``/``--junit`` aliases, stdout purity with each machine format, ``-q``, colour and
``NO_COLOR``, a closed pipe, ``python -m mxformats``, ``--select``/``--ignore``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from mxformats import __version__
from mxformats.cli import build_parser, main
from mxformats.output import DOCS_URL, check_url, github_annotation
from mxformats.validate.catalogue import load_all

PRODUCERS = Path(__file__).resolve().parent / "data" / "producers"
MX = PRODUCERS / "kimi-k2-mxfp4-quark"
ROOT = Path(__file__).resolve().parents[1]
ANSI = re.compile("\x1b\\[")
RED = "\x1b[1;31m"
BLOCK = ["6", "5", "0.25", "0.75"]


def _broken(tmp_path: Path) -> Path:
    """The Quark MXFP4 fixture with one tensor dropped from the index: an error
    (SHARD_TENSOR_NOT_IN_INDEX) and a warning-free rest."""
    dst = tmp_path / "ckpt"
    shutil.copytree(MX, dst)
    index_path = dst / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    name = sorted(index["weight_map"])[0]
    del index["weight_map"][name]
    index_path.write_text(json.dumps(index))
    return dst


def _run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mxformats", *argv], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, cwd=ROOT)


def _machine(fmt: str, out: str) -> None:
    """``out`` is one ``fmt`` document and nothing else."""
    if fmt == "json":
        json.loads(out)
    elif fmt == "junit":
        assert ET.fromstring(out.encode()).tag == "testsuite"
    else:
        lines = out.splitlines()
        assert lines and all(line.startswith("::") for line in lines), out


# -- validate ------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["json", "junit", "github"])
def test_validate_machine_format_alone_on_stdout(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(_broken(tmp_path)), "--level", "structure",
                 "--format", fmt]) == 1
    out = capsys.readouterr().out
    _machine(fmt, out)
    assert "SHARD_TENSOR_NOT_IN_INDEX" in out


def test_validate_json_findings_carry_url_meaning_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(_broken(tmp_path)), "--format", "json"]) == 1
    findings = json.loads(capsys.readouterr().out)["findings"]
    checks = load_all()
    assert findings
    for f in findings:
        assert f["url"] == f"{DOCS_URL}validate-checks.html#{f['check']}"
        assert f["meaning"] == checks[f["check"]].meaning and f["fix"] == checks[f["check"]].fix


def test_validate_output_file_and_aliases(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = _broken(tmp_path)
    report = tmp_path / "r.json"
    assert main(["validate", str(ckpt), "--format", "json", "-o", str(report)]) == 1
    assert capsys.readouterr().out == "" and json.loads(report.read_text())["ok"] is False
    # --json - (alias): the JSON alone on stdout, the text report moves to stderr.
    junit = tmp_path / "r.xml"
    assert main(["validate", str(ckpt), "--json", "-", "--junit", str(junit)]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["ok"] is False and "FAILED" in captured.err
    assert ET.parse(junit).getroot().get("failures") == "1"


@pytest.mark.parametrize("argv", [["--format", "json", "--json", "-"],
                                  ["--format", "junit", "--junit", "-"]])
def test_two_reports_on_stdout_is_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(MX), *argv]) == 2
    assert "cannot both go to stdout" in capsys.readouterr().err


def test_a_good_run_prints_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(MX), "--level", "structure"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("OK ")


def test_a_failed_run_lists_findings_with_fix_and_docs_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(_broken(tmp_path)), "--level", "structure"]) == 1
    out = capsys.readouterr().out
    assert "fix: " in out and check_url("SHARD_TENSOR_NOT_IN_INDEX") in out
    assert out.splitlines()[-1].startswith("FAILED ")
    assert main(["validate", str(_broken(tmp_path / "q")), "-q"]) == 1
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_select_and_ignore_take_check_ids(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = _broken(tmp_path)
    assert main(["validate", str(ckpt), "--ignore", "shard_tensor_not_in_index",
                 "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] and not data["findings"]
    assert main(["validate", str(ckpt), "--select", "SHARD_TENSOR_NOT_IN_INDEX",
                 "--format", "junit"]) == 1
    suite = ET.fromstring(capsys.readouterr().out.encode())
    assert [c.get("name") for c in suite] == ["SHARD_TENSOR_NOT_IN_INDEX"]
    assert main(["validate", str(ckpt), "--select", "NO_SUCH_CHECK"]) == 2
    assert "unknown check ID(s): NO_SUCH_CHECK" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "code"), [
    (["--select", "REPRO_MISMATCH"], 2),  # a check of --source: not run without it
    (["--select", "REPRO_MISMATCH,CONFIG_PARSE"], 0),
    (["--select", "INTERNAL_ERROR"], 2),  # the validator's own failures check no checkpoint
    (["--select", "E8M0_NAN", "--level", "structure"], 2),  # a scales check
    (["--select", "E8M0_NAN", "--level", "scales"], 0),
])
def test_a_selection_that_checks_nothing_is_never_ok(
        argv: list[str], code: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--select/--ignore that leave no check this run runs: exit 2, and every report says
    the run could not check anything (never an OK verdict or an empty passing suite)."""
    junit = tmp_path / "r.xml"
    assert main(["validate", str(MX), *argv, "--json", "-", "--junit", str(junit)]) == code
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    errors = ET.parse(junit).getroot().get("errors")
    if code:
        assert not data["ok"] and data["fatal"].startswith("nothing was checked")
        assert "nothing was checked" in captured.err and errors == "1"
    else:
        assert data["ok"] and data["fatal"] is None and errors == "0"
        assert captured.err.startswith("OK ")


# -- colour --------------------------------------------------------------------------------------


def test_colour_always_never_and_no_color(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt = str(_broken(tmp_path))
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    assert main(["validate", ckpt, "--level", "structure", "--color", "always"]) == 1
    out = capsys.readouterr().out
    assert f"{RED}error" in out and f"{RED}FAILED" in out  # errors red
    assert main(["validate", ckpt, "--level", "structure", "--color", "never"]) == 1
    assert not ANSI.search(capsys.readouterr().out)
    assert main(["validate", ckpt, "--level", "structure"]) == 1  # auto, not a terminal
    assert not ANSI.search(capsys.readouterr().out)
    monkeypatch.setenv("FORCE_COLOR", "1")  # as if on a terminal
    assert main(["validate", ckpt, "--level", "structure"]) == 1
    assert RED in capsys.readouterr().out
    monkeypatch.setenv("NO_COLOR", "1")
    assert main(["validate", ckpt, "--level", "structure"]) == 1
    assert "31m" not in capsys.readouterr().out  # no red (bold may stay: NO_COLOR is colour)


# -- inspect, diff, check -----------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["json", "junit", "github"])
def test_inspect_diff_check_machine_formats_alone_on_stdout(
    fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(MX), "--format", fmt]) == 0
    _machine(fmt, capsys.readouterr().out)
    assert main(["diff", *BLOCK, "--format", fmt]) == 0
    out = capsys.readouterr().out
    _machine(fmt, out)
    assert "torchao-ceil" in out
    assert main(["check", "mxformats:quantize_mx", "--max-examples", "2", "--dtypes", "bf16",
                 "--format", fmt]) == 0
    _machine(fmt, capsys.readouterr().out)


def test_diff_junit_reports_differences_without_failing(
        capsys: pytest.CaptureFixture[str]) -> None:
    """diff exits 0 when profiles differ (the difference is its answer), so its JUnit suite
    has no failure: the differing profile's case says how in its system-out, the others none."""
    assert main(["diff", *BLOCK, "--profiles", "torchao-ceil,quark", "--format", "junit"]) == 0
    suite = ET.fromstring(capsys.readouterr().out.encode())
    assert suite.get("failures") == "0" and suite.get("tests") == "3"
    assert all(c.find("failure") is None for c in suite)
    said = {c.get("name"): (c.findtext("system-out") or "") for c in suite}
    assert said["torchao-ceil"].startswith("writes other bytes than 'ocp': scale of block(s)")
    assert said["quark"] == said["ocp"] == ""


def test_inspect_names_the_producer_and_its_consumer(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(MX), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["producer_profile"] == "mx:quark"
    assert data["consumer_profile"] == "mx:quark-hip-bf16"


def test_quiet_prints_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["diff", *BLOCK, "-q"], ["inspect", str(MX), "-q"],
                 ["check", "mxformats:quantize_mx", "--max-examples", "2", "-q"]):
        assert main(argv) == 0
        assert len(capsys.readouterr().out.splitlines()) == 1, argv


def test_diff_json_alias_and_contradiction(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", *BLOCK, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["profiles"][0]["input_dtype"] == "float32"
    assert main(["diff", *BLOCK, "--json", "--format", "junit"]) == 2
    assert "--json contradicts --format junit" in capsys.readouterr().err


def test_a_report_that_cannot_be_written_exits_2(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", *BLOCK, "-o", str(tmp_path / "no" / "such" / "dir.txt")]) == 2
    assert "cannot write a report" in capsys.readouterr().err


def test_a_report_file_that_cannot_be_written_prints_no_verdict(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The report files are written before stdout: an unwritable --json FILE exits 2 with no
    OK on stdout; a writable one leaves the verdict there."""
    assert main(["validate", str(MX), "--json", str(tmp_path / "no" / "r.json")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "cannot write a report" in captured.err
    assert main(["validate", str(MX), "--json", str(tmp_path / "r.json")]) == 0
    assert capsys.readouterr().out.startswith("OK ")
    assert json.loads((tmp_path / "r.json").read_text())["ok"]


@pytest.mark.parametrize(("argv", "redirect", "code"), [
    (["validate", str(MX), "-q"], ">&-", 2),
    (["validate", str(MX), "-q", "-o", "{tmp}/r.txt"], ">&-", 0),  # nothing for stdout
    (["spec", "e2m1"], ">&-", 2),
    (["spec", "e2m1"], ">/dev/full", 2),
    (["spec", "e2m1"], ">/dev/null", 0),
])
def test_a_closed_or_full_stdout_exits_2(argv: list[str], redirect: str, code: int,
                                         tmp_path: Path) -> None:
    """A report that cannot reach stdout (closed: ``>&-``; a full disk: /dev/full) exits 2
    with the reason, never 1 ("a check failed") with a traceback, nor 0 with no report."""
    words = " ".join(a.replace("{tmp}", str(tmp_path)) for a in argv)
    done = subprocess.run(["bash", "-c", f"{sys.executable} -m mxformats {words} {redirect}"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == code, done.stderr
    assert ("cannot write a report" in done.stderr) == bool(code), done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("encoding", "shown"), [("ascii", "ckpt\\xe9"), ("utf-8", "ckpt\xe9")])
def test_a_name_stdout_cannot_encode_is_escaped(encoding: str, shown: str,
                                                tmp_path: Path) -> None:
    """A checkpoint named ``ckpté`` on an ASCII stdout: the verdict is written with the name
    escaped and the run exits 0, as on a UTF-8 one (it ended in UnicodeEncodeError, exit 1)."""
    ckpt = tmp_path / "ckpt\xe9"
    shutil.copytree(MX, ckpt)
    for fmt in ("text", "github"):
        done = _run("validate", str(ckpt), "--level", "structure", "-q", "--format", fmt,
                    env={"PYTHONIOENCODING": encoding})
        assert done.returncode == 0, done.stderr
        assert f"{tmp_path}/{shown}: quark-mxfp4" in done.stdout, done.stdout


def test_aliases_of_formats_and_dtypes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "F8_E4M3"]) == 0 and "e4m3fn" in capsys.readouterr().out
    assert main(["spec", "float8_e4m3fn"]) == 0 and "0x7E" in capsys.readouterr().out
    assert main(["diff", *BLOCK, "--elem", "E2M1", "--dtype", "torch.bfloat16", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dtype"] == "bfloat16" and data["elem"] == "e2m1"
    with pytest.raises(SystemExit, match="2"):
        main(["diff", *BLOCK, "--dtype", "int3"])
    assert "unknown dtype 'int3'" in capsys.readouterr().err


def test_github_annotation_escapes_like_the_actions_toolkit() -> None:
    assert github_annotation("info", "50% done\nnext", title="A:B,C", file="x,y") == (
        "::notice file=x%2Cy,title=A%3AB%2CC::50%25 done%0Anext")
    assert github_annotation("error", "plain") == "::error::plain"


# -- preflight -----------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["json", "junit", "github"])
def test_preflight_machine_format_alone_on_stdout(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["preflight", str(_broken(tmp_path)), "--format", fmt]) == 1
    out = capsys.readouterr().out
    _machine(fmt, out)
    assert "SHARD_TENSOR_NOT_IN_INDEX" in out
    if fmt == "json":
        data = json.loads(out)
        assert data["exit"] == 1 and len(data["rows"]) == 8
        assert all(f["url"] == check_url(f["check"]) and f["meaning"] and f["fix"]
                   for f in data["findings"])
    elif fmt == "junit":
        suite = ET.fromstring(out.encode())
        failed = [c.get("name") for c in suite if c.find("failure") is not None]
        assert failed == ["structure"] and suite.get("tests") == "9"
    else:
        assert "::notice title=mxformats preflight::vllm: H100/H200 " in out


@pytest.mark.parametrize("fmt", ["text", "json", "junit", "github"])
def test_preflight_unreadable_folder_exits_2_with_the_reason(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["preflight", str(tmp_path / "absent"), "--format", fmt]) == 2
    captured = capsys.readouterr()
    assert "cannot read" in captured.err
    if fmt == "text":
        assert captured.out == ""  # the reason is on stderr
        return
    _machine(fmt, captured.out)
    assert "not a readable directory" in captured.out
    if fmt == "json":
        data = json.loads(captured.out)
        assert data["exit"] == 2 and data["rows"] == [] and data["fatal"]


def test_preflight_output_file_alias_quiet_and_colour(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    report = tmp_path / "preflight.json"
    assert main(["preflight", str(MX), "--format", "json", "-o", str(report)]) == 0
    assert capsys.readouterr().out == ""
    assert json.loads(report.read_text())["format"] == "quark-mxfp4"
    assert main(["preflight", "--json", str(MX)]) == 0  # the alias of --format json
    assert json.loads(capsys.readouterr().out)["exit"] == 0
    assert main(["preflight", str(MX), "--json", "--format", "junit"]) == 2
    assert "--json contradicts --format junit" in capsys.readouterr().err
    assert main(["preflight", str(MX), "-q"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["OK " + str(MX), "vllm", "sglang"]
    assert main(["preflight", str(MX)]) == 0
    assert "mxformats preflight" in capsys.readouterr().out  # the table, without -q
    ckpt = str(_broken(tmp_path))
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    assert main(["preflight", ckpt, "--color", "always"]) == 1
    assert f"{RED}error" in capsys.readouterr().out
    assert main(["preflight", ckpt, "--color", "never"]) == 1
    assert not ANSI.search(capsys.readouterr().out)
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    assert main(["preflight", ckpt]) == 1
    assert "31m" not in capsys.readouterr().out


# -- the program ---------------------------------------------------------------------------------


def test_python_dash_m_and_help() -> None:
    out = _run("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"mxformats {__version__}"
    text = _run("--help").stdout
    listed = text.split("COMMAND\n", 1)[1].split()
    assert listed[0] == "validate"
    assert DOCS_URL in " ".join(text.split())


def test_every_reporting_command_takes_the_convention() -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if hasattr(a, "choices") and a.choices
                      and "validate" in a.choices).choices
    for name in ("validate", "inspect", "diff", "check", "preflight"):
        options = {o for a in subparsers[name]._actions for o in a.option_strings}
        assert {"--format", "-o", "-q", "--quiet", "--color"} <= options, name


def test_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    """A real pipe to ``head``: the JSON is far larger than the pipe's buffer, so the writer
    meets a closed pipe; it must not print a traceback."""
    big = tmp_path / "big.npy"
    np.save(big, np.linspace(-8, 8, 64 * 256, dtype=np.float32).reshape(64, 256))
    script = (f"{sys.executable} -m mxformats diff --npy {big} --json 2>{tmp_path / 'err'}"
              " | head -c 100 >/dev/null; echo ${PIPESTATUS[0]}")
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=ROOT,
                          check=True)
    assert done.stdout.strip() == "141"
    assert (tmp_path / "err").read_text() == ""


def test_project_urls_name_the_docs() -> None:
    import tomllib

    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert urls == {"Documentation": DOCS_URL, "Changelog": f"{DOCS_URL}changelog.html",
                    "Check catalogue": check_url("").removesuffix("#")}
    conf = (ROOT / "docs" / "conf.py").read_text()
    assert "html_baseurl = DOCS_URL" in conf and "readthedocs" not in conf
