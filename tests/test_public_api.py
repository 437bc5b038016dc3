"""The public API, listed: a change to it fails here until ``tests/data/public_api.json`` is
regenerated on purpose (``python tests/test_public_api.py > tests/data/public_api.json``), with
a deprecation alias and a CHANGELOG line for anything removed or renamed.

The public API is what users call: ``mxformats.__all__`` (each function's and class's
parameters by name and kind), the front ends of the kernels (``mxformats.kernels.triton`` and
``mxformats.kernels.hip``: their ``__all__`` and parameters), and the CLI (every subcommand of
``mxformats.cli.build_parser()`` with its options, positionals and choices). The old names these
modules still serve with a DeprecationWarning (their ``__getattr__``, a
:class:`mxformats.records.DeprecatedAliases`) are listed too, old -> new, so an alias is not
dropped unnoticed.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
from pathlib import Path
from typing import Any

import pytest

LISTING = Path(__file__).resolve().parent / "data" / "public_api.json"

#: The modules whose ``__all__`` is public.
MODULES = ("mxformats", "mxformats.kernels.triton", "mxformats.kernels.hip")


def _parameters(obj: object) -> list[str] | None:
    """``obj``'s parameters as ``name`` / ``*name`` / ``**name`` / ``name=`` (a default) /
    keyword-only after ``*``, None for a constant or a callable without a signature."""
    if not callable(obj):
        return None
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    out = []
    for p in signature.parameters.values():
        name = {p.VAR_POSITIONAL: f"*{p.name}", p.VAR_KEYWORD: f"**{p.name}"}.get(p.kind, p.name)
        if p.kind is p.KEYWORD_ONLY:
            name = f"kw:{name}"
        elif p.kind is p.POSITIONAL_ONLY:
            name = f"pos:{name}"
        out.append(name + ("=" if p.default is not p.empty else ""))
    return out


def module_api(name: str) -> dict[str, list[str] | None]:
    """Every name of ``name``'s ``__all__`` with its parameters."""
    module = importlib.import_module(name)
    return {attr: _parameters(getattr(module, attr)) for attr in sorted(module.__all__)}


def module_aliases(name: str) -> dict[str, str]:
    """The deprecated names ``name`` serves (old -> new), empty when it has none."""
    from mxformats.records import DeprecatedAliases

    served = getattr(importlib.import_module(name), "__getattr__", None)
    return dict(served.aliases) if isinstance(served, DeprecatedAliases) else {}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def parser_api(parser: argparse.ArgumentParser, prefix: str = "mxformats") -> dict[str, Any]:
    """Each command (``mxformats``, ``mxformats validate``, ...) -> its arguments: options by
    their strings, positionals by their dest, each with its choices when it has some."""
    arguments = []
    for action in parser._actions:
        if isinstance(action, (argparse._SubParsersAction, argparse._HelpAction)):
            continue
        name = ", ".join(action.option_strings) or action.dest
        choices = sorted(map(str, action.choices)) if action.choices else None
        arguments.append(name + (f" {{{','.join(choices)}}}" if choices else ""))
    out: dict[str, Any] = {prefix: sorted(arguments)}
    for command, sub in sorted(_subparsers(parser).items()):
        out.update(parser_api(sub, f"{prefix} {command}"))
    return out


def public_api() -> dict[str, Any]:
    """The whole listing, as ``tests/data/public_api.json`` holds it."""
    from mxformats.cli import build_parser

    return {"modules": {m: module_api(m) for m in MODULES}, "cli": parser_api(build_parser()),
            "deprecated": {m: module_aliases(m) for m in MODULES}}


def test_public_api_is_the_committed_listing() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    committed = json.loads(LISTING.read_text(encoding="utf-8"))
    now = public_api()
    for section in ("modules", "cli", "deprecated"):
        for key in sorted(set(committed[section]) | set(now[section])):
            assert now[section].get(key) == committed[section].get(key), (
                f"the public API changed: {section} {key} (regenerate tests/data/public_api.json "
                "only on purpose, with a deprecation alias and a CHANGELOG line)")


def test_the_listing_sees_a_changed_parameter() -> None:
    def before(codes: int, *, axis: int = -1) -> None: ...

    def after(codes: int, axis: int = -1) -> None: ...

    assert _parameters(before) == ["codes", "kw:axis="]
    assert _parameters(before) != _parameters(after)
    parser = argparse.ArgumentParser()
    parser.add_subparsers().add_parser("run").add_argument("--target", choices=("a", "b"))
    assert parser_api(parser) == {"mxformats": [], "mxformats run": ["--target {a,b}"]}


if __name__ == "__main__":
    json.dump(public_api(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
