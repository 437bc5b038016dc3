"""The ``validate``, ``inspect`` and ``demo`` subcommands (wired into :mod:`mxformats.cli`)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from mxformats.output import add_output_arguments, check_url

from .findings import Level
from .model import Options
from .readers import HUB_PREFIX
from .targets import TARGETS

__all__ = ["add_parsers"]

def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


@dataclass
class _Progress:
    """A byte progress bar with an ETA on stderr (only when it is a TTY and not ``quiet``):
    ``plan`` sets the total once the headers are read, ``advance`` counts bytes read."""

    bar: Any = None
    task: Any = None

    @classmethod
    def start(cls, quiet: bool, remote: bool = False) -> _Progress:
        if quiet or not sys.stderr.isatty():
            return cls()
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            ProgressColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )
        from rich.text import Text

        from .readers.hub import in_flight

        class InFlight(ProgressColumn):
            """The Hub reads this process has in flight (``hf://`` only)."""

            def render(self, task: Any) -> Text:
                return Text(f"{in_flight()} requests in flight")

        bar = Progress(
            "validating",
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            *([InFlight()] if remote else []),
            console=Console(file=sys.stderr),
            transient=True,
        )
        task = bar.add_task("read", total=None)
        bar.start()
        return cls(bar, task)

    def plan(self, total: int) -> None:
        if self.bar is not None:
            self.bar.update(self.task, total=total or None)

    def advance(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(self.task, advance=n)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _options(args: argparse.Namespace) -> Options:
    opts = Options(
        level=Level(args.level),
        target=args.target,
        tp=args.tp,
        ep=args.ep,
        source=args.source,
        sample=args.sample,
        manifest=args.manifest,
        strict=args.strict,
        allow_symlink_root=tuple(Path(p) for p in args.allow_symlink_root or ()),
        yes=args.yes,
        executor=args.executor,
        ray_address=args.ray_address,
        resume=args.resume,
        hub_connections=args.hub_connections,
        device=args.device,
    )
    if args.workers is not None:
        opts.workers = args.workers
    return opts


def _usage_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the options that argparse cannot see, or None (exit 2 if any)."""
    from mxformats.output import printable

    if args.source is not None and not Path(args.source).is_dir():
        return f"--source {printable(str(args.source))} is not a directory"
    if args.sample is not None and args.source is None:
        return "--sample compares modules with --source; give --source too"
    if args.ray_address is not None and args.executor != "ray":
        return "--ray-address names the Ray cluster of --executor ray; give --executor ray too"
    if args.device is not None and args.source is None and args.level != "full":
        return ("--device runs --source's reproduction and --level full's scan; give one of "
                "them too")
    return None


def html_unavailable() -> str | None:
    """Why ``--html`` cannot run here (matplotlib, the ``report`` extra, does not import), or
    None. Asked at startup, before any checking, by ``validate`` and ``compare``; the plain
    commands never import matplotlib."""
    try:
        import matplotlib.backends.backend_svg  # noqa: F401
    except ImportError as err:
        return (f'--html draws its plots with matplotlib ({err}): pip install '
                '"mxformats[report]"')
    return None


def _check_ids(texts: list[str] | None) -> frozenset[str]:
    """``--select``/``--ignore``: comma-separated check IDs (any case), the option repeated
    or not (every occurrence counts); an unknown ID is a usage error naming the catalogue."""
    from .catalogue import load_all

    if not texts:
        return frozenset()
    known = load_all()
    ids = frozenset(part.strip().upper() for text in texts for part in text.split(",")
                    if part.strip())
    unknown = sorted(ids - known.keys())
    if unknown:
        raise ValueError(f"unknown check ID(s): {', '.join(unknown)} (the catalogue: "
                         "mxformats validate --help, or docs/validate-checks.md)")
    return ids


#: The exit code of a run interrupted (SIGINT, SIGTERM) while its tasks ran: 128 + SIGINT, as
#: a shell reports a process that Ctrl-C ended. Its report (``-o``) is marked ``incomplete``
#: and holds the finished tasks, for ``--resume``.
INTERRUPTED = 130


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM (a scheduler's stop) ends the run as Ctrl-C does: the report still comes out."""
    raise KeyboardInterrupt


def cmd_validate(args: argparse.Namespace) -> int:
    from mxformats.output import Output, UsageError, printable

    from .device import device_problem
    from .executors import ExecutorUnavailable, executor_for
    from .report import dump_json, print_report, to_github, to_junit
    from .runner import exit_code, validate

    problem = _usage_error(args)
    try:
        output = Output.from_args(args)
        select, ignore = _check_ids(args.select), _check_ids(args.ignore)
    except (UsageError, ValueError) as err:
        problem = str(err)
    if problem is not None:
        print(f"mxformats validate: {problem}", file=sys.stderr)
        return 2
    missing = (html_unavailable() if args.html is not None else None) or device_problem(
        args.device)
    if missing is not None:  # at startup, before any checking
        print(f"mxformats validate: {missing}", file=sys.stderr)
        return 2
    opts = _options(args)
    try:
        executor = executor_for(opts)
    except ExecutorUnavailable as err:
        print(f"mxformats validate: {err}", file=sys.stderr)
        return 2
    progress = _Progress.start(args.quiet, remote=args.dir.startswith(HUB_PREFIX))

    def plan(total: int) -> None:
        if opts.level is Level.FULL and args.dir.startswith(HUB_PREFIX):
            print(f"mxformats validate: --level full reads {total:,} bytes "
                  f"({total / 1e9:.2f} GB) of tensor data", file=sys.stderr)
        progress.plan(total)

    main_thread = threading.current_thread() is threading.main_thread()  # signal's rule
    previous = signal.signal(signal.SIGTERM, _interrupt) if main_thread else None
    try:
        report = validate(args.dir, opts, on_read=progress.advance, on_plan=plan,
                          executor=executor)
    except KeyboardInterrupt:  # while loading, before any task: nothing worth a report yet
        print("mxformats validate: interrupted", file=sys.stderr)
        return INTERRUPTED
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
        progress.stop()
    report.restrict(select, ignore)
    if report.fatal is not None:
        print(
            f"mxformats validate: cannot validate {printable(args.dir)}: "
            f"{printable(report.fatal)}",
            file=sys.stderr,
        )

    if args.html is not None:
        from .html import render_report, write_html  # matplotlib: only with --html

        code = write_html(args.html, "validate", lambda: render_report(report))
        if code:
            return code

    def text(fp: IO[str]) -> None:
        if report.fatal is None:  # the reason is on stderr already
            print_report(report, fp, quiet=output.quiet, console=output.console(fp))

    return output.emit("validate", {
        "text": text,
        "json": lambda fp: dump_json(report, fp),
        "junit": lambda fp: fp.write(to_junit(report) + "\n"),
        "github": lambda fp: fp.write(to_github(report)),
    }, INTERRUPTED if report.incomplete else exit_code(report, args.strict))


def _architecture(names: Any) -> str | None:
    """The model class config.json's ``architectures`` names first (transformers reads a
    list of class names); None when it is anything else (a hostile config never crashes
    ``inspect``)."""
    if isinstance(names, list) and names and isinstance(names[0], str):
        return names[0]
    return None


def inspect_data(root: str) -> dict[str, Any]:
    """What ``mxformats inspect`` prints, as data (None fields when not known). A folder
    with neither a readable config.json nor a ``*.safetensors`` file holds no checkpoint:
    only ``fatal`` then, which ``cmd_inspect`` exits 2 on."""
    from .deployment import checkpoint_tp, kernel_table
    from .files import load
    from .identify import profiles_of
    from .preflight import engine_summary

    loaded = load(root, Options(level=Level.STRUCTURE))
    ckpt = loaded.ckpt
    if ckpt is None:
        return {"fatal": loaded.fatal}
    if not ckpt.config and not ckpt.shards and not ckpt.tensors:
        return {"fatal": "no checkpoint here: no readable config.json and no *.safetensors "
                         "file"}
    qc = ckpt.quant_config or {}
    producer = []
    if "version" in qc:
        producer.append(f"{qc.get('quant_method')} {qc['version']}")
    if "transformers_version" in ckpt.config:
        producer.append(f"transformers {ckpt.config['transformers_version']}")
    a = ckpt.arch
    quantized = sorted(m.name for m in ckpt.modules.values() if m.quantized)
    excluded = sorted(
        m.name
        for m in ckpt.modules.values()
        if not m.quantized and ckpt.is_excluded(m.name)
    )
    kinds: Counter[str] = Counter()
    for name in quantized:
        exp = ckpt.expected.get(name)
        kinds[exp.kind if exp else "unknown"] += 1
    per_dtype: Counter[str] = Counter()
    for t in ckpt.tensors.values():
        per_dtype[t.dtype] += t.nbytes
    desc = ckpt.descriptor
    tp = None if desc is None else checkpoint_tp(ckpt, desc)
    return {
        "format": ckpt.format.value,
        "format_detail": ckpt.format_detail,
        **profiles_of(ckpt.format),
        "producer": ", ".join(producer) or None,
        "fatal": loaded.fatal,
        "architecture": _architecture(ckpt.config.get("architectures")),
        "layout": None
        if a is None
        else ("multimodal (K2.5/K2.6)" if a.multimodal else "text (K2/K2-Thinking)"),
        "layers": None if a is None else a.layers,
        "first_dense_layers": None if a is None else a.first_dense,
        "experts": None if a is None else a.experts,
        "shared_experts": None if a is None else a.shared_experts,
        "mtp_layers": None if a is None else a.mtp_layers,
        "prefix": None if a is None else a.prefix,
        "shards": len(ckpt.shards),
        "tensors": len(ckpt.tensors),
        "modules": len(ckpt.modules),
        "quantized_modules": len(quantized),
        "quantized_by_kind": dict(sorted(kinds.items())),
        "excluded_modules": len(excluded),
        "exclude_entries": len(ckpt.exclude),
        "bytes_per_dtype": dict(sorted(per_dtype.items())),
        "bytes_total": ckpt.bytes_total,
        "tp_admissible": None if tp is None else ", ".join(map(str, tp)) or "none",
        "vllm_kernels": None if desc is None else kernel_table(desc, ckpt),
        "engines": None if desc is None else engine_summary(ckpt, desc),
        "problems": len(loaded.findings),
    }


def cmd_inspect(args: argparse.Namespace) -> int:
    from mxformats.output import (
        JUnitCase,
        Output,
        UsageError,
        github_annotation,
        junit_xml,
        printable,
    )

    try:
        output = Output.from_args(args)
    except UsageError as err:
        print(f"mxformats inspect: {err}", file=sys.stderr)
        return 2
    data = inspect_data(args.dir)
    if data.get("fatal") and "format" not in data:
        print(f"mxformats inspect: {printable(str(data['fatal']))}", file=sys.stderr)
        return 2
    fatal = printable(str(data["fatal"])) if data.get("fatal") else None
    line = (f"{printable(args.dir)}: {data['format']}"
            + (f" ({printable(str(data['format_detail']))})" if data["format_detail"] else "")
            + f", {data['quantized_modules']} of {data['modules']} modules quantized"
            + (f"; {fatal}" if fatal else ""))

    def text(fp: IO[str]) -> None:
        from rich.table import Table

        console = output.console(fp)
        if output.quiet:
            console.print(line)
            return
        # Values come from config.json: no markup, no emoji codes, controls escaped.
        table = Table(title=f"mxformats inspect {printable(args.dir)}", show_header=False)
        table.add_column("key")
        table.add_column("value")
        for key, value in data.items():
            if isinstance(value, dict):
                value = ", ".join(f"{k}: {v}" for k, v in value.items()) or "-"
            table.add_row(key, "-" if value is None else printable(str(value)))
        console.print(table)

    def json_report(fp: IO[str]) -> None:
        json.dump(data, fp, indent=2)
        fp.write("\n")

    def github(fp: IO[str]) -> None:
        print(github_annotation("error" if fatal else "notice", line,
                                title="mxformats inspect"), file=fp)

    def junit(fp: IO[str]) -> None:
        fp.write(junit_xml("mxformats inspect", [
            JUnitCase("inspect", "INSPECT", failure=fatal, message=fatal or "")]))

    return output.emit("inspect", {"text": text, "json": json_report, "github": github,
                                   "junit": junit}, 2 if fatal else 0)


def demo(folder: Path, out: Any = None) -> int:
    """Write three tiny good checkpoints and one broken one under ``folder`` and validate
    each; 0 when the good ones pass and the broken one is caught."""
    from mxformats.testing.checkpoints import make_kimi_checkpoint

    from .report import print_report
    from .runner import exit_code, validate

    out = out or sys.stdout
    cases: list[tuple[str, dict[str, Any], int]] = [
        ("kimi-k2-mxfp4-quark", {"fmt": "quark-mxfp4"}, 0),
        ("kimi-k2-w4a8-quark", {"fmt": "quark-w4a8"}, 0),
        (
            "kimi-k25-int4-compressed-tensors",
            {"fmt": "compressed-tensors-int4", "multimodal": True},
            0,
        ),
        # Quark's bare "lm_head" misses language_model.lm_head, and nothing excludes the
        # vision tower: both end up MXFP4 and vLLM cannot load them.
        (
            "broken-k25-mxfp4-bare-lm-head",
            {
                "fmt": "quark-mxfp4",
                "multimodal": True,
                "exclude": [
                    "lm_head",
                    "*self_attn*",
                    "*.gate",
                    "*shared_experts*",
                    "*embed*",
                    "*norm*",
                ],
            },
            1,
        ),
    ]
    ok = True
    for name, kwargs, want in cases:
        path = folder / name
        make_kimi_checkpoint(path, **kwargs)
        report = validate(path, Options(level=Level.FULL, workers=1))
        code = exit_code(report)
        print(f"\n$ mxformats validate {path} --level full   # expect exit {want}", file=out)
        print_report(report, out)
        print(f"exit {code}", file=out)
        ok = ok and code == want
    print(
        f"\ndemo {'passed' if ok else 'FAILED'}: {len(cases) - 1} checkpoints valid, the broken "
        "one caught"
        if ok
        else "\ndemo FAILED",
        file=out,
    )
    return 0 if ok else 1


def cmd_demo(args: argparse.Namespace) -> int:
    from mxformats.output import cannot_write

    try:
        if args.keep:
            folder = Path(tempfile.mkdtemp(prefix="mxformats-demo-"))
            print(f"writing the demo checkpoints to {folder}")
            return demo(folder)
        with tempfile.TemporaryDirectory(prefix="mxformats-demo-") as tmp:
            return demo(Path(tmp))
    except BrokenPipeError:
        raise
    except OSError as exc:  # the reports (a closed stdout, a full disk) or the checkpoints
        return cannot_write("demo", exc)


def add_parsers(commands: Any) -> None:
    """Add ``validate``, ``inspect`` and ``demo`` to the CLI's subparsers."""
    v = commands.add_parser(
        "validate",
        help="verify a quantized Kimi-K2-class checkpoint shard by shard",
        description="Check a quantized Kimi-K2-class checkpoint folder before vLLM loads it: "
        "configs, index, shard headers, tensor coverage and layout, scales, numbers. Formats: "
        "AMD Quark MXFP4 and W4A8, compressed-tensors INT4, FP8 block (DeepSeek, "
        "compressed-tensors, ModelOpt), NVFP4 (ModelOpt, compressed-tensors) and "
        "mixed-precision checkpoints of these; plain BF16 ones get the structural checks. "
        "hf://ORG/NAME[@REVISION] validates a Hugging Face repo without downloading it "
        "(ranged reads of the headers and of what --level needs; needs mxformats[hub]; "
        "honours HF_ENDPOINT, HF_TOKEN, HF_HOME).",
        epilog="Exit codes: 0 no errors (warnings allowed unless --strict), 1 errors found, "
        "2 could not run (bad usage, unreadable folder, a missing or gated repo or revision, "
        "no network, a quantization format it does not verify: FORMAT_UNSUPPORTED, e.g. "
        "GPTQ; --executor ray without Ray, or with a --ray-address no cluster answers at; "
        "--select/--ignore that keep no check this run runs: nothing checked; a report that "
        "cannot be written), "
        "130 interrupted (SIGINT or SIGTERM; the JSON report is marked incomplete and "
        "--resume takes it). "
        "Every JSON finding carries its check's catalogue url, meaning and fix. "
        f"The checks: {check_url('')}",
    )
    v.add_argument("dir", metavar="DIR",
                   help="the checkpoint folder, or hf://ORG/NAME[@REVISION]")
    v.add_argument(
        "--level",
        default="scales",
        choices=[lv.value for lv in Level],
        help="structure: headers and configs; scales (default): also scales and "
        "small tensors; full: every byte",
    )
    v.add_argument("--target", choices=tuple(TARGETS), help="deployment target to check against")
    v.add_argument("--tp", type=_positive, metavar="N", help="tensor-parallel size")
    v.add_argument("--ep", type=_positive, metavar="N", help="expert-parallel size")
    v.add_argument(
        "--source",
        type=Path,
        metavar="DIR",
        help="the checkpoint the quantizer read (BF16, INT4 or FP8 block)",
    )
    v.add_argument(
        "--sample", type=_positive, metavar="N", help="with --source: compare N modules per layer"
    )
    v.add_argument(
        "--manifest",
        type=Path,
        metavar="FILE",
        help="sha256 per shard: written on the first run, verified later",
    )
    v.add_argument("--select", metavar="ID,...", action="append",
                   help="report only these check IDs (comma-separated, any case; repeatable)")
    v.add_argument("--ignore", metavar="ID,...", action="append",
                   help="do not report these check IDs (comma-separated, any case; "
                   "repeatable)")
    v.add_argument(
        "--workers", type=_positive, metavar="N",
        help="tasks at once: worker processes of the local executor (default: the cores; 1 "
        "runs in this process), or Ray tasks in flight",
    )
    v.add_argument(
        "--hub-connections", type=_positive, metavar="N", default=32,
        help="hf:// only: ranged reads in flight at once over keep-alive connections, per run "
        "(default 32; independent of --workers)",
    )
    v.add_argument(
        "--executor", choices=("local", "ray"), default="local",
        help="where the numbers and --source tasks run: local (a process pool, default) or "
        "ray (a Ray cluster; needs mxformats[ray])",
    )
    v.add_argument(
        "--ray-address", metavar="auto|HOST:PORT",
        help="with --executor ray: the cluster to join (default: start a local Ray)",
    )
    v.add_argument(
        "--resume", type=Path, metavar="REPORT.json",
        help="reuse the finished tasks of this JSON report (of an interrupted run) and run "
        "only the others",
    )
    v.add_argument(
        "--device", metavar="DEVICE",
        help="run --source's reproduction (re-quantize, compare, reduce) and --level full's "
        "scan on this torch device with the Triton kernels: cuda, cuda:N (ROCm's torch says "
        "cuda too) or cpu (Triton's interpreter, TRITON_INTERPRET=1); the report is the CPU "
        "path's (needs mxformats[torch,triton])",
    )
    v.add_argument("--strict", action="store_true", help="warnings fail the run too")
    v.add_argument("--html", type=Path, metavar="REPORT.html",
                   help="also write the report as one self-contained HTML page with plots "
                   "(error heatmaps with --source, code histograms, scale distributions; needs "
                   "mxformats[report])")
    v.add_argument(
        "--yes",
        action="store_true",
        help="hf:// with --level full: read more than 10 GB (the run states the byte count)",
    )
    v.add_argument(
        "--allow-symlink-root",
        action="append",
        metavar="DIR",
        help="also follow symlinks that resolve under DIR (repeatable)",
    )
    add_output_arguments(v, json_alias="file", junit_alias=True)
    v.set_defaults(handler=cmd_validate)

    i = commands.add_parser(
        "inspect",
        help="describe a checkpoint: format, producer, architecture, modules, bytes",
        description="Print the detected format and producer, the architecture (layers, "
        "experts), quantized vs excluded modules and bytes per dtype. Reads configs and "
        "headers only.",
        epilog="Exit codes: 0 printed, 2 could not read the folder or the "
        "format is not one mxformats verifies.",
    )
    i.add_argument("dir", metavar="DIR", help="the checkpoint folder, or hf://ORG/NAME[@REVISION]")
    add_output_arguments(i)
    i.set_defaults(handler=cmd_inspect)

    d = commands.add_parser(
        "demo",
        help="validate three tiny generated checkpoints and a broken one",
        description="Write tiny Quark MXFP4, Quark W4A8 and compressed-tensors INT4 (K2.5 "
        "multimodal) checkpoints plus a deliberately broken one to a temporary folder and "
        "validate each, printing the reports.",
        epilog="Exit codes: 0 the good ones pass and the broken one is caught, 1 otherwise.",
    )
    d.add_argument("--keep", action="store_true", help="keep the folder (its path is printed)")
    d.set_defaults(handler=cmd_demo)
