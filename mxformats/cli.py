"""The ``mxformats`` command line.

Commands: ``spec`` (a format's code table), ``diff`` (one block through every MX producer
profile, side by side), ``check`` (run a user's quantizer through the harness), ``validate``,
``inspect`` and ``preflight`` (a quantized Kimi checkpoint folder) and ``demo`` (validate
generated ones).

Exit codes: 0 success, 1 the requested check failed, 2 usage error (argparse), a name we do
not know, a bad value or a function that cannot be imported.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING

from mxformats._version import __version__
from mxformats.formats import FORMATS, get_format
from mxformats.output import (
    DOCS_URL,
    JUnitCase,
    Output,
    UsageError,
    add_output_arguments,
    cannot_write,
    github_annotation,
    junit_xml,
    quiet_broken_pipe,
    unencodable_escaped,
)
from mxformats.text import code_hex, fields, hex_float, layout, short_float

if TYPE_CHECKING:
    from mxformats.testing.harness import CheckReport


def _spec(args: argparse.Namespace) -> int:
    try:
        return _print_spec(args)
    except BrokenPipeError:
        raise
    except OSError as exc:  # a full disk, a closed stdout: the table is not there
        return cannot_write("spec", exc)


def _print_spec(args: argparse.Namespace) -> int:
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
        return _usage("diff", "give values or --npy FILE, not both")
    if args.npy is None and not args.values:
        return _usage("diff", "give the values of a block, or --npy FILE")
    profiles = None
    if args.profiles:
        profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]
    try:
        output = Output.from_args(args)
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
    except (ValueError, UsageError) as err:
        return _usage("diff", str(err))
    differing, refused = comparison.differing(), comparison.refused()
    compared = len(comparison.results) - 1 - len(refused)
    summary = (
        f"{len(differing)} of {compared} profiles write other bytes than "
        f"{comparison.baseline!r}" + (f": {', '.join(differing)}" if differing else "")
        + (f"; refused the input: {', '.join(refused)}" if refused else "")
    )

    def text(fp: IO[str]) -> None:
        console = output.console(fp)
        if not output.quiet:
            console.print(comparison.table())
            for note in comparison.notes:
                console.print(f"note: {note}")
        console.print(summary)

    def github(fp: IO[str]) -> None:
        for r in comparison.results:
            if r.error is not None:
                print(github_annotation("notice", f"refused the input: {r.error}",
                                        title=f"diff {r.profile}"), file=fp)
            elif r.differs:
                print(github_annotation(
                    "warning", f"writes other bytes than {comparison.baseline!r}: scale of "
                    f"block(s) {list(r.scale_differs)}, codes of element(s) "
                    f"{list(r.code_differs)}", title=f"diff {r.profile}"), file=fp)
        print(github_annotation("notice", summary, title="mxformats diff"), file=fp)

    def junit(fp: IO[str]) -> None:
        # A difference is what diff reports, not a failure (the exit code is 0): a CI that
        # reads the suite must not go red where the command succeeded.
        fp.write(junit_xml(f"mxformats diff {comparison.elem.name}", [
            JUnitCase(f"diff.{comparison.elem.name}", r.profile,
                      output=f"writes other bytes than {comparison.baseline!r}: scale of "
                      f"block(s) {list(r.scale_differs)}, codes of element(s) "
                      f"{list(r.code_differs)}" if r.differs else None,
                      skipped=r.error)
            for r in comparison.results
        ]))

    return output.emit("diff", {
        "text": text, "github": github, "junit": junit,
        "json": lambda fp: print(comparison.json(), file=fp),
    }, 0)


def _check_json(report: CheckReport) -> dict[str, object]:
    """``mxformats check --format json``: the report as data (schema_version 1)."""
    m = report.mismatch
    return {
        "schema_version": 1,
        "tool_version": __version__,
        "ok": report.ok,
        "kind": report.kind,
        "function": report.function,
        "reference": report.reference,
        "profile": report.profile,
        "settings": {k: v if isinstance(v, (int, float, str, bool, type(None))) else str(v)
                     for k, v in report.settings.items()},
        "blocks_checked": report.blocks_checked,
        "runs": [{"source": r.source, "dtype": r.dtype, "blocks": r.blocks,
                  "skipped": r.skipped} for r in report.runs],
        "first_difference": None if m is None else {
            "summary": m.summary, "source": m.source, "label": m.label, "dtype": m.dtype,
            "block": m.block, "batch_size": m.batch_size, "more": m.more,
            "text": str(report)},
        "notes": list(report.notes),
        "seconds": report.seconds,
    }


def _check(args: argparse.Namespace) -> int:
    from mxformats.testing.harness import (
        CheckError,
        check_dequantizer,
        check_int4_quantizer,
        check_quantizer,
        load_function,
    )

    try:
        output = Output.from_args(args)
    except UsageError as err:
        return _usage("check", str(err))
    try:
        fn = load_function(args.function)
    except Exception as err:  # an import runs arbitrary code: report whatever it raised
        return _usage("check", f"cannot import {args.function}: {type(err).__name__}: {err}")
    try:
        dtypes = [_dtype_name(d) for d in args.dtypes.split(",")]
        elem = get_format(args.elem).name
        if args.kind == "quantizer":
            report = check_quantizer(
                fn, profile=args.profile or "ocp", elem=elem, block_size=args.block_size,
                dtypes=dtypes, level=args.level, seed=args.seed,
                max_examples=args.max_examples, torch_device=args.device)
        elif args.kind == "dequantizer":
            report = check_dequantizer(
                fn, profile=args.profile or "ocp", elem=elem, block_size=args.block_size,
                dtype=dtypes[0], level=args.level, seed=args.seed,
                max_examples=args.max_examples, torch_device=args.device)
        else:
            report = check_int4_quantizer(
                fn, profile=args.profile or "compressed-tensors", group_size=args.block_size,
                dtypes=dtypes, level=args.level, seed=args.seed,
                max_examples=args.max_examples, torch_device=args.device)
    except (ValueError, TypeError, CheckError) as err:
        return _usage("check", str(err))
    verdict = repr(report).strip("<>")

    def text(fp: IO[str]) -> None:
        if output.quiet:
            print(verdict, file=fp)
        else:
            print(report, file=fp)

    def github(fp: IO[str]) -> None:
        level = "notice" if report.ok else "error"
        print(github_annotation(level, str(report), title="mxformats check"), file=fp)

    def junit(fp: IO[str]) -> None:
        m = report.mismatch
        fp.write(junit_xml("mxformats check", [
            JUnitCase(f"check.{report.kind}", f"{r.source}[{r.dtype}]",
                      failure=str(report) if m and (m.source, m.dtype) == (r.source, r.dtype)
                      else None, message=m.summary if m else "", skipped=r.skipped)
            for r in report.runs
        ], seconds=report.seconds))

    return output.emit("check", {
        "text": text, "github": github, "junit": junit,
        "json": lambda fp: print(json.dumps(_check_json(report), indent=2), file=fp),
    }, 0 if report.ok else 1)


def _dtype_name(text: str) -> str:
    """A dtype named on the command line as numpy, ml_dtypes or torch spell it (``bf16``,
    ``torch.bfloat16``, ``float32``) -> the name the reference functions take."""
    key = text.strip().lower().removeprefix("torch.").removeprefix("np.")
    name = _DTYPE_ALIASES.get(key, key)
    if name not in _DTYPE_ALIASES.values():
        raise ValueError(f"unknown dtype {text!r}: use float32, bfloat16, float16 or float64")
    return name


def _dtype_argument(text: str) -> str:
    try:
        return _dtype_name(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


_DTYPE_ALIASES = {
    "float32": "float32", "f32": "float32", "fp32": "float32", "float": "float32",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "f16": "float16", "fp16": "float16", "half": "float16",
    "float64": "float64", "f64": "float64", "fp64": "float64", "double": "float64",
}


def _usage(command: str, message: str) -> int:
    print(f"mxformats {command}: {message}", file=sys.stderr)
    return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mxformats",
        description=(
            "Bit-exact reference numerics for the low-precision formats of quantized MoE "
            "checkpoints: E2M1 (FP4), E8M0 (MX scale), FP8 E4M3 fn/fnuz, E5M2, FP6, INT4."
        ),
        epilog=f"Documentation: {DOCS_URL} (normative spec: the spec/ folder of the "
        "repository). Every reporting command takes --format text|json|junit|github, -o FILE, "
        "-q and --color. Exit codes: 0 ok, 1 a check found a difference or an error, 2 usage "
        "error or could not run (each command's --help lists its own).",
    )
    parser.add_argument("--version", action="version", version=f"mxformats {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    from mxformats.validate.commands import add_parsers

    add_parsers(commands)  # validate first: the main job
    from mxformats.validate.preflight import add_parser as add_preflight

    add_preflight(commands)
    from mxformats.validate.compare_command import add_parser as add_compare

    add_compare(commands)

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
        "Exit codes: 0 printed, 2 bad input. JSON: schema_version 1.",
    )
    diff.add_argument("values", nargs="*", metavar="VALUE",
                      help="the block's values: decimals, hex floats (0x1.8p+1), inf, nan")
    diff.add_argument("--npy", type=Path, metavar="FILE",
                      help="read the values from a .npy file (rows split into blocks)")
    diff.add_argument("--elem", default="e2m1", metavar="FORMAT",
                      help="MX element format: e2m1 (default), e4m3fn, e5m2, e2m3, e3m2 "
                      "(or a torch, ml_dtypes or safetensors name)")
    diff.add_argument("--profiles", metavar="A,B,...",
                      help="producer profiles to compare (default: all; ocp is always shown)")
    diff.add_argument("--consumer", metavar="PROFILE",
                      help="decode every result with this consumer profile (default: the "
                      "producer's default consumer: mxformats.pairing)")
    diff.add_argument("--dtype", default="float32", type=_dtype_argument, metavar="DTYPE",
                      help="input dtype given to the producers: float32 (default), bfloat16, "
                      "float16, float64 (or bf16, torch.bfloat16, ...); a producer that does "
                      "not take it is given the first of bfloat16, float16 it takes, and the "
                      "report says so")
    diff.add_argument("--block-size", type=int, default=32, metavar="N",
                      help="elements per block (default 32)")
    add_output_arguments(diff)
    diff.set_defaults(handler=_diff)

    check = commands.add_parser(
        "check",
        help="check your quantizer or dequantizer against a profile, byte for byte",
        description="Import MODULE:FUNCTION (or path/to/file.py:FUNCTION) and run it through "
        "the spec vectors, exhaustive bfloat16/float16 sweeps, boundary blocks and Hypothesis "
        "cases, comparing its bytes with the reference of the profile; print the first "
        "differing block. The function is imported and called: this runs its code, so only "
        "name code you trust. A quantizer has quantize_mx's signature, fn(x, elem, *, "
        "block_size, axis, profile) -> (codes, scales); a dequantizer dequantize_mx's; an "
        "int4-quantizer quantize_int4's, fn(x, *, group_size, axis, profile) -> (q, scales).",
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
    add_output_arguments(check, json_alias=None)
    check.set_defaults(handler=_check)

    spec = commands.add_parser(
        "spec",
        help="print a format's code table",
        description="Print every code of a format with its fields and exact value, "
        "or list the formats when no name is given.",
    )
    spec.add_argument(
        "format", nargs="?", metavar="FORMAT",
        help=f"one of: {', '.join(FORMATS)}, or its torch, ml_dtypes or safetensors name "
        "(float8_e4m3fn, F8_E4M3), in any case",
    )
    spec.set_defaults(handler=_spec)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (a closed pipe on stdout exits 141,
    quietly; a character stdout cannot encode is written escaped)."""
    with quiet_broken_pipe(), unencodable_escaped():
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
