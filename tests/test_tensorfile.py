"""mxformats.tensorfile: the safetensors reader/writer, against the safetensors library, the
producer fixtures (tests/data/producers, pinned by SHA256SUMS) and hostile headers."""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import struct
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from mxformats import tensorfile
from mxformats.tensorfile import (
    DTYPE_BITS,
    DTYPES,
    MAX_HEADER_SIZE,
    ErrorKind,
    NotRegularFileError,
    TensorFileError,
    open_regular,
    read_checkpoint_tensor,
    read_header,
    read_index,
    read_json,
    read_safetensors,
    read_tensor,
    write_safetensors,
)

PRODUCERS = Path(__file__).resolve().parent / "data" / "producers"
SHARDS = sorted(PRODUCERS.glob("*/*.safetensors"))


def test_producer_fixture_checksums() -> None:
    listed = {}
    for line in (PRODUCERS / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split("  ", 1)
        listed[name] = digest
    present = {
        p.relative_to(PRODUCERS).as_posix()
        for p in PRODUCERS.rglob("*")
        if p.is_file() and p.name not in ("SHA256SUMS", "PROVENANCE.md")
    }
    assert set(listed) == present
    for name, digest in listed.items():
        assert hashlib.sha256((PRODUCERS / name).read_bytes()).hexdigest() == digest, name


@pytest.mark.parametrize("shard", SHARDS, ids=[p.relative_to(PRODUCERS).as_posix() for p in SHARDS])
def test_producer_shards_rewrite_byte_identically(shard: Path, tmp_path: Path) -> None:
    header, data_offset = read_header(shard)
    assert data_offset % 8 == 0
    tensors = read_safetensors(shard)
    assert list(tensors) == [k for k in header if k != "__metadata__"]
    out = tmp_path / "out.safetensors"
    write_safetensors(out, tensors, header.get("__metadata__"))
    assert out.read_bytes() == shard.read_bytes()


def test_index_finds_tensors_across_shards() -> None:
    folder = PRODUCERS / "kimi-k2-int4-compressed-tensors"
    index = read_index(folder)
    name = "model.layers.2.mlp.experts.2.down_proj"
    assert index[f"{name}.weight_packed"] != index[f"{name}.weight_scale"]  # README: split module
    packed = read_checkpoint_tensor(folder, f"{name}.weight_packed", index)
    assert packed.dtype == np.int32 and packed.shape == (128, 12)
    with pytest.raises(TensorFileError, match="no such tensor"):
        read_checkpoint_tensor(folder, "nope", index)


def _all_dtypes() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    out: dict[str, np.ndarray] = {}
    for name, dtype in DTYPES.items():
        if dtype == np.bool_:
            out[f"t.{name}"] = rng.integers(0, 2, (2, 3)).astype(bool)
        elif dtype.kind in "iu":
            out[f"t.{name}"] = rng.integers(0, 100, (2, 3)).astype(dtype)
        else:
            out[f"t.{name}"] = rng.standard_normal((2, 3)).astype(np.float32).astype(dtype)
    out["scalar"] = np.array(3.5, dtype=np.float32)
    out["empty"] = np.zeros((0, 4), dtype=np.int32)
    out['ünïcode "name"\n'] = np.arange(3, dtype=np.float64)
    out["big-endian"] = np.arange(4, dtype=">i4")
    return out


@pytest.mark.parametrize("metadata", [None, {}, {"format": "pt"}])
def test_bytes_equal_the_safetensors_library(tmp_path: Path, metadata: dict | None) -> None:
    st = pytest.importorskip("safetensors.numpy")
    tensors = _all_dtypes()
    ours, theirs = tmp_path / "ours.safetensors", tmp_path / "theirs.safetensors"
    write_safetensors(ours, tensors, metadata)
    st.save_file(tensors, str(theirs), metadata=metadata)
    assert ours.read_bytes() == theirs.read_bytes()
    # safetensors.numpy loads only numpy's own dtypes (not bfloat16, float8_*).
    loadable = {k: v for k, v in tensors.items() if v.dtype.type.__module__ == "numpy"}
    write_safetensors(ours, loadable, metadata)
    loaded = st.load_file(str(ours))
    mine = read_safetensors(theirs)
    for name, array in tensors.items():
        for got in (loaded.get(name, array), mine[name], read_tensor(theirs, name)):
            assert got.shape == array.shape
            assert got.dtype == array.dtype.newbyteorder("<")
            assert got.tobytes() == array.astype(got.dtype).tobytes()


def test_dtype_map() -> None:
    assert DTYPES["BF16"] == ml_dtypes.bfloat16
    assert DTYPES["F8_E4M3"] == ml_dtypes.float8_e4m3fn
    assert DTYPES["F8_E4M3FNUZ"] == ml_dtypes.float8_e4m3fnuz
    assert DTYPES["F8_E8M0"] == ml_dtypes.float8_e8m0fnu
    assert all(d.byteorder in "<|=" for d in DTYPES.values())


def test_metadata_round_trips(tmp_path: Path) -> None:
    # The library writes the keys in its HashMap order (issue 17: the writer is the library).
    path = tmp_path / "m.safetensors"
    write_safetensors(path, {"x": np.zeros(1, np.float32)}, {"b": "2", "a": "1"})
    header, _ = read_header(path)
    assert header["__metadata__"] == {"a": "1", "b": "2"}


def test_writer_refuses_what_it_cannot_write(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="no safetensors name"):
        write_safetensors(tmp_path / "x", {"x": np.zeros(2, dtype=np.complex128)})
    with pytest.raises(ValueError, match="invalid tensor name"):
        write_safetensors(tmp_path / "x", {"__metadata__": np.zeros(2)})
    with pytest.raises(TypeError, match="metadata"):
        write_safetensors(tmp_path / "x", {"x": np.zeros(2)}, {"a": 1})  # type: ignore[dict-item]


# -- hostile files ------------------------------------------------------------------------------


def _file(
    tmp_path: Path,
    header: object,
    data: bytes = b"",
    *,
    raw: bytes | None = None,
    length: int | None = None,
) -> Path:
    body = raw if raw is not None else json.dumps(header).encode()
    path = tmp_path / "hostile.safetensors"
    n = len(body) if length is None else length
    path.write_bytes(struct.pack("<Q", n) + body + data)
    return path


def _entry(dtype: str = "F32", shape: list | None = None, offsets: list | None = None) -> dict:
    return {
        "dtype": dtype,
        "shape": [2] if shape is None else shape,
        "data_offsets": [0, 8] if offsets is None else offsets,
    }


def _raises(
    path: Path, match: str, *, tensor: str | None = None, offset: int | None = None
) -> None:
    with pytest.raises(TensorFileError, match=match) as info:
        read_header(path)
    assert info.value.path == str(path)
    assert str(path) in str(info.value)
    if tensor is not None:
        assert info.value.tensor == tensor
    if offset is not None:
        assert info.value.offset == offset


def test_truncated_files(tmp_path: Path) -> None:
    path = tmp_path / "short.safetensors"
    path.write_bytes(b"\x05\x00\x00")
    _raises(path, "shorter than the 8-byte", offset=0)
    _raises(_file(tmp_path, {"x": _entry()}, length=10_000), "runs past the end", offset=0)
    # The data section is cut short: the tensor's offsets leave the file.
    _raises(_file(tmp_path, {"x": _entry()}, b"\x00" * 5), "outside the data section", tensor="x")


def test_huge_header_length(tmp_path: Path) -> None:
    _raises(_file(tmp_path, {}, length=MAX_HEADER_SIZE + 1), "exceeds the limit", offset=0)
    _raises(_file(tmp_path, {}, length=2**64 - 1), "exceeds the limit", offset=0)


@pytest.mark.parametrize("header", [[], "x", 3, None, [{"x": 1}]])
def test_header_must_be_an_object(tmp_path: Path, header: object) -> None:
    _raises(_file(tmp_path, header), "must be a JSON object", offset=8)


def test_header_not_json_or_not_utf8(tmp_path: Path) -> None:
    _raises(_file(tmp_path, None, raw=b'{"x": '), "not valid JSON", offset=8 + 6)
    _raises(_file(tmp_path, None, raw=b'{"\xff": 1}'), "not UTF-8", offset=10)
    _raises(_file(tmp_path, None, raw=b'{"x": 1}\x00\x00'), "not valid JSON")  # NUL padding


def test_duplicate_keys(tmp_path: Path) -> None:
    entry = json.dumps(_entry()).encode()
    raw = b'{"x":' + entry + b',"x":' + entry + b"}"
    _raises(_file(tmp_path, None, b"\x00" * 8, raw=raw), "duplicate key", tensor="x")


# (header JSON, the key that repeats or None): texts where the fast parse's ":" count proves
# nothing (a ":" in a string, an object nested deeper than an entry) or proves a repeat
_DUPLICATE_CASES = [
    ('{"x":{"dtype":"U8","dtype":"U8","shape":[0],"data_offsets":[0,0]}}', "dtype"),
    ('{"__metadata__":{"a":"1","a":"2"},"x":{"dtype":"U8"}}', "a"),
    ('{"x":{"extra":{"k":1,"k":2},"dtype":"U8"}}', "k"),
    ('{"x":{"extra":[{"k":1,"k":2}]}}', "k"),
    ('{"__metadata__":{"t":"12:30"},"x":{"dtype":"U8"},"x":{"dtype":"U8"}}', "x"),
    ('{"a:b":{"dtype":"U8"},"a:b":{"dtype":"U8"}}', "a:b"),
    ('{"x" : {"dtype" : "U8"} , "x" : {}}', "x"),
    ('[{"k":1,"k":2}]', "k"),
    ('{"k":{"a":1,"a":2},"k":', "a"),  # the repeat is found before the JSON breaks
    ('{"__metadata__":{"t":"12:30"},"x":{"dtype":"U8"}}', None),
    ('{"x":{"extra":{"k":1},"dtype":"U8"}}', None),
    ('{"a:b":{"dtype":"U8"}}', None),
    ('{"x" : {"dtype" : "U8"} , "y" : {}}', None),
    ("{}", None),
]


@pytest.mark.parametrize(("text", "repeated"), _DUPLICATE_CASES)
def test_header_json_rejects_duplicates_as_the_hooked_parse(text: str, repeated: str | None
                                                            ) -> None:
    """The fast duplicate-key proof (plain parse, ':' count) agrees with the parse through
    the duplicate-key hook: the same key rejected, or the same object returned."""
    def parse(how: Any) -> Any:
        try:
            return how()
        except TensorFileError as exc:
            return ("TensorFileError", exc.reason, exc.tensor)
        except ValueError as exc:
            return (type(exc).__name__, str(exc))

    fast = parse(lambda: tensorfile._loads_header_json("h", text))
    hooked = parse(lambda: json.loads(
        text, object_pairs_hook=tensorfile._reject_duplicate_keys("h")))
    assert fast == hooked
    if repeated is None:
        assert fast == json.loads(text)
    else:
        assert fast == ("TensorFileError", "duplicate key in the header", repeated)


H, SPAN = ErrorKind.HEADER, ErrorKind.SPAN


@pytest.mark.parametrize(
    ("entry", "match", "kind"),
    [
        (_entry(dtype="F5"), "unknown dtype", H),
        (_entry(dtype="float32"), "unknown dtype", H),
        ({"dtype": "F32", "shape": [2]}, "lacks data_offsets", H),
        ({"shape": [2], "data_offsets": [0, 8]}, "lacks dtype", H),
        (_entry(shape=[-2]), "integers >= 0", H),
        (_entry(shape=[2.0]), "integers >= 0", H),
        (_entry(shape=[True, 2]), "integers >= 0", H),
        # each rule alone, the others kept (the fast path must refuse it too): two negative
        # dimensions make a positive size; a float offset equals its integer; a third offset;
        # a span that ends past the data section and is sized right
        (_entry(shape=[-2, -2], offsets=[0, 16]), "integers >= 0", H),
        (_entry(shape=[4], offsets=[0.0, 16]), "two integers", H),
        (_entry(shape=[4], offsets=[0, 16.0]), "two integers", H),
        (_entry(shape=[4], offsets=[0, 16, 16]), "two integers", H),
        (_entry(shape=[6], offsets=[0, 24]), "outside the data section", SPAN),
        (_entry(shape="2"), "integers >= 0", H),
        (_entry(offsets=[0]), "two integers", H),
        (_entry(offsets=[0, "8"]), "two integers", H),
        (_entry(dtype="F4", shape=[3], offsets=[0, 2]), "not a whole number of bytes", H),
        (_entry(offsets=[8, 0]), "outside the data section", SPAN),
        (_entry(offsets=[0, 24]), "outside the data section", SPAN),
        (_entry(offsets=[-8, 0]), "outside the data section", SPAN),
        (_entry(offsets=[0, 2**70]), "outside the data section", SPAN),
        (_entry(shape=[3]), "needs 12 bytes", SPAN),
        (_entry(dtype="F4", shape=[2]), "needs 1 bytes", SPAN),
        (_entry(shape=[2**40, 2**40, 2**40]), "more than the whole data section", SPAN),
        ([1, 2], "must be a JSON object", H),
    ],
)
def test_bad_entries(tmp_path: Path, entry: object, match: str, kind: ErrorKind) -> None:
    path = _file(tmp_path, {"x": entry}, b"\x00" * 16)
    _raises(path, match, tensor="x")
    with pytest.raises(TensorFileError) as info:
        read_header(path)
    assert info.value.kind is kind and match in info.value.reason


def test_error_kinds_of_the_length_and_tiling(tmp_path: Path) -> None:
    cases: list[tuple[dict[str, Any], ErrorKind]] = [
        ({"header": {}, "raw": b"\x05", "length": 0}, ErrorKind.HEADER_LENGTH),
        ({"header": {}, "length": MAX_HEADER_SIZE + 1}, ErrorKind.HEADER_LENGTH),
        ({"header": None, "raw": b'{"x": '}, ErrorKind.HEADER),
        ({"header": {"a": _entry(offsets=[4, 12])}, "data": b"\x00" * 12}, ErrorKind.SPAN),
        ({"header": {"a": _entry()}, "data": b"\x00" * 9}, ErrorKind.SPAN),
    ]
    for kw, kind in cases:
        path = _file(tmp_path, **kw)
        if kw.get("raw") == b"\x05":
            path.write_bytes(b"\x05")
        with pytest.raises(TensorFileError) as info:
            read_header(path)
        assert info.value.kind is kind, (kw, info.value)
    empty = _file(tmp_path, {"x": _entry(shape=[2**40, 2**40, 0], offsets=[0, 0])})
    assert read_header(empty)[0]["x"]["shape"] == (2**40, 2**40, 0)


# -- the dtype table against the installed safetensors library ----------------------------------


def _library_dtypes() -> list[str]:
    """The dtype names the installed safetensors accepts, in its enum order: serde lists the
    variants when a header names an unknown one."""
    safetensors = pytest.importorskip("safetensors")
    body = json.dumps({"x": _entry(dtype="NOT_A_DTYPE")}).encode()
    with pytest.raises(safetensors.SafetensorError) as info:
        safetensors.deserialize(struct.pack("<Q", len(body)) + body + b"\x00" * 8)
    listed = re.search(r"expected one of (.*?)(?: at line|$)", str(info.value))
    assert listed is not None, str(info.value)
    return re.findall(r"`([A-Z0-9_]+)`", listed.group(1))


def _library_accepts(header: dict[str, Any], data: bytes) -> bool:
    safetensors = pytest.importorskip("safetensors")
    body = json.dumps(header).encode()
    try:
        safetensors.deserialize(struct.pack("<Q", len(body)) + body + data)
    except safetensors.SafetensorError:
        return False
    return True


def test_dtype_table_is_the_librarys() -> None:
    """Every dtype the installed safetensors knows, in its order (our writer sorts by it)."""
    assert list(DTYPE_BITS) == _library_dtypes()
    assert set(DTYPES) <= set(DTYPE_BITS)
    assert all(DTYPE_BITS[name] == 8 * dtype.itemsize for name, dtype in DTYPES.items())


@pytest.mark.parametrize("dtype", list(DTYPE_BITS))
def test_dtype_sizes_agree_with_the_library(tmp_path: Path, dtype: str) -> None:
    """Eight elements take exactly DTYPE_BITS bytes: accepted by both readers; one byte less
    is refused by both (the size, both sides)."""
    bits = DTYPE_BITS[dtype]
    for nbytes, ok in ((bits, True), (bits - 1, False), (bits + 1, False)):
        header = {"x": _entry(dtype=dtype, shape=[8], offsets=[0, nbytes])}
        assert _library_accepts(header, b"\x00" * nbytes) is ok, (dtype, nbytes)
        path = _file(tmp_path, header, b"\x00" * nbytes)
        if ok:
            assert read_header(path)[0]["x"]["dtype"] == dtype
        else:
            with pytest.raises(TensorFileError) as info:
                read_header(path)
            assert info.value.kind is ErrorKind.SPAN


@pytest.mark.parametrize(("dtype", "shape"), [("F4", [3]), ("F6_E2M3", [2]), ("F6_E3M2", [5])])
def test_sub_byte_tensors_must_fill_whole_bytes(tmp_path: Path, dtype: str,
                                                shape: list[int]) -> None:
    nbytes = -(-shape[0] * DTYPE_BITS[dtype] // 8)
    header = {"x": _entry(dtype=dtype, shape=shape, offsets=[0, nbytes])}
    assert not _library_accepts(header, b"\x00" * nbytes)
    _raises(_file(tmp_path, header, b"\x00" * nbytes), "not a whole number of bytes")


def test_sub_byte_tensors_read_as_their_bytes(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    packed = torch.arange(8, dtype=torch.uint8).reshape(2, 4)
    path = tmp_path / "f4.safetensors"
    save_file({"x": packed.view(torch.float4_e2m1fn_x2)}, str(path))
    header, _ = read_header(path)
    assert header["x"]["dtype"] == "F4" and header["x"]["shape"] == (2, 8)
    assert read_tensor(path, "x").tobytes() == bytes(range(8))


def test_an_extra_entry_key_is_ignored_like_the_library(tmp_path: Path) -> None:
    header = {"x": {**_entry(), "extra": {"any": [1, 2]}}}
    assert _library_accepts(header, b"\x00" * 8)
    parsed, _ = read_header(_file(tmp_path, header, b"\x00" * 8))
    assert parsed["x"] == {"dtype": "F32", "shape": (2,), "data_offsets": (0, 8)}


# -- files that are not regular files -----------------------------------------------------------


def _specials(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo.safetensors"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock.safetensors"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    sock.close()
    directory = tmp_path / "dir.safetensors"
    directory.mkdir()
    return {"a FIFO": fifo, "a socket": sock_path, "a directory": directory,
            "a character device": Path("/dev/zero")}


@pytest.mark.usefixtures("no_hang")
def test_special_files_are_never_read(tmp_path: Path) -> None:
    for what, path in _specials(tmp_path).items():
        for read in (read_header, open_regular, read_json,
                     lambda p: read_tensor(p, "x"), read_safetensors):
            with pytest.raises(NotRegularFileError, match=f"is {what}") as info:
                read(path)
            assert info.value.what == what and isinstance(info.value, OSError)
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "fifo.safetensors")
    with pytest.raises(NotRegularFileError, match="is a FIFO"):
        read_json(link)


@pytest.mark.usefixtures("no_hang")
def test_a_fifo_swapped_in_after_the_stat_does_not_block(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race: the stat saw a regular file, the open finds a FIFO. O_NONBLOCK keeps the
    open from waiting for a writer, and fstat refuses what was opened."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    monkeypatch.setattr(tensorfile, "not_regular", lambda path: None)
    with pytest.raises(NotRegularFileError, match="is a FIFO"):
        open_regular(fifo)


def test_json_files_are_bounded(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_text('{"a": "' + "x" * 100 + '"}')
    assert read_json(path)["a"] == "x" * 100
    with pytest.raises(ValueError, match="108-byte limit"):
        read_json(path, limit=108)
    assert read_json(path, limit=109)["a"] == "x" * 100


def test_index_entries_with_a_dot_slash_name_the_same_shard(tmp_path: Path) -> None:
    write_safetensors(tmp_path / "a.safetensors", {"x": np.arange(3, dtype=np.float32)})
    index = {"metadata": {}, "weight_map": {"x": "./a.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    assert read_index(tmp_path) == {"x": "a.safetensors"}
    assert read_checkpoint_tensor(tmp_path, "x").tolist() == [0.0, 1.0, 2.0]
    index["weight_map"]["x"] = "sub/a.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(TensorFileError) as info:
        read_index(tmp_path)
    assert info.value.kind is ErrorKind.INDEX


def test_bad_metadata(tmp_path: Path) -> None:
    header = {"__metadata__": {"a": 1}, "x": _entry()}
    _raises(_file(tmp_path, header, b"\x00" * 8), "object of strings", tensor="__metadata__")


def test_overlap_hole_and_trailing_bytes(tmp_path: Path) -> None:
    overlap = {"a": _entry(offsets=[0, 8]), "b": _entry(offsets=[4, 12])}
    path = _file(tmp_path, overlap, b"\x00" * 12)
    _raises(path, "overlaps tensor 'a'", tensor="b", offset=8 + len(path.read_bytes()) - 20 + 4)
    hole = {"a": _entry(offsets=[0, 8]), "b": _entry(offsets=[12, 20])}
    path = _file(tmp_path, hole, b"\x00" * 20)
    data_offset = len(path.read_bytes()) - 20
    _raises(path, "hole of 4 bytes", tensor="b", offset=data_offset + 8)
    hole_at_start = {"a": _entry(offsets=[4, 12])}
    _raises(_file(tmp_path, hole_at_start, b"\x00" * 12), "hole of 4 bytes", tensor="a")
    path = _file(tmp_path, {"a": _entry()}, b"\x00" * 9)
    _raises(path, "1 bytes after the last tensor", tensor="a", offset=len(path.read_bytes()) - 1)
    _raises(_file(tmp_path, {}, b"\x00"), "after the last tensor")


def test_read_tensor_errors(tmp_path: Path) -> None:
    path = _file(tmp_path, {"a": _entry(dtype="BOOL", offsets=[0, 2])}, b"\x01\x02")
    with pytest.raises(TensorFileError, match="other than 0 or 1"):
        read_tensor(path, "a")
    path = _file(tmp_path, {"a": _entry()}, b"\x00" * 8)
    with pytest.raises(TensorFileError, match="no such tensor") as info:
        read_tensor(path, "b")
    assert info.value.tensor == "b"
    with pytest.raises(TensorFileError, match="no such tensor"):
        read_tensor(path, "__metadata__")
    assert read_tensor(path, "a").flags.writeable


def test_empty_file_with_empty_header(tmp_path: Path) -> None:
    header, offset = read_header(_file(tmp_path, {}))
    assert header == {} and offset == 10
    assert read_safetensors(_file(tmp_path, {})) == {}


def test_a_reader_hands_tensors_over_without_a_second_copy(tmp_path: Path) -> None:
    """``LocalReader.tensor`` reads each tensor once, into an array that becomes the tensor
    (``tensor_array`` views a uint8 array handed over, and copies bytes): every dtype has
    ``read_tensor``'s bytes, dtype and shape, writable; a span cut short is an OSError."""
    from mxformats.validate.readers import LocalReader

    tensors = _all_dtypes()
    write_safetensors(tmp_path / "all.safetensors", tensors)
    reader = LocalReader(tmp_path)
    for name in tensors:
        got, want = reader.tensor("all.safetensors", name), read_tensor(
            tmp_path / "all.safetensors", name)
        assert (got.dtype, got.shape, got.tobytes()) == (want.dtype, want.shape, want.tobytes())
        assert got.flags.writeable
    header, _ = read_header(tmp_path / "all.safetensors")
    entry = header["t.F32"]
    raw = np.frombuffer(struct.pack("<4f", 1, 2, 3, 4), np.uint8).copy()
    viewed = tensorfile.tensor_array("x", "f32", {**entry, "shape": [2, 2]}, raw)
    assert np.shares_memory(viewed, raw) and viewed.tolist() == [[1, 2], [3, 4]]
    copied = tensorfile.tensor_array("x", "f32", {**entry, "shape": [4]}, raw.tobytes())
    assert not np.shares_memory(copied, raw) and copied.flags.writeable
    size = (tmp_path / "all.safetensors").stat().st_size
    with pytest.raises(OSError, match="truncated at byte"):
        reader.read_array("all.safetensors", size - 4, size + 4)
