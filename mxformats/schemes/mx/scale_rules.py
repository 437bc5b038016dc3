"""MX block scale rules: one function per rule, shared by the producer profiles.

Every rule takes a block's ``amax`` (the largest magnitude, as the exact float64 value of the
producer's arithmetic type; NaN where the producer's maximum is NaN) and the element format, and
returns a :class:`Scale`: the E8M0 byte the producer *stores* and the factor ``mult`` it
*applies* to the elements (``q = x * mult``). The two differ on purpose where a producer
quantizes against one power of two and writes another (torchao's 2^-126 clamp, Quark's 0x01 for
2^-127, compressed-tensors' 0x7F for an infinite scale). Spec: ``spec/mx.md``, "Scale rules".

Bit-level rules work on the IEEE bits of ``amax`` in the producer's type: float32 unless stated;
compressed-tensors and Quark's HIP kernel use the input's own 16-bit type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mxformats.arith import BF16
from mxformats.formats import E8M0

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from mxformats.formats import Format

E8M0_BIAS = E8M0.bias
E8M0_NAN = E8M0.nan_codes[0]
_F32_EXPONENT = 0x7F800000
_F32_SIGN_EXPONENT = 0xFF800000
_F32_CANONICAL_NAN = 0x7FC00000


@dataclass(frozen=True)
class Scale:
    """One block scale per block.

    Attributes:
        byte: the E8M0 byte written (uint8).
        mult: the factor the producer applies to each element, ``q = x * mult`` (float64: a
            power of two, 0, or NaN). ``x / 2**e`` is written ``mult = 2**-e``; dividing by +Inf
            is ``mult = 0`` (IEEE gives the same ±0 and NaN).
        nan_block: blocks written as a NaN block (``byte`` 0xFF, every code 0x00) whatever the
            elements are (``ocp`` and ``microxcaling``).
    """

    byte: NDArray[np.uint8]
    mult: NDArray[np.float64]
    nan_block: NDArray[np.bool_]


def _scale(byte: NDArray[np.integer], mult: NDArray[np.float64],
           nan_block: NDArray[np.bool_] | None = None) -> Scale:
    if nan_block is None:
        nan_block = np.zeros(byte.shape, dtype=bool)
    return Scale(byte.astype(np.uint8), mult.astype(np.float64), nan_block)


# -- IEEE helpers ---------------------------------------------------------------------------


def f32_bits(v: NDArray[np.float64]) -> NDArray[np.uint32]:
    """float32 bits of exact float32 values; NaN becomes the canonical quiet NaN 0x7FC00000."""
    with np.errstate(invalid="ignore", over="ignore"):
        bits = v.astype(np.float32).view(np.uint32)
    return np.where(np.isnan(v), np.uint32(_F32_CANONICAL_NAN), bits).astype(np.uint32)


def f32_from_bits(bits: NDArray[np.integer]) -> NDArray[np.float64]:
    return np.asarray(bits, dtype=np.uint32).view(np.float32).astype(np.float64)


def f32_div(a: NDArray[np.float64], b: float) -> NDArray[np.float64]:
    """``a / b`` rounded once to float32 (IEEE division of float32 operands)."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        quotient: NDArray[np.float64] = (a.astype(np.float32) / np.float32(b)).astype(np.float64)
    return quotient


def log2f(v: NDArray[np.float64]) -> NDArray[np.float64]:
    """torch's float32 ``log2`` near integers: log2 rounded to float32 (log2(0) = -inf).

    torch's CPU ``log2`` is not correctly rounded everywhere, but its floor and ceil agree with
    the correctly rounded value on every float32 within 200 ulps of a power of two and on 2e6
    random float32 (checked in tests/test_mx_producers.py). A value just below 2**k rounds up to
    k for |k| >= 4: microxcaling's FLOOR and torchao's RCEIL inherit that.

    numpy's float64 ``log2`` is CPU-specific in its last bit (its SIMD paths, issue 26 §6),
    but rounded to float32 it gave the same bits for every positive finite float32 (2**31 -
    2**23 inputs) at each of numpy 2.4.6's X86_V2 (baseline), X86_V3, X86_V4, AVX512_ICL and
    AVX512_SPR levels (NPY_DISABLE_CPU_FEATURES on one host); ``.ci/dispatch.py`` runs the
    spec at every level of the CI host.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log2(v).astype(np.float32).astype(np.float64)


def _exact_floor_log2(v: NDArray[np.float64]) -> NDArray[np.float64]:
    """floor(log2(v)) exactly for v > 0 (frexp), -inf for 0, inf for inf, NaN for NaN."""
    finite = np.isfinite(v) & (v > 0)
    _, exponent = np.frexp(np.where(finite, v, 1.0))
    result = (exponent - 1).astype(np.float64)
    result = np.where(v == 0, -np.inf, result)
    result = np.where(np.isinf(v), np.inf, result)
    return np.where(np.isnan(v), np.nan, result)


def _pow2(e: NDArray[np.float64]) -> NDArray[np.float64]:
    """2**e for integer-valued e (exact; NaN stays NaN)."""
    powers = np.ldexp(1.0, np.where(np.isnan(e), 0, e).astype(np.int32))
    return np.where(np.isnan(e), np.nan, powers)


# -- OCP ------------------------------------------------------------------------------------


def ocp_floor(amax: NDArray[np.float64], elem: Format) -> Scale:
    """OCP MX v1.0 §6.3, Algorithm 1: ``e = floor(log2(amax)) - emax_elem``, clamped to
    [-127, 127], exactly (frexp, no float log2). The gaps are filled as spec/mx.md §3 states: a
    block holding NaN or ±Inf is a NaN block (0xFF, codes 0x00); an all-zero block has
    log2(0) = -inf and so e = -127 (0x00); a tiny block's elements are quantized against
    2**-127 itself, so 0x00 decodes exactly to the scale used; e > 127 (float64 input only)
    clamps to 127 and the elements saturate.
    """
    assert elem.emax is not None
    e = np.clip(_exact_floor_log2(amax) - elem.emax, -E8M0_BIAS, E8M0_BIAS)
    nan_block = ~np.isfinite(amax)
    e = np.where(nan_block, 0, e)
    byte = np.where(nan_block, E8M0_NAN, e + E8M0_BIAS)
    return _scale(byte, _pow2(-e), nan_block)


# -- torchao 0.18 to_mx ---------------------------------------------------------------------


def torchao_bits(amax: NDArray[np.float64], elem: Format, mode: str) -> Scale:
    """torchao ``to_mx`` FLOOR / CEIL / EVEN (mx_tensor.py L214-L360): the float32 exponent
    field of amax (EVEN first adds ``1 << (22 - mbits)`` and masks the mantissa; CEIL adds one
    when the mantissa is nonzero), minus ``target_max_pow2`` (= emax_elem), clamped to
    [-127, 128], biased; NaN amax gives 255. Elements are divided by ``bits(byte << 23)``
    clamped to at least 2**-126 (so byte 0x00 quantizes with 2**-126; pytorch/ao#1104) and
    byte 255 divides by +Inf.
    """
    assert elem.emax is not None
    bits = f32_bits(amax).astype(np.int64)
    if mode == "even":
        bits = (bits + (1 << (22 - elem.mbits))) & _F32_SIGN_EXPONENT
    unbiased = ((bits >> 23) & 0xFF) - E8M0_BIAS - elem.emax
    if mode == "ceil":
        unbiased = unbiased + ((f32_bits(amax) & 0x7FFFFF) != 0)
    byte = np.clip(unbiased, -E8M0_BIAS, E8M0_BIAS + 1) + E8M0_BIAS
    byte = np.where(np.isnan(amax), E8M0_NAN, byte)
    divisor_exponent = np.maximum(byte, 1) - E8M0_BIAS
    mult = np.where(byte == E8M0_NAN, 0.0, _pow2(-divisor_exponent.astype(np.float64)))
    return _scale(byte, mult)


def torchao_rceil(amax: NDArray[np.float64], elem: Format) -> Scale:
    """torchao ``_to_mx_rceil`` (mx_tensor.py L109, eager fallback): ``descale = amax/max_pos``
    in float32; byte = clamp(ceil(log2(descale)), -127, 127) + 127, NaN 255, Inf 254. Elements
    are multiplied by ``2**(127 - byte)``, except byte 0 by 1.0 (the whole block flushes to
    zero), 254 by 2**-127 and 255 by the NaN descale.
    """
    descale = f32_div(amax, elem.max)
    e = np.clip(np.ceil(log2f(descale)), -E8M0_BIAS, E8M0_BIAS)
    byte = np.where(np.isinf(descale), 254, np.where(np.isnan(e), 0, e) + E8M0_BIAS)
    byte = np.where(np.isnan(descale), E8M0_NAN, byte)
    mult = _pow2((E8M0_BIAS - byte).astype(np.float64))
    mult = np.where(byte == 0, 1.0, mult)
    mult = np.where(byte == E8M0_NAN, np.nan, mult)
    return _scale(byte, mult)


# -- triton_kernels downcast_to_mxfp_torch ---------------------------------------------------


def _triton_from_bits(scale_bits: NDArray[np.int64]) -> Scale:
    """``quant_scale = 0 if scale == 0 else 1/scale``; the byte is ``bits >> 23``."""
    scale = f32_from_bits(scale_bits)
    with np.errstate(divide="ignore"):
        mult = np.where(scale == 0, 0.0, 1.0 / np.where(scale == 0, 1.0, scale))
    return _scale(scale_bits >> 23, mult)


def triton_round_up(amax: NDArray[np.float64], elem: Format) -> Scale:
    """triton_kernels ROUND_UP (mxfp.py@018a674): ``ds = amax / max_q`` in float32, then
    ``(bits(ds) + 0x7FFFFF) & 0x7F800000`` in 32-bit arithmetic. A NaN amax carries out of the
    word: scale 0, byte 0x00, every element multiplied by 0 (the NaN is lost)."""
    bits = f32_bits(f32_div(amax, elem.max)).astype(np.int64)
    return _triton_from_bits(((bits + 0x7FFFFF) & 0xFFFFFFFF) & _F32_EXPONENT)


def triton_round_down(amax: NDArray[np.float64], elem: Format) -> Scale:
    """triton_kernels ROUND_DOWN: ``ds = amax / 2**floor(log2 max_q)`` (= amax / 2**emax) in
    float32, exponent bits kept. A subnormal ds (amax < 2**-124 for E2M1) gives scale 0 and a
    flushed block."""
    assert elem.emax is not None
    bits = f32_bits(f32_div(amax, 2.0**elem.emax)).astype(np.int64)
    return _triton_from_bits(bits & _F32_EXPONENT)


# -- the "even" power of two of Quark, Quark Triton and vLLM --------------------------------


def even_exponent(amax: NDArray[np.float64], elem: Format, nan_to_inf: bool) -> NDArray[np.float64]:
    """Quark ``even_round`` / vLLM's kernel: ``bits(amax) + (1 << (22 - mbits))``, mantissa
    masked off, ``floor(log2(.)) - emax`` clamped to [-127, 127] (zero gives -127). NaN amax
    stays NaN (Quark's ``nan_mask``) or, with ``nan_to_inf``, becomes +Inf by the bit
    arithmetic and so 127 (vLLM's Triton kernel under NaN-propagating max)."""
    assert elem.emax is not None
    bits = f32_bits(amax).astype(np.int64)
    rounded = f32_from_bits(((bits + (1 << (22 - elem.mbits))) & 0xFFFFFFFF) & _F32_SIGN_EXPONENT)
    if not nan_to_inf:
        rounded = np.where(np.isnan(amax), np.nan, rounded)
    return np.clip(_exact_floor_log2(rounded) - elem.emax, -E8M0_BIAS, E8M0_BIAS)


def quark_export(amax: NDArray[np.float64], elem: Format) -> Scale:
    """Quark 0.13 export: ``even_round`` scale ``s``; elements ``x / s``; the byte is
    ``to_e8m0_uint8(s) = round(log2(max(s, 2**-126))) + 127``, so a 2**-127 scale is written
    0x01. A NaN scale goes through ``round(NaN).to(int16)``, 0 on x86: byte 0x7F (pinned)."""
    e = even_exponent(amax, elem, nan_to_inf=False)
    byte = np.where(np.isnan(e), E8M0_BIAS, np.maximum(np.nan_to_num(e), -126) + E8M0_BIAS)
    return _scale(byte, _pow2(-e))


def _bits_byte(e: NDArray[np.float64]) -> NDArray[np.int64]:
    """``bits(2**e) >> 23``: 0x00 for 2**-127 (float32 subnormal), 0xFF for NaN."""
    return np.where(np.isnan(e), E8M0_NAN, np.nan_to_num(e) + E8M0_BIAS).astype(np.int64)


def quark_triton(amax: NDArray[np.float64], elem: Format) -> Scale:
    """Quark ``downcast_to_mxfp_torch`` EVEN (kernel/mx/triton.py L715-L778): ``even_round``
    scale, byte ``bits(s) >> 23`` (NaN 0xFF, 2**-127 0x00), elements ``x * (1/s)``."""
    e = even_exponent(amax, elem, nan_to_inf=False)
    return _scale(_bits_byte(e), _pow2(-e))


def vllm_even(amax: NDArray[np.float64], elem: Format) -> Scale:
    """vLLM ``_compute_quant_and_scale`` (mxfp4_utils.py): the even rule by bit arithmetic, a
    NaN maximum becoming +Inf (scale 2**127, byte 0xFE), byte ``bits(s) >> 23``."""
    e = even_exponent(amax, elem, nan_to_inf=True)
    return _scale(_bits_byte(e), _pow2(-e))


# -- compressed-tensors, in the input's own type ----------------------------------------------

_HALF_TYPES = {
    "bfloat16": (BF16, 7),
    "float16": (np.dtype(np.float16), 10),
    "float32": (np.dtype(np.float32), 23),
}


def _own_bits(
    amax: NDArray[np.float64], dtype: np.dtype[np.generic]
) -> tuple[NDArray[np.int64], int, int]:
    """The bits of amax in ``dtype`` (16 or 32 bits), with its mantissa width and word mask."""
    _, mbits = _HALF_TYPES[dtype.name]
    width = 8 * dtype.itemsize
    uint = np.uint16 if width == 16 else np.uint32
    with np.errstate(invalid="ignore"):
        bits = amax.astype(np.float32).astype(dtype).view(uint).astype(np.int64)
    canonical_nan = ((1 << (width - 1)) - 1) ^ ((1 << (mbits - 1)) - 1)
    bits = np.where(np.isnan(amax), canonical_nan, bits)
    return bits, mbits, (1 << width) - 1


def _from_own_bits(bits: NDArray[np.int64], dtype: np.dtype[np.generic]) -> NDArray[np.float64]:
    uint = np.uint16 if dtype.itemsize == 2 else np.uint32
    return bits.astype(uint).view(dtype).astype(np.float32).astype(np.float64)


def ct_even(amax: NDArray[np.float64], elem: Format, dtype: np.dtype[np.generic]) -> Scale:
    """compressed-tensors 0.20 ``generate_mx_scales`` (mxfp_utils.py) in the input's type:
    ``round_to_power_2`` adds ``1 << (mbits_in - 2)`` and masks the mantissa, then
    ``127 + floor(log2(.)) - 2`` clamped to [0, 255]: no 254 clamp, so amax >= 1.75 * 2**127
    (or NaN, or Inf) gives 255, scale +Inf, every element x / Inf. ``compress_mx_scale`` then
    writes ``127 + int32(floor(log2(scale)))``: for +Inf, int32(inf) is INT_MIN on x86 and the
    stored byte is 0x7F (pinned; executed with compressed-tensors 0.20.1)."""
    assert elem.emax is not None
    bits, mbits, word = _own_bits(amax, dtype)
    sign_exponent = word & ~((1 << mbits) - 1)
    rounded = _from_own_bits(((bits + (1 << (mbits - 2))) & word) & sign_exponent, dtype)
    raw = np.clip(E8M0_BIAS + _exact_floor_log2(rounded) - elem.emax, 0, 255)
    byte = np.where(raw == 255, E8M0_BIAS, raw)
    mult = np.where(raw == 255, 0.0, _pow2(E8M0_BIAS - raw))
    return _scale(byte, mult)


# -- microxcaling ---------------------------------------------------------------------------


def microxcaling_floor(amax: NDArray[np.float64], elem: Format) -> Scale:
    """microxcaling ``_shared_exponents`` + ``_quantize_mx`` (mx_ops.py): ``floor(torch.log2(
    amax))`` in float32 (zero amax taken as 2**-126), minus emax; above 127 (NaN, Inf) the
    shared exponent is NaN and the whole block is NaN; below -127 it is -127."""
    assert elem.emax is not None
    e = np.floor(log2f(np.where(amax == 0, 2.0**-126, amax))) - elem.emax
    nan_block = ~np.isfinite(amax)
    e = np.where(nan_block, 0, np.maximum(e, -E8M0_BIAS))
    byte = np.where(nan_block, E8M0_NAN, e + E8M0_BIAS)
    return _scale(byte, _pow2(-e), nan_block)


# -- Quark's HIP qdq kernel, in the input's 16-bit type ------------------------------------------


def hip_qdq_even(amax: NDArray[np.float64], elem: Format, dtype: np.dtype[np.generic]) -> Scale:
    """Quark HIP ``qdq_mxfp4_kernel`` (csrc/mxfp4/fake_kernels.cuh L152-L199), computed in the
    input's fp16/bf16: the block max (``__hmax``, which ignores NaN) gets ``1 << (mbits - 2)``
    added to its 16 bits and the mantissa masked; ``scale_exp = max(0, 127 + min(floor(hlog2(
    max)) - 2, 127))``; the scale is ``half(powf(2, scale_exp - 127))`` (fp16: +Inf from 2**16 up).

    A rounded max of 0 (all-zero blocks; fp16 max < 0.75 * 2**-14; bf16 max < 0.75 * 2**-126)
    makes the source compute ``INT_MIN - 2`` (undefined): implementation-defined, we take the
    saturating reading, byte 0x00 and elements against 2**-127 exactly. An infinite rounded max
    (Inf, or fp16 max >= 57344) gives ``INT_MAX - 2`` and byte 0xFE.
    """
    assert elem.emax is not None
    bits, mbits, word = _own_bits(amax, dtype)
    sign_exponent = word & ~((1 << mbits) - 1)
    rounded = _from_own_bits(((bits + (1 << (mbits - 2))) & word) & sign_exponent, dtype)
    k = _exact_floor_log2(rounded)
    byte = np.clip(E8M0_BIAS + np.minimum(k - elem.emax, E8M0_BIAS), 0, 254)
    byte = np.where(rounded == 0, 0, byte)
    with np.errstate(over="ignore"):
        half_scale = _pow2(byte - E8M0_BIAS).astype(np.float32).astype(dtype).astype(np.float64)
    mult = np.where(np.isinf(half_scale), 0.0, 1.0 / np.where(half_scale == 0, 1.0, half_scale))
    mult = np.where(rounded == 0, 2.0**E8M0_BIAS, mult)
    return _scale(byte, mult)
