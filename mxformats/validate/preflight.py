"""``mxformats preflight DIR``: where a checkpoint will run before anyone books a cluster.

For each engine (vLLM, SGLang) and target (H100/H200, B200/GB200, MI300X, MI355X) it says
which kernel path the engine takes (native, emulated, unsupported, or not declared), the
paths it skips and why (kernel-path eligibility, e.g. SGLang's mxint4 path), and the
admissible tensor-parallel sizes. Everything comes from the checkpoint's descriptor: its
:attr:`~.descriptors.Descriptor.engine_paths` (each citing the loader code it comes from),
:meth:`~.descriptors.Descriptor.path_problems` and
:attr:`~.descriptors.Descriptor.tp_multiple`, the same data ``validate --target/--tp`` and
``inspect`` use; this module never names a format.

The exit code is ``validate --level structure``'s (fused siblings with different schemes are
its FUSED_PAIR_MISMATCH): 0 no errors, 1 errors found, 2 could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import IO, TYPE_CHECKING, Any

from mxformats.output import add_output_arguments

from .deployment import checkpoint_tp
from .findings import Level, Severity
from .model import Options
from .targets import TARGET_NAMES, TARGETS

if TYPE_CHECKING:
    from rich.console import Console

    from mxformats.output import Output

    from .descriptors import Descriptor
    from .model import Checkpoint
    from .report import Report

__all__ = ["ENGINES", "TARGET_NAMES", "Row", "add_parser", "engine_summary", "grid_notes",
           "preflight_rows"]

#: The engines the preflight covers.
ENGINES = ("vllm", "sglang")


@dataclass
class Row:
    """One engine on one target: the ``path`` kind (``native``, ``emulated``, ``unsupported``
    or ``undeclared``), what it runs and the loader code that says so, the paths it skipped
    (``path: why``), and the admissible TP sizes (empty where it cannot run)."""

    engine: str
    target: str
    path: str
    what: str = ""
    source: str = ""
    skipped: list[str] = field(default_factory=list)
    tp: list[int] = field(default_factory=list)


def preflight_rows(ckpt: Checkpoint, descriptor: Descriptor) -> list[Row]:
    """The preflight table of ``ckpt`` (stored as ``descriptor`` declares), engine by target."""
    tp = checkpoint_tp(ckpt, descriptor) or []
    rows = []
    for engine in ENGINES:
        for name, key in TARGET_NAMES.items():
            vendor, arch, _ = TARGETS[key]
            row = Row(engine, name, "undeclared")
            for path in descriptor.paths_for(ckpt):
                if not path.applies(engine, vendor, arch):
                    continue
                unmet = [] if path.requires is None else descriptor.path_problems(
                    ckpt, path.requires)
                if unmet:
                    row.skipped.append(f"{path.requires} ({path.source}): " + "; ".join(unmet))
                    continue
                row.path, row.what, row.source = path.kind, path.describe(name, arch), path.source
                break
            row.tp = [] if row.path == "unsupported" else tp
            rows.append(row)
    return rows


#: DeepSeek-V2/Kimi attention builds kv_a_proj_with_mqa replicated (ReplicatedLinear, or inside
#: the replicated fused_qkv_a_proj): no TP size splits it.
_REPLICATED_SOURCE = ("vllm-project/vllm vllm/model_executor/models/deepseek_v2.py @ "
                      "b863fe5bf4e19680572603b4e166faefc5725551")


def grid_notes(ckpt: Checkpoint, descriptor: Descriptor) -> list[str]:
    """Quantized replicated modules whose rows are not a multiple of their format's block
    (Kimi's 576-row ``kv_a_proj_with_mqa`` = kv_lora_rank 512 + qk_rope_head_dim 64 under
    128-row FP8 blocks): their scale grid is the ceil shape, and TP never cuts them. The
    block is that of the format the module is stored in (a mixed-precision checkpoint's
    member for it)."""
    a = ckpt.arch
    if a is None:
        return []
    rows = a.kv_lora + a.qk_rope
    blocks = sorted({block for n, m in ckpt.modules.items()
                     if m.quantized and n.endswith(".kv_a_proj_with_mqa")
                     and (block := descriptor.for_module(ckpt, n).tp_multiple)})
    return [f"kv_a_proj_with_mqa has {rows} rows, not a multiple of {block}: its scale grid "
            f"has ceil({rows}/{block}) = {-(-rows // block)} rows, the last block partial; "
            f"it is replicated, so no TP size cuts it ({_REPLICATED_SOURCE})"
            for block in blocks if rows % block]


def _by_engine(rows: list[Row]) -> dict[str, str]:
    """Per engine, its path on each target in words."""
    out: dict[str, list[str]] = {}
    for r in rows:
        out.setdefault(r.engine, []).append(f"{r.target} {r.path}")
    return {engine: ", ".join(parts) for engine, parts in out.items()}


def engine_summary(ckpt: Checkpoint, descriptor: Descriptor) -> dict[str, str]:
    """Per engine, its path on each target in words (``inspect``'s consumer profile)."""
    return _by_engine(preflight_rows(ckpt, descriptor))


def _table(rows: list[Row], console: Console) -> None:
    from rich.table import Table

    from mxformats.output import printable

    table = Table(title="mxformats preflight", show_lines=True)
    for column in ("engine", "target", "path", "admissible TP", "what (source)"):
        table.add_column(column, overflow="fold")
    for r in rows:
        words = printable(r.what or "no path declared for this format")
        if r.source:
            words += f"\n  source: {r.source}"
        for skipped in r.skipped:
            words += f"\n  skipped {printable(skipped)}"
        table.add_row(r.engine, r.target, r.path, ", ".join(map(str, r.tp)) or "none", words)
    console.width = max(console.width, 140)  # the sources are long: fold less
    console.print(table)


def _summaries(rows: list[Row]) -> list[str]:
    """One line per engine: its path on each target (``-q``, the github notices)."""
    return [f"{engine}: {paths}" for engine, paths in _by_engine(rows).items()]


def _renderers(report: Report, rows: list[Row], notes: list[str], output: Output,
               fatal: str | None) -> dict[str, Callable[[IO[str]], object]]:
    """The four reports of one preflight: ``validate --level structure``'s findings (each with
    its check's catalogue ``url``, ``meaning`` and ``fix`` in JSON) and the table. ``fatal``:
    why the folder could not be read (no rows; the text report leaves it to stderr, the
    machine reports carry it, as ``validate``'s do)."""
    from mxformats.output import JUnitCase, github_annotation, junit_xml, printable

    from .report import exit_code, print_report, to_github

    errors = [f"{f.check.id}: {printable(f.message)}" for f in report.findings
              if f.effective_severity is Severity.ERROR]
    if fatal is not None:
        errors.append(f"cannot read the checkpoint: {printable(fatal)}")

    def text(fp: IO[str]) -> None:
        if fatal is not None:
            return
        console = output.console(fp)
        print_report(report, fp, quiet=output.quiet, console=console)
        for line in _summaries(rows) if output.quiet else ():
            console.print(line)
        if not output.quiet:
            _table(rows, console)
            for note in notes:
                console.print(f"note: {note}")

    def json_report(fp: IO[str]) -> None:
        json.dump({"format": report.format, "fatal": fatal,
                   "exit": 2 if fatal is not None else exit_code(report), "notes": notes,
                   "findings": [f.to_json() for f in report.findings],
                   "rows": [asdict(r) for r in rows]}, fp, indent=2)
        fp.write("\n")

    def junit(fp: IO[str]) -> None:
        failure = "\n".join(errors) or None
        cases = [JUnitCase("preflight", "structure", failure=failure,
                           message=f"{len(errors)} error(s)" if errors else "")]
        cases += [JUnitCase(f"preflight.{r.engine}", r.target,
                            skipped=None if r.path in ("native", "emulated") else
                            f"{r.path}: {printable(r.what or 'no path declared')}")
                  for r in rows]
        fp.write(junit_xml("mxformats preflight", cases, seconds=report.seconds))

    def github(fp: IO[str]) -> None:
        fp.write(to_github(report))
        if fatal is not None and report.fatal is None:
            print(github_annotation("error", errors[-1], title="mxformats preflight"), file=fp)
        for line in [*_summaries(rows), *notes]:
            print(github_annotation("notice", printable(line), title="mxformats preflight"),
                  file=fp)

    return {"text": text, "json": json_report, "junit": junit, "github": github}


def cmd_preflight(args: argparse.Namespace) -> int:
    """Run ``validate --level structure`` and report it with the preflight table, in the
    format ``--format`` names (:mod:`mxformats.output`)."""
    from mxformats.output import Output, UsageError, printable

    from .descriptors import by_format
    from .report import exit_code
    from .runner import validate

    try:
        output = Output.from_args(args)
    except UsageError as err:
        print(f"mxformats preflight: {err}", file=sys.stderr)
        return 2
    report = validate(args.dir, Options(level=Level.STRUCTURE))
    ckpt = report.ckpt
    if report.fatal is not None or ckpt is None:
        fatal = str(report.fatal or "no checkpoint was read")
        print(f"mxformats preflight: cannot read {printable(args.dir)}: {printable(fatal)}",
              file=sys.stderr)
        return output.emit("preflight", _renderers(report, [], [], output, fatal), 2)
    descriptor = ckpt.descriptor or by_format(ckpt.format.value)
    rows, notes = preflight_rows(ckpt, descriptor), grid_notes(ckpt, descriptor)
    return output.emit("preflight", _renderers(report, rows, notes, output, None),
                       exit_code(report))


def add_parser(commands: Any) -> None:
    """Add ``preflight`` to the CLI's subparsers."""
    p = commands.add_parser(
        "preflight",
        help="where a checkpoint runs: kernel path and admissible TP per engine and target",
        description="For vLLM and SGLang on H100/H200, B200/GB200, MI300X and MI355X: the "
        "kernel path (native, emulated, unsupported), the paths skipped and why, and the "
        "admissible tensor-parallel sizes, each rule citing the loader code it comes from. "
        "Runs the structure-level checks first.",
        epilog="Exit codes: 0 no errors, 1 errors found (e.g. fused siblings with different "
        "schemes), 2 could not run.",
    )
    p.add_argument("dir", metavar="DIR", help="the checkpoint folder, or hf://ORG/NAME[@REVISION]")
    add_output_arguments(p, quiet_help="text: print only the verdict and one line per engine")
    p.set_defaults(handler=cmd_preflight)
