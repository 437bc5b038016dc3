"""``mxformats validate --html``: the page of every producer fixture, with and without
``--source``, parsed for its structure, its plots checked cell by cell against the JSON report,
no request leaving the file, hostile names escaped; and opened in headless Chromium where it
is installed (CI installs it: .ci/run)."""

from __future__ import annotations

import html.parser
import importlib.util
import json
import shutil
import subprocess
import sys
from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import requires
from test_cli_validate import FORGE, SHARD, UNXML, _add_tensor

from mxformats.cli import main
from mxformats.output import DOCS_URL
from mxformats.tensorfile import read_safetensors
from mxformats.validate import tasks
from mxformats.validate.findings import Level
from mxformats.validate.grid import position
from mxformats.validate.html import render_report
from mxformats.validate.model import Options
from mxformats.validate.report import printable
from mxformats.validate.runner import validate

requires("matplotlib")  # the report extra draws the plots
from mxformats.validate import svg  # noqa: E402  (imports matplotlib)

ROOT = Path(__file__).resolve().parent.parent
PRODUCERS = ROOT / "tests" / "data" / "producers"
SOURCE = PRODUCERS / "src-bf16"
FORMATS = sorted(p.name for p in PRODUCERS.iterdir() if p.name.startswith("kimi-k2-"))
#: Markup, an event handler and an entity in one module name: shown, never interpreted.
HOSTILE = 'experts.0.<img src=x onerror="alert(1)">&amp;</title><script>alert(2)</script>'


class Page(html.parser.HTMLParser):
    """What the tests look at in a page: every tag with its attributes, in order, the SVG
    plots and what each one draws, and the text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.plots: dict[str, list[dict[str, str | None]]] = {}
        self.text: list[str] = []
        self._plot: str | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "svg" and a.get("class") == "plot":
            name = a.get("data-plot") or ""
            assert name not in self.plots, f"two plots called {name}"
            self._plot = name
            self.plots[name] = []
        elif self._plot is not None and a.get("class") in ("cell", "bar", "tick", "empty",
                                                              "dist"):
            self.plots[self._plot].append(a)

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self._plot = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@cache
def _rendered(name: str, source: bool, tmp: str) -> tuple[str, dict[str, Any]]:
    folder = Path(tmp)
    out, report = folder / f"{name}-{source}.html", folder / f"{name}-{source}.json"
    argv = ["validate", str(PRODUCERS / name), "--level", "full", "--workers", "1",
            "--html", str(out), "--format", "json", "-o", str(report)]
    if source:
        argv += ["--source", str(SOURCE)]
    assert main(argv) in (0, 1)
    return out.read_text(encoding="utf-8"), json.loads(report.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("html"))


def links_stay_home(page: Page) -> None:
    """No attribute fetches anything; the only links are in-page anchors and the check docs."""
    for tag, attrs in page.tags:
        if tag == "link":  # the empty icon, so that no browser asks for /favicon.ico
            assert attrs == {"rel": "icon", "href": "data:,"}, attrs
            continue
        assert tag not in ("script", "img", "iframe", "object", "embed", "image",
                           "foreignobject"), tag
        if tag == "use":  # matplotlib's glyphs and markers: defined once in the same plot
            assert str(attrs.get("xlink:href")).startswith("#p"), attrs
        assert "src" not in attrs, (tag, attrs)
        href = attrs.get("href")
        if href is not None:
            assert href.startswith("#") or href.startswith(
                f"{DOCS_URL}validate-checks.html#"), href
        assert not any(k.startswith("on") for k in attrs), (tag, attrs)


@pytest.mark.parametrize("source", [False, True], ids=["alone", "source"])
@pytest.mark.parametrize("name", FORMATS)
def test_report_page(name: str, source: bool, pages: str) -> None:
    text, data = _rendered(name, source, pages)
    page = Page(text)
    assert "url(" not in text and "@import" not in text
    links_stay_home(page)
    assert [t for t, _ in page.tags].count("h1") == 1
    ids = {a.get("id") for _, a in page.tags}
    assert {"identity", "findings"} <= ids
    verdict = "OK" if data["ok"] else "FAILED"
    assert f'<p class="verdict {verdict.lower()}">{verdict}</p>' in text
    for f in data["findings"]:  # every check found is linked to its docs
        assert f'<a href="{DOCS_URL}validate-checks.html#{f["check"]}">' in text
    for plot, drawn in page.plots.items():
        assert any(d.get("class") != "empty" for d in drawn), f"{plot} draws nothing"
    hist = [f for f in data["findings"] if f["check"] == "CODE_HISTOGRAM"]
    for kind, counts in (hist[0]["extras"] if hist else {}).items():
        bars = [float(b["data-value"] or "nan") for b in page.plots[f"codes-{kind}"]]
        assert bars == [float(n) for n in counts]
    if source:
        _error_maps_match(page, data["reproduction"]["per_module"])
    else:
        assert not any(p.startswith("repro-") for p in page.plots)


def _error_maps_match(page: Page, records: list[dict[str, Any]]) -> None:
    """One cell per module, in its projection's heatmap, at its layer and expert, holding its
    relative error exactly; no other cell."""
    want: dict[str, set[tuple[str, str, str]]] = defaultdict(set)
    for r in records:
        row, column, proj = position(r["module"])
        want[f"repro-{proj}"].add((row, column, repr(float(r["rel_error"]))))
    got = {plot: {(c["data-row"], c["data-column"], c["data-value"]) for c in cells
                  if c.get("class") == "cell"}
           for plot, cells in page.plots.items() if plot.startswith("repro-")}
    assert got == want
    assert sum(len(v) for v in got.values()) == len(records)


def test_position_on_the_grid() -> None:
    assert position("model.layers.7.mlp.experts.12.down_proj") == ("layer 7", "12", "down_proj")
    assert position("model.layers.2.mlp.experts.2.down_proj.weight_scale") == (
        "layer 2", "2", "down_proj")
    assert position("model.layers.1.mlp.shared_experts.up_proj") == ("layer 1", "shared",
                                                                     "up_proj")
    assert position("model.layers.0.mlp.gate_proj") == ("layer 0", "dense", "gate_proj")
    assert position("model.layers.0.self_attn.q_a_proj") == ("layer 0", "attn", "q_a_proj")
    assert position("lm_head") == ("other", "other", "lm_head")


def test_hostile_tensor_name_is_escaped(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    shutil.copytree(PRODUCERS / "kimi-k2-mxfp4-quark", folder)
    name = f"model.layers.1.mlp.{HOSTILE}"
    _add_tensor(folder / SHARD, f"{name}.{FORGE}.{UNXML}")  # controls, NUL, a lone surrogate
    _add_tensor(folder / SHARD, name)
    out = tmp_path / "r.html"
    assert main(["validate", str(folder), "--html", str(out), "-q"]) == 1
    text = out.read_text(encoding="utf-8")
    page = Page(text)
    links_stay_home(page)
    assert "<script" not in text
    assert "<img" not in text
    assert "&amp;</title><" not in text
    assert name in "".join(page.text)  # shown as text, whole
    assert printable(f"{name}.{FORGE}.{UNXML}") in "".join(page.text)  # controls escaped
    grid = page.plots["findings-grid"]
    assert any(c.get("data-row") == "layer 1" and c.get("data-column") == "0" for c in grid)


def test_engine_error_is_drawn_where_it_differs(tmp_path: Path) -> None:
    """A report whose reproduction records carry ``engine_rel_error`` (the fused-scale error
    the engine sees) draws it for exactly the modules where it differs from the file's."""
    report = validate(PRODUCERS / "kimi-k2-nvfp4-modelopt",
                      Options(level=Level.STRUCTURE, source=SOURCE, workers=1))
    assert report.reproduction is not None
    records = report.reproduction["per_module"]
    records[0]["engine_rel_error"] = records[0]["rel_error"] * 2
    for r in records[1:]:
        r["engine_rel_error"] = r["rel_error"]
    page = Page(render_report(report))
    engine = [c for p, cells in page.plots.items() if p.startswith("engine-") for c in cells
              if c.get("class") == "cell"]
    row, column, _ = position(records[0]["module"])
    assert [(c["data-row"], c["data-column"], float(c["data-value"] or "nan")) for c in engine
            ] == [(row, column, records[0]["rel_error"] * 2)]
    for r in records:
        del r["engine_rel_error"]
    assert not any(p.startswith("engine-") for p in Page(render_report(report)).plots)


#: Per producer fixture, its scale tensors (the descriptor's scale params) and how a scale
#: histogram bins them: 1-byte scales by raw byte, float ones by binary exponent.
SCALE_TENSORS = {
    "kimi-k2-fp8-block-compressed-tensors": {"weight_scale": "exponent"},
    "kimi-k2-fp8-block-deepseek": {"weight_scale_inv": "exponent"},
    "kimi-k2-int4-compressed-tensors": {"weight_scale": "exponent"},
    "kimi-k2-mxfp4-quark": {"weight_scale": "byte"},
    "kimi-k2-nvfp4-compressed-tensors": {"weight_scale": "byte",
                                         "weight_global_scale": "exponent"},
    "kimi-k2-nvfp4-modelopt": {"weight_scale": "byte", "weight_scale_2": "exponent"},
    "kimi-k2-w4a8-quark": {"weight_scale": "exponent", "weight_scale_2": "exponent"},
}


def _expected_scale_hist(name: str) -> dict[str, dict[str, dict[int, int]]]:
    """Plot -> layer -> bin -> count, straight from the fixture's tensors: np.histogram of the
    raw bytes (256 bins), or of np.frexp's exponent + 128 clipped to 0..255."""
    per_layer: dict[str, dict[str, Any]] = defaultdict(dict)
    for shard in sorted((PRODUCERS / name).glob("*.safetensors")):
        for tensor, a in read_safetensors(shard).items():
            module, _, param = tensor.rpartition(".")
            bins = SCALE_TENSORS[name].get(param)
            if bins is None:
                continue
            if bins == "byte":
                assert a.dtype.itemsize == 1
                values = a.reshape(-1).view(np.uint8).astype(np.int64)
            else:
                values = np.clip(np.frexp(a.astype(np.float64).reshape(-1))[1] + 128, 0, 255)
            counts, _ = np.histogram(values, bins=256, range=(0, 256))
            row = position(module)[0]
            plot = per_layer[f"scale-hist-{param}-{bins}"]
            plot[row] = plot.get(row, 0) + counts
    return {plot: {row: {i: int(n) for i, n in enumerate(c) if n} for row, c in rows.items()}
            for plot, rows in per_layer.items()}


def _drawn_scale_hist(page: Page) -> dict[str, dict[str, dict[int, int]]]:
    """Plot -> layer -> bin -> count, as the page's scale histograms carry them."""
    return {plot: {str(g["data-row"]): {int(b): int(n) for b, n in (
        pair.split(":") for pair in str(g["data-counts"]).split())} for g in drawn}
        for plot, drawn in page.plots.items() if plot.startswith("scale-hist-")}


@pytest.mark.parametrize("name", FORMATS)
def test_scale_histograms_are_the_tensors(name: str, pages: str) -> None:
    """Every scale tensor of every format is drawn per layer, block scales of full size
    included, and each layer's counts are a direct numpy histogram of the fixture's tensors."""
    text, _ = _rendered(name, False, pages)
    drawn = _drawn_scale_hist(Page(text))
    assert set(drawn) == {f"scale-hist-{p}-{b}" for p, b in SCALE_TENSORS[name].items()}
    for plot, rows in drawn.items():
        assert rows and all(rows.values()), f"{plot} draws nothing"
    assert drawn == _expected_scale_hist(name)


def test_a_resumed_report_draws_the_same_scale_histograms(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scale histograms go through the ``--resume`` JSON: a run that reuses every task
    of a saved report draws the same per-layer counts, having read no tensor."""
    folder = PRODUCERS / "kimi-k2-nvfp4-modelopt"
    first, saved, second = tmp_path / "a.html", tmp_path / "a.json", tmp_path / "b.html"
    assert main(["validate", str(folder), "--level", "scales", "--workers", "1", "--html",
                 str(first), "--format", "json", "-o", str(saved)]) == 0
    ran: list[int] = []
    monkeypatch.setattr(tasks, "run_task", lambda task: ran.append(task.index))
    assert main(["validate", str(folder), "--level", "scales", "--workers", "1", "--html",
                 str(second), "--resume", str(saved), "-q"]) == 0
    assert ran == []  # every task reused from the saved report
    want = _drawn_scale_hist(Page(first.read_text(encoding="utf-8")))
    assert want == _expected_scale_hist(folder.name)
    assert _drawn_scale_hist(Page(second.read_text(encoding="utf-8"))) == want


def _browser_check() -> Any:
    spec = importlib.util.spec_from_file_location("docs_browser_check",
                                                  ROOT / "docs" / "browser_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(),
                    reason="needs Debian's chromium (CI installs it: .ci/run)")
def test_pages_in_a_headless_browser(pages: str, tmp_path: Path) -> None:
    """Every report page opened in Chromium: no console error, no exception, no request
    leaving the file, and every plot laid out with a size."""
    browser_check = _browser_check()
    site = tmp_path / "site"
    site.mkdir()
    checks = []
    for name in FORMATS:
        for source in (False, True):
            text, _ = _rendered(name, source, pages)
            file = f"{name}-{source}.html"
            (site / file).write_text(text, encoding="utf-8")
            plots = len(Page(text).plots)
            checks.append(browser_check.PageCheck(
                file.removesuffix(".html"), file,
                f"document.querySelectorAll('svg.plot').length === {plots} && "
                "[...document.querySelectorAll('svg.plot')].every(s => "
                "s.getBoundingClientRect().width > 0 && s.getBoundingClientRect().height > 0)",
                f"its {plots} plots, each with a size"))
    assert browser_check.run(site, tmp_path / "shots", 30.0, tuple(checks)) == []


def test_a_run_that_cannot_validate_still_writes_its_page(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    assert main(["validate", str(tmp_path / "missing"), "--html", str(out), "-q"]) == 2
    text = out.read_text(encoding="utf-8")
    assert '<p class="verdict failed">FAILED</p>' in text and "cannot validate" in text
    links_stay_home(Page(text))


def test_an_unwritable_page_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    out = tmp_path / "no-such-folder" / "r.html"
    assert main(["validate", str(PRODUCERS / "kimi-k2-mxfp4-quark"), "--html", str(out),
                 "-q"]) == 2
    assert "cannot write a report" in capsys.readouterr().err


def test_plot_text_is_text_never_mathtext_nor_markup() -> None:
    """A name with ``$`` (mathtext's delimiter, here with a command mathtext rejects) and
    markup is drawn as plain text and escaped wherever it reaches the markup; the same plot
    gives the same bytes (no date, a fixed hash salt)."""
    name = r"model.layers.1.$\undefinedcommand{x}$.<b>&amp;"
    drawn = [
        svg.heatmap(name, name, [name], [name], {(name, name): (1.0, name)}, legend=name),
        svg.bars(name, name, [name], [3.0]),
        svg.strips(name, name, [(name, [1.0, 2.0])], unit=name),
        svg.boxes(name, name, [(name, [0, 2, 1])], [name, name, name], unit=name),
    ]
    for text in drawn:
        page = Page(text)
        links_stay_home(page)
        assert "<b>" not in text and "url(" not in text
        assert name in "".join(page.text)
        assert all(d.get("data-row", name) == name for d in page.plots[name])
    assert svg.heatmap(name, name, [name], [name], {(name, name): (1.0, name)},
                       legend=name) == drawn[0]


def test_html_without_matplotlib_is_a_usage_error(tmp_path: Path) -> None:
    """No matplotlib (the report extra): ``--html`` is exit 2 at startup, naming the extra,
    before any checking (nothing written, nothing on stdout); plain runs never import it."""
    block = "import sys; sys.modules['matplotlib'] = None; from mxformats.cli import main; "
    out = tmp_path / "r.html"
    for argv in (["validate", str(PRODUCERS / "kimi-k2-mxfp4-quark"), "--html", str(out)],
                 ["compare", str(PRODUCERS / "kimi-k2-mxfp4-quark"),
                  str(PRODUCERS / "kimi-k2-nvfp4-modelopt"), "--html", str(out)]):
        done = subprocess.run([sys.executable, "-c", f"{block}sys.exit(main({argv!r}))"],
                              capture_output=True, text=True, check=False)
        assert done.returncode == 2, done.stderr
        assert 'pip install "mxformats[report]"' in done.stderr
        assert done.stdout == "" and not out.exists()
    plain = ("import sys; from mxformats.cli import main; "
             f"code = main(['validate', {str(PRODUCERS / 'kimi-k2-mxfp4-quark')!r}, '-q']); "
             "assert 'matplotlib' not in sys.modules, 'matplotlib imported'; sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", plain], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
