"""One output convention for every command that reports, close to ruff's and mypy's.

``--format text|json|junit|github`` picks the report, ``-o FILE`` where it goes (default
stdout), ``-q`` shortens the text report to its one-line verdict and ``--color
auto|always|never`` colours it (``auto``: only on a terminal, and never when the ``NO_COLOR``
environment variable is set and not empty, https://no-color.org). The older ``--json FILE|-``
and ``--junit FILE`` options stay as aliases that add one more report beside the text one.

With a machine format on stdout nothing else goes there: the text report, when one is asked
for too, moves to stderr; two reports cannot share stdout (a usage error).

The ``github`` format is GitHub Actions' workflow commands, one annotation per line
(``::error file=F,title=T::message``), escaped as the Actions toolkit escapes them
(actions/toolkit, ``packages/core/src/command.ts``, ``escapeData``/``escapeProperty``).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import os
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "COLORS",
    "DOCS_URL",
    "FORMATS",
    "SEVERITY_STYLES",
    "JUnitCase",
    "Output",
    "Sink",
    "UsageError",
    "add_output_arguments",
    "cannot_write",
    "check_url",
    "github_annotation",
    "junit_xml",
    "make_console",
    "printable",
    "quiet_broken_pipe",
    "unencodable_escaped",
]

#: Where the documentation is meant to be hosted (Read the Docs, ``latest``): the one address
#: the CLI's epilog, every JSON finding's ``url`` (:func:`check_url`) and the Sphinx pages'
#: canonical links (``docs/conf.py``) use. pyproject.toml cannot import it, so its
#: ``[project.urls]`` repeat it; tests/test_cli_output.py and tests/test_wheel.py (the
#: installed wheel's metadata) keep them equal. An intended address: nothing here can check
#: that the site is live.
DOCS_URL = "https://mxformats.readthedocs.io/en/latest/"
FORMATS = ("text", "json", "junit", "github")
COLORS = ("auto", "always", "never")


def check_url(check_id: str) -> str:
    """The catalogue anchor of a validator check (``docs/validate-checks.md`` writes it)."""
    return f"{DOCS_URL}validate-checks.html#{check_id}"


class UsageError(Exception):
    """The output options contradict each other (the command exits 2)."""


@dataclass(frozen=True)
class Sink:
    """One report: its format and its file (``None``: stdout; ``"-"`` in an alias is stdout)."""

    format: str
    path: str | None


def add_output_arguments(
    parser: argparse.ArgumentParser,
    *,
    json_alias: str | None = "flag",
    junit_alias: bool = False,
    quiet_help: str = "text: print only the one-line verdict",
) -> None:
    """Add ``--format``, ``-o``, ``-q`` and ``--color`` to a reporting command's parser.

    ``json_alias``: ``"flag"`` adds ``--json`` as a switch meaning ``--format json``;
    ``"file"`` adds ``--json FILE|-`` (one more report, as ``validate`` always had); None
    adds neither. ``junit_alias`` adds ``--junit FILE``. ``quiet_help``: what ``-q`` keeps of
    the text report, for a command that keeps more than the verdict."""
    group = parser.add_argument_group("output")
    group.add_argument("--format", dest="output_format", choices=FORMATS, default=None,
                       help="the report's format (default text)")
    group.add_argument("-o", "--output", metavar="FILE",
                       help="write the report to FILE instead of stdout (- is stdout)")
    if json_alias == "flag":
        group.add_argument("--json", action="store_true", help="alias of --format json")
    elif json_alias == "file":
        group.add_argument("--json", metavar="FILE|-",
                           help="also write the JSON report to FILE (- for stdout)")
    if junit_alias:
        group.add_argument("--junit", metavar="FILE",
                           help="also write the JUnit XML report to FILE")
    group.add_argument("-q", "--quiet", action="store_true", help=quiet_help)
    group.add_argument("--color", choices=COLORS, default="auto",
                       help="colour the text report (default auto: on a terminal, unless "
                       "NO_COLOR is set)")


@dataclass(frozen=True)
class Output:
    """The reports one run writes, resolved from the command line (:meth:`from_args`)."""

    sinks: tuple[Sink, ...]
    quiet: bool = False
    color: str = "auto"
    #: Where the text report goes when it is not the only thing on stdout.
    text_to_stderr: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Output:
        """Resolve ``--format``/``-o`` and the aliases; raise :class:`UsageError` when two
        reports would share stdout or ``--json`` contradicts ``--format``."""
        fmt: str | None = args.output_format
        aliases: list[Sink] = []
        json_opt = getattr(args, "json", None)
        if json_opt is True:
            if fmt not in (None, "json"):
                raise UsageError(f"--json contradicts --format {fmt}")
            fmt = "json"
        elif isinstance(json_opt, str):
            aliases.append(Sink("json", None if json_opt == "-" else json_opt))
        junit = getattr(args, "junit", None)
        if junit:
            aliases.append(Sink("junit", None if junit == "-" else junit))
        main = Sink(fmt or "text", None if args.output == "-" else args.output)
        on_stdout = [s for s in (main, *aliases) if s.path is None]
        text_to_stderr = False
        if len(on_stdout) > 1:
            if fmt is None and main.path is None and len(on_stdout) == 2:
                text_to_stderr = True  # --json - alone: the text report moves to stderr
            else:
                raise UsageError("two reports cannot both go to stdout: give -o FILE")
        return cls((main, *aliases), args.quiet, args.color, text_to_stderr)

    def write(self, renderers: Mapping[str, Callable[[IO[str]], object]]) -> None:
        """Write every report with ``renderers[format](stream)``; the text renderer gets a
        stream on which :func:`make_console` honours ``--color``. The files come first, so
        a report file that cannot be written stops the run before any verdict is printed
        (an OK on stdout, then exit 2). OSError propagates (the caller reports it and exits
        2)."""
        for sink in sorted(self.sinks, key=lambda s: s.path is None):
            render = renderers[sink.format]
            if sink.path is not None:
                with open(sink.path, "w", encoding="utf-8") as fp:
                    render(fp)
            elif sink.format == "text" and self.text_to_stderr:
                render(sys.stderr)
            else:
                render(sys.stdout)

    def emit(self, command: str, renderers: Mapping[str, Callable[[IO[str]], object]],
             code: int) -> int:
        """:meth:`write` the reports and return ``code``; 2, with the reason on stderr, when a
        report file cannot be written. A closed stdout (BrokenPipeError) propagates to
        :func:`quiet_broken_pipe`."""
        try:
            self.write(renderers)
        except BrokenPipeError:
            raise
        except OSError as exc:
            return cannot_write(command, exc)
        return code

    def console(self, file: IO[str]) -> Console:
        """A rich console on ``file`` with this run's colour choice."""
        return make_console(file, self.color)


def make_console(file: IO[str], color: str = "auto") -> Console:
    """A rich console that interprets no markup, no emoji codes and highlights nothing
    (styles come only from our own rich ``Text`` spans), coloured per ``color``:
    ``always`` even off a terminal and despite ``NO_COLOR``, ``never`` not at all, ``auto``
    on a terminal unless ``NO_COLOR`` is set (rich also honours ``FORCE_COLOR``)."""
    from rich.console import Console

    options: dict[str, Any] = {}
    if color == "always":
        options.update(force_terminal=True, no_color=False)
    elif color == "never":
        options.update(color_system=None)
    elif os.environ.get("NO_COLOR"):
        options.update(no_color=True)
    return Console(file=file, highlight=False, markup=False, emoji=False, soft_wrap=True,
                   **options)


#: The style of each severity word in text reports.
SEVERITY_STYLES = {"error": "bold red", "warning": "yellow", "info": "cyan", "notice": "cyan"}


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_annotation(level: str, message: str, *, title: str | None = None,
                      file: str | None = None) -> str:
    """One GitHub Actions workflow command: ``level`` is ``error``, ``warning`` or ``notice``
    (``info`` is written as ``notice``)."""
    level = "notice" if level == "info" else level
    props = [f"{k}={_escape_property(v)}" for k, v in (("file", file), ("title", title)) if v]
    return f"::{level}{' ' + ','.join(props) if props else ''}::{_escape_data(message)}"


@dataclass(frozen=True)
class JUnitCase:
    """One ``testcase``: ``failure`` is the failure text (None: passed); ``skipped`` a reason;
    ``output`` what a passing case reports all the same (its ``system-out``)."""

    classname: str
    name: str
    failure: str | None = None
    message: str = ""
    skipped: str | None = None
    output: str | None = None


def junit_xml(suite: str, cases: Sequence[JUnitCase], *, seconds: float = 0.0) -> str:
    """A JUnit XML ``testsuite`` of ``cases`` (callers escape untrusted text first)."""
    root = ET.Element("testsuite", name=suite, time=f"{seconds:.3f}")
    for c in cases:
        case = ET.SubElement(root, "testcase", classname=c.classname, name=c.name)
        if c.failure is not None:
            ET.SubElement(case, "failure", message=c.message).text = c.failure
        elif c.skipped is not None:
            ET.SubElement(case, "skipped", message=c.skipped)
        if c.output is not None:
            ET.SubElement(case, "system-out").text = c.output
    root.set("tests", str(len(cases)))
    root.set("failures", str(sum(c.failure is not None for c in cases)))
    root.set("skipped", str(sum(c.skipped is not None and c.failure is None for c in cases)))
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def printable(text: str) -> str:
    """``text`` with every character that is not printable escaped as ``\\xNN``, ``\\uNNNN``
    or ``\\UNNNNNNNN``: C0 and C1 controls (ESC, BEL, NUL, newline, ...), DEL, format
    characters (bidi overrides), line and paragraph separators, surrogates and unassigned
    code points (``str.isprintable``). What is left is printable text, valid in XML 1.0 and
    encodable as UTF-8; a terminal has nothing in it to interpret."""
    if text.isprintable():
        return text
    out = []
    for c in text:
        if c.isprintable():
            out.append(c)
        else:
            code = ord(c)
            out.append(
                f"\\x{code:02x}" if code < 0x100
                else f"\\u{code:04x}" if code < 0x10000
                else f"\\U{code:08x}"
            )
    return "".join(out)


def cannot_write(command: str, exc: OSError) -> int:
    """Say on stderr that ``command``'s report could not be written (a full disk, a folder
    that does not exist, a closed stdout) and return 2: the report asked for is not there,
    whatever the run found."""
    print(f"mxformats {command}: cannot write a report: {printable(str(exc))}",
          file=sys.stderr)
    return 2


class _ClosedStdout(io.TextIOBase):
    """What ``sys.stdout`` is while the program runs with file descriptor 1 closed
    (``mxformats ... >&-``, where Python sets it to None): every write fails as on a closed
    file, so a report meant for stdout exits 2 (:func:`cannot_write`) instead of vanishing or
    ending in a traceback."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "stdout is closed")


@contextlib.contextmanager
def unencodable_escaped() -> Iterator[None]:
    """Write each character stdout's encoding cannot hold as a backslash escape (``\\xe9``),
    as Python writes stderr, instead of raising UnicodeEncodeError: a checkpoint path or
    tensor name is untrusted text, and on an ASCII or cp1252 stdout (``PYTHONIOENCODING``,
    a Windows console) one ``é`` in it ended the run in a traceback and exit 1."""
    stream = sys.stdout
    if not isinstance(stream, io.TextIOWrapper) or stream.errors == "backslashreplace":
        yield
        return
    previous = stream.errors
    stream.reconfigure(errors="backslashreplace")
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):  # a pipe gone: quiet_broken_pipe's
            stream.reconfigure(errors=previous)


@contextlib.contextmanager
def quiet_broken_pipe() -> Iterator[None]:
    """Exit quietly with status 141 (128 + SIGPIPE, what a shell reports for a program the
    signal ended) when the reader of stdout goes away, e.g. ``mxformats diff --json | head``.
    A stdout closed from the start (``_ClosedStdout``) is not a pipe whose reader left:
    writing to it is an error.

    Python's own recipe (docs.python.org/3/library/signal.html, "Note on SIGPIPE"): point
    stdout at devnull so the interpreter's final flush does not raise again."""
    closed = sys.stdout is None
    if closed:
        sys.stdout = _ClosedStdout()
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        with contextlib.suppress(OSError, ValueError):
            os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(141) from None
    finally:
        if closed:
            sys.stdout = None
