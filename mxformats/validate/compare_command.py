"""The ``compare`` subcommand (wired into :mod:`mxformats.cli`): :mod:`.comparison` of two
checkpoints as a text table, JSON, JUnit, GitHub annotations and ``--html``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import IO, Any

from mxformats.output import printable

__all__ = ["add_parser"]

#: Modules listed in the text report (the JSON report lists them all).
SHOWN = 10
#: The text table's heading of the summary keys it shows (80 columns; the JSON has them all).
_HEADS = {"modules": "n", "distance_median": "distance", "a_error_median": "A error",
          "b_error_median": "B error", "a_closer": "A closer", "b_closer": "B closer"}


def _text(data: dict[str, Any], quiet: bool, console: Any) -> None:
    from rich import box
    from rich.table import Table

    line = _verdict(data)
    if not quiet:
        table = Table(title="per projection (medians)", box=box.SIMPLE_HEAD)
        first: dict[str, Any] = next(iter(data["summary"].values()), {})
        keys = [k for k in _HEADS if k in first]
        table.add_column("projection", no_wrap=True)
        for k in keys:
            table.add_column(_HEADS[k], no_wrap=True)
        for proj, row in data["summary"].items():
            table.add_row(printable(proj), *(f"{row[k]:.3g}" if isinstance(row[k], float)
                                             else str(row[k]) for k in keys))
        console.print(table)
        worst = sorted((m for m in data["modules"] if "problem" not in m),
                       key=lambda m: -float(m["distance"]))[:SHOWN]
        for m in worst:
            extra = (f", error A {float(m['a_error']):.5g} B {float(m['b_error']):.5g} "
                     f"(closer: {m['closer']})" if data["source"] else "")
            console.print(f"  {printable(m['module'])}: distance {float(m['distance']):.5g}"
                          f"{extra}")
        for m in data["modules"]:
            if "problem" in m:
                console.print(f"  not compared: {printable(m['module'])}: "
                              f"{printable(m['problem'])}")
    console.print(line)


def _verdict(data: dict[str, Any]) -> str:
    n = len(data["modules"])
    head = (f"{printable(data['a']['checkpoint'])} ({data['a']['format']}) vs "
            f"{printable(data['b']['checkpoint'])} ({data['b']['format']}): {n} module(s)")
    if data["source"]:
        closer = [m.get("closer") for m in data["modules"]]
        head += (f"; closer to the source: A in {closer.count('A')}, B in "
                 f"{closer.count('B')}, tied in {closer.count('tie')}")
    if not data["complete"]:
        head += f"; {sum('problem' in m for m in data['modules'])} not compared"
    return head


def cmd_compare(args: argparse.Namespace) -> int:
    from mxformats.output import JUnitCase, Output, UsageError, github_annotation, junit_xml

    from .commands import html_unavailable
    from .comparison import CompareError, compare, to_json
    try:
        output = Output.from_args(args)
    except UsageError as err:
        print(f"mxformats compare: {err}", file=sys.stderr)
        return 2
    missing = html_unavailable() if args.html is not None else None
    if missing is not None:
        print(f"mxformats compare: {missing}", file=sys.stderr)
        return 2
    if args.source is not None and not args.source.is_dir():
        print(f"mxformats compare: --source {printable(str(args.source))} is not a directory",
              file=sys.stderr)
        return 2
    allow = tuple(Path(p) for p in args.allow_symlink_root or ())
    try:
        data = to_json(compare(args.a, args.b, args.source, allow))
    except CompareError as err:
        print(f"mxformats compare: {printable(str(err))}", file=sys.stderr)
        return 2
    if args.html is not None:
        from .html import render_comparison, write_html  # matplotlib: only with --html

        code = write_html(args.html, "compare", lambda: render_comparison(data))
        if code:
            return code
    line = _verdict(data)
    problem = None if data["complete"] else line

    def json_report(fp: IO[str]) -> None:
        json.dump(data, fp, indent=2)
        fp.write("\n")

    return output.emit("compare", {
        "text": lambda fp: _text(data, output.quiet, output.console(fp)),
        "json": json_report,
        "github": lambda fp: print(github_annotation(
            "error" if problem else "notice", line, title="mxformats compare"), file=fp),
        "junit": lambda fp: fp.write(junit_xml("mxformats compare", [
            JUnitCase("compare", "COMPARE", failure=problem, message=problem or "")])),
    }, 0 if data["complete"] else 1)


def add_parser(commands: Any) -> None:
    """Add ``compare`` to the CLI's subparsers."""
    from mxformats.output import add_output_arguments

    c = commands.add_parser(
        "compare",
        help="two quantizations of one model, module by module (and against the source)",
        description="Decode every module either checkpoint quantizes, in both, as the engine "
        "does, and report the relative distance between them; with --source, each one's "
        "relative error against the source weight and which is closer, and a summary per "
        "projection kind. Any two formats validate reads; hf://ORG/NAME[@REVISION] for "
        "either side reads only each module's tensors. One module in memory at a time.",
        epilog="Exit codes: 0 compared, 1 a module could not be read or decoded on one "
        "side (listed), 2 usage error, an unreadable checkpoint, or two checkpoints whose "
        "configs imply different architectures.",
    )
    c.add_argument("a", metavar="A", help="a checkpoint folder, or hf://ORG/NAME[@REVISION]")
    c.add_argument("b", metavar="B", help="the other checkpoint, of the same model")
    c.add_argument("--source", type=Path, metavar="DIR",
                   help="the checkpoint both were quantized from (BF16, INT4 or FP8 block)")
    c.add_argument("--html", type=Path, metavar="REPORT.html",
                   help="also write the comparison as one self-contained HTML page (needs "
                   "mxformats[report])")
    c.add_argument("--allow-symlink-root", action="append", metavar="DIR",
                   help="also follow symlinks that resolve under DIR (repeatable)")
    add_output_arguments(c)
    c.set_defaults(handler=cmd_compare)
