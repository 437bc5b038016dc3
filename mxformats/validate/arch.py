"""The module inventory a config implies (never hard-coded sizes); format detection is the
descriptors' (:mod:`mxformats.validate.descriptors`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from operator import attrgetter
from typing import Any

from .model import (
    Architecture,
    Checkpoint,
    ExpectedModule,
    TensorRef,
    VisionDims,
)

__all__ = [
    "TEXT_DEFAULTS",
    "VISION_DEFAULTS",
    "ConfigKeyError",
    "anchor_problems",
    "architecture",
    "config_value_problems",
    "derive",
    "expected_modules",
    "implied_size",
    "inventory_problems",
    "key_value",
    "quantization_config",
    "vision_dims",
]


def quantization_config(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The quantization config vLLM uses: the top level wins over ``text_config``'s."""
    top = config.get("quantization_config")
    if isinstance(top, dict):
        return top
    text = config.get("text_config")
    if isinstance(text, dict) and isinstance(text.get("quantization_config"), dict):
        return dict(text["quantization_config"])
    return None


def _where(part: str, key: str) -> str:
    return f"{part}.{key}" if part else key


class ConfigKeyError(ValueError):
    """A key the architecture needs is malformed (an absent key takes the loader's default).
    ``key`` is its dotted place in config.json (``vision_config.hidden_size``); the message
    names it and what is wrong."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key} {problem}")
        self.key = key


def _int(t: Mapping[str, Any], key: str, part: str, minimum: int = 0) -> int:
    """``t[key]`` (defaults already merged in) as an integer >= ``minimum``, else
    :class:`ConfigKeyError` naming ``part.key``."""
    v = t.get(key)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigKeyError(_where(part, key), f"must be an integer, got {v!r}")
    if v < minimum:
        raise ConfigKeyError(_where(part, key), f"must be >= {minimum}, got {v}")
    return v


#: ``KimiK25VisionConfig``'s defaults: vLLM builds ``KimiK25VisionConfig(**vision_config)``, so a
#: key the checkpoint's ``vision_config`` omits takes this value, and ``KimiK25Config`` builds
#: ``KimiK25VisionConfig()`` when ``vision_config`` is absent altogether. Source: vLLM
#: ``vllm/transformers_utils/configs/kimi_k25.py`` at commit
#: 61a45f5a77a7271b0482b6860c735668039fa100 (``KimiK25VisionConfig.__init__``).
VISION_DEFAULTS: dict[str, Any] = {
    "patch_size": 14,
    "init_pos_emb_height": 64,
    "init_pos_emb_width": 64,
    "num_hidden_layers": 27,
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "merge_kernel_size": [2, 2],
}

#: ``rms_norm_eps`` when the text config omits it: transformers 4.57.6
#: ``models/deepseek_v3/configuration_deepseek_v3.py`` (``DeepseekV3Config``), the class
#: vLLM's ``KimiK25Config`` builds the text config with.
RMS_NORM_EPS_DEFAULT = 1e-6


def vision_dims(vc: Mapping[str, Any]) -> VisionDims:
    """The MoonViT sizes vLLM builds from ``vision_config`` (:data:`VISION_DEFAULTS` for absent
    keys); raises :class:`ConfigKeyError` naming a malformed key."""
    part = "vision_config"
    merged = {**VISION_DEFAULTS, **{k: v for k, v in vc.items() if v is not None}}
    kernel = merged["merge_kernel_size"]
    if (
        not isinstance(kernel, (list, tuple))
        or len(kernel) != 2
        or not all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in kernel)
    ):
        raise ConfigKeyError(
            f"{part}.merge_kernel_size", f"must be two positive integers, got {kernel!r}"
        )
    return VisionDims(
        hidden=_int(merged, "hidden_size", part, minimum=1),
        intermediate=_int(merged, "intermediate_size", part, minimum=1),
        patch=_int(merged, "patch_size", part, minimum=1),
        pos_height=_int(merged, "init_pos_emb_height", part, minimum=1),
        pos_width=_int(merged, "init_pos_emb_width", part, minimum=1),
        blocks=_int(merged, "num_hidden_layers", part),
        merge=(int(kernel[0]), int(kernel[1])),
        defaulted=tuple(k for k in VISION_DEFAULTS if vc.get(k) is None),
    )


#: ``DeepseekV3Config``'s defaults for the keys the inventory reads: vLLM builds
#: ``DeepseekV3Config(**text_config)`` for K2.5/K2.6 (``KimiK25Config``, the vLLM file cited at
#: :data:`VISION_DEFAULTS`) and transformers reads a ``deepseek_v3`` config with the same class.
#: Source: transformers 4.57.6 ``models/deepseek_v3/configuration_deepseek_v3.py``.
#: ``num_nextn_predict_layers`` is not a key of that class; vLLM reads it with a default of 0.
TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 129280,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "n_shared_experts": 1,
    "n_routed_experts": 256,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "qk_nope_head_dim": 128,
    "first_k_dense_replace": 3,
    "num_nextn_predict_layers": 0,
}


def architecture(config: Mapping[str, Any]) -> Architecture:
    """The architecture facts of the language model, :data:`TEXT_DEFAULTS` for absent keys.
    Raises :class:`ConfigKeyError` naming a malformed text key (``text_config.hidden_size``);
    a problem in ``vision_config`` does not raise: it is kept in
    :attr:`Architecture.vision_problem` so that only the vision tower goes unchecked."""
    text = config.get("text_config")
    multimodal = isinstance(text, dict)
    given: Mapping[str, Any] = text if isinstance(text, dict) else config
    part = "text_config" if multimodal else ""
    # an explicit null q_lora_rank means "no q LoRA" (DeepSeek-V2-Lite-style); absent: default
    t = {**TEXT_DEFAULTS, **{k: v for k, v in given.items() if v is not None}}
    nulls = {"q_lora_rank"} if "q_lora_rank" in given and given["q_lora_rank"] is None else set()
    q_lora = None if nulls else _int(t, "q_lora_rank", part)
    vision: VisionDims | None = None
    vision_problem: str | None = None
    if multimodal:
        vc = config.get("vision_config")
        if vc is not None and not isinstance(vc, dict):
            vision_problem = f"vision_config must be an object, got {type(vc).__name__}"
        else:
            try:
                vision = vision_dims(vc or {})
            except ConfigKeyError as exc:
                vision_problem = str(exc)
    return Architecture(
        layers=_int(t, "num_hidden_layers", part),
        first_dense=_int(t, "first_k_dense_replace", part),
        experts=_int(t, "n_routed_experts", part),
        shared_experts=_int(t, "n_shared_experts", part),
        mtp_layers=_int(t, "num_nextn_predict_layers", part),
        hidden=_int(t, "hidden_size", part, minimum=1),
        intermediate=_int(t, "intermediate_size", part, minimum=1),
        moe_intermediate=_int(t, "moe_intermediate_size", part, minimum=1),
        vocab=_int(t, "vocab_size", part, minimum=1),
        heads=_int(t, "num_attention_heads", part, minimum=1),
        q_lora=q_lora or None,
        kv_lora=_int(t, "kv_lora_rank", part, minimum=1),
        qk_nope=_int(t, "qk_nope_head_dim", part),
        qk_rope=_int(t, "qk_rope_head_dim", part),
        v_head=_int(t, "v_head_dim", part, minimum=1),
        multimodal=multimodal,
        prefix="language_model.model." if multimodal else "model.",
        lm_head="language_model.lm_head" if multimodal else "lm_head",
        vision=vision,
        vision_problem=vision_problem,
        where=part,
        defaulted=tuple(k for k in TEXT_DEFAULTS if given.get(k) is None and k not in nulls),
    )


def config_value_problems(config: Mapping[str, Any]) -> list[str]:
    """Values the loader accepts but that break the model at run time: an ``rms_norm_eps`` that
    is not a finite positive number (RMSNorm divides by ``sqrt(mean(x^2) + eps)``; a NaN makes
    every output NaN). Absent: ``DeepseekV3Config``'s default, :data:`RMS_NORM_EPS_DEFAULT`."""
    text = config.get("text_config")
    t = text if isinstance(text, dict) else config
    where = _where("text_config" if isinstance(text, dict) else "", "rms_norm_eps")
    eps = t.get("rms_norm_eps", RMS_NORM_EPS_DEFAULT)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        return [f"{where} must be a number, got {eps!r}"]
    if not math.isfinite(eps) or eps <= 0:
        return [f"{where} is {eps!r}: RMSNorm needs a finite positive epsilon"]
    return []


#: ``_NEW_EXPECTED(fields)`` is ``ExpectedModule(*fields)`` without the named tuple's
#: Python-level ``__new__`` (as ``ExpectedModule._make`` builds one)
_NEW_EXPECTED = partial(tuple.__new__, ExpectedModule)


def _lin(
    name: str,
    kind: str,
    out: int,
    inp: int,
    layer: int | None = None,
    expert: int | None = None,
    bias: bool = False,
) -> ExpectedModule:
    params: list[tuple[str, tuple[int, ...]]] = [("weight", (out, inp))]
    if bias:
        params.append(("bias", (out,)))
    return ExpectedModule(name, kind, tuple(params), linear=True, layer=layer, expert=expert)


def _norm(
    name: str, dim: int, kind: str = "norm", layer: int | None = None, bias: bool = False
) -> ExpectedModule:
    params: list[tuple[str, tuple[int, ...]]] = [("weight", (dim,))]
    if bias:
        params.append(("bias", (dim,)))
    return ExpectedModule(name, kind, tuple(params), layer=layer)


def _layer(a: Architecture, n: int, mtp: bool) -> list[ExpectedModule]:
    pre = f"{a.prefix}layers.{n}."
    h = a.hidden
    out: list[ExpectedModule] = []
    if mtp:
        out += [
            ExpectedModule(f"{pre}embed_tokens", "mtp", (("weight", (a.vocab, h)),), layer=n),
            _norm(f"{pre}enorm", h, layer=n),
            _norm(f"{pre}hnorm", h, layer=n),
            _lin(f"{pre}eh_proj", "mtp", h, 2 * h, n),
            _norm(f"{pre}shared_head.norm", h, layer=n),
            ExpectedModule(
                f"{pre}shared_head.head",
                "lm_head",
                (("weight", (a.vocab, h)),),
                linear=True,
                layer=n,
            ),
        ]
    s = f"{pre}self_attn."
    if a.q_lora:
        out += [
            _lin(f"{s}q_a_proj", "attention", a.q_lora, h, n),
            _norm(f"{s}q_a_layernorm", a.q_lora, layer=n),
            _lin(f"{s}q_b_proj", "attention", a.heads * (a.qk_nope + a.qk_rope), a.q_lora, n),
        ]
    else:
        out.append(_lin(f"{s}q_proj", "attention", a.heads * (a.qk_nope + a.qk_rope), h, n))
    out += [
        _lin(f"{s}kv_a_proj_with_mqa", "attention", a.kv_lora + a.qk_rope, h, n),
        _norm(f"{s}kv_a_layernorm", a.kv_lora, layer=n),
        _lin(f"{s}kv_b_proj", "attention", a.heads * (a.qk_nope + a.v_head), a.kv_lora, n),
        _lin(f"{s}o_proj", "attention", h, a.heads * a.v_head, n),
        _norm(f"{pre}input_layernorm", h, layer=n),
        _norm(f"{pre}post_attention_layernorm", h, layer=n),
    ]
    m = f"{pre}mlp."
    if n < a.first_dense:
        i = a.intermediate
        out += [
            _lin(f"{m}gate_proj", "dense_mlp", i, h, n),
            _lin(f"{m}up_proj", "dense_mlp", i, h, n),
            _lin(f"{m}down_proj", "dense_mlp", h, i, n),
        ]
    else:
        i = a.moe_intermediate
        # what _lin builds, with the params shared by every expert (~70,000 modules for Kimi)
        gate_up, down = _lin("", "", i, h).params, _lin("", "", h, i).params
        for e in range(a.experts):
            x = f"{m}experts.{e}."
            out += [
                _NEW_EXPECTED((f"{x}gate_proj", "expert", gate_up, True, n, e)),
                _NEW_EXPECTED((f"{x}up_proj", "expert", gate_up, True, n, e)),
                _NEW_EXPECTED((f"{x}down_proj", "expert", down, True, n, e)),
            ]
        out.append(
            ExpectedModule(
                f"{m}gate",
                "router",
                (("weight", (a.experts, h)), ("e_score_correction_bias", (a.experts,))),
                linear=True,
                layer=n,
            )
        )
        if a.shared_experts:
            si = i * a.shared_experts
            x = f"{m}shared_experts."
            out += [
                _lin(f"{x}gate_proj", "shared_expert", si, h, n),
                _lin(f"{x}up_proj", "shared_expert", si, h, n),
                _lin(f"{x}down_proj", "shared_expert", h, si, n),
            ]
    return out


def _vision(v: VisionDims, text_hidden: int) -> list[ExpectedModule]:
    """MoonViT and its projector as vLLM's ``kimi_k25`` model registers them."""
    vh, vi, patch = v.hidden, v.intermediate, v.patch
    mm = vh * v.merge[0] * v.merge[1]
    t = "vision_tower."
    out = [
        ExpectedModule(
            f"{t}patch_embed.proj", "vision", (("weight", (vh, 3, patch, patch)), ("bias", (vh,)))
        ),
        ExpectedModule(
            f"{t}patch_embed.pos_emb", "vision", (("weight", (v.pos_height, v.pos_width, vh)),)
        ),
    ]
    for b in range(v.blocks):
        p = f"{t}encoder.blocks.{b}."
        out += [
            ExpectedModule(f"{p}norm0", "vision", (("weight", (vh,)), ("bias", (vh,)))),
            ExpectedModule(f"{p}norm1", "vision", (("weight", (vh,)), ("bias", (vh,)))),
            _lin(f"{p}mlp.fc0", "vision", vi, vh, bias=True),
            _lin(f"{p}mlp.fc1", "vision", vh, vi, bias=True),
            _lin(f"{p}wqkv", "vision", 3 * vh, vh, bias=True),
            _lin(f"{p}wo", "vision", vh, vh, bias=True),
        ]
    out += [
        ExpectedModule(
            f"{t}encoder.final_layernorm", "vision", (("weight", (vh,)), ("bias", (vh,)))
        ),
        ExpectedModule("mm_projector.pre_norm", "projector", (("weight", (vh,)), ("bias", (vh,)))),
        _lin("mm_projector.proj.0", "projector", mm, mm, bias=True),
        _lin("mm_projector.proj.2", "projector", text_hidden, mm, bias=True),
    ]
    return out


def expected_modules(a: Architecture, *, with_mtp: bool = True) -> dict[str, ExpectedModule]:
    """Every module the architecture implies, by name (MTP layers included when declared).
    Its size is the config's: call :func:`inventory_problems` first on untrusted input."""
    mods: list[ExpectedModule] = []
    if a.vision is not None:
        mods += _vision(a.vision, a.hidden)
    mods.append(
        ExpectedModule(f"{a.prefix}embed_tokens", "embedding", (("weight", (a.vocab, a.hidden)),))
    )
    for n in range(a.layers + (a.mtp_layers if with_mtp else 0)):
        mods += _layer(a, n, mtp=n >= a.layers)
    mods.append(_norm(f"{a.prefix}norm", a.hidden))
    mods.append(
        ExpectedModule(a.lm_head, "lm_head", (("weight", (a.vocab, a.hidden)),), linear=True)
    )
    return {m.name: m for m in mods}


#: How many times more tensors (or bytes) than the shards hold a config may imply before it is
#: taken as not describing them: twice leaves room for a checkpoint missing half its tensors,
#: which the coverage checks then report one by one.
INVENTORY_SLACK = 2
#: The fewest bytes an element of any format the validator verifies takes (4-bit codes).
_MIN_BYTES_PER_ELEMENT = 0.5


def _size(mods: list[ExpectedModule]) -> tuple[int, int]:
    """(tensor count, element count) of ``mods``."""
    count = elements = 0
    for m in mods:
        for _, shape in m.params:
            count += 1
            elements += math.prod(shape)
    return count, elements


@dataclass(frozen=True)
class _Prototypes:
    """Tensor and element counts of one layer of each kind (a MoE layer without its routed
    experts, one routed expert) and of the embedding, final norm and LM head."""

    dense: tuple[int, int]
    moe: tuple[int, int]
    expert: tuple[int, int]
    ends: tuple[int, int]

    @classmethod
    def of(cls, a: Architecture) -> _Prototypes:
        no_experts = replace(a, experts=0, vision=None)
        return cls(
            dense=_size(_layer(replace(no_experts, first_dense=1), 0, mtp=False)),
            moe=_size(_layer(replace(no_experts, first_dense=0), 0, mtp=False)),
            # an expert's three projections, and its row of the router weight and bias
            expert=(3, 3 * a.moe_intermediate * a.hidden + a.hidden + 1),
            ends=(3, 2 * a.vocab * a.hidden + a.hidden),
        )


def implied_size(a: Architecture) -> tuple[int, int]:
    """``(tensors, elements)`` of the language model ``a`` implies, MTP layers left out,
    computed without building it (:func:`expected_modules` builds the same inventory)."""
    p = _Prototypes.of(a)
    n_dense = min(a.first_dense, a.layers)
    n_moe = a.layers - n_dense
    return (
        p.ends[0] + n_dense * p.dense[0] + n_moe * (p.moe[0] + a.experts * p.expert[0]),
        p.ends[1] + n_dense * p.dense[1] + n_moe * (p.moe[1] + a.experts * p.expert[1]),
    )


def inventory_problems(a: Architecture, tensors: int, nbytes: int | None) -> list[str]:
    """Why the inventory ``a`` implies cannot be what shards holding ``tensors`` tensors and
    ``nbytes`` bytes of tensor data describe (``nbytes`` None: unknown, a shard is unreadable).

    Computed from one prototype layer of each kind, never by building the inventory, so a
    config claiming ``num_hidden_layers: 100000000`` costs as little as a real one. Bounds the
    language model without MTP layers (vLLM skips absent ones); a vision problem is returned
    separately by :func:`vision_problem_for`.
    """
    cap = INVENTORY_SLACK * max(tensors, 1)
    p = _Prototypes.of(a)
    n_moe = a.layers - min(a.first_dense, a.layers)
    count, elements = implied_size(a)
    expert = p.expert
    where = f"{a.where}." if a.where else ""
    per_layer = min(p.dense[0], p.moe[0])
    if a.layers * per_layer > cap:
        return [
            f"{where}num_hidden_layers is {a.layers}: each layer holds at least {per_layer} "
            f"tensors, but the shards hold {tensors}"
        ]
    if a.mtp_layers * per_layer > cap:
        return [
            f"{where}num_nextn_predict_layers is {a.mtp_layers}: each MTP layer holds at least "
            f"{per_layer} tensors, but the shards hold {tensors}"
        ]
    if n_moe * a.experts * expert[0] > cap:
        return [
            f"{where}n_routed_experts is {a.experts}: {n_moe} MoE layers of that many experts "
            f"need {n_moe * a.experts * expert[0]} tensors, but the shards hold {tensors}"
        ]
    if count > cap:
        return [
            f"the config implies {count} tensors ({where}num_hidden_layers {a.layers}, "
            f"{where}n_routed_experts {a.experts}), but the shards hold {tensors}"
        ]
    least = elements * _MIN_BYTES_PER_ELEMENT
    if nbytes is not None and least > INVENTORY_SLACK * max(nbytes, 1):
        sizes = "; ".join(
            key_value(k, getattr(a, f), where, a.defaulted, TEXT_DEFAULTS)
            for k, f in (
                ("hidden_size", "hidden"),
                ("vocab_size", "vocab"),
                ("intermediate_size", "intermediate"),
                ("moe_intermediate_size", "moe_intermediate"),
            )
        )
        return [
            f"the config's sizes ({sizes}) need at least {int(least)} bytes of weights at 4 "
            f"bits each, but the shards hold {nbytes}"
        ]
    return []


def vision_problem_for(v: VisionDims, tensors: int) -> str | None:
    """Why the vision tower ``v`` cannot be held by shards of ``tensors`` tensors, or None."""
    one, none = _size(_vision(replace(v, blocks=1), 1)), _size(_vision(replace(v, blocks=0), 1))
    per_block_tensors = one[0] - none[0]
    if v.blocks * per_block_tensors > INVENTORY_SLACK * max(tensors, 1):
        return (
            f"vision_config.num_hidden_layers is {v.blocks}: each block holds "
            f"{per_block_tensors} tensors, but the shards hold {tensors}"
        )
    return None


def key_value(
    key: str, value: object, where: str, defaulted: tuple[str, ...], defaults: Mapping[str, Any]
) -> str:
    """``"text_config.hidden_size is 256"``, or, for a key config.json omits, ``"… is absent
    (the loader's default: 7168)"``."""
    if key in defaulted:
        return f"{where}{key} is absent (the loader's default: {defaults[key]})"
    return f"{where}{key} is {value}"


def _plain_weight(ckpt: Checkpoint, module: str) -> TensorRef | None:
    """``module``'s weight when the module is stored unquantized (a packed weight's shape is not
    the logical one, and quantizing it is a layout finding, not a config one)."""
    mod = ckpt.modules.get(module)
    return None if mod is None or mod.quantized else mod.tensors.get("weight")


def anchor_problems(a: Architecture, ckpt: Checkpoint) -> tuple[str | None, str | None]:
    """``(text, vision)``: a hidden size the part's first tensor contradicts. Every tensor of
    the part depends on it, so it is one root cause, not a mismatch per tensor. Anchors:
    ``embed_tokens.weight`` ``[vocab, hidden]`` and ``patch_embed.proj.weight``
    ``[hidden, 3, patch, patch]``."""
    where = f"{a.where}." if a.where else ""
    text = vision = None
    embed = _plain_weight(ckpt, f"{a.prefix}embed_tokens")
    if embed is not None and len(embed.shape) == 2 and embed.shape[1] != a.hidden:
        text = (
            f"{key_value('hidden_size', a.hidden, where, a.defaulted, TEXT_DEFAULTS)}, but "
            f"{embed.name} is {list(embed.shape)}"
        )
    patch = _plain_weight(ckpt, "vision_tower.patch_embed.proj")
    v = a.vision
    if v is not None and patch is not None and patch.shape[:1] != (v.hidden,):
        vision = (
            f"{key_value('hidden_size', v.hidden, 'vision_config.', v.defaulted, VISION_DEFAULTS)}"
            f", but {patch.name} is {list(patch.shape)}"
        )
    return text, vision


def derive(ckpt: Checkpoint) -> list[str]:
    """Set ``ckpt.arch`` and ``ckpt.expected`` from ``ckpt.config``, bounded by what the shard
    headers hold (read them first); return the ``CONFIG_ARCH`` problems, one per root cause.

    A malformed text key, a hidden size the embedding contradicts, or a count the shards cannot
    hold leaves ``ckpt.arch`` None and says why in ``ckpt.arch_problem`` (the coverage group
    then reports one summary, not a finding per tensor). A vision problem of the same kinds
    leaves only the vision tower unchecked.
    """
    problems = config_value_problems(ckpt.config)
    try:
        a = architecture(ckpt.config)
    except ConfigKeyError as exc:
        ckpt.arch_problem = str(exc)
        return [str(exc), *problems]
    # the names in either: counted in C-level passes, without building their union
    names = len(ckpt.weight_map) + len(ckpt.tensors) - sum(
        map(ckpt.weight_map.__contains__, ckpt.tensors))
    known = not (ckpt.unreadable or ckpt.unavailable)
    refs = ckpt.tensors.values()
    # TensorRef.nbytes summed as two C-level passes (139,098 tensors for Kimi-K2.6)
    nbytes = sum(map(attrgetter("end"), refs)) - sum(map(attrgetter("begin"), refs)) if known \
        else None
    text, vision = anchor_problems(a, ckpt)
    root = [text] if text else inventory_problems(a, names, nbytes)
    if root:
        ckpt.arch_problem = root[0]
        return [*root, *problems]
    if a.vision is not None:
        vision = vision or vision_problem_for(a.vision, names)
        if vision is not None:
            a = replace(a, vision=None, vision_problem=vision)
    ckpt.arch = a
    ckpt.expected = expected_modules(a)
    return [a.vision_problem, *problems] if a.vision_problem else problems
