"""The ``mxformats`` command line.

Commands: ``spec`` (a format's code table), ``diff`` (one block through every MX producer
profile, side by side), ``check`` (run a user's quantizer through the harness), ``validate``
and ``inspect`` (a quantized Kimi checkpoint folder) and ``demo`` (validate generated ones).

Exit codes: 0 success, 1 the requested check failed, 2 usage error (argparse), a name we do
not know, a bad value or a function that cannot be imported.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mxformats._version import __version__
from mxformats.formats import FORMATS, get_format
from mxformats.text import code_hex, fields, hex_float, layout, short_float


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


def _number(text: str) -> float:
    """A value typed on the command line: decimal, hex float, inf, nan (with a sign)."""
    t = text.strip().lower()
    if t in ("nan", "+nan", "-nan"):
        return -float("nan") if t.startswith("-") else float("nan")
    try:
        return float(t)
    except ValueError:
        pass
    try:
        if "0x" not in t:  # float.fromhex would read "abc" as 2748
            raise ValueError(t)
        return float.fromhex(t)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a number (write decimals like 0.25 or -3e38, hex floats like "
            "0x1.8p+1, inf, -inf or nan; separate values with spaces or commas)"
        ) from None


def _split_values(tokens: list[str]) -> list[float]:
    out = []
    for token in tokens:
        out += [_number(part) for part in token.replace(",", " ").split()]
    return out


def _diff(args: argparse.Namespace) -> int:
    from mxformats.compare import compare_profiles

    if args.npy is not None and args.values:
        print("mxformats diff: give values or --npy FILE, not both", file=sys.stderr)
        return 2
    if args.npy is None and not args.values:
        print("mxformats diff: give the values of a block, or --npy FILE", file=sys.stderr)
        return 2
    profiles = None
    if args.profiles:
        profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]
    try:
        if args.npy is not None:
            if not args.npy.is_file():
                raise ValueError(f"no such file: {args.npy}")
            block: object = args.npy
        else:
            block = _split_values(args.values)
        comparison = compare_profiles(
            block,  # type: ignore[arg-type]
            args.elem,
            profiles,
            consumer=args.consumer,
            block_size=args.block_size,
            dtype=args.dtype,
        )
    except ValueError as err:
        print(f"mxformats diff: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(comparison.json())
        return 0
    from rich.console import Console

    console = Console()
    console.print(comparison.table())
    for note in comparison.notes:
        console.print(f"note: {note}")
    differing, refused = comparison.differing(), comparison.refused()
    compared = len(comparison.results) - 1 - len(refused)
    console.print(
        f"{len(differing)} of {compared} profiles write other bytes than "
        f"{comparison.baseline!r}" + (f": {', '.join(differing)}" if differing else "")
        + (f"; refused the input: {', '.join(refused)}" if refused else "")
    )
    return 0


def _check(args: argparse.Namespace) -> int:
    from mxformats.testing.harness import (
        CheckError,
        check_dequantizer,
        check_int4_quantizer,
        check_quantizer,
        load_function,
    )

    try:
        fn = load_function(args.function)
    except Exception as err:  # an import runs arbitrary code: report whatever it raised
        print(f"mxformats check: cannot import {args.function}: {type(err).__name__}: {err}",
              file=sys.stderr)
        return 2
    try:
        if args.kind == "quantizer":
            report = check_quantizer(
                fn, profile=args.profile or "ocp", elem=args.elem, block_size=args.block_size,
                dtypes=args.dtypes.split(","), level=args.level, seed=args.seed,
                max_examples=args.max_examples, torch_device=args.device)
        elif args.kind == "dequantizer":
            report = check_dequantizer(
                fn, profile=args.profile or "ocp", elem=args.elem, block_size=args.block_size,
                dtype=args.dtypes.split(",")[0], level=args.level, seed=args.seed,
                max_examples=args.max_examples, torch_device=args.device)
        else:
            report = check_int4_quantizer(
                fn, profile=args.profile or "compressed-tensors", group_size=args.block_size,
                dtypes=args.dtypes.split(","), level=args.level, seed=args.seed,
                max_examples=args.max_examples, torch_device=args.device)
    except (ValueError, TypeError, CheckError) as err:
        print(f"mxformats check: {err}", file=sys.stderr)
        return 2
    print(report)
    return 0 if report.ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mxformats",
        description=(
            "Bit-exact reference numerics for the low-precision formats of quantized MoE "
            "checkpoints: E2M1 (FP4), E8M0 (MX scale), FP8 E4M3 fn/fnuz, E5M2, FP6, INT4."
        ),
        epilog="Normative spec: the spec/ folder of the repository. Exit codes: 0 ok, "
        "1 a check found a difference, 2 usage error.",
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

    diff = commands.add_parser(
        "diff",
        help="quantize one block with every MX producer profile and compare the bytes",
        description="Quantize a block with each MX producer profile (ocp, torchao-*, triton-*, "
        "quark, compressed-tensors, microxcaling, vllm, ...) and print each one's scale byte, "
        "codes and decoded values side by side, the cells that differ from 'ocp' highlighted: "
        "which MXFP4 is golden? Values are padded with +0.0 to whole blocks.",
        epilog="Examples: mxformats diff 6 5 0.25 0.75 | mxformats diff --profiles "
        "torchao-floor,quark 7 1 0.3 -2.9 | mxformats diff --npy block.npy --json. "
        "Put -- before the values when the first one is -inf or -nan. "
        "Exit codes: 0 printed, 2 bad input.",
    )
    diff.add_argument("values", nargs="*", metavar="VALUE",
                      help="the block's values: decimals, hex floats (0x1.8p+1), inf, nan")
    diff.add_argument("--npy", type=Path, metavar="FILE",
                      help="read the values from a .npy file (rows split into blocks)")
    diff.add_argument("--elem", default="e2m1", metavar="FORMAT",
                      help="MX element format: e2m1 (default), e4m3fn, e5m2, e2m3, e3m2")
    diff.add_argument("--profiles", metavar="A,B,...",
                      help="producer profiles to compare (default: all; ocp is always shown)")
    diff.add_argument("--consumer", metavar="PROFILE",
                      help="decode every result with this consumer profile (default: the "
                      "consumer named like the producer, else ocp)")
    diff.add_argument("--dtype", default="float32",
                      choices=("float32", "bfloat16", "float16", "float64"),
                      help="input dtype given to the producers (default float32)")
    diff.add_argument("--block-size", type=int, default=32, metavar="N",
                      help="elements per block (default 32)")
    diff.add_argument("--json", action="store_true",
                      help="print JSON (schema_version 1) instead of the table")
    diff.set_defaults(handler=_diff)

    check = commands.add_parser(
        "check",
        help="check your quantizer or dequantizer against a profile, byte for byte",
        description="Import MODULE:FUNCTION (or path/to/file.py:FUNCTION) and run it through "
        "the spec vectors, exhaustive bfloat16/float16 sweeps, boundary blocks and Hypothesis "
        "cases, comparing its bytes with the reference of the profile; print the first "
        "differing block. The function is imported and called: this runs its code, so only "
        "name code you trust. A quantizer has quantize_mx's signature, fn(x, elem, *, "
        "block_size, axis, profile) -> (codes, scales); a dequantizer dequantize_mx's.",
        epilog="Example: mxformats check mykernels.mx:quantize --profile ocp. "
        "Exit codes: 0 identical on every case, 1 a difference (printed), "
        "2 usage or import error.",
    )
    check.add_argument("function", metavar="MODULE:FUNCTION",
                       help="the function to check (the current directory is importable)")
    check.add_argument("--kind", default="quantizer",
                       choices=("quantizer", "dequantizer", "int4-quantizer"),
                       help="what the function is (default quantizer)")
    check.add_argument("--profile", metavar="P",
                       help="the profile to reproduce (default ocp; compressed-tensors for "
                       "int4-quantizer)")
    check.add_argument("--elem", default="e2m1", metavar="FORMAT",
                       help="MX element format (default e2m1)")
    check.add_argument("--block-size", type=int, default=32, metavar="N",
                       help="elements per block, or per group for int4 (default 32)")
    check.add_argument("--dtypes", default="float32,bfloat16", metavar="D,...",
                       help="input dtypes (default float32,bfloat16); for a dequantizer, "
                       "the output dtype")
    check.add_argument("--level", type=int, default=1, metavar="N",
                       help="depth of the boundary tables: 1 (default) or 2 (every exponent)")
    check.add_argument("--seed", type=int, default=1, metavar="N",
                       help="seed of the random cases (default 1)")
    check.add_argument("--max-examples", type=int, default=100, metavar="N",
                       help="Hypothesis examples per dtype (default 100)")
    check.add_argument("--device", metavar="DEVICE",
                       help="pass torch tensors on this device (cpu, cuda) instead of numpy")
    check.set_defaults(handler=_check)

    from mxformats.validate.commands import add_parsers

    add_parsers(commands)
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
