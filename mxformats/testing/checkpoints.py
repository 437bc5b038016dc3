"""Tiny Kimi-K2-family checkpoints, laid out exactly as the real producers write them.

:func:`make_kimi_checkpoint` writes a small checkpoint folder (``config.json``,
``model.safetensors.index.json``, safetensors shards) with the tensor names, dtypes, shapes,
config blocks, exclude/ignore lists, index conventions and sharding of one of the producers of
the real Kimi-K2 / K2.5 / K2.6 quantized releases, quantized with the matching
``mxformats`` profile:

=============================  =================================================================
``fmt``                        producer, and what the folder holds
=============================  =================================================================
``"quark-mxfp4"``              AMD Quark 0.13 file-to-file (``quantize_model_per_safetensor``),
                               weights ``OCP_MXFP4Spec``: ``weight`` U8 ``[O, I/2]`` +
                               ``weight_scale`` U8 ``[O, I/32]``; ``quantize_mx(profile="quark")``
``"quark-w4a8"``               the same entry point, ``ProgressiveSpec(FP8 per-tensor, INT4
                               per-channel)``: ``weight`` I32 ``[O, I/8]`` + ``weight_scale`` F32
                               ``[]`` + ``weight_scale_2`` F32 ``[O]``; ``quantize_w4a8("quark")``
``"compressed-tensors-int4"``  llm-compressor 0.14 ``oneshot`` + compressed-tensors 0.19,
                               ``pack-quantized`` INT4 g32: ``weight_packed`` I32 ``[O, I/8]`` +
                               ``weight_scale`` BF16 ``[O, I/32]`` + ``weight_shape`` I64 ``[2]``;
                               ``quantize_int4(profile="compressed-tensors")``
``"bf16"``                     the BF16 source itself (what transformers ``save_pretrained``
                               writes)
``"fp8-block-deepseek"``       the official DeepSeek-V3 / Kimi-K2-Instruct FP8 layout (DeepGEMM
                               ``per_block_cast_to_fp8``, file to file): ``weight`` F8_E4M3
                               ``[O, I]`` + ``weight_scale_inv`` F32 ``[ceil(O/128),
                               ceil(I/128)]``; ``quantize_fp8_block(profile="deepseek")``
``"compressed-tensors-fp8-``   llm-compressor ``model_free_ptq(scheme="FP8_BLOCK")``, file to
``block"``                     file: ``weight`` F8_E4M3 + ``weight_scale`` BF16 on the ceil grid;
                               ``quantize_fp8_block(profile="compressed-tensors")``
``"modelopt-nvfp4"``           ModelOpt ``NVFP4_EXPERTS_ONLY_CFG`` + ``export_hf_checkpoint``:
                               ``weight`` U8 ``[O, I/2]`` + ``weight_scale`` F8_E4M3 ``[O, I/16]``
                               + ``weight_scale_2`` F32 ``[]`` + ``input_scale`` F32 ``[]``; both
                               config forms (``hf_quant_config.json`` and a flat
                               ``quantization_config``); ``quantize_nvfp4(profile="modelopt")``
``"compressed-tensors-``       llm-compressor ``oneshot`` ``scheme="NVFP4"``: ``weight_packed``
``nvfp4"``                     U8 + ``weight_scale`` F8_E4M3 + ``weight_global_scale`` F32
                               ``[1]`` + ``input_global_scale`` F32 ``[1]``;
                               ``quantize_nvfp4(profile="compressed-tensors")``
=============================  =================================================================

The reference is the set of real producer checkpoints in ``tests/data/producers/`` (README
there). Given their source (``source=tests/data/producers/src-bf16``) this module reproduces all
three producer folders file for file, byte for byte (``tests/test_make_checkpoint.py``). Without
``source`` it first generates a BF16 source and writes it as the quantized checkpoint's
**twin** (default ``<path>-bf16`` beside ``path``; ``source_out=`` chooses), then quantizes the
twin from disk, as the producers do.

What each producer does, and this module copies:

- **Quark** (both formats) works file by file: every ``*.safetensors`` of the source becomes
  an output file of the same name, each tensor in the order the source file stores it, a
  quantized ``weight`` followed by its ``weight_scale`` (``weight_scale_2``). A tensor is a
  Linear weight when its parameter name is ``weight``, its module name does not end in
  ``norm`` nor contain ``embed``, and it has at least 2 dimensions; the recipe's ``exclude``
  patterns are matched with :func:`fnmatch.fnmatch` on the module name. The shard files carry
  no ``__metadata__``. The config gains one **top-level** ``quantization_config`` (any nested
  one is deleted), whose ``exclude`` lists the **exact, sorted** module names of the excluded
  Linear weights; ``json.dump(indent=4)``. The index (``indent=4``) lists the tensors in output
  order and its ``metadata.total_size`` is the **sum of the shard file sizes**, headers
  included.
- **llm-compressor / compressed-tensors** quantizes every ``Linear`` module not matched by the
  recipe's ``ignore`` (exact names, or ``re:`` + :func:`re.match`); the config's ``ignore``
  lists the exact names of all unquantized Linear modules (routers and ``lm_head`` included,
  embeddings, norms and convolutions not) in module order. The state dict is saved in module
  order (a quantized module as ``weight_scale``, ``weight_packed``, ``weight_shape``) and split
  into shards by the next-fit rule of ``save_pretrained(max_shard_size=...)``, so a module's
  tensors may straddle two shards, as in the real checkpoint. Shards carry
  ``{"format": "pt"}``; the index has ``metadata.total_parameters`` (all elements but the router
  bias buffers) and ``metadata.total_size``, the **sum of tensor bytes**. The config is written
  with sorted keys, the ``quantization_config`` at the top level for K2 and under
  **``text_config``** for K2.5/K2.6 (Moonshot's layout). ``recipe.yaml`` records the recipe.
- **The BF16 source** is written as transformers does: tensors in name order split next-fit,
  ``{"format": "pt"}`` shards, ``total_size`` = sum of tensor bytes, sorted config.

Layouts: ``multimodal=False`` is the K2 / K2-Thinking text layout (``model.*``, ``lm_head``,
``DeepseekV3ForCausalLM``, ``model_type: kimi_k2``); ``multimodal=True`` the K2.5/K2.6 layout
(``KimiK25ForConditionalGeneration``, ``model_type: kimi_k25``, the text model under
``language_model.`` with its fields in ``text_config``, plus a BF16 MoonViT ``vision_tower.*``
and ``mm_projector.*`` with a tiny ``vision_config``). The default recipes are the producers'
(the Kimi model cards'); for the multimodal layout they also exclude ``*vision_tower*`` and
``*mm_projector*`` and match the LM head as ``*lm_head`` / ``re:.*lm_head`` (a bare ``lm_head``
misses ``language_model.lm_head``: pass ``exclude=`` to build that broken checkpoint on
purpose).

Weights are deterministic per ``seed``: each tensor draws from its own generator, seeded by
``seed`` and the tensor's name (without the ``language_model.`` prefix, so both layouts share
their text weights), N(0, 0.02) with 1 % of the rows five times wider, rounded to BF16 (nearest
even). Norm weights are 1, LayerNorm biases 0, the router's ``e_score_correction_bias`` F32 N(0,
0.02) (full float32 values, so a BF16 round trip shows). ``num_nextn_predict_layers`` is 0 (Kimi
ships no MTP layer) unless ``nextn`` asks for DeepSeek-style MTP layers.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import math
import os
import re
import shutil
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from mxformats import tensorfile
from mxformats.arith import BF16
from mxformats.schemes import int4 as int4_scheme
from mxformats.schemes import mx as mx_scheme
from mxformats.schemes.fp8_block import quantize_fp8_block
from mxformats.schemes.nvfp4 import quantize_nvfp4
from mxformats.schemes.w4a8 import quantize_w4a8

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "CHECKPOINT_FORMATS",
    "bf16_twin_path",
    "default_recipe",
    "make_kimi_checkpoint",
]

#: The values ``make_kimi_checkpoint(fmt=...)`` accepts.
CHECKPOINT_FORMATS = ("quark-mxfp4", "quark-w4a8", "compressed-tensors-int4", "bf16",
                      "fp8-block-deepseek", "compressed-tensors-fp8-block", "modelopt-nvfp4",
                      "compressed-tensors-nvfp4")
#: The NVFP4 formats: quantize_nvfp4 profile and (packed, global, input scale) names.
_NVFP4 = {"modelopt-nvfp4": ("modelopt", "weight", "weight_scale_2", "input_scale"),
          "compressed-tensors-nvfp4": ("compressed-tensors", "weight_packed",
                                       "weight_global_scale", "input_global_scale")}
#: The activation amax the generated NVFP4 input scales stand for (the producers calibrate;
#: a generated checkpoint has no activations): input scale = amax / (6 * 448).
_NVFP4_INPUT_AMAX = 1.0
#: The file-to-file FP8 block formats: profile of :func:`quantize_fp8_block` and scale name.
_FP8_BLOCK = {"fp8-block-deepseek": ("deepseek", "_scale_inv"),
              "compressed-tensors-fp8-block": ("compressed-tensors", "_scale")}

PathLike = str | os.PathLike[str]

_INDEX = "model.safetensors.index.json"
_CONFIG = "config.json"
#: Versions the producer fixtures were written with (their config blocks name them).
_TRANSFORMERS_VERSION = "5.17.0"
_QUARK_VERSION = "0.13"
_CT_VERSION = "0.19.0"
#: The default MX / INT4 group (Quark OCP_MXFP4Spec, compressed-tensors group_size 32).
_GROUP = 32
#: INT4 values per int32 word.
_PER_WORD = 8
#: The safetensors dtypes a source tensor may have (the floating ones numpy and ml_dtypes
#: read as floats; FP8 is a quantized form, not a source).
_FLOAT_DTYPES = frozenset({"BF16", "F16", "F32", "F64"})


# -- architecture --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Param:
    """One tensor of a module: its full name, shape, dtype ("BF16"/"F32") and initialiser."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "BF16"
    init: str = "normal"  # "normal", "ones", "zeros"
    buffer: bool = False  # a registered buffer (not counted in total_parameters)


@dataclass(frozen=True)
class _Module:
    """One module in state-dict order; ``linear`` marks an ``nn.Linear`` (router included)."""

    name: str
    params: tuple[_Param, ...]
    linear: bool = False


def _linear(name: str, out: int, inp: int, *, bias: bool = False) -> _Module:
    params = [_Param(f"{name}.weight", (out, inp))]
    if bias:
        params.append(_Param(f"{name}.bias", (out,)))
    return _Module(name, tuple(params), linear=True)


def _rmsnorm(name: str, dim: int) -> _Module:
    return _Module(name, (_Param(f"{name}.weight", (dim,), init="ones"),))


def _layernorm(name: str, dim: int) -> _Module:
    weight = _Param(f"{name}.weight", (dim,), init="ones")
    return _Module(name, (weight, _Param(f"{name}.bias", (dim,), init="zeros")))


def _text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    text = cfg.get("text_config")
    return text if isinstance(text, Mapping) else cfg


def _is_multimodal(cfg: Mapping[str, Any]) -> bool:
    return isinstance(cfg.get("text_config"), Mapping)


def _prefixes(multimodal: bool) -> tuple[str, str]:
    """(prefix of the decoder, name of the LM head module)."""
    if multimodal:
        return "language_model.model.", "language_model.lm_head"
    return "model.", "lm_head"


def _decoder_layer(t: Mapping[str, Any], p: str, layer: int, *, mtp: bool) -> list[_Module]:
    hidden = int(t["hidden_size"])
    heads = int(t["num_attention_heads"])
    nope, rope, v = int(t["qk_nope_head_dim"]), int(t["qk_rope_head_dim"]), int(t["v_head_dim"])
    q_lora, kv_lora = int(t["q_lora_rank"]), int(t["kv_lora_rank"])
    vocab = int(t["vocab_size"])
    pre = f"{p}layers.{layer}."
    mods: list[_Module] = []
    if mtp:  # DeepSeek-V3's MTP layer: its own embedding, two norms and the projection first
        mods += [
            _Module(f"{pre}embed_tokens", (_Param(f"{pre}embed_tokens.weight", (vocab, hidden)),)),
            _rmsnorm(f"{pre}enorm", hidden),
            _rmsnorm(f"{pre}hnorm", hidden),
            _linear(f"{pre}eh_proj", hidden, 2 * hidden),
        ]
    a = f"{pre}self_attn."
    mods += [
        _linear(f"{a}q_a_proj", q_lora, hidden),
        _rmsnorm(f"{a}q_a_layernorm", q_lora),
        _linear(f"{a}q_b_proj", heads * (nope + rope), q_lora),
        _linear(f"{a}kv_a_proj_with_mqa", kv_lora + rope, hidden),
        _rmsnorm(f"{a}kv_a_layernorm", kv_lora),
        _linear(f"{a}kv_b_proj", heads * (nope + v), kv_lora),
        _linear(f"{a}o_proj", hidden, heads * v),
    ]
    m = f"{pre}mlp."
    if layer < int(t["first_k_dense_replace"]):
        inter = int(t["intermediate_size"])
        mods += [
            _linear(f"{m}gate_proj", inter, hidden),
            _linear(f"{m}up_proj", inter, hidden),
            _linear(f"{m}down_proj", hidden, inter),
        ]
    else:
        moe = int(t["moe_intermediate_size"])
        experts = int(t["n_routed_experts"])
        for e in range(experts):
            x = f"{m}experts.{e}."
            mods += [
                _linear(f"{x}gate_proj", moe, hidden),
                _linear(f"{x}up_proj", moe, hidden),
                _linear(f"{x}down_proj", hidden, moe),
            ]
        router = (
            _Param(f"{m}gate.weight", (experts, hidden)),
            _Param(f"{m}gate.e_score_correction_bias", (experts,), "F32", "normal", buffer=True),
        )
        mods.append(_Module(f"{m}gate", router, linear=True))
        shared = int(t.get("n_shared_experts") or 0) * moe
        if shared:
            mods += [
                _linear(f"{m}shared_experts.gate_proj", shared, hidden),
                _linear(f"{m}shared_experts.up_proj", shared, hidden),
                _linear(f"{m}shared_experts.down_proj", hidden, shared),
            ]
    mods += [
        _rmsnorm(f"{pre}input_layernorm", hidden),
        _rmsnorm(f"{pre}post_attention_layernorm", hidden),
    ]
    if mtp:
        mods += [
            _rmsnorm(f"{pre}shared_head.norm", hidden),
            _linear(f"{pre}shared_head.head", vocab, hidden),
        ]
    return mods


def _vision_modules(vc: Mapping[str, Any], text_hidden: int) -> list[_Module]:
    vh, vi = int(vc["hidden_size"]), int(vc["intermediate_size"])
    patch = int(vc["patch_size"])
    kh, kw = (int(k) for k in vc["merge_kernel_size"])
    mm = vh * kh * kw
    v = "vision_tower."
    mods = [
        _Module(
            f"{v}patch_embed.proj",
            (_Param(f"{v}patch_embed.proj.weight", (vh, 3, patch, patch)),
             _Param(f"{v}patch_embed.proj.bias", (vh,))),
        ),
        _Module(
            f"{v}patch_embed.pos_emb",
            (_Param(f"{v}patch_embed.pos_emb.weight",
                    (int(vc["init_pos_emb_height"]), int(vc["init_pos_emb_width"]), vh)),),
        ),
    ]
    for i in range(int(vc["num_hidden_layers"])):
        b = f"{v}encoder.blocks.{i}."
        mods += [
            _layernorm(f"{b}norm0", vh),
            _layernorm(f"{b}norm1", vh),
            _linear(f"{b}mlp.fc0", vi, vh, bias=True),
            _linear(f"{b}mlp.fc1", vh, vi, bias=True),
            _linear(f"{b}wqkv", 3 * vh, vh, bias=True),
            _linear(f"{b}wo", vh, vh, bias=True),
        ]
    mods.append(_layernorm(f"{v}encoder.final_layernorm", vh))
    mods += [
        _layernorm("mm_projector.pre_norm", vh),
        _linear("mm_projector.proj.0", mm, mm, bias=True),
        _linear("mm_projector.proj.2", text_hidden, mm, bias=True),
    ]
    return mods


def _architecture(cfg: Mapping[str, Any]) -> list[_Module]:
    """Every module of the checkpoint described by ``cfg``, in state-dict (module) order.

    The multimodal wrapper registers the vision tower and projector before the language model
    (as Moonshot's ``KimiK25ForConditionalGeneration`` does) [inferred: no real state dict seen].
    """
    t = _text_config(cfg)
    multimodal = _is_multimodal(cfg)
    p, head = _prefixes(multimodal)
    hidden, vocab = int(t["hidden_size"]), int(t["vocab_size"])
    mods: list[_Module] = []
    if multimodal:
        mods += _vision_modules(cfg["vision_config"], hidden)
    mods.append(_Module(f"{p}embed_tokens", (_Param(f"{p}embed_tokens.weight", (vocab, hidden)),)))
    layers = int(t["num_hidden_layers"])
    for layer in range(layers + int(t.get("num_nextn_predict_layers") or 0)):
        mods += _decoder_layer(t, p, layer, mtp=layer >= layers)
    mods.append(_rmsnorm(f"{p}norm", hidden))
    mods.append(_linear(head, vocab, hidden))
    return mods


def _kimi_config(
    *,
    layers: int,
    experts: int,
    shared_experts: int,
    first_dense: int,
    hidden: int,
    moe_intermediate: int,
    intermediate: int,
    q_lora: int,
    kv_lora: int,
    heads: int,
    qk_nope: int,
    qk_rope: int,
    v_head: int,
    experts_per_tok: int,
    vocab: int,
    nextn: int,
    multimodal: bool,
    vision_hidden: int,
    vision_intermediate: int,
    vision_layers: int,
) -> dict[str, Any]:
    """The BF16 source's ``config.json``: the key set transformers 5.17 writes for a
    ``DeepseekV3Config`` with ``model_type: kimi_k2`` (as in the producer fixtures), wrapped in a
    ``kimi_k25`` config for the multimodal layout."""
    text: dict[str, Any] = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "dtype": "bfloat16",
        "eos_token_id": 1,
        "first_k_dense_replace": first_dense,
        "head_dim": qk_rope,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": intermediate,
        "kv_lora_rank": kv_lora,
        "max_position_embeddings": 1024,
        "model_type": "kimi_k2",
        "moe_intermediate_size": moe_intermediate,
        "n_group": 1,
        "n_routed_experts": experts,
        "n_shared_experts": shared_experts,
        "norm_topk_prob": True,
        "num_attention_heads": heads,
        "num_experts_per_tok": experts_per_tok,
        "num_hidden_layers": layers,
        "num_key_value_heads": heads,
        "num_nextn_predict_layers": nextn,
        "pad_token_id": None,
        "pretraining_tp": 1,
        "q_lora_rank": q_lora,
        "qk_head_dim": qk_nope + qk_rope,
        "qk_nope_head_dim": qk_nope,
        "qk_rope_head_dim": qk_rope,
        "rms_norm_eps": 1e-06,
        "rope_interleave": True,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "routed_scaling_factor": 2.5,
        "tie_word_embeddings": False,
        "topk_group": 1,
        "transformers_version": _TRANSFORMERS_VERSION,
        "use_cache": True,
        "v_head_dim": v_head,
        "vocab_size": vocab,
    }
    if not multimodal:
        return text
    vision = {
        "hidden_size": vision_hidden,
        "init_pos_emb_height": 4,
        "init_pos_emb_time": 4,
        "init_pos_emb_width": 4,
        "intermediate_size": vision_intermediate,
        "merge_kernel_size": [2, 2],
        "merge_type": "sd2_tpool",
        "mm_hidden_size": vision_hidden,
        "mm_projector_type": "patchmerger",
        "model_type": "kimi_k25_vision",
        "num_attention_heads": 2,
        "num_hidden_layers": vision_layers,
        "patch_size": 14,
        "pos_emb_type": "divided_fixed",
        "projector_hidden_act": "gelu",
        "projector_ln_eps": 1e-05,
        "text_hidden_size": hidden,
        "video_attn_type": "spatial_temporal",
    }
    return {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "dtype": "bfloat16",
        "model_type": "kimi_k25",
        "text_config": text,
        "tie_word_embeddings": False,
        "transformers_version": _TRANSFORMERS_VERSION,
        "vision_config": vision,
    }


# -- recipes -------------------------------------------------------------------------------------


def default_recipe(
    fmt: str, *, multimodal: bool = False, first_dense: int = 1, nextn: int = 0
) -> list[str]:
    """The exclude (Quark: fnmatch patterns) or ignore (llm-compressor: names and ``re:``
    regexes) list of the producer recipe ``fmt`` uses by default.

    Text layout: exactly the producer fixtures' recipes (the Kimi model cards'): Quark MXFP4
    ``lm_head *self_attn* *.gate *shared_experts* *embed* *norm*`` (the layer-0 dense MLP is
    quantized), Quark W4A8 ``*self_attn* *mlp.gate *lm_head *mlp.gate_proj *mlp.up_proj
    *mlp.down_proj *shared_experts*`` (only routed experts are quantized), llm-compressor
    ``lm_head``, attention, routers, shared experts and the dense layers' MLPs. Multimodal layout:
    the LM head matched under its prefix and the vision tower and projector excluded, as AMD's
    K2.5 recipes and Moonshot's ignore list do. With ``nextn`` > 0 (MTP layers) the MTP layers'
    ``shared_head.head`` is excluded too: it is an LM head, which vLLM never quantizes and the
    producers' recipes leave in BF16 (``*shared_head.head`` / ``re:.*shared_head\\.head$``); the
    recipe for ``nextn=0`` is unchanged.
    """
    p, _ = _prefixes(multimodal)
    if fmt == "quark-mxfp4":
        out = ["*lm_head" if multimodal else "lm_head", "*self_attn*", "*.gate", "*shared_experts*",
               "*embed*", "*norm*"]
    elif fmt == "quark-w4a8":
        out = ["*self_attn*", "*mlp.gate", "*lm_head", "*mlp.gate_proj", "*mlp.up_proj",
               "*mlp.down_proj", "*shared_experts*"]
    elif fmt == "compressed-tensors-int4":
        out = ["re:.*lm_head" if multimodal else "lm_head", "re:.*self_attn.*", "re:.*mlp.gate$",
               "re:.*shared_experts.*"]
        out += [f"re:{p}layers.{i}.mlp.*" for i in range(first_dense)]
    elif fmt == "compressed-tensors-nvfp4":
        out = ["re:.*lm_head" if multimodal else "lm_head", "re:.*self_attn.*",
               r"re:.*mlp\.gate$", "re:.*shared_experts.*"]
        out += [f"re:{p}layers.{i}.mlp.*" for i in range(first_dense)]
    elif fmt == "modelopt-nvfp4":
        # NVFP4_EXPERTS_ONLY_CFG: routed experts only, the rest as ModelOpt lists it
        out = ["*lm_head" if multimodal else "lm_head", f"{p}embed_tokens", "*self_attn*",
               "*mlp.gate", "*shared_experts*"]
        out += [f"{p}layers.{i}.mlp*" for i in range(first_dense)]
    elif fmt == "fp8-block-deepseek":
        out = ["*lm_head" if multimodal else "lm_head", "*.gate", "*embed*", "*norm*"]
    elif fmt == "compressed-tensors-fp8-block":
        # upstream examples/model_free_ptq/kimi_k2_thinking_fp8_block.py
        out = ["re:.*gate$", "re:.*lm_head" if multimodal else "lm_head",
               r"re:.*kv_a_proj_with_mqa$", r"re:.*q_a_proj$", f"{p}embed_tokens"]
    else:
        raise ValueError(f"fmt {fmt!r} has no recipe; one of {CHECKPOINT_FORMATS[:3]}")
    if multimodal:
        out += (["re:vision_tower.*", "re:mm_projector.*"] if fmt.startswith("compressed")
                else ["*vision_tower*", "*mm_projector*"])
    if nextn > 0:
        out.append(r"re:.*shared_head\.head$" if fmt.startswith("compressed")
                   else "*shared_head.head")
    return out


def _quark_is_linear_weight(name: str, ndim: int) -> bool:
    """Quark file2file ``_is_linear_weight_tensor`` plus its ``ndim >= 2`` check."""
    if "." not in name:
        return False
    module, param = name.rsplit(".", 1)
    return param == "weight" and not module.endswith("norm") and "embed" not in module and ndim >= 2


def _ct_matches(name: str, patterns: Iterable[str]) -> bool:
    """compressed-tensors ``match_name``: exact name, or ``re:`` + :func:`re.match`."""
    for pattern in patterns:
        if pattern.startswith("re:"):
            if re.match(pattern[3:], name):
                return True
        elif pattern == name:
            return True
    return False


def _quark_spec(
    dtype: str,
    *,
    is_dynamic: bool,
    qscheme: str,
    ch_axis: int | None,
    group_size: int | None,
    symmetric: bool | None,
    scale_type: str,
    scale_format: str | None,
    scale_calculation_mode: str | None,
    observer_cls: str,
) -> dict[str, Any]:
    """One ``QTensorConfig.to_dict()`` as Quark 0.13 writes it (key order included)."""
    return {
        "dtype": dtype,
        "is_dynamic": is_dynamic,
        "qscheme": qscheme,
        "ch_axis": ch_axis,
        "group_size": group_size,
        "block_size": None,
        "symmetric": symmetric,
        "round_method": "half_even",
        "scale_type": scale_type,
        "zero_point_type": "int32",
        "scale_format": scale_format,
        "scale_calculation_mode": scale_calculation_mode,
        "mx_element_dtype": None,
        "observer_cls": observer_cls,
        "is_scale_quant": False,
        "enable_buffer_reuse": False,
        "max_input_numel": 4194304,
    }


def _quark_quantization_config(fmt: str, exclude: list[str]) -> dict[str, Any]:
    if fmt == "quark-mxfp4":

        def mx(dynamic: bool) -> dict[str, Any]:
            return _quark_spec(
                "fp4", is_dynamic=dynamic, qscheme="per_group", ch_axis=-1, group_size=_GROUP,
                symmetric=None, scale_type="float", scale_format="e8m0",
                scale_calculation_mode="even", observer_cls="PerBlockMXObserver",
            )

        inputs: dict[str, Any] = mx(True)
        weight: Any = mx(False)
    else:

        def per(
            dtype: str, dynamic: bool, qscheme: str, axis: int | None, obs: str
        ) -> dict[str, Any]:
            return _quark_spec(
                dtype, is_dynamic=dynamic, qscheme=qscheme, ch_axis=axis, group_size=None,
                symmetric=True, scale_type="float32", scale_format=None,
                scale_calculation_mode=None, observer_cls=obs,
            )

        inputs = per("fp8_e4m3", True, "per_tensor", None, "PerTensorMinMaxObserver")
        weight = [
            per("fp8_e4m3", False, "per_tensor", None, "PerTensorMinMaxObserver"),
            per("int4", False, "per_channel", 0, "PerChannelMinMaxObserver"),
        ]
    return {
        "global_quant_config": {
            "input_tensors": inputs,
            "output_tensors": None,
            "weight": weight,
            "bias": None,
            "target_device": None,
        },
        "exclude": exclude,
        "algo_config": None,
        "softmax_quant_spec": None,
        "quant_method": "quark",
        "layer_type_quant_config": {},
        "layer_quant_config": {},
        "kv_cache_quant_config": {},
        "kv_cache_post_rope": False,
        "quant_mode": "eager_mode",
        "version": _QUARK_VERSION,
        "export": {
            "kv_cache_group": [],
            "min_kv_scale": 0.0,
            "pack_method": "reorder",
            "weight_format": "real_quantized",
            "weight_merge_groups": None,
        },
    }


def _ct_quantization_config(ignore: list[str]) -> dict[str, Any]:
    return {
        "config_groups": {
            "group_0": {
                "format": "pack-quantized",
                "input_activations": None,
                "output_activations": None,
                "targets": ["Linear"],
                "weights": {
                    "actorder": None,
                    "block_structure": None,
                    "dynamic": False,
                    "group_size": _GROUP,
                    "num_bits": 4,
                    "observer": "memoryless_minmax",
                    "observer_kwargs": {},
                    "scale_dtype": None,
                    "strategy": "group",
                    "symmetric": True,
                    "type": "int",
                    "zp_dtype": None,
                },
            }
        },
        "format": "pack-quantized",
        "global_compression_ratio": None,
        "ignore": ignore,
        "kv_cache_scheme": None,
        "quant_method": "compressed-tensors",
        "quantization_status": "compressed",
        "sparsity_config": {},
        "transform_config": {},
        "version": _CT_VERSION,
    }


def _fp8_block_quantization_config(fmt: str, ignore: list[str]) -> dict[str, Any]:
    """The producer fixtures' FP8 block configs (tests/data/producers)."""
    if fmt == "fp8-block-deepseek":
        return {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                "weight_block_size": [128, 128]}
    spec: dict[str, Any] = {"actorder": None, "block_structure": None, "dynamic": False,
            "group_size": None,
            "num_bits": 8, "observer": None, "observer_kwargs": {}, "scale_dtype": None,
            "strategy": "block", "symmetric": True, "type": "float", "zp_dtype": None}
    inputs = dict(spec, dynamic=True, group_size=128, strategy="group")
    return {
        "config_groups": {"FP8_BLOCK": {
            "format": "float-quantized", "input_activations": inputs, "output_activations": None,
            "targets": ["Linear"], "weights": dict(spec, block_structure=[128, 128])}},
        "format": "float-quantized",
        "global_compression_ratio": None,
        "ignore": ignore,
        "kv_cache_scheme": None,
        "quant_method": "compressed-tensors",
        "quantization_status": "compressed",
        "transform_config": {},
        "version": _CT_VERSION,
    }


def _modelopt_quantization_config(exclude: list[str]) -> dict[str, Any]:
    """ModelOpt 0.47's flat config.json form (the producer fixture's)."""
    fp4 = {"dynamic": False, "num_bits": 4, "type": "float", "group_size": 16}
    return {"config_groups": {"group_0": {"input_activations": dict(fp4), "weights": dict(fp4),
                                          "targets": ["Linear"]}},
            "ignore": exclude, "quant_algo": "NVFP4",
            "producer": {"name": "modelopt", "version": "0.47.0"}, "quant_method": "modelopt"}


def _modelopt_hf_quant_config(exclude: list[str]) -> dict[str, Any]:
    """ModelOpt 0.47's ``hf_quant_config.json``."""
    return {"producer": {"name": "modelopt", "version": "0.47.0"},
            "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None,
                             "group_size": 16, "exclude_modules": exclude}}


def _ct_nvfp4_quantization_config(ignore: list[str]) -> dict[str, Any]:
    """llm-compressor's ``scheme="NVFP4"`` config (the producer fixture's)."""
    fp4: dict[str, Any] = {
        "actorder": None, "block_structure": None, "dynamic": False, "group_size": 16,
        "num_bits": 4, "observer": "memoryless_minmax", "observer_kwargs": {},
        "scale_dtype": "torch.float8_e4m3fn", "strategy": "tensor_group", "symmetric": True,
        "type": "float", "zp_dtype": None}
    config = _ct_quantization_config(ignore)
    config["format"] = "nvfp4-pack-quantized"
    config["config_groups"] = {"group_0": {
        "format": "nvfp4-pack-quantized",
        "input_activations": dict(fp4, dynamic="local", observer="static_minmax"),
        "output_activations": None, "targets": ["Linear"], "weights": fp4}}
    return config


def _yaml_scalar(item: str) -> str:
    """A string as PyYAML writes it in a flow sequence (single-quoted when it must be)."""
    plain = bool(item) and not any(c in item for c in ",?[]{}:#'\"") and item[0] not in "-*&!|>%@`"
    return item if plain else "'" + item.replace("'", "''") + "'"


def _ct_recipe_yaml(ignore: Sequence[str]) -> str:
    """``recipe.yaml`` as llm-compressor 0.14 records a ``QuantizationModifier`` recipe."""
    items = ", ".join(_yaml_scalar(i) for i in ignore)
    return (
        "default_stage:\n"
        "  default_modifiers:\n"
        "    QuantizationModifier:\n"
        "      config_groups:\n"
        "        group_0:\n"
        "          targets: [Linear]\n"
        "          weights:\n"
        "            num_bits: 4\n"
        "            type: int\n"
        "            symmetric: true\n"
        f"            group_size: {_GROUP}\n"
        "            strategy: group\n"
        "            block_structure: null\n"
        "            dynamic: false\n"
        "            actorder: null\n"
        "            scale_dtype: null\n"
        "            zp_dtype: null\n"
        "            observer: memoryless_minmax\n"
        "            observer_kwargs: {}\n"
        "          input_activations: null\n"
        "          output_activations: null\n"
        "          format: null\n"
        "      targets: [Linear]\n"
        f"      ignore: [{items}]\n"
        "      bypass_divisibility_checks: false\n"
        "      requires_calibration_data: false\n"
    )


# -- weights -------------------------------------------------------------------------------------


def _rng(seed: int, name: str) -> np.random.Generator:
    key = name.removeprefix("language_model.")
    return np.random.default_rng([seed, zlib.crc32(key.encode("utf-8"))])


def _init(param: _Param, seed: int) -> NDArray[Any]:
    """The tensor ``param`` of the generated source (BF16, or F32 for the router bias)."""
    if param.init == "ones":
        values = np.ones(param.shape, np.float32)
    elif param.init == "zeros":
        values = np.zeros(param.shape, np.float32)
    else:
        rng = _rng(seed, param.name)
        values = rng.standard_normal(param.shape, dtype=np.float32) * np.float32(0.02)
        if len(param.shape) >= 2:  # 1 % of the rows (output channels) five times wider
            wide = rng.random(param.shape[0]) < 0.01
            values[wide] *= np.float32(5.0)
    if param.dtype == "F32":
        return values.astype(np.float32)
    return values.astype(BF16)


# -- sharding and files --------------------------------------------------------------------------


def _next_fit(sizes: Sequence[int], capacity: int) -> list[int]:
    """Shard number (from 0) of each tensor under huggingface_hub's
    ``split_torch_state_dict_into_shards`` rule: tensors in order fill the current shard; one that
    would overflow it closes it and opens the next; one larger than ``capacity`` gets a shard of
    its own (placed before the shard still open)."""
    shards: list[list[int]] = []
    current: list[int] = []
    used = 0
    for i, size in enumerate(sizes):
        if size > capacity:
            shards.append([i])
            continue
        if used + size > capacity:
            shards.append(current)
            current, used = [], 0
        current.append(i)
        used += size
    if current:
        shards.append(current)
    out = [0] * len(sizes)
    for number, members in enumerate(shards):
        for i in members:
            out[i] = number
    return out


def _capacity_for(sizes: Sequence[int], shards: int) -> int:
    """The smallest capacity for which :func:`_next_fit` needs at most ``shards`` shards."""
    lo, hi = max(sizes, default=1), max(sum(sizes), 1)
    while lo < hi:
        mid = (lo + hi) // 2
        if max(_next_fit(sizes, mid), default=0) + 1 <= shards:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _shard_name(i: int, n: int) -> str:
    return "model.safetensors" if n == 1 else f"model-{i + 1:05d}-of-{n:05d}.safetensors"


def _nbytes(array: NDArray[Any]) -> int:
    return int(np.asarray(array).nbytes)


def _write_sharded(
    folder: Path,
    tensors: Mapping[str, NDArray[Any]],
    order: Sequence[str],
    sizes: Sequence[int],
    capacity: int,
    index_metadata: Mapping[str, int],
    *,
    trailing_newline: bool,
) -> None:
    """Write ``tensors`` in ``order`` (``sizes``: their byte counts) as transformers does:
    next-fit shards with ``{"format": "pt"}``, then (for more than one shard) an index with
    sorted keys, indent 2. Each shard's tensors are taken from ``tensors`` only while that shard
    is written, so a mapping that makes them on access (:class:`_GeneratedSource`) keeps one
    shard in memory."""
    shard_of = _next_fit(sizes, capacity)
    count = max(shard_of, default=0) + 1
    names: list[list[str]] = [[] for _ in range(count)]
    for name, shard in zip(order, shard_of, strict=True):
        names[shard].append(name)
    weight_map: dict[str, str] = {}
    for i, group in enumerate(names):
        fname = _shard_name(i, count)
        tensorfile.write_safetensors(folder / fname, {n: tensors[n] for n in group},
                                     metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(group, fname))
    if count == 1:
        return
    index = {"metadata": dict(index_metadata), "weight_map": weight_map}
    text = json.dumps(index, indent=2, sort_keys=True)
    (folder / _INDEX).write_text(text + ("\n" if trailing_newline else ""), encoding="utf-8")


class _GeneratedSource(Mapping[str, "NDArray[Any]"]):
    """The generated source's tensors by name, each made (:func:`_init`) when looked up: a
    multi-gigabyte source is written one shard at a time."""

    def __init__(self, cfg: Mapping[str, Any], seed: int) -> None:
        self.params = {p.name: p for m in _architecture(cfg) for p in m.params}
        self.seed = seed

    def __getitem__(self, name: str) -> NDArray[Any]:
        return _init(self.params[name], self.seed)

    def __iter__(self) -> Iterator[str]:
        return iter(self.params)

    def __len__(self) -> int:
        return len(self.params)

    def nbytes(self, name: str) -> int:
        """The byte count of tensor ``name``, without making it."""
        param = self.params[name]
        return math.prod(param.shape) * (4 if param.dtype == "F32" else 2)


class _SourceShards(Mapping[str, Mapping[str, "NDArray[Any]"]]):
    """A source folder's shards by file name, each read when looked up (not kept)."""

    def __init__(self, folder: Path, names: Sequence[str]) -> None:
        self.folder = folder
        self.names = list(names)

    def __getitem__(self, name: str) -> dict[str, NDArray[Any]]:
        if name not in self.names:
            raise KeyError(name)
        return tensorfile.read_safetensors(self.folder / name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def headers(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Every tensor's (shape, safetensors dtype), from the shard headers alone."""
        out: dict[str, tuple[tuple[int, ...], str]] = {}
        for name in self.names:
            header, _ = tensorfile.read_header(self.folder / name)
            out.update((n, (tuple(e["shape"]), e["dtype"])) for n, e in header.items()
                       if n != "__metadata__")
        return out


def _read_source(folder: Path) -> tuple[dict[str, Any], _SourceShards]:
    """(config, the source's shards by file name, read on access) of a source folder."""
    cfg = json.loads((folder / _CONFIG).read_text(encoding="utf-8"))
    files = sorted(p.name for p in folder.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{folder}: no *.safetensors files")
    return cfg, _SourceShards(folder, files)


def _prepare(path: Path) -> None:
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise FileExistsError(f"{path} exists and is not an empty folder")
    path.mkdir(parents=True, exist_ok=True)


# -- the writers ---------------------------------------------------------------------------------


def _write_bf16(
    folder: Path, cfg: Mapping[str, Any], seed: int, shards: int, max_shard_size: int | None
) -> None:
    """Generate and write the BF16 source, one shard in memory at a time."""
    tensors = _GeneratedSource(cfg, seed)
    order = sorted(tensors)
    sizes = [tensors.nbytes(n) for n in order]
    capacity = max_shard_size if max_shard_size is not None else _capacity_for(sizes, shards)
    _write_sharded(folder, tensors, order, sizes, capacity, {"total_size": sum(sizes)},
                   trailing_newline=False)
    (folder / _CONFIG).write_text(json.dumps(cfg, indent=2, sort_keys=True), encoding="utf-8")


def _quantize_file_to_file(fmt: str, weight: NDArray[Any]) -> dict[str, NDArray[Any]]:
    """The tensors a file-to-file producer writes for one Linear weight: suffix ("",
    "_scale", "_scale_2", "_scale_inv") -> array."""
    if fmt in _FP8_BLOCK:
        profile, scale = _FP8_BLOCK[fmt]
        codes, scales = quantize_fp8_block(weight, block=(128, 128), profile=profile)
        return {"": codes.view(ml_dtypes.float8_e4m3fn), scale: np.asarray(scales)}
    if fmt == "quark-mxfp4":
        mx = mx_scheme.quantize_mx(weight, block_size=_GROUP, axis=-1, profile="quark")
        return {"": np.asarray(mx.codes, np.uint8), "_scale": np.asarray(mx.scales, np.uint8)}
    w4a8 = quantize_w4a8(weight, profile="quark")
    return {
        "": np.asarray(w4a8.weight, np.int32),
        "_scale": np.asarray(w4a8.weight_scale, np.float32).reshape(()),
        "_scale_2": np.asarray(w4a8.weight_scale_2, np.float32),
    }


def _quantize_nvfp4(fmt: str, weight: NDArray[Any],
                    global_amax: float | None) -> dict[str, NDArray[Any]]:
    """An NVFP4 producer's tensors for one Linear weight (``global_amax``: the fused gate/up
    maximum both producers share), in its state-dict order."""
    profile, packed, global_name, input_name = _NVFP4[fmt]
    r = quantize_nvfp4(weight, profile=profile, global_amax=global_amax)
    stand_in = np.float32(_NVFP4_INPUT_AMAX / (6 * 448))
    input_scale = np.float32(1 / stand_in) if profile == "compressed-tensors" else stand_in
    return {
        global_name: r.global_scale,
        input_name: np.full(r.global_scale.shape, input_scale, np.float32),
        packed: r.packed(),
        "weight_scale": r.scales.view(ml_dtypes.float8_e4m3fn),
    }


def _fused_amax(source: Mapping[str, NDArray[Any]], module: str) -> float | None:
    """The larger amax of an expert's gate_proj and up_proj (ModelOpt
    ``sync_moe_gate_up_amax``; llm-compressor's fused global scale), None for other modules."""
    parent, _, projection = module.rpartition(".")
    if ".experts." not in module or projection not in ("gate_proj", "up_proj"):
        return None
    return max(float(np.max(np.abs(np.asarray(source[f"{parent}.{p}.weight"], np.float32))))
               for p in ("gate_proj", "up_proj"))


def _quantize_ct(weight: NDArray[Any]) -> dict[str, NDArray[Any]]:
    """compressed-tensors' tensors for one Linear weight, in its state-dict order."""
    int4 = int4_scheme.quantize_int4(weight, group_size=_GROUP, axis=-1,
                                     profile="compressed-tensors")
    packed = int4_scheme.pack_int4(int4.q, layout="compressed-tensors", axis=-1)
    return {
        "weight_scale": np.asarray(int4.scales).astype(BF16, copy=False),
        "weight_packed": np.asarray(packed, np.int32),
        "weight_shape": np.asarray(weight.shape, np.int64),
    }


def _copy_side_files(source: Path, out: Path) -> None:
    """Quark's ``_copy_json_and_py_files``: everything but shards and README markdown."""
    for item in sorted(source.iterdir()):
        if item.suffix == ".safetensors" or (item.suffix.lower() == ".md"
                                             and "readme" in item.name.lower()):
            continue
        if item.is_dir():
            shutil.copytree(item, out / item.name, dirs_exist_ok=True)
        else:
            shutil.copy2(item, out / item.name)


def _remove_quantization_config(cfg: dict[str, Any]) -> None:
    cfg.pop("quantization_config", None)
    for value in cfg.values():
        if isinstance(value, dict):
            _remove_quantization_config(value)


def _write_file_to_file(
    out: Path, fmt: str, source: Path, cfg: dict[str, Any], files: Mapping[str, Mapping[str, Any]],
    patterns: Sequence[str],
) -> None:
    """Quark, DeepSeek FP8 and ``model_free_ptq``: every source shard becomes an output shard
    of the same name. Quark matches its exclude patterns with fnmatch, llm-compressor its
    ignore list as compressed-tensors does (the config keeps the recipe's list); the FP8 config
    sits at the top level in both layouts (as ``model_free_ptq`` writes it)."""
    _copy_side_files(source, out)
    matches = ((lambda m: _ct_matches(m, patterns)) if fmt.startswith("compressed")
               else (lambda m: any(fnmatch.fnmatch(m, p) for p in patterns)))
    excluded: set[str] = set()
    weight_map: dict[str, str] = {}
    for fname, tensors in files.items():
        result: dict[str, NDArray[Any]] = {}
        for name, array in tensors.items():
            result[name] = array
            weight_map[name] = fname
            if not _quark_is_linear_weight(name, array.ndim):
                continue
            module = name.removesuffix(".weight")
            if matches(module):
                excluded.add(module)
                continue
            for suffix, value in _quantize_file_to_file(fmt, array).items():
                result[name + suffix] = value
                weight_map[name + suffix] = fname
        tensorfile.write_safetensors(out / fname, result)
    total = sum(os.path.getsize(out / f) for f in set(weight_map.values()))
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / _INDEX).write_text(json.dumps(index, ensure_ascii=False, indent=4), encoding="utf-8")
    config = copy.deepcopy(cfg)
    _remove_quantization_config(config)
    config["quantization_config"] = (
        _fp8_block_quantization_config(fmt, list(patterns)) if fmt in _FP8_BLOCK
        else _quark_quantization_config(fmt, sorted(excluded)))
    (out / _CONFIG).write_text(json.dumps(config, ensure_ascii=False, indent=4), encoding="utf-8")


def _write_ct(
    out: Path, fmt: str, cfg: dict[str, Any], files: Mapping[str, Mapping[str, Any]],
    patterns: Sequence[str], max_shard_size: int | None, shards: int,
) -> None:
    """A transformers ``save_pretrained`` of the quantized model (llm-compressor ``oneshot``,
    ModelOpt ``export_hf_checkpoint``): module order, re-sharded. ModelOpt's recipe patterns
    are fnmatch wildcards, written as the config's exclude list (both config forms)."""
    modelopt = fmt == "modelopt-nvfp4"

    def skipped(name: str) -> bool:
        if modelopt:
            return any(fnmatch.fnmatch(name, p) for p in patterns)
        return _ct_matches(name, patterns)

    source: dict[str, NDArray[Any]] = {}
    for tensors in files.values():
        source.update(tensors)
    result: dict[str, NDArray[Any]] = {}
    ignore: list[str] = []
    buffers = 0
    for module in _architecture(cfg):
        if module.linear and skipped(module.name):
            ignore.append(module.name)
        if module.linear and not skipped(module.name):
            weight = source[f"{module.name}.weight"]
            tensors = (_quantize_nvfp4(fmt, weight, _fused_amax(source, module.name))
                       if fmt in _NVFP4 else _quantize_ct(weight))
            for suffix, value in tensors.items():
                result[f"{module.name}.{suffix}"] = value
            params = [p for p in module.params if not p.name.endswith(".weight")]
        else:
            params = list(module.params)
        for param in params:
            result[param.name] = source[param.name]
            buffers += int(np.asarray(source[param.name]).size) if param.buffer else 0
    order = list(result)
    sizes = [_nbytes(a) for a in result.values()]
    capacity = max_shard_size if max_shard_size is not None else _capacity_for(sizes, shards)
    elements = sum(int(np.asarray(a).size) for a in result.values()) - buffers
    _write_sharded(out, result, order, sizes, capacity,
                   {"total_parameters": elements, "total_size": sum(sizes)}, trailing_newline=True)
    config = copy.deepcopy(cfg)
    if modelopt:
        config["quantization_config"] = _modelopt_quantization_config(list(patterns))
        (out / "hf_quant_config.json").write_text(json.dumps(
            _modelopt_hf_quant_config(list(patterns)), indent=4), encoding="utf-8")
    else:
        target = config["text_config"] if _is_multimodal(config) else config
        target["quantization_config"] = (_ct_nvfp4_quantization_config(ignore) if fmt in _NVFP4
                                         else _ct_quantization_config(ignore))
    (out / _CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True), encoding="utf-8")
    if fmt == "compressed-tensors-int4":
        (out / "recipe.yaml").write_text(_ct_recipe_yaml(patterns), encoding="utf-8")


def _check_source(cfg: Mapping[str, Any], files: _SourceShards, where: Path) -> None:
    """The source's tensors must be exactly the architecture its config describes (checked
    from the shard headers)."""
    expected = {p.name: p for m in _architecture(cfg) for p in m.params}
    found = files.headers()
    missing, extra = sorted(set(expected) - set(found)), sorted(set(found) - set(expected))
    if missing or extra:
        raise ValueError(
            f"{where}: tensors do not match the Kimi architecture of its config.json "
            f"(missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
            f"unexpected {extra[:5]}{'...' if len(extra) > 5 else ''})"
        )
    for name, param in expected.items():
        shape, dtype = found[name]
        if shape != param.shape:
            raise ValueError(f"{where}: {name} has shape {list(shape)}, the config says "
                             f"{list(param.shape)}")
        if dtype not in _FLOAT_DTYPES:
            raise ValueError(f"{where}: {name} is {dtype}, not "
                             "a BF16/F32 source tensor")


def _check_dims(fmt: str, cfg: Mapping[str, Any], patterns: Sequence[str]) -> None:
    """Every Linear the recipe quantizes must have an input size the format can pack."""
    step = {"quark-mxfp4": _GROUP, "quark-w4a8": _PER_WORD}.get(fmt)
    if step is None:
        return
    for module in _architecture(cfg):
        weight = module.params[0]
        if not _quark_is_linear_weight(weight.name, len(weight.shape)):
            continue
        if any(fnmatch.fnmatch(module.name, p) for p in patterns):
            continue
        if weight.shape[-1] % step:
            raise ValueError(
                f"{fmt}: {module.name} has {weight.shape[-1]} inputs, not a multiple of {step}; "
                "choose other sizes or exclude it"
            )


def bf16_twin_path(path: PathLike) -> Path:
    """Where :func:`make_kimi_checkpoint` writes the BF16 source twin of ``path`` by default:
    the sibling folder ``<name>-bf16``."""
    path = Path(path)
    return path.with_name(path.name + "-bf16")


def make_kimi_checkpoint(
    path: PathLike,
    fmt: str = "quark-mxfp4",
    *,
    layers: int = 3,
    experts: int = 4,
    shared_experts: int = 1,
    first_dense: int = 1,
    hidden: int = 128,
    moe_intermediate: int = 96,
    intermediate: int | None = None,
    q_lora: int = 64,
    kv_lora: int = 64,
    heads: int = 4,
    qk_nope: int = 32,
    qk_rope: int = 32,
    v_head: int = 32,
    experts_per_tok: int = 2,
    vocab: int = 640,
    nextn: int = 0,
    multimodal: bool = False,
    vision_hidden: int = 32,
    vision_intermediate: int = 64,
    vision_layers: int = 1,
    shards: int = 2,
    max_shard_size: int | None = None,
    seed: int = 0,
    source: PathLike | None = None,
    source_out: PathLike | None = None,
    exclude: Sequence[str] | None = None,
) -> Path:
    """Write a tiny Kimi-K2-family checkpoint at ``path`` in the layout of producer ``fmt``.

    ``fmt``: one of :data:`CHECKPOINT_FORMATS` (see the module docstring for what each holds).
    ``path`` must not exist or be an empty folder; the function returns it as a :class:`Path`.

    **Source.** With ``source=None`` a BF16 source is generated from the architecture arguments
    and ``seed`` and written first, to ``source_out`` (default :func:`bf16_twin_path`, the sibling
    ``<path>-bf16``; for ``fmt="bf16"`` the source *is* ``path`` and no twin is written). The
    quantized checkpoint is then made from that folder, as with ``source=``. With ``source=`` an
    existing BF16 checkpoint folder (``config.json`` + safetensors shards) is quantized instead;
    the architecture arguments, ``seed`` and ``shards`` are then not used (the config and the
    files say it all) and nothing else is written. Its tensors must match the architecture its
    config describes (else :class:`ValueError`).

    **Architecture** (defaults: the producer fixtures' model). ``layers`` decoder layers, the
    first ``first_dense`` with a dense MLP of ``intermediate`` (default ``2 * hidden``), the rest
    MoE with ``experts`` routed experts of ``moe_intermediate`` (any count: 6, 288, ...) plus
    ``shared_experts`` shared ones (0 for none), ``experts_per_tok`` active; MLA attention with
    ``heads`` heads, ``q_lora`` / ``kv_lora`` ranks and ``qk_nope`` / ``qk_rope`` / ``v_head``
    head sizes; ``vocab`` tokens; ``nextn`` DeepSeek-style MTP layers after the last one (config
    ``num_nextn_predict_layers``; 0 as Kimi ships). ``multimodal=True`` selects the K2.5/K2.6
    layout with a MoonViT of ``vision_layers`` blocks of ``vision_hidden`` /
    ``vision_intermediate`` and the patch-merger projector. The Linear layers a recipe quantizes
    need an input size that is a multiple of 32 (MXFP4) or 8 (W4A8); compressed-tensors pads
    any size, as the producer does. Tiny sizes (e.g. ``hidden=32``) keep hundreds of experts fast.

    **Sharding.** The generated source is split in name order by transformers' next-fit rule
    (``save_pretrained(max_shard_size=...)``) with capacity ``max_shard_size`` bytes or, when that
    is None, the smallest capacity giving at most ``shards`` files. Quark keeps the source's files
    (file-to-file). compressed-tensors re-shards its module-ordered state dict by the same rule
    with ``max_shard_size``, or the smallest capacity giving as many files as the source has;
    a module's tensors may then straddle two files. One shard is written as
    ``model.safetensors`` without an index (transformers), except by Quark, which always writes
    the index. The producer fixtures were written with ``max_shard_size=1_000_000``.

    **Recipe.** ``exclude`` replaces :func:`default_recipe` (Quark: fnmatch patterns on module
    names; compressed-tensors: exact names or ``re:`` regexes): the config's exclude/ignore list
    is computed from it for the modules actually present, as the producer does.
    """
    if fmt not in CHECKPOINT_FORMATS:
        raise ValueError(f"fmt must be one of {CHECKPOINT_FORMATS}, got {fmt!r}")
    out = Path(path)
    if source is None:
        if min(layers, experts, hidden, vocab, heads, q_lora, kv_lora, shards) < 1:
            raise ValueError("layers, experts, hidden, vocab, heads, q_lora, kv_lora and shards "
                             "must be at least 1")
        if not 0 <= first_dense <= layers or min(shared_experts, nextn) < 0:
            raise ValueError("need 0 <= first_dense <= layers, shared_experts >= 0, nextn >= 0")
        cfg = _kimi_config(
            layers=layers, experts=experts, shared_experts=shared_experts, first_dense=first_dense,
            hidden=hidden, moe_intermediate=moe_intermediate,
            intermediate=2 * hidden if intermediate is None else intermediate, q_lora=q_lora,
            kv_lora=kv_lora, heads=heads, qk_nope=qk_nope, qk_rope=qk_rope, v_head=v_head,
            experts_per_tok=min(experts_per_tok, experts), vocab=vocab, nextn=nextn,
            multimodal=multimodal, vision_hidden=vision_hidden,
            vision_intermediate=vision_intermediate, vision_layers=vision_layers,
        )
        patterns = list(exclude) if exclude is not None else (
            None if fmt == "bf16" else default_recipe(fmt, multimodal=multimodal,
                                                      first_dense=first_dense, nextn=nextn))
        if patterns is not None:
            _check_dims(fmt, cfg, patterns)
        if fmt == "bf16":
            if source_out is not None:
                raise ValueError("fmt='bf16' writes the source at path; source_out is not used")
            _prepare(out)
            _write_bf16(out, cfg, seed, shards, max_shard_size)
            return out
        twin = Path(source_out) if source_out is not None else bf16_twin_path(out)
        _prepare(twin)
        _prepare(out)
        _write_bf16(twin, cfg, seed, shards, max_shard_size)
        return _quantize_folder(out, fmt, twin, patterns, max_shard_size)
    if fmt == "bf16":
        raise ValueError("fmt='bf16' generates a source; it cannot take source=")
    if source_out is not None:
        raise ValueError("source_out names where a generated source goes; not used with source=")
    _prepare(out)
    return _quantize_folder(out, fmt, Path(source), None if exclude is None else list(exclude),
                            max_shard_size)


def _quantize_folder(
    out: Path, fmt: str, source: Path, patterns: list[str] | None, max_shard_size: int | None
) -> Path:
    cfg, files = _read_source(source)
    _check_source(cfg, files, source)
    text = _text_config(cfg)
    if patterns is None:
        patterns = default_recipe(fmt, multimodal=_is_multimodal(cfg),
                                  first_dense=int(text["first_k_dense_replace"]),
                                  nextn=int(text.get("num_nextn_predict_layers") or 0))
    if fmt.startswith("quark") or fmt in _FP8_BLOCK:
        _write_file_to_file(out, fmt, source, cfg, files, patterns)
    else:
        _write_ct(out, fmt, cfg, files, patterns, max_shard_size, len(files))
    return out
