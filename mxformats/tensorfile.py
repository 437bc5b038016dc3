"""A small, strict safetensors reader in numpy, and the writer (the ``safetensors`` library).

The layout (the safetensors format as the ``safetensors`` library writes it, version 0.8):

- 8 bytes: ``N``, the header length, an unsigned little-endian 64-bit integer;
- ``N`` bytes: a UTF-8 JSON object. Each key is a tensor name mapping to
  ``{"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}`` (other keys of an entry
  are ignored, as the library's serde ``TensorInfo`` ignores them); the optional key
  ``__metadata__`` maps to an object of string values. The writer pads the JSON with spaces
  so that ``N`` is a multiple of 8;
- the data: every tensor's bytes, little-endian, C order, at ``[begin, end)`` relative to the
  first byte after the header. Sub-byte dtypes (``F4``, ``F6_E2M3``, ``F6_E3M2``) are packed:
  a tensor holds ``elements × bits / 8`` bytes, which must be a whole number. The tensors tile
  the data exactly (no hole, no overlap) and the file ends with the last one.

The reader trusts nothing in a file: every rule above is checked, with exact integer
arithmetic and a bounded header, and a violation raises :class:`TensorFileError` naming the
file, the tensor and the byte offset, with a :class:`ErrorKind` saying which rule broke.
Files are opened only when they are regular files (:func:`open_regular`): a FIFO, socket,
device or directory raises :class:`NotRegularFileError` instead of blocking or never ending.

The writer is the ``safetensors`` library's own serializer (:func:`write_safetensors`): the
validator needs the reader's byte offsets and strictness, a file we write needs only to be
exactly what the library writes.

Sharded checkpoints (``model.safetensors.index.json``) are read with :func:`read_index` and
:func:`read_checkpoint_tensor`: a module's tensors may sit in different shards.
"""

from __future__ import annotations

import io
import json
import os
import stat
import struct
from collections.abc import Mapping
from enum import Enum
from itertools import chain, repeat
from math import prod
from operator import floordiv, itemgetter, le, lt, mod, mul, sub
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple

import ml_dtypes
import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "DTYPES",
    "DTYPE_BITS",
    "MAX_HEADER_SIZE",
    "MAX_JSON_SIZE",
    "ErrorKind",
    "HeaderTable",
    "NotRegularFileError",
    "TensorFileError",
    "header_length",
    "not_regular",
    "open_regular",
    "parse_header",
    "parse_header_table",
    "read_checkpoint_tensor",
    "read_header",
    "read_header_table",
    "read_index",
    "read_json",
    "read_safetensors",
    "read_tensor",
    "shard_name",
    "tensor_array",
    "tensor_nbytes",
    "write_safetensors",
]

#: The largest header accepted, 100,000,000 bytes (the safetensors library's own bound).
MAX_HEADER_SIZE = 100_000_000

#: The largest JSON file (config, index) :func:`read_json` reads. A real Kimi-K2 index is
#: about 10 MB; the same bound as a header keeps a hostile file from exhausting memory.
MAX_JSON_SIZE = MAX_HEADER_SIZE

PathLike = str | os.PathLike[str]

#: safetensors dtype name -> numpy dtype (little-endian). F8_E8M0 is ml_dtypes' E8M0 type;
#: view it as uint8 for the raw scale bytes.
DTYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype(np.uint8),
    "I8": np.dtype(np.int8),
    "U16": np.dtype("<u2"),
    "I16": np.dtype("<i2"),
    "U32": np.dtype("<u4"),
    "I32": np.dtype("<i4"),
    "U64": np.dtype("<u8"),
    "I64": np.dtype("<i8"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "C64": np.dtype("<c8"),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E4M3FNUZ": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "F8_E5M2FNUZ": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "F8_E8M0": np.dtype(ml_dtypes.float8_e8m0fnu),
}

#: Every dtype the safetensors library (0.8.0) knows, in the order of its Rust ``Dtype`` enum
#: (safetensors/src/tensor.rs), with the bits of one element. ``F4`` is torch's
#: ``float4_e2m1fn_x2`` storage (two elements a byte), ``F6_*`` are MX FP6 (four elements in
#: three bytes); they have no numpy dtype, so :data:`DTYPES` lacks them and :func:`read_tensor`
#: returns their packed bytes. tests/test_tensorfile.py checks this table against the installed
#: library's own list.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}

_NAME_OF_DTYPE = {dtype: name for name, dtype in DTYPES.items()}
_ENTRY_KEYS = ("dtype", "shape", "data_offsets")


class ErrorKind(str, Enum):
    """Which rule of the format a :class:`TensorFileError` reports (callers classify by it,
    never by the message text)."""

    #: the 8-byte header length — the file is shorter, or it is absurd or runs past the file
    HEADER_LENGTH = "header-length"
    #: the JSON header — not UTF-8, not JSON, not an object, a repeated key, a bad entry
    #: (dtype, shape, the form of data_offsets) or bad ``__metadata__``
    HEADER = "header"
    #: a byte span — outside the data, not dtype × shape, overlapping, a hole, trailing bytes
    SPAN = "span"
    #: tensor bytes that are not values of the dtype (a BOOL byte other than 0 or 1)
    DATA = "data"
    #: a name that is not in the file or the index
    NO_SUCH_TENSOR = "no-such-tensor"
    #: ``model.safetensors.index.json`` is not an index
    INDEX = "index"


class TensorFileError(ValueError):
    """A safetensors file (or index) breaks the format.

    Attributes: ``kind`` (the :class:`ErrorKind`), ``path`` (the file), ``tensor`` (the tensor
    concerned, or None), ``offset`` (the absolute byte offset in the file where the problem
    is, or None), ``reason`` (the message without the location).
    """

    def __init__(
        self,
        path: PathLike,
        message: str,
        *,
        kind: ErrorKind,
        tensor: str | None = None,
        offset: int | None = None,
    ) -> None:
        self.kind = kind
        self.path = os.fspath(path)
        self.tensor = tensor
        self.offset = offset
        self.reason = message
        where = [self.path]
        if tensor is not None:
            where.append(f"tensor {tensor!r}")
        if offset is not None:
            where.append(f"byte {offset}")
        super().__init__(f"{', '.join(where)}: {message}")


# -- opening -----------------------------------------------------------------------------------


class NotRegularFileError(OSError):
    """The path exists but is not a regular file: a directory, FIFO, socket or device.

    It is never read: opening a FIFO blocks until a writer comes, and a device such as
    ``/dev/zero`` never ends. ``what`` says what it is (``"a FIFO"``, ``"a directory"``, ...).
    """

    def __init__(self, path: PathLike, what: str) -> None:
        super().__init__(f"is {what}, not a regular file")
        self.filename = os.fspath(path)
        self.what = what

    def __str__(self) -> str:
        return f"{self.filename} is {self.what}, not a regular file"


_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _what(mode: int) -> str | None:
    """None for a regular file, else what the mode says it is."""
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _NOT_REGULAR if test(mode)), "not a regular file")


def not_regular(path: PathLike) -> str | None:
    """None when ``path`` (symlinks followed) is a regular file, else what it is (``"a FIFO"``,
    ``"a directory"``, ...). Raises ``FileNotFoundError`` (an ``OSError``) when it is absent."""
    return _what(os.stat(path).st_mode)


def _nonblocking(path: str, flags: int) -> int:
    return os.open(path, flags | getattr(os, "O_NONBLOCK", 0))


def open_regular(path: PathLike) -> io.BufferedReader:
    """Open ``path`` for binary reading only if it is a regular file.

    Checked with ``stat`` before the open and with ``fstat`` on the opened descriptor, and
    opened with ``O_NONBLOCK``, so a FIFO swapped in between the two cannot block either.
    Raises :class:`NotRegularFileError` for anything else, ``FileNotFoundError`` when absent.
    """
    what = not_regular(path)
    if what is not None:
        raise NotRegularFileError(path, what)
    f = open(path, "rb", opener=_nonblocking)  # noqa: SIM115 (returned to the caller)
    what = _what(os.fstat(f.fileno()).st_mode)
    if what is not None:
        f.close()
        raise NotRegularFileError(path, what)
    return f


def read_json(path: PathLike, limit: int = MAX_JSON_SIZE) -> Any:
    """Parse a JSON file (a config, an index) that must be a regular file of at most ``limit``
    bytes. Raises ``OSError`` (:class:`NotRegularFileError` included), ``ValueError`` for a
    file over the limit or not UTF-8 JSON, and ``RecursionError`` for JSON nested too deeply.
    """
    with open_regular(path) as f:
        raw = f.read(limit + 1)
    if len(raw) > limit:
        raise ValueError(f"larger than the {limit}-byte limit")
    return json.loads(raw.decode("utf-8"))


# -- reading ------------------------------------------------------------------------------------


def _reject_duplicate_keys(path: PathLike) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(pairs)
        if len(out) != len(pairs):  # rare: find the first repeat, as a loop over pairs would
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    raise TensorFileError(
                        path, "duplicate key in the header", kind=ErrorKind.HEADER, tensor=key,
                        offset=8,
                    )
                seen.add(key)
        return out

    return hook


def _loads_header_json(path: PathLike, text: str) -> Any:
    """``json.loads(text)``, raising a ``TensorFileError`` for a key that repeats in any
    object, at any depth (safetensors' serde rejects it), exactly as a parse through
    :func:`_reject_duplicate_keys` does: same errors, in the same order.

    The fast path parses without the hook (which costs a Python call per object, ~139,000
    for a full-size checkpoint) and proves afterwards that no key repeats: in JSON a ``:``
    outside a string follows each key and nothing else, so the text's ``:`` count bounds
    its keys from above, while the entries of the parsed dicts (one per distinct key of
    each object) bound them from below. When the top object's entries and those of the
    objects directly in it already reach the ``:`` count, every object's keys are distinct.
    Any other header (a ``:`` in a string, a deeper object, invalid JSON) takes the hooked
    parse."""
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):  # the hooked parse raises these in its own order
        pass
    else:
        if type(parsed) is dict:
            values = list(parsed.values())
            if set(map(type, values)) <= {dict} and (
                len(values) + sum(map(len, values)) == text.count(":")
            ):
                return parsed
    return json.loads(text, object_pairs_hook=_reject_duplicate_keys(path))


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def tensor_nbytes(dtype: str, shape: tuple[int, ...] | list[int], bound: int | None = None
                  ) -> int | None:
    """The bytes a tensor of ``dtype`` (a name of :data:`DTYPE_BITS`) and ``shape`` occupies,
    or None when its bits are not a whole number of bytes (the library rejects such a
    sub-byte tensor). With ``bound``, any size above it is returned as ``bound + 1`` (the
    multiplication stops early: a hostile shape cannot make a huge integer)."""
    bits = 0 if 0 in shape else DTYPE_BITS[dtype]
    for d in shape:
        if bound is not None and bits > 8 * bound:
            return bound + 1
        bits *= d
    if bits % 8:
        return None
    nbytes = bits // 8
    return nbytes if bound is None or nbytes <= bound else bound + 1


#: Dimensions above which :func:`_fast_columns` leaves a header to :func:`_parse_entry`
#: (their product is computed without a bound; real tensors have at most 5).
_FAST_DIMS = 8
_INT_ONLY = {int}
#: each dtype name to itself: the one string object every header's dtype of that name becomes
_DTYPE_NAMES = {name: name for name in DTYPE_BITS}


def _fast_columns(entries: list[Any], data_size: int
                  ) -> tuple[list[str], list[tuple[int, ...]], list[int], list[int]] | None:
    """``(dtypes, shapes, begins, ends)`` of header entries that all satisfy every rule
    :func:`_parse_entry` checks, else None (then :func:`_parse_entry`, entry by entry, says
    which rule broke where).

    The fast path of the loader: each rule is one C-level pass over a column (``map``,
    ``set``, ``min``/``max``), no Python code per entry. Types are exact (JSON gives only
    ``dict``, ``list``, ``str``, ``int``, ``bool``...; ``bool`` is not ``int`` here, as
    :func:`_is_int` wants)."""
    if not set(map(type, entries)) <= {dict}:
        return None
    # Any: each column is judged below, before it is returned as typed
    dtypes: list[Any] = list(map(dict.get, entries, repeat("dtype")))
    shapes: list[Any] = list(map(dict.get, entries, repeat("shape")))
    offsets: list[Any] = list(map(dict.get, entries, repeat("data_offsets")))
    if (
        not set(map(type, dtypes)) <= {str}
        or not set(dtypes) <= DTYPE_BITS.keys()
        or not set(map(type, shapes)) <= {list}
        or not set(map(type, offsets)) <= {list}
        or not set(map(len, offsets)) <= {2}
        or max(map(len, shapes), default=0) > _FAST_DIMS
    ):
        return None
    dims = list(chain.from_iterable(shapes))
    begins = list(map(itemgetter(0), offsets))
    ends = list(map(itemgetter(1), offsets))
    if (
        not set(map(type, dims)) <= _INT_ONLY
        or min(dims, default=0) < 0
        or not set(map(type, begins)) <= _INT_ONLY
        or not set(map(type, ends)) <= _INT_ONLY
        or min(begins, default=0) < 0
        or max(ends, default=0) > data_size
        or not all(map(le, begins, ends))
    ):
        return None
    bits = list(map(mul, map(DTYPE_BITS.__getitem__, dtypes), map(prod, shapes)))
    if any(map(mod, bits, repeat(8))) or list(map(floordiv, bits, repeat(8))) != list(
        map(sub, ends, begins)
    ):
        return None
    # one object per distinct dtype and shape (a full-size checkpoint holds ~139,000 tensors
    # of a few hundred shapes): less memory, and equal values are one object, so the sets and
    # comparisons of the checks meet them in cache and stop at the identity test
    tuples = list(map(tuple, shapes))
    distinct: dict[tuple[int, ...], tuple[int, ...]] = {}
    return (list(map(_DTYPE_NAMES.__getitem__, dtypes)),
            list(map(distinct.setdefault, tuples, tuples)), begins, ends)


def _parse_entry(path: PathLike, name: str, entry: object, data_size: int) -> dict[str, Any]:
    """Validate one tensor entry of the header; returns it with ``shape`` as a tuple.

    Keys other than dtype, shape and data_offsets are ignored, as safetensors 0.8 does (its
    serde ``TensorInfo`` does not deny unknown fields)."""

    def fail(message: str, kind: ErrorKind = ErrorKind.HEADER) -> TensorFileError:
        return TensorFileError(path, message, kind=kind, tensor=name, offset=8)

    if not isinstance(entry, dict):
        raise fail(f"the entry must be a JSON object, got {type(entry).__name__}")
    missing = [k for k in _ENTRY_KEYS if k not in entry]
    if missing:
        raise fail(f"the entry lacks {', '.join(missing)}")
    dtype = entry["dtype"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise fail(f"unknown dtype {dtype!r}; known: {', '.join(DTYPE_BITS)}")
    shape = entry["shape"]
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise fail(f"shape must be a list of integers >= 0, got {shape!r}")
    offsets = entry["data_offsets"]
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)):
        raise fail(f"data_offsets must be two integers, got {offsets!r}")
    begin, end = offsets
    if not 0 <= begin <= end <= data_size:
        raise fail(
            f"data_offsets {offsets} are outside the data section [0, {data_size}]", ErrorKind.SPAN
        )
    nbytes = tensor_nbytes(dtype, shape, data_size)
    if nbytes is None:
        raise fail(f"{dtype} {shape} is not a whole number of bytes")
    if end - begin != nbytes:
        size = "more than the whole data section" if nbytes > data_size else f"{nbytes} bytes"
        raise fail(
            f"data_offsets {offsets} hold {end - begin} bytes but {dtype} {shape} needs {size}",
            ErrorKind.SPAN,
        )
    return {"dtype": dtype, "shape": tuple(shape), "data_offsets": (begin, end)}


def header_length(path: PathLike, prefix: bytes, file_size: int) -> int:
    """``N``, the header length the 8 bytes ``prefix`` give, checked against
    :data:`MAX_HEADER_SIZE` and a file of ``file_size`` bytes (kind ``HEADER_LENGTH``)."""

    def fail(message: str) -> TensorFileError:
        return TensorFileError(path, message, kind=ErrorKind.HEADER_LENGTH, offset=0)

    if len(prefix) < 8:
        raise fail(f"file is {len(prefix)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", prefix[:8])
    if n > MAX_HEADER_SIZE:
        raise fail(f"header length {n} exceeds the limit {MAX_HEADER_SIZE}")
    if 8 + n > file_size:
        raise fail(f"header length {n} runs past the end of the file ({file_size} bytes)")
    return int(n)


def _read_prefix(path: PathLike, f: IO[bytes]) -> tuple[bytes, int]:
    """The raw header bytes and the file size, the length checked against both bounds."""
    file_size = os.fstat(f.fileno()).st_size
    n = header_length(path, f.read(8), file_size)
    return f.read(n), file_size


def read_header(path: PathLike) -> tuple[dict[str, Any], int]:
    """Read and validate the header of a safetensors file.

    Returns ``(header, data_offset)``: ``header`` maps each tensor name to ``{"dtype": str,
    "shape": tuple[int, ...], "data_offsets": (begin, end)}`` in file order, plus
    ``"__metadata__"`` (a ``dict[str, str]``) when the file has one; ``data_offset`` is the
    absolute offset of the data section (``8 + N``).

    Raises :class:`TensorFileError` when the file is shorter than 8 bytes, ``N`` exceeds
    :data:`MAX_HEADER_SIZE` or the file (kind ``HEADER_LENGTH``); the header is not UTF-8 JSON
    holding an object, a key repeats, an entry lacks a key or has an unknown dtype, a bad shape
    or malformed offsets (``HEADER``); offsets lie outside the data section or disagree with
    dtype × shape, two tensors overlap, a hole lies between them, or bytes follow the last
    tensor (``SPAN``). A path that is not a regular file raises :class:`NotRegularFileError`.
    """
    return read_header_table(path).as_header()


class HeaderTable(NamedTuple):
    """A validated safetensors header as columns, one row per tensor in data order (by
    offset): what :func:`read_header` returns, without a dictionary per tensor (a full-size
    checkpoint has ~139,000 of them). ``begins``/``ends`` are relative to the data section,
    which starts at byte ``data_offset``; ``metadata`` is ``__metadata__`` (None when absent).
    """

    names: list[str]
    dtypes: list[str]
    shapes: list[tuple[int, ...]]
    begins: list[int]
    ends: list[int]
    metadata: dict[str, str] | None
    data_offset: int

    def as_header(self) -> tuple[dict[str, Any], int]:
        """``(header, data_offset)`` as :func:`read_header` returns them."""
        header: dict[str, Any] = {} if self.metadata is None else {"__metadata__": self.metadata}
        for name, dtype, shape, begin, end in zip(
            self.names, self.dtypes, self.shapes, self.begins, self.ends, strict=True
        ):
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": (begin, end)}
        return header, self.data_offset


def read_header_table(path: PathLike) -> HeaderTable:
    """:func:`read_header` as a :class:`HeaderTable` (same rules, same errors)."""
    with open_regular(path) as f:
        raw, file_size = _read_prefix(path, f)
    return parse_header_table(path, raw, file_size)


def parse_header(path: PathLike, raw: bytes, file_size: int) -> tuple[dict[str, Any], int]:
    """Validate the header JSON ``raw`` (the ``N`` bytes after the 8-byte length, as
    :func:`header_length` bounded them) of a file of ``file_size`` bytes, by every rule
    :func:`read_header` lists; returns what it returns. ``path`` only names the file in
    errors: the bytes may come from anywhere (a local file, a ranged HTTP read)."""
    return parse_header_table(path, raw, file_size).as_header()


def parse_header_table(path: PathLike, raw: bytes, file_size: int) -> HeaderTable:
    """:func:`parse_header` as a :class:`HeaderTable` (same rules, same errors)."""
    n = len(raw)

    def fail(message: str, offset: int = 8) -> TensorFileError:
        return TensorFileError(path, message, kind=ErrorKind.HEADER, offset=offset)

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise fail(f"header is not UTF-8 ({exc.reason})", 8 + exc.start) from None
    try:
        parsed = _loads_header_json(path, text)
    except json.JSONDecodeError as exc:
        offset = 8 + len(text[: exc.pos].encode("utf-8"))
        raise fail(f"header is not valid JSON ({exc.msg})", offset) from None
    except TensorFileError:
        raise
    except (RecursionError, ValueError) as exc:  # nested past the recursion limit; huge integer
        what = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise fail(f"header JSON cannot be parsed: {what}") from None
    if not isinstance(parsed, dict):
        raise fail(f"header must be a JSON object, got {type(parsed).__name__}")
    data_offset = 8 + n
    data_size = file_size - data_offset
    metadata = None
    if "__metadata__" in parsed:
        metadata = parsed.pop("__metadata__")
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            raise TensorFileError(
                path, "__metadata__ must be an object of strings", kind=ErrorKind.HEADER,
                tensor="__metadata__", offset=8,
            )
    names = list(parsed)
    columns = _fast_columns(list(parsed.values()), data_size)
    if columns is None:  # some rule is broken: the full check raises the error naming it
        checked = [_parse_entry(path, name, e, data_size) for name, e in parsed.items()]
        columns = ([c["dtype"] for c in checked], [c["shape"] for c in checked],
                   [c["data_offsets"][0] for c in checked], [c["data_offsets"][1] for c in checked])
    dtypes, shapes, begins, ends = columns
    if not all(map(lt, begins, begins[1:])):  # not already in data order (it usually is)
        # by offsets, then ends; the original position breaks ties (a stable sort) and keeps
        # names uncompared
        order = [i for _, _, i in sorted(zip(begins, ends, range(len(names)), strict=True))]
        names, dtypes, shapes, begins, ends = (
            list(map(column.__getitem__, order)) for column in (names, dtypes, shapes, begins, ends)
        )
    tiling = [0, *ends]  # each tensor starts where the previous ends; the last ends the file
    if tiling[:-1] != begins or tiling[-1] != data_size:
        _raise_tiling(path, data_offset, data_size, names, begins, ends)
    return HeaderTable(names, dtypes, shapes, begins, ends, metadata, data_offset)


def _raise_tiling(path: PathLike, data_offset: int, data_size: int, names: list[str],
                  begins: list[int], ends: list[int]) -> None:
    """Raise the ``SPAN`` error of the first tensor (in data order) that does not start where
    the previous one ends, or of the bytes after the last one."""
    position, previous = 0, None
    for name, begin, end in zip(names, begins, ends, strict=True):
        if begin != position:
            problem = (
                f"overlaps tensor {previous!r} (which ends at data offset {position})"
                if begin < position
                else f"a hole of {begin - position} bytes precedes it"
            )
            raise TensorFileError(
                path, problem, kind=ErrorKind.SPAN, tensor=name,
                offset=data_offset + min(begin, position),
            )
        position, previous = end, name
    raise TensorFileError(
        path,
        f"{data_size - position} bytes after the last tensor are not part of any tensor",
        kind=ErrorKind.SPAN,
        tensor=previous,
        offset=data_offset + position,
    )


def tensor_array(path: PathLike, name: str, entry: dict[str, Any],
                 raw: bytes | NDArray[np.uint8]) -> NDArray[Any]:
    """The tensor ``name`` as :func:`read_tensor` returns it, from its header ``entry`` (as
    :func:`parse_header` returns it) and its data: ``raw`` bytes (copied), or a writable
    uint8 array the caller hands over (the tensor is a view of it: a tensor of hundreds of MB
    is not copied twice). ``path`` names the file in errors."""
    data = raw if isinstance(raw, np.ndarray) else np.frombuffer(raw, dtype=np.uint8).copy()
    if entry["dtype"] not in DTYPES:  # packed sub-byte dtypes: the bytes as stored
        return data
    if entry["dtype"] == "BOOL" and np.any(data > 1):
        raise TensorFileError(
            path, "BOOL tensor holds a byte other than 0 or 1", kind=ErrorKind.DATA, tensor=name
        )
    array: NDArray[Any] = data.view(DTYPES[entry["dtype"]]).reshape(entry["shape"])
    return array


def read_tensor(path: PathLike, name: str) -> NDArray[Any]:
    """One tensor of a safetensors file as a new (writable) numpy array.

    dtypes map as :data:`DTYPES` says (BF16 → ``ml_dtypes.bfloat16``, F8_E4M3 →
    ``ml_dtypes.float8_e4m3fn``, F8_E8M0 → ``ml_dtypes.float8_e8m0fnu``, ...); the packed
    sub-byte dtypes (F4, F6_E2M3, F6_E3M2) come back as their stored bytes, a 1-D uint8 array.
    The whole header is validated first; a missing name raises :class:`TensorFileError`.
    """
    header, data_offset = read_header(path)
    if name == "__metadata__" or name not in header:
        raise TensorFileError(
            path, "no such tensor in the file", kind=ErrorKind.NO_SUCH_TENSOR, tensor=name
        )
    entry = header[name]
    begin, end = entry["data_offsets"]
    with open_regular(path) as f:
        f.seek(data_offset + begin)
        raw = f.read(end - begin)
    return tensor_array(path, name, entry, raw)


def read_safetensors(path: PathLike) -> dict[str, NDArray[Any]]:
    """Every tensor of a safetensors file, in file order (``__metadata__`` is not included:
    see :func:`read_header`)."""
    header, data_offset = read_header(path)
    with open_regular(path) as f:
        f.seek(data_offset)
        data = f.read()
    out: dict[str, NDArray[Any]] = {}
    for name, entry in header.items():
        if name != "__metadata__":
            begin, end = entry["data_offsets"]
            out[name] = tensor_array(path, name, entry, data[begin:end])
    return out


# -- sharded checkpoints ------------------------------------------------------------------------


def read_index(folder: PathLike) -> dict[str, str]:
    """``model.safetensors.index.json``'s ``weight_map`` (tensor name → shard file name) of a
    checkpoint folder; a folder holding a single ``model.safetensors`` maps every tensor to it.
    A ``./`` before a file name is dropped (the file it names is the same).
    """
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if not index.exists():
        single = folder / "model.safetensors"
        header, _ = read_header(single)
        return {name: single.name for name in header if name != "__metadata__"}
    try:
        weight_map = read_json(index)["weight_map"]
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise TensorFileError(index, f"not a safetensors index ({exc})", kind=ErrorKind.INDEX
                              ) from None
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        raise TensorFileError(
            index, "weight_map must map names to shard file names", kind=ErrorKind.INDEX
        )
    out = {k: shard_name(v) for k, v in weight_map.items()}
    if not all("/" not in v and v not in ("", ".", "..") for v in out.values()):
        raise TensorFileError(
            index, "weight_map must map names to shard file names", kind=ErrorKind.INDEX
        )
    return out


def shard_name(entry: str) -> str:
    """An index entry with any leading ``./`` removed: the file name it refers to."""
    while entry.startswith("./"):
        entry = entry[2:]
    return entry


def read_checkpoint_tensor(
    folder: PathLike, name: str, index: Mapping[str, str] | None = None
) -> NDArray[Any]:
    """The tensor ``name`` of a (sharded) checkpoint folder, found through its index."""
    weight_map = read_index(folder) if index is None else index
    if name not in weight_map:
        raise TensorFileError(
            Path(folder) / "model.safetensors.index.json",
            "no such tensor in the index",
            kind=ErrorKind.NO_SUCH_TENSOR,
            tensor=name,
        )
    return read_tensor(Path(folder) / weight_map[name], name)


# -- writing ------------------------------------------------------------------------------------


def _dtype_name(name: str, array: NDArray[Any]) -> str:
    dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
    try:
        return _NAME_OF_DTYPE[dtype]
    except KeyError:
        raise TypeError(f"tensor {name!r}: dtype {array.dtype} has no safetensors name") from None


def write_safetensors(
    path: PathLike, tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None
) -> None:
    """Write ``tensors`` (name → numpy array, any dtype of :data:`DTYPES`) to ``path`` with the
    safetensors library itself, so the bytes are ``safetensors.numpy.save_file``'s.

    ``save_file`` flattens each array to a ``TensorSpec`` (dtype name, shape, pointer, length)
    and calls ``serialize_file`` (huggingface/safetensors 0.8.0,
    ``bindings/python/py_src/safetensors/numpy.py``, ``_flatten``); this does the same, so the
    ml_dtypes types ``save_file`` cannot name (bfloat16, the float8 types), which
    ``TensorSpec`` accepts, are written too. ``__metadata__`` is written
    first, its keys in the library's (random) ``HashMap`` order.
    """
    from safetensors import TensorSpec, serialize_file

    if metadata is not None and not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise TypeError("metadata must map strings to strings")
    arrays = {}  # little-endian, contiguous copies: alive until serialize_file returns
    for name, value in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise ValueError(f"invalid tensor name {name!r}")
        array = np.asarray(value)
        arrays[name] = np.asarray(array, dtype=DTYPES[_dtype_name(name, array)], order="C")
    specs = {
        name: TensorSpec(dtype=a.dtype.name, shape=a.shape, data_ptr=a.ctypes.data,
                         data_len=a.nbytes)
        for name, a in arrays.items()
    }
    serialize_file(specs, str(path), metadata=dict(metadata) if metadata is not None else None)
