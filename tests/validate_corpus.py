"""Helpers of the validator's corruption corpus (tests/test_validate_corpus.py).

A :class:`Case` is a declarative record: the clean twin it starts from (one generated checkpoint
per base, see :data:`BASES`), the corruption applied to a copy, the level and options it runs
at, its expected exit code and the exact set of findings ``(check ID, severity, tensor)`` that
differ from the clean twin's. Each injector plants one load failure seen in practice (a
truncated shard, a renamed or dropped tensor, a wrong dtype, shape or scale) and edits files on
disk only (shards through :mod:`mxformats.tensorfile`, headers byte by byte).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mxformats.tensorfile import read_header, read_safetensors, write_safetensors
from mxformats.validate.descriptors import by_format
from mxformats.validate.findings import Level

INDEX = "model.safetensors.index.json"
EXPERT = "model.layers.1.mlp.experts.1.gate_proj"
Tensors = dict[str, dict[str, Any]]
Finding = tuple[str, str, "str | None"]

#: A base whose fmt starts with this is a copy of that producer fixture (tests/data/producers).
PRODUCER = "producer:"
#: The folder of the INT4 group-size fixtures, relative to tests/data/producers.
INT4_GROUPS = "../int4-groups/"
#: The bases built by :func:`make_mixed_ct` and :func:`make_modelopt_fp8_block`.
MIXED = "mixed:compressed-tensors"
MODELOPT_FP8 = "modelopt:fp8-pb-wo"
MODELOPT_MIXED = "modelopt:mixed-precision"
#: base name -> (make_kimi_checkpoint fmt, keyword arguments)
BASES: dict[str, tuple[str, dict[str, Any]]] = {
    "mxfp4": ("quark-mxfp4", {}),
    "w4a8": ("quark-w4a8", {}),
    "ct": ("compressed-tensors-int4", {}),
    "bf16": ("bf16", {}),
    "mxfp4-mm": ("quark-mxfp4", {"multimodal": True}),
    "ct-mm": ("compressed-tensors-int4", {"multimodal": True}),
    "fp8": ("fp8-block-deepseek", {}),
    "ct-fp8": ("compressed-tensors-fp8-block", {}),
    "ct-fp8-mm": ("compressed-tensors-fp8-block", {"multimodal": True}),
    # NVFP4 K2: the producer fixtures themselves (their BF16 source is src-bf16)
    "nvfp4-mo": (PRODUCER + "kimi-k2-nvfp4-modelopt", {}),
    # FP8 block K2: the producer fixtures (DeepGEMM per_block_cast_to_fp8, llm-compressor)
    "fp8-prod": (PRODUCER + "kimi-k2-fp8-block-deepseek", {}),
    "ct-fp8-prod": (PRODUCER + "kimi-k2-fp8-block-compressed-tensors", {}),
    "bf16-prod": (PRODUCER + "src-bf16", {}),
    "mxfp4-prod": (PRODUCER + "kimi-k2-mxfp4-quark", {}),
    "nvfp4-ct": (PRODUCER + "kimi-k2-nvfp4-compressed-tensors", {}),
    # the other producer fixtures as they were written
    "ct-prod": (PRODUCER + "kimi-k2-int4-compressed-tensors", {}),
    "w4a8-prod": (PRODUCER + "kimi-k2-w4a8-quark", {}),
    "nvfp4-mo-mm": ("modelopt-nvfp4", {"multimodal": True}),
    "nvfp4-ct-mm": ("compressed-tensors-nvfp4", {"multimodal": True}),
    # compressed-tensors INT4 at the other group sizes vLLM loads, written by llm-compressor
    # (tests/data/int4-groups/README.md): group 128 (layer 0's dense MLP) and per channel
    "ct-g128": (PRODUCER + INT4_GROUPS + "kimi-k2-int4-g128-compressed-tensors", {}),
    "ct-channel": (PRODUCER + INT4_GROUPS + "kimi-k2-int4-channel-compressed-tensors", {}),
    # compressed-tensors mixed precision: layer 1's experts INT4, layer 2's NVFP4
    "ct-mixed": (MIXED, {}),
    # ModelOpt FP8_PB_WO (made from the DeepSeek layout; no producer fixture)
    "mo-fp8": (MODELOPT_FP8, {}),
    "mo-mixed": (MODELOPT_MIXED, {}),
}


@dataclass(frozen=True)
class Case:
    """One corpus entry. ``findings`` holds the tuples present after the corruption and not in
    the clean twin; ``removed`` those of the twin that disappear (rare, declared)."""

    name: str
    base: str
    corrupt: Callable[[Path], None]
    exit: int
    findings: frozenset[Finding]
    level: Level = Level.STRUCTURE
    source: bool | str = False  # run with --source on the twin's BF16 source (a base name:
    # on that base's BF16 source instead; its clean twin still runs on its own)
    removed: frozenset[Finding] = frozenset()
    xfail: str | None = None


def case(name: str, base: str, corrupt: Callable[[Path], None], exit: int,
         findings: set[Finding], **kw: Any) -> Case:
    return Case(name, base, corrupt, exit, frozenset(findings), **kw)


# -- file helpers --------------------------------------------------------------------------------


def index(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((path / INDEX).read_text())
    return data


def write_index(path: Path, data: dict[str, Any]) -> None:
    (path / INDEX).write_text(json.dumps(data, indent=2))


def shards(path: Path) -> list[str]:
    """The shards the index names, or the folder's one file where it has no index."""
    if not (path / INDEX).exists():
        return sorted(p.name for p in path.glob("*.safetensors"))
    return sorted(set(index(path)["weight_map"].values()))


def _sizes(path: Path, names: list[str]) -> tuple[int, int]:
    tensor = file = 0
    for s in names:
        header, _ = read_header(path / s)
        tensor += sum(e["data_offsets"][1] - e["data_offsets"][0]
                      for k, e in header.items() if k != "__metadata__")
        file += (path / s).stat().st_size
    return tensor, file


def edit(path: Path, fn: Callable[[Tensors], None], *, reindex: bool = True) -> None:
    """Rewrite the shards after ``fn({shard: {name: array}})``; the index follows the shards
    (keeping its total_size convention) unless ``reindex`` is false. A checkpoint of one
    model.safetensors has no index to follow."""
    names = shards(path)
    data = {s: read_safetensors(path / s) for s in names}
    if not (path / INDEX).exists():
        fn(data)
        for s, tensors in data.items():
            write_safetensors(path / s, tensors)
        return
    idx = index(path)
    tensor_before, _ = _sizes(path, names)
    quark_convention = idx["metadata"]["total_size"] != tensor_before
    fn(data)
    for s, tensors in data.items():
        write_safetensors(path / s, tensors)
    if reindex:
        idx["weight_map"] = dict(sorted((t, s) for s, ts in data.items() for t in ts))
    tensor, file = _sizes(path, names)
    idx["metadata"]["total_size"] = file if quark_convention else tensor
    write_index(path, idx)


def find(data: Tensors, name: str) -> str:
    return next(s for s, tensors in data.items() if name in tensors)


def set_tensor(name: str, fn: Callable[[Any], Any]) -> Callable[[Path], None]:
    """An injector replacing tensor ``name`` by ``fn(array)``."""
    def run(path: Path) -> None:
        def inner(data: Tensors) -> None:
            s = find(data, name)
            data[s][name] = fn(data[s][name].copy())
        edit(path, inner)
    return run


def config(fn: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def run(path: Path) -> None:
        cfg = json.loads((path / "config.json").read_text())
        fn(cfg)
        (path / "config.json").write_text(json.dumps(cfg, indent=2))
    return run


def json_file(name: str, fn: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    """An injector editing the JSON object file ``name`` (hf_quant_config.json...)."""
    def run(path: Path) -> None:
        data = json.loads((path / name).read_text())
        fn(data)
        (path / name).write_text(json.dumps(data, indent=2))
    return run


def drop_tensor(name: str) -> Callable[[Path], None]:
    """An injector deleting tensor ``name`` (the index follows)."""
    def run(path: Path) -> None:
        edit(path, lambda data: data[find(data, name)].pop(name))
    return run


def raw_header(shard: Path) -> tuple[dict[str, Any], bytes]:
    raw = shard.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_raw(shard: Path, header: dict[str, Any], data: bytes) -> None:
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    shard.write_bytes(struct.pack("<Q", len(text)) + text + data)


def by_offset(header: dict[str, Any]) -> list[str]:
    return sorted((k for k in header if k != "__metadata__"),
                  key=lambda k: header[k]["data_offsets"][0])


def nibble_swap(a: Any) -> Any:
    return ((a >> 4) | (a << 4)).astype(np.uint8)


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def link_escape(path: Path) -> None:
    """Move the last shard outside the folder and link to it."""
    name = shards(path)[-1]
    outside = path.parent / f"{path.name}-outside"
    outside.mkdir()
    os.replace(path / name, outside / name)
    (path / name).symlink_to(outside / name)


# -- issue 12 (files, output): non-regular files, lenient index and header forms ----------------


def fifo(name: str) -> Callable[[Path], None]:
    """Replace ``name`` (config.json, the index, a shard) by a FIFO with no writer."""
    def run(path: Path) -> None:
        target = path / (shards(path)[0] if name == "shard" else name)
        target.unlink()
        os.mkfifo(target)
    return run


def socket_shard(path: Path) -> None:
    """Replace the last shard by a Unix socket (bound through a relative name: socket paths
    are limited to about 100 bytes)."""
    import socket

    name = shards(path)[-1]
    (path / name).unlink()
    cwd = os.getcwd()
    os.chdir(path)
    try:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(name)
        sock.close()
    finally:
        os.chdir(cwd)


def directory_shard(path: Path) -> None:
    name = shards(path)[0]
    (path / name).unlink()
    (path / name).mkdir()


def index_metadata(fn: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def run(path: Path) -> None:
        data = index(path)
        fn(data)
        write_index(path, data)
    return run


def dot_slash_entries(path: Path) -> None:
    data = index(path)
    data["weight_map"] = {t: f"./{s}" for t, s in data["weight_map"].items()}
    write_index(path, data)


def extra_entry_key(path: Path) -> None:
    """Give one header entry a key safetensors 0.8 ignores (serde does not deny unknown
    fields); the byte layout stays the same length-padded form."""
    shard = path / shards(path)[0]
    header, data = raw_header(shard)
    first = by_offset(header)[0]
    header[first]["producer_note"] = {"any": ["value", 1]}
    write_raw(shard, header, data)


def add_raw_tensor(name: str, dtype: str, shape: list[int], nbytes: int) -> Callable[[Path], None]:
    """Append a tensor of any dtype safetensors knows (``F4``, ``F6_E2M3``, ...: numpy has no
    type for them) to the last shard, by header, and map it in the index (total_size kept in
    its convention)."""
    def run(path: Path) -> None:
        idx = index(path)
        names = shards(path)
        file_convention = idx["metadata"]["total_size"] != _sizes(path, names)[0]
        shard = path / names[-1]
        header, data = raw_header(shard)
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + nbytes]}
        write_raw(shard, header, data + bytes(range(nbytes)))
        idx["weight_map"][name] = names[-1]
        tensor, file = _sizes(path, names)
        idx["metadata"]["total_size"] = file if file_convention else tensor
        write_index(path, idx)
    return run


def make_mixed_ct(path: Path) -> Path:
    """A compressed-tensors ``mixed-precision`` checkpoint: layer 1's routed experts INT4 g32,
    layer 2's NVFP4, one config group each (what llm-compressor writes for a recipe with two
    schemes); its BF16 twin is ``<path>-bf16``, as for the generated bases."""
    from mxformats.testing.checkpoints import make_kimi_checkpoint

    int4 = make_kimi_checkpoint(path.with_name(path.name + "-int4"), "compressed-tensors-int4",
                                source_out=path.with_name(path.name + "-bf16"))
    nvfp4 = make_kimi_checkpoint(path.with_name(path.name + "-nvfp4"),
                                 "compressed-tensors-nvfp4",
                                 source=path.with_name(path.name + "-bf16"))
    layer2 = "model.layers.2.mlp.experts."
    tensors: dict[str, Any] = {}
    for folder, keep in ((int4, lambda n: not n.startswith(layer2)),
                         (nvfp4, lambda n: n.startswith(layer2))):
        for shard in shards(folder):
            tensors.update({n: a for n, a in read_safetensors(folder / shard).items() if keep(n)})
    path.mkdir()
    write_safetensors(path / "model.safetensors", dict(sorted(tensors.items())))
    cfg = json.loads((int4 / "config.json").read_text())
    qc = cfg["quantization_config"]
    int4_group = qc["config_groups"]["group_0"]
    nvfp4_group = json.loads((nvfp4 / "config.json").read_text())[
        "quantization_config"]["config_groups"]["group_0"]
    int4_group["targets"] = [r"re:.*layers\.1\.mlp\.experts\..*"]
    nvfp4_group["targets"] = [r"re:.*layers\.2\.mlp\.experts\..*"]
    qc["config_groups"] = {"group_0": int4_group, "group_1": nvfp4_group}
    qc["format"] = "mixed-precision"
    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    return path


def make_modelopt_fp8_block(path: Path) -> Path:
    """A ModelOpt ``FP8_PB_WO`` checkpoint: the DeepSeek FP8 block layout of an architecture
    whose quantized Linears are multiples of 128 (attention left BF16), each
    ``weight_scale_inv`` stored as ModelOpt's ``weight_scale`` ``[O/128, 1, I/128, 1]``, a flat
    ``quant_method: modelopt`` config with wildcard ``ignore`` entries."""
    from mxformats.testing.checkpoints import make_kimi_checkpoint

    ignore = ["lm_head", "*.gate", "*embed*", "*norm*", "*self_attn*"]
    make_kimi_checkpoint(path, "fp8-block-deepseek", hidden=128, moe_intermediate=128,
                         intermediate=256, exclude=ignore)

    def to_modelopt(data: Tensors) -> None:
        for tensors in data.values():
            for name in [n for n in tensors if n.endswith(".weight_scale_inv")]:
                s = tensors.pop(name)
                tensors[name.removesuffix("_inv")] = s.reshape(s.shape[0], 1, s.shape[1], 1)
    edit(path, to_modelopt)
    cfg = json.loads((path / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "FP8_PB_WO",
                                  "ignore": ignore,
                                  "producer": {"name": "modelopt", "version": "0.47.0"}}
    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    return path


def make_modelopt_mixed(path: Path) -> Path:
    """A ModelOpt ``MIXED_PRECISION`` checkpoint: the NVFP4 experts-only export with both
    config forms declaring ``quant_algo: MIXED_PRECISION`` and a ``quantized_layers`` entry
    ``NVFP4`` per quantized module."""
    from mxformats.testing.checkpoints import make_kimi_checkpoint

    make_kimi_checkpoint(path, "modelopt-nvfp4")
    layers = {name.removesuffix(".weight_scale_2"): {"quant_algo": "NVFP4", "group_size": 16}
              for name in index(path)["weight_map"] if name.endswith(".weight_scale_2")}
    cfg = json.loads((path / "config.json").read_text())
    cfg["quantization_config"].update(quant_algo="MIXED_PRECISION", quantized_layers=layers)
    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    hf = json.loads((path / "hf_quant_config.json").read_text())
    hf["quantization"].update(quant_algo="MIXED_PRECISION", quantized_layers=layers)
    (path / "hf_quant_config.json").write_text(json.dumps(hf, indent=2))
    return path


def source_weight(module: str) -> Any:
    """``module``'s BF16 weight in the producer fixtures' source (tests/data/producers/src-bf16)."""
    source = Path(__file__).resolve().parent / "data" / "producers" / "src-bf16"
    for shard in shards(source):
        w = read_safetensors(source / shard).get(f"{module}.weight")
        if w is not None:
            return w
    raise KeyError(module)


def calibrated_apart(fmt: str, expert: str) -> Callable[[Path], None]:
    """``expert``'s gate_proj and up_proj re-quantized each from its own amax by the producer
    profile of ``fmt`` (the descriptor's ``produce``, bit-exact with the producer: the
    reproduction tests), as llm-compressor's ``model_free_ptq`` writes every routed expert
    (it does not fuse them: tests/data/producers/README.md) and as ModelOpt files with two
    ``weight_scale_2`` are: two global scales for one fused w13. The activation scales are
    kept."""
    desc = by_format(fmt)

    def inner(data: Tensors) -> None:
        for projection in ("gate_proj", "up_proj"):
            name = f"{expert}.{projection}"
            for param, value in desc.produce(source_weight(name)).items():
                data[find(data, f"{name}.{param}")][f"{name}.{param}"] = value
    return lambda path: edit(path, inner)
