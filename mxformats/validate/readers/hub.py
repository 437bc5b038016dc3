"""``hf://ORG/NAME[@REVISION]``: a Hugging Face model repository read without downloading it.

:class:`HubReader` implements :class:`~mxformats.validate.readers.interface.Reader` with
``huggingface_hub`` (the ``hub`` extra), which honours ``HF_ENDPOINT``, ``HF_TOKEN``,
``HF_HOME`` and ``HF_HUB_OFFLINE`` as its users expect:

- one ``model_info(revision, files_metadata=True)`` call (``GET
  /api/models/ORG/NAME/revision/REV?blobs=true``) pins the revision to the commit SHA it
  answers and lists every file with its size and, for an LFS file, its sha256 (a listing
  naming a file twice or not as a relative name inside the repo, or with an LFS sha256 that
  is not 64 hex digits, is refused whole: exit 2);
- every byte is a ranged ``GET /ORG/NAME/resolve/SHA/FILE`` with ``Range: bytes=B-E``; the
  Hub's redirect of an LFS file to its CDN (an http(s) URL: any other is the read's finding,
  never taken for a server gone) is followed once per file and the signed URL reused
  for the file's later ranges until it expires or the CDN refuses it (then resolved again;
  the token is never sent to the CDN). :meth:`HubReader.read_ranges` has up to
  ``connections`` reads in flight (a thread each, with a session of huggingface_hub's
  adapters and the environment's proxies read once per host),
  coalescing ranges that touch. A connection error or a 5xx is retried twice (0.5 s, 1 s);
  a 429 or 503 waits its ``Retry-After`` (bounded attempts and total wait); the timeout is
  ``HF_HUB_DOWNLOAD_TIMEOUT``. The answer, the Hub's or the CDN's, must be 206 with
  ``Content-Range: bytes B-E/SIZE`` for that SIZE the API listed and exactly ``E - B + 1``
  bytes: a 200 (Range ignored) is never read, and a body is read in bounded chunks and
  abandoned at the first byte past the range; a non-LFS file is hashed over reads of at
  most 8 MiB (``_HASH_PIECE``). Nothing is written to disk.

The Hub's answers are untrusted input: every deviation raises
:class:`~mxformats.validate.readers.interface.ReadFailed`, which the checks report as a finding
(``HUB_RANGE_IGNORED``, ``HUB_READ_FAILED``, declared with the other files checks), never a crash.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections import deque
from collections.abc import Generator, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, quote, urljoin, urlsplit

from .interface import (
    HUB_PREFIX,
    RANGE_IGNORED,
    READ_FAILED,
    NotAFolder,
    Reader,
    ReadFailed,
    unsafe_name,
)

if TYPE_CHECKING:
    import requests

__all__ = ["CONNECTIONS", "Environment", "HubReader", "in_flight", "open_hub", "parse_hub"]

#: Retries of a read after a connection error or a 5xx other than 503 (waits 0.5 s, then
#: 1 s): a dead server costs seconds, not huggingface_hub's default 23.
_RETRIES = 2
_BASE_WAIT_S = 0.5
#: The largest piece read from a socket at once: a body never holds more than its range
#: plus this.
_PIECE = 1 << 20

#: The most bytes one read of a non-LFS file takes while hashing it: the API's size is
#: untrusted, so the hash streams over reads of at most this many bytes.
_HASH_PIECE = 8 << 20

#: Ranged reads of one reader in flight at once (``--hub-connections``): each is a thread
#: with its own keep-alive session.
CONNECTIONS = 32

#: A 429 or 503 is retried after its ``Retry-After`` (seconds or an HTTP date) or a back-off
#: from ``_THROTTLE_BASE_S`` doubled per attempt, whichever is longer, each wait at most
#: ``_MAX_WAIT_S``, at most ``_THROTTLED_ATTEMPTS`` attempts and ``_TOTAL_WAIT_S`` of waiting
#: per read; then the answer is the read's finding.
_THROTTLE_BASE_S = 0.1
_THROTTLED_ATTEMPTS = 8
_MAX_WAIT_S = 30.0
_TOTAL_WAIT_S = 120.0

#: Statuses of a resolve that redirects (to the CDN), and of a CDN that refuses a signed
#: URL (expired: CloudFront answers 403; 400 and 410 as other CDNs do).
_REDIRECTS = (301, 302, 303, 307, 308)
_EXPIRED = (400, 403, 410)
#: A signed URL is resolved again this many seconds before its ``Expires``.
_EXPIRY_MARGIN_S = 10.0

#: The most bytes :meth:`HubReader.read_ranges` asks ahead of what its caller took.
_AHEAD_BYTES = 256 << 20
#: The most bytes one coalesced read spans.
_GROUP_BYTES = 16 << 20

_SHA256 = re.compile(r"[0-9a-f]{64}")
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class HubFile:
    """One file of the pinned commit as the API lists it."""

    size: int
    lfs_sha256: str | None


def parse_hub(text: str) -> tuple[str, str | None]:
    """``("ORG/NAME", revision or None)`` of ``hf://ORG/NAME[@REVISION]``; :class:`NotAFolder`
    when it is not that form."""
    body = text[len(HUB_PREFIX):]
    repo_id, _, revision = body.partition("@")
    repo_id = repo_id.rstrip("/")
    if not _REPO_ID.fullmatch(repo_id) or ".." in repo_id or (revision == "" and "@" in body):
        raise NotAFolder(f"{text} is not hf://ORG/NAME[@REVISION]")
    return repo_id, revision or None


def _reason(exc: BaseException) -> str:
    """The Hub's own words for an error: its X-Error-Message / error body when it sent one."""
    server = getattr(exc, "server_message", None)
    status = getattr(getattr(exc, "response", None), "status_code", None)
    head = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if server:
        return f"{head} {server.strip()}" if status is None else f"HTTP {status}: {server.strip()}"
    return head


#: A value the Hub's answer holds is quoted in a message up to this many characters.
_QUOTED_CHARS = 200


def _quoted(value: object) -> str:
    """``repr(value)`` (escaped), cut to ``_QUOTED_CHARS`` with ``…`` (a listing may name
    a file with a megabyte of characters)."""
    text = repr(value)
    return text if len(text) <= _QUOTED_CHARS else text[:_QUOTED_CHARS] + "…"


def _retry_after(value: str | None, attempt: int) -> float:
    """How long to wait before attempt ``attempt + 1`` of a throttled read: at least what its
    ``Retry-After`` asks (delta seconds or an HTTP date) and at least a jittered back-off of
    :data:`_THROTTLE_BASE_S` doubled per attempt (a ``Retry-After: 0`` from a server at its
    limit is not an invitation to ask again at once, with every read in flight), at most
    :data:`_MAX_WAIT_S`."""
    backoff = _THROTTLE_BASE_S * 2.0 ** min(attempt, 16) * random.uniform(0.5, 1.0)
    asked = 0.0
    if value is not None:
        text = value.strip()
        try:
            asked = float(text)
        except ValueError:
            try:
                asked = parsedate_to_datetime(text).timestamp() - time.time()
            except (TypeError, ValueError, IndexError, OverflowError):
                asked = 0.0
        if asked != asked:  # NaN
            asked = 0.0
    return float(min(_MAX_WAIT_S, max(asked, backoff)))


def _expires(url: str) -> float | None:
    """The epoch second a signed URL's ``Expires`` query names (CloudFront's form, as the
    Hub's CDN URLs carry it), or None."""
    values = parse_qs(urlsplit(url).query).get("Expires")
    try:
        return float(values[0]) if values else None
    except ValueError:
        return None


#: This thread's session for ranged reads (:func:`_session`).
_THREAD = threading.local()


def _session() -> requests.Session:
    """This thread's session for ranged reads: huggingface_hub's per-thread session's
    adapters, headers, ``verify`` and ``cert`` (a backend set with
    ``huggingface_hub.configure_http_backend`` included), with ``trust_env`` off. Each read
    passes the environment's settings for its host, read once per reader
    (:meth:`HubReader.environment`): requests with ``trust_env`` reads the proxy variables
    again on every request, two scans of ``os.environ`` that took a quarter of the
    validator's CPU at ``--level scales``."""
    session: requests.Session | None = getattr(_THREAD, "session", None)
    if session is None:
        import requests
        from huggingface_hub.utils import get_session

        hub = get_session()
        session = requests.Session()
        session.trust_env = False
        session.headers.clear()
        session.headers.update(hub.headers)
        session.verify, session.cert = hub.verify, hub.cert
        for prefix, adapter in hub.adapters.items():
            session.mount(prefix, adapter)
        _THREAD.session = session
    return session


@dataclass(frozen=True)
class Environment:
    """What requests takes from the environment for one host when ``trust_env`` is on
    (``Session.merge_environment_settings``: the proxies ``*_proxy``/``no_proxy`` give it,
    the CA bundle of ``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE``; ``Session.prepare_request``:
    ``~/.netrc``'s login for it), as keyword arguments of a request."""

    proxies: dict[str, str]
    verify: bool | str
    cert: str | tuple[str, str] | None
    auth: tuple[str, str] | None

    @classmethod
    def of(cls, origin: str) -> Environment:
        """The settings for ``origin`` (``scheme://host[:port]``), as huggingface_hub's
        session would take them."""
        from huggingface_hub.utils import get_session
        from requests.utils import get_netrc_auth

        hub = get_session()
        if not hub.trust_env:
            return cls({}, hub.verify, hub.cert, None)
        url = f"{origin}/"
        merged = hub.merge_environment_settings(url, {}, None, None, None)
        return cls(dict(merged["proxies"]), merged["verify"], merged["cert"],
                   None if hub.auth else get_netrc_auth(url))


def _coalesce(ranges: Iterable[tuple[str, int, int]]) -> Iterator[list[tuple[str, int, int]]]:
    """``ranges`` in groups a single read covers: consecutive ranges of one file, each
    beginning where the one before ends (no byte between them is read: coalescing never
    reads a byte no range asked, so never a packed weight at ``--level scales``); a group
    spans at most :data:`_GROUP_BYTES` bytes."""
    group: list[tuple[str, int, int]] = []
    for item in ranges:
        name, begin, end = item
        if group and not (group[-1][0] == name and group[-1][2] == begin
                          and end - group[0][1] <= _GROUP_BYTES):
            yield group
            group = []
        group.append(item)
    if group:
        yield group


#: Ranged reads of this process in flight now (:func:`in_flight`), under its lock.
_IN_FLIGHT = [0]
_IN_FLIGHT_LOCK = threading.Lock()


@contextmanager
def _counted() -> Iterator[None]:
    with _IN_FLIGHT_LOCK:
        _IN_FLIGHT[0] += 1
    try:
        yield
    finally:
        with _IN_FLIGHT_LOCK:
            _IN_FLIGHT[0] -= 1


def in_flight() -> int:
    """How many ranged Hub reads this process has in flight now (the progress bar's count;
    a pool process's reads are its own)."""
    return _IN_FLIGHT[0]


def open_hub(text: str, connections: int = CONNECTIONS) -> HubReader:
    """Pin ``hf://ORG/NAME[@REVISION]`` to its commit and list its files; :class:`NotAFolder`
    with the Hub's reason for a missing or gated repo or revision, offline mode or no
    network (the CLI exits 2)."""
    repo_id, revision = parse_hub(text)
    try:
        import requests
        from huggingface_hub import HfApi, constants
        from huggingface_hub.errors import (
            GatedRepoError,
            HfHubHTTPError,
            OfflineModeIsEnabled,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
        from huggingface_hub.utils import build_hf_headers
    except ImportError:
        raise NotAFolder(
            f"{text}: reading the Hub needs huggingface_hub: pip install 'mxformats[hub]'"
        ) from None
    if constants.HF_HUB_OFFLINE:
        raise NotAFolder(f"{text}: HF_HUB_OFFLINE is set; hf:// reads the Hub over the network")
    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or constants.ENDPOINT)
    what = f"revision {revision!r} of {repo_id}" if revision else repo_id
    try:
        info = api.model_info(
            repo_id, revision=revision, files_metadata=True,
            timeout=constants.DEFAULT_REQUEST_TIMEOUT,
        )
    except GatedRepoError as exc:
        raise NotAFolder(f"{repo_id} is gated: {_reason(exc)}") from None
    except RevisionNotFoundError as exc:
        raise NotAFolder(f"{what} does not exist: {_reason(exc)}") from None
    except RepositoryNotFoundError as exc:
        raise NotAFolder(f"{repo_id} does not exist or is private: {_reason(exc)}") from None
    except OfflineModeIsEnabled as exc:
        raise NotAFolder(f"{text}: {exc}") from None
    except HfHubHTTPError as exc:
        raise NotAFolder(f"{what}: the Hub refused: {_reason(exc)}") from None
    except (ValueError, TypeError, KeyError, AttributeError) as exc:  # not JSON, or not info
        raise NotAFolder(f"{what}: the Hub's answer is not a model's info: {_reason(exc)}"
                         ) from None
    except requests.RequestException as exc:
        raise NotAFolder(f"{what}: cannot reach the Hub at {api.endpoint}: {_reason(exc)}"
                         ) from None
    sha = info.sha
    if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{40}", sha):
        raise NotAFolder(f"{what}: the Hub did not name the commit (sha {sha!r})")
    files: dict[str, HubFile] = {}
    for sibling in info.siblings or ():
        name = sibling.rfilename
        if not isinstance(name, str) or unsafe_name(name) or name in files:
            raise NotAFolder(f"{what}: the Hub lists a file named {_quoted(name)}, not a "
                             "unique relative name inside the repo")
        size = sibling.size if sibling.lfs is None else sibling.lfs.size
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise NotAFolder(f"{what}: the Hub lists {_quoted(name)} without a size")
        lfs_sha256 = None if sibling.lfs is None else sibling.lfs.sha256
        if sibling.lfs is not None and not (isinstance(lfs_sha256, str)
                                            and _SHA256.fullmatch(lfs_sha256)):
            raise NotAFolder(f"{what}: the Hub lists LFS file {_quoted(name)} with sha256 "
                             f"{_quoted(lfs_sha256)}")
        files[name] = HubFile(size, lfs_sha256)
    headers = build_hf_headers()  # HF_TOKEN and the user agent, as the client sends them
    return HubReader(repo_id, sha, api.endpoint, files, headers, connections)


class HubReader(Reader):
    """A Hub repository at one commit ``sha``: ``files`` as the API listed them, bytes by
    ranged reads of ``ENDPOINT/ORG/NAME/resolve/SHA/FILE``."""

    remote = True

    def __init__(self, repo_id: str, sha: str, endpoint: str, files: dict[str, HubFile],
                 headers: dict[str, str], connections: int = CONNECTIONS) -> None:
        from huggingface_hub import constants

        self.repo_id = repo_id
        self.sha = sha
        self.endpoint = endpoint.rstrip("/")
        self.listing = files
        self.headers = headers
        #: what the CDN a resolve redirects to is sent: the headers without the token
        self.cdn_headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        self.connections = max(1, connections)
        self.timeout = constants.HF_HUB_DOWNLOAD_TIMEOUT
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        #: file -> (the signed CDN URL its resolve redirected to, its Expires or None)
        self._signed: dict[str, tuple[str, float | None]] = {}
        #: origin -> the environment's settings for it (:meth:`environment`)
        self._environments: dict[str, Environment] = {}
        self.name = f"{HUB_PREFIX}{repo_id}@{sha}"
        #: why the server stopped answering (a connection failure that outlived
        #: huggingface_hub's retries): every later read fails at once, so a dead server
        #: costs one round of retries, not one per tensor
        self.unreachable: str | None = None

    def _file(self, name: str) -> HubFile:
        try:
            return self.listing[name]
        except KeyError:
            raise FileNotFoundError(f"{name} is not in {self.name}") from None

    def escapes(self, name: str) -> bool:
        return False  # a repo has no symlinks out of it

    def not_regular(self, name: str) -> str | None:
        self._file(name)
        return None

    def files(self) -> list[str]:
        return sorted(self.listing)

    def size(self, name: str) -> int:
        return self._file(name).size

    def url(self, name: str) -> str:
        """The resolve URL of ``name`` at the pinned commit."""
        return f"{self.endpoint}/{self.repo_id}/resolve/{self.sha}/{quote(name)}"

    def read_range(self, name: str, begin: int, end: int) -> bytes:
        size = self._file(name).size
        if not 0 <= begin <= end <= size:
            raise OSError(f"{name}: bytes [{begin}, {end}) are outside its {size} bytes")
        if begin == end:
            return b""
        where = f"{self.name}/{name} bytes [{begin}, {end})"
        if self.unreachable is not None:
            raise ReadFailed(READ_FAILED, name, f"{where}: not read ({self.unreachable})",
                             follow_on=True)
        with _counted():
            response = self._get(name, where, begin, end)
            with response:
                self._check_answer(response, name, where, begin, end, size)
                return self._body(response, name, where, end - begin)

    def read_ranges(self, ranges: Iterable[tuple[str, int, int]]
                    ) -> Generator[bytes | OSError, None, None]:
        """The ranges read over ``connections`` connections at once (each thread of the
        pool has its own keep-alive session), answered in the order asked; at most twice
        ``connections`` reads and ``_AHEAD_BYTES`` bytes are asked ahead of the caller
        (its memory; one larger range is read alone).
        Neighbouring ranges of one file with no byte between them are one request."""
        merged = _coalesce(ranges)
        if self.connections <= 1:
            for group in merged:
                yield from self._read_group(group)
            return
        pool = self._executor()
        window: deque[tuple[Future[list[bytes | OSError]], int]] = deque()
        held = 0
        try:
            for group in merged:
                span = group[-1][2] - group[0][1]
                while window and (len(window) >= 2 * self.connections
                                  or held + span > _AHEAD_BYTES):
                    done, n = window.popleft()
                    held -= n
                    yield from done.result()
                window.append((pool.submit(self._read_group, group), span))
                held += span
            while window:
                yield from window.popleft()[0].result()
        finally:  # a caller that stopped early: the reads not started are not made
            for future, _ in window:
                future.cancel()

    def _read_group(self, group: list[tuple[str, int, int]]) -> list[bytes | OSError]:
        """One read of the span ``group`` covers, cut back into its ranges (an error: one
        per range)."""
        name, begin, end = group[0][0], group[0][1], group[-1][2]
        try:
            raw = self.read_range(name, begin, end)
        except OSError as exc:
            return [exc] * len(group)
        return [raw[b - begin:e - begin] for _, b, e in group]

    def _executor(self) -> ThreadPoolExecutor:
        """The reader's pool (made at its first batch). Its threads end once the reader is
        gone: a ThreadPoolExecutor's workers exit when it is collected."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.connections,
                                                thread_name_prefix="mxformats-hub")
            return self._pool

    def _get(self, name: str, where: str, begin: int, end: int) -> requests.Response:
        """The answer to a ranged GET of ``name``: to its signed CDN URL while one is known and
        valid, else to its resolve URL (a redirect is followed once and its target kept for the
        file's next reads; a CDN that refuses the URL, expired, costs one resolve again).
        429/503 wait the ``Retry-After`` asked (at most :data:`_MAX_WAIT_S` each,
        :data:`_TOTAL_WAIT_S` in all, :data:`_THROTTLED_ATTEMPTS` attempts); a connection
        error or another 5xx is retried :data:`_RETRIES` times, then the server is taken for
        gone (:attr:`unreachable`)."""
        import requests

        range_header = {"Range": f"bytes={begin}-{end - 1}", "Accept-Encoding": "identity"}
        waited, throttled, failed, refreshed = 0.0, 0, 0, False
        signed = self._signed_url(name)
        while True:
            url = signed or self.url(name)
            # the token goes to the Hub only, never to the CDN a redirect names
            headers = {**(self.cdn_headers if signed else self.headers), **range_header}
            try:
                env = self.environment(url)
                response = _session().get(url, headers=headers, stream=True,
                                          allow_redirects=False, timeout=self.timeout,
                                          proxies=env.proxies, verify=env.verify,
                                          cert=env.cert, auth=env.auth)
            except requests.RequestException as exc:
                failed += 1
                if failed > _RETRIES:
                    self.unreachable = f"the Hub stopped answering: {_reason(exc)}"
                    raise ReadFailed(READ_FAILED, name, f"{where}: {_reason(exc)}") from None
                time.sleep(_BASE_WAIT_S * 2.0 ** (failed - 1))
                if self.unreachable is not None:  # another read's retries found it gone
                    raise ReadFailed(READ_FAILED, name,
                                     f"{where}: not read ({self.unreachable})",
                                     follow_on=True) from None
                continue
            status = response.status_code
            if status in _REDIRECTS and not signed and "Location" in response.headers:
                signed = urljoin(url, response.headers["Location"])
                response.close()
                if urlsplit(signed).scheme not in ("http", "https"):  # not a CDN's URL
                    raise ReadFailed(READ_FAILED, name, f"{where}: redirected to "
                                     f"{_quoted(signed)}, not an http(s) URL")
                self._remember(name, signed)
                continue
            if signed and status in _EXPIRED and not refreshed:
                response.close()  # the signature expired or was revoked: resolve again
                self._forget(name)
                signed, refreshed = None, True
                continue
            if status in (429, 503):
                wait = _retry_after(response.headers.get("Retry-After"), throttled)
                throttled += 1
                if throttled < _THROTTLED_ATTEMPTS and waited + wait <= _TOTAL_WAIT_S:
                    response.close()
                    waited += wait
                    time.sleep(wait)
                    continue
                return response
            if status >= 500:
                failed += 1
                if failed <= _RETRIES:
                    response.close()
                    time.sleep(_BASE_WAIT_S * 2.0 ** (failed - 1))
                    continue
            return response

    def environment(self, url: str) -> Environment:
        """The environment's settings for ``url``'s host, read once per reader (a run):
        proxies, CA bundle and netrc login as requests would read them for every request."""
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        with self._lock:
            known = self._environments.get(origin)
        if known is None:
            known = Environment.of(origin)
            with self._lock:
                self._environments.setdefault(origin, known)
        return known

    def _signed_url(self, name: str) -> str | None:
        """The CDN URL a resolve of ``name`` redirected to, while it is valid (its
        ``Expires``, less :data:`_EXPIRY_MARGIN_S`)."""
        with self._lock:
            found = self._signed.get(name)
        if found is None:
            return None
        url, expires = found
        if expires is not None and time.time() > expires - _EXPIRY_MARGIN_S:
            self._forget(name)
            return None
        return url

    def _remember(self, name: str, location: str) -> None:
        with self._lock:
            self._signed[name] = (location, _expires(location))

    def _forget(self, name: str) -> None:
        with self._lock:
            self._signed.pop(name, None)

    def _check_answer(self, response: requests.Response, name: str, where: str, begin: int,
                      end: int, size: int) -> None:
        """Raise :class:`ReadFailed` unless the status and headers announce exactly the
        range asked, of a file of the listed ``size``."""
        status = response.status_code
        if status == 200:
            raise ReadFailed(RANGE_IGNORED, name,
                             f"{where}: the server answered 200 (the whole file), not 206; "
                             "not read")
        if status != 206:
            from huggingface_hub.errors import HfHubHTTPError
            from huggingface_hub.utils import hf_raise_for_status

            reason = f"HTTP {status}"
            try:
                hf_raise_for_status(response)
            except HfHubHTTPError as exc:
                reason = _reason(exc)
            raise ReadFailed(READ_FAILED, name, f"{where}: {reason}")
        want_range = f"bytes {begin}-{end - 1}/{size}"
        got_range = response.headers.get("Content-Range")
        if got_range != want_range:
            raise ReadFailed(READ_FAILED, name,
                             f"{where}: Content-Range {got_range!r}, expected {want_range!r} "
                             "(the range asked, of the size the API listed)")
        length = response.headers.get("Content-Length")
        if length is not None and length.strip() != str(end - begin):
            raise ReadFailed(READ_FAILED, name,
                             f"{where}: Content-Length {length!r} for a {end - begin}-byte range")

    def _body(self, response: requests.Response, name: str, where: str, n: int) -> bytes:
        """Exactly ``n`` body bytes, read in pieces of at most :data:`_PIECE`; one byte more
        than ``n`` ends the read."""
        import requests
        import urllib3

        out = bytearray()
        try:
            while len(out) <= n:
                piece = response.raw.read(min(_PIECE, n + 1 - len(out)), decode_content=False)
                if not piece:
                    break
                out += piece
        except (urllib3.exceptions.HTTPError, requests.RequestException, OSError) as exc:
            raise ReadFailed(READ_FAILED, name,
                             f"{where}: the connection failed after {len(out)} bytes "
                             f"({type(exc).__name__})") from None
        if len(out) != n:
            what = "more than" if len(out) > n else f"{len(out)} bytes of"
            raise ReadFailed(READ_FAILED, name, f"{where}: the body held {what} the "
                             f"{n} bytes asked")
        return bytes(out)

    def sha256(self, name: str) -> str:
        """The LFS sha256 the Hub lists (nothing downloaded); a small non-LFS file (config,
        index: the Hub lists only its git SHA-1) is read and hashed."""
        entry = self._file(name)
        if entry.lfs_sha256 is not None:
            return entry.lfs_sha256
        import hashlib

        h = hashlib.sha256()
        for begin in range(0, entry.size, _HASH_PIECE):
            h.update(self.read_range(name, begin, min(begin + _HASH_PIECE, entry.size)))
        return h.hexdigest()
