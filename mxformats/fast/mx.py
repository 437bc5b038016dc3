"""MXFP4 fast paths: :func:`quantize_mx` (:func:`mxformats.quantize_mx`, profiles ``ocp`` and
``quark``) and :func:`dequantize_mx` (:func:`mxformats.dequantize_mx`, E2M1 to float32).
Spec: spec/mx.md.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from mxformats.arith import BF16
from mxformats.containers import containers
from mxformats.fast.chunks import (
    _E2M1_LOW_BITS,
    _EXPONENT_SHIFT,
    _F16,
    _F32,
    _MAGNITUDE,
    _NONFINITE_EXPONENT,
    BLOCK,
    CHUNK_BLOCKS,
    _float32_bits,
    _float_input,
    _parallel,
)
from mxformats.fast.codec import (
    _class_index,
    _class_members,
    _e2m1_pair_table,
    _scale_rows,
)
from mxformats.fast.fallback import FALLBACK, Fallback, fast_path
from mxformats.formats import E2M1, E8M0, Format
from mxformats.pairing import consumer_for
from mxformats.schemes import mx as reference_mx
from mxformats.schemes.mx import MXArray
from mxformats.schemes.mx.consumers import get_consumer, powf_scale
from mxformats.schemes.mx.elements import encode_elements
from mxformats.schemes.mx.producers import get_producer

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike, NDArray

__all__ = ["QUANTIZE_PROFILES", "dequantize_mx", "element_table", "quantize_mx"]

#: The profiles :func:`quantize_mx` computes itself.
QUANTIZE_PROFILES = ("ocp", "quark")

# -- MXFP4 quantize -------------------------------------------------------------------------


@cache
def element_table(profile: str) -> NDArray[np.uint8]:
    """The E2M1 code of every class of scaled float32 values (3 mantissa bits kept) under
    ``profile``'s element rules: ``mxformats.schemes.mx.elements.encode_elements`` on the class
    members. Only finite scaled values of magnitude below 8 ever index it."""
    producer = get_producer(profile)
    members = _class_members(_E2M1_LOW_BITS)
    finite = np.isfinite(members)
    q = np.where(finite, members, 0.0)
    codes = encode_elements(q, np.zeros(q.shape, dtype=bool), E2M1, producer.element_rules(_F32))
    table = np.where(finite, codes, 0).astype(np.uint8)
    table.flags.writeable = False
    return table


def _ocp_scales(amax_bits: NDArray[np.uint32]) -> tuple[NDArray[np.uint8], NDArray[np.uint32]]:
    """OCP FLOOR for finite float32 maxima (spec/mx.md; ``scale_rules.ocp_floor``): the exponent
    field E of amax gives ``floor(log2 amax) - 2 = E - 129``, clamped below at -127 (subnormal
    and zero maxima), so the byte is ``max(E, 2) - 2``; the multiplier ``2**(127 - byte)`` has
    the float32 exponent field ``254 - byte``."""
    exponent = (amax_bits >> _EXPONENT_SHIFT).astype(np.int32)
    byte = np.maximum(exponent, 2) - 2
    mult = (254 - byte).astype(np.uint32) << np.uint32(_EXPONENT_SHIFT)
    return byte.astype(np.uint8), mult.astype(np.uint32)


def _quark_scales(amax_bits: NDArray[np.uint32]) -> tuple[NDArray[np.uint8], NDArray[np.uint32]]:
    """Quark 0.13 export EVEN for finite float32 maxima (``scale_rules.quark_export``): the
    exponent field E' of ``amax + 2**21`` (mantissa rounded to one bit) gives ``e = E' - 129``
    clamped to [-127, 127] (E' = 255, an amax of at least 1.75 * 2**127, is +Inf: e = 127); the
    byte is ``max(e, -126) + 127`` and the multiplier ``2**-e`` (2**-127 is a float32
    subnormal)."""
    rounded = ((amax_bits + np.uint32(1 << 21)) >> _EXPONENT_SHIFT).astype(np.int32)
    e = np.where(rounded == _NONFINITE_EXPONENT, 127, np.maximum(rounded - 129, -127))
    byte = np.maximum(e, -126) + 127
    mult = np.where(e == 127, np.uint32(1 << 22), (127 - e).astype(np.uint32) << _EXPONENT_SHIFT)
    return byte.astype(np.uint8), mult.astype(np.uint32)


_SCALE_RULES = {"ocp": _ocp_scales, "quark": _quark_scales}


def _quantize_rows(
    x: NDArray[Any], packed: NDArray[np.uint8], scales: NDArray[np.uint8], profile: str,
    special: list[NDArray[np.intp]], lo: int, hi: int,
) -> None:
    """Quantize blocks ``lo:hi`` of ``x`` (blocks of 32 as rows) into ``packed`` and
    ``scales``; the indices of NaN/Inf blocks are appended to ``special``."""
    table = element_table(profile)
    scale_rule = _SCALE_RULES[profile]
    rows = min(CHUNK_BLOCKS, hi - lo)
    wide = np.empty((rows, BLOCK), dtype=np.uint32)
    q = np.empty((rows, BLOCK), dtype=np.uint32)
    sticky = np.empty((rows, BLOCK), dtype=np.uint32)
    codes = np.empty((rows, BLOCK), dtype=np.uint8)
    block_starts = np.arange(0, rows * BLOCK, BLOCK)
    for start in range(lo, hi, CHUNK_BLOCKS):
        stop = min(start + CHUNK_BLOCKS, hi)
        n = stop - start
        bits = _float32_bits(x[start:stop], wide[:n])
        magnitude = np.bitwise_and(bits, _MAGNITUDE, out=q[:n])
        # reduceat runs one flat loop; max(axis=1) pays a loop call per block.
        amax = np.maximum.reduceat(magnitude.reshape(-1), block_starts[:n])
        nonfinite = (amax >> _EXPONENT_SHIFT) == _NONFINITE_EXPONENT
        if nonfinite.any():
            special.append(start + np.flatnonzero(nonfinite))
            amax = np.where(nonfinite, 0, amax).astype(np.uint32)
        byte, mult = scale_rule(amax)
        scales[start:stop] = byte
        # q = x * 2**-e, |q| < 8 in a finite block. A float32 times a power of two is exact
        # unless the product falls below 2**-126; there it rounds (sign kept) and encodes as a
        # zero, as the exact quotient (ocp) and quark's own float32 quotient do.
        scaled = np.multiply(bits.view(np.float32), mult.view(np.float32)[:, None],
                             out=q[:n].view(np.float32)).view(np.uint32)
        _class_index(scaled, _E2M1_LOW_BITS, sticky[:n])
        np.take(table, scaled, out=codes[:n], mode="clip")
        pairs = codes[:n].view(np.uint16)  # element 2k in the low byte (little-endian)
        pairs |= pairs >> 4
        np.copyto(packed[start:stop], pairs, casting="unsafe")


@containers()
@fast_path(reference_mx.quantize_mx)
def quantize_mx(
    x: object, elem: Format, *, block_size: int, axis: int, profile: str, threads: int | None,
) -> MXArray | Fallback:
    """:func:`mxformats.quantize_mx`, the same bytes, fast for MXFP4 with ``ocp``/``quark``.

    Fast path: ``elem`` E2M1, ``block_size`` 32, a ``profile`` in :data:`QUANTIZE_PROFILES`,
    float32, bfloat16 or float16 numpy data (or torch tensor) whose length along ``axis`` is a
    multiple of 32, or even where the producer quantizes a short last block (``quark``: the
    block padded with zeros, as the producer pads it, and the padding's codes dropped).
    Anything else is passed to the reference unchanged. ``threads``: at most this many threads
    (default: :func:`~mxformats.fast.chunks.workers`). Spec: spec/mx.md.
    """
    data = _float_input(x)
    if (
        data is None
        or elem is not E2M1
        or block_size != BLOCK
        or profile not in QUANTIZE_PROFILES
        or data.dtype not in (_F32, BF16, _F16)
        or data.ndim == 0
        or not -data.ndim <= axis < data.ndim
        or (data.shape[axis] % BLOCK
            and (data.shape[axis] % 2 or not get_producer(profile).partial_blocks))
    ):
        return FALLBACK
    ax = axis % data.ndim
    moved = np.ascontiguousarray(np.moveaxis(data, ax, -1))
    n = moved.shape[-1]
    if n % BLOCK:  # the producer's short last block: its zero padding, cut off below
        padded = np.zeros((*moved.shape[:-1], n + -n % BLOCK), dtype=moved.dtype)
        padded[..., :n] = moved
        moved = padded
    blocks = moved.reshape(-1, BLOCK)
    count = blocks.shape[0]
    packed = np.empty((count, BLOCK // 2), dtype=np.uint8)
    scales = np.empty(count, dtype=np.uint8)
    special: list[NDArray[np.intp]] = []

    def work(lo: int, hi: int) -> None:
        with np.errstate(all="ignore"):  # NaN/Inf blocks are recomputed below
            _quantize_rows(blocks, packed, scales, profile, special, lo, hi)

    _parallel(count, work, threads, CHUNK_BLOCKS)
    if special:
        rows = np.concatenate(special)
        exact = reference_mx.quantize_mx(blocks[rows], E2M1, profile=profile)
        packed[rows], scales[rows] = exact.codes, exact.scales[:, 0]
    codes = np.moveaxis(packed.reshape(*moved.shape[:-1], -1)[..., : n // 2], -1, ax)
    block_scales = np.moveaxis(scales.reshape(*moved.shape[:-1], -1), -1, ax)
    return MXArray(np.ascontiguousarray(codes), np.ascontiguousarray(block_scales), E2M1,
                       BLOCK, ax, profile)


# -- MXFP4 dequantize -----------------------------------------------------------------------


def _exact_mx_consumer(profile: str | None) -> str | None:
    """The MX consumer ``profile`` names (None: the default) when the fast path's float32
    product is its result: ``ocp``, or an unclamped consumer that decodes the byte with
    ``powf_scale`` and computes in float32 or bfloat16 (Quark's HIP kernel,
    compressed-tensors): ``2**(b - 127)`` is exact in both types for every byte below 0xFF, and
    an E2M1 value (2 significant bits) times it is exact in both or overflows in both. Their
    0xFF blocks go to the reference. None for every other consumer (or an unknown name)."""
    try:
        name = reference_mx.DEFAULT_CONSUMER if profile is None else consumer_for("mx", profile)
        record = get_consumer(name)
        own = reference_mx.consumer_dtype(record, _F32)
    except ValueError:
        return None
    exact = record.scale is powf_scale and not record.clamp and own in (_F32, BF16)
    return name if name == "ocp" or exact else None


@containers(codes={"codes": "elem", "scales": E8M0})
@fast_path(reference_mx.dequantize_mx)
def dequantize_mx(
    codes: ArrayLike | MXArray, scales: ArrayLike | None, elem: Format, *, block_size: int,
    axis: int, profile: str | None, dtype: DTypeLike, threads: int | None,
) -> NDArray[np.generic] | Fallback:
    """:func:`mxformats.dequantize_mx`, the same bytes, fast for MXFP4 ``ocp`` to float32.

    Fast path: packed E2M1 uint8 codes and uint8 scales of matching shapes, ``block_size`` 32,
    consumer ``ocp`` or one whose result is the same float32 product (Quark's HIP bfloat16
    kernel, compressed-tensors: ``_exact_mx_consumer``; an MXArray is read by its
    producer's default consumer), ``dtype`` float32, a length along ``axis`` that is a
    multiple of 32. ``element * 2**(b - 127)`` is one float32 multiply of exact operands
    (2**-127 is a float32 subnormal), so it is the single rounding the reference specifies.
    Blocks with byte 0xFF go to the reference; so does every other input. Spec: spec/mx.md,
    "Consumers".
    """
    if isinstance(codes, MXArray):
        if scales is not None:
            return FALLBACK
        given = codes
        codes, scales, elem, block_size, axis = (
            given.codes, given.scales, given.elem, given.block_size, given.axis)
        profile = given.profile if profile is None else profile
    c = codes if isinstance(codes, np.ndarray) else None
    s = scales if isinstance(scales, np.ndarray) else None
    consumer = _exact_mx_consumer(profile)
    if (
        c is None
        or s is None
        or elem is not E2M1
        or block_size != BLOCK
        or consumer is None
        or np.dtype(dtype) != _F32
        or c.dtype != np.uint8
        or s.dtype != np.uint8
        or c.ndim == 0
        or c.ndim != s.ndim
        or not -c.ndim <= axis < c.ndim
        or c.shape[axis] % (BLOCK // 2)
        or s.shape != (*c.shape[:axis % c.ndim], c.shape[axis] // (BLOCK // 2),
                       *c.shape[axis % c.ndim + 1:])
    ):
        return FALLBACK
    ax = axis % c.ndim
    rows = np.ascontiguousarray(np.moveaxis(c, ax, -1)).reshape(-1, BLOCK // 2)
    byte = np.ascontiguousarray(np.moveaxis(s, ax, -1)).reshape(-1)
    # 2**(b - 127) as float32 bits: b << 23 for b >= 1, the subnormal 2**-127 for b = 0.
    factor = np.where(byte == 0, np.uint32(1 << 22), byte.astype(np.uint32) << 23)
    out = np.empty((rows.shape[0], BLOCK), dtype=np.float32)
    table = _e2m1_pair_table()

    def work(lo: int, hi: int) -> None:
        with np.errstate(over="ignore", invalid="ignore"):  # Inf is the specified result
            _scale_rows(rows, factor.view(np.float32), table, out, lo, hi)

    _parallel(rows.shape[0], work, threads, CHUNK_BLOCKS)
    nan_blocks = np.flatnonzero(byte == 0xFF)
    if nan_blocks.size:
        out[nan_blocks] = reference_mx.dequantize_mx(rows[nan_blocks], byte[nan_blocks, None],
                                                     profile=consumer)
    shape = (*np.moveaxis(c, ax, -1).shape[:-1], 2 * c.shape[ax])
    return np.ascontiguousarray(np.moveaxis(out.reshape(shape), -1, ax))


