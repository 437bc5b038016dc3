"""Format detection and the module inventory a config implies (never hard-coded sizes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .model import Architecture, ExpectedModule, Format

__all__ = ["architecture", "detect_format", "expected_modules", "quantization_config"]


def quantization_config(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The quantization config vLLM uses: the top level wins over ``text_config``'s."""
    top = config.get("quantization_config")
    if isinstance(top, dict):
        return top
    text = config.get("text_config")
    if isinstance(text, dict) and isinstance(text.get("quantization_config"), dict):
        return dict(text["quantization_config"])
    return None


def detect_format(qc: Mapping[str, Any] | None) -> tuple[Format, str]:
    """``(format, detail)`` from a quantization config; UNSUPPORTED names what it saw."""
    if qc is None:
        return Format.BF16, "no quantization_config: plain (BF16) checkpoint"
    method = qc.get("quant_method")
    if method == "quark":
        g = qc.get("global_quant_config")
        w = g.get("weight") if isinstance(g, dict) else None
        if isinstance(w, list):
            dtypes = [s.get("dtype") if isinstance(s, dict) else None for s in w]
            if dtypes == ["fp8_e4m3", "int4"]:
                return Format.QUARK_W4A8, "AMD Quark W4A8 (FP8 per-tensor -> INT4 per-channel)"
            return (
                Format.UNSUPPORTED,
                f"Quark two-stage weight {dtypes} (e.g. NVFP4) is not verified",
            )
        if isinstance(w, dict):
            if w.get("dtype") == "fp4" and w.get("scale_format") == "e8m0":
                return Format.QUARK_MXFP4, "AMD Quark MXFP4 (OCP MX, E8M0 scales)"
            return (
                Format.UNSUPPORTED,
                f"Quark weight dtype {w.get('dtype')!r} / scale {w.get('scale_format')!r} "
                "is not verified by mxformats validate",
            )
        return Format.UNSUPPORTED, "Quark config without a global_quant_config.weight"
    if method == "compressed-tensors":
        groups = qc.get("config_groups")
        fmt = qc.get("format")
        if isinstance(groups, dict):
            for group in groups.values():
                w = group.get("weights") if isinstance(group, dict) else None
                if not isinstance(w, dict):
                    continue
                if (
                    w.get("type") == "float"
                    or "fp4" in str(fmt)
                    or "fp4" in str(group.get("format"))
                ):
                    return (
                        Format.UNSUPPORTED,
                        f"compressed-tensors {fmt!r} float weights (e.g. NVFP4) are not verified",
                    )
                if w.get("type") == "int" and w.get("num_bits") == 4:
                    return Format.CT_INT4, "compressed-tensors pack-quantized INT4 (llm-compressor)"
        return Format.UNSUPPORTED, f"compressed-tensors format {fmt!r} is not verified"
    if method == "fp8" and qc.get("weight_block_size") is not None:
        return Format.FP8_BLOCK, "DeepSeek-style FP8 block (weight_scale_inv)"
    return Format.UNSUPPORTED, f"quant_method {method!r} is not verified by mxformats validate"


def _int(t: Mapping[str, Any], key: str, default: int | None = None) -> int:
    v = t.get(key, default)
    if v is None:
        if default is None:
            raise KeyError(key)
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise KeyError(f"{key} must be an integer, got {v!r}")
    return v


def architecture(config: Mapping[str, Any]) -> Architecture:
    """The architecture facts; raises ``KeyError`` naming a missing or malformed key."""
    text = config.get("text_config")
    multimodal = isinstance(text, dict)
    t: Mapping[str, Any] = text if isinstance(text, dict) else config
    hidden = _int(t, "hidden_size")
    q_lora = t.get("q_lora_rank")
    vision = config.get("vision_config") if multimodal else None
    return Architecture(
        layers=_int(t, "num_hidden_layers"),
        first_dense=_int(t, "first_k_dense_replace", 0),
        experts=_int(t, "n_routed_experts"),
        shared_experts=_int(t, "n_shared_experts", 0),
        mtp_layers=_int(t, "num_nextn_predict_layers", 0),
        hidden=hidden,
        intermediate=_int(t, "intermediate_size"),
        moe_intermediate=_int(t, "moe_intermediate_size"),
        vocab=_int(t, "vocab_size"),
        heads=_int(t, "num_attention_heads"),
        q_lora=q_lora if isinstance(q_lora, int) else None,
        kv_lora=_int(t, "kv_lora_rank"),
        qk_nope=_int(t, "qk_nope_head_dim"),
        qk_rope=_int(t, "qk_rope_head_dim"),
        v_head=_int(t, "v_head_dim"),
        multimodal=multimodal,
        prefix="language_model.model." if multimodal else "model.",
        lm_head="language_model.lm_head" if multimodal else "lm_head",
        vision=dict(vision) if isinstance(vision, dict) else None,
    )


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
        for e in range(a.experts):
            x = f"{m}experts.{e}."
            out += [
                _lin(f"{x}gate_proj", "expert", i, h, n, e),
                _lin(f"{x}up_proj", "expert", i, h, n, e),
                _lin(f"{x}down_proj", "expert", h, i, n, e),
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


def _vision(vc: Mapping[str, Any], text_hidden: int) -> list[ExpectedModule]:
    vh, vi = _int(vc, "hidden_size"), _int(vc, "intermediate_size")
    patch = _int(vc, "patch_size")
    kernel = vc.get("merge_kernel_size") or [2, 2]
    mm = vh * int(kernel[0]) * int(kernel[1])
    v = "vision_tower."
    out = [
        ExpectedModule(
            f"{v}patch_embed.proj", "vision", (("weight", (vh, 3, patch, patch)), ("bias", (vh,)))
        ),
        ExpectedModule(
            f"{v}patch_embed.pos_emb",
            "vision",
            (("weight", (_int(vc, "init_pos_emb_height"), _int(vc, "init_pos_emb_width"), vh)),),
        ),
    ]
    for b in range(_int(vc, "num_hidden_layers")):
        p = f"{v}encoder.blocks.{b}."
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
            f"{v}encoder.final_layernorm", "vision", (("weight", (vh,)), ("bias", (vh,)))
        ),
        ExpectedModule("mm_projector.pre_norm", "projector", (("weight", (vh,)), ("bias", (vh,)))),
        _lin("mm_projector.proj.0", "projector", mm, mm, bias=True),
        _lin("mm_projector.proj.2", "projector", text_hidden, mm, bias=True),
    ]
    return out


def expected_modules(a: Architecture, *, with_mtp: bool = True) -> dict[str, ExpectedModule]:
    """Every module the architecture implies, by name (MTP layers included when declared)."""
    mods: list[ExpectedModule] = []
    if a.multimodal and a.vision is not None:
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
