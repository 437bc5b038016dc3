"""The full scan's pass on the device (:class:`mxformats.kernels.triton.scan.DeviceScan`)
gives the compiled CPU pass's answers (:mod:`mxformats.fast.compiled_scan`, itself checked
against numpy by ``tests/test_fast_scan.py``): unit peaks of packed 4-bit codes for each
kind of magnitude and unit width (one word, two, long rows, odd byte counts), the uniform-code
flag on both sides, tile peaks with partial edge tiles, the checksum at every length modulo 8,
and the byte and uint16 counts. All integers: compared exactly."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import requires

from mxformats.fast import jit
from mxformats.fast import scan as fast_scan

torch = requires("torch")
requires("triton")
requires("numba")
device_scan = requires("mxformats.kernels.triton.scan")


@pytest.fixture
def pair(device: str) -> tuple[Any, Any]:
    compiled = jit.compiled()
    assert compiled is not None, jit.status()
    return device_scan.DeviceScan(torch.device(device)), fast_scan.kernels()


@pytest.mark.parametrize("magnitude", [fast_scan.E2M1_CODES, fast_scan.TWOS_COMPLEMENT,
                                       fast_scan.OFFSET_BINARY])
@pytest.mark.parametrize(("rows", "unit", "units"), [(3, 8, 4), (5, 16, 3), (2, 3, 7),
                                                     (4, 3584, 1), (1, 1, 9)])
def test_nibble_peaks(pair: tuple[Any, Any], magnitude: Any, rows: int, unit: int,
                      units: int) -> None:
    ours, compiled = pair
    rng = np.random.default_rng(rows * unit)
    data = rng.integers(0, 256, (rows, unit * units), dtype=np.uint8)
    data[0, :unit] = 0x11  # a quiet unit
    for histogram in (False, True):
        got = [np.empty((rows, units), np.uint8), np.zeros(256, np.int64)]
        want = [np.empty((rows, units), np.uint8), np.zeros(256, np.int64)]
        args = (unit, magnitude.sign_magnitude, np.uint8(magnitude.flip))
        answer = ours.nibble_peaks(data, *args, got[0], got[1], histogram)
        expected = compiled.nibble_peaks(data, *args, want[0], want[1], histogram)
        assert (bool(answer[0]), int(answer[1])) == (bool(expected[0]), int(expected[1]))
        assert got[0].tobytes() == want[0].tobytes() and got[1].tobytes() == want[1].tobytes()


@pytest.mark.parametrize("value", [0x00, 0x77, 0xFF])
def test_uniform_codes_are_told_from_one_other_nibble(pair: tuple[Any, Any], value: int) -> None:
    ours, compiled = pair
    data = np.full((4, 32), value, dtype=np.uint8)
    for flipped in (None, (3, 31)):
        if flipped is not None:
            data[flipped] ^= 0x10  # one high nibble differs
        got, want = np.empty((4, 2), np.uint8), np.empty((4, 2), np.uint8)
        a = ours.nibble_peaks(data, 16, True, np.uint8(0), got, np.zeros(256, np.int64), False)
        b = compiled.nibble_peaks(data, 16, True, np.uint8(0), want,
                                  np.zeros(256, np.int64), False)
        assert bool(a[0]) == bool(b[0]) == (flipped is None) and got.tobytes() == want.tobytes()


@pytest.mark.parametrize(("shape", "tile"), [((256, 384), (128, 128)), ((130, 70), (128, 64)),
                                             ((5, 7), (2, 3)), ((7, 5), (3, 2)),
                                             ((1, 1), (128, 128))])
def test_tile_peaks(pair: tuple[Any, Any], shape: tuple[int, int],
                    tile: tuple[int, int]) -> None:
    ours, compiled = pair
    codes = np.random.default_rng(shape[0]).integers(0, 256, shape, dtype=np.uint8)
    grid = (-(-shape[0] // tile[0]), -(-shape[1] // tile[1]))
    got, want = np.empty(grid, np.uint8), np.empty(grid, np.uint8)
    ours.tile_peaks(codes, np.uint8(0x7F), *tile, got)
    compiled.tile_peaks(codes, np.uint8(0x7F), *tile, want)
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 1000, 4099, 65541])
def test_checksum_at_every_length(pair: tuple[Any, Any], n: int) -> None:
    ours, compiled = pair
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    data[: min(n, 16)] = 0xFF  # products that wrap modulo 2**64
    assert int(ours.checksum_words(data)) == int(compiled.checksum_words(data))


def test_word_counts(pair: tuple[Any, Any]) -> None:
    ours, compiled = pair
    data = np.random.default_rng(5).integers(0, 1 << 16, 5000, dtype=np.uint16)
    data[:3] = (0, 0xFFFF, 0x8000)
    got, want = np.zeros(1 << 16, np.int64), np.zeros(1 << 16, np.int64)
    ours.count_words(data, got)
    compiled.count_words(data, want)
    assert got.tobytes() == want.tobytes()


def test_on_device_scopes_the_scan(pair: tuple[Any, Any]) -> None:
    ours, compiled = pair
    with fast_scan.on_device(ours):
        assert fast_scan.kernels() is ours
        with fast_scan.on_device(None):
            assert fast_scan.kernels() is ours
    assert fast_scan.kernels() is compiled
