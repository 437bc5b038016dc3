"""The audit's switches (``tests/audit_conditions.py``) for the checks of the quantization
layout (mxformats/validate/layout.py and each descriptor's config rules): each turns one
declared condition off, and names the matrix cases that must go red."""

from __future__ import annotations

from audit_switch import CTI, CTN, LAYOUT, MON, MX, W4, Switch, off, one

DESCRIPTORS = "mxformats/validate/descriptors"
QUARK = f"{DESCRIPTORS}/quark.py"
CT = f"{DESCRIPTORS}/compressed_tensors.py"
DEEPSEEK = f"{DESCRIPTORS}/fp8_block_deepseek.py"
MO_NVFP4 = f"{DESCRIPTORS}/nvfp4_modelopt.py"
MO_FP8 = f"{DESCRIPTORS}/fp8_block_modelopt.py"
MO_MIXED = f"{DESCRIPTORS}/modelopt_mixed.py"
_SHAPE = "        if ref.shape not in shapes:"
_CODES = '("weight", "weight_packed")'
_UNQUANT = ('        if w is not None and len(w.shape) == 2 and w.dtype != "BF16" and exp.kind != '
            '"router":')
_NEVER = "    if exp.kind in _NEVER_QUANTIZED:"
_UNMATCHED = ('        yield _unmatched_finding(f"exclude entry {entry!r} matches no module{hint}", '
              'needed)')


def _config(name: str, path: str, old: str, condition: str, fmt: str) -> Switch:
    return off(name, "format", f"{condition}: accepted", path, old, "CONFIG_QUANT", condition,
                fmt)


SWITCHES: tuple[Switch, ...] = (
    _config("cond_config_quark_export_off", QUARK, "        if not isinstance(export, dict):",
            "Quark: no export block", W4),
    one("cond_config_ct_status_off", "format", "a quantization_status other than compressed "
        "accepted", CT, '        want(out, qc, "quantization_status", "compressed", '
        '"quantization_config")\n', "", "CONFIG_QUANT",
        "compressed-tensors: quantization_status not compressed", CTN),
    _config("cond_config_ct_kv_cache_off", CT, '        if qc.get("kv_cache_scheme") is not None:',
            "compressed-tensors: a kv_cache_scheme", "compressed-tensors-mixed"),
    _config("cond_config_deepseek_block_off", DEEPSEEK, "        if block != [128, 128]:",
            "DeepSeek FP8: a block other than 128 x 128", "fp8-block"),
    _config("cond_config_deepseek_static_off", DEEPSEEK,
            '        if qc.get("activation_scheme", "dynamic") != "dynamic":',
            "DeepSeek FP8: static activations", "fp8-block"),
    _config("cond_config_modelopt_group_off", MO_NVFP4, "        if gs not in (None, 16):",
            "ModelOpt NVFP4: a group size other than 16", MON),
    _config("cond_config_modelopt_fp8_algo_off", MO_FP8,
            '        if view is not None and view[0] == "FP8_BLOCK_SCALES":',
            "ModelOpt FP8: quant_algo FP8_BLOCK_SCALES", "modelopt-fp8-block"),
    _config("cond_config_modelopt_table_off", MO_MIXED, "        if not table:",
            "ModelOpt mixed: an empty quantized_layers table", "modelopt-mixed"),
    one("cond_exclude_glob_off", "value", "a glob exclude entry accepted", LAYOUT,
        "    globs = [] if matcher.globs_match else [e for e in ckpt.exclude if _is_glob(e)]",
        "    globs: list[str] = []", "EXCLUDE_GLOB", "a glob entry", CTI),
    one("cond_exclude_invalid_off", "value", "an exclude regex that does not compile accepted",
        LAYOUT, "    for entry, why in matcher.invalid:", "    for entry, why in ():",
        "EXCLUDE_INVALID", "a 're:' entry that does not compile", "fp8-block"),
    one("cond_exclude_unmatched_name_off", "value", "an exclude entry naming no module accepted",
        LAYOUT, _UNMATCHED, '        if miss is not None and miss.how == "search":\n    '
        + _UNMATCHED, "EXCLUDE_UNMATCHED", "an entry naming no module", MX),
    one("cond_exclude_unmatched_anchor_off", "value", "an unanchored exclude regex accepted",
        LAYOUT, _UNMATCHED, '        if miss is None or miss.how != "search":\n    '
        + _UNMATCHED, "EXCLUDE_UNMATCHED", "a 're:' entry re.match does not anchor",
        "compressed-tensors-fp8-block"),
    one("cond_nothing_quantized_off", "value", "a declared format with nothing quantized "
        "accepted", LAYOUT, '            yield Finding(NOTHING_QUANTIZED, said, file="config.json")',
        "            pass", "NOTHING_QUANTIZED", "every module stored BF16", W4),
    one("cond_nothing_quantized_cast_off", "format", "BF16 Linears the loader casts in taken "
        "for excluded ones", LAYOUT,
        "        built = _built_quantized(ckpt) if desc.all_bf16_why else []",
        "        built: list[str] = []", "NOTHING_QUANTIZED",
        "every module stored BF16, the loader casting them in", "fp8-block"),
    off("cond_quant_unexpected_off", "value", "a tensor a quantized module's format lacks "
         "accepted", LAYOUT, '        if p not in want and p != "bias":',
         "QUANT_TENSOR_UNEXPECTED", "a tensor its format does not have", MON),
    one("cond_quant_dtype_unusual_off", "value", "an accepted but unusual scale dtype not said",
        LAYOUT, "        elif ref.dtype != dtypes[0] and (note := desc.dtype_note(p, ref.dtype)):",
        "        elif False:", "QUANT_DTYPE_UNUSUAL", "scales stored as F16", CTI),
    off("cond_quant_shape_codes_off", "role", "packed codes of another shape accepted", LAYOUT,
         _SHAPE, "QUANT_SHAPE", "codes of another shape", W4, f" and p not in {_CODES}"),
    off("cond_quant_shape_scales_off", "role", "scales of another shape accepted", LAYOUT,
         _SHAPE, "QUANT_SHAPE", "scales of another shape", "modelopt-fp8-block",
         f" and p in {_CODES}"),
    off("cond_excluded_quantized_off", "value", "an excluded module with quantization tensors "
         "accepted", LAYOUT, "            if is_excluded(exp.name):", "EXCLUDED_QUANTIZED",
         "a quantized module the list names", "compressed-tensors-fp8-block"),
    off("cond_not_excluded_off", "value", "a BF16 Linear the list does not name accepted",
         LAYOUT, "        if _needs_entry(ckpt, exp.name) and exp.name not in explained:",
         "NOT_EXCLUDED_UNQUANTIZED", "a BF16 Linear the list does not name", "modelopt-mixed"),
    off("cond_unquantizable_lm_head_off", "role", "a quantized LM head accepted", LAYOUT,
         _NEVER, "UNQUANTIZABLE_QUANTIZED", "the LM head with a scale", MX,
         ' and exp.kind != "lm_head"'),
    off("cond_unquantizable_router_off", "role", "a quantized router accepted", LAYOUT,
         _NEVER, "UNQUANTIZABLE_QUANTIZED", "a router with a scale", CTN,
         ' and exp.kind != "router"'),
    off("cond_fused_half_quantized_off", "value", "a fused pair half quantized accepted",
         LAYOUT, '                if mx.quantized != my.quantized and ".experts." not in name:',
         "FUSED_PAIR_MISMATCH", "a dense up_proj quantized, its gate_proj not", "fp8-block"),
    one("cond_unquant_f32_off", "value", "an F32 unquantized weight accepted", LAYOUT, _UNQUANT,
        _UNQUANT.replace('w.dtype != "BF16"', 'w.dtype not in ("BF16", "F32")'),
        "UNQUANT_DTYPE", "an embedding stored as F32", "compressed-tensors-mixed"),
    one("cond_unquant_f16_off", "value", "an F16 unquantized weight accepted", LAYOUT, _UNQUANT,
        _UNQUANT.replace('w.dtype != "BF16"', 'w.dtype not in ("BF16", "F16")'),
        "UNQUANT_DTYPE", "an embedding stored as F16", MON),
)
