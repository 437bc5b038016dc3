"""The firing matrix's cases (``tests/test_check_firing.py``) for the manifest checks
(``--manifest FILE``, mxformats/validate/manifest.py): each condition is the manifest file the
planted run is given, written from the checkpoint's own files and then changed (the
checkpoint itself is the clean fixture's copy)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from firing_mutation import Mutation

from mxformats.validate import manifest
from mxformats.validate.files import load
from mxformats.validate.findings import Level
from mxformats.validate.model import Options

Files = dict[str, dict[str, Any]]


def _files(checkpoint: Path) -> Files:
    """The manifest's ``files`` table of ``checkpoint`` as the validator computes it."""
    loaded = load(checkpoint, Options())
    assert loaded.ckpt is not None, loaded.fatal
    return manifest.compute(loaded.ckpt)


def _shard(files: Files) -> str:
    return next(name for name in sorted(files) if name.endswith(".safetensors"))


def _written(change: Callable[[Files], None]) -> Callable[[Path, Path, Level], None]:
    """A manifest of the checkpoint's files after ``change`` of its table."""
    def write(checkpoint: Path, path: Path, level: Level) -> None:
        files = _files(checkpoint)
        change(files)
        manifest.write_manifest(path, files)
    return write


def _text(text: str) -> Callable[[Path, Path, Level], None]:
    """A manifest file holding ``text``."""
    def write(checkpoint: Path, path: Path, level: Level) -> None:
        path.write_text(text, encoding="utf-8")
    return write


def _entry(field: str, value: Any) -> Callable[[Files], None]:
    """The first shard's entry with ``field`` set to ``value`` (None: dropped)."""
    def change(files: Files) -> None:
        entry = files[_shard(files)]
        if value is None:
            del entry[field]
        else:
            entry[field] = value
    return change


def _config_sha(files: Files) -> None:
    files["config.json"]["sha256"] = "0" * 64


def _absent_shard(files: Files) -> None:
    files["model-99999-of-99999.safetensors"] = {"size": 1, "sha256": "0" * 64}


def _outside(files: Files) -> None:
    files["../model.safetensors"] = {"size": 1, "sha256": "0" * 64}


def _unlisted_shard(files: Files) -> None:
    del files[_shard(files)]


def _unlisted_config(files: Files) -> None:
    del files["config.json"]


def _case(file_edit: Callable[[Path, Path, Level], None] | None, name: str = "manifest.json"
          ) -> Mutation:
    return Mutation(None, anywhere=True, file_option=("manifest", name), file_edit=file_edit)


#: (check, condition) -> how it is planted.
MUTATIONS: dict[tuple[str, str], Mutation] = {
    ("MANIFEST_WRITTEN", "no file at the --manifest path"): _case(None),
    ("MANIFEST_MISMATCH", "a shard's size differs"): _case(_written(_entry("size", 1))),
    ("MANIFEST_MISMATCH", "a shard's sha256 differs"): _case(
        _written(_entry("sha256", "0" * 64))),
    ("MANIFEST_MISMATCH", "config.json's sha256 differs"): _case(_written(_config_sha)),
    ("MANIFEST_MISSING_FILE", "a listed shard absent"): _case(_written(_absent_shard)),
    ("MANIFEST_MISSING_FILE", "a listed name outside the folder"): _case(_written(_outside)),
    ("MANIFEST_NEW_FILE", "a shard not listed"): _case(_written(_unlisted_shard)),
    ("MANIFEST_NEW_FILE", "config.json not listed"): _case(_written(_unlisted_config)),
    ("MANIFEST_UNREADABLE", "not JSON"): _case(_text("{not json")),
    ("MANIFEST_UNREADABLE", "another schema"): _case(
        _text(json.dumps({"schema": "mxformats-manifest/0", "files": {}}))),
    ("MANIFEST_UNREADABLE", "an entry without a sha256"): _case(
        _written(_entry("sha256", None))),
    ("MANIFEST_UNREADABLE", "an entry whose size is not an integer"): _case(
        _written(_entry("size", "1"))),
    ("MANIFEST_UNREADABLE", "could not be written"): _case(None, "absent/manifest.json"),
}
