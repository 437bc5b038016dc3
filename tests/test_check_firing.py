"""Every check in the validator's catalogue has a test that fires it, or a waiver with a reason.

A check is fired when

- a corpus case of ``tests/test_validate_corpus.py`` declares it (``test_corpus_case`` asserts
  each case's findings exactly, so a declared ID is raised); xfail cases do not count;
- a case of the parametrised tables of ``tests/test_validate_core.py`` (``FILES_CASES``,
  ``COVERAGE_CASES``, ``LAYOUT_CASES``) expects it (those tests assert the ID set exactly);
- a dedicated test named in :data:`FIRED_BY_TEST` asserts it (checked here: the test exists and
  names the ID);
- it declares its conditions (``declare(..., conditions=...)``): then the firing matrix below
  fires each condition on each format it applies to, on each tensor role of it the check
  reads, at each level it runs at (``test_each_condition_fires_on_each_format``), and
  ``tests/audit_conditions.py`` switches each condition off in turn to show a case go red.

New corpus and table cases, and new declared conditions, are picked up without editing this
file (a declared condition with no way to plant it in :data:`MUTATIONS` fails, by name). The check needs no other
test to have run first: it reads the cases, it does not collect findings from a session.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pickle
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import firing_coverage
import firing_files
import firing_index
import firing_layout
import firing_manifest
import firing_resume
import ml_dtypes
import numpy as np
import pytest
import test_validate_core
from audit_conditions import SWITCHES, patch_text
from audit_switch import case_id
from firing_mutation import Change, Mutation
from test_validate_corpus import (
    CASES,
    _catalogue,
    _four_over_six_from_source,
    ensure_twins,
)
from validate_corpus import (
    INDEX,
    config,
    copy_tree,
    drop_tensor,
    edit,
    raw_header,
    write_raw,
)

from mxformats.tensorfile import DTYPES, read_header, read_safetensors, write_safetensors
from mxformats.validate.catalogue import load_all, render_markdown
from mxformats.validate.descriptors import by_format
from mxformats.validate.findings import CHECKS, Check, Level, Severity, declare
from mxformats.validate.model import CheckpointFormat, Options
from mxformats.validate.runner import exit_code, validate

#: Checks that a dedicated test fires and asserts: ID -> "module::test function".
FIRED_BY_TEST: dict[str, str] = {
    "TASK_FAILED": "test_validate_tasks::test_a_task_that_raises_is_a_finding",
    "RESUME_UNUSABLE": (
        "test_validate_tasks::test_an_unusable_resume_file_is_a_warning_and_everything_runs"),
    "CODE_HISTOGRAM": "test_validate_numbers::test_silent_on_generated_checkpoints",
    "DEPLOY_EP_DIVISIBILITY": "test_validate_numbers::test_deployment_targets",
    "DEPLOY_FNUZ_SCALE": "test_validate_numbers::test_fnuz_scales_must_survive_doubling",
    "DEPLOY_NOTE": "test_validate_numbers::test_deployment_targets",
    "DEPLOY_SLOW_PATH": "test_validate_numbers::test_deployment_targets",
    "DEPLOY_TP_DIVISIBILITY": "test_validate_numbers::test_deployment_targets",
    "DEPLOY_UNSUPPORTED": "test_validate_numbers::test_deployment_targets",
    "E8M0_RANGE": "test_validate_numbers::test_e8m0_bytes",
    "EXPERT_ALL_ZERO": "test_validate_numbers::test_zero_rows_single_code_and_all_zero_expert",
    "EXPERT_DUPLICATE": "test_validate_numbers::test_duplicate_experts_and_rms_outlier",
    "EXPERT_RMS_OUTLIER": "test_validate_numbers::test_duplicate_experts_and_rms_outlier",
    "FUSED_PAIR_MISMATCH": "test_validate_core::test_fused_pair_mismatch",
    "HUB_RANGE_IGNORED": "test_validate_hub::test_bad_answers_are_findings",
    "HUB_READ_FAILED": "test_validate_hub::test_bad_answers_are_findings",
    "INTERNAL_ERROR": "test_validate_core::test_check_exception_becomes_a_finding",
    "MANIFEST_MISMATCH": "test_validate_numbers::test_manifest_written_then_verified",
    "MANIFEST_MISSING_FILE": "test_validate_numbers::test_manifest_lists_new_and_missing_shards",
    "MANIFEST_NEW_FILE": "test_validate_numbers::test_manifest_lists_new_and_missing_shards",
    "MANIFEST_UNREADABLE": "test_validate_numbers::test_manifest_written_then_verified",
    "MANIFEST_WRITTEN": "test_validate_numbers::test_manifest_written_then_verified",
    "NOTHING_QUANTIZED": (
        "test_validate_core::test_a_checkpoint_with_nothing_quantized_is_not_silently_ok"),
    "REPRO_ERROR_HIGH": (
        "test_validate_reproduce::"
        "test_wrong_scales_give_high_error_and_scrambled_codes_no_correlation"
    ),
    "REPRO_SOURCE_MISSING": "test_validate_reproduce::test_source_problems",
    "REPRO_SOURCE_UNSUPPORTED": "test_validate_reproduce::test_source_problems",
    "REPRO_SUMMARY": "test_validate_reproduce::test_a_source_holding_none_of_the_modules_fails_once",
    "ROW_ALL_ZERO": "test_validate_numbers::test_zero_rows_single_code_and_all_zero_expert",
    "SCALE_NOT_TIGHT": "test_validate_numbers::test_scale_not_tight_on_planted_codes",
    "TENSOR_SINGLE_CODE": "test_validate_numbers::test_zero_rows_single_code_and_all_zero_expert",
}

#: Checks that no test may fire, each with the reason. None today.
WAIVED: dict[str, str] = {}



def _fired_by_cases() -> dict[str, str]:
    """ID -> the first case that fires it (corpus cases, then the core tables)."""
    fired: dict[str, str] = {}
    for c in CASES:
        if not c.xfail:
            for cid, _, _ in c.findings:
                fired.setdefault(cid, f"corpus case {c.name}")
    tables = {
        "FILES_CASES": {k: v[-1] for k, v in test_validate_core.FILES_CASES.items()},
        "COVERAGE_CASES": {k: v[-1] for k, v in test_validate_core.COVERAGE_CASES.items()},
        "LAYOUT_CASES": {k: v[-1] for k, v in test_validate_core.LAYOUT_CASES.items()},
    }
    for table, cases in tables.items():
        for name, want in cases.items():
            for cid in want:
                fired.setdefault(cid, f"test_validate_core {table}[{name}]")
    return fired


def test_every_check_is_fired_or_waived() -> None:
    catalogue = set(_catalogue())
    covered = (set(_fired_by_cases()) | set(FIRED_BY_TEST) | set(WAIVED)
               | {cid for cid, _, _ in MATRIX})
    assert not catalogue - covered, (
        f"checks no test fires: {sorted(catalogue - covered)}; add a corpus case "
        "(tests/test_validate_corpus.py), or name the test in FIRED_BY_TEST, or waive it"
    )


def test_every_listed_id_is_in_the_catalogue() -> None:
    catalogue = set(_catalogue())
    for listed in (set(_fired_by_cases()), set(FIRED_BY_TEST), set(WAIVED)):
        assert listed <= catalogue, sorted(listed - catalogue)
    assert all(reason.strip() for reason in WAIVED.values())


def test_named_tests_exist_and_assert_their_check() -> None:
    for cid, node in FIRED_BY_TEST.items():
        module_name, _, function_name = node.partition("::")
        function = getattr(importlib.import_module(module_name), function_name, None)
        assert callable(function), f"{cid}: {node} does not exist"
        assert f'"{cid}"' in inspect.getsource(function), f"{node} does not name {cid}"


# -- the firing matrix: every declared (check, condition, format) -------------------------------
#
# A check that declares its conditions (``declare(..., conditions=, formats=, roles=, dtypes=)``)
# is fired once per (condition, format) here, on every tensor role of that format it reads and at
# every level it runs at: a copy of the format's fixture with one element of one tensor changed
# (:data:`MUTATIONS`), validated, asserting the check's ID and severity on that tensor and the
# exit code. A declared (check, condition) with no mutation, or a declared format whose fixture
# carries none of the check's roles, fails by name.

#: The fixture each format's cases start from: the corpus base that copies its producer fixture
#: (tests/data/producers); the three formats with no producer fixture use the corpus's bases made
#: from the same generator (ModelOpt FP8 block, compressed-tensors and ModelOpt mixed precision).
FORMAT_BASES: dict[str, str] = {
    "bf16": "bf16-prod",
    "quark-mxfp4": "mxfp4-prod",
    "quark-w4a8": "w4a8-prod",
    "compressed-tensors-int4": "ct-prod",
    "compressed-tensors-nvfp4": "nvfp4-ct",
    "compressed-tensors-fp8-block": "ct-fp8-prod",
    "compressed-tensors-mixed": "ct-mixed",
    "modelopt-nvfp4": "nvfp4-mo",
    "modelopt-fp8-block": "mo-fp8",
    "modelopt-mixed": "mo-mixed",
    "fp8-block": "fp8-prod",
}


def _set(value: float) -> Callable[[np.ndarray], None]:
    def change(a: np.ndarray) -> None:
        a[0] = value
    return change


def _byte(value: int) -> Callable[[np.ndarray], None]:
    def change(a: np.ndarray) -> None:
        a.view(np.uint8)[0] = value
    return change


def _negate(a: np.ndarray) -> None:
    a[0] = -abs(float(a[0]))


def _reciprocal(a: np.ndarray) -> None:
    a[0] = 1.0 / float(a[0])


def _double(a: np.ndarray) -> None:
    a[0] = 2.0 * float(a[0])


def _halve_all(a: np.ndarray) -> None:
    a[:] = a * np.float32(0.5)


def _dtype_max(fraction: float) -> Callable[[np.ndarray], None]:
    def change(a: np.ndarray) -> None:
        a[0] = fraction * float(ml_dtypes.finfo(a.dtype).max)
    return change


def _fill(value: int) -> Change:
    """Every byte ``value``: packed 4-bit codes with one nibble pair, FP8 codes of one value.
    Byte 0x22 is a code of magnitude far below the tightness bound in each 4-bit encoding:
    E2M1 1.0, two's complement 2, offset binary -6."""
    def change(a: np.ndarray) -> None:
        a.view(np.uint8)[:] = value
    return change


def _zeros_but_first(value: int) -> Change:
    """Every byte 0, the first ``value`` (E2M1 0x08: a -0 code among +0 codes)."""
    def change(a: np.ndarray) -> None:
        b = a.view(np.uint8)
        b[:] = 0
        b[0] = value
    return change


def _pow2(a: np.ndarray) -> None:
    """Every float scale rounded up to a power of two (DeepGEMM ``ceil_to_ue8m0``)."""
    a[:] = np.exp2(np.ceil(np.log2(a.astype(np.float64))))


def _pow2_but_first(a: np.ndarray) -> None:
    """:func:`_pow2`, then the first scale 1.5 times its power of two."""
    _pow2(a)
    a[0] = 1.5 * float(a[0])


def _ue8m0(cfg: dict[str, Any]) -> None:
    cfg["quantization_config"]["scale_fmt"] = "ue8m0"


def _flip_first(a: np.ndarray) -> None:
    """The lowest bit of the first byte flipped (the next one where that would make an E4M3
    or E8M0 byte NaN)."""
    b = a.view(np.uint8)
    b[0] ^= 1 if b[0] & 0x7F != 0x7E else 2


def _reverse(a: np.ndarray) -> None:
    """The elements in reverse order (the codes of other rows and columns)."""
    a[:] = a[::-1].copy()


def _bias_as(dtype: Any) -> Callable[[Path], None]:
    """Every router e_score_correction_bias rewritten in ``dtype`` (its values rounded)."""
    def convert(data: dict[str, dict[str, Any]]) -> None:
        for tensors in data.values():
            for name in [n for n in tensors if n.endswith(".e_score_correction_bias")]:
                tensors[name] = tensors[name].astype(dtype)
    return lambda path: edit(path, convert)


def _pack_method(method: str | None) -> Callable[[dict[str, Any]], None]:
    """Quark's ``export.pack_method`` set to ``method`` (None: the key dropped)."""
    def change(cfg: dict[str, Any]) -> None:
        export = cfg["quantization_config"]["export"]
        export.pop("pack_method")
        if method is not None:
            export["pack_method"] = method
    return change


_EXPERT_CODES = re.compile(r"\.experts\.0\.(gate|up|down)_proj\.(weight|weight_packed)$")


def _zero_first_experts(path: Path) -> None:
    """Expert 0 of every layer all zero: each projection's packed codes (byte 0, or 0x88 in
    compressed-tensors' offset-binary ``weight_packed``)."""
    def zero(data: dict[str, dict[str, Any]]) -> None:
        for tensors in data.values():
            for name, a in tensors.items():
                if _EXPERT_CODES.search(name) and a.dtype in (np.uint8, np.int32):
                    b = np.array(a).view(np.uint8)
                    b[...] = 0x88 if name.endswith("weight_packed") else 0
                    tensors[name] = b.view(a.dtype)
    edit(path, zero)


def _copy_first_experts(path: Path) -> None:
    """Expert 1 of every layer a copy of expert 0: every tensor of it."""
    def copy(data: dict[str, dict[str, Any]]) -> None:
        every = {n: a for tensors in data.values() for n, a in tensors.items()}
        for tensors in data.values():
            for name in tensors:
                if ".experts.1." in name:
                    tensors[name] = np.array(every[name.replace(".experts.1.", ".experts.0.")])
    edit(path, copy)


def _nan_first(a: np.ndarray) -> None:
    """The first scale NaN in its encoding: E8M0 byte 0xFF, E4M3 0x7F, a float NaN."""
    if a.dtype == np.uint8 or a.dtype == ml_dtypes.float8_e4m3fn:
        a.view(np.uint8)[0] = 0xFF if a.dtype == np.uint8 else 0x7F
    else:
        a[0] = np.nan


def _source_weight(change: Callable[[np.ndarray], np.ndarray | None]
                   ) -> Callable[[Path, str], None]:
    """An edit of the source's weight of the planted module: ``change``'s array, or the
    tensor dropped where it gives None."""
    def run(source: Path, module: str) -> None:
        def fn(data: dict[str, dict[str, Any]]) -> None:
            for tensors in data.values():
                name = f"{module}.weight"
                if name in tensors:
                    new = change(tensors[name])
                    if new is None:
                        del tensors[name]
                    else:
                        tensors[name] = new
        edit(source, fn)
    return run


def _source_as_awq(source: Path, module: str) -> None:
    """The source's config claims AWQ, a form this tool does not decompress."""
    config(lambda c: c.update(quantization_config={"quant_method": "awq", "bits": 4}))(source)


def _source_gone(source: Path, module: str) -> None:
    shutil.rmtree(source)


def _source_renamed(source: Path, module: str) -> None:
    """Every tensor of the source under another name: it holds none of the modules."""
    def rename(data: dict[str, dict[str, Any]]) -> None:
        for shard, tensors in data.items():
            data[shard] = {f"renamed.{n}": a for n, a in tensors.items()}
    edit(source, rename)


def _nan_corner(a: np.ndarray) -> np.ndarray:
    out = np.array(a)
    out[0, 0] = np.nan
    return out


def _keep(a: np.ndarray) -> None:
    """No change: the condition is in the config (:attr:`Mutation.config`)."""


def _floor(cfg: dict[str, Any]) -> None:
    cfg["quantization_config"]["global_quant_config"]["weight"]["scale_calculation_mode"] = (
        "floor")


def _deploy(fault: dict[str, Any] | None = None, **sizes: int) -> Mutation:
    """A deployment rule: the clean fixture passes with ``--tp 2 --ep 4`` (expert parallelism
    leaves the routed experts' sizes alone); the planted copy has the options ``fault`` and
    the config's ``sizes`` (the check reads no tensor: nothing else is planted; the finding
    is on config.json)."""
    def set_sizes(cfg: dict[str, Any]) -> None:
        cfg.update(sizes)
    return Mutation(_keep, config=set_sizes if sizes else None, options={"tp": 2, "ep": 4},
                    fault=fault or {}, anywhere=True)


def _scale_by(factor: float) -> Change:
    """Every scale times ``factor`` as its dtype allows: a float times it, an E8M0 byte plus
    its power of two (kept inside bytes 2..253), an E4M3 scale times it but no smaller than
    E4M3's least subnormal 2^-9."""
    def change(a: np.ndarray) -> None:
        v = a.astype(np.float64)
        if a.dtype == np.uint8:
            a[:] = np.clip(v + round(np.log2(factor)), 2, 253)
        elif a.dtype == ml_dtypes.float8_e4m3fn:
            a[:] = np.maximum(v * factor, 2.0**-9)
        else:
            a[:] = v * factor
    return change


def _decoded(factor: float, nvfp4_global: tuple[float, float] | None = None,
             where: str = "") -> Mutation:
    """DECODED_MAGNITUDE: every scale of the module ``factor`` times larger (an NVFP4
    compressed-tensors weight_global_scale, a divisor, ``factor`` times smaller), or the NVFP4
    global scale set to ``nvfp4_global`` (ModelOpt's multiplier, compressed-tensors' divisor:
    on its own side of 1, so that NVFP4_GLOBAL_CONVENTION does not pre-empt it); the finding
    is on the module's weight. Left out where a check of the module's own gives an error
    first, or the dtype cannot hold the change."""
    by_role = {"weight_global_scale": _scale_by(1 / factor)}
    if nvfp4_global is not None:
        by_role = {"weight_scale_2": _set(nvfp4_global[0]),
                   "weight_global_scale": _set(nvfp4_global[1])}
    skip = {} if factor < 1 else {
        ("quark-w4a8", "weight_scale_2", ""): "W4A8_SCALE2_MAX's error pre-empts it",
        ("", "weight_scale", "F8_E4M3"): "an E4M3 block scale stops at 448, where the "
                                         "module's largest block already is"}
    return Mutation(_scale_by(factor), where=where, by_role=by_role, skip=skip,
                    found_on=("weight", "weight_packed"))


#: The all-zero 4-bit code of each packed format's role: byte 0 (E2M1, two's complement), or
#: compressed-tensors' offset binary q+8 in ``weight_packed``.
_ZERO_CODES: dict[str, Change] = {"weight_packed": _fill(0x88)}
_FP8_SCALES = {"weight_scale": _pow2, "weight_scale_inv": _pow2}
#: The roles of a module's codes and of its scales, each left out (:attr:`Mutation.skip`) by
#: a condition planted in the other.
_CODES = {("", r, ""): "a code tensor: the code condition's" for r in ("weight", "weight_packed")}
_SCALES = {("", r, ""): "a scale tensor: the scale condition's" for r in (
    "weight_scale", "weight_scale_inv", "weight_scale_2", "weight_global_scale")}


_FUSED = {"an expert's up_proj differs": ".experts.0.up_proj.",
          "an expert's gate_proj differs": ".experts.0.gate_proj."}
#: (check, condition) -> how it is planted. Every declared condition needs an entry.
MUTATIONS: dict[tuple[str, str], Mutation] = {
    ("E8M0_NAN", "byte 0xFF"): Mutation(_byte(0xFF)),
    ("E8M0_ZERO", "byte 0x00"): Mutation(_byte(0x00)),
    ("E8M0_RANGE", "below the window"): Mutation(_byte(127 - 41)),
    ("E8M0_RANGE", "above the window"): Mutation(_byte(127 + 9)),
    ("SCALE_NONFINITE", "NaN"): Mutation(_set(float("nan"))),
    ("SCALE_NONFINITE", "+Inf"): Mutation(_set(float("inf"))),
    ("SCALE_NONFINITE", "-Inf"): Mutation(_set(float("-inf"))),
    ("SCALE_NEGATIVE", "negative"): Mutation(_negate),
    ("SCALE_ZERO", "zero"): Mutation(_set(0.0)),
    ("W4A8_SCALE2_MAX", "max below 448/7.5"): Mutation(_halve_all),
    ("W4A8_SCALE2_MAX", "max above 448/7.5"): Mutation(_set(448 / 7.5 * 1.01), severity="error"),
    ("NVFP4_BLOCK_SCALE", "NaN (0x7F)"): Mutation(_byte(0x7F)),
    ("NVFP4_BLOCK_SCALE", "negative NaN (0xFF)"): Mutation(_byte(0xFF)),
    ("NVFP4_BLOCK_SCALE", "zero"): Mutation(_byte(0x00)),
    ("NVFP4_BLOCK_SCALE", "negative zero"): Mutation(_byte(0x80)),
    ("NVFP4_BLOCK_SCALE", "negative"): Mutation(_byte(0xB8)),  # -1.0
    ("NVFP4_GLOBAL_CONVENTION", "the other producer's side of 1"): Mutation(_reciprocal),
    **{(cid, cond): Mutation(_double, where=where, pair=True)
       for cid in ("NVFP4_GATE_UP_SCALE", "NVFP4_FUSED_INPUT_SCALE")
       for cond, where in _FUSED.items()},
    ("ROUTER_BIAS_NONFINITE", "NaN"): Mutation(_set(float("nan"))),
    ("ROUTER_BIAS_NONFINITE", "+Inf"): Mutation(_set(float("inf"))),
    ("ROUTER_BIAS_NONFINITE", "-Inf"): Mutation(_set(float("-inf"))),
    ("QUANT_TENSOR_MISSING", "absent"): Mutation(None, where=".experts.0.gate_proj."),
    ("QUANT_DTYPE", "another dtype of the same width"): Mutation(
        None, where=".experts.0.gate_proj.",
        retype={1: "F8_E8M0", 2: "I16", 4: "U32", 8: "F64"}),
    ("TENSOR_NONFINITE", "NaN"): Mutation(_set(float("nan"))),
    ("TENSOR_NONFINITE", "+Inf"): Mutation(_set(float("inf"))),
    ("TENSOR_NONFINITE", "-Inf"): Mutation(_set(float("-inf"))),
    ("DEPLOY_FNUZ_SCALE", "above half the dtype's largest value"): Mutation(
        _dtype_max(0.75), options={"target": "mi300x"}),
    ("DEPLOY_FNUZ_SCALE", "below minus half of it"): Mutation(
        _dtype_max(-0.75), options={"target": "mi300x"}),
    ("SCALE_NOT_TIGHT", "every code far below the bound"): Mutation(_fill(0x22)),
    ("ROW_ALL_ZERO", "the first row zero"): Mutation(_fill(0), by_role=_ZERO_CODES,
                                                      first_row=True),
    ("TENSOR_SINGLE_CODE", "one nonzero code everywhere"): Mutation(_fill(0x22)),
    ("TENSOR_SINGLE_CODE", "zero everywhere"): Mutation(_fill(0), by_role=_ZERO_CODES),
    ("TENSOR_SINGLE_CODE", "+0 and -0 mixed"): Mutation(_zeros_but_first(0x08)),
    ("NVFP4_BLOCK_NOT_TIGHT", "largest |code| below 4"): Mutation(_fill(0x22)),
    ("NVFP4_BLOCK_NOT_TIGHT", "largest |code| 4 and a block scale above 384"): Mutation(
        _fill(0x66)),
    ("FP8_TILE_NOT_TIGHT", "largest |code| 240, the binade below 256"): Mutation(_fill(0x77)),
    ("FP8_TILE_NOT_TIGHT", "largest |code| 208, scales powers of two"): Mutation(
        _fill(0x75), also=_FP8_SCALES),
    ("FP8_ZERO_TILE_SCALE", "a tile of zero codes with the module's scales"): Mutation(
        _fill(0), found_on=("weight_scale", "weight_scale_inv")),
    ("FP8_SCALE_NOT_POW2", "one scale above a power of two, ue8m0 declared"): Mutation(
        _pow2_but_first, config=_ue8m0),
    # NVFP4's largest block decodes to 448 * 6 * global: ModelOpt's global 0.5 (or
    # compressed-tensors' 2.0) gives 1344, above 1e3 and on the convention's side of 1
    ("DECODED_MAGNITUDE", "a block decoding above 1000"): _decoded(
        1e6, nvfp4_global=(0.5, 2.0), where=".down_proj."),
    ("DECODED_MAGNITUDE", "every block decoding below 1e-05"): _decoded(
        1e-6, where=".down_proj."),
    ("DECODED_MAGNITUDE", "an expert 100x its siblings"): _decoded(
        256.0, where=".experts.0.down_proj."),
    **{("EXPERT_RMS_OUTLIER", cond): Mutation(
        _scale_by(factor), where=".experts.0.down_proj.", found_on=("weight", "weight_packed"))
       for cond, factor in (("an expert 8x above its layer's median", 8.0),
                            ("an expert 8x below it", 1 / 8))},
    # the deployment rules: parallel sizes and targets (options), the sizes they divide
    # (config.json): 4 heads, 4 experts, moe_intermediate_size 96 (ModelOpt FP8 block's 128),
    # intermediate_size 256 in every fixture; each case breaks one rule alone
    ("DEPLOY_TP_DIVISIBILITY", "a parallel size below 1"): _deploy({"tp": -1}),
    ("DEPLOY_TP_DIVISIBILITY", "attention heads not divisible"): _deploy(
        num_attention_heads=3),
    ("DEPLOY_TP_DIVISIBILITY", "moe_intermediate_size not divisible"): _deploy(
        {"ep": 1}, moe_intermediate_size=97),
    ("DEPLOY_TP_DIVISIBILITY", "moe_intermediate_size/TP off the group"): _deploy(
        {"ep": 1}, moe_intermediate_size=40),
    ("DEPLOY_TP_DIVISIBILITY", "intermediate_size not divisible"): _deploy(
        intermediate_size=257),
    ("DEPLOY_TP_DIVISIBILITY", "intermediate_size/TP off the dense group"): _deploy(
        intermediate_size=80),
    ("DEPLOY_EP_DIVISIBILITY", "n_routed_experts not divisible"): _deploy({"ep": 3}),
    ("DEPLOY_UNSUPPORTED", "a target with no kernel for the scheme"): _deploy(
        {"target": "b200"}),
    ("DEPLOY_UNSUPPORTED", "an unknown target"): _deploy({"target": "tpu-v5"}),
    ("DEPLOY_SLOW_PATH", "a target that emulates the scheme"): _deploy({"target": "mi300x"}),
    ("DEPLOY_NOTE", "a native path on a CUDA target (B200)"): _deploy({"target": "b200"}),
    ("DEPLOY_NOTE", "a native path on a ROCm target (MI355X)"): _deploy({"target": "mi355x"}),
    **{("ROUTER_BIAS_DTYPE", f"stored as {name}"): Mutation(_keep, edit=_bias_as(dtype))
       for name, dtype in (("BF16", ml_dtypes.bfloat16), ("F16", np.float16))},
    ("PACK_METHOD", "another pack_method ('order')"): Mutation(
        _keep, config=_pack_method("order"), anywhere=True),
    ("PACK_METHOD", "no pack_method recorded"): Mutation(
        _keep, config=_pack_method(None), anywhere=True),
    ("EXPERT_ALL_ZERO", "every projection of an expert zero"): Mutation(
        _keep, where=".experts.0.down_proj.", edit=_zero_first_experts),
    ("EXPERT_DUPLICATE", "an expert's tensors copied from another's"): Mutation(
        _keep, where=".experts.1.down_proj.", edit=_copy_first_experts),
    # a module's error against its source: every scale 4x (a compressed-tensors NVFP4
    # weight_global_scale, a divisor, 4x smaller), or its first scale NaN
    **{("REPRO_ERROR_HIGH", f"every scale {name}x: relative error {side} 0.5"): Mutation(
        _scale_by(factor), by_role={"weight_global_scale": _scale_by(1 / factor)},
        where=".experts.0.down_proj.", source=True, severity=severity,
        found_on=("weight", "weight_packed"), skip={
            ("", "weight_scale", "F8_E4M3"): "an E4M3 block scale stops at 448, where the "
                                             "module's largest block already is"})
       for name, factor, side, severity in (("1.3", 1.3, "within", "warning"),
                                            ("4", 4.0, "beyond", "error"))},
    ("REPRO_ERROR_HIGH", "a NaN scale: no finite error"): Mutation(
        _nan_first, where=".experts.0.down_proj.", source=True, severity="error",
        found_on=("weight", "weight_packed")),
    ("REPRO_SOURCE_MISSING", "the module absent from the source"): Mutation(
        _keep, where=".experts.0.down_proj.", source=True,
        source_edit=_source_weight(lambda a: None)),
    ("REPRO_SOURCE_MISSING", "the source weight transposed"): Mutation(
        _keep, where=".experts.0.down_proj.", source=True,
        source_edit=_source_weight(lambda a: np.ascontiguousarray(a.T))),
    ("REPRO_SOURCE_MISSING", "a NaN source weight, the bytes unclaimed (floor)"): Mutation(
        _keep, where=".experts.0.down_proj.", source=True, config=_floor,
        source_edit=_source_weight(_nan_corner)),
    ("REPRO_SOURCE_UNSUPPORTED", "a source quantized otherwise (AWQ)"): Mutation(
        _keep, source=True, source_edit=_source_as_awq, anywhere=True),
    ("REPRO_SOURCE_UNSUPPORTED", "no source folder"): Mutation(
        _keep, source=True, source_edit=_source_gone, anywhere=True),
    ("REPRO_NOTHING_VERIFIED", "a source holding none of the modules"): Mutation(
        _keep, source=True, source_edit=_source_renamed, anywhere=True),
    ("REPRO_NOTHING_VERIFIED", "a format no profile reproduces"): Mutation(
        _keep, source_fault=True, anywhere=True),
    ("REPRO_UNCORRELATED", "the codes in reverse order"): Mutation(
        _reverse, where=".experts.0.down_proj.", source=True),
    ("REPRO_UNCORRELATED", "every code zero"): Mutation(
        _fill(0), by_role=_ZERO_CODES, where=".experts.0.down_proj.", source=True),
    ("REPRO_MISMATCH", "a code changed"): Mutation(
        _flip_first, where=".experts.0.down_proj.", source=True, skip=_SCALES),
    ("REPRO_MISMATCH", "a scale changed"): Mutation(
        _flip_first, where=".experts.0.down_proj.", source=True, skip=_CODES),
    ("REPRO_MISMATCH", "a Quark recipe no profile reproduces (floor)"): Mutation(
        _keep, where=".experts.0.down_proj.", config=_floor, source=True, anywhere=True,
        severity="warning", skip=_SCALES),
    ("REPRO_MISMATCH", "bytes of a recipe the config does not name (Four-Over-Six)"): Mutation(
        _keep, where=".experts.0.down_proj.", edit=_four_over_six_from_source, source=True,
        anywhere=True, severity="warning", skip=_SCALES),
    # the structure checks, a table per group of checks
    **firing_files.MUTATIONS,
    **firing_index.MUTATIONS,
    **firing_layout.MUTATIONS,
    **firing_coverage.MUTATIONS,
    **firing_manifest.MUTATIONS,
    **firing_resume.MUTATIONS,
}

#: Checks whose formats are some of those holding a tensor of their roles, by their meaning
#: (one scheme's rule: W4A8's, NVFP4's; one element encoding's; what a producer profile
#: reproduces), each with the reason: the derivation test does not ask them to list the
#: other formats that hold such a tensor (W4A8's F32 weight_scale_2 is not an NVFP4 global).
BY_MEANING = {
    "W4A8_SCALE2_MAX": "W4A8's stage-2 row scales",
    "NVFP4_GLOBAL_CONVENTION": "NVFP4's global scale conventions",
    "NVFP4_GATE_UP_SCALE": "NVFP4's fused global scales",
    "NVFP4_FUSED_INPUT_SCALE": "NVFP4's fused activation scales",
    "SCALE_NOT_TIGHT": "MXFP4's and INT4's packed codes (NVFP4's: NVFP4_BLOCK_NOT_TIGHT)",
    "ROW_ALL_ZERO": "MXFP4's and INT4's packed codes",
    "TENSOR_SINGLE_CODE": "MXFP4's and INT4's packed codes",
    "NVFP4_BLOCK_NOT_TIGHT": "NVFP4's packed codes (MXFP4's: SCALE_NOT_TIGHT)",
    "FP8_ZERO_TILE_SCALE": "FP8 block producers with a known zero-tile scale (not ModelOpt's)",
    "EXPERT_RMS_OUTLIER": "the packed MXFP4 and INT4 codes, whose RMS the full pass measures",
    "REPRO_MISMATCH": "the formats a producer profile reproduces (not ModelOpt FP8 block)",
    "REPRO_UNCORRELATED": "the formats a producer profile reproduces (not ModelOpt FP8 block)",
    "REPRO_ERROR_HIGH": "the formats a producer profile reproduces (not ModelOpt FP8 block)",
    "REPRO_SOURCE_MISSING": "the formats a producer profile reproduces (not ModelOpt FP8 block)",
    "EXPERT_ALL_ZERO": "the packed MXFP4 and INT4 codes, whose experts the full pass compares",
    "EXPERT_DUPLICATE": "the packed MXFP4 and INT4 codes, whose experts the full pass compares",
}


def expected_severity(cid: str, fmt: str, role: str, mutation: Mutation) -> str:
    """The severity the finding must have: the mutation's, else SCALE_ZERO's error where vLLM
    divides by the scale or asserts on it (W4A8, an NVFP4 activation scale, a compressed-tensors
    weight_global_scale), else the check's."""
    if mutation.severity is not None:
        return mutation.severity
    if cid == "SCALE_ZERO" and (fmt == "quark-w4a8" or role in (
            "input_scale", "input_global_scale", "weight_global_scale")):
        return "error"
    return CHECKS[cid].severity.value


def formats_of(check: Check, condition: str | None = None) -> tuple[str, ...]:
    """The formats a check (``condition`` of it: :meth:`Check.formats_of`) applies to: those
    it declares; when it declares none, every format its group runs on (the numbers and layout
    checks: the formats whose numbers are verified, whose modules are quantized)."""
    declared = check.formats if condition is None else check.formats_of(condition)
    if declared:
        return declared
    numeric_only = check.group in ("numbers", "layout")
    return tuple(f for f in FORMAT_BASES if by_format(f).numeric or not numeric_only)


def _declared() -> list[tuple[str, str, str]]:
    """Every declared (check, condition, format)."""
    load_all()
    return [(c.id, cond, fmt) for c in CHECKS.values() for cond in c.conditions
            for fmt in formats_of(c, cond)]


MATRIX = _declared()

#: Declared (check, condition, format) no fixture can carry, each with the reason: left out of
#: the matrix by name, never silently (tests/data/producers holds what the producers wrote).
NOT_PLANTED: dict[tuple[str, str, str], str] = {
    **{("DEPLOY_TP_DIVISIBILITY", "intermediate_size/TP off the dense group", fmt): (
        f"no {fmt} fixture quantizes a dense MLP (the producer fixtures quantize the routed "
        "experts)")
       for fmt in ("compressed-tensors-int4", "compressed-tensors-nvfp4",
                   "compressed-tensors-mixed", "modelopt-nvfp4", "modelopt-mixed")},
    **{(cid, cond, fmt): f"the {fmt} fixture has no FP8 block member (its {members})"
       for cid, cond in (("FP8_TILE_NOT_TIGHT", "largest |code| 240, the binade below 256"),
                         ("FP8_TILE_NOT_TIGHT", "largest |code| 208, scales powers of two"),
                         ("FP8_ZERO_TILE_SCALE", "a tile of zero codes with the module's scales"))
       for fmt, members in (("compressed-tensors-mixed", "groups are INT4 and NVFP4"),
                            ("modelopt-mixed", "layers are NVFP4"))
       if (cid, fmt) != ("FP8_ZERO_TILE_SCALE", "modelopt-mixed")},
    ("DEPLOY_UNSUPPORTED", "a target with no kernel for the scheme", "modelopt-mixed"): (
        "the modelopt-mixed fixture has no FP8_PB_WO routed experts (its layers are NVFP4)"),
    **firing_files.NOT_PLANTED,
    **firing_index.NOT_PLANTED,
    **firing_layout.NOT_PLANTED,
    **firing_coverage.NOT_PLANTED,
    **firing_resume.NOT_PLANTED,
}


@pytest.fixture(scope="session")
def format_twins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each format's clean fixture (shared with the corpus's session cache)."""
    twins = ensure_twins(tmp_path_factory.mktemp("format-twins"), set(FORMAT_BASES.values()))
    return {fmt: twins[base] for fmt, base in FORMAT_BASES.items()}


def _targets(folder: Path, cid: str, where: str = "") -> dict[str, str]:
    """role -> the first tensor (by name) of ``folder`` of that role of the check, in one of
    its dtypes, whose name holds ``where``."""
    check = CHECKS[cid]
    found: dict[str, str] = {}
    for name, entry in sorted(_headers(folder).items()):
        role = name.rpartition(".")[2]
        if (role in check.roles and role not in found and where in name
                and (not check.dtypes or entry["dtype"] in check.dtypes)):
            found[role] = name
    return found


def _headers(folder: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for shard in sorted(folder.glob("*.safetensors")):
        header, _ = read_header(shard)
        out.update((k, v) for k, v in header.items() if k != "__metadata__")
    return out


_BASELINE: dict[tuple[str, Level, tuple[tuple[str, Any], ...]], set[str]] = {}


def _baseline(folder: Path, level: Level, options: dict[str, Any]) -> set[str]:
    """The check IDs the clean fixture reports at ``level`` with ``options`` (cached)."""
    key = (str(folder), level, tuple(sorted(options.items())))
    if key not in _BASELINE:
        report = validate(folder, Options(level=level, workers=1, **options))
        _BASELINE[key] = {f.check.id for f in report.findings}
    return _BASELINE[key]


def test_the_matrix_is_declared_and_planted() -> None:
    """Every declared format and condition is known here: a condition with no mutation, or a
    format with no fixture, is named."""
    assert MATRIX, "no check declares its conditions"
    ids = [case_id(*unit) for unit in MATRIX]
    assert len(set(ids)) == len(ids), "two matrix cases share a test id"
    unknown_formats = {f for _, _, f in MATRIX} - set(FORMAT_BASES)
    assert not unknown_formats, f"formats with no fixture: {sorted(unknown_formats)}"
    assert set(FORMAT_BASES) == {f.value for f in CheckpointFormat} - {"unsupported"}
    missing = sorted({(cid, cond) for cid, cond, _ in MATRIX} - set(MUTATIONS))
    assert not missing, f"declared conditions with no case in MUTATIONS: {missing}"
    stale = sorted(set(MUTATIONS) - {(cid, cond) for cid, cond, _ in MATRIX})
    assert not stale, f"MUTATIONS of no declared condition: {stale}"
    assert set(NOT_PLANTED) <= set(MATRIX), sorted(set(NOT_PLANTED) - set(MATRIX))
    assert all(reason.strip() for reason in NOT_PLANTED.values())


# NOT_PLANTED's triples are left out, not skipped: under CI=true a skipped test fails the run
# (tests/conftest.py); test_the_matrix_is_declared_and_planted names each with its reason.
@pytest.mark.parametrize(("cid", "condition", "fmt"), [
    pytest.param(*unit, id=case_id(*unit)) for unit in MATRIX if unit not in NOT_PLANTED])
def test_each_condition_fires_on_each_format(cid: str, condition: str, fmt: str,
                                             format_twins: dict[str, Path],
                                             tmp_path: Path) -> None:
    """The condition, planted in each tensor role of the format the check reads, fires the
    check on that tensor with its severity, at each level the check runs at, and the exit code
    follows (an error fails the run, a warning only with --strict, info never)."""
    mutation = MUTATIONS.get((cid, condition))
    assert mutation is not None, f"{cid}: no case plants condition {condition!r}"
    clean = format_twins[fmt]
    headers = _headers(clean)
    targets = {role: name for role, name in _targets(clean, cid, mutation.where).items()
               if not mutation.skips(fmt, role, headers[name]["dtype"])}
    if not CHECKS[cid].roles:
        targets = {"": ""}  # a check of no tensor's values: the config and options alone
    assert targets, (f"{cid} is declared for {fmt}, whose fixture holds none of its roles "
                     f"{CHECKS[cid].roles} in {CHECKS[cid].dtypes} (but those skipped)")
    options = dict(mutation.options)
    if mutation.source:
        options["source"] = clean.parent / f"{clean.name}-bf16"
    for role, tensor in targets.items():
        want = expected_severity(cid, fmt, role, mutation)
        path = copy_tree(clean, tmp_path / (role or "checkpoint"))
        _plant(path, tensor, mutation, role)
        planted = {**options, **mutation.fault}
        if mutation.source_fault:
            planted["source"] = clean.parent / f"{clean.name}-bf16"
        if mutation.source_edit is not None:
            planted["source"] = copy_tree(options["source"], tmp_path / f"{role}-source")
            mutation.source_edit(planted["source"], tensor.removesuffix(f".{role}"))
        for level in CHECKS[cid].levels:
            assert cid not in _baseline(clean, level, options), (cid, fmt, level)
            if mutation.file_option is not None:
                planted[mutation.file_option[0]] = _case_file(path, tmp_path / f"{role}-file",
                                                              mutation, level)
            report = validate(path, Options(level=level, workers=1, **planted))
            got = [f for f in report.findings if f.check.id == cid and _on(f.tensor, tensor,
                                                                             mutation, role)]
            where = f"{cid} [{condition}] on {fmt} {tensor} at {level.value}"
            assert got, f"{where}: not fired: {[f.to_json() for f in report.findings]}"
            assert {f.effective_severity.value for f in got} == {want}, where
            assert not [f for f in report.findings if f.check.id == "INTERNAL_ERROR"], where
            if report.fatal is not None:  # the run stopped (a format it cannot check): 2
                assert exit_code(report) == exit_code(report, strict=True) == 2, where
                continue
            errors = any(f.effective_severity.value == "error" for f in report.findings)
            assert exit_code(report) == (1 if errors else 0), where
            assert exit_code(report) == 1 or want != "error", where
            assert exit_code(report, strict=True) == 1 or want == "info", where


def _on(found: str | None, planted: str, mutation: Mutation, role: str) -> bool:
    """Whether a finding on tensor ``found`` is the planted one's: that tensor (of ``role``),
    or its module's of a role of ``mutation.found_on``, or for a fused pair
    (``mutation.where``) either module of the expert; any with ``mutation.anywhere``."""
    if mutation.anywhere:
        return True
    if mutation.found_on:
        module = planted.removesuffix(f".{role}")
        return found in {f"{module}.{r}" for r in mutation.found_on}
    if not mutation.pair:
        return found == planted
    expert = planted.split(mutation.where)[0] + ".experts.0."
    return found is not None and found.startswith(expert)


def _case_file(checkpoint: Path, folder: Path, mutation: Mutation, level: Level) -> Path:
    """The file :attr:`Mutation.file_option` names, under ``folder``, as
    :attr:`Mutation.file_edit` writes it for ``checkpoint`` at ``level`` (a file left by an
    earlier level's run removed first)."""
    assert mutation.file_option is not None
    folder.mkdir(exist_ok=True)
    path = folder / mutation.file_option[1]
    path.unlink(missing_ok=True)
    if mutation.file_edit is not None:
        mutation.file_edit(checkpoint, path, level)
    return path


def _retype(folder: Path, tensor: str, widths: dict[int, str]) -> None:
    """Relabel ``tensor``'s header dtype by its width (:attr:`Mutation.retype`)."""
    for shard in sorted(folder.glob("*.safetensors")):
        header, data = raw_header(shard)
        if tensor in header:
            header[tensor]["dtype"] = widths[DTYPES[header[tensor]["dtype"]].itemsize]
            write_raw(shard, header, data)
            return
    raise KeyError(tensor)


def _plant(folder: Path, tensor: str, mutation: Mutation, role: str) -> None:
    """Rewrite the shard holding ``tensor`` (of ``role``) with the mutation applied to a copy
    of it (same dtype and shape: the index and every other tensor stay as they were), or
    without it; then its module's tensors of the roles of ``mutation.also``, and the config."""
    if mutation.config is not None:
        config(mutation.config)(folder)
    if mutation.edit is not None:
        mutation.edit(folder)
    if not tensor:
        return
    if mutation.retype:
        _retype(folder, tensor, mutation.retype)
        return
    if mutation.change is None and (folder / INDEX).exists():
        drop_tensor(tensor)(folder)  # the index follows
        return
    change = mutation.by_role.get(role, mutation.change)
    _edit(folder, tensor, change, mutation.first_row)
    module = tensor.removesuffix(f".{role}")
    present = _headers(folder)
    for other, also in mutation.also.items():
        if f"{module}.{other}" in present:
            _edit(folder, f"{module}.{other}", also)


def _edit(folder: Path, tensor: str, change: Change | None, first_row: bool = False) -> None:
    """Rewrite the shard holding ``tensor`` with ``change`` applied to a flat copy of it (of
    its first row alone with ``first_row``), or without the tensor (``change`` None)."""
    for shard in sorted(folder.glob("*.safetensors")):
        tensors = read_safetensors(shard)
        if tensor in tensors and change is None:
            del tensors[tensor]
            write_safetensors(shard, tensors)
            return
        if tensor in tensors:
            a = tensors[tensor]
            rows = np.ascontiguousarray(a).reshape(a.shape[0] if first_row else 1, -1).copy()
            change(rows[0])
            tensors[tensor] = rows.reshape(a.shape)
            write_safetensors(shard, tensors)
            return
    raise KeyError(tensor)


def test_declared_formats_are_those_holding_the_roles(format_twins: dict[str, Path]) -> None:
    """A check reading tensor roles applies to exactly the formats whose fixture holds one of
    them in one of its dtypes: the declaration misses no format that carries such a scale (a
    new format's scales are then fired too), and lists none that does not but those whose
    every condition no fixture can carry (:data:`NOT_PLANTED`). Checks whose formats are
    some of those by their meaning (:data:`BY_MEANING`) are only held to the second half."""
    load_all()
    for check in CHECKS.values():
        if not check.conditions or not check.roles:
            continue
        runs_on = formats_of(dataclasses.replace(check, formats=()))
        holding = {fmt for fmt in runs_on if _targets(format_twins[fmt], check.id)}
        unplanted = {fmt for fmt in formats_of(check) if all(
            (check.id, cond, fmt) in NOT_PLANTED for cond in check.conditions
            if fmt in formats_of(check, cond))}
        declared = set(formats_of(check)) - unplanted
        assert declared <= holding, (check.id, sorted(declared - holding))
        if check.id not in BY_MEANING:
            assert holding <= declared, (check.id, "not declared", sorted(holding - declared))


def test_a_condition_of_some_formats_alone() -> None:
    """``declare(only=...)`` scopes a condition to some of the check's formats: the matrix
    fires it on those alone, the catalogue names them, and a scope outside the declared
    formats or of an undeclared condition is refused (nothing is catalogued)."""
    load_all()
    single = CHECKS["TENSOR_SINGLE_CODE"]
    assert single.formats_of("+0 and -0 mixed") == ("quark-mxfp4",)
    assert single.formats_of("zero everywhere") == single.formats
    assert [f for cid, cond, f in MATRIX if (cid, cond) == (single.id, "+0 and -0 mixed")] == [
        "quark-mxfp4"]
    assert "+0 and -0 mixed (only `quark-mxfp4`)" in render_markdown()
    fields: dict[str, Any] = {"severity": Severity.INFO, "level": Level.SCALES,
                              "group": "numbers", "meaning": "m", "fix": "f",
                              "conditions": ("a", "b"), "formats": ("quark-mxfp4", "fp8-block")}
    for only in ({"c": ("fp8-block",)}, {"a": ("quark-w4a8",)}, {"a": ()}):
        with pytest.raises(ValueError, match="scoped"):
            declare("SCOPED_TEST_CHECK", **fields, only=only)
    assert "SCOPED_TEST_CHECK" not in CHECKS
    # a check of every format may scope a condition to some of them
    anywhere = declare("SCOPED_ANY_FORMAT_TEST", **{**fields, "formats": ()},
                       only={"a": ("fp8-block",)})
    try:
        assert anywhere.formats_of("a") == ("fp8-block",) and anywhere.formats_of("b") == ()
    finally:
        del CHECKS["SCOPED_ANY_FORMAT_TEST"]


def test_a_check_pickles_as_the_catalogues_own_entry() -> None:
    """Findings cross processes: a check that declares its conditions comes back as the
    catalogue's entry; one whose declaration differs (another process's version) does not."""
    load_all()
    for check in CHECKS.values():
        assert pickle.loads(pickle.dumps(check)) is check
    declared = CHECKS["SCALE_ZERO"]
    other = dataclasses.replace(declared, conditions=("zero", "negative zero"))
    back = pickle.loads(pickle.dumps(other))
    assert back == other and back is not declared


def test_the_audit_switches_every_declared_condition_off() -> None:
    """``tests/audit_conditions.py`` has a switch for every declared (check, condition), each
    switch's text is in its file once (a refactor that moved it shows here, not in a later
    audit run), and each names matrix cases that exist."""
    load_all()
    switched = {c for s in SWITCHES for c in s.conditions}
    declared = {(cid, cond) for cid, cond, _ in MATRIX}
    assert declared <= switched, f"conditions no audit switch turns off: {declared - switched}"
    assert switched <= declared, f"switches of undeclared conditions: {switched - declared}"
    assert len({s.name for s in SWITCHES}) == len(SWITCHES)
    for switch in SWITCHES:
        assert patch_text(switch).count("\n+") >= 1, switch.name
        assert set(switch.catches) <= set(MATRIX), (switch.name, set(switch.catches) - set(MATRIX))
