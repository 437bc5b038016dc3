"""Helpers of the validator's corruption corpus (tests/test_validate_corpus.py).

A :class:`Case` is a declarative record: the clean twin it starts from (one generated checkpoint
per base, see :data:`BASES`), the corruption applied to a copy, the level and options it runs
at, its expected exit code and the exact set of findings ``(check ID, severity, tensor)`` that
differ from the clean twin's. The injectors follow checkpoints.md §7.3; each edits files on
disk only (shards through :mod:`mxformats.tensorfile`, headers byte by byte).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mxformats.tensorfile import read_header, read_safetensors, write_safetensors
from mxformats.validate.findings import Level

INDEX = "model.safetensors.index.json"
EXPERT = "model.layers.1.mlp.experts.1.gate_proj"
Tensors = dict[str, dict[str, Any]]
Finding = tuple[str, str, "str | None"]

#: base name -> (make_kimi_checkpoint fmt, keyword arguments)
BASES: dict[str, tuple[str, dict[str, Any]]] = {
    "mxfp4": ("quark-mxfp4", {}),
    "w4a8": ("quark-w4a8", {}),
    "ct": ("compressed-tensors-int4", {}),
    "bf16": ("bf16", {}),
    "mxfp4-mm": ("quark-mxfp4", {"multimodal": True}),
    "ct-mm": ("compressed-tensors-int4", {"multimodal": True}),
}


@dataclass(frozen=True)
class Case:
    """One corpus entry. ``findings`` holds the tuples present after the corruption and not in
    the clean twin; ``removed`` those of the twin that disappear (rare, declared)."""

    name: str
    base: str
    corrupt: Callable[[Path], None]
    exit: int
    findings: frozenset[Finding]
    level: Level = Level.STRUCTURE
    source: bool | str = False  # run with --source on the twin's BF16 source (a base name:
    # on that base's BF16 source instead; its clean twin still runs on its own)
    removed: frozenset[Finding] = frozenset()
    xfail: str | None = None


def case(name: str, base: str, corrupt: Callable[[Path], None], exit: int,
         findings: set[Finding], **kw: Any) -> Case:
    return Case(name, base, corrupt, exit, frozenset(findings), **kw)


# -- file helpers --------------------------------------------------------------------------------


def index(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((path / INDEX).read_text())
    return data


def write_index(path: Path, data: dict[str, Any]) -> None:
    (path / INDEX).write_text(json.dumps(data, indent=2))


def shards(path: Path) -> list[str]:
    return sorted(set(index(path)["weight_map"].values()))


def _sizes(path: Path, names: list[str]) -> tuple[int, int]:
    tensor = file = 0
    for s in names:
        header, _ = read_header(path / s)
        tensor += sum(e["data_offsets"][1] - e["data_offsets"][0]
                      for k, e in header.items() if k != "__metadata__")
        file += (path / s).stat().st_size
    return tensor, file


def edit(path: Path, fn: Callable[[Tensors], None], *, reindex: bool = True) -> None:
    """Rewrite the shards after ``fn({shard: {name: array}})``; the index follows the shards
    (keeping its total_size convention) unless ``reindex`` is false."""
    idx = index(path)
    names = shards(path)
    tensor_before, _ = _sizes(path, names)
    quark_convention = idx["metadata"]["total_size"] != tensor_before
    data = {s: read_safetensors(path / s) for s in names}
    fn(data)
    for s, tensors in data.items():
        write_safetensors(path / s, tensors)
    if reindex:
        idx["weight_map"] = dict(sorted((t, s) for s, ts in data.items() for t in ts))
    tensor, file = _sizes(path, names)
    idx["metadata"]["total_size"] = file if quark_convention else tensor
    write_index(path, idx)


def find(data: Tensors, name: str) -> str:
    return next(s for s, tensors in data.items() if name in tensors)


def set_tensor(name: str, fn: Callable[[Any], Any]) -> Callable[[Path], None]:
    """An injector replacing tensor ``name`` by ``fn(array)``."""
    def run(path: Path) -> None:
        def inner(data: Tensors) -> None:
            s = find(data, name)
            data[s][name] = fn(data[s][name].copy())
        edit(path, inner)
    return run


def config(fn: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def run(path: Path) -> None:
        cfg = json.loads((path / "config.json").read_text())
        fn(cfg)
        (path / "config.json").write_text(json.dumps(cfg, indent=2))
    return run


def raw_header(shard: Path) -> tuple[dict[str, Any], bytes]:
    raw = shard.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_raw(shard: Path, header: dict[str, Any], data: bytes) -> None:
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    shard.write_bytes(struct.pack("<Q", len(text)) + text + data)


def by_offset(header: dict[str, Any]) -> list[str]:
    return sorted((k for k in header if k != "__metadata__"),
                  key=lambda k: header[k]["data_offsets"][0])


def nibble_swap(a: Any) -> Any:
    return ((a >> 4) | (a << 4)).astype(np.uint8)


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def link_escape(path: Path) -> None:
    """Move the last shard outside the folder and link to it."""
    name = shards(path)[-1]
    outside = path.parent / f"{path.name}-outside"
    outside.mkdir()
    os.replace(path / name, outside / name)
    (path / name).symlink_to(outside / name)


# -- issue 12 (files, output): non-regular files, lenient index and header forms ----------------


def fifo(name: str) -> Callable[[Path], None]:
    """Replace ``name`` (config.json, the index, a shard) by a FIFO with no writer."""
    def run(path: Path) -> None:
        target = path / (shards(path)[0] if name == "shard" else name)
        target.unlink()
        os.mkfifo(target)
    return run


def socket_shard(path: Path) -> None:
    """Replace the last shard by a Unix socket (bound through a relative name: socket paths
    are limited to about 100 bytes)."""
    import socket

    name = shards(path)[-1]
    (path / name).unlink()
    cwd = os.getcwd()
    os.chdir(path)
    try:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(name)
        sock.close()
    finally:
        os.chdir(cwd)


def directory_shard(path: Path) -> None:
    name = shards(path)[0]
    (path / name).unlink()
    (path / name).mkdir()


def index_metadata(fn: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def run(path: Path) -> None:
        data = index(path)
        fn(data)
        write_index(path, data)
    return run


def dot_slash_entries(path: Path) -> None:
    data = index(path)
    data["weight_map"] = {t: f"./{s}" for t, s in data["weight_map"].items()}
    write_index(path, data)


def extra_entry_key(path: Path) -> None:
    """Give one header entry a key safetensors 0.8 ignores (serde does not deny unknown
    fields); the byte layout stays the same length-padded form."""
    shard = path / shards(path)[0]
    header, data = raw_header(shard)
    first = by_offset(header)[0]
    header[first]["producer_note"] = {"any": ["value", 1]}
    write_raw(shard, header, data)


def add_raw_tensor(name: str, dtype: str, shape: list[int], nbytes: int) -> Callable[[Path], None]:
    """Append a tensor of any dtype safetensors knows (``F4``, ``F6_E2M3``, ...: numpy has no
    type for them) to the last shard, by header, and map it in the index (total_size kept in
    its convention)."""
    def run(path: Path) -> None:
        idx = index(path)
        names = shards(path)
        file_convention = idx["metadata"]["total_size"] != _sizes(path, names)[0]
        shard = path / names[-1]
        header, data = raw_header(shard)
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + nbytes]}
        write_raw(shard, header, data + bytes(range(nbytes)))
        idx["weight_map"][name] = names[-1]
        tensor, file = _sizes(path, names)
        idx["metadata"]["total_size"] = file if file_convention else tensor
        write_index(path, idx)
    return run
