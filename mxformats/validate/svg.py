"""Static SVG plots for the HTML reports (``validate --html``, ``compare --html``), written
by hand: no plotting library, no script, no font file, nothing fetched when the page opens.

Four shapes cover what the reports draw: a :func:`heatmap` (layer × expert grids of an error
statistic or of finding counts, layer × code histograms), :func:`bars` (a code histogram),
:func:`strips` (a distribution per layer: each value a tick, the median a bar) and
:func:`boxes` (a binned distribution per layer: range, quartiles and median over the bins).
Every text that reaches the SVG, names from the checkpoint included, goes through
:func:`html.escape`, so a hostile tensor name is shown, never interpreted. Each plot is one
``<svg class="plot" data-plot=NAME>``; each drawn datum carries its value in a ``data-``
attribute and a ``<title>`` tooltip, so tests and readers can check every cell against the report.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

__all__ = ["bars", "boxes", "colour", "heatmap", "strips"]

#: Anchors of the sequential colour scale (viridis at 0, 1/4, 1/2, 3/4, 1): readable in grey
#: and by the colour-blind.
_SCALE = ((68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37))
_EMPTY = "#e6e6e6"
_CELL, _LEFT, _TOP, _GAP = 26, 110, 64, 2
_FONT = 'font-family="sans-serif" font-size="11"'


def colour(t: float) -> str:
    """The scale's colour at ``t`` in [0, 1] (clamped; NaN is the empty grey)."""
    if math.isnan(t):
        return _EMPTY
    t = min(max(t, 0.0), 1.0) * (len(_SCALE) - 1)
    i = min(int(t), len(_SCALE) - 2)
    f = t - i
    r, g, b = (round(a + (c - a) * f) for a, c in zip(_SCALE[i], _SCALE[i + 1], strict=True))
    return f"#{r:02x}{g:02x}{b:02x}"


def _open(name: str, width: int, height: int, title: str) -> list[str]:
    return [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" data-plot="{escape(name)}" '
            f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
            f"<title>{escape(title)}</title>",
            f'<text x="4" y="14" {_FONT} font-weight="bold">{escape(title)}</text>']


def _number(x: float) -> str:
    return f"{x:.4g}"


def heatmap(name: str, title: str, rows: Sequence[str], columns: Sequence[str],
            cells: Mapping[tuple[str, str], tuple[float, str]], *, low: float | None = None,
            high: float | None = None, legend: str = "") -> str:
    """A grid of ``rows`` × ``columns``: each ``cells[(row, column)]`` = (value, tooltip) a
    ``<rect class="cell">`` coloured on the scale from ``low`` to ``high`` (default: the
    cells' finite range), a cell without a value empty grey (``class="empty"``), a
    non-finite value dark red. ``legend`` names the value (with the range) under the grid."""
    finite = [v for v, _ in cells.values() if math.isfinite(v)]
    lo = min(finite, default=0.0) if low is None else low
    hi = max(finite, default=1.0) if high is None else high
    width = _LEFT + len(columns) * _CELL + 20
    height = _TOP + len(rows) * _CELL + 40
    out = _open(name, max(width, _LEFT + 400), height, title)
    for j, col in enumerate(columns):
        x = _LEFT + j * _CELL + _CELL // 2
        turn = f' transform="rotate(-40 {x} {_TOP - 6})"' if len(col) > 2 else ""
        out.append(f'<text x="{x}" y="{_TOP - 6}" {_FONT} text-anchor='
                   f'"{"start" if turn else "middle"}"{turn}>{escape(col)}</text>')
    for i, row in enumerate(rows):
        y = _TOP + i * _CELL
        out.append(f'<text x="{_LEFT - 6}" y="{y + _CELL // 2 + 4}" {_FONT} '
                   f'text-anchor="end">{escape(row)}</text>')
        for j, col in enumerate(columns):
            x = _LEFT + j * _CELL
            box = (f'x="{x}" y="{y}" width="{_CELL - _GAP}" height="{_CELL - _GAP}" '
                   f'data-row="{escape(row)}" data-column="{escape(col)}"')
            found = cells.get((row, col))
            if found is None:
                out.append(f'<rect class="empty" {box} fill="{_EMPTY}"/>')
                continue
            value, tip = found
            fill = (colour((value - lo) / (hi - lo) if hi > lo else 0.5)
                    if math.isfinite(value) else "#8b0000")
            out.append(f'<rect class="cell" {box} data-value="{value!r}" fill="{fill}">'
                       f"<title>{escape(tip)}</title></rect>")
    y = _TOP + len(rows) * _CELL + 16
    steps = 40
    for k in range(steps):
        out.append(f'<rect x="{_LEFT + k * 4}" y="{y - 10}" width="4" height="10" '
                   f'fill="{colour(k / (steps - 1))}"/>')
    out.append(f'<text x="{_LEFT - 6}" y="{y}" {_FONT} text-anchor="end">{_number(lo)}</text>')
    out.append(f'<text x="{_LEFT + steps * 4 + 6}" y="{y}" {_FONT}>{_number(hi)} '
               f"{escape(legend)}</text>")
    out.append("</svg>")
    return "\n".join(out)


def bars(name: str, title: str, labels: Sequence[str], counts: Sequence[float]) -> str:
    """A bar per label, its height proportional to its count (``<rect class="bar"
    data-value>``), the label under it."""
    width, height, base = max(320, 40 + len(labels) * 22), 170, 140
    top = max(max(counts, default=0), 1)
    out = _open(name, width, height, title)
    for k, (label, n) in enumerate(zip(labels, counts, strict=True)):
        h = 110 * n / top
        x = 30 + k * 22
        out.append(f'<rect class="bar" x="{x}" y="{base - h:.1f}" width="18" height="{h:.1f}" '
                   f'fill="{colour(0.3)}" data-value="{n!r}"><title>{escape(label)}: {n:g}'
                   "</title></rect>")
        out.append(f'<text x="{x + 9}" y="{base + 14}" {_FONT} text-anchor="middle">'
                   f"{escape(label)}</text>")
    out.append("</svg>")
    return "\n".join(out)


def strips(name: str, title: str, groups: Sequence[tuple[str, Sequence[float]]],
           unit: str = "") -> str:
    """A distribution per group (one row each): every finite value a tick (``<line
    class="tick" data-value>``) on one shared log2 axis when all values are positive, else a
    linear one; the median a wider mark. For per-layer scale distributions."""
    values = [v for _, vs in groups for v in vs if math.isfinite(v)]
    log = bool(values) and min(values) > 0
    key = (lambda v: math.log2(v)) if log else (lambda v: v)
    keys = [key(v) for v in values]
    lo, hi = min(keys, default=0.0), max(keys, default=1.0)
    span = (hi - lo) or 1.0
    plot_w, row_h = 400, 20
    height = _TOP + len(groups) * row_h + 30
    out = _open(name, _LEFT + plot_w + 40, height, title)

    def at(v: float) -> float:
        return _LEFT + plot_w * (key(v) - lo) / span

    for i, (label, vs) in enumerate(groups):
        y = _TOP + i * row_h
        out.append(f'<text x="{_LEFT - 6}" y="{y + 14}" {_FONT} text-anchor="end">'
                   f"{escape(label)}</text>")
        finite = sorted(v for v in vs if math.isfinite(v))
        for v in finite:
            out.append(f'<line class="tick" x1="{at(v):.1f}" x2="{at(v):.1f}" y1="{y + 3}" '
                       f'y2="{y + 17}" stroke="{colour(0.25)}" data-value="{v!r}">'
                       f"<title>{escape(label)}: {v:.6g}</title></line>")
        if finite:
            m = finite[len(finite) // 2]
            out.append(f'<rect x="{at(m) - 2:.1f}" y="{y + 1}" width="4" height="18" '
                       f'fill="{colour(0.9)}" stroke="black"><title>median {m:.6g}</title></rect>')
    y = _TOP + len(groups) * row_h + 16
    axis = "log2 " if log else ""
    edge = (lambda k: f"2^{k:.1f}") if log else _number
    out.append(f'<text x="{_LEFT}" y="{y}" {_FONT}>{edge(lo)}</text>')
    out.append(f'<text x="{_LEFT + plot_w}" y="{y}" {_FONT} text-anchor="end">{edge(hi)} '
               f"({axis}{escape(unit)})</text>")
    out.append("</svg>")
    return "\n".join(out)


def _quantile_bin(cumulative: Sequence[int], q: float) -> int:
    """The first bin at which the cumulative count reaches the fraction ``q`` of the total."""
    total = cumulative[-1]
    return next(i for i, c in enumerate(cumulative) if c >= max(q * total, 1))


def boxes(name: str, title: str, groups: Sequence[tuple[str, Sequence[int]]],
          labels: Sequence[str], unit: str = "") -> str:
    """A binned distribution per group (one row each, ``groups`` = (label, counts over the
    bins named by ``labels``)): a whisker from the first to the last bin with a count, a box
    from the first to the third quartile's bin, the median's bin a wider mark, on one axis of
    bins trimmed to those any group uses. Each row is a ``<g class="dist" data-row
    data-counts="BIN:COUNT ...">`` (every bin with a count), so the whole histogram is in the
    page. For per-layer scale distributions kept as histograms (E8M0/E4M3 bytes, exponents)."""
    used = [i for i in range(len(labels)) if any(counts[i] for _, counts in groups)]
    first, last = (used[0], used[-1]) if used else (0, 0)
    span = max(last - first, 1)
    plot_w, row_h = 400, 20
    height = _TOP + len(groups) * row_h + 30
    out = _open(name, _LEFT + plot_w + 40, height, title)

    def at(i: int) -> float:
        return _LEFT + plot_w * (i - first) / span

    for k, (label, counts) in enumerate(groups):
        y = _TOP + k * row_h
        nonzero = " ".join(f"{i}:{n}" for i, n in enumerate(counts) if n)
        out.append(f'<g class="dist" data-row="{escape(label)}" data-counts="{nonzero}">')
        out.append(f'<text x="{_LEFT - 6}" y="{y + 14}" {_FONT} text-anchor="end">'
                   f"{escape(label)}</text>")
        cumulative = [0] * len(counts)
        running = 0
        for i, n in enumerate(counts):
            running += n
            cumulative[i] = running
        if running:
            lo, q1, med, q3, hi = (_quantile_bin(cumulative, q)
                                   for q in (0.0, 0.25, 0.5, 0.75, 1.0))
            tip = (f"{label}: {running} values, {labels[lo]} .. {labels[hi]}, quartiles "
                   f"{labels[q1]} / {labels[med]} / {labels[q3]}")
            out.append(f'<title>{escape(tip)}</title>')
            out.append(f'<line x1="{at(lo):.1f}" x2="{at(hi):.1f}" y1="{y + 10}" y2="{y + 10}" '
                       'stroke="black"/>')
            out.append(f'<rect x="{at(q1):.1f}" y="{y + 4}" width="{max(at(q3) - at(q1), 1):.1f}"'
                       f' height="12" fill="{colour(0.4)}" stroke="black"/>')
            out.append(f'<rect x="{at(med) - 2:.1f}" y="{y + 1}" width="4" height="18" '
                       f'fill="{colour(0.9)}" stroke="black"/>')
        out.append("</g>")
    y = _TOP + len(groups) * row_h + 16
    out.append(f'<text x="{_LEFT}" y="{y}" {_FONT}>{escape(labels[first])}</text>')
    out.append(f'<text x="{_LEFT + plot_w}" y="{y}" {_FONT} text-anchor="end">'
               f"{escape(labels[last])} ({escape(unit)})</text>")
    out.append("</svg>")
    return "\n".join(out)
