"""The docs site's committed and generated parts agree with the code (issue 7).

Fast and without Sphinx (the build and the browser check are ``.ci/docs.sh``):

- the generated pages (``docs/cli.md``, ``docs/validate-checks.md``) have no drift;
- the landing page's two commands are the README's;
- every ``mxformats ...`` command the pages show names options the command has, and each
  whole command line of a code block parses;
- every spec page is included under ``docs/spec/`` and its links resolve there;
- the ``>>>`` examples in the docs' Markdown and in every mxformats docstring run (doctest);
- the C snippet on the vectors page compiles and passes the E2M1 decode vectors;
- the API page documents every name in ``mxformats.__all__``;
- the browser check's CDN scan finds an asset on another host.
"""

from __future__ import annotations

import argparse
import doctest
import importlib
import importlib.util
import pkgutil
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import mxformats
from mxformats.fast import jit

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SPEC = ROOT / "spec"


def _load(path: Path) -> ModuleType:
    """Import a docs script (they are not part of the package)."""
    spec = importlib.util.spec_from_file_location(f"docs_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


generate = _load(DOCS / "generate.py")
mxdocs = _load(DOCS / "_ext" / "mxdocs.py")
browser_check = _load(DOCS / "browser_check.py")


def test_generated_pages_have_no_drift() -> None:
    assert generate.drifted() == [], "run: python docs/generate.py"


def test_cli_reference_lists_every_command() -> None:
    from mxformats.cli import build_parser

    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    commands = generate._subcommands(build_parser())
    assert set(commands) >= {"spec", "diff", "check", "validate", "inspect", "demo"}
    for name, parser in commands.items():
        assert f"## mxformats {name}\n" in page
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for option in action.option_strings:
                assert f"`{option}" in page or f", {option}" in page, (name, option)


#: An ``mxformats ...`` command in an inline code span (a command, or a command and options).
_INLINE_COMMAND = re.compile(r"`(mxformats [^`]+)`")
#: A whole command line in a code block: ``$ mxformats ...``, or a CI step's ``run: mxformats``.
_BLOCK_COMMAND = re.compile(r"^\s*(?:\$ |(?:- )?run: )?(mxformats .+)$")
#: A value that starts with a dash but is not an option (``mxformats diff 7 1 0.3 -2.9``).
_NEGATIVE = re.compile(r"-(?:[0-9.]+|inf|nan)")


def _documented_commands(text: str) -> list[tuple[str, bool]]:
    """Each ``mxformats ...`` command of a Markdown page: the command, and whether it is a
    whole command line of a code block (which must parse) rather than an inline span that may
    name a command and options only."""
    commands = [(" ".join(m.group(1).split()), False) for m in _INLINE_COMMAND.finditer(text)]
    in_block = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_block = not in_block
        elif in_block and (m := _BLOCK_COMMAND.match(line)):
            commands.append((m.group(1), True))
    return commands


def _command_problem(command: str, whole: bool,
                     subcommands: dict[str, argparse.ArgumentParser]) -> str | None:
    """What is wrong with a documented ``mxformats`` command (None: nothing): an unknown
    command, an option the command does not have, or (``whole``) a line argparse refuses."""
    tokens = shlex.split(command.split(" | ")[0])
    if len(tokens) < 2 or tokens[1] not in subcommands:
        return "no such command"
    parser = subcommands[tokens[1]]
    options = {name for action in parser._actions for name in action.option_strings}
    for token in tokens[2:]:
        option = token.split("=", 1)[0]
        if option.startswith("-") and option != "-" and not _NEGATIVE.fullmatch(option) \
                and option not in options:
            return f"{option} is not an option of mxformats {tokens[1]}"
    if whole:
        try:
            parser.parse_args(tokens[2:])
        except SystemExit:
            return "argparse refuses it"
    return None


def _subcommand_parsers() -> dict[str, argparse.ArgumentParser]:
    from mxformats.cli import build_parser

    return generate._subcommands(build_parser())


def test_documented_commands_exist_and_parse() -> None:
    """The ``mxformats`` commands of the README and the hand-written pages (docs/cli.md is
    generated from the parser) use only options the command has, and a whole command line
    parses, option values included (``--level full``, ``--format github``)."""
    subcommands = _subcommand_parsers()
    pages = [ROOT / "README.md", *(p for p in sorted(DOCS.glob("*.md")) if p.name != "cli.md")]
    found = [(page.name, command, whole) for page in pages
             for command, whole in _documented_commands(page.read_text(encoding="utf-8"))]
    assert len(found) >= 20 and sum(whole for *_, whole in found) >= 8, found
    problems = [(page, command, problem) for page, command, whole in found
                if (problem := _command_problem(command, whole, subcommands)) is not None]
    assert problems == []


def test_a_wrong_documented_command_is_caught(capsys: pytest.CaptureFixture[str]) -> None:
    subcommands = _subcommand_parsers()
    assert _command_problem("mxformats vaildate DIR", False, subcommands) == "no such command"
    assert _command_problem("mxformats validate DIR --no-such-option", False, subcommands) \
        == "--no-such-option is not an option of mxformats validate"
    assert _command_problem("mxformats validate DIR --level everything", True, subcommands) \
        == "argparse refuses it"
    assert _command_problem("mxformats validate --source", False, subcommands) is None
    assert _command_problem("mxformats diff 7 1 0.3 -2.9", True, subcommands) is None
    assert _command_problem("mxformats validate DIR --json - | jq .ok", True, subcommands) is None
    capsys.readouterr()  # argparse's usage message of the refused line


def _fresh_machine_commands(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("python3 -m venv .venv && ")]


def test_landing_page_commands_are_the_readme_commands() -> None:
    readme = _fresh_machine_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    landing = _fresh_machine_commands((DOCS / "index.md").read_text(encoding="utf-8"))
    assert len(readme) == 2
    assert landing == readme


SPEC_PAGES = sorted(p.name for p in SPEC.glob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", SPEC_PAGES)
def test_spec_page_is_included_and_its_links_resolve(page: str) -> None:
    wrapper = DOCS / "spec" / page
    assert wrapper.is_file(), f"docs/spec/{page} missing: the spec page is not in the site"
    # The whole page, or (plots before long code tables) the page up to its code table and the
    # rest after the plot.
    text = wrapper.read_text(encoding="utf-8")
    whole = f"```{{include}} ../../spec/{page}\n```" in text
    split = (f"```{{include}} ../../spec/{page}\n:end-before: \"## Code table\"\n```" in text
             and f"```{{include}} ../../spec/{page}\n:start-after: \"## Code table\"\n```"
             in text and text.index("## Value grid") < text.index(":start-after:"))
    assert whole or split, page
    text = mxdocs.rewrite_spec_links((SPEC / page).read_text(encoding="utf-8"))
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://")):
            continue
        resolved = (wrapper.parent / target).resolve()
        if target.endswith(".md"):
            assert resolved.parent == wrapper.parent and resolved.is_file(), (page, target)
        else:
            assert resolved.is_file() and resolved.is_relative_to(SPEC / "vectors"), (page, target)


def test_spec_index_lists_every_page() -> None:
    index = (DOCS / "spec" / "README.md").read_text(encoding="utf-8")
    for page in SPEC_PAGES:
        if page != "README.md":
            assert f"\n{page.removesuffix('.md')}\n" in index, page


DOC_PAGES = sorted(
    str(p.relative_to(DOCS))
    for p in DOCS.rglob("*.md")
    if not p.relative_to(DOCS).parts[0].startswith("_") and ">>>" in p.read_text(encoding="utf-8")
)


def test_docs_have_examples() -> None:
    assert {"index.md", "harness.md", "spec/vectors.md"} <= set(DOC_PAGES)


@pytest.mark.parametrize("page", DOC_PAGES)
def test_docs_examples_run(page: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # examples read spec/vectors/ as a reader of the docs would
    text = (DOCS / page).read_text(encoding="utf-8")
    test = doctest.DocTestParser().get_doctest(text, {"__name__": page}, page, str(DOCS / page), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0, f"docs/{page}: example failed (above)"


MODULES = [
    "mxformats",
    *sorted(info.name for info in pkgutil.walk_packages(mxformats.__path__, prefix="mxformats.")
            # numba's compiled modules (compiled, compiled_*) import numba; without it (or
            # where it refuses this numpy) nothing imports them: mxformats.fast.jit is their door
            if not info.name.startswith("mxformats.fast.compiled") or jit.compiled() is not None),
]


def test_docstring_doctests_exist() -> None:
    finder = doctest.DocTestFinder()
    found = sum(
        len(t.examples)
        for name in MODULES
        for t in finder.find(importlib.import_module(name))
    )
    assert found >= 10, found


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    result = doctest.testmod(
        importlib.import_module(name), optionflags=doctest.ELLIPSIS, verbose=False
    )
    assert result.failed == 0, f"{name}: docstring example failed (above)"


def test_c_snippet_passes_the_decode_vectors(tmp_path: Path) -> None:
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "a C compiler (cc or gcc; CI installs g++) is needed for the C snippet"
    binary = tmp_path / "e2m1_decode"
    subprocess.run([compiler, "-std=c99", "-Wall", "-Werror", "-o", str(binary),
                    str(DOCS / "snippets" / "e2m1_decode.c")], check=True)
    done = subprocess.run([str(binary), str(SPEC / "vectors" / "e2m1" / "decode.json")],
                          capture_output=True, text=True, check=False)
    assert done.stdout == "16 cases, 0 failures\n", done.stdout
    assert done.returncode == 0


def _documented_modules() -> list[str]:
    api = (DOCS / "api.md").read_text(encoding="utf-8")
    return re.findall(r"^\.\. automodule:: (\S+)\n(?!   :no-members:)", api, flags=re.MULTILINE)


def test_api_page_documents_every_public_name() -> None:
    documented = _documented_modules()
    for name in mxformats.__all__:
        if name == "__version__":
            continue
        homes = [m for m in documented if name in importlib.import_module(m).__all__]
        assert homes, f"mxformats.{name} is in no module the API page documents"


def test_browser_check_finds_a_cdn_asset(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "index.html").write_text(
        '<html><head><script src="_static/local.js"></script>'
        '<link rel="stylesheet" href="_static/theme.css"></head>'
        '<body><a href="https://numpy.org/doc/">a link is fine</a></body></html>'
    )
    (tmp_path / "sub" / "page.html").write_text(
        '<html><head><link rel="stylesheet" href="https://cdn.example/x.css">'
        '<script src="//cdn.example/y.js"></script></head></html>'
    )
    assert browser_check.external_assets(tmp_path) == [
        "sub/page.html: loads https://cdn.example/x.css",
        "sub/page.html: loads //cdn.example/y.js",
    ]


def test_napoleon_prose_prefixes_are_repaired() -> None:
    """``#: prose: more`` rendered with ``prose`` as a type (issue 17): the docs extension
    restores the text; a real type stays."""
    assert mxdocs.restore_prose_prefix(["more text", "", ":type: the sizes"]) == [
        "the sizes: more text"]
    assert mxdocs.restore_prose_prefix(["text", "", ":type: str | None"]) == [
        "text", "", ":type: str | None"]


def test_an_attributes_entry_naming_several_fields_is_split() -> None:
    # Napoleon writes ``library, version: text`` as one ``:ivar:`` whose first names Sphinx
    # would read as a type and link (to every class with such a field).
    napoleon = [
        ":ivar library, version: the source it reproduces, e.g.",
        '                        ``("amd-quark", "0.13")``.',
        ":ivar description: one line.",
    ]
    assert mxdocs.split_shared_ivars(napoleon) == [
        ":ivar library: the source it reproduces, e.g.",
        '                        ``("amd-quark", "0.13")``.',
        ":ivar version: the source it reproduces, e.g.",
        '                        ``("amd-quark", "0.13")``.',
        ":ivar description: one line.",
    ]


def test_short_references_point_at_the_defining_module() -> None:
    runner = "mxformats.validate.runner"  # imports Report from mxformats.validate.report
    assert mxdocs.defining_name("Report.ran", runner) == "mxformats.validate.report.Report.ran"
    assert mxdocs.defining_name("Checkpoint", runner) == "mxformats.validate.model.Checkpoint"
    # A type alias reports its origin's module (collections.abc): it is left to Sphinx.
    assert mxdocs.defining_name("Encoder", "mxformats.schemes.fp8_block") is None


def test_scale_plot_reads_the_committed_table() -> None:
    """``scale.png`` plots docs/benchmarks.md's validator-at-scale table: one row per worker
    count with the four GB/s columns (reproduction, its read, full scan, its read), and the
    ratio column each row states is the one its GB/s give (rounded as printed)."""
    rows = mxdocs.scale_rows()
    assert [w for w, _ in rows] == [1, 2]
    assert rows[0][1] == [0.808, 8.31, 1.729, 8.2]
    text = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    for workers, (repro, read, scan, scan_read) in rows:
        line = next(line for line in text.splitlines() if line.startswith(f"| {workers} | "))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert float(cells[3].rstrip("×")) == pytest.approx(read / repro, rel=0.02)
        assert float(cells[6].rstrip("×")) == pytest.approx(scan_read / scan, rel=0.02)


def test_read_the_docs_builds_as_ci_does() -> None:
    """``.readthedocs.yaml`` installs the docs extra at the pinned versions, runs the drift
    check and builds with ``.ci/docs.sh``'s sphinx-build flags (warnings are errors)."""
    rtd = (DOCS.parent / ".readthedocs.yaml").read_text(encoding="utf-8")
    ci = (DOCS.parent / ".ci" / "docs.sh").read_text(encoding="utf-8")
    found = re.search(r"MPLBACKEND=Agg sphinx-build (-W [^\n]*?) -b html docs", ci)
    assert found is not None
    assert (f'MPLBACKEND=Agg python -m sphinx {found.group(1)} -b html docs '
            '"$READTHEDOCS_OUTPUT/html"') in rtd
    assert "python docs/generate.py --check" in ci and "python docs/generate.py --check" in rtd
    assert 'pip install -c constraints.txt ".[docs]"' in rtd
