"""The one interface every check reads a checkpoint through: a local folder or a Hub repo.

A :class:`Reader` answers four questions about the files of one checkpoint (the file list,
a file's size, a byte range of a file, and a file's sha256) plus the two derived ones the
loader needs (a safetensors header, a small JSON file).
:class:`~mxformats.validate.readers.local.LocalReader` reads a folder;
:class:`~mxformats.validate.readers.hub.HubReader` reads a Hugging Face repository pinned to
one commit. Every check (the loader in :mod:`~mxformats.validate.files`,
:meth:`~mxformats.validate.model.Checkpoint.read`, the chunked scans of
``mxformats.validate.numbers``, ``mxformats.validate.manifest``) calls these methods
and nothing else, so no check has a second copy for ``hf://``.

The safetensors header is parsed by :func:`mxformats.tensorfile.parse_header` whatever the
reader: a reader fetches bytes, the strict parser judges them.

Names are the checkpoint-relative POSIX paths an index uses. :func:`unsafe_name` refuses an
absolute name or one with ``..`` before any reader sees it.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from mxformats.tensorfile import (
    MAX_JSON_SIZE,
    ErrorKind,
    HeaderTable,
    TensorFileError,
    header_length,
    parse_header_table,
    tensor_array,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "HUB_PREFIX",
    "RANGE_IGNORED",
    "READ_FAILED",
    "NotAFolder",
    "ReadFailed",
    "Reader",
    "unsafe_name",
]

_T = TypeVar("_T")

#: How a Hub checkpoint is named on the command line (``hf://ORG/NAME[@REVISION]``).
HUB_PREFIX = "hf://"

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

    def read_ranges(self, ranges: Iterable[tuple[str, int, int]]
                    ) -> Generator[bytes | OSError, None, None]:
        """For each ``(name, begin, end)`` of ``ranges``, in order, what :meth:`read_range`
        gives: its bytes, or the ``OSError`` (:class:`ReadFailed` included) it raised. A
        remote reader has many reads in flight at once; this one reads them one by one, and
        lazily (a caller that stops early reads no more)."""
        for name, begin, end in ranges:
            try:
                yield self.read_range(name, begin, end)
            except OSError as exc:
                yield exc

    def header_tables(self, names: Sequence[str]) -> Iterator[HeaderTable | Exception]:
        """:meth:`header_table` of each of ``names``, in order: the table, or the exception
        it raised (``TensorFileError``, ``OSError``). Two rounds of
        :meth:`~mxformats.validate.readers.interface.Reader.read_ranges` (the lengths, then the
        headers), so a remote reader reads every shard's at once."""
        sizes: dict[str, int] = {}
        out: dict[str, HeaderTable | Exception] = {}
        for name in names:
            try:
                sizes[name] = self.size(name)
            except OSError as exc:
                out[name] = exc
        lengths = self._judged([(n, 0, min(8, sizes[n])) for n in names if n in sizes],
                               lambda n, raw: header_length(n, raw, sizes[n]), out)
        out.update(self._judged([(n, 8, 8 + lengths[n]) for n in names if n in lengths],
                                lambda n, raw: parse_header_table(n, raw, sizes[n]), out))
        for name in names:
            yield out[name]

    def _judged(self, asked: list[tuple[str, int, int]], judge: Callable[[str, bytes], _T],
                failed: dict[str, Any]) -> dict[str, _T]:
        """``judge(name, bytes)`` of each range ``asked`` (one :meth:`read_ranges` round), by
        file name; a read or a judgement that raised goes into ``failed`` instead."""
        judged: dict[str, _T] = {}
        for (name, _, _), got in zip(asked, self.read_ranges(asked), strict=True):
            try:
                if isinstance(got, Exception):
                    raise got
                judged[name] = judge(name, got)
            except (TensorFileError, OSError) as exc:
                failed[name] = exc
        return judged

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
        announces (:meth:`header_tables` of one name)."""
        (got,) = self.header_tables([name])
        if isinstance(got, Exception):
            raise got
        return got

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


class NotAFolder(Exception):
    """The checkpoint argument names nothing readable (exit 2); the message says why."""
