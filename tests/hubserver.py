"""A Hugging Face Hub on 127.0.0.1: checkpoint folders served over the HTTP API that
``huggingface_hub`` 0.36 speaks, for the ``hf://`` tests (a real server and the real client,
no mock object).

What it answers (the routes and fields the client reads, huggingface_hub 0.36.2):

- ``GET /api/models/ORG/NAME[/revision/REV][?blobs=true]``: ``{"id", "sha", "siblings"}``,
  each sibling ``{"rfilename"}`` plus, with ``blobs``, ``"size"``, ``"blobId"`` and for an
  LFS file (``*.safetensors``) ``"lfs": {"size", "sha256", "pointerSize"}``
  (``HfApi.model_info``, ``ModelInfo.__init__``);
- ``GET /api/models/ORG/NAME/tree/REV[/PATH]``: ``[{"type": "file", "path", "size", "oid",
  "lfs": {"oid", "size", "pointerSize"}}]`` (``HfApi.list_repo_tree``, ``RepoFile``);
- ``POST /api/models/ORG/NAME/paths-info/REV`` (form ``paths``): the same entries
  (``HfApi.get_paths_info``);
- ``GET``/``HEAD /ORG/NAME/resolve/REV/FILE`` with an optional ``Range: bytes=B-E``: 206 with
  ``Content-Range`` (or 200 without Range), ``ETag``, ``X-Repo-Commit`` and for LFS
  ``X-Linked-Etag``/``X-Linked-Size`` (``hf_hub_download``, ``get_hf_file_metadata``);
- errors as the Hub sends them: 404 + ``X-Error-Code: RepoNotFound``, ``RevisionNotFound``
  or ``EntryNotFound``, 403 + ``GatedRepo``, each with ``X-Error-Message``
  (``huggingface_hub.utils.hf_raise_for_status``).

A repo is ``{revision name or sha: folder}``; a revision's sha is derived from its folder's
name. ``faults`` makes the server misbehave for one file name: ``"ignore-range"`` (200 with
the whole file), ``"drop"`` (the connection closes halfway through the body),
``"lying-length"`` (Content-Length one more than is sent, then close), ``"wrong-range"`` (a
Content-Range one byte off), ``"hang-up"`` (the connection closes before any answer); the
name ``"*"`` applies a fault to every file; ``faults["api"] = "not-json"`` makes the model
info an HTML page; ``extra_siblings`` are appended, as given, to every model info's
``siblings`` (a hostile listing).

Fault injection, one field at a time: ``edits[name]`` (or ``edits["*"]``) is called with the
:class:`Answer` to each ranged read of that file, by either origin (the Hub's 206/200 or its
302 to the CDN, the CDN's 206/200 or its 403), before it is sent, and may change any field of
it (the status, a header, the bytes of the body, whether the connection closes);
``edit_info`` is called with each model info's JSON (after ``extra_siblings``). The server
counts
the body bytes it sends (``sent``, per file) and logs every request (``log``).

Realism (each off by default, each an attribute to set; :meth:`HubServer.realistic` sets
them all as :data:`REALISTIC` says):

- ``delay``: seconds every answer waits (a round trip: the Hub's 50 ms across an ocean);
- ``cdn``: a resolve of an LFS file answers ``302`` to a second origin (``cdn_endpoint``,
  its own port: the CDN stand-in) with a signed URL ``/TOKEN/FILE?Expires=E&Signature=S``
  valid ``cdn_ttl`` seconds, as the Hub redirects to ``cdn-lfs.hf.co``; the CDN answers a
  ranged GET as the Hub does, and ``403`` (``AccessDenied``, as CloudFront) to an expired or
  badly signed URL; its requests are logged in ``cdn_log``;
- ``throttle_every``: every Nth ranged read (either origin) answers ``429`` with
  ``Retry-After: retry_after``;
- ``max_connections``: connections with a request in progress on one origin (an idle
  keep-alive connection is not counted); one more is answered ``429`` with ``Retry-After``,
  and ``peak`` keeps the most seen per origin.

``events`` logs ``(time, origin, status, path)`` of each ranged read's answer.
Only 127.0.0.1, ephemeral ports, daemon threads; every loop is bounded by a file size.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

__all__ = ["REALISTIC", "Answer", "HubServer", "Repo"]

#: The realism :meth:`HubServer.realistic` switches on: a 20 ms round trip (tests; the
#: benchmark uses 50 ms), CDN redirects with URLs valid 60 s, every 50th read throttled
#: (Retry-After 0: waits cost test time; the Retry-After test asks for more), at most 16
#: connections at work per origin.
REALISTIC: dict[str, Any] = {"delay": 0.02, "cdn": True, "cdn_ttl": 60.0,
                             "throttle_every": 50, "retry_after": "0", "max_connections": 16}

_PIECE = 1 << 20
_RANGE = re.compile(r"bytes=(\d+)-(\d+)$")


def _git_sha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


@dataclass
class Repo:
    """A repo: revision name -> folder (each folder is one commit); ``gated`` refuses all;
    ``hash_lfs``: the real sha256 of each LFS file (False: a stand-in, for sparse files)."""

    revisions: dict[str, Path]
    gated: bool = False
    hash_lfs: bool = True
    _sha256: dict[Path, str] = field(default_factory=dict)

    def commit(self, revision: str) -> tuple[str, Path] | None:
        """``(sha, folder)`` of a revision name or of a sha."""
        for name, folder in self.revisions.items():
            sha = _git_sha(str(folder.resolve()))
            if revision in (name, sha):
                return sha, folder
        return None

    def sha256(self, path: Path) -> str:
        if path not in self._sha256:
            if self.hash_lfs:
                h = hashlib.sha256()
                with open(path, "rb") as f:
                    while chunk := f.read(_PIECE):
                        h.update(chunk)
                self._sha256[path] = h.hexdigest()
            else:
                self._sha256[path] = hashlib.sha256(str(path).encode()).hexdigest()
        return self._sha256[path]


@dataclass
class Answer:
    """One ranged read's answer as it is about to be sent (what an ``edits`` fault changes):
    ``status``, ``headers`` (``Content-Length`` among them: delete it for a body that ends
    when the connection closes), the body: bytes ``[begin, stop)`` of ``path`` (none
    without one) then ``extra``; ``close``: hang up after it. ``origin`` (``"hub"`` or
    ``"cdn"``), ``name`` (the file) and ``request`` (the request's headers) say what it
    answers."""

    origin: str
    name: str
    request: dict[str, str]
    status: int
    headers: dict[str, str]
    path: Path | None = None
    begin: int = 0
    stop: int = 0
    extra: bytes = b""
    close: bool = False


class HubServer:
    """The server; ``endpoint`` is its URL (``HF_ENDPOINT``). Use as a context manager."""

    def __init__(self, repos: dict[str, Repo]) -> None:
        self.repos = repos
        self.faults: dict[str, str] = {}
        self.extra_siblings: list[dict[str, Any]] = []
        self.edits: dict[str, Callable[[Answer], None]] = {}
        self.edit_info: Callable[[dict[str, Any]], None] | None = None
        self.sent: Counter[str] = Counter()
        self.log: list[tuple[str, str, str | None]] = []
        self.lock = threading.Lock()
        hub = self

        class Handler(_Handler):
            server_hub = hub

        class Cdn(_CdnHandler):
            server_hub = hub

        self.delay = 0.0
        self.cdn = False
        self.cdn_ttl = 3600.0
        self.throttle_every = 0
        self.retry_after = "1"
        self.max_connections = 0
        self.cdn_log: list[tuple[str, str, str | None]] = []
        self.events: list[tuple[float, str, int, str]] = []
        self.active: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.reads = 0  # ranged reads answered or refused (the throttle's count)
        self.secret = hashlib.sha256(str(id(self)).encode()).digest()
        self.objects: dict[str, Path] = {}  # CDN token -> file
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.cdn_httpd = ThreadingHTTPServer(("127.0.0.1", 0), Cdn)
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.cdn_endpoint = f"http://127.0.0.1:{self.cdn_httpd.server_address[1]}"
        self.threads = []
        for httpd in (self.httpd, self.cdn_httpd):
            httpd.daemon_threads = True
            self.threads.append(threading.Thread(target=httpd.serve_forever, daemon=True))

    def __enter__(self) -> HubServer:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for httpd, thread in zip((self.httpd, self.cdn_httpd), self.threads, strict=True):
            httpd.shutdown()
            httpd.server_close()
            thread.join(timeout=10)

    def realistic(self, **overrides: Any) -> None:
        """Switch on every realism of :data:`REALISTIC` (``overrides`` win), once no answer of
        an earlier test is still in progress (:meth:`settle`): the connection limit counts
        the reads of the test that sets it."""
        self.settle()
        for key, value in {**REALISTIC, **overrides}.items():
            setattr(self, key, value)

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until no ranged read is being answered on any origin. A client that stopped
        reading (an earlier test's validator that failed fast) leaves the server's thread
        writing until its write fails; while it does, its place among ``max_connections``
        is taken. AssertionError with the origins still busy after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                busy = {origin: n for origin, n in self.active.items() if n}
            if not busy:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"reads still answered after {timeout} s: {busy}")
            time.sleep(0.01)

    def plain(self) -> None:
        """Switch every realism off (the defaults)."""
        self.realistic(delay=0.0, cdn=False, cdn_ttl=3600.0, throttle_every=0,
                       retry_after="1", max_connections=0)

    def sign(self, path: Path, name: str, expires: int) -> str:
        """The CDN URL of ``path`` (file ``name``) valid until epoch second ``expires``."""
        token = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:32]
        with self.lock:
            self.objects[token] = path
        signature = self._signature(token, expires)
        return f"{self.cdn_endpoint}/{token}/{quote(name)}?Expires={expires}&Signature={signature}"

    def _signature(self, token: str, expires: int) -> str:
        return hmac.new(self.secret, f"{token}:{expires}".encode(), "sha256").hexdigest()

    def valid(self, token: str, expires: str, signature: str) -> bool:
        """Whether a CDN URL's signature is ours and it has not expired."""
        if not expires.isdigit():
            return False
        good = hmac.compare_digest(signature, self._signature(token, int(expires)))
        return good and time.time() <= int(expires)

    def bytes_sent(self, suffix: str = ".safetensors") -> int:
        """Body bytes sent of files whose name ends with ``suffix``."""
        return sum(n for name, n in self.sent.items() if name.endswith(suffix))

    def reset(self) -> None:
        with self.lock:
            self.sent.clear()
            self.log.clear()
            self.cdn_log.clear()
            self.events.clear()
            self.peak.clear()


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out at once (no 40 ms ACK stall)
    server_hub: HubServer
    #: Frees the ranged read's place among ``max_connections`` (:meth:`_admitted`); the answer
    #: calls it before its last bytes go out, so the place is free before the client can
    #: have the whole answer and send its next read (else the next read, on a new
    #: connection, could find this thread not yet past its answer and be refused).
    _release_slot: Callable[[], None] = staticmethod(lambda: None)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    # -- answers ----------------------------------------------------------------------------

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
              ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, data: Any) -> None:
        self._send(200, json.dumps(data).encode())

    def _error(self, status: int, code: str, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self._send(status, body, {"X-Error-Code": code, "X-Error-Message": message})

    def _repo(self, repo_id: str, revision: str) -> tuple[Repo, str, Path] | None:
        repo = self.server_hub.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found")
            return None
        if repo.gated:
            self._error(403, "GatedRepo", f"Access to model {repo_id} is restricted. You must "
                        "have access to it and be authenticated to access it. Please log in.")
            return None
        found = repo.commit(unquote(revision))
        if found is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {unquote(revision)}")
            return None
        return repo, *found

    def _entry(self, repo: Repo, folder: Path, name: str, tree: bool) -> dict[str, Any]:
        path = folder / name
        size = path.stat().st_size
        entry: dict[str, Any] = {"size": size}
        lfs = name.endswith(".safetensors")
        if tree:
            entry.update(type="file", path=name, oid=_git_sha(name))
            if lfs:
                entry["lfs"] = {"oid": repo.sha256(path), "size": size, "pointerSize": 134}
        else:
            entry.update(rfilename=name, blobId=_git_sha(name))
            if lfs:
                entry["lfs"] = {"sha256": repo.sha256(path), "size": size, "pointerSize": 134}
        return entry

    # -- routes -----------------------------------------------------------------------------

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        hub = self.server_hub
        with hub.lock:
            hub.log.append((self.command, url.path, self.headers.get("Range")))
        time.sleep(hub.delay)
        parts = url.path.strip("/").split("/")
        query = parse_qs(url.query)
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            repo_id = "/".join(parts[2:4])
            rest = parts[4:]
            if not rest or rest[0] == "revision":
                found = self._repo(repo_id, rest[1] if len(rest) > 1 else "main")
                if found is None:
                    return
                repo, sha, folder = found
                if hub.faults.get("api") == "not-json":
                    self._send(200, b"<html>a captive portal</html>", ctype="text/html")
                    return
                blobs = query.get("blobs", ["false"])[0].lower() == "true"
                siblings = [self._entry(repo, folder, n, tree=False) if blobs
                            else {"rfilename": n} for n in _files(folder)]
                siblings += hub.extra_siblings
                info = {"id": repo_id, "modelId": repo_id, "sha": sha, "private": False,
                        "siblings": siblings}
                if hub.edit_info is not None:
                    hub.edit_info(info)
                self._json(info)
                return
            if rest[0] == "tree" and len(rest) >= 2:
                found = self._repo(repo_id, rest[1])
                if found is None:
                    return
                repo, _sha, folder = found
                prefix = unquote("/".join(rest[2:]))
                names = [n for n in _files(folder) if n.startswith(prefix)]
                self._json([self._entry(repo, folder, n, tree=True) for n in names])
                return
        if len(parts) >= 5 and parts[2] == "resolve":
            with self._admitted("hub") as admitted:
                if admitted:
                    self._resolve("/".join(parts[:2]), parts[3], unquote("/".join(parts[4:])))
            return
        self._error(404, "EntryNotFound", "Not found")

    @contextmanager
    def _admitted(self, origin: str) -> Iterator[bool]:
        """A ranged read on ``origin`` while it is answered: False (with the 429 sent) when
        it is one more than ``max_connections`` or a ``throttle_every``-th read."""
        hub = self.server_hub
        with hub.lock:
            hub.active[origin] += 1
            hub.peak[origin] = max(hub.peak[origin], hub.active[origin])
            hub.reads += 1
            refuse = (0 < hub.max_connections < hub.active[origin]
                      or (hub.throttle_every > 0 and hub.reads % hub.throttle_every == 0))
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                with hub.lock:
                    hub.active[origin] -= 1

        self._release_slot = release
        try:
            if refuse:
                self._send(429, b"Too Many Requests", {"Retry-After": hub.retry_after},
                           ctype="text/plain")
                self._event(origin, 429)
            yield not refuse
        finally:
            del self._release_slot
            release()

    def _event(self, origin: str, status: int) -> None:
        hub = self.server_hub
        with hub.lock:
            hub.events.append((time.monotonic(), origin, status, urlsplit(self.path).path))

    def do_POST(self) -> None:
        time.sleep(self.server_hub.delay)
        url = urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        length = min(int(self.headers.get("Content-Length") or 0), 1 << 20)
        form = parse_qs(self.rfile.read(length).decode())
        if parts[:2] == ["api", "models"] and len(parts) == 6 and parts[4] == "paths-info":
            found = self._repo("/".join(parts[2:4]), parts[5])
            if found is None:
                return
            repo, _sha, folder = found
            names = [n for n in form.get("paths", []) if (folder / n).is_file()]
            self._json([self._entry(repo, folder, n, tree=True) for n in names])
            return
        self._error(404, "EntryNotFound", "Not found")

    def _resolve(self, repo_id: str, revision: str, name: str) -> None:
        found = self._repo(repo_id, revision)
        if found is None:
            return
        _repo, sha, folder = found
        path = folder / name
        if name not in _files(folder):
            self._error(404, "EntryNotFound", f"{name} does not exist at {revision}")
            return
        size = path.stat().st_size
        etag = f'"{_git_sha(name + sha)}"'
        headers = {"ETag": etag, "X-Repo-Commit": sha, "Accept-Ranges": "bytes"}
        hub = self.server_hub
        if name.endswith(".safetensors"):
            headers.update({"X-Linked-Etag": etag, "X-Linked-Size": str(size)})
            if hub.cdn and hub.faults.get(name, hub.faults.get("*")) != "hang-up":
                expires = int(time.time() + hub.cdn_ttl)
                headers["Location"] = hub.sign(path, name, expires)
                self._answer(Answer("hub", name, dict(self.headers), 302,
                                    {"Content-Type": "text/plain", "Content-Length": "0",
                                     **headers}))
                return
        self._serve(path, name, headers, "hub")

    def _serve(self, path: Path, name: str, headers: dict[str, str], origin: str) -> None:
        """Answer a GET or HEAD of file ``path`` (named ``name``, its faults) as the Hub's
        resolve and the CDN do: 206 for a Range, 200 without one, 416 past the end."""
        size = path.stat().st_size
        fault = self.server_hub.faults.get(name, self.server_hub.faults.get("*"))
        if fault == "hang-up":  # the connection closes before any answer
            self.close_connection = True
            return
        match = _RANGE.match(self.headers.get("Range") or "")
        if match is None or fault == "ignore-range":
            begin, end, status = 0, size, 200
        else:
            begin, end, status = int(match[1]), min(int(match[2]) + 1, size), 206
            if begin >= size:
                self._send(416, b"", {"Content-Range": f"bytes */{size}"})
                return
            shift = 1 if fault == "wrong-range" else 0
            headers["Content-Range"] = f"bytes {begin + shift}-{end - 1 + shift}/{size}"
        length = end - begin
        announced = length + 1 if fault == "lying-length" else length
        headers = {"Content-Type": "application/octet-stream",
                   "Content-Length": str(announced), **headers}
        self._answer(Answer(origin, name, dict(self.headers), status, headers, path, begin,
                            begin + length // 2 if fault == "drop" else end,
                            close=fault in ("drop", "lying-length")))

    def _answer(self, answer: Answer) -> None:
        """Send ``answer`` (a ranged read's), as the ``edits`` fault of its file changed it,
        and log its event."""
        hub = self.server_hub
        edit = hub.edits.get(answer.name, hub.edits.get("*"))
        if edit is not None:
            edit(answer)
        self._event(answer.origin, answer.status)
        self.send_response(answer.status)
        for k, v in answer.headers.items():
            self.send_header(k, v)
        if "Content-Length" not in answer.headers:  # the body ends when the connection does
            answer.close = True
            self.send_header("Connection", "close")
        body = self.command != "HEAD" and (answer.path is not None or bool(answer.extra))
        if not body:
            self._release_slot()
        self.end_headers()
        if body:
            if answer.path is not None:
                self._stream(answer.path, answer.name, answer.begin, answer.stop,
                             last=not answer.extra)
            self._release_slot()
            try:
                self.wfile.write(answer.extra)
            except (BrokenPipeError, ConnectionResetError):
                answer.close = True
        if answer.close:
            self.close_connection = True

    def _stream(self, path: Path, name: str, begin: int, stop: int, last: bool) -> None:
        """Send bytes ``[begin, stop)`` of ``path`` in pieces, counting each one sent; a client
        that hangs up ends it. ``last``: they end the answer (its place is freed before the
        last piece goes out)."""
        hub = self.server_hub
        with open(path, "rb") as f:
            f.seek(begin)
            left = stop - begin
            while left > 0:
                piece = f.read(min(_PIECE, left))
                if not piece:
                    break
                if last and len(piece) == left:
                    self._release_slot()
                try:
                    self.wfile.write(piece)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                    return
                left -= len(piece)
                with hub.lock:
                    hub.sent[name] += len(piece)


class _CdnHandler(_Handler):
    """The CDN stand-in: ``GET``/``HEAD /TOKEN/FILE?Expires=E&Signature=S`` of a URL
    :meth:`HubServer.sign` made; 403 ``AccessDenied`` when expired or not signed by us."""

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        hub = self.server_hub
        with hub.lock:
            hub.cdn_log.append((self.command, url.path, self.headers.get("Range")))
        time.sleep(hub.delay)
        token, _, name = url.path.strip("/").partition("/")
        query = parse_qs(url.query)
        with self._admitted("cdn") as admitted:
            if not admitted:
                return
            path = hub.objects.get(token)
            if path is None or not hub.valid(token, query.get("Expires", [""])[0],
                                             query.get("Signature", [""])[0]):
                body = (b"<Error><Code>AccessDenied</Code><Message>Request has expired"
                        b"</Message></Error>")
                self._answer(Answer("cdn", unquote(name), dict(self.headers), 403,
                                    {"Content-Type": "application/xml",
                                     "Content-Length": str(len(body))}, extra=body))
                return
            self._serve(path, unquote(name), {"Accept-Ranges": "bytes"}, "cdn")

    def do_POST(self) -> None:
        self._send(405, b"", ctype="text/plain")
