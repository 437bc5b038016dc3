"""The compiled passes (numba, ``mxformats[fast]``) under the harness the numpy fast paths are
checked with, and the one-pass MXFP4 reproduction against the numpy path, bit for bit; and
every path with numba turned off (``MXFORMATS_NUMBA=0``), as where it is not installed."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from conftest import requires
from hypothesis import given, settings
from hypothesis import strategies as st

from mxformats import fast
from mxformats.fast import histogram, jit
from mxformats.fast import reproduce as compiled_reproduce
from mxformats.fast.moments import PIECE, Moments
from mxformats.schemes import mx
from mxformats.testing import check_quantizer
from mxformats.validate import reproduce
from mxformats.validate.descriptors import quark_mxfp4
from mxformats.validate.files import load
from mxformats.validate.model import Options

QUARK = quark_mxfp4.DESCRIPTOR
PRODUCERS = Path(__file__).resolve().parent / "data" / "producers"


@pytest.fixture
def with_numba() -> None:
    """numba importable (locally a skip without it; under CI=true a failure)."""
    requires("numba")
    assert jit.compiled() is not None, jit.status()


@pytest.fixture
def numba_off(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(jit.NUMBA_VARIABLE, "0")
    jit._load.cache_clear()
    yield
    jit._load.cache_clear()  # decided again, with the environment restored


def _numpy_moments(w: Any, codes: Any, scales: Any) -> Moments | None:
    d = QUARK.dequantize({"weight": codes, "weight_scale": scales}, w.shape[-1])
    return Moments.of(np.asarray(d), w)


def _bits(m: Moments | None) -> Any:
    assert m is not None
    sums = (m.error_squares, m.source_squares, m.cross, m.weight_spread, m.source_spread)
    return [*np.array(sums).view(np.uint64).tolist(), m.source_varies, m.weight_varies]


# -- the compiled block quantizer, under the harness ------------------------------------------


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("profile", compiled_reproduce.PROFILES)
@pytest.mark.parametrize("axis", [-1, 0])
def test_compiled_quantizer_harness(profile: str, axis: int) -> None:
    """Every E2M1 code under every scale byte, special blocks, ties, Hypothesis batches: the
    compiled block quantizer's bytes are the reference's (BF16 input, which it computes)."""
    check_quantizer(compiled_reproduce.quantize_mx, profile=profile, axis=axis,
                    dtypes=("bfloat16",)).raise_if_failed()


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("length", [2, 30])
def test_compiled_quantizer_quark_short_last_block_harness(length: int) -> None:
    """Every block a short last block (Quark pads it with zeros), as for the numpy path."""

    def cut(quantize: Any) -> Any:
        def call(x: Any, *args: Any, **kwargs: Any) -> Any:
            return quantize(np.ascontiguousarray(x[:, :length]), *args, **kwargs)
        return call

    check_quantizer(cut(compiled_reproduce.quantize_mx), reference=cut(mx.quantize_mx),
                    profile="quark", dtypes=("bfloat16",),
                    sources=("sweep", "boundary", "hypothesis"),
                    max_examples=25).raise_if_failed()


@pytest.mark.usefixtures("numba_off")
def test_without_numba_the_numpy_paths_run() -> None:
    """numba turned off (as absent, or refusing this numpy): the quantizer is the numpy fast
    path's (still the reference's bytes), the compiled pass answers None, status says why."""
    assert jit.compiled() is None
    assert jit.status().startswith("compiled passes off: turned off")
    check_quantizer(compiled_reproduce.quantize_mx, profile="quark", dtypes=("bfloat16",),
                    sources=("boundary",)).raise_if_failed()
    w = np.ones((2, 64), ml_dtypes.bfloat16)
    q = fast.quantize_mx(w, profile="quark")
    assert compiled_reproduce.reproduce_mxfp4(w, q.codes, q.scales, "quark", QUARK.consumer) \
        is None


def test_numba_refusing_to_import_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """numba raising ImportError at import (as it does for a numpy newer than it supports):
    no crash, the numpy paths, and the reason in :func:`jit.status`."""
    real = jit.importlib.import_module

    def refuse(name: str) -> Any:  # numba/__init__.py's _ensure_critical_deps, 0.68.1
        if name == "numba":
            raise ImportError("Numba needs NumPy 2.5 or less. Got NumPy 2.6.")
        return real(name)

    def broken(name: str) -> Any:  # a numpy API numba 0.68 uses, gone from a newer numpy
        if name == "numba":
            raise AttributeError("module 'numpy' has no attribute 'long'")
        return real(name)

    monkeypatch.setattr(jit.importlib, "import_module", refuse)
    jit._load.cache_clear()
    try:
        assert jit.compiled() is None
        assert "numba is not importable (ImportError: Numba needs NumPy" in jit.status()
        monkeypatch.setattr(jit.importlib, "import_module", broken)
        jit._load.cache_clear()
        assert jit.compiled() is None  # any other failure at import: the same
        assert "numba is not importable (AttributeError: " in jit.status()
    finally:
        monkeypatch.undo()
        jit._load.cache_clear()


def test_import_mxformats_does_not_import_numba() -> None:
    """numba is imported on first use of a compiled pass, never by ``import mxformats`` (nor
    by the validator's modules)."""
    import subprocess

    code = ("import sys, mxformats, mxformats.fast, mxformats.validate.reproduce; "
            "assert 'numba' not in sys.modules, 'numba imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the one-pass reproduction against the numpy path ------------------------------------------


def _module(rows: int, cols: int, seed: int, scale: float = 0.02) -> Any:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, cols)) * scale).astype(ml_dtypes.bfloat16)


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("shape", [(1, 32), (3, 70), (2, 7168), (3, PIECE // 2 + 16),
                                   (PIECE // 64 + 1, 64), (5, 2)])
def test_pass_moments_are_the_numpy_paths(shape: tuple[int, int]) -> None:
    """The compiled pass's moments have the numpy path's bits: full and short last blocks,
    rows that are not a multiple of the lanes, modules crossing piece boundaries mid-row.
    Magnitudes spread over 24 binades, so that a term summed in another lane or piece
    changes the bits."""
    rng = np.random.default_rng(shape[1])
    w = (rng.standard_normal(shape) * np.exp2(rng.integers(-20, 4, shape))).astype(
        ml_dtypes.bfloat16)
    q = fast.quantize_mx(w, profile="quark")
    got = compiled_reproduce.reproduce_mxfp4(w, q.codes, q.scales, "quark", QUARK.consumer)
    assert _bits(got) == _bits(_numpy_moments(w, q.codes, q.scales))


@pytest.mark.usefixtures("with_numba")
@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 6), half=st.integers(1, 120), seed=st.integers(0, 2**16),
       exponent=st.integers(-30, 30), constant=st.booleans())
def test_pass_moments_hypothesis(rows: int, half: int, seed: int, exponent: int,
                                 constant: bool) -> None:
    """Hypothesis over shapes (every even row length, short last blocks), magnitudes and
    constant modules: the pass answers for every module the numpy path reproduces, with its
    bits."""
    w = _module(rows, 2 * half, seed, 2.0**exponent)
    if constant:
        w[...] = w[0, 0]
    q = fast.quantize_mx(w, profile="quark")
    got = compiled_reproduce.reproduce_mxfp4(w, q.codes, q.scales, "quark", QUARK.consumer)
    want = _numpy_moments(w, q.codes, q.scales)
    if want is None:  # a product overflowing float32 (scale 2**127): the numpy path says so
        assert got is None
    else:
        assert _bits(got) == _bits(want)


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("plant", ["code", "code-high", "scale", "scale-ff", "nan", "last"])
def test_pass_hands_anything_else_to_the_numpy_path(plant: str) -> None:
    """A code nibble (low or high) or a scale byte that differs, a 0xFF scale, a NaN in the
    source, a difference in the very last byte: the pass answers None (the numpy path then
    says where); the unplanted module is answered."""
    w = _module(4, 96, seed=1)
    q = fast.quantize_mx(w, profile="quark")
    codes, scales = q.codes.copy(), q.scales.copy()
    assert compiled_reproduce.reproduce_mxfp4(w, codes, scales, "quark", QUARK.consumer)
    if plant == "code":
        codes[2, 5] ^= 0x01
    elif plant == "code-high":
        codes[2, 5] ^= 0x10
    elif plant == "scale":
        scales[1, 2] += 1
    elif plant == "scale-ff":
        scales[3, 0] = 0xFF
    elif plant == "nan":
        w[0, 40] = np.nan
    else:
        codes[-1, -1] ^= 0x80
    assert compiled_reproduce.reproduce_mxfp4(w, codes, scales, "quark", QUARK.consumer) is None


def test_pass_declines_inputs_outside_it() -> None:
    """float32 source, an odd row, OCP with a short block, mismatched shapes, an unknown
    profile: None (the numpy path runs), whether or not numba is installed."""
    w = _module(2, 64, seed=2)
    q = fast.quantize_mx(w, profile="quark")
    args = (q.codes, q.scales, "quark", QUARK.consumer)
    assert compiled_reproduce.reproduce_mxfp4(w.astype(np.float32), *args) is None
    assert compiled_reproduce.reproduce_mxfp4(w[:, :63], *args) is None
    assert compiled_reproduce.reproduce_mxfp4(w[:1], *args) is None
    assert compiled_reproduce.reproduce_mxfp4(w, q.codes, q.scales, "nvfp4", None) is None
    short = _module(2, 70, seed=3)
    qs = fast.quantize_mx(short, profile="quark")
    assert compiled_reproduce.reproduce_mxfp4(short, qs.codes, qs.scales, "ocp", "ocp") is None


def _summary(numba: bool, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv(jit.NUMBA_VARIABLE, "1" if numba else "0")
    jit._load.cache_clear()
    try:
        result = load(PRODUCERS / "kimi-k2-mxfp4-quark", Options())
        assert result.ckpt is not None
        findings = list(reproduce.run(result.ckpt, Options(source=PRODUCERS / "src-bf16")))
        return [(f.check.id, f.message, f.extra) for f in findings]
    finally:
        jit._load.cache_clear()


@pytest.mark.usefixtures("with_numba")
def test_reproduction_report_is_the_same_with_and_without_numba(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Quark's own MXFP4 fixture from its BF16 source: every finding and the reproduction
    block (per-module errors included) identical whether the compiled pass or the numpy path
    computed each module."""
    with_pass = _summary(True, monkeypatch)
    assert with_pass == _summary(False, monkeypatch)
    block = next(extra["reproduction"] for check, _, extra in with_pass
                 if check == "REPRO_SUMMARY")
    assert block["modules_reproduced"] == block["modules_checked"] == 27


# -- the byte histogram of the scale checks ---------------------------------------------------


@pytest.mark.parametrize("path", ["compiled", "numpy"])
@pytest.mark.parametrize("size", [0, 1, 3, 4, 5, 256 * 7 + 3])
def test_byte_counts_are_numpys_bincount(request: pytest.FixtureRequest, path: str,
                                         size: int) -> None:
    """Every byte value, at lengths around the four partial counters, counted as
    ``np.bincount`` counts them, compiled or not; other item sizes refused."""
    request.getfixturevalue("with_numba" if path == "compiled" else "numba_off")
    data = (np.arange(size, dtype=np.int64) * 37 % 256).astype(np.uint8)
    data[size // 2:] = 255  # a run of one value, as in a scale tensor
    for a in (data, data.view(ml_dtypes.float8_e4m3fn), data.reshape(1, -1)[:, ::-1]):
        got = histogram.byte_counts(a)
        assert got.dtype == np.int64 and got.shape == (256,)
        assert got.tolist() == np.bincount(data, minlength=256).tolist()
    with pytest.raises(ValueError, match="1-byte items only"):
        histogram.byte_counts(np.zeros(4, np.uint16))


def test_counted_once_counts_the_same_bytes_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside :func:`histogram.counted_once` the same memory and length is counted once (a
    view of it too), other bytes (a copy, a shorter slice) each once; a caller that writes to
    the counts it got does not change the next answer; outside the block every call counts."""
    calls: list[int] = []

    def count_bytes(data: np.ndarray, counts: np.ndarray) -> None:
        calls.append(data.size)
        counts += np.bincount(data, minlength=256)

    monkeypatch.setattr(histogram.jit, "compiled",
                        lambda name="compiled": types.SimpleNamespace(count_bytes=count_bytes))
    data = (np.arange(1000) % 7).astype(np.uint8)
    want = np.bincount(data, minlength=256).tolist()
    with histogram.counted_once():
        first = histogram.byte_counts(data)
        first[:] = -1
        for a in (data, data.view(ml_dtypes.float8_e8m0fnu), data.reshape(10, 100)):
            assert histogram.byte_counts(a).tolist() == want
        assert len(calls) == 1
        histogram.byte_counts(data.copy())
        histogram.byte_counts(data[:999])
        assert calls == [1000, 1000, 999]
    histogram.byte_counts(data)
    histogram.byte_counts(data)
    assert calls == [1000, 1000, 999, 1000, 1000]


@pytest.mark.parametrize("path", ["compiled", "numpy"])
def test_first_byte_in_is_the_first_member(request: pytest.FixtureRequest, path: str) -> None:
    """The flat index of the first byte whose value is a member, at the first and the last
    element and in between, -1 when none is, compiled or not (a planted mutant's off-by-one
    or a scan that stops early shows); other item sizes and member tables refused."""
    request.getfixturevalue("with_numba" if path == "compiled" else "numba_off")
    data = (np.arange(1000, dtype=np.int64) * 37 % 200).astype(np.uint8)  # bytes 0..199
    data[-1] = 250
    for members, want in (([0], 0), ([37], 1), ([250], 999), ([251], -1), ([], -1),
                          ([36, 199], int(np.flatnonzero((data == 36) | (data == 199))[0]))):
        table = np.zeros(256, bool)
        table[members] = True
        for a in (data, data.view(ml_dtypes.float8_e8m0fnu), data.reshape(10, 100)):
            assert histogram.first_byte_in(a, table) == want, (members, a.dtype)
    assert histogram.first_byte_in(data[:0], np.ones(256, bool)) == -1
    with pytest.raises(ValueError, match="1-byte items only"):
        histogram.first_byte_in(np.zeros(4, np.uint16), np.ones(256, bool))
    with pytest.raises(ValueError, match="256 bools"):
        histogram.first_byte_in(data, np.ones(255, bool))
