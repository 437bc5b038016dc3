"""Layout: the quantization config the loader reads, the tensor set of each quantized module,
and the modules vLLM builds unquantized."""

from __future__ import annotations

import fnmatch
import re
from collections import defaultdict
from collections.abc import Generator, Iterable, Iterator
from itertools import compress, repeat
from operator import attrgetter, itemgetter, methodcaller, not_
from typing import NamedTuple

from .checkmodule import CheckModule
from .descriptors import Descriptor, by_format
from .descriptors.base import TensorSpec
from .excludes import NearMisses
from .findings import MAX_LISTED, Finding, Level, Listing, Severity, declare
from .model import (
    Checkpoint,
    CheckpointFormat,
    ExpectedModule,
    Module,
    Options,
    TensorRef,
)

__all__ = ["decodable", "expected_tensors", "run"]


_QUARK = ("quark-mxfp4", "quark-w4a8")
_COMPRESSED_TENSORS = ("compressed-tensors-int4", "compressed-tensors-nvfp4",
                       "compressed-tensors-fp8-block", "compressed-tensors-mixed")
#: The formats whose exclude lists vLLM matches by exact name or ``re:`` regex (Quark's
#: ``exclude``, compressed-tensors' ``ignore``, DeepSeek FP8's ``modules_to_not_convert``);
#: ModelOpt's are fnmatch patterns.
_EXACT_OR_REGEX = (*_QUARK, *_COMPRESSED_TENSORS, "fp8-block")
_MODELOPT = ("modelopt-nvfp4", "modelopt-fp8-block", "modelopt-mixed")
#: The formats whose loader builds a BF16 Linear the exclude list does not name quantized
#: (a descriptor's ``needs_exclude_entries``: all but DeepSeek FP8, whose loader casts)
_NEEDS_ENTRIES = (*_QUARK, *_COMPRESSED_TENSORS, *_MODELOPT)
#: CONFIG_QUANT's conditions: one rule of each descriptor's ``config_problems``, with the
#: formats whose descriptor has it.
_CONFIG_RULES = {
    "Quark: no export block": _QUARK,
    "compressed-tensors: quantization_status not compressed": _COMPRESSED_TENSORS,
    "compressed-tensors: a kv_cache_scheme": _COMPRESSED_TENSORS,
    "DeepSeek FP8: a block other than 128 x 128": ("fp8-block",),
    "DeepSeek FP8: static activations": ("fp8-block",),
    "ModelOpt NVFP4: a group size other than 16": ("modelopt-nvfp4",),
    "ModelOpt FP8: quant_algo FP8_BLOCK_SCALES": ("modelopt-fp8-block",),
    "ModelOpt mixed: an empty quantized_layers table": ("modelopt-mixed",),
}

CONFIG_QUANT = declare(
    "CONFIG_QUANT", severity=Severity.ERROR, level=Level.STRUCTURE, group="layout",
    meaning="The quantization config has a value the loader rejects or the format does not allow.",
    fix="Re-export with the producer's supported recipe.",
    conditions=tuple(_CONFIG_RULES), only=_CONFIG_RULES)
EXCLUDE_GLOB = declare(
    "EXCLUDE_GLOB", severity=Severity.WARNING, level=Level.STRUCTURE, group="layout",
    meaning="An exclude/ignore entry is a glob; vLLM matches exact names or 're:' regexes only.",
    fix="Write the exact module names or a 're:' regex.",
    conditions=("a glob entry",), only={"a glob entry": _EXACT_OR_REGEX})
EXCLUDE_INVALID = declare(
    "EXCLUDE_INVALID", severity=Severity.ERROR, level=Level.STRUCTURE, group="layout",
    meaning="An exclude/ignore 're:' entry is not a valid regular expression: vLLM's regex.match "
            "raises on it when the model loads.",
    fix="Fix the regex (the message quotes the parser's error).",
    conditions=("a 're:' entry that does not compile",),
    only={"a 're:' entry that does not compile": _EXACT_OR_REGEX})
EXCLUDE_UNMATCHED = declare(
    "EXCLUDE_UNMATCHED", severity=Severity.WARNING, level=Level.STRUCTURE, group="layout",
    meaning="An exclude/ignore entry matches no module; the message names the module it was "
            "probably meant for (e.g. 'model.layers.N...' in a K2.5/K2.6 checkpoint whose modules "
            "are 'language_model.model.layers.N...'). Entries that share one prefix mistake are "
            "reported once. An error when such a module is stored BF16 and so needed the entry "
            "(vLLM builds it quantized); those modules get no NOT_EXCLUDED_UNQUANTIZED of their "
            "own.",
    fix="Write the module's full name, or a 're:' regex (vLLM anchors it at the start: re.match).",
    conditions=("an entry naming no module", "a 're:' entry re.match does not anchor"),
    only={"a 're:' entry re.match does not anchor": _EXACT_OR_REGEX})
NOTHING_QUANTIZED = declare(
    "NOTHING_QUANTIZED", severity=Severity.WARNING, level=Level.STRUCTURE, group="layout",
    meaning="The quantization config declares a format, yet no module of the checkpoint is stored "
            "quantized (e.g. its exclude/ignore list names every Linear): the checkpoint is BF16 "
            "in all but name and no quantized number was checked. An error where the loader builds "
            "the Linears the list leaves quantized and loads the BF16 weights into them without a "
            "complaint (DeepSeek FP8 block: vLLM casts them to FP8 unscaled, scales unset).",
    fix="Re-export with an exclude/ignore list that names only the modules kept in BF16, or drop "
        "the quantization config.",
    conditions=("every module stored BF16", "every module stored BF16, the loader casting them in"),
    only={"every module stored BF16": _NEEDS_ENTRIES,
          "every module stored BF16, the loader casting them in": ("fp8-block",)})
#: The tensor roles of a quantized module, over every format (each format's descriptor says
#: which of them its modules hold: ``expected_tensors``).
_QUANT_ROLES = ("weight", "weight_packed", "weight_shape", "weight_scale", "weight_scale_inv",
                "weight_scale_2", "weight_global_scale", "input_scale", "input_global_scale")
QUANT_TENSOR_MISSING = declare(
    "QUANT_TENSOR_MISSING", severity=Severity.ERROR, level=Level.STRUCTURE, group="layout",
    conditions=("absent",), roles=_QUANT_ROLES,
    meaning="A quantized module lacks a tensor its format needs (a missing scale loads as ones).",
    fix="Re-export the module.")
QUANT_TENSOR_UNEXPECTED = declare(
    "QUANT_TENSOR_UNEXPECTED", severity=Severity.ERROR, level=Level.STRUCTURE, group="layout",
    meaning="A quantized module carries a tensor its format does not have (e.g. input_scale with "
            "dynamic activations, a leftover weight_scale_inv): vLLM raises KeyError.",
    fix="Remove the tensor or fix the config.",
    conditions=("a tensor its format does not have",))
QUANT_DTYPE = declare(
    "QUANT_DTYPE", severity=Severity.ERROR, level=Level.STRUCTURE, group="layout",
    conditions=("another dtype of the same width",), roles=_QUANT_ROLES,
    meaning="A quantization tensor has the wrong dtype for its format (e.g. F8_E8M0 scales for "
            "Quark).",
    fix="Store it with the dtype the loader expects.")
QUANT_DTYPE_UNUSUAL = declare(
    "QUANT_DTYPE_UNUSUAL", severity=Severity.WARNING, level=Level.STRUCTURE, group="layout",
    meaning="A quantization tensor has an accepted but unusual dtype: an F16/F32 "
            "compressed-tensors INT4 scale, or FP8 block scales narrower than the producer's (BF16 "
            "weight_scale_inv: the loader casts them into its float32 parameter, and the rounding "
            "moved each decoded weight by up to 2^-8 of its value).",
    fix="Nothing required; store the scales in the dtype the producer writes for exact weights.",
    conditions=("scales stored as F16",),
    only={"scales stored as F16": ("compressed-tensors-int4", "compressed-tensors-mixed",
                                   "compressed-tensors-fp8-block", "modelopt-fp8-block",
                                   "fp8-block")})
QUANT_SHAPE = declare(
    "QUANT_SHAPE", severity=Severity.ERROR, level=Level.STRUCTURE, group="layout",
    meaning="A quantization tensor's shape (or weight_shape value) does not match the module's "
            "logical shape and the format's packing and group size.",
    fix="Re-export the module with the declared group size and packing.",
    conditions=("codes of another shape", "scales of another shape"))
EXCLUDED_QUANTIZED = declare(
    "EXCLUDED_QUANTIZED", severity=Severity.ERROR, level=Level.STRUCTURE, group="layout",
    meaning="A module the exclude/ignore list matches carries quantization tensors: vLLM builds "
            "it BF16.",
    fix="Remove it from the exclude list or store it unquantized.",
    conditions=("a quantized module the list names",))
NOT_EXCLUDED_UNQUANTIZED = declare(
    "NOT_EXCLUDED_UNQUANTIZED", severity=Severity.ERROR, level=Level.STRUCTURE, group="layout",
    meaning="An unquantized Linear that the exclude/ignore list does not match: vLLM builds it "
            "quantized and the BF16 weight does not load.",
    fix="Add the module to exclude/ignore (exact name or 're:').",
    conditions=("a BF16 Linear the list does not name",),
    only={"a BF16 Linear the list does not name": _NEEDS_ENTRIES})
UNQUANTIZABLE_QUANTIZED = declare(
    "UNQUANTIZABLE_QUANTIZED", severity=Severity.ERROR, level=Level.STRUCTURE, group="layout",
    meaning="A module vLLM builds unquantized (LM head, router, embedding, norm, vision tower, "
            "projector; for W4A8 every Linear but the routed experts) is quantized: it will not "
            "load.",
    fix="Re-export with the module excluded (e.g. '*lm_head', '*vision_tower*').",
    conditions=("the LM head with a scale", "a router with a scale"))
FUSED_PAIR_MISMATCH = declare(
    "FUSED_PAIR_MISMATCH", severity=Severity.ERROR, level=Level.STRUCTURE, group="layout",
    meaning="Two modules vLLM fuses (q_a_proj+kv_a_proj_with_mqa, gate_proj+up_proj) differ in "
            "quantization: vLLM raises 'Found a different quantization schemes'.",
    fix="Quantize or exclude both.",
    conditions=("a dense up_proj quantized, its gate_proj not",))
UNQUANT_DTYPE = declare(
    "UNQUANT_DTYPE", severity=Severity.WARNING, level=Level.STRUCTURE, group="layout",
    meaning="An unquantized 2-D weight is not BF16 (F32 points to Quark's float32 default-dtype "
            "fallback).",
    fix="Set dtype in config.json before exporting, or cast to BF16.",
    conditions=("an embedding stored as F32", "an embedding stored as F16"))


#: kinds vLLM builds without a quantization method
_NEVER_QUANTIZED = {
    "lm_head": "vLLM's ParallelLMHead has no quantized weights",
    "router": "vLLM builds the router (GateLinear) without a quant_config",
    "embedding": "vLLM's embedding has no quantized weights",
    "norm": "norms are never quantized",
    "vision": "vLLM builds the vision tower without a quant_config",
    "projector": "vLLM builds the multimodal projector without a quant_config",
}
#: kinds vLLM builds with the checkpoint's scheme unless excluded
_SCHEMED = {"attention", "dense_mlp", "shared_expert", "expert"}
_FUSED = (
    ("self_attn.q_a_proj", "self_attn.kv_a_proj_with_mqa"),
    ("gate_proj", "up_proj"),
)


def _anchor(mod: Module) -> TensorRef:
    """The tensor a module's finding points at: its weight when it has one."""
    for p in ("weight", "weight_packed"):
        if p in mod.tensors:
            return mod.tensors[p]
    return min(mod.tensors.values(), key=lambda t: (t.file, t.begin))


def expected_tensors(ckpt: Checkpoint, out: int, inp: int) -> TensorSpec:
    """param -> (accepted dtypes, accepted shapes) of a quantized Linear ``[out, inp]`` in the
    checkpoint's format (its descriptor's); the first dtype and shape are the usual ones."""
    return _descriptor(ckpt).expected_tensors(ckpt, out, inp)


def decodable(ckpt: Checkpoint, modules: Iterable[Module]) -> list[Module]:
    """The quantized ``modules``, in order, less those holding a tensor of their format's in
    a dtype or shape the format does not accept (:func:`_check_quantized`'s QUANT_DTYPE and
    QUANT_SHAPE), or lacking one the format needs (QUANT_TENSOR_MISSING; a tensor the reader
    could not reach, ``ckpt.unavailable``, is not counted lacking). The numeric checks and
    the reproduction read only these: a scale of another dtype or shape read as the
    format's gives numbers that only repeat that one finding (or cannot be computed), so
    the layout's finding is the module's only one. A module of no 2-D logical shape is
    kept: the layout does not judge its tensors."""
    desc = _descriptor(ckpt)
    expectations = _Expectations(ckpt, Options())  # each (descriptor, shape) asked once
    kept = []
    for mod in modules:
        exp = ckpt.expected.get(mod.name)
        shape = None if exp is None else exp.shape
        if shape is None or len(shape) != 2:
            kept.append(mod)
            continue
        spec = expectations(desc.for_module(ckpt, mod.name), shape).spec
        if all(_accepted(ckpt, mod, param, dtypes, shapes)
               for param, (dtypes, shapes) in spec.items()):
            kept.append(mod)
    return kept


def _accepted(ckpt: Checkpoint, mod: Module, param: str, dtypes: tuple[str, ...],
              shapes: tuple[tuple[int, ...], ...]) -> bool:
    ref = mod.tensors.get(param)
    if ref is None:
        return f"{mod.name}.{param}" in ckpt.unavailable
    return ref.dtype in dtypes and ref.shape in shapes


def _descriptor(ckpt: Checkpoint) -> Descriptor:
    return ckpt.descriptor if ckpt.descriptor is not None else by_format(ckpt.format.value)


def _why(ckpt: Checkpoint, exp: ExpectedModule) -> str | None:
    """Why vLLM cannot load ``exp`` quantized (None when it can)."""
    if exp.kind in _NEVER_QUANTIZED:
        return _NEVER_QUANTIZED[exp.kind]
    return _descriptor(ckpt).unquantizable(exp)


#: ``_DTYPE_SHAPE(ref)`` is ``(ref.dtype, ref.shape)``, in C
_DTYPE_SHAPE = itemgetter(2, 3)
#: stands for an absent tensor in :meth:`_Expected.holds_usual` (no dtype is empty)
_ABSENT = TensorRef("", "", "", (), 0, 0)


class _Expected(NamedTuple):
    """What a quantized module of one descriptor and logical shape must hold: ``spec`` (the
    descriptor's :class:`TensorSpec`), ``params`` (its keys) and ``usual``, the usual
    ``(dtype, shape)`` of each param in that order: a module holding exactly these has no
    finding of :func:`_check_quantized`. ``usual`` is None when that check reads data
    (``weight_shape`` at level ``scales`` and above)."""

    spec: TensorSpec
    params: tuple[str, ...]
    usual: list[tuple[str, tuple[int, ...]]] | None

    def holds_usual(self, tensors: dict[str, TensorRef]) -> bool:
        """Whether ``tensors`` (param -> tensor) are exactly the usual ones: ``{p: (r.dtype,
        r.shape) for p, r in tensors.items()}`` equals the usual dict, compared without
        building it (a module has as many tensors as params, each of them usual)."""
        return (self.usual is not None and len(tensors) == len(self.params)
                and list(map(_DTYPE_SHAPE, map(tensors.get, self.params, repeat(_ABSENT))))
                == self.usual)


class _Expectations:
    """:class:`_Expected` per (descriptor, logical shape): every expert of a layer asks the
    same question, so each answer is computed once per run."""

    def __init__(self, ckpt: Checkpoint, opts: Options) -> None:
        self.ckpt = ckpt
        self.reads = opts.at_least(Level.SCALES)
        #: (id of the descriptor, shape) -> (the descriptor, kept alive so that its id stays
        #: unique, and its answer)
        self.known: dict[tuple[int, tuple[int, ...]], tuple[Descriptor, _Expected]] = {}

    def __call__(self, desc: Descriptor, shape: tuple[int, ...]) -> _Expected:
        key = (id(desc), shape)
        found = self.known.get(key)
        if found is None:
            spec = desc.expected_tensors(self.ckpt, shape[0], shape[-1])
            usual = (None if self.reads and "weight_shape" in spec
                     else [(dtypes[0], shapes[0]) for dtypes, shapes in spec.values()])
            found = self.known[key] = (desc, _Expected(spec, tuple(spec), usual))
        return found[1]


def _check_quantized(
    ckpt: Checkpoint, mod: Module, shape: tuple[int, ...], opts: Options, desc: Descriptor,
    want: TensorSpec,
) -> Iterator[Finding]:
    """The findings on quantized module ``mod`` of logical ``shape`` stored in ``desc``'s
    format, which expects the tensors ``want``."""
    out, inp = shape[0], shape[-1]
    if not want:
        return
    for p, (dtypes, shapes) in want.items():
        ref = mod.tensors.get(p)
        if ref is None and f"{mod.name}.{p}" in ckpt.unavailable:
            continue
        if ref is None:
            any_ref = next(iter(mod.tensors.values()))
            hint = desc.missing_hint.get(p)
            yield Finding(
                QUANT_TENSOR_MISSING,
                f"{mod.name}.{p} is absent ({ckpt.format.value} "
                f"needs {dtypes[0]}{list(shapes[0])})" + (f"; {hint}" if hint else ""),
                file=any_ref.file,
                tensor=f"{mod.name}.{p}",
            )
            continue
        if ref.dtype not in dtypes:
            yield Finding(
                QUANT_DTYPE,
                f"{ref.name} is {ref.dtype}, {ckpt.format.value} needs {dtypes[0]}",
                file=ref.file,
                tensor=ref.name,
                offset=ref.begin,
            )
        elif ref.dtype != dtypes[0] and (note := desc.dtype_note(p, ref.dtype)):
            yield Finding(
                QUANT_DTYPE_UNUSUAL,
                f"{ref.name} is {ref.dtype} ({note})",
                file=ref.file,
                tensor=ref.name,
                offset=ref.begin,
            )
        if ref.shape not in shapes:
            yield Finding(
                QUANT_SHAPE,
                f"{ref.name} is {list(ref.shape)}, expected "
                f"{list(shapes[0])} for logical [{out}, {inp}]",
                file=ref.file,
                tensor=ref.name,
                offset=ref.begin,
            )
    for p, ref in mod.tensors.items():
        if p not in want and p != "bias":
            yield Finding(
                QUANT_TENSOR_UNEXPECTED,
                f"{ref.name}: {ckpt.format.value} modules have only {', '.join(want)}",
                file=ref.file,
                tensor=ref.name,
                offset=ref.begin,
            )
    # the small weight_shape tensor: its values are the logical shape
    ws = mod.tensors.get("weight_shape")
    if (
        "weight_shape" in want
        and ws is not None
        and ws.shape == (2,)
        and ws.dtype in ("I32", "I64")
        and opts.at_least(Level.SCALES)
    ):
        values = [int(v) for v in ckpt.read(ws.name, max_bytes=64)]
        if values != [out, inp]:
            yield Finding(
                QUANT_SHAPE,
                f"{ws.name} holds {values}, the config implies {[out, inp]}",
                file=ws.file,
                tensor=ws.name,
                offset=ws.begin,
            )


def _is_glob(entry: str) -> bool:
    return not entry.startswith("re:") and any(c in entry for c in "*?[")


def _needs_entry(ckpt: Checkpoint, name: str) -> bool:
    """Whether ``name`` is a BF16 Linear that vLLM builds with the checkpoint's scheme unless
    the exclude/ignore list matches it (so it will not load without an entry)."""
    exp, mod = ckpt.expected.get(name), ckpt.modules.get(name)
    return (
        exp is not None
        and mod is not None
        and not mod.quantized
        and exp.linear
        and exp.kind in _SCHEMED
        and _descriptor(ckpt).needs_exclude_entries
        and not ckpt.is_excluded(name)
    )


def _exclude_entries(ckpt: Checkpoint) -> Generator[Finding, None, set[str]]:
    """Findings on the exclude/ignore entries themselves: invalid regexes, globs, and entries
    that match no module (with the module each was probably meant for). Returns the modules
    whose missing entry these findings already report."""
    matcher = ckpt.exclude_matcher
    for entry, why in matcher.invalid:
        yield Finding(
            EXCLUDE_INVALID, f"exclude entry {entry!r} is not a valid regex: {why}", "config.json"
        )
    present = ckpt.expected.keys() | ckpt.modules.keys()
    globs = [] if matcher.globs_match else [e for e in ckpt.exclude if _is_glob(e)]
    # sorted only when a finding quotes them (~70,000 names for Kimi)
    names = sorted(present) if globs else []
    for entry in globs:
        globbed = fnmatch.filter(names, entry)
        quark = (
            f"; Quark's fnmatch would match {len(globbed)} modules (e.g. {globbed[0]!r})"
            if globbed
            else ""
        )
        yield Finding(
            EXCLUDE_GLOB,
            f"exclude entry {entry!r} is a glob: vLLM compares it as an exact name and it "
            f"matches nothing{quark}",
            file="config.json",
        )
    unmatched = [e for e in matcher.unmatched(present)
                 if matcher.globs_match or not _is_glob(e)]
    if not unmatched:
        return set()
    names = names or sorted(present)
    near = NearMisses(names)
    explained: set[str] = set()
    groups: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for entry in unmatched:
        miss = near.find(entry)
        if miss is not None and miss.rewrite is not None:
            groups.setdefault(miss.rewrite, []).append((entry, miss.module))
            continue
        hint = (
            ""
            if miss is None
            else f"; re.search finds {miss.module!r}, but vLLM anchors the regex at the start "
            "(re.match): prefix it with '.*'"
            if miss.how == "search"
            else f"; the closest module is {miss.module!r}"
        )
        targets = [miss.module] if miss is not None else []
        if miss is not None and miss.how == "search":  # every module the unanchored regex finds
            found = re.compile(entry[3:])
            targets = [n for n in names if found.search(n)]
        needed = [t for t in targets if _needs_entry(ckpt, t)]
        yield _unmatched_finding(f"exclude entry {entry!r} matches no module{hint}", needed)
        explained.update(needed)
    for (old, new), pairs in groups.items():
        (entry, module), n = pairs[0], len(pairs)
        what = (
            f"{n} exclude entries match no module"
            if n > 1
            else (f"exclude entry {entry!r} matches no module")
        )
        fix = f"with {old!r} replaced by {new!r}" if old else f"prefixed with {new!r}"
        needed = [m for _, m in pairs if _needs_entry(ckpt, m)]
        yield _unmatched_finding(
            f"{what}; {fix} {'each names' if n > 1 else 'it names'} a module "
            f"(e.g. {entry!r} -> {module!r})",
            needed,
        )
        explained.update(needed)
    return explained


def _unmatched_finding(message: str, needed: list[str]) -> Finding:
    if not needed:
        return Finding(EXCLUDE_UNMATCHED, message, file="config.json")
    return Finding(
        EXCLUDE_UNMATCHED,
        f"{message}: vLLM builds {len(needed)} such module(s) quantized, but they are stored "
        f"BF16 (e.g. {needed[0]})",
        file="config.json",
        severity=Severity.ERROR,
    )


def run(ckpt: Checkpoint, opts: Options) -> Iterator[Finding]:
    desc = _descriptor(ckpt)
    if desc.format is CheckpointFormat.UNSUPPORTED:
        return
    for problem in desc.config_problems(ckpt):
        yield Finding(CONFIG_QUANT, problem, file="config.json")
    for warning in desc.config_warnings(ckpt):
        yield Finding(CONFIG_QUANT, warning, file="config.json", severity=Severity.WARNING)
    yield from desc.config_findings(ckpt)
    explained: set[str] = set()
    if desc.needs_exclude_entries or ckpt.exclude:
        explained = yield from _exclude_entries(ckpt)
    listed = Listing(MAX_LISTED)
    for finding in _module_findings(ckpt, opts, desc, explained):
        yield from listed.add(finding)
    yield from listed.rest()
    if desc.format is not CheckpointFormat.BF16 and ckpt.modules and not any(
            m.quantized for m in ckpt.modules.values()):
        said = (f"quantization_config declares {ckpt.format.value}, but none of the "
                f"{len(ckpt.modules)} modules is stored quantized")
        built = _built_quantized(ckpt) if desc.all_bf16_why else []
        if built:
            yield Finding(NOTHING_QUANTIZED, f"{said}; {len(built)} Linear(s) are not excluded "
                          f"(e.g. {built[0]}): {desc.all_bf16_why}", file="config.json",
                          severity=Severity.ERROR)
        else:
            yield Finding(NOTHING_QUANTIZED, said, file="config.json")


def _built_quantized(ckpt: Checkpoint) -> list[str]:
    """The modules the loader builds with the checkpoint's scheme: the Linears of a schemed
    kind the exclude/ignore list does not match."""
    return sorted(name for name, exp in ckpt.expected.items()
                  if exp.linear and exp.kind in _SCHEMED and name in ckpt.modules
                  and not ckpt.is_excluded(name))


#: ``_SIGNATURE(exp)``: what an :class:`ExpectedModule` is but for its name and place (kind,
#: params, linear): the experts of every layer share a handful
_SIGNATURE = itemgetter(1, 2, 3)


def _settled(ckpt: Checkpoint, desc: Descriptor, expectations: _Expectations,
             group: list[ExpectedModule]) -> bool:
    """Whether no module of ``group`` (expected modules of one signature: the gate and up
    projections of every routed expert, say) has a finding of :func:`_module_findings`'
    per-module checks, shown for the whole group at once, in C-level passes over it: each
    module is present and quantized, loadable quantized (:func:`_why`), not excluded,
    stored in one descriptor's format, and holds exactly that format's usual tensors. False
    says only that the group's modules must be judged one by one, as a group with one odd
    module is."""
    shape = group[0].shape
    if shape is None or len(shape) != 2:
        return False
    names = list(map(itemgetter(0), group))
    mods = list(map(ckpt.modules.get, names))
    if not all(mods) or not all(map(attrgetter("quantized"), mods)):  # a Module is truthy
        return False
    if set(map(_why, repeat(ckpt), group)) != {None} or ckpt.exclude_matcher.matches_any(names):
        return False
    module_descs = set(map(id, map(desc.for_module, repeat(ckpt), names)))
    module_desc = desc.for_module(ckpt, names[0])
    if module_descs != {id(module_desc)}:
        return False
    expected = expectations(module_desc, shape)
    if expected.usual is None:
        return False
    tensors = list(map(attrgetter("tensors"), mods))
    if set(map(len, tensors)) != {len(expected.params)}:
        return False
    # each param present in every module (else _ABSENT), with its usual dtype and shape
    return all(
        set(map(_DTYPE_SHAPE, map(dict.get, tensors, repeat(param), repeat(_ABSENT)))) == {usual}
        for param, usual in zip(expected.params, expected.usual, strict=True)
    )


def _unsettled(ckpt: Checkpoint, desc: Descriptor, expectations: _Expectations
               ) -> Iterator[ExpectedModule]:
    """The expected modules, in order, less those of the groups :func:`_settled` clears."""
    expected = list(ckpt.expected.values())
    signatures = list(map(_SIGNATURE, expected))
    groups: defaultdict[tuple[object, ...], list[ExpectedModule]] = defaultdict(list)
    for signature, exp in zip(signatures, expected, strict=True):
        groups[signature].append(exp)
    settled = {signature for signature, group in groups.items()
               if _settled(ckpt, desc, expectations, group)}
    return compress(expected, map(not_, map(settled.__contains__, signatures)))


def _module_findings(ckpt: Checkpoint, opts: Options, desc: Descriptor, explained: set[str]
                     ) -> Iterator[Finding]:
    """The findings of each expected module, then of each fused pair (``explained``: the
    modules an exclude finding already covers)."""
    is_excluded = ckpt.exclude_matcher  # once: ckpt.exclude does not change during the run
    expectations = _Expectations(ckpt, opts)
    for exp in _unsettled(ckpt, desc, expectations):
        mod = ckpt.modules.get(exp.name)
        if mod is None:
            continue
        if mod.quantized:
            why = _why(ckpt, exp)
            if why is not None:
                first = _anchor(mod)
                yield Finding(
                    UNQUANTIZABLE_QUANTIZED,
                    f"{exp.name} is quantized but will not load: {why}",
                    file=first.file,
                    tensor=first.name,
                    offset=first.begin,
                )
                continue
            if is_excluded(exp.name):
                first = _anchor(mod)
                yield Finding(
                    EXCLUDED_QUANTIZED,
                    f"{exp.name} is matched by the exclude/ignore "
                    "list, so vLLM builds it BF16, but it carries quantization tensors",
                    file=first.file,
                    tensor=first.name,
                    offset=first.begin,
                )
                continue
            shape = exp.shape
            if shape is not None and len(shape) == 2:
                module_desc = desc.for_module(ckpt, exp.name)
                expected = expectations(module_desc, shape)
                if not expected.holds_usual(mod.tensors):
                    yield from _check_quantized(ckpt, mod, shape, opts, module_desc,
                                                expected.spec)
            continue
        w = mod.tensors.get("weight")
        if w is not None and len(w.shape) == 2 and w.dtype != "BF16" and exp.kind != "router":
            yield Finding(
                UNQUANT_DTYPE,
                f"{w.name} is {w.dtype}, not BF16",
                file=w.file,
                tensor=w.name,
                offset=w.begin,
            )
        if _needs_entry(ckpt, exp.name) and exp.name not in explained:
            why = (
                "vLLM builds it with the MoE scheme and expects quantized tensors"
                if exp.kind == "expert"
                else _descriptor(ckpt).bf16_linear_why
            )
            first = _anchor(mod)
            yield Finding(
                NOT_EXCLUDED_UNQUANTIZED,
                f"{exp.name} is BF16 but not in the exclude/ignore list: {why}",
                file=first.file,
                tensor=first.name,
                offset=first.begin,
            )
    # fused pairs (an expert's gate and up too: they form its w13)
    if ckpt.arch is not None:
        fused_first = tuple(f".{x}" for x, _ in _FUSED)
        for name in sorted(filter(methodcaller("endswith", fused_first), ckpt.modules)):
            for x, y in _FUSED:
                mx = ckpt.modules[name]
                my = ckpt.modules.get(name.removesuffix(x) + y) if name.endswith("." + x) else None
                if my is None:
                    continue
                if mx.quantized != my.quantized and ".experts." not in name:
                    # (a half-quantized expert is the module checks' finding, not a second one)
                    q, u = (mx, my) if mx.quantized else (my, mx)
                    why = f"{q.name} is quantized but {u.name} is not"
                elif mx.quantized and (
                        desc.for_module(ckpt, mx.name) is not desc.for_module(ckpt, my.name)):
                    # a mixed checkpoint: each module's scheme is its own config group's
                    q, u = mx, my
                    why = (f"{q.name} is {desc.for_module(ckpt, q.name).format.value} but "
                           f"{u.name} is {desc.for_module(ckpt, u.name).format.value}")
                else:
                    continue
                ref = _anchor(q)
                yield Finding(
                    FUSED_PAIR_MISMATCH,
                    f"{why}; vLLM and SGLang fuse them into one module",
                    file=ref.file,
                    tensor=ref.name,
                    offset=ref.begin,
                )


#: The layout checks as the runner runs them.
CHECK = CheckModule("layout", run)
