"""Files: config and index parse, shards exist and agree with the index, headers, path safety.

:func:`load` builds the :class:`~mxformats.validate.model.Checkpoint` and returns the findings
of this group with it (the other groups work on the model). It is two parts: the loader
(:func:`~mxformats.validate.loader.read`: configs, index, shard headers, tensors and modules;
its findings say only what could not be read or must not be opened) and the file checks
(:data:`CONFIG_CHECKS`, :data:`SHARD_CHECKS`: one function per check over the
:class:`~mxformats.validate.loader.Loaded` result).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from mxformats.tensorfile import shard_name

from .arch import derive
from .checkmodule import CheckModule
from .descriptors import UNSUPPORTED, Configs, Descriptor, detect
from .descriptors.modelopt import modelopt_view
from .findings import Finding, Severity, listed
from .loader import (
    CONFIG_ARCH,
    CONFIG_QUANT_CONFLICT,
    CONFIG_QUANT_CONTRADICTION,
    FORMAT_NOT_NUMERIC,
    FORMAT_UNSUPPORTED,
    HF_QUANT_CONFIG,
    INDEX_NAME,
    INDEX_PARSE,
    INDEX_PATH_NOT_PLAIN,
    INDEX_TENSOR_NOT_IN_SHARD,
    SHARD_STRAY,
    SHARD_TENSOR_NOT_IN_INDEX,
    TENSOR_IN_TWO_SHARDS,
    TENSOR_SPAN,
    TOTAL_SIZE_MISMATCH,
    Loaded,
    read,
)
from .model import Checkpoint, Options
from .readers import NotAFolder, Reader, open_reader

__all__ = ["CONFIG_CHECKS", "SHARD_CHECKS", "LoadResult", "load", "run"]


@dataclass
class LoadResult:
    """``ckpt`` (None when nothing could be read), this group's findings, and ``fatal``: a
    reason the run cannot go on (exit 2), e.g. an unsupported format or unreadable folder."""

    ckpt: Checkpoint | None
    findings: list[Finding] = field(default_factory=list)
    fatal: str | None = None


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
        severity=Severity.WARNING,
    )


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

    The loader (:func:`.loader.read`) builds the :class:`Checkpoint` and reports only what it
    could not read or open; the file checks (:data:`CONFIG_CHECKS`, :data:`SHARD_CHECKS`) then
    judge what it read; ``arch.derive`` (``CONFIG_ARCH``) comes last. The findings are listed
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


def _load(root_arg: str | os.PathLike[str] | Reader, opts: Options) -> LoadResult:
    if isinstance(root_arg, Reader):
        reader = root_arg
    else:
        try:
            reader = open_reader(root_arg, opts.allow_symlink_root, opts.hub_connections)
        except NotAFolder as exc:
            return LoadResult(None, [], str(exc))
    out: list[Finding] = []
    loaded = read(reader, out)
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


#: The files checks as the runner lists them (they run inside :func:`load`).
CHECK = CheckModule("files", run)
