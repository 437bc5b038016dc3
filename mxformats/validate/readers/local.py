"""A checkpoint folder on this machine, read through the :class:`~.interface.Reader`
interface: :class:`LocalReader`.

Files are opened only when they are regular files (a FIFO never blocks), and a symlink is
followed only when it resolves under the folder, its Hugging Face cache repo or an ``allow``
root.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mxformats.tensorfile import (
    MAX_JSON_SIZE,
    HeaderTable,
    TensorFileError,
    not_regular,
    open_regular,
    read_header_table,
    read_json,
)

from .interface import Reader

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["LocalReader"]

_CHUNK = 8 << 20


def _allowed_roots(root: Path, extra: tuple[Path, ...]) -> tuple[Path, ...]:
    roots = [root]
    parts = root.parts
    # Hugging Face cache: <cache>/models--org--name/snapshots/<rev>/ -> blobs/ in the same repo.
    if (
        len(parts) >= 3
        and parts[-2] == "snapshots"
        and parts[-3].startswith(("models--", "datasets--"))
    ):
        roots.append(root.parent.parent)
    roots += [Path(p).resolve() for p in extra]
    return tuple(roots)


class LocalReader(Reader):
    """A checkpoint folder. Files are opened only when they are regular files
    (:func:`~mxformats.tensorfile.open_regular`: a FIFO never blocks), and a symlink is
    followed only when it resolves under the folder, its Hugging Face cache repo or an
    ``allow`` root."""

    def __init__(self, root: Path, allow: tuple[Path, ...] = ()) -> None:
        self.root = root.resolve()
        self.name = str(self.root)
        self.roots = _allowed_roots(self.root, allow)

    def path(self, name: str) -> Path:
        return self.root / name

    def escapes(self, name: str) -> bool:
        real = self.path(name).resolve()
        return not any(real == r or real.is_relative_to(r) for r in self.roots)

    def resolved(self, name: str) -> str:
        return str(self.path(name).resolve())

    def not_regular(self, name: str) -> str | None:
        return not_regular(self.path(name))

    def files(self) -> list[str]:
        # os.walk does not follow symlinked folders
        return sorted(
            Path(dirpath, f).relative_to(self.root).as_posix()
            for dirpath, _dirs, names in os.walk(self.root)
            for f in names
        )

    def size(self, name: str) -> int:
        return self.path(name).stat().st_size

    def read_range(self, name: str, begin: int, end: int) -> bytes:
        with open_regular(self.path(name)) as f:  # a FIFO swapped in cannot block
            f.seek(begin)
            raw = f.read(end - begin)
        _check_length(name, begin, end, len(raw))
        return raw

    def read_array(self, name: str, begin: int, end: int) -> NDArray[np.uint8]:
        out = np.empty(end - begin, dtype=np.uint8)  # read into: one copy from the page cache
        with open_regular(self.path(name)) as f:
            f.seek(begin)
            got = f.readinto(out.data)
        _check_length(name, begin, end, got)
        return out

    def sha256(self, name: str) -> str:
        h = hashlib.sha256()
        with open_regular(self.path(name)) as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
        return h.hexdigest()

    def header_table(self, name: str) -> HeaderTable:
        return read_header_table(self.path(name))  # one open for the length and the header

    def header_tables(self, names: Sequence[str]) -> Iterator[HeaderTable | Exception]:
        for name in names:  # a local read has no round trip to overlap
            try:
                yield self.header_table(name)
            except (TensorFileError, OSError) as exc:
                yield exc

    def read_json(self, name: str, limit: int = MAX_JSON_SIZE) -> Any:
        return read_json(self.path(name), limit)


def _check_length(name: str, begin: int, end: int, got: int) -> None:
    """``OSError`` when a read of ``[begin, end)`` of ``name`` gave ``got`` bytes, not all."""
    if got != end - begin:
        raise OSError(f"{name} truncated at byte {begin + got}")
