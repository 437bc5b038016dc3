"""The compiled CPU passes (numba; imported only through :func:`mxformats.fast.jit.compiled`).

Every function is ``@njit(cache=True)`` without ``fastmath``: each float32 / float64 operation
is the one written, in the order written, so the bytes are the numpy fast paths' and the
references' (checked by ``tests/test_fast_compiled.py`` under the same harness). Scale powers
come from exponent bits, element codes from the reference-built class table
(:func:`mxformats.fast.mx.element_table`, 4 KiB, in L1), sums in :data:`~.moments.LANES`
fixed lanes (:mod:`mxformats.fast.moments` defines their bits).

- :func:`quantize_mx_bf16`: MXFP4 blocks of 32 from BF16 bits, profiles ``ocp`` and ``quark``
  (a short last block padded with zeros, as Quark pads it).
- :func:`reproduce_mxfp4_bf16`: the whole ``--source`` step for one MXFP4 module in one pass
  over rows: quantize the BF16 source, compare with the checkpoint's codes and scales,
  dequantize the checkpoint's codes (``element * 2**(b - 127)``, one float32 multiply) and
  accumulate the moments' lane sums; no temporary larger than a row.
- :func:`count_bytes`: a 256-bin histogram of bytes (the scale checks' E8M0 and E4M3 bytes).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from mxformats.fast.moments import LANES, PIECE, TERMS

__all__ = ["OK", "OTHER", "count_bytes", "finish", "quantize_mx_bf16", "reproduce_mxfp4_bf16"]

#: :func:`reproduce_mxfp4_bf16`'s status: every byte equal and every value finite (the sums
#: are the module's moments) ...
OK = 0
#: ... or not (a byte differs, a source block holds NaN/Inf, a scale byte is 0xFF or a value
#: overflows): the caller computes the module the numpy way, which says where and why.
OTHER = 1

_BLOCK = 32
_LOW_BITS = 20  # float32 bits below the E2M1 class index (mxformats.fast.chunks)
_LOW_MASK = (1 << _LOW_BITS) - 1
_MAGNITUDE = 0x7FFFFFFF
_TERMS = len(TERMS)


@njit(cache=True)
def _float32(word: np.uint32) -> np.float32:
    """The float32 whose bits are ``word``."""
    as_float: np.float32 = np.uint32(word).view(np.float32)
    return as_float


@njit(cache=True)
def _quantize_row(src: np.ndarray, quark: bool, table: np.ndarray, bits: np.ndarray,
                  scaled: np.ndarray, codes: np.ndarray, scales: np.ndarray) -> bool:
    """Quantize one row of BF16 bits ``src`` (length C) into ``codes`` (one E2M1 code a byte,
    ``ceil(C/32) * 32`` of them: a short last block padded with zeros, as Quark pads it) and
    ``scales`` (one E8M0 byte a block); ``bits`` receives the row as float32 bits (zeros after
    C), ``scaled`` is scratch of that length. False for a row with a block holding NaN or Inf
    (each profile's own rule: the reference computes it)."""
    cols = src.shape[0]
    nblocks = scales.shape[0]
    for c in range(cols):
        bits[c] = np.uint32(src[c]) << np.uint32(16)
    for c in range(cols, nblocks * _BLOCK):
        bits[c] = np.uint32(0)
    multipliers = np.empty(nblocks, dtype=np.uint32)
    for blk in range(nblocks):
        amax = np.uint32(0)
        for k in range(blk * _BLOCK, blk * _BLOCK + _BLOCK):
            amax = max(amax, bits[k] & np.uint32(_MAGNITUDE))
        if amax >> np.uint32(23) == np.uint32(0xFF):
            return False
        if quark:  # Quark 0.13 even rounding (mxformats.fast.mx._quark_scales)
            rounded = np.int64((amax + np.uint32(1 << 21)) >> np.uint32(23))
            e = 127 if rounded == 0xFF else max(rounded - 129, -127)
            scales[blk] = max(e, -126) + 127
            multipliers[blk] = (np.uint32(1 << 22) if e == 127
                                else np.uint32(127 - e) << np.uint32(23))
        else:  # OCP floor (mxformats.fast.mx._ocp_scales)
            byte = max(np.int64(amax >> np.uint32(23)), 2) - 2
            scales[blk] = byte
            multipliers[blk] = np.uint32(254 - byte) << np.uint32(23)
    source = bits.view(np.float32)
    product = scaled.view(np.float32)
    factor = multipliers.view(np.float32)
    for c in range(nblocks * _BLOCK):  # a float32 product, as the numpy fast path's
        product[c] = source[c] * factor[c // _BLOCK]
    for c in range(nblocks * _BLOCK):
        q = scaled[c]
        codes[c] = table[(q | ((q & np.uint32(_LOW_MASK)) + np.uint32(_LOW_MASK)))
                         >> np.uint32(_LOW_BITS)]
    return True


@njit(cache=True)
def quantize_mx_bf16(src: np.ndarray, quark: bool, table: np.ndarray, packed: np.ndarray,
                     scales: np.ndarray) -> bool:
    """Rows of BF16 bits ``src`` (uint16 ``[R, C]``, C even) to packed E2M1 ``packed``
    (``[R, C/2]``) and E8M0 ``scales`` (``[R, ceil(C/32)]``), profile ``quark`` (else
    ``ocp``); False (outputs partial) when a block holds NaN or Inf."""
    rows, cols = src.shape
    width = scales.shape[1] * _BLOCK
    bits = np.empty(width, dtype=np.uint32)
    scaled = np.empty(width, dtype=np.uint32)
    codes = np.empty(width, dtype=np.uint8)
    for r in range(rows):
        if not _quantize_row(src[r], quark, table, bits, scaled, codes, scales[r]):
            return False
        for j in range(cols // 2):
            packed[r, j] = codes[2 * j] | (codes[2 * j + 1] << np.uint8(4))
    return True


@njit(cache=True)
def _factor(byte: np.uint8) -> np.float32:
    """``2**(byte - 127)`` as float32, from its bits (``2**-127`` is the subnormal 1 << 22)."""
    if byte == 0:
        return _float32(np.uint32(1 << 22))  # type: ignore[no-any-return]
    return _float32(np.uint32(byte) << np.uint32(23))  # type: ignore[no-any-return]


@njit(cache=True, inline="always")
def _add_terms(sums: np.ndarray, lane: int, x: float, d: float, kx: float, kd: float) -> None:
    """Add one element's seven terms (:data:`~.moments.TERMS`, in that order) to ``lane``."""
    cx = x - kx
    cd = d - kd
    e = d - x
    sums[0, lane] += x * x
    sums[1, lane] += e * e
    sums[2, lane] += cx
    sums[3, lane] += cd
    sums[4, lane] += cx * cx
    sums[5, lane] += cd * cd
    sums[6, lane] += cx * cd


@njit(cache=True)
def _accumulate(xs: np.ndarray, ds: np.ndarray, base: int, kx: float, kd: float,
                local: np.ndarray, totals: np.ndarray) -> None:
    """Add the terms of elements ``base .. base + len(xs)`` (C order) to the lane sums:
    ``local`` the current piece's, flushed into ``totals`` at each multiple of PIECE (the
    definition's step 3; the last flush is the caller's). Runs of aligned groups of LANES
    elements are one loop over the lanes, on a copy of ``local`` the compiler keeps in
    registers (the same additions in the same order)."""
    n = xs.shape[0]
    sums = np.empty((_TERMS, LANES), dtype=np.float64)
    for t in range(_TERMS):
        for lane in range(LANES):
            sums[t, lane] = local[t, lane]
    j = 0
    while j < n:
        i = base + j
        if i % PIECE == 0 and i > 0:
            for t in range(_TERMS):
                for lane in range(LANES):
                    totals[t, lane] += sums[t, lane]
                    sums[t, lane] = 0.0
        groups = (min(n - j, PIECE - i % PIECE) // LANES) if i % LANES == 0 else 0
        for g in range(groups):
            # Unsigned: numba wraps a signed index below 0, and that per-lane select made LLVM
            # load the 16 lanes by a gather (20 ms per Kimi expert; 16.6 ms contiguous).
            at = np.uint64(j + g * LANES)
            for lane in range(LANES):
                k = at + np.uint64(lane)
                _add_terms(sums, lane, np.float64(xs[k]), np.float64(ds[k]), kx, kd)
        if groups:
            j += groups * LANES
            continue
        _add_terms(sums, i % LANES, np.float64(xs[j]), np.float64(ds[j]), kx, kd)
        j += 1
    for t in range(_TERMS):
        for lane in range(LANES):
            local[t, lane] = sums[t, lane]


@njit(cache=True)
def reproduce_mxfp4_bf16(src: np.ndarray, codes: np.ndarray, scales: np.ndarray, quark: bool,
                         table: np.ndarray, values: np.ndarray,
                         totals: np.ndarray) -> tuple[int, bool, bool]:
    """One pass over an MXFP4 module: BF16 source bits ``src`` (uint16 ``[R, C]``, C even)
    against the checkpoint's ``codes`` (uint8 ``[R, C/2]``) and ``scales`` (uint8
    ``[R, ceil(C/32)]``). ``values``: the 16 E2M1 values as float32. Fills ``totals``
    (``len(TERMS)`` × LANES, zeros on entry) with the moments' lane totals of the
    dequantized checkpoint against the source; returns (:data:`OK` or :data:`OTHER`,
    source varies, weight varies)."""
    rows, cols = src.shape
    nblocks = scales.shape[1]
    width = nblocks * _BLOCK
    bits = np.empty(width, dtype=np.uint32)
    scaled = np.empty(width, dtype=np.uint32)
    ours = np.empty(width, dtype=np.uint8)
    row_scales = np.empty(nblocks, dtype=np.uint8)
    factors = np.empty(nblocks, dtype=np.float32)
    source = bits.view(np.float32)
    ds = np.empty(cols, dtype=np.float32)
    local = np.zeros((_TERMS, LANES), dtype=np.float64)
    if rows == 0 or cols == 0:
        return OK, False, False
    if scales[0, 0] == 0xFF:
        return OTHER, False, False
    kx = np.float64(_float32(np.uint32(src[0, 0]) << np.uint32(16)))
    kd = np.float64(np.float32(values[codes[0, 0] & 0xF] * _factor(scales[0, 0])))
    for r in range(rows):
        if not _quantize_row(src[r], quark, table, bits, scaled, ours, row_scales):
            return OTHER, False, False
        mismatch = 0
        for blk in range(nblocks):
            theirs = scales[r, blk]
            mismatch |= (row_scales[blk] != theirs) | (theirs == 0xFF)
            factors[blk] = _factor(theirs)
        row = codes[r]
        for j in range(cols // 2):
            packed = row[j]
            mismatch |= packed != (ours[2 * j] | (ours[2 * j + 1] << np.uint8(4)))
            factor = factors[j // (_BLOCK // 2)]
            ds[2 * j] = np.float32(values[packed & 0xF] * factor)
            ds[2 * j + 1] = np.float32(values[packed >> 4] * factor)
        if mismatch:
            return OTHER, False, False
        _accumulate(source[:cols], ds, r * cols, kx, kd, local, totals)
    return finish(local, totals)


@njit(cache=True)
def finish(local: np.ndarray, totals: np.ndarray) -> tuple[int, bool, bool]:
    """The end of a one-pass reproduction: the last piece's ``local`` lane sums added to
    ``totals``; (:data:`OK` or :data:`OTHER`, source varies, weight varies) read from them.

    Read from the sums, exactly: a dequantized Inf (an overflowing product; NaN cannot occur
    without a 0xFF byte) makes the sum of (d-x)**2 Inf, which finite terms never reach
    (``|d - x| < 2**130``); and x != Kx exactly when (x-Kx)**2 > 0 (the smallest difference of
    two BF16 or float32 values squares to at least 2**-298, above float64's underflow), so
    the sum of the squares is positive exactly when some x differs, and alike for d."""
    for t in range(_TERMS):
        for lane in range(LANES):
            totals[t, lane] += local[t, lane]
    if not np.isfinite(totals[1]).all():
        return OTHER, False, False
    return OK, totals[4].sum() > 0, totals[5].sum() > 0


@njit(cache=True, nogil=True)
def count_bytes(data: np.ndarray, counts: np.ndarray) -> None:
    """``counts[b]`` += the number of bytes ``b`` in 1-D uint8 ``data`` (256 int64 bins). Four
    partial histograms in turn, so that consecutive equal bytes (a scale tensor's common
    case) do not wait on one counter; counts are integers, so the order cannot change them.
    Without the interpreter lock: a Hub run's reader threads go on receiving meanwhile."""
    partial = np.zeros((4, 256), dtype=np.int64)
    n = data.shape[0]
    whole = n - n % 4
    for i in range(0, whole, 4):
        partial[0, data[i]] += 1
        partial[1, data[i + 1]] += 1
        partial[2, data[i + 2]] += 1
        partial[3, data[i + 3]] += 1
    for i in range(whole, n):
        partial[0, data[i]] += 1
    for b in range(256):
        counts[b] += partial[0, b] + partial[1, b] + partial[2, b] + partial[3, b]


@njit(cache=True, nogil=True)
def first_byte_in(data: np.ndarray, members: np.ndarray) -> int:
    """The index of the first byte of 1-D uint8 ``data`` whose ``members`` entry (256 bools)
    is set, or -1: it stops there, where a mask of the whole tensor would not."""
    for i in range(data.shape[0]):
        if members[data[i]]:
            return i
    return -1
