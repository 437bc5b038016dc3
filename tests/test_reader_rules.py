"""Every rule the readers apply to an answer or a file, each tripped alone by one fault.

One table per reader. A row injects one fault (into the test Hub of ``tests/hubserver.py``
through its ``edits``/``edit_info`` hooks, or into a local folder) that breaks exactly one
rule, and asserts what that rule alone says: the :class:`ReadFailed` check id and the
message of that rule (another rule's message, or a read that succeeds, fails the row), and
how many requests it cost. A row without a fault (``None``) is the other side of the
boundary: the same answer, inside the rule, is read. Switch a rule off and its row goes red.

The Hub reader's rules (:mod:`mxformats.validate.readers.hub`): the listing
(:func:`~mxformats.validate.readers.hub.open_hub`: the commit, each file's name, size, LFS size
and sha256), the status (206 only; 200 is Range ignored; 5xx retried, 429/503 waited for, each
bounded), each field of ``Content-Range`` (unit, start, end, total = the listed size),
``Content-Length``, the body's length, the redirect (followed once, to an http(s) URL, the
token never sent there, reused until it expires or the CDN refuses it: then resolved once
again), the listed size and the LFS sha256. The local reader's
(:mod:`mxformats.validate.readers.local`): symlinks out of the allowed roots, file kinds,
truncated and shrunk files, the file list; and :func:`~mxformats.validate.readers.unsafe_name`.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import requires
from hubserver import Answer, HubServer, Repo

from mxformats.tensorfile import NotRegularFileError, write_safetensors
from mxformats.validate.readers import (
    RANGE_IGNORED,
    READ_FAILED,
    LocalReader,
    NotAFolder,
    ReadFailed,
    open_reader,
    unsafe_name,
)

SHARD = "model.safetensors"
CONFIG = "config.json"
SIZE = 4096
BEGIN, END = 100, 1100  # the range every row reads
#: a token the Hub must get and the CDN never
TOKEN = "hf_rules_token"


# -- the Hub reader: the answer to a ranged read ---------------------------------------------


def _status(code: int, message: str = "refused") -> Callable[[Answer], None]:
    """The answer becomes ``code`` with an error body, as the Hub sends one."""

    def edit(a: Answer) -> None:
        body = f'{{"error": "{message}"}}'.encode()
        a.status, a.path, a.extra = code, None, body
        a.headers.pop("Content-Range", None)
        a.headers.update({"Content-Length": str(len(body)), "X-Error-Message": message})
    return edit


def _whole_file(a: Answer) -> None:
    """200 with the whole file: Range ignored."""
    assert a.path is not None
    a.status, a.begin, a.stop = 200, 0, a.path.stat().st_size
    a.headers.pop("Content-Range")
    a.headers["Content-Length"] = str(a.stop)


def _header(key: str, value: str | None) -> Callable[[Answer], None]:
    """One header set to ``value`` (None: absent)."""

    def edit(a: Answer) -> None:
        if value is None:
            a.headers.pop(key, None)
        else:
            a.headers[key] = value
    return edit


def _length(more: int | str) -> Callable[[Answer], None]:
    """Content-Length ``more`` bytes off (a string: appended to it) over the right body,
    then the connection closes (a reader that believed it gets a short or long body, never
    a wait for bytes that do not come)."""

    def edit(a: Answer) -> None:
        length = a.stop - a.begin
        a.headers["Content-Length"] = (f"{length}{more}" if isinstance(more, str)
                                       else str(length + more))
        a.close = True
    return edit


def _range(unit: str = "bytes", start: int = 0, end: int = 0, total: int = 0
           ) -> Callable[[Answer], None]:
    """Content-Range with one field changed: its unit, or its start, end or total moved by
    the given amount."""

    def edit(a: Answer) -> None:
        size = int(a.headers["Content-Range"].rpartition("/")[2])
        a.headers["Content-Range"] = (f"{unit} {a.begin + start}-{a.stop - 1 + end}/"
                                      f"{size + total}")
    return edit


def _body(more: int) -> Callable[[Answer], None]:
    """A body ``more`` bytes longer (or shorter) than the range, ended by closing the
    connection (no Content-Length: nothing else says how long it is)."""

    def edit(a: Answer) -> None:
        del a.headers["Content-Length"]
        if more > 0:
            a.extra = b"\0" * more
        else:
            a.stop += more
    return edit


def _drop(a: Answer) -> None:
    """The connection closes halfway through a body whose Content-Length is right."""
    a.stop = a.begin + (a.stop - a.begin) // 2
    a.close = True


def _times(n: int, edit: Callable[[Answer], None]) -> Callable[[Answer], None]:
    """``edit`` on the first ``n`` answers only (then the server answers right)."""
    left = [n]

    def once(a: Answer) -> None:
        if left[0] > 0:
            left[0] -= 1
            edit(a)
    return once


def _on(origin: str, edit: Callable[[Answer], None]) -> Callable[[Answer], None]:
    """``edit`` on the answers of ``origin`` (``"hub"`` or ``"cdn"``) only."""

    def where(a: Answer) -> None:
        if a.origin == origin:
            edit(a)
    return where


def _location(url: str | None) -> Callable[[Answer], None]:
    """The Hub's redirect to ``url`` (None: without a Location)."""
    return _on("hub", _header("Location", url))


def _again(a: Answer) -> None:
    """A redirect to the URL asked (a second hop, or a loop)."""
    _status(302)(a)
    a.headers["Location"] = "/again"


def _token_rules(a: Answer) -> None:
    """The Hub refuses a read without the token (401); the CDN one with it (400, as S3
    refuses a second authorization)."""
    sent = any(k.lower() == "authorization" and TOKEN in v for k, v in a.request.items())
    if a.origin == "hub" and not sent:
        _status(401, "Invalid credentials")(a)
    elif a.origin == "cdn" and sent:
        _status(400, "Only one auth mechanism allowed")(a)


@dataclass(frozen=True)
class AnswerRow:
    """One fault of an answer: ``edit`` (None: none), read with the CDN redirect on or off;
    ``error``: a regex of the one message expected (None: the read succeeds); ``check``
    its id; ``hub``/``cdn``: the ranged requests each origin answers for one read;
    ``every_read``: the fault is in every answer (not only the first)."""

    rule: str
    edit: Callable[[Answer], None] | None
    error: str | None
    check: str = READ_FAILED
    cdn: bool = False
    hub: int = 1
    cdn_reads: int = 0
    every_read: bool = True


ANSWER_ROWS = [
    # status: 206 only
    AnswerRow("status 206", None, None),
    AnswerRow("status 200: Range ignored", _whole_file, r"answered 200 \(the whole file\)",
              RANGE_IGNORED),
    AnswerRow("status other 2xx", _status(203), r"HTTP 203"),
    AnswerRow("status 404", _status(404, "Entry not found"), r"404.*Entry not found"),
    AnswerRow("status 416", _status(416), r"416"),
    AnswerRow("status 5xx retried twice, then failed", _status(500), r"500", hub=3),
    AnswerRow("status 5xx once: retried", _times(1, _status(500)), None, hub=2),
    AnswerRow("status 429 waited for, bounded", _status(429), r"429", hub=8),
    AnswerRow("status 429 once: waited for", _times(1, _status(429)), None, hub=2),
    AnswerRow("status 503 once: waited for", _times(1, _status(503)), None, hub=2),
    AnswerRow("status 503 waited for, bounded", _status(503), r"503", hub=8),
    # Content-Range: each field
    AnswerRow("Content-Range absent", _header("Content-Range", None), r"Content-Range None"),
    AnswerRow("Content-Range unit", _range(unit="items"), r"Content-Range 'items "),
    AnswerRow("Content-Range start + 1", _range(start=1), r"Content-Range 'bytes 101-"),
    AnswerRow("Content-Range start - 1", _range(start=-1), r"Content-Range 'bytes 99-"),
    AnswerRow("Content-Range end + 1", _range(end=1), r"Content-Range 'bytes 100-1100/"),
    AnswerRow("Content-Range end - 1", _range(end=-1), r"Content-Range 'bytes 100-1098/"),
    AnswerRow("Content-Range total + 1", _range(total=1), r"Content-Range '[^']*/4097'"),
    AnswerRow("Content-Range total - 1", _range(total=-1), r"Content-Range '[^']*/4095'"),
    # Content-Length: optional, but when sent, the range's
    AnswerRow("Content-Length absent", _header("Content-Length", None), None),
    AnswerRow("Content-Length + 1", _length(1), r"Content-Length '1001'"),
    AnswerRow("Content-Length - 1", _length(-1), r"Content-Length '999'"),
    AnswerRow("Content-Length a number", _length("x"), r"Content-Length '1000x'"),
    # the body: exactly the range
    AnswerRow("body one byte long", _body(1), r"body held more than the 1000 bytes"),
    AnswerRow("body one byte short", _body(-1), r"body held 999 bytes of the 1000"),
    AnswerRow("body cut by the connection", _drop, r"connection failed after 500 bytes"),
    # the redirect to the CDN
    AnswerRow("redirect followed", None, None, cdn=True, cdn_reads=1),
    AnswerRow("redirect followed once", _on("cdn", _times(1, _again)), r"HTTP 302", cdn=True,
              cdn_reads=1, every_read=False),
    AnswerRow("redirect without Location", _location(None), r"HTTP 302", cdn=True),
    AnswerRow("redirect to a file: URL", _location("file:///etc/passwd"),
              r"redirected to 'file:///etc/passwd', not an http\(s\) URL", cdn=True),
    AnswerRow("redirect: token to the Hub, never to the CDN", _token_rules, None, cdn=True,
              cdn_reads=1),
    AnswerRow("redirect refused (403): resolved once again", _on("cdn", _status(403)),
              r"403", cdn=True, hub=2, cdn_reads=2),
    AnswerRow("redirect refused once (403)", _on("cdn", _times(1, _status(403))), None,
              cdn=True, hub=2, cdn_reads=2),
    AnswerRow("redirect refused once (400)", _on("cdn", _times(1, _status(400))), None,
              cdn=True, hub=2, cdn_reads=2),
    AnswerRow("redirect refused once (410)", _on("cdn", _times(1, _status(410))), None,
              cdn=True, hub=2, cdn_reads=2),
    AnswerRow("CDN 404: not resolved again", _on("cdn", _status(404, "NoSuchKey")), r"404",
              cdn=True, cdn_reads=1),
    AnswerRow("CDN Content-Range total", _on("cdn", _range(total=1)), r"/4097'", cdn=True,
              cdn_reads=1),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repo of one LFS file (``*.safetensors``: its bytes are not parsed here) and one
    non-LFS file."""
    out = tmp_path_factory.mktemp("rules")
    (out / SHARD).write_bytes(bytes(i * 7 % 251 for i in range(SIZE)))
    (out / CONFIG).write_text('{"model_type": "rules"}')
    return out


@pytest.fixture(scope="module")
def server(folder: Path) -> Iterator[HubServer]:
    requires("huggingface_hub")
    with HubServer({"test/rules": Repo({"main": folder})}) as s:
        yield s


@pytest.fixture(autouse=True)
def _hub(request: pytest.FixtureRequest, tmp_path: Path,
         monkeypatch: pytest.MonkeyPatch) -> None:
    """The Hub tests talk to the test server only, with the token set; retries and
    throttling wait a millisecond; faults, realism and logs start clean."""
    if "server" not in request.fixturenames:
        return
    server: HubServer = request.getfixturevalue("server")
    from mxformats.validate.readers import hub

    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setattr(hub, "_BASE_WAIT_S", 0.001)
    monkeypatch.setattr(hub, "_THROTTLE_BASE_S", 0.001)
    server.plain()
    server.retry_after = "0"
    server.edits.clear()
    server.edit_info = None
    server.extra_siblings.clear()
    server.reset()


def _reads(server: HubServer, origin: str) -> int:
    """Ranged requests ``origin`` answered (a refused one included)."""
    return sum(1 for e in server.events if e[1] == origin)


@pytest.mark.parametrize("row", ANSWER_ROWS, ids=lambda r: r.rule)
def test_hub_answer_rule(row: AnswerRow, server: HubServer, folder: Path) -> None:
    server.cdn = row.cdn
    reader = open_reader("hf://test/rules", hub_connections=1)
    if row.edit is not None:
        server.edits[SHARD] = row.edit
    raw = (folder / SHARD).read_bytes()
    if row.error is None:
        assert reader.read_range(SHARD, BEGIN, END) == raw[BEGIN:END]
    else:
        with pytest.raises(ReadFailed) as caught:
            reader.read_range(SHARD, BEGIN, END)
        assert (caught.value.check, caught.value.file) == (row.check, SHARD)
        assert re.search(row.error, caught.value.reason), caught.value.reason
        assert not caught.value.follow_on and reader.unreachable is None
    assert (_reads(server, "hub"), _reads(server, "cdn")) == (row.hub, row.cdn_reads), \
        server.events
    server.edits.clear()  # the fault gone, the same reader reads the range
    assert reader.read_range(SHARD, BEGIN, END) == raw[BEGIN:END]


#: a checkpoint whose second shard the faults of :data:`ANSWER_ROWS` are put in
MX = Path(__file__).resolve().parent / "data" / "producers" / "kimi-k2-mxfp4-quark"
MX_SHARD = "model-00002-of-00002.safetensors"


@pytest.mark.parametrize("row", [r for r in ANSWER_ROWS if r.error and r.every_read],
                         ids=lambda r: r.rule)
def test_hub_answer_rule_is_one_finding(row: AnswerRow, server: HubServer) -> None:
    """The validator's view of each fault: one finding, of the row's check, for the shard
    whose reads break the rule, and nothing else (one root cause, one finding; exit 1)."""
    from mxformats.validate.findings import Level
    from mxformats.validate.model import Options
    from mxformats.validate.runner import exit_code, validate

    server.repos["test/mx"] = Repo({"main": MX})
    server.cdn = row.cdn
    assert row.edit is not None
    server.edits[MX_SHARD] = row.edit
    report = validate("hf://test/mx", Options(level=Level.STRUCTURE, workers=1,
                                              hub_connections=1))
    assert [(f.check.id, f.file) for f in report.findings] == [(row.check, MX_SHARD)], [
        f.to_json() for f in report.findings]
    assert exit_code(report) == 1 and report.fatal is None


@pytest.mark.parametrize(("ttl", "resolves"), [(3600.0, 1), (9.0, 2)])
def test_hub_signed_url_reused_until_its_expiry(ttl: float, resolves: int, server: HubServer,
                                                folder: Path) -> None:
    """A signed URL is reused for the file's next read, unless its Expires is within the
    margin (10 s): then the file is resolved again, never sent to the CDN to be refused."""
    server.cdn, server.cdn_ttl = True, ttl
    reader = open_reader("hf://test/rules", hub_connections=1)
    raw = (folder / SHARD).read_bytes()
    for begin in (0, 200):
        assert reader.read_range(SHARD, begin, begin + 8) == raw[begin:begin + 8]
    assert [e[2] for e in server.events if e[1] == "hub"] == [302] * resolves
    assert [e[2] for e in server.events if e[1] == "cdn"] == [206, 206]


def test_hub_unreachable_is_one_root_cause(server: HubServer) -> None:
    """A server that hangs up on every try of a read: the read fails after its retries,
    and every later read fails at once (follow-on), with no request."""
    reader = open_reader("hf://test/rules", hub_connections=1)
    server.faults["*"] = "hang-up"
    try:
        with pytest.raises(ReadFailed) as first:
            reader.read_range(SHARD, BEGIN, END)
        assert not first.value.follow_on and reader.unreachable is not None
        server.log.clear()
        with pytest.raises(ReadFailed) as later:
            reader.read_range(CONFIG, 0, 4)
        assert later.value.follow_on and not [r for r in server.log if "/resolve/" in r[1]]
    finally:
        server.faults.clear()


# -- the Hub reader: the listing, sizes and sha256 -------------------------------------------


def _sibling(name: str, **fields: Any) -> Callable[[dict[str, Any]], None]:
    """The listing's entry of ``name`` with ``fields`` set (``lfs`` fields by ``lfs_KEY``;
    the value ``...`` removes the key)."""

    def edit(info: dict[str, Any]) -> None:
        (entry,) = [s for s in info["siblings"] if s["rfilename"] == name]
        for key, value in fields.items():
            where, key = (entry["lfs"], key[4:]) if key.startswith("lfs_") else (entry, key)
            if value is ...:
                where.pop(key, None)
            else:
                where[key] = value
    return edit


def _info(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(info: dict[str, Any]) -> None:
        info[key] = value
    return edit


def _extra(entry: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    def edit(info: dict[str, Any]) -> None:
        info["siblings"].append(entry)
    return edit


#: (rule, the listing's fault, the reason exit 2 gives)
LISTING_ROWS = [
    ("commit: 40 hex digits", _info("sha", "a" * 39), r"did not name the commit"),
    ("commit: lower case", _info("sha", "A" * 40), r"did not name the commit"),
    ("commit: named", _info("sha", None), r"did not name the commit"),
    ("name: a string", _extra({"rfilename": 7, "size": 3}), r"lists a file named 7,"),
    ("name: not empty", _extra({"rfilename": "", "size": 3}), r"named '',"),
    ("name: no ..", _extra({"rfilename": "a/../../b", "size": 3}), r"named 'a/../../b'"),
    ("name: not absolute", _extra({"rfilename": "/etc/passwd", "size": 3}), r"'/etc/passwd'"),
    ("name: no backslash", _extra({"rfilename": "a\\b", "size": 3}), r"named 'a\\\\b'"),
    ("name: unique", _extra({"rfilename": CONFIG, "size": 3}), r"named 'config.json'"),
    ("size: present", _sibling(CONFIG, size=...), r"'config.json' without a size"),
    ("size: not null", _sibling(CONFIG, size=None), r"'config.json' without a size"),
    ("size: not negative", _sibling(CONFIG, size=-1), r"'config.json' without a size"),
    ("size: an integer", _sibling(CONFIG, size="23"), r"'config.json' without a size"),
    ("size: not a bool", _sibling(CONFIG, size=True), r"'config.json' without a size"),
    ("LFS size: present", _sibling(SHARD, lfs_size=...), r"not a model's info: 'size'"),
    ("LFS size: not null", _sibling(SHARD, lfs_size=None), r"'model.safetensors' without a"),
    ("LFS size: not negative", _sibling(SHARD, lfs_size=-1), r"'model.safetensors' without a"),
    ("LFS sha256: present", _sibling(SHARD, lfs_sha256=...), r"not a model's info: 'sha256'"),
    ("LFS sha256: not null", _sibling(SHARD, lfs_sha256=None), r"with sha256 None"),
    ("LFS sha256: 64 digits", _sibling(SHARD, lfs_sha256="a" * 63), r"with sha256 'a{63}'"),
    ("LFS sha256: not 65 digits", _sibling(SHARD, lfs_sha256="a" * 65), r"with sha256 'a{65}'"),
    ("LFS sha256: hex", _sibling(SHARD, lfs_sha256="g" * 64), r"with sha256 'g{64}'"),
    ("LFS sha256: lower case", _sibling(SHARD, lfs_sha256="A" * 64), r"with sha256 'A{64}'"),
]


@pytest.mark.parametrize(("rule", "edit", "reason"), LISTING_ROWS,
                         ids=[r[0] for r in LISTING_ROWS])
def test_hub_listing_rule(rule: str, edit: Callable[[dict[str, Any]], None], reason: str,
                          server: HubServer) -> None:
    """A listing that breaks one rule is refused whole (exit 2: NotAFolder with the reason)
    and nothing is read; the listing as the Hub sends it opens."""
    open_reader("hf://test/rules")
    server.edit_info = edit
    with pytest.raises(NotAFolder) as caught:
        open_reader("hf://test/rules")
    assert re.search(reason, str(caught.value)), str(caught.value)
    assert not [r for r in server.log if "/resolve/" in r[1]]


def test_hub_size_is_the_lfs_size(server: HubServer, folder: Path) -> None:
    """An LFS file's size is its LFS size (the sibling's own ``size`` may be the pointer's),
    and the Content-Range total is checked against it: an LFS size one byte off makes
    every read of the file fail, by its Content-Range."""
    server.edit_info = _sibling(SHARD, size=134)
    reader = open_reader("hf://test/rules", hub_connections=1)
    assert reader.size(SHARD) == SIZE
    assert reader.read_range(SHARD, SIZE - 8, SIZE) == (folder / SHARD).read_bytes()[-8:]
    server.edit_info = _sibling(SHARD, lfs_size=SIZE + 1)
    lying = open_reader("hf://test/rules", hub_connections=1)
    assert lying.size(SHARD) == SIZE + 1
    with pytest.raises(ReadFailed, match=r"Content-Range 'bytes 100-1099/4096', expected "
                       r"'bytes 100-1099/4097'"):
        lying.read_range(SHARD, BEGIN, END)


@pytest.mark.parametrize(("begin", "end", "ok"), [(0, SIZE, True), (0, SIZE + 1, False),
                                                  (SIZE, SIZE, True), (5, 4, False)])
def test_hub_range_inside_the_listed_size(begin: int, end: int, ok: bool, server: HubServer,
                                          folder: Path) -> None:
    """A read of bytes past the listed size (or backwards) is refused before any request;
    an empty one at the end is no request either."""
    reader = open_reader("hf://test/rules", hub_connections=1)
    server.reset()
    if ok:
        assert reader.read_range(SHARD, begin, end) == (folder / SHARD).read_bytes()[begin:end]
        assert len(server.events) == (1 if end > begin else 0)
    else:
        with pytest.raises(OSError, match="outside its 4096 bytes"):
            reader.read_range(SHARD, begin, end)
        assert not server.events
    with pytest.raises(FileNotFoundError):
        reader.size("absent.safetensors")


def test_hub_sha256_lfs_listed_other_hashed(server: HubServer, folder: Path) -> None:
    """An LFS file's sha256 is the one the listing names (nothing downloaded, whatever the
    bytes); a non-LFS file's is computed from its bytes."""
    listed = "0123456789abcdef" * 4
    server.edit_info = _sibling(SHARD, lfs_sha256=listed)
    reader = open_reader("hf://test/rules", hub_connections=1)
    assert reader.sha256(SHARD) == listed and not server.events
    config = (folder / CONFIG).read_bytes()
    assert reader.sha256(CONFIG) == hashlib.sha256(config).hexdigest()


# -- the local reader ---------------------------------------------------------------------------


@pytest.fixture
def local(tmp_path: Path) -> Path:
    """A folder ``ckpt`` (a tensor file, a nested file) with neighbours outside it: ``other``
    and ``ckpt-evil`` (a name that starts with the folder's)."""
    root = tmp_path / "ckpt"
    (root / "sub").mkdir(parents=True)
    write_safetensors(root / SHARD, {"w": np.arange(64, dtype=np.uint8)})
    (root / "sub" / "nested.json").write_text("{}")
    for outside in ("other", "ckpt-evil"):
        (tmp_path / outside).mkdir()
        (tmp_path / outside / "x.json").write_text("{}")
    return root


#: (rule, link name -> target relative to the folder's parent, allowed root or None, escapes)
SYMLINK_ROWS = [
    ("a link inside the folder", "inside.json", "ckpt/sub/nested.json", None, False),
    ("a link out of the folder", "out.json", "other/x.json", None, True),
    ("a link to a folder named like it", "evil.json", "ckpt-evil/x.json", None, True),
    ("a link under an allowed root", "allowed.json", "other/x.json", "other", False),
    ("a link beside an allowed root", "beside.json", "ckpt-evil/x.json", "other", True),
]


@pytest.mark.parametrize(("rule", "link", "target", "allow", "escapes"), SYMLINK_ROWS,
                         ids=[r[0] for r in SYMLINK_ROWS])
def test_local_symlink_rule(rule: str, link: str, target: str, allow: str | None,
                            escapes: bool, local: Path) -> None:
    (local / link).symlink_to(local.parent / target)
    roots = () if allow is None else (local.parent / allow,)
    reader = open_reader(local, allow=roots)
    assert reader.escapes(link) is escapes
    assert reader.escapes(SHARD) is False
    assert reader.resolved(link) == str((local.parent / target).resolve())


def test_local_hf_cache_snapshot_reads_its_blobs(tmp_path: Path) -> None:
    """A snapshot of the Hugging Face cache links into its repo's blobs/ (allowed), not into
    another repo's."""
    cache = tmp_path / "hub"
    snap = cache / "models--org--name" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    for repo in ("models--org--name", "models--org--other"):
        (cache / repo / "blobs").mkdir(parents=True, exist_ok=True)
        (cache / repo / "blobs" / "b1").write_text("{}")
    (snap / "own.json").symlink_to(cache / "models--org--name" / "blobs" / "b1")
    (snap / "theirs.json").symlink_to(cache / "models--org--other" / "blobs" / "b1")
    reader = open_reader(snap)
    assert (reader.escapes("own.json"), reader.escapes("theirs.json")) == (False, True)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))


#: (rule, how the file is made, what not_regular calls it)
KIND_ROWS = [
    ("a regular file", lambda p: p.write_bytes(b"{}"), None),
    ("a FIFO", _fifo, "a FIFO"),
    ("a directory", lambda p: p.mkdir(), "a directory"),
    ("a socket", _socket, "a socket"),
    ("a link to a FIFO", lambda p: (_fifo(p.with_suffix(".fifo")),
                                    p.symlink_to(p.with_suffix(".fifo"))), "a FIFO"),
]


@pytest.mark.parametrize(("rule", "make", "what"), KIND_ROWS, ids=[r[0] for r in KIND_ROWS])
def test_local_file_kind_rule(rule: str, make: Callable[[Path], Any], what: str | None,
                              local: Path) -> None:
    """Only a regular file is opened: anything else is named and refused by every read (a
    FIFO never blocks)."""
    name = "kind.json"
    make(local / name)
    reader = LocalReader(local)
    assert reader.not_regular(name) == what
    if what is None:
        assert reader.read_range(name, 0, 2) == b"{}" and reader.read_json(name) == {}
        return
    for read in (lambda: reader.read_range(name, 0, 2), lambda: reader.read_json(name),
                 lambda: reader.sha256(name), lambda: reader.header_table(name)):
        with pytest.raises(NotRegularFileError, match=re.escape(what)):
            read()


def test_local_missing_file(local: Path) -> None:
    reader = LocalReader(local)
    for ask in (reader.not_regular, reader.size, reader.sha256):
        with pytest.raises(FileNotFoundError):
            ask("absent.safetensors")
    assert not reader.exists("absent.safetensors") and reader.exists(SHARD)


@pytest.mark.parametrize("array", [False, True], ids=["read_range", "read_array"])
def test_local_truncated_and_shrunk(array: bool, local: Path) -> None:
    """A read past the end of the file, or of a file that shrank after its header was read,
    fails naming the byte it stopped at; the read up to the end is whole."""
    reader = LocalReader(local)
    size = reader.size(SHARD)
    read = reader.read_array if array else reader.read_range
    assert len(read(SHARD, size - 4, size)) == 4
    with pytest.raises(OSError, match=f"truncated at byte {size}$"):
        read(SHARD, size - 4, size + 1)
    header, data_offset = reader.header(SHARD)
    begin, end = (data_offset + o for o in header["w"]["data_offsets"])
    assert bytes(read(SHARD, begin, end)) == bytes(range(64)) and end == size
    os.truncate(local / SHARD, size - 1)  # the file shrinks between header and data
    with pytest.raises(OSError, match=f"truncated at byte {size - 1}$"):
        read(SHARD, begin, end)


def test_local_file_list(local: Path) -> None:
    """Every file, nested ones included, sorted; a symlinked folder is not followed."""
    (local / "linked").symlink_to(local.parent / "other", target_is_directory=True)
    assert LocalReader(local).files() == [SHARD, "sub/nested.json"]


def test_local_folder_must_be_a_readable_directory(local: Path) -> None:
    with pytest.raises(NotAFolder, match="is not a readable directory"):
        open_reader(local / SHARD)
    with pytest.raises(NotAFolder, match="is not a readable directory"):
        open_reader(local / "absent")


#: (name, whether no reader may open it)
NAME_ROWS = [
    ("model.safetensors", False), ("sub/model.safetensors", False), ("a..b.json", False),
    ("", True), ("/etc/passwd", True), ("../model.safetensors", True), ("sub/../../x", True),
    ("sub\\x.json", True),
]


@pytest.mark.parametrize(("name", "unsafe"), NAME_ROWS)
def test_unsafe_name_rule(name: str, unsafe: bool) -> None:
    assert unsafe_name(name) is unsafe
