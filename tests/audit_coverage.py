"""The audit's switches (``tests/audit_conditions.py``) for the checks of the model's coverage
(mxformats/validate/coverage.py): each turns one declared condition off, and names the matrix
cases that must go red."""

from __future__ import annotations

from audit_switch import COVERAGE, CTI, CTN, MON, MX, W4, Switch, off, one

_CONFLICTED = "    conflicted = set(dense_as_moe) | set(moe_as_dense)"
_SHAPE = "            elif ref.shape != shape:"
_PARAM_ABSENT = "            if ref is None:"
_MODULE_ABSENT = "            for p, shape in exp.params:\n                yield Finding(\n"
_PAST_TOP = '        if lm and name.startswith(a.prefix) and int(lm["n"]) >= top:'
_GAP = ('            if exp.kind == "expert" and exp.layer is not None and exp.expert is not '
        'None:')


def _off(name: str, what: str, old: str, check: str, condition: str, fmt: str,
         kind: str = "value") -> Switch:
    """``old``, an ``if ...:`` line of coverage.py, made never true."""
    return off(name, kind, what, COVERAGE, old, check, condition, fmt)


def _absent_kind_off(kind: str, condition: str, fmt: str) -> Switch:
    """An absent module of ``kind`` not reported as missing tensors."""
    return one(f"cond_missing_{kind}_off", "role", f"an absent {kind} module not reported",
               COVERAGE, _MODULE_ABSENT, _MODULE_ABSENT.replace(
                   "in exp.params:", f'in (() if exp.kind == "{kind}" else exp.params):'),
               "TENSOR_MISSING", condition, fmt)


SWITCHES: tuple[Switch, ...] = (
    one("cond_missing_layer_off", "value", "an absent layer not reported", COVERAGE,
        "    for n in sorted(absent_layers):", "    for n in sorted(absent_layers - absent_layers):",
        "TENSOR_MISSING", "a layer absent", MX),
    *(_absent_kind_off(kind, condition, fmt) for kind, condition, fmt in (
        ("norm", "a norm absent", "bf16"),
        ("attention", "an attention projection absent", MX),
        ("dense_mlp", "a dense MLP projection absent", CTI),
        ("shared_expert", "a shared expert projection absent", MON),
        ("embedding", "the embedding absent", W4),
        ("lm_head", "the lm_head absent", "fp8-block"))),
    one("cond_missing_router_weight_off", "field", "a router without its weight accepted",
        COVERAGE, _PARAM_ABSENT, _PARAM_ABSENT[:-1] + ' and p != "weight":', "TENSOR_MISSING",
        "the router's weight absent", CTN),
    one("cond_missing_router_bias_off", "field", "a router without its e_score_correction_bias "
        "accepted", COVERAGE, _PARAM_ABSENT,
        _PARAM_ABSENT[:-1] + ' and p != "e_score_correction_bias":', "TENSOR_MISSING",
        "the router's e_score_correction_bias absent", "compressed-tensors-mixed"),
    _off("cond_unexpected_param_off", "a parameter no module of its kind has accepted",
         "            if p not in known and p not in QUANT_SUFFIXES and not "
         "_ALLOWED.match(ref.name):", "TENSOR_UNEXPECTED", "a parameter no module of its kind has",
         W4, "role"),
    one("cond_unexpected_module_off", "role", "a module the config does not imply accepted",
        COVERAGE, "        if name in unchecked:", "        if name in unchecked or True:",
        "TENSOR_UNEXPECTED", "a module the config does not imply", "fp8-block"),
    one("cond_shape_norm_off", "role", "a norm of another size accepted", COVERAGE, _SHAPE,
        _SHAPE[:-1] + ' and exp.kind != "norm":', "SHAPE_MISMATCH", "a norm of another size",
        MON),
    one("cond_shape_router_off", "role", "a router of another expert count accepted", COVERAGE,
        _SHAPE, _SHAPE[:-1] + ' and exp.kind != "router":', "SHAPE_MISMATCH",
        "a router of another expert count", "modelopt-fp8-block"),
    one("cond_shape_attention_off", "role", "an attention projection of another size accepted",
        COVERAGE, _SHAPE, _SHAPE[:-1] + ' and exp.kind != "attention":', "SHAPE_MISMATCH",
        "an unquantized attention projection of another size", "quark-w4a8"),
    one("cond_shape_vocab_off", "role", "an embedding or lm_head of another vocabulary accepted",
        COVERAGE, _SHAPE, _SHAPE[:-1] + ' and exp.kind not in ("embedding", "lm_head"):',
        "SHAPE_MISMATCH", "an embedding or lm_head of another vocabulary size", "modelopt-mixed"),
    _off("cond_layer_unexpected_off", "a layer past num_hidden_layers not reported", _PAST_TOP,
         "LAYER_UNEXPECTED", "a layer past num_hidden_layers", CTI),
    one("cond_layer_unexpected_mtp_off", "role", "an undeclared MTP layer's modules accepted",
        COVERAGE, _PAST_TOP, _PAST_TOP[:-1] + ' and not name.endswith("eh_proj"):',
        "LAYER_UNEXPECTED", "an MTP layer none is declared", "bf16"),
    _off("cond_mtp_absent_off", "a declared MTP layer absent not reported",
         "        if not any(name.startswith(pre) for name in ckpt.modules):",
         "MTP_ABSENT", "a declared MTP layer absent", "compressed-tensors-mixed"),
    _off("cond_expert_gap_off", "an absent expert not reported as a gap", _GAP, "EXPERT_GAP",
         "an expert absent", "modelopt-mixed"),
    one("cond_expert_gap_projection_off", "role", "an expert missing only its down_proj not "
        "reported as a gap", COVERAGE, _GAP, _GAP[:-1] + ' and exp.name.endswith("gate_proj"):',
        "EXPERT_GAP", "one projection of an expert absent", "quark-w4a8"),
    _off("cond_expert_extra_off", "an expert past n_routed_experts not reported as extra",
         '        if em and lm and int(em["e"]) >= a.experts:', "EXPERT_EXTRA",
         "an expert index past n_routed_experts", "compressed-tensors-fp8-block"),
    _off("cond_coverage_skipped_off", "tensors left unchecked without a summary",
         "        if ckpt.arch_problem is not None and ckpt.tensors:", "COVERAGE_SKIPPED",
         "the language model's config unusable", W4),
    one("cond_mlp_dense_as_moe_off", "sign", "a dense MLP where the config makes experts "
        "accepted", COVERAGE, _CONFLICTED, "    conflicted = set(moe_as_dense)",
        "MLP_KIND_MISMATCH", "a dense MLP where the config makes experts", MX),
    one("cond_mlp_moe_as_dense_off", "sign", "routed experts where the config makes a dense MLP "
        "accepted", COVERAGE, _CONFLICTED, "    conflicted = set(dense_as_moe)",
        "MLP_KIND_MISMATCH", "routed experts where the config makes a dense MLP", "bf16"),
    _off("cond_module_split_off", "a module across two shards not reported",
         "        if len(split.files) > 1:", "MODULE_SPLIT", "a module's tensors in two shards",
         "fp8-block"),
)
