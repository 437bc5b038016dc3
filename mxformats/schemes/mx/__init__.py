"""MX block scaling (OCP MX v1.0 §6.3) and each producer's and consumer's variant of it.

A *profile* names one implementation: ``quantize_mx(x, profile="torchao-floor")`` writes the
bytes torchao 0.18's ``to_mx`` writes, ``dequantize_mx(..., profile="quark-hip-fp16")`` reads
them as Quark's HIP kernel does. ``ocp`` is the specification with its gaps filled. Every
profile computes in the arithmetic type its producer uses, so equal values given as bfloat16
and as float32 may legitimately encode differently. Spec: ``spec/mx.md`` (the algorithm, the
gaps and how each profile fills them, the input classification, the divergence matrix) and
``spec/vectors/mx/<profile>.json``.

>>> import numpy as np
>>> codes, scales = quantize_mx(np.array([6.0, 5.0] + [0.0] * 30, dtype=np.float32))
>>> hex(int(scales[0])), hex(int(codes[0]))  # 6 -> 0x7, 5.0 (a tie) -> 0x6 (4.0), packed
('0x7f', '0x67')
>>> quantize_mx(np.ones(32), profile="vllm")  # doctest: +ELLIPSIS
Traceback (most recent call last):
ValueError: profile 'vllm' does not take float64 input: the kernel static_asserts a bfloat16 ...
>>> dequantize_mx(*quantize_mx(np.float32([6.0, 5.0] + [0.0] * 30)))[:3].tolist()
[6.0, 4.0, 0.0]
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mxformats.arith import FLOAT_DTYPES, as_array, check_axis, round_to
from mxformats.containers import containers
from mxformats.formats import E2M1, E8M0, Format, get_format
from mxformats.packing import integer_codes, pack_fp4, unpack_fp4
from mxformats.pairing import consumer_for
from mxformats.records import DeprecatedAliases
from mxformats.schemes.mx.consumers import CONSUMERS, MXConsumer, decode_blocks, get_consumer
from mxformats.schemes.mx.elements import encode_elements, scaled
from mxformats.schemes.mx.producers import PRODUCERS, MXProducer, get_producer

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike, NDArray

__all__ = [
    "CONSUMERS",
    "PRODUCERS",
    "MXArray",
    "block_max",
    "check_axis",
    "check_elem",
    "check_shape",
    "consumer_dtype",
    "dequantize_mx",
    "get_consumer",
    "get_producer",
    "pack_fp4",
    "quantize_mx",
    "unpack_fp4",
]

#: The consumer :func:`dequantize_mx` decodes plain arrays with when no profile is given.
DEFAULT_CONSUMER = "ocp"

@dataclass(frozen=True, eq=False)
class MXArray:
    """The result of :func:`quantize_mx`; unpacks as ``codes, scales = quantize_mx(...)``.

    ``codes``: uint8, two 4-bit codes per byte along ``axis`` (element 2k in the low nibble) for
    E2M1, one code per byte for wider elements. ``scales``: uint8 E8M0 bytes, ``x.shape`` with
    ``axis`` divided by ``block_size`` (rounded up where the producer takes a short last block).
    """

    codes: NDArray[np.uint8]
    scales: NDArray[np.uint8]
    elem: Format
    block_size: int
    axis: int
    profile: str

    def __iter__(self) -> Iterator[NDArray[np.uint8]]:
        yield self.codes
        yield self.scales


# -- inputs ---------------------------------------------------------------------------------


def _as_float_array(x: object) -> NDArray[np.generic]:
    """``x`` as a numpy array of its own float type (float16, bfloat16, float32 or float64).

    torch tensors keep their dtype (bfloat16 becomes ``ml_dtypes.bfloat16``); Python floats and
    lists become float64. Integer data is refused.
    """
    arr = as_array(x)
    if arr.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"quantize_mx takes float16, bfloat16, float32 or float64 data, got {arr.dtype}"
        )
    return arr


def check_elem(elem: Format | str, allowed: tuple[Format, ...], what: str) -> Format:
    """The :class:`~mxformats.Format` named by ``elem``; ValueError naming ``allowed`` when
    the profile ``what`` does not define it."""
    fmt = get_format(elem)
    if fmt not in allowed:
        raise ValueError(
            f"{what} does not write {fmt.name} elements; it defines "
            f"{', '.join(f.name for f in allowed)}"
        )
    return fmt


def _to_blocks(a: NDArray[np.float64], block_size: int) -> NDArray[np.float64]:
    """Last axis cut into blocks of ``block_size`` (a short last block padded with +0.0)."""
    n = a.shape[-1]
    count = -(-n // block_size)
    pad = count * block_size - n
    if pad:
        a = np.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, pad)])
    return a.reshape(*a.shape[:-1], count, block_size)


def block_max(magnitudes: NDArray[np.float64], *, nan_ignoring: bool) -> NDArray[np.float64]:
    """The maximum of each block (last axis) of ``|x|``: NaN if any element is NaN
    (``torch.amax``), or with ``nan_ignoring`` the maximum of the other elements, NaN only for
    an all-NaN block (a chain of CUDA ``__hmax``)."""
    if not nan_ignoring:
        propagating: NDArray[np.float64] = np.max(magnitudes, axis=-1)
        return propagating
    # Not np.fmax.reduce: numpy 2.4 returns NaN for [inf, NaN with payloads, ...].
    nan = np.isnan(magnitudes)
    amax = np.where(nan, -np.inf, magnitudes).max(axis=-1)
    return np.where(nan.all(axis=-1), np.nan, amax)


def check_shape(producer: MXProducer, n: int, elem: Format, block_size: int) -> None:
    """ValueError unless ``producer`` defines ``n`` elements of ``elem`` along the quantized
    axis in blocks of ``block_size`` (its block sizes, a short last block, E2M1's even length)."""
    what = f"profile {producer.name!r}"
    if block_size < 1:
        raise ValueError(f"block_size must be positive, got {block_size}")
    if producer.block_sizes is not None and block_size not in producer.block_sizes:
        raise ValueError(f"{what} uses blocks of {producer.block_sizes[0]}, not {block_size}")
    if n % block_size and not producer.partial_blocks:
        raise ValueError(
            f"{what}: the quantized axis has {n} elements, not a multiple of block_size "
            f"{block_size}, and the producer defines no short last block"
        )
    if elem is E2M1 and n % 2:
        raise ValueError(f"E2M1 codes pack two per byte: the quantized axis needs an even "
                         f"length, got {n}")


# -- quantize -------------------------------------------------------------------------------


@containers()
def quantize_mx(
    x: object, elem: Format = E2M1, *, block_size: int = 32, axis: int = -1, profile: str = "ocp"
) -> MXArray:
    """Quantize ``x`` to MX blocks along ``axis`` exactly as the producer ``profile`` does.

    ``x``: float16, bfloat16 (``ml_dtypes``), float32 or float64 numpy data or a torch tensor,
    any shape and strides; the dtypes a profile accepts are those its producer accepts (others
    raise ``ValueError`` saying why). ``elem``: the element format (E2M1 for MXFP4; E2M3, E3M2,
    E4M3FN, E5M2 where the producer defines them). Blocks of ``block_size`` consecutive elements
    along ``axis`` share one E8M0 scale. Returns an :class:`MXArray`. Spec: spec/mx.md.
    """
    producer = get_producer(profile)
    fmt = check_elem(elem, producer.elements, f"profile {profile!r}")
    data = _as_float_array(x)
    if data.dtype not in producer.dtypes:
        raise ValueError(
            f"profile {profile!r} does not take {data.dtype} input: {producer.dtype_reason}"
        )
    if data.ndim == 0:
        raise ValueError("quantize_mx needs at least one dimension")
    ax = check_axis(data.ndim, axis)
    with np.errstate(invalid="ignore"):  # widening a signalling NaN quiets it
        moved = np.moveaxis(data, ax, -1).astype(np.float64)
    n = moved.shape[-1]
    check_shape(producer, n, fmt, block_size)
    blocks = _to_blocks(moved, block_size)
    magnitudes = np.abs(blocks)
    amax = block_max(magnitudes, nan_ignoring=producer.nan_ignoring_max)
    scale = producer.scale_rule(amax, fmt, data.dtype)
    rules = producer.element_rules(data.dtype)
    q, nan_negative = scaled(blocks, scale.mult[..., None], rules)
    arithmetic = producer.arithmetic_dtype(data.dtype)
    if arithmetic is not None:
        q = round_to(q, arithmetic)
    codes = encode_elements(q, nan_negative, fmt, rules)
    codes = np.where(scale.nan_block[..., None], 0, codes).astype(np.uint8)
    codes = codes.reshape(*codes.shape[:-2], codes.shape[-2] * block_size)[..., :n]
    codes = np.ascontiguousarray(np.moveaxis(codes, -1, ax))
    if fmt is E2M1:
        codes = pack_fp4(codes, axis=ax)
    scales = np.ascontiguousarray(np.moveaxis(scale.byte, -1, ax))
    return MXArray(codes, scales, fmt, block_size, ax, profile)


# -- dequantize -----------------------------------------------------------------------------


def consumer_dtype(consumer: MXConsumer, out: np.dtype[np.generic]) -> np.dtype[np.generic]:
    """The consumer's own type for output ``out``: ``out`` itself, or a narrower type of the
    consumer whose values widen exactly into ``out``."""
    if out in consumer.dtypes:
        return out
    for own in consumer.dtypes:
        if out.kind == "f" and out.itemsize > own.itemsize:
            return own
    raise ValueError(
        f"consumer profile {consumer.name!r} computes in "
        f"{', '.join(d.name for d in consumer.dtypes)}; it cannot produce {out} "
        "(ask for one of those, or a wider float type)"
    )


@containers(codes={"codes": "elem", "scales": E8M0})
def dequantize_mx(
    codes: ArrayLike | MXArray,
    scales: ArrayLike | None = None,
    elem: Format = E2M1,
    *,
    block_size: int = 32,
    axis: int = -1,
    profile: str | None = None,
    dtype: DTypeLike = np.float32,
) -> NDArray[np.generic]:
    """Decode MX blocks exactly as the consumer ``profile`` does (an MXArray may be passed).

    ``profile``: a consumer profile, or a producer profile, which decodes with that producer's
    default consumer (:mod:`mxformats.pairing`; ``"quark"`` -> ``"quark-hip-bf16"``). None: the
    MXArray's own producer's default consumer, else ``"ocp"``.

    ``codes``: packed E2M1 bytes (two per byte along ``axis``, element 2k low) or one code per
    byte; ``scales``: E8M0 bytes, the codes' logical shape with ``axis`` divided by
    ``block_size`` (rounded up). The consumer computes in its own type (``ocp``: ``dtype``
    itself, rounding the exact value once); ``dtype`` may be that type or a wider float type
    (exact widening). Overflow, 0x00 and 0xFF follow the profile. Spec: spec/mx.md, "Consumers".
    """
    if isinstance(codes, MXArray):
        if scales is not None:
            raise ValueError("pass either an MXArray or codes and scales, not both")
        mx = codes
        codes, scales, elem, block_size, axis = (
            mx.codes, mx.scales, mx.elem, mx.block_size, mx.axis
        )
        profile = mx.profile if profile is None else profile
    if scales is None:
        raise ValueError("dequantize_mx needs the scales")
    profile = DEFAULT_CONSUMER if profile is None else consumer_for("mx", profile)
    consumer = get_consumer(profile)
    fmt = check_elem(elem, consumer.elements, f"consumer profile {profile!r}")
    out = np.dtype(dtype)
    own = consumer_dtype(consumer, out)
    c = integer_codes(codes, "codes")
    s = integer_codes(scales, "scales")
    ax = check_axis(c.ndim, axis)
    if fmt is E2M1:
        c = unpack_fp4(c, axis=ax)
    if c.size and int(c.max()) >= 1 << fmt.bits:
        raise ValueError(f"{fmt.name} codes are {fmt.bits}-bit; got {int(c.max())}")
    if s.size and int(s.max()) > 0xFF:
        raise ValueError("E8M0 scales are bytes (0..255)")
    n = c.shape[ax]
    want = (*c.shape[:ax], -(-n // block_size), *c.shape[ax + 1:])
    if s.shape != want:
        raise ValueError(f"scales have shape {s.shape}; {n} elements along axis {ax} in blocks "
                         f"of {block_size} need {want}")
    byte = np.repeat(s.astype(np.int64), block_size, axis=ax)
    byte = np.take(byte, np.arange(n), axis=ax)
    values = fmt.values[c.astype(np.int64)]
    result = decode_blocks(consumer, values, byte, own)
    return result if own == out else result.astype(out)


#: The names before the one vocabulary, importable with a DeprecationWarning.
__getattr__ = DeprecatedAliases(__name__, {"Producer": "MXProducer", "Consumer": "MXConsumer"},
                                 globals())
