"""The one interface every check reads a checkpoint through: a local folder or a Hub repo.

A :class:`Reader` answers four questions about the files of one checkpoint (the file list,
a file's size, a byte range of a file, and a file's sha256) plus the two derived ones the
loader needs (a safetensors header, a small JSON file). :class:`LocalReader` reads a folder;
``mxformats.validate.hub.HubReader`` reads a Hugging Face repository pinned to one
commit. Every check (the loader in :mod:`~mxformats.validate.files`,
:meth:`~mxformats.validate.model.Checkpoint.read`, the chunked scans of
``mxformats.validate.numbers``, ``mxformats.validate.manifest``) calls these methods
and nothing else, so no check has a second copy for ``hf://``.

The safetensors header is parsed by :func:`mxformats.tensorfile.parse_header` whatever the
reader: a reader fetches bytes, the strict parser judges them.

Names are the checkpoint-relative POSIX paths an index uses. :func:`unsafe_name` refuses an
absolute name or one with ``..`` before any reader sees it.
"""

from __future__ import annotations

import hashlib
import json
import os
from abc import ABC, abstractmethod
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import numpy as np

from mxformats.tensorfile import (
    MAX_JSON_SIZE,
    ErrorKind,
    HeaderTable,
    TensorFileError,
    header_length,
    not_regular,
    open_regular,
    parse_header_table,
    read_header_table,
    read_json,
    tensor_array,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "HUB_PREFIX",
    "RANGE_IGNORED",
    "READ_FAILED",
    "LocalReader",
    "NotAFolder",
    "ReadFailed",
    "Reader",
    "open_reader",
    "unsafe_name",
]

#: How a Hub checkpoint is named on the command line (``hf://ORG/NAME[@REVISION]``).
HUB_PREFIX = "hf://"

_CHUNK = 8 << 20

#: The check ids a :class:`ReadFailed` is reported as (declared in
#: :mod:`~mxformats.validate.files`): a server that ignored Range, any other failed read.
RANGE_IGNORED = "HUB_RANGE_IGNORED"
READ_FAILED = "HUB_READ_FAILED"


class ReadFailed(OSError):
    """A read the reader could not complete as asked (a remote read that failed midway, a
    server that ignored Range or sent the wrong number of bytes, an unreachable server).
    ``check`` is the id of the catalogued check it is reported as; ``file`` the
    checkpoint-relative name."""

    def __init__(self, check: str, file: str, reason: str, *, follow_on: bool = False) -> None:
        super().__init__(reason)
        self.check = check
        self.file = file
        self.reason = reason
        #: not attempted, as an earlier read found the server unreachable (same root cause)
        self.follow_on = follow_on

    def __str__(self) -> str:
        return self.reason


def unsafe_name(name: str) -> bool:
    """Whether an index entry must not be opened: empty, absolute, with ``..`` or a
    backslash (a name inside the checkpoint is none of these)."""
    pure = PurePosixPath(name)
    return not name or pure.is_absolute() or os.path.isabs(name) or ".." in pure.parts \
        or "\\" in name


class Reader(ABC):
    """The files of one checkpoint. ``name`` is how reports name it (a resolved folder, or
    ``hf://ORG/NAME@SHA``); ``remote`` says whether a read costs network bytes."""

    name: str
    remote: bool = False

    @abstractmethod
    def escapes(self, name: str) -> bool:
        """Whether ``name`` (already not :func:`unsafe_name`) resolves outside what may be
        read (a symlink out of the folder)."""

    def resolved(self, name: str) -> str:
        """Where ``name`` really is (a local symlink: its target), for messages."""
        return name

    @abstractmethod
    def not_regular(self, name: str) -> str | None:
        """None when ``name`` is a regular file, else what it is (``"a FIFO"``, ...). Raises
        ``FileNotFoundError`` when it does not exist."""

    @abstractmethod
    def files(self) -> list[str]:
        """Every file of the checkpoint (nested ones too), sorted."""

    @abstractmethod
    def size(self, name: str) -> int:
        """The size of file ``name`` in bytes (``FileNotFoundError`` when absent)."""

    @abstractmethod
    def read_range(self, name: str, begin: int, end: int) -> bytes:
        """Exactly the bytes ``[begin, end)`` of ``name``; raises ``OSError`` (or
        :class:`ReadFailed`) when fewer or more come back."""

    @abstractmethod
    def sha256(self, name: str) -> str:
        """The hex sha256 of file ``name`` (a Hub LFS file: the Hub's, nothing downloaded)."""

    def exists(self, name: str) -> bool:
        try:
            self.size(name)
        except OSError:
            return False
        return True

    def header(self, name: str) -> tuple[dict[str, Any], int]:
        """The validated safetensors header of ``name`` as
        :func:`mxformats.tensorfile.read_header` returns it (see :meth:`header_table`)."""
        return self.header_table(name).as_header()

    def header_table(self, name: str) -> HeaderTable:
        """The validated safetensors header of ``name`` as a
        :class:`~mxformats.tensorfile.HeaderTable` (the loader's form: columns, no dictionary
        per tensor), from two reads: the 8-byte length, then exactly the ``N`` header bytes it
        announces."""
        size = self.size(name)
        n = header_length(name, self.read_range(name, 0, min(8, size)), size)
        return parse_header_table(name, self.read_range(name, 8, 8 + n), size)

    def tensor(self, name: str, tensor: str) -> NDArray[Any]:
        """Tensor ``tensor`` of shard ``name`` (as :func:`mxformats.tensorfile.read_tensor`
        returns it): its header, then one read of exactly its span."""
        header, data_offset = self.header(name)
        if tensor == "__metadata__" or tensor not in header:
            raise TensorFileError(name, "no such tensor in the file",
                                  kind=ErrorKind.NO_SUCH_TENSOR, tensor=tensor)
        entry = header[tensor]
        begin, end = entry["data_offsets"]
        raw = self.read_array(name, data_offset + begin, data_offset + end)
        return tensor_array(name, tensor, entry, raw)

    def read_array(self, name: str, begin: int, end: int) -> NDArray[np.uint8]:
        """:meth:`read_range` as a new writable uint8 array the caller owns."""
        out: NDArray[np.uint8] = np.frombuffer(self.read_range(name, begin, end),
                                               dtype=np.uint8).copy()
        return out

    def read_json(self, name: str, limit: int = MAX_JSON_SIZE) -> Any:
        """A small JSON file (a config, the index), at most ``limit`` bytes."""
        size = self.size(name)
        if size > limit:
            raise ValueError(f"larger than the {limit}-byte limit")
        return json.loads(self.read_range(name, 0, size).decode("utf-8"))


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

    def read_json(self, name: str, limit: int = MAX_JSON_SIZE) -> Any:
        return read_json(self.path(name), limit)


def _check_length(name: str, begin: int, end: int, got: int) -> None:
    """``OSError`` when a read of ``[begin, end)`` of ``name`` gave ``got`` bytes, not all."""
    if got != end - begin:
        raise OSError(f"{name} truncated at byte {begin + got}")


class NotAFolder(Exception):
    """The checkpoint argument names nothing readable (exit 2); the message says why."""


def open_reader(root_arg: str | os.PathLike[str], allow: tuple[Path, ...] = ()) -> Reader:
    """The reader for a command-line checkpoint argument: ``hf://ORG/NAME[@REVISION]`` (the
    ``hub`` extra) or a local folder. Raises :class:`NotAFolder` (a Hub error included) with
    the reason when it cannot be read at all."""
    text = os.fspath(root_arg)
    if text.startswith(HUB_PREFIX):
        from .hub import open_hub

        return open_hub(text)
    root = Path(text)
    if not root.is_dir():
        raise NotAFolder(f"{root} is not a readable directory")
    try:
        os.listdir(root)
    except OSError as exc:
        raise NotAFolder(f"{root} is not readable ({exc.strerror})") from None
    return LocalReader(root, allow)
