"""The full scan's compiled pass per weight tensor (numba, :mod:`mxformats.fast.compiled_scan`),
and the weight checksum it computes, in numpy where numba is absent.

``mxformats validate --level full`` reads every code of every quantized weight. Its numpy
statistics (``mxformats.validate.stats``, the format descriptors' ``code_findings``) make
several passes and temporaries per tensor; :func:`scan_nibbles` and :func:`scan_tiles` give
what they need in one pass over the tensor, a row at a time: the largest code magnitude of
each unit (MX block, NVFP4 block, INT4 group, W4A8 row, FP8 tile), whether every 4-bit code
equals the first, the byte counts the code histogram folds, and the checksum. Both answer None
where numba is absent or turned off (``MXFORMATS_NUMBA=0``; :func:`mxformats.fast.jit.status`
says why), or on a big-endian host: the caller runs its numpy code, which gives the same
answers (``tests/test_fast_scan.py`` checks both against each other).

How a 4-bit code's magnitude reads is a parameter derived from the element format
(:class:`NibbleMagnitude`), never a format name: the kernels hold no format.

:func:`checksum` is the key ``EXPERT_DUPLICATE`` compares experts by (a match is then
confirmed byte for byte). Its bits are defined, so that the compiled pass and numpy give the
same ones, and the JSON report's task records the same bytes, on every host: the tensor's
bytes, zero-padded to a multiple of 8, read as little-endian uint64 words ``w_0 .. w_{n-1}``;
the checksum is ``sum(w_i * (2 i + 1)) mod 2**64`` (integer arithmetic, exact in any order;
the odd weights make it depend on where each word sits).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from mxformats.fast import jit
from mxformats.fast.histogram import byte_counts

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["E2M1_CODES", "OFFSET_BINARY", "TWOS_COMPLEMENT", "NibbleMagnitude", "NibbleScan",
           "ScanPass", "checksum", "kernels", "on_device", "pattern_counts", "scan_nibbles",
           "scan_tiles"]

_LITTLE_ENDIAN = sys.byteorder == "little"
#: uint64 words per piece of the numpy checksum (256 KiB: its temporaries stay in cache)
_PIECE_WORDS = 1 << 15
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class NibbleMagnitude:
    """How a 4-bit code's magnitude reads: ``sign_magnitude`` codes (E2M1: bit 3 the sign)
    keep their low three bits (E2M1: the magnitude's index, 0..7, monotone in the value);
    integer codes ``v = code ^ flip`` stand for ``v - 8``, magnitude ``|v - 8|`` (0..8)."""

    sign_magnitude: bool
    flip: int = 0


#: E2M1 (MXFP4, NVFP4): the magnitude index, the code's low three bits.
E2M1_CODES = NibbleMagnitude(True)
#: Two's-complement INT4 nibbles (Quark W4A8): ``q = v - 8`` with ``v = code ^ 8``.
TWOS_COMPLEMENT = NibbleMagnitude(False, 8)
#: Offset-binary INT4 nibbles ``q + 8`` (compressed-tensors).
OFFSET_BINARY = NibbleMagnitude(False, 0)


@dataclass(frozen=True)
class NibbleScan:
    """What :func:`scan_nibbles` read: ``peaks`` (uint8 ``[R, B / unit]``) the largest code
    magnitude per unit; ``same``: the tensor is not empty and every 4-bit code equals the
    first; ``checksum`` (:func:`checksum`); ``counts``: the 256 byte counts (int64), when
    asked."""

    peaks: NDArray[np.uint8]
    same: bool
    checksum: int
    counts: NDArray[np.int64] | None


class ScanPass(Protocol):
    """The scan's pass: :mod:`mxformats.fast.compiled_scan`'s four functions (that module, or
    a device's object with the same answers, ``mxformats.kernels.triton.scan.DeviceScan``)."""

    def nibble_peaks(self, rows: NDArray[Any], unit: int, sign_magnitude: bool,
                     flip: np.uint8, peaks: NDArray[Any], counts: NDArray[Any],
                     histogram: bool) -> tuple[bool, Any]: ...

    def tile_peaks(self, codes: NDArray[Any], mask: np.uint8, bm: int, bn: int,
                   peaks: NDArray[Any]) -> None: ...

    def checksum_words(self, data: NDArray[Any]) -> Any: ...

    def count_words(self, data: NDArray[Any], counts: NDArray[Any]) -> None: ...


#: The device scan of the current task (``mxformats validate --level full --device``), if any.
_DEVICE: ContextVar[ScanPass | None] = ContextVar("mxformats_scan_device", default=None)


@contextmanager
def on_device(scan: ScanPass | None) -> Iterator[None]:
    """Within the block (in this thread), the scan's pass is ``scan``
    (``mxformats.kernels.triton.scan.DeviceScan``); None leaves it as it is."""
    token = _DEVICE.set(scan if scan is not None else _DEVICE.get())
    try:
        yield
    finally:
        _DEVICE.reset(token)


def kernels() -> ScanPass | None:
    """The scan's pass: the device's within :func:`on_device`, else
    :mod:`mxformats.fast.compiled_scan` where :func:`mxformats.fast.jit.compiled` found
    numba (and the host is little-endian: the checksum reads words), else None."""
    device = _DEVICE.get()
    if device is not None:
        return device
    if jit.compiled() is None or not _LITTLE_ENDIAN:
        return None
    return cast(ScanPass, importlib.import_module("mxformats.fast.compiled_scan"))


def _bytes_of(a: NDArray[Any]) -> NDArray[np.uint8]:
    flat: NDArray[np.uint8] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    return flat


def checksum(a: NDArray[Any]) -> int:
    """The checksum (module docstring) of the bytes of ``a`` in C order: compiled where numba
    runs, else in numpy, in pieces of ``_PIECE_WORDS`` words (uint64 products and sums
    wrap modulo 2**64, as the definition's)."""
    flat = _bytes_of(a)
    found = kernels()
    if found is not None:
        return int(found.checksum_words(flat))
    whole = flat.size - flat.size % 8
    words = flat[:whole].view("<u8")
    total = 0
    for lo in range(0, words.size, _PIECE_WORDS):
        piece = words[lo:lo + _PIECE_WORDS]
        odd = np.arange(lo, lo + piece.size, dtype=np.uint64)
        odd *= np.uint64(2)
        odd += np.uint64(1)
        odd *= piece
        total += int(np.add.reduce(odd, dtype=np.uint64))
    if whole < flat.size:
        tail = np.zeros(8, np.uint8)
        tail[:flat.size - whole] = flat[whole:]
        total += int(tail.view("<u8")[0]) * (2 * (whole // 8) + 1)
    return total & _MASK64


def scan_nibbles(rows: NDArray[np.uint8], unit: int, magnitude: NibbleMagnitude,
                 histogram: bool = False) -> NibbleScan | None:
    """One compiled pass over packed 4-bit codes ``rows`` (uint8 ``[R, B]``, C order), in
    units of ``unit`` bytes of a row (``B`` a multiple of it); None without numba or where the
    shapes do not fit (the caller's numpy code then says why)."""
    found = kernels()
    if found is None or rows.dtype != np.uint8 or rows.ndim != 2 or unit <= 0 \
            or rows.shape[1] % unit:
        return None
    rows = np.ascontiguousarray(rows)
    peaks = np.empty((rows.shape[0], rows.shape[1] // unit), dtype=np.uint8)
    counts = np.zeros(256, dtype=np.int64)
    same, total = found.nibble_peaks(rows, unit, magnitude.sign_magnitude,
                                     np.uint8(magnitude.flip), peaks, counts, histogram)
    return NibbleScan(peaks, bool(same) and rows.size > 0, int(total),
                      counts if histogram else None)


def scan_tiles(codes: NDArray[np.uint8], tile: tuple[int, int], mask: int
               ) -> NDArray[np.uint8] | None:
    """One compiled pass over byte codes ``codes`` (uint8 ``[R, C]``): the largest ``byte &
    mask`` of each ``tile`` (rows, columns; at least 1 each) on the ceil grid, partial edge
    tiles over their real elements; None without numba."""
    found = kernels()
    if found is None or codes.dtype != np.uint8 or codes.ndim != 2 or min(tile) < 1:
        return None
    rows, cols = codes.shape
    peaks = np.empty((-(-rows // tile[0]), -(-cols // tile[1])), dtype=np.uint8)
    found.tile_peaks(np.ascontiguousarray(codes), np.uint8(mask), tile[0], tile[1], peaks)
    return peaks


def pattern_counts(a: NDArray[Any]) -> NDArray[np.int64]:
    """How many elements of a 1- or 2-byte array ``a`` hold each bit pattern (int64, 256 or
    65536 counts), as ``np.bincount`` of its bytes or uint16 words counts them: bytes by
    :func:`mxformats.fast.histogram.byte_counts`, uint16 words in one compiled pass where numba
    runs (the same integers)."""
    flat = np.ascontiguousarray(a).reshape(-1)
    if flat.dtype.itemsize == 1:
        return byte_counts(flat)
    if flat.dtype.itemsize != 2:
        raise ValueError(f"{flat.dtype} is not a 1- or 2-byte dtype")
    words = flat.view(np.uint16)
    found = kernels()
    if found is None:
        counts: NDArray[np.int64] = np.bincount(words, minlength=1 << 16).astype(np.int64)
        return counts
    counts = np.zeros(1 << 16, dtype=np.int64)
    found.count_words(words, counts)
    return counts
