"""A small, strict safetensors reader and writer in numpy (no ``safetensors`` package needed).

The layout (the safetensors format as the ``safetensors`` library writes it, version 0.8):

- 8 bytes: ``N``, the header length, an unsigned little-endian 64-bit integer;
- ``N`` bytes: a UTF-8 JSON object. Each key is a tensor name mapping to
  ``{"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}``; the optional key
  ``__metadata__`` maps to an object of string values. The writer pads the JSON with spaces
  so that ``N`` is a multiple of 8;
- the data: every tensor's bytes, little-endian, C order, at ``[begin, end)`` relative to the
  first byte after the header. The tensors tile the data exactly (no hole, no overlap) and the
  file ends with the last one.

The reader trusts nothing in a file: every rule above is checked, with exact integer
arithmetic and a bounded header, and a violation raises :class:`TensorFileError` naming the
file, the tensor and the byte offset. The writer produces the same bytes as
``safetensors.numpy.save_file`` (tensors ordered by descending dtype rank then name, compact
JSON, ``__metadata__`` first), except that ``__metadata__`` keys are written sorted, where the
library writes them in Rust ``HashMap`` order, which changes from run to run.

Sharded checkpoints (``model.safetensors.index.json``) are read with :func:`read_index` and
:func:`read_checkpoint_tensor`: a module's tensors may sit in different shards.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "DTYPES",
    "MAX_HEADER_SIZE",
    "TensorFileError",
    "read_checkpoint_tensor",
    "read_header",
    "read_index",
    "read_safetensors",
    "read_tensor",
    "write_safetensors",
]

#: The largest header accepted, 100,000,000 bytes (the safetensors library's own bound).
MAX_HEADER_SIZE = 100_000_000

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

# The order the safetensors library writes tensors in: by this rank, descending, then by name.
# (The Rust ``Dtype`` enum order, measured with safetensors 0.8.0.)
_RANK = {
    name: rank
    for rank, name in enumerate(
        (
            "BOOL",
            "U8",
            "I8",
            "F8_E5M2",
            "F8_E4M3",
            "F8_E8M0",
            "F8_E4M3FNUZ",
            "F8_E5M2FNUZ",
            "I16",
            "U16",
            "F16",
            "BF16",
            "I32",
            "U32",
            "F32",
            "C64",
            "F64",
            "I64",
            "U64",
        )
    )
}

_NAME_OF_DTYPE = {dtype: name for name, dtype in DTYPES.items()}
_ENTRY_KEYS = {"dtype", "shape", "data_offsets"}


class TensorFileError(ValueError):
    """A safetensors file (or index) breaks the format.

    Attributes: ``path`` (the file), ``tensor`` (the tensor concerned, or None), ``offset``
    (the absolute byte offset in the file where the problem is, or None).
    """

    def __init__(
        self, path: PathLike, message: str, *, tensor: str | None = None, offset: int | None = None
    ) -> None:
        self.path = os.fspath(path)
        self.tensor = tensor
        self.offset = offset
        where = [self.path]
        if tensor is not None:
            where.append(f"tensor {tensor!r}")
        if offset is not None:
            where.append(f"byte {offset}")
        super().__init__(f"{', '.join(where)}: {message}")


# -- reading ------------------------------------------------------------------------------------


def _reject_duplicate_keys(path: PathLike) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise TensorFileError(path, "duplicate key in the header", tensor=key, offset=8)
            out[key] = value
        return out

    return hook


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _parse_entry(path: PathLike, name: str, entry: object, data_size: int) -> dict[str, Any]:
    """Validate one tensor entry of the header; returns it with ``shape`` as a tuple."""

    def fail(message: str, offset: int | None = 8) -> TensorFileError:
        return TensorFileError(path, message, tensor=name, offset=offset)

    if not isinstance(entry, dict):
        raise fail(f"the entry must be a JSON object, got {type(entry).__name__}")
    if set(entry) != _ENTRY_KEYS:
        raise fail(
            f"the entry must have exactly the keys {sorted(_ENTRY_KEYS)}, got {sorted(entry)}"
        )
    dtype = entry["dtype"]
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise fail(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")
    shape = entry["shape"]
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise fail(f"shape must be a list of integers >= 0, got {shape!r}")
    offsets = entry["data_offsets"]
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)):
        raise fail(f"data_offsets must be two integers, got {offsets!r}")
    begin, end = offsets
    if not 0 <= begin <= end <= data_size:
        raise fail(f"data_offsets {offsets} are outside the data section [0, {data_size}]")
    # Checked arithmetic: stop multiplying once the size is beyond anything the file holds.
    nbytes = 0 if 0 in shape else DTYPES[dtype].itemsize
    for d in shape:
        nbytes *= d
        if nbytes > data_size:
            break
    if end - begin != nbytes:
        size = "more than the whole data section" if nbytes > data_size else f"{nbytes} bytes"
        raise fail(
            f"data_offsets {offsets} hold {end - begin} bytes but {dtype} {shape} needs {size}"
        )
    return {"dtype": dtype, "shape": tuple(shape), "data_offsets": (begin, end)}


def read_header(path: PathLike) -> tuple[dict[str, Any], int]:
    """Read and validate the header of a safetensors file.

    Returns ``(header, data_offset)``: ``header`` maps each tensor name to ``{"dtype": str,
    "shape": tuple[int, ...], "data_offsets": (begin, end)}`` in file order, plus
    ``"__metadata__"`` (a ``dict[str, str]``) when the file has one; ``data_offset`` is the
    absolute offset of the data section (``8 + N``).

    Raises :class:`TensorFileError` when the file is shorter than 8 bytes, ``N`` exceeds
    :data:`MAX_HEADER_SIZE` or the file, the header is not UTF-8 JSON holding an object, a key
    repeats, an entry has an unknown dtype, a bad shape, or offsets outside the data section or
    inconsistent with dtype × shape, two tensors overlap, a hole lies between them, or bytes
    follow the last tensor.
    """
    file_size = os.path.getsize(path)
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise TensorFileError(
                path,
                f"file is {len(prefix)} bytes, shorter than the 8-byte header length",
                offset=0,
            )
        (n,) = struct.unpack("<Q", prefix)
        if n > MAX_HEADER_SIZE:
            raise TensorFileError(
                path, f"header length {n} exceeds the limit {MAX_HEADER_SIZE}", offset=0
            )
        if 8 + n > file_size:
            raise TensorFileError(
                path,
                f"header length {n} runs past the end of the file ({file_size} bytes)",
                offset=0,
            )
        raw = f.read(n)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TensorFileError(
            path, f"header is not UTF-8 ({exc.reason})", offset=8 + exc.start
        ) from None
    try:
        parsed = json.loads(text, object_pairs_hook=_reject_duplicate_keys(path))
    except json.JSONDecodeError as exc:
        offset = 8 + len(text[: exc.pos].encode("utf-8"))
        raise TensorFileError(
            path, f"header is not valid JSON ({exc.msg})", offset=offset
        ) from None
    except TensorFileError:
        raise
    except (RecursionError, ValueError) as exc:  # nested past the recursion limit; huge integer
        what = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise TensorFileError(path, f"header JSON cannot be parsed: {what}", offset=8) from None
    if not isinstance(parsed, dict):
        raise TensorFileError(
            path, f"header must be a JSON object, got {type(parsed).__name__}", offset=8
        )
    data_offset = 8 + n
    data_size = file_size - data_offset
    header: dict[str, Any] = {}
    if "__metadata__" in parsed:
        metadata = parsed.pop("__metadata__")
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            raise TensorFileError(
                path, "__metadata__ must be an object of strings", tensor="__metadata__", offset=8
            )
        header["__metadata__"] = metadata
    entries = {name: _parse_entry(path, name, e, data_size) for name, e in parsed.items()}
    position, previous = 0, None
    for name, entry in sorted(entries.items(), key=lambda kv: kv[1]["data_offsets"]):
        begin, end = entry["data_offsets"]
        if begin < position:
            raise TensorFileError(
                path,
                f"overlaps tensor {previous!r} (which ends at data offset {position})",
                tensor=name,
                offset=data_offset + begin,
            )
        if begin > position:
            raise TensorFileError(
                path,
                f"a hole of {begin - position} bytes precedes it",
                tensor=name,
                offset=data_offset + position,
            )
        position, previous = end, name
        header[name] = entry
    if position != data_size:
        raise TensorFileError(
            path,
            f"{data_size - position} bytes after the last tensor are not part of any tensor",
            tensor=previous,
            offset=data_offset + position,
        )
    return header, data_offset


def _array(path: PathLike, name: str, entry: dict[str, Any], raw: bytes) -> NDArray[Any]:
    dtype = DTYPES[entry["dtype"]]
    array: NDArray[Any] = np.frombuffer(raw, dtype=dtype).reshape(entry["shape"]).copy()
    if entry["dtype"] == "BOOL" and np.any(np.frombuffer(raw, dtype=np.uint8) > 1):
        raise TensorFileError(path, "BOOL tensor holds a byte other than 0 or 1", tensor=name)
    return array


def read_tensor(path: PathLike, name: str) -> NDArray[Any]:
    """One tensor of a safetensors file as a new (writable) numpy array.

    dtypes map as :data:`DTYPES` says (BF16 → ``ml_dtypes.bfloat16``, F8_E4M3 →
    ``ml_dtypes.float8_e4m3fn``, F8_E8M0 → ``ml_dtypes.float8_e8m0fnu``, ...). The whole header
    is validated first; a missing name raises :class:`TensorFileError`.
    """
    header, data_offset = read_header(path)
    if name == "__metadata__" or name not in header:
        raise TensorFileError(path, "no such tensor in the file", tensor=name)
    entry = header[name]
    begin, end = entry["data_offsets"]
    with open(path, "rb") as f:
        f.seek(data_offset + begin)
        raw = f.read(end - begin)
    return _array(path, name, entry, raw)


def read_safetensors(path: PathLike) -> dict[str, NDArray[Any]]:
    """Every tensor of a safetensors file, in file order (``__metadata__`` is not included:
    see :func:`read_header`)."""
    header, data_offset = read_header(path)
    with open(path, "rb") as f:
        f.seek(data_offset)
        data = f.read()
    out: dict[str, NDArray[Any]] = {}
    for name, entry in header.items():
        if name != "__metadata__":
            begin, end = entry["data_offsets"]
            out[name] = _array(path, name, entry, data[begin:end])
    return out


# -- sharded checkpoints ------------------------------------------------------------------------


def read_index(folder: PathLike) -> dict[str, str]:
    """``model.safetensors.index.json``'s ``weight_map`` (tensor name → shard file name) of a
    checkpoint folder; a folder holding a single ``model.safetensors`` maps every tensor to it.
    """
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if not index.exists():
        single = folder / "model.safetensors"
        header, _ = read_header(single)
        return {name: single.name for name in header if name != "__metadata__"}
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise TensorFileError(index, f"not a safetensors index ({exc})") from None
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and "/" not in v and v not in ("", ".", "..")
        for k, v in weight_map.items()
    ):
        raise TensorFileError(index, "weight_map must map names to shard file names")
    return dict(weight_map)


def read_checkpoint_tensor(
    folder: PathLike, name: str, index: Mapping[str, str] | None = None
) -> NDArray[Any]:
    """The tensor ``name`` of a (sharded) checkpoint folder, found through its index."""
    weight_map = read_index(folder) if index is None else index
    if name not in weight_map:
        raise TensorFileError(
            Path(folder) / "model.safetensors.index.json",
            "no such tensor in the index",
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
    """Write ``tensors`` (name → numpy array, any dtype of :data:`DTYPES`) to ``path``.

    The bytes equal ``safetensors.numpy.save_file(tensors, path, metadata)`` (0.8.0): tensors
    sorted by descending dtype rank then name, offsets packed from 0, compact JSON with
    non-ASCII written as UTF-8, ``__metadata__`` first (its keys sorted: the one difference, as
    the library's order is random), spaces padding the header to a multiple of 8 bytes.
    Big-endian arrays are written little-endian; 0-d arrays get shape ``[]``.
    """
    if metadata is not None and not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise TypeError("metadata must map strings to strings")
    items = []
    for name, value in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise ValueError(f"invalid tensor name {name!r}")
        array = np.asarray(value)
        dtype_name = _dtype_name(name, array)
        data = np.ascontiguousarray(array, dtype=DTYPES[dtype_name]).tobytes()
        items.append((name, dtype_name, array.shape, data))
    items.sort(key=lambda item: (-_RANK[item[1]], item[0].encode("utf-8")))
    header: dict[str, Any] = {}
    if metadata is not None:
        header["__metadata__"] = {k: metadata[k] for k in sorted(metadata)}
    offset = 0
    for name, dtype_name, shape, data in items:
        header[name] = {
            "dtype": dtype_name,
            "shape": [int(d) for d in shape],
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
    text = json.dumps(header, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    raw = text.encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for *_, data in items:
            f.write(data)
