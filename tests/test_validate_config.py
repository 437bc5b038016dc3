"""The config side of ``mxformats validate`` (issue 12 items 2-5, 9): loader defaults, the
inventory bound, key-path messages, and exclude/ignore matching checked against the loaders'
own code (compressed-tensors' ``match_name``) and against Quark's fnmatch, where they differ.

The corpus (tests/test_validate_corpus.py) runs these paths end to end; here each rule is
pinned on both sides of its boundary with an oracle that is not the code under test.
"""

from __future__ import annotations

import fnmatch
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mxformats.validate.arch import (
    INVENTORY_SLACK,
    TEXT_DEFAULTS,
    ConfigKeyError,
    architecture,
    config_value_problems,
    expected_modules,
    implied_size,
    inventory_problems,
    vision_dims,
)
from mxformats.validate.excludes import (
    MAX_TRIE_DEPTH,
    ExcludeMatcher,
    NearMisses,
    literal_alternation,
)

SRC = Path(__file__).resolve().parent / "data" / "producers" / "src-bf16" / "config.json"


def k2_config(**changes: Any) -> dict[str, Any]:
    """The producers' source config (a tiny Kimi-K2) with ``changes`` applied."""
    config: dict[str, Any] = json.loads(SRC.read_text())
    config.update(changes)
    return config


def built_size(config: dict[str, Any]) -> tuple[int, int]:
    """(tensors, elements) of the built inventory without MTP layers: the oracle of
    :func:`implied_size`, which must not build it."""
    mods = expected_modules(architecture(config), with_mtp=False)
    shapes = [shape for m in mods.values() for _, shape in m.params]
    return len(shapes), sum(math.prod(s) for s in shapes)


# -- loader defaults -----------------------------------------------------------------------------


def test_text_defaults_are_transformers_deepseek_v3_config() -> None:
    """TEXT_DEFAULTS is what transformers' DeepseekV3Config sets when a key is absent (the
    class vLLM's KimiK25Config builds text_config with)."""
    transformers = pytest.importorskip("transformers")
    defaults = transformers.DeepseekV3Config()
    for key, value in TEXT_DEFAULTS.items():
        if key == "num_nextn_predict_layers":  # not a key of that class: vLLM reads it, default 0
            assert not hasattr(defaults, key)
            continue
        assert getattr(defaults, key) == value, key


def test_absent_text_keys_take_defaults_and_null_q_lora_means_none() -> None:
    config = k2_config()
    for key in ("first_k_dense_replace", "n_shared_experts", "q_lora_rank"):
        config.pop(key)
    a = architecture(config)
    assert (a.first_dense, a.shared_experts, a.q_lora) == (3, 1, 1536)
    assert set(a.defaulted) == {"first_k_dense_replace", "n_shared_experts", "q_lora_rank"}
    assert architecture(k2_config(q_lora_rank=None)).q_lora is None


def test_vision_defaults_fill_absent_keys_only() -> None:
    v = vision_dims({"hidden_size": 32, "init_pos_emb_height": 4})
    assert (v.hidden, v.pos_height, v.pos_width, v.blocks, v.merge) == (32, 4, 64, 27, (2, 2))
    assert "init_pos_emb_width" in v.defaulted and "init_pos_emb_height" not in v.defaulted


# -- messages name the key and where it sits ------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "key"),
    [
        (k2_config(hidden_size="128"), "hidden_size"),
        (k2_config(num_hidden_layers=-1), "num_hidden_layers"),
        (k2_config(n_routed_experts=True), "n_routed_experts"),
        ({"text_config": k2_config(vocab_size=1.5)}, "text_config.vocab_size"),
    ],
)
def test_malformed_text_key_is_named_with_its_place(config: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigKeyError) as info:
        architecture(config)
    assert info.value.key == key
    assert str(info.value).startswith(f"{key} ")
    assert "KeyError" not in str(info.value) and "config.json" not in str(info.value)


def test_vision_problem_stays_in_the_vision_part() -> None:
    config = {"text_config": k2_config(), "vision_config": {"merge_kernel_size": [2]}}
    a = architecture(config)
    assert a.vision is None and a.layers == 3
    assert a.vision_problem is not None
    assert a.vision_problem.startswith("vision_config.merge_kernel_size ")


@pytest.mark.parametrize(
    ("eps", "bad"),
    [(1e-6, False), (1e-5, False), (5e-324, False), (float("nan"), True), (float("inf"), True),
     (0.0, True), (-1e-6, True), ("1e-6", True), (True, True)],
)
def test_rms_norm_eps_must_be_finite_positive(eps: Any, bad: bool) -> None:
    problems = config_value_problems({"text_config": k2_config(rms_norm_eps=eps)})
    assert bool(problems) == bad
    assert all(p.startswith("text_config.rms_norm_eps ") for p in problems)
    assert config_value_problems({k: v for k, v in k2_config().items()
                                  if k != "rms_norm_eps"}) == []


# -- the inventory bound --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [{}, {"first_k_dense_replace": 0}, {"first_k_dense_replace": 3}, {"q_lora_rank": None},
     {"n_shared_experts": 0}, {"num_hidden_layers": 5, "n_routed_experts": 7},
     {"first_k_dense_replace": 9}],
)
def test_implied_size_equals_the_built_inventory(changes: dict[str, Any]) -> None:
    config = k2_config(**changes)
    assert implied_size(architecture(config)) == built_size(config)


def test_inventory_bound_both_sides() -> None:
    """A config implying exactly INVENTORY_SLACK times the headers' tensor count passes; one
    tensor fewer in the headers and it is refused. Bytes likewise."""
    # the first small config whose tensor count the slack divides: the boundary is exact
    a, count, elements = next(
        (a, *implied_size(a))
        for layers in range(2, 9)
        for experts in range(1, 9)
        if implied_size(a := architecture(k2_config(num_hidden_layers=layers,
                                                    n_routed_experts=experts)))[0]
        % INVENTORY_SLACK == 0
    )
    room = count // INVENTORY_SLACK
    assert inventory_problems(a, room, None) == []
    assert inventory_problems(a, room - 1, None) != []
    least = elements / 2  # 4 bits per element
    enough = math.ceil(least / INVENTORY_SLACK)
    assert inventory_problems(a, room, enough) == []
    assert inventory_problems(a, room, enough - 1) != []


@pytest.mark.parametrize(
    ("changes", "key"),
    [({"num_hidden_layers": 10**8}, "num_hidden_layers"),
     ({"num_nextn_predict_layers": 10**8}, "num_nextn_predict_layers"),
     ({"n_routed_experts": 10**7}, "n_routed_experts"),
     ({"hidden_size": 10**9}, "hidden_size")],
)
def test_absurd_count_names_its_key(changes: dict[str, Any], key: str) -> None:
    problems = inventory_problems(architecture(k2_config(**changes)), 100, 10**6)
    assert len(problems) == 1 and key in problems[0]


# -- exclude / ignore matching as the loaders do it -------------------------------------------------

MODULES = [
    "lm_head",
    "language_model.lm_head",
    "model.layers.0.self_attn.o_proj",
    "language_model.model.layers.0.self_attn.o_proj",
    "model.layers.1.mlp.gate",
    "model.layers.1.mlp.gate_proj",
    "vision_tower.encoder.blocks.0.wo",
]
ENTRIES = [
    "lm_head",
    "model.layers.0.self_attn.o_proj",
    "re:model\\.layers\\..*",  # re.match: anchored at the start, so not language_model.*
    "re:.*self_attn.*",
    "re:self_attn",  # matches nothing with re.match; re.search would find it
    "re:.*mlp\\.gate$",  # anchored at the end by the pattern itself: not gate_proj
    "re:.*mlp\\.gate",  # re.match does not anchor the end: gate_proj too
    "re:vision_tower.*",
    "*self_attn*",  # a glob: an exact name to the loaders, a pattern to Quark's fnmatch
    "*lm_head",
]


@pytest.mark.parametrize("entry", ENTRIES)
def test_exclude_matching_equals_compressed_tensors_match_name(entry: str) -> None:
    """compressed-tensors 0.20.1 ``utils/match.py`` ``match_name`` is the oracle (vLLM's Quark
    ``_is_equal_or_regex_match`` is the same rule: exact, or ``re:`` with ``re.match``)."""
    match = pytest.importorskip("compressed_tensors.utils.match")
    matcher = ExcludeMatcher([entry])
    for module in MODULES:
        assert matcher(module) == match.match_name(module, entry), (module, entry)


def test_known_disagreements_with_quark_fnmatch_and_re_search() -> None:
    """Where the loaders and Quark's exporter (fnmatch) or a careless re.search differ; each
    disagreement is asserted, so a matcher that drifts towards either is caught."""
    glob = ExcludeMatcher(["*self_attn*"])
    assert fnmatch.fnmatch("model.layers.0.self_attn.o_proj", "*self_attn*")
    assert not glob("model.layers.0.self_attn.o_proj")
    anchored = ExcludeMatcher(["re:self_attn"])
    assert not anchored("model.layers.0.self_attn.o_proj")
    prefix = ExcludeMatcher(["re:model\\.layers\\..*"])
    assert prefix("model.layers.0.self_attn.o_proj")
    assert not prefix("language_model.model.layers.0.self_attn.o_proj")
    open_end = ExcludeMatcher(["re:.*mlp\\.gate"])
    assert open_end("model.layers.1.mlp.gate_proj")


def test_invalid_regex_is_kept_not_dropped() -> None:
    matcher = ExcludeMatcher(["re:(unclosed", "lm_head"])
    assert [entry for entry, _ in matcher.invalid] == ["re:(unclosed"]
    assert matcher.unmatched(["lm_head"]) == []
    assert not matcher("(unclosed")


def test_unmatched_keeps_list_order() -> None:
    matcher = ExcludeMatcher(["b", "re:z.*", "a", "lm_head"])
    assert matcher.unmatched(["lm_head"]) == ["b", "re:z.*", "a"]


@pytest.mark.parametrize(
    ("entry", "module", "how", "rewrite"),
    [
        ("model.layers.0.self_attn.o_proj", "language_model.model.layers.0.self_attn.o_proj",
         "prefix", ("", "language_model.")),
        ("lm_head", "language_model.lm_head", "prefix", ("", "language_model.")),
        ("language_model.layers.0.self_attn.o_proj",
         "language_model.model.layers.0.self_attn.o_proj", "prefix",
         ("language_model.", "language_model.model.")),
        ("re:self_attn", "language_model.model.layers.0.self_attn.o_proj", "search", None),
        ("language_model.model.layers.0.self_attn.o_prj",
         "language_model.model.layers.0.self_attn.o_proj", "similar", None),
    ],
)
def test_near_miss(entry: str, module: str, how: str, rewrite: tuple[str, str] | None) -> None:
    near = NearMisses([m for m in MODULES if m.startswith(("language_model.", "vision"))])
    miss = near.find(entry)
    assert miss is not None
    assert (miss.module, miss.how, miss.rewrite) == (module, how, rewrite)


def test_no_near_miss_for_unrelated_entries() -> None:
    near = NearMisses(MODULES)
    assert near.find("re:nothing_like_it") is None
    assert near.find("totally.unrelated") is None


# -- profile_for and what an unsupported config is said to be ------------------------------------

_CT_INT4 = {"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {
    "g": {"targets": ["Linear"], "weights": {"type": "int", "num_bits": 4, "group_size": 32,
                                             "strategy": "group", "symmetric": True,
                                             "dynamic": False}}}}
_FP8_BLOCK = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128],
              "activation_scheme": "dynamic"}


def test_profile_for_reads_the_config_the_loader_reads() -> None:
    """The top-level quantization_config wins over text_config's (vLLM); text_config's is read
    when alone; hf_quant_config.json alone is ModelOpt; an unknown method has no profile."""
    from mxformats.validate.descriptors import profile_for

    both = profile_for({"quantization_config": _FP8_BLOCK,
                        "text_config": {"quantization_config": _CT_INT4}})
    assert (both["format"], both["producer_profile"], both["tp_multiple"]) == (
        "fp8-block", "deepseek", 128)
    nested = profile_for({"text_config": {"quantization_config": _CT_INT4}})
    assert (nested["format"], nested["producer_profile"]) == (
        "compressed-tensors-int4", "compressed-tensors")
    hf = profile_for({}, {"quantization": {"quant_algo": "NVFP4", "group_size": 16}})
    assert (hf["format"], hf["producer_profile"], hf["tp_multiple"]) == (
        "modelopt-nvfp4", "modelopt", 16)
    awq = profile_for({"quantization_config": {"quant_method": "awq"}})
    assert awq == {"format": "unsupported", "producer_profile": None, "tp_multiple": None,
                   "detail": "quant_method 'awq' is not verified by mxformats validate"}


@pytest.mark.parametrize(("configs", "why"), [
    (({"quant_method": "quark", "global_quant_config": {
        "weight": [{"dtype": "int4"}, {"dtype": "fp8"}]}}, None),
     "Quark two-stage weight ['int4', 'fp8'] is not verified"),
    (({"quant_method": "quark", "global_quant_config": {
        "weight": {"dtype": "int8", "scale_format": "e8m0"}}}, None),
     "Quark weight dtype 'int8' / scale 'e8m0' is not verified by mxformats validate"),
    (({"quant_method": "quark"}, None), "Quark config without a global_quant_config.weight"),
    (({"quant_method": "compressed-tensors", "format": "marlin-24"}, None),
     "compressed-tensors format 'marlin-24' is not verified"),
    (({"quant_method": "modelopt", "quant_algo": "INT8_SQ"}, None),
     "ModelOpt quant_algo 'INT8_SQ' is not verified by mxformats validate"),
    ((None, {"quantization": {"quant_algo": "W4A8_AWQ"}}),
     "ModelOpt quant_algo 'W4A8_AWQ' is not verified by mxformats validate"),
    (({"quant_method": "gptq"}, None), "quant_method 'gptq' is not verified by mxformats validate"),
])
def test_unsupported_says_what_it_saw(configs: tuple[Any, Any], why: str) -> None:
    from mxformats.validate.descriptors import UNSUPPORTED, Configs, detect

    assert detect(Configs(*configs)) == (UNSUPPORTED, why)


# -- literal_alternation: the trie regex of ModelOpt's substring matching ------------------------

_TEXT = st.text(alphabet="ab.*(", max_size=12)


@given(words=st.lists(_TEXT, max_size=8), text=_TEXT)
def test_literal_alternation_finds_what_a_substring_test_finds(words: list[str], text: str
                                                              ) -> None:
    """The oracle is Python's ``in``: the trie regex matches ``text`` exactly when one of the
    words occurs in it (regex metacharacters in the alphabet: they must stay literal)."""
    import re

    found = bool(re.search(literal_alternation(words), text)) if words else False
    assert found == any(w in text for w in words), (words, text, literal_alternation(words))


def test_literal_alternation_shares_prefixes_and_falls_back_when_deep() -> None:
    import re

    assert literal_alternation(["ab", "abc", "abd", "x.y"]) == r"(?:ab(?:(?:c|d))?|x\.y)"
    nested = ["a" * n for n in range(1, MAX_TRIE_DEPTH + 3)]  # each word a prefix of the next
    assert literal_alternation(nested) == "|".join(nested)  # the flat alternation
    shallow = nested[:MAX_TRIE_DEPTH]
    assert literal_alternation(shallow) != "|".join(shallow)
    assert all(re.fullmatch(literal_alternation(shallow), w) for w in shallow)
