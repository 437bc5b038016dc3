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
"""

from __future__ import annotations

import numpy as np
from numba import njit

from mxformats.fast.moments import LANES, PIECE, TERMS

__all__ = ["OK", "OTHER", "quantize_mx_bf16", "reproduce_mxfp4_bf16"]

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
    return np.uint32(word).view(np.float32)  # type: ignore[no-any-return]


@njit(cache=True)
def _quantize_block(src: np.ndarray, start: int, count: int, quark: bool, table: np.ndarray,
                    bits: np.ndarray, scaled: np.ndarray, codes: np.ndarray) -> int:
    """Quantize ``src[start:start + count]`` (BF16 bits; the rest of the 32 as zeros) into
    ``codes`` (32 E2M1 codes, one a byte); return the scale byte, or -1 for a block holding
    NaN or Inf (each profile's own rule: the reference computes it). ``bits``/``scaled``: 32
    uint32 of scratch, ``scaled`` a float32 view of ``bits``' twin."""
    amax = np.uint32(0)
    for k in range(_BLOCK):
        b = np.uint32(src[start + k]) << np.uint32(16) if k < count else np.uint32(0)
        bits[k] = b
        amax = max(amax, b & np.uint32(_MAGNITUDE))
    if amax >> np.uint32(23) == np.uint32(0xFF):
        return -1
    if quark:  # Quark 0.13 even rounding (mxformats.fast.mx._quark_scales)
        rounded = np.int64((amax + np.uint32(1 << 21)) >> np.uint32(23))
        e = 127 if rounded == 0xFF else max(rounded - 129, -127)
        byte = max(e, -126) + 127
        mult = np.uint32(1 << 22) if e == 127 else np.uint32(127 - e) << np.uint32(23)
    else:  # OCP floor (mxformats.fast.mx._ocp_scales)
        byte = max(np.int64(amax >> np.uint32(23)), 2) - 2
        mult = np.uint32(254 - byte) << np.uint32(23)
    m = _float32(mult)
    source = bits.view(np.float32)
    product = scaled.view(np.float32)
    for k in range(_BLOCK):  # a float32 product, as the numpy fast path's
        product[k] = source[k] * m
    for k in range(_BLOCK):
        q = scaled[k]
        index = (q | ((q & np.uint32(_LOW_MASK)) + np.uint32(_LOW_MASK))) >> np.uint32(_LOW_BITS)
        codes[k] = table[index]
    return byte


@njit(cache=True)
def quantize_mx_bf16(src: np.ndarray, quark: bool, table: np.ndarray, packed: np.ndarray,
                     scales: np.ndarray) -> bool:
    """Rows of BF16 bits ``src`` (uint16 ``[R, C]``, C even) to packed E2M1 ``packed``
    (``[R, C/2]``) and E8M0 ``scales`` (``[R, ceil(C/32)]``), profile ``quark`` (else
    ``ocp``); False (outputs partial) when a block holds NaN or Inf."""
    rows, cols = src.shape
    bits = np.empty(_BLOCK, dtype=np.uint32)
    scaled = np.empty(_BLOCK, dtype=np.uint32)
    codes = np.empty(_BLOCK, dtype=np.uint8)
    for r in range(rows):
        row = src[r]
        for blk in range(scales.shape[1]):
            start = blk * _BLOCK
            count = min(_BLOCK, cols - start)
            byte = _quantize_block(row, start, count, quark, table, bits, scaled, codes)
            if byte < 0:
                return False
            scales[r, blk] = byte
            for j in range(count // 2):
                packed[r, start // 2 + j] = codes[2 * j] | (codes[2 * j + 1] << np.uint8(4))
    return True


@njit(cache=True)
def _factor(byte: np.uint8) -> np.float32:
    """``2**(byte - 127)`` as float32, from its bits (``2**-127`` is the subnormal 1 << 22)."""
    word = np.uint32(1 << 22) if byte == 0 else np.uint32(byte) << np.uint32(23)
    return word.view(np.float32)  # type: ignore[no-any-return]


@njit(cache=True)
def _accumulate(xs: np.ndarray, ds: np.ndarray, base: int, kx: float, kd: float,
                local: np.ndarray, totals: np.ndarray) -> None:
    """Add the terms of elements ``base .. base + len(xs)`` (C order) to the lane sums:
    ``local`` the current piece's, flushed into ``totals`` at each multiple of PIECE (the
    definition's step 3; the last flush is the caller's). Groups of LANES aligned elements
    are one loop over the lanes."""
    n = xs.shape[0]
    j = 0
    while j < n:
        i = base + j
        if i % PIECE == 0 and i > 0:
            for t in range(_TERMS):
                for lane in range(LANES):
                    totals[t, lane] += local[t, lane]
                    local[t, lane] = 0.0
        if i % LANES == 0 and j + LANES <= n:
            for lane in range(LANES):
                x = np.float64(xs[j + lane])
                d = np.float64(ds[j + lane])
                cx = x - kx
                cd = d - kd
                e = d - x
                local[0, lane] += x * x
                local[1, lane] += e * e
                local[2, lane] += cx
                local[3, lane] += cd
                local[4, lane] += cx * cx
                local[5, lane] += cd * cd
                local[6, lane] += cx * cd
            j += LANES
        else:
            lane = i % LANES
            x = np.float64(xs[j])
            d = np.float64(ds[j])
            cx = x - kx
            cd = d - kd
            e = d - x
            local[0, lane] += x * x
            local[1, lane] += e * e
            local[2, lane] += cx
            local[3, lane] += cd
            local[4, lane] += cx * cx
            local[5, lane] += cd * cd
            local[6, lane] += cx * cd
            j += 1


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
    bits = np.empty(_BLOCK, dtype=np.uint32)
    scaled = np.empty(_BLOCK, dtype=np.uint32)
    ours = np.empty(_BLOCK, dtype=np.uint8)
    source = bits.view(np.float32)
    xs = np.empty(cols, dtype=np.float32)
    ds = np.empty(cols, dtype=np.float32)
    local = np.zeros((_TERMS, LANES), dtype=np.float64)
    if rows == 0 or cols == 0:
        return OK, False, False
    if scales[0, 0] == 0xFF:
        return OTHER, False, False
    kx = np.float64(_float32(np.uint32(src[0, 0]) << np.uint32(16)))
    kd = np.float64(np.float32(values[codes[0, 0] & 0xF] * _factor(scales[0, 0])))
    source_varies = False
    weight_varies = False
    for r in range(rows):
        row = src[r]
        for blk in range(nblocks):
            start = blk * _BLOCK
            count = min(_BLOCK, cols - start)
            byte = _quantize_block(row, start, count, quark, table, bits, scaled, ours)
            theirs = scales[r, blk]
            if byte < 0 or byte != theirs or theirs == 0xFF:
                return OTHER, False, False
            factor = _factor(theirs)
            for j in range(count // 2):
                packed = codes[r, start // 2 + j]
                if packed != ours[2 * j] | (ours[2 * j + 1] << np.uint8(4)):
                    return OTHER, False, False
                ds[start + 2 * j] = np.float32(values[packed & 0xF] * factor)
                ds[start + 2 * j + 1] = np.float32(values[packed >> 4] * factor)
            for k in range(count):
                xs[start + k] = source[k]
        for c in range(cols):
            d = ds[c]
            if d - d != 0:  # Inf (an overflowing product): no statistic
                return OTHER, False, False
            source_varies = source_varies or np.float64(xs[c]) != kx
            weight_varies = weight_varies or np.float64(d) != kd
        _accumulate(xs, ds, r * cols, kx, kd, local, totals)
    for t in range(_TERMS):
        for lane in range(LANES):
            totals[t, lane] += local[t, lane]
    return OK, source_varies, weight_varies
