"""``mxformats validate`` and ``inspect`` on the command line (issue 12): output a hostile name
cannot forge or break (terminal, rich markup, JUnit XML), reports that never count a check
that did not run, and the exit code of every usage error."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from mxformats.cli import main
from mxformats.output import printable
from mxformats.validate.findings import CHECKS
from mxformats.validate.model import Options
from mxformats.validate.report import SCHEMA_VERSION, to_json, to_junit
from mxformats.validate.runner import validate

PRODUCERS = Path(__file__).resolve().parent / "data" / "producers"
MX = PRODUCERS / "kimi-k2-mxfp4-quark"
BF16 = PRODUCERS / "src-bf16"
SHARD = "model-00002-of-00002.safetensors"

#: A name that, printed raw, clears the screen, sets the terminal title, starts a new line and
#: prints a fake verdict; with rich markup and an emoji code for good measure.
FORGE = "x\x1b[2J\x1b]0;pwned\x07\nOK fake: quark-mxfp4, 0 error(s) [bold]b[/] :thumbs_up:"
#: What no XML 1.0 document can hold raw (NUL, other C0 controls, a lone surrogate).
UNXML = "n\x00u\x01l\x1f\ud800l"


def _copy(tmp_path: Path, name: str = "ckpt") -> Path:
    dst = tmp_path / name
    shutil.copytree(MX, dst)
    return dst


def _add_tensor(shard: Path, name: str) -> None:
    """Append a one-byte U8 tensor called ``name`` to ``shard`` (header written ASCII-escaped,
    so any code point, even a lone surrogate, can be a name)."""
    raw = shard.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    header[name] = {"dtype": "U8", "shape": [1], "data_offsets": [len(data), len(data) + 1]}
    body = json.dumps(header).encode("ascii")
    body += b" " * (-len(body) % 8)
    shard.write_bytes(struct.pack("<Q", len(body)) + body + data + b"\x00")


def _hostile(tmp_path: Path) -> Path:
    p = _copy(tmp_path)
    _add_tensor(p / SHARD, f"model.{FORGE}.{UNXML}")
    shutil.copy(p / SHARD, p / f"stray{FORGE.replace('/', '|')}.safetensors")
    return p


# -- escaping -------------------------------------------------------------------------------------


def test_printable_escapes_exactly_the_unprintable() -> None:
    assert printable("model.layers.0 [bold] :x: é 漢") == "model.layers.0 [bold] :x: é 漢"
    assert printable("a\x1b[2J\n\x00\x7f\x85\u202e\u2028\ud800\U000e0001") == (
        "a\\x1b[2J\\x0a\\x00\\x7f\\x85\\u202e\\u2028\\ud800\\U000e0001"
    )
    every = "".join(map(chr, range(0x110000)))
    escaped = printable(every)
    assert escaped.isprintable() and escaped.encode("utf-8")
    assert not re.search("[\x00-\x1f\x7f-\x9f]", escaped)


def test_hostile_names_cannot_forge_the_terminal(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    p = _hostile(tmp_path)
    assert main(["validate", str(p), "--level", "structure", "--workers", "1"]) == 1
    out = capsys.readouterr().out
    out.encode("utf-8")  # no lone surrogate reaches the terminal
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", out), "a control character got out"
    lines = out.splitlines()
    assert not any(line.startswith("OK") for line in lines)
    assert lines[-1].startswith("FAILED")
    assert "\\x1b[2J\\x1b]0;pwned\\x07\\x0aOK fake" in out
    assert "[bold]b[/] :thumbs_up:" in out  # literal: no markup, no emoji
    assert "\\x00u\\x01l\\x1f\\ud800l" in out


def test_markup_in_the_checkpoint_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A valid checkpoint whose path holds rich markup: exit 0, the path printed as it is."""
    folder = tmp_path / "ck[/]pt [bold]red[/bold] :smile:"
    shutil.copytree(MX, folder)
    assert main(["validate", str(folder), "--level", "structure"]) == 0
    out = capsys.readouterr().out
    assert f"OK {folder}: quark-mxfp4" in out
    assert main(["validate", str(folder), "--quiet", "--level", "structure"]) == 0
    assert capsys.readouterr().out.startswith(f"OK {folder}")
    assert main(["inspect", str(folder)]) == 0
    assert "[bold]red[/bold] :smile:" in capsys.readouterr().out.replace("\n", "")


def test_fatal_message_is_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / f"no{FORGE}"
    assert main(["validate", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[2J" in err and err.count("\n") == 1


# -- JUnit and JSON -------------------------------------------------------------------------------


def test_junit_is_well_formed_for_any_name(tmp_path: Path) -> None:
    p = _hostile(tmp_path)
    junit, report_json = tmp_path / "r.xml", tmp_path / "r.json"
    argv = ["validate", str(p), "--level", "structure", "--junit", str(junit),
            "--json", str(report_json), "--quiet"]
    assert main(argv) == 1
    suite = ET.parse(junit).getroot()  # raises on ill-formed XML
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", suite.get("timestamp") or "")
    text = "".join(suite.itertext())
    assert "\\x00u\\x01l\\x1f\\ud800l" in text and "\\x1b[2J" in text
    failed = {c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None}
    assert "SHARD_TENSOR_NOT_IN_INDEX" in failed
    assert "SHARD_STRAY" not in failed  # a warning: in system-out, failing only under --strict
    # JSON keeps the exact name (its escapes are JSON's own)
    data = json.loads(report_json.read_text(encoding="utf-8"))
    assert f"model.{FORGE}.{UNXML}" in {f["tensor"] for f in data["findings"]}


def test_a_fatal_run_lists_no_check_as_passed(tmp_path: Path) -> None:
    p = _copy(tmp_path)
    config = json.loads((p / "config.json").read_text())
    config["quantization_config"]["global_quant_config"]["weight"].update(
        group_size=16, scale_format="fp8_e4m3")
    (p / "config.json").write_text(json.dumps(config))
    junit = tmp_path / "r.xml"
    assert main(["validate", str(p), "--junit", str(junit), "--quiet"]) == 2
    suite = ET.parse(junit).getroot()
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert set(cases) == {"FORMAT_UNSUPPORTED", "RUN"}
    assert cases["FORMAT_UNSUPPORTED"].find("failure") is not None
    assert cases["RUN"].find("error") is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "1")


def _junit_cases(tmp_path: Path, *argv: str) -> set[str]:
    junit = tmp_path / "r.xml"
    main(["validate", str(MX), "--junit", str(junit), "--quiet", *argv])
    return {c.get("name") or "" for c in ET.parse(junit).getroot().iter("testcase")}


def test_junit_lists_only_the_checks_that_ran(tmp_path: Path) -> None:
    """Both sides: a check appears when its level and option were given, never otherwise."""
    structure = _junit_cases(tmp_path, "--level", "structure")
    assert "HEADER_LENGTH" in structure and "INTERNAL_ERROR" in structure
    for absent in ("E8M0_NAN", "SCALE_NOT_TIGHT", "REPRO_MISMATCH", "MANIFEST_MISMATCH",
                   "DEPLOY_TP_DIVISIBILITY"):
        assert absent not in structure
    scales = _junit_cases(tmp_path, "--level", "scales", "--tp", "1",
                          "--manifest", str(tmp_path / "m.json"))
    assert {"E8M0_NAN", "DEPLOY_TP_DIVISIBILITY", "MANIFEST_MISMATCH"} <= scales
    assert "SCALE_NOT_TIGHT" not in scales and "REPRO_MISMATCH" not in scales
    report = validate(MX, Options(workers=1, source=BF16))
    names = {c.get("name") for c in ET.fromstring(to_junit(report)).iter("testcase")}
    assert "REPRO_MISMATCH" in names
    assert {n for n in names if n in CHECKS} <= set(CHECKS)


def test_strict_verdict_agrees_with_the_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    """Under ``--strict`` a warning fails the run (exit 1), and every report says FAILED, never
    "OK" beside exit 1 (docs/publishing.md: ``OK ...`` is exit 0). The compressed-tensors
    fixture has one warning at the structure level (``MODULE_SPLIT``) and no error."""
    ct = ["validate", str(PRODUCERS / "kimi-k2-int4-compressed-tensors"), "--level",
          "structure"]
    assert main([*ct, "-q"]) == 0
    assert capsys.readouterr().out.startswith("OK ")
    assert main([*ct, "-q", "--strict"]) == 1
    assert capsys.readouterr().out.startswith("FAILED ")
    assert main([*ct, "--strict", "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["summary"] == {"error": 0, "warning": 1, "info": 0}
    assert main([*ct, "--strict", "--format", "github"]) == 1
    assert capsys.readouterr().out.splitlines()[-1].startswith("::error ")


@pytest.mark.parametrize(("strict", "code"), [([], 0), (["--strict"], 1)])
def test_junit_fails_exactly_when_the_run_does(strict: list[str], code: int,
                                              tmp_path: Path) -> None:
    """A warning only (the compressed-tensors fixture's ``MODULE_SPLIT``) is a JUnit failure
    only under ``--strict``: a CI that reads the suite fails the job exactly when the exit code
    does. Without it the warning stays in the testcase's system-out."""
    junit = tmp_path / "r.xml"
    assert main(["validate", str(PRODUCERS / "kimi-k2-int4-compressed-tensors"), "--level",
                 "structure", "-q", *strict, "--junit", str(junit)]) == code
    suite = ET.parse(junit).getroot()
    case = next(c for c in suite if c.get("name") == "MODULE_SPLIT")
    assert suite.get("failures") == str(code)
    assert (case.find("failure") is not None) == bool(code)
    out = case.find("system-out")
    assert (out is not None and out.text is not None
            and out.text.startswith("warning: ")) == (not code)


def test_reproduction_block_is_per_module() -> None:
    """The JSON names what it holds: one entry per quantized module reproduced."""
    report = validate(MX, Options(workers=1, source=BF16))
    data = to_json(report)
    assert data["schema_version"] == SCHEMA_VERSION == 3
    block = data["reproduction"]
    assert "per_tensor" not in block
    assert len(block["per_module"]) == block["modules_checked"] > 0
    assert report.ckpt is not None
    for entry in block["per_module"]:
        module = report.ckpt.modules[entry["module"]]
        assert module.quantized and len(module.tensors) > 1


@pytest.mark.usefixtures("no_hang")
def test_a_fifo_in_the_source_or_as_the_manifest_never_blocks(tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(BF16, source)
    (source / "config.json").unlink()
    os.mkfifo(source / "config.json")
    manifest = tmp_path / "manifest.json"
    os.mkfifo(manifest)
    report = validate(MX, Options(workers=1, source=source, manifest=manifest, sample=1))
    found = {f.check.id: f for f in report.findings}
    assert "MANIFEST_UNREADABLE" in found and "is a FIFO" in found["MANIFEST_UNREADABLE"].message
    assert "REPRO_SUMMARY" in found


# -- exit codes of usage errors -------------------------------------------------------------------


def _special(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "file":
        path.write_text("{}")
    return path  # "missing": never created


USAGE_ERRORS: list[tuple[str, list[str]]] = [
    ("no subcommand", []),
    ("unknown subcommand", ["nonsense"]),
    ("validate without DIR", ["validate"]),
    ("unknown option", ["validate", "{MX}", "--bogus"]),
    ("unknown level", ["validate", "{MX}", "--level", "everything"]),
    ("unknown target", ["validate", "{MX}", "--target", "tpu"]),
    ("tp 0", ["validate", "{MX}", "--tp", "0"]),
    ("tp negative", ["validate", "{MX}", "--tp", "-1"]),
    ("tp not a number", ["validate", "{MX}", "--tp", "two"]),
    ("ep 0", ["validate", "{MX}", "--ep", "0"]),
    ("sample 0", ["validate", "{MX}", "--source", "{BF16}", "--sample", "0"]),
    ("workers 0", ["validate", "{MX}", "--workers", "0"]),
    ("sample without source", ["validate", "{MX}", "--sample", "2"]),
    ("source is a file", ["validate", "{MX}", "--source", "{file}"]),
    ("source is missing", ["validate", "{MX}", "--source", "{missing}"]),
    ("source is a FIFO", ["validate", "{MX}", "--source", "{fifo}"]),
    ("DIR is missing", ["validate", "{missing}"]),
    ("DIR is a file", ["validate", "{file}"]),
    ("DIR is a FIFO", ["validate", "{fifo}"]),
    ("json unwritable", ["validate", "{MX}", "--level", "structure", "--json", "{missing}/r.json"]),
    ("junit unwritable", ["validate", "{MX}", "--level", "structure", "--junit",
                          "{missing}/r.xml"]),
    ("inspect without DIR", ["inspect"]),
    ("inspect DIR missing", ["inspect", "{missing}"]),
    ("demo unknown option", ["demo", "--bogus"]),
    ("spec unknown format", ["spec", "fp4"]),
]


def _argv(template: list[str], tmp_path: Path) -> list[str]:
    values: dict[str, Any] = {"MX": MX, "BF16": BF16}
    values.update({k: _special(tmp_path, k) for k in ("file", "fifo", "missing")})
    return [a.format(**values) for a in template]


def _exit(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse
        return int(exc.code or 0)


@pytest.mark.parametrize(("what", "template"), USAGE_ERRORS, ids=[u[0] for u in USAGE_ERRORS])
def test_every_usage_error_exits_2(what: str, template: list[str], tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit(_argv(template, tmp_path)) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert captured.err.strip() or "usage:" in captured.out


@pytest.mark.parametrize("argv", [
    ["--tp", "1", "--ep", "1", "--workers", "1", "--target", "mi355x"],
    ["--source", "{BF16}", "--sample", "1"],
], ids=["smallest-values", "sample-with-source"])
def test_the_smallest_valid_values_run(argv: list[str], tmp_path: Path) -> None:
    """The other side of the boundaries above: 1 is accepted, --sample with --source runs."""
    assert _exit(["validate", str(MX), "--level", "structure", *_argv(argv, tmp_path)]) == 0
