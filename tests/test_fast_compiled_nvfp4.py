"""The compiled NVFP4 passes (numba, ``mxformats[fast]``) under the harness the numpy fast paths
are checked with, and the one-pass NVFP4 reproduction (ModelOpt, compressed-tensors) against
the numpy path, bit for bit; and every path with numba turned off (``MXFORMATS_NUMBA=0``), as
where it is not installed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fast_compiled import _bits, numba_off, with_numba  # noqa: F401 (fixtures)

from mxformats import fast
from mxformats.fast import jit
from mxformats.fast import reproduce_nvfp4 as compiled
from mxformats.fast.moments import PIECE, Moments
from mxformats.fast.passes import CompiledPasses
from mxformats.schemes import nvfp4
from mxformats.testing import check_quantizer
from mxformats.validate import reproduce
from mxformats.validate.files import load
from mxformats.validate.model import Options

BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
PRODUCERS = sorted(nvfp4.PRODUCERS)
#: every (producer, consumer reading its global form) pair
PAIRS = [(p, c) for p in PRODUCERS for c in sorted(nvfp4.CONSUMERS)
         if nvfp4.CONSUMERS[c].global_form == nvfp4.PRODUCERS[p].global_form]
FIXTURES = Path(__file__).resolve().parent / "data" / "producers"


def _same(got: nvfp4.NVFP4Array, want: nvfp4.NVFP4Array) -> None:
    assert got.codes.tobytes() == want.codes.tobytes()
    assert got.scales.tobytes() == want.scales.tobytes()
    assert got.global_scale.tobytes() == want.global_scale.tobytes()
    assert (got.codes.shape, got.scales.shape, got.global_scale.shape, got.axis) == (
        want.codes.shape, want.scales.shape, want.global_scale.shape, want.axis)


# -- the compiled quantizer, under the harness -------------------------------------------------


# -- the arithmetic codecs, exhaustively against the reference --------------------------------


def _kernel_map(name: str, out: Any) -> Any:
    """``compiled_nvfp4.<name>`` (an inline njit scalar function) mapped over an array."""
    import numba

    from mxformats.fast import compiled_nvfp4

    scalar = getattr(compiled_nvfp4, name)

    @numba.njit
    def apply(values: Any, result: Any) -> None:
        for i in range(values.shape[0]):
            result[i] = scalar(values[i])

    def call(values: Any) -> Any:
        result = np.empty(values.shape, dtype=out)
        apply(values, result)
        return result

    return call


def _float32_classes() -> Any:
    """Every float32 sign/exponent/top-3-mantissa-bit class, each with low 20 bits at the
    rounding edges (0, 1, half, half ± 1, all ones) and one seeded random pattern; every
    bfloat16 pattern; a million seeded random float32 patterns."""
    classes = np.arange(1 << 12, dtype=np.uint32) << np.uint32(20)
    rng = np.random.default_rng(27)
    lows = np.array([0, 1, 0x7FFFF, 0x80000, 0x80001, 0xFFFFF, 0x3FFFF, 0x40000, 0x40001],
                    dtype=np.uint32)
    edges = (classes[:, None] | lows[None, :]).reshape(-1)
    randoms = rng.integers(0, 1 << 32, size=1 << 20, dtype=np.uint64).astype(np.uint32)
    bf16 = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
    return np.concatenate([edges, classes | rng.integers(0, 1 << 20, size=classes.size,
                                                         dtype=np.uint32), bf16, randoms])


@pytest.mark.usefixtures("with_numba")
def test_e2m1_code_arithmetic_is_the_references_on_every_class() -> None:
    """The kernels' E2M1 encoding (integer carry and float32 addition, no table) against
    :func:`~mxformats.schemes.nvfp4.e2m1_codes` on :func:`_float32_classes`: NaN, ±Inf,
    ±0, subnormals, every tie and its neighbours, values past 6."""
    q = _float32_classes().view(np.float32)
    with np.errstate(invalid="ignore"):
        want = nvfp4.e2m1_codes(q)
    assert _kernel_map("_e2m1_code", np.uint8)(q).tobytes() == want.tobytes()


@pytest.mark.usefixtures("with_numba")
def test_e4m3_code_arithmetic_is_the_references_on_0_to_448() -> None:
    """The kernels' E4M3 encoding of clamped block scales against
    :func:`~mxformats.schemes.nvfp4.e4m3_scale_codes` on every float32 class in ``[0, 448]``
    (ties between subnormals, at the subnormal/normal edge, up to 448) and every E4M3 value,
    midpoint and their float32 neighbours; the decoding of every code 0x00..0x7E."""
    bits = _float32_classes()
    values = bits.view(np.float32)
    finite = values[(values >= 0) & (values <= 448) & ~np.signbit(values)]  # no -0.0 comes
    grid = nvfp4.E4M3FN.decode(np.arange(0x7F, dtype=np.uint8), np.float64)
    points = np.concatenate([grid, (grid[:-1] + grid[1:]) / 2]).astype(np.float32)
    near = np.concatenate([points, np.nextafter(points, np.float32(0)),
                           np.nextafter(points, np.float32(448))])
    scales = np.concatenate([finite, near]).astype(np.float32)
    want = nvfp4.e4m3_scale_codes(scales.astype(np.float64))
    assert _kernel_map("_e4m3_code", np.uint8)(scales).tobytes() == want.tobytes()
    codes = np.arange(0x7F, dtype=np.uint8)
    assert _kernel_map("_e4m3_value", np.float32)(codes).tobytes() == grid.astype(
        np.float32).tobytes()
    e2m1 = np.arange(16, dtype=np.uint8)
    assert _kernel_map("_e2m1_value", np.float32)(e2m1).tobytes() == \
        nvfp4.E2M1.values.astype(np.float32).tobytes()


def _as_mx(quantize: Any, producer: str) -> Any:
    """NVFP4 quantizer ``quantize`` of profile ``producer`` in the harness's MX calling
    convention: the packed codes, and per block its E4M3 byte followed by the global scale's
    four bytes (the global scale is the batch's: a wrong one shows in every block)."""

    def call(x: Any, elem: Any, *, block_size: int, axis: int, profile: str) -> Any:
        r = quantize(x, axis=axis, profile=producer)
        s = r.scales if axis == -1 else r.scales.T
        g = np.broadcast_to(r.global_scale.reshape(1).view(np.uint8), (s.shape[0], 4))
        both = np.concatenate([s, g], axis=1)
        return r.packed(), (both if axis == -1 else both.T)

    call.__qualname__ = f"{quantize.__module__}.{quantize.__qualname__}[{producer}]"
    return call


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("producer", PRODUCERS)
@pytest.mark.parametrize("axis", [-1, 0])
def test_compiled_quantizer_harness(producer: str, axis: int) -> None:
    """The harness's sweep, boundary blocks (every E2M1 tie and scale boundary, special
    blocks: zeros, -0.0, subnormals, NaN/Inf refused as the reference refuses them) and
    Hypothesis batches, in blocks of 16: the compiled quantizer's bytes are the reference's
    (BF16 input, which it computes), the global scale included."""
    check_quantizer(_as_mx(compiled.quantize_nvfp4, producer), block_size=16, axis=axis,
                    reference=_as_mx(nvfp4.quantize_nvfp4, producer), dtypes=("bfloat16",),
                    sources=("sweep", "boundary", "hypothesis")).raise_if_failed()


def _all_positive_bf16() -> Any:
    return np.arange(0x0001, 0x7F80, dtype=np.uint16).view(BF16)


#: magnitudes that land on and between the E2M1 values when scaled by block maximum / 6
_GRID = (6, 5, 4, 3.5, 3, 2.5, 2, 1.75, 1.5, 1.25, 1, 0.75, 0.5, 0.25, 0.125)


def _grid_blocks(leaders: Any) -> Any:
    """Two blocks per leader (its maximum), of E2M1 grid points and midpoints of both signs
    scaled by leader / 6, and their negation; some halves zero or -0.0."""
    signs = np.where(np.arange(15) % 2, -1.0, 1.0)
    x = (leaders.astype(np.float64)[:, None] * np.asarray(_GRID) / 6 * signs).astype(BF16)
    x = np.concatenate([leaders[:, None], x], axis=1)
    x[::7, 1:8] = 0
    x[::11, 8:] = -0.0
    return np.concatenate([x, -x])


def _pairs(r: nvfp4.NVFP4Array) -> set[tuple[int, int]]:
    """The (scale byte, E2M1 code) pairs of ``r`` (blocks along the last axis)."""
    return {(int(s), int(c)) for s, row in zip(r.scales[:, 0], r.codes, strict=True)
            for c in row}


#: every E4M3 scale byte a producer writes for a non-zero block (0x01 .. 0x7E) times every
#: E2M1 code
EVERY_PAIR = 126 * 16


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("producer", PRODUCERS)
@pytest.mark.parametrize("global_amax", [None, 0.01226806640625, 2.0**-60, 3.0e4])
def test_every_code_under_every_scale_byte(producer: str, global_amax: float | None) -> None:
    """Every positive bfloat16 value leading a block (:func:`_grid_blocks`) under fixed global
    scales: every E4M3 scale byte the producer writes (subnormal, clamped at 2**-9 or 448,
    underflowing to the zero-block scale) with every E2M1 code under it (counted, so the sweep
    cannot go hollow)."""
    x = _grid_blocks(_all_positive_bf16())
    got = compiled.quantize_nvfp4(x, profile=producer, global_amax=global_amax)
    _same(got, nvfp4.quantize_nvfp4(x, profile=producer, global_amax=global_amax))
    if global_amax is not None:
        assert len(_pairs(got)) == EVERY_PAIR


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize(("producer", "consumer"), PAIRS)
def test_pass_decodes_every_code_under_every_scale_byte(producer: str, consumer: str) -> None:
    """The pass over a module whose own maximum (1.0) gives its global scale and whose blocks
    (every bfloat16 leader from 2**-20 to 1) hold every E2M1 code under every E4M3 scale
    byte: it answers, with the numpy path's moments bits."""
    leaders = _all_positive_bf16()
    leaders = leaders[(leaders.astype(np.float64) >= 2.0**-20)
                      & (leaders.astype(np.float64) <= 1.0)]
    w = _grid_blocks(leaders)
    assert len(_pairs(nvfp4.quantize_nvfp4(w, profile=producer))) == EVERY_PAIR
    stored = _stored(w, producer)
    assert _bits(_pass(w, stored, producer, consumer)) == _bits(
        _numpy_moments(w, stored, consumer))


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("producer", PRODUCERS)
@pytest.mark.parametrize("block_amax", [1.0, 3.0517578125e-05, 0.5625, 448.0 * 6])
def test_every_bfloat16_element_in_a_block(producer: str, block_amax: float) -> None:
    """Every bfloat16 value of magnitude <= the block maximum (and its negation), each in a
    block led by that maximum: every quotient class, every E2M1 tie, the rounding to zero and
    its sign."""
    positive = _all_positive_bf16()
    elements = positive[positive.astype(np.float64) <= block_amax]
    elements = np.concatenate([elements, -elements, np.array([0.0, -0.0], dtype=BF16)])
    pad = -elements.size % 15
    elements = np.concatenate([elements, np.zeros(pad, dtype=BF16)]).reshape(-1, 15)
    x = np.concatenate([np.full((len(elements), 1), block_amax, dtype=BF16), elements], axis=1)
    _same(compiled.quantize_nvfp4(x, profile=producer), nvfp4.quantize_nvfp4(x, profile=producer))


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("producer", PRODUCERS)
def test_special_tensors_and_edge_tiles(producer: str) -> None:
    """All-zero tensors (ModelOpt's NaN scales come from the numpy path), -0.0, a single
    block, a tensor of one repeated value, every axis of a 3-D tensor, tensors the pass does
    not compute (float32, a length not a multiple of 16, NaN: the numpy path's bytes or
    error)."""
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((16, 32, 48)) * 0.01).astype(BF16)
    cases: list[tuple[Any, int]] = [
        (np.zeros((2, 32), BF16), -1), (np.full((2, 32), -0.0, BF16), -1),
        (np.full((1, 16), 3.5, BF16), -1), (w, 0), (w, 1), (w, 2), (w.astype(np.float32), -1)]
    for x, axis in cases:
        _same(compiled.quantize_nvfp4(x, axis=axis, profile=producer),
              nvfp4.quantize_nvfp4(x, axis=axis, profile=producer))
    for bad in (w[..., :40], np.where(np.arange(48) == 7, np.nan, w).astype(BF16)):
        with pytest.raises(ValueError):
            compiled.quantize_nvfp4(bad, profile=producer)


# -- the one-pass reproduction against the numpy path ------------------------------------------


def _module(rows: int, cols: int, seed: int, scale: float = 0.02) -> Any:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, cols)) * scale).astype(BF16)


def _stored(w: Any, producer: str, global_amax: float | None = None) -> dict[str, Any]:
    r = nvfp4.quantize_nvfp4(w, profile=producer, global_amax=global_amax)
    return {"packed": r.packed(), "scales": r.scales.view(E4M3),
            "global_scale": r.global_scale}


def _pass(w: Any, stored: dict[str, Any], producer: str, consumer: str) -> Moments | None:
    return compiled.reproduce_nvfp4(w, stored["packed"], stored["scales"],
                                    stored["global_scale"], producer, consumer)


def _numpy_moments(w: Any, stored: dict[str, Any], consumer: str) -> Moments | None:
    d = fast.dequantize_nvfp4(stored["packed"], stored["scales"].view(np.uint8),
                              stored["global_scale"], packed=True, profile=consumer)
    return Moments.of(np.asarray(d), w)


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize(("producer", "consumer"), PAIRS)
@pytest.mark.parametrize("shape", [(1, 16), (3, 48), (2, 7168), (3, PIECE // 2 + 16),
                                   (PIECE // 32 + 1, 32), (5, 16)])
def test_pass_moments_are_the_numpy_paths(producer: str, consumer: str,
                                          shape: tuple[int, int]) -> None:
    """The compiled pass's moments have the numpy path's bits for every consumer of each
    producer: single blocks, rows that are not a multiple of the lanes, modules crossing
    piece boundaries mid-row. Magnitudes spread over 24 binades, so that a term summed in
    another lane or piece changes the bits."""
    rng = np.random.default_rng(shape[1])
    w = (rng.standard_normal(shape) * np.exp2(rng.integers(-20, 4, shape))).astype(BF16)
    stored = _stored(w, producer)
    assert _bits(_pass(w, stored, producer, consumer)) == _bits(
        _numpy_moments(w, stored, consumer))


@pytest.mark.usefixtures("with_numba")
@settings(max_examples=60, deadline=None, derandomize=True)
@given(rows=st.integers(1, 6), blocks=st.integers(1, 40), seed=st.integers(0, 2**16),
       exponent=st.integers(-100, 100), constant=st.booleans(),
       pair=st.sampled_from(PAIRS))
def test_pass_moments_hypothesis(rows: int, blocks: int, seed: int, exponent: int,
                                 constant: bool, pair: tuple[str, str]) -> None:
    """Hypothesis over shapes, magnitudes (tiny global scales, clamped and underflowing block
    scales), constant modules and every producer/consumer pair: the pass answers for every
    module the numpy path reproduces alone, with its bits."""
    producer, consumer = pair
    w = _module(rows, 16 * blocks, seed, 2.0**exponent)
    if constant:
        w[...] = w[0, 0]
    stored = _stored(w, producer)
    got = _pass(w, stored, producer, consumer)
    with np.errstate(all="ignore"):
        want = _numpy_moments(w, stored, consumer)
    if want is None or not np.any(w.astype(np.float32)):  # NaN decoded (ModelOpt all zero)
        assert got is None
    else:
        assert _bits(got) == _bits(want)


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("producer", PRODUCERS)
@pytest.mark.parametrize("plant", ["code", "code-high", "scale", "global", "global-shape",
                                   "nan", "last", "sibling"])
def test_pass_hands_anything_else_to_the_numpy_path(producer: str, plant: str) -> None:
    """A code nibble (low or high) or a block scale byte that differs, a global scale one ulp
    off or of another shape, a NaN in the source, a difference in the very last byte, and a
    module quantized with its fused sibling's larger amax (every byte consistent with that
    global scale, which this module's own amax does not give): the pass answers None (the
    numpy path then says where, or reads the sibling); the unplanted module is answered."""
    w = _module(4, 96, seed=1)
    consumer = nvfp4.DEFAULT_CONSUMER[producer]
    stored = {k: v.copy() for k, v in _stored(w, producer).items()}
    assert _pass(w, stored, producer, consumer) is not None
    raw = stored["scales"].view(np.uint8)
    if plant == "code":
        stored["packed"][2, 5] ^= 0x01
    elif plant == "code-high":
        stored["packed"][2, 5] ^= 0x10
    elif plant == "scale":
        raw[1, 2] += 1
    elif plant == "global":
        stored["global_scale"] = np.nextafter(stored["global_scale"], np.float32(np.inf))
    elif plant == "global-shape":
        stored["global_scale"] = stored["global_scale"].reshape(-1)[:1].reshape(
            (1,) if stored["global_scale"].ndim == 0 else ())
    elif plant == "nan":
        w[0, 40] = np.nan
    elif plant == "last":
        stored["packed"][-1, -1] ^= 0x80
    else:
        amax = float(np.abs(w.astype(np.float32)).max()) * 2
        stored = _stored(w, producer, global_amax=amax)
    assert _pass(w, stored, producer, consumer) is None


def test_pass_declines_inputs_outside_it() -> None:
    """float32 source, a length not a multiple of 16, mismatched shapes, block scales as
    uint8, a consumer of the other global form, an unknown profile or consumer: None (the
    numpy path runs), whether or not numba is installed."""
    w = _module(2, 64, seed=2)
    stored = _stored(w, "modelopt")
    args = (stored["packed"], stored["scales"], stored["global_scale"])
    assert compiled.reproduce_nvfp4(w.astype(np.float32), *args, "modelopt",
                                    "vllm-modelopt") is None
    assert compiled.reproduce_nvfp4(w[:, :56], *args, "modelopt", "vllm-modelopt") is None
    assert compiled.reproduce_nvfp4(w[:1], *args, "modelopt", "vllm-modelopt") is None
    assert compiled.reproduce_nvfp4(w, args[0], args[1].view(np.uint8), args[2], "modelopt",
                                    "vllm-modelopt") is None
    for producer, consumer in (("modelopt", "vllm-compressed-tensors"), ("mxfp4", None),
                               ("modelopt", None), ("modelopt", "vllm")):
        assert compiled.reproduce_nvfp4(w, *args, producer, consumer) is None


@pytest.mark.usefixtures("numba_off")
def test_without_numba_the_numpy_paths_run() -> None:
    """numba turned off (as absent, or refusing this numpy): the quantizer is the numpy fast
    path's (still the reference's bytes, under the harness's boundary blocks), the compiled
    pass answers None."""
    assert jit.compiled(compiled.KERNELS) is None
    w = _module(3, 64, seed=4)
    for producer in PRODUCERS:
        check_quantizer(_as_mx(compiled.quantize_nvfp4, producer), block_size=16,
                        reference=_as_mx(nvfp4.quantize_nvfp4, producer), dtypes=("bfloat16",),
                        sources=("boundary",)).raise_if_failed()
        _same(compiled.quantize_nvfp4(w, profile=producer),
              nvfp4.quantize_nvfp4(w, profile=producer))
        assert _pass(w, _stored(w, producer), producer,
                     nvfp4.DEFAULT_CONSUMER[producer]) is None


# -- the report, with and without numba --------------------------------------------------------


def _report(fixture: str, numba: bool, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv(jit.NUMBA_VARIABLE, "1" if numba else "0")
    jit._load.cache_clear()
    try:
        result = load(FIXTURES / fixture, Options())
        assert result.ckpt is not None
        findings = list(reproduce.run(result.ckpt, Options(source=FIXTURES / "src-bf16")))
        return [(f.check.id, f.message, f.extra) for f in findings]
    finally:
        jit._load.cache_clear()


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("fixture", ["kimi-k2-nvfp4-modelopt",
                                     "kimi-k2-nvfp4-compressed-tensors"])
def test_reproduction_report_is_the_same_with_and_without_numba(
        fixture: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each NVFP4 producer's own fixture from its BF16 source: every finding and the
    reproduction block (per-module errors and the tensor count included: the activation
    scale is not a produced tensor) identical whether the compiled pass or the numpy path
    computed each module; the modules calibrated with their fused sibling's amax go to the
    numpy path, the others through the pass."""
    answered: list[bool] = []
    real = compiled.reproduce_nvfp4

    def spy(*args: Any) -> Moments | None:
        got = real(*args)
        answered.append(got is not None)
        return got

    monkeypatch.setattr(CompiledPasses, "reproduce_nvfp4", staticmethod(spy))
    with_pass = _report(fixture, True, monkeypatch)
    assert (sum(answered), len(answered)) == (16, 24)
    assert with_pass == _report(fixture, False, monkeypatch)
    block = next(extra["reproduction"] for check, _, extra in with_pass
                 if check == "REPRO_SUMMARY")
    assert (block["modules_reproduced"], block["tensors"], block["identical"]) == (24, 72, 72)
