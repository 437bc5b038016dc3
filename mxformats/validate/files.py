"""Files: config and index parse, shards exist and agree with the index, headers, path safety.

:func:`load` builds the :class:`~mxformats.validate.model.Checkpoint` and returns the findings
of this group with it (the other groups work on the model). It is two parts: the loader
(``_read``: configs, index, shard headers, tensors and modules; its findings say only what
could not be read or must not be opened) and the file checks (:data:`CONFIG_CHECKS`,
:data:`SHARD_CHECKS`: one function per check over the :class:`Loaded` result).

Nothing is executed, nothing is unpickled; a file is opened only when its name is safe
(:func:`safe_name`) and it is a regular file (:func:`mxformats.tensorfile.open_regular`: a
FIFO, socket, device or directory is reported, never read, so it cannot block or feed bytes
without end). Every byte is read through the checkpoint's
:class:`~mxformats.validate.readers.interface.Reader`: a folder or a Hub repo.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterable, Iterator
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

from .arch import derive, quantization_config
from .descriptors import UNSUPPORTED, Configs, Descriptor, detect
from .descriptors.bf16 import DESCRIPTOR as BF16
from .descriptors.modelopt import modelopt_view
from .findings import Finding, Level, Severity, declare, listed
from .model import Checkpoint, Module, Options, TensorRef
from .readers import (
    RANGE_IGNORED,
    READ_FAILED,
    LocalReader,
    NotAFolder,
    Reader,
    ReadFailed,
    open_reader,
    unsafe_name,
)

__all__ = ["CONFIG_CHECKS", "SHARD_CHECKS", "LoadResult", "Loaded", "load", "read_failed", "run",
           "safe_name"]

E, W, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO
S = Level.STRUCTURE
G = "files"

CONFIG_PARSE = declare(
    "CONFIG_PARSE",
    E,
    S,
    G,
    "config.json is missing or is not a JSON object.",
    "Restore config.json from the producer's output.",
)
CONFIG_ARCH = declare(
    "CONFIG_ARCH",
    E,
    S,
    G,
    "config.json lacks a key the loader reads and has no default for, holds a malformed value "
    "(not an integer, a NaN rms_norm_eps), or implies more tensors than the shards hold.",
    "Restore the key from the producer's config (the message names it and where it sits).",
)
CONFIG_QUANT_CONFLICT = declare(
    "CONFIG_QUANT_CONFLICT",
    E,
    S,
    G,
    "quantization_config at the top level and in text_config differ; vLLM uses the top level.",
    "Keep one quantization_config (Quark writes a single top-level one).",
)
CONFIG_QUANT_CONTRADICTION = declare(
    "CONFIG_QUANT_CONTRADICTION",
    E,
    S,
    G,
    "config.json's quantization_config and hf_quant_config.json declare different formats, "
    "algorithms or exclude lists: vLLM reads config.json's and ignores the other file, so tools "
    "that read hf_quant_config.json (TensorRT-LLM, older SGLang) load another model.",
    "Regenerate one file from the other so that both say the same.",
)
FORMAT_UNSUPPORTED = declare(
    "FORMAT_UNSUPPORTED",
    E,
    S,
    G,
    "The quantization format is not one this validator verifies (no descriptor recognises it).",
    "Use a validator for that format; nothing was checked.",
)
FORMAT_NOT_NUMERIC = declare(
    "FORMAT_NOT_NUMERIC",
    INFO,
    S,
    G,
    "A recognised unquantized or source format: structural checks ran, numeric ones do not apply.",
    "Nothing to do.",
)
INDEX_PARSE = declare(
    "INDEX_PARSE",
    E,
    S,
    G,
    "model.safetensors.index.json is not JSON with a weight_map of names to files (a warning "
    "when only the metadata object is absent: transformers needs it, vLLM does not).",
    "Regenerate the index from the shards.",
)
INDEX_MISSING = declare(
    "INDEX_MISSING",
    E,
    S,
    G,
    "No model.safetensors.index.json and no model.safetensors: transformers finds no weights "
    "(vLLM would load every *.safetensors; those present were checked).",
    "Copy the index and shards completely.",
)
INDEX_PATH_NOT_PLAIN = declare(
    "INDEX_PATH_NOT_PLAIN",
    E,
    S,
    G,
    "An index entry names its shard as ./NAME: transformers opens it, but vLLM keeps a shard "
    "only when folder/ENTRY equals the path its glob found, so it skips this shard.",
    "Write the bare file name in the index.",
)
FILE_NOT_REGULAR = declare(
    "FILE_NOT_REGULAR",
    E,
    S,
    G,
    "config.json, the index or a shard is a directory, FIFO, socket or device; it was not "
    "opened.",
    "Replace it with the regular file it should be.",
)
INDEX_UNSAFE_PATH = declare(
    "INDEX_UNSAFE_PATH",
    E,
    S,
    G,
    "An index entry names an absolute path or one with '..'; it was not opened.",
    "Index entries must be file names inside the checkpoint folder.",
)
SYMLINK_ESCAPE = declare(
    "SYMLINK_ESCAPE",
    E,
    S,
    G,
    "A file is a symlink resolving outside the folder (and outside its Hugging Face cache repo).",
    "Copy the file in, or pass --allow-symlink-root for a trusted store.",
)
SHARD_MISSING = declare(
    "SHARD_MISSING",
    E,
    S,
    G,
    "A shard named in the index does not exist.",
    "Download or copy the missing shard.",
)
SHARD_STRAY = declare(
    "SHARD_STRAY",
    W,
    S,
    G,
    "A .safetensors file is not named in the index: vLLM skips it, Quark "
    "file-to-file would process it.",
    "Delete it or add its tensors to the index.",
)
HEADER_LENGTH = declare(
    "HEADER_LENGTH",
    E,
    S,
    G,
    "The 8-byte header length is absurd or runs past the file (rejected before reading).",
    "The shard is truncated or not safetensors: re-download it.",
)
HEADER_INVALID = declare(
    "HEADER_INVALID",
    E,
    S,
    G,
    "The safetensors header is not valid (JSON, dtype, shape, metadata).",
    "Re-download or re-export the shard.",
)
TENSOR_SPAN = declare(
    "TENSOR_SPAN",
    E,
    S,
    G,
    "A tensor's byte span is wrong: size not shape x dtype, out of bounds, "
    "overlapping, a hole, or the file is truncated or has trailing bytes.",
    "Re-download or re-export the shard.",
)
INDEX_TENSOR_NOT_IN_SHARD = declare(
    "INDEX_TENSOR_NOT_IN_SHARD",
    E,
    S,
    G,
    "The index maps a tensor to a shard that does not hold it (vLLM never notices).",
    "Regenerate the index, or restore the tensor.",
)
SHARD_TENSOR_NOT_IN_INDEX = declare(
    "SHARD_TENSOR_NOT_IN_INDEX",
    E,
    S,
    G,
    "A shard holds a tensor the index does not map to it (vLLM loads it anyway).",
    "Regenerate the index from the shards.",
)
TENSOR_IN_TWO_SHARDS = declare(
    "TENSOR_IN_TWO_SHARDS",
    E,
    S,
    G,
    "The same tensor name is stored in two shards.",
    "Remove the duplicate.",
)
HUB_RANGE_IGNORED = declare(
    RANGE_IGNORED,
    E,
    S,
    G,
    "hf:// only: the server answered a ranged read with 200 (the whole file) instead of 206; "
    "the read was abandoned rather than download the file.",
    "Use an endpoint (HF_ENDPOINT, proxy) that honours HTTP Range requests.",
)
HUB_READ_FAILED = declare(
    READ_FAILED,
    E,
    S,
    G,
    "hf:// only: a ranged read failed after huggingface_hub's retries, or its answer was not "
    "the range asked: an HTTP error, a dropped connection, a wrong Content-Range or "
    "Content-Length, a file size other than the API's, a short or long body.",
    "Run again (a network fault), or re-upload the file the finding names.",
)
TOTAL_SIZE_MISMATCH = declare(
    "TOTAL_SIZE_MISMATCH",
    W,
    S,
    G,
    "metadata.total_size is neither the sum of tensor bytes nor the sum of shard file sizes "
    "(or not an integer). No loader reads it; an absent one is fine.",
    "Regenerate the index.",
)

INDEX_NAME = "model.safetensors.index.json"
#: ModelOpt's own config file (vLLM ``ModelOptQuantConfigBase.get_config_filenames``).
HF_QUANT_CONFIG = "hf_quant_config.json"


@dataclass
class LoadResult:
    """``ckpt`` (None when nothing could be read), this group's findings, and ``fatal``: a
    reason the run cannot go on (exit 2), e.g. an unsupported format or unreadable folder."""

    ckpt: Checkpoint | None
    findings: list[Finding] = field(default_factory=list)
    fatal: str | None = None


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


def _not_plain_entries(weight_map: dict[str, str]) -> Iterator[Finding]:
    """One finding per distinct index entry that names its shard as ``./NAME``.

    transformers joins the folder and the entry and opens the file. vLLM keeps a globbed
    shard only when ``os.path.join(folder, entry)`` equals its path, a string comparison
    (vllm/model_executor/model_loader/weight_utils.py, ``filter_duplicate_safetensors_files``),
    so ``folder/./NAME`` never matches ``folder/NAME`` and the shard is skipped."""
    for entry in dict.fromkeys(weight_map.values()):
        plain = shard_name(entry)
        if plain != entry:
            yield Finding(
                INDEX_PATH_NOT_PLAIN,
                f"index entry {entry!r} names {plain}: vLLM compares the joined path with "
                "the files it globbed and skips this shard",
                file=INDEX_NAME,
            )


def _index_metadata(index: dict[str, Any]) -> Finding | None:
    """``metadata`` as the loaders read it. Neither reads ``total_size``: vLLM reads only
    ``weight_map`` (vllm/model_executor/model_loader/weight_utils.py,
    ``filter_duplicate_safetensors_files``); transformers 4.57.6 reads ``weight_map`` and
    indexes ``index["metadata"]`` (transformers/utils/hub.py, ``get_checkpoint_shard_files``),
    so only a missing metadata object matters, and only to transformers."""
    meta = index.get("metadata")
    if isinstance(meta, dict):
        return None
    what = "is missing" if meta is None else f"is a JSON {type(meta).__name__}"
    return Finding(
        INDEX_PARSE,
        f"the metadata object {what}: transformers' get_checkpoint_shard_files fails on it "
        "(vLLM reads only weight_map)",
        file=INDEX_NAME,
        severity=W,
    )



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


def _contradictions(configs: Configs, chosen: Descriptor) -> list[Finding]:
    """config.json's ``quantization_config`` against ``hf_quant_config.json``. vLLM reads the
    former when it exists and the latter only otherwise (``get_quant_config`` in
    ``vllm/model_executor/model_loader/weight_utils.py``; ModelOpt's ``get_config_filenames``
    names hf_quant_config.json), so a pair that disagrees loads as whichever it happens to
    read: the format each declares and ModelOpt's algorithm and exclude list must agree."""
    if configs.quant_config is None or configs.hf_quant_config is None:
        return []
    alone = detect(Configs(None, configs.hf_quant_config))[0]
    top, other = modelopt_view(configs.quant_config), modelopt_view(configs.hf_quant_config)
    problems: list[str] = []
    if alone is not chosen:
        problems.append(f"config.json declares {chosen.format.value}, "
                        f"{HF_QUANT_CONFIG} declares {alone.format.value}")
    elif top is not None and other is not None:
        if top[0] != other[0]:
            problems.append(f"quant_algo {top[0]!r} in config.json, {other[0]!r} in "
                            f"{HF_QUANT_CONFIG}")
        if top[2] is not None and other[2] is not None and top[2] != other[2]:
            problems.append(f"group_size {top[2]!r} in config.json, {other[2]!r} in "
                            f"{HF_QUANT_CONFIG}")
        if sorted(top[1]) != sorted(other[1]):
            extra = sorted(set(top[1]) ^ set(other[1]))
            problems.append(f"the exclude lists differ ({len(extra)} entries in one only, "
                            f"e.g. {extra[0]!r})" if extra else "the exclude lists differ")
    return [Finding(CONFIG_QUANT_CONTRADICTION, f"{p}: vLLM reads config.json's and ignores "
                    f"{HF_QUANT_CONFIG}", file=HF_QUANT_CONFIG) for p in problems]


def load(root_arg: str | os.PathLike[str] | Reader, opts: Options) -> LoadResult:
    """Read configs, the index and shard headers of ``root_arg`` (no tensor data): a folder,
    ``hf://ORG/NAME[@REVISION]`` or an open :class:`~mxformats.validate.readers.interface.Reader`.

    The loader (``_read``) builds the :class:`Checkpoint` and reports only what it could
    not read or open; the file checks (:data:`CONFIG_CHECKS`, :data:`SHARD_CHECKS`) then judge
    what it read; ``arch.derive`` (``CONFIG_ARCH``) comes last. The findings are listed
    (:func:`~mxformats.validate.findings.listed`): a stale index or a duplicated shard is
    one root cause behind a finding per tensor, so per check the first few are listed and
    the rest counted in one summary with their worst severity.

    The cyclic garbage collector is paused meanwhile: a full-size checkpoint's headers make
    several objects per tensor (139,098 tensors for Kimi-K2.6), none of them in a cycle (so
    reference counting still frees them), and the collections the allocations trigger walk
    the growing graph again and again (a third of the load's time, measured with
    benchmarks/test_validate_bench.py)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _load(root_arg, opts)
    finally:
        if enabled:
            gc.enable()


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


def _load(root_arg: str | os.PathLike[str] | Reader, opts: Options) -> LoadResult:
    if isinstance(root_arg, Reader):
        reader = root_arg
    else:
        try:
            reader = open_reader(root_arg, opts.allow_symlink_root, opts.hub_connections)
        except NotAFolder as exc:
            return LoadResult(None, [], str(exc))
    out: list[Finding] = []
    loaded = _read(reader, out)
    ckpt = loaded.ckpt
    for config_check in CONFIG_CHECKS:
        out.extend(config_check(loaded))
    if ckpt.descriptor is UNSUPPORTED:
        return LoadResult(ckpt, list(listed(out)),
                          f"unsupported quantization format: {ckpt.format_detail}")
    for shard_check in SHARD_CHECKS:
        out.extend(shard_check(loaded))
    # the architecture last: its inventory is bounded by what the headers hold
    if ckpt.config:
        out += [Finding(CONFIG_ARCH, p, file="config.json") for p in derive(ckpt)]
    return LoadResult(ckpt, list(listed(out)), None)


# -- the loader ---------------------------------------------------------------------------------


def _read(reader: Reader, out: list[Finding]) -> Loaded:
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
    modules = ckpt.modules
    for tname, ref in ckpt.tensors.items():
        module, _, param = tname.rpartition(".")  # TensorRef.module and .param, in one split
        mod = modules.get(module)
        if mod is None:
            mod = modules[module] = Module(module)
        mod.tensors[param] = ref
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


# -- the file checks ----------------------------------------------------------------------------


def _quant_config_conflict(loaded: Loaded) -> Iterator[Finding]:
    """``CONFIG_QUANT_CONFLICT``: a top-level and a ``text_config`` quantization_config that
    differ (vLLM's ``KimiK25Config`` lets the top level win)."""
    config = loaded.ckpt.config
    text = config.get("text_config")
    top_qc = config.get("quantization_config")
    nested_qc = text.get("quantization_config") if isinstance(text, dict) else None
    if isinstance(top_qc, dict) and isinstance(nested_qc, dict) and top_qc != nested_qc:
        yield Finding(
            CONFIG_QUANT_CONFLICT,
            "quantization_config and text_config.quantization_config differ; vLLM's "
            "KimiK25Config lets the top level win",
            file="config.json",
        )


def _config_contradictions(loaded: Loaded) -> list[Finding]:
    descriptor = loaded.ckpt.descriptor
    return [] if descriptor is None else _contradictions(loaded.configs, descriptor)


def _format_support(loaded: Loaded) -> Iterator[Finding]:
    """``FORMAT_UNSUPPORTED`` (the run stops), or ``FORMAT_NOT_NUMERIC`` for a recognised
    format without numeric checks."""
    ckpt = loaded.ckpt
    if ckpt.descriptor is UNSUPPORTED:
        yield Finding(FORMAT_UNSUPPORTED, ckpt.format_detail, file="config.json")
    elif ckpt.config and not ckpt.numeric:
        yield Finding(
            FORMAT_NOT_NUMERIC,
            f"{ckpt.format_detail}: structural checks only; numeric checks do not apply",
            file="config.json",
        )


def _index_entries(loaded: Loaded) -> Iterator[Finding]:
    """``INDEX_PATH_NOT_PLAIN`` and the ``metadata`` object of a readable index."""
    index = loaded.ckpt.index
    if index is None:
        return
    yield from _not_plain_entries(index["weight_map"])
    meta_finding = _index_metadata(index)
    if meta_finding is not None:
        yield meta_finding


def _spans_past_end(loaded: Loaded) -> Iterator[Finding]:
    """``TENSOR_SPAN`` for a tensor that ends past its file. ``parse_header`` checks every
    span against dtype × shape and the file size (a ``TensorFileError``, reported by the
    loader); this guards a reader that did not."""
    for shard, table in loaded.tables.items():
        past = loaded.sizes[shard] - table.data_offset  # a relative end beyond it is past EOF
        if max(table.ends, default=0) <= past:
            continue
        for tname, dtype, shape, begin, end in zip(table.names, table.dtypes, table.shapes,
                                                   table.begins, table.ends, strict=True):
            if end > past:
                yield Finding(
                    TENSOR_SPAN,
                    f"span [{table.data_offset + begin}, {table.data_offset + end}) does not "
                    f"hold {dtype}{list(shape)}",
                    file=shard,
                    tensor=tname,
                    offset=table.data_offset + begin,
                )


def _stored_twice(loaded: Loaded) -> Iterator[Finding]:
    """``TENSOR_IN_TWO_SHARDS``: each copy of a tensor after the first."""
    if sum(len(t.names) for t in loaded.tables.values()) == len(loaded.first):
        return  # every name once
    for shard, table in loaded.tables.items():
        for tname, begin in zip(table.names, table.begins, strict=True):
            first = loaded.first[tname]
            if first != shard:
                yield Finding(
                    TENSOR_IN_TWO_SHARDS,
                    f"{tname} is stored in {first} and {shard}",
                    file=shard,
                    tensor=tname,
                    offset=table.data_offset + begin,
                )


def _not_in_index(loaded: Loaded) -> Iterator[Finding]:
    """``SHARD_TENSOR_NOT_IN_INDEX``: a shard holds a tensor the index does not map to it."""
    for shard, table in loaded.tables.items():
        if shard in loaded.as_indexed:
            continue
        for tname, begin in zip(table.names, table.begins, strict=True):
            mapped = loaded.weight_map.get(tname)
            if mapped != shard:
                yield Finding(
                    SHARD_TENSOR_NOT_IN_INDEX,
                    f"{shard} holds {tname} but the index "
                    + ("does not list it" if mapped is None else f"maps it to {mapped}"),
                    file=shard,
                    tensor=tname,
                    offset=table.data_offset + begin,
                )


def _index_not_in_shard(loaded: Loaded) -> Iterator[Finding]:
    """``INDEX_TENSOR_NOT_IN_SHARD``: the index maps a tensor to a shard that was read and
    does not hold it."""
    if loaded.weight_map.items() <= loaded.first.items():
        return  # every entry's shard holds its tensor (first)
    ckpt = loaded.ckpt
    gone = (set(loaded.listed) - set(ckpt.shards)) | ckpt.unreadable
    for tname, shard in loaded.weight_map.items():
        have = ckpt.tensors.get(tname)
        if ((have is None or have.file != shard) and shard not in gone
                and loaded.first.get(tname) != shard):
            yield Finding(
                INDEX_TENSOR_NOT_IN_SHARD,
                f"the index maps {tname} to {shard}, which does not hold it",
                file=shard,
                tensor=tname,
            )


def _total_size(loaded: Loaded) -> Iterator[Finding]:
    """``TOTAL_SIZE_MISMATCH``: the index's ``metadata.total_size``, when every listed shard
    was read, must be the tensor bytes or the file bytes (either convention)."""
    ckpt = loaded.ckpt
    if ckpt.index is None or len(ckpt.shards) != len(loaded.listed) or ckpt.unreadable:
        return
    meta = ckpt.index.get("metadata")
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if total is None:
        return
    if isinstance(total, bool) or not isinstance(total, int):
        yield Finding(
            TOTAL_SIZE_MISMATCH,
            f"total_size is a JSON {type(total).__name__}, not an integer",
            file=INDEX_NAME,
        )
        return
    tensor_bytes = sum(sum(t.ends) - sum(t.begins) for t in loaded.tables.values())
    if total not in (tensor_bytes, ckpt.bytes_total):
        yield Finding(
            TOTAL_SIZE_MISMATCH,
            f"total_size {total} is neither the tensor bytes {tensor_bytes} nor "
            f"the file bytes {ckpt.bytes_total}",
            file=INDEX_NAME,
        )


def _stray_shards(loaded: Loaded) -> Iterator[Finding]:
    """``SHARD_STRAY``: a ``.safetensors`` file (recursive, not following symlinked folders)
    the index does not name."""
    listed = set(loaded.listed)
    for rel in loaded.reader.files():
        if rel.endswith(".safetensors") and rel not in listed:
            yield Finding(SHARD_STRAY, f"{rel} is not named in the index", file=rel)


#: The checks of the configs, in run order (they run for an unsupported format too).
CONFIG_CHECKS: tuple[Callable[[Loaded], Iterable[Finding]], ...] = (
    _quant_config_conflict, _config_contradictions, _format_support,
)
#: The checks of the index and the shards, in run order.
SHARD_CHECKS: tuple[Callable[[Loaded], Iterable[Finding]], ...] = (
    _index_entries, _spans_past_end, _stored_twice, _not_in_index, _index_not_in_shard,
    _total_size, _stray_shards,
)


def run(ckpt: Checkpoint, opts: Options) -> Iterator[Finding]:
    """The files group runs inside :func:`load`; nothing more to do here."""
    return iter(())
