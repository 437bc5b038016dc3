"""Where a module sits on the layer × expert grid the HTML reports draw
(:func:`position`), and the heatmap cells of per-module figures, one grid per projection
(:func:`grids`)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

__all__ = ["column_key", "grids", "position", "row_key"]

_POSITION = re.compile(
    r"^(?:.*?\.)?layers\.(?P<layer>\d+)\.(?:(?:mlp|block_sparse_moe)\.experts\.(?P<e>\d+)\."
    r"|(?:mlp|block_sparse_moe)\.(?P<shared>shared_experts?)\.|(?P<mlp>mlp)\."
    r"|(?P<attn>self_attn)\.)?(?P<rest>.*)$")


def position(name: str) -> tuple[str, str, str]:
    """Where module (or tensor) ``name`` sits on the layer × expert grid: (row, column,
    projection). Row: ``layer N``, or ``other`` outside the decoder layers; column: the
    routed expert's number, ``shared``, ``dense`` (a dense layer's MLP), ``attn``, or
    ``other``; projection: the module's last name part (``down_proj``...), a tensor's
    parameter (``.weight``...) dropped when the name has a ``_proj`` part."""
    parts = name.split(".")
    proj = next((p for p in reversed(parts) if p.endswith("_proj")), parts[-1])
    m = _POSITION.match(name)
    if m is None:
        return "other", "other", proj
    column = (m["e"] if m["e"] is not None else "shared" if m["shared"] else "dense" if m["mlp"]
              else "attn" if m["attn"] else "other")
    return f"layer {m['layer']}", column, proj


def row_key(row: str) -> tuple[int, int]:
    """Sort key of a row: the layers by number, then ``other``."""
    return (0, int(row.split()[1])) if row.startswith("layer ") else (1, 0)


def column_key(column: str) -> tuple[int, int, str]:
    """Sort key of a column: the routed experts by number, then the others by name."""
    return (0, int(column), "") if column.isdigit() else (1, 0, column)


def grids(records: Iterable[tuple[str, float, str]]) -> dict[str, tuple[
        list[str], list[str], dict[tuple[str, str], tuple[float, str]]]]:
    """Per projection: the rows, the columns and the cells of a :func:`~.svg.heatmap` of
    ``records`` (module name, value, tooltip); one cell per module."""
    by_proj: dict[str, dict[tuple[str, str], tuple[float, str]]] = defaultdict(dict)
    for name, value, tip in records:
        row, column, proj = position(name)
        by_proj[proj][(row, column)] = (value, tip)
    return {proj: (sorted({r for r, _ in cells}, key=row_key),
                   sorted({c for _, c in cells}, key=column_key), cells)
            for proj, cells in sorted(by_proj.items())}
