"""Fast CPU paths for large arrays, byte-identical to the references they stand in for.

Each function has its reference's signature (plus ``threads``, the most threads it may use,
where it uses threads; the dequantizers, :func:`pack_int4`, :func:`unpack_int4`,
:func:`quantize_int4`, :func:`quantize_fp8` and :func:`encode` take it from the reference
itself, defaults included) and returns the same bytes. Inputs outside a fast path go
to the reference itself, so every call is defined exactly as the reference defines it, errors
included. Verified by ``tests/test_fast.py`` (the harness's ``check_quantizer`` /
``check_dequantizer`` / ``check_int4_quantizer`` and exhaustive sweeps over the classes each
table is built on); measured in ``docs/benchmarks.md``.

- :func:`quantize_mx` (:func:`mxformats.quantize_mx`): E2M1 blocks of 32, profiles ``ocp``
  and ``quark`` (with Quark's short last block), float32 / bfloat16 / float16 input.
- :func:`dequantize_mx` (:func:`mxformats.dequantize_mx`): E2M1, consumer ``ocp``, float32.
- :func:`encode` (:func:`mxformats.codec.encode`): E4M3FN, E4M3FNUZ, E5M2 from float32 /
  bfloat16 / float16, every rounding and overflow mode; :func:`decode`
  (:func:`mxformats.codec.decode`): 8-bit formats (FP8, E8M0), every output type.
- :func:`pack_int4`, :func:`unpack_int4` (:mod:`mxformats.schemes.int4`): layouts
  ``compressed-tensors`` and ``quark``, whole words.
- :func:`dequantize_int4` (:func:`mxformats.dequantize_int4`): both profiles, float32
  output.
- :func:`quantize_int4` (:func:`mxformats.quantize_int4`): both profiles (compressed-tensors,
  Quark), per group or per channel, float32 / bfloat16 input; the scales are the reference's,
  each quotient one float32 operation and a table lookup.
- :func:`quantize_fp8` (:func:`mxformats.schemes.fp8.quantize_fp8`): the producer profile
  ``static`` (Quark's per-tensor stage), float32 / bfloat16 input.
- :func:`quantize_w4a8` (:func:`mxformats.schemes.w4a8.quantize_w4a8`): the reference's
  stages (:func:`~mxformats.schemes.w4a8.quantize_w4a8_with`) done by the fast paths;
  :func:`dequantize_w4a8` (:func:`mxformats.schemes.w4a8.dequantize_w4a8`): vLLM's folded
  scales, float32 output.
- :func:`quantize_fp8_block` (:func:`mxformats.schemes.fp8_block.quantize_fp8_block`): every
  profile; the reference on cache-sized pieces of whole tiles, on threads, with the element
  cast by :func:`encode`.
- :func:`quantize_nvfp4` (:func:`mxformats.schemes.nvfp4.quantize_nvfp4`): both profiles; the
  block maxima from the float32 bits, the scales the reference's
  (:func:`~mxformats.schemes.nvfp4.nvfp4_scales`), the E2M1 codes of the float32 quotients a
  table lookup.
- :func:`dequantize_fp8_block` (:func:`mxformats.schemes.fp8_block.dequantize_fp8_block`):
  every profile, partial edge tiles, float32 output.
- :func:`dequantize_nvfp4` (:func:`mxformats.schemes.nvfp4.dequantize_nvfp4`): every consumer,
  packed or one code a byte, any axis, float32 output.

Threads: ``threads`` (default :func:`workers`: the environment variable ``MXFORMATS_THREADS``
when set, else the CPUs this process may run on). A process pool that runs one task per core
sets ``MXFORMATS_THREADS=1`` in its workers; every fast path the validator's descriptors call
(:attr:`mxformats.validate.descriptors.base.Descriptor.quantizer`) then runs on one thread.
:data:`REFERENCES` maps each fast path to its reference.

How. A float32 value's code depends only on its top bits and on whether the rest
is zero: the class index ``(bits >> k) | (any of the low k bits set)`` rounds to odd at
``mbits + 2`` mantissa bits, which keeps everything a rounding to ``mbits`` bits looks at. One
table lookup per value then gives the code; each table is built by running the reference's own
encoder on one member of every class. The quotient tables (:func:`int4_table`,
:func:`fp8_table`) keep 9 mantissa bits: a producer that rounds its float32 quotient to
bfloat16 and then to an integer or an FP8 code is one lookup. MX scales come from the integer
exponent field of the block maximum and scaling is one float32 multiply by a power of two
(exact wherever it matters, see ``_quantize_rows``). Blocks holding NaN or ±Inf, which every
profile treats its own way, are recomputed by the reference (blocks are independent). Work is
cut into cache-sized chunks with preallocated scratch, handed to threads in tasks of a few
chunks (numpy releases the GIL in these loops). The byte views assume little-endian words; on
a big-endian machine every call goes to the reference.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache, wraps
from itertools import pairwise
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from mxformats import codec as reference_codec
from mxformats.arith import BF16, canonical_nan, divide_in
from mxformats.containers import containers, tensor_to_numpy
from mxformats.formats import E2M1, E4M3FN, E8M0, Format
from mxformats.pairing import consumer_for
from mxformats.schemes import fp8 as reference_fp8
from mxformats.schemes import fp8_block as reference_fp8_block
from mxformats.schemes import int4 as reference_int4
from mxformats.schemes import mx as reference_mx
from mxformats.schemes import nvfp4 as reference_nvfp4
from mxformats.schemes import w4a8 as reference_w4a8
from mxformats.schemes.fp8_block import FP8BlockArray
from mxformats.schemes.int4 import Int4Array
from mxformats.schemes.mx import MXArray
from mxformats.schemes.mx.consumers import get_consumer, powf_scale
from mxformats.schemes.mx.elements import encode_elements
from mxformats.schemes.mx.producers import get_producer
from mxformats.schemes.nvfp4 import NVFP4Array
from mxformats.schemes.w4a8 import W4A8, W4A8Stages

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike, NDArray

__all__ = [
    "QUANTIZE_PROFILES", "REFERENCES", "THREADS_VARIABLE", "code_table", "decode",
    "dequantize_fp8_block", "dequantize_int4", "dequantize_mx", "dequantize_nvfp4",
    "dequantize_w4a8",
    "element_table", "encode", "fp8_table", "int4_table", "nvfp4_code_table", "pack_int4",
    "quantize_fp8", "quantize_fp8_block", "quantize_int4", "quantize_mx", "quantize_nvfp4",
    "quantize_w4a8", "unpack_int4", "workers",
]

#: Blocks of 32 handled per chunk: 2048 blocks = 256 KiB of float32, so a chunk's input and its
#: scratch stay in a core's L2 cache.
CHUNK_BLOCKS = 2048
BLOCK = 32
#: Elements per chunk where there are no blocks (256 KiB of float32).
CHUNK_ELEMENTS = CHUNK_BLOCKS * BLOCK
#: Chunks per task a thread takes (a task allocates its scratch once).
TASK_CHUNKS = 16
#: The profiles :func:`quantize_mx` computes itself.
QUANTIZE_PROFILES = ("ocp", "quark")

#: The byte views below (pairs of codes as uint16, words as bytes) read little-endian words.
_LITTLE_ENDIAN = sys.byteorder == "little"
_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
_MAGNITUDE = np.uint32(0x7FFFFFFF)
#: float32 bits below the 12 the E2M1 table reads (sign, 8 exponent bits, 3 mantissa bits).
_E2M1_LOW_BITS = 20
_EXPONENT_SHIFT = 23
_NONFINITE_EXPONENT = 0xFF


R = TypeVar("R")


def _with_signature_of(reference: Callable[..., Any]) -> Callable[[Callable[..., R]],
                                                                 Callable[..., R]]:
    """Give a fast path ``reference``'s signature plus keyword ``threads``.

    The caller's arguments are bound to the reference's signature with its defaults applied
    (so both take the same calls, and a default is written once, in the reference) and passed
    to the implementation by name, with ``threads``; the implementation declares the same
    names, without defaults.
    """
    signature = inspect.signature(reference)
    threads = inspect.Parameter("threads", inspect.Parameter.KEYWORD_ONLY, default=None,
                                annotation="int | None")
    public = signature.replace(parameters=[*signature.parameters.values(), threads])

    def decorate(implementation: Callable[..., R]) -> Callable[..., R]:
        @wraps(implementation)
        def bound(*args: Any, threads: int | None = None, **kwargs: Any) -> R:
            arguments = signature.bind(*args, **kwargs)
            arguments.apply_defaults()
            return implementation(**arguments.arguments, threads=threads)

        bound.__signature__ = public  # type: ignore[attr-defined]
        return bound

    return decorate


#: The environment variable that caps :func:`workers` (e.g. ``1`` in each worker of a process
#: pool, which runs one task per core).
THREADS_VARIABLE = "MXFORMATS_THREADS"


def workers() -> int:
    """Threads a fast path uses when the caller gives no ``threads``: the positive integer in
    :data:`THREADS_VARIABLE` when it is set, else the CPUs this process may run on
    (the validator's pool processes set 1: :mod:`mxformats.validate.executors.local`).
    ValueError for a value that is not a positive integer."""
    given = os.environ.get(THREADS_VARIABLE)
    if given is not None:
        if not given.strip().isdigit() or int(given) < 1:
            raise ValueError(f"{THREADS_VARIABLE} must be a positive integer, got {given!r}")
        return int(given)
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def _parallel(count: int, work: Callable[[int, int], None], threads: int | None,
              chunk: int) -> None:
    """Run ``work(start, stop)`` over ``[0, count)`` in tasks of :data:`TASK_CHUNKS` chunks of
    ``chunk`` rows, on up to ``threads`` threads (default :func:`workers`). A thread takes the
    next task when it finishes one, so a core shared with another process does not hold the
    others back."""
    task = chunk * TASK_CHUNKS
    bounds = [*range(0, count, task), count]
    n = max(1, min(threads or workers(), len(bounds) - 1))
    if n == 1:
        work(0, count)
        return
    with ThreadPoolExecutor(n) as pool:
        for done in [pool.submit(work, lo, hi) for lo, hi in pairwise(bounds)]:
            done.result()


# -- tables over float32 classes ------------------------------------------------------------


def _class_members(low_bits: int) -> NDArray[np.float64]:
    """One float32 value per class of ``_class_index`` (its low ``low_bits`` bits zero),
    widened to float64; entry ``i`` is the member of class ``i``."""
    index = np.arange(1 << (32 - low_bits), dtype=np.uint32)
    with np.errstate(invalid="ignore"):  # the NaN classes widen with a warning
        return (index << low_bits).view(np.float32).astype(np.float64)


def _class_index(bits: NDArray[np.uint32], low_bits: int, scratch: NDArray[np.uint32]) -> None:
    """In place: float32 ``bits`` become their class, ``bits >> low_bits`` with the lowest kept
    bit ORed with "any of the low bits set" (adding the low mask carries into it exactly then).

    That is rounding to odd at ``32 - low_bits`` bits; a value so rounded to ``mbits + 2``
    mantissa bits or more rounds to ``mbits`` bits (nearest-even, nearest-away or toward zero)
    as the exact value does, so every member of a class has the code of the class member.
    """
    mask = np.uint32((1 << low_bits) - 1)
    np.bitwise_and(bits, mask, out=scratch)
    scratch += mask
    bits |= scratch
    bits >>= np.uint32(low_bits)


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


def _float_input(x: object) -> NDArray[Any] | None:
    """``x`` as numpy data when it is a numpy array or a torch tensor (same bytes), else None
    (Python floats and lists go to the reference)."""
    tensor = tensor_to_numpy(x)
    if tensor is not None:
        return tensor
    return x if isinstance(x, np.ndarray) else None


def _along_axis(x: object, dtypes: tuple[np.dtype[Any], ...],
                axis: int) -> tuple[NDArray[Any], int] | None:
    """``x`` as numpy data (:func:`_float_input`) and ``axis`` made non-negative, when the
    data is of one of ``dtypes``, not empty, and has that axis (on a little-endian machine);
    None sends the call to the reference."""
    data = _float_input(x)
    if (
        not _LITTLE_ENDIAN
        or data is None
        or data.dtype not in dtypes
        or data.size == 0
        or not -data.ndim <= axis < data.ndim
    ):
        return None
    return data, axis % data.ndim


def _float32_bits(chunk: NDArray[Any], into: NDArray[np.uint32]) -> NDArray[np.uint32]:
    """The float32 bits of a chunk of float32, bfloat16 or float16 values (exact widening)."""
    if chunk.dtype == _F32:
        return chunk.view(np.uint32)
    if chunk.dtype == BF16:
        np.left_shift(chunk.view(np.uint16), 16, out=into, dtype=np.uint32)
    else:
        np.copyto(into.view(np.float32), chunk)
    return into


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
def quantize_mx(
    x: object, elem: Format = E2M1, *, block_size: int = 32, axis: int = -1, profile: str = "ocp",
    threads: int | None = None,
) -> MXArray:
    """:func:`mxformats.quantize_mx`, the same bytes, fast for MXFP4 with ``ocp``/``quark``.

    Fast path: ``elem`` E2M1, ``block_size`` 32, a ``profile`` in :data:`QUANTIZE_PROFILES`,
    float32, bfloat16 or float16 numpy data (or torch tensor) whose length along ``axis`` is a
    multiple of 32, or even where the producer quantizes a short last block (``quark``: the
    block padded with zeros, as the producer pads it, and the padding's codes dropped).
    Anything else is passed to the reference unchanged. ``threads``: at most this many threads
    (default: :func:`workers`). Spec: spec/mx.md.
    """
    data = _float_input(x)
    if (
        not _LITTLE_ENDIAN
        or data is None
        or elem is not E2M1
        or block_size != BLOCK
        or profile not in QUANTIZE_PROFILES
        or data.dtype not in (_F32, BF16, _F16)
        or data.ndim == 0
        or not -data.ndim <= axis < data.ndim
        or (data.shape[axis] % BLOCK
            and (data.shape[axis] % 2 or not get_producer(profile).partial_blocks))
    ):
        return reference_mx.quantize_mx(x, elem, block_size=block_size, axis=axis, profile=profile)
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


# -- NVFP4 quantize ------------------------------------------------------------------------

#: Elements per NVFP4 block.
NVFP4_BLOCK = 16


@cache
def nvfp4_code_table() -> NDArray[np.uint8]:
    """``mxformats.schemes.nvfp4.e2m1_codes`` of one member of every class of float32
    quotients (sign, exponent, 3 mantissa bits): the NaN classes give 7, ±Inf saturates, and
    only a negative non-zero class has the sign bit (``q < 0``; -0.0 does not)."""
    with np.errstate(invalid="ignore"):  # the NaN classes
        table = reference_nvfp4.e2m1_codes(_class_members(_E2M1_LOW_BITS).astype(_F32))
    table.flags.writeable = False
    return table


def _e2m1_lookup(quotient_bits: NDArray[np.uint32], scratch: NDArray[np.uint32],
                 out: NDArray[np.uint8]) -> None:
    """``out`` = the NVFP4 E2M1 codes of float32 quotients (their bits, overwritten)."""
    _class_index(quotient_bits, _E2M1_LOW_BITS, scratch)
    np.take(nvfp4_code_table(), quotient_bits, out=out, mode="clip")


def _e4m3_scale_codes(threads: int | None) -> Callable[[NDArray[np.float64]], NDArray[np.uint8]]:
    """:func:`mxformats.schemes.nvfp4.e4m3_scale_codes` by :func:`encode`'s table (the clamped
    block scales are float32 values, so the float64 array narrows exactly)."""
    return lambda values: encode(E4M3FN, values, threads=threads)


@containers()
def quantize_nvfp4(
    x: object, *, axis: int = -1, profile: str = "modelopt", global_amax: float | None = None,
    threads: int | None = None,
) -> NVFP4Array:
    """:func:`mxformats.schemes.nvfp4.quantize_nvfp4`, the same bytes, fast.

    Fast path: float32, bfloat16 or float16 numpy data (or torch tensor) of finite values, a
    producer ``profile``, a length along ``axis`` that is a multiple of 16. Two passes by
    chunks on up to ``threads`` threads: the block maxima (from the float32 bits), from which
    the reference's own :func:`~mxformats.schemes.nvfp4.nvfp4_scales` computes the global and
    block scales (their E4M3 codes by :func:`encode`'s table), then each quotient ``x /
    divisor``, one float32 division as the reference's, and its E2M1 code, one lookup in
    :func:`nvfp4_code_table`. Anything else, a non-finite input included, goes to the
    reference (its checks and errors). Spec: spec/nvfp4.md."""

    def reference() -> NVFP4Array:
        return reference_nvfp4.quantize_nvfp4(x, axis=axis, profile=profile,
                                              global_amax=global_amax)

    found = _along_axis(x, (_F32, BF16, _F16), axis)
    producer = reference_nvfp4.PRODUCERS.get(profile) if isinstance(profile, str) else None
    if found is None or producer is None or found[0].shape[axis] % NVFP4_BLOCK:
        return reference()
    data, ax = found
    moved = np.ascontiguousarray(np.moveaxis(data, ax, -1))
    blocks = moved.reshape(-1, NVFP4_BLOCK)
    count = blocks.shape[0]
    chunk = CHUNK_ELEMENTS // NVFP4_BLOCK
    amax_bits = np.empty(count, dtype=np.uint32)

    def maxima(lo: int, hi: int) -> None:
        wide = np.empty((min(chunk, hi - lo), NVFP4_BLOCK), dtype=np.uint32)
        for start in range(lo, hi, chunk):
            n = min(start + chunk, hi) - start
            bits = _float32_bits(blocks[start:start + n], wide[:n])
            magnitude = np.bitwise_and(bits, _MAGNITUDE, out=wide[:n])
            amax_bits[start:start + n] = _row_maxima(magnitude)

    _parallel(count, maxima, threads, chunk)
    if (amax_bits >> _EXPONENT_SHIFT == _NONFINITE_EXPONENT).any():
        return reference()
    block_amax = amax_bits.view(_F32).astype(data.dtype).reshape(*moved.shape[:-1], -1)
    scales = reference_nvfp4.nvfp4_scales(producer, block_amax, global_amax,
                                          _e4m3_scale_codes(threads))
    divisor = scales.divisor.reshape(-1, 1)
    codes = np.empty(blocks.shape, dtype=np.uint8)

    def quotients(lo: int, hi: int) -> None:
        wide = np.empty((min(chunk, hi - lo), NVFP4_BLOCK), dtype=np.uint32)
        scratch = np.empty_like(wide)
        for start in range(lo, hi, chunk):
            n = min(start + chunk, hi) - start
            bits = _float32_bits(blocks[start:start + n], wide[:n])
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                np.divide(bits.view(_F32), divisor[start:start + n], out=wide[:n].view(_F32))
            _e2m1_lookup(wide[:n], scratch[:n], codes[start:start + n])

    _parallel(count, quotients, threads, chunk)
    return scales.array(codes.reshape(moved.shape), ax)


# -- MXFP4 dequantize -----------------------------------------------------------------------


@cache
def _e2m1_pair_table() -> NDArray[np.uint64]:
    """For each packed byte, the float32 values of its low and high nibble side by side (one
    uint64: the low nibble first in memory, as the unpacked order has it)."""
    nibble = E2M1.values.astype(np.float32)
    byte = np.arange(256)
    pairs = np.stack([nibble[byte & 0xF], nibble[byte >> 4]], axis=-1)
    table = np.ascontiguousarray(pairs).view(np.uint64)[:, 0]
    table.flags.writeable = False
    return table


@cache
def _e2m1_value_table() -> NDArray[np.uint32]:
    """The float32 bits of each E2M1 code's value (one code a byte)."""
    table = E2M1.values.astype(np.float32).view(np.uint32)
    table.flags.writeable = False
    return table


def _scale_rows(
    codes: NDArray[np.uint8], factor: NDArray[np.float32], table: NDArray[np.uint64 | np.uint32],
    out: NDArray[np.float32], lo: int, hi: int, then: np.float32 | None = None,
) -> None:
    """``out[lo:hi] = values(codes[lo:hi]) * factor[lo:hi]``, then ``* then`` when given (a
    second float32 multiply, rounded on its own), by chunks. A row is one block with its
    float32 factor: packed bytes and :func:`_e2m1_pair_table` (two values a byte), or one code
    a byte and :func:`_e2m1_value_table`."""
    index = np.empty((min(CHUNK_BLOCKS, hi - lo), codes.shape[1]), dtype=np.intp)
    for start in range(lo, hi, CHUNK_BLOCKS):
        stop = min(start + CHUNK_BLOCKS, hi)
        n = stop - start
        np.copyto(index[:n], codes[start:stop])
        np.take(table, index[:n], out=out[start:stop].view(table.dtype), mode="clip")
        out[start:stop] *= factor[start:stop, None]
        if then is not None:
            out[start:stop] *= then


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
@_with_signature_of(reference_mx.dequantize_mx)
def dequantize_mx(
    codes: ArrayLike | MXArray, scales: ArrayLike | None, elem: Format, *, block_size: int,
    axis: int, profile: str | None, dtype: DTypeLike, threads: int | None,
) -> NDArray[np.generic]:
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
            return reference_mx.dequantize_mx(codes, scales, elem, block_size=block_size, axis=axis,
                                              profile=profile, dtype=dtype)
        given = codes
        codes, scales, elem, block_size, axis = (
            given.codes, given.scales, given.elem, given.block_size, given.axis)
        profile = given.profile if profile is None else profile
    c = codes if isinstance(codes, np.ndarray) else None
    s = scales if isinstance(scales, np.ndarray) else None
    consumer = _exact_mx_consumer(profile)
    if (
        not _LITTLE_ENDIAN
        or c is None
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
        return reference_mx.dequantize_mx(codes, scales, elem, block_size=block_size, axis=axis,
                                          profile=profile, dtype=dtype)
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


# -- NVFP4 dequantize -------------------------------------------------------------------------


@cache
def _fp8_values(fmt: Format) -> NDArray[np.float32]:
    """The float32 value of every byte of ``fmt``, decoded as the reference decodes codes."""
    table = fmt.decode(np.arange(256, dtype=np.uint8), np.float32).astype(_F32)
    table.flags.writeable = False
    return table


def _nvfp4_global(global_scale: object) -> np.float32 | None:
    """The float32 global scale, as the reference reads it, when it is one finite value given
    as a float or a float array; None sends the call to the reference."""
    if isinstance(global_scale, np.ndarray) and global_scale.dtype.kind == "f":
        stored = global_scale.astype(_F32)
    elif isinstance(global_scale, float | np.floating):
        stored = np.asarray(global_scale, dtype=_F32)
    else:
        return None
    value = stored.reshape(-1)[0] if stored.size == 1 else None
    return value if value is not None and np.isfinite(value) else None


@containers(codes={"scales": E4M3FN})
@_with_signature_of(reference_nvfp4.dequantize_nvfp4)
def dequantize_nvfp4(
    codes: ArrayLike | NVFP4Array, scales: ArrayLike | None, global_scale: ArrayLike | None, *,
    axis: int, profile: str | None, packed: bool, dtype: DTypeLike, threads: int | None,
) -> NDArray[Any]:
    """:func:`mxformats.dequantize_nvfp4`, the same bytes, fast to float32, every consumer.

    Fast path: uint8 codes (one a byte, or two a byte with ``packed``) whose length along
    ``axis`` is a multiple of 16 elements, uint8 scales of the matching shape, a finite global
    scale (one value), a consumer ``profile`` (or an :class:`NVFP4Array` read by its default
    or a matching consumer), ``dtype`` float32. Each element is its E2M1 value (a table
    lookup) times a float32 factor per block:

    - ``multiply`` / ``reciprocal``: the factor is the scale ``s``; E2M1 × E4M3 is exact in
      float32 (at most 6 significant bits, 2**-10 to 2688), so the second multiply, by
      ``global`` or by ``float32(1 / global)``, is the one rounding the reference's float64
      product makes;
    - ``divide``: the factor is the reference's own float32 quotient ``s / global`` and the one
      multiply is the reference's rounding (E2M1 × float32 is exact in float64).

    Blocks whose factor is not finite (a NaN scale byte, an overflowing quotient) go to the
    reference, and so does a call whose global factor is not finite, or any other input.
    Spec: spec/nvfp4.md, "Consumers".
    """

    def reference() -> NDArray[Any]:
        return reference_nvfp4.dequantize_nvfp4(codes, scales, global_scale, axis=axis,
                                                profile=profile, packed=packed, dtype=dtype)

    if isinstance(codes, NVFP4Array):
        array = codes
        producer = reference_nvfp4.PRODUCERS.get(array.profile)
        name = profile if profile is not None else reference_nvfp4.DEFAULT_CONSUMER.get(
            array.profile)
        reader = reference_nvfp4.CONSUMERS.get(name) if isinstance(name, str) else None
        if (scales is None and global_scale is None and not packed and producer is not None
                and reader is not None and reader.global_form == producer.global_form):
            return dequantize_nvfp4(array.codes, array.scales, array.global_scale,
                                    axis=array.axis, profile=name, dtype=dtype, threads=threads)
        return reference()
    c = codes if isinstance(codes, np.ndarray) else None
    s = scales if isinstance(scales, np.ndarray) else None
    consumer = reference_nvfp4.CONSUMERS.get(profile) if isinstance(profile, str) else None
    stored = _nvfp4_global(global_scale)
    per_byte = 2 if packed else 1
    if (
        not _LITTLE_ENDIAN
        or c is None
        or s is None
        or consumer is None
        or stored is None
        or np.dtype(dtype) != _F32
        or c.dtype != np.uint8
        or s.dtype != np.uint8
        or c.ndim == 0
        or c.size == 0
        or not -c.ndim <= axis < c.ndim
        or c.shape[axis] * per_byte % NVFP4_BLOCK
        or s.shape != (*c.shape[:axis % c.ndim], c.shape[axis] * per_byte // NVFP4_BLOCK,
                       *c.shape[axis % c.ndim + 1:])
        or (not packed and int(c.max()) > 0xF)
    ):
        return reference()
    scale_bytes = np.moveaxis(s, axis, -1).reshape(-1)
    block_scale = _fp8_values(E4M3FN)[scale_bytes]
    factor: NDArray[np.float32] = block_scale
    then: np.float32 | None = stored
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        if consumer.global_op == "divide":
            factor, then = (block_scale / stored).astype(_F32, copy=False), None
        elif consumer.global_op == "reciprocal":
            then = np.float32(1) / stored
    if then is not None and not np.isfinite(then):
        return reference()
    ax = axis % c.ndim
    moved = np.moveaxis(c, ax, -1)
    rows = np.ascontiguousarray(moved).reshape(-1, NVFP4_BLOCK // per_byte)
    table = _e2m1_pair_table() if packed else _e2m1_value_table()
    out = np.empty((rows.shape[0], NVFP4_BLOCK), dtype=np.float32)

    def work(lo: int, hi: int) -> None:
        with np.errstate(over="ignore", invalid="ignore"):  # Inf is specified; NaN redone
            _scale_rows(rows, factor, table, out, lo, hi, then)

    _parallel(rows.shape[0], work, threads, CHUNK_BLOCKS)
    special = np.flatnonzero(~np.isfinite(factor))
    if special.size:
        out[special] = reference_nvfp4.dequantize_nvfp4(
            rows[special], scale_bytes[special, None], stored, profile=profile, packed=packed)
    shape = (*moved.shape[:-1], moved.shape[-1] * per_byte)
    return np.ascontiguousarray(np.moveaxis(out.reshape(shape), -1, ax))


# -- FP8 encode and decode ------------------------------------------------------------------


@cache
def code_table(fmt: Format, rounding: str, overflow: str) -> NDArray[np.uint8]:
    """The ``fmt`` code of every float32 class (``fmt.mbits + 2`` mantissa bits kept): the
    reference codec (:func:`mxformats.codec.encode`) on the class members, NaN and ±Inf
    classes included."""
    members = _class_members(_low_bits(fmt))
    table = reference_codec.encode(fmt, members, rounding=rounding, overflow=overflow)
    table.flags.writeable = False
    return table


def _low_bits(fmt: Format) -> int:
    return 23 - (fmt.mbits + 2)


def _encode_chunks(
    flat: NDArray[Any], out: NDArray[np.uint8], table: NDArray[np.uint8], low_bits: int,
    lo: int, hi: int,
) -> None:
    size = min(CHUNK_ELEMENTS, hi - lo)
    wide = np.empty(size, dtype=np.uint32)
    index = np.empty(size, dtype=np.uint32)
    scratch = np.empty(size, dtype=np.uint32)
    for start in range(lo, hi, CHUNK_ELEMENTS):
        stop = min(start + CHUNK_ELEMENTS, hi)
        n = stop - start
        np.copyto(index[:n], _float32_bits(flat[start:stop], wide[:n]))
        _class_index(index[:n], low_bits, scratch[:n])
        np.take(table, index[:n], out=out[start:stop], mode="clip")


@containers()
@_with_signature_of(reference_codec.encode)
def encode(
    fmt: Format, x: object, *, rounding: str, overflow: str | None, nan_code: int | None,
    threads: int | None,
) -> NDArray[np.uint8]:
    """:func:`mxformats.codec.encode` (``Format.encode``), the same codes, fast for FP8.

    Fast path: an 8-bit float ``fmt`` with a NaN (E4M3FN, E4M3FNUZ, E5M2), float32, bfloat16
    or float16 numpy input (or torch tensor; float64 whose values are all float32 values, no
    NaN, is read as the float32 it narrows to exactly), a rounding and overflow mode the
    format takes, no ``nan_code``. One table lookup per value (:func:`code_table`). Spec:
    spec/README.md, "Encoding".
    """
    data = _float_input(x)
    if data is not None and data.dtype == np.float64:
        with np.errstate(over="ignore", invalid="ignore"):
            narrowed = data.astype(_F32)
        if np.array_equal(narrowed, data):  # float32 values only (NaN never compares equal)
            data = narrowed
    if (
        not _LITTLE_ENDIAN
        or data is None
        or fmt.kind != "float"
        or fmt.bits != 8
        or not fmt.nan_codes
        or nan_code is not None
        or rounding not in fmt.roundings
        or (overflow is not None and overflow not in fmt.overflows)
        or data.dtype not in (_F32, BF16, _F16)
    ):
        return reference_codec.encode(fmt, x, rounding=rounding, overflow=overflow,
                                      nan_code=nan_code)
    table = code_table(fmt, rounding, fmt.default_overflow if overflow is None else overflow)
    flat = np.ascontiguousarray(data).reshape(-1)
    out = np.empty(flat.shape, dtype=np.uint8)

    def work(lo: int, hi: int) -> None:
        _encode_chunks(flat, out, table, _low_bits(fmt), lo, hi)

    _parallel(flat.size, work, threads, CHUNK_ELEMENTS)
    codes: NDArray[np.uint8] = out.reshape(data.shape)
    return codes


def _decode_chunks(codes: NDArray[np.uint8], table: NDArray[Any], out: NDArray[Any],
                   lo: int, hi: int) -> None:
    index = np.empty(min(CHUNK_ELEMENTS, hi - lo), dtype=np.intp)
    for start in range(lo, hi, CHUNK_ELEMENTS):
        stop = min(start + CHUNK_ELEMENTS, hi)
        n = stop - start
        np.copyto(index[:n], codes[start:stop])
        np.take(table, index[:n], out=out[start:stop], mode="clip")


@containers(codes={"codes": "fmt"}, unpack_x2=True)
def decode(fmt: Format, codes: ArrayLike, dtype: DTypeLike = np.float32,
           threads: int | None = None) -> NDArray[np.generic]:
    """:func:`mxformats.codec.decode` (``Format.decode``), the same values, fast for 8-bit
    formats: uint8 codes are all valid, so decoding is one lookup in the reference's own value
    table, by chunks and threads. Other inputs go to the reference. Spec: spec/README.md,
    "Decoding"."""
    c = codes if isinstance(codes, np.ndarray) else None
    if not _LITTLE_ENDIAN or c is None or c.dtype != np.uint8 or fmt.bits != 8:
        return reference_codec.decode(fmt, codes, dtype)
    table = reference_codec.decode(fmt, np.arange(256, dtype=np.uint8), dtype)  # validates dtype
    flat = np.ascontiguousarray(c).reshape(-1)
    out = np.empty(flat.shape, dtype=table.dtype)
    _parallel(flat.size, lambda lo, hi: _decode_chunks(flat, table, out, lo, hi), threads,
              CHUNK_ELEMENTS)
    values: NDArray[np.generic] = out.reshape(c.shape)
    return values


# -- INT4 -----------------------------------------------------------------------------------

#: The INT4 layouts with a fast path (``linear`` goes to the reference).
_LAYOUTS = ("compressed-tensors", "quark")


@containers()
@_with_signature_of(reference_int4.pack_int4)
def pack_int4(q: ArrayLike, *, layout: str, axis: int, threads: int | None) -> NDArray[np.int32]:
    """:func:`mxformats.pack_int4`, the same words, fast for int8 input.

    Fast path: int8 values, ``layout`` ``compressed-tensors`` or ``quark``, a length along
    ``axis`` that is a multiple of 8 (no padding). Nibbles are made per byte (``(q + offset) &
    0xF``), put in the layout's nibble order and joined two per byte, by chunks on up to
    ``threads`` threads. Spec: int4-layouts.md.
    """
    values = q if isinstance(q, np.ndarray) else None
    if (
        not _LITTLE_ENDIAN
        or values is None
        or values.dtype != np.int8
        or values.ndim == 0
        or not -values.ndim <= axis < values.ndim
        or layout not in _LAYOUTS
        or values.shape[axis] % 8
        or values.size == 0
        or values.min() < reference_int4.QMIN
        or values.max() > reference_int4.QMAX
    ):
        return reference_int4.pack_int4(q, layout=layout, axis=axis)
    ax = axis % values.ndim
    moved = np.moveaxis(values, ax, -1)
    groups = np.ascontiguousarray(moved).reshape(-1, 8)
    out = np.empty((groups.shape[0], 4), dtype=np.uint8)
    chunk = CHUNK_ELEMENTS // 8
    _parallel(groups.shape[0], lambda lo, hi: _pack_groups(groups, layout, out, lo, hi, chunk),
              threads, chunk)
    words = out.view(np.int32).reshape(*moved.shape[:-1], -1)
    return np.moveaxis(words, -1, ax)


def _pack_groups(groups: NDArray[np.int8], layout: str, out: NDArray[np.uint8], lo: int,
                 hi: int, chunk: int) -> None:
    """Groups ``lo:hi`` of 8 int8 values into the 4 bytes of their words, by chunks."""
    order = reference_int4.NIBBLE_ORDER[layout]
    offset = np.uint8(reference_int4.NIBBLE_OFFSET[layout])
    for start in range(lo, hi, chunk):
        stop = min(start + chunk, hi)
        part = groups[start:stop]
        if order != tuple(range(8)):
            part = part.take(order, axis=1)
        nibbles = part.view(np.uint8) + offset
        nibbles &= np.uint8(0xF)
        pairs = nibbles.view(np.uint16)
        pairs |= pairs >> 4
        np.copyto(out[start:stop], pairs, casting="unsafe")


@cache
def _half_word_tables(layout: str) -> NDArray[np.uint64]:
    """``tables[k][h]``: the int8 values of the 4 nibbles of ``h``, taken as the 16-bit half
    ``k`` of a word (nibbles ``4k .. 4k + 3``), each at the byte of the 8 unpacked values where
    ``layout`` puts its element; 0 elsewhere. A word unpacks to ``tables[0][low half] |
    tables[1][high half]``, read as 8 int8 bytes."""
    order = reference_int4.NIBBLE_ORDER[layout]
    nibbles = (np.arange(1 << 16)[:, None] >> (4 * np.arange(4))) & 0xF
    signed = ((nibbles - reference_int4.NIBBLE_OFFSET[layout]) & 0xF ^ 8) - 8  # two's complement
    tables = np.zeros((2, 1 << 16, 8), dtype=np.int8)
    for half in range(2):
        for j in range(4):
            tables[half, :, order[4 * half + j]] = signed[:, j]
    result = tables.view(np.uint64)[..., 0]
    result.flags.writeable = False
    return result


def _unpack_words(
    halves: NDArray[np.uint16], tables: NDArray[np.uint64], out: NDArray[np.uint64],
    lo: int, hi: int,
) -> None:
    """Words ``lo:hi`` (rows of two half-words) into ``out`` (one uint64 of 8 values each)."""
    index = np.empty(min(CHUNK_ELEMENTS, hi - lo), dtype=np.intp)
    for start in range(lo, hi, CHUNK_ELEMENTS):
        stop = min(start + CHUNK_ELEMENTS, hi)
        n = stop - start
        np.copyto(index[:n], halves[start:stop, 0])
        np.take(tables[0], index[:n], out=out[start:stop], mode="clip")
        np.copyto(index[:n], halves[start:stop, 1])
        out[start:stop] |= np.take(tables[1], index[:n], mode="clip")


@containers()
@_with_signature_of(reference_int4.unpack_int4)
def unpack_int4(
    packed: ArrayLike, *, layout: str, axis: int, size: int | None, threads: int | None,
) -> NDArray[np.int8]:
    """:func:`mxformats.unpack_int4`, the same values, fast for whole words.

    Fast path: int32/uint32 words, ``layout`` ``compressed-tensors`` or ``quark``, ``size``
    None or ``8 × words``. Each 16-bit half of a word gives its 4 values, already at their
    places, by a 65536-entry table (``_half_word_tables``). Spec: int4-layouts.md.
    """
    words = packed if isinstance(packed, np.ndarray) else None
    if (
        not _LITTLE_ENDIAN
        or words is None
        or words.dtype not in (np.dtype(np.int32), np.dtype(np.uint32))
        or words.size == 0
        or layout not in _LAYOUTS
        or not -words.ndim <= axis < words.ndim
        or (size is not None and size != 8 * words.shape[axis])
    ):
        return reference_int4.unpack_int4(packed, layout=layout, axis=axis, size=size)
    ax = axis % words.ndim
    moved = np.ascontiguousarray(np.moveaxis(words, ax, -1))
    halves = moved.view(np.uint16).reshape(-1, 2)  # little-endian: the low half first
    out = np.empty(halves.shape[0], dtype=np.uint64)
    tables = _half_word_tables(layout)
    _parallel(out.size, lambda lo, hi: _unpack_words(halves, tables, out, lo, hi), threads,
              CHUNK_ELEMENTS)
    values = out.view(np.int8).reshape(*moved.shape[:-1], -1)
    return np.moveaxis(values, -1, ax)


@containers()
@_with_signature_of(reference_int4.dequantize_int4)
def dequantize_int4(
    q: ArrayLike | Int4Array, scales: ArrayLike | None, *, group_size: int | None, axis: int,
    profile: str | None, dtype: DTypeLike, threads: int | None,
) -> NDArray[np.generic]:
    """:func:`mxformats.dequantize_int4`, the same bytes, fast to float32.

    Fast path: int8 ``q`` in [-8, 7], finite scales (float32 for ``quark``; float32, bfloat16
    or float16 for ``compressed-tensors``) of the matching shape, an int ``group_size``,
    ``dtype`` float32. ``q × scale`` is one float32 multiply, then (compressed-tensors with a
    16-bit scale) one rounding to the scale's type: the reference's arithmetic. Spec:
    int4-schemes.md, "Dequantization".
    """
    if isinstance(q, Int4Array):
        if scales is not None:
            return reference_int4.dequantize_int4(q, scales, group_size=group_size, axis=axis,
                                                  profile=profile, dtype=dtype)
        given = q
        q, scales, group_size, axis = given.q, given.scales, given.group_size, given.axis
        profile = given.profile if profile is None else profile
    values = q if isinstance(q, np.ndarray) else None
    s = scales if isinstance(scales, np.ndarray) else None
    consumer = reference_int4.CONSUMERS.get(profile or reference_int4.DEFAULT_CONSUMER)
    float32_product = consumer is not None and consumer.product_dtype == "float32"
    scale_types = (_F32,) if float32_product else (_F32, BF16, _F16)
    if (
        not _LITTLE_ENDIAN
        or values is None
        or s is None
        or values.dtype != np.int8
        or s.dtype not in scale_types
        or consumer is None
        or np.dtype(dtype) != _F32
        or not isinstance(group_size, int)
        or group_size <= 0
        or values.ndim == 0
        or values.ndim != s.ndim
        or not -values.ndim <= axis < values.ndim
        or values.shape[axis] % group_size
        or s.shape != (*values.shape[:axis % values.ndim], values.shape[axis] // group_size,
                       *values.shape[axis % values.ndim + 1:])
        or values.size == 0
        or values.min() < reference_int4.QMIN
        or values.max() > reference_int4.QMAX
        or not np.isfinite(s.astype(np.float32)).all()
    ):
        return reference_int4.dequantize_int4(q, scales, group_size=group_size, axis=axis,
                                              profile=profile, dtype=dtype)
    ax = axis % values.ndim
    rows = np.ascontiguousarray(np.moveaxis(values, ax, -1)).reshape(-1, group_size)
    factor = np.ascontiguousarray(np.moveaxis(s, ax, -1)).reshape(-1).astype(np.float32)
    out = np.empty(rows.shape, dtype=np.float32)

    chunk = max(1, CHUNK_ELEMENTS // group_size)

    def work(lo: int, hi: int) -> None:
        scratch = np.empty((min(chunk, hi - lo), group_size), dtype=np.uint32)
        for start in range(lo, hi, chunk):
            part = slice(start, min(start + chunk, hi))
            product = out[part]
            np.copyto(product, rows[part])  # int8 -> float32, then a same-type multiply
            with np.errstate(over="ignore"):  # overflow to Inf is the specified result
                product *= factor[part, None]
                if s.dtype != _F32:  # compressed-tensors rounds the product to the scale's type
                    _round_through(product, s.dtype, scratch[: product.shape[0]])

    _parallel(rows.shape[0], work, threads, chunk)
    shape = np.moveaxis(values, ax, -1).shape
    return np.ascontiguousarray(np.moveaxis(out.reshape(shape), -1, ax))


def _round_through(v: NDArray[np.float32], dtype: np.dtype[Any],
                   scratch: NDArray[np.uint32]) -> None:
    """Round float32 values (finite or infinite) in place to ``dtype``, nearest-even, and back;
    ``scratch``: uint32 of ``v``'s shape."""
    if dtype == _F16:
        np.copyto(v, v.astype(np.float16))
        return
    bits = v.view(np.uint32)  # bfloat16: round the top 16 bits to nearest-even
    odd = np.right_shift(bits, 16, out=scratch)
    odd &= np.uint32(1)
    odd += np.uint32(0x7FFF)
    bits += odd
    bits &= np.uint32(0xFFFF0000)


# -- INT4, FP8 per-tensor and W4A8 quantize -------------------------------------------------

#: float32 bits below the 9 mantissa bits the quotient tables keep (2**18 classes): enough for
#: a rounding to bfloat16 (7 bits) followed by one to an integer or an FP8 code (3 bits), and
#: for those roundings from float32 directly.
_QUOTIENT_LOW_BITS = 14
#: Input types whose quotients the tables encode: their quotient dtype is float32 or bfloat16.
_QUOTIENT_INPUTS = (_F32, BF16)


def _quotient_table(encode: Callable[[NDArray[np.float32]], NDArray[Any]]) -> NDArray[Any]:
    """``encode`` (a reference's last step) on one member of every float32 quotient class; the
    NaN classes, which no finite input reaches, get the code of 0."""
    members = _class_members(_QUOTIENT_LOW_BITS)
    with np.errstate(invalid="ignore", over="ignore"):
        table = encode(np.where(np.isnan(members), 0, members).astype(_F32))
    table.flags.writeable = False
    return table


@cache
def int4_table(profile: str, dtype: np.dtype[Any]) -> NDArray[np.int8]:
    """The INT4 value of every class of float32 quotients under INT4 producer ``profile`` for
    input ``dtype``: the quotient rounded to the producer's quotient dtype, then
    ``mxformats.schemes.int4.round_to_int4``."""
    producer = reference_int4.get_producer(profile)
    work = reference_int4.quotient_dtype(producer, np.dtype(dtype))
    return _quotient_table(lambda q: reference_int4.round_to_int4(q.astype(work)))


@cache
def fp8_table(profile: str, fmt: Format, dtype: np.dtype[Any]) -> NDArray[np.uint8]:
    """The ``fmt`` code of every class of float32 quotients under FP8 per-tensor ``profile``
    for input ``dtype``: the quotient rounded to the profile's quotient dtype, then
    :func:`mxformats.schemes.fp8.per_tensor_codes`."""
    record = reference_fp8.get_fp8_profile(profile)
    work = np.dtype(dtype) if record.quotient_dtype == "input" else _F32
    return _quotient_table(
        lambda q: reference_fp8.per_tensor_codes(q.astype(work), fmt, record, np.dtype(dtype)))


def _quotient_codes(values: NDArray[np.float32], operand: NDArray[np.float32] | np.float32,
                    reciprocal: bool, table: NDArray[Any], out: NDArray[Any],
                    work: NDArray[np.uint32], scratch: NDArray[np.uint32]) -> None:
    """``out = table[class(values ÷ operand)]``, ``operand`` one float32 per row (or one for
    all): a true division, or a multiply for ``reciprocal`` producers, one float32 operation
    as the producers compute it. ``work`` and ``scratch``: uint32 of ``values``' shape
    (``work`` may be ``values``' own bits)."""
    quotient = work.view(np.float32)
    with np.errstate(over="ignore", under="ignore"):
        if reciprocal:
            np.multiply(values, operand, out=quotient)
        else:
            np.divide(values, operand, out=quotient)
    _class_index(work, _QUOTIENT_LOW_BITS, scratch)
    np.take(table, work, out=out, mode="clip")


def _row_maxima(magnitude: NDArray[np.uint32]) -> NDArray[np.uint32]:
    """The largest of each row of non-negative float32 bits (one flat reduceat loop)."""
    rows, size = magnitude.shape
    flat = magnitude.reshape(-1)
    return np.maximum.reduceat(flat, np.arange(0, rows * size, size))


@containers()
@_with_signature_of(reference_int4.quantize_int4)
def quantize_int4(
    x: object, *, group_size: int | None, axis: int, profile: str, threads: int | None,
) -> Int4Array:
    """:func:`mxformats.quantize_int4`, the same bytes, fast for float32 and bfloat16 input.

    Fast path: float32 or bfloat16 numpy data (or torch tensor) of finite values, any INT4
    producer ``profile``, an int ``group_size`` dividing the length along ``axis`` (or None:
    one group per slice). Per group the reference's own ``group_scales``
    gives the scale; each quotient ``x / s`` (or ``x * (1 / s)``) is one float32
    operation, as the producer's, and its rounding to the quotient dtype and to an integer is
    one lookup in :func:`int4_table`. A non-finite input sends the call to the reference, which
    refuses it; so does every other input. Spec: int4-schemes.md.
    """

    def reference() -> Int4Array:
        return reference_int4.quantize_int4(x, group_size=group_size, axis=axis, profile=profile)

    found = _along_axis(x, _QUOTIENT_INPUTS, axis)
    producer = reference_int4.PRODUCERS.get(profile) if isinstance(profile, str) else None
    if (
        found is None
        or producer is None
        or not (group_size is None or (type(group_size) is int and group_size > 0))
        or found[0].shape[axis] % (group_size or found[0].shape[axis])
    ):
        return reference()
    data, ax = found
    moved = np.ascontiguousarray(np.moveaxis(data, ax, -1))
    size = group_size or moved.shape[-1]
    groups = moved.reshape(-1, size)
    q = np.empty(groups.shape, dtype=np.int8)
    scale_dtype = data.dtype if producer.scale_dtype == "input" else _F32
    scales = np.empty(groups.shape[0], dtype=scale_dtype)
    table = int4_table(profile, data.dtype)
    chunk = max(1, CHUNK_ELEMENTS // size)
    nonfinite: list[bool] = []

    def work(lo: int, hi: int) -> None:
        rows = min(chunk, hi - lo)
        wide = np.empty((rows, size), dtype=np.uint32)
        scratch = np.empty((rows, size), dtype=np.uint32)
        for start in range(lo, hi, chunk):
            stop = min(start + chunk, hi)
            n = stop - start
            bits = _float32_bits(groups[start:stop], wide[:n])
            amax = _row_maxima(np.bitwise_and(bits, _MAGNITUDE, out=scratch[:n]))
            if (amax >> _EXPONENT_SHIFT == _NONFINITE_EXPONENT).any():
                nonfinite.append(True)
                return
            stored = reference_int4.group_scales(amax.view(_F32).astype(data.dtype), producer)
            scales[start:stop] = stored
            operand = reference_int4.quotient_operand(stored, producer, data.dtype)
            _quotient_codes(bits.view(_F32), operand.astype(_F32)[:, None],
                            producer.reciprocal, table, q[start:stop], wide[:n], scratch[:n])

    _parallel(groups.shape[0], work, threads, chunk)
    if nonfinite:
        return reference()
    shape = moved.shape
    return Int4Array(
        q=np.moveaxis(q.reshape(shape), -1, ax),
        scales=np.moveaxis(scales.reshape(*shape[:-1], shape[-1] // size), -1, ax),
        group_size=group_size, axis=ax, profile=profile)


@containers()
@_with_signature_of(reference_fp8.quantize_fp8)
def quantize_fp8(
    x: object, fmt: Format, *, profile: str, threads: int | None,
) -> tuple[NDArray[np.uint8], NDArray[np.float32]]:
    """:func:`mxformats.schemes.fp8.quantize_fp8`, the same bytes, fast for the producer
    profile ``static`` (Quark) from float32 and bfloat16 input.

    Fast path: a profile that refuses non-finite input (``static``), a format it writes,
    float32 or bfloat16 numpy data (or torch tensor) of finite values, not empty. Two passes
    by chunks: the tensor's largest magnitude (the reference's
    :func:`~mxformats.schemes.fp8.per_tensor_scale` turns it into the scale), then each
    quotient ``x / s``, one float32 operation as the producer's, whose rounding to the quotient
    dtype, clamp and cast are one lookup in :func:`fp8_table`. A non-finite input goes to the
    reference, which refuses it; so does every other input. Spec: w4a8.md, "FP8 per tensor".
    """

    def reference() -> tuple[NDArray[np.uint8], NDArray[np.float32]]:
        return reference_fp8.quantize_fp8(x, fmt, profile=profile)

    data = _float_input(x)
    record = reference_fp8.FP8_PROFILES.get(profile) if isinstance(profile, str) else None
    if (
        not _LITTLE_ENDIAN
        or data is None
        or record is None
        or record.non_finite != "refuse"
        or fmt not in record.formats
        or data.dtype not in _QUOTIENT_INPUTS
        or data.size == 0
    ):
        return reference()
    flat = np.ascontiguousarray(data).reshape(-1)
    maxima: list[int] = []

    def largest(lo: int, hi: int) -> None:
        wide = np.empty(min(CHUNK_ELEMENTS, hi - lo), dtype=np.uint32)
        for start in range(lo, hi, CHUNK_ELEMENTS):
            stop = min(start + CHUNK_ELEMENTS, hi)
            bits = _float32_bits(flat[start:stop], wide[: stop - start])
            maxima.append(int(np.bitwise_and(bits, _MAGNITUDE).max()))

    _parallel(flat.size, largest, threads, CHUNK_ELEMENTS)
    amax_bits = max(maxima)
    if amax_bits >> _EXPONENT_SHIFT == _NONFINITE_EXPONENT:
        return reference()
    amax = np.float32(np.array([amax_bits], dtype=np.uint32).view(_F32)[0])
    scale = reference_fp8.per_tensor_scale(amax, fmt, record)
    work = data.dtype if record.quotient_dtype == "input" else _F32
    operand = np.float32(divide_in(1, scale, work)) if record.reciprocal else scale
    table = fp8_table(profile, fmt, data.dtype)
    codes = np.empty(flat.size, dtype=np.uint8)

    def encode_chunks(lo: int, hi: int) -> None:
        wide = np.empty(min(CHUNK_ELEMENTS, hi - lo), dtype=np.uint32)
        scratch = np.empty_like(wide)
        for start in range(lo, hi, CHUNK_ELEMENTS):
            n = min(start + CHUNK_ELEMENTS, hi) - start
            bits = _float32_bits(flat[start:start + n], wide[:n])
            _quotient_codes(bits.view(_F32), operand, record.reciprocal, table,
                            codes[start:start + n], wide[:n], scratch[:n])

    _parallel(flat.size, encode_chunks, threads, CHUNK_ELEMENTS)
    return codes.reshape(data.shape), np.asarray(scale, dtype=_F32).reshape(())


#: The fast paths :func:`quantize_w4a8` composes (each byte-identical to its reference stage).
_W4A8_STAGES = W4A8Stages(quantize_fp8, decode, quantize_int4, pack_int4)


@containers()
def quantize_w4a8(w: object, *, profile: str = "quark") -> W4A8:
    """:func:`mxformats.schemes.w4a8.quantize_w4a8`, the same bytes: the reference's two stages
    and packing (:func:`~mxformats.schemes.w4a8.quantize_w4a8_with`) done by
    :func:`quantize_fp8`, :func:`decode`, :func:`quantize_int4` (per channel) and
    :func:`pack_int4`, each on :func:`workers` threads. Spec: w4a8.md."""
    return reference_w4a8.quantize_w4a8_with(_W4A8_STAGES, w, profile=profile)


@containers()
@_with_signature_of(reference_w4a8.dequantize_w4a8)
def dequantize_w4a8(
    weight: ArrayLike | W4A8, weight_scale: ArrayLike | None,
    weight_scale_2: ArrayLike | None, *, dtype: DTypeLike, threads: int | None,
) -> NDArray[np.generic]:
    """:func:`mxformats.schemes.w4a8.dequantize_w4a8`, the same bytes, fast to float32.

    Fast path: int32 words ``[O, W]``, a float32 scalar ``weight_scale`` and float32
    ``weight_scale_2 [O]`` whose folded products ``float32(s2 × s1)`` (the reference's) are
    all finite, ``dtype`` float32. The reference multiplies ``float32(q) × f`` in float32 and
    rounds the product to ``dtype`` through float64, which for float32 changes nothing: the
    float32 multiply is the whole result, overflow to ±Inf included, written in cache-sized
    row chunks. The codes come from :func:`unpack_int4`. Spec: w4a8.md, "Dequantization".
    """
    if isinstance(weight, W4A8):
        weight, weight_scale, weight_scale_2 = weight
    words = weight if isinstance(weight, np.ndarray) else None
    s1 = weight_scale if isinstance(weight_scale, np.ndarray) else None
    s2 = weight_scale_2 if isinstance(weight_scale_2, np.ndarray) else None
    if (
        words is None or s1 is None or s2 is None
        or words.dtype != np.int32 or words.ndim != 2 or words.size == 0
        or s1.dtype != _F32 or s1.size != 1
        or s2.dtype != _F32 or s2.shape != (words.shape[0],)
        or np.dtype(dtype) != _F32
    ):
        return reference_w4a8.dequantize_w4a8(weight, weight_scale, weight_scale_2, dtype=dtype)
    with np.errstate(over="ignore"):  # the reference's folding: Inf where it overflows
        folded = s2 * s1.reshape(())
    if not np.isfinite(folded).all():
        return reference_w4a8.dequantize_w4a8(weight, weight_scale, weight_scale_2, dtype=dtype)
    q = unpack_int4(words, layout=reference_w4a8.W4A8_CONSUMERS["vllm"].layout, axis=-1,
                    threads=threads)
    out = np.empty(q.shape, dtype=np.float32)
    factor = folded[:, None]

    def work(lo: int, hi: int) -> None:
        with np.errstate(over="ignore"):  # overflow to Inf is the specified result
            np.multiply(q[lo:hi], factor[lo:hi], out=out[lo:hi])

    _parallel(q.shape[0], work, threads, max(1, CHUNK_ELEMENTS // q.shape[1]))
    return out


# -- FP8 block quantize ---------------------------------------------------------------------------


@containers()
def quantize_fp8_block(
    x: object,
    *,
    block: tuple[int, int] = (128, 128),
    profile: str = "deepseek",
    threads: int | None = None,
) -> FP8BlockArray:
    """:func:`mxformats.schemes.fp8_block.quantize_fp8_block`, the same bytes, fast.

    The reference computes the scales and the scaled elements with vectorised numpy in the
    producer's own types (float32, or the input dtype); here its element cast is
    :func:`encode`'s table lookup (nearest-even, saturating), which gives the codec's codes for
    every float32, bfloat16 and float16 value, NaN included. Every tile is quantized on its own
    (its scale is its own maximum's), so a 2-D float input is cut into pieces of whole tiles,
    one tile row high and about ``CHUNK_ELEMENTS`` wide, each quantized by the reference
    (:func:`~mxformats.schemes.fp8_block.quantize_fp8_block_with`: a partial edge tile is
    padded there as in one call) in cache, on up to ``threads`` threads. Other inputs go to
    the reference whole. Spec: fp8-block.md.
    """

    def table_encoder(pool: int | None) -> reference_fp8_block.Encoder:
        return lambda fmt, values: encode(fmt, values, overflow="saturate", threads=pool)

    def reference(part: object, pool: int | None) -> FP8BlockArray:
        return reference_fp8_block.quantize_fp8_block_with(table_encoder(pool), part,
                                                           block=block, profile=profile)

    data = _float_input(x)
    try:
        tile = reference_fp8_block.check_block(block)
    except ValueError:
        tile = None
    if (
        data is None
        or tile is None
        or profile not in reference_fp8_block.PROFILES
        or data.ndim != 2
        or data.size == 0
        or data.dtype not in reference_fp8_block.INPUT_DTYPES
    ):
        return reference(x, threads)
    (bm, bn), (rows, cols) = tile, reference_fp8_block.scale_grid(data.shape, tile)
    wide = max(1, CHUNK_ELEMENTS // (bm * bn))  # tiles per piece along a tile row
    pieces = [(r, c) for r in range(rows) for c in range(0, cols, wide)]
    codes = np.empty(data.shape, dtype=np.uint8)
    scales = np.empty((rows, cols), dtype=reference(data[:1, :1], 1).scales.dtype)

    def work(lo: int, hi: int) -> None:
        for r, c in pieces[lo:hi]:
            part = np.s_[r * bm:(r + 1) * bm, c * bn:(c + wide) * bn]
            result = reference(data[part], 1)
            codes[part], scales[r, c:c + wide] = result.codes, result.scales[0]

    _parallel(len(pieces), work, threads, 1)
    return FP8BlockArray(codes, scales, tile, reference_fp8_block.PROFILES[profile].name)


# -- FP8 block dequantize -------------------------------------------------------------------


def _fp8_block_rows(
    codes: NDArray[np.uint8], table: NDArray[np.float32], column_scales: NDArray[np.float32],
    tile_rows: int, out: NDArray[np.float32], lo: int, hi: int,
) -> None:
    """``out[lo:hi] = table[codes[lo:hi]] * column_scales[row // tile_rows]``, by chunks of
    about ``CHUNK_ELEMENTS``, the multiply once per run of rows that share a tile row."""
    columns = codes.shape[1]
    step = max(1, CHUNK_ELEMENTS // columns)
    index = np.empty((min(step, hi - lo), columns), dtype=np.intp)
    for start in range(lo, hi, step):
        stop = min(start + step, hi)
        np.copyto(index[: stop - start], codes[start:stop])
        np.take(table, index[: stop - start], out=out[start:stop], mode="clip")
        first = start
        while first < stop:
            tile = first // tile_rows
            last = min(stop, (tile + 1) * tile_rows)
            out[first:last] *= column_scales[tile]
            first = last


@containers()
@_with_signature_of(reference_fp8_block.dequantize_fp8_block)
def dequantize_fp8_block(
    codes: ArrayLike | FP8BlockArray, scales: ArrayLike | None, *, block: tuple[int, int],
    profile: str, dtype: DTypeLike, threads: int | None,
) -> NDArray[np.generic]:
    """:func:`mxformats.schemes.fp8_block.dequantize_fp8_block`, the same bytes, fast to
    float32.

    Fast path: 2-D uint8 codes (not empty), float16/bfloat16/float32/float64 scales of the
    grid's shape (partial edge tiles included), a valid ``block`` and ``profile``, ``dtype``
    float32. The reference's arithmetic, ``float32(code) × float32(scale)`` rounded once to
    float32 (vLLM ``scaled_dequantize``), with the code's value a lookup in the reference's
    own decode table and each tile row's scales widened across its columns once. Every NaN
    output is the canonical quiet NaN 0x7FC00000, as in the reference: under finite scales a
    NaN comes only from a NaN code, whose table value is that NaN and which the multiply
    returns as it is; a call with a NaN or infinite scale (a negative or payload NaN, a NaN
    code times a NaN scale, ``Inf · 0``) has its NaN outputs rewritten. Every other input
    goes to the reference. Spec: spec/fp8-block.md §6, "Dequantization".
    """

    def reference() -> NDArray[np.generic]:
        return reference_fp8_block.dequantize_fp8_block(codes, scales, block=block,
                                                        profile=profile, dtype=dtype)

    if isinstance(codes, FP8BlockArray) and scales is None:
        return dequantize_fp8_block(codes.codes, codes.scales, block=codes.block,
                                    profile=codes.profile, dtype=dtype, threads=threads)
    c = codes if isinstance(codes, np.ndarray) else None
    s = scales if isinstance(scales, np.ndarray) else None
    record = reference_fp8_block.PROFILES.get(profile) if isinstance(profile, str) else None
    try:
        tile = reference_fp8_block.check_block(block)
    except ValueError:
        tile = None
    if (
        not _LITTLE_ENDIAN
        or c is None
        or s is None
        or record is None
        or tile is None
        or np.dtype(dtype) != _F32
        or c.dtype != np.uint8
        or c.ndim != 2
        or c.size == 0
        or s.dtype not in (_F32, BF16, _F16, np.dtype(np.float64))
        or s.shape != reference_fp8_block.scale_grid(c.shape, tile)
    ):
        return reference()
    tile_scales = s.astype(_F32)
    table = _fp8_values(record.code_format)
    nonfinite_scales = not np.isfinite(tile_scales).all()
    column_scales = np.repeat(tile_scales, tile[1], axis=1)[:, : c.shape[1]]
    column_scales = np.ascontiguousarray(column_scales)
    rows = np.ascontiguousarray(c)
    out = np.empty(c.shape, dtype=np.float32)

    def work(lo: int, hi: int) -> None:
        with np.errstate(over="ignore", invalid="ignore"):  # as the reference: Inf, NaN
            _fp8_block_rows(rows, table, column_scales, tile[0], out, lo, hi)
        if nonfinite_scales:
            out[lo:hi] = canonical_nan(out[lo:hi])

    _parallel(c.shape[0], work, threads, max(1, CHUNK_ELEMENTS // c.shape[1]))
    return out


#: Each fast path and the reference whose bytes it returns (tests and benchmarks swap them).
REFERENCES: dict[Callable[..., Any], Callable[..., Any]] = {
    quantize_mx: reference_mx.quantize_mx, dequantize_mx: reference_mx.dequantize_mx,
    quantize_nvfp4: reference_nvfp4.quantize_nvfp4,
    dequantize_nvfp4: reference_nvfp4.dequantize_nvfp4,
    encode: reference_codec.encode, decode: reference_codec.decode,
    pack_int4: reference_int4.pack_int4, unpack_int4: reference_int4.unpack_int4,
    quantize_int4: reference_int4.quantize_int4, dequantize_int4: reference_int4.dequantize_int4,
    quantize_fp8: reference_fp8.quantize_fp8, quantize_w4a8: reference_w4a8.quantize_w4a8,
    dequantize_w4a8: reference_w4a8.dequantize_w4a8,
    quantize_fp8_block: reference_fp8_block.quantize_fp8_block,
    dequantize_fp8_block: reference_fp8_block.dequantize_fp8_block,
}
