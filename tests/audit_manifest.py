"""The audit's switches (``tests/audit_conditions.py``) for the manifest checks
(mxformats/validate/manifest.py): each turns one declared condition off, and names the matrix
cases that must go red."""

from __future__ import annotations

from audit_switch import Switch, one

MANIFEST = "mxformats/validate/manifest.py"
_SHA = '        if digest != want["sha256"]:'
_LISTED = "    for name in sorted(present - set(expected)):"
_MISSING = ('            yield Finding(MANIFEST_MISSING_FILE, f"{name}: listed in the manifest, '
            'not found",\n                          name)\n')
_NOT_FOUND = '        if "/" in name or name.startswith("..") or not _is_file(reader, name):'
_ENTRY = ('isinstance(entry.get("sha256"), str) and isinstance(entry.get("size"), int)')

SWITCHES: tuple[Switch, ...] = (
    one("cond_manifest_written_off", "value", "a written manifest not reported", MANIFEST,
        '        yield Finding(MANIFEST_WRITTEN, f"wrote {path} ({len(files)} files)")',
        "        yield from ()", "MANIFEST_WRITTEN", "no file at the --manifest path",
        "quark-mxfp4"),
    one("cond_manifest_size_off", "field", "a shard's size not compared", MANIFEST,
        '        if size != want["size"]:', '        if size != want["size"] and False:',
        "MANIFEST_MISMATCH", "a shard's size differs", "fp8-block"),
    one("cond_manifest_shard_sha_off", "role", "a shard's sha256 not compared", MANIFEST,
        _SHA, _SHA.replace(":", ' and name == "config.json":'),
        "MANIFEST_MISMATCH", "a shard's sha256 differs", "modelopt-nvfp4"),
    one("cond_manifest_config_sha_off", "role", "config.json's sha256 not compared", MANIFEST,
        _SHA, _SHA.replace(":", ' and name != "config.json":'),
        "MANIFEST_MISMATCH", "config.json's sha256 differs", "bf16"),
    one("cond_manifest_absent_off", "value", "an absent listed shard not reported", MANIFEST,
        _MISSING, '            if "/" in name or name.startswith(".."):\n    ' + _MISSING.replace(
            "\n                          name)", "\n                              name)"),
        "MANIFEST_MISSING_FILE", "a listed shard absent", "compressed-tensors-int4"),
    one("cond_manifest_outside_off", "value", "a listed name outside the folder passed over",
        MANIFEST, _NOT_FOUND, '        if name.startswith(".."):\n            continue\n'
        '        if "/" in name or not _is_file(reader, name):',
        "MANIFEST_MISSING_FILE", "a listed name outside the folder", "quark-w4a8"),
    one("cond_manifest_new_shard_off", "role", "an unlisted shard not reported", MANIFEST,
        _LISTED, _LISTED.replace("set(expected)", "set(expected) - set(ckpt.shards)"),
        "MANIFEST_NEW_FILE", "a shard not listed", "compressed-tensors-nvfp4"),
    one("cond_manifest_new_config_off", "role", "an unlisted config.json not reported",
        MANIFEST, _LISTED, _LISTED.replace("set(expected)", 'set(expected) - {"config.json"}'),
        "MANIFEST_NEW_FILE", "config.json not listed", "modelopt-mixed"),
    one("cond_manifest_not_json_off", "value", "a manifest that is not JSON read as empty",
        MANIFEST, '        raise ValueError(f"not readable as JSON ({exc})") from None',
        "        return {}", "MANIFEST_UNREADABLE", "not JSON", "quark-mxfp4"),
    one("cond_manifest_schema_off", "field", "another schema accepted", MANIFEST,
        'data.get("schema") != SCHEMA or ', "", "MANIFEST_UNREADABLE", "another schema",
        "compressed-tensors-fp8-block"),
    one("cond_manifest_sha_entry_off", "field", "an entry without a sha256 accepted", MANIFEST,
        _ENTRY, 'isinstance(entry.get("size"), int)', "MANIFEST_UNREADABLE",
        "an entry without a sha256", "modelopt-fp8-block"),
    one("cond_manifest_size_entry_off", "field", "an entry whose size is not an int accepted",
        MANIFEST, _ENTRY, 'isinstance(entry.get("sha256"), str)', "MANIFEST_UNREADABLE",
        "an entry whose size is not an integer", "compressed-tensors-mixed"),
    one("cond_manifest_unwritable_off", "value", "a manifest that could not be written passed "
        "over", MANIFEST,
        '            yield Finding(MANIFEST_UNREADABLE, f"{path}: could not write '
        '({exc.strerror})")', "            yield from ()", "MANIFEST_UNREADABLE",
        "could not be written", "fp8-block"),
)
