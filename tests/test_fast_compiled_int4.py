"""The compiled INT4 and W4A8 passes (numba, ``mxformats[fast]``) under the harness the numpy
fast paths are checked with, and the one-pass reproductions against the numpy path, bit for
bit; and every path with numba turned off (``MXFORMATS_NUMBA=0``), as where it is not
installed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fast_compiled import _bits, numba_off, with_numba  # noqa: F401 (fixtures)

from mxformats.fast import jit
from mxformats.fast import reproduce_int4 as compiled
from mxformats.fast.moments import PIECE, Moments
from mxformats.schemes import int4, w4a8
from mxformats.testing import check_int4_quantizer
from mxformats.validate import reproduce
from mxformats.validate.descriptors import ct_int4, quark_w4a8
from mxformats.validate.model import Options
from mxformats.validate.report import to_json
from mxformats.validate.runner import validate

DATA = Path(__file__).resolve().parent / "data"
SOURCE = DATA / "producers" / "src-bf16"
W4A8 = quark_w4a8.DESCRIPTOR
BF16 = ml_dtypes.bfloat16


def _module(rows: int, cols: int, seed: int, scale: float = 0.02) -> Any:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, cols)) * scale).astype(BF16)


def _spread(shape: tuple[int, int], seed: int) -> Any:
    """N(0, 1) times powers of two over 24 binades: a term summed in another lane or piece
    changes the bits."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * np.exp2(rng.integers(-20, 4, shape))).astype(BF16)


# -- the compiled quantizers, under the harness ------------------------------------------------


def _per_channel(quantize: Any) -> Any:
    """``quantize`` with one group per row whatever group the harness passes (its rows are
    the groups)."""
    def call(x: Any, *, group_size: int, axis: int, profile: str) -> Any:
        return quantize(x, group_size=None, axis=axis, profile=profile)
    return call


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("profile", int4.PROFILES)
@pytest.mark.parametrize("group", [32, 64, 128])
def test_compiled_int4_quantizer_harness(profile: str, group: int) -> None:
    """Every bfloat16 and float16-grid pattern in groups, the boundary groups (ties at every
    scale, division against reciprocal, tiny and huge groups, specials) and Hypothesis: the
    compiled row quantizer's integers and scales are the reference's, from bfloat16 and
    float32, for each producer (a division in bfloat16, a reciprocal multiply in float32)."""
    check_int4_quantizer(compiled.quantize_int4, profile=profile, group_size=group,
                         max_examples=25).raise_if_failed()


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("profile", int4.PROFILES)
def test_compiled_int4_quantizer_per_channel_harness(profile: str) -> None:
    """Per channel (``group_size`` None: the whole row one group), rows of 64."""
    check_int4_quantizer(_per_channel(compiled.quantize_int4),
                         reference=_per_channel(int4.quantize_int4), profile=profile,
                         group_size=64, sources=("boundary", "hypothesis"),
                         max_examples=25).raise_if_failed()


def _same(a: Any, b: Any) -> bool:
    return all(x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
               for x, y in zip(a, b, strict=True))


def _finite_bf16() -> Any:
    """Every finite bfloat16 value, in pattern order."""
    values = np.arange(1 << 16, dtype=np.uint16).view(BF16)
    return values[np.isfinite(values.astype(np.float32))]


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("amax", [448.0, 1.0, 2.0**-120, 3.0e38])
def test_compiled_w4a8_every_fp8_quotient(amax: float) -> None:
    """Every finite bfloat16 value below the tensor's largest (``amax``: 448 makes the FP8
    scale 1, so each value is its own quotient, every E4M3FN code and tie; the others move
    the quotients by the scale's division and bfloat16 rounding), in rows of 64 holding the
    rows' own INT4 ties: the compiled W4A8 bytes are the reference's."""
    values = _finite_bf16()
    kept = values[np.abs(values.astype(np.float32)) <= np.float32(BF16(amax))]
    kept = np.concatenate([kept, np.full(-kept.size % 64, BF16(amax))]).reshape(-1, 64)
    kept[0, 0] = BF16(amax)
    assert _same(compiled.quantize_w4a8(kept), w4a8.quantize_w4a8(kept))
    wide = kept.astype(np.float32)
    assert _same(compiled.quantize_w4a8(wide), w4a8.quantize_w4a8(wide))


@pytest.mark.usefixtures("with_numba")
@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 5), words=st.integers(1, 40), seed=st.integers(0, 2**16),
       exponent=st.integers(-120, 120), constant=st.booleans())
def test_compiled_w4a8_hypothesis(rows: int, words: int, seed: int, exponent: int,
                                  constant: bool) -> None:
    """Hypothesis over shapes, magnitudes and constant weights: the compiled W4A8 bytes are
    the reference's."""
    w = _module(rows, 8 * words, seed, 2.0**exponent)
    if constant:
        w[...] = w[0, 0]
    assert _same(compiled.quantize_w4a8(w), w4a8.quantize_w4a8(w))


@pytest.mark.usefixtures("numba_off")
def test_without_numba_the_numpy_paths_run() -> None:
    """numba turned off (as absent): the quantizers are the numpy fast paths' (the reference's
    bytes) and the passes answer None."""
    assert jit.compiled("compiled_int4") is None
    check_int4_quantizer(compiled.quantize_int4, profile="compressed-tensors",
                         sources=("boundary",)).raise_if_failed()
    w = _module(2, 64, seed=1)
    assert _same(compiled.quantize_w4a8(w), w4a8.quantize_w4a8(w))
    tensors = ct_int4.DESCRIPTOR.produce(w)
    assert compiled.reproduce_int4(w, tensors["weight_packed"], tensors["weight_scale"], 32,
                                   "compressed-tensors", "compressed-tensors") is None
    assert _w4a8_pass(w, W4A8.produce(w)) is None


# -- the one-pass reproductions against the numpy path -----------------------------------------


def _int4_pass(desc: ct_int4.CompressedTensorsInt4, w: Any, arrays: dict[str, Any]) -> Any:
    return desc.reproduce_in_one_pass("m", w, arrays)


def _w4a8_pass(w: Any, arrays: dict[str, Any]) -> Any:
    return W4A8.reproduce_in_one_pass("m", w, arrays)


def _numpy_moments(desc: Any, w: Any, arrays: dict[str, Any]) -> Moments | None:
    return Moments.of(np.asarray(desc.dequantize(arrays, w.shape[-1])), w)


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("group", ct_int4.GROUP_SIZES)
@pytest.mark.parametrize("shape", [(1, 128), (3, 384), (2, 7168), (3, PIECE // 2 + 128),
                                   (PIECE // 128 + 1, 128)])
def test_int4_pass_moments_are_the_numpy_paths(group: int | None, shape: tuple[int, int]
                                               ) -> None:
    """Every group vLLM loads, rows crossing piece boundaries mid-row, modules of one and of
    many rows: the INT4 pass's moments have the numpy path's bits."""
    desc = ct_int4.VARIANTS[group]
    w = _spread(shape, shape[1])
    arrays = desc.produce(w)
    assert _bits(_int4_pass(desc, w, arrays)) == _bits(_numpy_moments(desc, w, arrays))


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("shape", [(1, 8), (3, 72), (2, 7168), (3, PIECE // 2 + 8),
                                   (PIECE // 128 + 1, 128)])
def test_w4a8_pass_moments_are_the_numpy_paths(shape: tuple[int, int]) -> None:
    """The W4A8 pass's moments have the numpy path's bits (rows of any multiple of 8)."""
    w = _spread(shape, shape[1])
    arrays = W4A8.produce(w)
    assert _bits(_w4a8_pass(w, arrays)) == _bits(_numpy_moments(W4A8, w, arrays))


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("fmt", ["int4-g32", "int4-channel", "w4a8"])
def test_a_float32_source_is_passed_too(fmt: str) -> None:
    """A float32 source (``--source`` reads float32 weights as they are): the producers compute
    in float32 (compressed-tensors stores float32 scales and decodes without a bfloat16
    rounding), and the pass has the numpy path's bits."""
    desc = {"int4-g32": ct_int4.VARIANTS[32], "int4-channel": ct_int4.VARIANTS[None],
            "w4a8": W4A8}[fmt]
    w = _spread((3, 256), 9).astype(np.float32) * np.float32(1.0 + 2.0**-20)
    arrays = desc.produce(w)
    assert _bits(desc.reproduce_in_one_pass("m", w, arrays)) == _bits(
        _numpy_moments(desc, w, arrays))


@pytest.mark.usefixtures("with_numba")
@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 5), groups=st.integers(1, 12), group=st.sampled_from(
       ct_int4.GROUP_SIZES), seed=st.integers(0, 2**16), exponent=st.integers(-130, 120),
       constant=st.booleans())
def test_int4_pass_hypothesis(rows: int, groups: int, group: int | None, seed: int,
                              exponent: int, constant: bool) -> None:
    """Hypothesis over shapes, groups, magnitudes (subnormal to 2**120) and constant modules: the INT4 pass answers for every module the numpy path reproduces, with
    its bits, and None where a decoded value is not finite (the numpy path says so)."""
    desc = ct_int4.VARIANTS[group]
    w = _module(rows, (group or 32) * groups, seed, 2.0**exponent)
    if constant:
        w[...] = w[0, 0]
    arrays = desc.produce(w)
    got, want = _int4_pass(desc, w, arrays), _numpy_moments(desc, w, arrays)
    if want is None:
        assert got is None
    else:
        assert _bits(got) == _bits(want)


@pytest.mark.usefixtures("with_numba")
@settings(max_examples=20, deadline=None)
@given(words=st.integers(1, 160), extra=st.integers(1, 2), w4a8=st.booleans(),
       seed=st.integers(0, 2**16))
def test_passes_piece_boundaries_hypothesis(words: int, extra: int, w4a8: bool,
                                            seed: int) -> None:
    """Hypothesis over piece boundaries: modules just past one or two pieces (64 Ki elements)
    in rows of any multiple of 8 (32 for INT4 g32), so that a boundary falls at any column of
    a row: the passes' moments have the numpy path's bits."""
    cols = 8 * words if w4a8 else 32 * -(-words // 4)
    desc = W4A8 if w4a8 else ct_int4.DESCRIPTOR
    w = _spread((-(-PIECE * extra // cols) + 1, cols), seed)
    arrays = desc.produce(w)
    assert _bits(desc.reproduce_in_one_pass("m", w, arrays)) == _bits(
        _numpy_moments(desc, w, arrays))


@pytest.mark.usefixtures("with_numba")
@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 5), words=st.integers(1, 30), seed=st.integers(0, 2**16),
       exponent=st.integers(-130, 120), constant=st.booleans())
def test_w4a8_pass_hypothesis(rows: int, words: int, seed: int, exponent: int,
                              constant: bool) -> None:
    """The same for W4A8."""
    w = _module(rows, 8 * words, seed, 2.0**exponent)
    if constant:
        w[...] = w[0, 0]
    arrays = W4A8.produce(w)
    got, want = _w4a8_pass(w, arrays), _numpy_moments(W4A8, w, arrays)
    if want is None:
        assert got is None
    else:
        assert _bits(got) == _bits(want)


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("fmt", ["int4", "w4a8"])
def test_passes_hand_an_overflowing_decode_to_the_numpy_path(fmt: str) -> None:
    """A group holding bfloat16's largest negative value decodes to -8 × its scale, beyond
    float32 (an infinite error): the numpy path has no statistic (None) and the pass answers
    None, so the numpy path reports it; the row below it alone is answered."""
    w = _module(2, 64, seed=5)
    w[1, 7] = -ml_dtypes.finfo(BF16).max
    desc = ct_int4.DESCRIPTOR if fmt == "int4" else W4A8
    arrays = desc.produce(w)
    assert _numpy_moments(desc, w, arrays) is None
    assert desc.reproduce_in_one_pass("m", w, arrays) is None
    alone = desc.produce(w[:1])
    assert desc.reproduce_in_one_pass("m", w[:1], alone) is not None


def _plant(arrays: dict[str, Any], name: str, index: tuple[int, ...], flip: int) -> None:
    raw = arrays[name].copy()
    raw.view(np.uint8 if raw.dtype.itemsize == 1 else f"u{raw.dtype.itemsize}")[index] ^= flip
    arrays[name] = raw


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("plant", ["low", "high", "scale", "shape", "nan", "last", "f16",
                                   "f32"])
@pytest.mark.parametrize("group", [32, None])
def test_int4_pass_hands_anything_else_to_the_numpy_path(plant: str, group: int | None
                                                         ) -> None:
    """A nibble that differs (the first or the last of a word), a scale, ``weight_shape``,
    a NaN in the source, the very last word, scales stored in another dtype: the pass answers
    None (the numpy path then says where); the unplanted module is answered."""
    desc = ct_int4.VARIANTS[group]
    w = _module(4, 96, seed=1)
    arrays = desc.produce(w)
    assert _int4_pass(desc, w, arrays) is not None
    if plant == "low":
        _plant(arrays, "weight_packed", (2, 5), 0x1)
    elif plant == "high":
        _plant(arrays, "weight_packed", (2, 5), 0x1 << 28)
    elif plant == "scale":
        _plant(arrays, "weight_scale", (1, -1), 0x1)
    elif plant == "shape":
        arrays["weight_shape"] = np.array([4, 95], dtype=np.int64)
    elif plant == "nan":
        w[0, 40] = np.nan
    elif plant == "last":
        _plant(arrays, "weight_packed", (-1, -1), 0x1 << 31)
    else:
        arrays["weight_scale"] = arrays["weight_scale"].astype(plant.replace("f", "float"))
    assert _int4_pass(desc, w, arrays) is None


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("plant", ["low", "high", "s1", "s1-zero", "s1-shape", "s2", "s2-last",
                                   "nan", "last"])
def test_w4a8_pass_hands_anything_else_to_the_numpy_path(plant: str) -> None:
    """A nibble, the per-tensor scale (one bit, 0, or stored as ``[1]`` where the producer
    writes ``[]``), a row scale (the first row's or the last's), a NaN in the source, the very
    last word: None; the unplanted module is answered."""
    w = _module(4, 96, seed=1)
    arrays = W4A8.produce(w)
    assert _w4a8_pass(w, arrays) is not None
    if plant in ("low", "high", "last"):
        where = (-1, -1) if plant == "last" else (2, 5)
        _plant(arrays, "weight", where, 0x1 << (28 if plant == "high" else 0))
    elif plant == "s1":
        _plant(arrays, "weight_scale", (), 0x1)
    elif plant == "s1-zero":
        arrays["weight_scale"] = np.zeros((), np.float32)
    elif plant == "s1-shape":
        arrays["weight_scale"] = arrays["weight_scale"].reshape(1)
    elif plant in ("s2", "s2-last"):
        _plant(arrays, "weight_scale_2", (0 if plant == "s2" else -1,), 0x1)
    else:
        w[3, 90] = np.nan
    assert _w4a8_pass(w, arrays) is None


def test_passes_decline_inputs_outside_them() -> None:
    """float16 source, a row that is not a multiple of 8 or of the group, mismatched shapes,
    an unknown profile or consumer: None (the numpy path runs), with or without numba."""
    w = _module(2, 64, seed=2)
    arrays = ct_int4.DESCRIPTOR.produce(w)
    packed, scales = arrays["weight_packed"], arrays["weight_scale"]
    run = compiled.reproduce_int4
    assert run(w.astype(np.float16), packed, scales, 32, "compressed-tensors", None) is None
    assert run(w[:, :60], packed, scales, 32, "compressed-tensors", None) is None
    assert run(w[:1], packed, scales, 32, "compressed-tensors", None) is None
    assert run(w, packed, scales, 48, "compressed-tensors", None) is None
    assert run(w, packed, scales, 32, "nvfp4", None) is None
    tensors = W4A8.produce(w)
    args = (tensors["weight"], tensors["weight_scale"], tensors["weight_scale_2"])
    assert compiled.reproduce_w4a8(w, *args, "quark", "sglang") is None
    assert compiled.reproduce_w4a8(w, *args, "nvfp4", "vllm") is None
    assert compiled.reproduce_w4a8(w[:, :60], *args, "quark", "vllm") is None


# -- the report, with and without numba ---------------------------------------------------------


FIXTURES = {"int4-g32": DATA / "producers" / "kimi-k2-int4-compressed-tensors",
            "int4-g128": DATA / "int4-groups" / "kimi-k2-int4-g128-compressed-tensors",
            "int4-channel": DATA / "int4-groups" / "kimi-k2-int4-channel-compressed-tensors",
            "w4a8": DATA / "producers" / "kimi-k2-w4a8-quark"}


def _untimed(value: Any) -> Any:
    """A JSON value without its ``seconds`` (the tasks' timings)."""
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def _report(folder: Path, numba: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[str, int]:
    """``validate --source``'s JSON report, timings removed, and how many modules the compiled
    pass answered."""
    monkeypatch.setenv(jit.NUMBA_VARIABLE, "1" if numba else "0")
    jit._load.cache_clear()
    answered: list[bool] = []
    real = reproduce._compiled_pass

    def spy(*args: Any) -> Any:
        out = real(*args)
        answered.append(out is not None)
        return out

    monkeypatch.setattr(reproduce, "_compiled_pass", spy)
    try:
        report = validate(folder, Options(workers=1, source=SOURCE))
        return json.dumps(_untimed(to_json(report)), sort_keys=True), sum(answered)
    finally:
        monkeypatch.undo()
        jit._load.cache_clear()


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("name", list(FIXTURES))
def test_reproduction_report_is_the_same_with_and_without_numba(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``validate --source`` on the producers' INT4 (groups 32 and 128, per channel) and W4A8
    fixtures from their BF16 source: every module answered by the compiled pass, and the JSON
    report (every finding, the reproduction block with its per-module errors) identical to
    the numpy path's."""
    with_pass, answered = _report(FIXTURES[name], True, monkeypatch)
    without, none = _report(FIXTURES[name], False, monkeypatch)
    assert with_pass == without and none == 0
    block = json.loads(with_pass)["reproduction"]
    assert block["modules_reproduced"] == block["modules_checked"] == answered > 0
