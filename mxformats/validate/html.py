"""The HTML reports: ``mxformats validate --html`` (:func:`render_report`) and ``mxformats
compare --html`` (:func:`render_comparison`).

One self-contained file: inline CSS, plots as inline SVG (:mod:`mxformats.validate.svg`,
drawn by matplotlib: the ``report`` extra; this module imports it), no script, no font, no
image, nothing fetched when it opens (from disk or as a CI artifact); the only links are the
check docs (:func:`mxformats.output.check_url`), which a reader follows by clicking. Built
from what the run already holds (the :class:`~.report.Report` and its JSON data: per-module
reproduction records, the numbers tasks' code histograms, scale histograms and small scale
arrays), never by reading tensors again, so it costs no memory beyond the report.

Every text from the checkpoint (names, paths, messages that quote them) is escaped twice over:
:func:`~.report.printable` for control characters, :func:`html.escape` for markup.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

import numpy as np

from mxformats._version import __version__
from mxformats.output import check_url, printable

from .findings import CHECKS, Finding, Severity
from .grid import column_key, grids, position, row_key
from .report import Report
from .svg import bars, boxes, heatmap, strips

__all__ = ["render_comparison", "render_report", "write_html"]

#: Findings listed per check; the rest are counted (the JSON report holds them all).
LISTED = 100
#: Modules in a "worst modules" table.
WORST = 15

_STYLE = """
body{font-family:sans-serif;margin:1.5em auto;max-width:1200px;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}
.verdict{font-size:1.3em;font-weight:bold;padding:.4em .8em;display:inline-block}
.ok{background:#d8f0d8}.failed{background:#f6d5d5}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.2em .5em;
text-align:left;vertical-align:top}th{background:#f2f2f2}
.error{color:#b00000;font-weight:bold}.warning{color:#8a6d00;font-weight:bold}.info{color:#555}
.plots{display:flex;flex-wrap:wrap;gap:1em}code{background:#f4f4f4;word-break:break-all}
"""

def _page(title: str, body: list[str]) -> str:
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<link rel="icon" href="data:,">',  # no favicon.ico request when served
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>",
        *body, f"<footer><p>mxformats {escape(__version__)}</p></footer></body></html>", ""])


def _text(value: object) -> str:
    """A value from the checkpoint as HTML text: printable, then escaped."""
    return escape(printable(str(value)))


def _table(rows: Iterable[tuple[str, str]]) -> str:
    """A two-column table; the cells are HTML already (escaped by the caller)."""
    return "<table>" + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows) + \
        "</table>"


def write_html(path: Path, command: str, render: Callable[[], str]) -> int:
    """Write the page ``render`` gives to ``path`` (UTF-8): 0, or 2 when it cannot be written
    (:func:`mxformats.output.cannot_write`)."""
    from mxformats.output import cannot_write

    try:
        path.write_text(render(), encoding="utf-8")
    except OSError as exc:
        return cannot_write(command, exc)
    return 0


def _listed(extra: object, key: str) -> list[object]:
    """``extra[key]`` when it is a list, else nothing."""
    found = extra.get(key) if isinstance(extra, dict) else None
    return found if isinstance(found, list) else []


def _float(x: object) -> float:
    """A JSON report's number (finite, or ``NaN``/``Infinity`` as strings) as a float."""
    if isinstance(x, (int, float)):
        return float(x)
    try:
        return float(str(x))
    except ValueError:
        return math.nan


# -- validate --html ------------------------------------------------------------------------

def _identity(report: Report) -> list[str]:
    rows = [("checkpoint", _text(report.root)),
            ("format", _text(report.format + (f" ({report.format_detail})"
                                                if report.format_detail else ""))),
            ("level", escape(report.level.value)), ("started (UTC)", escape(report.started)),
            ("seconds", f"{report.seconds:.2f}")]
    fingerprints = [fp for f in report.findings if f.check.id == "FINGERPRINT"
                    for fp in _listed(f.extra, "fingerprints")]
    rows.append(("producer fingerprint", "<br>".join(map(_text, fingerprints))
                 or "none found (needs --level scales or full)"))
    ckpt = report.ckpt
    if ckpt is not None:
        from .deployment import checkpoint_tp

        qc = ckpt.quant_config or {}
        if qc.get("version") is not None:
            rows.append(("producer", _text(f"{qc.get('quant_method')} {qc['version']}")))
        desc = ckpt.descriptor
        tp = None if desc is None else checkpoint_tp(ckpt, desc)
        rows.append(("admissible TP", "unknown" if tp is None
                     else escape(", ".join(map(str, tp)) or "none")))
        per_dtype: dict[str, int] = defaultdict(int)
        for t in ckpt.tensors.values():
            per_dtype[t.dtype] += t.nbytes
        rows.append(("bytes", f"{ckpt.bytes_total:,} in {len(ckpt.shards)} shard(s), "
                     f"{len(ckpt.tensors):,} tensors: " + ", ".join(
                         f"{_text(k)} {v:,}" for k, v in sorted(per_dtype.items()))))
    manifest = [f for f in report.findings if f.check.group == "manifest"]
    rows.append(("manifest", "<br>".join(
        f"{escape(f.check.id)}: {_text(f.message)}" for f in manifest[:10])
        or ("verified, no difference" if "manifest" in report.modules_run else "not given")))
    return ["<h2 id=\"identity\">Checkpoint</h2>", _table(rows)]


_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def _where(f: Finding) -> str:
    parts = [p for p in (f.file, f.tensor) if p]
    if f.offset is not None:
        parts.append(f"byte {f.offset}")
    return _text(", ".join(parts))


def _findings(report: Report) -> list[str]:
    by_check: dict[str, list[Finding]] = defaultdict(list)
    for f in report.findings:
        by_check[f.check.id].append(f)
    ordered = sorted(by_check.items(), key=lambda kv: (
        min(_ORDER[f.effective_severity] for f in kv[1]), kv[0]))
    out = ['<h2 id="findings">Findings</h2>']
    if not ordered:
        out.append("<p>No findings.</p>")
    summary = "".join(
        f'<tr><td><a href="#check-{escape(cid)}">{escape(cid)}</a></td>'
        f"<td>{escape(CHECKS[cid].group)}</td><td>{len(found)}</td></tr>" for cid, found in ordered)
    if summary:
        out.append(f"<table><tr><th>check</th><th>group</th><th>findings</th></tr>{summary}"
                   "</table>")
    for cid, found in ordered:
        check = CHECKS[cid]
        out.append(f'<h3 id="check-{escape(cid)}"><a href="{escape(check_url(cid))}">'
                   f"{escape(cid)}</a> ({escape(check.group)}, {len(found)})</h3>")
        out.append(f"<p>{escape(check.meaning)}</p>")
        if check.fix:
            out.append(f"<p>Fix: {escape(check.fix)}</p>")
        items = "".join(
            f'<li><span class="{f.effective_severity.value}">{f.effective_severity.value}</span>'
            f" <code>{_where(f)}</code> {_text(f.message)}</li>" for f in found[:LISTED])
        out.append(f"<ul>{items}</ul>")
        if len(found) > LISTED:
            out.append(f"<p>... {len(found) - LISTED} more (see --format json)</p>")
    return out


def _finding_grid(report: Report) -> list[str]:
    """Where the findings that name a tensor sit on the layer × expert grid (all
    projections together): a count per cell."""
    counts: dict[tuple[str, str], list[str]] = defaultdict(list)
    for f in report.findings:
        if f.tensor and f.check.group != "internal":
            row, column, _ = position(f.tensor)
            counts[(row, column)].append(f.check.id)
    if not counts:
        return []
    cells = {k: (float(len(ids)), f"{k[0]}, {k[1]}: " + ", ".join(sorted(set(ids))))
             for k, ids in counts.items()}
    rows = sorted({r for r, _ in cells}, key=row_key)
    columns = sorted({c for _, c in cells}, key=column_key)
    return ["<h3>Where the findings sit</h3>",
            heatmap("findings-grid", "findings per layer × expert", rows, columns, cells,
                    low=0.0, legend="findings")]


def _reproduction(repro: dict[str, Any]) -> list[str]:
    records = [r for r in repro.get("per_module", []) if isinstance(r, dict)]
    out = ['<h2 id="reproduction">Reproduction against the source</h2>',
           _table([("source", _text(repro.get("source"))),
                   ("profile", _text(repro.get("profile"))),
                   ("modules", f"{_text(repro.get('modules_reproduced'))} of "
                    f"{_text(repro.get('modules_checked'))} reproduced bit for bit "
                    f"({_text(repro.get('modules_total'))} quantized)"),
                   ("tensors", f"{_text(repro.get('identical'))} of "
                    f"{_text(repro.get('tensors'))} identical")])]
    if not records:
        return out
    out.append("<p>Relative error: ‖decoded − source‖ / ‖source‖ per module (RMS of the error "
               "over RMS of the source weight); SQNR = −20 log10 of it.</p>")
    out += _error_maps(records, "rel_error", "repro", "relative error")
    engine = [r for r in records if "engine_rel_error" in r
              and _float(r["engine_rel_error"]) != _float(r.get("rel_error"))]
    if engine:
        out.append("<h3>The error the engine sees</h3><p>Where the engine decodes a module "
                   "otherwise than the file says (one global scale for fused gate and up), "
                   "its error against the source:</p>")
        out += _error_maps(engine, "engine_rel_error", "engine", "engine relative error",
                           sqnr="engine_sqnr_db")
    worst = sorted(records, key=lambda r: -_float(r.get("rel_error")) if not math.isnan(
        _float(r.get("rel_error"))) else math.inf)[:WORST]
    has_engine = any("engine_rel_error" in r for r in records)
    head = "<tr><th>module</th><th>relative error</th><th>SQNR (dB)</th>" + (
        "<th>engine relative error</th>" if has_engine else "") + "<th>identical</th></tr>"
    body = "".join(
        f"<tr><td><code>{_text(r.get('module'))}</code></td>"
        f"<td>{_float(r.get('rel_error')):.5g}</td><td>{_float(r.get('sqnr_db')):.2f}</td>"
        + (f"<td>{_float(r.get('engine_rel_error', math.nan)):.5g}</td>" if has_engine else "")
        + f"<td>{_text(r.get('identical'))}</td></tr>" for r in worst)
    out += [f"<h3>The {len(worst)} worst modules</h3>", f"<table>{head}{body}</table>"]
    return out


def _error_maps(records: Sequence[Mapping[str, Any]], key: str, name: str,
                legend: str, sqnr: str = "sqnr_db") -> list[str]:
    """A layer × expert heatmap of ``records[key]`` per projection, on one shared scale (the
    tooltips give ``records[sqnr]`` too)."""
    values = [(str(r.get("module")), _float(r.get(key)),
               f"{printable(str(r.get('module')))}: {legend} {_float(r.get(key)):.5g}, SQNR "
               f"{_float(r.get(sqnr)):.2f} dB") for r in records]
    finite = [v for _, v, _ in values if math.isfinite(v)]
    lo, hi = min(finite, default=0.0), max(finite, default=1.0)
    plots = [heatmap(f"{name}-{proj}", f"{legend}: {proj}", rows, columns, cells, low=lo,
                     high=hi, legend=legend)
             for proj, (rows, columns, cells) in grids(values).items()]
    return ['<div class="plots">', *plots, "</div>"]


def _numbers(report: Report) -> list[str]:
    """Code histograms (the whole checkpoint, and per layer) and the small scale tensors'
    distributions per layer, from the numbers tasks' records."""
    from . import numbers
    from .resume import result_from_json

    hist: dict[str, dict[str, np.ndarray]] = defaultdict(dict)  # kind -> row -> counts
    scales: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    # (param, bins) -> row -> counts
    binned: dict[tuple[str, str], dict[str, np.ndarray]] = defaultdict(dict)
    for task in report.tasks:
        try:
            result = result_from_json(task.get("result"), int(task.get("index", 0)))
        except (ValueError, KeyError, TypeError):
            continue
        for o in result.outcomes.get("numbers", []):
            row = position(o.module)[0]
            for kind, counts in o.hist.items():
                hist[kind][row] = hist[kind].get(row, 0) + counts
            for param, (bins, counts) in o.scale_hist.items():
                binned[param, bins][row] = binned[param, bins].get(row, 0) + counts
            for param, a in (o.small or {}).items():
                if a.dtype.kind == "f" or a.dtype.name in ("bfloat16", "float8_e4m3fn"):
                    scales[param][row] += [float(v) for v in a.astype(np.float64).reshape(-1)]
    out: list[str] = []
    if hist:
        out.append('<h2 id="codes">Code histograms</h2><p>The 4-bit codes of the quantized '
                   "weights (sampled rows, as the CODE_HISTOGRAM check counts them): fp4 by "
                   "code 0..15, int4 by value −8..7.</p>")
        for kind, per_row in sorted(hist.items()):
            labels = [str(c) for c in range(16)] if kind == "fp4" else [
                str(c - 8) for c in range(16)]
            total = sum(per_row.values())
            rows = sorted(per_row, key=row_key)
            cells = {(r, labels[c]): (float(per_row[r][c]) / max(float(per_row[r].sum()), 1.0),
                                      f"{r}, code {labels[c]}: {int(per_row[r][c])}")
                     for r in rows for c in range(16)}
            out += ['<div class="plots">',
                    bars(f"codes-{kind}", f"{kind} codes, all layers", labels,
                         [float(n) for n in np.asarray(total).reshape(-1)]),
                    heatmap(f"codes-{kind}-layers", f"{kind} codes per layer (share)", rows,
                            labels, cells, low=0.0, legend="share of the layer's codes"),
                    "</div>"]
    if scales or binned:
        out.append('<h2 id="scales">Scale distributions per layer</h2>')
    if binned:
        out.append("<p>Every scale tensor of every module of the layer, as the numbers tasks "
                   "binned it: 1-byte scales (E8M0 exponents, E4M3 block scales) by raw byte, "
                   f"float scales by binary exponent (np.frexp: value = m·2^e, 0.5 ≤ |m| < 1; "
                   f"e clipped to {numbers.EXPONENT_LOW}..{numbers.EXPONENT_LOW + 255}; zero "
                   "and non-finite at e = 0), a bin labelled 2^k holding |values| in "
                   "[2^k, 2^(k+1)). Whisker: the smallest to the largest bin used; "
                   "box: the quartiles; mark: the median.</p><div class=\"plots\">")
        for (param, bins), per_row in sorted(binned.items()):
            labels = ([f"0x{b:02x}" for b in range(numbers.SCALE_BINS)] if bins == "byte" else
                      [f"2^{numbers.EXPONENT_LOW + b - 1}" for b in range(numbers.SCALE_BINS)])
            counts = [(r, [int(n) for n in per_row[r]]) for r in sorted(per_row, key=row_key)]
            out.append(boxes(f"scale-hist-{printable(param)}-{bins}",
                             f"{printable(param)} by {bins}", counts, labels,
                             unit="raw byte" if bins == "byte" else "log2, floor"))
        out.append("</div>")
    if scales:
        out.append("<p>The scale tensors small enough for the checks across modules (global "
                   "scales, activation scales, small block scales), every value of every "
                   "module of the layer.</p><div class=\"plots\">")
        for param, values in sorted(scales.items()):
            groups = [(r, values[r]) for r in sorted(values, key=row_key)]
            out.append(strips(f"scales-{printable(param)}", printable(param), groups,
                              unit="value"))
        out.append("</div>")
    return out


def render_report(report: Report) -> str:
    """The HTML page of a ``validate`` run (see the module docstring)."""
    word = "OK" if report.ok else "FAILED"
    counts = ", ".join(f"{report.count(s)} {s.value}" for s in Severity)
    body = [f"<h1>mxformats validate: {_text(report.root)}</h1>",
            f'<p class="verdict {word.lower()}">{word}</p>',
            f"<p>{escape(counts)}" + (f"; cannot validate: {_text(report.fatal)}"
                                       if report.fatal else "") + "</p>"]
    body += _identity(report)
    body += _findings(report) + _finding_grid(report)
    if report.reproduction:
        body += _reproduction(report.reproduction)
    body += _numbers(report)
    return _page(f"mxformats validate {printable(report.root)}", body)


# -- compare --html -------------------------------------------------------------------------

def render_comparison(data: Mapping[str, Any]) -> str:
    """The HTML page of ``mxformats compare`` from its JSON data
    (:func:`mxformats.validate.comparison.to_json`)."""
    a, b = data["a"], data["b"]
    modules = [m for m in data.get("modules", []) if "problem" not in m]
    body = [f"<h1>mxformats compare: {_text(a['checkpoint'])} vs {_text(b['checkpoint'])}</h1>",
            _table([("A", f"{_text(a['checkpoint'])}: {_text(a['format'])}"),
                    ("B", f"{_text(b['checkpoint'])}: {_text(b['format'])}"),
                    ("source", _text(data.get("source") or "not given")),
                    ("modules compared", str(len(modules)))])]
    summary = data.get("summary", {})
    if summary:
        cols = [k for k in ("modules", "distance_median", "distance_max", "a_error_median",
                            "b_error_median", "a_closer", "b_closer", "tied")
                if any(k in s for s in summary.values())]
        head = "".join(f"<th>{escape(c)}</th>" for c in ["projection", *cols])
        rows = "".join(
            f"<tr><td>{_text(p)}</td>" + "".join(
                f"<td>{_cell(s.get(c))}</td>" for c in cols) + "</tr>"
            for p, s in summary.items())
        body += ["<h2>Per projection</h2>", f"<table><tr>{head}</tr>{rows}</table>"]
    body.append("<h2>Distance between A and B</h2><p>‖A − B‖ / ‖B‖ per module (the decoded "
                "weights).</p>")
    body += _error_maps([{"module": m["module"], "d": m["distance"],
                          "sqnr_db": m.get("distance_sqnr_db")} for m in modules],
                        "d", "distance", "relative distance")
    if data.get("source"):
        body.append("<h2>Which is closer to the source</h2><p>Per module: B's relative error "
                    "minus A's (positive: A is closer).</p>")
        body += _error_maps([{"module": m["module"],
                              "d": _float(m["b_error"]) - _float(m["a_error"]),
                              "sqnr_db": m.get("a_sqnr_db")} for m in modules],
                            "d", "closer", "B error − A error")
    return _page("mxformats compare", body)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.5g}"
    return "" if value is None else _text(value)
