"""Open the built docs in headless Chromium and check that they work (issue 7, item 4).

``python docs/browser_check.py [--site docs/_build/html] [--screenshots DIR]`` serves the site
with ``python -m http.server`` on loopback and drives Debian's ``chromium`` over the DevTools
protocol (``--remote-debugging-pipe``). For each page it waits until the page's scripts have
produced what the page must show, asserts on the live DOM, and saves a 1280x1800 screenshot and
the DOM under the screenshots folder:

- ``index.html``: the landing page's heading and text, and sphinx-copybutton's buttons (added by
  script, so their presence proves the scripts ran);
- ``spec/e8m0.html``: the included spec page, its 256-row code table and its value-grid plot;
- ``search.html?q=E8M0``: the search results, which must list the E8M0 page;
- ``search.html?q=mxfp4``: the search results, which must list the MX and profiles pages;
- ``publishing.html``, ``which-format.html``, ``glossary.html``: the users' pages (issue 17);
- ``compare.html``: the report pictures (SVG files of docs/_static/compare), each loaded;
- ``validate-checks.html#SHARD_MISSING``: a check ID's anchor, where JSON findings link;
- ``spec/mx.html``: the divergence matrix at full width, its differing cells highlighted.

Any console error, uncaught exception, failed load or request to a host other than the local
server fails the check, and so does a ``<script>`` or stylesheet in any page that points at
another host (a CDN asset). Exit 0 when every page passes, 1 otherwise (each problem printed).

``--planted`` proves the check can fail: it runs it on a copy of the site with a JavaScript
error planted in the index and a CDN script in the E8M0 page, and exits 0 only if the check
reports exactly those faults.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import html.parser
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

DOCS = Path(__file__).resolve().parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--mute-audio", "--remote-debugging-pipe",
    # Nothing but the local server resolves: a stray request fails at once, never leaves.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]
WINDOW = {"width": 1280, "height": 1800}


@dataclass(frozen=True)
class PageCheck:
    """A page to open and the JavaScript expression that is true once it shows its content."""

    name: str
    path: str
    ready: str
    what: str


PAGES = (
    PageCheck(
        "index", "index.html",
        "document.querySelector('h1')?.textContent.includes('mxformats')"
        " && document.body.innerText.includes('Bit-exact numbers for quantized')"
        " && document.querySelectorAll('button.copybtn').length > 0",
        "the landing page's heading and text, and the copy buttons sphinx-copybutton adds",
    ),
    PageCheck(
        "spec-e8m0", "spec/e8m0.html",
        "document.querySelector('h1')?.textContent.includes('E8M0, the MX block scale')"
        " && [...document.querySelectorAll('table')].some(t => t.rows.length > 256)"
        " && [...document.images].some(i => i.src.endsWith('grid-e8m0.png')"
        " && i.complete && i.naturalWidth > 0)",
        "the E8M0 spec page, its 256-code table and its value-grid plot",
    ),
    PageCheck(
        "search-e8m0", "search.html?q=E8M0",
        "[...document.querySelectorAll('#search-results li a')]"
        ".some(a => a.getAttribute('href').includes('spec/e8m0.html'))",
        "search results for E8M0 that list spec/e8m0.html",
    ),
    PageCheck(
        "search-mxfp4", "search.html?q=mxfp4",
        "['spec/mx.html', 'spec/profiles.html'].every(page =>"
        " [...document.querySelectorAll('#search-results li a')]"
        ".some(a => a.getAttribute('href').includes(page)))",
        "search results for mxfp4 that list the MX and the profiles pages",
    ),
    PageCheck(
        "publishing", "publishing.html",
        "document.querySelector('h1')?.textContent.includes('Quickstart for publishers')"
        " && document.body.innerText.includes('--format github --junit validate.xml')"
        " && document.body.innerText.includes('::error file=')",
        "the publishers' quickstart, its CI snippet and real GitHub annotations",
    ),
    PageCheck(
        "which-format", "which-format.html",
        "document.querySelector('h1')?.textContent.includes('Which format and profile')"
        " && [...document.querySelectorAll('td')].some(td => td.textContent.includes("
        "'mx:quark-hip-bf16'))",
        "the which-format page and its producer-to-consumer table",
    ),
    PageCheck(
        "glossary", "glossary.html",
        "[...document.querySelectorAll('dl.glossary dt')].map(dt => dt.textContent.trim())"
        ".filter(t => ['producer', 'consumer', 'profile', 'E8M0', 'block', 'group']"
        ".some(w => t.startsWith(w))).length >= 6",
        "the glossary and its six terms",
    ),
    PageCheck(
        "mx-matrix", "spec/mx.html",
        "document.querySelector('.bd-article-container').getBoundingClientRect().width > 1100"
        " && [...document.querySelectorAll('td strong')].some(b => getComputedStyle(b).color"
        " !== getComputedStyle(b.closest('td')).color)"
        " && document.body.innerText.includes('Bold: other bytes than ocp writes')",
        "the divergence matrix at full width, cells differing from ocp highlighted, a legend",
    ),
    PageCheck(
        "compare", "compare.html",
        "document.querySelector('h1')?.textContent.includes('closer to the original')"
        " && [...document.images].filter(i => i.src.endsWith('.svg')"
        " && i.complete && i.naturalWidth > 0).length === 6",
        "the compare page and its six report pictures, each loaded",
    ),
    PageCheck(
        "catalogue-anchor", "validate-checks.html#SHARD_MISSING",
        "document.getElementById('SHARD_MISSING')?.closest('td') != null"
        " && document.querySelector('a[href=\"#SHARD_MISSING\"]') != null",
        "a check ID's anchor in the catalogue, as JSON findings' url point at it",
    ),
)


class _AssetFinder(html.parser.HTMLParser):
    """Collects the URLs of scripts, stylesheets, fonts and images a page loads."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in ("script", "img", "iframe") and a.get("src"):
            self.urls.append(a["src"] or "")
        if tag == "link" and a.get("href") and (a.get("rel") or "") != "canonical":
            self.urls.append(a["href"] or "")


def external_assets(site: Path) -> list[str]:
    """Every asset URL in the site's HTML that points at another host (a CDN at view time)."""
    found = []
    for page in sorted(site.rglob("*.html")):
        finder = _AssetFinder()
        finder.feed(page.read_text(encoding="utf-8"))
        found += [
            f"{page.relative_to(site)}: loads {url}"
            for url in finder.urls
            if urlsplit(url).scheme in ("http", "https") or url.startswith("//")
        ]
    return found


class DevTools:
    """A Chromium process and its DevTools-protocol pipe (fd 3: commands in, fd 4: out)."""

    def __init__(self, user_data_dir: Path) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire_pipes() -> None:
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        self.process = subprocess.Popen(
            [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={user_data_dir}",
             f"--window-size={WINDOW['width']},{WINDOW['height']}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            pass_fds=(3, 4), preexec_fn=wire_pipes,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next_id = 0
        self._replies: dict[int, queue.Queue[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buffer = b""
        while chunk := os.read(self._from_browser, 1 << 16):
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            for raw in messages:
                message = json.loads(raw)
                if "id" in message:
                    with self._lock:
                        self._replies[message["id"]].put(message)
                else:
                    self.events.put(message)

    def send(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None, timeout: float = 30.0) -> dict[str, Any]:
        """Send one command and wait for its reply; raise RuntimeError on a protocol error."""
        with self._lock:
            self._next_id += 1
            number = self._next_id
            self._replies[number] = queue.Queue()
        message: dict[str, Any] = {"id": number, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        reply = self._replies[number].get(timeout=timeout)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    def drain(self) -> Iterator[dict[str, Any]]:
        while True:
            try:
                yield self.events.get_nowait()
            except queue.Empty:
                return

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, queue.Empty, OSError):
            self.send("Browser.close", timeout=5)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()
        os.close(self._to_browser)


def problems_in(events: list[dict[str, Any]], origin: str) -> list[str]:
    """The console errors, exceptions, failed loads and foreign requests among ``events``."""
    found = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            found.append(f"uncaught exception: {text} ({details.get('url', '')})")
        elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
            found.append(f"console.{params['type']}: {args}")
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            entry = params["entry"]
            where = entry.get("url", "")
            found.append(f"console error ({entry['source']}): {entry['text']} {where}".rstrip())
        elif method == "Network.requestWillBeSent":
            url = params["request"]["url"]
            if not url.startswith((origin, "data:", "blob:", "about:")):
                found.append(f"request to another host: {url}")
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            found.append(f"failed load: {params.get('errorText')} (request {params['requestId']})")
    return found


def check_page(browser: DevTools, session: str, origin: str, page: PageCheck, out: Path,
               timeout: float) -> list[str]:
    """Open ``page``, wait for its content, screenshot it; the problems found."""
    list(browser.drain())
    browser.send("Page.navigate", {"url": origin + page.path}, session)
    deadline = time.monotonic() + timeout
    ready = False
    while time.monotonic() < deadline:
        result = browser.send("Runtime.evaluate", {
            "expression": f"document.readyState === 'complete' && Boolean({page.ready})",
            "returnByValue": True,
        }, session)
        if result.get("result", {}).get("value") is True:
            ready = True
            break
        time.sleep(0.1)
    time.sleep(0.5)  # let late errors (a deferred script, an image) arrive before judging
    dom = browser.send("Runtime.evaluate", {
        "expression": "document.documentElement.outerHTML", "returnByValue": True,
    }, session)["result"]["value"]
    (out / f"{page.name}.html").write_text(dom, encoding="utf-8")
    shot = browser.send("Page.captureScreenshot", {"format": "png"}, session)
    (out / f"{page.name}.png").write_bytes(base64.b64decode(shot["data"]))
    problems = problems_in(list(browser.drain()), origin)
    if not ready:
        problems.append(f"did not show {page.what} within {timeout:.0f} s")
    return [f"{page.path}: {p}" for p in problems]


def serve(site: Path) -> tuple[subprocess.Popen[str], str]:
    """Start ``python -m http.server`` on a free loopback port; the process and its origin."""
    server = subprocess.Popen(
        [sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1", "0"],
        cwd=site, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    assert server.stdout is not None
    line = server.stdout.readline()
    match = re.search(r"port (\d+)", line)
    if not match:
        server.kill()
        raise RuntimeError(f"http.server did not start: {line!r}")
    return server, f"http://127.0.0.1:{match.group(1)}/"


def run(site: Path, out: Path, timeout: float, pages: tuple[PageCheck, ...] = PAGES
        ) -> list[str]:
    """Check every page of ``pages`` (default :data:`PAGES`) in ``site``; the problems found
    (empty: all good). tests/test_html_report.py checks the HTML reports with it."""
    problems = external_assets(site)
    out.mkdir(parents=True, exist_ok=True)
    server, origin = serve(site)
    try:
        with tempfile.TemporaryDirectory(prefix="mxformats-chromium-") as profile:
            browser = DevTools(Path(profile))
            try:
                target = browser.send("Target.createTarget", {"url": "about:blank"})
                session = browser.send("Target.attachToTarget", {
                    "targetId": target["targetId"], "flatten": True,
                })["sessionId"]
                for domain in ("Page", "Runtime", "Log", "Network"):
                    browser.send(f"{domain}.enable", session=session)
                browser.send("Emulation.setDeviceMetricsOverride", {
                    **WINDOW, "deviceScaleFactor": 1, "mobile": False,
                }, session)
                for page in pages:
                    started = time.monotonic()
                    found = check_page(browser, session, origin, page, out, timeout)
                    print(f"{'FAIL' if found else 'ok  '} {page.path} "
                          f"({time.monotonic() - started:.1f} s, screenshot {out / page.name}.png)")
                    problems += found
            finally:
                browser.close()
    finally:
        server.terminate()
        server.wait()
        if server.stdout is not None:
            server.stdout.close()
    return problems


PLANTED_ERROR = "planted by browser_check --planted"
PLANTED_ASSET = "https://cdn.invalid/planted.js"


def run_planted(site: Path, timeout: float) -> int:
    """Check a copy of ``site`` with planted faults; 0 when every fault is reported."""
    with tempfile.TemporaryDirectory(prefix="mxformats-planted-") as tmp:
        copy = Path(tmp) / "html"
        shutil.copytree(site, copy)
        for page, tag in (
            ("index.html", f"<script>throw new Error({PLANTED_ERROR!r});</script>"),
            ("spec/e8m0.html", f'<script src="{PLANTED_ASSET}"></script>'),
        ):
            path = copy / page
            path.write_text(path.read_text(encoding="utf-8").replace("</head>", tag + "</head>", 1),
                            encoding="utf-8")
        problems = run(copy, Path(tmp) / "screenshots", timeout)
    expected = {
        "the planted exception": f"index.html: uncaught exception: Error: {PLANTED_ERROR}",
        "the planted CDN script in the HTML": f"spec/e8m0.html: loads {PLANTED_ASSET}",
        "the request to the CDN": f"spec/e8m0.html: request to another host: {PLANTED_ASSET}",
    }
    missed = [what for what, text in expected.items()
              if not any(p.startswith(text) for p in problems)]
    for problem in problems:
        print(f"reported (planted run): {problem}")
    for what in missed:
        print(f"problem: the check did not report {what}")
    print(f"planted-fault run {'FAILED' if missed else 'passed'}: "
          f"{len(expected) - len(missed)} of {len(expected)} planted faults reported")
    return 1 if missed else 0


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--site", type=Path, default=DOCS / "_build" / "html")
    cli.add_argument("--screenshots", type=Path, default=DOCS / "_build" / "screenshots")
    cli.add_argument("--timeout", type=float, default=20.0,
                     help="seconds a page may take to show its content (default 20)")
    cli.add_argument("--planted", action="store_true",
                     help="check a copy of the site with planted faults: exit 0 if all reported")
    args = cli.parse_args(argv)
    if not (args.site / "index.html").is_file():
        print(f"no built site at {args.site} (run sphinx-build first)", file=sys.stderr)
        return 2
    if args.planted:
        return run_planted(args.site, args.timeout)
    problems = run(args.site, args.screenshots, args.timeout)
    for problem in problems:
        print(f"problem: {problem}")
    print(f"browser check {'FAILED' if problems else 'passed'}: {len(PAGES)} pages, "
          f"{len(problems)} problem(s); screenshots and DOM in {args.screenshots}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
