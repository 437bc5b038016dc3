"""``mxformats validate hf://ORG/NAME[@REVISION]`` against a real HTTP server on 127.0.0.1
(tests/hubserver.py) with the real huggingface_hub client: the server first is checked
against the client, then the validator is run through it and compared with local runs."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_validate_corpus as corpus
from conftest import requires
from hubserver import HubServer, Repo
from validate_corpus import copy_tree

from mxformats.testing import make_kimi_checkpoint
from mxformats.testing.sparse import KIMI_K26_TEXT, write_full_size_layout
from mxformats.validate.findings import Level
from mxformats.validate.model import Options
from mxformats.validate.runner import CONFIRM_BYTES, Report, exit_code, validate

hub = requires("huggingface_hub")

ROOT = Path(__file__).resolve().parent.parent
SHARD = "model-00001-of-00002.safetensors"


#: ``MXF_HUB_REALISTIC=1`` runs every test of this module against the realistic Hub
#: (hubserver.REALISTIC: delay, CDN redirects, 429s, a connection limit); CI runs it once.
REALISTIC = os.environ.get("MXF_HUB_REALISTIC", "") not in ("", "0")


@pytest.fixture(scope="module")
def server() -> Iterator[HubServer]:
    with HubServer({}) as s:
        yield s


@pytest.fixture(scope="session")
def twins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The corpus' clean twins this module uses, in the corpus' session cache."""
    return corpus.ensure_twins(tmp_path_factory.mktemp("hub-twins"),
                               {_BY_NAME[n].base for n in REMOTE_CASES} | {"bf16"})


@pytest.fixture(autouse=True)
def _hub_env(server: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test talks to the local server only, with a private HF_HOME; faults and counters
    start clean."""
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    server.faults.clear()
    server.extra_siblings.clear()
    if REALISTIC:
        server.realistic()
    else:
        server.plain()
    server.reset()


def serve(server: HubServer, name: str, folder: Path, **kw: Any) -> str:
    """Serve ``folder`` as repo ``test/NAME`` (branch main); returns its ``hf://`` name."""
    server.repos[f"test/{name}"] = Repo({"main": folder}, **kw)
    return f"hf://test/{name}"


def run(target: str | Path, level: Level = Level.STRUCTURE, **kw: Any) -> Report:
    return validate(target, Options(level=level, workers=1, **kw))


def keys(report: Report) -> set[tuple[str, str, str | None, str | None]]:
    return {(f.check.id, f.effective_severity.value, f.tensor, f.file)
            for f in report.findings}


# -- the server speaks the API as the real client uses it ------------------------------------


def test_server_answers_the_real_client(server: HubServer, twins: dict[str, Path],
                                        tmp_path: Path) -> None:
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    folder = twins["mxfp4"]
    serve(server, "api", folder)
    api = HfApi(endpoint=server.endpoint)
    info = api.model_info("test/api", files_metadata=True)
    shard = folder / SHARD
    digest = hashlib.sha256(shard.read_bytes()).hexdigest()
    by_name = {s.rfilename: s for s in info.siblings or ()}
    assert info.sha is not None and len(info.sha) == 40
    assert set(by_name) == {p.name for p in folder.iterdir()}
    assert by_name[SHARD].lfs is not None and by_name[SHARD].lfs.sha256 == digest
    assert by_name[SHARD].lfs.size == shard.stat().st_size
    assert by_name["config.json"].lfs is None
    tree = {f.path: f for f in api.list_repo_tree("test/api", revision=info.sha, recursive=True)}
    assert set(tree) == set(by_name)
    assert tree[SHARD].lfs is not None and tree[SHARD].lfs.sha256 == digest
    (entry,) = api.get_paths_info("test/api", [SHARD], revision="main")
    assert entry.size == shard.stat().st_size
    got = hf_hub_download("test/api", SHARD, revision=info.sha, endpoint=server.endpoint,
                          cache_dir=tmp_path / "cache")
    assert Path(got).read_bytes() == shard.read_bytes()
    server.repos["test/gated"] = Repo({"main": folder}, gated=True)
    with pytest.raises(GatedRepoError, match="restricted"):
        api.model_info("test/gated")
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("test/absent")
    with pytest.raises(RevisionNotFoundError, match="Invalid rev id"):
        api.model_info("test/api", revision="v9")
    with pytest.raises(EntryNotFoundError):
        hf_hub_download("test/api", "absent.json", endpoint=server.endpoint,
                        cache_dir=tmp_path / "cache")


# -- the same verdicts as a local run -------------------------------------------------------

#: Corpus cases run remotely: every files check a Hub repo can hold, and scale, layout,
#: numbers and --source cases (the special-file and symlink cases have no Hub equivalent).
REMOTE_CASES = (
    "truncated-shard", "header-length-absurd", "header-not-utf8", "overlapping-spans",
    "hole-between-tensors", "tensor-in-two-shards", "index-points-to-missing-shard",
    "stray-shard", "index-dotdot-path", "bad-total-size", "index-missing-shards-checked",
    "index-dot-slash-entries", "missing-weight-scale", "wrong-group-size-scale-shape",
    "quantized-lm-head-multimodal", "e8m0-nan-byte-0xff", "ct-scale-nan",
    "w4a8-scale-2-above-bound", "nvfp4-config-exit-2", "f4-tensor-is-read-not-the-shard-refused",
    "swapped-nibble-order",
)
_BY_NAME = {c.name: c for c in corpus.CASES}


@pytest.mark.parametrize("name", REMOTE_CASES)
def test_remote_corruption_gives_the_local_verdict(name: str, server: HubServer,
                                                   twins: dict[str, Path],
                                                   tmp_path: Path) -> None:
    c = _BY_NAME[name]
    folder = corpus.build(c, tmp_path)
    local = validate(folder, corpus.options(c))
    remote = validate(serve(server, name, folder), corpus.options(c))
    assert remote.root.startswith(f"hf://test/{name}@")
    assert keys(remote) == keys(local), [f.to_json() for f in remote.findings]
    assert exit_code(remote) == exit_code(local) == c.exit
    assert remote.fatal == local.fatal
    if name == "truncated-shard":  # the LFS size disagrees with the header's span
        (span,) = [f for f in remote.findings if f.check.id == "TENSOR_SPAN"]
        assert "the Hub's LFS size" in span.message


def test_revision_pinned_to_one_commit(server: HubServer, twins: dict[str, Path]) -> None:
    """Every read names the commit the API answered for ``main``, never the branch."""
    target = serve(server, "pinned", twins["mxfp4"])
    report = run(f"{target}@main", Level.SCALES)
    assert exit_code(report) == 0, [f.to_json() for f in report.findings]
    sha = report.root.rsplit("@", 1)[1]
    resolves = [path for _, path, _ in server.log if "/resolve/" in path]
    assert resolves and all(f"/resolve/{sha}/" in path for path in resolves)
    assert all(rng is not None for _, path, rng in server.log if "/resolve/" in path)


# -- what it costs ----------------------------------------------------------------------------

#: Kimi-K2.6's dims, cut to 3 layers × 8 experts and a small vocabulary (a sparse layout).
SMALL_K26 = {**KIMI_K26_TEXT, "num_hidden_layers": 3, "n_routed_experts": 8,
             "vocab_size": 4096}


@pytest.fixture(scope="module")
def sparse_mxfp4(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return write_full_size_layout(tmp_path_factory.mktemp("sparse"), shards=4, text=SMALL_K26)


@pytest.mark.parametrize(("level", "limit"), [(Level.STRUCTURE, 0.05), (Level.SCALES, 0.25)])
def test_bytes_read_per_level(level: Level, limit: float, server: HubServer,
                              sparse_mxfp4: dict[str, Any]) -> None:
    target = serve(server, "sparse", sparse_mxfp4["path"], hash_lfs=False)
    report = run(target, level)
    assert report.fatal is None
    assert ("numbers" in report.modules_run) == (level is Level.SCALES)
    sent = server.bytes_sent()
    assert 0 < sent < limit * sparse_mxfp4["declared_bytes"], (sent, level)


@pytest.mark.parametrize(("limit_offset", "yes", "stops"),
                         [(0, False, False), (-1, False, True), (-1, True, False)])
def test_confirm_limit_both_sides(server: HubServer, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch, limit_offset: int, yes: bool,
                                  stops: bool) -> None:
    """The --yes limit on its boundary: a remote --level full that reads exactly
    CONFIRM_BYTES goes on, one byte more stops with exit 2 (before reading data), and --yes
    lets that one go on (the limit is lowered to this small checkpoint's planned bytes)."""
    from mxformats.validate import runner

    target = serve(server, "limit", make_kimi_checkpoint(tmp_path / "ckpt", "quark-mxfp4"))
    planned: list[int] = []
    validate(target, Options(level=Level.FULL, workers=1, yes=True), on_plan=planned.append)
    assert len(planned) == 1 and planned[0] > 0
    monkeypatch.setattr(runner, "CONFIRM_BYTES", planned[0] + limit_offset)
    server.reset()
    report = run(target, Level.FULL, yes=yes)
    assert (report.fatal is not None) is stops, report.fatal
    assert (exit_code(report) == 2) is stops
    assert ("numbers" in report.modules_run) is not stops


def test_full_level_over_10_gb_needs_yes(server: HubServer, tmp_path: Path) -> None:
    """A sparse layout of 61 Kimi-size layers × 24 experts (33 GB declared): --level full
    states the bytes and stops before reading data; --yes is what lets it go on."""
    text = {**SMALL_K26, "num_hidden_layers": 61, "n_routed_experts": 24}
    layout = write_full_size_layout(tmp_path / "big", shards=4, text=text)
    target = serve(server, "big", layout["path"], hash_lfs=False)
    report = run(target, Level.FULL)
    assert layout["declared_bytes"] > CONFIRM_BYTES
    assert exit_code(report) == 2 and report.fatal is not None, report.findings
    assert "pass --yes" in report.fatal and " GB) from hf://test/big@" in report.fatal
    assert server.bytes_sent() < 0.001 * layout["declared_bytes"]  # headers only


# -- a bad network is a finding, never a crash or a hang ----------------------------------------


@pytest.mark.parametrize(("fault", "check"), [
    ("ignore-range", "HUB_RANGE_IGNORED"),
    ("drop", "HUB_READ_FAILED"),
    ("lying-length", "HUB_READ_FAILED"),
    ("wrong-range", "HUB_READ_FAILED"),
])
def test_bad_answers_are_findings(fault: str, check: str, server: HubServer,
                                  twins: dict[str, Path], tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    target = serve(server, f"fault-{fault}", twins["mxfp4"])
    server.faults[SHARD] = fault
    monkeypatch.chdir(tmp_path)
    report = run(target, Level.SCALES)
    assert list(tmp_path.rglob("*")) == [], "a file was written (HF_HOME, cwd)"
    found = [f for f in report.findings if f.check.id == check]
    assert len(found) == 1 and found[0].file == SHARD, [f.to_json() for f in report.findings]
    assert exit_code(report) == 1
    assert "INTERNAL_ERROR" not in {f.check.id for f in report.findings}


def test_failed_scale_read_is_one_finding(server: HubServer, twins: dict[str, Path],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection that drops on every data read (headers fine): one finding for the file,
    never silence (the scales of that shard were not checked)."""
    from mxformats.validate.readers import hub as hub_mod

    target = serve(server, "drop-data", twins["mxfp4"])
    real = hub_mod.HubReader.read_range

    def after_headers(self: Any, name: str, begin: int, end: int) -> bytes:
        if name == SHARD and begin > 8:  # header reads are [0, 8) and [8, 8 + N)
            server.faults[SHARD] = "drop"
        return real(self, name, begin, end)

    monkeypatch.setattr(hub_mod.HubReader, "read_range", after_headers)
    report = run(target, Level.SCALES)
    found = [f for f in report.findings if f.check.id == "HUB_READ_FAILED"]
    assert len(found) == 1 and found[0].file == SHARD, [f.to_json() for f in report.findings]
    assert exit_code(report) == 1


@pytest.mark.parametrize("connections", [1, 4])
def test_server_gone_mid_run_is_one_finding(server: HubServer, twins: dict[str, Path],
                                             monkeypatch: pytest.MonkeyPatch,
                                             connections: int) -> None:
    """The server hangs up on every read once the headers are in: one finding for the whole
    run, and no read after the retries of those in flight (a dead server is never a hang):
    one connection makes one data read and its 2 retries; 4 at most 4 reads, each with its
    2 retries."""
    from mxformats.validate.readers import hub as hub_mod

    target = serve(server, "gone", twins["mxfp4"])
    server.throttle_every = 0  # a 429 would be one more request
    real = hub_mod.HubReader.read_range

    def after_headers(self: Any, name: str, begin: int, end: int) -> bytes:
        if begin > 8:
            server.faults["*"] = "hang-up"
        return real(self, name, begin, end)

    monkeypatch.setattr(hub_mod.HubReader, "read_range", after_headers)
    report = run(target, Level.SCALES, hub_connections=connections)
    found = [f for f in report.findings if f.check.id == "HUB_READ_FAILED"]
    assert len(found) == 1 and "not made: the server stopped answering" in found[0].message, [
        f.to_json() for f in report.findings]
    assert exit_code(report) == 1
    reads = [(p, rng) for _, p, rng in server.log if "/resolve/" in p] + [
        (p, rng) for _, p, rng in server.cdn_log]  # with CDN redirects: reads of signed URLs
    hung_up = [p for p, rng in reads if rng != "bytes=0-7"]
    # config, index, 2 headers; then the data reads in flight and their 2 retries each
    data = len(hung_up) - 4
    assert data == 3 if connections == 1 else 3 <= data <= 3 * connections, hung_up


# -- the manifest against the Hub's LFS sha256 ----------------------------------------------------


def test_manifest_verified_without_downloading(server: HubServer, twins: dict[str, Path],
                                               tmp_path: Path) -> None:
    folder = copy_tree(twins["mxfp4"], tmp_path / "m")
    manifest = tmp_path / "manifest.json"
    assert exit_code(run(folder, manifest=manifest)) == 0  # written locally
    target = serve(server, "manifest", folder)
    ok = run(target, manifest=manifest)
    assert exit_code(ok) == 0 and not keys(ok), [f.to_json() for f in ok.findings]
    headers = server.bytes_sent()
    assert headers < 0.05 * sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    raw = bytearray((folder / SHARD).read_bytes())
    raw[-1] ^= 1  # bit rot in the data: the format checks cannot see it
    (folder / SHARD).write_bytes(bytes(raw))
    server.repos["test/manifest"] = Repo({"main": folder})  # new LFS sha256
    server.reset()
    bad = run(target, manifest=manifest)
    assert {(f.check.id, f.file) for f in bad.findings} == {("MANIFEST_MISMATCH", SHARD)}
    assert exit_code(bad) == 1 and server.bytes_sent() == headers


def test_non_lfs_file_hashed_in_bounded_reads(server: HubServer, twins: dict[str, Path],
                                              tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A non-LFS file (config.json: the Hub lists only its git SHA-1) is hashed over reads of
    at most ``_HASH_PIECE`` bytes, never one read of the size the API claims."""
    from mxformats.validate.readers import hub as hub_module

    folder = copy_tree(twins["mxfp4"], tmp_path / "m")
    manifest = tmp_path / "manifest.json"
    assert exit_code(run(folder, manifest=manifest)) == 0
    target = serve(server, "hashed", folder)
    monkeypatch.setattr(hub_module, "_HASH_PIECE", 100)
    report = run(target, manifest=manifest)
    assert exit_code(report) == 0 and not keys(report), [f.to_json() for f in report.findings]
    spans = [tuple(map(int, r[len("bytes="):].split("-"))) for _m, path, r in server.log
             if path.endswith("/config.json") and r is not None]
    size = (folder / "config.json").stat().st_size
    # not read_json's read; a throttled read is asked again
    hashed = sorted({span for span in spans if span != (0, size - 1)})
    assert size > 100 and hashed == [(b, min(b + 100, size) - 1) for b in range(0, size, 100)]


@pytest.mark.parametrize(("sibling", "reason"), [
    ({"rfilename": 7, "size": 3}, "lists a file named 7"),
    ({"rfilename": "../other/model.safetensors", "size": 3}, "'../other/model.safetensors'"),
    ({"rfilename": "/etc/passwd", "size": 3}, "'/etc/passwd'"),
    ({"rfilename": "config.json", "size": 3}, "lists a file named 'config.json'"),
    ({"rfilename": "../" + "x" * 100_000, "size": 3}, "'../" + "x" * 196 + "…, not a unique"),
    ({"rfilename": "x.safetensors", "size": 3,
      "lfs": {"size": 3, "sha256": None, "pointerSize": 134}}, "with sha256 None"),
])
def test_hostile_listing_exit_2(sibling: dict[str, Any], reason: str, server: HubServer,
                                twins: dict[str, Path]) -> None:
    """A file list with a name that is not a unique relative name inside the repo, or an
    LFS entry without a sha256, is refused whole (exit 2 with the name), never a crash or a
    read outside the repo."""
    target = serve(server, "hostile", twins["mxfp4"])
    server.extra_siblings.append(sibling)
    report = run(target)
    assert exit_code(report) == 2 and report.fatal is not None and reason in report.fatal
    assert len(report.fatal) < 400  # a hostile name is quoted, not repeated whole
    assert not [r for r in server.log if "/resolve/" in r[1]]


# -- could not run: exit 2 with the Hub's reason ------------------------------------------------


@pytest.mark.parametrize(("target", "reason"), [
    ("hf://test/absent", "does not exist"),
    ("hf://test/gated2", "gated"),
    ("hf://test/base@v9", "Invalid rev id: v9"),
    ("hf://not a repo", "is not hf://ORG/NAME"),
])
def test_missing_or_gated_exit_2(target: str, reason: str, server: HubServer,
                                 twins: dict[str, Path]) -> None:
    server.repos["test/gated2"] = Repo({"main": twins["mxfp4"]}, gated=True)
    serve(server, "base", twins["mxfp4"])
    report = run(target)
    assert exit_code(report) == 2 and report.fatal is not None and reason in report.fatal


def test_model_info_not_json_exit_2(server: HubServer, twins: dict[str, Path]) -> None:
    target = serve(server, "portal", twins["mxfp4"])
    server.faults["api"] = "not-json"
    report = run(target)
    assert exit_code(report) == 2 and report.fatal is not None
    assert "the Hub's answer is not a model's info" in report.fatal


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **env}
    return subprocess.run([sys.executable, "-m", "mxformats.cli", "validate", *args],
                          capture_output=True, text=True, timeout=120, env=full, check=False)


@pytest.mark.parametrize(("env", "reason"), [
    ({"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE"),
    ({"HF_ENDPOINT": "http://127.0.0.1:9"}, "cannot reach the Hub"),  # nothing listens
])
def test_offline_or_no_network_exit_2(env: dict[str, str], reason: str, server: HubServer,
                                      twins: dict[str, Path]) -> None:
    serve(server, "net", twins["mxfp4"])
    done = _cli(["hf://test/net", "--level", "structure"], env)
    assert done.returncode == 2, done.stderr
    assert reason in done.stderr and "Traceback" not in done.stderr


def test_cli_remote_json_names_the_commit(server: HubServer, twins: dict[str, Path]) -> None:
    serve(server, "cli", twins["mxfp4"])
    done = _cli(["hf://test/cli", "--level", "scales", "--json", "-"], {})
    assert done.returncode == 0, done.stderr
    import json

    report = json.loads(done.stdout)
    assert report["checkpoint"].startswith("hf://test/cli@") and len(
        report["checkpoint"].rsplit("@", 1)[1]) == 40


# -- at the real round trip: delay, CDN redirects, 429s, a connection limit -----------------------

#: Corpus cases also run against the realistic Hub on every run (the whole module runs so
#: with MXF_HUB_REALISTIC=1): a files check, a header check, the index, a scale, a numbers case.
REALISTIC_CASES = ("truncated-shard", "header-length-absurd", "index-points-to-missing-shard",
                   "missing-weight-scale", "e8m0-nan-byte-0xff", "swapped-nibble-order")


@pytest.mark.parametrize("name", REALISTIC_CASES)
def test_realistic_hub_gives_the_local_verdict(name: str, server: HubServer,
                                               twins: dict[str, Path], tmp_path: Path) -> None:
    c = _BY_NAME[name]
    folder = corpus.build(c, tmp_path)
    local = validate(folder, corpus.options(c))
    # 429s happen: every 7th read, and past 4 at once (the client has 32 in flight)
    server.realistic(throttle_every=7, max_connections=4)
    remote = validate(serve(server, name, folder), corpus.options(c))
    assert keys(remote) == keys(local), [f.to_json() for f in remote.findings]
    assert exit_code(remote) == exit_code(local) == c.exit
    assert remote.fatal == local.fatal


def _reader(target: str, connections: int = 1) -> Any:
    from mxformats.validate.readers import open_reader

    return open_reader(target, hub_connections=connections)


def test_signed_url_reused_until_it_fails(server: HubServer, twins: dict[str, Path]) -> None:
    """One resolve (and its redirect) per file: every later read of the file goes to the
    signed URL; once the CDN refuses it (the signing key rotated: 403), the file is resolved
    once again and the read succeeds."""
    server.realistic(throttle_every=0, delay=0.0)
    reader = _reader(serve(server, "signed", twins["mxfp4"]))
    raw = (twins["mxfp4"] / SHARD).read_bytes()
    for begin in (0, 8, 100):
        assert reader.read_range(SHARD, begin, begin + 8) == raw[begin:begin + 8]
    assert [e[2] for e in server.events] == [302, 206, 206, 206]
    server.secret = b"rotated"
    server.events.clear()
    assert reader.read_range(SHARD, 200, 208) == raw[200:208]
    assert [(origin, status) for _t, origin, status, _p in server.events] == [
        ("cdn", 403), ("hub", 302), ("cdn", 206)]


@pytest.mark.parametrize("bypassed", [False, True])
def test_environment_proxies_honoured_and_read_once(bypassed: bool, server: HubServer,
                                                    twins: dict[str, Path],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranged reads go through the proxy the environment names for the host (``no_proxy``
    exempting it), as requests would send them, and the environment is read once per
    reader, not per read: the proxy variable dropped later changes nothing for that reader,
    and a new reader reads it again."""
    from mxformats.validate.readers import ReadFailed

    reader = _reader(serve(server, f"proxied-{bypassed}", twins["mxfp4"]))
    raw = (twins["mxfp4"] / SHARD).read_bytes()
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    if bypassed:
        monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
        assert reader.read_range(SHARD, 0, 8) == raw[:8]
        return
    with pytest.raises(ReadFailed):
        reader.read_range(SHARD, 0, 8)
    monkeypatch.delenv("HTTP_PROXY")
    reader.unreachable = None  # not failed at once for the server taken for gone
    with pytest.raises(ReadFailed):  # this reader's settings were read once
        reader.read_range(SHARD, 8, 16)
    assert _reader(serve(server, "proxied-again", twins["mxfp4"])).read_range(
        SHARD, 8, 16) == raw[8:16]


@pytest.mark.parametrize(("ttl", "resolves"), [(3600.0, 1), (5.0, 3)])
def test_signed_url_not_used_past_its_expiry(ttl: float, resolves: int, server: HubServer,
                                             twins: dict[str, Path]) -> None:
    """A signed URL whose Expires is within the margin (10 s) is resolved again before
    use, never sent to the CDN to be refused; one valid for an hour is reused."""
    server.realistic(throttle_every=0, delay=0.0, cdn_ttl=ttl)
    reader = _reader(serve(server, "expiry", twins["mxfp4"]))
    for begin in (0, 8, 100):
        reader.read_range(SHARD, begin, begin + 8)
    statuses = [e[2] for e in server.events]
    assert statuses.count(302) == resolves and 403 not in statuses and statuses.count(206) == 3


def test_retry_after_honoured(server: HubServer, twins: dict[str, Path]) -> None:
    """A 429's read is asked again no sooner than its Retry-After (1 s) says."""
    server.realistic(throttle_every=3, retry_after="1", delay=0.0)
    report = run(serve(server, "throttled", twins["mxfp4"]), hub_connections=1)
    assert exit_code(report) == 0, [f.to_json() for f in report.findings]
    events = server.events
    refused = [i for i, e in enumerate(events) if e[2] == 429]
    assert refused
    for i in refused:
        again = next(e for e in events[i + 1:] if e[3] == events[i][3])
        assert again[0] - events[i][0] >= 1.0


def test_throttled_reads_are_bounded(server: HubServer, twins: dict[str, Path],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A Hub that answers 429 to every read: each read is tried a bounded number of times,
    then it is a finding (exit 1 or 2), never a hang."""
    from mxformats.validate.readers import hub as hub_mod

    server.realistic(throttle_every=1, retry_after="0", delay=0.0)
    monkeypatch.setattr(hub_mod, "_THROTTLE_BASE_S", 0.0)
    report = run(serve(server, "always-429", twins["mxfp4"]))
    assert exit_code(report) in (1, 2)
    tries = Counter(p for _t, _o, status, p in server.events if status == 429)
    assert tries and max(tries.values()) == hub_mod._THROTTLED_ATTEMPTS


@pytest.mark.parametrize("connections", [1, 4])
def test_connections_in_flight(connections: int, server: HubServer,
                               sparse_mxfp4: dict[str, Any]) -> None:
    """--hub-connections N: reads at work at once, never more than N, with no 429 from a
    server limited to N (with 4: more than one at once; all 4 unless the machine is loaded)."""
    server.realistic(throttle_every=0, delay=0.05, max_connections=connections)
    target = serve(server, "pool", sparse_mxfp4["path"], hash_lfs=False)
    # the peak of the tasks' reads alone: cleared once the headers are in
    report = validate(target, Options(level=Level.SCALES, workers=1,
                                      hub_connections=connections),
                      on_plan=lambda _bytes: server.peak.clear())
    assert report.fatal is None
    assert 429 not in {e[2] for e in server.events}
    assert server.peak["cdn"] <= connections and (server.peak["cdn"] > 1) is (connections > 1)


def test_a_read_frees_its_place_before_its_last_bytes(server: HubServer,
                                                       twins: dict[str, Path],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The test Hub frees a ranged read's place among ``max_connections`` before the answer's
    last bytes go out: a client that has the whole answer finds no read at work on either
    origin, even while the server's thread lingers after it (else its next read, on a new
    connection, could be refused: a 429 ``test_connections_in_flight[1]`` once met)."""
    import hubserver

    from mxformats.validate.readers.hub import open_hub

    def lingering(method: Any) -> Any:
        def late(*args: Any, **kw: Any) -> None:
            method(*args, **kw)
            time.sleep(0.5)
        return late

    # after an answer (the 302 has no body) and after a body's last piece
    for method in ("_answer", "_stream"):
        monkeypatch.setattr(hubserver._Handler, method,
                            lingering(getattr(hubserver._Handler, method)))
    server.realistic(throttle_every=0, delay=0.0, max_connections=1)
    reader = open_hub(serve(server, "linger", twins["mxfp4"]), connections=1)
    name = next(n for n in reader.files() if n.endswith(".safetensors"))
    for begin in (0, 8):  # the first read is resolved (a 302 from the Hub), both CDN reads
        assert len(reader.read_range(name, begin, begin + 8)) == 8
        assert (server.active["hub"], server.active["cdn"]) == (0, 0), begin


def test_realistic_waits_for_an_earlier_read_to_end(server: HubServer) -> None:
    """A read still being answered when a test sets the connection limit (an earlier test's
    client stopped reading) is waited for, so that test's first read is not refused; one that
    never ends is reported, not waited for forever."""
    with server.lock:
        server.active["cdn"] += 1

    def end_the_read() -> None:
        time.sleep(0.3)
        with server.lock:
            server.active["cdn"] -= 1

    ender = threading.Thread(target=end_the_read)
    ender.start()
    server.realistic(max_connections=1)
    assert server.active["cdn"] == 0
    ender.join()
    with server.lock:
        server.active["hub"] += 1
    try:
        with pytest.raises(AssertionError, match=r"still answered after 0.05 s: {'hub': 1}"):
            server.settle(timeout=0.05)
    finally:
        with server.lock:
            server.active["hub"] -= 1


def test_coalescing_never_reads_a_packed_weight(server: HubServer,
                                                twins: dict[str, Path]) -> None:
    """At --level scales no byte of a packed weight is asked for: each range read is a
    header or lies within the scale tensors."""
    from mxformats.tensorfile import read_header

    folder = twins["mxfp4"]
    server.realistic(throttle_every=0, delay=0.0)
    report = run(serve(server, "coalesce", folder), Level.SCALES)
    assert exit_code(report) == 0, [f.to_json() for f in report.findings]
    weights = []
    for shard in folder.glob("*.safetensors"):
        header, offset = read_header(shard)
        weights += [(shard.name, offset + e["data_offsets"][0], offset + e["data_offsets"][1])
                    for t, e in header.items() if t.endswith(".weight") and e["dtype"] == "U8"]
    assert weights
    asked = [(p.rsplit("/", 1)[1], *map(int, r[len("bytes="):].split("-")))
             for _m, p, r in server.cdn_log if r is not None]
    assert asked
    for name, first, last in asked:
        assert not [w for w in weights if w[0] == name and first < w[2] and w[1] <= last]


def test_coalesce_only_ranges_that_touch() -> None:
    """Ranges of one file that touch are one read; a 1-byte gap, another file or a span past
    the cap are not."""
    from mxformats.validate.readers.hub import _GROUP_BYTES, _coalesce

    got = list(_coalesce([("a", 0, 8), ("a", 8, 20), ("a", 21, 30), ("b", 30, 40),
                          ("b", 40, _GROUP_BYTES), ("b", _GROUP_BYTES, _GROUP_BYTES + 31)]))
    assert got == [[("a", 0, 8), ("a", 8, 20)], [("a", 21, 30)],
                   [("b", 30, 40), ("b", 40, _GROUP_BYTES)],
                   [("b", _GROUP_BYTES, _GROUP_BYTES + 31)]]


@pytest.mark.parametrize(("quiet", "remote", "shown"),
                         [(False, True, True), (False, False, False), (True, True, False)])
def test_progress_shows_requests_in_flight(quiet: bool, remote: bool, shown: bool,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The progress bar of an hf:// run shows the requests in flight beside bytes and ETA;
    a local run has no such column, and -q shows nothing at all."""
    import io

    from mxformats.validate.commands import _Progress

    err = io.StringIO()
    monkeypatch.setattr(err, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys, "stderr", err)
    progress = _Progress.start(quiet, remote=remote)
    progress.plan(1 << 20)
    progress.advance(1 << 19)
    progress.stop()
    text = err.getvalue()
    assert ("requests in flight" in text) is shown
    assert ("0.5/1.0 MB" in text) is not quiet and (text == "") is quiet


def test_reader_threads_end_with_the_reader(server: HubServer, twins: dict[str, Path]) -> None:
    """A Hub reader's pool threads end once the reader is gone: a process that validates
    repo after repo does not keep every earlier run's connections' threads."""
    import gc
    import threading
    import time

    before = set(threading.enumerate())
    reader = _reader(serve(server, "threads", twins["mxfp4"]), connections=4)
    got = list(reader.read_ranges([(SHARD, b, b + 8) for b in range(0, 1600, 16)]))
    assert all(isinstance(g, bytes) for g in got)
    mine = [t for t in set(threading.enumerate()) - before
            if t.name.startswith("mxformats-hub")]
    assert mine
    del reader, got
    gc.collect()
    deadline = time.monotonic() + 10
    while any(t.is_alive() for t in mine) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [t for t in mine if t.is_alive()]


def test_a_worker_reads_its_spans_not_the_headers(server: HubServer, twins: dict[str, Path],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A task's worker opens the pinned repo itself and reads only the spans its inventory
    names: no shard header is fetched or parsed again, and the report is the one of the
    tasks run in the driver's process, byte for byte but the timings."""
    from test_validate_tasks import FreshWorkers, _json, _without_timings

    from mxformats.validate import tasks

    monkeypatch.setattr(tasks, "TASK_BYTES", 1 << 16)
    target = serve(server, "spans", twins["mxfp4"])
    here = run(target, Level.FULL)
    worker = FreshWorkers(monkeypatch)
    there = validate(target, Options(level=Level.FULL, workers=1), executor=worker)
    assert worker.ran == len(there.tasks) > 1 and worker.headers == []
    assert _without_timings(_json(there)) == _without_timings(_json(here))
    assert exit_code(here) == 0 and "numbers" in here.modules_run
