"""The audit's switches (``tests/audit_conditions.py``) for the checks of config.json,
hf_quant_config.json, the index and the shard set: each turns one declared condition off (or
files it under another check), and names the matrix cases that must go red."""

from __future__ import annotations

from audit_switch import CTI, CTN, LOADER, MON, MX, W4, Switch, off, one

FILES = "mxformats/validate/files.py"
ARCH = "mxformats/validate/arch.py"
_CONFIG_PARSE = '        out.append(Finding(CONFIG_PARSE, f"{name} does not parse: {_why(exc)}", file=name))'
_INDEX_PARSE = '            Finding(INDEX_PARSE, f"{INDEX_NAME} does not parse: {_why(exc)}", file=INDEX_NAME)'
_ARCH = '        out += [Finding(CONFIG_ARCH, p, file="config.json") for p in derive(ckpt)]'
_HAVE = "        if ((have is None or have.file != shard) and shard not in gone"
_MAPPED = "            if mapped != shard:"
_STRAY = '        if rel.endswith(".safetensors") and rel not in listed:'
_TOTAL = "    if isinstance(total, bool) or not isinstance(total, int):\n"


SWITCHES: tuple[Switch, ...] = (
    one("cond_config_absent_off", "value", "an absent config.json filed as a header error",
        LOADER, '        out.append(Finding(CONFIG_PARSE, f"{name} does not exist", file=name))',
        '        out.append(Finding(HEADER_INVALID, f"{name} does not exist", file=name))',
        "CONFIG_PARSE", "config.json absent", MX),
    one("cond_config_not_json_off", "value", "a config.json that is not JSON read as {}", LOADER,
        "        parsed = reader.read_json(name)\n",
        "        try:\n            parsed = reader.read_json(name)\n"
        "        except ValueError:\n            parsed = {}\n",
        "CONFIG_PARSE", "not JSON", W4),
    one("cond_config_not_object_off", "value", "a config.json holding no object read as {}",
        LOADER, '            raise ValueError(f"a JSON {type(parsed).__name__}, not an object")',
        "            return {}", "CONFIG_PARSE", "not an object", "bf16"),
    one("cond_config_nesting_off", "value", "a config.json nested too deeply not caught",
        LOADER, "    except (ValueError, OSError, RecursionError) as exc:\n" + _CONFIG_PARSE,
        "    except (ValueError, OSError) as exc:\n" + _CONFIG_PARSE,
        "CONFIG_PARSE", "nested too deeply", CTN),
    one("cond_arch_integer_off", "value", "a size given as a string taken as its integer",
        ARCH, '        raise ConfigKeyError(_where(part, key), f"must be an integer, got {v!r}")',
        "        return int(v)", "CONFIG_ARCH", "a size not an integer", CTI),
    off("cond_arch_embedding_off", "value", "a hidden size the embedding contradicts accepted",
         ARCH, "    if embed is not None and len(embed.shape) == 2 and embed.shape[1] != a.hidden:",
         "CONFIG_ARCH", "a hidden size the embedding contradicts", MON),
    one("cond_arch_inventory_off", "value", "a config implying more tensors than the shards "
        "hold filed as a coverage summary", FILES, _ARCH, _ARCH.replace(
            "Finding(CONFIG_ARCH, p,",
            'Finding(CONFIG_ARCH if "the shards hold" not in p else COVERAGE_SKIPPED, p,'),
        "CONFIG_ARCH", "more layers than the shards hold", "fp8-block"),
    one("cond_arch_eps_off", "value", "a NaN rms_norm_eps accepted", ARCH,
        "    if not math.isfinite(eps) or eps <= 0:", "    if eps <= 0:",
        "CONFIG_ARCH", "rms_norm_eps not finite", "modelopt-mixed"),
    off("cond_quant_conflict_off", "field", "differing nested quantization_config accepted",
         FILES, "    if isinstance(top_qc, dict) and isinstance(nested_qc, dict) and top_qc != "
         "nested_qc:", "CONFIG_QUANT_CONFLICT", "text_config's quantization_config differs", W4),
    off("cond_contradiction_format_off", "field", "hf_quant_config.json of another format "
         "accepted", FILES, "    if alone is not chosen:", "CONFIG_QUANT_CONTRADICTION",
         "another format in hf_quant_config.json", MX),
    off("cond_contradiction_algo_off", "field", "another quant_algo accepted", FILES,
         "        if top[0] != other[0]:", "CONFIG_QUANT_CONTRADICTION", "another quant_algo",
         MON),
    off("cond_contradiction_group_off", "field", "another group_size accepted", FILES,
         "        if top[2] is not None and other[2] is not None and top[2] != other[2]:",
         "CONFIG_QUANT_CONTRADICTION", "another group_size", "modelopt-mixed"),
    off("cond_contradiction_exclude_off", "field", "other exclude_modules accepted", FILES,
         "        if sorted(top[1]) != sorted(other[1]):", "CONFIG_QUANT_CONTRADICTION",
         "other exclude_modules", "modelopt-fp8-block"),
    one("cond_format_unsupported_off", "value", "an unknown quant_method filed as not numeric",
        FILES, '        yield Finding(FORMAT_UNSUPPORTED, ckpt.format_detail, file="config.json")',
        '        yield Finding(FORMAT_NOT_NUMERIC, ckpt.format_detail, file="config.json")',
        "FORMAT_UNSUPPORTED", "a quant_method no descriptor knows", CTI),
    off("cond_format_not_numeric_off", "value", "an unquantized checkpoint not said to be one",
         FILES, "    elif ckpt.config and not ckpt.numeric:", "FORMAT_NOT_NUMERIC",
         "no quantization_config", MX),
    one("cond_index_not_json_off", "value", "an index that is not JSON filed as a header error",
        LOADER, _INDEX_PARSE, _INDEX_PARSE.replace(
            "Finding(INDEX_PARSE,",
            'Finding(INDEX_PARSE if type(exc).__name__ != "JSONDecodeError" else HEADER_INVALID,'),
        "INDEX_PARSE", "not JSON", "fp8-block"),
    one("cond_index_weight_map_off", "field", "an index without weight_map not refused", LOADER,
        '            and isinstance(index.get("weight_map"), dict)\n', "",
        "INDEX_PARSE", "no weight_map", CTN),
    one("cond_index_name_type_off", "field", "an index entry naming no string not refused",
        LOADER, '            and set(map(type, index["weight_map"].values())) <= {str}\n', "",
        "INDEX_PARSE", "a file name not a string", "bf16"),
    off("cond_index_empty_off", "value", "an empty weight_map not said to be one", LOADER,
         '    if not index["weight_map"]:', "INDEX_PARSE", "an empty weight_map", W4),
    one("cond_index_metadata_off", "field", "an index without metadata accepted", FILES,
        "    if isinstance(meta, dict):", "    if True or isinstance(meta, dict):",
        "INDEX_PARSE", "no metadata object", "modelopt-fp8-block"),
    one("cond_index_missing_off", "value", "no index and no model.safetensors filed as an index "
        "parse error", LOADER, "                INDEX_MISSING,\n", "                INDEX_PARSE,\n",
        "INDEX_MISSING", "no index and no model.safetensors", "compressed-tensors-mixed"),
    one("cond_shard_missing_off", "value", "a listed shard absent filed as a header error",
        LOADER, "Finding(SHARD_MISSING, f\"shard {name} named",
        "Finding(HEADER_INVALID, f\"shard {name} named", "SHARD_MISSING", "a listed shard absent",
        CTI),
    off("cond_stray_beside_off", "role", "an unlisted shard beside the others not reported",
         FILES, _STRAY, "SHARD_STRAY", "an unlisted shard beside the others", MX,
         ' and "/" in rel'),
    off("cond_stray_subfolder_off", "role", "an unlisted shard in a subfolder not reported",
         FILES, _STRAY, "SHARD_STRAY", "an unlisted shard in a subfolder", "compressed-tensors-mixed",
         ' and "/" not in rel'),
    one("cond_index_phantom_off", "value", "an index entry of a tensor no shard holds accepted",
        FILES, _HAVE, _HAVE.replace("have is None or ", "have is not None and "),
        "INDEX_TENSOR_NOT_IN_SHARD", "an entry of a tensor no shard holds", MON),
    one("cond_index_other_shard_off", "value", "an index entry naming the other shard accepted",
        FILES, _HAVE, _HAVE.replace(" or have.file != shard", ""),
        "INDEX_TENSOR_NOT_IN_SHARD", "an entry naming the other shard", "fp8-block"),
    off("cond_not_in_index_unlisted_off", "value", "a tensor the index does not list accepted",
         FILES, _MAPPED, "SHARD_TENSOR_NOT_IN_INDEX", "a tensor the index does not list", W4,
         " and mapped is not None"),
    off("cond_not_in_index_elsewhere_off", "value", "a tensor the index maps elsewhere "
         "accepted", FILES, _MAPPED, "SHARD_TENSOR_NOT_IN_INDEX",
         "a tensor the index maps elsewhere", CTN, " and mapped is None"),
    off("cond_two_shards_off", "value", "a tensor stored twice accepted", FILES,
         "            if first != shard:", "TENSOR_IN_TWO_SHARDS",
         "a tensor copied into the other shard", "compressed-tensors-fp8-block"),
    one("cond_total_size_off", "value", "total_size one byte more accepted", FILES,
        "    if total not in (tensor_bytes, ckpt.bytes_total):",
        "    if total not in (tensor_bytes, tensor_bytes + 1, ckpt.bytes_total):",
        "TOTAL_SIZE_MISMATCH", "one byte more", MX),
    one("cond_total_size_type_off", "value", "a total_size that is no integer passed over",
        FILES, _TOTAL, _TOTAL + "        return\n", "TOTAL_SIZE_MISMATCH", "not an integer",
        "bf16"),
)
