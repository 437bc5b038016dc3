"""The full scan's compiled pass (:mod:`mxformats.fast.scan`, numba) against the numpy code it
stands in for: the kernels on planted inputs (every code value at every position, NaN codes,
edge tiles, Hypothesis over shapes), the per-format statistics both ways, the checksum's
definition, and every producer fixture's ``--level full`` report byte for byte with and
without numba (``MXFORMATS_NUMBA=0``)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from conftest import requires
from hypothesis import given, settings
from hypothesis import strategies as st

from mxformats.fast import jit
from mxformats.fast import scan as fast_scan
from mxformats.validate import stats
from mxformats.validate.descriptors.fp8_block import tile_flags
from mxformats.validate.findings import Level
from mxformats.validate.model import Options
from mxformats.validate.report import dump_json
from mxformats.validate.runner import validate

PRODUCERS = Path(__file__).resolve().parent / "data" / "producers"
FIXTURES = sorted(p.name for p in PRODUCERS.iterdir()
                  if p.is_dir() and p.name.startswith("kimi-k2-"))

_CODES = np.arange(16)
#: The magnitude of each 4-bit code, decoded independently of the kernels: E2M1 by ml_dtypes
#: (ranked among E2M1's eight magnitudes), the integers by their definition.
_E2M1_RANK = np.searchsorted(
    np.unique(np.abs(_CODES.astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64))),
    np.abs(_CODES.astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64)))
MAGNITUDES = {
    "e2m1": (fast_scan.E2M1_CODES, _E2M1_RANK),
    "twos-complement": (fast_scan.TWOS_COMPLEMENT, np.abs(np.where(_CODES >= 8, _CODES - 16,
                                                                   _CODES))),
    "offset-binary": (fast_scan.OFFSET_BINARY, np.abs(_CODES - 8)),
}


def _toggle(numba: bool) -> None:
    jit._load.cache_clear()
    assert (jit.compiled() is not None) == numba, jit.status()


@pytest.fixture
def with_numba(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """numba importable and on, whatever the environment says (locally a skip without it;
    under CI=true a failure)."""
    requires("numba")
    monkeypatch.setenv(jit.NUMBA_VARIABLE, "1")
    _toggle(True)
    yield
    monkeypatch.undo()
    jit._load.cache_clear()


@pytest.fixture
def numba_off(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(jit.NUMBA_VARIABLE, "0")
    _toggle(False)
    yield
    monkeypatch.undo()
    jit._load.cache_clear()


def _both(monkeypatch: pytest.MonkeyPatch, compute: Any) -> tuple[Any, Any]:
    """``compute()`` with numba, then with it turned off (whatever the environment says)."""
    requires("numba")
    try:
        monkeypatch.setenv(jit.NUMBA_VARIABLE, "1")
        _toggle(True)
        compiled = compute()
        monkeypatch.setenv(jit.NUMBA_VARIABLE, "0")
        _toggle(False)
        return compiled, compute()
    finally:
        monkeypatch.undo()
        jit._load.cache_clear()


def _definition(data: bytes) -> int:
    """The checksum as :mod:`mxformats.fast.scan` defines it, in Python integers."""
    padded = data + bytes(-len(data) % 8)
    words = [int.from_bytes(padded[i:i + 8], "little") for i in range(0, len(padded), 8)]
    return sum(w * (2 * i + 1) for i, w in enumerate(words)) % (1 << 64)


def _peaks(rows: np.ndarray, unit: int, table: np.ndarray) -> np.ndarray:
    """The numpy answer: each byte's larger nibble magnitude, the largest per unit."""
    per_byte = np.maximum(table[rows & 0xF], table[rows >> 4]).astype(np.uint8)
    result: np.ndarray = per_byte.reshape(rows.shape[0], rows.shape[1] // unit, unit).max(
        axis=-1, initial=0)
    return result


def _check_nibbles(rows: np.ndarray, unit: int, name: str) -> None:
    magnitude, table = MAGNITUDES[name]
    got = fast_scan.scan_nibbles(rows, unit, magnitude, histogram=True)
    assert got is not None and got.counts is not None
    assert np.array_equal(got.peaks, _peaks(rows, unit, table)), (name, unit)
    assert np.array_equal(got.counts, np.bincount(rows.reshape(-1), minlength=256))
    nibbles = np.concatenate([rows.reshape(-1) & 0xF, rows.reshape(-1) >> 4])
    assert got.same == bool(nibbles.size and np.all(nibbles == nibbles[0]))
    assert got.checksum == _definition(rows.tobytes())


# -- the kernels on planted inputs ----------------------------------------------------------------


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("name", sorted(MAGNITUDES))
@pytest.mark.parametrize("unit", [8, 16, 24, 32])
def test_every_code_at_every_position(name: str, unit: int) -> None:
    """Each of the 16 codes, in the low and the high nibble, at every byte of a unit whose
    other codes are the smallest non-zero or zero: the unit's peak is that code's magnitude
    (units of 8 and 16 bytes go through words, 24 and 32 byte by byte)."""
    blocks = []
    for code in range(16):
        for high in (False, True):
            for pos in range(unit):
                for fill in (0x00, 0x11):
                    block = np.full(unit, fill, np.uint8)
                    block[pos] = (code << 4) | (fill & 0xF) if high else (fill & 0xF0) | code
                    blocks.append(block)
    _check_nibbles(np.stack(blocks), unit, name)
    _check_nibbles(np.stack(blocks).reshape(-1, 4 * unit), unit, name)  # several units a row


@pytest.mark.usefixtures("with_numba")
@pytest.mark.parametrize("name", sorted(MAGNITUDES))
def test_every_byte_value_and_single_code(name: str) -> None:
    """All 256 byte values in one row; every constant byte (one code everywhere only where both
    nibbles agree, and never for an empty tensor)."""
    _check_nibbles(np.arange(256, dtype=np.uint8).reshape(1, 256), 16, name)
    _check_nibbles(np.arange(256, dtype=np.uint8).reshape(1, 256), 256, name)
    for byte in range(256):
        for shape in ((3, 16), (2, 24)):
            _check_nibbles(np.full(shape, byte, np.uint8), 8 if shape[1] == 16 else 12, name)
    rows = np.full((4, 32), 0x33, np.uint8)
    rows[3, 31] = 0x37  # the very last nibble differs
    _check_nibbles(rows, 16, name)
    empty = fast_scan.scan_nibbles(np.zeros((0, 16), np.uint8), 16, MAGNITUDES[name][0])
    assert empty is not None and not empty.same and empty.checksum == 0


@pytest.mark.usefixtures("with_numba")
@settings(max_examples=80, deadline=None)
@given(rows=st.integers(0, 5), units=st.integers(1, 5), unit=st.sampled_from([1, 3, 8, 16, 40]),
       name=st.sampled_from(sorted(MAGNITUDES)), seed=st.integers(0, 2**16),
       sparse=st.booleans())
def test_nibbles_hypothesis(rows: int, units: int, unit: int, name: str, seed: int,
                            sparse: bool) -> None:
    """Hypothesis over shapes (rows of any byte length, so that the checksum's words cross
    rows), unit sizes and sparse codes."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (rows, units * unit), dtype=np.uint8)
    if sparse:
        data[rng.random(data.shape) < 0.9] = 0x00
    _check_nibbles(data, unit, name)


@pytest.mark.usefixtures("with_numba")
def test_scan_declines_what_it_does_not_read() -> None:
    """Rows that do not split into units, a unit of 0, another dtype or rank: None (the numpy
    code then raises or answers)."""
    rows = np.zeros((2, 24), np.uint8)
    for args in ((rows, 16), (rows, 0), (rows.view(np.int8), 8), (rows.reshape(-1), 8)):
        assert fast_scan.scan_nibbles(args[0], args[1], fast_scan.E2M1_CODES) is None
    assert fast_scan.scan_tiles(rows, (0, 4), 0x7F) is None
    assert fast_scan.scan_tiles(rows.reshape(-1), (1, 4), 0x7F) is None


def _numpy_tiles(codes: np.ndarray, block: tuple[int, int], least: int) -> tuple[Any, Any]:
    rows, cols = codes.shape
    bm, bn = min(block[0], max(rows, 1)), min(block[1], max(cols, 1))
    grid = (-(-rows // bm), -(-cols // bn))
    padded = np.zeros((grid[0] * bm, grid[1] * bn), np.uint8)
    padded[:rows, :cols] = codes & 0x7F
    t = padded.reshape(grid[0], bm, grid[1], bn)
    return np.any(t != 0, axis=(1, 3)), np.any(t >= least, axis=(1, 3))


@pytest.mark.usefixtures("with_numba")
@settings(max_examples=80, deadline=None)
@given(rows=st.integers(0, 300), cols=st.integers(0, 300), bm=st.integers(1, 140),
       bn=st.integers(1, 140), seed=st.integers(0, 2**16), least=st.sampled_from([0x76, 0x78]),
       fill=st.sampled_from(["random", "small", "nan", "zero"]))
def test_tiles_hypothesis(rows: int, cols: int, bm: int, bn: int, seed: int, least: int,
                          fill: str) -> None:
    """FP8 tiles: edge tiles, tiles larger than the array, NaN codes (0x7F, 0xFF: top
    magnitude), negative zero (0x80: zero), codes one below and at each bound."""
    rng = np.random.default_rng(seed)
    if fill == "random":
        codes = rng.integers(0, 256, (rows, cols), dtype=np.uint8)
    else:
        codes = rng.choice(np.array([0, 0x80, least - 1, least - 1 | 0x80], np.uint8),
                           (rows, cols))
        if fill == "nan" and codes.size:
            codes.reshape(-1)[rng.integers(codes.size)] = rng.choice([0x7F, 0xFF])
        if fill == "zero":
            codes &= 0x80
    got = tile_flags(codes.view(ml_dtypes.float8_e4m3fn), (bm, bn), least)
    want = _numpy_tiles(codes, (bm, bn), least)
    assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize("length", [0, 1, 7, 8, 9, 15, 16, 17, 1000, (1 << 18) + 5])
def test_checksum_definition(length: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled and the numpy checksum are the definition's, at every length around a
    word and past the numpy path's pieces; a swap of two words changes it."""
    data = np.random.default_rng(length).integers(0, 256, length, dtype=np.uint8)
    want = _definition(data.tobytes())
    compiled, numpy_path = _both(monkeypatch, lambda: fast_scan.checksum(data))
    assert compiled == numpy_path == want
    if length >= 16:
        swapped = data.copy()
        swapped[:8], swapped[8:16] = data[8:16], data[:8]
        assert fast_scan.checksum(swapped) != want or bytes(data[:8]) == bytes(data[8:16])


# -- the statistics with and without numba --------------------------------------------------------


def _stats_key(result: tuple[Any, ...]) -> Any:
    st_, tight, sumsq, n, zero_rows, single, _ = result
    return (st_.gmax.tolist(), st_.hist.tolist(), np.float64(sumsq).view(np.uint64).item(),
            tight, n, zero_rows, single)


@pytest.mark.parametrize("packing", ["mx-fp4", "int4-row", "int4-group"])
@pytest.mark.parametrize("plant", ["random", "shrunk", "zero-row", "single", "zero"])
def test_module_stats_with_and_without_numba(packing: stats.Packing, plant: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Tightness, zero rows, the single-code test, histogram and RMS of each packing are the
    same whether the compiled pass or the SWAR words read the codes; the pass's checksum is
    the definition's."""
    rng = np.random.default_rng(7)
    w = rng.integers(0, 256, (48, 64), dtype=np.uint8)
    if plant == "shrunk":
        w[rng.random(48) < 0.3] &= 0x33
    elif plant == "zero-row":
        w[5] = 0x88 if packing == "int4-group" else 0x00
    elif plant == "single":
        w[...] = 0x55
    elif plant == "zero":
        w[...] = 0x88 if packing == "int4-group" else 0x00
    arrays: dict[str, Any] = {"weight": w, "weight_scale": np.full((48, 4), 127, np.uint8)}
    if packing == "int4-row":
        arrays = {"weight": w.view(np.int32), "weight_scale": np.ones(1, np.float32),
                  "weight_scale_2": np.full(48, 0.01, np.float32)}
    elif packing == "int4-group":
        arrays = {"weight_packed": w.view(np.int32), "weight_scale": np.full((48, 2), 0.01),
                  "weight_shape": np.array([48, 128])}
    compiled, numpy_path = _both(
        monkeypatch, lambda: stats.module_stats(packing, arrays, 4.0, 64 if
                                                packing == "int4-group" else 32))
    assert _stats_key(compiled) == _stats_key(numpy_path)
    assert compiled[-1] == _definition(w.tobytes()) and numpy_path[-1] is None


@pytest.mark.parametrize("bound", sorted(set(stats.MX_TIGHT.values())))
def test_mx_bounds_with_and_without_numba(bound: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every largest code one E2M1 step below and at each tightness bound, both ways."""
    blocks = []
    for top in range(16):
        for pos in range(32):
            block = np.zeros(32, np.uint8)
            block[pos] = top
            blocks.append(block)
    codes = np.stack(blocks).reshape(-1, 128)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    arrays = {"weight": packed, "weight_scale": np.full((packed.shape[0], 4), 127, np.uint8)}
    compiled, numpy_path = _both(monkeypatch, lambda: stats.module_stats("mx-fp4", arrays,
                                                                         bound))
    assert _stats_key(compiled) == _stats_key(numpy_path)
    assert compiled[1].n == numpy_path[1].n > 0


@pytest.mark.parametrize("group_bytes", [8, 16, 12])
def test_fp4_peaks_with_and_without_numba(group_bytes: int,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """NVFP4's whole-tensor block maxima and histogram, both ways, and the same ValueError
    for rows that do not split into blocks."""
    w = np.random.default_rng(group_bytes).integers(0, 256, (33, 48), dtype=np.uint8)
    w[3] = 0x00
    w[4, :8] = 0x88
    compiled, numpy_path = _both(monkeypatch, lambda: stats.fp4_peaks(w, group_bytes))
    assert all(np.array_equal(a, b) and a.dtype == b.dtype
               for a, b in zip(compiled, numpy_path, strict=True))
    try:
        for numba in (True, False):
            monkeypatch.setenv(jit.NUMBA_VARIABLE, "1" if numba else "0")
            jit._load.cache_clear()
            with pytest.raises(ValueError, match="do not split into groups of 32"):
                stats.fp4_peaks(w, 32)
    finally:
        monkeypatch.undo()
        jit._load.cache_clear()


# -- every producer fixture's full report, with and without numba --------------------------------


def _report(fixture: str) -> str:
    out = io.StringIO()
    dump_json(validate(PRODUCERS / fixture, Options(level=Level.FULL, workers=1)), out)
    data = json.loads(out.getvalue())
    for rec in data.get("tasks", []):
        rec.pop("seconds")
    return json.dumps(data, indent=2)


@pytest.mark.parametrize("fixture", FIXTURES)
def test_full_report_identical_with_and_without_numba(fixture: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``--level full`` on each producer's checkpoint: the JSON report (timings aside: every
    finding, histogram, fingerprint and task record, the experts' checksums included) is the
    same bytes whether the compiled pass or numpy read the codes (and the pass did read them:
    every quantized weight's, with numba)."""
    answered: list[str] = []

    def spy(real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            got = real(*args, **kwargs)
            answered.append("numpy" if got is None else "compiled")
            return got
        return call

    for name in ("scan_nibbles", "scan_tiles"):
        monkeypatch.setattr(fast_scan, name, spy(getattr(fast_scan, name)))
    compiled, numpy_path = _both(monkeypatch, lambda: _report(fixture))
    assert compiled == numpy_path
    assert '"CODE_HISTOGRAM"' in compiled or "fp8-block" in fixture
    half = len(answered) // 2
    assert half and answered == ["compiled"] * half + ["numpy"] * half, answered


@pytest.mark.parametrize("dtype", ["uint8", "float8_e4m3fn", "bfloat16", "float16", "int16"])
def test_pattern_counts_and_scale_histogram_with_and_without_numba(
        dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bit-pattern counts are :func:`numpy.bincount`'s, and the scale histograms built
    from them the per-element ones (every pattern, NaN and infinities included), both ways."""
    from mxformats.validate.numbers import EXPONENT_LOW, SCALE_BINS, scale_histogram

    width = np.dtype(getattr(ml_dtypes, dtype, dtype)).itemsize
    bits = np.random.default_rng(3).integers(0, 1 << (8 * width), 5000).astype(f"u{width}")
    bits = np.concatenate([np.arange(1 << (8 * width)).astype(f"u{width}"), bits])
    a = bits.view(np.dtype(getattr(ml_dtypes, dtype, dtype)))
    compiled, numpy_path = _both(monkeypatch, lambda: (fast_scan.pattern_counts(a),
                                                       scale_histogram(a)))
    assert np.array_equal(compiled[0], np.bincount(bits, minlength=1 << (8 * width)))
    assert np.array_equal(compiled[0], numpy_path[0])
    assert (compiled[1] is None) == (numpy_path[1] is None) == (dtype == "int16")
    if compiled[1] is not None:
        assert compiled[1][0] == numpy_path[1][0]
        assert np.array_equal(compiled[1][1], numpy_path[1][1])
        if width == 2:  # against the per-element definition
            with np.errstate(invalid="ignore"):
                _, exp = np.frexp(a.astype(np.float32))
            want = np.bincount(np.clip(exp.astype(np.int64) - EXPONENT_LOW, 0, SCALE_BINS - 1),
                               minlength=SCALE_BINS)
            assert np.array_equal(compiled[1][1], want)
