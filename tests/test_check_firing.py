"""Every check in the validator's catalogue has a test that fires it, or a waiver with a reason.

A check is fired when

- a corpus case of ``tests/test_validate_corpus.py`` declares it (``test_corpus_case`` asserts
  each case's findings exactly, so a declared ID is raised); xfail cases do not count;
- a case of the parametrised tables of ``tests/test_validate_core.py`` (``FILES_CASES``,
  ``COVERAGE_CASES``, ``LAYOUT_CASES``) expects it (those tests assert the ID set exactly);
- a dedicated test named in :data:`FIRED_BY_TEST` asserts it (checked here: the test exists and
  names the ID).

New corpus and table cases are picked up without editing this file. The check needs no other
test to have run first: it reads the cases, it does not collect findings from a session.
"""

from __future__ import annotations

import importlib
import inspect

import test_validate_core
from test_validate_corpus import CASES, _catalogue

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
    covered = set(_fired_by_cases()) | set(FIRED_BY_TEST) | set(WAIVED)
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
