"""Text helpers shared by the spec generator, the CLI and the comparison tables.

Values are written exactly (hex floats) or in a short human form that is also exact for every
value of these formats; tables are GitHub Markdown; vector files are JSON with one case a line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

import numpy as np

from mxformats.formats import Format

#: The version of the vector files' schema (``schema_version`` in every JSON file of spec/).
SCHEMA_VERSION = 1

def hex_float(v: float) -> str:
    """A float as an exact C99/Python hex literal (``0x1.8000000000000p-1``), or inf/nan."""
    if np.isnan(v):
        return "nan" if not np.signbit(v) else "-nan"
    return float(v).hex()


def short_float(v: float) -> str:
    """A float for humans: shortest repr, exact for every value of these formats."""
    if np.isnan(v):
        return "NaN"
    if np.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == 0:
        return "-0" if np.signbit(v) else "0"
    if abs(v) >= 2**20 or abs(v) < 2**-10:
        exponent = int(np.frexp(abs(v))[1]) - 1
        mantissa = abs(v) / 2.0**exponent
        sign = "-" if v < 0 else ""
        return f"{sign}2^{exponent}" if mantissa == 1 else f"{sign}{mantissa:g}·2^{exponent}"
    return f"{v:.10g}"


def code_hex(fmt: Format, code: int) -> str:
    return f"0x{code:0{(fmt.bits + 3) // 4}X}"


def layout(fmt: Format) -> str:
    """The bit layout as letters, e.g. ``S EEEE MMM``."""
    if fmt.kind == "int":
        return ("S" if fmt.signed else "") + "I" * (fmt.bits - (1 if fmt.signed else 0))
    parts = ["S"] if fmt.signed else []
    parts.append("E" * fmt.ebits)
    if fmt.mbits:
        parts.append("M" * fmt.mbits)
    return " ".join(parts)


def fields(fmt: Format, code: int) -> str:
    """A code split into its fields, e.g. ``0.1111.110``."""
    bits = format(code, f"0{fmt.bits}b")
    if fmt.kind == "int":
        return bits
    cuts = ([1] if fmt.signed else []) + [fmt.ebits] + ([fmt.mbits] if fmt.mbits else [])
    out, i = [], 0
    for width in cuts:
        out.append(bits[i : i + width])
        i += width
    return ".".join(out)


def json_file(header: dict[str, object], cases: Iterable[Mapping[str, object]]) -> str:
    """JSON with one case per line, so that diffs of the vectors read case by case."""
    head = json.dumps(header, indent=2)[:-2]
    rows = ",\n".join("    " + json.dumps(c, separators=(", ", ": ")) for c in cases)
    return f'{head},\n  "cases": [\n{rows}\n  ]\n}}\n'


def table(header: list[str], rows: Iterable[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"
