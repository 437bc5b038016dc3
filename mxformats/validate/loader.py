"""The loader: configs, the index and shard headers read into a
:class:`~mxformats.validate.model.Checkpoint` (:func:`read`), below the file checks of
:mod:`~mxformats.validate.files`; its findings say only what could not be read or must not be
opened. The checks of the group ``files`` are declared here.

Nothing is executed, nothing is unpickled; a file is opened only when its name is safe
(:func:`safe_name`) and it is a regular file (:func:`mxformats.tensorfile.open_regular`: a
FIFO, socket, device or directory is reported, never read, so it cannot block or feed bytes
without end). Every byte is read through the checkpoint's
:class:`~mxformats.validate.readers.interface.Reader`: a folder or a Hub repo.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from itertools import repeat
from pathlib import Path
from typing import Any

from mxformats.tensorfile import (
    ErrorKind,
    HeaderTable,
    NotRegularFileError,
    TensorFileError,
    shard_name,
)

from .arch import quantization_config
from .descriptors import UNSUPPORTED, Configs, detect
from .descriptors.bf16 import DESCRIPTOR as BF16
from .findings import Finding, Level, Severity, declare
from .model import Checkpoint, TensorRef, modules_of
from .readers import (
    RANGE_IGNORED,
    READ_FAILED,
    LocalReader,
    Reader,
    ReadFailed,
    unsafe_name,
)

__all__ = ["HF_QUANT_CONFIG", "INDEX_NAME", "Loaded", "read", "read_failed", "safe_name"]


CONFIG_PARSE = declare(
    "CONFIG_PARSE", severity=Severity.ERROR, level=Level.STRUCTURE, group="files",
    meaning="config.json is missing or is not a JSON object.",
    fix="Restore config.json from the producer's output.",
    conditions=("config.json absent", "not JSON", "not an object", "nested too deeply"))
CONFIG_ARCH = declare(
    "CONFIG_ARCH", severity=Severity.ERROR, level=Level.STRUCTURE, group="files",
    meaning="config.json lacks a key the loader reads and has no default for, holds a malformed "
            "value (not an integer, a NaN rms_norm_eps), or implies more tensors than the shards "
            "hold.",
    fix="Restore the key from the producer's config (the message names it and where it sits).",
    conditions=("a size not an integer", "a hidden size the embedding contradicts",
                "more layers than the shards hold", "rms_norm_eps not finite"))
CONFIG_QUANT_CONFLICT = declare(
    "CONFIG_QUANT_CONFLICT", severity=Severity.ERROR, level=Level.STRUCTURE, group="files",
    meaning="quantization_config at the top level and in text_config differ; vLLM uses the top "
            "level.",
    fix="Keep one quantization_config (Quark writes a single top-level one).",
    conditions=("text_config's quantization_config differs",))
CONFIG_QUANT_CONTRADICTION = declare(
    "CONFIG_QUANT_CONTRADICTION", severity=Severity.ERROR, level=Level.STRUCTURE, group="files",
    meaning="config.json's quantization_config and hf_quant_config.json declare different "
            "formats, algorithms or exclude lists: vLLM reads config.json's and ignores the other "
            "file, so tools that read hf_quant_config.json (TensorRT-LLM, older SGLang) load "
            "another model.",
    fix="Regenerate one file from the other so that both say the same.",
    conditions=("another format in hf_quant_config.json", "another quant_algo",
                "another group_size", "other exclude_modules"),
    only={condition: ("modelopt-nvfp4", "modelopt-fp8-block", "modelopt-mixed")
          for condition in ("another quant_algo", "another group_size", "other exclude_modules")})
FORMAT_UNSUPPORTED = declare(
    "FORMAT_UNSUPPORTED", severity=Severity.ERROR, level=Level.STRUCTURE, group="files",
    meaning="The quantization format is not one this validator verifies (no descriptor recognises "
            "it).",
    fix="Use a validator for that format; nothing was checked.",
    conditions=("a quant_method no descriptor knows",))
FORMAT_NOT_NUMERIC = declare(
    "FORMAT_NOT_NUMERIC", severity=Severity.INFO, level=Level.STRUCTURE, group="files",
    meaning="A recognised unquantized or source format: structural checks ran, numeric ones do "
            "not apply.",
    fix="Nothing to do.",
    conditions=("no quantization_config",))
INDEX_PARSE = declare(
    "INDEX_PARSE", severity=Severity.ERROR, level=Level.STRUCTURE, group="files",
    meaning="model.safetensors.index.json is not JSON with a weight_map of names to files (a "
            "warning when only the metadata object is absent: transformers needs it, vLLM does "
            "not).",
    fix="Regenerate the index from the shards.",
    conditions=("not JSON", "no weight_map", "a file name not a string", "an empty weight_map",
                "no metadata object"))
INDEX_MISSING = declare(
    "INDEX_MISSING", severity=Severity.ERROR, level=Level.STRUCTURE, group="files",
    meaning="No model.safetensors.index.json and no model.safetensors: transformers finds no "
            "weights (vLLM would load every *.safetensors; those present were checked).",
    fix="Copy the index and shards completely.",
    conditions=("no index and no model.safetensors",))
INDEX_PATH_NOT_PLAIN = declare(
    "INDEX_PATH_NOT_PLAIN", severity=Severity.ERROR, level=Level.STRUCTURE, group="files",
    meaning="An index entry names its shard as ./NAME: transformers opens it, but vLLM keeps a "
            "shard only when folder/ENTRY equals the path its glob found, so it skips this shard.",
    fix="Write the bare file name in the index.",
    conditions=("an entry ./NAME",))
FILE_NOT_REGULAR = declare(
    "FILE_NOT_REGULAR", severity=Severity.ERROR, level=Level.STRUCTURE, group="files",
    meaning="config.json, the index or a shard is a directory, FIFO, socket or device; it was not "
            "opened.",
    fix="Replace it with the regular file it should be.",
    conditions=("config.json a FIFO", "the index a FIFO", "a shard a FIFO", "a shard a socket",
                "a shard a directory"))
INDEX_UNSAFE_PATH = declare(
    "INDEX_UNSAFE_PATH", severity=Severity.ERROR, level=Level.STRUCTURE, group="files",
    meaning="An index entry names an absolute path or one with '..'; it was not opened.",
    fix="Index entries must be file names inside the checkpoint folder.",
    conditions=("an absolute path", "a path through '..'"))
SYMLINK_ESCAPE = declare(
    "SYMLINK_ESCAPE", severity=Severity.ERROR, level=Level.STRUCTURE, group="files",
    meaning="A file is a symlink resolving outside the folder (and outside its Hugging Face cache "
            "repo).",
    fix="Copy the file in, or pass --allow-symlink-root for a trusted store.",
    conditions=("a shard linked outside", "config.json linked outside",
                "the index linked outside"))
SHARD_MISSING = declare(
    "SHARD_MISSING", severity=Severity.ERROR, level=Level.STRUCTURE, group="files",
    meaning="A shard named in the index does not exist.",
    fix="Download or copy the missing shard.",
    conditions=("a listed shard absent",))
SHARD_STRAY = declare(
    "SHARD_STRAY", severity=Severity.WARNING, level=Level.STRUCTURE, group="files",
    meaning="A .safetensors file is not named in the index: vLLM skips it, Quark "
            "file-to-file would process it.",
    fix="Delete it or add its tensors to the index.",
    conditions=("an unlisted shard beside the others", "an unlisted shard in a subfolder"))
HEADER_LENGTH = declare(
    "HEADER_LENGTH", severity=Severity.ERROR, level=Level.STRUCTURE, group="files",
    meaning="The 8-byte header length is absurd or runs past the file (rejected before reading).",
    fix="The shard is truncated or not safetensors: re-download it.",
    conditions=("a file shorter than 8 bytes", "a length above the limit",
                "a length past the end of the file"))
HEADER_INVALID = declare(
    "HEADER_INVALID", severity=Severity.ERROR, level=Level.STRUCTURE, group="files",
    meaning="The safetensors header is not valid (JSON, dtype, shape, metadata).",
    fix="Re-download or re-export the shard.",
    conditions=("not UTF-8", "not JSON", "nested too deeply", "an integer too long to read",
                "not an object", "a repeated key", "__metadata__ not an object of strings",
                "an entry not an object", "an entry lacking dtype", "an unknown dtype",
                "a negative dimension", "data_offsets not two integers",
                "a shape of no whole number of bytes"))
TENSOR_SPAN = declare(
    "TENSOR_SPAN", severity=Severity.ERROR, level=Level.STRUCTURE, group="files",
    meaning="A tensor's byte span is wrong: size not shape x dtype, out of bounds, "
            "overlapping, a hole, or the file is truncated or has trailing bytes.",
    fix="Re-download or re-export the shard.",
    conditions=("offsets past the data section", "a span not shape x dtype",
                "overlapping tensors", "a hole between tensors", "bytes after the last tensor",
                "the file truncated"))
INDEX_TENSOR_NOT_IN_SHARD = declare(
    "INDEX_TENSOR_NOT_IN_SHARD", severity=Severity.ERROR, level=Level.STRUCTURE, group="files",
    meaning="The index maps a tensor to a shard that does not hold it (vLLM never notices).",
    fix="Regenerate the index, or restore the tensor.",
    conditions=("an entry of a tensor no shard holds", "an entry naming the other shard"))
SHARD_TENSOR_NOT_IN_INDEX = declare(
    "SHARD_TENSOR_NOT_IN_INDEX", severity=Severity.ERROR, level=Level.STRUCTURE, group="files",
    meaning="A shard holds a tensor the index does not map to it (vLLM loads it anyway).",
    fix="Regenerate the index from the shards.",
    conditions=("a tensor the index does not list", "a tensor the index maps elsewhere"))
TENSOR_IN_TWO_SHARDS = declare(
    "TENSOR_IN_TWO_SHARDS", severity=Severity.ERROR, level=Level.STRUCTURE, group="files",
    meaning="The same tensor name is stored in two shards.",
    fix="Remove the duplicate.",
    conditions=("a tensor copied into the other shard",))
HUB_RANGE_IGNORED = declare(
    RANGE_IGNORED, severity=Severity.ERROR, level=Level.STRUCTURE, group="files",
    meaning="hf:// only: the server answered a ranged read with 200 (the whole file) instead of "
            "206; the read was abandoned rather than download the file.",
    fix="Use an endpoint (HF_ENDPOINT, proxy) that honours HTTP Range requests.")
HUB_READ_FAILED = declare(
    READ_FAILED, severity=Severity.ERROR, level=Level.STRUCTURE, group="files",
    meaning="hf:// only: a ranged read failed after huggingface_hub's retries, or its answer was "
            "not the range asked: an HTTP error, a dropped connection, a wrong Content-Range or "
            "Content-Length, a file size other than the API's, a short or long body.",
    fix="Run again (a network fault), or re-upload the file the finding names.")
TOTAL_SIZE_MISMATCH = declare(
    "TOTAL_SIZE_MISMATCH", severity=Severity.WARNING, level=Level.STRUCTURE, group="files",
    meaning="metadata.total_size is neither the sum of tensor bytes nor the sum of shard file "
            "sizes (or not an integer). No loader reads it; an absent one is fine.",
    fix="Regenerate the index.",
    conditions=("one byte more", "not an integer"))

INDEX_NAME = "model.safetensors.index.json"
#: ModelOpt's own config file (vLLM ``ModelOptQuantConfigBase.get_config_filenames``).
HF_QUANT_CONFIG = "hf_quant_config.json"

def safe_name(reader: Reader, name: str) -> str | None:
    """None when ``name`` (relative, from the index) may be opened, else the id of the check
    it breaks: ``INDEX_UNSAFE_PATH`` (absolute, ``..``) or ``SYMLINK_ESCAPE``."""
    if unsafe_name(name):
        return "INDEX_UNSAFE_PATH"
    if reader.escapes(name):
        return "SYMLINK_ESCAPE"
    return None


def read_failed(exc: ReadFailed, tensor: str | None = None) -> Finding:
    """The finding of a read the reader could not complete (a Hub read: its check)."""
    check = HUB_RANGE_IGNORED if exc.check == RANGE_IGNORED else HUB_READ_FAILED
    return Finding(check, exc.reason, file=exc.file, tensor=tensor)


_CHECK_OF_KIND = {
    ErrorKind.HEADER_LENGTH: HEADER_LENGTH,
    ErrorKind.SPAN: TENSOR_SPAN,
}


def _header_finding(exc: TensorFileError, file: str, remote: bool = False) -> Finding:
    """The finding of a shard whose header :func:`read_header` refused, by the error's kind.
    On the Hub the file size the header is checked against is the LFS size the API lists, so
    a span that disagrees with it says so."""
    check = _CHECK_OF_KIND.get(exc.kind, HEADER_INVALID)
    reason = exc.reason
    if remote and check is not HEADER_INVALID:
        reason += " (the file size is the Hub's LFS size)"
    return Finding(check, reason, file=file, tensor=exc.tensor, offset=exc.offset)


def _not_regular(name: str, exc: NotRegularFileError) -> Finding:
    return Finding(
        FILE_NOT_REGULAR, f"{name} is {exc.what}, not a regular file; not opened", file=name
    )


def _why(exc: BaseException) -> str:
    """A parse failure in words; JSON nested past Python's recursion limit says so."""
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply to parse"
    return str(exc)


def _read_config(reader: Reader, name: str, out: list[Finding]) -> dict[str, Any] | None:
    """A JSON object file of the checkpoint (regular files only, inside the allowed roots),
    or None with the reason appended to ``out``."""
    if safe_name(reader, name) is not None:
        out.append(Finding(SYMLINK_ESCAPE, f"{name} resolves outside the checkpoint; not read",
                           file=name))
        return None
    try:
        parsed = reader.read_json(name)
        if not isinstance(parsed, dict):
            raise ValueError(f"a JSON {type(parsed).__name__}, not an object")
        return parsed
    except FileNotFoundError:
        out.append(Finding(CONFIG_PARSE, f"{name} does not exist", file=name))
    except NotRegularFileError as exc:
        out.append(_not_regular(name, exc))
    except ReadFailed as exc:
        out.append(read_failed(exc))
    except (ValueError, OSError, RecursionError) as exc:
        out.append(Finding(CONFIG_PARSE, f"{name} does not parse: {_why(exc)}", file=name))
    return None


@dataclass
class Loaded:
    """What the loader read, as the file checks see it.

    ``weight_map``: the index's (``./`` dropped; empty without a usable index); ``listed``:
    the shards the index names (or the single file, or every top-level ``*.safetensors``
    without an index); ``indexed``: whether the index says where each tensor belongs;
    ``tables``: the header of each shard that could be read, in ``listed`` order;
    ``sizes``: the size of each shard that passed the path checks; ``first``: tensor
    name -> the first shard (in ``listed`` order) that holds it; ``as_indexed``: the shards
    whose every tensor sits where the index maps it."""

    reader: Reader
    ckpt: Checkpoint
    configs: Configs
    weight_map: dict[str, str] = field(default_factory=dict)
    listed: list[str] = field(default_factory=list)
    indexed: bool = False
    tables: dict[str, HeaderTable] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    first: dict[str, str] = field(default_factory=dict)
    as_indexed: set[str] = field(default_factory=set)


# -- the loader ---------------------------------------------------------------------------------


def read(reader: Reader, out: list[Finding]) -> Loaded:
    """Read what ``reader`` holds into a :class:`Loaded` (the configs; unless the format is
    unsupported, the index, the shard headers, the tensors and modules), appending to ``out``
    a finding for each file that could not be read or must not be opened."""
    config = _read_config(reader, "config.json", out) or {}
    hf_quant = (_read_config(reader, HF_QUANT_CONFIG, out)
                if reader.exists(HF_QUANT_CONFIG) else None)
    text = config.get("text_config")
    qc = quantization_config(config)
    configs = Configs(qc, hf_quant)
    if config or hf_quant is not None:
        descriptor, detail = detect(configs)
    else:
        descriptor, detail = BF16, "config.json unreadable"
    ckpt = Checkpoint(
        root=reader.root if isinstance(reader, LocalReader) else Path(reader.name),
        config=config,
        text_config=text if isinstance(text, dict) else config,
        format=descriptor.format,
        format_detail=detail,
        quant_config=qc if qc is not None else hf_quant,
        descriptor=descriptor,
        allowed_roots=reader.roots if isinstance(reader, LocalReader) else (),
        reader=reader,
    )
    ckpt.exclude = descriptor.exclude_list(configs)
    loaded = Loaded(reader, ckpt, configs)
    if descriptor is UNSUPPORTED:
        return loaded
    unindexed = _read_index(loaded, out)
    single = ckpt.index is None and reader.exists("model.safetensors") and not unindexed
    if unindexed:
        loaded.listed = [f for f in reader.files() if "/" not in f and f.endswith(".safetensors")]
    else:
        loaded.listed = (["model.safetensors"] if single
                         else list(dict.fromkeys(loaded.weight_map.values())))
    loaded.indexed = not (single or unindexed)
    ckpt.shards = _openable(loaded, out)
    for name, got in zip(ckpt.shards, reader.header_tables(ckpt.shards), strict=True):
        loaded.sizes[name] = reader.size(name)
        table = _read_header(reader, name, got, out)
        if table is None:
            ckpt.unreadable.add(name)
        else:
            loaded.tables[name] = table
    _place_tensors(loaded)
    ckpt.bytes_total = sum(loaded.sizes.values())
    gone = (set(loaded.listed) - set(ckpt.shards)) | ckpt.unreadable
    ckpt.unavailable = ({t for t, f in loaded.weight_map.items() if f in gone} if gone
                        else set())
    ckpt.weight_map = (dict.fromkeys(ckpt.tensors, "model.safetensors") if single
                       else loaded.weight_map)
    ckpt.modules = modules_of(ckpt.tensors.items())
    return loaded


def _read_index(loaded: Loaded, out: list[Finding]) -> bool:
    """Read ``model.safetensors.index.json`` into ``loaded.ckpt.index`` and
    ``loaded.weight_map``; True when the shards must be found without it (it is unreadable,
    or absent with no ``model.safetensors``: vLLM then loads every ``*.safetensors`` of the
    folder, ``filter_duplicate_safetensors_files`` returning them all)."""
    reader = loaded.reader
    if safe_name(reader, INDEX_NAME) is not None:
        out.append(Finding(SYMLINK_ESCAPE, f"{INDEX_NAME} resolves outside the checkpoint",
                           file=INDEX_NAME))
        return False
    if not reader.exists(INDEX_NAME):
        if reader.exists("model.safetensors"):
            return False
        out.append(
            Finding(
                INDEX_MISSING,
                "neither model.safetensors.index.json nor model.safetensors is present; the "
                "*.safetensors files present were checked without an index",
                file=INDEX_NAME,
            )
        )
        return True
    try:
        index = reader.read_json(INDEX_NAME)
        ok = (
            isinstance(index, dict)
            and isinstance(index.get("weight_map"), dict)
            # JSON gives exactly str (never a subclass): one C-level pass per side
            and set(map(type, index["weight_map"])) <= {str}
            and set(map(type, index["weight_map"].values())) <= {str}
        )
        if not ok:
            raise ValueError("weight_map must be an object of tensor names to file names")
    except NotRegularFileError as exc:
        out.append(_not_regular(INDEX_NAME, exc))
        return True
    except ReadFailed as exc:
        out.append(read_failed(exc))
        return True
    except (ValueError, OSError, RecursionError) as exc:
        out.append(
            Finding(INDEX_PARSE, f"{INDEX_NAME} does not parse: {_why(exc)}", file=INDEX_NAME)
        )
        # Validate the shards that are there rather than report every tensor missing: the
        # index is the one broken file. (vLLM would refuse to load, hence the error.)
        return True
    if not index["weight_map"]:
        # one root cause: the tensors it would map are checked from the shards instead of
        # each reported unmapped (vLLM's filter_duplicate_safetensors_files keeps only the
        # files an index names, then DefaultModelLoader._prepare_weights raises)
        out.append(Finding(INDEX_PARSE, f"{INDEX_NAME}'s weight_map is empty: vLLM loads only "
                           "the shards an index names and raises 'Cannot find any model "
                           "weights'; the *.safetensors files present were checked without it",
                           file=INDEX_NAME))
        return True
    loaded.ckpt.index = index
    entries: dict[str, str] = index["weight_map"]
    plain = {f: shard_name(f) for f in set(entries.values())}
    if any(p != f for f, p in plain.items()):
        loaded.weight_map = {t: plain[f] for t, f in entries.items()}
    else:  # the usual index: every entry is already a plain name
        loaded.weight_map = dict(entries)
    return False


def _openable(loaded: Loaded, out: list[Finding]) -> list[str]:
    """The listed shards that may be opened: named safely, inside the allowed roots, present
    and regular files (a non-regular one is also unreadable)."""
    reader, ckpt = loaded.reader, loaded.ckpt
    safe: list[str] = []
    for name in loaded.listed:
        problem = safe_name(reader, name)
        if problem == "INDEX_UNSAFE_PATH":
            out.append(
                Finding(
                    INDEX_UNSAFE_PATH,
                    f"index entry {name!r} is absolute or contains '..'; not opened",
                    file=INDEX_NAME,
                )
            )
            continue
        if problem == "SYMLINK_ESCAPE":
            out.append(
                Finding(
                    SYMLINK_ESCAPE,
                    f"{name} resolves to {reader.resolved(name)}, "
                    "outside the checkpoint; not opened",
                    file=name,
                )
            )
            continue
        try:
            what = reader.not_regular(name)
        except OSError:
            out.append(
                Finding(SHARD_MISSING, f"shard {name} named in the index does not exist", file=name)
            )
            continue
        if what is not None:
            out.append(_not_regular(name, NotRegularFileError(name, what)))
            ckpt.unreadable.add(name)
            continue
        safe.append(name)
    return safe


def _read_header(reader: Reader, name: str, got: HeaderTable | Exception,
                 out: list[Finding]) -> HeaderTable | None:
    """Shard ``name``'s validated header (``got``: what
    :meth:`~mxformats.validate.readers.interface.Reader.header_tables` gave), or None with
    the finding that says why not."""
    try:
        if isinstance(got, Exception):
            raise got
        return got
    except TensorFileError as exc:
        out.append(_header_finding(exc, name, reader.remote))
    except NotRegularFileError as exc:  # swapped in since the check of _openable
        out.append(_not_regular(name, exc))
    except ReadFailed as exc:
        out.append(read_failed(exc))
    except OSError as exc:
        out.append(Finding(HEADER_INVALID, f"cannot read: {exc.strerror or exc}", file=name))
    return None


#: ``_NEW_REF(fields)`` is ``TensorRef(*fields)`` without the named tuple's Python-level
#: ``__new__`` (it is how ``TensorRef._make`` builds one): the loader makes 139,098.
_NEW_REF = partial(tuple.__new__, TensorRef)


def _place_tensors(loaded: Loaded) -> None:
    """Fill ``ckpt.tensors`` and ``loaded.first`` from the headers read. A tensor stored in
    several shards is the one in the shard the index maps it to (without an index: the last
    listed), else the first found."""
    tensors, first, weight_map = loaded.ckpt.tensors, loaded.first, loaded.weight_map
    for shard, table in loaded.tables.items():
        names, offset = table.names, table.data_offset
        refs = list(map(_NEW_REF, zip(
            names, repeat(shard), table.dtypes, table.shapes,
            map(offset.__add__, table.begins), map(offset.__add__, table.ends),
        )))
        if first.keys().isdisjoint(names):
            first.update(dict.fromkeys(names, shard))
        else:
            for tname in names:
                first.setdefault(tname, shard)
        # a dict items view compares as a set of pairs: one C-level pass
        if not loaded.indexed or dict.fromkeys(names, shard).items() <= weight_map.items():
            loaded.as_indexed.add(shard)
            tensors.update(zip(names, refs, strict=True))
            continue
        for tname, ref in zip(names, refs, strict=True):
            if weight_map.get(tname) == shard or tname not in tensors:
                tensors[tname] = ref
