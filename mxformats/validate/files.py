"""Files: config and index parse, shards exist and agree with the index, headers, path safety.

:func:`load` builds the :class:`~mxformats.validate.model.Checkpoint` and returns the findings
of this group with it (the other groups work on the model). Nothing is executed, nothing is
unpickled; a file is opened only when its name is safe (:func:`safe_name`) and it is a regular
file (:func:`mxformats.tensorfile.open_regular`: a FIFO, socket, device or directory is
reported, never read, so it cannot block or feed bytes without end). Every byte is read
through the checkpoint's :class:`~mxformats.validate.reader.Reader`: a folder or a Hub repo.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mxformats.tensorfile import (
    ErrorKind,
    NotRegularFileError,
    TensorFileError,
    shard_name,
)

from .arch import derive, quantization_config
from .descriptors import UNSUPPORTED, Configs, Descriptor, detect
from .descriptors.bf16 import DESCRIPTOR as BF16
from .descriptors.modelopt import modelopt_view
from .findings import Finding, Level, Severity, declare
from .model import Checkpoint, Module, Options, TensorRef
from .reader import (
    RANGE_IGNORED,
    READ_FAILED,
    LocalReader,
    NotAFolder,
    Reader,
    ReadFailed,
    open_reader,
    unsafe_name,
)

__all__ = ["LoadResult", "load", "read_failed", "run", "safe_name"]

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
    ``hf://ORG/NAME[@REVISION]`` or an open :class:`~mxformats.validate.reader.Reader`.

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


def _load(root_arg: str | os.PathLike[str] | Reader, opts: Options) -> LoadResult:
    if isinstance(root_arg, Reader):
        reader = root_arg
    else:
        try:
            reader = open_reader(root_arg, opts.allow_symlink_root)
        except NotAFolder as exc:
            return LoadResult(None, [], str(exc))
    out: list[Finding] = []

    # -- configs --------------------------------------------------------------------------
    config = _read_config(reader, "config.json", out) or {}
    hf_quant = (_read_config(reader, HF_QUANT_CONFIG, out)
                if reader.exists(HF_QUANT_CONFIG) else None)
    text = config.get("text_config")
    text_config = text if isinstance(text, dict) else config
    top_qc = config.get("quantization_config")
    nested_qc = text.get("quantization_config") if isinstance(text, dict) else None
    if isinstance(top_qc, dict) and isinstance(nested_qc, dict) and top_qc != nested_qc:
        out.append(
            Finding(
                CONFIG_QUANT_CONFLICT,
                "quantization_config and text_config.quantization_config differ; vLLM's "
                "KimiK25Config lets the top level win",
                file="config.json",
            )
        )
    qc = quantization_config(config)
    configs = Configs(qc, hf_quant)
    if config or hf_quant is not None:
        descriptor, detail = detect(configs)
    else:
        descriptor, detail = BF16, "config.json unreadable"
    out += _contradictions(configs, descriptor)
    ckpt = Checkpoint(
        root=reader.root if isinstance(reader, LocalReader) else Path(reader.name),
        config=config,
        text_config=text_config,
        format=descriptor.format,
        format_detail=detail,
        quant_config=qc if qc is not None else hf_quant,
        descriptor=descriptor,
        allowed_roots=reader.roots if isinstance(reader, LocalReader) else (),
        reader=reader,
    )
    ckpt.exclude = descriptor.exclude_list(configs)
    if descriptor is UNSUPPORTED:
        out.append(Finding(FORMAT_UNSUPPORTED, detail, file="config.json"))
        return LoadResult(ckpt, out, f"unsupported quantization format: {detail}")
    if config and not descriptor.numeric:
        out.append(
            Finding(
                FORMAT_NOT_NUMERIC,
                f"{detail}: structural checks only; numeric checks do not apply",
                file="config.json",
            )
        )
    # -- index ----------------------------------------------------------------------------
    weight_map: dict[str, str] = {}
    unindexed = False
    if safe_name(reader, INDEX_NAME) is not None:
        out.append(
            Finding(
                SYMLINK_ESCAPE, f"{INDEX_NAME} resolves outside the checkpoint", file=INDEX_NAME
            )
        )
    elif reader.exists(INDEX_NAME):
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
            ckpt.index = index
            plain = {f: shard_name(f) for f in set(index["weight_map"].values())}
            weight_map = {t: plain[f] for t, f in index["weight_map"].items()}
            out.extend(_not_plain_entries(index["weight_map"]))
            meta_finding = _index_metadata(index)
            if meta_finding is not None:
                out.append(meta_finding)
        except NotRegularFileError as exc:
            out.append(_not_regular(INDEX_NAME, exc))
            unindexed = True
        except ReadFailed as exc:
            out.append(read_failed(exc))
            unindexed = True
        except (ValueError, OSError, RecursionError) as exc:
            out.append(
                Finding(INDEX_PARSE, f"{INDEX_NAME} does not parse: {_why(exc)}", file=INDEX_NAME)
            )
            # Validate the shards that are there rather than report every tensor missing: the
            # index is the one broken file. (vLLM would refuse to load, hence the error.)
            unindexed = True
    elif not reader.exists("model.safetensors"):
        out.append(
            Finding(
                INDEX_MISSING,
                "neither model.safetensors.index.json nor model.safetensors is present; the "
                "*.safetensors files present were checked without an index",
                file=INDEX_NAME,
            )
        )
        # vLLM loads every *.safetensors of a folder without an index
        # (filter_duplicate_safetensors_files returns them all): check what it would load.
        unindexed = True
    single = ckpt.index is None and reader.exists("model.safetensors") and not unindexed
    if unindexed:
        shards = [f for f in reader.files() if "/" not in f and f.endswith(".safetensors")]
    else:
        shards = ["model.safetensors"] if single else list(dict.fromkeys(weight_map.values()))

    # -- shards ---------------------------------------------------------------------------
    safe_shards: list[str] = []
    for name in shards:
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
        safe_shards.append(name)
    ckpt.shards = safe_shards

    seen: dict[str, str] = {}
    tensor_bytes = file_bytes = 0
    for name in safe_shards:
        size = reader.size(name)
        file_bytes += size
        try:
            header, data_offset = reader.header(name)
        except TensorFileError as exc:
            ckpt.unreadable.add(name)
            out.append(_header_finding(exc, name, reader.remote))
            continue
        except NotRegularFileError as exc:  # swapped in since the check above
            ckpt.unreadable.add(name)
            out.append(_not_regular(name, exc))
            continue
        except ReadFailed as exc:
            ckpt.unreadable.add(name)
            out.append(read_failed(exc))
            continue
        except OSError as exc:
            ckpt.unreadable.add(name)
            out.append(Finding(HEADER_INVALID, f"cannot read: {exc.strerror or exc}", file=name))
            continue
        indexed = not (single or unindexed)
        for tname, entry in header.items():
            if tname == "__metadata__":
                continue
            b, e = entry["data_offsets"]
            ref = TensorRef(
                tname, name, entry["dtype"], tuple(entry["shape"]), data_offset + b, data_offset + e
            )
            # parse_header checked the span against dtype × shape and the file size (a
            # TensorFileError, reported above); this guards a reader that did not
            if ref.end > size:
                out.append(
                    Finding(
                        TENSOR_SPAN,
                        f"span [{ref.begin}, {ref.end}) does not hold {ref.dtype}{list(ref.shape)}",
                        file=name,
                        tensor=tname,
                        offset=ref.begin,
                    )
                )
            tensor_bytes += e - b
            first = seen.setdefault(tname, name)
            if first != name:
                out.append(
                    Finding(
                        TENSOR_IN_TWO_SHARDS,
                        f"{tname} is stored in {first} and {name}",
                        file=name,
                        tensor=tname,
                        offset=ref.begin,
                    )
                )
            mapped = weight_map.get(tname) if indexed else name
            if mapped != name:
                out.append(
                    Finding(
                        SHARD_TENSOR_NOT_IN_INDEX,
                        f"{name} holds {tname} but the index "
                        + ("does not list it" if mapped is None else f"maps it to {mapped}"),
                        file=name,
                        tensor=tname,
                        offset=ref.begin,
                    )
                )
            if mapped == name or tname not in ckpt.tensors:
                ckpt.tensors[tname] = ref
    ckpt.bytes_total = file_bytes
    unsafe = set(shards) - set(safe_shards)
    gone = unsafe | ckpt.unreadable
    ckpt.unavailable = {t for t, f in weight_map.items() if f in gone} if gone else set()
    for tname, shard in weight_map.items():
        have = ckpt.tensors.get(tname)
        if (have is None or have.file != shard) and shard not in gone:
            if seen.get(tname) == shard:
                continue
            out.append(
                Finding(
                    INDEX_TENSOR_NOT_IN_SHARD,
                    f"the index maps {tname} to {shard}, which does not hold it",
                    file=shard,
                    tensor=tname,
                )
            )
    ckpt.weight_map = weight_map if not single else {t: "model.safetensors" for t in ckpt.tensors}

    # total_size, either convention
    if ckpt.index is not None and not unsafe and not (set(shards) - set(safe_shards)):
        meta = ckpt.index.get("metadata")
        total = meta.get("total_size") if isinstance(meta, dict) else None
        if total is None or ckpt.unreadable:
            pass
        elif isinstance(total, bool) or not isinstance(total, int):
            out.append(
                Finding(
                    TOTAL_SIZE_MISMATCH,
                    f"total_size is a JSON {type(total).__name__}, not an integer",
                    file=INDEX_NAME,
                )
            )
        elif total not in (tensor_bytes, file_bytes):
            out.append(
                Finding(
                    TOTAL_SIZE_MISMATCH,
                    f"total_size {total} is neither the tensor bytes {tensor_bytes} nor "
                    f"the file bytes {file_bytes}",
                    file=INDEX_NAME,
                )
            )

    # stray shards (recursive, not following symlinked folders)
    listed = set(shards)
    for rel in reader.files():
        if rel.endswith(".safetensors") and rel not in listed:
            out.append(Finding(SHARD_STRAY, f"{rel} is not named in the index", file=rel))

    # modules
    modules = ckpt.modules
    for tname, ref in ckpt.tensors.items():
        module, _, param = tname.rpartition(".")  # TensorRef.module and .param, in one split
        mod = modules.get(module)
        if mod is None:
            mod = modules[module] = Module(module)
        mod.tensors[param] = ref
    # the architecture last: its inventory is bounded by what the headers hold
    if config:
        out += [Finding(CONFIG_ARCH, p, file="config.json") for p in derive(ckpt)]
    return LoadResult(ckpt, out, None)


def run(ckpt: Checkpoint, opts: Options) -> Iterator[Finding]:
    """The files group runs inside :func:`load`; nothing more to do here."""
    return iter(())
