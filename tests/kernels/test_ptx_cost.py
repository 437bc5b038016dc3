"""``benchmarks/ptx_cost.py``: the PTX path counter on hand-written PTX (the compile itself
runs in CI as ``.ci/triton_ptx.sh``'s smoke run, where it also holds the MXFP4 quantizer to
its budget of 35 instructions per element)."""

from __future__ import annotations

import os
from types import ModuleType

import pytest
from conftest import requires

from .benchmark_scripts import load_benchmark


def _ptx_cost() -> ModuleType:
    return load_benchmark("ptx_cost")


@pytest.fixture(autouse=True)
def _interpreter_setting_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ptx_cost.main`` turns Triton's interpreter off for its process (it compiles for
    sm_90): each test here gets ``TRITON_INTERPRET`` back as it found it, so the tests after
    it in the same process still run the interpreter."""
    if "TRITON_INTERPRET" in os.environ:
        monkeypatch.setenv("TRITON_INTERPRET", os.environ["TRITON_INTERPRET"])


def _kernel(body: str) -> str:
    return (".version 8.0\n.target sm_90\n.visible .entry k(\n.param .u64 k_param_0\n)\n{\n"
            "\t.reg .b32 %r<9>;\n" + body + "}\n")


BRANCHY = _kernel("""
\tld.param.b64 %rd1, [k_param_0];
$L__tmp0:
\tmov.u32 %r1, %tid.x;
\tsetp.ne.b32 %p1, %r1, 0;
\t@!%p1 bra $L__BB0_2;
\tadd.s32 %r2, %r1, 1;
\tadd.s32 %r3, %r2, 1;
\tadd.s32 %r4, %r3, 1;
\tbra.uni $L__BB0_3;
$L__BB0_2:
\tshl.b32 %r2, %r1, 1;
$L__BB0_3:
\tst.global.b32 [%rd1], %r2;  // a comment
\tret;
""")


def test_fast_path_is_the_shortest_path_and_total_counts_everything() -> None:
    fast, total = _ptx_cost().path_costs(BRANCHY)
    assert (fast, total) == (7, 11)  # 4 + shl + st + ret; every instruction: 11


PREDICATED = _kernel("""
\tld.param.b64 %rd1, [k_param_0];
\t.loc\t1 12 7
\t// begin inline asm
\tmov.u32 %r1, %tid.x;
\t// end inline asm
\tsetp.eq.b32 %p1, %r1, 0;
\t@%p1 st.global.b32 [%rd1], %r1;
\t@%p1 bra $L__BB0_2;
\tadd.s32 %r2, %r1, 1;
\tadd.s32 %r3, %r2, 1;
\tadd.s32 %r4, %r3, 1;
\tst.global.b32 [%rd1], %r4;
$L__BB0_2:                              // %exit
\tret;
""")


def test_predicated_instructions_count_and_directives_do_not() -> None:
    """A predicated store is an instruction, a predicated (not negated) ``bra`` a branch whose
    target is the shorter path; ``.loc`` and comment lines are not instructions, a label
with a comment (as LLVM writes them) still a label."""
    fast, total = _ptx_cost().path_costs(PREDICATED)
    assert (fast, total) == (6, 10)  # ld, mov, setp, @st, @bra, ret; + 3 add + st


def test_a_loop_is_refused() -> None:
    looping = _kernel("$L__BB0_1:\n\tadd.s32 %r1, %r1, 1;\n\t@%p1 bra $L__BB0_1;\n\tret;\n")
    with pytest.raises(ValueError, match="loop"):
        _ptx_cost().path_costs(looping)


def _main_with_costs(monkeypatch: pytest.MonkeyPatch, *costs: tuple[str, float],
                     check: bool = True) -> int:
    """``main`` with the recording and compiling replaced: one launch per ``(name, per
    element)`` cost."""
    module = _ptx_cost()
    launches = [module.Launch(name, None, {}, {}, {}, 1, 1, 2) for name, _ in costs]
    per_element = dict(costs)
    monkeypatch.setattr(module, "record_launches", lambda only: launches)
    monkeypatch.setattr(module, "compile_cost", lambda launch: module.Cost(
        launch.name, "k", 1.0, int(per_element[launch.name]), 0, per_element[launch.name], 0.0,
        2.0, 1.0))
    return int(module.main(["--check"] if check else []))


def test_check_holds_the_mxfp4_quantizer_to_its_target(monkeypatch: pytest.MonkeyPatch) -> None:
    at, above = 35.0, 35.1
    assert _main_with_costs(monkeypatch, ("quantize_mx e2m1 ocp from bfloat16", at)) == 0
    assert _main_with_costs(monkeypatch, ("quantize_mx e2m1 ocp from bfloat16", above)) == 1
    assert _main_with_costs(monkeypatch, ("quantize_mx e2m1 ocp from bfloat16", above),
                            check=False) == 0


def test_check_that_measured_no_mxfp4_quantizer_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _main_with_costs(monkeypatch, ("dequantize_mx e2m1 ocp to bfloat16", 10.0)) == 1
    assert _main_with_costs(monkeypatch, ("dequantize_mx e2m1 ocp to bfloat16", 10.0),
                            check=False) == 0


def test_the_hbm_roofline_share_and_the_budget_mark() -> None:
    """A kernel at or under the instructions an H200's HBM feeds per element is memory-bound
    (share 1); above, the share is their ratio. The table marks a fast path over the budget,
    never one at it (both sides of the line)."""
    module = _ptx_cost()
    fed = module.fed_instructions(2.5)
    assert fed == pytest.approx(2.5 * 132 * 4 * 32 * 1.98e9 / 4.8e12)
    assert module.hbm_share(fed, 2.5) == 1.0
    assert module.hbm_share(2 * fed, 2.5) == pytest.approx(0.5)
    cost = module.Cost
    at = cost("at", "k", 8, 128, 128, 16.0, 16.0, 2.5, 1.0)
    over = cost("over", "k", 8, 129, 129, 16.1, 16.1, 2.5, 0.99)
    rows = module.table([at, over], 16).splitlines()[2:]
    assert rows[0].endswith("| yes | yes |") and rows[1].endswith("| **over** | yes |")


def test_the_summary_counts_the_validators_kernels_apart(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    """A case ``validate --device`` never launches is marked ``no`` and left out of the
    validator's count; the integer-encoder twins are such rows."""
    module = _ptx_cost()
    off = next(iter(module.OFF_THE_VALIDATOR_PATH))
    twin = module.INTEGER_ENCODER_TWINS[0] + module.INTEGER_ENCODER
    launches = [module.Launch("on", None, {}, {}, {}, 1, 1, 2),
                module.Launch(off, None, {}, {}, {}, 1, 1, 2, False),
                module.Launch(twin, None, {}, {}, {}, 1, 1, 2, False)]
    monkeypatch.setattr(module, "record_launches", lambda only: launches)
    monkeypatch.setattr(module, "compile_cost", lambda launch: module.Cost(
        launch.name, "k", 1.0, 20, 20, 20.0 if launch.validator else 10.0, 20.0, 2.0, 1.0,
        launch.validator))
    module.main([])
    out = capsys.readouterr().out
    assert f"| {off} | `k` |" in out and out.count("| yes | no |") == 2
    assert "2 of 3 kernels at or under 16" in out
    assert "of the 1 that validate --device launches on sm_90, 0" in out


def test_the_recorder_marks_the_off_path_cases_and_the_twins(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Recorded (not compiled): the sm_90 answer takes the hardware E4M3 encoder on the
    validator's path, the twin row the integer encoder off it (its other launch, the
    maximum, is not recorded twice), and a case off the path is marked so. (Under the
    interpreter the kernels hold no compiler signature: that part is not looked at.)"""
    requires("torch")
    requires("triton")
    module = _ptx_cost()
    monkeypatch.setattr(module, "_signature", lambda kernel, args: ({}, {}))
    recorded = [(launch.name, launch.kernel.fn.__name__, launch.validator,
                 launch.constants.get("HARDWARE"))
                for launch in module.record_launches("quantize_fp8 e4m3fn static")]
    name = "quantize_fp8 e4m3fn static from bfloat16"
    assert recorded == [(name, "_amax_kernel", True, None),
                        (name, "_cast_fp8_kernel", True, True),
                        (name + module.INTEGER_ENCODER, "_cast_fp8_kernel", False, False)]
    off = module.record_launches("quantize_fp8 e4m3fnuz")
    assert off and all(not launch.validator and launch.constants.get("HARDWARE") is not True
                       for launch in off)
