"""Static SVG plots for the HTML reports (``validate --html``, ``compare --html``), drawn by
matplotlib (the ``report`` extra: ``pip install "mxformats[report]"``) and inlined in the page:
no script, no font file, no image, nothing fetched when the page opens.

Four shapes cover what the reports draw: a :func:`heatmap` (layer × expert grids of an error
statistic or of finding counts, layer × code histograms), :func:`bars` (a code histogram),
:func:`strips` (a distribution per layer: each value a tick, the median a bar) and
:func:`boxes` (a binned distribution per layer: range, quartiles and median over the bins).

Each plot is drawn on its own :class:`matplotlib.figure.Figure` through the SVG canvas (no
pyplot, no global figure state) under a local :func:`matplotlib.rc_context`: glyphs as paths
(``svg.fonttype = "path"``: the page needs no font), a fixed ``svg.hashsalt`` and no date, so
the same report gives the same bytes; ``text.parse_math = False``, so a name with ``$`` is
text, never mathtext. Each plot is one ``<svg class="plot" data-plot=NAME>``; each drawn datum
is an artist tagged with a ``gid``, and its ``<g>`` is then given its ``class`` (``cell``,
``empty``, ``bar``, ``tick``, ``dist``), its values in ``data-`` attributes and a ``<title>``
tooltip, so tests and readers can check every cell against the report. Every text this module
writes into the markup (names from the checkpoint included) goes through :func:`html.escape`;
the ids matplotlib writes are prefixed per plot, so several plots share a page.
"""

from __future__ import annotations

import hashlib
import io
import math
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from html import escape

import matplotlib
from matplotlib.artist import Artist
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import NullLocator

__all__ = ["bars", "boxes", "colour", "heatmap", "strips"]

#: No date, creator or licence block: the bytes depend on the data only.
_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}
_DRAWING = threading.Lock()
_CMAP = matplotlib.colormaps["viridis"]  # sequential, readable in grey and by the colour-blind
_EMPTY = "#e6e6e6"
_NON_FINITE = "#8b0000"
_CELL_IN = 0.28  # a heatmap cell, inches
_LEFT_IN, _TOP_IN, _BOTTOM_IN = 1.2, 0.8, 0.6
_ROW_IN = 0.22  # a strip or box row


def colour(t: float) -> str:
    """The scale's colour at ``t`` in [0, 1] (clamped; NaN is the empty grey)."""
    if math.isnan(t):
        return _EMPTY
    r, g, b, _ = _CMAP(min(max(t, 0.0), 1.0))
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


class _Plot:
    """One figure with one axes of ``width`` × ``height`` inches, the margins given (inches),
    and the data artists tagged so far (gid -> the ``<g>`` attributes and tooltip)."""

    def __init__(self, name: str, title: str, width: float, height: float, *,
                 left: float = _LEFT_IN, top: float = _TOP_IN, bottom: float = _BOTTOM_IN,
                 right: float = 0.3) -> None:
        self.name, self.title = name, title
        self.figure = Figure(figsize=(width, height))
        self.axes = self.figure.add_axes((left / width, bottom / height,
                                          max(1 - (left + right) / width, 0.05),
                                          max(1 - (top + bottom) / height, 0.05)))
        self.figure.text(0.01, 1 - 0.1 / height, title, va="top", fontweight="bold")
        self.marks: dict[str, tuple[str, dict[str, str], str]] = {}

    def tag(self, artist: Artist, kind: str, tip: str, **data: str) -> None:
        """Tag a data artist: its ``<g>`` gets ``class=kind``, ``data-KEY=VALUE`` for each of
        ``data`` (``_`` in a key becomes ``-``) and the tooltip ``tip``."""
        artist.set_clip_on(False)  # no clip path: the page has no url() at all
        gid = f"mx{len(self.marks)}"
        artist.set_gid(gid)
        self.marks[gid] = (kind, {k.replace("_", "-"): v for k, v in data.items()}, tip)

    def svg(self) -> str:
        """The plot as inline SVG (see the module docstring)."""
        buffer = io.StringIO()
        FigureCanvasSVG(self.figure).print_svg(buffer, metadata=_METADATA)
        text = buffer.getvalue()
        text = text[text.index("<svg"):]  # no XML declaration or DOCTYPE inside HTML
        text = re.sub(r"\n\s*", "", text)  # matplotlib's indentation (no text of ours yet)

        def mark(m: re.Match[str]) -> str:
            kind, data, tip = self.marks[m.group(1)]
            attrs = "".join(f' data-{k}="{escape(v)}"' for k, v in data.items())
            return f'<g class="{kind}"{attrs}>' + (f"<title>{escape(tip)}</title>" if tip else "")

        text = re.sub(r'<g id="(mx\d+)">', mark, text)
        prefix = "p" + hashlib.sha256(self.name.encode()).hexdigest()[:8] + "-"
        text = re.sub(r'(\bid="|href="#|url\(#)', rf"\g<1>{prefix}", text)
        root = text.index(">")
        return (f'<svg class="plot" data-plot="{escape(self.name)}" role="img"'
                f"{text[len('<svg'):root]}><title>{escape(self.title)}</title>{text[root + 1:]}")


def _draw(build: Callable[[], _Plot]) -> str:
    """``build()``'s plot as SVG, under the settings of the module docstring. rcParams are
    process-wide, so plots are drawn one at a time (a lock): threads never see each other's
    settings, and the caller's own rcParams are restored after each plot."""
    with _DRAWING, matplotlib.rc_context({
            "svg.fonttype": "path", "svg.hashsalt": "mxformats", "text.parse_math": False,
            "font.family": "DejaVu Sans", "font.size": 8.0}):
        return build().svg()


def _number(x: float) -> str:
    return f"{x:.4g}"


def heatmap(name: str, title: str, rows: Sequence[str], columns: Sequence[str],
            cells: Mapping[tuple[str, str], tuple[float, str]], *, low: float | None = None,
            high: float | None = None, legend: str = "") -> str:
    """A grid of ``rows`` × ``columns``: each ``cells[(row, column)]`` = (value, tooltip) a
    rectangle tagged ``cell`` (``data-row``, ``data-column``, ``data-value`` = the value's
    ``repr``) coloured on the scale from ``low`` to ``high`` (default: the cells' finite
    range), a cell without a value empty grey (``empty``), a non-finite value dark red.
    ``legend`` names the value on the colour bar."""
    finite = [v for v, _ in cells.values() if math.isfinite(v)]
    lo = min(finite, default=0.0) if low is None else low
    hi = max(finite, default=1.0) if high is None else high

    def build() -> _Plot:
        grid_w, grid_h = len(columns) * _CELL_IN, len(rows) * _CELL_IN
        plot = _Plot(name, title, max(_LEFT_IN + grid_w + 1.4, 4.0),
                     _TOP_IN + grid_h + _BOTTOM_IN, right=max(4.0 - _LEFT_IN - grid_w, 1.4))
        ax = plot.axes
        top = hi if hi > lo else lo + 1.0
        norm = Normalize(lo, top)
        for i, row in enumerate(rows):
            for j, col in enumerate(columns):
                found = cells.get((row, col))
                box = Rectangle((j + 0.04, i + 0.04), 0.92, 0.92, linewidth=0)
                ax.add_patch(box)
                if found is None:
                    box.set_facecolor(_EMPTY)
                    plot.tag(box, "empty", "", row=row, column=col)
                    continue
                value, tip = found
                box.set_facecolor((_CMAP(norm(value)) if hi > lo else _CMAP(0.5))
                                  if math.isfinite(value) else _NON_FINITE)
                plot.tag(box, "cell", tip, row=row, column=col, value=repr(value))
        ax.set_xlim(0, max(len(columns), 1))
        ax.set_ylim(max(len(rows), 1), 0)
        ax.set_xticks([j + 0.5 for j in range(len(columns))], list(columns),
                      rotation=40 if any(len(c) > 2 for c in columns) else 0, ha="left")
        ax.set_yticks([i + 0.5 for i in range(len(rows))], list(rows))
        ax.xaxis.tick_top()
        ax.tick_params(length=0)
        for spine in ax.spines.values():
            spine.set_visible(False)
        steps = _CMAP.resampled(40)  # 40 bands, not 256 paths, on the colour bar
        bar = plot.figure.colorbar(matplotlib.cm.ScalarMappable(norm=norm, cmap=steps), ax=ax,
                                   orientation="horizontal", fraction=0.05, pad=0.02,
                                   aspect=30)
        bar.set_ticks([lo, top], labels=[_number(lo), _number(hi)])
        bar.set_label(legend)
        if bar.solids is not None:
            bar.solids.set_rasterized(False)  # vector, not an embedded PNG
            bar.solids.set_clip_on(False)  # no clip path: the page has no url() at all
        return plot

    return _draw(build)


def bars(name: str, title: str, labels: Sequence[str], counts: Sequence[float]) -> str:
    """A bar per label, its height its count (tagged ``bar``, ``data-value`` = the count's
    ``repr``), the label under it."""

    def build() -> _Plot:
        plot = _Plot(name, title, max(3.6, 1.0 + len(labels) * 0.26), 2.2, left=0.6,
                     top=0.35, bottom=0.35)
        drawn = plot.axes.bar(range(len(labels)), counts, width=0.8, color=colour(0.3))
        for label, n, patch in zip(labels, counts, drawn.patches, strict=True):
            plot.tag(patch, "bar", f"{label}: {n:g}", value=repr(n))
        plot.axes.set_xticks(range(len(labels)), list(labels))
        plot.axes.spines[["top", "right"]].set_visible(False)
        return plot

    return _draw(build)


def strips(name: str, title: str, groups: Sequence[tuple[str, Sequence[float]]],
           unit: str = "") -> str:
    """A distribution per group (one row each): every finite value a tick (tagged ``tick``,
    ``data-value`` = its ``repr``) on one shared log2 axis when all values are positive, else
    a linear one; the median a wider mark. For per-layer scale distributions."""
    values = [v for _, vs in groups for v in vs if math.isfinite(v)]
    log = bool(values) and min(values) > 0

    def build() -> _Plot:
        plot = _Plot(name, title, 6.0, _TOP_IN + len(groups) * _ROW_IN + _BOTTOM_IN,
                     top=0.35)
        ax = plot.axes
        for i, (label, vs) in enumerate(groups):
            finite = sorted(v for v in vs if math.isfinite(v))
            for v in finite:
                (tick,) = ax.plot([v, v], [i - 0.35, i + 0.35], color=colour(0.25),
                                  linewidth=0.8)
                plot.tag(tick, "tick", f"{label}: {v:.6g}", value=repr(v))
            if finite:
                m = finite[len(finite) // 2]
                ax.plot([m], [i], marker="|", markersize=12, markeredgewidth=3,
                        color=colour(0.9), clip_on=False)
        if log:
            ax.set_xscale("log", base=2)
        if values:  # the range's two ends, labelled as plain text (2^k.k on a log axis)
            ends = sorted({min(values), max(values)})
            ax.set_xticks(ends, [f"2^{math.log2(v):.1f}" if log else _number(v) for v in ends])
            ax.xaxis.set_minor_locator(NullLocator())
        ax.set_yticks(range(len(groups)), [label for label, _ in groups])
        ax.set_ylim(len(groups) - 0.5, -0.5)
        ax.set_xlabel(unit + (" (log2 axis)" if log else ""))
        return plot

    return _draw(build)


def _quantile_bin(cumulative: Sequence[int], q: float) -> int:
    """The first bin at which the cumulative count reaches the fraction ``q`` of the total."""
    total = cumulative[-1]
    return next(i for i, c in enumerate(cumulative) if c >= max(q * total, 1))


def boxes(name: str, title: str, groups: Sequence[tuple[str, Sequence[int]]],
          labels: Sequence[str], unit: str = "") -> str:
    """A binned distribution per group (one row each, ``groups`` = (label, counts over the
    bins named by ``labels``)): a whisker from the first to the last bin with a count, a box
    from the first to the third quartile's bin, the median's bin a wider mark, on one axis of
    bins trimmed to those any group uses. Each row is tagged ``dist`` with ``data-row`` and
    ``data-counts="BIN:COUNT ..."`` (every bin with a count), so the whole histogram is in the
    page. For per-layer scale distributions kept as histograms (E8M0/E4M3 bytes, exponents)."""
    used = [i for i in range(len(labels)) if any(counts[i] for _, counts in groups)]
    first, last = (used[0], used[-1]) if used else (0, 0)

    def build() -> _Plot:
        plot = _Plot(name, title, 6.0, _TOP_IN + len(groups) * _ROW_IN + _BOTTOM_IN,
                     top=0.35)
        ax = plot.axes
        for k, (label, counts) in enumerate(groups):
            nonzero = " ".join(f"{i}:{n}" for i, n in enumerate(counts) if n)
            cumulative, running = [0] * len(counts), 0
            for i, n in enumerate(counts):
                running += n
                cumulative[i] = running
            row = Rectangle((first, k - 0.5), 0, 1, fill=False, linewidth=0)
            ax.add_patch(row)
            tip = ""
            if running:
                lo, q1, med, q3, hi = (_quantile_bin(cumulative, q)
                                       for q in (0.0, 0.25, 0.5, 0.75, 1.0))
                tip = (f"{label}: {running} values, {labels[lo]} .. {labels[hi]}, quartiles "
                       f"{labels[q1]} / {labels[med]} / {labels[q3]}")
                ax.plot([lo, hi], [k, k], color="black", linewidth=0.8, clip_on=False)
                ax.add_patch(Rectangle((q1, k - 0.3), max(q3 - q1, 0.05), 0.6,
                                       facecolor=colour(0.4), edgecolor="black",
                                       linewidth=0.6, clip_on=False))
                ax.plot([med], [k], marker="|", markersize=12, markeredgewidth=3,
                        color=colour(0.9), clip_on=False)
            plot.tag(row, "dist", tip, row=label, counts=nonzero)
        ax.set_xlim(first - 0.5, max(last, first + 1) + 0.5)
        ax.set_xticks([first, last] if last > first else [first],
                      [labels[first], labels[last]] if last > first else [labels[first]])
        ax.set_yticks(range(len(groups)), [label for label, _ in groups])
        ax.set_ylim(len(groups) - 0.5, -0.5)
        ax.set_xlabel(unit)
        return plot

    return _draw(build)
