"""Coverage: every tensor the config implies is present with its logical shape, nothing else."""

from __future__ import annotations

import re
from collections.abc import Iterator

from .findings import Finding, Level, Severity, declare
from .model import QUANT_SUFFIXES, Checkpoint, Options

__all__ = ["run"]

E, W, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO
S = Level.STRUCTURE
G = "coverage"

TENSOR_MISSING = declare(
    "TENSOR_MISSING",
    E,
    S,
    G,
    "A tensor the config implies is absent (vLLM does not notice for quantized models: the "
    "parameter keeps its initial value).",
    "Re-export the checkpoint; copy the missing tensor from the producer's output.",
)
TENSOR_UNEXPECTED = declare(
    "TENSOR_UNEXPECTED",
    E,
    S,
    G,
    "A tensor the config does not imply: vLLM raises KeyError on names it did not register.",
    "Remove the tensor, or fix the config that should declare it.",
)
SHAPE_MISMATCH = declare(
    "SHAPE_MISMATCH",
    E,
    S,
    G,
    "An unquantized tensor's shape differs from the shape the config implies.",
    "Fix config.json (e.g. n_routed_experts after a merge) or re-export the tensor.",
)
LAYER_UNEXPECTED = declare(
    "LAYER_UNEXPECTED",
    E,
    S,
    G,
    "Tensors of a layer beyond num_hidden_layers + num_nextn_predict_layers: vLLM routes them to "
    "a parameter that does not exist (KeyError).",
    "Delete the extra layer or declare it (num_nextn_predict_layers for an MTP layer).",
)
MTP_ABSENT = declare(
    "MTP_ABSENT",
    INFO,
    S,
    G,
    "An MTP layer the config declares is absent (vLLM skips MTP weights it does not find).",
    "Nothing to do unless you want speculative decoding with it.",
)
EXPERT_GAP = declare(
    "EXPERT_GAP",
    E,
    S,
    G,
    "A MoE layer lacks some expert indices in 0..n_routed_experts-1.",
    "Restore the missing experts, or set n_routed_experts to the merged count.",
)
EXPERT_EXTRA = declare(
    "EXPERT_EXTRA",
    E,
    S,
    G,
    "A MoE layer holds an expert index >= n_routed_experts.",
    "Set n_routed_experts to the real count, or remove the extra experts.",
)
MODULE_SPLIT = declare(
    "MODULE_SPLIT",
    W,
    S,
    G,
    "A module's tensors sit in different shards: vLLM tolerates it, Quark's per-file source "
    "recovery and per-file decompressors do not.",
    "Re-shard so each module's tensors share a file.",
)

_ALLOWED = re.compile(r".*rotary_emb\.inv_freq$")
_LAYER = re.compile(r"^(?P<pre>.*?layers\.)(?P<n>\d+)\.")
_EXPERT = re.compile(r"^(?P<pre>.*\.mlp\.experts\.)(?P<e>\d+)\.")


def run(ckpt: Checkpoint, opts: Options) -> Iterator[Finding]:
    a = ckpt.arch
    for split in ckpt.modules.values():
        if len(split.files) > 1:
            first = min(split.tensors.values(), key=lambda t: (t.file, t.begin))
            yield Finding(
                MODULE_SPLIT,
                f"{split.name} spans {', '.join(sorted(split.files))}",
                file=first.file,
                tensor=first.name,
                offset=first.begin,
            )
    if a is None:
        return
    # MTP layers absent as a whole: one info each, not a missing tensor per module
    absent_mtp: set[int] = set()
    for n in range(a.layers, a.layers + a.mtp_layers):
        pre = f"{a.prefix}layers.{n}."
        if not any(name.startswith(pre) for name in ckpt.modules):
            absent_mtp.add(n)
            yield Finding(
                MTP_ABSENT,
                f"MTP layer {n} is declared (num_nextn_predict_layers={a.mtp_layers}) but absent",
            )
    # experts present per layer, for gap reporting
    present_experts: dict[int, set[int]] = {}
    for name in ckpt.modules:
        m = _EXPERT.match(name)
        lm = _LAYER.match(name)
        if m and lm and name.startswith(a.prefix):
            present_experts.setdefault(int(lm["n"]), set()).add(int(m["e"]))
    gaps_reported: set[tuple[int, int]] = set()
    unavailable_modules = {t.rsplit(".", 1)[0] for t in ckpt.unavailable}
    for exp in ckpt.expected.values():
        if exp.layer is not None and exp.layer in absent_mtp:
            continue
        if exp.name in unavailable_modules:
            continue  # its shard is missing or unreadable: reported by the files group
        mod = ckpt.modules.get(exp.name)
        if mod is None:
            if exp.kind == "expert" and exp.layer is not None and exp.expert is not None:
                key = (exp.layer, exp.expert)
                if key not in gaps_reported:
                    gaps_reported.add(key)
                    yield Finding(
                        EXPERT_GAP,
                        f"layer {exp.layer} has no expert {exp.expert} "
                        f"(config: {a.experts} experts)",
                        tensor=exp.name.rsplit(".", 1)[0],
                    )
                continue
            for p, shape in exp.params:
                yield Finding(
                    TENSOR_MISSING,
                    f"{exp.name}.{p} {list(shape)} is absent",
                    tensor=f"{exp.name}.{p}",
                )
            continue
        if mod.quantized:
            continue  # the layout group checks quantized modules' tensor sets
        for p, shape in exp.params:
            ref = mod.tensors.get(p)
            if ref is None:
                yield Finding(
                    TENSOR_MISSING,
                    f"{exp.name}.{p} {list(shape)} is absent",
                    tensor=f"{exp.name}.{p}",
                )
            elif ref.shape != shape:
                yield Finding(
                    SHAPE_MISMATCH,
                    f"{ref.name} is {list(ref.shape)}, the config implies {list(shape)}",
                    file=ref.file,
                    tensor=ref.name,
                    offset=ref.begin,
                )
        known = {p for p, _ in exp.params}
        for p, ref in mod.tensors.items():
            if p not in known and p not in QUANT_SUFFIXES and not _ALLOWED.match(ref.name):
                yield Finding(
                    TENSOR_UNEXPECTED,
                    f"{ref.name} is not a parameter of {exp.kind} module {exp.name}",
                    file=ref.file,
                    tensor=ref.name,
                    offset=ref.begin,
                )
    # modules the config does not imply
    top = a.layers + a.mtp_layers
    layers_reported: set[int] = set()
    extra_reported: set[tuple[int, int]] = set()
    for name, mod in ckpt.modules.items():
        if name in ckpt.expected:
            continue
        first = min(mod.tensors.values(), key=lambda t: (t.file, t.begin))
        lm = _LAYER.match(name)
        if lm and name.startswith(a.prefix) and int(lm["n"]) >= top:
            n = int(lm["n"])
            if n not in layers_reported:
                layers_reported.add(n)
                yield Finding(
                    LAYER_UNEXPECTED,
                    f"layer {n} is present but the config declares "
                    f"{a.layers} layers and {a.mtp_layers} MTP layers",
                    file=first.file,
                    tensor=first.name,
                    offset=first.begin,
                )
            continue
        em = _EXPERT.match(name)
        if em and lm and int(em["e"]) >= a.experts:
            key = (int(lm["n"]), int(em["e"]))
            if key not in extra_reported:
                extra_reported.add(key)
                yield Finding(
                    EXPERT_EXTRA,
                    f"layer {key[0]} holds expert {key[1]} but the config "
                    f"declares {a.experts} experts",
                    file=first.file,
                    tensor=first.name,
                    offset=first.begin,
                )
            continue
        for ref in mod.tensors.values():
            if _ALLOWED.match(ref.name):
                continue
            yield Finding(
                TENSOR_UNEXPECTED,
                f"{ref.name} is not a tensor the config implies",
                file=ref.file,
                tensor=ref.name,
                offset=ref.begin,
            )
