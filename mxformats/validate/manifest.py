"""``--manifest FILE``: sha256 per shard, written on the first run and verified on later ones.

Bit rot is invisible to format checks (every FP4 and INT4 code is legal); a manifest catches
it. The file is JSON: ``{"schema": "mxformats-manifest/1", "files": {name: {"size": int,
"sha256": hex}}}`` with names relative to the checkpoint folder (the index's shards, plus
``config.json`` and the index).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mxformats.tensorfile import open_regular, read_json

from .findings import Finding, Level, Severity, declare

if TYPE_CHECKING:
    from .model import Checkpoint, Options

__all__ = ["SCHEMA", "read_manifest", "run", "sha256_file", "write_manifest"]

SCHEMA = "mxformats-manifest/1"
_G = "manifest"
_L = Level.STRUCTURE
_CHUNK = 8 << 20

MANIFEST_WRITTEN = declare(
    "MANIFEST_WRITTEN", Severity.INFO, _L, _G,
    "No manifest existed: one was written with the sha256 of every shard.",
    "Keep the file; later runs with the same --manifest verify against it.")
MANIFEST_MISMATCH = declare(
    "MANIFEST_MISMATCH", Severity.ERROR, _L, _G,
    "A shard's size or sha256 differs from the manifest: the file changed (bit rot, partial "
    "copy, re-export).",
    "Re-download or re-copy the shard named.")
MANIFEST_MISSING_FILE = declare(
    "MANIFEST_MISSING_FILE", Severity.ERROR, _L, _G,
    "A file the manifest lists is missing from the checkpoint.",
    "Restore the file, or write a new manifest if the checkpoint changed on purpose.")
MANIFEST_NEW_FILE = declare(
    "MANIFEST_NEW_FILE", Severity.WARNING, _L, _G,
    "A checkpoint file is not in the manifest.",
    "Write a new manifest if the checkpoint changed on purpose.")
MANIFEST_UNREADABLE = declare(
    "MANIFEST_UNREADABLE", Severity.ERROR, _L, _G,
    "The manifest file exists but is not a manifest (or could not be written).",
    "Fix or delete the manifest file.")


def sha256_file(path: Path) -> str:
    """Hex sha256 of a regular file, read in 8 MiB chunks (a FIFO or device raises
    :class:`~mxformats.tensorfile.NotRegularFileError`, an ``OSError``, and is never read)."""
    h = hashlib.sha256()
    with open_regular(path) as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _files(ckpt: Checkpoint) -> list[str]:
    names = list(dict.fromkeys(ckpt.shards))
    for extra in ("config.json", "model.safetensors.index.json"):
        if (ckpt.root / extra).is_file():
            names.append(extra)
    return sorted(n for n in names if n not in ckpt.unreadable or (ckpt.root / n).is_file())


def compute(ckpt: Checkpoint) -> dict[str, dict[str, Any]]:
    """``{name: {"size", "sha256"}}`` for the checkpoint's files that exist."""
    out: dict[str, dict[str, Any]] = {}
    for name in _files(ckpt):
        path = ckpt.path(name)
        if path.is_file():
            out[name] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    return out


def write_manifest(path: Path, files: dict[str, dict[str, Any]]) -> None:
    path.write_text(json.dumps({"schema": SCHEMA, "files": files}, indent=2, sort_keys=True)
                    + "\n", encoding="utf-8")


def read_manifest(path: Path) -> dict[str, dict[str, Any]]:
    """The ``files`` table; ValueError when the file is not a manifest."""
    try:
        data = read_json(path)
    except (OSError, ValueError, RecursionError) as exc:
        raise ValueError(f"not readable as JSON ({exc})") from None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(files, dict):
        raise ValueError(f"not a {SCHEMA} manifest")
    for name, entry in files.items():
        if not (isinstance(name, str) and isinstance(entry, dict)
                and isinstance(entry.get("sha256"), str) and isinstance(entry.get("size"), int)):
            raise ValueError(f"bad entry {name!r}")
    return files


def run(ckpt: Checkpoint, opts: Options) -> Iterator[Finding]:
    """Write the manifest if ``opts.manifest`` does not exist, otherwise verify against it."""
    if opts.manifest is None:
        return
    path = Path(opts.manifest)
    if not path.exists():
        files = compute(ckpt)
        try:
            write_manifest(path, files)
        except OSError as exc:
            yield Finding(MANIFEST_UNREADABLE, f"{path}: could not write ({exc.strerror})")
            return
        yield Finding(MANIFEST_WRITTEN, f"wrote {path} ({len(files)} files)")
        return
    try:
        expected = read_manifest(path)
    except ValueError as exc:
        yield Finding(MANIFEST_UNREADABLE, f"{path}: {exc}")
        return
    present = set(_files(ckpt))
    for name in sorted(expected):
        want = expected[name]
        file = ckpt.path(name)
        if "/" in name or name.startswith("..") or not file.is_file():
            yield Finding(MANIFEST_MISSING_FILE, f"{name}: listed in the manifest, not found",
                          name)
            continue
        size = file.stat().st_size
        if size != want["size"]:
            yield Finding(MANIFEST_MISMATCH, f"{name}: size {size}, manifest says "
                          f"{want['size']}", name)
            continue
        digest = sha256_file(file)
        if digest != want["sha256"]:
            yield Finding(MANIFEST_MISMATCH, f"{name}: sha256 {digest[:16]}…, manifest says "
                          f"{want['sha256'][:16]}…", name)
    for name in sorted(present - set(expected)):
        yield Finding(MANIFEST_NEW_FILE, f"{name}: not in the manifest", name)
