"""``--manifest FILE``: sha256 per shard, written on the first run and verified on later ones.

Bit rot is invisible to format checks (every FP4 and INT4 code is legal); a manifest catches
it. Sizes and digests come from the checkpoint's reader: a local file is hashed; on
``hf://`` an LFS file's sha256 is the one the Hub lists (nothing is downloaded), and only the
small non-LFS files (config, index) are read and hashed. The file is JSON:
``{"schema": "mxformats-manifest/1", "files": {name: {"size": int, "sha256": hex}}}`` with
names relative to the checkpoint folder (the index's shards, plus ``config.json`` and the
index).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mxformats.tensorfile import read_json

from .checkmodule import CheckModule
from .findings import Finding, Level, Severity, declare, listed
from .readers import LocalReader, Reader, ReadFailed

if TYPE_CHECKING:
    from .model import Checkpoint, Options

__all__ = ["SCHEMA", "compute", "read_manifest", "run", "write_manifest"]

SCHEMA = "mxformats-manifest/1"

MANIFEST_WRITTEN = declare(
    "MANIFEST_WRITTEN", severity=Severity.INFO, level=Level.STRUCTURE, group="manifest",
    meaning="No manifest existed: one was written with the sha256 of every shard.",
    fix="Keep the file; later runs with the same --manifest verify against it.",
    conditions=("no file at the --manifest path",))
MANIFEST_MISMATCH = declare(
    "MANIFEST_MISMATCH", severity=Severity.ERROR, level=Level.STRUCTURE, group="manifest",
    meaning="A shard's size or sha256 differs from the manifest: the file changed (bit rot, "
            "partial copy, re-export).",
    fix="Re-download or re-copy the shard named.",
    conditions=("a shard's size differs", "a shard's sha256 differs",
                "config.json's sha256 differs"))
MANIFEST_MISSING_FILE = declare(
    "MANIFEST_MISSING_FILE", severity=Severity.ERROR, level=Level.STRUCTURE, group="manifest",
    meaning="A file the manifest lists is missing from the checkpoint.",
    fix="Restore the file, or write a new manifest if the checkpoint changed on purpose.",
    conditions=("a listed shard absent", "a listed name outside the folder"))
MANIFEST_NEW_FILE = declare(
    "MANIFEST_NEW_FILE", severity=Severity.WARNING, level=Level.STRUCTURE, group="manifest",
    meaning="A checkpoint file is not in the manifest.",
    fix="Write a new manifest if the checkpoint changed on purpose.",
    conditions=("a shard not listed", "config.json not listed"))
MANIFEST_UNREADABLE = declare(
    "MANIFEST_UNREADABLE", severity=Severity.ERROR, level=Level.STRUCTURE, group="manifest",
    meaning="The manifest file exists but is not a manifest (or could not be written).",
    fix="Fix or delete the manifest file.",
    conditions=("not JSON", "another schema", "an entry without a sha256",
                "an entry whose size is not an integer", "could not be written"))


def _reader(ckpt: Checkpoint) -> Reader:
    return ckpt.reader or LocalReader(ckpt.root, ckpt.allowed_roots)


def _is_file(reader: Reader, name: str) -> bool:
    """Whether ``name`` is a regular file of the checkpoint (missing or a FIFO: no)."""
    try:
        return reader.not_regular(name) is None
    except OSError:
        return False


def _files(ckpt: Checkpoint) -> list[str]:
    reader = _reader(ckpt)
    names = [*dict.fromkeys(ckpt.shards), "config.json", "model.safetensors.index.json"]
    return sorted(n for n in dict.fromkeys(names) if _is_file(reader, n))


def compute(ckpt: Checkpoint) -> dict[str, dict[str, Any]]:
    """``{name: {"size", "sha256"}}`` for the checkpoint's files that exist."""
    reader = _reader(ckpt)
    return {name: {"size": reader.size(name), "sha256": reader.sha256(name)}
            for name in _files(ckpt)}


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
        try:
            files = compute(ckpt)
        except ReadFailed as exc:
            yield Finding(MANIFEST_UNREADABLE, f"{path}: not written: {exc}", exc.file)
            return
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
    yield from listed(_differences(ckpt, expected))


def _differences(ckpt: Checkpoint, expected: dict[str, dict[str, Any]]) -> Iterator[Finding]:
    """MANIFEST_MISSING_FILE, MANIFEST_MISMATCH and MANIFEST_NEW_FILE per file, in name
    order (a manifest of another revision differs in every shard: :func:`run` lists the
    first few of each check and counts the rest)."""
    reader = _reader(ckpt)
    present = set(_files(ckpt))
    for name in sorted(expected):
        want = expected[name]
        if "/" in name or name.startswith("..") or not _is_file(reader, name):
            yield Finding(MANIFEST_MISSING_FILE, f"{name}: listed in the manifest, not found",
                          name)
            continue
        size = reader.size(name)
        if size != want["size"]:
            yield Finding(MANIFEST_MISMATCH, f"{name}: size {size}, manifest says "
                          f"{want['size']}", name)
            continue
        try:
            digest = reader.sha256(name)
        except ReadFailed as exc:
            ckpt.read_failures.append(exc)
            continue
        if digest != want["sha256"]:
            yield Finding(MANIFEST_MISMATCH, f"{name}: sha256 {digest[:16]}…, manifest says "
                          f"{want['sha256'][:16]}…", name)
    for name in sorted(present - set(expected)):
        yield Finding(MANIFEST_NEW_FILE, f"{name}: not in the manifest", name)


def applies(ckpt: Checkpoint, opts: Options) -> bool:
    """Whether the manifest checks run: ``--manifest`` is given."""
    return opts.manifest is not None


#: The manifest checks as the runner runs them.
CHECK = CheckModule("manifest", run, applies)
