"""Triton MX kernels: ``quantize_mx`` and ``dequantize_mx``, byte-identical to the reference.

Same names and arguments as :func:`mxformats.quantize_mx` / :func:`mxformats.dequantize_mx`
(``profile=`` included), torch tensors in and out. The argument checks, the layout and the
per-profile constants come from the backend-neutral front end :mod:`mxformats.kernels.mx_plan`;
the arithmetic is integer arithmetic on the bits (:mod:`._codec`) or single correctly rounded
float32 operations (never fused or flushed), so a GPU computes exactly what the interpreter
computes: the block maximum is an integer maximum of ``|x|``'s bits (a NaN propagates), the
scale is a table lookup, E4M3 elements are scaled by adding ``k`` to an exponent and rounded
by shifting the significand, and E2M1 elements of ordinary blocks are one float32 product by
``2**k`` and one addition that rounds (:func:`_e2m1_fast`).
Spec: ``spec/mx.md``. Example (``docs/kernels.md``)::

    codes, scales = quantize_mx(torch.tensor([6.0, 5.0] + [0.0] * 30, device="cuda"))
    # scales[0] == 0x7F; codes[0] == 0x67: 6 -> 0x7, 5.0 (a tie) -> 0x6 (4.0), packed
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl

from mxformats.formats import E2M1, Format
from mxformats.schemes.mx import MXArray
from mxformats.schemes.mx.consumers import CONSUMERS
from mxformats.schemes.mx.producers import PRODUCERS

from .. import mx_plan as plans
from ..mx_plan import KERNEL_ELEMENTS
from ._codec import decode_float, encode_float, round_magnitude
from ._e2m1 import E2M1_SIX_BITS, e2m1_magnitude_code
from .int4 import round_to_bfloat16

__all__ = ["SUPPORTED", "dequantize_mx", "quantize_mx"]

#: ``(element, profile)`` pairs per function, as ``tests/kernels/backends.py`` describes.
SUPPORTED: dict[str, tuple[tuple[str, str], ...]] = {
    "quantize_mx": tuple((fmt.name, name) for name, producer in PRODUCERS.items()
                         for fmt in KERNEL_ELEMENTS
                         if plans.quantize_claims(producer, fmt, microxcaling=True)),
    "dequantize_mx": tuple((fmt.name, name) for name in CONSUMERS for fmt in KERNEL_ELEMENTS
                           if plans.dequantize_claims(name, fmt)),
}

# The plan's scale-entry constants, as constexprs (a compiled kernel reads no other globals).
KIND_POW2 = tl.constexpr(plans.KIND_POW2)
KIND_ZERO = tl.constexpr(plans.KIND_ZERO)
KIND_NAN = tl.constexpr(plans.KIND_NAN)
KIND_NEG_NAN = tl.constexpr(plans.KIND_NEG_NAN)
KIND_INF = tl.constexpr(plans.KIND_INF)
SCALE_K_OFFSET = tl.constexpr(plans.SCALE_K_OFFSET)
FAST_K_MIN = tl.constexpr(plans.FAST_K_MIN)
SCALE_K_SHIFT = tl.constexpr(plans.SCALE_K_SHIFT)
SCALE_KIND_SHIFT = tl.constexpr(plans.SCALE_KIND_SHIFT)
SCALE_NAN_BLOCK_SHIFT = tl.constexpr(plans.SCALE_NAN_BLOCK_SHIFT)

#: Elements per program, and columns at most (a tile spans several rows when rows are short):
#: on a GPU 16 rows x 256 columns (K = 7168 is 28 tiles wide, none partly masked); under the
#: interpreter, where every launch costs tens of milliseconds whatever its size, up to 32K.
TILE_GPU, COLUMNS_GPU = 4096, 256
TILE_INTERPRETER = 1 << 15


# -- kernels --------------------------------------------------------------------------------


@triton.jit
def _scale_entries(amax: tl.tensor, table: tl.tensor, SRC_EBITS: tl.constexpr,
                   SRC_MBITS: tl.constexpr, SRC_BIAS: tl.constexpr) -> tl.tensor:
    """The packed scale entry of each block maximum (magnitude bits of the source type)."""
    if SRC_EBITS == 8:  # float32 and bfloat16: the float32 bits are a shift away
        as_f32 = amax << (23 - SRC_MBITS)
    else:
        _, s, exp, is_inf, is_nan = decode_float(amax, SRC_EBITS, SRC_MBITS, SRC_BIAS, 1)
        as_f32, _ = round_magnitude(s, exp, 23, 127, 0x7F7FFFFF, False)  # exact: wider type
        as_f32 = tl.where(is_inf, 0x7F800000, tl.where(is_nan, 0x7FC00000, as_f32))
    field = as_f32 >> 23
    threshold = tl.load(table + field)
    below = tl.load(table + 256 + field)
    at_or_above = tl.load(table + 512 + field)
    return tl.where((as_f32 & 0x7FFFFF) >= threshold, at_or_above, below)


@triton.jit
def _store_scales(amax: tl.tensor, table: tl.tensor, scales_out: tl.tensor, row: tl.tensor,
                  block: tl.tensor, rows: tl.tensor, blocks_per_row: tl.tensor,
                  SRC_EBITS: tl.constexpr, SRC_MBITS: tl.constexpr,
                  SRC_BIAS: tl.constexpr) -> tuple[tl.tensor, ...]:
    """Store the scale byte of each ``(row, block)`` from its block maximum ``amax`` (a
    ``[ROWS, BLOCKS]`` tile); returns the blocks' ``(k, kind, nan_block)``."""
    byte, k, kind, nan_block = _unpack_entries(
        _scale_entries(amax, table, SRC_EBITS, SRC_MBITS, SRC_BIAS))
    row2 = row[:, None]
    block2 = block[None, :]
    tl.store(scales_out + row2.to(tl.int64) * blocks_per_row + block2, byte.to(tl.uint8),
             mask=(row2 < rows) & (block2 < blocks_per_row))
    return k, kind, nan_block


@triton.jit
def _unpack_entries(entry: tl.tensor) -> tuple[tl.tensor, ...]:
    """A packed scale entry's ``(byte, k, kind, nan_block)`` (see ``mx_plan``)."""
    k = ((entry >> SCALE_K_SHIFT) & 0xFF) - SCALE_K_OFFSET
    kind = (entry >> SCALE_KIND_SHIFT) & 3
    return entry & 0xFF, k, kind, ((entry >> SCALE_NAN_BLOCK_SHIFT) & 1) == 1


@triton.jit
def _sign_and_specials(code: tl.tensor, sign: tl.tensor, is_inf: tl.tensor, is_nan: tl.tensor,
                       kind: tl.tensor, nan_block: tl.tensor, nonzero: tl.tensor,
                       E_BITS: tl.constexpr, ZERO_SIGN: tl.constexpr, INF_POS: tl.constexpr,
                       INF_NEG: tl.constexpr, NAN_POS: tl.constexpr, NAN_NEG: tl.constexpr,
                       GENERATED_NAN_NEGATIVE: tl.constexpr,
                       FACTOR_NAN_WINS: tl.constexpr) -> tl.tensor:
    """The element code with its sign (the profile's zero-sign rule), Inf and NaN rules and
    NaN-block zeroing applied to the magnitude ``code`` (``nonzero``: the scaled value is
    nonzero in the producer's arithmetic type)."""
    negative = sign == 1
    if ZERO_SIGN == 1:  # positive: a zero result is +0
        negative = negative & (code != 0)
    elif ZERO_SIGN == 2:  # sign-function: -0 only where q is nonzero in the arithmetic type
        negative = negative & nonzero
    code = code | tl.where(negative, 1 << (E_BITS - 1), 0)

    factor_nan = kind >= KIND_NAN
    code = tl.where(is_inf & (kind == KIND_POW2), tl.where(sign == 1, INF_NEG, INF_POS), code)
    q_nan = is_nan | factor_nan | (is_inf & (kind == KIND_ZERO))
    x_wins = is_nan
    if FACTOR_NAN_WINS:
        x_wins = is_nan & ~factor_nan
    nan_negative = tl.where(x_wins, sign == 1,
                            tl.where(factor_nan, kind == KIND_NEG_NAN, GENERATED_NAN_NEGATIVE))
    code = tl.where(q_nan, tl.where(nan_negative, NAN_NEG, NAN_POS), code)
    return tl.where(nan_block, 0, code)


@triton.jit
def _quantize_mx_kernel(
    src: tl.tensor, codes_out: tl.tensor, scales_out: tl.tensor, table: tl.tensor,
    elements: tl.tensor, rows: tl.tensor, n: tl.tensor, blocks_per_row: tl.tensor,
    ROWS: tl.constexpr, BLOCKS: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    SRC_BITS: tl.constexpr, SRC_EBITS: tl.constexpr, SRC_MBITS: tl.constexpr,
    SRC_BIAS: tl.constexpr,
    E_BITS: tl.constexpr, E_MBITS: tl.constexpr, E_BIAS: tl.constexpr, E_MAX_CODE: tl.constexpr,
    ROUND_AWAY: tl.constexpr,
    MICROXCALING_QUIRK: tl.constexpr, ZERO_SIGN: tl.constexpr,
    ARITH_ZERO_EXP: tl.constexpr, INF_POS: tl.constexpr, INF_NEG: tl.constexpr,
    NAN_POS: tl.constexpr, NAN_NEG: tl.constexpr, GENERATED_NAN_NEGATIVE: tl.constexpr,
    FACTOR_NAN_WINS: tl.constexpr, FAST_K_LIMIT: tl.constexpr,
) -> None:
    """One program: ``ROWS`` rows x ``BLOCKS`` blocks of ``BLOCK_SIZE`` elements, wider
    elements (E4M3FN): the scaled significand is rounded by a shift (``round_magnitude``)."""
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    block = tl.program_id(1) * BLOCKS + tl.arange(0, BLOCKS)
    row3 = row[:, None, None]
    col = block[None, :, None] * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)[None, None, :]
    inside = (row3 < rows) & (col < n)  # a short last block is padded with +0.0
    bits = tl.load(src + row3.to(tl.int64) * n + col, mask=inside, other=0).to(tl.int32)
    if SRC_BITS < 32:
        bits = bits & ((1 << SRC_BITS) - 1)  # the 16-bit load sign-extended
    sign, s, exp, is_inf, is_nan = decode_float(bits, SRC_EBITS, SRC_MBITS, SRC_BIAS, 1)

    # Block maximum of |x| as an integer maximum of the magnitude bits: a NaN's bits exceed
    # Inf's, so NaN propagates (torch.amax), whatever the order of the lanes.
    amax = tl.max(bits & ((1 << (SRC_BITS - 1)) - 1), axis=2)
    k, kind, nan_block = _store_scales(amax, table, scales_out, row, block, rows,
                                       blocks_per_row, SRC_EBITS, SRC_MBITS, SRC_BIAS)
    k = k[:, :, None]
    kind = kind[:, :, None]
    nan_block = nan_block[:, :, None]

    # q = x * 2**k, rounded once into the element format, saturating.
    scaled = tl.where(kind == KIND_ZERO, 0, s)
    code, overflow = round_magnitude(scaled, exp + k, E_MBITS, E_BIAS, E_MAX_CODE, ROUND_AWAY)
    code = tl.where(overflow, E_MAX_CODE, code)
    if MICROXCALING_QUIRK:  # q = (2**24 - 1) * 2**-(E_BIAS + E_MBITS + 24)
        quirk = (scaled == 0xFFFFFF) & (exp + k == -(E_BIAS + E_MBITS + 24))
        code = tl.where(quirk, 1, code)
    below = ARITH_ZERO_EXP - (exp + k)  # |q| > 2**ARITH_ZERO_EXP  <=>  s > 2**below
    nonzero = (scaled > 0) \
        & ((below < 0) | (scaled > (1 << tl.minimum(tl.maximum(below, 0), 25))))
    code = _sign_and_specials(code, sign, is_inf, is_nan, kind, nan_block, nonzero, E_BITS,
                              ZERO_SIGN, INF_POS, INF_NEG, NAN_POS, NAN_NEG,
                              GENERATED_NAN_NEGATIVE, FACTOR_NAN_WINS)
    tl.store(codes_out + row3.to(tl.int64) * n + col, code.to(tl.uint8), mask=inside)


@triton.jit
def _as_float32(magnitude: tl.tensor, SRC_BITS: tl.constexpr,
                SRC_EBITS: tl.constexpr) -> tl.tensor:
    """The float32 value of the input type's magnitude bits (exact: a wider type)."""
    if SRC_EBITS == 8:  # float32 and bfloat16: the float32 bits are a shift away
        wide = (magnitude << (32 - SRC_BITS)).to(tl.float32, bitcast=True)
    else:  # float16
        wide = magnitude.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    return wide


@triton.jit
def _e2m1_fast(bits: tl.tensor, factor: tl.tensor, nonzero_at: tl.tensor,
               quirk_at: tl.tensor, SRC_BITS: tl.constexpr, SRC_EBITS: tl.constexpr,
               E_BITS: tl.constexpr, ROUND_AWAY: tl.constexpr,
               MICROXCALING_QUIRK: tl.constexpr, ZERO_SIGN: tl.constexpr) -> tl.tensor:
    """The signed 4-bit code of the input bits ``bits`` in a block of finite values with a
    power-of-two factor ``factor`` (float32, ``2**k`` for ``k`` in the plan's fast range;
    ``nonzero_at``/``quirk_at``: the block's last two element-table entries).

    ``q = |x| * 2**k`` is one float32 product, clamped to 6.0 on the bits, and coded by
    :func:`~._e2m1.e2m1_magnitude_code` (ties up where the profile rounds them away).
    :func:`mxformats.kernels.mx_plan.fast_k_limit` checks these steps against the reference's
    thresholds for every ``k``."""
    magnitude = bits & ((1 << (SRC_BITS - 1)) - 1)
    q = (_as_float32(magnitude, SRC_BITS, SRC_EBITS) * factor).to(tl.int32, bitcast=True)
    code = e2m1_magnitude_code(tl.minimum(q, E2M1_SIX_BITS), ROUND_AWAY)
    if MICROXCALING_QUIRK:
        code = tl.where(magnitude == quirk_at, 1, code)
    sign = (bits >> (SRC_BITS - E_BITS)) & (1 << (E_BITS - 1))
    if ZERO_SIGN == 1:  # positive: a zero result is +0
        sign = tl.where(code != 0, sign, 0)
    elif ZERO_SIGN == 2:  # sign-function: -0 only where q is nonzero in the arithmetic type
        sign = tl.where(magnitude >= nonzero_at, sign, 0)
    return code | sign


@triton.jit
def _e2m1_general(bits: tl.tensor, kind: tl.tensor, nan_block: tl.tensor, row_of_k: tl.tensor,
                  SRC_BITS: tl.constexpr, SRC_EBITS: tl.constexpr, SRC_MBITS: tl.constexpr,
                  SRC_BIAS: tl.constexpr, E_BITS: tl.constexpr, E_MAX_CODE: tl.constexpr,
                  MICROXCALING_QUIRK: tl.constexpr, ZERO_SIGN: tl.constexpr,
                  INF_POS: tl.constexpr, INF_NEG: tl.constexpr, NAN_POS: tl.constexpr,
                  NAN_NEG: tl.constexpr, GENERATED_NAN_NEGATIVE: tl.constexpr,
                  FACTOR_NAN_WINS: tl.constexpr) -> tl.tensor:
    """The signed 4-bit code of the input bits ``bits`` in any block: the magnitude code is the
    number of the plan's thresholds (``row_of_k``: the block's element-table row) at or below
    ``|x|``; then the zero, Inf and NaN rules."""
    magnitude = bits & ((1 << (SRC_BITS - 1)) - 1)
    code = tl.zeros_like(magnitude)
    for level in tl.static_range(E_MAX_CODE):
        code += (magnitude >= tl.load(row_of_k + level)).to(tl.int32)
    if MICROXCALING_QUIRK:
        code = tl.where(magnitude == tl.load(row_of_k + E_MAX_CODE + 1), 1, code)
    code = tl.where(kind == KIND_ZERO, 0, code)
    nonzero = (magnitude >= tl.load(row_of_k + E_MAX_CODE)) & (kind != KIND_ZERO)
    sign, _, _, is_inf, is_nan = decode_float(bits, SRC_EBITS, SRC_MBITS, SRC_BIAS, 1)
    return _sign_and_specials(code, sign, is_inf, is_nan, kind, nan_block, nonzero, E_BITS,
                              ZERO_SIGN, INF_POS, INF_NEG, NAN_POS, NAN_NEG,
                              GENERATED_NAN_NEGATIVE, FACTOR_NAN_WINS)


@triton.jit
def _quantize_mx4_kernel(
    src: tl.tensor, codes_out: tl.tensor, scales_out: tl.tensor, table: tl.tensor,
    elements: tl.tensor, rows: tl.tensor, pairs: tl.tensor, blocks_per_row: tl.tensor,
    ROWS: tl.constexpr, BLOCKS: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    SRC_BITS: tl.constexpr, SRC_EBITS: tl.constexpr, SRC_MBITS: tl.constexpr,
    SRC_BIAS: tl.constexpr,
    E_BITS: tl.constexpr, E_MBITS: tl.constexpr, E_BIAS: tl.constexpr, E_MAX_CODE: tl.constexpr,
    ROUND_AWAY: tl.constexpr,
    MICROXCALING_QUIRK: tl.constexpr, ZERO_SIGN: tl.constexpr,
    ARITH_ZERO_EXP: tl.constexpr, INF_POS: tl.constexpr, INF_NEG: tl.constexpr,
    NAN_POS: tl.constexpr, NAN_NEG: tl.constexpr, GENERATED_NAN_NEGATIVE: tl.constexpr,
    FACTOR_NAN_WINS: tl.constexpr, FAST_K_LIMIT: tl.constexpr,
) -> None:
    """One program: ``ROWS`` rows x ``BLOCKS`` blocks of ``BLOCK_SIZE`` 4-bit elements, packed
    two per byte (element 2j low). ``src`` is the input seen as words of two elements (int32
    for 16-bit input, int64 for float32), so element 2j and 2j + 1 arrive apart, as the
    packing wants them, from one (vector) load. ``pairs``: words per row (half the row).

    A tile whose blocks all hold finite values with a power-of-two factor ``2**k``,
    ``FAST_K_MIN <= k < FAST_K_LIMIT`` (the plan's), codes every element by one float32
    product and one addition (:func:`_e2m1_fast`); any other tile takes the general path
    (threshold compares, Inf/NaN/zero rules)."""
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    block = tl.program_id(1) * BLOCKS + tl.arange(0, BLOCKS)
    row3 = row[:, None, None]
    pair = block[None, :, None] * (BLOCK_SIZE // 2) + tl.arange(0, BLOCK_SIZE // 2)[None, None, :]
    inside = (row3 < rows) & (pair < pairs)  # a short last block is padded with +0.0
    words = tl.load(src + row3.to(tl.int64) * pairs + pair, mask=inside, other=0)
    low_mask = (1 << SRC_BITS) - 1
    even = (words & low_mask).to(tl.int32)
    odd = ((words >> SRC_BITS) & low_mask).to(tl.int32)

    # Block maximum of |x| as an integer maximum of the magnitude bits: a NaN's bits exceed
    # Inf's, so NaN propagates (torch.amax), whatever the order of the lanes.
    magnitude_mask = (1 << (SRC_BITS - 1)) - 1
    amax = tl.max(tl.maximum(even & magnitude_mask, odd & magnitude_mask), axis=2)
    k, kind, nan_block = _store_scales(amax, table, scales_out, row, block, rows,
                                       blocks_per_row, SRC_EBITS, SRC_MBITS, SRC_BIAS)
    general = (kind != KIND_POW2) | nan_block | (k < FAST_K_MIN) | (k >= FAST_K_LIMIT) \
        | ((amax >> SRC_MBITS) == (1 << SRC_EBITS) - 1)
    row_of_k = elements + (k[:, :, None] + SCALE_K_OFFSET) * (E_MAX_CODE + 2)
    if tl.max(general.to(tl.int32)) == 0:
        factor = ((k + 127) << 23).to(tl.float32, bitcast=True)[:, :, None]
        nonzero_at = tl.load(row_of_k + E_MAX_CODE)
        quirk_at = tl.load(row_of_k + E_MAX_CODE + 1)
        low = _e2m1_fast(even, factor, nonzero_at, quirk_at, SRC_BITS, SRC_EBITS, E_BITS,
                         ROUND_AWAY, MICROXCALING_QUIRK, ZERO_SIGN)
        high = _e2m1_fast(odd, factor, nonzero_at, quirk_at, SRC_BITS, SRC_EBITS, E_BITS,
                          ROUND_AWAY, MICROXCALING_QUIRK, ZERO_SIGN)
    else:
        kind3 = kind[:, :, None]
        nan_block3 = nan_block[:, :, None]
        low = _e2m1_general(even, kind3, nan_block3, row_of_k, SRC_BITS, SRC_EBITS, SRC_MBITS,
                            SRC_BIAS, E_BITS, E_MAX_CODE, MICROXCALING_QUIRK, ZERO_SIGN, INF_POS,
                            INF_NEG, NAN_POS, NAN_NEG, GENERATED_NAN_NEGATIVE, FACTOR_NAN_WINS)
        high = _e2m1_general(odd, kind3, nan_block3, row_of_k, SRC_BITS, SRC_EBITS, SRC_MBITS,
                             SRC_BIAS, E_BITS, E_MAX_CODE, MICROXCALING_QUIRK, ZERO_SIGN,
                             INF_POS, INF_NEG, NAN_POS, NAN_NEG, GENERATED_NAN_NEGATIVE,
                             FACTOR_NAN_WINS)
    tl.store(codes_out + row3.to(tl.int64) * pairs + pair, (low | (high << 4)).to(tl.uint8),
             mask=inside)


#: Twice each E2M1 magnitude (0, 1, 2, 3, 4, 6, 8, 12), a nibble each from the lowest:
#: 0xC8643210 as a signed 32-bit constant.
_TWICE_E2M1: tl.constexpr = tl.constexpr(0xC8643210 - (1 << 32))


@triton.jit
def _dequantize_mx_kernel(
    codes: tl.tensor, scales: tl.tensor, table: tl.tensor, half_factors: tl.tensor,
    out: tl.tensor, rows: tl.tensor, n: tl.tensor, blocks_per_row: tl.tensor,
    ROWS: tl.constexpr, COLS: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    E_BITS: tl.constexpr, E_EBITS: tl.constexpr, E_MBITS: tl.constexpr, E_BIAS: tl.constexpr,
    E_SPECIALS: tl.constexpr,
    OWN_BITS: tl.constexpr, OWN_EBITS: tl.constexpr, OWN_MBITS: tl.constexpr,
    OWN_BIAS: tl.constexpr, OWN_MAX: tl.constexpr, OWN_INF: tl.constexpr, OWN_NAN: tl.constexpr,
    WIDEN: tl.constexpr, OUT_BITS: tl.constexpr, OUT_EBITS: tl.constexpr,
    OUT_MBITS: tl.constexpr, OUT_BIAS: tl.constexpr, OUT_MAX: tl.constexpr,
    OUT_INF: tl.constexpr, OUT_NAN: tl.constexpr,
    CLAMP: tl.constexpr, NAN_ON_FF: tl.constexpr, PRODUCT: tl.constexpr,
) -> None:
    """One program: ``ROWS`` x ``COLS`` output elements. ``PRODUCT`` (the plan's
    :attr:`~mxformats.kernels.mx_plan.DequantizePlan.product`): each E2M1 element is one
    float32 product, ``f32(2 |e|)`` (from the nibble table ``0xC8643210``) times the scale
    byte's half factor, signed, rounded once to the consumer's type and written as ``out``."""
    row = (tl.program_id(0) * ROWS + tl.arange(0, ROWS))[:, None]
    col = (tl.program_id(1) * COLS + tl.arange(0, COLS))[None, :]
    inside = (row < rows) & (col < n)
    row64 = row.to(tl.int64)
    if E_BITS == 4:
        byte = tl.load(codes + row64 * (n // 2) + col // 2, mask=inside, other=0).to(tl.int32)
        code = (byte >> ((col & 1) * 4)) & 0xF
    else:
        code = tl.load(codes + row64 * n + col, mask=inside, other=0).to(tl.int32)
    scale_byte = tl.load(scales + row64 * blocks_per_row + col // BLOCK_SIZE, mask=inside,
                         other=0).to(tl.int32)
    if PRODUCT:
        # 0xC8643210 as int32: the arithmetic shift's sign bits fall outside the nibble
        nibbles = tl.full(code.shape, _TWICE_E2M1, tl.int32)
        twice = ((nibbles >> ((code & 7) * 4)) & 0xF).to(tl.float32)
        product = twice * tl.load(half_factors + scale_byte)
        product = tl.where((code & 8) != 0, -product, product)
        if OWN_BITS == 16 and OWN_EBITS == 8:
            product = round_to_bfloat16(product)
        elif OWN_BITS == 16:
            product = product.to(tl.float16).to(tl.float32)
        if OUT_BITS == 32:
            bits = product.to(tl.int32, bitcast=True)
        elif OUT_EBITS == 8:
            bits = product.to(tl.int32, bitcast=True) >> 16
        else:
            bits = product.to(tl.float16).to(tl.int16, bitcast=True).to(tl.int32)
        bits = tl.where(product != product, OUT_NAN, bits)
        tl.store(out + row64 * n + col, bits.to(out.dtype.element_ty), mask=inside)
        return
    _, k, kind, _ = _unpack_entries(tl.load(table + scale_byte))

    # element * scale, rounded once into the consumer's type (overflow: Inf).
    sign, s, exp, is_inf, is_nan = decode_float(code, E_EBITS, E_MBITS, E_BIAS, E_SPECIALS)
    magnitude, overflow = round_magnitude(tl.where(kind == KIND_POW2, s, 0), exp + k,
                                          OWN_MBITS, OWN_BIAS, OWN_MAX, False)
    zero = (s == 0) & ~is_inf & ~is_nan
    infinite = overflow | (is_inf & (kind != KIND_ZERO)) | ((kind == KIND_INF) & ~zero)
    nan = is_nan | (kind == KIND_NAN) | ((kind == KIND_INF) & zero) \
        | ((kind == KIND_ZERO) & is_inf)
    magnitude = tl.where(infinite, OWN_INF, magnitude)
    if CLAMP:
        magnitude = tl.minimum(magnitude, OWN_MAX)
    if NAN_ON_FF:
        nan = nan | (scale_byte == 0xFF)
    value = tl.where(nan, OWN_NAN, magnitude | tl.where(sign == 1, 1 << (OWN_BITS - 1), 0))
    if WIDEN:  # exact: the requested type holds every value of the consumer's
        sign, s, exp, is_inf, is_nan = decode_float(value, OWN_EBITS, OWN_MBITS, OWN_BIAS, 1)
        value = encode_float(sign, s, exp, is_inf, is_nan, OUT_MBITS, OUT_BIAS,
                             1 << (OUT_BITS - 1), OUT_MAX, False, OUT_INF, OUT_NAN, True, False)
    tl.store(out + row64 * n + col, value.to(out.dtype.element_ty), mask=inside)


# -- launching ------------------------------------------------------------------------------


def _tile(t: torch.Tensor, count: int, block_size: int) -> tuple[int, int]:
    """``(rows, columns)`` per program for rows of ``count`` elements (powers of two; columns
    a multiple of ``block_size``)."""
    tile, widest = (TILE_INTERPRETER, TILE_INTERPRETER) if t.device.type == "cpu" \
        else (TILE_GPU, COLUMNS_GPU)
    columns = max(_pow2_at_most(count, widest), block_size)
    return max(1, tile // columns), columns


_DEVICE_TABLES: dict[tuple[int, torch.device], torch.Tensor] = {}
#: The half factors a plan without :attr:`~mxformats.kernels.mx_plan.DequantizePlan.product`
#: passes (never read).
_NO_FACTORS = np.zeros(1, dtype=np.float32)


def _table_on(table: np.ndarray, device: torch.device) -> torch.Tensor:
    """A plan's table as a flat int32 tensor on ``device``, copied once (plans are cached, so
    a table's id is never reused)."""
    key = (id(table), device)
    if key not in _DEVICE_TABLES:
        _DEVICE_TABLES[key] = torch.from_numpy(np.ascontiguousarray(table).reshape(-1)).to(device)
    return _DEVICE_TABLES[key]


def _launch(kernel: Any, grid: tuple[int, int], t: torch.Tensor, *args: Any,
            **meta: Any) -> None:
    """``kernel[grid](*args, **meta)`` without floating-point contraction; on the interpreter
    numpy's warnings are off (masked lanes compute values that are never stored)."""
    if t.device.type == "cpu":
        with np.errstate(all="ignore"):
            kernel[grid](*args, enable_fp_fusion=False, **meta)
    else:
        with torch.cuda.device(t.device):
            kernel[grid](*args, enable_fp_fusion=False, **meta)


def quantize_constants(plan: plans.QuantizePlan) -> dict[str, Any]:
    """The compile-time constants of :func:`_quantize_mx_kernel` for ``plan`` (all but the
    tile shape)."""
    return dict(
        BLOCK_SIZE=plan.block_size,
        SRC_BITS=plan.source.bits, SRC_EBITS=plan.source.ebits, SRC_MBITS=plan.source.mbits,
        SRC_BIAS=plan.source.bias,
        E_BITS=plan.elem.bits, E_MBITS=plan.elem.mbits, E_BIAS=plan.elem.bias,
        E_MAX_CODE=plan.elem.max_code,
        ROUND_AWAY=plan.round_away, MICROXCALING_QUIRK=plan.microxcaling_quirk,
        ZERO_SIGN=plan.zero_sign, ARITH_ZERO_EXP=plan.arith_zero_exp,
        INF_POS=plan.inf_codes[0], INF_NEG=plan.inf_codes[1],
        NAN_POS=plan.nan_codes[0], NAN_NEG=plan.nan_codes[1],
        GENERATED_NAN_NEGATIVE=plan.generated_nan_negative,
        FACTOR_NAN_WINS=plan.factor_nan_wins, FAST_K_LIMIT=plan.fast_k_limit,
    )


def quantize_kernel(plan: plans.QuantizePlan) -> Any:
    """The kernel for ``plan``: packed 4-bit elements or wider ones."""
    return _quantize_mx4_kernel if plan.elem.bits == 4 else _quantize_mx_kernel


def _as_pairs(source: torch.Tensor) -> torch.Tensor:
    """A contiguous ``(rows, n)`` input (``n`` even) as ``(rows, n // 2)`` words of two
    elements (element 2j in the low half: little-endian, as every GPU and x86-64); copied
    first where its start is not aligned to a word."""
    word = torch.int32 if source.element_size() == 2 else torch.int64
    if source.data_ptr() % (2 * source.element_size()):
        source = source.clone()
    return source.view({2: torch.int16, 4: torch.int32}[source.element_size()]).view(word)


def dequantize_constants(plan: plans.DequantizePlan) -> dict[str, Any]:
    """The compile-time constants of :func:`_dequantize_mx_kernel` for ``plan`` (all but the
    tile shape)."""
    return dict(
        BLOCK_SIZE=plan.block_size,
        E_BITS=plan.elem.bits, E_EBITS=plan.elem.ebits, E_MBITS=plan.elem.mbits,
        E_BIAS=plan.elem.bias, E_SPECIALS=plan.elem.specials,
        OWN_BITS=plan.own.bits, OWN_EBITS=plan.own.ebits, OWN_MBITS=plan.own.mbits,
        OWN_BIAS=plan.own.bias, OWN_MAX=plan.own.max_code, OWN_INF=plan.own.inf_code,
        OWN_NAN=plan.own.nan_code,
        WIDEN=plan.own != plan.out, OUT_BITS=plan.out.bits, OUT_EBITS=plan.out.ebits,
        OUT_MBITS=plan.out.mbits,
        OUT_BIAS=plan.out.bias, OUT_MAX=plan.out.max_code, OUT_INF=plan.out.inf_code,
        OUT_NAN=plan.out.nan_code,
        CLAMP=plan.clamp, NAN_ON_FF=plan.nan_on_ff, PRODUCT=plan.product,
    )


def _pow2_at_most(value: int, limit: int) -> int:
    """The power of two at or above ``value``, at most ``limit`` (a power of two)."""
    return max(1, min(int(triton.next_power_of_2(max(value, 1))), limit))


def quantize_mx(x: torch.Tensor, elem: Format | str = E2M1, *, block_size: int = 32,
                axis: int = -1, profile: str = "ocp") -> MXArray:
    """Quantize ``x`` to MX blocks along ``axis`` exactly as ``mxformats.quantize_mx``
    with the same profile does (spec/mx.md).

    ``x``: a float32, bfloat16 or float16 tensor of any shape and strides (the quantized axis
    is copied contiguous first). Profiles: :data:`SUPPORTED` ``["quantize_mx"]``; another
    registered profile raises ``NotImplementedError``. Returns the reference's
    :class:`~mxformats.schemes.mx.MXArray` (unpacks as ``codes, scales``), its uint8 tensors on
    ``x``'s device laid out as the reference's.
    """
    call = plans.prepare_quantize(x, elem, block_size=block_size, axis=axis, profile=profile,
                                  claims=SUPPORTED["quantize_mx"])
    plan = call.plan
    rows, n = call.source.shape
    if rows and n:
        blocks_per_row = call.scales.shape[1]
        rows_per_program, columns = _tile(call.source, n, block_size)
        rows_per_program = _pow2_at_most(rows, rows_per_program)
        grid = (triton.cdiv(rows, rows_per_program), triton.cdiv(n, columns))
        source = _as_pairs(call.source) if plan.elem.bits == 4 else call.source
        _launch(
            quantize_kernel(plan), grid, call.source,
            source, call.codes, call.scales,
            _table_on(plan.scale_table, call.source.device),
            _table_on(plan.element_table, call.source.device), rows,
            n // 2 if plan.elem.bits == 4 else n, blocks_per_row,
            ROWS=rows_per_program, BLOCKS=columns // block_size, **quantize_constants(plan),
        )
    return call.finish()


def dequantize_mx(codes: torch.Tensor, scales: torch.Tensor | None = None,
                  elem: Format | str = E2M1, *, block_size: int = 32, axis: int = -1,
                  profile: str = "ocp", dtype: Any = torch.float32) -> torch.Tensor:
    """Decode MX blocks exactly as ``mxformats.dequantize_mx`` with the same consumer
    profile does (spec/mx.md, "Consumers").

    ``codes``/``scales``: uint8 tensors as :func:`quantize_mx` returns them. ``dtype``: float32,
    bfloat16 or float16 (torch or numpy), the consumer's own type or an exactly wider one.
    Profiles: :data:`SUPPORTED` ``["dequantize_mx"]``. Returns a tensor of ``dtype`` on the
    codes' device.
    """
    call = plans.prepare_dequantize(codes, scales, elem, block_size=block_size, axis=axis,
                                    profile=profile, dtype=dtype,
                                    claims=SUPPORTED["dequantize_mx"])
    plan = call.plan
    rows, n = call.out.shape
    if rows and n:
        rows_per_program, cols = _tile(call.out, n, block_size)
        rows_per_program = _pow2_at_most(rows, rows_per_program)
        grid = (triton.cdiv(rows, rows_per_program), triton.cdiv(n, cols))
        _launch(
            _dequantize_mx_kernel, grid, call.out,
            call.codes, call.scales, _table_on(plan.scale_table, call.out.device),
            _table_on(_NO_FACTORS if plan.half_factors is None else plan.half_factors,
                      call.out.device), call.out,
            rows, n, call.scales.shape[1],
            ROWS=rows_per_program, COLS=cols, **dequantize_constants(plan),
        )
    return call.finish()
