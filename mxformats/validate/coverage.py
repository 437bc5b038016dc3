"""Coverage: every tensor the config implies is present with its logical shape, nothing else."""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import compress, filterfalse, repeat
from operator import attrgetter, itemgetter, not_

from .arch import TEXT_DEFAULTS, VISION_DEFAULTS, key_value
from .checkmodule import CheckModule
from .findings import Finding, Level, Severity, declare, listed
from .model import QUANT_SUFFIXES, Architecture, Checkpoint, ExpectedModule, Module, Options

__all__ = ["run"]


TENSOR_MISSING = declare(
    "TENSOR_MISSING", severity=Severity.ERROR, level=Level.STRUCTURE, group="coverage",
    meaning="A tensor the config implies is absent (vLLM does not notice for quantized models: "
            "the parameter keeps its initial value).",
    fix="Re-export the checkpoint; copy the missing tensor from the producer's output.",
    conditions=("a layer absent", "a norm absent", "an attention projection absent",
                "a dense MLP projection absent", "a shared expert projection absent",
                "the embedding absent", "the lm_head absent", "the router's weight absent",
                "the router's e_score_correction_bias absent"))
TENSOR_UNEXPECTED = declare(
    "TENSOR_UNEXPECTED", severity=Severity.ERROR, level=Level.STRUCTURE, group="coverage",
    meaning="A tensor the config does not imply: vLLM raises KeyError on names it did not "
            "register.",
    fix="Remove the tensor, or fix the config that should declare it.",
    conditions=("a parameter no module of its kind has", "a module the config does not imply"))
SHAPE_MISMATCH = declare(
    "SHAPE_MISMATCH", severity=Severity.ERROR, level=Level.STRUCTURE, group="coverage",
    meaning="An unquantized tensor's shape differs from the shape the config implies.",
    fix="Fix config.json (e.g. n_routed_experts after a merge) or re-export the tensor.",
    conditions=("a norm of another size", "a router of another expert count",
                "an embedding or lm_head of another vocabulary size",
                "an unquantized attention projection of another size"),
    # DeepSeek's FP8 block checkpoint and compressed-tensors FP8_BLOCK quantize attention: the
    # layout group checks a quantized module's tensors (QUANT_SHAPE, QUANT_TENSOR_MISSING)
    only={"an unquantized attention projection of another size": (
        "bf16", "quark-mxfp4", "quark-w4a8", "compressed-tensors-int4", "compressed-tensors-nvfp4",
        "compressed-tensors-mixed", "modelopt-nvfp4", "modelopt-fp8-block", "modelopt-mixed")})
LAYER_UNEXPECTED = declare(
    "LAYER_UNEXPECTED", severity=Severity.ERROR, level=Level.STRUCTURE, group="coverage",
    meaning="Tensors of a layer beyond num_hidden_layers + num_nextn_predict_layers: vLLM routes "
            "them to a parameter that does not exist (KeyError).",
    fix="Delete the extra layer or declare it (num_nextn_predict_layers for an MTP layer).",
    conditions=("a layer past num_hidden_layers", "an MTP layer none is declared"))
MTP_ABSENT = declare(
    "MTP_ABSENT", severity=Severity.INFO, level=Level.STRUCTURE, group="coverage",
    meaning="An MTP layer the config declares is absent (vLLM skips MTP weights it does not find).",
    fix="Nothing to do unless you want speculative decoding with it.",
    conditions=("a declared MTP layer absent",))
EXPERT_GAP = declare(
    "EXPERT_GAP", severity=Severity.ERROR, level=Level.STRUCTURE, group="coverage",
    meaning="A MoE layer lacks some expert indices in 0..n_routed_experts-1.",
    fix="Restore the missing experts, or set n_routed_experts to the merged count.",
    conditions=("an expert absent", "one projection of an expert absent"))
EXPERT_EXTRA = declare(
    "EXPERT_EXTRA", severity=Severity.ERROR, level=Level.STRUCTURE, group="coverage",
    meaning="A MoE layer holds an expert index >= n_routed_experts.",
    fix="Set n_routed_experts to the real count, or remove the extra experts.",
    conditions=("an expert index past n_routed_experts",))
COVERAGE_SKIPPED = declare(
    "COVERAGE_SKIPPED", severity=Severity.INFO, level=Level.STRUCTURE, group="coverage",
    meaning="Tensors not compared with the config because the part of it that describes them "
            "could not be derived (the CONFIG_ARCH finding names the key): one summary, not one "
            "per tensor.",
    fix="Fix the config key CONFIG_ARCH names, then validate again.",
    conditions=("the language model's config unusable",))
MLP_KIND_MISMATCH = declare(
    "MLP_KIND_MISMATCH", severity=Severity.ERROR, level=Level.STRUCTURE, group="coverage",
    meaning="Layers hold a dense MLP where the config implies routed experts, or the reverse: "
            "first_k_dense_replace disagrees with the tensors (one finding for all such layers; "
            "their MLP tensors are not checked one by one).",
    fix="Set first_k_dense_replace to the number of leading dense layers.",
    conditions=("a dense MLP where the config makes experts",
                "routed experts where the config makes a dense MLP"))
MODULE_SPLIT = declare(
    "MODULE_SPLIT", severity=Severity.WARNING, level=Level.STRUCTURE, group="coverage",
    meaning="A module's tensors sit in different shards: vLLM tolerates it, Quark's per-file "
            "source recovery and per-file decompressors do not.",
    fix="Re-shard so each module's tensors share a file.",
    conditions=("a module's tensors in two shards",))

#: a module absent from the shards, as :func:`run` looks modules up (never quantized)
_NOT_PRESENT = Module("")
_QUANTIZED = attrgetter("quantized")
_VISION_PREFIXES = ("vision_tower.", "mm_projector.")
_ALLOWED = re.compile(r".*rotary_emb\.inv_freq$")
_LAYER = re.compile(r"^(?P<pre>.*?layers\.)(?P<n>\d+)\.")
_EXPERT = re.compile(r"^(?P<pre>.*\.mlp\.experts\.)(?P<e>\d+)\.")


def _vision_names(ckpt: Checkpoint) -> set[str]:
    """Modules of the vision tower and projector present in the shards."""
    return {n for n in ckpt.modules if n.startswith(_VISION_PREFIXES)}


def _layer_matches(ckpt: Checkpoint, a: Architecture) -> dict[str, re.Match[str]]:
    """Module name -> its :data:`_LAYER` match, for the modules under the text prefix that
    have one (one regex pass per module, shared by the checks below)."""
    return {name: m for name in ckpt.modules
            if name.startswith(a.prefix) and (m := _LAYER.match(name))}


def _absent_layers(ckpt: Checkpoint, a: Architecture, layers: dict[str, re.Match[str]]
                   ) -> set[int]:
    """Declared layers (MTP included) of which no tensor is present nor unavailable
    (``layers``: :func:`_layer_matches`)."""
    present = {int(m["n"]) for m in layers.values()} | {
        int(m["n"])
        for name in ckpt.unavailable
        if name.startswith(a.prefix) and (m := _LAYER.match(name))
    }
    return set(range(a.layers + a.mtp_layers)) - present


def _mlp_kind_conflicts(a: Architecture, layers: dict[str, re.Match[str]]
                        ) -> tuple[list[int], list[int]]:
    """``(dense_as_moe, moe_as_dense)``: layers the config makes MoE that hold only a dense MLP,
    and layers it makes dense that hold only routed experts (``layers``:
    :func:`_layer_matches`)."""
    dense: set[int] = set()
    routed: set[int] = set()
    for name, lm in layers.items():
        rest = name[lm.end() :]
        if rest.startswith("mlp.experts."):
            routed.add(int(lm["n"]))
        elif rest in ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
            dense.add(int(lm["n"]))
    top = a.layers + a.mtp_layers
    moe_layers = set(range(a.first_dense, top))
    return (
        sorted(n for n in dense - routed if n in moe_layers),
        sorted(n for n in routed - dense if n < min(a.first_dense, top)),
    )


def _defaults_note(a: Architecture, exp: ExpectedModule) -> str:
    """The loader defaults an implied shape may have taken (for its mismatch message)."""
    vision = exp.kind in ("vision", "projector")
    keys = (a.vision.defaulted if a.vision is not None else ()) if vision else a.defaulted
    if not keys:
        return ""
    defaults, part, cls = (
        (VISION_DEFAULTS, "vision_config", "KimiK25VisionConfig")
        if vision
        else (TEXT_DEFAULTS, a.where or "config.json", "DeepseekV3Config")
    )
    used = ", ".join(f"{k}={defaults[k]}" for k in keys)
    return f" ({part} omits {', '.join(keys)}; the loader's {cls} defaults: {used})"


def run(ckpt: Checkpoint, opts: Options) -> Iterator[Finding]:
    """The coverage findings, listed (:func:`~mxformats.validate.findings.listed`): one root
    cause repeats over every module or expert (a pruned checkpoint whose config still
    declares every expert, a converter that drops every norm or writes every scale into
    another shard), so per check the first few are listed and the rest counted in one
    summary with their worst severity (whose ``extra["unlisted"]`` holds the rest)."""
    return listed(_coverage(ckpt))


def _coverage(ckpt: Checkpoint) -> Iterator[Finding]:
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
        if ckpt.arch_problem is not None and ckpt.tensors:
            yield Finding(
                COVERAGE_SKIPPED,
                f"{len(ckpt.tensors)} tensors not checked against the config because "
                f"{ckpt.arch_problem}",
                file="config.json",
            )
        return
    unchecked = _vision_names(ckpt) if a.vision_problem is not None else set()
    if unchecked:
        yield Finding(
            COVERAGE_SKIPPED,
            f"{sum(len(ckpt.modules[n].tensors) for n in unchecked)} vision tower and projector "
            "tensors not checked against the "
            f"config because {a.vision_problem}",
            file="config.json",
        )
    layers = _layer_matches(ckpt, a)
    dense_as_moe, moe_as_dense = _mlp_kind_conflicts(a, layers)
    conflicted = set(dense_as_moe) | set(moe_as_dense)
    if conflicted:
        rule = key_value(
            "first_k_dense_replace",
            a.first_dense,
            f"{a.where}." if a.where else "",
            a.defaulted,
            TEXT_DEFAULTS,
        )
        parts = [
            f"layers {dense_as_moe} hold a dense MLP but the config makes them MoE"
            if dense_as_moe
            else "",
            f"layers {moe_as_dense} hold routed experts but the config makes them dense"
            if moe_as_dense
            else "",
        ]
        yield Finding(
            MLP_KIND_MISMATCH,
            f"{'; '.join(p for p in parts if p)} ({rule}); their MLP tensors were not checked",
            file="config.json",
        )
    mlp_unchecked = tuple(f"{a.prefix}layers.{n}.mlp." for n in sorted(conflicted))
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
    gaps_reported: set[tuple[int, int]] = set()
    unavailable_modules = {t.rsplit(".", 1)[0] for t in ckpt.unavailable}
    absent_layers = _absent_layers(ckpt, a, layers) - absent_mtp
    absent = absent_mtp | absent_layers
    for n in sorted(absent_layers):
        count = sum(len(e.params) for e in ckpt.expected.values() if e.layer == n)
        yield Finding(
            TENSOR_MISSING,
            f"layer {n} is absent: none of its {count} tensors is present "
            f"({a.where + '.' if a.where else ''}num_hidden_layers is {a.layers})",
            tensor=f"{a.prefix}layers.{n}",
        )
    # a present quantized module has no finding here (the layout group checks its tensor
    # set): the loop below meets only the others, picked out in C-level passes
    present = map(ckpt.modules.get, map(itemgetter(0), ckpt.expected.values()),
                  repeat(_NOT_PRESENT))
    for exp in compress(ckpt.expected.values(), map(not_, map(_QUANTIZED, present))):
        if exp.layer is not None and exp.layer in absent:
            continue
        if exp.name in unavailable_modules or (
            mlp_unchecked and exp.name.startswith(mlp_unchecked)
        ):
            continue  # its shard is missing or unreadable (files group), or MLP_KIND_MISMATCH
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
                    f"{ref.name} is {list(ref.shape)}, the config implies {list(shape)}"
                    + _defaults_note(a, exp),
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
    for name in filterfalse(ckpt.expected.__contains__, ckpt.modules):
        mod = ckpt.modules[name]
        if mlp_unchecked and name.startswith(mlp_unchecked):
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
        if name in unchecked:
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


#: The coverage checks as the runner runs them.
CHECK = CheckModule("coverage", run)
