"""The ``mxformats`` command line.

Exit codes: 0 success, 1 the requested check failed, 2 usage error (argparse) or a name we do
not know.
"""

from __future__ import annotations

import argparse
import sys

from mxformats._version import __version__
from mxformats.formats import FORMATS, get_format
from mxformats.specgen import code_hex, fields, hex_float, layout, short_float


def _spec(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if args.format is None:
        table = Table(title="mxformats element formats")
        for column in ("name", "title", "bits", "max", "NaN codes", "Inf codes", "-0"):
            table.add_column(column)
        for f in FORMATS.values():
            table.add_row(
                f.name, f.title, str(f.bits), short_float(f.max),
                " ".join(code_hex(f, c) for c in f.nan_codes) or "none",
                " ".join(code_hex(f, c) for c in f.inf_codes) or "none",
                "yes" if f.signed_zero else "no",
            )
        console.print(table)
        console.print("Show one with: mxformats spec NAME")
        return 0
    try:
        fmt = get_format(args.format)
    except ValueError as err:
        print(f"mxformats spec: {err}", file=sys.stderr)
        return 2
    table = Table(title=f"{fmt.title}: layout {layout(fmt)}, max {short_float(fmt.max)}")
    for column in ("code", "fields", "value", "hex float"):
        table.add_column(column, justify="right" if column != "fields" else "left")
    for code in range(1 << fmt.bits):
        value = float(fmt.values[code])
        table.add_row(code_hex(fmt, code), fields(fmt, code), short_float(value), hex_float(value))
    console.print(table)
    console.print(
        f"roundings: {', '.join(fmt.roundings)}; overflows: {', '.join(fmt.overflows)} "
        f"(default {fmt.default_overflow}). Normative text: spec/{fmt.name}.md"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mxformats",
        description=(
            "Bit-exact reference numerics for the low-precision formats of quantized MoE "
            "checkpoints: E2M1 (FP4), E8M0 (MX scale), FP8 E4M3 fn/fnuz, E5M2, FP6, INT4."
        ),
        epilog="Normative spec: the spec/ folder of the repository. Exit codes: 0 ok, 2 usage.",
    )
    parser.add_argument("--version", action="version", version=f"mxformats {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    spec = commands.add_parser(
        "spec",
        help="print a format's code table",
        description="Print every code of a format with its fields and exact value, "
        "or list the formats when no name is given.",
    )
    spec.add_argument(
        "format", nargs="?", metavar="FORMAT", help=f"one of: {', '.join(FORMATS)}"
    )
    spec.set_defaults(handler=_spec)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
