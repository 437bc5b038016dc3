"""mxformats.tensorfile: the safetensors reader/writer, against the safetensors library, the
producer fixtures (tests/data/producers, pinned by SHA256SUMS) and hostile headers."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from mxformats.tensorfile import (
    DTYPES,
    MAX_HEADER_SIZE,
    TensorFileError,
    read_checkpoint_tensor,
    read_header,
    read_index,
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


def test_metadata_keys_are_sorted_and_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    write_safetensors(path, {"x": np.zeros(1, np.float32)}, {"b": "2", "a": "1"})
    header, _ = read_header(path)
    assert list(header["__metadata__"]) == ["a", "b"]


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


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        (_entry(dtype="F4"), "unknown dtype"),
        (_entry(dtype="float32"), "unknown dtype"),
        ({"dtype": "F32", "shape": [2]}, "exactly the keys"),
        ({**_entry(), "extra": 1}, "exactly the keys"),
        (_entry(shape=[-2]), "integers >= 0"),
        (_entry(shape=[2.0]), "integers >= 0"),
        (_entry(shape=[True, 2]), "integers >= 0"),
        (_entry(shape="2"), "integers >= 0"),
        (_entry(offsets=[0]), "two integers"),
        (_entry(offsets=[0, "8"]), "two integers"),
        (_entry(offsets=[8, 0]), "outside the data section"),
        (_entry(offsets=[0, 24]), "outside the data section"),
        (_entry(offsets=[-8, 0]), "outside the data section"),
        (_entry(offsets=[0, 2**70]), "outside the data section"),
        (_entry(shape=[3]), "needs 12 bytes"),
        (_entry(shape=[2**40, 2**40, 2**40]), "more than the whole data section"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_bad_entries(tmp_path: Path, entry: object, match: str) -> None:
    _raises(_file(tmp_path, {"x": entry}, b"\x00" * 16), match, tensor="x")


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
