"""The compiled FP8 block passes (numba, ``mxformats[fast]``) under the harness the numpy fast
paths are checked with, the one-pass FP8 block reproduction against the numpy path bit for bit
(every profile, every scale form, edge tiles, piece boundaries), and every path with numba
turned off (``MXFORMATS_NUMBA=0``), as where it is not installed."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from conftest import requires
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fast_compiled import numba_off  # noqa: F401 (a fixture)
from test_validate_tasks import _json, _without_timings

from mxformats import fast
from mxformats.fast import jit
from mxformats.fast import reproduce_fp8_block as compiled
from mxformats.fast.moments import PIECE, Moments
from mxformats.fast.passes import CompiledPasses
from mxformats.formats import E4M3FN
from mxformats.schemes import fp8_block
from mxformats.testing import check_quantizer
from mxformats.validate.findings import Level
from mxformats.validate.model import Options
from mxformats.validate.runner import exit_code, validate

BF16 = np.dtype(ml_dtypes.bfloat16)
PROFILES = sorted(fp8_block.PRODUCERS)
PRODUCERS = Path(__file__).resolve().parent / "data" / "producers"
TILE = (128, 128)


@pytest.fixture
def with_numba() -> None:
    """numba importable (locally a skip without it; under CI=true a failure)."""
    requires("numba")
    assert jit.compiled(compiled.KERNELS) is not None, jit.status()


def _same(a: fp8_block.FP8BlockArray, b: fp8_block.FP8BlockArray) -> bool:
    return (a.codes.tobytes() == b.codes.tobytes() and a.scales.dtype == b.scales.dtype
            and a.scales.shape == b.scales.shape and a.scales.tobytes() == b.scales.tobytes()
            and (a.block, a.profile) == (b.block, b.profile))


def _numpy_moments(w: Any, q: fp8_block.FP8BlockArray, profile: str) -> Moments | None:
    d = fast.dequantize_fp8_block(q.codes, q.scales, block=q.block, profile=profile)
    return Moments.of(np.asarray(d), w)


def _bits(m: Moments | None) -> Any:
    assert m is not None
    sums = (m.error_squares, m.source_squares, m.cross, m.weight_spread, m.source_spread)
    return [*np.array(sums).view(np.uint64).tolist(), m.source_varies, m.weight_varies]


def _pass(w: Any, q: fp8_block.FP8BlockArray, profile: str) -> Moments | None:
    return compiled.reproduce_fp8_block(w, q.codes, q.scales, q.block, profile, "vllm")


# -- the compiled quantizer, under the harness ------------------------------------------------


def _as_blocks(quantize: Any) -> Any:
    """An FP8 block quantizer as the harness calls an MX one: each block of the batch one
    ``1 × block_size`` tile, its scale's bytes (float32 or bfloat16) as the block's scale."""
    def call(x: Any, elem: Any, *, block_size: int, axis: int, profile: str) -> Any:
        assert elem is E4M3FN and axis == -1
        q = quantize(np.ascontiguousarray(x), block=(1, block_size), profile=profile)
        return q.codes, np.ascontiguousarray(q.scales).view(np.uint8)
    return call


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("profile", PROFILES)
def test_compiled_quantizer_harness(profile: str) -> None:
    """Every bfloat16 pattern laid out in tiles, the TestFloat-style E4M3 blocks (ties at
    every scale, NaN/Inf/±0, tiny and huge tiles) and Hypothesis batches: the compiled
    quantizer's codes and scale bytes are the reference's (BF16 input, which it computes;
    tiles holding NaN/Inf go to the numpy path)."""
    check_quantizer(_as_blocks(compiled.quantize_fp8_block),
                    reference=_as_blocks(fp8_block.quantize_fp8_block), profile=profile,
                    elem=E4M3FN, block_size=32, dtypes=("bfloat16",),
                    sources=("sweep", "boundary", "hypothesis"),
                    max_examples=40).raise_if_failed()


def _every_code_tiles(exponents: range) -> Any:
    """One row per exponent ``k``: every non-negative bfloat16 value up to ``448 * 2**k``
    (that amax included) and their negatives: every E4M3 code and every tie between two
    codes, under the scale each profile derives from that amax."""
    positive = np.arange(0x7F80, dtype=np.uint16).view(BF16).astype(np.float64)
    rows = []
    for k in exponents:
        amax = 448.0 * 2.0**k
        row = positive[positive <= amax]
        rows.append(np.concatenate([row, -row]))
    width = max(len(r) for r in rows)
    return np.stack([np.pad(r, (0, width - len(r))) for r in rows]).astype(BF16)


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("profile", PROFILES)
def test_compiled_quantizer_every_code_under_every_scale_form(profile: str) -> None:
    """Tiles whose amax is ``448 * 2**k`` for k from -140 (a float32 scale subnormal, a
    bfloat16 scale rounding to zero: eps) to 120 (huge), and ``1.5 * 2**k`` between: the
    float32, bfloat16 and power-of-two scale forms, every E4M3 code (checked present) and
    the ties between codes, one tile per row."""
    x = _every_code_tiles(range(-140, 121, 20))
    x = np.concatenate([x, (x.astype(np.float32) * np.float32(1.5 / 448)).astype(BF16)])
    block = (1, x.shape[1])
    got = compiled.quantize_fp8_block(x, block=block, profile=profile)
    want = fp8_block.quantize_fp8_block(x, block=block, profile=profile)
    assert _same(got, want)
    codes = set(np.unique(got.codes).tolist())
    assert len(codes) >= 253, sorted(set(range(256)) - codes)


@pytest.mark.usefixtures("with_numba")
@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 300), cols=st.integers(1, 300), seed=st.integers(0, 2**16),
       exponent=st.integers(-130, 120), bm=st.sampled_from([1, 5, 128]),
       bn=st.sampled_from([1, 7, 128]), profile=st.sampled_from(PROFILES))
def test_compiled_quantizer_hypothesis_over_shapes(rows: int, cols: int, seed: int,
                                                   exponent: int, bm: int, bn: int,
                                                   profile: str) -> None:
    """Hypothesis over shapes and tiles (edge tiles both ways, bands of one row, tiles wider
    than the matrix) and magnitudes spread over 24 binades: the reference's bytes."""
    rng = np.random.default_rng(seed)
    with np.errstate(over="ignore"):
        x = (rng.standard_normal((rows, cols)) * 2.0**exponent
             * np.exp2(rng.integers(-12, 12, (rows, cols)))).astype(BF16)
    if not np.isfinite(x.astype(np.float32)).all():
        x = np.nan_to_num(x.astype(np.float32), posinf=1.0, neginf=-1.0).astype(BF16)
    got = compiled.quantize_fp8_block(x, block=(bm, bn), profile=profile)
    assert _same(got, fp8_block.quantize_fp8_block(x, block=(bm, bn), profile=profile))


_FIELDS: dict[str, tuple[Any, ...]] = dict(scale_dtype=("float32", "input"), power_of_two_scale=(False, True),
               zero_scale_eps=(False, True),
               multiplier=("max-over-amax", "reciprocal-of-scale", "divide-by-scale"),
               quotient_dtype=("float32", "input"), clamp_to_max=(False, True),
               fnuz=(False, True), amax_floor=(None, 1e-4))


@pytest.mark.usefixtures("with_numba")
def test_the_plan_is_read_from_the_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every combination of the record's fields (384 producers, most of which no library
    writes): the compiled quantizer computes each as the reference does (zero tiles, tiny
    and huge tiles included), or refuses it as the reference does. Nothing in the pass knows
    a profile by name."""
    base = fp8_block.PRODUCERS["deepseek"]
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((20, 24)) * np.exp2(rng.integers(-140, 120, (20, 1)))).astype(BF16)
    x[:5, :6] = 0
    x[5:10, :6] = -0.0
    for values in itertools.product(*_FIELDS.values()):
        fields: dict[str, Any] = dict(zip(_FIELDS, values, strict=True))
        record = dataclasses.replace(base, name="planned", **fields)
        monkeypatch.setitem(fp8_block.PRODUCERS, "planned", record)
        if record.fnuz and record.scale_dtype == "input":  # bfloat16 scales: no conversion
            for quantize in (fp8_block.quantize_fp8_block, compiled.quantize_fp8_block):
                with pytest.raises(TypeError, match="scale must be float32"):
                    quantize(x, block=(5, 6), profile="planned")
            continue
        with np.errstate(all="ignore"):
            want = fp8_block.quantize_fp8_block(x, block=(5, 6), profile="planned")
        got = compiled.quantize_fp8_block(x, block=(5, 6), profile="planned")
        assert _same(got, want), record


# -- the one-pass reproduction against the numpy path ------------------------------------------


def _module(shape: tuple[int, int], seed: int, low: int = -20, high: int = 4) -> Any:
    """Magnitudes spread over binades, so that a term summed in another lane or piece
    changes the bits."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * np.exp2(rng.integers(low, high, shape))).astype(BF16)


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("shape", [(1, 1), (128, 128), (300, 200), (129, 7168),
                                   (3, PIECE // 2 + 16), (PIECE // 64 + 1, 64), (2, 70000)])
def test_pass_moments_are_the_numpy_paths(profile: str, shape: tuple[int, int]) -> None:
    """The compiled pass answers with the numpy path's moments bits in every profile: whole
    and edge tiles both ways, a band's last row inside a piece, pieces ending mid-row."""
    w = _module(shape, shape[1])
    q = fast.quantize_fp8_block(w, block=TILE, profile=profile)
    assert _bits(_pass(w, q, profile)) == _bits(_numpy_moments(w, q, profile))


@pytest.mark.usefixtures("with_numba")
@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 400), cols=st.integers(1, 400), seed=st.integers(0, 2**16),
       exponent=st.integers(-40, 40), constant=st.booleans(),
       profile=st.sampled_from(PROFILES))
def test_pass_moments_hypothesis(rows: int, cols: int, seed: int, exponent: int,
                                 constant: bool, profile: str) -> None:
    """Hypothesis over shapes (piece boundaries anywhere in a row), magnitudes and constant
    modules: the pass answers for every module with the numpy path's bits."""
    w = (_module((rows, cols), seed).astype(np.float32) * np.float32(2.0**exponent)).astype(BF16)
    if constant:
        w[...] = w[0, 0]
    q = fast.quantize_fp8_block(w, block=TILE, profile=profile)
    assert _bits(_pass(w, q, profile)) == _bits(_numpy_moments(w, q, profile))


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("profile", ["deepseek", "compressed-tensors", "ue8m0"])
@pytest.mark.parametrize("plant", ["code", "code-last", "scale", "scale-last", "nan", "inf"])
def test_pass_hands_anything_else_to_the_numpy_path(profile: str, plant: str) -> None:
    """A code or a scale that differs (in the first band's middle and at the very end, the
    edge tile's), NaN or Inf in the source: the pass answers None (the numpy path then says
    where); the unplanted module is answered."""
    w = _module((300, 260), seed=1)
    q = fast.quantize_fp8_block(w, block=TILE, profile=profile)
    codes, scales = q.codes.copy(), q.scales.copy()
    assert compiled.reproduce_fp8_block(w, codes, scales, TILE, profile, "vllm") is not None
    if plant == "code":
        codes[100, 5] ^= 0x01
    elif plant == "code-last":
        codes[-1, -1] ^= 0x80
    elif plant == "scale":
        scales.view(f"u{scales.itemsize}")[0, 1] += 1  # one ulp, in the stored dtype
    elif plant == "scale-last":
        scales[-1, -1] = scales[-1, -1] * 2
    elif plant == "nan":
        w[299, 259] = np.nan
    else:
        w[130, 0] = -np.inf
    assert compiled.reproduce_fp8_block(w, codes, scales, TILE, profile, "vllm") is None


def test_pass_declines_inputs_outside_it() -> None:
    """A float32 or float16 source, codes or scales of another dtype or shape (float32
    scales where compressed-tensors stores bfloat16), an unknown profile or consumer: None
    (the numpy path runs), whether or not numba is installed."""
    w = _module((130, 140), seed=2)
    q = fast.quantize_fp8_block(w, block=TILE, profile="compressed-tensors")
    args = ("compressed-tensors", "vllm")

    def answer(x: Any, codes: Any, scales: Any, *rest: Any) -> Any:
        return compiled.reproduce_fp8_block(x, codes, scales, TILE, *(rest or args))

    for x in (w.astype(np.float32), w.astype(np.float16), w[:, :139], w[None]):
        assert answer(x, q.codes, q.scales) is None
    assert answer(w, q.codes.view(np.int8), q.scales) is None
    assert answer(w, q.codes, q.scales.astype(np.float32)) is None
    assert answer(w, q.codes, q.scales[:1]) is None
    assert answer(w, q.codes, q.scales, "nope", "vllm") is None
    assert answer(w, q.codes, q.scales, "compressed-tensors", "ocp") is None


@pytest.mark.usefixtures("numba_off")
def test_without_numba_the_numpy_paths_run() -> None:
    """numba turned off (as absent, or refusing this numpy): the quantizer is the numpy fast
    path's (still the reference's bytes, under the harness), the pass answers None."""
    assert jit.compiled(compiled.KERNELS) is None
    check_quantizer(_as_blocks(compiled.quantize_fp8_block),
                    reference=_as_blocks(fp8_block.quantize_fp8_block), profile="ue8m0",
                    elem=E4M3FN, block_size=32, dtypes=("bfloat16",),
                    sources=("boundary",)).raise_if_failed()
    w = _module((130, 140), seed=4)
    q = fast.quantize_fp8_block(w, block=TILE, profile="deepseek")
    assert _pass(w, q, "deepseek") is None


@pytest.mark.usefixtures("with_numba")
def test_a_compiled_module_that_fails_to_import_is_none() -> None:
    """:func:`jit.compiled` of a compiled module that cannot be imported: None (the numpy
    paths run), never a crash; the FP8 block module loads beside the MXFP4 one."""
    assert jit.compiled("no_such_compiled_module") is None
    assert jit.compiled() is not None and jit.compiled(compiled.KERNELS) is not None


# -- the report, with and without numba --------------------------------------------------------


def _report(numba: bool, fixture: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``mxformats validate --level full --source`` of a producer fixture: its JSON report
    without timings, and its exit code."""
    monkeypatch.setenv(jit.NUMBA_VARIABLE, "1" if numba else "0")
    jit._load.cache_clear()
    try:
        report = validate(PRODUCERS / fixture, Options(level=Level.FULL, workers=1,
                                                       source=PRODUCERS / "src-bf16"))
        return _without_timings(_json(report)), exit_code(report), report.reproduction
    finally:
        jit._load.cache_clear()


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize(("fixture", "modules"), [("kimi-k2-fp8-block-deepseek", 48),
                                                  ("kimi-k2-fp8-block-compressed-tensors", 42)])
def test_reproduction_report_is_the_same_with_and_without_numba(
        fixture: str, modules: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The producers' own FP8 block fixtures (DeepGEMM's float32 scales, llm-compressor's
    bfloat16 ones) from their BF16 source: the JSON report (timings aside) is byte-identical
    whether the compiled pass (which answers for every module) or the numpy path computed
    each module, and every module reproduces."""
    answered: list[bool] = []
    real = CompiledPasses.reproduce_fp8_block

    def spy(*args: Any) -> Moments | None:
        moments = real(*args)
        answered.append(moments is not None)
        return moments

    monkeypatch.setattr(CompiledPasses, "reproduce_fp8_block", staticmethod(spy))
    with_pass, code, reproduction = _report(True, fixture, monkeypatch)
    assert answered == [True] * modules
    assert (with_pass, code) == _report(False, fixture, monkeypatch)[:2]
    assert code == 0
    assert reproduction["modules_reproduced"] == reproduction["modules_checked"] == modules
