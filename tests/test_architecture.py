"""The import graph of ``mxformats/`` and ``kernels/``: imports point down the layers.

The package is built in floors (``docs/architecture.md``): element formats, then the
block-scaled schemes, then the fast paths, kernels and the tools built on the schemes, then the
validator, then the CLI. This test reads every import from the source (module level and inside
functions alike; an import under ``if TYPE_CHECKING:`` is *type-only*), builds the module graph
and checks two things:

- **no circle** (a strongly connected component of two or more modules) except those listed in
  :data:`ALLOWED_CIRCLES`, each with its reason: a circle that closes only through imports
  under ``if TYPE_CHECKING:`` (a type-only circle). A circle closed by an import made inside a
  function is a circle all the same: break it (move the shared piece down a floor, or have the
  module above hand it down), never hide the import;
- **at most two upward imports** (an import of a module on a higher floor than the importer's),
  each listed in :data:`ALLOWED_UPWARD` with its reason.

A listed allowance that no longer occurs fails too, so the lists stay the truth. Run the file
as a script (``python tests/test_architecture.py``) to print today's circles and upward imports.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The floors, bottom first; imports may only point to the same floor or below.
LAYERS = ("element formats", "schemes", "fast paths and kernels", "validator", "CLI")

#: Module (or package, for everything under it) -> its floor, an index into :data:`LAYERS`.
#: The longest dotted prefix decides (``mxformats`` itself names only the package's
#: ``__init__``); a module no entry covers fails the test.
MODULE_LAYER: dict[str, int] = {
    # element formats and what every floor uses: codes, containers, tables, text, files
    "mxformats._version": 0,
    "mxformats.formats": 0,
    "mxformats.codec": 0,
    "mxformats.arith": 0,
    "mxformats.conversions": 0,
    "mxformats.containers": 0,
    "mxformats.packing": 0,
    "mxformats.registry": 0,
    "mxformats.pairing": 0,
    "mxformats.records": 0,
    "mxformats.text": 0,
    "mxformats.tensorfile": 0,
    "mxformats.output": 0,
    # block-scaled schemes (each profile a record) and what compares them
    "mxformats.schemes": 1,
    "mxformats.compare": 1,
    # fast paths, kernels and the tools built on the schemes
    "mxformats.fast": 2,
    "mxformats.kernels": 2,
    "mxformats.specgen": 2,
    "mxformats.testing": 2,
    # the validator and what is built on its reader
    "mxformats.validate": 3,
    "mxformats.checkpoint": 3,
    "mxformats.testing.sparse": 3,
    # the CLI, and the package itself (it re-exports the public names of every floor)
    "mxformats.cli": 4,
    "mxformats.__main__": 4,
    "mxformats": 4,
}

#: The circles allowed: members -> (what closes it, why it is harmless). Only ``"type-only"``
#: circles are allowed, and the test checks the claim: without the imports under
#: ``if TYPE_CHECKING:``, no circle is left among the members.
ALLOWED_CIRCLES: dict[frozenset[str], tuple[str, str]] = {
    frozenset({"mxformats.formats", "mxformats.codec", "mxformats.containers"}): (
        "type-only", "the codec and containers name Format only in their signatures; formats "
        "imports both and hands containers' decorator its Format type and get_format "
        "(containers.read_formats_with) when it is imported"),
    frozenset({"mxformats.validate.model", "mxformats.validate.descriptors.base"}): (
        "type-only", "Checkpoint.descriptor is typed as a Descriptor; descriptors take a "
        "Checkpoint"),
}

#: Upward imports allowed (importer, imported) -> why; at most two.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}

MAX_UPWARD = 2


@dataclass(frozen=True)
class Edge:
    """``importer`` imports ``imported``; ``type_only`` when every such import is under
    ``if TYPE_CHECKING:``; ``lazy`` when every such import that is not type-only is made
    inside a function (when it is called, not when the module is imported)."""

    importer: str
    imported: str
    type_only: bool
    lazy: bool


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of ``mxformats/`` and ``kernels/`` (installed as ``mxformats.kernels``)."""
    out = {}
    for folder, package in (("mxformats", "mxformats"), ("kernels", "mxformats.kernels")):
        for path in sorted((root / folder).rglob("*.py")):
            parts = [package, *path.relative_to(root / folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _owner(name: str, known: dict[str, Path]) -> str | None:
    """The module ``name`` lives in (``pkg.mod.attr`` -> ``pkg.mod``), None outside ours."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """The ids of every node under an ``if TYPE_CHECKING:`` body."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            out.update(id(sub) for stmt in node.body for sub in ast.walk(stmt))
    return out


def _function_nodes(tree: ast.AST) -> set[int]:
    """The ids of every node inside a function body."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.update(id(sub) for stmt in node.body for sub in ast.walk(stmt))
    return out


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool,
              known: dict[str, Path]) -> Iterator[str]:
    """The modules of ours one import statement names (``from pkg import sub`` -> the
    submodule when ``sub`` is one, else ``pkg``)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = module.split(".") if is_package else module.split(".")[:-1]
            parts = parts[: len(parts) - node.level + 1]
            base = ".".join(parts + ([node.module] if node.module else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    for name in names:
        owner = _owner(name, known)
        if owner is not None:
            yield owner


def import_graph(root: Path = ROOT) -> list[Edge]:
    """Every edge between two of our modules, one per (importer, imported) pair."""
    known = modules(root)
    edges = []
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        type_only, in_function = _type_checking_nodes(tree), _function_nodes(tree)
        seen: dict[str, tuple[bool, bool]] = {}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _imported(node, module, path.name == "__init__.py", known):
                if target == module:
                    continue
                was = seen.get(target, (True, True))
                typed = id(node) in type_only
                seen[target] = (was[0] and typed, was[1] and (typed or id(node) in in_function))
        edges += [Edge(module, t, tc, lazy) for t, (tc, lazy) in sorted(seen.items())]
    return edges


def circles(edges: list[Edge]) -> list[frozenset[str]]:
    """The strongly connected components of two or more modules (Tarjan, iterative)."""
    graph: dict[str, list[str]] = {}
    for e in edges:
        graph.setdefault(e.importer, []).append(e.imported)
        graph.setdefault(e.imported, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        out.append(frozenset(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(graph[child])))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return out


def layer_of(module: str) -> int | None:
    """The floor of ``module`` (longest prefix in :data:`MODULE_LAYER`; the top-level package
    ``mxformats`` only as itself, so that a new module is never on a floor by default), None
    if unlisted."""
    if module in MODULE_LAYER:
        return MODULE_LAYER[module]
    name = module.rpartition(".")[0]
    while "." in name:
        if name in MODULE_LAYER:
            return MODULE_LAYER[name]
        name = name.rpartition(".")[0]
    return None


def upward(edges: list[Edge]) -> list[Edge]:
    """The imports of a module on a higher floor than the importer's."""
    return [e for e in edges
            if (layer_of(e.imported) or 0) > (layer_of(e.importer) or 0)]


def _describe(edge: Edge) -> str:
    kind = " (type-only)" if edge.type_only else " (in a function)" if edge.lazy else ""
    return f"{edge.importer} -> {edge.imported}{kind}"


def report(edges: list[Edge]) -> str:
    """Today's circles and upward imports, as the script prints them."""
    lines = []
    found = sorted(circles(edges), key=lambda c: (-len(c), sorted(c)))
    lines.append(f"{len(found)} circles:")
    for component in found:
        lines.append(f"  {len(component)} modules: {', '.join(sorted(component))}")
    up = upward(edges)
    lines.append(f"{len(up)} upward imports:")
    for e in up:
        lines.append(f"  {_describe(e)}: {LAYERS[layer_of(e.importer) or 0]} -> "
                     f"{LAYERS[layer_of(e.imported) or 0]}")
    return "\n".join(lines)


# -- the tests --------------------------------------------------------------------------------


def test_every_module_has_a_floor() -> None:
    unlisted = [m for m in modules() if layer_of(m) is None]
    assert not unlisted, f"give these a floor in MODULE_LAYER: {unlisted}"
    assert layer_of("mxformats.not_yet_written") is None
    assert layer_of("mxformats.validate.not_yet_written") == MODULE_LAYER["mxformats.validate"]


def test_no_circle_beyond_the_allowed() -> None:
    edges = import_graph()
    print(report(edges))
    found = set(circles(edges))
    extra = [sorted(c) for c in found if c not in ALLOWED_CIRCLES]
    assert not extra, f"import circles: {extra}"
    stale = [sorted(c) for c in ALLOWED_CIRCLES if c not in found]
    assert not stale, f"listed in ALLOWED_CIRCLES but no longer a circle: {stale}"


def test_allowed_circles_are_what_they_claim() -> None:
    edges = import_graph()
    for component, (kind, _) in ALLOWED_CIRCLES.items():
        assert kind == "type-only", kind
        kept = [e for e in edges if e.importer in component and e.imported in component
                and not e.type_only]
        assert not circles(kept), f"{sorted(component)} is a circle without {kind} imports"


def test_at_most_two_upward_imports_each_explained() -> None:
    assert len(ALLOWED_UPWARD) <= MAX_UPWARD
    found = {(e.importer, e.imported): e for e in upward(import_graph())}
    extra = [_describe(e) for pair, e in found.items() if pair not in ALLOWED_UPWARD]
    assert not extra, f"imports that run up a floor: {extra}"
    stale = [pair for pair in ALLOWED_UPWARD if pair not in found]
    assert not stale, f"listed in ALLOWED_UPWARD but no longer imported: {stale}"


def test_the_graph_reader_sees_each_kind_of_import(tmp_path: Path) -> None:
    """Module level, in a function, relative, ``from pkg import submodule`` and type-only."""
    for folder in ("mxformats/sub", "kernels"):
        (tmp_path / folder).mkdir(parents=True)
    files = {
        "mxformats/__init__.py": "",
        "mxformats/low.py": "X = 1\n",
        "mxformats/sub/__init__.py": "from . import leaf\n",
        "mxformats/sub/leaf.py": ("from typing import TYPE_CHECKING\n"
                                  "if TYPE_CHECKING:\n    from ..high import Y\n"
                                  "def f():\n    from mxformats.low import X\n"),
        "mxformats/high.py": "import mxformats.sub.leaf\nY = 2\n",
        "kernels/__init__.py": "from mxformats.low import X\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    got = {(e.importer, e.imported): (e.type_only, e.lazy) for e in import_graph(tmp_path)}
    assert got == {
        ("mxformats.sub", "mxformats.sub.leaf"): (False, False),
        ("mxformats.sub.leaf", "mxformats.high"): (True, True),
        ("mxformats.sub.leaf", "mxformats.low"): (False, True),
        ("mxformats.high", "mxformats.sub.leaf"): (False, False),
        ("mxformats.kernels", "mxformats.low"): (False, False),
    }
    assert circles([Edge(a, b, *kinds) for (a, b), kinds in got.items()]) == [
        frozenset({"mxformats.high", "mxformats.sub.leaf"})]


if __name__ == "__main__":
    sys.stdout.write(report(import_graph()) + "\n")
