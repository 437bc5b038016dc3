"""The firing matrix's cases (``tests/test_check_firing.py``) for the checks of the shard
files: their kinds, links, headers and tensor spans (mxformats/validate/loader.py, the rules
of mxformats/tensorfile.py): how each declared condition is planted, and the (check,
condition, format) no fixture can carry. Each plant edits the folder (the first shard, its
header, the index or config.json); the finding is on a file, not a tensor."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from firing_mutation import Mutation
from test_validate_corpus import header_bytes, hole, overlap, truncate
from validate_corpus import (
    INDEX,
    by_offset,
    directory_shard,
    fifo,
    index,
    link_escape,
    raw_header,
    shards,
    socket_shard,
    write_index,
    write_raw,
)

from mxformats.tensorfile import MAX_HEADER_SIZE

Header = dict[str, Any]


def _plant(edit: Callable[[Path], None]) -> Mutation:
    return Mutation(None, edit=edit, anywhere=True)


def _length(value: Callable[[int], int]) -> Callable[[Path], None]:
    """The first shard's 8-byte header length set to ``value(file size)``."""
    def run(p: Path) -> None:
        shard = p / shards(p)[0]
        raw = bytearray(shard.read_bytes())
        raw[:8] = struct.pack("<Q", value(len(raw)))
        shard.write_bytes(bytes(raw))
    return run


def _short(p: Path) -> None:
    (p / shards(p)[0]).write_bytes(b"\x08\x00\x00\x00")


def _header(edit: Callable[[Header, str], None]) -> Callable[[Path], None]:
    """The first shard's header after ``edit(header, its first tensor by offset)``, the data
    kept."""
    def run(p: Path) -> None:
        shard = p / shards(p)[0]
        header, data = raw_header(shard)
        edit(header, by_offset(header)[0])
        write_raw(shard, header, data)
    return run


def _repeated_key(p: Path) -> None:
    """The first tensor's entry written twice under its name."""
    shard = p / shards(p)[0]
    header, _ = raw_header(shard)
    first = by_offset(header)[0]
    entry = json.dumps(header[first])
    text = json.dumps(header).replace(f'"{first}": {entry}', f'"{first}": {entry}, '
                                      f'"{first}": {entry}', 1)
    header_bytes(text.encode())(p)


def _set(key: str, value: Any) -> Callable[[Header, str], None]:
    def edit(header: Header, first: str) -> None:
        header[first][key] = value
    return edit


def _entry(value: Any) -> Callable[[Header, str], None]:
    def edit(header: Header, first: str) -> None:
        header[first] = value
    return edit


def _drop_dtype(header: Header, first: str) -> None:
    del header[first]["dtype"]


def _metadata(header: Header, first: str) -> None:
    header["__metadata__"] = {"format": 1}


def _past_data(header: Header, first: str) -> None:
    last = by_offset(header)[-1]
    begin, end = header[last]["data_offsets"]
    header[last]["data_offsets"] = [begin, end + (1 << 20)]


def _misfit(header: Header, first: str) -> None:
    """Twice the elements in the first tensor's shape, its span kept."""
    header[first]["shape"] = [*header[first]["shape"], 2]


def _trailing(p: Path) -> None:
    shard = p / shards(p)[0]
    shard.write_bytes(shard.read_bytes() + bytes(8))


def _entries(edit: Callable[[str], str]) -> Callable[[Path], None]:
    """Every index entry of the first shard rewritten by ``edit``."""
    def run(p: Path) -> None:
        data = index(p)
        first = shards(p)[0]
        data["weight_map"] = {t: edit(s) if s == first else s
                              for t, s in data["weight_map"].items()}
        write_index(p, data)
    return run


def _linked_outside(name: str) -> Callable[[Path], None]:
    """Move ``name`` (config.json, the index) outside the folder and link to it."""
    def run(p: Path) -> None:
        outside = p.parent / f"{p.name}-outside"
        outside.mkdir()
        os.replace(p / name, outside / name)
        (p / name).symlink_to(outside / name)
    return run


#: (check, condition) -> how it is planted.
MUTATIONS: dict[tuple[str, str], Mutation] = {
    ("HEADER_LENGTH", "a file shorter than 8 bytes"): _plant(_short),
    ("HEADER_LENGTH", "a length above the limit"): _plant(_length(
        lambda size: MAX_HEADER_SIZE + 1)),
    ("HEADER_LENGTH", "a length past the end of the file"): _plant(_length(lambda size: size)),
    ("HEADER_INVALID", "not UTF-8"): _plant(header_bytes(b'{"\xff": 1}')),
    ("HEADER_INVALID", "not JSON"): _plant(header_bytes(b'{"a": ')),
    ("HEADER_INVALID", "nested too deeply"): _plant(header_bytes(b"[" * 100_000 + b"]" * 100_000)),
    ("HEADER_INVALID", "an integer too long to read"): _plant(
        header_bytes(b'{"a": ' + b"9" * 5000 + b"}")),
    ("HEADER_INVALID", "not an object"): _plant(header_bytes(b"[]")),
    ("HEADER_INVALID", "a repeated key"): _plant(_repeated_key),
    ("HEADER_INVALID", "__metadata__ not an object of strings"): _plant(_header(_metadata)),
    ("HEADER_INVALID", "an entry not an object"): _plant(_header(_entry([1]))),
    ("HEADER_INVALID", "an entry lacking dtype"): _plant(_header(_drop_dtype)),
    ("HEADER_INVALID", "an unknown dtype"): _plant(_header(_set("dtype", "F12"))),
    ("HEADER_INVALID", "a negative dimension"): _plant(_header(_set("shape", [-1]))),
    ("HEADER_INVALID", "data_offsets not two integers"): _plant(
        _header(_set("data_offsets", [0]))),
    ("HEADER_INVALID", "a shape of no whole number of bytes"): _plant(
        _header(lambda h, first: h[first].update(dtype="F4", shape=[1]))),
    ("TENSOR_SPAN", "offsets past the data section"): _plant(_header(_past_data)),
    ("TENSOR_SPAN", "a span not shape x dtype"): _plant(_header(_misfit)),
    ("TENSOR_SPAN", "overlapping tensors"): _plant(overlap),
    ("TENSOR_SPAN", "a hole between tensors"): _plant(hole),
    ("TENSOR_SPAN", "bytes after the last tensor"): _plant(_trailing),
    ("TENSOR_SPAN", "the file truncated"): _plant(truncate),
    ("FILE_NOT_REGULAR", "config.json a FIFO"): _plant(fifo("config.json")),
    ("FILE_NOT_REGULAR", "the index a FIFO"): _plant(fifo(INDEX)),
    ("FILE_NOT_REGULAR", "a shard a FIFO"): _plant(fifo("shard")),
    ("FILE_NOT_REGULAR", "a shard a socket"): _plant(socket_shard),
    ("FILE_NOT_REGULAR", "a shard a directory"): _plant(directory_shard),
    ("SYMLINK_ESCAPE", "a shard linked outside"): _plant(link_escape),
    ("SYMLINK_ESCAPE", "config.json linked outside"): _plant(_linked_outside("config.json")),
    ("SYMLINK_ESCAPE", "the index linked outside"): _plant(_linked_outside(INDEX)),
    ("INDEX_PATH_NOT_PLAIN", "an entry ./NAME"): _plant(_entries(lambda s: f"./{s}")),
    ("INDEX_UNSAFE_PATH", "an absolute path"): _plant(_entries(lambda s: f"/tmp/{s}")),
    ("INDEX_UNSAFE_PATH", "a path through '..'"): _plant(_entries(lambda s: f"../{s}")),
}

_NO_INDEX = "the compressed-tensors-mixed fixture is one model.safetensors with no index"

#: (check, condition, format) no fixture can carry -> the reason.
NOT_PLANTED: dict[tuple[str, str, str], str] = {
    (cid, condition, "compressed-tensors-mixed"): _NO_INDEX
    for cid, condition in (("FILE_NOT_REGULAR", "the index a FIFO"),
                           ("SYMLINK_ESCAPE", "the index linked outside"),
                           ("INDEX_PATH_NOT_PLAIN", "an entry ./NAME"),
                           ("INDEX_UNSAFE_PATH", "an absolute path"),
                           ("INDEX_UNSAFE_PATH", "a path through '..'"))}
