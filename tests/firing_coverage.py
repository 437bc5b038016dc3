"""The firing matrix's cases (``tests/test_check_firing.py``) for the checks of the model's
coverage (mxformats/validate/coverage.py): missing, unexpected and misshapen tensors, layers
and experts against what config.json implies. Each plant edits the shards or config.json; the
finding may sit on any tensor (a layer's, an expert's, the config's)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from firing_mutation import Mutation
from validate_corpus import config, edit

Config = dict[str, Any]
Tensors = dict[str, dict[str, Any]]
NORM = "model.norm.weight"
ROUTER_BIAS = "model.layers.1.mlp.gate.e_score_correction_bias"
ROUTER_WEIGHT = "model.layers.1.mlp.gate.weight"
O_PROJ = "model.layers.1.self_attn.o_proj.weight"
#: a module only an MTP layer has (vLLM model_executor/models/deepseek_mtp.py,
#: ``DeepSeekMultiTokenPredictorLayer.eh_proj``)
MTP_PROJECTION = "model.layers.3.eh_proj.weight"


def _plant(edit_folder: Callable[[Path], None], severity: str | None = None) -> Mutation:
    return Mutation(None, edit=edit_folder, anywhere=True, severity=severity)


def _text(c: Config) -> Config:
    """The language model's keys: ``text_config`` where the config nests them."""
    nested = c.get("text_config")
    return nested if isinstance(nested, dict) else c


def _text_key(key: str, value: Callable[[Any], Any]) -> Callable[[Path], None]:
    def change(c: Config) -> None:
        text = _text(c)
        text[key] = value(text.get(key))
    return config(change)


def _tensors(change: Callable[[Tensors], None]) -> Callable[[Path], None]:
    return lambda path: edit(path, change)


def _dropped(predicate: Callable[[str], bool]) -> Callable[[Tensors], None]:
    def change(data: Tensors) -> None:
        for tensors in data.values():
            for name in [n for n in tensors if predicate(n)]:
                del tensors[name]
    return change


def _module_dropped(module: str) -> Callable[[Path], None]:
    """Every tensor of ``module`` (its weight and any scales) removed: the module is absent."""
    return _tensors(_dropped(lambda n: n.startswith(module + ".")))


def _added(name: str) -> Callable[[Tensors], None]:
    def change(data: Tensors) -> None:
        data[sorted(data)[0]][name] = np.zeros(4, dtype=np.float32)
    return change


def _norm_longer(data: Tensors) -> None:
    for tensors in data.values():
        if NORM in tensors:
            tensors[NORM] = np.concatenate([tensors[NORM], tensors[NORM][:1]])


def _o_proj_taller(data: Tensors) -> None:
    """Layer 1's attention output projection one row taller than hidden_size."""
    for tensors in data.values():
        if O_PROJ in tensors:
            tensors[O_PROJ] = np.concatenate([tensors[O_PROJ], tensors[O_PROJ][:1]])


def _bias_moved(data: Tensors) -> None:
    """Layer 1's router bias written into the shard that does not hold its router weight."""
    names = sorted(data)
    home = next(s for s in names if ROUTER_BIAS in data[s])
    other = next(s for s in names if s != home)
    data[other][ROUTER_BIAS] = data[home].pop(ROUTER_BIAS)


def _one_more(v: Any) -> Any:
    return int(v) + 1


def _one_less(v: Any) -> Any:
    return int(v) - 1


_SINGLE = "the compressed-tensors-mixed fixture is one file: no other shard to split a module into"
_SPLIT = "the producer's fixture already splits a module across its two shards"

#: (check, condition) -> how it is planted.
MUTATIONS: dict[tuple[str, str], Mutation] = {
    ("TENSOR_MISSING", "a layer absent"): _plant(_text_key("num_hidden_layers", _one_more)),
    ("TENSOR_MISSING", "a norm absent"): _plant(_tensors(_dropped(lambda n: n == NORM))),
    ("TENSOR_MISSING", "an attention projection absent"): _plant(
        _module_dropped("model.layers.1.self_attn.o_proj")),
    ("TENSOR_MISSING", "a dense MLP projection absent"): _plant(
        _module_dropped("model.layers.0.mlp.down_proj")),
    ("TENSOR_MISSING", "a shared expert projection absent"): _plant(
        _module_dropped("model.layers.1.mlp.shared_experts.down_proj")),
    ("TENSOR_MISSING", "the embedding absent"): _plant(
        _module_dropped("model.embed_tokens")),
    ("TENSOR_MISSING", "the lm_head absent"): _plant(_module_dropped("lm_head")),
    ("TENSOR_MISSING", "the router's weight absent"): _plant(
        _tensors(_dropped(lambda n: n == ROUTER_WEIGHT))),
    ("TENSOR_MISSING", "the router's e_score_correction_bias absent"): _plant(
        _tensors(_dropped(lambda n: n == ROUTER_BIAS))),
    ("TENSOR_UNEXPECTED", "a parameter no module of its kind has"): _plant(
        _tensors(_added("model.norm.extra"))),
    ("TENSOR_UNEXPECTED", "a module the config does not imply"): _plant(
        _tensors(_added("model.extra.weight"))),
    ("SHAPE_MISMATCH", "a norm of another size"): _plant(_tensors(_norm_longer)),
    ("SHAPE_MISMATCH", "a router of another expert count"): _plant(
        _text_key("n_routed_experts", _one_more)),
    ("SHAPE_MISMATCH", "an embedding or lm_head of another vocabulary size"): _plant(
        _text_key("vocab_size", _one_more)),
    ("SHAPE_MISMATCH", "an unquantized attention projection of another size"): _plant(
        _tensors(_o_proj_taller)),
    ("LAYER_UNEXPECTED", "a layer past num_hidden_layers"): _plant(
        _text_key("num_hidden_layers", _one_less)),
    ("LAYER_UNEXPECTED", "an MTP layer none is declared"): _plant(
        _tensors(_added(MTP_PROJECTION))),
    ("MTP_ABSENT", "a declared MTP layer absent"): _plant(
        _text_key("num_nextn_predict_layers", lambda v: 1)),
    ("EXPERT_GAP", "an expert absent"): _plant(
        _tensors(_dropped(lambda n: n.startswith("model.layers.1.mlp.experts.0.")))),
    ("EXPERT_GAP", "one projection of an expert absent"): _plant(
        _module_dropped("model.layers.1.mlp.experts.0.down_proj")),
    ("EXPERT_EXTRA", "an expert index past n_routed_experts"): _plant(
        _text_key("n_routed_experts", _one_less)),
    ("COVERAGE_SKIPPED", "the language model's config unusable"): _plant(
        _text_key("num_hidden_layers", lambda v: 10**8)),
    ("MLP_KIND_MISMATCH", "a dense MLP where the config makes experts"): _plant(
        _text_key("first_k_dense_replace", _one_less)),
    ("MLP_KIND_MISMATCH", "routed experts where the config makes a dense MLP"): _plant(
        _text_key("first_k_dense_replace", _one_more)),
    ("MODULE_SPLIT", "a module's tensors in two shards"): _plant(_tensors(_bias_moved)),
}

#: (check, condition, format) no fixture can carry -> the reason.
NOT_PLANTED: dict[tuple[str, str, str], str] = {
    ("MODULE_SPLIT", "a module's tensors in two shards", "compressed-tensors-mixed"): _SINGLE,
    **{("MODULE_SPLIT", "a module's tensors in two shards", fmt): _SPLIT
       for fmt in ("compressed-tensors-int4", "compressed-tensors-nvfp4", "modelopt-nvfp4")},
}
