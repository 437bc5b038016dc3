"""The compiled passes of the full scan (numba; imported only through
:func:`mxformats.fast.scan.kernels`, after :func:`mxformats.fast.jit.compiled` found numba).

One pass over a quantized weight's bytes, a row at a time (a row stays in L1 while each
statistic reads it): the largest element magnitude of each unit (an MX block, a group, a row,
an FP8 tile), whether every 4-bit code equals the first, the 256 byte counts the code
histogram folds, and the weight's checksum (:func:`mxformats.fast.scan.checksum` defines its
bits). Every operation is an integer one: the answers are exact on any CPU, with or without
AVX-512, and ``tests/test_fast_scan.py`` checks them against the numpy code on planted inputs.

A 4-bit code's magnitude is arithmetic, not a table: sign-magnitude codes (E2M1) keep their low
three bits (the magnitude's index); integer codes are ``v = code ^ flip`` read as ``v - 8``
(``flip`` 8 for two's complement, 0 for offset binary), whose magnitude is
``max(v, 8) - min(v, 8)``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["checksum_words", "count_words", "nibble_peaks", "tile_peaks"]

_LOW = np.uint8(0x0F)
_INDEX = np.uint8(0x07)
_EIGHT = np.uint8(8)
_FOUR = np.uint8(4)
#: Sub-histograms of the byte counts (consecutive bytes of equal value would otherwise wait
#: on one counter's store)
_WAYS = 4
_u8 = np.uint8
_u64 = np.uint64
#: Each byte of a word: 0x01, 0x07, 0x08, 0x0F, 0x80.
_ONES = _u64(0x0101010101010101)
_SEVENS = _u64(0x0707070707070707)
_EIGHTS = _u64(0x0808080808080808)
_LOWS = _u64(0x0F0F0F0F0F0F0F0F)
_HIGHS = _u64(0x8080808080808080)
#: Units of at most this many bytes are reduced in words (SWAR), longer ones byte by byte.
_WORD_UNITS = 16


@njit(cache=True, inline="always")
def _larger(a: np.uint8, b: np.uint8) -> np.uint8:
    """The larger of two bytes, kept a byte (numba widens byte arithmetic to 64 bits, which
    LLVM then vectorizes 8 lanes wide instead of 64)."""
    return a if a > b else b


@njit(cache=True, inline="always")
def _int_magnitude(v: np.uint8) -> np.uint8:
    """``|v - 8|`` of a 4-bit ``v``, as ``max(v, 8) - min(v, 8)``."""
    magnitude: np.uint8 = _u8(_larger(v, _EIGHT) - (v if v < _EIGHT else _EIGHT))
    return magnitude


@njit(cache=True, inline="always")
def _bytes_larger(a: np.uint64, b: np.uint64) -> np.uint64:
    """Bytewise larger of two words whose bytes are all below 0x80 (a byte of ``(a | 0x80) -
    b`` keeps its top bit exactly where ``a >= b``, and never borrows)."""
    keep = ((((a | _HIGHS) - b) >> _u64(7)) & _ONES) * _u64(0xFF)
    larger: np.uint64 = (a & keep) | (b & ~keep)
    return larger


@njit(cache=True, inline="always")
def _fold(word: np.uint64) -> np.uint8:
    """The largest byte of a word of bytes below 0x80."""
    word = _bytes_larger(word, word >> _u64(32))
    word = _bytes_larger(word, word >> _u64(16))
    top: np.uint8 = _u8(_bytes_larger(word, word >> _u64(8)) & _u64(0xFF))
    return top


@njit(cache=True)
def _word_magnitudes(words: np.ndarray, sign_magnitude: bool, flip: np.uint64,
                     out: np.ndarray) -> None:
    """Per byte of each word: the larger magnitude of its two 4-bit codes (SWAR)."""
    if sign_magnitude:
        for j in range(words.shape[0]):
            w = words[j]
            out[j] = _bytes_larger(w & _SEVENS, (w >> _u64(4)) & _SEVENS)
        return
    for j in range(words.shape[0]):
        w = words[j] ^ flip
        lo = w & _LOWS
        hi = (w >> _u64(4)) & _LOWS
        # |v - 8|: v & 7 where bit 3 is set, else 8 - v (no borrow: v < 8 there)
        lo_neg = ((lo >> _u64(3)) & _ONES) * _u64(0xFF)
        hi_neg = ((hi >> _u64(3)) & _ONES) * _u64(0xFF)
        lo = ((lo & _SEVENS) & lo_neg) | ((_EIGHTS - (lo & _SEVENS)) & ~lo_neg)
        hi = ((hi & _SEVENS) & hi_neg) | ((_EIGHTS - (hi & _SEVENS)) & ~hi_neg)
        out[j] = _bytes_larger(lo, hi)


@njit(cache=True)
def _row_checksum(row: np.ndarray, first_word: int) -> np.uint64:
    """Sum of ``w_i * (2 i + 1)`` modulo 2**64 over the row's little-endian uint64 words,
    ``i`` counted from ``first_word`` (a row of a multiple of 8 bytes)."""
    words = row.view(np.uint64)
    total: np.uint64 = _u64(0)
    odd = _u64(2 * first_word + 1)
    for i in range(words.shape[0]):
        total += words[i] * (odd + _u64(2 * i))
    return total


@njit(cache=True)
def _bytes_checksum(row: np.ndarray, first_byte: int) -> np.uint64:
    """The same sum for a row at any byte offset: byte ``p`` of the tensor adds
    ``b << 8 (p % 8)`` to word ``p // 8``."""
    total: np.uint64 = _u64(0)
    for j in range(row.shape[0]):
        p = first_byte + j
        total += (_u64(row[j]) << _u64(8 * (p % 8))) * _u64(2 * (p // 8) + 1)
    return total


@njit(cache=True)
def _word_peaks(words: np.ndarray, unit_words: int, mags: np.ndarray, peaks: np.ndarray
                ) -> None:
    """``peaks[u]``: the largest byte of ``mags`` words ``u * unit_words ..`` (units of one
    or two words have their own loops, which LLVM vectorizes across units)."""
    units = peaks.shape[0]
    if unit_words == 1:
        for u in range(units):
            peaks[u] = _fold(mags[u])
    elif unit_words == 2:
        for u in range(units):
            peaks[u] = _fold(_bytes_larger(mags[2 * u], mags[2 * u + 1]))
    else:
        for u in range(units):
            top = mags[u * unit_words]
            for k in range(u * unit_words + 1, u * unit_words + unit_words):
                top = _bytes_larger(top, mags[k])
            peaks[u] = _fold(top)


@njit(cache=True)
def _byte_peaks(row: np.ndarray, unit: int, sign_magnitude: bool, flip: np.uint8,
                peaks: np.ndarray) -> None:
    """``peaks[u]``: the largest code magnitude of bytes ``u * unit ..`` of ``row`` (long
    units: the inner loop is the vectorized one)."""
    both = _u8(flip | _u8(flip << _FOUR))
    for u in range(peaks.shape[0]):
        top = _u8(0)
        base = u * unit
        if sign_magnitude:
            for k in range(unit):
                b = row[base + k]
                top = _larger(top, _larger(_u8(b & _INDEX), _u8(_u8(b >> _FOUR) & _INDEX)))
        else:
            for k in range(unit):
                v = _u8(row[base + k] ^ both)
                top = _larger(top, _larger(_int_magnitude(_u8(v & _LOW)),
                                           _int_magnitude(_u8(v >> _FOUR))))
        peaks[u] = top


@njit(cache=True)
def _count_values(row: np.ndarray, ways: np.ndarray) -> None:
    """Add each value of ``row`` to the sub-histogram (a row of ``ways``) of its position
    modulo the number of sub-histograms."""
    lanes = ways.shape[0]
    j = 0
    while j + lanes <= row.shape[0]:
        for w in range(lanes):
            ways[w, row[j + w]] += 1
        j += lanes
    while j < row.shape[0]:
        ways[0, row[j]] += 1
        j += 1


@njit(cache=True)
def count_words(data: np.ndarray, counts: np.ndarray) -> None:
    """Add the number of elements of ``data`` (flat uint16) holding each value to ``counts``
    (65536 int64; one histogram: four would not stay in L2)."""
    for i in range(data.shape[0]):
        counts[data[i]] += 1


@njit(cache=True)
def nibble_peaks(rows: np.ndarray, unit: int, sign_magnitude: bool, flip: np.uint8,
                 peaks: np.ndarray, counts: np.ndarray, histogram: bool
                 ) -> tuple[bool, np.uint64]:
    """One pass over packed 4-bit codes ``rows`` (uint8 ``[R, B]``, ``B`` a multiple of
    ``unit``): ``peaks[r, u]`` (uint8 ``[R, B / unit]``) the largest code magnitude of bytes
    ``u * unit .. (u + 1) * unit`` of row ``r`` (sign-magnitude codes: the low three bits;
    else ``|(code ^ flip) - 8|``); with ``histogram`` the count of each byte value added to
    ``counts`` (int64 ``[256]``). Returns (every 4-bit code equals the first, the checksum of
    the bytes)."""
    nrow, nbytes = rows.shape
    ways = np.zeros((_WAYS, 256), dtype=np.int64)
    first = _u8(rows[0, 0] & _LOW) if nrow and nbytes else _u8(0)
    pattern = _u8(first | _u8(first << _FOUR))
    in_words = nbytes % 8 == 0 and unit % 8 == 0 and unit <= _WORD_UNITS
    mags = np.empty(nbytes // 8, dtype=np.uint64)
    flips = _u64(flip) * _u64(0x11) * _ONES
    differ = _u8(0)
    spread = _u64(0)
    total: np.uint64 = _u64(0)
    for r in range(nrow):
        row = rows[r]
        if in_words:
            words = row.view(np.uint64)
            _word_magnitudes(words, sign_magnitude, flips, mags)
            _word_peaks(words, unit // 8, mags, peaks[r])
            for j in range(words.shape[0]):
                spread |= words[j] ^ (_u64(pattern) * _ONES)
        else:
            _byte_peaks(row, unit, sign_magnitude, flip, peaks[r])
            for j in range(nbytes):
                differ = _u8(differ | _u8(row[j] ^ pattern))
        if nbytes % 8 == 0:
            total += _row_checksum(row, r * (nbytes // 8))
        else:
            total += _bytes_checksum(row, r * nbytes)
        if histogram:
            _count_values(row, ways)
    for w in range(_WAYS):
        for v in range(256):
            counts[v] += ways[w, v]
    return differ == 0 and spread == 0, total


@njit(cache=True)
def tile_peaks(codes: np.ndarray, mask: np.uint8, bm: int, bn: int, peaks: np.ndarray) -> None:
    """One pass over byte codes ``codes`` (uint8 ``[R, C]``): ``peaks[t, s]`` (uint8
    ``[ceil(R / bm), ceil(C / bn)]``) the largest ``byte & mask`` of tile ``(t, s)``, partial
    edge tiles over their real elements. Each row is folded into a column maximum (the
    vectorized loop), which is split into tiles at the end of each row of tiles."""
    nrow, ncol = codes.shape
    column = np.zeros(ncol, dtype=np.uint8)
    for r in range(nrow):
        row = codes[r]
        for j in range(ncol):
            column[j] = _larger(column[j], _u8(row[j] & mask))
        if (r + 1) % bm and r + 1 < nrow:
            continue
        out = peaks[r // bm]
        for s in range(peaks.shape[1]):
            top = _u8(0)
            for k in range(s * bn, min(s * bn + bn, ncol)):
                top = _larger(top, column[k])
            out[s] = top
        column[:] = 0


@njit(cache=True)
def checksum_words(data: np.ndarray) -> np.uint64:
    """The checksum of a flat uint8 array (any length)."""
    n = data.shape[0]
    whole = n - n % 8
    total: np.uint64 = _row_checksum(data[:whole], 0) + _bytes_checksum(data[whole:], whole)
    return total
