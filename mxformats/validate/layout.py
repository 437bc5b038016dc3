"""Layout: the quantization config the loader reads, the tensor set of each quantized module,
and the modules vLLM builds unquantized."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Generator, Iterator, Mapping
from typing import Any

from .findings import Finding, Level, Severity, declare
from .model import (
    Checkpoint,
    ExpectedModule,
    Format,
    Module,
    NearMisses,
    Options,
    TensorRef,
)

__all__ = ["expected_tensors", "run"]

E, W, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO
S = Level.STRUCTURE
G = "layout"

CONFIG_QUANT = declare(
    "CONFIG_QUANT",
    E,
    S,
    G,
    "The quantization config has a value the loader rejects or the format does not allow.",
    "Re-export with the producer's supported recipe.",
)
PACK_METHOD = declare(
    "PACK_METHOD",
    W,
    S,
    G,
    "A Quark W4A8 config records export.pack_method other than 'reorder': the AITER kernel reads "
    "the reorder nibble order [0,2,4,6,1,3,5,7], and the weights' own order cannot be told from "
    "the codes (the numeric checks cannot see it).",
    "Re-export with pack_method='reorder', or validate with --source to check the packing.",
)
EXCLUDE_GLOB = declare(
    "EXCLUDE_GLOB",
    W,
    S,
    G,
    "An exclude/ignore entry is a glob; vLLM matches exact names or 're:' regexes only.",
    "Write the exact module names or a 're:' regex.",
)
EXCLUDE_INVALID = declare(
    "EXCLUDE_INVALID",
    E,
    S,
    G,
    "An exclude/ignore 're:' entry is not a valid regular expression: vLLM's regex.match raises "
    "on it when the model loads.",
    "Fix the regex (the message quotes the parser's error).",
)
EXCLUDE_UNMATCHED = declare(
    "EXCLUDE_UNMATCHED",
    W,
    S,
    G,
    "An exclude/ignore entry matches no module; the message names the module it was probably "
    "meant for (e.g. 'model.layers.N...' in a K2.5/K2.6 checkpoint whose modules are "
    "'language_model.model.layers.N...'). Entries that share one prefix mistake are reported "
    "once. An error when such a module is stored BF16 and so needed the entry (vLLM builds it "
    "quantized); those modules get no NOT_EXCLUDED_UNQUANTIZED of their own.",
    "Write the module's full name, or a 're:' regex (vLLM anchors it at the start: re.match).",
)
QUANT_TENSOR_MISSING = declare(
    "QUANT_TENSOR_MISSING",
    E,
    S,
    G,
    "A quantized module lacks a tensor its format needs (a missing scale loads as ones).",
    "Re-export the module.",
)
QUANT_TENSOR_UNEXPECTED = declare(
    "QUANT_TENSOR_UNEXPECTED",
    E,
    S,
    G,
    "A quantized module carries a tensor its format does not have (e.g. input_scale with dynamic "
    "activations, a leftover weight_scale_inv): vLLM raises KeyError.",
    "Remove the tensor or fix the config.",
)
QUANT_DTYPE = declare(
    "QUANT_DTYPE",
    E,
    S,
    G,
    "A quantization tensor has the wrong dtype for its format (e.g. F8_E8M0 scales for Quark).",
    "Store it with the dtype the loader expects.",
)
QUANT_DTYPE_UNUSUAL = declare(
    "QUANT_DTYPE_UNUSUAL",
    W,
    S,
    G,
    "A quantization tensor has an accepted but unusual dtype (F16/F32 compressed-tensors scale).",
    "Nothing required; BF16 is what the producers write.",
)
QUANT_SHAPE = declare(
    "QUANT_SHAPE",
    E,
    S,
    G,
    "A quantization tensor's shape (or weight_shape value) does not match the module's logical "
    "shape and the format's packing and group size.",
    "Re-export the module with the declared group size and packing.",
)
EXCLUDED_QUANTIZED = declare(
    "EXCLUDED_QUANTIZED",
    E,
    S,
    G,
    "A module the exclude/ignore list matches carries quantization tensors: vLLM builds it BF16.",
    "Remove it from the exclude list or store it unquantized.",
)
NOT_EXCLUDED_UNQUANTIZED = declare(
    "NOT_EXCLUDED_UNQUANTIZED",
    E,
    S,
    G,
    "An unquantized Linear that the exclude/ignore list does not match: vLLM builds it quantized "
    "and the BF16 weight does not load.",
    "Add the module to exclude/ignore (exact name or 're:').",
)
UNQUANTIZABLE_QUANTIZED = declare(
    "UNQUANTIZABLE_QUANTIZED",
    E,
    S,
    G,
    "A module vLLM builds unquantized (LM head, router, embedding, norm, vision tower, projector; "
    "for W4A8 every Linear but the routed experts) is quantized: it will not load.",
    "Re-export with the module excluded (e.g. '*lm_head', '*vision_tower*').",
)
FUSED_PAIR_MISMATCH = declare(
    "FUSED_PAIR_MISMATCH",
    E,
    S,
    G,
    "Two modules vLLM fuses (q_a_proj+kv_a_proj_with_mqa, gate_proj+up_proj) differ in "
    "quantization: vLLM raises 'Found a different quantization schemes'.",
    "Quantize or exclude both.",
)
UNQUANT_DTYPE = declare(
    "UNQUANT_DTYPE",
    W,
    S,
    G,
    "An unquantized 2-D weight is not BF16 (F32 points to Quark's float32 default-dtype fallback).",
    "Set dtype in config.json before exporting, or cast to BF16.",
)


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
    ("mlp.gate_proj", "mlp.up_proj"),
    ("mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj"),
)


def _spec(qc: Mapping[str, Any] | None, key: str) -> Any:
    g = qc.get("global_quant_config") if qc else None
    return g.get(key) if isinstance(g, dict) else None


def _config_problems(ckpt: Checkpoint) -> list[str]:
    qc = ckpt.quant_config or {}
    out: list[str] = []
    inp: Any = None

    def want(obj: Any, key: str, value: object, where: str) -> None:
        got = obj.get(key) if isinstance(obj, dict) else None
        if got != value:
            out.append(f"{where}.{key} is {got!r}, the format needs {value!r}")

    if ckpt.format in (Format.QUARK_MXFP4, Format.QUARK_W4A8):
        export = qc.get("export")
        if not isinstance(export, dict):
            out.append("export block is missing: vLLM's QuarkConfig raises")
        elif not isinstance(export.get("kv_cache_group", []), list):
            out.append("export.kv_cache_group must be a list")
        for key in ("output_tensors", "bias"):
            if _spec(qc, key) is not None:
                out.append(f"global_quant_config.{key} must be null (vLLM: NotImplementedError)")
        inp = _spec(qc, "input_tensors")
    if ckpt.format == Format.QUARK_MXFP4:
        w = _spec(qc, "weight")
        for k, v in (("qscheme", "per_group"), ("group_size", 32), ("is_dynamic", False)):
            want(w, k, v, "weight")
        if inp is not None and not (
            (inp.get("dtype") == "fp4" and inp.get("is_dynamic") is True)
            or (inp.get("dtype") == "fp8_e4m3" and inp.get("is_dynamic") is False)
        ):
            out.append("input_tensors must be dynamic fp4 (vLLM raises on static MXFP4 input)")
    elif ckpt.format == Format.QUARK_W4A8:
        w = _spec(qc, "weight")
        if not isinstance(w, list) or len(w) != 2 or not all(isinstance(s, dict) for s in w):
            out.append("weight must be a list of two specs")
        else:
            for k, v in (("qscheme", "per_tensor"), ("is_dynamic", False)):
                want(w[0], k, v, "weight[0]")
            for k, v in (
                ("qscheme", "per_channel"),
                ("symmetric", True),
                ("ch_axis", 0),
                ("is_dynamic", False),
            ):
                want(w[1], k, v, "weight[1]")
        if (
            not isinstance(inp, dict)
            or inp.get("dtype") != "fp8_e4m3"
            or not (inp.get("is_dynamic") is True or inp.get("qscheme") == "per_tensor")
        ):
            out.append("input_tensors must be fp8_e4m3, dynamic or per_tensor (_is_fp8_w4a8)")
    elif ckpt.format == Format.CT_INT4:
        want(qc, "format", "pack-quantized", "quantization_config")
        want(qc, "quantization_status", "compressed", "quantization_config")
        if qc.get("kv_cache_scheme") is not None:
            out.append("kv_cache_scheme must be null (k/v scale tensors are not handled)")
        groups = qc.get("config_groups")
        for gname, group in groups.items() if isinstance(groups, dict) else ():
            where = f"config_groups.{gname}"
            if not isinstance(group, dict):
                out.append(f"{where} is not an object")
                continue
            if group.get("format") not in (None, "pack-quantized"):
                out.append(f"{where}.format is {group.get('format')!r}, not 'pack-quantized'")
            if group.get("input_activations") is not None:
                out.append(f"{where}.input_activations must be null (weight-only INT4)")
            w = group.get("weights")
            for k, v in (
                ("num_bits", 4),
                ("type", "int"),
                ("symmetric", True),
                ("strategy", "group"),
                ("group_size", 32),
                ("dynamic", False),
            ):
                want(w, k, v, f"{where}.weights")
            if isinstance(w, dict) and w.get("actorder") not in (None, "group"):
                out.append(f"{where}.weights.actorder {w.get('actorder')!r} is not supported")
    return out


def _ct_group(ckpt: Checkpoint) -> tuple[int, bool]:
    qc = ckpt.quant_config or {}
    groups = qc.get("config_groups")
    for group in groups.values() if isinstance(groups, dict) else ():
        w = group.get("weights") if isinstance(group, dict) else None
        if isinstance(w, dict):
            gs = w.get("group_size")
            return (gs if isinstance(gs, int) and gs > 0 else 32), w.get("actorder") == "group"
    return 32, False


def _anchor(mod: Module) -> TensorRef:
    """The tensor a module's finding points at: its weight when it has one."""
    for p in ("weight", "weight_packed"):
        if p in mod.tensors:
            return mod.tensors[p]
    return min(mod.tensors.values(), key=lambda t: (t.file, t.begin))


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def expected_tensors(
    ckpt: Checkpoint, out: int, inp: int
) -> dict[str, tuple[tuple[str, ...], tuple[tuple[int, ...], ...]]]:
    """param -> (accepted dtypes, accepted shapes) of a quantized Linear ``[out, inp]``; the
    first dtype and shape are the usual ones."""
    if ckpt.format == Format.QUARK_MXFP4:
        return {
            "weight": (("U8",), ((out, inp // 2),)),
            "weight_scale": (("U8",), ((out, _cdiv(inp, 32)),)),
        }
    if ckpt.format == Format.QUARK_W4A8:
        return {
            "weight": (("I32",), ((out, inp // 8),)),
            "weight_scale": (("F32",), ((), (1,))),
            "weight_scale_2": (("F32",), ((out,),)),
        }
    if ckpt.format == Format.CT_INT4:
        gs, actorder = _ct_group(ckpt)
        want: dict[str, tuple[tuple[str, ...], tuple[tuple[int, ...], ...]]] = {
            "weight_packed": (("I32",), ((out, _cdiv(inp, 8)),)),
            "weight_scale": (("BF16", "F16", "F32"), ((out, _cdiv(inp, gs)),)),
            "weight_shape": (("I32", "I64"), ((2,),)),
        }
        if actorder:
            want["weight_g_idx"] = (("I32", "I64"), ((inp,),))
        return want
    if ckpt.format == Format.FP8_BLOCK:
        qc = ckpt.quant_config or {}
        block = qc.get("weight_block_size") or [128, 128]
        bo, bi = (int(block[0]), int(block[1])) if len(block) == 2 else (128, 128)
        return {
            "weight": (("F8_E4M3",), ((out, inp),)),
            "weight_scale_inv": (("F32",), ((_cdiv(out, bo), _cdiv(inp, bi)),)),
        }
    return {}


def _why(ckpt: Checkpoint, exp: ExpectedModule) -> str | None:
    """Why vLLM cannot load ``exp`` quantized (None when it can)."""
    if exp.kind in _NEVER_QUANTIZED:
        return _NEVER_QUANTIZED[exp.kind]
    if ckpt.format == Format.QUARK_W4A8 and exp.kind != "expert":
        return "Quark W4A8 has no vLLM Linear scheme: only routed experts may be quantized"
    if ckpt.format in (Format.BF16,):
        return "config.json declares no quantization"
    return None


def _check_quantized(
    ckpt: Checkpoint, mod: Module, shape: tuple[int, ...], opts: Options
) -> Iterator[Finding]:
    out, inp = shape[0], shape[-1]
    want = expected_tensors(ckpt, out, inp)
    if not want:
        return
    for p, (dtypes, shapes) in want.items():
        ref = mod.tensors.get(p)
        if ref is None and f"{mod.name}.{p}" in ckpt.unavailable:
            continue
        if ref is None:
            any_ref = next(iter(mod.tensors.values()))
            yield Finding(
                QUANT_TENSOR_MISSING,
                f"{mod.name}.{p} is absent ({ckpt.format.value} "
                f"needs {dtypes[0]}{list(shapes[0])})",
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
        elif ref.dtype != dtypes[0] and ckpt.format == Format.CT_INT4 and p == "weight_scale":
            yield Finding(
                QUANT_DTYPE_UNUSUAL,
                f"{ref.name} is {ref.dtype} (producers write BF16)",
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
        ckpt.format == Format.CT_INT4
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
        and ckpt.format in (Format.QUARK_MXFP4, Format.QUARK_W4A8, Format.CT_INT4)
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
    names = sorted(set(ckpt.expected) | set(ckpt.modules))
    for entry in ckpt.exclude:
        if _is_glob(entry):
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
    unmatched = [e for e in matcher.unmatched(names) if not _is_glob(e)]
    if not unmatched:
        return set()
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
        severity=E,
    )


def run(ckpt: Checkpoint, opts: Options) -> Iterator[Finding]:
    if ckpt.format == Format.UNSUPPORTED:
        return
    for problem in _config_problems(ckpt):
        yield Finding(CONFIG_QUANT, problem, file="config.json")
    if ckpt.format == Format.QUARK_W4A8:
        export = ckpt.quant_config.get("export") if isinstance(ckpt.quant_config, dict) else None
        method = export.get("pack_method") if isinstance(export, dict) else None
        if method != "reorder":
            yield Finding(
                PACK_METHOD,
                f"export.pack_method is {method!r}, not 'reorder' (checkpoints.md §6.2 check 3)",
                file="config.json",
            )
    explained: set[str] = set()
    if ckpt.format in (Format.QUARK_MXFP4, Format.QUARK_W4A8, Format.CT_INT4):
        explained = yield from _exclude_entries(ckpt)
    for exp in ckpt.expected.values():
        mod = ckpt.modules.get(exp.name)
        if mod is None:
            continue
        excluded = ckpt.is_excluded(exp.name)
        first = _anchor(mod)
        if mod.quantized:
            why = _why(ckpt, exp)
            if why is not None:
                yield Finding(
                    UNQUANTIZABLE_QUANTIZED,
                    f"{exp.name} is quantized but will not load: {why}",
                    file=first.file,
                    tensor=first.name,
                    offset=first.begin,
                )
                continue
            if excluded:
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
                yield from _check_quantized(ckpt, mod, shape, opts)
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
                else "Quark W4A8 has no Linear scheme ('No quark compatible scheme')"
                if ckpt.format == Format.QUARK_W4A8
                else "vLLM builds it quantized and its BF16 weight raises KeyError"
            )
            yield Finding(
                NOT_EXCLUDED_UNQUANTIZED,
                f"{exp.name} is BF16 but not in the exclude/ignore list: {why}",
                file=first.file,
                tensor=first.name,
                offset=first.begin,
            )
    # fused pairs
    if ckpt.arch is not None:
        for n in range(ckpt.arch.layers + ckpt.arch.mtp_layers):
            pre = f"{ckpt.arch.prefix}layers.{n}."
            for x, y in _FUSED:
                mx, my = ckpt.modules.get(pre + x), ckpt.modules.get(pre + y)
                if mx is not None and my is not None and mx.quantized != my.quantized:
                    q, u = (mx, my) if mx.quantized else (my, mx)
                    ref = next(iter(q.tensors.values()))
                    yield Finding(
                        FUSED_PAIR_MISMATCH,
                        f"{q.name} is quantized but {u.name} is not; "
                        "vLLM fuses them into one module",
                        file=ref.file,
                        tensor=ref.name,
                        offset=ref.begin,
                    )
